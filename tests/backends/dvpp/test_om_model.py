"""OmModel over acl.mdl on the software device: load / execute / teardown, AIPP, sizes, faults, accounting.

References are independent of the code under test: numpy computes what each "model" function should return,
a float YCbCr -> RGB decode written here (JPEG full range, T.871 coefficients) gives what AIPP should hand the
model, byte counts come from the tensor shapes, and the dynamic-AIPP call order is the one the pyACL pages
document (create_aipp, set_aipp_*, set_input_aipp before executing).
"""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

import dvpipe
from dvpipe.backends.dvpp import _acl, sim
from dvpipe.device import DeviceTensor
from dvpipe.errors import ConfigError
from dvpipe.latency.timeline import Timeline
from dvpipe.models import ModelInputError, OmModel, from_config, parse_config, sim_model
from dvpipe.types import FrameBatch

from tolerances import tol

TARGET = dvpipe.Target("Ascend310P3", "8.0.0")
MEAN = (123.675, 116.28, 103.53)  # mmdet3d img_norm_cfg, RGB order
STD = (58.395, 57.12, 57.375)


def _om(key, **kw):
    return OmModel(key, backend="dvpp-sim", target=TARGET, **kw)


# ------------------------------------------------------------------------------------------------ references

def _nv12_jpeg(rgb: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 RGB -> (H*3/2, W) NV12, JPEG/JFIF full-range BT.601 (T.871), 2x2-mean chroma."""
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = 128 - 0.168736 * r - 0.331264 * g + 0.5 * b
    cr = 128 + 0.5 * r - 0.418688 * g - 0.081312 * b
    h, w = y.shape

    def sub(c):
        return c.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))

    uv = np.stack([sub(cb), sub(cr)], axis=-1).reshape(h // 2, w)
    return np.clip(np.rint(np.concatenate([y, uv])), 0, 255).astype(np.uint8)


def _reference_normalised(nv12: np.ndarray, content_hw, out_hw) -> np.ndarray:
    """What the model should receive: NV12 decoded in float (each chroma sample serving its 2x2 block),
    cropped to the content, (x - mean) / std per RGB channel, padded bottom/right with 0 -> (3, H, W)."""
    h = nv12.shape[0] * 2 // 3
    w = nv12.shape[1]
    y = nv12[:h].astype(np.float64)
    uv = nv12[h:].reshape(h // 2, w // 2, 2).astype(np.float64)
    u = np.repeat(np.repeat(uv[..., 0], 2, 0), 2, 1) - 128
    v = np.repeat(np.repeat(uv[..., 1], 2, 0), 2, 1) - 128
    rgb = np.stack([y + 1.402 * v, y - 0.344136 * u - 0.714136 * v, y + 1.772 * u])
    rgb = np.clip(rgb, 0, 255)
    ch, cw = content_hw
    norm = (rgb[:, :ch, :cw] - np.array(MEAN)[:, None, None]) / np.array(STD)[:, None, None]
    out = np.zeros((3, *out_hw))
    out[:, :ch, :cw] = norm
    return out


def _pictures(n: int, w: int, h: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    out = []
    for k in range(n):
        base = np.stack([128 + 100 * np.sin(xx / (5 + k) + yy / 9), 128 + 90 * np.cos(yy / 7 - xx / 13),
                         128 + 80 * np.sin((xx + yy) / 11)], -1) + rng.normal(0, 10, (h, w, 3))
        out.append(_nv12_jpeg(np.clip(base, 0, 255).astype(np.uint8)))
    return np.stack(out)


def _device_tensor(model: OmModel, nv12: np.ndarray, aipp=None) -> tuple[DeviceTensor, int]:
    """Upload an (N, H*3/2, W) NV12 batch into runtime.malloc'ed device memory (one buffer, N back to back)."""
    rt = model.runtime
    n, h3, w = nv12.shape
    ptr = rt.malloc(nv12.nbytes)
    rt.upload(ptr, nv12.nbytes, np.ascontiguousarray(nv12).tobytes())
    t = DeviceTensor(ptr, nv12.nbytes, (n, h3 * 2 // 3, w), "uint8", "NV12", "dvpp-sim:0", rt, (w, h3 * 2 // 3),
                     meta={} if aipp is None else {"aipp": aipp})
    return t, ptr


def _transfer_bytes(tl: Timeline) -> dict:
    out: dict = {}
    for s in tl.spans:
        if s.kind == "transfer":
            out[s.attrs["direction"]] = out.get(s.attrs["direction"], 0) + s.attrs["bytes"]
    return out


# ------------------------------------------------------------------------------------------------ tests

def test_load_execute_teardown_and_ledger():
    def fn(x, y):
        return x @ y, (x.sum(axis=1) > 0).astype(np.int32)

    key = sim_model(fn, inputs=[((4, 3), "float32"), ((3, 2), "float32")],
                    outputs=[((4, 2), "float32"), ((4,), "int32")], name="matmul")
    x = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    y = np.array([[1, 0], [0, 1], [1, 1]], np.float32)
    m = _om(key)
    live = sim.ledger()
    # loaded: 1 model, its description, the output dataset over 2 data buffers, 2 output buffers, a stream
    assert (live["models"], live["model_descs"], live["datasets"], live["data_buffers"]) == (1, 1, 1, 2)
    assert live["device_buffers"] == 2 and live["streams"] == 1
    for _ in range(3):
        prod, pos = m(x, y)
        np.testing.assert_array_equal(prod, x @ y)
        np.testing.assert_array_equal(pos, np.array([0, 0, 1, 1], np.int32))
        live = sim.ledger()  # + the input dataset (2 buffers) and the 2 reused upload buffers, made once
        assert (live["datasets"], live["data_buffers"], live["device_buffers"]) == (2, 4, 4)
    assert prod.dtype == np.float32 and pos.dtype == np.int32 and pos.shape == (4,)
    assert [t.describe() for t in m.outputs] == ["4x2 float32 (32 B)", "4 int32 (16 B)"]
    # host inputs: one explicit upload per input and call; outputs downloaded once per call
    assert m.stats == {"calls": 3, "host_to_device_bytes": 3 * (48 + 24), "device_to_host_bytes": 3 * (32 + 16),
                       "device_to_device_bytes": 0}
    m.close()
    m.close()  # idempotent
    assert sim.ledger()["models"] == 0 and sim.ledger()["data_buffers"] == 0


def test_no_device_allocation_per_call():
    key = sim_model(lambda x: x + 1, inputs=[((2, 8), "float16")], outputs=[((2, 8), "float16")])
    with _om(key) as m:
        m(np.zeros((2, 8), np.float16))
        space = m.runtime.acl.memory.rt
        before = space.allocations
        for _ in range(5):
            (out,) = m(np.full((2, 8), 2, np.float16))
        assert space.allocations == before
        np.testing.assert_array_equal(out, np.full((2, 8), 3, np.float16))


@pytest.mark.parametrize("src, content, out", [((48, 64), (48, 64), (48, 64)), ((48, 64), (46, 60), (48, 64))],
                         ids=["plain", "crop+pad"])
def test_device_tensor_with_static_aipp_receives_the_normalised_tensor(src, content, out):
    from dvpipe.backends.dvpp.aipp import aipp_for

    n = 2
    (sh, sw), (ch, cw), (oh, ow) = src, content, out
    cfg = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=src,
                   content_size=content, out_size=out)
    key = sim_model(lambda x: x, inputs=[((n, 3, oh, ow), "float16")], outputs=[((n, 3, oh, ow), "float16")],
                    aipp=cfg, name="identity-aipp")
    nv12 = _pictures(n, sw, sh)
    tl = Timeline()
    with _om(key) as m:
        # the AIPP input takes the raw picture batch: N * W * H * 3/2 bytes
        assert m.inputs[0].nbytes == n * sw * sh * 3 // 2 and m.inputs[0].aipp == "static"
        tensor, ptr = _device_tensor(m, nv12)
        h2d_before = m.runtime.acl.memory.rt.allocations
        batch = FrameBatch(images=tensor, metas=[{}] * n, valid=np.ones(n, bool), drops=[], cameras=("A", "B"),
                             timeline=tl)
        (got,) = m(batch)
        m.runtime.free(ptr)
        assert m.runtime.acl.memory.rt.allocations == h2d_before  # nothing staged for a device input
    assert got.shape == (n, 3, oh, ow) and got.dtype == np.float16
    for k in range(n):
        ref = _reference_normalised(nv12[k], (ch, cw), (oh, ow))
        err = np.abs(got[k].astype(np.float64) - ref)
        # bound: the 8-bit fixed-point CSC truncates (>> 8) and rounds its matrix (<= 2 levels of 255, i.e.
        # 2 / 57.12 in normalised units), fp16 keeps 11 bits (<= 0.002 at |x| < 2.7)
        assert err.max() <= 2 / min(STD) + 0.004, err.max()
        assert err.mean() < 0.5 / min(STD)
        if (oh, ow) != (ch, cw):
            assert not got[k][:, ch:, :].any() and not got[k][:, :, cw:].any()  # the padding is exactly 0
    # accounting: the input never crossed PCIe; device->host is the output only
    assert _transfer_bytes(tl) == {"device_to_host": n * 3 * oh * ow * 2}
    host = [s for s in tl.spans if s.name == "model"]
    device = [s for s in tl.spans if s.name == "model.execute"]
    assert [s.kind for s in host] == ["model"] and [s.kind for s in device] == ["device"]
    assert device[0].attrs["unit"] == "npu" and device[0].attrs["step"] == "model"
    assert host[0].start_ns <= device[0].start_ns <= device[0].end_ns <= host[0].end_ns


def test_host_batch_is_uploaded_once_and_counted():
    n, h, w = 3, 4, 5

    def fn(x):
        return x.astype(np.float32).mean(axis=(2, 3))

    key = sim_model(fn, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3), "float32")])
    images = np.random.default_rng(1).normal(size=(n, 3, h, w)).astype(np.float32)
    tl = Timeline()
    batch = FrameBatch(images=images, metas=[{}] * n, valid=np.ones(n, bool), drops=[], cameras=("a", "b", "c"),
                         timeline=tl)
    with _om(key) as m:
        (got,) = m(batch)
    # a float32 host batch is cast to the model's fp16 input (same elements), then uploaded once
    np.testing.assert_allclose(got, images.astype(np.float16).astype(np.float32).mean(axis=(2, 3)), rtol=tol("fp16_input_mean").rtol)
    assert _transfer_bytes(tl) == {"host_to_device": n * 3 * h * w * 2, "device_to_host": n * 3 * 4}


