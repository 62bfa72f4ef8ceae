"""Chrome trace event format: write timelines, read them back, validate, summarise.

The file is a JSON object ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``
that opens in https://ui.perfetto.dev and chrome://tracing:

* every span is a complete event ``{"ph": "X", "name", "cat": kind, "ts", "dur", "pid", "tid", "args"}``
  with ``ts``/``dur`` in microseconds relative to ``otherData.base_ns`` on the ``now_ns`` clock, written
  a quarter ns past the exact value (``1001 ns -> 1.00125``) so that a reader that truncates
  ``value * 1000`` (Perfetto's JSON importer, older versions) and one that rounds it (newer ones,
  dvpipe: ``span.start_ns = base_ns + round(ts * 1000)``) both get the exact ns; ``args`` carry
  ``batch`` (the batch index, else the number of the batch in the writer), ``camera``, ``category`` and
  the span's attributes (``unit``, ``stream``, ...); a non-finite float among them (NaN, ±infinity, which
  JSON cannot hold: RFC 8259 section 6) is written as the string ``"NaN"``, ``"Infinity"`` or
  ``"-Infinity"`` and read back as that string;
* tracks (``tid``) are named by metadata events (``ph: "M"``, ``thread_name``): ``batcher`` (batch-level
  work: assembly, model, output), one ``camera <name>`` per camera worker, one ``stream <name>`` per
  device stream (device-kind spans), plus any explicit ``span.track``;
* each batch is also an async slice (``ph: "b"``/``"e"``, ``cat: "batch"``) from capture (or arrival) to
  output, whose ``args`` hold the stamps needed to rebuild the timeline (and, for a counters-only timeline,
  its counter rows and transfer bytes). Its id is process-scoped, ``"id2": {"local": "0x<batch in hex>"}``
  (the format's async events), so that the runs of a multi-run file keep their own batch tracks; the
  readers here also take the global ``id`` that dvpipe wrote before.

Several runs can share one file, one process (``pid``) each: ``to_chrome_trace({"cpu": tls1, "dvpp": tls2})``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Union, cast

from .._files import write_whole
from ..errors import ConfigError, DvpipeError
from .clock import epoch_offset_ns
from .timeline import KINDS, FrameStamps, Span, Timeline, _capture_mono, category_of

if TYPE_CHECKING:  # imported lazily by stats_from_trace: a name for the type checker only
    from .stats import LatencyStats

__all__ = [
    "TraceFormatError",
    "TraceWriter",
    "DEFAULT_MAX_EVENTS",
    "to_chrome_trace",
    "write_trace",
    "load_trace",
    "validate_trace",
    "timelines_from_trace",
    "stats_from_trace",
    "summarise_trace",
    "trace_processes",
    "track_of",
]

BATCHER_TRACK = "batcher"
#: every event type of the Trace Event Format ("Event Descriptions": duration B E, complete X, instant i I,
#: counter C, async b n e and legacy S T p F, flow s t f, sample P, object N O D, metadata M, memory dump V v,
#: mark R, clock sync c, context ( ))
_PHASES = frozenset("BEXiICbneSTpFstfPNODMVvRc()")
#: the phases that need an id (async events, nestable and legacy)
_ASYNC_PHASES = frozenset("bneSTpFstf")  # async and flow events: matched by id


class TraceFormatError(DvpipeError, ValueError):
    """A trace does not follow the Chrome trace event format; ``problems`` lists what is wrong."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        if len(problems) == 1:  # one problem, one line (what `dvpipe trace` prints)
            super().__init__(f"invalid Chrome trace: {problems[0]}")
            return
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"invalid Chrome trace ({len(problems)} problem{'s' if len(problems) != 1 else ''}):"
                         f"\n  {shown}{more}")


def track_of(span: Span) -> str:
    """Trace track of a span: its explicit ``track``, else its device stream, camera worker, or the batcher."""
    if span.track:
        return span.track
    if span.kind == "device":
        return f"stream {span.attrs.get('stream') or span.attrs.get('unit') or 'device'}"
    if span.camera is not None:
        return f"camera {span.camera}"
    return BATCHER_TRACK


