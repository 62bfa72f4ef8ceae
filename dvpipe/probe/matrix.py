"""``dvpipe probe --matrix``: a resolution x encoding x CANN-version grid for one SoC.

Every cell is one camera planned exactly as ``dvpipe probe --camera`` plans it (same planner, same
DVPP verdicts), so the grid and a per-camera probe never disagree. A cell shows one symbol per step
that a DVPP unit implements, in stage order (decode, then resize for the default profile):

====  ==============================================================================
``+``  runs on DVPP as asked
``~``  runs on DVPP through a legal detour (align-crop, even output, two VPC passes...)
``-``  falls back: the documented rules reject it
``?``  falls back: the docs leave it open (or the product is not listed at that version)
``p``  falls back: dvpipe's fidelity policy declines it (``reference``), not the hardware
``x``  the DVPP backend is unavailable, or the camera cannot be planned at all
====  ==============================================================================

After the symbols, a letter says how sure the cell is (its weakest step, see
:data:`dvpipe.knowledge.LEVELS`): none = documented, ``s`` secondary source (MindX SDK, sample code),
``e`` extrapolated (documented for later CANN versions only, or newer than the docs checked), ``i``
inferred (dvpipe's reading); ``?`` already says "unknown". The header says which CANN versions' pages
the knowledge base was read from for the family: other columns carry the nearest documented rules
(constraints.md §8), which is why neighbouring columns often read the same.

Migration planning reads a row across the versions: ``++`` from some version on means that camera
can move to DVPP with that CANN; a ``-`` that never turns into ``+`` is a product limit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

from .._typing import Fidelity
from ..errors import ConfigError

if TYPE_CHECKING:  # names for the type checker only
    from .report import StepRow

__all__ = ["SIZES", "ENCODINGS", "CANN_VERSIONS", "Matrix", "Cell", "build_matrix", "default_versions", "symbol",
           "MARKERS"]

#: sizes ``(height, width)`` in pixels: common automotive and dataset cameras, portrait sensors, 4K/DCI-4K, VGA,
#: odd sizes (floored to even by VPC on 310/910), and 8K (NV12-only VPC resize on 310/910/310P).
SIZES: tuple[tuple[int, int], ...] = (
    (900, 1600),    # nuScenes
    (1080, 1920),   # 1080p
    (1280, 1920),   # Waymo front
    (886, 1920),    # Waymo side
    (375, 1242),    # KITTI
    (2048, 1550),   # Argoverse 2 ring, portrait
    (1550, 2048),   # Argoverse 2 stereo
    (2160, 3840),   # 4K UHD
    (2160, 4096),   # DCI 4K
    (480, 640),     # VGA
    (721, 1281),    # odd width and height
    (1079, 1919),   # odd, just under 1080p
    (4320, 7680),   # 8K UHD
)
#: encodings probed (see :data:`dvpipe.probe.report.ENCODINGS`).
ENCODINGS: tuple[str, ...] = ("jpeg420", "jpeg422", "jpeg444", "jpeg440", "jpeg400", "jpeg-progressive", "png",
                              "h264", "h265", "nv12", "uyvy", "yuyv")
#: the CANN versions whose DVPP docs were read for the knowledge base (constraints.md, version codes).
CANN_VERSIONS: tuple[str, ...] = ("5.0.4", "6.0.1", "6.2.RC1", "6.3.RC2", "7.0.RC1", "7.0.0", "8.0.RC1", "8.0.0",
                                  "8.1.RC1", "8.2.RC1", "8.3.RC1", "8.5.0", "9.0.0")

_SYMBOLS = {"ok": "+", "detour": "~", "rejected": "-", "unknown": "?", "unavailable": "x", "error": "x",
            "declined": "p"}
_COLOURS = {"+": "32", "~": "33", "-": "31", "?": "35", "x": "31"}
#: confidence level -> the letter after a cell's symbols ("" for documented and unknown: ``?`` says it)
MARKERS = {"documented": "", "secondary": "s", "extrapolated": "e", "inferred": "i", "unknown": ""}


def symbol(step: StepRow) -> str:
    """The matrix symbol of a :class:`~dvpipe.probe.report.StepRow` that a DVPP unit implements."""
    if step.ok:
        return _SYMBOLS["detour"] if step.detour else _SYMBOLS["ok"]
    return _SYMBOLS.get(step.status, "-")


@dataclass
class Cell:
    """One (size, encoding, CANN version): the DVPP-relevant steps of its plan."""

    width: int
    height: int
    encoding: str
    cann: str
    steps: list = field(default_factory=list)  # StepRow, only those a DVPP unit implements
    error: Optional[str] = None
    ops: tuple[str, ...] = ()  # the stages with a DVPP kernel, in order: one symbol each
    notes: list = field(default_factory=list)

    @property
    def code(self) -> str:
        """One symbol per stage in ``ops``: the symbol of the planned step covering that stage."""
        if self.error:
            return "x" * max(1, len(self.ops))
        out = []
        for op in self.ops:
            row = next((s for s in self.steps if op in s.stage.split("+")), None)
            out.append(symbol(row) if row is not None else ".")
        return "".join(out) or "."

    @property
    def confidence(self) -> Optional[str]:
        """The weakest confidence level among the cell's steps (:data:`dvpipe.knowledge.LEVELS`), or None."""
        from ..knowledge import LEVELS

        levels = [s.confidence_level for s in self.steps if s.confidence_level is not None]
        return max(levels, key=LEVELS.index) if levels else None

    @property
    def text(self) -> str:
        """:attr:`code` followed by the confidence letter (:data:`MARKERS`)."""
        return self.code + MARKERS.get(self.confidence or "", "")

    def to_dict(self) -> dict:
        return {"width": self.width, "height": self.height, "encoding": self.encoding, "cann": self.cann,
                "code": self.code, "confidence": self.confidence, "ops": list(self.ops), "error": self.error,
                "notes": list(self.notes),
                "steps": [{"stage": s.stage, "unit": s.unit, "backend": s.backend, "ok": s.ok, "status": s.status,
                           "reason": s.reason, "source": s.source, "detour": s.detour,
                           "confidence": s.confidence_level,
                           "confidence_note": None if s.confidence is None else s.confidence.note}
                          for s in self.steps]}


