"""``dvpipe probe --capacity``: will the deployment's DVPP load fit the target, and how long will it take.

For every DVPP unit the probe plan uses (JPEGD, VPC, VDEC; AIPP where the model's AIPP takes the
normalisation), the forecast compares the load the cameras put on the unit with the unit's documented
throughput and channel limits for the target's product family (``dvpipe/knowledge/data/capacity.yaml``:
every figure with its page id, CANN version and URL). Nothing here is a measurement on Ascend hardware;
``dvpipe probe --live --capacity`` (:mod:`dvpipe.probe.capacity_live`) measures on a device and its figures
then replace the documented ones, labelled as such. The text is :mod:`dvpipe.probe.capacity_text`, the
frame rate and first frames of a deployment :mod:`dvpipe.probe.capacity_inputs`, the CPU path's time
:mod:`dvpipe.probe.capacity_cpu`.

The model (units: frames per second, milliseconds, pixels = width x height):

* A page gives, per reference resolution (720p, 1080p, 4K), a total frame rate of one device with n
  channels: ``total(n) = min(n * per_channel_fps, max_total_fps)``. dvpipe opens one channel per camera
  and DVPP step, so a unit used by n cameras has ``total(n)`` available.
* Scaling (``capacity.yaml`` ``scaling``; the pages say "other resolutions can be estimated in the same
  way"; dvpipe's reading, stated as an assumption): fps scale inversely with the pixel count. A camera of
  ``p`` pixels weighs ``w = p / p_ref`` reference frames, ``p_ref`` the reference resolution nearest in pixel
  count (log ratio) to the unit's mean camera. For VPC, ``p`` is the larger of the input and output of the call.
* Load = sum over cameras of ``fps * w`` (reference frames / s); utilisation = load / total(n). Each
  camera has one channel, which gives at most ``total(1)`` reference frames / s: channel use =
  ``max_i fps_i * w_i / total(1)`` (a 4K camera on the Ascend 310's JPEGD gets 32 fps however many
  channels share the 64 in total). The unit fits when both are <= 1; it saturates at
  ``min(total(n) / sum(w), total(1) / max(w))`` frames / s per camera, and at ``fps`` takes at most the
  largest n with ``min(n * per, max) >= n * fps * mean(w)`` cameras, none when ``total(1) < fps * max(w)``
  (and no more than its channel limits).
* Device time of one step on one channel (no other channel busy): ``w / per_channel_fps`` s. Per frame
  set and unit: ``max(max_i w_i / per, sum_i w_i / total(n))`` (channels in parallel, bounded by the total);
  per frame set: the units one after the other (a frame set's decode, then its resize).
* Channel limits: every documented limit for the unit on the family applies, including the hi_mpi
  pools (dvpipe calls acldvpp; where the pages differ by API the stricter limit is kept).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from ..knowledge.throughput import (DATA_FILE, UNITS, ChannelLimit, Figure, _data, _families, _nearest_reference,
                                    _ref_px, channel_limits, figures, predicted_step_ns, program_calls, reference_pixels,
                                    scaling, throughput_figure, total_fps, unknown_reason)

if TYPE_CHECKING:  # names for the type checker only
    from .._typing import Fidelity
    from ..stages.base import Stage
    from ..target import Target
    from ..types import Camera
    from .report import ProbeReport

__all__ = ["Figure", "ChannelLimit", "WorkItem", "UnitForecast", "Forecast", "figures", "throughput_figure",
           "channel_limits", "unknown_reason", "scaling", "reference_pixels", "total_fps", "forecast", "work_items",
           "program_calls", "predicted_step_ns", "transfer_notes", "DATA_FILE"]


# ------------------------------------------------------------------------------------------- forecast

@dataclass(frozen=True)
class WorkItem:
    """One camera's use of one unit: ``pixels`` the unit processes per frame, at ``fps`` frames / s."""

    camera: str
    unit: str
    pixels: int
    fps: Optional[float]
    size: str = ""


