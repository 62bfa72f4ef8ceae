"""The HTML report (``dvpipe run --report``) and the plots it embeds.

The page's structure is read back with the standard library's HTML parser; the percentiles in it and
in the plots' data are checked against numpy on durations the test chose; the rendering is checked
in a real headless Chromium (skipped where it is not installed) by tools/check_report_html.py."""
from __future__ import annotations

import importlib.util
import shutil
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from dvpipe.cli import main as cli_main
from dvpipe.testing.deployments import synthetic_deployment
from dvpipe.latency import LatencyStats, Timeline
from dvpipe.latency.html_report import render_report
from dvpipe.latency.plots import BATCH_LABEL, step_percentiles

ROOT = Path(__file__).resolve().parents[2]
MS = 1_000_000


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.imgs, self.rows, self._row, self._cell = set(), [], [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "tr":
            self._row = []
        if tag in ("td", "th"):
            self._cell = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None:
            self._row.append(self._cell)
            self._cell = None
        if tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None


def _stats() -> tuple[LatencyStats, dict]:
    """Rig order B, A; A decodes in 1..20 ms, B in 2..40 ms; only A runs "warp"; "model" is batch-level."""
    stats = LatencyStats(camera_order=("B", "A"))
    truth = {("decode", "A"): [], ("decode", "B"): [], ("warp", "A"): [], ("model", None): []}
    for i in range(20):
        tl = Timeline(index=i)
        for cam, k in (("A", 1), ("B", 2)):  # A reports first: first-seen order is not rig order
            tl.set_frame(cam, capture_mono_ns=0, arrival_ns=0)
            tl.record("decode", 0, (i + 1) * k * MS, camera=cam)
            truth[("decode", cam)].append((i + 1) * k * MS)
        tl.record("warp", 0, (i % 3 + 1) * MS, camera="A")
        truth[("warp", "A")].append((i % 3 + 1) * MS)
        tl.record("model", 50 * MS, 53 * MS, kind="model")
        truth[("model", None)].append(3 * MS)
        tl.finish(60 * MS)
        stats.add(tl)
    return stats, truth


def test_step_percentiles_per_camera_in_rig_order_without_empty_cells():
    stats, truth = _stats()
    rows = dict(step_percentiles(stats))
    assert list(rows) == ["decode", "warp", "model"]
    assert [c for c, _p50, _p99 in rows["decode"]] == ["B", "A"]   # rig order
    assert [c for c, _p50, _p99 in rows["warp"]] == ["A"]          # B never ran it: no empty column
    assert [c for c, _p50, _p99 in rows["model"]] == [None]       # batch level: no camera
    for step, cells in rows.items():
        for cam, p50, p99 in cells:
            ref = np.array(truth[(step, cam)]) / 1e6
            assert p50 == pytest.approx(np.percentile(ref, 50)) and p99 == pytest.approx(np.percentile(ref, 99))


def test_over_time_keeps_every_batch_in_order_then_thins_evenly():
    stats, _ = _stats()
    assert [i for i, _v in stats.over_time()] == list(range(20))
    assert all(v == 60 * MS for _i, v in stats.over_time())  # capture 0 -> output 60 ms


def _run_report(tmp_path) -> Path:
    pytest.importorskip("matplotlib")
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(synthetic_deployment(["CAM_B", "CAM_A"], frames=8)))
    report = tmp_path / "out" / "report.html"
    assert cli_main(["run", str(p), "--no-outputs", "-q"]) == 0  # --no-outputs writes no report either
    assert not report.exists()
    assert cli_main(["run", str(p), "-q", "--out", str(tmp_path / "out"), "--report", str(report)]) == 0
    return report


