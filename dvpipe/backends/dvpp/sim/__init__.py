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
  chroma; resizes are bilinear with half-pixel centres (OpenCV ``INTER_LINEAR``) for interpolation 1, the
  default filter per product as documented (see :mod:`._dvpp`); H.264/H.265 is decoded
  with PyAV. Work queued on a stream runs at ``synchronize_stream``, so reading a buffer before
  synchronising shows stale data, as on the device.
* **Counts** device allocations (``sim.memory.device.allocations``) for the no-allocation-per-frame checks,
  and keeps a **ledger** of live objects (:func:`ledger`: contexts, streams, channels, descriptors,
  configurations, DVPP/device/host buffers, callback threads), all zero once everything is torn down.
* **Creators return 0 on failure** as pyACL's do (CANN 8.0.0 aclpythondevg_01_0244: ``dvpp_create_pic_desc``
  "0 means failure"): before ``acl.init`` and for a unit with an injected fault.
* **Fault injection** (:func:`inject_fault`): every call of one unit (``jpegd``, ``vpc``, ``vdec``, ``mdl``)
  fails with ``ACL_ERROR_RT_FAILURE`` (and its creators return 0), so that a smoke test can show it notices.
* **Offline models** (``sim.mdl``, ``sim.create_data_buffer`` ..., see :mod:`._mdl`): a "model file" is a
  descriptor naming a numpy function (docs/models.md); execution reads the input dataset from the simulated
  device memory, applies the model's static or dynamic AIPP (:func:`dvpipe.backends.dvpp.aipp.apply_aipp`),
  calls the function and writes its outputs into the output buffers.
* ``acl.rt.process_report`` returns ``ACL_ERROR_RT_REPORT_TIMEOUT`` (507012) on a timeout and
  ``ACL_ERROR_THREAD_NOT_SUBSCRIBE`` (100035) at once on a thread no VDEC channel names.

Nothing here ran on Ascend hardware: the software device follows the documentation (and states its
assumptions where the documentation is silent); it is not a measurement of a device.

