"""dvpipe.bitstream.stream_format against FFmpeg's reading of the same streams (libx264 / libx265 encodes):
the profile FFmpeg's decoder names and the decoded pictures' bit depth; the chroma format and the level the
encoder was told to write (FFmpeg's H.264 decoder outputs a monochrome stream as yuv420p)."""
from __future__ import annotations

import numpy as np
import pytest

from dvpipe.bitstream import stream_format
from dvpipe.testing.dvpp import h264_stream

av = pytest.importorskip("av")

#: FFmpeg's profile names (libavcodec profiles.c) -> dvpipe's
_FFMPEG_PROFILE = {"Constrained Baseline": "baseline", "Baseline": "baseline", "Main": "main", "High": "high",
                   "High 10": "high10", "High 4:2:2": "high422", "High 4:4:4 Predictive": "high444",
                   "Main 10": "main10", "Rext": "rext"}
_CHROMA = {"yuv420p": "420", "yuv422p": "422", "yuv444p": "444", "gray": "400"}


def encode(codec: str, pix_fmt: str, options: dict) -> bytes:
    frames = [np.random.default_rng(i).integers(0, 255, (64, 64, 3), np.uint8) for i in range(3)]
    return h264_stream(frames, fmt="h264" if codec == "libx264" else "hevc", codec=codec, pix_fmt=pix_fmt,
                       options=options)


def ffmpeg_reading(data: bytes, codec: str):
    """(profile, bit depth) as FFmpeg's decoder reports them."""
    dec = av.CodecContext.create("h264" if codec == "libx264" else "hevc", "r")
    frames = [f for p in dec.parse(data) for f in dec.decode(p)] + list(dec.decode(None))
    return _FFMPEG_PROFILE.get(dec.profile, dec.profile), frames[0].format.components[0].bits


@pytest.mark.parametrize("codec, pix_fmt, options, level", [
    ("libx264", "yuv420p", {"profile": "baseline", "x264-params": "level=3.1"}, 3.1),
    ("libx264", "yuv420p", {"profile": "main", "x264-params": "level=4"}, 4.0),
    ("libx264", "yuv420p", {"x264-params": "level=6.2"}, 6.2),
    ("libx264", "yuv420p10le", {"x264-params": "level=5.1"}, 5.1),
    ("libx264", "yuv422p", {"x264-params": "level=5.1"}, 5.1),
    ("libx264", "yuv444p", {"x264-params": "level=5.1"}, 5.1),
    ("libx264", "gray", {"x264-params": "level=5.1"}, 5.1),
    ("libx265", "yuv420p", {"x265-params": "log-level=error:level-idc=51"}, 5.1),
    ("libx265", "yuv420p10le", {"x265-params": "log-level=error:level-idc=62"}, 6.2),
    ("libx265", "yuv444p", {"x265-params": "log-level=error:level-idc=41"}, 4.1),
    ("libx265", "yuv420p12le", {"x265-params": "log-level=error:level-idc=51"}, 5.1),
])
def test_stream_format_reads_what_ffmpeg_reads(codec, pix_fmt, options, level):
    data = encode(codec, pix_fmt, options)
    got = stream_format(data, "h264" if codec == "libx264" else "h265")
    assert got is not None
    assert (got.profile, got.bit_depth) == ffmpeg_reading(data, codec)
    assert got.chroma == _CHROMA[pix_fmt.replace("10le", "").replace("12le", "")]
    assert got.level == pytest.approx(level)
    assert got.interlaced is False


def test_stream_format_of_interlaced_h264_and_of_a_unit_without_sps():
    data = encode("libx264", "yuv420p", {"x264-params": "interlaced=1"})
    assert stream_format(data, "h264").interlaced is True  # frame_mbs_only_flag 0 (x264 --interlaced)
    slice_only = data[data.rindex(b"\x00\x00\x01"):]  # the last NAL unit: a slice
    assert stream_format(slice_only, "h264") is None
