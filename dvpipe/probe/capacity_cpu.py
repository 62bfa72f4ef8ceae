"""The CPU side of ``dvpipe probe --capacity``: the CPU path's time, measured on this machine.

For each camera, its first frame from the deployment's source (an image sequence; else, per distinct size
and encoding, one synthetic frame, :func:`dvpipe.probe.live.synthetic_frame`) runs through two plans of the
camera's stages, each kernel called directly and timed with ``clock``:

* the CPU path (backends ``cpu``): the time the preprocessing costs without DVPP;
* the DVPP plan on the software device (backends ``dvpp-sim, cpu``): only its CPU steps are timed (what
  the CPU keeps doing when the DVPP steps move to the device). The software device's own steps and the
  transfers are not timed: their time on the software device says nothing about the device.

Times are the best (minimum) of ``repeat`` runs after one warm-up run, in ms of one core: the cost of the
work itself, as far as other load on the machine allows (``timeit``'s convention); the frame-set figure is
the sum over cameras (the CPU work of one frame set, whatever the number of worker threads).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

if TYPE_CHECKING:  # names for the type checker only
    from .._typing import Fidelity
    from ..stages.base import Stage
    from ..target import Target
    from ..types import Camera

__all__ = ["measure_cpu_path", "time_plan"]


def time_plan(cam: Camera, stages: Sequence[Stage], backends: Sequence[str], target: Target, fidelity: Fidelity, *,
              repeat: int = 5, clock: Callable[[], int] = time.perf_counter_ns,
              frame: Optional[bytes] = None) -> list[tuple[str, str, Optional[float]]]:
    """``[(step name, backend, best ms or None when not timed)]`` of ``cam``'s plan on ``backends``, run on
    ``frame`` (the camera's encoded bytes), else on a synthetic frame of its size and encoding."""
    import numpy as np

    from ..backends import resolve
    from ..backends.dvpp import close_state
    from ..codecs import read_frame_bytes
    from ..planner import plan_pipeline
    from ..stages.kernel_registry import KernelContext
    from .live import synthetic_frame

    plan = plan_pipeline([cam], list(stages), list(backends), fidelity=fidelity, target=target)
    steps = plan.cameras[0].steps
    raw: Any = frame if frame is not None else synthetic_frame(cam)
    if isinstance(raw, (bytes, bytearray)):
        raw = read_frame_bytes(bytes(raw))
    samples: list[list[float]] = [[] for _ in steps]
    for run in range(int(repeat) + 1):
        data = raw
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
    return [(s.name, s.backend.name, min(v) if v else None) for s, v in zip(steps, samples)]


def measure_cpu_path(cameras: Sequence[Camera], target: Target, *, profile: Optional[str],
                     stages: Optional[Sequence[Stage]], fidelity: Fidelity, repeat: int = 5,
                     clock: Callable[[], int] = time.perf_counter_ns, frames: Optional[Mapping[str, bytes]] = None) -> dict:
    """The ``cpu`` object of the forecast: ``per_camera_ms`` (CPU path), ``set_ms`` (their sum),
    ``remaining_per_camera_ms`` / ``remaining_set_ms`` (the CPU steps of the DVPP plan) and how it was measured.
    ``frames``: camera -> encoded bytes of a real frame (the deployment's own); other cameras get a synthetic
    frame (one per size and encoding)."""
    from .report import camera_encoding, stages_for

    per_cam: dict[str, float] = {}
    remaining: dict[str, float] = {}
    remaining_steps: list[str] = []
    seen: dict[tuple, tuple[float, float, list[str]]] = {}
    frames = frames or {}
    for cam in cameras:
        own = frames.get(cam.name)
        key = (cam.name,) if own is not None else (cam.width, cam.height, camera_encoding(cam))
        if key not in seen:
            st = stages_for(cam, profile, stages, fidelity)
            cpu = time_plan(cam, st, ("cpu",), target, fidelity, repeat=repeat, clock=clock, frame=own)
            dv = time_plan(cam, st, ("dvpp-sim", "cpu"), target, fidelity, repeat=repeat, clock=clock, frame=own)
            kept = [(n, ms) for n, b, ms in dv if ms is not None]
            seen[key] = (sum(ms for _n, _b, ms in cpu if ms is not None), sum(ms for _n, ms in kept),
                         [n for n, _ms in kept])
        per_cam[cam.name], remaining[cam.name], names = seen[key]
        remaining_steps.extend(n for n in names if n not in remaining_steps)
    which = ("the deployment's first frame of each camera" if frames and all(c.name in frames for c in cameras)
             else "one synthetic frame per camera size" if not frames else
             "the deployment's first frame where it has one, else a synthetic frame")
    return {"how": f"measured here: {which}, best of {repeat} runs after a warm-up, one core of {_cpu_name()}",
            "per_camera_ms": {k: round(v, 3) for k, v in per_cam.items()}, "set_ms": round(sum(per_cam.values()), 3),
            "remaining_per_camera_ms": {k: round(v, 3) for k, v in remaining.items()},
            "remaining_set_ms": round(sum(remaining.values()), 3), "remaining_steps": remaining_steps}


def _cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``), else the machine type."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "this machine"
