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


# -- pattern with a glob uri -----------------------------------------------------------------------------
def _flat_samples(root: Path) -> Path:
    """nuScenes' flat samples/ folder: CAM0's and CAM1's files side by side (CAM1's 7 ns later)."""
    names = [f"n015__{cam}__{t + (7 if cam == 'CAM1' else 0)}.jpg"
             for cam in ("CAM0", "CAM1") for t in (T0, T0 + 500_000_000)]
    _write(root / "samples", names)
    return root / "samples"


def test_pattern_narrows_a_glob_uri_to_each_cameras_files(tmp_path):
    from dvpipe.deploy import load_deployment

    _flat_samples(tmp_path)
    dep = load_deployment(_deployment(tmp_path, {"type": "images", "uri": "samples/*.jpg",
                                                 "pattern": "*__{camera}__*.jpg"}, cameras=2))
    assert not [w for w in dep.warnings if "image sequences of" in w]
    assert _names(dep, "CAM0") == [f"n015__CAM0__{T0}.jpg", f"n015__CAM0__{T0 + 500_000_000}.jpg"]
    assert _names(dep, "CAM1") == [f"n015__CAM1__{T0 + 7}.jpg", f"n015__CAM1__{T0 + 500_000_007}.jpg"]


def test_a_pattern_that_matches_none_of_a_globs_files_is_refused(tmp_path):
    from dvpipe.deploy import DeploymentError, load_deployment

    _flat_samples(tmp_path)
    with pytest.raises(DeploymentError, match=r"source\.pattern: '\*__CAM0__\*\.png' matches no file of "):
        load_deployment(_deployment(tmp_path, {"type": "images", "uri": "samples/*.jpg",
                                               "pattern": "*__{camera}__*.png"}))


# -- folders named like globs ----------------------------------------------------------------------------
def test_a_folder_whose_name_holds_a_bracket_is_a_folder(tmp_path):
    from dvpipe.deploy import load_deployment

    names = [f"{T0}.jpg", f"{T0 + 100_000_000}.jpg"]
    _write(tmp_path / "run[1]" / "CAM0", names)
    for source in ({"type": "images", "uri": "run[1]/{camera}"},
                   {"type": "images", "uri": "run[1]/{camera}/*.jpg"},
                   {"type": "images", "uri": "run[1]/{camera}", "pattern": "*.jpg"}):
        dep = load_deployment(_deployment(tmp_path, source), probe=True)
        assert _names(dep, "CAM0") == names, source
    assert [Path(p).name for p in scan_images(str(tmp_path / "run[1]" / "CAM0"), "*.jpg")] == names


def test_a_relative_glob_under_a_deployment_folder_named_with_a_bracket(tmp_path):
    from dvpipe.deploy import load_deployment

    base = tmp_path / "project[v2]"
    _write(base / "frames" / "CAM0", [f"{T0}.jpg"])
    _write(tmp_path / "projectv" / "frames" / "CAM0", [f"{T0 + 1}.jpg"])  # what [v2] matches as a glob: not read
    dep = load_deployment(_deployment(base, {"type": "images", "uri": "frames/{camera}/*.jpg"}), probe=True)
    assert _names(dep, "CAM0") == [f"{T0}.jpg"]


def test_a_glob_in_a_folder_component_still_globs(tmp_path):
    from dvpipe.deploy import load_deployment

    _write(tmp_path / "drive1" / "CAM0", [f"{T0}.jpg"])
    _write(tmp_path / "drive2" / "CAM0", [f"{T0 + 100_000_000}.jpg"])
    dep = load_deployment(_deployment(tmp_path, {"type": "images", "uri": "drive[12]/{camera}/*.jpg"}))
    assert _names(dep, "CAM0") == [f"{T0}.jpg", f"{T0 + 100_000_000}.jpg"]
