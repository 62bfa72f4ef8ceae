"""tools/ascend_smoke.py against the software DVPP device: it passes on the four CI targets and fails when a
DVPP unit fails (``--inject-fault``), so that on a device it cannot pass on a silent fallback.

The four CI targets are dvpipe.backends.dvpp.testing.CI_TARGETS (docs/dvpp.md, "Plans on the four CI
targets"). Nothing here runs on Ascend hardware.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from dvpipe.backends.dvpp.testing import CI_TARGETS

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("av")


def _smoke():
    spec = importlib.util.spec_from_file_location("ascend_smoke", ROOT / "tools" / "ascend_smoke.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


smoke = _smoke()


def _run(tmp_path, soc, cann, *extra):
    out = tmp_path / f"{soc}-{'-'.join(extra) or 'clean'}.json"
    rc = smoke.main(["--sim", soc, cann, "--quick", "--frames", "1", "--cache", str(tmp_path / "live.json"),
                     "--json", str(out), *extra])
    return rc, json.loads(out.read_text())


@pytest.mark.parametrize("soc, cann", CI_TARGETS)
def test_smoke_passes_on_the_software_device_for_every_ci_target(tmp_path, soc, cann):
    # the live-probe pass (run_live over the sample rig) on the first target only, to keep CI short
    rc, report = _run(tmp_path, soc, cann, *(() if soc == CI_TARGETS[0][0] else ("--no-cache",)))
    assert rc == 0, report["failures"]
    assert report["failures"] == [] and report["device"] == "dvpp-sim"
    names = [c["check"] for c in report["checks"]]
    assert sum("vdec kernel" in n for n in names) == 3  # with and without B-frames, plain units
    if soc == CI_TARGETS[0][0]:
        assert report["cache"]["steps"] and all(st["ok"] for st in report["cache"]["steps"])
    teardown = report["checks"][-1]
    assert teardown["check"].startswith("teardown") and not any(teardown["ledger"].values())


@pytest.mark.parametrize("unit, words", [("jpegd", "every JPEGD call fails"), ("vpc", "every VPC call fails"),
                                         ("vdec", "every VDEC call fails")])
def test_smoke_fails_when_a_dvpp_unit_fails(tmp_path, unit, words):
    """Every call of the unit fails: the steps fall back to the CPU at run time, whose output still matches;
    the smoke test must see the fallbacks and exit 1, and still tear down without a leak."""
    rc, report = _run(tmp_path, "Ascend310", "6.0.1", "--no-cache", "--inject-fault", unit)
    assert rc == 1 and report["injected_fault"] == unit
    assert any("runtime fallback" in f and words in f for f in report["failures"]), report["failures"][:3]
    assert not report["checks"][-1]["errors"]  # teardown after the faults: nothing left alive


def test_a_step_planned_off_dvpp_without_a_documented_rejection_is_a_failure():
    class V:
        def __init__(self, status, rule):
            self.status, self.rule, self.reason = status, rule, "why"

    class Step:
        name = "decode"

        class backend:
            name = "cpu"

        def __init__(self, v, name="dvpp"):
            self.verdicts = [(name, v)]

    assert smoke._planned_elsewhere(Step(V("rejected", "jpegd.bitstream")), "dvpp", True) is None
    assert smoke._planned_elsewhere(Step(V("unknown", "a3.dvpp.before_8_2"), "dvpp-sim"), "dvpp-sim", False) is None
    assert "did not settle" in smoke._planned_elsewhere(Step(V("unknown", "a3.dvpp.before_8_2")), "dvpp", True)
    assert "without a documented rejection" in smoke._planned_elsewhere(Step(V("unavailable", None)), "dvpp", True)
