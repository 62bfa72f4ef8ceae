"""Undistort: OpenCV's pinhole (radial-tangential, 5 and 8 coefficients) and fisheye models.

References, independent of the kernels under test:
* ``cv2.undistort`` / ``cv2.fisheye.undistortImage`` on the same K, distortion and K' (converted to
  OpenCV's pixel convention, centres at integers: ``cx, cy`` 0.5 smaller);
* markers: Gaussian blobs on a plane in front of the camera, rendered through the distorted lens
  (every distorted pixel traced back to its ray by ``cv2.undistortPoints`` / ``cv2.fisheye.undistortPoints``,
  iterated to 1e-12), whose centres the rendered image shows where ``cv2.projectPoints`` /
  ``cv2.fisheye.projectPoints`` put them; after undistortion by each backend the blobs' centroids must
  sit at the pinhole projection ``lidar2img`` (from ``batch.metas``) gives, within 0.05 px.
"""
from __future__ import annotations

import cv2
import numpy as np
import pytest

import dvpipe as dv
from dvpipe.errors import ConfigError
from dvpipe.stages.camera import opencv_k

from tolerances import tol

W, H = 320, 240
K_PIN = [[200.0, 0.0, 160.5], [0.0, 198.0, 121.0], [0.0, 0.0, 1.0]]
K_FISH = [[110.0, 0.0, 159.0], [0.0, 110.0, 120.5], [0.0, 0.0, 1.0]]
LENSES = {
    "pinhole5": (K_PIN, {"model": "pinhole", "coeffs": [-0.28, 0.09, 0.0009, -0.0006, -0.012]}),
    "pinhole8": (K_PIN, {"model": "pinhole", "coeffs": [-0.2, 0.04, 0.001, 0.0005, 0.002, 0.06, 0.01, 0.001]}),
    "fisheye": (K_FISH, {"model": "fisheye", "coeffs": [0.08, -0.02, 0.004, -0.0005]}),
}
#: lidar -> camera: a rotation about y by 5 degrees and a shift (metres)
_a = np.deg2rad(5.0)
LIDAR2CAM = np.array([[np.cos(_a), 0, np.sin(_a), 0.3], [0, 1, 0, -0.2], [-np.sin(_a), 0, np.cos(_a), 0.1], [0, 0, 0, 1]])
BACKENDS = ["reference", "cpu", ("torch:cpu", "cpu")]


def _rig(lens: str) -> dv.Rig:
    K, dist = LENSES[lens]
    return dv.Rig.from_dict({"cameras": [{"name": "cam", "width": W, "height": H, "encoding": "raw",
                                          "intrinsics": K, "distortion": dist, "lidar2cam": LIDAR2CAM.tolist()}]})


