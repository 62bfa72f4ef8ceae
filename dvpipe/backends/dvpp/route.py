"""The AIPP route (backend family ``aipp``: names ``aipp`` and ``aipp-sim``): the batch is DVPP's NV12.

On this route the model's AIPP (the AI Core's input pre-processing, :mod:`.aipp`) does the colour
conversion, Normalise and Pad; dvpipe's part ends with DVPP's resized NV12 pictures in one per-batch
device buffer. Its kernel covers ``normalise+batch`` and ``normalise+pad+batch`` for frames a DVPP step
hands on in device memory, and moves nothing itself: the DVPP step's last VPC call already wrote camera
i's picture into slot i of the buffer (its output descriptor points there, :func:`.vpc.picture_at`).

The buffer (:class:`dvpipe.device.DeviceBatch`, from :func:`allocate_output`): ``N`` NV12 pictures one after
the other, ``meta["slot_pitch"]`` bytes apart (the picture plus the 32-byte-plus gap pyACL documents between
segments of one DVPP allocation that a model reads: ``acl.media.dvpp_malloc``, CANN 6.0.1
aclpythondevg_01_0195), each at the documented VPC output stride for the target
(:func:`dvpipe.knowledge.stride_for`; e.g. width to 16 and height to 2 on Ascend310P3: rule
``vpc.out_stride.310p``, inferred from the input rule of CANN 6.0.1 aclcppdevg_03_0232), allocated once per
output buffer of the pipeline's ring with ``acl.media.dvpp_malloc`` and freed in ``Pipeline.close()``.
``batch.images`` is a :class:`~dvpipe.device.DeviceTensor` over it: layout ``NV12``, shape
``(N, H, W)``, ``strides = (width_stride, height_stride)``, ``meta["aipp"]`` the static
:class:`~.aipp.AippConfig` that turns it into the profile's ``(N, 3, H', W')`` float16 input
(``src_image_size`` = the stride, crop = the picture, padding = the profile's Pad),
``meta["colour_standard"]`` (``jpeg_full`` for JPEGD output; for VDEC output the camera's ``yuv_matrix`` /
``yuv_range`` keys, e.g. ``bt709_narrow``, which a video file source fills in from the stream's VUI, else
``bt601_narrow``).

Fidelity: AIPP's 8-bit fixed-point CSC, its 4:2:0 -> 4:4:4 chroma and the fp16 output differ from the
float reference, so at fidelity ``reference`` the step is *declined* (dvpipe's policy), never rejected.

A frame the DVPP step could not take (its runtime fallback decoded it on the CPU) reaches this kernel
as host BGR: it is converted to NV12 on the host in the slot's colour standard (the one its AIPP converts
from: JPEG full range, or the video camera's BT.601 / BT.709 narrow range; 2x2 mean chroma) and uploaded
into its slot, a timed ``h2d`` transfer with its bytes.

Written against the documented pyACL API (``acl.media.dvpp_malloc``, CANN 6.0.1 aclpythondevg_01_0195;
``acl.rt.memcpy``, aclpythondevg_01_0109); exercised on the software device only.
Nothing here has run on Ascend hardware.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ...device import DeviceBatch, DeviceTensor
from ...errors import ConfigError
from ...latency.clock import DeviceSpan, now_ns
from ...stages.kernel_registry import KernelContext, KernelQuery, KernelVerdict, register_kernel
from ...types import PixelFormat
from . import _acl
from .colour import camera_colour_standard as _colour_standard
from .canvas import canvas_nv12

__all__ = ["available", "allocate_output", "batch_layout", "nv12_from_bgr", "canvas_nv12", "pad_nv12", "OPS"]

#: the runs of ops the AIPP step covers
OPS = (("normalise", "batch"), ("normalise", "pad", "batch"))


def available(ref: Any, target: Any = None) -> KernelVerdict:
    """Whether ``ref`` (``aipp`` or ``aipp-sim``) can run here: the DVPP device it shares memory with."""
    from . import available as dvpp_available

    return dvpp_available(type(ref)(ref.name.replace("aipp", "dvpp"), "dvpp", ref.device), target)


def _split(stages: tuple) -> tuple[Any, Any]:
    norm = next(s for s in stages if s.op == "normalise")
    pad = next((s for s in stages if s.op == "pad"), None)
    return norm, pad


def _config(stages: tuple, camera: Any, src_size: tuple[int, int], content_size: tuple[int, int],
            out_size: tuple[int, int]):
    from .aipp import aipp_for

    norm, pad = _split(stages)
    return aipp_for(norm.mean, norm.std, channel_order="rgb" if norm.to_rgb else "bgr",
                    colour_standard=_colour_standard(camera), src_size=src_size, content_size=content_size,
                    out_size=out_size, padding_value=float(pad.value) if pad is not None else 0.0)


def _canvas_config(stages: tuple, camera: Any, canvas: tuple[int, int], strides: tuple[int, int]):
    """The AIPP of the canvas route: no crop, no padding; the ``canvas`` ``(height, width)`` picture at
    ``strides`` (width_stride, height_stride) is normalised as it is."""
    return _config(stages, camera, (strides[1], strides[0]), canvas, canvas)


def pad_nv12(stages: tuple, camera: Any) -> tuple[int, int, int]:
    """``(Y, U, V)`` of the canvas border: the uniform NV12 colour whose AIPP output (this step's colour
    conversion and normalisation, the fixed-point arithmetic of :func:`.aipp.apply_aipp`) is closest to the
    Pad stage's value (the reference pads the normalised image with it, 0 for mmdet3d): the best of the
    integer triples around the analytic inverse, by the largest error over the three channels."""
    from .aipp import apply_aipp

    norm, pad = _split(stages)
    target = float(pad.value) if pad is not None else 0.0
    cfg = _config(stages, camera, (2, 2), (2, 2), (2, 2))
    rgb = np.asarray(norm.mean, np.float64)[::1 if norm.to_rgb else -1] + target * np.asarray(norm.std, np.float64)
    r, g, b = rgb
    y0 = 0.299 * r + 0.587 * g + 0.114 * b
    u0, v0 = 128 + (b - y0) / 1.772, 128 + (r - y0) / 1.402
    best: tuple[float, tuple[int, int, int]] = (float("inf"), (0, 0, 0))
    for dy in range(-4, 5):
        for du in range(-4, 5):
            for dv in range(-4, 5):
                y, u, v = (int(np.clip(round(a) + d, 0, 255)) for a, d in ((y0, dy), (u0, du), (v0, dv)))
                pic = np.array([[y, y], [y, y], [u, v]], np.uint8)
                err = float(np.abs(apply_aipp(cfg, pic, dtype=np.float32) - target).max())
                if err < best[0]:
                    best = (err, (y, u, v))
    return best[1]


def _canvas_why(target: Any, h: int, w: int, ph: int, pw: int) -> str:
    """Empty when VPC can paste the ``w x h`` picture into a ``pw x ph`` canvas on ``target`` (the knowledge
    base's acldvppVpcCropResizePasteAsync rules), else why not."""
    from ...knowledge import check as kcheck

    if target is None:
        return "no target to check the VPC paste against"
    v = kcheck(target.soc, target.cann, unit="vpc", op="crop_resize_paste", width=w, height=h, fmt="nv12",
               out_width=pw, out_height=ph, crop=(0, 0, w - 1, h - 1), paste=(0, 0, w - 1, h - 1))
    return "" if v.ok else (v.reasons[0].message if v.reasons else v.status)


def _supports(q: KernelQuery) -> KernelVerdict:
    spec = q.spec_in
    if q.fidelity == "reference":  # dvpipe's policy first: it holds whatever the step before does
        return KernelVerdict("declined", "fidelity 'reference' means the float reference within float rounding; AIPP's "
                                         "8-bit fixed-point colour conversion (CSC >> 8), its 4:2:0 chroma and its fp16 "
                                         "output differ from it; at fidelity 'fast' the model's AIPP normalises and pads "
                                         "DVPP's NV12 batch", "aipp.fidelity")
    if not spec.placement.startswith(f"dvpp-{q.backend.device}"):
        return KernelVerdict.no(f"AIPP reads NV12 that DVPP wrote in device memory; this camera's frames are on "
                                f"{spec.placement} here (the step before runs elsewhere)")
    if spec.pixel_format not in (PixelFormat.BGR, PixelFormat.NV12):
        return KernelVerdict.no(f"AIPP takes the decoded picture, got {spec.pixel_format.value}")
    h, w = spec.size
    ph, pw = q.spec_out.size
    canvas = ""
    try:
        cfg = _config(q.stages, q.camera, (h + (h & 1), w + (w & 1)), spec.size, q.spec_out.size)
    except ConfigError as e:
        # AIPP's padding is limited (32 a side, padded width <= 1080): the canvas route pads on VPC instead
        why = _canvas_why(getattr(q, "target", None), h, w, ph, pw) if (ph, pw) != (h, w) else "no padding to move"
        try:
            cfg = _canvas_config(q.stages, q.camera, (ph, pw), (pw + (pw & 1), ph + (ph & 1)))
        except ConfigError as e2:
            why = why or str(e2)
        if why:
            return KernelVerdict.no(f"AIPP cannot express this step: {e}; nor can VPC pad it ({why})",
                                    rule="aipp.limits", source="ATC tool guide atlasatc_16_0023 / pyACL "
                                                               "aclpythondevg_01_0188 (CANN 8.0.0)")
        canvas = (f"; AIPP cannot pad it ({e}): VPC pastes the {w}x{h} picture into a {pw}x{ph} canvas whose "
                  "border holds the pad colour (acldvppVpcCropResizePasteAsync), and AIPP only normalises")
    norm, _pad = _split(q.stages)
    what = (f"the model's AIPP: NV12 ({_colour_standard(q.camera)}) -> {'RGB' if norm.to_rgb else 'BGR'}, "
            f"normalise, pad to {pw}x{ph}, fp16; the batch is the NV12 device buffer{canvas}")
    note = "" if norm.dtype == "float16" else f" (the stage list asks for {norm.dtype}; AIPP writes fp16)"
    del cfg  # built only to learn whether AIPP can express the step (the plan's buffer layout builds the real one)
    return KernelVerdict.yes(what + note)


def batch_layout(plan: Any) -> dict:
    """The per-batch device buffer of an AIPP-route plan: picture size, documented stride, slot bytes,
    placement, colour standard and the :class:`~.aipp.AippConfig` that reproduces the profile.
    ``out_size`` is the model input's ``(height, width)`` in pixels; ``strides`` is
    ``(width_stride, height_stride)``, DVPP's order."""
    from . import device_output, picture_layout

    cp = plan.cameras[0]
    last = cp.steps[-1]
    layouts = {}
    for c in plan.cameras:
        dv = next(s for s in c.steps if s.backend.family == "dvpp")
        _spec, prog, _why = device_output(dv, c.camera, plan.target, True)
        assert prog is not None  # the AIPP route was planned with a VPC program on every camera
        layouts[c.camera.name] = picture_layout(prog, plan.target)
    standards = {c.camera.name: _colour_standard(c.camera) for c in plan.cameras}
    if len(set(standards.values())) > 1:
        listing = ", ".join(f"{k} {v}" for k, v in standards.items())
        raise ConfigError(f"the cameras' pictures are in different colour standards ({listing}); one AIPP converts "
                          "the whole batch: give the cameras the same yuv_matrix / yuv_range, or plan them apart")
    unit, fmt, (h, w), (ws, hs), nbytes = layouts[cp.camera.name]
    alike = all(lay[1:4] == (fmt, (h, w), (ws, hs)) for lay in layouts.values())
    canvas = None
    try:
        if not alike:
            raise ConfigError("the cameras' DVPP pictures differ")
        cfg = _config(last.stages, cp.camera, (hs, ws), (h, w), last.spec_out.size)
    except ConfigError:
        # the canvas route (see _supports): the slot is the padded picture, VPC pastes into its top-left. Also
        # where the cameras' pictures differ (a rig of several sizes padded to one): each camera pastes its own
        from . import vpc

        ph, pw = last.spec_out.size
        for name, lay in layouts.items():
            why = "" if lay[1] == "nv12" else f"its DVPP picture is {lay[1]}, not NV12"
            why = why or _canvas_why(plan.target, lay[2][0], lay[2][1], ph, pw)
            if why:
                raise ConfigError(f"camera {name}: the AIPP batch buffer cannot hold its {lay[2][1]}x{lay[2][0]} "
                                  f"picture ({why})")
        st = vpc.layout(plan.target, "vpc", "nv12", pw, ph, accept_unknown=True)
        canvas = {"picture": (h, w), "pictures": {name: lay[2] for name, lay in layouts.items()},
                  "pad_nv12": pad_nv12(last.stages, cp.camera)}
        unit, (h, w), (ws, hs) = "vpc", (ph, pw), (int(st.width_stride), int(st.height_stride))
        nbytes = ws * hs * 3 // 2
        cfg = _canvas_config(last.stages, cp.camera, (ph, pw), (ws, hs))
    from ...device import slot_pitch

    out = {"n": len(plan.cameras), "width": w, "height": h, "strides": (ws, hs), "slot_bytes": nbytes,
           "pitch": slot_pitch(nbytes),
           "writer": unit, "placement": last.backend.placement, "device": last.backend.device,
           "colour_standard": _colour_standard(cp.camera), "aipp": cfg, "out_size": last.spec_out.size}
    if canvas is not None:
        out["canvas"] = canvas
    return out


def allocate_output(ref: Any, shape: tuple, dtype: str, plan: Any = None) -> DeviceBatch:
    """One per-batch NV12 device buffer for ``plan`` (called once per output buffer of the ring)."""
    if plan is None or plan.device_batch is None:
        raise ConfigError("the AIPP route's batch buffer is laid out from the plan; pass plan=")
    b = plan.device_batch
    rt = _acl.runtime(ref.device, plan.target)
    meta = {"aipp": b["aipp"], "colour_standard": b["colour_standard"]}
    if "canvas" in b:
        meta["canvas"] = b["canvas"]
    return DeviceBatch(rt, b["n"], b["width"], b["height"], b["strides"], rt.name, meta)


def nv12_from_bgr(bgr: np.ndarray, strides: tuple[int, int], colour_standard: str = "jpeg_full") -> np.ndarray:
    """Host BGR uint8 -> NV12 at ``strides`` in the slot's ``colour_standard`` (the one its AIPP converts from;
    :func:`.colour.nv12_in_standard`, chroma the 2x2 mean): the upload of a frame the DVPP step's fallback decoded
    on the CPU. Returns ``(hs * 3 / 2, ws)`` uint8."""
    from .colour import nv12_in_standard

    return nv12_in_standard(bgr, strides, colour_standard)


def _kernel(data: Any, stages: tuple, ctx: KernelContext):
    slot = ctx.slot if ctx.slot is not None else ctx.out
    if not isinstance(slot, DeviceTensor):
        raise ConfigError("the AIPP step writes a per-batch device buffer; the pipeline gave it no slot")
    assert slot.strides is not None  # the batch buffer's slots are NV12 with their strides
    if slot.runtime is None:
        raise ConfigError("the AIPP step's batch slot has no runtime: the route's buffers come from an opened DVPP "
                          "device (dvpipe.device.DeviceBatch)")
    if isinstance(data, DeviceTensor):
        if data.ptr == slot.ptr:
            return slot  # VPC wrote the picture into the slot: nothing to do
        if tuple(data.strides or ()) != tuple(slot.strides) or data.layout != "NV12":
            raise ConfigError(f"the DVPP picture (stride {data.strides}, {data.layout}) does not fit the batch slot "
                              f"(stride {slot.strides})")
        t0 = now_ns()
        slot.runtime.device_copy(slot.ptr, slot.nbytes, data.ptr, min(data.nbytes, slot.nbytes), step="aipp slot")
        ctx.device_spans.append(DeviceSpan("d2d", t0, now_ns(), None, unit="dvpp",
                                           attrs={"direction": "device_to_device", "bytes": int(slot.nbytes)}))
        return slot
    # host BGR from the DVPP step's runtime fallback: NV12 on the host, one upload into the slot
    img = np.asarray(data)
    if "canvas" in slot.meta:  # this camera's picture (cameras of several sizes paste their own)
        c = slot.meta["canvas"]
        h, w = c.get("pictures", {}).get(getattr(ctx.camera, "name", None), c["picture"])
    else:
        h, w = slot.shape[1], slot.shape[2]
    if img.shape[:2] != (h, w):
        raise ConfigError(f"the fallback produced {img.shape[:2]}, the batch slot holds {h}x{w}")
    nv12 = nv12_from_bgr(img, slot.strides, str(slot.meta.get("colour_standard", "jpeg_full")))
    if "canvas" in slot.meta:  # the border rows/columns hold the pad colour, as VPC's paste leaves them
        canvas = canvas_nv12(slot)
        ws, hs = slot.strides
        canvas[:h, :w] = nv12[:h, :w]
        canvas[hs:hs + (h + 1) // 2, :w + (w & 1)] = nv12[hs:hs + (h + 1) // 2, :w + (w & 1)]
        nv12 = canvas
    t0 = now_ns()
    slot.runtime.upload(slot.ptr, slot.nbytes, nv12.tobytes(), step="aipp slot (fallback)")
    ctx.device_spans.append(DeviceSpan("h2d", t0, now_ns(), None, unit="dvpp",
                                       attrs={"direction": "host_to_device", "bytes": int(nv12.nbytes)}))
    return slot


for _ops in OPS:
    register_kernel(_ops, backend="aipp", supports=_supports, unit="dvpp", name="aipp." + "+".join(_ops))(_kernel)


def route_of(plan: Any, camera: Optional[str] = None) -> list[tuple[str, str]]:
    """``(camera, route)`` for each camera of ``plan`` (``aipp``, ``torch_npu`` or ``host``)."""
    return [(cp.camera.name, cp.route) for cp in plan.cameras if camera is None or cp.camera.name == camera]