def _jsonable(v: Any) -> Any:
    """``v`` as JSON values; a non-finite float becomes the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``
    (JSON has no such numbers, RFC 8259 section 6: Python would write bare ``NaN``, which JavaScript's
    ``JSON.parse`` refuses)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    item = getattr(v, "item", None)  # numpy / torch scalars
    if callable(item):
        try:
            return _jsonable(item())
        except (TypeError, ValueError):
            pass
    return repr(v)


def _dumps(obj: Any) -> bytes:
    """``obj`` as compact JSON text (RFC 8259: no bare ``NaN``/``Infinity``; non-finite floats that reached
    ``obj`` without :func:`_jsonable` are written as its strings)."""
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    except ValueError:  # a non-finite float somewhere (a foreign export's, an older dvpipe trace's)
        return json.dumps(_jsonable(obj), separators=(",", ":"), allow_nan=False).encode()


def _async_id(ev: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The identity of an async event's slice, per the Trace Event Format: ``("local", pid, cat, id)`` for a
    process-scoped ``id2: {"local": id}``, ``("global", cat, id)`` for ``id`` or ``id2: {"global": id}``
    (what Perfetto's JSON importer keys its async tracks on); None without a usable id."""
    def usable(v: Any) -> bool:  # a number or a non-empty string (Perfetto reads either as text)
        return (isinstance(v, (int, float)) and not isinstance(v, bool)) or (isinstance(v, str) and v != "")

    cat = ev.get("cat")
    if "id" in ev:
        return ("global", cat, ev["id"]) if usable(ev["id"]) else None
    id2 = ev.get("id2")
    if isinstance(id2, Mapping):
        if usable(id2.get("local")):
            return ("local", ev.get("pid"), cat, id2["local"])
        if usable(id2.get("global")):
            return ("global", cat, id2["global"])
    return None


def _batch_of_id(value: Any) -> Any:
    """A batch number from an async slice's id: dvpipe's ``"0x1f"`` (or an int, as older traces wrote) -> 31."""
    if isinstance(value, str) and value[:2].lower() == "0x":
        try:
            return int(value, 16)
        except ValueError:
            return value
    return value


def _track_sort_key(name: str) -> tuple[int, str]:
    if name == BATCHER_TRACK:
        return (0, "")
    if name.startswith("camera "):
        return (1, "")
    if name.startswith("stream "):
        return (2, "")
    return (3, "")


def _us(ns: int) -> float:
    """``ns`` as trace microseconds, a quarter ns past the exact value: truncating or rounding ``value * 1000``
    gives ``ns`` back (``round(1001 / 1e3, 3)`` = 1.001 reads as 1.000999... and truncates to 1000 ns)."""
    return round((ns + 0.25) / 1e3, 5)


def _ns(us: Any) -> int:
    """A ``ts``/``dur`` in ns as Perfetto's JSON importer reads it: ``static_cast<int64_t>(value * 1000.0)``
    (json_utils.cc ``CoerceToTs``), a truncation."""
    return int(float(us) * 1000)


#: Default bound of a :class:`TraceWriter`: events held (about 600 bytes each in memory, so ~30 MB; ~1,350
#: frame sets of a 6-camera deployment recording spans). A counters-only set's counter rows count one event
#: each (a row holds less than an event: the bound holds in bytes in both modes).
DEFAULT_MAX_EVENTS = 50_000


