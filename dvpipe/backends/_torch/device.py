"""Devices, streams, events and timed host <-> device transfers for the torch backend.

One :class:`DeviceRun` is kept per (pipeline, camera, step) in the step's state: its stream, its
timing events and its staging buffers are created on the first frame and reused for every later
one, so that a warmed-up pipeline allocates nothing per frame.

On ``cuda``/``npu`` a kernel call goes: wait for work already queued on the device's default
stream (the consumer of the previous batch in that output buffer), upload the host frame through a
pinned staging buffer with a ``non_blocking`` copy, enqueue the compute on the step's own stream,
then synchronise on the end event. The device durations of the upload and of the compute are
read from the events and appended to ``ctx.device_spans`` as
:class:`dvpipe.latency.clock.DeviceSpan` (``name, enqueue_ns, sync_ns, device_duration_ns``,
``unit`` ``cuda``/``npu``, ``stream`` ``cuda:0/s<id>``). On ``cpu`` there is no stream and no span:
the step's host span is its time.
"""
from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np
import torch

_now_ns = time.perf_counter_ns

_TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a numpy dtype name used in specs (``uint8``, ``float32``, ``float16``)."""
    return _TORCH_DTYPES[str(name)]


def device_module(dev: torch.device):
    """``torch.cuda`` or ``torch.npu`` for a device (``torch.npu`` exists once torch_npu is imported)."""
    return getattr(torch, dev.type)


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda``, ``cuda:1``, ``npu:0`` -> a ``torch.device`` with an explicit index for accelerators."""
    kind = name.split(":")[0]
    if kind == "npu":
        import torch_npu  # noqa: F401  - registers the "npu" device type with torch

    dev = torch.device(name)
    if dev.type != "cpu" and dev.index is None:
        dev = torch.device(dev.type, device_module(dev).current_device())
    return dev


def as_tensor(data: Any) -> torch.Tensor:
    """A host array or a tensor as a tensor, without copying where torch allows it."""
    if isinstance(data, torch.Tensor):
        return data
    arr = np.asarray(data)
    if any(s < 0 for s in arr.strides) or not arr.flags.writeable:
        arr = np.ascontiguousarray(arr) if arr.flags.writeable else arr.copy()
    return torch.from_numpy(arr)


