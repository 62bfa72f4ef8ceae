"""VPC on device pictures: resize, crop-resize, crop-resize-paste, colour conversion; host copies.

A :class:`Picture` is a DVPP buffer from the pool plus its picture descriptor, laid out with the strides
the knowledge base gives for the target (:func:`dvpipe.knowledge.stride_for`). VPC calls are queued on
the step's stream (:func:`enqueue`) after the decoder's call, and the caller synchronises once.
:func:`to_host` downloads a picture and crops it from its strides to the valid region, converting NV12
to BGR on the host when VPC did not write BGR888.

:class:`StepState` holds what one camera's DVPP step keeps across frames (runtime, pool, channel,
stream, resize configuration, the program from :func:`~dvpipe.backends.dvpp.support.plan_step`) and
releases it in :meth:`StepState.close`.

Resize filter: the step's resize configuration is set explicitly to :data:`RESIZE_INTERPOLATION` = 1,
"the industry-standard bilinear algorithm (computed like OpenCV)" on every product the pages list
(CANN 6.0.1 aclcppdevg_03_0820; "identical to OpenCV 3.4.2" on Atlas 200I/500 A2, CANN 6.2.RC2
aclpythondevg_02_0298). The default 0 would run Huawei's own high-order filter on Ascend310/910
(aclcppdevg_03_0820) and on Atlas 200I/500 A2 (aclpythondevg_02_0298), and bilinear on Ascend310P.
So every target runs bilinear; the high-order filter is never used.
"""
from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ...errors import ConfigError
from ...latency.clock import DeviceSpan, now_ns
from . import _acl
from ._enums import PIXEL_FORMAT
from .colour import nv12_planes, nv12_to_bgr, packed_view, split_standard
from .pool import BufferPool, DeviceBuffer, pool_for
from .support import Program, StepRefused, VpcOp

__all__ = ["Picture", "layout", "new_picture", "picture_at", "device_tensor", "tensor_to_host", "release", "enqueue",
           "crop_resize_paste", "to_host", "to_npu", "StepState", "RESIZE_INTERPOLATION", "on_device", "batch_slot"]

#: acldvppResizeConfig interpolation the backend sets (1: bilinear, OpenCV-like; see the module docstring)
RESIZE_INTERPOLATION = 1


@dataclass
class Picture:
    """A picture in DVPP memory: buffer, format (``nv12``, ``bgr888``, ``rgb888``), size, strides, descriptor."""

    buf: DeviceBuffer
    fmt: str
    width: int
    height: int
    ws: int
    hs: int
    desc: int
    #: False for a picture in memory the pool does not own (a slot of a per-batch device buffer)
    pooled: bool = True

    @property
    def nbytes(self) -> int:
        """Bytes holding the picture with its padding (what a download copies)."""
        return self.ws * self.hs * 3 // 2 if self.fmt in ("nv12", "nv21") else self.ws * self.hs


def layout(target: Any, unit: str, fmt: str, width: int, height: int, side: str = "out",
           accept_unknown: bool = False):
    """The documented stride for a picture (:class:`dvpipe.knowledge.Stride`); StepRefused when undocumented.

    ``accept_unknown``: the step runs what the docs leave open because a measurement on this device
    verified it (the live cache; :attr:`StepState.accept_unknown`), or is being verified now
    (:class:`~.support.accepting_unknown`). An undocumented layout is then the one of the SoC that
    ``families.yaml`` names (``undocumented_layout_as``: Atlas A3 -> Ascend910B3), the same layout the
    verification ran with, so what was measured is what runs."""
    from ...knowledge import KnowledgeGap, facts, stride_for

    try:
        return stride_for(target.soc, target.cann, unit, fmt, width, height, api="acldvpp", side=side)
    except KnowledgeGap as e:
        from .support import accepts_unknown

        borrow = facts(target.soc).undocumented_layout_as if (accept_unknown or accepts_unknown()) else None
        if borrow:
            # an undocumented layout on the device: the layout of the SoC families.yaml names (A3 ->
            # Ascend910B3, the family A3 shares every other documented DVPP row with); the measurement,
            # not this guess, decides
            return stride_for(borrow, target.cann, unit, fmt, width, height, api="acldvpp", side=side)
        raise StepRefused(f"{unit.upper()} {fmt} {width}x{height} on {target.soc} (CANN {target.cann}): {e.reason}") \
            from None