class TraceWriter:
    """Collects timelines as trace events (converted on ``add``, so timelines can be dropped) and writes them.

    ``with TraceWriter("out/trace.json") as tw: tw.add(batch.timeline)`` writes on exit. Thread-safe
    enough for one batcher thread calling ``add``; use one writer per process.

    **Bounded: a ring of the most recent batches.** The writer holds at most ``max_events`` events
    (``None``: no bound), each counter row of a counters-only batch counting as one event (its batch slice
    carries them all), or the latest batch's alone when that one batch has more; past it, the oldest
    batches' events are dropped whole, so memory and the
    file stay bounded however long the run (a streamed file would grow without end and a viewer could
    no longer open it; the run-wide figures are in :class:`~dvpipe.latency.stats.LatencyStats`, which
    sees every batch). The file is written once, at the end, as one valid JSON object;
    ``otherData.ring`` says how many batches and spans were dropped and holds the bound.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, process_name: str = "dvpipe", pid: int = 1,
                 metadata: Mapping[str, Any] | None = None, max_events: int | None = DEFAULT_MAX_EVENTS) -> None:
        if max_events is not None and max_events < 1:
            raise ConfigError(f"max_events must be >= 1 event or None, got {max_events!r}")
        self.path = Path(path) if path is not None else None
        self._processes: dict[int, str] = {}
        self._tracks: dict[tuple[int, str], None] = {}  # first-seen order
        # per batch, its events with absolute "ts_ns"/"dur_ns" (converted in to_dict); oldest first
        self._batches: deque[list[dict[str, Any]]] = deque()
        self._weights: deque[int] = deque()  # per batch, what it counts against max_events
        self._held = 0
        self.max_events = max_events
        self.metadata = dict(metadata or {})
        self.pid = pid
        self.process_name = process_name
        self.spans_written = 0
        self.batches_added = 0
        self.dropped_batches = 0
        self.dropped_spans = 0

    @property
    def _raw(self) -> list[dict[str, Any]]:
        """The events held, oldest batch first."""
        return [ev for batch in self._batches for ev in batch]

    @property
    def events_held(self) -> int:
        """Events held now, a counters-only batch's counter rows counting one each (at most ``max_events``,
        except a single batch larger than it)."""
        return self._held

    def _keep(self, events: list[dict[str, Any]], rows: int = 0) -> None:
        """Add one batch's events (and its ``rows`` counter rows) to the ring; drop the oldest batches past
        ``max_events``."""
        self._batches.append(events)
        self._weights.append(len(events) + rows)
        self._held += len(events) + rows
        self.batches_added += 1
        while self.max_events is not None and self._held > self.max_events and len(self._batches) > 1:
            old = self._batches.popleft()
            self._held -= self._weights.popleft()
            self.dropped_batches += 1
            self.dropped_spans += sum(1 for ev in old if ev["ph"] == "X")

    def add(self, tl: Timeline, *, pid: int | None = None, process_name: str | None = None) -> None:
        """Convert one timeline to events (every span, plus the batch's async slice)."""
        pid = self.pid if pid is None else pid
        self._processes.setdefault(pid, process_name or self.process_name)
        index = tl.index
        bid = index if index is not None else self.batches_added  # the batch's id, also without an index
        events: list[dict[str, Any]] = []
        rows = 0
        for s in list(tl.spans):
            track = track_of(s)
            self._tracks.setdefault((pid, track), None)
            args: dict[str, Any] = {"batch": bid, "camera": s.camera,
                                    "category": category_of(s.kind, s.attrs.get("unit"))}
            if s.track:
                args["track"] = s.track
            for k, v in s.attrs.items():
                args.setdefault(k, _jsonable(v))
            events.append({"ph": "X", "name": s.name, "cat": s.kind, "ts_ns": s.start_ns,
                           "dur_ns": s.end_ns - s.start_ns, "pid": pid, "track": track, "args": args})
            self.spans_written += 1
        start = tl.capture_mono_ns
        if start is None:
            start = tl.arrival_ns
        if start is None and tl.spans:
            start = min(s.start_ns for s in tl.spans)
        end = tl.end_ns
        if start is not None and end is not None:
            self._tracks.setdefault((pid, BATCHER_TRACK), None)
            bargs: dict[str, Any] = {"batch": bid, "capture_mono_ns": tl._capture_mono_ns,
                                     "arrival_ns": tl._arrival_ns, "output_ns": tl.output_ns, "end_to_end_ns": end - start,
                                     "cameras": {c: {"capture_mono_ns": st.capture_mono_ns, "arrival_ns": st.arrival_ns}
                                                 for c, st in tl.cameras.items()},
                                     "timeline_camera": tl.camera}
            if tl.attrs:
                bargs["attrs"] = _jsonable(tl.attrs)
            if tl.counters_only:
                bargs["counters"] = [[n, c, k, u, *v] for (n, c, k, u), v in tl.counters().items()]
                # [[direction, camera, bytes]], as Timeline.to_dict writes them
                bargs["transfer_bytes"] = [[d, c, n] for (d, c), n in dict(tl._bytes).items()]
                rows = len(bargs["counters"]) + len(bargs["transfer_bytes"])
            name = f"batch {index}" if index is not None else "batch"
            sid = _batch_slice_id(bid)  # process-scoped: each run's batches on its own track
            events.append({"ph": "b", "name": name, "cat": "batch", "id2": sid, "ts_ns": start, "pid": pid,
                           "track": BATCHER_TRACK, "args": bargs})
            events.append({"ph": "e", "name": name, "cat": "batch", "id2": sid, "ts_ns": end, "pid": pid,
                           "track": BATCHER_TRACK, "args": {}})
        self._keep(events, rows)

    def extend(self, timelines: Iterable[Timeline], **kwargs: Any) -> None:
        for tl in timelines:
            self.add(tl, **kwargs)

    def _lanes(self, raw: list[dict[str, Any]]) -> dict[int, str]:
        """Track name per complete event (index into ``raw``), splitting a track into lanes
        ("stream dvpp:0", "stream dvpp:0 #2", ...) where its spans overlap without nesting, because
        trace viewers mis-draw or drop slices that are not properly nested on one thread."""
        by_track: dict[tuple[int, str], list[int]] = {}
        for i, r in enumerate(raw):
            if r["ph"] == "X":
                by_track.setdefault((r["pid"], r["track"]), []).append(i)
        out: dict[int, str] = {}
        for (pid, track), idx in by_track.items():
            idx.sort(key=lambda i: (raw[i]["ts_ns"], -raw[i]["dur_ns"]))
            lanes: list[list[int]] = []  # per lane, the stack of open end times
            for i in idx:
                start = raw[i]["ts_ns"]
                end = start + raw[i]["dur_ns"]
                lane = None
                for k, stack in enumerate(lanes):
                    while stack and stack[-1] <= start:
                        stack.pop()
                    if not stack or end <= stack[-1]:
                        stack.append(end)
                        lane = k
                        break
                if lane is None:
                    lane = len(lanes)
                    lanes.append([end])
                name = track if lane == 0 else f"{track} #{lane + 1}"
                out[i] = name
                self._tracks.setdefault((pid, name), None)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The trace as a dict (the events held: the most recent batches, see the class docstring)."""
        raw = self._raw
        base_ns = min((r["ts_ns"] for r in raw if r["ph"] in "Xb"), default=0)
        lanes = self._lanes(raw)
        tids: dict[tuple[int, str], int] = {}
        for pid in self._processes:
            names = sorted((t for p, t in self._tracks if p == pid), key=lambda n: (_track_sort_key(n), n))
            for i, name in enumerate(names):
                tids[(pid, name)] = i + 1
        events: list[dict[str, Any]] = []
        for pid, pname in self._processes.items():
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pname}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                           "args": {"sort_index": pid}})
        for (pid, name), tid in tids.items():
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
        for i, r in enumerate(raw):
            ev = {"ph": r["ph"], "name": r["name"], "cat": r["cat"], "ts": _us(r["ts_ns"] - base_ns),
                  "pid": r["pid"], "tid": tids[(r["pid"], lanes.get(i, r["track"]))]}
            if "dur_ns" in r:
                ev["dur"] = _us(r["dur_ns"])
            if "id2" in r:
                ev["id2"] = r["id2"]
            ev["args"] = r["args"]
            events.append(ev)
        other = {"generator": "dvpipe.latency", "clock": "time.perf_counter_ns", "base_ns": base_ns,
                 "epoch_offset_ns": epoch_offset_ns(), "spans": self.spans_written - self.dropped_spans,
                 "ring": {"max_events": self.max_events, "batches_added": self.batches_added,
                          "dropped_batches": self.dropped_batches, "dropped_spans": self.dropped_spans}}
        other.update(_jsonable(self.metadata))
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}

    def write(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the trace (``.json``, or gzip-compressed when the name ends in ``.gz``); return the path."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ConfigError("TraceWriter.write: no path given here or to TraceWriter(path)")
        data = _dumps(self.to_dict())
        return write_whole(target, gzip.compress(data) if target.suffix == ".gz" else data)

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.path is not None:
            self.write()


def to_chrome_trace(timelines: Iterable[Timeline] | Mapping[str, Iterable[Timeline]], *,
                    process_name: str = "dvpipe", metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Trace dict of ``timelines``; a mapping ``{label: timelines}`` gives one process per label."""
    writer = TraceWriter(process_name=process_name, metadata=metadata, max_events=None)  # the caller's list: all of it
    if isinstance(timelines, Mapping):
        for i, (label, tls) in enumerate(timelines.items()):
            writer.extend(tls, pid=i + 1, process_name=str(label))
    else:
        writer.extend(timelines)
    return writer.to_dict()


def write_trace(path: str | os.PathLike[str], timelines: Iterable[Timeline] | Mapping[str, Iterable[Timeline]],
                **kwargs: Any) -> Path:
    """Write :func:`to_chrome_trace` of ``timelines`` to ``path`` (gzip when it ends in ``.gz``); return it."""
    target = Path(path)
    data = _dumps(to_chrome_trace(timelines, **kwargs))
    return write_whole(target, gzip.compress(data) if target.suffix == ".gz" else data)


def _gunzipped(raw: bytes, path: Any, error: Callable[[str], Exception]) -> bytes:
    """``raw`` decompressed when it is gzip (its magic bytes), else as it is; a damaged stream raises
    ``error(one line)`` (``zlib.error``, a damaged deflate block, is no ``OSError``)."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise error(f"{path}: damaged gzip file ({e})") from None


def _batch_slice_id(batch: Any) -> dict[str, str]:
    """The process-scoped id of a batch's async slice (``"id2": {"local": "0x1f"}``: each run's own track)."""
    return {"local": f"0x{batch:x}" if isinstance(batch, int) and not isinstance(batch, bool) else str(batch)}


def load_trace(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a trace file (JSON object or bare event array; plain or gzip); return ``{"traceEvents": [...], ...}``.

    Damaged input (a damaged gzip stream, text that is not JSON, an array cut inside an event) raises
    :class:`TraceFormatError` with one problem, one line.
    """
    raw = _gunzipped(Path(path).read_bytes(), path, lambda msg: TraceFormatError([msg]))
    try:
        obj = json.loads(raw)
    except UnicodeDecodeError:
        raise TraceFormatError([f"{path}: not a JSON text file (not UTF-8)"]) from None
    except json.JSONDecodeError as e:
        # The array format may legally lack its closing bracket (a trace cut short by a crash).
        text = raw.decode(errors="replace").rstrip().rstrip(",")
        if not (text.startswith("[") and not text.endswith("]")):
            raise TraceFormatError([f"{path}: not JSON ({e})"]) from None
        try:
            obj = json.loads(text + "]")
        except json.JSONDecodeError as cut:
            raise TraceFormatError([f"{path}: an event array cut short inside an event, not JSON "
                                    f"({cut.msg} at line {cut.lineno} column {cut.colno})"]) from None
    if isinstance(obj, list):
        obj = {"traceEvents": obj}
    return obj


