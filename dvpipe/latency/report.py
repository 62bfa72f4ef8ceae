"""Human and machine output of :class:`~dvpipe.latency.stats.LatencyStats` (read through
:class:`~dvpipe.latency.records.StatsView`: this module does not import ``stats``).

* :func:`format_report` — aligned terminal table, milliseconds with 2 decimals.
* :func:`to_json` — a JSON-serialisable dict; every duration is in ns (keys end in ``_ns``)::

    {
      "schema": "dvpipe.latency/1",
      "batches": 200,                       # timelines in the statistics (warm-up excluded)
      "warmup_batches": 2,                  # first timelines left out (latency.warmup_sets)
      "window": {"size": 100, "batches": 100},
      "counters_only": false,
      "cameras": ["CAM_FRONT", ...],        # rig order (LatencyStats camera_order), then first-seen
      "steps": {                            # first-seen (plan) order
        "decode": {"kind": "host", "category": "cpu",
                   "run": SUMMARY, "window": SUMMARY,
                   "cameras": {"CAM_FRONT": {"run": SUMMARY, "window": SUMMARY}, ...}},
        ...},
      "end_to_end": {"capture": {"run": SUMMARY, "window": SUMMARY, "cameras": {cam: {"run": .., "window": ..}}},
                     "arrival": {...}},
      "budgets": {"end_to_end": {"budget_ns", "count", "violations", "rate", "worst_ns", "at_least",
                                 "window": {"count", "violations", "rate", "worst_ns", "budget_ns", "at_least"}}, ...},
      "breakdown": {"run": BREAKDOWN, "window": BREAKDOWN},
      "critical_path": {"cameras": {cam: {"count", "share", "mean_wait_ns"}}, "window_cameras": {...},
                        "last": {"index", "camera", "assembly_wait_ns",
                                 "steps": [{"name", "camera", "category", "start_ns", "end_ns", "duration_ns"}]}},
      "predicted": {"jpegd+vpc.resize": {"run": SUMMARY, "basis": "predicted from documented throughput ..."}}
    }

  ``predicted``: only on the software DVPP device (``dvpp-sim``), the device time each DVPP step would take on
  the target SoC, from documented throughput (``dvpipe probe --capacity``); empty on every other backend.

  where SUMMARY is ``{"count", "sum_ns", "mean_ns", "min_ns", "max_ns", "p50_ns", "p90_ns", "p99_ns",
  "approximate"}`` (percentiles null for counters-only series) and BREAKDOWN is
  ``{"batches", "critical_path_ns": {category: mean ns per batch}, "share": {category: fraction},
  "work_ns": {category: mean busy ns per batch, all cameras}}``.
* :func:`format_comparison` — one side-by-side table for several runs (``dvpipe bench``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..errors import ConfigError
from .records import EMPTY_SUMMARY, StatsView, Summary

__all__ = ["format_report", "to_json", "format_comparison", "CATEGORY_LABELS", "SCHEMA"]

SCHEMA = "dvpipe.latency/1"

CATEGORY_LABELS = {
    "source": "before arrival", "io": "I/O", "cpu": "CPU", "dvpp": "DVPP", "npu_gpu": "NPU/GPU",
    "transfer": "copies", "model": "model", "wait": "waiting", "unaccounted": "unaccounted",
}


def _ms(ns: float | int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.2f}"


def _table(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        out.append("  ".join(cells).rstrip())
    return out


def _budget_cell(budgets: Mapping[str, dict[str, Any]], key: str) -> tuple[str, str]:
    b = budgets.get(key)
    if b is None:
        return "", ""
    rate = f" ({100 * b['rate']:.1f}%)" if b["count"] else ""
    return _ms(b["budget_ns"]), f"{'>=' if b.get('at_least') else ''}{b['violations']}/{b['count']}{rate}"


def format_report(stats: StatsView, *, window: bool = False, per_camera: bool = True,
                  title: str | None = None) -> str:
    """Aligned text table of ``stats`` (run-level, or the sliding window with ``window=True``), in ms."""
    scope = f"window (last {min(stats.window, stats.batches)} of {stats.batches} batches)" if window else "run"
    cams = stats.cameras
    head = (f"{title or 'dvpipe latency'}: {stats.batches} batches, {len(cams)} camera"
            f"{'' if len(cams) == 1 else 's'}, {len(stats.step_names)} steps; {scope}; times in ms")
    if stats.counters_only:
        head += "; counters only"
    if getattr(stats, "warmup_batches", 0):
        head += f"; {stats.warmup_batches} warm-up batch{'es' if stats.warmup_batches != 1 else ''} excluded"
    lines = [head]
    budgets = stats.budget_report(window=window)
    wsum = stats.window_step_summaries() if window else None

    def step_summary(name: str, cam: str | None) -> Summary:
        if wsum is not None:
            return wsum.get((name, cam), EMPTY_SUMMARY)
        return stats.step(name, cam)

    rows: list[list[str]] = [["step", "camera", "kind", "n", "p50", "p90", "p99", "max", "mean", "budget", "over"]]

    def row(label: str, cam: str, kind: str, s: Summary, bkey: str | None) -> list[str]:
        b, o = _budget_cell(budgets, bkey) if bkey else ("", "")
        return [label, cam, kind, str(s.count), _ms(s.p50_ns), _ms(s.p90_ns), _ms(s.p99_ns), _ms(s.max_ns),
                _ms(s.mean_ns), b, o]

    predicted = stats.predicted() if hasattr(stats, "predicted") else {}
    for name in stats.step_names:
        kind, cat = stats.step_kind(name)
        kind_label = kind if cat in (kind, "cpu") else f"{kind}/{cat}"
        rows.append(row(name, "all", kind_label, step_summary(name, None), name))
        if per_camera and len(cams) > 1:
            for cam in cams:
                s = step_summary(name, cam)
                if s.count:
                    rows.append(row("", cam, "", s, None))
        if name in predicted:  # the software DVPP device: what the step would take on the target
            pr = predicted[name]["run"]
            rows.append(row(f"{name} [predicted]", "all", "predicted", pr, None) if pr.count else
                        [f"{name} [predicted]", "all", "predicted", "0", "no figure", "", "", "", "", "", ""])
    for origin in ("capture", "arrival"):
        s = stats.end_to_end(origin, window=window)
        if not s.count:
            continue
        bkey = "end_to_end_capture" if origin == "capture" else "end_to_end_arrival"
        if bkey not in budgets and "end_to_end" in budgets:
            primary = "capture" if stats.end_to_end("capture").count else "arrival"
            if origin == primary:
                bkey = "end_to_end"
        rows.append(row(f"end to end ({origin} -> output)", "all", "", s, bkey))
        if per_camera and len(cams) > 1:
            for cam in cams:
                cs = stats.end_to_end(origin, cam, window=window)
                if cs.count:
                    rows.append(row("", cam, "", cs, None))
    if len(rows) > 1:
        lines.extend(_table(rows, right={3, 4, 5, 6, 7, 8, 9, 10}))
    else:
        lines.append("(no spans recorded)")

    if predicted:
        lines.append("[predicted] rows: device time on the target SoC predicted from documented DVPP throughput (one "
                     "channel; dvpipe probe --capacity), not measured; the rows above them are the software device's "
                     "CPU emulation")
        for name, p in predicted.items():
            lines.append(f"  {name}: {p['basis']}")
    unseen = [k for k in budgets if k not in stats.step_names and k not in ("end_to_end", "end_to_end_capture",
                                                                                "end_to_end_arrival")]
    for key in unseen:
        lines.append(f"budget for {key!r}: no step of that name was recorded (steps: {', '.join(stats.step_names)})")

    tr = stats.transfers() if hasattr(stats, "transfers") else None
    if tr and tr["sets"] and any(tr[f"{d}_bytes_per_set"] for d in ("host_to_device", "device_to_host",
                                                                       "device_to_device")):
        lines.append("transfers per frame set (mean bytes, run): host->device {:,.0f}, device->host {:,.0f}, "
                     "device->device {:,.0f}".format(tr["host_to_device_bytes_per_set"],
                                                     tr["device_to_host_bytes_per_set"],
                                                     tr["device_to_device_bytes_per_set"]))
        trows = [["transfer", "bytes/set"]] + [[k, f"{v:,.0f}"] for k, v in tr["by_step"].items()]
        lines.extend("  " + ln for ln in _table(trows, right={1}))

    bd = stats.breakdown(window=window)
    if bd["critical_path_ns"]:
        total = sum(bd["critical_path_ns"].values())
        lines.append(f"where did the time go (critical path, mean {_ms(total)} ms per batch over {bd['batches']}):")
        parts = [[CATEGORY_LABELS.get(c, c), _ms(v), f"{100 * bd['share'].get(c, 0.0):.1f}%"]
                 for c, v in sorted(bd["critical_path_ns"].items(), key=lambda kv: -kv[1])]
        lines.extend("  " + ln for ln in _table(parts, right={1, 2}))
    if bd["work_ns"]:
        work = ", ".join(f"{CATEGORY_LABELS.get(c, c)} {_ms(v)}"
                         for c, v in sorted(bd["work_ns"].items(), key=lambda kv: -kv[1]))
        lines.append(f"work per batch, cameras + batcher summed (ms): {work}")
    crit = stats.critical_cameras(window=window)
    if crit:
        lines.append("critical camera: " + ", ".join(
            f"{c} {100 * v['share']:.0f}% (others waited {_ms(v['mean_wait_ns'])} ms)" for c, v in crit.items()))
    return "\n".join(lines)


def to_json(stats: StatsView, *, per_camera: bool = True) -> dict[str, Any]:
    """JSON-serialisable dict of ``stats``; keys are documented in this module's docstring."""
    wsum = stats.window_step_summaries()
    cams = stats.cameras
    steps: dict[str, Any] = {}
    for name in stats.step_names:
        kind, cat = stats.step_kind(name)
        entry: dict[str, Any] = {"kind": kind, "category": cat, "run": stats.step(name).to_dict(),
                                 "window": wsum.get((name, None), EMPTY_SUMMARY).to_dict()}
        if per_camera:
            entry["cameras"] = {c: {"run": stats.step(name, c).to_dict(),
                                    "window": wsum.get((name, c), EMPTY_SUMMARY).to_dict()}
                                for c in cams if stats.step(name, c).count}
        steps[name] = entry
    e2e: dict[str, Any] = {}
    for origin in ("capture", "arrival"):
        entry = {"run": stats.end_to_end(origin).to_dict(), "window": stats.end_to_end(origin, window=True).to_dict()}
        if per_camera:
            entry["cameras"] = {c: {"run": stats.end_to_end(origin, c).to_dict(),
                                    "window": stats.end_to_end(origin, c, window=True).to_dict()}
                                for c in cams if stats.end_to_end(origin, c).count}
        e2e[origin] = entry
    budgets = stats.budget_report()
    wbudgets = stats.budget_report(window=True)
    for key, b in budgets.items():
        b["window"] = wbudgets[key]
    last = stats.last_critical_path
    last_json = None
    if last is not None:
        last_json = {"index": last.index, "camera": last.critical_camera, "assembly_wait_ns": last.assembly_wait_ns,
                     "steps": [{"name": n, "camera": c, "category": cat, "start_ns": s, "end_ns": e,
                                "duration_ns": e - s} for n, c, cat, s, e in last.critical_path]}
    return {
        "schema": SCHEMA,
        "batches": stats.batches,
        "warmup_batches": getattr(stats, "warmup_batches", 0),
        "window": {"size": stats.window, "batches": min(stats.window, stats.batches)},
        "counters_only": stats.counters_only,
        "cameras": cams,
        "steps": steps,
        "end_to_end": e2e,
        "budgets": budgets,
        "breakdown": {"run": stats.breakdown(), "window": stats.breakdown(window=True)},
        "transfers": stats.transfers() if hasattr(stats, "transfers") else None,
        "predicted": ({k: {"run": v["run"].to_dict(), "basis": v["basis"]} for k, v in stats.predicted().items()}
                      if hasattr(stats, "predicted") else {}),
        "critical_path": {"cameras": stats.critical_cameras(), "window_cameras": stats.critical_cameras(window=True),
                          "last": last_json},
    }


