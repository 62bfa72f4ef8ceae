"""``dvpipe validate DEPLOYMENT.yaml ...``: check deployments without running them.

Reports every problem of each file at once, with its key path (``cameras[2].source.uri: file not
found: ...``), then plans the pipeline (no source is opened, no hardware touched) unless
``--no-plan``. Exit status 0 when every file is valid, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("deployments", nargs="+", metavar="DEPLOYMENT.yaml", help="deployment files to check")
    p.add_argument("--no-plan", action="store_true", help="check the YAML only, do not plan the pipeline")
    p.add_argument("--plan", action="store_true", help="print the plan of each valid deployment")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def check(path: str, plan: bool = True) -> dict:
    """``{"path", "ok", "errors": [[key path, message]], "warnings", "plan"}`` for one deployment file."""
    from ..deploy import DeploymentError, load_deployment
    from ..errors import DvpipeError

    result = {"path": path, "ok": False, "errors": [], "warnings": [], "plan": None, "summary": None}
    try:
        dep = load_deployment(path)
    except DeploymentError as e:
        result["errors"] = [list(x) for x in e.errors]
        return result
    result["warnings"] = list(dep.warnings)
    result["summary"] = dep.describe()
    if plan:
        from ..deploy.runner import build_pipeline

        try:
            pipe, notes = build_pipeline(dep)
        except DvpipeError as e:
            result["errors"] = [["pipeline", str(e)]]
            return result
        result["plan"] = str(pipe.plan)
        result["backend_notes"] = notes
        getattr(pipe, "close", lambda: None)()
    result["ok"] = True
    return result


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