def validate_trace(obj: Mapping[str, Any] | list[Any], *, check_nesting: bool = False) -> int:
    """Check the trace event format (ph, ts, dur for X, pid, tid, ...); return the number of events.

    With ``check_nesting``, complete events on one (pid, tid) must also nest properly (no partial
    overlap), which viewers need to draw them; dvpipe's writer guarantees it. Nesting is checked on
    the ns a trace viewer reads (Perfetto truncates ``ts * 1000`` and ``dur * 1000`` to integers).
    Raises :class:`TraceFormatError` listing every problem found.
    """
    problems: list[str] = []
    events = obj if isinstance(obj, list) else obj.get("traceEvents") if isinstance(obj, Mapping) else None
    if not isinstance(events, list):
        raise TraceFormatError(["expected a JSON object with a 'traceEvents' list (or a bare list of events)"])

    def num(v: Any) -> bool:  # JSON numbers as Python reads them: NaN, Infinity and 1e400 are not times
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    def ident(v: Any) -> bool:
        return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str)

    for i, ev in enumerate(events):
        where = f"traceEvents[{i}]"
        if not isinstance(ev, Mapping):
            problems.append(f"{where}: expected an object, got {type(ev).__name__}")
            continue
        ph = ev.get("ph")
        if not isinstance(ph, str) or ph not in _PHASES:
            problems.append(f"{where}: 'ph' must be one of {''.join(sorted(_PHASES))}, got {ph!r}")
            continue
        where = f"{where} (ph {ph!r}, name {ev.get('name')!r})"
        if not ident(ev.get("pid")):
            problems.append(f"{where}: missing or invalid 'pid' ({ev.get('pid')!r})")
        process_scoped = ph == "M" and str(ev.get("name", "")).startswith("process_")
        if not process_scoped and not ident(ev.get("tid")):
            problems.append(f"{where}: missing or invalid 'tid' ({ev.get('tid')!r})")
        if ph == "M":
            if not isinstance(ev.get("name"), str) or not isinstance(ev.get("args"), Mapping):
                problems.append(f"{where}: metadata events need a 'name' string and an 'args' object")
            continue
        if not num(ev.get("ts")):
            problems.append(f"{where}: missing or non-numeric 'ts' ({ev.get('ts')!r})")
        if ph == "X":
            if not isinstance(ev.get("name"), str):
                problems.append(f"{where}: complete events need a 'name' string")
            dur = ev.get("dur")
            if not num(dur) or cast(float, dur) < 0:
                problems.append(f"{where}: complete events need a numeric 'dur' >= 0, got {dur!r}")
        if ph in _ASYNC_PHASES and _async_id(ev) is None:
            problems.append(f"{where}: async and flow events need an 'id' (or an 'id2' object with 'local' or "
                            "'global')")
        if "args" in ev and not isinstance(ev["args"], Mapping):
            problems.append(f"{where}: 'args' must be an object")
    if check_nesting and not problems:
        problems.extend(_nesting_problems(events))
    if problems:
        raise TraceFormatError(problems)
    return len(events)


