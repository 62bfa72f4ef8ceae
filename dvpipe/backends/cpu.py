"""The CPU backend: OpenCV (libjpeg-turbo, SIMD resize/arithmetic) and numpy.

Fast paths (each registered as one fused kernel):

* ``normalise+pad+batch`` (and the same with a resize before or after normalise): per colour
  plane, one ``cv2.addWeighted(plane, 1/std, plane, 0, -mean/std, dtype=CV_32F)`` converts
  uint8 -> float, normalises and writes CHW straight into the camera's slot of the reused batch
  buffer; only the pad strip is cleared. Every output byte is written once.
* ``decode+resize`` at fidelity ``fast``: JPEG DCT-domain downscaling (libjpeg decodes at 1/2,
  1/4 or 1/8 scale), then a small resize to the exact target. Not bit-identical to bilinear
  resizing of the full decode; the deviation is measured in the tests and documented.

The cameras of a frame set run in parallel threads (the pipeline's pool); OpenCV and
libjpeg-turbo release the GIL.
"""
from __future__ import annotations

import cv2
import numpy as np

from ..stages.registry import KernelContext, KernelQuery, Verdict, register_kernel
from ..types import PixelFormat
from ._decode import decode_bgr

_INTERP = {"linear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA, "nearest": cv2.INTER_NEAREST}


def _scratch(ctx: KernelContext, key: str, shape: tuple, dtype) -> np.ndarray:
    buf = ctx.state.get(key)
    if buf is None or buf.shape != shape or buf.dtype != dtype:
        buf = ctx.state[key] = np.empty(shape, dtype)
    return buf


@register_kernel("decode", backend="cpu", name="cv2.imdecode")
def _decode(data, stages, ctx: KernelContext):
    return decode_bgr(data, ctx.spec_in)


def _dct_reduce(q: KernelQuery) -> int:
    dec, rs = q.stages
    w_in, h_in = q.spec_in.size
    w_out, h_out = q.spec_out.size
    for r in (8, 4, 2):
        if -(-w_in // r) >= w_out and -(-h_in // r) >= h_out:
            return r
    return 1


def _supports_dct(q: KernelQuery) -> Verdict:
    if q.fidelity != "fast":
        return Verdict.no("DCT-domain scaling only at fidelity 'fast' (reference resizes the full decode bilinearly)")
    if q.spec_in.encoding != "jpeg":
        return Verdict.no(f"DCT-domain scaling needs JPEG input, got {q.spec_in.encoding or q.spec_in.pixel_format.value}")
    if q.stages[1].interpolation == "nearest":
        return Verdict.no("DCT-domain scaling is not a nearest-neighbour resize")
    r = _dct_reduce(q)
    if r == 1:
        return Verdict.no("shrink below 2x: DCT-domain scaling does not apply")
    return Verdict.yes(f"JPEG decoded at 1/{r} scale in the DCT domain")


@register_kernel(("decode", "resize"), backend="cpu", supports=_supports_dct, name="cv2.imdecode_reduced")
def _decode_resize(data, stages, ctx: KernelContext):
    dec, rs = stages
    q = KernelQuery(stages, ctx.spec_in, (ctx.spec_out, ctx.spec_out), ctx.camera, ctx.backend, ctx.fidelity)
    img = decode_bgr(data, ctx.spec_in, reduce=_dct_reduce(q))
    w, h = ctx.spec_out.size
    if img.shape[1] != w or img.shape[0] != h:
        img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
    return img


@register_kernel("resize", backend="cpu", name="cv2.resize")
def _resize(data, stages, ctx: KernelContext):
    (st,) = stages
    return cv2.resize(data, ctx.spec_out.size, interpolation=_INTERP[st.interpolation])


@register_kernel("crop", backend="cpu", name="slice")
def _crop(data, stages, ctx: KernelContext):
    (st,) = stages
    return data[st.top:st.top + st.height, st.left:st.left + st.width]


@register_kernel("normalise", backend="cpu", name="numpy_normalise")
def _normalise(data, stages, ctx: KernelContext):
    (st,) = stages
    order = [2, 1, 0] if st.to_rgb else [0, 1, 2]
    out = np.empty(data.shape[:2] + (3,), dtype=st.dtype)
    for c, src in enumerate(order):
        out[..., c] = (data[..., src].astype(np.float32) - np.float32(st.mean[c])) * np.float32(1.0 / st.std[c])
    return out


@register_kernel("pad", backend="cpu", name="cv2.copyMakeBorder")
def _pad(data, stages, ctx: KernelContext):
    (st,) = stages
    h, w = data.shape[:2]
    return cv2.copyMakeBorder(data, 0, ctx.spec_out.height - h, 0, ctx.spec_out.width - w,
                              cv2.BORDER_CONSTANT, value=(st.value,) * 4)


@register_kernel("batch", backend="cpu", name="chw_copy")
def _batch(data, stages, ctx: KernelContext):
    out = ctx.out
    for c in range(3):
        np.copyto(out[c], data[..., c], casting="unsafe")
    return out


def _fill_pad(out: np.ndarray, h: int, w: int, value: float) -> None:
    if h < out.shape[1]:
        out[:, h:, :] = value
    if w < out.shape[2]:
        out[:, :h, w:] = value


def _split_stages(stages):
    by_op = {s.op: s for s in stages}
    return by_op.get("resize"), by_op["normalise"], by_op.get("pad")


def _normalise_into(plane_u8: np.ndarray, dst: np.ndarray, mean: float, std: float, ctx: KernelContext, key: str):
    """uint8 plane -> (x - mean) / std into ``dst`` (float32 directly; float16 through a scratch plane)."""
    if dst.dtype == np.float32:
        cv2.addWeighted(plane_u8, 1.0 / std, plane_u8, 0.0, -mean / std, dst=dst, dtype=cv2.CV_32F)
    else:
        tmp = _scratch(ctx, key + "f32", plane_u8.shape, np.float32)
        cv2.addWeighted(plane_u8, 1.0 / std, plane_u8, 0.0, -mean / std, dst=tmp, dtype=cv2.CV_32F)
        np.copyto(dst, tmp, casting="unsafe")


def _fused_write(data, stages, ctx: KernelContext):
    """Normalise (+ resize before or after it) + pad + CHW, written into the batch slot."""
    resize, norm, pad = _split_stages(stages)
    resize_first = resize is not None and stages[0].op == "resize"
    out = ctx.out
    order = (2, 1, 0) if norm.to_rgb else (0, 1, 2)
    if resize_first:
        w, h = resize.out_size(data.shape[1], data.shape[0])
        data = cv2.resize(data, (w, h), interpolation=_INTERP[resize.interpolation])
    h, w = data.shape[:2]
    if resize is not None and not resize_first:
        ow, oh = resize.out_size(w, h)
        for c, src in enumerate(order):
            plane = cv2.extractChannel(data, src, dst=_scratch(ctx, f"u8{c}", (h, w), np.uint8))
            full = _scratch(ctx, f"f32{c}", (h, w), np.float32)
            cv2.addWeighted(plane, 1.0 / norm.std[c], plane, 0.0, -norm.mean[c] / norm.std[c], dst=full, dtype=cv2.CV_32F)
            if out.dtype == np.float32:
                cv2.resize(full, (ow, oh), dst=out[c, :oh, :ow], interpolation=_INTERP[resize.interpolation])
            else:
                np.copyto(out[c, :oh, :ow], cv2.resize(full, (ow, oh), interpolation=_INTERP[resize.interpolation]),
                          casting="unsafe")
        h, w = oh, ow
    else:
        for c, src in enumerate(order):
            plane = cv2.extractChannel(data, src, dst=_scratch(ctx, f"u8{c}", (h, w), np.uint8))
            _normalise_into(plane, out[c, :h, :w], norm.mean[c], norm.std[c], ctx, f"n{c}")
    _fill_pad(out, h, w, pad.value if pad is not None else 0.0)
    return out


def _supports_fused(q: KernelQuery) -> Verdict:
    if q.spec_in.pixel_format is not PixelFormat.BGR or q.spec_in.dtype != "uint8":
        return Verdict.no(f"fused normalise writes need uint8 BGR input, got {q.spec_in}")
    return Verdict.yes()


for _ops in [("normalise", "pad", "batch"), ("normalise", "batch"),
             ("normalise", "resize", "pad", "batch"), ("normalise", "resize", "batch"),
             ("resize", "normalise", "pad", "batch"), ("resize", "normalise", "batch")]:
    register_kernel(_ops, backend="cpu", supports=_supports_fused, name="fused_" + "_".join(_ops))(_fused_write)
