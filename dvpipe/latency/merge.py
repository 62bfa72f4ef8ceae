"""``dvpipe trace merge``: dvpipe's trace and profiler exports in one Perfetto/Chrome trace, on one clock.

Inputs: dvpipe's trace (``dvpipe run --trace``) first, then one or more Chrome-trace exports:

=========  ==========================================================================================
format     what it is and how its ``ts`` is read
=========  ==========================================================================================
msprof     msprof's timeline ``msprof_*.json`` (a JSON array). ``ts`` is a *string* of microseconds
           with three decimals on the wall clock (msprof's analysis writes
           ``str(Decimal(...).quantize("0.000"))`` of the monotonic-raw time plus the collection's
           local-time offset: ``InfoConfReader.trans_into_local_time`` in Ascend/msprof ``analysis/
           common_func/info_conf_reader.py``); ``dur`` in µs. msproftx ranges are ``ph: "X"`` events
           named by their message, ``args`` ``Category``/``Payload_type``/``Payload_value``/
           ``Message_type``/``event_type``, under the process named ``MsprofTx``
           (``analysis/viewer/msproftx_viewer.py``).
torch      ``torch.profiler`` ``export_chrome_trace`` (Kineto): an object with ``schemaVersion``,
           ``deviceProperties``, ``baseTimeNanoseconds`` and ``traceEvents``; ``ts`` in µs relative
           to ``baseTimeNanoseconds`` (ns since the Unix epoch; Kineto ``output_json.cpp``
           ``transToRelativeTime``). ``record_function`` ranges are ``cat: "user_annotation"``.
           A file without ``baseTimeNanoseconds`` (older Kineto) holds epoch µs.
chrome     any other Chrome trace, e.g. Nsight Systems converted with nsys2json (NVTX push/pop
           ranges as ``cat: "nvtx"`` ``X`` events, ``ts`` = the report's ns / 1000, ``pid``
           ``"Device N"``): no epoch is recorded, so it is aligned on the ranges only.
=========  ==========================================================================================

Alignment (``align``): ``ranges`` pairs the export's ``dvpipe:<step>@<camera>`` ranges (written with
``--profiler-ranges``, :mod:`dvpipe.latency.profiler_ranges`) with the dvpipe spans of the same
step and camera and takes the median of ``range start - span start``; the pairing is found by
vote (the offset that lines up most ranges within ``tolerance_ns``, default 1 ms), so a profile
that covers only part of the run, or a trace whose ring dropped the first batches, still aligns.
``epoch`` uses the wall-clock time each file records (dvpipe's ``otherData.epoch_offset_ns``,
torch's ``baseTimeNanoseconds``, msprof's wall-clock ``ts``); it is only as good as the clocks
(dvpipe's offset between ``perf_counter`` and the wall clock is sampled at import; msprof's host
times are on ``CLOCK_MONOTONIC_RAW``). ``auto``: ranges where the export holds any that match,
else epoch, else an error saying what is missing.

Output: dvpipe's events unchanged (one process per run; the batch slices of a trace written before dvpipe
scoped their ids to the process, a global ``id``, get the process-scoped ``id2: {"local": ...}`` that
dvpipe writes now, so that each run keeps its own batch track), then each export's events with their
times mapped onto dvpipe's clock and their processes renumbered (``1000 * (k + 1) + n`` for the
k-th export) and named ``"<format>: <name>"``, so every file keeps its own processes. String
``pid``/``tid`` values become numbers with their names kept as metadata. ``otherData.base_ns``
is the merged zero on dvpipe's clock; ``otherData.merge`` lists per export the file, format,
alignment, offset and the ranges matched.
"""
from __future__ import annotations

import bisect
import gzip
import json
import os
import statistics
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Optional, Sequence

from .._files import write_whole
from ..errors import DvpipeError
from .profiler_ranges import parse_range_name
from .trace import _batch_slice_id, _dumps, _gunzipped, _us

__all__ = ["MergeError", "FORMATS", "ALIGNMENTS", "Export", "Alignment", "load_export", "merge_traces",
           "write_merged"]

FORMATS = ("auto", "msprof", "torch", "chrome")
ALIGNMENTS = ("auto", "ranges", "epoch")
#: process names of msprof's timeline (analysis/common_func/trace_view_header_constant.py) that mark a file as msprof's
_MSPROF_PROCESSES = frozenset({"MsprofTx", "AscendCL", "CANN", "Ascend Hardware", "Runtime", "Task Scheduler",
                               "AI Core Utilization", "AI Stack Time", "GE", "Training Trace", "ACSQ", "HCCL",
                               "Overlap Analysis", "Communication", "Step Trace"})
