"""The info-file deployment source (``type: infos``): frame sets from an mmdet3d info file.

The info files are built here by ``tools/make_info_file.py`` (which does not import dvpipe) from
``samples/scene.yaml`` and ``samples/rig.yaml``, in BEVFormer's temporal layout and mmdet3d 1.x's,
as pickles with numpy arrays; the expected frame sets, calibration and ``can_bus`` are computed
here from those files as BEVFormer's ``CustomNuScenesDataset.get_data_info`` computes them.
"""
from __future__ import annotations

import importlib.util
import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import yaml

import dvpipe as dv
from _bevformer_ref import bevformer_reference, can_bus, info_lidar2img
from conftest import NUSCENES, ROOT, SAMPLES
from dvpipe.cli import main as cli_main
from dvpipe.deploy import DeploymentError, Runner, load_deployment

from tolerances import tol

SCENE = yaml.safe_load((SAMPLES / "scene.yaml").read_text())
ORDER = SCENE["camera_order"]


def _tool():
    spec = importlib.util.spec_from_file_location("make_info_file", ROOT / "tools" / "make_info_file.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write_pkl(tmp_path: Path, layout: str = "bevformer") -> tuple[Path, dict]:
    data = _tool().build_infos(SAMPLES, layout, arrays=True)
    path = tmp_path / f"infos_{layout}.pkl"
    path.write_bytes(pickle.dumps(data))
    return path, data


def _deployment(uri, data_root=SAMPLES / "frames", tolerance_ms=50.0, rig=SAMPLES / "rig.yaml", **extra):
    d = {"name": "infos-test", "rig": str(rig), "pipeline": {"profile": "bevformer-tiny", "backends": ["cpu"]},
         "source": {"type": "infos", "uri": str(uri), "data_root": str(data_root), **extra},
         "sync": {"tolerance_ms": tolerance_ms, "on_late": "mask"}}
    return d


def _run(dep):
    with Runner(load_deployment(dep), write_outputs=False) as runner:
        return [(rb.frame_set, rb.batch.keep()) for rb in runner.batches()]


def _spread_interval_ms():
    """From scene.yaml: the largest capture-time spread within a set, the smallest interval from one set's first
    capture to the next one's."""
    spans = [(min(f["capture_time_ns"] for f in fs["frames"].values()),
              max(f["capture_time_ns"] for f in fs["frames"].values())) for fs in SCENE["timestamps"]]
    return max(b - a for a, b in spans) / 1e6, min(n[0] - p[0] for p, n in zip(spans, spans[1:])) / 1e6


# -- frame sets are the file's samples --------------------------------------------------------
@pytest.mark.parametrize("layout", ["bevformer", "v1"])
def test_each_sample_is_one_frame_set_at_the_files_capture_times(tmp_path, layout):
    path, _ = _write_pkl(tmp_path, layout)
    sets = _run(_deployment(path))
    assert len(sets) == len(SCENE["timestamps"])
    for (fs, batch), want in zip(sets, SCENE["timestamps"]):
        assert batch.valid.all()
        for cam in ORDER:
            # the file stores microseconds (v0.x) or seconds (v1.x): the ns of the file names, to the us
            assert fs.members[cam].frame.capture_epoch_ns == want["frames"][cam]["capture_time_ns"] // 1000 * 1000
    # the images are the files the info names, preprocessed as BEVFormer does (first set)
    fs, batch = sets[0]
    rig = dv.Rig.from_yaml(SAMPLES / "rig.yaml")
    files = [SAMPLES / SCENE["timestamps"][0]["frames"][c]["image"] for c in rig.names]
    ref, _ = bevformer_reference([f.read_bytes() for f in files], [c.lidar2img for c in rig], "bevformer-tiny")
    assert np.abs(np.asarray(batch.images) - ref).max() <= tol("float_path").atol


def test_tolerance_between_spread_and_interval_groups_exactly_and_below_the_spread_splits(tmp_path):
    from dvpipe.deploy.sources.infos import sync_problem
    from dvpipe.mmdet3d import open_info_file

    path, _ = _write_pkl(tmp_path)
    spread, interval = _spread_interval_ms()
    assert 30 < spread < 45 and interval > 400  # the sample scene: cameras within ~39 ms, sets 500 ms apart
    info_spread, info_interval = open_info_file(path, SAMPLES / "frames").camera_spread_ns(ORDER)
    assert info_spread == pytest.approx(spread * 1e6, abs=tol("camera_spread_ns").atol)
    assert info_interval == pytest.approx(interval * 1e6, abs=tol("camera_spread_ns").atol)
    assert sync_problem(info_spread, info_interval, math.ceil(spread)) is None
    assert "would split samples (set it to at least 40)" in sync_problem(info_spread, info_interval, spread - 1)
    assert "reaches the next sample" in sync_problem(info_spread, info_interval, interval + 1)

    exact = _run(_deployment(path, tolerance_ms=math.ceil(spread)))
    assert len(exact) == 4 and all(b.valid.all() for _fs, b in exact)
    # below the spread the earliest camera's set cannot reach the last cameras: they go missing
    split = _run(_deployment(path, tolerance_ms=math.floor(spread) - 5))
    assert not all(b.valid.all() for _fs, b in split)
    latest = max(ORDER, key=lambda c: SCENE["timestamps"][0]["frames"][c]["capture_time_ns"])
    first_fs, first_batch = split[0]
    assert latest not in first_fs.members or not first_batch.valid[ORDER.index(latest)]


# -- calibration -------------------------------------------------------------------------------
def _rig_variant(tmp_path, change, name="rig.yaml"):
    rig = yaml.safe_load((SAMPLES / "rig.yaml").read_text())
    for cam in rig["cameras"]:
        cam.pop("lidar2img", None)  # derived from the calibration the variant changes
        change(cam)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(rig))
    return p


