"""The runner end to end: faults (corrupt, stall, disconnect, resolution change, never opens), each
sync policy with injected lateness, back-pressure versus stalls, the model hook, limits, Ctrl-C,
outputs and `dvpipe run`. Every run checks the accounting invariant: frames in = emitted + dropped.

Runs use tiny synthetic cameras (96x64); live ones run for about a second. No wall-clock speed
assertions: only orderings and lower bounds that hold on a slow machine; the waits and limits a test
asserts are read on a fake clock given to the runner (``Runner(clock=...)``).
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from dvpipe.cli import main as cli_main
from dvpipe.deploy import Runner, load_deployment
from dvpipe.testing.deployments import synthetic_deployment
from dvpipe.latency import now_ns
from tolerances import tol

ROOT = Path(__file__).resolve().parents[2]


def run(dep_dict: dict, **kw):
    dep = load_deployment(dep_dict)
    result = Runner(dep, write_outputs=False, **kw).run()
    assert_accounted(result)
    return result


def assert_accounted(result) -> None:
    acc = result.accounting
    assert acc.check() == []
    for cam in acc.cameras:
        assert acc.entered[cam] == acc.emitted[cam] + sum(acc.dropped[cam].values()), cam
    t = acc.totals()
    assert t["entered"] == t["emitted"] + t["dropped"]


def live(**kw) -> dict:
    """Three live synthetic cameras at 25 fps; late cameras wait 30 ms."""
    sync = dict({"tolerance_ms": 10, "deadline_ms": 30}, **kw.pop("sync", {}))
    return synthetic_deployment(3, fps=25.0, realtime=True, frames=kw.pop("frames", 30), sync=sync, **kw)


# ------------------------------------------------------------------------------------------ basics
def test_offline_run_emits_every_frame_in_complete_sets():
    seen = []
    result = run(synthetic_deployment(3, frames=10), model=lambda b: seen.append((b.images.shape, b.valid.copy())))
    acc = result.accounting
    assert result.sets == 10 and result.stopped_by == "end of input"
    assert acc.entered == {"CAM0": 10, "CAM1": 10, "CAM2": 10} and acc.emitted == acc.entered
    assert all(shape == (3, 3, 64, 96) and valid.all() for shape, valid in seen)
    steps = result.stats.step_names
    assert {"queue_wait", "decode", "model"} <= set(steps), steps
    assert result.stats.warmup_batches == 2 and result.stats.step("model").count == 10 - 2  # latency.warmup_sets


def test_metas_carry_set_time_skew_and_capture():
    r = Runner(load_deployment(synthetic_deployment(2, frames=3)), write_outputs=False)
    metas = []
    for rb in r.batches():
        metas.append([dict(m) for m in rb.batch.metas])
    assert_accounted(r.finish())
    m = metas[1][1]
    assert m["set_time_ns"] == m["capture_epoch_ns"] - m["sync_skew_ns"] and m["stale"] is False
    assert m["seq"] == 1 and "lidar2img" in m


# ------------------------------------------------------------------------------------------ faults
@pytest.mark.parametrize("encoding", ["jpeg", "h264"])
def test_corrupt_frames_are_counted_drops_and_the_other_cameras_go_on(encoding):
    result = run(synthetic_deployment(3, frames=12, encoding=encoding, cycle=8, faults={"CAM1": {"corrupt": [3]}}))
    d = result.accounting.dropped
    assert d["CAM0"] == {} and d["CAM2"] == {}
    assert result.accounting.emitted["CAM0"] == 12
    if encoding == "jpeg":
        assert d["CAM1"] == {"corrupt": 1}
    else:  # the P-frames after a corrupt one wait for the next keyframe (picture 8)
        assert d["CAM1"] == {"corrupt": 1, "keyframe_wait": 4}
    assert result.accounting.emitted["CAM1"] == 12 - sum(d["CAM1"].values())


@pytest.mark.parametrize("encoding", ["jpeg", "h264"])
def test_resolution_change_mid_stream(encoding):
    result = run(synthetic_deployment(2, frames=10, encoding=encoding, faults={"CAM0": {"resize": {6: [48, 32]}}}))
    acc = result.accounting
    assert acc.dropped["CAM0"] == {"wrong_size": 4} and acc.emitted["CAM0"] == 6
    assert "frame is 48x32 but the camera declares 96x64" in acc.examples[("CAM0", "wrong_size")]
    assert acc.emitted["CAM1"] == 10


def test_source_that_never_opens_is_masked_in_every_set():
    result = run(synthetic_deployment(3, frames=6, faults={"CAM2": {"fail_open": True}}))
    acc = result.accounting
    assert acc.health["CAM2"].state == "failed" and "did not open" in acc.health["CAM2"].detail
    assert acc.entered["CAM2"] == 0 and sum(acc.masked["CAM2"].values()) == 6
    assert acc.emitted["CAM0"] == acc.emitted["CAM1"] == 6
    assert "source did not open" in result.summary()


def test_stalled_camera_is_reported_as_stalled_and_masked_while_the_others_go_on():
    # the threshold (300 ms, 7.5 frame periods) well above a pause a loaded host gives the whole process,
    # the stall (0.6 s) well above the threshold
    dep = live(faults={"CAM1": {"stall": {8: 0.6}}}, run={"stall_timeout_ms": 300})
    result = run(dep)
    acc = result.accounting
    h = acc.health["CAM1"]
    assert h.stalls >= 1 and h.stalled_ns >= 300_000_000
    assert sum(acc.masked["CAM1"].values()) >= 3
    assert acc.health["CAM0"].stalls == 0 and acc.health["CAM2"].stalls == 0
    assert acc.emitted["CAM0"] >= 25
    assert "stalled" in result.summary()


@pytest.mark.parametrize("encoding", ["jpeg", "h264"])
def test_disconnected_stream_reconnects_with_backoff(encoding):
    result = run(live(encoding=encoding, faults={"CAM0": {"disconnect": [8]}}))
    acc = result.accounting
    h = acc.health["CAM0"]
    assert (h.disconnects, h.reconnects) == (1, 1), h.events
    assert any("injected fault: stream lost" in e for e in h.events)
    assert acc.emitted["CAM0"] >= 20
    if encoding == "h264":  # it resumes at a keyframe: nothing waits for one
        assert "keyframe_wait" not in acc.dropped["CAM0"] and "corrupt" not in acc.dropped["CAM0"]


def test_recorded_stream_lost_fails_that_camera_only():
    result = run(synthetic_deployment(2, frames=10, faults={"CAM1": {"disconnect": [4]}}))
    acc = result.accounting
    assert acc.health["CAM1"].state == "failed" and "stream lost" in acc.health["CAM1"].detail
    assert acc.emitted["CAM1"] == 4 and acc.emitted["CAM0"] == 10


# ------------------------------------------------------------------------------------------ policies
@pytest.mark.parametrize("policy", ["mask", "reuse", "drop"])
def test_sync_policies_with_injected_lateness(policy):
    seen = []

    def model(batch):
        i = batch.cameras.index("CAM1")
        seen.append((bool(batch.valid[i]), batch.metas[i].get("stale"), batch.metas[i].get("stale_age_ns"),
                     float(np.abs(batch.images[i]).sum())))

    dep = live(faults={"CAM1": {"late_ms": {5: 150}}}, sync={"on_late": policy, "max_reuse_age_ms": 1000})
    result = run(dep, model=model)
    acc = result.accounting
    assert acc.dropped["CAM1"].get("late", 0) >= 1  # frame 5 came after its set was emitted
    if policy == "mask":
        assert sum(acc.masked["CAM1"].values()) >= 2
        assert any(not valid and total == 0.0 for valid, _s, _a, total in seen)
    elif policy == "reuse":
        assert acc.stale["CAM1"] >= 2
        stale = [(valid, age, total) for valid, st, age, total in seen if st]
        assert stale and all(valid and age > 0 and total > 0 for valid, age, total in stale)
        masked = [text for (cam, key), text in acc.examples.items() if cam == "CAM1" and key.startswith("masked:")]
        assert all("no recent frame to reuse" in t for t in masked), masked  # only before its first frame
    else:
        assert acc.dropped["CAM0"].get("set_dropped", 0) >= 2 and acc.dropped["CAM2"].get("set_dropped", 0) >= 2
        # a late camera is never masked: its set is gone (a camera whose source ended is, at the end)
        assert set(acc.masked["CAM1"]) <= {"ended"}, acc.masked["CAM1"]


# ------------------------------------------------------------------------------------------ pressure
def test_slow_pipeline_is_back_pressure_not_a_stall():
    result = run(synthetic_deployment(2, frames=12), model=lambda b: time.sleep(0.02))
    for cam, h in result.accounting.health.items():
        assert h.stalls == 0 and h.blocked_ns > 0, cam
    assert result.accounting.totals()["dropped"] <= 6  # recordings lose nothing but what is queued at the end


class ModelClock:
    """The runner's clock for a slow model: its time passes only while the model works, ``period_s`` per
    call (the model also sleeps that long for real, so that the live sources outpace it). Waits measured
    on it count model calls, whatever else the machine is doing."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.ns = now_ns()
        self.calls = 0

    def __call__(self) -> int:
        return self.ns

    def model(self, batch) -> None:
        self.calls += 1
        self.ns += round(self.period_s * 1e9)
        time.sleep(self.period_s)


