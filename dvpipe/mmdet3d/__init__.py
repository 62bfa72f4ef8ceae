"""mmdet3d interoperability: read a model's config, map its test pipeline, build its ``img_metas``.

``Pipeline.from_mmdet3d_config(path, rig)`` is the usual entry point; :func:`load_config` reads a
config without executing it and :func:`map_test_pipeline` turns its ``test_pipeline`` into a
:class:`~dvpipe.profiles.Profile` (stages + metas contract).
"""
from ._config import load_config, merge_configs
from ._hook import Mmdet3dHook
from ._infos import InfoFile, load_info_data, load_info_pickle, open_info_file
from ._metas import JsonPoses, Mmdet3dMetas, PoseFn, can_bus_from_pose, yaw_from_quaternion
from ._transforms import MappedConfig, check_rig, find_test_pipeline, map_test_pipeline, order_rig, profile_from_config

__all__ = ["load_config", "merge_configs", "MappedConfig", "find_test_pipeline", "map_test_pipeline",
           "profile_from_config", "check_rig", "order_rig", "Mmdet3dMetas", "JsonPoses", "PoseFn", "can_bus_from_pose",
           "yaw_from_quaternion", "InfoFile", "load_info_pickle", "load_info_data", "open_info_file",
           "Mmdet3dHook"]
