"""H.264 memory_management_control_operation 5 (8.2.5.4): after such a picture every reference is gone,
frame_num restarts from 0 and picture order count from the picture itself (8.2.1). A reader that ignores
the operation sees a gap in frame_num (a false "reference picture missing": frames dropped until the next
IDR) and, in an elementary stream, picture order counts that repeat (frames misplaced).

References: FFmpeg. Its bitstream tracer (``trace_headers``, libavcodec's own H.264 syntax reader) gives
every slice's marking operations and the bit position where the marking ends, to check dvpipe's reading of
the slice header through dec_ref_pic_marking on libx264 streams of varied syntax; its decoder gives the
pictures. The streams with the operation are libx264's with rewritten slice headers
(``tools/make_test_media.py``, "memory management control 5"): FFmpeg decodes them to the same pictures
as libx264's own stream, and reads the operation where the rewrite put it.
"""
from __future__ import annotations

import re
from pathlib import Path

import av
import av.logging
import numpy as np
import pytest

import dvpipe.bitstream as bitstream
from dvpipe.bitstream import StreamHeaders

from . import test_structures as tvs
from .test_open_gop_es import check_frames
from .test_structures import drops, media, media_dir, media_file, run_collect  # noqa: F401 - fixture

MMCO5 = ["h264_mmco5_es", "h264_mmco5_poc0_es"]
tvs.CODEC.update({name: "h264" for name in MMCO5})


def ffmpeg_slices(path: Path) -> list[dict]:
    """Per slice NAL unit in decode order, as FFmpeg's ``trace_headers`` reads it: ``ops`` (the
    memory_management_control_operation values before the closing 0), ``end`` (bit position, NAL header
    byte included, of the first field after dec_ref_pic_marking), ``reference``, ``idr``, ``qp_delta``
    (slice_qp_delta)."""
    with av.open(str(path), format="h264") as c:
        st = c.streams.video[0]
        av.logging.set_level(av.logging.TRACE)
        try:
            with av.logging.Capture(True) as logs:
                bsf = av.bitstream.BitStreamFilterContext("trace_headers", st)
                for pkt in c.demux(st):
                    bsf.filter(pkt)
        finally:
            av.logging.set_level(None)
    slices: list[dict] = []
    marking = ("no_output_of_prior_pics_flag", "long_term_reference_flag", "adaptive_ref_pic_marking_mode_flag",
               "memory_management_control_operation", "difference_of_pic_nums_minus1", "long_term_pic_num",
               "long_term_frame_idx", "max_long_term_frame_idx_plus1")
    cur: dict = {}
    for _, name, line in logs:
        if name != "trace_headers":
            continue
        if line.startswith("nal_unit_type:"):
            cur = {}
            t = int(line.split()[1].split("(")[0])
            if t in (1, 5):
                cur = {"ops": [], "end": None, "idr": t == 5, "in_marking": False, "qp_delta": None,
                       "reference": line.rstrip().endswith(("1", "2", "3"))}
                slices.append(cur)
            continue
        m = re.match(r"\s*(\d+)\s+(\w+)\s.*=\s*(-?\d+)\s*$", line)
        if not m or not cur:
            continue
        pos, field, value = int(m.group(1)), m.group(2), int(m.group(3))
        if field == "slice_qp_delta":
            cur["qp_delta"] = value
        if field in marking:
            cur["in_marking"] = True
            if field == "memory_management_control_operation" and value:
                cur["ops"].append(value)
        elif cur["in_marking"] and cur["end"] is None:
            cur["end"] = pos
    return slices


def _x264_stream(folder: Path, name: str, params: str) -> Path:
    return media._encode(folder / f"{name}.h264", codec="libx264", fmt="h264", n=30, max_b_frames=3,
                         options=media._x264(params))


X264_SYNTAX = {
    # B-pyramid (marking operation 1 on its B references), 4 references with list modification, explicit
    # weighted prediction of P slices with luma and chroma weights, CABAC
    "pyramid_weightp": "keyint=24:scenecut=0:bframes=3:b-pyramid=normal:b-adapt=0:ref=4:weightp=2",
    # CAVLC, interlaced (MBAFF: field_pic_flag in every slice header), strict pyramid
    "interlaced_cavlc": "keyint=24:scenecut=0:bframes=3:b-pyramid=strict:b-adapt=0:ref=3:cabac=0:interlaced=1",
}


