"""The ``dvpipe probe`` report: per camera and step, which backend runs it on a DVPP target and why.

The report is built from the planner's own :class:`~dvpipe.planner.Plan` (same code path as a real
run): every camera is planned with the backends ``("dvpp-sim", "cpu")`` against the target, and the
DVPP verdict of each step is presented as backend ``dvpp``. The software DVPP device applies the
same documented rules as the hardware path, so what the probe says is what ``Pipeline(...,
backends=("dvpp", "cpu"), target=...)`` will plan on the device.

JSON schema (stable; keys may be added, never changed)::

    {"target": {"soc": "Ascend310", "cann": "6.0.1", "family": "ascend310", ...},
     "cameras": [{"name": "CAM2", "width": 1242, "height": 375, "encoding": "png",
                  "steps": [{"stage": "decode", "unit": "PNGD", "backend": "cpu", "ok": false,
                             "reason": "...", "source": "https://...", "detour": null,
                             "status": "unknown", ...}]}]}

Per step:

* ``stage``: the step as planned (``decode``, ``resize``; ``crop+resize`` when a detour added a crop);
* ``unit``: the DVPP unit that was asked (``JPEGD``, ``PNGD``, ``VDEC``, ``VPC``), or the unit of the
  kernel that runs the step when no DVPP unit implements it (``cpu`` for normalise, pad, batch);
* ``backend``: where the step runs (``dvpp``, or the fallback, e.g. ``cpu``);
* ``ok``: false exactly when a DVPP unit implements this kind of step but does not run it here (the
  documented rules reject it, or leave it open); ``--require dvpp`` fails on those steps;
* ``reason``: the DVPP verdict in plain words, prefixed with unit, operation, SoC and CANN version;
* ``source``: the documentation URL of the rule that decided (null when none);
* ``detour``: the legal workaround DVPP takes (or null), with its effect on the picture;
* added keys: ``status`` (``ok``, ``rejected``, ``unknown``, ``unavailable``, or ``none`` when no DVPP
  unit implements the step), ``rule`` (rule id), ``in``/``out`` (frame specs), ``verdicts`` (every
  backend asked, in order), ``empirical`` (the ``--live`` result cached for this step, or null).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from ..errors import ConfigError, DvpipeError
from ..types import Camera, Rig

__all__ = [
    "ENCODINGS", "DEFAULT_PROFILE", "DEFAULT_FIDELITY", "PROBE_BACKENDS", "StepRow", "CameraReport",
    "ProbeReport", "parse_camera", "probe_camera", "camera_encoding", "build_report", "stages_for",
]

#: probe encoding -> (Camera.encoding, extra keys on the Camera). ``jpeg`` alone means "subsampling
#: not stated"; the DVPP rules then judge the JPEG without knowing its subsampling.
ENCODINGS: dict[str, tuple[str, dict]] = {
    "jpeg": ("jpeg", {}),
    "jpeg420": ("jpeg", {"bitstream": "jpeg420"}),
    "jpeg422": ("jpeg", {"bitstream": "jpeg422"}),
    "jpeg444": ("jpeg", {"bitstream": "jpeg444"}),
    "jpeg440": ("jpeg", {"bitstream": "jpeg440"}),
    "jpeg400": ("jpeg", {"bitstream": "jpeg400"}),
    "jpeg-progressive": ("jpeg", {"bitstream": "jpeg-progressive"}),
    "png": ("png", {}),
    "h264": ("h264", {}),
    "h265": ("h265", {}),
    "nv12": ("raw", {"pixel_format": "nv12"}),
}

#: the stage list probed when none is given: BEVFormer-tiny's preprocessing (decode, resize x0.5,
#: normalise, pad /32) in the ``fast`` order, where the resize directly follows the decode and can
#: therefore run on VPC. A deployment's own profile and fidelity are used as they are.
DEFAULT_PROFILE = "bevformer-tiny"
DEFAULT_FIDELITY = "fast"
#: the preference order the probe plans with: the software DVPP device first (always available, same
#: rules as the hardware path), then the CPU.
PROBE_BACKENDS = ("dvpp-sim", "cpu")

_UNIT_BY_OP = {"resize": "VPC", "crop": "VPC", "crop_resize": "VPC", "pad": "VPC", "csc": "VPC",
               "convert": "VPC", "make_border": "VPC"}
_DECODER_BY_ENCODING = {"jpeg": "JPEGD", "png": "PNGD", "h264": "VDEC", "h265": "VDEC"}
_CAMERA_RE = re.compile(r"^(?P<name>[^=\s]+)=(?P<w>\d+)[xX](?P<h>\d+)(?::(?P<enc>[A-Za-z0-9_-]+))?$")


def parse_camera(text: str) -> Camera:
    """``NAME=WIDTHxHEIGHT:ENCODING`` (e.g. ``CAM2=1242x375:png``) as a :class:`~dvpipe.Camera`.

    The encoding defaults to ``jpeg`` (subsampling not stated). Raises ``ConfigError`` with the
    accepted forms.
    """
    m = _CAMERA_RE.match(str(text).strip())
    if not m:
        raise ConfigError(f"--camera {text!r}: expected NAME=WIDTHxHEIGHT:ENCODING, e.g. CAM2=1242x375:png "
                          f"(encodings: {', '.join(ENCODINGS)})")
    enc = (m.group("enc") or "jpeg").lower().replace("_", "-")
    return probe_camera(m.group("name"), int(m.group("w")), int(m.group("h")), enc)


def probe_camera(name: str, width: int, height: int, encoding: str) -> Camera:
    """A camera with a probe encoding (``jpeg420``, ``png``, ``nv12``...; see :data:`ENCODINGS`)."""
    if encoding not in ENCODINGS:
        raise ConfigError(f"camera {name}: unknown encoding {encoding!r}; use one of {', '.join(ENCODINGS)}")
    if width <= 0 or height <= 0:
        raise ConfigError(f"camera {name}: width and height must be positive pixels, got {width}x{height}")
    cam_enc, extra = ENCODINGS[encoding]
    return Camera(name, width, height, cam_enc, extra=dict(extra))


def camera_encoding(cam: Camera) -> str:
    """The probe encoding of a camera (``jpeg420`` when its bitstream is known, else its encoding)."""
    extra = cam.extra or {}
    if cam.encoding == "raw" and extra.get("pixel_format"):
        return str(extra["pixel_format"])
    return str(extra.get("bitstream") or cam.encoding)


# ------------------------------------------------------------------------------------------- rows

@dataclass
class StepRow:
    """One planned step of one camera (see the module docstring for the meaning of each field)."""

    stage: str
    unit: str
    backend: str
    ok: bool
    reason: str
    source: Optional[str] = None
    detour: Optional[str] = None
    status: str = "ok"
    rule: Optional[str] = None
    spec_in: str = ""
    spec_out: str = ""
    verdicts: list = field(default_factory=list)
    empirical: Optional[dict] = None

    def to_dict(self) -> dict:
        return {"stage": self.stage, "unit": self.unit, "backend": self.backend, "ok": self.ok,
                "reason": self.reason, "source": self.source, "detour": self.detour, "status": self.status,
                "rule": self.rule, "in": self.spec_in, "out": self.spec_out, "verdicts": list(self.verdicts),
                "empirical": self.empirical}


@dataclass
class CameraReport:
    """The steps of one camera, or the error that kept it from being planned."""

    name: str
    width: int
    height: int
    encoding: str
    steps: list[StepRow] = field(default_factory=list)
    error: Optional[str] = None

    @property
    def fallbacks(self) -> list[StepRow]:
        return [s for s in self.steps if not s.ok]

    def to_dict(self) -> dict:
        return {"name": self.name, "width": self.width, "height": self.height, "encoding": self.encoding,
                "steps": [s.to_dict() for s in self.steps], "error": self.error}


@dataclass
class ProbeReport:
    """What the planner decides for each camera on one target. ``str(report)`` is the table."""

    soc: str
    cann: str
    family: str
    cameras: list[CameraReport]
    profile: Optional[str] = None
    fidelity: str = DEFAULT_FIDELITY
    backends: tuple[str, ...] = PROBE_BACKENDS
    driver: Optional[str] = None
    notes: list[str] = field(default_factory=list)

    @property
    def fallbacks(self) -> list[tuple[str, StepRow]]:
        """``(camera, step)`` for every step a DVPP unit implements but does not run here."""
        return [(c.name, s) for c in self.cameras for s in c.fallbacks]

    @property
    def errors(self) -> list[tuple[str, str]]:
        return [(c.name, c.error) for c in self.cameras if c.error]

    def require(self, what: str = "dvpp") -> list[str]:
        """Why the report fails ``--require dvpp`` (empty when it passes)."""
        if what != "dvpp":
            raise ConfigError(f"--require: only 'dvpp' is supported, got {what!r}")
        out = [f"{cam}: {s.stage} falls back to {s.backend} ({s.status}): {s.reason}" for cam, s in self.fallbacks]
        out += [f"{cam}: not planned: {err}" for cam, err in self.errors]
        return out

    def to_dict(self) -> dict:
        return {
            "target": {"soc": self.soc, "cann": self.cann, "family": self.family, "driver": self.driver},
            "profile": self.profile, "fidelity": self.fidelity, "backends": list(self.backends),
            "cameras": [c.to_dict() for c in self.cameras],
            "notes": list(self.notes),
        }

    def render(self, colour: bool = False, sources: bool = True) -> str:
        """The human table: one block per camera, one row per step, reasons and detours in full.

        Cameras whose rows are identical (same size, encoding and verdicts) are grouped.
        """
        return _render(self, colour, sources)

    def __str__(self) -> str:
        return self.render()


# ------------------------------------------------------------------------------------------- building

def stages_for(cam: Camera, profile: Optional[str], stages: Optional[Sequence[Any]], fidelity: str) -> list:
    """The stage list planned for ``cam``: explicit ``stages``, else ``profile``'s (default bevformer-tiny)."""
    if stages is not None:
        return list(stages)
    from ..profiles import profile_stages

    return profile_stages(profile or DEFAULT_PROFILE, fidelity, cam)


