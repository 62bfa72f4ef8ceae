"""Pipeline.from_mmdet3d_config: the restricted config reader and the transform mapping, checked
against independent re-implementations of each repository's test pipeline (tests/_*_ref.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dvpipe as dv
from dvpipe.mmdet3d import check_rig, find_test_pipeline, load_config, map_test_pipeline, profile_from_config
from _bevdet_ref import bevdet_reference
from _bevformer_ref import bevformer_reference
from _petr_ref import petr_reference
from conftest import camera_folders, encode_jpeg, rig_dict, textured_bgr

from tolerances import tol

CONFIGS = Path(__file__).parents[1] / "data" / "mmdet3d_configs"


def _frames(rig: dv.Rig, seed: int = 0) -> dict:
    return {c.name: encode_jpeg(textured_bgr(c.width, c.height, seed=seed + k)) for k, c in enumerate(rig)}


@pytest.fixture(scope="module")
def rig_1600():
    return dv.Rig.from_dict(rig_dict([(1600, 900)] * 2))


@pytest.mark.parametrize("config,profile", [("bevformer_tiny", "bevformer-tiny"), ("bevformer_small", "bevformer-small"),
                                            ("bevformer_base", "bevformer-base")])
@pytest.mark.parametrize("size", [(1600, 900), (641, 359)])
def test_bevformer_configs_match_reference(config, profile, size):
    rig = dv.Rig.from_dict(rig_dict([size] * 2))
    frames = _frames(rig)
    pipe = dv.Pipeline.from_mmdet3d_config(CONFIGS / "bevformer" / f"{config}.py", rig)
    batch = pipe.process(frames)
    ref_img, ref_metas = bevformer_reference([frames[c.name] for c in rig], [c.lidar2img for c in rig], profile)
    assert batch.valid.all() and batch.images.shape == ref_img.shape
    assert np.abs(batch.images - ref_img).max() <= tol("float_path").atol
    for m, r in zip(batch.metas, ref_metas):
        assert np.allclose(m["lidar2img"], r["lidar2img"], **tol("geometry_relative").allclose)
        assert tuple(m["img_shape"]) == tuple(r["img_shape"]) and tuple(m["pad_shape"]) == tuple(r["pad_shape"])
        assert tuple(m["ori_shape"]) == tuple(r["ori_shape"]) and m["scale_factor"] == 1.0


def _petr_conf(cfg: dict) -> dict:
    return next(t for t in find_test_pipeline(cfg) if t["type"].startswith("ResizeCropFlip"))["data_aug_conf"]


@pytest.mark.parametrize("config", ["petr/petr_vovnet_gridmask_p4_800x320.py", "petr/petr_r50dcn_gridmask_p4.py",
                                    "streampetr/stream_petr_r50_flash_704_bs2_seq_24e.py"])
def test_petr_family_configs_match_reference(rig_1600, config):
    cfg = load_config(CONFIGS / config)
    frames = _frames(rig_1600, seed=3)
    batch = dv.Pipeline.from_mmdet3d_config(CONFIGS / config, rig_1600).process(frames)
    norm = cfg["img_norm_cfg"]
    ref_img, ref_metas = petr_reference([frames[c.name] for c in rig_1600], [c.intrinsics for c in rig_1600],
                                        [c.lidar2cam for c in rig_1600], _petr_conf(cfg), norm["mean"], norm["std"],
                                        norm["to_rgb"])
    assert batch.valid.all() and batch.images.shape == ref_img.shape
    assert np.abs(batch.images - ref_img).max() <= tol("float_path").atol
    for m, r in zip(batch.metas, ref_metas):
        assert np.allclose(m["intrinsics"], r["intrinsics"], **tol("reference_intrinsics").allclose)
        assert np.allclose(m["lidar2img"], r["lidar2img"], **tol("reference_lidar2img").allclose)
        assert tuple(m["img_shape"]) == tuple(r["img_shape"]) and tuple(m["pad_shape"]) == tuple(r["pad_shape"])


def test_petr_reference_backend_is_bit_exact_pillow(rig_1600):
    """The numpy re-implementation of Pillow's resize (reference backend) gives the reference's tensors."""
    config = CONFIGS / "petr/petr_vovnet_gridmask_p4_800x320.py"
    rig = dv.Rig.from_dict(rig_dict([(1600, 900)]))
    frames = _frames(rig, seed=5)
    cfg = load_config(config)
    batch = dv.Pipeline.from_mmdet3d_config(config, rig, backends=("reference",)).process(frames)
    norm = cfg["img_norm_cfg"]
    ref_img, _ = petr_reference([frames["CAM0"]], [rig[0].intrinsics], [rig[0].lidar2cam], _petr_conf(cfg),
                                norm["mean"], norm["std"], norm["to_rgb"])
    assert np.abs(batch.images - ref_img).max() <= tol("float_path").atol


def test_petrv2_sweeps_refused_by_name_then_skipped_on_request(rig_1600):
    config = CONFIGS / "petrv2/petrv2_vovnet_gridmask_p4_800x320.py"
    with pytest.raises(dv.ConfigError, match="LoadMultiViewImageFromMultiSweepsFiles has no dvpipe mapping"):
        dv.Pipeline.from_mmdet3d_config(config, rig_1600)
    pipe = dv.Pipeline.from_mmdet3d_config(config, rig_1600, skip=["LoadMultiViewImageFromMultiSweepsFiles"])
    cfg = load_config(config)
    frames = _frames(rig_1600, seed=7)
    norm = cfg["img_norm_cfg"]
    ref_img, _ = petr_reference([frames[c.name] for c in rig_1600], [c.intrinsics for c in rig_1600],
                                [c.lidar2cam for c in rig_1600], _petr_conf(cfg), norm["mean"], norm["std"],
                                norm["to_rgb"])
    assert np.abs(pipe.process(frames).images - ref_img).max() <= tol("float_path").atol


def test_petr_config_refuses_cameras_of_another_size():
    rig = dv.Rig.from_dict(rig_dict([(1280, 720)]))
    with pytest.raises(dv.ConfigError, match="assumes 1600x900 images; camera CAM0 is 1280x720"):
        dv.Pipeline.from_mmdet3d_config(CONFIGS / "petr/petr_vovnet_gridmask_p4_800x320.py", rig)


#: the nuScenes converter's camera order (the info files' ``cams``), not BEVDet's data_config['cams']
NUSCENES_ORDER = ["CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_FRONT_LEFT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_BACK_RIGHT"]


def _named_rig(size, names):
    d = rig_dict([size] * len(names))
    for cam, name in zip(d["cameras"], names):
        cam["name"] = name
    return dv.Rig.from_dict(d)


@pytest.mark.parametrize("size", [(1600, 900), (1920, 1080)])
def test_bevdet_config_matches_reference_in_the_configs_camera_order(size):
    config = CONFIGS / "bevdet/bevdet-r50.py"
    data_config = load_config(config)["data_config"]
    rig = _named_rig(size, NUSCENES_ORDER)  # listed in another order than data_config['cams']
    frames = _frames(rig, seed=11)
    pipe = dv.Pipeline.from_mmdet3d_config(config, rig)
    batch = pipe.process(frames)
    # LoadMultiViewImageFromFiles_BEVDet reads results['img_info'][cam] for cam in data_config['cams']
    assert list(batch.cameras) == data_config["cams"]
    imgs, rots, trans = bevdet_reference([frames[c] for c in data_config["cams"]], data_config)
    assert batch.valid.all() and batch.images.shape == imgs.shape
    assert np.abs(batch.images - imgs).max() <= tol("bevdet_reference").atol
    for m, rot, tran, name in zip(batch.metas, rots, trans, data_config["cams"]):
        assert np.allclose(m["post_rot"], rot, atol=tol("bevdet_post_rot").atol) and np.allclose(m["post_tran"], tran, atol=tol("bevdet_post_tran").atol)
        assert np.allclose(m["lidar2img"], rig[name].lidar2img)  # BEVDet keeps the camera matrices untouched
        assert np.array_equal(m["intrinsics"], rig[name].intrinsics)


def test_bevdet_config_refuses_a_rig_without_its_camera_names_naming_both_orders():
    config = CONFIGS / "bevdet/bevdet-r50.py"
    rig = _named_rig((1600, 900), [f"CAM{k}" for k in range(6)])
    with pytest.raises(dv.ConfigError) as e:
        dv.Pipeline.from_mmdet3d_config(config, rig)
    msg = str(e.value)
    assert "\n" not in msg
    assert "CAM_FRONT_LEFT, CAM_FRONT, CAM_FRONT_RIGHT, CAM_BACK_LEFT, CAM_BACK, CAM_BACK_RIGHT" in msg
    assert "CAM0, CAM1, CAM2, CAM3, CAM4, CAM5" in msg
    # a deployment's rig is not reordered: check_rig refuses another order, naming both
    mapped = profile_from_config(config)
    with pytest.raises(dv.ConfigError, match="the rig lists CAM_FRONT, CAM_FRONT_RIGHT, CAM_FRONT_LEFT"):
        check_rig(mapped, _named_rig((1600, 900), NUSCENES_ORDER).cameras)


# -- the reader never executes a config --------------------------------------------------------
def test_hostile_config_refused_and_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(dv.ConfigError, match=r"runs_code.py:3: call of __import__"):
        load_config(CONFIGS / "hostile/runs_code.py")
    assert not (tmp_path / "DVPIPE_CONFIG_WAS_EXECUTED").exists()
    with pytest.raises(dv.ConfigError, match=r"imports.py:1: import statement"):
        load_config(CONFIGS / "hostile/imports.py")


def test_allow_code_without_mmengine_says_so():
    pytest.importorskip("numpy")
    try:
        import mmengine  # noqa: F401
        pytest.skip("mmengine is installed")
    except ImportError:
        pass
    with pytest.raises(dv.ConfigError, match="allow_code=True needs mmengine"):
        load_config(CONFIGS / "bevformer/bevformer_tiny.py", allow_code=True)


def test_reader_subset_and_base_merge(tmp_path):
    (tmp_path / "base.py").write_text("a = dict(x=1, y=dict(p=1, q=2))\nb = [1, 2]\nsize = 32\n")
    (tmp_path / "child.py").write_text(
        "_base_ = './base.py'\n"
        "a = dict(y=dict(q=3))\n"
        "b = dict(_delete_=True, z=1)\n"
        "_dim_ = 256\nhalf = _dim_ // 2\nratio = 1.0 / 3\nneg = -0.5 ** 2\n"
        "root = 'data/'\nann = root + 'infos.pkl'\nname = f'{root}x{_dim_}'\n"
        "keys = ['img'] + ['points']\nt = tuple([1, 2])\nd = {**dict(k=1), 'm': 2}\n"
        "pad = {{_base_.size}}\nfirst = keys[0]\nx, y = 1, 2\nx += 1\n")
    cfg = load_config(tmp_path / "child.py")
    assert cfg["a"] == {"x": 1, "y": {"p": 1, "q": 3}} and cfg["b"] == {"z": 1}
    assert (cfg["half"], cfg["ratio"], cfg["neg"]) == (128, 1.0 / 3, -0.25)
    assert cfg["ann"] == "data/infos.pkl" and cfg["name"] == "data/x256"
    assert cfg["keys"] == ["img", "points"] and cfg["t"] == (1, 2) and cfg["d"] == {"k": 1, "m": 2}
    assert (cfg["pad"], cfg["first"], cfg["x"], cfg["y"]) == (32, "img", 2, 2)


@pytest.mark.parametrize("line,message", [
    ("x = os.path", "Attribute expressions"), ("x = (lambda: 1)()", "call of"), ("x = [i for i in []]", "ListComp"),
    ("x = 'a' * 10 ** 7", r"\* on sequences only by a small integer"), ("x = undefined + 1", "name 'undefined' is not bound"),
    ("x = open('f')", r"call of open\(\)"), ("def f(): pass", "FunctionDef"), ("x = 2 ** 1000", r"\*\* only on small"),
])
def test_reader_refusals_name_line_and_construct(tmp_path, line, message):
    (tmp_path / "c.py").write_text("a = 1\n" + line + "\n")
    with pytest.raises(dv.ConfigError, match=r"c.py:2: .*" + message):
        load_config(tmp_path / "c.py")


def test_missing_base_named(tmp_path):
    (tmp_path / "c.py").write_text("_base_ = ['../nowhere/nus-3d.py']\n")
    with pytest.raises(dv.ConfigError, match="_base_ file ../nowhere/nus-3d.py not found"):
        load_config(tmp_path / "c.py")


# -- mapping refusals ------------------------------------------------------------------------
_LOAD = dict(type="LoadMultiViewImageFromFiles", to_float32=True)
_NORM = dict(type="NormalizeMultiviewImage", mean=[0, 0, 0], std=[1, 1, 1], to_rgb=False)


@pytest.mark.parametrize("pipeline,message", [
    ([_LOAD, dict(type="PhotoMetricDistortionMultiViewImage"), _NORM], "PhotoMetricDistortionMultiViewImage has no dvpipe mapping"),
    ([_LOAD, dict(type="ResizeCropFlipImage", training=True, data_aug_conf={}), _NORM], r"ResizeCropFlipImage\(training=True\)"),
    ([_LOAD, _NORM, dict(type="MultiScaleFlipAug3D", flip=True, transforms=[])], r"flip=True"),
    ([_LOAD, _NORM, dict(type="RandomScaleImageMultiViewImage", scales=[0.5, 0.8])], "one scale only"),
    ([_LOAD, dict(type="PadMultiViewImage", size_divisor=32), _NORM], "must come after"),
    ([_LOAD], "no NormalizeMultiviewImage"),
])
def test_unmappable_pipelines_refused_by_name(pipeline, message):
    with pytest.raises(dv.ConfigError, match=message):
        map_test_pipeline(pipeline)


def test_gridmask_and_formatting_are_test_time_noops(rig_1600):
    cfg = load_config(CONFIGS / "bevformer/bevformer_tiny.py")
    pipeline = find_test_pipeline(cfg)
    with_grid = [pipeline[0], dict(type="GridMask", use_h=True, use_w=True, rotate=1, offset=False, ratio=0.5,
                                   mode=1, prob=0.7)] + pipeline[1:]
    a = map_test_pipeline(pipeline).profile
    b = map_test_pipeline(with_grid).profile
    assert (a.scale, a.mean, a.std, a.to_rgb, a.size_divisor) == (b.scale, b.mean, b.std, b.to_rgb, b.size_divisor) \
        == (0.5, (123.675, 116.28, 103.53), (58.395, 57.12, 57.375), True, 32)


def test_a_deployment_names_the_mmdet3d_config_and_runs_it(tmp_path):
    """``pipeline: {mmdet3d_config: PATH}``: the runner's batches equal the reference of that config."""
    from dvpipe.deploy import Runner, load_deployment

    rig = rig_dict([(641, 359)] * 2)
    frames = camera_folders(tmp_path, rig)
    dep = load_deployment({
        "name": "mm", "rig": rig,
        "pipeline": {"mmdet3d_config": str(CONFIGS / "bevformer" / "bevformer_tiny.py"), "backends": ["cpu"]},
        "cameras": [{"name": c["name"], "source": {"type": "images", "uri": str(tmp_path / c["name"])}}
                    for c in rig["cameras"]],
        "outputs": {"metrics": False}})
    r = Runner(dep, write_outputs=False)
    (rb,) = list(r.batches())
    r.finish()
    ref_img, _ = bevformer_reference([frames[c["name"]] for c in rig["cameras"]],
                                     [np.asarray(c.lidar2img) for c in dep.rig.cameras], "bevformer-tiny")
    assert rb.batch.valid.all() and np.abs(np.asarray(rb.batch.images) - ref_img).max() <= tol("float_path").atol
    with pytest.raises(ValueError, match="pipeline"):
        load_deployment({"name": "mm", "rig": rig, "pipeline": {"mmdet3d_config": str(CONFIGS / "bevformer" / "bevformer_tiny.py"),
                                                               "profile": "bevformer-tiny"}})


