"""What ``latency.profiler_ranges`` costs per span, with no profiler recording.

    python tools/bench/profiler_ranges.py [--n 200000] [--repeats 7]

Times the exact hook the pipeline runs around each plan step (``Pipeline._run_steps``: open the
range before the step, close it after) against the same loop without it:

* ``off``: ``profiler_ranges: false`` -- the hook is one ``is None`` test per span;
* ``torch``: the torch sink while no torch profiler records (one flag read per span);
* ``nvtx``: the ``nvtx`` package's push/pop with no tool attached (install ``nvtx`` to measure it);
* ``msproftx (stand-in)``: the msproftx sink against a stand-in ``acl.prof`` whose ``create_stamp()``
  returns 0 as pyACL does outside a profiling session -- the Python side only; the pyACL C call
  itself was not measured (no Ascend device here);
* ``torch (recording)``: for scale, the torch sink while ``torch.profiler`` records.

Prints ns per span: (fastest of the repeats of ``--n`` spans through the hook - fastest of the same
loop without it) / ``--n``.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dvpipe.latency.profiler_ranges import MsproftxSink, NvtxSink, ProfilerRanges, TorchSink  # noqa: E402


def _hook_loop(ranges, n: int) -> int:
    """ns for n spans through the pipeline's hook (the step itself is empty)."""
    step, cam = "decode+resize", "CAM_FRONT"
    t0 = time.perf_counter_ns()
    for _ in range(n):
        tokens = None if ranges is None else ranges.push(ranges.message(step, cam))
        try:
            pass
        finally:
            if tokens is not None and ranges is not None:
                ranges.pop(tokens)
    return time.perf_counter_ns() - t0


def _empty_loop(n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        try:
            pass
        finally:
            pass
    return time.perf_counter_ns() - t0


def _per_span(ranges, n: int, repeats: int) -> float:
    hook = min(_hook_loop(ranges, n) for _ in range(repeats))
    empty = min(_empty_loop(n) for _ in range(repeats))
    return max(0.0, (hook - empty) / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="spans per measurement")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rows: list[tuple[str, float | None, str]] = []
    rows.append(("off (profiler_ranges: false)", _per_span(None, args.n, args.repeats), ""))
    torch = None
    if importlib.util.find_spec("torch") is not None:
        import torch
        rows.append(("torch, no profiler recording", _per_span(ProfilerRanges([TorchSink(torch)]), args.n,
                                                                 args.repeats), f"torch {torch.__version__}"))
    else:
        rows.append(("torch, no profiler recording", None, "torch not installed"))
    sink, why = NvtxSink.detect()
    if sink is not None:
        rows.append(("nvtx, no tool attached", _per_span(ProfilerRanges([sink]), args.n, args.repeats),
                     sink.source))
    else:
        rows.append(("nvtx, no tool attached", None, why))
    stand_in = SimpleNamespace(prof=SimpleNamespace(create_stamp=lambda: 0))
    rows.append(("msproftx (stand-in acl), no session", _per_span(ProfilerRanges([MsproftxSink(stand_in)]), args.n,
                                                                 args.repeats), "Python side only; pyACL not here"))
    if torch is not None:
        from torch.profiler import ProfilerActivity, profile

        n = max(1000, args.n // 50)
        with profile(activities=[ProfilerActivity.CPU]):
            rec = _per_span(ProfilerRanges([TorchSink(torch)]), n, 3)
        rows.append(("torch, profiler recording (for scale)", rec, f"{n} spans"))
    print(f"per-span cost of the profiler-range hook ({args.n} spans, min of {args.repeats}; Python "
          f"{sys.version.split()[0]})")
    for name, ns, note in rows:
        shown = "      n/a" if ns is None else f"{ns:9.0f}"
        print(f"  {name:<40} {shown} ns   {note}")


if __name__ == "__main__":
    main()