def test_a_rig_disagreeing_with_the_file_is_refused_and_a_rig_without_calibration_takes_the_files(tmp_path):
    from dvpipe.deploy.sources import SourceError, open_source

    path, _ = _write_pkl(tmp_path)

    def shift_cx(cam):
        cam["intrinsics"][0][2] += 2.0

    cfg = load_deployment(_deployment(path)).camera("CAM_FRONT").source  # the sample rig agrees with the file
    open_source(dv.Rig.from_yaml(SAMPLES / "rig.yaml")["CAM_FRONT"], cfg).open()
    src = open_source(dv.Rig.from_yaml(_rig_variant(tmp_path, shift_cx))["CAM_FRONT"], cfg)
    with pytest.raises(SourceError, match=r"rig camera CAM_FRONT's intrinsics differ from the info file's "
                                          r"\(CAM_FRONT, first sample\) by up to 2 px"):
        src.open()

    def swap(cam):  # another camera's extrinsics: a wrong mapping
        cam["lidar2cam"] = yaml.safe_load((SAMPLES / "rig.yaml").read_text())["cameras"][3]["lidar2cam"]

    with pytest.raises(SourceError, match=r"lidar2cam differs from the info file's .* deg"):
        open_source(dv.Rig.from_yaml(_rig_variant(tmp_path, swap, "swapped.yaml"))["CAM_FRONT"], cfg).open()


def _ref_can_bus(info):
    return can_bus(info["ego2global_translation"], info["ego2global_rotation"], info["can_bus"])