def test_live_sources_never_build_a_backlog():
    dep = synthetic_deployment(2, fps=100.0, realtime=True, frames=60, run={"queue_size": 1},
                               sync={"tolerance_ms": 4, "deadline_ms": 20})
    clock = ModelClock(0.04)
    result = run(dep, model=clock.model, clock=clock)
    acc = result.accounting
    assert acc.dropped["CAM0"].get("superseded", 0) > 10  # the latest frame wins
    assert all(h.stalls == 0 for h in acc.health.values())
    # a frame waits for the model call in progress (and an incomplete set for its deadline, one call
    # more), never for a queue of earlier sets: bounded by two model calls however long the run
    assert clock.calls >= 5
    assert result.stats.step("queue_wait").max_ns <= 2 * round(clock.period_s * 1e9)


# ------------------------------------------------------------------------------------------ model, limits
def test_model_errors_are_counted_and_the_run_goes_on():
    calls = []

    def model(batch):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return batch.images.mean()

    result = run(synthetic_deployment(2, frames=5), model=model)
    assert result.accounting.model_errors == 1 and "RuntimeError: boom" in result.model_error
    assert result.sets == 5 and result.stats.step("model").count == 5 - result.stats.warmup_batches


def test_model_hook_from_the_yaml_with_init(tmp_path):
    (tmp_path / "hook.py").write_text(
        "class Model:\n"
        "    def __init__(self, scale):\n        self.scale = scale\n        self.sums = []\n"
        "    def __call__(self, batch):\n        self.sums.append(float(batch.images.sum()))\n"
        "        return self.sums[-1] * self.scale\n")
    dep = load_deployment(synthetic_deployment(2, frames=3, model={"entry": "hook:Model", "path": str(tmp_path),
                                                                   "init": {"scale": 2}}))
    r = Runner(dep, write_outputs=False)
    outs = [rb.output for rb in r.batches()]
    assert_accounted(r.finish())
    assert len(r.model.sums) == 3 and len(set(r.model.sums)) > 1  # one call per set, each on its own batch
    assert outs == [2 * x for x in r.model.sums]  # init's scale reached the model, its output reached the set
    (tmp_path / "filehook.py").write_text("def run(batch):\n    return tuple(batch.images.shape)\n")
    dep = load_deployment(synthetic_deployment(2, frames=2, model=str(tmp_path / "filehook.py") + ":run"))
    r = Runner(dep, write_outputs=False)
    assert [rb.output for rb in r.batches()] == [(2, 3, 64, 96)] * 2
    st = r.finish().stats
    assert st.step("model").count + st.warmup_batches == 2


