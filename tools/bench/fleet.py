"""dvpipe fleet on this machine: throughput with 1 and 2 Ray workers against the in-process pipeline.

    .venv/bin/python tools/bench/fleet.py [--drives 4] [--repeat 4] [--workers 1,2] [--shard-size 16]
                                          [--format parquet] [--json out/bench-fleet.json]

Data: the bundled sample scene (samples/, 6 cameras 1600x900 JPEG, bevformer-tiny on cpu), its 4 frame
sets repeated ``--repeat`` times per drive (symlinked files, shifted capture times) over ``--drives``
drives. Measured, each on the same index:

* **in-process**: :class:`dvpipe.fleet.FrameSetProcessor` (the worker's code, no Ray, no writing) over
  every row: the pipeline's own rate on this machine.
* **in-process + write**: the same, plus writing Parquet shards (:func:`dvpipe.fleet.process_shard`).
* **ray, N workers**: ``dvpipe.fleet.run`` on a local cluster (``ray.init(num_cpus=N)``), fresh output.

Costs are split into per cluster (``ray.init``, once per run), per worker (actor start + pipeline
build: until that worker's first shard begins) and per frame set (steady-state rate once every worker
is up; worker busy time per set against in-process + write; worker time idle between shards), so
that the time for N machines can be read off as ``cluster + worker start + sets / (N x steady rate)``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def make_drives(tmp: Path, drives: int, repeat: int) -> list[str]:
    """Drive folders of the sample's camera frames, repeated with capture times shifted by 2 s per pass."""
    src = ROOT / "samples" / "frames"
    out = []
    for d in range(drives):
        drive = tmp / f"drive{d:03d}"
        for cam in sorted(os.listdir(src)):
            (drive / cam).mkdir(parents=True)
            files = sorted(os.listdir(src / cam))
            for r in range(repeat):
                for f in files:
                    t = int(Path(f).stem) + (d * 1000 + r) * 2_000_000_000
                    os.symlink(src / cam / f, drive / cam / f"{t}.jpg")
        out.append(str(drive))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drives", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=4, help="passes over the sample's 4 sets per drive")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--shard-size", type=int, default=16)
    ap.add_argument("--format", default="parquet", choices=("parquet", "tar"))
    ap.add_argument("--json", help="write every number here")
    args = ap.parse_args(argv)

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # a local cluster on 127.0.0.1 (dvpipe.fleet)
    import ray

    from dvpipe import fleet
    from dvpipe.fleet import FrameSetProcessor, build_index, load_fleet_deployment, process_shard, write_index

    dep_path = str(ROOT / "samples" / "deployment.yaml")
    tmp = Path(tempfile.mkdtemp(prefix="dvpipe-bench-fleet-"))
    res: dict = {"machine": {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0]}}
    try:
        drives = make_drives(tmp, args.drives, args.repeat)
        dep = load_fleet_deployment(dep_path, ["cpu"])
        rows, meta = build_index(dep, drives)
        index = write_index(rows, meta, str(tmp / "index.parquet"))
        n = len(rows)
        res["sets"] = n
        res["set_shape"] = None

        proc = FrameSetProcessor(dep)
        list(proc.image_sets(rows[:2]))  # warm-up (lazy initialisation), as a worker's first sets
        t0 = time.perf_counter()
        for r in proc.image_sets(rows):
            res["set_shape"] = list(r.images.shape) + [str(r.images.dtype)]
        t_in = time.perf_counter() - t0
        shards = fleet.plan_shards(rows, args.shard_size)
        spec = {"out": str(tmp / "inproc"), "format": args.format}
        state = {"worker": "in-process", "sets": 0, "warmup": 0}
        t0 = time.perf_counter()
        for k, rs in enumerate(shards):
            process_shard(proc, spec, k, "bench", rs, state)
        t_inw = time.perf_counter() - t0
        proc.close()
        res["in_process"] = {"s": t_in, "sets_per_s": n / t_in, "ms_per_set": 1e3 * t_in / n}
        res["in_process_write"] = {"s": t_inw, "sets_per_s": n / t_inw, "ms_per_set": 1e3 * t_inw / n}
        print(f"{n} frame sets of {res['set_shape']}; machine: {os.cpu_count()} CPUs, load {res['machine']['load_1min']:.1f}")
        print(f"in-process            {n / t_in:7.2f} sets/s  ({1e3 * t_in / n:.1f} ms/set)")
        print(f"in-process + write    {n / t_inw:7.2f} sets/s  ({1e3 * t_inw / n:.1f} ms/set)")

        for w in [int(x) for x in args.workers.split(",")]:
            t0 = time.perf_counter()
            ray.init(num_cpus=w, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
            t_init = time.perf_counter() - t0
            try:
                t0 = time.perf_counter()
                fr = fleet.run(dep_path, index, str(tmp / f"ray{w}"), workers=w, shard_size=args.shard_size,
                               format=args.format, backends=["cpu"])
                t_run = time.perf_counter() - t0
            finally:
                ray.shutdown()
            m = fr.manifest
            assert m["complete"] and m["written"] == n, m["failed"]
            sh = m["shards"]
            t_exec0 = fr.timings["execute_start_unix"]
            exe = fr.timings["execute_s"]
            first_start = {}
            for x in sh:
                first_start[x["worker"]] = min(first_start.get(x["worker"], 1e30), x["started_unix"])
            all_up = max(first_start.values())  # from here every worker is running
            steady = [x for x in sh if x["started_unix"] >= all_up]
            span = max(x["ended_unix"] for x in sh) - all_up
            steady_rate = sum(len(x["set_ids"]) for x in steady) / span if steady and span > 0 else None
            busy = sum(x["busy_s"] for x in sh)
            idle = exe * w - busy - sum(s - t_exec0 for s in first_start.values())  # worker time outside shards
            row = {"workers": w, "ray_init_s": t_init, "run_s": t_run, "execute_s": exe,
                   "worker_start_s": {k: v - t_exec0 for k, v in first_start.items()},
                   "worker_init_s": sorted({x["worker_init_s"] for x in sh}),
                   "busy_ms_per_set": 1e3 * busy / n, "sets_per_s": n / exe, "steady_sets_per_s": steady_rate,
                   "ratio_vs_in_process": (n / exe) / (n / t_in),
                   "steady_ratio_vs_in_process_write": (steady_rate or 0) / (n / t_inw),
                   "idle_ms_per_set": 1e3 * idle / n, "per_worker": m["workers"]}
            res[f"ray_{w}"] = row
            print(f"ray, {w} worker{'s' if w > 1 else ' '}       {n / exe:7.2f} sets/s end to end "
                  f"(x{row['ratio_vs_in_process']:.2f} in-process); steady {steady_rate or 0:.2f} sets/s "
                  f"(x{row['steady_ratio_vs_in_process_write']:.2f} in-process + write)")
            print(f"    per cluster: ray.init {t_init:.2f} s; per worker: first shard starts after "
                  + ", ".join(f"{v:.2f}" for v in sorted(row["worker_start_s"].values()))
                  + f" s (of which deployment + pipeline {max(row['worker_init_s']):.2f} s); per set: worker busy "
                  f"{row['busy_ms_per_set']:.1f} ms (in-process + write {1e3 * t_inw / n:.1f}), "
                  f"idle between shards {row['idle_ms_per_set']:.1f} ms")
            for wid, s in sorted(m["workers"].items()):
                print(f"    worker {wid}: {s['sets']} sets, busy {s['busy_s']:.2f} s, {s['sets_per_s']:.2f} sets/s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
