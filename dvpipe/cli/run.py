"""``dvpipe run [DEPLOYMENT.yaml]``: run a deployment, show progress, per-step latency and the frame account.

Without a deployment it runs the bundled sample (``samples/deployment.yaml``: the nuScenes-like
6-camera sample scene through bevformer-tiny on the best available backend). An installed dvpipe
carries it as package data (``dvpipe/samples/``, copied there by ``setup.py``); a source checkout
uses the repository's ``samples/``. Outputs go to ``out/sample`` under the working directory.

Output: the deployment, the plan, a progress line on stderr (with an ETA when the run's length is
known), then the result line, the frame account and the latency table. ``-q`` prints only the result
line (with end-to-end p50/p99 and the drop count) on stdout; warnings and errors still go to stderr.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from ..errors import ConfigError
from ._stderr import LibraryMessages
from ._stdout import PipeSafe

_PACKAGE = Path(__file__).resolve().parents[1]
#: the bundled sample: package data in an installed dvpipe, else the source checkout's samples/.
SAMPLE = next((p for p in (_PACKAGE / "samples" / "deployment.yaml", _PACKAGE.parent / "samples" / "deployment.yaml")
               if p.is_file()), _PACKAGE / "samples" / "deployment.yaml")


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
    p.add_argument("--profiler-ranges", action="store_true",
                   help="also emit every step span as a range to the profiler in use (msproftx on Ascend, "
                        "NVTX on CUDA, torch.profiler.record_function); latency.profiler_ranges: true in YAML; "
                        "combine the exports with `dvpipe trace merge`")
    _add_exporter_flags(p, set())  # each exporter's own flag (--json, --trace, --plots, --report, --prometheus)
    p.add_argument("--no-outputs", action="store_true", help="write no files")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="print only the result line (warnings and errors still go to stderr)")
    p.parse_known_args = _with_plugin_flags(p)  # type: ignore[method-assign]


def _add_exporter_flags(p: argparse.ArgumentParser, done: set) -> None:
    """Add the flag of every registered exporter not in ``done`` (names; updated)."""
    from ..deploy.exporters import EXPORTERS

    for name, cls in EXPORTERS.items():
        if name not in done:
            done.add(name)
            if cls.flag is not None:
                p.add_argument(cls.flag.name, metavar=cls.flag.metavar, dest=cls.flag.dest, help=cls.flag.help)


def _with_plugin_flags(p: argparse.ArgumentParser):
    """``p.parse_known_args`` that, when the command line has flags the parser does not know, first
    imports the deployment's ``plugins:`` (the exporters they register bring their flags) and parses
    again; a flag of a plugin exporter is then given after the deployment's path."""
    from ..deploy.exporters import EXPORTERS

    parse = p.parse_known_args
    done = set(EXPORTERS)

    def parse_with_plugins(args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        if "-h" in argv or "--help" in argv:  # --help exits while parsing: the plugins' flags must be there first
            path = _positional(p, argv)
            if path is not None and os.path.isfile(path):
                try:
                    if _import_plugins_of(path):
                        _add_exporter_flags(p, done)
                except ConfigError:
                    pass  # the run reports the plugin's problem; --help shows what loaded
        ns, extras = parse(args, namespace)
        if extras and getattr(ns, "deployment", None) and _import_plugins_of(ns.deployment):
            _add_exporter_flags(p, done)
            ns, extras = parse(args, namespace)
        return ns, extras

    return parse_with_plugins


def _positional(p: argparse.ArgumentParser, argv: list) -> Optional[str]:
    """The first positional argument of ``argv`` (the deployment's path), skipping the values of options that
    take one (``--json out.json dep.yaml``: ``dep.yaml``), or None."""
    takes_value = {o for a in p._actions if a.option_strings and a.nargs != 0 for o in a.option_strings}
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg in takes_value  # "--json=out.json" carries its value
        else:
            return arg
    return None


def _import_plugins_of(path: str) -> bool:
    """Import the modules the deployment at ``path`` lists under ``plugins:``; False when there are
    none or the file cannot be read (``load_deployment`` reports its problems later)."""
    from ..deploy._validate import _V
    from ..deploy.config import _import_plugins
    from ..types import read_yaml

    try:
        data = read_yaml(path, "deployment file")
    except (ConfigError, OSError):
        return False
    plugins = data.get("plugins") if isinstance(data, dict) else None
    if not plugins:
        return False
    v = _V(Path(path).resolve().parent)
    _import_plugins(plugins, v)
    if v.errors:  # its flags would read as unknown: say why they are missing
        raise ConfigError("; ".join(f"{key}: {message}" for key, message in v.errors))
    return True


def parse_host_port(text: str, flag: str = "--prometheus") -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPv6]:PORT`` -> ``(host, port)`` (the ``prometheus`` exporter's)."""
    from ..deploy._builtin_exporters import parse_host_port as parse

    return parse(text, flag)


def exporter_flags(args: argparse.Namespace) -> dict[str, tuple[str, Any]]:
    """``{exporter name: (flag as given, its options)}`` of each exporter flag on the command line."""
    from ..deploy.exporters import EXPORTERS

    out: dict[str, tuple[str, Any]] = {}
    for name, cls in EXPORTERS.items():
        value = getattr(args, cls.flag.dest, None) if cls.flag is not None else None
        if value is not None:
            assert cls.flag is not None
            out[name] = (f"{cls.flag.name} {value}", cls.from_flag(value))
    return out


def _check_opencv() -> None:
    """One line when no OpenCV imports; a warning when two OpenCV distributions share one cv2."""
    from importlib import metadata

    flavours = ("opencv-python", "opencv-python-headless", "opencv-contrib-python", "opencv-contrib-python-headless")
    installed = []
    for name in flavours:
        try:
            installed.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    if len(installed) > 1:
        print(f"warning: {len(installed)} OpenCV distributions share one cv2 folder ({', '.join(installed)}); "
              "keep one: pip uninstall the others, then pip install --force-reinstall the one you keep",
              file=sys.stderr)
    try:
        import cv2  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"OpenCV does not import ({e}); install one flavour: pip install opencv-python-headless "
                          "(servers) or opencv-python (GUI, mmcv)") from None


