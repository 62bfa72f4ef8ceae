"""dvpipe.latency: clock mapping, timelines, statistics, budgets, reports, plots, Prometheus.

Attribution tests inject known delays on a fake monotonic clock (a fake sleep, a fake asynchronous
device stream) and check that the accounting finds exactly them (the p50 of a 20 ms step is 20 ms, end to
end is the sum of the parts); no test here reads the wall clock for an assertion.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np
import pytest

from dvpipe.latency import (CATEGORIES, DeviceSpan, LatencyStats, Span, Timeline, category_of, format_comparison,
                            now_ns, summarise, to_epoch_ns, to_monotonic_ns)
from dvpipe.errors import ConfigError
from dvpipe.latency.stats import critical_path, sweep_categories

from tolerances import tol

MS = 1_000_000


def within(value: float, expected: float, rel: float) -> bool:
    return abs(value - expected) <= rel * expected


class FakeClock:
    """dvpipe's monotonic clock (``now_ns``) under test control: time moves only in :meth:`sleep`."""

    def __init__(self, start_ns: int = 1_000 * MS) -> None:
        self.t_ns = start_ns

    def now(self) -> int:
        return self.t_ns

    def sleep(self, seconds: float) -> None:
        self.t_ns += round(seconds * 1e9)


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    """A :class:`FakeClock` read by every Timeline stamp taken without an explicit value.

    ``Timeline`` has no clock parameter (the issue-17 report proposes ``Timeline(clock=...)``); until then
    the module's ``now_ns`` is replaced for the test."""
    from dvpipe.latency import timeline as timeline_module

    fake = FakeClock()
    monkeypatch.setattr(timeline_module, "now_ns", fake.now)
    return fake


class FakeDeviceStream:
    """An asynchronous 'device' on a :class:`FakeClock`: ops run in order, one after the other.

    ``enqueue(delay_s)`` returns at once with an event; ``synchronize(event)`` advances the clock to the
    op's completion (if it is later than now) and returns the device-measured duration in ms (as
    ``torch.cuda.Event.elapsed_time`` would).
    """

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self._busy_until_ns = 0

    def enqueue(self, delay_s: float) -> dict:
        start = max(self.clock.now(), self._busy_until_ns)
        self._busy_until_ns = start + round(delay_s * 1e9)
        return {"done_ns": self._busy_until_ns, "elapsed_ms": delay_s * 1e3}

    def synchronize(self, event: dict) -> float:
        self.clock.t_ns = max(self.clock.t_ns, event["done_ns"])
        return event["elapsed_ms"]

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------- clock
def test_epoch_mapping_is_consistent_with_now():
    from dvpipe.latency import clock

    clock.recalibrate()  # the offset is sampled once per process: the wall clock may have been stepped since
    before = now_ns()
    mono = to_monotonic_ns(time.time_ns())
    after = now_ns()
    # the same instant read through two clocks: bracketed, so a pause between the reads cannot fail it
    assert before - 50 * MS < mono < after + 50 * MS
    assert to_monotonic_ns(to_epoch_ns(123_456_789)) == 123_456_789
    assert to_monotonic_ns(1_000, offset_ns=400) == 600


def test_device_span_mapping():
    ds = DeviceSpan("resize", enqueue_ns=100, sync_ns=1_000, device_duration_ns=300, unit="dvpp", stream="dvpp:0")
    assert (ds.start_ns, ds.end_ns, ds.clamped) == (700, 1_000, False)
    long = DeviceSpan("resize", 100, 1_000, 2_000)
    assert (long.start_ns, long.end_ns, long.clamped) == (100, 1_000, True)
    assert long.span_attrs()["clamped"] is True
    unknown = DeviceSpan("resize", 100, 1_000)
    assert unknown.start_ns == 100 and unknown.span_attrs()["duration_source"] == "host_stamps"
    assert DeviceSpan.from_elapsed_ms("x", 0, 10 * MS, 2.5).device_duration_ns == 2_500_000
    with pytest.raises(ValueError, match="sync_ns .* is before enqueue_ns"):
        DeviceSpan("bad", 1_000, 100, 5)


