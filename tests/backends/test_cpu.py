"""The CPU backend against the reference backend, kernel by kernel and path by path.

Every check runs the same stage list twice -- ``backends=("cpu",)`` and ``backends=("reference",)``
(plain numpy in float64, OpenCV decode) -- and compares the batches:

* decode: simplejpeg (when installed) must give the pixels ``cv2.imdecode`` gives, for every
  chroma subsampling, progressive and grayscale JPEG, odd sizes and the DCT-domain scales;
* the fused write kernel on each of its paths (direct, exact 2x2 sums, general resize, uint8
  resize first), with the compiled kernel (``dvpipe.backends._native``) and with the OpenCV
  path that replaces it where it is not built, every interpolation, float16, crops, pad by divisor / fixed size / value, and
  stage orders that leave single-stage kernels to run;
* fidelity ``fast`` (DCT-domain 1/2 decode): the deviation from ``reference`` in normalised units
  is measured and bounded. Measured (bevformer-tiny, mean / max abs): samples/ 0.0026 / 0.47,
  ../shared/data/nuscenes-sample 0.0052 / 0.28; the bound is mean <= 0.02 (docs/performance.md).
"""
from __future__ import annotations

import numpy as np
import pytest

import dvpipe as dv
from conftest import encode_jpeg, encode_png, rig_dict, textured_bgr
from dvpipe.backends import _decode
from dvpipe.backends import cpu as cpu_backend
from dvpipe.errors import FrameError
from dvpipe.stages import Crop, Decode, Normalise, Pad, Resize
from dvpipe.stages.base import FrameSpec
from dvpipe.types import PixelFormat
from tolerances import Bound, grey_level, tol

TINY = dict(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), to_rgb=True)
BASE = dict(mean=(103.530, 116.280, 123.675), std=(1.0, 1.0, 1.0), to_rgb=False)


