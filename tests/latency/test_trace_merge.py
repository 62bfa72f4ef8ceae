"""``dvpipe trace merge`` (issue 29): dvpipe's trace with profiler exports on one clock.

The exports are written here by hand in each tool's documented format (not produced by dvpipe):
msprof's ``msprof_*.json`` timeline (a JSON array; ``ts`` a string of wall-clock µs with three
decimals; msproftx ranges under the process "MsprofTx" with the args msprof's msproftx viewer
writes), torch.profiler's ``export_chrome_trace`` (``schemaVersion``, ``deviceProperties``,
``baseTimeNanoseconds``, ``ts`` µs relative to it, ``record_function`` as ``user_annotation``), and
an Nsight Systems report converted by nsys2json (a bare array, ``pid`` "Device N", ``tid`` "NVTX Thread
N", ``cat`` "nvtx", ``ts`` = report ns / 1000, no epoch). Every expected time below is computed by
hand from the stamps written into the files.

The dvpipe trace: two frame sets, cameras CAM0/CAM1, spans (dvpipe's clock, ns)::

    set 0: decode@CAM0 5_000_100_000 + 800 µs, decode@CAM1 5_000_200_000 + 800 µs, model 5_002_000_000 + 2 ms
    set 1: the same + 100 ms, decode spans 650 µs long

arrival 5_000_000_000 (the trace's base_ns) and 5_100_000_000; the wall clock it records:
``epoch_offset_ns`` = 1_767_225_595_000_000_000, so 5_000_000_000 is 2026-01-01T00:00:00Z.
"""
from __future__ import annotations

import json

import pytest

from dvpipe.cli import main as cli_main
from dvpipe.latency import Timeline, TraceWriter, validate_trace
from dvpipe.latency.merge import MergeError, load_export, merge_traces

E = 1_767_225_595_000_000_000  # dvpipe's epoch offset in the trace: epoch ns = dvpipe ns + E
T0 = 5_000_000_000


def _ns(us) -> int:
    """A merged trace's time (µs) in ns as Perfetto's JSON importer reads it: ``int(value * 1000)``."""
    return int(float(us) * 1000)


def _dvpipe_trace(tmp_path, sets=(0, 1)):
    tls = []
    for k in sets:
        d = 100_000_000 * k
        dec = 800_000 if k == 0 else 650_000
        tl = Timeline(index=k)
        tl.set_frame("CAM0", arrival_ns=T0 + d)
        tl.set_frame("CAM1", arrival_ns=T0 + d)
        tl.record("decode", T0 + d + 100_000, T0 + d + 100_000 + dec, camera="CAM0", unit="cpu")
        tl.record("decode", T0 + d + 200_000, T0 + d + 200_000 + dec, camera="CAM1", unit="cpu")
        tl.record("model", T0 + d + 2_000_000, T0 + d + 4_000_000, "model")
        tl.finish(T0 + d + 4_100_000)
        tls.append(tl)
    w = TraceWriter()
    w.extend(tls)
    trace = w.to_dict()
    assert trace["otherData"]["base_ns"] == T0
    trace["otherData"]["epoch_offset_ns"] = E
    p = tmp_path / "dvpipe_trace.json"
    p.write_text(json.dumps(trace))
    return p


