"""``run.pictures_per_job``: recordings read as fast as possible decode several consecutive pictures of a
camera per worker job (frame sets started ahead), giving the batches the default run gives; refused
where a run is live or paced."""
from __future__ import annotations

import numpy as np
import pytest

from dvpipe.deploy import DeploymentError, Runner, load_deployment
from dvpipe.deploy._budget import output_buffers
from dvpipe.testing.deployments import synthetic_deployment

from .test_runner import assert_accounted


def _batches(ppj: int, encoding: str) -> tuple[list, tuple[int, int, int, int]]:
    dep = synthetic_deployment(3, encoding=encoding, frames=20, cycle=20, run={"pictures_per_job": ppj})
    dep["pipeline"]["threads"] = 2
    r = Runner(load_deployment(dep), write_outputs=False)
    shape = (r.sets_ahead, r.pipe.locality, len(r.pipe._buffers), r.sync.capacity)
    got = [(rb.frame_set.index, rb.batch.keep()) for rb in r.batches()]
    result = r.finish()
    assert_accounted(result)
    return got, shape


@pytest.mark.parametrize("encoding", ["h264", "jpeg"])
def test_several_pictures_per_job_give_the_default_runs_batches(encoding):
    want, _ = _batches(1, encoding)
    got, (ahead, locality, ring, waiting) = _batches(4, encoding)
    assert ahead == 4 and locality == 4
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
