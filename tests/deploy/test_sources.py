"""Sources: image sequences (file names, sidecars, fps), video files, elementary streams, the
synthetic camera, looping, replay pacing, fault injection, V4L2. RTSP is in tests/deploy/test_rtsp.py."""
from __future__ import annotations

import glob
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from dvpipe import Camera
from dvpipe.deploy.config import Faults, SourceConfig
from dvpipe.deploy.sources import (Faulty, Looped, Paced, ReplayClock, SourceError, StreamLost, open_source)
from dvpipe.deploy.sources.images import ImageSequence
from dvpipe.deploy.sources.synthetic import SyntheticSource
from dvpipe.deploy.sources.video import ElementaryStream, V4l2Source, VideoFile
from dvpipe.deploy.sources.wrappers import corrupt_data
from dvpipe.testing.deployments import encode_access_units
from dvpipe.video import AccessUnit, is_keyframe
from dvpipe.types import PixelFormat

from tolerances import tol

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"


def read_all(src, limit: int = 1000) -> list:
    src.open()
    out = []
    while len(out) < limit:
        it = src.read()
        if it is None:
            break
        out.append(it)
    src.close()
    return out


def cfg(type_: str, uri=None, **options) -> SourceConfig:
    return SourceConfig(type_, uri, options)


@pytest.fixture
def scene(samples_dir):
    return yaml.safe_load((samples_dir / "scene.yaml").read_text())


def test_image_sequence_reads_capture_times_from_file_names(samples_dir, scene):
    cam = Camera("CAM_BACK", width=1600, height=900)
    items = read_all(ImageSequence(cam, cfg("images", str(samples_dir / "frames" / "CAM_BACK"))))
    expected = [ts["frames"]["CAM_BACK"]["capture_time_ns"] for ts in scene["timestamps"]]
    assert [it.frame.capture_epoch_ns for it in items] == expected
    assert [it.frame.seq for it in items] == list(range(len(expected)))
    assert all(it.frame.data[:3] == b"\xff\xd8\xff" and it.capture_mono_ns is None for it in items)
    assert all(it.read_span_ns[1] >= it.read_span_ns[0] for it in items)


def _write_images(folder: Path, names) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    ok, jpg = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))
    for n in names:
        (folder / n).write_bytes(jpg.tobytes())


def test_nuscenes_style_names_in_microseconds_and_offsets(tmp_path):
    _write_images(tmp_path, ["n015-2018-07-24-11-22-45+0800__CAM_FRONT__1532402927612460.jpg",
                             "n015-2018-07-24-11-22-45+0800__CAM_FRONT__1532402928112460.jpg"])
    c = SourceConfig("images", str(tmp_path), {"unit": "auto"}, offset_ms=2.5)
    src = ImageSequence(Camera("CAM_FRONT", width=8, height=8), c)
    items = read_all(src)
    assert [it.frame.capture_epoch_ns for it in items] == [1532402927612460000 + 2_500_000, 1532402928112460000 + 2_500_000]


@pytest.mark.parametrize("kind", ["yaml", "csv", "kitti"])
def test_sidecar_timestamps(tmp_path, kind):
    _write_images(tmp_path / "img", ["0000000000.png", "0000000001.png", "0000000002.png"])
    for p in (tmp_path / "img").iterdir():
        p.write_bytes(cv2.imencode(".png", np.zeros((8, 8, 3), np.uint8))[1].tobytes())
    if kind == "yaml":
        side = tmp_path / "t.yaml"
        side.write_text(yaml.safe_dump({"0000000000.png": 1000, "0000000001.png": 1100, "0000000002": 1200}))
        expected = [1000 * 10**6, 1100 * 10**6, 1200 * 10**6]
        opts = {"unit": "ms"}
    elif kind == "csv":
        side = tmp_path / "t.csv"
        side.write_text("file,time_us\n0000000000.png,1700000000000000\n0000000001.png,1700000000100000\n"
                        "0000000002.png,1700000000200000\n")
        expected = [1700000000000000000, 1700000000100000000, 1700000000200000000]
        opts = {"unit": "auto"}
    else:
        side = tmp_path / "timestamps.txt"
        side.write_text("2011-09-26 13:02:25.964389445\n2011-09-26 13:02:26.068528219\n2011-09-26 13:02:26.172829438\n")
        expected = [1317042145964389445, 1317042146068528219, 1317042146172829438]
        opts = {}
    src = ImageSequence(Camera("CAM2", width=8, height=8, encoding="png"),
                        cfg("images", str(tmp_path / "img"), timestamps="sidecar", sidecar=str(side), **opts))
    assert [it.frame.capture_epoch_ns for it in read_all(src)] == expected


