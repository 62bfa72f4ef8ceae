"""Keyframe-aligned video segments: one recording split over several workers, bit for bit the same.

Media are made here with real encoders (PyAV's libx264 / libx265; pictures from
``tools/make_test_media.py``'s ``frame_image``): two cameras per rig, 64x48, 40 frames each at
10 fps, B-frames, short GOPs of different lengths per camera (so that their keyframes do not line
up), in three flavours: H.264 closed GOPs (IDR), H.264 ``open-gop=1`` (recovery-point I pictures
with leading B pictures that reference the previous GOP) and H.265 ``open-gop=1`` (CRA with RASL
pictures).

References, independent of dvpipe.fleet: keyframes and presentation times read from the files'
packets with PyAV (``packet.is_keyframe``, ``pts``); every picture decoded by PyAV from the start
of the file (FFmpeg's own decode) run through the in-process ``Pipeline`` (raw rig); and the fleet
worker's own whole-recording pass (the issue's "processing it in one go") for the metas.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import plain_meta
from dvpipe.testing.deployments import tiny_rig
from dvpipe.fleet import FrameSetProcessor, build_index, load_fleet_deployment, plan_shards, read_index, write_index
from dvpipe.fleet._run import video_segments

av = pytest.importorskip("av")
pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parents[2]
W, H = 64, 48
N = 40
START = 1_700_000_000_000_000_000
STAGES = ["decode", {"normalise": {"mean": [128, 128, 128], "std": [64, 64, 64]}}]


def _media():
    spec = importlib.util.spec_from_file_location("make_test_media", ROOT / "tools" / "make_test_media.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: flavour -> (encoder, container, per-camera encoder options)
FLAVOURS = {
    "h264_closed": ("libx264", "mp4", [
        {"x264-params": "keyint=7:min-keyint=7:scenecut=0:bframes=2:b-adapt=0:open-gop=0"},
        {"x264-params": "keyint=5:min-keyint=5:scenecut=0:bframes=2:b-adapt=0:open-gop=0"}]),
    "h264_open": ("libx264", "matroska", [
        {"x264-params": "keyint=8:min-keyint=8:scenecut=0:bframes=3:b-adapt=0:open-gop=1"},
        {"x264-params": "keyint=6:min-keyint=6:scenecut=0:bframes=2:b-adapt=0:open-gop=1"}]),
    "h265_open": ("libx265", "mp4", [
        {"x265-params": "keyint=8:min-keyint=8:scenecut=0:bframes=3:open-gop=1:log-level=error"},
        {"x265-params": "keyint=6:min-keyint=6:scenecut=0:bframes=2:open-gop=1:log-level=error"}]),
}


def _encode(path: Path, codec: str, fmt: str, options: dict, cam: int, frame_image) -> None:
    tb = Fraction(1, 1000)
    with av.open(str(path), "w", format=fmt) as c:
        c.metadata["creation_time"] = np.datetime64(START // 1000, "us").astype(str) + "Z"
        s = c.add_stream(codec, rate=10)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        s.time_base = s.codec_context.time_base = tb
        s.options = dict(options, preset="ultrafast") if codec == "libx264" else dict(options)
        for j in range(N):
            fr = av.VideoFrame.from_ndarray(frame_image(j + 50 * cam, W, H), format="bgr24")
            fr.pts, fr.time_base = j * 100 + 3 * cam, tb  # cam1 3 ms after cam0: one set per frame pair
            for p in s.encode(fr):
                c.mux(p)
        for p in s.encode(None):
            c.mux(p)


#: x264 intra refresh (gradual decoder refresh): recovery-point SEIs with a count > 0, one IDR
INTRA_REFRESH = ("libx264", "mp4", [{"x264-params": "keyint=8:scenecut=0:bframes=0:intra-refresh=1"}] * 2)


def _make_flavour(root: Path, flavour: str, frame_image, spec=None) -> dict:
    codec, fmt, opts = spec or FLAVOURS[flavour]
    ext = "mkv" if fmt == "matroska" else "mp4"
    vdir = root / flavour
    vdir.mkdir()
    for c in range(2):
        _encode(vdir / f"CAM{c}.{ext}", codec, fmt, opts[c], c, frame_image)
    enc = "h264" if codec == "libx264" else "h265"
    dep = {"name": flavour, "rig": tiny_rig(2, W, H, enc), "pipeline": {"stages": STAGES, "backends": ["cpu"]},
           "source": {"type": "video", "uri": f"{vdir}/{{camera}}.{ext}"},
           "sync": {"tolerance_ms": 40, "on_late": "mask", "anchor": "CAM0"}, "outputs": {"metrics": False}}
    (root / f"{flavour}.yaml").write_text(yaml.safe_dump(dep))
    return {"dep_path": str(root / f"{flavour}.yaml"), "files": {f"CAM{c}": vdir / f"CAM{c}.{ext}" for c in range(2)}}


def _packets(path: Path) -> list[tuple[int, bool]]:
    """``(capture ns, keyframe)`` of every packet, from the container (PyAV), decode order."""
    out = []
    with av.open(str(path)) as c:
        for p in c.demux(video=0):
            if p.size:
                out.append((START + int(round(float(p.pts * p.time_base) * 1e9)), bool(p.is_keyframe)))
    return out


def ffmpeg_reference(files: dict, dep, rows) -> dict:
    """The independent reference per frame set: each camera's file decoded by FFmpeg itself
    (``container.decode``, matched by pts), through the in-process ``Pipeline`` on a raw-BGR rig.
    Returns ``{set_id: (images, valid)}``, copies."""
    from dvpipe.pipeline import Pipeline

    decoded = {}
    for cam, path in files.items():
        with av.open(str(path)) as f:
            decoded[cam] = {START + int(round(float(fr.pts * fr.time_base) * 1e9)): fr.to_ndarray(format="bgr24")
                            for fr in f.decode(video=0)}
    raw_rig = replace(dep.rig, cameras=tuple(replace(c, encoding="raw") for c in dep.rig.cameras))
    pipe = Pipeline(raw_rig, list(dep.pipeline.stages), ("cpu",))
    ref = {}
    for row in rows:
        b = pipe.process({c: decoded[c][t] for c, t in zip(row["cameras"], row["capture_epoch_ns"]) if t is not None})
        ref[row["set_id"]] = (np.array(b.images, copy=True), b.valid.copy())
    pipe.close()
    return ref


@pytest.fixture(scope="module", params=list(FLAVOURS))
def drive(request, tmp_path_factory):
    media = _media()
    root = tmp_path_factory.mktemp(f"seg_{request.param}")
    made = _make_flavour(root, request.param, media.frame_image)
    dep = load_fleet_deployment(made["dep_path"])
    rows, meta = build_index(dep)
    index = write_index(rows, meta, str(root / "index.parquet"))
    ref = ffmpeg_reference(made["files"], dep, rows)
    whole = {r.set_id: r for r in FrameSetProcessor(dep).video_drive(rows)}
    return {"flavour": request.param, "dep": dep, "rows": rows, "index": index, "files": made["files"],
            "reference": ref, "whole": whole, "dep_path": made["dep_path"]}


def _nal_types(path: Path, flavour: str) -> list[set]:
    """NAL unit types per packet (decode order), from FFmpeg's Annex B filter, parsed here."""
    h264 = flavour.startswith("h264")
    out = []
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        bsf = av.BitStreamFilterContext("h264_mp4toannexb" if h264 else "hevc_mp4toannexb", s)
        for pk in list(c.demux(s)):
            for q in bsf.filter(pk if pk.size else None):
                b = bytes(q)
                starts = [i + 3 for i in range(len(b) - 3) if b[i:i + 3] == b"\x00\x00\x01"]
                out.append({(b[i] & 0x1F) if h264 else ((b[i] >> 1) & 0x3F) for i in starts})
    return out