def test_categories():
    assert category_of("host") == "cpu"
    assert category_of("host", "cpu") == "cpu"
    assert category_of("host", "dvpp") == "dvpp"
    assert category_of("device", "vpc") == "dvpp"
    assert category_of("device", "cuda:0") == "npu_gpu"
    assert category_of("device", "npu") == "npu_gpu"
    assert category_of("device") == "npu_gpu"
    assert category_of("transfer", "cuda") == "transfer"
    assert category_of("model", "npu") == "model"
    assert category_of("wait") == "wait" and category_of("io") == "io"
    with pytest.raises(ValueError, match="Unknown span kind 'gpu'. Supported kinds are host"):
        category_of("gpu")


# --------------------------------------------------------------------------- attribution (issue 7 acceptance)
def test_sleeping_step_is_attributed_its_time(clock):
    stats = LatencyStats()
    for i in range(15):
        tl = Timeline(index=i, camera="CAM_FRONT", arrival_ns=clock.now())
        with tl.span("sleep20"):
            clock.sleep(0.020)
        tl.finish()
        stats.add(tl)
    s = stats.step("sleep20")
    assert s.count == 15
    assert s.p50_ns == 20 * MS and s.max_ns == 20 * MS, s
    assert stats.step_kind("sleep20") == ("host", "cpu")


def test_fake_async_device_stream_is_attributed_as_device(clock):
    stream = FakeDeviceStream(clock)
    stats = LatencyStats()
    try:
        for i in range(15):
            tl = Timeline(index=i, camera="CAM_FRONT", arrival_ns=clock.now())
            with tl.device_span("resize", unit="dvpp", stream="dvpp:0") as dt:
                event = stream.enqueue(0.012)
                clock.sleep(0.003)  # the host does something else meanwhile
                elapsed_ms = stream.synchronize(event)
                dt.synced()
                dt.set_elapsed_ms(elapsed_ms)
            tl.finish()
            stats.add(tl)
    finally:
        stream.close()
    s = stats.step("resize")
    assert s.p50_ns == 12 * MS, s  # the device's own figure, not the host's 3 ms or the 12 ms wait
    assert stats.step_kind("resize") == ("device", "dvpp")
    span = stats.timelines[-1].spans[0]
    assert span.kind == "device" and span.attrs["stream"] == "dvpp:0"
    assert span.end_ns == span.attrs["sync_ns"]
    assert span.start_ns >= span.attrs["enqueue_ns"]
    assert stats.breakdown()["critical_path_ns"]["dvpp"] == pytest.approx(s.mean_ns, rel=tol("ns_mean").rtol)


def test_device_queueing_places_second_op_after_first(clock):
    stream = FakeDeviceStream(clock)
    try:
        tl = Timeline(camera="CAM_FRONT")
        enqueue_ns = clock.now()
        first, second = stream.enqueue(0.010), stream.enqueue(0.010)
        ms1 = stream.synchronize(first)
        clock.sleep(0.0005)  # the host notices the first completion a little late
        sync1 = clock.now()
        ms2 = stream.synchronize(second)
        sync2 = clock.now()
        a = tl.add_device(DeviceSpan.from_elapsed_ms("op1", enqueue_ns, sync1, ms1, unit="cuda"))
        b = tl.add_device(DeviceSpan.from_elapsed_ms("op2", enqueue_ns, sync2, ms2, unit="cuda"))
    finally:
        stream.close()
    # op2 waited on the stream behind op1 (10 ms): its span starts when its device work did, not at enqueue
    assert b.start_ns == enqueue_ns + 10 * MS and b.end_ns == sync2 == enqueue_ns + 20 * MS
    assert a.start_ns == enqueue_ns + MS // 2 and a.end_ns == sync1  # placed back from the late sync stamp
    assert b.duration_ns == 10 * MS
    assert b.category == "npu_gpu"


def test_end_to_end_equals_sum_of_parts_for_a_sequential_chain(clock):
    stats = LatencyStats()
    for i in range(12):
        tl = Timeline(index=i, camera="CAM_FRONT", capture_mono_ns=clock.now())
        tl.arrived()
        with tl.span("decode"):
            clock.sleep(0.006)
        with tl.span("normalise"):
            clock.sleep(0.003)
        with tl.span("h2d", kind="transfer", unit="cuda"):
            clock.sleep(0.002)
        tl.time("model", clock.sleep, 0.004)
        tl.finish()
        rec = stats.add(tl)
        parts = sum(s.duration_ns for s in tl.spans)
        assert rec.capture_to_output_ns == parts == 15 * MS  # nothing between the spans: the parts are the whole
        assert sum(rec.breakdown_ns.values()) == rec.capture_to_output_ns  # the breakdown is exhaustive
    e2e = stats.end_to_end("capture")
    parts_p50 = sum(stats.step(n).p50_ns for n in ("decode", "normalise", "h2d", "model"))
    assert e2e.p50_ns == parts_p50
    bd = stats.breakdown()
    assert set(bd["critical_path_ns"]) <= {"cpu", "transfer", "model", "unaccounted", "source"}
    assert bd["critical_path_ns"]["cpu"] == stats.step("decode").mean_ns + stats.step("normalise").mean_ns
    assert sum(bd["share"].values()) == pytest.approx(1.0)


