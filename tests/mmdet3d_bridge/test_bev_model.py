"""The sample BEV model's view transform honours the BEVFormer metadata contract."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import yaml

import dvpipe as dv
from conftest import ROOT
from tolerances import tol

torch = pytest.importorskip("torch")


def _load():
    spec = importlib.util.spec_from_file_location("bev_model", ROOT / "samples" / "bev_model.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bev_model"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("profile", ["bevformer-tiny", "bevformer-base"])
def test_view_transform_samples_markers_where_they_are(samples_dir, profile):
    """With an identity backbone, the BEV feature of a marker's 3D point is the marker's (white) pixel.
    Reporting the unpadded img_shape, or lidar2img without the resize, would sample elsewhere."""
    mod = _load()
    rig = dv.Rig.from_yaml(samples_dir / "rig.yaml")
    scene = yaml.safe_load((samples_dir / "scene.yaml").read_text())
    ts = scene["timestamps"][0]
    batch = dv.Pipeline.from_profile(profile, rig).process({c: samples_dir / f["image"] for c, f in ts["frames"].items()})
    p = dv.PROFILES[profile]
    white = (255.0 - np.array(p.mean)) / np.array(p.std)
    checked = 0
    for marker in ts["markers"]:
        if len(marker["cameras"]) != 1:
            continue  # seen by two cameras: the average would mix two renderings
        model = mod.TinyBEV(backbone=torch.nn.Identity())
        model.points = torch.tensor([[*marker["xyz"], 1.0]], dtype=torch.float64)
        model.grid_shape = (1, 1, 1)
        out = model.view_transform(torch.from_numpy(np.ascontiguousarray(batch.images)), batch.metas)
        assert np.allclose(out[:, 0, 0].numpy(), white, atol=tol("bev_marker").atol * np.abs(white).max()), marker["name"]
        checked += 1
    assert checked >= 3


def test_run_hook_returns_bev_logits(samples_dir):
    mod = _load()
    rig = dv.Rig.from_yaml(samples_dir / "rig.yaml")
    frames = {c.name: sorted((samples_dir / "frames" / c.name).glob("*.jpg"))[0] for c in rig}
    out = mod.run(dv.Pipeline.from_profile("bevformer-tiny", rig).process(frames))
    assert tuple(out.shape) == (1, 50, 50) and torch.isfinite(out).all()
