"""dvpipe.backends._native.normalise_planes against formulas written here with numpy.

shrink 1 must match mmcv's imnormalize (tests/_bevformer_ref.py) bit for bit when std = 1
(bevformer-base) and within 1 ulp otherwise (the kernel multiplies in float32, OpenCV in double);
shrink 2 must equal the float64 2x2 mean, normalised, to float
rounding. Strided inputs and outputs (a slice of a decode buffer, the camera's slot of a padded
batch) are written only where they should be.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from _bevformer_ref import imnormalize
from dvpipe.backends import cpu as cpu_backend
from tolerances import tol

native = cpu_backend._native

TINY = ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375), True)
BASE = ((103.530, 116.280, 123.675), (1.0, 1.0, 1.0), False)


def test_the_kernel_is_built_wherever_a_c_compiler_is():
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on PATH: the OpenCV path is used (and tested in tests/backends/test_cpu.py)")
    assert native is not None, cpu_backend.NATIVE_REASON


pytestmark_native = pytest.mark.skipif(native is None, reason=str(cpu_backend.NATIVE_REASON))


def _coef(mean, std, to_rgb):
    order = (2, 1, 0) if to_rgb else (0, 1, 2)
    return order, tuple(mean), tuple(1.0 / s for s in std)


def _image(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytestmark_native
@pytest.mark.parametrize("norm", [TINY, BASE], ids=["tiny", "base"])
@pytest.mark.parametrize("hw", [(900, 1600), (359, 641), (1, 1), (7, 33)])
def test_shrink1_matches_mmcv_imnormalize(norm, hw):
    img = _image(*hw)
    out = np.full((3,) + hw, np.nan, np.float32)
    native.normalise_planes(img, out, *_coef(*norm), 1)
    want = imnormalize(img.astype(np.float32), *norm).transpose(2, 0, 1)
    if norm is BASE:
        assert np.array_equal(out, want)
    else:
        np.testing.assert_array_max_ulp(out, want, maxulp=1)


@pytestmark_native
@pytest.mark.parametrize("hw", [(450, 800), (1, 1), (31, 17)])
def test_shrink2_is_the_normalised_2x2_mean(hw):
    mean, std, to_rgb = TINY
    img = _image(2 * hw[0], 2 * hw[1], seed=1)
    out = np.empty((3,) + hw, np.float32)
    native.normalise_planes(img, out, *_coef(*TINY), 2)
    blocks = img.astype(np.float64).reshape(hw[0], 2, hw[1], 2, 3).mean(axis=(1, 3))[..., ::-1]
    want = ((blocks - np.array(mean)) / np.array(std)).transpose(2, 0, 1)
    assert np.abs(out - want).max() < tol("native_kernel").atol


@pytestmark_native
def test_shrink2_sums_stay_exact_at_the_uint8_extremes():
    img = np.full((4, 4, 3), 255, np.uint8)
    img[2:, ::2] = 0
    out = np.empty((3, 2, 2), np.float32)
    native.normalise_planes(img, out, (0, 1, 2), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 2)
    assert np.array_equal(out[:, 0], np.full((3, 2), 255.0, np.float32))
    assert np.array_equal(out[:, 1], np.full((3, 2), 127.5, np.float32))


@pytestmark_native
def test_shrink2_strided_rows_planes_and_any_channel_order():
    # rows of the source strided, planes and rows of the destination strided, a channel used twice,
    # an odd output width (the vector loops' tails): the same float32 steps in numpy, equal bit for bit
    big = _image(70, 90, seed=3)
    src = big[3:65, 5:75]  # 62 x 70 pixels, rows strided by 90 pixels -> 31 x 35 out
    batch = np.full((2, 3, 40, 48), -7.0, np.float32)
    slot = batch[1, :, :31, :35]
    mean, inv_std = (10.0, 20.0, 30.0), (0.5, 0.25, 2.0)
    native.normalise_planes(src, slot, (2, 2, 0), mean, inv_std, 2)
    sums = src.astype(np.int32).reshape(31, 2, 35, 2, 3).sum(axis=(1, 3)).astype(np.float32)
    want = np.stack([(sums[..., ch] * np.float32(0.25) - np.float32(m)) * np.float32(k)
                     for ch, m, k in zip((2, 2, 0), mean, inv_std)])
    assert np.array_equal(slot, want)
    untouched = batch.copy()
    untouched[1, :, :31, :35] = -7.0
    assert (untouched == -7.0).all()


@pytestmark_native
def test_strided_input_and_output_write_only_the_image_region():
    big = _image(40, 50, seed=2)
    src = big[3:33, 5:45]  # rows strided by 50 pixels
    batch = np.full((2, 3, 32, 64), -7.0, np.float32)
    slot = batch[1, :, :30, :40]  # planes strided by 32x64, rows by 64
    native.normalise_planes(src, slot, (1, 1, 0), (10.0, 20.0, 30.0), (0.5, 0.25, 2.0), 1)
    f = src.astype(np.float32)
    want = np.stack([(f[..., 1] - np.float32(10)) * np.float32(0.5), (f[..., 1] - np.float32(20)) * np.float32(0.25),
                     (f[..., 0] - np.float32(30)) * np.float32(2.0)])
    assert np.array_equal(slot, want)
    untouched = batch.copy()
    untouched[1, :, :30, :40] = -7.0
    assert (untouched == -7.0).all()


@pytestmark_native
@pytest.mark.parametrize("src,dst,shrink,msg", [
    (np.zeros((4, 4, 3), np.float32), np.zeros((3, 4, 4), np.float32), 1, "uint8"),
    (np.zeros((4, 4, 4), np.uint8), np.zeros((3, 4, 4), np.float32), 1, "HxWx3"),
    (np.zeros((4, 4, 3), np.uint8)[:, ::2], np.zeros((3, 4, 2), np.float32), 1, "packed"),
    (np.zeros((4, 4, 3), np.uint8), np.zeros((3, 4, 4), np.float64), 1, "float32"),
    (np.zeros((4, 4, 3), np.uint8), np.zeros((3, 4, 4), np.float32)[:, :, ::2], 1, "contiguous"),
    (np.zeros((4, 4, 3), np.uint8), np.zeros((3, 4, 4), np.float32), 2, "shrink times"),
    (np.zeros((4, 4, 3), np.uint8), np.zeros((3, 4, 4), np.float32), 3, "shrink must be 1 or 2"),
])
def test_bad_arguments_raise_value_errors_that_say_what_is_expected(src, dst, shrink, msg):
    with pytest.raises(ValueError, match=msg):
        native.normalise_planes(src, dst, (0, 1, 2), (0, 0, 0), (1, 1, 1), shrink)


@pytestmark_native
def test_read_only_output_is_refused():
    dst = np.zeros((3, 2, 2), np.float32)
    dst.flags.writeable = False
    with pytest.raises((ValueError, BufferError), match="read-only"):
        native.normalise_planes(np.zeros((2, 2, 3), np.uint8), dst, (0, 1, 2), (0, 0, 0), (1, 1, 1), 1)


@pytestmark_native
def test_negative_strides_and_empty_frames():
    img = _image(6, 8, seed=3)
    out = np.empty((3, 6, 8), np.float32)
    native.normalise_planes(img[::-1], out[::-1, ::-1], (0, 1, 2), (1.0, 2.0, 3.0), (1.0, 1.0, 1.0), 1)
    want = (img[::-1].astype(np.float32) - np.float32([1, 2, 3])).transpose(2, 0, 1)[::-1, ::-1]
    assert np.array_equal(out, want)
    for hw, shrink in [((0, 8), 1), ((6, 0), 1), ((0, 0), 2)]:
        src = np.zeros((hw[0] * shrink, hw[1] * shrink, 3), np.uint8)
        native.normalise_planes(src, np.empty((3,) + hw, np.float32), (0, 1, 2), (0, 0, 0), (1, 1, 1), shrink)


@pytestmark_native
def test_overlapping_buffers_and_non_integer_orders_are_refused():
    raw = np.zeros(4 * 4 * 3 * 4, np.uint8)
    src = raw[: 4 * 4 * 3].reshape(4, 4, 3)
    dst_over_src = raw.view(np.float32).reshape(3, 4, 4)  # the same bytes as src
    with pytest.raises(ValueError, match="overlap"):
        native.normalise_planes(src, dst_over_src, (0, 1, 2), (0, 0, 0), (1, 1, 1), 1)
    same_plane = np.lib.stride_tricks.as_strided(np.zeros((4, 4), np.float32), (3, 4, 4), (0, 16, 4),
                                                 writeable=True)
    with pytest.raises(ValueError, match="overlap"):
        native.normalise_planes(np.zeros((4, 4, 3), np.uint8), same_plane, (0, 1, 2), (0, 0, 0), (1, 1, 1), 1)
    with pytest.raises(TypeError):
        native.normalise_planes(np.zeros((2, 2, 3), np.uint8), np.zeros((3, 2, 2), np.float32), (2.0, 1, 0),
                                (0, 0, 0), (1, 1, 1), 1)


def _yuv_float32_reference(y, u, v, shrink, order, mean, inv_std, coef):
    """``yuv420_normalise``'s documented arithmetic written again in numpy float32 (IEEE single, no fused
    multiply-add): luma ``(Y - y0) * ky`` (shrink 2: the exact 2x2 sum * 0.25 first), chroma terms
    ``cbu Cb'``, ``-(cgu Cb') - cgv Cr'``, ``crv Cr'`` (Cb' = Cb - 128), colour = clip(luma + term, 0, 255),
    then ``(colour - mean) * inv_std`` per output plane. Returns (3, h, w) float32."""
    f = np.float32
    ky, y0, crv, cgu, cgv, cbu = (f(c) for c in coef)
    if shrink == 2:
        s = y.astype(np.int32)
        s = s[0::2, 0::2] + s[1::2, 0::2] + s[0::2, 1::2] + s[1::2, 1::2]
        luma = (s.astype(f) * f(0.25) - y0) * ky
        cb, cr = u.astype(f) - f(128), v.astype(f) - f(128)
    else:
        luma = (y.astype(f) - y0) * ky
        cb, cr = (np.repeat(np.repeat(c.astype(f) - f(128), 2, 0), 2, 1)[:y.shape[0], :y.shape[1]] for c in (u, v))
    terms = (cbu * cb, -(cgu * cb) - cgv * cr, crv * cr)  # B, G, R
    colour = [np.minimum(np.maximum(luma + t, f(0)), f(255)) for t in terms]
    return np.stack([(colour[order[c]] - f(mean[c])) * f(inv_std[c]) for c in range(3)])


@pytestmark_native
@pytest.mark.parametrize("shrink", [1, 2])
@pytest.mark.parametrize("seed", range(4))
def test_yuv_kernel_is_its_float32_arithmetic_bit_for_bit(shrink, seed):
    # random planes with the extremes mixed in (clipped at 0 and at 255 in every channel), limited and
    # full range, BT.601 and BT.709, mean 0 (where the sign of a zero would show) and the profiles' values
    from dvpipe.video import yuv_matrix

    rng = np.random.default_rng(seed)
    h, w = (2 * int(rng.integers(1, 90)) - (shrink == 1) * int(rng.integers(0, 2)),
            2 * int(rng.integers(1, 160)) - (shrink == 1) * int(rng.integers(0, 2)))
    ch, cw = (h + 1) // 2, (w + 1) // 2

    def plane(shape, extremes):
        return np.where(rng.random(shape) < 0.4, rng.choice(np.array(extremes), shape),
                        rng.integers(0, 256, shape)).astype(np.uint8)

    y, u, v = plane((h, w), [0, 1, 16, 235, 254, 255]), plane((ch, cw), [0, 128, 255]), plane((ch, cw), [0, 128, 255])
    coef = yuv_matrix([5, 1][seed % 2], bool(seed // 2))
    mean = [(0.0, 0.0, 0.0), TINY[0]][seed % 2]
    order, _, inv_std = _coef(mean, [(1.0, 1.0, 1.0), TINY[1]][seed // 2], seed % 3 != 0)
    out = np.full((3, h // shrink, w // shrink), np.nan, np.float32)
    native.yuv420_normalise(y, w, u, v, cw, w, h, out, order, mean, inv_std, shrink, coef)
    want = _yuv_float32_reference(y, u, v, shrink, order, mean, inv_std, coef)
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32)), \
        f"{np.sum(out.view(np.uint32) != want.view(np.uint32))} values differ; max {np.abs(out - want).max()}"
