"""`dvpipe bench`: one deployment, several backend plans side by side, deviation from the reference."""
from __future__ import annotations

import re

import yaml

from dvpipe.cli import main as cli_main
from dvpipe.testing.deployments import synthetic_deployment
from tolerances import tol


def _write(tmp_path, **kw):
    dep = synthetic_deployment(2, frames=None, **kw)
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(dep))
    return str(path)


def test_bench_compares_plans_and_reports_deviation(tmp_path, capsys):
    path = _write(tmp_path)
    rc = cli_main(["bench", path, "--backends", "cpu,dvpp-sim", "--soc", "Ascend310P3", "--cann", "7.0.0",
                   "--fidelity", "fast", "--frames", "4", "--reference-sets", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "cpu p50" in out and "dvpp-sim p50" in out
    sim_plan = out.split("\ndvpp-sim:")[1].split("\n\n")[0]
    assert re.search(r"CAM0.*\sdecode\s+dvpp-sim\s", sim_plan), sim_plan  # the plan offloads decode
    dev = out.split("deviation from the reference backend")[1].splitlines()
    cpu_row = next(line for line in dev if line.strip().startswith("cpu "))
    sim_row = next(line for line in dev if line.strip().startswith("dvpp-sim"))
    cpu_mean, sim_mean = float(cpu_row.split()[-4]), float(sim_row.split()[-4])
    # the CPU plan is the reference pipeline within float rounding; DVPP's NV12 round trip is not
    assert cpu_mean < tol("bench_mean_deviation", "fast", "cpu").atol < sim_mean
    assert sim_mean < tol("bench_mean_deviation", "fast", "dvpp").atol
    assert "not DVPP hardware" in out


def test_bench_dvpp_without_target_says_what_to_pass(tmp_path, capsys):
    path = _write(tmp_path)
    rc = cli_main(["bench", path, "--backends", "dvpp-sim", "--frames", "2"])
    assert rc == 2
    assert "--soc and --cann" in capsys.readouterr().err


def test_bench_checks_every_backend_name_before_running_any(tmp_path, capsys):
    path = _write(tmp_path)
    rc = cli_main(["bench", path, "--backends", "cpu,torch:cpu,dvp-sim", "--frames", "2"])
    captured = capsys.readouterr()
    assert rc == 2
    assert "--backends[2]: unknown backend 'dvp-sim'" in captured.err
    assert "latency per step" not in captured.out  # nothing was benchmarked first


def test_bench_checks_the_percentile_columns_before_running_any(tmp_path, capsys):
    path = _write(tmp_path)
    rc = cli_main(["bench", path, "--backends", "cpu", "--frames", "2", "--percentiles", "p50,p77"])
    captured = capsys.readouterr()
    assert rc == 2
    assert "Invalid percentile ('p77')" in captured.err
    assert "deployment " not in captured.out and "[" not in captured.err  # no plan ran, no progress line
