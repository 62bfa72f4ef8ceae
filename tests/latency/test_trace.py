"""dvpipe.latency.trace: Chrome trace event files that open in Perfetto / chrome://tracing."""

from __future__ import annotations

import gc
import gzip
import json
import shutil
import subprocess
import threading
import time
import tracemalloc

import pytest

from dvpipe.latency import (DeviceSpan, LatencyStats, Timeline, TraceFormatError, TraceWriter, load_trace, now_ns,
                            stats_from_trace, summarise_trace, timelines_from_trace, to_chrome_trace, validate_trace,
                            write_trace)
from dvpipe.cli import main as cli_main

MS = 1_000_000
CAMERAS = ("CAM_FRONT", "CAM_FRONT_LEFT", "CAM_BACK")


def make_batches(n: int = 4) -> list[Timeline]:
    """Synthetic multi-camera batches: per camera decode -> DVPP resize (device) -> h2d, then assembly + model."""
    out = []
    for b in range(n):
        base = (b + 1) * 100 * MS
        tl = Timeline(index=b, attrs={"plan": "dvpp-sim"})
        ready = {}
        for c, cam in enumerate(CAMERAS):
            f = Timeline(camera=cam, capture_mono_ns=base - 3 * MS, arrival_ns=base + c * MS)
            t = base + c * MS
            f.record("queue_wait", t, t + MS // 2, kind="wait")
            t += MS // 2
            f.record("decode", t, t + 4 * MS, unit="cpu")
            t += 4 * MS
            # device work of all cameras shares one stream and overlaps: the writer splits it into lanes
            f.add_device(DeviceSpan("resize", t, t + 3 * MS, 2 * MS, unit="dvpp", stream="dvpp:0"))
            t += 3 * MS
            f.record("h2d", t, t + MS, kind="transfer", unit="npu")
            t += MS
            ready[cam] = t
            tl.merge(f)
        tl.record_assembly(ready)
        t = max(ready.values())
        tl.record("model", t, t + 5 * MS, kind="model", unit="npu")
        tl.finish(t + 5 * MS + 100)
        out.append(tl)
    return out


def test_trace_validates_and_contains_every_span_of_every_batch():
    tls = make_batches()
    trace = to_chrome_trace(tls)
    n = validate_trace(trace, check_nesting=True)
    assert n == len(trace["traceEvents"])
    spans = [ev for ev in trace["traceEvents"] if ev["ph"] == "X"]
    assert len(spans) == sum(len(t.spans) for t in tls)
    got = sorted((ev["args"]["batch"], ev["name"], ev["args"]["camera"] or "") for ev in spans)
    want = sorted((t.index, s.name, s.camera or "") for t in tls for s in t.spans)
    assert got == want
    for ev in spans:
        assert isinstance(ev["ts"], float) and isinstance(ev["dur"], float)
        assert {"ph", "ts", "dur", "pid", "tid", "name", "cat", "args"} <= set(ev)
    decode0 = next(ev for ev in spans if ev["name"] == "decode" and ev["args"]["camera"] == "CAM_FRONT")
    assert int(decode0["dur"] * 1000) == 4 * MS  # microseconds, read as Perfetto does (truncating x 1000)
    assert decode0["cat"] == "host" and decode0["args"]["category"] == "cpu"


def test_tracks_per_camera_worker_device_stream_and_batcher():
    trace = to_chrome_trace(make_batches(2))
    names = {ev["tid"]: ev["args"]["name"] for ev in trace["traceEvents"]
             if ev["ph"] == "M" and ev["name"] == "thread_name"}
    tracks = set(names.values())
    assert {"batcher", "stream dvpp:0"} | {f"camera {c}" for c in CAMERAS} <= tracks
    assert any(t.startswith("stream dvpp:0 #") for t in tracks)  # overlapping device spans got a lane
    by_name = {v: k for k, v in names.items()}
    model = next(ev for ev in trace["traceEvents"] if ev.get("name") == "model")
    assert model["tid"] == by_name["batcher"]
    wait = next(ev for ev in trace["traceEvents"] if ev.get("name") == "batch_assembly_wait")
    assert wait["tid"] == by_name["batcher"] and wait["args"]["camera"] == "CAM_BACK"
    resize = [ev for ev in trace["traceEvents"] if ev.get("name") == "resize"]
    assert all(names[ev["tid"]].startswith("stream dvpp:0") for ev in resize)
    assert all(ev["args"]["device_duration_ns"] == 2 * MS and int(ev["dur"] * 1000) == 2 * MS for ev in resize)
    proc = [ev for ev in trace["traceEvents"] if ev["ph"] == "M" and ev["name"] == "process_name"]
    assert proc[0]["args"]["name"] == "dvpipe"
    slices = [ev for ev in trace["traceEvents"] if ev["ph"] in "be"]
    assert len(slices) == 4 and {ev["cat"] for ev in slices} == {"batch"}


def test_round_trip_rebuilds_the_same_statistics(tmp_path):
    tls = make_batches()
    budgets = {"end_to_end": 20e6, "decode": 5e6}
    original = LatencyStats.from_timelines(tls, budgets=budgets)
    for name in ("trace.json", "trace.json.gz"):
        path = write_trace(tmp_path / name, tls)
        if name.endswith(".gz"):
            assert path.read_bytes()[:2] == b"\x1f\x8b"
        rebuilt = timelines_from_trace(load_trace(path))
        assert [t.to_dict() for t in rebuilt] == [t.to_dict() for t in tls]
        again = stats_from_trace(path, budgets=budgets)
        assert again.report() == original.report()
        assert again.to_json() == original.to_json()


def test_a_trace_written_before_the_clock_named_keys_keeps_its_capture_stamps():
    """Traces and timeline dicts saved before ``capture_ns`` became ``capture_mono_ns`` still read back
    their capture stamps (end-to-end latency is measured from them), not None."""
    tls = make_batches(2)

    def old_names(x):
        if isinstance(x, dict):
            return {("capture_ns" if k == "capture_mono_ns" else k): old_names(v) for k, v in x.items()}
        return [old_names(v) for v in x] if isinstance(x, list) else x

    trace = old_names(to_chrome_trace(tls))
    assert "capture_mono_ns" not in json.dumps(trace)
    for rebuilt in (timelines_from_trace(trace), [Timeline.from_dict(old_names(t.to_dict())) for t in tls]):
        assert [t.capture_mono_ns for t in rebuilt] == [t.capture_mono_ns for t in tls]
        assert [t.capture_mono_ns for t in rebuilt] == [(b + 1) * 100 * MS - 3 * MS for b in range(2)]
        assert [t.to_dict() for t in rebuilt] == [t.to_dict() for t in tls]


def test_summarise_trace(tmp_path):
    path = write_trace(tmp_path / "t.json", make_batches(3))
    text = summarise_trace(path)
    first = text.splitlines()[0]
    assert first.startswith(f"trace {path}:") and "spans, 1 process" in first
    for word in ("decode", "resize", "h2d", "model", "batch_assembly_wait", "end to end (capture -> output)",
                 "where did the time go"):
        assert word in text


def test_several_runs_in_one_trace(tmp_path):
    path = write_trace(tmp_path / "cmp.json", {"cpu": make_batches(2), "dvpp-sim": make_batches(3)})
    obj = load_trace(path)
    validate_trace(obj, check_nesting=True)
    procs = {ev["pid"]: ev["args"]["name"] for ev in obj["traceEvents"]
             if ev["ph"] == "M" and ev["name"] == "process_name"}
    assert sorted(procs.values()) == ["cpu", "dvpp-sim"]
    assert stats_from_trace(obj, pid=2).batches == 3
    text = summarise_trace(path)
    assert "2 processes" in text and "\ncpu: 2 batches" in text and "\ndvpp-sim: 3 batches" in text


def test_trace_writer_streams_timelines_from_a_live_run(tmp_path):
    path = tmp_path / "out" / "live.json"
    with TraceWriter(path, metadata={"deployment": "test"}) as tw:
        for i in range(3):
            tl = Timeline(index=i, capture_mono_ns=now_ns())
            tl.arrived()

            def work(batch: Timeline, cam: str) -> None:
                with batch.span("decode", camera=cam):
                    time.sleep(0.001)

            threads = [threading.Thread(target=work, args=(tl, c)) for c in CAMERAS]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            tl.time("model", time.sleep, 0.001)
            tl.finish()
            tw.add(tl)
    obj = load_trace(path)
    validate_trace(obj, check_nesting=True)
    assert obj["otherData"]["deployment"] == "test" and obj["otherData"]["spans"] == 12
    assert sum(1 for ev in obj["traceEvents"] if ev["ph"] == "X") == 12


def test_counters_only_timelines_survive_a_trace():
    tl = Timeline(index=0, counters_only=True, capture_mono_ns=0, arrival_ns=MS)
    tl.record("decode", MS, 3 * MS, camera="A")
    tl.finish(4 * MS)
    rebuilt = timelines_from_trace(to_chrome_trace([tl]))
    assert rebuilt[0].counters() == tl.counters()
    assert LatencyStats.from_timelines(rebuilt).end_to_end().max_ns == 4 * MS


def test_validate_trace_reports_every_problem():
    good = {"ph": "X", "name": "a", "ts": 0.0, "dur": 1.0, "pid": 1, "tid": 1}
    validate_trace([good])
    bad = [
        {"ph": "X", "name": "no-dur", "ts": 0.0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "neg", "ts": 0.0, "dur": -1, "pid": 1, "tid": 1},
        {"ph": "X", "name": "no-pid", "ts": 0.0, "dur": 1.0, "tid": 1},
        {"ph": "X", "name": "no-tid", "ts": 0.0, "dur": 1.0, "pid": 1},
        {"ph": "X", "name": "no-ts", "dur": 1.0, "pid": 1, "tid": 1},
        {"ph": "Q", "name": "bad-ph", "ts": 0.0, "pid": 1, "tid": 1},
        {"ph": "b", "name": "no-id", "cat": "batch", "ts": 0.0, "pid": 1, "tid": 1},
        {"ph": "s", "name": "flow-no-id", "cat": "flow", "ts": 0.0, "pid": 1, "tid": 1},  # flows pair by id too
        "not an event",
    ]
    with pytest.raises(TraceFormatError) as info:
        validate_trace({"traceEvents": bad})
    problems = info.value.problems
    assert len(problems) == 9
    text = str(info.value)
    for needle in ("numeric 'dur' >= 0, got None", "got -1", "invalid 'pid'", "invalid 'tid'", "non-numeric 'ts'",
                   "'ph' must be one of", "flow events need an 'id'", "expected an object"):
        assert needle in text
    assert sum("need an 'id'" in p for p in problems) == 2
    closing = [{"ph": "E", "ts": 1.0, "pid": 1, "tid": 1}]  # an E with no B open on its thread
    validate_trace(closing)
    with pytest.raises(TraceFormatError, match="no 'B' open"):
        validate_trace(closing, check_nesting=True)
    validate_trace([{"ph": "B", "name": "x", "ts": 0.5, "pid": 1, "tid": 1}] + closing, check_nesting=True)
    with pytest.raises(TraceFormatError, match="'traceEvents' list"):
        validate_trace({"events": []})
    overlap = [good, {**good, "name": "b", "ts": 0.5, "dur": 1.0}]
    validate_trace(overlap)
    with pytest.raises(TraceFormatError, match="without nesting"):
        validate_trace(overlap, check_nesting=True)


def test_load_trace_accepts_array_format_and_foreign_traces(tmp_path):
    events = [{"ph": "X", "name": "conv", "ts": 10.0, "dur": 5.0, "pid": 7, "tid": 1, "cat": "kernel"},
              {"ph": "X", "name": "conv", "ts": 20.0, "dur": 7.0, "pid": 7, "tid": 1, "cat": "kernel"}]
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(events)[:-1] + ",\n")  # the array format may lack its closing bracket
    obj = load_trace(path)
    assert len(obj["traceEvents"]) == 2
    stats = stats_from_trace(obj)
    assert stats.step("conv").count == 2 and stats.step("conv").max_ns == 7000
    assert "conv" in summarise_trace(path)
    gz = tmp_path / "foreign.json.gz"
    gz.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert load_trace(gz)["traceEvents"] == events
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(TraceFormatError, match="not JSON"):
        load_trace(tmp_path / "junk.json")