def _nesting_problems(events: list[Any]) -> list[str]:
    by_thread: dict[tuple[Any, Any], list[tuple[int, int, int]]] = {}
    begun: dict[tuple[Any, Any], list[tuple[int, int, str]]] = {}  # B and E events per thread: (ts, order, ph)
    for i, ev in enumerate(events):
        if ev.get("ph") == "X":
            start = _ns(ev["ts"])
            by_thread.setdefault((ev["pid"], ev["tid"]), []).append((start, start + _ns(ev["dur"]), i))
        elif ev.get("ph") in ("B", "E"):
            begun.setdefault((ev["pid"], ev["tid"]), []).append((_ns(ev["ts"]), i, ev["ph"]))
    problems = []
    for (pid, tid), marks in begun.items():  # an E closes the latest open B of its thread (a B may stay open)
        depth = 0
        for _ts, i, ph in sorted(marks):
            depth += 1 if ph == "B" else -1
            if depth < 0:
                problems.append(f"traceEvents[{i}] (pid {pid}, tid {tid}): an 'E' event with no 'B' open on its thread")
                depth = 0
    for (pid, tid), items in by_thread.items():
        items.sort(key=lambda x: (x[0], -(x[1] - x[0])))
        stack: list[tuple[int, int]] = []
        for start, end, i in items:
            while stack and stack[-1][0] <= start:
                stack.pop()
            if stack and end > stack[-1][0]:
                problems.append(f"traceEvents[{i}] (pid {pid}, tid {tid}): overlaps traceEvents[{stack[-1][1]}] "
                                "without nesting inside it")
            stack.append((end, i))
    return problems


