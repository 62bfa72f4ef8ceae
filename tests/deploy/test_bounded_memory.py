"""Bounded memory in long runs (issue 12.6): with ``outputs.trace`` on, what a run retains stops
growing with its length: the trace is a ring of the most recent frame sets, the latency statistics
keep a bounded window and reservoir, camera health keeps bounded logs. Checked by counting the
retained structures and by the traced allocation growth between two points of one run, never by
what the trace contains; the file written at the end is still a valid trace that `dvpipe trace` reads."""
from __future__ import annotations

import gc
import tracemalloc

from dvpipe.deploy import Runner, load_deployment
from dvpipe.pipeline import Pipeline
from dvpipe.testing.deployments import synthetic_deployment
from dvpipe.latency import Timeline, TraceWriter
from dvpipe.latency.trace import load_trace, summarise_trace, timelines_from_trace, validate_trace


def timeline(i: int, cameras: int = 3) -> Timeline:
    tl = Timeline(index=i)
    base = i * 1_000_000
    for c in range(cameras):
        tl.set_frame(f"C{c}", capture_mono_ns=base, arrival_ns=base + 10)
        tl.record("decode", base + 20, base + 30, "host", camera=f"C{c}", unit="cpu")
    tl.record("model", base + 40, base + 50, "model")
    tl.finish()
    return tl


def test_trace_writer_is_a_ring_of_whole_batches(tmp_path):
    tw = TraceWriter(tmp_path / "t.json", max_events=100)  # 6 events per batch: 4 spans + begin/end
    for i in range(1000):
        tw.add(timeline(i))
        assert tw.events_held <= 100
    assert tw.events_held == 16 * 6 and tw.dropped_batches == 1000 - 16 and tw.spans_written == 4000
    obj = load_trace(tw.write())
    validate_trace(obj, check_nesting=True)
    assert [t.index for t in timelines_from_trace(obj)] == list(range(1000 - 16, 1000))  # the newest
    ring = obj["otherData"]["ring"]
    assert ring == {"max_events": 100, "batches_added": 1000, "dropped_batches": 984, "dropped_spans": 984 * 4}
    assert obj["otherData"]["spans"] == 16 * 4


def test_unbounded_writer_keeps_everything():
    tw = TraceWriter(max_events=None)
    for i in range(50):
        tw.add(timeline(i))
    assert tw.events_held == 300 and tw.dropped_batches == 0


def test_long_run_with_trace_retains_a_bounded_amount(tmp_path):
    # measured in the steady state: after the pipeline's own bounded backlog of timelines has filled
    first = Pipeline.LATENCY_BACKLOG + 100
    second, sets = first + 400, first + 450
    dep = load_deployment(synthetic_deployment(2, width=32, height=32, encoding="raw", frames=None, cycle=4,
                                               run={"frames": sets},
                                               outputs={"dir": str(tmp_path), "metrics": False, "trace": True}))
    seen: dict[int, tuple] = {}

    def probe(runner: Runner) -> None:
        n = runner.sets_done
        if n in (first, second):
            gc.collect()
            health = runner.acc.health.values()
            seen[n] = (tracemalloc.get_traced_memory()[0], runner.trace.events_held, len(runner.trace._batches),
                       len(runner.stats.timelines), max(len(h.events) + len(h.outage_log) for h in health))

    tracemalloc.start()
    try:
        result = Runner(dep, progress=probe, outputs={"trace": {"max_events": 400}}).run()
    finally:
        tracemalloc.stop()
    assert result.sets == sets and result.accounting.check() == []
    (mem1, *sizes1), (mem2, *sizes2) = seen[first], seen[second]
    assert sizes1 == sizes2  # ring full at both points: the same number of batches and events held
    assert sizes2[0] <= 400 and sizes2[2] <= 16
    # 400 more frame sets; an unbounded trace held ~5 kB per set here (~2 MB)
    assert mem2 - mem1 < 500_000, (mem1, mem2)
    obj = load_trace(result.outputs["trace"])
    validate_trace(obj, check_nesting=True)
    assert obj["otherData"]["ring"]["dropped_batches"] > 0
    kept = timelines_from_trace(obj)
    assert kept and kept[-1].index == sets - 1 and len(kept) == sizes2[1]
    assert "events" in summarise_trace(result.outputs["trace"])
