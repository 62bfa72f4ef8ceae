"""The value types of latency statistics, and the read-only view of them that reports use.

* :class:`Summary` — the distribution of one series of durations (ns); :func:`summarise` makes one
  from plain values (exact percentiles, ``numpy.percentile`` with linear interpolation).
* :class:`BatchRecord` — what :meth:`LatencyStats.add <dvpipe.latency.stats.LatencyStats.add>`
  extracted from one timeline (and what listeners and exporters receive).
* :class:`StatsView` — the queries :mod:`dvpipe.latency.report` reads; :class:`~dvpipe.latency.stats.
  LatencyStats` provides them. The report depends on this view, not on the statistics module, so
  ``stats`` imports ``report`` (for ``LatencyStats.report()`` / ``.to_json()``) and nothing imports
  back: no import circle.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

import numpy as np

__all__ = ["Summary", "EMPTY_SUMMARY", "summarise", "BatchRecord", "StatsView"]

_PERCENTILES = (50.0, 90.0, 99.0)


@dataclass(frozen=True, slots=True)
class Summary:
    """Distribution of one series of durations (ns). Percentiles are None when only counters exist."""

    count: int
    sum_ns: int
    mean_ns: float | None
    min_ns: int | None
    max_ns: int | None
    p50_ns: float | None
    p90_ns: float | None
    p99_ns: float | None
    approximate: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count, "sum_ns": self.sum_ns, "mean_ns": self.mean_ns, "min_ns": self.min_ns,
            "max_ns": self.max_ns, "p50_ns": self.p50_ns, "p90_ns": self.p90_ns, "p99_ns": self.p99_ns,
            "approximate": self.approximate,
        }


EMPTY_SUMMARY = Summary(0, 0, None, None, None, None, None, None)


def summarise(values: Iterable[int] | np.ndarray) -> Summary:
    """Summary of a plain list of durations in ns (exact percentiles)."""
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.int64)
    if arr.size == 0:
        return EMPTY_SUMMARY
    p50, p90, p99 = (float(v) for v in np.percentile(arr, _PERCENTILES))
    total = int(arr.sum())
    return Summary(int(arr.size), total, total / arr.size, int(arr.min()), int(arr.max()), p50, p90, p99)


@dataclass(slots=True)
class BatchRecord:
    """What :meth:`LatencyStats.add` extracted from one timeline (also what listeners receive).

    ``steps`` holds one ``(name, camera, duration_ns)`` per span; ``step_counters`` holds
    ``(name, camera, count, sum_ns, max_ns)`` rows for counters-only timelines; ``step_kinds`` maps each
    step name to ``(kind, category)``. ``breakdown_ns`` sums to the end-to-end time (capture, else
    arrival, else first span -> output); ``work_ns`` is busy time summed over owners.
    """

    index: int
    steps: list[tuple[str, str | None, int]]
    step_counters: list[tuple[str, str | None, int, int, int]]
    end_to_end_ns: int | None
    capture_to_output_ns: int | None
    arrival_to_output_ns: int | None
    camera_capture_to_output_ns: dict[str, int]
    camera_arrival_to_output_ns: dict[str, int]
    critical_camera: str | None
    critical_path: list[tuple[str, str | None, str, int, int]]
    assembly_wait_ns: int
    breakdown_ns: dict[str, int]
    work_ns: dict[str, int]
    step_kinds: dict[str, tuple[str, str]] = field(default_factory=dict)
    violations: list[tuple[str, int]] = field(default_factory=list)
    #: step budget keys whose violations here are a lower bound: counters only (no individual spans), a step
    #: that ran more than once in the batch with its maximum over the budget counts as one violation
    violations_at_least: set[str] = field(default_factory=set)


class StatsView(Protocol):
    """The queries a report reads from statistics (:class:`~dvpipe.latency.stats.LatencyStats`
    provides every one; see it for their meaning). Durations in ns."""

    window: int
    counters_only: bool
    warmup_batches: int

    @property
    def batches(self) -> int: ...

    @property
    def cameras(self) -> list[str]: ...

    @property
    def step_names(self) -> list[str]: ...

    @property
    def last_critical_path(self) -> BatchRecord | None: ...

    def step_kind(self, name: str) -> tuple[str, str]: ...

    def step(self, name: str, camera: str | None = None, *, window: bool = False) -> Summary: ...

    def window_step_summaries(self) -> dict[tuple[str, str | None], Summary]: ...

    def end_to_end(self, origin: str = "capture", camera: str | None = None, *, window: bool = False) -> Summary: ...

    def budget_report(self, *, window: bool = False) -> dict[str, dict[str, Any]]: ...

    def breakdown(self, *, window: bool = False) -> dict[str, Any]: ...

    def critical_cameras(self, *, window: bool = False) -> dict[str, dict[str, float]]: ...

    def transfers(self) -> dict[str, Any]: ...
