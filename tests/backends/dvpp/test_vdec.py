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
from dvpipe.testing.dvpp import error_stats, h264_stream, synthetic_bgr, tolerance_violations
from dvpipe.backends.dvpp.vdec import VdecEngine, access_units, decode_stream

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
        assert not tolerance_violations(error_stats(got.image, want), TOLERANCES[("vdec", "synthetic")])
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
    eng = VdecEngine(rt, pool_for(rt), T310, "h264", w, h)
    original = eng._callback

    def spy(*args):
        seen.append(threading.current_thread().name)
        original(*args)

    rt.acl.media.vdec_set_channel_desc_callback(eng.desc, spy)  # spy: swap the callback inside the software device
    got = []
    for k, (au, _pts) in enumerate(aus):
        got += eng.send(au, k)
    got += eng.drain()  # end of stream: the held pictures come out
    assert eng.in_flight == 0 and len(got) == 5 and all(p is not None for _t, p, _d in got)
    assert all(name.startswith("acl-report") for name in seen) and threading.current_thread().name not in seen
    for _t, p, _d in got:
        p.release()
    eng.close()


def test_stream_below_the_documented_minimum_is_refused():
    # constraints.md §3.2: VDEC streams from 128x128
    data = h264_stream(_frames(2, 64, 64))
    with pytest.raises(StepRefused, match=r"below the minimum 128.*vdec\.range"):
        next(decode_stream(data, T310))
    rig = dv.Rig((dv.Camera("V", width=64, height=64, encoding="h264"),))
    pipe = dv.Pipeline(rig, [dv.Decode()], backends=("dvpp-sim", "cpu"), target=T310, fidelity="fast")
    v = next(v for b, v in pipe.plan.cameras[0].steps[0].verdicts if b == "dvpp-sim")
    assert v.status == "rejected" and v.rule.startswith("vdec.")


def test_channel_id_beyond_the_product_limit_is_refused():
    # constraints.md §3.4: 310/910 VDEC channel ids 0..31
    rt = _acl.runtime("sim", T310)
    with pytest.raises(_acl.InvalidParam, match="channel id 40"):
        VdecEngine(rt, pool_for(rt), T310, "h264", 320, 240, channel_id=40)


def test_h264_camera_pipeline_decodes_on_vdec_and_resizes_on_vpc():
    data = h264_stream(_frames(6), bframes=0)
    _c, _p, w, h, aus = access_units(data)
    rig = dv.Rig((dv.Camera("V", width=w, height=h, encoding="h264"),))
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


# ------------------------------------------------------------------------- issue 13: points 1, 6 and 9 (VDEC)

def _raw_channel(rt, out_mode, calls, sent, out_size=None, entype=3):
    """A VDEC channel through the pyACL-shaped calls alone (no dvpipe engine): callbacks record the user data
    and how many sends had been made when they ran."""
    a = rt.acl
    stop = threading.Event()

    def loop(_args):
        rt.bind()
        while not stop.is_set():
            if a.rt.process_report(20) == 100035:  # not subscribed yet: ask again a little later
                stop.wait(0.005)

    tid, _ret = a.util.start_thread(loop, [])

    def cb(stream_desc, pic_desc, user_data):
        calls.append((user_data, len(sent), a.media.dvpp_get_pic_desc_ret_code(pic_desc)))

    d = a.media.vdec_create_channel_desc()
    a.media.vdec_set_channel_desc_channel_id(d, 5)
    a.media.vdec_set_channel_desc_thread_id(d, tid)
    a.media.vdec_set_channel_desc_callback(d, cb)
    a.media.vdec_set_channel_desc_entype(d, entype)  # 3: H.264 High, 0: H.265 Main
    a.media.vdec_set_channel_desc_out_pic_format(d, 1)
    a.media.vdec_set_channel_desc_out_mode(d, out_mode)
    if out_size is not None:
        a.media.vdec_set_channel_desc_out_pic_width(d, out_size[0])
        a.media.vdec_set_channel_desc_out_pic_height(d, out_size[1])
    assert a.media.vdec_create_channel(d) == 0
    return a, d, tid, stop


def _raw_send(rt, a, d, au, out_bytes, tag, bufs):
    ptr, _ = a.media.dvpp_malloc(len(au))
    rt.upload(ptr, len(au), au)
    sd = a.media.dvpp_create_stream_desc()
    a.media.dvpp_set_stream_desc_data(sd, ptr)
    a.media.dvpp_set_stream_desc_size(sd, len(au))
    optr, _ = a.media.dvpp_malloc(out_bytes)
    pd = a.media.dvpp_create_pic_desc()
    a.media.dvpp_set_pic_desc_data(pd, optr)
    a.media.dvpp_set_pic_desc_size(pd, out_bytes)
    a.media.dvpp_set_pic_desc_format(pd, 1)
    bufs += [ptr, optr, ("s", sd), ("p", pd)]
    return a.media.vdec_send_frame(d, sd, pd, 0, tag)