def _msprof_export(tmp_path):
    """msprof's timeline: msproftx ranges whose clock runs 27 µs ahead of dvpipe's wall-clock mapping
    (25 µs between the clocks, the push 2 µs after the span's first stamp), and an AscendCL call."""
    tx = {"Category": "0", "Payload_type": 0, "Payload_value": 0, "Message_type": 0, "event_type": "start/stop"}
    events = [
        {"name": "process_name", "pid": 2396160, "tid": 0, "args": {"name": "MsprofTx"}, "ph": "M"},
        {"name": "thread_name", "pid": 2396160, "tid": 2340, "args": {"name": "Thread 2340"}, "ph": "M"},
        {"name": "thread_sort_index", "pid": 2396160, "tid": 2340, "args": {"sort_index": 2340}, "ph": "M"},
        {"name": "process_name", "pid": 2396192, "tid": 0, "args": {"name": "CANN"}, "ph": "M"},
        {"name": "dvpipe:decode@CAM0", "pid": 2396160, "tid": 2340, "ts": "1767225600000127.000", "dur": 796.0,
         "args": tx, "ph": "X"},
        {"name": "dvpipe:decode@CAM1", "pid": 2396160, "tid": 2341, "ts": "1767225600000227.000", "dur": 796.0,
         "args": tx, "ph": "X"},
        {"name": "dvpipe:model", "pid": 2396160, "tid": 2342, "ts": "1767225600002027.000", "dur": 1996.0,
         "args": tx, "ph": "X"},
        {"name": "dvpipe:decode@CAM0", "pid": 2396160, "tid": 2340, "ts": "1767225600100127.000", "dur": 646.0,
         "args": tx, "ph": "X"},
        {"name": "dvpipe:decode@CAM1", "pid": 2396160, "tid": 2341, "ts": "1767225600100227.000", "dur": 646.0,
         "args": tx, "ph": "X"},
        {"name": "dvpipe:model", "pid": 2396160, "tid": 2342, "ts": "1767225600102027.000", "dur": 1996.0,
         "args": tx, "ph": "X"},
        {"name": "aclmdlExecute", "pid": 2396192, "tid": 2342, "ts": "1767225600002100.000", "dur": 1500.0,
         "args": {"Mode": "ACL_MODEL", "Process_Id": 2340, "Thread_Id": 2342}, "ph": "X"},
    ]
    p = tmp_path / "msprof_0_1_1.json"
    p.write_text(json.dumps(events))
    return p


def _torch_export(tmp_path, with_ranges=True):
    """torch.profiler's Chrome trace: its clock 40 µs ahead; record_function ranges, one aten op and a
    device-side copy of the model range (gpu_user_annotation, on the GPU's clock: not a host range)."""
    ua = {"External id": 3, "Record function id": 0, "Ev Idx": 2}
    rows = [("dvpipe:decode@CAM0", 140.0, 796.0), ("dvpipe:decode@CAM1", 240.0, 796.0),
            ("dvpipe:model", 2040.0, 1996.0), ("dvpipe:decode@CAM0", 100140.0, 646.0),
            ("dvpipe:decode@CAM1", 100240.0, 646.0), ("dvpipe:model", 102040.0, 1996.0)] if with_ranges else []
    events = [{"ph": "X", "cat": "user_annotation", "name": n, "pid": 4242, "tid": 4242, "ts": ts, "dur": dur,
               "args": ua} for n, ts, dur in rows]
    events += [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 4242, "tid": 4242, "ts": 2500.5, "dur": 10.25,
         "args": {"External id": 5, "Record function id": 0, "Ev Idx": 4}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "dvpipe:model", "pid": 0, "tid": 7, "ts": 9999.0,
         "dur": 5.0, "args": {"External id": 3}},
        {"name": "process_name", "ph": "M", "ts": 0.0, "pid": 4242, "tid": 0, "args": {"name": "python3"}},
        {"name": "process_labels", "ph": "M", "ts": 0.0, "pid": 4242, "tid": 0, "args": {"labels": "CPU"}},
        {"name": "thread_name", "ph": "M", "ts": 0.0, "pid": 4242, "tid": 4242, "args": {"name": "thread 4242"}},
    ]
    doc = {"schemaVersion": 1, "deviceProperties": [], "record_shapes": 0, "with_stack": 0,
           "displayTimeUnit": "ms", "baseTimeNanoseconds": 1767225600000000000, "traceEvents": events,
           "traceName": "torch_trace.json"}
    p = tmp_path / "torch_trace.json"
    p.write_text(json.dumps(doc))
    return p


def _nsys_export(tmp_path, sets=(0, 1)):
    """nsys2json output: the report's clock is dvpipe's minus 4_992_999_500 ns (no epoch recorded)."""
    rows = {0: [("dvpipe:decode@CAM0", 7100.5, 796.0), ("dvpipe:decode@CAM1", 7200.5, 796.0),
                ("dvpipe:model", 9000.5, 1996.0)],
            1: [("dvpipe:decode@CAM0", 107100.5, 646.0), ("dvpipe:decode@CAM1", 107200.5, 646.0),
                ("dvpipe:model", 109000.5, 1996.0)]}
    events = [{"name": n, "ph": "X", "cat": "nvtx", "ts": ts, "dur": dur, "tid": "NVTX Thread 1234",
               "pid": "Device 0", "args": {}} for k in sets for n, ts, dur in rows[k]]
    events.append({"name": "vectorAdd", "ph": "X", "cat": "cuda", "ts": 9500.0, "dur": 100.0, "tid": "Stream 7",
                   "pid": "Device 0", "args": {}})
    p = tmp_path / "nsys.json"
    p.write_text(json.dumps(events))
    return p


