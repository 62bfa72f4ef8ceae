"""Geometry: matrices vs hand-computed cases, odd sizes, projections through the plans."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

import dvpipe as dv
from dvpipe import geometry
from conftest import encode_jpeg, encode_png, rig_dict, textured_bgr
from tolerances import tol


def _random_points_in_front(cam: dv.Camera, n=200, seed=0):
    rng = np.random.default_rng(seed)
    cam2lidar = np.linalg.inv(cam.lidar2cam)
    z = rng.uniform(2, 60, n)
    u = rng.uniform(0, cam.width, n)
    v = rng.uniform(0, cam.height, n)
    K = cam.intrinsics
    x = (u - K[0, 2]) * z / K[0, 0]
    y = (v - K[1, 2]) * z / K[1, 1]
    p_cam = np.stack([x, y, z, np.ones(n)], 1)
    return (p_cam @ cam2lidar.T)[:, :3]


def test_hand_computed_matrices():
    assert np.allclose(geometry.resize_matrix((900, 1600), (450, 800)), np.diag([0.5, 0.5, 1]))
    # odd size: 1242x375 -> 621x187, sizes (height, width): sy = 187/375, not 0.5
    assert np.allclose(geometry.resize_matrix((375, 1242), (187, 621)), np.diag([0.5, 187 / 375, 1]))
    assert np.allclose(geometry.crop_matrix(10, 130) @ [5, 140, 1], [-5, 10, 1])
    assert np.allclose(geometry.flip_matrix(15) @ [0.5, 3, 1], [14.5, 3, 1])  # centre of column 0 -> column 14
    assert geometry.scaled_size((375, 1242), 0.5) == (187, 621)
    assert geometry.scaled_size((900, 1600), 0.8) == (720, 1280)


@pytest.mark.parametrize("sizes,interpolation,tol", [
    (((97, 61), (53, 29)), cv2.INTER_LINEAR, 1e-3),
    (((97, 61), (48, 30)), cv2.INTER_LINEAR, 1e-3),
    (((15, 15), (31, 7)), cv2.INTER_LINEAR, 1e-3),
    # a box filter's footprint centre is exact in the continuum; its pixel-quantised weights move the
    # centroid by at most a quarter of a source pixel
    (((97, 61), (53, 29)), cv2.INTER_AREA, 0.25),
    (((96, 60), (48, 30)), cv2.INTER_AREA, 1e-3),
])
def test_resize_matrix_matches_opencv_sampling_on_odd_sizes(sizes, interpolation, tol):
    """A ramp holding each pixel's own centre coordinate (u = i + 0.5) is reproduced by bilinear
    interpolation, so after cv2.resize every output pixel holds the source coordinate of its centre:
    that must be A^-1 applied to the output centre (away from the clamped borders)."""
    (w_in, h_in), (w_out, h_out) = sizes
    A = geometry.resize_matrix((h_in, w_in), (h_out, w_out))
    ramp_u = np.tile(np.arange(w_in, dtype=np.float32) + 0.5, (h_in, 1))
    ramp_v = np.tile((np.arange(h_in, dtype=np.float32) + 0.5)[:, None], (1, w_in))
    out_u = cv2.resize(ramp_u, (w_out, h_out), interpolation=interpolation)
    out_v = cv2.resize(ramp_v, (w_out, h_out), interpolation=interpolation)
    ys, xs = np.mgrid[0:h_out, 0:w_out]
    src = geometry.apply(np.linalg.inv(A), np.stack([xs.ravel() + 0.5, ys.ravel() + 0.5], 1))
    inside = ((src[:, 0] > 1) & (src[:, 0] < w_in - 1) & (src[:, 1] > 1) & (src[:, 1] < h_in - 1))
    assert inside.sum() > 10
    assert np.abs(out_u.ravel()[inside] - src[inside, 0]).max() < tol
    assert np.abs(out_v.ravel()[inside] - src[inside, 1]).max() < tol


@pytest.mark.parametrize("stages", [
    [dv.Decode(), dv.Resize(size=(187, 621)), dv.Normalise(), dv.Pad(size_divisor=32)],
    [dv.Decode(), dv.Crop(left=3, top=5, width=1001, height=301), dv.Resize(scale=0.37), dv.Normalise(), dv.Pad(size_divisor=16)],
    [dv.Decode(), dv.Resize(scale=(0.5, 0.75), interpolation="area"), dv.Crop(left=1, top=0, width=600, height=201), dv.Normalise()],
])
def test_output_lidar2img_equals_mapped_projection(stages):
    """For random 3D points, pixel(output lidar2img) == img_aug(pixel(original projection)), 1e-6 px."""
    rig = dv.Rig.from_dict(rig_dict([(1242, 375)]))
    pipe = dv.Pipeline(rig, stages)
    cam = rig[0]
    A = pipe.plan.cameras[0].img_aug
    batch = pipe.process({cam.name: encode_png(textured_bgr(1242, 375))})
    pts = _random_points_in_front(cam)
    uv0, d0 = geometry.project(cam.lidar2img, pts)
    uv1, d1 = geometry.project(batch.metas[0]["lidar2img"], pts)
    assert np.allclose(d0, d1)
    assert np.abs(geometry.apply(A, uv0) - uv1).max() < tol("point_map").atol
    # and the matrix is the product of the independent per-step formulas
    expected = np.eye(3)
    size = (375, 1242)  # (height, width)
    for st in stages:
        if isinstance(st, dv.Resize):
            out = st.out_size(size)
            expected = np.diag([out[1] / size[1], out[0] / size[0], 1]) @ expected
            size = out
        elif isinstance(st, dv.Crop):
            expected = np.array([[1, 0, -st.left], [0, 1, -st.top], [0, 0, 1]]) @ expected
            size = (st.height, st.width)
    assert np.allclose(A, expected, **tol("geometry_exact").allclose)


def test_cam2img_consistent_with_lidar2img():
    rig = dv.Rig.from_dict(rig_dict([(640, 480)]))
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Resize(size=(240, 320)), dv.Normalise()])
    m = pipe.process({"CAM0": encode_jpeg(textured_bgr(640, 480))}).metas[0]
    assert np.allclose(m["lidar2img"], m["cam2img"] @ rig[0].lidar2cam)
    assert np.allclose(m["cam2img"][:3, :3], np.diag([0.5, 0.5, 1]) @ rig[0].intrinsics)


@pytest.mark.parametrize("profile", ["bevformer-base", "bevformer-tiny", "petr"])
def test_markers_found_at_projected_pixel(samples_dir, profile):
    """A marker rendered at a known 3D point is found in the output tensor at the pixel that the
    output lidar2img projects it to (+-1 px), for every marker of every frame set."""
    import yaml

    scene = yaml.safe_load((samples_dir / "scene.yaml").read_text())
    rig = dv.Rig.from_yaml(samples_dir / "rig.yaml")
    pipe = dv.Pipeline.from_profile(profile, rig)
    mean, std = np.array(dv.PROFILES[profile].mean), np.array(dv.PROFILES[profile].std)
    checked = 0
    for ts in scene["timestamps"]:
        batch = pipe.process({cam: samples_dir / f["image"] for cam, f in ts["frames"].items()})
        for marker in ts["markers"]:
            for cam_name in marker["cameras"]:
                i = rig.index(cam_name)
                uv, depth = geometry.project(batch.metas[i]["lidar2img"], np.array([marker["xyz"]], dtype=float))
                u, v = uv[0]
                h, w = batch.metas[i]["ori_shape"][:2]
                if not (12 <= u < w - 12 and 12 <= v < h - 12):
                    continue  # cropped away by the profile
                img = batch.images[i].transpose(1, 2, 0)[:h, :w] * std + mean
                found = _bright_centroid(img.mean(axis=2), u, v, radius=8 * w / 1600 + 2)
                assert np.abs(found - [u, v]).max() <= tol("marker_centroid").atol, (profile, cam_name, marker["name"],
                                                                                    found, (u, v))
                checked += 1
    assert checked >= 24


def _bright_centroid(gray: np.ndarray, u: float, v: float, radius: float) -> np.ndarray:
    """Centroid of max(gray - 40, 0) over pixels whose centres lie within ``radius`` of (u, v)."""
    ys, xs = np.mgrid[0:gray.shape[0], 0:gray.shape[1]]
    near = (xs + 0.5 - u) ** 2 + (ys + 0.5 - v) ** 2 <= radius ** 2
    wgt = np.where(near, np.maximum(gray - 40.0, 0.0), 0.0)
    return np.array([(wgt * (xs + 0.5)).sum(), (wgt * (ys + 0.5)).sum()]) / wgt.sum()


@pytest.mark.parametrize("profile", ["bevformer-tiny", "bevformer-small", "bevformer-base", "petr"])
def test_nuscenes_box_centres_through_profile(nuscenes_dir, profile):
    """Annotated center_2d mapped through the profile == projection of the 3D centre with the output matrices."""
    rig = dv.Rig.from_yaml(nuscenes_dir / "rig.yaml")
    ann = json.loads((nuscenes_dir / "annotations.json").read_text())
    pipe = dv.Pipeline.from_profile(profile, rig)
    for i, cam in enumerate(rig):
        boxes = ann["cam_instances"].get(cam.name, [])
        if not boxes:
            continue
        c2d = np.array([b["center_2d"] for b in boxes])
        p_cam = np.array([b["bbox_3d_cam"][:3] for b in boxes])
        p_lidar = (np.c_[p_cam, np.ones(len(p_cam))] @ np.linalg.inv(cam.lidar2cam).T)[:, :3]
        meta = pipe._metas[i]
        uv, _ = geometry.project(meta["lidar2img"], p_lidar)
        assert np.abs(geometry.apply(pipe.plan.cameras[i].img_aug, c2d) - uv).max() < tol("box_centre_2d").atol


def _kitti_rig_dict(kitti_dir) -> dict:
    """The sample's rig with its projection under mmdet3d's key (the file calls it ``cam2img_4x4``)."""
    import yaml

    d = yaml.safe_load((kitti_dir / "rig.yaml").read_text())
    for c in d["cameras"]:
        c["cam2img"] = c.pop("cam2img_4x4")
    return d


def test_a_projection_with_an_offset_goes_into_cam2img_and_lidar2img():
    """A rectified stereo camera's projection P = [K | t] (KITTI's P2 holds its baseline in t): hand-computed
    u = (fx x + cx z + tx) / (z + tz) of a camera-frame point, then BEVFormer's diag(s, s, 1, 1) scaling."""
    K = [[721.5377, 0.0, 609.5593], [0.0, 721.5377, 172.854], [0.0, 0.0, 1.0]]
    t = [44.85728, 0.2163791, 0.002745884]
    P = [row + [ti] for row, ti in zip(K, t)]
    rig = dv.Rig.from_dict({"cameras": [{"name": "CAM2", "width": 1242, "height": 375, "encoding": "raw",
                                         "cam2img": P}]})
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Resize(scale=0.5, geometry="nominal")], "cpu")
    m = pipe._metas[0]
    x, y, z = -2.7, 0.94, 3.68
    want = np.array([(721.5377 * x + 609.5593 * z + 44.85728) / (z + 0.002745884),
                     (721.5377 * y + 172.854 * z + 0.2163791) / (z + 0.002745884)]) * 0.5
    for key in ("cam2img", "lidar2img"):  # lidar2cam is the identity here
        p = np.asarray(m[key]) @ [x, y, z, 1.0]
        assert np.allclose(p[:2] / p[2], want, atol=tol("geometry", "any", "float64").atol), key
    # given both, intrinsics must be the projection's K; a lidar2img that is not P4 @ lidar2cam is refused
    with pytest.raises(dv.ConfigError, match=r"cameras\[0\].cam2img: the projection's left 3x3"):
        dv.Rig.from_dict({"cameras": [{"name": "C", "width": 8, "height": 8, "cam2img": P, "intrinsics": np.eye(3).tolist()}]})
    with pytest.raises(dv.ConfigError, match=r"cameras\[0\].lidar2img: differs .* goes in cam2img"):
        dv.Rig.from_dict({"cameras": [{"name": "C", "width": 8, "height": 8, "intrinsics": K,
                                       "lidar2img": np.r_[np.c_[np.array(K), t], [[0, 0, 0, 1]]].tolist()}]})


