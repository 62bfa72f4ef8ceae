"""The torch backend (dvpipe.backends.torch_device) against the reference and CPU backends.

CI has the CPU wheel of torch only: every test here runs on ``torch:cpu``; the CUDA and NPU
cases skip with the reason the backend itself gives (``tools/bench/gpu.py`` is the GPU check).

Tolerance policy (one place, :func:`assert_matches`; the bounds are tests/tolerances.py's entries):

* float data path (``float_path``): float32 rounding of float64 math;
* a resize of **uint8** data (before Normalise, as PETR/BEVDet do; ``uint8_resize``/torch) rounds to
  integers as OpenCV's 8-bit resize does; where the exact value is within float32 rounding of a .5 tie
  the two can round apart, by one grey level (``1/std`` after normalising), on a bounded fraction of the
  values. (The CPU backend's fixed-point OpenCV resize differs from the reference on ~12% of them.)
* float16 output (``float16_output``): the reference cast to float16, within 1 fp16 ulp.
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import types

import cv2
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs torch (pip install 'dvpipe[torch]')")

import dvpipe as dv  # noqa: E402
from dvpipe.backends import availability, load_family, resolve  # noqa: E402
from dvpipe.stages.base import FrameSpec  # noqa: E402
from dvpipe.stages.kernel_registry import KernelContext, KernelQuery, kernels_at  # noqa: E402
from dvpipe.types import PixelFormat  # noqa: E402
from _bevformer_ref import bevformer_reference  # noqa: E402
from conftest import encode_jpeg, encode_png, rig_dict, textured_bgr  # noqa: E402
from tolerances import tol  # noqa: E402

load_family("torch")
from dvpipe.backends import torch_device as td  # noqa: E402
from dvpipe.backends._torch import decode as torch_decode  # noqa: E402
from dvpipe.backends._torch.colour import nv12_from_bgr  # noqa: E402

TORCH_CPU = ("torch:cpu", "cpu")  # torch for everything it can, OpenCV decode when torchvision is absent
UINT8_RESIZE_PROFILES = {"petr", "bevdet"}  # the reference resizes uint8 (rounding) before normalising


def _cuda_skip_reason() -> str | None:
    v = availability(resolve("torch:cuda"))
    return None if v.ok else f"torch:cuda unavailable: {v.reason}"


def _npu_skip_reason() -> str | None:
    v = availability(resolve("torch:npu"))
    return None if v.ok else f"torch:npu unavailable: {v.reason}"


def assert_matches(got, want, std=(1.0, 1.0, 1.0), uint8_resize=False, dtype="float32"):
    got = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert str(got.dtype) == dtype
    # float32: float rounding; float16: one ulp of the rounded reference, plus float32 noise
    bound = tol("float_path", "reference", "float32") if dtype == "float32" else tol("float16_output", "reference", "float16")
    if uint8_resize:  # the flipped grey level on a bounded fraction of the values, then the float rounding
        flips = tol("uint8_resize", "reference", "torch")
        bound = dataclasses.replace(bound, levels=flips.levels, frac=flips.frac, why=f"{flips.why}; {bound.why}")
    bound.check(got, want, unit=1.0 / min(std))


def _frames(rig, seed=0):
    return {c.name: encode_jpeg(textured_bgr(c.width, c.height, seed=seed + k)) for k, c in enumerate(rig)}


def _reference(rig, stages_or_profile, frames, fidelity="reference"):
    if isinstance(stages_or_profile, str):
        pipe = dv.Pipeline.from_profile(stages_or_profile, rig, backends=("reference",), fidelity=fidelity)
    else:
        pipe = dv.Pipeline(rig, stages_or_profile, backends=("reference",), fidelity=fidelity)
    batch = pipe.process(frames)
    assert batch.valid.all(), batch.drops
    return batch.images


def _torch_steps(pipe):
    return [s for cp in pipe.plan.cameras for s in cp.steps if s.backend.family == "torch"]


# -- availability and import hygiene -------------------------------------------------------------
def test_import_dvpipe_does_not_import_torch():
    code = "import sys, dvpipe; assert 'torch' not in sys.modules and 'torch_npu' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_torch_cpu_is_available():
    assert availability(resolve("torch:cpu")).ok
    assert availability(resolve("torch")).ok


@pytest.mark.skipif(_cuda_skip_reason() is None, reason="CUDA is present: its absence cannot be checked here")
def test_cuda_unavailable_says_why():
    v = availability(resolve("torch:cuda"))
    assert v.status == "unavailable"
    assert "CPU-only build" in v.reason or "sees no CUDA device" in v.reason


@pytest.mark.skipif(_npu_skip_reason() is None, reason="an NPU is present: its absence cannot be checked here")
def test_npu_unavailable_names_torch_npu_and_the_fix():
    v = availability(resolve("torch:npu:0"))
    assert v.status == "unavailable"
    assert "torch_npu" in v.reason and ("CANN" in v.reason or "is_available" in v.reason)


def test_missing_torch_is_a_clear_verdict(monkeypatch):
    monkeypatch.setattr(td, "torch", None)
    monkeypatch.setattr(td, "_TORCH_ERROR", "ModuleNotFoundError: No module named 'torch'")
    v = td.available(resolve("torch:cpu"))
    assert v.status == "unavailable" and "torch is not installed" in v.reason and "dvpipe[torch]" in v.reason


def test_a_negative_device_index_is_refused_with_its_reason(monkeypatch):
    # on a machine with two CUDA devices (stood in): -1 is no device, refused as the name is read, in one line
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert td.available(resolve("torch:cuda:1")).ok
    with pytest.raises(dv.ConfigError) as e:
        resolve("torch:cuda:-1")
    assert "-1" in str(e.value) and "\n" not in str(e.value)


def test_a_cpu_device_index_is_refused_with_its_reason():
    # torch.device("cpu:5") is accepted by torch, yet there is one CPU device: the index is a typo
    v = td.available(resolve("torch:cpu:5"))
    assert v.status == "unavailable" and "torch:cpu" in v.reason and "\n" not in v.reason, v
    assert td.available(resolve("torch:cpu")).ok


def test_environment_report_has_a_reason_for_every_missing_piece():
    env = td.environment()
    assert env["torch"]["ok"]
    for key in ("torchvision", "cuda", "npu"):
        assert env[key]["ok"] or env[key]["reason"], key


def test_unavailable_device_falls_back_in_the_plan_with_its_reason():
    if _cuda_skip_reason() is None:
        pytest.skip("CUDA is present")
    rig = dv.Rig.from_dict(rig_dict([(64, 48)]))
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=("torch:cuda", "cpu"))
    assert all(s.backend.name == "cpu" for s in pipe.plan.cameras[0].steps)
    assert "torch:cuda: unavailable" in str(pipe.plan)


# -- parity with the reference, every profile ------------------------------------------------------
@pytest.mark.parametrize("profile", list(dv.PROFILES))
@pytest.mark.parametrize("size", [(641, 359), (1242, 375), (97, 61)])
def test_profiles_match_reference_on_synthetic_frames(profile, size):
    p = dv.PROFILES[profile]
    rig = dv.Rig.from_dict(rig_dict([size, size]))
    frames = _frames(rig)
    pipe = dv.Pipeline.from_profile(profile, rig, backends=TORCH_CPU)
    assert _torch_steps(pipe), str(pipe.plan)
    assert _torch_steps(pipe)[-1].writes_batch, "the torch kernel should write the batch"
    batch = pipe.process(frames)
    assert batch.valid.all(), batch.drops
    assert isinstance(batch.images, torch.Tensor) and batch.images.device.type == "cpu"
    assert_matches(batch.images, _reference(rig, profile, frames), p.std, profile in UINT8_RESIZE_PROFILES)


@pytest.mark.parametrize("profile", list(dv.PROFILES))
def test_profiles_match_reference_on_samples(samples_dir, profile):
    from dataclasses import replace

    p = dv.PROFILES[profile]
    rig = dv.Rig.from_yaml(samples_dir / "rig.yaml")  # the info files' order; BEVDet's model was fed another
    rig = replace(rig, cameras=tuple(rig[name] for name in p.camera_order)) if p.camera_order else rig
    frames = {c.name: sorted((samples_dir / "frames" / c.name).glob("*.jpg"))[0].read_bytes() for c in rig}
    batch = dv.Pipeline.from_profile(profile, rig, backends=TORCH_CPU).process(frames)
    assert batch.valid.all(), batch.drops
    assert_matches(batch.images, _reference(rig, profile, frames), p.std, profile in UINT8_RESIZE_PROFILES)
    if profile.startswith("bevformer"):  # and against the independent mmcv-style reference (anchors.md §A)
        ref_img, _ = bevformer_reference([frames[c.name] for c in rig], [c.lidar2img for c in rig], profile)
        assert_matches(batch.images, ref_img)


def test_real_nuscenes_tiny_matches_reference(nuscenes_dir):
    rig = dv.Rig.from_yaml(nuscenes_dir / "rig.yaml")
    frames = {c.name: (nuscenes_dir / f"{c.name}.jpg").read_bytes() for c in rig}
    batch = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=TORCH_CPU).process(frames)
    ref_img, _ = bevformer_reference([frames[c.name] for c in rig], [c.lidar2img for c in rig], "bevformer-tiny")
    assert_matches(batch.images, ref_img)


@pytest.mark.parametrize("profile", ["bevformer-small", "petr", "bevdet"])
def test_fast_fidelity_within_half_a_grey_level_of_reference(profile):
    # at 'fast' a uint8 resize is not rounded back to integers: at most 0.5 grey level from the reference
    p = dv.PROFILES[profile]
    size = (641, 359)
    # raw BGR frames: no JPEG DCT-domain scaling on the CPU side, so this isolates the torch kernel
    rig = dv.Rig.from_dict(rig_dict([size], encoding="raw"))
    frames = {"CAM0": textured_bgr(*size, seed=4)}
    stages = dv.profile_stages(profile, "fast", rig[0])
    pipe = dv.Pipeline(rig, stages, backends=TORCH_CPU, fidelity="fast")
    got = pipe.process(frames).images.numpy()
    want = _reference(rig, stages, frames, fidelity="reference")
    tol("fast_unrounded_resize", "fast", "torch").check(got, want, unit=1.0 / min(p.std))


# -- mixed plans, single-op kernels and user stages ----------------------------------------------
@pytest.fixture(scope="module")
def cpu_only_stage():
    """A user stage with a CPU kernel only: it forces the plan to hop torch -> cpu -> torch."""
    from dataclasses import dataclass
    from typing import ClassVar

    @dataclass(frozen=True)
    class HostProbe(dv.Stage):
        op: ClassVar[str] = "test_torch_host_probe"

    def _probe(data, stages, ctx):
        assert isinstance(data, np.ndarray), f"a host kernel got {type(data).__name__}"
        return data

    for family in ("cpu", "reference"):
        dv.register_kernel("test_torch_host_probe", backend=family, replace=True)(_probe)

    return HostProbe


TINY = dict(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), to_rgb=True)


@pytest.mark.parametrize("layout", [
    "decode | normalise | probe | resize pad batch",   # torch normalise alone, float input to a torch resize
    "decode | resize | probe | normalise pad batch",   # torch resize alone (uint8 out)
    "decode | crop | probe | resize normalise batch",  # torch crop alone
    "decode | normalise pad | probe | batch",           # torch normalise+pad, then batch alone
])
def test_mixed_plans_equal_all_cpu(cpu_only_stage, layout):
    size = (161, 91)
    rig = dv.Rig.from_dict(rig_dict([size, size]))
    frames = _frames(rig, seed=7)
    make = {"decode": dv.Decode(), "normalise": dv.Normalise(**TINY), "probe": cpu_only_stage(),
            "resize": dv.Resize(scale=0.5), "pad": dv.Pad(size_divisor=32), "batch": dv.Batch(),
            "crop": dv.Crop(left=3, top=5, width=150, height=80)}
    stages = [make[name] for part in layout.split("|") for name in part.split()]
    pipe = dv.Pipeline(rig, stages, backends=TORCH_CPU)
    backends = [s.backend.name for s in pipe.plan.cameras[0].steps]
    assert backends[0] == "cpu" and "torch:cpu" in backends and backends.count("cpu") >= 2, str(pipe.plan)
    got = pipe.process(frames)
    assert got.valid.all(), got.drops
    want = dv.Pipeline(rig, stages, backends=("cpu",)).process(frames).images
    ref = _reference(rig, stages, frames)
    # the resize-before-normalise layouts round uint8 (OpenCV fixed point on the CPU backend): compare with the reference
    uint8_resize = layout.startswith("decode | resize")
    assert_matches(got.images, ref, TINY["std"], uint8_resize)
    if not uint8_resize:
        assert np.abs(got.images.numpy() - want).max() <= tol("float_path").atol


def test_cpu_decode_then_torch_normalise_equals_all_cpu_on_samples(samples_dir):
    rig = dv.Rig.from_yaml(samples_dir / "rig.yaml")
    frames = {c.name: sorted((samples_dir / "frames" / c.name).glob("*.jpg"))[1].read_bytes() for c in rig}
    for profile in ("bevformer-base", "bevformer-tiny"):
        mixed = dv.Pipeline.from_profile(profile, rig, backends=TORCH_CPU)
        assert [s.backend.name for s in mixed.plan.cameras[0].steps] == ["cpu", "torch:cpu"]
        cpu = dv.Pipeline.from_profile(profile, rig, backends=("cpu",)).process(frames).images
        assert np.abs(mixed.process(frames).images.numpy() - cpu).max() <= tol("float_path").atol


@pytest.mark.parametrize("stages", [
    [dv.Decode(), dv.Crop(left=10, top=7, width=120, height=60), dv.Resize(size=(37, 53)), dv.Normalise(**TINY),
     dv.Pad(size=(64, 64))],
    [dv.Decode(), dv.Resize(scale=0.63), dv.Crop(left=2, top=9, width=90, height=40), dv.Normalise(**TINY)],
    [dv.Decode(), dv.Normalise(**TINY), dv.Resize(size=(30, 41), interpolation="area"), dv.Pad(size_divisor=8)],
    [dv.Decode(), dv.Normalise(mean=(1, 2, 3), std=(2, 3, 4)), dv.Resize(size=(45, 80), interpolation="area")],
    [dv.Decode(), dv.Normalise(**TINY), dv.Resize(size=(57, 99), interpolation="nearest")],
    [dv.Decode(), dv.Normalise(**TINY), dv.Resize(size=(150, 260))],  # enlarge
    [dv.Decode(), dv.Normalise(**TINY), dv.Resize(size=(200, 100), interpolation="area")],  # enlarge one axis
], ids=["crop-resize-pad", "resize-crop", "area-shrink", "area-integer", "nearest", "enlarge", "area-mixed"])
def test_geometry_runs_match_reference(stages):
    rig = dv.Rig.from_dict(rig_dict([(161, 91)]))
    frames = _frames(rig, seed=2)
    got = dv.Pipeline(rig, stages, backends=TORCH_CPU).process(frames).images
    uint8_resize = [s.op for s in stages].index("resize") < [s.op for s in stages].index("normalise")
    assert_matches(got, _reference(rig, stages, frames), TINY["std"] if stages[-1].op != "normalise" else
                   stages[-1].std, uint8_resize)


def test_raw_bgr_frames_and_uint8_batches():
    rig = dv.Rig.from_dict(rig_dict([(77, 45)], encoding="raw"))
    img = textured_bgr(77, 45, seed=9)
    stages = [dv.Decode(), dv.Resize(size=(20, 31)), dv.Pad(size=(32, 32))]
    got = dv.Pipeline(rig, stages, backends=TORCH_CPU).process({"CAM0": img}).images
    want = _reference(rig, stages, {"CAM0": img})
    assert got.dtype == torch.uint8
    tol("uint8_rounding_flip").check(got.numpy(), want)


# -- dtypes, buffers, allocations -----------------------------------------------------------------
@pytest.mark.parametrize("profile", ["bevformer-base", "bevformer-tiny", "petr"])
def test_float16_output(profile):
    p = dv.PROFILES[profile]
    rig = dv.Rig.from_dict(rig_dict([(641, 359)]))
    frames = _frames(rig, seed=5)
    stages = [dv.Normalise(mean=s.mean, std=s.std, to_rgb=s.to_rgb, dtype="float16") if s.op == "normalise" else s
              for s in dv.profile_stages(profile, "reference", rig[0])]
    pipe = dv.Pipeline(rig, stages, backends=TORCH_CPU)
    got = pipe.process(frames).images
    assert got.dtype == torch.float16
    ref32 = [dv.Normalise(mean=p.mean, std=p.std, to_rgb=p.to_rgb) if s.op == "normalise" else s for s in stages]
    assert_matches(got, _reference(rig, ref32, frames), p.std, profile in UINT8_RESIZE_PROFILES, dtype="float16")


def test_output_buffers_are_reused_tensors():
    rig = dv.Rig.from_dict(rig_dict([(97, 61)] * 3))
    frames = _frames(rig)
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=TORCH_CPU, output_buffers=2)
    ptrs = [pipe.process(frames).images.data_ptr() for _ in range(6)]
    assert len(set(ptrs)) == 2 and ptrs[0::2] == [ptrs[0]] * 3


@pytest.mark.parametrize("profile", list(dv.PROFILES))
def test_no_allocations_per_frame_after_warm_up(profile):
    rig = dv.Rig.from_dict(rig_dict([(641, 359)] * 2))
    frames = _frames(rig)
    pipe = dv.Pipeline.from_profile(profile, rig, backends=TORCH_CPU, threads=1)
    for _ in range(2):
        pipe.process(frames)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        pipe.process(frames)
    sizes = [e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0]
    # only the 4/8-byte scalars torch wraps Python numbers in; an image-sized buffer would be >= 100 KB
    assert max(sizes, default=0) <= 64 and sum(sizes) <= 4096, sorted(sizes)[-5:]


# -- NV12 ------------------------------------------------------------------------------------------
def _fancy_up(p: np.ndarray, axis: int) -> np.ndarray:
    """libjpeg's h2v2 "fancy" upsampling along one axis (3/4, 1/4 of the nearer and farther sample)."""
    n = p.shape[axis]
    prev = np.take(p, np.r_[0, 0:n - 1], axis=axis)
    nxt = np.take(p, np.r_[1:n, n - 1], axis=axis)
    even, odd = 0.75 * p + 0.25 * prev, 0.75 * p + 0.25 * nxt
    out = np.stack([even, odd], axis=axis + 1)
    shape = list(p.shape)
    shape[axis] *= 2
    return out.reshape(shape)