Where the real return code is not documented the choice is stated next to the code (see also docs/dvpp.md).
"""
from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from typing import Any, Callable, Iterator, Optional

from ....errors import ConfigError
from .. import _codes as C
from ._dvpp import DvppMedia
from ._mdl import DataBufferCalls, MdlNamespace
from ._memory import Memory
from ._stream import _Stream
from ._vdec import VdecMedia

__all__ = ["SimAcl", "ledger", "inject_fault", "clear_faults", "faults", "UNITS", "MEMCPY_KINDS"]

#: ``acl.rt.memcpy`` kind -> (source, destination) memory it copies between (CANN 8.0.0 aclpythondevg_01_0120)
MEMCPY_KINDS = {0: ("host", "host"), 1: ("host", "device"), 2: ("device", "host"), 3: ("device", "device")}

#: the DVPP units a fault can be injected into
UNITS = ("jpegd", "vpc", "vdec", "mdl")
_FAULTS: set = set()
_INSTANCES: "weakref.WeakSet" = weakref.WeakSet()


def inject_fault(unit: str) -> None:
    """Make every call of ``unit`` (``jpegd``, ``vpc``, ``vdec`` or ``mdl``) fail on every software device
    (``ACL_ERROR_RT_FAILURE``; that unit's creators return 0) until :func:`clear_faults`."""
    if unit not in UNITS:
        raise ConfigError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    _FAULTS.add(unit)


def clear_faults() -> None:
    _FAULTS.clear()


@contextlib.contextmanager
def faults(*units: str) -> Iterator[None]:
    """``with faults("vdec"): ...`` injects the faults for the block."""
    for u in units:
        inject_fault(u)
    try:
        yield
    finally:
        clear_faults()


def faulty(unit: str) -> bool:
    return unit in _FAULTS


def ledger() -> dict:
    """Counts of what is still alive on every software device of this process: ``contexts``, ``devices``
    (set and not reset), ``initialised`` (acl.init without acl.finalize), ``streams``, ``dvpp_channels``,
    ``vdec_channels`` (created and not destroyed), ``channel_descs``, ``vdec_channel_descs``, ``pic_descs``,
    ``stream_descs``, ``resize_configs``, ``roi_configs``, ``frame_configs``, ``dvpp_buffers``
    (``dvpp_malloc``), ``device_buffers`` (``acl.rt.malloc``), ``host_buffers`` (``malloc_host``),
    ``threads`` (``acl.util.start_thread`` not stopped), ``models`` (loaded, not unloaded), ``model_descs``,
    ``datasets``, ``data_buffers``, ``aipp_sets`` (created, not destroyed). All zero after a complete
    teardown."""
    total: dict = {}
    for sim in list(_INSTANCES):
        for k, v in sim.ledger().items():
            total[k] = total.get(k, 0) + v
    if not total:
        total = SimAcl.empty_ledger()
    return total


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

    def of(self, kind: type) -> list:
        with self._lock:
            return [o for o in self._items.values() if isinstance(o, kind)]


class _Context:
    def __init__(self, device_id: int, default: bool = False) -> None:
        self.device_id = device_id
        #: the device's default context (aclrtSetDevice creates it; aclrtDestroyContext may not destroy it)
        self.default = default


class _Rt:
    """``acl.rt``: device, context, stream, memory copies, callback reports.

    Contexts (CANN 8.0.0 aclcppdevg_03_0061 aclrtSetCurrentContext; pyACL set_context/get_context 8.0.0
    aclpythondevg_01_0074/0075): a thread has one current context; ``create_context`` makes the new context
    current on the creating thread; ``set_device`` makes the device's default context current (a thread that
    did neither has none: ``get_context`` returns 107002 ACL_ERROR_RT_CONTEXT_NULL, the stricter reading);
    the default context cannot be destroyed. Streams belong to the context current when they were created;
    using one while another context is current returns 107003 ACL_ERROR_RT_STREAM_CONTEXT (rt_error_codes.h:
    "stream not in current context"). ``set_device``/``reset_device`` count references (8.0.0
    aclcppdevg_03_0040): the device and its default context go when the count reaches 0.
    """

    def __init__(self, sim: "SimAcl"):
        self._sim = sim

    def set_device(self, device_id: int) -> int:
        sim = self._sim
        if not sim._initialised:
            return C.ACL_ERROR_UNINITIALIZE
        if device_id != 0:
            return sim.fail(C.ACL_ERROR_INVALID_DEVICE, f"the software device has device 0 only, not {device_id}")
        with sim.lock:
            sim.devices_set += 1
            if not sim.default_context:
                sim.default_context = sim.objs.add(_Context(device_id, default=True))
        sim.tls.context = sim.default_context
        return C.ACL_SUCCESS

    def reset_device(self, device_id: int) -> int:
        sim = self._sim
        if device_id != 0 or sim.devices_set == 0:
            return C.ACL_ERROR_INVALID_DEVICE
        with sim.lock:
            sim.devices_set -= 1
            if sim.devices_set == 0 and sim.default_context:
                sim.objs.pop(sim.default_context, _Context)
                sim.default_context = 0
        return C.ACL_SUCCESS

    def create_context(self, device_id: int):
        if not self._sim._initialised or not self._sim.devices_set:
            return None, C.ACL_ERROR_UNINITIALIZE
        if device_id != 0:
            return None, C.ACL_ERROR_INVALID_DEVICE
        ctx = self._sim.objs.add(_Context(device_id))
        self._sim.tls.context = ctx  # the new context is the creating thread's current context
        return ctx, C.ACL_SUCCESS

    def destroy_context(self, context: int) -> int:
        c = self._sim.objs.get(context, _Context)
        if c is None:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, "destroy_context: unknown context")
        if c.default:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, "destroy_context: the default context cannot be "
                                                             "destroyed (reset the device)")
        self._sim.objs.pop(context, _Context)
        if getattr(self._sim.tls, "context", None) == context:
            self._sim.tls.context = None
        return C.ACL_SUCCESS

    def set_context(self, context: int) -> int:
        if self._sim.objs.get(context, _Context) is None:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, "set_context: unknown or destroyed context")
        self._sim.tls.context = context
        return C.ACL_SUCCESS

    def get_context(self):
        """``context, ret = acl.rt.get_context()``: the calling thread's current context."""
        ctx = self._sim.current_context()
        if not ctx:
            return 0, self._sim.fail(C.ACL_ERROR_RT_CONTEXT_NULL, "get_context: no current context on this thread")
        return ctx, C.ACL_SUCCESS

    def get_run_mode(self):
        # the software device behaves as a host-side application with a PCIe device (ACL_HOST = 1)
        return 1, C.ACL_SUCCESS

    def create_stream(self):
        if not self._sim._initialised:
            return None, C.ACL_ERROR_UNINITIALIZE
        ctx = self._sim.current_context()
        if not ctx:
            return None, self._sim.fail(C.ACL_ERROR_RT_CONTEXT_NULL, "create_stream: no current context on this "
                                                                     "thread")
        return self._sim.objs.add(_Stream(ctx)), C.ACL_SUCCESS

    def destroy_stream(self, stream: int) -> int:
        _s, ret = self._sim.stream(stream, "destroy_stream")
        if ret:
            return ret
        self._sim.objs.pop(stream, _Stream)
        return C.ACL_SUCCESS

    def synchronize_stream(self, stream: int) -> int:
        s, ret = self._sim.stream(stream, "synchronize_stream")
        if ret:
            return ret
        with s.lock:
            work, s.queue = s.queue, []
        ret = C.ACL_SUCCESS
        for job in work:
            r = job()
            if r != C.ACL_SUCCESS and ret == C.ACL_SUCCESS:
                ret = r
        return ret

    def memcpy(self, dst: int, dest_max: int, src: int, count: int, kind: int) -> int:
        """``acl.rt.memcpy`` (CANN 8.0.0 aclpythondevg_01_0120): kinds 0 host->host, 1 host->device,
        2 device->host, 3 device->device. The page calls ``kind`` reserved and says the runtime judges from
        the two addresses whether the copy can be made, else it returns an error; the software device takes
        the stricter reading: the kind must name where both pointers live (host: ``malloc_host`` memory and
        ``bytes_to_ptr`` bytes; device: ``dvpp_malloc`` and ``rt.malloc`` memory), else
        ``ACL_ERROR_INVALID_PARAM``. Kinds outside 0..3 (the C enum's later ACL_MEMCPY_DEFAULT ...) are not
        on the pyACL page and are refused."""
        if count > dest_max:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"memcpy: count {count} exceeds dest_max {dest_max}")
        if kind not in MEMCPY_KINDS:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"memcpy: unknown kind {kind} (pyACL lists 0..3)")
        _s, sv = self._sim.memory.resolve(src, count)
        _d, dv = self._sim.memory.resolve(dst, count)
        if sv is None or dv is None:
            which = "source" if sv is None else "destination"
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"memcpy: the {which} range of {count} bytes is not "
                                                             "inside one allocation")
        if _d == "borrowed":
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, "memcpy: destination is read-only bytes")
        want = MEMCPY_KINDS[kind]
        where = {"host": "host", "borrowed": "host", "device": "device", "rt": "device"}
        got = (where[str(_s)], where[str(_d)])
        if got != want:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM,
                                  f"memcpy: kind {kind} copies {want[0]} -> {want[1]}, but the source is {got[0]} "
                                  f"memory and the destination {got[1]} memory")
        dv[...] = sv
        return C.ACL_SUCCESS

    def malloc_host(self, size: int):
        if size <= 0:
            return None, C.ACL_ERROR_INVALID_PARAM
        return self._sim.memory.host.alloc(size), C.ACL_SUCCESS

    def free_host(self, ptr: int) -> int:
        return C.ACL_SUCCESS if self._sim.memory.host.free(ptr) else C.ACL_ERROR_INVALID_PARAM

    def malloc(self, size: int, policy: int = 0):
        """``acl.rt.malloc``: ordinary device memory (VDEC input may live here from CANN 6.2.RC1 on)."""
        if not self._sim._initialised:
            return None, C.ACL_ERROR_UNINITIALIZE
        if size <= 0:
            return None, C.ACL_ERROR_INVALID_PARAM
        return self._sim.memory.rt.alloc(size, fill=0xCD), C.ACL_SUCCESS

    def free(self, ptr: int) -> int:
        return C.ACL_SUCCESS if self._sim.memory.rt.free(ptr) else C.ACL_ERROR_INVALID_PARAM

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
            raise ValueError("needs an byte as argument")  # builtin on purpose: pyACL's own exception (bytes_convert.cpp)
        return self._sim.memory.borrowed.register(data)

    def ptr_to_bytes(self, ptr: int, size: int) -> bytes:
        _space, view = self._sim.memory.resolve(ptr, size)
        if view is None:
            raise ValueError(f"ptr_to_bytes: {size} bytes at {ptr:#x} are not mapped")  # builtin on purpose: as pyACL
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
        self._subscribed: dict[int, int] = {}
        self._done: dict[int, int] = {}
        self._posted: dict[int, int] = {}

    @property
    def live(self) -> int:
        return sum(1 for t in self._threads.values() if t.is_alive() or not t.ident)

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
            self._done.pop(tid, None)
            self._posted.pop(tid, None)
            self._cv.notify_all()
        return C.ACL_SUCCESS if not t.is_alive() else C.ACL_ERROR_FAILURE

    def post(self, tid: int, job: Callable[[], None]) -> bool:
        with self._cv:
            q = self._queues.get(tid)
            if q is None:
                return False
            q.append(job)
            self._posted[tid] = self._posted.get(tid, 0) + 1
            self._cv.notify_all()
        return True

    def subscribe(self, tid: int) -> None:
        """A VDEC channel names thread ``tid``: its ``process_report`` calls now wait for reports."""
        with self._cv:
            self._subscribed[tid] = self._subscribed.get(tid, 0) + 1

    def unsubscribe(self, tid: int) -> None:
        with self._cv:
            n = self._subscribed.get(tid, 0) - 1
            if n > 0:
                self._subscribed[tid] = n
            else:
                self._subscribed.pop(tid, None)
            self._cv.notify_all()

    def process(self, timeout_ms: int) -> int:
        """One report of the calling thread. Codes: ``ACL_ERROR_THREAD_NOT_SUBSCRIBE`` (100035) at once on a
        thread no channel names; ``ACL_ERROR_RT_REPORT_TIMEOUT`` (507012, the code that replaces the
        deprecated 100036) after ``timeout_ms`` without a report."""
        tid = self._ident_to_tid.get(threading.get_ident())
        with self._cv:
            if tid is None or (tid not in self._subscribed and not self._queues.get(tid)):
                return C.ACL_ERROR_THREAD_NOT_SUBSCRIBE
            ok = self._cv.wait_for(lambda: bool(self._queues.get(tid)) or tid not in self._subscribed,
                                   timeout=max(timeout_ms, 0) / 1000.0)
            if not ok or not self._queues.get(tid):
                return C.ACL_ERROR_RT_REPORT_TIMEOUT
            job = self._queues[tid].pop(0)
        try:
            job()
        finally:
            with self._cv:
                self._done[tid] = self._done.get(tid, 0) + 1
                self._cv.notify_all()
        return C.ACL_SUCCESS

    def wait_done(self, tid: int, count: int, timeout_s: float = 10.0) -> bool:
        """Wait until thread ``tid`` has run ``count`` reports (the software device's own bookkeeping)."""
        with self._cv:
            return self._cv.wait_for(lambda: self._done.get(tid, 0) >= count or tid not in self._queues,
                                     timeout=timeout_s)

    def posted(self, tid: int) -> int:
        with self._cv:
            return self._posted.get(tid, 0)


