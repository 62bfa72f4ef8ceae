"""BEVFormer-family profiles against the independent reference of anchors.md §A (tests/_bevformer_ref.py)."""
from __future__ import annotations

import numpy as np
import pytest

import dvpipe as dv
from _bevdet_ref import bevdet_reference
from _bevformer_ref import bevformer_reference
from _petr_ref import petr_reference
from conftest import encode_jpeg, rig_dict, textured_bgr

from tolerances import tol

PROFILES = ["bevformer-base", "bevformer-small", "bevformer-tiny"]


def _check_against_reference(rig: dv.Rig, encoded: dict, profile: str, backends=("cpu",)):
    pipe = dv.Pipeline.from_profile(profile, rig, backends=backends, fidelity="reference")
    batch = pipe.process(encoded)
    ref_img, ref_metas = bevformer_reference([encoded[c.name] for c in rig], [c.lidar2img for c in rig], profile)
    assert batch.valid.all(), batch.drops
    assert batch.images.shape == ref_img.shape
    assert batch.images.dtype == np.float32
    assert np.abs(batch.images - ref_img).max() <= tol("float_path").atol
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
    assert np.allclose(m["intrinsics"][:3, :3], expected, atol=tol("geometry").atol)
    assert np.allclose(m["lidar2img"], m["intrinsics"] @ rig[0].lidar2cam)


def test_bevdet_metas_post_rot_tran_separate():
    rig = dv.Rig.from_dict(rig_dict([(1600, 900)]))
    pipe = dv.Pipeline.from_profile("bevdet", rig)
    batch = pipe.process({"CAM0": encode_jpeg(textured_bgr(1600, 900))})
    m = batch.metas[0]
    assert batch.images.shape == (1, 3, 256, 704)
    # BEVDet@1bacecb bevdet-r50.py: resize 704/1600 + resize_test 0.04 = 0.48 -> 768x432, crop (32, 176)
    assert np.allclose(m["post_rot"], np.diag([0.48, 0.48, 1.0]))
    assert np.allclose(m["post_tran"], [-32.0, -176.0, 0.0])
    assert np.allclose(m["lidar2img"], rig[0].lidar2img)


# PETR's petr_vovnet_gridmask_p4_800x320.py data_aug_conf at test time (megvii-research/PETR@f7525f9)
_PETR_CONF = {"final_dim": (320, 800), "bot_pct_lim": (0.0, 0.0), "H": 900, "W": 1600}
# BEVDet's bevdet-r50.py data_config (HuangJunJie2017/BEVDet@1bacecb)
_BEVDET_CONF = {"input_size": (256, 704), "crop_h": (0.0, 0.0), "resize_test": 0.04}


def test_petr_profile_matches_repository_transform():
    """Pillow's default bicubic on uint8 (not OpenCV INTER_LINEAR), as ResizeCropFlipImage calls it."""
    rig = dv.Rig.from_dict(rig_dict([(1600, 900)] * 2))
    frames = {c.name: encode_jpeg(textured_bgr(1600, 900, seed=k)) for k, c in enumerate(rig)}
    batch = dv.Pipeline.from_profile("petr", rig).process(frames)
    p = dv.PROFILES["petr"]
    ref_img, ref_metas = petr_reference([frames[c.name] for c in rig], [c.intrinsics for c in rig],
                                        [c.lidar2cam for c in rig], _PETR_CONF, p.mean, p.std, p.to_rgb)
    assert batch.images.shape == ref_img.shape == (2, 3, 320, 800)
    assert np.abs(batch.images - ref_img).max() <= tol("float_path").atol
    for m, r in zip(batch.metas, ref_metas):
        assert np.allclose(m["lidar2img"], r["lidar2img"], **tol("reference_lidar2img").allclose)
        assert tuple(m["img_shape"]) == tuple(r["img_shape"])


@pytest.mark.parametrize("size", [(1600, 900), (1920, 1080), (641, 359)])
def test_bevdet_profile_matches_repository_transform(size):
    """Pillow decode + bicubic resize by 704/W + 0.04, ImageNet normalisation in RGB, post_rot/post_tran."""
    rig = dv.Rig.from_dict(rig_dict([size]))
    frames = {"CAM0": encode_jpeg(textured_bgr(*size, seed=2))}
    batch = dv.Pipeline.from_profile("bevdet", rig).process(frames)
    imgs, rots, trans = bevdet_reference([frames["CAM0"]], _BEVDET_CONF)
    assert batch.images.shape == imgs.shape
    assert np.abs(batch.images - imgs).max() <= tol("bevdet_reference").atol
    assert np.allclose(batch.metas[0]["post_rot"], rots[0], atol=tol("bevdet_post_rot").atol)
    assert np.allclose(batch.metas[0]["post_tran"], trans[0], atol=tol("bevdet_post_tran").atol)


def test_profiles_cite_file_and_commit():
    for name in ("bevformer-tiny", "petr", "bevdet"):
        assert "@" in dv.PROFILES[name].source and ".py" in dv.PROFILES[name].source