def _by_name(trace, name, pids):
    return [ev for ev in trace["traceEvents"] if ev.get("name") == name and ev.get("pid") in pids]


def _proc_names(trace):
    return {ev["pid"]: ev["args"]["name"] for ev in trace["traceEvents"]
            if ev.get("ph") == "M" and ev.get("name") == "process_name"}


def test_msprof_export_aligned_on_the_ranges(tmp_path):
    merged, (a,) = merge_traces(_dvpipe_trace(tmp_path), [_msprof_export(tmp_path)])
    validate_trace(merged)
    assert a.format == "msprof" and a.method == "ranges"
    assert a.offset_ns == E + 27_000 and a.epoch_offset_ns == E       # hand-computed: 25 µs + 2 µs
    assert (a.ranges_in_export, a.ranges_matched, a.residual_median_ns, a.residual_max_ns) == (6, 6, 0, 0)
    names = _proc_names(merged)
    msprof_pids = {p for p, n in names.items() if n.startswith("msprof: ")}
    assert {names[p] for p in msprof_pids} == {"msprof: MsprofTx", "msprof: CANN"}
    assert 1 in names and not (msprof_pids & {1})  # dvpipe's process and the export's stay apart
    # aclmdlExecute at epoch 1767225600002100.000 µs -> dvpipe ns 5_002_100_000 - 27_000 -> 2073.0 µs from base
    (acl,) = _by_name(merged, "aclmdlExecute", msprof_pids)
    assert _ns(acl["ts"]) == 2_073_000 and _ns(acl["dur"]) == 1_500_000
    # each range lands on its span (the 2 µs push delay is common to all, so the median absorbs it)
    spans = {(ev["name"], ev["args"]["camera"], round(ev["ts"])) for ev in merged["traceEvents"]
             if ev.get("ph") == "X" and ev["pid"] == 1}
    for ev in merged["traceEvents"]:
        if ev["pid"] in msprof_pids and ev.get("ph") == "X" and ev["name"].startswith("dvpipe:"):
            step, _, cam = ev["name"][7:].partition("@")
            assert (step, cam or None, round(ev["ts"])) in spans
    assert merged["otherData"]["base_ns"] == T0 and merged["otherData"]["merge"][0]["alignment"] == "ranges"


def test_msprof_export_aligned_on_the_epoch(tmp_path):
    merged, (a,) = merge_traces(_dvpipe_trace(tmp_path), [_msprof_export(tmp_path)], align="epoch")
    assert a.method == "epoch" and a.offset_ns == E
    (acl,) = _by_name(merged, "aclmdlExecute", {p for p, n in _proc_names(merged).items() if n.startswith("msprof")})
    assert _ns(acl["ts"]) == 2_100_000  # 5_002_100_000 - 5_000_000_000 ns


def test_torch_export(tmp_path):
    merged, (a,) = merge_traces(_dvpipe_trace(tmp_path), [_torch_export(tmp_path)])
    assert a.format == "torch" and a.method == "ranges"
    # torch ns = ts * 1000 + 1767225600000000000 (epoch) = dvpipe ns + E + 40 µs  ->  offset on torch's own clock
    # torch's own ns: ts * 1000 (relative to baseTimeNanoseconds); decode@CAM0 140_000 vs span 5_000_100_000
    assert a.offset_ns == 140_000 - 5_000_100_000 == -4_999_960_000
    assert a.epoch_offset_ns == E - 1767225600000000000 == -5_000_000_000  # the epochs: 40 µs less
    assert a.ranges_matched == 6  # the gpu_user_annotation copy is not a host range
    torch_pids = {p for p, n in _proc_names(merged).items() if n.startswith("torch: ")}
    (add,) = _by_name(merged, "aten::add", torch_pids)
    assert _ns(add["ts"]) == 2_460_500 and _ns(add["dur"]) == 10_250  # (2_500_500 - 40_000) ns from T0
    assert _proc_names(merged)[next(iter(_by_name(merged, "aten::add", torch_pids)))["pid"]] == "torch: python3"


