"""VDEC through pyACL on the software device: Annex-B and MP4/MKV (demuxed with PyAV), frame order with
B-frames, end of stream, the callback thread, the pipeline kernel for h264 cameras, documented refusals."""
from __future__ import annotations

import io
import threading

import numpy as np
import pytest

import dvpipe as dv
from dvpipe.backends.dvpp import TOLERANCES, _acl, pool_for
from dvpipe.backends.dvpp.support import StepRefused
from dvpipe.backends.dvpp.testing import error_stats, h264_stream, synthetic_bgr, within
from dvpipe.backends.dvpp.vdec import VdecChannel, access_units, decode_stream

av = pytest.importorskip("av")
T310 = dv.Target("Ascend310", "6.0.1")
T310P = dv.Target("Ascend310P3", "7.0.0")


def _frames(n=10, w=320, h=240):
    base = synthetic_bgr(w, h, seed=4)
    return [np.roll(base, 6 * i, axis=1) for i in range(n)]


def _pyav_decode(data, fmt):
    with av.open(io.BytesIO(data), format=fmt) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


@pytest.mark.parametrize("bframes", [0, 2])
def test_annexb_stream_decodes_in_display_order(bframes):
    data = h264_stream(_frames(), bframes=bframes)
    out = list(decode_stream(data, T310P))
    ref = _pyav_decode(data, "h264")
    assert [f.index for f in out] == list(range(10)) and len(ref) == 10
    for got, want in zip(out, ref):  # same pictures, same order (display order, also with B-frames)
        assert not within(error_stats(got.image, want), TOLERANCES[("vdec", "synthetic")])
    rt = _acl.runtime("sim", T310P)
    assert pool_for(rt).stats().in_use == 0  # every input and output buffer went back to the pool


def test_mp4_and_mkv_are_demuxed_to_annexb_with_timestamps(tmp_path):
    frames = _frames(6)
    for fmt, ext in (("mp4", "mp4"), ("matroska", "mkv")):
        path = tmp_path / f"clip.{ext}"
        path.write_bytes(h264_stream(frames, fmt=fmt, bframes=1))
        codec, _profile, w, h, aus = access_units(path)
        assert (codec, w, h) == ("h264", 320, 240)
        out = list(decode_stream(path, T310))
        assert len(out) == 6
        pts = [f.pts for f in out]
        assert pts == sorted(pts) and len(set(pts)) == 6
        nv12 = next(decode_stream(path, T310, output="nv12")).image
        assert nv12.shape == (360, 320)


def test_h265_elementary_stream():
    data = h264_stream(_frames(4), fmt="hevc", codec="libx265")
    out = list(decode_stream(data, T310P, codec="h265"))
    assert len(out) == 4 and out[0].image.shape == (240, 320, 3)


def test_callbacks_run_on_the_channel_thread_and_eos_flushes():
    rt = _acl.runtime("sim", T310)
    data = h264_stream(_frames(5), bframes=2)
    _c, _p, w, h, aus = access_units(data)
    seen = []
    ch = VdecChannel(rt, pool_for(rt), T310, "h264", w, h)
    original = ch._callback

    def spy(*args):
        seen.append(threading.current_thread().name)
        original(*args)

    ch._callback = spy
    rt.acl.media.vdec_set_channel_desc_callback(ch.desc, spy)  # spy: swap the callback inside the software device
    seqs = [ch.send(au) for au, _pts in aus]
    ch.end_of_stream()
    got = [ch.receive(2.0) for _ in seqs]
    assert ch.pending == 0 and len(got) == len(seqs) == 5
    assert all(d.picture is not None for d in got)
    assert all(name.startswith("acl-report") for name in seen) and threading.current_thread().name not in seen
    for d in got:
        ch.release(d.picture)
    ch.close()
    with pytest.raises(_acl.CallbackTimeout):
        ch.receive(0.05)


def test_stream_below_the_documented_minimum_is_refused():
    # constraints.md §3.2: VDEC streams from 128x128
    data = h264_stream(_frames(2, 64, 64))
    with pytest.raises(StepRefused, match=r"below the minimum 128.*vdec\.range"):
        next(decode_stream(data, T310))
    rig = dv.Rig((dv.Camera("V", 64, 64, "h264"),))
    pipe = dv.Pipeline(rig, [dv.Decode()], backends=("dvpp-sim", "cpu"), target=T310, fidelity="fast")
    v = next(v for b, v in pipe.plan.cameras[0].steps[0].verdicts if b == "dvpp-sim")
    assert v.status == "rejected" and v.rule.startswith("vdec.")


def test_channel_id_beyond_the_product_limit_is_refused():
    # constraints.md §3.4: 310/910 VDEC channel ids 0..31
    rt = _acl.runtime("sim", T310)
    with pytest.raises(_acl.InvalidParam, match="channel id 40"):
        VdecChannel(rt, pool_for(rt), T310, "h264", 320, 240, channel_id=40)


def test_h264_camera_pipeline_decodes_on_vdec_and_resizes_on_vpc():
    data = h264_stream(_frames(6), bframes=0)
    _c, _p, w, h, aus = access_units(data)
    rig = dv.Rig((dv.Camera("V", w, h, "h264"),))
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Resize(size=(120, 160))], backends=("dvpp-sim", "cpu"), target=T310,
                       fidelity="fast")
    step = pipe.plan.cameras[0].steps[0]
    assert step.backend.name == "dvpp-sim" and step.name == "decode+resize" and "VDEC 320x240" in step.chosen.reason
    ref = _pyav_decode(data, "h264")
    import cv2

    for k, (au, _pts) in enumerate(aus):
        batch = pipe.process({"V": au})
        assert batch.valid.all() and not batch.fallbacks
        want = cv2.resize(ref[k], (160, 120), interpolation=cv2.INTER_LINEAR).transpose(2, 0, 1)
        assert error_stats(batch.images[0], want)["mean_abs"] < 3
    assert any(s.name == "vdec" for s in batch.timeline.spans if s.kind == "device")
