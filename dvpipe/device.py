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
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .errors import ConfigError

if TYPE_CHECKING:  # the DVPP runtime sits above this layer: a name for the type checker only
    from .backends.dvpp._acl import Runtime

__all__ = ["DeviceTensor", "DeviceBatch", "slot_pitch", "nv12_batch_to_host"]


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
    runtime: Optional[Runtime] = field(default=None, repr=False, compare=False)
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
            raise ConfigError(f"{self!r} has no runtime to read it with: construct it with runtime= (the opened "
                              "device that allocated it)")
        return self.runtime.download(self.ptr, self.nbytes, **context)


def slot_pitch(nbytes: int) -> int:
    """Bytes between two pictures carved out of one DVPP allocation that a model reads: each segment is
    ``m = ALIGN_UP(len, 32) + 32`` bytes and starts 128-byte aligned (``ALIGN_UP(m, 128)``), as pyACL documents
    for media output used as model input in self-partitioned memory (``acl.media.dvpp_malloc``, CANN 6.0.1
    aclpythondevg_01_0195; CANN 8.0.0 aclpythondevg_01_0223)."""
    m = -(-int(nbytes) // 32) * 32 + 32
    return -(-m // 128) * 128


class DeviceBatch:
    """A per-batch device buffer that owns its memory: ``n`` NV12 pictures of ``width x height``, each at
    ``strides = (width_stride, height_stride)``, one after the other (camera i at ``ptr + i * pitch``,
    :func:`slot_pitch`: the picture's bytes plus the 32-byte-plus gap pyACL documents between DVPP segments).

    Allocated once per output buffer of a pipeline's ring (``acl.media.dvpp_malloc``; DVPP writes into it)
    and freed by :meth:`close` (``Pipeline.close()``); never per frame. ``batch[i]`` is camera i's slot
    (a :class:`DeviceTensor` with ``meta["batch_slot"] = i``), :attr:`tensor` the whole batch.

    Args:
        runtime: the opened device (:class:`dvpipe.backends.dvpp._acl.Runtime`); held until :meth:`close`.
        n, width, height: cameras and the picture size (luma) in pixels.
        strides: ``(width_stride, height_stride)`` in pixels (the producer's documented output layout).
        placement: ``dvpp-sim:0`` / ``dvpp-hw:0``.
        meta: facts for the consumer (the AIPP configuration, the colour standard).
    """

    def __init__(self, runtime: Runtime, n: int, width: int, height: int, strides: tuple[int, int], placement: str,
                 meta: Optional[dict] = None):
        ws, hs = (int(v) for v in strides)
        self.runtime = runtime
        self.n, self.width, self.height, self.strides = int(n), int(width), int(height), (ws, hs)
        self.placement = placement
        self.meta = dict(meta or {})
        self.slot_bytes = ws * hs * 3 // 2
        self.pitch = slot_pitch(self.slot_bytes)
        self.meta["slot_pitch"] = self.pitch
        self.nbytes = self.pitch * self.n
        self.closed = False
        runtime.hold()
        try:
            self.ptr = runtime.malloc(self.nbytes, format="batch")
        except Exception:
            runtime.unhold()
            raise
        runtime.register_closer(self)  # closed before the runtimes at exit if nobody closed it
        self._slots = [DeviceTensor(self.ptr + i * self.pitch, self.slot_bytes, (1, self.height, self.width),
                                    "uint8", "NV12", placement, runtime, self.strides, "",
                                    {**self.meta, "batch_slot": i}) for i in range(self.n)]
        self._zeros: Optional[bytes] = None

    @property
    def tensor(self) -> DeviceTensor:
        """The whole batch: ``NV12``, shape ``(N, H, W)`` at :attr:`strides`, picture i at ``i * meta["slot_pitch"]``
        bytes from ``ptr``."""
        return DeviceTensor(self.ptr, self.nbytes, (self.n, self.height, self.width), "uint8", "NV12",
                            self.placement, self.runtime, self.strides, "", dict(self.meta))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> DeviceTensor:
        return self._slots[i]

    def clear(self, i: int) -> int:
        """Fill slot ``i`` with zero bytes (a dropped camera, as the host batch zeroes its image); returns the
        bytes uploaded (pyACL has no DVPP memset in the calls dvpipe uses: a host -> device copy)."""
        if self._zeros is None:
            self._zeros = bytes(self.slot_bytes)
        self.runtime.upload(self._slots[i].ptr, self.slot_bytes, self._zeros, step="clear batch slot")
        return self.slot_bytes

    def to_host(self) -> np.ndarray:
        """The batch downloaded as ``(N, height_stride * 3 / 2, width_stride)`` uint8 (what AIPP reads)."""
        return nv12_batch_to_host(self.tensor)

    def close(self) -> None:
        """Free the buffer and release the runtime. Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self.runtime.free(self.ptr)
        finally:
            self.runtime.unhold()

    def __repr__(self) -> str:
        return (f"DeviceBatch({self.n} x NV12 {self.width}x{self.height} stride {self.strides[0]}x{self.strides[1]}"
                f" on {self.placement}{', closed' if self.closed else ''})")


def nv12_batch_to_host(t: DeviceTensor) -> np.ndarray:
    """Download an NV12 batch tensor as ``(N, height_stride * 3 / 2, width_stride)`` uint8, the pictures
    gathered from their slots (``meta["slot_pitch"]`` bytes apart; dense when absent). One device -> host copy."""
    assert t.strides is not None  # an NV12 tensor carries its strides
    ws, hs = t.strides
    n = t.shape[0]
    per = hs * 3 // 2 * ws
    pitch = int(t.meta.get("slot_pitch", per))
    raw = np.asarray(t.to_host(step="batch download"))
    if pitch == per:
        return raw[:n * per].reshape(n, hs * 3 // 2, ws)
    return np.stack([raw[i * pitch:i * pitch + per].reshape(hs * 3 // 2, ws) for i in range(n)])