@pytest.mark.parametrize("name", list(X264_SYNTAX) + MMCO5)
def test_slice_headers_are_read_through_the_marking_as_ffmpeg_reads_them(media_dir, tmp_path, monkeypatch, name):
    path = (media_file(name, media_dir) if name in MMCO5 else _x264_stream(tmp_path, name, X264_SYNTAX[name]))
    read = []

    def spy(r, sps, pps, slice_type, idr=False, ref_idc=1):
        ops = real(r, sps, pps, slice_type, idr, ref_idc)
        if ref_idc and not idr:
            read.append((ops, r.position + 8))  # + the NAL unit header byte, as FFmpeg counts
        return ops

    real = bitstream._marking_operations
    monkeypatch.setattr(bitstream, "_marking_operations", spy)
    headers = StreamHeaders("h264")
    pictures = [headers.read(u) for u in media.annexb_units(path, "h264")]
    want = [(s["ops"], s["end"]) for s in ffmpeg_slices(path) if s["reference"] and not s["idr"]]
    assert sum(bool(ops) for ops, _ in want) >= 2, "the stream should carry marking operations"
    assert read == want
    assert [p.damage for p in pictures if p.damage] == []


@pytest.mark.parametrize("name", list(X264_SYNTAX) + MMCO5)
def test_every_slice_header_is_read_to_its_qp_as_ffmpeg_reads_it(media_dir, tmp_path, monkeypatch, name):
    """Through the marking and on (cabac_init_idc) to slice_qp_delta, for every slice (IDR, non-reference):
    the QP is what tells a damaged header from a real one (a zeroed unit reads as numbers up to there)."""
    path = (media_file(name, media_dir) if name in MMCO5 else _x264_stream(tmp_path, name, X264_SYNTAX[name]))
    read = []

    def spy(*args):
        ops, delta = real(*args)
        read.append(delta)
        return ops, delta

    real = bitstream._slice_tail
    monkeypatch.setattr(bitstream, "_slice_tail", spy)
    headers = StreamHeaders("h264")
    units = media.annexb_units(path, "h264")
    assert [p.damage for p in (headers.read(u) for u in units) if p.damage] == []
    want = [s["qp_delta"] for s in ffmpeg_slices(path)]
    assert None not in want and len(set(want)) > 1, want  # varied QPs, every one read by FFmpeg
    assert read == [want[i] for i in _first_slices(units)]  # dvpipe reads the first slice of each access unit


def _first_slices(units: list[bytes]) -> list[int]:
    """Indices, among all slice NAL units in decode order, of each access unit's first slice."""
    out, k = [], 0
    for unit in units:
        types = [n[0] & 0x1F for n in bitstream.split_nal_units(unit)]
        slices = sum(t in (1, 5) for t in types)
        out.append(k)
        k += slices
    return out


def test_ffmpeg_reads_the_rewritten_streams_as_libx264s_own(media_dir):
    for name in MMCO5:
        path = media_file(name, media_dir)
        ops = [s["ops"] for s in ffmpeg_slices(path)]
        assert [k for k, o in enumerate(ops) if o] == list(media.MMCO5_PICTURES) and all(
            ops[k] == [5] for k in media.MMCO5_PICTURES), ops
        got, clean = media.reference_frames(path), media.reference_frames(media.clean_path(path))
        assert len(got) == len(clean) == 40 and not any(f["corrupt"] for f in got)
        assert all(np.array_equal(a["image"], b["image"]) for a, b in zip(got, clean))


@pytest.mark.parametrize("name", MMCO5)
def test_a_stream_with_operation_5_gives_every_picture_in_its_place(media_dir, name):
    # without the operation read: frame_num 1 after 9 is a "missing reference" (pictures 10-23 dropped as
    # damaged until the IDR at 24) and, POC type 0, pictures 10, 11, ... take the places of 9, 10, ...
    path = media_file(name, media_dir)
    ref = media.reference_frames(path)
    h, w = ref[0]["image"].shape[:2]
    got, acc = run_collect(path, "h264", w, h, es=True)
    label = f"{name}: {len(got)} emitted, drops {drops(acc)}"
    assert len(got) == len(ref) == 40 and drops(acc) == {}, label
    check_frames(name, path, ref, got, label)