def test_torch_export_without_ranges_falls_back_to_the_epoch(tmp_path):
    merged, (a,) = merge_traces(_dvpipe_trace(tmp_path), [_torch_export(tmp_path, with_ranges=False)])
    assert a.method == "epoch" and a.ranges_matched == 0
    torch_pids = {p for p, n in _proc_names(merged).items() if n.startswith("torch: ")}
    assert _ns(_by_name(merged, "aten::add", torch_pids)[0]["ts"]) == 2_500_500


def test_nsys_conversion_aligned_on_ranges_and_string_ids_renumbered(tmp_path):
    merged, (a,) = merge_traces(_dvpipe_trace(tmp_path), [_nsys_export(tmp_path)])
    assert a.format == "chrome" and a.method == "ranges" and a.offset_ns == -4_992_999_500
    assert a.epoch_offset_ns is None
    (kernel,) = [ev for ev in merged["traceEvents"] if ev.get("name") == "vectorAdd"]
    assert _ns(kernel["ts"]) == 2_499_500 and isinstance(kernel["pid"], int) and isinstance(kernel["tid"], int)
    names = _proc_names(merged)
    assert names[kernel["pid"]] == "chrome: Device 0"
    threads = {(ev["pid"], ev["tid"]): ev["args"]["name"] for ev in merged["traceEvents"]
               if ev.get("ph") == "M" and ev.get("name") == "thread_name"}
    assert threads[(kernel["pid"], kernel["tid"])] == "Stream 7"


def test_a_profile_of_part_of_the_run_aligns_on_the_right_frame_set(tmp_path):
    """Only set 1 was profiled: pairing ranges with spans in order would put them on set 0 (100 ms off);
    the durations (650 µs decodes in set 1) pick the right set."""
    merged, (a,) = merge_traces(_dvpipe_trace(tmp_path), [_nsys_export(tmp_path, sets=(1,))])
    assert a.offset_ns == -4_992_999_500 and a.ranges_matched == 3


def test_with_recorded_epochs_a_partial_profile_is_placed_by_them(tmp_path):
    """msprof recorded only set 1, with the durations of set 0: the durations point at the wrong set, the
    recorded wall clocks (27 µs apart from the ranges, not 100 ms) at the right one."""
    p = _msprof_export(tmp_path)
    events = [ev for ev in json.loads(p.read_text())
              if not (ev.get("ph") == "X" and ev["ts"] < "1767225600100000")]
    for ev in events:
        if ev.get("name", "").startswith("dvpipe:decode"):
            ev["dur"] = 796.0
    p.write_text(json.dumps(events))
    merged, (a,) = merge_traces(_dvpipe_trace(tmp_path), [p])
    assert a.method == "ranges" and a.ranges_matched == 3 and a.offset_ns == E + 27_000


def test_three_exports_in_one_file_each_kept_apart(tmp_path):
    out = tmp_path / "merged.json.gz"
    rc = cli_main(["trace", "merge", str(_dvpipe_trace(tmp_path)), str(_msprof_export(tmp_path)),
                   str(_torch_export(tmp_path)), str(_nsys_export(tmp_path)), "-o", str(out)])
    assert rc == 0
    import gzip

    merged = json.loads(gzip.decompress(out.read_bytes()))
    validate_trace(merged)
    names = _proc_names(merged)
    groups = {prefix: {p for p, n in names.items() if n.startswith(prefix)} for prefix in ("msprof:", "torch:",
                                                                                         "chrome:")}
    assert all(groups.values()) and len(set.union(*groups.values())) == sum(len(g) for g in groups.values())
    assert names[1] == "dvpipe"
    assert [m["format"] for m in merged["otherData"]["merge"]] == ["msprof", "torch", "chrome"]


