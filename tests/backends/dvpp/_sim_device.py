"""Shared by the software DVPP device's tests: a fresh runtime on the device, and an NV12 picture on it."""

from __future__ import annotations

import numpy as np

from dvpipe.backends.dvpp import _acl
from dvpipe.backends.dvpp._enums import PIXEL_FORMAT
from dvpipe.backends.dvpp.sim import SimAcl

NV12 = PIXEL_FORMAT["nv12"]


def sim_runtime(target, strict_unknown=True):
    """A fresh runtime on its own software device (counters and refusals start at zero)."""
    rt = _acl.Runtime(SimAcl(target, strict_unknown=strict_unknown), "sim", 0, target)
    rt.open()
    return rt


def nv12_picture(rt, w, h, ws, hs, seed=0):
    """An NV12 picture of ``w`` x ``h`` pixels in a ``ws`` x ``hs`` buffer of random bytes on ``rt``'s device:
    ``(descriptor, device pointer)``."""
    size = ws * hs * 3 // 2
    ptr = rt.malloc(size)
    rt.upload(ptr, size, np.random.default_rng(seed).integers(0, 255, size, dtype=np.uint8).tobytes())
    return rt.pic_desc(ptr, size, NV12, w, h, ws, hs), ptr