def _smooth_image(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return cv2.GaussianBlur((rng.random((H, W, 3)) * 255).astype(np.uint8), (0, 0), 2.0)


def _run(rig: dv.Rig, stages, backends, img: np.ndarray):
    pipe = dv.Pipeline(rig, stages, backends)
    batch = pipe.process({"cam": img})
    return pipe, np.asarray(batch.images)[0].transpose(1, 2, 0), batch.metas[0]


# ---------------------------------------------------------------------------------- against OpenCV's images
@pytest.mark.parametrize("lens", sorted(LENSES))
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_undistort_matches_opencv_image_functions(lens, alpha):
    rig = _rig(lens)
    cam = rig.cameras[0]
    img = _smooth_image()
    st = dv.Undistort(alpha=alpha)
    Kn = st.new_intrinsics(cam)
    if cam.distortion.model == "fisheye":
        expected = cv2.fisheye.undistortImage(img, opencv_k(cam.intrinsics), cam.distortion.opencv.reshape(4, 1),
                                              Knew=opencv_k(Kn), new_size=(W, H))
    else:
        expected = cv2.undistort(img, opencv_k(cam.intrinsics), cam.distortion.opencv, None, opencv_k(Kn))
    out = {}
    for be in BACKENDS:
        pipe, got, _ = _run(rig, [dv.Decode(), st], be, img)
        assert pipe.plan.cameras[0].steps[1].name == "undistort"
        out[str(be)] = got.astype(np.int16)
    e = expected.astype(np.int16)
    # cv2.remap with OpenCV's own fixed-point maps is what cv2.undistort / undistortImage run: identical
    np.testing.assert_array_equal(out["cpu"], e)
    # float64 bilinear (numpy) and float32 grid_sample vs OpenCV's 1/32-pixel fixed-point weights: <= 1 where all
    # four taps are inside the sensor, <= 3 in the one-pixel ring that blends with the black border
    kc, kn = opencv_k(cam.intrinsics), opencv_k(Kn)
    if cam.distortion.model == "fisheye":
        mx, my = cv2.fisheye.initUndistortRectifyMap(kc, cam.distortion.opencv.reshape(4, 1), np.eye(3), kn, (W, H),
                                                     cv2.CV_32FC1)
    else:
        mx, my = cv2.initUndistortRectifyMap(kc, cam.distortion.opencv, None, kn, (W, H), cv2.CV_32FC1)
    inside = (mx >= 0) & (mx <= W - 1) & (my >= 0) & (my <= H - 1)
    for name in ("reference", str(("torch:cpu", "cpu"))):
        d = np.abs(out[name] - e).max(axis=2)
        assert d[inside].max() <= 1, (name, d[inside].max())
        assert d.max() <= 3, (name, d.max())
        assert d.mean() < 0.15, (name, d.mean())
    assert np.abs(out[str(("torch:cpu", "cpu"))] - out["reference"]).max() <= tol("undistort_torch_vs_cpu").atol


def test_alpha_zero_keeps_only_valid_pixels_and_alpha_one_keeps_the_whole_sensor():
    rig = _rig("pinhole5")
    flat = np.full((H, W, 3), 200, np.uint8)
    _, a0, _ = _run(rig, [dv.Decode(), dv.Undistort(alpha=0.0)], "reference", flat)
    _, a1, _ = _run(rig, [dv.Decode(), dv.Undistort(alpha=1.0)], "reference", flat)
    # alpha 0: every output pixel samples inside the sensor (only the outermost ring may blend with the border)
    assert (a0[2:-2, 2:-2] == 200).all()
    # alpha 1: the whole sensor is in view, so the barrel's corners leave black wedges
    assert (a1 == 0).mean() > 0.02
    assert (a1[H // 2, W // 2] == 200).all()


# ---------------------------------------------------------------------------------- against projected points
def _markers() -> np.ndarray:
    """Marker centres in the camera frame (metres): a 5 x 4 grid on the plane z = 2 m filling the view."""
    xs, ys = np.meshgrid(np.linspace(-1.15, 1.15, 5), np.linspace(-0.85, 0.85, 4))
    return np.stack([xs.ravel(), ys.ravel(), np.full(xs.size, 2.0)], axis=1)


SIGMA = 0.03  # marker radius on the plane, metres


def _render(cam: dv.Camera, pts_cam: np.ndarray) -> np.ndarray:
    """The distorted camera's picture of Gaussian markers on the plane z = 2 m (uint8 BGR, gray)."""
    kc = opencv_k(cam.intrinsics)
    u, v = np.meshgrid(np.arange(W, dtype=np.float64), np.arange(H, dtype=np.float64))  # OpenCV: centres at ints
    pix = np.stack([u.ravel(), v.ravel()], axis=1)[:, None, :]
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-12)
    if cam.distortion.model == "fisheye":
        xy = cv2.fisheye.undistortPoints(pix, kc, cam.distortion.opencv.reshape(4, 1), criteria=crit)[:, 0]
    else:
        xy = cv2.undistortPoints(pix, kc, cam.distortion.opencv, criteria=crit)[:, 0]
    z = pts_cam[0, 2]
    P = xy * z  # the plane point each pixel sees
    val = np.zeros(len(P))
    for m in pts_cam:
        val += np.exp(-((P - m[:2]) ** 2).sum(1) / (2 * SIGMA ** 2))
    img = np.clip(np.round(val * 250), 0, 255).astype(np.uint8).reshape(H, W)
    return np.repeat(img[:, :, None], 3, axis=2)


def _centroid(img: np.ndarray, uv: np.ndarray, radius: int) -> np.ndarray:
    """Intensity centroid (dvpipe's convention: pixel ``i`` spans ``[i, i + 1)``) in a window around ``uv``."""
    g = img[..., 0].astype(np.float64)
    i0, j0 = int(np.floor(uv[0])), int(np.floor(uv[1]))
    win = g[j0 - radius:j0 + radius + 1, i0 - radius:i0 + radius + 1]
    jj, ii = np.mgrid[j0 - radius:j0 + radius + 1, i0 - radius:i0 + radius + 1]
    return np.array([(win * (ii + 0.5)).sum() / win.sum(), (win * (jj + 0.5)).sum() / win.sum()])


@pytest.mark.parametrize("lens", sorted(LENSES))
def test_markers_land_at_the_pinhole_projection_of_the_new_intrinsics(lens):
    rig = _rig(lens)
    cam = rig.cameras[0]
    pts_cam = _markers()
    img = _render(cam, pts_cam)
    # the rendering is right: OpenCV's own projection of the markers (a distorted blob is not symmetric,
    # so its centroid is near, not at, the projected centre)
    rv, tv = np.zeros(3), np.zeros(3)
    kc = opencv_k(cam.intrinsics)
    if cam.distortion.model == "fisheye":
        proj = cv2.fisheye.projectPoints(pts_cam[:, None, :], rv, tv, kc, cam.distortion.opencv.reshape(4, 1))[0][:, 0]
    else:
        proj = cv2.projectPoints(pts_cam, rv, tv, kc, cam.distortion.opencv)[0][:, 0]
    proj = proj + 0.5  # OpenCV's pixel convention -> dvpipe's
    for p in proj:
        assert np.linalg.norm(_centroid(img, p, 4) - p) < 0.5
    pts_lidar = (np.linalg.inv(LIDAR2CAM) @ np.c_[pts_cam, np.ones(len(pts_cam))].T).T[:, :3]
    for be in BACKENDS:
        pipe, got, meta = _run(rig, [dv.Decode(), dv.Undistort(alpha=0.0)], be, img)
        uv, depth = dv.geometry.project(meta["lidar2img"], pts_lidar)
        assert np.allclose(depth, 2.0)
        radius = int(np.ceil(3.5 * SIGMA / 2.0 * meta["cam2img"][0, 0]))
        found = [(p, _centroid(got, p, radius)) for p in uv
                 if radius + 1 < p[0] < W - radius - 1 and radius + 1 < p[1] < H - radius - 1]
        assert len(found) >= 12, (be, len(found))
        err = max(np.linalg.norm(c - p) for p, c in found)
        assert err < 0.05, (lens, be, err)


def test_lidar2img_follows_the_new_intrinsics_through_later_stages():
    """Undistort, then Resize and Crop: the markers are where lidar2img (K' composed with both) puts them."""
    rig = _rig("fisheye")
    cam = rig.cameras[0]
    pts_cam = _markers()
    img = _render(cam, pts_cam)
    stages = [dv.Decode(), dv.Undistort(alpha=0.0), dv.Resize(size=(360, 480)), dv.Crop(left=40, top=30, width=400,
                                                                                          height=300)]
    pipe, got, meta = _run(rig, stages, "cpu", img)
    cp = pipe.plan.cameras[0]
    Kn = dv.Undistort(alpha=0.0).new_intrinsics(cam)
    assert np.allclose(cp.intrinsics, Kn)
    hand = np.array([[1.5, 0, -40], [0, 1.5, -30], [0, 0, 1]])  # 480/320 = 360/240 = 1.5, then the crop
    assert np.allclose(cp.img_aug, hand)
    assert np.allclose(meta["cam2img"][:3, :3], hand @ Kn)
    pts_lidar = (np.linalg.inv(LIDAR2CAM) @ np.c_[pts_cam, np.ones(len(pts_cam))].T).T[:, :3]
    uv, _ = dv.geometry.project(meta["lidar2img"], pts_lidar)
    radius = int(np.ceil(3.5 * SIGMA / 2.0 * meta["cam2img"][0, 0]))
    found = [(p, _centroid(got, p, radius)) for p in uv
             if radius + 1 < p[0] < 400 - radius - 1 and radius + 1 < p[1] < 300 - radius - 1]
    assert len(found) >= 8
    assert max(np.linalg.norm(c - p) for p, c in found) < 0.08


def test_bevdet_profile_reports_the_new_intrinsics():
    rig = _rig("pinhole5")
    cam = rig.cameras[0]
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Undistort(alpha=0.3), dv.Resize(size=(120, 160))], "cpu",
                       profile="bevdet")
    meta = pipe.process({"cam": _smooth_image()}).metas[0]
    Kn = dv.Undistort(alpha=0.3).new_intrinsics(cam)
    assert np.allclose(meta["intrinsics"], Kn)
    assert np.allclose(meta["post_rot"][:2, :2], np.diag([0.5, 0.5]))


