"""decode.max_bytes (the largest image file read; a larger one is a ``too_large`` drop) reaches every
source that reads image files: an image sequence, an mmdet3d info file's images, a single-sample
rig's image."""
from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from dvpipe.deploy import load_deployment
from dvpipe.deploy.sources import open_source
from dvpipe.deploy.sources.images import FileTooLarge

ROOT = Path(__file__).resolve().parents[2]
INFOS = ROOT / "configs" / "deployments" / "nuscenes-infos.yaml"


def _infos_deployment(max_bytes=None) -> dict:
    base = INFOS.parent
    d = yaml.safe_load(INFOS.read_text())
    d["rig"] = str(base / d["rig"])
    d["source"] = dict(d["source"], uri=str(base / d["source"]["uri"]), data_root=str(base / d["source"]["data_root"]))
    d.pop("outputs", None)
    if max_bytes is not None:
        d["decode"] = {"max_bytes": max_bytes}
    return d


def _first_read(dep):
    cam = dep.cameras[0]
    src = open_source(dep.rig[cam.name], cam.source)
    src.open()
    try:
        return src.stamped_files()[0][1], src.read()
    finally:
        src.close()


def test_an_info_files_images_obey_decode_max_bytes():
    dep = load_deployment(_infos_deployment(max_bytes=10_000))
    cam = dep.cameras[0]
    src = open_source(dep.rig[cam.name], cam.source)
    src.open()
    path = src.stamped_files()[0][1]
    size = os.stat(path).st_size
    assert size > 10_000  # the bundled 1600x900 JPEGs
    with pytest.raises(FileTooLarge, match=rf"{size} bytes, more than the 10000 bytes"):
        src.read()
    src.close()
    # the file's own size as the cap: read
    path2, item = _first_read(load_deployment(_infos_deployment(max_bytes=size)))
    assert path2 == path and len(item.frame.data) == size


def test_an_info_sources_own_max_file_bytes_wins():
    d = _infos_deployment(max_bytes=10_000)
    d["source"]["max_file_bytes"] = 1 << 30
    path, item = _first_read(load_deployment(d))
    assert len(item.frame.data) == os.stat(path).st_size


def test_a_single_sample_rigs_image_obeys_decode_max_bytes(tmp_path):
    img = cv2.imencode(".png", np.random.default_rng(0).integers(0, 255, (64, 96, 3), np.uint8))[1].tobytes()
    (tmp_path / "front.png").write_bytes(img)
    rig = {"cameras": [{"name": "CAM_FRONT", "width": 96, "height": 64, "encoding": "png", "image": "front.png",
                        "capture_time_ns": 1532402927612460000}]}
    (tmp_path / "rig.yaml").write_text(yaml.safe_dump(rig))
    d = {"rig": "rig.yaml", "pipeline": {"stages": ["decode"], "backends": ["cpu"]}, "outputs": {"metrics": False},
         "decode": {"max_bytes": len(img) - 1}}
    (tmp_path / "dep.yaml").write_text(yaml.safe_dump(d))
    dep = load_deployment(tmp_path / "dep.yaml")
    cam = dep.cameras[0]
    src = open_source(dep.rig[cam.name], cam.source)
    src.open()
    with pytest.raises(FileTooLarge, match=rf"front\.png is {len(img)} bytes, more than the {len(img) - 1} bytes"):
        src.read()
