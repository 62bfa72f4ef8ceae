"""Pipeline.submit: sets started ahead without a per-set barrier give the batches that set-by-set
``process`` gives, each with its own frames, damage flags and order.

References: OpenCV's decode of each JPEG; for H.264 with B-frames (decoder state carried from picture
to picture), a second pipeline run set by set through ``process`` (whose decode is checked against
FFmpeg in tests/video).
"""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from dvpipe import ConfigError, Decode, Frame, Normalise, Pipeline, Rig
from dvpipe.testing.deployments import test_pattern, tiny_rig
from dvpipe.testing.dvpp import h264_stream, video_packets

SETS = 24


def _jpeg_sets(rig, n, seed=3):
    rng = np.random.default_rng(seed)
    return [{c.name: cv2.imencode(".jpg", rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))[1].tobytes()
             for c in rig.cameras} for _ in range(n)]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_sets_submitted_ahead_each_hold_their_own_frames(threads):
    rig = Rig.from_dict(tiny_rig(4, 64, 48, encoding="jpeg"))
    sets = _jpeg_sets(rig, SETS)
    with Pipeline(rig, [Decode(), Normalise()], ("cpu",), threads=threads, output_buffers=3) as pipe:
        pending, batches = [], []
        for seq, frames in enumerate(sets):
            pending.append(pipe.submit({k: Frame(k, seq, 0, v) for k, v in frames.items()}))
            if len(pending) == 3:  # three sets in flight, the ring's size
                batches.append(_checked(pending.pop(0).result(), sets[len(batches)], rig))
        while pending:
            batches.append(_checked(pending.pop(0).result(), sets[len(batches)], rig))
    assert [b.metas[0]["seq"] for b in batches] == list(range(SETS))


def _checked(batch, frames, rig):
    assert batch.valid.all()
    for i, cam in enumerate(rig.cameras):
        want = cv2.imdecode(np.frombuffer(frames[cam.name], np.uint8), cv2.IMREAD_COLOR)
        np.testing.assert_array_equal(batch.images[i], want.transpose(2, 0, 1).astype(np.float32))
    return batch


def test_a_later_result_collects_the_earlier_sets_first_and_a_full_ring_is_refused():
    rig = Rig.from_dict(tiny_rig(2, 64, 48, encoding="jpeg"))
    sets = _jpeg_sets(rig, 3)
    with Pipeline(rig, [Decode(), Normalise()], ("cpu",), threads=2, output_buffers=2) as pipe:
        p0, p1 = pipe.submit(sets[0]), pipe.submit(sets[1])
        with pytest.raises(ConfigError, match=r"2 frame sets submitted and not collected.*output_buffers"):
            pipe.submit(sets[2])
        b1 = p1.result()  # collects set 0 first
        assert p0.done() and p1.done()
        _checked(b1, sets[1], rig)
        _checked(p0.result(), sets[0], rig)
        _checked(pipe.submit(sets[2]).result(), sets[2], rig)


def test_damage_stays_with_the_set_whose_frame_was_damaged():
    """Camera 0's frame of set 1 ends early (its scan cut, the end marker kept); sets 0 and 2 are whole: only set 1 is flagged, although its
    camera's next frame (set 2) may already run while set 1 is assembled."""
    rig = Rig.from_dict(tiny_rig(2, 64, 48, encoding="jpeg"))
    sets = _jpeg_sets(rig, 3)
    cam0 = rig.names[0]
    cut = sets[1][cam0]
    sets[1][cam0] = cut[: len(cut) // 2] + b"\xff\xd9"  # libjpeg: "premature end of data segment", concealed
    with Pipeline(rig, [Decode(), Normalise()], ("cpu",), threads=2, output_buffers=3, on_corrupt="flag") as pipe:
        pending = [pipe.submit(f) for f in sets]
        batches = [p.result() for p in pending]
    assert [bool(b.metas[0].get("corrupt")) for b in batches] == [False, True, False]
    assert "premature end" in batches[1].metas[0]["corrupt_reason"]
    assert not any(b.metas[1].get("corrupt") for b in batches)
    assert all(b.valid.all() for b in batches)


def test_h264_with_b_frames_submitted_ahead_equals_set_by_set():
    """Each camera's decoder carries state across sets (B-frames reordered): submitting three sets ahead must
    give, picture for picture, what processing one set at a time gives."""
    n = 18
    rig = Rig.from_dict(tiny_rig(3, 64, 48, encoding="h264"))
    packets = {c.name: video_packets(h264_stream([test_pattern(k + 7 * j, 64, 48) for k in range(n)],
                                                 bframes=2, gop=6))
               for j, c in enumerate(rig.cameras)}
    count = min(len(p) for p in packets.values())
    assert count >= n - 2
    sets = [{cam: packets[cam][k] for cam in packets} for k in range(count)]
    stages = [Decode(), Normalise()]
    with Pipeline(rig, stages, ("cpu",), threads=1) as ref:
        want = [ref.process(f).keep() for f in sets]
    with Pipeline(rig, stages, ("cpu",), threads=3, output_buffers=4) as pipe:
        got, pending = [], []
        for f in sets:
            pending.append(pipe.submit(f))
            if len(pending) == 4:
                got.append(pending.pop(0).result().keep())
        got += [p.result().keep() for p in pending]
    assert len(got) == len(want) == count
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.valid.tolist() == w.valid.tolist(), k
        np.testing.assert_array_equal(g.images, w.images, err_msg=f"set {k}")


def test_wait_returns_when_the_cameras_are_done_without_assembling_the_batch():
    """``PendingBatch.wait`` waits for the jobs; the batch (here with a refused frame, a drop) comes from ``result``."""
    rig = Rig.from_dict(tiny_rig(2, 64, 48, encoding="jpeg"))
    sets = _jpeg_sets(rig, 2)
    sets[1][rig.names[1]] = b"not a jpeg"
    with Pipeline(rig, [Decode(), Normalise()], ("cpu",), threads=2, output_buffers=2, fallback="error") as pipe:
        p0, p1 = pipe.submit(sets[0]), pipe.submit(sets[1])
        p1.wait()
        assert p0.done() and p1.done()
        _checked(p0.result(), sets[0], rig)
        batch = p1.result()  # a frame the decoder refuses is a drop (FrameError), not a raised error
        assert batch.valid.tolist() == [True, False]


def test_process_from_more_threads_than_buffers_waits_for_a_buffer_instead_of_refusing():
    """``process`` callers outnumbering the ring wait for the oldest set's caller (``submit`` refuses instead)."""
    import threading

    rig = Rig.from_dict(tiny_rig(2, 64, 48, encoding="jpeg"))
    sets = _jpeg_sets(rig, 4)
    errors, valid = [], []
    with Pipeline(rig, [Decode(), Normalise()], ("cpu",), threads=2, output_buffers=1) as pipe:
        def caller(k):
            try:
                for _ in range(10):
                    valid.append(bool(pipe.process(sets[k]).valid.all()))
            except Exception as e:  # noqa: BLE001 - collected for the assertion
                errors.append(e)

        workers = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(60)
    assert errors == [] and valid == [True] * 40
