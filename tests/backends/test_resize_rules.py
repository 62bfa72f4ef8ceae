"""Resize rules that depend on both axes, against the libraries that define them.

* ``area``: OpenCV's ``INTER_AREA`` averages areas only when neither axis grows
  (``cv::hal::resize``: ``interpolation == INTER_AREA && scale_x >= 1 && scale_y >= 1``); when either
  axis grows it uses its bilinear-like "enlarging" weights on BOTH axes. The reference backend and the
  torch backend (which takes the reference's weights) are checked against ``cv2.resize(...,
  INTER_AREA)`` with one axis shrinking and the other growing, in both orders, on uint8 pixels
  (resize before Normalise) and float pixels (after it).
* ``nearest``: OpenCV's ``INTER_NEAREST`` picks source index ``min(floor(x * ifx), W - 1)`` with
  ``ifx = 1 / (W'/W)`` in double (``resizeNN``), which lands one pixel lower than ``x * W/W'`` where that is
  a whole number and the double product falls just short of it (161 -> 63, 33 -> 150). The reference
  and torch backends are checked against ``cv2.resize(..., INTER_NEAREST)``, exactly (a selection).
* ``pil_bicubic``: Pillow runs its two passes in an order that depends on both axes (the vertical pass
  first when the height shrinks and the width does not, and in some shrink-both cases); each pass is
  rounded to uint8, so the order shows in the bytes. The reference re-implementation is checked
  bit for bit against the installed Pillow's ``Image.resize``.
"""
from __future__ import annotations

import cv2
import numpy as np
import pytest

import dvpipe as dv
from dvpipe.backends.numpy_ref import nearest_weights, resize_pil_uint8
from tolerances import tol

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

PILLOW = tuple(int(p) for p in PIL.__version__.split(".")[:2])

#: (h, w) -> (out_h, out_w); ids say which axis grows
MIXED = {
    "rows-shrink-cols-grow": ((37, 53), (20, 70)),
    "rows-grow-cols-shrink": ((53, 37), (70, 20)),
    "rows-halve-cols-grow": ((90, 160), (45, 200)),   # an integer shrink factor: no area-fast path either
    "rows-grow-cols-halve": ((58, 28), (92, 14)),
    "near-one": ((45, 80), (44, 81)),
    "camera-like": ((225, 400), (128, 704)),
}
#: shapes whose rule was right before, kept as controls
SAME = {
    "both-shrink": ((64, 96), (27, 41)),
    "both-grow": ((21, 28), (58, 108)),
    "rows-keep-cols-grow": ((37, 53), (37, 70)),
    "rows-shrink-cols-keep": ((37, 53), (20, 53)),
}
BACKENDS = {"reference": "reference", "torch": ("torch:cpu", "cpu")}


def _image(h: int, w: int, seed: int) -> np.ndarray:
    # random pixels: every weight shows (a smooth image would hide a wrong tap choice)
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _run(backend, stages, img: np.ndarray) -> tuple[np.ndarray, str]:
    if backend == "torch":
        pytest.importorskip("torch", reason="the torch backend needs torch")
    h, w = img.shape[:2]
    rig = dv.Rig.from_dict({"cameras": [{"name": "c", "width": w, "height": h, "encoding": "raw"}]})
    pipe = dv.Pipeline(rig, stages, BACKENDS[backend])
    (step,) = [s for s in pipe.plan.cameras[0].steps if "resize" in [st.op for st in s.stages]]
    batch = pipe.process({"c": img})
    assert not batch.fallbacks, batch.fallbacks  # the planned backend computed it, not its fallback
    out = batch.images
    out = out.numpy() if hasattr(out, "numpy") else np.asarray(out)
    return out[0].transpose(1, 2, 0), step.backend.name


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("shape", list(MIXED.values()) + list(SAME.values()), ids=list(MIXED) + list(SAME))
def test_area_uint8_matches_opencv_inter_area(backend, shape):
    (h, w), (oh, ow) = shape
    img = _image(h, w, seed=h * w)
    got, ran_on = _run(backend, [dv.Decode(), dv.Resize(size=(oh, ow), interpolation="area")], img)
    assert ran_on.startswith(backend), ran_on
    assert got.dtype == np.uint8
    want = cv2.resize(img, (ow, oh), interpolation=cv2.INTER_AREA)
    tol("uint8_resize", "any", "cpu").check(got, want)  # OpenCV's 11-bit fixed point vs float weights, rounded


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("shape", list(MIXED.values()) + list(SAME.values()), ids=list(MIXED) + list(SAME))
def test_area_float_matches_opencv_inter_area(backend, shape):
    (h, w), (oh, ow) = shape
    img = _image(h, w, seed=h + w)
    stages = [dv.Decode(), dv.Normalise(mean=(0, 0, 0), std=(1, 1, 1), to_rgb=False),
              dv.Resize(size=(oh, ow), interpolation="area")]
    got, ran_on = _run(backend, stages, img)
    assert ran_on.startswith(backend), ran_on
    want = cv2.resize(img.astype(np.float32), (ow, oh), interpolation=cv2.INTER_AREA)
    tol("float_path_relative").check(got, want)  # std = 1: values up to 255, float32 rounding