class _Media(DvppMedia, VdecMedia):
    """``acl.media``: JPEGD, VPC and VDEC."""

    def __init__(self, sim: "SimAcl"):
        self._sim = sim


class SimAcl(DataBufferCalls):
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
        self.mdl = MdlNamespace(self)
        self._initialised = False
        self.devices_set = 0
        self.default_context = 0
        self.lock = threading.Lock()
        self.refusals: list[tuple[int, str]] = []
        _INSTANCES.add(self)

    @staticmethod
    def empty_ledger() -> dict:
        return {k: 0 for k in ("initialised", "devices", "contexts", "streams", "dvpp_channels", "vdec_channels",
                               "channel_descs", "vdec_channel_descs", "pic_descs", "stream_descs", "resize_configs",
                               "roi_configs", "frame_configs", "dvpp_buffers", "device_buffers", "host_buffers",
                               "threads", "models", "model_descs", "datasets", "data_buffers", "aipp_sets")}

    def ledger(self) -> dict:
        """This device's live objects (see the module-level :func:`ledger`)."""
        from ._dvpp import ChannelDesc, PicDesc, ResizeConfig, RoiConfig
        from ._mdl import AippSet, DataBuffer, Dataset, ModelDescObj
        from ._vdec import FrameConfig, StreamDesc, VdecChannelDesc

        o = self.objs
        chans = o.of(ChannelDesc)
        vchans = o.of(VdecChannelDesc)
        out = self.empty_ledger()
        out.update(initialised=int(self._initialised), devices=self.devices_set,
                   contexts=sum(1 for c in o.of(_Context) if not c.default),
                   streams=len(o.of(_Stream)), dvpp_channels=sum(c.created for c in chans),
                   vdec_channels=sum(c.created for c in vchans), channel_descs=len(chans),
                   vdec_channel_descs=len(vchans), pic_descs=len(o.of(PicDesc)), stream_descs=len(o.of(StreamDesc)),
                   resize_configs=len(o.of(ResizeConfig)), roi_configs=len(o.of(RoiConfig)),
                   frame_configs=len(o.of(FrameConfig)), dvpp_buffers=self.memory.device.live,
                   device_buffers=self.memory.rt.live, host_buffers=self.memory.host.live,
                   threads=self.reports.live, models=self.mdl.live_models, model_descs=len(o.of(ModelDescObj)),
                   datasets=len(o.of(Dataset)), data_buffers=len(o.of(DataBuffer)), aipp_sets=len(o.of(AippSet)))
        return out

    def fault(self, unit: str) -> bool:
        """Whether a fault is injected into ``unit`` (see :func:`inject_fault`)."""
        return unit in _FAULTS

    # -- contexts and streams ----------------------------------------------------------------------
    def current_context(self) -> int:
        """The calling thread's current context handle (0 when it has none or it was destroyed)."""
        ctx = getattr(self.tls, "context", None)
        return ctx if ctx and self.objs.get(ctx, _Context) is not None else 0

    def stream(self, stream: Any, api: str) -> tuple[Any, int]:
        """``(stream object, 0)``, or ``(None, code)``: ``ACL_ERROR_INVALID_PARAM`` for an unknown stream,
        ``ACL_ERROR_RT_STREAM_CONTEXT`` (107003) when the stream's context is not the thread's current one."""
        s = self.objs.get(stream, _Stream)
        if s is None:
            return None, self.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: unknown stream")
        if s.context != self.current_context():
            return None, self.fail(C.ACL_ERROR_RT_STREAM_CONTEXT,
                                   f"{api}: stream not in current context (created in context {s.context:#x}, the "
                                   f"thread's current context is {self.current_context():#x})")
        return s, C.ACL_SUCCESS

    # -- acl.* -------------------------------------------------------------------------------------
    def init(self, config_path: Optional[str] = None) -> int:
        """``acl.init``: once per process (CANN 5.0.4 aclpythondevg_01_0004 "一个进程内只能调用一次"); a second
        call returns ``ACL_ERROR_REPEAT_INITIALIZE`` (100002) and leaves the first caller the owner."""
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
