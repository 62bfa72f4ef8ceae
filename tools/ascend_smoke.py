#!/usr/bin/env python3
"""Smoke test of the DVPP backend on an Ascend device: run each kernel on the sample frames, compare with
the CPU backend, time each step, fill the empirical capability cache, print a report to attach to a bug.

Usage (on the Ascend machine, after ``source <CANN install>/set_env.sh``)::

    python tools/ascend_smoke.py                      # device "dvpp", target detected
    python tools/ascend_smoke.py --json smoke.json    # also write the report as JSON
    python tools/ascend_smoke.py --no-cache           # do not touch the empirical cache

Without a device (a laptop, CI) the same checks run against the software DVPP device::

    python tools/ascend_smoke.py --sim Ascend310 6.0.1
    python tools/ascend_smoke.py --sim Ascend310 6.0.1 --inject-fault vdec   # must exit 1

What it runs, per check: the plan (where each step runs and why), the run on the bundled samples
(``samples/``) and on KITTI-sized synthetic frames (1242x375: the odd-height detour), the error against
the CPU backend with the bounds of the tolerance table (``dvpipe.backends.dvpp.TOLERANCES``), the time
per step (host span, p50 over the frames) and the runtime fallbacks; the per-frame VDEC kernel in a
pipeline on H.264 streams with and without B-frames (frames as a video source emits them, matched by
the reordering decoder) and on plain access units (one picture per unit); a whole-stream VDEC decode.
The device-resident AIPP route (:func:`check_aipp_route`): JPEGD + VPC writing NV12 into the per-batch
device buffer, no device -> host bytes before the model, host -> device bytes = the JPEG bytes, and the
AIPP'd batch against the CPU reference within the tolerance table.
Then ``dvpipe.probe.live.run_live`` records each DVPP step's outcome in the empirical cache
(``~/.cache/dvpipe/dvpp-live.json``) that ``dvpipe probe`` shows next to the documented verdicts.
Finally everything is torn down and checked for leaks (the software device's ledger; on a device the
buffer pool and the runtimes still held).

A check FAILS on: an error; a drop; any runtime fallback (a DVPP step that fell back to the CPU on a
frame); a step DVPP implements that was planned elsewhere without a documented rejection (a verdict
with no rule, or on a device an ``unknown`` that the live verification did not settle); a deviation
beyond the tolerance table; a live-probe step that FAILED; a leak after teardown.

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
from dvpipe.backends.dvpp.testing import (encode_jpeg, error_stats, h264_stream, kitti_rig,  # noqa: E402
                                          pyav_display_order, sample_frame_sets, synthetic_bgr, tolerance_violations,
                                          video_packets)

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
    if v.status not in ("rejected", "unknown") or not v.rule:
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


def check_pipeline(name: str, rig: Any, frame_sets: list, stages: Any, backend: str, target: Any,
                   tolerance: Optional[tuple], profile: Optional[str] = None) -> dict:
    """Run ``stages`` (or ``profile``) on DVPP and on the CPU; compare, time, count fallbacks."""
    kw = dict(backends=(backend, "cpu"), target=target, fidelity="fast")
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
                 "verdict": None if dv_verdict is None else dv_verdict.to_dict(), "errors": [], "fallbacks": []}
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
    the CPU reference within ``TOLERANCES[("aipp", "samples")]``. Not run on a device yet."""
    from dvpipe.backends.dvpp.aipp import apply_aipp

    aipp = "aipp" if backend == "dvpp" else "aipp-sim"
    rec: dict = {"check": "aipp route: decode+resize into the NV12 batch buffer, AIPP normalise+pad (samples)",
                 "errors": [], "fallbacks": []}
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=(backend, aipp, "cpu"), target=target,
                                    fidelity="fast")
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
            got = apply_aipp(cfg, a.keep().images).astype(np.float32)
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
        rig = dv.Rig((dv.Camera("V", 320, 240, "h264"),))
        pipe = dv.Pipeline(rig, [dv.Decode()], backends=(backend, "cpu"), target=target, fidelity="fast")
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
    ap.add_argument("--inject-fault", choices=("jpegd", "vpc", "vdec"), metavar="UNIT",
                    help="with --sim: every call of this DVPP unit fails on the software device (the smoke test "
                         "must then exit 1)")
    ap.add_argument("--quick", action="store_true", help="skip the bevformer-tiny batch and the KITTI checks")
    ap.add_argument("--cache", metavar="PATH", help="empirical cache file (default ~/.cache/dvpipe/dvpp-live.json)")
    ap.add_argument("--no-cache", action="store_true", help="do not run the live probe / touch the cache")
    args = ap.parse_args(argv)

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
        target = dv.Target.detect()
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
    if not args.no_cache:
        report["cache"] = fill_cache([rig] if args.quick else [rig, kitti_rig("png"), kitti], target, backend,
                                     args.cache)
    try:
        report["pool"] = repr(pool_for(_acl.runtime("hw" if backend == "dvpp" else "sim", target)))
    except Exception:  # noqa: BLE001
        pass


if __name__ == "__main__":
    sys.exit(main())
