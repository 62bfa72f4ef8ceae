"""Device buffer pool: DVPP memory keyed by (size, format), reused frame after frame.

``acl.media.dvpp_malloc`` is slow and fragments the DVPP heap, so every picture and bitstream buffer
comes from a :class:`BufferPool`: :meth:`~BufferPool.acquire` returns a free buffer of the same key
or allocates one; :meth:`~BufferPool.release` puts it back. Bitstream buffers (whose size changes from
frame to frame) are keyed by a size class (the next power of two, at least 64 KiB), pictures by their
exact size. After the first frame sets (the warm-up) a pipeline allocates nothing: ``pool.allocations``
stays constant, which the tests assert.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DeviceBuffer", "BufferPool", "PoolStats", "size_class", "pool_for", "drop_pool"]


def size_class(nbytes: int, minimum: int = 1 << 16) -> int:
    """The bucket size for a variable-size buffer: the next power of two, at least ``minimum`` bytes."""
    n = max(int(nbytes), minimum)
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class DeviceBuffer:
    """One DVPP allocation: ``ptr`` (device address), ``size`` (bytes), ``fmt`` (what it holds)."""

    ptr: int
    size: int
    fmt: str


@dataclass
class PoolStats:
    """Counters of a pool (all monotonic except ``in_use`` and ``free``)."""

    allocations: int = 0
    frees: int = 0
    acquires: int = 0
    reuses: int = 0
    releases: int = 0
    bytes_allocated: int = 0
    in_use: int = 0
    free: int = 0
    by_key: dict = field(default_factory=dict)


class BufferPool:
    """A pool of DVPP buffers for one runtime (see the module docstring). Thread-safe.

    Args:
        runtime: the :class:`~dvpipe.backends.dvpp._acl.Runtime` whose ``malloc``/``free`` it uses.
        max_free_per_key: free buffers kept per key; more are freed on release.
    """

    def __init__(self, runtime: Any, max_free_per_key: int = 16):
        self.runtime = runtime
        self.max_free_per_key = max_free_per_key
        self._free: dict[tuple[int, str], list[DeviceBuffer]] = {}
        self._lock = threading.Lock()
        self.allocations = 0
        self.frees = 0
        self.acquires = 0
        self.reuses = 0
        self.releases = 0
        self.bytes_allocated = 0
        self._in_use = 0
        self.closed = False

    def acquire(self, size: int, fmt: str) -> DeviceBuffer:
        """A buffer of exactly ``size`` bytes holding ``fmt`` (reused when one is free)."""
        key = (int(size), fmt)
        with self._lock:
            self.acquires += 1
            bucket = self._free.get(key)
            if bucket:
                self.reuses += 1
                self._in_use += 1
                return bucket.pop()
        ptr = self.runtime.malloc(size, format=fmt)
        with self._lock:
            self.allocations += 1
            self.bytes_allocated += int(size)
            self._in_use += 1
        return DeviceBuffer(ptr, int(size), fmt)

    def acquire_stream(self, nbytes: int, fmt: str = "bitstream") -> DeviceBuffer:
        """A buffer for a variable-size bitstream of ``nbytes`` (keyed by :func:`size_class`)."""
        return self.acquire(size_class(nbytes), fmt)

    def release(self, buf: DeviceBuffer) -> None:
        """Return a buffer; it is reused by the next :meth:`acquire` of the same key."""
        key = (buf.size, buf.fmt)
        drop = False
        with self._lock:
            self.releases += 1
            self._in_use -= 1
            bucket = self._free.setdefault(key, [])
            if self.closed:  # the runtime is being torn down: free at once
                drop = True
            elif len(bucket) < self.max_free_per_key:
                bucket.append(buf)
            else:
                drop = True
        if drop:
            self.runtime.free(buf.ptr)
            with self._lock:
                self.frees += 1

    def clear(self) -> None:
        """Free every buffer that is not in use."""
        with self._lock:
            bufs = [b for bucket in self._free.values() for b in bucket]
            self._free.clear()
        for b in bufs:
            self.runtime.free(b.ptr)
        with self._lock:
            self.frees += len(bufs)

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(allocations=self.allocations, frees=self.frees, acquires=self.acquires,
                             reuses=self.reuses, releases=self.releases, bytes_allocated=self.bytes_allocated,
                             in_use=self._in_use, free=sum(len(b) for b in self._free.values()),
                             by_key={f"{fmt}:{size}": len(b) for (size, fmt), b in self._free.items()})

    def __repr__(self) -> str:
        s = self.stats()
        return (f"BufferPool(allocations={s.allocations}, reuses={s.reuses}, in_use={s.in_use}, free={s.free}, "
                f"bytes={s.bytes_allocated})")


_POOLS: dict[int, BufferPool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for(runtime: Any) -> BufferPool:
    """The shared pool of a runtime (one per opened device or software device)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(id(runtime))
        if pool is None or pool.runtime is not runtime:
            pool = _POOLS[id(runtime)] = BufferPool(runtime)
        return pool


def drop_pool(runtime: Any) -> None:
    """Free every idle buffer of ``runtime``'s pool and forget the pool; buffers still in use are freed
    when they are released (teardown: ``acl.media.dvpp_free`` before the context is destroyed)."""
    with _POOLS_LOCK:
        pool = _POOLS.pop(id(runtime), None)
    if pool is not None:
        with pool._lock:
            pool.closed = True
        pool.clear()
