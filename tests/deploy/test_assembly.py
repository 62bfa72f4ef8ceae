"""One assembly path (issue 31): a deployment's pipeline is built by the constructors a Python user
calls (``Pipeline.from_profile``, ``Pipeline.from_mmdet3d_config``), an mmdet3d config is read once
(at load), and the one-size rule of a profile is one function with one message."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import dvpipe as dv
from dvpipe.deploy import Runner, load_deployment
from dvpipe.deploy.config import DeploymentError
from dvpipe.testing.deployments import synthetic_deployment, tiny_rig
from dvpipe.pipeline import Pipeline
from conftest import camera_folders, rig_dict
from tolerances import tol

CONFIGS = Path(__file__).parents[1] / "data" / "mmdet3d_configs"


def _spy(monkeypatch, name: str) -> list:
    """Record the calls of ``Pipeline.<name>`` (a classmethod) and still make them."""
    calls: list = []
    original = getattr(Pipeline, name).__func__

    def spy(cls, *args, **kwargs):
        calls.append((args, kwargs))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(Pipeline, name, classmethod(spy))
    return calls


def test_a_profile_deployment_is_built_by_pipeline_from_profile(monkeypatch):
    calls = _spy(monkeypatch, "from_profile")
    d = synthetic_deployment(2, width=96, height=64, frames=1)
    d["pipeline"] = {"profile": "bevformer-tiny", "backends": ["cpu"]}
    runner = Runner(load_deployment(d), write_outputs=False)
    runner.finish()
    assert len(calls) == 1 and calls[0][0][0] == "bevformer-tiny" and calls[0][0][2] == ("cpu",)
    # what a user builds by hand is what the deployment runs
    by_hand = Pipeline.from_profile("bevformer-tiny", runner.pipe.rig, ("cpu",))
    assert runner.pipe.plan.to_dict()["cameras"] == by_hand.plan.to_dict()["cameras"]


def test_an_mmdet3d_config_is_read_at_load_only(tmp_path, monkeypatch):
    """The config files are removed after loading: the runner builds from what was read."""
    calls = _spy(monkeypatch, "from_mmdet3d_config")
    configs = tmp_path / "configs"
    shutil.copytree(CONFIGS, configs)
    rig = rig_dict([(641, 359)] * 2)
    frames = camera_folders(tmp_path, rig)
    dep = load_deployment({
        "name": "mm", "rig": rig,
        "pipeline": {"mmdet3d_config": str(configs / "bevformer" / "bevformer_tiny.py"), "backends": ["cpu"]},
        "cameras": [{"name": c["name"], "source": {"type": "images", "uri": str(tmp_path / c["name"])}}
                    for c in rig["cameras"]],
        "outputs": {"metrics": False}})
    shutil.rmtree(configs)
    r = Runner(dep, write_outputs=False)
    (rb,) = list(r.batches())
    r.finish()
    assert len(calls) == 1
    # the same batch as the Python API given the config file itself
    by_hand = Pipeline.from_mmdet3d_config(CONFIGS / "bevformer" / "bevformer_tiny.py", dep.rig, ("cpu",))
    ref = by_hand.process({c.name: frames[c.name] for c in dep.rig.cameras})
    assert rb.batch.valid.all() and np.array_equal(np.asarray(rb.batch.images), np.asarray(ref.images))


def test_the_one_size_rule_says_the_same_at_load_and_in_the_python_api():
    rig = tiny_rig(2)
    rig["cameras"][1].update(width=128, height=64)
    d = synthetic_deployment(2, frames=1)
    d["rig"] = rig
    d["pipeline"] = {"profile": "bevformer-tiny", "backends": ["cpu"]}
    with pytest.raises(DeploymentError) as at_load:
        load_deployment(d)
    with pytest.raises(dv.ConfigError) as in_python:
        Pipeline.from_profile("bevformer-tiny", dv.Rig.from_dict(rig))
    expected = ("profile bevformer-tiny needs every camera at one size; the rig mixes CAM0 96x64, CAM1 128x64 "
                "(use a stage list with resize/pad to one size)")
    assert str(in_python.value) == expected
    assert at_load.value.errors == [("pipeline.profile", expected)]


def test_cameras_with_their_own_backends_under_an_mmdet3d_config_give_one_pipeline_and_the_same_batch(tmp_path,
                                                                                                     monkeypatch):
    """A camera with its own backend preference: one pipeline from the config (``camera_backends`` handed to
    ``Pipeline.from_mmdet3d_config``), the camera planned on its own order, and the same images as the
    whole rig on one preference."""
    calls = _spy(monkeypatch, "from_mmdet3d_config")
    rig = rig_dict([(641, 359)] * 2)
    frames = camera_folders(tmp_path, rig)

    def batch(second_camera_backends):
        cams = [{"name": c["name"], "source": {"type": "images", "uri": str(tmp_path / c["name"])}}
                for c in rig["cameras"]]
        if second_camera_backends:
            cams[1]["backends"] = second_camera_backends
        dep = load_deployment({"name": "mm", "rig": rig, "cameras": cams, "outputs": {"metrics": False},
                               "pipeline": {"mmdet3d_config": str(CONFIGS / "bevformer" / "bevformer_tiny.py"),
                                            "backends": ["cpu"]}})
        r = Runner(dep, write_outputs=False)
        (rb,) = list(r.batches())
        r.finish()
        plan = r.pipe.plan.to_dict()
        return (type(r.pipe).__name__, [(c["name"], c["backends"], c["steps"][0]["backend"]) for c in plan["cameras"]],
                np.array(rb.batch.images, copy=True), rb.batch.valid.copy())

    kind1, prefs1, one, valid1 = batch(None)
    kind2, prefs2, mixed, valid2 = batch(["reference", "cpu"])
    assert (kind1, kind2) == ("Pipeline", "Pipeline") and len(calls) == 2
    assert calls[0][1]["camera_backends"] is None and calls[1][1]["camera_backends"] == {"CAM1": ("reference", "cpu")}
    assert prefs1 == [("CAM0", ["cpu"], "cpu"), ("CAM1", ["cpu"], "cpu")]
    assert prefs2 == [("CAM0", ["cpu"], "cpu"), ("CAM1", ["reference", "cpu"], "reference")]
    assert valid1.all() and valid2.all()
    np.testing.assert_allclose(mixed, one, **tol("float_path").allclose)


@pytest.mark.parametrize("encoding,profile", [("jpeg", None), ("h264", None), ("h264", "bevformer-tiny")])
def test_a_step_budget_on_a_name_no_run_records_is_noted_before_the_run(encoding, profile):
    """A budget names a span; the end of a run said so when none of that name was recorded. Reference: the
    runs themselves -- every span they record (with a model hook) is a plan step or a listed run span, so
    none of their names is noted, and the keys they never record are noted before the run, with the typo's
    step."""
    from dvpipe.deploy._assembly import step_budget_notes

    d = synthetic_deployment(2, width=96, height=64, encoding=encoding, frames=6, fps=60.0)
    if profile:
        d["pipeline"] = {"profile": profile, "backends": ["cpu"], "fidelity": "fast"}
    dep = load_deployment(d)
    runner = Runner(dep, model=lambda batch: None, write_outputs=False)
    runner.run()
    recorded = list(runner.stats.step_names)
    steps = {s.name for cp in runner.pipe.plan.cameras for s in cp.steps}
    assert {"model", "queue_wait"} | steps <= set(recorded)
    d["latency"] = {"steps_ms": {**{name: 50 for name in recorded}, "queue_wiat": 5, "nosuch": 5}}
    dep = load_deployment(d)
    notes = step_budget_notes(dep, runner.pipe.plan)
    assert [n.split(":")[0] for n in notes] == ["latency.steps_ms.queue_wiat", "latency.steps_ms.nosuch"]
    assert "(did you mean queue_wait?)" in notes[0] and "did you mean" not in notes[1]
    runner = Runner(dep, model=lambda batch: None, write_outputs=False)
    assert runner.budget_notes == notes
    runner.finish()
