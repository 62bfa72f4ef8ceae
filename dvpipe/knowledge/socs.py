"""Product families and SoC names (constraints.md §0).

A SoC name is what ``acl.get_soc_name()`` returns (e.g. ``Ascend310P3``). Names are matched in full and
case-sensitively against ``data/families.yaml``: the exact names listed there, then a few documented
patterns (``re.fullmatch``, never a prefix). The bare ``Ascend910B`` is therefore the legacy first-generation
910, while ``Ascend910B1`` … ``Ascend910B4``, ``Ascend910B2C`` and ``Ascend910B4-1`` are Atlas A2.

Friendly names such as ``"910C"`` are *aliases*: they are never applied by :func:`family_of`; resolve them
explicitly with :func:`lookup_alias`, which says which SoC string to use.

Everything known about a family is data in ``families.yaml`` and read through this module: its SoC names
(:func:`family_of`, :func:`soc_info`, :func:`soc_name_re` for finding a name in tool output), the named
*groups* that rules list instead of repeating families (:func:`groups`, :func:`expand_families`), and the
per-family facts the backends need (:func:`facts`). No other module names a family.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable, Mapping, Optional

from ..errors import ConfigError
from ._data import cached, layers
from .versions import CannVersion

__all__ = ["Family", "FamilyFacts", "SocInfo", "Alias", "families", "family", "family_of", "soc_info",
           "known_soc_names", "lookup_alias", "aliases", "latest_checked", "groups", "group", "expand_families",
           "facts", "soc_name_re", "find_soc_name"]


@dataclass(frozen=True)
class FamilyFacts:
    """Per-family facts the DVPP backends act on (``families.yaml``: ``fact_defaults`` + a family's ``facts``).

    Attributes:
        acldvpp_resize_interpolations: values ``acldvppSetResizeConfigInterpolation`` documents for the
            family (0 = default filter, 1/3 bilinear, 2/4 nearest, 5 the high-order filter).
        acldvpp_resize_refused: of those, the values the family refuses.
        acldvpp_default_filter: what value 0 means: ``high_order`` (Huawei's own filter) or ``bilinear``.
        acldvpp_csc: whether ``acldvppVpcConvertColorAsync`` exists on the family.
        undocumented_layout_as: a SoC whose documented stride a device *measurement* may borrow where the
            family's own is undocumented (None: none).
        vdec_default_out_size: ``(width, height)`` in pixels of the largest picture an acldvpp VDEC channel
            outputs when ``vdec_set_channel_desc_out_pic_width/height`` are not set.
        sources: fact name -> the page it was read on (full URL).
    """

    acldvpp_resize_interpolations: tuple[int, ...]
    acldvpp_resize_refused: tuple[int, ...]
    acldvpp_default_filter: str
    acldvpp_csc: bool
    undocumented_layout_as: Optional[str] = None
    vdec_default_out_size: tuple[int, int] = (4096, 4096)
    sources: Mapping[str, str] = field(default_factory=dict)


_FACT_NAMES = tuple(f.name for f in fields(FamilyFacts) if f.name != "sources")
_FILTERS = ("high_order", "bilinear")


@dataclass(frozen=True)
class Family:
    """One product family.

    Attributes:
        key: family key used throughout the knowledge base (``ascend310``, ``ascend910b``, ...).
        label: short name for messages.
        soc_names: exact SoC strings mapped to this family.
        soc_patterns: regexes (full match) for further names; such names map with confidence ``inferred``.
        soc_confidence: how sure the name -> family mapping is (``documented``/``secondary``/``inferred``).
        apis: API generations with DVPP support, preferred first (``acldvpp`` = v1, ``himpi`` = v2).
        documented_from: earliest CANN version checked whose DVPP docs list the family.
        dropped_from: first CANN version checked whose DVPP support lists no longer include it, or None.
        dropped_open_question: the open question (``open_questions.yaml``) a dropped family's verdicts cite.
        groups: the ``families.yaml`` groups the family belongs to, in the file's order.
        facts: the family's :class:`FamilyFacts`.
        file: the data file that defines the family.
    """

    key: str
    label: str
    labels_zh: tuple[str, ...]
    labels_en: tuple[str, ...]
    soc_names: tuple[str, ...]
    soc_patterns: tuple[str, ...]
    soc_confidence: str
    soc_source: str
    apis: tuple[str, ...]
    documented_from: CannVersion
    documented_from_source: str
    dropped_from: Optional[CannVersion] = None
    dropped_source: Optional[str] = None
    dropped_note: Optional[str] = None
    dropped_open_question: Optional[str] = None
    groups: tuple[str, ...] = ()
    facts: Optional[FamilyFacts] = None
    file: str = "families.yaml"


@dataclass(frozen=True)
class SocInfo:
    """The result of matching a SoC name: its family and how sure the mapping is."""

    name: str
    family: str
    confidence: str  # documented | secondary | inferred
    source: str
    note: str = ""


@dataclass(frozen=True)
class Alias:
    """A friendly name (CLI use) and the SoC string it suggests."""

    name: str
    family: str
    suggest: str
    note: str


@dataclass(frozen=True)
class _Table:
    families: Mapping[str, Family]
    aliases: Mapping[str, Alias]
    refused: Mapping[str, str]
    latest: CannVersion
    groups: Mapping[str, tuple[str, ...]]


def _facts(defaults: Mapping[str, Any], own: Mapping[str, Any], sources: Mapping[str, str], where: str
           ) -> FamilyFacts:
    extra = set(own) - set(_FACT_NAMES)
    if extra:
        raise ConfigError(f"{where}: unknown fact {sorted(extra)}; known: {', '.join(_FACT_NAMES)}")
    d = {**defaults, **own}
    missing = [n for n in _FACT_NAMES if n not in d and n != "undocumented_layout_as"]
    if missing:
        raise ConfigError(f"{where}: facts {missing} are not set (give them in fact_defaults or the family)")
    if d["acldvpp_default_filter"] not in _FILTERS:
        raise ConfigError(f"{where}: acldvpp_default_filter must be one of {_FILTERS}")
    return FamilyFacts(acldvpp_resize_interpolations=tuple(int(x) for x in d["acldvpp_resize_interpolations"]),
                       acldvpp_resize_refused=tuple(int(x) for x in d["acldvpp_resize_refused"]),
                       acldvpp_default_filter=str(d["acldvpp_default_filter"]), acldvpp_csc=bool(d["acldvpp_csc"]),
                       undocumented_layout_as=d.get("undocumented_layout_as"),
                       vdec_default_out_size=tuple(int(x) for x in d["vdec_default_out_size"]),  # type: ignore[arg-type]
                       sources=dict(sources))


def _family_from(key: str, d: Mapping[str, Any], fname: str, defaults: Mapping[str, Any],
                 default_sources: Mapping[str, str]) -> Family:
    where = f"{fname}: family {key}"
    try:
        own_sources = dict(d.get("fact_sources") or {})
        used = {**default_sources, **own_sources}
        return Family(
            key=key,
            label=d["label"],
            labels_zh=tuple(d.get("labels_zh", ())),
            labels_en=tuple(d.get("labels_en", ())),
            soc_names=tuple(d.get("soc_names", ())),
            soc_patterns=tuple(d.get("soc_patterns", ())),
            soc_confidence=d["soc_confidence"],
            soc_source=d["soc_source"],
            apis=tuple(d["apis"]),
            documented_from=CannVersion.parse(d["documented_from"]),
            documented_from_source=d["documented_from_source"],
            dropped_from=CannVersion.parse(d["dropped_from"]) if d.get("dropped_from") else None,
            dropped_source=d.get("dropped_source"),
            dropped_note=" ".join(d["dropped_note"].split()) if d.get("dropped_note") else None,
            dropped_open_question=d.get("dropped_open_question"),
            facts=_facts(defaults, d.get("facts") or {}, used, where),
            file=fname,
        )
    except KeyError as e:
        raise ConfigError(f"{where}: missing {e.args[0]}") from None


@cached
def _load() -> _Table:
    fams: dict[str, Family] = {}
    als: dict[str, Alias] = {}
    refused: dict[str, str] = {}
    grps: dict[str, list[str]] = {}
    latest: Optional[CannVersion] = None
    defaults: Mapping[str, Any] = {}
    default_sources: Mapping[str, str] = {}
    for n, (fname, data) in enumerate(layers("families.yaml")):
        if n == 0:
            defaults = dict(data.get("fact_defaults") or {})
            default_sources = dict(data.get("fact_sources") or {})
        for key, d in (data.get("families") or {}).items():
            if key in fams:
                raise ConfigError(f"{fname}: family {key} is already defined in {fams[key].file}")
            fams[key] = _family_from(key, d, fname, defaults, default_sources)
        for gname, members in (data.get("groups") or {}).items():
            if not isinstance(members, list):
                raise ConfigError(f"{fname}: group {gname} must be a list of family keys")
            grps.setdefault(gname, [])
            grps[gname].extend(m for m in members if m not in grps[gname])
        for name, a in (data.get("aliases") or {}).items():
            if name in als:
                raise ConfigError(f"{fname}: alias {name} is already defined")
            als[name] = Alias(name=name, family=a["family"], suggest=a["suggest"], note=a["note"])
        refused.update(data.get("refused_aliases") or {})
        if data.get("latest_checked"):
            v = CannVersion.parse(data["latest_checked"])
            latest = v if latest is None else max(latest, v)
    names_seen: dict[str, str] = {}
    for fam in fams.values():
        for n_ in fam.soc_names:
            if n_ in names_seen:
                raise ConfigError(f"{fam.file}: SoC name {n_} listed for {names_seen[n_]} and {fam.key}")
            names_seen[n_] = fam.key
    for gname, members in grps.items():
        if gname in fams:
            raise ConfigError(f"families.yaml: group {gname} has the name of a family; rename the group")
        bad = [m for m in members if m not in fams]
        if bad:
            raise ConfigError(f"families.yaml: group {gname}: unknown family {', '.join(bad)}; known: {', '.join(fams)}")
    order = list(fams)
    groups_of = {k: tuple(g for g, m in grps.items() if k in m) for k in fams}
    fams = {k: _replace_groups(f, groups_of[k]) for k, f in fams.items()}
    for a in als.values():
        if a.family not in fams:
            raise ConfigError(f"families.yaml: alias {a.name}: unknown family {a.family}")
    if latest is None:
        raise ConfigError("families.yaml: latest_checked is not set")
    return _Table(fams, als, refused, latest,
                  {g: tuple(sorted(m, key=order.index)) for g, m in grps.items()})


def _replace_groups(f: Family, gs: tuple[str, ...]) -> Family:
    return replace(f, groups=gs)


def groups() -> Mapping[str, tuple[str, ...]]:
    """The named family groups (``families.yaml`` ``groups``): name -> family keys, in family order."""
    return dict(_load().groups)


def group(name: str) -> tuple[str, ...]:
    """The family keys of one group. Raises ``ConfigError`` (a ``ValueError``) for an unknown name."""
    g = _load().groups
    if name not in g:
        raise ConfigError(f"unknown family group {name!r}; groups: {', '.join(g)}")
    return g[name]


def expand_families(names: Iterable[str], where: str = "") -> tuple[str, ...]:
    """Family keys for a rule's ``families:`` list, where each entry is a family key or a group name;
    duplicates dropped, in ``families.yaml`` order. ``where`` prefixes the error message (file and rule)."""
    t = _load()
    if isinstance(names, str):
        names = [names]
    want: set = set()
    for n in names:
        if n in t.families:
            want.add(n)
        elif n in t.groups:
            want.update(t.groups[n])
        else:
            raise ConfigError(f"{where}unknown family or group {n!r}; families: {', '.join(t.families)}; "
                              f"groups: {', '.join(t.groups)}")
    return tuple(k for k in t.families if k in want)


def facts(soc: Optional[str] = None, *, family: Optional[str] = None) -> FamilyFacts:
    """The :class:`FamilyFacts` of a SoC name (``acl.get_soc_name()``) or of a family key (``family=``)."""
    key = soc_info(soc).family if soc is not None else family
    if key is None:
        raise ConfigError("give a SoC name (as acl.get_soc_name() returns it) or family='ascend310p'")
    return _load_family(key).facts  # type: ignore[return-value]


@cached
def soc_name_re() -> "re.Pattern[str]":
    """A regex that finds any known SoC name in free text (``npu-smi info`` output), with or without the
    ``Ascend`` prefix (``310P3``, ``Ascend910B4-1``), never inside a longer word. Built from the listed
    names and patterns of ``families.yaml``; use :func:`find_soc_name` for the normalised name."""
    alts = []
    for fam in _load().families.values():
        alts += [re.escape(n) for n in fam.soc_names] + list(fam.soc_patterns)
    parts = []
    for a in sorted(set(alts), key=len, reverse=True):
        parts.append("(?:Ascend)?" + a[len("Ascend"):] if a.startswith("Ascend") else a)
    return re.compile(r"(?<![\w-])(" + "|".join(parts) + r")(?![\w-])")


def find_soc_name(text: str) -> Optional[str]:
    """The first known SoC name in ``text``, as ``acl.get_soc_name()`` spells it (``Ascend310P3``), or None.

    ``find_soc_name("| 0     910B4-1   | OK |")`` is ``"Ascend910B4-1"``.
    """
    for m in soc_name_re().finditer(str(text)):
        name = known_soc_name(m.group(1), "Ascend" + m.group(1))
        if name:
            return name
    return None


def known_soc_name(*candidates: str) -> Optional[str]:
    """The first of ``candidates`` that :func:`soc_info` knows (a listed name or a family's pattern), or None."""
    for cand in candidates:
        try:
            soc_info(cand)
            return cand
        except ValueError:
            continue
    return None


def _load_family(key: str) -> Family:
    return family(key)  # the module-level function; `facts` has a parameter of the same name


def families() -> tuple[Family, ...]:
    """All product families, in the order of ``families.yaml``."""
    return tuple(_load().families.values())


def family(key: str) -> Family:
    """The family with this key (a ``families.yaml`` key such as ``ascend310p``). Raises ``ConfigError`` for
    anything else, listing the known keys."""
    fams = _load().families
    try:
        return fams[key]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown product family {key!r}; known: {', '.join(fams)}") from None


def latest_checked() -> CannVersion:
    """The newest CANN version whose DVPP docs the rules were read from."""
    return _load().latest


def known_soc_names() -> tuple[str, ...]:
    """Every SoC string listed explicitly, family by family."""
    return tuple(n for f in families() for n in f.soc_names)


def soc_info(name: str) -> SocInfo:
    """Match a SoC name (full string, case-sensitive) to its family.

    Raises:
        ConfigError: unknown name; the message lists the known names and, where it applies, the alias or
            family key that was probably meant.
    """
    t = _load()
    fams, als, refused = t.families, t.aliases, t.refused
    if not isinstance(name, str):
        raise ConfigError(f"SoC name must be a string such as 'Ascend310P3', got {name!r}")
    for fam in fams.values():
        if name in fam.soc_names:
            note = ""
            if fam.soc_confidence != "documented":
                note = (f"the SoC string {name} comes from public code, not Huawei's docs" if fam.soc_confidence
                        == "secondary" else f"the SoC string {name} is dvpipe's guess for {fam.label}")
            return SocInfo(name, fam.key, fam.soc_confidence, fam.soc_source, note)
    for fam in fams.values():
        for pat in fam.soc_patterns:
            if re.fullmatch(pat, name):
                return SocInfo(name, fam.key, "inferred", fam.soc_source,
                               f"{name} is not a listed SoC string; it matches the {fam.label} naming pattern")
    raise ConfigError(_unknown_name_message(name, fams, als, refused))


def family_of(name: str) -> str:
    """The family key of a SoC name (full, case-sensitive match; never a prefix).

    ``family_of("Ascend910B")`` is ``"ascend910"`` (legacy 910); ``family_of("Ascend910B4-1")`` is
    ``"ascend910b"`` (A2); ``family_of("Ascend910_9391")`` is ``"ascend910_93"`` (A3).
    """
    return soc_info(name).family


def aliases() -> tuple[Alias, ...]:
    """The explicit alias table (friendly names for CLI use)."""
    return tuple(_load().aliases.values())


def lookup_alias(name: str) -> Alias:
    """Resolve a friendly name (``"910C"``, ``"A2"``, ``"310P"``...) to the SoC string it suggests.

    Case-insensitive. Raises ``ConfigError`` for names that are not in the table, including the deliberately
    refused ambiguous ones (``"910B"``), with the reason.
    """
    t = _load()
    als, refused = t.aliases, t.refused
    for table_name, alias in als.items():
        if table_name.lower() == str(name).strip().lower():
            return alias
    for table_name, why in refused.items():
        if table_name.lower() == str(name).strip().lower():
            raise ConfigError(f"{name!r} is not an alias: {why}")
    raise ConfigError(f"unknown alias {name!r}; aliases: {', '.join(als)}")


def _unknown_name_message(name: str, fams, als, refused) -> str:
    listed = "; ".join(f"{f.key}: {', '.join(f.soc_names) or '(none)'}" for f in fams.values())
    msg = (f"unknown SoC name {name!r}. Names are matched in full and case-sensitively, as returned by "
           f"acl.get_soc_name(). Known names - {listed}")
    hints = []
    if name in fams:
        hints.append(f"{name!r} is a family key; pass it as family={name!r}")
    for table_name, alias in als.items():
        if table_name.lower() == name.strip().lower():
            hints.append(f"{name!r} is an alias: use {alias.suggest!r} ({alias.note})")
    for table_name, why in refused.items():
        if table_name.lower() == name.strip().lower():
            hints.append(f"{name!r} is ambiguous: {why}")
    for fam in fams.values():
        for n in fam.soc_names:
            if n.lower() == name.lower() and n != name:
                hints.append(f"did you mean {n!r} ({fam.label}; case matters)?")
    return msg + ("" if not hints else ". " + " ".join(hints))
