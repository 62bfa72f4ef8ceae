"""``dvpipe trace FILE``: summarise a Chrome-trace file written by ``dvpipe run --trace``."""
from __future__ import annotations

import argparse

from ..errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="trace file (.json or .json.gz) in the Chrome trace event format")
    parser.add_argument("--window", action="store_true", help="report the sliding window instead of the whole run")
    parser.add_argument("--no-cameras", action="store_true", help="omit the per-camera rows")


def main(args: argparse.Namespace) -> int:
    from ..latency.trace import TraceFormatError, summarise_trace

    try:
        print(summarise_trace(args.file, window=args.window, per_camera=not args.no_cameras))
    except FileNotFoundError:
        raise ConfigError(f"trace file not found: {args.file}") from None
    except TraceFormatError as e:
        raise ConfigError(f"{args.file} is not a valid trace: {e}") from None
    return 0
