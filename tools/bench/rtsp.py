#!/usr/bin/env python3
"""Live RTSP cameras through ``dvpipe run``'s runner: dvpipe's own client (one I/O thread for every camera)
against FFmpeg's (a reader thread per camera), in one process, rounds interleaved.

One command::

    .venv/bin/python tools/bench/rtsp.py                          # 6, 12 and 24 cameras, 3 rounds of 8 s
    .venv/bin/python tools/bench/rtsp.py --cameras 12 --rounds 5 --seconds 10 --json out/rtsp.json
    .venv/bin/python tools/bench/rtsp.py --transport udp          # RTP over UDP (both clients)

Streams: each camera a 1600x900 H.264 stream (libx264 ``veryfast``, ``crf 23``, no B-frames, GOP 24,
12 fps) made here from the nuScenes frames in ``--data`` (``../shared/data/nuscenes-sample`` when
present; else synthetic camera-like scenes), slowly zoomed and panned with sensor-like noise
(``tools/bench/video.py``'s :func:`camera_frames`), 48 pictures looped. They are served, paced at
12 fps, by ``python -m dvpipe.testing.rtsp_server`` in a process of its own on 127.0.0.1 (RTP over
the RTSP connection, or over UDP with ``--transport udp``: 45-70 RTP packets a picture), so its work
is not in the numbers.

Each round runs the deployment (``bevformer-tiny`` at ``fast``, CPU, ``run.duration_s``) once with
``client: dvpipe`` and once with ``client: ffmpeg``, in an order alternated every round, and reports
for each: the process's CPU time (user + system, ``getrusage``) per frame read, context switches per
frame, the threads of the process while it runs (Python's and the OS's, FFmpeg's decoder threads
included), frames read / emitted / dropped, and the end-to-end latency (capture -> output) p50 / p99.
Ratios (dvpipe / ffmpeg) are medians of the per-round ratios.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

FPS = 12
W, H = 1600, 900


def _video_bench():
    spec = importlib.util.spec_from_file_location("bench_video", ROOT / "tools" / "bench" / "video.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_streams(folder: Path, data: Path, n_frames: int) -> list[Path]:
    """Six cameras' Annex B files (no B-frames: the loopback server sends in decode order)."""
    import av
    from fractions import Fraction

    import cv2

    vb = _video_bench()
    if all((data / f"{c}.jpg").exists() for c in vb.CAMS):
        bases = [cv2.imread(str(data / f"{c}.jpg")) for c in vb.CAMS]
    else:
        bases = [vb.synthetic_scene(W, H, seed=k) for k in range(6)]
    paths = []
    for k, base in enumerate(bases):
        cc = av.CodecContext.create("libx264", "w")
        cc.width, cc.height, cc.pix_fmt = W, H, "yuv420p"
        cc.time_base, cc.framerate, cc.gop_size, cc.max_b_frames = Fraction(1, FPS), Fraction(FPS), 24, 0
        cc.options = {"preset": "veryfast", "crf": "23", "x264-params": "bframes=0:repeat-headers=1"}
        out = bytearray()
        for i, img in enumerate(vb.camera_frames(base, n_frames, W, H, seed=k)):
            f = av.VideoFrame.from_ndarray(img, format="bgr24")
            f.pts = i
            for p in cc.encode(f):
                out += bytes(p)
        for p in cc.encode(None):
            out += bytes(p)
        path = folder / f"cam{k}.h264"
        path.write_bytes(bytes(out))
        paths.append(path)
    return paths


