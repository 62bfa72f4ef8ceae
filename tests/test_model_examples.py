"""The model-hook examples in samples/: ONNX Runtime with I/O binding (no copy), torch_npu (compiled only).

The ONNX model is built here with ``onnx.helper`` (a per-camera, per-channel mean over the image,
``ReduceMean`` over H and W), so its expected output is a numpy mean of the batch.
"""
from __future__ import annotations

import ast
import importlib.util
import sys

import numpy as np
import pytest

import dvpipe as dv
from conftest import SAMPLES, encode_jpeg, rig_dict, textured_bgr
from tolerances import tol


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _mean_model(n: int, h: int, w: int) -> bytes:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("ReduceMean", ["img"], ["feat"], axes=[3, 4], keepdims=0)
    graph = helper.make_graph([node], "camera_means",
                              [helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, n, 3, h, w])],
                              [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, n, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # readable by every ONNX Runtime of the last years
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def batch_and_model():
    pytest.importorskip("onnxruntime")
    rig = dv.Rig.from_dict(rig_dict([(96, 64)] * 3))
    pipe = dv.Pipeline(rig, [dv.Decode(), dv.Normalise(mean=(100, 110, 120), std=(50, 60, 70), to_rgb=True),
                             dv.Pad(size_divisor=32)])
    frames = {c.name: encode_jpeg(textured_bgr(96, 64, seed=k)) for k, c in enumerate(rig)}
    batch = pipe.process(frames).keep()
    return batch, _mean_model(3, 64, 96)


def test_ort_model_output_is_the_model_of_the_batch(batch_and_model):
    batch, model = batch_and_model
    ort_model = _load("ort_model").OrtModel(model)
    out = ort_model(batch)
    assert out["feat"].shape == (1, 3, 3)
    assert np.allclose(out["feat"], np.asarray(batch.img, dtype=np.float64).mean(axis=(3, 4)), **tol("model_feature").allclose)


def test_ort_binding_reads_the_batch_buffer_in_place_and_writes_our_output(batch_and_model):
    batch, model = batch_and_model
    mod = _load("ort_model")
    session = mod.OrtModel(model).session
    img = batch.img
    assert np.shares_memory(img, batch.images)  # batch.img is a view of the pipeline's buffer, not a copy
    binding, outs = mod.bind_batch(session, img, "img")
    # change the buffer after binding: a copy made at binding would not see it (ONNX Runtime's
    # OrtIoBinding remarks), so seeing it in the output shows that ONNX Runtime read our memory
    saved = img.copy()
    img[...] = 0.0
    img[0, 1, 2] = 7.0
    try:
        session.run_with_iobinding(binding)
        got = binding.get_outputs()
        want = np.zeros((1, 3, 3), dtype=np.float32)
        want[0, 1, 2] = 7.0
        assert np.array_equal(outs["feat"], want)
        # the output is the array we allocated: ONNX Runtime wrote there, nothing was copied out
        assert got[0].data_ptr() == outs["feat"].ctypes.data
    finally:
        img[...] = saved


def test_ort_model_as_a_deployment_hook(tmp_path):
    pytest.importorskip("onnxruntime")
    from dvpipe.deploy import Runner, load_deployment
    from dvpipe.testing.deployments import synthetic_deployment

    d = synthetic_deployment(2, width=96, height=64, frames=3)
    (tmp_path / "m.onnx").write_bytes(_mean_model(2, 64, 96))
    d["model"] = {"entry": "ort_model:OrtModel", "path": str(SAMPLES), "init": {"path": str(tmp_path / "m.onnx")}}
    with Runner(load_deployment(d), write_outputs=False) as runner:
        seen = [(rb.batch.keep(), rb.output) for rb in runner.batches()]
    assert len(seen) == 3
    for batch, out in seen:
        assert np.allclose(out["feat"], np.asarray(batch.img, dtype=np.float64).mean(axis=(3, 4)), **tol("model_feature").allclose)


def test_npu_example_compiles_and_says_what_is_missing_here():
    src = (SAMPLES / "npu_model.py").read_text()
    compile(src, "npu_model.py", "exec")
    doc = ast.get_docstring(ast.parse(src))
    assert "Not run here" in doc
    mod = _load("npu_model")
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="needs torch and torch_npu"):
            mod.make_npu_model()
    else:  # pragma: no cover - an Ascend machine
        pytest.skip("torch_npu is installed: run the example on the device instead")