def test_report_page_has_the_account_latency_plots_and_plan(tmp_path):
    report = _run_report(tmp_path)
    page = _Page()
    page.feed(report.read_text(encoding="utf-8"))
    assert {"run-line", "account", "latency", "plots", "plan", "plot-over_time", "plot-steps", "plot-cdf",
            "plot-timeline"} <= page.ids
    assert len(page.imgs) == 4 and all(src.startswith("data:image/png;base64,") for src in page.imgs)
    account = [r for r in page.rows if r and r[0] in ("CAM_B", "CAM_A", "all") and len(r) == 7]
    assert [r[0] for r in account] == ["CAM_B", "CAM_A", "all"]  # rig order
    assert [r[1:3] for r in account] == [["8", "8"], ["8", "8"], ["16", "16"]]  # 8 frame sets of 2 cameras
    step, decode = None, []
    for r in page.rows:  # latency rows: step (first row of the step only), camera, n, p50, p99, max
        if len(r) == 6 and r[0] != "step":
            step = r[0] or step
            if step == "decode":
                decode.append(r[1:3])
    assert decode == [["CAM_B", "6"], ["CAM_A", "6"]]  # rig order; 2 warm-up sets left out of 8


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed (apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(tmp_path):
    report = _run_report(tmp_path)
    spec = importlib.util.spec_from_file_location("check_report_html", ROOT / "tools" / "check_report_html.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    shot = tmp_path / "shot.png"
    assert tool.check(report, shot, tool.find_chromium()) == []
    assert shot.stat().st_size > 10_000


# --------------------------------------------------------------------------- plots on an injected clock
def _kept_figures(monkeypatch) -> dict:
    """Keep each figure the plots save, by file name, so its axes can be read back."""
    from dvpipe.latency import plots
    kept, save = {}, plots._save

    def keep(fig, path):
        kept[Path(path).name] = fig
        return save(fig, path)
    monkeypatch.setattr(plots, "_save", keep)
    return kept


def _injected(capture: bool = True) -> list[Timeline]:
    """3 frame sets 10 ms apart from 0 ns: capture at +0, arrival at +1 ms, decode A 3 ms and B 2 ms from
    arrival, model 5..8 ms, output at 9 ms. By hand: capture -> output 9 ms, arrival -> output 8 ms."""
    tls = []
    for i in range(3):
        b = i * 10 * MS
        tl = Timeline(index=i)
        for cam, dec in (("CAM_A", 3), ("CAM_B", 2)):
            tl.set_frame(cam, capture_mono_ns=b if capture else None, arrival_ns=b + MS)
            tl.record("decode", b + MS, b + (1 + dec) * MS, camera=cam)
        tl.record("model", b + 5 * MS, b + 8 * MS, kind="model")
        tl.finish(b + 9 * MS)
        tls.append(tl)
    return tls


def test_gantt_origin_is_the_earliest_capture_even_at_zero_ns(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from dvpipe.latency.plots import plot_gantt
    kept = _kept_figures(monkeypatch)
    plot_gantt(_injected(), tmp_path / "g.png")
    ax = kept["g.png"].axes[0]
    shading = [(p.get_x(), p.get_width()) for p in ax.patches if p.get_zorder() == 0]  # capture -> output
    bars = sorted((p.get_x(), p.get_width()) for p in ax.patches if p.get_zorder() == 2)  # spans
    # by hand, from capture 0: sets shaded 0..9, 10..19, 20..29 ms; decodes 1..4 and 1..3, model 5..8 ms
    assert [(pytest.approx(x), pytest.approx(w)) for x, w in shading] == [(0.0, 9.0), (10.0, 9.0), (20.0, 9.0)]
    assert bars[:3] == [(pytest.approx(1.0), pytest.approx(2.0)), (pytest.approx(1.0), pytest.approx(3.0)),
                        (pytest.approx(5.0), pytest.approx(3.0))]


@pytest.mark.parametrize("capture, budget, drawn", [
    (True, "end_to_end_arrival", None),    # series is capture -> output (9 ms): an arrival budget is not its own
    (True, "end_to_end_capture", 9.0),
    (True, "end_to_end", 9.0),
    (False, "end_to_end_arrival", 8.0),    # no capture stamps: the series is arrival -> output (8 ms)
    (False, "end_to_end_capture", None),
    (False, "end_to_end", 8.0),
])
def test_over_time_draws_only_the_budgets_of_the_series_it_plots(tmp_path, monkeypatch, capture, budget, drawn):
    pytest.importorskip("matplotlib")
    from dvpipe.latency.plots import plot_over_time
    kept = _kept_figures(monkeypatch)
    stats = LatencyStats.from_timelines(_injected(capture), budgets={budget: 8.5 * MS})
    plot_over_time(stats, tmp_path / "o.png")
    lines = {ln.get_label(): [float(y) for y in ln.get_ydata()] for ln in kept["o.png"].axes[0].lines}
    series = [v for k, v in lines.items() if k.startswith("end to end")]
    budgets = {k: v for k, v in lines.items() if k.startswith("budget")}
    assert series == [[9.0, 9.0, 9.0] if capture else [8.0, 8.0, 8.0]]
    if drawn is None:
        assert budgets == {}
    else:
        assert series[0][0] == drawn and list(budgets) == [f"budget {budget}"]
        assert budgets[f"budget {budget}"][0] == 8.5


def test_a_set_never_output_does_not_hide_the_capture_budget(tmp_path, monkeypatch):
    """A fourth set that was never output has no end-to-end time and no point; the three points are all capture ->
    output (9 ms), so the end_to_end_capture budget is drawn against them."""
    pytest.importorskip("matplotlib")
    from dvpipe.latency.plots import plot_over_time
    kept = _kept_figures(monkeypatch)
    unfinished = Timeline(index=3)
    unfinished.set_frame("CAM_A", capture_mono_ns=30 * MS, arrival_ns=31 * MS)
    stats = LatencyStats.from_timelines([*_injected(True), unfinished], budgets={"end_to_end_capture": 8.5 * MS})
    plot_over_time(stats, tmp_path / "o.png")
    labels = [ln.get_label() for ln in kept["o.png"].axes[0].lines]
    assert "budget end_to_end_capture" in labels and "end to end (capture -> output)" in labels


# --------------------------------------------------------------------------- report pieces on a hand-made run
def _result(stats) -> SimpleNamespace:
    acc = SimpleNamespace(cameras=[], totals=lambda: {"entered": 0, "emitted": 0, "dropped": 0, "masked_slots": 0,
                                                      "stale_slots": 0})
    return SimpleNamespace(stats=stats, accounting=acc, deployment=SimpleNamespace(name="d", path=None), sets=3,
                           elapsed_s=1.0, stopped_by="frames", plan="p")


def _latency_rows(page_text: str) -> list[list[str]]:
    page = _Page()
    page.feed(page_text)
    rows, step = [], None
    for r in page.rows:
        if len(r) == 6 and r[0] != "step":
            step = r[0] or step
            rows.append([step] + r[1:])
    return rows


def test_a_camera_named_batch_stays_apart_from_batch_level_steps(tmp_path, monkeypatch):
    """'batch' is a legal camera name; by hand its decode is 2 ms x3, CAM_B's 5 ms x3, the model 3 ms x3."""
    tls = []
    for i in range(3):
        b = 1 + i * 10 * MS
        tl = Timeline(index=i)
        for cam, d in (("batch", 2), ("CAM_B", 5)):
            tl.set_frame(cam, capture_mono_ns=b, arrival_ns=b + MS)
            tl.record("decode", b + MS, b + (1 + d) * MS, camera=cam)
        tl.record("model", b + 6 * MS, b + 9 * MS, kind="model")
        tl.finish(b + 9 * MS)
        tls.append(tl)
    stats = LatencyStats(camera_order=["batch", "CAM_B"])
    stats.extend(tls)
    table = [r for r in _latency_rows(render_report(_result(stats))) if not r[0].startswith("end to end")]
    assert table == [["decode", "batch", "3", "2.00", "2.00", "2.00"], ["decode", "CAM_B", "3", "5.00", "5.00", "5.00"],
                     ["model", BATCH_LABEL, "3", "3.00", "3.00", "3.00"]]
    rows = dict(step_percentiles(stats))
    assert rows["decode"] == [("batch", 2.0, 2.0), ("CAM_B", 5.0, 5.0)] and rows["model"] == [(None, 3.0, 3.0)]
    if importlib.util.find_spec("matplotlib"):
        from dvpipe.latency.plots import plot_steps
        kept = _kept_figures(monkeypatch)
        plot_steps(stats, tmp_path / "s.png")
        ax = kept["s.png"].axes[0]
        legend = {t.get_text(): h.get_facecolor() for t, h in zip(ax.get_legend().get_texts(),
                                                                  ax.get_legend().legend_handles)}
        assert list(legend) == ["batch", "CAM_B", BATCH_LABEL] and legend["batch"] != legend[BATCH_LABEL]
        assert [b.get_height() for b in ax.patches] == [pytest.approx(2.0), pytest.approx(5.0), pytest.approx(3.0)]


def _one_step(step: str, camera: str = "CAM_A") -> LatencyStats:
    tls = []
    for i in range(3):
        tl = Timeline(index=i, capture_mono_ns=1 + i * 10 * MS)
        tl.record(step, 1 + i * 10 * MS + MS, 1 + i * 10 * MS + 3 * MS, camera=camera)
        tl.finish(1 + i * 10 * MS + 5 * MS)
        tls.append(tl)
    return LatencyStats.from_timelines(tls)


@pytest.mark.parametrize("name", ["crop$\\x$", "cost_$in$_$out$", "a\\$b", "$"])
def test_names_with_dollars_are_drawn_as_written_not_as_mathtext(tmp_path, monkeypatch, name):
    """matplotlib's rule ("Writing mathematical expressions"): text with an even number of unescaped $ is
    mathtext; an escaped \\$ is a literal $. Every label made from a name must come out as the name."""
    pytest.importorskip("matplotlib")
    from matplotlib.text import Text
    from dvpipe.latency.plots import write_plots
    kept = _kept_figures(monkeypatch)
    write_plots(_one_step(name, camera=name), tmp_path)  # a malformed one raised ValueError
    steps, gantt = kept["latency_steps.png"].axes[0], kept["latency_timeline.png"].axes[0]
    shown = [t.get_text() for t in steps.get_xticklabels()] + [t.get_text() for t in steps.get_legend().get_texts()]
    shown += [t.get_text() for t in gantt.get_yticklabels()]
    assert [Text(text=s)._preprocess_math(s) for s in shown] == [
        (name, False), (name, False), ("batcher", False), (f"camera {name}", False)]


def test_a_plot_that_fails_leaves_the_report_without_it_and_says_so(monkeypatch):
    pytest.importorskip("matplotlib")
    from dvpipe.latency import plots

    def broken(*_a, **_k):
        raise ValueError("cannot draw this")
    monkeypatch.setattr(plots, "plot_cdf", broken)
    page = _Page()
    text = render_report(_result(_one_step("decode")))
    page.feed(text)
    assert {"plot-over_time", "plot-steps", "plot-timeline"} <= page.ids and "plot-cdf" not in page.ids
    assert len(page.imgs) == 3 and "cdf plot not drawn: ValueError: cannot draw this" in text
