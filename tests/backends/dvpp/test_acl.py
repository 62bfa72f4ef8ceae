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


def test_runtime_codes_are_named_as_huaweis_header_names_them():
    """CANN's acl/error_codes/rt_error_codes.h: 107001 ACL_ERROR_RT_INVALID_DEVICEID "invalid device id", 107012
    ACL_ERROR_RT_THREAD_SUBSCRIBE, 507011 ACL_ERROR_RT_MODEL_EXECUTE "model execute failed", 507015
    ACL_ERROR_RT_AICORE_EXCEPTION (values and words copied by hand from the header). They printed as
    'ACL error N' with no meaning."""
    expected = {107001: ("ACL_ERROR_RT_INVALID_DEVICEID", "invalid device id"),
                107012: ("ACL_ERROR_RT_THREAD_SUBSCRIBE", "error subscribe thread"),
                507011: ("ACL_ERROR_RT_MODEL_EXECUTE", "model execute failed"),
                507015: ("ACL_ERROR_RT_AICORE_EXCEPTION", "aicore exception"),
                107002: ("ACL_ERROR_RT_CONTEXT_NULL", "")}
    for code, (name, words) in expected.items():
        assert _codes.name_of(code) == name and words in _codes.words_of(code)
        text = str(_acl.error_for(code, "acl.rt.set_device", {}))
        assert name in text
    codes = [c for _n, c, _w in _codes.RUNTIME_CODES] + [c for _n, c, _b, _w in _codes.CODES]
    assert len(codes) == len(set(codes))  # one name per code
    # a picture description's return code is given in hex, as the pages list them (aclpythondevg_01_0261)
    assert _codes.picture_ret_code(65540) == "0x10004 (65540)"


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


# -- contexts, streams, models and ACL ownership (issue 26 point 4 and the software device's runtime state) ----
def _torch_npu_like(sim: SimAcl):
    """What torch_npu does before dvpipe runs in its process: acl.init, set_device, its own context (current
    on this thread) and a stream in it."""
    assert sim.init() == 0 and sim.rt.set_device(0) == 0
    ctx, ret = sim.rt.create_context(0)
    assert ret == 0
    stream, ret = sim.rt.create_stream()
    assert ret == 0
    return ctx, stream


def test_dvpipe_keeps_the_callers_context_current_around_its_work():
    """A thread has one current context (aclrtSetCurrentContext, CANN 8.0.0 aclcppdevg_03_0061); a stream
    used while another context is current returns 107003 "stream not in current context". dvpipe opened and
    called from a torch_npu thread must leave torch's context current: torch's next stream call works."""
    sim = SimAcl(T310)
    torch_ctx, torch_stream = _torch_npu_like(sim)
    rt = _acl.Runtime(sim, "sim", 0, T310)
    rt.open()  # acl.init returns 100002: torch_npu owns ACL
    assert sim.rt.get_context() == (torch_ctx, 0)  # open() did not take the thread's context
    assert sim.rt.synchronize_stream(torch_stream) == 0
    s = rt.create_stream()  # dvpipe's work on the torch thread ...
    ptr = rt.malloc(4096)
    rt.upload(ptr, 4096, b"x" * 100)
    assert rt.download(ptr, 100).tobytes() == b"x" * 100
    rt.synchronize(s)
    assert sim.rt.get_context() == (torch_ctx, 0)  # ... and torch's context is current again
    assert sim.rt.synchronize_stream(torch_stream) == 0
    # dvpipe's stream belongs to dvpipe's context: used from the torch context directly it is refused
    assert sim.rt.synchronize_stream(s) == _codes.ACL_ERROR_RT_STREAM_CONTEXT
    rt.destroy_stream(s)
    rt.free(ptr)
    rt.close()
    # close() released dvpipe's own objects and kept ACL, the device and torch's context for their owner
    led = sim.ledger()
    assert led["initialised"] == 1 and led["devices"] == 1 and led["contexts"] == 1 and led["streams"] == 1
    assert sim.rt.get_context() == (torch_ctx, 0) and sim.rt.synchronize_stream(torch_stream) == 0
    assert sim.rt.destroy_stream(torch_stream) == 0 and sim.rt.destroy_context(torch_ctx) == 0
    assert sim.rt.reset_device(0) == 0 and sim.finalize() == 0
    assert not any(sim.ledger().values())


