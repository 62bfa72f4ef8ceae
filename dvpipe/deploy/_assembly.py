"""Assembling a deployment's pieces: backends (``auto`` resolved), the planned pipeline (one, with the
cameras' own backend preferences handed to its planner), and the model hook."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..backends import auto_backends, availability, family, resolve
from ..errors import ConfigError
from ..probe.environment import detect_target
from ._schema import Deployment
from .config import import_entry

if TYPE_CHECKING:
    from ..pipeline import Pipeline

__all__ = ["AUTO_BACKENDS", "resolve_backends", "build_pipeline", "step_budget_notes", "load_model"]

#: the preference order ``backends: auto`` picks from, as the built-in rows of the backend table rank it
#: (:func:`dvpipe.backends.auto_backends`, which :func:`resolve_backends` reads: a family registered later
#: with ``auto`` ranks is tried too); only the available ones are kept, cpu last.
AUTO_BACKENDS = auto_backends()


def resolve_backends(names: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """Expand ``auto`` into the available backends of :func:`~dvpipe.backends.auto_backends`.

    Returns ``(backends, notes)``; notes say why each skipped backend was skipped.
    """
    out: list[str] = []
    notes: list[str] = []
    for name in names:
        if name != "auto":
            if name not in out:
                out.append(name)
            continue
        for cand in auto_backends():
            if cand in out:
                continue
            v = availability(resolve(cand))
            if v.ok:
                out.append(cand)
            else:
                notes.append(f"{cand}: {v.reason}")
    return tuple(out) or ("cpu",), notes


# -------------------------------------------------------------------------------- the pipeline
def build_pipeline(dep: Deployment) -> tuple[Pipeline, list[str]]:
    """The deployment's pipeline (planned) and notes on how ``auto`` backends were resolved.

    Built by the constructors a Python user calls: :meth:`Pipeline.from_mmdet3d_config` (with the
    config as read at load, ``pipeline.mapped``), :meth:`Pipeline.from_profile`, or ``Pipeline(rig,
    stages)``. Cameras with their own ``backends`` are planned on their own preference order by the same
    one pipeline (its ``camera_backends`` argument)."""
    from ..pipeline import Pipeline
    from ..probe.live import planning_cache  # measurements on this device beat the docs (handed to the planner)
    from .sources._probe import with_stream_colour

    dep = with_stream_colour(dep)  # a video file's signalled colour standard, for a plan made before it opens
    p = dep.pipeline
    backends, notes = resolve_backends(p.backends)
    camera_backends: dict[str, tuple[str, ...]] = {}
    for cc in dep.cameras:
        if cc.backends:
            own, n = resolve_backends(cc.backends)
            notes += [x for x in n if x not in notes]
            if own != backends:
                camera_backends[cc.name] = own
    measured = any(family(resolve(b).family).measured
                   for b in set(backends).union(*camera_backends.values()))
    kwargs: dict[str, Any] = dict(fidelity=p.fidelity, threads=p.threads, fallback=p.fallback,
                                  camera_backends=camera_backends or None,
                                  target=dep.target if dep.target is not None else detect_target(),
                                  timing="counters" if dep.latency.counters_only else "spans",
                                  on_corrupt=dep.decode.on_corrupt, max_pixels=dep.decode.max_pixels,
                                  live_cache=planning_cache() if measured else None,
                                  profiler_ranges=dep.latency.profiler_ranges)
    if p.mmdet3d_config is not None:
        from ..mmdet3d import check_rig, profile_from_config

        mapped = p.mapped if p.mapped is not None else profile_from_config(p.mmdet3d_config, skip=p.skip)
        check_rig(mapped, dep.rig.cameras)  # the rig in the config's order: the runner's batch order is the rig's
        return Pipeline.from_mmdet3d_config(mapped, dep.rig, backends, **kwargs), notes
    if p.profile is not None:
        return Pipeline.from_profile(p.profile, dep.rig, backends, **kwargs), notes
    return Pipeline(dep.rig, list(p.stages or ()), backends, **kwargs), notes


def step_budget_notes(dep: Deployment, plan: Any) -> list[str]:
    """One line per ``latency.steps_ms`` key that names no step of ``plan`` (a :class:`~dvpipe.planner.Plan`)
    and no span a run records besides (:data:`~dvpipe.latency.timeline.RUN_SPAN_NAMES`): such a budget is
    never checked. A note, not an error: the steps are the plan's on this machine (``backends: auto``, another
    fidelity fuse them otherwise), and the run's latency table says so again at the end."""
    from ..latency.timeline import RUN_SPAN_NAMES
    from ..types import similar_key

    steps = list(dict.fromkeys(s.name for cp in plan.cameras for s in cp.steps))
    out = []
    for key in dep.latency.steps_ms:
        if key in steps or key in RUN_SPAN_NAMES:
            continue
        close = [k for k in (*steps, *RUN_SPAN_NAMES) if similar_key(key, k)]
        hint = f" (did you mean {close[0]}?)" if close else ""
        out.append(f"latency.steps_ms.{key}: no step of that name in this plan{hint}, so this budget is never "
                   f"checked; the plan's steps: {', '.join(steps)}")
    return out


def load_model(dep: Deployment) -> Optional[Callable]:
    """Import the deployment's model hook (``module:callable``; built with ``init`` when given)."""
    m = dep.model
    if m is None:
        return None
    if m.om is not None:  # {type: om}: an offline model on the pipeline's device (dvpipe.models.OmModel)
        from ..models import from_spec

        return from_spec(m.om)
    if m.path and m.path not in sys.path:
        sys.path.insert(0, m.path)
    try:
        obj = import_entry(m.entry)
    except Exception as e:  # noqa: BLE001 - reported as a config error naming the entry
        raise ConfigError(f"cannot import {m.entry}: {type(e).__name__}: {e}", "model.entry") from None
    if m.init is not None:
        try:
            obj = obj(**dict(m.init))
        except Exception as e:  # noqa: BLE001 - the user's factory: its error, at the key that called it
            raise ConfigError(f"{m.entry}(**init) raised {type(e).__name__}: {e}", "model.init") from None
    if not callable(obj):
        raise ConfigError(f"{m.entry} is not callable", "model.entry")
    return obj