def build_report(cameras: Iterable[Camera] | Rig, target: Any, *, profile: Optional[str] = None,
                 stages: Optional[Sequence[Any]] = None, fidelity: str = DEFAULT_FIDELITY,
                 backends: Sequence[str] = PROBE_BACKENDS, empirical: Any = None) -> ProbeReport:
    """Plan every camera on ``target`` with ``backends`` and turn the plans into a :class:`ProbeReport`.

    Args:
        cameras: the cameras (a :class:`~dvpipe.Rig` works too).
        target: a :class:`dvpipe.Target`.
        profile: profile whose stages are planned (default :data:`DEFAULT_PROFILE` unless ``stages``).
        stages: an explicit stage list instead of a profile.
        fidelity: ``fast`` (default: resize before normalise, as an offloaded pipeline runs) or ``reference``.
        backends: the preference order; the DVPP backend in it is presented as ``dvpp``.
        empirical: a :class:`dvpipe.probe.live.LiveCache` whose entries are shown next to the documented
            verdicts, or None.

    Each camera is planned on its own (the probe does not need one batch size for all cameras);
    a camera that cannot be planned at all carries the planner's error instead of steps.
    """
    from ..planner import plan_pipeline

    cams = list(cameras.cameras if isinstance(cameras, Rig) else cameras)
    reports = []
    for cam in cams:
        rep = CameraReport(cam.name, cam.width, cam.height, camera_encoding(cam))
        try:
            plan = plan_pipeline([cam], stages_for(cam, profile, stages, fidelity), list(backends),
                                 fidelity=fidelity, target=target)
        except DvpipeError as e:
            rep.error = str(e)
        else:
            rep.steps = [_row(step, cam, empirical, target) for step in plan.cameras[0].steps]
        reports.append(rep)
    notes = []
    if stages is None:
        notes.append(f"stages: profile {profile or DEFAULT_PROFILE}, fidelity {fidelity}")
    return ProbeReport(soc=target.soc, cann=str(target.cann), family=getattr(target, "family", ""), cameras=reports,
                       profile=profile or (DEFAULT_PROFILE if stages is None else None), fidelity=fidelity,
                       backends=tuple(backends), driver=getattr(target, "driver", None), notes=notes)


