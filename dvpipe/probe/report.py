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
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from .. import planner  # planner.plan_pipeline looked up per call (tests stand in for it)
from .._typing import Fidelity
from ..backends import load_family, resolve
from ..codecs import RAW_YUV_ENCODINGS
from ..errors import ConfigError, DvpipeError
from ..knowledge import Confidence, combine_confidence, confidence_of, rule_confidence
from ..knowledge.socs import latest_checked
from ..planner import input_spec
from ..profiles import profile_stages
from ..stages.base import output_spec_of
from ..stages.image import Batch
from ..stages.kernel_registry import KernelQuery, kernels_at, registered_ops
from ..types import Camera, Rig, parse_wxh
from .keys import DECODER_BY_ENCODING, camera_encoding, step_key

if TYPE_CHECKING:  # names for the type checker only
    from ..stages.base import Stage
    from ..target import Target
    from .live import LiveCache

__all__ = [
    "ENCODINGS", "DEFAULT_PROFILE", "DEFAULT_FIDELITY", "PROBE_BACKENDS", "StepRow", "CameraReport",
    "ProbeReport", "parse_camera", "probe_camera", "camera_encoding", "build_report", "stages_for", "replay_dvpp",
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
    # raw camera frames (GMSL / V4L2): decode is a colour conversion (dvpipe.backends._raw_yuv)
    "nv12": ("nv12", {}),
    "uyvy": ("uyvy", {}),
    "yuyv": ("yuyv", {}),
}

#: the stage list probed when none is given: BEVFormer-tiny's preprocessing (decode, resize x0.5,
#: normalise, pad /32) in the ``fast`` order, where the resize directly follows the decode and can
#: therefore run on VPC. A deployment's own profile and fidelity are used as they are.
DEFAULT_PROFILE = "bevformer-tiny"
DEFAULT_FIDELITY: Fidelity = "fast"
#: the preference order the probe plans with: the software DVPP device first (always available, same
#: rules as the hardware path), then the CPU.
PROBE_BACKENDS = ("dvpp-sim", "cpu")

_UNIT_BY_OP = {"resize": "VPC", "crop": "VPC", "crop_resize": "VPC", "pad": "VPC", "csc": "VPC",
               "convert": "VPC", "make_border": "VPC"}
_CAMERA_RE = re.compile(r"^(?P<name>[^=\s]+)=(?P<size>\d+[xX]\d+)(?::(?P<enc>[A-Za-z0-9_-]+))?$")


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
    h, w = parse_wxh(m.group("size"), f"--camera {m.group('name')}")
    return probe_camera(m.group("name"), w, h, enc)


def probe_camera(name: str, width: int, height: int, encoding: str) -> Camera:
    """A camera with a probe encoding (``jpeg420``, ``png``, ``nv12``...; see :data:`ENCODINGS`)."""
    if encoding not in ENCODINGS:
        raise ConfigError(f"camera {name}: unknown encoding {encoding!r}; use one of {', '.join(ENCODINGS)}")
    if width <= 0 or height <= 0:
        raise ConfigError(f"camera {name}: width and height must be positive pixels, got {width}x{height}")
    cam_enc, extra = ENCODINGS[encoding]
    return Camera(name, width=width, height=height, encoding=cam_enc, extra=dict(extra))


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
    confidence: Optional[Confidence] = None  # of the DVPP verdict

    @property
    def confidence_level(self) -> Optional[str]:
        return None if self.confidence is None else self.confidence.level

    def to_dict(self) -> dict:
        c = self.confidence
        return {"stage": self.stage, "unit": self.unit, "backend": self.backend, "ok": self.ok,
                "reason": self.reason, "source": self.source, "detour": self.detour, "status": self.status,
                "rule": self.rule, "in": self.spec_in, "out": self.spec_out, "verdicts": list(self.verdicts),
                "empirical": self.empirical,
                "confidence": None if c is None else c.level,
                "confidence_note": None if c is None else c.note,
                "extrapolated_from": None if c is None or c.since is None else str(c.since),
                "cited_cann": [] if c is None else [str(v) for v in c.other_page_versions],
                "cited_pages": [] if c is None else c.to_dict()["pages"]}