# --------------------------------------------------------------------------- statistics
def _synthetic(durations_ms_by_step: dict[str, list[float]], cameras=("CAM_FRONT",), **stats_kwargs) -> LatencyStats:
    """Batches built from explicit stamps: step k of batch i lasts durations[step][i] on every camera."""
    stats = LatencyStats(**stats_kwargs)
    n = len(next(iter(durations_ms_by_step.values())))
    for i in range(n):
        tl = Timeline(index=i)
        t_end = 0
        for cam in cameras:
            t = 1_000_000_000 * (i + 1)
            tl.set_frame(cam, capture_mono_ns=t - MS, arrival_ns=t)
            for name, values in durations_ms_by_step.items():
                d = int(values[i] * MS)
                tl.record(name, t, t + d, camera=cam)
                t += d
            t_end = max(t_end, t)
        tl.finish(t_end)
        stats.add(tl)
    return stats


def test_percentiles_match_numpy():
    rng = np.random.default_rng(7)
    values = rng.gamma(2.0, 3.0, size=257) + 0.1  # ms
    stats = _synthetic({"decode": list(values)})
    s = stats.step("decode")
    ns = np.array([int(v * MS) for v in values])
    assert s.count == 257
    for q, got in ((50, s.p50_ns), (90, s.p90_ns), (99, s.p99_ns)):
        assert got == pytest.approx(np.percentile(ns, q))
    assert s.max_ns == ns.max() and s.min_ns == ns.min() and s.sum_ns == ns.sum()
    assert s.mean_ns == pytest.approx(ns.mean())
    assert summarise(ns) == s
    e2e = stats.end_to_end("capture")
    assert e2e.p90_ns == pytest.approx(np.percentile(ns + MS, 90))


def test_budget_violations_against_a_hand_made_list():
    decode_ms = [5, 9, 8, 8.5, 2, 8.0001]  # budget 8 ms: 9, 8.5 and 8.0001 are over; 8 is not
    # capture is 1 ms before the chain starts, so end to end = decode + 1: [6, 10, 9, 9.5, 3, 9.0001];
    # budget 9.5 ms: only 10 is over (9.5 is not)
    stats = _synthetic({"decode": decode_ms}, budgets={"decode": 8e6, "end_to_end": 9.5e6, "typo": 1e6})
    rep = stats.budget_report()
    assert (rep["decode"]["count"], rep["decode"]["violations"], rep["decode"]["worst_ns"]) == (6, 3, 9 * MS)
    assert (rep["end_to_end"]["count"], rep["end_to_end"]["violations"]) == (6, 1)
    assert rep["end_to_end"]["worst_ns"] == 10 * MS and rep["end_to_end"]["rate"] == pytest.approx(1 / 6)
    assert stats.violations("decode") == 3
    assert rep["typo"] == {"budget_ns": 1 * MS, "count": 0, "violations": 0, "rate": 0.0, "worst_ns": None,
                           "at_least": False}
    assert "budget for 'typo': no step of that name was recorded" in stats.report()
    window = LatencyStats(budgets={"decode": 8e6}, window=2)
    window.extend(stats.timelines)
    assert window.budget_report(window=True)["decode"]["violations"] == 1  # last two: 2, 8.0001
    assert window.budget_report()["decode"]["violations"] == 3
    for bad in (-1, 0.4, float("inf"), float("nan")):  # 0.4 ns would round to a budget of 0; inf overflowed
        with pytest.raises(ConfigError, match=r"budgets\['x'\]: expected a finite number of ns >= 1"):
            LatencyStats(budgets={"x": bad})
    with pytest.raises(KeyError, match="No budget for 'model'"):
        stats.violations("model")