# -- PETR's shape keys in metas_format="mmdet3d" ----------------------------------------------------
def _petr_shape_keys_reference(encoded: list[bytes], conf: dict, size_divisor: int = 32) -> dict:
    """The shape keys of PETR's test pipeline, re-implemented from the published code:

    * mmdet3d v0.17 ``mmdet3d/datasets/pipelines/loading.py`` ``LoadMultiViewImageFromFiles`` (PETR's
      README pins mmdet3d 0.17.1; read at open-mmlab/mmdetection3d@d617be9): ``img = np.stack([imread(name)
      for name in filename], axis=-1)``; ``img_shape = ori_shape = pad_shape = img.shape``,
      ``scale_factor = 1.0`` (mmdet3d 0.17's ``Collect3D`` passes it on: the harness of
      tools/published_ref finds it in PETR's metas).
    * megvii-research/PETR@f7525f9 ``projects/mmdet3d_plugin/datasets/pipelines/transform_3d.py``:
      ``ResizeCropFlipImage`` and ``NormalizeMultiviewImage`` set no shape key; ``PadMultiViewImage``
      sets ``img_shape = [img.shape for img in results['img']]`` (before padding) and
      ``pad_shape = [img.shape for img in padded_img]``.
    """
    import cv2
    from PIL import Image

    imgs = [cv2.imdecode(np.frombuffer(d, np.uint8), cv2.IMREAD_UNCHANGED) for d in encoded]
    stacked = np.stack(imgs, axis=-1).astype(np.float32)  # to_float32=True
    results = {"img": [stacked[..., i] for i in range(stacked.shape[-1])], "img_shape": stacked.shape,
               "ori_shape": stacked.shape, "pad_shape": stacked.shape, "scale_factor": 1.0}
    H, W = conf["H"], conf["W"]
    fH, fW = conf["final_dim"]
    resize = max(fH / H, fW / W)
    dims = (int(W * resize), int(H * resize))
    crop_h = int((1 - np.mean(conf["bot_pct_lim"])) * dims[1]) - fH
    crop_w = int(max(0, dims[0] - fW) / 2)
    results["img"] = [np.array(Image.fromarray(np.uint8(x)).resize(dims).crop((crop_w, crop_h, crop_w + fW, crop_h + fH)))
                      .astype(np.float32) for x in results["img"]]
    padded = [np.pad(x, ((0, -x.shape[0] % size_divisor), (0, -x.shape[1] % size_divisor), (0, 0))) for x in results["img"]]
    results["img_shape"] = [x.shape for x in results["img"]]
    results["pad_shape"] = [x.shape for x in padded]
    return results


