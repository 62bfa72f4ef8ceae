"""Checks of the bundled sample scene (samples/) and the rig configs (configs/rigs/).

Deliberately independent of dvpipe's implementation: YAML is read with pyyaml, images with cv2,
and every projection is recomputed here from the rig's intrinsics and lidar2cam.

Pixel convention (same as dvpipe's geometry module): continuous coordinates with the origin at
the top-left corner of the image; pixel (i, j) covers [i, i+1) x [j, j+1), centre (i+0.5, j+0.5).
"""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from tolerances import tol

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
RIGS = ROOT / "configs" / "rigs"
BEVFORMER_ORDER = [
    "CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_FRONT_LEFT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_BACK_RIGHT",
]
ENCODINGS = {"jpeg", "png", "h264", "h265", "raw"}
RIG_FILES = sorted(RIGS.glob("*.yaml")) + [SAMPLES / "rig.yaml"]


def load(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def scene() -> dict:
    return load(SAMPLES / "scene.yaml")


@pytest.fixture(scope="module")
def rig() -> dict:
    data = load(SAMPLES / "rig.yaml")
    return {c["name"]: c for c in data["cameras"]}


@pytest.fixture(scope="module")
def gray_images(scene) -> dict:
    """(timestamp index, camera) -> grayscale image, decoded once for the whole module."""
    out = {}
    for ts in scene["timestamps"]:
        for cam, fr in ts["frames"].items():
            img = cv2.imread(str(SAMPLES / fr["image"]), cv2.IMREAD_GRAYSCALE)
            assert img is not None, fr["image"]
            out[ts["index"], cam] = img
    return out


def project(cam: dict, xyz) -> tuple[float, float, float]:
    k = np.array(cam["intrinsics"], dtype=np.float64)
    m = np.array(cam["lidar2cam"], dtype=np.float64)
    p = m @ np.array([xyz[0], xyz[1], xyz[2], 1.0])
    return (k[0, 0] * p[0] / p[2] + k[0, 1] * p[1] / p[2] + k[0, 2],
            k[1, 1] * p[1] / p[2] + k[1, 2], p[2])


def camera_centre(cam: dict) -> np.ndarray:
    m = np.array(cam["lidar2cam"], dtype=np.float64)
    return -m[:3, :3].T @ m[:3, 3]


def blob_centroid(gray: np.ndarray, u: float, v: float, window: float = 8.0):
    """Intensity-weighted centroid (continuous coordinates) of the bright marker disc near (u, v),
    using only pixels whose centres lie within `window` px of (u, v) (the black ring around each
    disc keeps the background out of the window)."""
    x0, x1 = int(math.floor(u - window)), int(math.floor(u + window)) + 1
    y0, y1 = int(math.floor(v - window)), int(math.floor(v + window)) + 1
    assert x0 >= 0 and y0 >= 0 and x1 <= gray.shape[1] and y1 <= gray.shape[0]
    patch = gray[y0:y1, x0:x1].astype(np.float64)
    yy, xx = np.mgrid[y0:y1, x0:x1] + 0.5  # pixel centres
    inside = (xx - u) ** 2 + (yy - v) ** 2 <= window * window
    w = np.clip(patch - 40.0, 0.0, None) * inside
    bright = int(((patch > 128) & inside).sum())
    return float((w * xx).sum() / w.sum()), float((w * yy).sum() / w.sum()), bright


# --------------------------------------------------------------------------- rig files
@pytest.mark.parametrize("path", RIG_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_rig_file_is_valid(path: Path):
    data = load(path)
    assert isinstance(data["name"], str) and data["name"]
    cams = data["cameras"]
    assert isinstance(cams, list) and cams
    names = [c["name"] for c in cams]
    assert len(set(names)) == len(names), "camera names must be unique"
    for c in cams:
        assert isinstance(c["width"], int) and c["width"] > 0
        assert isinstance(c["height"], int) and c["height"] > 0
        assert c["encoding"] in ENCODINGS
        k = np.array(c["intrinsics"], dtype=np.float64)
        assert k.shape == (3, 3)
        np.testing.assert_allclose(k[2], [0.0, 0.0, 1.0])
        assert k[1, 0] == 0.0 and k[0, 0] > 0 and k[1, 1] > 0
        assert 0 < k[0, 2] < c["width"] and 0 < k[1, 2] < c["height"]
        m = np.array(c["lidar2cam"], dtype=np.float64)
        assert m.shape == (4, 4)
        np.testing.assert_allclose(m[3], [0.0, 0.0, 0.0, 1.0])
        r = m[:3, :3]
        np.testing.assert_allclose(r.T @ r, np.eye(3), **tol("rotation").allclose)
        assert abs(np.linalg.det(r) - 1.0) < tol("rotation").atol
        if "lidar2img" in c:
            k4 = np.eye(4)
            k4[:3, :3] = k
            np.testing.assert_allclose(np.array(c["lidar2img"]), k4 @ m, **tol("geometry").allclose)
        if "cam2lidar" in c:
            np.testing.assert_allclose(np.array(c["cam2lidar"]) @ m, np.eye(4), **tol("geometry").allclose)


def test_expected_rig_configs():
    names = {p.stem for p in RIGS.glob("*.yaml")}
    assert {"nuscenes", "waymo", "kitti", "argoverse2"} <= names

    nus = load(RIGS / "nuscenes.yaml")["cameras"]
    assert [c["name"] for c in nus] == BEVFORMER_ORDER
    assert all((c["width"], c["height"], c["encoding"]) == (1600, 900, "jpeg") for c in nus)

    waymo = {c["name"]: c for c in load(RIGS / "waymo.yaml")["cameras"]}
    assert list(waymo) == ["FRONT", "FRONT_LEFT", "FRONT_RIGHT", "SIDE_LEFT", "SIDE_RIGHT"]
    for n in ("FRONT", "FRONT_LEFT", "FRONT_RIGHT"):
        assert (waymo[n]["width"], waymo[n]["height"]) == (1920, 1280)
    for n in ("SIDE_LEFT", "SIDE_RIGHT"):
        assert (waymo[n]["width"], waymo[n]["height"]) == (1920, 886)

    kitti = load(RIGS / "kitti.yaml")["cameras"]
    assert len(kitti) == 2
    assert all((c["width"], c["height"], c["encoding"]) == (1242, 375, "png") for c in kitti)
    left, right = kitti
    np.testing.assert_allclose(left["intrinsics"], right["intrinsics"])
    assert left["intrinsics"][0][0] == pytest.approx(721.5377, abs=tol("kitti_focal").atol)
    baseline = camera_centre(right) - camera_centre(left)
    # the right camera sits 0.54 m along the left camera's x axis
    r_left = np.array(left["lidar2cam"])[:3, :3]
    np.testing.assert_allclose(r_left @ baseline, [0.54, 0.0, 0.0], **tol("geometry").allclose)

    av2 = {c["name"]: c for c in load(RIGS / "argoverse2.yaml")["cameras"]}
    assert len(av2) == 7 and all(n.startswith("ring_") for n in av2)
    assert (av2["ring_front_center"]["width"], av2["ring_front_center"]["height"]) == (1550, 2048)
    for n, c in av2.items():
        if n != "ring_front_center":
            assert (c["width"], c["height"]) == (2048, 1550)


def test_nuscenes_config_matches_sample_rig(rig):
    cfg = load(RIGS / "nuscenes.yaml")["cameras"]
    for c in cfg:
        np.testing.assert_array_equal(c["intrinsics"], rig[c["name"]]["intrinsics"])
        np.testing.assert_array_equal(c["lidar2cam"], rig[c["name"]]["lidar2cam"])


# --------------------------------------------------------------------------- sample scene
def test_scene_layout(scene, rig):
    assert scene["camera_order"] == BEVFORMER_ORDER
    assert list(rig) == BEVFORMER_ORDER
    ts_list = scene["timestamps"]
    assert len(ts_list) >= 2
    stamps = [t["timestamp_ns"] for t in ts_list]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    referenced = set()
    for t in ts_list:
        assert list(t["frames"]) == BEVFORMER_ORDER
        caps = []
        for cam, fr in t["frames"].items():
            ns = fr["capture_time_ns"]
            assert fr["image"] == f"frames/{cam}/{ns}.jpg"
            assert t["timestamp_ns"] <= ns <= t["timestamp_ns"] + 45_000_000
            caps.append(ns)
            referenced.add(fr["image"])
        assert len(set(caps)) == len(caps), "cameras of one frame set fire at different times"
    for cam in BEVFORMER_ORDER:  # every camera's frames differ between sets (catches mix-ups)
        blobs = [(SAMPLES / t["frames"][cam]["image"]).read_bytes() for t in ts_list]
        assert len(set(blobs)) == len(blobs), cam
    on_disk = {p.relative_to(SAMPLES).as_posix() for p in (SAMPLES / "frames").rglob("*") if p.is_file()}
    assert on_disk == referenced


def test_sample_size_is_small():
    total = sum(p.stat().st_size for p in SAMPLES.rglob("*") if p.is_file())
    assert total < 4 * 1024 * 1024


def test_frames_have_declared_size(scene, rig):
    for t in scene["timestamps"]:
        for cam, fr in t["frames"].items():
            path = SAMPLES / fr["image"]
            assert path.read_bytes()[:2] == b"\xff\xd8", "JPEG"
            img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
            assert img is not None and img.dtype == np.uint8
            assert img.shape == (rig[cam]["height"], rig[cam]["width"], 3)


def test_recorded_uv_is_projection_of_xyz(scene, rig):
    n = 0
    for t in scene["timestamps"]:
        for obj in t["markers"] + t["boxes"]:
            xyz = obj["xyz"] if "xyz" in obj else obj["center"]
            assert sorted(obj["cameras"]) == sorted(obj["uv"]) == sorted(obj["depth"])
            for cam in obj["cameras"]:
                u, v, z = project(rig[cam], xyz)
                assert z > 0
                assert obj["uv"][cam][0] == pytest.approx(u, abs=tol("projection").atol)
                assert obj["uv"][cam][1] == pytest.approx(v, abs=tol("projection").atol)
                assert obj["depth"][cam] == pytest.approx(z, abs=tol("projection").atol)
                n += 1
    assert n > 0


def test_markers_visible_in_every_camera(scene, rig):
    for t in scene["timestamps"]:
        for cam in BEVFORMER_ORDER:
            ms = [m for m in t["markers"] if cam in m["cameras"]]
            assert len(ms) >= 1, (t["index"], cam)
            for m in ms:
                u, v, z = project(rig[cam], m["xyz"])
                assert 8.0 <= math.dist(camera_centre(rig[cam])[:2], m["xyz"][:2]) <= 32.0
                assert 0 <= u < rig[cam]["width"] and 0 <= v < rig[cam]["height"]


def test_markers_found_at_recorded_uv(scene, gray_images):
    r = scene["marker_style"]["disc_radius_px"]
    worst = 0.0
    for t in scene["timestamps"]:
        for m in t["markers"]:
            for cam in m["cameras"]:
                gray = gray_images[t["index"], cam]
                u, v = m["uv"][cam]
                cu, cv_, bright = blob_centroid(gray, u, v)
                # a disc of radius r is there (not just some bright background) ...
                assert 0.7 * math.pi * r * r <= bright <= 1.3 * math.pi * r * r, (m["name"], cam)
                # ... and the point (u, v) lies in the disc's centre pixel, as the convention says
                assert gray[int(math.floor(v)), int(math.floor(u))] > 200
                err = math.hypot(cu - u, cv_ - v)
                worst = max(worst, err)
                assert err <= 1.0, (t["index"], m["name"], cam, (u, v), (cu, cv_))
    # The generator measures ~0.02 px; a half-pixel convention slip would show up as ~0.7 px.
    assert worst < 0.25


def test_box_records_are_consistent(scene):
    for t in scene["timestamps"]:
        for b in t["boxes"]:
            c = np.array(b["center"])
            dx, dy, dz = b["size"]
            cy, sy = math.cos(b["yaw"]), math.sin(b["yaw"])
            rot = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
            corners = np.array(b["corners"])
            assert corners.shape == (8, 3)
            np.testing.assert_allclose(corners.mean(axis=0), c, **tol("geometry").allclose)
            local = (corners - c) @ rot
            np.testing.assert_allclose(np.abs(local), np.tile([dx / 2, dy / 2, dz / 2], (8, 1)), **tol("geometry").allclose)