def test_fps_timestamps_and_errors(tmp_path):
    _write_images(tmp_path, ["a.jpg", "b.jpg", "c.jpg"])
    src = ImageSequence(Camera("C", width=8, height=8),
                        cfg("images", str(tmp_path), timestamps="fps", fps=4.0, start_ns=10))
    assert [it.frame.capture_epoch_ns for it in read_all(src)] == [10, 250_000_010, 500_000_010]
    with pytest.raises(SourceError, match="no digits in the file name"):
        ImageSequence(Camera("C", width=8, height=8), cfg("images", str(tmp_path))).open()
    with pytest.raises(SourceError, match="no images in"):
        ImageSequence(Camera("C", width=8, height=8), cfg("images", str(tmp_path), pattern="*.png")).open()


def test_video_file_pts_give_the_capture_times(samples_dir, scene):
    path = samples_dir / "video" / "CAM_FRONT_LEFT.mp4"
    if not path.exists():
        pytest.skip("samples/video not generated (python tools/make_video_sample.py)")
    items = read_all(VideoFile(Camera("CAM_FRONT_LEFT", width=1600, height=900, encoding="h264"),
                               cfg("video", str(path))))
    expected = [ts["frames"]["CAM_FRONT_LEFT"]["capture_time_ns"] for ts in scene["timestamps"]]
    got = [it.frame.capture_epoch_ns for it in items]
    assert len(got) == len(expected)
    assert max(abs(a - b) for a, b in zip(got, expected)) <= tol("pts_90khz").atol  # pts in 1/90000 s
    first = [u for u in items[0].frame.data.units if isinstance(u, AccessUnit)][0].data
    assert items[0].keyframe and is_keyframe(first, "h264")
    assert first[:4] == b"\x00\x00\x00\x01"  # avcC converted to Annex B


def test_video_file_codec_must_match_the_camera(samples_dir, tmp_path):
    path = samples_dir / "video" / "CAM_FRONT.mp4"
    if not path.exists():
        pytest.skip("samples/video not generated")
    with pytest.raises(SourceError, match="is h264 video but camera C declares h265"):
        VideoFile(Camera("C", width=1600, height=900, encoding="h265"), cfg("video", str(path))).open()
    raw = read_all(VideoFile(Camera("C", width=1600, height=900, encoding="raw"), cfg("video", str(path))), limit=2)
    assert raw[0].frame.pixel_format is PixelFormat.BGR and raw[0].frame.data.shape == (900, 1600, 3)
    with pytest.raises(SourceError, match="cannot open"):
        (tmp_path / "x.mp4").write_bytes(b"not a video")
        VideoFile(Camera("C", width=16, height=16, encoding="h264"), cfg("video", str(tmp_path / "x.mp4"))).open()


