"""A bare install runs the sample: the numpy sample model matches the torch one, and (slow) a wheel
installed into a fresh venv with only the core dependencies runs ``dvpipe run`` from an empty folder.

The torch model (``torch.nn.functional.grid_sample``, ``nn.Conv2d``) is the reference for the numpy
one; the slow test reads the core dependencies from the built wheel's own METADATA."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

import dvpipe as dv

from tolerances import tol

ROOT = Path(__file__).resolve().parent.parent


def _model_module():
    spec = importlib.util.spec_from_file_location("bev_model_under_test", ROOT / "samples" / "bev_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def batch(samples_dir):
    rig = dv.Rig.from_yaml(samples_dir / "rig.yaml")
    frames = {c.name: sorted((samples_dir / "frames" / c.name).glob("*.jpg"))[1] for c in rig}
    return dv.Pipeline.from_profile("bevformer-tiny", rig).process(frames)


def test_numpy_model_gives_the_torch_models_outputs(batch):
    torch = pytest.importorskip("torch")
    mod = _model_module()
    ref = mod.run_torch(batch).numpy()
    out = mod.run_numpy(batch)
    assert out.shape == ref.shape == (1, 50, 50) and out.dtype == np.float32
    assert np.abs(ref).max() > 0.1  # not a trivially zero output
    bound = tol("numpy_model_vs_torch")
    np.testing.assert_allclose(out, ref, rtol=bound.rtol, atol=bound.atol * np.abs(ref).max())
    assert mod.BACKEND == "torch" and isinstance(mod.run(batch), torch.Tensor)


def test_numpy_grid_sample_is_torchs_at_edges_and_outside():
    torch = pytest.importorskip("torch")
    mod = _model_module()
    rng = np.random.default_rng(3)
    feats = rng.standard_normal((2, 5, 7, 11)).astype(np.float32)  # odd sizes
    grid = rng.uniform(-1.3, 1.3, (2, 400, 2)).astype(np.float32)  # some points outside the image
    grid[0, :4] = [[-1, -1], [1, 1], [-1, 1], [0, 0]]
    ref = torch.nn.functional.grid_sample(torch.from_numpy(feats), torch.from_numpy(grid)[:, :, None, :],
                                          mode="bilinear", padding_mode="zeros", align_corners=False)[..., 0]
    np.testing.assert_allclose(mod._grid_sample(feats, grid.astype(np.float64)), ref.numpy(), atol=tol("grid_sample_numpy").atol)


def test_numpy_view_transform_samples_markers_where_they_are(samples_dir):
    """The metadata contract without torch: with raw pixels as features, the BEV feature of a marker's
    3D point (scene.yaml, rendered by tools/make_samples.py) is the marker's white disc."""
    mod = _model_module()
    rig = dv.Rig.from_yaml(samples_dir / "rig.yaml")
    ts = yaml.safe_load((samples_dir / "scene.yaml").read_text())["timestamps"][0]
    b = dv.Pipeline.from_profile("bevformer-tiny", rig).process({c: samples_dir / f["image"]
                                                                 for c, f in ts["frames"].items()})
    p = dv.PROFILES["bevformer-tiny"]
    white = (255.0 - np.array(p.mean)) / np.array(p.std)
    checked = 0
    for marker in ts["markers"]:
        if len(marker["cameras"]) != 1:
            continue
        model = mod.NumpyTinyBEV(backbone=False)
        model.points = np.array([[*marker["xyz"], 1.0]])
        model.grid_shape = (1, 1, 1)
        out = model(np.asarray(b.images), b.metas)
        assert np.allclose(out[:, 0, 0], white, atol=0.15 * np.abs(white).max()), marker["name"]
        checked += 1
    assert checked >= 3


