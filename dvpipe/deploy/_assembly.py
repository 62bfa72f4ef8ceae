"""Assembling a deployment's pieces: backends (``auto`` resolved), the planned pipeline (one per
per-camera backend preference, combined into one batch in rig order), and the model hook."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from ..errors import ConfigError
from ..latency import Timeline
from ..probe.environment import detect_target
from ..types import Rig
from ._schema import Deployment
from .config import import_entry

if TYPE_CHECKING:
    from ..pipeline import Pipeline

__all__ = ["AUTO_BACKENDS", "resolve_backends", "build_pipeline", "load_model"]

#: preference order that ``backends: auto`` picks from (only the available ones are kept; cpu last).
AUTO_BACKENDS = ("dvpp", "torch:npu", "torch:cuda", "cpu")


def resolve_backends(names: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """Expand ``auto`` into the available backends of :data:`AUTO_BACKENDS`.

    Returns ``(backends, notes)``; notes say why each skipped backend was skipped.
    """
    from ..backends import availability, resolve

    out: list[str] = []
    notes: list[str] = []
    for name in names:
        if name != "auto":
            if name not in out:
                out.append(name)
            continue
        for cand in AUTO_BACKENDS:
            if cand in out:
                continue
            v = availability(resolve(cand))
            if v.ok:
                out.append(cand)
            else:
                notes.append(f"{cand}: {v.reason}")
    return tuple(out) or ("cpu",), notes


# -------------------------------------------------------------------------------- pipelines
class _GroupPlan:
    """The plans of a pipeline split by per-camera backend preferences."""

    def __init__(self, groups: list[tuple[tuple[str, ...], Any]]):
        self.groups = groups

    @property
    def cameras(self) -> list:
        return [cp for _b, pipe in self.groups for cp in pipe.plan.cameras]

    def to_dict(self) -> dict:
        return {"groups": [{"backends": list(b), "plan": pipe.plan.to_dict()} for b, pipe in self.groups]}

    def __str__(self) -> str:
        parts = []
        for b, pipe in self.groups:
            names = ", ".join(pipe.rig.names)
            parts.append(f"[{names}] backends {' > '.join(b)}\n{pipe.plan}")
        return "\n".join(parts)


class _GroupedPipeline:
    """Cameras with different backend preferences: one Pipeline per preference, one batch in rig order.

    Each group writes its own batch; the images are copied into a combined host buffer (one copy
    of the batch; a single-preference deployment avoids it).
    """

    def __init__(self, rig: Rig, groups: list[tuple[tuple[str, ...], Any]], output_buffers: int = 2):
        from ..types import FrameBatch

        self._FrameBatch = FrameBatch
        self.rig = rig
        self.groups = groups
        self.plan = _GroupPlan(groups)
        places = {pipe.plan.out_placement for _b, pipe in groups}
        if places != {"host"}:
            raise ConfigError("per-camera backends need every camera's output on the host for now "
                              f"(got {', '.join(sorted(places))}); give the cameras one backend preference")
        dtypes = {pipe.plan.out_dtype for _b, pipe in groups}
        shapes = {pipe.plan.out_shape[1:] for _b, pipe in groups}
        if len(dtypes) > 1 or len(shapes) > 1:
            raise ConfigError("per-camera backend groups produce different output shapes or dtypes")
        shape, dtype = (len(rig),) + shapes.pop(), dtypes.pop()
        self._buffers = [np.zeros(shape, dtype=dtype) for _ in range(output_buffers)]
        self._next = 0
        self._slots = [[rig.index(name) for name in pipe.rig.names] for _b, pipe in groups]  # group row -> batch row
        self._order = {c: k for k, c in enumerate(rig.names)}

    def process(self, frames, timeline: Optional[Timeline] = None):
        images = self._buffers[self._next]
        self._next = (self._next + 1) % len(self._buffers)
        n = len(self.rig)
        metas: list = [None] * n
        valid = np.zeros(n, dtype=bool)
        drops, fallbacks = [], []
        tl = timeline if timeline is not None else Timeline()
        for (_b, pipe), slots in zip(self.groups, self._slots):
            sub = pipe.process({k: v for k, v in frames.items() if k in pipe.rig.names}, timeline=tl)
            for j, i in enumerate(slots):
                images[i] = sub.images[j]
                metas[i] = sub.metas[j]
                valid[i] = sub.valid[j]
            drops += sub.drops
            fallbacks += sub.fallbacks
        drops.sort(key=lambda d: self._order[d[0]])
        return self._FrameBatch(images, metas, valid, drops, self.rig.names, fallbacks, tl)

    @property
    def profiler_ranges(self):
        """The groups' :class:`~dvpipe.latency.profiler_ranges.ProfilerRanges` (one setting for all)."""
        return self.groups[0][1].profiler_ranges

    def close(self) -> None:
        for _b, pipe in self.groups:
            pipe.close()


