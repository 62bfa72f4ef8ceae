"""``img_metas`` in mmdet3d's layout: one dict per sample holding per-camera lists.

:class:`Mmdet3dMetas` turns a :class:`~dvpipe.FrameBatch` (per-camera meta dicts) into what a detector's
``forward_test(img_metas=[[meta]], img=[img])`` reads, including BEVFormer's temporal keys:

* ``can_bus`` (18 floats) as BEVFormer's ``CustomNuScenesDataset.get_data_info`` builds it:
  ``[0:3]`` ego-to-global translation (m), ``[3:7]`` the ego-to-global rotation: ``[w, w, w, w]``
  with ``can_bus_rotation="published"`` (what the published code writes and every released BEVFormer
  checkpoint was trained with: it assigns a pyquaternion ``Quaternion`` to the slice and numpy stores
  ``float(q)``, the scalar part w, four times; fundamentalvision/BEVFormer PR #285), the quaternion
  ``(w, x, y, z)`` with ``quaternion``; ``[7:10]`` acceleration, ``[10:13]`` rotation rate, ``[13:16]`` velocity (from
  the CAN bus when the pose source has them, else 0), ``[16]`` yaw in radians in ``[0, 2*pi)``,
  ``[17]`` the same yaw in degrees. With ``can_bus="delta"`` the translation and the degree yaw
  are replaced by their change since the previous sample of the same scene (0 on a scene's
  first sample), as ``BEVFormer.forward_test`` does before ``simple_test``; use ``absolute``
  (the default) when the detector's own ``forward_test`` runs, since it takes the deltas itself.
* camera order: with an info file as the pose source, the batch's cameras must be in the file's
  order (``info['cams']``, what mmdet3d's, BEVFormer's and PETR's datasets feed), else
  :class:`~dvpipe.ConfigError` naming both orders; BEVDet's batches follow ``data_config['cams']``.
* ``scene_token`` and ``prev_bev_exists``: from the pose source, or a new token whenever the
  capture time jumps by more than ``scene_gap_s`` (a stream gap resets the temporal state).
* ``timestamp`` (seconds, sample), ``img_timestamp`` (seconds, per camera), ``filename`` (an
  info file's stored path, as the dataset passes it on), ``sample_idx``, ``prev_idx`` / ``next_idx`` /
  ``pts_filename`` (when the pose source has them: an info file's ``prev``, ``next``, ``lidar_path``),
  ``box_type_3d`` (mmdet3d's ``LiDARInstance3DBoxes`` when mmdet3d is installed,
  else the string ``"LiDAR"``), ``box_mode_3d``, ``flip``, ``pcd_horizontal_flip``,
  ``pcd_vertical_flip`` (False: ``MultiScaleFlipAug3D(flip=False)``), ``pcd_scale_factor``.

Every array is a fresh writeable copy (DataLoader collation copies without warnings).
"""
from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ..errors import ConfigError
from ..profiles import CAN_BUS_ROTATIONS

__all__ = ["Mmdet3dMetas", "JsonPoses", "PoseFn", "can_bus_from_pose", "yaw_from_quaternion"]

#: a pose source: ``pose(timestamp_ns, seq) -> record``, the record as :func:`can_bus_from_pose` reads it (plus
#: optional ``scene_token`` / ``token`` / ``camera_order``); ``timestamp_ns`` (capture time, epoch ns) and ``seq``
#: are None when the batch carries none. :class:`JsonPoses` and :class:`~dvpipe.mmdet3d.InfoFile` are ones.
PoseFn = Callable[[Optional[int], Optional[int]], Mapping[str, object]]

#: per-camera keys of dvpipe's metas that become per-camera lists in the sample dict
_PER_CAMERA = ("lidar2img", "lidar2cam", "cam2img", "intrinsics", "img_shape", "ori_shape", "pad_shape", "img_aug",
               "post_rot", "post_tran")