def test_input_size_mismatch_is_refused_with_the_sizes():
    key = sim_model(lambda x: x, inputs=[((1, 3, 480, 800), "float16")], outputs=[((1, 3, 480, 800), "float16")])
    with _om(key) as m:
        with pytest.raises(ModelInputError, match=r"expects 1x3x480x800 float16 \(2304000 B\) at input 0, the batch "
                                                  r"is a host \(1, 3, 480, 640\) float16 array of 1843200 B"):
            m(np.zeros((1, 3, 480, 640), np.float16))
        # the same byte count in another dtype is not the model's tensor (no silent reinterpretation)
        with pytest.raises(ModelInputError, match=r"the batch is a host \(1, 3, 480, 400\) float32 array of 2304000 B"):
            m(np.zeros((1, 3, 480, 400), np.float32))
        ptr = m.runtime.malloc(1000)
        t = DeviceTensor(ptr, 1000, (1, 10, 100), "uint8", "NV12", "dvpp-sim:0", m.runtime, (100, 10))
        with pytest.raises(ModelInputError, match=r"expects 1x3x480x800 float16 \(2304000 B\) at input 0, the batch "
                                                  r"is a NV12 DeviceTensor \(1, 10, 100\) uint8 strides \(100, 10\) "
                                                  r"of 1000 B"):
            m(t)
        with pytest.raises(ModelInputError, match="1 data input"):
            m(np.zeros((1, 3, 480, 800), np.float16), np.zeros(3))
        m.runtime.free(ptr)


def test_static_aipp_model_refuses_a_host_float_batch():
    from dvpipe.backends.dvpp.aipp import aipp_for

    cfg = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=(8, 16),
                   content_size=(8, 16), out_size=(8, 16))
    key = sim_model(lambda x: x, inputs=[((1, 3, 8, 16), "float16")], outputs=[((1, 3, 8, 16), "float16")], aipp=cfg)
    with _om(key) as m:
        with pytest.raises(ModelInputError, match="converted with AIPP"):
            m(np.zeros((1, 3, 8, 16), np.float32))


def test_software_device_enforces_the_api():
    """The sim's own checks, called as pyACL is: wrong size, host memory, destroyed dataset."""
    from dvpipe.backends.dvpp import _mdl

    key = sim_model(lambda x: x, inputs=[((4,), "float32")], outputs=[((4,), "float32")])
    with _om(key) as m:
        rt = m.runtime
        dev = rt.call("acl.rt.malloc", 16, 0)
        small = rt.call("acl.rt.malloc", 8, 0)
        host = rt.call("acl.rt.malloc_host", 16)
        out = rt.call("acl.rt.malloc", 16, 0)
        outs = _mdl.create_dataset(rt, [(out, 16)])
        for ptr, size, why in ((small, 8, "holds 8 B, the model expects 16 B"), (host, 16, "not device memory")):
            ins = _mdl.create_dataset(rt, [(ptr, size)])
            with pytest.raises(_acl.InvalidParam, match=why) as e:
                rt.call("acl.mdl.execute", m.model_id, ins.handle, outs.handle)
            assert e.value.ret == 100000
            _mdl.destroy_dataset(rt, ins)
        ins = _mdl.create_dataset(rt, [(dev, 16)])
        rt.call("acl.mdl.execute", m.model_id, ins.handle, outs.handle)
        gone = ins.handle
        _mdl.destroy_dataset(rt, ins)
        with pytest.raises(_acl.InvalidParam, match="destroyed"):
            rt.call("acl.mdl.execute", m.model_id, gone, outs.handle)
        _mdl.destroy_dataset(rt, outs)
        for p in (dev, small, out):
            rt.call("acl.rt.free", p)
        rt.call("acl.rt.free_host", host)


