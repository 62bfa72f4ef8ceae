"""A stream's first picture without the decoder's reorder delay (``ReorderingDecoder(first_picture_early=...)``).

With B-frames FFmpeg holds the first picture until two or three more access units are decoded; dvpipe
decodes a stream's first IDR picture with an engine of its own instead. Checked against FFmpeg alone
(PyAV, no dvpipe): the same pixels for every frame, the first after one unit; and, where the first unit
is damaged, the same outcome as the usual path for every frame.
"""
from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest

from dvpipe.errors import FrameError
from dvpipe.video import FILE_LOOKAHEAD, AccessUnit, FFmpegEngine, ReorderingDecoder, is_keyframe, presentation_packets

from .test_yuv_path import _images


def _encode(codec: str, n: int = 14) -> list[tuple[bytes, int]]:
    """Annex B access units ``(data, pts_ms)`` with B-frames, in decode order."""
    images = _images(n)
    cc = av.CodecContext.create("libx264" if codec == "h264" else "libx265", "w")
    cc.width, cc.height, cc.pix_fmt = images[0].shape[1], images[0].shape[0], "yuv420p"
    cc.time_base, cc.framerate = Fraction(1, 1000), Fraction(10)
    cc.gop_size, cc.max_b_frames = 12, 3
    cc.options = ({"preset": "veryfast", "x264-params": "bframes=3:b-pyramid=normal:repeat-headers=1"}
                  if codec == "h264" else {"preset": "veryfast", "x265-params": "bframes=3:log-level=error"})
    out = []
    for k, img in enumerate(images):
        f = av.VideoFrame.from_ndarray(img, format="bgr24")
        f.pts = 100 * k
        out += [(bytes(p), int(p.pts)) for p in cc.encode(f)]
    return out + [(bytes(p), int(p.pts)) for p in cc.encode(None)]


def _packets(aus, codec):
    return presentation_packets((AccessUnit(data, pts * 1_000_000, is_keyframe(data, codec)) for data, pts in aus),
                                "pts", FILE_LOOKAHEAD)


def _ffmpeg_yuv(aus, codec) -> list[np.ndarray]:
    """FFmpeg alone: every picture's planes, in presentation order."""
    dec = av.CodecContext.create({"h264": "h264", "h265": "hevc"}[codec], "r")
    pics = []
    for data, pts in aus:
        p = av.Packet(data)
        p.pts = pts
        pics += dec.decode(p)
    pics += dec.decode(None)
    return [f.to_ndarray(format="yuv420p") for f in sorted(pics, key=lambda f: f.pts)]


class _Counting(FFmpegEngine):
    """FFmpeg's engine, counting the access units every instance was sent."""

    sent = 0

    def send(self, data, tag):
        type(self).sent += 1
        return super().send(data, tag)


def _outcomes(packets, codec, early: bool) -> list:
    """Each frame's picture (planes as bytes, damage flagged or not) or its error, in words."""
    dec = ReorderingDecoder(codec, first_picture_early=early)
    out = []
    for p in packets:
        flagged = []
        try:
            pic = dec.picture(p, on_corrupt=flagged.append)
            out.append((pic.to_ndarray(format="yuv420p").tobytes(), flagged))
        except FrameError as e:
            out.append(f"{type(e).__name__}: {e}")
    return out


@pytest.mark.parametrize("codec", ["h264", "h265"])
def test_the_first_picture_after_one_unit_then_every_picture_as_ffmpeg_decodes_it(codec):
    aus = _encode(codec)
    packets = _packets(aus, codec)
    want = _ffmpeg_yuv(aus, codec)
    assert len(packets) == len(want) == 14
    for early, first_units in ((False, None), (True, 1)):
        _Counting.sent = 0
        dec = ReorderingDecoder(codec, engine=_Counting, first_picture_early=early)
        np.testing.assert_array_equal(dec.picture(packets[0]).to_ndarray(format="yuv420p"), want[0])
        if first_units is None:
            assert _Counting.sent > 1  # the usual path waits for the reorder delay (what the early path saves)
        else:
            assert _Counting.sent == first_units
        for k, p in enumerate(packets[1:], 1):
            np.testing.assert_array_equal(dec.picture(p).to_ndarray(format="yuv420p"), want[k], err_msg=f"frame {k}")
        # the stream's decoder decoded every unit once; the early path adds one intra decode
        assert _Counting.sent == len(aus) + (1 if early else 0)


