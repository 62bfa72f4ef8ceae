"""Annex-B elementary streams with open GOPs through `dvpipe run`'s machinery (issue 27, point 2).

Streams made by libx264 / libx265 (tools/make_test_media.py) and cut so that they start where a
recording or a camera's stream may start: at an H.264 recovery point (an open-GOP I-frame, or a
P-frame of an intra-refresh stream), at an H.265 CRA with RASL leading pictures; and one stream
with an access unit cut in half.

Two independent references: FFmpeg itself, decoding the same file the ordinary way
(``av.open(path).decode(video=0)``), and the encoder's input (each picture shows its own index,
``frame_image(k)``). Every emitted frame must be one of FFmpeg's pictures exactly, and the
encoder's picture k, with capture time ``start + (k - k0) / fps`` (``k0``: the first picture of
the stream in presentation order); every other frame is a counted drop whose reason says what
was waited for.
"""
from __future__ import annotations

import numpy as np
import pytest

from . import test_structures as tvs
from .test_structures import (ES_FPS, START_NS, drops, media, media_dir, media_file,  # noqa: F401 - fixture
                                   run_collect)

CODEC = {"h264_open_gop_es": "h264", "h264_refresh_es": "h264", "h265_cra_es": "h265", "h264_halfcut_es": "h264"}
tvs.CODEC.update(CODEC)  # the deployment helper names the codec by the file's stem


def source_index(img: np.ndarray, candidates) -> tuple[int, float]:
    """The encoder input picture ``img`` shows: ``(k, mean abs error)`` of the nearest ``frame_image``."""
    h, w = img.shape[:2]
    errs = [(float(np.abs(img.astype(np.float32) - media.frame_image(k, w, h)).mean()), k) for k in candidates]
    err, k = min(errs)
    return k, err


def run_es(name: str, media_dir):
    path = media_file(name, media_dir)
    ref = media.reference_frames(path)
    h, w = ref[0]["image"].shape[:2]
    got, acc = run_collect(path, CODEC[name], w, h, es=True)
    return path, ref, got, acc


def check_frames(name, path, ref, got, label):
    """Each emitted frame: one of FFmpeg's pictures exactly, the encoder's picture k at START + (k - k0)/fps."""
    idx = [k for k in media.source_indices(path) if k >= 0]
    k0 = min(idx)
    ref_imgs = [r["image"].astype(np.float32) for r in ref]
    times = [t for t, _ in got]
    assert times == sorted(times) and len(set(times)) == len(times), f"{label}: not in presentation order"
    for t, img in got:
        assert any(np.array_equal(img, r) for r in ref_imgs), \
            f"{label}: frame at {(t - START_NS) / 1e6:.1f} ms is none of FFmpeg's pictures"
        k, err = source_index(img, idx)
        assert err < 12, f"{label}: frame at {(t - START_NS) / 1e6:.1f} ms resembles no input picture ({err:.1f})"
        want = START_NS + round((k - k0) * 1e9 / ES_FPS)
        assert t == want, (f"{label}: input picture {k} emitted at {(t - START_NS) / 1e6:.1f} ms, "
                           f"its place in presentation order is {(want - START_NS) / 1e6:.1f} ms")


@pytest.mark.parametrize("name", ["h264_open_gop_es", "h264_refresh_es", "h265_cra_es"])
def test_a_stream_starting_at_a_recovery_point_or_cra_gives_ffmpegs_pictures(media_dir, name):
    path, ref, got, acc = run_es(name, media_dir)
    units = media.source_indices(path)
    d = drops(acc)
    label = f"{name}: {len(got)} emitted, drops {d}, FFmpeg {len(ref)} pictures, {len(units)} access units"
    check_frames(name, path, ref, got, label)
    # every picture FFmpeg outputs is emitted; the rest (leading pictures that reference the cut-off
    # GOP, pictures of an intra refresh not yet complete) are counted drops
    assert len(got) == len(ref), label
    assert acc.entered["CAM0"] == len(units) == len(got) + sum(d.values()), label
    assert set(d) <= {"keyframe_wait"}, label
    reasons = " ".join(acc.examples.values())
    if d:
        assert "leading picture" in reasons or "recovery" in reasons, reasons


def test_an_access_unit_cut_in_half_costs_its_gop_not_the_rest_of_the_stream(media_dir):
    name = "h264_halfcut_es"
    path, ref, got, acc = run_es(name, media_dir)
    clean = media.reference_frames(media.clean_path(path))  # the stream before the cut: picture k = input k
    units = media.source_indices(path)
    d = drops(acc)
    label = f"{name}: {len(got)} emitted, drops {d}, FFmpeg {len(ref)} pictures, {len(units)} access units"
    assert acc.entered["CAM0"] == len(units) == len(got) + sum(d.values()), label
    assert d.get("corrupt", 0) >= 1 and set(d) <= {"corrupt", "keyframe_wait"}, label
    by_time = {t: img for t, img in got}
    for k, r in enumerate(clean):
        t = START_NS + round(k * 1e9 / ES_FPS)
        if t in by_time:  # an emitted frame is the clean picture of its place, exactly
            assert np.array_equal(by_time[t], r["image"].astype(np.float32)), f"{label}: picture {k} damaged"
    # the cut unit is P-frame 16 (GOP 12-23; B-frames 13-15 reference it); pictures decoded before it
    # (0-12) and from the next GOP's I-frame (24) on are intact and must all be emitted
    emitted = {round((t - START_NS) * ES_FPS / 1e9) for t in by_time}
    intact = set(range(0, 13)) | set(range(24, len(clean)))
    assert intact <= emitted, f"{label}: lost intact pictures {sorted(intact - emitted)}"
    damaged = {k for k, r in enumerate(clean) if not np.array_equal(r["image"], ref[k]["image"])}
    assert 16 in damaged and not damaged & emitted, f"{label}: damaged {sorted(damaged)} emitted"


def _sei_grouped(au: bytes) -> bytes:
    """``au`` with a user-data-unregistered message (payload type 5, 20 bytes) put before the messages of
    each SEI NAL unit: valid H.264 (7.3.2.3), as cameras that group several messages in one unit write it."""
    from dvpipe.bitstream import nal_units

    out = b""
    for nal in nal_units(au):
        if nal[0] & 0x1F == 6:
            nal = bytes([nal[0], 5, 20]) + bytes(range(16)) + b"dvpx" + nal[1:]
        out += b"\x00\x00\x00\x01" + nal
    return out


@pytest.mark.parametrize("name", ["h264_open_gop_es", "h264_refresh_es"])
def test_a_recovery_point_is_found_behind_other_sei_messages_of_its_unit(media_dir, name):
    # the recovery point was looked for only as the first message of an SEI unit: grouped behind another,
    # a stream without IDRs had no place to start decoding
    from dvpipe.video import is_keyframe

    units = media.annexb_units(media_file(name, media_dir), "h264")
    starts = [i for i, u in enumerate(units) if is_keyframe(u, "h264")]
    assert starts  # x264 writes each message in a unit of its own: the first message there
    assert [i for i, u in enumerate(units) if is_keyframe(_sei_grouped(u), "h264")] == starts
