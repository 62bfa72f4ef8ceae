"""What ``dvpipe probe --capacity`` reads from a deployment besides its plan: each camera's frame rate
(:func:`rates_from_deployment`) and each camera's first frame (:func:`first_frames`, for timing the CPU path)."""
from __future__ import annotations

from typing import Optional, Sequence

__all__ = ["rates_from_deployment", "first_frames"]



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


def _loader_rate(path: str, camera: str, loaded: dict) -> tuple[Optional[float], str]:
    """The rate of the capture times the deployment loader gives ``camera``'s image sequence (file names or a
    sidecar, with every rule of ``dvpipe/deploy/sources/images.py``): the median interval. ``loaded`` caches the
    loaded deployment between cameras. ``(None, why)`` when the deployment or its images cannot be read here."""
    from ..deploy import load_deployment
    from ..deploy.sources import open_source
    from ..errors import DvpipeError

    try:
        if "dep" not in loaded:
            loaded["dep"] = load_deployment(path)
        dep = loaded["dep"]
        cam = next(c for c in dep.cameras if c.name == camera)
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
        return None, f"{camera}'s capture times give no interval"
    how = "sidecar" if cam.source.options.get("timestamps") == "sidecar" else "file names"
    return rate, f"capture times of the frames ({how}; median interval)"


def _rate_of(src: object, key: str, path: str, camera: str, loaded: dict) -> tuple[Optional[float], str]:
    """The frame rate the source mapping ``src`` (YAML key ``key``) states for ``camera``, by the loader's rules."""
    if not isinstance(src, dict):
        return None, "the deployment has no source"
    if src.get("type") != "images":
        if src.get("fps") is not None:
            return float(src["fps"]), f"{key}.fps"
        return None, f"{key} states no frame rate"
    mode = _image_timestamps(src)
    if mode == "fps":
        if src.get("fps") is not None:
            return float(src["fps"]), f"{key}.fps"
        return IMAGES_DEFAULT_FPS, f"timestamps: fps without fps: (the image source's default, {IMAGES_DEFAULT_FPS:g})"
    if mode in ("sidecar", "filename"):
        return _loader_rate(path, camera, loaded)
    return None, f"{key} states no frame rate"


def rates_from_deployment(path: str, cameras: Sequence[str]) -> tuple[dict[str, Optional[float]], str]:
    """Each camera's frame rate as the deployment states it: through ``cameras[i].source`` where the camera has
    its own source (it replaces the default, as in the loader), else through the default ``source``. An image
    sequence follows the loader's rules (:func:`_image_timestamps`): ``timestamps: fps`` its ``fps`` (default 10),
    ``sidecar`` and ``filename`` the median interval of that camera's capture times as the loader reads them; any
    other source its ``fps``. Returns ``(camera -> rate or None, how)``, ``how`` the distinct reasons joined by
    "; ". A ``fps`` that is not a frame rate (``source.fps``, ``cameras[i].source.fps``) is a
    :class:`~dvpipe.errors.ConfigError`, as in the loader."""
    from ..types import read_yaml

    data = read_yaml(path)
    data = data if isinstance(data, dict) else {}
    _check_source_rates(data, path)
    own: dict[str, tuple[object, str]] = {}
    listed = data.get("cameras")
    for i, cam in enumerate(listed if isinstance(listed, list) else []):
        if isinstance(cam, dict) and "source" in cam and isinstance(cam.get("name"), str):
            own[cam["name"]] = (cam["source"], f"cameras[{i}].source")
    loaded: dict = {}
    rates: dict[str, Optional[float]] = {}
    hows: list[str] = []
    for name in cameras:
        src, key = own.get(name, (data.get("source"), "source"))
        rates[name], how = _rate_of(src, key, path, name, loaded)
        if how not in hows:
            hows.append(how)
    return rates, "; ".join(hows)
