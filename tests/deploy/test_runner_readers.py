"""The runner's readers: one thread for all recordings, sources opened before the clock starts,
output buffers touched at build time (issue: the runner at the pipeline's speed)."""
from __future__ import annotations

import sys
import threading
import time

import av
import numpy as np
import pytest

from dvpipe.deploy import Runner, load_deployment
from dvpipe.testing.deployments import synthetic_deployment, tiny_rig


def _reader_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("dvpipe-src"))


def test_recordings_are_read_by_one_thread_whatever_the_number_of_cameras():
    dep = load_deployment(synthetic_deployment(12, frames=6, width=32, height=32,
                                               faults={"CAM3": {"corrupt": [2]}}))
    seen: list[list[str]] = []
    with Runner(dep, write_outputs=False) as r:
        for rb in r.batches():
            seen.append(_reader_threads())
        res = r.finish()
    # eleven plain recordings share one reader; the camera with injected faults (which may sleep) has its own
    assert seen[0] == ["dvpipe-src-CAM3", "dvpipe-src-files"]
    assert res.sets == 6
    assert all(res.accounting.emitted[c] == 6 for c in dep.rig.names if c != "CAM3")
    assert res.accounting.emitted["CAM3"] == 5 and sum(res.accounting.dropped["CAM3"].values()) == 1


def test_paced_recordings_share_the_reader_and_no_frame_arrives_before_its_release():
    """``run.realtime``: eight recordings at 40 fps, paced by the one reader thread (it reads a camera's
    next frame at once and holds it until its release, as the thread of a paced camera sleeps until then):
    no thread per camera; every frame arrives at or after its release (its capture time on the replay
    clock), in capture order, each camera's releases one frame period apart; every frame emitted."""
    dep = load_deployment(synthetic_deployment(8, frames=10, fps=40.0, width=32, height=32,
                                               run={"realtime": True}))
    threads: list[list[str]] = []
    late: list[int] = []
    releases: dict[str, list[int]] = {c: [] for c in dep.rig.names}
    with Runner(dep, write_outputs=False) as r:
        for rb in r.batches():
            threads.append(_reader_threads())
            for cam, it in rb.frame_set.members.items():
                late.append(it.arrival_ns - it.capture_mono_ns)
                releases[cam].append(it.capture_mono_ns)
        res = r.finish()
    assert min(late) >= 0, min(late)
    assert threads[0] == ["dvpipe-src-files"], threads[0]
    assert res.sets == 10 and all(res.accounting.emitted[c] == 10 for c in dep.rig.names)
    for cam, times in releases.items():
        assert [b - a for a, b in zip(times, times[1:])] == [25_000_000] * 9, (cam, times)


def test_one_reader_keeps_order_and_back_pressure_per_camera():
    """queue_size 1 and a slow consumer: each camera's buffer is full most of the time. Every frame is
    emitted once, in capture order per camera, in the set of its own index (the recordings are in step),
    and the waits are back-pressure (blocked time), never stalls."""
    dep = load_deployment(synthetic_deployment(3, frames=12, width=32, height=32, run={"queue_size": 1}))
    got: dict[str, list[int]] = {c: [] for c in dep.rig.names}
    with Runner(dep, write_outputs=False) as r:
        for rb in r.batches():
            for cam, it in rb.frame_set.members.items():
                got[cam].append(it.frame.seq)
            time.sleep(0.01)  # the pipeline is the slow part: readers wait on full buffers
        res = r.finish()
    assert got == {c: list(range(12)) for c in dep.rig.names}
    for cam in dep.rig.names:
        h = res.accounting.health[cam]
        assert h.blocked_ns > 0, cam
        assert h.stalls == 0 and h.outages == 0, (cam, h.stalls, h.outages)