def _perfetto_ns(us: float) -> int:
    """Perfetto's JSON importer (json_utils.cc CoerceToTs): ``static_cast<int64_t>(value * 1000.0)``, truncating."""
    return int(us * 1000.0)


def test_times_read_back_to_the_exact_ns_by_a_truncating_reader():
    """Every ts/dur must come back to its ns when ``value * 1000`` is truncated (Perfetto) or rounded (newer
    Perfetto, dvpipe), so that a child ending where its parent ends stays inside it. The old writer's
    ``round(1001 / 1e3, 3)`` = 1.001 reads as 1000 ns."""
    tl = Timeline(index=0)
    tl.record("outer", 0, 0, camera="A")  # pins base_ns at 0: ts in the file is the span's ns / 1000
    want = {}
    for k in range(400):
        p = 1000 + k * 1001  # parent [p, p + 50], child [p + d, p + 50]: ends together
        d = 1 + k % 19
        tl.record(f"parent {k}", p, p + 50, camera="A")
        tl.record(f"child {k}", p + d, p + 50, camera="A")
        want[f"parent {k}"], want[f"child {k}"] = (p, 50), (p + d, 50 - d)
    tl.finish(500_000)
    trace = json.loads(json.dumps(to_chrome_trace([tl])))  # as a viewer gets it: through JSON text
    assert trace["otherData"]["base_ns"] == 0
    spans = {ev["name"]: ev for ev in trace["traceEvents"] if ev["ph"] == "X"}
    for name, (start, dur) in want.items():
        ev = spans[name]
        assert (_perfetto_ns(ev["ts"]), _perfetto_ns(ev["dur"])) == (start, dur), (name, ev["ts"], ev["dur"])
        assert (round(ev["ts"] * 1000.0), round(ev["dur"] * 1000.0)) == (start, dur), name
    for k in range(400):
        parent, child = spans[f"parent {k}"], spans[f"child {k}"]
        assert parent["tid"] == child["tid"]
        end = _perfetto_ns(parent["ts"]) + _perfetto_ns(parent["dur"])
        assert _perfetto_ns(child["ts"]) + _perfetto_ns(child["dur"]) == end
    validate_trace(trace, check_nesting=True)
    assert [s.start_ns for s in timelines_from_trace(trace)[0].spans] == [s.start_ns for s in tl.spans]