def test_runtime_that_initialised_acl_finalizes_it_at_close():
    sim = SimAcl(T310)
    rt = _acl.Runtime(sim, "sim", 0, T310)
    rt.open()
    assert rt.owns_acl
    rt.close()
    assert not any(sim.ledger().values())


def test_stream_and_model_of_another_context_are_refused():
    """107003 for a stream, 107004 for a model used while another context is current (rt_error_codes.h,
    "stream/model not in current context"); both work again once their context is current."""
    from dvpipe.backends.dvpp.sim import _mdl

    import numpy as np

    sim = SimAcl(T310)
    ctx_a, stream = _torch_npu_like(sim)
    key = _mdl.register(_mdl.SimModelSpec(fn=lambda x: x * 2, inputs=(_mdl.TensorSpec("x", (1, 4), "float32"),),
                                          outputs=(_mdl.TensorSpec("y", (1, 4), "float32"),), name="twice"))
    try:
        mid, ret = sim.mdl.load_from_file(key)  # loaded while context A is current
        assert ret == 0
        ins, outs = sim.mdl.create_dataset(), sim.mdl.create_dataset()
        ptrs = []
        for ds in (ins, outs):
            ptr, ret = sim.rt.malloc(16)
            ptrs.append(ptr)
            sim.mdl.add_dataset_buffer(ds, sim.create_data_buffer(ptr, 16))
        x = np.arange(4, dtype=np.float32)
        assert sim.rt.memcpy(ptrs[0], 16, sim.util.bytes_to_ptr(x.tobytes()), 16, 1) == 0
        ctx_b, ret = sim.rt.create_context(0)  # now current on this thread
        assert ret == 0 and sim.rt.get_context() == (ctx_b, 0)
        assert sim.rt.synchronize_stream(stream) == _codes.ACL_ERROR_RT_STREAM_CONTEXT
        assert "not in current context" in sim.get_recent_err_msg()
        assert sim.mdl.execute(mid, ins, outs) == _codes.ACL_ERROR_RT_MODEL_CONTEXT
        assert sim.rt.set_context(ctx_a) == 0
        assert sim.rt.synchronize_stream(stream) == 0 and sim.mdl.execute(mid, ins, outs) == 0
        np.testing.assert_array_equal(np.frombuffer(sim.util.ptr_to_bytes(ptrs[1], 16), np.float32), 2 * x)
    finally:
        _mdl.unregister(key)


def test_thread_without_a_context_has_none():
    """A thread that neither created nor set a context nor set the device has no current context: the
    software device answers 107002 ACL_ERROR_RT_CONTEXT_NULL (the stricter reading; a device may fall back
    to the default context) and refuses to create a stream there."""
    import threading

    sim = SimAcl(T310)
    ctx, _stream = _torch_npu_like(sim)
    got: dict = {}

    def other():
        got["ctx"] = sim.rt.get_context()
        got["stream"] = sim.rt.create_stream()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert got["ctx"] == (0, _codes.ACL_ERROR_RT_CONTEXT_NULL)
    assert got["stream"][1] == _codes.ACL_ERROR_RT_CONTEXT_NULL
    assert sim.rt.get_context() == (ctx, 0)


def test_default_context_cannot_be_destroyed_and_goes_with_the_last_device_reset():
    """aclrtSetCurrentContext (8.0.0 aclcppdevg_03_0061): the default context cannot be destroyed with
    aclrtDestroyContext; aclrtResetDevice is reference-counted with aclrtSetDevice (aclcppdevg_03_0040)."""
    sim = SimAcl(T310)
    assert sim.init() == 0 and sim.rt.set_device(0) == 0 and sim.rt.set_device(0) == 0
    default, ret = sim.rt.get_context()
    assert ret == 0 and default
    assert sim.rt.destroy_context(default) == _codes.ACL_ERROR_INVALID_PARAM
    assert sim.rt.reset_device(0) == 0 and sim.rt.get_context() == (default, 0)  # one reference left
    assert sim.rt.reset_device(0) == 0
    assert sim.rt.get_context()[1] == _codes.ACL_ERROR_RT_CONTEXT_NULL
    assert sim.finalize() == 0