def test_a_stop_while_the_reader_holds_frames_accounts_for_them():
    dep = load_deployment(synthetic_deployment(4, frames=30, width=32, height=32, run={"queue_size": 1}))
    r = Runner(dep, write_outputs=False, progress=lambda run: run.request_stop("test") if run.sets_done == 3 else None)
    res = r.run()  # finish() raises when the accounting does not add up
    assert res.stopped_by == "test" and res.sets >= 3
    acc = res.accounting
    for cam in dep.rig.names:
        assert acc.emitted[cam] >= 3
        assert acc.entered[cam] == acc.emitted[cam] + sum(acc.dropped[cam].values())


@pytest.mark.parametrize("share_reader", [True, False])
@pytest.mark.parametrize("realtime", [False, True])
def test_every_frame_a_reader_read_enters_the_account_when_the_run_stops(monkeypatch, share_reader, realtime):
    # a frame read as the run stopped -- held by the shared reader for a full camera, read early for its
    # release (paced), or waiting for its release in Paced.read -- used to vanish uncounted: read, never entered
    from dvpipe.deploy.sources.synthetic import SyntheticSource

    reads: dict[str, int] = {}
    real = SyntheticSource.read

    def read(self):
        item = real(self)
        if item is not None:
            reads[self.camera.name] = reads.get(self.camera.name, 0) + 1
        return item

    monkeypatch.setattr(SyntheticSource, "read", read)
    run = dict({"duration_s": 0.4, "loop": True, "queue_size": 2}, **({"realtime": True} if realtime else {}))
    dep = load_deployment(synthetic_deployment(2, frames=None, fps=30.0, width=32, height=32, run=run))
    r = Runner(dep, write_outputs=False, model=lambda batch: time.sleep(0.03))
    r.share_reader = share_reader
    res = r.run()
    assert "duration" in res.stopped_by and res.sets > 0
    assert reads == dict(res.accounting.entered), (reads, dict(res.accounting.entered))


def test_recordings_open_before_the_clock_starts_in_parallel(monkeypatch):
    """Each open advances the injected clock by one second: the run's elapsed time and its first frame set
    do not include them; ``startup.open_ms`` reports them."""
    from dvpipe.deploy.sources.synthetic import SyntheticSource

    now = {"ns": 1_000_000_000}
    lock = threading.Lock()

    def clock() -> int:
        with lock:
            return now["ns"]

    original = SyntheticSource._open

    def slow_open(self):
        with lock:
            now["ns"] += 1_000_000_000
        original(self)

    monkeypatch.setattr(SyntheticSource, "_open", slow_open)
    r = Runner(load_deployment(synthetic_deployment(4, frames=3, width=32, height=32)), write_outputs=False,
               clock=clock)
    res = r.run()
    assert res.sets == 3
    assert res.elapsed_s == 0.0  # the clock moved only while the sources opened
    startup = r.summary_dict()["startup"]
    assert startup["open_ms"] == 4000.0
    assert startup["first_set_ms"] == 0.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the resident set size from /proc")
def test_output_buffers_are_resident_once_the_runner_is_built():
    """The kernel's own count of resident pages: writing the output ring after the build adds (almost) none."""
    import resource

    page = resource.getpagesize()

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    dep = load_deployment(synthetic_deployment(2, frames=2, width=1024, height=768))
    with Runner(dep, write_outputs=False) as r:
        buffers = [b for b in r.pipe._buffers if isinstance(b, np.ndarray)]
        size = sum(b.nbytes for b in buffers)
        assert size >= 2 * 2 * 3 * 768 * 1024 * 4  # two buffers of (2, 3, 768, 1024) float32
        before = rss()
        for b in buffers:
            b.fill(1.0)
        grew = rss() - before
    assert grew < 0.1 * size, f"writing the output buffers faulted in {grew} of {size} bytes"