def test_a_span_exactly_at_a_fractional_ms_budget_is_not_a_violation():
    # steps_ms {decode: 4.1} arrives as 4.1 * 1e6 = 4099999.9999999995 ns: the budget is 4_100_000 ns,
    # and only a sample strictly above it is a violation
    stats = LatencyStats(budgets={"decode": 4.1 * 1e6, "end_to_end": 4.1 * 1e6})
    for k, dur in enumerate((4_100_000, 4_100_001)):
        tl = Timeline(index=k, capture_mono_ns=0)
        tl.record("decode", 0, dur, camera="A")
        tl.finish(dur)
        stats.add(tl)
    assert stats.budgets == {"decode": 4_100_000, "end_to_end": 4_100_000}
    rep = stats.budget_report()
    assert (rep["decode"]["violations"], rep["decode"]["worst_ns"]) == (1, 4_100_001)
    assert (rep["end_to_end"]["violations"], rep["end_to_end"]["worst_ns"]) == (1, 4_100_001)


def test_sliding_window_uses_only_the_last_n_batches():
    stats = _synthetic({"decode": [float(i) for i in range(1, 11)]}, window=3)
    w = stats.step("decode", window=True)
    assert (w.count, w.min_ns, w.max_ns, w.p50_ns) == (3, 8 * MS, 10 * MS, 9 * MS)
    assert stats.step("decode").count == 10
    assert stats.end_to_end("capture", window=True).count == 3
    assert stats.end_to_end("capture", window=True).min_ns == 9 * MS
    assert stats.window_step_summaries()[("decode", None)] == w
    assert stats.breakdown(window=True)["batches"] == 3


def test_counters_only_gives_the_same_counts_and_sums():
    def run(counters_only: bool) -> LatencyStats:
        stats = LatencyStats()
        for i in range(6):
            tl = Timeline(index=i, counters_only=counters_only)
            base = (i + 1) * 10**9
            for c, cam in enumerate(("CAM_FRONT", "CAM_BACK")):
                tl.set_frame(cam, capture_mono_ns=base, arrival_ns=base + 100)
                f = Timeline(camera=cam, counters_only=counters_only)
                f.record("decode", base + 200, base + 200 + (i + 1 + c) * MS)
                f.record("h2d", base + 10 * MS, base + 11 * MS, kind="transfer")
                tl.merge(f)
            tl.record("model", base + 12 * MS, base + 15 * MS, kind="model")
            tl.finish(base + 16 * MS)
            stats.add(tl)
        return stats

    full, lean = run(False), run(True)
    for name in ("decode", "h2d", "model"):
        a, b = full.step(name), lean.step(name)
        assert (a.count, a.sum_ns, a.max_ns) == (b.count, b.sum_ns, b.max_ns)
        assert b.p50_ns is None and a.p50_ns is not None
        for cam in ("CAM_FRONT", "CAM_BACK"):
            a, b = full.step(name, cam), lean.step(name, cam)
            assert (a.count, a.sum_ns) == (b.count, b.sum_ns)
    assert full.end_to_end("capture") == lean.end_to_end("capture")
    assert lean.step("decode", window=True).sum_ns == full.step("decode", window=True).sum_ns
    json.dumps(lean.to_json())
    assert "counters only" not in full.report()


def test_counters_only_stats_mode_and_timeline_counters():
    tl = Timeline(camera="C")
    tl.record("a", 0, 5)
    tl.record("a", 10, 12)
    assert tl.counters() == {("a", "C", "host", None): (2, 7, 5)}
    assert tl.total_ns("a") == 7
    stats = LatencyStats(counters_only=True)
    stats.add(tl)
    assert stats.step("a").count == 2 and stats.step("a").p50_ns is None
    assert stats.report().splitlines()[0].endswith("counters only")
    with pytest.raises(ValueError, match="cannot merge a counters-only timeline into a full timeline"):
        Timeline().merge(Timeline(counters_only=True, camera="C").merge(tl))


def test_reservoir_keeps_exact_count_sum_max():
    stats = LatencyStats(max_samples=100)
    tl = Timeline(camera="C")
    for i in range(1000):
        tl.record("x", 0, i + 1)
    stats.add(tl)
    s = stats.step("x")
    assert (s.count, s.sum_ns, s.max_ns, s.min_ns) == (1000, 500500, 1000, 1)
    assert s.approximate and len(stats.step_samples("x")) == 100
    assert 300 < s.p50_ns < 700


