"""RTP payload of JPEG (RFC 2435) -> whole JPEG files, for dvpipe's RTSP client.

A frame's RTP packets carry an 8-byte JPEG header (type, Q, width and height in 8-pixel units, the
fragment's byte offset), after it a restart-marker header (types 64-127) and, in the first packet of a
frame with Q >= 128, the quantisation tables; then the entropy-coded scan. The JPEG headers themselves
are not sent: :func:`jpeg_headers` rebuilds them as RFC 2435 Appendix B does -- quantisation tables
from the packet (Q >= 128) or the standard tables scaled by Q (Q 1-99, Appendix A), a baseline frame
of 3 components (type 0: 4:2:2, type 1: 4:2:0), the standard Huffman tables of JPEG Annex K.3 (the
payload format has no others: a camera that encodes with its own tables cannot be sent this way).

Types 0, 1, 64 and 65 are read; other types (2-63 and 66-127 are unassigned, 128-255 dynamic: their
meaning is the sender's), Q 0 and 100-127 (reserved), quantisation tables longer than their packet, a
size of 0 without ``a=x-dimensions`` in the SDP, and a frame with a missing fragment (its offsets do not
join) make the frame damaged.
"""
from __future__ import annotations

import struct
from functools import lru_cache
from typing import Optional

__all__ = ["JpegFrames", "jpeg_headers", "scaled_tables"]

# RFC 2435 Appendix A: the standard quantisation tables (JPEG Annex K.1), in zig-zag order
_LUMA_Q = bytes([
    16, 11, 12, 14, 12, 10, 16, 14, 13, 14, 18, 17, 16, 19, 24, 40, 26, 24, 22, 22, 24, 49, 35, 37, 29, 40, 58,
    51, 61, 60, 57, 51, 56, 55, 64, 72, 92, 78, 64, 68, 87, 69, 55, 56, 80, 109, 81, 87, 95, 98, 103, 104, 103,
    62, 77, 113, 121, 112, 100, 120, 92, 101, 103, 99])
_CHROMA_Q = bytes([
    17, 18, 18, 24, 21, 24, 47, 26, 26, 47, 99, 66, 56, 66, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
    99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
    99, 99, 99, 99, 99, 99, 99, 99, 99, 99])

# JPEG Annex K.3: the standard Huffman tables (code counts by length 1-16, then the symbols)
_DC_LUMA = (bytes([0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]), bytes(range(12)))
_DC_CHROMA = (bytes([0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]), bytes(range(12)))
_AC_LUMA = (bytes([0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7D]), bytes([
    0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07, 0x22, 0x71,
    0x14, 0x32, 0x81, 0x91, 0xA1, 0x08, 0x23, 0x42, 0xB1, 0xC1, 0x15, 0x52, 0xD1, 0xF0, 0x24, 0x33, 0x62, 0x72,
    0x82, 0x09, 0x0A, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x34, 0x35, 0x36, 0x37,
    0x38, 0x39, 0x3A, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59,
    0x5A, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6A, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A, 0x83,
    0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0xA2, 0xA3,
    0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xC2, 0xC3,
    0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA, 0xE1, 0xE2,
    0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9, 0xEA, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8, 0xF9, 0xFA]))
_AC_CHROMA = (bytes([0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77]), bytes([
    0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71, 0x13, 0x22,
    0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xA1, 0xB1, 0xC1, 0x09, 0x23, 0x33, 0x52, 0xF0, 0x15, 0x62, 0x72, 0xD1,
    0x0A, 0x16, 0x24, 0x34, 0xE1, 0x25, 0xF1, 0x17, 0x18, 0x19, 0x1A, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x35, 0x36,
    0x37, 0x38, 0x39, 0x3A, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58,
    0x59, 0x5A, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6A, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A,
    0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A,
    0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA,
    0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA,
    0xE2, 0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9, 0xEA, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8, 0xF9, 0xFA]))

_MAX_FRAME = 32 << 20  # bytes of one JPEG frame


