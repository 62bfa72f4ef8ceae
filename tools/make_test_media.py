"""Small test videos with real GOP structures (B-frames, open GOP, VFR, edit lists, a damaged packet).

    python tools/make_test_media.py OUT_DIR [--list]

As a module (tests load it with importlib)::

    media = load("tools/make_test_media.py")
    path = media.make("h264_bframes", tmp_path)      # -> tmp_path / "h264_bframes.mp4"
    ref = media.reference_decode(path)                # [(pts_s, HxWx3 BGR uint8), ...] FFmpeg's decode

Every file is made with PyAV's encoders (libx264 / libx265 in PyAV's wheels) and muxers; nothing
here imports dvpipe, so the files and the reference decode are independent of the code under test.
Each picture shows its own identity: a square that moves with the frame index, a background colour
that depends on it, and per-frame noise (so the encoder really predicts, and a wrong picture
differs from the right one in most pixels).

=================  =========================================================================
name               what
=================  =========================================================================
h264_bframes       H.264 MP4, ``bframes=3`` with b-pyramid, keyint 24 (pts != dts, reordering)
h265_default       H.265 MP4, libx265 defaults (B-frames, b-pyramid), 128x72 (cropped height)
h264_open_gop      H.264 MKV, ``open-gop=1``, keyint 12, ``bframes=3`` (leading B-frames that
                   reference the previous GOP; recovery-point I-frames instead of IDRs)
h264_vfr           H.264 MP4, 1/90000 time base, jittered frame durations (20-45 ms), B-frames
h264_editlist_mov  H.264 MOV with B-frames whose first three frames are cut by an edit list
                   (packets read back flagged ``discard``; FFmpeg decodes them but does not output
                   them); the edit's media time also covers the B-frame delay
h264_corrupt       H.264 MP4, B-frames, closed GOPs of 12: one non-key packet in the middle
                   (the P-frame of GOP 2) overwritten with random bytes after muxing,
                   NAL length prefixes included: the decoder rejects the packet (FFmpeg outputs
                   one picture fewer) and the rest of the GOP is predicted from a missing picture
h264_corrupt_slice same, but only the second half of that packet (slice data) is overwritten:
                   the decoder conceals; FFmpeg outputs every picture, flags the victim corrupt
                   (``is_corrupt``) but not the pictures predicted from it, which are damaged too
h264_annexb        Annex-B H.264 elementary stream (.h264) with B-frames
h265_annexb        Annex-B H.265 elementary stream (.h265), libx265 defaults (B-frames)
h264_no_bframes    the control: H.264 MP4 without B-frames (decode order = presentation order)
h264_open_gop_es   Annex-B H.264, ``open-gop=1``, keyint 12, ``bframes=3``, starting at the second
                   GOP's I-frame (a recovery-point SEI, not an IDR): its leading B-frames reference
                   the GOP that was cut off; the stream has no IDR at all
h264_refresh_es    Annex-B H.264, ``intra-refresh=1``, keyint 12, no B-frames, starting at the
                   second refresh period (recovery-point SEIs on P-frames; no IDR, no I-frame)
h265_cra_es        Annex-B H.265, libx265 defaults but keyint 12 (open GOP: one IDR, then CRAs with
                   RASL leading pictures), starting at the second CRA
h264_halfcut_es    Annex-B H.264 as ``h264_open_gop_es`` but from the start (an IDR), with the second
                   half of one P-frame's access unit (GOP 2) removed from the file
h264_mmco5_es      Annex-B H.264, no B-frames, keyint 24, POC type 2, with memory management
                   control operation 5 on P-pictures 9 and 17 (slice headers rewritten; see
                   "memory management control 5" below); ``.clean.h264``: libx264's own stream
h264_mmco5_poc0_es the same with picture order count type 0 (4-bit LSB: it wraps)
=================  =========================================================================

The elementary streams cut from a longer encode (``*_es``) write their pictures' indices in the
encode: ``source_indices(path)`` lists, per access unit in decode order, the ``frame_image`` index
it was encoded from (``-1`` for the unit cut in half).

The corrupt files also write their clean twin (``NAME.clean.mp4``, the same packets before the
damage): ``clean_path(path)``; a frame whose decode differs between the two is a damaged frame.
"""
from __future__ import annotations

