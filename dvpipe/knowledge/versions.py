"""CANN version numbers: parsing, ordering and ranges.

CANN releases are numbered ``MAJOR.MINOR.PATCH`` (general availability, e.g. ``8.0.0``) or
``MAJOR.MINOR.RCn`` (release candidates, e.g. ``8.0.RC1``), optionally followed by a build number
(``8.0.RC2.2``) and a pre-release tag (``8.0.RC1.alpha002``, ``8.1.RC1.beta1``, ``9.0.0beta1``).

Order within one ``MAJOR.MINOR``: every RC sorts before every GA/patch release
(``8.0.RC1 < 8.0.RC3 < 8.0.0 < 8.0.1``); a pre-release sorts before the release it precedes
(``alpha < beta < release``), e.g. ``9.0.0.beta2 < 9.0.0`` and ``8.0.RC1.alpha002 < 8.0.RC1``.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Optional, Union
from ..errors import ConfigError

__all__ = ["CannVersion", "VersionRange", "VersionLike", "page_version"]

_ACCEPTED = ("MAJOR.MINOR.PATCH (8.0.0), MAJOR.MINOR.RCn (8.0.RC1), either optionally followed by a build "
             "number (8.0.RC2.2) and an alpha/beta tag with or without a dot (8.0.RC1.alpha002, 9.0.0.beta1, "
             "9.0.0beta1)")

_RE = re.compile(
    r"""^(?P<major>\d+)\.(?P<minor>\d+)\.
        (?:(?P<rc>[Rr][Cc])(?P<rcn>\d+)|(?P<patch>\d+))
        (?:\.(?P<build>\d+))?
        (?:(?P<sep>\.?)(?P<pre>alpha|beta)(?P<pren>\d*))?$""",
    re.X | re.I,
)

_PRE_RANK = {"alpha": 0, "beta": 1, None: 2}


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class CannVersion:
    """A parsed CANN version; orderable, hashable, and ``str()`` returns the text it was parsed from.

    Build with :meth:`parse`. Two spellings of the same version (``9.0.0beta1`` and ``9.0.0.beta1``) compare
    and hash equal; ``str()`` keeps the spelling given.
    """

    major: int
    minor: int
    rc: Optional[int]          # n of RCn, or None for a GA/patch release
    patch: Optional[int]       # PATCH of MAJOR.MINOR.PATCH, or None for an RC
    build: int = 0             # trailing numeric build (8.0.RC2.2 -> 2), 0 if absent
    pre: Optional[str] = None  # "alpha" | "beta" | None
    pre_number: int = 0
    text: str = field(default="", compare=False)

    @classmethod
    def parse(cls, value: "VersionLike") -> "CannVersion":
        """Parse ``"8.0.RC1"`` etc.; a :class:`CannVersion` is returned unchanged.

        Raises:
            ConfigError: the text is not a CANN version; the message lists the accepted forms.
        """
        if isinstance(value, CannVersion):
            return value
        if not isinstance(value, str):
            raise ConfigError(f"CANN version must be a string such as '8.0.RC1', got {value!r}; accepted forms: "
                              f"{_ACCEPTED}")
        text = value.strip()
        m = _RE.match(text)
        if not m:
            raise ConfigError(f"cannot parse CANN version {value!r}; accepted forms: {_ACCEPTED}")
        pre = m.group("pre").lower() if m.group("pre") else None
        return cls(
            major=int(m.group("major")),
            minor=int(m.group("minor")),
            rc=int(m.group("rcn")) if m.group("rc") else None,
            patch=int(m.group("patch")) if m.group("patch") is not None else None,
            build=int(m.group("build") or 0),
            pre=pre,
            pre_number=int(m.group("pren") or 0) if pre else 0,
            text=text,
        )

    @property
    def is_rc(self) -> bool:
        return self.rc is not None

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None

    def _key(self) -> tuple:
        stage, n = (0, self.rc) if self.rc is not None else (1, self.patch)
        return (self.major, self.minor, stage, n, self.build, _PRE_RANK[self.pre], self.pre_number)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = CannVersion.parse(other)
            except ValueError:
                return NotImplemented
        if not isinstance(other, CannVersion):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: object) -> bool:
        if isinstance(other, str):
            other = CannVersion.parse(other)
        if not isinstance(other, CannVersion):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        if self.text:
            return self.text
        core = f"{self.major}.{self.minor}." + (f"RC{self.rc}" if self.rc is not None else str(self.patch))
        if self.build:
            core += f".{self.build}"
        if self.pre:
            core += f".{self.pre}{self.pre_number or ''}"
        return core

    def __repr__(self) -> str:
        return f"CannVersion('{self}')"


VersionLike = Union[str, CannVersion]


def _opt(v: Optional[VersionLike]) -> Optional[CannVersion]:
    return None if v is None else CannVersion.parse(v)


@dataclass(frozen=True)
class VersionRange:
    """A range of CANN versions: ``min <= v <= max`` (both inclusive) and ``v < before`` (exclusive).

    Any bound may be None (open). ``VersionRange()`` contains every version.
    ``VersionRange("6.2.RC1", before="8.5.0")`` is "from 6.2.RC1 up to, not including, 8.5.0".
    """

    min: Optional[CannVersion] = None
    max: Optional[CannVersion] = None
    before: Optional[CannVersion] = None

    def __init__(self, min: Optional[VersionLike] = None, max: Optional[VersionLike] = None,
                 before: Optional[VersionLike] = None) -> None:
        object.__setattr__(self, "min", _opt(min))
        object.__setattr__(self, "max", _opt(max))
        object.__setattr__(self, "before", _opt(before))
        if self.min is not None and self.max is not None and self.max < self.min:
            raise ConfigError(f"empty version range: max {self.max} < min {self.min}")

    @classmethod
    def from_mapping(cls, data: Optional[dict]) -> "VersionRange":
        """Build from a ``{min:, max:, before:}`` mapping (missing keys or None mean open)."""
        data = data or {}
        unknown = set(data) - {"min", "max", "before"}
        if unknown:
            raise ConfigError(f"version range keys are min/max/before, got {sorted(unknown)}")
        return cls(data.get("min"), data.get("max"), data.get("before"))

    def __contains__(self, version: VersionLike) -> bool:
        v = CannVersion.parse(version)
        if self.min is not None and v < self.min:
            return False
        if self.max is not None and v > self.max:
            return False
        if self.before is not None and not v < self.before:
            return False
        return True

    @property
    def is_open(self) -> bool:
        return self.min is None and self.max is None and self.before is None

    def __str__(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min}")
        if self.max is not None:
            parts.append(f"<= {self.max}")
        if self.before is not None:
            parts.append(f"< {self.before}")
        return ", ".join(parts) if parts else "any version"


#: hiascend URL directory codes that do not follow MAJOR MINOR (PATCH | RCn) [alpha|beta n] (constraints.md)
_PAGE_CODES = {"5046": "5.0.4"}
_PAGE_RE = re.compile(r"/(?:canncommercial|CANNCommunityEdition)/(?P<code>[0-9A-Za-z]+)/", re.I)
_CODE_RE = re.compile(r"^(?P<major>\d)(?P<minor>\d)(?:(?P<rc>RC\d+)|(?P<patch>\d))(?P<pre>(?:alpha|beta)\d*)?$", re.I)
#: the ``llms-content`` full-text mirror holds the "latest" pages, 9.0.0 when they were read (constraints.md)
_LLM_MIRROR_VERSION = "9.0.0"


def page_version(url: Optional[str]) -> Optional[CannVersion]:
    """The CANN version of a hiascend documentation page, from its URL directory code; None for a page that
    is not a versioned CANN page (MindX SDK, sample code, legacy DDK guides).

    ``.../canncommercial/5046/...`` is 5.0.4, ``601`` 6.0.1, ``82RC1alpha003`` 8.2.RC1.alpha003, ``900beta2``
    9.0.0beta2; the ``llms-content`` mirror is the 9.0.0 ("latest") text.

        >>> str(page_version("https://www.hiascend.com/document/detail/zh/canncommercial/601/x.html"))
        '6.0.1'
    """
    if not url:
        return None
    if "/llms-content/document/canncommercial/" in url:
        return CannVersion.parse(_LLM_MIRROR_VERSION)
    m = _PAGE_RE.search(url)
    if not m:
        return None
    code = m.group("code")
    if code in _PAGE_CODES:
        return CannVersion.parse(_PAGE_CODES[code])
    c = _CODE_RE.match(code)
    if not c:
        return None
    third = c.group("rc") or c.group("patch")
    pre = f".{c.group('pre')}" if c.group("pre") else ""
    return CannVersion.parse(f"{c.group('major')}.{c.group('minor')}.{third.upper()}{pre}")