def _shown(name: str) -> str:
    return "dvpp" if name in ("dvpp", "dvpp-sim") else name


def _dvpp_unit(ops: Sequence[str], cam: Camera) -> str:
    units = []
    for op in ops:
        if op == "decode":
            u = _DECODER_BY_ENCODING.get(cam.encoding)
        else:
            u = _UNIT_BY_OP.get(op)
        if u and u not in units:
            units.append(u)
    return "+".join(units) or "DVPP"


def _unit_from_rule(rule: Optional[str]) -> Optional[str]:
    if not rule:
        return None
    head = rule.split(".", 1)[0].lower()
    return head.upper() if head in ("jpegd", "vpc", "vdec", "pngd") else None


def _dvpp_has_kernel(ops: Sequence[str]) -> bool:
    from ..backends import load_family
    from ..stages.registry import kernels_at

    if load_family("dvpp"):
        # the DVPP family cannot even be imported: judge by the ops DVPP units implement
        return ops[0] in ("decode", "resize", "crop")
    return bool(kernels_at(list(ops), "dvpp"))


def _row(step: Any, cam: Camera, empirical: Any, target: Any) -> StepRow:
    from ..backends import resolve

    ops = [s.op for s in step.stages]
    dv = next(((b, v) for b, v in step.verdicts if resolve(b).family == "dvpp"), None)
    verdicts = [{"backend": _shown(b), **v.to_dict()} for b, v in step.verdicts]
    runs_on = _shown(step.backend.name)
    if dv is None:
        # DVPP was not asked (not in the preference order)
        return StepRow(step.name, step.kernel.unit, runs_on, True, "", status="none", spec_in=str(step.spec_in),
                       spec_out=str(step.spec_out), verdicts=verdicts)
    _b, v = dv
    has_kernel = _dvpp_has_kernel(ops)
    if not has_kernel:
        reason = f"no DVPP unit runs {step.name}; it runs on {runs_on}"
        return StepRow(step.name, step.kernel.unit, runs_on, True, reason, status="none",
                       spec_in=str(step.spec_in), spec_out=str(step.spec_out), verdicts=verdicts)
    unit = _unit_from_rule(v.rule) if step.backend.family != "dvpp" else None
    unit = unit or _dvpp_unit(ops, cam)
    reason = v.reason or (f"{unit} {step.name} on {target.soc} (CANN {target.cann}): accepted by the documented rules"
                          if v.ok else v.status)
    row = StepRow(step.name, unit, runs_on, v.ok, reason, v.source, v.detour, v.status, v.rule,
                  str(step.spec_in), str(step.spec_out), verdicts)
    if empirical is not None:
        row.empirical = empirical.lookup_step(target, cam, step)
    return row


