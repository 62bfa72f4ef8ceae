"""The condition keys of a rule, as two tables: selectors (``when:``) and checks (``check:``).

Each key is declared once, with the function that evaluates it and a one-line description; the schema
(:mod:`.schema`) accepts exactly the keys of these tables, so a key cannot be read here and forgotten
there. Checks run in table order, which is the order their failures appear in a finding's message.

Units: sizes in pixels; a check's ``[min, max]`` bounds are inclusive; scale ratios are output/input per
axis. A check returns :class:`Fail` records; :func:`run_checks` turns them into ``unknown`` ones when the
rule says ``on_fail: unknown``.

Adding a key: write its function below with ``@declare_selector("key", "what it means")`` or
``@declare_check(...)``, and document it in the schema header of ``data/rules_vpc.yaml``.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

from ..errors import ConfigError
from .vocabulary import _vocab, align_up

if TYPE_CHECKING:  # type names only: the request module does not import this one
    from .request import Request
    from .schema import Rule

__all__ = ["Fail", "Selector", "Check", "SELECTORS", "CHECKS", "declare_selector", "declare_check", "check_keys",
           "when_matches", "run_checks", "narrow_requirements", "unknown_keys_message"]


@dataclass
class Fail:
    """One failed check: ``subject`` (``in_w``, ``fmt``, ``crop_left``...), plain-words ``detail``, the
    ``check`` key, the silently floored value for alignment checks, and whether the docs leave it open."""

    subject: str
    detail: str
    check: str
    floor: Optional[int] = None
    unknown: bool = False


@dataclass(frozen=True)
class Selector:
    """A ``when:`` key: ``test(value, request)`` is True when the rule applies."""

    key: str
    test: Callable[[Any, "Request"], bool]
    doc: str


@dataclass(frozen=True)
class Check:
    """A ``check:`` key: ``run(value, check_block, request, soft)`` yields failures.

    ``companions`` are keys read only together with this one (``in_formats_unknown`` refines
    ``in_formats``); ``prepare`` converts the YAML value once, at load time; ``narrow(value, request, acc)``
    folds a geometric constraint into the :func:`~.evaluation.requirements` accumulator (fields of
    :class:`~.evaluation.Requirements`), for the keys the detour helpers use.
    """

    key: str
    run: Callable[[Any, Mapping[str, Any], "Request", bool], Iterable[Fail]]
    doc: str
    companions: tuple[str, ...] = ()
    prepare: Optional[Callable[[Any], Any]] = None
    narrow: Optional[Callable[[Any, "Request", dict], None]] = None


SELECTORS: dict[str, Selector] = {}
CHECKS: dict[str, Check] = {}


def declare_selector(key: str, doc: str) -> Callable:
    """Declare a ``when:`` key (decorator)."""
    def deco(fn: Callable[[Any, "Request"], bool]) -> Callable:
        if key in SELECTORS:
            raise ConfigError(f"selector {key!r} declared twice: give the new selector another key")
        SELECTORS[key] = Selector(key, fn, doc)
        return fn
    return deco


def declare_check(key: str, doc: str, companions: tuple[str, ...] = (), prepare: Optional[Callable[[Any], Any]] = None,
                  narrow: Optional[Callable[[Any, "Request", dict], None]] = None) -> Callable:
    """Declare a ``check:`` key (decorator)."""
    def deco(fn: Callable[[Any, Mapping[str, Any], "Request", bool], Iterable[Fail]]) -> Callable:
        if key in CHECKS or key in _companion_keys():
            raise ConfigError(f"check {key!r} declared twice (as a check or a companion key): give the new check "
                              "another key")
        CHECKS[key] = Check(key, fn, doc, tuple(companions), prepare, narrow)
        return fn
    return deco


def _intersect(a: Optional[tuple], b: Any) -> tuple:
    b = (b[0], b[1])
    if a is None:
        return b
    return (max(a[0], b[0]), min(a[1], b[1]))


def _narrow_range(attr: str) -> Callable[[Any, "Request", dict], None]:
    def narrow(val: Any, req: "Request", acc: dict) -> None:
        acc[attr] = _intersect(acc.get(attr), val)
    return narrow


def _narrow_lcm(attr: str, side: str) -> Callable[[Any, "Request", dict], None]:
    def narrow(val: Any, req: "Request", acc: dict) -> None:
        n = (val or {}).get(req.fmt if side == "in" else req.out_fmt) if side else val
        if n:
            acc[attr] = math.lcm(acc.get(attr, 1), int(n))
    return narrow


def _companion_keys() -> set:
    return {c for chk in CHECKS.values() for c in chk.companions}


def check_keys() -> frozenset:
    """Every key a ``check:`` block may hold (the checks and their companions)."""
    return frozenset(CHECKS) | frozenset(_companion_keys())


def unknown_keys_message(kind: str, extra: Iterable[str], known: Iterable[str]) -> str:
    """``unknown check 'in_wdith' (did you mean 'in_w'?); known: ...`` -- one line."""
    known = sorted(known)
    parts = []
    for k in sorted(extra):
        close = difflib.get_close_matches(str(k), known, n=1)
        parts.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"unknown {kind} {', '.join(parts)}; known: {', '.join(known)}"


def _fmt_ratio(r: Fraction) -> str:
    if r.numerator == 1 and r.denominator > 1:
        return f"1/{r.denominator}"
    if r.denominator == 1:
        return str(r.numerator)
    return f"{float(r):.4g}"


# ------------------------------------------------------------------------------------------ selectors (when:)

@declare_selector("fmt", "input format in the list")
def _sel_fmt(val: Any, req: "Request") -> bool:
    return req.fmt in val


@declare_selector("fmt_not", "input format not in the list")
def _sel_fmt_not(val: Any, req: "Request") -> bool:
    return req.fmt not in val


@declare_selector("out_fmt", "output format in the list")
def _sel_out_fmt(val: Any, req: "Request") -> bool:
    return req.out_fmt in val


@declare_selector("out_fmt_not", "output format not in the list")
def _sel_out_fmt_not(val: Any, req: "Request") -> bool:
    return req.out_fmt not in val


@declare_selector("any_dim_gt", "input width or height > n pixels")
def _sel_any_dim_gt(val: Any, req: "Request") -> bool:
    return req.width > val or req.height > val


@declare_selector("in_w_gt", "input width > n pixels")
def _sel_in_w_gt(val: Any, req: "Request") -> bool:
    return req.width > val


@declare_selector("in_w_aligns_apart", "[a, b]: aligning the input width up to a and up to b gives different values")
def _sel_in_w_aligns_apart(val: Any, req: "Request") -> bool:
    a, b = val
    return align_up(req.width, a) != align_up(req.width, b)


@declare_selector("in_size_gt", "input width > w or height > h pixels ([w, h])")
def _sel_in_size_gt(val: Any, req: "Request") -> bool:
    return req.width > val[0] or req.height > val[1]


@declare_selector("exif_rotated", "EXIF orientation != 1 (true) or == 1 (false)")
def _sel_exif_rotated(val: Any, req: "Request") -> bool:
    return (req.orientation != 1) == bool(val)


@declare_selector("exif_swap", "EXIF orientation 5..8, which swaps width and height (true) or not (false)")
def _sel_exif_swap(val: Any, req: "Request") -> bool:
    return (req.orientation >= 5) == bool(val)


@declare_selector("min_pixels", "input width*height >= n")
def _sel_min_pixels(val: Any, req: "Request") -> bool:
    return req.width * req.height >= val


@declare_selector("odd_for", "{input fmt: [w|h]}: that input dimension is odd")
def _sel_odd_for(val: Any, req: "Request") -> bool:
    dims = val.get(req.fmt) or ()
    return any((req.width if d == "w" else req.height) % 2 for d in dims)


@declare_selector("given", "[request fields that must be set: channels, batch, interpolation, ...]")
def _sel_given(val: Any, req: "Request") -> bool:
    return not any(getattr(req, f) is None for f in val)


def when_matches(when: Mapping[str, Any], req: "Request") -> bool:
    """True when every selector of a rule's ``when:`` block holds for ``req``."""
    return all(SELECTORS[k].test(val, req) for k, val in when.items())


