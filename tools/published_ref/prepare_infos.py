"""Write the bundled sample (``samples/``) as a nuScenes converter writes it, under a repository root.

Runs in the harness venv (numpy 1.x pickles, as the converters of mmdet3d 0.17 / BEVFormer wrote
them)::

    python prepare_infos.py REPO_ROOT

``REPO_ROOT/data/nuscenes/samples_infos_temporal.pkl``: ``tools/make_info_file.py``'s BEVFormer
temporal layout with numpy arrays, each ``data_path`` rewritten to ``./data/nuscenes/samples/<CAM>/<file>``
(relative to ``REPO_ROOT``, as the converter stores it; ``REPO_ROOT/data/nuscenes/samples/<CAM>``
links to ``samples/frames/<CAM>``) and ``lidar_path`` to a small synthetic sweep
``./data/nuscenes/samples/LIDAR_TOP/<token>.pcd.bin`` (float32 x 5, 64 points; BEVDet's test
pipeline loads it, nothing compares it).
"""
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from make_info_file import build_infos  # noqa: E402


def main(repo: Path) -> Path:
    nus = repo / "data" / "nuscenes"
    (nus / "samples" / "LIDAR_TOP").mkdir(parents=True, exist_ok=True)
    data = build_infos(ROOT / "samples", "bevformer", arrays=True)
    rng = np.random.default_rng(0)
    for info in data["infos"]:
        for name, cam in info["cams"].items():
            link = nus / "samples" / name
            if not link.exists():
                link.symlink_to(ROOT / "samples" / "frames" / name)
            cam["data_path"] = f"./data/nuscenes/samples/{cam['data_path']}"
        lidar = f"./data/nuscenes/samples/LIDAR_TOP/{info['token']}.pcd.bin"
        rng.normal(0, 10, (64, 5)).astype(np.float32).tofile(repo / lidar)
        info["lidar_path"] = lidar
    path = nus / "samples_infos_temporal.pkl"
    path.write_bytes(pickle.dumps(data, protocol=4))
    print(path)
    return path


if __name__ == "__main__":
    main(Path(sys.argv[1]))
