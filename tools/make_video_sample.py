"""Make the video samples: one H.264 MP4 per camera from the sample frames (samples/frames).

    python tools/make_video_sample.py [--samples samples] [--out samples/video] [--codec h264|h265]

Each camera's JPEG frames become one MP4 (H.264 without B-frames, as camera encoders stream: one
keyframe at the start, then P-frames), with each frame's **pts = its capture time** minus the scene's start time and
the container's ``creation_time`` = that start time, so that ``{type: video}`` sources recover the
exact capture times (``start_ns + pts``) and the cameras stay synchronised.
Uses PyAV (libx264/libx265) and OpenCV only; does not import dvpipe. Deterministic for one
FFmpeg build; about 1 s.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
from fractions import Fraction
from pathlib import Path

import av
import cv2
import yaml

ROOT = Path(__file__).resolve().parent.parent
TIME_BASE = Fraction(1, 90_000)


def _iso(ns: int) -> str:
    t = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=ns // 1000)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_camera_video(frames: list[tuple[int, Path]], out: Path, start_ns: int, codec: str = "h264",
                      crf: int = 26) -> int:
    """Encode ``[(capture_epoch_ns, jpeg path), ...]`` into ``out``; returns the number of pictures."""
    out.parent.mkdir(parents=True, exist_ok=True)
    first = cv2.imread(str(frames[0][1]), cv2.IMREAD_COLOR)
    h, w = first.shape[:2]
    # movie_timescale: the edit list that carries the first frame's offset uses it (default 1 ms steps)
    with av.open(str(out), "w", format="mp4", options={"movie_timescale": "90000"}) as container:
        container.metadata["creation_time"] = _iso(start_ns)
        container.metadata["comment"] = f"dvpipe video sample; pts = capture time - {start_ns} ns"
        name = "libx264" if codec == "h264" else "libx265"
        stream = container.add_stream(name, rate=2)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.time_base = TIME_BASE
        stream.codec_context.time_base = TIME_BASE
        stream.codec_context.max_b_frames = 0
        if codec == "h264":
            stream.options = {"crf": str(crf), "preset": "medium", "x264-params": "keyint=30:bframes=0"}
        else:
            stream.options = {"crf": str(crf + 4), "preset": "medium",
                              "x265-params": "keyint=30:bframes=0:log-level=error"}
        for capture_epoch_ns, path in frames:
            img = cv2.imread(str(path), cv2.IMREAD_COLOR)
            frame = av.VideoFrame.from_ndarray(img, format="bgr24")
            frame.pts = round((capture_epoch_ns - start_ns) * TIME_BASE.denominator / 1e9)
            frame.time_base = TIME_BASE
            for pkt in stream.encode(frame):
                container.mux(pkt)
        for pkt in stream.encode(None):
            container.mux(pkt)
    return len(frames)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", default=str(ROOT / "samples"), help="the samples folder (scene.yaml, frames/)")
    ap.add_argument("--out", default=None, help="output folder (default: SAMPLES/video)")
    ap.add_argument("--codec", choices=("h264", "h265"), default="h264")
    args = ap.parse_args(argv)
    samples = Path(args.samples)
    out = Path(args.out) if args.out else samples / "video"
    scene = yaml.safe_load((samples / "scene.yaml").read_text(encoding="utf-8"))
    start_ns = int(scene["timestamps"][0]["timestamp_ns"])
    ext = "mp4"
    for cam in scene["camera_order"]:
        frames = sorted((int(ts["frames"][cam]["capture_time_ns"]), samples / ts["frames"][cam]["image"])
                        for ts in scene["timestamps"])
        path = out / f"{cam}.{ext}"
        n = make_camera_video(frames, path, start_ns, args.codec)
        print(f"{path}: {n} pictures, {path.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
