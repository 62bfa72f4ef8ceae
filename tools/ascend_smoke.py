#!/usr/bin/env python3
"""Smoke test of the DVPP backend and the model runner on an Ascend device: run each kernel on the sample frames,
compare with the CPU backend, run an offline model with static and dynamic AIPP, time each step, fill the empirical
capability cache, print a report to attach to a bug.

Usage (on the Ascend machine, after ``source <CANN install>/set_env.sh``; docs/dvpp.md "First day on a device")::

    python tools/ascend_smoke.py --write-aipp-cfg smoke-aipp.cfg      # the model check's static AIPP, for atc
    python tools/ascend_smoke.py --om-static id_static.om --om-dynamic id_dynamic.om
    python tools/ascend_smoke.py ... --json smoke.json                 # also write the report as JSON
    python tools/ascend_smoke.py ... --no-cache                        # do not touch the empirical cache

Without a device (a laptop, CI) the same checks run against the software DVPP device, its models being
numpy functions (CI runs this default mode on every CI target, tests/backends/dvpp/test_ascend_smoke.py)::

    python tools/ascend_smoke.py --sim Ascend310 6.0.1
    python tools/ascend_smoke.py --sim Ascend310 6.0.1 --inject-fault vdec   # must exit 1 (also jpegd, vpc, mdl)

What it runs, in order. First ``dvpipe.probe.live.run_live`` records each DVPP step's outcome in the empirical
cache (``~/.cache/dvpipe/dvpp-live.json``, saved on a device) that the checks below then plan with, as
``dvpipe run`` does: a step the documentation leaves ``unknown`` and the device ran is planned on DVPP in the
same run. Then per check: the plan (where each step runs and why), the run on the bundled samples
(``samples/``) and on KITTI-sized synthetic frames (1242x375: the odd-height detour; the pure decode is
declined by dvpipe's policy, JPEGD's documented floor would change the image, which is not a failure), the
error against the CPU backend with the bounds of the tolerance table (``dvpipe.backends.dvpp.TOLERANCES``),
the time per step (host span, p50 over the frames) and the runtime fallbacks; the per-frame VDEC kernel in a
pipeline on H.264 streams with and without B-frames (frames as a video source emits them, matched by the
reordering decoder) and on plain access units (one picture per unit); a whole-stream VDEC decode.
The device-resident AIPP route (:func:`check_aipp_route`): JPEGD + VPC writing NV12 into the per-batch
device buffer, no device -> host bytes before the model, host -> device bytes = the JPEG bytes, and the
AIPP'd batch against the CPU reference within the tolerance table. The model (:func:`check_model`): an
offline model loaded and executed through ``OmModel`` with static and with dynamic AIPP on a 6-camera
pitched NV12 batch (the AIPP route's layout), every camera's model input against a float reference, then
torn down and the ledger checked. Finally everything is torn down and checked for leaks (the software
device's ledger; on a device the buffer pool and the runtimes still held).

A check FAILS on: an error; a drop; any runtime fallback (a DVPP step that fell back to the CPU on a
frame); a step DVPP implements that was planned elsewhere without a documented rejection (a verdict
with no rule, or on a device an ``unknown`` that the live verification did not settle); a deviation
beyond the tolerance table; a camera's model input beyond its bound, or static and dynamic AIPP
disagreeing; a live-probe step that FAILED; a leak after teardown.

Exit status: 0 when nothing failed, 1 otherwise, 2 when the device cannot be used (the reason is
printed). The JSON report (``--json PATH``, default ``dvpp-smoke-report.json``) is written in every case.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import dvpipe as dv  # noqa: E402
from dvpipe.backends.dvpp import TOLERANCES, StepRefused, _acl, pool_for  # noqa: E402
from dvpipe.testing.dvpp import (encode_jpeg, error_stats, h264_stream, kitti_rig,  # noqa: E402
                                          pyav_display_order, sample_frame_sets, synthetic_bgr, tolerance_violations,
                                          video_packets)
from dvpipe.probe import detect_target  # noqa: E402

_OPEN: list = []  # every pipeline the checks made (closed and checked for leaks at the end)


def _close(pipe: Any) -> None:
    """Close a pipeline and the DVPP state of its steps (the backend's teardown hook)."""
    from dvpipe.backends.dvpp import close_states

    pipe.close()
    close_states(getattr(pipe, "_states", {}).values())


def _planned_elsewhere(first: Any, backend: str, on_device: bool) -> Optional[str]:
    """Why the first step off DVPP is a failure (None when a documented rejection explains it)."""
    if first.backend.name == backend:
        return None
    v = next((v for b, v in first.verdicts if b == backend), None)
    if v is None:
        return f"step {first.name} planned on {first.backend.name}: DVPP was not asked"
    # "declined": dvpipe's policy on a documented effect (e.g. JPEGD flooring an odd height would change the
    # batch image), with the rule that documents it
    if v.status not in ("rejected", "unknown", "declined") or not v.rule:
        return f"step {first.name} planned on {first.backend.name} without a documented rejection ({v.status}: {v.reason})"
    if on_device and v.status == "unknown":
        return (f"step {first.name} planned on {first.backend.name}: the documentation leaves it open ({v.rule}) and "
                "the live verification on this device did not settle it")
    return None


def _step_ms(batches: list, step: str) -> Optional[float]:
    times = [s.duration_ns / 1e6 for b in batches for s in b.timeline.spans if s.name == step and s.kind == "host"]
    return round(statistics.median(times), 3) if times else None


def _device_ms(batches: list) -> Optional[float]:
    times = [s.duration_ns / 1e6 for b in batches for s in b.timeline.spans if s.kind == "device"]
    return round(statistics.median(times), 3) if times else None


_LIVE: list = []  # the live cache filled before the checks (the plans below read it, as `dvpipe run` does)


def _live() -> Any:
    return _LIVE[0] if _LIVE else None


def check_pipeline(name: str, rig: Any, frame_sets: list, stages: Any, backend: str, target: Any,
                   tolerance: Optional[tuple], profile: Optional[str] = None) -> dict:
    """Run ``stages`` (or ``profile``) on DVPP and on the CPU; compare, time, count fallbacks."""
    kw = dict(backends=(backend, "cpu"), target=target, fidelity="fast", live_cache=_live())
    if profile:
        dvpp = dv.Pipeline.from_profile(profile, rig, **kw)
        cpu = dv.Pipeline.from_profile(profile, rig, backends=("cpu",), fidelity="reference")
    else:
        dvpp = dv.Pipeline(rig, stages, **kw)
        planned = [st for s in dvpp.plan.cameras[0].steps for st in s.stages if st.op != "batch"]
        cpu = dv.Pipeline(rig, [dv.Decode()] + planned[1:], backends=("cpu",))
    _OPEN.extend((dvpp, cpu))
    first = dvpp.plan.cameras[0].steps[0]
    dv_verdict = next((v for b, v in first.verdicts if b == backend), None)
    rec: dict = {"check": name, "plan": str(dvpp.plan), "runs_on": first.backend.name, "step": first.name,
                 "verdict": None if dv_verdict is None else dv_verdict.to_dict(), "errors": [], "fallbacks": [],
                 "planned_with_live_cache": _live() is not None}
    why = _planned_elsewhere(first, backend, backend == "dvpp")
    if why:
        rec["errors"].append(why)
    batches, stats = [], []
    t0 = time.perf_counter()
    try:
        for frames in frame_sets:
            a = dvpp.process(frames)
            b = cpu.process(frames)
            batches.append(a)
            rec["fallbacks"] += [list(f) for f in a.fallbacks]
            rec["errors"] += [f"drop {c}: {r}" for c, r in a.drops]
            ok = a.valid & b.valid
            if ok.any():
                stats.append(error_stats(a.images[ok], b.images[ok]))
    except Exception as e:  # noqa: BLE001 - the report says what broke
        rec["errors"].append(f"{type(e).__name__}: {e}")
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    rec["step_ms_p50"] = _step_ms(batches, first.name)
    rec["device_ms_p50"] = _device_ms(batches)
    if stats:
        rec["error"] = {k: max(s[k] for s in stats) for k in stats[0]}
        if tolerance is not None:
            rec["tolerance"] = TOLERANCES[tolerance]
            rec["beyond_tolerance"] = tolerance_violations(rec["error"], TOLERANCES[tolerance])
    return rec


def check_aipp_route(rig: Any, frame_sets: list, backend: str, target: Any) -> dict:
    """The device-resident route: JPEGD + VPC write NV12 into the per-batch device buffer, the model's AIPP
    normalises. Checks: every camera on the AIPP route; host -> device bytes = the JPEG bytes and device ->
    host bytes = 0 per frame set (no download until the model's outputs); the AIPP'd batch (the buffer
    downloaded once here, then AIPP's documented arithmetic, ``dvpipe.backends.dvpp.aipp.apply_aipp``) vs
    the CPU reference within ``TOLERANCES[("aipp", "samples")]``; on the software device also the batch itself
    through ``OmModel`` with static and with dynamic AIPP, every camera equal to AIPP of the same pictures (on a
    device :func:`check_model` runs the models). Not run on a device yet."""
    from dvpipe.backends.dvpp.aipp import apply_aipp

    aipp = "aipp" if backend == "dvpp" else "aipp-sim"
    rec: dict = {"check": "aipp route: decode+resize into the NV12 batch buffer, AIPP normalise+pad (samples)",
                 "errors": [], "fallbacks": []}
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=(backend, aipp, "cpu"), target=target,
                                    fidelity="fast", live_cache=_live())
    cpu = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=("cpu",), fidelity="reference")
    _OPEN.extend((pipe, cpu))
    routes = {cp.camera.name: cp.route for cp in pipe.plan.cameras}
    first = pipe.plan.cameras[0].steps[0]
    rec.update(plan=str(pipe.plan), runs_on=first.backend.name, step=first.name,
               verdict=next((v.to_dict() for b, v in first.verdicts if b == backend), None), routes=routes)
    if first.backend.name != backend:
        why = _planned_elsewhere(first, backend, backend == "dvpp")
        if why:
            rec["errors"].append(why)
        rec["note"] = "DVPP does not decode these cameras on this target: the AIPP route does not apply"
        return rec
    if set(routes.values()) != {"aipp"}:
        last = pipe.plan.cameras[0].steps[-1]
        rec["errors"].append(f"cameras not on the AIPP route: {routes} ({dict(last.verdicts).get(aipp)})")
        return rec
    stats, moved = [], []
    t0 = time.perf_counter()
    try:
        for frames in frame_sets:
            a = pipe.process(frames)
            rec["fallbacks"] += [list(f) for f in a.fallbacks]
            rec["errors"] += [f"drop {c}: {r}" for c, r in a.drops]
            m = a.timeline.transfer_bytes()
            moved.append(m)
            jpeg = sum(len(v) for v in frames.values())
            if m["device_to_host"] != 0:
                rec["errors"].append(f"{m['device_to_host']} bytes device -> host before the model (expected 0)")
            if m["host_to_device"] != jpeg:
                rec["errors"].append(f"{m['host_to_device']} bytes host -> device, the JPEG frames are {jpeg}")
            cfg = a.images.meta["aipp"]
            through = _through_models(a.images, cfg, backend, target) if backend == "dvpp-sim" else None
            host = apply_aipp(cfg, a.keep().images)
            if through is not None:
                for mode, out in through.items():
                    bad = [i for i in range(len(host)) if not np.array_equal(out[i], host[i])]
                    if bad:
                        rec["errors"].append(f"OmModel with {mode} AIPP on the route's batch: camera(s) {bad} differ "
                                             "from AIPP of the same pictures")
                rec["models"] = sorted(through)
            got = host.astype(np.float32)
            ref = cpu.process(frames).images
            stats.append(error_stats(got, ref))
    except Exception as e:  # noqa: BLE001 - the report says what broke
        rec["errors"].append(f"{type(e).__name__}: {e}")
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    rec["transfers"] = moved[-1] if moved else None
    if stats:
        rec["error"] = {k: max(s[k] for s in stats) for k in stats[0]}
        rec["tolerance"] = TOLERANCES[("aipp", "samples")]
        rec["beyond_tolerance"] = tolerance_violations(rec["error"], TOLERANCES[("aipp", "samples")])
    return rec


