"""Which files an image sequence reads: hidden files, ``pattern`` with a glob ``uri``, folders whose
names hold glob characters (``run[1]``, a deployment in ``project[v2]/``)."""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from dvpipe import Camera
from dvpipe.deploy.config import SourceConfig
from dvpipe.deploy.sources.images import ImageSequence, scan_images

T0 = 1700000000000000000  # ns


def _write(folder: Path, names) -> None:
    """96x64 black JPEGs (tiny_rig's camera size)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = cv2.imencode(".jpg", np.zeros((64, 96, 3), np.uint8))[1].tobytes()
    for n in names:
        (folder / n).write_bytes(data)


def _deployment(root: Path, source: dict, cameras: int = 1) -> Path:
    from dvpipe.testing.deployments import tiny_rig

    dep = {"rig": tiny_rig(cameras), "pipeline": {"profile": "bevformer-tiny", "backends": ["cpu"]}, "source": source}
    (root / "dep.yaml").write_text(yaml.safe_dump(dep))
    return root / "dep.yaml"


def _names(dep, camera: str) -> list[str]:
    (c,) = [c for c in dep.cameras if c.name == camera]
    src = ImageSequence(dep.rig[camera], c.source)
    src.open()
    return [Path(p).name for _t, p in src.stamped_files()]


def test_a_folder_source_skips_hidden_files(tmp_path):
    """macOS AppleDouble files (``._<name>.jpg``, not images) are not frames: a folder lists what a
    glob of it lists."""
    names = [f"{T0}.jpg", f"{T0 + 100_000_000}.jpg"]
    _write(tmp_path, names)
    for n in names:
        (tmp_path / f"._{n}").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        " + bytes(4000))
    (tmp_path / ".hidden.jpg").write_bytes(b"")
    src = ImageSequence(Camera("C", width=96, height=64), SourceConfig("images", str(tmp_path), {}))
    src.open()
    assert [(t, Path(p).name) for t, p in src.stamped_files()] == [(T0, names[0]), (T0 + 100_000_000, names[1])]
    assert [Path(p).name for p in scan_images(str(tmp_path))] == names