# --------------------------------------------------------------------------- critical path, breakdown
def test_critical_path_and_assembly_wait_attribution():
    tl = Timeline(index=0)
    for cam, arrival, work in (("A", 0, 5), ("B", 1, 9), ("C", 2, 3)):
        tl.set_frame(cam, capture_mono_ns=-2 * MS, arrival_ns=arrival * MS)
        tl.record("decode", arrival * MS, (arrival + work) * MS, camera=cam)
    ready = {"A": 5 * MS, "B": 10 * MS, "C": 5 * MS}
    wait = tl.record_assembly(ready)
    assert (wait.camera, wait.start_ns, wait.end_ns, wait.kind) == ("B", 5 * MS, 10 * MS, "wait")
    tl.record("model", 10 * MS, 14 * MS, kind="model", unit="npu")
    tl.finish(15 * MS)
    cam, path, wait_ns = critical_path(tl)
    assert cam == "B" and wait_ns == 5 * MS
    assert [s.name for s in path] == ["decode", "batch_assembly_wait", "model"]
    stats = LatencyStats()
    rec = stats.add(tl)
    # capture -2 ms -> B arrives at 1 ms (source 3 ms) -> decode 9 ms -> model 4 ms -> 1 ms unaccounted
    assert rec.breakdown_ns == {"source": 3 * MS, "cpu": 9 * MS, "model": 4 * MS, "unaccounted": 1 * MS}
    assert rec.end_to_end_ns == 17 * MS
    # work: every camera's decode, plus the batcher's wait and model (the wait is off the critical path)
    assert rec.work_ns == {"cpu": 17 * MS, "wait": 5 * MS, "model": 4 * MS}
    assert stats.critical_cameras()["B"] == {"count": 1, "share": 1.0, "mean_wait_ns": 5 * MS}
    assert stats.step("batch_assembly_wait", "B").count == 1
    assert rec.camera_capture_to_output_ns == {"A": 17 * MS, "B": 17 * MS, "C": 17 * MS}
    assert rec.camera_arrival_to_output_ns["C"] == 13 * MS


def test_a_frame_waiting_for_its_set_starts_its_chain_when_the_set_forms():
    """A arrives at 0 ms, B at 90 ms; the set forms at 90 (A waited in the synchroniser: queue_wait 0-90).
    A decodes 90-130, B 90-100, the model runs 130-140. The batch waited for A's decode, not for B's
    arrival: A is critical (ready at 130), B ready at 100, so the assembly wait is 30 ms."""
    tl = Timeline(index=0)
    tl.set_frame("A", capture_mono_ns=0, arrival_ns=0)
    tl.set_frame("B", capture_mono_ns=85 * MS, arrival_ns=90 * MS)
    tl.record("queue_wait", 0, 90 * MS, "wait", camera="A")
    tl.record("queue_wait", 90 * MS, 90 * MS, "wait", camera="B")
    tl.record("decode", 90 * MS, 130 * MS, camera="A")
    tl.record("decode", 90 * MS, 100 * MS, camera="B")
    tl.record("model", 130 * MS, 140 * MS, "model")
    tl.finish(140 * MS)
    for order in (("A", "B"), ("B", "A")):
        cam, path, wait_ns = critical_path(tl, order)
        assert cam == "A" and wait_ns == 30 * MS
        assert [(s.name, s.camera) for s in path] == [("queue_wait", "A"), ("decode", "A"), ("model", None)]
    rec = LatencyStats(camera_order=["A", "B"]).add(tl)
    assert rec.critical_camera == "A" and rec.assembly_wait_ns == 30 * MS
    # along A's chain from capture (0) to output (140): waiting 90, its decode 40 (cpu), the model 10
    assert rec.breakdown_ns == {"wait": 90 * MS, "cpu": 40 * MS, "model": 10 * MS}
    assert rec.end_to_end_ns == 140 * MS
    # one worker thread took B first: A's job waited for it 90-100 and decoded 100-140. Still A, 30 ms:
    # the wait for a thread is neither A's work nor a reason its chain started later
    tl = Timeline(index=1)
    tl.set_frame("A", capture_mono_ns=0, arrival_ns=0)
    tl.set_frame("B", capture_mono_ns=85 * MS, arrival_ns=90 * MS)
    tl.record("queue_wait", 0, 90 * MS, "wait", camera="A")
    tl.record("queue_wait", 90 * MS, 90 * MS, "wait", camera="B")
    tl.record("worker_wait", 90 * MS, 100 * MS, "wait", camera="A")
    tl.record("decode", 100 * MS, 140 * MS, camera="A")
    tl.record("decode", 90 * MS, 100 * MS, camera="B")
    tl.finish(140 * MS)
    cam, _path, wait_ns = critical_path(tl, ("B", "A"))
    assert cam == "A" and wait_ns == 30 * MS


