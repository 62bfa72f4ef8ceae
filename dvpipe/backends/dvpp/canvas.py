"""The AIPP canvas route's empty batch slot: NV12 filled with the border colour (numpy only).

Used by :mod:`.route` (a frame the DVPP step's fallback decoded on the CPU) and by :mod:`.vpc` (the template a
VPC step pastes its picture into); it lives here so that neither imports the other.
"""
from __future__ import annotations

import numpy as np

from ...device import DeviceTensor

__all__ = ["canvas_nv12"]


def canvas_nv12(slot: DeviceTensor) -> np.ndarray:
    """The canvas route's empty slot: ``(hs * 3 / 2, ws)`` uint8 NV12 filled with the border colour."""
    assert slot.strides is not None  # batch slots carry their strides
    ws, hs = slot.strides
    y, u, v = slot.meta["canvas"]["pad_nv12"]
    out = np.empty((hs * 3 // 2, ws), np.uint8)
    out[:hs] = y
    out[hs:, 0::2] = u
    out[hs:, 1::2] = v
    return out
