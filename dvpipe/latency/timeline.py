"""Spans and timelines: what happened to one frame or one batch, on the one monotonic clock.

A :class:`Timeline` rides on a frame (``camera`` set) or on a batch (cameras merged in). It holds the
capture and arrival stamps of each camera's frame, the output stamp of the batch, and a list of
:class:`Span` objects, each ``[start_ns, end_ns)`` with a ``kind``:

==========  ===============================================================================
kind        meaning
==========  ===============================================================================
host        a host thread did the work (``unit`` "cpu" by default; a synchronous call into a
            device library may say ``unit="dvpp"`` etc. when no device events exist)
device      asynchronous device work placed by device events (see ``clock.DeviceSpan``)
transfer    a copy between memory domains (host<->device, device<->device)
wait        waiting: queues, batch assembly, synchronisation with nothing else to do
model       the model call (the user's callable), on whatever ``unit``
io          reading input (file, socket, demux) after the frame arrived
==========  ===============================================================================

The kind plus the ``unit`` attribute give each span a *category* (:func:`category_of`): "cpu", "dvpp",
"npu_gpu", "transfer", "wait", "model" or "io", which is how "where did the time go" is answered.

Transfers carry their bytes: a ``transfer`` span with ``attrs["bytes"]`` (int) and ``attrs["direction"]``
(``host_to_device``, ``device_to_host`` or ``device_to_device``; ``h2d``/``d2h``/``d2d`` accepted, and a
span without one is read from its name: ``h2d``/``upload`` -> host to device, ``d2h``/``download`` ->
device to host) is summed by :meth:`Timeline.transfer_bytes`, whoever recorded it (a plan step, a
kernel's device span, a model runner), also in counters-only mode.

Recording is cheap (one object and two clock reads per span, about 1-2 us) and appending is safe
from any number of worker threads. ``Timeline(counters_only=True)`` keeps only a count, sum and max
per (step, camera, kind, unit) instead of span objects.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, ParamSpec, TypeVar

from ..errors import ConfigError
from .clock import DeviceSpan, now_ns

__all__ = [
    "KINDS",
    "CATEGORIES",
    "DVPP_UNITS",
    "ACCELERATOR_UNITS",
    "category_of",
    "Span",
    "FrameStamps",
    "Timeline",
    "DeviceTimer",
    "DIRECTIONS",
    "transfer_direction",
    "WORKER_WAIT",
    "RUN_SPAN_NAMES",
]

KINDS: tuple[str, ...] = ("host", "device", "transfer", "wait", "model", "io")
_KIND_SET = frozenset(KINDS)

# Categories of the "where did the time go" breakdown. "source" is the time before the (critical)
# frame arrived in dvpipe (capture -> arrival); "unaccounted" is time covered by no span.
CATEGORIES: tuple[str, ...] = (
    "source", "io", "cpu", "dvpp", "npu_gpu", "transfer", "model", "wait", "unaccounted",
)

#: the span of a camera's job waiting for a pipeline worker thread (its length depends on which thread
#: took which camera first: the critical path does not count it)
WORKER_WAIT = "worker_wait"

#: the spans a run records besides its plan's steps (a step budget, ``latency.steps_ms``, may name these too):
#: reading and queueing, the reordering decoder and DVPP units inside steps, the batch and the model hook
RUN_SPAN_NAMES = ("read", "queue_wait", WORKER_WAIT, "decode", "reorder", "jpegd", "vdec", "vpc", "clear_slot",
                  "batch_assembly_wait", "model_wait", "model", "model_upload", "model_download", "model_gather")

DVPP_UNITS = frozenset({"dvpp", "jpegd", "jpege", "vpc", "vdec", "venc", "png"})
ACCELERATOR_UNITS = frozenset({"cuda", "gpu", "npu", "mps", "xpu", "rocm", "hip"})

T = TypeVar("T")
P = ParamSpec("P")

#: the directions a transfer's bytes are summed under (:meth:`Timeline.transfer_bytes`)
DIRECTIONS: tuple[str, ...] = ("host_to_device", "device_to_host", "device_to_device")
_SHORT = {"h2d": "host_to_device", "d2h": "device_to_host", "d2d": "device_to_device"}


def transfer_direction(name: str, attrs: Mapping[str, Any]) -> str:
    """The direction of a transfer span: its ``direction`` attribute, else read from its name
    (``h2d``/``upload``, ``d2h``/``download``, ``d2d``); ``unknown`` when neither says."""
    d = attrs.get("direction")
    if d:
        return _SHORT.get(d, d)
    low = name.lower()
    if "h2d" in low or "upload" in low:
        return "host_to_device"
    if "d2h" in low or "download" in low:
        return "device_to_host"
    if "d2d" in low:
        return "device_to_device"
    return "unknown"


def category_of(kind: str, unit: str | None = None) -> str:
    """Category of a span of ``kind`` on ``unit`` (see the module docstring)."""
    if kind in ("host", "device"):
        if unit is not None:
            u = unit.split(":", 1)[0].lower()
            if u in DVPP_UNITS:
                return "dvpp"
            if u in ACCELERATOR_UNITS:
                return "npu_gpu"
        return "npu_gpu" if kind == "device" else "cpu"
    if kind in _KIND_SET:
        return kind
    raise ConfigError(f"Unknown span kind {kind!r}. Supported kinds are {', '.join(KINDS)}.")


@dataclass(slots=True)
class Span:
    """One interval of work: ``[start_ns, end_ns)`` on :func:`~dvpipe.latency.clock.now_ns`.

    ``camera`` is the camera whose frame the work was for (None for batch-level work such as the
    model); ``track`` overrides the trace track (default: camera worker, device stream or batcher);
    ``attrs`` holds anything else, notably ``unit`` ("cpu", "dvpp", "cuda", "npu", ...).
    """

    name: str
    start_ns: int
    end_ns: int
    kind: str = "host"
    camera: str | None = None
    track: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def unit(self) -> str | None:
        return self.attrs.get("unit")

    @property
    def category(self) -> str:
        return category_of(self.kind, self.attrs.get("unit"))

    def to_list(self) -> list[Any]:
        """Compact JSON form ``[name, start_ns, end_ns, kind, camera, track, attrs]``."""
        return [self.name, self.start_ns, self.end_ns, self.kind, self.camera, self.track, dict(self.attrs)]

    @classmethod
    def from_list(cls, row: list[Any]) -> "Span":
        name, start_ns, end_ns, kind, camera, track, attrs = row
        return cls(name, int(start_ns), int(end_ns), kind, camera, track, dict(attrs or {}))


@dataclass(slots=True)
class FrameStamps:
    """When one camera's frame was captured (source clock mapped onto ``now_ns``) and arrived in dvpipe."""

    capture_mono_ns: int | None = None
    arrival_ns: int | None = None