@dataclass
class Matrix:
    soc: str
    family: str
    versions: list[str]
    sizes: list[tuple[int, int]]  # (height, width) in pixels
    encodings: list[str]
    cells: dict  # (height, width, encoding, cann) -> Cell
    profile: str
    fidelity: Fidelity
    checked: dict = field(default_factory=dict)  # version -> True (its pages were read for the family) / False

    def identical_columns(self) -> list[list[str]]:
        """Runs of adjacent versions whose cells are all the same (two or more versions each)."""
        runs: list[list[str]] = []
        prev = None
        for v in self.versions:
            col = tuple(self.cells[(h, w, e, v)].text for e in self.encodings for (h, w) in self.sizes)
            if runs and col == prev:
                runs[-1].append(v)
            else:
                runs.append([v])
            prev = col
        return [r for r in runs if len(r) > 1]

    def fallback_count(self, policy: bool = True) -> int:
        """Cells with a step that does not run on DVPP (``policy=False``: not counting steps only the
        fidelity policy declined)."""
        return sum(1 for c in self.cells.values()
                   if c.error or any(not s.ok and (policy or s.status != "declined") for s in c.steps))

    def to_dict(self) -> dict:
        return {"soc": self.soc, "family": self.family, "profile": self.profile, "fidelity": self.fidelity,
                "versions": self.versions, "sizes": [[w, h] for h, w in self.sizes], "encodings": self.encodings,
                "checked_versions": [v for v in self.versions if self.checked.get(v)],
                "not_checked_versions": [v for v in self.versions if not self.checked.get(v)],
                "identical_columns": self.identical_columns(),
                "confidence_markers": {"": "documented (or unknown: ?)", "s": "secondary source",
                                       "e": "extrapolated from another CANN version", "i": "inferred (dvpipe's reading)"},
                "legend": {"+": "runs on DVPP", "~": "runs on DVPP through a legal detour",
                           "-": "falls back: rejected by the documented rules",
                           "?": "falls back: the docs leave it open", "p": "declined by the fidelity policy",
                           "x": "not planned / DVPP unavailable"},
                "cells": [c.to_dict() for c in self.cells.values()]}

    def render(self, colour: bool = False) -> str:
        """One block per encoding: rows are sizes, columns CANN versions, one symbol per DVPP step."""
        out = [f"DVPP support matrix for {self.soc} (family {self.family}), profile {self.profile} "
               f"(fidelity {self.fidelity})",
               "each cell: one symbol per stage DVPP can run (listed per block); a fused DVPP step (decode+resize) "
               "gives its symbol to every stage it covers:",
               "  + on DVPP   ~ on DVPP via a legal detour   - falls back (rejected)   "
               "? falls back (docs leave it open)   p declined by the fidelity policy   x not planned",
               "  then how sure: (none) documented   s secondary source   e extrapolated from another CANN version   "
               "i inferred",
               "details for one cell: dvpipe probe --camera C=WxH:ENCODING --soc SOC --cann VERSION"]
        read = [v for v in self.versions if self.checked.get(v)]
        unread = [v for v in self.versions if not self.checked.get(v)]
        out.append(f"CANN versions whose DVPP pages were read for {self.family}: {', '.join(read) or 'none'}"
                   + (f"; not read (cells apply the rules documented at the nearest versions, assumed unchanged, "
                      f"constraints.md §8): {', '.join(unread)}" if unread else ""))
        for run in self.identical_columns():
            out.append(f"identical columns {' = '.join(run)}: no documented rule for these cells changes between "
                       "them")
        size_w = max(len(f"{w}x{h}") for h, w in self.sizes)
        col_w = [max([len(v), 3] + [len(c.text) for c in self.cells.values() if c.cann == v]) for v in self.versions]
        for enc in self.encodings:
            first = next((c for c in self.cells.values() if c.encoding == enc), None)
            out.append("")
            out.append(f"{enc}" + (f" (symbols: {', '.join(first.ops)})" if first and first.ops else ""))
            for note in (first.notes if first else ()):
                out.append(f"  note: {note}")
            out.append("  " + "".ljust(size_w) + "  " + "  ".join(v.ljust(col_w[i]) for i, v in enumerate(self.versions)))
            for (h, w) in self.sizes:
                cells = []
                for i, v in enumerate(self.versions):
                    code = self.cells[(h, w, enc, v)].code
                    text = self.cells[(h, w, enc, v)].text.ljust(col_w[i])
                    if colour:
                        worst = next((s for s in ("x", "-", "?", "~", "+") if s in code), None)
                        text = f"\x1b[{_COLOURS[worst]}m{text}\x1b[0m" if worst else text
                    cells.append(text)
                out.append(("  " + f"{w}x{h}".ljust(size_w) + "  " + "  ".join(cells)).rstrip())
        return "\n".join(out)

    def __str__(self) -> str:
        return self.render()


