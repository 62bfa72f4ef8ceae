"""Model metadata profiles: the stage list a model was trained with and the ``img_metas`` it expects.

Data plus two small functions (:func:`profile_stages`, :func:`profile_metas`), no class tower. The
tables are read-only: :func:`register_profile` adds a profile to :data:`PROFILES` and
:func:`register_metas_contract` a metas contract to :data:`METAS_CONTRACTS`, each refusing a taken
name unless ``replace=True`` (the built-in ones register the same way).
Each profile follows one repository's published test pipeline, file and commit named in its
``source``: BEVFormer at fundamentalvision/BEVFormer@66b65f3 (../shared/reference/anchors.md §A),
PETR at megvii-research/PETR@f7525f9 and BEVDet at HuangJunJie2017/BEVDet@1bacecb (master). PETR
and BEVDet resize the uint8 image with Pillow's default filter (``Image.resize(dims)``: bicubic,
antialiased), which ``Resize(interpolation="pil_bicubic")`` reproduces bit for bit.

Meta contracts differ per model family (the built-in ones):

* ``bevformer``: ``lidar2img`` pre-multiplied by ``diag(s, s, 1, 1)`` (the nominal scale, as
  ``RandomScaleImageMultiViewImage`` does), ``img_shape = pad_shape =`` padded ``(H, W, 3)``,
  ``ori_shape =`` pre-pad ``(H, W, 3)`` (BEVFormer's ``PadMultiViewImage`` rewrites it per camera,
  with or without a scale), ``scale_factor = 1.0`` (left stale, as the reference leaves it);
  ``can_bus_rotation = "published"`` (see :data:`CAN_BUS_ROTATIONS`).
* ``petr``: ``img_shape =`` pre-pad, ``pad_shape =`` padded; ``intrinsics`` (4x4) updated by the
  resize and crop, ``lidar2img = intrinsics @ lidar2cam``; ``input_shape`` = the decoded image
  ``(H, W, 3)``, which ``metas_format="mmdet3d"`` stacks into PETR's ``ori_shape`` ``(H, W, 3, N)``
  (mmdet3d 0.17's ``LoadMultiViewImageFromFiles`` sets ``ori_shape = img.shape`` of the images
  stacked on a last axis, and no later PETR transform changes it); ``scale_factor = 1.0`` (the
  loader's, which mmdet3d's ``Collect3D`` passes on).
* ``bevdet``: camera matrices untouched; the augmentation is returned separately as
  ``post_rot`` (3x3) and ``post_tran`` (3,).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from . import geometry
from ._typing import Fidelity
from .errors import ConfigError
from .stages import Crop, Decode, Normalise, Pad, Resize, Stage
from .types import Camera

__all__ = ["Profile", "PROFILES", "register_profile", "METAS_CONTRACTS", "MetasContract", "register_metas_contract",
           "CAN_BUS_ROTATIONS", "NUSCENES_INFO_ORDER", "BEVDET_ORDER", "camera_order_problem", "profile_stages",
           "profile_metas", "generic_metas", "img_norm_cfg"]

#: What ``can_bus[3:7]`` holds. ``published``: ``[w, w, w, w]``, what BEVFormer's
#: ``CustomNuScenesDataset.get_data_info`` writes (it assigns a pyquaternion ``Quaternion`` to the slice and
#: numpy converts it to the one number ``float(q)`` = w; upstream bug, fundamentalvision/BEVFormer PR #285)
#: and what every released BEVFormer checkpoint was trained and evaluated with. ``quaternion``: the
#: rotation ``[w, x, y, z]`` the code meant to write.
CAN_BUS_ROTATIONS = ("published", "quaternion")

#: The nuScenes cameras in the order mmdet3d's info files list them (``tools/data_converter/nuscenes_converter.py``
#: ``camera_types``), the order BEVFormer's and PETR's datasets feed them and their checkpoints were trained on.
NUSCENES_INFO_ORDER = ("CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_FRONT_LEFT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_BACK_RIGHT")
#: BEVDet's ``data_config['cams']`` (HuangJunJie2017/BEVDet@1bacecb configs/bevdet/bevdet-r50.py), the order its
#: loader feeds the cameras whatever the info file lists.
BEVDET_ORDER = ("CAM_FRONT_LEFT", "CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_BACK_LEFT", "CAM_BACK", "CAM_BACK_RIGHT")

_CAFFE_BGR: dict[str, Any] = dict(mean=(103.530, 116.280, 123.675), std=(1.0, 1.0, 1.0), to_rgb=False)
_IMAGENET_RGB: dict[str, Any] = dict(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), to_rgb=True)


@dataclass(frozen=True)
class Profile:
    """One model's test-time preprocessing.

    Attributes:
        scale: resize factor (None: no resize).
        fit_width: with ``scale=None``, the factor is ``fit_width / camera width + scale_offset``
            (BEVDet's ``sample_augmentation`` at test time), computed per camera.
        scale_offset: see ``fit_width`` (BEVDet's ``data_config['resize_test']``).
        interpolation: the resize filter (``linear`` = OpenCV/mmcv, ``pil_bicubic`` = Pillow's default).
        crop_bottom: keep this many rows at the bottom after the resize (PETR/BEVDet crop), or None.
        crop_width: keep this many columns, centred (``int(max(0, W' - crop_width) / 2)`` from the
            left, PETR/BEVDet), or None.
        mean/std/to_rgb: normalisation, mean and std in output channel order (0..255 units).
        size_divisor: pad bottom/right to a multiple of this (None: no pad).
        normalise_first: the reference normalises before resizing (mmdet3d BEVFormer order).
        metas: meta contract (``bevformer``, ``petr``, ``bevdet``).
        can_bus_rotation: what ``can_bus[3:7]`` holds in ``metas_format="mmdet3d"``
            (:data:`CAN_BUS_ROTATIONS`; None: ``quaternion``). The BEVFormer profiles say ``published``.
        camera_order: the camera names the model was trained on, in the order it was fed them (the
            batch's order is the model's: BEVFormer's camera embeddings are per position). A rig whose
            cameras all bear these names must list them in this order (:func:`camera_order_problem`);
            a rig with other names is not checked. None: no check.
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
    fit_width: Optional[int] = None
    scale_offset: float = 0.0
    interpolation: str = "linear"
    can_bus_rotation: Optional[str] = None
    camera_order: Optional[tuple[str, ...]] = None

    def __post_init__(self):
        if self.can_bus_rotation not in (None, *CAN_BUS_ROTATIONS):
            raise ConfigError(f"profile {self.name}: can_bus_rotation must be one of {', '.join(CAN_BUS_ROTATIONS)}, "
                              f"got {self.can_bus_rotation!r}")

    def scale_for(self, camera: Optional[Camera]) -> Optional[float]:
        """The resize factor for ``camera`` (None: no resize)."""
        if self.fit_width is None:
            return self.scale
        if camera is None:
            raise ConfigError(f"profile {self.name} scales relative to the image width; pass the camera")
        return float(self.fit_width) / float(camera.width) + self.scale_offset  # BEVDet's float arithmetic


#: A metas contract: ``contract(profile, camera, img_aug, metas)`` updates ``metas`` in place. It receives
#: :func:`generic_metas` plus ``img_norm_cfg``; ``img_aug`` is the 3x3 image augmentation (pixels).
MetasContract = Callable[["Profile", Camera, np.ndarray, dict], None]


def _bevformer_metas(p: "Profile", camera: Camera, img_aug: np.ndarray, metas: dict) -> None:
    metas["scale_factor"] = 1.0  # the loader's; the reference never updates it after RandomScaleImageMultiViewImage
    if p.size_divisor:
        metas["pad_size_divisor"] = p.size_divisor


def _petr_metas(p: "Profile", camera: Camera, img_aug: np.ndarray, metas: dict) -> None:
    metas["img_shape"] = metas["ori_shape"]
    metas["scale_factor"] = 1.0  # the loader's; Collect3D passes it on
    metas["intrinsics"] = metas["cam2img"]
    # the decoded image, (H, W, 3): metas_format="mmdet3d" stacks it into PETR's ori_shape (H, W, 3, N)
    metas["input_shape"] = (camera.height, camera.width, 3)


def _bevdet_metas(p: "Profile", camera: Camera, img_aug: np.ndarray, metas: dict) -> None:
    rot, tran = geometry.post_rot_tran(img_aug)
    metas["post_rot"], metas["post_tran"] = rot, tran
    metas["cam2img"] = geometry.cam2img(camera.projection, np.eye(3))
    metas["lidar2img"] = camera.lidar2img
    metas["intrinsics"] = np.array(camera.intrinsics)


_METAS_CONTRACTS: dict[str, MetasContract] = {"bevformer": _bevformer_metas, "petr": _petr_metas,
                                              "bevdet": _bevdet_metas}

#: The metas contracts by name (``Profile.metas``), read-only: :func:`register_metas_contract` adds to it.
METAS_CONTRACTS: Mapping[str, MetasContract] = MappingProxyType(_METAS_CONTRACTS)


def register_metas_contract(name: str, contract: MetasContract, *, replace: bool = False) -> MetasContract:
    """Add the metas contract ``contract`` under ``name`` (a profile names it in ``Profile.metas``).

    The same function again is accepted; another one under a taken name raises
    :class:`~dvpipe.ConfigError` unless ``replace=True``.
    """
    if not isinstance(name, str) or not name or not callable(contract):
        raise ConfigError(f"register_metas_contract takes a name and a function, got {name!r}, {contract!r}")
    old = _METAS_CONTRACTS.get(name)
    if old is not None and old is not contract and not replace:
        raise ConfigError(f"metas contract {name!r} is already registered ({old.__module__}.{old.__qualname__}); "
                          "choose another name or pass replace=True to override")
    _METAS_CONTRACTS[name] = contract
    return contract


_BUILTIN_PROFILES = [
    Profile("bevformer-base", **_CAFFE_BGR, scale=None, can_bus_rotation="published",
            camera_order=NUSCENES_INFO_ORDER,
            source="fundamentalvision/BEVFormer@66b65f3 projects/configs/bevformer/bevformer_base.py L16-17, L179-195"),
    Profile("bevformer-small", **_CAFFE_BGR, scale=0.8, can_bus_rotation="published",
            camera_order=NUSCENES_INFO_ORDER,
            source="fundamentalvision/BEVFormer@66b65f3 projects/configs/bevformer/bevformer_small.py L23-24, L188-205"),
    Profile("bevformer-tiny", **_IMAGENET_RGB, scale=0.5, can_bus_rotation="published",
            camera_order=NUSCENES_INFO_ORDER,
            source="fundamentalvision/BEVFormer@66b65f3 projects/configs/bevformer/bevformer_tiny.py L26-27, L190-207"),
    # PETR test (ResizeCropFlipImage, training=False): resize = max(fH/H, fW/W) = 0.5 with Pillow's
    # default filter on uint8 -> 800x450, crop (0, 130, 800, 450), then normalise, pad /32.
    Profile("petr", mean=(103.530, 116.280, 123.675), std=(57.375, 57.120, 58.395), to_rgb=False,
            scale=0.5, crop_bottom=320, crop_width=800, normalise_first=False, metas="petr",
            interpolation="pil_bicubic", camera_order=NUSCENES_INFO_ORDER,
            source="megvii-research/PETR@f7525f9 projects/configs/petr/petr_vovnet_gridmask_p4_800x320.py "
                   "(img_norm_cfg L13-14, ida_aug_conf final_dim=(320, 800), test_pipeline); transform: "
                   "projects/mmdet3d_plugin/datasets/pipelines/transform_3d.py ResizeCropFlipImage"),
    # BEVDet test (LoadMultiViewImageFromFiles_BEVDet, is_train=False): PIL decode (RGB), resize =
    # 704/W + resize_test 0.04 (0.48 at 1600 wide -> 768x432) with Pillow's default filter, crop
    # (32, 176, 736, 432), torchvision ToTensor + Normalize(ImageNet mean/std) in RGB, no pad.
    Profile("bevdet", mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), to_rgb=True,
            scale=None, fit_width=704, scale_offset=0.04, crop_bottom=256, crop_width=704, size_divisor=None,
            normalise_first=False, metas="bevdet", interpolation="pil_bicubic",
            camera_order=BEVDET_ORDER,
            source="HuangJunJie2017/BEVDet@1bacecb configs/bevdet/bevdet-r50.py (data_config input_size=(256, "
                   "704), resize_test=0.04); transform: mmdet3d/datasets/pipelines/loading.py "
                   "LoadMultiViewImageFromFiles_BEVDet"),
]

_PROFILES: dict[str, Profile] = {}

#: The profile table, read-only: :func:`register_profile` adds to it.
PROFILES: Mapping[str, Profile] = MappingProxyType(_PROFILES)


def register_profile(profile: Profile, *, replace: bool = False) -> Profile:
    """Add ``profile`` to :data:`PROFILES` under ``profile.name`` and return it.

    The same profile again (an equal one: its module re-imported) is accepted; another profile under
    a taken name raises :class:`~dvpipe.ConfigError` unless ``replace=True``. Its ``metas`` contract
    must be registered (:data:`METAS_CONTRACTS`) first.
    """
    if not isinstance(profile, Profile):
        raise ConfigError(f"register_profile takes a dvpipe.profiles.Profile, got {type(profile).__name__}")
    if profile.metas not in _METAS_CONTRACTS:
        raise ConfigError(f"profile {profile.name}: unknown metas contract {profile.metas!r}; known: "
                          f"{', '.join(_METAS_CONTRACTS)} (add one with register_metas_contract)")
    old = _PROFILES.get(profile.name)
    if old is not None and old != profile and not replace:
        raise ConfigError(f"profile {profile.name!r} is already registered ({old.source or 'no source'}); "
                          "choose another name or pass replace=True to override")
    _PROFILES[profile.name] = profile
    return profile


for _profile in _BUILTIN_PROFILES:
    register_profile(_profile)

def _get(name: "str | Profile") -> Profile:
    if isinstance(name, Profile):  # a profile built from a model's config (dvpipe.mmdet3d)
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}") from None


def camera_order_problem(name: "str | Profile", cameras: Sequence[str]) -> Optional[str]:
    """What is wrong with feeding ``cameras`` (names, in batch order) to profile ``name``'s model, or None.

    A problem only when every name is one the profile's model was trained on (``Profile.camera_order``)
    and they come in another order than it was fed them: the batch would be silently permuted."""
    p = _get(name)
    if not p.camera_order or not set(cameras) <= set(p.camera_order):
        return None
    want = [c for c in p.camera_order if c in cameras]
    if list(cameras) == want:
        return None
    return (f"profile {p.name}'s model was trained on the cameras in the order {', '.join(want)}; the rig lists "
            f"them as {', '.join(cameras)} (list the rig's cameras in the model's order; for a model trained on "
            "another order, register a profile with that camera_order)")


def profile_stages(name: "str | Profile", fidelity: Fidelity = "reference", camera: Optional[Camera] = None) -> list[Stage]:
    """The stage list of profile ``name``.

    At fidelity ``reference`` the order is the reference's (BEVFormer normalises at full
    resolution, then resizes the float image); at ``fast`` the resize comes first so that it can
    fuse with decode (JPEG DCT scaling). Crops need the camera size to place the window.
    """
    p = _get(name)
    norm = Normalise(mean=p.mean, std=p.std, to_rgb=p.to_rgb)
    geo: list[Stage] = []
    scale = p.scale_for(camera)
    if scale is not None:
        # every repository scales its camera matrices by the nominal factor (RandomScaleImageMultiViewImage's
        # diag(s, s), PETR's ida_rot *= resize, BEVDet's post_rot *= resize)
        geo.append(Resize(scale=scale, interpolation=p.interpolation, geometry="nominal"))
    if p.crop_bottom is not None:
        if camera is None:
            raise ConfigError(f"profile {p.name} crops relative to the image size; pass the camera")
        h, w = geometry.scaled_size((camera.height, camera.width), scale) if scale else (camera.height, camera.width)
        cw = min(p.crop_width or w, w)
        ch = min(p.crop_bottom, h)
        geo.append(Crop(left=int(max(0, w - cw) / 2), top=h - ch, width=cw, height=ch))
    pad = [Pad(size_divisor=p.size_divisor)] if p.size_divisor else []
    if p.normalise_first and fidelity == "reference":
        return [Decode(), norm, *geo, *pad]
    return [Decode(), *geo, norm, *pad]


def generic_metas(camera: Camera, img_aug: np.ndarray, prepad_size: tuple[int, int],
                  out_size: tuple[int, int]) -> dict:
    """Metas for a pipeline without a profile: geometry from ``img_aug``, shapes as ``(H, W, 3)``.

    ``prepad_size`` and ``out_size`` are ``(height, width)`` in pixels (``CameraPlan``'s).

    ``camera`` is the camera whose ``intrinsics`` ``img_aug`` applies to: the plan's
    ``CameraPlan.metas_camera`` (K' after an ``Undistort``, :mod:`dvpipe.geometry`)."""
    return {
        "camera": camera.name,
        "lidar2img": geometry.lidar2img(camera.projection, camera.lidar2cam, img_aug),
        "cam2img": geometry.cam2img(camera.projection, img_aug),
        "lidar2cam": np.array(camera.lidar2cam),
        "img_aug": np.array(img_aug),
        "img_shape": (*out_size, 3),
        "ori_shape": (*prepad_size, 3),
        "pad_shape": (*out_size, 3),
    }


def img_norm_cfg(stages: Sequence[Stage]) -> Optional[dict]:
    """mmcv's ``img_norm_cfg`` of the normalisation a stage list runs, or None when it runs none.

    ``mean`` / ``std`` (float32, 0..255 units) in the order of the normalised channels, as mmcv's
    ``imnormalize`` takes them (after the BGR -> RGB swap when ``to_rgb``), which is the order
    :class:`~dvpipe.stages.Normalise` takes them in.
    """
    for st in stages:
        if getattr(st, "op", None) == "normalise" and hasattr(st, "mean") and hasattr(st, "std"):
            return {"mean": np.array(st.mean, dtype=np.float32), "std": np.array(st.std, dtype=np.float32),
                    "to_rgb": bool(getattr(st, "to_rgb", False))}
    return None


def profile_metas(name: "str | Profile | None", camera: Camera, img_aug: np.ndarray, prepad_size: tuple[int, int],
                  out_size: tuple[int, int], stages: Optional[Sequence[Stage]] = None) -> dict:
    """Per-camera ``img_metas`` as profile ``name`` (None: generic) defines them.

    Args:
        prepad_size: ``(height, width)`` in pixels before the first Pad (``CameraPlan.prepad_size``).
        out_size: ``(height, width)`` in pixels of the batch image (``CameraPlan.out_size``).
        stages: the stages the pipeline runs. Given, ``img_norm_cfg`` describes their normalisation
            (none: no ``img_norm_cfg``), whatever the profile's own is; None: the profile's.

    The arrays are read-only: every batch shares them (copy one to change it).
    """
    metas = _profile_metas(name, camera, img_aug, prepad_size, out_size)
    if stages is not None and name is not None:
        cfg = img_norm_cfg(stages)
        if cfg is None:
            metas.pop("img_norm_cfg", None)
        else:
            metas["img_norm_cfg"] = cfg
    for value in metas.values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
        elif isinstance(value, dict):
            for v in value.values():
                if isinstance(v, np.ndarray):
                    v.setflags(write=False)
    return metas


def _profile_metas(name: "str | Profile | None", camera: Camera, img_aug: np.ndarray, prepad_size: tuple[int, int],
                   out_size: tuple[int, int]) -> dict:
    metas = generic_metas(camera, img_aug, prepad_size, out_size)
    if name is None:
        return metas
    p = _get(name)
    metas["img_norm_cfg"] = {"mean": np.array(p.mean, dtype=np.float32), "std": np.array(p.std, dtype=np.float32),
                             "to_rgb": p.to_rgb}
    contract = _METAS_CONTRACTS.get(p.metas)
    if contract is None:
        raise ConfigError(f"profile {p.name}: unknown metas contract {p.metas!r}; known: {', '.join(_METAS_CONTRACTS)} "
                          "(add one with dvpipe.profiles.register_metas_contract)")
    contract(p, camera, img_aug, metas)
    if p.can_bus_rotation is not None:
        metas["can_bus_rotation"] = p.can_bus_rotation  # read by dvpipe.mmdet3d.Mmdet3dMetas, not passed on
    return metas
