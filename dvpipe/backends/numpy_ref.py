"""The reference backend: plain numpy in float64, one op per kernel, slow and obviously correct.

It is the oracle the other backends are tested against. Decoding uses OpenCV (the decoder the
mmdet3d reference uses); everything after decode is written out from the definitions:

* ``linear`` resize — OpenCV ``INTER_LINEAR``: for output index ``x``, the source position is
  ``sx = (x + 0.5) * W/W' - 0.5``; ``x0 = floor(sx)``, ``f = sx - x0``; positions left of 0 clamp
  to (0, f=0); ``x0 + 1`` clamps to ``W - 1``. Separable: ``out = Wy @ img @ Wx.T``.
* ``area`` resize — OpenCV ``INTER_AREA``, whose rule is a property of the 2-D resize, not of an axis
  (``cv::hal::resize`` in ``imgproc/src/resize.cpp``: true area averaging only
  ``if (interpolation == INTER_AREA && scale_x >= 1 && scale_y >= 1)``, ``scale = in/out``). When
  neither axis grows, each output pixel is the overlap-weighted mean of the source pixels its
  footprint ``[x*W/W', (x+1)*W/W')`` covers, on both axes. When either axis grows, OpenCV emulates
  area with bilinear-like weights on BOTH axes, the shrinking one included:
  ``sx = floor(x*scale)``, ``fx = (x+1) - (sx+1)/scale`` rounded to float32 (0 if ``<= 0``, else its
  fractional part), with ``scale = 1 / (W'/W)`` in double as OpenCV computes it, taps ``(1 - fx, fx)`` on ``(sx, sx + 1)``, clamped at the borders as ``linear``.
* ``nearest`` — OpenCV ``INTER_NEAREST`` (``resizeNN``): ``sx = min(floor(x * ifx), W - 1)`` with
  ``ifx = 1 / (W'/W)`` in double, as OpenCV computes it; where ``x * W/W'`` is a whole number the double
  product can fall just short of it, and the pixel below is picked (161 -> 63: column 45 reads 114, not 115).
* ``pil_bicubic`` — Pillow's ``Image.resize(size)`` default filter on uint8 (``Resampling.BICUBIC``,
  ``a = -0.5``, antialiased: the kernel support grows by the shrink factor), written out from
  Pillow's ``libImaging/Resample.c``: per axis, double coefficients normalised to sum 1, then fixed
  point with 22 fraction bits rounded half away from zero; two passes (a pass runs only if its axis
  changes size), each rounded and clipped to uint8 (``(acc + 2**21) >> 22``). The pass order is
  Pillow's (13 by default: the vertical pass first when ``out_h < h and h - out_h > 2 * (w - out_w)``,
  e.g. whenever the height shrinks and the width does not; earlier versions: :func:`pil_vertical_first`);
  it changes the rounded intermediate, so it matters. Exact
  integer arithmetic, so the result is bit-identical to Pillow's.
"""
from __future__ import annotations

import math

import numpy as np

from ..codecs import RAW_YUV_ENCODINGS
from ..stages.kernel_registry import KernelContext, register_kernel
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