def test_dynamic_aipp_sequence_in_documented_order():
    from dvpipe.backends.dvpp.aipp import aipp_for

    n, w, h = 2, 32, 16
    cfg = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=(h, w),
                   content_size=(h, w), out_size=(h, w))
    dyn = sim_model(lambda x: x, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")],
                    aipp="dynamic", max_src_image_size=2 * n * w * h * 3 // 2, name="identity-dyn")
    nv12 = _pictures(n, w, h, seed=3)
    with _om(dyn) as m:
        assert m.dynamic_aipp and len(m.inputs) == 1  # the parameter input is the runner's, not the caller's
        # ATC max_src_image_size is an upper bound: a smaller picture batch is accepted, a larger one is not
        assert m.inputs[0].nbytes == 2 * nv12.nbytes
        with pytest.raises(ModelInputError, match=f"at input 0, the batch is a host .* of {3 * nv12.nbytes} B"):
            m(np.zeros(3 * nv12.nbytes, np.uint8))
        tensor, ptr = _device_tensor(m, nv12, aipp=cfg)
        calls = m.runtime.acl.mdl.calls
        start = len(calls)
        (got,) = m(tensor)
        (again,) = m(tensor)
        seq = [api for api, _ in calls[start:] if api.startswith(("create_aipp", "set_", "execute", "destroy_aipp"))]
        m.runtime.free(ptr)
        assert sim.ledger()["aipp_sets"] == 1
    # documented order (pyACL set_input_aipp page, "dynamic AIPP (single dynamic AIPP input)"): create the
    # parameter set, set its parameters, bind it to the dataset with set_input_aipp, then execute
    per_batch = ["set_aipp_crop_params", "set_aipp_padding_params", "set_aipp_dtc_pixel_mean",
                 "set_aipp_dtc_pixel_min", "set_aipp_pixel_var_reci"]
    expected = (["create_aipp", "set_aipp_input_format", "set_aipp_csc_params", "set_aipp_rbuv_swap_switch",
                 "set_aipp_ax_swap_switch", "set_aipp_src_image_size"] + per_batch * n
                + ["set_input_aipp", "execute_async", "execute_async"])
    assert seq == expected  # the second call reuses the parameters already in the AIPP input buffer
    for k in range(n):
        ref = _reference_normalised(nv12[k], (h, w), (h, w))
        assert np.abs(got[k].astype(np.float64) - ref).max() <= 2 / min(STD) + 0.004
    np.testing.assert_array_equal(got, again)


def test_dynamic_aipp_needs_parameters():
    dyn = sim_model(lambda x: x, inputs=[((1, 3, 8, 8), "float16")], outputs=[((1, 3, 8, 8), "float16")],
                    aipp="dynamic", max_src_image_size=8 * 8 * 3 // 2)
    with _om(dyn) as m:
        with pytest.raises(ModelInputError, match=r"meta\['aipp'\]"):
            m(np.zeros(96, np.uint8))
    plain = sim_model(lambda x: x, inputs=[((2,), "float32")], outputs=[((2,), "float32")])
    from dvpipe.backends.dvpp.aipp import AippConfig

    with pytest.raises(ConfigError, match="aipp: the model .* has no dynamic AIPP input"):
        _om(plain, aipp=AippConfig(src_image_size_w=8, src_image_size_h=8))


def test_fault_injection_in_the_mdl_unit():
    key = sim_model(lambda x: x, inputs=[((2,), "float32")], outputs=[((2,), "float32")])
    with sim.faults("mdl"):
        with pytest.raises(_acl.RtFailure, match="acl.mdl.load_from_file"):
            _om(key)
    m = _om(key)
    m(np.ones(2, np.float32))
    sim.inject_fault("mdl")
    with pytest.raises(_acl.RtFailure, match="execute_async"):
        m(np.ones(2, np.float32))
    sim.clear_faults()
    (out,) = m(np.ones(2, np.float32))  # the model works again once the fault is gone
    np.testing.assert_array_equal(out, np.ones(2, np.float32))
    m.close()


def test_model_function_errors_are_device_failures():
    key = sim_model(lambda x: x[:1], inputs=[((2,), "float32")], outputs=[((2,), "float32")])
    with _om(key) as m:
        with pytest.raises(_acl.RtFailure, match=r"output 0 has shape \(1,\), the descriptor declares \(2,\)"):
            m(np.ones(2, np.float32))


def _write_model(tmp_path, extra: str = "") -> str:
    (tmp_path / "model_fn.py").write_text("import numpy as np\n\ndef run(x):\n    return x * 3, x.sum(keepdims=True)\n")
    (tmp_path / "model.om").write_text(textwrap.dedent("""\
        dvpipe_sim_model: 1
        function: model_fn.py:run
        inputs:
          - {name: x, dims: [2, 2], dtype: float32}
        outputs:
          - {name: y, dims: [2, 2], dtype: float32}
          - {name: s, dims: [1, 1], dtype: float32}
        """) + extra)
    return str(tmp_path)


def test_from_config_loads_a_descriptor(tmp_path):
    base = _write_model(tmp_path)
    m = from_config({"type": "om", "path": "model.om", "device": 0, "backend": "dvpp-sim",
                     "target": {"soc": "Ascend310P3", "cann": "8.0.0"}}, base)
    try:
        x = np.array([[1, 2], [3, 4]], np.float32)
        y, s = m(x)
        np.testing.assert_array_equal(y, 3 * x)
        np.testing.assert_array_equal(s, np.array([[10]], np.float32))
        assert [t.name for t in m.outputs] == ["y", "s"]
    finally:
        m.close()


@pytest.mark.parametrize("mapping, match", [
    ({"type": "om"}, r"^model\.path: missing"),
    ({"path": "nope.om", "backend": "dvpp-sim"}, r"^model\.path: file not found: .*nope\.om"),
    ({"path": "model.om", "backend": "tpu"}, r"^model\.backend: expected one of dvpp, dvpp-sim, got 'tpu'"),
    ({"path": "model.om", "backend": "dvpp-sim", "device": -1}, r"^model\.device: expected a device id >= 0"),
    ({"path": "model.om", "backend": "dvpp-sim"}, r"^model\.target: the software device simulates one target"),
    ({"path": "model.om", "backend": "dvpp-sim", "target": {"soc": "Ascend310P3"}}, r"^model\.target\.cann: missing"),
    ({"path": "model.om", "batch": 4}, r"^model: unknown key\(s\) batch"),
    ({"type": "onnx", "path": "model.om"}, r"^model\.type: only type: om"),
    ({"path": "model.om", "backend": "dvpp-sim", "aipp": "x.cfg", "target": {"soc": "Ascend310P3", "cann": "8.0.0"}},
     r"^model\.aipp: file not found: .*x\.cfg"),
])
def test_config_errors_name_the_key(tmp_path, mapping, match):
    base = _write_model(tmp_path)
    with pytest.raises(ConfigError, match=match):
        parse_config(mapping, base)


def test_from_config_bad_descriptor_is_a_path_error(tmp_path):
    base = _write_model(tmp_path, "layers: 3\n")
    with pytest.raises(ConfigError, match=r"^model\.path: the device cannot load it: .*unknown key\(s\) layers"):
        from_config({"path": "model.om", "backend": "dvpp-sim"}, base, default_target=TARGET)


def test_load_from_mem_and_synchronous_execute():
    """The lower layer alone: a descriptor loaded from host memory, executed with acl.mdl.execute."""
    from dvpipe.backends.dvpp import _mdl

    text = b"dvpipe_sim_model: 1\nfunction: numpy:negative\ninputs: [{dims: [3], dtype: int32}]\n" \
           b"outputs: [{dims: [3], dtype: int32}]\n"
    rt = _acl.runtime("sim", TARGET).hold()
    try:
        mid = _mdl.load(rt, data=text)
        desc, info = _mdl.describe(rt, mid)
        assert [(t.dims, t.dtype, t.nbytes) for t in info.inputs + info.outputs] == [((3,), "int32", 12)] * 2
        src, dst = rt.call("acl.rt.malloc", 12, 0), rt.call("acl.rt.malloc", 12, 0)
        rt.upload(src, 12, np.array([1, -2, 3], np.int32).tobytes())
        ins, outs = _mdl.create_dataset(rt, [(src, 12)]), _mdl.create_dataset(rt, [(dst, 12)])
        rt.call("acl.mdl.execute", mid, ins.handle, outs.handle)
        np.testing.assert_array_equal(rt.download(dst, 12).view(np.int32), [-1, 2, -3])
        for ds in (ins, outs):
            _mdl.destroy_dataset(rt, ds)
        for p in (src, dst):
            rt.call("acl.rt.free", p)
        _mdl.unload(rt, mid, desc)
        with pytest.raises(_acl.InvalidParam):  # an unloaded model is an invalid handle
            rt.call("acl.mdl.unload", mid)
    finally:
        rt.unhold()


def test_end_to_end_aipp_route_into_the_model(samples_dir):
    """The whole device path on the software device: JPEG -> JPEGD + VPC into the per-batch NV12 buffer (AIPP
    route) -> OmModel over that buffer (static AIPP from the batch's meta) -> outputs. The only bytes that
    cross PCIe are the JPEGs going in and the model's outputs coming back."""
    from dvpipe.testing.dvpp import sample_frame_sets

    rig = dvpipe.Rig.from_yaml(samples_dir / "rig.yaml")
    frames = sample_frame_sets(rig, samples_dir, count=1)[0]
    pipe = dvpipe.Pipeline.from_profile("bevformer-tiny", rig, backends=("dvpp-sim", "aipp-sim", "cpu"),
                                        target=TARGET, fidelity="fast")
    ref = dvpipe.Pipeline.from_profile("bevformer-tiny", rig, backends=("cpu",))
    try:
        batch = pipe.process(frames)
        assert isinstance(batch.images, DeviceTensor) and batch.images.layout == "NV12"
        cfg = batch.images.meta["aipp"]
        n, (oh, ow) = batch.images.shape[0], cfg.output_hw
        key = sim_model(lambda x: x, inputs=[((n, 3, oh, ow), "float16")], outputs=[((n, 3, oh, ow), "float16")],
                        aipp=cfg, name="bev-input")
        with _om(key) as m:
            (got,) = m(batch)
        want = np.asarray(ref.process(frames).images)
    finally:
        pipe.close()
        ref.close()
    moved = _transfer_bytes(batch.timeline)
    assert moved.get("host_to_device") == sum(len(b) for b in frames.values())  # the JPEG bytes, nothing else
    assert moved.get("device_to_host") == got.nbytes == n * 3 * oh * ow * 2  # the model's output only
    assert got.shape == want.shape
    err = np.abs(got.astype(np.float64) - want)
    # against the CPU reference (libjpeg DCT-domain 1/2 decode, float normalise): DVPP's bilinear resize,
    # AIPP's 8-bit CSC and fp16. Measured: mean 0.011, p99 0.051 (normalised units); edges differ most
    assert err.mean() < 0.02 and np.percentile(err, 99) < 0.1
    content_h = cfg.crop_size_h if cfg.crop else cfg.src_image_size_h
    assert content_h < oh and np.all(got[:, :, content_h:, :] == 0)  # the Pad rows, exactly 0 as in the reference


def test_software_device_refuses_dynamic_aipp_without_parameters():
    from dvpipe.backends.dvpp import _mdl

    key = sim_model(lambda x: x, inputs=[((1, 3, 8, 8), "float16")], outputs=[((1, 3, 8, 8), "float16")],
                    aipp="dynamic", max_src_image_size=96)
    rt = _acl.runtime("sim", TARGET).hold()
    try:
        mid = _mdl.load(rt, path=key)
        desc, info = _mdl.describe(rt, mid)
        assert [t.aipp for t in info.inputs] == ["dynamic", "dynamic_params"] and info.inputs[0].aipp_index == 1
        ptrs = [rt.call("acl.rt.malloc", t.nbytes, 0) for t in (*info.inputs, *info.outputs)]
        ins = _mdl.create_dataset(rt, [(p, t.nbytes) for p, t in zip(ptrs, info.inputs)])
        outs = _mdl.create_dataset(rt, [(ptrs[-1], info.outputs[0].nbytes)])
        with pytest.raises(_acl.InvalidParam, match="dynamic AIPP parameters were not set"):
            rt.call("acl.mdl.execute", mid, ins.handle, outs.handle)
        for ds in (ins, outs):
            _mdl.destroy_dataset(rt, ds)
        for p in ptrs:
            rt.call("acl.rt.free", p)
        _mdl.unload(rt, mid, desc)
    finally:
        rt.unhold()


def _pitched_tensor(model: OmModel, nv12: np.ndarray, aipp=None) -> tuple[DeviceTensor, int, int]:
    """The AIPP route's batch layout: N NV12 pictures in one DVPP allocation, ``slot_pitch`` bytes apart (the
    picture plus the gap pyACL documents between DVPP segments), not back to back."""
    from dvpipe.device import slot_pitch

    rt = model.runtime
    n, h3, w = nv12.shape
    per = h3 * w
    pitch = slot_pitch(per)
    assert pitch > per  # the case under test: the pictures are not adjacent
    ptr = rt.malloc(n * pitch)
    for i in range(n):
        rt.upload(ptr + i * pitch, per, np.ascontiguousarray(nv12[i]).tobytes())
    meta = {"slot_pitch": pitch, **({} if aipp is None else {"aipp": aipp})}
    t = DeviceTensor(ptr, n * pitch, (n, h3 * 2 // 3, w), "uint8", "NV12", "dvpp-sim:0", rt, (w, h3 * 2 // 3),
                     meta=meta)
    return t, ptr, pitch


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_every_camera_of_a_pitched_batch_reaches_the_model(mode):
    """Issue 26 point 1: AIPP reads the N pictures of its input back to back (ATC "AIPP Verification of the Model
    Input Size", atlasatc_16_0024: input_size = N x w x h x 1.5); the AIPP route's batch has them slot_pitch bytes
    apart. Every camera's model input, not only camera 0's, must match the float reference (dynamic AIPP bound the
    pitched buffer as is: camera 1 read from the middle of camera 0's gap, max error ~4 normalised units)."""
    from dvpipe.backends.dvpp.aipp import aipp_for

    n, w, h = 3, 32, 16
    cfg = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=(h, w),
                   content_size=(h, w), out_size=(h, w))
    per = w * h * 3 // 2
    spec = dict(inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")], name=f"pitched-{mode}")
    key = (sim_model(lambda x: x, aipp=cfg, **spec) if mode == "static"
           else sim_model(lambda x: x, aipp="dynamic", max_src_image_size=2 * n * per, **spec))
    nv12 = _pictures(n, w, h, seed=5)
    tl = Timeline()
    with _om(key) as m:
        tensor, ptr, pitch = _pitched_tensor(m, nv12, aipp=cfg)
        (got,) = m(FrameBatch(images=tensor, metas=[{}] * n, valid=np.ones(n, bool), drops=[],
                              cameras=("A", "B", "C"), timeline=tl))
        m.runtime.free(ptr)
    for k in range(n):
        ref = _reference_normalised(nv12[k], (h, w), (h, w))
        err = np.abs(got[k].astype(np.float64) - ref).max()
        assert err <= 2 / min(STD) + 0.004, (k, err)
    # the N pictures were packed on the device (N device -> device copies), nothing crossed PCIe but the output
    assert _transfer_bytes(tl) == {"device_to_device": n * per, "device_to_host": n * 3 * h * w * 2}


def test_software_device_refuses_a_dynamic_aipp_input_that_is_not_n_pictures_back_to_back():
    """The software device's input-size rule for a dynamic AIPP input: the data buffer holds exactly the N
    pictures set by set_aipp_src_image_size, back to back (N x w x h x 1.5 for YUV420SP_U8, atlasatc_16_0024),
    and at most max_src_image_size. A pitched buffer bound as is (N x pitch bytes) is refused, not misread."""
    from dvpipe.backends.dvpp import _mdl
    from dvpipe.backends.dvpp.aipp import aipp_for, dynamic_aipp_calls
    from dvpipe.device import slot_pitch

    n, w, h = 2, 32, 16
    per = w * h * 3 // 2
    cfg = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=(h, w),
                   content_size=(h, w), out_size=(h, w))
    key = sim_model(lambda x: x, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")],
                    aipp="dynamic", max_src_image_size=4 * n * per)
    rt = _acl.runtime("sim", TARGET).hold()
    try:
        mid = _mdl.load(rt, path=key)
        desc, info = _mdl.describe(rt, mid)
        src = rt.call("acl.rt.malloc", info.inputs[0].nbytes, 0)
        par = rt.call("acl.rt.malloc", info.inputs[1].nbytes, 0)
        out = rt.call("acl.rt.malloc", info.outputs[0].nbytes, 0)
        outs = _mdl.create_dataset(rt, [(out, info.outputs[0].nbytes)])
        for size, ok in ((n * per, True), (n * slot_pitch(per), False), (n * per - 2, False)):
            ins = _mdl.create_dataset(rt, [(src, size), (par, info.inputs[1].nbytes)])
            calls = dynamic_aipp_calls(cfg, batch_size=n, input_index=1, by_input_index=False)
            aset = _mdl.run_aipp_calls(rt, calls, model_id=mid, dataset=ins)
            if ok:
                rt.call("acl.mdl.execute", mid, ins.handle, outs.handle)
            else:
                with pytest.raises(_acl.InvalidParam, match=f"holds {size} B, .* {n} pictures back to back"):
                    rt.call("acl.mdl.execute", mid, ins.handle, outs.handle)
            rt.call("acl.mdl.destroy_aipp", aset)
            _mdl.destroy_dataset(rt, ins)
        _mdl.destroy_dataset(rt, outs)
        for p in (src, par, out):
            rt.call("acl.rt.free", p)
        _mdl.unload(rt, mid, desc)
    finally:
        rt.unhold()


#: (setter, arguments after the parameter set) the pages refuse; batch size 2. Ranges as the pages print them
#: (CANN 8.0.0 aclcppdevg_03_1414..1424, pyACL aclpythondevg_01_0178..0192), one argument out at a time.
_BAD_AIPP_CALLS = [
    ("set_aipp_input_format", (0,)),                                  # aclAippInputFormat 1..4
    ("set_aipp_input_format", (1, 1)),                                # one argument
    ("set_aipp_csc_params", (1, 32677, *[0] * 8, *[0] * 6)),          # matrix [-32677, 32676]
    ("set_aipp_csc_params", (1, *[0] * 9, 0, 0, 0, 256, 0, 0)),       # biases uint8_t
    ("set_aipp_csc_params", (2, *[0] * 15)),                          # switch 0 / 1
    ("set_aipp_csc_params", (1, *[0] * 14)),                          # 16 arguments
    ("set_aipp_rbuv_swap_switch", (2,)),
    ("set_aipp_src_image_size", (1, 16)),                             # width [2, 4096]
    ("set_aipp_src_image_size", (64, 4097)),                          # height [1, 4096]
    ("set_aipp_crop_params", (1, 4096, 0, 8, 8, 0)),                  # start [0, 4095]
    ("set_aipp_crop_params", (1, 0, 0, 0, 8, 0)),                     # size [1, 4096]
    ("set_aipp_crop_params", (1, 0, 0, 8, 8, 2)),                     # batch_index [0, batch_size)
    ("set_aipp_padding_params", (1, 33, 0, 0, 0, 0)),                 # [0, 32]
    ("set_aipp_padding_params", (1, 0, 0, 0, 0)),                     # 6 arguments
    ("set_aipp_dtc_pixel_mean", (256, 0, 0, 0, 0)),                   # [0, 255]
    ("set_aipp_dtc_pixel_mean", (1.5, 0, 0, 0, 0)),                   # int16_t
    ("set_aipp_dtc_pixel_min", (0.0, 255.5, 0.0, 0.0, 0)),            # [0, 255]
    ("set_aipp_dtc_pixel_min", (-1.0, 0.0, 0.0, 0.0, 0)),
    ("set_aipp_pixel_var_reci", (1.0, 1.0, 65505.0, 1.0, 0)),         # [-65504, 65504]
    ("set_aipp_pixel_var_reci", (1.0, 1.0, 1.0, 1.0, -1)),
]


@pytest.mark.parametrize("api, args", _BAD_AIPP_CALLS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(_BAD_AIPP_CALLS)])
def test_software_device_refuses_aipp_setter_arguments_outside_their_pages(api, args):
    rt = _acl.runtime("sim", TARGET).hold()
    try:
        aset = rt.call("acl.mdl.create_aipp", 2)
        with pytest.raises(_acl.InvalidParam, match=api):
            rt.call(f"acl.mdl.{api}", aset, *args)
        rt.call("acl.mdl.destroy_aipp", aset)
    finally:
        rt.unhold()


def test_software_device_accepts_the_documented_range_edges_and_a_switched_off_crop():
    rt = _acl.runtime("sim", TARGET).hold()
    try:
        aset = rt.call("acl.mdl.create_aipp", 2)
        for api, args in [("set_aipp_input_format", (4,)), ("set_aipp_csc_params", (1, -32677, 32676, *[0] * 7,
                                                                                    255, 0, 0, 255, 128, 128)),
                          ("set_aipp_src_image_size", (2, 1)), ("set_aipp_src_image_size", (4096, 4096)),
                          ("set_aipp_crop_params", (0, 0, 0, 0, 0, 1)),  # switch off: the window is "invalid"
                          ("set_aipp_crop_params", (1, 4094, 4094, 2, 2, 1)),
                          ("set_aipp_padding_params", (1, 32, 32, 0, 0, 0)),
                          ("set_aipp_dtc_pixel_mean", (255, 0, 0, 0, 1)), ("set_aipp_dtc_pixel_min", (255.0, 0.5, 0, 0, 0)),
                          ("set_aipp_pixel_var_reci", (-65504.0, 65504.0, 1.0, 1.0, 1))]:
            rt.call(f"acl.mdl.{api}", aset, *args)
        rt.call("acl.mdl.destroy_aipp", aset)
    finally:
        rt.unhold()


def test_software_device_refuses_dynamic_parameters_whose_output_is_not_the_model_input():
    """set_input_aipp restrictions (aclcppdevg_03_0308): the AIPP output (crop, then padding) must have the model
    input's height and width; and a YUV420SP crop must start on an even pixel (aclcppdevg_03_1420)."""
    from dvpipe.backends.dvpp.aipp import aipp_for, dynamic_aipp_calls

    n, w, h = 1, 32, 16
    key = sim_model(lambda x: x, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")],
                    aipp="dynamic", max_src_image_size=4 * w * h * 3)
    wide = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=(h, w),
                    content_size=(h, w), out_size=(h, w + 8))
    odd = [(api, tuple(a if not (api.endswith("crop_params") and i == 2) else 1 for i, a in enumerate(args)))
           for api, args in dynamic_aipp_calls(aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full",
                                                        src_size=(h, w + 2), content_size=(h, w), out_size=(h, w)),
                                               batch_size=n, input_index=1, by_input_index=False)]
    _refused_on_binding(key, [(dynamic_aipp_calls(wide, batch_size=n, input_index=1, by_input_index=False),
                               "AIPP would write 16x40 .* model input is 16x32"),
                              (odd, "load_start_pos_w/h must be even")])


