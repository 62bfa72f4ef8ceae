"""dvpipe's compiled CPU kernel checked against numpy formulas, with numpy alone (no OpenCV, no dvpipe).

For another CPU architecture, where the project's dependencies are not installed: run it with that
architecture's Python and numpy on a folder holding a cross-compiled ``_native*.so``
(``tools/native_aarch64.sh`` does this for aarch64 under qemu-user). Without an argument it checks
the kernel of the installed dvpipe.

    python tools/native_check.py [FOLDER_WITH_NATIVE_SO]

Checks (the same as tests/backends/test_native_kernel.py, restated without the test suite): shrink 1 equals
``(x - float32(mean)) * float32(1 / std)`` bit for bit (and mmcv's imnormalize when std = 1); shrink
2 equals ``(S * 0.25 - mean) * (1 / std)`` in float32 bit for bit, S the exact 2x2 sum, and the
float64 2x2 mean within the float32 rounding of the mean; strided input and output; bad arguments.
"""
import platform
import sys

import numpy as np

if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])
    import _native
else:
    from dvpipe.backends import _native

rng = np.random.default_rng(0)
TINY = ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375), (2, 1, 0))
BASE = ((103.530, 116.280, 123.675), (1.0, 1.0, 1.0), (0, 1, 2))
n = 0
for mean, std, order in (TINY, BASE):
    inv = tuple(1.0 / s for s in std)
    for h, w in ((900, 1600), (359, 641), (1, 1), (7, 33)):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        out = np.full((3, h, w), np.nan, np.float32)
        _native.normalise_planes(img, out, order, mean, inv, 1)
        src = img[..., list(order)].astype(np.float32)
        want = ((src - np.float32(mean)) * np.float32(inv)).transpose(2, 0, 1)  # the kernel's documented arithmetic
        assert np.array_equal(out, want), (mean, h, w)
        if std == (1.0, 1.0, 1.0):  # mmcv: float32 subtract, multiply by 1.0 in double: the same bits
            assert np.array_equal(out, (src - np.float32(mean)).transpose(2, 0, 1))
        n += 1
    for h, w in ((450, 800), (1, 1), (31, 17)):
        img = rng.integers(0, 256, (2 * h, 2 * w, 3), dtype=np.uint8)
        out = np.empty((3, h, w), np.float32)
        _native.normalise_planes(img, out, order, mean, inv, 2)
        sums = img.astype(np.int32).reshape(h, 2, w, 2, 3).sum(axis=(1, 3))[..., list(order)]
        exact = ((sums.astype(np.float32) * np.float32(0.25) - np.float32(mean)) * np.float32(inv)).transpose(2, 0, 1)
        assert np.array_equal(out, exact), (h, w)  # the documented float32 arithmetic, bit for bit
        want = ((sums / 4.0 - np.array(mean)) / np.array(std)).transpose(2, 0, 1)
        assert np.abs(out - want).max() < 1e-5, (h, w)  # float64: the float32 rounding of the mean (<= 3.8e-6)
        n += 1
big = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
batch = np.full((2, 3, 32, 64), -7.0, np.float32)
_native.normalise_planes(big[3:33, 5:45], batch[1, :, :30, :40], (1, 1, 0), (10.0, 20.0, 30.0), (0.5, 0.25, 2.0), 1)
f = big[3:33, 5:45].astype(np.float32)
want = np.stack([(f[..., 1] - 10) * np.float32(0.5), (f[..., 1] - 20) * np.float32(0.25), (f[..., 0] - 30) * 2])
assert np.array_equal(batch[1, :, :30, :40], want)
rest = batch.copy()
rest[1, :, :30, :40] = -7.0
assert (rest == -7.0).all()
img = np.full((4, 4, 3), 255, np.uint8)
img[2:, ::2] = 0
out = np.empty((3, 2, 2), np.float32)
_native.normalise_planes(img, out, (0, 1, 2), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 2)
assert (out[:, 0] == 255).all() and (out[:, 1] == 127.5).all()
for src, dst, shrink in ((np.zeros((4, 4, 3), np.uint8)[:, ::2], np.zeros((3, 4, 2), np.float32), 1),
                         (np.zeros((4, 4, 3), np.uint8), np.zeros((3, 4, 4), np.float32), 2)):
    try:
        _native.normalise_planes(src, dst, (0, 1, 2), (0, 0, 0), (1, 1, 1), shrink)
    except ValueError:
        pass
    else:
        raise AssertionError("bad arguments accepted")
print(f"{platform.machine()}: {n + 4} checks passed (numpy {np.__version__})")
