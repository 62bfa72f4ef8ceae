"""The Ray Data forms on a real local Ray cluster: ``fleet.frame_sets`` (tensor columns) and a recording
split into keyframe-aligned segments over two workers by ``fleet.run`` (resumed, and with a worker
killed mid-segment).

References, independent of dvpipe.fleet: frame sets known by construction (every camera fires at the
set's time plus a fixed offset, one file per set), put through the in-process ``Pipeline.process``
with the runner's annotations worked out by hand; Parquet read back with pyarrow alone (the tensor
column's storage, not Ray's reader); for video, every picture decoded by PyAV from the start of the
file (see tests/fleet/test_segments.py, whose media it reuses).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from dvpipe.testing.deployments import test_pattern as pattern
from dvpipe.testing.deployments import tiny_rig
from dvpipe.fleet import build_index, decode_metas, load_fleet_deployment, read, read_manifest, write_index

cv2 = pytest.importorskip("cv2")
pytest.importorskip("pyarrow")
W, H = 64, 48
SETS = 6
T0 = 1_700_000_000_000_000_000
PROFILES = {  # output dtype -> stages
    "uint8": ["decode", {"pad": {"size_divisor": 32}}],
    "float16": ["decode", {"normalise": {"mean": [120, 110, 100], "std": [50, 60, 70], "dtype": "float16"}}],
    "float32": ["decode", {"normalise": {"mean": [128, 128, 128], "std": [64, 64, 64], "to_rgb": True}},
                {"pad": {"size_divisor": 32}}],
}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Two cameras, one JPEG per set: CAM0 at the set's time, CAM1 3 ms after (within the tolerance)."""
    root = tmp_path_factory.mktemp("fleet_columns")
    sets = []
    for j in range(SETS):
        t = T0 + j * 100_000_000
        members = {}
        for c in range(2):
            d = root / "drive" / f"CAM{c}"
            d.mkdir(parents=True, exist_ok=True)
            cap = t + 3_000_000 * c
            ok, buf = cv2.imencode(".jpg", pattern(7 * j + c, W, H))
            (d / f"{cap}.jpg").write_bytes(buf.tobytes())
            members[f"CAM{c}"] = (j, cap, str(d / f"{cap}.jpg"))
        sets.append((t, members))
    deps = {}
    for name, stages in PROFILES.items():
        dep = {"name": "drive", "rig": tiny_rig(2, W, H, "jpeg"), "pipeline": {"stages": stages, "backends": ["cpu"]},
               "source": {"type": "images", "uri": f"{root}/drive/{{camera}}"},
               "sync": {"tolerance_ms": 40, "on_late": "mask", "anchor": "CAM0"}, "outputs": {"metrics": False}}
        (root / f"{name}.yaml").write_text(yaml.safe_dump(dep))
        deps[name] = str(root / f"{name}.yaml")
    rows, meta = build_index(load_fleet_deployment(deps["uint8"]))
    return {"root": root, "sets": sets, "deps": deps, "index": write_index(rows, meta, str(root / "index.parquet"))}


def _reference(dep_path: str, sets: list) -> dict:
    """set id -> (images, valid, metas): ``Pipeline.process`` on the known sets, runner annotations by hand."""
    from dvpipe.deploy.runner import build_pipeline
    from dvpipe.types import Frame, PixelFormat

    pipe, _ = build_pipeline(load_fleet_deployment(dep_path))
    ref = {}
    for j, (t, members) in enumerate(sets):
        frames = {}
        for cam, (seq, cap, path) in members.items():
            with open(path, "rb") as f:
                frames[cam] = Frame(cam, seq, cap, f.read(), PixelFormat.ENCODED)
        b = pipe.process(frames)
        metas = [dict(m, set_time_ns=t, stale=False, sync_skew_ns=members[cam][1] - t)
                 for cam, m in zip(b.cameras, b.metas)]
        ref[f"drive/{j:08d}"] = (np.array(b.images, copy=True), b.valid.copy(), metas)
    pipe.close()
    return ref


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, dict):
        return isinstance(b, dict) and sorted(a) == sorted(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b) or (isinstance(a, (int, float)) and a == b and not isinstance(a, bool))


