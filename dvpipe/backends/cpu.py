"""The CPU backend: libjpeg-turbo (simplejpeg or OpenCV), OpenCV SIMD kernels and numpy.

What runs, per camera (the cameras of a frame set run in the pipeline's thread pool; the
decoders, OpenCV and numpy's loops release the GIL):

* ``decode`` -- libjpeg-turbo into a buffer reused from one frame set to the next (see
  :mod:`dvpipe.backends._decode`; simplejpeg when installed, bit-identical to ``cv2.imdecode``).
* ``decode+resize`` at fidelity ``fast`` only -- JPEG DCT-domain downscaling: libjpeg decodes at
  1/2, 1/4 or 1/8 scale (4x, 16x, 64x fewer pixels through the IDCT and colour conversion), only
  where that decode is the resize's own sampling: an exact 2x (linear) or 2x/4x/8x (area) box
  shrink (:func:`_dct_reduce`); odd, prime and other sizes decode at full size. Not bit-identical
  to bilinear resizing of the full decode; the deviation is measured in
  ``tests/backends/test_fast_fidelity_sizes.py`` and documented in ``docs/performance.md``.
* fused ``[resize+]normalise[+resize][+pad]+batch`` -- the only float data is the output, written
  straight into the camera's slot of the pipeline's reused batch buffer (CHW, channel order as
  asked); only the pad strip is written besides. Every output byte is written once.

  - float32 output with no resize, a uint8 resize first, or an exact 2x shrink (bevformer-base,
    -tiny): the compiled kernel ``dvpipe.backends._native.normalise_planes`` (``setup.py``
    builds it when a C compiler is present), one pass HWC uint8 -> CHW float32 at the speed of a
    plain store, GIL released. Bit-identical to mmcv's imnormalize when std = 1, within 1 ulp
    otherwise. At exactly 1/2 it takes the exact integer 2x2 sums: OpenCV's INTER_LINEAR at 0.5
    is the 2x2 mean, and the per-channel affine normalisation commutes with a mean, so
    ``resize(normalise(x)) == normalise(mean2x2(x))`` up to float rounding (a few 1e-7).
  - the same without the compiled kernel (or for float16): per colour plane, one
    ``cv2.addWeighted(plane, 1/std, plane, 0, -mean/std, dtype=CV_32F)`` after ``cv2.split``
    (about 1.8x the kernel's time); the 2x2 sums in uint16 by numpy row-pair adds and an
    INTER_LINEAR 2:1 horizontal resize whose 0.5/0.5 weights give ``(2a + 2b) / 2`` exactly,
    in strips that stay in L2.
  - any other scale: per plane, normalise at full resolution into a float scratch plane, then
    ``cv2.resize`` it straight into the output slot (what the reference does, one plane at a time).

Scratch buffers live in the per-(camera, step) ``ctx.state`` and are reused; kernel "programs"
(channel order, coefficients, path) are prepared on the first frame and cached there too.

OpenCV threads: the backend never calls ``cv2.setNumThreads`` (it is process-wide). Parallelism
comes from the pipeline's camera threads; OpenCV's own worker pool adds little on top for these
per-plane ops -- see ``docs/performance.md`` for the measurement and how to pin it to 1.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, cast

import cv2
import numpy as np

from ..codecs import RAW_YUV_ENCODINGS, VIDEO_ENCODINGS, sniff
from ..stages.kernel_registry import KernelContext, KernelQuery, KernelVerdict, fused_runs, register_kernel
from ..types import PixelFormat
from ..video import bgr24, decode_picture, decode_video, picture_bgr, picture_swscale_coef, picture_yuv420
from ._decode import decode_bgr

if TYPE_CHECKING:
    from ..stages.image import Resize

try:  # the compiled kernel (setup.py builds it when a C compiler is present; optional)
    from . import _native
    NATIVE_REASON: Optional[str] = None
except ImportError as _e:  # pragma: no cover - exercised where the extension was not built
    _native = None  # type: ignore[assignment]  # the optional compiled module is absent
    NATIVE_REASON = f"dvpipe.backends._native not built ({_e}); reinstall with a C compiler present"

_INTERP = {"linear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA, "nearest": cv2.INTER_NEAREST}
_CV_DEPTH = {np.dtype(np.float32): cv2.CV_32F, np.dtype(np.float16): cv2.CV_16F}


def _probe_f16() -> bool:
    """Whether this OpenCV writes float16 from addWeighted (OpenCV 5 does; 4.x does not)."""
    try:
        a = np.arange(4, dtype=np.uint8).reshape(1, 4)
        d = np.empty((1, 4), np.float16)
        r = cv2.addWeighted(a, 0.5, a, 0.0, 1.0, dst=d, dtype=cv2.CV_16F)
        return r is d or np.shares_memory(r, d)
    except cv2.error:
        return False


_DIRECT_F16 = _probe_f16()


def _scratch(state: dict, key: str, shape: tuple, dtype) -> np.ndarray:
    buf = state.get(key)
    if buf is None or buf.shape != shape or buf.dtype != dtype:
        buf = state[key] = np.empty(shape, dtype)
    return buf


# -- decode ----------------------------------------------------------------------------------------


def _supports_decode(q: KernelQuery) -> KernelVerdict:
    if q.spec_in.encoding in RAW_YUV_ENCODINGS:  # raw camera frames: a colour conversion (dvpipe.backends._raw_yuv)
        from . import _raw_yuv

        matrix, rng = _raw_yuv.colour_of(q.camera)
        how = "cv2.cvtColor" if (matrix, rng) == ("bt601", "limited") else "the float32 formula"
        return KernelVerdict.yes(f"{q.spec_in.encoding.upper()} -> BGR, {matrix.upper()} {rng} range, by {how}")
    if q.spec_in.encoding in VIDEO_ENCODINGS:
        return KernelVerdict.yes(f"{q.spec_in.encoding} access units decoded by PyAV/FFmpeg (software)")
    return KernelVerdict.yes()


# JPEG (libjpeg-turbo), H.264/H.265 (FFmpeg) or raw YUV (OpenCV / the float formula) to HxWx3 BGR
@register_kernel("decode", backend="cpu", supports=_supports_decode, name="decode_bgr")
def _decode(data, stages, ctx: KernelContext):
    if ctx.spec_in.encoding in RAW_YUV_ENCODINGS:
        from . import _raw_yuv

        return _raw_yuv.to_bgr_cv2(data, ctx.spec_in.encoding, ctx.spec_in.width, ctx.spec_in.height,
                                   *_raw_yuv.colour_of(ctx.camera))
    if ctx.spec_in.encoding in VIDEO_ENCODINGS:  # access units in, the picture of this frame out (reordered)
        return decode_video(data, ctx)
    return decode_bgr(data, ctx.spec_in, state=ctx.state, decoder="auto", on_corrupt=ctx.corrupt)


def _dct_reduce(spec_in, spec_out, interpolation: str = "linear") -> int:
    """The DCT-domain scale 1/r (r in 8, 4, 2) whose decode *is* the resize's sampling, or 1 (none).

    Pixel convention (corner origin, what OpenCV and the reference use): output pixel ``x`` of a
    ``W -> W'`` resize samples source position ``u = (x + 0.5) * W / W'``. libjpeg's 1/r decode
    has ``ceil(W / r)`` pixels, pixel ``j`` the low-pass of source ``[r j, r j + r)`` -- the r x r
    box mean, up to the shortcut's own filter. That decode stands for the reference only where the
    reference itself is that box mean:

    * ``W == r W'`` and ``H == r H'`` exactly (then ``ceil(W / r) == W'``: nothing else to resample);
    * ``area`` at any such r (INTER_AREA at an integer factor is the r x r box mean), ``linear``
      at r = 2 only (INTER_LINEAR at exactly 1/2 samples ``2x + 0.5``: the 2x2 mean; at 1/4 it is
      the mean of the 2x2 *centre* of each 4x4 block, which a 1/4 decode does not have).

    Anywhere else (odd or prime sizes: ``W / W' = 2 + 1/W'``, a bilinear grid that drifts from
    2x2 means at the left edge to point samples of single source pixels mid-image) a 1/r decode has
    lost what the reference samples: even resampled on the exact reference grid it deviates by
    mean 0.008-0.074 / p99 0.05-0.58 normalised units on real photographs (docs/performance.md), so
    ``fast`` decodes at full size and resizes in uint8 instead (mean ~0.004, p99 ~0.01).
    """
    h_in, w_in = spec_in.size
    h_out, w_out = spec_out.size
    for r in ((8, 4, 2) if interpolation == "area" else (2,) if interpolation == "linear" else ()):
        if w_in == r * w_out and h_in == r * h_out:
            return r
    return 1


def _supports_dct(q: KernelQuery) -> KernelVerdict:
    if q.fidelity != "fast":
        return KernelVerdict.no("DCT-domain scaling only at fidelity 'fast' (reference resizes the full decode bilinearly)")
    if q.spec_in.encoding != "jpeg":
        return KernelVerdict.no(f"DCT-domain scaling needs JPEG input, got {q.spec_in.encoding or q.spec_in.pixel_format.value}")
    interp = cast("Resize", q.stages[1]).interpolation
    if interp == "nearest":
        return KernelVerdict.no("DCT-domain scaling is not a nearest-neighbour resize")
    r = _dct_reduce(q.spec_in, q.spec_out, interp)
    if r == 1:
        return KernelVerdict.no(f"{q.spec_in.width}x{q.spec_in.height} -> {q.spec_out.width}x{q.spec_out.height} {interp} is "
                                "not an exact " + ("2x" if interp == "linear" else "2x, 4x or 8x") +
                                " box shrink: a DCT-scaled decode would not sample what the reference does")
    return KernelVerdict.yes(f"JPEG decoded at 1/{r} scale in the DCT domain")


#: chroma axes (horizontal, vertical) a 1/2-scale decode subsamples, by JPEG subsampling
_CHROMA_AXES = {"420": (True, True), "422": (True, False), "440": (False, True)}
_LUMA_BGR = np.array([0.114, 0.587, 0.299], np.float32)  # JFIF's Y weights, in BGR order
_F161 = np.array([1, 6, 1], np.float32) / 8


def _chroma_axes(data, st: dict) -> tuple[bool, bool]:
    """Which axes the frame's chroma is subsampled along (cached per camera by its SOF component bytes)."""
    known = st.get("_sof")
    key = bytes(data[known[0]:known[0] + 19]) if known is not None else None
    hit = st.get("_chroma")
    if key is not None and hit is not None and hit[0] == key:
        return hit[1]
    from ..codecs import jpeg_frame_header

    _, info = jpeg_frame_header(data)
    axes = _CHROMA_AXES.get(info.subsampling, (False, False)) if info.components == 3 else (False, False)
    st["_chroma"] = (key, axes)
    return axes


def _chroma_blur(img: np.ndarray, dst: np.ndarray, h: bool, v: bool) -> np.ndarray:
    """``img`` with its luma kept and its chroma filtered by [1, 6, 1] / 8 along the chosen axes (uint8 BGR)."""
    if _native is not None:
        _native.chroma_blur(img, dst, h, v)
        return dst
    one = np.array([0, 1, 0], np.float32)
    f = cv2.sepFilter2D(img, cv2.CV_32F, _F161 if h else one, _F161 if v else one, borderType=cv2.BORDER_REPLICATE)
    dy = img.astype(np.float32) @ _LUMA_BGR - f @ _LUMA_BGR
    np.copyto(dst, np.clip(np.floor(f + dy[..., None] + 0.5), 0, 255), casting="unsafe")
    return dst


def _decode_reduced(data, ctx: KernelContext, reduce: int, interpolation: str, size: tuple[int, int]):
    """``(HxWx3 uint8 BGR at the resize's output size, whether it is a JPEG decoded at 1/reduce)``. What is not a
    JPEG (a decoded array, PNG bytes on a JPEG camera: the frames ``Decode`` accepts) is taken at full size and
    resized as the reference resizes it -- at an exact 1/r that is the r x r mean the 1/r decode stands for."""
    jpeg = reduce > 1 and not isinstance(data, np.ndarray) and sniff(data) == "jpeg"
    img = decode_bgr(data, ctx.spec_in, reduce=reduce if jpeg else 1, state=ctx.state, decoder="auto",
                     on_corrupt=ctx.corrupt)
    if reduce > 1 and not jpeg:
        h, w = size
        dst = _scratch(ctx.state, "rs", (h, w, 3), np.uint8)
        img = cv2.resize(img, (w, h), dst=dst, interpolation=_INTERP[interpolation])  # OpenCV's dsize is (W, H)
    return img, jpeg


@register_kernel(("decode", "resize"), backend="cpu", supports=_supports_dct, name="libjpeg-turbo-dct-scaled")
def _decode_resize(data, stages, ctx: KernelContext):
    """JPEG -> HxWx3 uint8 BGR at 1/r scale, which is exactly the resize's output size (see :func:`_dct_reduce`).

    At 1/2 a subsampled chroma (4:2:0, 4:2:2, 4:4:0) is decoded at its native resolution, the output
    grid, while the reference upsamples it (libjpeg's fancy 3/4-1/4 filter) before its 2x2 means:
    along each subsampled axis that is ``[1, 6, 1] / 8`` of the native chroma, so the decoded image's
    chroma gets that filter (``_native.chroma_blur``; luma untouched). On real 4:2:0 photographs it
    cuts the deviation from ``reference`` by 3-8x at p99 (KITTI: 0.21 -> 0.03; docs/performance.md).
    """
    st = ctx.state
    reduce = st.get("dct")
    if reduce is None:
        reduce = st["dct"] = _dct_reduce(ctx.spec_in, ctx.spec_out, stages[1].interpolation)
    img, jpeg = _decode_reduced(data, ctx, reduce, stages[1].interpolation, ctx.spec_out.size)
    if reduce != 2 or not jpeg:
        return img
    h, v = _chroma_axes(data, st)
    if not (h or v):
        return img
    return _chroma_blur(img, _scratch(st, "chroma", img.shape, np.uint8), h, v)


def _supports_dct_fused(q: KernelQuery) -> KernelVerdict:
    import dataclasses

    v = _supports_dct(dataclasses.replace(q, stages=q.stages[:2], specs=q.specs[:2]))
    if not v.ok:
        return v
    if _native is None:
        return KernelVerdict.no(NATIVE_REASON or "compiled kernel disabled")
    if q.spec_out.dtype != "float32":
        return KernelVerdict.no(f"the fused DCT kernel writes float32, not {q.spec_out.dtype}")
    return KernelVerdict.yes(v.reason + "; chroma filtered as the reference's upsampling + 2x2 mean, normalised into the slot")


def _decode_resize_write(data, stages, ctx: KernelContext):
    """``decode+resize+normalise[+pad]+batch`` at fidelity ``fast``: the 1/r decode of
    :func:`_decode_resize`, then one compiled pass into the batch slot -- ``normalise_chroma``
    (the chroma filter fused into the normalisation, in float: no uint8 intermediate) where the
    chroma is subsampled at 1/2, ``normalise_planes`` otherwise."""
    st = ctx.state
    prog = st.get("dctprog")
    if prog is None:
        by_op = {s.op: s for s in stages}
        norm, pad = by_op["normalise"], by_op.get("pad")
        h, w = stages[1].out_size(ctx.spec_in.size)
        prog = st["dctprog"] = (_dct_reduce(ctx.spec_in, ctx.spec_in.with_(width=w, height=h), stages[1].interpolation),
                                (2, 1, 0) if norm.to_rgb else (0, 1, 2), tuple(norm.mean),
                                tuple(1.0 / x for x in norm.std), float(pad.value) if pad is not None else 0.0, w, h)
    reduce, order, mean, inv_std, pad_value, w, h = prog
    img, jpeg = _decode_reduced(data, ctx, reduce, stages[1].interpolation, (h, w))
    if img.strides[1:] != (3, 1):
        img = np.ascontiguousarray(img)
    out = _host_view(ctx.out)
    hb, vb = _chroma_axes(data, st) if reduce == 2 and jpeg else (False, False)
    if hb or vb:
        _native.normalise_chroma(img, out[:, :h, :w], order, mean, inv_std, hb, vb)
    else:
        _native.normalise_planes(img, out[:, :h, :w], order, mean, inv_std, 1)
    _fill_pad(out, h, w, pad_value)
    return ctx.out



def _fill_pad(out, h: int, w: int, value: float) -> None:
    """The pad strip of a (3, Hp, Wp) slot whose image is its top-left h x w: bottom rows, then the right
    columns of the image rows (each output byte written once)."""
    hp, wp = out.shape[1:]
    if h < hp:
        out[:, h:, :].fill(value)
    if w < wp:
        out[:, :h, w:].fill(value)


# -- single-stage kernels (used when a user's stage order leaves nothing to fuse) --------------------
@register_kernel("resize", backend="cpu", name="cv2.resize")
def _resize(data, stages, ctx: KernelContext):
    (st,) = stages
    h, w = ctx.spec_out.size
    if st.interpolation == "pil_bicubic":
        return _resize_pil(data, w, h)
    dst = _scratch(ctx.state, "rs", (h, w) + data.shape[2:], data.dtype)
    return cv2.resize(data, (w, h), dst=dst, interpolation=_INTERP[st.interpolation])  # OpenCV's dsize is (W, H)


def _supports_undistort(q: KernelQuery) -> KernelVerdict:
    if q.spec_in.dtype not in ("uint8", "float32"):
        return KernelVerdict.no(f"cv2.remap takes uint8 or float32 pixels, got {q.spec_in.dtype}; undistort before Normalise")
    return KernelVerdict.yes()


@register_kernel("undistort", backend="cpu", supports=_supports_undistort, name="cv2.remap")
def _undistort(data, stages, ctx: KernelContext):
    """``cv2.remap`` (bilinear, border 0) with the camera's maps, made once per camera by
    ``cv2.initUndistortRectifyMap`` / ``cv2.fisheye.initUndistortRectifyMap`` (OpenCV's pixel convention:
    K and K' with ``cx, cy`` 0.5 smaller than dvpipe's)."""
    (st,) = stages
    maps = ctx.state.get("undistort_maps")
    if maps is None:
        maps = ctx.state["undistort_maps"] = undistort_maps_cv2(ctx.camera, st.new_intrinsics(ctx.camera))
    dst = _scratch(ctx.state, "ud", data.shape, data.dtype)
    return cv2.remap(data, maps[0], maps[1], cv2.INTER_LINEAR, dst=dst, borderMode=cv2.BORDER_CONSTANT,
                     borderValue=0)


def undistort_maps_cv2(camera, K_new: np.ndarray, map_type: int = cv2.CV_16SC2) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV's undistortion maps for ``camera`` onto ``K_new`` (both K in dvpipe's pixel convention)."""
    from ..stages.camera import opencv_k

    size = (camera.width, camera.height)
    d = camera.distortion
    K, Kn = opencv_k(camera.intrinsics), opencv_k(K_new)
    if d is not None and d.model == "fisheye":
        return cv2.fisheye.initUndistortRectifyMap(K, d.opencv.reshape(4, 1), np.eye(3), Kn, size, map_type)
    coeffs = d.opencv if d is not None else np.zeros(4)
    return cv2.initUndistortRectifyMap(K, coeffs, None, Kn, size, map_type)


@register_kernel("crop", backend="cpu", name="slice")
def _crop(data, stages, ctx: KernelContext):
    (st,) = stages
    return data[st.top:st.top + st.height, st.left:st.left + st.width]


@register_kernel("normalise", backend="cpu", name="cv2.addWeighted")
def _normalise(data, stages, ctx: KernelContext):
    """uint8 BGR HWC -> float HWC (channel order as asked); per plane, then one merge."""
    (st,) = stages
    h, w = data.shape[:2]
    planes = cv2.split(data, _planes(ctx.state, "u8", (h, w), np.uint8))
    order = (2, 1, 0) if st.to_rgb else (0, 1, 2)
    f = [_scratch(ctx.state, f"f{c}", (h, w), np.float32) for c in range(3)]
    for c, src in enumerate(order):
        cv2.addWeighted(planes[src], 1.0 / st.std[c], planes[src], 0.0, -st.mean[c] / st.std[c], dst=f[c],
                        dtype=cv2.CV_32F)
    out = cv2.merge(f)
    return out if st.dtype == "float32" else out.astype(st.dtype)


@register_kernel("pad", backend="cpu", name="cv2.copyMakeBorder")
def _pad(data, stages, ctx: KernelContext):
    (st,) = stages
    h, w = data.shape[:2]
    return cv2.copyMakeBorder(data, 0, ctx.spec_out.height - h, 0, ctx.spec_out.width - w,
                              cv2.BORDER_CONSTANT, value=(st.value,) * 4)


@register_kernel("batch", backend="cpu", name="chw_copy")
def _batch(data, stages, ctx: KernelContext):
    out = _host_view(ctx.out)
    h, w = data.shape[:2]
    if data.ndim == 2:
        data = data[..., None]
    for c in range(out.shape[0]):
        np.copyto(out[c, :h, :w], data[..., c], casting="unsafe")
    return ctx.out


# -- the fused write kernel --------------------------------------------------------------------------
def _planes(state: dict, key: str, shape: tuple, dtype) -> list:
    lst = state.get(key)
    if lst is None or lst[0].shape != shape or lst[0].dtype != dtype:
        lst = state[key] = [np.empty(shape, dtype) for _ in range(3)]
    return lst


class _Program:
    """What the fused kernel does for one input shape, prepared on the first frame."""

    __slots__ = ("path", "in_shape", "pre", "size", "interp", "order", "alpha", "beta", "pad_value",
                 "depth", "direct", "strip", "native")

    def __init__(self, stages, data: np.ndarray, out: np.ndarray):
        by_op = {s.op: s for s in stages}
        resize, norm, pad = by_op.get("resize"), by_op["normalise"], by_op.get("pad")
        h, w = data.shape[:2]
        self.in_shape = data.shape
        self.pre = None  # uint8 resize before normalising: ((w, h), interp), OpenCV's dsize order
        self.path = "direct"
        self.interp = None
        if resize is not None and stages[0].op == "resize":
            rh, rw = resize.out_size((h, w))
            self.pre = ((rw, rh), _INTERP[resize.interpolation])
            w, h = rw, rh
        elif resize is not None:
            oh, ow = resize.out_size((h, w))
            if resize.interpolation in ("linear", "area") and (w, h) == (2 * ow, 2 * oh):
                self.path = "sum2x2"
            else:
                self.path = "general"
                self.interp = _INTERP[resize.interpolation]
            w, h = ow, oh
        self.size = (w, h)  # (W, H): the dsize of the cv2.resize calls in _fused_write
        # output rows per strip of the sum2x2 path: ~768 KB of uint8 input (2 rows x 2w x 3 each)
        self.strip = min(h, max(16, round(786432 / (12 * w))))
        self.order = (2, 1, 0) if norm.to_rgb else (0, 1, 2)
        self.alpha = tuple(1.0 / s for s in norm.std)
        self.beta = tuple(-m / s for m, s in zip(norm.mean, norm.std))
        self.pad_value = float(pad.value) if pad is not None else 0.0
        self.depth = _CV_DEPTH[out.dtype]
        # addWeighted writes the output dtype itself (float32; float16 on OpenCV 5), resize writes float32 only
        self.direct = out.dtype == np.float32 or (_DIRECT_F16 and self.path != "general")
        # the compiled kernel: float32 output, no resize or an exact 2x shrink; (order, mean, 1/std, shrink)
        self.native = None
        if _native is not None and out.dtype == np.float32 and self.path != "general":
            self.native = (self.order, tuple(norm.mean), self.alpha, 2 if self.path == "sum2x2" else 1)


def _host_view(out):
    """The batch slot as a numpy array (a host torch tensor, when a torch step fell back here, shares memory)."""
    return out if isinstance(out, np.ndarray) else out.numpy()


def _fused_write(data, stages, ctx: KernelContext):
    """``[resize+]normalise[+resize][+pad]+batch`` straight into the camera's batch slot."""
    st = ctx.state
    out = _host_view(ctx.out)
    prog = st.get("prog")
    if prog is None or prog.in_shape != data.shape:
        prog = st["prog"] = _Program(stages, data, out)
    w, h = prog.size
    alpha, beta, order = prog.alpha, prog.beta, prog.order
    if prog.pre is not None:
        size, interp = prog.pre
        data = cv2.resize(data, size, dst=_scratch(st, "pre", (h, w, 3), np.uint8), interpolation=interp)

    if prog.native is not None:
        order, mean, inv_std, shrink = prog.native
        if data.strides[1:] != (3, 1):  # a raw frame given as a view (rgb[..., ::-1], Fortran order...)
            data = np.ascontiguousarray(data)
        _native.normalise_planes(data, out[:, :h, :w], order, mean, inv_std, shrink)
    elif prog.path == "direct":
        planes = cv2.split(data, _planes(st, "u8", (h, w), np.uint8))
        depth = prog.depth
        for c in range(3):
            p = planes[order[c]]
            dst = out[c, :h, :w] if prog.direct else _scratch(st, "f32", (h, w), np.float32)
            cv2.addWeighted(p, alpha[c], p, 0.0, beta[c], dst=dst, dtype=depth if prog.direct else cv2.CV_32F)
            if not prog.direct:
                np.copyto(out[c, :h, :w], dst, casting="unsafe")
    elif prog.path == "sum2x2":
        # exact 2x2 block sums in uint16: row pairs added by numpy (exact), doubled, then a 2:1
        # horizontal INTER_LINEAR whose 0.5/0.5 weights give (2a + 2b) / 2 = a + b exactly; in strips
        # of ~768 KB of input so the uint16 intermediates stay in L2 (-20% at 3840x2160)
        rows = prog.strip
        v = _scratch(st, "v16", (rows, 2 * w, 3), np.uint16)
        s = _scratch(st, "s16", (rows, w, 3), np.uint16)
        planes = _planes(st, "u16", (rows, w), np.uint16)
        depth = prog.depth
        coef = [(order[c], 0.25 * alpha[c], beta[c]) for c in range(3)]
        for r0 in range(0, h, rows):
            n = min(rows, h - r0)
            vv, sv = (v, s) if n == rows else (v[:n], s[:n])
            pv = planes if n == rows else [p[:n] for p in planes]
            np.add(data[2 * r0:2 * (r0 + n):2], data[2 * r0 + 1:2 * (r0 + n):2], out=vv, dtype=np.uint16)
            cv2.add(vv, vv, dst=vv)
            cv2.resize(vv, (w, n), dst=sv, interpolation=cv2.INTER_LINEAR)
            cv2.split(sv, pv)
            for c, (src, a, b) in enumerate(coef):
                p = pv[src]
                if prog.direct:
                    cv2.addWeighted(p, a, p, 0.0, b, dst=out[c, r0:r0 + n, :w], dtype=depth)
                else:
                    tmp = _scratch(st, "f32", (rows, w), np.float32)[:n]
                    cv2.addWeighted(p, a, p, 0.0, b, dst=tmp, dtype=cv2.CV_32F)
                    np.copyto(out[c, r0:r0 + n, :w], tmp, casting="unsafe")
    else:  # general: normalise a plane at full resolution, resize it into the slot
        assert prog.interp is not None  # set for the general path
        ih, iw = data.shape[:2]
        planes = cv2.split(data, _planes(st, "u8", (ih, iw), np.uint8))
        full = _scratch(st, "full", (ih, iw), np.float32)
        for c in range(3):
            p = planes[order[c]]
            cv2.addWeighted(p, alpha[c], p, 0.0, beta[c], dst=full, dtype=cv2.CV_32F)
            if prog.direct:
                cv2.resize(full, (w, h), dst=out[c, :h, :w], interpolation=prog.interp)
            else:
                small = cv2.resize(full, (w, h), dst=_scratch(st, "f32", (h, w), np.float32), interpolation=prog.interp)
                np.copyto(out[c, :h, :w], small, casting="unsafe")

    # the pad strip: bottom rows, then the right columns of the image rows
    _fill_pad(out, h, w, prog.pad_value)
    return ctx.out