def test_dataloader_with_two_workers_gets_each_samples_pose_and_calibration_from_the_file(tmp_path):
    torch = pytest.importorskip("torch")
    from dvpipe.torch import FrameSetDataset, collate_mmdet3d

    path, data = _write_pkl(tmp_path)

    def identity(cam):  # the rig gives sizes and order only: calibration from the info file
        cam.pop("intrinsics"), cam.pop("lidar2cam"), cam.pop("lidar2img", None)

    dep = _deployment(path, rig=_rig_variant(tmp_path, identity))
    ds = FrameSetDataset(dep, metas_format="mmdet3d")
    loader = torch.utils.data.DataLoader(ds, batch_size=1, num_workers=2, collate_fn=collate_mmdet3d, timeout=120)
    got = {}
    for batch in loader:
        (k,), (meta,) = batch["index"], batch["img_metas"]
        assert k not in got
        got[k] = meta
        assert batch["img"].shape == (1, 6, 3, 480, 800)
    assert sorted(got) == [0, 1, 2, 3]
    for k, info in enumerate(data["infos"]):
        meta = got[k]
        assert meta["sample_idx"] == info["token"] and meta["scene_token"] == info["scene_token"]
        assert meta["prev_bev_exists"] == (k > 0)
        assert np.allclose(meta["can_bus"], _ref_can_bus(info), atol=tol("can_bus").atol)
        for cam, l2i, t, name in zip(ORDER, meta["lidar2img"], meta["img_timestamp"], meta["filename"]):
            assert np.allclose(l2i, info_lidar2img(info["cams"][cam], 0.5), **tol("geometry_relative").allclose)
            assert t == pytest.approx(info["cams"][cam]["timestamp"] / 1e6, abs=tol("timestamp_s").atol)
            assert name == info["cams"][cam]["data_path"]  # as stored: get_data_info passes data_path on


# -- validation and the CLI --------------------------------------------------------------------
def test_validate_names_each_problem_at_its_key(tmp_path):
    path, _ = _write_pkl(tmp_path)
    with pytest.raises(DeploymentError, match=r"source.data_root: the info file's first CAM_FRONT image is not there"):
        load_deployment(_deployment(path, data_root=tmp_path))
    with pytest.raises(DeploymentError, match=r"source.camera: camera CAM_TOP is not in the info file"):
        load_deployment(_deployment(path, camera="CAM_TOP"))
    with pytest.raises(DeploymentError, match=r"source.uri: file not found"):
        load_deployment(_deployment(tmp_path / "nope.pkl"))
    with pytest.raises(DeploymentError, match=r"source.frames: unknown key"):
        load_deployment(_deployment(path, frames=3))

    class Evil:
        def __reduce__(self):
            return (exec, ("open('PWNED', 'w').close()",))

    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps({"infos": [Evil()]}))
    with pytest.raises(DeploymentError, match=r"source.uri: .*refers to builtins.exec, which dvpipe does not load"):
        load_deployment(_deployment(evil))
    assert not Path("PWNED").exists()


def test_a_rig_camera_reads_the_files_camera_named_in_camera(tmp_path):
    path, _ = _write_pkl(tmp_path)
    rig = yaml.safe_load((SAMPLES / "rig.yaml").read_text())
    rig["cameras"] = rig["cameras"][:1]
    rig["cameras"][0]["name"] = "FRONT"
    (tmp_path / "rig.yaml").write_text(yaml.safe_dump(rig))
    d = _deployment(path, rig=tmp_path / "rig.yaml", camera="CAM_FRONT")
    sets = _run(d)
    assert [fs.members["FRONT"].frame.capture_epoch_ns for fs, _b in sets] == [
        fs["frames"]["CAM_FRONT"]["capture_time_ns"] for fs in SCENE["timestamps"]]


