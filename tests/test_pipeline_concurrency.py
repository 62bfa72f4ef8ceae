"""Pipeline.process from several threads: every batch holds exactly its own frames (issue 12, point 5).

The reference is OpenCV's decode of each frame: with ``Normalise(mean 0, std 1)`` and no resize, a
camera's output slot must equal it transposed to CHW.
"""
from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest

from dvpipe import Decode, Normalise, Pipeline, Rig
from dvpipe.testing.deployments import tiny_rig
from dvpipe.video import AccessUnit, VideoPacket

CALLS = 40


@pytest.mark.parametrize("threads", [1, 2])
def test_concurrent_callers_each_get_their_own_frames(threads):
    rig = Rig.from_dict(tiny_rig(3, 320, 240, encoding="jpeg"))
    # a ring larger than all calls together: no batch is overwritten, so each can be checked afterwards
    pipe = Pipeline(rig, [Decode(), Normalise()], ("cpu",), threads=threads, output_buffers=2 * CALLS + 1)
    rng = np.random.default_rng(7)
    # JPEG frames, so that decoding releases the GIL and calls really overlap; the reference is
    # OpenCV's decode of the same bytes
    inputs = {w: [{c.name: cv2.imencode(".jpg", rng.integers(0, 256, (240, 320, 3), dtype=np.uint8))[1].tobytes()
                   for c in rig.cameras} for _ in range(CALLS)] for w in range(2)}
    results: dict[int, list] = {0: [], 1: []}
    start = threading.Barrier(2)

    def caller(w: int) -> None:
        start.wait()
        for frames in inputs[w]:
            results[w].append(pipe.process(frames))

    workers = [threading.Thread(target=caller, args=(w,)) for w in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    pipe.close()
    for w in range(2):
        assert len(results[w]) == CALLS
        for frames, batch in zip(inputs[w], results[w]):
            assert batch.valid.all()
            for i, cam in enumerate(rig.cameras):
                want = cv2.imdecode(np.frombuffer(frames[cam.name], np.uint8), cv2.IMREAD_COLOR)
                np.testing.assert_array_equal(batch.images[i], want.transpose(2, 0, 1).astype(np.float32))


def test_a_camera_cannot_declare_more_than_max_pixels():
    rig = Rig.from_dict(tiny_rig(1, 640, 480, encoding="jpeg"))
    with pytest.raises(ValueError, match=r"640x480 = 307200 pixels, above max_pixels=300000"):
        Pipeline(rig, [Decode()], ("cpu",), max_pixels=300_000)
    Pipeline(rig, [Decode()], ("cpu",), max_pixels=640 * 480).close()


def test_plain_access_units_from_a_stream_with_b_frames_are_refused_not_misplaced(tmp_path):
    """The Python API's one-access-unit-per-frame form cannot reorder: a delayed picture is a drop."""
    import av

    path = tmp_path / "b.h264"
    cc = av.CodecContext.create("libx264", "w")
    cc.width, cc.height, cc.pix_fmt = 64, 48, "yuv420p"
    from fractions import Fraction

    cc.time_base = Fraction(1, 30)
    cc.options = {"bf": "2", "g": "12", "x264-params": "b-adapt=0"}
    aus = []
    for k in range(12):
        img = np.full((48, 64, 3), 20 * k % 256, np.uint8)
        f = av.VideoFrame.from_ndarray(img, format="bgr24")
        f.pts = k
        aus += [bytes(p) for p in cc.encode(f)]
    aus += [bytes(p) for p in cc.encode(None)]
    path.write_bytes(b"".join(aus))
    # FFmpeg's own decode of the elementary stream, in presentation order
    ref = [f.to_ndarray(format="bgr24") for f in av.open(str(path), format="h264").decode(video=0)]
    rig = Rig.from_dict(tiny_rig(1, 64, 48, encoding="h264"))
    pipe = Pipeline(rig, [Decode(), Normalise()], ("cpu",), output_buffers=len(aus) + 1)
    batches = [pipe.process({"CAM0": VideoPacket([AccessUnit(au)])}) for au in aus]
    pipe.close()
    refs = [r.transpose(2, 0, 1).astype(np.float32) for r in ref]
    for k, b in enumerate(batches):
        if b.valid[0]:  # a valid frame is the picture of its own access unit (no B-frame ahead of it)
            assert any(np.array_equal(b.images[0], r) for r in refs[k:k + 1]), f"frame {k} holds another picture"
    assert not all(b.valid[0] for b in batches)  # the stream reorders: some frames are refused
    assert any("B-frames" in reason for b in batches for _, reason in b.drops)
