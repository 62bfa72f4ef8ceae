"""How sure a verdict is: :class:`Confidence` levels from the rules behind it and the CANN versions of
their pages (constraints.md §8)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional, Sequence

from .schema import _all_rules, rule_by_id
from .socs import family as _family, latest_checked
from .versions import CannVersion, VersionLike, page_version

if TYPE_CHECKING:
    from .evaluation import Verdict

__all__ = ["LEVELS", "Confidence", "confidence_of", "rule_confidence", "combine_confidence", "documented_versions"]

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


def confidence_of(verdict: "Verdict") -> Confidence:
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
