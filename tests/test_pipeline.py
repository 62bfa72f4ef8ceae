"""Pipeline behaviour: bad input, drops, plans, user stages, output buffers."""
from __future__ import annotations

import importlib.util
import json
import sys
import threading

import numpy as np
import pytest

import dvpipe as dv
from _bevformer_ref import imnormalize
from conftest import ROOT, encode_jpeg, encode_png, rig_dict, textured_bgr
from tolerances import tol

TINY = dict(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), to_rgb=True)


def _pipe(sizes=((64, 48), (64, 48), (64, 48)), **kw):
    rig = dv.Rig.from_dict(rig_dict(list(sizes)))
    return rig, dv.Pipeline(rig, [dv.Decode(), dv.Normalise(**TINY), dv.Pad(size_divisor=32)], **kw)


def _expected(bgr, hp=64, wp=64):
    x = imnormalize(bgr.astype(np.float32), TINY["mean"], TINY["std"], True)
    out = np.zeros((hp, wp, 3), np.float32)
    out[:bgr.shape[0], :bgr.shape[1]] = x
    return out.transpose(2, 0, 1)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "wrong_size", "not_an_image_type"])
def test_bad_frame_is_a_counted_drop_and_others_survive(damage):
    rig, pipe = _pipe()
    imgs = [textured_bgr(64, 48, seed=k) for k in range(3)]
    frames = {c.name: encode_jpeg(im, quality=95) for c, im in zip(rig, imgs)}
    good = frames["CAM1"]
    frames["CAM1"] = {"truncated": good[: len(good) // 2], "garbage": b"\xff\xd8\xff" + bytes(200) + b"\xff\xd9",
                      "empty": b"", "wrong_size": encode_jpeg(textured_bgr(80, 48)),
                      "not_an_image_type": 12345}[damage]
    batch = pipe.process(frames)
    assert batch.valid.tolist() == [True, False, True]
    assert [c for c, _ in batch.drops] == ["CAM1"] and batch.drops[0][1]
    assert np.all(batch.images[1] == 0)
    for i in (0, 2):
        ref = _expected(dv_decode(frames[rig[i].name]))
        assert np.abs(batch.images[i] - ref).max() < tol("float_path").atol
    if damage == "wrong_size":
        assert "80x48" in batch.drops[0][1] and "64x48" in batch.drops[0][1]
    if damage == "truncated":
        assert "truncated" in batch.drops[0][1]


def dv_decode(data):
    import cv2

    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)


def test_missing_camera_dropped_unknown_camera_is_config_error():
    rig, pipe = _pipe()
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    del frames["CAM2"]
    batch = pipe.process(frames)
    assert batch.valid.tolist() == [True, True, False]
    assert batch.drops[0][0] == "CAM2" and "missing" in batch.drops[0][1]
    frames["CAM9"] = frames["CAM0"]
    with pytest.raises(dv.ConfigError, match="unknown camera.*CAM9"):
        pipe.process(frames)


def test_a_frame_already_transformed_is_refused_not_given_wrong_metas():
    # Frame.img_aug said a transform was already applied to the picture, and nothing read it: the metas
    # (lidar2img, img_aug) then described the camera's own picture. Refused in one line instead.
    rig, pipe = _pipe()
    jpeg = encode_jpeg(textured_bgr(64, 48))
    frames = {c.name: dv.Frame(c.name, 0, 0, jpeg) for c in rig}
    assert pipe.process(frames).valid.all()  # the default img_aug: the identity
    frames["CAM1"] = dv.Frame("CAM1", 0, 0, jpeg, img_aug=np.eye(3))  # an identity of the caller's: fine
    assert pipe.process(frames).valid.all()
    frames["CAM1"] = dv.Frame("CAM1", 0, 0, jpeg, img_aug=np.diag([0.5, 0.5, 1.0]))
    with pytest.raises(dv.ConfigError, match="camera CAM1: the frame's img_aug is not the identity"):
        pipe.process(frames)


def test_rig_yaml_errors_name_the_field(tmp_path):
    bad = tmp_path / "rig.yaml"
    bad.write_text("cameras:\n- {name: A, width: 10, height: 10, intrinsics: [[1,0,0],[0,1,0]]}\n"
                   "- {name: B, width: -4, height: 10}\n- {name: C, width: 10, height: 10, lidar2cam: [[1,2],[3,4]]}\n")
    with pytest.raises(dv.ConfigError) as e:
        dv.Rig.from_yaml(bad)
    msg = str(e.value)
    assert "cameras[0].intrinsics: expected a 3x3 matrix, got shape [2, 3]" in msg
    assert "cameras[1].width" in msg
    assert "cameras[2].lidar2cam" in msg
    with pytest.raises(dv.ConfigError, match="not found"):
        dv.Rig.from_yaml(tmp_path / "nope.yaml")


