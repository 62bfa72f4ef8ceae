"""Raw camera encodings (UYVY, YUYV, NV12) decoded to BGR on the reference and cpu backends.

References, independent of dvpipe: the BT.601 / BT.709 Y'CbCr -> R'G'B' equations written out below with
the published coefficients, the standard limited-range colour-bar values (100 % red, green, blue), and
OpenCV's ``cv2.cvtColor`` (COLOR_YUV2BGR_UYVY / _YUY2 / _NV12).
"""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from dvpipe import Camera, Pipeline, Rig
from dvpipe.errors import ConfigError
from dvpipe.stages.image import Decode
from tolerances import tol

W, H = 32, 16


def bt601_limited(y, u, v):
    """ITU-R BT.601, limited range, the textbook coefficients (Y' 16..235, Cb/Cr 16..240)."""
    y, u, v = (np.asarray(a, np.float64) for a in (y, u, v))
    r = 1.164383 * (y - 16) + 1.596027 * (v - 128)
    g = 1.164383 * (y - 16) - 0.391762 * (u - 128) - 0.812968 * (v - 128)
    b = 1.164383 * (y - 16) + 2.017232 * (u - 128)
    return np.clip(np.floor(np.stack([b, g, r], -1) + 0.5), 0, 255)


def bt709_full(y, u, v):
    """ITU-R BT.709 coefficients, full range."""
    y, u, v = (np.asarray(a, np.float64) for a in (y, u, v))
    r = y + 1.5748 * (v - 128)
    g = y - 0.187324 * (u - 128) - 0.468124 * (v - 128)
    b = y + 1.8556 * (u - 128)
    return np.clip(np.floor(np.stack([b, g, r], -1) + 0.5), 0, 255)