def test_nesting_is_checked_on_the_ns_a_truncating_reader_sees():
    """ts 1.001 us parses to 1.000999... and Perfetto truncates it to 1000 ns: the parent is [1000, 1050] ns
    and the child [1002, 1051] ns, which overlaps its end. Exact decimals (1.0 + 0.05) nest."""
    def thread(parent_ts, parent_dur, child_ts, child_dur):
        return [{"ph": "X", "name": "parent", "ts": parent_ts, "dur": parent_dur, "pid": 1, "tid": 1},
                {"ph": "X", "name": "child", "ts": child_ts, "dur": child_dur, "pid": 1, "tid": 1}]

    assert _perfetto_ns(1.001) == 1000 and _perfetto_ns(1.002) + _perfetto_ns(0.049) == 1051
    with pytest.raises(TraceFormatError, match="without nesting"):
        validate_trace(thread(1.001, 0.05, 1.002, 0.049), check_nesting=True)
    assert validate_trace(thread(1.0, 0.05, 1.01, 0.04), check_nesting=True) == 2
    assert validate_trace(thread(1.00125, 0.05025, 1.00225, 0.04925), check_nesting=True) == 2


def test_timelines_without_an_index_stay_apart_in_a_trace():
    """Timelines without an index (LatencyStats numbers them) carry their async slice's id as ``batch``, so
    reading the trace back gives one timeline per batch, not one merging all of them."""
    tls = []
    for k in range(3):
        base = 1_000 * MS + k * 100 * MS
        tl = Timeline(capture_mono_ns=base, arrival_ns=base + MS)
        tl.record("decode", base + 2 * MS, base + (7 + k) * MS, camera="A")
        tl.finish(base + 10 * MS)
        tls.append(tl)
    trace = to_chrome_trace(tls)
    spans = [ev for ev in trace["traceEvents"] if ev["ph"] == "X"]
    begins = [ev for ev in trace["traceEvents"] if ev["ph"] == "b"]
    assert [ev["args"]["batch"] for ev in spans] == [0, 1, 2]
    assert [ev["args"]["batch"] for ev in begins] == [int(ev["id2"]["local"], 16) for ev in begins] == [0, 1, 2]
    back = timelines_from_trace(trace)
    assert len(back) == 3 and [len(t.spans) for t in back] == [1, 1, 1]
    assert [t.spans[0].end_ns - t.spans[0].start_ns for t in back] == [5 * MS, 6 * MS, 7 * MS]
    stats = stats_from_trace(trace)
    assert stats.batches == 3
    assert sorted(stats.end_to_end_samples("capture")) == [10 * MS] * 3
    assert sorted(stats.step_samples("decode")) == [5 * MS, 6 * MS, 7 * MS]