def new_picture(rt: Any, pool: BufferPool, target: Any, unit: str, fmt: str, width: int, height: int,
                side: str = "out", min_bytes: int = 0, accept_unknown: bool = False) -> Picture:
    """A pooled buffer and a descriptor for a ``width x height`` picture written by ``unit``
    (``accept_unknown``: see :func:`layout`)."""
    st = layout(target, unit, fmt, width, height, side, accept_unknown)
    size = max(int(st.buffer_bytes), int(min_bytes))
    buf = pool.acquire(size, fmt)
    try:
        desc = rt.pic_desc(buf.ptr, size, PIXEL_FORMAT[fmt], width, height, st.width_stride, st.height_stride)
    except Exception:
        pool.release(buf)
        raise
    return Picture(buf, fmt, width, height, st.width_stride, st.height_stride, desc)


def release(rt: Any, pool: BufferPool, pic: Optional[Picture]) -> None:
    """Destroy the descriptor and return the buffer to the pool."""
    if pic is None:
        return
    try:
        rt.destroy_pic_desc(pic.desc)
    finally:
        if pic.pooled:
            pool.release(pic.buf)


def picture_at(rt: Any, target: Any, unit: str, fmt: str, width: int, height: int, ptr: int, nbytes: int,
               accept_unknown: bool = False) -> Picture:
    """A descriptor for a ``width x height`` picture written by ``unit`` at ``ptr`` (memory the caller owns,
    e.g. slot i of a per-batch device buffer): nothing is allocated; :func:`release` destroys only the
    descriptor. StepRefused when the documented layout needs more than ``nbytes``."""
    st = layout(target, unit, fmt, width, height, "out", accept_unknown)
    if int(st.buffer_bytes) > int(nbytes):
        raise StepRefused(f"{unit.upper()} {fmt} {width}x{height} needs {int(st.buffer_bytes)} bytes at stride "
                          f"{st.width_stride}x{st.height_stride}; the batch slot holds {nbytes}")
    desc = rt.pic_desc(int(ptr), int(nbytes), PIXEL_FORMAT[fmt], width, height, st.width_stride, st.height_stride)
    return Picture(DeviceBuffer(int(ptr), int(nbytes), fmt), fmt, width, height, st.width_stride, st.height_stride,
                   desc, pooled=False)


def _ctx(src: Picture, op: str, out: tuple[int, int], fmt: str) -> dict:
    return {"op": op, "input": f"{src.width}x{src.height} {src.fmt} stride {src.ws}x{src.hs}",
            "output": f"{out[1]}x{out[0]} {fmt}"}


def enqueue(rt: Any, pool: BufferPool, target: Any, channel: int, stream: int, src: Picture, op: VpcOp,
            cfg: int, rois: list, at: Optional[tuple[int, int]] = None, accept_unknown: bool = False) -> Picture:
    """Queue one VPC call reading ``src``; returns the output picture (valid after the stream sync).

    ROI configurations created here are appended to ``rois`` for the caller to destroy after the sync.
    ``at=(ptr, nbytes)`` makes VPC write into that memory (a batch slot) instead of a pooled buffer.
    """
    oh, ow = op.out_size
    if at is not None:
        dst = picture_at(rt, target, "vpc", op.out_fmt, ow, oh, *at, accept_unknown=accept_unknown)
    else:
        dst = new_picture(rt, pool, target, "vpc", op.out_fmt, ow, oh, "out", accept_unknown=accept_unknown)
    try:
        ctx = _ctx(src, op.kind, op.out_size, op.out_fmt)
        if op.kind == "resize":
            rt.vpc_resize(channel, src.desc, dst.desc, cfg, stream, **ctx)
        elif op.kind == "crop_resize":
            assert op.crop is not None  # a crop_resize op carries its box
            roi = rt.roi(*op.crop)
            rois.append(roi)
            rt.vpc_crop_resize(channel, src.desc, dst.desc, roi, cfg, stream, crop_box=op.crop, **ctx)
        elif op.kind == "csc":
            rt.vpc_convert_color(channel, src.desc, dst.desc, stream, **ctx)
        else:
            raise ConfigError(f"unknown VPC op {op.kind!r}")
    except Exception:
        release(rt, pool, dst)
        raise
    return dst