# ------------------------------------------------------------------------------------------- rendering

_COLOURS = {"ok": "32", "detour": "33", "unknown": "33", "rejected": "31", "unavailable": "31", "none": "2"}


def _paint(text: str, code: Optional[str], colour: bool) -> str:
    if not colour or not code:
        return text
    return f"\x1b[{code}m{text}\x1b[0m"


def _verdict_word(s: StepRow) -> str:
    if s.status == "none":
        return "-"
    if s.ok and s.detour:
        return "detour"
    return s.status


def _render(rep: ProbeReport, colour: bool, sources: bool) -> str:
    head = f"DVPP probe: {rep.soc} (CANN {rep.cann})"
    if rep.family:
        head += f", family {rep.family}"
    if rep.driver:
        head += f", driver {rep.driver}"
    lines = [_paint(head, "1", colour)]
    if rep.notes:
        lines.append("  " + "; ".join(rep.notes) + f"; planned on {' > '.join(_shown(b) for b in rep.backends)}")
    groups: dict[tuple, list[CameraReport]] = {}
    for c in rep.cameras:
        key = (c.width, c.height, c.encoding, c.error,
               tuple((s.stage, s.unit, s.backend, s.ok, s.reason, s.source, s.detour, s.status) for s in c.steps))
        groups.setdefault(key, []).append(c)
    for cams in groups.values():
        c = cams[0]
        names = ", ".join(x.name for x in cams)
        lines.append("")
        lines.append(_paint(f"{names}: {c.width}x{c.height} {c.encoding}", "1", colour))
        if c.error:
            lines.append("  " + _paint("not planned: ", "31", colour) + c.error)
            continue
        table = [("stage", "unit", "backend", "verdict")] + [(s.stage, s.unit, s.backend, _verdict_word(s))
                                                            for s in c.steps]
        widths = [max(len(r[i]) for r in table) for i in range(4)]
        lines.append("  " + "  ".join(table[0][i].ljust(widths[i]) for i in range(4)) + "  reason")
        for s, r in zip(c.steps, table[1:]):
            word = r[3]
            cells = [r[i].ljust(widths[i]) for i in range(3)]
            verdict = _paint(word.ljust(widths[3]), _COLOURS.get("detour" if word == "detour" else s.status), colour)
            lines.append(("  " + "  ".join(cells + [verdict]) + "  " + s.reason).rstrip())
            pad = "  " + " " * (sum(widths) + 2 * 4)
            if s.detour:
                lines.append(pad + "detour: " + s.detour)
            if s.empirical:
                lines.append(pad + "live: " + _live_words(s.empirical))
            if sources and s.source and s.status != "none":
                lines.append(pad + _paint("source: " + s.source, "2", colour))
    fb = rep.fallbacks
    lines.append("")
    if fb:
        lines.append(_paint(f"{len(fb)} step(s) that DVPP implements fall back:", "33", colour) + " "
                     + ", ".join(f"{cam} {s.stage} -> {s.backend}" for cam, s in fb))
    else:
        lines.append(_paint("every step that DVPP implements runs on DVPP", "32", colour))
    return "\n".join(lines)


def _live_words(e: Mapping[str, Any]) -> str:
    what = "ok" if e.get("ok") else f"failed: {e.get('error')}"
    return f"{what} (measured {e.get('measured', '?')} on driver {e.get('driver') or '?'})"
