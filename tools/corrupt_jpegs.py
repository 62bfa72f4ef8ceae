#!/usr/bin/env python3
"""Damaged and trailer-carrying variants of a real JPEG, made deterministically (for integrity tests).

Usage::

    python tools/corrupt_jpegs.py PHOTO.jpg OUTDIR    # writes OUTDIR/<variant>.jpg for every variant

Three families, each a ``{name: bytes}`` dict made from the bytes of one baseline/progressive JPEG:

- :func:`damage_variants`: the kinds of damage a camera link or a disk does to the entropy-coded
  data -- bit flips, truncation with an EOI appended (so the file still "ends well"), a zeroed
  4 KB block, the frame header's SOF0 turned into SOF9 (arithmetic coding), bogus RST markers.
  Whether libjpeg notices a given variant is not promised here: the tests ask an independent
  decoder.
- :func:`trailer_variants`: a *valid* JPEG followed by bytes after its EOI (zero padding, random
  bytes, a phone-style trailer, an appended second JPEG as in MPO files, text). Not corruption.
- :func:`jfif_revision`: a JFIF header of an unknown revision -- a libjpeg warning about metadata,
  not damage.
- :func:`header_only`: the photo's tables and a frame header declaring ``width x height`` (20000 x
  20000 by default) with an empty scan: a few hundred bytes that would make a decoder allocate
  gigabytes.

Offsets are fractions of the entropy-coded data (the bytes between the first SOS segment and the
final EOI), so the same call on the same photo always gives the same bytes.
"""
from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

import numpy as np

__all__ = ["scan_range", "damage_variants", "trailer_variants", "jfif_revision", "header_only"]

_EOI = b"\xff\xd9"


def _segments(data: bytes):
    """``(marker, offset, length)`` of each marker segment from SOI up to and including the first SOS."""
    i = 2
    while i + 4 <= len(data):
        marker = data[i + 1]
        (length,) = struct.unpack(">H", data[i + 2:i + 4])
        yield marker, i, length
        if marker == 0xDA:
            return
        i += 2 + length
    raise ValueError("no SOS segment: not a JPEG this tool can take")


def scan_range(data: bytes) -> tuple[int, int]:
    """``(start, end)`` byte offsets of the entropy-coded data: after the first SOS header, before the last EOI."""
    if not data.startswith(b"\xff\xd8") or not data.endswith(_EOI):
        raise ValueError("expected a complete JPEG (SOI ... EOI)")
    for marker, i, length in _segments(data):
        if marker == 0xDA:
            return i + 2 + length, len(data) - 2
    raise AssertionError("unreachable")


def _at(data: bytes, fraction: float) -> int:
    """Byte offset at ``fraction`` (0..1) of the entropy-coded data."""
    start, end = scan_range(data)
    return start + int((end - start) * fraction)


def flip_bits(data: bytes, count: int, seed: int) -> bytes:
    """``count`` single-bit flips at positions drawn (seeded) uniformly over the entropy-coded data."""
    start, end = scan_range(data)
    rng = np.random.default_rng(seed)
    out = bytearray(data)
    for pos, bit in zip(rng.integers(start, end, count), rng.integers(0, 8, count)):
        out[pos] ^= 1 << int(bit)
    return bytes(out)


def truncate_with_eoi(data: bytes, fraction: float) -> bytes:
    """The file cut at ``fraction`` of its entropy-coded data, with an EOI marker appended."""
    return data[:_at(data, fraction)] + _EOI


def zero_block(data: bytes, fraction: float, size: int = 4096) -> bytes:
    """``size`` bytes of the entropy-coded data set to zero from ``fraction`` on (a lost disk block)."""
    pos = _at(data, fraction)
    end = min(pos + size, scan_range(data)[1])
    return data[:pos] + bytes(end - pos) + data[end:]


def sof0_to_sof9(data: bytes) -> bytes:
    """The baseline frame header (SOF0) relabelled SOF9: the Huffman data is then read as arithmetic-coded."""
    for marker, i, _ in _segments(data):
        if marker == 0xC0:
            return data[:i + 1] + b"\xc9" + data[i + 2:]
    raise ValueError("no SOF0 frame header")