def yaw_from_quaternion(q: "Sequence[float] | np.ndarray") -> float:
    """Yaw (radians, ``(-pi, pi]``) of a ``(w, x, y, z)`` rotation: the heading of its x axis."""
    w, x, y, z = (float(v) for v in q)
    n = math.sqrt(w * w + x * x + y * y + z * z)
    w, x, y, z = w / n, x / n, y / n, z / n
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def can_bus_from_pose(pose: Mapping[str, object], rotation: str = "quaternion") -> np.ndarray:
    """The absolute 18-value ``can_bus`` of one sample from a pose record (see the module docstring).

    Args:
        pose: ``translation`` (3, m), ``rotation`` (``w, x, y, z``), optional ``accel``,
            ``rotation_rate``, ``vel`` (3 each), or a full ``can_bus`` (18) to start from.
        rotation: ``quaternion`` (``[3:7] = w, x, y, z``) or ``published`` (``[3:7] = w, w, w, w``,
            BEVFormer's ``get_data_info``; :data:`dvpipe.profiles.CAN_BUS_ROTATIONS`).
    """
    if rotation not in CAN_BUS_ROTATIONS:
        raise ConfigError(f"can_bus_rotation must be one of {', '.join(CAN_BUS_ROTATIONS)}, got {rotation!r}")
    can = np.zeros(18, dtype=np.float64)
    if pose.get("can_bus") is not None:
        can[:] = np.asarray(pose["can_bus"], dtype=np.float64).reshape(18)
    for key, sl in (("accel", slice(7, 10)), ("rotation_rate", slice(10, 13)), ("vel", slice(13, 16))):
        if pose.get(key) is not None:
            can[sl] = np.asarray(pose[key], dtype=np.float64).reshape(3)
    can[:3] = np.asarray(pose["translation"], dtype=np.float64).reshape(3)
    q = np.asarray(pose["rotation"], dtype=np.float64).reshape(4)
    can[3:7] = q if rotation == "quaternion" else q[0]
    angle = yaw_from_quaternion(q) / np.pi * 180
    if angle < 0:
        angle += 360
    can[-2] = angle / 180 * np.pi
    can[-1] = angle
    return can


class JsonPoses:
    """A pose source from a nuScenes-style ``ego_pose.json``: a list of records with ``timestamp``
    (microseconds), ``translation`` and ``rotation`` (``w, x, y, z``), optionally ``scene_token``,
    ``token``, ``accel``/``rotation_rate``/``vel`` or ``can_bus``. The record nearest to the sample's
    capture time is used, if it is within ``tolerance_ms``.
    """

    def __init__(self, path: "str | os.PathLike[str]", tolerance_ms: float = 50.0):
        try:
            records = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read poses {path}: {e}") from None
        if not isinstance(records, list) or not records:
            raise ConfigError(f"{path}: expected a non-empty list of ego pose records")
        try:
            self._t_us = np.array([float(r["timestamp"]) for r in records])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{path}: every pose record needs a numeric 'timestamp' (microseconds)") from None
        order = np.argsort(self._t_us, kind="stable")
        self._t_us = self._t_us[order]
        self._records = [records[i] for i in order]
        self.path = str(path)
        self.tolerance_ms = float(tolerance_ms)

    def __call__(self, timestamp_ns: Optional[int], seq: Optional[int] = None) -> Mapping[str, Any]:
        if timestamp_ns is None:
            raise ConfigError("JsonPoses needs capture times (frames as dvpipe.Frame with capture_epoch_ns)")
        t_us = timestamp_ns / 1e3
        i = int(np.searchsorted(self._t_us, t_us))
        best = min((j for j in (i - 1, i) if 0 <= j < len(self._t_us)), key=lambda j: abs(self._t_us[j] - t_us))
        if abs(self._t_us[best] - t_us) > self.tolerance_ms * 1e3:
            raise ConfigError(f"{self.path}: no ego pose within {self.tolerance_ms} ms of {t_us:.0f} us")
        return self._records[best]


