"""Step spans as profiler ranges (issue 29): msproftx through a strict stand-in ``acl``, NVTX through a
stand-in ``nvtx`` package, torch.profiler for real; none of them called when the setting is off."""
from __future__ import annotations

import json
import sys

import pytest

import dvpipe as dv
from _fake_profilers import FakeAclError, FakeNvtx, fake_acl
from conftest import encode_jpeg, rig_dict, textured_bgr
from dvpipe.errors import ConfigError
from dvpipe.latency.profiler_ranges import (MsproftxSink, ProfilerRanges, parse_range_name, profiler_ranges,
                                            range_name)

STAGES = [dv.Decode(), dv.Resize(size=(32, 48)), dv.Normalise(mean=(0, 0, 0), std=(1, 1, 1)), dv.Pad(size_divisor=32)]


def _pipe(**kw):
    rig = dv.Rig.from_dict(rig_dict([(64, 48), (64, 48)]))
    return rig, dv.Pipeline(rig, STAGES, **kw)


def _frames(rig):
    return {c.name: encode_jpeg(textured_bgr(64, 48, seed=k)) for k, c in enumerate(rig)}


@pytest.fixture
def fakes(monkeypatch):
    acl, nvtx = fake_acl(), FakeNvtx()
    monkeypatch.setitem(sys.modules, "acl", acl)
    monkeypatch.setitem(sys.modules, "nvtx", nvtx)
    return acl.prof, nvtx


def _step_spans(tl, rig):
    """(step, camera, start_ns, end_ns) of every plan-step span (the worker-wait and assembly spans are not steps)."""
    return [(s.name, s.camera, s.start_ns, s.end_ns) for s in tl.spans
            if s.camera in rig.names and s.kind in ("host", "transfer")]


def test_range_names_round_trip():
    assert range_name("decode", "CAM_FRONT") == "dvpipe:decode@CAM_FRONT"
    assert range_name("model") == "dvpipe:model"
    assert parse_range_name("dvpipe:decode+resize@CAM_FRONT") == ("decode+resize", "CAM_FRONT")
    assert parse_range_name("dvpipe:model") == ("model", None)
    for other in ("decode", "aclrtMemcpy", "dvpipe:", "dvpipe:@CAM", None, 12):
        assert parse_range_name(other) is None


def test_every_step_span_is_a_msproftx_and_nvtx_range(fakes):
    prof, nvtx = fakes
    prof.start(0x1234)  # a profiling session collects msproftx
    rig, pipe = _pipe(profiler_ranges=True)
    assert [s.name for s in pipe.profiler_ranges.sinks][:2] == ["msproftx", "nvtx"]
    batch = pipe.process(_frames(rig))
    pipe.close()
    assert batch.valid.all()
    spans = _step_spans(batch.timeline, rig)
    plan_steps = {(st.name, cp.camera.name) for cp in pipe.plan.cameras for st in cp.steps}
    assert {(n, c) for n, c, _a, _b in spans} == plan_steps and len(spans) == len(plan_steps)
    # msproftx: one range per step span, named after it, inside the span's stamps (same clock), balanced
    assert sorted(m for m, *_ in prof.ranges) == sorted(range_name(n, c) for n, c, *_ in spans)
    by_name = {range_name(n, c): (a, b) for n, c, a, b in spans}
    for msg, _tid, start, end in prof.ranges:
        a, b = by_name[msg]
        assert a <= start <= end <= b
    assert prof.stamps == {} and prof.open_pushes() == 0  # every stamp destroyed, every push popped
    assert prof.calls["create_stamp"] == prof.calls["push"] == prof.calls["pop"] == prof.calls["destroy_stamp"]
    # NVTX: the same ranges, in the "dvpipe" domain (through the nvtx package: torch is not a CUDA build here)
    if pipe.profiler_ranges.sinks[1].source == "nvtx":
        assert sorted(m for m, *_ in nvtx.ranges) == sorted(by_name)
        assert {d for _m, d, *_ in nvtx.ranges} == {"dvpipe"} and nvtx.open_ranges() == 0
    prof.stop(0x1234)  # would raise with a stamp left alive


