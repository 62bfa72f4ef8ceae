"""What latency accounting costs on the sample deployment's frame sets.

    python tools/bench/overhead.py [--rounds 40] [--threads 2]

Runs the bevformer-tiny pipeline over the sample frame sets in one process, alternating per round
(rotated order) between ``timing="spans"`` (every step of every camera recorded as a span, then
added to LatencyStats and a trace, as ``dvpipe run`` does) and ``timing="counters"`` (count, sum and
max per step only, no statistics). Prints median ms per frame set for each and the overhead as a
share of the end-to-end time, plus a micro-benchmark of one span record and of ``LatencyStats.add``
per batch. Numbers are ratios from one run on a noisy machine: compare, don't quote absolutes.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import dvpipe as dv  # noqa: E402
from dvpipe.latency import LatencyStats, Timeline, TraceWriter  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    rig = dv.Rig.from_yaml(ROOT / "samples" / "rig.yaml")
    sets = []
    for k in range(4):
        sets.append({c.name: (sorted((ROOT / "samples" / "frames" / c.name).glob("*.jpg"))[k]).read_bytes() for c in rig})
    pipes = {mode: dv.Pipeline.from_profile("bevformer-tiny", rig, threads=args.threads, timing=mode)
             for mode in ("spans", "counters")}
    stats = LatencyStats()
    trace = TraceWriter(None)
    times: dict[str, list[float]] = {m: [] for m in pipes}
    order = list(pipes)
    for r in range(args.rounds + 5):
        order = order[1:] + order[:1]
        for mode in order:
            frames = sets[r % len(sets)]
            t0 = time.perf_counter_ns()
            batch = pipes[mode].process(frames)
            if mode == "spans":
                stats.add(batch.timeline)
                trace.add(batch.timeline)
            dt = (time.perf_counter_ns() - t0) / 1e6
            if r >= 5:
                times[mode].append(dt)
    med = {m: statistics.median(v) for m, v in times.items()}
    # per-round paired differences (both modes ran in the same round): their spread is the noise
    diffs = sorted(a - b for a, b in zip(times["spans"], times["counters"]))
    q = lambda f: diffs[min(len(diffs) - 1, int(f * len(diffs)))]  # noqa: E731
    spans_per_batch = len(batch.timeline.spans) if batch.timeline is not None else 0

    tl = Timeline()
    n = 20000
    t0 = time.perf_counter_ns()
    for i in range(n):
        tl.record("decode", i, i + 1, camera="CAM_FRONT", unit="cpu", backend="cpu")
    per_span_us = (time.perf_counter_ns() - t0) / n / 1e3
    probe = pipes["spans"].process(sets[0]).timeline
    s2 = LatencyStats()
    t0 = time.perf_counter_ns()
    for _ in range(200):
        s2.add(probe)
    per_add_us = (time.perf_counter_ns() - t0) / 200 / 1e3

    print(f"bevformer-tiny, 6 x 1600x900 sample frame sets, {args.threads} threads, {args.rounds} rounds")
    print(f"  median ms per frame set: spans + stats + trace {med['spans']:.2f}, counters only {med['counters']:.2f}")
    print(f"  paired difference per round (spans - counters): median {q(0.5):+.2f} ms, p10 {q(0.1):+.2f}, "
          f"p90 {q(0.9):+.2f} ({q(0.5) / med['counters'] * 100:+.1f}% of the frame set; the p10..p90 spread is the "
          "machine's noise)")
    cost_ms = (spans_per_batch * per_span_us + per_add_us) / 1e3
    print(f"  bottom-up: {spans_per_batch} spans x {per_span_us:.2f} us + LatencyStats.add {per_add_us:.0f} us "
          f"= {cost_ms:.3f} ms per batch = {cost_ms / med['counters'] * 100:.2f}% of the frame set's time")


if __name__ == "__main__":
    main()