def test_kitti_box_centres_project_through_p2_with_its_baseline(kitti_dir):
    """The sample's annotated center_2d (mmdet3d's projection of each 3D box centre through P2) against
    dvpipe's cam2img and lidar2img of the rig, through a half-size resize (BEVFormer's diag(s, s, 1, 1))."""
    rig = dv.Rig.from_dict(_kitti_rig_dict(kitti_dir))
    cam = rig.cameras[0]
    ann = json.loads((kitti_dir / "annotations.json").read_text())["instances"]
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Resize(scale=0.5, geometry="nominal")], "cpu")
    m = pipe._metas[0]
    for box in ann:
        x, y, z, _l, h, _w, _ry = box["bbox_3d_cam"]
        centre = np.array([x, y - h / 2, z, 1.0])  # mmdet3d's camera boxes: (x, y, z) is the bottom centre
        c = np.asarray(m["cam2img"]) @ centre
        lidar_pt = np.linalg.inv(cam.lidar2cam) @ centre
        p = np.asarray(m["lidar2img"]) @ lidar_pt
        want = np.array(box["center_2d"]) * 0.5
        assert np.abs(c[:2] / c[2] - want).max() < tol("box_centre_2d").atol
        assert np.abs(p[:2] / p[2] - want).max() < tol("box_centre_2d").atol
