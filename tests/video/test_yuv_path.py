"""Video at fidelity ``fast``: the decoder's 4:2:0 planes go straight into the output (no BGR picture).

References are independent of dvpipe's kernels: FFmpeg's own decode of the same access units
(PyAV, pictures sorted by pts = presentation order) and, in numpy float64, the standard's
Y'CbCr -> R'G'B' formula (BT.601 / BT.709, limited or full range as the picture is tagged), the
2x2 mean and the normalisation. At fidelity ``reference`` the pixels stay FFmpeg's bgr24: the same
kernel run reproduces FFmpeg's conversion bit for bit (checked against FFmpeg's own picture here and, for
every input combination, in tests/backends/test_swscale_exact.py).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

av = pytest.importorskip("av")

import dvpipe as dv  # noqa: E402
from conftest import rig_dict  # noqa: E402
from dvpipe.backends import cpu as cpu_backend  # noqa: E402
from dvpipe.video import FILE_LOOKAHEAD, AccessUnit, is_keyframe, presentation_packets  # noqa: E402
from tolerances import tol  # noqa: E402

pytestmark = pytest.mark.skipif(cpu_backend._native is None, reason="the YUV kernel is compiled")

W, H, N = 96, 64, 14
TINY_MEAN, TINY_STD = np.array([123.675, 116.28, 103.53]), np.array([58.395, 57.12, 57.375])
BASE_MEAN = np.array([103.530, 116.280, 123.675])


def _images(n=N, w=W, h=H, seed=0):
    """Moving, saturated colour content (matrix or range mistakes show as several grey levels)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    out = []
    for k in range(n):
        img = np.stack([128 + 120 * np.sin((x + 3 * k) / 7), 128 + 120 * np.cos((y - 2 * k) / 5),
                        128 + 120 * np.sin((x - y + k) / 9)], -1)
        img[(x // 16 + y // 16 + k) % 3 == 0] = rng.integers(0, 256, 3)
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


def _encode(images, pix_fmt="yuv420p", colorspace=None, color_range=None, codec="libx264"):
    """Annex B access units ``(data, pts_ms, key)`` with B-frames (pyramid), in decode order."""
    cc = av.CodecContext.create(codec, "w")
    cc.width, cc.height, cc.pix_fmt = images[0].shape[1], images[0].shape[0], pix_fmt
    cc.time_base, cc.framerate = Fraction(1, 1000), Fraction(10)
    cc.gop_size, cc.max_b_frames = 12, 3
    if colorspace is not None:
        cc.colorspace = colorspace
    if color_range is not None:
        cc.color_range = color_range
    cc.options = {"preset": "veryfast", "x264-params": "bframes=3:b-pyramid=normal:repeat-headers=1"}
    aus = []
    for k, img in enumerate(images):
        f = av.VideoFrame.from_ndarray(img, format="bgr24")
        f.pts = 100 * k
        aus += [(bytes(p), int(p.pts), bool(p.is_keyframe)) for p in cc.encode(f)]
    aus += [(bytes(p), int(p.pts), bool(p.is_keyframe)) for p in cc.encode(None)]
    return aus


def _packets(aus):
    return presentation_packets((AccessUnit(data, pts * 1_000_000, key or is_keyframe(data, "h264"))
                                 for data, pts, key in aus), "pts", FILE_LOOKAHEAD)


def _ffmpeg_pictures(aus):
    dec = av.CodecContext.create("h264", "r")
    pics = []
    for data, pts, _ in aus:
        p = av.Packet(data)
        p.pts = pts
        pics += dec.decode(p)
    pics += dec.decode(None)
    return sorted(pics, key=lambda f: f.pts)


def _formula(pic, shrink, mean, std, to_rgb):
    """The standard's conversion of FFmpeg's planes (float64), chroma nearest (shrink 1) or per 2x2 block."""
    h, w = pic.height, pic.width
    full = pic.format.name == "yuvj420p" or int(pic.color_range) == 2
    kr, kb = (0.2126, 0.0722) if int(pic.colorspace) == 1 else (0.299, 0.114)
    kg = 1 - kr - kb
    y = np.frombuffer(pic.planes[0], np.uint8).reshape(h, -1)[:, :w].astype(np.float64)
    u = np.frombuffer(pic.planes[1], np.uint8).reshape(h // 2, -1)[:, :w // 2] - 128.0
    v = np.frombuffer(pic.planes[2], np.uint8).reshape(h // 2, -1)[:, :w // 2] - 128.0
    if shrink == 2:
        y = y.reshape(h // 2, 2, w // 2, 2).mean((1, 3))
    else:
        u, v = (np.repeat(np.repeat(c, 2, 0), 2, 1) for c in (u, v))
    yl, c = ((y, 1.0) if full else ((y - 16) * 255 / 219, 255 / 224))
    r = yl + c * 2 * (1 - kr) * v
    g = yl - c * (2 * (1 - kb) * kb / kg * u + 2 * (1 - kr) * kr / kg * v)
    b = yl + c * 2 * (1 - kb) * u
    rgb = np.clip(np.stack([r, g, b] if to_rgb else [b, g, r], -1), 0, 255)
    return ((rgb - mean) / std).transpose(2, 0, 1)


def _run(profile, packets, fidelity, size=(W, H)):
    rig = dv.Rig.from_dict(rig_dict([size], encoding="h264"))
    pipe = dv.Pipeline.from_profile(profile, rig, fidelity=fidelity)
    steps = [s.kernel.name for s in pipe.plan.cameras[0].steps]
    outs = []
    for p in packets:
        b = pipe.process({"CAM0": p})
        assert b.valid.all(), b.drops
        outs.append(np.array(b.images[0]))
    pipe.close()
    return steps, outs


@pytest.mark.parametrize("tags", [{}, {"colorspace": 1}, {"color_range": 2}])
def test_fast_tiny_is_the_formula_of_ffmpegs_planes_in_presentation_order(tags):
    aus = _encode(_images(), **tags)
    pics = _ffmpeg_pictures(aus)
    steps, outs = _run("bevformer-tiny", _packets(aus), "fast")
    assert steps == ["fused_decode_resize_normalise_pad_batch"], steps
    assert len(outs) == len(pics) == N
    for k, (got, pic) in enumerate(zip(outs, pics)):
        want = _formula(pic, 2, TINY_MEAN, TINY_STD, to_rgb=True)
        np.testing.assert_allclose(got[:, :H // 2, :W // 2], want, **tol("yuv_formula").allclose, err_msg=f"frame {k} {tags}")
        assert (got[:, H // 2:, :] == 0).all() and (got[:, :, W // 2:] == 0).all()  # the pad strip


def test_fast_base_without_resize_converts_every_pixel():
    aus = _encode(_images())
    pics = _ffmpeg_pictures(aus)
    steps, outs = _run("bevformer-base", _packets(aus), "fast")
    assert steps == ["fused_decode_normalise_pad_batch"], steps
    for got, pic in zip(outs, pics):
        want = _formula(pic, 1, BASE_MEAN, np.ones(3), to_rgb=False)
        np.testing.assert_allclose(got[:, :H, :W], want, **tol("yuv_formula_std1").allclose)


@pytest.mark.parametrize("tags", [{}, {"colorspace": 1}, {"color_range": 2}])
def test_fast_stays_close_to_ffmpegs_own_bgr24_conversion(tags):
    """fast reads the picture's matrix and range as FFmpeg's bgr24 does: a wrong matrix or range costs
    4-8 grey levels on this content; FFmpeg's fixed-point conversion itself differs by ~1."""
    aus = _encode(_images(), **tags)
    pk = _packets(aus)
    _, fast = _run("bevformer-base", pk, "fast")
    _, ref = _run("bevformer-base", pk, "reference")  # FFmpeg's bgr24 bytes (test_reference_is_ffmpegs...)
    d = np.abs(np.stack(fast)[:, :, :H, :W].astype(np.float64) - np.stack(ref)[:, :, :H, :W])
    problem = tol("fast_vs_ffmpeg_bgr24", "fast", "cpu").violation(d, d)
    assert not problem, (tags, problem, d.max())


def test_reference_keeps_ffmpegs_bgr24_pixels():
    aus = _encode(_images())
    pics = _ffmpeg_pictures(aus)
    steps, outs = _run("bevformer-tiny", _packets(aus), "reference")
    assert steps == ["fused_decode_normalise_resize_pad_batch"], steps  # from the planes, FFmpeg's arithmetic
    for got, pic in zip(outs, pics):
        bgr = pic.to_ndarray(format="bgr24").astype(np.float64)
        mean2 = bgr.reshape(H // 2, 2, W // 2, 2, 3).mean((1, 3))[..., ::-1]
        np.testing.assert_allclose(got[:, :H // 2, :W // 2], ((mean2 - TINY_MEAN) / TINY_STD).transpose(2, 0, 1),
                                   **tol("video_mean2x2").allclose)


@pytest.mark.parametrize("profile,shrink", [("bevformer-tiny", 2), ("bevformer-base", 1)])
@pytest.mark.parametrize("tags", [{}, {"colorspace": 1}, {"color_range": 2}])
def test_reference_is_ffmpegs_bgr24_picture_through_the_fused_kernel_bit_for_bit(tags, profile, shrink):
    """What reference computed before it read the planes: FFmpeg's bgr24 picture, then the fused kernel
    (``normalise_planes``, checked against mmcv's normalise and OpenCV's resize in test_native_kernel.py)."""
    aus = _encode(_images(), **tags)
    pics = _ffmpeg_pictures(aus)
    _, outs = _run(profile, _packets(aus), "reference")
    mean, std, order = (TINY_MEAN, TINY_STD, (2, 1, 0)) if shrink == 2 else (BASE_MEAN, np.ones(3), (0, 1, 2))
    for k, (got, pic) in enumerate(zip(outs, pics)):
        want = np.zeros_like(got)
        cpu_backend._native.normalise_planes(pic.to_ndarray(format="bgr24"), want[:, :H // shrink, :W // shrink], order,
                                             tuple(mean), tuple(1 / std), shrink)
        assert np.array_equal(got, want), (k, tags, np.abs(got - want).max())


def test_other_layouts_take_ffmpegs_conversion_at_fast():
    """A 4:4:4 stream has no 4:2:0 planes: fast then runs FFmpeg's bgr24 and the fused kernel (fast's uint8
    2x2 mean before normalising: half a grey level of rounding from reference)."""
    aus = _encode(_images(), pix_fmt="yuv444p")
    assert _ffmpeg_pictures(aus)[0].format.name == "yuv444p"
    pk = _packets(aus)
    steps, fast = _run("bevformer-tiny", pk, "fast")
    assert steps == ["fused_decode_resize_normalise_pad_batch"]  # the plan cannot know; the kernel falls back
    _, ref = _run("bevformer-tiny", pk, "reference")
    for a, b in zip(fast, ref):
        np.testing.assert_allclose(a, b, **tol("uint8_mean_rounding").allclose)


def test_no_exact_2x_shrink_is_not_taken_by_the_yuv_kernel():
    rig = dv.Rig.from_dict(rig_dict([(W, H)], encoding="h264"))
    pipe = dv.Pipeline.from_profile("bevformer-small", rig, fidelity="fast")  # x0.8
    assert not any("fused_decode" in s.kernel.name for s in pipe.plan.cameras[0].steps)
    pipe.close()


def test_no_buffer_is_allocated_per_frame_set():
    pk = _packets(_encode(_images()))
    rig = dv.Rig.from_dict(rig_dict([(W, H)], encoding="h264"))
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, fidelity="fast")
    pipe.process({"CAM0": pk[0]})
    pipe.process({"CAM0": pk[1]})
    before = {k: {n: id(v) for n, v in s.items()} for k, s in pipe._states.items()}
    for p in pk[2:]:
        pipe.process({"CAM0": p})
    after = {k: {n: id(v) for n, v in s.items()} for k, s in pipe._states.items()}
    assert before == after
    pipe.close()


def test_kernel_checks_its_arguments():
    n = cpu_backend._native
    y, c = bytes(W * H), bytes((W // 2) * (H // 2))
    out = np.empty((3, H // 2, W // 2), np.float32)
    args = ((2, 1, 0), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 2, (1.0, 0.0, 1.0, 0.0, 0.0, 1.0))
    n.yuv420_normalise(y, W, c, c, W // 2, W, H, out, *args)
    assert (out == 0).all()  # Y 0, Cb = Cr = 0 -> chroma -128: clipped to 0 in every channel
    with pytest.raises(ValueError, match="luma buffer"):
        n.yuv420_normalise(y[:-1], W, c, c, W // 2, W, H, out, *args)
    with pytest.raises(ValueError, match="chroma buffer"):
        n.yuv420_normalise(y, W, c[:-1], c, W // 2, W, H, out, *args)
    with pytest.raises(ValueError, match="dst must be"):
        n.yuv420_normalise(y, W, c, c, W // 2, W, H, out[:, :-1], *args)
    with pytest.raises(ValueError, match="permutation"):
        n.yuv420_normalise(y, W, c, c, W // 2, W, H, out, (0, 0, 1), *args[1:])
