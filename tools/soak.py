"""Soak run (a tool, not a test): a synthetic 6-camera 30 fps deployment for a long time, checking
that resident memory stays flat after warm-up and that every frame is accounted for.

    python tools/soak.py                       # 100k frames: nuScenes-like 6 x 1600x900 JPEG, 30 fps, live
    python tools/soak.py --frames 20000 --json out/soak.json
    python tools/soak.py --no-realtime         # as fast as the pipeline goes (recorded-style, back-pressure)

Pass criteria (exit status 1 otherwise): resident memory (RSS, /proc/self/statm) at the end grows by
less than ``--max-growth`` (10 %) over its value at the end of warm-up (the first ``--warmup``
fraction of the frames), and frames in = frames emitted + frames dropped.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dvpipe.deploy import Runner, load_deployment  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def soak_deployment(args) -> dict:
    rig = str(ROOT / "samples" / "rig.yaml")
    source = {"type": "synthetic", "fps": args.fps, "realtime": args.realtime, "cycle": 16, "quality": 90}
    dep = {
        "name": "soak-synthetic-6cam",
        "rig": rig,
        "pipeline": {"profile": args.profile, "backends": args.backends.split(",")},
        "source": source,
        "sync": {"tolerance_ms": 0.4 * 1000 / args.fps, "deadline_ms": 1000 / args.fps, "on_late": "mask"},
        "run": {"queue_size": 2, "stall_timeout_ms": 1000},
        "outputs": {"metrics": False},
    }
    if args.width and args.height:
        dep["source"]["resolution"] = [args.width, args.height]
    return dep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=100_000, help="camera frames to push through (default 100000)")
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--realtime", action=argparse.BooleanOptionalAction, default=True,
                    help="live cameras at --fps (default) or as fast as the pipeline goes")
    ap.add_argument("--profile", default="bevformer-tiny")
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--height", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=float, default=0.1, help="fraction of the frames counted as warm-up (0.1)")
    ap.add_argument("--max-growth", type=float, default=0.10, help="allowed RSS growth after warm-up (0.10)")
    ap.add_argument("--every", type=float, default=10.0, help="print a line every N seconds")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)

    dep = load_deployment(soak_deployment(args))
    samples: list[tuple[float, int, int]] = []  # (seconds, frames in, rss)
    state = {"t0": time.monotonic(), "last": 0.0, "warm_rss": None, "warm_at": None}
    warm_frames = int(args.frames * args.warmup)

    def progress(runner: Runner) -> None:
        now = time.monotonic() - state["t0"]
        entered = runner.acc.totals()["entered"]
        if state["warm_rss"] is None and entered >= warm_frames:
            state["warm_rss"], state["warm_at"] = rss_bytes(), entered
        if entered >= args.frames:
            runner.stopped_by = f"soak: {args.frames} frames"
            runner.stop_event.set()  # the run ends after this frame set
        if now - state["last"] >= args.every:
            state["last"] = now
            rss = rss_bytes()
            samples.append((now, entered, rss))
            t = runner.acc.totals()
            print(f"{now:7.0f} s  frames {entered:>7} in, {t['emitted']:>7} emitted, {t['dropped']:>6} dropped, "
                  f"{runner.sets_done:>6} sets  RSS {rss / 2**20:7.1f} MiB", flush=True)

    runner = Runner(dep, progress=progress, write_outputs=False)
    print(f"soak: {len(dep.cameras)} cameras {dep.rig.cameras[0].width}x{dep.rig.cameras[0].height} "
          f"{dep.rig.cameras[0].encoding}, {args.fps:g} fps, {'live' if args.realtime else 'as fast as possible'}, "
          f"{args.frames} frames, profile {args.profile} on {args.backends}", flush=True)
    result = runner.run()
    end_rss = rss_bytes()
    elapsed = time.monotonic() - state["t0"]
    t = result.accounting.totals()
    warm = state["warm_rss"] or end_rss
    growth = (end_rss - warm) / warm
    peak = max([s[2] for s in samples] + [end_rss])
    e2e = result.stats.end_to_end("capture" if args.realtime else "arrival")
    report = {
        "frames_in": t["entered"], "emitted": t["emitted"], "dropped": t["dropped"], "sets": result.sets,
        "drops": {c: dict(d) for c, d in result.accounting.dropped.items()},
        "masked_slots": t["masked_slots"], "elapsed_s": elapsed, "frames_per_s": t["entered"] / elapsed,
        "rss_warm_mib": warm / 2**20, "rss_end_mib": end_rss / 2**20, "rss_peak_mib": peak / 2**20,
        "rss_growth": growth, "warmup_frames": state["warm_at"], "accounted": result.ok,
        "end_to_end_ms": {k: (getattr(e2e, f"{k}_ns") or 0) / 1e6 for k in ("p50", "p90", "p99")},
        "rss_samples": [{"t_s": round(s, 1), "frames_in": n, "rss_mib": round(r / 2**20, 1)} for s, n, r in samples],
    }
    ok = result.ok and growth < args.max_growth and t["entered"] >= args.frames
    print(result.summary())
    print(f"\nsoak {'PASSED' if ok else 'FAILED'}: {t['entered']} frames in {elapsed:.0f} s "
          f"({t['entered'] / elapsed:.0f} frames/s, {result.sets} sets), "
          f"{t['emitted']} emitted + {t['dropped']} dropped; "
          f"RSS {warm / 2**20:.1f} MiB after warm-up ({state['warm_at']} frames) -> "
          f"{end_rss / 2**20:.1f} MiB at the end "
          f"({growth * 100:+.2f} %, limit {args.max_growth * 100:.0f} %), peak {peak / 2**20:.1f} MiB; "
          f"end to end p50 {report['end_to_end_ms']['p50']:.1f} ms, p99 {report['end_to_end_ms']['p99']:.1f} ms")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