import argparse
import struct
import sys
from fractions import Fraction
from pathlib import Path
from typing import Callable, Optional

import av
import numpy as np

__all__ = ["MEDIA", "make", "make_all", "frame_image", "reference_decode", "reference_frames", "source_indices",
           "annexb_units",
           "clean_path", "corrupt_info", "mov_edit_lists", "packet_info", "FPS"]

FPS = 30
W, H = 96, 64


# ------------------------------------------------------------------------------------------ content
def frame_image(k: int, width: int = W, height: int = H) -> np.ndarray:
    """Picture ``k``: index-dependent background colour, a moving 16x16 square, per-frame noise (BGR)."""
    rng = np.random.default_rng(1000 + k)
    y, x = np.mgrid[0:height, 0:width]
    img = np.empty((height, width, 3), np.float32)
    img[..., 0] = 40 + (k * 23) % 160 + 30 * np.sin(x / 9.0)
    img[..., 1] = 60 + (k * 41) % 140 + 30 * np.cos(y / 7.0)
    img[..., 2] = 50 + (k * 67) % 150 + 20 * np.sin((x + y) / 11.0)
    img += rng.normal(0, 6, img.shape)
    s = 16
    px = (k * 7) % max(1, width - s)
    py = (k * 3) % max(1, height - s)
    img[py:py + s, px:px + s] = (255 - (k * 29) % 128, (k * 53) % 256, 255)
    return np.clip(img, 0, 255).astype(np.uint8)


