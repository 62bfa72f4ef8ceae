"""Where the runner's CPU goes beside decoding and dvpipe's kernel.

Runs ``Runner fast`` (what ``dvpipe run`` times) and the camera-parallel decode+kernel floor of
``tools/bench/video.py`` over the same streams, rounds interleaved, and times in thread CPU time every
FFmpeg decode call (the runner's ``FFmpegEngine.send``, the floor's decoder) and every call of the
compiled YUV kernel (``_native.yuv420_normalise``). Per frame set it prints the wall time, the process's
CPU time, the decode and kernel calls' CPU time and the rest (reading, synchronising, accounting,
statistics, Python), in core-milliseconds, medians over the rounds; also the minor page faults.

    python tools/bench/runner_cpu.py --data ../shared/data/nuscenes-sample --size 1600x900 --rounds 8
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cv2  # noqa: E402
import video as bench  # noqa: E402

import dvpipe.video as dvvideo  # noqa: E402
from dvpipe.backends import _native  # noqa: E402

_lock = threading.Lock()
_spent = {"decode": 0.0, "kernel": 0.0}  # thread CPU seconds since the round began


def _charge(part: str, t0: float) -> None:
    d = time.thread_time() - t0
    with _lock:
        _spent[part] += d


def _instrument() -> None:
    """Wrap the decode and kernel calls of both methods in thread-CPU timers."""
    kernel = _native.yuv420_normalise

    def timed_kernel(*args):
        t0 = time.thread_time()
        try:
            return kernel(*args)
        finally:
            _charge("kernel", t0)

    _native.yuv420_normalise = timed_kernel

    class TimedDecoder:
        def __init__(self, cc):
            self.cc = cc

        def decode(self, packet):
            t0 = time.thread_time()
            try:
                return self.cc.decode(packet)
            finally:
                _charge("decode", t0)

    floor_decoder = bench.floor_decoder
    bench.floor_decoder = lambda thread_type="SLICE": TimedDecoder(floor_decoder(thread_type))
    send = dvvideo.FFmpegEngine.send

    def timed_send(self, data, tag):
        t0 = time.thread_time()
        try:
            return send(self, data, tag)
        finally:
            _charge("decode", t0)

    dvvideo.FFmpegEngine.send = timed_send  # type: ignore[method-assign]


def _round(method, runs: int) -> dict:
    for k in _spent:
        _spent[k] = 0.0
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cpu0, wall0 = os.times(), time.perf_counter()
    for _ in range(runs):
        method.run()
    wall, cpu1 = time.perf_counter() - wall0, os.times()
    sets = runs * bench.SETS_PER_RUN
    cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) * 1e3 / sets
    return {"wall": wall * 1e3 / sets, "cpu": cpu, "decode": _spent["decode"] * 1e3 / sets,
            "kernel": _spent["kernel"] * 1e3 / sets,
            "rest": cpu - (_spent["decode"] + _spent["kernel"]) * 1e3 / sets,
            "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) / sets}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/nuscenes-sample", help="a folder with the CAM_*.jpg frames")
    ap.add_argument("--size", default="1600x900", help="WxH of each camera's stream")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8, help="measured rounds (two more are warm-up)")
    ap.add_argument("--runs", type=int, default=4, help="24-set runs per round")
    a = ap.parse_args(argv)
    w, h = (int(x) for x in a.size.split("x"))
    bases = [cv2.imread(str(Path(a.data) / f"{c}.jpg")) for c in bench.CAMS]
    if any(b is None for b in bases):
        print(f"runner_cpu: no {bench.CAMS[0]}.jpg ... in {a.data}", file=sys.stderr)
        return 2
    _instrument()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"encoding {len(bases)} x {w}x{h} streams ...", flush=True)
        streams = bench.Streams(bases, w, h, 48, Path(tmp), (a.rounds + 3) * a.runs * bench.SETS_PER_RUN)
        methods = {"decode+kernel floor": bench.PyAVParallel(streams, a.threads, "kernel"),
                   "Runner fast": bench.RunnerMethod(streams, a.threads, "fast")}
        rows: dict[str, list[dict]] = {name: [] for name in methods}
        order = list(methods.items())
        for r in range(a.rounds + 2):
            for name, method in (order if r % 2 else order[::-1]):
                got = _round(method, a.runs)
                if r >= 2:
                    rows[name].append(got)
        for method in methods.values():
            method.close()
    print(f"{len(bases)} x {w}x{h}, {a.threads} threads, medians of {a.rounds} rounds of "
          f"{a.runs * bench.SETS_PER_RUN} sets; per frame set:")
    print(f"{'method':<22}{'wall ms':>9}{'CPU':>8}{'decode':>8}{'kernel':>8}{'rest':>8}{'faults':>8}  (core-ms)")
    for name, got in rows.items():
        med = {k: statistics.median(g[k] for g in got) for k in got[0]}
        print(f"{name:<22}{med['wall']:9.2f}{med['cpu']:8.2f}{med['decode']:8.2f}{med['kernel']:8.2f}"
              f"{med['rest']:8.2f}{med['faults']:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
