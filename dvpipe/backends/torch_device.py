"""The torch backend: one set of kernels for ``torch:cpu``, ``torch:cuda[:N]`` and ``torch:npu[:N]``.

Importing this module imports torch (it is imported only when a plan names a torch backend);
``torch_npu`` and ``torchvision`` are imported on first need. When torch, the device or
torch_npu is missing, :func:`available` says so and why, and the planner moves on.

Kernels (all registered on family ``torch``):

``decode``
    JPEG/PNG -> ``H x W x 3`` uint8 BGR with ``torchvision.io``: libjpeg-turbo on ``torch:cpu``;
    nvJPEG on ``torch:cuda`` (JPEG only, fidelity ``fast`` only: its IDCT and chroma upsampling
    differ from libjpeg-turbo by a few grey levels), one camera per call as the pipeline runs
    cameras in threads. A frame nvJPEG rejects is decoded on the CPU (OpenCV) and uploaded: a
    per-frame fallback, counted in the step state (``cpu_fallbacks``) and timed as a span
    ``decode(cpu-fallback)``. No torchvision: the kernel's verdict says so and the planner takes
    the next backend's decode. ``torch:npu`` has no JPEG decoder (that is DVPP's job).
``resize``, ``crop``, ``normalise``, ``pad``, ``batch`` and every run of them
    One fused kernel: crops and the resize become per-axis gathers with OpenCV's float64 weights
    (:mod:`._torch.resample`), the channel reorder and HWC -> CHW ride on the column gather, and
    the normalisation ``x * (1/std) + (-mean/std)`` is one ``addcmul`` that writes the camera's
    slot of the preallocated ``(N, 3, H, W)`` batch (float32 or float16), after which only the
    pad strip is filled. Resize and the per-channel normalisation commute exactly (weights sum to
    1), so a normalise-then-resize reference order is computed resize-first on the raw values:
    4x less work at 0.5 scale, same result within float rounding. A resize of uint8 data (before
    normalise) rounds to integers at fidelity ``reference`` as OpenCV's 8-bit resize does.
    Inputs: host arrays (uploaded), tensors on the device, HWC uint8 BGR/RGB or float, or NV12
    (a 2-D ``Hs*3/2 x Ws`` uint8 buffer, e.g. from DVPP; see :mod:`._torch.colour` for the BT.601
    full/limited range choice: ``full`` for JPEG sources, ``limited`` for H.264/H.265, or the
    camera's ``yuv_range`` key).
``transfer``
    Host <-> device copy as its own step (for the planner's transfer steps): pinned staging
    buffers reused across frames, ``non_blocking`` copy, device events.

On accelerators each step runs on its own stream, after the default stream's queued work, and
synchronises before returning; its device spans (:class:`dvpipe.latency.clock.DeviceSpan`:
``name, enqueue_ns, sync_ns, device_duration_ns``, unit ``cuda``/``npu``) go to ``ctx.device_spans`` (``upload`` for the host -> device copy inside a fused step, then the
step's compute). Everything a step needs across frames (staging, scratch, gather indices, events)
lives in ``ctx.state``: after the first frame set no memory is allocated per frame.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional, cast

import numpy as np

try:
    import torch
    _TORCH_ERROR: Optional[str] = None
except ImportError as _e:  # the module still imports, so available() can say why
    torch = None  # type: ignore[assignment]
    _TORCH_ERROR = f"{type(_e).__name__}: {_e}"

from .._optional import why_unavailable
from ..codecs import VIDEO_ENCODINGS, image_info
from ..errors import FrameError
from ..stages.registry import KernelContext, KernelQuery, KernelVerdict, fused_runs, register_kernel
from ..types import PixelFormat
from ._decode import decode_bgr

__all__ = ["available", "allocate_output", "environment", "decode_jpeg_batch"]

_now_ns = time.perf_counter_ns
_NPU_HINT = ("pip install 'dvpipe[npu]' (torch-npu matching your torch) on a machine with the CANN toolkit, "
             "then source <CANN>/set_env.sh")


# -- availability ----------------------------------------------------------------------------------
def _torch_missing() -> str:
    return f"torch is not installed ({_TORCH_ERROR}); pip install 'dvpipe[torch]'"


def _device_index(device: str) -> int:
    parts = device.split(":")
    return int(parts[1]) if len(parts) > 1 and parts[1] else 0


def available(ref, target=None) -> KernelVerdict:
    """Whether ``ref`` (``torch:cpu``, ``torch:cuda[:N]``, ``torch:npu[:N]``) can run here, and why not."""
    if torch is None:
        return KernelVerdict("unavailable", _torch_missing())
    kind = ref.device.split(":")[0]
    if kind == "cpu":
        return KernelVerdict.yes()
    try:
        index = _device_index(ref.device)
    except ValueError:
        return KernelVerdict("unavailable", f"bad device index in {ref.name!r}; use {kind} or {kind}:N")
    if kind == "cuda":
        if not torch.cuda.is_available():
            if torch.version.cuda is None:
                why = (f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None); "
                       "install a CUDA wheel of torch")
            else:
                why = (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device: "
                       "torch.cuda.is_available() is False (no GPU, driver missing or too old, or CUDA_VISIBLE_DEVICES hides it)")
            return KernelVerdict("unavailable", why)
        count = torch.cuda.device_count()
        if index >= count:
            return KernelVerdict("unavailable", f"{ref.name} asked for, but torch sees {count} CUDA device(s)")
        return KernelVerdict.yes()
    if kind == "npu":
        missing = why_unavailable("torch_npu")
        if missing is not None:
            return KernelVerdict("unavailable", f"torch_npu cannot be imported ({missing}); {_NPU_HINT}")
        npu = torch.npu  # type: ignore[attr-defined]  # registered on torch by importing torch_npu
        if not npu.is_available():
            return KernelVerdict("unavailable", "torch_npu is installed but torch.npu.is_available() is False "
                                                "(no Ascend device visible: driver, ASCEND_RT_VISIBLE_DEVICES, or set_env.sh not sourced)")
        count = npu.device_count()
        if index >= count:
            return KernelVerdict("unavailable", f"{ref.name} asked for, but torch_npu sees {count} NPU(s)")
        return KernelVerdict.yes()
    return KernelVerdict("unavailable", f"unknown torch device {ref.device!r}")


def environment() -> dict:
    """What the torch backend finds on this machine, each missing piece with its reason (for probes).

    Keys: ``torch``, ``torchvision``, ``cuda``, ``npu`` (each ``{"ok": bool, "version"/"devices"..., "reason"}``).
    """
    from . import BackendRef

    def row(v: KernelVerdict, **extra) -> dict:
        return {"ok": v.ok, "reason": v.reason, **extra}

    env: dict[str, Any] = {}
    if torch is None:
        env["torch"] = {"ok": False, "reason": _torch_missing()}
        return env
    env["torch"] = {"ok": True, "version": torch.__version__, "reason": ""}
    tv = _torchvision_error()
    env["torchvision"] = {"ok": tv is None, "reason": tv or ""}
    cuda = available(BackendRef("torch:cuda", "torch", "cuda"))
    env["cuda"] = row(cuda, devices=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                      if cuda.ok else [], cuda_version=torch.version.cuda)
    env["npu"] = row(available(BackendRef("torch:npu", "torch", "npu")))
    return env


def allocate_output(ref, shape: tuple, dtype: str):
    """The ``(N, 3, H, W)`` batch buffer: a zeroed torch tensor on the backend's device."""
    from ._torch.device import resolve_device, torch_dtype

    return torch.zeros(tuple(shape), dtype=torch_dtype(dtype), device=resolve_device(ref.device))