# ------------------------------------------------------------------------------------------ encoding
def _encode(path: Path, *, codec: str, fmt: str, n: int, width: int = W, height: int = H,
            options: Optional[dict] = None, time_base: Fraction = Fraction(1, FPS),
            pts: Optional[list[int]] = None, container_options: Optional[dict] = None,
            max_b_frames: Optional[int] = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pts = list(range(n)) if pts is None else pts
    with av.open(str(path), "w", format=fmt, options=container_options or {}) as out:
        st = out.add_stream(codec, rate=FPS)
        st.width, st.height, st.pix_fmt = width, height, "yuv420p"
        st.time_base = time_base
        st.codec_context.time_base = time_base
        if max_b_frames is not None:
            st.codec_context.max_b_frames = max_b_frames
        st.options = dict(options or {})
        for k in range(n):
            fr = av.VideoFrame.from_ndarray(frame_image(k, width, height), format="bgr24")
            fr.pts = pts[k]
            fr.time_base = time_base
            for p in st.encode(fr):
                out.mux(p)
        for p in st.encode(None):
            out.mux(p)
    return path


def _x264(params: str) -> dict:
    return {"preset": "medium", "crf": "26", "x264-params": params}


def make_h264_bframes(folder: Path, n: int = 48) -> Path:
    return _encode(Path(folder) / "h264_bframes.mp4", codec="libx264", fmt="mp4", n=n, max_b_frames=3,
                   options=_x264("keyint=24:min-keyint=24:scenecut=0:bframes=3:b-pyramid=normal:b-adapt=0"))


def make_h265_default(folder: Path, n: int = 40) -> Path:
    # libx265's defaults (bframes=4, b-pyramid, keyint 250); only the log level is set
    return _encode(Path(folder) / "h265_default.mp4", codec="libx265", fmt="mp4", n=n, width=128, height=72,
                   options={"x265-params": "log-level=error"})


def make_h264_open_gop(folder: Path, n: int = 48) -> Path:
    return _encode(Path(folder) / "h264_open_gop.mkv", codec="libx264", fmt="matroska", n=n, max_b_frames=3,
                   time_base=Fraction(1, 1000), pts=[round(k * 1000 / FPS) for k in range(n)],
                   options=_x264("open-gop=1:keyint=12:min-keyint=12:scenecut=0:bframes=3:b-adapt=0"))


def vfr_pts(n: int, seed: int = 7) -> list[int]:
    """Irregular pts on a 1/90000 time base: frame durations of 20-45 ms."""
    rng = np.random.default_rng(seed)
    d = rng.integers(1800, 4050, n)
    return [0] + [int(x) for x in np.cumsum(d[:-1])]


def make_h264_vfr(folder: Path, n: int = 40) -> Path:
    return _encode(Path(folder) / "h264_vfr.mp4", codec="libx264", fmt="mp4", n=n, max_b_frames=3,
                   time_base=Fraction(1, 90_000), pts=[int(p) for p in vfr_pts(n)],
                   container_options={"movie_timescale": "90000"},
                   options=_x264("keyint=16:scenecut=0:bframes=3:b-adapt=0"))


EDIT_CUT = 3  # frames before pts 0: written, then cut by the edit list


def make_h264_editlist_mov(folder: Path, n: int = 40) -> Path:
    # pts start at -3 frames: the mov muxer writes an edit list that starts at media time 0, so the
    # first 3 pictures are in the file but read back as discard packets; B-frames add the usual
    # composition offset (another edit-list shift)
    tb = Fraction(1, 90_000)
    step = 90_000 // FPS
    return _encode(Path(folder) / "h264_editlist.mov", codec="libx264", fmt="mov", n=n, max_b_frames=3,
                   time_base=tb, pts=[(k - EDIT_CUT) * step for k in range(n)],
                   container_options={"movie_timescale": "90000"},
                   options=_x264("keyint=20:scenecut=0:bframes=3:b-adapt=0"))


def clean_path(path: Path) -> Path:
    """The undamaged twin of a corrupt file (the same muxed packets before the damage)."""
    path = Path(path)
    return path.with_name(path.stem + ".clean" + path.suffix)


def packet_info(path: Path) -> list[dict]:
    """The video packets in file (decode) order: pts, dts, pos, size, key, discard."""
    out = []
    with av.open(str(path)) as c:
        for p in c.demux(video=0):
            if p.size == 0:
                continue
            out.append({"pts": p.pts, "dts": p.dts, "pos": p.pos, "size": p.size, "key": p.is_keyframe,
                        "discard": p.is_discard, "time_base": p.time_base})
    return out


def _make_corrupt(folder: Path, name: str, mode: str, n: int = 60) -> Path:
    folder = Path(folder)
    dst = folder / f"{name}.mp4"
    clean = _encode(clean_path(dst), codec="libx264", fmt="mp4", n=n, max_b_frames=3,
                    options=_x264("keyint=12:min-keyint=12:scenecut=0:open-gop=0:bframes=3:b-adapt=0"))
    pkts = packet_info(clean)
    keys = [i for i, p in enumerate(pkts) if p["key"]]
    assert len(keys) >= 4, keys
    # the packet right after GOP 2's keyframe in decode order: its P-frame (referenced by the GOP's
    # B-frames and the following P-frames), so the damage spreads to the end of that GOP
    victim = keys[2] + 1
    assert not pkts[victim]["key"]
    p = pkts[victim]
    if mode == "packet":
        start, end = p["pos"], p["pos"] + p["size"]
    else:  # keep the length prefix, the NAL header, the slice header: the second half of the slice data
        start, end = p["pos"] + p["size"] // 2, p["pos"] + p["size"]
    for seed in range(12, 76):
        data = bytearray(clean.read_bytes())
        data[start:end] = np.random.default_rng(seed).integers(0, 256, end - start, dtype=np.uint8).tobytes()
        dst.write_bytes(bytes(data))
        if mode == "packet":
            break
        # concealed damage: pick garbage that FFmpeg itself reports (the victim's picture flagged
        # corrupt), so that a decoder wrapper can know; the pictures predicted from it are not flagged
        if any(r["pts"] == p["pts"] and r["corrupt"] for r in reference_frames(dst)):
            break
    (folder / f"{name}.victim").write_text(f"{victim} {p['pts']} {p['pos']} {p['size']} {keys[2]} {keys[3]}\n")
    return dst


def corrupt_info(path: Path) -> dict:
    """What was damaged in a corrupt file: the victim's decode index, pts, and the GOP boundaries
    (decode indices of the damaged GOP's keyframe and of the next keyframe)."""
    path = Path(path)
    v, pts, pos, size, key, next_key = (int(x) for x in path.with_suffix(".victim").read_text().split())
    return {"index": v, "pts": pts, "pos": pos, "size": size, "gop_key": key, "next_key": next_key}


def make_h264_corrupt(folder: Path) -> Path:
    return _make_corrupt(folder, "h264_corrupt", "packet")


def make_h264_corrupt_slice(folder: Path) -> Path:
    return _make_corrupt(folder, "h264_corrupt_slice", "slice")


def make_h264_annexb(folder: Path, n: int = 40) -> Path:
    return _encode(Path(folder) / "h264_annexb.h264", codec="libx264", fmt="h264", n=n, max_b_frames=3,
                   options=_x264("keyint=16:scenecut=0:bframes=3:b-pyramid=normal:b-adapt=0"))


def make_h265_annexb(folder: Path, n: int = 40) -> Path:
    return _encode(Path(folder) / "h265_annexb.h265", codec="libx265", fmt="hevc", n=n,
                   options={"x265-params": "log-level=error:keyint=20"})


def make_h264_no_bframes(folder: Path, n: int = 36) -> Path:
    return _encode(Path(folder) / "h264_no_bframes.mp4", codec="libx264", fmt="mp4", n=n, max_b_frames=0,
                   options=_x264("keyint=12:scenecut=0:bframes=0"))


def annexb_units(path: Path, fmt: str) -> list[bytes]:
    """The access units of an Annex-B file as FFmpeg's raw demuxer splits them (decode order)."""
    with av.open(str(path), format=fmt) as c:
        return [bytes(p) for p in c.demux(video=0) if p.size]


def _source_order(units: list[bytes], fmt: str) -> list[int]:
    """Per unit in decode order, the encoder's input index: FFmpeg's decode of the whole stream outputs
    picture k of the input as its k-th frame (no picture dropped), tagged with its unit's index."""
    dec = av.CodecContext.create(fmt, "r")
    out = []
    for i, u in enumerate(units + [None]):
        pkt = None
        if u is not None:
            pkt = av.Packet(u)
            pkt.pts = i
        out += [f.pts for f in dec.decode(pkt)]
    assert sorted(out) == list(range(len(units))), "the reference encode lost pictures"
    index = [0] * len(units)
    for k, unit_index in enumerate(out):
        index[unit_index] = k
    return index


def _cut_es(folder: Path, name: str, fmt: str, full: Path, start_key: int, halfcut: Optional[int] = None) -> Path:
    """Write ``name`` from ``full``'s units, starting at its ``start_key``-th random-access unit;
    ``halfcut``: the decode index of a unit whose second half is removed."""
    units = annexb_units(full, fmt)
    order = _source_order(units, fmt)
    with av.open(str(full), format=fmt) as c:
        keys = [i for i, p in enumerate(p for p in c.demux(video=0) if p.size) if p.is_keyframe]
    start = keys[start_key]
    body, index = units[start:], order[start:]
    if halfcut is not None:
        body = list(body)
        body[halfcut] = body[halfcut][:len(body[halfcut]) // 2]
        index = list(index)
        index[halfcut] = -1
    dst = Path(folder) / f"{name}.{'h264' if fmt == 'h264' else 'h265'}"
    dst.write_bytes(b"".join(body))
    dst.with_suffix(".index").write_text(" ".join(map(str, index)) + "\n")
    if halfcut is None:
        full.unlink()
    else:
        full.replace(clean_path(dst))  # the undamaged twin
    return dst


def source_indices(path: Path) -> list[int]:
    """Per access unit of a cut elementary stream (decode order): the ``frame_image`` index it was
    encoded from; -1 for a unit cut in half."""
    return [int(x) for x in Path(path).with_suffix(".index").read_text().split()]


def make_h264_open_gop_es(folder: Path, n: int = 48) -> Path:
    full = _encode(Path(folder) / "h264_open_gop_es.full.h264", codec="libx264", fmt="h264", n=n, max_b_frames=3,
                   options=_x264("open-gop=1:keyint=12:min-keyint=12:scenecut=0:bframes=3:b-adapt=0"))
    return _cut_es(folder, "h264_open_gop_es", "h264", full, 1)


def make_h264_refresh_es(folder: Path, n: int = 48) -> Path:
    full = _encode(Path(folder) / "h264_refresh_es.full.h264", codec="libx264", fmt="h264", n=n, max_b_frames=0,
                   options=_x264("intra-refresh=1:keyint=12:min-keyint=12:scenecut=0:bframes=0"))
    return _cut_es(folder, "h264_refresh_es", "h264", full, 1)


def make_h265_cra_es(folder: Path, n: int = 48) -> Path:
    full = _encode(Path(folder) / "h265_cra_es.full.h265", codec="libx265", fmt="hevc", n=n,
                   options={"x265-params": "log-level=error:keyint=12"})
    return _cut_es(folder, "h265_cra_es", "hevc", full, 2)


def make_h264_halfcut_es(folder: Path, n: int = 48) -> Path:
    full = _encode(Path(folder) / "h264_halfcut_es.full.h264", codec="libx264", fmt="h264", n=n, max_b_frames=3,
                   options=_x264("open-gop=1:keyint=12:min-keyint=12:scenecut=0:bframes=3:b-adapt=0"))
    return _cut_es(folder, "h264_halfcut_es", "h264", full, 0, halfcut=13)



# ------------------------------------------------------------------------- memory management control 5
# No encoder in PyAV's wheels writes memory_management_control_operation 5 (H.264 8.2.5.4: every reference
# picture unused, frame_num and picture order count restart after the picture). The streams below are
# libx264's, CAVLC, one reference frame and no B-frames, with the slice headers rewritten from the
# standard's syntax (7.3.3, 7.3.3.3): the operation added to chosen P-pictures, the frame_num of the
# pictures after them renumbered from 0 (7.4.3: prevRefFrameNum is 0 after it), for ``poc_type 0``
# the SPS given picture order count type 0 and every slice its pic_order_cnt_lsb (8.2.1.1: after the
# operation the previous reference picture counts as POC 0). The slice data is kept bit for bit (CAVLC
# follows the header without alignment), so FFmpeg's decode of the rewritten stream must equal its
# decode of libx264's own: the check that the rewrite is valid H.264.
MMCO5_PICTURES = (9, 17)
MMCO5_KEYINT = 24
_HIGH = (100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135)


class _BitString:
    """An RBSP as a string of '0' / '1', read MSB first (H.264 7.2)."""

    def __init__(self, rbsp: bytes):
        self.bits = "".join(f"{b:08b}" for b in rbsp)
        self.pos = 0

    def u(self, n: int) -> int:
        v = int(self.bits[self.pos:self.pos + n] or "0", 2)
        self.pos += n
        return v

    def ue(self) -> int:
        zeros = 0
        while self.bits[self.pos] == "0":
            zeros += 1
            self.pos += 1
        self.pos += 1
        return (1 << zeros) - 1 + self.u(zeros)

    def payload_end(self) -> int:
        """Where rbsp_trailing_bits start (the stop bit: the last 1)."""
        return self.bits.rstrip("0").__len__() - 1


def _ue(v: int) -> str:
    return f"{v + 1:b}".rjust(2 * (v + 1).bit_length() - 1, "0")


def annexb_nal(header: int, rbsp: bytes) -> bytes:
    """An Annex B NAL unit: start code, header byte, the RBSP with emulation prevention (H.264 7.4.1)."""
    out, zeros = bytearray(), 0
    for byte in rbsp:
        if zeros >= 2 and byte <= 3:
            out.append(3)
            zeros = 0
        out.append(byte)
        zeros = zeros + 1 if byte == 0 else 0
    return b"\x00\x00\x00\x01" + bytes([header]) + bytes(out)


def _to_nal(header: int, bits: str) -> bytes:
    """An Annex B NAL unit from RBSP bits (stop bit and alignment added)."""
    bits += "1"
    bits += "0" * (-len(bits) % 8)
    return annexb_nal(header, bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8)))