def _check_limit(value, flag: str, key: str, maximum: float) -> None:
    """``--frames`` / ``--duration`` under the rules of the deployment key they replace (``key``)."""
    from ..deploy._validate import _number_problem

    if value is not None:
        problem = _number_problem(value, minimum=0, exclusive_min=True, maximum=maximum)
        if problem:
            raise ConfigError(f"{flag} (as {key}): {problem}")


def main(args: argparse.Namespace) -> int:
    from ..deploy import Runner, load_deployment
    from ..deploy.config import output_problems, parse_backends
    from ..deploy.exporters import EXPORTERS, run_exporter_options
    from ..deploy._progress import ProgressLine

    _check_opencv()
    path = args.deployment
    if path is None:
        if not SAMPLE.is_file():
            raise ConfigError(f"no deployment given and the bundled sample ({SAMPLE}) is not there; "
                              "pass a deployment YAML (see configs/deployments/)")
        path = str(SAMPLE)
    from ..deploy._validate import MAX_FRAMES, YEAR_S

    _check_limit(args.frames, "--frames", "run.frames", MAX_FRAMES)
    _check_limit(args.duration, "--duration", "run.duration_s", YEAR_S)
    dep = load_deployment(path)
    run_changes: dict[str, Any] = {}
    if args.frames is not None:
        run_changes.update(frames=args.frames, loop=True, duration_s=None)
    if args.duration is not None:
        run_changes.update(duration_s=args.duration)
        if args.frames is None:
            run_changes.update(frames=None, loop=True)
    if args.realtime:
        run_changes.update(realtime=True)
    if args.profiler_ranges:
        dep = replace(dep, latency=replace(dep.latency, profiler_ranges=True))
    if run_changes:
        dep = dep.with_run(**run_changes)
    flags = exporter_flags(args)  # each exporter's flag -> its options, merged over the deployment's
    if args.soc or args.cann:
        from ..target import Target

        if not (args.soc and args.cann):
            raise ConfigError("--soc and --cann go together (e.g. --soc Ascend310P3 --cann 7.0.0)")
        dep = replace(dep, target=Target(args.soc, args.cann))
    for flag, value in (("--backends", args.backends), ("--out", args.out)):
        if value is not None and not value.strip():  # an empty shell variable: not the same as leaving it out
            raise ConfigError(f"{flag} is empty (leave it out for the deployment's own value)")
    writing = [flag for name, (flag, _o) in flags.items() if EXPORTERS[name].writes_files]
    if args.no_outputs and writing:  # --no-outputs wins (its paths are still checked), said rather than silent
        print(f"dvpipe run: --no-outputs: not written: {', '.join(writing)}", file=sys.stderr)
    if args.backends:
        backends = parse_backends([b.strip() for b in args.backends.split(",") if b.strip()], "--backends")
        dep = replace(dep, pipeline=replace(dep.pipeline, backends=backends),
                      cameras=tuple(replace(c, backends=None) for c in dep.cameras))
    if args.out:  # the outputs' relative paths follow the folder
        dep = dep.with_outputs(dir=os.path.abspath(args.out))
        _check_writable(f"--out {args.out}", os.path.abspath(args.out), create=not args.no_outputs)
    given = {name: options for name, (_flag, options) in flags.items()}
    resolved = run_exporter_options(dep.outputs, given)  # the flags' options checked as the YAML's
    for name, (flag, _options) in flags.items():  # before the run, not after it
        for folder in EXPORTERS[name].output_folders(resolved[name]):  # a flag's paths are absolute
            _check_writable(flag, os.path.join(dep.outputs.dir or os.getcwd(), folder), create=not args.no_outputs)
    if not args.no_outputs:
        problems = output_problems(dep.outputs, given)
        if problems:  # the deployment's own output folders, before the first frame set
            raise ConfigError("outputs cannot be written: " + "; ".join(f"{k}: {m}" for k, m in problems))
    out = PipeSafe(sys.stdout)  # `dvpipe run | head -1`: the reader may go away; the run goes on
    quiet = args.quiet
    for w in dep.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if not quiet:
        print(dep.describe(), file=out)
    held = LibraryMessages()  # decoders' C-level lines and Python warnings: counted, summarised below
    with held:
        progress = None if quiet or sys.stderr is None else ProgressLine(dep.run.frames, dep.run.duration_s,
                                                                         stream=sys.stderr)
        opening = OpeningLine(len(dep.cameras)) if len(dep.cameras) >= OPENING_LINE_FROM and not quiet else None
        runner = Runner(dep, progress=progress, outputs=given, write_outputs=not args.no_outputs, opening=opening)
        if dep.latency.profiler_ranges and getattr(runner.pipe, "profiler_ranges", None) is None:
            print("warning: profiler ranges asked for, but no profiler API is loaded here (pyACL's acl, NVTX via a "
                  "CUDA torch or the nvtx package, torch): no ranges are emitted", file=sys.stderr)
        for note in runner.budget_notes:
            print(f"warning: {note}", file=sys.stderr)
        if runner.backend_notes and not quiet:  # why "auto" did not pick the others (first clause of each reason)
            notes = "; ".join(n.split("; ")[0] for n in runner.backend_notes)
            print(f"backends auto: skipped {notes}", file=out)
        if not quiet:
            print(runner.pipe.plan, file=out)
        out.flush()
        _stop_on_signals(runner)
        result = runner.run()
        if progress is not None:
            progress.close(runner)
    held_back = held.summary()
    if held_back:
        print(held_back, file=sys.stderr)
    stop = "interrupted (Ctrl-C)" if result.interrupted else f"stopped: {_stop_reason(result.stopped_by, args)}"
    rate = result.sets / result.elapsed_s if result.elapsed_s > 0 else 0.0
    line = f"{result.sets} frame sets in {result.elapsed_s:.2f} s ({rate:.1f} sets/s); {stop}"
    failed_outputs = {k: v for k, v in result.outputs.items() if str(v).startswith("not written")}
    model_errors = (f"model errors: {result.accounting.model_errors}; first: {result.model_error}"
                    if result.model_error else None)
    if quiet:
        print(line + _quiet_tail(result), file=out)
        if result.sets == 0:  # the run failed: the frame account is the error message's detail
            print(result.summary(), file=out)
        if model_errors:  # an error: on stderr, as -q promises
            print(model_errors, file=sys.stderr)
        return _exit_code(result, failed_outputs)
    print("\n" + line, file=out)
    print(result.summary(), file=out)
    if result.stats.batches:
        print("", file=out)
        print(result.stats.report(title="latency (ms)"), file=out)
        if runner.pictures_per_job > 1:
            print(f"run.pictures_per_job {runner.pictures_per_job} ({runner.pictures_per_job_reason}): sets started "
                  f"{runner.pictures_per_job} ahead, so a set's latency includes the others' work; "
                  "run.pictures_per_job: 1 or a latency budget measures each set alone", file=out)
    elif result.sets:
        print(f"\nlatency: all {result.sets} frame sets were warm-up (latency.warmup_sets); none measured", file=out)
    if model_errors:
        print(model_errors, file=out)
    if result.outputs:
        print("\noutputs:", file=out)
        for k, v in result.outputs.items():
            if not k.startswith("plot_"):
                print(f"  {k:<8} {v}", file=out)
    else:
        print("\noutputs: none written", file=out)
    return _exit_code(result, failed_outputs)


