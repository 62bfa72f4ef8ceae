"""Map an mmdet3d ``test_pipeline`` to a dvpipe :class:`~dvpipe.profiles.Profile`.

Each transform below is mapped from its published test-time behaviour (``training=False``):

=====================================  ==========================================================
``LoadMultiViewImageFromFiles``        decode to HxWx3 uint8 BGR (mmcv ``imread``, ``unchanged``)
``NormalizeMultiviewImage``            ``Normalise(mean, std, to_rgb)`` (mmcv ``imnormalize``;
                                       ``to_rgb`` defaults to True, as in the plugins)
``RandomScaleImageMultiViewImage``     one scale: OpenCV bilinear resize of the float image by
                                       ``int(W*s) x int(H*s)``, ``lidar2img`` scaled (BEVFormer)
``ResizeCropFlipImage`` (PETR),        ``resize = max(fH/H, fW/W)``, Pillow bicubic on uint8,
``ResizeCropFlipRotImage`` (StreamPETR) bottom ``fH`` rows, centred ``fW`` columns (PETR contract)
``LoadMultiViewImageFromFiles_BEVDet`` Pillow decode, ``resize = fW/W + resize_test``, Pillow
                                       bicubic, crop, ImageNet mean/std in RGB (BEVDet contract)
``PadMultiViewImage``                  ``Pad(size_divisor)`` with 0 after normalising
``MultiScaleFlipAug3D``                one scale and ``flip=False``: its inner transforms
``GridMask``                           nothing (a no-op at test time)
formatting / collect / point loading   nothing (they do not touch the images)
=====================================  ==========================================================

Camera order: BEVDet's loader reads the cameras in ``data_config['cams']`` order, whatever the
info file's order; :attr:`MappedConfig.cameras` keeps that list, :func:`order_rig` reorders a rig by
name to it and :func:`check_rig` refuses a rig in another order (one line naming both orders).
BEVFormer's and PETR's datasets take the info file's ``cams`` order (the converter's: FRONT,
FRONT_RIGHT, FRONT_LEFT, BACK, BACK_LEFT, BACK_RIGHT), which their configs do not state.

Anything else, or a mapped transform with options that change its meaning (``training=True``, a
flip, several scales), is refused with a one-line :class:`~dvpipe.ConfigError` naming it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..errors import ConfigError
from ..profiles import NUSCENES_INFO_ORDER, Profile

__all__ = ["MappedConfig", "map_test_pipeline", "find_test_pipeline", "profile_from_config", "check_rig", "order_rig"]

#: Transforms that leave the images and the camera matrices alone.
_NO_IMAGE_EFFECT = frozenset({
    "DefaultFormatBundle3D", "PETRFormatBundle3D", "DefaultFormatBundle", "CustomCollect3D", "Collect3D",
    "Pack3DDetInputs", "LoadPointsFromFile", "LoadPointsFromMultiSweeps", "GridMask",
})
#: BEVDet's loader normalises inside (torchvision ``Normalize`` on ``ToTensor``'s 0..1 RGB), here in 0..255.
_BEVDET_NORM = dict(mean=(0.485 * 255, 0.456 * 255, 0.406 * 255), std=(0.229 * 255, 0.224 * 255, 0.225 * 255),
                    to_rgb=True)


@dataclass(frozen=True)
class MappedConfig:
    """A test pipeline mapped to a profile.

    Attributes:
        profile: the stages and metas contract (``profile.metas``: ``bevformer``, ``petr``, ``bevdet``).
        camera_size: ``(height, width)`` in pixels the pipeline assumes (PETR's ``data_aug_conf`` H, W), or None.
        transforms: the transform names read, in order (after flattening ``MultiScaleFlipAug3D``).
        skipped: the transforms ignored on the caller's request.
        cameras: the camera names in the order the model reads them, where the config states it
            (BEVDet's ``data_config['cams']``), else None.
    """

    profile: Profile
    camera_size: Optional[tuple[int, int]] = None
    transforms: tuple[str, ...] = ()
    skipped: tuple[str, ...] = field(default_factory=tuple)
    cameras: Optional[tuple[str, ...]] = None


def _type(t: Any, where: str) -> str:
    if not isinstance(t, Mapping) or not isinstance(t.get("type"), str):
        raise ConfigError(f"{where}: a transform must be a dict with a 'type' string, got {t!r:.60}")
    return t["type"].rsplit(".", 1)[-1]  # 'mmdet3d.LoadMultiViewImageFromFiles' (mmengine scope)


def find_test_pipeline(cfg: Mapping) -> list:
    """The test pipeline of a loaded config: ``data.test.pipeline`` (mmcv 1.x),
    ``test_dataloader.dataset.pipeline`` (mmengine), else ``test_pipeline``."""
    for path in (("data", "test", "pipeline"), ("test_dataloader", "dataset", "pipeline"), ("test_pipeline",)):
        value: Any = cfg
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, (list, tuple)):
            return list(value)
    raise ConfigError("the config defines no test pipeline (data.test.pipeline, test_dataloader.dataset.pipeline "
                      "or test_pipeline)")


def _flatten(pipeline: Sequence, where: str) -> list:
    out = []
    for i, t in enumerate(pipeline):
        name = _type(t, f"{where}[{i}]")
        if name == "MultiScaleFlipAug3D":
            if t.get("flip", False):
                raise ConfigError("MultiScaleFlipAug3D(flip=True) is test-time augmentation; dvpipe maps flip=False only")
            scale = t.get("img_scale")
            if isinstance(scale, list) and len(scale) > 1:
                raise ConfigError("MultiScaleFlipAug3D with several img_scale values is not mapped (one scale only)")
            ratio = t.get("pts_scale_ratio", 1)
            if (ratio if not isinstance(ratio, (list, tuple)) else list(ratio)) not in (1, 1.0, [1], [1.0]):
                raise ConfigError(f"MultiScaleFlipAug3D(pts_scale_ratio={ratio!r}) is not mapped (1 only)")
            out.extend(_flatten(t.get("transforms", []), f"{where}[{i}].transforms"))
        else:
            out.append(t)
    return out


def _petr_aug(t: Mapping, name: str) -> tuple[float, tuple[int, int], tuple[int, int]]:
    if t.get("training", True):
        raise ConfigError(f"{name}(training=True) is the training augmentation; the test pipeline has training=False")
    conf: Any = t.get("data_aug_conf")  # None or malformed: the except below says what is needed
    try:
        H, W = int(conf["H"]), int(conf["W"])
        fH, fW = (int(v) for v in conf["final_dim"])
        bot = float(np.mean(conf.get("bot_pct_lim", (0.0, 0.0))))
    except (TypeError, KeyError, ValueError):
        raise ConfigError(f"{name}.data_aug_conf needs H, W and final_dim=(height, width)") from None
    if bot != 0.0:
        raise ConfigError(f"{name}: bot_pct_lim with a non-zero mean ({bot}) is not mapped")
    return max(fH / H, fW / W), (H, W), (fH, fW)


def map_test_pipeline(pipeline: Sequence, name: str = "mmdet3d", skip: Iterable[str] = ()) -> MappedConfig:
    """Map a test pipeline (a list of transform dicts) to a :class:`MappedConfig`.

    Args:
        pipeline: the transforms, as the config lists them.
        name: the profile's name.
        skip: transform names to ignore, on the caller's responsibility (e.g. PETRv2's
            ``LoadMultiViewImageFromMultiSweepsFiles``, whose past frames dvpipe does not assemble).

    Raises:
        ConfigError: a transform that cannot be mapped, named in the message.
    """
    skip = frozenset(skip)
    flat = _flatten(pipeline, "test_pipeline")
    names, skipped = [], []
    seq: list[str] = []  # the image ops in order: load, norm, resize, crop, pad
    norm: Optional[dict] = None
    scale = None
    fit = None  # BEVDet: (fit_width, offset)
    crop: Optional[tuple[int, int]] = None  # (rows kept at the bottom, centred columns)
    interpolation = "linear"
    divisor = None
    metas = None
    camera_size = None
    cameras: Optional[tuple[str, ...]] = None
    for t in flat:
        tname = _type(t, "test_pipeline")
        names.append(tname)
        if tname in skip:
            skipped.append(tname)
            continue
        if tname in _NO_IMAGE_EFFECT:
            continue
        if tname == "LoadMultiViewImageFromFiles":
            if t.get("color_type", "unchanged") not in ("unchanged", "color"):
                raise ConfigError(f"LoadMultiViewImageFromFiles(color_type={t['color_type']!r}) is not mapped "
                                  "(unchanged or color)")
            seq.append("load")
        elif tname == "LoadMultiViewImageFromFiles_BEVDet":
            dc = t.get("data_config") or {}
            if t.get("is_train", False) or t.get("sequential", False):
                raise ConfigError("LoadMultiViewImageFromFiles_BEVDet with is_train or sequential (adjacent frames) "
                                  "is not mapped")
            try:
                fH, fW = (int(v) for v in dc["input_size"])
                crop_h = float(np.mean(dc.get("crop_h", (0.0, 0.0))))
            except (TypeError, KeyError, ValueError):
                raise ConfigError("LoadMultiViewImageFromFiles_BEVDet.data_config needs input_size=(height, width)") \
                    from None
            if crop_h != 0.0:
                raise ConfigError(f"LoadMultiViewImageFromFiles_BEVDet: crop_h with a non-zero mean ({crop_h}) "
                                  "is not mapped")
            cams = dc.get("cams")
            if cams is not None:
                if not isinstance(cams, (list, tuple)) or not all(isinstance(c, str) for c in cams) \
                        or len(set(cams)) != len(cams):
                    raise ConfigError("LoadMultiViewImageFromFiles_BEVDet.data_config['cams'] must list distinct "
                                      "camera names")
                cameras = tuple(cams)
            fit = (fW, float(dc.get("resize_test", 0.0)))
            crop, interpolation, norm, metas = (fH, fW), "pil_bicubic", dict(_BEVDET_NORM), "bevdet"
            seq += ["load", "resize", "crop", "norm"]
        elif tname == "NormalizeMultiviewImage":
            try:
                norm = dict(mean=tuple(float(v) for v in t["mean"]), std=tuple(float(v) for v in t["std"]),
                            to_rgb=bool(t.get("to_rgb", True)))
            except (KeyError, TypeError, ValueError):
                raise ConfigError("NormalizeMultiviewImage needs mean and std (three numbers each)") from None
            seq.append("norm")
        elif tname == "RandomScaleImageMultiViewImage":
            scales = t.get("scales")
            if not isinstance(scales, (list, tuple)) or len(scales) != 1:
                raise ConfigError(f"RandomScaleImageMultiViewImage(scales={scales!r}) is random at test time; "
                                  "one scale only")
            scale, metas = float(scales[0]), metas or "bevformer"
            seq.append("resize")
        elif tname in ("ResizeCropFlipImage", "ResizeCropFlipRotImage"):
            scale, camera_size, (fH, fW) = _petr_aug(t, tname)
            crop, interpolation, metas = (fH, fW), "pil_bicubic", "petr"
            seq += ["resize", "crop"]
        elif tname == "PadMultiViewImage":
            if t.get("size") is not None or t.get("size_divisor") is None:
                raise ConfigError("PadMultiViewImage(size=...) is not mapped; size_divisor only")
            if t.get("pad_val", 0) != 0:
                raise ConfigError(f"PadMultiViewImage(pad_val={t['pad_val']!r}) is not mapped (0 only)")
            divisor = int(t["size_divisor"])
            seq.append("pad")
        else:
            raise ConfigError(f"test pipeline transform {tname} has no dvpipe mapping "
                              f"(skip=[{tname!r}] ignores it on your responsibility)")
    _check_order(seq)
    if norm is None:
        raise ConfigError("the test pipeline has no NormalizeMultiviewImage; dvpipe needs the normalisation")
    normalise_first = "resize" in seq and seq.index("norm") < seq.index("resize")
    profile = Profile(name, **norm, scale=None if fit else scale, crop_bottom=crop[0] if crop else None,
                      crop_width=crop[1] if crop else None, size_divisor=divisor, normalise_first=normalise_first,
                      metas=metas or "bevformer", source=f"mmdet3d config ({' -> '.join(names)})",
                      fit_width=fit[0] if fit else None, scale_offset=fit[1] if fit else 0.0,
                      interpolation=interpolation, can_bus_rotation="published" if metas in (None, "bevformer") else None,
                      camera_order=cameras if metas == "bevdet" else NUSCENES_INFO_ORDER)
    return MappedConfig(profile, camera_size, tuple(names), tuple(skipped), cameras)


def _check_order(seq: list[str]) -> None:
    if seq.count("load") != 1 or seq[0] != "load":
        raise ConfigError("the test pipeline must load the images once, first (LoadMultiViewImageFromFiles)")
    for op in ("norm", "resize", "crop", "pad"):
        if seq.count(op) > 1:
            raise ConfigError(f"the test pipeline has two {op} transforms; dvpipe maps one of each")
    if "pad" in seq and seq[-1] != "pad":
        raise ConfigError("PadMultiViewImage must come after the other image transforms to be mapped")
    if "norm" in seq and "pad" in seq and seq.index("pad") < seq.index("norm"):
        raise ConfigError("PadMultiViewImage before NormalizeMultiviewImage is not mapped")


def profile_from_config(config, *, skip: Iterable[str] = (), allow_code: bool = False) -> MappedConfig:
    """Load ``config`` (a ``.py`` path or a loaded dict) and map its test pipeline (see :func:`map_test_pipeline`)."""
    import os
    from pathlib import Path

    from ._config import load_config

    cfg = load_config(config, allow_code=allow_code)
    name = "mmdet3d:" + (Path(config).stem if isinstance(config, (str, os.PathLike)) else "dict")
    return map_test_pipeline(find_test_pipeline(cfg), name=name, skip=skip)


def _order_problem(mapped: MappedConfig, names: Sequence[str]) -> Optional[str]:
    if mapped.cameras is None or tuple(names) == mapped.cameras:
        return None
    same = sorted(names) == sorted(mapped.cameras)
    return (f"the config's data_config['cams'] reads the cameras as {', '.join(mapped.cameras)}; the rig lists "
            f"{', '.join(names)}" + (" (list the rig's cameras in the config's order)" if same else
                                     " (name the rig's cameras as the config does)"))


def order_rig(mapped: MappedConfig, rig):
    """``rig`` with its cameras in the config's order (:attr:`MappedConfig.cameras`), reordered by name.

    Raises:
        ConfigError: the rig's camera names are not the config's (one line naming both lists).
    """
    from dataclasses import replace

    if mapped.cameras is None or rig.names == mapped.cameras:
        return rig
    if sorted(rig.names) != sorted(mapped.cameras):
        raise ConfigError(str(_order_problem(mapped, rig.names)))
    return replace(rig, cameras=tuple(rig[name] for name in mapped.cameras))


def check_rig(mapped: MappedConfig, cameras) -> None:
    """Raise :class:`ConfigError` when a camera's size differs from the size the config assumes, or
    the cameras are not in the order the config states (:func:`order_rig` reorders a rig)."""
    problem = _order_problem(mapped, [c.name for c in cameras])
    if problem:
        raise ConfigError(problem)
    if mapped.camera_size is None:
        return
    wrong = [c for c in cameras if (c.height, c.width) != mapped.camera_size]
    if wrong:
        h, w = mapped.camera_size
        raise ConfigError(f"the config's data_aug_conf assumes {w}x{h} images; camera {wrong[0].name} is "
                          f"{wrong[0].width}x{wrong[0].height}")