@pytest.mark.parametrize("codec", ["h264", "h265"])
def test_elementary_stream(tmp_path, codec):
    aus = encode_access_units(10, 64, 48, codec=codec, gop=5)
    path = tmp_path / f"cam.{codec}"
    path.write_bytes(b"".join(aus))
    items = read_all(ElementaryStream(Camera("C", width=64, height=48, encoding=codec),
                                      cfg("elementary", str(path), codec=codec, fps=20.0, start_ns=7)))
    assert [u.data for it in items for u in it.frame.data.units if isinstance(u, AccessUnit)] == aus
    assert [it.keyframe for it in items] == [k % 5 == 0 for k in range(10)]
    wants = [it.frame.data.want for it in items]  # order keys from the picture order count
    assert wants == sorted(set(wants)) and {it.frame.data.by for it in items} == {"pts"}
    assert [it.frame.capture_epoch_ns for it in items] == [7 + k * 50_000_000 for k in range(10)]


@pytest.mark.parametrize("encoding", ["jpeg", "png", "raw", "h264"])
def test_synthetic_source_renders_each_encoding(encoding):
    cam = Camera("CAM_FRONT", width=80, height=48, encoding=encoding)
    src = SyntheticSource(cam, cfg("synthetic", fps=25.0, cycle=4, frames=6, realtime=False, start_ns=1000))
    items = read_all(src)
    assert len(items) == 6
    assert [it.frame.capture_epoch_ns for it in items] == [1000 + k * 40_000_000 for k in range(6)]
    if encoding == "raw":
        assert items[0].frame.data.shape == (48, 80, 3) and items[0].frame.pixel_format is PixelFormat.BGR
    elif encoding == "h264":
        assert [it.keyframe for it in items] == [True, False, False, False, True, False]
    else:
        img = cv2.imdecode(np.frombuffer(items[1].frame.data, np.uint8), cv2.IMREAD_COLOR)
        assert img.shape == (48, 80, 3) and img.std() > 5  # a scene, not a flat image
    assert items[0].frame.data is items[4].frame.data  # the cycle is rendered once


def test_synthetic_live_camera_is_paced_and_skips_what_it_missed():
    cam = Camera("C", width=32, height=32, encoding="raw")
    src = SyntheticSource(cam, cfg("synthetic", fps=100.0, cycle=2, realtime=True))
    assert src.live
    src.run_start_ns = None
    src.open()
    a = src.read()
    time.sleep(0.05)  # ~5 periods pass without reading: a live camera does not keep them
    b = src.read()
    src.close()
    assert b.frame.capture_epoch_ns - a.frame.capture_epoch_ns >= 40_000_000
    assert b.capture_mono_ns is not None and b.frame.seq == a.frame.seq + 1


def test_looped_recording_continues_capture_times_and_sequence(tmp_path):
    _write_images(tmp_path, ["100.jpg", "200.jpg", "300.jpg"])
    src = Looped(ImageSequence(Camera("C", width=8, height=8), cfg("images", str(tmp_path), unit="ns")))
    items = read_all(src, limit=7)
    assert [it.frame.capture_epoch_ns for it in items] == [100, 200, 300, 400, 500, 600, 700]
    assert [it.frame.seq for it in items] == list(range(7))


def test_looped_recorded_synthetic_camera_starts_each_pass_over():
    """``realtime: false, frames: 3`` under run.loop: 9 frames read are three passes of frames 0, 1, 2,
    captured every 100 ms on (10 fps from start_ns 0; the next pass one period after the last frame),
    seq 0..8 (it ended after one pass: 3 frames)."""
    cam = Camera("C", width=64, height=32)
    src = open_source(cam, cfg("synthetic", None, fps=10.0, cycle=2, frames=3, realtime=False, start_ns=0), loop=True)
    assert isinstance(src, Looped) and not src.live
    items = read_all(src, limit=9)
    assert [it.frame.capture_epoch_ns for it in items] == [k * 100_000_000 for k in range(9)]
    assert [it.frame.seq for it in items] == list(range(9))
    assert [it.frame.data for it in items[3:6]] == [it.frame.data for it in items[:3]]


