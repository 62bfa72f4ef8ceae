"""``dvpipe trace FILE``: summarise a Chrome-trace file written by ``dvpipe run --trace``.

``dvpipe trace merge DVPIPE_TRACE EXPORT [EXPORT ...] -o OUT``: one Perfetto/Chrome trace of dvpipe's
trace and profiler exports (msprof ``msprof_*.json``, torch.profiler ``export_chrome_trace``, an
Nsight Systems report converted to Chrome trace) on dvpipe's clock; see :mod:`dvpipe.latency.merge`.
"""
from __future__ import annotations

import argparse

from ..errors import ConfigError

USAGE = ("dvpipe trace FILE [--window] [--no-cameras]\n"
         "       dvpipe trace merge DVPIPE_TRACE EXPORT [EXPORT ...] -o OUT [--align {auto,ranges,epoch}] "
         "[--format {auto,msprof,torch,chrome}]")

EPILOG = """merge: put dvpipe's trace (dvpipe run --trace) and profiler exports on one clock in one file
(open it in https://ui.perfetto.dev). Exports: msprof's timeline msprof_*.json, torch.profiler's
export_chrome_trace, a Chrome trace converted from Nsight Systems (e.g. nsys2json). Alignment:
'ranges' pairs the export's dvpipe:<step>@<camera> ranges (record with dvpipe run --profiler-ranges)
with dvpipe's spans; 'epoch' uses the wall-clock time each file records (msprof, torch; not Nsight
conversions); 'auto' (default) takes ranges when they match, else epoch."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = USAGE
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("file", help="trace file (.json or .json.gz) in the Chrome trace event format; "
                                     "or 'merge' followed by dvpipe's trace and the exports")
    parser.add_argument("exports", nargs="*", metavar="EXPORT", help=argparse.SUPPRESS)
    parser.add_argument("--window", action="store_true", help="report the sliding window instead of the whole run")
    parser.add_argument("--no-cameras", action="store_true", help="omit the per-camera rows")
    parser.add_argument("-o", "--out", metavar="OUT", help="merge: the merged trace to write (.json or .json.gz)")
    parser.add_argument("--align", choices=("auto", "ranges", "epoch"), default="auto",
                        help="merge: how exports are put on dvpipe's clock (default auto)")
    parser.add_argument("--format", choices=("auto", "msprof", "torch", "chrome"), default="auto",
                        help="merge: the exports' format (default: detected per file)")


def main(args: argparse.Namespace) -> int:
    if args.file == "merge":
        return _merge(args)
    if args.exports:
        raise ConfigError(f"dvpipe trace takes one FILE (got {1 + len(args.exports)}); "
                          "to combine traces use: dvpipe trace merge DVPIPE_TRACE EXPORT ... -o OUT")
    merge_only = [flag for flag, given in (("-o/--out", args.out is not None), ("--align", args.align != "auto"),
                                           ("--format", args.format != "auto")) if given]
    if merge_only:  # they would be ignored by the summary
        raise ConfigError(f"{', '.join(merge_only)}: options of dvpipe trace merge, not of the summary of one FILE")
    from ..latency.trace import TraceFormatError, summarise_trace

    try:
        print(summarise_trace(args.file, window=args.window, per_camera=not args.no_cameras))
    except FileNotFoundError:
        raise ConfigError(f"trace file not found: {args.file}") from None
    except TraceFormatError as e:
        raise ConfigError(f"{args.file} is not a valid trace: {e}") from None
    return 0


def _merge(args: argparse.Namespace) -> int:
    from ..latency.merge import MergeError, merge_traces, write_merged

    if len(args.exports) < 2:
        raise ConfigError("usage: dvpipe trace merge DVPIPE_TRACE EXPORT [EXPORT ...] -o OUT "
                          "(dvpipe's trace first, then at least one profiler export)")
    if not args.out:
        raise ConfigError("dvpipe trace merge: give the merged file to write with -o OUT")
    try:
        merged, aligns = merge_traces(args.exports[0], args.exports[1:], fmt=args.format, align=args.align)
        path = write_merged(args.out, merged)
    except MergeError as e:
        raise ConfigError(str(e)) from None
    for a in aligns:
        print(a.describe())
    print(f"merged trace: {path} ({len(merged['traceEvents'])} events); open it in https://ui.perfetto.dev")
    return 0
