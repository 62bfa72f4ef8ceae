"""The torch backend's ``undistort`` kernel: ``torch.nn.functional.grid_sample`` on the camera's sampling grid."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...errors import FrameError
from ...stages.kernel_registry import KernelContext, KernelQuery, KernelVerdict
from ...types import PixelFormat
from . import program


def supports(q: KernelQuery) -> KernelVerdict:
    """The fused kernel's input rules, less NV12."""
    v = program.supports(q)
    if not v.ok:
        return v
    if q.spec_in.pixel_format is PixelFormat.NV12:
        return KernelVerdict.no("undistort on torch takes HxWx3 images, not NV12")
    return KernelVerdict.yes("torch.nn.functional.grid_sample (bilinear, zeros outside)")


def kernel(data, stages, ctx: KernelContext):
    """``grid_sample`` (bilinear, ``align_corners=False``, zeros outside) on the camera's sampling grid, made
    once per camera from OpenCV's float maps (``dvpipe.backends.cpu.undistort_maps_cv2``); uint8 rounds to
    nearest as OpenCV does."""
    import torch.nn.functional as F

    from .device import device_run, resolve_device  # looked up per call: tests stand a CPU in for an NPU

    (st,) = stages
    dev = resolve_device(ctx.backend.device)
    state = ctx.state
    run = device_run(state, dev)
    run.begin()
    x, nv12 = program.step_input(data, ctx, run)
    if nv12:
        raise FrameError("undistort on torch takes HxWx3 images, not NV12")
    grid = state.get("undistort_grid")
    if grid is None or grid.device != dev:
        import cv2

        from ..cpu import undistort_maps_cv2

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