def _unescape(payload: bytes) -> bytes:
    return payload.replace(b"\x00\x00\x03", b"\x00\x00")


def _nals(au: bytes) -> list[bytes]:
    """The NAL units of an Annex B access unit (the zero byte of a 4-byte start code removed)."""
    parts = au.split(b"\x00\x00\x01")
    return [q for q in (p.rstrip(b"\x00") if i < len(parts) - 1 else p for i, p in enumerate(parts)) if q]


def _rewrite_sps(nal: bytes, lsb_bits: int) -> tuple[bytes, int]:
    """The SPS with pic_order_cnt_type 0 (``lsb_bits`` bits of POC LSB) instead of libx264's type 2; returns
    ``(unit, log2_max_frame_num)``."""
    r = _BitString(_unescape(nal[1:]))
    profile = r.u(8)
    r.u(16), r.ue()
    if profile in _HIGH:
        if r.ue() == 3:
            r.u(1)
        r.ue(), r.ue(), r.u(1)
        assert r.u(1) == 0, "an SPS scaling matrix: not rewritten here"
    log2_max_frame_num = r.ue() + 4
    at = r.pos
    assert r.ue() == 2, "libx264 without B-frames writes pic_order_cnt_type 2"
    bits = r.bits[:at] + _ue(0) + _ue(lsb_bits - 4) + r.bits[r.pos:r.payload_end()]
    return _to_nal(nal[0], bits), log2_max_frame_num