def _bind(key, calls) -> None:
    """Bind ``calls`` to model ``key``'s dynamic-AIPP input on the software device; everything made is freed."""
    from dvpipe.backends.dvpp import _mdl

    rt = _acl.runtime("sim", TARGET).hold()
    try:
        mid = _mdl.load(rt, path=key)
        desc, info = _mdl.describe(rt, mid)
        ptrs = [rt.call("acl.rt.malloc", t.nbytes, 0) for t in info.inputs]
        ins = _mdl.create_dataset(rt, [(p, t.nbytes) for p, t in zip(ptrs, info.inputs)])
        try:
            handle = _mdl.run_aipp_calls(rt, calls, model_id=mid, dataset=ins)
            rt.call("acl.mdl.destroy_aipp", handle)
        finally:
            _mdl.destroy_dataset(rt, ins)
            for p in ptrs:
                rt.call("acl.rt.free", p)
            _mdl.unload(rt, mid, desc)
    finally:
        rt.unhold()


def _refused_on_binding(key, cases) -> None:
    """Each ``(calls, match)``: binding the dynamic-AIPP ``calls`` to model ``key``'s input is refused
    (InvalidParam matching ``match``) on the software device; everything made is freed."""
    for calls, match in cases:
        with pytest.raises(_acl.InvalidParam, match=match):
            _bind(key, calls)


