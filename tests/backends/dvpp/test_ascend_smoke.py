"""tools/ascend_smoke.py against the software DVPP device: its default (full) mode passes on every CI target
(and on an Atlas A3 target whose CANN documents DVPP), and it fails when a unit fails (``--inject-fault``), so
that on a device it cannot pass on a silent fallback.

The CI targets are dvpipe.testing.dvpp.CI_TARGETS (docs/dvpp.md, "Plans on the four CI targets"). CI
runs this file (``make test``), so CI runs the smoke test's default mode. Nothing here runs on Ascend hardware.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from dvpipe.testing.dvpp import CI_TARGETS

ROOT = Path(__file__).resolve().parents[3]
pytest.importorskip("av")

#: the CI targets plus Atlas A3 at a CANN whose pages document its DVPP (8.2 on; the CI A3 target is 8.1.RC1)
TARGETS = (*CI_TARGETS, ("Ascend910_9391", "8.5.0"))


def _smoke():
    spec = importlib.util.spec_from_file_location("ascend_smoke", ROOT / "tools" / "ascend_smoke.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


smoke = _smoke()


def _run(tmp_path, soc, cann, *extra):
    out = tmp_path / f"{soc}-{'-'.join(extra) or 'clean'}.json"
    rc = smoke.main(["--sim", soc, cann, "--frames", "1", "--cache", str(tmp_path / "live.json"),
                     "--json", str(out), *extra])
    return rc, json.loads(out.read_text())


def test_ci_targets_include_atlas_a3():
    assert any(soc.startswith("Ascend910_93") for soc, _ in CI_TARGETS)


@pytest.mark.parametrize("soc, cann", TARGETS)
def test_smoke_default_mode_passes_on_the_software_device(tmp_path, soc, cann):
    """The default mode: the bevformer-tiny batch, the KITTI odd-height checks, VDEC, the AIPP route and the model
    check, with the live probe first (its cache is what the checks plan with)."""
    rc, report = _run(tmp_path, soc, cann)
    assert rc == 0, report["failures"]
    assert report["failures"] == [] and report["device"] == "dvpp-sim"
    names = [c["check"] for c in report["checks"]]
    assert sum("vdec kernel" in n for n in names) == 3  # with and without B-frames, plain units
    assert any("KITTI 1242x375" in n for n in names) and any("bevformer-tiny batch" in n for n in names)
    cache = report["cache"]
    assert "path" in cache and all(st["ok"] for st in cache["steps"])
    on_dvpp = any(c.get("runs_on") == "dvpp-sim" for c in report["checks"] if c["check"].startswith("jpegd"))
    assert bool(cache["steps"]) == on_dvpp  # the live probe (JPEG rigs) measured what the docs let JPEGD run
    assert all(c["planned_with_live_cache"] for c in report["checks"] if "planned_with_live_cache" in c)
    model = next(c for c in report["checks"] if c["check"].startswith("model:"))
    # every camera's model input, static and dynamic AIPP, within the CSC/fp16 bound of the float reference
    bound = 2 / 57.12 + 0.004
    assert set(model["max_abs_per_camera"]) == {"static", "dynamic"}
    for errs in model["max_abs_per_camera"].values():
        assert len(errs) == 6 and max(errs) <= bound
    assert model["layout"]["slot_pitch"] > model["layout"]["slot_bytes"]  # the pictures are not back to back
    teardown = report["checks"][-1]
    assert teardown["check"].startswith("teardown") and not any(teardown["ledger"].values())


@pytest.mark.parametrize("unit, words", [("jpegd", "every JPEGD call fails"), ("vpc", "every VPC call fails"),
                                         ("vdec", "every VDEC call fails"), ("mdl", "every acl.mdl call fails")])
def test_smoke_fails_when_a_unit_fails(tmp_path, unit, words):
    """Every call of the unit fails: DVPP steps fall back to the CPU at run time, whose output still matches, and
    the model cannot load; the smoke test must see it and exit 1, and still tear down without a leak."""
    rc, report = _run(tmp_path, "Ascend310", "6.0.1", "--quick", "--no-cache", "--inject-fault", unit)
    assert rc == 1 and report["injected_fault"] == unit
    assert any(words in f for f in report["failures"]), report["failures"][:3]
    if unit != "mdl":
        assert any("runtime fallback" in f and words in f for f in report["failures"])
    assert not report["checks"][-1]["errors"]  # teardown after the faults: nothing left alive


def test_model_check_sees_a_camera_read_from_the_wrong_place(monkeypatch):
    """The model check compares every camera, not only camera 0: feed camera 1 camera 0's picture through a model
    that swaps them back, and the check must name camera 1."""
    import dvpipe as dv
    from dvpipe.testing.dvpp import sample_frame_sets
    from dvpipe.models import sim_model as real_sim_model

    def swapped(fn, **kw):
        return real_sim_model(lambda x: x[[1, 0, *range(2, x.shape[0])]], **kw)

    monkeypatch.setattr("dvpipe.models.sim_model", swapped)
    rig = dv.Rig.from_yaml(ROOT / "samples" / "rig.yaml")
    rec = smoke.check_model(rig, sample_frame_sets(rig, count=1), "dvpp-sim", dv.Target("Ascend310P3", "7.0.0"), {})
    assert any("camera 1 (" in e for e in rec["errors"]) and any("camera 0 (" in e for e in rec["errors"])


def test_write_aipp_cfg_round_trips(tmp_path):
    from dvpipe.backends.dvpp.aipp import AippConfig

    out = tmp_path / "smoke-aipp.cfg"
    assert smoke.main(["--write-aipp-cfg", str(out)]) == 0
    cfg = AippConfig.from_cfg(out.read_text())
    assert cfg.output_hw == smoke.MODEL_INPUT_HW and (cfg.src_image_size_w, cfg.src_image_size_h) == smoke.MODEL_STRIDE


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
    # dvpipe's policy on a documented effect (JPEGD floors KITTI's 375 rows; the batch would change): not a failure
    assert smoke._planned_elsewhere(Step(V("declined", "jpegd.v1.odd_floor")), "dvpp", True) is None
    assert "did not settle" in smoke._planned_elsewhere(Step(V("unknown", "a3.dvpp.before_8_2")), "dvpp", True)
    assert "without a documented rejection" in smoke._planned_elsewhere(Step(V("unavailable", None)), "dvpp", True)
    assert "without a documented rejection" in smoke._planned_elsewhere(Step(V("declined", None)), "dvpp", True)