def _raw_close(a, d, tid, stop, bufs):
    sd = a.media.dvpp_create_stream_desc()
    a.media.dvpp_set_stream_desc_eos(sd, 1)
    assert a.media.vdec_send_frame(d, sd, 0, 0, -1) == 0  # EOS: no picture, no frame configuration (reserved)
    a.media.dvpp_destroy_stream_desc(sd)
    a.media.vdec_destroy_channel(d)
    a.media.vdec_destroy_channel_desc(d)
    stop.set()
    a.util.stop_thread(tid)
    for b in bufs:
        if isinstance(b, tuple):
            (a.media.dvpp_destroy_stream_desc if b[0] == "s" else a.media.dvpp_destroy_pic_desc)(b[1])
        else:
            a.media.dvpp_free(b)


def test_out_mode_0_holds_several_frames_before_the_first_output_and_mode_1_does_not():
    """aclpythondevg_01_0353 (vdec_set_channel_desc_out_mode): mode 0 'VDEC starts to output decoding results
    only after it has received several frames'; mode 1 outputs each frame once it is decoded (no B-frames)."""
    rt = _acl.runtime("sim", T310P)
    data = h264_stream(_frames(8), bframes=0)
    aus = list(access_units(data)[4])
    out_bytes = 320 * 240 * 3 // 2
    for mode in (0, 1):
        calls, sent, bufs = [], [], []
        a, d, tid, stop = _raw_channel(rt, mode, calls, sent)
        for k, (au, _pts) in enumerate(aus):
            sent.append(k)
            assert _raw_send(rt, a, d, au, out_bytes, k, bufs) == 0
        before_eos = list(calls)
        _raw_close(a, d, tid, stop, bufs)
        assert [c[0] for c in calls] == list(range(8)) and all(c[2] == 0 for c in calls)
        if mode == 0:
            assert before_eos and min(n for _t, n, _r in before_eos) >= 2, before_eos  # several frames first
            assert len(before_eos) < 8  # the last ones come out at the end of stream only
        else:
            assert [n for _t, n, _r in before_eos] == list(range(1, 9))  # one picture per frame sent


@pytest.mark.parametrize("bframes", [0, 2])
def test_video_source_frames_decode_on_vdec_in_display_order(bframes):
    """A video source's frames (presentation order, ``by`` index, look-ahead) decode on VDEC through the one
    reordering decoder: every frame valid, no fallback, each one FFmpeg's picture of that place."""
    from dvpipe.testing.dvpp import pyav_display_order, video_packets

    data = h264_stream(_frames(12), bframes=bframes, gop=6)
    ref = pyav_display_order(data)
    packets = video_packets(data)
    assert len(packets) == len(ref) == 12
    rig = dv.Rig((dv.Camera("V", width=320, height=240, encoding="h264"),))
    with dv.Pipeline(rig, [dv.Decode()], backends=("dvpp-sim", "cpu"), target=T310P, fidelity="fast") as pipe:
        assert pipe.plan.cameras[0].steps[0].backend.name == "dvpp-sim"
        for k, p in enumerate(packets):
            b = pipe.process({"V": p})
            assert b.valid.all() and not b.fallbacks and not b.drops, (k, b.drops, b.fallbacks)
            got = np.asarray(b.images[0]).transpose(1, 2, 0)
            assert not tolerance_violations(error_stats(got, ref[k]), TOLERANCES[("vdec", "synthetic")]), k


def test_report_timeout_code_507012_is_a_timeout_not_an_error():
    """aclError: ACL_ERROR_RT_REPORT_TIMEOUT 507012 replaces the deprecated 100036; the software device
    returns it, and Runtime.process_report reads it as 'no report yet'."""
    rt = _acl.runtime("sim", T310)
    a = rt.acl
    got = {}

    def worker(_args):
        a.reports.subscribe(tid_box[0])
        got["raw"] = a.rt.process_report(1)
        got["rt"] = rt.process_report(1)
        a.reports.unsubscribe(tid_box[0])

    tid_box = [None]
    tid_box[0], _ = a.util.start_thread(lambda args: (threading.Event().wait(0.05), worker(args)), [])
    a.util.stop_thread(tid_box[0])
    assert got == {"raw": 507012, "rt": False}