def test_the_media_have_the_gop_structures_the_tests_rely_on(drive):
    for path in drive["files"].values():
        types = _nal_types(path, drive["flavour"])
        if drive["flavour"] == "h264_closed":  # IDR (5) every GOP, B-frames reorder (checked by pts below)
            assert sum(5 in t for t in types) >= 5
        elif drive["flavour"] == "h264_open":  # one IDR, then recovery-point I pictures (SEI 6 + slice 1)
            assert sum(5 in t for t in types) == 1 and sum({1, 6} <= t for t in types) >= 4
            assert sum(7 in t for t in types) == 1  # parameter sets with the IDR only
        else:  # CRA (21) keyframes with RASL leading pictures (8/9)
            assert sum(21 in t for t in types) >= 4 and any(t & {8, 9} for t in types)
        pts = [t for t, _ in _packets(path)]
        assert pts != sorted(pts)  # decode order is not presentation order


def test_the_index_marks_starts_where_every_camera_has_a_keyframe_at_or_before_its_frame(drive):
    rows = drive["rows"]
    assert len(rows) == N and all(s is not None for r in rows for s in r["seqs"])
    pk = {cam: _packets(p) for cam, p in drive["files"].items()}
    keys = {cam: sorted(t for t, k in v if k) for cam, v in pk.items()}
    assert all(len(k) >= 5 for k in keys.values())  # short GOPs: several keyframes per camera
    for r in rows:
        for k, cam in enumerate(r["cameras"]):
            t = r["capture_epoch_ns"][k]
            latest = max(x for x in keys[cam] if x <= t)  # the container's latest keyframe at or before it
            assert r["key_ns"][k] == latest, (r["set_id"], cam)
            # decode-only pictures: those the file has after that keyframe (decode order) presented before t
            after = pk[cam][[x for x, _ in pk[cam]].index(latest):]
            assert r["lead"][k] == sum(1 for x, _ in after if x < t), (r["set_id"], cam)
        assert r["cut"]
    # GOPs of 7 and 5 (or 8 and 6) frames: the sets where both cameras' frames are keyframes are rarer
    both = [r["index"] for r in rows if r["lead"] == [0, 0]]
    assert both and len(both) < len(rows) // 3