def test_dvpipe_validate_and_run_on_an_info_file_deployment(tmp_path, capsys):
    path, _ = _write_pkl(tmp_path)
    dep = _deployment(path)
    dep["outputs"] = {"dir": str(tmp_path / "out")}
    yml = tmp_path / "dep.yaml"
    yml.write_text(yaml.safe_dump(dep))
    assert cli_main(["validate", str(yml)]) == 0
    assert "<- infos " in capsys.readouterr().out
    assert cli_main(["run", str(yml), "--quiet"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["sets"] == 4


def _same_up_to_float_rounding(a, b, path="") -> list[str]:
    """Where two JSON-like trees differ; floats compared to 1e-12 (matrix products round differently
    on different CPUs: numpy's SIMD paths sum in different orders, seen as last-digit differences)."""
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=tol("json_float_rounding").rtol,
                                                                                          abs_tol=tol("json_float_rounding").atol)
        return [] if ok else [f"{path}: {a!r} != {b!r}"]
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} != {type(b).__name__}"]
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a.keys() ^ b.keys())} differ"]
        return [d for k in a for d in _same_up_to_float_rounding(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} != {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _same_up_to_float_rounding(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_the_comparison_of_info_trees_finds_a_changed_value_key_and_length():
    tree = {"infos": [{"t": 1, "m": [0.1, 0.2]}]}
    assert _same_up_to_float_rounding(tree, {"infos": [{"t": 1, "m": [0.1, 0.2 + 1e-17]}]}) == []
    assert _same_up_to_float_rounding(tree, {"infos": [{"t": 1, "m": [0.1, 0.2001]}]}) == ["/infos[0]/m[1]: 0.2 != 0.2001"]
    assert _same_up_to_float_rounding(tree, {"infos": [{"t": 2, "m": [0.1, 0.2]}]}) == ["/infos[0]/t: 1 != 2"]
    assert _same_up_to_float_rounding(tree, {"infos": [{"t": 1}]}) == ["/infos[0]: keys ['m'] differ"]
    assert _same_up_to_float_rounding(tree, {"infos": []}) == ["/infos: 1 != 0 items"]


def test_the_bundled_info_deployment_is_the_tools_output_and_validates():
    from dvpipe.cli.validate import check

    committed = json.loads((SAMPLES / "infos" / "samples_infos_temporal.json").read_text())
    built = _tool().build_infos(SAMPLES, "bevformer", arrays=False)
    assert _same_up_to_float_rounding(committed, built) == []  # regenerate: tools/make_info_file.py
    r = check(str(ROOT / "configs" / "deployments" / "nuscenes-infos.yaml"))
    assert r["ok"], r["errors"]


# -- real nuScenes data, when present ----------------------------------------------------------
def test_a_real_nuscenes_sample_groups_into_one_set():
    if not (NUSCENES / "rig.yaml").is_file():
        pytest.skip(f"no nuScenes sample at {NUSCENES} (../shared/data/nuscenes-sample)")
    rig = yaml.safe_load((NUSCENES / "rig.yaml").read_text())
    images = {c["name"]: {"img_path": f"{NUSCENES.name}/{c['image']}", "cam2img": np.array(c["intrinsics"]), "timestamp": c["capture_time_ns"] / 1e9,
                          "lidar2cam": np.array(c["lidar2cam"])} for c in rig["cameras"]}
    t0 = min(c["capture_time_ns"] for c in rig["cameras"])
    data = {"metainfo": {"version": "v1.0-mini"},
            "data_list": [{"sample_idx": 0, "token": "ca9a282c9e77460f8360f564131a8af5", "timestamp": t0 / 1e9,
                           "ego2global": np.array(rig["ego2global"]), "images": images}]}
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "nuscenes_infos_val.pkl"
        p.write_bytes(pickle.dumps(data))
        sets = _run(_deployment(p, data_root=NUSCENES.parent, rig=NUSCENES / "rig.yaml", tolerance_ms=50))
    assert len(sets) == 1
    fs, batch = sets[0]
    assert batch.valid.all()
    assert {c: fs.members[c].frame.capture_epoch_ns for c in fs.members} == {c["name"]: c["capture_time_ns"]
                                                                             for c in rig["cameras"]}


class _InfoFrameSets:
    def __init__(self, path):
        self.path = path

    def __call__(self):
        from dvpipe.mmdet3d import InfoFile

        return InfoFile(self.path, data_root=SAMPLES / "frames").frame_sets()


def test_temporal_keys_follow_the_stream_not_a_workers_share_of_it(tmp_path):
    # worker 1 preprocesses sets 1 and 3 only, yet set 1's previous sample is set 0 (same scene)
    torch = pytest.importorskip("torch")
    from dvpipe.mmdet3d import InfoFile
    from dvpipe.torch import FrameSetDataset

    path, data = _write_pkl(tmp_path)
    rig = dv.Rig.from_yaml(SAMPLES / "rig.yaml")
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig)
    ds = FrameSetDataset(_InfoFrameSets(path), pipe, metas_format="mmdet3d",
                         pose=InfoFile(path, data_root=SAMPLES / "frames"))
    got = {s["index"]: s["img_metas"] for s in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                                                            timeout=120)}
    assert sorted(got) == [0, 1, 2, 3]
    for k, info in enumerate(data["infos"]):
        assert got[k]["sample_idx"] == info["token"] and got[k]["prev_bev_exists"] == (k > 0)
        assert np.allclose(got[k]["can_bus"], _ref_can_bus(info), atol=tol("can_bus").atol)


@pytest.mark.parametrize("dataset_format", ["mmdet3d", "per_camera"])
def test_a_pipeline_set_to_mmdet3d_keeps_its_settings_and_the_stream_in_a_dataset(tmp_path, dataset_format):
    # the pipeline carries the pose source and can_bus choice; the dataset used to build its sample dicts with
    # an identity pose (dataset mmdet3d), or each worker's pipeline copy from its share of the sets only
    torch = pytest.importorskip("torch")
    from dvpipe.mmdet3d import InfoFile
    from dvpipe.torch import FrameSetDataset

    path, data = _write_pkl(tmp_path)
    rig = dv.Rig.from_yaml(SAMPLES / "rig.yaml")
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig)
    pipe.set_metas_format("mmdet3d", pose=InfoFile(path, data_root=SAMPLES / "frames"))
    ds = FrameSetDataset(_InfoFrameSets(path), pipe, metas_format=dataset_format)
    got = {s["index"]: s["img_metas"] for s in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                                                            timeout=120)}
    assert sorted(got) == [0, 1, 2, 3]
    for k, info in enumerate(data["infos"]):
        meta = got[k] if dataset_format == "mmdet3d" else got[k][0]  # the pipeline's own layout: a list of one
        assert meta["sample_idx"] == info["token"] and meta["prev_bev_exists"] == (k > 0)
        assert np.allclose(meta["can_bus"], _ref_can_bus(info), atol=tol("can_bus").atol)
    assert pipe._metas_format[0] == "mmdet3d"  # the caller's pipeline keeps its choice


