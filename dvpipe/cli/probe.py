"""``dvpipe probe``: the local environment, or which step runs where on a DVPP target and why.

Forms::

    dvpipe probe                                   # environment report (exit 0 without Ascend software)
    dvpipe probe DEPLOYMENT.yaml [--soc S --cann V]
    dvpipe probe RIG.yaml [--profile NAME]
    dvpipe probe --camera CAM2=1242x375:png --camera CAM2J=1242x375:jpeg420 --soc Ascend310 --cann 6.0.1
    dvpipe probe --matrix --soc Ascend310P3 [--cann 7.0.0,8.0.0] [--size 1920x1208 ...]
    dvpipe probe ... --json | --require dvpp | --live
    dvpipe probe DEPLOYMENT.yaml --capacity [--fps 12] [--soc S --cann V]   # will the DVPP load fit, how long

The target defaults to the detected one (pyACL / npu-smi and the CANN install-info file); without
one, pass ``--soc`` and ``--cann``. Cameras given with ``--camera`` (or a rig file) are planned with
``--profile`` (default ``bevformer-tiny``) at ``--fidelity`` (default ``fast``: resize right after
decode, where VPC can run it); a deployment uses its own pipeline.

Every verdict carries its confidence (documented at this version / extrapolated from version V / secondary
source / inferred / unknown); a step only dvpipe's fidelity policy declines reads ``declined``, not
``rejected`` (a documented hardware limit), and does not fail ``--require dvpp``.

Exit status: 0; 1 when ``--require dvpp`` finds a step that DVPP implements but does not run here;
2 for bad arguments or configuration; 3 when ``--live`` cannot run (no pyACL, a device pyACL cannot open, or a
``--soc`` / ``--cann`` other than the device's).

``--capacity`` (:mod:`dvpipe.probe.capacity`): per DVPP unit the plan uses, the load at the cameras' frame
rate (``--fps``, else the deployment's) against the unit's documented throughput and channel limits, the
first unit to saturate, the predicted device time per step and frame set, and the CPU path's time measured
here. With ``--live`` it first measures the units on the device (:mod:`dvpipe.probe.capacity_live`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Optional

EXIT_OK, EXIT_REQUIRE, EXIT_USAGE, EXIT_NO_DEVICE = 0, 1, 2, 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..probe.report import DEFAULT_PROFILE, ENCODINGS

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = ("examples:\n"
                "  dvpipe probe\n"
                "  dvpipe probe configs/deployments/kitti-stereo.yaml --soc Ascend310 --cann 6.0.1\n"
                "  dvpipe probe --camera CAM2=1242x375:png --soc Ascend910_9391 --cann 8.1.RC1 --json\n"
                "  dvpipe probe --matrix --soc Ascend310\n"
                "exit status: 0 ok; 1 --require dvpp failed; 2 bad arguments; 3 --live cannot run here")
    p.add_argument("config", nargs="?", metavar="DEPLOYMENT.yaml",
                   help="a deployment YAML (its rig and pipeline are probed) or a rig YAML")
    p.add_argument("--camera", action="append", default=[], metavar="NAME=WxH:ENCODING",
                   help=f"a camera to probe (repeatable); encodings: {', '.join(ENCODINGS)}")
    p.add_argument("--soc", help="SoC name as acl.get_soc_name() returns it (e.g. Ascend310P3); default: detected")
    p.add_argument("--cann", help="CANN version (e.g. 7.0.0, 8.1.RC1); default: detected. With --matrix: a "
                                  "comma-separated list of versions (default: every version the docs were read for)")
    p.add_argument("--driver", help="driver version (keys the --live cache); default: detected")
    p.add_argument("--profile", help=f"profile whose stages are probed for --camera / rig input (default "
                                     f"{DEFAULT_PROFILE})")
    p.add_argument("--fidelity", choices=("fast", "reference"), default=None,
                   help="the fidelity planned (default: fast for --camera / rig input, resize before normalise; a "
                        "deployment's own pipeline.fidelity)")
    p.add_argument("--json", action="store_true", help="print JSON (schema in docs/probe.md)")
    p.add_argument("--require", choices=("dvpp",), help="exit 1 when any step that DVPP implements falls back")
    p.add_argument("--matrix", action="store_true",
                   help="resolution x encoding x CANN-version grid for one SoC (migration planning)")
    p.add_argument("--size", action="append", default=[], metavar="WxH",
                   help="with --matrix: a size to probe instead of the built-in list (repeatable, e.g. --size 1920x1208)")
    p.add_argument("--live", action="store_true",
                   help="run each DVPP step on synthetic images on this machine's device (needs pyACL) and cache "
                        "the results next to the documented verdicts")
    p.add_argument("--capacity", action="store_true",
                   help="forecast the DVPP load against each unit's documented throughput and channel limits, and the "
                        "predicted device time per frame set beside the CPU path's measured time (with --live: "
                        "measure the units on this device first)")
    p.add_argument("--fps", type=float, metavar="RATE",
                   help="with --capacity: every camera's frame rate (default: each camera's source in the deployment)")
    p.add_argument("--no-cpu", action="store_true", help="with --capacity: do not measure the CPU path here")
    p.add_argument("--cache", metavar="PATH", help="the --live cache file (default ~/.cache/dvpipe/dvpp-live.json)")
    p.add_argument("--no-sources", action="store_true", help="leave the source URLs out of the table")
    p.add_argument("--colour", "--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the table (default: only on a terminal, and not when NO_COLOR is set)")


def _use_colour(mode: str, stream: Any) -> bool:
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _emit(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _environment(args: argparse.Namespace) -> int:
    from ..probe.environment import detect

    rep = detect()
    if args.json:
        _emit(json.dumps({"environment": rep.to_dict()}, indent=1))
        return EXIT_OK
    _emit(str(rep))
    if rep.soc and rep.cann_version:
        _emit(f"\ntarget: {rep.soc} (CANN {rep.cann_version}); probe a rig with "
              "`dvpipe probe DEPLOYMENT.yaml` or `dvpipe probe --camera NAME=WxH:ENCODING`")
    else:
        _emit("\nno Ascend target detected here; to check cameras against one, pass it: "
              "`dvpipe probe --camera CAM=1600x900:jpeg420 --soc Ascend310P3 --cann 7.0.0`")
    return EXIT_OK


def resolve_target(soc: Optional[str], cann: Optional[str], driver: Optional[str] = None):
    """The :class:`dvpipe.Target` from the flags, filling what is missing from the local machine."""
    from ..errors import ConfigError
    from ..target import Target

    why = []
    if not soc:
        from ..probe.environment import detect_soc

        soc, how = detect_soc()
        if not soc:
            why.append(f"no SoC detected ({how})")
    if not cann:
        from ..probe.environment import find_cann_version

        cann, where = find_cann_version()
        if not cann:
            why.append(f"no CANN version detected ({where})")
    if why:
        raise ConfigError("no DVPP target: " + "; ".join(why) + ". Pass the target, e.g. --soc Ascend310P3 "
                          "--cann 7.0.0 (SoC as acl.get_soc_name() returns it)")
    assert soc and cann  # else why is not empty
    if driver is None:
        from ..probe.live import detect_driver

        driver = detect_driver()[0]
    return Target(soc, cann, driver)


def load_input(path: str, say_left_out: bool = True) -> tuple[Any, Optional[str], Optional[tuple], Optional[str],
                                                               str]:
    """``(rig, profile, stages, fidelity, kind)`` from a deployment or rig YAML.

    A deployment is loaded with :func:`dvpipe.deploy.load_deployment`; when only its sources,
    outputs or model are unusable here (files that exist only on the device), its rig and pipeline
    are still probed, and (``say_left_out``) stderr says what was left out.
    """
    from ..deploy import DeploymentError, load_deployment
    from ..errors import ConfigError
    from ..types import Rig, read_yaml

    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a deployment (rig:, pipeline:) or a rig (cameras:) mapping")
    if "rig" not in data and "cameras" in data:
        return Rig.from_yaml_data(data, path), None, None, None, "rig"
    if "rig" not in data:
        raise ConfigError(f"{path}: neither a deployment (no 'rig' key) nor a rig (no 'cameras' list)")
    try:
        dep = load_deployment(path)
    except DeploymentError as e:
        local = ("source", "cameras", "outputs", "model", "run", "sync", "latency")
        if not all(p.split(".")[0].split("[")[0] in local for p, _m in e.errors):
            raise
        reduced = {k: v for k, v in data.items() if k not in local}
        reduced["source"] = {"type": "synthetic"}
        try:
            dep = load_deployment(reduced, base_dir=os.path.dirname(os.path.abspath(path)))
        except DeploymentError:
            raise e from None
        if say_left_out:  # probed without them: said, not passed over silently
            (first, why), n = e.errors[0], len(e.errors)
            sections = ", ".join(sorted({p.split(".")[0].split("[")[0] for p, _m in e.errors}))
            print(f"dvpipe probe: {path}: rig and pipeline probed without its {sections} ({n} problem"
                  f"{'s' if n != 1 else ''} there, e.g. {first}: {why}; `dvpipe validate` lists them)",
                  file=sys.stderr)
    p = dep.pipeline
    return dep.rig, p.profile, (tuple(p.stages) if p.stages else None), p.fidelity, "deployment"


def main(args: argparse.Namespace) -> int:
    from ..errors import ConfigError

    if getattr(args, "size", None) and not args.matrix:
        raise ConfigError("--size sets the sizes of --matrix; for one camera use --camera NAME=WxH:ENCODING")
    if (args.fps is not None or args.no_cpu) and not args.capacity:
        raise ConfigError("--fps and --no-cpu go with --capacity")
    if args.fps is not None and not (0 < args.fps <= 10000):
        raise ConfigError(f"--fps {args.fps:g}: give the cameras' frame rate in frames per second (0 < fps <= 10000)")
    if args.matrix:
        if args.config or args.camera:
            raise ConfigError("--matrix probes a fixed grid of sizes and encodings; give it --soc (and optionally "
                              "--cann), not cameras")
        return _matrix(args)
    if not args.config and not args.camera:
        if args.live or args.require or args.capacity:
            raise ConfigError("nothing to probe: give DEPLOYMENT.yaml or --camera NAME=WxH:ENCODING")
        if args.soc or args.cann:
            raise ConfigError("--soc/--cann need something to check: DEPLOYMENT.yaml, --camera NAME=WxH:ENCODING "
                              "or --matrix")
        return _environment(args)
    return _cameras(args)


def _cameras(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..probe.report import DEFAULT_FIDELITY, build_report, parse_camera
    from ..profiles import PROFILES, camera_order_problem

    if args.profile and args.profile not in PROFILES:
        raise ConfigError(f"--profile {args.profile}: unknown profile; known: {', '.join(PROFILES)}")
    cams: list = []
    profile, stages, fidelity, kind = args.profile, None, args.fidelity, "cameras"
    if args.config:
        # --capacity reads the sources' rates itself and reports their problems as errors
        rig, cfg_profile, cfg_stages, cfg_fidelity, kind = load_input(args.config, say_left_out=not args.capacity)
        cams.extend(rig.cameras)
        if kind == "deployment":
            if args.profile:
                raise ConfigError("--profile applies to --camera and rig input; a deployment brings its own pipeline")
            profile, stages = cfg_profile, cfg_stages
            fidelity = args.fidelity or cfg_fidelity
    names = {c.name for c in cams}
    for text in args.camera:
        cam = parse_camera(text)
        if cam.name in names:
            raise ConfigError(f"--camera {text}: camera {cam.name!r} is already defined")
        names.add(cam.name)
        cams.append(cam)
    soc, cann = args.soc, args.cann
    if kind == "deployment" and not (soc or cann):  # the deployment's own target, when it names one
        from ..types import read_yaml

        t = read_yaml(args.config).get("target")
        if isinstance(t, dict) and t.get("soc") and t.get("cann"):
            soc, cann = str(t["soc"]), str(t["cann"])
    if args.live:  # before the target: without a device --live cannot run, whatever target is asked for
        from ..probe import live

        status = live.available()
        if not status.ok:
            sys.stderr.write(f"dvpipe probe: --live cannot run here: {status.reason}\n")
            return EXIT_NO_DEVICE
    target = resolve_target(soc, cann, args.driver)
    cache = None
    if args.live:
        mismatch = live.target_mismatch(target)
        if mismatch:
            sys.stderr.write(f"dvpipe probe: --live cannot run for this target: {mismatch}\n")
            return EXIT_NO_DEVICE
        cache = live.LiveCache.load(args.cache)
        try:
            live.run_live(cams, target, cache, profile=profile, stages=stages, fidelity=fidelity or DEFAULT_FIDELITY)
            if args.capacity:
                from ..probe.capacity_live import measure_capacity

                measure_capacity(cams, target, cache, profile=profile, stages=stages,
                                 fidelity=fidelity or DEFAULT_FIDELITY)
        finally:
            cache.save()  # what was measured before a failure is kept
    elif args.cache:
        from ..probe import live

        cache = live.LiveCache.load(args.cache)
    rep = build_report(cams, target, profile=profile, stages=stages, fidelity=fidelity or DEFAULT_FIDELITY,
                       empirical=cache)
    order = camera_order_problem(profile, [c.name for c in cams]) if profile else None
    if order:  # planned per camera all the same: the offload answers hold, the run refuses the order
        sys.stderr.write(f"dvpipe probe: warning: {order}; `dvpipe run` refuses this rig\n")
    if args.capacity:
        return _capacity(args, cams, target, rep, kind, profile, stages, fidelity, cache)
    if args.json:
        _emit(json.dumps(rep.to_dict(), indent=1))
    else:
        _emit(rep.render(colour=_use_colour(args.colour, sys.stdout), sources=not args.no_sources))
    return _exit_status(args, rep)


def _exit_status(args: argparse.Namespace, rep: Any) -> int:
    """The probe's exit status once its report is printed: ``--require`` failures (listed on stderr), then
    cameras that could not be planned."""
    if args.require:
        failures = rep.require(args.require)
        if failures:
            sys.stderr.write(f"dvpipe probe: --require {args.require}: {len(failures)} step(s) do not run on DVPP:\n")
            for line in failures:
                sys.stderr.write(f"  {line}\n")
            return EXIT_REQUIRE
    if rep.errors:
        sys.stderr.write("dvpipe probe: " + "; ".join(f"{cam} could not be planned: {err}" for cam, err in rep.errors)
                         + "\n")
        return EXIT_USAGE
    return EXIT_OK


def _matrix(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..probe.matrix import build_matrix

    if not args.soc:
        from ..probe.environment import detect_soc

        soc, how = detect_soc()
        if not soc:
            raise ConfigError(f"--matrix needs a SoC: pass --soc (e.g. --soc Ascend310P3); none detected ({how})")
    else:
        soc = args.soc
    versions = [v.strip() for v in args.cann.split(",")] if args.cann else None
    from ..probe.matrix import SIZES
    from ..types import parse_wxh

    sizes = [parse_wxh(t, "--size") for t in args.size] or list(SIZES)
    m = build_matrix(soc, versions, sizes=sizes, profile=args.profile, fidelity=args.fidelity)
    if args.json:
        _emit(json.dumps(m.to_dict(), indent=1))
    else:
        _emit(m.render(colour=_use_colour(args.colour, sys.stdout)))
    if args.require and m.fallback_count(policy=False):
        return EXIT_REQUIRE
    return EXIT_OK


def _capacity(args: argparse.Namespace, cams: list, target: Any, rep: Any, kind: str, profile: Optional[str],
              stages: Any, fidelity: Optional[str], cache: Any) -> int:
    """``--capacity``: the forecast of the plan ``rep`` (see :mod:`dvpipe.probe.capacity`)."""
    from ..probe import capacity
    from ..probe.capacity_inputs import first_frames, rates_from_deployment
    from ..probe.capacity_text import render
    from ..probe.report import build_report

    notes = []
    if any(s.status == "declined" for c in rep.cameras for s in c.steps) and not args.fidelity:
        notes.append(f"the plan at fidelity {rep.fidelity} keeps DVPP steps off DVPP by policy (declined); the "
                     "forecast is for fidelity fast, where they run on DVPP (--fidelity to choose)")
        rep = build_report(cams, target, profile=profile, stages=stages, fidelity="fast", empirical=cache)
    if args.fps is not None:
        rates, how = {c.name: args.fps for c in cams}, "--fps"
    elif kind == "deployment":
        rates, how = rates_from_deployment(args.config, [c.name for c in cams])
    else:
        rates, how = {c.name: None for c in cams}, "no --fps given"
    unrated = [name for name, r in rates.items() if r is None]
    if unrated:
        who = "" if len(unrated) == len(rates) else f" for {', '.join(unrated)}"
        notes.append(f"no frame rate{who} ({how}): pass --fps to judge the load; the per-unit ceilings and times "
                     "stand")
    aipp = False
    if kind == "deployment":
        from ..types import read_yaml

        pm = read_yaml(args.config).get("pipeline") or {}
        bk = pm.get("backends") if isinstance(pm, dict) else None
        aipp = any(str(b).startswith("aipp") for b in (bk if isinstance(bk, list) else [bk]))
    measured = {}
    if cache is not None:
        from ..probe.capacity_live import measured_figures

        measured = measured_figures(cache, target)
    kept: dict[str, list[str]] = {}
    for c in rep.cameras:
        off = [s for s in c.steps if not s.ok and s.status != "declined"]
        if off:
            kept.setdefault(f"{off[0].stage} stays on {off[0].backend} ({off[0].status}: {off[0].reason})",
                            []).append(c.name)
    notes += [f"{', '.join(names)}: {why}; not in the forecast" for why, names in kept.items()]
    items = capacity.work_items(rep, cams, target, profile=profile, stages=stages, fidelity=rep.fidelity, fps=rates,
                                aipp=aipp)
    fc = capacity.forecast(items, target, measured=measured, notes=notes,
                           fps_source=how if len(unrated) < len(rates) else "", fps=rates)
    if not args.no_cpu:
        from ..probe.capacity_cpu import measure_cpu_path

        frames = first_frames(args.config) if kind == "deployment" else {}
        fc.cpu = measure_cpu_path(cams, target, profile=profile, stages=stages, fidelity=rep.fidelity, frames=frames)
    if args.json:
        _emit(json.dumps(dict(rep.to_dict(), capacity=fc.to_dict()), indent=1))
    else:
        _emit(render(fc, sources=not args.no_sources))
    return _exit_status(args, rep)
