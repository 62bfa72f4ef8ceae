"""metas_format="mmdet3d": one sample dict with per-camera lists and BEVFormer's temporal keys,
checked against a re-implementation of BEVFormer's CustomNuScenesDataset.get_data_info (can_bus
assembly) and BEVFormer.forward_test (scene reset and ego-motion deltas), written from
fundamentalvision/BEVFormer@66b65f3 projects/mmdet3d_plugin/datasets/nuscenes_dataset.py and
projects/mmdet3d_plugin/bevformer/detectors/bevformer.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import dvpipe as dv
from _bevformer_ref import bevformer_reference, can_bus, info_lidar2img
from conftest import encode_jpeg, rig_dict, textured_bgr
from tolerances import tol

CONFIGS = Path(__file__).parents[1] / "data" / "mmdet3d_configs"


def ref_can_bus(record) -> np.ndarray:
    return can_bus(record["translation"], record["rotation"])


class RefForwardTest:
    """forward_test's bookkeeping: prev_bev dropped on a scene change; deltas vs the previous frame."""

    def __init__(self):
        self.prev = {"prev_bev": None, "scene_token": None, "prev_pos": 0, "prev_angle": 0}

    def __call__(self, meta):
        meta = dict(meta, can_bus=np.array(meta["can_bus"], dtype=float))
        if meta["scene_token"] != self.prev["scene_token"]:
            self.prev["prev_bev"] = None
        self.prev["scene_token"] = meta["scene_token"]
        pos, angle = meta["can_bus"][:3].copy(), meta["can_bus"][-1]
        if self.prev["prev_bev"] is not None:
            meta["can_bus"][:3] -= self.prev["prev_pos"]
            meta["can_bus"][-1] -= self.prev["prev_angle"]
        else:
            meta["can_bus"][-1] = 0
            meta["can_bus"][:3] = 0
        self.prev.update(prev_pos=pos, prev_angle=angle, prev_bev="bev")
        return meta


def _poses(n: int, scene_break: int):
    rng = np.random.default_rng(1)
    out, t0 = [], 1_533_151_603_547_590  # microseconds, nuScenes-like
    for k in range(n):
        yaw = 2.5 + 0.4 * k  # crosses pi: the [0, 360) wrap is exercised
        q = [np.cos(yaw / 2), 0.01 * rng.normal(), 0.01 * rng.normal(), np.sin(yaw / 2)]
        out.append({"token": f"s{k}", "timestamp": t0 + 500_000 * k, "translation": list(rng.normal(0, 100, 3)),
                    "rotation": list(q / np.linalg.norm(q)), "scene_token": "A" if k < scene_break else "B"})
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    rig = dv.Rig.from_dict(rig_dict([(161, 91)] * 3))
    poses = _poses(5, scene_break=3)
    path = tmp_path_factory.mktemp("poses") / "ego_pose.json"
    path.write_text(json.dumps(poses))
    return rig, poses, path


def _frame_sets(rig, poses):
    for k, p in enumerate(poses):
        yield {c.name: dv.Frame(c.name, k, p["timestamp"] * 1000 + 3_000_000 * i,
                                encode_jpeg(textured_bgr(c.width, c.height, seed=k + i)))
               for i, c in enumerate(rig)}


