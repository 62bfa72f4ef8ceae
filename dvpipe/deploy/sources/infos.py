"""An mmdet3d / nuScenes info file (``*_infos_*.pkl``) as a camera source: frame sets come from the
file's samples, not from file names.

One source per camera, all reading one file (``source: {type: infos, uri: ...}`` as the
deployment's default source)::

    # a converter's output: the info file in <repository>/data/nuscenes/, its paths "./data/nuscenes/samples/..."
    source: {type: infos, uri: /work/BEVFormer/data/nuscenes/nuscenes_infos_temporal_val.pkl, data_root: /work/BEVFormer}
    cameras:
      - {name: FRONT, source: {type: infos, uri: ..., camera: CAM_FRONT}}   # a rig name of its own

* Camera ``camera`` (default: the rig camera's name) delivers, in the file's time order, the image
  of every sample that has it (``data_path`` / ``img_path``, relative to ``data_root``: the folder the
  converter ran in, which the stored paths are relative to; default the first of the info file's
  folder, its parents and the working directory under which the first image exists, see
  :mod:`dvpipe.mmdet3d`), captured at that image's own ``timestamp`` (v0.x: microseconds, v1.x:
  seconds; epoch ns here). The cameras of one sample fire within the file's *spread* (nuScenes:
  about 45 ms); with ``anchor: earliest``, ``sync.tolerance_ms`` from the spread to below the interval
  between samples' first images groups exactly the file's samples (:func:`sync_problem` says whether a
  tolerance does).
* Calibration: the info file is the authority, per sample (nuScenes' ``sensor2lidar`` includes the
  ego motion between a camera's and the lidar's capture, so it changes from sample to sample);
  ``metas_format="mmdet3d"`` with :func:`deployment_poses` as the pose source takes every sample's
  intrinsics, ``lidar2cam``, ego pose and ``can_bus`` from the file. A rig that gives a camera's
  calibration must agree with the file's first sample (:func:`calibration_problem`), else the
  source refuses to open: a rig without calibration (identity matrices) takes the file's.
* An image file larger than ``max_file_bytes`` (default ``decode.max_bytes``) is not read: a
  ``too_large`` drop, as in an image sequence.
* The file is read with a restricted unpickler (builtin and numpy types only, see
  :func:`dvpipe.mmdet3d.load_info_pickle`): unpickling an arbitrary file can run code. A ``.json``
  file with the same structure is read with :mod:`json`.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

import numpy as np

from ...errors import ConfigError
from ...types import Camera
from ...types import short_repr as _show
from ._probe import sniff_file
from .base import SourceError
from .images import StampedFiles
from .registry import SourceContext, option, register_source

__all__ = ["InfoSource", "InfoOptions", "InfoPoses", "deployment_poses", "calibration_problem", "sync_problem"]

#: a rig's intrinsics may differ from the info file's by this much (pixels) per entry
INTRINSICS_ATOL_PX = 1e-3
#: a rig's lidar2cam may differ from the info file's first sample by this rotation (degrees) and
#: translation (m): nuScenes' per-sample ego-motion compensation moves it by centimetres, a wrong
#: camera or another vehicle by far more
LIDAR2CAM_MAX_DEG = 1.0
LIDAR2CAM_MAX_M = 1.0


def _info(cfg: Any):
    from ...mmdet3d import open_info_file

    return open_info_file(cfg.uri, cfg.options.get("data_root"))


def calibration_problem(camera: Camera, info_camera: Mapping[str, Any], where: str = "") -> Optional[str]:
    """Why the rig camera's calibration disagrees with one info-file camera record, or None
    (also None when the rig gives none: identity intrinsics and lidar2cam)."""
    K, L = np.asarray(camera.intrinsics, float), np.asarray(camera.lidar2cam, float)
    if np.array_equal(K, np.eye(3)) and np.array_equal(L, np.eye(4)):
        return None
    Ki, Li = np.asarray(info_camera["intrinsics"], float), np.asarray(info_camera["lidar2cam"], float)
    dk = float(np.abs(K - Ki).max())
    if dk > INTRINSICS_ATOL_PX:
        return (f"rig camera {camera.name}'s intrinsics differ from the info file's{where} by up to {dk:.4g} px; "
                "fix the rig, or leave its intrinsics and lidar2cam out to take the info file's")
    cos = (np.trace(L[:3, :3].T @ Li[:3, :3]) - 1.0) / 2.0
    deg = math.degrees(math.acos(min(1.0, max(-1.0, cos))))
    dm = float(np.linalg.norm(L[:3, 3] - Li[:3, 3]))
    if deg > LIDAR2CAM_MAX_DEG or dm > LIDAR2CAM_MAX_M:
        return (f"rig camera {camera.name}'s lidar2cam differs from the info file's{where} by {deg:.3g} deg and "
                f"{dm:.3g} m (more than {LIDAR2CAM_MAX_DEG:g} deg / {LIDAR2CAM_MAX_M:g} m: another camera?); fix the "
                "rig or the source's camera:, or leave the rig's intrinsics and lidar2cam out to take the info file's")
    return None


def sync_problem(spread_ns: int, interval_ns: Optional[int], tolerance_ms: float,
                 anchor: str = "earliest") -> Optional[str]:
    """Why ``sync.tolerance_ms`` would not group an info file's samples exactly, or None.

    With ``anchor: earliest`` a set starts at a sample's first image and takes each camera's frame up to
    ``tol`` after it: every image of the sample needs ``tol >= spread``, and the next sample's first image
    must be outside (``tol < interval``, first image to first image). The tolerance in ns as the
    synchroniser rounds it. With an anchor camera the sets are timed otherwise: None (not checked)."""
    if anchor != "earliest":
        return None
    tol_ns = round(tolerance_ms * 1e6)
    if interval_ns is not None and spread_ns >= interval_ns:
        return (f"the info file's cameras fire up to {spread_ns / 1e6:g} ms apart within a sample, but samples "
                f"start as little as {interval_ns / 1e6:g} ms apart: no tolerance groups exactly its samples")
    if tol_ns < spread_ns:
        return (f"the info file's cameras fire up to {spread_ns / 1e6:g} ms apart within a sample; "
                f"sync.tolerance_ms {tolerance_ms:g} would split samples (set it to at least {math.ceil(spread_ns / 1e6)})")
    if interval_ns is not None and tol_ns >= interval_ns:
        return (f"sync.tolerance_ms {tolerance_ms:g} reaches the next sample (samples start as little as "
                f"{interval_ns / 1e6:g} ms apart); set it below {interval_ns / 1e6:g}")
    return None


@dataclass
class InfoOptions:
    """The keys of ``type: infos``."""

    data_root: Optional[str] = option(None, "the folder the file's image paths are relative to: for a converter's "
                                            "output, the folder it ran in (its paths start ./data/nuscenes/); default: "
                                            "the info file's folder or a parent of it, or the working directory, "
                                            "where the first image is", path="dir")
    camera: Optional[str] = option(None, "the file's camera key (default: the rig camera's name)", camera=True)
    max_file_bytes: Optional[int] = option(None, "largest image file read, in bytes (default: decode.max_bytes); "
                                                 "a larger one is a too_large drop", minimum=1, maximum=1 << 40)


@register_source("infos")
class InfoSource(StampedFiles):
    """An mmdet3d / nuScenes info file: each sample a frame set, each image at its own ``timestamp`` in the
    file, calibration and ego pose per sample."""

    Options = InfoOptions
    uri_help = "an mmdet3d info file, .pkl or .json (required)"
    read_hint = " (is data_root right?)"

    @classmethod
    def validate(cls, options: InfoOptions, ctx: SourceContext) -> InfoOptions:
        ctx.require_file("an mmdet3d info file (*_infos_*.pkl, or the same structure as .json)")
        key = options.camera or ctx.camera
        if ctx.encoding not in ("jpeg", "png"):
            ctx.err(None, f"an info file's images need camera encoding jpeg or png; camera {ctx.camera} declares "
                          f"{ctx.encoding}")
        root_ok = options.data_root is None or os.path.isdir(options.data_root)  # else reported at data_root
        if ctx.uri is not None and ctx.ok and root_ok:
            from ...mmdet3d import open_info_file

            try:
                info = open_info_file(ctx.uri, options.data_root)
            except ConfigError as e:
                ctx.err("uri", str(e))
            else:
                first = next((smp["cameras"][key] for smp in info.samples if key in smp["cameras"]), None)
                named = "camera" in ctx.given
                if first is None:
                    ctx.err("camera" if named else None,
                            f"camera {key} is not in the info file {ctx.uri} ({', '.join(info.samples[0]['cameras'])})"
                            + ("" if named else "; name the file's camera with camera:"))
                elif not os.path.isfile(first["path"]):
                    ctx.err("data_root", f"the info file's first {key} image is not there: {_show(first['path'], 300)} "
                                         "(set data_root to the folder its paths are relative to: for a converter's "
                                         "output, the folder the converter ran in)")
                elif ctx.probe and ctx.encoding in ("jpeg", "png"):
                    sniff_file(first["path"], ctx)
        return replace(options, camera=key, max_file_bytes=options.max_file_bytes or ctx.max_bytes or None)

    @classmethod
    def validate_cameras(cls, cameras, ctx) -> None:
        """The first sample's calibration against the rig (:func:`calibration_problem`, a problem at the
        rig) and each file's camera spread against ``sync.tolerance_ms`` (:func:`sync_problem`, a warning)."""
        from ...mmdet3d import open_info_file

        by_file: dict[tuple, list[str]] = {}
        for c in cameras:
            key = c.source.options.get("camera") or c.name
            by_file.setdefault((c.source.uri, c.source.options.get("data_root")), []).append(key)
            info = open_info_file(c.source.uri, c.source.options.get("data_root"))
            first = next(s["cameras"][key] for s in info.samples if key in s["cameras"])
            problem = calibration_problem(ctx.rig[c.name], first, f" ({key}, first sample)")
            if problem:
                ctx.err(ctx.rig_key, problem)
        for (uri, root), keys in by_file.items():
            problem = sync_problem(*open_info_file(uri, root).camera_spread_ns(keys), ctx.sync.tolerance_ms,
                                   ctx.sync.anchor)
            if problem:
                ctx.warn(f"sync.tolerance_ms: {problem}")

    def _open(self) -> None:
        try:
            info = _info(self.cfg)
        except ConfigError as e:
            raise SourceError(str(e)) from None
        key = self.options.get("camera") or self.camera.name
        frames = [(smp["cameras"][key]["timestamp_ns"], smp["cameras"][key]["path"])
                  for smp in info.samples if key in smp["cameras"]]
        if not frames:
            raise SourceError(f"{self.cfg.uri}: no sample has camera {key} "
                              f"(the file's cameras: {', '.join(info.samples[0]['cameras'])})")
        first = next(smp["cameras"][key] for smp in info.samples if key in smp["cameras"])
        problem = calibration_problem(self.camera, first, f" ({key}, first sample)")
        if problem:
            raise SourceError(problem)
        self._files = frames
        self._next = 0