def test_dvpipe_run_hands_a_detector_mmdet3d_inputs_from_the_info_file(tmp_path):
    torch = pytest.importorskip("torch")
    path, data = _write_pkl(tmp_path)
    (tmp_path / "det.py").write_text(
        "def forward_test(img, img_metas):\n"
        "    return img[0], img_metas[0][0]\n")
    dep = _deployment(path)
    dep["model"] = {"entry": "dvpipe.mmdet3d:Mmdet3dHook",
                    "init": {"model": f"{tmp_path / 'det.py'}:forward_test", "infos": str(path),
                             "data_root": str(SAMPLES / "frames")}}
    with Runner(load_deployment(dep), write_outputs=False) as runner:
        outs = [(rb.batch.keep(), rb.output) for rb in runner.batches()]
    assert len(outs) == 4
    for k, ((batch, (img, meta)), info) in enumerate(zip(outs, data["infos"])):
        assert isinstance(img, torch.Tensor) and tuple(img.shape) == (1, 6, 3, 480, 800)
        assert meta["sample_idx"] == info["token"] and meta["prev_bev_exists"] == (k > 0)
        assert np.allclose(meta["can_bus"], _ref_can_bus(info), atol=tol("can_bus").atol)
        for cam, l2i in zip(ORDER, meta["lidar2img"]):
            assert np.allclose(l2i, info_lidar2img(info["cams"][cam], 0.5), **tol("geometry_relative").allclose)