class _SpanContext:
    """``with timeline.span(...)``: stamps on enter and exit, records on exit (also when the body raises)."""

    __slots__ = ("_tl", "_name", "_kind", "_camera", "_track", "_attrs", "start_ns", "span")

    def __init__(self, tl: "Timeline", name: str, kind: str, camera: str | None, track: str | None,
                 attrs: dict[str, Any]) -> None:
        self._tl = tl
        self._name = name
        self._kind = kind
        self._camera = camera
        self._track = track
        self._attrs = attrs
        self.start_ns = 0
        self.span: Span | None = None

    def __enter__(self) -> "_SpanContext":
        self.start_ns = now_ns()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        end_ns = now_ns()
        if exc_type is not None:
            self._attrs["error"] = exc_type.__name__
        self.span = self._tl._record(self._name, self.start_ns, end_ns, self._kind, self._camera, self._track,
                                     self._attrs)


class DeviceTimer:
    """``with timeline.device_span(...) as dt``: records a :class:`~dvpipe.latency.clock.DeviceSpan`.

    ``enqueue_ns`` is stamped on enter (call :meth:`enqueued` to re-stamp right before the asynchronous
    call); ``sync_ns`` is stamped on exit unless :meth:`synced` was called right after the
    synchronisation returned; give the device's own duration with :meth:`set_device_duration_ns` or
    :meth:`set_elapsed_ms` (without it the span is the whole host interval).
    """

    __slots__ = ("_tl", "name", "unit", "stream", "camera", "attrs", "enqueue_ns", "sync_ns",
                 "device_duration_ns", "span")

    def __init__(self, tl: "Timeline", name: str, unit: str, stream: str | None, camera: str | None,
                 attrs: dict[str, Any]) -> None:
        self._tl = tl
        self.name = name
        self.unit = unit
        self.stream = stream
        self.camera = camera
        self.attrs = attrs
        self.enqueue_ns: int | None = None
        self.sync_ns: int | None = None
        self.device_duration_ns: int | None = None
        self.span: Span | None = None

    def __enter__(self) -> "DeviceTimer":
        self.enqueue_ns = now_ns()
        return self

    def enqueued(self, enqueue_ns: int | None = None) -> None:
        self.enqueue_ns = now_ns() if enqueue_ns is None else int(enqueue_ns)

    def synced(self, sync_ns: int | None = None) -> None:
        self.sync_ns = now_ns() if sync_ns is None else int(sync_ns)

    def set_device_duration_ns(self, duration_ns: int) -> None:
        self.device_duration_ns = int(duration_ns)

    def set_elapsed_ms(self, elapsed_ms: float) -> None:
        """Device-event elapsed time in ms (``torch.cuda.Event.elapsed_time``, ``aclrtEventElapsedTime``)."""
        self.device_duration_ns = int(round(float(elapsed_ms) * 1e6))

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.sync_ns is None:
            self.sync_ns = now_ns()
        assert self.enqueue_ns is not None
        if exc_type is not None:
            self.attrs["error"] = exc_type.__name__
        ds = DeviceSpan(self.name, self.enqueue_ns, max(self.sync_ns, self.enqueue_ns), self.device_duration_ns,
                        unit=self.unit, stream=self.stream, camera=self.camera, attrs=self.attrs)
        self.span = self._tl.add_device(ds)


