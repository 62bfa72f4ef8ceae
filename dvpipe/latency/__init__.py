"""Latency accounting: one monotonic clock, per-frame/per-batch timelines, statistics and exporters.

This package depends on nothing else in dvpipe (numpy only; matplotlib and prometheus-client are
optional extras imported by ``plots`` and ``prometheus`` when used).

Quick use::

    from dvpipe.latency import Timeline, LatencyStats, now_ns, write_trace

    tl = Timeline(index=i, capture_mono_ns=..., arrival_ns=now_ns())
    with tl.span("decode", camera="CAM_FRONT"):
        ...
    out = tl.time("model", model, images)
    tl.finish()
    stats = LatencyStats(budgets={"end_to_end": 20e6})
    stats.add(tl)
    print(stats.report())
"""

from .clock import DeviceSpan, epoch_offset_ns, now_ns, recalibrate, to_epoch_ns, to_monotonic_ns, wall_ns
from .records import BatchRecord, StatsView, Summary, summarise
from .report import format_comparison, format_report, to_json
from .stats import END_TO_END_KEYS, LatencyStats
from .timeline import CATEGORIES, KINDS, DeviceTimer, FrameStamps, Span, Timeline, category_of
from .trace import (TraceFormatError, TraceWriter, load_trace, stats_from_trace, summarise_trace,
                    timelines_from_trace, to_chrome_trace, validate_trace, write_trace)

__all__ = [
    # clock
    "now_ns", "wall_ns", "epoch_offset_ns", "recalibrate", "to_monotonic_ns", "to_epoch_ns", "DeviceSpan",
    # timelines
    "KINDS", "CATEGORIES", "category_of", "Span", "FrameStamps", "Timeline", "DeviceTimer",
    # statistics and reports
    "LatencyStats", "Summary", "BatchRecord", "StatsView", "END_TO_END_KEYS", "summarise",
    "format_report", "format_comparison", "to_json",
    # traces
    "TraceWriter", "TraceFormatError", "to_chrome_trace", "write_trace", "load_trace", "validate_trace",
    "timelines_from_trace", "stats_from_trace", "summarise_trace",
]