def _resize_pil(data: np.ndarray, w: int, h: int) -> np.ndarray:
    """Pillow's ``Image.resize((w, h))`` (default bicubic) on HxWx3 uint8; the numpy re-implementation
    of :mod:`dvpipe.backends.numpy_ref` (bit-identical) when Pillow is not installed."""
    try:
        from PIL import Image
    except ImportError:
        from .numpy_ref import resize_pil_uint8

        return resize_pil_uint8(data, w, h)
    # Pillow resamples each channel alone, so BGR data gives the same bytes as RGB
    return np.asarray(Image.fromarray(np.ascontiguousarray(data)).resize((w, h), Image.Resampling.BICUBIC))


def _supports_fused(q: KernelQuery) -> KernelVerdict:
    if any(s.op == "resize" and cast("Resize", s).interpolation == "pil_bicubic" for s in q.stages):
        return KernelVerdict.no("Pillow's bicubic resize runs on its own (cv2.resize is not Pillow's filter)")
    if q.spec_in.pixel_format is not PixelFormat.BGR or q.spec_in.dtype != "uint8":
        return KernelVerdict.no(f"fused normalise writes need uint8 BGR input, got {q.spec_in}")
    if q.spec_out.dtype not in ("float32", "float16"):
        return KernelVerdict.no(f"fused normalise writes float32 or float16, not {q.spec_out.dtype}")
    if _native is None:
        return KernelVerdict.yes(f"OpenCV path: {NATIVE_REASON or 'compiled kernel disabled'}")
    return KernelVerdict.yes()