def _nv12_reference_bgr(buf, w, h, hs, colour_range):
    """Independent NV12 -> BGR: fancy chroma upsampling, BT.601 full (JFIF) or limited range."""
    y = buf[:h, :w].astype(np.float64)
    ch, cw = -(-h // 2), -(-w // 2)
    uv = buf[hs:hs + ch, :2 * cw].reshape(ch, cw, 2).astype(np.float64)
    up = _fancy_up(_fancy_up(uv, 0), 1)[:h, :w]
    cb, cr = up[..., 0] - 128, up[..., 1] - 128
    if colour_range == "limited":
        y = (y - 16) * 255 / 219
        r, g, b = y + 1.596027 * cr, y - 0.391762 * cb - 0.812968 * cr, y + 2.017232 * cb
    else:
        r, g, b = y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb
    return np.clip(np.floor(np.stack([b, g, r], axis=-1) + 0.5), 0, 255).astype(np.uint8)


def _run_kernel(stages, spec_in, data, camera, backend="torch:cpu", fidelity="reference", out=None):
    ref = resolve(backend)
    specs, s = [], spec_in
    for st in stages:
        s = st.output_spec(s)
        specs.append(s)
    kernel = kernels_at([st.op for st in stages], ref.family)[0]
    assert len(kernel.ops) == len(stages)
    query = KernelQuery(tuple(stages), spec_in, tuple(specs), camera, ref, fidelity)
    assert kernel.check(query).ok
    ctx = KernelContext(camera, spec_in, specs[-1], ref, fidelity, out=out)
    return kernel.fn(data, tuple(stages), ctx), ctx


@pytest.mark.parametrize("colour_range,encoding", [("full", "jpeg"), ("limited", "h264")])
@pytest.mark.parametrize("size,stride", [((64, 48), None), ((97, 61), (128, 64)), ((1242, 375), (1280, 384))])
def test_nv12_to_bgr_matches_independent_conversion(colour_range, encoding, size, stride):
    w, h = size
    buf = nv12_from_bgr(textured_bgr(w, h, seed=3), colour_range, stride)
    hs = buf.shape[0] * 2 // 3
    cam = dv.Camera("CAM0", width=w, height=h, encoding=encoding)
    spec = FrameSpec(width=w, height=h, pixel_format=PixelFormat.NV12, dtype="uint8", channel_order="bgr")
    normalise = dv.Normalise(mean=(0, 0, 0), std=(1, 1, 1))
    got, _ = _run_kernel([normalise], spec, buf, cam)
    want = _nv12_reference_bgr(buf, w, h, hs, colour_range)
    tol("nv12_to_bgr").check(got, want)


def test_nv12_limited_range_agrees_with_opencv():
    # OpenCV's NV12 conversion is BT.601 limited range with nearest chroma: equal on flat chroma
    w, h = 64, 32
    rng = np.random.default_rng(1)
    buf = np.empty((h * 3 // 2, w), np.uint8)
    buf[:h] = rng.integers(16, 236, (h, w))
    buf[h:] = np.tile(np.array([90, 170], np.uint8), (h // 2, w // 2))
    got, _ = _run_kernel([dv.Normalise()], FrameSpec(width=w, height=h, pixel_format=PixelFormat.NV12, dtype="uint8",
                                                     channel_order="bgr"), buf,
                         dv.Camera("CAM0", width=w, height=h, encoding="h264"))
    want = cv2.cvtColor(buf, cv2.COLOR_YUV2BGR_NV12)
    tol("uint8_rounding_flip").check(got, want)


@pytest.mark.parametrize("colour_range", ["limited", "full"])
def test_nv12_of_a_bt709_camera_is_converted_with_bt709(colour_range):
    # the DVPP -> torch_npu route hands torch the decoder's NV12; a camera declared yuv_matrix: bt709 was
    # converted as BT.601 (27 grey levels off). Reference: BT.709's Kr = 0.2126, Kb = 0.0722 (ITU-R BT.709-6
    # table 3) written out here; chroma flat, so no upsampling is involved.
    w, h = 64, 32
    rng = np.random.default_rng(2)
    buf = np.empty((h * 3 // 2, w), np.uint8)
    buf[:h] = rng.integers(16, 236, (h, w))
    buf[h:] = np.tile(np.array([90, 170], np.uint8), (h // 2, w // 2))
    cam = dv.Camera("CAM0", width=w, height=h, encoding="h264", extra={"yuv_matrix": "bt709", "yuv_range": colour_range})
    got, _ = _run_kernel([dv.Normalise()], FrameSpec(width=w, height=h, pixel_format=PixelFormat.NV12, dtype="uint8",
                                                     channel_order="bgr"), buf, cam)
    y = buf[:h].astype(np.float64)
    cb, cr = 90.0 - 128, 170.0 - 128
    if colour_range == "limited":
        y, cb, cr = (y - 16) * 255 / 219, cb * 255 / 224, cr * 255 / 224
    r, g = y + 1.5748 * cr, y - 0.1873242729 * cb - 0.4681242729 * cr
    b = y + 1.8556 * cb
    want = np.clip(np.floor(np.stack([b, g, r], axis=-1) + 0.5), 0, 255).astype(np.uint8)
    tol("uint8_rounding_flip").check(got, want)


def test_nv12_through_the_fused_kernel_into_the_batch():
    w, h = 97, 61
    buf = nv12_from_bgr(textured_bgr(w, h, seed=8), "full", (128, 64))
    bgr = _nv12_reference_bgr(buf, w, h, 64, "full")
    cam = dv.Camera("CAM0", width=w, height=h, encoding="jpeg")
    stages = [dv.Normalise(**TINY), dv.Resize(scale=0.5), dv.Pad(size_divisor=32), dv.Batch()]
    out = torch.zeros((3, 32, 64))
    _run_kernel(stages, FrameSpec(width=w, height=h, pixel_format=PixelFormat.NV12, dtype="uint8",
                                  channel_order="bgr"), buf, cam, out=out)
    rig = dv.Rig((dv.Camera("CAM0", width=w, height=h, encoding="raw"),))
    want = _reference(rig, [dv.Decode()] + stages, {"CAM0": bgr})[0]
    # a grey level of the conversion may differ (rounding ties): 1/std, averaged down by the resize
    tol("nv12_fused").check(out.numpy(), want, unit=1.0 / min(TINY["std"]))


def test_nv12_buffer_too_small_is_a_frame_error():
    with pytest.raises(dv.FrameError, match="NV12"):
        _run_kernel([dv.Normalise()], FrameSpec(width=64, height=48, pixel_format=PixelFormat.NV12, dtype="uint8",
                                                channel_order="bgr"),
                    np.zeros((60, 64), np.uint8), dv.Camera("CAM0", width=64, height=48))


# -- decode (torchvision) ----------------------------------------------------------------------------
def test_without_torchvision_decode_goes_to_the_next_backend_with_the_reason(monkeypatch):
    monkeypatch.setitem(torch_decode._TV, "error", "torchvision cannot be imported (ModuleNotFoundError: ...)")
    rig = dv.Rig.from_dict(rig_dict([(64, 48)]))
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=TORCH_CPU)
    step = pipe.plan.cameras[0].steps[0]
    assert step.name == "decode" and step.backend.name == "cpu"
    assert "torchvision" in step.verdicts[0][1].reason
    with pytest.raises(dv.PlanError, match="torchvision"):
        dv.Pipeline.from_profile("bevformer-tiny", rig, backends=("torch:cpu",))


def _fake_torchvision_io():
    """torchvision.io's decode API over OpenCV: CHW RGB uint8 tensors, RuntimeError on bad data."""
    def decode(t, mode=None, device=None):
        img = cv2.imdecode(t.numpy(), cv2.IMREAD_COLOR)
        if img is None:
            raise RuntimeError("Unsupported marker type")
        return torch.from_numpy(np.ascontiguousarray(img[..., ::-1].transpose(2, 0, 1)))

    return types.SimpleNamespace(decode_jpeg=decode, decode_png=decode, ImageReadMode=types.SimpleNamespace(RGB=3))


@pytest.fixture
def fake_torchvision(monkeypatch):
    monkeypatch.setitem(torch_decode._TV, "error", None)
    monkeypatch.setitem(torch_decode._TV, "io", _fake_torchvision_io())


def test_torch_decode_kernel_gives_bgr_and_drops_corrupt_frames(fake_torchvision):
    rig = dv.Rig.from_dict(rig_dict([(97, 61), (97, 61)]))
    frames = _frames(rig)
    frames["CAM1"] = encode_png(textured_bgr(97, 61, seed=1))
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=TORCH_CPU)
    assert [s.backend.name for s in pipe.plan.cameras[0].steps] == ["torch:cpu", "torch:cpu"]
    assert_matches(pipe.process(frames).images, _reference(rig, "bevformer-tiny", frames))
    bad = dict(frames, CAM0=frames["CAM0"][:200] + bytes(50) + frames["CAM0"][-2:])
    batch = pipe.process(bad)
    assert batch.valid.tolist() == [False, True] and "corrupt" in batch.drops[0][1]


def test_torch_decode_of_a_16_bit_png_keeps_the_high_byte_as_opencv(monkeypatch):
    """torchvision >= 0.21 documents ``decode_png`` returning uint16 for a 16-bit PNG (stood in for here over
    OpenCV's IMREAD_UNCHANGED); the torch decode gives what ``cv2.imdecode(IMREAD_COLOR)`` gives (the cpu and
    reference backends' decoder, the independent reference here): 8 bits, not the low byte."""
    def decode(t, mode=None, device=None):
        img = cv2.imdecode(t.numpy(), cv2.IMREAD_UNCHANGED)
        chw = np.ascontiguousarray(img[..., ::-1].transpose(2, 0, 1)).astype(np.int32)
        return torch.from_numpy(chw).to(torch.uint16 if img.dtype == np.uint16 else torch.uint8)

    monkeypatch.setitem(torch_decode._TV, "error", None)
    monkeypatch.setitem(torch_decode._TV, "io", types.SimpleNamespace(
        decode_jpeg=decode, decode_png=decode, ImageReadMode=types.SimpleNamespace(RGB=3)))
    img16 = np.random.default_rng(0).integers(0, 65536, (48, 64, 3)).astype(np.uint16)
    png = encode_png(img16)
    assert decode(torch.frombuffer(bytearray(png), dtype=torch.uint8)).dtype == torch.uint16  # the stand-in's API
    rig = dv.Rig.from_dict(rig_dict([(64, 48)], encoding="png"))
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Batch()], ["torch:cpu"], fallback="error")
    assert [s.backend.name for s in pipe.plan.cameras[0].steps] == ["torch:cpu", "torch:cpu"]
    batch = pipe.process({"CAM0": png})
    assert batch.valid.all() and not batch.fallbacks, (batch.drops, batch.fallbacks)
    want = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    np.testing.assert_array_equal(batch.images.numpy()[0], want.transpose(2, 0, 1))


def test_decode_verdicts_on_devices(fake_torchvision):
    cam = dv.Camera("CAM0", width=64, height=48)
    spec = FrameSpec(width=64, height=48, pixel_format=PixelFormat.ENCODED, dtype="uint8", channel_order="",
                     encoding="jpeg")
    out = dv.Decode().output_spec(spec)

    def verdict(backend, fidelity, encoding="jpeg"):
        s = spec.with_(encoding=encoding)
        return torch_decode.supports(KernelQuery((dv.Decode(),), s, (out,), cam, resolve(backend), fidelity))

    assert verdict("torch:cpu", "reference").ok
    assert not verdict("torch:cuda", "reference").ok and "nvJPEG" in verdict("torch:cuda", "reference").reason
    assert verdict("torch:cuda", "fast").ok
    assert not verdict("torch:cuda", "fast", "png").ok
    assert "DVPP" in verdict("torch:npu", "fast").reason
    assert not verdict("torch:cpu", "reference", "h264").ok


# -- transfers, options ----------------------------------------------------------------------------
def test_transfer_kernel_and_host_upload_are_zero_copy_on_cpu():
    from dvpipe.backends._torch.device import DeviceRun

    img = textured_bgr(64, 48)
    run = DeviceRun(torch.device("cpu"))
    t = run.upload(img)
    assert t.data_ptr() == img.ctypes.data
    spec = FrameSpec(width=64, height=48, pixel_format=PixelFormat.BGR, dtype="uint8", channel_order="bgr")
    ref = resolve("torch:cpu")
    kernel = kernels_at(["transfer"], "torch")[0]
    ctx = KernelContext(dv.Camera("CAM0", width=64, height=48), spec, spec, ref, "reference")
    back = kernel.fn(t, (), ctx)
    assert np.array_equal(np.asarray(back), img) and ctx.device_spans == []


@pytest.mark.parametrize("size, crop", [
    ((30, 50), None),
    ((91, 80), (5, 10, 60, 50)),  # the rows keep their size: a crop after the resize used to stretch them
    ((30, 161), (7, 4, 100, 20)),
])
def test_antialias_option_uses_interpolate(size, crop):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class AAResize(dv.Resize):
        antialias: bool = True

    rig = dv.Rig.from_dict(rig_dict([(161, 91)]))
    frames = _frames(rig)
    stages = [dv.Decode(), dv.Normalise(mean=(0, 0, 0), std=(1, 1, 1)), AAResize(size=size)]
    if crop is not None:
        stages.append(dv.Crop(left=crop[0], top=crop[1], width=crop[2], height=crop[3]))
    pipe = dv.Pipeline(rig, stages + [dv.Batch()], backends=TORCH_CPU)
    assert "antialiased" in str(pipe.plan)
    got = pipe.process(frames).images[0]
    bgr = cv2.imdecode(np.frombuffer(frames["CAM0"], np.uint8), cv2.IMREAD_COLOR)
    x = torch.from_numpy(bgr).permute(2, 0, 1).float()[None]
    want = torch.nn.functional.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=True)[0]
    if crop is not None:
        left, top, width, height = crop
        want = want[:, top:top + height, left:left + width]
    assert torch.allclose(got, want, **tol("float_path").allclose)


# -- accelerators (skipped here; tools/bench/gpu.py is the device check) ---------------------------
@pytest.mark.skipif(_cuda_skip_reason() is not None, reason=str(_cuda_skip_reason()))
@pytest.mark.parametrize("profile", ["bevformer-tiny", "bevformer-base", "petr"])
def test_cuda_matches_cpu_backend(profile):
    rig = dv.Rig.from_dict(rig_dict([(641, 359)] * 2))
    frames = _frames(rig)
    pipe = dv.Pipeline.from_profile(profile, rig, backends=("torch:cuda", "cpu"))
    batch = pipe.process(frames)
    assert batch.images.device.type == "cuda"
    assert_matches(batch.images, _reference(rig, profile, frames), dv.PROFILES[profile].std,
                   profile in UINT8_RESIZE_PROFILES)


@pytest.mark.skipif(_npu_skip_reason() is not None, reason=str(_npu_skip_reason()))
def test_npu_matches_reference():
    rig = dv.Rig.from_dict(rig_dict([(641, 359)] * 2))
    frames = _frames(rig)
    batch = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=("torch:npu", "cpu")).process(frames)
    assert_matches(batch.images, _reference(rig, "bevformer-tiny", frames))


# -- the accelerator code path, exercised on CPU tensors with a stand-in device module -------------
class _FakeEvent:
    def __init__(self, enable_timing=False):
        self.t_ns = None

    def record(self, stream=None):
        import time

        self.t_ns = time.perf_counter_ns()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t_ns - self.t_ns) / 1e6


class _FakeStream:
    stream_id = 3

    def __init__(self, device=None):
        self.waited = 0

    def wait_stream(self, other):
        self.waited += 1


@pytest.fixture
def fake_accelerator(monkeypatch):
    """DeviceRun takes its accelerator branch (streams, events, staged uploads) over CPU tensors."""
    import contextlib

    from dvpipe.backends._torch import device as devmod

    fake = types.SimpleNamespace(Stream=_FakeStream, Event=_FakeEvent, default_stream=lambda dev: _FakeStream(),
                                 stream=lambda s: contextlib.nullcontext())
    real_init = devmod.DeviceRun.__init__

    def init(self, dev):
        real_init(self, dev)
        self.accel, self.mod, self.stream = True, fake, _FakeStream()
        self._events, self._spans = [], []

    monkeypatch.setattr(devmod.DeviceRun, "__init__", init)
    return fake


def test_accelerator_path_stages_uploads_and_records_device_spans(fake_accelerator):
    rig = dv.Rig.from_dict(rig_dict([(161, 91)] * 2))
    frames = _frames(rig)
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=TORCH_CPU)
    for _ in range(2):
        batch = pipe.process(frames)
    assert_matches(batch.images, _reference(rig, "bevformer-tiny", frames))
    spans = batch.timeline.spans_for(kind="device")
    names = sorted({s.name for s in spans})
    assert names == ["normalise+resize+pad+batch", "upload"], names
    assert {s.camera for s in spans} == {"CAM0", "CAM1"}
    assert all(s.attrs.get("duration_source") == "device" for s in spans)


def test_accelerator_path_kernel_spans(fake_accelerator):
    cam = dv.Camera("CAM0", width=64, height=48)
    img = textured_bgr(64, 48)
    spec = FrameSpec(width=64, height=48, pixel_format=PixelFormat.BGR, dtype="uint8", channel_order="bgr")
    stages = [dv.Normalise(**TINY), dv.Pad(size_divisor=32), dv.Batch()]
    out = np.zeros((3, 64, 64), np.float32)
    _, ctx = _run_kernel(stages, spec, img, cam, out=out)
    rig = dv.Rig((dv.Camera("CAM0", width=64, height=48, encoding="raw"),))
    assert_matches(out, _reference(rig, [dv.Decode()] + stages, {"CAM0": img})[0])
    assert [s.name for s in ctx.device_spans] == ["upload", "normalise+pad+batch"]
    assert all(s.unit == "cpu" and s.stream == "cpu/s3" for s in ctx.device_spans)


def test_uint8_batches_round_at_fast_fidelity_too():
    rig = dv.Rig.from_dict(rig_dict([(77, 45)], encoding="raw"))
    img = textured_bgr(77, 45, seed=2)
    stages = [dv.Decode(), dv.Resize(size=(20, 31)), dv.Batch()]
    got = dv.Pipeline(rig, stages, backends=TORCH_CPU, fidelity="fast").process({"CAM0": img}).images.numpy()
    want = _reference(rig, stages, {"CAM0": img})
    tol("uint8_resize", "fast", "torch").check(got, want)


def test_batch_device_hands_over_a_torch_tensor_without_a_copy_on_cpu():
    import dvpipe as dv
    from conftest import encode_jpeg, rig_dict, textured_bgr

    rig = dv.Rig.from_dict(rig_dict([(64, 48), (64, 48)]))
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    host = dv.Pipeline(rig, [dv.Decode(), dv.Normalise(), dv.Pad(size_divisor=32)])
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Normalise(), dv.Pad(size_divisor=32), dv.Batch(device="torch:cpu")])
    batch = pipe.process(frames)
    assert isinstance(batch.images, torch.Tensor) and batch.images.device.type == "cpu"
    assert batch.images.data_ptr() == pipe._buffers[0].ctypes.data  # torch.from_numpy: the ring buffer itself
    np.testing.assert_array_equal(batch.images.numpy(), host.process(frames).images)
    with pytest.raises(dv.ConfigError, match="torch:cuda"):
        dv.Batch(device="cuda")