def test_sample_dict_matches_bevformer_dataset_and_forward_test(setup):
    rig, poses, path = setup
    pipe = dv.Pipeline.from_mmdet3d_config(CONFIGS / "bevformer/bevformer_tiny.py", rig, metas_format="mmdet3d",
                                           pose=path)
    delta = dv.Pipeline.from_mmdet3d_config(CONFIGS / "bevformer/bevformer_tiny.py", rig).set_metas_format(
        "mmdet3d", pose=path, can_bus="delta")
    fwd = RefForwardTest()
    for k, frames in enumerate(_frame_sets(rig, poses)):
        batch = pipe.process(frames)
        (meta,) = batch.metas
        assert np.allclose(meta["can_bus"], ref_can_bus(poses[k]), **tol("can_bus").allclose)
        assert meta["scene_token"] == poses[k]["scene_token"] and meta["sample_idx"] == poses[k]["token"]
        assert meta["prev_bev_exists"] == (k not in (0, 3))
        expect = fwd(meta)
        (meta_d,) = delta.process(frames).metas
        assert np.allclose(meta_d["can_bus"], expect["can_bus"], **tol("can_bus").allclose)
        # per-camera lists, in rig order, equal to the independent image reference
        ref_img, ref_metas = bevformer_reference([frames[c.name].data for c in rig], [c.lidar2img for c in rig],
                                                 "bevformer-tiny")
        assert batch.img.shape == (1,) + ref_img.shape and np.abs(batch.img[0] - ref_img).max() <= tol("float_path").atol
        assert len(meta["lidar2img"]) == 3
        for got, want in zip(meta["lidar2img"], ref_metas):
            assert np.allclose(got, want["lidar2img"], **tol("geometry").allclose)
        assert [tuple(s) for s in meta["img_shape"]] == [tuple(r["img_shape"]) for r in ref_metas]
        assert meta["img_timestamp"] == pytest.approx([poses[k]["timestamp"] / 1e6 + 0.003 * i for i in range(3)],
                                                      abs=tol("timestamp_s").atol)
        assert meta["timestamp"] == pytest.approx(poses[k]["timestamp"] / 1e6, abs=tol("timestamp_s").atol)
        assert meta["box_type_3d"] in ("LiDAR",) or meta["box_type_3d"].__name__ == "LiDARInstance3DBoxes"


def test_meta_arrays_are_writeable_and_owned(setup):
    rig, poses, path = setup
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig).set_metas_format("mmdet3d", pose=path)
    frames = next(_frame_sets(rig, poses))
    (a,) = pipe.process(frames).metas
    (b,) = pipe.process(frames).metas
    assert a["lidar2img"][0].flags.writeable and a["can_bus"].flags.writeable
    a["lidar2img"][0][0, 0] = -1.0
    assert b["lidar2img"][0][0, 0] != -1.0 and pipe._metas[0]["lidar2img"][0, 0] != -1.0


def test_stream_gap_starts_a_new_scene_without_a_pose_source():
    rig = dv.Rig.from_dict(rig_dict([(64, 48)]))
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig).set_metas_format("mmdet3d")
    img = encode_jpeg(textured_bgr(64, 48))
    t = [0, 100_000_000, 200_000_000, 5_000_000_000, 5_100_000_000]  # a 4.8 s gap before the 4th set
    metas = [pipe.process({"CAM0": dv.Frame("CAM0", k, ts, img)}).metas[0] for k, ts in enumerate(t)]
    assert [m["prev_bev_exists"] for m in metas] == [False, True, True, False, True]
    assert len({m["scene_token"] for m in metas[:3]}) == 1 and metas[3]["scene_token"] != metas[2]["scene_token"]


def test_pose_out_of_tolerance_and_bad_format_are_one_line_errors(setup, tmp_path):
    rig, poses, path = setup
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig).set_metas_format("mmdet3d", pose=path)
    frames = {c.name: dv.Frame(c.name, 0, 1000, encode_jpeg(textured_bgr(c.width, c.height))) for c in rig}
    with pytest.raises(dv.ConfigError, match=r"no ego pose within 50.0 ms"):
        pipe.process(frames)
    with pytest.raises(dv.ConfigError, match="metas_format must be 'per_camera' or 'mmdet3d'"):
        pipe.set_metas_format("mmdet")