class InfoPoses:
    """The pose source of :class:`~dvpipe.mmdet3d.Mmdet3dMetas` for a deployment reading an info
    file: per frame set, its sample's ego pose, ``can_bus``, scene and token, and each rig camera's
    calibration and file name (rig names mapped to the file's camera keys). Picklable (DataLoader
    workers): it holds the file's path and reloads it through the per-process cache."""

    def __init__(self, uri: str, data_root: Optional[str], cameras: Mapping[str, str]):
        self.uri, self.data_root, self.cameras = uri, data_root, dict(cameras)

    def __call__(self, timestamp_ns: Optional[int], seq: Optional[int] = None) -> dict:
        from ...mmdet3d import open_info_file

        return open_info_file(self.uri, self.data_root).pose(timestamp_ns, seq, self.cameras)


def deployment_poses(dep: Any) -> Optional[InfoPoses]:
    """The :class:`InfoPoses` of a deployment whose cameras all read one info file, else None.

    Raises:
        ConfigError: the cameras read different info files (one pose per frame set needs one file).
    """
    srcs = [(c.name, c.source) for c in dep.cameras if c.source.type == "infos"]
    if not srcs:
        return None
    files = {(s.uri, s.options.get("data_root")) for _n, s in srcs}
    if len(files) > 1 or len(srcs) != len(dep.cameras):
        raise ConfigError("the deployment's cameras read different sources; an info-file pose source needs every "
                          "camera on one info file (type: infos, one uri)")
    (uri, root), = files
    return InfoPoses(uri, root, {n: s.options.get("camera") or n for n, s in srcs})