@pytest.mark.parametrize("make,match", [
    (lambda: dv.Resize(), "exactly one of"),
    (lambda: dv.Resize(size=(10,)), "height, width"),
    (lambda: dv.Resize(scale=0.5, interpolation="cubic"), "linear, area, nearest"),
    (lambda: dv.Normalise(std=(1, 0, 1)), "positive"),
    (lambda: dv.Normalise(dtype="int8"), "float32, float16"),
    (lambda: dv.Pad(), "exactly one of"),
    (lambda: dv.Crop(left=-1, width=2, height=2), "non-negative"),
])
def test_stage_validation_says_what_is_allowed(make, match):
    with pytest.raises(dv.ConfigError, match=match):
        make()


def test_stage_order_errors_before_anything_runs():
    rig = dv.Rig.from_dict(rig_dict([(64, 48)]))
    with pytest.raises(dv.ConfigError, match="Decode"):
        dv.Pipeline(rig, [dv.Normalise()])
    with pytest.raises(dv.ConfigError, match="does not fit"):
        dv.Pipeline(rig, [dv.Decode(), dv.Crop(width=100, height=10)])
    rig2 = dv.Rig.from_dict(rig_dict([(64, 48), (96, 48)]))
    with pytest.raises(dv.ConfigError, match="different output sizes"):
        dv.Pipeline(rig2, [dv.Decode(), dv.Normalise()])


def test_inputs_paths_arrays_png_gray_progressive_subsamplings(tmp_path):
    sizes = [(61, 37)] * 7
    rig = dv.Rig.from_dict(rig_dict(sizes))
    bgr = [textured_bgr(61, 37, seed=k) for k in range(7)]
    path = tmp_path / "f.jpg"
    path.write_bytes(encode_jpeg(bgr[0]))
    frames = {"CAM0": str(path), "CAM1": bgr[1], "CAM2": encode_png(bgr[2]),
              "CAM3": encode_jpeg(bgr[3], gray=True), "CAM4": encode_jpeg(bgr[4], progressive=True),
              "CAM5": encode_jpeg(bgr[5], subsampling="444"), "CAM6": encode_jpeg(bgr[6], subsampling="422")}
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Normalise(**TINY), dv.Pad(size_divisor=32)])
    batch = pipe.process(frames)
    assert batch.valid.all(), batch.drops
    for i, name in enumerate(rig.names):
        value = frames[name]
        decoded = value if isinstance(value, np.ndarray) else dv_decode(path.read_bytes() if isinstance(value, str) else value)
        assert np.abs(batch.images[i] - _expected(decoded)).max() < tol("float_path").atol
    # grayscale: three equal channels before normalisation
    g = batch.images[3][:, :37, :61] * np.array(TINY["std"])[:, None, None] + np.array(TINY["mean"])[:, None, None]
    assert np.abs(g[0] - g[1]).max() < tol("denormalised_channels").atol


def test_plan_table_json_and_verdicts_for_rejecting_backend():
    @dv.register_kernel("normalise", backend="picky", supports=lambda q: dv.KernelVerdict.no("picky only takes 32-wide images"),
                        replace=True)
    def _never(data, stages, ctx):  # pragma: no cover - rejected at plan time
        raise AssertionError

    rig, pipe = _pipe(backends=("picky", "cpu"))
    text = str(pipe.plan)
    assert "picky: rejected, picky only takes 32-wide images" in text
    assert "CAM0 (+2 alike)" in text
    d = pipe.plan.to_dict()
    json.dumps(d)
    steps = d["cameras"][0]["steps"]
    assert [s["backend"] for s in steps] == ["cpu", "cpu"]
    assert steps[1]["verdicts"][0] == {"backend": "picky", "status": "rejected", "ok": False,
                                       "reason": "picky only takes 32-wide images", "rule": None, "source": None,
                                       "detour": None}
    assert d["output"] == {"shape": [3, 3, 64, 64], "dtype": "float32", "placement": "host"}