@dataclass
class CameraReport:
    """The steps of one camera, or the error that kept it from being planned."""

    name: str
    width: int
    height: int
    encoding: str
    steps: list[StepRow] = field(default_factory=list)
    error: Optional[str] = None
    notes: list[str] = field(default_factory=list)
    #: ``(route, ok, why)`` for ``aipp``, ``torch_npu``, ``host`` (:func:`route_verdicts`)
    routes: list[tuple[str, bool, str]] = field(default_factory=list)

    @property
    def route(self) -> Optional[str]:
        """The first route that can take this camera, in the order aipp, torch_npu, host."""
        return next((r for r, ok, _why in self.routes if ok), None)

    @property
    def fallbacks(self) -> list[StepRow]:
        """Steps a DVPP unit implements that do not run on DVPP, for any reason (policy included)."""
        return [s for s in self.steps if not s.ok]

    def to_dict(self) -> dict:
        return {"name": self.name, "width": self.width, "height": self.height, "encoding": self.encoding,
                "steps": [s.to_dict() for s in self.steps], "error": self.error, "notes": list(self.notes),
                "route": self.route,
                "routes": [{"route": r, "ok": ok, "why": why} for r, ok, why in self.routes]}


@dataclass
class ProbeReport:
    """What the planner decides for each camera on one target. ``str(report)`` is the table."""

    soc: str
    cann: str
    family: str
    cameras: list[CameraReport]
    profile: Optional[str] = None
    fidelity: Fidelity = DEFAULT_FIDELITY
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
        # a step declined by dvpipe's fidelity policy is not a DVPP limit: it does not fail the gate
        out = [f"{cam}: {s.stage} falls back to {s.backend} ({s.status}): {s.reason}" for cam, s in self.fallbacks
               if s.status != "declined"]
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

def stages_for(cam: Camera, profile: Optional[str], stages: Optional[Sequence[Stage]], fidelity: Fidelity) -> list[Stage]:
    """The stage list planned for ``cam``: explicit ``stages``, else ``profile``'s (default bevformer-tiny)."""
    if stages is not None:
        return list(stages)
    return profile_stages(profile or DEFAULT_PROFILE, fidelity, cam)


