"""The software DVPP device: the pyACL subset the DVPP backend calls, for one deployment target.

``SimAcl(Target("Ascend310", "6.0.1"))`` is an object laid out like the ``acl`` module
(``sim.init()``, ``sim.rt.memcpy(...)``, ``sim.media.dvpp_jpeg_decode_async(...)``, ``sim.util.bytes_to_ptr(...)``):
same function names, argument order, return values (``ret`` or ``(value, ret)``) and return codes as
pyACL, so :mod:`dvpipe.backends.dvpp._acl` can hand either to the kernels. What it does:

* **Enforces the knowledge base.** Every JPEGD/VPC/VDEC call is judged by
  :func:`dvpipe.knowledge.check` (API ``acldvpp``) for the target's SoC and CANN version, and by
  :func:`dvpipe.knowledge.stride_for` for the strides and buffer sizes of its picture descriptors.
  A documented violation returns ``ACL_ERROR_INVALID_PARAM`` (100000; the docs name no dedicated code,
  and parameter checks return this one); an unsupported JPEG coding returns
  ``ACL_ERROR_UNSUPPORTED_JPEG`` (148052, documented for ``acldvppJpegGetImageInfo``; the software device
  returns it from the decode call too); ``acldvppVpcConvertColorAsync`` on Ascend310/910 returns
  ``ACL_ERROR_API_NOT_SUPPORT`` (200001; the docs say "not supported", the code is inferred). What the
  docs leave open (a verdict ``unknown``) returns ``ACL_ERROR_FEATURE_UNSUPPORTED`` (200006): the
  software device refuses rather than guess (``strict_unknown=False`` accepts instead). The message of
  the last refusal is returned by ``get_recent_err_msg()``, as pyACL's ``acl.get_recent_err_msg``.
* **Applies documented silent effects**: JPEGD floors odd output sizes to even for YUV420SP and writes
  the real size into the output picture descriptor; VPC on Ascend310/910 floors an odd input size.
* **Writes the real layouts**: NV12 with the width/height strides the caller set, every padding byte
  set to :data:`~dvpipe.backends.dvpp.colour.SENTINEL`. JPEG is decoded with OpenCV (EXIF orientation
  applied, as JPEGD does) and converted to NV12 with the BT.601 full-range matrix (JFIF) and 2x2-mean
  chroma; resizes are bilinear with half-pixel centres (OpenCV ``INTER_LINEAR``); H.264/H.265 is decoded
  with PyAV. Work queued on a stream runs at ``synchronize_stream``, so reading a buffer before
  synchronising shows stale data, as on the device.
* **Counts** device allocations (``sim.memory.device.allocations``) for the no-allocation-per-frame checks.

Where the real return code is not documented the choice is stated next to the code (see also docs/dvpp.md).
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Optional

from .. import _codes as C
from ._dvpp import DvppMedia
from ._memory import Memory
from ._vdec import VdecMedia

__all__ = ["SimAcl"]


class _Obj:
    """Handle table: pyACL hands out descriptors and streams as integer addresses."""

    def __init__(self) -> None:
        self._items: dict[int, Any] = {}
        self._ids = itertools.count(0x9000_0000, 64)
        self._lock = threading.Lock()

    def add(self, obj: Any) -> int:
        with self._lock:
            h = next(self._ids)
            self._items[h] = obj
        return h

    def get(self, handle: Any, kind: type) -> Any:
        obj = self._items.get(handle) if isinstance(handle, int) else None
        return obj if isinstance(obj, kind) else None

    def pop(self, handle: Any, kind: type) -> Any:
        with self._lock:
            obj = self._items.get(handle) if isinstance(handle, int) else None
            if isinstance(obj, kind):
                del self._items[handle]
                return obj
        return None


class _Stream:
    def __init__(self) -> None:
        self.queue: list[Callable[[], int]] = []
        self.lock = threading.Lock()


class _Context:
    def __init__(self, device_id: int) -> None:
        self.device_id = device_id


class _Rt:
    """``acl.rt``: device, context, stream, memory copies, callback reports."""

    def __init__(self, sim: "SimAcl"):
        self._sim = sim

    def set_device(self, device_id: int) -> int:
        if not self._sim._initialised:
            return C.ACL_ERROR_UNINITIALIZE
        if device_id != 0:
            return self._sim.fail(C.ACL_ERROR_INVALID_DEVICE, f"the software device has device 0 only, not {device_id}")
        self._sim.devices_set += 1
        return C.ACL_SUCCESS

    def reset_device(self, device_id: int) -> int:
        if device_id != 0 or self._sim.devices_set == 0:
            return C.ACL_ERROR_INVALID_DEVICE
        self._sim.devices_set -= 1
        return C.ACL_SUCCESS

    def create_context(self, device_id: int):
        if not self._sim._initialised:
            return None, C.ACL_ERROR_UNINITIALIZE
        if device_id != 0:
            return None, C.ACL_ERROR_INVALID_DEVICE
        return self._sim.objs.add(_Context(device_id)), C.ACL_SUCCESS

    def destroy_context(self, context: int) -> int:
        return C.ACL_SUCCESS if self._sim.objs.pop(context, _Context) else C.ACL_ERROR_INVALID_PARAM

    def set_context(self, context: int) -> int:
        if self._sim.objs.get(context, _Context) is None:
            return C.ACL_ERROR_INVALID_PARAM
        self._sim.tls.context = context
        return C.ACL_SUCCESS

    def get_run_mode(self):
        # the software device behaves as a host-side application with a PCIe device (ACL_HOST = 1)
        return 1, C.ACL_SUCCESS

    def create_stream(self):
        if not self._sim._initialised:
            return None, C.ACL_ERROR_UNINITIALIZE
        return self._sim.objs.add(_Stream()), C.ACL_SUCCESS

    def destroy_stream(self, stream: int) -> int:
        s = self._sim.objs.pop(stream, _Stream)
        if s is None:
            return C.ACL_ERROR_INVALID_PARAM
        return C.ACL_SUCCESS

    def synchronize_stream(self, stream: int) -> int:
        s = self._sim.objs.get(stream, _Stream)
        if s is None:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, "synchronize_stream: unknown stream")
        with s.lock:
            work, s.queue = s.queue, []
        ret = C.ACL_SUCCESS
        for job in work:
            r = job()
            if r != C.ACL_SUCCESS and ret == C.ACL_SUCCESS:
                ret = r
        return ret

    def memcpy(self, dst: int, dest_max: int, src: int, count: int, kind: int) -> int:
        if count > dest_max:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"memcpy: count {count} exceeds dest_max {dest_max}")
        if kind not in (0, 1, 2, 3, 4):
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"memcpy: unknown kind {kind}")
        _s, sv = self._sim.memory.resolve(src, count)
        _d, dv = self._sim.memory.resolve(dst, count)
        if sv is None or dv is None:
            which = "source" if sv is None else "destination"
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"memcpy: the {which} range of {count} bytes is not "
                                                             "inside one allocation")
        if _d == "borrowed":
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, "memcpy: destination is read-only bytes")
        dv[...] = sv
        return C.ACL_SUCCESS

    def malloc_host(self, size: int):
        if size <= 0:
            return None, C.ACL_ERROR_INVALID_PARAM
        return self._sim.memory.host.alloc(size), C.ACL_SUCCESS

    def free_host(self, ptr: int) -> int:
        return C.ACL_SUCCESS if self._sim.memory.host.free(ptr) else C.ACL_ERROR_INVALID_PARAM

    def subscribe_report(self, thread_id: int, stream: int) -> int:
        return C.ACL_SUCCESS

    def unsubscribe_report(self, thread_id: int, stream: int) -> int:
        return C.ACL_SUCCESS

    def process_report(self, timeout: int) -> int:
        """Run one pending callback of the calling thread (``acl.util.start_thread`` thread), or time out."""
        return self._sim.reports.process(timeout)


class _Util:
    """``acl.util``: pointers for Python bytes, callback threads."""

    def __init__(self, sim: "SimAcl"):
        self._sim = sim

    def bytes_to_ptr(self, data: bytes) -> int:
        if not isinstance(data, bytes):
            raise ValueError("needs an byte as argument")  # pyACL's own message (bytes_convert.cpp)
        return self._sim.memory.borrowed.register(data)

    def ptr_to_bytes(self, ptr: int, size: int) -> bytes:
        _space, view = self._sim.memory.resolve(ptr, size)
        if view is None:
            raise ValueError(f"ptr_to_bytes: {size} bytes at {ptr:#x} are not mapped")
        return view.tobytes()

    def start_thread(self, fn: Callable, args: Any):
        return self._sim.reports.start_thread(fn, args), C.ACL_SUCCESS

    def stop_thread(self, thread_id: int) -> int:
        return self._sim.reports.stop_thread(thread_id)


class _Reports:
    """Callback reports routed to the thread that ``vdec_set_channel_desc_thread_id`` named."""

    def __init__(self) -> None:
        self._queues: dict[int, list] = {}
        self._cv = threading.Condition()
        self._threads: dict[int, threading.Thread] = {}
        self._ident_to_tid: dict[int, int] = {}
        self._ids = itertools.count(1)

    def start_thread(self, fn: Callable, args: Any) -> int:
        tid = next(self._ids)
        with self._cv:
            self._queues[tid] = []
        t = threading.Thread(target=self._run, args=(tid, fn, args), daemon=True, name=f"acl-report-{tid}")
        self._threads[tid] = t
        t.start()
        return tid

    def _run(self, tid: int, fn: Callable, args: Any) -> None:
        with self._cv:
            self._ident_to_tid[threading.get_ident()] = tid
        fn(args)

    def stop_thread(self, tid: int) -> int:
        t = self._threads.pop(tid, None)
        if t is None:
            return C.ACL_ERROR_INVALID_PARAM
        t.join(timeout=10)
        with self._cv:
            self._queues.pop(tid, None)
        return C.ACL_SUCCESS if not t.is_alive() else C.ACL_ERROR_FAILURE

    def post(self, tid: int, job: Callable[[], None]) -> bool:
        with self._cv:
            q = self._queues.get(tid)
            if q is None:
                return False
            q.append(job)
            self._cv.notify_all()
        return True

    def process(self, timeout_ms: int) -> int:
        tid = self._ident_to_tid.get(threading.get_ident())
        if tid is None:
            return C.ACL_ERROR_THREAD_NOT_SUBSCRIBE
        with self._cv:
            ok = self._cv.wait_for(lambda: bool(self._queues.get(tid)), timeout=max(timeout_ms, 0) / 1000.0)
            if not ok:
                return C.ACL_ERROR_WAIT_CALLBACK_TIMEOUT
            job = self._queues[tid].pop(0)
        job()
        return C.ACL_SUCCESS


class _Media(DvppMedia, VdecMedia):
    """``acl.media``: JPEGD, VPC and VDEC."""

    def __init__(self, sim: "SimAcl"):
        self._sim = sim


class SimAcl:
    """The software DVPP device for one :class:`dvpipe.Target` (see the module docstring).

    Args:
        target: the SoC and CANN version whose documented behaviour is simulated.
        strict_unknown: refuse (``ACL_ERROR_FEATURE_UNSUPPORTED``) what the docs leave open (default);
            False accepts it as if it worked.
    """

    def __init__(self, target: Any, strict_unknown: bool = True):
        self.target = target
        self.strict_unknown = strict_unknown
        self.memory = Memory()
        self.objs = _Obj()
        self.reports = _Reports()
        self.tls = threading.local()
        self.rt = _Rt(self)
        self.util = _Util(self)
        self.media = _Media(self)
        self._initialised = False
        self.devices_set = 0
        self.refusals: list[tuple[int, str]] = []

    # -- acl.* -------------------------------------------------------------------------------------
    def init(self, config_path: Optional[str] = None) -> int:
        if self._initialised:
            return C.ACL_ERROR_REPEAT_INITIALIZE
        self._initialised = True
        return C.ACL_SUCCESS

    def finalize(self) -> int:
        if not self._initialised:
            return C.ACL_ERROR_REPEAT_FINALIZE
        self._initialised = False
        return C.ACL_SUCCESS

    def get_soc_name(self) -> Optional[str]:
        return self.target.soc if self._initialised else None

    def get_recent_err_msg(self) -> str:
        return getattr(self.tls, "error", "") or ""

    # -- helpers for the media namespaces ------------------------------------------------------------
    def fail(self, ret: int, message: str) -> int:
        """Record why a call is refused (``get_recent_err_msg``) and return ``ret``."""
        self.tls.error = message
        self.refusals.append((ret, message))
        del self.refusals[:-64]
        return ret

    def __repr__(self) -> str:
        return f"SimAcl({self.target})"
