"""``run.pictures_per_job``: recordings read as fast as possible decode several consecutive pictures of a
camera per worker job (frame sets started ahead), giving the batches one picture per job gives; refused
where a run is live or paced; ``auto`` (the default) resolved where runs pay and cost nothing asked for."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dvpipe.deploy import DeploymentError, Runner, load_deployment
from dvpipe.deploy._budget import output_buffers, pictures_per_job
from dvpipe.errors import ConfigError
from dvpipe.testing.deployments import synthetic_deployment

from .test_runner import assert_accounted


def _batches(ppj: int, encoding: str) -> tuple[list, tuple[int, ...]]:
    dep = synthetic_deployment(3, encoding=encoding, frames=20, cycle=20, run={"pictures_per_job": ppj})
    dep["pipeline"]["threads"] = 2
    r = Runner(load_deployment(dep), write_outputs=False)
    before = r.pipe.locality
    got = [(rb.frame_set.index, rb.batch.keep()) for rb in r.batches()]
    shape = (r.sets_ahead, before, r.pipe.locality, len(r.pipe._buffers), r.sync.capacity)
    result = r.finish()
    assert_accounted(result)
    return got, shape


@pytest.mark.parametrize("encoding", ["h264", "jpeg"])
def test_several_pictures_per_job_give_the_batches_of_one_per_job(encoding):
    want, _ = _batches(1, encoding)
    got, (ahead, first, locality, ring, waiting) = _batches(4, encoding)
    # runs of pictures only once the first set is out: its cameras do not wait behind the others' runs
    assert ahead == 4 and first == 1 and locality == 4
    assert waiting == 4  # the next 4 sets' frames can wait read while the last 4 finish (queue_size is 2)
    assert ring == output_buffers(4) == 6  # the memory budget counts the same ring
    assert [k for k, _ in got] == [k for k, _ in want] and len(got) == 20
    for (k, g), (_, w) in zip(got, want):
        assert g.valid.tolist() == w.valid.tolist() == [True] * 3, k
        np.testing.assert_array_equal(g.images, w.images, err_msg=f"set {k}")


def test_pictures_per_job_is_refused_for_a_paced_run():
    dep = synthetic_deployment(2, run={"pictures_per_job": 3, "realtime": True})
    with pytest.raises(DeploymentError, match=r"run.pictures_per_job: is for recordings read as fast as possible"):
        load_deployment(dep)
    with pytest.raises(DeploymentError, match=r"run.pictures_per_job"):
        load_deployment(synthetic_deployment(2, run={"pictures_per_job": 0}))
    with pytest.raises(DeploymentError, match=r"run.pictures_per_job: must be <= 24"):
        load_deployment(synthetic_deployment(2, run={"pictures_per_job": 25}))


def _auto(**kw) -> Runner:
    threads = kw.pop("threads", 2)
    dep = synthetic_deployment(3, **kw)
    dep["pipeline"]["threads"] = threads
    return Runner(load_deployment(dep), write_outputs=False)


def test_auto_decodes_h264_recordings_in_runs_of_24():
    r = _auto(encoding="h264", frames=4)
    try:
        assert (r.pictures_per_job, r.sets_ahead) == (24, 24)
        assert len(r.pipe._buffers) == 26 and r.sync.capacity == 24
        assert r.summary_dict()["pictures_per_job"] == {
            "value": 24, "why": "auto: H.264/H.265 recordings read as fast as possible"}
    finally:
        r.close()


@pytest.mark.parametrize("kw, why", [
    (dict(encoding="jpeg"), "cameras other than H.264/H.265"),
    (dict(encoding="h264", realtime=True, run={"realtime": True}), "live cameras"),
    (dict(encoding="h264", latency={"budget_ms": 100}), "a latency budget is set"),
    (dict(encoding="h264", latency={"steps_ms": {"decode": 5}}), "a latency budget is set"),
    (dict(encoding="h264", threads=1), "one pipeline thread"),
    (dict(encoding="h264", width=1920, height=1096), "pictures above 1920x1088"),
])
def test_auto_is_one_where_runs_do_not_pay_or_cost_what_was_asked(kw, why):
    r = _auto(frames=2, **kw)
    try:
        assert (r.pictures_per_job, r.pictures_per_job_reason) == (1, f"auto: {why}")
        assert r.pipe.locality == 1 and len(r.pipe._buffers) == output_buffers(1)
    finally:
        r.close()


def test_auto_fits_its_extra_batches_in_a_quarter_of_the_memory_budget():
    # 3 cameras x 3 x 64 x 96 float32 (96x64 padded to multiples of 32: already) = 221184 bytes a batch
    batch = 3 * 3 * 64 * 96 * 4
    budget_mb = 40 * batch / 2 ** 20  # a quarter: 10 batches of room -> 1 + 10 = 11 pictures per job
    r = _auto(encoding="h264", frames=2, run={"memory_budget_mb": budget_mb})
    try:
        assert r.pipe.plan.out_shape == (3, 3, 64, 96)
        assert r.pictures_per_job == 11 and "11, not 24" in r.pictures_per_job_reason
        assert len(r.pipe._buffers) == output_buffers(11) == 13
    finally:
        r.close()


def test_auto_never_takes_the_run_past_its_memory_budget():
    """A budget of 4 batches: one picture per job already needs 3 batches and 3 decoded pictures (a quarter of
    the budget would allow one more batch, which the budget has no room for): auto stays at 1."""
    batch = 3 * 3 * 64 * 96 * 4
    dep = load_deployment(synthetic_deployment(3, encoding="h264", run={"memory_budget_mb": 4 * batch / 2 ** 20}))
    assert pictures_per_job(dep, _pipe("cpu", (3, 3, 64, 96))) == (
        1, "auto: H.264/H.265 recordings read as fast as possible; 1, not 24: the ring's extra batches within "
           "the memory budget left at one picture per job")
    # with room for one more batch beside the 3 and the decoded pictures (3 x 64 x 96 x 3 bytes): 2
    dep = load_deployment(synthetic_deployment(3, encoding="h264", run={
        "memory_budget_mb": (4 * batch + 3 * 64 * 96 * 3) / 2 ** 20}))
    assert pictures_per_job(dep, _pipe("cpu", (3, 3, 64, 96)))[0] == 2


def test_auto_and_a_number_in_the_yaml():
    assert load_deployment(synthetic_deployment(2, run={"pictures_per_job": "auto"})).run.pictures_per_job is None
    assert load_deployment(synthetic_deployment(2, run={"pictures_per_job": 5})).run.pictures_per_job == 5
    assert load_deployment(synthetic_deployment(2, run={"memory_budget_mb": "auto"})).run.memory_budget_mb is None
    with pytest.raises(DeploymentError, match=r"run.pictures_per_job: expected auto or a number, got 'some'"):
        load_deployment(synthetic_deployment(2, run={"pictures_per_job": "some"}))


def _pipe(family: str, out_shape: tuple[int, ...]) -> SimpleNamespace:
    """A pipeline as pictures_per_job reads it: 2 threads, 3 cameras of one step each on a ``family`` backend."""
    cam = SimpleNamespace(steps=[SimpleNamespace(backend=SimpleNamespace(family=family))])
    return SimpleNamespace(threads=2, plan=SimpleNamespace(cameras=[cam] * 3, out_shape=out_shape,
                                                           out_dtype="float32"))


def test_auto_is_one_when_a_step_runs_off_the_cpu():
    dep = load_deployment(synthetic_deployment(3, encoding="h264"))
    assert pictures_per_job(dep, _pipe("torch", (3, 3, 64, 96))) == (1, "auto: steps off the CPU")
    assert pictures_per_job(dep, _pipe("cpu", (3, 3, 64, 96)))[0] == 24


def test_validate_says_what_a_run_would_use(tmp_path, capsys):
    import yaml

    from dvpipe.cli import main as cli_main

    dep = synthetic_deployment(3, encoding="h264")
    dep["pipeline"]["threads"] = 2
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(dep))
    assert cli_main(["validate", str(path)]) == 0
    assert "run.pictures_per_job: 24 (auto: H.264/H.265 recordings read as fast as possible)" in capsys.readouterr().out
    dep["run"] = {"realtime": True}
    path.write_text(yaml.safe_dump(dep))
    assert cli_main(["validate", str(path)]) == 0
    assert "run.pictures_per_job: 1 (auto: run.realtime)" in capsys.readouterr().out


def test_auto_keeps_the_rings_extra_batches_within_a_gib():
    dep = load_deployment(synthetic_deployment(3, encoding="h264", run={"memory_budget_mb": 100_000}))
    # 3 cameras x 3 x 1088 x 1920 float32 = 75,202,560 bytes a batch; 2**30 // that = 14 extra batches
    assert pictures_per_job(dep, _pipe("cpu", (3, 3, 1088, 1920))) == (
        15, "auto: H.264/H.265 recordings read as fast as possible; 15, not 24: the ring's extra batches within 1.0 GiB")


def test_sets_ahead_beyond_the_output_ring_is_refused():
    # the ring (run.pictures_per_job + 2 batches) holds that many sets ahead beside the set being finished and
    # the one the model reads: one more handed the model's batch to a new set (a stale batch, or a refused submit)
    for ppj, frames in ((1, 4), (3, 12)):
        r = _auto(encoding="h264", frames=frames, run={"pictures_per_job": ppj})
        try:
            assert r.sets_ahead == ppj and len(r.pipe._buffers) == ppj + 2
            with pytest.raises(ConfigError, match=rf"sets_ahead {ppj + 1}: .* at most {ppj} set"):
                r.sets_ahead = ppj + 1
            r.sets_ahead = 0  # one set at a time: fewer is always possible
            assert sum(1 for _ in r.batches()) == frames
        finally:
            r.close()
