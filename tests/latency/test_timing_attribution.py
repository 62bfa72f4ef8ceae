"""Latency attribution through the real Pipeline and Runner (issue: latency accounting, acceptance 1-2):
a stage that sleeps a known time is reported at that time, every step of every frame is in the trace.

Both run on a fake clock (time passes only in the stage's sleep), so the attribution is checked exactly: the
Pipeline's and the Timeline's ``now_ns`` are swapped for it, and the Runner gets it as ``Runner(clock=...)``.
The Pipeline test's clock is per thread (each camera thread's time moves only when it sleeps); the Runner
test runs the cameras on one thread (``pipeline.threads: 1``) on one shared clock, so that the spans that
cross threads (queue and worker waits) are consistent in its trace."""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import ClassVar

import dvpipe as dv
from conftest import encode_jpeg, rig_dict, textured_bgr
from dvpipe.deploy import Runner, load_deployment
from dvpipe.testing.deployments import synthetic_deployment
from dvpipe.latency import validate_trace
from dvpipe.latency.trace import load_trace

SLEEP_S = 0.020


@dataclass(frozen=True)
class Sleep(dv.Stage):
    """Sleeps ``seconds`` on the host and passes the image through."""

    op: ClassVar[str] = "sleep"
    seconds: float = SLEEP_S


#: what the Sleep kernel sleeps with (a test swaps in a fake clock's sleep)
SLEEP = time.sleep


@dv.register_kernel("sleep", backend="cpu", replace=True)
def _sleep(data, stages, ctx):
    SLEEP(stages[0].seconds)
    return data


class ThreadClock:
    """A fake ``now_ns``: each thread's time moves only when that thread sleeps on it.

    Every span is stamped on the thread that runs its step, so a step's duration is exactly the time that
    thread slept inside it, whatever the other camera threads do."""

    def __init__(self, base_ns: int = 10**12) -> None:
        self.base_ns = base_ns
        self._local = threading.local()

    def now(self) -> int:
        return self.base_ns + getattr(self._local, "ns", 0)

    def sleep(self, seconds: float) -> None:
        self._local.ns = getattr(self._local, "ns", 0) + round(seconds * 1e9)


class SharedClock:
    """A fake ``now_ns`` shared by every thread: it moves only when some thread sleeps on it."""

    def __init__(self, base_ns: int = 10**12) -> None:
        self.ns = base_ns
        self._lock = threading.Lock()

    def now(self) -> int:
        return self.ns

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.ns += round(seconds * 1e9)


def _fake_time(monkeypatch, clock):
    """Swap ``clock`` in for the Pipeline's and the Timeline's ``now_ns`` and for the Sleep kernel's sleep."""
    import dvpipe.pipeline
    from dvpipe.latency import timeline as timeline_module

    for module in (dvpipe.pipeline, timeline_module):  # no clock parameter yet (issue-17 report)
        monkeypatch.setattr(module, "now_ns", clock.now)
    monkeypatch.setattr(sys.modules[__name__], "SLEEP", clock.sleep)
    return clock


def test_a_sleeping_stage_is_attributed_its_time_by_the_pipeline(monkeypatch):
    _fake_time(monkeypatch, ThreadClock())
    rig = dv.Rig.from_dict(rig_dict([(64, 48), (64, 48)]))
    pipe = dv.Pipeline(rig, [dv.Decode(), Sleep(), dv.Normalise(), dv.Pad(size_divisor=32)], threads=2)
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    per_step: dict[str, list[float]] = {}
    for _ in range(15):
        batch = pipe.process(frames)
        for cam, step, t0, t1, _b in batch.timings:
            per_step.setdefault(step, []).append((t1 - t0) / 1e9)
    assert len(per_step["sleep"]) == 30 and set(per_step["sleep"]) == {SLEEP_S}
    assert set(per_step["decode"]) == {0.0}  # the sleep is not smeared into its neighbours


def test_runner_attribution_and_a_complete_valid_trace(tmp_path, monkeypatch):
    dep = synthetic_deployment(3, frames=12, outputs={"dir": str(tmp_path), "trace": True, "metrics": False},
                               latency={"warmup_sets": 0})  # every set counted: 36 spans
    dep["pipeline"]["stages"].insert(1, {f"{__name__}:Sleep": {"seconds": SLEEP_S}})
    dep["pipeline"]["threads"] = 1  # the cameras one after the other on the runner's thread
    clock = _fake_time(monkeypatch, SharedClock())
    runner = Runner(load_deployment(dep), clock=clock.now)
    result = runner.run()
    plan_steps = {s.name for s in runner.pipe.plan.cameras[0].steps}
    assert "sleep" in plan_steps
    step = result.stats.step("sleep")
    sleep_ns = round(SLEEP_S * 1e9)
    assert step.count == 36 and step.min_ns == step.max_ns == sleep_ns  # every frame's sleep, exactly
    assert result.stats.step("decode").max_ns == 0  # and nothing of it smeared into the neighbours

    trace = load_trace(tmp_path / "trace.json")
    validate_trace(trace)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    for e in events:
        assert {"ph", "ts", "dur", "pid", "tid", "name"} <= set(e) and e["dur"] >= 0
    # every step of every emitted frame: (batch, camera, step) triples
    seen = {(e["args"].get("batch"), e["args"].get("camera"), e["name"]) for e in events if "args" in e}
    batches = {b for b, _c, _n in seen if b is not None}
    assert len(batches) == 12
    for b in batches:
        for cam in ("CAM0", "CAM1", "CAM2"):
            for name in plan_steps:
                assert (b, cam, name) in seen, (b, cam, name)