def trace_processes(obj: Mapping[str, Any] | list[Any]) -> dict[Any, str]:
    """``{pid: process name}`` of a trace (one process per run in a multi-run trace)."""
    events = obj if isinstance(obj, list) else obj.get("traceEvents", [])
    names: dict[Any, str] = {}
    for ev in events:
        if isinstance(ev, Mapping) and "pid" in ev:
            if ev.get("ph") == "M" and ev.get("name") == "process_name":
                names[ev["pid"]] = str((ev.get("args") or {}).get("name", ev["pid"]))
            else:
                names.setdefault(ev["pid"], str(ev["pid"]))
    return names


def timelines_from_trace(obj: Mapping[str, Any] | list[Any], *, pid: Optional[Union[int, str]] = None) -> list[Timeline]:
    """Rebuild timelines from a trace written by dvpipe (lossless for stamps and spans); ``pid`` filters.

    Foreign traces (no ``batch`` args) become one timeline per process holding every complete event,
    so per-name percentiles still work; end-to-end figures need dvpipe's batch slices.
    """
    validate_trace(obj)
    events = obj if isinstance(obj, list) else obj["traceEvents"]
    other = obj.get("otherData", {}) if isinstance(obj, Mapping) else {}
    base_ns = int(other.get("base_ns", 0) or 0)
    thread_names: dict[tuple[Any, Any], str] = {}
    for ev in events:
        if ev["ph"] == "M" and ev.get("name") == "thread_name":
            thread_names[(ev["pid"], ev.get("tid"))] = str(ev.get("args", {}).get("name"))

    def to_ns(ts: float) -> int:
        return base_ns + int(round(ts * 1000))

    timelines: dict[tuple[Any, Any], Timeline] = {}

    def get(pid: Any, batch: Any) -> Timeline:
        key = (pid, batch)
        tl = timelines.get(key)
        if tl is None:
            tl = timelines[key] = Timeline(index=batch if isinstance(batch, int) else None)
        return tl

    for ev in events:
        ph = ev["ph"]
        if pid is not None and ev.get("pid") != pid:
            continue
        args = ev.get("args") or {}
        if ph == "X":
            batch = args.get("batch")
            start_ns = to_ns(ev["ts"])
            end_ns = start_ns + int(round(ev["dur"] * 1000))
            cat = ev.get("cat")
            kind = cat if cat in KINDS else "host"
            attrs = {k: v for k, v in args.items() if k not in ("batch", "camera", "category", "track")}
            if cat not in KINDS and cat:
                attrs.setdefault("cat", cat)
            track = args.get("track")
            span = Span(ev["name"], start_ns, end_ns, kind, args.get("camera"), track, attrs)
            get(ev["pid"], batch).spans.append(span)
        elif ph == "b" and ev.get("cat") == "batch":
            aid = _async_id(ev)  # id2.local (dvpipe now) or a global id (before): the batch when args lack it
            tl = get(ev["pid"], args["batch"] if "batch" in args else _batch_of_id(aid[-1] if aid else None))
            tl._capture_mono_ns = _capture_mono(args)
            tl._arrival_ns = args.get("arrival_ns")
            tl.output_ns = args.get("output_ns")
            tl.camera = args.get("timeline_camera")
            tl.attrs.update(args.get("attrs") or {})
            for cam, st in (args.get("cameras") or {}).items():
                tl.cameras[cam] = FrameStamps(_capture_mono(st), st.get("arrival_ns"))
            if "counters" in args:
                tl._counters = {(n, c, k, u): [int(a), int(b), int(m)] for n, c, k, u, a, b, m in args["counters"]}
                tl._bytes = {(d, c): int(n) for d, c, n in args.get("transfer_bytes") or []}
    out = list(timelines.values())
    out.sort(key=lambda t: (t.index is None, t.index if t.index is not None else 0))
    return out