def test_paced_replay_releases_frames_no_earlier_than_their_capture_offsets(tmp_path):
    _write_images(tmp_path, [f"{k * 20_000_000}.jpg" for k in range(4)])
    clock = ReplayClock(speed=1.0)
    src = Paced(ImageSequence(Camera("C", width=8, height=8), cfg("images", str(tmp_path), unit="ns")), clock)
    src.open()
    from dvpipe.latency import now_ns

    releases = []
    for _ in range(4):
        it = src.read()
        releases.append((now_ns(), it.capture_mono_ns))
    src.close()
    t0 = releases[0][1]
    for k, (got, scheduled) in enumerate(releases):
        assert scheduled == t0 + k * 20_000_000
        assert got >= scheduled  # lower bound only: no speed assertion


def test_open_source_stacks_wrappers():
    cam = Camera("C", width=16, height=16)
    c = SourceConfig("images", "/x", {}, faults=Faults(corrupt=(1,)))
    src = open_source(cam, c, loop=True, clock=ReplayClock())
    assert isinstance(src, Faulty) and isinstance(src.inner, Paced) and isinstance(src.inner.inner, Looped)
    live = open_source(cam, SourceConfig("synthetic", None, {"realtime": True}), loop=True, clock=ReplayClock())
    assert isinstance(live, SyntheticSource)  # a live camera is neither looped nor paced


def test_corrupt_data_breaks_each_kind_of_frame():
    jpg = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))[1].tobytes()
    assert len(corrupt_data(jpg, PixelFormat.ENCODED)) < len(jpg)
    arr = corrupt_data(np.zeros((4, 4, 3), np.uint8), PixelFormat.BGR)
    assert arr.dtype != np.uint8
    au = encode_access_units(1, 32, 32)[0]
    bad = corrupt_data(au, PixelFormat.ENCODED)
    assert len(bad) == len(au) and bad[6:].count(0) == len(au) - 6


def test_faulty_wrapper_open_failures_loss_and_disconnects():
    cam = Camera("C", width=32, height=32, encoding="raw")
    base = SyntheticSource(cam, cfg("synthetic", fps=10.0, cycle=2, frames=8, realtime=False, start_ns=0))
    src = Faulty(base, Faults(fail_open=2, lose=(2,), disconnect=(5,)))
    for attempt in (1, 2):
        with pytest.raises(SourceError, match=f"attempt {attempt}"):
            src.open()
    src.open()
    seqs = []
    while True:
        try:
            it = src.read()
        except StreamLost as e:
            assert "before frame 5" in e.reason
            seqs.append("lost")
            continue
        if it is None:
            break
        seqs.append(it.frame.seq)
    assert seqs == [0, 1, 3, 4, "lost", 6, 7]  # 2 lost in the source, 5 lost with the connection
    with pytest.raises(SourceError, match="does not open"):
        Faulty(base, Faults(fail_open=-1)).open()


def test_v4l2_device_capture():
    devices = sorted(glob.glob("/dev/video*"))
    src = V4l2Source(Camera("USB", width=640, height=480, encoding="raw"),
                     cfg("v4l2", devices[0] if devices else "/dev/video0"))
    if not devices:
        with pytest.raises(SourceError, match="no v4l2 input device|no such V4L2 device"):
            src.open()
        pytest.skip("no V4L2 device on this machine (/dev/video* absent); only the missing-device path was tested")
    try:
        src.open()
    except SourceError as e:  # a device that is there but busy or not a capture device
        pytest.skip(f"V4L2 device {devices[0]} cannot be opened here: {e.reason}")
    try:
        it = src.read()
        assert it is not None and it.frame.data is not None and it.capture_mono_ns is not None
    finally:
        src.close()


class _FakeClock:
    """A monotonic clock (ns) that advances only when a paced source waits on it."""

    def __init__(self):
        self.t = 1_000_000_000
        self.waits_ns: list[int] = []

    def now(self) -> int:
        return self.t

    def wait(self, stop, seconds: float) -> bool:
        ns = int(round(seconds * 1e9))
        self.waits_ns.append(ns)
        self.t += ns
        return False