def test_runtime_fallback_to_next_backend_is_counted_and_error_mode_raises():
    @dv.register_kernel(("normalise", "pad", "batch"), backend="flaky", replace=True)
    def _flaky(data, stages, ctx):
        raise RuntimeError("device lost")

    rig, pipe = _pipe(backends=("flaky", "cpu"))
    frames = {c.name: encode_jpeg(textured_bgr(64, 48, seed=k)) for k, c in enumerate(rig)}
    batch = pipe.process(frames)
    assert batch.valid.all()
    assert len(batch.fallbacks) == 3 and batch.fallbacks[0][2:4] == ("flaky", "cpu")
    assert "device lost" in batch.fallbacks[0][4]
    assert np.abs(batch.images[0] - _expected(dv_decode(frames["CAM0"]))).max() < tol("float_path").atol
    rig, strict = _pipe(backends=("flaky", "cpu"), fallback="error")
    with pytest.raises(RuntimeError, match="device lost"):
        strict.process(frames)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_raised_frame_set_frees_its_output_buffer(threads):
    """After ``process`` raised (fallback="error"), the set no longer holds the ring: with one output buffer
    the next call runs (it waited for ever when the failed set stayed uncollected; with one thread the jobs
    run inline and their error escaped before the set could be collected)."""
    lost = [True]

    @dv.register_kernel(("normalise", "pad", "batch"), backend="flaky_once", replace=True)
    def _flaky_once(data, stages, ctx):
        if lost[0]:
            raise RuntimeError("device lost")
        raise dv.FrameError("refused")  # this frame is not for this kernel: the planned CPU fallback runs

    rig, strict = _pipe(backends=("flaky_once", "cpu"), fallback="error", threads=threads, output_buffers=1)
    frames = {c.name: encode_jpeg(textured_bgr(64, 48, seed=k)) for k, c in enumerate(rig)}
    with pytest.raises(RuntimeError, match="device lost"):
        strict.process(frames)
    if threads == 1:  # submit() starts the set and returns; its own result() raises (the documented contract)
        pending = strict.submit(frames)
        with pytest.raises(RuntimeError, match="device lost"):
            pending.result()
    lost[0] = False
    done = []
    t = threading.Thread(target=lambda: done.append(strict.process(frames)), daemon=True)
    t.start()
    t.join(30)
    assert done, "the next process() did not return"
    assert done[0].valid.all()
    assert np.abs(done[0].images[0] - _expected(dv_decode(frames["CAM0"]))).max() < tol("float_path").atol
    strict.close()


def test_process_after_submitting_every_buffer_on_the_same_thread_is_refused_not_a_deadlock():
    """``process`` waits for the oldest uncollected set's caller to collect it; when that caller is this very
    thread (it submitted ``output_buffers`` sets), nobody would: the same one-line error as ``submit``."""
    rig, pipe = _pipe(output_buffers=2)
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    pending = [pipe.submit(frames), pipe.submit(frames)]
    raised = []

    def same_thread():  # submits and processes on one thread (its own, so that a deadlock fails the test)
        own = [pipe.submit(frames), pipe.submit(frames)]
        try:
            pipe.process(frames)
        except dv.ConfigError as e:
            raised.append(str(e))
        own.extend(pending)

    for p in pending:
        p.result()
    t = threading.Thread(target=same_thread, daemon=True)
    t.start()
    t.join(30)
    assert raised and "2 frame sets submitted and not collected" in raised[0], "process() waited for itself"
    pipe.close()


def test_a_batchs_metas_are_its_own():
    """Editing one batch's metas (a caller rescaling K, changing img_norm_cfg) changes no other batch's: the
    shared arrays are read-only, nested dicts are copied per batch."""
    rig = dv.Rig.from_dict(rig_dict([(64, 48)] * 2))
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=("cpu",), output_buffers=2)
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    a, b = pipe.process(frames), pipe.process(frames)
    assert isinstance(a.metas[0]["img_norm_cfg"], dict)
    for key, value in a.metas[0].items():
        if isinstance(value, np.ndarray):
            assert not value.flags.writeable, key
        elif isinstance(value, dict):
            value["edited"] = True
            assert "edited" not in b.metas[0][key], key
    pipe.close()


def test_keep_refuses_a_copy_the_buffer_was_overwritten_during():
    """``keep`` checked the buffer's generation before copying only: another thread's frame set taking the
    buffer while the copy ran gave a copy mixing two sets, without an error."""
    ring = [0]

    class Overwritten:  # the buffer, taken by another set while it is being copied
        def clone(self):
            ring[0] += 1
            return self

    batch = dv.FrameBatch(Overwritten(), [{}], np.ones(1, bool), [], ("CAM0",), [], None, ring=ring, slot=0,
                          generation=0)
    with pytest.raises(dv.StaleBatchError):
        batch.keep()


