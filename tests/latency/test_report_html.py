"""The HTML report (``dvpipe run --report``) and the plots it embeds.

The page's structure is read back with the standard library's HTML parser; the percentiles in it and
in the plots' data are checked against numpy on durations the test chose; the rendering is checked
in a real headless Chromium (skipped where it is not installed) by tools/check_report_html.py."""
from __future__ import annotations

import importlib.util
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml

from dvpipe.cli import main as cli_main
from dvpipe.testing.deployments import synthetic_deployment
from dvpipe.latency import LatencyStats, Timeline
from dvpipe.latency.plots import step_percentiles

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
    assert [c for c, _p50, _p99 in rows["model"]] == ["batch"]
    for step, cells in rows.items():
        for cam, p50, p99 in cells:
            ref = np.array(truth[(step, None if cam == "batch" else cam)]) / 1e6
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