@pytest.mark.parametrize("codec", ["h264", "h265"])
def test_looped_paced_elementary_stream_never_pauses_between_passes(tmp_path, codec):
    # issue 12.7: an elementary stream counts its capture times on across reopens; Looped added a
    # whole recording span on top, so every pass began one recording-length late (a stall half of
    # the time under realtime pacing). Hand-computed: 4 frames at 10 fps, 6 passes = 24 frames
    # released exactly 100 ms apart, the first one at once.
    aus = encode_access_units(4, 64, 48, codec=codec, gop=2)
    path = tmp_path / f"cam.{codec}"
    path.write_bytes(b"".join(aus))
    fake = _FakeClock()
    clock = ReplayClock(1.0, now=fake.now, wait=fake.wait)
    src = Paced(Looped(ElementaryStream(Camera("C", width=64, height=48, encoding=codec),
                                        cfg("elementary", str(path), codec=codec, fps=10.0, start_ns=5))), clock)
    items = read_all(src, limit=24)
    assert [it.frame.capture_epoch_ns for it in items] == [5 + k * 100_000_000 for k in range(24)]
    assert [it.frame.seq for it in items] == list(range(24))
    assert fake.waits_ns == [100_000_000] * 23
    assert [it.capture_mono_ns for it in items] == [1_000_000_000 + k * 100_000_000 for k in range(24)]


# ------------------------------------------------------------------ deployments: {camera} patterns, rig frames
def _flat_rig(names=("CAM_FRONT", "CAM_FRONT_LEFT")) -> dict:
    return {"cameras": [{"name": n, "width": 8, "height": 8} for n in names]}


def _flat_folder(tmp_path: Path) -> Path:
    """nuScenes' flat ``samples`` layout: every camera's files in one folder, the camera in the name."""
    folder = tmp_path / "sweeps"
    _write_images(folder, [f"n015__{cam}__{t}.jpg" for cam in ("CAM_FRONT", "CAM_FRONT_LEFT")
                           for t in (1532402927612460 + (cam == "CAM_FRONT_LEFT") * 5000, 1532402928112460)])
    return folder


def _dep(source: dict, rig=None) -> dict:
    return {"rig": rig or _flat_rig(), "pipeline": {"stages": ["decode"], "backends": ["cpu"]}, "source": source,
            "outputs": {"metrics": False}}


def test_camera_is_expanded_in_pattern(tmp_path):
    from dvpipe.deploy import load_deployment

    folder = _flat_folder(tmp_path)
    dep = load_deployment(_dep({"type": "images", "uri": str(folder), "pattern": "*__{camera}__*.jpg"}))
    assert not dep.warnings
    for c in dep.cameras:
        assert c.source.options["pattern"] == f"*__{c.name}__*.jpg"
        items = read_all(open_source(dep.rig[c.name], c.source))
        expected = sorted(p for p in glob.glob(str(folder / "*.jpg")) if f"__{c.name}__" in p)
        assert len(items) == len(expected) == 2
        assert [it.frame.capture_epoch_ns for it in items] == [int(Path(p).stem.rsplit("__", 1)[1]) * 1000 for p in expected]


def test_validate_fails_on_a_pattern_that_matches_nothing(tmp_path, capsys):
    from dvpipe.cli import main as cli_main
    from dvpipe.deploy import load_deployment

    folder = _flat_folder(tmp_path)
    with pytest.raises(Exception, match=r"source\.pattern: '\*__CAM_FRONT__\*\.png' matches no file"):
        load_deployment(_dep({"type": "images", "uri": str(folder), "pattern": "*__{camera}__*.png"}))
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(_dep({"type": "images", "uri": str(folder), "pattern": "*__{camera}__*.png"})))
    assert cli_main(["validate", str(p)]) != 0
    cap = capsys.readouterr()
    assert "source.pattern" in cap.out + cap.err