def _rewrite_slice(nal: bytes, log2_max_frame_num: int, frame_num: int, mmco5: bool,
                   poc_lsb: Optional[tuple[int, int]]) -> bytes:
    """A CAVLC I/P slice of libx264's (PPS: no weighted prediction, no redundant_pic_cnt) with ``frame_num``,
    an added memory_management_control_operation 5 (``mmco5``), and ``poc_lsb`` = ``(value, bits)``
    written after frame_num / idr_pic_id (7.3.3)."""
    idr, reference = nal[0] & 0x1F == 5, (nal[0] >> 5) & 3
    r = _BitString(_unescape(nal[1:]))
    r.ue()
    slice_type = r.ue() % 5
    assert slice_type in (0, 2), "I and P slices only"
    r.ue()
    fn_at = r.pos
    r.u(log2_max_frame_num)
    fn_end = r.pos
    if idr:
        r.ue()
    poc_at = r.pos
    if slice_type == 0:
        if r.u(1):  # num_ref_idx_active_override_flag
            r.ue()
        if r.u(1):  # ref_pic_list_modification_flag_l0
            while r.ue() != 3:
                r.ue()
    mark_at = r.pos
    if reference:
        if idr:
            r.u(2)
        else:
            assert r.u(1) == 0, "libx264 marks by the sliding window"
    mark_end = r.pos
    marking = r.bits[mark_at:mark_end]
    if mmco5:
        assert reference and not idr
        marking = "1" + _ue(5) + _ue(0)  # adaptive marking: operation 5, then the end (0)
    lsb = f"{poc_lsb[0]:0{poc_lsb[1]}b}" if poc_lsb else ""
    bits = (r.bits[:fn_at] + f"{frame_num:0{log2_max_frame_num}b}" + r.bits[fn_end:poc_at] + lsb
            + r.bits[poc_at:mark_at] + marking + r.bits[mark_end:r.payload_end()])
    return _to_nal(nal[0], bits)