#: which ops the fused normalise write takes: an optional resize on either side of normalise, then the batch
FUSED_NORMALISE_RUNS = fused_runs([("normalise",), ("normalise", "resize"), ("resize", "normalise")],
                                  [("batch",), ("pad", "batch")])
for _ops in FUSED_NORMALISE_RUNS:
    register_kernel(_ops, backend="cpu", supports=_supports_fused, name="fused_" + "_".join(_ops))(_fused_write)


# -- video at fidelity fast: the decoder's 4:2:0 planes straight into the output ----------------------
def _supports_video_yuv(q: KernelQuery) -> KernelVerdict:
    if q.spec_in.encoding not in VIDEO_ENCODINGS:
        return KernelVerdict.no("decoded-plane writes are for video input")
    if _native is None:
        return KernelVerdict.no(NATIVE_REASON or "compiled kernel disabled")
    if q.spec_out.dtype != "float32":
        return KernelVerdict.no(f"the YUV kernel writes float32, not {q.spec_out.dtype}")
    ops = [s.op for s in q.stages]
    if "resize" in ops:
        i = ops.index("resize")
        (hi, wi), (ho, wo) = q.specs[i - 1].size, q.specs[i].size
        interp = cast("Resize", q.stages[i]).interpolation
        if interp not in ("linear", "area") or (wi, hi) != (2 * wo, 2 * ho):
            return KernelVerdict.no(f"{wi}x{hi} -> {wo}x{ho} {interp} is not an exact 2x box shrink")
        if q.fidelity == "reference" and i < ops.index("normalise"):
            return KernelVerdict.no("at fidelity 'reference' a resize before normalise is OpenCV's on FFmpeg's bgr24 "
                                    "picture (uint8 rounding); the YUV kernel takes exact 2x2 means")
    if q.fidelity == "reference":
        return KernelVerdict.yes("FFmpeg's bgr24 conversion (libswscale's integer arithmetic, bit-identical; checked "
                                 "against FFmpeg at the first picture) from the decoder's 4:2:0 planes straight into "
                                 "the output, no BGR picture")
    return KernelVerdict.yes("the decoder's 4:2:0 planes converted (BT.601/709/2020 in float) straight into the output")


