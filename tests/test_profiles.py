"""BEVFormer-family profiles against the independent reference of anchors.md §A (tests/_bevformer_ref.py)."""
from __future__ import annotations

import numpy as np
import pytest

import dvpipe as dv
from _bevformer_ref import bevformer_reference
from conftest import encode_jpeg, rig_dict, textured_bgr

PROFILES = ["bevformer-base", "bevformer-small", "bevformer-tiny"]


def _check_against_reference(rig: dv.Rig, encoded: dict, profile: str, backends=("cpu",)):
    pipe = dv.Pipeline.from_profile(profile, rig, backends=backends, fidelity="reference")
    batch = pipe.process(encoded)
    ref_img, ref_metas = bevformer_reference([encoded[c.name] for c in rig], [c.lidar2img for c in rig], profile)
    assert batch.valid.all(), batch.drops
    assert batch.images.shape == ref_img.shape
    assert batch.images.dtype == np.float32
    assert np.abs(batch.images - ref_img).max() <= 1e-4
    for m, r in zip(batch.metas, ref_metas):
        assert np.abs(m["lidar2img"] - r["lidar2img"]).max() <= 1e-4 * max(1.0, np.abs(r["lidar2img"]).max())
        assert tuple(m["img_shape"]) == tuple(r["img_shape"])
        assert tuple(m["pad_shape"]) == tuple(r["pad_shape"])
        assert tuple(m["ori_shape"]) == tuple(r["ori_shape"])
        assert m["scale_factor"] == r["scale_factor"]


@pytest.mark.parametrize("profile", PROFILES)
def test_profiles_match_reference_on_samples(samples_dir, profile):
    rig = dv.Rig.from_yaml(samples_dir / "rig.yaml")
    first = {c.name: sorted((samples_dir / "frames" / c.name).glob("*.jpg"))[0].read_bytes() for c in rig}
    _check_against_reference(rig, first, profile)


@pytest.mark.parametrize("profile", PROFILES)
def test_profiles_match_reference_on_real_nuscenes(nuscenes_dir, profile):
    rig = dv.Rig.from_yaml(nuscenes_dir / "rig.yaml")
    frames = {c.name: (nuscenes_dir / f"{c.name}.jpg").read_bytes() for c in rig}
    _check_against_reference(rig, frames, profile)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("size", [(1242, 375), (641, 359), (97, 61)])
def test_profiles_match_reference_on_odd_sizes(profile, size):
    rig = dv.Rig.from_dict(rig_dict([size, size]))
    frames = {c.name: encode_jpeg(textured_bgr(*size, seed=k)) for k, c in enumerate(rig)}
    _check_against_reference(rig, frames, profile)


@pytest.mark.parametrize("profile", PROFILES)
def test_reference_backend_matches_reference(profile):
    size = (161, 91)
    rig = dv.Rig.from_dict(rig_dict([size]))
    frames = {c.name: encode_jpeg(textured_bgr(*size, seed=3)) for c in rig}
    _check_against_reference(rig, frames, profile, backends=("reference",))


def test_tiny_network_input_sizes():
    # anchors.md §A.3 step 4: base 1600x928, small 1280x736, tiny 800x480
    rig = dv.Rig.from_dict(rig_dict([(1600, 900)]))
    shapes = {p: dv.Pipeline.from_profile(p, rig).plan.out_shape for p in PROFILES}
    assert shapes == {"bevformer-base": (1, 3, 928, 1600), "bevformer-small": (1, 3, 736, 1280),
                      "bevformer-tiny": (1, 3, 480, 800)}


def test_petr_metas_unpadded_img_shape_and_updated_intrinsics():
    rig = dv.Rig.from_dict(rig_dict([(1600, 900)]))
    pipe = dv.Pipeline.from_profile("petr", rig)
    m = pipe.process({"CAM0": encode_jpeg(textured_bgr(1600, 900))}).metas[0]
    # PETR: resize 0.5 -> 800x450, crop rows 130..450 -> 800x320 (a multiple of 32: no pad)
    assert m["img_shape"] == (320, 800, 3) and m["pad_shape"] == (320, 800, 3)
    K = rig[0].intrinsics
    expected = np.array([[0.5 * K[0, 0], 0, 0.5 * K[0, 2]], [0, 0.5 * K[1, 1], 0.5 * K[1, 2] - 130], [0, 0, 1]])
    assert np.allclose(m["intrinsics"][:3, :3], expected, atol=1e-9)
    assert np.allclose(m["lidar2img"], m["intrinsics"] @ rig[0].lidar2cam)


def test_bevdet_metas_post_rot_tran_separate():
    rig = dv.Rig.from_dict(rig_dict([(1600, 900)]))
    pipe = dv.Pipeline.from_profile("bevdet", rig)
    batch = pipe.process({"CAM0": encode_jpeg(textured_bgr(1600, 900))})
    m = batch.metas[0]
    assert batch.images.shape == (1, 3, 256, 704)
    # BEVDet test: resize 704/1600 = 0.44 -> 704x396, crop_h = 396 - 256 = 140
    assert np.allclose(m["post_rot"], np.diag([0.44, 0.44, 1.0]))
    assert np.allclose(m["post_tran"], [0.0, -140.0, 0.0])
    assert np.allclose(m["lidar2img"], rig[0].lidar2img)
