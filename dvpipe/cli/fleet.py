"""``dvpipe fleet``: a deployment's pipeline over a fleet's recordings on Ray, exactly once, resumable.

    dvpipe fleet index DEPLOYMENT.yaml [--drives DIR ...] -o index.parquet
    dvpipe fleet index DEPLOYMENT.yaml --infos nuscenes_infos_val.pkl [--data-root DIR] -o index.parquet
    dvpipe fleet DEPLOYMENT.yaml --index index.parquet --out DIR [--workers N]
                 [--address auto|ray://HOST:PORT] [--resources npu=1|gpu=1] [--format parquet|tar]
                 [--shard-size N] [--segment-size N]

See docs/fleet.md.
"""
from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = ("dvpipe fleet index DEPLOYMENT.yaml [--drives DIR ... | --infos FILE.pkl [--data-root DIR]] "
               "-o INDEX.parquet\n"
               "       dvpipe fleet DEPLOYMENT.yaml --index INDEX.parquet --out DIR [--workers N] "
               "[--address auto|ray://HOST:PORT] [--resources npu=1|gpu=1] [--format parquet|tar]")
    p.add_argument("words", nargs="+", metavar="[index] DEPLOYMENT.yaml", help=argparse.SUPPRESS)
    g = p.add_argument_group("dvpipe fleet index")
    g.add_argument("--drives", nargs="+", metavar="DIR",
                   help="drive folders, each with the deployment's source layout (default: the deployment's sources)")
    g.add_argument("--infos", metavar="FILE.pkl", help="index an mmdet3d / nuScenes info file instead")
    g.add_argument("--data-root", metavar="DIR", help="folder the info file's image paths are relative to")
    g.add_argument("-o", "--output", metavar="INDEX.parquet", help="where to write the index")
    r = p.add_argument_group("dvpipe fleet (run)")
    r.add_argument("--index", metavar="INDEX.parquet", help="the frame-set index (from `dvpipe fleet index`)")
    r.add_argument("--out", metavar="DIR", help="output folder (the same folder resumes a run)")
    r.add_argument("--workers", type=int, default=1, metavar="N", help="Ray actors, one pipeline each (default 1)")
    r.add_argument("--address", metavar="auto|ray://HOST:PORT", help="Ray cluster to join (default: a local one)")
    r.add_argument("--resources", metavar="npu=1|gpu=1", help="per worker: gpu=1, npu=1 (ray-ascend), cpu=2, NAME=X")
    r.add_argument("--format", choices=("parquet", "tar"), default="parquet", help="shard format (default parquet)")
    r.add_argument("--shard-size", type=int, default=64, metavar="N", help="image frame sets per shard (default 64)")
    r.add_argument("--segment-size", type=int, default=256, metavar="N",
                   help="video frame sets per keyframe-aligned segment of a recording (default 256; 0: a whole "
                        "video drive per shard)")
    r.add_argument("--backends", metavar="LIST", help="backend preference for every camera, comma-separated")
    r.add_argument("--quiet", "-q", action="store_true", help="no progress lines")


def main(args: argparse.Namespace) -> int:
    words = list(args.words)
    if words[0] == "index":
        if len(words) != 2:
            raise ConfigError("usage: dvpipe fleet index DEPLOYMENT.yaml [--drives DIR ...] -o INDEX.parquet")
        return _index(words[1], args)
    if len(words) != 1:
        raise ConfigError(f"expected one deployment, got {' '.join(words)}")
    return _run(words[0], args)


def _index(deployment: str, args) -> int:
    from ..fleet import build_index, index_from_infos, load_fleet_deployment, write_index

    if not args.output:
        raise ConfigError("dvpipe fleet index: -o INDEX.parquet is required")
    if args.infos and args.drives:
        raise ConfigError("dvpipe fleet index: --infos and --drives exclude each other")
    dep = load_fleet_deployment(deployment)
    rows, meta = index_from_infos(dep, args.infos, args.data_root) if args.infos else build_index(dep, args.drives)
    path = write_index(rows, meta, args.output)
    for name, info in meta["drives"].items():
        drops = ", ".join(f"{n} {c}" for c, n in sorted(info["dropped"].items())) or "none"
        frames = sum(info["frames"].values())
        print(f"{name}: {info['sets']} frame sets from {frames} frames; dropped by sync: {drops}")
    print(f"{len(rows)} frame sets ({meta['kind']}) -> {path}")
    return 0


def _run(deployment: str, args) -> int:
    from ..fleet import Progress, parse_resources, run

    if not args.index or not args.out:
        raise ConfigError("dvpipe fleet: --index INDEX.parquet and --out DIR are required "
                          "(build the index with `dvpipe fleet index`)")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
    progress = None if args.quiet else Progress(0, stream=sys.stderr)
    res = run(deployment, args.index, args.out, workers=args.workers, address=args.address,
              resources=parse_resources(args.resources), format=args.format, shard_size=args.shard_size,
              segment_size=args.segment_size, backends=backends, progress=progress)
    m = res.manifest
    rate = f"{m['sets_per_s']:.1f} sets/s" if m["sets_per_s"] else "-"
    print(f"{m['written']} of {m['sets']} frame sets written, {len(m['failed'])} failed, in {res.elapsed_s:.1f} s "
          f"({rate}); {res.skipped_shards} shards already complete, {res.processed_shards} processed")
    for w, s in sorted(m["workers"].items()):
        per = f"{s['sets_per_s']:.1f} sets/s" if s["sets_per_s"] else "-"
        print(f"  worker {w}: {s['sets']} sets, busy {s['busy_s']:.1f} s, {per}")
    for sid, why in list(m["failed"].items())[:10]:
        print(f"  failed {sid}: {why}")
    if len(m["failed"]) > 10:
        print(f"  ... {len(m['failed']) - 10} more in {args.out}/manifest.json")
    if res.latency.stats.batches:
        print("")
        print(res.latency.report())
    print(f"\noutputs: {res.out}/manifest.json")
    return 0 if res.complete and not m["failed"] else 1