def test_report_loop_waits_instead_of_spinning_while_not_subscribed():
    """acl.rt.process_report returns ACL_ERROR_THREAD_NOT_SUBSCRIBE (100035) at once until a channel names the
    thread: the engine's loop must wait between such calls (one wait per call), never spin."""
    from dvpipe.backends.dvpp.vdec import VdecEngine as E

    class FakeRt:
        calls = 0

        def bind(self):
            pass

        def process_report(self, ms):
            FakeRt.calls += 1
            if FakeRt.calls >= 5:
                eng._stop.set()
            raise _acl.ThreadNotSubscribe(100035, "acl.rt.process_report")

    class CountingEvent(threading.Event):
        waits = 0

        def wait(self, timeout=None):
            CountingEvent.waits += 1
            return super().wait(0)

    eng = E.__new__(E)
    eng.rt, eng._stop = FakeRt(), CountingEvent()
    eng._report_loop([])
    assert FakeRt.calls == 5 and CountingEvent.waits == 5


@pytest.mark.parametrize("target, ok", [(dv.Target("Ascend910B3", "8.0.0"), True), (T310, False)])
def test_vdec_input_in_acl_rt_malloc_memory(target, ok):
    """VDEC input memory: 'acldvppMalloc ... or aclrtMalloc' from CANN 6.2.RC1 on (aclcppdevg_03_0209; 9.0.0
    aclcppdevg_03_0373); CANN 6.0.1 (aclcppdevg_03_0203) names acldvppMalloc only."""
    rt = _acl.runtime("sim", target)
    a = rt.acl
    au = next(access_units(h264_stream(_frames(1)))[4])[0]
    calls, sent, bufs = [], [], []
    ch = _raw_channel(rt, 1, calls, sent)
    ptr, ret = a.rt.malloc(len(au), 0)
    assert ret == 0
    rt.upload(ptr, len(au), au)
    sd = a.media.dvpp_create_stream_desc()
    a.media.dvpp_set_stream_desc_data(sd, ptr)
    a.media.dvpp_set_stream_desc_size(sd, len(au))
    optr, _ = a.media.dvpp_malloc(320 * 240 * 3 // 2)
    pd = a.media.dvpp_create_pic_desc()
    a.media.dvpp_set_pic_desc_data(pd, optr)
    a.media.dvpp_set_pic_desc_size(pd, 320 * 240 * 3 // 2)
    bufs += [optr, ("s", sd), ("p", pd)]
    ret = a.media.vdec_send_frame(ch[1], sd, pd, 0, 0)
    _raw_close(*ch, bufs)
    a.rt.free(ptr)
    assert (ret == 0) is ok
    if ok:
        assert [c[2] for c in calls] == [0]


# ------------------------------------------------------------------------- issue 26 point 5: VDEC output size

def test_stream_above_1920x1120_decodes_on_310_because_the_channel_output_size_is_set():
    """vdec_set_channel_desc_out_pic_width/height (CANN 6.0.1 aclpythondevg_01_0322/0323; 8.0.0
    aclpythondevg_01_0359/0360): unset, the maximum output is 1920x1120 on Ascend310/910 (4096x4096 on
    310P/310B/A2/A3, 8.1.RC1 aclpythondevg_01_0350/0351). dvpipe sets it to the stream's size, so a 2048x1152
    stream decodes on 310; reference: PyAV's decode of the same stream."""
    data = h264_stream(_frames(2, 2048, 1152), bframes=0)
    out = list(decode_stream(data, T310))
    ref = _pyav_decode(data, "h264")
    assert len(out) == 2 and out[0].image.shape == (1152, 2048, 3)
    for got, want in zip(out, ref):
        assert not tolerance_violations(error_stats(got.image, want), TOLERANCES[("vdec", "synthetic")])


@pytest.mark.parametrize("target, set_size, ok", [(T310, False, False), (T310, True, True), (T310P, False, True)])
def test_software_vdec_enforces_the_default_output_size_per_family(target, set_size, ok):
    """A channel whose output size was not set outputs at most the family's default: a 2048x1152 picture
    fails on Ascend310 (1920x1120) -- ret code 1 in its callback -- and decodes on Ascend310P3 (4096x4096) or
    once the size is set."""
    rt = _acl.runtime("sim", target)
    data = h264_stream(_frames(1, 2048, 1152), bframes=0)
    aus = list(access_units(data)[4])
    calls, sent, bufs = [], [], []
    a, d, tid, stop = _raw_channel(rt, 1, calls, sent, out_size=(2048, 1152) if set_size else None)
    sent.append(0)
    assert _raw_send(rt, a, d, aus[0][0], 2048 * 1152 * 3 // 2, 0, bufs) == 0
    _raw_close(a, d, tid, stop, bufs)
    assert [c[0] for c in calls] == [0]
    assert (calls[0][2] == 0) == ok
    if not ok:
        assert "maximum output size 1920x1120" in " ".join(m for _r, m in rt.acl.refusals)


def test_knowledge_notes_the_output_size_for_4k_vdec_on_310_and_910():
    """The verdict for a 3840x2160 stream on 310/910 says that it needs the channel's output size set (the
    rule cites the 6.0.1 page); 310P (default 4096x4096) gets no such note, nor does 1920x1080 on 310."""
    from dvpipe.knowledge import check

    for soc in ("Ascend310", "Ascend910"):
        v = check(soc, "6.0.1", unit="vdec", width=3840, height=2160, fmt="h264")
        notes = [f for f in v.reasons if f.rule_id == "vdec.v1.out_pic_size_default.310_910"]
        assert v.ok and notes and "vdec_set_channel_desc_out_pic_width" in notes[0].message
        assert "aclpythondevg_01_0322" in notes[0].source
    for soc, (w, h) in (("Ascend310P3", (3840, 2160)), ("Ascend310", (1920, 1080)), ("Ascend310", (1920, 1120))):
        v = check(soc, "6.0.1", unit="vdec", width=w, height=h, fmt="h264")
        assert not [f for f in v.reasons if f.rule_id == "vdec.v1.out_pic_size_default.310_910"], (soc, w, h)


@pytest.mark.parametrize("codec, pix_fmt, options, refused", [
    ("libx264", "yuv420p", {}, None),
    ("libx264", "yuv444p", {}, "profile high444 is not supported"),  # High 4:4:4, 4:4:4 chroma
    ("libx264", "yuv420p10le", {}, "10-bit is not supported"),  # High 10
    ("libx264", "yuv420p", {"x264-params": "level=6.2"}, "level 6.2 is above the maximum 5.1"),
    ("libx265", "yuv420p10le", {"x265-params": "log-level=error"}, None),  # Main 10: "8/10bit"
    ("libx265", "yuv420p12le", {"x265-params": "log-level=error"}, "12-bit is not supported"),
    ("libx265", "yuv444p", {"x265-params": "log-level=error"}, "chroma 444 is not supported"),
], ids=["h264-high", "h264-444", "h264-high10", "h264-level-6.2", "h265-main10", "h265-12bit", "h265-444"])
def test_software_vdec_refuses_streams_outside_the_documented_formats(codec, pix_fmt, options, refused):
    """constraints.md §3.1 (aclpythondevg_01_0337): H.264 Baseline/Main/High 8-bit, H.265 8/10-bit, 4:2:0, up to
    level 5.1. The software device reads the stream's sequence parameter set and fails its pictures (callback ret
    code 1) for anything else; decode_stream refuses such a stream before opening a channel."""
    rt = _acl.runtime("sim", T310P)
    data = h264_stream(_frames(2), fmt="h264" if codec == "libx264" else "hevc", codec=codec, pix_fmt=pix_fmt,
                       options=options)
    aus = list(access_units(data, "h264" if codec == "libx264" else "h265")[4])
    calls, sent, bufs = [], [], []
    a, d, tid, stop = _raw_channel(rt, 1, calls, sent, entype=3 if codec == "libx264" else 0)
    seen = len(rt.acl.refusals)
    sent.append(0)
    assert _raw_send(rt, a, d, aus[0][0], 320 * 240 * 3 // 2, 0, bufs) == 0
    _raw_close(a, d, tid, stop, bufs)
    assert [c[0] for c in calls] == [0]
    assert (calls[0][2] == 0) == (refused is None)
    if refused is None:
        assert len(list(decode_stream(data, T310P, codec="h264" if codec == "libx264" else "h265"))) == 2
        return
    assert refused in " ".join(m for _r, m in list(rt.acl.refusals)[seen:])
    with pytest.raises(StepRefused, match=refused):
        next(decode_stream(data, T310P, codec="h264" if codec == "libx264" else "h265"))


def test_a_stream_of_two_pictures_is_sized_from_its_pictures():
    """A short B-frame stream outputs its pictures only when the decoder drains: its size must still be read
    (it was 0x0 and judged as 1x1, below VDEC's 128x128 minimum)."""
    data = h264_stream(_frames(2), bframes=2)
    codec, _profile, w, h, _aus = access_units(data)
    assert (codec, w, h) == ("h264", 320, 240)
    assert len(list(decode_stream(data, T310))) == 2