def test_segments_cover_every_set_once_and_prefer_cheap_starts(drive):
    rows = drive["rows"]
    shards = plan_shards(rows, 64, 10)
    assert len(shards) >= 3
    flat = [r["set_id"] for sh in shards for r in sh]
    assert flat == [r["set_id"] for r in rows]  # in order, each once
    for sh in shards[1:]:
        assert sh[0]["cut"] and max(sh[0]["lead"]) <= 10 and (7 <= len(sh) <= 13 or sh is shards[-1])
    starts = [sh[0]["index"] for sh in shards]
    for a, b in zip(starts, starts[1:]):  # the cheapest start of its window (size 10 +- 2 after the previous)
        window = [r for r in rows if a + 8 <= r["index"] <= a + 12 and r["cut"] and max(r["lead"]) <= 10]
        assert sum(rows[b]["lead"]) == min(sum(r["lead"]) for r in window)
    assert video_segments(rows, 0) == [0] and plan_shards(rows, 64, 0) == [rows]


@pytest.mark.parametrize("size", [4, 9])
def test_each_segment_decodes_bit_for_bit_as_the_whole_recording(drive, size):
    """Segments processed by one worker in reverse order (its decoders restart at every segment),
    compared with FFmpeg's decode of the whole file and the worker's own whole-recording pass."""
    shards = plan_shards(drive["rows"], 64, size)
    assert len(shards) >= (3 if size == 9 else 4)  # size 4: only starts with at most 4 decode-only pictures
    proc = FrameSetProcessor(drive["dep"])
    got = {}
    starts = {}
    for sh in reversed(shards):
        for r in proc.video_drive(sh):
            assert r.error is None, (r.set_id, r.error)
            got[r.set_id] = r
        starts[sh[0]["set_id"]] = dict(proc.segment_start)
    assert sorted(got) == sorted(r["set_id"] for r in drive["rows"])
    for sid, r in got.items():
        images, valid = drive["reference"][sid]
        assert r.images.tobytes() == images.tobytes() and np.array_equal(r.valid, valid), sid
        w = drive["whole"][sid]
        assert r.images.tobytes() == w.images.tobytes()
        assert json.dumps(plain_meta(r.metas)) == json.dumps(plain_meta(w.metas)), sid
    by_id = {r["set_id"]: r for r in drive["rows"]}
    for sid, st in starts.items():
        row = by_id[sid]
        if row["index"] == 0:
            assert st == {}
            continue
        for k, cam in enumerate(row["cameras"]):
            assert st[cam]["keyframe_ns"] == row["key_ns"][k] and st[cam]["decode_only"] == row["lead"][k]
            # demuxing starts at the keyframe itself: FFmpeg's backward seek lands on the latest keyframe at
            # or before the target, and the target is that keyframe's own timestamp
            assert st[cam]["seeked"] and st[cam]["demuxed_only"] == 0, (sid, cam)