# -- torchvision (decode) --------------------------------------------------------------------------
_TV: dict[str, Any] = {}


def _torchvision_error() -> Optional[str]:
    """None when ``torchvision.io`` can decode here, else why not (cached)."""
    if "error" not in _TV:
        if torch is None:
            _TV["error"] = _torch_missing()
        else:
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


def _supports_decode(q: KernelQuery) -> KernelVerdict:
    if torch is None:
        return KernelVerdict.no(_torch_missing())
    why = _torchvision_error()
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
    for c in range(3):
        dst[..., c].copy_(img[2 - c])
    return dst


@register_kernel("decode", backend="torch", supports=_supports_decode, unit="torch", name="torchvision.decode")
def _decode(data, stages, ctx: KernelContext):
    from ._torch.device import device_run, resolve_device

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
        bgr = decode_bgr(data, spec, on_corrupt=ctx.corrupt)  # raises FrameError if the frame is really corrupt
        state["cpu_fallbacks"] = state.get("cpu_fallbacks", 0) + 1
        state["last_fallback"] = (str(e).splitlines()[0] if str(e) else type(e).__name__, _now_ns() - t0)
        staged = run.upload(bgr, key="fallback")
        with run.mark("decode(cpu-fallback)"):
            dst.copy_(staged)
        moved = int(bgr.nbytes)
    else:
        moved = len(data)  # nvJPEG: the encoded bytes are what crosses to the GPU
    run.finish(ctx)
    from ..latency.clock import DeviceSpan

    t = _now_ns()  # bytes only: the copy's time is inside the decode span
    ctx.device_spans.append(DeviceSpan("h2d", t, t, None, unit=dev.type,
                                       attrs={"direction": "host_to_device", "bytes": moved}))
    return dst


