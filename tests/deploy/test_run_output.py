"""`dvpipe run` output: progress ETA, -q, warm-up exclusion, the stop line, the critical camera, dumps.

References are the inputs the tests construct (hand-built timelines with known durations, a
deployment's own limits, file counts on disk), never dvpipe's own numbers."""
from __future__ import annotations

import io
import re
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from dvpipe.cli import main as cli_main
from dvpipe.deploy import Runner, load_deployment
from dvpipe.deploy import runner as runner_mod
from dvpipe.deploy._builtin_exporters import DumpsExporter
from dvpipe.deploy.summary import Accounting
from dvpipe.testing.deployments import synthetic_deployment
from dvpipe.latency import LatencyStats, Timeline
from dvpipe.latency.stats import critical_path

MS = 1_000_000


def _write(tmp_path, d) -> str:
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(d))
    return str(p)


# -------------------------------------------------------------------------------- progress line
def _fake_runner(done: int):
    return SimpleNamespace(sets_done=done, started_ns=1, acc=Accounting(["A"]))  # started 1 ns after 0


@pytest.mark.parametrize("total, duration, done, now_s, eta", [
    (100, None, 25, 10.0, "ETA 0:30"),    # 25 sets in 10 s -> 75 more at 2.5 sets/s = 30 s
    (None, 90.0, 7, 30.0, "ETA 1:00"),    # a duration limit: the time left
    (10, 5.0, 1, 1.0, "ETA 0:04"),        # both: whichever comes first (4 s left < 9 sets x 1 s)
    (4000, None, 1, 2.0, "ETA 2:13:18"),  # 3999 s x 2 = 7998 s = 2 h 13 min 18 s
])
def test_progress_line_shows_an_eta_when_the_length_is_known(total, duration, done, now_s, eta):
    clock = {"t": 0}
    out = io.StringIO()
    line = runner_mod.ProgressLine(total, duration, stream=out, every_s=0.0, clock=lambda: clock["t"])
    clock["t"] = int(now_s * 1e9)
    line(_fake_runner(done))
    assert eta in out.getvalue(), out.getvalue()


def test_progress_line_has_no_eta_for_an_open_ended_run():
    out = io.StringIO()
    runner_mod.ProgressLine(None, None, stream=out, every_s=0.0, clock=lambda: 5_000_000_000)(_fake_runner(3))
    assert "ETA" not in out.getvalue() and "3 sets" in out.getvalue()


def _screen(written: str) -> str:
    """What a terminal shows on the line after ``written``: ``\\r`` returns to column 0 and the text overwrites;
    ``ESC [ K`` (ECMA-48 EL, erase in line) clears from the cursor to the end of the line."""
    screen, col = "", 0
    for part in re.split(r"(\r|\x1b\[K)", written):
        if part == "\r":
            col = 0
        elif part == "\x1b[K":
            screen = screen[:col]
        else:
            screen = screen[:col] + part + screen[col + len(part):]
            col += len(part)
    return screen


def test_progress_redrawn_on_a_terminal_leaves_nothing_of_a_longer_line_before():
    class TTY(io.StringIO):
        def isatty(self):
            return True

    cams = [f"CAM_NUMBER_{i}" for i in range(4)]
    runner = SimpleNamespace(sets_done=1, started_ns=1, acc=Accounting(cams))
    clock = {"t": 1_000_000_000}
    out = TTY()
    line = runner_mod.ProgressLine(100, None, stream=out, clock=lambda: clock["t"])
    for c in cams:
        runner.acc.health[c].state = "stalled"
    line(runner)
    assert "CAM_NUMBER_2 stalled" in _screen(out.getvalue())
    for c in cams:
        runner.acc.health[c].state = "streaming"
    runner.sets_done, clock["t"] = 2, 2_000_000_000
    line(runner)
    assert "stalled" not in _screen(out.getvalue()) and _screen(out.getvalue()).startswith("[")


class _Gone(io.TextIOBase):
    """A stderr that can no longer be written: the reader of a pipe went away, or a full disk."""

    def __init__(self, error: OSError):
        self.error = error

    def write(self, s):
        raise self.error

    def isatty(self):
        return False


@pytest.mark.parametrize("error", [BrokenPipeError(32, "Broken pipe"), OSError(28, "No space left on device")])
def test_a_stderr_that_cannot_be_written_ends_the_progress_display_not_the_run(tmp_path, monkeypatch, capsys, error):
    # `dvpipe run ... 2>&1 | head -1`, or stderr to a full disk: the run goes to its end and writes its outputs
    path = _write(tmp_path, synthetic_deployment(2, frames=5, run={"frames": 5}))
    monkeypatch.setattr(sys, "stderr", _Gone(error))
    assert cli_main(["run", path, "--json", str(tmp_path / "latency.json")]) == 0
    assert "5 frame sets in" in capsys.readouterr().out
    assert (tmp_path / "latency.json").is_file()