@pytest.mark.parametrize("kind, src, dst, ok", [
    (1, "host", "dvpp", True), (1, "host", "rt", True), (1, "dvpp", "dvpp", False), (1, "host", "host", False),
    (2, "dvpp", "host", True), (2, "host", "host", False), (2, "dvpp", "dvpp", False),
    (3, "dvpp", "rt", True), (3, "rt", "dvpp", True), (3, "host", "dvpp", False), (3, "dvpp", "host", False),
    (0, "host", "host", True), (0, "host", "dvpp", False), (4, "host", "dvpp", False),
])
def test_memcpy_kind_must_name_where_both_pointers_live(kind, src, dst, ok):
    """acl.rt.memcpy (CANN 8.0.0 aclpythondevg_01_0120): 0 host->host, 1 host->device, 2 device->host,
    3 device->device; the runtime checks the copy against where the addresses live. The software device
    refuses a kind that does not match (ACL_ERROR_INVALID_PARAM) and kinds outside the page's 0..3."""
    sim = SimAcl(T310)
    _torch_npu_like(sim)
    alloc = {"host": lambda: sim.rt.malloc_host(64)[0], "dvpp": lambda: sim.media.dvpp_malloc(64)[0],
             "rt": lambda: sim.rt.malloc(64)[0]}
    s, d = alloc[src](), alloc[dst]()
    ret = sim.rt.memcpy(d, 64, s, 64, kind)
    assert (ret == 0) == ok, (ret, sim.get_recent_err_msg())
    if not ok:
        assert ret == _codes.ACL_ERROR_INVALID_PARAM


def test_acl_init_twice_returns_repeat_initialize():
    sim = SimAcl(T310)
    assert sim.init() == 0 and sim.init() == _codes.ACL_ERROR_REPEAT_INITIALIZE
    assert sim.finalize() == 0


