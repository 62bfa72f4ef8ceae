"""The CPU side of ``dvpipe probe --capacity``: the CPU path's time, measured on this machine.

For each distinct camera (size and encoding) one synthetic frame (:func:`dvpipe.probe.live.synthetic_frame`)
runs through two plans of the camera's stages, each kernel called directly and timed with ``clock``:

* the CPU path (backends ``cpu``): the time the preprocessing costs without DVPP;
* the DVPP plan on the software device (backends ``dvpp-sim, cpu``): only its CPU steps are timed (what
  the CPU keeps doing when the DVPP steps move to the device). The software device's own steps and the
  transfers are not timed: their time on the software device says nothing about the device.

Times are the median of ``repeat`` runs after one warm-up run, in ms of one core; the frame-set figure
is the sum over cameras (the CPU work of one frame set, whatever the number of worker threads).
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Optional, Sequence

__all__ = ["measure_cpu_path", "time_plan"]


def time_plan(cam: Any, stages: Sequence[Any], backends: Sequence[str], target: Any, fidelity: Any, *,
              repeat: int = 3, clock: Callable[[], int] = time.perf_counter_ns) -> list[tuple[str, str, Optional[float]]]:
    """``[(step name, backend, median ms or None when not timed)]`` of ``cam``'s plan on ``backends``."""
    import numpy as np

    from ..backends import resolve
    from ..backends.dvpp import close_state
    from ..codecs import read_frame_bytes
    from ..planner import plan_pipeline
    from ..stages.registry import KernelContext
    from .live import synthetic_frame

    plan = plan_pipeline([cam], list(stages), list(backends), fidelity=fidelity, target=target)
    steps = plan.cameras[0].steps
    frame: Any = synthetic_frame(cam)
    if isinstance(frame, (bytes, bytearray)):
        frame = read_frame_bytes(bytes(frame))
    samples: list[list[float]] = [[] for _ in steps]
    for run in range(int(repeat) + 1):
        data = frame
        for k, step in enumerate(steps):
            out = np.zeros((3, step.spec_out.height, step.spec_out.width), step.spec_out.dtype) \
                if step.writes_batch else None
            on_dvpp = step.backend.family == "dvpp"
            state: dict = {}
            spec_out = step.spec_out.with_(placement="host") if on_dvpp else step.spec_out
            ctx = KernelContext(cam, step.spec_in, spec_out, resolve(step.backend.name) if on_dvpp else step.backend,
                                plan.fidelity, out=out, target=target, state=state)
            t0 = clock()
            try:
                data = step.kernel.fn(data, step.stages, ctx)
            finally:
                if on_dvpp:
                    close_state(state)
            if run and not on_dvpp and step.stages[0].op != "transfer":
                samples[k].append((clock() - t0) / 1e6)
    return [(s.name, s.backend.name, statistics.median(v) if v else None) for s, v in zip(steps, samples)]


def measure_cpu_path(cameras: Sequence[Any], target: Any, *, profile: Optional[str], stages: Optional[Sequence[Any]],
                     fidelity: Any, repeat: int = 3, clock: Callable[[], int] = time.perf_counter_ns) -> dict:
    """The ``cpu`` object of the forecast: ``per_camera_ms`` (CPU path), ``set_ms`` (their sum),
    ``remaining_per_camera_ms`` / ``remaining_set_ms`` (the CPU steps of the DVPP plan) and how it was measured."""
    from .report import camera_encoding, stages_for

    per_cam: dict[str, float] = {}
    remaining: dict[str, float] = {}
    remaining_steps: list[str] = []
    seen: dict[tuple, tuple[float, float, list[str]]] = {}
    for cam in cameras:
        key = (cam.width, cam.height, camera_encoding(cam))
        if key not in seen:
            st = stages_for(cam, profile, stages, fidelity)
            cpu = time_plan(cam, st, ("cpu",), target, fidelity, repeat=repeat, clock=clock)
            dv = time_plan(cam, st, ("dvpp-sim", "cpu"), target, fidelity, repeat=repeat, clock=clock)
            kept = [(n, ms) for n, b, ms in dv if ms is not None]
            seen[key] = (sum(ms for _n, _b, ms in cpu if ms is not None), sum(ms for _n, ms in kept),
                         [n for n, _ms in kept])
        per_cam[cam.name], remaining[cam.name], names = seen[key]
        remaining_steps.extend(n for n in names if n not in remaining_steps)
    import platform

    return {"how": f"measured here: one synthetic frame per camera size, median of {repeat} runs after a warm-up, "
                   f"one core of {platform.machine() or 'this machine'}",
            "per_camera_ms": {k: round(v, 3) for k, v in per_cam.items()}, "set_ms": round(sum(per_cam.values()), 3),
            "remaining_per_camera_ms": {k: round(v, 3) for k, v in remaining.items()},
            "remaining_set_ms": round(sum(remaining.values()), 3), "remaining_steps": remaining_steps}
