"""An H.264 elementary stream with one damaged access unit: the frames around it keep their capture times.

An elementary stream has no timestamps: a frame's capture time is its place in presentation order, read from
the picture order counts of the slice headers. A damaged unit whose slice header still reads as numbers (a
unit zeroed after its first bytes, as ``faults: corrupt`` damages one) gave a picture order count of 0 or a
frame_num gap, and every later frame moved by one or more frame periods -- silently, the pictures right but
their times wrong. Streams by libx264 (tools/make_test_media.py), each picture showing its own input index
(``frame_image(k)``); the damage is a unit's bytes zeroed after its first 6 (``corrupt_data``'s form).

References: the encoder's input (the picture a frame shows, and so its place, START + k / fps) and FFmpeg
(every emitted frame is one of the pictures FFmpeg decodes from the damaged file, exactly).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from . import test_structures as tvs
from .test_open_gop_es import source_index
from .test_structures import ES_FPS, START_NS, drops, media, run_collect

#: (stream, unit damaged in decode order, first picture of the next IDR's sequence, pictures): libx264's B-pyramid
#: stream (keyint 16: unit 5 is P8, unit 13 the GOP's last picture in presentation order) and a stream without
#: B-frames (POC type 2: pictures output in decode order, frame_num read for lost references)
CASES = [("bframes", 5, 16, 40), ("bframes", 13, 16, 40), ("no_bframes", 5, 12, 36), ("no_bframes", 13, 24, 36)]


def _stream(folder: Path, kind: str) -> Path:
    if kind == "bframes":
        return media.make_h264_annexb(folder)
    return media._encode(folder / "h264_no_bframes_es.h264", codec="libx264", fmt="h264", n=36, max_b_frames=0,
                         options=media._x264("keyint=12:scenecut=0:bframes=0"))


@pytest.mark.parametrize("kind,unit,next_idr,n", CASES)
def test_a_damaged_unit_costs_its_pictures_and_moves_no_frame(tmp_path, kind, unit, next_idr, n):
    units = media.annexb_units(_stream(tmp_path, kind), "h264")
    assert len(units) == n
    units[unit] = units[unit][:6] + bytes(len(units[unit]) - 6)
    path = tmp_path / f"{kind}_damaged.h264"
    path.write_bytes(b"".join(units))
    tvs.CODEC[path.stem] = "h264"
    ref = [r["image"].astype(np.float32) for r in media.reference_frames(path)]
    got, acc = run_collect(path, "h264", media.W, media.H, es=True)
    d = drops(acc)
    label = f"{kind}, unit {unit} zeroed: {len(got)} emitted, drops {d}"
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