def decode_jpeg_batch(frames: list[bytes], device: str = "cuda") -> list:
    """Decode several JPEGs in one ``torchvision.io.decode_jpeg`` call (nvJPEG batched decode on CUDA).

    Returns ``3 x H x W`` RGB uint8 tensors. Used by ``tools/bench/gpu.py`` to compare batched
    with per-camera decode; the pipeline decodes per camera (one thread per camera).
    """
    why = _torchvision_error()
    if why:
        raise RuntimeError(why)
    tvio = _TV["io"]
    tensors = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in frames]
    return tvio.decode_jpeg(tensors, mode=tvio.ImageReadMode.RGB, device=device)


# -- the fused pixel kernel ------------------------------------------------------------------------
@dataclass
class _Axis:
    """Crops and at most one resize along one axis.

    Input ``[offset, offset + pre)`` is taken, resized by ``matrix`` (``resized x pre``, or none),
    then ``[post, post + length)`` of the result is kept.
    """

    offset: int
    length: int
    pre: int = 0
    matrix: Optional[np.ndarray] = None
    post: int = 0

    def crop(self, start: int, size: int) -> None:
        if self.matrix is None:
            self.offset += start
        else:
            self.post += start
        self.length = size

    def resize(self, size: int, interpolation: str) -> None:
        from ._torch.resample import resize_matrix

        self.pre = self.length
        if size != self.length:
            self.matrix = resize_matrix(self.length, size, interpolation)
        self.length = size

    def operator(self, n_in: int) -> np.ndarray:
        """The ``(length, n_in)`` float64 matrix of the whole axis."""
        m = np.zeros((self.length, n_in))
        if self.matrix is None:
            m[np.arange(self.length), self.offset + np.arange(self.length)] = 1.0
        else:
            m[:, self.offset:self.offset + self.pre] = self.matrix[self.post:self.post + self.length]
        return m