def _video_yuv_write(data, stages, ctx: KernelContext):
    """``decode[+resize]+normalise[+pad]+batch`` for H.264/H.265 from the decoder's planes.

    The camera's reordering decoder returns the frame's picture (:func:`dvpipe.video.decode_picture`);
    its 8-bit 4:2:0 planes (Y full size, Cb/Cr half width and height, read in place) are converted
    and normalised straight into the batch slot (CHW) -- at an exact 2x shrink from 2x2 means:

    * fidelity ``fast``: ``_native.yuv420_normalise``, Y'CbCr -> BGR by the picture's own matrix
      and range in float32, clipped; luma 2x2 means with the block's one chroma sample.
    * fidelity ``reference``: ``_native.yuv420_bgr24_normalise``, each pixel's BGR bytes as FFmpeg's
      bgr24 conversion computes them (:func:`dvpipe.video.picture_swscale_coef`), then what the
      fused kernel does with that picture (2x2 sums of the bytes): bit-identical, without the
      picture. Used only after the same arithmetic matched FFmpeg on this machine
      (:func:`_swscale_matches`); otherwise, and for colorspaces outside the checked table, odd
      sizes, the bgr24 picture itself.

    No BGR picture, no per-frame buffer. A picture in another layout (4:2:2, 4:4:4, 10-bit) takes
    FFmpeg's bgr24 conversion and the fused kernel.
    """
    pic = decode_picture(data, ctx)
    planes = picture_yuv420(pic, ctx.spec_in)
    icoef = None
    if planes is not None and ctx.fidelity == "reference":
        icoef = picture_swscale_coef(pic)
        if icoef is None or not _swscale_matches(pic, icoef):
            planes = None
    if planes is None:
        return _fused_write(picture_bgr(pic, ctx.spec_in), stages[1:], ctx)
    st = ctx.state
    prog = st.get("yuvprog")
    if prog is None:
        by_op = {s.op: s for s in stages}
        norm, pad = by_op["normalise"], by_op.get("pad")
        shrink = 2 if "resize" in by_op else 1
        height, width = ctx.spec_in.size
        prog = st["yuvprog"] = ((2, 1, 0) if norm.to_rgb else (0, 1, 2), tuple(norm.mean),
                                tuple(1.0 / s for s in norm.std), shrink, width, height,
                                float(pad.value) if pad is not None else 0.0)
    order, mean, inv_std, shrink, width, height, pad_value = prog
    out = _host_view(ctx.out)
    w, h = width // shrink, height // shrink
    y, ys, u, v, cs, coef = planes
    if icoef is None:
        _native.yuv420_normalise(y, ys, u, v, cs, width, height, out[:, :h, :w], order, mean, inv_std, shrink, coef)
    else:
        _native.yuv420_bgr24_normalise(y, ys, u, v, cs, width, height, out[:, :h, :w], order, mean, inv_std, shrink,
                                       icoef)
    _fill_pad(out, h, w, pad_value)
    return ctx.out


