"""PETR's test-time dataset and transforms, written from megvii-research/PETR@f7525f9:
``projects/mmdet3d_plugin/datasets/nuscenes_dataset.py`` (``CustomNuScenesDataset.get_data_info``)
and ``projects/mmdet3d_plugin/datasets/pipelines/transform_3d.py`` (``PadMultiViewImage``,
``NormalizeMultiviewImage``, ``ResizeCropFlipImage``). Collection is mmdet3d 0.17.1's own ``Collect3D``.

Differences from the original:

* only the test path of ``ResizeCropFlipImage`` runs here (``training=False``: no random resize,
  flip or rotation), but its arithmetic is the original's (torch float32 ``ida_rot`` / ``ida_tran``,
  ``ida_mat @ intrinsics[:3, :3]`` with a torch tensor on the left, ``intrinsics @ extrinsics.T``);
  the training transforms of the module (``GlobalRotScaleTransImage``, ``ResizeMultiview3D``,
  albumentations) and the ``LoadMultiViewImageFromMultiSweepsFiles`` loader (PETRv2) are left out.
"""
import mmcv
import numpy as np
import torch
from mmdet.datasets import DATASETS
from mmdet.datasets.builder import PIPELINES
from mmdet3d.datasets import NuScenesDataset
from PIL import Image


@DATASETS.register_module()
class CustomNuScenesDataset(NuScenesDataset):
    def get_data_info(self, index):
        info = self.data_infos[index]
        input_dict = dict(sample_idx=info['token'], pts_filename=info['lidar_path'], sweeps=info['sweeps'],
                          timestamp=info['timestamp'] / 1e6)
        if self.modality['use_camera']:
            image_paths, lidar2img_rts, intrinsics, extrinsics, img_timestamp = [], [], [], [], []
            for cam_type, cam_info in info['cams'].items():
                img_timestamp.append(cam_info['timestamp'] / 1e6)
                image_paths.append(cam_info['data_path'])
                lidar2cam_r = np.linalg.inv(cam_info['sensor2lidar_rotation'])
                lidar2cam_t = cam_info['sensor2lidar_translation'] @ lidar2cam_r.T
                lidar2cam_rt = np.eye(4)
                lidar2cam_rt[:3, :3] = lidar2cam_r.T
                lidar2cam_rt[3, :3] = -lidar2cam_t
                intrinsic = cam_info['cam_intrinsic']
                viewpad = np.eye(4)
                viewpad[:intrinsic.shape[0], :intrinsic.shape[1]] = intrinsic
                intrinsics.append(viewpad)
                extrinsics.append(lidar2cam_rt)
                lidar2img_rts.append(viewpad @ lidar2cam_rt.T)
            input_dict.update(dict(img_timestamp=img_timestamp, img_filename=image_paths, lidar2img=lidar2img_rts,
                                   intrinsics=intrinsics, extrinsics=extrinsics))
        if not self.test_mode:
            input_dict['ann_info'] = self.get_ann_info(index)
        return input_dict


@PIPELINES.register_module()
class PadMultiViewImage(object):
    def __init__(self, size=None, size_divisor=None, pad_val=0):
        self.size, self.size_divisor, self.pad_val = size, size_divisor, pad_val
        assert size is not None or size_divisor is not None
        assert size is None or size_divisor is None

    def __call__(self, results):
        if self.size is not None:
            padded = [mmcv.impad(img, shape=self.size, pad_val=self.pad_val) for img in results['img']]
        else:
            padded = [mmcv.impad_to_multiple(img, self.size_divisor, pad_val=self.pad_val) for img in results['img']]
        results['img_shape'] = [img.shape for img in results['img']]  # PETR: pre-pad; ori_shape is left alone
        results['img'] = padded
        results['pad_shape'] = [img.shape for img in padded]
        results['pad_fixed_size'] = self.size
        results['pad_size_divisor'] = self.size_divisor
        return results


@PIPELINES.register_module()
class NormalizeMultiviewImage(object):
    def __init__(self, mean, std, to_rgb=True):
        self.mean = np.array(mean, dtype=np.float32)
        self.std = np.array(std, dtype=np.float32)
        self.to_rgb = to_rgb

    def __call__(self, results):
        results['img'] = [mmcv.imnormalize(img, self.mean, self.std, self.to_rgb) for img in results['img']]
        results['img_norm_cfg'] = dict(mean=self.mean, std=self.std, to_rgb=self.to_rgb)
        return results


@PIPELINES.register_module()
class ResizeCropFlipImage(object):
    def __init__(self, data_aug_conf=None, training=True):
        self.data_aug_conf = data_aug_conf
        self.training = training
        assert not training, "the harness runs the test pipeline (training=False)"

    def __call__(self, results):
        imgs = results['img']
        resize, resize_dims, crop, flip, rotate = self._sample_augmentation()
        new_imgs = []
        for i in range(len(imgs)):
            img = Image.fromarray(np.uint8(imgs[i]))
            img, ida_mat = self._img_transform(img, resize, resize_dims, crop, flip, rotate)
            new_imgs.append(np.array(img).astype(np.float32))
            results['intrinsics'][i][:3, :3] = ida_mat @ results['intrinsics'][i][:3, :3]
        results['img'] = new_imgs
        results['lidar2img'] = [results['intrinsics'][i] @ results['extrinsics'][i].T
                                for i in range(len(results['extrinsics']))]
        return results

    @staticmethod
    def _get_rot(h):
        return torch.Tensor([[np.cos(h), np.sin(h)], [-np.sin(h), np.cos(h)]])

    def _img_transform(self, img, resize, resize_dims, crop, flip, rotate):
        ida_rot = torch.eye(2)
        ida_tran = torch.zeros(2)
        img = img.resize(resize_dims)
        img = img.crop(crop)
        if flip:
            img = img.transpose(method=Image.FLIP_LEFT_RIGHT)
        img = img.rotate(rotate)
        ida_rot *= resize
        ida_tran -= torch.Tensor(crop[:2])
        if flip:
            A = torch.Tensor([[-1, 0], [0, 1]])
            b = torch.Tensor([crop[2] - crop[0], 0])
            ida_rot = A.matmul(ida_rot)
            ida_tran = A.matmul(ida_tran) + b
        A = self._get_rot(rotate / 180 * np.pi)
        b = torch.Tensor([crop[2] - crop[0], crop[3] - crop[1]]) / 2
        b = A.matmul(-b) + b
        ida_rot = A.matmul(ida_rot)
        ida_tran = A.matmul(ida_tran) + b
        ida_mat = torch.eye(3)
        ida_mat[:2, :2] = ida_rot
        ida_mat[:2, 2] = ida_tran
        return img, ida_mat

    def _sample_augmentation(self):
        H, W = self.data_aug_conf['H'], self.data_aug_conf['W']
        fH, fW = self.data_aug_conf['final_dim']
        resize = max(fH / H, fW / W)
        resize_dims = (int(W * resize), int(H * resize))
        newW, newH = resize_dims
        crop_h = int((1 - np.mean(self.data_aug_conf['bot_pct_lim'])) * newH) - fH
        crop_w = int(max(0, newW - fW) / 2)
        crop = (crop_w, crop_h, crop_w + fW, crop_h + fH)
        return resize, resize_dims, crop, False, 0