_DEFAULT_TOLERANCE_NS = 1_000_000
_PID_STRIDE = 1000


class MergeError(DvpipeError, ValueError):
    """An input that cannot be merged; the message is one line naming the file and what to do."""


@dataclass
class Export:
    """A profiler export with every timed event's ``ts``/``dur`` as int ns on the export's own clock.

    ``epoch_base_ns``: add it to a ``ts_ns`` for ns since the Unix epoch (None: the file records no epoch).
    """

    path: str
    format: str
    events: list[dict[str, Any]]
    epoch_base_ns: Optional[int]
    ts_ns: list[Optional[int]] = field(default_factory=list)   # per event (None: no ts)
    dur_ns: list[Optional[int]] = field(default_factory=list)


@dataclass
class Alignment:
    """How one export was put on dvpipe's clock: ``dvpipe_mono_ns = export_ns - offset_ns``."""

    path: str
    format: str
    method: str
    offset_ns: int
    ranges_in_export: int = 0
    ranges_matched: int = 0
    residual_median_ns: Optional[int] = None
    residual_max_ns: Optional[int] = None
    epoch_offset_ns: Optional[int] = None  # what the recorded epochs say (when both files record one)
    pids: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.path, "format": self.format, "alignment": self.method, "offset_ns": self.offset_ns,
                "ranges_in_export": self.ranges_in_export, "ranges_matched": self.ranges_matched,
                "residual_median_ns": self.residual_median_ns, "residual_max_ns": self.residual_max_ns,
                "epoch_offset_ns": self.epoch_offset_ns, "pids": self.pids}

    def describe(self) -> str:
        how = (f"aligned on {self.ranges_matched} of {self.ranges_in_export} dvpipe ranges "
               f"(residual median {self.residual_median_ns / 1e3:.1f} µs, max {self.residual_max_ns / 1e3:.1f} µs)"
               if self.method == "ranges" and self.residual_median_ns is not None and self.residual_max_ns is not None
               else "aligned on the wall-clock times both files record")
        extra = ""
        if self.method == "ranges" and self.epoch_offset_ns is not None:
            extra = (f"; aligning on the recorded wall clocks would shift it by "
                     f"{(self.offset_ns - self.epoch_offset_ns) / 1e3:+.1f} µs")
        return f"{self.path} ({self.format}): {how}{extra}; processes {sorted(self.pids.values())}"