def _make_mmco5(folder: Path, name: str, poc_type: int, n: int) -> Path:
    full = _encode(Path(folder) / f"{name}.orig.h264", codec="libx264", fmt="h264", n=n, max_b_frames=0,
                   options=_x264(f"keyint={MMCO5_KEYINT}:min-keyint={MMCO5_KEYINT}:scenecut=0:bframes=0:ref=1:"
                                 "cabac=0:weightp=0:threads=1:sliced-threads=0"))
    lsb_bits = 4  # POC LSB wraps every 8 pictures: 8.2.1.1's wrap handling is exercised too
    log2_max_frame_num = 0
    out = b""
    base = 0  # the last IDR or picture with operation 5 (POC restarts after it)
    fn_base = 0
    for k, au in enumerate(annexb_units(full, "h264")):
        for nal in _nals(au):
            t = nal[0] & 0x1F
            if t == 7:
                unit, log2_max_frame_num = _rewrite_sps(nal, lsb_bits)
                out += unit if poc_type == 0 else b"\x00\x00\x00\x01" + nal
            elif t in (1, 5):
                if t == 5:
                    base = fn_base = k
                mmco5 = k in MMCO5_PICTURES
                frame_num = (k - fn_base) % (1 << log2_max_frame_num)
                lsb = ((2 * (k - base)) % (1 << lsb_bits), lsb_bits) if poc_type == 0 else None
                out += _rewrite_slice(nal, log2_max_frame_num, frame_num, mmco5, lsb)
                if mmco5:
                    base = fn_base = k
            else:
                out += b"\x00\x00\x00\x01" + nal
    dst = Path(folder) / f"{name}.h264"
    dst.write_bytes(out)
    dst.with_suffix(".index").write_text(" ".join(map(str, range(n))) + "\n")
    full.replace(clean_path(dst))
    return dst


