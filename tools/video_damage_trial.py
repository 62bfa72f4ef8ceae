"""How much damage in an H.264 access unit does FFmpeg report? (The figure in docs/deployments.md.)

    python tools/video_damage_trial.py [--trials 30] [--seed 1] [--err-detect crccheck+bitstream+buffer]

For each trial: flip a few random bits in the second half of one access unit of a B-frame H.264 file
(tools/make_test_media.py's ``h264_bframes``), decode the stream with FFmpeg (PyAV) and compare the
victim's picture with the clean decode. A damaged victim is *reported* when the decoder raised on its
unit, flagged its picture corrupt, or logged an error or concealment while decoding it. Prints the
counts; damage that is not reported is what no decoder-side integrity policy can catch.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

import av
import av.logging
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_test_media as media  # noqa: E402


def annexb_units(path: Path) -> list[bytes]:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        bsf = av.BitStreamFilterContext("h264_mp4toannexb", s)
        return [bytes(q) for pkt in c.demux(s) for q in bsf.filter(pkt if pkt.size else None) if q.size]


def decode(units: list[bytes], err_detect: str | None = None) -> tuple[dict, set, set]:
    """``(pictures by unit index, indices flagged corrupt or raising, indices with an error logged)``."""
    dec = av.CodecContext.create("h264", "r")
    dec.thread_type = "SLICE"
    if err_detect:
        dec.options = {"err_detect": err_detect}
    pictures, flagged, logged = {}, set(), set()
    for i, data in enumerate(units + [None]):
        pkt = None
        if data is not None:
            pkt = av.Packet(data)
            pkt.pts = i
        with av.logging.Capture(local=False) as logs:
            try:
                frames = dec.decode(pkt)
            except av.error.FFmpegError:
                flagged.add(i)
                frames = []
        if any("conceal" in m[2] or "error" in m[2].lower() for m in logs):
            logged.add(i)
        for f in frames:
            pictures[f.pts] = f.to_ndarray(format="bgr24")
            if f.is_corrupt:
                flagged.add(f.pts)
    return pictures, flagged, logged


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bits", type=int, default=3, help="bits flipped per trial")
    ap.add_argument("--err-detect", default="crccheck+bitstream+buffer", help="FFmpeg err_detect flags")
    args = ap.parse_args(argv)
    av.logging.set_level(av.logging.VERBOSE)
    with tempfile.TemporaryDirectory() as tmp:
        units = annexb_units(media.make("h264_bframes", Path(tmp)))
    clean, _, _ = decode(units)
    rng = random.Random(args.seed)
    damaged = reported = 0
    for _ in range(args.trials):
        k = rng.randrange(1, len(units) - 1)
        bad = bytearray(units[k])
        for _ in range(args.bits):
            j = rng.randrange(len(bad) // 2, len(bad))
            bad[j] ^= 1 << rng.randrange(8)
        pictures, flagged, logged = decode(units[:k] + [bytes(bad)] + units[k + 1:], args.err_detect)
        if k in pictures and np.array_equal(pictures[k], clean[k]):
            continue
        damaged += 1
        reported += k in flagged or k in logged
    print(f"{args.trials} trials, {damaged} victims damaged, {reported} reported by FFmpeg "
          f"(err_detect {args.err_detect}), {damaged - reported} decoded without complaint")
    return 0


if __name__ == "__main__":
    sys.exit(main())
