"""Model hook: an ONNX model run by ONNX Runtime on the batch's own buffer, with no copy.

``OrtModel(path)`` is a deployment model hook (``model: {entry: ort_model.py:OrtModel, init: {path:
model.onnx}}``) and a plain callable (``OrtModel(path)(batch)``). Each call binds the batch's image
buffer to the model's first input through ONNX Runtime's I/O binding, by address
(``io_binding().bind_input(name, "cpu", 0, element_type, shape, buffer_ptr)``), and binds every
output to a fresh numpy array the same way, so ONNX Runtime reads the pipeline's output ring and
writes the caller's arrays directly:

* ``batch.img`` is ``(1, N, 3, H, W)`` (float32 or float16, channels as the pipeline's Normalise
  put them), a view of the pipeline's buffer, C-contiguous; no array is made from it.
* ONNX Runtime's documentation: I/O binding places inputs and outputs where the caller says, and a
  bound buffer of the expected device is used as it is; a copy, where one is needed, is made once
  when binding, after which "further input modifications would not be seen" (ONNX Runtime, "I/O
  Binding", onnxruntime.ai/docs/performance/tune-performance/iobinding.html; Python API summary,
  onnxruntime.ai/docs/api/python/api_summary.html, IOBinding scenario 2; C# ``OrtIoBinding`` remarks,
  onnxruntime.ai/docs/api/csharp/api/Microsoft.ML.OnnxRuntime.OrtIoBinding.html). The test
  (tests/test_model_examples.py) changes the buffer after binding and sees the change in the output:
  no copy was made.
* The batch's buffer is reused by the pipeline ``output_buffers`` frame sets later: the hook runs
  before that (the runner's model thread finishes a set before the next but one is written), and a
  caller that holds a batch longer calls ``batch.keep()`` first.

Outputs: ``{output name: np.ndarray}``, owned by the caller. With ``providers=["CANNExecutionProvider",
...]`` (ONNX Runtime built with CANN) the same code runs on Ascend; that has not been tried here.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["OrtModel", "bind_batch"]

# ONNX tensor element types (onnx.TensorProto) -> numpy, for outputs
_ONNX_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
               "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def _host_array(img: Any) -> np.ndarray:
    """The batch image as a numpy view (a CPU torch tensor is viewed, not copied)."""
    if hasattr(img, "numpy") and not isinstance(img, np.ndarray):
        if getattr(img, "device", None) is not None and str(img.device) != "cpu":
            raise ValueError(f"OrtModel binds host memory; the batch is on {img.device} (bind it with device_type "
                             "'cuda' and img.data_ptr() instead, or plan the pipeline to end on the CPU)")
        img = img.numpy()
    if not isinstance(img, np.ndarray) or not img.flags.c_contiguous:
        raise ValueError("OrtModel needs the batch image as a C-contiguous numpy array or CPU tensor")
    return img


def bind_batch(session: Any, img: np.ndarray, input_name: str) -> tuple[Any, dict[str, np.ndarray]]:
    """An I/O binding of ``img`` (by address, no copy) to ``input_name`` and of each output to a new
    array (static output shapes) or to ONNX Runtime's own memory (dynamic ones). Returns
    ``(binding, {name: array or None})``."""
    binding = session.io_binding()
    binding.bind_input(input_name, "cpu", 0, img.dtype.type, tuple(img.shape), img.ctypes.data)
    outs: dict[str, np.ndarray] = {}
    for o in session.get_outputs():
        if all(isinstance(d, int) for d in o.shape) and o.type in _ONNX_TYPES:
            arr = np.empty(tuple(o.shape), dtype=_ONNX_TYPES[o.type])
            binding.bind_output(o.name, "cpu", 0, arr.dtype.type, arr.shape, arr.ctypes.data)
            outs[o.name] = arr
        else:
            binding.bind_output(o.name, "cpu")
            outs[o.name] = None
    return binding, outs


class OrtModel:
    """An ONNX model whose first (or ``input_name``) input takes ``batch.img``.

    Args:
        path: the ``.onnx`` file, or its bytes.
        input_name: the model input the batch image binds to (default: the first).
        providers: ONNX Runtime execution providers, in preference order.
    """

    def __init__(self, path: "str | bytes", input_name: str | None = None,
                 providers: Sequence[str] = ("CPUExecutionProvider",)):
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise ImportError(f"OrtModel needs onnxruntime (pip install onnxruntime): {e}") from None
        self.session = ort.InferenceSession(path, providers=list(providers))
        self.input_name = input_name or self.session.get_inputs()[0].name

    def __call__(self, batch: Any) -> dict[str, np.ndarray]:
        img = _host_array(batch.img if hasattr(batch, "img") else batch)
        binding, outs = bind_batch(self.session, img, self.input_name)
        self.session.run_with_iobinding(binding)
        got = binding.get_outputs()
        return {name: (arr if arr is not None else got[i].numpy()) for i, (name, arr) in enumerate(outs.items())}