def build_pipeline(dep: Deployment) -> tuple[Any, list[str]]:
    """The deployment's pipeline (planned) and notes on how ``auto`` backends were resolved.

    Built by the constructors a Python user calls: :meth:`Pipeline.from_mmdet3d_config` (with the
    config as read at load, ``pipeline.mapped``), :meth:`Pipeline.from_profile`, or ``Pipeline(rig,
    stages)``. Cameras with their own ``backends`` get one pipeline per preference
    (:class:`_GroupedPipeline`), each from the profile (an mmdet3d config's: its camera order is
    checked on the whole rig first)."""
    from ..backends import resolve
    from ..pipeline import Pipeline
    from ..probe.live import planning_cache  # measurements on this device beat the docs (handed to the planner)
    from .sources._probe import with_stream_colour

    dep = with_stream_colour(dep)  # a video file's signalled colour standard, for a plan made before it opens
    p = dep.pipeline
    notes: list[str] = []
    groups: dict[tuple[str, ...], list[str]] = {}
    for cc in dep.cameras:
        b, n = resolve_backends(cc.backends or p.backends)
        notes += [x for x in n if x not in notes]
        groups.setdefault(b, []).append(cc.name)
    dvpp = any(resolve(b).family == "dvpp" for g in groups for b in g)
    kwargs: dict[str, Any] = dict(fidelity=p.fidelity, threads=p.threads, fallback=p.fallback,
                                  target=dep.target if dep.target is not None else detect_target(),
                                  timing="counters" if dep.latency.counters_only else "spans",
                                  on_corrupt=dep.decode.on_corrupt, max_pixels=dep.decode.max_pixels,
                                  live_cache=planning_cache() if dvpp else None,
                                  profiler_ranges=dep.latency.profiler_ranges)

    mapped = None
    if p.mmdet3d_config is not None:
        from ..mmdet3d import check_rig, profile_from_config

        mapped = p.mapped if p.mapped is not None else profile_from_config(p.mmdet3d_config, skip=p.skip)
        check_rig(mapped, dep.rig.cameras)  # the rig in the config's order: the runner's batch order is the rig's

    profile = mapped.profile if mapped is not None else p.profile

    def build(rig: Rig, backends: tuple[str, ...]) -> Pipeline:
        if mapped is not None and rig is dep.rig:
            return Pipeline.from_mmdet3d_config(mapped, rig, backends, **kwargs)
        if profile is not None:  # (for a group of the rig's cameras: the mmdet3d config's profile)
            return Pipeline.from_profile(profile, rig, backends, **kwargs)
        return Pipeline(rig, list(p.stages or ()), backends, **kwargs)

    if len(groups) == 1:
        (backends,) = groups
        return build(dep.rig, backends), notes
    built = []
    for backends, names in groups.items():
        sub = Rig(tuple(c for c in dep.rig.cameras if c.name in names), name=f"{dep.rig.name}:{'+'.join(backends)}")
        built.append((backends, build(sub, backends)))
    return _GroupedPipeline(dep.rig, built), notes


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
        obj = obj(**dict(m.init))
    if not callable(obj):
        raise ConfigError(f"{m.entry} is not callable", "model.entry")
    return obj
