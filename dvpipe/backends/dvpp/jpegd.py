"""JPEGD: JPEG bytes -> NV12 in DVPP memory, then the step's VPC calls, one stream sync, host BGR.

Call sequence per frame (constraints.md §6, pyACL v1):

1. ``acl.media.dvpp_jpeg_get_image_info`` on the host bytes (``ACL_ERROR_UNSUPPORTED_JPEG`` for a
   progressive or arithmetic-coded JPEG: the step then falls back to the next backend for this frame);
   ``acl.media.dvpp_jpeg_predict_dec_size`` for the output buffer;
2. the bitstream into a pooled DVPP buffer (``acl.rt.memcpy``; DVPP buffers are 128-byte aligned);
3. an output picture descriptor with the product's strides (``A(w,128) x A(h,16)`` on 310/910,
   ``A(w,64) x A(h,16)`` on 310P/310B/A2); the picture size is floored to even for YUV420SP (an odd size
   reaches JPEGD only where aligning it or its floored size gives the same stride:
   :func:`dvpipe.knowledge.jpegd_odd_size_question`);
4. ``acl.media.dvpp_jpeg_decode_async``, then the VPC calls of the step on the same stream, one
   ``acl.rt.synchronize_stream``; the decoded size and strides are read back from the descriptor;
5. the last picture handed on in device memory (:meth:`.vpc.StepState.hand_on`): a
   :class:`~dvpipe.device.DeviceTensor`, VPC's output descriptor pointing into the batch slot on the AIPP
   route; a host consumer gets it through the plan's ``transfer`` step (download + NV12 -> BGR).

EXIF orientation: JPEGD applies it (constraints.md §1.1) while dvpipe's ``Decode`` keeps sensor order,
so a JPEG with an orientation other than 1 is refused for DVPP (counted fallback for that frame).
"""
from __future__ import annotations

import struct
from typing import Any, Optional

import numpy as np

from ...codecs import image_info
from ...errors import FrameError
from ...latency.clock import DeviceSpan, now_ns
from . import _codes, vpc
from ._enums import PIXEL_FORMAT
from .support import StepRefused
from .vpc import Picture, StepState, batch_slot, on_device

__all__ = ["exif_orientation", "decode_to_device", "run"]