class _Program:
    """What one fused step does to every frame; built on the first frame and kept in the step's state."""

    def __init__(self, stages, ctx: KernelContext, dev, in_order: str, nv12: bool):
        from ._torch.colour import NV12Converter
        from ._torch.device import torch_dtype
        from ._torch.resample import channel_major_index, column_weights, make_taps

        spec = ctx.spec_in
        self.dev = dev
        self.fused_affine = dev.type != "cpu"
        rows, cols = _Axis(0, spec.height), _Axis(0, spec.width)
        conceptual_u8 = spec.dtype == "uint8" or nv12
        self.round_u8 = False
        self.antialias: Optional[tuple] = None
        self.norm = None
        self.pad = None
        self.writes_batch = stages[-1].op == "batch"
        out_order = in_order
        for st in stages:
            if st.op == "crop":
                rows.crop(st.top, st.height)
                cols.crop(st.left, st.width)
            elif st.op == "resize":
                h, w = st.out_size((rows.length, cols.length))
                if getattr(st, "antialias", False):
                    mode = {"linear": "bilinear", "area": "area", "nearest": "nearest"}[st.interpolation]
                    self.antialias = ((h, w), mode)
                rows.resize(h, st.interpolation)
                cols.resize(w, st.interpolation)
                # OpenCV's 8-bit resize rounds to integers; the reference keeps that
                self.round_u8 = conceptual_u8 and ctx.fidelity == "reference"
            elif st.op == "normalise":
                self.norm = st
                conceptual_u8 = False
                if st.to_rgb:
                    out_order = "rgb" if in_order == "bgr" else "bgr"
            elif st.op == "pad":
                self.pad = st
        self.out_dtype = torch_dtype(ctx.spec_out.dtype)
        if self.out_dtype == torch.uint8:  # integers out: round, never truncate
            self.round_u8 = rows.matrix is not None or cols.matrix is not None
        self.nv12 = None
        if nv12:  # the conversion writes the target channel order directly
            colour_range = ctx.camera.extra.get("yuv_range") or (
                "limited" if ctx.camera.encoding in VIDEO_ENCODINGS else "full")
            self.nv12 = NV12Converter(spec.width, spec.height, out_order, colour_range, dev)
            # a decoder hands over integers
            self.nv12_round = ctx.fidelity == "reference" or self.out_dtype == torch.uint8
            in_order = out_order
        self.perm = tuple(in_order.index(ch) for ch in out_order)
        self.rows_axis, self.cols_axis = rows, cols
        self.h, self.w = rows.length, cols.length
        self.direct = rows.matrix is None and cols.matrix is None
        if self.norm is not None:
            a = [1.0 / s for s in self.norm.std]
            b = [-m / s for m, s in zip(self.norm.mean, self.norm.std)]
            self.a, self.b = a, b
            self.a3 = torch.tensor(a, dtype=torch.float32, device=dev).view(3, 1, 1)
            self.b3 = torch.tensor(b, dtype=torch.float32, device=dev).view(3, 1, 1)
        if not self.direct and self.antialias is None:
            self.rows = make_taps(rows.operator(spec.height), dev)
            self.cols = make_taps(cols.operator(spec.width), dev)
            self.col_index = [channel_major_index(self.cols, k, 3, self.perm, dev) for k in range(len(self.cols.steps))]
            self.col_w = column_weights(self.cols, 3, dev)
            self.cols_strided = all(st is not None for st in self.cols.steps)
            # common tap weights (0.5 x 0.5 for an exact 2x shrink) are summed, and multiplied once here
            self.folded = ((self.rows.common if self.cols_strided and self.rows.common is not None else 1.0)
                           * (self.cols.common if self.cols_strided and self.cols.common is not None else 1.0))
        self.out_size = ctx.spec_out.size  # (height, width)

    def write(self, x: "torch.Tensor", dst: "torch.Tensor", scratch) -> None:
        """Write the content (``3 x h x w``, normalised if the run normalises) into ``dst``."""
        from ._torch.resample import as_float, column_pass, column_pass_hwc, row_pass

        if self.nv12 is not None:
            x = self.nv12(x, round_u8=self.nv12_round)
        if self.direct:
            top, left = self.rows_axis.offset, self.cols_axis.offset
            self._write_planes(x[top:top + self.h, left:left + self.w], dst, scratch)
            return
        if self.antialias is not None:
            view = self._antialias(x)
        else:
            if x.stride(2) != 1 or x.stride(1) != x.shape[2]:
                x = x.contiguous()
            r = row_pass(x.view(x.shape[0], -1), self.rows, scratch, "rows", fold=self.cols_strided)
            if self.cols_strided:
                # evenly stepping column taps: strided views instead of gathers; the channel
                # reorder then happens in the per-channel final write
                c = column_pass_hwc(r, self.cols, 3, scratch, "cols", fold=True)
                if self.round_u8 or self.norm is None:
                    if self.folded != 1.0:
                        c.mul_(self.folded)
                    if self.round_u8:
                        c.add_(0.5).floor_()
                    self._write_planes(c, dst, scratch, 1.0)
                else:
                    self._write_planes(c, dst, scratch, self.folded)
                return
            c = column_pass(r, self.cols, self.col_index, self.col_w, scratch, "cols")
            if self.round_u8:
                c.add_(0.5).floor_()
            view = c.view(self.h, 3, self.w).permute(1, 0, 2)
        if self.norm is not None:
            if not (dst.dtype == torch.float32 and view.dtype == torch.float32):
                view = as_float(view, scratch, "content")
                self._affine(view, view)
            else:
                self._affine(view, dst)
                return
        dst.copy_(view)

    def _write_planes(self, hwc: "torch.Tensor", dst: "torch.Tensor", scratch, scale: float = 1.0) -> None:
        """``dst[c] = normalise(scale * hwc[..., perm[c]])`` plane by plane (strided reads, no gather)."""
        a = [v * scale for v in self.a] if self.norm is not None else None
        for c in range(3):
            src = hwc[..., self.perm[c]]
            if self.norm is None:
                dst[c].copy_(src)
                continue
            # cast into float32 first (into dst itself when it is float32), then normalise in
            # place: mixed-dtype arithmetic would allocate a cast copy on the CPU
            assert a is not None  # set when norm is
            if dst.dtype == torch.float32 and src.dtype == torch.float32:
                torch.mul(src, a[c], out=dst[c])
                dst[c].add_(self.b[c])
                continue
            tmp = dst[c] if dst.dtype == torch.float32 else scratch.get("plane", tuple(src.shape), torch.float32)
            tmp.copy_(src)
            tmp.mul_(a[c]).add_(self.b[c])
            if tmp is not dst[c]:
                dst[c].copy_(tmp)

    def _affine(self, src: "torch.Tensor", dst: "torch.Tensor") -> None:
        # one kernel on accelerators; on the CPU addcmul is ~4x slower than mul then add
        if self.fused_affine:
            torch.addcmul(self.b3, src, self.a3, out=dst)
        else:
            torch.mul(src, self.a3, out=dst)
            dst.add_(self.b3)

    def _antialias(self, x: "torch.Tensor") -> "torch.Tensor":
        """``torch.nn.functional.interpolate(antialias=True)``: allocates per frame (an option, not the default)."""
        import torch.nn.functional as F

        assert self.antialias is not None  # called only when set
        size, mode = self.antialias
        rows, cols = self.rows_axis, self.cols_axis
        src = x[rows.offset:rows.offset + rows.pre, cols.offset:cols.offset + cols.pre]
        src = src.permute(2, 0, 1)[list(self.perm)].float()[None]
        kw = {"align_corners": False, "antialias": True} if mode == "bilinear" else {}
        out = F.interpolate(src, size=size, mode=mode, **kw)[0]
        out = out[:, rows.post:rows.post + self.h, cols.post:cols.post + self.w]
        return out.add_(0.5).floor_() if self.round_u8 else out

    def fill_pad(self, full: "torch.Tensor") -> None:
        hp, wp = full.shape[1], full.shape[2]
        value = float(self.pad.value) if self.pad is not None else 0.0
        if self.h < hp:
            full[:, self.h:, :].fill_(value)
        if self.w < wp:
            full[:, :self.h, self.w:].fill_(value)


