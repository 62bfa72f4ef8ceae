"""``dvpipe run [DEPLOYMENT.yaml]``: run a deployment, show progress, per-step latency and the frame account.

Without a deployment it runs the bundled sample (``samples/deployment.yaml``: the nuScenes-like
6-camera sample scene through bevformer-tiny on the best available backend).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ..errors import ConfigError

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "deployment.yaml"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("deployment", nargs="?",
                   help=f"deployment YAML (default: the bundled sample, {SAMPLE.parent.name}/{SAMPLE.name})")
    p.add_argument("--frames", type=int, metavar="N", help="stop after N frame sets (recordings loop to reach N)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--backends", metavar="LIST", help="backend preference for every camera, comma-separated "
                                                      "(e.g. cpu, or torch:cuda,cpu, or auto)")
    p.add_argument("--realtime", action="store_true", help="replay recordings at their capture rate")
    p.add_argument("--soc", help="Ascend SoC that DVPP steps are planned against (with --cann; overrides target:)")
    p.add_argument("--cann", help="CANN version for --soc (e.g. 7.0.0)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: the deployment's outputs.dir)")
    p.add_argument("--trace", metavar="PATH", help="write a Chrome/Perfetto trace of every frame set")
    p.add_argument("--json", metavar="PATH", help="write the latency statistics as JSON")
    p.add_argument("--plots", metavar="DIR", help="write latency plots (PNG; needs matplotlib)")
    p.add_argument("--prometheus", type=int, metavar="PORT",
                   help="serve latency metrics at http://0.0.0.0:PORT/metrics (needs dvpipe[prometheus])")
    p.add_argument("--no-outputs", action="store_true", help="write no files")
    p.add_argument("--quiet", "-q", action="store_true", help="no plan and no progress display")


def _positive(value, flag: str):
    if value is not None and value <= 0:
        raise ConfigError(f"{flag} must be positive, got {value:g}")


def main(args: argparse.Namespace) -> int:
    from ..deploy import Runner, load_deployment
    from ..deploy.config import parse_backends
    from ..deploy.runner import ProgressLine

    path = args.deployment
    if path is None:
        if not SAMPLE.is_file():
            raise ConfigError(f"no deployment given and the bundled sample ({SAMPLE}) is not there; "
                              "pass a deployment YAML (see configs/deployments/)")
        path = str(SAMPLE)
    _positive(args.frames, "--frames")
    _positive(args.duration, "--duration")
    dep = load_deployment(path)
    run_changes = {}
    if args.frames is not None:
        run_changes.update(frames=args.frames, loop=True, duration_s=None)
    if args.duration is not None:
        run_changes.update(duration_s=args.duration)
        if args.frames is None:
            run_changes.update(frames=None, loop=True)
    if args.realtime:
        run_changes.update(realtime=True)
    if run_changes:
        dep = dep.with_run(**run_changes)
    if args.prometheus is not None:
        dep = dep.with_outputs(prometheus_port=args.prometheus)
    if args.soc or args.cann:
        from ..target import Target

        if not (args.soc and args.cann):
            raise ConfigError("--soc and --cann go together (e.g. --soc Ascend310P3 --cann 7.0.0)")
        dep = replace(dep, target=Target(args.soc, args.cann))
    if args.backends:
        backends = parse_backends([b.strip() for b in args.backends.split(",") if b.strip()], "--backends")
        dep = replace(dep, pipeline=replace(dep.pipeline, backends=backends),
                      cameras=tuple(replace(c, backends=None) for c in dep.cameras))
    if args.out:
        import os

        dep = dep.with_outputs(dir=os.path.abspath(args.out),
                               trace=os.path.join(os.path.abspath(args.out), os.path.basename(dep.outputs.trace))
                               if dep.outputs.trace else None)
    for flag, path, is_dir in (("--plots", args.plots, True), ("--trace", args.trace, False),
                               ("--json", args.json, False), ("--out", args.out, True)):
        _check_writable(flag, path, is_dir)  # before the run, not after it
    if not args.no_outputs:
        from ..deploy.config import output_problems

        problems = output_problems(dep.outputs)
        if problems:  # the deployment's own output folders, before the first frame set
            raise ConfigError("outputs cannot be written: " + "; ".join(f"{k}: {m}" for k, m in problems))
    out = sys.stdout
    for w in dep.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(dep.describe(), file=out)
    progress = None if args.quiet else ProgressLine(dep.run.frames, dep.run.duration_s, stream=sys.stderr)
    runner = Runner(dep, progress=progress, trace_path=args.trace, json_path=args.json, plots_dir=args.plots,
                    write_outputs=not args.no_outputs)
    if runner.backend_notes:  # why "auto" did not pick the others (first clause of each reason)
        notes = "; ".join(n.split("; ")[0] for n in runner.backend_notes)
        print(f"backends auto: skipped {notes}", file=out)
    if not args.quiet:
        print(runner.pipe.plan, file=out)
    out.flush()
    _stop_on_signals(runner)
    result = runner.run()
    if progress is not None:
        progress.close(runner)
    stop = "interrupted (Ctrl-C)" if result.interrupted else f"stopped: {result.stopped_by}"
    rate = result.sets / result.elapsed_s if result.elapsed_s > 0 else 0.0
    print(f"\n{result.sets} frame sets in {result.elapsed_s:.2f} s ({rate:.1f} sets/s); {stop}", file=out)
    print(result.summary(), file=out)
    if result.sets:
        print("", file=out)
        print(result.stats.report(title="latency (ms)"), file=out)
    if result.model_error:
        print(f"model errors: {result.accounting.model_errors}; first: {result.model_error}", file=out)
    if result.outputs:
        print("\noutputs:", file=out)
        for k, v in result.outputs.items():
            if not k.startswith("plot_"):
                print(f"  {k:<8} {v}", file=out)
    else:
        print("\noutputs: none written", file=out)
    if result.interrupted:
        return 130
    if result.stopped_by == "SIGTERM":
        return 143
    if result.sets == 0:
        print("dvpipe run: no frame set was produced (see the source column above)", file=sys.stderr)
        return 1
    return 0


def _stop_on_signals(runner) -> None:
    """Ctrl-C and SIGTERM (``kill``, ``docker stop``, systemd) end the run at the next frame set, as a limit
    does: outputs written, every frame accounted for, exit 130 / 143. A KeyboardInterrupt raised at an
    arbitrary point could cut a frame set's accounting in half. A second Ctrl-C interrupts at once."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def on_sigint(signum, frame):
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the next Ctrl-C raises KeyboardInterrupt
        runner.request_stop("Ctrl-C", interrupted=True)

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the parent ignores SIGINT
        signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, lambda signum, frame: runner.request_stop("SIGTERM"))


def _check_writable(flag: str, path, is_dir: bool) -> None:
    """``ConfigError`` naming the option when its output folder cannot be created or written."""
    import os

    if not path:
        return
    folder = os.path.abspath(path if is_dir else os.path.dirname(os.path.abspath(path)))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot create the folder {folder} ({e.strerror or e})") from None
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"{flag} {path}: the folder {folder} is not writable")
