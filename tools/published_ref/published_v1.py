"""mmdet3d 1.x's side of the info-file check: its own converter and dataset on the sample's info file.

Runs in the harness's second venv (``build_venv_v1.sh``: mmdet3d 1.4.0, mmengine, mmdet 3.2.0,
mmcv-lite 2.1.0), with the working directory the converter's repository root::

    python published_v1.py --v0 data/nuscenes/samples_infos_temporal.pkl --out OUT.pkl

1. Converts the v0.x info file with mmdet3d 1.4's own ``tools/dataset_converters/update_infos_to_v2.py``
   (shipped in the wheel under ``mmdet3d/.mim/tools``), ``update_nuscenes_infos``, into
   ``data/nuscenes/v1/<name>`` (``{"metainfo", "data_list"}``, bare ``img_path``, float32 ``lidar2cam``).
   Differences from a real run: the converter opens the nuScenes database (``NuScenes(dataroot=...)``)
   only to project ground-truth boxes into the cameras; the sample has no boxes and no database, so
   that object is replaced by an empty one and ``gt_boxes`` is dropped; each camera gets an identity
   ``sensor2ego`` (the converter stores ``cam2ego`` from it; the sample rig has no ego frame).
2. Loads it with mmdet3d 1.4's ``NuScenesDataset`` (``data_root='data/nuscenes/'``, the per-camera
   ``data_prefix`` of mmdet3d 1.x's nuScenes configs, camera modality, ``test_mode=True``) and the test
   pipeline ``LoadMultiViewImageFromFiles(to_float32=True, num_views=6)`` + ``Pack3DDetInputs(keys=['img'])``,
   and saves each sample's image tensor and metainfo.
"""
import argparse
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _stubs  # noqa: E402,F401

from published import dvpipe_box_types, plain  # noqa: E402

CAMERAS = ["CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_FRONT_LEFT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_BACK_RIGHT"]


def convert(v0: str) -> str:
    import mmdet3d

    sys.path.insert(0, os.path.join(os.path.dirname(mmdet3d.__file__), ".mim", "tools", "dataset_converters"))
    import update_infos_to_v2 as conv

    class NoNuScenesDatabase:  # used by the converter for ground-truth camera instances only
        def __init__(self, *args, **kwargs):
            pass

    conv.NuScenes = NoNuScenesDatabase
    with open(v0, "rb") as f:
        data = pickle.load(f)
    for info in data["infos"]:
        info.pop("gt_boxes", None)
        for cam in info["cams"].values():
            cam.setdefault("sensor2ego_rotation", [1.0, 0.0, 0.0, 0.0])
            cam.setdefault("sensor2ego_translation", [0.0, 0.0, 0.0])
    os.makedirs("data/nuscenes/v0-input", exist_ok=True)
    src = os.path.join("data/nuscenes/v0-input", os.path.basename(v0))
    with open(src, "wb") as f:
        pickle.dump(data, f, protocol=4)
    os.makedirs("data/nuscenes/v1", exist_ok=True)
    conv.update_nuscenes_infos(src, "data/nuscenes/v1")
    return os.path.join("data/nuscenes/v1", os.path.basename(v0))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--v0", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    v1 = convert(a.v0)
    import mmcv
    import mmdet
    import mmdet3d
    import mmengine
    import numpy as np
    from mmdet3d.datasets import NuScenesDataset
    from mmdet3d.utils import register_all_modules

    register_all_modules()
    ds = NuScenesDataset(data_root="data/nuscenes/", ann_file=os.path.relpath(v1, "data/nuscenes"),
                         data_prefix=dict(pts="samples/LIDAR_TOP", sweeps="sweeps/LIDAR_TOP",
                                          **{c: f"samples/{c}" for c in CAMERAS}),
                         modality=dict(use_lidar=False, use_camera=True), test_mode=True, box_type_3d="LiDAR",
                         pipeline=[dict(type="LoadMultiViewImageFromFiles", to_float32=True, num_views=6),
                                   dict(type="Pack3DDetInputs", keys=["img"])])
    samples = []
    for i in range(len(ds)):
        item = ds[i]
        img = item["inputs"]["img"]
        img = np.stack([np.asarray(x) for x in img]) if isinstance(img, list) else img.numpy()
        samples.append({"img": img, "metas": plain(dict(item["data_samples"].metainfo)), "inputs": {}})
    versions = {"mmdet3d": mmdet3d.__version__, "mmengine": mmengine.__version__, "mmcv-lite": mmcv.__version__,
                "mmdet": mmdet.__version__, "numpy": np.__version__}
    with open(a.out, "wb") as f:
        pickle.dump({"model": "mmdet3d-1.x", "v1_file": os.path.abspath(v1), "samples": samples,
                     "versions": versions, "dvpipe_here": dvpipe_box_types()}, f, protocol=4)
    print(f"mmdet3d 1.x: {len(samples)} samples from {v1} -> {a.out}")


if __name__ == "__main__":
    main()
