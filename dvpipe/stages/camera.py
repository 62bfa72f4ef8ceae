"""Stages that depend on the camera's optics: ``Undistort``.

``Undistort`` re-projects each camera's image through its own lens model (the rig's ``distortion``)
onto an ideal pinhole camera with intrinsics K'. That is not a 3x3 pixel map, so the stage reports K'
through :meth:`~dvpipe.stages.Stage.camera_matrix`: the planner restarts the camera's ``img_aug`` at
it (identity) and every later stage's matrix composes onto K' (``cam2img = img_aug @ K'``,
``lidar2img = cam2img @ lidar2cam``; ``pipe.plan.cameras[i].intrinsics`` is K', and a profile's
unaugmented ``intrinsics`` (BEVDet's) is K' too: the planner hands the profiles the camera with K' and no
distortion, :attr:`dvpipe.planner.CameraPlan.metas_camera`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from ..errors import ConfigError
from ..types import Camera, PixelFormat
from .base import FrameSpec, Stage
from .stage_registry import register_stage

__all__ = ["Undistort", "opencv_k", "dvpipe_k"]


def opencv_k(K: np.ndarray) -> np.ndarray:
    """K in OpenCV's pixel convention (pixel centres at integers): ``cx, cy`` 0.5 smaller than dvpipe's
    (:mod:`dvpipe.geometry`: centres at ``i + 0.5``)."""
    k = np.array(K, dtype=np.float64)
    k[0, 2] -= 0.5
    k[1, 2] -= 0.5
    return k


def dvpipe_k(K: np.ndarray) -> np.ndarray:
    """The inverse of :func:`opencv_k`."""
    k = np.array(K, dtype=np.float64)
    k[0, 2] += 0.5
    k[1, 2] += 0.5
    return k


@register_stage("undistort")
@dataclass(frozen=True)
class Undistort(Stage):
    """Remove each camera's lens distortion (``Camera.distortion``, OpenCV's ``pinhole`` radial-tangential
    or ``fisheye`` equidistant model), output an ideal pinhole image with intrinsics K'.

    Takes the camera's native decoded pixels (HxWx3 uint8 BGR, or float HWC) and writes an image of the
    same size and type, bilinear (OpenCV ``INTER_LINEAR``), pixels whose source falls outside the image
    black (0). Put it right after ``Decode``: the lens model is defined on the sensor's pixel grid.

    Args:
        alpha: how K' is chosen when ``intrinsics`` is not given, 0..1: for ``pinhole`` OpenCV's
            ``getOptimalNewCameraMatrix(alpha)`` (0: every output pixel valid, 1: every source pixel kept),
            for ``fisheye`` ``cv2.fisheye.estimateNewCameraMatrixForUndistortRectify(balance=alpha)``.
            Computed in OpenCV's pixel convention and converted to dvpipe's (``cx, cy`` + 0.5). (OpenCV
            calib3d, ``getOptimalNewCameraMatrix``: alpha 0 keeps only valid pixels, 1 keeps the whole source,
            https://docs.opencv.org/master/d9/d0c/group__calib3d.html#ga7a6c4e032c97f03ba747966e6ad862b1;
            calib3d_fisheye, ``estimateNewCameraMatrixForUndistortRectify``: balance 0..1 moves the new focal
            length between its smallest and largest choice, https://docs.opencv.org/3.3.0/db/d58/group__calib3d__fisheye.html.)
        intrinsics: K' given, 3x3 (dvpipe's pixel convention), the same for every camera; None: by ``alpha``.

    A camera without ``distortion`` passes through (K' = its K, when ``intrinsics`` is not given).
    ``batch.metas[i]``'s ``cam2img`` / ``lidar2img`` are built on K' (see :mod:`dvpipe.stages.camera`).
    """

    op: ClassVar[str] = "undistort"
    alpha: float = 0.0
    intrinsics: Optional[tuple[tuple[float, float, float], ...]] = None

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"Undistort.alpha must be a number in 0..1, got {self.alpha!r}")
        object.__setattr__(self, "alpha", float(self.alpha))
        if self.intrinsics is not None:
            try:
                k = np.asarray(self.intrinsics, dtype=np.float64)
            except (TypeError, ValueError):
                raise ConfigError(f"Undistort.intrinsics must be a 3x3 matrix, got {self.intrinsics!r}") from None
            if k.shape != (3, 3) or not np.all(np.isfinite(k)) or k[0, 0] <= 0 or k[1, 1] <= 0 \
                    or not np.allclose(k[2], (0, 0, 1)):
                raise ConfigError("Undistort.intrinsics must be a finite 3x3 K with fx, fy > 0 and last row "
                                  f"[0, 0, 1], got {self.intrinsics!r}")
            object.__setattr__(self, "intrinsics", tuple(tuple(float(x) for x in row) for row in k))

    def new_intrinsics(self, camera: Camera) -> np.ndarray:
        """K' (3x3, dvpipe's pixel convention) of ``camera``'s undistorted image."""
        if self.intrinsics is not None:
            return np.array(self.intrinsics, dtype=np.float64)
        K = np.asarray(camera.intrinsics, dtype=np.float64)
        d = camera.distortion
        if d is None:
            return K.copy()
        import cv2

        size = (camera.width, camera.height)
        if d.model == "fisheye":
            kc = cv2.fisheye.estimateNewCameraMatrixForUndistortRectify(
                opencv_k(K), d.opencv.reshape(4, 1), size, np.eye(3), balance=self.alpha)
        else:
            kc, _ = cv2.getOptimalNewCameraMatrix(opencv_k(K), d.opencv, size, self.alpha, size)
        k = dvpipe_k(kc)
        if not np.all(np.isfinite(k)) or k[0, 0] <= 0 or k[1, 1] <= 0:
            raise ConfigError(f"camera {camera.name}: no valid undistorted intrinsics for alpha={self.alpha} "
                              "(check the distortion coefficients, or give Undistort(intrinsics=...))")
        return k

    def output_spec(self, spec: FrameSpec, camera: Optional[Camera] = None) -> FrameSpec:
        if camera is None:
            raise ConfigError("Undistort needs the camera (its intrinsics and distortion); plan it with a rig")
        if spec.pixel_format is PixelFormat.ENCODED:
            raise ConfigError(f"Undistort needs decoded pixels but gets encoded {spec.encoding or 'data'}; put Decode() first")
        if spec.pixel_format not in (PixelFormat.BGR, PixelFormat.RGB, PixelFormat.FLOAT_HWC):
            raise ConfigError(f"Undistort takes HxWx3 images, got {spec.pixel_format.value}")
        if spec.size != (camera.height, camera.width):
            raise ConfigError(f"Undistort works on camera {camera.name}'s native {camera.width}x{camera.height} "
                              f"pixels, got {spec.width}x{spec.height}; put it right after Decode()")
        self.new_intrinsics(camera)  # a bad K' is a plan-time error
        return spec

    def camera_matrix(self, spec: FrameSpec, camera: Optional[Camera] = None) -> Optional[np.ndarray]:
        if camera is None:
            raise ConfigError("Undistort needs the camera (its intrinsics and distortion); plan it with a rig")
        return self.new_intrinsics(camera)

    def describe(self) -> str:
        return "undistort " + ("given K'" if self.intrinsics is not None else f"alpha={self.alpha:g}")