def area_shrink_weights(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` matrix of OpenCV INTER_AREA's true area averaging along one axis (``n_out <= n_in``;
    only valid when the other axis does not grow either: :func:`resize_weights`)."""
    scale = n_in / n_out
    w = np.zeros((n_out, n_in))
    for x in range(n_out):
        a, b = x * scale, (x + 1) * scale
        for i in range(int(math.floor(a)), min(int(math.ceil(b)), n_in)):
            w[x, i] = max(0.0, min(b, i + 1) - max(a, i))
        w[x] /= w[x].sum()
    return w


def area_enlarge_weights(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` matrix of OpenCV INTER_AREA's bilinear-like emulation along one axis, used on both
    axes when either grows (:func:`resize_weights`); the axis itself may shrink."""
    # OpenCV's own arithmetic, which decides which tap a position on an integer lands on: inv_scale =
    # dsize / ssize and scale = 1 / inv_scale in double (x * scale can fall just short of an integer
    # that x * n_in / n_out hits), fx rounded to float before taking its fractional part (a value
    # just under 1 becomes 1, then 0)
    inv = n_out / n_in
    scale = 1.0 / inv
    w = np.zeros((n_out, n_in))
    for x in range(n_out):
        sx = math.floor(x * scale)
        f = float(np.float32((x + 1) - (sx + 1) * inv))
        f = 0.0 if f <= 0 else f - math.floor(f)
        if sx < 0:
            sx, f = 0, 0.0
        if sx >= n_in - 1:
            sx, f = n_in - 1, 0.0
        w[x, sx] += 1.0 - f
        w[x, min(sx + 1, n_in - 1)] += f
    return w


def nearest_weights(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` matrix of OpenCV INTER_NEAREST along one axis: one weight 1 per output index."""
    # OpenCV's own arithmetic (resizeNN): fx = dsize / ssize and ifx = 1 / fx in double, then floor(x * ifx);
    # exact x * n_in / n_out would pick one pixel higher where x * ifx falls just short of a whole number
    ifx = 1.0 / (n_out / n_in)
    w = np.zeros((n_out, n_in))
    for x in range(n_out):
        w[x, min(math.floor(x * ifx), n_in - 1)] = 1.0
    return w


#: per-axis rules; ``area`` is not one (its rule depends on both axes): :func:`resize_weights`
_AXIS_WEIGHTS = {"linear": linear_weights, "nearest": nearest_weights}


def area_shrinks(in_hw: tuple[int, int], out_hw: tuple[int, int]) -> bool:
    """Whether OpenCV's INTER_AREA takes its area-averaging path for this 2-D resize: neither axis grows
    (``scale_x >= 1 && scale_y >= 1`` in ``cv::hal::resize``)."""
    return out_hw[0] <= in_hw[0] and out_hw[1] <= in_hw[1]


def resize_weights(in_hw: tuple[int, int], out_hw: tuple[int, int],
                   interpolation: str) -> tuple[np.ndarray, np.ndarray]:
    """``(Wy, Wx)``: the row and column weight matrices of an ``(h, w) -> (out_h, out_w)`` resize
    (``out = Wy @ img @ Wx.T``)."""
    (h, w), (oh, ow) = in_hw, out_hw
    if interpolation == "area":
        rule = area_shrink_weights if area_shrinks(in_hw, out_hw) else area_enlarge_weights
        return rule(h, oh), rule(w, ow)
    axis = _AXIS_WEIGHTS[interpolation]
    return axis(h, oh), axis(w, ow)


#: Pillow's fixed-point fraction bits for 8-bit images (``PRECISION_BITS = 32 - 8 - 2``).
PIL_PRECISION_BITS = 22


def _pil_bicubic(x: float) -> float:
    # Pillow's bicubic_filter with a = -0.5, same operation order (the doubles must match)
    a = -0.5
    if x < 0.0:
        x = -x
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def pil_bicubic_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's bicubic taps along one axis: ``(first, coeffs)`` where output ``i`` is
    ``sum_k coeffs[i, k] * in[first[i] + k]`` in fixed point (``coeffs`` int64, 22 fraction bits,
    zero past each output's last tap)."""
    scale = n_in / n_out
    filterscale = max(scale, 1.0)
    support = 2.0 * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    first = np.zeros(n_out, dtype=np.int64)
    coeffs = np.zeros((n_out, ksize), dtype=np.int64)
    one = 1 << PIL_PRECISION_BITS
    for xx in range(n_out):
        center = (xx + 0.5) * scale
        ss = 1.0 / filterscale
        xmin = max(int(center - support + 0.5), 0)  # C's (int) truncates toward zero, as int() does
        xmax = min(int(center + support + 0.5), n_in) - xmin
        ws = [_pil_bicubic((x + xmin - center + 0.5) * ss) for x in range(xmax)]
        ww = 0.0
        for w in ws:
            ww += w
        first[xx] = xmin
        for x, w in enumerate(ws):
            k = w / ww if ww != 0.0 else w
            coeffs[xx, x] = int(0.5 + k * one) if k >= 0 else int(-0.5 + k * one)
    return first, coeffs


def _pil_pass(img: np.ndarray, n_out: int, axis: int) -> np.ndarray:
    n_in = img.shape[axis]
    first, coeffs = pil_bicubic_taps(n_in, n_out)
    x = np.moveaxis(img, axis, 0).astype(np.int64)
    acc = np.full((n_out,) + x.shape[1:], 1 << (PIL_PRECISION_BITS - 1), dtype=np.int64)
    extra = (1,) * (x.ndim - 1)
    for k in range(coeffs.shape[1]):
        idx = np.minimum(first + k, n_in - 1)  # taps past the end carry weight 0
        acc += coeffs[:, k].reshape((-1,) + extra) * x[idx]
    out = np.clip(acc >> PIL_PRECISION_BITS, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def pil_vertical_first(w: int, h: int, out_w: int, out_h: int, pillow: tuple[int, int] = (13, 0)) -> bool:
    """Whether Pillow's ``Image.resize((out_w, out_h))`` of a ``w x h`` image runs the vertical pass first.

    * Pillow < 12.2: never (``ImagingResampleInner``: horizontal pass, then vertical).
    * Pillow 12.2 - 12.x: ``Image.resize`` resizes the height alone first when ``h > 100 * w`` and the
      height shrinks (``if self.size[1] > self.size[0] * 100 and size[1] < self.size[1]``).
    * Pillow 13: the order moved into ``ImagingResampleInner`` (python-pillow/Pillow#9549 reads
      ``horizontal_first = !(xsize >= box width && ysize < box height)``). Pillow 13.0.0 also runs the
      vertical pass first in some cases where both axes shrink; the rule it follows in every case
      measured (tests/backends/test_resize_rules.py) is ``out_h < h and h - out_h > 2 * (w - out_w)``,
      which is #9549's rule whenever the width does not shrink.
    """
    if tuple(pillow) >= (13, 0):
        return out_h < h and h - out_h > 2 * (w - out_w)
    if tuple(pillow) >= (12, 2):
        return h > w * 100 and out_h < h
    return False


def resize_pil_uint8(img: np.ndarray, out_w: int, out_h: int, pillow: tuple[int, int] = (13, 0)) -> np.ndarray:
    """``PIL.Image.fromarray(img).resize((out_w, out_h))`` for an HxW[xC] uint8 array, without Pillow
    (``pillow``: the Pillow version whose pass order to follow, :func:`pil_vertical_first`)."""
    if img.dtype != np.uint8:
        raise TypeError(f"pil_bicubic resizes uint8 images, got {img.dtype}")
    h, w = img.shape[:2]
    passes = [(out_w, 1, w), (out_h, 0, h)]
    if pil_vertical_first(w, h, out_w, out_h, pillow):
        passes.reverse()
    out = img
    for n_out, axis, n_in in passes:
        if n_out != n_in:  # Pillow skips a pass whose size does not change
            out = _pil_pass(out, n_out, axis)
    return np.ascontiguousarray(out) if out is not img else img.copy()


def resize_ref(img: np.ndarray, out_w: int, out_h: int, interpolation: str) -> np.ndarray:
    """Resize an HxWxC array in float64 with the weights above."""
    wy, wx = resize_weights(img.shape[:2], (out_h, out_w), interpolation)
    x = img.astype(np.float64)
    return np.einsum("yh,hwc,xw->yxc", wy, x, wx, optimize=True)


@register_kernel("decode", backend="reference", name="cv2.imdecode")
def _decode(data, stages, ctx: KernelContext):
    if ctx.spec_in.encoding in RAW_YUV_ENCODINGS:  # raw camera frames: the YUV -> BGR formula in float64
        from ._raw_yuv import colour_of, to_bgr_reference

        return to_bgr_reference(data, ctx.spec_in.encoding, ctx.spec_in.width, ctx.spec_in.height,
                                *colour_of(ctx.camera))
    return decode_bgr(data, ctx.spec_in, on_corrupt=ctx.corrupt)


@register_kernel("resize", backend="reference", name="numpy_resize")
def _resize(data, stages, ctx: KernelContext):
    (st,) = stages
    if st.interpolation == "pil_bicubic":
        return resize_pil_uint8(data, ctx.spec_out.width, ctx.spec_out.height)
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


# -- undistortion: the lens models written out, inverse mapping, bilinear sampling (no OpenCV) ----------
def distort_normalised(x: np.ndarray, y: np.ndarray, model: str, coeffs) -> tuple[np.ndarray, np.ndarray]:
    """Apply a lens model to ideal normalised coordinates ``(x, y) = (X/Z, Y/Z)`` (float64 arrays).

    ``pinhole``: OpenCV's radial-tangential model, ``(k1, k2, p1, p2[, k3[, k4, k5, k6]])``;
    ``fisheye``: OpenCV's equidistant model, ``(k1, k2, k3, k4)`` on ``theta = atan(r)``
    (formulas: :class:`dvpipe.types.Distortion`).
    """
    c = list(coeffs)
    if model == "fisheye":
        k1, k2, k3, k4 = c
        r = np.hypot(x, y)
        theta = np.arctan(r)
        t2 = theta * theta
        theta_d = theta * (1 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))))
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(r > 1e-12, theta_d / r, 1.0)
        return x * scale, y * scale
    k1, k2, p1, p2 = c[:4]
    k3 = c[4] if len(c) > 4 else 0.0
    k4, k5, k6 = (c[5], c[6], c[7]) if len(c) > 5 else (0.0, 0.0, 0.0)
    r2 = x * x + y * y
    radial = (1 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1 + r2 * (k4 + r2 * (k5 + r2 * k6)))
    xd = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    yd = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    return xd, yd


