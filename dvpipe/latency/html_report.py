"""A one-page, self-contained HTML report of a run (``dvpipe run --report out/report.html``).

The page holds, top to bottom: the run line (frame sets, time, why it stopped), the frame account per
camera (entered, emitted, dropped by reason, masked, reused), end to end and per-step p50 / p99 per
camera in rig order (ms; batch-level steps on a "(batch)" row), the plots of :mod:`dvpipe.latency.plots`
(needs matplotlib; without it the page says so and keeps the tables; a plot that fails to draw is left out
with a note naming the error), and the plan. Images are embedded as ``data:`` URIs and there is
no script and no external resource, so the file can be mailed or attached to a CI run and opens
offline. Every figure is in milliseconds unless its column says otherwise.
"""
from __future__ import annotations

import base64
import html
import os
import tempfile
from pathlib import Path
from typing import Any

from .._files import write_whole
from .._optional import require

__all__ = ["render_report", "write_report"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; } h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; } td, th { padding: 2px 8px; border-bottom: 1px solid #eee; }
th { text-align: left; background: #f4f4f4; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f7f7f7; padding: 0.8em; font-size: 0.8em; overflow-x: auto; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.4em 0; } .note { color: #666; font-size: 0.85em; }
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _table(head: list[str], rows: list[list[Any]], numeric_from: int = 1) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td class=\"n\">{_e(c)}</td>" if i >= numeric_from else f"<td>{_e(c)}</td>"
                                    for i, c in enumerate(r)) + "</tr>")
    return "".join(out) + "</table>"


def _ms(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e6:.2f}"


def _account(acc) -> str:
    rows = []
    for c in acc.cameras:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(acc.dropped[c].items())) or "0"
        masked = ", ".join(f"{k} {v}" for k, v in sorted(acc.masked[c].items())) or "0"
        rows.append([c, acc.entered[c], acc.emitted[c], dropped, masked, acc.stale[c], acc.health[c].state])
    t = acc.totals()
    rows.append(["all", t["entered"], t["emitted"], t["dropped"], t["masked_slots"], t["stale_slots"], ""])
    return _table(["camera", "entered", "emitted", "dropped (by reason)", "masked slots", "reused", "source"],
                  rows, numeric_from=1)


def _latency(stats) -> str:
    from .plots import BATCH_LABEL, step_percentiles

    rows = []
    for origin in ("capture", "arrival"):
        s = stats.end_to_end(origin)
        if s.count:
            rows.append([f"end to end ({origin} -> output)", "all", s.count, _ms(s.p50_ns), _ms(s.p99_ns),
                         _ms(s.max_ns)])
            for cam in stats.cameras:
                cs = stats.end_to_end(origin, cam)
                if cs.count:
                    rows.append(["", cam, cs.count, _ms(cs.p50_ns), _ms(cs.p99_ns), _ms(cs.max_ns)])
    for name, cells in step_percentiles(stats):
        for k, (cam, p50, p99) in enumerate(cells):
            s = stats.step(name, cam)
            rows.append([name if k == 0 else "", BATCH_LABEL if cam is None else cam, s.count, f"{p50:.2f}",
                         f"{p99:.2f}", _ms(s.max_ns)])
    if not rows:
        return "<p class=\"note\">no latency samples (every frame set was warm-up, or none was produced)</p>"
    return _table(["step", "camera", "n", "p50 ms", "p99 ms", "max ms"], rows, numeric_from=2)


def _plots(stats) -> str:
    try:
        require("matplotlib.figure")
    except ImportError as e:
        return f"<p class=\"note\">plots not drawn: {_e(e)}</p>"
    from .plots import _drawers

    drawers = _drawers(stats)
    imgs = []
    with tempfile.TemporaryDirectory(prefix="dvpipe-report-") as tmp:
        for key in ("over_time", "steps", "cdf", "timeline"):
            try:
                data = base64.b64encode(drawers[key](Path(tmp) / f"{key}.png").read_bytes()).decode("ascii")
            except Exception as e:  # noqa: BLE001 - one plot that cannot be drawn must not cost the report
                imgs.append(f"<p class=\"note\" id=\"plot-{key}-error\">{key} plot not drawn: "
                            f"{_e(type(e).__name__)}: {_e(str(e).strip()[:500])}</p>")
                continue
            imgs.append(f"<img id=\"plot-{key}\" alt=\"{key} plot\" src=\"data:image/png;base64,{data}\">")
    return "\n".join(imgs)


def render_report(result, *, title: str | None = None) -> str:
    """The HTML text of the report of a :class:`~dvpipe.deploy.runner.RunResult`."""
    stats, acc, dep = result.stats, result.accounting, result.deployment
    rate = result.sets / result.elapsed_s if result.elapsed_s > 0 else 0.0
    warm = getattr(stats, "warmup_batches", 0)
    crit = stats.critical_cameras()
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{_e(title or 'dvpipe run: ' + dep.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title or 'dvpipe run: ' + dep.name)}</h1>",
        f"<p id=\"run-line\">{result.sets} frame sets in {result.elapsed_s:.2f} s ({rate:.1f} sets/s); "
        f"stopped: {_e(result.stopped_by)}. Statistics over {stats.batches} sets"
        + (f"; {warm} warm-up set{'s' if warm != 1 else ''} excluded (latency.warmup_sets)" if warm else "")
        + ".</p>",
        "<h2>Frame account</h2>", f"<div id=\"account\">{_account(acc)}</div>",
        "<h2>Latency (ms)</h2>", f"<div id=\"latency\">{_latency(stats)}</div>",
    ]
    if crit:
        parts.append("<p class=\"note\">critical camera: " + ", ".join(
            f"{_e(c)} {100 * v['share']:.0f}% (others waited {_ms(v['mean_wait_ns'])} ms)" for c, v in crit.items())
            + "</p>")
    parts += ["<h2>Plots</h2>", f"<div id=\"plots\">{_plots(stats)}</div>",
              "<h2>Plan</h2>", f"<pre id=\"plan\">{_e(result.plan)}</pre>",
              f"<p class=\"note\">deployment {_e(dep.path or dep.name)}</p></body></html>"]
    return "\n".join(parts)


def write_report(result, path: str | os.PathLike[str], **kwargs: Any) -> Path:
    """Write :func:`render_report` to ``path`` (folders created); returns the path."""
    return write_whole(path, render_report(result, **kwargs))
