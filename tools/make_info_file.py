#!/usr/bin/env python3
"""Write a tiny mmdet3d info file over the bundled sample scene (``samples/``).

Usage::

    python tools/make_info_file.py [--samples samples] [--layout bevformer|v1] [--format json|pkl] [-o FILE]

Default: ``samples/infos/samples_infos_temporal.json`` -- BEVFormer's temporal layout (mmdet3d v0.x
``{"infos": [...], "metadata": {...}}`` plus ``scene_token``, ``can_bus``, ``prev``, ``next``,
``frame_idx``), one sample per frame set of ``samples/scene.yaml``, arrays as nested lists. The
deployment ``configs/deployments/nuscenes-infos.yaml`` reads it. ``--format pkl`` writes the same
content as a pickle with numpy arrays, as ``tools/create_data.py`` of mmdet3d / BEVFormer writes it
(pickles are not committed: build them with this script, the tests do). ``--layout v1`` writes
mmdet3d 1.x's ``{"metainfo": ..., "data_list": [...]}``.

Deliberately does not import dvpipe: it is the independent side of the info-file tests.

What each sample holds (nuScenes conventions, ``tools/data_converter/nuscenes_converter.py`` of
mmdet3d v0.17 and BEVFormer's ``nuscenes_converter.py``):

* ``timestamp``: the set's time (microseconds, v0.x; seconds, v1.x); per camera ``timestamp``: the
  image's own capture time (the file name of ``samples/frames``, ns, as microseconds).
* per camera ``data_path`` (relative to ``samples/frames``), ``cam_intrinsic`` (3x3),
  ``sensor2lidar_rotation`` (3x3) and ``sensor2lidar_translation`` (3,): ``p_lidar = R @ p_cam + t``,
  the inverse of the rig's ``lidar2cam`` (v1.x: ``img_path``, ``cam2img``, ``lidar2cam``).
* ``ego2global_translation`` / ``_rotation`` (w, x, y, z): a synthetic drive, 5 m/s along a heading
  that turns by 0.02 rad per sample; ``lidar2ego`` identity (the sample rig has no ego frame).
* ``can_bus`` (18): pose position (3), orientation (4), acceleration, rotation rate and velocity
  (3 each; here 0, 0.04 rad/s yaw rate, 5 m/s forward) and two zeros, as BEVFormer's
  ``_get_can_bus_info`` stores it.
"""
from __future__ import annotations

import argparse
import json
import math
import pickle
from pathlib import Path

import numpy as np
import yaml

SCENE_TOKEN = "samples-scene-0"
SPEED_MPS = 5.0
YAW0, YAW_STEP = 0.3, 0.02


def _quaternion_z(yaw: float) -> list[float]:
    return [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]


def build_infos(samples: Path, layout: str = "bevformer", arrays: bool = False) -> dict:
    """The info file's content for ``samples/`` (``arrays``: numpy arrays, else nested lists)."""
    scene = yaml.safe_load((samples / "scene.yaml").read_text())
    rig = yaml.safe_load((samples / "rig.yaml").read_text())
    cams = {c["name"]: c for c in rig["cameras"]}
    order = scene["camera_order"]
    arr = (lambda a: np.asarray(a, dtype=np.float64)) if arrays else (lambda a: np.asarray(a, dtype=np.float64).tolist())
    t0 = scene["timestamps"][0]["timestamp_ns"]
    out = []
    n = len(scene["timestamps"])
    for k, fs in enumerate(scene["timestamps"]):
        t_s = (fs["timestamp_ns"] - t0) / 1e9
        yaw = YAW0 + YAW_STEP * k
        trans = [600.0 + SPEED_MPS * t_s * math.cos(YAW0), 1600.0 + SPEED_MPS * t_s * math.sin(YAW0), 0.0]
        rot = _quaternion_z(yaw)
        token = f"sample-{k:04d}"
        cam_infos = {}
        for name in order:
            f = fs["frames"][name]
            L = np.asarray(cams[name]["lidar2cam"], dtype=np.float64)
            R, t = L[:3, :3], L[:3, 3]
            rel = str(Path(f["image"]).relative_to("frames"))
            t_us = f["capture_time_ns"] // 1000
            if layout == "v1":
                cam_infos[name] = {"img_path": rel, "cam2img": arr(cams[name]["intrinsics"]), "lidar2cam": arr(L),
                                   "timestamp": t_us / 1e6, "sample_data_token": f"{token}-{name}"}
            else:
                cam_infos[name] = {"data_path": rel, "type": name, "sample_data_token": f"{token}-{name}",
                                   "timestamp": t_us, "cam_intrinsic": arr(cams[name]["intrinsics"]),
                                   "sensor2lidar_rotation": arr(R.T), "sensor2lidar_translation": arr(-R.T @ t)}
        can = trans + rot + [0.0, 0.0, 0.0] + [0.0, 0.0, YAW_STEP / 0.5] + [SPEED_MPS, 0.0, 0.0] + [0.0, 0.0]
        if layout == "v1":
            e2g = np.eye(4)
            c, s = math.cos(yaw), math.sin(yaw)
            e2g[:3, :3] = [[c, -s, 0], [s, c, 0], [0, 0, 1]]
            e2g[:3, 3] = trans
            out.append({"sample_idx": k, "token": token, "timestamp": fs["timestamp_ns"] / 1e9, "ego2global": arr(e2g),
                        "images": cam_infos, "lidar_points": {"lidar2ego": arr(np.eye(4))}})
        else:
            out.append({"token": token, "timestamp": fs["timestamp_ns"] // 1000, "cams": cam_infos,
                        "scene_token": SCENE_TOKEN, "frame_idx": k, "can_bus": arr(can),
                        "prev": "" if k == 0 else f"sample-{k - 1:04d}", "next": "" if k == n - 1 else f"sample-{k + 1:04d}",
                        "ego2global_translation": trans, "ego2global_rotation": rot,
                        "lidar2ego_translation": [0.0, 0.0, 0.0], "lidar2ego_rotation": [1.0, 0.0, 0.0, 0.0],
                        "lidar_path": "", "sweeps": [], "gt_boxes": arr(np.zeros((0, 7)))})
    if layout == "v1":
        return {"metainfo": {"dataset": "nuscenes", "version": "samples", "info_version": "1.1"}, "data_list": out}
    return {"infos": out, "metadata": {"version": "samples"}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", default=str(Path(__file__).resolve().parents[1] / "samples"))
    ap.add_argument("--layout", choices=("bevformer", "v1"), default="bevformer")
    ap.add_argument("--format", choices=("json", "pkl"), default="json")
    ap.add_argument("-o", "--out", help="output file (default: SAMPLES/infos/samples_infos_temporal.json)")
    a = ap.parse_args(argv)
    samples = Path(a.samples)
    out = Path(a.out) if a.out else samples / "infos" / f"samples_infos_{'temporal' if a.layout == 'bevformer' else 'v1'}.{a.format}"
    data = build_infos(samples, a.layout, arrays=a.format == "pkl")
    out.parent.mkdir(parents=True, exist_ok=True)
    if a.format == "pkl":
        out.write_bytes(pickle.dumps(data, protocol=4))
    else:
        out.write_text(json.dumps(data, indent=1) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