@pytest.mark.parametrize("dtype", list(PROFILES))
def test_frame_sets_columns_equal_the_in_process_pipeline(ray_cluster, images, dtype):
    from dvpipe import fleet

    ref = _reference(images["deps"][dtype], images["sets"])
    ds = fleet.frame_sets(images["deps"][dtype], images["index"], workers=2, shard_size=2)
    schema = ds.schema()
    assert schema.names == ["set_id", "time_ns", "images", "valid", "metas", "drops", "error"]
    got = sorted(ds.take_all(), key=lambda r: r["set_id"])
    assert [r["set_id"] for r in got] == sorted(ref)
    for r in got:
        rimages, rvalid, rmetas = ref[r["set_id"]]
        assert r["images"].dtype == np.dtype(dtype) == rimages.dtype and r["images"].shape == rimages.shape
        assert r["images"].tobytes() == rimages.tobytes()  # bit for bit
        assert np.array_equal(r["valid"], rvalid) and r["error"] is None and list(r["drops"]) == [None, None]
        metas = decode_metas(r["metas"])
        assert _same(metas, [{k: (list(v) if isinstance(v, tuple) else v) for k, v in m.items()} for m in rmetas])
        assert metas[0]["lidar2img"].dtype == rmetas[0]["lidar2img"].dtype
        assert r["time_ns"] == images["sets"][int(r["set_id"][-8:])][0]


def test_frame_sets_chain_into_write_parquet_and_torch(ray_cluster, images, tmp_path):
    import pyarrow.parquet as pq

    from dvpipe import fleet

    ref = _reference(images["deps"]["float16"], images["sets"])
    gone = images["sets"][4][1]["CAM1"][2]  # indexed, then moved away: that set's row says why
    os.rename(gone, gone + ".away")
    try:
        ds = fleet.frame_sets(images["deps"]["float16"], images["index"], workers=2, shard_size=3)
        ds.write_parquet(str(tmp_path / "pq"))
    finally:
        os.rename(gone + ".away", gone)
    t = pq.read_table(str(tmp_path / "pq")).sort_by("set_id")
    assert t.num_rows == SETS
    col = t.column("images").combine_chunks()
    storage = col.storage if hasattr(col, "storage") else col  # pyarrow alone: the extension's storage
    shape = ref["drive/00000000"][0].shape
    arr = np.asarray(storage.flatten().to_numpy(zero_copy_only=False)).reshape(SETS, *shape)
    assert arr.dtype == np.float16
    for i, sid in enumerate(t.column("set_id").to_pylist()):
        err = t.column("error")[i].as_py()
        if sid == "drive/00000004":
            assert err.startswith("cannot read ") and not arr[i].any()
            # docs/fleet.md: drops is per camera "why it has no image": none has one here
            assert t.column("drops")[i].as_py() == [f"the frame set failed: {err}"] * shape[0]
            continue
        assert err is None and arr[i].tobytes() == ref[sid][0].tobytes(), sid
        assert _same(decode_metas(t.column("metas")[i].as_py())[1]["lidar2img"], ref[sid][2][1]["lidar2img"])
    batch = next(iter(fleet.frame_sets(images["deps"]["float16"], images["index"], shard_size=6)
                      .select_columns(["images", "valid"]).iter_batches(batch_size=SETS, batch_format="numpy")))
    assert batch["images"].dtype == np.float16 and batch["images"].shape == (SETS, *shape)
    assert batch["valid"].dtype == bool and batch["valid"].all()


def test_frame_sets_chain_into_iter_torch_batches(ray_cluster, images):
    torch = pytest.importorskip("torch")
    pytest.importorskip("pydantic", reason="Ray's iter_torch_batches imports ray.train, which needs ray[train]")
    from dvpipe import fleet

    ref = _reference(images["deps"]["uint8"], images["sets"])
    # one shard (one block, one actor): the sets come in index order
    batch = next(iter(fleet.frame_sets(images["deps"]["uint8"], images["index"], shard_size=6)
                      .select_columns(["images"]).iter_torch_batches(batch_size=SETS)))
    assert batch["images"].dtype == torch.uint8
    assert batch["images"].numpy().tobytes() == np.stack([ref[s][0] for s in sorted(ref)]).tobytes()


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    from .test_segments import _make_flavour, _media, ffmpeg_reference

    root = tmp_path_factory.mktemp("fleet_segments_ray")
    made = _make_flavour(root, "h264_open", _media().frame_image)
    dep = load_fleet_deployment(made["dep_path"])
    rows, meta = build_index(dep)
    ref = {set_id: images for set_id, (images, _valid) in ffmpeg_reference(made["files"], dep, rows).items()}
    return {"dep_path": made["dep_path"], "rows": rows, "reference": ref,
            "index": write_index(rows, meta, str(root / "index.parquet"))}