# -- profile= with a custom stage list: the metas describe the stages that run (issue 19) ----------
from _bevformer_ref import imnormalize  # noqa: E402

_CUSTOM = [
    # (mean, std, to_rgb) of the Normalise stage, or None for no Normalise
    ((10.0, 20.0, 30.0), (2.0, 3.0, 4.0), True),
    ((103.53, 116.28, 123.675), (1.0, 1.0, 1.0), False),  # caffe BGR, on a profile that is RGB (tiny)
    None,
]


def _custom_stages(norm):
    """Decode, Normalise (if any), Resize 0.5 (of the float image, as BEVFormer orders them)."""
    stages = [dv.Decode()]
    if norm is not None:
        stages.append(dv.Normalise(mean=norm[0], std=norm[1], to_rgb=norm[2]))
    return stages + [dv.Resize(scale=0.5)]


@pytest.mark.parametrize("norm", _CUSTOM, ids=["rgb-other-mean-std", "bgr", "no-normalise"])
def test_profile_metas_describe_the_normalise_of_the_stages_given(norm):
    from dvpipe.profiles import profile_metas

    cam = dv.Rig.from_dict(rig_dict([(64, 48)]))[0]
    m = profile_metas("bevformer-tiny", cam, np.eye(3), (64, 48), (64, 48), stages=_custom_stages(norm))
    if norm is None:
        assert "img_norm_cfg" not in m
    else:
        cfg = m["img_norm_cfg"]
        assert np.array_equal(cfg["mean"], np.float32(norm[0])) and np.array_equal(cfg["std"], np.float32(norm[1]))
        assert cfg["to_rgb"] is norm[2]
    # without the stages the profile's own (bevformer-tiny: ImageNet RGB) is kept, as before
    legacy = profile_metas("bevformer-tiny", cam, np.eye(3), (64, 48), (64, 48))
    assert legacy["img_norm_cfg"]["to_rgb"] is True


@pytest.mark.parametrize("norm", _CUSTOM, ids=["rgb-other-mean-std", "bgr", "no-normalise"])
def test_pipeline_with_profile_and_custom_stages_stamps_what_the_stages_do(norm):
    rig = dv.Rig.from_dict(rig_dict([(64, 48)]))
    data = encode_jpeg(textured_bgr(64, 48, seed=3))
    batch = dv.Pipeline(rig, _custom_stages(norm), ("reference",), profile="bevformer-tiny").process({"CAM0": data})
    m = batch.metas[0]
    if norm is None:
        assert "img_norm_cfg" not in m
        return
    # the independent check: mmcv's imnormalize with the stamped cfg, then the resize, gives the batch
    import cv2

    cfg = m["img_norm_cfg"]
    x = imnormalize(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).astype(np.float32), cfg["mean"],
                    cfg["std"], cfg["to_rgb"])
    x = cv2.resize(x, (32, 24), interpolation=cv2.INTER_LINEAR).transpose(2, 0, 1)
    assert np.abs(np.asarray(batch.images)[0] - x).max() <= tol("float_path").atol


# -- a model profile from a file outside the package ---------------------------------------------------
PROFILE_PLUGIN = '''
import numpy as np

import dvpipe
from dvpipe.profiles import Profile, register_metas_contract


def toy_metas(profile, camera, img_aug, metas):
    """A metas contract of its own: the resize factor and the camera's unscaled intrinsics."""
    metas["resize_factor"] = float(img_aug[0, 0])
    metas["raw_intrinsics"] = np.array(camera.intrinsics)


register_metas_contract("toy", toy_metas)
# a model at 0.5 scale, ImageNet normalisation in RGB, no crop, padded to /32
dvpipe.register_profile(Profile("toy-net", mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375),
                                to_rgb=True, scale=0.5, normalise_first=False, metas="toy",
                                source="example/toy-net@0000000 configs/toy_net.py"))
'''


@pytest.fixture
def profile_tables():
    """The profile and metas-contract tables as they were, restored after the test."""
    from dvpipe import profiles

    before = dict(profiles._PROFILES), dict(profiles._METAS_CONTRACTS)
    yield profiles
    for table, old in zip((profiles._PROFILES, profiles._METAS_CONTRACTS), before):
        table.clear()
        table.update(old)