def test_given_intrinsics_and_no_distortion():
    K = [[150.0, 0, 160], [0, 150.0, 120], [0, 0, 1]]
    rig = dv.Rig.from_dict({"cameras": [{"name": "cam", "width": W, "height": H, "encoding": "raw",
                                         "intrinsics": K_PIN}]})
    img = _smooth_image(1)
    # no distortion and K' = K: the identity map, pixel for pixel
    _, same, _ = _run(rig, [dv.Decode(), dv.Undistort()], "cpu", img)
    assert np.array_equal(same, img)
    pipe, _, meta = _run(rig, [dv.Decode(), dv.Undistort(intrinsics=K)], "reference", img)
    assert np.allclose(meta["cam2img"][:3, :3], K)


# ---------------------------------------------------------------------------------- errors
def test_undistort_errors_are_one_line_and_say_what_to_do():
    rig = _rig("pinhole5")
    with pytest.raises(ConfigError, match="put it right after Decode"):
        dv.Pipeline(rig, [dv.Decode(), dv.Resize(scale=0.5), dv.Undistort()], "cpu")
    with pytest.raises(ConfigError, match="alpha must be a number in 0..1"):
        dv.Undistort(alpha=2)
    with pytest.raises(ConfigError, match="3x3"):
        dv.Undistort(intrinsics=[[1, 0], [0, 1]])
    with pytest.raises(ConfigError, match=r"cameras\[0\]\.distortion: coeffs: the fisheye model takes 4"):
        dv.Rig.from_dict({"cameras": [{"name": "c", "width": 8, "height": 8,
                                       "distortion": {"model": "fisheye", "coeffs": [0.1, 0.0, 0.0]}}]})
    with pytest.raises(ConfigError, match="unknown distortion model"):
        dv.Rig.from_dict({"cameras": [{"name": "c", "width": 8, "height": 8,
                                       "distortion": {"model": "kannala", "coeffs": [0.1, 0.0, 0.0, 0.0]}}]})