class Mmdet3dMetas:
    """Builds mmdet3d-layout inputs from dvpipe batches, one sample at a time (it keeps the
    previous sample's pose for the temporal keys, so use one instance per stream).

    Args:
        pose: ``pose(timestamp_ns, seq) -> record`` (a :class:`JsonPoses` or any callable; the record
            as :func:`can_bus_from_pose` takes it, plus optional ``scene_token`` / ``token``), or None
            (identity pose, zero can_bus motion).
        can_bus: ``absolute`` (what ``forward_test`` reads) or ``delta`` (what ``simple_test`` reads).
        can_bus_rotation: what ``can_bus[3:7]`` holds, ``published`` (``[w, w, w, w]``) or ``quaternion``
            (:data:`dvpipe.profiles.CAN_BUS_ROTATIONS`); None: the profile's (the per-camera metas'
            ``can_bus_rotation``: ``published`` for the BEVFormer profiles), else ``quaternion``.
        scene_gap_s: a capture-time jump above this starts a new scene when the pose source gives no
            ``scene_token``.
        extra: constant keys added to every sample (``img_norm_cfg`` is added from the batch).
    """

    def __init__(self, pose: Optional[PoseFn] = None, *, can_bus: str = "absolute", scene_gap_s: float = 1.0,
                 extra: Optional[Mapping[str, object]] = None, can_bus_rotation: Optional[str] = None):
        if can_bus not in ("absolute", "delta"):
            raise ConfigError(f"can_bus must be 'absolute' or 'delta', got {can_bus!r}")
        if can_bus_rotation not in (None, *CAN_BUS_ROTATIONS):
            raise ConfigError(f"can_bus_rotation must be one of {', '.join(CAN_BUS_ROTATIONS)}, got {can_bus_rotation!r}")
        self.can_bus_rotation = can_bus_rotation
        self.pose = pose
        self.can_bus = can_bus
        self.scene_gap_s = float(scene_gap_s)
        self.extra = dict(extra or {})
        self._prev: Optional[tuple[str, Optional[int], np.ndarray]] = None  # scene, t_ns, absolute can_bus
        self._scenes = 0

    def __call__(self, batch) -> tuple[Any, dict]:
        """``(img, meta)`` for a batch in dvpipe's per-camera format: ``img`` is ``batch.img``
        (``(1, N, 3, H, W)``, a view: call ``batch.keep()`` first to hold it), ``meta`` the sample
        dict (``img_metas = [[meta]]`` for ``forward_test``)."""
        return batch.img, self.sample(batch.metas, batch.cameras, batch.valid)

    def sample(self, per_cam: Sequence[Mapping], cameras: Sequence[str], valid) -> dict:
        """The sample dict from per-camera metas (as ``Pipeline`` builds them), in batch order."""
        stamps = [m.get("capture_epoch_ns") for m in per_cam]
        t_ns = next((t for t in stamps if t is not None), None)
        seq = next((m.get("seq") for m in per_cam if m.get("seq") is not None), None)
        record: Mapping[str, Any] = (self.pose(t_ns, seq) if self.pose is not None
                                     else {"translation": (0, 0, 0), "rotation": (1, 0, 0, 0)})
        order = record.get("camera_order")
        if order and not any("post_rot" in m for m in per_cam):
            _check_order(order, cameras)
        rotation = self.can_bus_rotation or next(
            (m["can_bus_rotation"] for m in per_cam if m.get("can_bus_rotation")), "quaternion")
        can_abs = can_bus_from_pose(record, rotation)
        scene = record.get("scene_token")
        if scene is None:
            gap = (self._prev is not None and t_ns is not None and self._prev[1] is not None
                   and abs(t_ns - self._prev[1]) > self.scene_gap_s * 1e9)
            if self._prev is None or gap:
                self._scenes += 1
            scene = f"dvpipe-scene-{self._scenes}"
        prev_exists = self._prev is not None and self._prev[0] == scene
        can = can_abs.copy()
        if self.can_bus == "delta":
            if prev_exists:
                assert self._prev is not None  # prev_exists says so
                can[:3] -= self._prev[2][:3]
                can[-1] -= self._prev[2][-1]
            else:
                can[:3] = 0
                can[-1] = 0
        self._prev = (scene, t_ns, can_abs)
        meta: dict = {k: _copy(v) for k, v in self.extra.items()}
        for key in _PER_CAMERA:
            if per_cam and all(key in m for m in per_cam):
                meta[key] = [_copy(m[key]) for m in per_cam]
        shapes: list[Any] = [m.get("input_shape") for m in per_cam]
        if per_cam and all(sh is not None for sh in shapes) and len(set(map(tuple, shapes))) == 1:
            # PETR / PETRv2 (the profile sets input_shape): mmdet3d's LoadMultiViewImageFromFiles stacks the
            # views on a last axis and sets ori_shape = that array's shape, (H, W, 3, N), and no later PETR
            # transform changes it (BEVFormer's PadMultiViewImage rewrites it per camera)
            meta["ori_shape"] = (*tuple(shapes[0]), len(per_cam))
        calib = record.get("cameras")
        if calib:  # this sample's own calibration (an info file's), through the plan's image transform
            _recalibrate(meta, per_cam, cameras, calib)
        first = per_cam[0] if per_cam else {}
        if "img_norm_cfg" in first:
            meta["img_norm_cfg"] = _copy(first["img_norm_cfg"])
        if "scale_factor" in first:
            meta["scale_factor"] = first["scale_factor"]
        for key, rkey in (("prev_idx", "prev"), ("next_idx", "next"), ("pts_filename", "lidar_path")):
            if record.get(rkey) is not None:
                meta[key] = record[rkey]
        meta.update(
            filename=[(calib or {}).get(c, {}).get("filename", m.get("filename", c)) for c, m in zip(cameras, per_cam)],
            cameras=list(cameras),
            valid=np.array(valid, dtype=bool),
            scene_token=scene,
            sample_idx=record.get("token", seq),
            prev_bev_exists=prev_exists,
            can_bus=can,
            timestamp=None if t_ns is None else t_ns / 1e9,
            img_timestamp=[None if t is None else t / 1e9 for t in stamps],
            ego2global_translation=np.array(can_abs[:3]),
            ego2global_rotation=np.asarray(record["rotation"], dtype=np.float64).reshape(4).copy(),
            flip=False,
            pcd_horizontal_flip=False,
            pcd_vertical_flip=False,
            pcd_scale_factor=1.0,
            box_mode_3d=_box_mode_3d(),
            box_type_3d=_box_type_3d(),
        )
        return meta


