"""Address spaces of the software device: device (DVPP) memory, pinned host memory, borrowed host bytes.

pyACL hands out memory as integer addresses; the software device does the same. Every address maps to
a numpy ``uint8`` array; an address inside an allocation (base + offset) resolves to a view. Freed or
unknown addresses do not resolve (the caller returns the error code the API gives).
"""
from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["AddressSpace", "BorrowedBytes", "Memory"]


@dataclass
class _Block:
    base: int
    array: np.ndarray


class AddressSpace:
    """One range of fake addresses with allocations aligned to ``align`` bytes."""

    def __init__(self, name: str, start: int, align: int = 128):
        self.name = name
        self._next = start
        self._align = align
        self._bases: list[int] = []
        self._blocks: dict[int, _Block] = {}
        self._lock = threading.Lock()
        self.allocations = 0
        self.frees = 0
        self.bytes_live = 0

    def alloc(self, nbytes: int, fill: Optional[int] = None) -> int:
        arr = np.empty(max(int(nbytes), 1), np.uint8)
        if fill is not None:
            arr.fill(fill)
        with self._lock:
            base = self._next
            # a gap after every block so that running past the end never lands in the next one
            self._next += -(-(arr.size + 4096) // self._align) * self._align
            bisect.insort(self._bases, base)
            self._blocks[base] = _Block(base, arr)
            self.allocations += 1
            self.bytes_live += arr.size
        return base

    def free(self, base: int) -> bool:
        with self._lock:
            blk = self._blocks.pop(base, None)
            if blk is None:
                return False
            self._bases.remove(base)
            self.frees += 1
            self.bytes_live -= blk.array.size
        return True

    def resolve(self, addr: int, nbytes: int) -> Optional[np.ndarray]:
        """A writable view of ``nbytes`` at ``addr``, or None if that range is not inside one allocation."""
        with self._lock:
            i = bisect.bisect_right(self._bases, addr) - 1
            if i < 0:
                return None
            blk = self._blocks[self._bases[i]]
        off = addr - blk.base
        if off < 0 or off + nbytes > blk.array.size:
            return None
        return blk.array[off:off + nbytes]

    @property
    def live(self) -> int:
        with self._lock:
            return len(self._blocks)


class BorrowedBytes:
    """Addresses handed out by ``acl.util.bytes_to_ptr``: read-only views of Python ``bytes``.

    pyACL requires the caller to keep the bytes alive while the pointer is used; the software device
    keeps the last ``keep`` objects referenced so that a pointer stays valid for the call that follows.
    """

    def __init__(self, start: int, keep: int = 256):
        self._next = start
        self._keep = keep
        self._items: "OrderedDict[int, memoryview]" = OrderedDict()
        self._lock = threading.Lock()

    def register(self, data: bytes) -> int:
        mv = memoryview(data)
        with self._lock:
            addr = self._next
            self._next += -(-(len(mv) + 4096) // 128) * 128
            self._items[addr] = mv
            while len(self._items) > self._keep:
                self._items.popitem(last=False)
        return addr

    def resolve(self, addr: int, nbytes: int) -> Optional[np.ndarray]:
        with self._lock:
            for base, mv in reversed(self._items.items()):
                if base <= addr and addr + nbytes <= base + len(mv):
                    return np.frombuffer(mv, np.uint8)[addr - base:addr - base + nbytes]
        return None


class Memory:
    """All address spaces of one software device."""

    def __init__(self) -> None:
        self.device = AddressSpace("device", 0x1000_0000_0000, align=128)  # acl.media.dvpp_malloc (DVPP heap)
        self.rt = AddressSpace("rt", 0x3000_0000_0000, align=512)  # acl.rt.malloc (ordinary device memory)
        self.host = AddressSpace("host", 0x5000_0000_0000, align=64)
        self.borrowed = BorrowedBytes(0x7000_0000_0000)

    def resolve(self, addr: int, nbytes: int) -> tuple[Optional[str], Optional[np.ndarray]]:
        """``(space name, view)`` of ``nbytes`` at ``addr``; ``(None, None)`` when unmapped."""
        if not isinstance(addr, (int, np.integer)) or addr <= 0:
            return None, None
        for space in (self.device, self.rt, self.host):
            v = space.resolve(int(addr), int(nbytes))
            if v is not None:
                return space.name, v
        v = self.borrowed.resolve(int(addr), int(nbytes))
        if v is not None:
            return "borrowed", v
        return None, None