def test_a_model_profile_and_metas_contract_from_a_deployment_plugin(tmp_path, profile_tables):
    """A plugin file registers a metas contract and a profile naming it (``register_metas_contract``,
    ``dvpipe.register_profile``); ``pipeline: {profile: NAME}`` then validates and runs."""
    from dvpipe.deploy import DeploymentError, Runner, load_deployment
    from dvpipe.testing.deployments import synthetic_deployment

    (tmp_path / "toy_profile.py").write_text(PROFILE_PLUGIN, encoding="utf-8")
    dep = synthetic_deployment(2, frames=2)
    dep["pipeline"] = {"profile": "toy-net", "backends": ["cpu"]}
    with pytest.raises(DeploymentError, match="unknown profile 'toy-net'"):
        load_deployment(dep, base_dir=tmp_path)
    dep["plugins"] = ["toy_profile.py"]
    runner = Runner(load_deployment(dep, base_dir=tmp_path), write_outputs=False)
    ops = [s.op for step in runner.pipe.plan.cameras[0].steps for s in step.stages]
    assert ops == ["decode", "resize", "normalise", "pad", "batch"]
    batches = list(runner.batches())
    runner.finish()
    assert len(batches) == 2
    batch = batches[0].batch
    assert batch.images.shape == (2, 3, 32, 64)  # 96x64 at 0.5 = 48x32, padded to /32
    m = batch.metas[0]
    cam = runner.pipe.rig.cameras[0]
    assert m["resize_factor"] == 0.5  # the contract's own key: the profile's scale
    np.testing.assert_array_equal(m["raw_intrinsics"], cam.intrinsics)
    # the generic metas, untouched: ori_shape pre-pad, img_shape = pad_shape padded
    assert (m["ori_shape"], m["img_shape"], m["pad_shape"]) == ((32, 48, 3), (32, 64, 3), (32, 64, 3))
    assert "input_shape" not in m and "post_rot" not in m  # no built-in contract ran


def test_register_profile_refuses_a_taken_name_unless_replace(profile_tables):
    from dataclasses import replace

    from dvpipe.profiles import PROFILES, register_metas_contract, register_profile

    petr = PROFILES["petr"]
    register_profile(petr)  # the same profile again (a module re-imported): accepted
    other = replace(petr, scale=0.25, source="example/other@1111111 cfg.py")
    with pytest.raises(dv.ConfigError) as e:
        register_profile(other)
    msg = str(e.value)
    assert "\n" not in msg and "'petr' is already registered (megvii-research/PETR@f7525f9" in msg
    assert "replace=True" in msg
    assert PROFILES["petr"] is petr
    register_profile(other, replace=True)
    assert PROFILES["petr"] is other
    with pytest.raises(TypeError):
        PROFILES["x"] = petr  # type: ignore[index]  # the table is read-only: register_profile adds
    with pytest.raises(dv.ConfigError, match="unknown metas contract 'nope'; known: bevformer, petr, bevdet"):
        register_profile(replace(petr, name="x", metas="nope"))
    with pytest.raises(dv.ConfigError, match="metas contract 'petr' is already registered .*replace=True"):
        register_metas_contract("petr", lambda p, c, a, m: None)


def test_profile_can_bus_rotation_is_checked_and_the_bevformer_profiles_reproduce_the_published_one():
    from dataclasses import replace

    from dvpipe.profiles import PROFILES, Profile

    names = ("bevformer-base", "bevformer-small", "bevformer-tiny", "petr", "bevdet")
    assert {n: PROFILES[n].can_bus_rotation for n in names} == {
        "bevformer-base": "published", "bevformer-small": "published", "bevformer-tiny": "published",
        "petr": None, "bevdet": None}
    assert replace(PROFILES["bevformer-tiny"], can_bus_rotation="quaternion").can_bus_rotation == "quaternion"
    with pytest.raises(dv.ConfigError, match="profile x: can_bus_rotation must be one of published, quaternion"):
        Profile("x", mean=(0, 0, 0), std=(1, 1, 1), to_rgb=False, can_bus_rotation="wxyz")


#: the info files' camera order, copied from ../shared/reference/anchors.md §A.3 (mmdet3d's nuscenes_converter
#: ``camera_types``): what BEVFormer's and PETR's datasets feed
_INFO_ORDER = ["CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_FRONT_LEFT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_BACK_RIGHT"]


@pytest.mark.parametrize("profile", ["bevformer-tiny", "bevformer-base", "petr", "bevdet"])
def test_a_named_profile_refuses_the_published_cameras_in_another_order_than_its_model_was_fed(profile):
    from mmdet3d_bridge.test_config import CONFIGS, _named_rig

    from dvpipe.mmdet3d._config import load_config

    def _rig_named(names):
        return _named_rig((320, 180), names)

    # BEVDet's loader feeds data_config['cams'] (the published bevdet-r50.py, tests/data), the others the info order
    bevdet = list(load_config(CONFIGS / "bevdet/bevdet-r50.py")["data_config"]["cams"])
    want = bevdet if profile == "bevdet" else _INFO_ORDER
    other = _INFO_ORDER if profile == "bevdet" else bevdet
    assert want != other and sorted(want) == sorted(other)
    with pytest.raises(dv.ConfigError) as e:
        dv.Pipeline.from_profile(profile, _rig_named(other))
    msg = str(e.value)
    assert "\n" not in msg and f"order {', '.join(want)}; the rig lists them as {', '.join(other)}" in msg
    # the model's order, a subset in it, and cameras of other names (a rig of the user's) are accepted
    for names in (want, want[1:4], ["FRONT", "BACK"], [other[1], "CAM_FRONT_WIDE"]):
        assert dv.Pipeline.from_profile(profile, _rig_named(names)).rig.names == tuple(names)
    with pytest.raises(dv.ConfigError, match="the rig lists them as CAM_BACK, CAM_FRONT "):
        dv.Pipeline.from_profile(profile, _rig_named(["CAM_BACK", "CAM_FRONT"]))