#: the columns :func:`format_comparison` shows per run
COMPARISON_COLUMNS = ("p50", "p90", "p99", "max", "mean", "min")


def check_percentiles(percentiles: Sequence[str]) -> None:
    """:class:`~dvpipe.ConfigError` for a column that is not one of :data:`COMPARISON_COLUMNS`."""
    for p in percentiles:
        if p not in COMPARISON_COLUMNS:
            raise ConfigError(f"Invalid percentile ({p!r}). Supported values are {', '.join(COMPARISON_COLUMNS)}.")


def format_comparison(runs: Mapping[str, StatsView], *, percentiles: Sequence[str] = ("p50", "p99"),
                      window: bool = False, title: str | None = None) -> str:
    """Side-by-side table of several runs (e.g. one per backend plan): one row per step and end to end.

    ``percentiles`` are Summary fields without the ``_ns`` suffix ("p50", "p90", "p99", "max", "mean").
    """
    check_percentiles(percentiles)
    names: dict[str, None] = {}
    for st in runs.values():
        for n in st.step_names:
            names.setdefault(n, None)
    header = ["step"] + [f"{label} {p}" for label in runs for p in percentiles]
    rows = [header]
    for n in names:
        r = [n]
        for st in runs.values():
            s = st.step(n, window=window)
            r += [_ms(getattr(s, f"{p}_ns")) if s.count else "-" for p in percentiles]
        rows.append(r)
    for origin in ("capture", "arrival"):
        if not any(st.end_to_end(origin).count for st in runs.values()):
            continue
        r = [f"end to end ({origin})"]
        for st in runs.values():
            s = st.end_to_end(origin, window=window)
            r += [_ms(getattr(s, f"{p}_ns")) if s.count else "-" for p in percentiles]
        rows.append(r)
    lines = [f"{title or 'latency comparison'} (ms)"]
    lines.extend(_table(rows, right=set(range(1, len(header)))))
    return "\n".join(lines)
