"""Independent reference of BEVDet's test-time image input, nothing from dvpipe.

Written from HuangJunJie2017/BEVDet@1bacecb (master) ``mmdet3d/datasets/pipelines/loading.py``
``LoadMultiViewImageFromFiles_BEVDet`` (``sample_augmentation`` with ``is_train=False``,
``img_transform``, ``normalize_img``): Pillow decodes (RGB) and resizes; ``ToTensor`` divides by 255
and ``Normalize`` subtracts / divides the ImageNet mean / std, in float32 as torch does; ``post_rot``
and ``post_tran`` are float32 as the repository's torch tensors are.
"""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def bevdet_augmentation(H: int, W: int, data_config: dict):
    """``sample_augmentation`` at test time: (resize, resize_dims (W, H), crop box)."""
    fH, fW = data_config["input_size"]
    resize = float(fW) / float(W)
    resize += data_config.get("resize_test", 0.0)
    resize_dims = (int(W * resize), int(H * resize))
    newW, newH = resize_dims
    crop_h = int((1 - np.mean(data_config["crop_h"])) * newH) - fH
    crop_w = int(max(0, newW - fW) / 2)
    return resize, resize_dims, (crop_w, crop_h, crop_w + fW, crop_h + fH)


def bevdet_reference(encoded: list[bytes], data_config: dict):
    """Returns (imgs (N, 3, fH, fW) float32 RGB, post_rots (N, 3, 3), post_trans (N, 3))."""
    imgs, rots, trans = [], [], []
    for data in encoded:
        img = Image.open(io.BytesIO(data))
        resize, dims, crop = bevdet_augmentation(img.height, img.width, data_config)
        img = img.resize(dims).crop(crop).rotate(0)
        x = np.asarray(img).astype(np.float32).transpose(2, 0, 1) / np.float32(255)  # ToTensor
        x = (x - MEAN[:, None, None]) / STD[:, None, None]                              # Normalize
        imgs.append(x.astype(np.float32))
        rot = np.eye(3, dtype=np.float32)
        rot[:2, :2] *= np.float32(resize)
        tran = np.zeros(3, dtype=np.float32)
        tran[:2] -= np.array(crop[:2], dtype=np.float32)
        rots.append(rot)
        trans.append(tran)
    return np.stack(imgs), np.stack(rots), np.stack(trans)