def stats_from_trace(trace: str | os.PathLike[str] | Mapping[str, Any] | list[Any], *,
                     pid: Optional[Union[int, str]] = None, **stats_kwargs: Any) -> LatencyStats:
    """:class:`~dvpipe.latency.stats.LatencyStats` of a trace file or dict (one process with ``pid``);
    other keyword arguments go to ``LatencyStats``."""
    from .stats import LatencyStats
    obj = load_trace(trace) if isinstance(trace, (str, os.PathLike)) else trace
    return LatencyStats.from_timelines(timelines_from_trace(obj, pid=pid), **stats_kwargs)


def _run_stats_settings(settings: Any, dropped_batches: int = 0) -> dict[str, Any]:
    """``LatencyStats`` keyword arguments from the run's settings a trace of ``dvpipe run`` records in
    ``otherData.stats`` (warm-up sets, budgets in ns, rig order, window), so that its figures are the run's
    latency.json's; warm-up sets the trace's ring dropped are not left out twice. ``{}`` for other traces."""
    if not isinstance(settings, Mapping):
        return {}
    out: dict[str, Any] = {}
    warmup = settings.get("warmup")
    if isinstance(warmup, int) and not isinstance(warmup, bool) and warmup > 0:
        out["warmup"] = max(0, warmup - dropped_batches)
    if isinstance(settings.get("budgets_ns"), Mapping) and settings["budgets_ns"]:
        out["budgets"] = dict(settings["budgets_ns"])
    if isinstance(settings.get("camera_order"), list):
        out["camera_order"] = [str(c) for c in settings["camera_order"]]
    window = settings.get("window")
    if isinstance(window, int) and not isinstance(window, bool) and window >= 1:
        out["window"] = window
    return out


