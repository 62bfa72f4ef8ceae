"""Side-by-side backend comparison of one deployment: the migration question on one config.

:func:`compare_backends` runs the same deployment (the same recorded or synthetic frames) once per
backend plan and returns each run's latency statistics, plan, frame account and its deviation from
the ``reference`` backend on the first frame sets. Each plan is ``(backend, "cpu")``: the named
backend takes every step it can, the CPU the rest (``cpu`` alone for ``cpu``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np

from ..errors import ConfigError
from .config import Deployment, parse_backends

if TYPE_CHECKING:  # names for the type checker only
    from ..latency import LatencyStats
    from ..planner import Plan
    from .summary import Accounting

__all__ = ["BackendRun", "compare_backends", "format_deviation"]


@dataclass
class BackendRun:
    """One plan's run: ``stats`` (LatencyStats), ``plan``, ``accounting``, captured ``outputs`` and
    its ``deviation`` from the reference (``{"mean": ..., "max": ..., "sets": n}`` in output units)."""

    label: str
    backends: tuple[str, ...]
    stats: LatencyStats
    plan: Plan
    accounting: Accounting
    outputs: list
    deviation: Optional[dict] = None


def _host(images) -> np.ndarray:
    """A float32 host copy (the pipeline reuses its output buffers). An AIPP-route batch (a
    :class:`~dvpipe.device.DeviceTensor` of NV12 with ``meta["aipp"]``) is downloaded and put through AIPP's
    documented arithmetic (:func:`dvpipe.backends.dvpp.aipp.apply_aipp`): what the model would see."""
    aipp = getattr(images, "meta", {}).get("aipp") if hasattr(images, "to_host") else None
    if aipp is not None:
        from ..backends.dvpp.aipp import apply_aipp

        from ..device import nv12_batch_to_host

        return apply_aipp(aipp, nv12_batch_to_host(images)).astype(np.float32)
    if type(images).__module__.startswith("torch"):
        images = images.detach().float().cpu().numpy()
    return np.array(images, dtype=np.float32, copy=True)


def _run(dep: Deployment, backends: tuple[str, ...], keep: int, with_model: bool, label: str) -> BackendRun:
    from .runner import Runner

    dep = replace(dep, pipeline=replace(dep.pipeline, backends=backends),
                  cameras=tuple(replace(c, backends=None) for c in dep.cameras))
    if not with_model:
        dep = replace(dep, model=None)
    outputs: list = []
    runner = Runner(dep, write_outputs=False)
    try:
        for rb in runner.batches():
            if len(outputs) < keep:
                outputs.append((_host(rb.batch.images), np.array(rb.batch.valid)))
    finally:
        runner.close()
    result = runner.finish()
    return BackendRun(label, backends, result.stats, runner.pipe.plan, result.accounting, outputs)


def compare_backends(dep: Deployment, backends: Sequence[str], *, frames: int = 20, reference_sets: int = 2,
                     with_model: bool = False, progress: Optional[Callable[[str], None]] = None) -> list[BackendRun]:
    """Run ``dep`` once per backend in ``backends`` (plus the reference for the deviation).

    Args:
        dep: the deployment; its run limits are replaced by ``frames`` frame sets.
        backends: backend names (``cpu``, ``torch:cpu``, ``dvpp-sim``...).
        frames: frame sets per run.
        reference_sets: how many of the first frame sets are compared with the reference backend
            (0: no deviation column; the reference is slow: about 2 s per 6 x 1600x900 set).
        with_model: also call the deployment's model (timed as ``model``).
        progress: called with a line of text before each run.
    """
    if not backends:
        raise ConfigError("--backends needs at least one backend, e.g. cpu,torch:cpu,dvpp-sim")
    # recordings are read as fast as the plan takes them (no real-time pacing, no latest-frame drops),
    # so every plan and the reference see exactly the same frame sets
    dep = dep.with_run(frames=frames, duration_s=None, loop=True, realtime=False)
    runs = []
    for name in backends:
        parts = [b for b in name.split("+") if b]  # "dvpp-sim+aipp-sim": a route, planned as (..., cpu)
        plan = tuple(parse_backends(parts if parts == ["cpu"] else parts + ["cpu"], "--backends"))
        if progress:
            progress(f"running {name} ({' > '.join(plan)}), {frames} frame sets")
        runs.append(_run(dep, plan, reference_sets, with_model, name))
    if reference_sets > 0:
        if progress:
            progress(f"running reference (numpy oracle) on the first {reference_sets} frame set(s)")
        ref = _run(dep.with_run(frames=reference_sets), ("reference",), reference_sets, False,
                   "reference")
        for r in runs:
            r.deviation = _deviation(r.outputs, ref.outputs)
    return runs


def _deviation(outputs: list, reference: list) -> Optional[dict]:
    diffs = []
    for (img, valid), (ref, ref_valid) in zip(outputs, reference):
        both = valid & ref_valid
        if both.any() and img.shape == ref.shape:
            diffs.append(np.abs(img[both] - ref[both]))
    if not diffs:
        return None
    d = np.concatenate([x.ravel() for x in diffs])
    return {"mean": float(d.mean()), "p99": float(np.percentile(d, 99)), "max": float(d.max()), "sets": len(diffs)}


def _routes(plan: Any) -> str:
    """The plan's route(s) to the model input (``aipp``, ``torch_npu``, ``host``), with camera counts if mixed."""
    counts: dict[str, int] = {}
    for cp in getattr(plan, "cameras", []):
        r = getattr(cp, "route", "host")
        counts[r] = counts.get(r, 0) + 1
    if not counts:
        return ""  # was the empty dict (not a str); the one caller shows either as "-"
    return next(iter(counts)) if len(counts) == 1 else ", ".join(f"{r} x{n}" for r, n in counts.items())


def format_deviation(runs: Sequence[BackendRun]) -> str:
    """Each plan side by side: its route, the bytes it moves per frame set (host -> device, device -> host),
    and the deviation of its batch from the reference backend in output (normalised) units (the AIPP route
    through AIPP's arithmetic)."""
    rows: list[tuple[str, ...]] = [("plan", "route", "steps on", "h2d B/set", "d2h B/set", "mean abs", "p99 abs",
                                    "max abs", "sets")]
    for r in runs:
        where = sorted({s.backend.name for cp in r.plan.cameras for s in cp.steps})
        tr = r.stats.transfers() if hasattr(r.stats, "transfers") else None
        moved = ((f"{tr['host_to_device_bytes_per_set']:,.0f}", f"{tr['device_to_host_bytes_per_set']:,.0f}")
                 if tr else ("-", "-"))
        d = r.deviation
        numbers = tuple(f"{d[k]:.2e}" for k in ("mean", "p99", "max")) + (str(d["sets"]),) if d else ("-",) * 3 + ("0",)
        rows.append((r.label, str(_routes(r.plan) or "-"), ", ".join(where)) + moved + numbers)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["routes side by side: bytes moved per frame set, deviation from the reference backend (output units)"]
    lines += ["  " + "  ".join(c.ljust(widths[i]) if i < 3 else c.rjust(widths[i]) for i, c in enumerate(row))
              for row in rows]
    return "\n".join(lines)
