"""Aggregation of timelines: percentiles, budgets, critical paths and "where did the time go".

:class:`LatencyStats` ingests one :class:`~dvpipe.latency.timeline.Timeline` per batch (or per frame)
and keeps, over the whole run and over a sliding window of the last ``window`` batches:

* per step (span name), pooled over cameras and per (step, camera): count, sum, mean, min, max and
  p50/p90/p99 (``numpy.percentile``, linear interpolation) of the span durations (one sample per span);
* end to end, from capture and from arrival to output (per batch, from the oldest frame; and per camera);
* budget violations (``budgets={"end_to_end": 20e6, "decode": 8e6}``, in ns; a sample strictly above
  its budget is a violation);
* the critical path of each batch: the camera whose chain finished last, its spans plus the
  batch-level spans (assembly, model, output), and how long the other cameras waited for it;
* the breakdown of each batch's end-to-end time by category along the critical path (sums exactly to
  the end-to-end time), and the total work by category: one sweep per owner (each camera's chain,
  each explicit track such as the batcher), summed, so overlapping spans of one owner count once.

Memory: the run-level percentiles keep at most ``max_samples`` durations per series (after which a
uniform reservoir sample is kept and summaries say ``approximate``); counts, sums, min and max stay exact.
"""

from __future__ import annotations

import math
import random
import threading
from array import array
from collections import deque
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..errors import ConfigError
from .records import _PERCENTILES, EMPTY_SUMMARY, BatchRecord, Summary, summarise
from .report import format_report, to_json
from .timeline import CATEGORIES, WORKER_WAIT, Span, Timeline, category_of

__all__ = [
    "Summary",
    "BatchRecord",
    "LatencyStats",
    "END_TO_END_KEYS",
    "summarise",
    "sweep_categories",
    "critical_path",
]

#: Budget keys that are not step names: "end_to_end" = capture -> output (arrival -> output when the
#: capture time is unknown); "end_to_end_capture" and "end_to_end_arrival" pin the origin.
END_TO_END_KEYS = ("end_to_end", "end_to_end_capture", "end_to_end_arrival")

# When spans on the critical path overlap, the instant goes to the most specific category.
_PRIORITY: tuple[str, ...] = ("model", "dvpp", "npu_gpu", "transfer", "cpu", "io", "wait", "source")
_PRIO_INDEX = {c: i for i, c in enumerate(_PRIORITY)}
_OVER_TIME_POINTS = 4096  # points of end-to-end latency over time kept for plots (evenly thinned beyond)


class _Series:
    """Exact count/sum/min/max plus up to ``cap`` samples (uniform reservoir beyond) for percentiles."""

    __slots__ = ("count", "sum_ns", "min_ns", "max_ns", "values", "cap", "aggregated", "_rng")

    def __init__(self, cap: int) -> None:
        self.count = 0
        self.sum_ns = 0
        self.min_ns: int | None = None
        self.max_ns: int | None = None
        self.values = array("q")
        self.cap = cap
        self.aggregated = 0  # samples known only as counters (no individual values)
        self._rng: random.Random | None = None

    def add(self, v: int) -> None:
        self.count += 1
        self.sum_ns += v
        if self.max_ns is None or v > self.max_ns:
            self.max_ns = v
        if self.min_ns is None or v < self.min_ns:
            self.min_ns = v
        n = self.count - self.aggregated
        if n <= self.cap:
            self.values.append(v)
        else:
            if self._rng is None:
                self._rng = random.Random(0x5EED)
            j = self._rng.randrange(n)
            if j < self.cap:
                self.values[j] = v

    def add_aggregate(self, count: int, total_ns: int, max_ns: int) -> None:
        self.count += count
        self.sum_ns += total_ns
        self.aggregated += count
        if self.max_ns is None or max_ns > self.max_ns:
            self.max_ns = max_ns

    def summary(self) -> Summary:
        if self.count == 0:
            return EMPTY_SUMMARY
        mean = self.sum_ns / self.count
        if self.aggregated or not self.values:
            return Summary(self.count, self.sum_ns, mean, None if self.aggregated else self.min_ns, self.max_ns,
                           None, None, None)
        p50, p90, p99 = (float(v) for v in np.percentile(np.frombuffer(self.values, dtype=np.int64), _PERCENTILES))
        return Summary(self.count, self.sum_ns, mean, self.min_ns, self.max_ns, p50, p90, p99,
                       approximate=len(self.values) < self.count)


