"""Helpers for testing deployments: tiny rigs, synthetic deployments, H.264/H.265 test streams.

Used by dvpipe's own tests and the soak tool; handy for testing your deployment's policies::

    from dvpipe.testing.deployments import synthetic_deployment
    dep = load_deployment(synthetic_deployment(cameras=3, faults={"CAM1": {"corrupt": [2]}}))
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["tiny_rig", "synthetic_deployment", "encode_access_units", "test_pattern"]


def tiny_rig(cameras: int | Sequence[str] = 3, width: int = 96, height: int = 64, encoding: str = "jpeg") -> dict:
    """A rig mapping: cameras on a ring, looking outwards, 1.5 m up, plausible intrinsics."""
    names = [f"CAM{k}" for k in range(cameras)] if isinstance(cameras, int) else list(cameras)
    out = []
    for k, name in enumerate(names):
        yaw = 2 * np.pi * k / max(1, len(names))
        base = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]], dtype=float)  # lidar -> camera axes
        c, s = np.cos(yaw), np.sin(yaw)
        rz = np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]])
        T = np.eye(4)
        T[:3, :3] = base @ rz
        T[:3, 3] = T[:3, :3] @ np.array([0.0, 0.0, -1.5])
        f = 0.8 * width
        out.append({"name": name, "width": width, "height": height, "encoding": encoding,
                    "intrinsics": [[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]], "lidar2cam": T.tolist()})
    return {"name": "tiny", "cameras": out}


def synthetic_deployment(cameras: int | Sequence[str] = 3, *, width: int = 96, height: int = 64,
                         encoding: str = "jpeg", fps: float = 30.0, realtime: bool = False,
                         frames: Optional[int] = 12, cycle: int = 8, faults: Optional[dict] = None,
                         sync: Optional[dict] = None, run: Optional[dict] = None, outputs: Any = None,
                         model: Any = None, backends: Any = ("cpu",), **extra) -> dict:
    """A deployment mapping for :func:`~dvpipe.deploy.load_deployment`: synthetic cameras, a small
    normalise + pad pipeline, no outputs written unless ``outputs`` is given.

    ``faults`` maps camera name -> a faults mapping (see :class:`~dvpipe.deploy.config.Faults`).
    """
    rig = tiny_rig(cameras, width, height, encoding)
    src = {"type": "synthetic", "fps": fps, "realtime": realtime, "cycle": cycle}
    if frames is not None:
        src["frames"] = frames
    cams = []
    for c in rig["cameras"]:
        entry: dict[str, Any] = {"name": c["name"]}
        if faults and c["name"] in faults:
            entry["source"] = dict(src, faults=faults[c["name"]])
        cams.append(entry)
    dep = {
        "name": "test-synthetic",
        "rig": rig,
        "pipeline": {"stages": ["decode", {"normalise": {"mean": [128, 128, 128], "std": [64, 64, 64]}},
                                {"pad": {"size_divisor": 32}}],
                     "backends": list(backends) if not isinstance(backends, str) else backends},
        "source": src,
        "cameras": cams,
        "sync": dict({"tolerance_ms": 0.4 * 1000 / fps}, **(sync or {})),
        "run": dict(run or {}),
        "outputs": outputs if outputs is not None else {"metrics": False},
    }
    if model is not None:
        dep["model"] = model
    dep.update(extra)
    return dep


def test_pattern(k: int, width: int, height: int) -> np.ndarray:
    """A BGR image that changes with ``k`` (a moving bar over a gradient)."""
    y, x = np.mgrid[0:height, 0:width]
    img = np.stack([(x * 255 // max(1, width - 1)), (y * 255 // max(1, height - 1)),
                    np.full_like(x, (k * 37) % 256)], -1).astype(np.uint8)
    bar = (k * 5) % max(1, width - 8)
    img[:, bar:bar + 8] = 255
    return img


setattr(test_pattern, "__test__", False)  # not a pytest test despite the name


def encode_access_units(n: int, width: int = 96, height: int = 64, codec: str = "h264", gop: int = 8,
                        images: Optional[Sequence[np.ndarray]] = None) -> list[bytes]:
    """``n`` Annex B access units (no B-frames, parameter sets before every keyframe, an IDR every
    ``gop`` pictures) of :func:`test_pattern` images, or of ``images``."""
    import av

    from ..video import camera_encoder

    cc = camera_encoder(codec, width, height, gop)
    out: list[bytes] = []
    for k in range(n):
        img = images[k] if images is not None else test_pattern(k, width, height)
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="bgr24")
        frame.pts = k
        out.extend(bytes(p) for p in cc.encode(frame))
    out.extend(bytes(p) for p in cc.encode(None))
    return out