@pytest.mark.parametrize("case, message", [
    ("missing", "file not found"),
    ("not_json", "not JSON (Expecting value at line 1 column 1)"),
    ("not_trace", "not a Chrome trace"),
    ("bad_ts", "'ts' is not a number ('soon')"),
    ("dvpipe_as_export", "this is a dvpipe trace"),
    ("no_alignment", "cannot put it on dvpipe's clock"),
])
def test_bad_exports_are_one_line_errors(tmp_path, capsys, case, message):
    dv = _dvpipe_trace(tmp_path)
    bad = tmp_path / "bad.json"
    if case == "not_json":
        bad.write_text("oops")
    elif case == "not_trace":
        bad.write_text(json.dumps({"events": []}))
    elif case == "bad_ts":
        bad.write_text(json.dumps([{"name": "x", "ph": "X", "ts": "soon", "dur": 1, "pid": 1, "tid": 1}]))
    elif case == "dvpipe_as_export":
        bad = dv
    elif case == "no_alignment":  # a converted Nsight report without dvpipe ranges: no clock in common
        bad.write_text(json.dumps([{"name": "k", "ph": "X", "ts": 1.0, "dur": 1, "pid": "Device 0", "tid": 1}]))
    with pytest.raises(MergeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        merge_traces(dv, [bad])
    rc = cli_main(["trace", "merge", str(dv), str(bad), "-o", str(tmp_path / "m.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("dvpipe trace: error: ") and str(bad) in err[0]
    assert not (tmp_path / "m.json").exists()


def test_the_first_file_must_be_dvpipes_trace(tmp_path, capsys):
    rc = cli_main(["trace", "merge", str(_msprof_export(tmp_path)), str(_torch_export(tmp_path)), "-o",
                   str(tmp_path / "m.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "not a trace written by dvpipe" in err[0]


def test_merge_usage_errors(tmp_path, capsys):
    dv = str(_dvpipe_trace(tmp_path))
    assert cli_main(["trace", "merge", dv, "-o", str(tmp_path / "m.json")]) == 2
    assert "at least one profiler export" in capsys.readouterr().err
    assert cli_main(["trace", "merge", dv, str(_torch_export(tmp_path))]) == 2
    assert "-o OUT" in capsys.readouterr().err
    assert cli_main(["trace", dv]) == 0  # the summary still works
    assert "6 spans" in capsys.readouterr().out


def test_load_export_reads_msprof_string_times_exactly(tmp_path):
    ex = load_export(_msprof_export(tmp_path))
    assert ex.format == "msprof" and ex.epoch_base_ns == 0
    i = next(i for i, ev in enumerate(ex.events) if ev.get("name") == "aclmdlExecute")
    assert ex.ts_ns[i] == 1767225600002100000 and ex.dur_ns[i] == 1_500_000  # no float rounding at 1.7e18


def test_a_real_torch_profile_of_a_pipeline_merges_on_its_ranges(tmp_path):
    """torch's own profiler (not a hand-written file): every dvpipe range it recorded pairs with a span."""
    torch = pytest.importorskip("torch")
    from torch._C._profiler import _ExperimentalConfig
    from torch.profiler import ProfilerActivity, profile

    import dvpipe as dv
    from conftest import encode_jpeg, rig_dict, textured_bgr

    rig = dv.Rig.from_dict(rig_dict([(64, 48), (64, 48)]))
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Normalise(mean=(0, 0, 0), std=(1, 1, 1)), dv.Pad(size_divisor=32)],
                       profiler_ranges=["torch"])
    frames = {c.name: encode_jpeg(textured_bgr(64, 48, seed=k)) for k, c in enumerate(rig)}
    w = TraceWriter()
    with profile(activities=[ProfilerActivity.CPU],
                 experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
        for _ in range(3):
            w.add(pipe.process(frames).timeline)
    pipe.close()
    prof.export_chrome_trace(str(tmp_path / "torch.json"))
    w.write(tmp_path / "dv.json")
    merged, (a,) = merge_traces(tmp_path / "dv.json", [tmp_path / "torch.json"])
    steps = sum(len(cp.steps) for cp in pipe.plan.cameras)
    assert a.format == "torch" and a.method == "ranges"
    assert a.ranges_in_export == a.ranges_matched == 3 * steps
    assert a.residual_median_ns is not None and a.residual_median_ns < 1_000_000
    validate_trace(merged)
    del torch


def test_an_export_with_legacy_async_and_mark_events_merges(tmp_path):
    """Legacy async events (S/F) and marks (R) are Trace Event Format events: the merged file keeps them."""
    dv = _dvpipe_trace(tmp_path)
    export = tmp_path / "chrome.json"
    export.write_text(json.dumps([
        {"ph": "X", "name": "dvpipe:decode@CAM0", "ts": 7100.5, "dur": 796.0, "pid": 7, "tid": 7},
        {"ph": "S", "name": "memcpy", "id": 3, "ts": 7110.0, "pid": 7, "tid": 7, "cat": "gpu"},
        {"ph": "F", "name": "memcpy", "id": 3, "ts": 7120.0, "pid": 7, "tid": 7, "cat": "gpu"},
        {"ph": "R", "name": "mark", "ts": 7130.0, "pid": 7, "tid": 7, "args": {}}]))
    out = tmp_path / "m.json"
    assert cli_main(["trace", "merge", str(dv), str(export), "-o", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert sorted(ev["ph"] for ev in merged["traceEvents"] if ev["pid"] >= 1000 and ev["ph"] != "M") == \
        ["F", "R", "S", "X"]
    validate_trace(merged)


def test_batch_slices_of_an_older_trace_come_out_process_scoped(tmp_path):
    """dvpipe wrote its batch slices with a global ``id`` before; the merge reads it and writes the
    process-scoped ``id2.local`` (Trace Event Format, async events), so each run keeps its own track."""
    dv = _dvpipe_trace(tmp_path)
    trace = json.loads(dv.read_text())
    second = [dict(ev, pid=2) for ev in trace["traceEvents"]]  # a second run recorded alongside
    for ev in second:
        if ev["ph"] == "M" and ev["name"] == "process_name":
            ev["args"] = {"name": "dvpp-sim"}
    trace["traceEvents"] += second
    for ev in trace["traceEvents"]:
        if ev["ph"] in "be":
            assert ev["id2"]["local"] in ("0x0", "0x1")
            ev["id"] = int(ev.pop("id2")["local"], 16)  # as older dvpipe wrote it
    dv.write_text(json.dumps(trace))
    merged, _ = merge_traces(dv, [_msprof_export(tmp_path)])
    slices = [ev for ev in merged["traceEvents"] if ev.get("cat") == "batch"]
    assert len(slices) == 8 and all("id" not in ev for ev in slices)
    # the track Perfetto's JSON importer gives an id2.local slice: (process, cat, id)
    tracks: dict = {}
    for ev in slices:
        tracks.setdefault((ev["pid"], ev["cat"], ev["id2"]["local"]), []).append(ev["ph"])
    assert sorted(tracks) == [(p, "batch", i) for p in (1, 2) for i in ("0x0", "0x1")]
    assert all(sorted(v) == ["b", "e"] for v in tracks.values())


def test_a_damaged_gzip_input_is_a_one_line_merge_error(tmp_path, capsys):
    import gzip

    dv = _dvpipe_trace(tmp_path)
    raw = gzip.compress(_msprof_export(tmp_path).read_bytes())
    bad = tmp_path / "msprof.json.gz"  # the deflate stream's first block of reserved type 11 (RFC 1951 3.2.3)
    bad.write_bytes(raw[:10] + bytes([raw[10] | 0x06]) + raw[11:])
    with pytest.raises(MergeError, match="damaged gzip file"):
        merge_traces(dv, [bad])
    assert cli_main(["trace", "merge", str(dv), str(bad), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged gzip file" in err[0]


def test_the_merged_file_is_valid_json_when_an_input_holds_nan(tmp_path):
    """Python's json reads bare NaN (an older dvpipe trace's span attribute, an export's arg); RFC 8259 JSON
    has none, and JavaScript's JSON.parse refuses it: the merged file writes the string "NaN"."""
    import shutil
    import subprocess

    dv = _dvpipe_trace(tmp_path)
    trace = json.loads(dv.read_text())
    next(ev for ev in trace["traceEvents"] if ev["ph"] == "X")["args"]["score"] = float("nan")
    dv.write_text(json.dumps(trace))  # bare NaN, as dvpipe wrote it before
    export = json.loads(_torch_export(tmp_path).read_text())
    export["traceEvents"][0]["args"]["flops"] = float("inf")
    ex = tmp_path / "torch_nan.json"
    ex.write_text(json.dumps(export))
    out = tmp_path / "m.json"
    assert cli_main(["trace", "merge", str(dv), str(ex), "-o", str(out)]) == 0

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    merged = json.loads(out.read_text(), parse_constant=refuse)
    assert "NaN" in [ev["args"].get("score") for ev in merged["traceEvents"] if ev["ph"] == "X"]
    assert "Infinity" in [ev["args"].get("flops") for ev in merged["traceEvents"] if ev["ph"] == "X"]
    node = shutil.which("node")
    if node:
        js = "JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8')); console.log('ok')"
        run = subprocess.run([node, "-e", js, str(out)], capture_output=True, text=True, timeout=60)
        assert run.stdout.strip() == "ok", run.stderr