def make_h264_mmco5_es(folder: Path, n: int = 40) -> Path:
    return _make_mmco5(folder, "h264_mmco5_es", 2, n)


def make_h264_mmco5_poc0_es(folder: Path, n: int = 40) -> Path:
    return _make_mmco5(folder, "h264_mmco5_poc0_es", 0, n)


#: name -> maker(folder) -> path
MEDIA: dict[str, Callable[[Path], Path]] = {
    "h264_bframes": make_h264_bframes,
    "h265_default": make_h265_default,
    "h264_open_gop": make_h264_open_gop,
    "h264_vfr": make_h264_vfr,
    "h264_editlist_mov": make_h264_editlist_mov,
    "h264_corrupt": make_h264_corrupt,
    "h264_corrupt_slice": make_h264_corrupt_slice,
    "h264_annexb": make_h264_annexb,
    "h265_annexb": make_h265_annexb,
    "h264_no_bframes": make_h264_no_bframes,
    "h264_open_gop_es": make_h264_open_gop_es,
    "h264_refresh_es": make_h264_refresh_es,
    "h265_cra_es": make_h265_cra_es,
    "h264_halfcut_es": make_h264_halfcut_es,
    "h264_mmco5_es": make_h264_mmco5_es,
    "h264_mmco5_poc0_es": make_h264_mmco5_poc0_es,
}


def make(name: str, folder: Path) -> Path:
    """Write media ``name`` (see :data:`MEDIA`) into ``folder``; returns its path."""
    return MEDIA[name](Path(folder))


def make_all(folder: Path) -> dict[str, Path]:
    return {name: make(name, folder) for name in MEDIA}


