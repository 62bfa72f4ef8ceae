"""BEVFormer's test-time dataset and transforms, written from fundamentalvision/BEVFormer@66b65f3:
``projects/mmdet3d_plugin/datasets/nuscenes_dataset.py`` (``CustomNuScenesDataset.get_data_info``)
and ``projects/mmdet3d_plugin/datasets/pipelines/transform_3d.py`` (``NormalizeMultiviewImage``,
``PadMultiViewImage``, ``RandomScaleImageMultiViewImage``, ``CustomCollect3D``).

Differences from the original:

* only the test path: no ``prepare_train_data`` / ``union2one`` (training queues), no evaluation
  (``_evaluate_single``, ``NuScenesEval_custom``), no ``PhotoMetricDistortionMultiViewImage``;
  the dataset's imports of the model package (``projects.mmdet3d_plugin.models.utils.visual``) are gone.
* everything else is the published behaviour, statement for statement: the can_bus assembly
  (``can_bus[3:7] = Quaternion(...)``, which numpy stores as ``[w, w, w, w]``), ``lidar2img`` /
  ``lidar2cam`` in the original's row-vector construction, ``ori_shape`` rewritten per camera
  by ``PadMultiViewImage``, ``CustomCollect3D``'s meta keys.
"""
import mmcv
import numpy as np
from mmcv.parallel import DataContainer as DC
from mmdet.datasets import DATASETS
from mmdet.datasets.builder import PIPELINES
from mmdet3d.datasets import NuScenesDataset
from nuscenes.eval.common.utils import Quaternion, quaternion_yaw


@DATASETS.register_module()
class CustomNuScenesDataset(NuScenesDataset):
    def __init__(self, queue_length=4, bev_size=(200, 200), overlap_test=False, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.queue_length = queue_length
        self.overlap_test = overlap_test
        self.bev_size = bev_size

    def get_data_info(self, index):
        info = self.data_infos[index]
        input_dict = dict(sample_idx=info['token'], pts_filename=info['lidar_path'], sweeps=info['sweeps'],
                          ego2global_translation=info['ego2global_translation'],
                          ego2global_rotation=info['ego2global_rotation'], prev_idx=info['prev'],
                          next_idx=info['next'], scene_token=info['scene_token'], can_bus=info['can_bus'],
                          frame_idx=info['frame_idx'], timestamp=info['timestamp'] / 1e6)
        if self.modality['use_camera']:
            image_paths, lidar2img_rts, lidar2cam_rts, cam_intrinsics = [], [], [], []
            for cam_type, cam_info in info['cams'].items():
                image_paths.append(cam_info['data_path'])
                lidar2cam_r = np.linalg.inv(cam_info['sensor2lidar_rotation'])
                lidar2cam_t = cam_info['sensor2lidar_translation'] @ lidar2cam_r.T
                lidar2cam_rt = np.eye(4)
                lidar2cam_rt[:3, :3] = lidar2cam_r.T
                lidar2cam_rt[3, :3] = -lidar2cam_t
                intrinsic = cam_info['cam_intrinsic']
                viewpad = np.eye(4)
                viewpad[:intrinsic.shape[0], :intrinsic.shape[1]] = intrinsic
                lidar2img_rts.append(viewpad @ lidar2cam_rt.T)
                cam_intrinsics.append(viewpad)
                lidar2cam_rts.append(lidar2cam_rt.T)
            input_dict.update(dict(img_filename=image_paths, lidar2img=lidar2img_rts, cam_intrinsic=cam_intrinsics,
                                   lidar2cam=lidar2cam_rts))
        if not self.test_mode:
            input_dict['ann_info'] = self.get_ann_info(index)
        rotation = Quaternion(input_dict['ego2global_rotation'])
        translation = input_dict['ego2global_translation']
        can_bus = input_dict['can_bus']
        can_bus[:3] = translation
        can_bus[3:7] = rotation  # numpy stores float(rotation) = w in all four entries
        patch_angle = quaternion_yaw(rotation) / np.pi * 180
        if patch_angle < 0:
            patch_angle += 360
        can_bus[-2] = patch_angle / 180 * np.pi
        can_bus[-1] = patch_angle
        return input_dict


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
        results['ori_shape'] = [img.shape for img in results['img']]
        results['img'] = padded
        results['img_shape'] = [img.shape for img in padded]
        results['pad_shape'] = [img.shape for img in padded]
        results['pad_fixed_size'] = self.size
        results['pad_size_divisor'] = self.size_divisor
        return results


@PIPELINES.register_module()
class RandomScaleImageMultiViewImage(object):
    def __init__(self, scales=[]):  # noqa: B006 - the original's signature
        self.scales = scales
        assert len(self.scales) == 1

    def __call__(self, results):
        rand_scale = self.scales[np.random.permutation(range(len(self.scales)))[0]]
        y_size = [int(img.shape[0] * rand_scale) for img in results['img']]
        x_size = [int(img.shape[1] * rand_scale) for img in results['img']]
        scale_factor = np.eye(4)
        scale_factor[0, 0] *= rand_scale
        scale_factor[1, 1] *= rand_scale
        results['img'] = [mmcv.imresize(img, (x_size[i], y_size[i]), return_scale=False)
                          for i, img in enumerate(results['img'])]
        results['lidar2img'] = [scale_factor @ l2i for l2i in results['lidar2img']]
        results['img_shape'] = [img.shape for img in results['img']]
        results['ori_shape'] = [img.shape for img in results['img']]
        return results


@PIPELINES.register_module()
class CustomCollect3D(object):
    def __init__(self, keys, meta_keys=('filename', 'ori_shape', 'img_shape', 'lidar2img', 'lidar2cam', 'depth2img',
                                        'cam2img', 'pad_shape', 'scale_factor', 'flip', 'pcd_horizontal_flip',
                                        'pcd_vertical_flip', 'box_mode_3d', 'box_type_3d', 'img_norm_cfg',
                                        'pcd_trans', 'sample_idx', 'prev_idx', 'next_idx', 'pcd_scale_factor',
                                        'pcd_rotation', 'pts_filename', 'transformation_3d_flow', 'scene_token',
                                        'can_bus')):
        self.keys, self.meta_keys = keys, meta_keys

    def __call__(self, results):
        data = {'img_metas': DC({k: results[k] for k in self.meta_keys if k in results}, cpu_only=True)}
        for key in self.keys:
            data[key] = results.get(key)
        return data