def test_rig_files_carry_the_distortion(tmp_path):
    f = tmp_path / "rig.yaml"
    f.write_text("cameras:\n"
                 "  - {name: front, width: 64, height: 48, distortion: [-0.1, 0.01, 0.0, 0.0, 0.0]}\n"
                 "  - {name: side, width: 64, height: 48, distortion: {model: fisheye, coeffs: [0.1, 0, 0, 0]}}\n")
    rig = dv.Rig.from_yaml(f)
    assert rig.cameras[0].distortion == dv.types.Distortion("pinhole", (-0.1, 0.01, 0.0, 0.0, 0.0))
    assert rig.cameras[1].distortion.model == "fisheye"
    assert "distortion" not in rig.cameras[0].extra


def test_the_fisheye_rig_and_a_deployment_yaml_plan_undistort(tmp_path):
    import yaml

    from dvpipe.deploy import load_deployment

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    dep = {"name": "fe", "rig": str(root / "configs" / "rigs" / "fisheye_surround.yaml"),
           "pipeline": {"stages": ["decode", {"undistort": {"alpha": 0.25}}, {"resize": {"size": [480, 640]}}],
                        "backends": ["cpu"]},
           "source": {"type": "synthetic"}, "outputs": {"dir": str(tmp_path / "out")}}
    path = tmp_path / "fe.yaml"
    path.write_text(yaml.safe_dump(dep))
    d = load_deployment(path)
    assert d.pipeline.stages[1] == dv.Undistort(alpha=0.25)
    assert all(c.distortion.model == "fisheye" for c in d.rig.cameras)
    pipe = dv.Pipeline(d.rig, d.pipeline.stages, "cpu")
    for cp in pipe.plan.cameras:
        kc = cv2.fisheye.estimateNewCameraMatrixForUndistortRectify(
            opencv_k(cp.camera.intrinsics), cp.camera.distortion.opencv.reshape(4, 1), (1280, 960), np.eye(3),
            balance=0.25)
        assert np.allclose(cp.intrinsics[:2, :2], kc[:2, :2]) and np.allclose(cp.intrinsics[:2, 2], kc[:2, 2] + 0.5)
        assert np.allclose(cp.img_aug, np.diag([0.5, 0.5, 1.0]))


def test_float_input_after_normalise():
    """Undistort on normalised float pixels (same size, so allowed): the cpu kernel takes float32 and equals
    cv2.undistort on the float image; float16 goes to the reference backend with the reason in the plan."""
    rig = _rig("pinhole5")
    cam = rig.cameras[0]
    img = _smooth_image(2)
    norm = dv.Normalise(mean=(100.0, 110.0, 120.0), std=(50.0, 60.0, 70.0))
    pipe, got, _ = _run(rig, [dv.Decode(), norm, dv.Undistort()], "cpu", img)
    x = ((img.astype(np.float32) - np.float32([100, 110, 120])) / np.float32([50, 60, 70])).astype(np.float32)
    Kn = dv.Undistort().new_intrinsics(cam)
    expected = cv2.undistort(x, opencv_k(cam.intrinsics), cam.distortion.opencv, None, opencv_k(Kn))
    np.testing.assert_allclose(got, expected, atol=tol("undistort_float").atol)
    half = dv.Normalise(mean=(100.0, 110.0, 120.0), std=(50.0, 60.0, 70.0), dtype="float16")
    pipe = dv.Pipeline(rig, [dv.Decode(), half, dv.Undistort()], ("cpu", "reference"))
    step = next(s for s in pipe.plan.cameras[0].steps if s.name == "undistort")
    assert step.backend.name == "reference"
    assert "cv2.remap takes uint8 or float32 pixels, got float16" in dict(step.verdicts)["cpu"].reason