def test_a_trace_with_non_finite_times_or_damaged_gzip_is_a_format_error(tmp_path):
    # Python's json reads NaN, Infinity and 1e400 (inf) as numbers; the trace event format's ts and dur are
    # times in microseconds: a viewer cannot place such an event. A cut gzip file is damaged input, not a bug.
    from dvpipe.latency.trace import TraceFormatError, load_trace

    for ts, dur in (("NaN", "1"), ("1e400", "1"), ("1", "Infinity")):
        text = '{"traceEvents": [{"ph": "X", "name": "a", "ts": %s, "dur": %s, "pid": 1, "tid": 1}]}' % (ts, dur)
        with pytest.raises(TraceFormatError, match="'ts'|'dur'"):
            validate_trace(json.loads(text))
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}')[:12])
    with pytest.raises(TraceFormatError, match="damaged gzip file"):
        load_trace(tmp_path / "cut.json.gz")


#: the event types of the Trace Event Format (Google's "Trace Event Format" document, "Event Descriptions")
SPEC_PHASES = "B E X i I C b n e s t f P N O D M V v R c ( ) S T p F".split()


def _perfetto_async_track(ev):
    """The track Perfetto's JSON importer puts an async ``b``/``e`` event on (json_trace_parser_impl.cc): a plain
    ``id`` or ``id2.global`` is keyed on (cat, id) whatever the process; only ``id2.local`` is process-scoped."""
    id2 = ev.get("id2") or {}
    if "id" in ev or "global" in id2:
        return ("global", ev.get("cat"), str(ev["id"] if "id" in ev else id2["global"]))
    return ("process", ev["pid"], ev.get("cat"), str(id2["local"]))


