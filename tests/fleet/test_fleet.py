"""dvpipe fleet: the index, the worker's processing, shards, resume and a killed worker, on a real Ray cluster.

References, all independent of dvpipe.fleet: frame sets worked out by hand from how the test recordings
are made; the in-process pipeline (``Pipeline.process``) on those sets; for video, every picture decoded
by PyAV straight from the file; and ``dvpipe run``'s runner on the bundled sample. Shards are read back
with pyarrow / tarfile + numpy (``dvpipe.fleet.read``) and the manifests are checked against the index.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from fractions import Fraction

import numpy as np
import pytest
import yaml

from conftest import plain_meta
from dvpipe.deploy import Runner
from dvpipe.testing.deployments import test_pattern as pattern
from dvpipe.testing.deployments import tiny_rig
from dvpipe.errors import ConfigError
from dvpipe.fleet import FrameSetProcessor, build_index, load_fleet_deployment, read, read_manifest, write_index

from tolerances import tol

cv2 = pytest.importorskip("cv2")
pytest.importorskip("pyarrow")  # dvpipe[ray] brings it; Ray itself is needed only from ray_cluster on
W, H = 96, 64
T0 = 1_700_000_000_000_000_000
STAGES = ["decode", {"normalise": {"mean": [128, 128, 128], "std": [64, 64, 64]}}, {"pad": {"size_divisor": 32}}]


def _deployment(path, source: dict, encoding: str = "jpeg") -> str:
    dep = {"name": "fleet-test", "rig": tiny_rig(3, W, H, encoding),
           "pipeline": {"stages": STAGES, "backends": ["cpu"]}, "source": source,
           "sync": {"tolerance_ms": 40, "on_late": "mask", "anchor": "CAM0"}, "latency": {"warmup_sets": 1},
           "outputs": {"metrics": False}}
    path.write_text(yaml.safe_dump(dep))
    return str(path)


def _image_drive(root, k: int, sets: int, *, fast_cam2: bool = False, corrupt=None, missing=None) -> list:
    """Camera folders of <capture ns>.jpg at 10 fps (CAM2 at 20 fps with ``fast_cam2``), and the frame
    sets they must give under sync ``anchor: CAM0, tolerance 40 ms``, worked out from the design:
    ``[(T, {camera: (seq, capture_epoch_ns, path)}, {camera: first word of its reason})]``."""
    files: dict[str, list] = {}
    for c in range(3):
        d = root / f"CAM{c}"
        d.mkdir(parents=True)
        fast = fast_cam2 and c == 2
        period = 50_000_000 if fast else 100_000_000
        files[f"CAM{c}"] = []
        for j in range(sets * (2 if fast else 1)):
            if missing == (c, j):
                continue
            # cameras fire 0-14 ms after the set's time; the 20 fps camera 5 ms, so that its frames between
            # sets are more than the tolerance before the next set's time (dropped, whatever the buffers)
            t = T0 + k * 10**10 + j * period + (5_000_000 if fast else c * 7_000_000)
            ok, buf = cv2.imencode(".jpg", pattern(k * 31 + j * 3 + c, W, H))
            data = buf.tobytes()
            if corrupt == (c, j):
                data = data[: len(data) // 3]
            (d / f"{t}.jpg").write_bytes(data)
            files[f"CAM{c}"].append((t, str(d / f"{t}.jpg")))
    expected = []
    for j in range(sets):
        want = T0 + k * 10**10 + j * 100_000_000
        members, why = {}, {}
        for cam, fl in files.items():
            hit = [(seq, t, p) for seq, (t, p) in enumerate(fl) if abs(t - want) <= tol("frame_match_window").atol]
            if hit:
                members[cam] = hit[0]
            else:
                why[cam] = "missing"
        expected.append((want, members, why))
    if fast_cam2:  # CAM2's last frame comes after CAM0's last set: a set of its own, the others ended
        seq = len(files["CAM2"]) - 1
        t, p = files["CAM2"][seq]
        expected.append((t, {"CAM2": (seq, t, p)}, {"CAM0": "ended", "CAM1": "ended"}))
    return expected


@pytest.fixture(scope="module")
def image_fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet_images")
    drives, expected = [], {}
    for k, kw in enumerate([dict(corrupt=(1, 5)), dict(fast_cam2=True, missing=(1, 3)), {}]):
        d = root / f"drive{k}"
        for i, e in enumerate(_image_drive(d, k, 9, **kw)):
            expected[f"drive{k}/{i:08d}"] = e
        drives.append(str(d))
    dep_path = _deployment(root / "dep.yaml", {"type": "images", "uri": f"{drives[0]}/{{camera}}"})
    dep = load_fleet_deployment(dep_path)
    rows, meta = build_index(dep, drives)
    index = write_index(rows, meta, str(root / "index.parquet"))
    return {"root": root, "dep_path": dep_path, "dep": dep, "drives": drives, "index": index, "rows": rows,
            "meta": meta, "expected": expected}


@pytest.fixture(scope="module")
def image_reference(image_fleet):
    """The in-process pipeline on the worked-out frame sets: set id -> (images, valid, metas)."""
    from dvpipe.deploy.runner import build_pipeline
    from dvpipe.types import Frame, PixelFormat

    pipe, _ = build_pipeline(image_fleet["dep"])
    ref = {}
    for sid, (t, members, why) in image_fleet["expected"].items():
        frames = {}
        for c, (seq, cap, p) in members.items():
            with open(p, "rb") as f:
                frames[c] = Frame(c, seq, cap, f.read(), PixelFormat.ENCODED)
        b = pipe.process(frames)
        metas = []
        for i, cam in enumerate(b.cameras):
            m = dict(b.metas[i], set_time_ns=t, stale=False,
                     sync_skew_ns=members[cam][1] - t if cam in members else None)
            if not b.valid[i]:
                m["drop_reason"] = dict(b.drops)[cam] if cam in members else why[cam]
            metas.append(m)
        ref[sid] = (np.array(b.images, copy=True), b.valid.copy(), metas)
    pipe.close()
    return ref


def _same_metas(a: list, b: list, loose=()) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert sorted(x) == sorted(y)
        for key in x:
            if key in loose:  # a reason sentence: the reference knows its first word
                assert str(x[key]).startswith(str(y[key])), key
            else:
                assert json.dumps(plain_meta(x[key])) == json.dumps(plain_meta(y[key])), key


def _check_against(ref: dict, got: list) -> None:
    assert got
    for sid, images, metas, valid in got:
        rimages, rvalid, rmetas = ref[sid]
        assert images.dtype == rimages.dtype and images.shape == rimages.shape
        assert images.tobytes() == rimages.tobytes(), sid  # bit for bit
        assert np.array_equal(valid, rvalid), sid
        _same_metas(metas, rmetas, loose=("drop_reason",))


# ------------------------------------------------------------------------------ without Ray
def test_the_index_forms_the_expected_frame_sets(image_fleet):
    rows = image_fleet["rows"]
    assert [r["set_id"] for r in rows] == sorted(image_fleet["expected"])
    for r in rows:
        t, members, why = image_fleet["expected"][r["set_id"]]
        assert r["time_ns"] == t
        for cam, src, seq, cap, reason in zip(r["cameras"], r["sources"], r["seqs"], r["capture_epoch_ns"], r["reasons"],
                                                     strict=True):
            if cam in members:
                assert (seq, cap, src) == members[cam] and reason is None
            else:
                assert src is None and reason.startswith(why[cam])
    # drive1's CAM2 runs at 20 fps: the frames between sets are unmatched, the last one is a set of its own
    assert image_fleet["meta"]["drives"]["drive1"]["dropped"] == {"unmatched": 8}


@pytest.mark.parametrize("sync, gap_cam", [({"tolerance_ms": 40, "on_late": "drop"}, "CAM1"),
                                           ({"tolerance_ms": 40, "on_late": "mask", "anchor": "CAM0"}, "CAM0")])
def test_a_camera_dropout_does_not_end_the_drives_index(tmp_path, sync, gap_cam):
    """Two cameras at 10 fps for 2 s, one without frames 5-9. By the synchroniser's rules (sync.py) the
    sets of 5-9 are dropped (``on_late: drop``) or the other camera's frames there are unmatched (anchor
    CAM0 missing them): sets at frames 0-4 and 10-19 either way, as `dvpipe run` forms them. A poll that
    only dropped frames ended the grouping: the index stopped at frame 4."""
    for c in ("CAM0", "CAM1"):
        (tmp_path / c).mkdir()
        for j in range(20):
            if c != gap_cam or j not in range(5, 10):
                ok, buf = cv2.imencode(".jpg", pattern(j, 32, 32))
                (tmp_path / c / f"{T0 + j * 100_000_000}.jpg").write_bytes(buf.tobytes())
    dep = {"name": "dropout", "rig": tiny_rig(2, 32, 32, "jpeg"), "pipeline": {"stages": ["decode"], "backends": ["cpu"]},
           "source": {"type": "images", "uri": f"{tmp_path}/{{camera}}"}, "sync": sync, "outputs": {"metrics": False}}
    (tmp_path / "dep.yaml").write_text(yaml.safe_dump(dep))
    dep = load_fleet_deployment(str(tmp_path / "dep.yaml"))
    rows, _meta = build_index(dep)
    want = [T0 + j * 100_000_000 for j in [*range(5), *range(10, 20)]]
    assert [r["time_ns"] for r in rows] == want
    r = Runner(dep, write_outputs=False)
    try:
        assert [rb.frame_set.time_ns for rb in r.batches()] == want
    finally:
        r.finish()


@pytest.mark.parametrize("seed, sync", [(1, {"tolerance_ms": 40, "on_late": "mask", "anchor": "CAM0"}),
                                        (2, {"tolerance_ms": 30, "on_late": "drop"})])
def test_the_index_and_dvpipe_run_form_the_same_sets_on_a_jittered_multi_rate_drive(tmp_path, seed, sync):
    """Three cameras, two at 10 fps and one at 15 fps (two of its frames can fall in one set's window),
    capture times jittered by up to 25 ms, 10% of the frames missing: the threaded runner, whose readers
    run at their own pace, forms the index's sets frame for frame."""
    import random

    rnd = random.Random(seed)
    for c, period in enumerate((100, 100, 66)):
        (tmp_path / f"CAM{c}").mkdir()
        for j in range(30 * 100 // period):
            if rnd.random() >= 0.1:
                t = T0 + (j * period + rnd.randint(0, 25)) * 1_000_000 + c
                ok, buf = cv2.imencode(".jpg", pattern(j, 32, 32))
                (tmp_path / f"CAM{c}" / f"{t}.jpg").write_bytes(buf.tobytes())
    dep = {"name": "jitter", "rig": tiny_rig(3, 32, 32, "jpeg"), "pipeline": {"stages": ["decode"], "backends": ["cpu"]},
           "source": {"type": "images", "uri": f"{tmp_path}/{{camera}}"}, "sync": sync, "outputs": {"metrics": False}}
    (tmp_path / "dep.yaml").write_text(yaml.safe_dump(dep))
    dep = load_fleet_deployment(str(tmp_path / "dep.yaml"))
    rows, _meta = build_index(dep)
    index = [(r["time_ns"], sorted((c, t) for c, t in zip(r["cameras"], r["capture_epoch_ns"]) if t is not None))
             for r in rows]
    r = Runner(dep, write_outputs=False)
    try:
        runner = [(rb.frame_set.time_ns, sorted((c, it.frame.capture_epoch_ns) for c, it in rb.frame_set.members.items()))
                  for rb in r.batches()]
    finally:
        r.finish()
    assert runner == index


def test_the_workers_processing_equals_the_in_process_pipeline(image_fleet, image_reference):
    proc = FrameSetProcessor(image_fleet["dep"])
    results = list(proc.image_sets(image_fleet["rows"]))
    assert all(r.error is None for r in results)
    _check_against(image_reference, [(r.set_id, r.images, r.metas, r.valid) for r in results])
    corrupt = [r for r in results if not r.valid.all() and r.set_id.startswith("drive0")]
    assert len(corrupt) == 1 and "drop_reason" in corrupt[0].metas[1]


def test_the_sample_deployment_equals_dvpipe_run(samples_dir):
    """``dvpipe run``'s runner on the bundled sample scene and the fleet worker on its index: the same
    sets, batches bit for bit, the same metas (the runner's sync annotations included)."""
    dep = load_fleet_deployment(str(samples_dir / "deployment.yaml"), ["cpu"])
    rows, _meta = build_index(dep)
    results = list(FrameSetProcessor(dep).image_sets(rows))
    r = Runner(dep, write_outputs=False)
    try:
        ref = [(rb.frame_set.time_ns, np.array(rb.batch.images, copy=True), rb.batch.valid.copy(),
                [dict(m) for m in rb.batch.metas]) for rb in r.batches()]
    finally:
        r.finish()
    assert [x.time_ns for x in results] == [t for t, *_ in ref] and len(ref) == 4
    for x, (_t, images, valid, metas) in zip(results, ref, strict=True):
        assert x.images.tobytes() == images.tobytes() and np.array_equal(x.valid, valid)
        _same_metas(x.metas, metas)


def test_an_info_file_index_gives_the_same_sets(image_fleet, image_reference, tmp_path):
    """An mmdet3d v0.x info file listing drive0's images: its samples are the frame sets."""
    import pickle

    from dvpipe.fleet import index_from_infos

    infos = []
    for k in range(9):
        _t, members, _why = image_fleet["expected"][f"drive0/{k:08d}"]
        cams = {c: {"data_path": os.path.relpath(p, tmp_path), "timestamp": cap // 1000,
                    "cam_intrinsic": np.eye(3), "sensor2lidar_rotation": np.eye(3),
                    "sensor2lidar_translation": np.zeros(3)} for c, (_seq, cap, p) in members.items()}
        infos.append({"token": f"s{k}", "timestamp": members["CAM0"][1] // 1000, "cams": cams,
                      "ego2global_translation": [0, 0, 0], "ego2global_rotation": [1, 0, 0, 0]})
    path = tmp_path / "drive0.pkl"
    path.write_bytes(pickle.dumps({"infos": infos[::-1], "metadata": {"version": "v1.0-mini"}}))
    rows, meta = index_from_infos(image_fleet["dep"], str(path))
    assert [r["set_id"] for r in rows] == [f"drive0/{k:08d}" for k in range(9)] and meta["kind"] == "images"
    results = list(FrameSetProcessor(image_fleet["dep"]).image_sets(rows))
    _check_against(image_reference, [(r.set_id, r.images, r.metas, r.valid) for r in results])


def _make_video(path, frames: list, start_ns: int) -> None:
    import av

    tb = Fraction(1, 90_000)
    with av.open(str(path), "w", format="mp4", options={"movie_timescale": "90000"}) as c:
        c.metadata["creation_time"] = np.datetime64(start_ns // 1000, "us").astype(str) + "Z"
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        s.time_base = s.codec_context.time_base = tb
        s.options = {"preset": "ultrafast", "x264-params": "keyint=6:bframes=2:b-adapt=0"}  # B-frames: reordering
        for t, img in frames:
            fr = av.VideoFrame.from_ndarray(img, format="bgr24")
            fr.pts, fr.time_base = round((t - start_ns) * 90_000 / 1e9), tb
            for p in s.encode(fr):
                c.mux(p)
        for p in s.encode(None):
            c.mux(p)


@pytest.fixture(scope="module")
def video_fleet(tmp_path_factory):
    """Three H.264 MP4s with B-frames; CAM2 at 20 fps (its frames between sets are dropped by sync, and
    their access units must still reach the decoder). Reference: every picture decoded by PyAV."""
    av = pytest.importorskip("av")
    from dataclasses import replace

    from dvpipe.pipeline import Pipeline

    root = tmp_path_factory.mktemp("fleet_video")
    start = T0 - T0 % 1_000_000_000
    vdir = root / "video"
    vdir.mkdir()
    for c in range(3):
        period = 50_000_000 if c == 2 else 100_000_000
        _make_video(vdir / f"CAM{c}.mp4", [(start + j * period + c * 2_500_000, pattern(j + 5 * c, W, H))
                                           for j in range(24 if c == 2 else 12)], start)
    dep_path = _deployment(root / "dep.yaml", {"type": "video", "uri": f"{vdir}/{{camera}}.mp4"}, "h264")
    dep = load_fleet_deployment(dep_path)
    rows, meta = build_index(dep)
    decoded = {}
    for c in range(3):
        with av.open(str(vdir / f"CAM{c}.mp4")) as f:
            decoded[f"CAM{c}"] = [fr.to_ndarray(format="bgr24") for fr in f.decode(video=0)]
    raw_rig = replace(dep.rig, cameras=tuple(replace(c, encoding="raw") for c in dep.rig.cameras))
    pipe = Pipeline(raw_rig, list(dep.pipeline.stages), ("cpu",))
    ref = {}
    for row in rows:
        b = pipe.process({c: decoded[c][s] for c, s in zip(row["cameras"], row["seqs"]) if s is not None})
        ref[row["set_id"]] = (np.array(b.images, copy=True), b.valid.copy())
    pipe.close()
    return {"root": root, "dep_path": dep_path, "dep": dep, "rows": rows, "meta": meta, "reference": ref,
            "index": write_index(rows, meta, str(root / "index.parquet"))}


def test_a_video_drive_is_decoded_in_order_and_equals_a_plain_decode(video_fleet):
    rows, meta = video_fleet["rows"], video_fleet["meta"]
    assert meta["kind"] == "video" and meta["drives"]["fleet-test"]["dropped"] == {"unmatched": 11}
    assert [r["seqs"] for r in rows[:3]] == [[0, 0, 0], [1, 1, 2], [2, 2, 4]]
    assert rows[-1]["seqs"] == [None, None, 23]  # CAM2's last frame: after the others' last set
    results = list(FrameSetProcessor(video_fleet["dep"]).video_drive(rows))
    assert [r.error for r in results] == [None] * len(rows)
    assert all(list(r.valid) == [s is not None for s in row["seqs"]] for r, row in zip(results, rows, strict=True))
    for row, res in zip(rows, results, strict=True):
        images, valid = video_fleet["reference"][row["set_id"]]
        assert res.images.tobytes() == images.tobytes() and np.array_equal(res.valid, valid), row["set_id"]


def test_video_segments_with_frames_dropped_by_sync_equal_a_plain_decode(video_fleet):
    """The drive cut into keyframe-aligned segments of about 5 sets (tests/fleet/test_segments.py has
    the rule): CAM2's unmatched frames between sets still reach its decoder (its keyframes fall between
    sets), the last segment is CAM2's final set alone (the other cameras are not opened), and each set
    is in exactly one segment."""
    from dvpipe.fleet import plan_shards

    rows = video_fleet["rows"]
    shards = plan_shards(rows, 64, 5)
    assert len(shards) >= 3 and [r["set_id"] for sh in shards for r in sh] == [r["set_id"] for r in rows]
    assert [r["seqs"] for r in shards[-1]] == [[None, None, 23]]
    proc = FrameSetProcessor(video_fleet["dep"])
    for sh in shards[::-1]:  # one worker, segments out of order: every segment restarts the decoders
        for row, res in zip(sh, proc.video_drive(sh), strict=True):
            images, valid = video_fleet["reference"][row["set_id"]]
            assert res.error is None and np.array_equal(res.valid, valid), row["set_id"]
            assert res.images.tobytes() == images.tobytes(), row["set_id"]


def test_progress_line_has_an_eta_and_per_worker_rates():
    import io

    from dvpipe.fleet import Progress

    buf = io.StringIO()
    p = Progress(100, stream=buf, every_s=0.0)
    p.t0 -= 10.0  # 10 s into the run
    p.update({"set_ids": ["a"] * 20, "failed": {}, "worker": "h:1", "busy_s": 4.0})
    p.update({"set_ids": ["b"] * 4, "failed": {"x": "why"}, "worker": "h:2", "busy_s": 2.0})
    last = buf.getvalue().strip().splitlines()[-1]
    assert last.startswith("fleet: 25/100 sets (25%)  2.5 sets/s  ETA 30 s  failed 1")
    assert last.endswith("workers: h:1 5.0/s, h:2 2.0/s")


def test_cli_index_and_one_line_errors(image_fleet, tmp_path, capsys):
    from dvpipe.cli import main

    out = tmp_path / "i.parquet"
    assert main(["fleet", "index", image_fleet["dep_path"], "--drives", *image_fleet["drives"], "-o", str(out)]) == 0
    assert "28 frame sets (images)" in capsys.readouterr().out
    from dvpipe.fleet import read_index

    assert read_index(str(out))[0] == image_fleet["rows"]
    assert main(["fleet", image_fleet["dep_path"], "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--index INDEX.parquet and --out DIR are required" in err[0]
    with pytest.raises(ConfigError, match="no such file"):
        read_index(str(tmp_path / "none.parquet"))


def test_an_index_with_the_old_capture_ns_column_reads_back(image_fleet, tmp_path):
    import pyarrow.parquet as pq

    from dvpipe.fleet import read_index

    table = pq.read_table(image_fleet["index"])
    old = table.rename_columns(["capture_ns" if n == "capture_epoch_ns" else n for n in table.column_names])
    pq.write_table(old.replace_schema_metadata(table.schema.metadata), tmp_path / "old.parquet")
    assert read_index(str(tmp_path / "old.parquet"))[0] == image_fleet["rows"]


# ------------------------------------------------------------------------------ on a real Ray cluster
# (the ray_cluster fixture is conftest's)
def _read_all(out) -> list:
    return list(read(str(out), with_valid=True))


def _exactly_once(image_fleet, manifest) -> None:
    ids = [s for sh in manifest["shards"] for s in sh["set_ids"]]
    failed = [s for sh in manifest["shards"] for s in sh["failed"]]
    assert len(ids) == len(set(ids)) and not set(ids) & set(failed)
    assert sorted(ids + failed) == sorted(r["set_id"] for r in image_fleet["rows"])
    assert manifest["complete"] and manifest["written"] == len(ids) and not manifest["duplicates"]


@pytest.fixture(scope="module")
def first_run(ray_cluster, image_fleet, tmp_path_factory):
    from dvpipe import fleet

    out = tmp_path_factory.mktemp("fleet_out")
    gone = image_fleet["rows"][10]["sources"][0]  # indexed, then deleted: that set fails with its reason
    os.rename(gone, gone + ".away")
    try:
        res = fleet.run(image_fleet["dep_path"], image_fleet["index"], str(out), workers=2, shard_size=4)
    finally:
        os.rename(gone + ".away", gone)
    return out, res, image_fleet["rows"][10]["set_id"]


def test_fleet_run_writes_every_set_once_equal_to_the_in_process_pipeline(first_run, image_fleet, image_reference):
    out, res, gone_id = first_run
    m = read_manifest(str(out))
    _exactly_once(image_fleet, m)
    assert list(m["failed"]) == [gone_id] and m["failed"][gone_id].startswith("cannot read ")
    import hashlib

    for sh in m["shards"]:  # each shard manifest describes its file as it is on disk
        with open(os.path.join(out, "shards", sh["file"]), "rb") as f:
            data = f.read()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (sh["bytes"], sh["sha256"])
    got = _read_all(out)
    assert len(got) == len(image_fleet["rows"]) - 1
    _check_against(image_reference, got)
    # per-step statistics merged across both workers: every written set, less each worker's warm-up set
    workers = m["workers"]
    assert len(workers) == 2 and sum(w["sets"] for w in workers.values()) == m["written"]
    assert res.latency.stats.batches + res.latency.warmup == m["written"]
    stats = res.latency.stats
    assert stats.cameras == ["CAM0", "CAM1", "CAM2"] and 3 * stats.batches - 3 <= stats.step("read").count <= 3 * stats.batches  # 3 slots have no frame
    assert m["latency"]["schema"] == "dvpipe.latency/1" and m["latency"]["batches"] == stats.batches
    assert "decode" in res.latency.report() and "warm-up" in res.latency.report()


def test_tar_shards_hold_the_same_sets(ray_cluster, image_fleet, image_reference, tmp_path):
    from dvpipe import fleet

    res = fleet.run(image_fleet["dep_path"], image_fleet["index"], str(tmp_path / "tar"), workers=1, shard_size=8,
                    format="tar")
    _exactly_once(image_fleet, res.manifest)
    got = _read_all(tmp_path / "tar")
    assert [g[0] for g in got] == [r["set_id"] for r in image_fleet["rows"]]  # shard order, then set order
    _check_against(image_reference, got)


def test_rerun_resumes_skips_complete_shards_and_redoes_partial_ones(first_run, image_fleet, image_reference):
    from dvpipe import fleet

    out, res, gone_id = first_run
    shards = os.path.join(out, "shards")
    before = {f: os.path.getsize(os.path.join(shards, f)) for f in os.listdir(shards)}
    os.unlink(os.path.join(shards, "shard-00001.json"))  # data renamed, manifest never written
    with open(os.path.join(shards, "shard-00004.parquet"), "r+b") as f:  # a shard that does not match its manifest
        f.truncate(100)
    with open(os.path.join(shards, "shard-00005.parquet.tmp-999999"), "wb") as f:  # a killed writer's leftover
        f.write(b"partial")
    res2 = fleet.run(image_fleet["dep_path"], image_fleet["index"], str(out), workers=1, shard_size=4)
    assert res2.processed_shards == 2 and res2.skipped_shards == len(before) // 2 - 2  # shards 1 and 4
    m = read_manifest(str(out))
    _exactly_once(image_fleet, m)
    assert list(m["failed"]) == [gone_id]  # its shard is complete (the failure is its account): not redone
    assert sorted(os.listdir(shards)) == sorted(before)  # no temporary file left, nothing added
    _check_against(image_reference, _read_all(out))
    with pytest.raises(ConfigError, match="another deployment, backends or format"):
        fleet.run(image_fleet["dep_path"], image_fleet["index"], str(out), shard_size=4, format="tar")


def test_an_interrupted_runs_folder_is_refused_to_another_deployment_and_a_new_plan_leaves_no_old_shards(
        ray_cluster, image_fleet, tmp_path):
    """docs/fleet.md: an ``--out`` holding another deployment's outputs is refused -- also when the run
    that wrote them was interrupted (no run manifest yet: it is written last). A re-run with another shard
    size leaves only its own shards: the folder read directly (every shard file) holds each set once."""
    import pyarrow.parquet as pq

    from dvpipe import fleet

    out = tmp_path / "out"
    fleet.run(image_fleet["dep_path"], image_fleet["index"], str(out), workers=1, shard_size=4)
    os.unlink(out / "manifest.json")  # the state a Ctrl-C leaves: shards written, no run manifest
    other = yaml.safe_load(open(image_fleet["dep_path"]))
    other["name"] = "another-deployment"
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    before = sorted(os.listdir(out / "shards"))
    with pytest.raises(ConfigError, match="another deployment, backends or format"):
        fleet.run(str(tmp_path / "other.yaml"), image_fleet["index"], str(out), workers=1, shard_size=4)
    assert sorted(os.listdir(out / "shards")) == before  # nothing of the first run touched
    res = fleet.run(image_fleet["dep_path"], image_fleet["index"], str(out), workers=1, shard_size=16)
    _exactly_once(image_fleet, res.manifest)
    files = sorted(f for f in os.listdir(out / "shards") if f.endswith(".parquet"))
    assert files == [sh["file"] for sh in res.manifest["shards"]]
    ids = [i for f in files for i in pq.read_table(out / "shards" / f, columns=["set_id"]).column("set_id").to_pylist()]
    assert sorted(ids) == sorted(i for sh in res.manifest["shards"] for i in sh["set_ids"])
    assert len(ids) == len(set(ids))


def test_killing_a_worker_mid_shard_loses_and_duplicates_nothing(ray_cluster, image_fleet, image_reference,
                                                                 tmp_path):
    from dvpipe import fleet

    out = tmp_path / "killed"
    hold = tmp_path / "hold"
    hold.write_text("")
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=fleet.run(
        image_fleet["dep_path"], image_fleet["index"], str(out), workers=2, shard_size=4, hold_path=str(hold))))
    t.start()
    shards = out / "shards"
    claim = None
    for _ in range(3000):  # until a worker parks inside a shard (it cannot finish while ``hold`` exists)
        claims = sorted(shards.glob("*.claim-*")) if shards.exists() else []
        if claims:
            claim = claims[0]
            break
        time.sleep(0.02)
    assert claim is not None, "no worker started a shard"
    victim = int(claim.name.rsplit("-", 1)[1])
    shard = int(claim.name.split("-")[1].split(".")[0])
    os.kill(victim, signal.SIGKILL)
    hold.unlink()
    t.join(timeout=300)
    assert "res" in box
    m = read_manifest(str(out))
    _exactly_once(image_fleet, m)
    redone = next(s for s in m["shards"] if s["shard"] == shard)
    assert redone["attempts"] >= 2 and not redone["worker"].endswith(f":{victim}")
    assert not list(shards.glob("*.tmp-*")) and not list(shards.glob("*.claim-*"))
    _check_against(image_reference, _read_all(out))


def test_cli_runs_a_video_drive_on_ray(ray_cluster, video_fleet, tmp_path, capsys):
    from dvpipe.cli import main

    out = tmp_path / "vout"
    assert main(["fleet", video_fleet["dep_path"], "--index", video_fleet["index"], "--out", str(out),
                 "--segment-size", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--segment-size must be >= 0" in err[0]
    rc = main(["fleet", video_fleet["dep_path"], "--index", video_fleet["index"], "--out", str(out),
               "--workers", "2", "--format", "tar", "--segment-size", "5", "--quiet"])
    text = capsys.readouterr().out
    assert rc == 0 and f"{len(video_fleet['rows'])} of {len(video_fleet['rows'])} frame sets written, 0 failed" in text
    m = read_manifest(str(out))
    assert len(m["shards"]) >= 2 and m["complete"]  # one recording in keyframe-aligned segments
    assert [s["segment"]["first_set"] for s in m["shards"]] == [s["set_ids"][0] for s in m["shards"]]
    got = list(read(str(out), with_valid=True))
    assert [g[0] for g in got] == [r["set_id"] for r in video_fleet["rows"]]
    for sid, images, _metas, valid in got:
        rimages, rvalid = video_fleet["reference"][sid]
        assert images.tobytes() == rimages.tobytes() and np.array_equal(valid, rvalid), sid


def test_the_local_cluster_listens_on_loopback_only(ray_cluster):
    """Tests and ``dvpipe fleet`` without --address start Ray on 127.0.0.1, not on the interface address."""
    import ray

    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