def test_one_file_in_two_cameras_sequences_is_a_warning(tmp_path):
    """``*{camera}*`` for CAM_FRONT also matches CAM_FRONT_LEFT's files (the bug of issue 18)."""
    from dvpipe.deploy import load_deployment

    folder = _flat_folder(tmp_path)
    dep = load_deployment(_dep({"type": "images", "uri": str(folder), "pattern": "*{camera}*.jpg"}))
    (w,) = [w for w in dep.warnings if "image sequences of" in w]
    assert "CAM_FRONT_LEFT" in w and "CAM_FRONT, CAM_FRONT_LEFT" in w and "(and 1 more file)" in w


def test_a_single_sample_rigs_image_and_capture_time_are_used(tmp_path):
    from dvpipe.deploy import load_deployment

    _write_images(tmp_path, ["front.jpg", "left.jpg"])
    rig = {"cameras": [{"name": "CAM_FRONT", "width": 8, "height": 8, "image": "front.jpg",
                        "capture_time_ns": 1532402927612460000},
                       {"name": "CAM_FRONT_LEFT", "width": 8, "height": 8, "image": "left.jpg",
                        "capture_time_ns": 1532402927604799000}]}
    (tmp_path / "rig.yaml").write_text(yaml.safe_dump(rig))
    d = {"rig": "rig.yaml", "pipeline": {"stages": ["decode"], "backends": ["cpu"]}, "outputs": {"metrics": False}}
    (tmp_path / "dep.yaml").write_text(yaml.safe_dump(d))
    dep = load_deployment(tmp_path / "dep.yaml")
    got = {c.name: read_all(open_source(dep.rig[c.name], c.source)) for c in dep.cameras}
    assert {k: [(it.frame.capture_epoch_ns, len(it.frame.data)) for it in v] for k, v in got.items()} == {
        "CAM_FRONT": [(1532402927612460000, (tmp_path / "front.jpg").stat().st_size)],
        "CAM_FRONT_LEFT": [(1532402927604799000, (tmp_path / "left.jpg").stat().st_size)]}
    # a deployment that gives the cameras a source: the rig's frame keys are not used, and it says so
    d["source"] = {"type": "images", "uri": str(tmp_path), "pattern": "front.jpg", "timestamps": "fps"}
    (tmp_path / "dep.yaml").write_text(yaml.safe_dump(d))
    warned = [w for w in load_deployment(tmp_path / "dep.yaml").warnings if "are not used" in w]
    assert len(warned) == 2 and "image: front.jpg" in warned[0]


@pytest.mark.parametrize("camera, message", [
    ({"image": 7}, r"cameras\[0\]\.image: expected an image file name"),
    ({"image": "a.jpg", "capture_time_ns": "soon"}, r"cameras\[0\]\.capture_time_ns: expected an integer"),
    ({"capture_time_ns": 5}, r"cameras\[0\]\.capture_time_ns: given without image"),
])
def test_rig_frame_keys_are_checked(camera, message):
    from dvpipe import Rig
    from dvpipe.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        Rig.from_dict({"cameras": [dict({"name": "CAM_FRONT", "width": 8, "height": 8}, **camera)]})


def test_a_source_thread_waits_on_descriptors_above_1023():
    """select() refuses descriptors above 1023 ("filedescriptor out of range"); a run with many cameras and
    sockets reaches them, so the readers' wait (RTSP client, V4L2 reader) must not use it."""
    import os
    import resource
    import socket

    from dvpipe.deploy.sources.base import wait_readable

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open at most {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    a, b = socket.socketpair()
    high = os.dup2(a.fileno(), 1100)
    try:
        assert high == 1100
        assert not wait_readable(high, 0.01)  # nothing sent yet
        b.send(b"x")
        assert wait_readable(high, 5.0)
    finally:
        os.close(high)
        a.close()
        b.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