def _one_run():
    tls = []
    for i in range(2):
        b = 10 * MS + i * MS
        tl = Timeline(index=i, capture_mono_ns=b)
        tl.record("decode", b + 100, b + 500_000, camera="CAM_FRONT")
        tl.finish(b + 900_000)
        tls.append(tl)
    return tls


def test_batch_slices_of_several_runs_stay_on_their_own_process(tmp_path):
    """Two runs in one file, recorded at the same time (the same batch indices): each run's batch slices must
    be on its own process's async track, which the format gives process-scoped ids (``id2.local``) only."""
    trace = json.loads(json.dumps(to_chrome_trace({"cpu": _one_run(), "dvpp-sim": _one_run()})))
    tracks: dict = {}
    for ev in trace["traceEvents"]:
        if ev["ph"] in "be":
            tracks.setdefault(_perfetto_async_track(ev), []).append((ev["pid"], ev["ph"]))
    assert len(tracks) == 4  # 2 runs x 2 batches
    for evs in tracks.values():
        assert sorted(evs) == [(evs[0][0], "b"), (evs[0][0], "e")]  # one process, one begin, one end
    assert sorted(ev["id2"]["local"] for ev in trace["traceEvents"] if ev["ph"] == "b") == ["0x0", "0x0", "0x1", "0x1"]
    validate_trace(trace, check_nesting=True)
    for pid in (1, 2):
        back = timelines_from_trace(trace, pid=pid)
        assert [t.index for t in back] == [0, 1] and [t.end_to_end_ns() for t in back] == [900_000] * 2

    # dvpipe's readers take both forms: the plain id written before, and an id without args.batch
    want = [(t.index, len(t.spans), t.end_to_end_ns()) for t in timelines_from_trace(trace)]
    for form in ("id", "id2"):
        old = json.loads(json.dumps(trace))
        for ev in old["traceEvents"]:
            if ev["ph"] in "be":
                if form == "id":
                    ev["id"] = int(ev.pop("id2")["local"], 16)
                ev["args"].pop("batch", None)
        validate_trace(old)
        assert [(t.index, len(t.spans), t.end_to_end_ns()) for t in timelines_from_trace(old)] == want
        (tmp_path / f"{form}.json").write_text(json.dumps(old))
        assert "2 processes" in summarise_trace(tmp_path / f"{form}.json")