#: (h, w) -> (out_h, out_w) for INTER_NEAREST; the first two have columns where x * W/W' is whole but
#: OpenCV's double arithmetic picks the pixel below it
NEAREST = {
    "161x91-to-63x37": ((91, 161), (37, 63)),
    "33x17-to-150x40": ((17, 33), (40, 150)),
    "96x64-to-77x41": ((64, 96), (41, 77)),   # control: no such column
}


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("data", ["uint8", "float"])
@pytest.mark.parametrize("shape", list(NEAREST.values()), ids=list(NEAREST))
def test_nearest_matches_opencv_inter_nearest(backend, data, shape):
    (h, w), (oh, ow) = shape
    img = _image(h, w, seed=h * w + 1)
    norm = [dv.Normalise(mean=(0, 0, 0), std=(1, 1, 1), to_rgb=False)] if data == "float" else []
    got, ran_on = _run(backend, [dv.Decode(), *norm, dv.Resize(size=(oh, ow), interpolation="nearest")], img)
    assert ran_on.startswith(backend), ran_on
    want = cv2.resize(img if data == "uint8" else img.astype(np.float32), (ow, oh), interpolation=cv2.INTER_NEAREST)
    np.testing.assert_array_equal(got, want)  # pixels picked, none computed: exact


def test_nearest_reference_index_is_opencvs_for_every_size_pair():
    # one axis, every (n_in, n_out) up to 96: the column cv2 picks for each output column
    for n_in in range(1, 97):
        src = np.arange(n_in, dtype=np.float32)[None]
        for n_out in range(1, 97):
            want = cv2.resize(src, (n_out, 1), interpolation=cv2.INTER_NEAREST)[0].astype(np.int64)
            got = np.argmax(nearest_weights(n_in, n_out), axis=1)
            assert np.array_equal(got, want), (n_in, n_out, np.flatnonzero(got != want))


#: (h, w) -> (out_h, out_w) for Pillow's pass order
PIL_SHAPES = {
    "rows-shrink-cols-grow": ((37, 53), (20, 70)),
    "rows-grow-cols-shrink": ((53, 37), (70, 20)),
    "camera-rows-shrink-cols-grow": ((225, 400), (100, 425)),
    "shrink-both-height-more": ((41, 21), (11, 8)),      # Pillow 13: vertical first
    "shrink-both-width-more": ((51, 38), (46, 25)),      # horizontal first
    "shrink-both-boundary": ((40, 40), (1, 20)),         # h - out_h = 39 < 2 * (w - out_w) = 40: horizontal
    "shrink-both-boundary+1": ((40, 40), (1, 21)),       # 39 > 38: vertical
    "grow-both": ((21, 28), (58, 108)),
    "rows-keep-cols-grow": ((37, 53), (37, 70)),
    "rows-shrink-cols-keep": ((37, 53), (20, 53)),
    "tall": ((505, 5), (300, 3)),                          # Pillow 12.2+: h > 100 w split
}


@pytest.mark.parametrize("shape", list(PIL_SHAPES.values()), ids=list(PIL_SHAPES))
def test_pil_bicubic_reference_is_pillow_bit_for_bit(shape):
    (h, w), (oh, ow) = shape
    img = _image(h, w, seed=7 * h + w)
    want = np.asarray(Image.fromarray(img).resize((ow, oh), Image.Resampling.BICUBIC))
    assert np.array_equal(resize_pil_uint8(img, ow, oh, pillow=PILLOW), want)


def test_pil_bicubic_pass_order_on_random_shapes():
    # every direction combination, sizes up to 300: the order rule must hold for all of them
    rng = np.random.default_rng(2)
    for _ in range(120):
        h, w = (int(v) for v in rng.integers(1, 300, 2))
        oh, ow = (int(v) for v in rng.integers(1, 400, 2))
        img = rng.integers(0, 256, (h, w), dtype=np.uint8)
        want = np.asarray(Image.fromarray(img).resize((ow, oh), Image.Resampling.BICUBIC))
        got = resize_pil_uint8(img, ow, oh, pillow=PILLOW)
        assert np.array_equal(got, want), ((h, w), (oh, ow))


@pytest.mark.skipif(PILLOW < (13, 0), reason="the reference backend follows Pillow 13's pass order")
@pytest.mark.parametrize("shape", [PIL_SHAPES[k] for k in ("rows-shrink-cols-grow", "rows-grow-cols-shrink",
                                                           "shrink-both-height-more")],
                         ids=["rows-shrink-cols-grow", "rows-grow-cols-shrink", "shrink-both-height-more"])
def test_pil_bicubic_reference_backend_is_pillow(shape):
    (h, w), (oh, ow) = shape
    img = _image(h, w, seed=3)
    got, ran_on = _run("reference", [dv.Decode(), dv.Resize(size=(oh, ow), interpolation="pil_bicubic")], img)
    assert ran_on == "reference"
    assert np.array_equal(got, np.asarray(Image.fromarray(img).resize((ow, oh), Image.Resampling.BICUBIC)))