def _through_models(images: Any, cfg: Any, backend: str, target: Any) -> dict:
    """The route's own batch (an NV12 DeviceTensor, pictures ``slot_pitch`` apart) through identity models on the
    software device with static and with dynamic AIPP: ``{mode: output}``, each the model input AIPP wrote."""
    from dvpipe.latency.timeline import Timeline
    from dvpipe.models import OmModel, sim_model

    n = images.shape[0]
    oh, ow = cfg.output_hw
    shape = [((n, 3, oh, ow), "float16")]
    per = cfg.src_image_size_w * cfg.src_image_size_h * 3 // 2
    keys = {"static": (sim_model(lambda x: x, inputs=shape, outputs=shape, aipp=cfg, name="route-static"), {}),
            "dynamic": (sim_model(lambda x: x, inputs=shape, outputs=shape, aipp="dynamic",
                                  max_src_image_size=2 * n * per, name="route-dynamic"), {"aipp": cfg})}
    out = {}
    for mode, (key, kw) in keys.items():
        with OmModel(key, backend=backend, target=target, name=f"route-{mode}", **kw) as m:
            (out[mode],) = m(images, timeline=Timeline())
    return out


#: the model check's camera picture (width, height), its NV12 stride and the model input after AIPP's pad
MODEL_PICTURE = (398, 224)
MODEL_STRIDE = (400, 224)
MODEL_INPUT_HW = (256, 416)
MODEL_NORM = ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375))  # RGB, 0..255 units (ImageNet)


