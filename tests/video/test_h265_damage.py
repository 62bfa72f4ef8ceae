"""H.265 damage that FFmpeg's HEVC decoder does not report, found by dvpipe itself (issue 27, point 3).

FFmpeg flags no H.265 picture corrupt, whatever the damage (checked here first: the premise). dvpipe
reads the headers itself (dvpipe/bitstream.py) and checks what the demuxer knows:

* a picture lost from the stream: the pictures that reference it name it in their reference picture
  set (a ``corrupt`` drop, "reference picture is missing");
* transport packets lost from an MPEG-TS stream: the demuxer's corrupt-packet flag;
* a stream whose pictures carry a decoded picture hash SEI (libx265 ``hash=1``): each decoded
  picture is compared with its MD5;
* a slice cut short before its last wavefront entry point (libx265 codes WPP rows by default).

Streams are made by libx265 through tools/make_test_media.py and damaged here. The truth is the
clean stream's decode by FFmpeg (and, for placement, the encoder's input pictures): no emitted frame
may differ from the clean picture of its place, and the damaged frames are counted drops.
"""
from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from .test_structures import ES_FPS, START_NS, drops, media, run_collect
from . import test_structures as tvs

from dvpipe.bitstream import StreamHeaders, _nal_bounds
from dvpipe.video import nal_types

from tolerances import tol


def encode_es(folder: Path, name: str, params: str, n: int = 36, size=(72, 128)) -> Path:
    h, w = size
    path = media._encode(folder / f"{name}.h265", codec="libx265", fmt="hevc", n=n, width=w, height=h,
                         options={"x265-params": "log-level=error:keyint=24:" + params})
    tvs.CODEC[name] = "h265"
    tvs.CODEC[name + "_damaged"] = "h265"
    return path


def write_units(path: Path, units) -> Path:
    path.write_bytes(b"".join(u for u in units if u is not None))
    return path


def ffmpeg_pictures(units) -> dict[int, np.ndarray]:
    """FFmpeg alone (no dvpipe): the picture of each unit index, and whether it flagged any."""
    dec = av.CodecContext.create("hevc", "r")
    out = {}
    for i, u in enumerate(list(units) + [None]):
        if i < len(units) and u is None:
            continue
        pkt = None
        if u is not None:
            pkt = av.Packet(u)
            pkt.pts = i
        for f in dec.decode(pkt):
            assert not f.is_corrupt, "FFmpeg's HEVC decoder flagged a picture: the premise changed"
            out[f.pts] = f.to_ndarray(format="bgr24")
    return out


def check_es_run(path: Path, clean: list[np.ndarray], h: int, w: int, label: str):
    """Run the damaged elementary stream; every emitted frame must be the clean picture of its place
    (place from its capture time, START + k / fps)."""
    got, acc = run_collect(path, "h265", w, h, es=True)
    d = drops(acc)
    emitted = {}
    for t, img in got:
        k = round((t - START_NS) * ES_FPS / 1e9)
        assert abs(START_NS + round(k * 1e9 / ES_FPS) - t) <= tol("integer_ns").atol, f"{label}: capture {t} is no frame's place"
        emitted[k] = img
        assert np.array_equal(img, clean[k].astype(np.float32)), (
            f"{label}: frame {k} emitted valid but differs from the clean picture (max "
            f"{np.abs(img - clean[k]).max():.0f}); drops {d}")
    return emitted, d, acc


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("h265_damage")


def clean_decode(path: Path) -> list[np.ndarray]:
    return [r["image"] for r in media.reference_frames(path)]


def test_a_lost_picture_is_found_through_the_reference_picture_sets(folder):
    path = encode_es(folder, "lost", "", size=(192, 320))
    units = media.annexb_units(path, "hevc")
    clean = clean_decode(path)
    order = list(ffmpeg_pictures(units))  # unit indices in presentation order
    place = {u: k for k, u in enumerate(order)}
    # remove a referenced picture (a TRAIL_R unit, type 1): FFmpeg then outputs fewer pictures (it
    # discards those whose references are missing) and nothing marks which
    victim = next(i for i in range(6, len(units)) if nal_types(units[i], "h265") == [1])
    damaged = list(units)
    damaged[victim] = None
    ff = ffmpeg_pictures(damaged)
    wrong = {place[u] for u in place if u not in ff or not np.array_equal(ff[u], clean[place[u]])} - {place[victim]}
    assert wrong, "removing the picture damaged nothing (the test would prove nothing)"
    out = write_units(folder / "lost_damaged.h265", damaged)
    emitted, d, acc = check_es_run(out, clean, *clean[0].shape[:2], "lost picture")
    assert d.get("corrupt", 0) >= 1 and "reference picture is missing" in " ".join(acc.examples.values()), d
    assert not set(wrong) & set(emitted)
    # the lost picture leaves its place empty: the frames after it keep their own places
    assert place[victim] not in emitted and max(emitted) == len(clean) - 1