def _as_input(data, ctx: KernelContext, run) -> tuple["torch.Tensor", bool]:
    """The step's input as a tensor on the device (uploaded if on the host) and whether it is NV12.

    A DVPP picture in device memory (:class:`dvpipe.device.DeviceTensor`, the torch_npu route) becomes a
    2-D ``(Hs * 3 / 2, Ws)`` uint8 tensor by one device-to-device copy (:meth:`DeviceRun.from_dvpp`)."""
    from ..device import DeviceTensor

    if isinstance(data, DeviceTensor):
        t, span = run.from_dvpp(data)
        ctx.device_spans.append(span)
        return t, data.layout == "NV12"
    spec = ctx.spec_in
    shape = tuple(getattr(data, "shape", ()))
    nv12 = spec.pixel_format is PixelFormat.NV12 or len(shape) == 2
    if not nv12:
        if len(shape) != 3 or shape[2] != 3 or shape[:2] != (spec.height, spec.width):
            raise FrameError(f"expected a {spec.height}x{spec.width}x3 image, got shape {shape}")
    return run.upload(data), nv12


def _pixels(data, stages, ctx: KernelContext):
    """Any run of crop / resize / normalise / pad / batch, one frame."""
    from ._torch.device import device_run, resolve_device
    from ._torch.resample import Scratch

    dev = resolve_device(ctx.backend.device)
    state = ctx.state
    run = device_run(state, dev)
    run.begin()
    x, nv12 = _as_input(data, ctx, run)
    prog: Optional[_Program] = state.get("program")
    in_order = ctx.spec_in.channel_order if ctx.spec_in.channel_order in ("bgr", "rgb") else "bgr"
    if prog is None or prog.dev != dev or (prog.nv12 is not None) != nv12:
        prog = state["program"] = _Program(stages, ctx, dev, in_order, nv12)
        state["scratch"] = Scratch(dev)
        run.after_setup()
    scratch = state["scratch"]
    hp, wp = prog.out_size
    host_out: Any = None  # a batch buffer on another device (a numpy array or a tensor), else None
    result: Any  # HWC numpy array on the host, else a tensor
    if prog.writes_batch:
        out = ctx.out
        full = torch.from_numpy(out) if isinstance(out, np.ndarray) and dev.type == "cpu" else out
        if not isinstance(full, torch.Tensor) or full.device != dev:
            # the batch buffer lives elsewhere (a fallback step into another backend's buffer):
            # compute on this device, then copy the slot over
            host_out = full
            full = run.buffer("batch_slot", tuple(full.shape), torch.from_numpy(np.empty(0, full.dtype)).dtype
                              if isinstance(full, np.ndarray) else full.dtype)
    else:
        full = run.buffer("hwc_out", (hp, wp, 3), prog.out_dtype).permute(2, 0, 1)
    with run.mark(ctx_step_name(stages)):
        prog.write(x, full[:, :prog.h, :prog.w], scratch)
        prog.fill_pad(full)
    staged = None
    if not prog.writes_batch:
        hwc = full.permute(1, 2, 0)
        if dev.type == "cpu":
            result = hwc.numpy()
        elif ctx.spec_out.placement == "host":
            result = run.download(hwc)  # complete once finish() has synchronised
        else:
            result = hwc
    else:
        result = ctx.out
        if isinstance(host_out, np.ndarray):
            staged = run.download(full, key="batch_slot")
        elif host_out is not None:
            with run.mark("copy"):
                host_out.copy_(full, non_blocking=True)
    run.finish(ctx)
    if staged is not None:
        host_out[...] = staged
    return result


