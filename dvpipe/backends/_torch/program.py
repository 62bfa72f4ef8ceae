"""The torch backend's fused pixel kernel: any run of ``resize``, ``crop``, ``normalise``, ``pad``, ``batch``.

Crops and the resize become per-axis gathers with OpenCV's float64 weights (:mod:`.resample`), the
channel reorder and HWC -> CHW ride on the column gather, and the normalisation
``x * (1/std) + (-mean/std)`` is one ``addcmul`` that writes the camera's slot of the preallocated
``(N, 3, H, W)`` batch (float32 or float16), after which only the pad strip is filled. Resize and the
per-channel normalisation commute exactly (weights sum to 1), so a normalise-then-resize reference order is
computed resize-first on the raw values: 4x less work at 0.5 scale, same result within float rounding. A
resize of uint8 data (before normalise) rounds to integers at fidelity ``reference`` as OpenCV's 8-bit
resize does.

Inputs: host arrays (uploaded), tensors on the device, HWC uint8 BGR/RGB or float, or NV12 (a 2-D
``Hs*3/2 x Ws`` uint8 buffer, e.g. from DVPP; see :mod:`.colour` for the BT.601 full/limited range choice:
``full`` for JPEG sources, ``limited`` for H.264/H.265, or the camera's ``yuv_range`` key).

What one step does to every frame is worked out once, on its first frame (:class:`_Program`), and kept in
the step's state with its gather indices and scratch buffers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from ...codecs import VIDEO_ENCODINGS
from ...errors import FrameError
from ...stages.kernel_registry import KernelContext, KernelQuery, KernelVerdict
from ...types import PixelFormat
from .device import DeviceRun, torch_dtype


@dataclass
class _Axis:
    """Crops and at most one resize along one axis.

    Input ``[offset, offset + pre)`` is taken, resized by ``matrix`` (``resized x pre``, or none),
    then ``[post, post + length)`` of the result is kept. A resize that keeps the axis's size sets no
    matrix, and a crop after it moves ``offset``; ``at`` is the offset the resize saw.
    """

    offset: int
    length: int
    pre: int = 0
    matrix: Optional[np.ndarray] = None
    post: int = 0
    at: int = 0

    def crop(self, start: int, size: int) -> None:
        if self.matrix is None:
            self.offset += start
        else:
            self.post += start
        self.length = size

    def resize(self, size: int, matrix: np.ndarray) -> None:
        """Resize to ``size`` with ``matrix``, this axis' ``(size, length)`` weights of the 2-D resize
        (:func:`.resample.resize_matrices`: OpenCV's area rule depends on both axes)."""
        self.pre, self.at = self.length, self.offset
        if size != self.length:
            self.matrix = matrix
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
        from .colour import NV12Converter
        from .resample import channel_major_index, column_weights, make_taps, resize_matrices

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
                wy, wx = resize_matrices((rows.length, cols.length), (h, w), st.interpolation)
                rows.resize(h, wy)
                cols.resize(w, wx)
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
            # the camera's keys (a video file source fills them from the stream's VUI), as the DVPP routes read them
            colour_range = str(ctx.camera.extra.get("yuv_range") or (
                "limited" if ctx.camera.encoding in VIDEO_ENCODINGS else "full")).lower()
            matrix = str(ctx.camera.extra.get("yuv_matrix") or "bt601").lower()
            self.nv12 = NV12Converter(spec.width, spec.height, out_order, colour_range, dev, matrix)
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
        from .resample import as_float, column_pass, column_pass_hwc, row_pass

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
            # taps that only pick pixels (nearest, area enlarging by whole factors) keep the input's
            # dtype: integers already, nothing to round
            if self.round_u8 and c.is_floating_point():
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
        src = x[rows.at:rows.at + rows.pre, cols.at:cols.at + cols.pre]  # what the resize reads
        src = src.permute(2, 0, 1)[list(self.perm)].float()[None]
        kw = {"align_corners": False, "antialias": True} if mode == "bilinear" else {}
        out = F.interpolate(src, size=size, mode=mode, **kw)[0]
        top, left = rows.post + rows.offset - rows.at, cols.post + cols.offset - cols.at  # the crops after it
        out = out[:, top:top + self.h, left:left + self.w]
        return out.add_(0.5).floor_() if self.round_u8 else out

    def fill_pad(self, full: "torch.Tensor") -> None:
        hp, wp = full.shape[1], full.shape[2]
        value = float(self.pad.value) if self.pad is not None else 0.0
        if self.h < hp:
            full[:, self.h:, :].fill_(value)
        if self.w < wp:
            full[:, :self.h, self.w:].fill_(value)


def step_input(data, ctx: KernelContext, run: DeviceRun) -> tuple["torch.Tensor", bool]:
    """The step's input as a tensor on the device (uploaded if on the host) and whether it is NV12.

    A DVPP picture in device memory (:class:`dvpipe.device.DeviceTensor`, the torch_npu route) becomes a
    2-D ``(Hs * 3 / 2, Ws)`` uint8 tensor by one device-to-device copy (:meth:`DeviceRun.from_dvpp`)."""
    from ...device import DeviceTensor

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


def kernel(data, stages, ctx: KernelContext):
    """Any run of crop / resize / normalise / pad / batch, one frame."""
    from .device import device_run, resolve_device  # looked up per call: tests stand a CPU in for an NPU
    from .resample import Scratch

    dev = resolve_device(ctx.backend.device)
    state = ctx.state
    run = device_run(state, dev)
    run.begin()
    x, nv12 = step_input(data, ctx, run)
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
    with run.mark(step_name(stages)):
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


def step_name(stages) -> str:
    """The step's name on its device span: its ops joined with ``+``."""
    return "+".join(s.op for s in stages)


def supports(q: KernelQuery) -> KernelVerdict:
    """Whether the fused kernel runs this run of ops on this input, and why not."""
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