def test_every_event_type_of_the_trace_event_format_is_valid(tmp_path, capsys):
    from dvpipe.latency.trace import _PHASES

    assert sorted(_PHASES) == sorted(SPEC_PHASES)
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "browser"}}]
    for ph in SPEC_PHASES:
        if ph != "M":
            ev = {"ph": ph, "name": f"event {ph}", "cat": "c", "ts": 10.0, "pid": 1, "tid": 1, "id": "0x1", "args": {}}
            events.append({**ev, "dur": 1.0} if ph == "X" else ev)
    assert validate_trace(events) == len(SPEC_PHASES)
    with pytest.raises(TraceFormatError, match="'ph' must be one of"):
        validate_trace([{"ph": "Q", "name": "q", "ts": 1.0, "pid": 1, "tid": 1}])
    # a browser trace with a navigation mark and a legacy async pair: `dvpipe trace` reads it
    path = tmp_path / "browser.json"
    path.write_text(json.dumps([{"ph": "X", "name": "task", "ts": 10.0, "dur": 5.0, "pid": 1, "tid": 1},
                                {"ph": "R", "name": "navigationStart", "ts": 11.0, "pid": 1, "tid": 1, "args": {}},
                                {"ph": "S", "name": "load", "id": "0x1", "ts": 12.0, "pid": 1, "tid": 1, "cat": "net"},
                                {"ph": "F", "name": "load", "id": "0x1", "ts": 14.0, "pid": 1, "tid": 1, "cat": "net"}]))
    assert cli_main(["trace", str(path)]) == 0
    assert "4 events, 1 spans" in capsys.readouterr().out


