"""Per-camera backend preferences are a planner argument (``camera_backends``): one plan, one pipeline, one
batch written in place by every camera's own steps (issue 31; before, a deployment wrapped one pipeline per
preference and copied their batches into a combined one)."""
from __future__ import annotations

import numpy as np
import pytest

import dvpipe as dv
from conftest import encode_jpeg, rig_dict, textured_bgr
from dvpipe.planner import plan_pipeline

STAGES = [dv.Decode(), dv.Resize(size=(48, 64)), dv.Normalise(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375),
                                                               to_rgb=True)]


def _rig(n=3):
    return dv.Rig.from_dict(rig_dict([(96, 72)] * n))


def _frames(rig):
    return {c.name: encode_jpeg(textured_bgr(96, 72, seed=k)) for k, c in enumerate(rig)}


def test_a_camera_with_its_own_backends_is_planned_on_them_and_the_others_on_the_pipeline_backends():
    rig = _rig()
    plan = plan_pipeline(rig.cameras, STAGES, ("cpu",), camera_backends={"CAM1": ("reference", "cpu")})
    assert [(cp.camera.name, cp.backends, {s.backend.name for s in cp.steps}) for cp in plan.cameras] == [
        ("CAM0", ("cpu",), {"cpu"}), ("CAM1", ("reference", "cpu"), {"reference"}), ("CAM2", ("cpu",), {"cpu"})]
    # CAM1's fallback is planned on its own order: cpu after reference
    assert all(f.backend.name == "cpu" for s in plan.cameras[1].steps for f in s.fallback)
    assert plan.backends == ("cpu",)
    assert [c["backends"] for c in plan.to_dict()["cameras"]] == [["cpu"], ["reference", "cpu"], ["cpu"]]
    lines = str(plan).splitlines()
    assert lines[1] == "  cameras CAM1: backends reference > cpu"
    # a camera planned differently is its own group of rows in the table (never "alike" with the others)
    assert sum(line.lstrip().startswith("CAM1 ") for line in lines) == 1


def test_one_pipeline_with_a_camera_preference_gives_the_batch_of_separate_pipelines_without_a_copy():
    """Independent reference: two plain pipelines on the split rigs, each with one preference order."""
    rig = _rig()
    frames = _frames(rig)
    with dv.Pipeline(rig, STAGES, ("cpu",), camera_backends={"CAM1": ("reference",)}) as pipe:
        batch = pipe.process(frames)
        # the cameras' steps wrote the pipeline's own output buffer: no combined buffer, no copy
        assert any(np.shares_memory(batch.images, buf) for buf in pipe._buffers)
        images = np.array(batch.images, copy=True)
    assert batch.valid.all() and list(batch.cameras) == ["CAM0", "CAM1", "CAM2"]
    cpu_rig = dv.Rig(tuple(c for c in rig.cameras if c.name != "CAM1"))
    ref_rig = dv.Rig(tuple(c for c in rig.cameras if c.name == "CAM1"))
    with dv.Pipeline(cpu_rig, STAGES, ("cpu",)) as cpu, dv.Pipeline(ref_rig, STAGES, ("reference",)) as ref:
        on_cpu = cpu.process({n: frames[n] for n in cpu_rig.names})
        on_ref = ref.process({n: frames[n] for n in ref_rig.names})
    np.testing.assert_array_equal(images[[0, 2]], on_cpu.images)
    np.testing.assert_array_equal(images[1], on_ref.images[0])
    # and the two backends really differ on this input (else the test could not tell who ran CAM1)
    with dv.Pipeline(ref_rig, STAGES, ("cpu",)) as cpu1:
        assert not np.array_equal(cpu1.process({"CAM1": frames["CAM1"]}).images[0], on_ref.images[0])


def test_camera_backends_naming_no_camera_of_the_rig_is_a_config_error():
    with pytest.raises(dv.ConfigError, match=r"^camera_backends names CAM9, not a camera of the rig \(CAM0, CAM1, CAM2\)$"):
        dv.Pipeline(_rig(), STAGES, ("cpu",), camera_backends={"CAM9": ("reference",)})
    with pytest.raises(dv.ConfigError, match=r"camera_backends\['CAM1'\] must name at least one backend"):
        plan_pipeline(_rig().cameras, STAGES, ("cpu",), camera_backends={"CAM1": ()})


def test_a_batch_family_that_cannot_serve_mixed_cameras_is_declined_for_all_with_the_reason():
    """The AIPP route writes one per-batch device buffer for every camera: with one camera on its own host-only
    order, the route is declined (a verdict naming that camera) and every camera meets in the host batch."""
    rig = dv.Rig.from_dict(rig_dict([(320, 240)] * 2))
    stages = [dv.Decode(), dv.Resize(size=(120, 160)), dv.Normalise(mean=(123.675, 116.28, 103.53),
              std=(58.395, 57.12, 57.375), to_rgb=True), dv.Pad(size_divisor=32), dv.Batch()]
    target = dv.Target("Ascend310P3", "6.0.1")
    aipp = ("dvpp-sim", "aipp-sim", "cpu")
    alone = plan_pipeline(rig.cameras, stages, aipp, fidelity="fast", target=target)
    assert alone.device_batch is not None and {cp.route for cp in alone.cameras} == {"aipp"}
    plan = plan_pipeline(rig.cameras, stages, aipp, fidelity="fast", target=target, camera_backends={"CAM1": ("cpu",)})
    assert plan.device_batch is None and plan.out_placement == "host"
    assert [s.backend.name for s in plan.cameras[1].steps] == ["cpu"] * len(plan.cameras[1].steps)
    last = plan.cameras[0].steps[-1]
    v = dict(last.verdicts)["aipp-sim"]
    assert last.backend.name == "cpu" and v.status == "declined"
    assert "camera CAM1" in v.reason and "one placement" in v.reason