# --------------------------------------------------------------------------- pure helpers
def sweep_categories(intervals: Sequence[tuple[int, int, str]], lo_ns: int, hi_ns: int,
                     *, count_unaccounted: bool = True) -> dict[str, int]:
    """Attribute every instant of ``[lo_ns, hi_ns)`` to one category.

    ``intervals`` are ``(start_ns, end_ns, category)``; where several overlap, the most specific
    category wins (model > dvpp > npu_gpu > transfer > cpu > io > wait > source); instants covered by
    none go to "unaccounted". The values sum to ``hi_ns - lo_ns``.
    """
    out: dict[str, int] = {}
    if hi_ns <= lo_ns:
        return out
    clipped = sorted((max(s, lo_ns), min(e, hi_ns), _PRIO_INDEX[cat]) for s, e, cat in intervals
                     if min(e, hi_ns) > max(s, lo_ns))
    if all(clipped[k][0] >= clipped[k - 1][1] for k in range(1, len(clipped))):
        # no two overlap (a camera's steps one after another, the usual case): each instant has one category
        prev = lo_ns
        for s, e, p in clipped:
            if s > prev and count_unaccounted:
                out["unaccounted"] = out.get("unaccounted", 0) + (s - prev)
            out[_PRIORITY[p]] = out.get(_PRIORITY[p], 0) + (e - s)
            prev = e
        if hi_ns > prev and count_unaccounted:
            out["unaccounted"] = out.get("unaccounted", 0) + (hi_ns - prev)
        return out
    events: list[tuple[int, int, int]] = []
    for s, e, p in clipped:
        events.append((s, 1, p))
        events.append((e, -1, p))
    events.sort()
    active = [0] * len(_PRIORITY)
    prev = lo_ns
    i = 0
    n = len(events)
    while True:
        t = events[i][0] if i < n else hi_ns
        if t > prev:
            top = next((p for p, a in enumerate(active) if a), None)
            cat = "unaccounted" if top is None else _PRIORITY[top]
            if top is not None or count_unaccounted:
                out[cat] = out.get(cat, 0) + (t - prev)
            prev = t
        if i >= n:
            break
        while i < n and events[i][0] == t:
            active[events[i][2]] += events[i][1]
            i += 1
    return out


def critical_path(tl: Timeline, order: Sequence[str] = ()) -> tuple[str | None, list[Span], int]:
    """``(camera, spans, assembly_wait_ns)`` of the camera the batch waited for.

    Each camera's clock starts at its origin (arrival, else capture, else its first span's start), or
    later at the end of its own waits that precede its first busy span (a frame that arrived early
    waits in the synchroniser, ``queue_wait``, until its set forms): those waits are not its work, but
    it could not start before them. The camera is *ready* at that start plus its own busy time after
    it: the union of its spans other than waits (an outer host span and the device span inside it
    count once). The critical camera is the one ready last; ties go to the camera first in ``order``
    (rig order), then first seen. The time a camera's job sat queued for a worker thread
    (``worker_wait``) neither moves its start nor counts as busy time, so the answer does not depend on
    the order in which worker threads happened to pick the cameras up (the camera submitted last to a
    pool finishes last whatever its cost). The spans are that camera's plus the batch-level ones
    (camera None), by start time; ``assembly_wait_ns`` is the critical camera's ready time minus the
    earliest one's.
    """
    spans = list(tl.spans)
    own: dict[str, list[tuple[int, int, str]]] = {}
    waits: dict[str, list[int]] = {}  # camera -> end of each of its waits (but the wait for a worker thread)
    first_start: dict[str, int] = {}
    for s in spans:
        if s.camera is None:
            continue
        first_start[s.camera] = min(first_start.get(s.camera, s.start_ns), s.start_ns)
        cat = category_of(s.kind, s.attrs.get("unit"))
        own.setdefault(s.camera, [])
        if cat != "wait":
            own[s.camera].append((s.start_ns, s.end_ns, cat))
        elif s.name != WORKER_WAIT:
            waits.setdefault(s.camera, []).append(s.end_ns)
    ready: dict[str, int] = {}
    for cam in list(tl.cameras) + [c for c in first_start if c not in tl.cameras]:
        st = tl.cameras.get(cam)
        origin = None
        if st is not None:
            origin = st.arrival_ns if st.arrival_ns is not None else st.capture_mono_ns
        if origin is None:
            origin = first_start.get(cam)
        if origin is None:
            continue
        intervals = own.get(cam, [])
        busy_from = min((max(s, origin) for s, e, _c in intervals if e > origin), default=None)
        start = max([origin] + [e for e in waits.get(cam, ()) if busy_from is None or e <= busy_from])
        hi = max((e for _s, e, _c in intervals), default=start)
        ready[cam] = start + sum(sweep_categories(intervals, start, hi, count_unaccounted=False).values())
    if not ready:
        return None, sorted(spans, key=lambda s: s.start_ns), 0
    rank = {c: i for i, c in enumerate(order)}
    seen = {c: i for i, c in enumerate(ready)}
    latest = max(ready.values())
    crit = min((c for c, v in ready.items() if v == latest), key=lambda c: (rank.get(c, len(rank)), seen[c]))
    wait_ns = latest - min(ready.values())
    path = sorted((s for s in spans if s.camera is None or s.camera == crit), key=lambda s: s.start_ns)
    return crit, path, wait_ns