def undistort_map(K: np.ndarray, model: str, coeffs, K_new: np.ndarray, width: int,
                  height: int) -> tuple[np.ndarray, np.ndarray]:
    """For every output pixel, where to sample the distorted image: ``(map_x, map_y)``, ``(H, W)`` float64,
    in sample-index terms (pixel ``i``'s centre is index ``i``).

    Pixel convention of :mod:`dvpipe.geometry`: output pixel ``(i, j)`` is the point ``(i + 0.5, j + 0.5)``;
    the ray is ``K_new^-1 [u, v, 1]``, the lens model bends it, ``K`` maps it to the source's continuous
    coordinates, and ``- 0.5`` turns those into sample indices.
    """
    u, v = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    inv = np.linalg.inv(np.asarray(K_new, dtype=np.float64))
    X = inv[0, 0] * u + inv[0, 1] * v + inv[0, 2]
    Y = inv[1, 0] * u + inv[1, 1] * v + inv[1, 2]
    Z = inv[2, 0] * u + inv[2, 1] * v + inv[2, 2]
    xd, yd = distort_normalised(X / Z, Y / Z, model, coeffs)
    K = np.asarray(K, dtype=np.float64)
    us = K[0, 0] * xd + K[0, 1] * yd + K[0, 2]
    vs = K[1, 1] * yd + K[1, 2]
    return us - 0.5, vs - 0.5