# ------------------------------------------------------------------ issue 27 point 6
def test_a_reference_fallback_writes_into_a_torch_cpu_batch(request):
    """The torch step that writes the batch fails for a frame; its planned fallback (reference, numpy)
    writes the same slot of the torch CPU batch: the frame is emitted, counted as a fallback."""
    import torch

    rig = dv.Rig.from_dict(rig_dict([(96, 64)], encoding="png"))
    stages = [dv.Decode(), dv.Resize(size=(32, 48)), dv.Normalise(mean=(10, 20, 30), std=(2, 3, 4))]
    pipe = dv.Pipeline(rig, stages, ["torch:cpu", "reference"])
    writer = pipe.plan.cameras[0].steps[-1]
    assert writer.backend.name == "torch:cpu" and writer.writes_batch and writer.fallback
    frames = {rig.cameras[0].name: encode_png(textured_bgr(96, 64))}
    want = np.asarray(dv.Pipeline(rig, stages, ["reference"]).process(frames).images)

    def refuse(data, stages, ctx):
        raise RuntimeError("the device refused this frame")

    kernel, registered = writer.kernel, writer.kernel.fn  # the registry's own kernel: put it back after the test
    request.addfinalizer(lambda: object.__setattr__(kernel, "fn", registered))
    object.__setattr__(writer.kernel, "fn", refuse)
    pipe._prepared.clear()
    batch = pipe.process(frames)
    assert isinstance(batch.images, torch.Tensor) and bool(batch.valid[0]), batch.drops
    assert [fb[2:4] for fb in batch.fallbacks] == [("torch:cpu", "reference")]
    np.testing.assert_array_equal(batch.images.numpy(), want)  # the reference's own output, in the torch batch


