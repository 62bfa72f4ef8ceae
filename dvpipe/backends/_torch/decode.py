"""The torch backend's ``decode`` kernel: JPEG/PNG -> ``H x W x 3`` uint8 BGR with ``torchvision.io``.

libjpeg-turbo on ``torch:cpu``; nvJPEG on ``torch:cuda`` (JPEG only, fidelity ``fast`` only: its IDCT and
chroma upsampling differ from libjpeg-turbo by a few grey levels), one camera per call as the pipeline runs
cameras in threads. A frame nvJPEG rejects is decoded on the CPU (OpenCV) and uploaded: a per-frame
fallback, counted in the step state (``cpu_fallbacks``) and timed as a span ``decode(cpu-fallback)``. No
torchvision: :func:`supports` says so and the planner takes the next backend's decode. ``torch:npu`` has no
JPEG decoder (that is DVPP's job). ``torchvision`` is imported on first need.
"""
from __future__ import annotations

import time
from typing import Any, Optional, cast

import numpy as np
import torch

from ..._optional import why_unavailable
from ...codecs import image_info, unsupported_precision
from .._decode import _jpeg_damage, _sj
from ...errors import BackendUnavailable, FrameError
from ...stages.kernel_registry import KernelContext, KernelQuery, KernelVerdict
from ...types import PixelFormat
from .._decode import decode_bgr

_now_ns = time.perf_counter_ns

#: ``error`` (None, or why torchvision cannot decode here) and ``io`` (``torchvision.io``), filled on first need
_TV: dict[str, Any] = {}


def torchvision_error() -> Optional[str]:
    """None when ``torchvision.io`` can decode here, else why not (cached)."""
    if "error" not in _TV:
        why = why_unavailable("torchvision.io")
        if why is None:
            import torchvision.io as tvio

            if not hasattr(tvio, "decode_jpeg"):
                why = "torchvision.io has no decode_jpeg (torchvision too old)"
            else:
                _TV["io"] = tvio
        _TV["error"] = None if why is None else (
            f"torchvision cannot be imported ({why}); pip install torchvision (matching torch {torch.__version__})")
    return _TV["error"]


def supports(q: KernelQuery) -> KernelVerdict:
    """Whether torchvision decodes this camera's frames on the step's device, and why not."""
    why = torchvision_error()
    if why:
        return KernelVerdict.no(f"no torch decoder: {why}")
    if q.spec_in.pixel_format is PixelFormat.BGR:
        return KernelVerdict.yes()
    enc = q.spec_in.encoding
    kind = q.backend.device.split(":")[0]
    if kind == "npu":
        return KernelVerdict.no("torch_npu has no JPEG decoder; on Ascend decode with DVPP JPEGD (backend dvpp)")
    if enc not in ("jpeg", "png"):
        return KernelVerdict.no(f"torchvision decodes JPEG and PNG images, not {enc or 'this input'}")
    if kind == "cuda":
        if enc != "jpeg":
            return KernelVerdict.no("nvJPEG decodes JPEG only (PNG is decoded on the host)")
        if q.fidelity == "reference":
            return KernelVerdict.no("nvJPEG's IDCT and chroma upsampling differ from libjpeg-turbo by a few grey levels; "
                                    "at fidelity 'reference' decode on the host (fidelity 'fast' allows nvJPEG)")
        return KernelVerdict.yes("nvJPEG (torchvision.io.decode_jpeg on cuda), CPU fallback per frame")
    return KernelVerdict.yes()