def test_no_profiler_session_means_no_msproftx_push(fakes):
    prof, nvtx = fakes  # acl.prof.start never called: create_stamp returns 0 (nullptr)
    rig, pipe = _pipe(profiler_ranges=["msproftx"])
    pipe.process(_frames(rig))
    pipe.close()
    assert prof.calls.get("create_stamp", 0) > 0
    assert "push" not in prof.calls and "set_stamp_trace_message" not in prof.calls and prof.ranges == []


def test_off_calls_no_profiler(fakes):
    prof, nvtx = fakes
    prof.start(1)
    rig, pipe = _pipe()  # profiler_ranges defaults to False
    assert pipe.profiler_ranges is None
    batch = pipe.process(_frames(rig))
    pipe.close()
    assert batch.valid.all() and prof.calls == {} and nvtx.ranges == []


def test_the_stand_in_acl_refuses_what_the_reference_does_not_allow(fakes):
    prof, _ = fakes
    prof.start(1)
    with pytest.raises(FakeAclError, match="takes 0"):
        prof.pop(123)  # pop takes no stamp (aclprofPop())
    stamp = prof.create_stamp()
    with pytest.raises(FakeAclError, match="documented call order"):
        prof.push(stamp)
    with pytest.raises(FakeAclError, match="msg_len"):
        prof.set_stamp_trace_message(stamp, "dvpipe:x", 3)
    with pytest.raises(FakeAclError, match="no push open"):
        prof.pop()
    prof.set_stamp_trace_message(stamp, "dvpipe:x", 8)
    prof.push(stamp)
    with pytest.raises(FakeAclError, match="still pushed"):
        prof.destroy_stamp(stamp)
    prof.pop()
    prof.destroy_stamp(stamp)
    # and the sink follows the rules: a balanced range per call
    sink = MsproftxSink(sys.modules["acl"])
    sink.pop(sink.push("dvpipe:decode@CAM0"))
    assert prof.ranges[-1][0] == "dvpipe:decode@CAM0" and prof.stamps == {}


def test_a_requested_profiler_that_is_missing_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "acl", None)  # import acl fails: not installed
    with pytest.raises(ValueError, match="msproftx ranges are not available: pyACL"):
        profiler_ranges(["msproftx"])
    with pytest.raises(ValueError, match="unknown profiler 'nsight'"):
        profiler_ranges(["nsight"])
    with pytest.raises(ConfigError, match="msproftx"):
        _pipe(profiler_ranges=["msproftx"])