@pytest.mark.parametrize("backends", [["torch:cpu", "cpu"], ["cpu"], ["reference"]])
def test_a_pad_value_uint8_cannot_hold_is_refused_by_every_backend(backends):
    rig = dv.Rig.from_dict(rig_dict([(96, 64)], encoding="png"))
    with pytest.raises(dv.ConfigError, match=r"Pad.value -1.5 cannot be stored in uint8 pixels"):
        dv.Pipeline(rig, [dv.Decode(), dv.Pad(size=(64, 128), value=-1.5)], backends)
    with pytest.raises(dv.ConfigError, match=r"Pad.value 256 cannot be stored"):
        dv.Pipeline(rig, [dv.Decode(), dv.Pad(size=(64, 128), value=256)], backends)
    frames = {rig.cameras[0].name: encode_png(textured_bgr(96, 64))}
    batch = dv.Pipeline(rig, [dv.Decode(), dv.Pad(size=(64, 128), value=7)], backends).process(frames)
    assert (np.asarray(batch.images)[0, :, :, 96:] == 7).all()  # a value uint8 holds: written as is
    after = dv.Pipeline(rig, [dv.Decode(), dv.Normalise(mean=(0, 0, 0), std=(1, 1, 1)),
                              dv.Pad(size=(64, 128), value=-1.5)], backends).process(frames)
    assert (np.asarray(after.images)[0, :, :, 96:] == -1.5).all()  # float output: any value