def test_model_hook_problems_are_reported_at_their_key(tmp_path, capsys):
    """The user's model code, checked where it is named: an init of the wrong type (file entries too), an entry
    whose module does not import or lacks the name (dvpipe validate imports it, as run does), a factory that
    raises (model.init, not "please report it"); init {} calls the factory. Under -q, model errors are on stderr."""
    from dvpipe.deploy import DeploymentError
    from dvpipe.errors import ConfigError

    (tmp_path / "hooks.py").write_text(
        "def make(**kw):\n    if kw:\n        raise ValueError('no options')\n    return lambda batch: 'made'\n"
        "def bad(batch):\n    raise ValueError('bad model')\n")
    (tmp_path / "syn.py").write_text("def run(batch)\n")
    hooks = str(tmp_path / "hooks.py")
    with pytest.raises(DeploymentError) as ei:
        load_deployment(synthetic_deployment(1, frames=2, model={"entry": hooks + ":make", "init": 5}))
    assert dict(ei.value.errors) == {"model.init": "expected a mapping of keyword arguments, got int"}
    for entry, text in ((hooks + ":nosuch", "AttributeError"), (str(tmp_path / "syn.py") + ":run", "SyntaxError"),
                        ("hooks:nosuch", "AttributeError")):
        model = {"entry": entry, "path": str(tmp_path)} if entry.startswith("hooks:") else entry
        load_deployment(synthetic_deployment(1, frames=2, model=model))  # run's own load imports it later
        with pytest.raises(DeploymentError) as ei:
            load_deployment(synthetic_deployment(1, frames=2, model=model), probe=True)
        (path, msg), = ei.value.errors
        assert path == "model.entry" and msg.startswith("cannot import") and text in msg
    r = Runner(load_deployment(synthetic_deployment(1, frames=2, model={"entry": hooks + ":make", "init": {}})),
               write_outputs=False)
    assert [rb.output for rb in r.batches()] == ["made", "made"]
    with pytest.raises(ConfigError) as ce:
        Runner(load_deployment(synthetic_deployment(1, frames=2, model={"entry": hooks + ":make", "init": {"a": 1}})),
               write_outputs=False)
    assert ce.value.path == "model.init" and "raised ValueError: no options" in str(ce.value)
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(synthetic_deployment(1, frames=3, model=hooks + ":bad")))
    capsys.readouterr()
    assert cli_main(["run", str(path), "--no-outputs", "-q"]) == 0
    out = capsys.readouterr()
    assert "model errors: 3; first: ValueError: bad model" in out.err and "model errors" not in out.out