def ctx_step_name(stages) -> str:
    return "+".join(s.op for s in stages)


def _supports_pixels(q: KernelQuery) -> KernelVerdict:
    if torch is None:
        return KernelVerdict.no(_torch_missing())
    spec = q.spec_in
    if spec.pixel_format is PixelFormat.ENCODED:
        return KernelVerdict.no("needs decoded pixels")
    if spec.pixel_format not in (PixelFormat.BGR, PixelFormat.RGB, PixelFormat.FLOAT_HWC, PixelFormat.NV12):
        return KernelVerdict.no(f"takes BGR/RGB uint8, float HWC or NV12 input, got {spec.pixel_format.value}")
    here = q.backend.placement
    if spec.placement not in ("host", here) and not (spec.placement.startswith("dvpp-")
                                                     and q.backend.device.startswith("npu")):
        return KernelVerdict.no(f"input lives on {spec.placement}, this step runs on {q.backend.device}")
    if any(s.op == "resize" and getattr(s, "interpolation", "") == "pil_bicubic" for s in q.stages):
        return KernelVerdict.no("Pillow's bicubic resize (pil_bicubic) runs on the cpu or reference backend only")
    if any(getattr(s, "antialias", False) for s in q.stages if s.op == "resize"):
        return KernelVerdict.yes("antialiased resize (torch.nn.functional.interpolate), not OpenCV INTER_LINEAR")
    return KernelVerdict.yes()


#: the pixel kernel's runs: resize, crop and normalise in any order (each at most once), then pad, batch
PIXEL_RUNS = fused_runs(any_order=("resize", "crop", "normalise"), then=("pad", "batch"))


