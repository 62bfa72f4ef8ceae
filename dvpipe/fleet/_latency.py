"""Per-step latency statistics merged across fleet workers.

:class:`~dvpipe.latency.LatencyStats` has no merge of two instances (its reservoirs and sliding
window cannot be combined exactly), so the workers ship every frame set's timeline (compact JSON:
spans as :meth:`~dvpipe.latency.Span.to_list`, times on the worker's own monotonic clock, which is
only ever compared within one timeline) and the driver ingests them all into one ``LatencyStats``:
the merged report is exactly the one a single process seeing every set would print, in the same
format as ``dvpipe run``'s. Each worker's first ``latency.warmup_sets`` sets are left out (they pay
for that worker's lazy initialisation) and counted in ``warmup_batches``.
"""
from __future__ import annotations

from typing import Any, Optional

from ..latency import LatencyStats, Span, Timeline

__all__ = ["timeline_to_json", "timeline_from_json", "FleetLatency"]


def timeline_to_json(tl: Timeline, *, warmup: bool = False) -> dict[str, Any]:
    """A finished timeline as a JSON-able dict (times in ns on the worker's monotonic clock)."""
    d: dict[str, Any] = {"i": tl.index, "o": tl.output_ns,
                         "c": {cam: [st.capture_mono_ns, st.arrival_ns] for cam, st in tl.cameras.items()},
                         "s": [s.to_list() for s in tl.spans]}
    if tl.counters_only:
        d["k"] = [[name, cam, kind, unit, c, t, m] for (name, cam, kind, unit), (c, t, m) in tl.counters().items()]
        d["b"] = [[direction, cam, n] for (direction, cam), n in tl._bytes.items()]  # transfers (no spans to sum)
    if warmup:
        d["w"] = True
    return d


def timeline_from_json(d: dict[str, Any]) -> Timeline:
    """Inverse of :func:`timeline_to_json`."""
    tl = Timeline(index=d.get("i"), counters_only="k" in d)
    for cam, (cap, arr) in d.get("c", {}).items():
        tl.set_frame(cam, capture_mono_ns=cap, arrival_ns=arr)
    for row in d.get("s", ()):
        tl.add(Span.from_list(row))
    for name, cam, kind, unit, c, t, m in d.get("k", ()):
        tl._merge_counter((name, cam, kind, unit), int(c), int(t), int(m))
    for direction, cam, n in d.get("b", ()):
        tl._bytes[(direction, cam)] = tl._bytes.get((direction, cam), 0) + int(n)
    if d.get("o") is not None:
        tl.finish(int(d["o"]))
    return tl


class FleetLatency:
    """The driver's merged statistics: :meth:`add` each worker result's timelines."""

    def __init__(self, dep):
        self.stats = LatencyStats(budgets=dep.latency.budgets_ns(), window=dep.latency.window, keep_timelines=0,
                                  counters_only=dep.latency.counters_only, warmup=0,
                                  camera_order=[c.name for c in dep.cameras])
        self.warmup = 0

    def add(self, timelines: list[dict]) -> None:
        for d in timelines:
            if d.get("w"):
                self.warmup += 1
                continue
            self.stats.add(timeline_from_json(d))
        self.stats.warmup_batches = self.warmup

    def report(self, title: Optional[str] = None) -> str:
        return self.stats.report(title=title or "latency (ms), all workers")

    def to_json(self) -> dict:
        return self.stats.to_json()
