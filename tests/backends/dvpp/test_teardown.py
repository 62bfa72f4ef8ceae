"""Deterministic teardown of the DVPP backend on the software device (issue 13, point 3).

Reference for the order: the pyACL/AscendCL resource-release sequence (destroy what was created in reverse:
VDEC channel before its description, the callback thread after every callback ran, aclvdecCallback notes
CANN 8.0.0 aclcppdevg_03_0377; DVPP channel before its description; DVPP memory before the context; the
context before the device is reset; acl.finalize last). The ledger (dvpipe.backends.dvpp.sim.ledger())
counts what is alive; zero means released. Software device only: nothing here ran on Ascend hardware.
"""
from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dvpipe as dv
from dvpipe.backends.dvpp import _acl, close_states, pool_for, sim
from dvpipe.testing.dvpp import encode_jpeg, h264_stream, synthetic_bgr, video_packets
from dvpipe.backends.dvpp.vdec import VdecEngine

av = pytest.importorskip("av")
ROOT = Path(__file__).resolve().parents[3]
T310 = dv.Target("Ascend310", "6.0.1")


def _rig():
    return dv.Rig((dv.Camera("J", width=320, height=240, encoding="jpeg"),
                   dv.Camera("V", width=320, height=240, encoding="h264")))


def _frames():
    data = h264_stream([np.roll(synthetic_bgr(320, 240, seed=4), 6 * i, axis=1) for i in range(6)], bframes=2)
    jpg = encode_jpeg(synthetic_bgr(320, 240))
    return [{"J": jpg, "V": p} for p in video_packets(data)]


def _run(pipe):
    for frames in _frames():
        b = pipe.process(frames)
        assert b.valid.all() and not b.fallbacks
    assert {s.backend.name for cp in pipe.plan.cameras for s in cp.steps[:1]} == {"dvpp-sim"}


def test_the_backend_hook_releases_every_acl_object_in_the_documented_order():
    log = []
    with dv.Pipeline(_rig(), [dv.Decode(), dv.Resize(scale=0.5)], backends=("dvpp-sim", "cpu"), target=T310,
                     fidelity="fast") as pipe:
        _run(pipe)
        acl = _acl.runtime("sim", T310).acl
        before = sim.ledger()
        assert before["vdec_channels"] == 1 and before["threads"] == 1 and before["dvpp_channels"] == 2
        for ns, names in ((acl.media, ("vdec_destroy_channel", "vdec_destroy_channel_desc", "dvpp_destroy_channel",
                                       "dvpp_destroy_channel_desc", "dvpp_destroy_resize_config", "dvpp_free")),
                          (acl.util, ("stop_thread",)), (acl.rt, ("destroy_stream", "destroy_context", "reset_device")),
                          (acl, ("finalize",))):
            for name in names:
                orig = getattr(ns, name)
                setattr(ns, name, (lambda o, n: lambda *a: (log.append(n), o(*a))[1])(orig, name))
        close_states(pipe._states.values())
    assert not any(sim.ledger().values()), sim.ledger()
    first = {n: log.index(n) for n in set(log)}
    assert first["vdec_destroy_channel"] < first["vdec_destroy_channel_desc"] < first["stop_thread"]
    assert first["dvpp_destroy_channel"] < first["dvpp_destroy_channel_desc"]
    assert max(i for i, n in enumerate(log) if n == "dvpp_free") < first["destroy_context"] < first["reset_device"] \
        < first["finalize"] == len(log) - 1


_WIRED = "close_state" in inspect.getsource(dv.Pipeline.close)


@pytest.mark.xfail(not _WIRED, strict=True, reason="Pipeline.close does not call dvpipe.backends.dvpp.close_states "
                                                   "yet (dvpipe/pipeline.py is the lead's file; see the report)")
def test_pipeline_close_and_the_context_manager_release_everything():
    with dv.Pipeline(_rig(), [dv.Decode()], backends=("dvpp-sim", "cpu"), target=T310, fidelity="fast") as pipe:
        _run(pipe)
        assert sim.ledger()["vdec_channels"] == 1
    assert not any(sim.ledger().values()), sim.ledger()
    pipe2 = dv.Pipeline(_rig(), [dv.Decode()], backends=("dvpp-sim", "cpu"), target=T310, fidelity="fast")
    _run(pipe2)
    pipe2.close()
    assert not any(sim.ledger().values()), sim.ledger()


def test_vdec_channel_ids_are_given_back_not_wrapped():
    """Channel ids come from the ids no open channel uses: 40 channels opened one after the other all get id 0
    (the old counter wrapped modulo 32 onto ids still in use); concurrent ones get 0, 1, 2, and a freed id
    is taken again."""
    rt = _acl.runtime("sim", T310).hold()
    pool = pool_for(rt)
    try:
        ids = []
        for _ in range(40):
            e = VdecEngine(rt, pool, T310, "h264", 320, 240)
            ids.append(e.channel_id)
            e.close()
        assert set(ids) == {0}
        a, b, c = (VdecEngine(rt, pool, T310, "h264", 320, 240) for _ in range(3))
        assert (a.channel_id, b.channel_id, c.channel_id) == (0, 1, 2)
        b.close()
        d = VdecEngine(rt, pool, T310, "h264", 320, 240)
        assert d.channel_id == 1
        for e in (a, c, d):
            e.close()
        assert sim.ledger()["threads"] == 0 and sim.ledger()["vdec_channels"] == 0
    finally:
        rt.unhold()
    assert not any(sim.ledger().values())


def test_interpreter_exit_releases_every_acl_object():
    """A pipeline left open at exit: the atexit teardown stops the callback thread and releases everything
    (a check registered before dvpipe is imported runs after dvpipe's own exit handlers)."""
    code = (
        "import atexit, json, sys\n"
        "def check():\n"
        "    from dvpipe.backends.dvpp import sim\n"
        "    print('LEDGER', json.dumps(sim.ledger()))\n"
        "atexit.register(check)\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "import tests.backends.dvpp.test_teardown as t\n"
        "import dvpipe as dv\n"
        "pipe = dv.Pipeline(t._rig(), [dv.Decode()], backends=('dvpp-sim', 'cpu'), target=t.T310, fidelity='fast')\n"
        "t._run(pipe)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("LEDGER"))
    import json

    ledger = json.loads(line.split(" ", 1)[1])
    assert ledger and not any(ledger.values()), ledger
