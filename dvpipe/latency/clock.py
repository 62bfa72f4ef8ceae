"""The one clock of dvpipe, and how other clocks are mapped onto it.

Every timestamp that dvpipe records is an ``int`` of nanoseconds on ONE monotonic clock,
:func:`now_ns` (``time.perf_counter_ns()``; on Linux this is ``CLOCK_MONOTONIC``, shared by all
processes of one host). Names of such values end in ``_ns``. Other clocks are mapped onto it:

Wall-clock / capture timestamps (``time.time_ns()``-style epoch nanoseconds)
    ``to_monotonic_ns(epoch_ns) = epoch_ns - epoch_offset_ns()``, where the offset
    ``time.time_ns() - time.perf_counter_ns()`` is sampled once at import (the pair with the
    tightest bracketing of five reads is kept, so the error is a few hundred ns at most).
    The wall clock can be stepped by NTP/PTP while the monotonic clock cannot; a long-running
    deployment may call :func:`recalibrate` now and then. Capture stamps from another host are only
    as good as the synchronisation between the hosts (PTP for cameras). Sources that give
    microseconds (nuScenes) or seconds multiply first: ``to_monotonic_ns(ts_us * 1000)``.

Device time (CUDA/NPU events, DVPP stream sync)
    Asynchronous device work is described by two host stamps and one device-reported duration:
    ``enqueue_ns`` (host, just before the asynchronous call), ``sync_ns`` (host, just after the stream
    or event synchronisation returned) and ``device_duration_ns`` (e.g.
    ``torch.cuda.Event.elapsed_time`` in ms times 1e6). The device span is placed on the host clock as::

        end_ns   = sync_ns
        start_ns = max(enqueue_ns, sync_ns - device_duration_ns)

    The sync stamp is an upper bound of the real completion, so the span may sit a little late when
    the host synchronises long after the device finished; its *duration* is the device's own figure
    unless it does not fit between the two host stamps, in which case it is clamped and flagged
    (``attrs["clamped"] = True``). Without a device duration the span is the whole
    ``[enqueue_ns, sync_ns]`` interval and ``attrs["duration_source"] == "host_stamps"``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from ..errors import ConfigError

__all__ = [
    "now_ns",
    "wall_ns",
    "epoch_offset_ns",
    "recalibrate",
    "to_monotonic_ns",
    "to_epoch_ns",
    "DeviceSpan",
]

now_ns = time.perf_counter_ns
"""``now_ns() -> int``: nanoseconds on dvpipe's monotonic clock (``time.perf_counter_ns``)."""

wall_ns = time.time_ns
"""``wall_ns() -> int``: wall-clock nanoseconds since the Unix epoch (``time.time_ns``)."""


def _sample_epoch_offset_ns(samples: int = 5) -> int:
    best_gap_ns = None
    best_offset_ns = 0
    for _ in range(samples):
        before_ns = time.perf_counter_ns()
        epoch_ns = time.time_ns()
        after_ns = time.perf_counter_ns()
        gap_ns = after_ns - before_ns
        if best_gap_ns is None or gap_ns < best_gap_ns:
            best_gap_ns = gap_ns
            best_offset_ns = epoch_ns - (before_ns + after_ns) // 2
    return best_offset_ns


_EPOCH_OFFSET_NS = _sample_epoch_offset_ns()


def epoch_offset_ns() -> int:
    """Return the current ``epoch - monotonic`` offset in ns (sampled at import or by :func:`recalibrate`)."""
    return _EPOCH_OFFSET_NS


def recalibrate() -> int:
    """Re-sample the wall-clock offset (after an NTP step, or every few minutes in a long run); return it."""
    global _EPOCH_OFFSET_NS
    _EPOCH_OFFSET_NS = _sample_epoch_offset_ns()
    return _EPOCH_OFFSET_NS


def to_monotonic_ns(epoch_ns: int, *, offset_ns: int | None = None) -> int:
    """Map a wall-clock timestamp (ns since the Unix epoch, e.g. a camera capture time) onto :func:`now_ns`."""
    return int(epoch_ns) - (_EPOCH_OFFSET_NS if offset_ns is None else int(offset_ns))


def to_epoch_ns(monotonic_ns: int, *, offset_ns: int | None = None) -> int:
    """Inverse of :func:`to_monotonic_ns`: a :func:`now_ns` stamp as ns since the Unix epoch."""
    return int(monotonic_ns) + (_EPOCH_OFFSET_NS if offset_ns is None else int(offset_ns))


@dataclass(slots=True)
class DeviceSpan:
    """Asynchronous device work described by host stamps plus the device-reported duration.

    See the module docstring for the mapping. ``unit`` names the hardware ("dvpp", "cuda", "npu");
    ``stream`` names the queue it ran on (e.g. "dvpp:0", "cuda:0/s1"), which becomes its trace track.
    """

    name: str
    enqueue_ns: int
    sync_ns: int
    device_duration_ns: int | None = None
    unit: str = "device"
    stream: str | None = None
    camera: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sync_ns < self.enqueue_ns:
            raise ConfigError(
                f"DeviceSpan {self.name!r}: sync_ns ({self.sync_ns}) is before enqueue_ns ({self.enqueue_ns}); "
                "stamp enqueue before the asynchronous call and sync after the synchronisation returns"
            )
        if self.device_duration_ns is not None and self.device_duration_ns < 0:
            raise ConfigError(f"DeviceSpan {self.name!r}: device_duration_ns must be >= 0, "
                              f"got {self.device_duration_ns}")

    @classmethod
    def from_elapsed_ms(cls, name: str, enqueue_ns: int, sync_ns: int, elapsed_ms: float,
                        **kwargs: Any) -> "DeviceSpan":
        """Build from a device-event elapsed time in milliseconds (``torch.cuda.Event.elapsed_time``)."""
        return cls(name, enqueue_ns, sync_ns, int(round(float(elapsed_ms) * 1e6)), **kwargs)

    @property
    def end_ns(self) -> int:
        return self.sync_ns

    @property
    def start_ns(self) -> int:
        if self.device_duration_ns is None:
            return self.enqueue_ns
        return max(self.enqueue_ns, self.sync_ns - self.device_duration_ns)

    @property
    def clamped(self) -> bool:
        """True when the device duration did not fit between the host stamps and was shortened."""
        return self.device_duration_ns is not None and self.sync_ns - self.device_duration_ns < self.enqueue_ns

    def span_attrs(self) -> dict[str, Any]:
        """The attributes the resulting :class:`~dvpipe.latency.timeline.Span` carries."""
        attrs: dict[str, Any] = {"unit": self.unit}
        if self.stream is not None:
            attrs["stream"] = self.stream
        attrs["enqueue_ns"] = self.enqueue_ns
        attrs["sync_ns"] = self.sync_ns
        if self.device_duration_ns is None:
            attrs["duration_source"] = "host_stamps"
        else:
            attrs["duration_source"] = "device"
            attrs["device_duration_ns"] = self.device_duration_ns
            if self.clamped:
                attrs["clamped"] = True
        attrs.update(self.attrs)
        return attrs