def bogus_rst(data: bytes, count: int, seed: int) -> bytes:
    """``count`` restart markers (FFD0..FFD7, in order) inserted at seeded positions of the entropy-coded data."""
    start, end = scan_range(data)
    rng = np.random.default_rng(seed)
    cuts = sorted(int(p) for p in rng.integers(start, end, count))
    out, prev = [], 0
    for k, pos in enumerate(cuts):
        if data[pos - 1] == 0xFF:  # never split a stuffed FF00 or a marker
            pos += 1
        out += [data[prev:pos], bytes((0xFF, 0xD0 + k % 8))]
        prev = pos
    out.append(data[prev:])
    return b"".join(out)


def damage_variants(data: bytes) -> dict[str, bytes]:
    """Every damage variant of ``data`` by name (deterministic; see the module docstring)."""
    out: dict[str, bytes] = {}
    for count in (1, 4, 32):
        for seed in range(4):
            out[f"bitflip{count}_s{seed}"] = flip_bits(data, count, seed)
    for fraction in (0.1, 0.5, 0.9, 0.99):
        out[f"truncated{int(fraction * 100)}_eoi"] = truncate_with_eoi(data, fraction)
    for fraction in (0.05, 0.5, 0.9):
        out[f"zero4k_{int(fraction * 100)}"] = zero_block(data, fraction)
    if any(m == 0xC0 for m, _, _ in _segments(data)):
        out["sof0_to_sof9"] = sof0_to_sof9(data)
    for count in (1, 3):
        for seed in range(2):
            out[f"rst{count}_s{seed}"] = bogus_rst(data, count, seed)
    return out


def trailer_variants(data: bytes) -> dict[str, bytes]:
    """``data`` (a complete JPEG) followed by bytes after its EOI, by name: none of them is damage."""
    rng = np.random.default_rng(12)
    second = data[:2] + b"\xff\xfe\x00\x06MPF2" + data[2:]  # an appended second picture, as in MPO files
    return {
        "zeros_16": data + bytes(16),
        "zeros_4k": data + bytes(4096),
        "random_1k": data + rng.integers(0, 256, 1024, dtype=np.uint8).tobytes(),
        "phone_trailer": data + b"\x00" * 3 + b"SEFH" + struct.pack("<II", 107, 1) + b"Image_UTC_Data1700000000000SEFT",
        "camera_text": data + b"\r\n--camera-meta: ts=1700000000.123 seq=42\r\n",
        "second_jpeg": data + second,
    }


def jfif_revision(data: bytes, major: int = 2) -> bytes:
    """The JFIF APP0 segment's major version set to ``major``: libjpeg warns, yet the picture is intact."""
    for marker, i, _ in _segments(data):
        if marker == 0xE0 and data[i + 4:i + 9] == b"JFIF\x00":
            return data[:i + 9] + bytes((major,)) + data[i + 10:]
    raise ValueError("no JFIF APP0 segment")


def header_only(data: bytes, width: int = 20000, height: int = 20000) -> bytes:
    """The photo's tables (no APPn / COM) and frame header set to ``width x height``, an empty scan, EOI."""
    out = [b"\xff\xd8"]
    for marker, i, length in _segments(data):
        seg = data[i:i + 2 + length]
        if 0xE0 <= marker <= 0xEF or marker == 0xFE:
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            seg = seg[:5] + struct.pack(">HH", height, width) + seg[9:]
        out.append(seg)
    out.append(_EOI)
    return b"".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("photo", type=Path, help="a complete baseline or progressive JPEG")
    ap.add_argument("outdir", type=Path)
    args = ap.parse_args(argv)
    data = args.photo.read_bytes()
    try:
        made = {**damage_variants(data), **{f"trailer_{k}": v for k, v in trailer_variants(data).items()},
                "header_only_20000": header_only(data)}
    except ValueError as e:
        print(f"corrupt_jpegs: {args.photo}: {e}", file=sys.stderr)
        return 2
    args.outdir.mkdir(parents=True, exist_ok=True)
    for name, blob in made.items():
        (args.outdir / f"{name}.jpg").write_bytes(blob)
    print(f"{len(made)} variants of {args.photo.name} in {args.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
