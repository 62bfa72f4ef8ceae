"""dvpipe's V4L2 reader against a real V4L2 driver: the Linux kernel's virtual video driver vivid.

These tests need vivid capture devices (``/sys/class/video4linux/video*/name`` "vivid-NNN-vid-cap")
and ``v4l2-ctl`` to drive vivid's controls; elsewhere they skip. ``tests/deploy/test_v4l2.py`` runs them
on a QEMU guest that has vivid (``tools/vivid_vm/run.py``), loaded with ``n_devs=6`` webcam inputs.

The references are the driver and independent readers: FFmpeg's own V4L2 input reads the same device
(byte for byte the same frames), vivid's 75% colour bars (their RGB values, by the pattern's
definition), ``CLOCK_MONOTONIC`` read around the capture, and vivid's fault controls (dropped buffers,
the error flag, a fatal streaming error, a USB-style disconnect)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dvpipe.deploy import Runner, load_deployment
from dvpipe.deploy.config import SourceConfig
from dvpipe.deploy.sources.base import StreamLost
from dvpipe.deploy.sources.video import V4l2Source
from dvpipe.deploy.sources._v4l2 import V4l2Capture
from dvpipe.errors import FrameError
from dvpipe.testing.deployments import tiny_rig
from dvpipe.types import Camera
from tests.tolerances import tol

W, H, FPS = 320, 180, 10  # a size and rate of vivid's webcam input, light on an emulated CPU


def _vivid_devices() -> list[str]:
    out = []
    for node in sorted(glob.glob("/sys/class/video4linux/video*")):
        name = Path(node, "name").read_text().strip() if Path(node, "name").exists() else ""
        if name.startswith("vivid-") and name.endswith("-vid-cap"):
            out.append("/dev/" + Path(node).name)
    return out


def _multiplanar(device: str) -> bool:
    """Whether the device speaks only the multi-planar capture API (vivid's ``multiplanar=2``)."""
    import fcntl

    from dvpipe.deploy.sources import _v4l2

    fd = os.open(device, os.O_RDWR | os.O_NONBLOCK)
    try:
        buf = bytearray(_v4l2._CAPABILITY.size)
        fcntl.ioctl(fd, _v4l2.VIDIOC_QUERYCAP, buf, True)
    finally:
        os.close(fd)
    caps = _v4l2._CAPABILITY.unpack(buf)[5]  # device_caps
    return bool(caps & _v4l2._CAP_VIDEO_CAPTURE_MPLANE) and not caps & _v4l2._CAP_VIDEO_CAPTURE


#: single-planar devices (FFmpeg's input reads them too) and multi-planar ones (the guest has one)
DEVICES = [d for d in _vivid_devices() if not _multiplanar(d)]
MPLANE_DEVICES = [d for d in _vivid_devices() if _multiplanar(d)]
pytestmark = pytest.mark.skipif(not DEVICES or shutil.which("v4l2-ctl") is None,
                                reason="no vivid capture device or no v4l2-ctl here (tests/deploy/test_v4l2.py "
                                       "runs these on a guest that has them)")


def ctl(device: str, **controls) -> None:
    """Set vivid controls with v4l2-ctl (a button: value 1)."""
    args = ",".join(f"{k}={v}" for k, v in controls.items())
    subprocess.run(["v4l2-ctl", "-d", device, "-c", args], check=True, capture_output=True)


@pytest.fixture(autouse=True)
def quiet_devices():
    """Every device: colour bars without the moving text overlay, nothing dropped."""
    for d in DEVICES + MPLANE_DEVICES:
        ctl(d, osd_text_mode=2, percentage_of_dropped_buffers=0, test_pattern=0, timestamp_source=0)
    yield


def take(capture: V4l2Capture, n: int, timeout_s: float = 20.0) -> list:
    got: list = []
    end = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < end:
        capture.wait(1.0)
        capture.receive()
        while capture.frames:
            got.append(capture.frames.popleft())
    assert len(got) >= n, f"{len(got)} of {n} frames in {timeout_s} s"
    return got[:n]


def ffmpeg_frames(device: str, input_format: str, n: int) -> list[bytes]:
    import av

    with av.open(device, format="v4l2", options={"input_format": input_format, "video_size": f"{W}x{H}",
                                                 "framerate": str(FPS)}) as c:
        demux = c.demux(c.streams.video[0])
        # no packet kept: FFmpeg's V4L2 packets point into the driver's buffers and must be freed
        # before the container is closed
        out = [bytes(next(demux)) for _ in range(n)]
        demux.close()
    return out


@pytest.mark.parametrize("encoding, fourcc, ffmpeg_name", [("yuyv", "YUYV", "yuyv422"), ("uyvy", "UYVY", "uyvy422"),
                                                           ("nv12", "NV12", "nv12")])
def test_frames_are_ffmpegs_frames(encoding, fourcc, ffmpeg_name):
    """The same device read by dvpipe's reader and by FFmpeg's V4L2 input: the same bytes (a still pattern)."""
    cap = V4l2Capture(DEVICES[0], fourcc, (H, W), FPS)
    neg = cap.open()
    try:
        ours = take(cap, 3)
    finally:
        cap.close()
    theirs = ffmpeg_frames(DEVICES[0], ffmpeg_name, 3)
    assert (neg.width, neg.height, neg.fourcc, neg.yuv_matrix, neg.yuv_range) == (W, H, fourcc, "bt601", "limited")
    assert all(f.damaged is None for f in ours)
    assert {len(f.data) for f in ours} == {len(theirs[0])} == {W * H * 2 if encoding != "nv12" else W * H * 3 // 2}
    assert ours[-1].data == theirs[-1]


@pytest.mark.parametrize("fourcc", ["YUYV", "NV12"])
def test_padded_rows_are_removed(fourcc):
    """Rows padded by the driver (a stride of 64 bytes more than the pixels, which vivid honours): the
    same tightly packed frame as without padding."""
    frames = {}
    for pad in (0, 64):
        tight = W * 2 if fourcc == "YUYV" else W
        cap = V4l2Capture(DEVICES[0], fourcc, (H, W), FPS, bytesperline=tight + pad if pad else 0)
        neg = cap.open()
        try:
            frames[pad] = take(cap, 2)[-1].data
        finally:
            cap.close()
        assert neg.bytesperline == tight + pad
    assert frames[64] == frames[0]


@pytest.mark.parametrize("encoding", ["yuyv", "uyvy", "nv12"])
def test_colour_bars_come_out_as_the_patterns_colours(encoding):
    """vivid's 75% colour bars (white, yellow, cyan, green, magenta, red, blue, black: 191 where a
    primary is on, 0 where off) through the reader and dvpipe's YUV -> BGR conversion."""
    from dvpipe.backends._raw_yuv import to_bgr_cv2

    cap = V4l2Capture(DEVICES[0], {"yuyv": "YUYV", "uyvy": "UYVY", "nv12": "NV12"}[encoding], (H, W), FPS)
    cap.open()
    try:
        frame = take(cap, 2)[-1]
    finally:
        cap.close()
    bgr = to_bgr_cv2(frame.data, encoding, W, H, "bt601", "limited")
    bars_rgb = [(1, 1, 1), (1, 1, 0), (0, 1, 1), (0, 1, 0), (1, 0, 1), (1, 0, 0), (0, 0, 1), (0, 0, 0)]
    bar = W // 8
    got = np.array([bgr[H // 4, k * bar + bar // 2, ::-1] for k in range(8)], dtype=float)
    want = 191.0 * np.array(bars_rgb)
    assert np.abs(got - want).max() <= tol("vivid_colour_bars", "any", "uint8").atol, got


@pytest.mark.skipif(not MPLANE_DEVICES, reason="no multi-planar vivid device (vivid's multiplanar=2)")
@pytest.mark.parametrize("fourcc, planes", [("YUYV", 1), ("NV12", 1), ("NM12", 2)])
@pytest.mark.parametrize("pad", [0, 64])
def test_a_multi_planar_device_gives_the_frames_of_a_single_planar_one(fourcc, planes, pad):
    """A multi-planar-only device (which FFmpeg's V4L2 input does not open) read through the multi-planar
    API: the frames, rows padded or not, are byte for byte those of a single-planar device showing the
    same pattern (read as checked against FFmpeg above); NV12 in two memory planes (NM12: luma, then
    chroma, each buffer its own) comes out as one NV12 frame."""
    tight = W * 2 if fourcc == "YUYV" else W
    cap = V4l2Capture(MPLANE_DEVICES[0], fourcc, (H, W), FPS, bytesperline=tight + pad if pad else 0)
    neg = cap.open()
    try:
        assert cap._type == 9 and cap._planes == planes
        ours = take(cap, 2)[-1]
    finally:
        cap.close()
    single = V4l2Capture(DEVICES[0], "NV12" if fourcc == "NM12" else fourcc, (H, W), FPS)
    single.open()
    try:
        theirs = take(single, 2)[-1]
    finally:
        single.close()
    assert (neg.width, neg.height, neg.fourcc, neg.bytesperline) == (W, H, fourcc, tight + pad)
    assert ours.damaged is None and ours.data == theirs.data
    assert len(ours.data) == (W * H * 2 if fourcc == "YUYV" else W * H * 3 // 2)


@pytest.mark.skipif(not MPLANE_DEVICES, reason="no multi-planar vivid device (vivid's multiplanar=2)")
def test_a_multi_planar_camera_runs_on_the_io_thread():
    """An nv12 camera on the multi-planar device, beside a single-planar one, in one run: both on the I/O
    thread, every frame accounted, the colour bars right."""
    from dvpipe.backends._raw_yuv import to_bgr_cv2

    src = V4l2Source(Camera("cam", width=W, height=H, encoding="nv12"), SourceConfig("v4l2", MPLANE_DEVICES[0],
                                                                                     {"fps": FPS}))
    assert src.pollable
    src.open()
    try:
        item = [src.read() for _ in range(3)][-1]
    finally:
        src.close()
    bgr = to_bgr_cv2(item.frame.data, "nv12", W, H, "bt601", "limited")
    bar = W // 8
    got = np.array([bgr[H // 4, k * bar + bar // 2, ::-1] for k in range(8)], dtype=float)
    want = 191.0 * np.array([(1, 1, 1), (1, 1, 0), (0, 1, 1), (0, 1, 0), (1, 0, 1), (1, 0, 0), (0, 0, 1), (0, 0, 0)])
    assert np.abs(got - want).max() <= tol("vivid_colour_bars", "any", "uint8").atol, got
    counts: dict[str, int] = {}
    runner = Runner(load_deployment(_deployment([DEVICES[0], MPLANE_DEVICES[0]], "dvpipe", duration_s=3.0)),
                    write_outputs=False)
    runner.progress = lambda r: counts.update({k: _threads(k) for k in ("dvpipe-src-", "dvpipe-live-io")}) \
        if r.sets_done == 5 and not counts else None
    acc = runner.run().accounting
    assert acc.check() == [] and counts == {"dvpipe-src-": 0, "dvpipe-live-io": 1}, counts
    assert all(acc.emitted[c] >= 5 for c in acc.cameras), (acc.emitted, acc.dropped, acc.examples)


def test_what_the_device_refuses_is_one_line():
    """A format the device does not offer (vivid has no MJPEG) and a size it does not capture."""
    from dvpipe.deploy.sources.base import SourceError

    for encoding, size, match in (("jpeg", (W, H), r"does not capture MJPG; it offers YUYV, UYVY, .*\(\d+ in all\)"),
                                  ("yuyv", (W, H - 3), r"does not capture YUYV at 320x177; it chose 320x180")):
        src = V4l2Source(Camera("cam", width=size[0], height=size[1], encoding=encoding),
                         SourceConfig("v4l2", DEVICES[0], {"fps": FPS}))
        with pytest.raises(SourceError, match=match) as e:
            src.open()
        assert "\n" not in e.value.reason
        src.close()


@pytest.mark.parametrize("stamp", ["end_of_frame", "start_of_exposure"])
def test_capture_times_are_the_drivers_clock(stamp):
    """Each frame's capture time is the driver's CLOCK_MONOTONIC stamp: after streaming began, before
    the frame was read, one frame period apart. vivid stamps the end of a frame's period but hands the
    frame over at its start: those stamps are moved back by what they were ahead (one period less the
    reader's delay); start-of-exposure stamps are taken as they are."""
    ctl(DEVICES[0], timestamp_source=int(stamp == "start_of_exposure"))
    src = V4l2Source(Camera("cam", width=W, height=H, encoding="yuyv"),
                     SourceConfig("v4l2", DEVICES[0], {"fps": FPS}))
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    src.open()
    try:
        items = []
        for _ in range(6):
            items.append(src.read())
            read_at = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            assert before < items[-1].capture_mono_ns <= read_at
    finally:
        src.close()
    steps = np.diff([it.capture_mono_ns for it in items]) / 1e9
    assert np.abs(steps - 1 / FPS).max() <= tol("v4l2_frame_period", "any", "s").atol, steps
    assert all(it.lost_before == 0 for it in items)
    if stamp == "start_of_exposure":
        assert all(it.capture_mono_ns == it.media_ns for it in items)  # media_ns: the driver's own stamp
    else:
        ahead = [it.media_ns - it.capture_mono_ns for it in items]  # the correction: grows to the most ahead
        assert all(0 < a <= b <= 1e9 / FPS for a, b in zip(ahead, ahead[1:])), ahead


def test_buffers_the_driver_drops_are_counted_as_lost_at_the_source():
    """vivid drops half its buffers (its sequence numbers go on): every skipped number is a frame lost
    at the source, and frames read + lost cover the time streamed at the device's rate."""
    ctl(DEVICES[0], percentage_of_dropped_buffers=50)
    src = V4l2Source(Camera("cam", width=W, height=H, encoding="yuyv"),
                     SourceConfig("v4l2", DEVICES[0], {"fps": FPS}))
    src.open()
    try:
        items = [src.read() for _ in range(12)]
    finally:
        src.close()
    lost = sum(it.lost_before for it in items[1:])
    span_s = (items[-1].capture_mono_ns - items[0].capture_mono_ns) / 1e9
    assert lost >= 3  # 50%: 11 frames after the first, with ~11 lost between them
    assert len(items) - 1 + lost == round(span_s * FPS)


def test_a_flagged_buffer_is_a_corrupt_drop_and_the_camera_goes_on():
    src = V4l2Source(Camera("cam", width=W, height=H, encoding="yuyv"),
                     SourceConfig("v4l2", DEVICES[0], {"fps": FPS}))
    src.open()
    try:
        src.read()
        ctl(DEVICES[0], inject_v4l2_buf_flag_error=1)
        items = [src.read() for _ in range(6)]
    finally:
        src.close()
    bad = [it for it in items if isinstance(it.frame.data, FrameError)]
    assert len(bad) == 1 and "V4L2_BUF_FLAG_ERROR" in str(bad[0].frame.data) and "corrupt" in str(bad[0].frame.data)
    assert items[-1].frame.data is not bad[0].frame.data and isinstance(items[-1].frame.data, bytes)


@pytest.mark.parametrize("fault", ["disconnect", "inject_fatal_streaming_error"])
def test_a_lost_device_is_stream_lost_and_reopens(fault):
    src = V4l2Source(Camera("cam", width=W, height=H, encoding="yuyv"),
                     SourceConfig("v4l2", DEVICES[0], {"fps": FPS}))
    src.open()
    try:
        src.read()
        ctl(DEVICES[0], **{fault: 1})
        with pytest.raises(StreamLost, match="stopped streaming"):
            for _ in range(20):
                src.read()
        src.reopen()  # vivid "reconnects" once every handle is closed, as a USB camera plugged back
        assert isinstance(src.read().frame.data, bytes)
    finally:
        src.close()


def _deployment(devices: list[str], reader: str = "dvpipe", **run) -> dict:
    names = [f"c{i}" for i in range(len(devices))]
    return {
        "name": "vivid", "rig": tiny_rig(names, W, H, encoding="yuyv"),
        "pipeline": {"stages": ["decode", {"resize": {"size": [W // 2, H // 2]}}], "backends": ["cpu"]},
        "cameras": [{"name": n, "source": {"type": "v4l2", "uri": d, "fps": FPS, "reader": reader}}
                    for n, d in zip(names, devices)],
        "sync": {"tolerance_ms": 60, "deadline_ms": 200, "on_late": "mask"},
        "run": dict({"queue_size": 2, "stall_timeout_ms": 1500}, **run),
        "outputs": {"metrics": False},
    }


def _threads(prefix: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


@pytest.mark.parametrize("reader", ["dvpipe", "ffmpeg"])
def test_cameras_on_one_io_thread(reader):
    """Every vivid device as a camera of one run: with dvpipe's reader no reader thread, one I/O thread;
    with FFmpeg's a reader thread per camera. Every frame accounted."""
    counts: dict[str, int] = {}
    runner = Runner(load_deployment(_deployment(DEVICES, reader, duration_s=4.0)), write_outputs=False)

    def look(r):
        if r.sets_done == 10 and not counts:
            counts.update({k: _threads(k) for k in ("dvpipe-src-", "dvpipe-live-io")})

    runner.progress = look
    result = runner.run()
    acc = result.accounting
    assert acc.check() == [] and counts, counts
    if reader == "dvpipe":
        assert counts == {"dvpipe-src-": 0, "dvpipe-live-io": 1}, counts
    else:
        assert counts["dvpipe-src-"] == len(DEVICES), counts
    assert all(acc.emitted[c] >= 10 for c in acc.cameras), (acc.emitted, acc.dropped, acc.examples)


def test_a_run_reconnects_a_disconnected_camera_and_counts_what_the_driver_dropped():
    """``dvpipe run``'s runner: vivid drops a quarter of one camera's buffers (lost at the source) and the
    other is unplugged mid-run (a disconnect, reconnected); every frame is accounted."""
    ctl(DEVICES[0], percentage_of_dropped_buffers=25)
    runner = Runner(load_deployment(_deployment(DEVICES[:2], duration_s=5.0)), write_outputs=False)
    threading.Timer(2.0, lambda: ctl(DEVICES[1], disconnect=1)).start()
    result = runner.run()
    acc = result.accounting
    assert acc.check() == []
    h0, h1 = acc.health["c0"], acc.health["c1"]
    assert h0.lost_at_source >= 3 and h0.disconnects == 0
    assert h1.disconnects == 1 and h1.reconnects == 1 and h1.lost_at_source == 0
    assert acc.to_dict()["totals"]["lost_at_source"] == h0.lost_at_source
    assert os.path.exists(DEVICES[1])
