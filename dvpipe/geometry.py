"""Image-plane geometry: the one place where camera matrices change.

Pixel convention
----------------
Continuous pixel coordinates ``(u, v)`` have their origin at the **top-left corner** of the
image: pixel ``(col i, row j)`` covers ``[i, i+1) x [j, j+1)`` and its centre is
``(i + 0.5, j + 0.5)``. A 3D point projecting to ``(u, v)`` therefore lands in pixel
``(floor(u), floor(v))``.

Under this convention:

* a resize from ``W x H`` to ``W' x H'`` is the pure scale ``u' = u * W'/W``, ``v' = v * H'/H``.
  This is exactly the mapping of OpenCV's ``INTER_LINEAR``/``INTER_AREA`` (which sample at
  half-pixel centres: ``x_src = (x_dst + 0.5) * W/W' - 0.5`` in centre-index terms) and the
  ``diag(s, s, 1, 1)`` pre-multiplication BEVFormer applies to ``lidar2img``;
* a crop whose top-left pixel is ``(x0, y0)`` is the translation ``u' = u - x0``;
* padding at the bottom/right is the identity; padding ``(top, left)`` translates by ``+left, +top``;
* a horizontal flip of a ``W``-wide image is ``u' = W - u``.

Every geometric step returns the 3x3 matrix ``A`` mapping input pixel coordinates to output
pixel coordinates (homogeneous, ``[u', v', 1] = A @ [u, v, 1]``). A frame accumulates
``img_aug = A @ img_aug``. Intrinsics, ``cam2img`` and ``lidar2img`` are derived from
``img_aug`` here and nowhere else.

Re-projecting stages
--------------------
Undistortion is not a 3x3 map of pixels: the output pixel of a camera-frame point ``X`` is ``K' X``
for new intrinsics K', whatever the lens did. A stage that re-projects says so through
``Stage.camera_matrix(spec, camera) -> K'``; the planner then restarts ``img_aug`` at identity there and
uses K' in place of the rig's K (``CameraPlan.intrinsics``; ``CameraPlan.metas_camera`` is the camera
with K' and no distortion, which the profiles read). So ``cam2img = img_aug @ K'`` and
``lidar2img = cam2img @ lidar2cam`` with the functions below unchanged.
"""
from __future__ import annotations


import numpy as np

__all__ = [
    "scale_matrix", "translate_matrix", "flip_matrix", "resize_matrix", "crop_matrix", "pad_matrix",
    "scaled_size", "apply_to_intrinsics", "cam2img", "lidar2img", "post_rot_tran", "project", "apply",
]


def scale_matrix(sx: float, sy: float) -> np.ndarray:
    """``u' = sx * u``, ``v' = sy * v``."""
    return np.array([[sx, 0.0, 0.0], [0.0, sy, 0.0], [0.0, 0.0, 1.0]])


def translate_matrix(tx: float, ty: float) -> np.ndarray:
    """``u' = u + tx``, ``v' = v + ty``."""
    return np.array([[1.0, 0.0, tx], [0.0, 1.0, ty], [0.0, 0.0, 1.0]])


def flip_matrix(width: int) -> np.ndarray:
    """Horizontal flip of a ``width``-pixel-wide image: ``u' = width - u``."""
    return np.array([[-1.0, 0.0, float(width)], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])


def resize_matrix(in_size: tuple[int, int], out_size: tuple[int, int]) -> np.ndarray:
    """Exact mapping of a resize from ``in_size`` to ``out_size`` (both ``(height, width)`` in pixels)."""
    return scale_matrix(out_size[1] / in_size[1], out_size[0] / in_size[0])


def crop_matrix(left: int, top: int) -> np.ndarray:
    """Crop whose first kept pixel is column ``left``, row ``top``."""
    return translate_matrix(-float(left), -float(top))


def pad_matrix(left: int = 0, top: int = 0) -> np.ndarray:
    """Padding with ``left`` columns and ``top`` rows added before the image (bottom/right: identity)."""
    return translate_matrix(float(left), float(top))


def scaled_size(size: tuple[int, int], scale: float) -> tuple[int, int]:
    """Output ``(height, width)`` in pixels of a resize by ``scale`` of an image of ``size``
    ``(height, width)``: ``(int(height * scale), int(width * scale))``.

    Truncation, as mmcv/BEVFormer's ``RandomScaleImageMultiViewImage`` does it
    (900x1600 * 0.5 -> 450x800; 375x1242 * 0.5 -> 187x621). Never below 1 pixel.
    """
    return max(1, int(size[0] * scale)), max(1, int(size[1] * scale))


def apply_to_intrinsics(K: np.ndarray, img_aug: np.ndarray) -> np.ndarray:
    """Intrinsics of the transformed image: ``img_aug @ K`` (3x3).

    Valid for the affine steps above (the last row of ``img_aug`` is ``[0, 0, 1]``).
    """
    return img_aug @ np.asarray(K, dtype=np.float64)


def cam2img(K: np.ndarray, img_aug: np.ndarray) -> np.ndarray:
    """4x4 camera-to-image matrix of the transformed image: ``img_aug @ K`` in the top rows of eye(4). ``K``
    is 3x3, or a 3x4 projection ``[K | t]`` (:attr:`dvpipe.Camera.projection`), whose offset column the
    pixel map transforms too."""
    K = np.asarray(K, dtype=np.float64)
    out = np.eye(4)
    out[:3, :K.shape[1]] = apply_to_intrinsics(K, img_aug)
    return out


def lidar2img(K: np.ndarray, lidar2cam: np.ndarray, img_aug: np.ndarray) -> np.ndarray:
    """4x4 ``cam2img(K, img_aug) @ lidar2cam``: homogeneous lidar point -> ``(u*d, v*d, d, 1)`` (``K`` 3x3 or
    a 3x4 projection)."""
    return cam2img(K, img_aug) @ np.asarray(lidar2cam, dtype=np.float64)


def post_rot_tran(img_aug: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BEVDet-style split of ``img_aug``: 3x3 ``post_rot`` (2x2 linear part, padded) and 3-vector ``post_tran``."""
    rot = np.eye(3)
    rot[:2, :2] = img_aug[:2, :2]
    tran = np.zeros(3)
    tran[:2] = img_aug[:2, 2]
    return rot, tran


def project(P: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Project ``(M, 3)`` points with a 3x4 or 4x4 ``P``; returns ``(M, 2)`` pixels and ``(M,)`` depth."""
    pts = np.asarray(points, dtype=np.float64)
    homo = np.concatenate([pts, np.ones((len(pts), 1))], axis=1)
    p = homo @ np.asarray(P, dtype=np.float64)[:3].T
    depth = p[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = p[:, :2] / depth[:, None]
    return uv, depth


def apply(A: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """Map ``(M, 2)`` pixel coordinates through a 3x3 affine ``A``."""
    uv = np.asarray(uv, dtype=np.float64)
    return uv @ A[:2, :2].T + A[:2, 2]


