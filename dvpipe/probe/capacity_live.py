"""``dvpipe probe --live --capacity``: measure each DVPP unit's throughput on this device.

For each distinct camera (size and encoding) whose plan decodes on DVPP, a short burst of synthetic
frames (:func:`dvpipe.probe.live.synthetic_frame`) runs through the DVPP steps, on one channel and on N
channels (N = the cameras of that size, at least 2), each channel its own thread with its own step
state (DVPP channel and stream), as dvpipe runs cameras. Two steps are measured: the decode alone
(unit ``JPEGD`` or ``VDEC``) and the step the plan runs (``JPEGD+VPC``: decode and resize on one stream).

The results go into the ``--live`` cache (:class:`dvpipe.probe.live.LiveCache`) next to the verdicts,
under the target's ``capacity`` key (added to schema 1; readers that do not know it ignore it)::

    "capacity": {"1600x900 jpeg420|JPEGD|1ch": {"unit": "JPEGD", "size": "1600x900", "pixels": 1440000,
        "channels": 1, "frames": 20, "seconds": 0.11, "fps": 181.8, "date": "2026-12-04T21:00:00Z",
        "driver": "23.0.3", "backend": "dvpp", "hardware": true}, ...}

:func:`measured_figures` turns them into :class:`~dvpipe.probe.capacity.Figure` objects that the forecast
uses instead of the documented figure, labelled "measured on this device (date, driver)". Between one and
N channels the total is taken as ``min(n * fps(1), fps(N))`` and as ``fps(N)`` beyond N (not measured).

Only backend ``dvpp`` (pyACL, a real device) is a hardware measurement. The software device can run the
same loop (``backend="dvpp-sim"``, for the tests); its entries carry ``"hardware": false`` and every
label says "NOT a hardware measurement". ``dvpipe probe --live`` itself refuses to run without pyACL.
None of this has run on Ascend hardware yet.
"""
from __future__ import annotations

import datetime as _dt
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

if TYPE_CHECKING:  # names for the type checker only
    import numpy as np

    from .._typing import Fidelity
    from ..planner import Plan, PlanStep
    from ..stages.base import Stage
    from ..target import Target
    from ..types import Camera
    from .live import LiveCache

__all__ = ["measure_capacity", "measured_figures", "burst"]

KEY = "capacity"


def _target_table(cache: LiveCache, target: Target) -> dict:
    from .live import target_key

    return cache.data["targets"].setdefault(target_key(target.soc, target.cann, target.driver),
                                            {"soc": target.soc, "cann": str(target.cann), "driver": target.driver,
                                             "steps": {}})


def burst(step: PlanStep, plan: Plan, cam: Camera, frame: Union[bytes, np.ndarray], target: Target, backend: str,
          channels: int, frames: int,
          clock: Callable[[], float] = time.perf_counter) -> float:
    """Run ``frames`` frames through ``step`` on each of ``channels`` threads (one step state, so one DVPP
    channel and stream, per thread), all released together; return the wall time in seconds: from the first
    thread's start to the last thread's end, each read from ``clock`` by the thread itself."""
    import numpy as np

    from ..backends import resolve
    from ..backends.dvpp import close_state
    from ..stages.kernel_registry import KernelContext

    start = threading.Barrier(channels + 1)
    errors: list[BaseException] = []
    starts: list[float] = []
    done: list[float] = []

    def work() -> None:
        state: dict = {}
        out = np.zeros((3, step.spec_out.height, step.spec_out.width), step.spec_out.dtype) \
            if step.writes_batch else None
        ctx = KernelContext(cam, step.spec_in, step.spec_out.with_(placement="host"), resolve(backend),
                            plan.fidelity, out=out, target=target, state=state)
        try:
            step.kernel.fn(frame, step.stages, ctx)  # opens the channel: not part of the burst
            start.wait()
            starts.append(clock())
            for _ in range(frames):
                step.kernel.fn(frame, step.stages, ctx)
            done.append(clock())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            start.abort()
        finally:
            close_state(state)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(channels)]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return max(done) - min(starts)


