"""The synthetic source renders raw camera frames (UYVY, YUYV, NV12) that decode to the rendered picture.

References, independent of dvpipe's encoder: OpenCV's ``cv2.cvtColor`` encoders (``COLOR_BGR2YUV_I420``,
repacked as NV12; ``COLOR_BGR2YUV_UYVY`` / ``_YUY2`` where the installed OpenCV has them, 4.9+), and the
textbook BT.601 limited-range forward matrix written out below with its published coefficients
(Y' = 16 + 65.481 R + 128.553 G + 24.966 B on a 0..1 scale, ...). The decode is dvpipe's own (the
reference and cpu backends, checked against the inverse formula and OpenCV in tests/video/test_raw_yuv.py).

Quantisation bound of a round trip (limited range): Y is rounded in steps of 255/219 (error <= 0.58 on
the 0..255 scale) and Cb/Cr in steps of 255/224 (<= 0.57), which reach B through 1.772 and R through
1.402: <= 1.6 before the output is rounded, so <= 2 levels where the chroma is flat over the pixel
pair (4:2:2) or 2x2 block (4:2:0); OpenCV's fixed-point decode (the cpu backend) adds 1.
"""
from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import pytest

from dvpipe import Pipeline, Rig
from dvpipe.backends import _raw_yuv
from dvpipe.deploy import Runner, load_deployment
from dvpipe.deploy.sources import open_source
from dvpipe.deploy.sources.synthetic import _boxes, encode_raw_yuv, render_background, render_frame
from dvpipe.testing.deployments import synthetic_deployment
from dvpipe.stages.image import Decode

from tolerances import tol

ENCODINGS = ("uyvy", "yuyv", "nv12")
W, H = 96, 64