@dataclass
class UnitForecast:
    unit: str
    cameras: list[str]
    channels: int
    figure: Optional[Figure]
    why_unknown: Optional[str] = None
    reference: Optional[str] = None
    per_channel_fps: Optional[float] = None
    max_total_fps: Optional[float] = None
    capacity_fps: Optional[float] = None   # reference frames / s with `channels` channels
    load_fps: Optional[float] = None       # reference frames / s at the cameras' rates
    utilisation: Optional[float] = None
    channel_utilisation: Optional[float] = None  # the busiest camera's channel: max fps * w / total(1)
    max_fps_per_camera: Optional[float] = None
    max_cameras: Optional[int] = None
    step_ms: dict[str, float] = field(default_factory=dict)
    set_ms: Optional[float] = None
    limits: list[dict] = field(default_factory=list)
    memory: Optional[dict] = None          # documented per-channel memory, summed over the channels

    @property
    def channels_ok(self) -> bool:
        return all(lim["ok"] for lim in self.limits)

    @property
    def fits(self) -> Optional[bool]:
        if not self.channels_ok:
            return False
        if self.utilisation is None:
            return None
        return self.utilisation <= 1.0 and (self.channel_utilisation is None or self.channel_utilisation <= 1.0)

    def to_dict(self) -> dict:
        return {"unit": self.unit, "cameras": list(self.cameras), "channels": self.channels,
                "status": "unknown" if self.figure is None else ("measured" if self.figure.measured else "documented"),
                "figure": None if self.figure is None else self.figure.to_dict(), "why_unknown": self.why_unknown,
                "reference": self.reference, "per_channel_fps": self.per_channel_fps,
                "max_total_fps": self.max_total_fps, "capacity_fps": _r(self.capacity_fps), "load_fps": _r(self.load_fps),
                "utilisation": _r(self.utilisation, 4),
                "headroom": None if self.utilisation is None else _r(1.0 - self.utilisation, 4),
                "channel_utilisation": _r(self.channel_utilisation, 4),
                "max_fps_per_camera": _r(self.max_fps_per_camera), "max_cameras": self.max_cameras,
                "step_ms": {k: _r(v, 4) for k, v in self.step_ms.items()}, "set_ms": _r(self.set_ms, 4),
                "channel_limits": list(self.limits), "memory": self.memory, "fits": self.fits}


def _r(v: Optional[float], nd: int = 3) -> Optional[float]:
    return None if v is None else round(float(v), nd)


@dataclass
class Forecast:
    """The whole forecast (``to_dict()`` is the ``capacity`` object of ``dvpipe probe --capacity --json``)."""

    soc: str
    cann: str
    family: str
    fps: dict[str, Optional[float]]
    fps_source: str
    units: list[UnitForecast]
    notes: list[str] = field(default_factory=list)
    cpu: Optional[dict] = None

    @property
    def fits(self) -> Optional[bool]:
        """True / False, or None when a unit has no figure, no frame rate was given or no step runs on DVPP."""
        if not self.units:
            return None
        verdicts = [u.fits for u in self.units]
        if any(v is False for v in verdicts):
            return False
        return None if any(v is None for v in verdicts) else True

    @property
    def first_saturating(self) -> Optional[UnitForecast]:
        """The known unit that saturates at the lowest frame rate (channel limits first)."""
        over = [u for u in self.units if not u.channels_ok]
        if over:
            return over[0]
        known = [u for u in self.units if u.max_fps_per_camera is not None]
        return min(known, key=lambda u: u.max_fps_per_camera) if known else None  # type: ignore[arg-type,return-value]

    @property
    def set_ms(self) -> Optional[float]:
        """Predicted device time of one frame set (every unit known), else None."""
        if not self.units or any(u.set_ms is None for u in self.units):
            return None
        return sum(u.set_ms for u in self.units)  # type: ignore[misc]

    @property
    def known_set_ms(self) -> float:
        return sum(u.set_ms for u in self.units if u.set_ms is not None)

    def to_dict(self) -> dict:
        first = self.first_saturating
        return {"target": {"soc": self.soc, "cann": self.cann, "family": self.family},
                "fps": dict(self.fps), "fps_source": self.fps_source, "scaling": scaling(),
                "units": [u.to_dict() for u in self.units], "fits": self.fits,
                "first_saturating": None if first is None else {
                    "unit": first.unit, "channels_ok": first.channels_ok,
                    "max_fps_per_camera": _r(first.max_fps_per_camera), "max_cameras": first.max_cameras},
                "device_set_ms": _r(self.set_ms, 4), "device_set_ms_known_units": _r(self.known_set_ms, 4),
                "unknown_units": [u.unit for u in self.units if u.figure is None],
                "cpu": self.cpu, "notes": list(self.notes),
                "hardware_measurement": any(u.figure is not None and (u.figure.measured or {}).get("hardware")
                                            for u in self.units)}