def _encoded_tensor(state: dict, data) -> "torch.Tensor":
    """The encoded bytes in a reused host uint8 tensor (grown as needed)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    n = raw.size
    cap = state.get("encoded")
    if cap is None or cap.numel() < n:
        cap = state["encoded"] = torch.empty(max(n, int(1.25 * (cap.numel() if cap is not None else 0))),
                                                 dtype=torch.uint8)
    view = cap[:n]
    view.numpy()[:] = raw
    return view


def _rgb_chw_to_bgr_hwc(img: "torch.Tensor", dst: "torch.Tensor") -> "torch.Tensor":
    """``3 x H x W`` RGB into ``dst`` (``H x W x 3`` uint8 BGR). A 16-bit picture (torchvision >= 0.21's
    ``decode_png`` returns uint16) keeps its high byte, ``value >> 8``, as ``cv2.imdecode(IMREAD_COLOR)``
    does on the cpu and reference backends (a plain copy would keep the low byte)."""
    # torch has no shift for uint16: through int32 (16-bit PNGs only); torch < 2.3 has no uint16 at all
    if img.dtype == getattr(torch, "uint16", None):
        img = img.to(torch.int32).bitwise_right_shift_(8)
    for c in range(3):
        dst[..., c].copy_(img[2 - c])
    return dst


def kernel(data, stages, ctx: KernelContext):
    """Encoded bytes (or a raw BGR array) -> ``H x W x 3`` uint8 BGR on the step's device."""
    from .device import device_run, resolve_device  # looked up per call: tests stand a CPU in for an NPU

    dev = resolve_device(ctx.backend.device)
    state = ctx.state
    run = device_run(state, dev)
    run.begin()
    spec = ctx.spec_in
    if isinstance(data, np.ndarray):  # raw BGR frames pass through (validated)
        out = run.upload(decode_bgr(data, spec))
        run.finish(ctx)
        return out.numpy() if dev.type == "cpu" else out
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise FrameError(f"decode takes encoded bytes or an HxWx3 uint8 array, got {type(data).__name__}")
    info = image_info(cast(bytes, data))  # any bytes-like object: the header readers index and slice it
    if (info.height, info.width) != spec.size:
        raise FrameError(f"frame is {info.width}x{info.height} but the camera declares {spec.width}x{spec.height}")
    unsupported = unsupported_precision(info)
    if unsupported is not None:
        raise FrameError(unsupported)
    # torchvision's libjpeg and nvJPEG conceal damage without a word: the verdict is libjpeg's (a strict
    # decode at the smallest DCT scale on the host, as the cpu backend's; ~1/5 of a full decode)
    damage = _jpeg_damage(data) if info.format == "jpeg" and _sj is not None else None
    if damage is not None:
        ctx.corrupt(damage)  # on_corrupt drop: raises here, before decoding; flag: the concealed picture is kept
    tvio = _TV["io"]
    enc = _encoded_tensor(state, data)
    h, w = spec.height, spec.width
    if dev.type == "cpu":
        try:
            img = (tvio.decode_jpeg if info.format == "jpeg" else tvio.decode_png)(enc, mode=tvio.ImageReadMode.RGB)
        except RuntimeError as e:
            raise FrameError(f"corrupt {info.format.upper()} (torchvision: {str(e).splitlines()[0]})") from None
        return _rgb_chw_to_bgr_hwc(img, run.buffer("bgr", (h, w, 3), torch.uint8)).numpy()
    dst = run.buffer("bgr", (h, w, 3), torch.uint8)
    try:
        with run.mark("decode"):
            img = tvio.decode_jpeg(enc, mode=tvio.ImageReadMode.RGB, device=dev)
            _rgb_chw_to_bgr_hwc(img, dst)
    except RuntimeError as e:  # nvJPEG rejected this frame: decode it on the host, count it, go on
        t0 = _now_ns()
        # raises FrameError if the frame is really corrupt (damage already reported above is not reported twice)
        bgr = decode_bgr(data, spec, on_corrupt=(lambda reason: None) if damage is not None else ctx.corrupt)
        state["cpu_fallbacks"] = state.get("cpu_fallbacks", 0) + 1
        state["last_fallback"] = (str(e).splitlines()[0] if str(e) else type(e).__name__, _now_ns() - t0)
        staged = run.upload(bgr, key="fallback")
        with run.mark("decode(cpu-fallback)"):
            dst.copy_(staged)
        moved = int(bgr.nbytes)
    else:
        moved = len(data)  # nvJPEG: the encoded bytes are what crosses to the GPU
    run.finish(ctx)
    from ...latency.clock import DeviceSpan

    t = _now_ns()  # bytes only: the copy's time is inside the decode span
    ctx.device_spans.append(DeviceSpan("h2d", t, t, None, unit=dev.type,
                                       attrs={"direction": "host_to_device", "bytes": moved}))
    return dst


def decode_jpeg_batch(frames: list[bytes], device: str = "cuda") -> list:
    """Decode several JPEGs in one ``torchvision.io.decode_jpeg`` call (nvJPEG batched decode on CUDA).

    Returns ``3 x H x W`` RGB uint8 tensors. Used by ``tools/bench/gpu.py`` to compare batched
    with per-camera decode; the pipeline decodes each camera as its own job on its worker threads.
    """
    why = torchvision_error()
    if why:
        raise BackendUnavailable("torch", why)
    tvio = _TV["io"]
    tensors = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in frames]
    return tvio.decode_jpeg(tensors, mode=tvio.ImageReadMode.RGB, device=device)