def test_nearest_resize_on_uint8_runs_on_torch_cpu_as_opencv():
    """Resize(interpolation="nearest") on uint8 pixels: accepted by the torch kernel, computed by it (no
    fallback to the cpu backend) and equal to OpenCV's INTER_NEAREST (the independent reference),
    shrinking and enlarging, with column indices that step evenly (48) and that do not (77, 150)."""
    rig = dv.Rig.from_dict(rig_dict([(96, 64)], encoding="png"))
    img = textured_bgr(96, 64)
    for size in ((32, 48), (41, 77), (100, 150)):
        pipe = dv.Pipeline(rig, [dv.Decode(), dv.Resize(size=size, interpolation="nearest")], ["torch:cpu", "cpu"],
                           fallback="error")
        assert pipe.plan.cameras[0].steps[-1].backend.name == "torch:cpu"
        batch = pipe.process({rig.cameras[0].name: encode_png(img)})
        assert not batch.fallbacks, batch.fallbacks
        want = cv2.resize(img, (size[1], size[0]), interpolation=cv2.INTER_NEAREST).transpose(2, 0, 1)
        np.testing.assert_array_equal(batch.images.numpy()[0], want)


@pytest.mark.parametrize("normalise", [False, True], ids=["uint8-out", "normalised"])
@pytest.mark.parametrize("size", [(51, 66), (34, 99)], ids=["x3-rows-x2-cols", "x2-rows-x3-cols"])
def test_area_enlarging_by_whole_factors_on_uint8_runs_on_torch_cpu_as_opencv(size, normalise):
    """INTER_AREA enlarging by whole factors picks pixels (weights 1 and 0) whose column indices repeat
    (0, 0, 1, 1, ...): the torch kernel computes it itself (fallback="error") and equals cv2.resize."""
    rig = dv.Rig.from_dict(rig_dict([(33, 17)], encoding="raw"))
    img = textured_bgr(33, 17, seed=5)
    norm = [dv.Normalise(mean=(103.53, 116.28, 123.675), std=(57.375, 57.12, 58.395), to_rgb=True)] if normalise else []
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Resize(size=size, interpolation="area"), *norm, dv.Batch()],
                       TORCH_CPU, fallback="error")
    assert [s.backend.name for s in pipe.plan.cameras[0].steps][-1] == "torch:cpu"
    batch = pipe.process({"CAM0": img})
    assert not batch.fallbacks, batch.fallbacks
    want = cv2.resize(img, (size[1], size[0]), interpolation=cv2.INTER_AREA).astype(np.float64)
    if not normalise:
        np.testing.assert_array_equal(batch.images.numpy()[0], want.transpose(2, 0, 1))
    else:
        st = norm[0]
        want = ((want[..., ::-1] - np.array(st.mean)) / np.array(st.std)).transpose(2, 0, 1)
        assert_matches(batch.images[0], want, std=st.std)


