"""The knowledge base's vocabulary: units, operations, pixel formats, bitstreams, API names, confidences.

Read from ``data/vocabulary.yaml`` on first use (cached). Every name a request or a rule uses is
normalised here, once (case, spaces, aliases such as ``v1`` -> ``acldvpp`` or ``yuv420sp`` -> ``nv12``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ..errors import ConfigError, DvpipeError
from ._data import cached, load_yaml

__all__ = ["CONFIDENCES", "STATUSES", "KnowledgeGap", "units", "ops", "pixel_formats", "bitstreams", "align_up"]

#: Confidence levels, strongest first: hiascend CANN docs, MindX SDK docs, public sample code or legacy
#: docs, dvpipe's own reading.
CONFIDENCES = ("documented", "mindx", "secondary", "inferred")
#: Verdict statuses.
STATUSES = ("ok", "rejected", "unknown")
_KINDS = ("violation", "unknown", "effect", "note")
_APIS = ("acldvpp", "himpi")
_API_ALIASES = {"acldvpp": "acldvpp", "v1": "acldvpp", "himpi": "himpi", "hi_mpi": "himpi", "v2": "himpi"}


def _norm_api(api: Any) -> str:
    """``acldvpp`` or ``himpi`` from any accepted spelling; ConfigError otherwise."""
    a = _API_ALIASES.get(str(api).strip().lower())
    if a is None:
        raise ConfigError(f"unknown API {api!r}; use 'acldvpp' (v1) or 'himpi' (v2)")
    return a


_API_LABEL = {"acldvpp": "acldvpp", "himpi": "hi_mpi"}
_ASPECT_WORDS = {
    "in_range": "input size limits", "out_range": "output size limits", "in_format": "input formats",
    "out_format": "output formats", "in_stride": "input stride and alignment", "out_stride": "output stride",
    "bitstream": "bitstream support", "codec": "codec support", "ratio": "scale limits",
    "roi": "crop/paste rules", "channels": "channel limit", "batch": "batch limit",
    "interpolation": "interpolation modes", "availability": "availability",
}


class KnowledgeGap(DvpipeError, LookupError):
    """The docs do not settle the question asked (e.g. a stride for a product missing from the table).

    A :class:`~dvpipe.errors.DvpipeError` and a ``LookupError``: the answer is not in the documentation
    read so far; confirm it on the device (``dvpipe probe --live``) or add a rule layer that settles it.

    Attributes: ``reason`` (plain words), ``source`` (URL or None), ``rule_id`` (or None).
    """

    def __init__(self, reason: str, source: Optional[str] = None, rule_id: Optional[str] = None):
        super().__init__(reason)
        self.reason = reason
        self.source = source
        self.rule_id = rule_id


@dataclass(frozen=True)
class _Vocab:
    units: Mapping[str, Mapping[str, Any]]
    op_labels: Mapping[str, str]
    op_aliases: Mapping[str, str]
    pixel: Mapping[str, Mapping[str, Any]]
    pixel_aliases: Mapping[str, str]
    bitstreams: Mapping[str, Mapping[str, Any]]
    bitstream_aliases: Mapping[str, str]
    required: Mapping[str, Any]


@cached
def _vocab() -> _Vocab:
    d = load_yaml("vocabulary.yaml")
    return _Vocab(d["units"], d["op_labels"], d.get("op_aliases") or {}, d["pixel_formats"],
                  d.get("pixel_format_aliases") or {}, d["bitstreams"], d.get("bitstream_aliases") or {},
                  d["required_aspects"])


def units() -> tuple[str, ...]:
    """Units with rules: ``jpegd``, ``vpc``, ``vdec``, ``pngd``."""
    return tuple(_vocab().units)


def ops(unit: str) -> tuple[str, ...]:
    """Operations of a unit (``vpc``: resize, crop, crop_resize, crop_resize_paste, make_border, csc)."""
    return tuple(_vocab().units[_norm_unit(unit)]["ops"])


def pixel_formats() -> tuple[str, ...]:
    """Raw pixel format names (nv12, nv21, yuv400, ..., rgb888, ...)."""
    return tuple(_vocab().pixel)


def bitstreams() -> tuple[str, ...]:
    """Encoded input names (jpeg420, jpeg-progressive, png-rgba, h264, ...)."""
    return tuple(_vocab().bitstreams)


def _norm_unit(unit: str) -> str:
    u = str(unit).strip().lower()
    if u not in _vocab().units:
        raise ConfigError(f"unknown DVPP unit {unit!r}; known: {', '.join(_vocab().units)}")
    return u


def _norm_op(unit: str, op: Optional[str]) -> str:
    v = _vocab()
    allowed = v.units[unit]["ops"]
    if op is None:
        if len(allowed) == 1:
            return allowed[0]
        raise ConfigError(f"{v.units[unit]['label']} needs an op: one of {', '.join(allowed)}")
    o = str(op).strip().lower().replace("-", "_")
    o = v.op_aliases.get(o, o)
    if o not in allowed:
        raise ConfigError(f"unknown {v.units[unit]['label']} op {op!r}; known: {', '.join(allowed)}")
    return o


def _norm_pixel(fmt: str, what: str) -> str:
    v = _vocab()
    f = str(fmt).strip().lower()
    f = v.pixel_aliases.get(f, f)
    if f not in v.pixel:
        raise ConfigError(f"unknown {what} pixel format {fmt!r}; known: {', '.join(v.pixel)}")
    return f


def _norm_bitstream(fmt: str, unit: str) -> str:
    v = _vocab()
    f = str(fmt).strip().lower()
    f = v.bitstream_aliases.get(f, f)
    if f not in v.bitstreams:
        raise ConfigError(f"unknown input format {fmt!r} for {unit}; known: "
                          f"{', '.join(k for k, b in v.bitstreams.items() if b['unit'] == unit)}")
    if v.bitstreams[f]["unit"] != unit:
        raise ConfigError(f"{f} is an input of {v.bitstreams[f]['unit']}, not {unit}")
    return f


def bytes_per_pixel(fmt: str) -> int:
    """Bytes per pixel of pixel format ``fmt``'s first plane (the ``bpp`` of ``ws = A(w, n) * bpp``): 1 for YUV400
    and semi-planar formats, 2 for YUV422 packed, 3 for YUV444 packed / RGB888 / BGR888, 4 for the 8888 formats."""
    return int(_vocab().pixel[fmt]["bpp"])


def align_up(x: int, n: int) -> int:
    """``x`` rounded up to a multiple of ``n`` (the docs' A(x, n))."""
    return -(-int(x) // int(n)) * int(n)


def _strength(conf: str) -> int:
    """Rank of a rule confidence (:data:`CONFIDENCES`), 0 = strongest."""
    return CONFIDENCES.index(conf)