def _capture_mono(stamps: Mapping[str, Any]) -> Any:
    """The monotonic capture stamp of a saved timeline or trace entry: ``capture_mono_ns``, or
    ``capture_ns``, its name in files written before dvpipe named the clock in the key."""
    return stamps.get("capture_mono_ns", stamps.get("capture_ns"))


def _accumulate(table: dict, key: tuple, count: int, total_ns: int, max_ns: int) -> None:
    """Fold ``(count, total, max)`` into ``table[key]`` (a ``[count, sum_ns, max_ns]`` list)."""
    entry = table.get(key)
    if entry is None:
        table[key] = [count, total_ns, max_ns]
    else:
        entry[0] += count
        entry[1] += total_ns
        if max_ns > entry[2]:
            entry[2] = max_ns


class Timeline:
    """Stamps and spans of one frame (``camera=...``) or one batch.

    Args:
        index: frame or batch number (``LatencyStats`` numbers timelines without one).
        camera: the camera of a per-frame timeline; the default ``camera`` of its spans.
        capture_mono_ns: capture time on the ``now_ns`` clock (map source stamps with ``clock.to_monotonic_ns``).
        arrival_ns: when the frame (or, for a batch, its first frame) arrived in dvpipe.
        counters_only: keep only count/sum/max per (step, camera, kind, unit); no span objects.
        attrs: free-form metadata (e.g. ``{"plan": "dvpp"}``), copied into traces.
    """

    __slots__ = ("index", "camera", "spans", "cameras", "output_ns", "attrs", "_capture_mono_ns", "_arrival_ns",
                 "_counters", "_bytes", "_lock")

    def __init__(self, *, index: int | None = None, camera: str | None = None, capture_mono_ns: int | None = None,
                 arrival_ns: int | None = None, counters_only: bool = False,
                 attrs: Mapping[str, Any] | None = None) -> None:
        self.index = index
        self.camera = camera
        self.spans: list[Span] = []
        self.cameras: dict[str, FrameStamps] = {}
        self.output_ns: int | None = None
        self.attrs: dict[str, Any] = dict(attrs or {})
        self._capture_mono_ns: int | None = None
        self._arrival_ns: int | None = None
        self._counters: dict[tuple[str, str | None, str, str | None], list[int]] | None = (
            {} if counters_only else None)
        # counters-only mode: transfer bytes per (direction, camera), since the spans are not kept
        self._bytes: dict[tuple[str, str | None], int] = {}
        self._lock = threading.Lock()
        if camera is not None:
            self.cameras[camera] = FrameStamps()
        if capture_mono_ns is not None:
            self.capture_mono_ns = capture_mono_ns
        if arrival_ns is not None:
            self.arrival_ns = arrival_ns

    # ----------------------------------------------------------------- stamps
    @property
    def counters_only(self) -> bool:
        return self._counters is not None

    @property
    def capture_mono_ns(self) -> int | None:
        """Capture time: the explicit value, else the OLDEST capture among the cameras' frames."""
        if self._capture_mono_ns is not None:
            return self._capture_mono_ns
        stamps = [s.capture_mono_ns for s in self.cameras.values() if s.capture_mono_ns is not None]
        return min(stamps) if stamps else None

    @capture_mono_ns.setter
    def capture_mono_ns(self, value: int | None) -> None:
        if self.camera is not None:
            self.cameras[self.camera].capture_mono_ns = None if value is None else int(value)
        else:
            self._capture_mono_ns = None if value is None else int(value)

    @property
    def arrival_ns(self) -> int | None:
        """Arrival time: the explicit value, else the EARLIEST arrival among the cameras' frames."""
        if self._arrival_ns is not None:
            return self._arrival_ns
        stamps = [s.arrival_ns for s in self.cameras.values() if s.arrival_ns is not None]
        return min(stamps) if stamps else None

    @arrival_ns.setter
    def arrival_ns(self, value: int | None) -> None:
        if self.camera is not None:
            self.cameras[self.camera].arrival_ns = None if value is None else int(value)
        else:
            self._arrival_ns = None if value is None else int(value)

    def set_frame(self, camera: str, *, capture_mono_ns: int | None = None, arrival_ns: int | None = None) -> None:
        """Record a camera's capture/arrival stamps on a batch timeline (``merge`` does this for you)."""
        stamps = self.cameras.setdefault(camera, FrameStamps())
        if capture_mono_ns is not None:
            stamps.capture_mono_ns = int(capture_mono_ns)
        if arrival_ns is not None:
            stamps.arrival_ns = int(arrival_ns)

    def arrived(self, arrival_ns: int | None = None) -> int:
        """Stamp the arrival (now by default) and return it."""
        self.arrival_ns = now_ns() if arrival_ns is None else int(arrival_ns)
        return self.arrival_ns

    def finish(self, output_ns: int | None = None) -> int:
        """Stamp the output (now by default): the moment the batch (or model result) is handed out."""
        self.output_ns = now_ns() if output_ns is None else int(output_ns)
        return self.output_ns

    @property
    def end_ns(self) -> int | None:
        """``output_ns`` if finished, else the end of the last span."""
        if self.output_ns is not None:
            return self.output_ns
        return max((s.end_ns for s in self.spans), default=None)

    def end_to_end_ns(self, origin: str = "capture") -> int | None:
        """``output - capture`` (origin="capture") or ``output - arrival`` (origin="arrival"); None if unknown."""
        if origin not in ("capture", "arrival"):
            raise ConfigError(f"Invalid origin ({origin!r}). Supported values are 'capture', 'arrival'.")
        start = self.capture_mono_ns if origin == "capture" else self.arrival_ns
        end = self.end_ns
        if start is None or end is None:
            return None
        return end - start

    # ---------------------------------------------------------------- recording
    def _record(self, name: str, start_ns: int, end_ns: int, kind: str, camera: str | None, track: str | None,
                attrs: dict[str, Any]) -> Span | None:
        if camera is None:
            camera = self.camera
        counters = self._counters
        if counters is not None:
            duration_ns = end_ns - start_ns
            with self._lock:
                _accumulate(counters, (name, camera, kind, attrs.get("unit")), 1, duration_ns, duration_ns)
                if kind == "transfer" and attrs.get("bytes"):
                    key = (transfer_direction(name, attrs), camera)
                    self._bytes[key] = self._bytes.get(key, 0) + int(attrs["bytes"])
            return None
        span = Span(name, start_ns, end_ns, kind, camera, track, attrs)
        self.spans.append(span)  # list.append is atomic: safe from worker threads
        return span

    def record_checked(self, name: str, start_ns: int, end_ns: int, kind: str, camera: str | None,
                       attrs: dict[str, Any]) -> Span | None:
        """:meth:`record` for stamps already known to be valid (``now_ns`` ints, ``start <= end``, a known
        kind): no validation and no keyword handling -- the pipeline's per-camera hot path."""
        return self._record(name, start_ns, end_ns, kind, camera, None, attrs)

    @staticmethod
    def _check_kind(kind: str) -> None:
        if kind not in _KIND_SET:
            raise ConfigError(f"Unknown span kind {kind!r}. Supported kinds are {', '.join(KINDS)}.")

    def span(self, name: str, kind: str = "host", *, camera: str | None = None, track: str | None = None,
             unit: str | None = None, **attrs: object) -> _SpanContext:
        """Context manager timing its body: ``with tl.span("decode", camera="CAM_FRONT"): ...``.

        The recorded :class:`Span` is available as ``ctx.span`` after the block (None in counters mode).
        """
        self._check_kind(kind)
        if unit is not None:
            attrs["unit"] = unit
        return _SpanContext(self, name, kind, camera, track, attrs)

    def record(self, name: str, start_ns: int, end_ns: int, kind: str = "host", *, camera: str | None = None,
               track: str | None = None, unit: str | None = None, **attrs: object) -> Span | None:
        """Record a span from stamps taken elsewhere (e.g. a queue wait: enqueue stamp -> dequeue stamp)."""
        self._check_kind(kind)
        if end_ns < start_ns:
            raise ConfigError(f"Span {name!r}: end_ns ({end_ns}) is before start_ns ({start_ns})")
        if unit is not None:
            attrs["unit"] = unit
        return self._record(name, int(start_ns), int(end_ns), kind, camera, track, attrs)

    def add(self, span: Span) -> Span | None:
        """Add a ready-made :class:`Span` (its camera defaults to the timeline's camera)."""
        self._check_kind(span.kind)
        if span.end_ns < span.start_ns:
            raise ConfigError(f"Span {span.name!r}: end_ns ({span.end_ns}) is before start_ns ({span.start_ns})")
        if span.camera is None and self.camera is not None:
            span.camera = self.camera
        if self._counters is not None:
            return self._record(span.name, span.start_ns, span.end_ns, span.kind, span.camera, span.track,
                                span.attrs)
        self.spans.append(span)
        return span

    def add_device(self, device_span: DeviceSpan, *, kind: str = "device") -> Span | None:
        """Place a :class:`~dvpipe.latency.clock.DeviceSpan` on the host clock and record it."""
        return self._record(device_span.name, device_span.start_ns, device_span.end_ns, kind, device_span.camera,
                            None, device_span.span_attrs())

    def device_span(self, name: str, *, unit: str, stream: str | None = None, camera: str | None = None,
                    **attrs: object) -> DeviceTimer:
        """Context manager for asynchronous device work; see :class:`DeviceTimer`."""
        return DeviceTimer(self, name, unit, stream, camera, attrs)

    def time(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Call ``fn(*args, **kwargs)``, record a "model"-kind span named ``name``, return fn's result.

        The span ends when ``fn`` returns: for asynchronous devices, make ``fn`` synchronise (or use
        :meth:`device_span`). For another kind use ``tl.timed(name, kind=...)(fn)(*args)``.
        """
        start_ns = now_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            self._record(name, start_ns, now_ns(), "model", None, None, {})

    def timed(self, name: str, kind: str = "host", *, camera: str | None = None, unit: str | None = None,
              **attrs: object) -> Callable[[Callable[P, T]], Callable[P, T]]:
        """Wrap a callable so that each call is recorded as a span: ``tl.timed("h2d", "transfer")(copy)(x)``."""
        self._check_kind(kind)
        if unit is not None:
            attrs["unit"] = unit

        def wrap(fn: Callable[P, T]) -> Callable[P, T]:
            def timed_call(*args: P.args, **kwargs: P.kwargs) -> T:
                start_ns = now_ns()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self._record(name, start_ns, now_ns(), kind, camera, None, dict(attrs))
            return timed_call
        return wrap

    def record_assembly(self, ready_ns: Mapping[str, int], *, name: str = "batch_assembly_wait") -> Span | None:
        """Record the batch-assembly wait: from the first camera ready to the last one, attributed to the last
        (``camera`` = the last camera, trace track "batcher").

        ``ready_ns`` maps each camera to the moment its processed frame was ready for the batch.
        """
        if not ready_ns:
            return None
        last_camera = max(ready_ns, key=lambda c: ready_ns[c])
        start_ns = min(ready_ns.values())
        end_ns = ready_ns[last_camera]
        # On the batcher's track: the batcher is the one waiting (a camera track would mis-nest it).
        return self._record(name, int(start_ns), int(end_ns), "wait", last_camera, "batcher",
                            {"cameras_waiting": len(ready_ns) - 1})

    def merge(self, other: "Timeline") -> "Timeline":
        """Fold a per-frame timeline (spans, counters, camera stamps) into this batch timeline; return self."""
        with self._lock:
            for cam, stamps in other.cameras.items():
                self.set_frame(cam, capture_mono_ns=stamps.capture_mono_ns, arrival_ns=stamps.arrival_ns)
            if other.camera is None:
                cap = other._capture_mono_ns
                if cap is not None and (self._capture_mono_ns is None or cap < self._capture_mono_ns):
                    self._capture_mono_ns = cap
                if other._arrival_ns is not None and (self._arrival_ns is None or other._arrival_ns < self._arrival_ns):
                    self._arrival_ns = other._arrival_ns
            if self._counters is None:
                self.spans.extend(other.spans)
            else:
                for span in other.spans:
                    self._merge_counter((span.name, span.camera, span.kind, span.attrs.get("unit")),
                                        1, span.duration_ns, span.duration_ns)
                    if span.kind == "transfer" and span.attrs.get("bytes"):
                        bkey = (transfer_direction(span.name, span.attrs), span.camera)
                        self._bytes[bkey] = self._bytes.get(bkey, 0) + int(span.attrs["bytes"])
                for bkey, n in other._bytes.items():
                    self._bytes[bkey] = self._bytes.get(bkey, 0) + n
            if other._counters is not None:
                for key, (count, total_ns, max_ns) in list(other._counters.items()):
                    if self._counters is None:
                        raise ConfigError("cannot merge a counters-only timeline into a full timeline: "
                                          "its spans are gone; make both counters_only or neither")
                    self._merge_counter(key, count, total_ns, max_ns)
        return self

    def _merge_counter(self, key: tuple, count: int, total_ns: int, max_ns: int) -> None:
        assert self._counters is not None
        _accumulate(self._counters, key, count, total_ns, max_ns)

    # ------------------------------------------------------------------ queries
    def counters(self) -> dict[tuple[str, str | None, str, str | None], tuple[int, int, int]]:
        """``{(name, camera, kind, unit): (count, sum_ns, max_ns)}``, from counters or computed from spans."""
        if self._counters is not None:
            with self._lock:
                return {k: (v[0], v[1], v[2]) for k, v in self._counters.items()}
        out: dict[tuple[str, str | None, str, str | None], list[int]] = {}
        for s in list(self.spans):
            d = s.end_ns - s.start_ns
            _accumulate(out, (s.name, s.camera, s.kind, s.attrs.get("unit")), 1, d, d)
        return {k: (v[0], v[1], v[2]) for k, v in out.items()}

    def spans_for(self, name: str | None = None, camera: str | None = None, kind: str | None = None) -> list[Span]:
        """Spans matching every given filter."""
        return [s for s in list(self.spans)
                if (name is None or s.name == name) and (camera is None or s.camera == camera)
                and (kind is None or s.kind == kind)]

    def total_ns(self, name: str | None = None, camera: str | None = None, kind: str | None = None) -> int:
        """Sum of the durations of the matching spans (counters are used in counters-only mode)."""
        if self._counters is not None:
            return sum(v[1] for (n, c, k, _), v in self.counters().items()
                       if (name is None or n == name) and (camera is None or c == camera)
                       and (kind is None or k == kind))
        return sum(s.duration_ns for s in self.spans_for(name, camera, kind))

    def transfer_bytes(self, camera: str | None = None, *, per_camera: bool = False) -> dict:
        """Bytes moved by ``transfer`` spans: ``{direction: bytes}`` over :data:`DIRECTIONS` (plus ``unknown``
        when a span says no direction), for one ``camera`` or all; ``per_camera=True`` gives
        ``{camera: {direction: bytes}}`` (batch-level transfers, such as a model's output download,
        under the camera ``None``)."""
        table: dict[tuple[str, str | None], int] = {}
        if self._counters is not None:
            with self._lock:
                table = dict(self._bytes)
        else:
            for s in list(self.spans):
                if s.kind == "transfer" and s.attrs.get("bytes"):
                    key = (transfer_direction(s.name, s.attrs), s.camera)
                    table[key] = table.get(key, 0) + int(s.attrs["bytes"])
        if per_camera:
            out: dict[str | None, dict[str, int]] = {}
            for (d, c), n in table.items():
                row = out.setdefault(c, dict.fromkeys(DIRECTIONS, 0))
                row[d] = row.get(d, 0) + n
            return out
        total = dict.fromkeys(DIRECTIONS, 0)
        for (d, c), n in table.items():
            if camera is None or c == camera:
                total[d] = total.get(d, 0) + n
        return total

    def step_names(self) -> list[str]:
        """Distinct span names in order of first start (plan order for a sequential chain)."""
        if self._counters is not None:
            return list(dict.fromkeys(k[0] for k in self._counters))
        seen: dict[str, None] = {}
        for s in sorted(list(self.spans), key=lambda s: s.start_ns):
            seen.setdefault(s.name, None)
        return list(seen)

    def __len__(self) -> int:
        return len(self.spans)

    def __iter__(self) -> Iterator[Span]:
        return iter(list(self.spans))

    def __repr__(self) -> str:
        mode = "counters_only, " if self._counters is not None else ""
        return (f"Timeline(index={self.index}, {mode}cameras={list(self.cameras)}, spans={len(self.spans)}, "
                f"end_to_end_ns={self.end_to_end_ns('capture') if self.capture_mono_ns is not None else None})")

    # ------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (spans as ``Span.to_list`` rows); inverse of :meth:`from_dict`."""
        d: dict[str, Any] = {
            "index": self.index,
            "camera": self.camera,
            "capture_mono_ns": self._capture_mono_ns,
            "arrival_ns": self._arrival_ns,
            "output_ns": self.output_ns,
            "cameras": {c: {"capture_mono_ns": s.capture_mono_ns, "arrival_ns": s.arrival_ns}
                        for c, s in self.cameras.items()},
            "spans": [s.to_list() for s in list(self.spans)],
            "attrs": dict(self.attrs),
        }
        if self._counters is not None:
            d["counters"] = [[n, c, k, u, *v] for (n, c, k, u), v in self.counters().items()]
            d["transfer_bytes"] = [[dr, c, n] for (dr, c), n in self._bytes.items()]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Timeline":
        tl = cls(index=d.get("index"), counters_only="counters" in d, attrs=d.get("attrs"))
        tl.camera = d.get("camera")
        tl._capture_mono_ns = _capture_mono(d)
        tl._arrival_ns = d.get("arrival_ns")
        tl.output_ns = d.get("output_ns")
        for cam, st in (d.get("cameras") or {}).items():
            tl.cameras[cam] = FrameStamps(_capture_mono(st), st.get("arrival_ns"))
        tl.spans = [Span.from_list(r) for r in d.get("spans") or []]
        if "counters" in d:
            tl._counters = {(n, c, k, u): [int(cnt), int(tot), int(mx)] for n, c, k, u, cnt, tot, mx in d["counters"]}
            tl._bytes = {(dr, c): int(n) for dr, c, n in d.get("transfer_bytes") or []}
        return tl