def exif_orientation(data: bytes) -> int:
    """The EXIF orientation tag (1..8) of a JPEG, 1 when absent or unreadable."""
    mv = memoryview(data)
    i, n = 2, len(mv)
    while i + 4 <= n and mv[i] == 0xFF:
        marker = mv[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        if marker in (0xDA, 0xD9):
            break
        (length,) = struct.unpack(">H", mv[i + 2:i + 4])
        if marker == 0xE1 and bytes(mv[i + 4:i + 10]) == b"Exif\x00\x00":
            tiff = bytes(mv[i + 10:i + 2 + length])
            if len(tiff) < 8:
                return 1
            end = "<" if tiff[:2] == b"II" else ">"
            (ifd,) = struct.unpack(end + "I", tiff[4:8])
            if ifd + 2 > len(tiff):
                return 1
            (count,) = struct.unpack(end + "H", tiff[ifd:ifd + 2])
            for k in range(count):
                e = ifd + 2 + 12 * k
                if e + 12 > len(tiff):
                    break
                tag, _typ, _cnt = struct.unpack(end + "HHI", tiff[e:e + 8])
                if tag == 0x0112:
                    (val,) = struct.unpack(end + "H", tiff[e + 8:e + 10])
                    return val if 1 <= val <= 8 else 1
            return 1
        i += 2 + length
    return 1


def decode_to_device(s: StepState, data: bytes, expect: Optional[tuple[int, int]] = None,
                     spans: Optional[list] = None) -> tuple[Picture, Any]:
    """Queue the JPEGD call for ``data``; returns the output picture and the input buffer (release both
    after the sync). ``expect`` is the camera's ``(height, width)`` in pixels; another size raises StepRefused.
    ``spans``: the bitstream upload is appended to it as an ``h2d`` transfer span with its bytes."""
    rt, pool, target = s.runtime, s.pool, s.target
    w, h, _components = rt.jpeg_info(data)
    if expect is not None and (h, w) != tuple(expect):
        raise StepRefused(f"frame is {w}x{h} but the camera declares {expect[1]}x{expect[0]}; the DVPP step was "
                          "planned for the declared size")
    orient = exif_orientation(data)
    if orient != 1:
        raise StepRefused(f"EXIF orientation {orient}: JPEGD applies it (constraints.md §1.1) but Decode keeps "
                          "sensor order")
    ow, oh = w // 2 * 2, h // 2 * 2
    predicted = rt.jpeg_predict_size(data, PIXEL_FORMAT["nv12"], width=w, height=h)
    out = vpc.new_picture(rt, pool, target, "jpegd", "nv12", ow, oh, "out", min_bytes=predicted,
                          accept_unknown=s.accept_unknown)
    inbuf = pool.acquire_stream(len(data), "jpeg")
    try:
        t0 = now_ns()
        rt.upload(inbuf.ptr, inbuf.size, data)
        if spans is not None:  # the encoded bytes are the only host -> device traffic of a JPEG frame
            spans.append(DeviceSpan("h2d", t0, now_ns(), None, unit="dvpp", stream=s.stream_name,
                                    attrs={"direction": "host_to_device", "bytes": len(data)}))
        rt.jpeg_decode(s.channel, inbuf.ptr, len(data), out.desc, s.stream, width=w, height=h, format="nv12",
                       stride=f"{out.ws}x{out.hs}")
    except Exception:
        vpc.release(rt, pool, out)
        pool.release(inbuf)
        raise
    return out, inbuf


def run(s: StepState, data: Any, ctx: Any) -> Any:
    """One frame through the step: JPEGD, the VPC calls, one sync; the picture stays on the device (a
    :class:`~dvpipe.device.DeviceTensor`, written into the batch slot when the plan gives one) unless the
    step's ``spec_out`` is on the host (a caller outside a plan), then host BGR."""
    if isinstance(data, np.ndarray):
        raise FrameError("a JPEG camera delivers encoded bytes, got a decoded array")
    raw = data if isinstance(data, bytes) else bytes(data)
    info = image_info(raw)  # FrameError for a truncated or non-JPEG frame: a drop, as on the CPU
    if info.format != "jpeg":
        raise FrameError(f"a JPEG camera delivered {info.format.upper()} data")
    rt = s.runtime
    pics: list = []
    rois: list = []
    inbuf = None
    try:
        t0 = now_ns()
        first, inbuf = decode_to_device(s, raw, s.program.in_size, ctx.device_spans)
        pics.append(first)
        slot = batch_slot(ctx)
        s.run_vpc(first, pics, rois, slot)
        rt.synchronize(s.stream, step="jpegd+vpc", camera=s.camera)
        ctx.device_spans.append(s.span("jpegd" + "".join(f"+vpc.{op.kind}" for op in s.program.ops), t0,
                                       size=f"{info.width}x{info.height}"))
        dw, dh, dws, dhs, ret_code = rt.pic_info(first.desc)
        if ret_code or (dh, dw) != s.program.decode_size or dws * dhs * 3 // 2 > first.buf.size:
            raise StepRefused(f"JPEGD wrote {dw}x{dh} at stride {dws}x{dhs} (picture ret code "
                              f"{_codes.picture_ret_code(ret_code)}); the step expects "
                              f"{s.program.decode_size[1]}x{s.program.decode_size[0]} in {first.buf.size} bytes")
        first.width, first.height, first.ws, first.hs = dw, dh, dws, dhs  # what the device wrote, for hand-on
        s.frames += 1
        if on_device(ctx):
            return s.hand_on(pics, slot, ctx.device_spans)
        t1 = now_ns()  # a caller outside a plan (the probe, a smoke test) asked for host BGR
        out = s.finish(pics[-1])
        ctx.device_spans.append(s.span("d2h", t1, direction="device_to_host", bytes=pics[-1].nbytes))
        return out
    finally:
        s.cleanup(pics, rois)
        if inbuf is not None:
            s.pool.release(inbuf)