def test_v1_bare_file_names_are_found_under_samples_camera_as_mmdet3d_joins_them(tmp_path):
    # mmdet3d 1.x: img_path is the file name; its nuScenes configs join data_prefix CAM_X='samples/CAM_X'
    data = _tool().build_infos(SAMPLES, "v1", arrays=True)
    root = tmp_path / "nuscenes"
    for smp in data["data_list"]:
        for cam, c in smp["images"].items():
            dst = root / "samples" / cam / Path(c["img_path"]).name
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(SAMPLES / "frames" / c["img_path"])
            c["img_path"] = dst.name
    path = tmp_path / "nuscenes_infos_val.pkl"
    path.write_bytes(pickle.dumps(data))
    sets = _run(_deployment(path, data_root=root))
    assert len(sets) == 4 and all(b.valid.all() for _fs, b in sets)


def test_undistort_with_an_info_file_source_is_refused_not_silently_wrong(tmp_path):
    # the info file's per-sample intrinsics would replace the undistorted K' in the metas
    path, _ = _write_pkl(tmp_path)
    dep = _deployment(path)
    dep["pipeline"] = {"stages": ["decode", "undistort", {"resize": {"scale": 0.5}}, "normalise", "batch"],
                       "backends": ["cpu"]}
    with pytest.raises(DeploymentError) as e:
        load_deployment(dep)
    assert "pipeline.stages: undistort with an info-file source" in str(e.value)


def test_a_looped_replay_finds_each_frame_sets_sample_again(tmp_path):
    """``run.loop`` (also what ``dvpipe run --frames N`` turns on) replays the file at later capture times:
    every pass's frame sets still get their samples' poses, in the file's sample order (read from the file)."""
    from dvpipe.deploy.sources.infos import deployment_poses

    path, data = _write_pkl(tmp_path)
    tokens = [info["token"] for info in data["infos"]]
    dep = _deployment(path)
    dep["run"] = {"loop": True, "frames": 3 * len(tokens)}
    with Runner(load_deployment(dep), write_outputs=False) as runner:
        poses = deployment_poses(runner.dep)
        got = [poses(rb.frame_set.time_ns)["token"] for rb in runner.batches()]
    assert got == tokens * 3


def test_each_pass_of_a_looped_replay_is_a_new_scene_to_a_temporal_model(tmp_path):
    """BEVFormer's test loop keeps ``prev_bev`` while the sample's scene token equals the previous sample's
    (``prev_frame_info['scene_token']``); a replay's second pass starting at the file's first sample is no
    continuation of its last (the ego pose jumps back), so that first sample must start a scene: expected
    ``prev_bev_exists`` by that rule on the file's own tokens, with every pass starting over."""
    from dvpipe.deploy.sources.infos import deployment_poses
    from dvpipe.mmdet3d import Mmdet3dMetas

    path, data = _write_pkl(tmp_path)
    scenes = [info["scene_token"] for info in data["infos"]]
    n = len(scenes)
    dep = _deployment(path)
    dep["run"] = {"loop": True, "frames": 3 * n}
    with Runner(load_deployment(dep), write_outputs=False) as runner:
        metas = Mmdet3dMetas(deployment_poses(runner.dep))
        got = [metas(rb.batch)[1] for rb in runner.batches()]
    assert [m["prev_bev_exists"] for m in got] == [i % n > 0 and scenes[i % n] == scenes[i % n - 1]
                                                   for i in range(3 * n)]
    assert [m["scene_token"] for m in got[:n]] == scenes  # the file's own tokens in the first pass
    assert [m["sample_idx"] for m in got] == [info["token"] for info in data["infos"]] * 3