def test_a_set_collected_after_close_says_so():
    """``close`` stops the workers; a set submitted before it and collected after is a one-line error (it was a
    bare AssertionError with worker threads)."""
    rig, pipe = _pipe(threads=2, output_buffers=2)
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    pipe.process(frames)  # the pool runs
    pending = pipe.submit(frames)
    pipe.close()
    try:
        batch = pending.result()  # the workers may have finished it before the close
    except dv.ConfigError as e:
        assert "closed before this frame set was collected" in str(e)
    else:
        assert batch.valid.all()


def test_output_buffers_are_a_reused_ring():
    rig, pipe = _pipe(output_buffers=2)
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    ptrs = [pipe.process(frames).images.ctypes.data for _ in range(4)]
    assert ptrs[0] == ptrs[2] and ptrs[1] == ptrs[3] and ptrs[0] != ptrs[1]


def test_user_stage_sample_plans_fuses_and_matches_independent_math(samples_dir):
    spec = importlib.util.spec_from_file_location("custom_stage", ROOT / "samples" / "custom_stage.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["custom_stage"] = mod
    spec.loader.exec_module(mod)
    size = (64, 48)
    rig = dv.Rig.from_dict(rig_dict([size]))
    stages = [dv.Decode(), mod.Gamma(1.8), dv.Normalise(**TINY), dv.Pad(size_divisor=32)]
    pipe = dv.Pipeline(rig, stages)
    steps = pipe.plan.cameras[0].steps
    assert [s.name for s in steps] == ["decode", "gamma+normalise+pad+batch"]
    data = encode_jpeg(textured_bgr(*size))
    batch = pipe.process({"CAM0": data})
    assert [t[1] for t in batch.timings] == ["decode", "gamma+normalise+pad+batch"]
    bgr = dv_decode(data).astype(np.float64)
    corrected = np.clip(np.round(255.0 * (bgr / 255.0) ** (1 / 1.8)), 0, 255)
    assert np.abs(batch.images[0] - _expected(corrected.astype(np.uint8))).max() < tol("float_path").atol
    # the single-op kernel is used when the fused run does not apply (no pad)
    pipe2 = dv.Pipeline(rig, [dv.Decode(), mod.Gamma(1.8), dv.Normalise(**TINY)])
    assert [s.name for s in pipe2.plan.cameras[0].steps] == ["decode", "gamma", "normalise+batch"]
    with pytest.raises(dv.ConfigError, match="before Normalise"):
        dv.Pipeline(rig, [dv.Decode(), dv.Normalise(**TINY), mod.Gamma(1.8)])


def test_import_dvpipe_imports_no_heavy_optional_stack():
    import subprocess

    code = "import sys, dvpipe; print(sorted(m for m in ('torch', 'torch_npu', 'acl') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_detour_replaces_stages_and_geometry_follows():
    """A kernel that only takes even heights says so with a detour (crop the last row, then run);
    the planner substitutes the stages, and img_aug / lidar2img follow the crop's geometry."""
    def needs_even(q):
        h = q.spec_in.height
        if h % 2 == 0:
            return dv.KernelVerdict.yes()
        return dv.KernelVerdict.yes("odd height", detour="drops the last row; principal point unchanged",
                                    replace=(dv.Crop(left=0, top=0, width=q.spec_in.width, height=h - 1), q.stages[0]))

    @dv.register_kernel("normalise", backend="evenonly", supports=needs_even, replace=True)
    def _even_normalise(data, stages, ctx):
        crop, norm = stages if len(stages) == 2 else (None, stages[0])
        if crop is not None:
            data = data[crop.top:crop.top + crop.height, crop.left:crop.left + crop.width]
        assert data.shape[0] % 2 == 0
        x = data[..., ::-1].astype(np.float32) if norm.to_rgb else data.astype(np.float32)
        return (x - np.float32(norm.mean)) / np.float32(norm.std)

    rig = dv.Rig.from_dict(rig_dict([(64, 47)]))
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Normalise(**TINY), dv.Resize(scale=0.5), dv.Pad(size_divisor=32)],
                       backends=("evenonly", "cpu"))
    cp = pipe.plan.cameras[0]
    assert [(s.name, s.backend.name) for s in cp.steps] == [
        ("decode", "cpu"), ("crop+normalise", "evenonly"), ("resize", "cpu"), ("pad", "cpu"), ("batch", "cpu")]
    assert "detour: drops the last row" in str(pipe.plan)
    # the crop keeps 46 rows and moves nothing; resize 64x46 -> 32x23 is then exactly x0.5
    assert cp.prepad_size == (23, 32)
    assert np.allclose(cp.img_aug, np.diag([0.5, 0.5, 1]))
    data = encode_jpeg(textured_bgr(64, 47))
    batch = pipe.process({"CAM0": data})
    assert batch.valid.all(), batch.drops
    import cv2
    x = imnormalize(dv_decode(data)[:46].astype(np.float32), TINY["mean"], TINY["std"], True)
    ref = np.zeros((32, 32, 3), np.float32)
    ref[:23] = cv2.resize(x, (32, 23), interpolation=cv2.INTER_LINEAR)
    assert np.abs(batch.images[0] - ref.transpose(2, 0, 1)).max() < tol("float_path").atol