#: from this many cameras, ``dvpipe run`` shows how many sources have opened (stderr)
OPENING_LINE_FROM = 16


class OpeningLine:
    """``opening sources: K/N`` on stderr while the cameras of a large deployment open (in parallel,
    :data:`dvpipe.deploy.runner.OPEN_CONCURRENCY` at a time): redrawn in place on a terminal, else a
    line at most every ``every_s`` seconds, and always the last one."""

    def __init__(self, total: int, stream=None, every_s: float = 2.0, clock=None):
        import threading

        from ..latency.clock import now_ns

        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every_ns = int((0.1 if self.tty else every_s) * 1e9)
        self.clock = clock or now_ns
        self._last: Optional[int] = None
        self._lock = threading.Lock()

    def __call__(self, runner) -> None:
        with self._lock:
            done, now = runner.sources_opened, self.clock()
            if done < self.total and self._last is not None and now - self._last < self.every_ns:
                return
            self._last = now
            failed = sum(1 for h in runner.acc.health.values() if h.state == "failed")
            line = f"opening sources: {done}/{self.total}" + (f" ({failed} failed)" if failed else "")
            end = "\n" if done >= self.total or not self.tty else ""
            try:
                self.stream.write(("\r" if self.tty else "") + line + end)
                self.stream.flush()
            except (OSError, ValueError):  # a closed stderr must not stop a reader thread
                pass