#: (pixel format, colorspace code, range code) -> whether dvpipe's bgr24 arithmetic matched FFmpeg's here
_SWSCALE_MATCHES: dict = {}


def _swscale_matches(picture, icoef: tuple) -> bool:
    """Whether ``_native.yuv420_bgr24_normalise`` gives FFmpeg's own bgr24 bytes on this machine for
    pictures tagged as ``picture`` is (format, colorspace, range), checked once per process on a
    256x128 probe of random planes so tagged (every luma value, 8192 chroma pairs). The arithmetic
    is that of libswscale's unscaled x86 converter; another build (ARM's NEON converter, a later
    FFmpeg) may round otherwise, and then fidelity ``reference`` converts with FFmpeg itself (a
    warning says so, once)."""
    key = (picture.format.name, int(picture.colorspace), int(picture.color_range))
    ok = _SWSCALE_MATCHES.get(key)
    if ok is None:
        import av

        planes = np.random.default_rng(0).integers(0, 256, 256 * 128 * 3 // 2, dtype=np.uint8)
        planes[:256] = np.arange(256, dtype=np.uint8)
        probe = av.VideoFrame.from_ndarray(planes.reshape(192, 256), format=key[0])
        probe.colorspace, probe.color_range = key[1], key[2]
        got = np.empty((3, 128, 256), np.float32)
        p = probe.planes
        _native.yuv420_bgr24_normalise(p[0], p[0].line_size, p[1], p[2], p[1].line_size, 256, 128, got, (0, 1, 2),
                                       (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 1, icoef)
        ok = _SWSCALE_MATCHES[key] = bool(np.array_equal(got.transpose(1, 2, 0), bgr24(probe)))
        if not ok:
            import warnings

            warnings.warn(f"dvpipe: this FFmpeg's bgr24 conversion of {key[0]} (colorspace {key[1]}, range {key[2]}) "
                          "rounds otherwise than dvpipe's copy of it; fidelity 'reference' converts such video with "
                          "FFmpeg itself (slower, the same pixels)", RuntimeWarning, stacklevel=2)
    return ok


# decode straight into the batch slot, one kernel per op run for both inputs (a run has one kernel
# per backend): JPEG through the DCT-scaled decode, H.264/H.265 through the decoder's YUV planes
def _supports_decode_to_slot(q: KernelQuery) -> KernelVerdict:
    if q.spec_in.encoding in VIDEO_ENCODINGS:
        return _supports_video_yuv(q)
    if [s.op for s in q.stages[:3]] != ["decode", "resize", "normalise"]:
        return KernelVerdict.no("a JPEG is decoded into the slot only through a DCT-scaled decode (decode, resize first)")
    return _supports_dct_fused(q)


def _decode_to_slot(data, stages, ctx: KernelContext):
    if ctx.spec_in.encoding in VIDEO_ENCODINGS:
        return _video_yuv_write(data, stages, ctx)
    return _decode_resize_write(data, stages, ctx)


#: decode straight into the slot: decode, then what the fused normalise write takes
DECODE_TO_SLOT_RUNS = fused_runs([("decode",)], [("resize", "normalise"), ("normalise", "resize"), ("normalise",)],
                                 [("batch",), ("pad", "batch")])
for _ops in DECODE_TO_SLOT_RUNS:
    register_kernel(_ops, backend="cpu", supports=_supports_decode_to_slot,
                    name="fused_" + "_".join(_ops))(_decode_to_slot)