def test_one_recording_in_segments_over_two_workers_is_written_once_bit_for_bit(ray_cluster, video, tmp_path):
    from dvpipe import fleet

    out = tmp_path / "vout"
    assert fleet.run(video["dep_path"], video["index"], str(out), workers=2, segment_size=8).complete
    m = read_manifest(str(out))
    assert m["complete"] and not m["failed"] and m["written"] == len(video["rows"]) and m["segment_size"] == 8
    segs = [s["segment"] for s in m["shards"]]
    assert len(segs) >= 4 and {s["drive"] for s in segs} == {"h264_open"}
    ids = [r["set_id"] for r in video["rows"]]
    pos = 0  # segments tile the recording: each starts where the previous one ended
    for sh, seg in zip(m["shards"], segs):
        assert seg["first_set"] == ids[pos] and sh["set_ids"] == ids[pos:pos + seg["sets"]]
        assert seg["last_set"] == ids[pos + seg["sets"] - 1]
        row = video["rows"][pos]
        if pos:
            assert row["cut"] and {c: s["keyframe_ns"] for c, s in seg["start"].items()} == \
                dict(zip(row["cameras"], row["key_ns"]))
        pos += seg["sets"]
    assert pos == len(ids)
    assert len({s["worker"] for s in m["shards"]}) == 2  # both workers decoded parts of the one recording
    got = list(read(str(out)))
    assert [g[0] for g in got] == ids
    for sid, images, _metas in got:
        assert images.tobytes() == video["reference"][sid].tobytes(), sid
    # resume: a segment whose manifest is gone is redone alone (its decoders start at its keyframes again)
    os.unlink(out / "shards" / "shard-00002.json")
    res2 = fleet.run(video["dep_path"], video["index"], str(out), workers=2, segment_size=8)
    assert (res2.processed_shards, res2.skipped_shards) == (1, len(segs) - 1) and res2.complete
    for sid, images, _metas in read(str(out)):
        assert images.tobytes() == video["reference"][sid].tobytes(), sid
    # the column form of the same segments: the same pictures
    rows = fleet.frame_sets(video["dep_path"], video["index"], workers=2, segment_size=8).take_all()
    assert sorted(r["set_id"] for r in rows) == ids
    for r in rows:
        assert r["error"] is None and r["images"].tobytes() == video["reference"][r["set_id"]].tobytes()


def test_a_worker_killed_mid_segment_loses_and_duplicates_nothing(ray_cluster, video, tmp_path):
    """SIGKILL a worker parked inside a segment: Ray restarts it and retries the segment, whose decoders
    start again at the segment's keyframes; every set once, bit for bit."""
    import signal
    import threading
    import time

    from dvpipe import fleet

    out, hold = tmp_path / "killed", tmp_path / "hold"
    hold.write_text("")
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=fleet.run(
        video["dep_path"], video["index"], str(out), workers=2, segment_size=8, hold_path=str(hold))))
    t.start()
    claim = None
    for _ in range(3000):  # until a worker parks inside a segment other than the drive's first
        claims = sorted(c for c in (out / "shards").glob("*.claim-*") if not c.name.startswith("shard-00000"))\
            if (out / "shards").exists() else []
        if claims:
            claim = claims[0]
            break
        time.sleep(0.02)
    assert claim is not None, "no worker started a segment"
    victim, shard = int(claim.name.rsplit("-", 1)[1]), int(claim.name.split("-")[1].split(".")[0])
    os.kill(victim, signal.SIGKILL)
    hold.unlink()
    t.join(timeout=300)
    assert "res" in box and box["res"].complete
    m = read_manifest(str(out))
    ids = [s for sh in m["shards"] for s in sh["set_ids"]]
    assert ids == [r["set_id"] for r in video["rows"]] and not m["failed"] and not m["duplicates"]
    redone = next(s for s in m["shards"] if s["shard"] == shard)
    assert redone["attempts"] >= 2 and not redone["worker"].endswith(f":{victim}")
    assert not list((out / "shards").glob("*.tmp-*")) and not list((out / "shards").glob("*.claim-*"))
    for sid, images, _metas in read(str(out)):
        assert images.tobytes() == video["reference"][sid].tobytes(), sid