# -- info files -------------------------------------------------------------------------------
def _write_infos(tmp_path, n=3):
    import cv2
    import pickle

    rng = np.random.default_rng(4)
    infos = []
    for k in range(n):
        cams = {}
        for i, cam in enumerate(["CAM_FRONT", "CAM_BACK"]):
            path = tmp_path / "samples" / cam / f"{k}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(path), textured_bgr(161, 91, seed=10 * k + i))
            yaw = rng.normal(0, 0.05) + np.pi * i
            c, s = np.cos(yaw), np.sin(yaw)
            R = np.array([[c, 0, s], [-s, 0, c], [0, -1, 0]])  # camera -> lidar (x right, y down, z fwd)
            cams[cam] = {"data_path": f"samples/{cam}/{k}.jpg", "type": cam, "timestamp": 1_000_000 * k + 20_000 * i,
                         "sensor2lidar_rotation": R, "sensor2lidar_translation": rng.normal(0, 0.5, 3),
                         "cam_intrinsic": np.array([[120.0 + k, 0, 80.5], [0, 120.0 + k, 45.5], [0, 0, 1]])}
        q = rng.normal(size=4)
        infos.append({"token": f"tok{k}", "timestamp": 1_000_000 * k, "cams": cams, "scene_token": "A" if k < 2 else "B",
                      "can_bus": rng.normal(size=18), "prev": "", "next": "", "frame_idx": k,
                      "ego2global_translation": list(rng.normal(0, 50, 3)), "ego2global_rotation": list(q / np.linalg.norm(q)),
                      "lidar2ego_translation": [0.9, 0.0, 1.8], "lidar2ego_rotation": [1.0, 0, 0, 0]})
    path = tmp_path / "nuscenes_infos_temporal_val.pkl"
    path.write_bytes(pickle.dumps({"infos": infos[::-1], "metadata": {"version": "v1.0-mini"}}))
    return path, infos


def test_info_file_source_gives_each_samples_calibration_and_can_bus(tmp_path):
    from dvpipe.mmdet3d import InfoFile

    path, infos = _write_infos(tmp_path)
    src = InfoFile(path)
    rig = src.rig()
    assert rig.names == ("CAM_FRONT", "CAM_BACK") and (rig[0].width, rig[0].height) == (161, 91)
    pipe = dv.Pipeline.from_mmdet3d_config(CONFIGS / "bevformer/bevformer_tiny.py", rig, metas_format="mmdet3d",
                                           pose=src)
    for k, frames in enumerate(src.frame_sets()):  # sorted by timestamp
        batch = pipe.process(frames)
        (meta,) = batch.metas
        info = infos[k]
        for got, cam in zip(meta["lidar2img"], rig.names):
            assert np.allclose(got, info_lidar2img(info["cams"][cam], 0.5), **tol("geometry").allclose)
        can = np.array(info["can_bus"])
        want = ref_can_bus({"translation": info["ego2global_translation"], "rotation": info["ego2global_rotation"]})
        can[:3], can[3:7], can[-2:] = want[:3], want[3:7], want[-2:]
        assert np.allclose(meta["can_bus"], can, **tol("can_bus").allclose)
        assert meta["scene_token"] == info["scene_token"] and meta["sample_idx"] == info["token"]
        assert meta["prev_bev_exists"] == (k == 1)
        # the stored path, as get_data_info passes data_path on (mmdet3d 0.17 opens it as it is)
        assert meta["filename"] == [info["cams"][c]["data_path"] for c in rig.names]
        ref_img, _ = bevformer_reference([(tmp_path / meta["filename"][i]).read_bytes() for i in range(2)],
                                         [c.lidar2img for c in rig], "bevformer-tiny")
        assert np.abs(batch.images - ref_img).max() <= tol("float_path").atol


def test_info_pickle_with_code_is_refused_and_not_run(tmp_path, monkeypatch):
    import pickle

    from dvpipe.mmdet3d import load_info_pickle

    class Evil:
        def __reduce__(self):
            return (exec, ("open('PWNED', 'w').close()",))

    monkeypatch.chdir(tmp_path)
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({"infos": [Evil()]}))
    with pytest.raises(dv.ConfigError, match=r"refers to builtins.exec, which dvpipe does not load"):
        load_info_pickle(tmp_path / "evil.pkl")
    assert not (tmp_path / "PWNED").exists()
    assert load_info_pickle(_write_infos(tmp_path / "ok", n=1)[0])["metadata"] == {"version": "v1.0-mini"}


