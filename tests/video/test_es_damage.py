"""An H.264 elementary stream with one damaged access unit: the frames around it keep their capture times.

An elementary stream has no timestamps: a frame's capture time is its place in presentation order, read from
the picture order counts of the slice headers. A damaged unit whose slice header still reads as numbers (a
unit zeroed after its first bytes, as ``faults: corrupt`` damages one) gave a picture order count of 0 or a
frame_num gap, and every later frame moved by one or more frame periods -- silently, the pictures right but
their times wrong; a damaged IDR slice header left the next pictures' POCs counted from the sequence before
(the frames of two GOPs interleaved). Streams by libx264 (tools/make_test_media.py), each picture showing its
own input index (``frame_image(k)``); the damage: a unit's bytes zeroed after its first 6 (``corrupt_data``'s
form), or its slice zeroed after the slice's first bytes.

References: the encoder's input (the picture a frame shows, and so its place, START + k / fps) and FFmpeg
(every emitted frame is one of the pictures FFmpeg decodes from the damaged file, exactly).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dvpipe.bitstream import _nal_bounds
from dvpipe.video import nal_types

from . import test_structures as tvs
from .test_open_gop_es import source_index
from .test_structures import ES_FPS, START_NS, drops, media, run_collect

#: (stream, unit damaged in decode order, how, first picture of the next intact IDR's sequence, pictures):
#: libx264's B-pyramid stream (keyint 16: unit 5 is P8, unit 13 the GOP's last picture in presentation order,
#: unit 16 the second IDR) and a stream without B-frames (POC type 2: pictures output in decode order, frame_num
#: read for lost references); "unit": zeroed after its first 6 bytes, "slice": its slice NAL unit zeroed after
#: the NAL header and one byte (the parameter sets before it intact)
CASES = [("bframes", 5, "unit", 16, 40), ("bframes", 13, "unit", 16, 40), ("bframes", 16, "slice", 32, 40),
         ("no_bframes", 5, "unit", 12, 36), ("no_bframes", 13, "unit", 24, 36), ("no_bframes", 12, "slice", 24, 36)]


def _stream(folder: Path, kind: str) -> Path:
    if kind == "bframes":
        return media.make_h264_annexb(folder)
    return media._encode(folder / "h264_no_bframes_es.h264", codec="libx264", fmt="h264", n=36, max_b_frames=0,
                         options=media._x264("keyint=12:scenecut=0:bframes=0"))


def _damaged(au: bytes, how: str) -> bytes:
    if how == "unit":
        return au[:6] + bytes(len(au) - 6)
    start, end = list(_nal_bounds(au))[-1]  # the slice, after any parameter sets and SEI
    return au[:start + 2] + bytes(end - start - 2) + au[end:]


@pytest.mark.parametrize("kind,unit,how,next_idr,n", CASES)
def test_a_damaged_unit_costs_its_pictures_and_moves_no_frame(tmp_path, kind, unit, how, next_idr, n):
    units = media.annexb_units(_stream(tmp_path, kind), "h264")
    assert len(units) == n
    units[unit] = _damaged(units[unit], how)
    path = tmp_path / f"{kind}_damaged.h264"
    path.write_bytes(b"".join(units))
    tvs.CODEC[path.stem] = "h264"
    ref = [r["image"].astype(np.float32) for r in media.reference_frames(path)]
    got, acc = run_collect(path, "h264", media.W, media.H, es=True)
    d = drops(acc)
    label = f"{kind}, unit {unit} damaged ({how}): {len(got)} emitted, drops {d}"
    emitted = set()
    for t, img in got:
        k, err = source_index(img, range(n))
        assert err < 12 and any(np.array_equal(img, r) for r in ref), f"{label}: a frame FFmpeg does not decode"
        assert t == START_NS + round(k * 1e9 / ES_FPS), \
            f"{label}: picture {k} at {(t - START_NS) * ES_FPS / 1e9:.2f} frame periods, its place is {k}"
        emitted.add(k)
    # every picture is accounted for: emitted, or dropped as the damaged one or as decoded from it
    assert acc.entered["CAM0"] == n == len(got) + sum(d.values()), label
    assert d.get("corrupt") == 1 and set(d) <= {"corrupt", "keyframe_wait"}, label
    assert set(range(next_idr, n)) <= emitted, f"{label}: pictures after the next IDR lost"


@pytest.mark.parametrize("codec", ["h264", "h265"])
def test_a_picture_missing_before_the_second_shown_does_not_set_the_poc_step(tmp_path, codec):
    """The place of a frame is its POC over the stream's POC step (x264: 2 a frame, x265: 1). Learnt from the
    frames as they were emitted, the step was the first gap seen: with the picture shown second missing from
    the file, the gap from the first picture to the third (x265: 2) became the step, and every later frame
    took a place one early. The truth: the picture each frame shows (the encoder's input index)."""
    n = 40
    path, units = _three_gops(tmp_path, codec, n)
    second = media._source_order(units, _FMT[codec]).index(1)  # the unit of the picture shown second
    del units[second]
    out = tmp_path / f"missing_second_{codec}.{codec}"
    out.write_bytes(b"".join(units))
    tvs.CODEC[out.stem] = codec
    got, acc = run_collect(out, codec, media.W, media.H, es=True)
    shown = []
    for t, img in got:
        k, err = source_index(img, range(n))
        assert err < 12 and t == START_NS + round(k * 1e9 / ES_FPS), \
            f"picture {k} at {(t - START_NS) * ES_FPS / 1e9:.2f} frame periods, its place is {k}"
        shown.append(k)
    assert 1 not in shown and len(shown) >= n // 2, (shown, drops(acc))


_FMT = {"h264": "h264", "h265": "hevc"}  # FFmpeg's names


def _three_gops(folder: Path, codec: str, n: int) -> tuple[Path, list[bytes]]:
    """A libx264 (B-pyramid) or libx265 elementary stream of ``n`` pictures in GOPs of 16, and its access units."""
    if codec == "h264":
        path = media.make_h264_annexb(folder, n)
    else:
        path = media._encode(folder / "gops.h265", codec="libx265", fmt="hevc", n=n,
                             options={"x265-params": "log-level=error:keyint=16:open-gop=0:scenecut=0"})
    return path, media.annexb_units(path, _FMT[codec])


def _run_placed(folder: Path, name: str, codec: str, units: list[bytes], clean: list[np.ndarray]):
    """Run the elementary stream of ``units``: every frame must be at the place of the picture it shows (the
    encoder's input index) and be the clean stream's picture there. Returns (places shown, accounting)."""
    out = folder / f"{name}.{codec}"
    out.write_bytes(b"".join(units))
    tvs.CODEC[out.stem] = codec
    got, acc = run_collect(out, codec, media.W, media.H, es=True)
    shown: set[int] = set()
    for t, img in got:
        k, _ = source_index(img, range(len(clean)))
        assert k not in shown and t == START_NS + round(k * 1e9 / ES_FPS) and np.array_equal(img, clean[k]), \
            f"picture {k} at {(t - START_NS) * ES_FPS / 1e9:.2f} frame periods, its place is {k}; drops {drops(acc)}"
        shown.add(k)
    return shown, acc


#: (codec, the unit lost or damaged, how): three GOPs of 16 (IDRs at 0, 16 and 32). "remove": the unit taken out
#: of the file; "unit" and "slice" as above. The last picture of a GOP in presentation order is found missing
#: only by the frame_num gap it leaves; an IDR lost lets its pictures' POCs repeat those of the sequence before;
#: an IDR whose parameter sets are zeroed makes FFmpeg's parser join the next picture to the damaged unit.
LOSSES = [("h264", "last shown of the first GOP", "remove"), ("h264", "second IDR", "remove"),
          ("h264", "second IDR", "unit"), ("h265", "second IDR", "remove"), ("h265", "second IDR", "unit"),
          ("h265", "second IDR", "slice")]


@pytest.mark.parametrize("codec,which,how", LOSSES)
def test_a_lost_or_damaged_idr_or_gop_end_moves_no_later_frame(tmp_path, codec, which, how):
    """Before: the next sequence started one place early (the lost picture uncounted) or late (a damaged IDR
    counted twice), moving every later frame; an H.265 IDR lost left the sequence before's POC 0 a reference.
    The truth: the encoder's input index each frame shows, and the clean stream's picture at that place."""
    n = 40
    path, units = _three_gops(tmp_path, codec, n)
    clean = [r["image"].astype(np.float32) for r in media.reference_frames(path)]
    victim = 16 if which == "second IDR" else media._source_order(units, _FMT[codec]).index(15)
    assert (victim == 16) == (which == "second IDR") and len(units) == len(clean) == n
    if how == "remove":
        del units[victim]
    else:
        units[victim] = _damaged(units[victim], how)
    shown, acc = _run_placed(tmp_path, f"lost_{codec}_{victim}_{how}", codec, units, clean)
    assert set(range(32, n)) <= shown, (sorted(shown), drops(acc))
    # every picture of the encoder's accounted: a frame, a drop, or lost at the source (taken out of the file, or
    # zeroed with its start codes, so that its picture is not one the stream holds)
    lost = acc.health["CAM0"].lost_at_source
    assert len(shown) + sum(drops(acc).values()) + lost == n and (how != "remove" or lost == 1), (lost, drops(acc))


def _unreferenced(au: bytes, codec: str) -> bool:
    """Whether an access unit's slice NAL unit headers say no picture references it: H.264 nal_ref_idc 0,
    H.265 a sub-layer non-reference type (even, below 16)."""
    heads = [au[start] for start, _ in _nal_bounds(au)]
    if codec == "h264":
        slices = [h for h in heads if h & 0x1F in (1, 5)]
        return bool(slices) and all(h & 0x60 == 0 for h in slices)
    types = [(h >> 1) & 0x3F for h in heads if (h >> 1) & 0x3F < 32]
    return bool(types) and all(t < 16 and t % 2 == 0 for t in types)


@pytest.mark.parametrize("codec", ["h264", "h265"])
def test_a_picture_lost_from_the_file_is_counted_lost_at_the_source_and_costs_no_other_frame(tmp_path, codec):
    """A picture that nothing references, taken out of the middle of a GOP: its place stays empty (the frames
    after it keep theirs), it was counted nowhere (the run's frames added up to the units read, the summary
    said nothing of it), and it must not cost another frame. The truth: the encoder's input index each frame
    shows and the clean stream's picture at that place."""
    n = 40
    path, units = _three_gops(tmp_path, codec, n)
    clean = [r["image"].astype(np.float32) for r in media.reference_frames(path)]
    order = media._source_order(units, _FMT[codec])
    unreferenced = [i for i in range(1, 16) if _unreferenced(units[i], codec)]
    assert unreferenced, "no non-reference picture in the first GOP (the test would prove nothing)"
    victim = unreferenced[0]
    del units[victim]
    shown, acc = _run_placed(tmp_path, f"lost_unreferenced_{codec}", codec, units, clean)
    assert shown == set(range(n)) - {order[victim]} and drops(acc) == {}, (sorted(set(range(n)) - shown), drops(acc))
    assert acc.health["CAM0"].lost_at_source == 1 and acc.totals()["lost_at_source"] == 1


def test_a_lost_idr_in_a_stream_output_in_decode_order_moves_no_later_frame(tmp_path):
    """libx264 without B-frames (POC type 2: each picture the next place, after the reference pictures its
    frame_num says were lost). With the second IDR lost, the P picture after it (frame_num 1) read as 5 lost
    reference pictures (frame_num 11 to 1, modulo 16): every frame after the third IDR took a place 4 late,
    and 5 pictures were counted lost where 1 was. The truth: the encoder's input index each frame shows."""
    n = 36
    path = _stream(tmp_path, "no_bframes")
    units = media.annexb_units(path, "h264")
    clean = [r["image"].astype(np.float32) for r in media.reference_frames(path)]
    assert 5 in nal_types(units[12], "h264")
    del units[12]  # the second IDR
    shown, acc = _run_placed(tmp_path, "no_bframes_lost_idr", "h264", units, clean)
    assert set(range(24, n)) <= shown, sorted(shown)
    lost = acc.health["CAM0"].lost_at_source
    assert lost == 1 and len(shown) + sum(drops(acc).values()) + lost == n, (lost, drops(acc))


def test_a_lost_idr_after_a_gop_longer_than_half_the_poc_cycle_moves_no_later_frame(tmp_path):
    """libx264 GOPs of 40 with MaxPicOrderCntLsb 64: after the second IDR is lost, its pictures' POCs carry the
    sequence before's high part (64), so the lost IDR's POC 0 is 64 there, not 0; counted from 0, every frame
    after the third IDR moved 32 places."""
    n = 120
    path = media._encode(tmp_path / "long_gops.h264", codec="libx264", fmt="h264", n=n, max_b_frames=3,
                         options=media._x264("keyint=40:min-keyint=40:scenecut=0:bframes=3:b-pyramid=normal:b-adapt=0"))
    units = media.annexb_units(path, "h264")
    clean = [r["image"].astype(np.float32) for r in media.reference_frames(path)]
    del units[40]  # the second IDR
    shown, _ = _run_placed(tmp_path, "long_gops_lost_idr", "h264", units, clean)
    assert set(range(80, n)) <= shown, sorted(shown)


def test_a_later_slice_segment_of_another_nal_type_is_the_pictures_damage_not_another_picture(tmp_path):
    """Three slice segments a picture; the second segment of a TRAIL_R picture given NAL unit type 0 (one bit):
    a picture's own damage. Taken for another picture joined to it, the unit was split, the damaged picture
    emitted valid and a phantom picture counted, moving the frames after the next IDR one place late."""
    n = 40
    path = media._encode(tmp_path / "slices.h265", codec="libx265", fmt="hevc", n=n, options={
        "x265-params": "log-level=error:keyint=16:min-keyint=16:scenecut=0:open-gop=0:ctu=16:slices=3"})
    units = media.annexb_units(path, "hevc")
    clean = [r["image"].astype(np.float32) for r in media.reference_frames(path)]
    victim = next(i for i in range(4, n) if set(nal_types(units[i], "h265")) == {1})
    start, _ = [b for b in _nal_bounds(units[victim]) if (units[victim][b[0]] >> 1) & 0x3F == 1][1]
    unit = bytearray(units[victim])
    unit[start] &= 0x81  # NAL unit type 0 (TRAIL_N), the forbidden bit and the layer bit kept
    units[victim] = bytes(unit)
    shown, acc = _run_placed(tmp_path, "slices_retyped", "h265", units, clean)
    d = drops(acc)
    assert acc.entered["CAM0"] == n == len(shown) + sum(d.values()), d
    assert d.get("corrupt", 0) >= 1, d