def test_software_device_refuses_dynamic_parameters_with_an_odd_yuv420sp_crop_size():
    """aclAippInfo (CANN 8.5.0 aclpythondevg_01_0925) and the Atlas 500 ATC guide: crop_size_w/h are even for
    YUV420SP_U8. The calls set a 31x16 crop with right padding 1 (the output is the model input's 32x16, so only the
    parity is wrong); binding them is refused with the device's bad-parameter error."""
    from dvpipe.backends.dvpp.aipp import aipp_for, dynamic_aipp_calls

    n, w, h = 1, 32, 16
    key = sim_model(lambda x: x, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")],
                    aipp="dynamic", max_src_image_size=4 * w * h * 3)
    even = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=(h, w),
                    content_size=(h, w - 2), out_size=(h, w))  # crop 30x16, pad right 2
    calls = []
    for api, args in dynamic_aipp_calls(even, batch_size=n, input_index=1, by_input_index=False):
        if api.endswith("set_aipp_crop_params"):  # (set, switch, start_w, start_h, size_w, size_h, batch)
            assert args[4] == w - 2
            args = (*args[:4], w - 1, *args[5:])
        elif api.endswith("set_aipp_padding_params"):  # (set, switch, top, bottom, left, right, batch)
            assert args[5] == 2
            args = (*args[:5], 1, *args[6:])
        calls.append((api, args))
    _refused_on_binding(key, [(calls, "crop_size_w must be even")])


# -- dynamic AIPP: per-batch parameters, whatever the call order -------------------------------------------------
#: Huawei, aclmdlSetInputAIPP / aclmdlSetAIPPByInputIndex restrictions (CANN 8.0.0 aclcppdevg_03_0308 / _0311):
#: "the image size after dynamic AIPP is computed per batch" and must be the same for every batch and equal the
#: model input. A batch the caller never set keeps the documented defaults (no crop, no padding: aclmdlAIPP pages).
_N, _W, _H = 2, 32, 16  # model input 32x16; the source is 34x16 and batch 0 crops it to 32x16


def _batch_calls(order: str, batch1: str):
    """The dynamic-AIPP calls of a 34x16 -> crop 32x16 configuration for create_aipp(2). ``batch1``: ``same``
    (batch 1 set as batch 0), ``wide`` (batch 1 without the crop: 34x16 after AIPP), ``mean`` (batch 1 another
    mean, same size) or ``unset`` (no batch-1 call). ``order``: ``0-1`` as dynamic_aipp_calls writes them, or
    ``1-0`` (every batch-1 call before batch 0's)."""
    from dvpipe.backends.dvpp.aipp import aipp_for, dynamic_aipp_calls

    cfg = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=(_H, _W + 2),
                   content_size=(_H, _W), out_size=(_H, _W))
    calls = dynamic_aipp_calls(cfg, batch_size=_N, input_index=1, by_input_index=False)
    per = {"set_aipp_crop_params", "set_aipp_padding_params", "set_aipp_dtc_pixel_mean", "set_aipp_dtc_pixel_min",
           "set_aipp_pixel_var_reci"}
    is_per = [api.split(".")[-1] in per for api, _ in calls]
    first, last = is_per.index(True), len(is_per) - is_per[::-1].index(True)
    b0 = [c for c in calls[first:last] if c[1][-1] == 0]
    b1 = []
    for api, args in calls[first:last]:
        if args[-1] != 1 or batch1 == "unset":
            continue
        if batch1 == "wide" and api.endswith("set_aipp_crop_params"):
            args = (args[0], 0, 0, 0, 0, 0, 1)  # crop off: the whole 34x16 source
        if batch1 == "mean" and api.endswith("set_aipp_dtc_pixel_mean"):
            args = (args[0], 0, 0, 0, 0, 1)
        b1.append((api, args))
    middle = b0 + b1 if order == "0-1" else b1 + b0
    return calls[:first] + middle + calls[last:]


