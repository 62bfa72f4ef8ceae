"""How much damage to H.264 / H.265 streams does dvpipe catch? (The table in docs/deployments.md.)

    python tools/video_damage_trial.py [--codecs h264 h265] [--kinds bitflip truncate drop header]
                                       [--trials 30] [--seed 1] [--markdown]

The streams: 48 pictures of tools/make_test_media.py's ``frame_image`` (320x192), encoded by libx264
(``bframes=3``, b-pyramid, keyint 24) and libx265 (its defaults, keyint 24: B-frames, CRAs) as
Annex-B access units. Each trial damages one access unit (never the first) in one way:

=========  ==============================================================================
bitflip    3 random bits flipped in the second half of the unit's first slice (slice data)
truncate   the unit cut to a random 20-90 % of its bytes (a packet cut short)
drop       the whole unit removed (a lost packet)
header     1 random bit flipped in the first 6 bytes after the slice's NAL header
=========  ==============================================================================

and runs the units through dvpipe's decoder (``dvpipe.video.ReorderingDecoder``, frames matched by
pts as from a container) and, independently, through FFmpeg alone. The clean decode is the truth: a
*damaged* picture is one whose FFmpeg decode differs from the clean decode, or that FFmpeg does not
output. Per codec and kind it prints: damaged pictures, how many dvpipe dropped (*detected*) and how
many it emitted as valid (*undetected*: pixels that differ from the clean picture), intact pictures
dropped too (the reference chain is cut conservatively), and pictures whose unit was removed (they
have no frame at all: a container or stream without them gives no sign of them).
"""
from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

import av
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
import make_test_media as media  # noqa: E402
from dvpipe.errors import FrameError  # noqa: E402
from dvpipe.video import (FILE_LOOKAHEAD, AccessUnit, ReorderingDecoder, bgr24, is_keyframe,  # noqa: E402
                          presentation_packets)

KINDS = ("bitflip", "truncate", "drop", "header")
#: picture size: large enough for libx265 to code wavefront rows (WPP entry points) as it does at camera sizes
W, H = 320, 192
_FFMPEG = {"h264": "h264", "h265": "hevc", "h265-md5": "hevc"}
#: the codec dvpipe's decoder is told
_CODEC = {"h264": "h264", "h265": "h265", "h265-md5": "h265"}


def clean_stream(codec: str, folder: Path, n: int = 48) -> list[bytes]:
    """Annex-B access units of the trial stream (decode order)."""
    if codec == "h264":
        path = media._encode(folder / "trial.h264", codec="libx264", fmt="h264", n=n, width=W, height=H,
                             max_b_frames=3,
                             options=media._x264("keyint=24:min-keyint=24:scenecut=0:bframes=3:b-pyramid=normal"))
    else:
        params = "log-level=error:keyint=24" + (":hash=1" if codec == "h265-md5" else "")
        path = media._encode(folder / "trial.h265", codec="libx265", fmt="hevc", n=n, width=W, height=H,
                             options={"x265-params": params})
    return media.annexb_units(path, _FFMPEG[codec])


def ffmpeg_decode(units: list[Optional[bytes]], codec: str) -> dict[int, np.ndarray]:
    """FFmpeg alone: picture per unit index (``None`` units are skipped: removed)."""
    dec = av.CodecContext.create(_FFMPEG[codec], "r")
    out: dict[int, np.ndarray] = {}
    for i, data in enumerate(units + [b""]):
        if data is None:
            continue
        pkt = None
        if data:
            pkt = av.Packet(data)
            pkt.pts = i
        try:
            frames = dec.decode(pkt)
        except av.error.FFmpegError:
            continue
        for f in frames:
            out[f.pts] = f.to_ndarray(format="bgr24")
    return out


def dvpipe_decode(units: list[Optional[bytes]], pts: list[int], codec: str) -> tuple[dict, dict]:
    """dvpipe's decoder, frames matched by pts: ``(emitted BGR by pts, drop reason by pts)``."""
    codec = _CODEC[codec]
    aus = [AccessUnit(d, pts[i], is_keyframe(d, codec)) for i, d in enumerate(units) if d is not None]
    dec = ReorderingDecoder(codec)
    emitted, dropped = {}, {}
    for packet in presentation_packets(aus, "pts", FILE_LOOKAHEAD):
        try:
            emitted[packet.want] = bgr24(dec.picture(packet))
        except FrameError as e:
            dropped[packet.want] = str(e)
    return emitted, dropped