def test_torch_profiler_gets_record_function_ranges_only_while_it_records():
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    entered = []
    real = torch.profiler.record_function

    class Counting(real):
        def __enter__(self):
            entered.append(self.name)
            return super().__enter__()

    torch.profiler.record_function = Counting
    try:
        rig, pipe = _pipe(profiler_ranges=["torch"])
    finally:
        torch.profiler.record_function = real
    frames = _frames(rig)
    pipe.process(frames)
    assert entered == []  # no profiler recording: nothing is entered
    # the camera worker threads are recorded with profile_all_threads (else only the calling thread)
    from torch._C._profiler import _ExperimentalConfig
    with profile(activities=[ProfilerActivity.CPU],
                 experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
        batch = pipe.process(frames)
    pipe.close()
    names = [e.name for e in prof.events() if e.name.startswith("dvpipe:")]
    spans = _step_spans(batch.timeline, rig)
    assert sorted(names) == sorted(range_name(n, c) for n, c, *_ in spans) == sorted(entered)


def test_the_runner_emits_the_model_range(fakes):
    from dvpipe.deploy import Runner, load_deployment
    from dvpipe.testing.deployments import synthetic_deployment

    prof, nvtx = fakes
    prof.start(1)
    seen = []
    dep = load_deployment(synthetic_deployment(2, frames=3, latency={"profiler_ranges": True, "warmup_sets": 0}))
    assert dep.latency.profiler_ranges is True
    runner = Runner(dep, write_outputs=False, model=lambda b: seen.append(b))
    steps = [range_name(st.name, cp.camera.name) for cp in runner.pipe.plan.cameras for st in cp.steps]
    result = runner.run()
    assert result.sets == 3 == len(seen)
    names = [m for m, *_ in prof.ranges]
    assert names.count("dvpipe:model") == 3
    assert sorted(m for m in names if m != "dvpipe:model") == sorted(steps * 3)
    assert prof.stamps == {} and prof.open_pushes() == 0


def test_profiler_ranges_must_be_a_boolean_in_yaml():
    from dvpipe.deploy import load_deployment
    from dvpipe.testing.deployments import synthetic_deployment

    with pytest.raises(ConfigError, match="latency.profiler_ranges"):
        load_deployment(synthetic_deployment(2, frames=3, latency={"profiler_ranges": "yes please"}))
    assert load_deployment(synthetic_deployment(2, frames=3)).latency.profiler_ranges is False


def test_a_given_ranges_object_is_used_as_is():
    calls = []

    class Sink:
        name = "stand-in"

        def push(self, message):
            calls.append(("push", message))
            return len(calls)

        def pop(self, token):
            calls.append(("pop", token))

    ranges = ProfilerRanges([Sink()])
    assert profiler_ranges(ranges) is ranges and profiler_ranges(False) is None
    with ranges.range("model"):
        pass
    assert calls == [("push", "dvpipe:model"), ("pop", 1)]
    json.dumps(repr(ranges))


def test_dvpipe_run_profiler_ranges_flag(fakes, tmp_path, capsys):
    import yaml

    from dvpipe.cli import main as cli_main
    from dvpipe.testing.deployments import synthetic_deployment

    prof, _nvtx = fakes
    prof.start(1)
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(synthetic_deployment(2, frames=2)))
    assert cli_main(["run", str(path), "--no-outputs", "-q"]) == 0
    assert prof.ranges == []  # the deployment does not ask for ranges
    assert cli_main(["run", str(path), "--no-outputs", "-q", "--profiler-ranges"]) == 0
    assert {m.split("@")[-1] for m, *_ in prof.ranges} == {"CAM0", "CAM1"} and len(prof.ranges) >= 4
    assert prof.stamps == {} and prof.open_pushes() == 0
    capsys.readouterr()


def test_dvpipe_run_says_when_no_profiler_api_is_there(tmp_path, capsys, monkeypatch):
    import yaml

    from dvpipe.cli import main as cli_main
    from dvpipe.testing.deployments import synthetic_deployment

    monkeypatch.setitem(sys.modules, "acl", None)   # no pyACL
    monkeypatch.setitem(sys.modules, "nvtx", None)  # no nvtx package
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # torch not loaded by a cpu pipeline
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(synthetic_deployment(2, frames=2)))
    assert cli_main(["run", str(path), "--no-outputs", "-q", "--profiler-ranges"]) == 0
    err = capsys.readouterr().err
    assert "no ranges are emitted" in err
    assert "torch" not in sys.modules  # nothing imported a second torch while it was hidden


def test_a_sink_that_fails_to_open_leaves_no_range_open():
    """Ranges are a stack per thread (NVTX range_push/pop, msproftx push/pop): when the second sink fails to open a
    step's range, the first sink's range for it must be closed again, else every later range nests inside it."""
    calls = []

    class Recording:
        name = "recording"

        def push(self, message):
            calls.append(("push", message))
            return message

        def pop(self, token):
            calls.append(("pop", token))

    class Failing:
        name = "failing"

        def push(self, message):
            raise RuntimeError("no profiler session")

        def pop(self, token):
            calls.append(("failing pop", token))

    ranges = ProfilerRanges([Recording(), Failing()])
    with pytest.raises(RuntimeError, match="no profiler session"):
        ranges.push("dvpipe:decode@CAM0")
    assert calls == [("push", "dvpipe:decode@CAM0"), ("pop", "dvpipe:decode@CAM0")]