def serve(folder: Path, sources: list[Path], n: int, port: int) -> subprocess.Popen:
    files = []
    for i in range(n):
        p = folder / f"c{i}.h264"
        if not p.exists():
            os.link(sources[i % len(sources)], p)
        files.append(str(p))
    proc = subprocess.Popen([sys.executable, "-m", "dvpipe.testing.rtsp_server", *files, "--port", str(port),
                             "--fps", str(FPS)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    import socket

    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the loopback RTSP server did not start: {proc.stdout.read() if proc.stdout else ''}")


def rig(n: int) -> dict:
    from dvpipe.testing.deployments import tiny_rig

    return tiny_rig([f"c{i}" for i in range(n)], W, H, encoding="h264")


def one_run(n: int, port: int, client: str, seconds: float, threads: int, transport: str = "tcp") -> dict:
    from dvpipe.deploy import Runner, load_deployment

    dep = load_deployment({
        "name": "bench-rtsp", "rig": rig(n),
        "pipeline": {"profile": "bevformer-tiny", "fidelity": "fast", "backends": ["cpu"], "threads": threads},
        "cameras": [{"name": f"c{i}", "source": {"type": "rtsp", "uri": f"rtsp://127.0.0.1:{port}/c{i}",
                                                 "client": client, "transport": transport}} for i in range(n)],
        "sync": {"tolerance_ms": 42, "deadline_ms": 100, "on_late": "mask"},  # half a period: unsynchronised cameras
        "run": {"duration_s": seconds}, "latency": {"warmup_sets": 12}, "outputs": {"metrics": False}})
    runner = Runner(dep, write_outputs=False)
    peak = {"py": 0, "os": 0}

    def look(r) -> None:
        if r.sets_done % 8 == 0:
            peak["py"] = max(peak["py"], threading.active_count())
            peak["os"] = max(peak["os"], len(os.listdir("/proc/self/task")))

    runner.progress = look
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    result = runner.run()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    acc = result.accounting
    read = sum(acc.entered.values())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    switches = (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)
    e2e = runner.stats.end_to_end()
    return {"client": client, "transport": transport, "cameras": n, "read": read, "emitted": sum(acc.emitted.values()),
            "dropped": {reason: sum(d.get(reason, 0) for d in acc.dropped.values())
                        for reason in sorted({k for d in acc.dropped.values() for k in d})},
            "cpu_ms_per_frame": 1000 * cpu / max(1, read), "cpu_cores": cpu / wall,
            "switches_per_frame": switches / max(1, read), "threads_python": peak["py"], "threads_os": peak["os"],
            "e2e_p50_ms": (e2e.p50_ns or 0) / 1e6, "e2e_p99_ms": (e2e.p99_ns or 0) / 1e6,
            "disconnects": sum(h.disconnects for h in acc.health.values()),
            "stalls": sum(h.stalls for h in acc.health.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cameras", default="6,12,24", help="camera counts, comma-separated (default 6,12,24)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each run (s)")
    ap.add_argument("--threads", type=int, default=2, help="the pipeline's threads")
    ap.add_argument("--frames", type=int, default=48, help="pictures per camera before the stream loops")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "nuscenes-sample")
    ap.add_argument("--port", type=int, default=18554)
    ap.add_argument("--transport", choices=("tcp", "udp"), default="tcp", help="RTP transport of every camera")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.cameras.split(",")]
    out: dict = {"rows": [], "ratios": {}}
    with tempfile.TemporaryDirectory(prefix="dvpipe-bench-rtsp-") as tmp:
        folder = Path(tmp)
        print(f"encoding 6 cameras x {args.frames} pictures, {W}x{H} ...", flush=True)
        sources = make_streams(folder, args.data, args.frames)
        for n in counts:
            server = serve(folder, sources, n, args.port)
            try:
                rows = []
                for r in range(args.rounds):
                    order = ("dvpipe", "ffmpeg") if r % 2 == 0 else ("ffmpeg", "dvpipe")
                    for client in order:
                        row = one_run(n, args.port, client, args.seconds, args.threads, args.transport)
                        row["round"] = r
                        rows.append(row)
                        print(f"{n:3d} cameras, round {r}, {client:6s}: {row['cpu_ms_per_frame']:.2f} CPU ms/frame "
                              f"({row['cpu_cores']:.2f} cores), {row['switches_per_frame']:.1f} switches/frame, "
                              f"threads {row['threads_python']} Python / {row['threads_os']} OS, read "
                              f"{row['read']}, emitted {row['emitted']}, dropped {row['dropped']}, e2e p50 {row['e2e_p50_ms']:.1f} ms "
                              f"p99 {row['e2e_p99_ms']:.1f}, disconnects {row['disconnects']}, stalls "
                              f"{row['stalls']}", flush=True)
                out["rows"].extend(rows)
                ratios = {}
                for key in ("cpu_ms_per_frame", "switches_per_frame", "e2e_p50_ms"):
                    per_round = [a[key] / b[key] for a, b in
                                 ((next(x for x in rows if x["round"] == r and x["client"] == "dvpipe"),
                                   next(x for x in rows if x["round"] == r and x["client"] == "ffmpeg"))
                                  for r in range(args.rounds)) if b[key]]
                    ratios[key] = float(np.median(per_round)) if per_round else None
                out["ratios"][n] = ratios
                print(f"{n:3d} cameras ({args.transport}): dvpipe / ffmpeg, median of rounds: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items() if v is not None), flush=True)
            finally:
                server.terminate()
                server.wait(10)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
