"""Latency attribution through the real Pipeline and Runner (issue: latency accounting, acceptance 1-2):
a stage that sleeps a known time is reported at that time, every step of every frame is in the trace."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

import dvpipe as dv
from conftest import encode_jpeg, rig_dict, textured_bgr
from dvpipe.deploy import Runner, load_deployment
from dvpipe.deploy.testing import synthetic_deployment
from dvpipe.latency import validate_trace
from dvpipe.latency.trace import load_trace

SLEEP_S = 0.020


@dataclass(frozen=True)
class Sleep(dv.Stage):
    """Sleeps ``seconds`` on the host and passes the image through."""

    op: ClassVar[str] = "sleep"
    seconds: float = SLEEP_S


@dv.register_kernel("sleep", backend="cpu", replace=True)
def _sleep(data, stages, ctx):
    time.sleep(stages[0].seconds)
    return data


def test_a_sleeping_stage_is_attributed_its_time_by_the_pipeline():
    rig = dv.Rig.from_dict(rig_dict([(64, 48), (64, 48)]))
    pipe = dv.Pipeline(rig, [dv.Decode(), Sleep(), dv.Normalise(), dv.Pad(size_divisor=32)], threads=2)
    frames = {c.name: encode_jpeg(textured_bgr(64, 48)) for c in rig}
    per_step: dict[str, list[float]] = {}
    for _ in range(15):
        batch = pipe.process(frames)
        for cam, step, t0, t1, _b in batch.timings:
            per_step.setdefault(step, []).append((t1 - t0) / 1e9)
    assert abs(np.median(per_step["sleep"]) - SLEEP_S) <= 0.1 * SLEEP_S
    assert np.median(per_step["decode"]) < SLEEP_S / 2  # the sleep is not smeared into its neighbours


def test_runner_attribution_and_a_complete_valid_trace(tmp_path):
    dep = synthetic_deployment(3, frames=12, outputs={"dir": str(tmp_path), "trace": True, "metrics": False},
                               latency={"warmup_sets": 0})  # every set counted: 36 spans
    dep["pipeline"]["stages"].insert(1, {f"{__name__}:Sleep": {"seconds": SLEEP_S}})
    runner = Runner(load_deployment(dep))
    result = runner.run()
    plan_steps = {s.name for s in runner.pipe.plan.cameras[0].steps}
    assert "sleep" in plan_steps
    step = result.stats.step("sleep")
    assert step.count == 36 and abs(step.p50_ns / 1e9 - SLEEP_S) <= 0.1 * SLEEP_S

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
