"""BEVDet's test-time dataset and image loader, written from HuangJunJie2017/BEVDet@1bacecb (a fork of
mmdet3d 0.17.2): ``mmdet3d/datasets/nuscenes_dataset.py`` (``NuScenesDataset.get_data_info`` with
``img_info_prototype='bevdet'``) and ``mmdet3d/datasets/pipelines/loading.py``
(``LoadMultiViewImageFromFiles_BEVDet``). Everything else (``LoadPointsFromFile``,
``MultiScaleFlipAug3D``, ``DefaultFormatBundle3D``, ``Collect3D``) is mmdet3d 0.17.1's own.

Differences from the original:

* the dataset is a subclass of mmdet3d 0.17.1's ``NuScenesDataset`` registered as
  ``BEVDetNuScenesDataset`` (the fork edits the class in place); only the ``bevdet`` prototype is
  kept (not ``mmcv`` or ``bevdet_sequential``: no adjacent frames), and only the test path.
* the loader keeps ``is_train=False`` and ``sequential=False`` only (no random augmentation, no
  adjacent frames); ``get_inputs``, ``img_transform`` and ``sample_augmentation`` at test time
  are the original's arithmetic (torch float32 ``post_rot`` / ``post_tran``).
* the fork's ``Collect3D`` / ``MultiScaleFlipAug3D`` at 1bacecb are mmdet3d 0.17.2's; 0.17.1's run
  here (the test-time aug module is identical; Collect3D's default meta_keys are the same).
"""
import numpy as np
import torch
import torchvision
from mmdet.datasets import DATASETS
from mmdet.datasets.builder import PIPELINES
from mmdet3d.datasets import NuScenesDataset
from PIL import Image


@DATASETS.register_module()
class BEVDetNuScenesDataset(NuScenesDataset):
    def __init__(self, *args, img_info_prototype='bevdet', **kwargs):
        assert img_info_prototype == 'bevdet'
        self.img_info_prototype = img_info_prototype
        super().__init__(*args, **kwargs)

    def get_data_info(self, index):
        info = self.data_infos[index]
        input_dict = dict(sample_idx=info['token'], pts_filename=info['lidar_path'], sweeps=info['sweeps'],
                          timestamp=info['timestamp'] / 1e6)
        if self.modality['use_camera']:
            input_dict.update(dict(img_info=info['cams']))
        if not self.test_mode:
            input_dict['ann_info'] = self.get_ann_info(index)
        return input_dict


@PIPELINES.register_module()
class LoadMultiViewImageFromFiles_BEVDet(object):
    def __init__(self, data_config, is_train=False, sequential=False, aligned=False, trans_only=True):
        assert not is_train and not sequential, "the harness runs BEVDet's single-frame test pipeline"
        self.is_train = is_train
        self.data_config = data_config
        self.normalize_img = torchvision.transforms.Compose((
            torchvision.transforms.ToTensor(),
            torchvision.transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])))

    @staticmethod
    def get_rot(h):
        return torch.Tensor([[np.cos(h), np.sin(h)], [-np.sin(h), np.cos(h)]])

    def img_transform(self, img, post_rot, post_tran, resize, resize_dims, crop, flip, rotate):
        img = img.resize(resize_dims)
        img = img.crop(crop)
        if flip:
            img = img.transpose(method=Image.FLIP_LEFT_RIGHT)
        img = img.rotate(rotate)
        post_rot *= resize
        post_tran -= torch.Tensor(crop[:2])
        if flip:
            A = torch.Tensor([[-1, 0], [0, 1]])
            b = torch.Tensor([crop[2] - crop[0], 0])
            post_rot = A.matmul(post_rot)
            post_tran = A.matmul(post_tran) + b
        A = self.get_rot(rotate / 180 * np.pi)
        b = torch.Tensor([crop[2] - crop[0], crop[3] - crop[1]]) / 2
        b = A.matmul(-b) + b
        post_rot = A.matmul(post_rot)
        post_tran = A.matmul(post_tran) + b
        return img, post_rot, post_tran

    def sample_augmentation(self, H, W):
        fH, fW = self.data_config['input_size']
        resize = float(fW) / float(W)
        resize += self.data_config.get('resize_test', 0.0)
        resize_dims = (int(W * resize), int(H * resize))
        newW, newH = resize_dims
        crop_h = int((1 - np.mean(self.data_config['crop_h'])) * newH) - fH
        crop_w = int(max(0, newW - fW) / 2)
        crop = (crop_w, crop_h, crop_w + fW, crop_h + fH)
        return resize, resize_dims, crop, False, 0

    def __call__(self, results):
        imgs, rots, trans, intrins, post_rots, post_trans = [], [], [], [], [], []
        for cam in self.data_config['cams']:
            cam_data = results['img_info'][cam]
            img = Image.open(cam_data['data_path'])
            intrin = torch.Tensor(cam_data['cam_intrinsic'])
            rot = torch.Tensor(cam_data['sensor2lidar_rotation'])
            tran = torch.Tensor(cam_data['sensor2lidar_translation'])
            resize, resize_dims, crop, flip, rotate = self.sample_augmentation(H=img.height, W=img.width)
            img, post_rot2, post_tran2 = self.img_transform(img, torch.eye(2), torch.zeros(2), resize, resize_dims,
                                                            crop, flip, rotate)
            post_tran = torch.zeros(3)
            post_rot = torch.eye(3)
            post_tran[:2] = post_tran2
            post_rot[:2, :2] = post_rot2
            imgs.append(self.normalize_img(img))
            intrins.append(intrin)
            rots.append(rot)
            trans.append(tran)
            post_rots.append(post_rot)
            post_trans.append(post_tran)
        results['img_inputs'] = tuple(torch.stack(x) for x in (imgs, rots, trans, intrins, post_rots, post_trans))
        return results
