"""What the DVPP backend can run, decided from the knowledge base: the ``supports`` functions.

For a run of stages starting with ``decode`` (``decode``, ``decode+resize``, ``decode+crop+resize``...),
:func:`plan_step` maps each stage to a DVPP unit call on the target and asks
:func:`dvpipe.knowledge.check` about it (always for the acldvpp v1 API, which is the one this backend
calls through pyACL ``acl.media``):

* ``decode`` -> JPEGD (JPEG), VDEC (H.264/H.265) or PNGD (PNG; judged, never run: acldvpp PNGD support
  per product is an open question and the hi_mpi PNG API is not implemented here);
* ``crop`` before a ``resize`` -> the crop box of a VPC crop-resize; ``resize`` -> VPC resize;
  a ``crop`` after the last resize -> a slice of the host copy;
* raw camera frames (``uyvy``, ``yuyv``, ``nv12`` encodings): VPC documents YUV422 packed and YUV420SP
  input and the knowledge base judges the conversion to BGR888, but no DVPP kernel here uploads raw frames
  (every step starts at JPEGD/VDEC), so they are declined with that verdict and run on the next backend;
* the colour conversion NV12 -> BGR: ``acldvppVpcConvertColorAsync`` after the last VPC call where the
  documentation allows NV12 -> BGR888 there (the documented route, CANN aclcppdevg_03_0349; Ascend310P),
  else on the host. A resize never writes BGR888 itself (that rested on a MindX page only).

Unknowns: what the documentation leaves open is declined (``unknown``), unless ``accept_unknown`` is set:
then it is planned as if allowed. That is how a step is verified on a device (:mod:`dvpipe.probe.live`)
and how a measured success is run afterwards.

Where a rule forbids a call, :func:`dvpipe.knowledge.propose` gives the legal detour (align-crop, even
output size, legal crop box, resize in several hops); the stages the step really runs are returned in
the verdict's ``replace`` and the planner substitutes them, so the geometry (and ``lidar2img``) follows.
A documented silent effect (JPEGD floors an odd height to even) is made explicit the same way, as a
``Crop``. What the documentation forbids without a detour, or leaves open, is declined with the rule,
its source and the reason, and the planner routes the step to the next backend.

Fidelity: a DVPP path cannot match the float reference within float rounding (4:2:0 chroma, uint8
resize), so at fidelity ``reference`` every DVPP step is declined -- status ``declined`` (dvpipe's policy),
never ``rejected`` (a documented hardware limit) -- saying what it would do at ``fast``;
at ``fast`` the outputs stay within the tolerance table of docs/dvpp.md.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..._typing import Fidelity
from ...codecs import RAW_YUV_ENCODINGS, VIDEO_ENCODINGS
from ...errors import DvpipeError
from ...knowledge import jpegd_odd_size_question, register_cache as _register_cache
from ...stages.image import Crop, Decode, Resize
from ...stages.kernel_registry import KernelQuery, KernelVerdict
from ...types import PixelFormat

__all__ = ["DvppDecode", "VpcOp", "Program", "plan_step", "supports", "StepRefused", "TOLERANCES", "TOLERANCE_WHY",
           "accepting_unknown", "accepts_unknown"]


class StepRefused(DvpipeError, ValueError):
    """A frame the planned DVPP step cannot take (its size differs from the camera's, EXIF rotation...).

    Not a :class:`~dvpipe.errors.FrameError`: the pipeline runs the planned fallback for this frame
    (counted in ``batch.fallbacks``), or raises with ``fallback="error"``.
    """

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class DvppDecode(Decode):
    """``Decode`` as planned on the DVPP backend; carries the target the step was planned for.

    The kernel context has no target (see the report of this backend: ``KernelContext.target`` is the
    proposed fix); until then the DVPP step keeps it on its own decode stage. Prints as ``decode``.
    """

    target: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class VpcOp:
    """One VPC call: ``kind`` (``resize``, ``crop_resize``, ``csc``), crop box ``(l, t, r, b)`` inclusive in
    the input picture, output size ``(height, width)`` in pixels and output format (``nv12`` or ``bgr888``)."""

    kind: str
    crop: Optional[tuple[int, int, int, int]]
    out_size: tuple[int, int]
    out_fmt: str = "nv12"


@dataclass(frozen=True)
class Program:
    """What a DVPP step does to each frame, derived once from its stages.

    Attributes:
        source: ``jpegd`` or ``vdec``.
        in_size: the camera's ``(height, width)`` in pixels.
        decode_size: the decoder's output ``(height, width)`` in pixels (odd sizes floored to even).
        ops: the VPC calls, in order, all on the device before one stream synchronisation.
        host_crop: ``(left, top, width, height)`` sliced from the host copy, or None.
        host_csc: colour range of the host NV12 -> BGR conversion (``full``/``limited``), or None when VPC
            wrote BGR888.
        out_size: ``(height, width)`` in pixels of the BGR output.
    """

    source: str
    in_size: tuple[int, int]
    decode_size: tuple[int, int]
    ops: tuple[VpcOp, ...]
    host_crop: Optional[tuple[int, int, int, int]]
    host_csc: Optional[str]
    out_size: tuple[int, int]

    def describe(self) -> str:
        parts = [f"{self.source.upper()} {self.in_size[1]}x{self.in_size[0]} -> NV12 "
                 f"{self.decode_size[1]}x{self.decode_size[0]}"]
        for op in self.ops:
            what = {"resize": "resize", "crop_resize": "crop-resize", "csc": "colour conversion"}[op.kind]
            box = f" crop {op.crop}" if op.crop is not None else ""
            parts.append(f"VPC {what}{box} -> {op.out_fmt.upper()} {op.out_size[1]}x{op.out_size[0]}")
        if self.host_csc:
            parts.append(f"NV12 -> BGR on the host (BT.601 {self.host_csc} range)")
        if self.host_crop is not None:
            parts.append("crop {2}x{3}+{0}+{1} of the host copy".format(*self.host_crop))
        return "; ".join(parts)


#: The tolerance table (docs/dvpp.md; asserted by tests/backends/dvpp/test_fidelity.py): the DVPP path on the
#: software device against the CPU backend running the same stages, per step and content. Keys
#: ``(step, content)``; bounds on ``|dvpp - cpu|``: uint8 grey levels for decoded/resized pictures,
#: normalised units ((x - mean) / std, std 57-58) for the batch. ``samples`` = the bundled 1600x900 scene;
#: ``synthetic`` = :func:`dvpipe.testing.dvpp.synthetic_bgr` (saturated colour blocks with sharp edges: the worst case
#: for 4:2:0 chroma). The max errors sit on saturated colour edges, where 4:2:0 keeps one chroma sample
#: per 2x2 block.
TOLERANCES: dict[tuple[str, str], dict[str, float]] = {
    ("jpegd", "samples"): {"mean_abs": 0.1, "p999_abs": 6, "max_abs": 24},
    ("jpegd", "synthetic"): {"mean_abs": 0.5, "p999_abs": 16, "max_abs": 48},
    ("jpegd+vpc.resize", "samples"): {"mean_abs": 0.25, "p999_abs": 14, "max_abs": 48},
    ("jpegd+vpc.resize", "synthetic"): {"mean_abs": 1.2, "p999_abs": 36, "max_abs": 90},
    ("batch", "samples"): {"mean_abs": 0.006, "p999_abs": 0.25, "max_abs": 0.85},
    # real camera content (the nuScenes sample, when present): more fine texture than the synthetic scene
    ("batch", "nuscenes"): {"mean_abs": 0.012, "p999_abs": 0.15, "max_abs": 0.6},
    ("vdec", "synthetic"): {"mean_abs": 1.5, "p999_abs": 4, "max_abs": 6},
    # the AIPP route: DVPP's NV12 batch through AIPP's documented arithmetic (dvpipe.backends.dvpp.aipp) vs the
    # CPU backend at fidelity reference, bevformer-tiny, normalised units
    ("aipp", "samples"): {"mean_abs": 0.03, "p999_abs": 0.35, "max_abs": 1.2},
}
#: why each step differs from the CPU backend
TOLERANCE_WHY = {
    "jpegd": "JPEGD writes the JPEG's own 4:2:0 chroma samples (NV12); the host upsamples them bilinearly as "
             "libjpeg-turbo does, but the software device derives them from a decoded picture (2x2 mean), so "
             "chroma edges soften; on a device the samples are the JPEG's own and the error is expected lower",
    "jpegd+vpc.resize": "VPC resizes Y and the half-resolution UV plane bilinearly, so the output keeps 4:2:0 "
                        "chroma at the output size (the CPU path resizes full-resolution BGR), and rounds to "
                        "uint8 after each stage",
    "batch": "the resize step's error after normalisation (std 57-58), bevformer-tiny at fidelity fast vs the "
             "CPU backend at fidelity reference",
    "aipp": "the resize step's error plus AIPP's: its CSC is 8-bit fixed point with a floor (>> 8, up to one grey "
            "level low, ATC guide atlasatc_16_0021), its 4:2:0 chroma serves each 2x2 block (nearest), and it writes "
            "fp16 (2**-11 relative); the bounds hold for the CI targets on the bundled samples",
    "vdec": "the same decoded YUV (H.264 decoding is bit-exact by specification); OpenCV's NV12 BT.601 "
            "limited-range conversion vs FFmpeg swscale's (PyAV bgr24) rounding",
}


# ------------------------------------------------------------------------------------------------ knowledge

@functools.lru_cache(maxsize=4096)
def _kcheck(soc: str, cann: str, unit: str, op: str, width: int, height: int, fmt: str, extras: tuple):
    from ...knowledge import check

    return check(soc, cann, unit, op, width, height, fmt, api="acldvpp", **dict(extras))


# cleared with the knowledge base's own caches when extra data is layered in (dvpipe.knowledge.add_data_dir)
_register_cache(_kcheck)


def kcheck(target: Any, unit: str, op: str, width: int, height: int, fmt: str, **extras: Any):
    """:func:`dvpipe.knowledge.check` for ``target`` and the acldvpp API (cached)."""
    return _kcheck(target.soc, str(target.cann), unit, op, int(width), int(height), fmt,
                   tuple(sorted(extras.items())))


def _deciding(kv) -> Any:
    for kind in ("violation", "unknown", "effect"):
        for f in kv.reasons:
            if f.kind == kind:
                return f
    return None


def _refusal(kv, extra: str = "") -> KernelVerdict:
    f = _deciding(kv)
    reason = (f.message if f is not None else kv.summary) + (f"; {extra}" if extra else "")
    status = kv.status if kv.status in ("rejected", "unknown") else "rejected"
    return KernelVerdict(status, reason, f.rule_id if f else None, f.source if f else None)


# ------------------------------------------------------------------------------------------------ planning

@dataclass
class _Plan:
    stages: list
    ops: list
    notes: list
    detours: list
    rules: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    changed: bool = False

    def cite(self, rule_id: Optional[str], source: Optional[str]) -> None:
        """Keep every rule (and its documentation page) that shaped this step, in order, once."""
        if rule_id and rule_id not in self.rules:
            self.rules.append(rule_id)
        if source and source not in self.sources:
            self.sources.append(source)

    def cite_checked(self, kv) -> None:
        """Cite the first rule an ok knowledge verdict was checked against (its range rule)."""
        from ...knowledge import rules

        if kv.rules_checked:
            rid = kv.rules_checked[0]
            self.cite(rid, next((r.source for r in rules() if r.id == rid), None))

    @property
    def rule(self) -> Optional[str]:
        return "; ".join(self.rules) or None

    @property
    def source(self) -> Optional[str]:
        return " ; ".join(self.sources) or None


def _bitstream(camera: Any) -> str:
    extra = getattr(camera, "extra", None) or {}
    return str(extra.get("bitstream") or "jpeg")


_TLS = __import__("threading").local()


class accepting_unknown:
    """``with accepting_unknown(): ...``: DVPP steps opened in the block plan what the docs leave open as
    allowed (a device verification, or a step a measurement on this device verified)."""

    def __enter__(self):
        self._prev = getattr(_TLS, "accept", False)
        _TLS.accept = True
        return self

    def __exit__(self, *exc):
        _TLS.accept = self._prev


def accepts_unknown() -> bool:
    return bool(getattr(_TLS, "accept", False))


def _ok(kv, accept: bool) -> bool:
    return kv.ok or (accept and kv.status == "unknown" and not kv.violations)


def plan_step(stages: Sequence[Any], spec_in: Any, camera: Any, target: Any,
              fidelity: Fidelity = "fast", accept_unknown: bool = False) -> tuple[KernelVerdict, Optional[Program]]:
    """The verdict for running ``stages`` (a run starting with ``decode``) on DVPP, and the program.

    The program is None unless the verdict is ok. Deterministic: the kernel calls it again with the
    stages the planner substituted and gets the same program. ``accept_unknown``: plan what the docs
    leave open as allowed (see the module docstring).
    """
    if target is None:
        return KernelVerdict.no("the DVPP backend plans against a target: Pipeline(..., target=dvpipe.Target(soc=..., "
                                "cann=...))"), None
    if spec_in.pixel_format is not PixelFormat.ENCODED:
        return KernelVerdict.no(f"DVPP decoders take encoded frames; this camera delivers {spec_in.pixel_format.value} "
                                "arrays"), None
    h, w = spec_in.size
    enc = spec_in.encoding
    if enc == "png":
        kv = kcheck(target, "pngd", "decode", w, h, _bitstream(camera) if _bitstream(camera).startswith("png")
                    else "png")
        note = "dvpipe's DVPP backend calls the acldvpp (v1) API; PNG decoding is not implemented (run on the next backend)"
        if kv.ok:
            return KernelVerdict.no(f"PNGD decode on {target.soc} (CANN {target.cann}): {note}"), None
        return _refusal(kv, note), None
    if enc in RAW_YUV_ENCODINGS:
        # VPC documents YUV422 packed and YUV420SP input (vpc.v1.formats.*: 6.0.1 aclcppdevg_03_0168 / 0232,
        # 8.0.0 aclpythondevg_01_0429) and judges the conversion to BGR888; the kernels below start at JPEGD/VDEC
        kv = kcheck(target, "vpc", "csc", w, h, enc, out_fmt="bgr888")
        note = (f"dvpipe's DVPP backend starts every step at a decoder (JPEGD/VDEC) and has no kernel that uploads "
                f"raw {enc.upper()} frames to VPC; the colour conversion runs on the next backend")
        if kv.ok:
            rid = kv.rules_checked[0] if kv.rules_checked else None
            from ...knowledge import rule_by_id

            rule = rule_by_id(rid) if rid else None
            return KernelVerdict.no(f"VPC colour conversion {enc.upper()} -> BGR888 on {target.soc} (CANN {target.cann}): "
                                    f"allowed by the documented rules; {note}", rule=rid,
                                    source=rule.source if rule else None), None
        return _refusal(kv, note), None
    if enc == "jpeg":
        source = "jpegd"
        kv = kcheck(target, "jpegd", "decode", w, h, _bitstream(camera), out_fmt="nv12")
        question = jpegd_odd_size_question(target.soc, str(target.cann), w, h)
        if question:
            return KernelVerdict.no(f"{question}: dvpipe takes the stricter reading and keeps this size off DVPP "
                                    "(the software DVPP device refuses it)"), None
    elif enc in VIDEO_ENCODINGS:
        source = "vdec"
        kv = kcheck(target, "vdec", "decode", w, h, enc, out_fmt="nv12")
    else:
        return KernelVerdict.no(f"no DVPP decoder for {enc or 'this input'}"), None
    if not _ok(kv, accept_unknown):
        return _refusal(kv), None
    for st in stages[1:]:
        if st.op == "resize" and st.interpolation != "linear":
            return KernelVerdict.no(f"VPC resize on {target.soc} (CANN {target.cann}): dvpipe sets the resize filter "
                                    f"explicitly to bilinear (acldvppSetResizeConfigInterpolation 1, computed like "
                                    f"OpenCV: CANN 6.0.1 aclcppdevg_03_0820) and offloads only that; "
                                    f"{st.interpolation!r} runs on the next backend",
                                    rule="vpc.v1.interpolation_open"), None

    p = _Plan([DvppDecode(target=target)], [], [], [])
    p.cite_checked(kv)
    dw, dh = w // 2 * 2, h // 2 * 2
    effect = next((f for f in kv.reasons if f.kind == "effect"), None)
    rest = list(stages[1:])
    if (dw, dh) != (w, h):
        dropped = " and ".join(x for x in (f"the last {w - dw} column" if dw != w else "",
                                           f"the last {h - dh} row" if dh != h else "") if x)
        p.notes.append(effect.message if effect is not None else f"{source.upper()} floors odd sizes to even")
        if effect is not None:
            p.cite(effect.rule_id, effect.source)
        already = rest and rest[0].op == "crop" and (rest[0].left, rest[0].top, rest[0].width, rest[0].height) == (
            0, 0, dw, dh)
        if not already:
            p.stages.append(Crop(0, 0, dw, dh))
            p.changed = True
            p.detours.append(f"{source.upper()} writes {dw}x{dh} (YUV420SP needs even sizes): drops {dropped}; "
                             "the principal point is unchanged")
    cur = (dh, dw)  # (height, width) of the picture the next VPC call reads
    pending: Optional[list] = None  # [left, top, width, height] of the crops since the last resize
    pending_n = 0  # how many stages of p.stages formed it
    for st in rest:
        if st.op == "crop":
            if pending is None:
                pending = [st.left, st.top, st.width, st.height]
            else:
                pending = [pending[0] + st.left, pending[1] + st.top, st.width, st.height]
            pending_n += 1
            p.stages.append(st)
            continue
        if st.op != "resize":
            return KernelVerdict.no(f"the DVPP step covers decode, crop and resize, not {st.op}"), None
        if pending is not None and (pending[0], pending[1], pending[2], pending[3]) == (0, 0, cur[1], cur[0]):
            pending = None  # a crop of the whole picture (the decoder's own floor): nothing to cut
        src = (pending[3], pending[2]) if pending is not None else cur
        oh, ow = st.out_size(src)
        kind = "crop_resize" if pending is not None else "resize"
        box = None if pending is None else (pending[0], pending[1], pending[0] + pending[2] - 1,
                                            pending[1] + pending[3] - 1)
        extras = dict(out_width=ow, out_height=oh, out_fmt="nv12")
        if box is not None:
            extras["crop"] = box
        kv = kcheck(target, "vpc", kind, cur[1], cur[0], "nv12", **extras)
        if _ok(kv, accept_unknown):
            p.cite_checked(kv)
            p.ops.append(VpcOp(kind, box, (oh, ow)))
            p.stages.append(st)
            cur, pending, pending_n = (oh, ow), None, 0
            continue
        from ...knowledge import propose

        d = propose(kv)
        if d is None or not d.ok:
            why = "no legal detour" if d is None else f"the detour is {d.status}"
            return _refusal(kv, why), None
        f = _deciding(kv)
        p.notes.append(f.message)
        p.cite(f.rule_id, f.source)
        p.detours.extend(d.steps)
        p.changed = True
        if pending_n:
            del p.stages[len(p.stages) - pending_n:]
        # the detour's requests are the VPC calls that replace this one; emit them as stages
        for r in d.requests:
            rw, rh = r.width, r.height
            rbox = r.crop
            if rbox is None and (rh, rw) != cur:
                rbox = (0, 0, rw - 1, rh - 1)  # align-crop of the input picture
            if rbox is not None and rbox == (0, 0, cur[1] - 1, cur[0] - 1):
                rbox = None
            if rbox is not None:
                p.stages.append(Crop(rbox[0], rbox[1], rbox[2] - rbox[0] + 1, rbox[3] - rbox[1] + 1))
            oh, ow = r.out_size
            p.stages.append(Resize(size=(oh, ow)))
            p.ops.append(VpcOp("crop_resize" if rbox is not None else "resize", rbox, (oh, ow)))
            cur = (oh, ow)
        pending, pending_n = None, 0
    host_crop = None if pending is None else tuple(pending)
    out_size = cur if host_crop is None else (host_crop[3], host_crop[2])

    # colour conversion (a JPEG source: full range): acldvppVpcConvertColorAsync after the last VPC call where
    # NV12 -> BGR888 is documented for it (aclcppdevg_03_0349), else on the host
    host_csc: Optional[str] = "limited" if source == "vdec" else "full"
    ops = list(p.ops)
    if source == "jpegd":
        last_size = ops[-1].out_size if ops else (dh, dw)
        kv = kcheck(target, "vpc", "csc", last_size[1], last_size[0], "nv12", out_fmt="bgr888")
        if kv.ok:
            p.cite_checked(kv)
            ops.append(VpcOp("csc", None, last_size, "bgr888"))
            host_csc = None
    prog = Program(source, (h, w), (dh, dw), tuple(ops), host_crop, host_csc, out_size)

    reason = "; ".join(p.notes) if p.notes else ""
    if fidelity == "reference":
        why = ("fidelity 'reference' means the float reference within float rounding; a DVPP path differs by "
               "the 4:2:0 chroma round trip and uint8 resampling (tolerance table: docs/dvpp.md); at fidelity "
               f"'fast' this step runs on DVPP: {prog.describe()}")
        # "declined" (dvpipe's fidelity policy), not "rejected" (a documented hardware limit)
        return KernelVerdict("declined", (reason + "; " if reason else "") + why, p.rule or "dvpp.fidelity",
                             p.source, "; ".join(p.detours) or None), None
    text = prog.describe() if not reason else f"{reason}; runs as: {prog.describe()}"
    replace = tuple(p.stages) if p.changed else (p.stages[0], *stages[1:])
    return KernelVerdict("ok", text, p.rule, p.source, "; ".join(p.detours) or None, replace), prog


def supports(q: KernelQuery) -> KernelVerdict:
    """The ``supports`` function of every DVPP decode kernel (see :func:`plan_step`)."""
    try:
        verdict, _prog = plan_step(q.stages, q.spec_in, q.camera, q.target, q.fidelity, accepts_unknown())
    except ValueError as e:  # a malformed request built from odd stages: say so instead of crashing the plan
        return KernelVerdict.no(f"cannot map this step onto DVPP: {e}")
    return verdict