def _work_by_category(spans: Sequence[Span]) -> dict[str, int]:
    # One sweep per owner (the span's explicit track, else its camera, else batch level), so that a
    # camera's host span and the device span inside it count once, while owners add up.
    by_owner: dict[str | None, list[tuple[int, int, str]]] = {}
    for s in spans:
        by_owner.setdefault(s.track or s.camera, []).append((s.start_ns, s.end_ns, category_of(s.kind, s.attrs.get("unit"))))
    out: dict[str, int] = {}
    for intervals in by_owner.values():
        lo = min(iv[0] for iv in intervals)
        hi = max(iv[1] for iv in intervals)
        for cat, v in sweep_categories(intervals, lo, hi, count_unaccounted=False).items():
            out[cat] = out.get(cat, 0) + v
    return out


# --------------------------------------------------------------------------- LatencyStats
class LatencyStats:
    """Run-level and sliding-window latency statistics over timelines.

    Args:
        budgets: ns per key; keys are step names or one of :data:`END_TO_END_KEYS`
            (e.g. ``{"end_to_end": 20e6, "decode": 8e6}``). Step budgets apply to each span.
        window: number of most recent batches in the sliding window.
        max_samples: samples kept per run-level series for percentiles (reservoir beyond).
        keep_timelines: number of most recent timelines kept (for plots and quick traces).
        counters_only: keep counts/sums/max per step only (no percentiles of steps, no critical path);
            end-to-end percentiles are still exact.
        listeners: callables receiving each :class:`BatchRecord` (e.g. a Prometheus exporter); warm-up
            batches are not passed on.
        warmup: number of first batches left out of every statistic (and of the listeners): the first
            frame sets of a run pay for lazy initialisation (thread pools, allocator growth, model
            first call). They are counted in :attr:`warmup_batches`.
        camera_order: the rig order: :attr:`cameras` (and reports and plots) follow it, and it breaks
            ties of the critical camera; cameras not in it follow in first-seen order.
    """

    def __init__(self, *, budgets: Mapping[str, float] | None = None, window: int = 100,
                 max_samples: int = 100_000, keep_timelines: int = 16, counters_only: bool = False,
                 listeners: Iterable[Callable[[BatchRecord], Any]] = (), warmup: int = 0,
                 camera_order: Sequence[str] = ()) -> None:
        if window < 1:
            raise ConfigError(f"window must be >= 1 batch, got {window}")
        if max_samples < 1:
            raise ConfigError(f"max_samples must be >= 1, got {max_samples}")
        self.budgets: dict[str, int] = {}
        for key, value in (budgets or {}).items():
            if (not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 1
                    or not math.isfinite(value)):  # under 1 ns it would round to a budget of 0
                raise ConfigError(f"budgets[{key!r}]: expected a finite number of ns >= 1, got {value!r}")
            self.budgets[str(key)] = round(value)  # nearest ns: int(4.1 * 1e6) would be 4_099_999
        self.window = int(window)
        self.max_samples = int(max_samples)
        self.counters_only = bool(counters_only)
        self.listeners = list(listeners)
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ConfigError(f"warmup must be a number of batches >= 0, got {warmup!r}")
        self.warmup = warmup
        self.warmup_batches = 0
        self.camera_order = tuple(camera_order)
        self._lock = threading.Lock()
        self._batches = 0
        self._records: deque[BatchRecord] = deque(maxlen=self.window)
        self.timelines: deque[Timeline] = deque(maxlen=max(0, int(keep_timelines)))
        self._step_meta: dict[str, tuple[str, str]] = {}  # name -> (kind, category), in first-seen order
        self._cameras: dict[str, None] = {}
        self._step_all: dict[str, _Series] = {}
        self._step_cam: dict[tuple[str, str], _Series] = {}
        self._e2e: dict[tuple[str, str | None], _Series] = {}
        self._budget_counts: dict[str, list[int]] = {k: [0, 0, 0] for k in self.budgets}  # count, over, worst
        self._budget_at_least: set[str] = set()  # keys whose violation count is a lower bound (counters only)
        self._breakdown_sum: dict[str, int] = {}
        self._breakdown_batches = 0
        self._work_sum: dict[str, int] = {}
        self._critical_counts: dict[str, int] = {}
        self._critical_wait_sum: dict[str, int] = {}
        self._last_critical: BatchRecord | None = None
        self._over_time: list[tuple[int, int]] = []  # (batch index, end-to-end ns), every _over_stride-th batch
        self._over_stride = 1
        self._over_seen = 0
        self._transfer_sets = 0
        self._transfer_sum: dict[str | None, dict[str, int]] = {}  # camera (None: the batch's own) -> direction -> bytes
        self._transfer_steps: dict[str, int] = {}  # transfer step name -> bytes over the run
        # software DVPP device: step name -> predicted device time (ns) and its basis, or why there is none
        self._predicted: dict[str, _Series] = {}
        self._predicted_basis: dict[str, str] = {}

    @classmethod
    def from_timelines(cls, timelines: Iterable[Timeline], **kwargs: Any) -> "LatencyStats":
        stats = cls(**kwargs)
        stats.extend(timelines)
        return stats

    # ------------------------------------------------------------------ ingest
    def extend(self, timelines: Iterable[Timeline]) -> None:
        for tl in timelines:
            self.add(tl)

    def add(self, tl: Timeline) -> BatchRecord:
        """Ingest one finished timeline (thread-safe); return what was extracted from it.

        The first :attr:`warmup` timelines are extracted (and returned) but only counted in
        :attr:`warmup_batches`."""
        record = self._extract(tl)
        with self._lock:
            if self.warmup_batches < self.warmup:
                self.warmup_batches += 1
                return record
            self._ingest(record, tl)
            self._add_transfers(tl)
            self._add_predicted(tl)
        for listener in self.listeners:
            listener(record)
        return record

    def _series(self, table: dict, key: Any) -> _Series:
        s = table.get(key)
        if s is None:
            s = table[key] = _Series(self.max_samples)
        return s

    def _extract(self, tl: Timeline) -> BatchRecord:
        index = tl.index if tl.index is not None else self._batches
        cap = tl.end_to_end_ns("capture")
        arr = tl.end_to_end_ns("arrival")
        end = tl.end_ns
        cam_cap: dict[str, int] = {}
        cam_arr: dict[str, int] = {}
        if end is not None:
            for cam, st in tl.cameras.items():
                if st.capture_mono_ns is not None:
                    cam_cap[cam] = end - st.capture_mono_ns
                if st.arrival_ns is not None:
                    cam_arr[cam] = end - st.arrival_ns
        steps: list[tuple[str, str | None, int]] = []
        counters: list[tuple[str, str | None, int, int, int]] = []
        crit: str | None = None
        path_rows: list[tuple[str, str | None, str, int, int]] = []
        wait_ns = 0
        breakdown: dict[str, int] = {}
        work: dict[str, int] = {}
        meta: dict[str, tuple[str, str]] = {}
        if tl.counters_only or self.counters_only:
            for (name, camera, kind, unit), (count, total_ns, max_ns) in tl.counters().items():
                cat = category_of(kind, unit)
                meta.setdefault(name, (kind, cat))
                counters.append((name, camera, count, total_ns, max_ns))
                work[cat] = work.get(cat, 0) + total_ns
        else:
            spans = sorted(list(tl.spans), key=lambda s: s.start_ns)
            for s in spans:
                steps.append((s.name, s.camera, s.end_ns - s.start_ns))
                if s.name not in meta:
                    meta[s.name] = (s.kind, category_of(s.kind, s.attrs.get("unit")))
            if spans:
                crit, path, wait_ns = critical_path(tl, self.camera_order)
                path_rows = [(s.name, s.camera, category_of(s.kind, s.attrs.get("unit")), s.start_ns, s.end_ns)
                             for s in path]
                lo = tl.capture_mono_ns
                if lo is None:
                    lo = tl.arrival_ns
                if lo is None:
                    lo = spans[0].start_ns
                hi = end if end is not None else max(s.end_ns for s in spans)
                intervals = [(r[3], r[4], r[2]) for r in path_rows]
                crit_arrival = tl.cameras[crit].arrival_ns if crit in tl.cameras else None
                if crit_arrival is None:
                    crit_arrival = tl.arrival_ns
                if crit_arrival is not None and crit_arrival > lo:
                    intervals.append((lo, crit_arrival, "source"))
                breakdown = sweep_categories(intervals, lo, hi)
                work = _work_by_category(spans)
        record = BatchRecord(
            index=index, steps=steps, step_counters=counters,
            end_to_end_ns=cap if cap is not None else arr, capture_to_output_ns=cap, arrival_to_output_ns=arr,
            camera_capture_to_output_ns=cam_cap, camera_arrival_to_output_ns=cam_arr,
            critical_camera=crit, critical_path=path_rows, assembly_wait_ns=wait_ns,
            breakdown_ns=breakdown, work_ns=work, step_kinds=meta)
        # budgets
        for key, budget_ns in self.budgets.items():
            if key in END_TO_END_KEYS:
                v = {"end_to_end": record.end_to_end_ns, "end_to_end_capture": cap, "end_to_end_arrival": arr}[key]
                if v is not None and v > budget_ns:
                    record.violations.append((key, v))
        step_budgets = {k: v for k, v in self.budgets.items() if k not in END_TO_END_KEYS}
        if step_budgets:
            for name, _cam, d in steps:
                b = step_budgets.get(name)
                if b is not None and d > b:
                    record.violations.append((name, d))
            for name, _cam, count, _total, max_ns in counters:  # counters only: the maximum says whether any was over
                b = step_budgets.get(name)
                if b is not None and max_ns > b:
                    record.violations.append((name, max_ns))
                    if count > 1:
                        record.violations_at_least.add(name)
        return record

    def _ingest(self, record: BatchRecord, tl: Timeline) -> None:
        if tl.index is None:
            record.index = self._batches
        self._batches += 1
        for name, m in record.step_kinds.items():
            self._step_meta.setdefault(name, m)
        for camera in tl.cameras:
            self._cameras.setdefault(camera, None)
        for name, cam, d in record.steps:
            self._series(self._step_all, name).add(d)
            if cam is not None:
                self._cameras.setdefault(cam, None)
                self._series(self._step_cam, (name, cam)).add(d)
        for name, cam, count, total_ns, max_ns in record.step_counters:
            self._series(self._step_all, name).add_aggregate(count, total_ns, max_ns)
            if cam is not None:
                self._cameras.setdefault(cam, None)
                self._series(self._step_cam, (name, cam)).add_aggregate(count, total_ns, max_ns)
        for origin, v, per_cam in (("capture", record.capture_to_output_ns, record.camera_capture_to_output_ns),
                                   ("arrival", record.arrival_to_output_ns, record.camera_arrival_to_output_ns)):
            if v is not None:
                self._series(self._e2e, (origin, None)).add(v)
            for cam, cv in per_cam.items():
                self._series(self._e2e, (origin, cam)).add(cv)
        # budgets: counts of samples seen per key, and violations
        for key, counts in self._budget_counts.items():
            counts[0] += self._budget_samples(record, key)
        for key, v in record.violations:
            counts = self._budget_counts[key]
            counts[1] += 1
            counts[2] = max(counts[2], v)
        self._budget_at_least |= record.violations_at_least
        if record.breakdown_ns:
            self._breakdown_batches += 1
            for cat, v in record.breakdown_ns.items():
                self._breakdown_sum[cat] = self._breakdown_sum.get(cat, 0) + v
        for cat, v in record.work_ns.items():
            self._work_sum[cat] = self._work_sum.get(cat, 0) + v
        if record.critical_camera is not None:
            c = record.critical_camera
            self._critical_counts[c] = self._critical_counts.get(c, 0) + 1
            self._critical_wait_sum[c] = self._critical_wait_sum.get(c, 0) + record.assembly_wait_ns
            self._last_critical = record
        if record.end_to_end_ns is not None:
            if self._over_seen % self._over_stride == 0:
                self._over_time.append((record.index, record.end_to_end_ns))
                if len(self._over_time) > _OVER_TIME_POINTS:  # halve the resolution: memory stays bounded
                    self._over_time = self._over_time[::2]
                    self._over_stride *= 2
            self._over_seen += 1
        self._records.append(record)
        if self.timelines.maxlen:
            self.timelines.append(tl)

    @staticmethod
    def _budget_samples(record: BatchRecord, key: str) -> int:
        if key == "end_to_end":
            return int(record.end_to_end_ns is not None)
        if key == "end_to_end_capture":
            return int(record.capture_to_output_ns is not None)
        if key == "end_to_end_arrival":
            return int(record.arrival_to_output_ns is not None)
        return (sum(1 for name, _c, _d in record.steps if name == key)
                + sum(count for name, _c, count, _t, _m in record.step_counters if name == key))

    # ------------------------------------------------------------------ queries
    @property
    def batches(self) -> int:
        """Number of timelines ingested over the run."""
        return self._batches

    @property
    def cameras(self) -> list[str]:
        """Cameras seen: those of :attr:`camera_order` in that order, then the others in first-seen order."""
        rank = {c: i for i, c in enumerate(self.camera_order)}
        seen = list(self._cameras)
        return sorted(seen, key=lambda c: (rank.get(c, len(rank)), seen.index(c)))

    @property
    def step_names(self) -> list[str]:
        """Step (span) names seen, in first-seen order (plan order for a sequential chain)."""
        return list(self._step_meta)

    def step_kind(self, name: str) -> tuple[str, str]:
        """``(kind, category)`` of the first span seen with this name."""
        return self._step_meta[name]

    def _window_records(self) -> list[BatchRecord]:
        with self._lock:
            return list(self._records)

    def step_samples(self, name: str, camera: str | None = None, *, window: bool = False) -> np.ndarray:
        """Durations (ns) of every span of step ``name`` (of ``camera`` if given); window or kept run samples."""
        if window:
            vals = [d for r in self._window_records() for n, c, d in r.steps
                    if n == name and (camera is None or c == camera)]
            return np.asarray(vals, dtype=np.int64)
        with self._lock:
            s = self._step_all.get(name) if camera is None else self._step_cam.get((name, camera))
            return np.frombuffer(s.values, dtype=np.int64).copy() if s else np.zeros(0, dtype=np.int64)

    def step(self, name: str, camera: str | None = None, *, window: bool = False) -> Summary:
        """Summary of step ``name`` pooled over cameras (``camera=None``) or for one camera."""
        if window:
            recs = self._window_records()
            if any(r.step_counters for r in recs):
                series = _Series(self.max_samples)
                for r in recs:
                    for n, c, count, total, mx in r.step_counters:
                        if n == name and (camera is None or c == camera):
                            series.add_aggregate(count, total, mx)
                    for n, c, d in r.steps:
                        if n == name and (camera is None or c == camera):
                            series.add(d)
                return series.summary()
            return summarise(self.step_samples(name, camera, window=True))
        with self._lock:
            s = self._step_all.get(name) if camera is None else self._step_cam.get((name, camera))
            return s.summary() if s else EMPTY_SUMMARY

    def window_step_summaries(self) -> dict[tuple[str, str | None], Summary]:
        """Window summaries of every step, pooled (camera None) and per camera, computed in one pass."""
        recs = self._window_records()
        groups: dict[tuple[str, str | None], _Series] = {}
        for r in recs:
            for n, c, d in r.steps:
                self._series(groups, (n, None)).add(d)
                if c is not None:
                    self._series(groups, (n, c)).add(d)
            for n, c, count, total, mx in r.step_counters:
                self._series(groups, (n, None)).add_aggregate(count, total, mx)
                if c is not None:
                    self._series(groups, (n, c)).add_aggregate(count, total, mx)
        return {k: v.summary() for k, v in groups.items()}

    def end_to_end_samples(self, origin: str = "capture", camera: str | None = None, *,
                           window: bool = False) -> np.ndarray:
        """End-to-end durations (ns) from ``origin`` ("capture" or "arrival") to output."""
        if origin not in ("capture", "arrival"):
            raise ConfigError(f"Invalid origin ({origin!r}). Supported values are 'capture', 'arrival'.")
        if window:
            vals: list[int] = []
            for r in self._window_records():
                if camera is None:
                    v = r.capture_to_output_ns if origin == "capture" else r.arrival_to_output_ns
                else:
                    per = r.camera_capture_to_output_ns if origin == "capture" else r.camera_arrival_to_output_ns
                    v = per.get(camera)
                if v is not None:
                    vals.append(v)
            return np.asarray(vals, dtype=np.int64)
        with self._lock:
            s = self._e2e.get((origin, camera))
            return np.frombuffer(s.values, dtype=np.int64).copy() if s else np.zeros(0, dtype=np.int64)

    def end_to_end(self, origin: str = "capture", camera: str | None = None, *, window: bool = False) -> Summary:
        """Summary of output - capture (or - arrival) per batch, or per camera's frame."""
        if window:
            return summarise(self.end_to_end_samples(origin, camera, window=True))
        if origin not in ("capture", "arrival"):
            raise ConfigError(f"Invalid origin ({origin!r}). Supported values are 'capture', 'arrival'.")
        with self._lock:
            s = self._e2e.get((origin, camera))
            return s.summary() if s else EMPTY_SUMMARY

    def budget_report(self, *, window: bool = False) -> dict[str, dict[str, Any]]:
        """Per budget key: ``budget_ns``, ``count`` (samples checked), ``violations``, ``rate``, ``worst_ns``,
        ``at_least`` (the count is a lower bound: counters only, where a step that ran several times in a batch
        with its maximum over the budget counts once)."""
        out: dict[str, dict[str, Any]] = {}
        if window:
            recs = self._window_records()
            for key, budget_ns in self.budgets.items():
                count = sum(self._budget_samples(r, key) for r in recs)
                over = [v for r in recs for k, v in r.violations if k == key]
                out[key] = {"budget_ns": budget_ns, "count": count, "violations": len(over),
                            "rate": (len(over) / count) if count else 0.0, "worst_ns": max(over, default=None),
                            "at_least": any(key in r.violations_at_least for r in recs)}
            return out
        with self._lock:
            for key, budget_ns in self.budgets.items():
                count, n_over, worst = self._budget_counts[key]
                out[key] = {"budget_ns": budget_ns, "count": count, "violations": n_over,
                            "rate": (n_over / count) if count else 0.0, "worst_ns": worst if n_over else None,
                            "at_least": key in self._budget_at_least}
        return out

    def violations(self, key: str, *, window: bool = False) -> int:
        """Number of samples of ``key`` over its budget."""
        if key not in self.budgets:
            raise KeyError(f"No budget for {key!r}. Budgets are set for: {', '.join(self.budgets) or '(none)'}")
        return self.budget_report(window=window)[key]["violations"]

    def breakdown(self, *, window: bool = False) -> dict[str, Any]:
        """Where did the time go.

        Returns ``{"batches": n, "critical_path_ns": {category: mean ns per batch}, "share": {category:
        fraction of the mean end-to-end time}, "work_ns": {category: mean busy ns per batch summed over
        owners (cameras, explicit tracks such as the batcher)}}``. Categories are :data:`~dvpipe.latency.timeline.CATEGORIES`; only non-zero ones appear.
        """
        if window:
            recs = self._window_records()
            n = sum(1 for r in recs if r.breakdown_ns)
            bsum: dict[str, int] = {}
            wsum: dict[str, int] = {}
            for r in recs:
                for c, v in r.breakdown_ns.items():
                    bsum[c] = bsum.get(c, 0) + v
                for c, v in r.work_ns.items():
                    wsum[c] = wsum.get(c, 0) + v
            nw = len(recs)
        else:
            with self._lock:
                n = self._breakdown_batches
                bsum = dict(self._breakdown_sum)
                wsum = dict(self._work_sum)
                nw = self._batches
        crit = {c: bsum[c] / n for c in CATEGORIES if c in bsum} if n else {}
        total = sum(crit.values())
        share = {c: v / total for c, v in crit.items()} if total else {}
        work = {c: wsum[c] / nw for c in CATEGORIES if c in wsum} if nw else {}
        return {"batches": n, "critical_path_ns": crit, "share": share, "work_ns": work}

    def critical_cameras(self, *, window: bool = False) -> dict[str, dict[str, float]]:
        """Per camera: how often it was on the critical path (``count``, ``share``) and the mean time
        the other cameras waited for it when it was (``mean_wait_ns``)."""
        if window:
            counts: dict[str, int] = {}
            waits: dict[str, int] = {}
            for r in self._window_records():
                if r.critical_camera is not None:
                    counts[r.critical_camera] = counts.get(r.critical_camera, 0) + 1
                    waits[r.critical_camera] = waits.get(r.critical_camera, 0) + r.assembly_wait_ns
        else:
            with self._lock:
                counts = dict(self._critical_counts)
                waits = dict(self._critical_wait_sum)
        total = sum(counts.values())
        return {c: {"count": n, "share": n / total, "mean_wait_ns": waits[c] / n}
                for c, n in sorted(counts.items(), key=lambda kv: -kv[1])}

    def over_time(self) -> list[tuple[int, int]]:
        """``(batch index, end-to-end ns)`` over the run, in order: every batch, or every k-th (k a power
        of two) once more than 4096 were seen."""
        with self._lock:
            return list(self._over_time)

    @property
    def over_time_batches(self) -> int:
        """The batches :meth:`over_time` stands for: every one with an end-to-end time."""
        return self._over_seen

    @property
    def last_critical_path(self) -> BatchRecord | None:
        """The record of the most recent batch that had a critical path."""
        return self._last_critical

    # ------------------------------------------------------------------ output
    def _add_transfers(self, tl: Timeline) -> None:
        from .timeline import transfer_direction

        self._transfer_sets += 1
        for cam, row in tl.transfer_bytes(per_camera=True).items():
            acc = self._transfer_sum.setdefault(cam, {})
            for d, n in row.items():
                acc[d] = acc.get(d, 0) + n
        if not tl.counters_only:
            for sp in tl.spans:
                if sp.kind == "transfer" and sp.attrs.get("bytes"):
                    key = f"{sp.name} ({transfer_direction(sp.name, sp.attrs).replace('_', ' ')})"
                    self._transfer_steps[key] = self._transfer_steps.get(key, 0) + int(sp.attrs["bytes"])

    def _add_predicted(self, tl: Timeline) -> None:
        if tl.counters_only:
            return
        for sp in tl.spans:
            if "predicted_device_ns" in sp.attrs:
                series = self._predicted.setdefault(sp.name, _Series(self.max_samples))
                if sp.attrs["predicted_device_ns"] is not None:
                    series.add(int(sp.attrs["predicted_device_ns"]))
                self._predicted_basis.setdefault(sp.name, str(sp.attrs.get("predicted_basis") or ""))

    def predicted(self) -> dict[str, dict[str, Any]]:
        """Predicted device times of the software DVPP device's steps (spans carrying ``predicted_device_ns``,
        set by :func:`dvpipe.knowledge.throughput.predicted_step_ns`): step name -> ``{"run": Summary, "basis": str}``;
        ``run.count`` is 0 when the documented figures give no prediction (``basis`` says why). Empty on any
        other backend: these are predictions from documented throughput, never measurements."""
        with self._lock:
            return {k: {"run": v.summary(), "basis": self._predicted_basis.get(k, "")}
                    for k, v in self._predicted.items()}

    def transfers(self) -> dict[str, Any]:
        """Bytes moved between memory domains, mean per frame set (warm-up excluded), from every ``transfer``
        span carrying ``bytes`` (:meth:`Timeline.transfer_bytes`): ``host_to_device_bytes_per_set``,
        ``device_to_host_bytes_per_set``, ``device_to_device_bytes_per_set``, ``sets``, ``per_camera``
        (the same three per camera; batch-level transfers such as a model's output download under
        ``batch``) and ``by_step`` (mean bytes per set of each transfer span name)."""
        from .timeline import DIRECTIONS

        with self._lock:
            n = self._transfer_sets
            sums = {c: dict(v) for c, v in self._transfer_sum.items()}
            steps = dict(self._transfer_steps)
        per = (lambda x: x / n) if n else (lambda x: 0.0)
        total = dict.fromkeys(DIRECTIONS, 0)
        for row in sums.values():
            for d, v in row.items():
                total[d] = total.get(d, 0) + v
        out: dict[str, Any] = {f"{d}_bytes_per_set": per(total.get(d, 0)) for d in DIRECTIONS}
        out["sets"] = n
        out["per_camera"] = {("batch" if c is None else c): {f"{d}_bytes_per_set": per(v.get(d, 0)) for d in DIRECTIONS}
                             for c, v in sums.items()}
        out["by_step"] = {k: per(v) for k, v in steps.items()}
        return out

    def report(self, *, window: bool = False, per_camera: bool = True, title: str | None = None) -> str:
        """Terminal table; see :func:`dvpipe.latency.report.format_report`."""
        return format_report(self, window=window, per_camera=per_camera, title=title)

    def to_json(self, *, per_camera: bool = True) -> dict[str, Any]:
        """JSON-serialisable dict; see :func:`dvpipe.latency.report.to_json` for the keys."""
        return to_json(self, per_camera=per_camera)

    def __str__(self) -> str:
        return self.report()

    def __repr__(self) -> str:
        return (f"LatencyStats(batches={self._batches}, steps={len(self._step_meta)}, cameras={len(self._cameras)}, "
                f"window={self.window}, budgets={self.budgets})")
