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


def _check_fps(v: object, key: str, path: str) -> float:
    """``v`` as a frame rate, as the deployment loader and ``--fps`` take it (a finite number, 0 < v <= 10000),
    else a :class:`~dvpipe.errors.ConfigError` naming the file and ``key``."""
    from ..deploy._validate import MAX_FPS, _number_problem
    from ..errors import ConfigError

    problem = _number_problem(v, minimum=0, exclusive_min=True, maximum=MAX_FPS)
    if problem is not None:
        raise ConfigError(f"{problem} (frames per second, 0 < fps <= {MAX_FPS:g})", f"{path}: {key}")
    return float(v)  # type: ignore[arg-type]


def _check_source_rates(data: dict, path: str) -> None:
    """Every ``fps`` a source of the deployment states (``source.fps``, ``cameras[i].source.fps``) is a frame rate."""
    src = data.get("source")
    if isinstance(src, dict) and src.get("fps") is not None:
        _check_fps(src["fps"], "source.fps", path)
    cams = data.get("cameras")
    for i, cam in enumerate(cams if isinstance(cams, list) else []):
        csrc = cam.get("source") if isinstance(cam, dict) else None
        if isinstance(csrc, dict) and csrc.get("fps") is not None:
            _check_fps(csrc["fps"], f"cameras[{i}].source.fps", path)


def _image_timestamps(src: dict) -> str:
    """Where an image sequence's capture times come from, by the deployment loader's rule
    (``dvpipe/deploy/sources/images.py``, ``ImageSequence.validate``): ``timestamps:`` if given, else
    ``sidecar`` when a ``sidecar:`` key is given, ``fps`` when an ``fps:`` key is given, else ``filename``."""
    return str(src.get("timestamps") or ("sidecar" if "sidecar" in src else "fps" if "fps" in src else "filename"))


#: the frame rate of ``timestamps: fps`` without ``fps:`` (``ImageOptions.fps``'s default in the loader)
IMAGES_DEFAULT_FPS = 10.0


def _median_rate(times: list[int]) -> Optional[float]:
    """Frames per second of the median interval of capture times (ns), or None without two distinct times."""
    import statistics

    times = sorted(times)
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    return 1e9 / statistics.median(gaps) if gaps else None


def _loader_rate(path: str) -> tuple[Optional[float], str]:
    """The rate of the capture times the deployment loader gives the first camera's image sequence (file
    names or a sidecar, with every rule of ``dvpipe/deploy/sources/images.py``): the median interval.
    ``(None, why)`` when the deployment or its images cannot be read here."""
    from ..deploy import load_deployment
    from ..deploy.sources import open_source
    from ..errors import DvpipeError

    try:
        dep = load_deployment(path)
        cam = dep.cameras[0]
        src = open_source(dep.rig[cam.name], cam.source)
        src.open()
        try:
            times = [t for t, _path in src.stamped_files()]  # type: ignore[attr-defined]  # an image sequence
        finally:
            src.close()
    except (DvpipeError, OSError) as e:
        return None, f"the image sequence's capture times cannot be read here ({str(e).splitlines()[0][:200]})"
    rate = _median_rate(times)
    if rate is None:
        return None, f"{cam.name}'s capture times give no interval"
    how = "sidecar" if cam.source.options.get("timestamps") == "sidecar" else "file names"
    return rate, f"capture times of {cam.name}'s frames ({how}; median interval)"


def rate_from_deployment(path: str) -> tuple[Optional[float], str]:
    """The cameras' frame rate a deployment states through its default ``source``, with the loader's rules for an
    image sequence (:func:`_image_timestamps`): ``timestamps: fps`` its ``fps`` (default 10), ``sidecar`` and
    ``filename`` the median interval of the first camera's capture times as the loader reads them; any other
    source its ``fps``. ``(None, why)`` when it states none. A ``fps`` that is not a frame rate (``source.fps``,
    ``cameras[i].source.fps``) is a :class:`~dvpipe.errors.ConfigError`, as in the loader."""
    from ..types import read_yaml

    data = read_yaml(path)
    if isinstance(data, dict):
        _check_source_rates(data, path)
    src = data.get("source") if isinstance(data, dict) else None
    if not isinstance(src, dict):
        return None, "the deployment has no source"
    if src.get("type") != "images":
        if src.get("fps") is not None:
            return float(src["fps"]), "source.fps"
        return None, "the source states no frame rate"
    mode = _image_timestamps(src)
    if mode == "fps":
        if src.get("fps") is not None:
            return float(src["fps"]), "source.fps"
        return IMAGES_DEFAULT_FPS, f"timestamps: fps without fps: (the image source's default, {IMAGES_DEFAULT_FPS:g})"
    if mode in ("sidecar", "filename"):
        return _loader_rate(path)
    return None, "the source states no frame rate"