@lru_cache(maxsize=8)
def scaled_tables(q: int) -> bytes:
    """RFC 2435 Appendix A's tables for Q 1-99: the standard tables scaled as libjpeg's quality
    setting scales them (factor 5000 / Q below 50, 200 - 2 Q from 50), each value clamped to 1-255;
    luma then chroma, 64 bytes each, zig-zag order. Q 100-127 are reserved (RFC 2435 3.1.4): no tables."""
    assert 1 <= q <= 99, f"RTP JPEG Q {q} has no standard tables (1-99): the caller refuses it"
    factor = 5000 // q if q < 50 else 200 - 2 * q
    return bytes(min(255, max(1, (v * factor + 50) // 100)) for v in _LUMA_Q + _CHROMA_Q)


def _segment(marker: int, body: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(body) + 2) + body


@lru_cache(maxsize=8)  # a stream's frames share their headers: built once, not per frame
def jpeg_headers(kind: int, width: int, height: int, tables: bytes, precision: int = 0,
                 restart_interval: int = 0) -> bytes:
    """SOI to SOS of the JPEG a frame's scan belongs to (RFC 2435 Appendix B).

    ``kind``: the RTP type modulo 64 (0: 4:2:2, 1: 4:2:0); ``width``, ``height`` in pixels; ``tables``:
    the quantisation tables in zig-zag order, one or two (luma, chroma; one table serves both), 64
    bytes each, or 128 for a table whose ``precision`` bit is set (16-bit values)."""
    out = b"\xff\xd8"
    pos, qtables = 0, []
    for i in range(2):
        size = 128 if precision & (1 << i) else 64
        if pos + size <= len(tables):
            qtables.append(bytes([(16 if size == 128 else 0) | i]) + tables[pos:pos + size])
            pos += size
    if len(qtables) == 1:  # one table for both
        qtables.append(bytes([qtables[0][0] | 1]) + qtables[0][1:])
    out += _segment(0xDB, b"".join(qtables))
    if restart_interval:
        out += _segment(0xDD, struct.pack(">H", restart_interval))
    luma_sampling = 0x21 if kind == 0 else 0x22
    out += _segment(0xC0, struct.pack(">BHHB", 8, height, width, 3)
                    + bytes([1, luma_sampling, 0, 2, 0x11, 1, 3, 0x11, 1]))
    for table_class, table_id, (counts, symbols) in ((0, 0, _DC_LUMA), (1, 0, _AC_LUMA), (0, 1, _DC_CHROMA),
                                                      (1, 1, _AC_CHROMA)):
        out += _segment(0xC4, bytes([(table_class << 4) | table_id]) + counts + symbols)
    out += _segment(0xDA, bytes([3, 1, 0x00, 2, 0x11, 3, 0x11, 0, 63, 0]))
    return out


class JpegFrames:
    """Joins the RTP payloads of one frame after another (the depacketiser says where frames end).

    ``payload(p)`` takes one packet's payload; ``finish()`` returns the frame's JPEG bytes (None when no
    packet of it came; empty when its first packet was lost) and what damaged it (None: intact).
    ``dimensions``: the stream's size from the SDP (``a=x-dimensions``), for frames whose header says 0.
    """

    def __init__(self, dimensions: Optional[tuple[int, int]] = None):
        self.dimensions = dimensions
        self._tables: dict[int, tuple[bytes, int]] = {}  # Q >= 128 -> (tables, precision) last sent with it
        self._reset()

    def _reset(self) -> None:
        self._head: Optional[bytes] = None
        self._scan: list[bytes] = []
        self._size = 0
        self._damage: Optional[str] = None

    def payload(self, p: memoryview) -> None:
        why = self._join(p)
        if why is not None:
            self._damage = self._damage or why

    def _join(self, p: memoryview) -> Optional[str]:
        """What is wrong with this packet (None: its scan bytes are joined to the frame's)."""
        if len(p) < 8:
            return "an RTP JPEG packet shorter than its header"
        offset = (p[1] << 16) | (p[2] << 8) | p[3]
        kind, q, width, height = p[4], p[5], p[6] * 8, p[7] * 8
        i, restart_interval = 8, 0
        if kind not in (0, 1, 64, 65):  # RFC 2435 3.1.3: 128-255 are dynamic (the sender's own), not these
            return f"RTP JPEG type {kind} (dvpipe's RTSP client reads types 0, 1, 64 and 65)"
        if kind >= 64:
            if len(p) < i + 4:
                return "an RTP JPEG packet shorter than its restart header"
            restart_interval = (p[i] << 8) | p[i + 1]
            i += 4
        if offset != self._size:
            return f"RTP JPEG fragment at byte {offset} where byte {self._size} was due (packets lost)"
        if offset == 0:
            tables, precision = b"", 0
            if q >= 128:
                if len(p) < i + 4:
                    return "an RTP JPEG packet shorter than its quantisation table header"
                precision, length = p[i + 1], (p[i + 2] << 8) | p[i + 3]
                if len(p) < i + 4 + length:
                    return f"an RTP JPEG packet shorter than its {length} bytes of quantisation tables"
                tables = bytes(p[i + 4:i + 4 + length])
                i += 4 + length
                if length:
                    self._tables[q] = (tables, precision)
                elif q in self._tables:  # "sent before": the last tables with this Q
                    tables, precision = self._tables[q]
                else:
                    return f"RTP JPEG Q {q} without its quantisation tables (none came before)"
            elif q == 0 or q >= 100:
                return f"RTP JPEG Q {q} (reserved)"
            else:
                tables = scaled_tables(q)
            if not width or not height:
                if self.dimensions is None:
                    return "an RTP JPEG frame of size 0 and no a=x-dimensions in the SDP"
                width, height = self.dimensions
            self._head = jpeg_headers(kind % 64, width, height, tables, precision, restart_interval)
        self._scan.append(bytes(p[i:]))
        self._size += len(p) - i
        if self._size > _MAX_FRAME:
            return f"an RTP JPEG frame over {_MAX_FRAME >> 20} MB"
        return None

    def finish(self) -> tuple[Optional[bytes], Optional[str]]:
        head, scan, damage = self._head, b"".join(self._scan), self._damage
        self._reset()
        if head is None:
            return (None if damage is None else b""), damage
        if not scan.endswith(b"\xff\xd9"):
            scan += b"\xff\xd9"
        return head + scan, damage