def transfer_notes(family: str) -> list[str]:
    """What the documented host -> device ceilings (``capacity.yaml`` ``transfers``) mean for dvpipe's plans."""
    out = []
    for d in _data().get("transfers", []):
        if family in _families(d["families"]):
            rows = ", ".join(f"{k} about {v['max_total_fps']:g} fps" for k, v in d["rows"].items())
            out.append(f"host -> device: the docs cap {d['applies_to']} at {rows} ({d['page']}, CANN {d['cann']}); "
                       "dvpipe's DVPP plans copy the compressed bitstream, not raw images, so it does not bound them")
    return out


def forecast(items: Sequence[WorkItem], target: Target, *, measured: Optional[Mapping[str, Figure]] = None,
             notes: Sequence[str] = (), fps_source: str = "", fps: Optional[Mapping[str, Optional[float]]] = None
             ) -> Forecast:
    """The forecast of ``items`` on ``target`` (a :class:`dvpipe.Target`; family and SoC are read from it).

    ``measured``: unit -> a measured :class:`Figure` (``--live --capacity``) used instead of the documented one.
    ``fps``: camera -> frame rate of every camera (default: those of ``items``).
    """
    family = target.family
    by_unit: dict[str, list[WorkItem]] = {}
    for it in items:
        by_unit.setdefault(it.unit, []).append(it)
    order = [u for u in UNITS if u in by_unit] + [u for u in by_unit if u not in UNITS]
    channels_used = {u: len({it.camera for it in by_unit[u]}) for u in by_unit}
    units = [_unit(u, by_unit[u], family, (measured or {}).get(u), channels_used) for u in order]
    rates = dict(fps) if fps is not None else {}
    for it in items:
        rates.setdefault(it.camera, it.fps)
    return Forecast(target.soc, str(target.cann), family, rates, fps_source, units,
                    list(notes) + (transfer_notes(family) if units else []))


def _unit(unit: str, items: Sequence[WorkItem], family: str, measured: Optional[Figure],
          channels_used: Mapping[str, int]) -> UnitForecast:
    cams = list(dict.fromkeys(it.camera for it in items))
    n = len(cams)
    uf = UnitForecast(unit, cams, n, None)
    for lim in channel_limits(family, unit):
        used = sum(channels_used.get(u, 0) for u in lim.units)
        uf.limits.append({"id": lim.id, "units": list(lim.units), "max_channels": lim.max_channels, "used": used,
                          "ok": used <= lim.max_channels, "api": lim.api or None, "source": lim.source,
                          "page": lim.page, "cann": lim.cann})
    uf.memory = _memory(family, unit, items)
    fig = measured or (None if unit == "AIPP" else throughput_figure(family, unit))
    uf.figure = fig
    if fig is None:
        uf.why_unknown = unknown_reason(family, unit)
        return uf
    mean_px = sum(it.pixels for it in items) / len(items)
    ref = _nearest_reference(fig, mean_px)
    ref_px = _ref_px(ref)
    per, mx = fig.rows[ref]
    uf.reference, uf.per_channel_fps, uf.max_total_fps = ref, per, mx
    weights: dict[str, float] = {}
    for it in items:  # a camera's calls on the unit add up (e.g. a VPC resize, then a VPC colour conversion)
        weights[it.camera] = weights.get(it.camera, 0.0) + it.pixels / ref_px
    cap = total_fps(per, mx, n)
    uf.capacity_fps = cap
    per1 = total_fps(per, mx, 1)  # one channel alone
    uf.step_ms = {c: 1e3 * w / per1 for c, w in weights.items()}
    wsum = sum(weights.values())
    uf.set_ms = max(max(uf.step_ms.values()), 1e3 * wsum / cap)
    wmax = max(weights.values())
    # the total bounds the cameras together, one channel bounds each camera (its channel is its own)
    uf.max_fps_per_camera = min(cap / wsum, per1 / wmax)
    rates = [it.fps for it in items if it.fps is not None]
    if len(rates) == len(items):
        cam_rate = {it.camera: float(it.fps or 0.0) for it in items}
        uf.load_fps = sum(cam_rate[c] * w for c, w in weights.items())
        uf.utilisation = uf.load_fps / cap
        uf.channel_utilisation = max(cam_rate[c] * w for c, w in weights.items()) / per1
        f = max(rates)
        uf.max_cameras = _max_cameras(per1, mx, f * (wsum / n), _channel_room(uf.limits, n), f * wmax)
    return uf