@pytest.mark.parametrize("flag, value, why", [("--duration", "inf", "finite"), ("--duration", "nan", "finite"),
                                              ("--duration", "1e300", "<= 31622400"), ("--duration", "0", "> 0"),
                                              ("--frames", str(10 ** 13), "<= 1000000000000"), ("--frames", "0", "> 0")])
def test_the_limit_flags_follow_the_deployments_rules(tmp_path, capsys, flag, value, why):
    # docs/deployments.md, "Limits": run.duration_s a finite number of at most a (leap) year, frame counts <= 10^12
    path = _write(tmp_path, synthetic_deployment(1, frames=5, run={"frames": 5}))
    assert cli_main(["run", path, "--no-outputs", flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and why in err[0], err


def test_an_output_that_cannot_be_written_whole_leaves_the_last_one_and_says_so(tmp_path):
    """A full disk or a quota, here a file size limit (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write
    fails with EFBIG): the trace and report of the run before stay as they were (valid JSON, the same
    bytes), the failure is a line on stderr with -q too, and the exit status is 1."""
    import resource
    import subprocess

    path = _write(tmp_path, synthetic_deployment(2, frames=8, run={"frames": 8}))
    cmd = [sys.executable, "-m", "dvpipe", "run", path, "-q", "--trace", str(tmp_path / "trace.json")]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    before = (tmp_path / "trace.json").read_bytes()
    json_ok = __import__("json").loads(before)
    assert json_ok["traceEvents"] and len(before) > 8192

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    second = subprocess.run(cmd, capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert second.returncode == 1, (second.stdout, second.stderr)
    assert "output trace not written: OSError" in second.stderr and "File too large" in second.stderr
    assert (tmp_path / "trace.json").read_bytes() == before
    assert [f.name for f in tmp_path.iterdir() if "tmp" in f.name] == []  # no temporary file left


def test_an_output_named_as_an_existing_folder_is_refused_before_the_run(tmp_path, capsys):
    path = _write(tmp_path, synthetic_deployment(1, frames=3, run={"frames": 3}))
    (tmp_path / "adir").mkdir()
    assert cli_main(["run", path, "--trace", str(tmp_path / "adir")]) == 2
    cap = capsys.readouterr()
    assert "frame sets in" not in cap.out
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and "adir' is a folder" in err[0], err
    assert list((tmp_path / "adir").iterdir()) == []


def test_no_outputs_creates_no_folder(tmp_path):
    path = _write(tmp_path, synthetic_deployment(1, frames=3, run={"frames": 3}))
    assert cli_main(["run", path, "-q", "--no-outputs", "--out", str(tmp_path / "o"),
                     "--plots", str(tmp_path / "p"), "--trace", str(tmp_path / "t" / "trace.json")]) == 0
    assert sorted(f.name for f in tmp_path.iterdir()) == ["dep.yaml"]


def test_leaving_a_with_block_writes_the_outputs_and_closes_the_exporters(tmp_path):
    # the documented form: with Runner(dep) as r: for rb in r.batches(): ...  (finish() never called)
    d = synthetic_deployment(1, frames=3, run={"frames": 3})
    d["outputs"] = {"dir": str(tmp_path / "out"), "metrics": True}
    with Runner(load_deployment(_write(tmp_path, d))) as r:
        sets = sum(1 for _ in r.batches())
    assert sets == 3 and r.exporters_closed
    assert __import__("json").loads((tmp_path / "out" / "summary.json").read_text())["sets"] == 3


# -------------------------------------------------------------------------------- -q and the stop line
def test_quiet_prints_only_the_result_line(tmp_path, capsys):
    path = _write(tmp_path, synthetic_deployment(2, frames=5, run={"frames": 5}))
    assert cli_main(["run", path, "--no-outputs", "-q"]) == 0
    cap = capsys.readouterr()
    lines = cap.out.strip().splitlines()
    assert len(lines) == 1, cap.out
    assert re.fullmatch(r"5 frame sets in [\d.]+ s \([\d.]+ sets/s\); stopped: run\.frames 5 \(the deployment's "
                        r"limit\); end to end p50 [\d.]+ ms, p99 [\d.]+ ms; 10 frames, 0 dropped", lines[0]), lines[0]
    assert cap.err == ""  # no progress line either


def test_the_stop_line_names_the_flag_only_when_the_user_passed_it(tmp_path, capsys):
    path = _write(tmp_path, synthetic_deployment(1, frames=None, run={"frames": 4}))
    assert cli_main(["run", path, "--no-outputs"]) == 0
    out = capsys.readouterr().out
    assert "stopped: run.frames 4 (the deployment's limit)" in out and "--frames" not in out
    assert cli_main(["run", path, "--no-outputs", "--frames", "3"]) == 0
    assert "stopped: --frames 3" in capsys.readouterr().out


def test_the_output_says_when_sets_ran_ahead_in_runs_of_pictures(tmp_path, capsys):
    dep = synthetic_deployment(2, encoding="h264", frames=6, run={"frames": 6})
    dep["pipeline"]["threads"] = 2
    assert cli_main(["run", _write(tmp_path, dep), "--no-outputs"]) == 0
    assert ("run.pictures_per_job 24 (auto: H.264/H.265 recordings read as fast as possible): sets started 24 "
            "ahead, so a set's latency includes the others' work") in capsys.readouterr().out
    dep["latency"] = {"budget_ms": 1000}
    assert cli_main(["run", _write(tmp_path, dep), "--no-outputs"]) == 0
    assert "run.pictures_per_job" not in capsys.readouterr().out


# -------------------------------------------------------------------------------- warm-up
def _timeline(index: int, decode_ms: float) -> Timeline:
    tl = Timeline(index=index)
    tl.set_frame("A", capture_mono_ns=0, arrival_ns=0)
    tl.record("decode", 0, int(decode_ms * MS), camera="A")
    tl.finish(int(decode_ms * MS) + MS)
    return tl


def test_warmup_sets_are_left_out_of_the_statistics_and_counted():
    durations = [500.0, 400.0, 3.0, 5.0, 4.0]  # the first two pay for initialisation
    stats = LatencyStats(warmup=2)
    for i, d in enumerate(durations):
        stats.add(_timeline(i, d))
    s = stats.step("decode")
    assert stats.warmup_batches == 2 and stats.batches == 3 and s.count == 3
    assert s.max_ns == 5 * MS and s.p50_ns == np.percentile(np.array([3, 5, 4]) * MS, 50)
    assert "2 warm-up batches excluded" in stats.report()
    assert stats.to_json()["warmup_batches"] == 2


def test_warmup_sets_in_the_deployment(tmp_path):
    dep = load_deployment(synthetic_deployment(1, frames=None, run={"frames": 10}))
    assert dep.latency.warmup_sets == 2 and dep.latency.warmup_for(10) == 2
    assert dep.latency.warmup_for(3) == 1 and dep.latency.warmup_for(None) == 2  # at most half a known run
    result = Runner(load_deployment(synthetic_deployment(1, frames=6, latency={"warmup_sets": 1})),
                    write_outputs=False).run()
    assert result.sets == 6 and result.stats.warmup_batches == 1 and result.stats.batches == 5
    with pytest.raises(Exception, match=r"latency\.warmup_sets"):
        load_deployment(synthetic_deployment(1, latency={"warmup_sets": -1}))


# -------------------------------------------------------------------------------- critical camera
def test_the_critical_camera_is_the_slow_one_not_the_one_a_worker_took_last():
    """Two cameras, one worker: A (9 ms of decode) runs first, B (2 ms) waits for the worker and ends
    last. The set waited for A's work; B only for the thread. The old rule (last chain end) said B."""
    tl = Timeline(index=0)
    for cam in ("A", "B"):
        tl.set_frame(cam, capture_mono_ns=0, arrival_ns=0)
    tl.record("decode", 0, 9 * MS, camera="A")
    tl.record("worker_wait", 0, 9 * MS, kind="wait", camera="B")
    tl.record("decode", 9 * MS, 11 * MS, camera="B")
    tl.finish(12 * MS)
    cam, path, wait_ns = critical_path(tl)
    assert cam == "A" and wait_ns == 7 * MS  # A ready at 9 ms, B's own work done 2 ms after arrival
    assert [s.name for s in path] == ["decode"]


def test_critical_camera_ties_go_to_rig_order_whatever_the_thread_order():
    def tl_with(first: str, second: str) -> Timeline:
        tl = Timeline(index=0)
        for cam in (first, second):  # the order the cameras' threads reported in
            tl.set_frame(cam, capture_mono_ns=0, arrival_ns=0)
            tl.record("decode", 0, 4 * MS, camera=cam)
        tl.finish(5 * MS)
        return tl

    for order in (("B", "A"), ("A", "B")):
        assert critical_path(tl_with(*order), order=("B", "A"))[0] == "B"
    stats = LatencyStats(camera_order=("B", "A"))
    stats.add(tl_with("A", "B"))
    assert stats.cameras == ["B", "A"] and list(stats.critical_cameras()) == ["B"]


# -------------------------------------------------------------------------------- dumps
def test_dumps_are_written_by_a_writer_thread(tmp_path, monkeypatch):
    threads = []
    real = np.savez_compressed
    monkeypatch.setattr(np, "savez_compressed", lambda *a, **k: (threads.append(threading.current_thread().name),
                                                                  real(*a, **k)))
    d = synthetic_deployment(2, frames=6, outputs={"dir": str(tmp_path), "metrics": False,
                                                   "dumps": {"every": 2, "max": 10}})
    result = Runner(load_deployment(d)).run()
    files = sorted(p.name for p in (tmp_path / "dumps").iterdir())
    assert files == [f"set_{i:06d}.{ext}" for i in (0, 2, 4) for ext in ("json", "npz")]
    assert threads == ["dvpipe-dumps"] * 3 and result.outputs["dumps"] == str(tmp_path / "dumps")
    assert np.load(tmp_path / "dumps" / "set_000004.npz")["images"].shape == (2, 3, 64, 96)


def test_a_full_dump_queue_skips_and_counts_instead_of_stalling_the_run(tmp_path, monkeypatch):
    release = threading.Event()
    real = np.savez_compressed

    def slow_disk(*a, **k):
        release.wait(10)
        return real(*a, **k)

    monkeypatch.setattr(np, "savez_compressed", slow_disk)
    monkeypatch.setattr(DumpsExporter, "queue_size", 1)
    d = synthetic_deployment(1, frames=8, outputs={"dir": str(tmp_path), "metrics": False,
                                                   "dumps": {"every": 1, "max": 100}}, run={"realtime": True})
    runner = Runner(load_deployment(d))  # a real-time run: it does not wait for the disk
    for _ in runner.batches():  # the writer is stuck on its first dump: the run still completes
        pass
    release.set()
    result = runner.finish()
    written = len(list((tmp_path / "dumps").glob("*.npz")))
    m = re.search(r": (\d+) written, (\d+) skipped \(writer queue full\), 0 failed", result.outputs["dumps"])
    assert m, result.outputs["dumps"]
    assert int(m[1]) == written and written + int(m[2]) == 8 and int(m[2]) >= 1  # every dump accounted for


def test_a_run_that_is_not_real_time_waits_for_the_dump_writer_and_dumps_every_set(tmp_path, monkeypatch):
    real = np.savez_compressed
    writing = threading.Lock()

    def slow_disk(*a, **k):  # the writer is slower than the run: without waiting, dumps would be skipped
        with writing:
            time.sleep(0.03)
            return real(*a, **k)

    monkeypatch.setattr(np, "savez_compressed", slow_disk)
    monkeypatch.setattr(DumpsExporter, "queue_size", 1)
    d = synthetic_deployment(1, frames=8, outputs={"dir": str(tmp_path), "metrics": False,
                                                   "dumps": {"every": 1, "max": 100}})
    result = Runner(load_deployment(d)).run()
    assert result.outputs["dumps"] == str(tmp_path / "dumps")  # no "skipped"
    assert sorted(p.name for p in (tmp_path / "dumps").glob("*.npz")) == [f"set_{k:06d}.npz" for k in range(8)]


def test_progress_close_before_the_first_set_on_a_tty_does_not_crash():
    # a run that ends before its first frame set (Ctrl-C, every camera failing): close() draws from started_ns
    import io
    from types import SimpleNamespace

    from dvpipe.deploy._progress import ProgressLine

    class TTY(io.StringIO):
        def isatty(self):
            return True

    s = TTY()
    p = ProgressLine(total=10, stream=s, clock=lambda: 5_000_000_000)
    acc = SimpleNamespace(totals=lambda: {"entered": 0, "dropped": 0, "masked_slots": 0}, health={})
    p.close(SimpleNamespace(sets_done=0, started_ns=1_000_000_000, acc=acc))
    assert "0/10 sets" in s.getvalue() and "0.0 sets/s" in s.getvalue()  # 4 s elapsed from started_ns


def test_progress_line_says_why_the_one_camera_in_trouble_is():
    """A live camera retrying showed only "CAM0 connecting"; with one camera in trouble its reason is shown too
    (shortened); with several, only their states (the line stays short)."""
    runner = SimpleNamespace(sets_done=1, started_ns=1, acc=Accounting(["CAM0", "CAM1"]))
    h = runner.acc.health["CAM0"]
    h.state, h.detail = "connecting", "attempt 3: cannot connect to 127.0.0.1:8554: Connection refused"
    out = io.StringIO()
    runner_mod.ProgressLine(None, None, stream=out, every_s=0.0, clock=lambda: 2_000_000_000)(runner)
    assert "| CAM0 connecting (attempt 3: cannot connect to 127.0.0.1:8554: Connection refused)" in out.getvalue()
    runner.acc.health["CAM1"].state = "stalled"
    out = io.StringIO()
    runner_mod.ProgressLine(None, None, stream=out, every_s=0.0, clock=lambda: 2_000_000_000)(runner)
    assert out.getvalue().rstrip().endswith("| CAM0 connecting, CAM1 stalled")