def default_versions(soc: str) -> list[str]:
    """The checked CANN versions from the first one whose docs list the SoC's family."""
    from ..knowledge import CannVersion, family, family_of, latest_checked

    fam = family(family_of(soc))
    out = [v for v in CANN_VERSIONS if CannVersion.parse(v) >= fam.documented_from
           and CannVersion.parse(v) <= latest_checked()]
    return out or [str(latest_checked())]


def build_matrix(soc: str, versions: Optional[Sequence[str]] = None, *,
                 sizes: Sequence[tuple[int, int]] = SIZES, encodings: Sequence[str] = ENCODINGS,
                 profile: Optional[str] = None, fidelity: Optional[Fidelity] = None) -> Matrix:
    """Plan every (size, encoding, version) for ``soc`` with the probe's planner path.

    Args:
        soc: SoC name (``Ascend310P3``).
        versions: CANN versions (default :func:`default_versions`).
        sizes, encodings: the grid (defaults :data:`SIZES`, :data:`ENCODINGS`); sizes are ``(height, width)``
            in pixels.
        profile, fidelity: the stage list, as for ``dvpipe probe --camera`` (default bevformer-tiny, fast).
    """
    from ..target import Target
    from .report import DEFAULT_FIDELITY, DEFAULT_PROFILE, build_report, probe_camera

    versions = list(versions) if versions else default_versions(soc)
    if not versions:
        raise ConfigError("--matrix: no CANN version to probe")
    targets = [Target(soc, v) for v in versions]  # validates the SoC name and every version first
    sizes = list(dict.fromkeys((int(h), int(w)) for h, w in sizes))
    if not sizes:
        raise ConfigError("--matrix: no size to probe")
    profile = profile or DEFAULT_PROFILE
    fidelity = fidelity or DEFAULT_FIDELITY
    cams = [probe_camera(f"{enc}@{w}x{h}", w, h, enc) for enc in encodings for (h, w) in sizes]
    ops = _dvpp_stage_ops(cams[0], profile, fidelity) if cams else ()
    cells: dict = {}
    for t in targets:
        rep = build_report(cams, t, profile=profile, fidelity=fidelity)
        for cam, cr in zip(cams, rep.cameras):
            enc = cr.encoding
            cell = Cell(cr.width, cr.height, enc, t.cann, [s for s in cr.steps if s.status != "none"], cr.error,
                        ops, list(cr.notes))
            cells[(cr.height, cr.width, enc, t.cann)] = cell
    return Matrix(soc, targets[0].family, versions, list(sizes), list(encodings), cells, profile, fidelity,
                  _checked(targets[0].family, versions))


def _checked(family: str, versions: Sequence[str]) -> dict:
    """version -> whether some rule of the family was read from that version's pages (pre-release tags
    aside: 8.1.RC1.beta1 pages count for 8.1.RC1)."""
    from ..knowledge import CannVersion, documented_versions

    def base(v: CannVersion) -> tuple:
        return (v.major, v.minor, v.rc, v.patch)

    fam = {base(v) for v in documented_versions(family)}
    return {v: base(CannVersion.parse(v)) in fam for v in versions}


def _dvpp_stage_ops(cam: Any, profile: str, fidelity: Fidelity) -> tuple[str, ...]:
    """The ops of the profile's stages that some DVPP kernel covers, in stage order (decode, resize...)."""
    from ..backends import load_family
    from ..stages.kernel_registry import registered_ops
    from .report import stages_for

    load_family("dvpp")
    dvpp = {op for op, fams in registered_ops().items() if "dvpp" in fams} or {"decode", "crop", "resize"}
    out: list[str] = []
    for st in stages_for(cam, profile, None, fidelity):
        if st.op in dvpp and st.op not in out:
            out.append(st.op)
    return tuple(out)
