"""DVPP rules as data, and the queries over them: verdicts, strides, requirements.

Facts live in ``data/rules_*.yaml`` (schema in the header of ``rules_vpc.yaml``); this module only
evaluates them. Sizes are in pixels, strides and buffers in bytes (the width stride ``ws``) or rows (the
height stride ``hs``), as in the CANN docs.

Typical use::

    from dvpipe.knowledge import check
    v = check("Ascend310", "6.0.1", "vpc", "resize", 1242, 375, "nv12", out_width=620, out_height=188)
    v.status      # "rejected"
    v.reasons[0].message
    # 'VPC resize on Ascend310 (CANN 6.0.1): input height 375 must be even (floored to 374 silently)'

A verdict is ``ok`` only when every applicable documented rule passes and every aspect the request needs
(input range, formats, stride, ...) is covered by some rule; what the docs leave open is ``unknown`` with
the reason, never a guess.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Iterable, Mapping, Optional, Sequence

from ._data import load_yaml, rule_files, strip_private
from .socs import family as _family, latest_checked, soc_info
from .versions import CannVersion, VersionLike, VersionRange, page_version

__all__ = [
    "CONFIDENCES", "STATUSES", "Rule", "Request", "Finding", "Verdict", "Stride", "Requirements",
    "KnowledgeGap", "OpenQuestion", "check", "evaluate", "stride_for", "requirements", "rules",
    "open_questions", "units", "ops", "pixel_formats", "bitstreams", "LEVELS", "Confidence", "confidence_of",
    "rule_confidence", "combine_confidence", "rule_by_id", "documented_versions",
]

#: Confidence levels, strongest first: hiascend CANN docs, MindX SDK docs, public sample code or legacy
#: docs, dvpipe's own reading.
CONFIDENCES = ("documented", "mindx", "secondary", "inferred")
#: Verdict statuses.
STATUSES = ("ok", "rejected", "unknown")
_KINDS = ("violation", "unknown", "effect", "note")
_APIS = ("acldvpp", "himpi")
_API_ALIASES = {"acldvpp": "acldvpp", "v1": "acldvpp", "himpi": "himpi", "hi_mpi": "himpi", "v2": "himpi"}


def _norm_api(api: Any) -> str:
    """``acldvpp`` or ``himpi`` from any accepted spelling; ValueError otherwise."""
    a = _API_ALIASES.get(str(api).strip().lower())
    if a is None:
        raise ValueError(f"unknown API {api!r}; use 'acldvpp' (v1) or 'himpi' (v2)")
    return a
_API_LABEL = {"acldvpp": "acldvpp", "himpi": "hi_mpi"}
_ASPECT_WORDS = {
    "in_range": "input size limits", "out_range": "output size limits", "in_format": "input formats",
    "out_format": "output formats", "in_stride": "input stride and alignment", "out_stride": "output stride",
    "bitstream": "bitstream support", "codec": "codec support", "ratio": "scale limits",
    "roi": "crop/paste rules", "channels": "channel limit", "batch": "batch limit",
    "interpolation": "interpolation modes", "availability": "availability",
}
_RULE_KEYS = {
    "id", "section", "unit", "ops", "api", "families", "cann", "documented_in", "aspects", "when", "check",
    "on_fail", "violation_effect", "effect", "effect_odd", "unknown", "reject", "notice", "info", "why",
    "stride", "confidence", "source", "also", "open_question", "note",
}
_WHEN_KEYS = {"fmt", "fmt_not", "out_fmt", "out_fmt_not", "any_dim_gt", "in_w_gt", "exif_rotated", "exif_swap",
              "min_pixels", "odd_for", "given"}
_CHECK_KEYS = {"in_w", "in_h", "out_w", "out_h", "short_side_max", "crop_min", "in_formats", "in_formats_unknown",
               "out_formats", "out_formats_by_source", "out_same_as_input", "w_align_for", "h_align_for",
               "out_w_align_for", "out_h_align_for", "ops", "ratio", "roi", "paste_left_align", "channels_max",
               "batch_max", "interpolation", "codecs", "container"}
_STRIDE_KEYS = {"side", "formats", "ws_align", "ws_align_for", "times_bpp", "ws_min", "hs_align", "hs_align_for",
                "hs_min", "size", "ws_max", "hs_max", "ws_max_open", "hs_max_open", "size_note"}
_GIVEN_FIELDS = {"channels", "batch", "interpolation", "profile", "level", "bit_depth", "container"}


class KnowledgeGap(LookupError):
    """The docs do not settle the question asked (e.g. a stride for a product missing from the table).

    Attributes: ``reason`` (plain words), ``source`` (URL or None), ``rule_id`` (or None).
    """

    def __init__(self, reason: str, source: Optional[str] = None, rule_id: Optional[str] = None):
        super().__init__(reason)
        self.reason = reason
        self.source = source
        self.rule_id = rule_id


# ----------------------------------------------------------------------------------------------- vocabulary

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


@functools.lru_cache(maxsize=None)
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
        raise ValueError(f"unknown DVPP unit {unit!r}; known: {', '.join(_vocab().units)}")
    return u


def _norm_op(unit: str, op: Optional[str]) -> str:
    v = _vocab()
    allowed = v.units[unit]["ops"]
    if op is None:
        if len(allowed) == 1:
            return allowed[0]
        raise ValueError(f"{v.units[unit]['label']} needs an op: one of {', '.join(allowed)}")
    o = str(op).strip().lower().replace("-", "_")
    o = v.op_aliases.get(o, o)
    if o not in allowed:
        raise ValueError(f"unknown {v.units[unit]['label']} op {op!r}; known: {', '.join(allowed)}")
    return o


def _norm_pixel(fmt: str, what: str) -> str:
    v = _vocab()
    f = str(fmt).strip().lower()
    f = v.pixel_aliases.get(f, f)
    if f not in v.pixel:
        raise ValueError(f"unknown {what} pixel format {fmt!r}; known: {', '.join(v.pixel)}")
    return f


def _norm_bitstream(fmt: str, unit: str) -> str:
    v = _vocab()
    f = str(fmt).strip().lower()
    f = v.bitstream_aliases.get(f, f)
    if f not in v.bitstreams:
        raise ValueError(f"unknown input format {fmt!r} for {unit}; known: "
                         f"{', '.join(k for k, b in v.bitstreams.items() if b['unit'] == unit)}")
    if v.bitstreams[f]["unit"] != unit:
        raise ValueError(f"{f} is an input of {v.bitstreams[f]['unit']}, not {unit}")
    return f


def _bpp(fmt: str) -> int:
    return int(_vocab().pixel[fmt]["bpp"])


# ----------------------------------------------------------------------------------------------- rules

@dataclass(frozen=True, eq=False)
class Rule:
    """One documented fact (or documented gap). See the schema in ``data/rules_vpc.yaml``.

    ``documented_in`` maps each family to the CANN versions whose pages stated the rule; ``cann`` is the
    hard window outside which the rule does not apply.
    """

    id: str
    section: str
    unit: str
    ops: Optional[tuple[str, ...]]
    api: str
    families: tuple[str, ...]
    cann: VersionRange
    documented_in: Mapping[str, tuple[CannVersion, ...]]
    aspects: frozenset
    when: Mapping[str, Any]
    check: Mapping[str, Any]
    on_fail: str
    confidence: str
    source: str
    also: tuple[str, ...] = ()
    why: Optional[str] = None
    violation_effect: Optional[str] = None
    effect: Optional[str] = None
    effect_odd: Optional[Mapping[str, Any]] = None
    unknown: Optional[str] = None
    reject: Optional[str] = None
    notice: Optional[str] = None
    info: Optional[str] = None
    stride: Optional[Mapping[str, Any]] = None
    open_question: Optional[str] = None
    note: Optional[str] = None
    file: str = ""

    def documented_from(self, family_key: str) -> Optional[CannVersion]:
        """Earliest CANN version whose docs stated this rule for the family (None: not a CANN doc)."""
        vs = self.documented_in.get(family_key, ())
        return min(vs) if vs else None

    def applies_to(self, family_key: str, api: str, unit: str, op: str, cann: CannVersion) -> bool:
        """Family/API/unit/op/version match (selectors in ``when`` are not evaluated here)."""
        return (family_key in self.families and self.api in (api, "any") and self.unit in (unit, "any")
                and (self.ops is None or op in self.ops) and cann in self.cann)


def _ratio_bound(x: Any) -> Fraction:
    return Fraction(str(x))


def _parse_rule(raw: Mapping[str, Any], fname: str, fam_keys: set) -> Rule:
    rid = raw.get("id", "?")

    def bad(msg: str) -> ValueError:
        return ValueError(f"{fname}: rule {rid}: {msg}")

    extra = set(raw) - _RULE_KEYS
    if extra:
        raise bad(f"unknown keys {sorted(extra)}")
    for k in ("id", "section", "unit", "api", "families", "confidence", "source"):
        if k not in raw:
            raise bad(f"missing {k}")
    unit = raw["unit"]
    if unit != "any" and unit not in _vocab().units:
        raise bad(f"unknown unit {unit}")
    ops_ = raw.get("ops")
    if ops_ is not None:
        for o in ops_:
            if unit == "any" or o not in _vocab().units[unit]["ops"]:
                raise bad(f"unknown op {o}")
    if raw["api"] not in ("acldvpp", "himpi", "any"):
        raise bad(f"unknown api {raw['api']}")
    fams = tuple(raw["families"])
    for f in fams:
        if f not in fam_keys:
            raise bad(f"unknown family {f}")
    if raw["confidence"] not in CONFIDENCES:
        raise bad(f"confidence must be one of {CONFIDENCES}")
    for url in (raw["source"], *raw.get("also", ())):
        if not str(url).startswith("https://"):
            raise bad(f"source must be a full https URL, got {url!r}")
    when = dict(raw.get("when") or {})
    if set(when) - _WHEN_KEYS:
        raise bad(f"unknown selector {sorted(set(when) - _WHEN_KEYS)}")
    chk = dict(raw.get("check") or {})
    if set(chk) - _CHECK_KEYS:
        raise bad(f"unknown check {sorted(set(chk) - _CHECK_KEYS)}")
    if "ratio" in chk:
        chk["ratio"] = (_ratio_bound(chk["ratio"][0]), _ratio_bound(chk["ratio"][1]))
    stride = raw.get("stride")
    if stride is not None:
        if set(stride) - _STRIDE_KEYS:
            raise bad(f"unknown stride key {sorted(set(stride) - _STRIDE_KEYS)}")
        if stride.get("side") not in ("in", "out"):
            raise bad("stride.side must be in or out")
    on_fail = raw.get("on_fail", "reject")
    if on_fail not in ("reject", "unknown"):
        raise bad("on_fail must be reject or unknown")
    doc = raw.get("documented_in") or []
    if isinstance(doc, Mapping):
        documented = {f: tuple(CannVersion.parse(v) for v in doc.get(f, ())) for f in fams}
        if set(doc) - set(fams):
            raise bad("documented_in names families the rule does not list")
    else:
        vs = tuple(CannVersion.parse(v) for v in doc)
        documented = {f: vs for f in fams}
    aspects = set(raw.get("aspects") or ())
    if stride is not None:
        aspects.add(f"{stride['side']}_stride")
    if set(aspects) - set(_ASPECT_WORDS):
        raise bad(f"unknown aspect {sorted(set(aspects) - set(_ASPECT_WORDS))}")
    if raw.get("open_question") and raw["open_question"] not in _open_questions_raw():
        raise bad(f"unknown open question {raw['open_question']}")
    return Rule(
        id=rid, section=str(raw["section"]), unit=unit, ops=tuple(ops_) if ops_ is not None else None,
        api=raw["api"], families=fams, cann=VersionRange.from_mapping(raw.get("cann")), documented_in=documented,
        aspects=frozenset(aspects), when=when, check=chk, on_fail=on_fail, confidence=raw["confidence"],
        source=raw["source"], also=tuple(raw.get("also", ())), why=raw.get("why"),
        violation_effect=raw.get("violation_effect"), effect=raw.get("effect"), effect_odd=raw.get("effect_odd"),
        unknown=raw.get("unknown"), reject=raw.get("reject"), notice=raw.get("notice"), info=raw.get("info"),
        stride=stride, open_question=raw.get("open_question"), note=raw.get("note"), file=fname,
    )


@functools.lru_cache(maxsize=None)
def _open_questions_raw() -> Mapping[str, str]:
    return load_yaml("open_questions.yaml")["open_questions"]


@functools.lru_cache(maxsize=None)
def _all_rules() -> tuple[Rule, ...]:
    from .socs import families as _families

    fam_keys = {f.key for f in _families()}
    out: list[Rule] = []
    seen: set = set()
    for fname in rule_files():
        data = strip_private(load_yaml(fname))
        for raw in data.get("rules") or ():
            rule = _parse_rule(raw, fname, fam_keys)
            if rule.id in seen:
                raise ValueError(f"{fname}: duplicate rule id {rule.id}")
            seen.add(rule.id)
            out.append(rule)
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _rules_by_unit() -> Mapping[str, tuple[Rule, ...]]:
    idx: dict[str, list[Rule]] = {u: [] for u in _vocab().units}
    for r in _all_rules():
        for u in (idx if r.unit == "any" else (r.unit,)):
            idx[u].append(r)
    return {u: tuple(v) for u, v in idx.items()}


def rules(*, family: Optional[str] = None, unit: Optional[str] = None, api: Optional[str] = None) -> tuple[Rule, ...]:
    """All rules, optionally filtered by family key, unit and API (``any``-rules are included)."""
    out = []
    for r in _all_rules():
        if family is not None and family not in r.families:
            continue
        if unit is not None and r.unit not in (unit, "any"):
            continue
        if api is not None and r.api not in (api, "any"):
            continue
        out.append(r)
    return tuple(out)


@dataclass(frozen=True)
class OpenQuestion:
    id: str
    text: str
    rule_ids: tuple[str, ...]


def open_questions() -> tuple[OpenQuestion, ...]:
    """What the docs leave open (constraints.md §9), with the rules that report it as ``unknown``."""
    by_q: dict[str, list[str]] = {}
    for r in _all_rules():
        if r.open_question:
            by_q.setdefault(r.open_question, []).append(r.id)
    return tuple(OpenQuestion(q, " ".join(t.split()), tuple(by_q.get(q, ()))) for q, t in _open_questions_raw().items())


# ----------------------------------------------------------------------------------------------- requests

def _box(value: Any, name: str) -> Optional[tuple[int, int, int, int]]:
    if value is None:
        return None
    try:
        left, top, right, bottom = (int(x) for x in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be (left, top, right, bottom) in pixels, inclusive; got {value!r}") from None
    if left < 0 or top < 0 or right < left or bottom < top:
        raise ValueError(f"{name} {value!r} is not a box: need 0 <= left <= right and 0 <= top <= bottom "
                         "(inclusive offsets)")
    return (left, top, right, bottom)


@dataclass(frozen=True)
class Request:
    """One DVPP step to judge. Sizes in pixels.

    Attributes:
        soc: SoC name as returned by ``acl.get_soc_name()`` (or None when ``family`` is given).
        cann: CANN version.
        unit: ``jpegd`` | ``vpc`` | ``vdec`` | ``pngd``.
        op: ``decode`` for decoders; VPC: ``resize``, ``crop``, ``crop_resize``, ``crop_resize_paste``,
            ``make_border``, ``csc``.
        width, height: input picture (or stream) size in pixels.
        fmt: input format: a bitstream for decoders (``jpeg420``, ``jpeg-progressive``, ``png-rgba``,
            ``h264``...), a pixel format for VPC (``nv12``, ``yuv444sp``, ``rgb888``...).
        out_fmt: output pixel format; default ``nv12`` for JPEGD/VDEC, ``rgb888`` for PNGD, the input
            format for VPC.
        out_width, out_height: output size (resize, crop-resize, the paste canvas; decoders: default = input).
        crop: crop box ``(left, top, right, bottom)``, inclusive offsets, in the input.
        paste: paste box ``(left, top, right, bottom)``, inclusive, in the ``out_width`` x ``out_height`` canvas.
        border: make-border widths ``(top, bottom, left, right)``.
        api: ``acldvpp`` (v1) or ``himpi`` (v2); None: the family's APIs are tried in order of preference.
        family: family key, when no SoC name is known (support matrices).
        bit_depth, profile, level, interlaced, chroma, container: VDEC stream properties.
        orientation: EXIF orientation of a JPEG (1 = none; 5..8 swap width and height).
        channels: number of channels the deployment wants to open on this unit.
        batch: pictures per hi_mpi call.
        interpolation: ``bilinear`` | ``nearest`` (resize), or None for the hardware default.
    """

    soc: Optional[str]
    cann: CannVersion
    unit: str
    op: str
    width: int
    height: int
    fmt: str
    out_fmt: Optional[str] = None
    out_width: Optional[int] = None
    out_height: Optional[int] = None
    crop: Optional[tuple[int, int, int, int]] = None
    paste: Optional[tuple[int, int, int, int]] = None
    border: Optional[tuple[int, int, int, int]] = None
    api: Optional[str] = None
    family: str = ""
    bit_depth: Optional[int] = None
    profile: Optional[str] = None
    level: Optional[float] = None
    interlaced: Optional[bool] = None
    chroma: Optional[str] = None
    container: Optional[str] = None
    orientation: int = 1
    channels: Optional[int] = None
    batch: Optional[int] = None
    interpolation: Optional[str] = None
    soc_confidence: str = field(default="documented", compare=False)
    soc_note: str = field(default="", compare=False)

    @classmethod
    def make(cls, soc: Optional[str] = None, cann: Optional[VersionLike] = None, unit: str = "", op: Optional[str] = None,
             width: int = 0, height: int = 0, fmt: str = "", **kw: Any) -> "Request":
        """Build and validate a request (same arguments as :func:`check`)."""
        unknown = set(kw) - {f for f in cls.__dataclass_fields__} - {"soc_confidence", "soc_note"}
        if unknown:
            raise ValueError(f"unknown request fields {sorted(unknown)}")
        if cann is None:
            raise ValueError("a CANN version is required, e.g. cann='8.0.RC1'")
        return cls(soc=soc, cann=cann, unit=unit, op=op, width=width, height=height, fmt=fmt, **kw)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        s = object.__setattr__
        s(self, "cann", CannVersion.parse(self.cann))
        if self.soc is None and not self.family:
            raise ValueError("give soc='Ascend...' (from acl.get_soc_name()) or family='ascend310p'")
        if self.soc is not None:
            info = soc_info(self.soc)
            if self.family and self.family != info.family:
                raise ValueError(f"soc {self.soc} is in family {info.family}, not {self.family}")
            s(self, "family", info.family)
            s(self, "soc_confidence", info.confidence)
            s(self, "soc_note", info.note)
        else:
            _family(self.family)
            s(self, "soc_confidence", "documented")
        unit = _norm_unit(self.unit)
        s(self, "unit", unit)
        s(self, "op", _norm_op(unit, self.op))
        for name in ("width", "height"):
            val = getattr(self, name)
            if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
                raise ValueError(f"{name} must be a positive integer number of pixels, got {val!r}")
        v = _vocab()
        if v.units[unit]["input"] == "pixel":
            s(self, "fmt", _norm_pixel(self.fmt, "input"))
        else:
            s(self, "fmt", _norm_bitstream(self.fmt, unit))
        out_fmt = self.out_fmt if self.out_fmt is not None else v.units[unit].get("default_out_fmt", self.fmt)
        s(self, "out_fmt", _norm_pixel(out_fmt, "output"))
        if self.api is not None:
            s(self, "api", _norm_api(self.api))
        s(self, "crop", _box(self.crop, "crop"))
        s(self, "paste", _box(self.paste, "paste"))
        if self.border is not None:
            b = tuple(int(x) for x in self.border)
            if len(b) != 4 or min(b) < 0:
                raise ValueError("border must be (top, bottom, left, right), non-negative pixels")
            s(self, "border", b)
        if self.interpolation is not None:
            s(self, "interpolation", str(self.interpolation).strip().lower())
        if self.container is not None:
            s(self, "container", str(self.container).strip().lower().replace("-", ""))
        if self.profile is not None:
            s(self, "profile", str(self.profile).strip().lower().replace(" ", ""))
        if not 1 <= int(self.orientation) <= 8:
            raise ValueError("orientation is the EXIF orientation 1..8")
        self._validate_geometry()

    def _validate_geometry(self) -> None:
        op = self.op
        if op in ("crop", "crop_resize", "crop_resize_paste"):
            if self.crop is None:
                raise ValueError(f"VPC {op} needs crop=(left, top, right, bottom)")
            if self.crop[2] >= self.width or self.crop[3] >= self.height:
                raise ValueError(f"crop box {self.crop} lies outside the {self.width}x{self.height} input "
                                 "(offsets are inclusive: right <= width-1, bottom <= height-1)")
        if op in ("resize", "crop_resize", "crop_resize_paste") and (self.out_width is None or self.out_height is None):
            raise ValueError(f"VPC {op} needs out_width and out_height")
        if op == "crop_resize_paste":
            if self.paste is None:
                raise ValueError("VPC crop_resize_paste needs paste=(left, top, right, bottom) in the output canvas")
            if self.paste[2] >= self.out_width or self.paste[3] >= self.out_height:
                raise ValueError(f"paste box {self.paste} lies outside the {self.out_width}x{self.out_height} canvas")
        if op == "crop" and self.out_width is not None and (self.out_width, self.out_height) != self.crop_size:
            raise ValueError("VPC crop outputs the crop size; use crop_resize to scale")
        if op == "make_border" and self.border is None:
            raise ValueError("VPC make_border needs border=(top, bottom, left, right)")
        for name in ("out_width", "out_height"):
            val = getattr(self, name)
            if val is not None and (not isinstance(val, int) or val <= 0):
                raise ValueError(f"{name} must be a positive integer number of pixels, got {val!r}")

    # ---- derived geometry
    @property
    def crop_size(self) -> Optional[tuple[int, int]]:
        """(width, height) of the crop box, or None."""
        if self.crop is None:
            return None
        return (self.crop[2] - self.crop[0] + 1, self.crop[3] - self.crop[1] + 1)

    @property
    def paste_size(self) -> Optional[tuple[int, int]]:
        if self.paste is None:
            return None
        return (self.paste[2] - self.paste[0] + 1, self.paste[3] - self.paste[1] + 1)

    @property
    def out_size(self) -> tuple[int, int]:
        """The output picture size in pixels (the canvas for crop-resize-paste)."""
        if self.op == "crop":
            return self.crop_size  # type: ignore[return-value]
        if self.op == "make_border":
            t, b, l, r = self.border  # type: ignore[misc]
            return (self.width + l + r, self.height + t + b)
        if self.op == "csc":
            return (self.width, self.height)
        if self.out_width is not None and self.out_height is not None:
            return (self.out_width, self.out_height)
        return (self.width, self.height)

    @property
    def scale(self) -> Optional[tuple[Fraction, Fraction]]:
        """Per-axis scale (output/input) of a resizing op, or None."""
        if self.op == "resize":
            src, dst = (self.width, self.height), self.out_size
        elif self.op == "crop_resize":
            src, dst = self.crop_size, self.out_size  # type: ignore[assignment]
        elif self.op == "crop_resize_paste":
            src, dst = self.crop_size, self.paste_size  # type: ignore[assignment]
        else:
            return None
        return (Fraction(dst[0], src[0]), Fraction(dst[1], src[1]))

    @property
    def who(self) -> str:
        return self.soc or self.family


# ----------------------------------------------------------------------------------------------- findings

@dataclass(frozen=True)
class Finding:
    """One reason in a verdict.

    Attributes:
        rule_id: the rule (``data/rules_*.yaml``) or a built-in check (``family.*``, ``knowledge.*``).
        message: plain words, prefixed with the step, target and CANN version.
        source: full URL of the page the fact was read on.
        confidence: documented | mindx | secondary | inferred.
        effect: for silent behaviour, what happens to the picture (e.g. "floored to 374 silently"); else None.
        kind: ``violation`` (makes the verdict rejected), ``unknown`` (the docs leave it open),
            ``effect`` (accepted, but the output changes silently) or ``note``.
        section: constraints.md section.
        subject: what it is about (``in_w``, ``in_h``, ``out_w``, ``crop_left``, ``ratio_w``, ``fmt``, ...);
            comma-separated when one rule fails on several (``out_w,out_h``).
        check: the check(s) that failed (``w_align_for``, ``in_w``, ``ratio``, ...), comma-separated; "" for
            unconditional findings.
        open_question: id of the open question behind an ``unknown`` (see :func:`open_questions`), or None.
        detail: the message without its prefix.
    """

    rule_id: str
    message: str
    source: str
    confidence: str
    effect: Optional[str] = None
    kind: str = "violation"
    section: str = ""
    subject: str = ""
    check: str = ""
    open_question: Optional[str] = None
    detail: str = ""


@dataclass(frozen=True)
class Verdict:
    """The answer for one request.

    Attributes:
        status: ``ok`` | ``rejected`` | ``unknown``.
        request: the request judged (with ``api`` as evaluated).
        api: the API generation the verdict is for (``acldvpp`` or ``himpi``).
        reasons: findings, violations first, then unknowns, silent effects and notes. An ``ok`` verdict
            may carry effects and notes.
        rules_checked: ids of every rule that applied (passed or not).
        confidence: ok: the weakest confidence among the rules that applied; rejected: the strongest
            confidence among the violations; unknown: None.
        alternatives: verdicts for the family's other APIs, when the API was chosen automatically.
    """

    status: str
    request: Request
    api: str
    reasons: tuple[Finding, ...] = ()
    rules_checked: tuple[str, ...] = ()
    confidence: Optional[str] = None
    alternatives: tuple["Verdict", ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def violations(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.reasons if f.kind == "violation")

    @property
    def unknowns(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.reasons if f.kind == "unknown")

    @property
    def effects(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.reasons if f.kind == "effect")

    @property
    def notes(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.reasons if f.kind == "note")

    @property
    def summary(self) -> str:
        """One line: the first violation or unknown, else the first effect, else "ok"."""
        for kind in ("violation", "unknown", "effect"):
            for f in self.reasons:
                if f.kind == kind:
                    return f.message
        return f"{_prefix(self.request, self.api)}: ok"


# ----------------------------------------------------------------------------------------------- evaluation

@dataclass
class _Fail:
    subject: str
    detail: str
    check: str
    floor: Optional[int] = None
    unknown: bool = False


def _prefix(req: Request, api: str) -> str:
    v = _vocab()
    unit_label = v.units[req.unit]["label"]
    op_label = v.op_labels.get(req.op, req.op)
    apis = _family(req.family).apis
    api_part = f", {_API_LABEL.get(api, api)}" if len(apis) > 1 else ""
    return f"{unit_label} {op_label} on {req.who} (CANN {req.cann}{api_part})"


def _fmt_ratio(r: Fraction) -> str:
    if r.numerator == 1 and r.denominator > 1:
        return f"1/{r.denominator}"
    if r.denominator == 1:
        return str(r.numerator)
    return f"{float(r):.4g}"


def _when_matches(when: Mapping[str, Any], req: Request) -> bool:
    for k, val in when.items():
        if k == "fmt" and req.fmt not in val:
            return False
        if k == "fmt_not" and req.fmt in val:
            return False
        if k == "out_fmt" and req.out_fmt not in val:
            return False
        if k == "out_fmt_not" and req.out_fmt in val:
            return False
        if k == "any_dim_gt" and not (req.width > val or req.height > val):
            return False
        if k == "in_w_gt" and not req.width > val:
            return False
        if k == "exif_rotated" and (req.orientation != 1) != bool(val):
            return False
        if k == "exif_swap" and (req.orientation >= 5) != bool(val):
            return False
        if k == "min_pixels" and req.width * req.height < val:
            return False
        if k == "odd_for":
            dims = val.get(req.fmt) or ()
            if not any((req.width if d == "w" else req.height) % 2 for d in dims):
                return False
        if k == "given" and any(getattr(req, f) is None for f in val):
            return False
    return True


def _stride_applies(rule: Rule, req: Request) -> bool:
    """A rule with a stride block applies only to the formats its stride covers (on its side)."""
    if not rule.stride:
        return True
    fmts = rule.stride.get("formats")
    fmt = req.fmt if rule.stride["side"] == "in" else req.out_fmt
    return fmts is None or fmt in fmts


def _compute_stride(spec: Mapping[str, Any], fmt: str, w: int, h: int) -> tuple[int, int, int, bool]:
    """(ws bytes, hs rows, buffer bytes, size_inferred) from a stride block."""
    bpp = _bpp(fmt) if spec.get("times_bpp") else 1
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


def align_up(x: int, n: int) -> int:
    """``x`` rounded up to a multiple of ``n`` (the docs' A(x, n))."""
    return -(-int(x) // int(n)) * int(n)


def _range_fail(subject: str, what: str, value: int, lo: int, hi: int, chk: str, unknown: bool) -> Optional[_Fail]:
    if value > hi:
        d = (f"{what} {value} is above {hi}, the largest documented" if unknown
             else f"{what} {value} exceeds the maximum {hi}")
        return _Fail(subject, d, chk)
    if value < lo:
        return _Fail(subject, f"{what} {value} is below the minimum {lo}", chk)
    return None


def _run_checks(rule: Rule, req: Request) -> list[_Fail]:
    c = rule.check
    soft = rule.on_fail == "unknown"
    fails: list[_Fail] = []
    ow, oh = req.out_size
    dims = {"in_w": ("input width", req.width), "in_h": ("input height", req.height),
            "out_w": ("output width", ow), "out_h": ("output height", oh)}
    for key, (what, value) in dims.items():
        if key in c:
            f = _range_fail(key, what, value, int(c[key][0]), int(c[key][1]), key, soft)
            if f:
                fails.append(f)
    if "short_side_max" in c and min(req.width, req.height) > c["short_side_max"]:
        fails.append(_Fail("in_size", f"the shorter side {min(req.width, req.height)} exceeds "
                                      f"{c['short_side_max']}", "short_side_max"))
    if "crop_min" in c and req.crop_size is not None:
        for i, (what, subj) in enumerate((("crop width", "crop_w"), ("crop height", "crop_h"))):
            if req.crop_size[i] < c["crop_min"][i]:
                fails.append(_Fail(subj, f"{what} {req.crop_size[i]} is below the minimum {c['crop_min'][i]}",
                                   "crop_min"))
    if "in_formats" in c and req.fmt not in c["in_formats"]:
        allowed = ", ".join(c["in_formats"])
        if req.fmt in (c.get("in_formats_unknown") or ()):
            fails.append(_Fail("fmt", f"input format {req.fmt} is not covered by the docs either way "
                                      f"(documented: {allowed})", "in_formats", unknown=True))
        else:
            verb = "is not in the documented list" if soft else "is not supported"
            fails.append(_Fail("fmt", f"input format {req.fmt} {verb} ({allowed})", "in_formats"))
    if "out_formats" in c and req.out_fmt not in c["out_formats"]:
        verb = "is not in the documented list" if soft else "is not supported"
        fails.append(_Fail("out_fmt", f"output format {req.out_fmt} {verb} ({', '.join(c['out_formats'])})",
                           "out_formats"))
    if "out_formats_by_source" in c:
        allowed = c["out_formats_by_source"].get(req.fmt)
        if allowed is not None and req.out_fmt not in allowed:
            fails.append(_Fail("out_fmt", f"output format {req.out_fmt} is not available from {req.fmt} input "
                                          f"(available: {', '.join(allowed)})", "out_formats_by_source"))
    if c.get("out_same_as_input") and req.out_fmt != req.fmt:
        fails.append(_Fail("out_fmt", f"output format {req.out_fmt} differs from the input format {req.fmt}",
                           "out_same_as_input"))
    for key, subj, what, fmt, value in (("w_align_for", "in_w", "input width", req.fmt, req.width),
                                        ("h_align_for", "in_h", "input height", req.fmt, req.height),
                                        ("out_w_align_for", "out_w", "output width", req.out_fmt, ow),
                                        ("out_h_align_for", "out_h", "output height", req.out_fmt, oh)):
        n = (c.get(key) or {}).get(fmt)
        if n and value % n:
            need = "must be even" if n == 2 else f"must be a multiple of {n}"
            fails.append(_Fail(subj, f"{what} {value} {need}", key, floor=value - value % n))
    if "ops" in c and req.op not in c["ops"]:
        labels = _vocab().op_labels
        fails.append(_Fail("op", f"{labels.get(req.op, req.op)} is not allowed "
                                 f"(allowed: {', '.join(labels.get(o, o) for o in c['ops'])})", "ops"))
    if "ratio" in c and req.scale is not None:
        lo, hi = c["ratio"]
        src = (req.width, req.height) if req.op == "resize" else req.crop_size
        dst = req.out_size if req.op != "crop_resize_paste" else req.paste_size
        for i, (axis, subj) in enumerate((("horizontal", "ratio_w"), ("vertical", "ratio_h"))):
            r = req.scale[i]
            if not lo <= r <= hi:
                fails.append(_Fail(subj, f"{axis} scale {_fmt_ratio(r)} ({src[i]} -> {dst[i]} px) is outside "
                                         f"[{_fmt_ratio(lo)}, {_fmt_ratio(hi)}]", "ratio"))
    if "roi" in c:
        for boxname, box in (("crop", req.crop), ("paste", req.paste)):
            if box is None:
                continue
            for side, idx in (("left", 0), ("top", 1), ("right", 2), ("bottom", 3)):
                want = c["roi"].get(side)
                if want in ("even", "odd") and box[idx] % 2 != (0 if want == "even" else 1):
                    fails.append(_Fail(f"{boxname}_{side}", f"{boxname} {side} {box[idx]} must be {want}", "roi"))
    if c.get("paste_left_align") and req.paste is not None and req.paste[0] % c["paste_left_align"]:
        fails.append(_Fail("paste_left", f"paste left {req.paste[0]} must be a multiple of {c['paste_left_align']}",
                           "paste_left_align"))
    for key, attr, what in (("channels_max", "channels", "channels"), ("batch_max", "batch", "pictures per call")):
        val = getattr(req, attr)
        if key in c and val is not None and val > c[key]:
            fails.append(_Fail(attr, f"{val} {what} requested; at most {c[key]}", key))
    if "interpolation" in c and req.interpolation is not None and req.interpolation not in c["interpolation"]:
        fails.append(_Fail("interpolation", f"interpolation {req.interpolation!r} is not supported "
                                            f"({', '.join(c['interpolation'])})", "interpolation"))
    if "codecs" in c:
        fails.extend(_codec_fails(c["codecs"], req))
    if "container" in c and req.container is not None and req.container not in c["container"]:
        fails.append(_Fail("container", f"container {req.container!r} is not accepted: the input must be an Annex-B "
                                        "elementary stream, sent frame by frame (demux first)", "container"))
    for f in fails:
        if soft:
            f.unknown = True
    return fails


def _codec_fails(codecs: Mapping[str, Any], req: Request) -> list[_Fail]:
    spec = codecs.get(req.fmt)
    if spec is None:
        return [_Fail("fmt", f"codec {req.fmt} is not supported ({', '.join(codecs)})", "codecs")]
    out = []
    bd = req.bit_depth if req.bit_depth is not None else 8
    if bd not in spec.get("bit_depth", (8,)):
        out.append(_Fail("bit_depth", f"{req.fmt} {bd}-bit is not supported "
                                      f"({'/'.join(str(b) for b in spec['bit_depth'])}-bit only)", "codecs"))
    if req.profile is not None:
        if "profiles" in spec and req.profile not in spec["profiles"]:
            out.append(_Fail("profile", f"{req.fmt} profile {req.profile} is not supported "
                                        f"({', '.join(spec['profiles'])})", "codecs"))
        elif "profiles_known" in spec and req.profile not in spec["profiles_known"]:
            out.append(_Fail("profile", f"{req.fmt} profile {req.profile} is not named in the docs (they give "
                                        "bit depth and chroma only)", "codecs", unknown=True))
    if req.level is not None and float(req.level) > float(spec.get("max_level", 99)):
        out.append(_Fail("level", f"{req.fmt} level {req.level} is above the maximum {spec['max_level']}", "codecs"))
    if req.chroma is not None and str(req.chroma).replace(":", "") not in [str(x) for x in spec.get("chroma", ())]:
        out.append(_Fail("chroma", f"{req.fmt} chroma {req.chroma} is not supported (4:2:0 only)", "codecs"))
    if req.interlaced and not spec.get("interlaced", False):
        out.append(_Fail("interlaced", f"interlaced {req.fmt} is not supported (interlaced decode is H.264 8-bit "
                                       "only)", "codecs"))
    if req.interlaced and bd != 8:
        out.append(_Fail("interlaced", "interlaced decode is H.264 8-bit only", "codecs"))
    return out


def _stride_fails(rule: Rule, req: Request) -> list[_Fail]:
    spec = rule.stride
    if not spec:
        return []
    side = spec["side"]
    fmt, (w, h) = (req.fmt, (req.width, req.height)) if side == "in" else (req.out_fmt, req.out_size)
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


def _applicable(req: Request, api: str) -> Iterable[Rule]:
    for rule in _rules_by_unit()[req.unit]:
        if rule.applies_to(req.family, api, req.unit, req.op, req.cann) and _when_matches(rule.when, req) \
                and _stride_applies(rule, req):
            yield rule


def _strength(conf: str) -> int:
    return CONFIDENCES.index(conf)


def _evaluate_api(req: Request, api: str) -> Verdict:
    fam = _family(req.family)
    prefix = _prefix(req, api)
    findings: list[Finding] = []
    checked: list[str] = []
    covered: set = set()
    extrapolated: list[Rule] = []
    passed_conf: list[str] = []

    def add(rule_id: str, kind: str, detail: str, source: str, conf: str, section: str = "", subject: str = "",
            chk: str = "", effect: Optional[str] = None, oq: Optional[str] = None) -> None:
        findings.append(Finding(rule_id=rule_id, message=f"{prefix}: {detail}", source=source, confidence=conf,
                                effect=effect, kind=kind, section=section, subject=subject, check=chk,
                                open_question=oq, detail=detail))

    # family documentation window
    if req.cann < fam.documented_from:
        add(f"family.{fam.key}.documented_from", "unknown",
            f"{fam.label} is not in the DVPP docs before CANN {fam.documented_from} (the earliest version checked "
            "that lists it)", fam.documented_from_source, "documented", "§0")
    if fam.dropped_from is not None and req.cann >= fam.dropped_from:
        add(f"family.{fam.key}.dropped", "unknown", fam.dropped_note or f"{fam.label} is not in the DVPP docs from "
            f"CANN {fam.dropped_from} on", fam.dropped_source or fam.documented_from_source, "documented", "§8",
            oq="q10" if fam.key == "ascend310" else None)
    if req.cann > latest_checked():
        add("knowledge.newer_than_docs", "note", f"CANN {req.cann} is newer than the latest docs checked "
            f"({latest_checked()}); rules still current there are assumed to hold", fam.documented_from_source,
            "inferred", "§8")
    if req.soc_confidence != "documented" and req.soc_note:
        add("family.soc_name", "note", req.soc_note, fam.soc_source, req.soc_confidence, "§0", oq="q9")
    applicable = list(_applicable(req, api))  # the rules for this request, selected once
    if api not in fam.apis and not any(r.reject for r in applicable):
        add(f"family.{fam.key}.apis", "violation", f"{_API_LABEL[api]} is not available on {fam.label} "
            f"(available: {', '.join(_API_LABEL[a] for a in fam.apis)})", fam.soc_source, "documented", "§6")

    for rule in applicable:
        checked.append(rule.id)
        covered |= rule.aspects
        conf = rule.confidence
        first = rule.documented_from(fam.key)
        suffix = ""
        if first is not None and req.cann < first:
            conf = "inferred"
            suffix = f" [documented from CANN {first}; assumed unchanged for {req.cann}]"
        fails = _run_checks(rule, req) + _stride_fails(rule, req)
        # one finding per rule and kind: "output width 621 must be even, output height 187 must be even; why"
        for kind in ("violation", "unknown"):
            group = [f for f in fails if (f.unknown if kind == "unknown" else not f.unknown)]
            if not group:
                continue
            parts, effects = [], []
            for f in group:
                if kind == "violation" and rule.violation_effect and f.floor is not None:
                    eff = rule.violation_effect.format(floor=f.floor)
                    effects.append(eff)
                    parts.append(f"{f.detail} ({eff})")
                else:
                    parts.append(f.detail)
            detail = ", ".join(parts) + (f"; {rule.why}" if rule.why else "") + suffix
            add(rule.id, kind, detail, rule.source, conf, rule.section, ",".join(dict.fromkeys(f.subject for f in group)),
                ",".join(dict.fromkeys(f.check for f in group)), "; ".join(effects) or None, rule.open_question)
        if rule.reject:
            add(rule.id, "violation", rule.reject + suffix, rule.source, conf, rule.section, "api")
        if rule.unknown:
            add(rule.id, "unknown", rule.unknown + suffix, rule.source, conf, rule.section, "", "",
                oq=rule.open_question)
        if rule.notice:
            add(rule.id, "note", rule.notice + suffix, rule.source, conf, rule.section, oq=rule.open_question)
        if rule.effect:
            add(rule.id, "effect", rule.effect + suffix, rule.source, conf, rule.section, effect=rule.effect)
        constrains = bool(rule.check or rule.stride or rule.aspects)
        if constrains and not fails and not rule.reject and not rule.unknown:
            passed_conf.append(conf)
            if suffix:
                extrapolated.append(rule)
    # silent effects on odd sizes, unless a violation already names that dimension
    violated = {s for f in findings if f.kind == "violation" for s in f.subject.split(",")}
    ow, oh = req.out_size
    for rule in applicable:
        if not rule.effect_odd:
            continue
        conf = rule.confidence
        first = rule.documented_from(fam.key)
        if first is not None and req.cann < first:
            conf = "inferred"
        for subj in rule.effect_odd["subjects"]:
            value = {"in_w": req.width, "in_h": req.height, "out_w": ow, "out_h": oh}[subj]
            if value % 2 and subj not in violated:
                text = rule.effect_odd["text"].format(dim="width" if subj.endswith("w") else "height", value=value,
                                                      floor=value - 1)
                add(rule.id, "effect", text, rule.source, conf, rule.section, subj, effect=text)
    if extrapolated:
        ids = ", ".join(r.id for r in extrapolated)
        add("knowledge.extrapolated", "note", f"checked against rules documented only for later CANN versions, assumed "
            f"unchanged at {req.cann} (constraints.md §8: no product limit changed in any version checked): {ids}",
            extrapolated[0].source, "inferred", "§8")

    status = "rejected" if any(f.kind == "violation" for f in findings) else \
        "unknown" if any(f.kind == "unknown" for f in findings) else "ok"
    if status != "rejected":
        missing = [a for a in _required_aspects(req, api) if a not in covered]
        if missing:
            words = ", ".join(_ASPECT_WORDS[a] for a in missing)
            add("knowledge.coverage", "unknown", f"no documented rule covers the {words} for {fam.label} with "
                f"{_API_LABEL[api]} at this CANN version", fam.documented_from_source, "documented")
            status = "unknown"
    order = {k: i for i, k in enumerate(_KINDS)}
    findings.sort(key=lambda f: order[f.kind])
    if status == "ok":
        confs = passed_conf + [f.confidence for f in findings if f.kind == "effect"]
        confidence = max(confs, key=_strength) if confs else "documented"
    elif status == "rejected":
        confidence = min((f.confidence for f in findings if f.kind == "violation"), key=_strength)
    else:
        confidence = None
    return Verdict(status=status, request=replace(req, api=api), api=api, reasons=tuple(findings),
                   rules_checked=tuple(checked), confidence=confidence)


def _required_aspects(req: Request, api: str) -> list[str]:
    spec = _vocab().required
    u = spec.get(req.unit) or {}
    out = list(u.get("any", ())) + list(u.get(api, ())) + list((u.get("ops") or {}).get(req.op, ()))
    for fieldname, aspects in (spec.get("given") or {}).items():
        if getattr(req, fieldname, None) is not None:
            out.extend(aspects)
    seen: list[str] = []
    for a in out:
        if a not in seen:
            seen.append(a)
    return seen


def evaluate(request: Request) -> Verdict:
    """Judge a :class:`Request`. With ``request.api`` None, each API of the family is evaluated in order of
    preference and the first ``ok`` (else the first ``unknown``, else the preferred API's ``rejected``) is
    returned, with the others in ``alternatives``."""
    if request.api is not None:
        return _evaluate_api(request, request.api)
    verdicts = [_evaluate_api(request, a) for a in _family(request.family).apis]
    for status in ("ok", "unknown", "rejected"):
        for v in verdicts:
            if v.status == status:
                return replace(v, alternatives=tuple(o for o in verdicts if o is not v))
    raise AssertionError("unreachable")


def check(soc: Any = None, cann: Optional[VersionLike] = None, unit: str = "", op: Optional[str] = None,
          width: int = 0, height: int = 0, fmt: str = "", **extras: Any) -> Verdict:
    """Judge one DVPP step; see :class:`Request` for every argument (sizes in pixels).

    ``check(request)`` with a ready :class:`Request` also works. Example::

        check("Ascend310", "6.0.1", "vpc", "resize", 1242, 375, "nv12", out_width=620, out_height=188)
        check(family="ascend910b", cann="8.0.0", unit="jpegd", width=12000, height=9000, fmt="jpeg420")
        check("Ascend310P3", "7.0.0", "vpc", "crop_resize", 1600, 900, "nv12",
              crop=(0, 0, 799, 449), out_width=400, out_height=224)

    Raises ``ValueError`` for malformed requests (unknown SoC, unparsable version, crop box outside the
    image...); everything the hardware might refuse comes back as a verdict instead.
    """
    if isinstance(soc, Request):
        return evaluate(soc)
    return evaluate(Request.make(soc, cann, unit, op, width, height, fmt, **extras))


# ----------------------------------------------------------------------------------------------- strides

class Stride(tuple):
    """``(width_stride, height_stride, buffer_bytes)``: ws in bytes, hs in rows, buffer in bytes (a lower
    bound for the allocation). Unpacks and compares like a plain 3-tuple and also carries where it came
    from: ``rule_id``, ``confidence``, ``source``, ``side``, ``fmt``, ``api``, ``note``.
    """

    def __new__(cls, ws: int, hs: int, size: int, *, rule_id: str, confidence: str, source: str, side: str,
                fmt: str, api: str, note: str = "") -> "Stride":
        self = super().__new__(cls, (ws, hs, size))
        self.rule_id, self.confidence, self.source = rule_id, confidence, source
        self.side, self.fmt, self.api, self.note = side, fmt, api, note
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
        ValueError: malformed arguments.
    """
    u = _norm_unit(unit)
    side = side or ("in" if u == "vpc" else "out")
    if side not in ("in", "out"):
        raise ValueError("side is 'in' or 'out'")
    f = _norm_pixel(fmt, "stride")
    if soc is not None:
        info = soc_info(soc)
        fam = _family(info.family)
    elif family is not None:
        fam = _family(family)
    else:
        raise ValueError("give soc= or family=")
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
            ws, hs, size, size_inferred = _compute_stride(rule.stride, f, width, height)
            conf = rule.confidence
            notes = []
            first = rule.documented_from(fam.key)
            if first is not None and v < first:
                conf = "inferred"
                notes.append(f"documented from CANN {first}; assumed unchanged for {v}")
            if size_inferred:
                conf = max(conf, "inferred", key=_strength)
                notes.append(f"the buffer multiple for {f} is not in the table; derived from the {f} layout")
            if rule.stride.get("size_note"):
                notes.append(rule.stride["size_note"])
            if v < fam.documented_from or (fam.dropped_from is not None and v >= fam.dropped_from):
                conf = "inferred"
                notes.append(f"{fam.label} is not in the DVPP docs at CANN {v}")
            notes.extend(x.notice for x in _rules_by_unit()[u] if x.notice and "stride" in x.id
                         and fam.key in x.families and x.api in (a, "any") and v in x.cann)
            return Stride(ws, hs, size, rule_id=rule.id, confidence=conf, source=rule.source, side=side, fmt=f,
                          api=a, note="; ".join(notes))
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


# ----------------------------------------------------------------------------------------------- requirements

@dataclass(frozen=True)
class Requirements:
    """Every documented geometric constraint that applies to a request, intersected (conservatively:
    rules that make a request ``unknown`` count too). Sizes in pixels.

    Attributes:
        in_w, in_h, out_w, out_h: (min, max) ranges, or None when no rule gives one.
        w_align, h_align: required multiple of the input width/height (1: none).
        out_w_align, out_h_align: same for the output.
        ratio: (min, max) scale per axis, or None.
        roi: parity per box side (``left``/``top``: ``even``; ``right``/``bottom``: ``odd``) or {}.
        paste_left_align: required multiple of the paste box's left offset (1: none).
        crop_min: (width, height) minimum crop, or None.
        rule_ids: the rules consulted.
    """

    in_w: Optional[tuple[int, int]] = None
    in_h: Optional[tuple[int, int]] = None
    out_w: Optional[tuple[int, int]] = None
    out_h: Optional[tuple[int, int]] = None
    w_align: int = 1
    h_align: int = 1
    out_w_align: int = 1
    out_h_align: int = 1
    ratio: Optional[tuple[Fraction, Fraction]] = None
    roi: Mapping[str, str] = field(default_factory=dict)
    paste_left_align: int = 1
    crop_min: Optional[tuple[int, int]] = None
    rule_ids: tuple[str, ...] = ()


def _intersect(a: Optional[tuple], b: Sequence) -> tuple:
    b = (b[0], b[1])
    if a is None:
        return b
    return (max(a[0], b[0]), min(a[1], b[1]))


def requirements(request: Request, api: Optional[str] = None) -> Requirements:
    """The geometric constraints on ``request`` (for ``api``, default: the request's, else the family's
    preferred API). Used by the detour helpers to propose legal geometry."""
    a = api or request.api or _family(request.family).apis[0]
    d: dict[str, Any] = {"rule_ids": []}
    roi: dict[str, str] = {}
    for rule in _applicable(request, a):
        c = rule.check
        d["rule_ids"].append(rule.id)
        for k in ("in_w", "in_h", "out_w", "out_h"):
            if k in c:
                d[k] = _intersect(d.get(k), c[k])
        for k, attr, fmt in (("w_align_for", "w_align", request.fmt), ("h_align_for", "h_align", request.fmt),
                             ("out_w_align_for", "out_w_align", request.out_fmt),
                             ("out_h_align_for", "out_h_align", request.out_fmt)):
            n = (c.get(k) or {}).get(fmt)
            if n:
                d[attr] = math.lcm(d.get(attr, 1), int(n))
        if "ratio" in c:
            d["ratio"] = _intersect(d.get("ratio"), c["ratio"])
        for side, want in (c.get("roi") or {}).items():
            if want in ("even", "odd"):
                roi[side] = want
        if c.get("paste_left_align"):
            d["paste_left_align"] = math.lcm(d.get("paste_left_align", 1), int(c["paste_left_align"]))
        if "crop_min" in c:
            cm = d.get("crop_min", (0, 0))
            d["crop_min"] = (max(cm[0], c["crop_min"][0]), max(cm[1], c["crop_min"][1]))
    d["rule_ids"] = tuple(d["rule_ids"])
    return Requirements(roi=roi, **d)


# ----------------------------------------------------------------------------------------------- confidence

#: How sure a verdict is, strongest first: ``documented`` (CANN docs state it for this product at a version
#: checked up to the target's), ``secondary`` (MindX SDK docs, sample code or legacy guides only),
#: ``extrapolated`` (documented for later CANN versions only, or the target is newer than the latest docs
#: checked: assumed unchanged, constraints.md §8), ``inferred`` (dvpipe's own reading of the docs),
#: ``unknown`` (the docs leave it open).
LEVELS = ("documented", "secondary", "extrapolated", "inferred", "unknown")
_LEVEL_OF = {"documented": "documented", "mindx": "secondary", "secondary": "secondary", "inferred": "inferred"}


@dataclass(frozen=True)
class Confidence:
    """How sure a verdict (or a planned step made of several verdicts) is.

    Attributes:
        level: one of :data:`LEVELS`.
        since: for ``extrapolated``, the CANN version the rule was documented at (and assumed unchanged
            from); else None.
        pages: ``(rule id, source URL, CANN version of that page or None)`` for each rule behind the verdict;
            the version is None for pages that are not versioned CANN docs (MindX, sample code).
        cann: the target's CANN version.
    """

    level: str
    cann: CannVersion
    since: Optional[CannVersion] = None
    pages: tuple[tuple[str, str, Optional[CannVersion]], ...] = ()

    @property
    def other_page_versions(self) -> tuple[CannVersion, ...]:
        """The CANN versions of the cited pages that differ from the target's, in citation order, once."""
        out: list[CannVersion] = []
        for _r, _s, v in self.pages:
            if v is not None and v != self.cann and v not in out:
                out.append(v)
        return tuple(out)

    @property
    def note(self) -> str:
        """Plain words: ``documented at CANN 6.0.1``, ``extrapolated from CANN 8.5.0``, ..."""
        others = self.other_page_versions
        cites = f" (cites CANN {', '.join(str(v) for v in others)} pages)" if others else ""
        if self.level == "documented":
            return f"documented at CANN {self.cann}" if not others else f"documented{cites}"
        if self.level == "extrapolated":
            return f"extrapolated from CANN {self.since} (assumed unchanged at {self.cann}){cites}"
        if self.level == "secondary":
            return f"secondary source (MindX SDK docs or sample code, not the CANN docs){cites}"
        if self.level == "inferred":
            return f"inferred (dvpipe's reading of the docs){cites}"
        return "unknown (the docs leave it open)"

    def to_dict(self) -> dict:
        return {"level": self.level, "note": self.note, "since": None if self.since is None else str(self.since),
                "pages": [{"rule": r, "source": u, "cann": None if v is None else str(v)} for r, u, v in self.pages]}


@functools.lru_cache(maxsize=None)
def _rules_by_id() -> Mapping[str, Rule]:
    return {r.id: r for r in _all_rules()}


def rule_by_id(rule_id: str) -> Optional[Rule]:
    """The rule with this id, or None (built-in checks such as ``family.*`` and ``knowledge.*``)."""
    return _rules_by_id().get(rule_id)


def rule_confidence(rule_id: str, family_key: str, cann: VersionLike) -> Confidence:
    """The confidence of one rule for a family at a CANN version (see :data:`LEVELS`).

    A CANN-docs rule first documented after ``cann`` for this family, or any rule when ``cann`` is newer
    than the latest docs checked, is ``extrapolated``; built-in family facts are ``documented``; other
    built-in checks ``inferred``.
    """
    v = CannVersion.parse(cann)
    rule = rule_by_id(rule_id)
    newest = latest_checked()
    if rule is None:
        level = "documented" if rule_id.startswith("family.") else "inferred"
        fam = _family(family_key)
        src = fam.documented_from_source
        conf = Confidence(level, v, None, ((rule_id, src, page_version(src)),))
    else:
        level = _LEVEL_OF[rule.confidence]
        since = None
        first = rule.documented_from(family_key)
        if level == "documented" and first is not None and v < first:
            level, since = "extrapolated", first
        conf = Confidence(level, v, since, ((rule.id, rule.source, page_version(rule.source)),))
    if v > newest and _strength_level(conf.level) < _strength_level("extrapolated"):
        conf = replace(conf, level="extrapolated", since=newest)
    return conf


def _strength_level(level: str) -> int:
    return LEVELS.index(level)


def combine_confidence(parts: Sequence[Confidence], cann: VersionLike, weakest: bool = True) -> Confidence:
    """One confidence for several: the weakest level (``weakest=False``: the strongest), the latest
    ``since`` among the extrapolated parts of that level, every page once, in order."""
    v = CannVersion.parse(cann)
    if not parts:
        return Confidence("unknown", v)
    pick = max if weakest else min
    level = pick((p.level for p in parts), key=_strength_level)
    sinces = [p.since for p in parts if p.level == level and p.since is not None]
    pages: list = []
    for p in parts:
        for page in p.pages:
            if page not in pages:
                pages.append(page)
    return Confidence(level, v, max(sinces) if sinces else None, tuple(pages))


def confidence_of(verdict: Verdict) -> Confidence:
    """How sure a knowledge verdict is: ``unknown`` when the docs leave it open; for ``ok`` the weakest of
    the rules it was checked against (effects included); for ``rejected`` the strongest violation."""
    req = verdict.request
    fam, cann = req.family, req.cann
    if verdict.status == "unknown":
        ids = [f.rule_id for f in verdict.unknowns]
        pages = tuple(p for i in dict.fromkeys(ids) for p in rule_confidence(i, fam, cann).pages)
        return Confidence("unknown", cann, None, pages)
    if verdict.status == "rejected":
        ids = list(dict.fromkeys(f.rule_id for f in verdict.violations))
        return combine_confidence([rule_confidence(i, fam, cann) for i in ids], cann, weakest=False)
    ids = [i for i in verdict.rules_checked if _constrains(i)]
    ids += [f.rule_id for f in verdict.effects if f.rule_id not in ids]
    return combine_confidence([rule_confidence(i, fam, cann) for i in dict.fromkeys(ids)] or
                              [Confidence("documented", cann)], cann)


def _constrains(rule_id: str) -> bool:
    r = rule_by_id(rule_id)
    return r is not None and bool(r.check or r.stride or r.aspects) and not r.unknown and not r.reject


def documented_versions(family_key: str) -> tuple[CannVersion, ...]:
    """The CANN versions whose DVPP pages some rule of this family was read from (``documented_in``), plus
    the version the family is first listed at, sorted: the versions "checked against documentation"."""
    fam = _family(family_key)
    vs = {fam.documented_from}
    for r in _all_rules():
        if family_key in r.families:
            vs.update(r.documented_in.get(family_key, ()))
    return tuple(sorted(vs))
