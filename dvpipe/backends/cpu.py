"""The CPU backend: libjpeg-turbo (simplejpeg or OpenCV), OpenCV SIMD kernels and numpy.

What runs, per camera (the cameras of a frame set run in the pipeline's thread pool; the
decoders, OpenCV and numpy's loops release the GIL):

* ``decode`` -- libjpeg-turbo into a buffer reused from one frame set to the next (see
  :mod:`dvpipe.backends._decode`; simplejpeg when installed, bit-identical to ``cv2.imdecode``).
* ``decode+resize`` at fidelity ``fast`` only -- JPEG DCT-domain downscaling: libjpeg decodes at
  1/2, 1/4 or 1/8 scale (4x, 16x, 64x fewer pixels through the IDCT and colour conversion); an
  odd size drops the one column / row libjpeg's rounding up adds, any other size is finished by a
  small resize to the exact target. Not bit-identical to
  bilinear resizing of the full decode; the deviation is measured in
  ``tests/test_cpu_backend.py`` and documented in ``docs/performance.md``.
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

import cv2
import numpy as np

from ..codecs import VIDEO_ENCODINGS
from ..stages.registry import KernelContext, KernelQuery, Verdict, register_kernel
from ..types import PixelFormat
from ._decode import decode_bgr

try:  # the compiled kernel (setup.py builds it when a C compiler is present; optional)
    from . import _native
    NATIVE_REASON = None
except ImportError as _e:  # pragma: no cover - exercised where the extension was not built
    _native = None
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


def _supports_decode(q: KernelQuery) -> Verdict:
    if q.spec_in.encoding in VIDEO_ENCODINGS:
        return Verdict.yes(f"{q.spec_in.encoding} access units decoded by PyAV/FFmpeg (software)")
    return Verdict.yes()


@register_kernel("decode", backend="cpu", supports=_supports_decode, name="libjpeg-turbo")
def _decode(data, stages, ctx: KernelContext):
    if ctx.spec_in.encoding in VIDEO_ENCODINGS:  # access units in, the picture of this frame out (reordered)
        from ..video import decode_video

        return decode_video(data, ctx)
    return decode_bgr(data, ctx.spec_in, state=ctx.state, decoder="auto", on_corrupt=ctx.corrupt)


def _dct_reduce(spec_in, spec_out) -> int:
    w_in, h_in = spec_in.size
    w_out, h_out = spec_out.size
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
    r = _dct_reduce(q.spec_in, q.spec_out)
    if r == 1:
        return Verdict.no("shrink below 2x: DCT-domain scaling does not apply")
    return Verdict.yes(f"JPEG decoded at 1/{r} scale in the DCT domain")


@register_kernel(("decode", "resize"), backend="cpu", supports=_supports_dct, name="libjpeg-turbo-dct-scaled")
def _decode_resize(data, stages, ctx: KernelContext):
    st = ctx.state
    prog = st.get("dct")
    if prog is None:
        prog = st["dct"] = (_dct_reduce(ctx.spec_in, ctx.spec_out), ctx.spec_out.size, _INTERP[stages[1].interpolation])
    reduce, size, interp = prog
    img = decode_bgr(data, ctx.spec_in, reduce=reduce, state=st, decoder="auto", on_corrupt=ctx.corrupt)
    w, h = size
    dw, dh = img.shape[1] - w, img.shape[0] - h
    if dw == 0 and dh == 0:
        return img
    if dw <= 1 and dh <= 1 and ctx.spec_in.width // w == reduce and ctx.spec_in.height // h == reduce:
        # an odd size: libjpeg rounds the scaled size up (ceil(1241 / 2) = 621 for int(1241 * 0.5) = 620);
        # dropping the last column / row keeps pixel i centred on source 2i + 1 (the nominal geometry)
        # where a 621 -> 620 resize would drift by up to half a pixel towards the far edge
        return img[:h, :w]
    return cv2.resize(img, size, dst=_scratch(st, "rs", (h, w, 3), np.uint8), interpolation=interp)


# -- single-stage kernels (used when a user's stage order leaves nothing to fuse) --------------------
@register_kernel("resize", backend="cpu", name="cv2.resize")
def _resize(data, stages, ctx: KernelContext):
    (st,) = stages
    w, h = ctx.spec_out.size
    dst = _scratch(ctx.state, "rs", (h, w) + data.shape[2:], data.dtype)
    return cv2.resize(data, (w, h), dst=dst, interpolation=_INTERP[st.interpolation])


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
        self.pre = None  # uint8 resize before normalising: ((w, h), interp)
        self.path = "direct"
        self.interp = None
        if resize is not None and stages[0].op == "resize":
            rw, rh = resize.out_size(w, h)
            self.pre = ((rw, rh), _INTERP[resize.interpolation])
            w, h = rw, rh
        elif resize is not None:
            ow, oh = resize.out_size(w, h)
            if resize.interpolation in ("linear", "area") and (w, h) == (2 * ow, 2 * oh):
                self.path = "sum2x2"
            else:
                self.path = "general"
                self.interp = _INTERP[resize.interpolation]
            w, h = ow, oh
        self.size = (w, h)
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
    hp, wp = out.shape[1:]
    if h < hp:
        out[:, h:, :].fill(prog.pad_value)
    if w < wp:
        out[:, :h, w:].fill(prog.pad_value)
    return ctx.out


def _supports_fused(q: KernelQuery) -> Verdict:
    if q.spec_in.pixel_format is not PixelFormat.BGR or q.spec_in.dtype != "uint8":
        return Verdict.no(f"fused normalise writes need uint8 BGR input, got {q.spec_in}")
    if q.spec_out.dtype not in ("float32", "float16"):
        return Verdict.no(f"fused normalise writes float32 or float16, not {q.spec_out.dtype}")
    if _native is None:
        return Verdict.yes(f"OpenCV path: {NATIVE_REASON or 'compiled kernel disabled'}")
    return Verdict.yes()


for _ops in [("normalise", "pad", "batch"), ("normalise", "batch"),
             ("normalise", "resize", "pad", "batch"), ("normalise", "resize", "batch"),
             ("resize", "normalise", "pad", "batch"), ("resize", "normalise", "batch")]:
    register_kernel(_ops, backend="cpu", supports=_supports_fused, name="fused_" + "_".join(_ops))(_fused_write)