def model_aipp_config() -> Any:
    """The static aipp_op of the model check (write it with ``--write-aipp-cfg`` for ``atc --insert_op_conf``):
    NV12 (JPEG full range) at stride 400x224, crop the 398x224 picture, RGB, ImageNet mean/std, pad to 416x256."""
    from dvpipe.backends.dvpp.aipp import aipp_for

    (w, h), (ws, hs) = MODEL_PICTURE, MODEL_STRIDE
    return aipp_for(*MODEL_NORM, channel_order="rgb", colour_standard="jpeg_full", src_size=(hs, ws),
                    content_size=(h, w), out_size=MODEL_INPUT_HW)


def _nv12_jfif(bgr: np.ndarray, ws: int, hs: int) -> np.ndarray:
    """BGR uint8 -> NV12 at stride ``ws x hs`` (JFIF full-range BT.601, T.871 coefficients, 2x2-mean chroma)."""
    b, g, r = (bgr[..., i].astype(np.float64) for i in range(3))
    y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = 128 - 0.168736 * r - 0.331264 * g + 0.5 * b
    cr = 128 + 0.5 * r - 0.418688 * g - 0.081312 * b
    h, w = y.shape
    out = np.zeros((hs * 3 // 2, ws), np.uint8)
    out[:h, :w] = np.clip(np.rint(y), 0, 255)
    for k, c in enumerate((cb, cr)):
        out[hs:hs + h // 2, k:w:2] = np.clip(np.rint(c.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))), 0, 255)
    return out


def _reference_input(nv12: np.ndarray, w: int, h: int, hs: int) -> np.ndarray:
    """What AIPP should hand the model for one picture: NV12 decoded in float (T.871 inverse, each chroma sample
    serving its 2x2 block), RGB, (x - mean) / std, zero padding to MODEL_INPUT_HW -> (3, H, W) float64."""
    y = nv12[:h, :w].astype(np.float64)
    uv = nv12[hs:hs + h // 2, :w].reshape(h // 2, w // 2, 2).astype(np.float64)
    u = np.repeat(np.repeat(uv[..., 0], 2, 0), 2, 1) - 128
    v = np.repeat(np.repeat(uv[..., 1], 2, 0), 2, 1) - 128
    rgb = np.clip(np.stack([y + 1.402 * v, y - 0.344136 * u - 0.714136 * v, y + 1.772 * u]), 0, 255)
    mean, std = (np.array(m)[:, None, None] for m in MODEL_NORM)
    out = np.zeros((3, *MODEL_INPUT_HW))
    out[:, :h, :w] = (rgb - mean) / std
    return out


def check_model(rig: Any, frame_sets: list, backend: str, target: Any, om: dict) -> dict:
    """An offline model through ``OmModel`` on an N-camera pitched batch, with static and with dynamic AIPP.

    The batch is the AIPP route's layout (:class:`dvpipe.device.DeviceBatch`: N NV12 pictures in one DVPP
    allocation, ``slot_pitch`` bytes apart), each camera's sample picture (resized on the host to 398x224,
    NV12 at stride 400x224) uploaded into its slot. The model returns its input, so its output IS the model
    input AIPP wrote: every camera's is compared with a float decode of the same NV12 (T.871, ImageNet
    normalisation, zero padding), bound 2/57.12 + 0.004 per element (AIPP's 8-bit CSC truncation and fp16).
    Static and dynamic outputs must agree exactly. After ``close()`` nothing the model made may stay alive.
    On the software device the models are numpy functions (``dvpipe.models.sim_model``); on a device they are
    identity ``.om`` files converted with ``--write-aipp-cfg``'s aipp.cfg (static) and with ``aipp_mode:
    dynamic`` (``--om-static``/``--om-dynamic``, docs/dvpp.md "First day on a device")."""
    import cv2

    from dvpipe.device import DeviceBatch
    from dvpipe.models import OmModel, sim_model

    rec: dict = {"check": "model: OmModel static + dynamic AIPP on a pitched N-camera NV12 batch", "errors": []}
    n = len(rig.cameras)
    (w, h), (ws, hs) = MODEL_PICTURE, MODEL_STRIDE
    oh, ow = MODEL_INPUT_HW
    cfg = model_aipp_config()
    sim = backend == "dvpp-sim"
    if sim:
        shape = [((n, 3, oh, ow), "float16")]
        paths = {"static": sim_model(lambda x: x, inputs=shape, outputs=shape, aipp=cfg, name="smoke-static"),
                 # max_src_image_size above the batch's bytes, as for a model converted for larger pictures:
                 # the case where pictures bound at the wrong offsets would be read without an error
                 "dynamic": sim_model(lambda x: x, inputs=shape, outputs=shape, aipp="dynamic",
                                      max_src_image_size=2 * n * ws * hs * 3 // 2, name="smoke-dynamic")}
    else:
        paths = {k: om.get(k) for k in ("static", "dynamic")}
        missing = [k for k, v in paths.items() if not v]
        if missing:
            rec["errors"].append(f"no {' / '.join(missing)} model: give --om-static / --om-dynamic (identity models "
                                 "converted as docs/dvpp.md 'First day on a device' says)")
            return rec
    pictures = []
    for c in rig.cameras:
        bgr = cv2.imdecode(np.frombuffer(frame_sets[0][c.name], np.uint8), cv2.IMREAD_COLOR)
        pictures.append(_nv12_jfif(cv2.resize(bgr, (w, h), interpolation=cv2.INTER_AREA), ws, hs))
    refs = [_reference_input(p, w, h, hs) for p in pictures]
    outs: dict = {}
    batch = models = None
    t0 = time.perf_counter()
    try:
        rt = _acl.runtime("hw" if not sim else "sim", target)
        batch = DeviceBatch(rt, n, w, h, (ws, hs), rt.name, {"aipp": cfg, "colour_standard": "jpeg_full"})
        for i, p in enumerate(pictures):
            rt.upload(batch[i].ptr, batch[i].nbytes, p.tobytes(), step="smoke model batch")
        rec["layout"] = {"cameras": n, "picture": f"{w}x{h}", "stride": f"{ws}x{hs}", "slot_bytes": batch.slot_bytes,
                         "slot_pitch": batch.pitch}
        for mode in ("static", "dynamic"):
            kw = {"aipp": cfg} if mode == "dynamic" else {}
            with OmModel(paths[mode], backend=backend, target=target, name=f"smoke-{mode}", **kw) as m:
                models = m
                (outs[mode],) = m(batch.tensor)
            models = None
    except Exception as e:  # noqa: BLE001 - the report says what broke
        rec["errors"].append(f"{type(e).__name__}: {e}")
    finally:
        if models is not None:
            models.close()
        if batch is not None:
            batch.close()
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    bound = 2 / min(MODEL_NORM[1]) + 0.004
    worst: dict = {}
    for mode, got in outs.items():
        if got.shape != (n, 3, oh, ow):
            rec["errors"].append(f"{mode}: the model returned {got.shape}, expected {(n, 3, oh, ow)}")
            continue
        errs = [float(np.abs(got[i].astype(np.float64) - refs[i]).max()) for i in range(n)]
        worst[mode] = [round(e, 4) for e in errs]
        rec["errors"] += [f"{mode} AIPP: camera {i} ({rig.cameras[i].name}) model input differs from the reference "
                          f"by {e:.3g} (bound {bound:.3g})" for i, e in enumerate(errs) if e > bound]
    if len(outs) == 2 and not np.array_equal(outs["static"], outs["dynamic"]):
        rec["errors"].append("static and dynamic AIPP gave different model inputs for the same batch and parameters")
    rec["max_abs_per_camera"] = worst
    if sim:
        from dvpipe.backends.dvpp import sim as simdev

        left = {k: v for k, v in simdev.ledger().items() if v and k in ("models", "model_descs", "datasets",
                                                                         "data_buffers", "aipp_sets")}
        if left:
            rec["errors"].append(f"after OmModel.close(): left alive {left}")
    return rec


def check_vdec_kernel(name: str, backend: str, target: Any, bframes: int, packets: bool) -> dict:
    """The per-frame VDEC kernel in a pipeline: frames as a video source emits them (``packets``: presentation
    order, matched by the reordering decoder, output mode 0) or plain access units (one picture per unit,
    output mode 1); each frame against FFmpeg's own decode of the same place (PyAV, display order)."""
    rec: dict = {"check": name, "errors": [], "fallbacks": []}
    try:
        base = synthetic_bgr(320, 240, seed=4)
        data = h264_stream([np.roll(base, 6 * i, axis=1) for i in range(10)], bframes=bframes, gop=5)
        ref = pyav_display_order(data)
        if packets:
            frames = video_packets(data)
        else:
            from dvpipe.backends.dvpp.vdec import access_units

            frames = [au for au, _pts in access_units(data)[4]]
        rig = dv.Rig((dv.Camera("V", width=320, height=240, encoding="h264"),))
        pipe = dv.Pipeline(rig, [dv.Decode()], backends=(backend, "cpu"), target=target, fidelity="fast",
                           live_cache=_live())
        _OPEN.append(pipe)
        first = pipe.plan.cameras[0].steps[0]
        rec.update(runs_on=first.backend.name, step=first.name)
        why = _planned_elsewhere(first, backend, backend == "dvpp")
        if why:
            rec["errors"].append(why)
        stats, t0, n = [], time.perf_counter(), 0
        for k, f in enumerate(frames):
            b = pipe.process({"V": f})
            rec["fallbacks"] += [list(x) for x in b.fallbacks]
            rec["errors"] += [f"drop frame {k}: {r}" for _c, r in b.drops]
            if b.valid.all() and k < len(ref):
                stats.append(error_stats(np.asarray(b.images[0]).transpose(1, 2, 0), ref[k]))
                n += 1
        rec["ms_per_frame"] = round((time.perf_counter() - t0) * 1e3 / max(1, len(frames)), 3)
        rec["frames"] = f"{n}/{len(ref)}"
        if stats:
            rec["error"] = {k: max(s[k] for s in stats) for k in stats[0]}
            rec["tolerance"] = TOLERANCES[("vdec", "synthetic")]
            rec["beyond_tolerance"] = tolerance_violations(rec["error"], rec["tolerance"])
    except Exception as e:  # noqa: BLE001
        rec["errors"].append(f"{type(e).__name__}: {e}")
    return rec


def check_vdec(backend: str, target: Any) -> dict:
    from dvpipe.backends.dvpp.vdec import decode_stream

    rec: dict = {"check": "vdec h264 320x240 (B-frames)", "errors": []}
    try:
        import io

        import av

        base = synthetic_bgr(320, 240, seed=4)
        data = h264_stream([np.roll(base, 6 * i, axis=1) for i in range(10)], bframes=2)
        t0 = time.perf_counter()
        out = list(decode_stream(data, target, device="hw" if backend == "dvpp" else "sim"))
        rec["ms_per_frame"] = round((time.perf_counter() - t0) * 1e3 / max(1, len(out)), 3)
        with av.open(io.BytesIO(data), format="h264") as c:
            ref = [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]
        rec["frames"] = f"{len(out)}/{len(ref)}"
        if out:
            stats = [error_stats(a.image, b) for a, b in zip(out, ref)]
            rec["error"] = {k: max(s[k] for s in stats) for k in stats[0]}
            rec["tolerance"] = TOLERANCES[("vdec", "synthetic")]
            rec["beyond_tolerance"] = tolerance_violations(rec["error"], rec["tolerance"])
        if len(out) != len(ref):
            rec["errors"].append(f"decoded {len(out)} of {len(ref)} pictures")
    except StepRefused as e:  # a documented refusal for this target (rule and source in the reason)
        if "[rule " in e.reason:
            rec["skipped"] = e.reason
        else:
            rec["errors"].append(f"StepRefused: {e.reason}")
    except Exception as e:  # noqa: BLE001
        rec["errors"].append(f"{type(e).__name__}: {e}")
    return rec


def fill_cache(rigs: list, target: Any, backend: str, path: Optional[str]) -> dict:
    try:
        from dvpipe.probe.live import LiveCache, run_live
    except ImportError as e:
        return {"error": f"dvpipe.probe.live is not available ({e})"}
    cache = LiveCache.load(path)
    _LIVE[:] = [cache]
    results = []
    for rig in rigs:
        try:
            results += run_live(list(rig.cameras), target, cache, backend=backend)
        except Exception as e:  # noqa: BLE001
            results.append({"camera": rig.name, "ok": False, "error": f"{type(e).__name__}: {e}"})
    if backend == "dvpp":
        cache.save()
    return {"path": cache.path, "saved": backend == "dvpp", "steps": [
        {k: r.get(k) for k in ("camera", "kernel", "ok", "error", "ms", "documented")} for r in results]}


def teardown(backend: str, target: Any) -> dict:
    """Close every pipeline the checks made, then check that nothing is left alive."""
    rec: dict = {"check": "teardown: every ACL object released", "errors": []}
    for pipe in _OPEN:
        try:
            _close(pipe)
        except Exception as e:  # noqa: BLE001
            rec["errors"].append(f"closing a pipeline: {type(e).__name__}: {e}")
    _OPEN.clear()
    import gc

    gc.collect()
    if backend == "dvpp-sim":
        from dvpipe.backends.dvpp import sim

        held = _acl.close_idle()
        live = {k: v for k, v in sim.ledger().items() if v}
        rec["ledger"] = sim.ledger()
        if held or live:
            rec["errors"].append(f"left alive after teardown: runtimes held {held}, ledger {live}")
    else:
        try:
            rt = _acl.runtime("hw", target)
            st = pool_for(rt).stats()
            rec["pool"] = {"in_use": st.in_use, "allocations": st.allocations, "frees": st.frees}
            if rt.holders or st.in_use:
                rec["errors"].append(f"left alive after teardown: {rt.holders} step state(s) hold the runtime, "
                                     f"{st.in_use} DVPP buffer(s) in use")
        except Exception as e:  # noqa: BLE001
            rec["errors"].append(f"{type(e).__name__}: {e}")
    return rec


def failures(report: dict) -> list[str]:
    """Every reason the smoke test fails, in words (empty: it passes)."""
    out = []
    for c in report["checks"]:
        for e in c.get("errors") or []:
            out.append(f"{c['check']}: {e}")
        for f in c.get("fallbacks") or []:
            out.append(f"{c['check']}: runtime fallback {f}")
        for b in c.get("beyond_tolerance") or []:
            out.append(f"{c['check']}: beyond tolerance: {b}")
    cache = report.get("cache") or {}
    if cache.get("error"):
        out.append(f"live probe: {cache['error']}")
    for s in cache.get("steps", []):
        if not s.get("ok"):
            out.append(f"live probe: {s.get('camera')} {s.get('kernel')} FAILED ({s.get('error')})")
    return out


def render(report: dict) -> str:
    lines = [f"dvpipe DVPP smoke test: {report['target']} on {report['device']}",
             f"  dvpipe {report['dvpipe']}, python {report['python']}, {report['platform']}",
             f"  driver: {report.get('driver') or 'unknown'}", ""]
    for c in report["checks"]:
        bad = c.get("errors") or c.get("beyond_tolerance") or c.get("fallbacks")
        lines.append(f"[{'FAIL' if bad else 'ok'}] {c['check']}")
        if "runs_on" in c:
            lines.append(f"    first step {c['step']} on {c['runs_on']}"
                         + (f" ({c['verdict']['status']}: {c['verdict']['reason']})" if c.get("verdict") else ""))
        if "error" in c:
            e = c["error"]
            lines.append(f"    |dvpp - cpu|: mean {e['mean_abs']:.4g}, p99.9 {e['p999_abs']:.4g}, max {e['max_abs']:.4g}"
                         + (f"  (bounds {c['tolerance']})" if "tolerance" in c else ""))
        if c.get("transfers"):
            t = c["transfers"]
            lines.append(f"    bytes per set: host->device {t['host_to_device']}, device->host {t['device_to_host']}, "
                         f"device->device {t['device_to_device']}")
        if c.get("note"):
            lines.append(f"    note: {c['note']}")
        for k in ("step_ms_p50", "device_ms_p50", "ms_per_frame", "frames", "seconds"):
            if c.get(k) is not None:
                lines.append(f"    {k}: {c[k]}")
        for f in c.get("fallbacks", [])[:5]:
            lines.append(f"    fallback: {f}")
        for e in c.get("errors", [])[:5]:
            lines.append(f"    error: {e}")
        if c.get("skipped"):
            lines.append(f"    skipped (documented): {c['skipped']}")
        for b in c.get("beyond_tolerance", []) or []:
            lines.append(f"    beyond tolerance: {b}")
    cache = report.get("cache")
    if cache:
        lines.append("")
        lines.append(f"empirical cache: {cache.get('path')} ({'saved' if cache.get('saved') else 'not saved'})"
                     if "path" in cache else f"empirical cache: {cache.get('error')}")
        for s in cache.get("steps", []):
            lines.append(f"    {s.get('camera')}: {s.get('kernel')} {'ok' if s.get('ok') else 'FAILED'}"
                         + (f" ({s.get('error')})" if s.get("error") else "") + f", documented {s.get('documented')}")
    if report.get("pool"):
        lines.append(f"buffer pool: {report['pool']}")
    lines.append("")
    fails = report.get("failures") or []
    lines.append(f"RESULT: {'FAIL' if fails else 'ok'}" + (f" ({len(fails)} failure(s))" if fails else ""))
    for f in fails[:20]:
        lines.append(f"    {f}")
    if report.get("device") == "dvpp-sim":
        lines.append("(software DVPP device: this checks the backend against the documentation, not a device)")
    return "\n".join(lines)


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sim", nargs=2, metavar=("SOC", "CANN"), help="use the software DVPP device for this target")
    ap.add_argument("--frames", type=int, default=2, help="sample frame sets per check (default 2)")
    ap.add_argument("--json", metavar="PATH", default="dvpp-smoke-report.json",
                    help="write the report as JSON here (default dvpp-smoke-report.json)")
    ap.add_argument("--inject-fault", choices=("jpegd", "vpc", "vdec", "mdl"), metavar="UNIT",
                    help="with --sim: every call of this unit (jpegd, vpc, vdec, or mdl: the model API) fails on the "
                         "software device (the smoke test must then exit 1)")
    ap.add_argument("--om-static", metavar="PATH", help="on a device: the identity model converted with the model "
                                                         "check's static aipp.cfg (--write-aipp-cfg)")
    ap.add_argument("--om-dynamic", metavar="PATH", help="on a device: the same identity model converted with "
                                                          "aipp_mode: dynamic")
    ap.add_argument("--write-aipp-cfg", metavar="PATH", help="write the model check's static aipp.cfg and exit")
    ap.add_argument("--quick", action="store_true", help="skip the bevformer-tiny batch and the KITTI checks")
    ap.add_argument("--cache", metavar="PATH", help="empirical cache file (default ~/.cache/dvpipe/dvpp-live.json)")
    ap.add_argument("--no-cache", action="store_true", help="do not run the live probe / touch the cache")
    args = ap.parse_args(argv)
    if args.write_aipp_cfg:
        cfg = model_aipp_config()
        Path(args.write_aipp_cfg).write_text(cfg.to_cfg())
        dyn = cfg.replace(aipp_mode="dynamic", max_src_image_size=6 * MODEL_STRIDE[0] * MODEL_STRIDE[1] * 3 // 2)
        print(f"wrote {args.write_aipp_cfg}: model input (6, 3, {MODEL_INPUT_HW[0]}, {MODEL_INPUT_HW[1]}) float16 after "
              f"AIPP; for the dynamic model use:\n{dyn.to_cfg()}")
        return 0
    _LIVE.clear()

    if args.inject_fault and not args.sim:
        print("--inject-fault needs --sim (faults are injected into the software device only)", file=sys.stderr)
        return 2
    if args.sim:
        backend, target = "dvpp-sim", dv.Target(args.sim[0], args.sim[1])
        driver = None
        if args.inject_fault:
            from dvpipe.backends.dvpp import sim

            sim.inject_fault(args.inject_fault)
    else:
        why = _acl.why_unavailable("hw")
        target = detect_target()
        if why or target is None:
            print(f"no Ascend device here: {why or 'no SoC/CANN detected'}\n"
                  "run with --sim SOC CANN to exercise the software DVPP device", file=sys.stderr)
            return 2
        backend = "dvpp"
        try:
            from dvpipe.probe.live import detect_driver

            driver = detect_driver()[0]
        except ImportError:
            driver = None
    report: dict = {"target": str(target), "device": backend, "driver": driver, "dvpipe": dv.__version__,
                    "python": platform.python_version(), "platform": platform.platform(),
                    "injected_fault": args.inject_fault, "checks": []}
    try:
        _run_checks(args, backend, target, report)
    finally:
        if args.inject_fault:
            from dvpipe.backends.dvpp import sim

            sim.clear_faults()
    report["checks"].append(teardown(backend, target))
    report["failures"] = failures(report)
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 1 if report["failures"] else 0


def _run_checks(args: Any, backend: str, target: Any, report: dict) -> None:
    rig = dv.Rig.from_yaml(ROOT / "samples" / "rig.yaml")
    sets = sample_frame_sets(rig, count=args.frames)
    kitti = kitti_rig("jpeg")
    if not args.no_cache:  # first: the checks' plans read what it measured (an `unknown` settled here runs on DVPP)
        report["cache"] = fill_cache([rig] if args.quick else [rig, kitti_rig("png"), kitti], target, backend,
                                     args.cache)
    kitti_sets = [{c.name: encode_jpeg(synthetic_bgr(1242, 375, seed=10 * k + i)) for i, c in enumerate(kitti.cameras)}
                  for k in range(args.frames)]
    quick = [
        ("jpegd: decode, samples 1600x900", rig, sets, [dv.Decode()], ("jpegd", "samples"), None),
        ("jpegd+vpc: decode+resize x0.5, samples", rig, sets, [dv.Decode(), dv.Resize(scale=0.5)],
         ("jpegd+vpc.resize", "samples"), None)]
    checks = quick if args.quick else quick + [
        ("bevformer-tiny batch (fast) vs CPU reference, samples", rig, sets, None, ("batch", "samples"),
         "bevformer-tiny"),
        ("jpegd: decode, KITTI 1242x375 synthetic (odd height)", kitti, kitti_sets, [dv.Decode()],
         ("jpegd", "synthetic"), None),
        ("jpegd+vpc: decode+resize x0.5, KITTI 1242x375 synthetic (detour)", kitti, kitti_sets,
         [dv.Decode(), dv.Resize(scale=0.5)], ("jpegd+vpc.resize", "synthetic"), None),
    ]
    for name, r, fs, stages, tol, profile in checks:
        report["checks"].append(check_pipeline(name, r, fs, stages, backend, target, tol, profile))
    for label, bf, pk in (("vdec kernel: video source frames, B-frames (reordered)", 2, True),
                          ("vdec kernel: video source frames, no B-frames", 0, True),
                          ("vdec kernel: plain access units, no B-frames (one picture per unit)", 0, False)):
        report["checks"].append(check_vdec_kernel(label, backend, target, bf, pk))
    report["checks"].append(check_vdec(backend, target))
    report["checks"].append(check_aipp_route(rig, sets, backend, target))
    report["checks"].append(check_model(rig, sets, backend, target, {"static": args.om_static,
                                                                     "dynamic": args.om_dynamic}))
    try:
        report["pool"] = repr(pool_for(_acl.runtime("hw" if backend == "dvpp" else "sim", target)))
    except Exception:  # noqa: BLE001
        pass


if __name__ == "__main__":
    sys.exit(main())