def build_report(cameras: Iterable[Camera] | Rig, target: Target, *, profile: Optional[str] = None,
                 stages: Optional[Sequence[Stage]] = None, fidelity: Fidelity = DEFAULT_FIDELITY,
                 backends: Sequence[str] = PROBE_BACKENDS, empirical: Optional[LiveCache] = None) -> ProbeReport:
    """Plan every camera on ``target`` with ``backends`` and turn the plans into a :class:`ProbeReport`.

    Args:
        cameras: the cameras (a :class:`~dvpipe.Rig` works too).
        target: a :class:`dvpipe.Target`.
        profile: profile whose stages are planned (default :data:`DEFAULT_PROFILE` unless ``stages``).
        stages: an explicit stage list instead of a profile.
        fidelity: ``fast`` (default: resize before normalise, as an offloaded pipeline runs) or ``reference``.
        backends: the preference order; the DVPP backend in it is presented as ``dvpp``.
        empirical: a :class:`dvpipe.probe.live.LiveCache` whose entries are shown next to the documented
            verdicts and which the planner prefers on a device backend (``plan_pipeline(live=...)``), or None.

    Each camera is planned on its own (the probe does not need one batch size for all cameras); a
    camera that cannot be planned at all carries the planner's error instead of steps.
    """
    cams = list(cameras.cameras if isinstance(cameras, Rig) else cameras)
    reports = []
    for cam in cams:
        rep = CameraReport(cam.name, cam.width, cam.height, camera_encoding(cam))
        if cam.encoding == "raw" and (cam.extra or {}).get("pixel_format") not in (None, "bgr"):  # pragma: no cover
            rep.notes.append(f"the planner takes raw frames as BGR arrays (dvpipe.planner.input_spec); a "
                             f"{cam.extra['pixel_format']} camera input is not modelled yet, so these rows are for raw "
                             "BGR frames of this size")
        try:
            cam_stages = stages_for(cam, profile, stages, fidelity)
            plan = planner.plan_pipeline([cam], cam_stages, list(backends), fidelity=fidelity, target=target,
                                 live=empirical)  # the measurements shown are the ones planned with
        except DvpipeError as e:
            rep.error = str(e)
        else:
            steps = plan.cameras[0].steps
            declined, asked = replay_dvpp(cam, cam_stages, steps, backends, fidelity, target)
            rep.steps = [_row(step, cam, declined.get(k), empirical, target, asked.get(k))
                         for k, step in enumerate(steps)]
            for k, (step, row) in enumerate(zip(steps, rep.steps)):
                if row.status == "none":
                    continue
                if k in declined:  # the verdict of the DVPP run it would have been part of
                    first = steps.index(declined[k][2])
                    row.confidence = rep.steps[first].confidence
                else:
                    row.confidence = _confidence(step, cam, target, asked.get(k))
        if rep.error is None:
            rep.routes = route_verdicts(cam, cam_stages, target, fidelity)
        reports.append(rep)
    notes = []
    if stages is None:
        notes.append(f"stages: profile {profile or DEFAULT_PROFILE}, fidelity {fidelity}")
    newest = latest_checked()
    if target.cann > newest:
        notes.append(f"CANN {target.cann} is newer than the latest docs checked ({newest}): the verdicts assume "
                     f"the rules current at {newest} still hold -- confirm on the device (dvpipe probe --live)")
    return ProbeReport(soc=target.soc, cann=str(target.cann), family=getattr(target, "family", ""), cameras=reports,
                       profile=profile or (DEFAULT_PROFILE if stages is None else None), fidelity=fidelity,
                       backends=tuple(backends), driver=getattr(target, "driver", None), notes=notes)


#: the routes to the model input (docs/device_path.md) and the backend order each is planned with
ROUTES = (("aipp", ("dvpp-sim", "aipp-sim", "cpu")), ("torch_npu", ("dvpp-sim", "torch:npu", "cpu")),
          ("host", ("dvpp-sim", "cpu")))


def route_verdicts(cam: Camera, stages: Sequence[Stage], target: Target, fidelity: Fidelity) -> list[tuple[str, bool, str]]:
    """For each route (AIPP, torch_npu, host): whether it takes ``cam`` on ``target`` and why (the verdicts
    of the steps that decide it). Planned on the software DVPP device; on a device the same rules apply."""
    out = []
    for route, backends in ROUTES:
        if route == "torch_npu":
            out.append(_torch_npu_route(cam, stages, target, fidelity))
            continue
        try:
            plan = planner.plan_pipeline([cam], list(stages), list(backends), fidelity=fidelity, target=target)
        except DvpipeError as e:
            out.append((route, False, f"not planned: {e}"))
            continue
        cp = plan.cameras[0]
        first, last = cp.steps[0], cp.steps[-1]
        if route == "host":
            where = ", ".join(f"{s.name} on {s.backend.name}" for s in cp.steps)
            moved = next((f"; {s.transfer[1]} bytes device -> host a frame" for s in cp.steps if s.transfer), "")
            out.append((route, True, f"{where}{moved}"))
            continue
        if cp.route == route:
            out.append((route, True, last.chosen.reason or f"{last.name} on {last.backend.name}"))
            continue
        if first.backend.family != "dvpp":
            v = dict(first.verdicts).get("dvpp-sim")
            out.append((route, False, f"DVPP does not decode this camera ({v.status}: {v.reason})" if v else
                        f"{first.name} runs on {first.backend.name}"))
            continue
        name = backends[1]
        v = next((v for s in cp.steps for b, v in s.verdicts if b == name), None)
        out.append((route, False, f"{name} {v.status}: {v.reason}" if v else f"{name} takes no step here"))
    return out


