"""Container sniffing and header parsing for encoded frames (no pixel decoding here).

Used to validate frames before decode (a truncated JPEG decodes "successfully" to a grey-filled
image with libjpeg, so truncation is checked explicitly) and to tell DVPP rules what a JPEG is
(baseline/progressive/arithmetic, chroma subsampling).
"""
from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .errors import FrameError

__all__ = ["VIDEO_ENCODINGS", "RAW_YUV_ENCODINGS", "ImageInfo", "sniff", "jpeg_info", "png_info", "image_info", "read_frame_bytes",
           "max_file_bytes"]

#: camera encodings that deliver video access units (Annex B) rather than still images
VIDEO_ENCODINGS = ("h264", "h265")
#: camera encodings that deliver uncompressed YUV frames as GMSL / V4L2 cameras do (decode is a colour
#: conversion to BGR; layouts and the assumed colour matrix and range in :mod:`dvpipe.backends._raw_yuv`):
#: ``uyvy`` and ``yuyv`` (YUV 4:2:2 packed, V4L2_PIX_FMT_UYVY / _YUYV), ``nv12`` (YUV 4:2:0 semi-planar)
RAW_YUV_ENCODINGS = ("uyvy", "yuyv", "nv12")

#: default cap on a frame's size (width x height, pixels), checked before any buffer is made: 64 MP,
#: above any automotive or surveillance sensor (``Pipeline(max_pixels=...)``, ``decode.max_pixels``)
DEFAULT_MAX_PIXELS = 64_000_000

#: bytes per pixel of the largest image file dvpipe reads: a 16-bit RGBA PNG stored uncompressed (8);
#: a JPEG of real pictures stays far below it, even at quality 100 with 4:4:4 chroma
MAX_BYTES_PER_PIXEL = 8
#: room for what an image file carries besides its pixels (EXIF, ICC profiles, XMP, thumbnails), in bytes
FILE_METADATA_BYTES = 16 << 20


def max_file_bytes(max_pixels: int) -> int:
    """The default cap on one encoded image file (bytes) for frames of at most ``max_pixels`` pixels:
    ``MAX_BYTES_PER_PIXEL * max_pixels + FILE_METADATA_BYTES`` (64 MP -> 528777216 bytes, 504 MiB)."""
    return MAX_BYTES_PER_PIXEL * int(max_pixels) + FILE_METADATA_BYTES


#: the largest image file :func:`read_frame_bytes` reads from a path: the cap for :data:`DEFAULT_MAX_PIXELS` frames
MAX_FRAME_FILE_BYTES = max_file_bytes(DEFAULT_MAX_PIXELS)

_JPEG_SOI = b"\xff\xd8\xff"
_PNG_SIG = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class ImageInfo:
    """Header facts of an encoded image.

    Attributes:
        format: ``jpeg`` or ``png``.
        width / height: pixels.
        subsampling: JPEG chroma subsampling ``444``, ``422``, ``420``, ``440``, ``411``, ``400`` (gray), or ``""``.
        coding: JPEG ``baseline``, ``extended``, ``progressive``, ``lossless``, ``hierarchical`` or ``arithmetic``;
            ``""`` for PNG.
        components: colour components (1 gray, 3 colour, 4 CMYK / RGBA).
        precision: JPEG bits per sample (8; 12 or 16 in extended or lossless files); 8 for PNG.
        rgb: a 3-component JPEG stored in RGB rather than YCbCr, read as libjpeg reads it: no JFIF marker, and an
            Adobe marker with transform 0 or (without one) components named ``R``, ``G``, ``B``.
    """

    format: str
    width: int
    height: int
    subsampling: str = ""
    coding: str = ""
    components: int = 3
    precision: int = 8
    rgb: bool = False

    @property
    def encoding(self) -> str:
        """dvpipe encoding name used by DVPP rules: ``jpeg420``, ``jpeg-progressive``, ``png``..."""
        if self.format == "png":
            return "png"
        if self.coding == "progressive":
            return "jpeg-progressive"
        if self.coding == "arithmetic":
            return "jpeg-arithmetic"
        return f"jpeg{self.subsampling}"


def sniff(data: bytes) -> Optional[str]:
    """``jpeg``, ``png`` or None from the first bytes."""
    head = bytes(data[:8])
    if head.startswith(_JPEG_SOI):
        return "jpeg"
    if head.startswith(_PNG_SIG):
        return "png"
    return None


