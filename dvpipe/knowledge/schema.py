"""The rule files' schema: :class:`Rule`, loading and validating ``data/rules_*.yaml``, rule listings.

The accepted keys are derived, never listed by hand: a rule's top-level keys are the fields of
:class:`Rule`; its ``when:`` and ``check:`` keys are those of the tables in :mod:`.checks`; a ``stride:``
block's keys are :data:`STRIDE_KEYS`. A rule's ``families:`` names family keys or groups
(``families.yaml``). Anything else is refused with one line naming the file, the rule id and the known keys.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

from ..errors import ConfigError
from ._data import cached, layers, rule_layers, strip_private
from .checks import CHECKS, SELECTORS, check_keys, unknown_keys_message
from .socs import expand_families
from .versions import CannVersion, VersionRange
from .vocabulary import _ASPECT_WORDS, CONFIDENCES, _vocab

#: the keys of a rule's ``stride:`` block (ws in bytes, hs in rows; see the schema in ``rules_vpc.yaml``;
#: :mod:`.strides` reads them)
STRIDE_KEYS = frozenset({"side", "formats", "ws_align", "ws_align_for", "times_bpp", "ws_min", "hs_align",
                         "hs_align_for", "hs_min", "size", "ws_max", "hs_max", "ws_max_open", "hs_max_open",
                         "size_note"})

__all__ = ["Rule", "OpenQuestion", "rules", "rule_by_id", "open_questions", "RULE_KEYS"]


@dataclass(frozen=True, eq=False)
class Rule:
    """One documented fact (or documented gap). See the schema in ``data/rules_vpc.yaml``.

    ``families`` are family keys (groups named in the file are expanded, in ``families.yaml`` order);
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


#: the keys a rule may have: the fields of :class:`Rule` (``file`` is where it was read, not a key)
RULE_KEYS = frozenset(f.name for f in fields(Rule)) - {"file"}


def _parse_rule(raw: Mapping[str, Any], fname: str) -> Rule:

    rid = raw.get("id", "?")

    def bad(msg: str) -> ConfigError:
        return ConfigError(msg, path=f"{fname}: rule {rid}")

    extra = set(raw) - RULE_KEYS
    if extra:
        raise bad(unknown_keys_message("key", extra, RULE_KEYS))
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
    fams = expand_families(raw["families"], where=f"{fname}: rule {rid}: ")
    if raw["confidence"] not in CONFIDENCES:
        raise bad(f"confidence must be one of {CONFIDENCES}")
    for url in (raw["source"], *raw.get("also", ())):
        if not str(url).startswith("https://"):
            raise bad(f"source must be a full https URL, got {url!r}")
    when = dict(raw.get("when") or {})
    if set(when) - set(SELECTORS):
        raise bad(unknown_keys_message("selector", set(when) - set(SELECTORS), SELECTORS))
    chk = dict(raw.get("check") or {})
    if set(chk) - check_keys():
        raise bad(unknown_keys_message("check", set(chk) - check_keys(), check_keys()))
    for key in list(chk):
        prepare = CHECKS[key].prepare if key in CHECKS else None
        if prepare is not None:
            try:
                chk[key] = prepare(chk[key])
            except (TypeError, ValueError, IndexError, ZeroDivisionError) as e:
                raise bad(f"check {key}: {e}") from None
    stride = raw.get("stride")
    if stride is not None:
        if set(stride) - STRIDE_KEYS:
            raise bad(unknown_keys_message("stride key", set(stride) - STRIDE_KEYS, STRIDE_KEYS))
        if stride.get("side") not in ("in", "out"):
            raise bad("stride.side must be in or out")
    on_fail = raw.get("on_fail", "reject")
    if on_fail not in ("reject", "unknown"):
        raise bad("on_fail must be reject or unknown")
    doc = raw.get("documented_in") or []
    if isinstance(doc, Mapping):
        per: dict[str, tuple[CannVersion, ...]] = {}
        for name, vs_ in doc.items():  # a family key or a group
            for f in expand_families([name], where=f"{fname}: rule {rid}: documented_in: "):
                per[f] = tuple(CannVersion.parse(v) for v in vs_)
        if set(per) - set(fams):
            raise bad("documented_in names families the rule does not list")
        documented = {f: per.get(f, ()) for f in fams}
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


@cached
def _open_questions_raw() -> Mapping[str, str]:
    out: dict[str, str] = {}
    for fname, data in layers("open_questions.yaml"):
        for q, text in (data.get("open_questions") or {}).items():
            if q in out:
                raise ConfigError(f"open question {q} is already defined (by the shipped data or an earlier layer); "
                                  "give it another key", path=fname)
            out[q] = text
    return out


@cached
def _all_rules() -> tuple[Rule, ...]:
    out: list[Rule] = []
    seen: set = set()
    for fname, data in rule_layers():
        for raw in strip_private(data).get("rules") or ():
            rule = _parse_rule(raw, fname)
            if rule.id in seen:
                raise ConfigError(f"duplicate rule id {rule.id}: a rule id is unique across the shipped data and every "
                                  "layer; give the rule another id", path=fname)
            seen.add(rule.id)
            out.append(rule)
    return tuple(out)


@cached
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


@cached
def _rules_by_id() -> Mapping[str, Rule]:
    return {r.id: r for r in _all_rules()}


def rule_by_id(rule_id: str) -> Optional[Rule]:
    """The rule with this id, or None (built-in checks such as ``family.*`` and ``knowledge.*``)."""
    return _rules_by_id().get(rule_id)