@pytest.mark.parametrize("damage", ["truncated", "bitflip"])
def test_a_damaged_first_unit_goes_the_usual_way(damage):
    aus = _encode("h264")
    data, pts = aus[0]
    if damage == "truncated":
        bad = data[: len(data) * 2 // 3]
    else:
        b = bytearray(data)
        b[len(b) // 2] ^= 0xFF
        bad = bytes(b)
    packets = _packets([(bad, pts)] + aus[1:], "h264")
    early, usual = _outcomes(packets, "h264", early=True), _outcomes(packets, "h264", early=False)
    assert early == usual
    assert any(isinstance(o, str) or o[1] for o in usual)  # the damage shows, so the comparison means something


def test_no_early_decode_for_a_stream_without_an_idr_start_nor_after_a_reset():
    aus = _encode("h264")
    packets = _packets(aus[1:], "h264")  # starts after the IDR: frames wait for a keyframe, as before
    assert _outcomes(packets, "h264", True) == _outcomes(packets, "h264", False)
    dec = ReorderingDecoder("h264", engine=_Counting)
    for p in _packets(aus, "h264"):
        dec.picture(p)
    _Counting.sent = 0
    dec.picture(_packets(aus, "h264")[0])  # a new stream (its first packet starts with a reset)
    assert _Counting.sent > 1


class _LateVerdict(FFmpegEngine):
    """FFmpeg's engine; the first picture released after a later IDR unit was sent whose own unit came before that
    IDR gets a corrupt verdict, as FFmpeg gives one: with the picture's output, units after it already sent."""

    flagged: list = []
    idr_tag = None

    def send(self, data, tag):
        from dvpipe.video import _is_idr

        if tag > 0 and _is_idr(data, "h264"):
            type(self).idr_tag = tag
        out = []
        for t, pic, damage in super().send(data, tag):
            if self.idr_tag is not None and t < self.idr_tag and not self.flagged:
                type(self).flagged.append(t)
                damage = "concealed errors (a late verdict)"
            out.append((t, pic, damage))
        return out


def test_a_late_corrupt_verdict_does_not_cost_the_gop_after_an_idr_already_sent():
    """A damaged picture whose verdict comes after the next IDR was sent: pictures decoded from that IDR on reference
    nothing before it (FFmpeg decodes them bit-exact), so they are emitted; the decoder no longer waits for yet
    another keyframe (the rest of the GOP was dropped as keyframe_wait)."""
    aus = _encode("h264", n=30)
    packets = _packets(aus, "h264")
    want = _ffmpeg_yuv(aus, "h264")
    _LateVerdict.flagged, _LateVerdict.idr_tag = [], None
    dec = ReorderingDecoder("h264", engine=_LateVerdict, first_picture_early=False)
    got = []
    for p in packets:
        try:
            got.append(dec.picture(p).to_ndarray(format="yuv420p"))
        except FrameError:
            got.append(None)
    assert _LateVerdict.flagged and _LateVerdict.idr_tag is not None  # the case happened
    first_after = 12  # the second IDR is picture 12 (gop_size 12, closed GOPs)
    assert any(g is None for g in got[:first_after])  # the flagged picture (and what it fed) is out
    for k in range(first_after, len(want)):
        assert got[k] is not None, f"picture {k} after the IDR was dropped"
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"picture {k}")