#: SOFn -> coding (T.81 Table B.1); SOF9-SOF15 (but DHT/JPG/DAC) are arithmetic-coded
_SOF_CODING = {0xC0: "baseline", 0xC1: "extended", 0xC2: "progressive", 0xC3: "lossless", 0xC5: "hierarchical",
               0xC6: "hierarchical", 0xC7: "hierarchical"}


def jpeg_complete(data) -> bool:
    """Whether JPEG bytes end with EOI (FFD9), allowing a little trailing padding some encoders add.

    A quick test of the common case only: a complete JPEG may also carry other bytes after its EOI
    (a phone's or an IP camera's trailer, a second picture as in MPO files); :func:`jpeg_frame_header`
    accepts those too.
    """
    return bytes(data[-64:]).rstrip(b"\x00\r\n ").endswith(b"\xff\xd9")


def jpeg_info(data: bytes) -> ImageInfo:
    """Parse JPEG markers up to the frame header. Raises :class:`FrameError` on malformed or truncated data."""
    return jpeg_frame_header(data)[1]


def jpeg_frame_header(data: bytes) -> tuple[int, ImageInfo]:
    """``(offset of the SOFn marker, ImageInfo)``; :class:`FrameError` as :func:`jpeg_info`.

    Truncation: the data must hold an EOI marker after the start of its first scan -- at the very
    end (the quick test, :func:`jpeg_complete`), or anywhere after it, followed by trailing bytes
    that are not part of the picture (entropy-coded data cannot hold FFD9, and a thumbnail's EOI
    inside an APP1 segment comes before the scan).
    """
    mv = memoryview(data)
    if len(mv) < 4 or bytes(mv[:3]) != _JPEG_SOI:
        raise FrameError("not a JPEG (no SOI marker)")
    if jpeg_complete(mv):
        return _frame_header(mv, to_scan=False)[:2]
    try:
        sof, info, scan = _frame_header(mv, to_scan=True)
    except FrameError:
        scan = -1
    if scan < 0 or bytes(mv[scan:]).find(b"\xff\xd9") < 0:
        raise FrameError("truncated JPEG (no EOI marker after the scan data)")
    return sof, info