def test_frames_and_duration_limits_and_ctrl_c():
    r = run(synthetic_deployment(2, frames=None, run={"frames": 4, "loop": True}))
    assert r.sets == 4 and r.stopped_by == "--frames 4"
    # the duration is read on the runner's clock: here it moves 20 ms per completed set, so 0.4 s is 20 sets
    sets_clock = {"ns": now_ns()}

    def tick(runner) -> None:
        sets_clock["ns"] += 20_000_000

    r = run(synthetic_deployment(2, frames=None, run={"duration_s": 0.4, "loop": True}),
            clock=lambda: sets_clock["ns"], progress=tick)
    # a set already started when the limit is seen (one ahead at most: the runner's sets_ahead) is finished
    assert r.stopped_by == "--duration 0.4 s" and 20 <= r.sets <= 20 + 1
    assert r.elapsed_s == pytest.approx(0.02 * r.sets)
    assert r.accounting.dropped["CAM0"].get("shutdown", 0) == r.accounting.dropped["CAM1"].get("shutdown", 0)

    calls = []

    def interrupt(batch):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt

    # the model raises on the main thread here (overlap off): sets 1-2 done, set 3 interrupted
    r = run(synthetic_deployment(2, frames=20, run={"overlap_model": False}), model=interrupt)
    assert r.interrupted and r.stopped_by == "Ctrl-C" and r.sets == 2
    assert sum(r.accounting.dropped[c].get("shutdown", 0) for c in ("CAM0", "CAM1")) >= 2


@pytest.mark.parametrize("overlap", [True, False])
def test_a_caller_that_stops_iterating_gets_every_emitted_set_to_the_model(overlap):
    # with the model on its own thread, the next set was settled (its frames counted as emitted) before the
    # previous set's result was handed over; a caller that stopped there left it emitted, never modelled
    calls = []
    r = Runner(load_deployment(synthetic_deployment(2, frames=20, run={"overlap_model": overlap})),
               write_outputs=False, model=lambda batch: calls.append(1))
    got = 0
    for _ in r.batches():
        got += 1
        if got == 3:
            break
    result = r.finish()
    assert_accounted(result)
    emitted = result.accounting.emitted
    assert emitted["CAM0"] == emitted["CAM1"] == result.sets == len(calls) >= 3, (dict(emitted), result.sets, calls)