def test_a_counters_only_timeline_keeps_its_transfer_bytes_through_a_trace():
    tls = []
    for i in range(2):
        b = MS + i * 10 * MS
        tl = Timeline(index=i, counters_only=True)
        tl.set_frame("CAM_A", capture_mono_ns=b, arrival_ns=b + 1000)
        tl.record("decode", b + 1001, b + 3 * MS, camera="CAM_A")
        tl.record("h2d", b + 3 * MS, b + 4 * MS, kind="transfer", camera="CAM_A", bytes=1_000_000, direction="h2d")
        tl.record("h2d", b + 4 * MS, b + 5 * MS, kind="transfer", camera="CAM_A", bytes=500_000, direction="h2d")
        tl.record("model_download", b + 6 * MS, b + 7 * MS, kind="transfer", bytes=4096)
        tl.finish(b + 9 * MS)
        tls.append(tl)
    back = timelines_from_trace(json.loads(json.dumps(to_chrome_trace(tls))))
    # by hand: 1.5 MB up for CAM_A and 4 kB down for the batch (camera None) per set
    want = {"CAM_A": {"host_to_device": 1_500_000, "device_to_host": 0, "device_to_device": 0},
            None: {"host_to_device": 0, "device_to_host": 4096, "device_to_device": 0}}
    for t in back:
        assert t.counters_only and t.transfer_bytes(per_camera=True) == want
        assert t.counters()[("h2d", "CAM_A", "transfer", None)] == (2, 2 * MS, MS)
    assert [t.to_dict() for t in back] == [t.to_dict() for t in tls]
    assert LatencyStats.from_timelines(back).transfers() == LatencyStats.from_timelines(tls).transfers()


def _six_camera_set(i: int, counters_only: bool) -> Timeline:
    """A 6-camera, 8-step frame set (plus the model): 49 spans, or 49 counter rows."""
    b = 10 * MS + i * 50 * MS
    tl = Timeline(index=i, counters_only=counters_only)
    for c in range(6):
        cam = f"CAM_{c}"
        tl.set_frame(cam, capture_mono_ns=b, arrival_ns=b + 1000 + c)
        t = b + 2000
        for s in ("read", "jpegd", "vpc.resize", "vpc.crop", "normalize", "h2d", "pack", "wait_worker"):
            tl.record(s, t, t + 100_000 + c, camera=cam, unit="dvpp" if s.startswith(("jpegd", "vpc")) else "cpu")
            t += 100_001 + c
    tl.record("model", b + 5 * MS, b + 9 * MS, kind="model", unit="cuda")
    tl.finish(b + 9_500_000)
    return tl