# -- what the published checkpoints were fed: can_bus[3:7], keys, stored paths ----------------------------
@pytest.mark.parametrize("profile", ["bevformer-tiny", "bevformer-small", "bevformer-base"])
def test_bevformer_profiles_reproduce_the_published_can_bus_rotation_and_offer_the_corrected_one(setup, profile):
    rig, poses, path = setup
    frames = next(_frame_sets(rig, poses))
    published = dv.Pipeline.from_profile(profile, rig, metas_format="mmdet3d", pose=path)
    corrected = dv.Pipeline.from_profile(profile, rig).set_metas_format("mmdet3d", pose=path,
                                                                        can_bus_rotation="quaternion")
    (meta,) = published.process(frames).metas
    (fixed,) = corrected.process(frames).metas
    w = poses[0]["rotation"][0]
    assert np.array_equal(meta["can_bus"][3:7], [w] * 4)  # BEVFormer@66b65f3 get_data_info, PR #285
    assert np.allclose(meta["can_bus"], can_bus(poses[0]["translation"], poses[0]["rotation"], published=True),
                       **tol("can_bus").allclose)
    assert np.allclose(fixed["can_bus"], can_bus(poses[0]["translation"], poses[0]["rotation"], published=False),
                       **tol("can_bus").allclose)
    assert np.allclose(fixed["can_bus"][3:7], poses[0]["rotation"]) and "can_bus_rotation" not in meta
    # a pickled pipeline keeps the choice
    import pickle

    (again,) = pickle.loads(pickle.dumps(corrected)).process(frames).metas
    assert np.array_equal(again["can_bus"], fixed["can_bus"])


def test_can_bus_rotation_from_the_config_the_hook_and_bad_values(setup):
    from dvpipe.mmdet3d import Mmdet3dHook, Mmdet3dMetas

    rig, poses, path = setup
    frames = next(_frame_sets(rig, poses))
    w = poses[0]["rotation"][0]
    pipe = dv.Pipeline.from_mmdet3d_config(CONFIGS / "bevformer/bevformer_tiny.py", rig, metas_format="mmdet3d",
                                           pose=path)
    assert np.array_equal(pipe.process(frames).metas[0]["can_bus"][3:7], [w] * 4)
    seen = []
    hook = Mmdet3dHook(lambda img, img_metas: seen.append(img_metas[0][0]), poses=str(path),
                       can_bus_rotation="quaternion")
    hook(dv.Pipeline.from_profile("bevformer-tiny", rig).process(frames))
    assert np.allclose(seen[0]["can_bus"][3:7], poses[0]["rotation"])
    with pytest.raises(dv.ConfigError, match="can_bus_rotation must be one of published, quaternion, got 'wxyz'"):
        Mmdet3dMetas(can_bus_rotation="wxyz")


def _write_converter_output(repo, n=3):
    """An info file as the converters write it: in <repo>/data/nuscenes/, paths './data/nuscenes/...'
    relative to <repo>, the folder the converter ran in."""
    import pickle

    nus = repo / "data" / "nuscenes"
    nus.mkdir(parents=True)
    path, infos = _write_infos(nus, n)
    for k, info in enumerate(infos):
        for cam in info["cams"].values():
            cam["data_path"] = "./data/nuscenes/" + cam["data_path"]
        info["lidar_path"] = f"./data/nuscenes/samples/LIDAR_TOP/{k}.pcd.bin"
        info["prev"] = "" if k == 0 else f"tok{k - 1}"
        info["next"] = "" if k == n - 1 else f"tok{k + 1}"
    path.write_bytes(pickle.dumps({"infos": infos[::-1], "metadata": {"version": "v1.0-mini"}}))
    return path, infos


