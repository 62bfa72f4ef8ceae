"""Video decoding as a plan step: H.264/H.265 access units through the CPU "decode" step (PyAV),
per-camera decoder state, carried access units, keyframe recovery, resolution changes."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from dvpipe import Decode, FrameError, Pipeline, Rig
from dvpipe.deploy import Runner, load_deployment
from dvpipe.testing.deployments import encode_access_units, synthetic_deployment, tiny_rig
from dvpipe.video import (GAP, AccessUnit, VideoPacket, decode_video, is_keyframe, merge_packets, nal_types)
from dvpipe.stages.base import FrameSpec
from dvpipe.types import PixelFormat
from tolerances import tol

ROOT = Path(__file__).resolve().parents[2]


class Ctx:
    """The parts of a KernelContext that decode_video uses."""

    def __init__(self, codec: str, width: int, height: int):
        self.spec_in = FrameSpec(width=width, height=height, pixel_format=PixelFormat.ENCODED, encoding=codec)
        self.state: dict = {}


def reference_decode(aus, codec: str) -> list[np.ndarray]:
    dec = av.CodecContext.create("h264" if codec == "h264" else "hevc", "r")
    out = []
    for au in aus:
        out += [f.to_ndarray(format="bgr24") for f in dec.decode(av.Packet(au))]
    return out


@pytest.mark.parametrize("codec", ["h264", "h265"])
def test_one_picture_per_access_unit_matching_a_plain_decode(codec):
    aus = encode_access_units(6, 64, 48, codec=codec, gop=3)
    ref = reference_decode(aus, codec)
    ctx = Ctx(codec, 64, 48)
    got = [decode_video(au, ctx) for au in aus]
    assert len(got) == len(ref) == 6
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    assert [is_keyframe(au, codec) for au in aus] == [True, False, False, True, False, False]
    assert nal_types(aus[0], codec)


def test_carried_access_units_keep_the_reference_chain():
    aus = encode_access_units(8, 64, 48, gop=8)
    ref = reference_decode(aus, "h264")
    ctx = Ctx("h264", 64, 48)
    decode_video(aus[0], ctx)
    # frames 1-3 were dropped before decoding (superseded); frame 4 carries them
    held = [VideoPacket([AccessUnit(au, None, k == 0)]) for k, au in enumerate(aus[1:4])]
    bundle = merge_packets(held, VideoPacket([AccessUnit(aus[4])]))
    assert [u.data for u in bundle.units] == aus[1:5]
    np.testing.assert_array_equal(decode_video(bundle, ctx), ref[4])
    np.testing.assert_array_equal(decode_video(aus[5], ctx), ref[5])


def test_lost_frames_and_corrupt_frames_wait_for_the_next_keyframe():
    aus = encode_access_units(10, 64, 48, gop=5)
    ctx = Ctx("h264", 64, 48)
    with pytest.raises(FrameError, match="waiting for a keyframe"):
        decode_video(aus[1], ctx)  # a stream joined mid-GOP
    decode_video(aus[0], ctx)
    decode_video(aus[1], ctx)
    with pytest.raises(FrameError, match="waiting for a keyframe"):
        decode_video(VideoPacket([GAP, AccessUnit(aus[3])]), ctx)  # frame 2 was lost
    with pytest.raises(FrameError, match="waiting for a keyframe"):
        decode_video(aus[4], ctx)
    assert decode_video(aus[5], ctx).shape == (48, 64, 3)
    bad = aus[6][:6] + bytes(len(aus[6]) - 6)
    with pytest.raises(FrameError, match="corrupt h264"):
        decode_video(bad, ctx)
    with pytest.raises(FrameError, match="waiting for a keyframe"):
        decode_video(aus[7], ctx)
    with pytest.raises(FrameError, match="waiting for a keyframe"):
        decode_video(b"garbage without start codes", Ctx("h264", 64, 48))


def test_a_resolution_change_is_a_wrong_size_drop():
    small = encode_access_units(2, 64, 48, gop=2)
    big = encode_access_units(2, 96, 64, gop=2)
    ctx = Ctx("h264", 64, 48)
    decode_video(small[0], ctx)
    with pytest.raises(FrameError, match="frame is 96x64 but the camera declares 64x48"):
        decode_video(big[0], ctx)


def test_video_decode_is_a_planned_step_and_the_batch_matches_the_decode():
    rig = Rig.from_dict(tiny_rig(2, 64, 48, encoding="h264"))
    pipe = Pipeline(rig, [Decode()], ("cpu",))
    text = str(pipe.plan)
    assert "48 h264 -> 64x48 bgr/uint8" in text and "PyAV" in text
    (step,) = [s for s in pipe.plan.cameras[0].steps if s.name == "decode"]
    assert step.backend.name == "cpu" and "PyAV" in step.chosen.reason
    aus = encode_access_units(3, 64, 48)
    ref = reference_decode(aus, "h264")
    for k, au in enumerate(aus):
        batch = pipe.process({"CAM0": au, "CAM1": au})
        assert batch.valid.all()
        np.testing.assert_array_equal(batch.images[0], ref[k].transpose(2, 0, 1).astype(np.float32))
    assert any(s.name == "decode" for s in batch.timeline.spans)
    pipe.close()


def test_slow_pipeline_drops_video_frames_without_breaking_the_decoder():
    # live H.264 cameras, a slow model: frames are superseded before decoding, yet every decoded
    # picture is right (the dropped access units ride along to the decoder)
    dep = synthetic_deployment(2, fps=60.0, realtime=True, frames=40, encoding="h264", cycle=8,
                               run={"queue_size": 1}, sync={"tolerance_ms": 6, "deadline_ms": 30})
    import time

    r = Runner(load_deployment(dep), model=lambda b: time.sleep(0.03), write_outputs=False)
    cycle = None
    checked = 0
    for rb in r.batches():
        if cycle is None:
            cycle = reference_decode(r._sources["CAM0"]._cycle, "h264")  # noqa: SLF001 - the rendered cycle
        i = 0
        it = rb.frame_set.members.get("CAM0")
        if it is None or not rb.batch.valid[i]:
            continue
        k = round((it.frame.capture_epoch_ns - r._sources["CAM0"]._t0_wall) * 60 / 1e9)  # noqa: SLF001
        want = (cycle[k % 8].transpose(2, 0, 1).astype(np.float32) - 128) / 64
        np.testing.assert_allclose(rb.batch.images[i], want, **tol("video_batch").allclose)
        checked += 1
    result = r.finish()
    acc = result.accounting
    assert checked >= 5
    assert acc.dropped["CAM0"].get("superseded", 0) > 0
    assert not {"corrupt", "keyframe_wait", "decode_error"} & set(acc.dropped["CAM0"]), acc.dropped
    assert acc.check() == []


def test_video_file_deployment_runs(samples_dir):
    if not (samples_dir / "video" / "CAM_FRONT.mp4").exists():
        pytest.skip("samples/video not generated")
    dep = load_deployment(ROOT / "configs" / "deployments" / "nuscenes-video-h264.yaml")
    result = Runner(dep.with_run(frames=4), write_outputs=False).run()
    assert result.sets == 4 and result.accounting.totals()["emitted"] == 24
    # reference fidelity: one kernel from access units to the batch (FFmpeg's bgr24 arithmetic on the planes)
    step = "decode+normalise+resize+pad+batch"
    assert result.stats.step(step).count == 24 - 6 * result.stats.warmup_batches  # 2 warm-up sets
    assert f"{step}  cpu      1600x900 h264 -> 800x480 chw/float32" in str(result.plan)


def test_the_decoders_state_stays_bounded_over_a_long_damaged_stream():
    """Hundreds of breaks (lost units, corrupt units) over 1200 frames: what the decoder keeps between
    frames stays a few entries, and every frame after a keyframe is decoded again."""
    from dvpipe.video import ReorderingDecoder

    aus = encode_access_units(12, 64, 48, gop=4)
    ref = reference_decode(aus, "h264")
    dec = ReorderingDecoder("h264")
    bad = aus[1][:6] + bytes(len(aus[1]) - 6)
    good = 0
    for k in range(1200):
        i = k % 12
        units = [GAP, AccessUnit(aus[i], None, i % 4 == 0)] if k % 7 == 3 else \
            [AccessUnit(bad if k % 11 == 5 else aus[i], None, i % 4 == 0)]
        try:
            pic = dec.picture(VideoPacket(units))
        except FrameError:
            continue
        np.testing.assert_array_equal(pic.to_ndarray(format="bgr24"), ref[i])
        good += 1
        sizes = [len(dec._damaged), len(dec._lost), len(dec._held), len(dec._tags), len(dec._pending)]  # noqa: SLF001
        assert max(sizes) <= 4, sizes
    assert good > 400


def test_units_of_a_dropped_frame_wait_for_a_later_frame_of_their_camera():
    """One poll can drop a frame that comes *after* a set it forms (superseded while the set waited):
    its access units must not be fed before that set's own frame, only with the next later one."""
    from dvpipe.deploy.sources.base import Item
    from dvpipe.types import Frame

    aus = encode_access_units(4, 64, 48, gop=4)
    ref = reference_decode(aus, "h264")
    r = Runner(load_deployment(synthetic_deployment(1, width=64, height=48, encoding="h264", frames=4)),
               write_outputs=False)
    try:
        item = lambda k: Item(Frame("CAM0", k, k, aus[k]), keyframe=k == 0)  # noqa: E731
        r._carry("CAM0", item(1))  # noqa: SLF001 - dropped before decoding, earlier than the set's frame
        r._carry("CAM0", item(3))  # noqa: SLF001 - dropped in the same poll, later than the set's frame
        ctx = Ctx("h264", 64, 48)
        decode_video(r._video_payload("CAM0", item(0)), ctx)  # noqa: SLF001 - nothing before frame 0
        payload = r._video_payload("CAM0", item(2))  # noqa: SLF001
        assert [u.data for u in payload.units] == [aus[1], aus[2]]  # frame 3's unit waits
        np.testing.assert_array_equal(decode_video(payload, ctx), ref[2])
        marker = aus[0]  # frame 4's own unit (any bytes): frame 3's held unit must come before it
        last = r._video_payload("CAM0", Item(Frame("CAM0", 4, 4, marker)))  # noqa: SLF001
        assert [u.data for u in last.units] == [aus[3], marker]
    finally:
        r.close()


@pytest.mark.parametrize("time_base", ["1/90000", "1001/30000", "1/3", "1/2000000000", "1/1000"])
def test_a_packets_time_in_ns_is_its_exact_time_rounded_half_to_even(time_base):
    """The reader's integer arithmetic against exact rationals (Python's round() of a Fraction: half to
    even), on the time bases of MPEG-TS, NTSC rates, a third, one where half nanoseconds occur, and ms."""
    from fractions import Fraction
    from types import SimpleNamespace

    from dvpipe.deploy.sources.video import AvStream

    tb = Fraction(time_base)
    reader = SimpleNamespace(_order=SimpleNamespace(by="pts"), _time_base=None)
    ts = list(range(-50, 50)) + [2 ** 33 - 1, 2 ** 40 + 1, 123_456_789_013]
    got = [AvStream._pts_ns(reader, SimpleNamespace(pts=t, dts=None, time_base=tb)) for t in ts]
    assert got == [round(t * tb * 10 ** 9) for t in ts]
    assert AvStream._pts_ns(reader, SimpleNamespace(pts=None, dts=7, time_base=tb)) == round(7 * tb * 10 ** 9)
