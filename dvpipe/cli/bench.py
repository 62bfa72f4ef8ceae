"""``dvpipe bench DEPLOYMENT.yaml --backends cpu,dvpp-sim,dvpp-sim+aipp-sim``: one deployment, several plans
(routes: AIPP, torch_npu, host) side by side, with the bytes each moves and its deviation from the reference."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from ..errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("deployment", help="deployment YAML (e.g. samples/deployment.yaml)")
    p.add_argument("--backends", default="cpu", metavar="LIST",
                   help="comma-separated backends to compare, each planned as (backend, cpu); join backends with + "
                        "for a route, e.g. cpu,dvpp-sim,dvpp-sim+aipp-sim,dvpp-sim+torch:npu")
    p.add_argument("--frames", type=int, default=20, metavar="N", help="frame sets per plan (default 20)")
    p.add_argument("--reference-sets", type=int, default=2, metavar="K",
                   help="frame sets compared with the reference backend (default 2; 0 skips the deviation)")
    p.add_argument("--soc", help="Ascend SoC for DVPP plans (default: the deployment's target, else detected)")
    p.add_argument("--cann", help="CANN version for DVPP plans")
    p.add_argument("--fidelity", choices=("reference", "fast"), help="override the deployment's fidelity")
    p.add_argument("--model", action="store_true", help="also call the deployment's model in every run")
    p.add_argument("--percentiles", default="p50,p99", help="columns per plan (p50,p90,p99,max,mean)")


def main(args: argparse.Namespace) -> int:
    from ..deploy import load_deployment
    from ..deploy.bench import compare_backends, format_deviation
    from ..deploy.config import parse_backends
    from ..latency.report import check_percentiles, format_comparison
    from ..probe.environment import detect_target
    from ..target import Target

    if args.frames <= 0 or args.reference_sets < 0:
        raise ConfigError("--frames must be positive and --reference-sets non-negative")
    pct = tuple(p.strip() for p in args.percentiles.split(",") if p.strip())
    check_percentiles(pct)  # before the plans run, not after
    dep = load_deployment(args.deployment)
    if args.soc or args.cann:
        if not (args.soc and args.cann):
            raise ConfigError("--soc and --cann go together (e.g. --soc Ascend310P3 --cann 7.0.0)")
        dep = replace(dep, target=Target(args.soc, args.cann))
    if args.fidelity:
        dep = replace(dep, pipeline=replace(dep.pipeline, fidelity=args.fidelity))
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    parse_backends([p for b in backends for p in b.split("+") if p], "--backends")  # checked before anything runs
    if any(b.startswith("dvpp") for b in backends) and dep.target is None and detect_target() is None:
        raise ConfigError("DVPP plans need a target: pass --soc and --cann (e.g. --soc Ascend310P3 --cann 7.0.0) "
                          "or add target: {soc, cann} to the deployment")
    runs = compare_backends(dep, backends, frames=args.frames, reference_sets=args.reference_sets,
                            with_model=args.model, progress=lambda line: print(line, file=sys.stderr))
    print(f"deployment {dep.name}: {args.frames} frame sets per plan, fidelity {dep.pipeline.fidelity}"
          + (f", target {dep.target}" if dep.target else ""))
    for r in runs:
        print(f"\n{r.label}:")
        print("\n".join("  " + line for line in str(r.plan).splitlines()))
    print()
    print(format_comparison({r.label: r.stats for r in runs}, percentiles=pct, title="latency per step"))
    if any("dvpp-sim" in b for b in backends):
        print("note: dvpp-sim times are the software DVPP device's (a CPU emulation), not DVPP hardware; its rows "
              "show which steps move and what they cost to emulate")
    if args.reference_sets:
        print()
        print(format_deviation(runs))
    for r in runs:
        if r.accounting.check():
            raise ConfigError(f"{r.label}: frames not accounted for: {'; '.join(r.accounting.check())}")
    return 0
