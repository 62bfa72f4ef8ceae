"""Stages registered once: a user's stage from a file outside the package (one file, one decorator per
thing) planned from Python and from a deployment YAML; the registry drives the YAML names, the exports and
the kernel listing; fused runs come from a declaration; old one-argument user stages still plan."""
from __future__ import annotations

import importlib
import sys
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
import yaml

import dvpipe as dv
from dvpipe.deploy import DeploymentError, load_deployment
from dvpipe.deploy.config import _stage_table
from dvpipe.testing.deployments import tiny_rig
from dvpipe.errors import ConfigError
from dvpipe.stages import fused_runs, kernels_by_backend, registered_stages
from dvpipe.stages.kernel_registry import all_kernels

# A stage as a user writes it: one file; nothing in dvpipe changed.
PLUGIN = '''
from dataclasses import dataclass

import numpy as np

import dvpipe


@dvpipe.register_stage("gamma_t", yaml=("gamma_t", "gamma_curve"))
@dataclass(frozen=True)
class GammaT(dvpipe.Stage):
    """out = 255 * (in / 255) ** (1 / gamma), uint8 BGR in and out."""
    gamma: float = 2.2

    def output_spec(self, spec, camera):
        if spec.dtype != "uint8":
            raise dvpipe.ConfigError("GammaT takes uint8 pixels; put it before Normalise")
        return spec


@dvpipe.register_kernel("gamma_t", backend="cpu")
def gamma_lut(data, stages, ctx):
    (st,) = stages
    lut = np.clip(np.round(255.0 * (np.arange(256) / 255.0) ** (1.0 / st.gamma)), 0, 255).astype(np.uint8)
    return lut[data]


@dvpipe.register_kernel("gamma_t", backend="reference")
def gamma_float(data, stages, ctx):
    (st,) = stages
    return np.clip(np.round(255.0 * (data / 255.0) ** (1.0 / st.gamma)), 0, 255).astype(np.uint8)
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin_root")
    pkg = root / "mystages_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(PLUGIN)
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("mystages_pkg.mod")
    finally:
        sys.path.remove(str(root))


def _gamma_expected(img: np.ndarray, gamma: float) -> np.ndarray:
    # the formula, written here again: the test's own reference
    return np.clip(np.round(255.0 * (img.astype(np.float64) / 255.0) ** (1.0 / gamma)), 0, 255).astype(np.uint8)


def _rig() -> dv.Rig:
    return dv.Rig.from_dict({"cameras": [{"name": "c0", "width": 16, "height": 8, "encoding": "raw"},
                                         {"name": "c1", "width": 16, "height": 8, "encoding": "raw"}]})


def test_a_user_stage_from_outside_the_package_plans_and_runs_from_python(plugin):
    assert dv.GammaT is plugin.GammaT and dv.stages.GammaT is plugin.GammaT  # the exports read the registry
    info = registered_stages()["gamma_t"]
    assert info.cls is plugin.GammaT and info.yaml == ("gamma_t", "gamma_curve")
    assert kernels_by_backend("gamma_t") == {"cpu": [("gamma_t",)], "reference": [("gamma_t",)]}
    img = np.random.default_rng(3).integers(0, 256, (8, 16, 3), dtype=np.uint8)
    for backends, kernel in (("cpu", "gamma_lut"), ("reference", "gamma_float")):
        pipe = dv.Pipeline(_rig(), [dv.Decode(), plugin.GammaT(gamma=1.8)], backends)
        step = pipe.plan.cameras[0].steps[1]
        assert (step.name, step.kernel.name) == ("gamma_t", kernel)
        out = np.asarray(pipe.process({"c0": img, "c1": img}).images)
        assert np.array_equal(out[1], _gamma_expected(img, 1.8).transpose(2, 0, 1))
    with pytest.raises(ConfigError, match="GammaT takes uint8 pixels"):
        dv.Pipeline(_rig(), [dv.Decode(), dv.Normalise(), plugin.GammaT()], "cpu")


@pytest.mark.parametrize("entry", ["gamma_curve", "mystages_pkg.mod:GammaT"])
def test_a_user_stage_from_a_deployment_yaml(plugin, tmp_path, entry):
    dep = {"name": "g", "rig": tiny_rig(2, 32, 16, "png"),
           "pipeline": {"stages": ["decode", {entry: {"gamma": 2.2}}], "backends": ["cpu"]},
           "source": {"type": "synthetic"}, "outputs": {"dir": str(tmp_path / "out")}}
    if ":" not in entry:
        dep["plugins"] = ["mystages_pkg.mod"]  # a registered YAML name needs its module imported
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(dep))
    d = load_deployment(path)
    assert d.pipeline.stages == (dv.Decode(), plugin.GammaT(gamma=2.2))


def test_an_unknown_stage_name_lists_the_registered_ones(tmp_path):
    dep = {"name": "g", "rig": tiny_rig(1, 32, 16, "png"),
           "pipeline": {"stages": ["decode", {"gama": {"gamma": 2.2}}], "backends": ["cpu"]},
           "source": {"type": "synthetic"}, "outputs": {"dir": str(tmp_path / "out")}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(dep))
    with pytest.raises(DeploymentError) as e:
        load_deployment(path)
    (msg,) = [m for k, m in e.value.errors if k == "pipeline.stages[1]"]
    assert msg.startswith("unknown stage 'gama'; known: ") and "undistort" in msg and "normalize" in msg
    assert "\n" not in msg


def test_the_yaml_table_is_the_registry():
    table = _stage_table()
    assert table["normalise"] is dv.Normalise and table["normalize"] is dv.Normalise
    assert table["undistort"] is dv.Undistort and table["resize"] is dv.Resize
    assert "transfer" not in table  # the planner places transfers; no YAML name
    for op, info in registered_stages().items():
        assert info.cls.op == op
        for name in info.yaml:
            assert table[name] is info.cls


def test_every_kernel_runs_registered_stages():
    import dvpipe.backends.cpu  # noqa: F401 - registers the kernels
    import dvpipe.backends.numpy_ref  # noqa: F401

    ops = set(registered_stages())
    own = [k for k in all_kernels() if getattr(k.fn, "__module__", "").startswith("dvpipe.")]  # not other tests' toys
    missing = {(k.family, k.name, op) for k in own for op in k.ops if op not in ops}
    assert not missing
    # every built-in stage has a reference kernel (the oracle) and a cpu kernel, except the planner's own
    for op in ("decode", "resize", "crop", "normalise", "pad", "batch", "undistort"):
        by = kernels_by_backend(op)
        assert (op,) in by["reference"] and (op,) in by["cpu"], (op, by)


def test_fused_runs_come_from_a_declaration():
    # hand-counted: any order of a subset of {resize, crop, normalise} is 1 + 3 + 6 + 6 = 16 cores;
    # with the 4 tails (none, pad, batch, pad+batch) 64 runs, less the empty one
    runs = fused_runs(any_order=("resize", "crop", "normalise"), then=("pad", "batch"))
    assert len(runs) == 63 and len(set(runs)) == 63
    assert ("crop", "normalise", "resize", "pad", "batch") in runs and ("pad", "crop") not in runs
    from dvpipe.backends import cpu, torch_device

    assert set(torch_device.PIXEL_RUNS) == set(runs)
    torch_runs = {k.ops for k in all_kernels() if k.family == "torch" and k.name.startswith("torch_")
                  and k.ops[0] != "undistort" and k.ops != ("transfer",)}
    assert torch_runs == set(runs)
    assert set(cpu.FUSED_NORMALISE_RUNS) == {
        ("normalise", "batch"), ("normalise", "pad", "batch"), ("normalise", "resize", "batch"),
        ("normalise", "resize", "pad", "batch"), ("resize", "normalise", "batch"), ("resize", "normalise", "pad", "batch")}
    assert all(r[0] == "decode" and r[-1] == "batch" for r in cpu.DECODE_TO_SLOT_RUNS)
    assert len(cpu.DECODE_TO_SLOT_RUNS) == 6


def test_registration_clashes_are_errors():
    with pytest.raises(ConfigError, match="stage op 'resize' is already registered"):
        @dv.register_stage("resize")
        @dataclass(frozen=True)
        class MyResize(dv.Stage):
            pass
    with pytest.raises(ConfigError, match="YAML name 'normalize' is already taken by Normalise"):
        @dv.register_stage("my_norm", yaml=("normalize",))
        @dataclass(frozen=True)
        class MyNorm(dv.Stage):
            pass
    with pytest.raises(ConfigError, match="decorates a dvpipe.Stage subclass"):
        dv.register_stage("thing")(int)


def test_an_old_one_argument_user_stage_still_plans_with_a_deprecation_warning():
    @dv.register_stage("halve_old_t")
    @dataclass(frozen=True)
    class HalveOld(dv.Stage):
        def output_spec(self, spec):
            return spec.with_(width=spec.width // 2)

        def matrix(self, spec):
            return np.diag([0.5, 1.0, 1.0])

    @dv.register_kernel("halve_old_t", backend="cpu")
    def _halve(data, stages, ctx):
        return np.ascontiguousarray(data[:, ::2])

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        pipe = dv.Pipeline(_rig(), [dv.Decode(), HalveOld()], "cpu")
    said = [str(w.message) for w in rec if issubclass(w.category, DeprecationWarning)]
    for name in ("output_spec", "matrix"):
        assert sum(f"HalveOld.{name}(self, spec) is deprecated" in m for m in said) == 1, said
    assert pipe.plan.out_shape == (2, 3, 8, 8)
    assert np.allclose(pipe.plan.cameras[0].img_aug, np.diag([0.5, 1.0, 1.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per class: a second plan does not warn again
        dv.Pipeline(_rig(), [dv.Decode(), HalveOld()], "cpu")


def test_a_stage_sees_its_camera():
    seen = []

    @dv.register_stage("per_camera_crop_t")
    @dataclass(frozen=True)
    class PerCameraCrop(dv.Stage):
        """Crops camera c1 by its rig's extra key ``crop_top``; other cameras pass through."""

        def output_spec(self, spec, camera):
            seen.append(camera.name)
            top = camera.extra.get("crop_top", 0)
            return spec.with_(height=spec.height - top)

        def matrix(self, spec, camera):
            return dv.geometry.crop_matrix(0, camera.extra.get("crop_top", 0))

    @dv.register_kernel("per_camera_crop_t", backend="cpu")
    def _crop(data, stages, ctx):
        return data[ctx.camera.extra.get("crop_top", 0):]

    rig = dv.Rig.from_dict({"cameras": [{"name": "c0", "width": 16, "height": 8, "encoding": "raw"},
                                        {"name": "c1", "width": 16, "height": 10, "encoding": "raw", "crop_top": 2}]})
    pipe = dv.Pipeline(rig, [dv.Decode(), PerCameraCrop()], "cpu")
    assert {"c0", "c1"} <= set(seen)
    assert pipe.plan.out_shape == (2, 3, 8, 16)
    assert np.allclose(pipe.plan.cameras[1].img_aug, dv.geometry.crop_matrix(0, 2))
    assert np.allclose(pipe.plan.cameras[0].img_aug, np.eye(3))