def _smooth_bgr(w: int, h: int, seed: int = 0) -> np.ndarray:
    """Photographic-like content: smooth gradients and edges, little per-pixel noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([120 + 90 * np.sin(x / 37 + y / 53 + seed), 110 + 80 * np.cos(y / 29 - x / 61),
                    100 + 70 * np.sin((x - y) / 45)], axis=-1)
    img += 40 * ((x // 97 + y // 71) % 2)[..., None]
    img += rng.normal(0, 2, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(params=["native", "opencv"])
def fused_impl(request, monkeypatch):
    """Run a test with the compiled kernel, then with the OpenCV path (as if it were not built)."""
    if request.param == "native" and cpu_backend._native is None:
        pytest.skip(cpu_backend.NATIVE_REASON)
    if request.param == "opencv":
        monkeypatch.setattr(cpu_backend, "_native", None)
    return request.param


def _program(pipe):
    return next(s["prog"] for s in pipe._states.values() if "prog" in s)


def _run(stages, sizes, backend, frames, fidelity="reference", **kw):
    rig = dv.Rig.from_dict(rig_dict(sizes, **kw))
    pipe = dv.Pipeline(rig, stages, backends=(backend,), fidelity=fidelity)
    batch = pipe.process(frames)
    assert batch.valid.all(), batch.drops
    return pipe, batch.images.copy()


def _frames(sizes, seed=0, encode=encode_jpeg, content=textured_bgr):
    return {f"CAM{k}": encode(content(w, h, seed=seed + k)) for k, (w, h) in enumerate(sizes)}


def _compare(stages, sizes, bound: Bound, frames=None, fidelity="reference", expect_kernel=None, **kw):
    """CPU vs reference batches within ``bound`` (tests/tolerances.py; grey levels scaled by the stages' std)."""
    frames = frames if frames is not None else _frames(sizes)
    pipe, got = _run(stages, sizes, "cpu", frames, fidelity, **kw)
    _, want = _run(stages, sizes, "reference", frames, "reference", **kw)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.isfinite(got).all()
    bound.check(got, want, unit=grey_level(stages))
    if expect_kernel is not None:
        names = [s.kernel.name for s in pipe.plan.cameras[0].steps]
        assert any(expect_kernel in n for n in names), names
    return pipe, got, want


# -- decode -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["420", "422", "444", "progressive", "gray"])
@pytest.mark.parametrize("size", [(1600, 900), (641, 359), (97, 61)])
def test_decode_fast_path_is_bit_identical_to_opencv(kind, size):
    img = textured_bgr(*size, seed=2)
    data = encode_jpeg(img, subsampling=kind if kind[0].isdigit() else "420", progressive=kind == "progressive",
                       gray=kind == "gray")
    spec = FrameSpec(width=size[0], height=size[1], pixel_format=PixelFormat.ENCODED, encoding="jpeg")
    for reduce in (1, 2, 4, 8):
        state: dict = {}
        fast = _decode.decode_bgr(data, spec, reduce=reduce, state=state, decoder="auto")
        ref = _decode.decode_bgr(data, spec, reduce=reduce, decoder="cv2")
        assert fast.shape == ref.shape == (-(-size[1] // reduce), -(-size[0] // reduce), 3)
        assert np.array_equal(fast, ref), (kind, size, reduce)


def test_decode_reuses_its_buffer_and_png_goes_through_opencv():
    size = (320, 180)
    spec = FrameSpec(width=size[0], height=size[1], pixel_format=PixelFormat.ENCODED, encoding="jpeg")
    a, b = encode_jpeg(textured_bgr(*size, seed=1)), encode_jpeg(textured_bgr(*size, seed=2))
    state: dict = {}
    first = _decode.decode_bgr(a, spec, state=state, decoder="auto")
    first_copy = first.copy()
    second = _decode.decode_bgr(b, spec, state=state, decoder="auto")
    if _decode._sj is not None:
        assert np.shares_memory(first, second)  # one buffer per (camera, step), reused
    assert np.array_equal(second, _decode.decode_bgr(b, spec, decoder="cv2"))
    assert not np.array_equal(first_copy, second)
    png = encode_png(textured_bgr(*size, seed=3))
    pspec = FrameSpec(width=size[0], height=size[1], pixel_format=PixelFormat.ENCODED, encoding="png")
    assert np.array_equal(_decode.decode_bgr(png, pspec, state={}, decoder="auto"), textured_bgr(*size, seed=3))


@pytest.mark.skipif(_decode._sj is None, reason="the stream fast path is simplejpeg's")
def test_a_streams_later_frames_skip_the_marker_walk_and_any_other_frame_takes_it(monkeypatch):
    size = (320, 180)
    spec = FrameSpec(width=size[0], height=size[1], pixel_format=PixelFormat.ENCODED, encoding="jpeg")
    frames = [encode_jpeg(textured_bgr(*size, seed=s)) for s in range(3)]
    want = [_decode.decode_bgr(data, spec, decoder="cv2") for data in frames]
    walks = []
    real = _decode.jpeg_frame_header
    monkeypatch.setattr(_decode, "jpeg_frame_header", lambda d: walks.append(1) or real(d))
    state: dict = {}
    for data, ref in zip(frames, want):
        assert np.array_equal(_decode.decode_bgr(data, spec, state=state, decoder="auto"), ref)
        assert len(walks) == 1  # the first frame only
    # a comment segment moves the frame header: the full check runs again, and the pixels are right
    shifted = frames[0][:2] + b"\xff\xfe\x00\x08dvpipe" + frames[0][2:]
    assert np.array_equal(_decode.decode_bgr(shifted, spec, state=state, decoder="auto"), want[0])
    assert len(walks) == 2
    # a frame of another size whose bytes at the remembered offset copy this stream's frame header
    big = encode_jpeg(textured_bgr(2 * size[0], 2 * size[1]))
    off, sig = state["_sof"]
    crafted = big[:2] + b"\xff\xfe" + (off + 6).to_bytes(2, "big") + bytes(off - 6) + sig + big[2:]  # a COM segment
    assert crafted[off:off + 10] == sig
    with pytest.raises(FrameError, match="frame is 640x360"):
        _decode.decode_bgr(crafted, spec, state=state, decoder="auto")
    monkeypatch.setattr(_decode, "jpeg_frame_header", real)
    # damaged frames of the primed stream end as in the reference: the same error, or (damaged entropy
    # data, which OpenCV decodes with a warning and simplejpeg's strict mode refuses) the same pixels
    def outcome(data, **kw):
        try:
            return _decode.decode_bgr(data, spec, **kw).copy()
        except FrameError as e:
            return str(e)

    bad = {"truncated": frames[1][: len(frames[1]) // 2], "wrong_size": encode_jpeg(textured_bgr(322, 180)),
           "damaged_scan": frames[1][:-400] + bytes(398) + b"\xff\xd9"}
    for name, data in bad.items():
        ref, got = outcome(data, decoder="cv2"), outcome(data, state=state, decoder="auto")
        assert isinstance(ref, str) and ref == got, (name, ref, got)  # damaged scan data is a corrupt drop too
    assert outcome(bad["damaged_scan"], decoder="cv2").startswith("corrupt JPEG (libjpeg: ")


@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong_size"])
def test_decode_errors_match_the_reference_backend(damage):
    size = (160, 90)
    good = encode_jpeg(textured_bgr(*size))
    bad = {"truncated": good[: len(good) // 2], "garbage": b"\xff\xd8\xff" + bytes(200) + b"\xff\xd9",
           "wrong_size": encode_jpeg(textured_bgr(162, 90))}[damage]
    rig = dv.Rig.from_dict(rig_dict([size, size]))
    drops = {}
    for backend in ("cpu", "reference"):
        pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=(backend,))
        batch = pipe.process({"CAM0": good, "CAM1": bad})
        assert list(batch.valid) == [True, False]
        drops[backend] = batch.drops[0][1].split(": ", 1)[1]
    assert drops["cpu"] == drops["reference"]


# -- the fused write kernel, path by path -------------------------------------------------------------
@pytest.mark.parametrize("norm", [TINY, BASE], ids=["tiny", "base"])
@pytest.mark.parametrize("size", [(1600, 900), (641, 359), (97, 61)])
def test_direct_path_normalise_pad_batch(norm, size, fused_impl):
    pipe, _, _ = _compare([Decode(), Normalise(**norm), Pad(size_divisor=32)], [size, size],
                          tol("float_path_relative"), expect_kernel="fused_normalise_pad_batch")
    assert (_program(pipe).native is not None) == (fused_impl == "native")


@pytest.mark.parametrize("interp", ["linear", "area"])
@pytest.mark.parametrize("size", [(1600, 900), (642, 360), (98, 62)])
def test_exact_2x2_sum_path_matches_float_resize_of_normalised_image(interp, size, fused_impl):
    stages = [Decode(), Normalise(**TINY), Resize(scale=0.5, interpolation=interp), Pad(size_divisor=32)]
    pipe, got, want = _compare(stages, [size], tol("float_path"), expect_kernel="fused_normalise_resize_pad_batch")
    step = pipe.plan.cameras[0].steps[-1]
    prog = _program(pipe)  # the program is cached per camera and step
    assert prog.path == "sum2x2", step
    assert (prog.native is not None) == (fused_impl == "native")
    assert np.abs(got - want).max() < tol("float_path_exact_sum").atol  # only float rounding differs


def test_exact_2x2_sums_at_the_uint8_extremes(fused_impl):
    # all-255 and checkerboard 0/255 blocks: sums of 1020 and 510 must stay exact in uint16
    img = np.zeros((64, 96, 3), np.uint8)
    img[:32] = 255
    img[32:, ::2] = 255
    rig = dv.Rig.from_dict(rig_dict([(96, 64)], encoding="raw"))
    stages = [Decode(), Normalise(mean=(0, 0, 0), std=(1, 1, 1)), Resize(scale=0.5), Pad(size_divisor=32)]
    out = dv.Pipeline(rig, stages).process({"CAM0": img}).images[0]
    assert np.array_equal(out[:, :16, :48], np.full((3, 16, 48), 255, np.float32))
    assert np.array_equal(out[:, 16:32, :48], np.full((3, 16, 48), 127.5, np.float32))


@pytest.mark.parametrize("interp,scale", [("linear", 0.8), ("linear", 0.44), ("area", 0.6), ("nearest", 0.5),
                                          ("linear", 1.5), ("area", 1.3)])
def test_general_resize_path(interp, scale):
    stages = [Decode(), Normalise(**TINY), Resize(scale=scale, interpolation=interp), Pad(size_divisor=32)]
    pipe, _, _ = _compare(stages, [(641, 359)], tol("float_path"))
    assert _program(pipe).path == "general"


@pytest.mark.parametrize("interp", ["linear", "area", "nearest"])
@pytest.mark.parametrize("scale", [0.5, 0.44, 1.25])
def test_uint8_resize_before_normalise(interp, scale, fused_impl):
    # OpenCV resizes uint8 in fixed point, the reference in float64 then rounds: 1 grey level at most
    stages = [Decode(), Resize(scale=scale, interpolation=interp), Normalise(**TINY), Pad(size_divisor=32)]
    _compare(stages, [(641, 359)], tol("uint8_resize", "reference", "cpu"), expect_kernel="fused_resize_normalise_pad_batch")


@pytest.mark.parametrize("path_stages", [
    [Normalise(**TINY, dtype="float16"), Pad(size_divisor=32)],
    [Normalise(**TINY, dtype="float16"), Resize(scale=0.5), Pad(size_divisor=32)],
    [Normalise(**TINY, dtype="float16"), Resize(scale=0.7), Pad(size_divisor=32)],
    [Normalise(**BASE, dtype="float16"), Pad(size_divisor=32)],
], ids=["direct", "sum2x2", "general", "base"])
def test_float16_outputs(path_stages):
    pipe, got, want = _compare([Decode(), *path_stages], [(642, 360)], tol("float16_output", "reference", "float16"))
    assert got.dtype == np.float16


def test_crops_pad_to_fixed_size_and_pad_value(fused_impl):
    size = (641, 359)
    stages = [Decode(), Resize(scale=0.5), Crop(left=7, top=11, width=301, height=150), Normalise(**BASE),
              Pad(size=(160, 320), value=-3.5)]
    _, got, _ = _compare(stages, [size], tol("uint8_resize", "reference", "cpu"))  # std 1: one grey level
    assert (got[:, :, 150:, :] == -3.5).all() and (got[:, :, :150, 301:] == -3.5).all()
    # a crop at odd offsets before the exact 2x2 path: the sums read a strided view
    stages = [Decode(), Crop(left=3, top=5, width=400, height=200), Normalise(**TINY), Resize(scale=0.5),
              Pad(size_divisor=32)]
    _compare(stages, [size], tol("float_path"))


def test_no_pad_and_raw_bgr_input(fused_impl):
    size = (320, 180)
    frames = {"CAM0": textured_bgr(*size, seed=4)}
    _compare([Decode(), Normalise(**TINY)], [size], tol("float_path"), frames=frames, encoding="raw")
    _compare([Decode(), Normalise(**TINY), Resize(scale=0.5)], [size], tol("float_path"), frames=frames, encoding="raw")


@pytest.mark.parametrize("view", ["channels_reversed", "fortran", "bgra_slice"])
def test_raw_frames_given_as_views(view, fused_impl):
    size = (320, 180)
    img = textured_bgr(*size, seed=5)
    frame = {"channels_reversed": np.ascontiguousarray(img[..., ::-1])[..., ::-1],
             "fortran": np.asfortranarray(img),
             "bgra_slice": np.concatenate([img, np.zeros(img.shape[:2] + (1,), np.uint8)], axis=2)[..., :3]}[view]
    assert not frame.flags.c_contiguous
    for stages in ([Decode(), Normalise(**TINY)], [Decode(), Normalise(**TINY), Resize(scale=0.5)]):
        _compare(stages, [size], tol("float_path"), frames={"CAM0": frame}, encoding="raw")


def test_single_stage_kernels_when_nothing_fuses():
    # normalise -> crop -> pad -> batch: the crop between them leaves normalise, pad and batch alone
    size = (321, 181)
    stages = [Decode(), Normalise(**TINY), Crop(left=1, top=2, width=300, height=170), Pad(size_divisor=32)]
    pipe, _, _ = _compare(stages, [size], tol("float_path"))
    assert [s.name for s in pipe.plan.cameras[0].steps] == ["decode", "normalise", "crop", "pad", "batch"]
    # normalise -> crop -> resize (float) -> batch
    stages = [Decode(), Normalise(**BASE), Crop(left=0, top=1, width=320, height=180), Resize(scale=0.5)]
    _compare(stages, [size], tol("float_path"))
    # resize alone, then a uint8 batch
    _compare([Decode(), Resize(scale=0.5, interpolation="area")], [size], tol("uint8_resize", "reference", "cpu"))


def test_every_output_byte_is_written_on_a_reused_buffer(fused_impl):
    size = (641, 359)
    rig = dv.Rig.from_dict(rig_dict([size, size]))
    frames = _frames([size, size])
    for fidelity in ("reference", "fast"):
        pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, fidelity=fidelity, output_buffers=1)
        first = pipe.process(frames).images
        want = first.copy()
        first[...] = np.nan  # whatever the buffer held, the next frame set overwrites all of it
        again = pipe.process(frames).images
        assert again is first
        assert np.array_equal(again, want)


def test_output_ring_and_scratch_buffers_are_reused():
    size = (320, 180)
    rig = dv.Rig.from_dict(rig_dict([size]))
    pipe = dv.Pipeline.from_profile("bevformer-base", rig, output_buffers=2)
    frames = _frames([size])
    a, b, c = (pipe.process(frames).images for _ in range(3))
    assert a is c and a is not b
    before = {k: {n: id(v) for n, v in s.items()} for k, s in pipe._states.items()}
    pipe.process(frames)
    after = {k: {n: id(v) for n, v in s.items()} for k, s in pipe._states.items()}
    assert before == after  # no scratch buffer re-allocated after the first frame set


# -- fidelity fast ------------------------------------------------------------------------------------
def _fast_deviation(rig, frames, profile="bevformer-tiny"):
    fast = dv.Pipeline.from_profile(profile, rig, fidelity="fast")
    steps = [s.kernel.name for s in fast.plan.cameras[0].steps]
    got = fast.process(frames).images.copy()
    ref = dv.Pipeline.from_profile(profile, rig, fidelity="reference").process(frames).images
    d = np.abs(got.astype(np.float64) - ref)
    return steps, float(d.mean()), float(d.max())


def test_fast_fidelity_uses_dct_scaling_and_deviation_is_bounded_on_samples(samples_dir):
    rig = dv.Rig.from_yaml(samples_dir / "rig.yaml")
    frames = {c.name: sorted((samples_dir / "frames" / c.name).glob("*.jpg"))[0].read_bytes() for c in rig}
    steps, mean, mx = _fast_deviation(rig, frames)
    assert steps[0] == "fused_decode_resize_normalise_pad_batch"  # the 1/2-scale DCT decode, fused
    assert mean <= 0.02  # measured 0.0026
    assert mx <= 1.0     # measured 0.47


def test_fast_fidelity_deviation_on_real_nuscenes(nuscenes_dir):
    rig = dv.Rig.from_yaml(nuscenes_dir / "rig.yaml")
    frames = {c.name: (nuscenes_dir / f"{c.name}.jpg").read_bytes() for c in rig}
    _, mean, mx = _fast_deviation(rig, frames)
    assert mean <= 0.02  # measured 0.0052
    assert mx <= 1.0     # measured 0.28


@pytest.mark.parametrize("size", [(1600, 900), (1241, 375), (97, 61)])
def test_fast_fidelity_deviation_on_odd_sizes(size):
    rig = dv.Rig.from_dict(rig_dict([size, size]))
    frames = _frames([size, size], content=_smooth_bgr)
    steps, mean, mx = _fast_deviation(rig, frames)
    exact = size[0] % 2 == 0 and size[1] % 2 == 0
    # an odd size is not an exact 2x shrink: the DCT shortcut would sample other pixels than the
    # reference, so fast decodes at full size there (tests/backends/test_fast_fidelity_sizes.py bounds both)
    assert steps[0] == ("fused_decode_resize_normalise_pad_batch" if exact else "decode_bgr")
    assert mean <= 0.02
    assert mx <= 1.0


def test_fast_fidelity_without_a_2x_shrink_decodes_at_full_size():
    rig = dv.Rig.from_dict(rig_dict([(641, 359)]))
    pipe = dv.Pipeline.from_profile("bevformer-small", rig, fidelity="fast")  # x0.8: no DCT scaling
    assert [s.kernel.name for s in pipe.plan.cameras[0].steps] == ["decode_bgr", "fused_resize_normalise_pad_batch"]


def test_opencv_threads_are_left_alone():
    import cv2

    before = cv2.getNumThreads()
    rig = dv.Rig.from_dict(rig_dict([(160, 90)] * 3))
    dv.Pipeline.from_profile("bevformer-tiny", rig, threads=2).process(_frames([(160, 90)] * 3))
    assert cv2.getNumThreads() == before