def _stop_reason(stopped_by: str, args: argparse.Namespace) -> str:
    """The runner names limits as flags; say ``run.frames`` when the limit came from the deployment."""
    if stopped_by.startswith("--frames") and args.frames is None:
        return "run.frames " + stopped_by.split(" ", 1)[1] + " (the deployment's limit)"
    if stopped_by.startswith("--duration") and args.duration is None:
        return "run.duration_s " + stopped_by.split(" ", 1)[1] + " (the deployment's limit)"
    return stopped_by


def _quiet_tail(result) -> str:
    """``; end to end p50 X ms, p99 Y ms; N frames, D dropped`` for the ``-q`` result line."""
    t = result.accounting.totals()
    tail = ""
    e2e = result.stats.end_to_end("capture")
    if not e2e.count:
        e2e = result.stats.end_to_end("arrival")
    if e2e.count and e2e.p50_ns is not None:
        tail += f"; end to end p50 {e2e.p50_ns / 1e6:.2f} ms, p99 {e2e.p99_ns / 1e6:.2f} ms"
    return tail + f"; {t['entered']} frames, {t['dropped']} dropped"


def _exit_code(result, failed_outputs: Optional[dict] = None) -> int:
    """130 Ctrl-C, 143 SIGTERM, 1 when the run emitted nothing (no frame set, or every frame dropped:
    one line on stderr says why) or an output was not written (a line on stderr each), else 0."""
    for name, why in (failed_outputs or {}).items():
        print(f"dvpipe run: output {name} {why}", file=sys.stderr)
    if result.interrupted:
        return 130
    if result.stopped_by == "SIGTERM":
        return 143
    if result.sets == 0:
        print("dvpipe run: no frame set was produced (see the source column above)", file=sys.stderr)
        return 1
    t = result.accounting.totals()
    if t["emitted"] == 0:
        print(f"dvpipe run: nothing was emitted: {_nothing_emitted(result.accounting)}", file=sys.stderr)
        return 1
    return 1 if failed_outputs else 0


def _nothing_emitted(acc) -> str:
    """``12 frames in, every one dropped (corrupt 10, wrong_size 2); first: ...`` (one line)."""
    t = acc.totals()
    if not t["entered"]:
        return "no frame entered the run (see the source column above)"
    by: dict[str, int] = {}
    for c in acc.cameras:
        for cat, n in acc.dropped[c].items():
            by[cat] = by.get(cat, 0) + n
    reasons = ", ".join(f"{cat} {n}" for cat, n in sorted(by.items(), key=lambda kv: -kv[1]))
    top = max(by, key=lambda k: by[k]) if by else None
    example = next((text for (cam, cat), text in acc.examples.items() if cat == top and text), "")
    return (f"{t['entered']} frames in, every one dropped ({reasons})"
            + (f"; {top}: {' '.join(example.split())[:200]}" if example else ""))


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


def _check_writable(flag: str, folder: str, create: bool) -> None:
    """``ConfigError`` naming the flag (``--plots DIR``) when the folder it writes into cannot be created
    or written; ``create``: create it (exporters may expect their folder), else only check (``--no-outputs``)."""
    from ..deploy._outputs import _folder_problem

    problem = _folder_problem(folder)
    if problem is not None:
        raise ConfigError(f"{flag}: {problem}")
    if create:
        os.makedirs(folder, exist_ok=True)
