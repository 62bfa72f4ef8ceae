"""The documented DVPP unit throughput (``dvpipe/knowledge/data/capacity.yaml``): figures per product family,
channel limits, the scaling by pixel count, and the device time they predict for one DVPP step.

The data and the arithmetic :mod:`dvpipe.probe.capacity` forecasts a deployment with, and what the software DVPP
device records beside its CPU-emulation time (:func:`predicted_step_ns`, called by :mod:`dvpipe.backends.dvpp.vpc`).
Units: frames per second, pixels = width x height, nanoseconds. Nothing here is a measurement on Ascend hardware.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from ._data import cached, load_yaml
from .socs import families as all_families

__all__ = ["Figure", "ChannelLimit", "figures", "throughput_figure", "channel_limits", "unknown_reason", "scaling",
           "reference_pixels", "total_fps", "program_calls", "predicted_step_ns", "DATA_FILE", "UNITS"]

DATA_FILE = "capacity.yaml"
UNITS = ("JPEGD", "VDEC", "VPC", "AIPP")


@dataclass(frozen=True)
class Figure:
    """A unit's throughput on a family: ``rows`` = reference -> (per-channel fps, max total fps) (None: not given).

    ``measured`` is set for a ``--live --capacity`` measurement (its date, driver, device); then
    ``source``/``page``/``cann`` describe the measurement instead of a page."""

    id: str
    unit: str
    families: tuple[str, ...]
    rows: Mapping[str, tuple[Optional[float], float]]
    source: str
    page: str
    cann: str
    quote: str = ""
    note: str = ""
    api: str = ""
    measured: Optional[Mapping[str, Any]] = None

    def label(self) -> str:
        """How the table names the figure's origin."""
        if self.measured:
            m = self.measured
            where = "measured on this device" if m.get("hardware") else \
                "measured on the software device (dvpp-sim), NOT a hardware measurement"
            return f"{where} ({m.get('date')}, driver {m.get('driver') or '?'})"
        return f"documented: {self.page} (CANN {self.cann})"

    def to_dict(self) -> dict:
        return {"id": self.id, "unit": self.unit, "rows": {k: {"per_channel_fps": p, "max_total_fps": m}
                                                           for k, (p, m) in self.rows.items()},
                "source": self.source, "page": self.page, "cann": self.cann, "quote": self.quote,
                "note": self.note or None, "api": self.api or None, "measured": dict(self.measured or {}) or None,
                "label": self.label()}


@dataclass(frozen=True)
class ChannelLimit:
    """At most ``max_channels`` channels of ``units`` together (one pool) on ``families``."""

    id: str
    units: tuple[str, ...]
    families: tuple[str, ...]
    max_channels: int
    source: str
    page: str
    cann: str
    api: str = ""
    quote: str = ""


# ------------------------------------------------------------------------------------------- data

def _cached(fn: Any) -> Any:
    return cached(fn)


def _data() -> dict:
    return load_yaml(DATA_FILE)


def _families(names: Iterable[str]) -> tuple[str, ...]:
    names = tuple(names)
    return tuple(f.key for f in all_families()) if "all" in names else names


def figures() -> tuple[Figure, ...]:
    """Every documented throughput figure (``capacity.yaml`` ``throughput``); parsed once (cached)."""
    return _figures()


@_cached
def _figures() -> tuple[Figure, ...]:
    out = []
    for d in _data().get("throughput", []):
        rows = {str(k): (None if v.get("per_channel_fps") is None else float(v["per_channel_fps"]),
                         float(v["max_total_fps"])) for k, v in d["rows"].items()}
        out.append(Figure(d["id"], d["unit"], _families(d["families"]), rows, d["source"], d["page"], str(d["cann"]),
                          d.get("quote", ""), d.get("note", "").strip(), d.get("api", "")))
    return tuple(out)


def channel_limits(family: str, unit: Optional[str] = None) -> tuple[ChannelLimit, ...]:
    """The documented channel limits on ``family`` (of ``unit``, when given)."""
    out = []
    for d in _data().get("channels", []):
        lim = ChannelLimit(d["id"], tuple(d["units"]), _families(d["families"]), int(d["max_channels"]), d["source"],
                           d["page"], str(d["cann"]), d.get("api", ""), d.get("quote", ""))
        if family in lim.families and (unit is None or unit in lim.units):
            out.append(lim)
    return tuple(out)