def _torch_npu_route(cam: Camera, stages: Sequence[Any], target: Any, fidelity: Fidelity) -> tuple[str, bool, str]:
    """The torch_npu route as it would plan on the target's device with torch_npu installed (whether torch_npu
    imports on this machine says nothing about the target): planned with torch:npu standing in as available."""
    try:
        plan = planner.plan_pipeline([cam], list(stages), ["dvpp-sim", "torch:npu", "cpu"], fidelity=fidelity, target=target,
                             assume_available=("torch:npu",))
    except DvpipeError as e:
        return ("torch_npu", False, f"not planned: {e}")
    cp = plan.cameras[0]
    if cp.route == "torch_npu":
        first = cp.steps[0]
        return ("torch_npu", True, f"{first.name} on DVPP hands NV12 on; one device-to-device copy into a torch_npu "
                                   f"tensor, then {cp.steps[-1].name} as torch ops on the NPU (needs torch_npu on "
                                   "the device)")
    first = cp.steps[0]
    if first.backend.family != "dvpp":
        v = dict(first.verdicts).get("dvpp-sim")
        return ("torch_npu", False, f"DVPP does not decode this camera ({v.status}: {v.reason})" if v else
                f"{first.name} runs on {first.backend.name}")
    v = next((v for s in cp.steps for b, v in s.verdicts if b == "torch:npu" and not v.ok), None)
    return ("torch_npu", False, f"torch:npu {v.status}: {v.reason}" if v else "torch:npu takes no step here")


def _shown(name: str) -> str:
    return "dvpp" if name in ("dvpp", "dvpp-sim") else name


def _dvpp_unit(ops: Sequence[str], cam: Camera) -> str:
    units = []
    for op in ops:
        u = DECODER_BY_ENCODING.get(cam.encoding) if op == "decode" else _UNIT_BY_OP.get(op)
        if u and u not in units:
            units.append(u)
    return "+".join(units) or "DVPP"


def _unit_from_rule(rule: Optional[str]) -> Optional[str]:
    if not rule:
        return None
    head = rule.split(".", 1)[0].lower()
    return head.upper() if head in ("jpegd", "vpc", "vdec", "pngd") else None


def _dvpp_loaded() -> bool:
    return load_family("dvpp") is None


def _dvpp_ops() -> list[str]:
    return [op for op, fams in registered_ops().items() if "dvpp" in fams and op != "transfer"]