def _sh(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd}: rc {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _core_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    return [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Requires-Dist:") and "extra ==" not in ln]


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_without_torch_runs_the_sample(tmp_path):
    """pip wheel -> venv -> pip install --no-deps WHEEL + its core requirements (no torch) -> dvpipe run."""
    wheels = tmp_path / "wheels"
    _sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)], timeout=900)
    (wheel,) = wheels.glob("dvpipe-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        build = z.read("dvpipe/_build.json").decode()
    assert {"dvpipe/samples/deployment.yaml", "dvpipe/samples/rig.yaml", "dvpipe/samples/bev_model.py"} <= names
    assert sum(n.startswith("dvpipe/samples/frames/") and n.endswith(".jpg") for n in names) == 24
    native = any(re.match(r"dvpipe/backends/_native\..*\.(so|pyd)$", n) for n in names)
    assert ('"native_kernel": true' in build) == native
    assert wheel.name.endswith("-py3-none-any.whl") != native  # a platform tag only with the kernel inside
    core = _core_requirements(wheel)
    assert not any(r.split()[0].startswith("torch") for r in core), core
    venv = tmp_path / "venv"
    _sh([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    _sh([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], timeout=600)
    _sh([str(py), "-m", "pip", "install", "-q", *core], timeout=900)
    assert subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode != 0
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = _sh([str(venv / "bin" / "dvpipe"), "run", "--frames", "3"], cwd=empty, env=env, timeout=600)
    assert "deployment sample-nuscenes-bevformer-tiny" in r.stdout and str(venv) in r.stdout  # the packaged sample
    assert "3 frame sets in" in r.stdout and "stopped: --frames 3" in r.stdout
    assert re.search(r"^latency \(ms\): \d+ batches, 6 cameras", r.stdout, re.M), r.stdout
    assert re.search(r"^model +all +model +\d+ ", r.stdout, re.M)  # the numpy model ran and was timed
    assert (empty / "out" / "sample" / "summary.json").is_file()


@pytest.mark.slow
def test_npu_extra_next_to_a_cpu_torch_pulls_no_cuda_wheel(tmp_path):
    """The documented Ascend recipe: CPU torch first, then ``dvpipe[npu]`` with the torch-npu series of
    that torch (``torch-npu==2.13.*``; unpinned, pip takes the newest torch-npu, whose torch pin
    replaces the CPU torch by PyPI's CUDA build: torch-npu 2.14.0 -> torch 2.14.0 + 19 CUDA wheels, seen
    2026-12-01). Resolved by pip (dry run, metadata from PyPI) in this venv: nothing but torch-npu is
    added, no torch, no nvidia-* wheel."""
    import json
    import tomllib

    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip("this venv's torch is a CUDA build; the recipe starts from a CPU torch")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["npu"]
    assert not any(r.split(">")[0].split("=")[0].strip() == "torch" for r in extra), extra  # torch-npu pins it
    series = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    report = tmp_path / "report.json"
    _sh([sys.executable, "-m", "pip", "install", "--dry-run", "-q", "--report", str(report), *extra,
         f"torch-npu=={series}.*"], timeout=600)
    names = [i["metadata"]["name"].lower().replace("_", "-") for i in json.loads(report.read_text())["install"]]
    assert names == ["torch-npu"], names


@pytest.mark.slow
def test_a_wheel_built_without_a_compiler_is_pure_and_says_so(tmp_path):
    """CC=/bin/false: the optional kernel fails to compile; the wheel must not carry a kernel (not even
    one left in build/ by an earlier build), must be tagged py3-none-any and must record why."""
    import json

    import shutil

    src = tmp_path / "src"  # a clean copy: an up-to-date kernel in the checkout's build/ would be reused
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", "build", "dist", ".git", "out", "__pycache__",
                                                             "*.so", "*.egg-info", ".pytest_cache"))
    env = dict(os.environ, CC="/bin/false")
    _sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "w"), str(src)], env=env,
        timeout=900)
    (wheel,) = (tmp_path / "w").glob("dvpipe-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = json.loads(z.read("dvpipe/_build.json"))
    assert not [n for n in names if re.search(r"_native\..*\.(so|pyd)$", n)], names
    assert not [n for n in names if ".data/" in n]  # pure: everything at the root (purelib)
    assert info["native_kernel"] is False and info["reason"]
    assert "dvpipe/samples/deployment.yaml" in names