def test_per_camera_backends_plan_into_one_batch():
    dep = synthetic_deployment(3, frames=2, backends=["cpu"])
    dep["cameras"][1]["backends"] = ["reference"]
    ref = {}
    r = Runner(load_deployment(dep), write_outputs=False)
    text = str(r.pipe.plan)
    assert ", backends cpu, " in text.splitlines()[0] and "\n  cameras CAM1: backends reference\n" in text
    assert [(c["name"], c["backends"], {s["backend"] for s in c["steps"]}) for c in r.pipe.plan.to_dict()["cameras"]] == [
        ("CAM0", ["cpu"], {"cpu"}), ("CAM1", ["reference"], {"reference"}), ("CAM2", ["cpu"], {"cpu"})]
    for rb in r.batches():
        ref[rb.frame_set.index] = np.array(rb.batch.images)
        assert rb.batch.valid.all() and list(rb.batch.cameras) == ["CAM0", "CAM1", "CAM2"]
    assert_accounted(r.finish())
    r2 = Runner(load_deployment(synthetic_deployment(3, frames=2, backends=["cpu"])), write_outputs=False)
    for rb in r2.batches():
        np.testing.assert_allclose(rb.batch.images, ref[rb.frame_set.index], **tol("float_path").allclose)
    r2.finish()