# ------------------------------------------------------------------------------------------ inspection
def reference_frames(path: Path, fmt: Optional[str] = None) -> list[dict]:
    """FFmpeg's own sequential decode (demux + decode + reordering + edit lists) — the frames of
    ``av.open(path).decode(video=0)`` — per output frame ``pts`` (int, or None), ``time_base``,
    ``time`` (s, or None), ``image`` (BGR), ``key``, ``corrupt`` (FFmpeg's corrupt flag)."""
    out = []
    kw = {"format": fmt} if fmt else {}
    with av.open(str(path), **kw) as c:
        # what container.decode(video=0) does, packet by packet, so that a packet the decoder rejects
        # (InvalidDataError) is skipped as the ffmpeg command line skips it, instead of ending the decode
        for pkt in c.demux(video=0):
            try:
                frames = pkt.decode()
            except av.error.InvalidDataError:
                continue
            for f in frames:
                out.append({"pts": f.pts, "time_base": f.time_base, "time": f.time,
                            "image": f.to_ndarray(format="bgr24"), "key": f.key_frame, "corrupt": f.is_corrupt})
    return out


def reference_decode(path: Path, fmt: Optional[str] = None) -> list[tuple[Optional[float], np.ndarray]]:
    """``[(pts_seconds, HxWx3 BGR uint8), ...]`` from ``av.open(path).decode(video=0)``."""
    return [(r["time"], r["image"]) for r in reference_frames(path, fmt)]


def _boxes(buf: bytes, start: int, end: int):
    i = start
    while i + 8 <= end:
        size, typ = struct.unpack(">I4s", buf[i:i + 8])
        hdr = 8
        if size == 1:
            size, hdr = struct.unpack(">Q", buf[i + 8:i + 16])[0], 16
        elif size == 0:
            size = end - i
        if size < hdr:
            return
        yield typ.decode("latin-1"), i + hdr, i + size
        i += size


def mov_edit_lists(path: Path) -> list[list[tuple[int, int, float]]]:
    """The ``elst`` entries of every track of an MP4/MOV (``[(segment_duration, media_time, rate)]``),
    read straight from the boxes (moov/trak/edts/elst), ffprobe-style."""
    buf = Path(path).read_bytes()
    out = []
    for typ, s, e in _boxes(buf, 0, len(buf)):
        if typ != "moov":
            continue
        for t2, s2, e2 in _boxes(buf, s, e):
            if t2 != "trak":
                continue
            entries: list[tuple[int, int, float]] = []
            for t3, s3, e3 in _boxes(buf, s2, e2):
                if t3 != "edts":
                    continue
                for t4, s4, _e4 in _boxes(buf, s3, e3):
                    if t4 != "elst":
                        continue
                    version = buf[s4]
                    count = struct.unpack(">I", buf[s4 + 4:s4 + 8])[0]
                    j = s4 + 8
                    for _ in range(count):
                        if version == 1:
                            dur, mt = struct.unpack(">Qq", buf[j:j + 16])
                            j += 16
                        else:
                            dur, mt = struct.unpack(">Ii", buf[j:j + 8])
                            j += 8
                        ri, rf = struct.unpack(">hH", buf[j:j + 4])
                        j += 4
                        entries.append((dur, mt, ri + rf / 65536))
            out.append(entries)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output folder")
    ap.add_argument("--only", nargs="*", choices=sorted(MEDIA), help="make only these")
    args = ap.parse_args(argv)
    for name in args.only or MEDIA:
        path = make(name, Path(args.out))
        pk = packet_info(path) if path.suffix in (".mp4", ".mov", ".mkv") else []
        ref = reference_frames(path)
        extra = ""
        if pk:
            reorder = sum(1 for p in pk if p["pts"] is not None and p["dts"] is not None and p["pts"] != p["dts"])
            extra = f", {len(pk)} packets ({sum(p['discard'] for p in pk)} discard, {reorder} pts != dts)"
        if path.suffix in (".mp4", ".mov"):
            extra += f", edit lists {mov_edit_lists(path)}"
        print(f"{path}: {path.stat().st_size / 1024:.0f} KiB, {len(ref)} frames decoded "
              f"({sum(r['corrupt'] for r in ref)} flagged corrupt){extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