def _check_order(order: Sequence[str], cameras: Sequence[str]) -> None:
    """Refuse a batch whose cameras are not in the info file's order: mmdet3d's datasets (BEVFormer's,
    PETR's, mmdet3d's own) feed ``info['cams']`` in the file's order, and BEVFormer's learnt camera
    embeddings are per position. (BEVDet reads its config's ``data_config['cams']`` order instead,
    which :func:`~dvpipe.mmdet3d.order_rig` / :func:`~dvpipe.mmdet3d.check_rig` see to.)"""
    want = [c for c in order if c in cameras]
    if want != list(cameras):
        raise ConfigError(f"the info file feeds the cameras as {', '.join(want)}; the batch has them as "
                          f"{', '.join(cameras)} (list the rig's cameras in the file's order, as mmdet3d's datasets "
                          "feed them)")


def _recalibrate(meta: dict, per_cam: Sequence[Mapping], cameras: Sequence[str], calib: Mapping) -> None:
    from .. import geometry

    l2i, l2c, c2i = [], [], []
    for name, m in zip(cameras, per_cam):
        c = calib.get(name)
        if c is None:  # this sample has no image of the camera (masked): the rig's calibration stays
            l2i.append(np.array(m.get("lidar2img", np.eye(4)), dtype=np.float64))
            l2c.append(np.array(m.get("lidar2cam", np.eye(4)), dtype=np.float64))
            c2i.append(np.array(m.get("cam2img", np.eye(4)), dtype=np.float64))
            continue
        # the image's camera matrix: the sample's K, or K' when the plan undistorted the image (with the
        # rig's calibration: the pixels are K''s whatever the sample says)
        K = np.asarray(m["undistort_k"] if "undistort_k" in m else c["intrinsics"], dtype=np.float64)
        L = np.asarray(c["lidar2cam"], dtype=np.float64)
        # BEVDet keeps the camera matrices unaugmented (post_rot / post_tran carry the augmentation)
        aug = np.eye(3) if "post_rot" in m else np.asarray(m.get("img_aug", np.eye(3)), dtype=np.float64)
        l2i.append(geometry.lidar2img(K, L, aug))
        l2c.append(L.copy())
        c2i.append(geometry.cam2img(K, aug))
    meta["lidar2img"], meta["lidar2cam"], meta["cam2img"] = l2i, l2c, c2i
    if "intrinsics" in meta:  # PETR's 4x4 (augmented), BEVDet's 3x3 (not): cam2img's, or its K unaugmented
        meta["intrinsics"] = [np.array(m["intrinsics"], dtype=np.float64) if n not in calib
                              else x.copy() if np.shape(m["intrinsics"]) == (4, 4) else x[:3, :3].copy()
                              for x, m, n in zip(c2i, per_cam, cameras)]


def _copy(v):
    if isinstance(v, np.ndarray):
        return np.array(v, copy=True)  # writeable, owned
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    return v


@functools.lru_cache(maxsize=None)
def _box_type_3d():
    try:
        from mmdet3d.core.bbox import LiDARInstance3DBoxes  # mmdet3d 0.x / 1.0rc

        return LiDARInstance3DBoxes
    except Exception:  # noqa: BLE001 - mmdet3d absent or a layout without this module
        try:
            from mmdet3d.structures import LiDARInstance3DBoxes  # mmdet3d 1.x

            return LiDARInstance3DBoxes
        except Exception:  # noqa: BLE001
            return "LiDAR"


@functools.lru_cache(maxsize=None)
def _box_mode_3d():
    try:
        from mmdet3d.core.bbox import Box3DMode

        return Box3DMode.LIDAR
    except Exception:  # noqa: BLE001
        return 0  # Box3DMode.LIDAR's value