def measure_capacity(cameras: Sequence[Camera], target: Target, cache: LiveCache, *, profile: Optional[str] = None,
                     stages: Optional[Sequence[Stage]] = None, fidelity: Fidelity = "fast", backend: str = "dvpp",
                     frames: int = 20, clock: Callable[[], float] = time.perf_counter) -> list[dict]:
    """Measure (see the module docstring) and record into ``cache`` (not saved here); returns the entries."""
    from ..codecs import read_frame_bytes
    from ..planner import plan_pipeline
    from .live import synthetic_frame
    from .keys import DECODER_BY_ENCODING, camera_encoding
    from .report import stages_for

    hardware = backend == "dvpp"
    table = _target_table(cache, target).setdefault(KEY, {})
    groups: dict[tuple, list] = {}
    for cam in cameras:
        groups.setdefault((cam.width, cam.height, camera_encoding(cam)), []).append(cam)
    out = []
    for (w, h, enc), cams in groups.items():
        cam = cams[0]
        decoder = DECODER_BY_ENCODING.get(cam.encoding)
        st = stages_for(cam, profile, stages, fidelity)
        variants = [(decoder, [s for s in st if s.op == "decode"][:1]), (None, list(st))]
        frame: Any = synthetic_frame(cam)
        if isinstance(frame, (bytes, bytearray)):
            frame = read_frame_bytes(bytes(frame))
        for unit, sts in variants:
            if not sts:
                continue
            plan = plan_pipeline([cam], sts, (backend, "cpu"), fidelity=fidelity, target=target)
            step = plan.cameras[0].steps[0]
            if step.backend.family != "dvpp":
                continue
            name = unit or "+".join(dict.fromkeys(
                [decoder or "DVPP"] + ["VPC" for s in step.stages if s.op != "decode"]))
            for n in sorted({1, max(2, len(cams))}):
                seconds = burst(step, plan, cam, frame, target, backend, n, frames, clock)
                entry = {"unit": name, "size": f"{w}x{h}", "encoding": enc, "pixels": w * h, "channels": n,
                         "frames": frames * n, "seconds": round(seconds, 6),
                         "fps": round(frames * n / seconds, 3) if seconds > 0 else None,
                         "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                         "driver": target.driver, "backend": backend, "hardware": hardware,
                         "kernel": step.kernel.name}
                table[f"{w}x{h} {enc}|{name}|{n}ch"] = entry
                out.append(entry)
    return out


def measured_figures(cache: LiveCache, target: Target) -> dict:
    """Unit -> :class:`~dvpipe.probe.capacity.Figure` from the cache's capacity entries for ``target``
    (the largest size measured per unit; only single units -- ``JPEGD``, ``VDEC`` -- replace documented figures)."""
    from .capacity import Figure
    from .live import target_key

    tables = []
    if getattr(target, "driver", None):
        t = cache.data["targets"].get(target_key(target.soc, target.cann, target.driver))
        tables = [t] if t else []
    else:
        tables = [t for t in cache.data["targets"].values()
                  if t.get("soc") == target.soc and t.get("cann") == str(target.cann)]
    by_unit: dict[str, dict[str, dict[int, dict]]] = {}
    for t in tables:
        for e in (t.get(KEY) or {}).values():
            if "+" in e["unit"] or not e.get("fps"):
                continue
            by_unit.setdefault(e["unit"], {}).setdefault(e["size"], {})[int(e["channels"])] = e
    figs = {}
    for unit, sizes in by_unit.items():
        size, runs = max(sizes.items(), key=lambda kv: int(kv[0].split("x")[0]) * int(kv[0].split("x")[1]))
        one = runs.get(1)
        many = runs[max(runs)]
        latest = max(runs.values(), key=lambda e: e.get("date", ""))
        rows = {size: (None if one is None else float(one["fps"]), float(many["fps"]))}
        figs[unit] = Figure(f"measured.{unit.lower()}", unit, (target.family,), rows,
                            source=f"dvpipe probe --live --capacity ({latest.get('backend')})",
                            page="--live --capacity", cann=str(target.cann),
                            quote=f"{size}: " + ", ".join(f"{n} channel(s) {runs[n]['fps']:g} fps" for n in sorted(runs)),
                            note=f"measured at {', '.join(str(n) for n in sorted(runs))} channel(s); between, "
                                 "min(n x fps(1), fps(N)) is assumed, and fps(N) beyond N",
                            measured={"date": latest.get("date"), "driver": latest.get("driver"),
                                      "hardware": bool(latest.get("hardware")), "backend": latest.get("backend")})
    return figs
