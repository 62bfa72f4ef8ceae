"""Helpers shared by the DVPP tests and ``tools/ascend_smoke.py``: targets, frames, error statistics.

Test scaffolding (:mod:`dvpipe.testing`): nothing here is used by the backend itself.
"""
from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

__all__ = ["CI_TARGETS", "error_stats", "tolerance_violations", "sample_frame_sets", "kitti_rig", "synthetic_bgr",
           "encode_jpeg", "h264_stream", "naive_nv12_planes", "sentinel_count", "video_packets", "pyav_display_order"]

#: the targets CI runs the backend against on the software device: (SoC, CANN)
CI_TARGETS = (("Ascend310", "6.0.1"), ("Ascend310P3", "7.0.0"), ("Ascend910B3", "8.0.0"), ("Ascend910_9391", "8.1.RC1"))

ROOT = Path(__file__).resolve().parents[2]


def error_stats(a: np.ndarray, b: np.ndarray) -> dict:
    """``{"mean_abs", "p999_abs", "max_abs"}`` of ``a - b`` (float64)."""
    d = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return {"mean_abs": float(d.mean()), "p999_abs": float(np.percentile(d, 99.9)), "max_abs": float(d.max())}


def tolerance_violations(stats: dict, bound: dict) -> list[str]:
    """The entries of ``stats`` above ``bound`` (same keys), in words; empty when every one is within its bound."""
    return [f"{k} {stats[k]:.4g} > {bound[k]}" for k in ("mean_abs", "p999_abs", "max_abs") if k in bound
            and stats[k] > bound[k]]


def sample_frame_sets(rig, root: Optional[Path] = None, count: int = 2) -> list[dict]:
    """The first ``count`` frame sets of ``samples/frames`` as ``{camera: jpeg bytes}``."""
    base = Path(root or ROOT / "samples") / "frames"
    sets = []
    files = {c.name: sorted((base / c.name).glob("*.jpg")) for c in rig.cameras}
    for k in range(count):
        sets.append({name: fs[k].read_bytes() for name, fs in files.items()})
    return sets


def kitti_rig(encoding: str = "png"):
    """The KITTI rig (configs/rigs/kitti.yaml, 1242x375) with every camera's encoding set to ``encoding``."""
    from ..types import Rig

    rig = Rig.from_yaml(ROOT / "configs" / "rigs" / "kitti.yaml")
    return Rig(tuple(dataclasses.replace(c, encoding=encoding) for c in rig.cameras), name=f"kitti-{encoding}")


def synthetic_bgr(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A street-like synthetic picture: smooth gradients, coloured blocks with sharp edges, mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.stack([90 + 60 * np.sin(x / 57 + seed), 110 + 50 * np.cos(y / 31 - x / 97), 130 + 40 * np.sin((x + y) / 73)],
                   axis=-1)
    for _ in range(12):
        w, h = rng.integers(2, max(3, width // 6)), rng.integers(2, max(3, height // 4))
        x0, y0 = rng.integers(0, width - w), rng.integers(0, height - h)
        img[y0:y0 + h, x0:x0 + w] = rng.integers(0, 255, 3)
    img += rng.normal(0, 3, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode_jpeg(bgr: np.ndarray, quality: int = 90, progressive: bool = False, subsampling: int = 2) -> bytes:
    """JPEG bytes with Pillow (4:2:0 by default; ``progressive`` for the JPEGD-refused coding)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(bgr[..., ::-1])).save(buf, format="JPEG", quality=quality,
                                                                progressive=progressive, subsampling=subsampling)
    return buf.getvalue()


def h264_stream(frames: Iterable[np.ndarray], fmt: str = "h264", bframes: int = 0, gop: int = 5,
                codec: str = "libx264", fps: int = 10, pix_fmt: str = "yuv420p",
                options: Optional[dict] = None) -> bytes:
    """Encode BGR frames with PyAV: an Annex-B elementary stream (``fmt="h264"``/``"hevc"``) or a container
    (``"mp4"``, ``"matroska"``); ``pix_fmt`` the encoder's (``yuv444p``, ``yuv420p10le``...), ``options``
    more encoder options (``{"x264-params": "level=6.2"}``)."""
    import av

    frames = list(frames)
    h, w = frames[0].shape[:2]
    buf = io.BytesIO()
    out = av.open(buf, "w", format=fmt)
    s: Any = out.add_stream(codec, rate=fps)  # a VideoStream
    s.width, s.height, s.pix_fmt = w, h, pix_fmt
    s.options = {**({"bf": str(bframes), "g": str(gop)} if codec == "libx264" else {}), **(options or {})}
    for img in frames:
        for pkt in s.encode(av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format=pix_fmt)):
            out.mux(pkt)
    for pkt in s.encode():
        out.mux(pkt)
    out.close()
    return buf.getvalue()


def naive_nv12_planes(buf: np.ndarray, width: int, height: int, ws: int, hs: int) -> tuple[np.ndarray, np.ndarray]:
    """The planted stride bug: NV12 planes read as if the strides were the picture size."""
    flat = buf.reshape(-1)
    y = flat[:width * height].reshape(height, width)
    uv = flat[width * height:width * height * 3 // 2].reshape(height // 2, width // 2, 2)
    return y, uv


def sentinel_count(a: np.ndarray) -> int:
    """How many bytes of ``a`` hold the software device's padding sentinel."""
    from ..backends.dvpp.colour import SENTINEL

    return int(np.count_nonzero(np.asarray(a) == SENTINEL))


def video_packets(data: bytes, codec: str = "h264") -> list:
    """The frames a dvpipe video source emits for an Annex-B elementary stream: :class:`dvpipe.video.VideoPacket`
    objects in presentation order (matched by presentation index, with the source's look-ahead)."""
    from ..video import ELEMENTARY_LOOKAHEAD, AccessUnit, is_keyframe, presentation_packets
    from ..backends.dvpp.vdec import access_units

    _c, _p, _w, _h, aus = access_units(data, codec)
    return presentation_packets((AccessUnit(au, None, is_keyframe(au, codec)) for au, _pts in aus), "index",
                                ELEMENTARY_LOOKAHEAD)


def pyav_display_order(data: bytes, fmt: str = "h264") -> list:
    """FFmpeg's own decode of a stream (PyAV ``bgr24``), in display order: the independent reference."""
    import av

    with av.open(io.BytesIO(data), format=fmt) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]