def replay_dvpp(cam: Camera, stages: Sequence[Any], steps: Sequence[Any], backends: Sequence[str], fidelity: Fidelity,
                 target: Any) -> tuple[dict, dict]:
    """``(declined, asked)`` for a camera's planned steps.

    ``declined``: ``{step index: (run ops, verdict, first step)}`` for planned steps that a longer DVPP run
    starting at an *earlier* step would have covered (e.g. the resize of ``decode+resize`` when the DVPP
    decode-resize was declined). ``asked``: ``{step index: stages}`` for steps on DVPP: the stages the planner
    asked the kernel about, before a detour replaced them (the key of the ``--live`` results).

    The planner keeps, per step, only the verdicts of kernels starting at that step; the DVPP kernels start
    with the decode, so the reason a later resize is not on DVPP is the verdict of the DVPP run that would
    have included it. This asks the DVPP kernels again, exactly as the planner did (same ``supports``).
    """
    dvpp = next((resolve(b) for b in backends if resolve(b).family == "dvpp"), None)
    if dvpp is None or not _dvpp_loaded():
        return {}, {}
    stages = list(stages)
    if not stages or stages[-1].op != "batch":
        stages.append(Batch())
    specs, spec = [], input_spec(cam)
    for st in stages:
        spec = output_spec_of(st, spec, cam)
        specs.append(spec)
    out: dict = {}
    asked: dict = {}
    pos, run, run_step = 0, None, 0  # run: (start position, {length: (ops, verdict)}) where DVPP kernels start
    user_ops = {st.op for st in stages}
    for k, step in enumerate(steps):
        if pos >= len(stages):
            break
        if step.stages and step.stages[0].op not in user_ops:
            continue  # a step the planner inserted (a transfer between memory domains): none of the user's stages
        kernels = kernels_at([s.op for s in stages[pos:]], "dvpp")
        covered = len(step.stages)
        if kernels:
            tried: dict = {}
            spec_in = input_spec(cam) if pos == 0 else specs[pos - 1]
            for kern in kernels:  # longest first, as the planner asks them
                n = len(kern.ops)
                v = kern.check(KernelQuery(tuple(stages[pos:pos + n]), spec_in, tuple(specs[pos:pos + n]), cam, dvpp,
                                           fidelity, target))
                tried[n] = (tuple(kern.ops), v)
                if v.ok:
                    break
            run = (pos, tried)
            if step.backend.family == "dvpp":
                covered = next((n for n, (_o, v) in tried.items() if v.ok), covered)
                asked[k] = tuple(stages[pos:pos + covered])
            run_step = k
        elif run is not None:
            start, tried = run
            longer = [n for n in tried if start + n > pos and not tried[n][1].ok]
            if longer:
                out[k] = (*tried[min(longer)], steps[run_step])
        pos += covered
    return out, asked


def _row(step: Any, cam: Camera, declined: Optional[tuple], empirical: Any, target: Any,
         asked: Optional[tuple] = None) -> StepRow:
    ops = [s.op for s in step.stages]
    verdicts = [{"backend": _shown(b), **v.to_dict()} for b, v in step.verdicts]
    runs_on = _shown(step.backend.name)
    base: dict[str, Any] = dict(spec_in=str(step.spec_in), spec_out=str(step.spec_out), verdicts=verdicts)
    dv = next((v for b, v in step.verdicts if resolve(b).family == "dvpp"), None)
    if dv is None and declined is None:  # DVPP was not asked (not in the preference order)
        return StepRow(step.name, step.kernel.unit, runs_on, True, "", status="none", **base)
    if declined is not None:
        run_ops, v, first = declined
        unit = _dvpp_unit([o for o in ops if o != "decode"][:1] or ops, cam)
        said = next((fv.reason for b, fv in first.verdicts if resolve(b).family == "dvpp"), None)
        why = f"see {first.name} above" if said == v.reason else v.reason
        reason = f"{unit} {ops[0]}: DVPP runs it only fused with the decode ({'+'.join(run_ops)}), declined: {why}"
        return StepRow(step.name, unit, runs_on, False, reason, v.source, v.detour, v.status, v.rule, **base)
    has_kernel = _dvpp_has_kernel(ops)
    if not has_kernel:
        dvpp_ops = _dvpp_ops()
        what = f" (it runs {', '.join(dvpp_ops)})" if dvpp_ops else ""
        reason = f"dvpipe's DVPP backend has no kernel for {step.name}{what}; runs on {runs_on}"
        return StepRow(step.name, step.kernel.unit, runs_on, True, reason, status="none", **base)
    assert dv is not None  # the two returns above cover dv is None
    unit = (_unit_from_rule(dv.rule) if step.backend.family != "dvpp" else None) or _dvpp_unit(ops, cam)
    reason = dv.reason or (f"{unit} {step.name} on {target.soc} (CANN {target.cann}): accepted" if dv.ok else dv.status)
    row = StepRow(step.name, unit, runs_on, dv.ok, reason, dv.source, dv.detour, dv.status, dv.rule, **base)
    if empirical is not None and step.backend.family == "dvpp":
        row.empirical = empirical.get(target, _live_key(cam, asked or step.stages, step))
    return row