def test_lost_transport_packets_in_mpeg_ts_are_corrupt_drops(folder):
    path = media._encode(folder / "ts.ts", codec="libx265", fmt="mpegts", n=36, width=128, height=72,
                         options={"x265-params": "log-level=error:keyint=24"})
    clean = media.reference_frames(path)
    pk = media.packet_info(path)
    # one 188-byte transport packet from the slice data of a large access unit (a CRA, whose first
    # kilobytes are parameter sets and libx265's settings SEI)
    big = next(p for p in pk[1:] if p["size"] > 188 * 6)
    cut = big["pos"] + (-(-big["size"] // 184) - 2) * 188  # the last transport packets hold slice data
    data = path.read_bytes()
    bad = folder / "ts_damaged.ts"
    bad.write_bytes(data[:cut] + data[cut + 188:])
    with av.open(str(bad)) as c:
        assert any(p.is_corrupt for p in c.demux(video=0)), "the demuxer did not flag the packet"
    to_ns = lambda r: START_NS + round(Fraction(r["pts"]) * r["time_base"] * 10**9)  # noqa: E731
    truth = {to_ns(r): r["image"] for r in clean}
    ref = {to_ns(r): r["image"] for r in media.reference_frames(bad)}
    assert any(t not in ref or not np.array_equal(ref[t], img) for t, img in truth.items()), "the cut damaged nothing"
    got, acc = run_collect(bad, "h265", 128, 72)
    d = drops(acc)
    for t, img in got:
        assert np.array_equal(img, truth[t].astype(np.float32)), \
            f"frame at {(t - START_NS) / 1e6:.1f} ms emitted valid but damaged; drops {d}"
    assert d.get("corrupt", 0) >= 1 and "demuxer flagged" in " ".join(acc.examples.values()), d


def test_a_picture_joined_to_a_damaged_one_in_mpeg_ts_is_counted_and_still_decoded(folder):
    """A non-reference picture's first slice segment header zeroed in place, inside its transport packet:
    FFmpeg's HEVC parser then joins the next picture to it in one packet, with the damaged one's timestamp.
    The joined picture was neither a frame nor a drop, and decoding the two as one cut the reference chain
    to the next keyframe (28 intact frames dropped). Each is a ``corrupt`` drop now; the joined one is still
    decoded, so the pictures after it are emitted, each the clean stream's picture of its pts."""
    n = 36
    path = media._encode(folder / "ts_join.ts", codec="libx265", fmt="mpegts", n=n, width=128, height=72,
                         options={"x265-params": "log-level=error:keyint=24:scenecut=0"})
    with av.open(str(path)) as c:
        tb = c.streams.video[0].time_base
        packets = [(p.pos, p.pts, bytes(p)) for p in c.demux(video=0) if p.size]
    to_ns = lambda pts: START_NS + round(Fraction(pts) * tb * 10**9)  # noqa: E731
    data = bytearray(path.read_bytes())

    def header_at(i: int) -> int:
        """Where in the file the first bytes of packet i's TRAIL_N slice segment header lie, -1 when they do
        not lie together in one transport packet's payload."""
        pos, _, body = packets[i]
        nal = next(s for s, _ in _nal_bounds(body) if (body[s] >> 1) & 0x3F == 0)
        return data.find(body[nal + 2:nal + 10], pos, pos + len(body) + 188 * (len(body) // 184 + 2))

    # a non-reference picture (TRAIL_N, type 0) followed by another that is no IRAP
    v = next(i for i in range(2, len(packets) - 1) if 0 in nal_types(packets[i][2], "h265")
             and not any(16 <= t <= 23 for t in nal_types(packets[i + 1][2], "h265")) and header_at(i) > 0)
    victim_pts, at = packets[v][1], header_at(v)
    data[at:at + 6] = bytes(6)
    bad = folder / "ts_join_damaged.ts"
    bad.write_bytes(bytes(data))
    with av.open(str(bad)) as c:
        damaged = [(p.pts, nal_types(bytes(p), "h265")) for p in c.demux(video=0) if p.size]
    assert len(damaged) == n - 1 and damaged[v][0] == victim_pts and damaged[v][1].count(35) == 2, \
        "the parser did not join two pictures (the test would prove nothing)"
    truth = {to_ns(r["pts"]): r["image"] for r in media.reference_frames(path)}
    got, acc = run_collect(bad, "h265", 128, 72)
    d = drops(acc)
    for t, img in got:
        assert np.array_equal(img, truth[t].astype(np.float32)), f"frame at {(t - START_NS) / 1e6:.1f} ms differs"
    assert len(got) + sum(d.values()) == n, f"{len(got)} frames and drops {d}: not every picture is accounted"
    assert d == {"corrupt": 2}, d
    assert "joined by FFmpeg's parser" in " ".join(acc.examples.values()), acc.examples
    assert {t for t, _ in got} == set(truth) - {to_ns(victim_pts), to_ns(packets[v + 1][1])}


@pytest.mark.parametrize("kind", ["bitflip", "truncate"])
def test_a_picture_hash_sei_catches_damage_inside_slice_data(folder, kind):
    path = encode_es(folder, f"md5_{kind}", "hash=1")
    units = media.annexb_units(path, "hevc")
    clean = clean_decode(path)
    rng = random.Random(4)
    victim = 9
    bad = bytearray(units[victim])
    slice_at = next(i for i in range(len(bad) - 3)
                    if bad[i:i + 3] == b"\x00\x00\x01" and (bad[i + 3] >> 1) & 0x3F <= 21)
    end = bad.find(b"\x00\x00\x01", slice_at + 3)
    if kind == "bitflip":  # inside the slice data: the hash SEI after it stays intact
        for _ in range(3):
            j = rng.randrange((slice_at + end) // 2, end)
            bad[j] ^= 1 << rng.randrange(8)
    else:  # cut in the slice data: the hash SEI goes with the rest
        bad = bad[:(slice_at + end) // 2]
    damaged = list(units)
    damaged[victim] = bytes(bad)
    ff = ffmpeg_pictures(damaged)
    out = write_units(folder / f"md5_{kind}_damaged.h265", damaged)
    emitted, d, acc = check_es_run(out, clean, *clean[0].shape[:2], f"hash, {kind}")
    order = list(ffmpeg_pictures(units))
    place = {u: k for k, u in enumerate(order)}
    wrong = {place[u] for u in place if u not in ff or not np.array_equal(ff[u], clean[place[u]])}
    assert wrong and d.get("corrupt", 0) >= 1, d
    words = " ".join(acc.examples.values())
    assert "decoded-picture hash" in words, words
    # each picture is judged by its own hash, so the chain is not cut: the pictures decoded before the
    # victim, and those from the next IRAP on (none references the victim), are all emitted
    next_irap = next(i for i in range(victim + 1, len(units))
                     if any(16 <= t <= 21 for t in nal_types(units[i], "h265")))
    needed = {place[u] for u in range(victim)} | {place[u] for u in range(next_irap, len(units))}
    assert needed <= set(emitted), (f"lost intact pictures {sorted(needed - set(emitted))}; victim at "
                                    f"{place[victim]}, damaged {sorted(wrong)}: {acc.examples}")


def test_a_hashed_stream_whose_pictures_are_cropped_breaks_the_chain_at_damage(folder):
    # 256x198 is coded as 256x200 with a conformance window: each picture's hash covers the 200 rows FFmpeg
    # does not output, so no hash is checked, and a damaged reference must cut the chain as in an unhashed
    # stream (it did not: the pictures after it were emitted valid and wrong)
    path = encode_es(folder, "md5_cropped", "hash=1:bframes=0", n=30, size=(198, 256))
    units = media.annexb_units(path, "hevc")
    clean = clean_decode(path)
    damaged = list(units)
    damaged[10] = units[10][:len(units[10]) // 2]
    out = write_units(folder / "md5_cropped_damaged.h265", damaged)
    emitted, d, _acc = check_es_run(out, clean, 198, 256, "hash, cropped")  # every frame emitted is right
    assert d.get("corrupt", 0) >= 1 and d.get("keyframe_wait", 0) >= 1, d


class _BitWriter:
    """Exp-Golomb and fixed-length fields, MSB first, into an RBSP (H.265 7.2, 9.2)."""

    def __init__(self):
        self.bits: list[int] = []

    def u(self, n: int, v: int) -> None:
        self.bits += [(v >> (n - 1 - i)) & 1 for i in range(n)]

    def ue(self, v: int) -> None:
        v += 1
        self.u(v.bit_length() - 1, 0)
        self.u(v.bit_length(), v)

    def rbsp(self) -> bytes:
        b = self.bits + [1]  # rbsp_stop_one_bit, then byte alignment
        b += [0] * (-len(b) % 8)
        return bytes(int("".join(map(str, b[i:i + 8])), 2) for i in range(0, len(b), 8))


def test_an_sps_with_an_inter_predicted_reference_picture_set_is_read_as_the_spec_writes_it():
    # 7.3.7: delta_idx_minus1 exists only in a slice header's set; in the SPS the set predicts from the one
    # before it. HM-style encoders write such SPSs; reading a delta_idx there put every later field one bit off.
    from dvpipe.bitstream import _sps265

    w = _BitWriter()
    w.u(4, 0), w.u(3, 0), w.u(1, 1)  # vps id, max_sub_layers_minus1 0, temporal_id_nesting
    w.u(2, 0), w.u(1, 0), w.u(5, 1), w.u(32, 0x60000000), w.u(4, 0b1001), w.u(32, 0), w.u(12, 0), w.u(8, 93)  # PTL
    w.ue(0), w.ue(1), w.ue(64), w.ue(64), w.u(1, 0)  # sps id, 4:2:0, 64x64, no conformance window
    w.ue(0), w.ue(0), w.ue(4)  # 8-bit luma and chroma, log2_max_pic_order_cnt_lsb 8
    w.u(1, 1), w.ue(4), w.ue(2), w.ue(0)  # sub_layer_ordering_info: dpb 5, reorder 2, latency 0
    for v in (0, 3, 0, 3, 0, 0):  # coding / transform block sizes, hierarchy depths
        w.ue(v)
    w.u(1, 0), w.u(1, 1), w.u(1, 1), w.u(1, 0)  # no scaling lists, amp, sao, no pcm
    w.ue(2)  # two short-term reference picture sets
    w.ue(1), w.ue(0), w.ue(0), w.u(1, 1)  # set 0: one negative picture, delta POC -1, used
    w.u(1, 1), w.u(1, 1), w.ue(0), w.u(1, 1), w.u(1, 1)  # set 1: predicted from set 0, deltaRps -1, both used
    w.u(1, 1), w.ue(1), w.u(8, 5), w.u(1, 1)  # long-term pictures present: one, POC lsb 5, used
    w.u(1, 1), w.u(1, 1), w.u(1, 0), w.u(1, 0)  # temporal MVP, strong intra smoothing, no VUI, no extension
    _id, sps = _sps265(w.rbsp())
    # 7-61 with deltaRps = -1 on set 0 {-1}: -1 (deltaRps itself), then -1 + -1 = -2
    assert sps.rps == [([-1], [], [True], []), ([-1, -2], [], [True, True], [])]
    assert sps.long_term_present and sps.lt_sps == [(5, True)] and sps.temporal_mvp


#: (libx265 parameters, the unit zeroed, its slice segment zeroed): a picture whose first slice segment header is
#: zeroed after the NAL unit header (first_slice_segment_in_pic_flag reads 0) is read by FFmpeg's parser as more
#: slices of the picture before it (at the stream's first IDR: the next picture as more of it). The unit is the
#: first IDR, the second, the first TRAIL_N picture after the first four (NAL unit type 0: nothing references
#: it, so it alone may be lost) or TRAIL_R (type 1: referenced); ``slices=3`` codes three segments a picture
#: (CTUs of 16), where segment 1 zeroed is that picture's own damage
JOINED = [("open-gop=0", "IDR", 0), ("open-gop=0", "second IDR", 0), ("open-gop=0", "TRAIL_N", 0),
          ("open-gop=0", "TRAIL_R", 0), ("open-gop=0:ctu=16:slices=3", "TRAIL_N", 0),
          ("open-gop=0:ctu=16:slices=3", "TRAIL_N", 1)]


@pytest.mark.parametrize("params,kind,segment", JOINED)
def test_a_picture_joined_to_another_by_a_zeroed_slice_header_is_counted(folder, params, kind, segment):
    multi = "slices" in params
    name = f"joined_{'multi' if multi else 'single'}"
    path = folder / f"{name}.h265"
    if not path.exists():
        encode_es(folder, name, params, n=40)
    units = media.annexb_units(path, "hevc")
    types = [nal_types(u, "h265") for u in units]
    idrs = [i for i, t in enumerate(types) if 19 in t or 20 in t]
    victim = {"IDR": 0, "second IDR": idrs[1],
              "TRAIL_N": next(i for i in range(4, len(units)) if set(types[i]) == {0}),
              "TRAIL_R": next(i for i in range(4, len(units)) if set(types[i]) == {1})}[kind]
    clean = clean_decode(path)
    place = {u: k for k, u in enumerate(ffmpeg_pictures(units))}
    damaged = list(units)
    start, end = list(_nal_bounds(units[victim]))[-3 if multi else -1:][segment]
    damaged[victim] = units[victim][:start + 2] + bytes(end - start - 2) + units[victim][end:]
    out = write_units(folder / f"{name}_{victim}_{segment}_damaged.h265", damaged)
    tvs.CODEC[out.stem] = "h265"
    if segment == 0:
        with av.open(str(out)) as c:
            assert sum(1 for p in c.demux(video=0) if p.size) == len(units) - 1, "the parser no longer joins"
    emitted, d, acc = check_es_run(out, clean, 72, 128, f"{kind} segment {segment} zeroed")
    label = f"{kind} (unit {victim}) segment {segment}: drops {d}"
    assert acc.entered["CAM0"] == len(units) == len(emitted) + sum(d.values()), label
    assert place[victim] not in emitted, label
    after_next_idr = set(range(next((place[i] for i in idrs if i > victim), len(units)), len(units)))
    if kind == "IDR":  # the stream's first: the pictures until the next IDR wait for a keyframe
        assert set(d) == {"keyframe_wait"} and set(emitted) == after_next_idr, label
    elif kind == "TRAIL_N" and segment == 0:  # a picture nothing references: it alone is lost
        assert d == {"corrupt": 1} and set(emitted) == set(range(len(units))) - {place[victim]}, label
    else:
        assert d.get("corrupt", 0) >= 1 and (kind == "second IDR" or after_next_idr <= set(emitted)), label


def test_a_slice_cut_before_its_last_wavefront_row_is_a_corrupt_drop(folder):
    path = encode_es(folder, "wpp", "", n=30, size=(192, 320))
    units = media.annexb_units(path, "hevc")
    clean = clean_decode(path)
    victim = 7
    damaged = list(units)
    damaged[victim] = units[victim][:len(units[victim]) // 3]
    out = write_units(folder / "wpp_damaged.h265", damaged)
    emitted, d, acc = check_es_run(out, clean, 192, 320, "wpp truncation")
    assert d.get("corrupt", 0) >= 1 and "cut short" in " ".join(acc.examples.values()), d


def test_clean_streams_have_no_header_damage_and_poc_order_is_ffmpegs_output_order(folder):
    for name, params in (("plain", ""), ("hashed", "hash=1"), ("open", "keyint=12")):
        path = encode_es(folder, f"clean_{name}", params)
        units = media.annexb_units(path, "hevc")
        headers = StreamHeaders("h265")
        pics = [headers.read(u) for u in units]
        assert [p.damage for p in pics] == [None] * len(units), name
        assert all(p.picture_hash is not None for p in pics) == (name == "hashed")
        by_poc = sorted(range(len(units)), key=lambda i: (sum(p.new_sequence for p in pics[:i + 1]), pics[i].poc))
        assert by_poc == list(ffmpeg_pictures(units)), name


def test_the_damage_trial_tool_measures_through_dvpipes_decoder(tmp_path):
    """tools/video_damage_trial.py (the docs' table): with picture hashes every damaged picture is
    dropped; a removed picture is always found; bit flips in plain H.265 slice data stay invisible
    (the table says so: if this changes, the table must)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("video_damage_trial", tvs.ROOT / "tools" / "video_damage_trial.py")
    trial_tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trial_tool)
    hashed = trial_tool.trial("h265-md5", "bitflip", 3, 1, tmp_path)
    assert hashed["damaged"] > 0 and hashed["detected"] == hashed["damaged"] and hashed["undetected"] == 0, hashed
    dropped = trial_tool.trial("h265", "drop", 3, 1, tmp_path)
    assert dropped["undetected"] == 0, dropped
    plain = trial_tool.trial("h265", "bitflip", 2, 1, tmp_path)
    assert plain["damaged"] > 0 and plain["detected"] == 0, plain
