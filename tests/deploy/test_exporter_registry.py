"""The exporter registry (issue 17): one table of exporters with open / observe / close, the built-ins
among them, and an exporter added from a file outside the package with one decorator.

The user exporter below writes each frame set's end-to-end latency (capture -> output, ns) as CSV;
the test checks the file against the run's own ``latency.json`` (count, sum, min, max and the
percentiles numpy computes from the CSV's values) and ``summary.json`` (sets)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from dvpipe.cli import main as cli_main
from dvpipe.deploy import Runner, load_deployment
from dvpipe.deploy.config import DeploymentError
from dvpipe.deploy.exporters import EXPORTERS, Exporter, output_keys, register_exporter
from dvpipe.testing.deployments import synthetic_deployment
from dvpipe.errors import ConfigError
from dvpipe.latency import now_ns

from tolerances import tol

PLUGIN = '''
import csv
import threading
from dataclasses import dataclass

from dvpipe.deploy.exporters import Exporter, option, register_exporter


@register_exporter("latency_csv")
class LatencyCsv(Exporter):
    """End-to-end latency (capture -> output, ns) of each frame set as CSV."""

    @dataclass
    class Options:
        path: str = option("e2e.csv", "file name (relative to outputs.dir)")
        every: int = option(1, "one row every N frame sets", minimum=1, maximum=1000)

    def open(self, run):
        self.path = run.output_path(self.options["path"])
        self.rows = []
        self.thread = threading.current_thread().name

    def observe(self, result):
        if result.index % self.options["every"] == 0:
            r = result.record
            self.rows.append((result.index, int(result.warmup), r.capture_to_output_ns, r.arrival_to_output_ns))

    def close(self, result):
        with open(self.path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["set", "warmup", "capture_to_output_ns", "arrival_to_output_ns"])
            w.writerows(self.rows)
        return {"latency_csv": self.path}
'''


def _deployment(tmp_path: Path, outputs: dict, **kw) -> Path:
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "csv_exporter.py").write_text(PLUGIN, encoding="utf-8")
    d = synthetic_deployment(2, frames=kw.pop("frames", 9), outputs=dict({"dir": str(tmp_path / "out")}, **outputs),
                             **kw)
    d["plugins"] = ["plugins/csv_exporter.py"]
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(d), encoding="utf-8")
    return path


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_user_exporter_from_a_file_outside_the_package_writes_what_the_run_measured(tmp_path):
    path = _deployment(tmp_path, {"metrics": True, "latency_csv": {"path": "e2e.csv"}}, frames=9)
    assert cli_main(["validate", str(path)]) == 0
    assert cli_main(["run", str(path), "-q"]) == 0
    out = tmp_path / "out"
    rows = _rows(out / "e2e.csv")
    summary = json.loads((out / "summary.json").read_text())
    lat = json.loads((out / "latency.json").read_text())
    assert [int(r["set"]) for r in rows] == list(range(summary["sets"])) and summary["sets"] == 9
    # a recording replayed as fast as possible has no monotonic capture time: end to end is from arrival
    assert all(r["capture_to_output_ns"] == "" for r in rows) and lat["end_to_end"]["capture"]["run"]["count"] == 0
    measured = np.array([int(r["arrival_to_output_ns"]) for r in rows if r["warmup"] == "0"], dtype=np.int64)
    assert sum(r["warmup"] == "1" for r in rows) == lat["warmup_batches"] == 2
    run = lat["end_to_end"]["arrival"]["run"]
    assert run["count"] == len(measured) == lat["batches"] == 7
    assert (run["sum_ns"], run["min_ns"], run["max_ns"]) == (int(measured.sum()), int(measured.min()),
                                                             int(measured.max()))
    p50, p90, p99 = np.percentile(measured, [50, 90, 99])
    assert (run["p50_ns"], run["p90_ns"], run["p99_ns"]) == pytest.approx((p50, p90, p99), rel=0, abs=tol("percentile_ns").atol)
    # the user exporter is observed like the built-ins: its cost is reported, once per set
    assert summary["exporters"]["latency_csv"]["observe_calls"] == 9
    assert set(summary["exporters"]) == {"summary", "latency", "latency_csv"}


def test_the_options_are_validated_by_the_generic_validator_one_line_per_problem(tmp_path):
    path = _deployment(tmp_path, {"latency_csv": {"every": 0, "colour": "red"}})
    with pytest.raises(DeploymentError) as e:
        load_deployment(path)
    text = str(e.value)
    assert "outputs.latency_csv.every: must be >= 1, got 0" in text
    assert "outputs.latency_csv.colour: unknown key; allowed: path, every" in text
    # defaults: `true` enables the exporter with every default; `false` leaves it off
    dep = load_deployment(_deployment(tmp_path, {"latency_csv": True}))
    assert dict(dep.outputs.exporters["latency_csv"]) == {"path": "e2e.csv", "every": 1}
    assert "latency_csv" not in load_deployment(_deployment(tmp_path, {"latency_csv": False})).outputs.exporters


def test_every_option_reaches_the_exporter(tmp_path):
    path = _deployment(tmp_path, {"latency_csv": {"path": str(tmp_path / "abs.csv"), "every": 4}}, frames=9)
    result = Runner(load_deployment(path)).run()
    assert result.outputs["latency_csv"] == str(tmp_path / "abs.csv")
    assert [int(r["set"]) for r in _rows(tmp_path / "abs.csv")] == [0, 4, 8]


def test_an_exporter_key_without_its_plugin_is_an_unknown_key():
    d = synthetic_deployment(1, outputs={"metrics": False, "no_such_exporter": {}})
    with pytest.raises(DeploymentError, match=r"outputs.no_such_exporter: unknown key; allowed: dir, metrics, trace"):
        load_deployment(d)


def test_the_built_in_outputs_are_registered_exporters_in_one_table(tmp_path):
    assert list(EXPORTERS)[:7] == ["summary", "latency", "trace", "plots", "dumps", "prometheus", "report"]
    assert output_keys()[:7] == ("dir", "metrics", "trace_max_events", "trace", "plots", "dumps", "prometheus")
    d = synthetic_deployment(2, frames=4, outputs={"dir": str(tmp_path), "metrics": True, "trace": True,
                                                   "dumps": {"every": 2, "max": 5}})
    runner = Runner(load_deployment(d))
    assert list(runner.exporters) == ["summary", "latency", "trace", "dumps"]
    result = runner.run()
    assert {k: Path(v).name for k, v in result.outputs.items()} == {
        "summary": "summary.json", "latency": "latency.json", "trace": "trace.json", "dumps": "dumps"}
    assert sorted(p.name for p in (tmp_path / "dumps").iterdir()) == [
        "set_000000.json", "set_000000.npz", "set_000002.json", "set_000002.npz"]
    # write_outputs=False opens no exporter that writes files
    assert Runner(load_deployment(d), write_outputs=False).exporters == {}


@pytest.mark.parametrize("outputs, problem", [
    ({"dumps": {"every": 2, "colour": 1}}, "outputs.dumps.colour: unknown key; allowed: every, max"),
    ({"dumps": {"every": 0}}, "outputs.dumps.every: must be >= 1, got 0"),
    ({"prometheus": {"addr": "127.0.0.1"}}, "outputs.prometheus.port: required"),
    ({"prometheus": 70000}, "outputs.prometheus.port: must be <= 65535, got 70000"),
    ({"trace": 5}, "outputs.trace: expected true, false or a path, got 5"),
    ({"plots": {"path": ""}}, "outputs.plots.path: expected a non-empty string, got ''"),
])
def test_the_built_ins_keys_are_their_options_checked_by_the_same_validator(outputs, problem):
    with pytest.raises(DeploymentError) as e:
        load_deployment(synthetic_deployment(1, outputs=dict({"metrics": False}, **outputs)))
    assert problem in str(e.value)


def test_the_built_ins_short_forms_become_their_options_like_any_exporters(tmp_path):
    o = load_deployment(synthetic_deployment(1, outputs={"dir": str(tmp_path), "trace": True, "plots": "p",
                                                         "dumps": True, "prometheus": 9108})).outputs
    assert {k: dict(v) for k, v in o.exporters.items()} == {
        "trace": {"path": "trace.json", "max_events": 50_000}, "plots": {"path": "p"},
        "dumps": {"every": 1, "max": 10}, "prometheus": {"port": 9108, "addr": "127.0.0.1"}}
    o = load_deployment(synthetic_deployment(1, outputs={"dir": str(tmp_path), "trace": {"path": "/x/t.json"},
                                                         "prometheus": {"port": 9, "addr": "0.0.0.0"}})).outputs
    assert dict(o.exporters["trace"])["path"] == "/x/t.json" and dict(o.exporters["prometheus"])["addr"] == "0.0.0.0"
    assert set(o.exporters) == {"trace", "prometheus"}


def test_a_failing_exporter_is_reported_and_the_others_still_write(tmp_path):
    @register_exporter("broken_for_test")
    class Broken(Exporter):
        def close(self, result):
            raise OSError("disk full")

    try:
        d = synthetic_deployment(1, frames=3, outputs={"dir": str(tmp_path), "metrics": True, "broken_for_test": {}})
        result = Runner(load_deployment(d)).run()
        assert result.outputs["broken_for_test"] == "not written: OSError: disk full"
        assert json.loads((tmp_path / "summary.json").read_text())["sets"] == 3
    finally:
        del EXPORTERS["broken_for_test"]


def test_an_exporter_whose_observe_raises_is_stopped_and_reported_the_run_goes_on(tmp_path):
    seen = []

    @register_exporter("flaky_for_test")
    class Flaky(Exporter):
        def observe(self, result):
            seen.append(result.index)
            if result.index == 1:
                raise ValueError("bad row")

        def close(self, result):
            raise AssertionError("a stopped exporter is not closed")

    try:
        d = synthetic_deployment(1, frames=5, outputs={"dir": str(tmp_path), "metrics": True, "flaky_for_test": {}})
        result = Runner(load_deployment(d)).run()
    finally:
        del EXPORTERS["flaky_for_test"]
    assert seen == [0, 1] and result.sets == 5 and result.accounting.check() == []
    assert result.outputs["flaky_for_test"] == "not written: observe failed on frame set 1: ValueError: bad row"
    assert json.loads((tmp_path / "summary.json").read_text())["exporters"]["summary"]["observe_calls"] == 5


def test_the_reference_table_lists_every_exporter_and_key():
    from dvpipe.deploy.exporters import markdown_reference

    text = markdown_reference()
    for name in EXPORTERS:
        assert f"| `{name}` |" in text
    assert "| `outputs.dumps.every` | integer >= 1 and <= 1e12 | 1 |" in text
    assert "| `outputs.prometheus.port` | integer >= 1 and <= 65535 | required |" in text


def test_names_are_checked_at_registration():
    class Other(Exporter):
        pass

    with pytest.raises(ConfigError, match="exporter 'trace' is already registered by dvpipe.deploy._builtin_exporters"):
        register_exporter("trace")(Other)
    with pytest.raises(ConfigError, match="exporter name 'metrics' is already an outputs key"):
        register_exporter("metrics")(Other)
    with pytest.raises(ConfigError, match="an exporter name is a lower-case name"):
        register_exporter("Bad Name")
    with pytest.raises(TypeError, match="decorates a dvpipe Exporter subclass"):
        register_exporter("not_an_exporter")(dict)
    assert "not_an_exporter" not in EXPORTERS


def test_the_runner_decides_with_its_injected_clock():
    """``run.duration_s: 3600`` ends the run when the runner's clock says an hour has passed (here:
    the clock jumps by an hour after the third set), however little real time went by."""
    jump = {"ns": 0}

    def clock() -> int:
        return now_ns() + jump["ns"]

    def progress(runner) -> None:
        if runner.sets_done == 3:
            jump["ns"] = 3600 * 10**9 + 1

    d = synthetic_deployment(1, frames=None, run={"duration_s": 3600})
    result = Runner(load_deployment(d), clock=clock, progress=progress, write_outputs=False).run()
    assert result.stopped_by == "--duration 3600 s"
    assert 3 <= result.sets <= 4  # the set on the model thread when the clock jumped may still complete
    assert result.elapsed_s > 3600