def _memory(family: str, unit: str, items: Sequence[WorkItem]) -> Optional[dict]:
    """The documented memory of ``unit``'s channels (``capacity.yaml`` ``memory``): per camera the row nearest
    in pixel count (not scaled: the page gives it per resolution), summed over the cameras."""
    for d in _data().get("memory", []):
        if d["unit"] != unit or family not in _families(d["families"]):
            continue
        rows = {k: float(v["mb_per_channel"]) for k, v in d["rows"].items()}
        per_cam: dict[str, float] = {}
        for it in items:
            ref = min(rows, key=lambda r: (abs(math.log(it.pixels / _ref_px(r))), _ref_px(r)))
            per_cam.setdefault(it.camera, rows[ref])
        return {"mb": sum(per_cam.values()), "per_camera_mb": per_cam, "source": d["source"], "page": d["page"],
                "cann": str(d["cann"]), "quote": d.get("quote", "")}
    return None


def _channel_room(limits: Sequence[dict], n: int) -> Optional[int]:
    """How many channels of this unit the limits allow (the others' use of a shared pool kept)."""
    room = [lim["max_channels"] - (lim["used"] - n) for lim in limits]
    return min(room) if room else None


def _max_cameras(per: Optional[float], mx: float, demand_per_camera: float, channel_room: Optional[int],
                 channel_demand: Optional[float] = None) -> int:
    """The largest n with ``total(n) >= n * demand`` (and n within the channel room); 0 when one channel
    (``per``, frames / s) cannot carry the busiest camera's ``channel_demand`` (default: ``demand``)."""
    if demand_per_camera <= 0:
        return channel_room if channel_room is not None else 0
    if per is not None and per < max(demand_per_camera, channel_demand or 0.0):
        return 0
    n = int(math.floor(mx / demand_per_camera + 1e-9))
    return min(n, channel_room) if channel_room is not None else n


# ------------------------------------------------------------------------------------------- plan -> work

def work_items(report: ProbeReport, cameras: Sequence[Camera], target: Target, *, profile: Optional[str],
               stages: Optional[Sequence[Stage]], fidelity: Fidelity, fps: Mapping[str, Optional[float]],
               aipp: bool = False) -> list[WorkItem]:
    """The DVPP work of the cameras as :func:`~dvpipe.probe.report.build_report` planned them (``report``):
    every step on DVPP is planned again to get its program as the kernel opens it (the DVPP calls it makes),
    one item per call (:func:`program_calls`). ``aipp``: the model's AIPP takes the normalisation (the deployment plans a
    backend ``aipp``) for cameras whose route is ``aipp``: one AIPP item at the batch size."""
    from ..backends.dvpp import program_for_output
    from ..backends.dvpp.support import accepts_unknown, plan_step
    from ..planner import plan_pipeline
    from .report import PROBE_BACKENDS, ROUTES, stages_for

    rows = {c.name: c for c in report.cameras}
    out: list[WorkItem] = []
    for cam in cameras:
        crep = rows.get(cam.name)
        if crep is None or crep.error or not any(s.backend == "dvpp" for s in crep.steps):
            continue
        via_aipp = aipp and crep.route == "aipp"
        backends = dict(ROUTES)["aipp"] if via_aipp else PROBE_BACKENDS  # the AIPP route: VPC hands on NV12
        plan = plan_pipeline([cam], stages_for(cam, profile, stages, fidelity), list(backends),
                             fidelity=fidelity, target=target)
        for step in plan.cameras[0].steps:
            if step.backend.family != "dvpp" or step.stages[0].op == "transfer":  # a copy is no DVPP unit
                continue
            _v, prog = plan_step(step.stages, step.spec_in, cam, target, "fast", accepts_unknown())
            if prog is not None:  # as the kernel opens it: no colour conversion for an NV12 consumer
                prog = program_for_output(prog, step.spec_out)
            for unit, px in (program_calls(prog) if prog is not None else []):
                out.append(WorkItem(cam.name, unit, px, fps.get(cam.name)))
        if via_aipp:
            last = plan.cameras[0].steps[-1].spec_out
            out.append(WorkItem(cam.name, "AIPP", last.width * last.height, fps.get(cam.name)))
    return out