_PROGRAM_OPS = ("decode", "crop", "resize")


def _confidence(step: Any, cam: Camera, target: Any, asked: Optional[tuple]) -> Any:
    """How sure the DVPP verdict of a step is (:class:`dvpipe.knowledge.Confidence`), or None when no
    documented rule decided it (e.g. a stage dvpipe's DVPP backend does not implement).

    ``unknown`` when the docs leave it open; for a rejection, the violated rule's; for a step DVPP runs
    (or would run, when only dvpipe's policy declined it), the weakest of the knowledge verdicts behind
    the program it runs at fidelity ``fast``: the decoder call, each VPC call, the colour conversion.
    """
    dv = next((v for b, v in step.verdicts if resolve(b).family == "dvpp"), None)
    if dv is None:
        return None
    fam, cann = target.family, target.cann
    ids = [r for r in (dv.rule or "").split("; ") if r and r not in ("dvpp.fidelity", "live")]
    if dv.status == "unknown":
        pages = tuple(p for r in ids for p in rule_confidence(r, fam, cann).pages)
        return Confidence("unknown", cann, None, pages)
    if dv.status == "rejected" and cam.encoding in RAW_YUV_ENCODINGS:  # dvpipe has no raw upload: the VPC verdict
        from ..backends.dvpp.support import kcheck

        return confidence_of(kcheck(target, "vpc", "csc", cam.width, cam.height, cam.encoding, out_fmt="bgr888"))
    if dv.status in ("rejected", "unavailable"):
        if not ids:
            return None
        return combine_confidence([rule_confidence(r, fam, cann) for r in ids], cann, weakest=False)
    kvs = _program_checks(asked if asked is not None else step.stages, step.spec_in, cam, target)
    if not kvs:
        return combine_confidence([rule_confidence(r, fam, cann) for r in ids], cann) if ids else None
    return combine_confidence([confidence_of(kv) for kv in kvs], cann)


def _program_checks(stages: Sequence[Any], spec_in: Any, cam: Camera, target: Any) -> list:
    """The knowledge verdicts behind the DVPP program for ``stages`` at fidelity ``fast`` (the same cached
    :func:`~dvpipe.backends.dvpp.support.kcheck` calls :func:`~dvpipe.backends.dvpp.support.plan_step`
    made), or [] when DVPP would not run them."""
    from ..backends.dvpp import support

    run = []
    for st in stages:
        if st.op not in _PROGRAM_OPS:
            break
        run.append(st)
    if not run or run[0].op != "decode":
        return []
    try:
        _v, prog = support.plan_step(run, spec_in, cam, target, "fast")
    except (ValueError, DvpipeError):
        return []
    if prog is None:
        return []
    (h, w), kvs = prog.in_size, []
    if prog.source == "jpegd":
        kvs.append(support.kcheck(target, "jpegd", "decode", w, h, support._bitstream(cam), out_fmt="nv12"))
    else:
        kvs.append(support.kcheck(target, "vdec", "decode", w, h, cam.encoding, out_fmt="nv12"))
    cur = prog.decode_size
    for op in prog.ops:
        if op.kind == "csc":
            kvs.append(support.kcheck(target, "vpc", "csc", cur[1], cur[0], "nv12", out_fmt=op.out_fmt))
            continue
        extras: dict = dict(out_width=op.out_size[1], out_height=op.out_size[0], out_fmt="nv12")
        if op.crop is not None:
            extras["crop"] = op.crop
        kvs.append(support.kcheck(target, "vpc", op.kind, cur[1], cur[0], "nv12", **extras))
        cur = op.out_size
    return kvs


