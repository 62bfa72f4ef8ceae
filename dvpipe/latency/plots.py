"""PNG plots of latency (matplotlib is an optional extra: ``pip install 'dvpipe[plots]'``).

* :func:`plot_steps` — p50 and p99 of every step per camera: one group of bars per step (p50 as the
  bar, p99 as a tick above it), cameras in rig order; a step only shows the cameras that ran it
  (batch-level steps one :data:`BATCH_LABEL` bar), so there are no empty columns.
* :func:`plot_over_time` — end-to-end latency of every batch over the run, with the budgets of that series.
* :func:`plot_cdf` — CDF of end-to-end latency (capture and arrival origins), budget as a vertical line.
* :func:`plot_gantt` — a timeline of a few batches: one row per track (batcher, camera workers, device
  streams), bars coloured by category, the batch's capture->output interval drawn behind.
* :func:`write_plots` — all four into a folder; returns ``{"steps", "over_time", "cdf", "timeline"}`` paths.

Only ``matplotlib.figure.Figure`` is used (no pyplot, no global backend switch), so it is safe in
threads and headless processes. Names (steps, cameras, tracks) are drawn as written: their ``$`` are
escaped, so matplotlib never reads them as mathtext.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .._files import write_whole
from .._optional import require
from .timeline import CATEGORIES, Timeline, category_of
from .trace import BATCHER_TRACK, _track_sort_key, track_of

if TYPE_CHECKING:
    from .stats import LatencyStats

__all__ = ["plot_steps", "plot_over_time", "plot_cdf", "plot_gantt", "write_plots", "CATEGORY_COLOURS",
           "step_percentiles", "BATCH_LABEL"]

CATEGORY_COLOURS = {
    "source": "#bbbbbb", "io": "#8c564b", "cpu": "#1f77b4", "dvpp": "#d62728", "npu_gpu": "#9467bd",
    "transfer": "#ff7f0e", "model": "#2ca02c", "wait": "#e7e7a0", "unaccounted": "#dddddd",
}


#: How batch-level steps (camera ``None``) are labelled: not a legal camera name (no parentheses), so a
#: camera named "batch" keeps a label of its own.
BATCH_LABEL = "(batch)"


def _text(name: object) -> str:
    """``name`` as matplotlib text that shows exactly ``name``: a ``\\$`` is a literal ``$`` and, with every
    ``$`` escaped, no part of it is mathtext."""
    return str(name).replace("$", r"\$")


def _label(cam: str | None) -> str:
    return BATCH_LABEL if cam is None else cam


def _figure(**kwargs: Any):
    return require("matplotlib.figure").Figure(**kwargs)


def _save(fig: Any, path: str | os.PathLike[str]) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return write_whole(path, buf.getvalue())


def step_percentiles(stats: "LatencyStats", *, window: bool = False
                     ) -> list[tuple[str, list[tuple[str | None, float, float]]]]:
    """``[(step, [(camera, p50 ms, p99 ms), ...]), ...]``: steps in plan order, cameras in rig order,
    camera ``None`` for a batch-level step; only the cells with samples (a step no camera ran, or a camera
    that did not run it, is left out). Counters-only series (no percentiles) are left out too."""
    wsum = stats.window_step_summaries() if window else None

    def summary(name: str, cam: str | None):
        return wsum.get((name, cam)) if wsum is not None else stats.step(name, cam)

    out = []
    for name in stats.step_names:
        cells: list[tuple[str | None, float, float]] = []
        for cam in stats.cameras:
            s = summary(name, cam)
            if s is not None and s.count and s.p50_ns is not None:
                cells.append((cam, s.p50_ns / 1e6, s.p99_ns / 1e6))
        if not cells:
            s = summary(name, None)
            if s is not None and s.count and s.p50_ns is not None:
                cells.append((None, s.p50_ns / 1e6, s.p99_ns / 1e6))
        if cells:
            out.append((name, cells))
    return out


def plot_steps(stats: "LatencyStats", path: str | os.PathLike[str], *, window: bool = False) -> Path:
    """p50 (bar) and p99 (tick) of each step per camera, in ms, saved as PNG; returns the path."""
    rows = step_percentiles(stats, window=window)
    cams: list[str | None] = [*stats.cameras, None]
    colours = _camera_colours(cams)
    n_bars = sum(len(cells) for _n, cells in rows)
    fig = _figure(figsize=(min(18.0, max(6.0, 0.22 * n_bars + 0.5 * len(rows) + 3)), 4.8))
    ax = fig.add_subplot(1, 1, 1)
    x, centres, used = 0.0, [], {}  # keyed by camera, None for the batch level
    for name, cells in rows:
        start = x
        for cam, p50, p99 in cells:
            bar = ax.bar(x, p50, width=0.8, color=colours[cam])
            used[cam] = bar
            ax.plot([x - 0.35, x + 0.35], [p99, p99], color="black", linewidth=1.2)
            ax.plot([x, x], [p50, p99], color="black", linewidth=0.6)
            x += 1.0
        centres.append((start + x - 1.0) / 2)
        x += 0.8  # gap between steps
    if rows:
        ax.set_xticks(centres)
        ax.set_xticklabels([_text(n) for n, _c in rows], rotation=30, ha="right", fontsize="small")
        ax.legend([used[c] for c in cams if c in used], [_text(_label(c)) for c in cams if c in used], fontsize="small",
                  loc="upper left", bbox_to_anchor=(1.0, 1.0), title="bar p50, tick p99")
    else:
        ax.text(0.5, 0.5, "no step percentiles (counters only?)", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("ms")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(f"per-step latency p50 / p99 by camera ({stats.batches} batches{', window' if window else ''})")
    return _save(fig, path)


def _camera_colours(names: Sequence[str | None]) -> dict[str | None, Any]:
    from matplotlib import colormaps
    cmap = colormaps["tab10"]
    return {n: (cmap(i % 10) if n is not None else "#555555") for i, n in enumerate(names)}


def _over_time_origin(stats: "LatencyStats") -> str | None:
    """The origin of every point of :meth:`~LatencyStats.over_time` (capture where a batch has a capture
    stamp, else arrival): "capture", "arrival", or None where the run mixed both."""
    captured = stats.end_to_end("capture").count
    if captured == 0:
        return "arrival"
    # the series has a point for each batch with an end-to-end time (a batch never output has none)
    return "capture" if captured == stats.over_time_batches else None


def plot_over_time(stats: "LatencyStats", path: str | os.PathLike[str]) -> Path:
    """End-to-end latency (ms) of each batch against its index over the run, with the budgets that apply to
    that series ("end_to_end", and "end_to_end_capture" / "_arrival" where every point has that origin);
    returns the path."""
    pts = stats.over_time()
    fig = _figure(figsize=(8.0, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    if pts:
        origin = _over_time_origin(stats)
        ax.plot([i for i, _v in pts], [v / 1e6 for _i, v in pts], marker="." if len(pts) < 200 else None,
                linewidth=1.0, label=f"end to end ({origin or 'capture, else arrival'} -> output)")
        for key in ("end_to_end", *((f"end_to_end_{origin}",) if origin else ())):
            if key in stats.budgets:
                ax.axhline(stats.budgets[key] / 1e6, color="red", linestyle="--", label=f"budget {key}")
        ax.legend(fontsize="small", loc="upper right")
    else:
        ax.text(0.5, 0.5, "no end-to-end samples", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("frame set index" + (f" ({stats.warmup_batches} warm-up sets excluded)"
                                       if getattr(stats, "warmup_batches", 0) else ""))
    ax.set_ylabel("end-to-end latency (ms)")
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title("latency over time")
    return _save(fig, path)


def plot_cdf(stats: "LatencyStats", path: str | os.PathLike[str], *, window: bool = False) -> Path:
    """CDF of end-to-end latency (capture and arrival origins) with the end-to-end budget; returns the path."""
    import numpy as np
    fig = _figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot(1, 1, 1)
    plotted = False
    for origin in ("capture", "arrival"):
        v = np.sort(stats.end_to_end_samples(origin, window=window)) / 1e6
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=f"{origin} -> output (n={v.size})")
            plotted = True
    for key in ("end_to_end", "end_to_end_capture", "end_to_end_arrival"):
        if key in stats.budgets:
            ax.axvline(stats.budgets[key] / 1e6, color="red", linestyle="--", label=f"budget {key}")
    ax.set_xlabel("end-to-end latency (ms)")
    ax.set_ylabel("fraction of batches")
    ax.set_ylim(0, 1.01)
    ax.grid(True, alpha=0.3)
    ax.set_title("end-to-end latency CDF")
    if plotted:
        ax.legend(fontsize="small", loc="lower right")
    else:
        ax.text(0.5, 0.5, "no end-to-end samples", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, path)


def plot_gantt(timelines: Sequence[Timeline], path: str | os.PathLike[str], *, max_batches: int = 3) -> Path:
    """Gantt chart of the last ``max_batches`` timelines, one row per track; returns the path."""
    tls = [t for t in timelines if t.spans][-max_batches:] if max_batches > 0 else []
    fig = _figure(figsize=(11, 1.2 + 0.45 * max(3, len({track_of(s) for t in tls for s in t.spans}))))
    ax = fig.add_subplot(1, 1, 1)
    if not tls:
        ax.text(0.5, 0.5, "no timelines with spans", ha="center", va="center", transform=ax.transAxes)
        return _save(fig, path)
    tracks = sorted({track_of(s) for t in tls for s in t.spans} | {BATCHER_TRACK},
                    key=lambda n: (_track_sort_key(n), n))
    row = {n: i for i, n in enumerate(tracks)}
    starts = [t.capture_mono_ns if t.capture_mono_ns is not None else t.arrival_ns for t in tls]
    origin = min([v for v in starts if v is not None] + [s.start_ns for t in tls for s in t.spans])
    used: set[str] = set()
    for t in tls:
        start = t.capture_mono_ns if t.capture_mono_ns is not None else t.arrival_ns
        end = t.end_ns
        if start is not None and end is not None:
            ax.axvspan((start - origin) / 1e6, (end - origin) / 1e6, color="#f3f3f3", zorder=0)
            ax.text((start - origin) / 1e6, 0.99, f" batch {t.index}", fontsize="x-small", va="top",
                    transform=ax.get_xaxis_transform())
        for s in t.spans:
            cat = category_of(s.kind, s.attrs.get("unit"))
            used.add(cat)
            ax.barh(row[track_of(s)], (s.end_ns - s.start_ns) / 1e6, left=(s.start_ns - origin) / 1e6, height=0.7,
                    color=CATEGORY_COLOURS.get(cat, "#777777"), edgecolor="black", linewidth=0.3, zorder=2)
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels([_text(n) for n in tracks], fontsize="small")
    ax.set_ylim(-0.6, len(tracks) - 0.2)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(f"timeline of {len(tls)} batch{'es' if len(tls) != 1 else ''}")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=CATEGORY_COLOURS[c], label=c) for c in CATEGORIES if c in used],
              fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def _drawers(stats: "LatencyStats", *, timelines: Sequence[Timeline] | None = None, max_batches: int = 3
             ) -> dict[str, Callable[[Path], Path]]:
    """``{"steps", "over_time", "cdf", "timeline"}``: each draws its plot to the path it is given."""
    tls = list(stats.timelines) if timelines is None else list(timelines)
    return {
        "steps": lambda p: plot_steps(stats, p),
        "over_time": lambda p: plot_over_time(stats, p),
        "cdf": lambda p: plot_cdf(stats, p),
        "timeline": lambda p: plot_gantt(tls, p, max_batches=max_batches),
    }


def write_plots(stats: "LatencyStats", out_dir: str | os.PathLike[str], *, prefix: str = "latency",
                timelines: Sequence[Timeline] | None = None, max_batches: int = 3) -> dict[str, Path]:
    """Write the four PNGs into ``out_dir``; ``timelines`` default to the ones ``stats`` kept."""
    out = Path(out_dir)
    return {key: draw(out / f"{prefix}_{key}.png")
            for key, draw in _drawers(stats, timelines=timelines, max_batches=max_batches).items()}