def test_sweep_prefers_device_over_the_host_span_around_it():
    intervals = [(0, 10, "cpu"), (2, 6, "dvpp"), (8, 12, "wait")]
    assert sweep_categories(intervals, 0, 14) == {"cpu": 6, "dvpp": 4, "wait": 2, "unaccounted": 2}
    assert sweep_categories(intervals, 5, 5) == {}
    assert set(CATEGORIES) >= {"cpu", "dvpp", "npu_gpu", "transfer", "wait", "model", "io", "source"}


@pytest.mark.parametrize("seed", range(40))
def test_sweep_matches_instant_by_instant_attribution(seed):
    # reference: each integer instant goes to the highest-priority category covering it (or "unaccounted");
    # half the cases are runs of steps one after another (no overlap), half overlap at random
    rng = np.random.default_rng(seed)
    prio = ("model", "dvpp", "npu_gpu", "transfer", "cpu", "io", "wait", "source")
    intervals, t = [], int(rng.integers(-5, 5))
    for _ in range(int(rng.integers(0, 7))):
        if seed % 2:
            s = int(rng.integers(-5, 40))
        else:
            s = t + int(rng.integers(0, 4))
        e = s + int(rng.integers(0, 9))
        t = e
        intervals.append((s, e, prio[int(rng.integers(0, len(prio)))]))
    lo, hi = int(rng.integers(-3, 8)), int(rng.integers(20, 45))
    for count_unaccounted in (True, False):
        want: dict[str, int] = {}
        for x in range(lo, hi):
            cats = [c for s, e, c in intervals if s <= x < e]
            cat = min(cats, key=prio.index) if cats else "unaccounted"
            if cats or count_unaccounted:
                want[cat] = want.get(cat, 0) + 1
        assert sweep_categories(intervals, lo, hi, count_unaccounted=count_unaccounted) == want