def summarise_trace(path: str | os.PathLike[str], *, window: bool = False, per_camera: bool = True,
                    budgets: Mapping[str, float] | None = None) -> str:
    """The terminal report of a trace file (what ``dvpipe trace FILE`` prints); one table per process."""
    obj = load_trace(path)
    n = validate_trace(obj)
    spans = sum(1 for ev in obj["traceEvents"] if ev.get("ph") == "X")
    procs = trace_processes(obj)
    parts = [f"trace {os.fspath(path)}: {n} events, {spans} spans, {len(procs)} process"
             f"{'' if len(procs) == 1 else 'es'}"]
    found = obj.get("otherData")
    other: dict = found if isinstance(found, dict) else {}
    ring = other.get("ring")
    dropped = 0
    if isinstance(ring, dict) and ring.get("dropped_batches"):  # the tables cover the sets the ring kept
        dropped = int(ring["dropped_batches"])
        parts[0] += (f"; the last {ring['batches_added'] - ring['dropped_batches']} of {ring['batches_added']} "
                     f"frame sets (the trace's ring of {ring.get('max_events')} events dropped the oldest "
                     f"{ring['dropped_batches']}; the run's own figures are in its latency.json)")
    kwargs = _run_stats_settings(other.get("stats"), dropped)
    if budgets is not None:
        kwargs["budgets"] = budgets
    for pid, pname in procs.items():
        stats = stats_from_trace(obj, pid=pid, **kwargs)
        parts.append(stats.report(window=window, per_camera=per_camera, title=pname))
    return "\n\n".join(parts)
