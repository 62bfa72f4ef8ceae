"""``dvpipe validate DEPLOYMENT.yaml ...``: check deployments without running them.

Reports every problem of each file at once, one line each with its key path
(``cameras[2].source.uri: file not found: ...``): the checks of :func:`~dvpipe.deploy.load_deployment`,
plus those ``dvpipe run`` would otherwise meet later: each file source's codec against its camera's
encoding (container headers only; image folders: every file's size and their first image's header),
the output folders creatable and writable (nothing is left behind), the planned batch within
``decode.max_pixels`` per camera and, with its output buffers, within ``run.memory_budget_mb``.
Then it plans the pipeline (no source read, no hardware touched) unless ``--no-plan``. Exit status
0 when every file is valid, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("deployments", nargs="+", metavar="DEPLOYMENT.yaml", help="deployment files to check")
    plan = p.add_mutually_exclusive_group()
    plan.add_argument("--no-plan", action="store_true", help="check the YAML only, do not plan the pipeline")
    plan.add_argument("--plan", action="store_true", help="print the plan of each valid deployment")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def check(path: str, plan: bool = True) -> dict:
    """``{"path", "ok", "errors": [[key path, message]], "warnings", "plan", "pictures_per_job"}`` for one
    deployment file (``pictures_per_job``: ``{"value", "why"}`` as a run would resolve it, once planned).

    Never raises for a bad deployment: a failure of dvpipe itself while checking is reported as one
    problem line too (naming the exception, to be reported).
    """
    result: dict = {"path": path, "ok": False, "errors": [], "warnings": [], "plan": None, "summary": None}
    try:
        result["errors"] = _problems(path, plan, result)
    except Exception as e:  # noqa: BLE001 - a bug in a check must still end as one line, not a traceback
        result["errors"] = [["", f"dvpipe failed while checking this file ({type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:300]}); please report it"]]
    result["ok"] = not result["errors"]
    return result


def _problems(path: str, plan: bool, result: dict) -> list[list[str]]:
    """Every problem of the deployment ``path`` as ``[key path, message]``; fills ``result``'s other keys."""
    from ..deploy import DeploymentError, load_deployment
    from ..deploy.config import output_problems
    from ..errors import DvpipeError

    try:
        dep = load_deployment(path, probe=True)
    except DeploymentError as e:
        return [list(x) for x in e.errors]
    result["warnings"] = list(dep.warnings)
    result["summary"] = dep.describe()
    problems = [list(x) for x in output_problems(dep.outputs)]
    if problems or not plan:
        return problems
    too_big = _output_too_large(dep)
    if too_big:
        return [["pipeline", too_big]]
    from ..deploy._budget import pictures_per_job
    from ..deploy._assembly import step_budget_notes
    from ..deploy.runner import build_pipeline

    try:
        pipe, notes = build_pipeline(dep)
    except DvpipeError as e:
        return [["pipeline", " ".join(str(e).split())]]
    except Exception as e:  # noqa: BLE001 - user stages (module:Class) may raise anything while planning
        return [["pipeline", f"planning failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"]]
    result["plan"] = str(pipe.plan)
    result["backend_notes"] = notes
    n, why = pictures_per_job(dep, pipe)
    result["pictures_per_job"] = {"value": n, "why": why}
    result["warnings"] += step_budget_notes(dep, pipe.plan)
    getattr(pipe, "close", lambda: None)()
    return []


def _output_too_large(dep) -> str | None:
    """Why the planned batch would be too large to allocate (per camera more than
    ``decode.max_pixels``, or cameras x output x buffers above ``run.memory_budget_mb``), or None.
    Plans on the CPU only (no buffer is made); a stage list that the CPU cannot plan is left to the
    real planning."""
    from ..deploy._budget import memory_problem, plan_output

    planned = plan_output(dep)
    if planned is None:
        return None
    out, dtype = planned
    h, w = int(out[-2]), int(out[-1])
    if h * w > dep.decode.max_pixels:
        return (f"the stages make {w}x{h} = {h * w} pixels per camera, more than decode.max_pixels "
                f"({dep.decode.max_pixels}); check the resize/pad sizes")
    return memory_problem(dep, out, dtype)


def main(args: argparse.Namespace) -> int:
    results = [check(p, plan=not args.no_plan) for p in args.deployments]
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
        return 0 if all(r["ok"] for r in results) else 1
    for r in results:
        if r["ok"]:
            print(f"ok: {r['path']}")
            print("\n".join("  " + line for line in r["summary"].splitlines()[1:]))
            if r.get("pictures_per_job"):
                ppj = r["pictures_per_job"]
                print(f"  run.pictures_per_job: {ppj['value']} ({ppj['why']})")
            if args.plan and r["plan"]:
                print("\n".join("  " + line for line in r["plan"].splitlines()))
        else:
            n = len(r["errors"])
            print(f"invalid: {r['path']} ({n} problem{'s' if n != 1 else ''})")
            for key, msg in r["errors"]:
                print(f"  {key}: {msg}" if key else f"  {msg}")
        for w in r["warnings"]:
            print(f"  warning: {w}")
    return 0 if all(r["ok"] for r in results) else 1