class DeviceRun:
    """Per-step device resources: stream, timing events, staging buffers. ``cpu``: all no-ops."""

    def __init__(self, dev: torch.device):
        self.dev = dev
        self.accel = dev.type != "cpu"
        self._pinned: dict[str, torch.Tensor] = {}
        self._device: dict[str, torch.Tensor] = {}
        if self.accel:
            mod = device_module(dev)
            self.mod = mod
            self.stream = mod.Stream(device=dev)
            self._events: list = []
            self._spans: list[tuple[str, int, Any, Any]] = []  # name, enqueue ns, start and end events

    # -- buffers ---------------------------------------------------------------------------------
    def buffer(self, key: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        """A tensor on the device kept across frames (reallocated only if shape or dtype change)."""
        buf = self._device.get(key)
        if buf is None or tuple(buf.shape) != tuple(shape) or buf.dtype != dtype:
            buf = self._device[key] = torch.empty(shape, dtype=dtype, device=self.dev)
        return buf

    def _pinned_buffer(self, key: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        buf = self._pinned.get(key)
        if buf is None or tuple(buf.shape) != tuple(shape) or buf.dtype != dtype:
            try:
                buf = torch.empty(shape, dtype=dtype, pin_memory=True)
            except RuntimeError:  # no pinning on this build/device: pageable staging still works
                buf = torch.empty(shape, dtype=dtype)
            self._pinned[key] = buf
        return buf

    # -- timing ----------------------------------------------------------------------------------
    def begin(self) -> None:
        """Start a kernel call: order after the default stream (the previous consumer of the output)."""
        if self.accel:
            self._spans = []
            self._n_events = 0
            self.stream.wait_stream(self.mod.default_stream(self.dev))

    def after_setup(self) -> None:
        """Order after one-time setup copies (gather indices, weights) made on the default stream."""
        if self.accel:
            self.stream.wait_stream(self.mod.default_stream(self.dev))

    def _event(self, i: int):
        while len(self._events) <= i:
            self._events.append(self.mod.Event(enable_timing=True))
        return self._events[i]

    def mark(self, name: str):
        """Context manager timing the device work enqueued inside it as span ``name``."""
        return _Mark(self, name)

    def finish(self, ctx) -> list:
        """Wait for the step's device work; append its spans to ``ctx.device_spans`` and return them."""
        if not self.accel or not self._spans:
            return []
        from ...latency.clock import DeviceSpan

        last = self._spans[-1][3]
        last.synchronize()
        sync_ns = _now_ns()
        stream = f"{self.dev}/s{getattr(self.stream, 'stream_id', id(self.stream))}"
        spans = [DeviceSpan.from_elapsed_ms(name, enqueue_ns, sync_ns, start.elapsed_time(end), unit=self.dev.type,
                                            stream=stream)
                 for name, enqueue_ns, start, end in self._spans]
        ctx.device_spans.extend(spans)
        self.last_spans = spans
        return spans

    # -- transfers -------------------------------------------------------------------------------
    def upload(self, data: Any, key: str = "in") -> torch.Tensor:
        """Host array -> tensor on the device (``cpu``: a zero-copy view where possible).

        Accelerators: the array is copied into a reused pinned buffer, then a ``non_blocking``
        copy into a reused device buffer is enqueued on the step's stream and timed as ``upload``.
        """
        if isinstance(data, torch.Tensor) and data.device == self.dev:
            return data
        if not self.accel:
            return as_tensor(data)
        host = as_tensor(data)
        if host.device.type != "cpu":  # another device: a peer copy on our stream
            dst = self.buffer(key, tuple(host.shape), host.dtype)
            with self.mark("copy"):
                dst.copy_(host, non_blocking=True)
            return dst
        pinned = self._pinned_buffer(key, tuple(host.shape), host.dtype)
        pinned.copy_(host)
        dst = self.buffer(key, tuple(host.shape), host.dtype)
        with self.mark("upload"):
            dst.copy_(pinned, non_blocking=True)
        return dst

    def from_dvpp(self, dt: Any, key: str = "dvpp") -> tuple[torch.Tensor, Any]:
        """A DVPP picture (:class:`dvpipe.device.DeviceTensor`, NV12 with strides) as a 2-D ``(Hs * 3 / 2, Ws)``
        uint8 tensor on this device, and the copy as a ``d2d`` transfer span with its bytes.

        On ``npu``: one ``acl.rt.memcpy`` device -> device (``Runtime.device_copy``, kind
        ``ACL_MEMCPY_DEVICE_TO_DEVICE``; pyACL ``acl.rt.memcpy``, CANN 6.0.1 aclpythondevg_01_0109) from
        DVPP memory into the ``data_ptr()`` of a reused torch_npu tensor: torch_npu documents no public
        tensor-from-device-pointer API, so the picture is copied, not wrapped. Synchronous (the copy
        returns when done). Not run on a device. Elsewhere (a CPU stand-in for the NPU, in the tests) the
        software device's memory is read through ``DeviceTensor.to_host``.
        """
        from ...latency.clock import DeviceSpan, now_ns

        ws, hs = dt.strides
        rows = hs * 3 // 2 if dt.layout == "NV12" else hs
        nbytes = rows * ws
        dst = self.buffer(key, (rows, ws), torch.uint8)
        t0 = now_ns()
        if self.dev.type == "npu":
            self.sync_default()
            dt.runtime.device_copy(dst.data_ptr(), nbytes, dt.ptr, nbytes, step="dvpp -> torch_npu")
        else:
            raw = np.asarray(dt.to_host(step="dvpp -> torch (stand-in)"))[:nbytes].reshape(rows, ws)
            dst.copy_(torch.from_numpy(raw.copy()).to(self.dev))
        done = dt.meta.get("release")
        if done is not None:
            done()  # copied: the DVPP picture's buffer goes back to its pool
        span = DeviceSpan("d2d", t0, now_ns(), None, unit=self.dev.type,
                          attrs={"direction": "device_to_device", "bytes": int(nbytes)})
        return dst, span

    def sync_default(self) -> None:
        """Wait for the device's queued work (the copy below reads memory the tensor's last user may hold): this
        step's device, not the calling thread's current one (a worker thread's is device 0)."""
        if self.accel:
            self.mod.synchronize(self.dev)

    def download(self, t: torch.Tensor, key: str = "out") -> np.ndarray:
        """Device tensor -> host numpy array (through a reused pinned buffer), timed as ``download``."""
        if t.device.type == "cpu":
            return t.numpy()
        pinned = self._pinned_buffer(key, tuple(t.shape), t.dtype)
        with self.mark("download"):
            pinned.copy_(t, non_blocking=True)
        return pinned.numpy()


class _Mark:
    def __init__(self, run: DeviceRun, name: str):
        self.run, self.name = run, name

    def __enter__(self):
        run = self.run
        if run.accel:
            i = run._n_events
            run._n_events += 2
            self.start, self.end = run._event(i), run._event(i + 1)
            self.enqueue_ns = _now_ns()
            self._ctx = run.mod.stream(run.stream)
            self._ctx.__enter__()
            self.start.record(run.stream)
        return self

    def __exit__(self, *exc):
        run = self.run
        if run.accel:
            self.end.record(run.stream)
            self._ctx.__exit__(*exc)
            run._spans.append((self.name, self.enqueue_ns, self.start, self.end))
        return False


def device_run(state: dict, dev: torch.device) -> DeviceRun:
    """The :class:`DeviceRun` kept in a step's ``state``, created on first use."""
    run: Optional[DeviceRun] = state.get("device_run")
    if run is None or run.dev != dev:
        run = state["device_run"] = DeviceRun(dev)
    return run