@pytest.mark.parametrize("config", ["petr/petr_vovnet_gridmask_p4_800x320.py", "petr/petr_r50dcn_gridmask_p4.py"])
def test_petr_mmdet3d_metas_have_the_stacked_ori_shape_of_the_published_loader(rig_1600, config):
    cfg = load_config(CONFIGS / config)
    frames = _frames(rig_1600, seed=9)
    pipe = dv.Pipeline.from_mmdet3d_config(CONFIGS / config, rig_1600, metas_format="mmdet3d")
    (meta,) = pipe.process(frames).metas
    ref = _petr_shape_keys_reference([frames[c.name] for c in rig_1600], _petr_conf(cfg))
    assert ref["ori_shape"] == (900, 1600, 3, 2)
    assert meta["ori_shape"] == ref["ori_shape"] and isinstance(meta["ori_shape"], tuple)
    assert meta["scale_factor"] == ref["scale_factor"]
    assert [tuple(s) for s in meta["img_shape"]] == ref["img_shape"]
    assert [tuple(s) for s in meta["pad_shape"]] == ref["pad_shape"]


@pytest.mark.parametrize("profile, config", [("bevformer-tiny", "bevformer_tiny.py"),
                                             ("bevformer-small", "bevformer_small.py"),
                                             ("bevformer-base", "bevformer_base.py")])
def test_bevformer_mmdet3d_metas_have_padmultiviewimages_per_camera_ori_shape(rig_1600, profile, config):
    # BEVFormer's PadMultiViewImage sets ori_shape = [img.shape for img in results['img']] before padding,
    # whether or not RandomScaleImageMultiViewImage ran (bevformer-base has none): a per-camera list of
    # the pre-pad shapes, never the loader's stacked (H, W, 3, N)
    frames = _frames(rig_1600, seed=2)
    _img, ref = bevformer_reference([frames[c.name] for c in rig_1600], [c.lidar2img for c in rig_1600], profile)
    for pipe in (dv.Pipeline.from_profile(profile, rig_1600, metas_format="mmdet3d"),
                 dv.Pipeline.from_mmdet3d_config(CONFIGS / "bevformer" / config, rig_1600, metas_format="mmdet3d")):
        (meta,) = pipe.process(frames).metas
        assert isinstance(meta["ori_shape"], list)
        assert [tuple(s) for s in meta["ori_shape"]] == [m["ori_shape"] for m in ref]
        assert [tuple(s) for s in meta["img_shape"]] == [m["img_shape"] for m in ref]