def test_converter_output_loads_with_the_default_data_root_and_metas_keep_its_keys(tmp_path, monkeypatch):
    from dvpipe.mmdet3d import InfoFile

    repo = tmp_path / "BEVFormer"
    path, infos = _write_converter_output(repo)
    monkeypatch.chdir(tmp_path)  # not the repository: the default must not depend on the working directory
    src = InfoFile(path)
    assert src.data_root == str(repo)
    assert InfoFile(path, data_root=repo).data_root == str(repo)
    rig = src.rig()
    pipe = dv.Pipeline.from_mmdet3d_config(CONFIGS / "bevformer/bevformer_tiny.py", rig, metas_format="mmdet3d",
                                           pose=src)
    for k, frames in enumerate(src.frame_sets()):
        (meta,) = pipe.process(frames).metas
        info = infos[k]
        # CustomNuScenesDataset.get_data_info + CustomCollect3D (BEVFormer@66b65f3), MultiScaleFlipAug3D(flip=False)
        assert meta["filename"] == [info["cams"][c]["data_path"] for c in rig.names]
        assert meta["pts_filename"] == info["lidar_path"]
        assert meta["prev_idx"] == info["prev"] and meta["next_idx"] == info["next"]
        assert meta["pcd_horizontal_flip"] is False and meta["pcd_vertical_flip"] is False
        assert meta["flip"] is False and meta["pcd_scale_factor"] == 1.0 and meta["scale_factor"] == 1.0


def test_an_info_file_whose_images_are_nowhere_keeps_its_folder_as_data_root(tmp_path):
    from dvpipe.mmdet3d import InfoFile

    path, _ = _write_converter_output(tmp_path / "repo")
    import shutil

    shutil.rmtree(tmp_path / "repo" / "data" / "nuscenes" / "samples")
    assert InfoFile(path).data_root == str(path.parent)