@pytest.mark.parametrize("counters_only", [False, True])
def test_the_trace_bound_holds_in_bytes_for_span_and_counters_only_sets(counters_only):
    """``DEFAULT_MAX_EVENTS`` documents about 600 bytes held per event (50,000 events, ~30 MB). A counters-only
    set is one begin event carrying every counter row: its rows count against the bound too."""
    bound = 2_000
    gc.collect()
    tracemalloc.start()
    try:
        tw = TraceWriter(max_events=bound)
        i = 0
        while tw.dropped_batches < 20:
            tw.add(_six_camera_set(i, counters_only))
            i += 1
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # by hand: 49 spans + begin + end = 51 events a set, or begin + end + 49 counter rows = 51
    assert tw.events_held == (bound // 51) * 51 and i - tw.dropped_batches == bound // 51
    assert held <= 750 * bound, held / bound  # about 600 bytes an event (25% margin)
    assert len(json.dumps(tw.to_dict(), separators=(",", ":"))) <= 600 * bound


def test_damaged_gzip_and_an_array_cut_inside_an_event_are_one_line_errors(tmp_path, capsys):
    tl = Timeline(index=0, capture_mono_ns=0)
    tl.record("decode", 10, 500, camera="A")
    tl.finish(900)
    raw = write_trace(tmp_path / "t.json.gz", [tl]).read_bytes()
    # the deflate stream starts after gzip's 10-byte header: BTYPE 11 is reserved, an error (RFC 1951 3.2.3)
    (tmp_path / "block.json.gz").write_bytes(raw[:10] + bytes([raw[10] | 0x06]) + raw[11:])
    (tmp_path / "cut.json").write_text('[{"ph":"X","name":"a","ts":1,"dur":2,"pid":1,"tid":1},{"ph":"X","na')
    for name, reason in (("block.json.gz", "damaged gzip file"), ("cut.json", "cut short inside an event")):
        with pytest.raises(TraceFormatError, match=reason):
            load_trace(tmp_path / name)
        assert cli_main(["trace", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("dvpipe trace: error: ") and reason in err[0], err


def test_non_finite_attributes_are_written_as_valid_json(tmp_path):
    """RFC 8259 JSON has no NaN or Infinity: Python's json would write them bare, which JavaScript's JSON.parse
    (chrome://tracing) refuses. They are written as the strings "NaN", "Infinity", "-Infinity"."""
    tl = Timeline(index=0, capture_mono_ns=MS, attrs={"gain": float("inf")})
    tl.record("model", 2 * MS, 3 * MS, kind="model", score=float("nan"), low=float("-inf"), ok=1.5)
    tl.finish(4 * MS)
    path = write_trace(tmp_path / "nan.json", [tl], metadata={"threshold": float("nan")})
    text = path.read_text()

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    obj = json.loads(text, parse_constant=refuse)  # Python's reader, strict as RFC 8259
    node = shutil.which("node")
    if node:
        js = "JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8')); console.log('ok')"
        run = subprocess.run([node, "-e", js, str(path)], capture_output=True, text=True, timeout=60)
        assert run.stdout.strip() == "ok", run.stderr
    assert obj["otherData"]["threshold"] == "NaN"
    back = timelines_from_trace(load_trace(path))[0]
    assert back.spans[0].attrs == {"score": "NaN", "low": "-Infinity", "ok": 1.5}
    assert back.attrs == {"gain": "Infinity"} and back.end_to_end_ns() == 3 * MS
    assert "model" in summarise_trace(path)


def test_the_summary_of_a_ring_that_dropped_sets_says_which_sets_it_covers(tmp_path):
    """A trace ring keeps the newest sets: 10 sets of 51 events under a 200-event bound keep 3 (hand count:
    3 x 51 = 153 <= 200 < 204); `dvpipe trace` must not present those 3 as the run."""
    tw = TraceWriter(max_events=200)
    for i in range(10):
        tw.add(_six_camera_set(i, False))
    path = tw.write(tmp_path / "ring.json")
    text = summarise_trace(path)
    assert "the last 3 of 10 frame sets" in text and "dropped the oldest 7" in text
    assert "3 batches" in text


def test_dvpipe_trace_gives_the_runs_own_figures(tmp_path):
    """The trace of ``dvpipe run`` holds every frame set, warm-up included; ``dvpipe trace FILE`` leaves out the
    run's warm-up sets and applies its budgets and rig order (``otherData.stats``), so that its figures are the
    run's latency.json's. The reference: latency.json written by the same run."""
    import yaml

    from dvpipe.latency.trace import _run_stats_settings, stats_from_trace
    from dvpipe.testing.deployments import synthetic_deployment

    d = synthetic_deployment(3, frames=12, latency={"warmup_sets": 3, "budget_ms": 20, "steps_ms": {"decode": 2}})
    (tmp_path / "dep.yaml").write_text(yaml.safe_dump(d))
    assert cli_main(["run", str(tmp_path / "dep.yaml"), "--trace", str(tmp_path / "t.json"), "--json",
                     str(tmp_path / "latency.json"), "--out", str(tmp_path / "out"), "-q"]) == 0
    run = json.loads((tmp_path / "latency.json").read_text())
    trace = load_trace(tmp_path / "t.json")
    assert trace["otherData"]["stats"]["warmup"] == 3 and run["warmup_batches"] == 3
    stats = stats_from_trace(trace, **_run_stats_settings(trace["otherData"]["stats"]))
    assert json.loads(json.dumps(stats.to_json())) == run
    text = summarise_trace(tmp_path / "t.json")
    assert f"{run['batches']} batches" in text and "3 warm-up batches excluded" in text


def test_merge_options_on_the_summary_of_one_file_are_refused(tmp_path, capsys):
    """-o, --align and --format belong to `dvpipe trace merge`; given to the summary of one FILE they were ignored."""
    path = write_trace(tmp_path / "t.json", make_batches(2))
    for extra in (["-o", str(tmp_path / "m.json")], ["--align", "epoch"], ["--format", "torch"]):
        assert cli_main(["trace", str(path), *extra]) == 2
        assert "options of dvpipe trace merge" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()
    assert cli_main(["trace", str(path)]) == 0