@pytest.fixture
def two_batch_model():
    return sim_model(lambda x: x, inputs=[((_N, 3, _H, _W), "float16")], outputs=[((_N, 3, _H, _W), "float16")],
                     aipp="dynamic", max_src_image_size=_N * (_W + 2) * _H * 3 // 2)


@pytest.mark.parametrize("order", ["0-1", "1-0"])
def test_dynamic_aipp_batches_of_one_configuration_bind_in_either_order(two_batch_model, order):
    _bind(two_batch_model, _batch_calls(order, "same"))


@pytest.mark.parametrize("order", ["0-1", "1-0"])
def test_dynamic_aipp_batches_of_different_sizes_are_refused_in_either_order(two_batch_model, order):
    # batch 1 without the crop: 34x16 after AIPP, batch 0 32x16 (the model input): the documented rule refuses it
    with pytest.raises(_acl.InvalidParam, match="must be the same for every batch"):
        _bind(two_batch_model, _batch_calls(order, "wide"))


def test_dynamic_aipp_batch_never_set_keeps_the_defaults_and_is_refused(two_batch_model):
    # create_aipp(2), only batch 0 set (crop 32x16): batch 1 keeps the default (no crop), 34x16 after AIPP
    with pytest.raises(_acl.InvalidParam, match="batch 1 was never set"):
        _bind(two_batch_model, _batch_calls("0-1", "unset"))


@pytest.mark.parametrize("order", ["0-1", "1-0"])
def test_dynamic_aipp_per_picture_values_are_refused_in_either_order(two_batch_model, order):
    # the same size but another mean for picture 1: the software device applies one configuration to every
    # picture, so it refuses rather than silently apply batch 0's
    with pytest.raises(_acl.FeatureUnsupported, match="batch 1 differs from batch 0.*not simulated"):
        _bind(two_batch_model, _batch_calls(order, "mean"))


# -- static AIPP: src_image_size 0 or omitted -------------------------------------------------------------------
#: ATC's aipp_op template (atlasatc_16_0025, CANN 8.0.0): in static AIPP only input_format is required, every other
#: parameter takes its default; src_image_size_w/h default 0, which means the model input's width / height. The
#: model input size is then N * W * H * 1.5 bytes for YUV420SP_U8 (atlasatc_16_0024), and srcImageSize must be
#: even for YUV420SP_U8 (aclcppdevg_03_1418).
_CSC_JPEG = """    csc_switch : true
    rbuv_swap_switch : false
    matrix_r0c0 : 256
    matrix_r0c1 : 0
    matrix_r0c2 : 359
    matrix_r1c0 : 256
    matrix_r1c1 : -88
    matrix_r1c2 : -183
    matrix_r2c0 : 256
    matrix_r2c1 : 454
    matrix_r2c2 : 0
    input_bias_0 : 0
    input_bias_1 : 128
    input_bias_2 : 128
"""


@pytest.mark.parametrize("src_lines", ["    src_image_size_w : 0\n    src_image_size_h : 0\n", ""],
                         ids=["zero", "omitted"])
def test_static_aipp_source_size_zero_is_the_model_input_size(tmp_path, src_lines):
    n, w, h = 2, 32, 16
    zero = tmp_path / "zero.cfg"
    zero.write_text("aipp_op {\n    aipp_mode : static\n    input_format : YUV420SP_U8\n" + src_lines + _CSC_JPEG + "}\n")
    explicit = tmp_path / "explicit.cfg"
    explicit.write_text("aipp_op {\n    aipp_mode : static\n    input_format : YUV420SP_U8\n"
                        f"    src_image_size_w : {w}\n    src_image_size_h : {h}\n" + _CSC_JPEG + "}\n")
    nv12 = _pictures(n, w, h)
    got = []
    for cfg in (zero, explicit):
        key = sim_model(lambda x: x, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")],
                        aipp=str(cfg))
        with _om(key) as m:
            assert m.inputs[0].nbytes == n * w * h * 3 // 2  # atlasatc_16_0024, src = the model input's W x H
            tensor, ptr = _device_tensor(m, nv12)
            (out,) = m(FrameBatch(images=tensor, metas=[{}] * n, valid=np.ones(n, bool), drops=[],
                                  cameras=("A", "B"), timeline=Timeline()))
            m.runtime.free(ptr)
        got.append(out)
    np.testing.assert_array_equal(got[0], got[1])  # the same conversion as the model-size source written out


def test_static_aipp_source_size_zero_keeps_the_even_rule_for_yuv420sp(tmp_path):
    cfg = tmp_path / "zero.cfg"
    cfg.write_text("aipp_op {\n    aipp_mode : static\n    input_format : YUV420SP_U8\n" + _CSC_JPEG + "}\n")
    with pytest.raises(ConfigError, match="model input's size, 32x15.*even"):  # a 32x15 input: odd height
        sim_model(lambda x: x, inputs=[((1, 3, 15, 32), "float16")], outputs=[((1, 3, 15, 32), "float16")],
                  aipp=str(cfg))


# -- review fixes (data types, static AIPP, two dynamic AIPP inputs, shapes, contexts, unload, gather) ----------
#: aclDataType values outside dvpipe's numpy table (CANN 8.0.0 aclcppdevg_03_1346 / 8.5.0 aclpythondevg_01_0912):
#: ACL_STRING 13, ACL_BF16 27, ACL_INT4 29, ACL_DT_UNDEFINED -1
_UNKNOWN_DT = [13, 27, 29, -1]


@pytest.mark.parametrize("code", _UNKNOWN_DT)
@pytest.mark.parametrize("side", ["input", "output"])
def test_a_model_tensor_of_an_unknown_data_type_is_refused_at_load(monkeypatch, side, code):
    """A bf16 / int4 / string tensor has no numpy dtype here: read as float32 / uint8 it would be reinterpreted
    (the review's bf16 output died in numpy at every call). The load is refused, naming the tensor and the value,
    and nothing stays allocated."""
    from dvpipe.backends.dvpp.sim import _mdl as simmdl

    key = sim_model(lambda x: x, inputs=[((2, 4), "float16")], outputs=[((2, 4), "float16")], name=f"dt-{side}")
    monkeypatch.setattr(simmdl.MdlNamespace, f"get_{side}_data_type", lambda self, desc, i: code)
    before = sim.ledger()
    with pytest.raises(ConfigError, match=rf"{side} 0 \(\w+\) has aclDataType {code}\b") as e:
        _om(key)
    assert "\n" not in str(e.value)
    after = sim.ledger()
    assert (after["models"], after["model_descs"], after["device_buffers"]) == (
        before["models"], before["model_descs"], before["device_buffers"])


#: the keys of the aclAippInfo dict acl.mdl.get_first_aipp_info returns (pyACL aclAippInfo, CANN 8.0.0/8.5.0
#: aclpythondevg_01_0925; the C struct aclcppdevg_03_1363 has the same field names)
_AIPP_INFO_KEYS = {
    "inputFormat", "srcImageSizeW", "srcImageSizeH", "cropSwitch", "loadStartPosW", "loadStartPosH", "cropSizeW",
    "cropSizeH", "resizeSwitch", "resizeOutputW", "resizeOutputH", "paddingSwitch", "leftPaddingSize",
    "rightPaddingSize", "topPaddingSize", "bottomPaddingSize", "cscSwitch", "rbuvSwapSwitch", "axSwapSwitch",
    "singleLineMode", *(f"matrixR{r}C{c}" for r in range(3) for c in range(3)),
    *(f"outputBias{i}" for i in range(3)), *(f"inputBias{i}" for i in range(3)),
    *(f"{k}Chn{i}" for k in ("mean", "min", "varReci") for i in range(4)),
    "srcFormat", "srcDatatype", "srcDimNum", "shapeCount", "outDims"}


def _static_cfg_text(w: int, h: int, extra: str = "") -> str:
    return ("aipp_op {\n    aipp_mode : static\n    input_format : YUV420SP_U8\n"
            f"    src_image_size_w : {w}\n    src_image_size_h : {h}\n" + _CSC_JPEG + extra + "}\n")


def test_software_device_get_first_aipp_info_as_documented(tmp_path):
    """aipp_info, ret = acl.mdl.get_first_aipp_info(model_id, index) (aclpythondevg_01_0215): the static AIPP of
    the input as an aclAippInfo dict; for a dynamic AIPP input only srcFormat, srcDatatype, srcDimNum,
    shapeCount and outDims are valid; an input without AIPP has no configuration (ACL_ERROR_GE_AIPP_NOT_EXIST,
    the code the aclError page names in place of the deprecated ACL_ERROR_NOT_STATIC_AIPP 100038)."""
    n, w, h = 2, 32, 16
    cfg = tmp_path / "aipp.cfg"
    cfg.write_text(_static_cfg_text(w, h, "    mean_chn_0 : 12\n    min_chn_1 : 0.5\n    var_reci_chn_2 : 0.25\n"))
    static = sim_model(lambda x: x, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")],
                       aipp=str(cfg), name="info-static")
    with _om(static) as m:
        info = m.runtime.call("acl.mdl.get_first_aipp_info", m.model_id, 0)
        assert set(info) == _AIPP_INFO_KEYS
        # the values the hand-written aipp.cfg above sets (YUV420SP_U8 is aclAippInputFormat 1)
        assert (info["inputFormat"], info["srcImageSizeW"], info["srcImageSizeH"], info["cscSwitch"]) == (1, w, h, 1)
        assert [info[f"matrixR{r}C{c}"] for r in range(3) for c in range(3)] == [256, 0, 359, 256, -88, -183,
                                                                                 256, 454, 0]
        assert [info[f"inputBias{i}"] for i in range(3)] == [0, 128, 128]
        assert (info["meanChn0"], info["minChn1"], info["varReciChn2"], info["varReciChn0"]) == (12, 0.5, 0.25, 1.0)
        assert (info["cropSwitch"], info["paddingSwitch"], info["rbuvSwapSwitch"]) == (0, 0, 0)
    plain = sim_model(lambda x: x, inputs=[((2,), "float32")], outputs=[((2,), "float32")], name="info-plain")
    with _om(plain) as m:
        with pytest.raises(_acl.AclError) as e:
            m.runtime.call("acl.mdl.get_first_aipp_info", m.model_id, 0)
        assert e.value.ret == 145015
    dyn = sim_model(lambda x: x, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")],
                    aipp="dynamic", max_src_image_size=n * w * h * 3 // 2, name="info-dyn")
    with _om(dyn) as m:
        info = m.runtime.call("acl.mdl.get_first_aipp_info", m.model_id, 0)
        assert set(info) == _AIPP_INFO_KEYS and info["srcDatatype"] == 1 and info["srcDimNum"] == 4  # fp16, NCHW


def test_an_aipp_info_dict_without_the_documented_keys_is_refused_not_compared_as_empty():
    # a pyACL whose aclAippInfo dict names its keys otherwise (snake_case, say) would leave nothing to compare
    # against the batch's AIPP: every static-AIPP model would pass; refused in one line instead
    from dvpipe.backends.dvpp._mdl import first_aipp_info

    class Runtime:
        def call(self, name, *args, **where):
            return {"input_format": 1, "csc_switch": 1, "mean_chn_0": 12}

    with pytest.raises(ConfigError) as e:
        first_aipp_info(Runtime(), 1, 0)
    assert "aclAippInfo" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("extra, fields", [
    # mean 0 / std 1 instead of the batch's mmdet3d mean/std (hand: 123.675 = mean_chn 123 + min_chn 0.675,
    # var_reci = 1 / std)
    ("", ["mean_chn_0+min_chn_0", "mean_chn_1+min_chn_1", "mean_chn_2+min_chn_2", "var_reci_chn_0",
          "var_reci_chn_1", "var_reci_chn_2"]),
    # the right mean/std, but the model swaps U and V (BGR out of an RGB matrix)
    ("    rbuv_swap_switch : true\n    mean_chn_0 : 123\n    mean_chn_1 : 116\n    mean_chn_2 : 103\n"
     "    min_chn_0 : 0.675\n    min_chn_1 : 0.28\n    min_chn_2 : 0.53\n"
     f"    var_reci_chn_0 : {1 / STD[0]}\n    var_reci_chn_1 : {1 / STD[1]}\n    var_reci_chn_2 : {1 / STD[2]}\n",
     ["rbuv_swap_switch"]),
], ids=["mean-std", "channel-order"])
def test_static_aipp_model_refuses_a_batch_needing_another_aipp(tmp_path, extra, fields):
    """The model was converted with a static AIPP other than the one the batch's pictures need (meta["aipp"]):
    same bytes, other arithmetic. acl.mdl.get_first_aipp_info reads the model's; a difference is refused with
    the fields that differ; the matching configuration runs."""
    from dvpipe.backends.dvpp.aipp import aipp_for

    n, w, h = 2, 32, 16
    want = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=(h, w),
                    content_size=(h, w), out_size=(h, w))
    text = _static_cfg_text(w, h, extra).replace("    rbuv_swap_switch : false\n", "") if extra else \
        _static_cfg_text(w, h)
    cfg = tmp_path / "model.cfg"
    cfg.write_text(text)
    key = sim_model(lambda x: x, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")],
                    aipp=str(cfg), name="other-aipp")
    nv12 = _pictures(n, w, h)
    with _om(key) as m:
        tensor, ptr = _device_tensor(m, nv12, aipp=want)
        with pytest.raises(ModelInputError) as e:
            m(tensor)
        msg = str(e.value)
        assert "\n" not in msg and "static AIPP" in msg
        named = msg.split(" differs in: ", 1)[1].split(";")[0]
        assert sorted(f.split(":")[0] for f in named.split(", ")) == sorted(fields)
        m.runtime.free(ptr)
    same = sim_model(lambda x: x, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")],
                     aipp=want, name="same-aipp")
    with _om(same) as m:
        tensor, ptr = _device_tensor(m, nv12, aipp=want)
        (got,) = m(tensor)
        m.runtime.free(ptr)
    ref = _reference_normalised(nv12[0], (h, w), (h, w))
    assert np.abs(got[0].astype(np.float64) - ref).max() <= 2 / min(STD) + 0.004


def test_a_model_with_two_dynamic_aipp_inputs_is_refused_without_leaking(monkeypatch):
    """pyACL "Dynamic AIPP (Multiple Dynamic AIPP Inputs)" (aclpythondevg_0042): each image input has its own
    ascend_dynamic_aipp_data input. dvpipe feeds one picture batch: two are refused at load, and every buffer
    allocated on the way is freed (the review: one acl.rt.malloc per parameter input, one pointer kept)."""
    import dataclasses

    from dvpipe.backends.dvpp import _mdl

    key = sim_model(lambda x: x, inputs=[((1, 3, 8, 8), "float16")], outputs=[((1, 3, 8, 8), "float16")],
                    aipp="dynamic", max_src_image_size=96, name="dyn2")
    real = _mdl.describe

    def two_aipp(rt, mid):  # the description a device gives for two image inputs with dynamic AIPP
        desc, info = real(rt, mid)
        img, par = info.inputs
        return desc, _mdl.ModelInfo((dataclasses.replace(img, aipp_index=2),
                                     dataclasses.replace(img, index=1, name="img1", aipp_index=3),
                                     dataclasses.replace(par, index=2), dataclasses.replace(par, index=3)),
                                    info.outputs)

    monkeypatch.setattr(_mdl, "describe", two_aipp)
    space = _acl.runtime("sim", TARGET).acl.memory.rt
    live, models = space.live, sim.ledger()["models"]
    with pytest.raises(ConfigError, match=r"2 inputs with dynamic AIPP \(inputs 0, 1;.*one picture batch") as e:
        _om(key)
    assert "\n" not in str(e.value)
    assert space.live == live and sim.ledger()["models"] == models


def test_host_batch_of_another_shape_is_refused_even_with_the_same_bytes():
    """An NHWC model (atc --input_format=NHWC) given the pipeline's NCHW batch: 2x4x6x3 float32 = 576 B either way
    (hand), but reading one as the other scrambles every pixel. Refused with both shapes; the model's own shape
    (and one differing only by size-1 dims, the same bytes in the same order) runs."""
    n, h, w = 2, 4, 6
    nchw = np.arange(n * 3 * h * w, dtype=np.float32).reshape(n, 3, h, w)
    key = sim_model(lambda x: x, inputs=[((n, h, w, 3), "float32")], outputs=[((n, h, w, 3), "float32")],
                    name="nhwc")
    with _om(key) as m:
        with pytest.raises(ModelInputError, match=r"expects 2x4x6x3 float32 \(576 B\) at input 0, the batch is a "
                                                  r"host \(2, 3, 4, 6\) float32 array of 576 B"):
            m(nchw)
        nhwc = nchw.transpose(0, 2, 3, 1)
        np.testing.assert_array_equal(m(nhwc)[0], nhwc)
        np.testing.assert_array_equal(m(nhwc[None])[0], nhwc)


def test_device_tensor_of_another_dtype_or_shape_is_refused():
    """A float32 DeviceTensor bound to an fp16 model of twice the elements has the same bytes (hand: 2x3x4x6 x 4 B =
    4x3x4x6 x 2 B = 576 B): the model would read fp32 bits as fp16 (the review: ones read as 0.0 and 1.875).
    Refused naming both dtypes, as for a host array; so is an NCHW DeviceTensor for an NHWC model."""
    n, h, w = 2, 4, 6
    ones = np.ones((n, 3, h, w), np.float32)
    fp16 = sim_model(lambda x: x, inputs=[((2 * n, 3, h, w), "float16")], outputs=[((2 * n, 3, h, w), "float16")],
                     name="fp16-dev")
    nhwc = sim_model(lambda x: x, inputs=[((n, h, w, 3), "float32")], outputs=[((n, h, w, 3), "float32")],
                     name="nhwc-dev")
    for key, expect in ((fp16, r"expects 4x3x4x6 float16 \(576 B\) at input 0, the batch is a NCHW DeviceTensor "
                                r"\(2, 3, 4, 6\) float32 of 576 B"),
                        (nhwc, r"expects 2x4x6x3 float32 \(576 B\) at input 0, the batch is a NCHW DeviceTensor "
                               r"\(2, 3, 4, 6\) float32 of 576 B")):
        with _om(key) as m:
            rt = m.runtime
            arr = ones
            ptr = rt.call("acl.rt.malloc", arr.nbytes, 0)
            rt.upload(ptr, arr.nbytes, arr.tobytes())
            t = DeviceTensor(ptr, arr.nbytes, arr.shape, "float32", "NCHW", "dvpp-sim:0", rt)
            with pytest.raises(ModelInputError, match=expect):
                m(t)
            rt.call("acl.rt.free", ptr)
    with _om(nhwc) as m:  # the model's own dtype and shape are bound with no copy
        rt = m.runtime
        arr = ones.transpose(0, 2, 3, 1).copy()
        ptr = rt.call("acl.rt.malloc", arr.nbytes, 0)
        rt.upload(ptr, arr.nbytes, arr.tobytes())
        (out,) = m(DeviceTensor(ptr, arr.nbytes, arr.shape, "float32", "NHWC", "dvpp-sim:0", rt))
        rt.call("acl.rt.free", ptr)
    np.testing.assert_array_equal(out, arr)


def _four_float_buffers(rt):
    """Device input and output buffers of 4 float32 and their datasets: ``(ins, out, dsi, dso)``."""
    from dvpipe.backends.dvpp import _mdl

    ins, out = rt.call("acl.rt.malloc", 16, 0), rt.call("acl.rt.malloc", 16, 0)
    return ins, out, _mdl.create_dataset(rt, [(ins, 16)]), _mdl.create_dataset(rt, [(out, 16)])


def _release(rt, ins, out, dsi, dso) -> None:
    from dvpipe.backends.dvpp import _mdl

    for ds in (dsi, dso):
        _mdl.destroy_dataset(rt, ds)
    for p in (ins, out):
        rt.call("acl.rt.free", p)


def test_software_device_runs_models_only_in_their_context():
    """aclmdlUnload (CANN 8.0.0 aclcppdevg_03_0291): loading, executing and unloading a model must happen in one
    context. A thread with no current context is refused as create_stream refuses it (107002
    ACL_ERROR_RT_CONTEXT_NULL); a thread in another context is refused as execute already was (107004
    ACL_ERROR_RT_MODEL_CONTEXT). OmModel makes its runtime's context current for each call, on any thread."""
    import threading

    from dvpipe.backends.dvpp import _mdl

    key = sim_model(lambda x: x * 2, inputs=[((4,), "float32")], outputs=[((4,), "float32")], name="ctx")
    rt = _acl.runtime("sim", TARGET).hold()
    acl = rt.acl
    got: dict = {}
    try:
        ins, out, dsi, dso = _four_float_buffers(rt)
        mid = _mdl.load(rt, path=key)

        def bare():
            got["load"] = acl.mdl.load_from_file(key)[1]
            got["execute"] = acl.mdl.execute(mid, dsi.handle, dso.handle)
            got["unload"] = acl.mdl.unload(mid)
            ctx, ret = acl.rt.create_context(0)  # another context, now current on this thread
            assert ret == 0
            got["execute in another context"] = acl.mdl.execute(mid, dsi.handle, dso.handle)
            got["unload in another context"] = acl.mdl.unload(mid)
            acl.rt.destroy_context(ctx)

        th = threading.Thread(target=bare)
        th.start()
        th.join()
        assert got == {"load": 107002, "execute": 107002, "unload": 107002, "execute in another context": 107004,
                       "unload in another context": 107004}
        assert acl.mdl.live_models >= 1
        _mdl.unload(rt, mid, None)  # in its own context: accepted
        _release(rt, ins, out, dsi, dso)
    finally:
        rt.unhold()
    results: list = []

    def on_a_bare_thread():
        with _om(key) as m:
            results.append(m(np.arange(4, dtype=np.float32))[0])

    th = threading.Thread(target=on_a_bare_thread)
    th.start()
    th.join()
    np.testing.assert_array_equal(results[0], np.arange(4, dtype=np.float32) * 2)


def test_software_device_refuses_to_unload_a_model_with_queued_work():
    """aclmdlUnload (aclcppdevg_03_0291): "ensure that the model is not being used by other API calls" before
    unloading. Work queued by execute_async is such a use until the stream is synchronised: the unload is refused
    (the model and its memory stay valid), the queued work then runs, and the unload after it is accepted."""
    from dvpipe.backends.dvpp import _mdl

    key = sim_model(lambda x: x * 2, inputs=[((4,), "float32")], outputs=[((4,), "float32")], name="late")
    rt = _acl.runtime("sim", TARGET).hold()
    try:
        ins, out, dsi, dso = _four_float_buffers(rt)
        rt.upload(ins, 16, np.array([1, 2, 3, 4], np.float32).tobytes())
        mid = _mdl.load(rt, path=key)
        desc, _info = _mdl.describe(rt, mid)
        stream = rt.create_stream()
        _mdl.execute_async(rt, mid, dsi, dso, stream)
        with pytest.raises(_acl.AclError, match="queued") as e:
            rt.call("acl.mdl.unload", mid)
        assert e.value.ret == 100000
        rt.synchronize(stream)
        np.testing.assert_array_equal(rt.download(out, 16).view(np.float32), [2, 4, 6, 8])
        _mdl.unload(rt, mid, desc)
        rt.destroy_stream(stream)
        _release(rt, ins, out, dsi, dso)
    finally:
        rt.unhold()


def test_the_aipp_route_gather_is_timed_and_counted():
    """On the AIPP route the pictures sit slot_pitch apart, so every call packs them (N device -> device copies):
    a model_gather span and stats["device_to_device_bytes"] of N x picture bytes (hand: 3 x 32 x 16 x 1.5 = 2304 B
    a call)."""
    from dvpipe.backends.dvpp.aipp import aipp_for

    n, w, h = 3, 32, 16
    cfg = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=(h, w),
                   content_size=(h, w), out_size=(h, w))
    key = sim_model(lambda x: x, inputs=[((n, 3, h, w), "float16")], outputs=[((n, 3, h, w), "float16")], aipp=cfg,
                    name="gather")
    with _om(key) as m:
        assert m.stats["device_to_device_bytes"] == 0
        tensor, ptr, _pitch = _pitched_tensor(m, _pictures(n, w, h), aipp=cfg)
        tl = Timeline()
        for _ in range(2):
            m(tensor, timeline=tl)
        m.runtime.free(ptr)
        assert m.stats["device_to_device_bytes"] == 2 * 2304
    assert [s.attrs["bytes"] for s in tl.spans if s.name == "model_gather"] == [2304, 2304]