# --------------------------------------------------------------------------- timeline mechanics
def test_timeline_time_span_errors_and_threads():
    tl = Timeline()
    assert tl.time("model", lambda x, y=1: x + y, 2, y=3) == 5
    assert tl.spans[-1].kind == "model" and tl.spans[-1].camera is None
    with pytest.raises(RuntimeError):
        with tl.span("decode", camera="C"):
            raise RuntimeError("boom")
    assert tl.spans[-1].attrs["error"] == "RuntimeError"
    with pytest.raises(ValueError, match="Unknown span kind 'cpu'"):
        tl.span("x", kind="cpu")
    with pytest.raises(ValueError, match="end_ns .* is before start_ns"):
        tl.record("x", 10, 5)
    assert tl.timed("h2d", "transfer", unit="cuda")(lambda: 7)() == 7
    assert tl.spans[-1].category == "transfer" and tl.spans[-1].unit == "cuda"

    for counters_only in (False, True):
        shared = Timeline(counters_only=counters_only)

        def worker(tl: Timeline, cam: str) -> None:
            for _ in range(500):
                with tl.span("decode", camera=cam):
                    pass

        threads = [threading.Thread(target=worker, args=(shared, f"CAM_{i}")) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        counts = shared.counters()
        assert sum(v[0] for v in counts.values()) == 4000
        assert {k[1] for k in counts} == {f"CAM_{i}" for i in range(8)}


def test_frame_timelines_merge_into_a_batch():
    batch = Timeline(index=3)
    for cam, cap in (("A", 100), ("B", 50)):
        f = Timeline(camera=cam, capture_mono_ns=cap, arrival_ns=cap + 10)
        f.add(Span("decode", cap + 10, cap + 30))
        batch.merge(f)
    assert batch.capture_mono_ns == 50 and batch.arrival_ns == 60  # oldest frame
    assert {s.camera for s in batch.spans} == {"A", "B"}
    assert batch.step_names() == ["decode"]
    assert batch.end_to_end_ns() == 130 - 50 and batch.end_to_end_ns("arrival") == 130 - 60  # last span end
    clone = Timeline.from_dict(json.loads(json.dumps(batch.to_dict())))
    assert clone.to_dict() == batch.to_dict()
    with pytest.raises(ValueError, match="Invalid origin"):
        batch.end_to_end_ns("exposure")


# --------------------------------------------------------------------------- report and JSON
def test_report_and_json():
    stats = _synthetic({"decode": [4, 5, 6], "resize": [1, 1, 2]}, cameras=("CAM_FRONT", "CAM_BACK"),
                       budgets={"end_to_end": 8e6})
    text = stats.report()
    lines = text.splitlines()
    assert lines[0].startswith("dvpipe latency: 3 batches, 2 cameras, 2 steps; run; times in ms")
    assert any(ln.split()[:2] == ["decode", "all"] and "5.00" in ln for ln in lines)
    assert any(ln.startswith("end to end (capture -> output)") for ln in lines)
    assert "where did the time go" in text and "critical camera:" in text
    assert stats.report(window=True).splitlines()[0].count("window (last 3 of 3 batches)") == 1
    j = stats.to_json()
    json.dumps(j)
    assert j["schema"] == "dvpipe.latency/1" and j["batches"] == 3
    assert list(j["steps"]) == ["decode", "resize"]
    assert j["steps"]["decode"]["run"]["p50_ns"] == 5 * MS
    assert set(j["steps"]["decode"]["cameras"]) == {"CAM_FRONT", "CAM_BACK"}
    assert j["end_to_end"]["capture"]["run"]["max_ns"] == 9 * MS
    assert j["budgets"]["end_to_end"]["violations"] == 1
    assert set(j["breakdown"]["run"]) == {"batches", "critical_path_ns", "share", "work_ns"}
    assert j["critical_path"]["last"]["index"] == 2
    assert set(j["steps"]["decode"]["run"]) == {"count", "sum_ns", "mean_ns", "min_ns", "max_ns", "p50_ns",
                                                 "p90_ns", "p99_ns", "approximate"}


def test_format_comparison():
    a = _synthetic({"decode": [4, 5, 6]})
    b = _synthetic({"decode": [1, 2, 3], "h2d": [1, 1, 1]})
    text = format_comparison({"cpu": a, "dvpp-sim": b})
    header = text.splitlines()[1].split()
    assert header == ["step", "cpu", "p50", "cpu", "p99", "dvpp-sim", "p50", "dvpp-sim", "p99"]
    decode = next(ln for ln in text.splitlines() if ln.startswith("decode")).split()
    assert decode[1] == "5.00" and decode[3] == "2.00"
    h2d = next(ln for ln in text.splitlines() if ln.startswith("h2d")).split()
    assert h2d[1:3] == ["-", "-"]
    with pytest.raises(ValueError, match="Invalid percentile"):
        format_comparison({"a": a}, percentiles=("p75",))


# --------------------------------------------------------------------------- optional extras
def test_plots_write_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    from dvpipe.latency.plots import write_plots
    stats = _synthetic({"decode": [4, 5, 6], "resize": [1, 1, 2]}, cameras=("CAM_FRONT", "CAM_BACK"),
                       budgets={"end_to_end": 8e6})
    tl = stats.timelines[-1]
    tl.record("model", tl.end_ns - MS, tl.end_ns, kind="model")
    paths = write_plots(stats, tmp_path)
    assert set(paths) == {"steps", "over_time", "cdf", "timeline"}
    for p in paths.values():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_without_matplotlib_name_the_extra(monkeypatch):
    from dvpipe.latency import plots
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'dvpipe\[plots\]'"):
        plots.plot_cdf(LatencyStats(), "unused.png")


def test_prometheus_exporter():
    pytest.importorskip("prometheus_client")
    from dvpipe.latency.prometheus import PrometheusExporter
    exporter = PrometheusExporter()
    stats = _synthetic({"decode": [4, 25]}, budgets={"end_to_end": 20e6}, listeners=[exporter])
    assert stats.batches == 2
    text = exporter.exposition().decode()
    assert 'dvpipe_step_duration_seconds_count{camera="CAM_FRONT",kind="host",step="decode"} 2.0' in text
    assert 'dvpipe_end_to_end_seconds_count{origin="capture"} 2.0' in text
    assert 'dvpipe_budget_violations_total{key="end_to_end"} 1.0' in text
    assert "dvpipe_batches_total 2.0" in text


def test_prometheus_without_client_names_the_extra(monkeypatch):
    from dvpipe.latency import prometheus
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r"pip install 'dvpipe\[prometheus\]'"):
        prometheus.PrometheusExporter()