def _damaged_scan(jpeg: bytes) -> bytes:
    """``jpeg`` with bytes in the middle of its entropy-coded data changed (no marker made): libjpeg
    warns and conceals, OpenCV returns a picture."""
    sos = jpeg.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(jpeg[sos + 2:sos + 4], "big")
    data = bytearray(jpeg)
    for k in range(start + (len(jpeg) - start) // 3, start + (len(jpeg) - start) // 3 + 40, 4):
        data[k] = (data[k] ^ 0x5A) if data[k] ^ 0x5A != 0xFF else data[k] ^ 0x33
    return bytes(data)


@pytest.mark.parametrize("on_corrupt", ["drop", "flag"])
def test_torch_decode_gives_libjpegs_corruption_verdict(fake_torchvision, on_corrupt):
    """A JPEG damaged inside its scan: the torch decoder (here torchvision's API over OpenCV, which
    conceals as torchvision's libjpeg and nvJPEG do) returns a picture, but the frame is not emitted
    valid: dropped as corrupt (or kept and flagged), as the cpu backend decides, by libjpeg's verdict."""
    rig = dv.Rig.from_dict(rig_dict([(97, 61)]))
    frames = _frames(rig)
    bad = {"CAM0": _damaged_scan(frames["CAM0"])}
    assert cv2.imdecode(np.frombuffer(bad["CAM0"], np.uint8), cv2.IMREAD_COLOR) is not None  # concealed
    cpu = dv.Pipeline(rig, [dv.Decode()], ["cpu"], on_corrupt=on_corrupt).process(bad)
    pipe = dv.Pipeline(rig, [dv.Decode()], ["torch:cpu"], on_corrupt=on_corrupt)
    assert pipe.plan.cameras[0].steps[0].backend.name == "torch:cpu"
    batch = pipe.process(bad)
    if on_corrupt == "drop":
        assert not cpu.valid[0] and "corrupt JPEG (libjpeg:" in cpu.drops[0][1]
        assert not batch.valid[0] and "corrupt JPEG (libjpeg:" in batch.drops[0][1], batch.drops
    else:
        assert cpu.valid[0] and cpu.metas[0].get("corrupt") and batch.valid[0] and batch.metas[0].get("corrupt")
    assert pipe.process(frames).valid[0]  # an intact frame is emitted


def test_a_device_step_waits_for_its_own_device_not_the_threads_current_one(monkeypatch):
    # torch.cuda.synchronize() / torch_npu.npu.synchronize() without a device wait for the calling thread's
    # current device: device 0 on a pipeline worker thread, whatever device the step runs on
    from dvpipe.backends._torch import device as tdev

    waited = []

    class _Module:  # what device_module() returns for cuda / npu: the calls the step makes
        Stream = staticmethod(lambda device: None)
        synchronize = staticmethod(lambda device=None: waited.append(device))

    monkeypatch.setattr(tdev, "device_module", lambda dev: _Module)
    run = tdev.DeviceRun(torch.device("cuda", 1))
    run.sync_default()
    assert waited == [torch.device("cuda", 1)]


@pytest.mark.parametrize("scale, interpolation", [(0.3, "linear"), (0.7, "area")])
def test_uint8_resize_ties_stay_within_the_measured_bound_on_real_frames(nuscenes_dir, scale, interpolation):
    """An exact .5 tie of a uint8 resize is decided by float noise in torch (float32) and in the reference
    (float64): one grey level apart on a bounded fraction of the values -- the worst cases measured on the
    nuScenes frames (1.9% at 0.3 bilinear, 1.4% at 0.7 area; docs/torch.md) -- and never more."""
    rig = dv.Rig.from_yaml(nuscenes_dir / "rig.yaml")
    frames = {c.name: (nuscenes_dir / f"{c.name}.jpg").read_bytes() for c in rig}
    stages = [dv.Decode(), dv.Resize(scale=scale, interpolation=interpolation)]
    got, want = (np.asarray(dv.Pipeline(rig, stages, backends=b).process(frames).images)
                 for b in (("torch:cpu", "cpu"), ("reference",)))
    tol("uint8_resize_real_frames", "reference", "torch").check(got, want)