# -- static AIPP: which fields the comparison reads (ATC aipp_op, atlasatc_16_0025) ---------------------------------
def _want_and_model(**changes):
    """The batch's AIPP (mmdet3d mean/std, RGB out of full-range YUV, a 30x14 crop padded to 32x16) and the model
    dict acl.mdl.get_first_aipp_info gives for the same configuration (first_aipp_info: aipp_op names)."""
    import dataclasses

    from dvpipe.backends.dvpp.aipp import aipp_for

    want = aipp_for(MEAN, STD, channel_order="rgb", colour_standard="jpeg_full", src_size=(16, 32),
                    content_size=(14, 30), out_size=(16, 32))
    want = dataclasses.replace(want, **changes)
    model = {k: v for k, v in dataclasses.asdict(want).items() if k not in ("aipp_mode", "related_input_rank",
                                                                          "max_src_image_size", "padding_value")}
    return want, model


@pytest.mark.parametrize("model_changes, batch_changes, named", [
    ({}, {}, []),
    # src_image_size 0: "the model input's size" (ATC template), so any batch size matches; both set: compared
    ({"src_image_size_w": 0, "src_image_size_h": 0}, {}, []),
    ({"src_image_size_w": 64}, {}, ["src_image_size_w"]),
    # crop off in both: its fields are invalid (the template's words) and differ freely
    ({"crop": False, "crop_size_w": 8}, {"crop": False}, []),
    ({"crop": False}, {}, ["crop"]),
    ({"crop_size_w": 28}, {}, ["crop_size_w"]),
    ({"padding": False, "right_padding_size": 0}, {"padding": False, "right_padding_size": 6}, []),
    ({"bottom_padding_size": 4}, {}, ["bottom_padding_size"]),
    # AIPP subtracts mean_chn then min_chn: 124 - 0.325 is 123 + 0.675 (hand), and a 1 off sum is not
    ({"mean_chn_0": 124, "min_chn_0": -0.325}, {}, []),
    ({"mean_chn_0": 124}, {}, ["mean_chn_0+min_chn_0"]),
    # var_reci as the device holds it (fp16: 0.017124753 -> 0.01712036) matches; another std does not
    ({"var_reci_chn_1": float(np.float16(1 / STD[1]))}, {}, []),
    ({"var_reci_chn_1": 1 / 57.0 * 1.01}, {}, ["var_reci_chn_1"]),
    ({"var_reci_chn_0": 1 / STD[2]}, {}, ["var_reci_chn_0"]),  # another channel's std: 1.8% off, ~3e-4 absolute
    # a YUV input uses the input biases, not the output ones; the matrix only with csc on in both
    ({"output_bias_0": 16}, {}, []),
    ({"input_bias_1": 0}, {}, ["input_bias_1"]),
    ({"matrix_r0c2": 358}, {}, ["matrix_r0c2"]),
    ({"csc_switch": False, "matrix_r0c2": 0}, {"csc_switch": False}, []),
    # the fourth channel only for a 4-channel input format
    ({"mean_chn_3": 9, "var_reci_chn_3": 0.5}, {}, []),
    ({"rbuv_swap_switch": True}, {}, ["rbuv_swap_switch"]),
    # aipp_op switches no batch configuration turns on
    ({"resize": True}, {}, ["resize"]),
], ids=["same", "src-size-0", "src-size", "crop-off-both", "crop-switch", "crop-size", "padding-off-both",
        "padding-size", "mean-min-sum", "mean", "var-reci-fp16", "var-reci", "var-reci-other-std", "output-bias-unused", "input-bias",
        "matrix", "csc-off-both", "fourth-channel-unused", "rbuv-swap", "resize"])
