"""Model metadata profiles: the stage list a model was trained with and the ``img_metas`` it expects.

Data plus two small functions (:func:`profile_stages`, :func:`profile_metas`), no class tower.
Sources: ../shared/reference/anchors.md §A (BEVFormer configs at commit 66b65f3) and §B.8
(PETR, BEVDet).

Meta contracts differ per model family:

* ``bevformer``: ``lidar2img`` pre-multiplied by ``diag(s, s, 1, 1)`` (the nominal scale, as
  ``RandomScaleImageMultiViewImage`` does), ``img_shape = pad_shape =`` padded ``(H, W, 3)``,
  ``ori_shape =`` pre-pad, ``scale_factor = 1.0`` (left stale, as the reference leaves it).
* ``petr``: ``img_shape =`` pre-pad, ``pad_shape =`` padded; ``intrinsics`` (4x4) updated by the
  resize and crop, ``lidar2img = intrinsics @ lidar2cam``.
* ``bevdet``: camera matrices untouched; the augmentation is returned separately as
  ``post_rot`` (3x3) and ``post_tran`` (3,).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import geometry
from .errors import ConfigError
from .stages import Crop, Decode, Normalise, Pad, Resize, Stage
from .types import Camera

__all__ = ["Profile", "PROFILES", "profile_stages", "profile_metas", "generic_metas"]

_CAFFE_BGR = dict(mean=(103.530, 116.280, 123.675), std=(1.0, 1.0, 1.0), to_rgb=False)
_IMAGENET_RGB = dict(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), to_rgb=True)


@dataclass(frozen=True)
class Profile:
    """One model's test-time preprocessing.

    Attributes:
        scale: resize factor (None: no resize).
        crop_bottom: keep this many rows at the bottom after the resize (PETR/BEVDet crop), or None.
        crop_width: keep this many columns, centred (BEVDet), or None.
        mean/std/to_rgb: normalisation, mean and std in output channel order (0..255 units).
        size_divisor: pad bottom/right to a multiple of this (None: no pad).
        normalise_first: the reference normalises before resizing (mmdet3d BEVFormer order).
        metas: meta contract (``bevformer``, ``petr``, ``bevdet``).
    """

    name: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    to_rgb: bool
    scale: Optional[float] = None
    crop_bottom: Optional[int] = None
    crop_width: Optional[int] = None
    size_divisor: Optional[int] = 32
    normalise_first: bool = True
    metas: str = "bevformer"
    source: str = ""


PROFILES: dict[str, Profile] = {
    p.name: p for p in [
        Profile("bevformer-base", **_CAFFE_BGR, scale=None,
                source="BEVFormer projects/configs/bevformer/bevformer_base.py L16-17, L179-195"),
        Profile("bevformer-small", **_CAFFE_BGR, scale=0.8,
                source="BEVFormer projects/configs/bevformer/bevformer_small.py L23-24, L188-205"),
        Profile("bevformer-tiny", **_IMAGENET_RGB, scale=0.5,
                source="BEVFormer projects/configs/bevformer/bevformer_tiny.py L26-27, L190-207"),
        # PETR test: resize x0.5 -> 800x450, crop the bottom 320 rows, normalise (caffe-style BGR), pad /32.
        Profile("petr", mean=(103.530, 116.280, 123.675), std=(57.375, 57.120, 58.395), to_rgb=False,
                scale=0.5, crop_bottom=320, normalise_first=False, metas="petr",
                source="PETR projects/configs/petr/petr_r50dcn_gridmask_p4.py ida_aug_conf final_dim=(320, 800)"),
        # BEVDet test: resize to 704 wide (x0.44 -> 704x396), crop the bottom 256 rows; mmlabNormalize swaps
        # RGB->BGR before subtracting the RGB means, i.e. BGR order with RGB means (copied on purpose).
        Profile("bevdet", mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), to_rgb=False,
                scale=0.44, crop_bottom=256, crop_width=704, size_divisor=None, normalise_first=False, metas="bevdet",
                source="BEVDet mmdet3d/datasets/pipelines/loading.py LoadMultiViewImageFromFiles_BEVDet, input_size=(256, 704)"),
    ]
}


def _get(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}") from None


def profile_stages(name: str, fidelity: str = "reference", camera: Optional[Camera] = None) -> list[Stage]:
    """The stage list of profile ``name``.

    At fidelity ``reference`` the order is the reference's (BEVFormer normalises at full
    resolution, then resizes the float image); at ``fast`` the resize comes first so that it can
    fuse with decode (JPEG DCT scaling). Crops need the camera size to place the window.
    """
    p = _get(name)
    norm = Normalise(mean=p.mean, std=p.std, to_rgb=p.to_rgb)
    geo: list[Stage] = []
    if p.scale is not None:
        geo.append(Resize(scale=p.scale, interpolation="linear", geometry="nominal" if p.metas == "bevformer" else "exact"))
    if p.crop_bottom is not None:
        if camera is None:
            raise ConfigError(f"profile {name} crops relative to the image size; pass the camera")
        w, h = (geometry.scaled_size(camera.width, camera.height, p.scale) if p.scale else (camera.width, camera.height))
        cw = min(p.crop_width or w, w)
        ch = min(p.crop_bottom, h)
        geo.append(Crop(left=(w - cw) // 2, top=h - ch, width=cw, height=ch))
    pad = [Pad(size_divisor=p.size_divisor)] if p.size_divisor else []
    if p.normalise_first and fidelity == "reference":
        return [Decode(), norm, *geo, *pad]
    return [Decode(), *geo, norm, *pad]


def generic_metas(camera: Camera, img_aug: np.ndarray, prepad_size: tuple[int, int],
                  out_size: tuple[int, int]) -> dict:
    """Metas for a pipeline without a profile: geometry from ``img_aug``, shapes as ``(H, W, 3)``."""
    return {
        "camera": camera.name,
        "lidar2img": geometry.lidar2img(camera.intrinsics, camera.lidar2cam, img_aug),
        "cam2img": geometry.cam2img(camera.intrinsics, img_aug),
        "lidar2cam": np.array(camera.lidar2cam),
        "img_aug": np.array(img_aug),
        "img_shape": (out_size[1], out_size[0], 3),
        "ori_shape": (prepad_size[1], prepad_size[0], 3),
        "pad_shape": (out_size[1], out_size[0], 3),
    }


def profile_metas(name: Optional[str], camera: Camera, img_aug: np.ndarray, prepad_size: tuple[int, int],
                  out_size: tuple[int, int]) -> dict:
    """Per-camera ``img_metas`` as profile ``name`` (None: generic) defines them.

    The arrays are read-only: every batch shares them (copy one to change it).
    """
    metas = _profile_metas(name, camera, img_aug, prepad_size, out_size)
    for value in metas.values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
        elif isinstance(value, dict):
            for v in value.values():
                if isinstance(v, np.ndarray):
                    v.setflags(write=False)
    return metas


def _profile_metas(name: Optional[str], camera: Camera, img_aug: np.ndarray, prepad_size: tuple[int, int],
                   out_size: tuple[int, int]) -> dict:
    metas = generic_metas(camera, img_aug, prepad_size, out_size)
    if name is None:
        return metas
    p = _get(name)
    metas["img_norm_cfg"] = {"mean": np.array(p.mean, dtype=np.float32), "std": np.array(p.std, dtype=np.float32),
                             "to_rgb": p.to_rgb}
    if p.metas == "bevformer":
        metas["scale_factor"] = 1.0  # the reference never updates it after RandomScaleImageMultiViewImage
        if p.size_divisor:
            metas["pad_size_divisor"] = p.size_divisor
    elif p.metas == "petr":
        metas["img_shape"] = metas["ori_shape"]
        metas["intrinsics"] = metas["cam2img"]
    elif p.metas == "bevdet":
        rot, tran = geometry.post_rot_tran(img_aug)
        metas["post_rot"], metas["post_tran"] = rot, tran
        metas["cam2img"] = geometry.cam2img(camera.intrinsics, np.eye(3))
        metas["lidar2img"] = camera.lidar2img
        metas["intrinsics"] = np.array(camera.intrinsics)
    return metas
