"""The reference backend: plain numpy in float64, one op per kernel, slow and obviously correct.

It is the oracle the other backends are tested against. Decoding uses OpenCV (the decoder the
mmdet3d reference uses); everything after decode is written out from the definitions:

* ``linear`` resize — OpenCV ``INTER_LINEAR``: for output index ``x``, the source position is
  ``sx = (x + 0.5) * W/W' - 0.5``; ``x0 = floor(sx)``, ``f = sx - x0``; positions left of 0 clamp
  to (0, f=0); ``x0 + 1`` clamps to ``W - 1``. Separable: ``out = Wy @ img @ Wx.T``.
* ``area`` resize — for shrinking, each output pixel is the overlap-weighted mean of the source
  pixels its footprint ``[x*W/W', (x+1)*W/W')`` covers (OpenCV ``INTER_AREA``); for enlarging,
  OpenCV's rule ``fx = (x+1) - (floor(x*W/W')+1)*W'/W`` clipped to [0, 1).
* ``nearest`` — ``sx = min(floor(x * W/W'), W - 1)`` (OpenCV ``INTER_NEAREST``).
"""
from __future__ import annotations

import math

import numpy as np

from ..stages.registry import KernelContext, register_kernel
from ._decode import decode_bgr


def linear_weights(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` matrix of OpenCV INTER_LINEAR weights along one axis."""
    scale = n_in / n_out
    w = np.zeros((n_out, n_in))
    for x in range(n_out):
        sx = (x + 0.5) * scale - 0.5
        x0 = math.floor(sx)
        f = sx - x0
        if x0 < 0:
            x0, f = 0, 0.0
        if x0 >= n_in - 1:
            x0, f = n_in - 1, 0.0
        w[x, x0] += 1.0 - f
        w[x, min(x0 + 1, n_in - 1)] += f
    return w


def area_weights(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` matrix of OpenCV INTER_AREA weights along one axis."""
    scale = n_in / n_out
    w = np.zeros((n_out, n_in))
    if scale >= 1.0:  # shrink: footprint overlap
        for x in range(n_out):
            a, b = x * scale, (x + 1) * scale
            for i in range(int(math.floor(a)), min(int(math.ceil(b)), n_in)):
                w[x, i] = max(0.0, min(b, i + 1) - max(a, i))
            w[x] /= w[x].sum()
        return w
    inv = n_out / n_in
    for x in range(n_out):
        sx = math.floor(x * scale)
        f = (x + 1) - (sx + 1) * inv
        f = 0.0 if f <= 0 else f - math.floor(f)
        if sx < 0:
            sx, f = 0, 0.0
        if sx >= n_in - 1:
            sx, f = n_in - 1, 0.0
        w[x, sx] += 1.0 - f
        w[x, min(sx + 1, n_in - 1)] += f
    return w


def nearest_weights(n_in: int, n_out: int) -> np.ndarray:
    w = np.zeros((n_out, n_in))
    for x in range(n_out):
        w[x, min(int(math.floor(x * n_in / n_out)), n_in - 1)] = 1.0
    return w


_WEIGHTS = {"linear": linear_weights, "area": area_weights, "nearest": nearest_weights}


def resize_ref(img: np.ndarray, out_w: int, out_h: int, interpolation: str) -> np.ndarray:
    """Resize an HxWxC array in float64 with the weights above."""
    h, w = img.shape[:2]
    wy = _WEIGHTS[interpolation](h, out_h)
    wx = _WEIGHTS[interpolation](w, out_w)
    x = img.astype(np.float64)
    return np.einsum("yh,hwc,xw->yxc", wy, x, wx, optimize=True)


@register_kernel("decode", backend="reference", name="cv2.imdecode")
def _decode(data, stages, ctx: KernelContext):
    return decode_bgr(data, ctx.spec_in, on_corrupt=ctx.corrupt)


@register_kernel("resize", backend="reference", name="numpy_resize")
def _resize(data, stages, ctx: KernelContext):
    (st,) = stages
    out = resize_ref(data, ctx.spec_out.width, ctx.spec_out.height, st.interpolation)
    if data.dtype == np.uint8:  # OpenCV rounds to nearest for 8-bit output
        return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)
    return out


@register_kernel("crop", backend="reference", name="numpy_crop")
def _crop(data, stages, ctx: KernelContext):
    (st,) = stages
    return data[st.top:st.top + st.height, st.left:st.left + st.width]


@register_kernel("normalise", backend="reference", name="numpy_normalise")
def _normalise(data, stages, ctx: KernelContext):
    (st,) = stages
    x = data.astype(np.float64)
    if st.to_rgb:
        x = x[..., ::-1]
    return (x - np.array(st.mean)) / np.array(st.std)


@register_kernel("pad", backend="reference", name="numpy_pad")
def _pad(data, stages, ctx: KernelContext):
    (st,) = stages
    h, w = data.shape[:2]
    out = np.full((ctx.spec_out.height, ctx.spec_out.width) + data.shape[2:], st.value, dtype=np.float64)
    out[:h, :w] = data
    return out


@register_kernel("batch", backend="reference", name="numpy_chw")
def _batch(data, stages, ctx: KernelContext):
    ctx.out[...] = np.transpose(np.asarray(data), (2, 0, 1))
    return ctx.out