def bt601_limited_forward(bgr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-pixel (Y, Cb, Cr) in float64, ITU-R BT.601 limited range, from 8-bit BGR (textbook coefficients)."""
    b, g, r = (bgr[..., k].astype(np.float64) / 255.0 for k in range(3))
    y = 16 + 65.481 * r + 128.553 * g + 24.966 * b
    cb = 128 - 37.797 * r - 74.203 * g + 112.0 * b
    cr = 128 + 112.0 * r - 93.786 * g - 18.214 * b
    return y, cb, cr


def pack_reference(bgr: np.ndarray, enc: str) -> np.ndarray:
    """The frame bytes by the textbook formula: chroma averaged over the pair / block, then rounded."""
    h, w = bgr.shape[:2]
    y, cb, cr = bt601_limited_forward(bgr)
    q = lambda a: np.clip(np.floor(a + 0.5), 0, 255).astype(np.uint8)
    if enc == "nv12":
        u = cb.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
        v = cr.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
        return np.concatenate([q(y).ravel(), np.stack([q(u), q(v)], -1).ravel()])
    u, v = q(cb.reshape(h, w // 2, 2).mean(2)), q(cr.reshape(h, w // 2, 2).mean(2))
    yy = q(y)
    quads = (u, yy[:, 0::2], v, yy[:, 1::2]) if enc == "uyvy" else (yy[:, 0::2], u, yy[:, 1::2], v)
    return np.stack(quads, -1).ravel()


def pack_opencv(bgr: np.ndarray, enc: str) -> np.ndarray | None:
    h = bgr.shape[0]
    if enc == "nv12":
        i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)  # Y plane, then the U plane, then the V plane
        y, rest = i420[:h], i420[h:].ravel()
        u, v = rest[: rest.size // 2], rest[rest.size // 2:]
        return np.concatenate([y.ravel(), np.stack([u, v], -1).ravel()])
    code = getattr(cv2, {"uyvy": "COLOR_BGR2YUV_UYVY", "yuyv": "COLOR_BGR2YUV_YUY2"}[enc], None)
    return None if code is None else cv2.cvtColor(bgr, code).ravel()


def block_constant_picture(seed: int = 0) -> np.ndarray:
    """Random colours, one per 2x2 block: chroma sampling (averaged or top-left) cannot matter."""
    blocks = np.random.default_rng(seed).integers(0, 256, (H // 2, W // 2, 3), dtype=np.uint8)
    return np.repeat(np.repeat(blocks, 2, 0), 2, 1)


@pytest.mark.parametrize("enc", ENCODINGS)
def test_frame_bytes_are_the_textbook_bt601_encoding(enc):
    pic = np.ascontiguousarray(render_frame(render_background(_camera(enc), W, H), _camera(enc), _boxes(), 0.2))
    got = np.frombuffer(encode_raw_yuv(pic, enc), np.uint8)
    assert got.size == _raw_yuv.frame_bytes(enc, W, H)
    ref = pack_reference(pic, enc)
    assert np.abs(got.astype(int) - ref).max() <= tol("raw_yuv_encoder").atol  # only the 4-decimal coefficients at .5 boundaries
    assert np.mean(got != ref) < 0.01


@pytest.mark.parametrize("enc", ENCODINGS)
def test_frame_bytes_match_opencvs_encoder(enc):
    pic = block_constant_picture()
    ref = pack_opencv(pic, enc)
    if ref is None:
        pytest.skip(f"OpenCV {cv2.__version__} has no BGR -> {enc.upper()} conversion (4.9+)")
    got = np.frombuffer(encode_raw_yuv(pic, enc), np.uint8)
    assert np.abs(got.astype(int) - ref).max() <= tol("raw_yuv_encoder").atol  # OpenCV's fixed-point rounding


def test_byte_order_of_the_layouts():
    """A flat red picture: Y 81, U 90, V 240 (100 % red bar, BT.601 limited) in each layout's order."""
    pic = np.zeros((2, 4, 3), np.uint8)
    pic[..., 2] = 255
    assert list(encode_raw_yuv(pic, "uyvy")[:4]) == [90, 81, 240, 81]
    assert list(encode_raw_yuv(pic, "yuyv")[:4]) == [81, 90, 81, 240]
    nv = encode_raw_yuv(pic, "nv12")
    assert list(nv[:8]) == [81] * 8 and list(nv[8:]) == [90, 240, 90, 240]


def _camera(enc: str, **extra):
    dep = load_deployment(synthetic_deployment(1, width=W, height=H, encoding=enc, cycle=3, frames=3))
    return replace(dep.rig.cameras[0], extra=extra) if extra else dep.rig.cameras[0]


def _frames(enc: str, n: int = 3, **deployment):
    dep = load_deployment(synthetic_deployment(1, width=W, height=H, encoding=enc, cycle=n, frames=n, **deployment))
    cam, cfg = dep.rig.cameras[0], dep.cameras[0]
    src = open_source(cam, cfg.source)
    src.open()
    try:
        items = [src.read() for _ in range(n)]
    finally:
        src.close()
    return cam, cfg, items


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("enc", ENCODINGS)
def test_source_frames_decode_to_the_rendered_picture(enc, backend):
    cam, cfg, items = _frames(enc)
    bg = render_background(cam, W, H)
    assert cam.encoding == enc
    pipe = Pipeline(Rig([cam]), [Decode()], backends=(backend,))
    slack = 2 + (backend == "cpu")  # the module docstring's bound; OpenCV's fixed point adds 1
    for k, item in enumerate(items):
        assert isinstance(item.frame.data, bytes) and len(item.frame.data) == _raw_yuv.frame_bytes(enc, W, H)
        want = render_frame(bg, cam, _boxes(), k / cfg.source.options["fps"]).astype(int)
        batch = pipe.process({cam.name: item.frame.data})
        assert not batch.drops, batch.drops
        got = np.transpose(np.asarray(batch.images)[0], (1, 2, 0)).astype(int)  # CHW -> HWC, BGR
        err = np.abs(got - want)
        cell = (2, 2) if enc == "nv12" else (1, 2)  # the pixels that share one chroma sample
        cells = want.reshape(H // cell[0], cell[0], W // cell[1], cell[1], 3)
        spread = (cells.max(axis=(1, 3)) - cells.min(axis=(1, 3))).max(-1)  # colour range in each cell
        flat = np.repeat(np.repeat(spread == 0, cell[0], 0), cell[1], 1)
        assert flat.mean() > 0.1, "too few flat cells for the bound to mean anything"
        assert err[flat].max() <= slack, (enc, backend, k)
        # elsewhere the shared chroma is the cell's mean: off by at most about the cell's colour range
        bound = slack + 2 * np.repeat(np.repeat(spread, cell[0], 0), cell[1], 1)
        assert (err.max(-1) <= bound).all(), (enc, backend, k)
        assert err.mean() < 1.5


def test_full_range_bt709_camera_frames_decode_in_that_colour():
    cam = _camera("yuyv", yuv_matrix="bt709", yuv_range="full")
    pic = block_constant_picture(1)
    data = encode_raw_yuv(pic, "yuyv", *_raw_yuv.colour_of(cam))
    # full range BT.709, the published coefficients: Y = 0.2126 R + 0.7152 G + 0.0722 B
    b, g, r = (pic[..., k].astype(np.float64) for k in range(3))
    y = np.frombuffer(data, np.uint8).reshape(H, W // 2, 4)[..., [0, 2]].reshape(H, W)
    assert np.abs(y - (0.2126 * r + 0.7152 * g + 0.0722 * b)).max() <= tol("rounded_once").atol
    back = _raw_yuv.to_bgr_reference(data, "yuyv", W, H, "bt709", "full").astype(int)
    assert np.abs(back - pic).max() <= tol("yuv_round_trip").atol  # steps of 1 level: tighter than limited range


def test_a_deployment_of_raw_yuv_cameras_runs():
    seen = []
    dep = synthetic_deployment(["F", "L", "R"], width=W, height=H, encoding="uyvy", frames=4, cycle=2)
    dep["cameras"] = [{"name": "F"}, {"name": "L", "encoding": "yuyv"}, {"name": "R", "encoding": "nv12"}]
    result = Runner(load_deployment(dep), write_outputs=False, model=lambda b: seen.append(b.valid.copy())).run()
    assert result.sets == 4 and result.accounting.emitted == {"F": 4, "L": 4, "R": 4}
    assert len(seen) == 4 and all(v.all() for v in seen)


def test_a_synthetic_resolution_other_than_the_cameras_is_refused():
    from dvpipe.deploy.sources.base import SourceError

    dep = load_deployment(synthetic_deployment(1, width=W, height=H, encoding="nv12", frames=1))
    cam, cfg = dep.rig.cameras[0], dep.cameras[0]
    src = open_source(cam, replace(cfg.source, options={**cfg.source.options, "resolution": (48, 64)}))
    with pytest.raises(SourceError, match="raw NV12 frame has the camera's size 96x64"):
        src.open()


def test_an_odd_camera_width_is_refused_with_one_line():
    from dvpipe.deploy.sources.base import SourceError

    from dvpipe.deploy import DeploymentError

    # the loader refuses it first, at the source's key ...
    with pytest.raises(DeploymentError, match=r"source: camera CAM0 is 95x64: UYVY frames need an even width"):
        load_deployment(synthetic_deployment(1, width=95, height=64, encoding="uyvy", frames=1))
    # ... and a source built without the loader refuses it when it opens
    dep = load_deployment(synthetic_deployment(1, width=96, height=64, encoding="uyvy", frames=1))
    src = open_source(replace(dep.rig.cameras[0], width=95), dep.cameras[0].source)
    with pytest.raises(SourceError, match=r"^UYVY needs an even width; the camera is 95x64$"):
        src.open()
