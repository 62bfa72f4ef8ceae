"""Side-by-side backend comparison of one deployment: the migration question on one config.

:func:`compare_backends` runs the same deployment (the same recorded or synthetic frames) once per
backend plan and returns each run's latency statistics, plan, frame account and its deviation from
the ``reference`` backend on the first frame sets. Each plan is ``(backend, "cpu")``: the named
backend takes every step it can, the CPU the rest (``cpu`` alone for ``cpu``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import ConfigError
from .config import Deployment, parse_backends

__all__ = ["BackendRun", "compare_backends", "format_deviation"]


@dataclass
class BackendRun:
    """One plan's run: ``stats`` (LatencyStats), ``plan``, ``accounting``, captured ``outputs`` and
    its ``deviation`` from the reference (``{"mean": ..., "max": ..., "sets": n}`` in output units)."""

    label: str
    backends: tuple[str, ...]
    stats: Any
    plan: Any
    accounting: Any
    outputs: list
    deviation: Optional[dict] = None


def _host(images) -> np.ndarray:
    """A float32 host copy (the pipeline reuses its output buffers)."""
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
        plan = tuple(parse_backends([name] if name == "cpu" else [name, "cpu"], "--backends"))
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


def format_deviation(runs: Sequence[BackendRun]) -> str:
    """Deviation of each plan's batch from the reference backend, in output (normalised) units."""
    rows = [("plan", "steps on", "mean abs", "p99 abs", "max abs", "sets")]
    for r in runs:
        where = sorted({s.backend.name for cp in r.plan.cameras for s in cp.steps})
        d = r.deviation
        numbers = tuple(f"{d[k]:.2e}" for k in ("mean", "p99", "max")) + (str(d["sets"]),) if d else ("-",) * 3 + ("0",)
        rows.append((r.label, ", ".join(where)) + numbers)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["deviation from the reference backend (output units)"]
    lines += ["  " + "  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(row))
              for row in rows]
    return "\n".join(lines)
