"""RTP payload of JPEG (RFC 2435) in dvpipe's RTSP client (dvpipe.deploy.sources._rtp_jpeg).

References: libjpeg's own files (Pillow writes them: quality Q, standard Huffman tables, 4:2:0 or
4:2:2, restart markers), cut into RTP packets by the RFC's rules here; the JPEG dvpipe rebuilds must
decode (OpenCV) to the very pixels of the file it came from, and the tables of RFC 2435 Appendix A
must be libjpeg's for every quality.
"""
from __future__ import annotations

import io
import struct

import cv2
import numpy as np
import pytest
from PIL import Image

from dvpipe.deploy.sources._rtp import RtpDepacketiser
from dvpipe.deploy.sources._rtp_jpeg import scaled_tables
from dvpipe.deploy.sources._rtsp_client import parse_sdp


def _jpeg(quality: int, subsampling: int, w: int = 160, h: int = 96, restart_blocks: int = 0) -> bytes:
    """A libjpeg file of a textured test picture (Pillow: subsampling 2 = 4:2:0, 1 = 4:2:2)."""
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // w), (y * 255 // h), ((x * y) % 256)], -1).astype(np.uint8)
    img = (img.astype(int) + np.random.default_rng(0).integers(-20, 20, img.shape)).clip(0, 255).astype(np.uint8)
    out = io.BytesIO()
    extra = {"restart_marker_blocks": restart_blocks} if restart_blocks else {}
    Image.fromarray(img).save(out, "JPEG", quality=quality, subsampling=subsampling, optimize=False, **extra)
    return out.getvalue()


def _parts(jpeg: bytes) -> dict:
    """The file's quantisation tables (zig-zag, as stored), restart interval and scan (SOS's data to EOI)."""
    i, tables, restart = 2, {}, 0
    while True:
        marker, length = jpeg[i + 1], struct.unpack(">H", jpeg[i + 2:i + 4])[0]
        body = jpeg[i + 4:i + 2 + length]
        if marker == 0xDB:
            j = 0
            while j < len(body):
                tables[body[j] & 15] = body[j + 1:j + 65]
                j += 65
        elif marker == 0xDD:
            restart = struct.unpack(">H", body)[0]
        elif marker == 0xDA:
            return {"tables": tables[0] + tables[1], "restart": restart, "scan": jpeg[i + 2 + length:]}
        i += 2 + length