def pack(enc, y, u, v):
    """Bytes of a frame from full-size Y and per-pair (4:2:2) or per-block (4:2:0) chroma, by the V4L2 layouts."""
    h, w = y.shape
    if enc == "nv12":
        uv = np.stack([u, v], -1).reshape(h // 2, w)
        return np.concatenate([y, uv]).astype(np.uint8).tobytes()
    out = np.empty((h, w // 2, 4), np.uint8)
    order = {"uyvy": (u, y[:, 0::2], v, y[:, 1::2]), "yuyv": (y[:, 0::2], u, y[:, 1::2], v)}[enc]
    for k, plane in enumerate(order):
        out[..., k] = plane
    return out.tobytes()


def frame(enc, seed=0, lo=16, hi=236):
    rng = np.random.default_rng(seed)
    y = rng.integers(lo, hi, (H, W))
    cshape = (H // 2, W // 2) if enc == "nv12" else (H, W // 2)
    u, v = rng.integers(16, 241, cshape), rng.integers(16, 241, cshape)
    full = (lambda c: np.repeat(np.repeat(c, 2, 0), 2, 1)) if enc == "nv12" else (lambda c: np.repeat(c, 2, 1))
    return pack(enc, y, u, v), (y, full(u), full(v))


def run(enc, data, backend, **extra):
    cam = Camera("C", width=W, height=H, encoding=enc, extra=extra)
    pipe = Pipeline(Rig([cam]), [Decode()], backends=(backend,))
    batch = pipe.process({"C": data})
    assert not batch.drops, batch.drops
    return np.transpose(np.asarray(batch.images)[0], (1, 2, 0))  # CHW -> HWC, BGR


@pytest.mark.parametrize("enc", ["uyvy", "yuyv", "nv12"])
def test_reference_is_the_bt601_limited_formula(enc):
    data, (y, u, v) = frame(enc, lo=0, hi=256)
    got = run(enc, data, "reference").astype(int)
    tol("uint8_rounding_flip").check(got, bt601_limited(y, u, v))  # coefficient rounding at .5 boundaries only


@pytest.mark.parametrize("enc", ["uyvy", "yuyv", "nv12"])
def test_cpu_is_opencv_cvtcolor_and_within_one_of_the_reference(enc):
    data, (y, u, v) = frame(enc)
    code = {"uyvy": cv2.COLOR_YUV2BGR_UYVY, "yuyv": cv2.COLOR_YUV2BGR_YUY2, "nv12": cv2.COLOR_YUV2BGR_NV12}[enc]
    src = np.frombuffer(data, np.uint8).reshape((H * 3 // 2, W) if enc == "nv12" else (H, W, 2))
    cpu = run(enc, data, "cpu")
    assert np.array_equal(cpu, cv2.cvtColor(src, code))
    tol("uint8_rounding_flip").check(cpu, bt601_limited(y, u, v))  # OpenCV: BT.601 limited, fixed point


def test_below_black_opencv_clamps_and_the_reference_does_not():
    data, (y, u, v) = frame("uyvy", lo=0, hi=16)  # limited-range footroom: Y' < 16
    ref = run("uyvy", data, "reference").astype(int)
    tol("uint8_rounding_flip").check(ref, bt601_limited(y, u, v))
    assert np.abs(run("uyvy", data, "cpu").astype(int) - ref).max() > 1  # the documented difference


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("enc", ["uyvy", "yuyv", "nv12"])
def test_colour_bars_land_on_their_colours(enc, backend):
    # 100 % colour bars, BT.601 limited range: red (81, 90, 240), green (145, 54, 34), blue (41, 240, 110)
    bars = [((81, 90, 240), (0, 0, 255)), ((145, 54, 34), (0, 255, 0)), ((41, 240, 110), (255, 0, 0)),
            ((235, 128, 128), (255, 255, 255)), ((16, 128, 128), (0, 0, 0))]
    for (yy, uu, vv), bgr in bars:
        cshape = (H // 2, W // 2) if enc == "nv12" else (H, W // 2)
        data = pack(enc, np.full((H, W), yy), np.full(cshape, uu), np.full(cshape, vv))
        got = run(enc, data, backend).astype(int)
        assert np.abs(got - np.array(bgr)).max() <= tol("colour_bars").atol, (enc, backend, bgr, got[0, 0])


def test_byte_order_uyvy_is_not_yuyv():
    data, (y, u, v) = frame("uyvy")
    as_yuyv = run("yuyv", data, "reference").astype(int)
    assert np.abs(as_yuyv - bt601_limited(y, u, v)).max() > 10


def test_array_payloads_of_the_documented_shapes():
    data, _ = frame("uyvy")
    ref = run("uyvy", data, "reference")
    a = np.frombuffer(data, np.uint8)
    assert np.array_equal(run("uyvy", a.reshape(H, W, 2), "reference"), ref)
    assert np.array_equal(run("uyvy", a.reshape(H, 2 * W), "cpu"), run("uyvy", data, "cpu"))
    nv, _ = frame("nv12")
    assert np.array_equal(run("nv12", np.frombuffer(nv, np.uint8).reshape(H * 3 // 2, W), "reference"),
                          run("nv12", nv, "reference"))


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_bt709_full_range_is_configurable(backend):
    data, (y, u, v) = frame("yuyv", lo=0, hi=256)
    got = run("yuyv", data, backend, yuv_matrix="bt709", yuv_range="full").astype(int)
    tol("uint8_rounding_flip").check(got, bt709_full(y, u, v))


def test_bad_frames_and_settings_are_one_line_errors():
    def drop_reason(pipe, data):
        batch = pipe.process({"C": data})
        assert not batch.valid[0] and len(batch.drops) == 1
        return batch.drops[0][1]

    pipe = Pipeline(Rig([Camera("C", width=W, height=H, encoding="uyvy")]), [Decode()], backends=("cpu",))
    assert "UYVY frame is 10 bytes; a 32x16 camera needs 1024" in drop_reason(pipe, b"0123456789")
    assert "has shape (16, 32)" in drop_reason(pipe, np.zeros((H, W), np.uint8))
    with pytest.raises(ConfigError, match="yuv_matrix 'bt2020' is not one of bt601, bt709"):
        Pipeline(Rig([Camera("C", width=W, height=H, encoding="uyvy", extra={"yuv_matrix": "bt2020"})]), [Decode()],
                 backends=("cpu",))
    odd = Pipeline(Rig([Camera("C", width=33, height=H, encoding="yuyv")]), [Decode()], backends=("reference",))
    assert "even width" in drop_reason(odd, bytes(33 * H * 2))


def test_rig_files_accept_the_raw_encodings():
    rig = Rig.from_dict({"cameras": [{"name": "F", "width": 1920, "height": 1208, "encoding": "uyvy"},
                                     {"name": "B", "width": 1920, "height": 1080, "encoding": "nv12"}]})
    assert [c.encoding for c in rig.cameras] == ["uyvy", "nv12"]