def throughput_figure(family: str, unit: str) -> Optional[Figure]:
    """The documented figure of ``unit`` on ``family``, or None (then :func:`unknown_reason` says why)."""
    return next((f for f in figures() if f.unit == unit and family in f.families), None)


def unknown_reason(family: str, unit: str) -> str:
    """Why no figure exists for ``unit`` on ``family`` (the data's ``open`` list, else a generic line)."""
    for d in _data().get("open", []):
        if unit in d["units"] and family in _families(d["families"]):
            return " ".join(str(d["why"]).split())
    return f"no page read gives a {unit} throughput for {family}"


def scaling() -> dict:
    """The scaling rule, its page and the assumption behind it (``capacity.yaml`` ``scaling``)."""
    return dict(_data()["scaling"])


def reference_pixels() -> dict[str, int]:
    """Reference name -> pixel count (``1080p`` -> 1920 * 1080)."""
    return {k: int(w) * int(h) for k, (w, h) in _data()["references"].items()}


def _ref_px(name: str) -> int:
    """Pixels of a reference: a named one (``1080p``) or a measured size (``1600x900``)."""
    refs = reference_pixels()
    if name in refs:
        return refs[name]
    w, _, h = name.partition("x")
    return int(w) * int(h)


def _nearest_reference(fig: Figure, pixels: float) -> str:
    return min(fig.rows, key=lambda r: (abs(math.log(pixels / _ref_px(r))), _ref_px(r)))


def total_fps(per_channel: Optional[float], max_total: float, channels: int) -> float:
    """``min(n * per_channel, max_total)`` (``max_total`` when the page gives no per-channel rate)."""
    if per_channel is None:
        return max_total
    return min(channels * per_channel, max_total)


def program_calls(program: Any, name: Optional[str] = None) -> list[tuple[str, int]]:
    """``(unit, pixels)`` of each DVPP call of a DVPP step's :class:`~dvpipe.backends.dvpp.support.Program`:
    the decoder (``JPEGD``/``VDEC``) at the camera's size, then every VPC call at the larger of its input and
    output (the VPC pages' reference resolution). ``name``: a device span's name (``jpegd+vpc.resize``,
    ``vdec``, ``vpc``): only the calls that span covers."""
    calls: list[tuple[str, int]] = []
    if name is None or name.startswith(("jpegd", "vdec")):
        calls.append((program.source.upper(), program.in_size[0] * program.in_size[1]))
    if name is None or "vpc" in name:
        h, w = program.decode_size
        for op in program.ops:
            if op.crop is not None:
                h, w = op.crop[3] - op.crop[1] + 1, op.crop[2] - op.crop[0] + 1
            oh, ow = op.out_size
            calls.append(("VPC", max(h * w, oh * ow)))
            h, w = oh, ow
    return calls


def predicted_step_ns(target: Any, units: Sequence[tuple[str, int]]) -> tuple[Optional[int], str]:
    """Predicted device time (ns) of one DVPP step on one channel with no other channel busy: the sum over
    its unit calls ``(unit, pixels)`` of ``pixels / p_ref / per_channel_fps`` (documented figures only).

    Returns ``(ns, basis)``; ``(None, why)`` when a unit of the step has no documented figure. Used by the
    software DVPP device to record, beside its CPU-emulation time, what the step would take on the target.
    """
    family = getattr(target, "family", None)
    if not family:
        return None, "no target SoC: nothing to predict from"
    total = 0.0
    pages = []
    for unit, px in units:
        fig = throughput_figure(family, unit)
        if fig is None:
            return None, f"no documented {unit} figure for {target.soc}: {unknown_reason(family, unit)}"
        ref = _nearest_reference(fig, px)
        per, mx = fig.rows[ref]
        total += px / _ref_px(ref) / total_fps(per, mx, 1)
        pages.append(f"{unit} {fig.page} (CANN {fig.cann})")
    return int(round(total * 1e9)), (f"predicted from documented throughput on {target.soc}, one channel: "
                                     + "; ".join(pages))