def _live_key(cam: Camera, asked: Sequence[Any], step: Any) -> str:
    return step_key(cam, asked, step.spec_in, step.kernel.name)


def _dvpp_has_kernel(ops: Sequence[str]) -> bool:
    if not _dvpp_loaded():
        # the DVPP family cannot even be imported: judge by the ops DVPP units implement
        return ops[0] in ("decode", "resize", "crop")
    return bool(kernels_at(list(ops), "dvpp"))


# ------------------------------------------------------------------------------------------- rendering

_COLOURS = {"ok": "32", "detour": "33", "unknown": "33", "rejected": "31", "unavailable": "31", "none": "2",
            "declined": "36"}


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
        first, *rest = rep.notes
        lines.append("  " + first + f"; planned on {' > '.join(_shown(b) for b in rep.backends)}")
        lines.extend(_paint("  note: " + n, "33", colour) for n in rest)
    groups: dict[tuple, list[CameraReport]] = {}
    for c in rep.cameras:
        key = (c.width, c.height, c.encoding, c.error, tuple(c.notes),
               tuple((s.stage, s.unit, s.backend, s.ok, s.reason, s.source, s.detour, s.status) for s in c.steps))
        groups.setdefault(key, []).append(c)
    for cams in groups.values():
        c = cams[0]
        names = ", ".join(x.name for x in cams)
        lines.append("")
        lines.append(_paint(f"{names}: {c.width}x{c.height} {c.encoding}", "1", colour))
        lines.extend("  note: " + n for n in c.notes)
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
            reason, _sep, runs_as = s.reason.partition("; runs as: ")
            lines.append(("  " + "  ".join(cells + [verdict]) + "  " + reason).rstrip())
            pad = "  " + " " * (sum(widths) + 2 * 4)
            if runs_as:
                lines.append(pad + "runs as: " + runs_as)
            if s.detour:
                lines.append(pad + "detour: " + s.detour)
            if s.empirical:
                lines.append(pad + "live: " + _live_words(s.empirical))
            if s.confidence is not None:
                lines.append(pad + "confidence: " + s.confidence.note)
            if sources and s.source and s.status != "none":
                lines.append(pad + _paint("source: " + s.source, "2", colour))
        if c.routes:
            lines.append("  " + _paint(f"route: {c.route}", "1", colour) + " (first that takes it of aipp, torch_npu, "
                         "host; docs/device_path.md)")
            for route, ok, why in c.routes:
                lines.append(f"    {route:<9}  {'ok' if ok else 'no':<2}  {why}")
    fb = [(cam, s) for cam, s in rep.fallbacks if s.status != "declined"]
    policy = [(cam, s) for cam, s in rep.fallbacks if s.status == "declined"]
    lines.append("")
    if policy:
        lines.append(_paint(f"{len(policy)} step(s) declined by the fidelity policy, not by the hardware "
                            f"(fidelity {rep.fidelity}; --fidelity fast runs them on DVPP where the rules allow): ",
                            "36", colour) + ", ".join(f"{cam} {s.stage} -> {s.backend}" for cam, s in policy))
    if rep.errors:
        lines.append(_paint(f"{len(rep.errors)} camera(s) could not be planned: ", "31", colour)
                     + ", ".join(cam for cam, _e in rep.errors))
    if fb:
        lines.append(_paint(f"{len(fb)} step(s) that DVPP implements fall back:", "33", colour) + " "
                     + ", ".join(f"{cam} {s.stage} -> {s.backend}" for cam, s in fb))
    elif not rep.errors and not policy:
        lines.append(_paint("every step that DVPP implements runs on DVPP", "32", colour))
    return "\n".join(lines)


def _live_words(e: Mapping[str, Any]) -> str:
    what = "ok" if e.get("ok") else f"failed: {e.get('error')}"
    return f"{what} (measured {e.get('measured', '?')} on driver {e.get('driver') or '?'})"