def test_a_seek_that_lands_after_the_keyframe_falls_back_to_the_start(drive):
    """A demuxer that lands past the segment's keyframe (forced here: the seek aims at the next one):
    the recording is read from its start instead, the units before the keyframe are discarded."""
    from dvpipe.deploy.sources import open_source
    from dvpipe.fleet._process import _Stream
    from dvpipe.fleet._seek import SeekingVideoFile

    dep = drive["dep"]
    cam = "CAM0"
    pk = _packets(drive["files"][cam])
    keys = sorted(t for t, k in pk if k)
    row = next(r for r in drive["rows"] if r["index"] > 0 and r["key_ns"][0] == keys[2])
    cfg = replace(dep.camera(cam).source, uri=str(drive["files"][cam]))

    def plain():
        src = open_source(dep.rig[cam], cfg)
        src.open()
        return src

    src = SeekingVideoFile(dep.rig[cam], cfg, keys[3])
    src.open()
    assert src.seeked
    st = _Stream(src, "h264" if "h264" in drive["flavour"] else "h265", keys[2], plain)
    held, item = st.take(row["seqs"][0], row["capture_epoch_ns"][0])
    assert item is not None and item.frame.capture_epoch_ns == row["capture_epoch_ns"][0] and item.frame.seq == row["seqs"][0]
    assert not st.seeked and st.demuxed_only == [t for t, _ in pk].index(keys[2])
    units = [u for h in held + [item] for u in h.frame.data.units]
    assert units[0] == "reset" and units[1].keyframe and units[1].pts_ns + START == keys[2]
    st.src.close()


def test_an_index_without_segment_columns_keeps_a_drive_in_one_shard(drive, tmp_path):
    import pyarrow.parquet as pq

    t = pq.read_table(drive["index"])
    old = t.drop_columns(["cut", "key_ns", "lead"])
    path = tmp_path / "old.parquet"
    pq.write_table(old, path)
    rows, _ = read_index(str(path))
    assert [r["cut"] for r in rows] == [True] + [False] * (len(rows) - 1)
    assert plan_shards(rows, 64, 4) == [rows]
    proc = FrameSetProcessor(drive["dep"])
    bad = list(proc.video_drive(rows[5:]))  # not a start the index names: refused, with the reason
    assert all(r.error and "cannot start a segment" in r.error for r in bad)


def test_gradual_refresh_points_are_not_segment_starts(tmp_path):
    """x264 ``intra-refresh``: the container flags every refresh start as a keyframe, but its recovery-point
    SEI says the pictures are right only ``recovery_frame_cnt`` frames later (x264 encoder.c:
    ``time_to_recovery = open_gop ? 0 : min(mb_width - 1, keyint_max) + bframes - 1``, 2 here for 64x48,
    keyint 8, no B-frames). A segment may only start from the one IDR, and not further than
    ``segment_size`` pictures after it."""
    from dvpipe.fleet._index import _recovery_frame_cnt

    made = _make_flavour(tmp_path, "h264_ir", _media().frame_image, INTRA_REFRESH)
    pk = _packets(made["files"]["CAM0"])
    assert sum(k for _, k in pk) >= 4  # flagged keyframes beyond the IDR
    with av.open(str(made["files"]["CAM0"])) as c:
        s = c.streams.video[0]
        bsf = av.BitStreamFilterContext("h264_mp4toannexb", s)
        seis = [b[i + 3:] for p in list(c.demux(s)) for q in bsf.filter(p if p.size else None)
                for b in [bytes(q)] for i in range(len(b) - 3) if b[i:i + 3] == b"\x00\x00\x01" and b[i + 3] & 0x1F == 6]
    counts = [x for x in (_recovery_frame_cnt(n) for n in seis) if x is not None]
    assert len(counts) >= 4 and set(counts) == {min(W // 16 - 1, 8) + 0 - 1}
    dep = load_fleet_deployment(made["dep_path"])
    rows, _ = build_index(dep)
    assert all(r["key_ns"] == [START, START + 3_000_000] for r in rows)  # the IDR: the only start
    assert [r["lead"][0] for r in rows] == list(range(len(rows)))
    shards = plan_shards(rows, 64, 8)
    assert len(shards) >= 2 and all(max(sh[0]["lead"]) <= 8 for sh in shards)
    ref = ffmpeg_reference(made["files"], dep, rows)
    proc = FrameSetProcessor(dep)
    for sh in shards:
        for row, r in zip(sh, proc.video_drive(sh), strict=True):
            assert r.error is None and r.images.tobytes() == ref[row["set_id"]][0].tobytes(), row["set_id"]