def _fused_runs() -> list[tuple[str, ...]]:
    """Every op run the fused kernel takes (:data:`PIXEL_RUNS`)."""
    return list(PIXEL_RUNS)


for _ops in _fused_runs():
    register_kernel(_ops, backend="torch", supports=_supports_pixels, unit="torch",
                    name="torch_" + ("fused_" if len(_ops) > 1 else "") + "_".join(_ops))(_pixels)


# -- undistortion ---------------------------------------------------------------------------------
def _supports_undistort(q: KernelQuery) -> KernelVerdict:
    v = _supports_pixels(q)
    if not v.ok:
        return v
    if q.spec_in.pixel_format is PixelFormat.NV12:
        return KernelVerdict.no("undistort on torch takes HxWx3 images, not NV12")
    return KernelVerdict.yes("torch.nn.functional.grid_sample (bilinear, zeros outside)")


@register_kernel("undistort", backend="torch", supports=_supports_undistort, unit="torch", name="torch_grid_sample")
def _undistort(data, stages, ctx: KernelContext):
    """``grid_sample`` (bilinear, ``align_corners=False``, zeros outside) on the camera's sampling grid, made
    once per camera from OpenCV's float maps (``dvpipe.backends.cpu.undistort_maps_cv2``); uint8 rounds to
    nearest as OpenCV does."""
    import torch.nn.functional as F

    from ._torch.device import device_run, resolve_device

    (st,) = stages
    dev = resolve_device(ctx.backend.device)
    state = ctx.state
    run = device_run(state, dev)
    run.begin()
    x, nv12 = _as_input(data, ctx, run)
    if nv12:
        raise FrameError("undistort on torch takes HxWx3 images, not NV12")
    grid = state.get("undistort_grid")
    if grid is None or grid.device != dev:
        import cv2

        from .cpu import undistort_maps_cv2

        mx, my = undistort_maps_cv2(ctx.camera, st.new_intrinsics(ctx.camera), cv2.CV_32FC1)
        h, w = mx.shape
        g = np.stack([(mx.astype(np.float64) + 0.5) * (2.0 / w) - 1.0,
                      (my.astype(np.float64) + 0.5) * (2.0 / h) - 1.0], axis=-1)
        grid = state["undistort_grid"] = torch.from_numpy(g.astype(np.float32))[None].to(dev)
        run.after_setup()
    with run.mark("undistort"):
        src = x.permute(2, 0, 1)[None].to(torch.float32)
        out = F.grid_sample(src, grid, mode="bilinear", padding_mode="zeros", align_corners=False)[0]
        if x.dtype == torch.uint8:
            out = out.add_(0.5).floor_().clamp_(0, 255).to(torch.uint8)
        else:
            out = out.to(x.dtype)
        hwc = out.permute(1, 2, 0).contiguous()
    result: Any  # HWC numpy array on the host, else a tensor
    if dev.type == "cpu":
        result = hwc.numpy()
    elif ctx.spec_out.placement == "host":
        result = run.download(hwc)  # complete once finish() has synchronised
    else:
        result = hwc
    run.finish(ctx)
    return result


# -- transfers -------------------------------------------------------------------------------------
def _supports_transfer(q: KernelQuery) -> KernelVerdict:
    if torch is None:
        return KernelVerdict.no(_torch_missing())
    return KernelVerdict.yes()


@register_kernel("transfer", backend="torch", supports=_supports_transfer, unit="torch", name="torch_transfer")
def _transfer(data, stages, ctx: KernelContext):
    """Copy the frame between host and the backend's device, as the plan's ``spec_out.placement`` says."""
    from ._torch.device import device_run, resolve_device

    dev = resolve_device(ctx.backend.device)
    run = device_run(ctx.state, dev)
    run.begin()
    out: Any  # numpy array on the host, tensor on the device
    if ctx.spec_out.placement == "host":
        out = run.download(data) if isinstance(data, torch.Tensor) else np.asarray(data)
        direction = "device_to_host"
    else:
        out = run.upload(data)
        direction = "host_to_device"
    run.finish(ctx)
    if dev.type != "cpu":
        ctx.moved = (direction, int(out.nbytes))
    return out
