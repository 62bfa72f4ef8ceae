"""Run a model's published test pipeline on an info file and save what its checkpoint is fed.

Runs in the harness's own venv (mmdet3d 0.17.1, mmcv 1.4.0, mmdet 2.14.0; see build_venv.sh), with
the working directory the converter's repository root (the published code opens each stored
``data_path`` from there, as ``tools/test.py`` does). Drives the dataset as BEVFormer's / PETR's /
BEVDet's ``tools/test.py`` does: ``cfg.data.test.test_mode = True``, ``build_dataset``,
``build_dataloader(samples_per_gpu=1, dist=False, shuffle=False)`` (``workers_per_gpu=0``: the same
samples, in this process), and takes each batch's ``img`` / ``img_inputs`` and ``img_metas`` as the
detector's ``forward_test`` receives them.

Usage (from tools/published_ref/run.py)::

    python published.py --model bevformer-tiny --config CONFIG --ann-file FILE --out OUT.pkl
"""
import argparse
import enum
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _stubs  # noqa: E402,F401 - before mmcv / mmdet3d

PLUGINS = {"bevformer": "plugins.bevformer", "petr": "plugins.petr", "bevdet": "plugins.bevdet"}
DATASETS = {"bevformer": "CustomNuScenesDataset", "petr": "CustomNuScenesDataset", "bevdet": "BEVDetNuScenesDataset"}


def plain(v):
    """Metas as plain values: numpy arrays, tuples, lists, dicts, str, numbers; a class as its qualified name."""
    import numpy as np
    import torch

    if isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    if isinstance(v, enum.Enum):
        return {"enum": f"{type(v).__name__}.{v.name}", "value": v.value}
    if isinstance(v, type):
        return {"class": f"{v.__module__}.{v.__qualname__}"}
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(plain(x) for x in v)
    if isinstance(v, (np.ndarray, np.generic, str, int, float, bool)) or v is None:
        return v
    return {"repr": repr(v)}


def dvpipe_box_types() -> dict:
    """dvpipe's ``box_type_3d`` / ``box_mode_3d`` as it resolves them where mmdet3d imports (this venv);
    the project's own venv has no mmdet3d, so there dvpipe gives the string ``"LiDAR"``."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from dvpipe.mmdet3d._metas import _box_mode_3d, _box_type_3d

    return {"box_type_3d": plain(_box_type_3d()), "box_mode_3d": plain(_box_mode_3d())}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--ann-file", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    family = a.model.split("-")[0]
    import importlib

    import mmcv
    import mmdet
    import mmdet3d
    import numpy as np
    import PIL
    import torch
    from mmdet3d.datasets import build_dataloader, build_dataset

    importlib.import_module(PLUGINS[family])
    cfg = mmcv.Config.fromfile(a.config)
    test = cfg.data.test
    test.type = DATASETS[family]
    test.data_root = "data/nuscenes/"
    test.ann_file = a.ann_file
    test.test_mode = True
    dataset = build_dataset(test)
    loader = build_dataloader(dataset, samples_per_gpu=1, workers_per_gpu=0, dist=False, shuffle=False)
    samples = []
    for data in loader:
        metas = data["img_metas"][0].data[0][0]
        if "img_inputs" in data:  # BEVDet: (imgs, rots, trans, intrins, post_rots, post_trans), batch of 1
            inputs = [x[0].numpy() for x in data["img_inputs"][0]]
            img = inputs[0]
            extra = dict(zip(("rots", "trans", "intrins", "post_rots", "post_trans"), inputs[1:]))
        else:
            img = data["img"][0].data[0][0].numpy()  # (N, 3, H, W)
            extra = {}
        samples.append({"img": img, "metas": plain(metas), "inputs": extra})
    versions = {"mmdet3d": mmdet3d.__version__, "mmcv": mmcv.__version__, "mmdet": mmdet.__version__,
                "numpy": np.__version__, "torch": torch.__version__, "pillow": PIL.__version__,
                "opencv": __import__("cv2").__version__, "python": sys.version.split()[0]}
    with open(a.out, "wb") as f:
        pickle.dump({"model": a.model, "config": a.config, "samples": samples, "versions": versions,
                     "dvpipe_here": dvpipe_box_types()}, f, protocol=4)
    print(f"{a.model}: {len(samples)} samples -> {a.out}")


if __name__ == "__main__":
    main()