# ------------------------------------------------------------------------------------------ outputs, CLI
def test_run_cli_writes_trace_json_plots_and_dumps(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from dvpipe.latency import load_trace, validate_trace

    d = synthetic_deployment(2, frames=4, outputs={"dir": str(tmp_path / "out"), "dumps": {"every": 2, "max": 5}})
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(d))
    rc = cli_main(["run", str(p), "--trace", str(tmp_path / "t.json"), "--json", str(tmp_path / "lat.json"),
                   "--plots", str(tmp_path / "plots")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert validate_trace(load_trace(tmp_path / "t.json")) > 0
    lat = json.loads((tmp_path / "lat.json").read_text())
    assert lat["schema"] == "dvpipe.latency/1" and "decode" in lat["steps"]
    assert sorted(x.name for x in (tmp_path / "plots").iterdir()) == ["latency_cdf.png", "latency_over_time.png",
                                                                       "latency_steps.png", "latency_timeline.png"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["accounted"] and summary["totals"]["entered"] == 8 and summary["sets"] == 4
    dumps = sorted((tmp_path / "out" / "dumps").iterdir())
    assert [x.name for x in dumps] == ["set_000000.json", "set_000000.npz", "set_000002.json", "set_000002.npz"]
    assert np.load(dumps[1])["images"].shape == (2, 3, 64, 96)
    for text in ("plan:", "frames: 8 in = 8 emitted + 0 dropped", "latency (ms)", "outputs:", str(tmp_path / "t.json")):
        assert text in out


def test_dvpipe_run_without_arguments_runs_the_sample(samples_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = cli_main(["run", "--frames", "2", "--backends", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "deployment sample-nuscenes-bevformer-tiny" in out and "plan: 6 camera(s)" in out
    assert "decode" in out and "frames: " in out and "p50" in out and "p90" in out
    assert (tmp_path / "out" / "sample" / "summary.json").exists() and str(tmp_path / "out" / "sample") in out


def test_run_cli_reports_a_run_that_produced_nothing(tmp_path, capsys):
    d = synthetic_deployment(1, frames=3, faults={"CAM0": {"fail_open": -1}})
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(d))
    assert cli_main(["run", str(p), "--no-outputs", "-q"]) == 1
    captured = capsys.readouterr()
    assert "no frame set was produced" in captured.err and "failed" in captured.out


def test_run_cli_checks_output_folders_before_running(tmp_path, capsys):
    d = synthetic_deployment(1, frames=3)
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(d))
    blocker = tmp_path / "a_file"
    blocker.write_text("")  # a folder cannot be created below a file
    assert cli_main(["run", str(p), "--plots", str(blocker / "plots"), "--no-outputs"]) == 2
    captured = capsys.readouterr()
    assert f"--plots {blocker / 'plots'}: cannot create " in captured.err
    assert f"{blocker} is a file, not a folder" in captured.err
    assert "plan:" not in captured.out  # nothing ran
    # --no-outputs wins over a file flag, and says so (it was silent); an empty flag is not the flag left out
    assert cli_main(["run", str(p), "--trace", str(tmp_path / "t.json"), "--no-outputs", "-q"]) == 0
    assert f"--no-outputs: not written: --trace {tmp_path / 't.json'}" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
    for flag in ("--backends", "--out"):
        assert cli_main(["run", str(p), flag, "", "-q"]) == 2
        assert f"{flag} is empty" in capsys.readouterr().err


@pytest.mark.parametrize("sig,code,stopped_by,says", [
    ("SIGINT", 130, "Ctrl-C", "interrupted (Ctrl-C)"),
    ("SIGTERM", 143, "SIGTERM", "stopped: SIGTERM"),
])
def test_ctrl_c_and_sigterm_stop_a_live_run_cleanly(tmp_path, sig, code, stopped_by, says):
    import os
    import signal
    import subprocess
    import sys

    d = synthetic_deployment(2, fps=30.0, realtime=True, frames=None, outputs={"dir": str(tmp_path / "out")})
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(d))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # a shell starts background jobs with SIGINT ignored, and Python then installs no Ctrl-C handler:
    # give the child the default disposition, as a terminal would
    proc = subprocess.Popen([sys.executable, "-m", "dvpipe", "run", str(p)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    head = []
    for line in proc.stdout:  # the plan is printed (and flushed) right before the run starts
        head.append(line)
        if line.startswith("plan:"):
            break
    time.sleep(1.0)
    proc.send_signal(getattr(signal, sig))
    try:
        rest, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, _ = proc.communicate()
    out = "".join(head) + rest
    assert proc.returncode == code, out
    assert says in out and "frames: " in out and "NOT ACCOUNTED" not in out
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["accounted"] and s["stopped_by"] == stopped_by and s["totals"]["entered"] > 0


def test_runtime_fallbacks_are_counted_in_the_run_summary():
    import dvpipe as dv

    @dv.register_kernel(("normalise", "pad", "batch"), backend="flaky-run", replace=True)
    def _fails_on_cam1(data, stages, ctx):
        if ctx.camera.name == "CAM1":
            raise RuntimeError("unit reset")
        from dvpipe.backends.cpu import _fused_write
        return _fused_write(data, stages, ctx)

    result = run(synthetic_deployment(3, frames=5, backends=["flaky-run", "cpu"]))
    acc = result.accounting
    assert acc.fallbacks["CAM1"] == {"normalise+pad+batch: flaky-run -> cpu": 5}
    assert acc.fallbacks["CAM0"] == {} and acc.emitted["CAM1"] == 5
    assert acc.totals()["fallbacks"] == 5 and acc.to_dict()["cameras"]["CAM1"]["fallbacks"]
    from dvpipe.deploy.summary import format_summary
    assert "fallbacks" in format_summary(acc)


def test_deployment_target_plans_dvpp_steps_on_the_software_device():
    dep = yaml.safe_load((ROOT / "samples" / "deployment.yaml").read_text())
    dep.update(target={"soc": "Ascend310", "cann": "6.0.1"}, model=None, outputs={"metrics": False})
    dep["pipeline"].update(fidelity="fast", backends=["dvpp-sim", "cpu"])
    dep["run"].update(frames=4, realtime=False)
    dep["rig"] = str(ROOT / "samples" / "rig.yaml")
    dep["source"]["uri"] = str(ROOT / "samples" / "frames" / "{camera}")
    loaded = load_deployment(dep)
    assert str(loaded.target) == "Ascend310 (CANN 6.0.1)"
    runner = Runner(loaded, write_outputs=False)
    steps = runner.pipe.plan.cameras[0].steps
    assert (steps[0].name, steps[0].backend.name) == ("decode+resize", "dvpp-sim")
    result = runner.run()
    assert_accounted(result)
    assert result.accounting.totals()["emitted"] == 24


@pytest.mark.parametrize("target,match", [
    ({"soc": "910C", "cann": "8.0.0"}, "target.soc"),
    ({"soc": "Ascend310", "cann": "x"}, "target.cann"),
    ({"soc": "Ascend310"}, "target"),
])
def test_deployment_target_errors_have_key_paths(target, match):
    from dvpipe.deploy.config import DeploymentError

    dep = synthetic_deployment(2)
    dep["target"] = target
    with pytest.raises(DeploymentError, match=match):
        load_deployment(dep)


def test_counters_only_accounting_still_counts_and_budgets_end_to_end():
    dep = synthetic_deployment(2, frames=6)
    dep["latency"] = {"counters_only": True, "budget_ms": 10000}
    result = run(dep)
    assert result.stats.counters_only and result.stats.step("decode").count == 12 - 2 * 2  # 2 warm-up sets
    assert result.stats.step("decode").p50_ns is None  # no per-step percentiles in this mode
    assert result.stats.end_to_end("arrival").count == 6 - 2


def test_a_one_frame_recording_loops_at_a_finite_rate(tmp_path):
    """A recording of one frame per camera, looped to reach --frames, ends (it used to spin forever)."""
    import cv2

    from dvpipe.testing.deployments import tiny_rig

    rig = tiny_rig(2)
    for cam in rig["cameras"]:
        (tmp_path / cam["name"]).mkdir()
        img = np.full((cam["height"], cam["width"], 3), 120, np.uint8)
        cv2.imwrite(str(tmp_path / cam["name"] / "1000000000.jpg"), img)
    dep = {"rig": rig, "pipeline": {"stages": ["decode", {"pad": {"size_divisor": 32}}]},
           "source": {"type": "images", "uri": str(tmp_path / "{camera}")}, "run": {"frames": 5, "loop": True},
           "outputs": {"metrics": False}}
    result = run(dep)
    assert result.sets == 5 and result.accounting.dropped_total() == 0  # no read-ahead past N frames


def test_prometheus_endpoint_serves_the_run_metrics():
    pytest.importorskip("prometheus_client")
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dep = synthetic_deployment(2, frames=4)
    dep["outputs"] = {"metrics": False, "prometheus": {"port": port, "addr": "127.0.0.1"}}
    runner = Runner(load_deployment(dep), write_outputs=False)
    try:
        for _ in runner.batches():
            pass
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        runner.close()
        runner.finish()
    assert "dvpipe_batches_total 2.0" in body  # 4 sets, 2 of them warm-up (not in the latency metrics)
    assert 'dvpipe_step_duration_seconds_count{camera="CAM0",kind="host",step="decode"} 2.0' in body
    assert "dvpipe_frame_sets_total 4.0" in body


def test_the_next_set_is_preprocessed_while_the_model_runs():
    """With a model, set k+1's steps run while the model works on set k (its own thread), batches come
    out in order, every frame is accounted for, and a set waiting for the model records that wait."""
    seen = []
    processed = [0]  # sets the pipeline has preprocessed
    progress = threading.Condition()

    def slow_model(batch):
        # hold set k until set k+1 has been preprocessed (an event, not a sleep that a loaded machine outlasts);
        # the last set has no successor
        k = len(seen)
        if k < 5:
            with progress:
                assert progress.wait_for(lambda: processed[0] >= k + 2, 30), "set k+1 was not preprocessed meanwhile"
        seen.append(batch.metas[0]["set_time_ns"])
        return batch.timeline

    r = Runner(load_deployment(synthetic_deployment(2, frames=6)), model=slow_model, write_outputs=False)
    submit = r.pipe.submit

    class Told:  # a PendingBatch whose result() tells when the set has been preprocessed
        def __init__(self, pending):
            self.pending = pending

        def result(self):
            out = self.pending.result()
            with progress:
                processed[0] += 1
                progress.notify_all()
            return out

    r.pipe.submit = lambda *args, **kwargs: Told(submit(*args, **kwargs))
    outs = [rb for rb in r.batches()]
    result = r.finish()
    assert_accounted(result)
    assert [rb.frame_set.time_ns for rb in outs] == seen == sorted(seen)
    tls = [rb.output for rb in outs]
    overlapped = 0
    for prev, nxt in zip(tls, tls[1:]):
        model = next(s for s in prev.spans if s.name == "model")
        first_step = min(s.start_ns for s in nxt.spans if s.name == "decode")
        overlapped += first_step < model.end_ns
    assert len(outs) == 6 and overlapped == 5  # preprocessing ran during every previous set's model call
    assert result.stats.step("model_wait").count >= 3


def test_run_frames_credit_reaches_a_reader_at_its_limit_before_it_ends():
    """run.frames N with the latest-frame policy: a frame superseded as its camera's next one is pushed is
    dropped on the reader's thread; the credit for it must reach the camera's limit then, not when the runner
    next takes the drops (busy in a slow model), or the reader finds its limit spent and ends the camera: the
    run stopped after 1 set of 6 ('end of input'), as a sample run on a loaded machine did."""
    import time

    def slow_model(batch):
        time.sleep(0.05)
        return batch.timeline

    dep = synthetic_deployment(2, frames=8, run={"frames": 6, "loop": True, "latest_only": True, "queue_size": 1})
    r = Runner(load_deployment(dep), model=slow_model, write_outputs=False)
    n = sum(1 for _rb in r.batches())
    result = r.finish()
    assert n == 6 and result.stopped_by != "end of input"
    assert not any("ended" in reason for c in result.accounting.cameras for reason in result.accounting.masked[c])
    assert_accounted(result)


@pytest.mark.parametrize("case", ["a camera twice as fast", "a camera with an extra first frame",
                                  "a camera three times as fast, 5 ms after", "a camera fourteen times as fast"])
def test_run_frames_counts_sets_not_each_cameras_frames(tmp_path, case):
    """run.frames N stops after N frame sets; a camera whose frames do not all join sets (twice the rate of
    the others, or an extra frame without a partner) must still be in every one of the N sets, as its
    recording holds a frame at each set's time (hand-computed: CAM0 at 10 fps from t = 100 ms, tolerance
    20 ms). Capping every recording at N frames masked it as ended in the last sets."""
    import cv2

    from dvpipe.testing.deployments import tiny_rig

    jpeg = cv2.imencode(".jpg", np.full((64, 96, 3), 128, np.uint8))[1].tobytes()
    cam1 = {"a camera twice as fast": range(50, 1100, 50), "a camera with an extra first frame": range(0, 1100, 100),
            # every CAM0 time has a CAM1 frame within 17 and 4 ms; most CAM1 frames join no set
            "a camera three times as fast, 5 ms after": range(5, 1100, 33),
            "a camera fourteen times as fast": range(0, 1100, 7)}[case]
    for cam, times in (("CAM0", range(100, 1100, 100)), ("CAM1", cam1)):
        (tmp_path / cam).mkdir()
        for t in times:
            (tmp_path / cam / f"{1_700_000_000_000 + t}.jpg").write_bytes(jpeg)
    dep = {"name": "frames-limit", "rig": tiny_rig(2), "pipeline": {"stages": ["decode"], "backends": ["cpu"]},
           "source": {"type": "images", "uri": str(tmp_path / "{camera}")},
           "sync": {"tolerance_ms": 20, "on_late": "drop", "anchor": "CAM0"}, "run": {"frames": 5},
           "outputs": {"metrics": False}}
    r = Runner(load_deployment(dep), write_outputs=False)
    sets = [(rb.frame_set.time_ns, list(rb.batch.valid)) for rb in r.batches()]
    result = r.finish()
    assert sets == [((1_700_000_000_000 + t) * 1_000_000, [True, True]) for t in (100, 200, 300, 400, 500)]
    assert result.accounting.check() == [] and not any(result.accounting.masked[c] for c in ("CAM0", "CAM1"))


@pytest.mark.parametrize("frames, loop, lose, sets", [(10, True, [2], 10), (4, False, [2], 4), (10, True, [2, 3], 10),
                                                     (10, False, [2], 4)])
def test_frames_lost_by_the_source_do_not_count_against_run_frames(frames, loop, lose, sets):
    """run.frames counts frame sets (docs/deployments.md); a frame the source loses (faults.lose: it never reaches
    the run) is not one of them, so the recording reads one more in its place (a 5-frame recording: 0 1 _ 3 4; without
    loop it still ends with the recording)."""
    d = synthetic_deployment(1, frames=5, faults={"CAM0": {"lose": lose}}, run={"frames": frames, "loop": loop})
    result = run(d)
    assert result.sets == sets, (result.sets, result.stopped_by)