def crop_resize_paste(rt: Any, channel: int, stream: int, src: Picture, canvas: Picture,
                      crop: tuple[int, int, int, int], paste: tuple[int, int, int, int], cfg: int, rois: list) -> None:
    """Queue a crop-resize-paste of ``src``'s ``crop`` box into ``canvas``'s ``paste`` box (both inclusive).

    Used to write a picture straight into an aligned canvas (letterboxing, mosaics); the canvas outside
    the paste box keeps its content. Each ROI configuration is appended to ``rois`` as soon as it exists
    (also when a later call fails), for the caller to destroy after the sync.
    """
    c = rt.roi(*crop)
    rois.append(c)
    p = rt.roi(*paste)
    rois.append(p)
    rt.vpc_crop_resize_paste(channel, src.desc, canvas.desc, c, p, cfg, stream, crop_box=crop, paste_box=paste,
                             **_ctx(src, "crop_resize_paste", (canvas.height, canvas.width), canvas.fmt))


def picture_standard(program: Program, colour_standard: str = "") -> str:
    """The colour standard of the pictures ``program`` writes: JPEGD output is ``jpeg_full``; VDEC output is
    the stream's own Y'CbCr (VDEC does not convert it), ``colour_standard`` -- the camera's
    (:func:`.route._colour_standard`: rig keys or the stream's VUI) -- else ``bt601_narrow``."""
    if program.source != "vdec":
        return "jpeg_full"
    return colour_standard or "bt601_narrow"


def device_tensor(rt: Any, pic: Picture, program: Program, colour_standard: str = "", **meta: Any):
    """``pic`` as a :class:`dvpipe.device.DeviceTensor` (a view: the picture stays where it is).

    NV12 -> layout ``NV12``, shape ``(1, H, W)``; BGR888/RGB888 -> ``NHWC`` ``(1, H, W, 3)`` with the row
    stride in bytes. ``meta`` carries what a host download needs: ``fmt``, ``colour_standard``
    (:func:`picture_standard`; ``colour_standard`` is the camera's) and from it ``colour_range`` /
    ``colour_matrix`` of the NV12 -> BGR conversion, ``host_crop`` (``(l, t, w, h)`` or None), and
    ``release`` (call it once the picture was read: the buffer goes back to the pool).
    """
    from ...device import DeviceTensor

    nv12 = pic.fmt in ("nv12", "nv21")
    shape = (1, pic.height, pic.width) if nv12 else (1, pic.height, pic.width, 3)
    colour = "" if nv12 else ("rgb" if pic.fmt == "rgb888" else "bgr")
    standard = picture_standard(program, colour_standard)
    matrix, rng = split_standard(standard)
    full = {"fmt": pic.fmt, "colour_range": rng, "colour_matrix": matrix, "host_crop": program.host_crop,
            "colour_standard": standard, **meta}
    return DeviceTensor(pic.buf.ptr, pic.nbytes, shape, "uint8", "NV12" if nv12 else "NHWC", rt.name, rt,
                        (pic.ws, pic.hs), colour, full)