def test_every_test_the_refusal_table_in_docs_names_exists():
    """docs/dvpp.md "What the software device refuses": every row names a page and tests that exist."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    text = (root / "docs" / "dvpp.md").read_text(encoding="utf-8")
    section = text.split("### What the software device refuses", 1)[1].split("\n### ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| documented")]
    assert len(rows) >= 10
    for row in rows:
        _what, page, tests = [c.strip() for c in row.strip("|").split(" | ")]
        assert re.search(r"aclpythondevg|aclcppdevg|rt_error_codes", page), row
        current = None
        for ref in re.findall(r"`([^`]+)`", tests):
            path, _, name = ref.partition("::")
            if path:
                current = root / path
            assert current is not None and current.exists(), ref
            assert f"def {name}(" in current.read_text(encoding="utf-8"), ref


# -- error paths release what they created (the software device's ledger counts live handles) ------------------
def _opened(target=T310):
    sim = SimAcl(target)
    rt = _acl.Runtime(sim, "sim", 0, target)
    rt.open()
    return sim, rt


def _close(sim: SimAcl, rt) -> None:
    rt.close()
    assert not any(sim.ledger().values()), sim.ledger()


def test_failed_crop_resize_paste_hands_both_rois_to_the_caller():
    """The paste box starts at x = 8: not 16-aligned, refused on Ascend310 (CANN 6.0.1 en aclcppdevg_03_0815).
    Both ROI configs were created before the call failed; the caller's list holds them, and destroying the list
    leaves no ROI config alive."""
    from dvpipe.backends.dvpp import vpc
    from dvpipe.backends.dvpp.pool import pool_for

    sim, rt = _opened()
    ch, st, cfg = rt.create_channel(), rt.create_stream(), rt.resize_config(1)
    pool = pool_for(rt)
    src = vpc.new_picture(rt, pool, T310, "vpc", "nv12", 200, 100)
    canvas = vpc.new_picture(rt, pool, T310, "vpc", "nv12", 400, 200)
    rois: list = []
    with pytest.raises(_acl.InvalidParam):
        vpc.crop_resize_paste(rt, ch, st, src, canvas, (0, 0, 199, 99), (8, 0, 207, 99), cfg, rois)
    assert len(rois) == 2 and sim.ledger()["roi_configs"] == 2
    for r in rois:
        rt.destroy_roi(r)
    assert sim.ledger()["roi_configs"] == 0
    for pic in (src, canvas):
        vpc.release(rt, pool, pic)
    rt.destroy_resize_config(cfg)
    rt.destroy_stream(st)
    rt.destroy_channel(ch)
    _close(sim, rt)


def test_crop_roi_is_in_the_callers_list_when_the_paste_roi_cannot_be_made(monkeypatch):
    from dvpipe.backends.dvpp import vpc
    from dvpipe.backends.dvpp.pool import pool_for

    sim, rt = _opened()
    pool = pool_for(rt)
    src = vpc.new_picture(rt, pool, T310, "vpc", "nv12", 200, 100)
    canvas = vpc.new_picture(rt, pool, T310, "vpc", "nv12", 400, 200)
    made = sim.media.dvpp_create_roi_config
    monkeypatch.setattr(sim.media, "dvpp_create_roi_config",
                        lambda *a: 0 if sim.ledger()["roi_configs"] else made(*a))  # the second creator returns NULL
    rois: list = []
    with pytest.raises(_acl.AclError, match="dvpp_create_roi_config"):
        vpc.crop_resize_paste(rt, 0, 0, src, canvas, (0, 0, 199, 99), (0, 0, 199, 99), 0, rois)
    assert len(rois) == 1 == sim.ledger()["roi_configs"]
    rt.destroy_roi(rois[0])
    for pic in (src, canvas):
        vpc.release(rt, pool, pic)
    _close(sim, rt)


def test_failed_channel_creation_destroys_its_description(monkeypatch):
    sim, rt = _opened()
    monkeypatch.setattr(sim.media, "dvpp_create_channel", lambda desc: _codes.ACL_ERROR_BAD_ALLOC)
    with pytest.raises(_acl.AclError) as ei:
        rt.create_channel()
    assert ei.value.ret == _codes.ACL_ERROR_BAD_ALLOC  # the device's error, not one from the clean-up
    assert sim.ledger()["channel_descs"] == 0 and sim.ledger()["dvpp_channels"] == 0
    _close(sim, rt)


def test_failed_resize_interpolation_destroys_the_config(monkeypatch):
    sim, rt = _opened()
    monkeypatch.setattr(sim.media, "dvpp_set_resize_config_interpolation", lambda cfg, v: _codes.ACL_ERROR_INVALID_PARAM)
    with pytest.raises(_acl.InvalidParam, match="dvpp_set_resize_config_interpolation"):
        rt.resize_config(1)
    assert sim.ledger()["resize_configs"] == 0
    _close(sim, rt)


_PIC_SETTERS = ([("pic_desc", s) for s in ("data", "size", "format", "width", "height", "width_stride",
                                              "height_stride")]
                + [("output_pic_desc", s) for s in ("data", "size", "format")])  # VDEC writes the geometry


@pytest.mark.parametrize("maker, setter", _PIC_SETTERS)
def test_failed_picture_descriptor_setter_destroys_the_descriptor(monkeypatch, maker, setter):
    sim, rt = _opened()
    monkeypatch.setattr(sim.media, f"dvpp_set_pic_desc_{setter}", lambda d, v: _codes.ACL_ERROR_INVALID_PARAM)
    ptr = rt.malloc(208 * 100 * 3 // 2)
    args = (ptr, 208 * 100 * 3 // 2, 1) + ((200, 100, 208, 100) if maker == "pic_desc" else ())
    with pytest.raises(_acl.InvalidParam, match=f"dvpp_set_pic_desc_{setter}"):
        getattr(rt, maker)(*args)
    assert sim.ledger()["pic_descs"] == 0
    rt.free(ptr)
    _close(sim, rt)


@pytest.mark.parametrize("step", ["set_device", "create_context", "get_run_mode"])
@pytest.mark.parametrize("owner", ["dvpipe", "another"])
def test_failed_open_unwinds_what_it_did(monkeypatch, step, owner):
    """A failed open leaves the device as it found it: the context destroyed, the device reset (set_device is
    reference-counted, aclcppdevg_03_0040), acl.finalize only when this runtime's acl.init initialised ACL."""
    sim = SimAcl(T310)
    if owner == "another":
        assert sim.init() == 0  # torch_npu initialised ACL: open's acl.init returns 100002
    before = sim.ledger()
    fail = {"set_device": lambda dev: _codes.ACL_ERROR_RT_FAILURE,
            "create_context": lambda dev: (None, _codes.ACL_ERROR_RT_FAILURE),
            "get_run_mode": lambda: (0, _codes.ACL_ERROR_RT_FAILURE)}[step]
    monkeypatch.setattr(sim.rt, step, fail)
    rt = _acl.Runtime(sim, "sim", 0, T310)
    with pytest.raises(_acl.AclError) as ei:
        rt.open()
    assert ei.value.ret == _codes.ACL_ERROR_RT_FAILURE and f"acl.rt.{step}" in str(ei.value)
    assert not rt.opened
    assert sim.ledger() == before, (sim.ledger(), before)
    if owner == "another":
        assert sim.ledger()["initialised"] == 1
        assert sim.finalize() == 0
    assert not any(sim.ledger().values())