def test_counters_only_timing_keeps_step_totals():
    rig, spans = _pipe()
    _, counters = _pipe(timing="counters")
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    a, b = spans.process(frames), counters.process(frames)
    assert set(a.step_ms()) == set(b.step_ms()) == {"decode", "normalise+pad+batch"}
    assert b.timings == [] and all(v > 0 for v in b.step_ms().values())
    assert np.array_equal(a.images, b.images)
    with pytest.raises(dv.ConfigError, match="spans"):
        _pipe(timing="none")


def test_metas_arrays_are_shared_read_only():
    rig, pipe = _pipe()
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    m = pipe.process(frames).metas[0]
    with pytest.raises(ValueError, match="read-only"):
        m["lidar2img"][0, 0] = 0.0
    m["note"] = "a key of one batch"  # the dicts are per batch
    assert "note" not in pipe.process(frames).metas[0]


def test_pipeline_latency_report_includes_a_model_timed_on_the_batch():
    """The ARCHITECTURE interface: time the model on batch.timeline, then print(pipe.latency.report())."""
    import time

    rig, pipe = _pipe()
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    for _ in range(5):
        batch = pipe.process(frames)
        batch.timeline.time("model", time.sleep, 0.01)
    stats = pipe.latency
    assert stats.batches == 5 and stats.step("model").count == 5
    assert stats.step("decode").count == 15
    # the model is inside end to end (a relation between two stamps, not a wall-clock figure)
    for tl in stats.timelines:
        (model,) = tl.spans_for("model")
        rec = type(stats)().add(tl)  # this timeline's own record: end to end from its arrival
        assert tl.arrival_ns <= model.start_ns and model.end_ns <= tl.arrival_ns + rec.arrival_to_output_ns
    assert "model" in stats.report()


@pytest.mark.parametrize("device", ["torch:cuda", "torch:npu", "torch:cuda:7"])
def test_a_batch_device_this_machine_lacks_is_refused_when_planned(device):
    """Batch(device=...) names where the batch goes: a device the torch backend's own availability check refuses
    here (CPU-only torch, no torch_npu) is a one-line ConfigError at construction, with that check's reason; it was
    accepted, then every batch failed in torch ('Torch not compiled with CUDA enabled', 'Expected one of cpu, cuda,
    ... device type at start of device string: npu')."""
    pytest.importorskip("torch")
    from dvpipe.backends import availability, resolve

    why = availability(resolve(device))
    if why.ok:
        pytest.skip(f"{device} is available here")
    rig = dv.Rig.from_dict(rig_dict([(64, 48)], encoding="raw"))
    with pytest.raises(dv.ConfigError) as e:
        dv.Pipeline(rig, [dv.Decode(), dv.Normalise(), dv.Batch(device=device)], backends=("cpu",))
    assert str(e.value) == f"Batch(device={device!r}): {why.reason}" and "\n" not in str(e.value)


def test_a_frame_path_that_is_no_regular_file_is_a_frame_error_not_a_hang(tmp_path):
    """Pipeline.process with a path: a FIFO blocked open() for a writer forever, /dev/zero was read without end and a
    NUL in the path was a bare ValueError; each is now a FrameError naming the path (the frame's drop)."""
    import os

    from dvpipe.codecs import read_frame_bytes
    from dvpipe.errors import FrameError

    fifo = tmp_path / "f.jpg"
    os.mkfifo(fifo)
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(err=pytest.raises(FrameError, read_frame_bytes, fifo)),
                         daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive() and "not a regular file" in str(box["err"].value)
    for path, why in (("/dev/zero", "not a regular file"), (str(tmp_path / "a\0b.jpg"), "null byte"),
                      (str(tmp_path), "Is a directory")):
        with pytest.raises(FrameError, match=why):
            read_frame_bytes(path)