def tensor_to_host(t: Any, scratch: Optional[dict] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Download a picture :class:`~dvpipe.device.DeviceTensor` made by :func:`device_tensor` and return its
    valid region as ``H x W x 3`` uint8 BGR on the host (the host route's transfer step)."""
    fmt = t.meta.get("fmt", "nv12")
    h, w = t.shape[1], t.shape[2]
    ws, hs = t.strides
    raw = t.to_host(picture=f"{w}x{h} {fmt}")
    if fmt in ("nv12", "nv21"):
        y, uv = nv12_planes(raw, w, h, ws, hs)
        if fmt == "nv21":
            uv = uv[..., ::-1]
        img = nv12_to_bgr(y, uv, t.meta.get("colour_range") or "full", out=out, scratch=scratch,
                          matrix=t.meta.get("colour_matrix") or "bt601")
    else:
        img = packed_view(raw, w, h, ws, hs, 3)
        if fmt == "rgb888":
            img = img[..., ::-1]
        if out is not None:
            out[...] = img
            img = out
        else:
            img = np.ascontiguousarray(img)
    crop = t.meta.get("host_crop")
    if crop is not None:
        l, tp, cw, ch = crop
        img = img[tp:tp + ch, l:l + cw]
    return img


def to_host(rt: Any, pic: Picture, colour_range: Optional[str] = "full", scratch: Optional[dict] = None,
            out: Optional[np.ndarray] = None, matrix: str = "bt601") -> np.ndarray:
    """Download ``pic`` and return its valid region as ``H x W x 3`` uint8 BGR on the host.

    NV12 is cropped from its strides plane by plane and converted with ``colour_range`` and ``matrix``
    (``bt601`` / ``bt709``); BGR888/RGB888 rows are cropped from the width stride. The result is ``out``
    (if given) or a new array.
    """
    raw = rt.download(pic.buf.ptr, pic.nbytes, picture=f"{pic.width}x{pic.height} {pic.fmt}")
    if pic.fmt in ("nv12", "nv21"):
        y, uv = nv12_planes(raw, pic.width, pic.height, pic.ws, pic.hs)
        if pic.fmt == "nv21":
            uv = uv[..., ::-1]
        return nv12_to_bgr(y, uv, colour_range or "full", out=out, scratch=scratch, matrix=matrix)
    img = packed_view(raw, pic.width, pic.height, pic.ws, pic.hs, 3)
    if pic.fmt == "rgb888":
        img = img[..., ::-1]
    if out is not None:
        out[...] = img
        return out
    return np.ascontiguousarray(img)


def to_npu(rt: Any, pic: Picture, device: str = "npu:0"):
    """Copy ``pic`` (with its strides) into a new ``uint8`` torch-npu tensor on ``device``, device to device.

    NV12 comes back as a 2-D ``(hs * 3/2, ws)`` tensor, which the torch backend's NV12 conversion crops
    from its strides itself (:mod:`dvpipe.backends._torch.colour`); packed pictures as ``(hs, ws)``.
    Needs torch-npu. Written against the pyACL/torch-npu APIs; not yet run on a device (docs/dvpp.md).
    """
    from ..._optional import require

    torch = require("torch")
    require("torch_npu")
    rows = pic.hs * 3 // 2 if pic.fmt in ("nv12", "nv21") else pic.hs
    t = torch.empty((rows, pic.ws), dtype=torch.uint8, device=device)
    rt.device_copy(t.data_ptr(), rows * pic.ws, pic.buf.ptr, rows * pic.ws, picture=f"{pic.width}x{pic.height}")
    return t


def on_device(ctx: Any) -> bool:
    """Whether the step hands its picture on in device memory (its planned output is not on the host)."""
    spec = getattr(ctx, "spec_out", None)
    return spec is not None and getattr(spec, "placement", "host") != "host"


def batch_slot(ctx: Any) -> Any:
    """The camera's slot of a per-batch device buffer when the step's output goes straight into it (the
    AIPP route: ``ctx.slot`` is a batch-slot :class:`~dvpipe.device.DeviceTensor` and the step writes NV12),
    else None."""
    slot = getattr(ctx, "slot", None)
    spec = getattr(ctx, "spec_out", None)
    if slot is None or spec is None or getattr(slot, "meta", {}).get("batch_slot") is None:
        return None
    from ...types import PixelFormat

    return slot if spec.pixel_format is PixelFormat.NV12 else None


def _teardown(rt: Any, extra: dict, handles: dict) -> None:
    """The teardown of one step state (see :meth:`StepState.close`)."""
    engine = extra.pop("vdec", None)
    extra.pop("decoder", None)
    held = extra.pop("held", None)
    template = extra.pop("canvas_template", None)
    steps: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
    if held is not None:
        steps.append((release, (rt, pool_for(rt), held)))
    if template is not None:
        steps.append((pool_for(rt).release, (template,)))
    if engine is not None:
        steps.append((engine.close, ()))
    for key, fn in (("resize_cfg", rt.destroy_resize_config), ("channel", rt.destroy_channel),
                    ("stream", rt.destroy_stream)):
        if handles.get(key):
            steps.append((fn, (handles.pop(key),)))
    for fn, args in steps:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - teardown goes on
            pass
    rt.unhold()


@dataclass(eq=False)
class StepState:
    """What one camera's DVPP step keeps from frame to frame (in the kernel's ``ctx.state``)."""

    runtime: Any
    pool: BufferPool
    target: Any
    program: Program
    camera: str
    channel: int = 0
    stream: int = 0
    resize_cfg: int = 0
    scratch: dict = field(default_factory=dict)
    frames: int = 0
    extra: dict = field(default_factory=dict)
    closed: bool = False
    #: the step runs what the docs leave open (verified on this device, or being verified): undocumented
    #: picture layouts are borrowed as :func:`layout` says, on every thread of the step
    accept_unknown: bool = False
    #: the camera's colour standard (:func:`.route._colour_standard`), for VDEC pictures; "" = BT.601 narrow
    colour_standard: str = ""
    _fin: Any = field(default=None, repr=False, compare=False)
    _handles: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def open(cls, device: str, target: Any, program: Program, camera: str,
             accept_unknown: bool = False, colour_standard: str = "") -> "StepState":
        """Open the step's stream, DVPP channel and resize configuration (bilinear, set explicitly); the
        runtime is held until :meth:`close`. Whatever was created is released again when a call fails.
        ``colour_standard``: the camera's (what its VDEC pictures hold)."""
        rt = _acl.runtime(device, target).hold()
        s = cls(rt, pool_for(rt), target, program, camera, accept_unknown=accept_unknown,
                colour_standard=colour_standard)
        handles: dict = {}
        s._handles = handles
        s._fin = weakref.finalize(s, _teardown, rt, s.extra, handles)
        try:
            s.stream = handles["stream"] = rt.create_stream()
            s.channel = handles["channel"] = rt.create_channel()
            if any(op.kind != "csc" for op in program.ops):  # only a step that resizes needs one
                s.resize_cfg = handles["resize_cfg"] = rt.resize_config(RESIZE_INTERPOLATION)
        except Exception:
            s.close()
            raise
        _acl.register_closer(s)
        return s

    def close(self) -> None:
        """Release everything the step holds, in the documented order: the VDEC engine (end of stream,
        channel, channel description, callback thread), the resize configuration, the DVPP channel and its
        description, the stream; then the runtime is released (the last holder frees the pooled DVPP memory
        and, on the software device, the context). Idempotent; errors do not stop the teardown. A state
        dropped without ``close`` is torn down the same way when it is garbage-collected or at exit."""
        if self.closed:
            return
        self.closed = True
        if self._fin is not None:
            self._fin()
        self.resize_cfg = self.channel = self.stream = 0

    @property
    def stream_name(self) -> str:
        return f"dvpp:{self.camera}"

    def span(self, name: str, enqueue_ns: int, **attrs: Any) -> DeviceSpan:
        """A device span from ``enqueue_ns`` to now (the stream sync just returned). On the software device a
        unit span (``jpegd+vpc.resize``, ``vdec``, ``vpc``) also carries ``predicted_device_ns`` (None when no
        figure) and ``predicted_basis``: what the step would take on the target from documented throughput
        (:func:`dvpipe.knowledge.throughput.predicted_step_ns`), never set on a device."""
        if self.runtime.is_sim and "direction" not in attrs:
            from ...knowledge.throughput import predicted_step_ns, program_calls

            attrs["predicted_device_ns"], attrs["predicted_basis"] = predicted_step_ns(
                self.target, program_calls(self.program, name))
        return DeviceSpan(name, enqueue_ns, now_ns(), None, unit="dvpp", stream=self.stream_name, attrs=attrs)

    def run_vpc(self, first: Picture, pics: list, rois: list, slot: Any = None) -> tuple[list, list]:
        """Queue the program's VPC calls after ``first``; every picture made is appended to ``pics`` (which
        should already hold ``first``) and every ROI to ``rois`` as soon as it exists, so the caller can
        release them whatever happens. ``slot`` (a batch-slot :class:`~dvpipe.device.DeviceTensor`): the last
        call writes into it, so the picture lands in the per-batch buffer with no copy."""
        if not pics:
            pics.append(first)
        ops = self.program.ops
        canvas = slot is not None and "canvas" in slot.meta
        for k, op in enumerate(ops):
            at = (slot.ptr, slot.nbytes) if slot is not None and not canvas and k == len(ops) - 1 else None
            pics.append(enqueue(self.runtime, self.pool, self.target, self.channel, self.stream, pics[-1], op,
                                self.resize_cfg, rois, at=at, accept_unknown=self.accept_unknown))
        if canvas:
            self.paste_into_canvas(pics, rois, slot)
        return pics, rois

    def paste_into_canvas(self, pics: list, rois: list, slot: Any) -> None:
        """The canvas route (:mod:`.route`): the slot is the padded picture. Its border colour comes from a
        template in DVPP memory (uploaded once per step, then one device-to-device copy a frame, so a slot a
        dropped camera zeroed gets its border back), and the last picture is pasted into its top-left
        (acldvppVpcCropResizePasteAsync: the canvas outside the paste box keeps its content)."""
        rt = self.runtime
        src = pics[-1]
        tmpl = self.extra.get("canvas_template")
        if tmpl is None:
            from .canvas import canvas_nv12

            tmpl = self.pool.acquire(int(slot.nbytes), "canvas")
            self.extra["canvas_template"] = tmpl
            rt.upload(tmpl.ptr, tmpl.size, canvas_nv12(slot).tobytes(), step="canvas template")
        t0 = now_ns()
        rt.device_copy(slot.ptr, slot.nbytes, tmpl.ptr, slot.nbytes, step="canvas border")
        self.extra.setdefault("canvas_spans", []).append(
            DeviceSpan("d2d", t0, now_ns(), None, unit="dvpp", stream=self.stream_name,
                       attrs={"direction": "device_to_device", "bytes": int(slot.nbytes)}))
        canvas = picture_at(rt, self.target, "vpc", "nv12", int(slot.shape[2]), int(slot.shape[1]), slot.ptr,
                            slot.nbytes, accept_unknown=self.accept_unknown)
        pics.append(canvas)
        if not self.resize_cfg:
            self.resize_cfg = self._handles["resize_cfg"] = rt.resize_config(RESIZE_INTERPOLATION)
        w, h = src.width, src.height
        crop_resize_paste(rt, self.channel, self.stream, src, canvas, (0, 0, w - 1, h - 1), (0, 0, w - 1, h - 1),
                          self.resize_cfg, rois)

    def hand_on(self, pics: list, slot: Any, spans: list) -> Any:
        """The step's device output after the stream sync (see :mod:`dvpipe.backends.dvpp`): a view of
        ``slot`` when the picture is in it (written there by VPC, or copied device to device -- a
        ``d2d`` transfer span in ``spans``), else the last picture as a
        :class:`~dvpipe.device.DeviceTensor`, kept alive until this camera's next frame (or :meth:`close`)
        for the next step to read."""
        last = pics[-1]
        spans.extend(self.extra.pop("canvas_spans", ()))
        if slot is not None:
            if last.pooled:  # the decoder's own picture (no VPC call): one device-to-device copy into the slot
                if (last.ws, last.hs) != tuple(slot.strides) or last.nbytes > slot.nbytes:
                    raise StepRefused(f"the decoded picture (stride {last.ws}x{last.hs}) does not fit the batch "
                                      f"slot (stride {slot.strides[0]}x{slot.strides[1]})")
                t0 = now_ns()
                self.runtime.device_copy(slot.ptr, slot.nbytes, last.buf.ptr, last.nbytes, step="to batch slot")
                spans.append(DeviceSpan("d2d", t0, now_ns(), None, unit="dvpp", stream=self.stream_name,
                                        attrs={"direction": "device_to_device", "bytes": last.nbytes}))
            return dataclasses.replace(slot, meta={**slot.meta, **device_tensor(self.runtime, last, self.program,
                                                                                self.colour_standard).meta})
        self.release_held()
        pics.remove(last)
        self.extra["held"] = last
        return device_tensor(self.runtime, last, self.program, self.colour_standard, release=self.release_held)

    def release_held(self) -> None:
        """Return the picture handed on last (its reader is done with it: ``meta["release"]`` of the
        tensor); the next frame or :meth:`close` does it otherwise."""
        old = self.extra.pop("held", None)
        if old is not None:
            release(self.runtime, self.pool, old)

    def finish(self, last: Picture) -> np.ndarray:
        """The host BGR output of the step from its last picture (host CSC and host crop as programmed)."""
        p = self.program
        w, h = last.width, last.height
        buf = self.scratch.get("out")
        if buf is None or buf.shape != (h, w, 3):
            buf = self.scratch["out"] = np.empty((h, w, 3), np.uint8)
        matrix, rng = split_standard(picture_standard(p, self.colour_standard))
        img = to_host(self.runtime, last, p.host_csc and rng, self.scratch, out=buf, matrix=matrix)
        if p.host_crop is not None:
            l, t, cw, ch = p.host_crop
            img = img[t:t + ch, l:l + cw]
        return img

    def cleanup(self, pics: list, rois: list) -> None:
        rt = self.runtime
        for roi in rois:
            try:
                rt.destroy_roi(roi)
            except _acl.AclError:
                pass
        for pic in pics:
            release(rt, self.pool, pic)