def test_static_aipp_comparison_reads_the_fields_aipp_computes_with(model_changes, batch_changes, named):
    from dvpipe.models.om import _aipp_differences

    want, model = _want_and_model(**batch_changes)
    model.update(model_changes)
    got = _aipp_differences(model, want)
    assert sorted(line.split(":")[0] for line in got) == sorted(named), got


def test_static_aipp_comparison_of_an_rgb_input():
    """An RGB input's CSC is RGB -> YUV, with the output biases (ATC template: input_bias is for YUV -> RGB,
    output_bias for RGB -> YUV); keys the model's dict lacks are not compared (first_aipp_info leaves out what
    pyACL did not return)."""
    from dvpipe.models.om import _aipp_differences

    want, model = _want_and_model(input_format="RGB888_U8", crop=False, padding=False, load_start_pos_w=0,
                                  load_start_pos_h=0, crop_size_w=0, crop_size_h=0, right_padding_size=0,
                                  bottom_padding_size=0)
    assert _aipp_differences({**model, "input_bias_1": 0}, want) == []
    assert _aipp_differences({**model, "output_bias_1": 16}, want) == ["output_bias_1: model 16 vs batch 0"]
    assert _aipp_differences({**model, "input_format": "YUV420SP_U8"}, want) == \
        ["input_format: model YUV420SP_U8 vs batch RGB888_U8"]
    assert _aipp_differences({k: v for k, v in model.items() if not k.startswith(("mean_chn", "min_chn"))}, want) == []
