"""The torch backend's ``transfer`` kernel: host <-> device copy as its own step (the planner's transfer steps).

Pinned staging buffers reused across frames, ``non_blocking`` copies, device events
(:class:`.device.DeviceRun`); the copy's direction and size go to ``ctx.moved``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...stages.kernel_registry import KernelContext, KernelQuery, KernelVerdict


def supports(q: KernelQuery) -> KernelVerdict:
    """Any frame: the copy needs nothing but torch."""
    return KernelVerdict.yes()


def kernel(data, stages, ctx: KernelContext):
    """Copy the frame between host and the backend's device, as the plan's ``spec_out.placement`` says."""
    from .device import device_run, resolve_device  # looked up per call: tests stand a CPU in for an NPU

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