def _e2e_timeline(i: int) -> Timeline:
    tl = Timeline(index=i)
    tl.set_frame("C", capture_mono_ns=i * 10**9, arrival_ns=i * 10**9)
    tl.finish(i * 10**9 + MS)
    return tl


def test_over_time_keeps_every_batch_up_to_4096_then_thins():
    """docs/latency.md: "every batch up to 4096, then evenly thinned" -- 4096 batches are all there; the 4097th
    halves the series to every second batch (0, 2, ..., 4096)."""
    stats = LatencyStats(keep_timelines=0)
    for i in range(4096):
        stats.add(_e2e_timeline(i))
    assert [i for i, _v in stats.over_time()] == list(range(4096))
    stats.add(_e2e_timeline(4096))
    assert [i for i, _v in stats.over_time()] == list(range(0, 4097, 2))


def test_step_budgets_are_checked_in_counters_only_mode():
    """A step's budget with counters only: each camera's decode ran once per set, so its maximum is its value and
    the check is exact (hand count: 3 of 4 sets have a camera over 8 ms); a step that ran twice in a set with its
    maximum over the budget counts one violation, marked a lower bound ('>=' in the table)."""
    durations = [(5, 9), (10, 2), (7, 8), (12, 11)]  # ms per set: (CAM_A, CAM_B); budget 8 ms, strictly above
    for counters_only in (False, True):
        stats = LatencyStats(budgets={"decode": 8 * MS}, counters_only=counters_only)
        for i, pair in enumerate(durations):
            tl = Timeline(index=i, counters_only=counters_only)
            base = (i + 1) * 10**9
            for cam, ms in zip(("CAM_A", "CAM_B"), pair):
                tl.set_frame(cam, capture_mono_ns=base, arrival_ns=base)
                f = Timeline(camera=cam, counters_only=counters_only)
                f.record("decode", base, base + ms * MS)
                tl.merge(f)
            tl.finish(base + 20 * MS)
            stats.add(tl)
        b = stats.budget_report()["decode"]
        assert (b["count"], b["violations"], b["worst_ns"], b["at_least"]) == (8, 4, 12 * MS, False), counters_only
    stats = LatencyStats(budgets={"decode": 8 * MS}, counters_only=True)
    tl = Timeline(index=0, counters_only=True)
    tl.set_frame("CAM_A", capture_mono_ns=0, arrival_ns=0)
    f = Timeline(camera="CAM_A", counters_only=True)
    f.record("decode", 0, 9 * MS)
    f.record("decode", 10 * MS, 19 * MS)  # twice over, known only as count 2, max 9 ms
    tl.merge(f)
    tl.finish(30 * MS)
    stats.add(tl)
    b = stats.budget_report()["decode"]
    assert (b["count"], b["violations"], b["at_least"]) == (2, 1, True)
    assert ">=1/2" in stats.report()


def test_fleet_round_trip_keeps_counters_only_transfer_bytes():
    """dvpipe/fleet/_latency.py promises the merged report a single process seeing every set would print; in
    counters-only mode a timeline keeps transfer bytes apart from its (absent) spans: the round trip through the
    fleet's JSON must carry them (hand count: 1000 bytes host -> device per set, 250 device -> host)."""
    from dvpipe.fleet._latency import timeline_from_json, timeline_to_json

    def timelines():
        for i in range(3):
            tl = Timeline(index=i, counters_only=True)
            base = (i + 1) * 10**9
            tl.set_frame("C", capture_mono_ns=base, arrival_ns=base)
            f = Timeline(camera="C", counters_only=True)
            f.record("h2d", base, base + MS, kind="transfer", bytes=1000)
            f.record("d2h", base + MS, base + 2 * MS, kind="transfer", bytes=250)
            tl.merge(f)
            tl.finish(base + 3 * MS)
            yield tl

    direct, fleet = LatencyStats(counters_only=True), LatencyStats(counters_only=True)
    for tl in timelines():
        direct.add(tl)
        fleet.add(timeline_from_json(json.loads(json.dumps(timeline_to_json(tl)))))
    assert direct.transfers()["host_to_device_bytes_per_set"] == 1000
    assert direct.transfers()["device_to_host_bytes_per_set"] == 250
    assert fleet.transfers() == direct.transfers()
