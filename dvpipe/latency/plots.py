"""PNG plots of latency (matplotlib is an optional extra: ``pip install 'dvpipe[plots]'``).

* :func:`plot_steps` — stacked bar per camera: mean (or p50) time of each step, batch-level steps as a
  last "batch" bar; the stack height is that camera's chain.
* :func:`plot_cdf` — CDF of end-to-end latency (capture and arrival origins), budget as a vertical line.
* :func:`plot_gantt` — a timeline of a few batches: one row per track (batcher, camera workers, device
  streams), bars coloured by category, the batch's capture->output interval drawn behind.
* :func:`write_plots` — all three into a folder; returns ``{"steps": path, "cdf": path, "timeline": path}``.

Only ``matplotlib.figure.Figure`` is used (no pyplot, no global backend switch), so it is safe in
threads and headless processes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from .._optional import require
from .timeline import CATEGORIES, Timeline, category_of
from .trace import BATCHER_TRACK, _track_sort_key, track_of

if TYPE_CHECKING:
    from .stats import LatencyStats

__all__ = ["plot_steps", "plot_cdf", "plot_gantt", "write_plots", "CATEGORY_COLOURS"]

CATEGORY_COLOURS = {
    "source": "#bbbbbb", "io": "#8c564b", "cpu": "#1f77b4", "dvpp": "#d62728", "npu_gpu": "#9467bd",
    "transfer": "#ff7f0e", "model": "#2ca02c", "wait": "#e7e7a0", "unaccounted": "#dddddd",
}


def _figure(**kwargs: Any):
    return require("matplotlib.figure").Figure(**kwargs)


def _save(fig: Any, path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110, bbox_inches="tight")
    return target


def plot_steps(stats: "LatencyStats", path: str | os.PathLike[str], *, statistic: str = "mean",
               window: bool = False) -> Path:
    """Stacked per-step latency per camera (``statistic`` "mean" or "p50"), saved as PNG; returns the path."""
    if statistic not in ("mean", "p50"):
        raise ValueError(f"Invalid statistic ({statistic!r}). Supported values are 'mean', 'p50'.")
    wsum = stats.window_step_summaries() if window else None

    def value(name: str, cam: str | None) -> float:
        s = wsum.get((name, cam)) if wsum is not None else stats.step(name, cam)
        if s is None or not s.count:
            return 0.0
        v = s.mean_ns if statistic == "mean" else s.p50_ns
        if v is None:
            v = s.mean_ns or 0.0
        # per-batch time of this step for this camera: several spans of one step add up
        per_batch = s.count / max(1, (min(stats.window, stats.batches) if window else stats.batches))
        return v * per_batch / 1e6

    cams = stats.cameras
    batch_steps = [n for n in stats.step_names if all(stats.step(n, c).count == 0 for c in cams)]
    labels = list(cams) + (["batch"] if batch_steps else [])
    fig = _figure(figsize=(max(5.0, 1.1 * len(labels) + 3), 4.5))
    ax = fig.add_subplot(1, 1, 1)
    bottoms = [0.0] * len(labels)
    cmap = _step_colours(stats.step_names)
    for name in stats.step_names:
        heights = [value(name, c) for c in cams]
        if batch_steps:
            heights.append(value(name, None) if name in batch_steps else 0.0)
        if not any(heights):
            continue
        ax.bar(labels, heights, bottom=bottoms, label=name, color=cmap[name])
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_ylabel(f"{statistic} ms per batch")
    ax.set_title(f"per-step latency by camera ({stats.batches} batches{', window' if window else ''})")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.tick_params(axis="x", labelrotation=30)
    return _save(fig, path)


def _step_colours(names: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps
    cmap = colormaps["tab20"]
    return {n: cmap(i % 20) for i, n in enumerate(names)}


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
    origin = min(min((t.capture_ns or t.arrival_ns or min(s.start_ns for s in t.spans)) for t in tls),
                 min(s.start_ns for t in tls for s in t.spans))
    used: set[str] = set()
    for t in tls:
        start = t.capture_ns if t.capture_ns is not None else t.arrival_ns
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
    ax.set_yticklabels(tracks, fontsize="small")
    ax.set_ylim(-0.6, len(tracks) - 0.2)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(f"timeline of {len(tls)} batch{'es' if len(tls) != 1 else ''}")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=CATEGORY_COLOURS[c], label=c) for c in CATEGORIES if c in used],
              fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def write_plots(stats: "LatencyStats", out_dir: str | os.PathLike[str], *, prefix: str = "latency",
                timelines: Sequence[Timeline] | None = None, max_batches: int = 3) -> dict[str, Path]:
    """Write the three PNGs into ``out_dir``; ``timelines`` default to the ones ``stats`` kept."""
    out = Path(out_dir)
    return {
        "steps": plot_steps(stats, out / f"{prefix}_steps.png"),
        "cdf": plot_cdf(stats, out / f"{prefix}_cdf.png"),
        "timeline": plot_gantt(list(stats.timelines) if timelines is None else list(timelines),
                               out / f"{prefix}_timeline.png", max_batches=max_batches),
    }
