"""Independent reference of PETR's / StreamPETR's test-time image transform, nothing from dvpipe.

Written from megvii-research/PETR@f7525f9 ``projects/mmdet3d_plugin/datasets/pipelines/transform_3d.py``
(``ResizeCropFlipImage._sample_augmentation`` with ``training=False`` and ``_img_transform``; StreamPETR's
``ResizeCropFlipRotImage`` at exiawsh/StreamPETR@95f6470 is the same at test time) and mmcv 1.x's
``imread`` / ``imnormalize`` / ``impad_to_multiple``. Pillow does the resize and crop as the repository
does (``Image.fromarray(np.uint8(img)).resize(dims).crop(box).rotate(0)``); the ``ida_mat`` is float32
as the repository's torch tensors are.
"""
from __future__ import annotations

import math

import cv2
import numpy as np
from PIL import Image

from _bevformer_ref import imnormalize


def petr_augmentation(conf: dict):
    """``_sample_augmentation`` at test time: (resize, resize_dims (W, H), crop box (x0, y0, x1, y1))."""
    H, W = conf["H"], conf["W"]
    fH, fW = conf["final_dim"]
    resize = max(fH / H, fW / W)
    resize_dims = (int(W * resize), int(H * resize))
    newW, newH = resize_dims
    crop_h = int((1 - np.mean(conf["bot_pct_lim"])) * newH) - fH
    crop_w = int(max(0, newW - fW) / 2)
    return resize, resize_dims, (crop_w, crop_h, crop_w + fW, crop_h + fH)


def petr_reference(encoded: list[bytes], intrinsics: list[np.ndarray], lidar2cams: list[np.ndarray], conf: dict,
                   mean, std, to_rgb: bool, size_divisor: int = 32):
    """Returns (img (N, 3, Hp, Wp) float32, metas list with intrinsics (4x4), lidar2img, img_shape, pad_shape)."""
    resize, dims, crop = petr_augmentation(conf)
    imgs, metas = [], []
    for data, K, l2c in zip(encoded, intrinsics, lidar2cams):
        x = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED).astype(np.float32)  # to_float32
        img = Image.fromarray(np.uint8(x)).resize(dims).crop(crop).rotate(0)
        x = np.array(img).astype(np.float32)
        ida = np.eye(3, dtype=np.float32)
        ida[:2, :2] *= np.float32(resize)
        ida[:2, 2] -= np.array(crop[:2], dtype=np.float32)
        viewpad = np.eye(4)
        viewpad[:3, :3] = ida @ np.asarray(K, dtype=np.float64)
        lidar2img = viewpad @ np.asarray(l2c, dtype=np.float64)  # intrinsics @ extrinsics.T
        x = imnormalize(x, mean, std, to_rgb)
        img_shape = x.shape
        hp, wp = math.ceil(x.shape[0] / size_divisor) * size_divisor, math.ceil(x.shape[1] / size_divisor) * size_divisor
        x = np.pad(x, ((0, hp - x.shape[0]), (0, wp - x.shape[1]), (0, 0)), constant_values=0)
        imgs.append(x.transpose(2, 0, 1))
        metas.append({"intrinsics": viewpad, "lidar2img": lidar2img, "img_shape": img_shape, "pad_shape": x.shape})
    return np.ascontiguousarray(np.stack(imgs)), metas