def _h264_file(path, n: int, gop: int):
    """``n`` pictures of H.264 (no B-frames, an IDR every ``gop``) muxed into Matroska with keyframe flags;
    returns the access units (Annex B) in order."""
    from dvpipe.testing.deployments import encode_access_units

    aus = encode_access_units(n, 64, 48, gop=gop)
    with av.open(str(path), "w") as out:
        st = out.add_stream("h264", rate=10)
        st.width, st.height = 64, 48
        from fractions import Fraction

        st.time_base = Fraction(1, 10)
        for k, au in enumerate(aus):
            pkt = av.Packet(au)
            pkt.pts = pkt.dts = k
            pkt.time_base, pkt.stream = st.time_base, st
            pkt.is_keyframe = k % gop == 0
            out.mux(pkt)
    return aus


def _file_keyframes(path, monkeypatch) -> tuple[list[bool], int]:
    """The keyframe verdict of each frame a ``type: video`` source reads, and how many access units it scanned."""
    import dvpipe.deploy.sources.video as video_sources
    from dvpipe.deploy.sources import open_source

    scans = [0]
    original = video_sources.nal_types

    def counting(au, codec):
        scans[0] += 1
        return original(au, codec)

    monkeypatch.setattr(video_sources, "nal_types", counting)
    dep = load_deployment({"name": "t", "rig": tiny_rig(1, 64, 48, "h264"), "pipeline": {"stages": ["decode"]},
                           "source": {"type": "video", "uri": str(path)}, "outputs": {"metrics": False}})
    src = open_source(dep.rig["CAM0"], dep.cameras[0].source)
    src.open()
    keys = []
    while (item := src.read()) is not None:
        keys.append(bool(item.keyframe))
    src.close()
    return keys, scans[0]


def test_keyframes_of_a_file_come_from_its_index_without_scanning_every_picture(tmp_path, monkeypatch):
    from dvpipe.video import is_keyframe

    aus = _h264_file(tmp_path / "flags.mkv", 12, gop=4)
    want = [is_keyframe(au, "h264") for au in aus]  # the NAL units' own answer
    assert want == [k % 4 == 0 for k in range(12)]
    keys, scans = _file_keyframes(tmp_path / "flags.mkv", monkeypatch)
    assert keys == want
    assert scans == 3  # only the pictures the index flags



def test_ctrl_c_while_the_recordings_open_opens_no_more(monkeypatch):
    import dvpipe.deploy.runner as runner_mod
    from dvpipe.deploy.sources.synthetic import SyntheticSource

    monkeypatch.setattr(runner_mod, "OPEN_CONCURRENCY", 2)
    calls: list[str] = []
    original = SyntheticSource._open

    def open_or_interrupt(self):
        calls.append(self.camera.name)
        if self.camera.name == "CAM0":
            raise KeyboardInterrupt
        time.sleep(0.05)
        original(self)

    monkeypatch.setattr(SyntheticSource, "_open", open_or_interrupt)
    res = Runner(load_deployment(synthetic_deployment(12, frames=2, width=16, height=16)), write_outputs=False).run()
    assert res.interrupted and res.stopped_by == "Ctrl-C" and res.sets == 0
    assert len(calls) <= 3, calls  # the two opening when it came (and at most one the other worker took)


def test_offer_never_blocks_and_counts_only_what_entered():
    from dvpipe import Frame
    from dvpipe.deploy.config import SyncConfig
    from dvpipe.deploy.sources.base import Item
    from dvpipe.deploy.sync import Synchroniser

    def it(cam: str, seq: int) -> Item:
        return Item(Frame(cam, seq, seq * 100_000_000, b"x"))

    s = Synchroniser(["A", "B"], SyncConfig(), live=False, capacity=1)
    counted: list[str] = []
    assert s.offer(it("A", 0), on_enter=counted.append) is True
    assert s.offer(it("A", 1), on_enter=counted.append) is None  # full: not entered, not counted
    s.wait_for_room(["A"], 0.05)  # A stays full: returns at the timeout
    assert counted == ["A"] and len(s.pending["A"]) == 1
    s.close()
    assert s.offer(it("B", 0), on_enter=counted.append) is False and counted == ["A"]
