"""Independent reference of the BEVFormer test-time preprocessing, written from anchors.md §A.

It calls OpenCV and numpy exactly as mmcv 1.x / mmdet3d 0.17 / BEVFormer do, and nothing from dvpipe.
"""
from __future__ import annotations

import math

import cv2
import numpy as np

CONFIGS = {
    # anchors.md §A.1: bevformer_base.py L16-17, bevformer_small.py L23-24, bevformer_tiny.py L26-27
    "bevformer-base": dict(mean=[103.530, 116.280, 123.675], std=[1.0, 1.0, 1.0], to_rgb=False, scale=None),
    "bevformer-small": dict(mean=[103.530, 116.280, 123.675], std=[1.0, 1.0, 1.0], to_rgb=False, scale=0.8),
    "bevformer-tiny": dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True, scale=0.5),
}


def imnormalize(img: np.ndarray, mean, std, to_rgb: bool) -> np.ndarray:
    """mmcv.imnormalize (copy, float32, cv2 in-place ops) — §A.3 step 2."""
    if img.shape[:2] == (1, 1):  # OpenCV 5.1 reads a 1x1x3 array as one row of 3 pixels: do 2 pixels, keep 1
        return imnormalize(np.concatenate([img, img], axis=1), mean, std, to_rgb)[:, :1]
    img = img.copy().astype(np.float32)
    mean = np.float64(np.array(mean).reshape(1, -1))
    stdinv = 1 / np.float64(np.array(std).reshape(1, -1))
    if to_rgb:
        cv2.cvtColor(img, cv2.COLOR_BGR2RGB, img)
    cv2.subtract(img, mean, img)
    cv2.multiply(img, stdinv, img)
    return img


def bevformer_reference(encoded: list[bytes], lidar2imgs: list[np.ndarray], profile: str):
    """Returns (img (N,3,Hp,Wp) float32, metas list) as §A.5 describes."""
    cfg = CONFIGS[profile]
    imgs, metas = [], []
    for data, l2i in zip(encoded, lidar2imgs):
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)  # LoadMultiViewImageFromFiles
        x = bgr.astype(np.float32)
        x = imnormalize(x, cfg["mean"], cfg["std"], cfg["to_rgb"])               # NormalizeMultiviewImage
        L = np.array(l2i, dtype=np.float64)
        if cfg["scale"] is not None:                                              # RandomScaleImageMultiViewImage
            s = cfg["scale"]
            y_size, x_size = int(x.shape[0] * s), int(x.shape[1] * s)
            x = cv2.resize(x, (x_size, y_size), interpolation=cv2.INTER_LINEAR)
            S = np.eye(4)
            S[0, 0] *= s
            S[1, 1] *= s
            L = S @ L
        ori_shape = x.shape
        hp, wp = math.ceil(x.shape[0] / 32) * 32, math.ceil(x.shape[1] / 32) * 32  # PadMultiViewImage
        x = np.pad(x, ((0, hp - x.shape[0]), (0, wp - x.shape[1]), (0, 0)), constant_values=0)
        imgs.append(x.transpose(2, 0, 1))                                         # DefaultFormatBundle3D
        metas.append({"lidar2img": L, "img_shape": x.shape, "pad_shape": x.shape, "ori_shape": ori_shape,
                      "scale_factor": 1.0})
    return np.ascontiguousarray(np.stack(imgs)), metas


# -- CustomNuScenesDataset.get_data_info (BEVFormer): the geometry and can_bus an info file gives -----------
def quaternion_rotation(q) -> np.ndarray:
    """pyquaternion's ``rotation_matrix`` of the normalised ``(w, x, y, z)``."""
    w, x, y, z = np.asarray(q, dtype=float) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


class PyQuaternionLike:
    """What numpy sees of a pyquaternion ``Quaternion``: no ``__array__``, no ``__len__``/``__iter__``, a
    ``__getitem__`` and a ``__float__`` that returns the scalar part (pyquaternion 0.9.9 ``quaternion.py``)."""

    def __init__(self, q):
        self.q = np.asarray(q, dtype=float)

    def __float__(self):
        return float(self.q[0])

    def __getitem__(self, index):
        return self.q[int(index)]


def can_bus(translation, rotation, raw=None, published: bool = True) -> np.ndarray:
    """get_data_info: ``can_bus[:3]`` = ego translation, ``[3:7]`` = rotation, ``[-2]`` = yaw in rad, ``[-1]``
    = yaw in degrees in [0, 360) (nuScenes ``quaternion_yaw``); the other entries from ``raw`` (18 zeros).

    ``published``: ``[3:7]`` is assigned a Quaternion, as BEVFormer@66b65f3 does, and numpy stores
    ``float(q)`` = w in all four (the upstream bug, BEVFormer PR #285); else the quaternion ``w, x, y, z``."""
    can = np.zeros(18) if raw is None else np.array(raw, dtype=np.float64)
    can[:3] = translation
    can[3:7] = PyQuaternionLike(rotation) if published else rotation
    v = quaternion_rotation(rotation) @ np.array([1.0, 0.0, 0.0])
    angle = math.atan2(v[1], v[0]) / np.pi * 180
    if angle < 0:
        angle += 360
    can[-2], can[-1] = angle / 180 * np.pi, angle
    return can


def info_lidar2img(cam_info, scale: float) -> np.ndarray:
    """get_data_info's lidar2img of one camera, then RandomScaleImageMultiViewImage's diag(s, s, 1, 1)."""
    lidar2cam_r = np.linalg.inv(cam_info["sensor2lidar_rotation"])
    lidar2cam_t = cam_info["sensor2lidar_translation"] @ lidar2cam_r.T
    lidar2cam_rt = np.eye(4)
    lidar2cam_rt[:3, :3] = lidar2cam_r.T
    lidar2cam_rt[3, :3] = -lidar2cam_t
    viewpad = np.eye(4)
    viewpad[:3, :3] = cam_info["cam_intrinsic"]
    S = np.eye(4)
    S[0, 0] = S[1, 1] = scale
    return S @ (viewpad @ lidar2cam_rt.T)