def _frame_header(mv: memoryview, to_scan: bool) -> tuple[int, ImageInfo, int]:
    """Walk the marker segments: ``(SOFn offset, ImageInfo, offset where the first scan's data starts)``.

    Stops at the frame header unless ``to_scan`` (then the third item is -1), else at the first SOS.
    """
    n = len(mv)
    i = 2
    found: Optional[tuple[int, ImageInfo]] = None
    jfif, adobe = False, None  # what decides a 3-component picture's colour space (libjpeg's reading)
    while i + 4 <= n:
        if mv[i] != 0xFF:
            raise FrameError(f"corrupt JPEG (expected a marker at byte {i})")
        marker = mv[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (length,) = struct.unpack(">H", mv[i + 2:i + 4])
        if length < 2 or i + 2 + length > n:
            raise FrameError("corrupt JPEG (segment runs past the end)")
        if marker == 0xE0 and bytes(mv[i + 4:i + 9]) == b"JFIF\x00":
            jfif = True
        elif marker == 0xEE and length >= 14 and bytes(mv[i + 4:i + 9]) == b"Adobe":
            adobe = mv[i + 15]  # after "Adobe", version, flags0, flags1: the transform
        if found is None and 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            found = i, _sof_info(marker, mv[i + 4:i + 2 + length], jfif, adobe)
            if not to_scan:
                return found[0], found[1], -1
        if marker == 0xDA:
            if found is None:
                break
            return found[0], found[1], i + 2 + length
        i += 2 + length
    raise FrameError("corrupt JPEG (no frame header before the scan)")


def _sof_info(marker: int, seg: memoryview, jfif: bool = False, adobe: Optional[int] = None) -> ImageInfo:
    """ImageInfo from the payload of a SOFn segment (after its length field); ``jfif`` / ``adobe`` (its
    transform): the markers seen before it."""
    if len(seg) < 6:
        raise FrameError("corrupt JPEG (short frame header)")
    height, width = struct.unpack(">HH", seg[1:5])
    ncomp = seg[5]
    factors = [(seg[6 + 3 * c + 1] >> 4, seg[6 + 3 * c + 1] & 15) for c in range(ncomp) if 6 + 3 * c + 1 < len(seg)]
    coding = "arithmetic" if marker >= 0xC9 else _SOF_CODING[marker]
    rgb = False
    if ncomp == 3 and not jfif:  # libjpeg (jdapimin.c default_decompress_parms): JFIF means YCbCr
        rgb = adobe == 0 if adobe is not None else bytes(seg[6:15:3]) == b"RGB"
    return ImageInfo("jpeg", width, height, _subsampling(factors), coding, ncomp, int(seg[0]), rgb)


def _subsampling(factors: list[tuple[int, int]]) -> str:
    if len(factors) == 1:
        return "400"
    if len(factors) < 3:
        return ""
    (h0, v0), (h1, v1), (h2, v2) = factors[:3]
    if (h1, v1) != (h2, v2) or h1 == 0 or v1 == 0:
        return ""
    rh, rv = h0 / h1, v0 / v1
    table: dict[tuple[float, float], str] = {(1, 1): "444", (2, 1): "422", (2, 2): "420", (1, 2): "440", (4, 1): "411"}
    return table.get((rh, rv), "")


def png_info(data: bytes) -> ImageInfo:
    """Parse the PNG IHDR chunk and check the stream ends with IEND."""
    if len(data) < 33 or bytes(data[:8]) != _PNG_SIG or bytes(data[12:16]) != b"IHDR":
        raise FrameError("not a PNG (bad signature or IHDR)")
    if bytes(data[-12:])[4:8] != b"IEND":
        raise FrameError("truncated PNG (no IEND chunk at the end)")
    width, height = struct.unpack(">II", bytes(data[16:24]))
    colour_type = data[25]
    comps = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(colour_type, 3)
    return ImageInfo("png", width, height, "", "", comps)


def unsupported_precision(info: ImageInfo) -> Optional[str]:
    """Why a valid image cannot be decoded for its sample precision (a 12-bit JPEG), or None.

    dvpipe's decoders (libjpeg-turbo in OpenCV and simplejpeg) decode 8-bit JPEG; lossless JPEG of
    another precision is left to the decoder (it says when it cannot)."""
    if info.format == "jpeg" and info.precision != 8 and info.coding != "lossless":
        return (f"unsupported JPEG precision: {info.precision}-bit samples ({info.coding} coding); dvpipe decodes "
                "8-bit JPEG (a valid file, not a damaged one: convert it to 8 bits, e.g. with a 12-bit libjpeg's "
                "djpeg, or capture 8-bit JPEG)")
    return None


def image_info(data: bytes) -> ImageInfo:
    """Header facts of a JPEG or PNG; :class:`FrameError` for anything else or a damaged header."""
    kind = sniff(data)
    if kind == "jpeg":
        return jpeg_info(data)
    if kind == "png":
        return png_info(data)
    raise FrameError("unrecognised image data (neither JPEG nor PNG)")


def read_regular_file(path: str, cap: int) -> tuple[int, Optional[bytes]]:
    """``(size, bytes)`` of the regular file ``path``; bytes ``None`` when it holds more than ``cap`` bytes (at
    most ``cap + 1`` are read: a file that grew since its size was taken counts by what was read). A FIFO or device
    node is opened without blocking (a plain ``open()`` of a FIFO waits for a writer) and refused with
    ``OSError("not a regular file")``."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
        if st.st_size > cap:
            return st.st_size, None
        data = f.read(cap + 1)
        return (len(data), None) if len(data) > cap else (st.st_size, data)


def read_frame_bytes(value: Any) -> Any:
    """Normalise a frame value: a path becomes its bytes (a regular file of at most :data:`MAX_FRAME_FILE_BYTES`;
    a FIFO or device node is refused, not waited on); bytes-likes and arrays pass through."""
    if isinstance(value, (str, os.PathLike)):
        name = os.fspath(value)
        try:
            size, data = read_regular_file(name, MAX_FRAME_FILE_BYTES)
        except (OSError, ValueError) as e:  # ValueError: a path with a NUL byte
            raise FrameError(f"cannot read {name!r}: {getattr(e, 'strerror', None) or e}") from None
        if data is None:
            raise FrameError(f"cannot read {name}: {size} bytes, more than an image file may have "
                             f"({MAX_FRAME_FILE_BYTES})")
        return data
    if isinstance(value, (bytes, bytearray, memoryview, np.ndarray)):
        return value
    raise FrameError(f"a frame must be encoded bytes, a file path or an HxWx3 uint8 BGR array, got {type(value).__name__}")