# ------------------------------------------------------------------------------------------ reading
def _read_json(path: str | os.PathLike[str]) -> Any:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise MergeError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise MergeError(f"{path}: is a folder, not a trace file") from None
    except OSError as e:
        raise MergeError(f"{path}: cannot read ({e.strerror or e})") from None
    raw = _gunzipped(raw, path, MergeError)
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise MergeError(f"{path}: not a JSON text file (not UTF-8)") from None
    except json.JSONDecodeError as e:
        raise MergeError(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None


def _events_of(obj: Any, path: Any) -> list[Any]:
    events = obj if isinstance(obj, list) else obj.get("traceEvents") if isinstance(obj, dict) else None
    if not isinstance(events, list):
        raise MergeError(f"{path}: not a Chrome trace (expected a JSON array of events or an object with a "
                         "'traceEvents' array)")
    return events


def _to_ns(value: Any) -> Optional[int]:
    """µs (number, or a decimal string as msprof writes) -> int ns; None when not a finite number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        return round(value * 1000) if value == value and abs(value) != float("inf") else None
    if isinstance(value, str):
        try:
            d = Decimal(value.strip())
        except InvalidOperation:
            return None
        return int((d * 1000).to_integral_value()) if d.is_finite() else None
    return None


def _detect(obj: Any, events: list[Any]) -> str:
    if isinstance(obj, dict) and ({"baseTimeNanoseconds", "deviceProperties", "schemaVersion"} & obj.keys()):
        return "torch"
    for ev in events[:100_000]:
        if not isinstance(ev, dict):
            continue
        if isinstance(ev.get("ts"), str):
            return "msprof"
        if ev.get("ph") == "M" and ev.get("name") == "process_name" and \
                str((ev.get("args") or {}).get("name")) in _MSPROF_PROCESSES:
            return "msprof"
    return "chrome"


def load_export(path: str | os.PathLike[str], fmt: str = "auto") -> Export:
    """Read a profiler's Chrome-trace export (see the module docstring for the formats)."""
    if fmt not in FORMATS:
        raise MergeError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    obj = _read_json(path)
    events = _events_of(obj, path)
    if isinstance(obj, dict) and (obj.get("otherData") or {}).get("generator") == "dvpipe.latency":
        raise MergeError(f"{path}: this is a dvpipe trace; give dvpipe's trace first and profiler exports after it")
    kind = _detect(obj, events) if fmt == "auto" else fmt
    epoch: Optional[int] = None
    if kind == "msprof":
        epoch = 0  # wall-clock µs already
    elif kind == "torch":
        base = obj.get("baseTimeNanoseconds") if isinstance(obj, dict) else None
        if base is not None:
            if isinstance(base, bool) or not isinstance(base, (int, float, str)) or _to_ns(base) is None:
                raise MergeError(f"{path}: baseTimeNanoseconds is not a number ({base!r})")
            epoch = int(Decimal(str(base)))
        else:
            epoch = 0  # Kineto before baseTimeNanoseconds wrote epoch µs
    ex = Export(os.fspath(path), kind, [], epoch)
    problems = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            problems.append(f"traceEvents[{i}] is not an object")
            continue
        ph = ev.get("ph")
        if not isinstance(ph, str) or not ph:
            problems.append(f"traceEvents[{i}] has no 'ph'")
            continue
        ts = None
        if "ts" in ev and ph != "M":
            ts = _to_ns(ev["ts"])
            if ts is None:
                problems.append(f"traceEvents[{i}] ('{ev.get('name')}'): 'ts' is not a number ({ev['ts']!r})")
                continue
        elif ph != "M":
            problems.append(f"traceEvents[{i}] ('{ev.get('name')}'): no 'ts'")
            continue
        dur = None
        if ph == "X":
            dur = _to_ns(ev.get("dur", 0))
            if dur is None or dur < 0:
                problems.append(f"traceEvents[{i}] ('{ev.get('name')}'): 'dur' is not a number >= 0 "
                                f"({ev.get('dur')!r})")
                continue
        if "pid" not in ev:
            problems.append(f"traceEvents[{i}] ('{ev.get('name')}'): no 'pid'")
            continue
        ex.events.append(ev)
        ex.ts_ns.append(ts)
        ex.dur_ns.append(dur)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise MergeError(f"{path}: {problems[0]}{more}")
    return ex


def _load_dvpipe(path: str | os.PathLike[str]) -> dict[str, Any]:
    from .trace import TraceFormatError, validate_trace

    obj = _read_json(path)
    _events_of(obj, path)
    other = obj.get("otherData") if isinstance(obj, dict) else None
    if not isinstance(other, dict) or other.get("generator") != "dvpipe.latency" or "base_ns" not in other:
        raise MergeError(f"{path}: not a trace written by dvpipe (no otherData.generator 'dvpipe.latency'); "
                         "give the trace of `dvpipe run --trace` first, then the profiler exports")
    try:
        validate_trace(obj)
    except TraceFormatError as e:
        raise MergeError(f"{path}: {e.problems[0]}" + (f" (and {len(e.problems) - 1} more)"
                                                        if len(e.problems) > 1 else "")) from None
    return obj


# ---------------------------------------------------------------------------------------- alignment
def _dvpipe_spans(trace: dict[str, Any]) -> dict[tuple[str, Optional[str]], tuple[list[int], list[int]]]:
    """Per (name, camera): the sorted start stamps (dvpipe's clock, ns) of the trace's spans and their durations."""
    base = int(trace["otherData"]["base_ns"])
    rows: dict[tuple[str, Optional[str]], list[tuple[int, int]]] = {}
    for ev in trace["traceEvents"]:
        if ev.get("ph") == "X":
            cam = (ev.get("args") or {}).get("camera")
            rows.setdefault((ev["name"], cam), []).append((base + round(ev["ts"] * 1000), round(ev["dur"] * 1000)))
    out = {}
    for key, r in rows.items():
        r.sort()
        out[key] = ([a for a, _ in r], [b for _, b in r])
    return out


def _export_ranges(ex: Export) -> list[tuple[tuple[str, Optional[str]], int, int]]:
    """(key, start ns on the export's clock, duration ns) of the export's dvpipe ranges (host-side ones)."""
    out = []
    for ev, ts, dur in zip(ex.events, ex.ts_ns, ex.dur_ns):
        if ev.get("ph") != "X" or ts is None or ev.get("cat") == "gpu_user_annotation":  # device-time copy
            continue
        key = parse_range_name(ev.get("name"))
        if key is not None:
            out.append((key, ts, dur or 0))
    return out


def _nearest(starts: list[int], t: int) -> int:
    """Index of the value of the sorted list nearest to t."""
    i = bisect.bisect_left(starts, t)
    if i == len(starts) or (i > 0 and t - starts[i - 1] <= starts[i] - t):
        return i - 1
    return i


def _align_on_ranges(spans: dict, ranges: list, tolerance_ns: int, prior_ns: Optional[int]
                     ) -> Optional[tuple[int, int, int, int]]:
    """(offset, matched, residual median, residual max) of the best-voted pairing; None without a match.

    Candidates pair the most distinctive range (fewest same-key spans) with each of those spans;
    a candidate's score is the number of (sampled) ranges that land within ``tolerance_ns`` of a
    same-key span, then closeness to the recorded epochs (``prior_ns``) or, without them, how
    well the ranges' durations match the spans' (periodic frame sets are otherwise ambiguous).
    """
    usable = [r for r in ranges if r[0] in spans]
    if not usable:
        return None
    anchor_key, anchor_t, _d = min(usable, key=lambda r: (len(spans[r[0]][0]), r[1]))
    candidates = [anchor_t - d for d in spans[anchor_key][0][:20_000]]
    sample = usable[::max(1, len(usable) // 64)]
    best: Optional[tuple[int, float, int]] = None  # (votes, -penalty, offset)
    for off in candidates:
        votes, dur_diff = 0, 0
        for k, t, dur in sample:
            starts, durs = spans[k]
            j = _nearest(starts, t - off)
            if abs(t - off - starts[j]) <= tolerance_ns:
                votes += 1
                dur_diff += abs(dur - durs[j])
        penalty = abs(off - prior_ns) if prior_ns is not None else dur_diff
        score = (votes, -float(penalty), off)
        if best is None or score[:2] > best[:2]:
            best = score
    assert best is not None
    off = best[2]
    diffs = []
    for k, t, _dur in usable:
        starts = spans[k][0]
        d = starts[_nearest(starts, t - off)]
        if abs(t - off - d) <= tolerance_ns:
            diffs.append(t - d)
    if not diffs:
        return None
    offset = int(statistics.median_low(diffs))
    resid = [abs(x - offset) for x in diffs]
    return offset, len(diffs), int(statistics.median_low(resid)), max(resid)


def _align(ex: Export, trace: dict[str, Any], spans: dict, align: str, tolerance_ns: int) -> Alignment:
    other = trace["otherData"]
    epoch_offset = None
    if ex.epoch_base_ns is not None and other.get("epoch_offset_ns") is not None:
        # export_ns + epoch_base = epoch = mono + dvpipe's epoch offset
        epoch_offset = int(other["epoch_offset_ns"]) - ex.epoch_base_ns
    ranges = _export_ranges(ex)
    a = Alignment(ex.path, ex.format, "", 0, ranges_in_export=len(ranges), epoch_offset_ns=epoch_offset)
    if align in ("auto", "ranges"):
        found = _align_on_ranges(spans, ranges, tolerance_ns, epoch_offset)
        if found is not None:
            a.method = "ranges"
            a.offset_ns, a.ranges_matched, a.residual_median_ns, a.residual_max_ns = found
            return a
        if align == "ranges":
            why = ("holds no dvpipe ranges (record with `dvpipe run --profiler-ranges`)" if not ranges else
                   f"holds {len(ranges)} dvpipe ranges but none matches a span of the dvpipe trace "
                   "(were both recorded in the same run?)")
            raise MergeError(f"{ex.path}: cannot align on ranges: it {why}")
    if epoch_offset is not None:
        a.method = "epoch"
        a.offset_ns = epoch_offset
        return a
    lacks = ("dvpipe's trace records no otherData.epoch_offset_ns" if ex.epoch_base_ns is not None
             else f"a {ex.format} export records no wall-clock time")
    if align == "epoch":
        raise MergeError(f"{ex.path}: cannot align on the wall clock: {lacks}")
    raise MergeError(f"{ex.path}: cannot put it on dvpipe's clock: it holds no dvpipe range that matches the trace "
                     f"(record with `dvpipe run --profiler-ranges`) and {lacks}")


# ------------------------------------------------------------------------------------------- merging
def merge_traces(dvpipe_trace: str | os.PathLike[str], exports: Sequence[str | os.PathLike[str]], *,
                 fmt: str = "auto", align: str = "auto", tolerance_ns: int = _DEFAULT_TOLERANCE_NS
                 ) -> tuple[dict[str, Any], list[Alignment]]:
    """The merged trace dict and how each export was aligned (see the module docstring)."""
    if align not in ALIGNMENTS:
        raise MergeError(f"unknown alignment {align!r}; use one of {', '.join(ALIGNMENTS)}")
    if not exports:
        raise MergeError("give at least one profiler export after dvpipe's trace")
    trace = _load_dvpipe(dvpipe_trace)
    loaded = [load_export(p, fmt) for p in exports]
    spans = _dvpipe_spans(trace)
    aligns = [_align(ex, trace, spans, align, tolerance_ns) for ex in loaded]
    base_ns = int(trace["otherData"]["base_ns"])
    # the merged zero: the earliest event of any file on dvpipe's clock (no negative times)
    out_base = base_ns
    for ex, a in zip(loaded, aligns):
        starts = [t - a.offset_ns for t in ex.ts_ns if t is not None]
        if starts:
            out_base = min(out_base, min(starts))
    shift_ns = base_ns - out_base
    events: list[dict[str, Any]] = []
    used_pids = set()
    for ev in trace["traceEvents"]:
        ev = dict(ev)
        if "ts" in ev and ev.get("ph") != "M":
            ev["ts"] = _us(round(ev["ts"] * 1000) + shift_ns)  # dvpipe's times: exact ns under round()
        if ev.get("ph") in ("b", "e") and ev.get("cat") == "batch" and "id" in ev:  # an older dvpipe trace
            bid = ev.pop("id")
            ev["id2"] = _batch_slice_id(bid)
        used_pids.add(ev.get("pid"))
        events.append(ev)
    for k, (ex, a) in enumerate(zip(loaded, aligns)):
        events.extend(_mapped(ex, a, k, out_base, used_pids))
    other = dict(trace.get("otherData") or {})
    other["base_ns"] = out_base
    other["merge"] = [a.to_dict() for a in aligns]
    merged = {"traceEvents": events, "displayTimeUnit": trace.get("displayTimeUnit", "ms"), "otherData": other}
    from .trace import validate_trace

    validate_trace(merged)  # one valid trace, or a bug here
    return merged, aligns


def _mapped(ex: Export, a: Alignment, k: int, out_base: int, used_pids: set) -> list[dict[str, Any]]:
    pids: dict[Any, int] = {}
    tids: dict[tuple[int, Any], int] = {}
    named_procs: set[int] = set()
    named_threads: set[tuple[int, Any]] = set()
    tid_names: dict[tuple[int, int], str] = {}
    first = _PID_STRIDE * (k + 1)

    def pid_of(p: Any) -> int:
        if p not in pids:
            n = first + len(pids)
            while n in used_pids:
                n += 1
            pids[p] = n
            used_pids.add(n)
        return pids[p]

    def tid_of(pid: int, t: Any) -> Any:
        if t is None or (isinstance(t, int) and not isinstance(t, bool)):
            return t
        key = (pid, t)
        if key not in tids:
            tids[key] = 1_000_000 + len(tids)
            tid_names[(pid, tids[key])] = str(t)
        return tids[key]

    out = []
    for ev, ts, dur in zip(ex.events, ex.ts_ns, ex.dur_ns):
        ev = dict(ev)
        pid = pid_of(ev["pid"])
        ev["pid"] = pid
        if "tid" in ev:
            ev["tid"] = tid_of(pid, ev["tid"])
        elif ev.get("ph") != "M":
            ev["tid"] = 0
        if ev.get("ph") == "M":
            ev.pop("ts", None)
            args = dict(ev.get("args") or {})
            if ev.get("name") == "process_name":
                args["name"] = f"{ex.format}: {args.get('name', ev['pid'])}"
                named_procs.add(pid)
            elif ev.get("name") == "thread_name":
                named_threads.add((pid, ev.get("tid")))
            ev["args"] = args
        else:
            assert ts is not None
            ev["ts"] = _us(ts - a.offset_ns - out_base)
            if dur is not None:
                ev["dur"] = _us(dur)
        out.append(ev)
    for orig, pid in pids.items():
        if pid not in named_procs:
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                        "args": {"name": f"{ex.format}: {orig}"}})
    for (pid, tid), name in tid_names.items():
        if (pid, tid) not in named_threads:
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
    a.pids = {str(p): n for p, n in pids.items()}
    return out


def write_merged(out: str | os.PathLike[str], merged: dict[str, Any]) -> Path:
    """Write a merged trace (gzip when the name ends in ``.gz``); return the path. The file is RFC 8259 JSON: a
    non-finite number of an input (which Python's reader accepts) is written as the string ``"NaN"``,
    ``"Infinity"`` or ``"-Infinity"``."""
    target = Path(out)
    data = _dumps(merged)
    return write_whole(target, gzip.compress(data) if target.suffix == ".gz" else data)