def test_an_image_that_is_a_fifo_is_an_unreadable_drop_not_a_hang(tmp_path):
    """An info file's image that is a FIFO (or a device node): open() of a FIFO waits for a writer forever; the
    frame is an `unreadable` drop and the run goes on (the images source filters such files when it lists a folder;
    an info file names its files)."""
    import os
    import shutil
    import threading

    root = tmp_path / "frames"
    shutil.copytree(SAMPLES / "frames", root)
    path, data = _write_pkl(tmp_path)
    victim = root / Path(data["infos"][1]["cams"]["CAM_BACK"]["data_path"]).relative_to(
        Path(data["infos"][1]["cams"]["CAM_BACK"]["data_path"]).parents[1])
    victim.unlink()
    os.mkfifo(victim)
    out: dict = {}

    def run():
        with Runner(load_deployment(_deployment(path, data_root=root)), write_outputs=False) as runner:
            out["sets"] = sum(1 for _ in runner.batches())
            out["result"] = runner.finish()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the run hung on the FIFO"
    acc = out["result"].accounting
    assert out["sets"] == len(data["infos"]) and acc.dropped["CAM_BACK"].get("unreadable") == 1
    assert acc.check() == []


@pytest.mark.parametrize("tolerance_ms, exact", [(59.999, False), (60.0, True), (99.999, True), (100.0, False)])
def test_sync_problem_agrees_with_the_synchroniser_when_the_spread_exceeds_the_gap(tolerance_ms, exact):
    """Two cameras 60 ms apart in samples every 100 ms (the gap from one sample's last image to the next one's
    first, 40 ms, is below the spread): with anchor earliest a set spans tol from its first image, so every
    tolerance from 60 to below 100 ms groups exactly the samples (hand: the next sample starts 100 ms after a
    set's time). The real synchroniser is the reference; sync_problem must say the same."""
    from types import SimpleNamespace

    from dvpipe.deploy.sources.base import Item
    from dvpipe.deploy.sources.infos import sync_problem
    from dvpipe.deploy.sync import Synchroniser
    from dvpipe.mmdet3d._infos import InfoFile

    times = {"a": [0, 100_000_000, 200_000_000], "b": [60_000_000, 160_000_000, 260_000_000]}
    samples = [{"cameras": {c: {"timestamp_ns": ts[k]} for c, ts in times.items()}} for k in range(3)]
    spread_interval = InfoFile.camera_spread_ns(SimpleNamespace(samples=samples, cameras=["a", "b"]))
    cfg = SimpleNamespace(tolerance_ms=tolerance_ms, deadline_ms=100.0, anchor="earliest", on_late="mask",
                          max_reuse_age_ms=0)
    sync = Synchroniser(["a", "b"], cfg, live=False, capacity=10)
    for cam, ts in times.items():
        for k, t in enumerate(ts):
            sync.push(Item(dv.Frame(cam, k, t, b"")))
    for cam in times:
        sync.end(cam, "end of input")
    sets = sync.poll(0)
    grouped = [sorted((c, it.frame.capture_epoch_ns) for c, it in fs.members.items()) for fs in sets]
    assert (grouped == [[("a", a), ("b", b)] for a, b in zip(times["a"], times["b"])]) is exact
    assert spread_interval == (60_000_000, 100_000_000)
    assert (sync_problem(*spread_interval, tolerance_ms) is None) is exact


def test_sync_problem_rounds_the_tolerance_as_the_synchroniser_does():
    """4.1 ms is 4099999.9999999995 ns in floating point; the synchroniser rounds it to 4_100_000 ns, so a 4.1 ms
    spread fits a 4.1 ms tolerance; samples that overlap in time fit none; an anchor camera is not checked."""
    from dvpipe.deploy.sources.infos import sync_problem

    assert sync_problem(4_100_000, 1_000_000_000, 4.1) is None
    assert "no tolerance" in sync_problem(120_000_000, 100_000_000, 110)
    assert sync_problem(120_000_000, 100_000_000, 110, anchor="CAM_FRONT") is None
