"""Device memory as a first-class place: a tensor that lives in accelerator memory.

A plan step whose output stays on the device (DVPP decode + resize writing NV12 into a per-batch
device buffer, say) hands the next step a :class:`DeviceTensor` instead of a numpy array. It is a
*view*: a pointer into memory owned by someone else (a pipeline's per-batch buffer, a pool), plus
the facts a consumer needs to read it without copying — shape, dtype, layout and row strides.

Nothing here copies: :meth:`DeviceTensor.to_host` is the one explicit device -> host download, and the
planner makes it a timed ``transfer`` step with its bytes wherever a host consumer follows a device one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

__all__ = ["DeviceTensor"]


@dataclass(frozen=True)
class DeviceTensor:
    """A tensor in device memory (a view; it owns nothing).

    Attributes:
        ptr: device address of the first byte (pyACL pointers are ``int``).
        nbytes: bytes from ``ptr`` that belong to this tensor (strides and padding included).
        shape: logical shape. ``NV12``: ``(N, H, W)`` (luma size; the chroma plane follows each
            picture's luma plane, ``H/2`` rows of interleaved U, V); ``NCHW`` / ``NHWC``: as named.
        dtype: numpy dtype name of the elements (``uint8``, ``float16``, ``float32``).
        layout: ``NV12``, ``NCHW`` or ``NHWC``; colour order for 3-channel layouts in ``colour``.
        placement: where the memory is: ``dvpp-hw:0`` (an Ascend device), ``dvpp-sim:0`` (the software
            DVPP device), ``npu:0`` / ``cuda:0`` (torch tensors keep their own placement).
        runtime: the opened device (:class:`dvpipe.backends.dvpp._acl.Runtime`) that can read it.
        strides: ``(width_stride, height_stride)`` in pixels of each picture for ``NV12`` (DVPP pads
            rows and plane heights); ``None`` when the tensor is dense.
        colour: ``bgr`` / ``rgb`` for 3-channel layouts, ``""`` for ``NV12``.
        meta: free-form facts the producer attaches (the AIPP configuration a consumer must apply, the
            colour standard of the source: ``jpeg_full`` / ``bt601_narrow`` / ``bt709_narrow`` ...).
    """

    ptr: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    layout: str
    placement: str
    runtime: Any = field(default=None, repr=False, compare=False)
    strides: Optional[tuple[int, int]] = None
    colour: str = ""
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def device(self) -> str:
        """The placement without the index (``dvpp-sim``)."""
        return self.placement.split(":")[0]

    def to_host(self, **context: Any) -> np.ndarray:
        """Download the whole tensor (``nbytes``, strides included) as a read-only ``uint8`` array.

        This is a device -> host copy over PCIe on an Atlas card: the planner times it as a
        ``transfer`` step; call it yourself only at the end of a route."""
        if self.runtime is None:
            raise ValueError(f"{self!r} has no runtime to read it with")
        return self.runtime.download(self.ptr, self.nbytes, **context)
