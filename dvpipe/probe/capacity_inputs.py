"""What ``dvpipe probe --capacity`` reads from a deployment besides its plan: the cameras' frame rate
(:func:`rate_from_deployment`) and each camera's first frame (:func:`first_frames`, for timing the CPU path)."""
from __future__ import annotations

from typing import Optional

__all__ = ["rate_from_deployment", "first_frames"]



def _image_folders(path: str) -> tuple[dict, dict[str, list[str]]]:
    """``(source mapping, camera -> its image files sorted by name)`` of an image-sequence deployment whose
    ``source.uri`` names each camera's folder (``frames/{camera}``); empty when it has none."""
    import os

    from ..deploy.sources.images import scan_images
    from ..types import Rig, read_yaml

    data = read_yaml(path)
    src = data.get("source") if isinstance(data, dict) else None
    if not isinstance(src, dict) or src.get("type") != "images" or "{camera}" not in str(src.get("uri") or ""):
        return (src if isinstance(src, dict) else {}), {}
    base = os.path.dirname(os.path.abspath(path))
    try:
        rig = Rig.from_yaml(os.path.join(base, str(data.get("rig"))))
    except Exception:  # noqa: BLE001 - no folders, said by the callers
        return src, {}
    out = {}
    for cam in rig.cameras:
        folder = str(src["uri"]).replace("{camera}", cam.name)
        try:
            out[cam.name] = sorted(scan_images(folder if os.path.isabs(folder) else os.path.join(base, folder),
                                               src.get("pattern")))
        except Exception:  # noqa: BLE001 - a camera without readable files is simply left out
            continue
    return src, out


def first_frames(path: str) -> dict[str, bytes]:
    """Camera -> the bytes of its first image, for an image-sequence deployment (else empty)."""
    _src, files = _image_folders(path)
    out = {}
    for cam, fs in files.items():
        if fs:
            with open(fs[0], "rb") as f:
                out[cam] = f.read()
    return out


def rate_from_deployment(path: str) -> tuple[Optional[float], str]:
    """The cameras' frame rate a deployment states: ``source.fps``, else (an image sequence named by capture
    times) the median interval of the first camera's file names. ``(None, why)`` when it states none."""
    import re
    import statistics
    from pathlib import Path

    from ..types import read_yaml

    data = read_yaml(path)
    src = data.get("source") if isinstance(data, dict) else None
    if not isinstance(src, dict):
        return None, "the deployment has no source"
    if src.get("fps"):
        return float(src["fps"]), "source.fps"
    if src.get("timestamps", "filename") != "filename":
        return None, "the source states no frame rate"
    from ..deploy.sources.images import _to_ns

    _src, files = _image_folders(path)
    if not files:
        return None, "the source states no frame rate"
    first = next(iter(files))
    times = sorted(_to_ns(re.findall(r"\d+", Path(f).stem)[-1], str(src.get("unit", "auto")))
                   for f in files[first] if re.findall(r"\d+", Path(f).stem))
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    if not gaps:
        return None, "the source's file names give no capture interval"
    return 1e9 / statistics.median(gaps), f"capture times of {first}'s files (median interval)"
