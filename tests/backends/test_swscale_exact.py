"""dvpipe's copy of FFmpeg's bgr24 conversion (``_native.yuv420_bgr24_normalise``) against FFmpeg itself.

Fidelity ``reference`` converts video as FFmpeg's ``bgr24`` does; the compiled kernel computes those
bytes from the decoder's planes without making the picture. The reference here is FFmpeg's own
conversion (PyAV ``reformat``, as :func:`dvpipe.video.bgr24` calls it) of the same planes: for every
(Y, Cb, Cr) combination, every colorspace code the table holds, both ranges and both 8-bit 4:2:0
formats, the bytes must be equal -- not close.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

av = pytest.importorskip("av")

from dvpipe.backends import cpu as cpu_backend  # noqa: E402
from dvpipe.video import _SWS_COEFFS, picture_swscale_coef, swscale_bgr24_coef  # noqa: E402

pytestmark = pytest.mark.skipif(cpu_backend._native is None, reason="the kernel is compiled")

S = 1024  # probe pictures of S x S: 4 x 65536 chroma blocks, so each (Cb, Cr) pair four times a picture


def _frame(y, u, v, fmt, colorspace, color_range):
    h, w = y.shape
    f = av.VideoFrame.from_ndarray(np.concatenate([y.ravel(), u.ravel(), v.ravel()]).reshape(h * 3 // 2, w), format=fmt)
    f.colorspace, f.color_range = colorspace, color_range
    return f


def _every_combination(part):
    """Picture ``part`` (0..15) of 16 that together hold every (Y, Cb, Cr): block k has chroma pair
    k mod 65536 and the four luma values part * 16 + (k // 65536) * 4 + 0..3."""
    c = S // 2
    k = np.arange(c * c)
    u = (k % 256).astype(np.uint8).reshape(c, c)
    v = ((k // 256) % 256).astype(np.uint8).reshape(c, c)
    base = (part * 16 + (k // 65536) * 4).reshape(c, c)
    y = np.empty((S, S), np.uint8)
    y[0::2, 0::2], y[0::2, 1::2], y[1::2, 0::2], y[1::2, 1::2] = base, base + 1, base + 2, base + 3
    return y, u, v


def _bytes(frame, icoef):
    """The kernel at shrink 1, order BGR, mean 0, std 1: the float32 output is the bytes themselves."""
    p = frame.planes
    out = np.empty((3, frame.height, frame.width), np.float32)
    cpu_backend._native.yuv420_bgr24_normalise(p[0], p[0].line_size, p[1], p[2], p[1].line_size, frame.width,
                                               frame.height, out, (0, 1, 2), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 1,
                                               icoef)
    return out.transpose(1, 2, 0)


CASES = [("yuv420p", cs, rng) for cs in sorted(_SWS_COEFFS) for rng in (1, 2)] + \
        [("yuvj420p", cs, 2) for cs in (1, 5)]


@pytest.mark.parametrize("fmt,colorspace,color_range", CASES)
def test_every_yuv_combination_gives_ffmpegs_bgr24_bytes(fmt, colorspace, color_range):
    for part in range(16):
        f = _frame(*_every_combination(part), fmt, colorspace, color_range)
        icoef = picture_swscale_coef(f)
        want = f.reformat(format="bgr24", threads=1).to_ndarray()
        got = _bytes(f, icoef)
        bad = (got != want).any(-1)
        assert not bad.any(), (fmt, colorspace, color_range, part, int(bad.sum()), np.argwhere(bad)[:3].tolist())


@pytest.mark.parametrize("w,h", [(1242, 376), (1600, 900), (98, 2)])
def test_sizes_off_the_converters_block_width_match_too(w, h):
    """FFmpeg converts in blocks of 8 or 16 pixels; widths that are no multiple of either still match."""
    rng = np.random.default_rng(w)
    y = rng.integers(0, 256, (h, w), dtype=np.uint8)
    u, v = (rng.integers(0, 256, (h // 2, w // 2), dtype=np.uint8) for _ in range(2))
    for colorspace in (1, 5):
        f = _frame(y, u, v, "yuv420p", colorspace, 1)
        assert np.array_equal(_bytes(f, picture_swscale_coef(f)), f.reformat(format="bgr24", threads=1).to_ndarray())


def test_coefficients_are_libswscales_for_bt601_limited_range():
    """Hand-computed from libswscale's definition: luma 65536 * 255 / 219 = 76309, then each coefficient
    * 8192 / 65536 rounded: 9539; the 8 x 16 luma offset 128; Cr -> R 104597 / 8 = 13074.6 -> 13075;
    Cb -> B 132201 / 8 -> 16525; the green terms -53279 / 8 -> -6660 and -25675 / 8 -> -3209."""
    assert swscale_bgr24_coef(5, False) == (9539, 128, 13075, 16525, -6660, -3209)
    assert swscale_bgr24_coef(5, True)[:2] == (8192, 0)  # full range: luma as is, chroma * 224 / 255


@pytest.mark.parametrize("colorspace", [0, 3, 8, 10, 11])
def test_colorspaces_outside_the_checked_table_take_ffmpeg(colorspace):
    assert swscale_bgr24_coef(colorspace, False) is None


def test_odd_sizes_and_other_layouts_take_ffmpeg():
    assert picture_swscale_coef(av.VideoFrame(64, 33, "yuv420p")) is None  # FFmpeg's converter wants even heights
    assert picture_swscale_coef(av.VideoFrame(64, 32, "yuv444p")) is None
    assert picture_swscale_coef(av.VideoFrame(64, 32, "yuv420p")) is not None


def test_a_build_that_rounds_otherwise_is_caught_and_warned_about(monkeypatch):
    """The one-time check compares with FFmpeg; if FFmpeg's bytes differed (here: made to), the reference
    path must not use the copy."""
    monkeypatch.setattr(cpu_backend, "_SWSCALE_MATCHES", {})
    monkeypatch.setattr(cpu_backend, "bgr24", lambda frame: frame.reformat(format="bgr24").to_ndarray() ^ 1)
    f = av.VideoFrame(64, 32, "yuv420p")
    with pytest.warns(RuntimeWarning, match="rounds otherwise"):
        assert cpu_backend._swscale_matches(f, picture_swscale_coef(f)) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # checked once per process: no second warning
        assert cpu_backend._swscale_matches(f, picture_swscale_coef(f)) is False


def test_kernel_checks_its_coefficients():
    n = cpu_backend._native
    y, c = bytes(64 * 32), bytes(32 * 16)
    out = np.empty((3, 32, 64), np.float32)
    args = ((0, 1, 2), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 1)
    with pytest.raises(ValueError, match="needs 6 numbers"):
        n.yuv420_bgr24_normalise(y, 64, c, c, 32, 64, 32, out, *args, (1, 2, 3))
    with pytest.raises(ValueError, match="16-bit"):
        n.yuv420_bgr24_normalise(y, 64, c, c, 32, 64, 32, out, *args, (1 << 20, 0, 0, 0, 0, 0))