def damage(unit: bytes, kind: str, codec: str, rng: random.Random) -> Optional[bytes]:
    if kind == "drop":
        return None
    if kind == "truncate":
        return unit[:max(8, int(len(unit) * rng.uniform(0.2, 0.9)))]
    bad = bytearray(unit)
    if kind == "bitflip":
        start = _slice_start(unit, codec)
        end = unit.find(b"\x00\x00\x01", start)
        end = len(unit) if end < 0 else end
        for _ in range(3):
            j = rng.randrange((start + end) // 2, end)
            bad[j] ^= 1 << rng.randrange(8)
        return bytes(bad)
    # header: the last NAL unit's first bytes after its header (the picture's slice)
    start = _slice_start(unit, codec)
    j = rng.randrange(start, min(len(bad), start + 6))
    bad[j] ^= 1 << rng.randrange(8)
    return bytes(bad)


def _slice_start(unit: bytes, codec: str) -> int:
    """Offset of the first byte after the NAL header of the unit's first slice."""
    i = unit.find(b"\x00\x00\x01")
    while i >= 0:
        head = unit[i + 3]
        if (codec == "h264" and head & 0x1F in (1, 5)) or (codec != "h264" and (head >> 1) & 0x3F <= 21):
            return i + 3 + (1 if codec == "h264" else 2)
        i = unit.find(b"\x00\x00\x01", i + 3)
    raise ValueError("an access unit without a slice")


def trial(codec: str, kind: str, trials: int, seed: int, folder: Path) -> Counter:
    clean = clean_stream(codec, folder)
    ref = ffmpeg_decode(list(clean), codec)
    pts = [0] * len(clean)
    for k, i in enumerate(ref):  # FFmpeg's output order is presentation order
        pts[i] = k  # a unit's pts: its place in presentation order
    truth = {pts[i]: img for i, img in ref.items()}
    rng = random.Random(f"{seed}-{codec}-{kind}")
    c: Counter = Counter()
    for _ in range(trials):
        v = rng.randrange(1, len(clean))
        units: list[Optional[bytes]] = list(clean)
        units[v] = damage(clean[v], kind, codec, rng)
        got = {pts[i]: img for i, img in ffmpeg_decode(units, codec).items()}
        damaged = {k for k in truth if k not in got or not np.array_equal(got[k], truth[k])}
        if units[v] is None:
            c["removed"] += 1
            damaged.discard(pts[v])
        emitted, dropped = dvpipe_decode(units, pts, codec)
        c["trials"] += 1
        c["trials with damage"] += bool(damaged)
        c["damaged"] += len(damaged)
        wrong = {k for k, img in emitted.items() if not np.array_equal(img, truth[k])}
        c["undetected"] += len(wrong)
        c["detected"] += len(damaged & set(dropped))
        c["intact dropped"] += len(set(dropped) - damaged)
        c["trials with damage emitted"] += bool(wrong)
        for k in damaged & set(dropped):
            r = dropped[k]
            c["by headers" if "header check" in r or "picture hash" in r else
              "by FFmpeg" if "flagged" in r or "access unit (decoder" in r else "chain"] += 1
    return c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--codecs", nargs="+", default=list(_FFMPEG), choices=list(_FFMPEG),
                    help="h265-md5: libx265 with hash=1 (a decoded picture hash SEI per picture)")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--markdown", action="store_true", help="print the docs' table")
    args = ap.parse_args(argv)
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for codec in args.codecs:
            for kind in args.kinds:
                rows.append((codec, kind, trial(codec, kind, args.trials, args.seed, Path(tmp))))
    if args.markdown:
        print("| codec | damage | trials (damage visible) | damaged pictures dropped / total | emitted with "
              "damage (trials) | intact pictures dropped | pictures removed (no frame) |")
        print("|---|---|---|---|---|---|---|")
        for codec, kind, c in rows:
            print(f"| {codec} | {kind} | {c['trials']} ({c['trials with damage']}) | {c['detected']} / {c['damaged']} "
                  f"| {c['undetected']} ({c['trials with damage emitted']}) | {c['intact dropped']} | {c['removed']} |")
    else:
        for codec, kind, c in rows:
            print(f"{codec} {kind:9s} trials {c['trials']} (damage visible in {c['trials with damage']}): damaged "
                  f"pictures {c['damaged']}, dropped {c['detected']} (first caught by dvpipe's headers or hash "
                  f"{c['by headers']}, by FFmpeg {c['by FFmpeg']}, downstream of them {c['chain']}), emitted with "
                  f"damage {c['undetected']} (in {c['trials with damage emitted']} trials); intact pictures dropped "
                  f"{c['intact dropped']}; units removed {c['removed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