def bilinear_sample(img: np.ndarray, map_x: np.ndarray, map_y: np.ndarray) -> np.ndarray:
    """``img`` (HxWxC) sampled at ``(map_x, map_y)`` (sample indices), bilinear, every tap outside the image 0
    (OpenCV's ``BORDER_CONSTANT`` with value 0); float64 out, ``map_x.shape + (C,)``."""
    h, w = img.shape[:2]
    src = img.astype(np.float64)
    x0, y0 = np.floor(map_x), np.floor(map_y)
    fx, fy = map_x - x0, map_y - y0
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    out = np.zeros(map_x.shape + img.shape[2:], dtype=np.float64)
    for dy, wy in ((0, 1 - fy), (1, fy)):
        for dx, wx in ((0, 1 - fx), (1, fx)):
            xi, yi = x0 + dx, y0 + dy
            inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
            tap = src[np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)]
            weight = np.where(inside, wx * wy, 0.0)
            out += tap * weight[..., None]
    return out


@register_kernel("undistort", backend="reference", name="numpy_undistort")
def _undistort(data, stages, ctx: KernelContext):
    (st,) = stages
    cam = ctx.camera
    maps = ctx.state.get("undistort_map")
    if maps is None:
        d = cam.distortion
        model, coeffs = (d.model, d.coeffs) if d is not None else ("pinhole", (0.0, 0.0, 0.0, 0.0))
        maps = ctx.state["undistort_map"] = undistort_map(cam.intrinsics, model, coeffs, st.new_intrinsics(cam),
                                                          ctx.spec_out.width, ctx.spec_out.height)
    out = bilinear_sample(np.asarray(data), *maps)
    if data.dtype == np.uint8:  # OpenCV rounds to nearest for 8-bit output
        return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)
    return out.astype(data.dtype) if data.dtype != np.float64 else out