# ------------------------------------------------------------------------------------------- checks (check:)

def _range_fail(subject: str, what: str, value: int, lo: int, hi: int, chk: str, unknown: bool) -> Optional[Fail]:
    if value > hi:
        d = (f"{what} {value} is above {hi}, the largest documented" if unknown
             else f"{what} {value} exceeds the maximum {hi}")
        return Fail(subject, d, chk)
    if value < lo:
        return Fail(subject, f"{what} {value} is below the minimum {lo}", chk)
    return None


def _range_check(key: str, what: str, value_of: Callable[["Request"], int]) -> None:
    def run(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
        f = _range_fail(key, what, value_of(req), int(val[0]), int(val[1]), key, soft)
        return [f] if f else []
    declare_check(key, f"[min, max] {what} in pixels", narrow=_narrow_range(key))(run)


_range_check("in_w", "input width", lambda r: r.width)
_range_check("in_h", "input height", lambda r: r.height)
_range_check("out_w", "output width", lambda r: r.out_size[1])
_range_check("out_h", "output height", lambda r: r.out_size[0])


@declare_check("short_side_max", "n: the shorter input side at most n pixels")
def _chk_short_side(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    if min(req.width, req.height) > val:
        yield Fail("in_size", f"the shorter side {min(req.width, req.height)} exceeds {val}", "short_side_max")


def _narrow_crop_min(val: Any, req: "Request", acc: dict) -> None:
    cm = acc.get("crop_min", (0, 0))  # (height, width); the rule writes [w, h]
    acc["crop_min"] = (max(cm[0], val[1]), max(cm[1], val[0]))


@declare_check("crop_min", "[w, h]: the smallest crop box in pixels (and paste box: the docs do not say whether "
                             "the minimum binds the resize target; the stricter reading)", narrow=_narrow_crop_min)
def _chk_crop_min(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    for box, size in (("crop", req.crop_size), ("paste", req.paste_size)):
        if size is None:
            continue
        h, w = size
        for have, need, side in ((w, val[0], "width"), (h, val[1], "height")):
            if have < need:
                yield Fail(f"{box}_{side[0]}", f"{box} {side} {have} is below the minimum {need}", "crop_min")


@declare_check("in_formats", "[input formats]; in_formats_unknown: formats the docs do not settle either way",
       companions=("in_formats_unknown",))
def _chk_in_formats(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    if req.fmt in val:
        return
    allowed = ", ".join(val)
    if req.fmt in (c.get("in_formats_unknown") or ()):
        yield Fail("fmt", f"input format {req.fmt} is not covered by the docs either way (documented: {allowed})",
                   "in_formats", unknown=True)
    else:
        verb = "is not in the documented list" if soft else "is not supported"
        yield Fail("fmt", f"input format {req.fmt} {verb} ({allowed})", "in_formats")


@declare_check("out_formats", "[output formats]")
def _chk_out_formats(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    if req.out_fmt not in val:
        verb = "is not in the documented list" if soft else "is not supported"
        yield Fail("out_fmt", f"output format {req.out_fmt} {verb} ({', '.join(val)})", "out_formats")


@declare_check("out_formats_by_source", "{input fmt: [output fmts]}")
def _chk_out_by_source(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    allowed = val.get(req.fmt)
    if allowed is not None and req.out_fmt not in allowed:
        yield Fail("out_fmt", f"output format {req.out_fmt} is not available from {req.fmt} input "
                              f"(available: {', '.join(allowed)})", "out_formats_by_source")


@declare_check("out_same_as_input", "true: the output format must be the input format")
def _chk_out_same(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    if val and req.out_fmt != req.fmt:
        yield Fail("out_fmt", f"output format {req.out_fmt} differs from the input format {req.fmt}",
                   "out_same_as_input")


def _align_check(key: str, subj: str, what: str, side: str, attr: str) -> None:
    def run(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
        fmt = req.fmt if side == "in" else req.out_fmt
        oh, ow = req.out_size
        value = {"in_w": req.width, "in_h": req.height, "out_w": ow, "out_h": oh}[subj]
        n = (val or {}).get(fmt)
        if n and value % n:
            need = "must be even" if n == 2 else f"must be a multiple of {n}"
            return [Fail(subj, f"{what} {value} {need}", key, floor=value - value % n)]
        return []
    declare_check(key, f"{{{'input' if side == 'in' else 'output'} fmt: n}}: the {what} a multiple of n "
                       "(violation_effect names the silent floor)", narrow=_narrow_lcm(attr, side))(run)


_align_check("w_align_for", "in_w", "input width", "in", "w_align")
_align_check("h_align_for", "in_h", "input height", "in", "h_align")
_align_check("out_w_align_for", "out_w", "output width", "out", "out_w_align")
_align_check("out_h_align_for", "out_h", "output height", "out", "out_h_align")


@declare_check("ops", "[allowed ops] for this unit")
def _chk_ops(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    if req.op not in val:
        labels = _vocab().op_labels
        yield Fail("op", f"{labels.get(req.op, req.op)} is not allowed "
                         f"(allowed: {', '.join(labels.get(o, o) for o in val)})", "ops")


def _ratio_bounds(val: Any) -> tuple[Fraction, Fraction]:
    return (Fraction(str(val[0])), Fraction(str(val[1])))


@declare_check("ratio", "[min, max] scale per axis (output/input; fractions like \"1/32\" allowed)",
               prepare=_ratio_bounds, narrow=_narrow_range("ratio"))
def _chk_ratio(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    if req.scale is None:
        return
    lo, hi = val
    src = (req.height, req.width) if req.op == "resize" else req.crop_size
    dst = req.out_size if req.op != "crop_resize_paste" else req.paste_size
    assert src is not None and dst is not None  # a request with a scale has both sizes
    for i, (axis, subj) in enumerate((("horizontal", "ratio_w"), ("vertical", "ratio_h"))):
        r, ax = req.scale[i], 1 - i  # scale is (x, y); sizes are (height, width)
        if not lo <= r <= hi:
            yield Fail(subj, f"{axis} scale {_fmt_ratio(r)} ({src[ax]} -> {dst[ax]} px) is outside "
                             f"[{_fmt_ratio(lo)}, {_fmt_ratio(hi)}]", "ratio")


def _narrow_roi(val: Any, req: "Request", acc: dict) -> None:
    for side, want in (val or {}).items():
        if want in ("even", "odd"):
            acc.setdefault("roi", {})[side] = want


@declare_check("roi", "{left: even, top: even, right: odd, bottom: odd}: crop and paste box parity "
                      "(inclusive offsets)", narrow=_narrow_roi)
def _chk_roi(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    for boxname, box in (("crop", req.crop), ("paste", req.paste)):
        if box is None:
            continue
        for side, idx in (("left", 0), ("top", 1), ("right", 2), ("bottom", 3)):
            want = val.get(side)
            if want in ("even", "odd") and box[idx] % 2 != (0 if want == "even" else 1):
                yield Fail(f"{boxname}_{side}", f"{boxname} {side} {box[idx]} must be {want}", "roi")


@declare_check("paste_left_align", "n: the paste box's left offset a multiple of n",
               narrow=_narrow_lcm("paste_left_align", ""))
def _chk_paste_left(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    if val and req.paste is not None and req.paste[0] % val:
        yield Fail("paste_left", f"paste left {req.paste[0]} must be a multiple of {val}", "paste_left_align")


def _max_check(key: str, attr: str, what: str) -> None:
    def run(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
        got = getattr(req, attr)
        return [Fail(attr, f"{got} {what} requested; at most {val}", key)] if got is not None and got > val else []
    declare_check(key, f"n: at most n {what}")(run)


_max_check("channels_max", "channels", "channels")
_max_check("batch_max", "batch", "pictures per call")


@declare_check("interpolation", "[interpolation names] accepted")
def _chk_interpolation(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    if req.interpolation is not None and req.interpolation not in val:
        yield Fail("interpolation", f"interpolation {req.interpolation!r} is not supported ({', '.join(val)})",
                   "interpolation")


@declare_check("codecs", "{codec: {bit_depth, profiles, profiles_known, max_level, chroma, interlaced}}")
def _chk_codecs(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    spec = val.get(req.fmt)
    if spec is None:
        return [Fail("fmt", f"codec {req.fmt} is not supported ({', '.join(val)})", "codecs")]
    out = []
    bd = req.bit_depth if req.bit_depth is not None else 8
    if bd not in spec.get("bit_depth", (8,)):
        out.append(Fail("bit_depth", f"{req.fmt} {bd}-bit is not supported "
                                     f"({'/'.join(str(b) for b in spec['bit_depth'])}-bit only)", "codecs"))
    if req.profile is not None:
        if "profiles" in spec and req.profile not in spec["profiles"]:
            out.append(Fail("profile", f"{req.fmt} profile {req.profile} is not supported "
                                       f"({', '.join(spec['profiles'])})", "codecs"))
        elif "profiles_known" in spec and req.profile not in spec["profiles_known"]:
            out.append(Fail("profile", f"{req.fmt} profile {req.profile} is not named in the docs (they give "
                                       "bit depth and chroma only)", "codecs", unknown=True))
    if req.level is not None and float(req.level) > float(spec.get("max_level", 99)):
        out.append(Fail("level", f"{req.fmt} level {req.level} is above the maximum {spec['max_level']}", "codecs"))
    if req.chroma is not None and str(req.chroma).replace(":", "") not in [str(x) for x in spec.get("chroma", ())]:
        out.append(Fail("chroma", f"{req.fmt} chroma {req.chroma} is not supported (4:2:0 only)", "codecs"))
    if req.interlaced and not spec.get("interlaced", False):
        out.append(Fail("interlaced", f"interlaced {req.fmt} is not supported (interlaced decode is H.264 8-bit "
                                      "only)", "codecs"))
    if req.interlaced and bd != 8:
        out.append(Fail("interlaced", "interlaced decode is H.264 8-bit only", "codecs"))
    return out


@declare_check("container", "[container names] accepted (the input must be an elementary stream)")
def _chk_container(val: Any, c: Mapping[str, Any], req: "Request", soft: bool) -> Iterable[Fail]:
    if req.container is not None and req.container not in val:
        yield Fail("container", f"container {req.container!r} is not accepted: the input must be an Annex-B "
                                "elementary stream, sent frame by frame (demux first)", "container")


def narrow_requirements(rule: "Rule", req: "Request", acc: dict) -> None:
    """Fold ``rule``'s geometric constraints into ``acc`` (the fields of :class:`~.evaluation.Requirements`)."""
    for key, entry in CHECKS.items():
        if entry.narrow is not None and key in rule.check:
            entry.narrow(rule.check[key], req, acc)


def run_checks(rule: "Rule", req: "Request") -> list[Fail]:
    """Every failure of ``rule``'s ``check:`` block for ``req``, in table order; all ``unknown`` when the rule
    says ``on_fail: unknown``."""
    c = rule.check
    soft = rule.on_fail == "unknown"
    fails: list[Fail] = []
    for key, entry in CHECKS.items():
        if key in c:
            fails.extend(entry.run(c[key], c, req, soft))
    if soft:
        for f in fails:
            f.unknown = True
    return fails
