"""``dvpipe`` command line: ``run``, ``probe``, ``validate``, ``bench``, ``trace``.

Each subcommand lives in its own module ``dvpipe/cli/<name>.py`` exposing
``add_arguments(parser)`` and ``main(args) -> int``; only the module of the command being run is
imported. Errors print as one line (``dvpipe: error: ...``); ``--debug`` shows the traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

from .._version import __version__
from ._stdout import PipeSafe

#: name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("dvpipe.cli.run", "run a deployment (default: the bundled sample deployment)"),
    "validate": ("dvpipe.cli.validate", "check a deployment YAML without running it"),
    "probe": ("dvpipe.cli.probe", "environment report, or which step runs where on a DVPP target and why"),
    "bench": ("dvpipe.cli.bench", "run the same frames through several backend plans, side by side"),
    "trace": ("dvpipe.cli.trace", "summarise a trace of `dvpipe run --trace`; `trace merge`: add profiler exports"),
    "fleet": ("dvpipe.cli.fleet", "a deployment's pipeline over many recordings on Ray (index, run, resume)"),
    "aipp": ("dvpipe.cli.aipp", "write the ATC aipp_op config (static AIPP) for a deployment or profile"),
}


def error_text(e: BaseException) -> str:
    """An error as the CLI prints it: one line, or a count and one indented line per problem when the error
    holds several (a deployment's, a rig file's)."""
    text = str(e)
    lines = text.split("\n")
    if len(lines) > 1 and all(ln.startswith("  ") for ln in lines[1:]):  # a DeploymentError: already one per line
        return text
    problems = getattr(e, "problems", ())
    if len(problems) > 1:
        return f"{len(problems)} problems:\n" + "\n".join(f"  {' '.join(p.split())}" for p in problems)
    return " ".join(text.split())


def _top_parser() -> argparse.ArgumentParser:
    epilog = "commands:\n" + "\n".join(f"  {name:<10} {help_}" for name, (_m, help_) in COMMANDS.items())
    p = argparse.ArgumentParser(prog="dvpipe", formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Multi-camera preprocessing off the CPU critical path.", epilog=epilog)
    p.add_argument("--version", action="version", version=f"dvpipe {__version__}")
    p.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    p.add_argument("command", nargs="?", choices=list(COMMANDS), help=argparse.SUPPRESS)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if debug:
        argv.remove("--debug")
    cmd_index = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if cmd_index is None:
        top = _top_parser()
        top.parse_args(argv)  # handles --version / --help
        top.print_help()
        return 0
    name = argv[cmd_index]
    if name not in COMMANDS:
        _top_parser().parse_args(argv)  # argparse's "invalid choice" message, exit 2
        return 2
    module_name, help_ = COMMANDS[name]
    stdout = sys.stdout
    if stdout is not None:  # `dvpipe validate ... | head -1`: the command goes on and keeps its own status
        sys.stdout = PipeSafe(stdout)
    try:
        module = importlib.import_module(module_name)
        parser = argparse.ArgumentParser(prog=f"dvpipe {name}", description=help_)
        module.add_arguments(parser)
        args = parser.parse_args(argv[:cmd_index] + argv[cmd_index + 1:])
        return int(module.main(args) or 0)
    except KeyboardInterrupt:
        print("dvpipe: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - the CLI's contract: one clear line, never a bare traceback
        if debug:
            raise
        from ..errors import DvpipeError

        expected = isinstance(e, (DvpipeError, OSError, UnicodeDecodeError))
        kind = "error" if expected else f"unexpected {type(e).__name__}"
        print(f"dvpipe {name}: {kind}: {error_text(e)}", file=sys.stderr)
        if not expected:
            print("  (run with --debug for the traceback, and please report it)", file=sys.stderr)
        return 2
    finally:
        if sys.stdout is not stdout:
            sys.stdout.flush()  # what is buffered, while a reader that left is still handled
            sys.stdout = stdout
