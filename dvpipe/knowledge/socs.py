"""Product families and SoC names (constraints.md §0).

A SoC name is what ``acl.get_soc_name()`` returns (e.g. ``Ascend310P3``). Names are matched in full and
case-sensitively against ``data/families.yaml``: the exact names listed there, then a few documented
patterns (``re.fullmatch``, never a prefix). The bare ``Ascend910B`` is therefore the legacy first-generation
910, while ``Ascend910B1`` … ``Ascend910B4``, ``Ascend910B2C`` and ``Ascend910B4-1`` are Atlas A2.

Friendly names such as ``"910C"`` are *aliases*: they are never applied by :func:`family_of`; resolve them
explicitly with :func:`lookup_alias`, which says which SoC string to use.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

from ._data import load_yaml
from .versions import CannVersion

__all__ = ["Family", "SocInfo", "Alias", "families", "family", "family_of", "soc_info", "known_soc_names",
           "lookup_alias", "aliases", "latest_checked"]


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


@functools.lru_cache(maxsize=None)
def _load() -> tuple[dict[str, Family], dict[str, Alias], dict[str, str], CannVersion]:
    data = load_yaml("families.yaml")
    fams: dict[str, Family] = {}
    for key, d in data["families"].items():
        fams[key] = Family(
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
        )
    als = {name: Alias(name=name, family=a["family"], suggest=a["suggest"], note=a["note"])
           for name, a in (data.get("aliases") or {}).items()}
    refused = dict(data.get("refused_aliases") or {})
    names_seen: dict[str, str] = {}
    for fam in fams.values():
        for n in fam.soc_names:
            if n in names_seen:
                raise ValueError(f"families.yaml: SoC name {n} listed for {names_seen[n]} and {fam.key}")
            names_seen[n] = fam.key
    return fams, als, refused, CannVersion.parse(data["latest_checked"])


def families() -> tuple[Family, ...]:
    """All product families, in the order of ``families.yaml``."""
    return tuple(_load()[0].values())


def family(key: str) -> Family:
    """The family with this key (``ascend310``, ``ascend310p``, ``ascend310b``, ``ascend910``,
    ``ascend910b``, ``ascend910_93``, ``atlas350``). Raises ``ValueError`` for anything else."""
    fams = _load()[0]
    try:
        return fams[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown product family {key!r}; known: {', '.join(fams)}") from None


def latest_checked() -> CannVersion:
    """The newest CANN version whose DVPP docs the rules were read from."""
    return _load()[3]


def known_soc_names() -> tuple[str, ...]:
    """Every SoC string listed explicitly, family by family."""
    return tuple(n for f in families() for n in f.soc_names)


def soc_info(name: str) -> SocInfo:
    """Match a SoC name (full string, case-sensitive) to its family.

    Raises:
        ValueError: unknown name; the message lists the known names and, where it applies, the alias or
            family key that was probably meant.
    """
    fams, als, refused, _ = _load()
    if not isinstance(name, str):
        raise ValueError(f"SoC name must be a string such as 'Ascend310P3', got {name!r}")
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
    raise ValueError(_unknown_name_message(name, fams, als, refused))


def family_of(name: str) -> str:
    """The family key of a SoC name (full, case-sensitive match; never a prefix).

    ``family_of("Ascend910B")`` is ``"ascend910"`` (legacy 910); ``family_of("Ascend910B4-1")`` is
    ``"ascend910b"`` (A2); ``family_of("Ascend910_9391")`` is ``"ascend910_93"`` (A3).
    """
    return soc_info(name).family


def aliases() -> tuple[Alias, ...]:
    """The explicit alias table (friendly names for CLI use)."""
    return tuple(_load()[1].values())


def lookup_alias(name: str) -> Alias:
    """Resolve a friendly name (``"910C"``, ``"A2"``, ``"310P"``...) to the SoC string it suggests.

    Case-insensitive. Raises ``ValueError`` for names that are not in the table, including the deliberately
    refused ambiguous ones (``"910B"``), with the reason.
    """
    _, als, refused, _ = _load()
    for table_name, alias in als.items():
        if table_name.lower() == str(name).strip().lower():
            return alias
    for table_name, why in refused.items():
        if table_name.lower() == str(name).strip().lower():
            raise ValueError(f"{name!r} is not an alias: {why}")
    raise ValueError(f"unknown alias {name!r}; aliases: {', '.join(als)}")


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