def test_the_published_harness_comparison_finds_each_kind_of_difference():
    # tools/published_ref/run.py (make test-published) decides "equal" key by key; it must not pass a difference
    import importlib.util

    spec = importlib.util.spec_from_file_location("published_ref_run", Path(__file__).parents[2] / "tools" /
                                                  "published_ref" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    same = {"can_bus": np.arange(18.0), "ori_shape": [(450, 800, 3)] * 2, "filename": ["./a.jpg"], "flip": False,
            "box_mode_3d": {"enum": "Box3DMode.LIDAR", "value": 0}, "img_norm_cfg": {"mean": np.ones(3)}}
    published = {"samples": [{"img": np.zeros((2, 3, 4, 4), np.float32), "metas": same, "inputs": {}}]}
    ours = dict(same, box_mode_3d=0, extra=1)
    row = run.compare("m", published, [(np.zeros((2, 3, 4, 4)), ours)], "x")
    assert row["differ"] == {} and row["missing"] == [] and row["extra"] == ["extra"] and len(row["equal"]) == 6
    for key, value in [("can_bus", np.arange(18.0) + np.eye(18)[3] * 1e-6), ("ori_shape", (450, 800, 3, 2)),
                       ("ori_shape", [[450, 800, 3]] * 2), ("filename", ["/abs/a.jpg"]), ("flip", True),
                       ("img_norm_cfg", {"mean": np.ones(3), "std": np.ones(3)})]:
        row = run.compare("m", published, [(np.zeros((2, 3, 4, 4)), dict(ours, **{key: value}))], "x")
        assert list(row["differ"]) == [key], (key, row["differ"])
    row = run.compare("m", published, [(np.zeros((2, 3, 4, 4)), {k: v for k, v in ours.items() if k != "flip"})], "x")
    assert row["missing"] == ["flip"]
    row = run.compare("m", published, [(np.full((2, 3, 4, 4), 0.5), ours)], "x")
    assert row["img_max"] == 0.5


def test_a_rig_in_another_order_than_the_info_file_is_refused_naming_both(tmp_path):
    # BEVFormer's / PETR's get_data_info iterate info['cams'].items(): the file's order is the model's order
    from dataclasses import replace

    from dvpipe.mmdet3d import InfoFile

    path, infos = _write_infos(tmp_path)
    src = InfoFile(path)
    rig = src.rig()
    reversed_rig = replace(rig, cameras=rig.cameras[::-1])
    # the named profile refuses this rig at construction (test_profiles); one with no camera_order (a model
    # of the user's) is checked against the info file when the batch is made
    unordered = replace(dv.profiles.PROFILES["bevformer-tiny"], camera_order=None)
    pipe = dv.Pipeline.from_profile(unordered, reversed_rig, metas_format="mmdet3d", pose=src)
    frames = next(iter(src.frame_sets()))
    with pytest.raises(dv.ConfigError) as e:
        pipe.process(frames)
    assert str(e.value).startswith("the info file feeds the cameras as CAM_FRONT, CAM_BACK; the batch has them as "
                                   "CAM_BACK, CAM_FRONT") and "\n" not in str(e.value)
    # a subset in the file's order is fine (the missing camera is masked)
    single = replace(rig, cameras=rig.cameras[1:])
    (meta,) = dv.Pipeline.from_profile("bevformer-tiny", single, metas_format="mmdet3d", pose=src).process(
        {"CAM_BACK": frames["CAM_BACK"]}).metas
    assert meta["filename"] == [infos[0]["cams"]["CAM_BACK"]["data_path"]]


def test_per_sample_calibration_after_undistort_projects_where_opencv_puts_the_point():
    """A sample's own calibration (an info file's ``cameras``) is recomputed through the plan's image
    transform; after an Undistort the image is K''s, not the lens's K. Reference: OpenCV -- a lidar point
    projected through the lens (cv2.projectPoints with K and the distortion), undistorted to K'
    (cv2.undistortPoints with P = K'), then scaled by the resize as the published pipelines scale their camera
    matrices (BEVFormer's RandomScaleImageMultiViewImage: ``diag(s, s, 1, 1) @ lidar2img``)."""
    import cv2

    w, h = 320, 240
    K = np.array([[200.0, 0.0, 160.5], [0.0, 198.0, 121.0], [0.0, 0.0, 1.0]])
    coeffs = [-0.28, 0.09, 0.0009, -0.0006, -0.012]
    L = np.eye(4)
    L[:3, 3] = [0.3, -0.2, 0.1]
    rig = dv.Rig.from_dict({"cameras": [{"name": "cam", "width": w, "height": h, "encoding": "raw", "intrinsics": K.tolist(),
                                         "distortion": {"model": "pinhole", "coeffs": coeffs}, "lidar2cam": L.tolist()}]})
    pose = lambda t, s: {"translation": (0, 0, 0), "rotation": (1, 0, 0, 0),  # noqa: E731
                         "cameras": {"cam": {"intrinsics": K, "lidar2cam": L, "filename": "x"}}}
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Undistort(alpha=0.0), dv.Resize(size=(120, 160))], "cpu")
    k_new = pipe.plan.cameras[0].intrinsics
    pipe.set_metas_format("mmdet3d", pose=pose)
    m = pipe.process({"cam": np.zeros((h, w, 3), np.uint8)}).metas[0]
    point = np.array([1.0, 0.5, 5.0])  # lidar frame, 5 m ahead
    cam_pt = (L @ np.append(point, 1.0))[:3]
    lens, _ = cv2.projectPoints(cam_pt.reshape(1, 1, 3), np.zeros(3), np.zeros(3), K, np.array(coeffs))
    undist = cv2.undistortPoints(lens, K, np.array(coeffs), P=k_new).reshape(2)
    want = undist * 0.5  # 320x240 -> 160x120
    p = np.asarray(m["lidar2img"][0]) @ np.append(point, 1.0)
    atol = tol("undistort_points", "any", "px").atol
    assert np.allclose(p[:2] / p[2], want, atol=atol), (p[:2] / p[2], want)
    c = np.asarray(m["cam2img"][0]) @ np.append(cam_pt, 1.0)
    assert np.allclose(c[:2] / c[2], want, atol=atol)
