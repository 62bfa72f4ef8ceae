"""The pyACL layer of the DVPP backend: typed errors, the one checker, the API table, the runtime."""
from __future__ import annotations

import importlib.util
import pickle

import pytest

import dvpipe as dv
from dvpipe.backends.dvpp import _acl, _codes
from dvpipe.backends.dvpp.sim import SimAcl
from dvpipe.errors import DvpipeError

T310 = dv.Target("Ascend310", "6.0.1")


def test_return_codes_map_to_classes_that_are_also_builtins():
    cases = {100000: ValueError, 148052: ValueError, 200000: MemoryError, 200001: NotImplementedError,
             200006: NotImplementedError, 100036: TimeoutError, 500003: RuntimeError}
    for code, builtin in cases.items():
        with pytest.raises(builtin) as ei:
            _acl.check(code, api="acl.media.dvpp_vpc_resize_async", width=1242, height=375, format="nv12")
        e = ei.value
        assert isinstance(e, _acl.AclError) and isinstance(e, DvpipeError)
        assert e.ret == code and e.code_name == _codes.name_of(code)
        assert e.api == "acl.media.dvpp_vpc_resize_async" and e.c_api == "acldvppVpcResizeAsync"
        assert e.context == {"width": 1242, "height": 375, "format": "nv12"}
        text = str(e)
        assert str(code) in text and "acldvppVpcResizeAsync" in text and "width=1242" in text
    assert _acl.error_class(100000) is _acl.InvalidParam
    assert _acl.error_class(123456) is _acl.AclError
    e = pickle.loads(pickle.dumps(_acl.error_for(148052, "acl.media.dvpp_jpeg_get_image_info", {"size": 3})))
    assert isinstance(e, _acl.UnsupportedJpeg) and e.context == {"size": 3}


def test_check_passes_success():
    assert _acl.check(0, api="acl.rt.synchronize_stream") is None
    assert _acl.check(None, api="acl.rt.synchronize_stream") is None


def test_every_api_the_backend_calls_exists_on_the_software_device():
    sim = SimAcl(T310)
    for api, (c_name, returns, how) in _acl.API.items():
        obj = sim
        for part in api.split(".")[1:]:
            assert hasattr(obj, part), f"software device lacks {api}"
            obj = getattr(obj, part)
        assert callable(obj)
        assert how.startswith(("verified", "inferred")), api


def test_software_device_refuses_calls_before_init():
    sim = SimAcl(T310)
    ptr, ret = sim.media.dvpp_malloc(1024)
    assert ptr is None and ret == _codes.ACL_ERROR_UNINITIALIZE
    assert sim.init() == 0 and sim.init() == _codes.ACL_ERROR_REPEAT_INITIALIZE
    assert sim.get_soc_name() == "Ascend310"


def test_runtime_memory_round_trip_and_errors_carry_the_device_explanation():
    rt = _acl.runtime("sim", T310)
    assert rt.soc_name() == "Ascend310" and rt.is_sim
    ptr = rt.malloc(4096)
    assert ptr % 128 == 0
    payload = bytes(range(256)) * 8
    rt.upload(ptr, 4096, payload)
    back = rt.download(ptr, len(payload))
    assert back.tobytes() == payload
    with pytest.raises(_acl.InvalidParam) as ei:  # more bytes than the destination holds
        rt.upload(ptr, 16, payload)
    assert "dest_max" in str(ei.value) and "copy_bytes=2048" in str(ei.value)
    rt.free(ptr)
    with pytest.raises(_acl.InvalidParam):
        rt.free(ptr)


def test_runtime_is_shared_per_target():
    a = _acl.runtime("sim", dv.Target("Ascend310", "6.0.1"))
    b = _acl.runtime("sim", dv.Target("Ascend310", "6.0.1"))
    c = _acl.runtime("sim", dv.Target("Ascend310P3", "7.0.0"))
    assert a is b and a is not c


@pytest.mark.skipif(importlib.util.find_spec("acl") is not None, reason="pyACL is installed here")
def test_hardware_device_unavailable_without_pyacl_says_why():
    why = _acl.why_unavailable("hw")
    assert why and "pyACL" in why and "set_env.sh" in why
    with pytest.raises(dv.errors.BackendUnavailable, match="pyACL"):
        _acl.runtime("hw")
    from dvpipe.backends import availability, resolve

    v = availability(resolve("dvpp"))
    assert v.status == "unavailable" and "pyACL" in v.reason


def test_sim_backend_needs_a_target():
    from dvpipe.backends import availability, resolve

    v = availability(resolve("dvpp-sim"), None)
    assert v.status == "unavailable" and "target" in v.reason
    rig = dv.Rig.from_dict({"cameras": [{"name": "C", "width": 64, "height": 48}]})
    pipe = dv.Pipeline(rig, [dv.Decode()], backends=("dvpp-sim", "cpu"), fidelity="fast")
    step = pipe.plan.cameras[0].steps[0]
    assert step.backend.name == "cpu" and "target" in step.verdicts[0][1].reason


def test_pool_reuses_by_size_and_format_and_counts():
    from dvpipe.backends.dvpp.pool import BufferPool, size_class

    rt = _acl.runtime("sim", T310)
    pool = BufferPool(rt)
    a = pool.acquire(1000, "nv12")
    pool.release(a)
    b = pool.acquire(1000, "nv12")
    assert b.ptr == a.ptr and pool.allocations == 1 and pool.reuses == 1
    c = pool.acquire(1000, "bgr888")
    assert c.ptr != b.ptr and pool.allocations == 2
    assert size_class(10) == 1 << 16 and size_class(70000) == 1 << 17
    s = pool.acquire_stream(70000)
    assert s.size == 1 << 17
    for x in (b, c, s):
        pool.release(x)
    st = pool.stats()
    assert st.in_use == 0 and st.free == 3
    pool.clear()
    assert pool.frees == 3
