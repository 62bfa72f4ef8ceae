"""Evaluation: the verdict for a :class:`~.request.Request` from the rules that apply to it.

:func:`evaluate` selects the applicable rules (family, API, unit, op, CANN window, ``when:`` selectors),
runs their checks (:mod:`.checks`) and stride limits (:mod:`.strides`), adds the family's documentation
window and the coverage check (every aspect the request needs must be covered by some rule), and returns
a :class:`Verdict` of :class:`Finding` records. :func:`requirements` intersects the same rules'
geometric constraints for the detour helpers.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Iterable, Mapping, Optional, Union

from .checks import narrow_requirements as _narrow_requirements, run_checks as _run_checks
from .checks import when_matches as _when_matches
from .request import Request
from .schema import Rule, _rules_by_unit
from .socs import family as _family, latest_checked
from .strides import _stride_applies, _stride_fails
from .versions import VersionLike
from .vocabulary import _API_LABEL, _ASPECT_WORDS, _KINDS, _strength, _vocab

__all__ = ["Finding", "Verdict", "Requirements", "evaluate", "check", "requirements"]


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
    """The DVPP rules' answer for one request (a planner's per-kernel answer is
    :class:`dvpipe.KernelVerdict`, which the DVPP backend builds from this one).

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


def _prefix(req: Request, api: str) -> str:
    v = _vocab()
    unit_label = v.units[req.unit]["label"]
    op_label = v.op_labels.get(req.op, req.op)
    apis = _family(req.family).apis
    api_part = f", {_API_LABEL.get(api, api)}" if len(apis) > 1 else ""
    return f"{unit_label} {op_label} on {req.who} (CANN {req.cann}{api_part})"



def _applicable(req: Request, api: str) -> Iterable[Rule]:
    for rule in _rules_by_unit()[req.unit]:
        if rule.applies_to(req.family, api, req.unit, req.op, req.cann) and _when_matches(rule.when, req) \
                and _stride_applies(rule, req):
            yield rule


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
            oq=fam.dropped_open_question)
    if req.cann > latest_checked():
        add("knowledge.newer_than_docs", "note", f"CANN {req.cann} is newer than the latest docs checked "
            f"({latest_checked()}); rules still current there are assumed to hold", fam.documented_from_source,
            "inferred", "§8")
    if fam.soc_confidence == "inferred" and req.soc in fam.soc_names:  # a listed name dvpipe guessed (no documented
        # SoC string for the family, §0): a device may answer another one; a name that only matches a family's
        # naming pattern is a note below
        add("family.soc_name", "unknown", f"{req.soc} is dvpipe's guess at a SoC name the docs never give"
            f"{': ' + req.soc_note if req.soc_note else ''}; the verdict stays open", fam.soc_source, "inferred", "§0",
            oq="q9")
    elif req.soc_confidence != "documented" and req.soc_note:
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
    oh, ow = req.out_size
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


def check(soc: Union[str, Request, None] = None, cann: Optional[VersionLike] = None, unit: str = "",
          op: Optional[str] = None, width: int = 0, height: int = 0, fmt: str = "", **extras: Any) -> Verdict:
    """Judge one DVPP step; see :class:`Request` for every argument (sizes in pixels).

    ``check(request)`` with a ready :class:`Request` also works. Example::

        check("Ascend310", "6.0.1", "vpc", "resize", 1242, 375, "nv12", out_width=620, out_height=188)
        check(family="ascend910b", cann="8.0.0", unit="jpegd", width=12000, height=9000, fmt="jpeg420")
        check("Ascend310P3", "7.0.0", "vpc", "crop_resize", 1600, 900, "nv12",
              crop=(0, 0, 799, 449), out_width=400, out_height=224)

    Raises ``ConfigError`` (a ``ValueError``) for malformed requests (unknown SoC, unparsable version, crop box outside the
    image...); everything the hardware might refuse comes back as a verdict instead.
    """
    if isinstance(soc, Request):
        return evaluate(soc)
    return evaluate(Request.make(soc, cann, unit, op, width, height, fmt, **extras))


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
        crop_min: ``(height, width)`` minimum crop in pixels, or None.
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


def requirements(request: Request, api: Optional[str] = None) -> Requirements:
    """The geometric constraints on ``request`` (for ``api``, default: the request's, else the family's
    preferred API). Used by the detour helpers to propose legal geometry. Each ``check:`` key says how it
    narrows them (:data:`.checks.CHECKS`, ``narrow``)."""
    a = api or request.api or _family(request.family).apis[0]
    acc: dict[str, Any] = {"roi": {}}
    ids: list[str] = []
    for rule in _applicable(request, a):
        ids.append(rule.id)
        _narrow_requirements(rule, request, acc)
    return Requirements(rule_ids=tuple(ids), **acc)