def _packets(parts: dict, kind: int, q: int, w: int, h: int, seq: int = 0, ts: int = 0, mtu: int = 700,
             send_tables: bool = True) -> list[bytes]:
    """One frame as RFC 2435 RTP packets (payload type 26, sequence numbers from ``seq``), the scan cut
    every ``mtu`` bytes."""
    scan, out = parts["scan"], []
    for k, off in enumerate(range(0, len(scan), mtu)):
        payload = bytes([0]) + struct.pack(">I", off)[1:] + bytes([kind, q, w // 8, h // 8])
        if kind >= 64:
            payload += struct.pack(">HH", parts["restart"], 0xFFFF)  # F = L = 1, count 0x3FFF
        if off == 0 and q >= 128:
            tables = parts["tables"] if send_tables else b""
            payload += struct.pack(">BBH", 0, 0, len(tables)) + tables
        payload += scan[off:off + mtu]
        last = off + mtu >= len(scan)
        out.append(bytes([0x80, (0x80 if last else 0) | 26]) + struct.pack(">HII", (seq + k) & 0xFFFF, ts, 7)
                   + payload)
    return out


def _decode(jpeg: bytes) -> np.ndarray:
    img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None
    return img


@pytest.mark.parametrize("quality", [5, 10, 25, 50, 75, 90, 99])
def test_the_tables_for_q_1_to_99_are_libjpegs_for_that_quality(quality):
    assert scaled_tables(quality) == _parts(_jpeg(quality, 2))["tables"]


@pytest.mark.parametrize("subsampling, kind", [(2, 1), (1, 0)])
@pytest.mark.parametrize("quality, q", [(50, 50), (80, 80), (80, 255)])
def test_a_frame_over_rtp_decodes_to_the_pixels_of_the_file(subsampling, kind, quality, q):
    """Q 1-99: the receiver makes the tables; Q 255: they come in the first packet. Type 1 is 4:2:0,
    type 0 4:2:2. Three frames in a row, the third with Q 255 and no tables (RFC 2435 3.1.8: the
    tables sent before with that Q)."""
    w, h = 160, 96
    jpeg = _jpeg(quality, subsampling, w, h)
    parts = _parts(jpeg)
    first = _packets(parts, kind, q, w, h, 0, 0)
    second = _packets(parts, kind, q, w, h, len(first), 3000)
    third = _packets(parts, kind, q, w, h, 2 * len(first), 6000, send_tables=False)
    assert len(first) >= 3
    d = RtpDepacketiser("jpeg", 26)
    units = [u for p in first + second + third for u in d.packet(p)]
    assert [u.pts for u in units] == [0, 3000, 6000]
    want = _decode(jpeg)
    for u in units:
        assert u.damage is None
        assert np.array_equal(_decode(u.data), want)


def test_restart_markers_type_65():
    w, h = 160, 96
    jpeg = _jpeg(70, 2, w, h, restart_blocks=4)
    parts = _parts(jpeg)
    assert parts["restart"] == 4 and b"\xff\xd0" in parts["scan"]
    d = RtpDepacketiser("jpeg", 26)
    units = [u for p in _packets(parts, 65, 70, w, h) for u in d.packet(p)]
    assert len(units) == 1 and units[0].damage is None
    assert np.array_equal(_decode(units[0].data), _decode(jpeg))


def test_a_lost_fragment_damages_its_frame_only():
    w, h = 160, 96
    parts = _parts(_jpeg(60, 2, w, h))
    first = _packets(parts, 1, 60, w, h, 0, 0, mtu=300)
    second = _packets(parts, 1, 60, w, h, len(first), 3000, mtu=300)
    assert len(first) >= 3
    d = RtpDepacketiser("jpeg", 26)
    units = [u for p in first[:1] + first[2:] + second for u in d.packet(p)]
    assert len(units) == 2
    assert "sequence numbers 1..1" in units[0].damage and "fragment at byte 600 where byte 300" in units[0].damage
    assert units[1].damage is None


def test_a_frame_without_its_first_packet_is_an_empty_damaged_unit():
    w, h = 160, 96
    parts = _parts(_jpeg(60, 2, w, h))
    d = RtpDepacketiser("jpeg", 26)
    units = [u for p in _packets(parts, 1, 60, w, h, mtu=300)[1:] for u in d.packet(p)]
    assert len(units) == 1 and units[0].data == b"" and "fragment at byte 300 where byte 0" in units[0].damage


def test_unsupported_types_and_sizes_are_named():
    parts = _parts(_jpeg(60, 2))
    d = RtpDepacketiser("jpeg", 26)
    p = _packets(parts, 1, 60, 160, 96, mtu=100000)[0]
    units = d.packet(p[:12 + 4] + bytes([3]) + p[17:])  # type 3
    assert "RTP JPEG type 3" in units[0].damage
    units = d.packet(_packets(parts, 1, 60, 0, 0, seq=1, ts=3000, mtu=100000)[0])
    assert "size 0 and no a=x-dimensions" in units[0].damage
    d = RtpDepacketiser("jpeg", 26, dimensions=(160, 96))
    units = d.packet(_packets(parts, 1, 60, 0, 0, mtu=100000)[0])
    assert units[0].damage is None and np.array_equal(_decode(units[0].data), _decode(_jpeg(60, 2)))


def test_sdp_of_an_mjpeg_camera():
    sdp = ("v=0\r\no=- 1 1 IN IP4 10.0.0.2\r\ns=cam\r\nt=0 0\r\nm=audio 0 RTP/AVP 0\r\na=control:trackID=0\r\n"
           "m=video 0 RTP/AVP 26\r\na=control:trackID=1\r\na=x-dimensions:2560,1440\r\na=framerate:15\r\n")
    v = parse_sdp(sdp, "rtsp://10.0.0.2/mjpeg")
    assert (v.codec, v.payload_type, v.clock_rate, v.control, v.dimensions, v.fps) == \
        ("jpeg", 26, 90000, "rtsp://10.0.0.2/mjpeg/trackID=1", (2560, 1440), 15.0)


def _frame_packet(kind: int, q: int, extra: bytes = b"", scan: bytes = b"\x12\x34" * 8, seq: int = 0) -> bytes:
    """A whole frame in one RTP packet (RFC 2435 3.1: type-specific 0, fragment offset 0, type, Q, 80 x 48
    pixels), ``extra`` the headers after the main one; sequence number ``seq``, timestamp 3000 x ``seq``."""
    return bytes([0x80, 0x80 | 26]) + struct.pack(">HII", seq, 3000 * seq, 7) + bytes([0, 0, 0, 0, kind, q, 10, 6]) \
        + extra + scan


@pytest.mark.parametrize("kind", [2, 63, 66, 127, 128, 129, 192, 193, 255])
def test_types_other_than_0_1_64_65_give_a_damaged_frame(kind):
    """RFC 2435 3.1.3: types 128-255 are dynamic (their meaning is the sender's: not 0/1 by type modulo 64),
    2-63 and 66-127 are not ones dvpipe reads; their frames are damaged, with the type named."""
    extra = struct.pack(">HH", 4, 0xFFFF) if 64 <= kind % 128 else b""
    units = RtpDepacketiser("jpeg", 26).packet(_frame_packet(kind, 50, extra))
    assert len(units) == 1 and units[0].data == b"" and f"RTP JPEG type {kind} " in units[0].damage
    units = RtpDepacketiser("jpeg", 26).packet(_frame_packet(kind % 2, 50))  # the same frame as type 0 or 1
    assert len(units) == 1 and units[0].damage is None


@pytest.mark.parametrize("q", [0, 100, 110, 127])
def test_reserved_q_values_give_a_damaged_frame(q):
    """RFC 2435 3.1.4: Q 0 and 100-127 are reserved (1-99 scale the standard tables, 128-255 send them)."""
    units = RtpDepacketiser("jpeg", 26).packet(_frame_packet(1, q))
    assert len(units) == 1 and units[0].data == b"" and units[0].damage == f"RTP JPEG Q {q} (reserved)"


def test_quantisation_tables_longer_than_their_packet_give_a_damaged_frame():
    """RFC 2435 3.1.8: the quantisation table header's length is the bytes of tables that follow it. Here it
    says 128 and the packet holds 100: the frame is damaged, its tables are none (a frame after it with
    the same Q and no tables has none "sent before"), and a packet with the 128 bytes is whole."""
    d = RtpDepacketiser("jpeg", 26)
    tables = bytes(range(1, 129))
    units = d.packet(_frame_packet(1, 255, struct.pack(">BBH", 0, 0, 128), scan=tables[:100]))
    assert len(units) == 1 and units[0].data == b"" and "quantisation tables" in units[0].damage
    units = d.packet(_frame_packet(1, 255, struct.pack(">BBH", 0, 0, 0), seq=1))
    assert "without its quantisation tables (none came before)" in units[0].damage
    units = d.packet(_frame_packet(1, 255, struct.pack(">BBH", 0, 0, 128) + tables, seq=2))
    assert units[0].damage is None
    assert bytes([0xFF, 0xDB, 0, 132, 0]) + tables[:64] + bytes([1]) + tables[64:] in units[0].data  # DQT
