"""Strides: width stride (bytes), height stride (rows) and buffer size (bytes) from a rule's ``stride:`` block.

:func:`stride_for` answers "how must a ``width`` x ``height`` picture of this format be laid out on this
product" from the documented tables; evaluation uses :func:`_stride_applies` / :func:`_stride_fails` for
the stride limits of a request.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from ..errors import ConfigError
from .checks import Fail as _Fail
from .schema import STRIDE_KEYS, Rule, _rules_by_unit
from .socs import family as _family, soc_info
from .versions import CannVersion, VersionLike
from .vocabulary import (_API_LABEL, KnowledgeGap, _norm_api, _norm_pixel, _norm_unit, _strength, _vocab, align_up,
                         bytes_per_pixel)

if TYPE_CHECKING:
    from .request import Request

__all__ = ["Stride", "stride_for", "STRIDE_KEYS", "jpegd_odd_size_question"]

#: the ``stride:`` keys that bound a stride from above (:attr:`Stride.limits`)
_LIMIT_KEYS = ("ws_max", "hs_max", "ws_max_open", "hs_max_open")


def _stride_applies(rule: Rule, req: "Request") -> bool:
    """A rule with a stride block applies only to the formats its stride covers (on its side)."""
    if not rule.stride:
        return True
    fmts = rule.stride.get("formats")
    fmt = req.fmt if rule.stride["side"] == "in" else req.out_fmt
    return fmts is None or fmt in fmts


def _compute_stride(spec: Mapping[str, Any], fmt: str, w: int, h: int) -> tuple[int, int, int, bool]:
    """(ws bytes, hs rows, buffer bytes, size_inferred) from a stride block."""
    bpp = bytes_per_pixel(fmt) if spec.get("times_bpp") else 1
    wa = int((spec.get("ws_align_for") or {}).get(fmt, spec.get("ws_align", 1)))
    ws = align_up(w, wa) * bpp
    if spec.get("ws_min") and ws < spec["ws_min"]:
        ws = align_up(int(spec["ws_min"]), wa * bpp)
    ha = int((spec.get("hs_align_for") or {}).get(fmt, spec.get("hs_align", 1)))
    hs = align_up(h, ha)
    if spec.get("hs_min") and hs < spec["hs_min"]:
        hs = align_up(int(spec["hs_min"]), ha)
    sizes = spec.get("size") or {}
    inferred = fmt not in sizes
    mult = Fraction(str(sizes[fmt])) if not inferred else Fraction(str(_vocab().pixel[fmt]["size"]))
    return ws, hs, math.ceil(ws * hs * mult), inferred


def _stride_fails(rule: Rule, req: "Request") -> list[_Fail]:
    spec = rule.stride
    if not spec:
        return []
    side = spec["side"]
    fmt, (h, w) = (req.fmt, (req.height, req.width)) if side == "in" else (req.out_fmt, req.out_size)
    assert fmt is not None  # Request.__post_init__ fills out_fmt
    ws, hs, _, _ = _compute_stride(spec, fmt, w, h)
    out = []
    word = "input" if side == "in" else "output"
    for val, key, what in ((ws, "ws", "width stride"), (hs, "hs", "height stride")):
        unit_ = "bytes" if key == "ws" else "rows"
        if spec.get(f"{key}_max") and val > spec[f"{key}_max"]:
            out.append(_Fail(f"{side}_{key}", f"{word} {what} {val} {unit_} exceeds the maximum {spec[f'{key}_max']}",
                             f"{key}_max"))
        elif spec.get(f"{key}_max_open") and val > spec[f"{key}_max_open"]:
            out.append(_Fail(f"{side}_{key}", f"{word} {what} {val} {unit_} is above {spec[f'{key}_max_open']}, "
                                              "the largest documented", f"{key}_max_open", unknown=True))
    return out


class Stride(tuple):
    """``(width_stride, height_stride, buffer_bytes)``: ws in bytes, hs in rows, buffer in bytes (a lower
    bound for the allocation). Unpacks and compares like a plain 3-tuple and also carries where it came
    from: ``rule_id``, ``confidence``, ``source``, ``side``, ``fmt``, ``api``, ``note``, and ``limits``: the
    rule's stride maxima for a stride the caller sets larger (``ws_max`` / ``hs_max``: documented, above is
    refused; ``ws_max_open`` / ``hs_max_open``: above them the docs leave it open), e.g. ``{"ws_max": 16384,
    "hs_max": 16384}`` for VPC input on Ascend310 (CANN 6.0.1 aclcppdevg_03_0168).
    """

    rule_id: str
    confidence: str
    source: str
    side: str
    fmt: str
    api: str
    note: str
    limits: Mapping[str, int]

    def __new__(cls, ws: int, hs: int, size: int, *, rule_id: str, confidence: str, source: str, side: str,
                fmt: str, api: str, note: str = "", limits: Optional[Mapping[str, int]] = None) -> "Stride":
        self = super().__new__(cls, (ws, hs, size))
        self.rule_id, self.confidence, self.source = rule_id, confidence, source
        self.side, self.fmt, self.api, self.note = side, fmt, api, note
        self.limits = dict(limits or {})
        return self

    @property
    def width_stride(self) -> int:
        return self[0]

    @property
    def height_stride(self) -> int:
        return self[1]

    @property
    def buffer_bytes(self) -> int:
        return self[2]

    def __repr__(self) -> str:
        return (f"Stride(ws={self[0]}, hs={self[1]}, buffer={self[2]}, rule={self.rule_id}, "
                f"confidence={self.confidence})")


def stride_for(soc: Optional[str], cann: VersionLike, unit: str, fmt: str, width: int, height: int, *,
               api: Optional[str] = None, side: Optional[str] = None, family: Optional[str] = None) -> Stride:
    """Width stride (bytes), height stride (rows) and buffer size (bytes) for a ``width`` x ``height``
    picture in pixel format ``fmt``.

    ``side`` is ``out`` (the decoded picture; default for jpegd/vdec/pngd) or ``in`` (the picture VPC
    reads; default for vpc). ``stride_for("Ascend310", "6.0.1", "jpegd", "nv12", 1242, 375)`` is
    ``(1280, 384, 737280)``.

    Raises:
        KnowledgeGap: no documented stride for this product/API/format (e.g. JPEGD on Atlas A3).
        ConfigError: malformed arguments (a ``ValueError``).
    """
    u = _norm_unit(unit)
    side = side or ("in" if u == "vpc" else "out")
    if side not in ("in", "out"):
        raise ConfigError(f"side={side!r}: give side='in' (the picture VPC reads) or side='out' (the decoded picture)")
    f = _norm_pixel(fmt, "stride")
    if soc is not None:
        info = soc_info(soc)
        fam = _family(info.family)
    elif family is not None:
        fam = _family(family)
    else:
        raise ConfigError("stride_for needs the product: give soc= (e.g. 'Ascend310P3') or family= (a family key)")
    v = CannVersion.parse(cann)
    apis: Sequence[str] = (_norm_api(api),) if api is not None else fam.apis
    gaps: list[Rule] = []
    for a in apis:
        cands = []
        for r in _rules_by_unit()[u]:
            if not (fam.key in r.families and r.api in (a, "any") and r.unit in (u, "any") and v in r.cann):
                continue
            if r.stride and r.stride["side"] == side and (r.stride.get("formats") is None or f in r.stride["formats"]):
                if all(k in ("out_fmt", "fmt", "out_fmt_not", "fmt_not") for k in r.when):
                    probe = {"fmt": f, "out_fmt": f}
                    if _selectors_on_fmt(r.when, probe, side):
                        cands.append(r)
            elif r.unknown and f"{side}_stride" in r.aspects:
                gaps.append(r)
        if cands:
            rule = min(cands, key=lambda r: _strength(r.confidence))
            stride = rule.stride
            assert stride is not None  # candidates have a stride block
            ws, hs, size, size_inferred = _compute_stride(stride, f, width, height)
            conf = rule.confidence
            notes = []
            first = rule.documented_from(fam.key)
            if first is not None and v < first:
                conf = "inferred"
                notes.append(f"documented from CANN {first}; assumed unchanged for {v}")
            if size_inferred:
                conf = max(conf, "inferred", key=_strength)
                notes.append(f"the buffer multiple for {f} is not in the table; derived from the {f} layout")
            if stride.get("size_note"):
                notes.append(stride["size_note"])
            if v < fam.documented_from or (fam.dropped_from is not None and v >= fam.dropped_from):
                conf = "inferred"
                notes.append(f"{fam.label} is not in the DVPP docs at CANN {v}")
            notes.extend(x.notice for x in _rules_by_unit()[u] if x.notice and "stride" in x.id
                         and fam.key in x.families and x.api in (a, "any") and v in x.cann)
            limits = {k: int(stride[k]) for k in _LIMIT_KEYS if stride.get(k)}
            return Stride(ws, hs, size, rule_id=rule.id, confidence=conf, source=rule.source, side=side, fmt=f,
                          api=a, note="; ".join(notes), limits=limits)
    if gaps:
        g = gaps[0]
        raise KnowledgeGap(g.unknown or "", g.source, g.id)
    raise KnowledgeGap(f"no documented {side}put stride for {u.upper()} {f} on {fam.label} "
                       f"({'/'.join(_API_LABEL[a] for a in apis)}) at CANN {v}")


def _selectors_on_fmt(when: Mapping[str, Any], probe: Mapping[str, str], side: str) -> bool:
    for k, val in when.items():
        key = "fmt" if k.startswith("fmt") else "out_fmt"
        if (key == "fmt") != (side == "in"):
            continue  # a selector on the other side's format does not constrain this stride
        inside = probe[key] in val
        if k.endswith("_not") == inside:
            return False
    return True


def jpegd_odd_size_question(soc: str, cann: VersionLike, width: int, height: int, fmt: str = "nv12") -> Optional[str]:
    """Why the JPEGD output stride of an odd-size ``width`` x ``height`` JPEG is not settled, or None.

    The decoded YUV420SP picture is floored to even (constraints.md 1.3), but the documentation does not say
    whether its stride aligns that even size or the JPEG's own (Huawei's samples align the JPEG's own:
    ``ALIGN_UP128(width)``, ``ALIGN_UP16(height)``). Where the two readings give different strides, dvpipe
    takes the stricter view: the software DVPP device refuses the decode and the planner keeps it off DVPP.
    None where the size is even, the readings agree, or no stride is documented (a :class:`KnowledgeGap`
    the caller meets on its own)."""
    even_w, even_h = width // 2 * 2, height // 2 * 2
    if (even_w, even_h) == (width, height):
        return None
    try:
        own = stride_for(soc, cann, "jpegd", fmt, width, height)
        floored = stride_for(soc, cann, "jpegd", fmt, even_w, even_h)
    except KnowledgeGap:
        return None
    if (own.width_stride, own.height_stride) == (floored.width_stride, floored.height_stride):
        return None
    return (f"JPEGD output of a {width}x{height} JPEG: aligning its own size gives stride {own.width_stride}x"
            f"{own.height_stride}, aligning the even {even_w}x{even_h} it is floored to gives {floored.width_stride}x"
            f"{floored.height_stride}; the documentation does not say which the device uses [{own.rule_id}]")
