"""Model hook on an Ascend NPU through torch_npu: the pipeline's batch stays on the NPU.

**Not run here.** This project has no Ascend hardware and no torch_npu; the test suite only checks
that this file compiles and that, without torch_npu, :func:`make_npu_model` says what is missing.
It follows the documented torch_npu usage (``import torch_npu`` registers the ``npu`` device with
torch; ``torch.npu.is_available()``, ``tensor.to("npu:0")``, ``torch.npu.synchronize()``).

The plan: preprocess with the torch backend on the same NPU (``backends=("torch:npu", "cpu")``: decode
on the CPU or DVPP, the fused crop/resize/normalise/pad step on the NPU), so ``batch.images`` is a
``torch.Tensor`` ``(N, 3, H, W)`` on ``npu:0`` and ``batch.img`` its ``(1, N, 3, H, W)`` view: the
model reads it where it is, with no host round trip. The model is the sample deployment's tiny BEV
network (``samples/bev_model.py``, :class:`TinyBEV`), moved to the NPU::

    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=("torch:npu", "cpu"))
    model = make_npu_model()
    out = model(pipe.process(frames))      # BEV logits, a torch tensor on npu:0

As a deployment hook: ``model: {entry: npu_model.py:make_npu_model, path: samples}`` with
``pipeline: {backends: [torch:npu, cpu]}``; the runner times the call as ``model``, and
:class:`NpuBEV` synchronises the NPU before returning so that the time is the model's.
"""
from __future__ import annotations

from typing import Any

__all__ = ["make_npu_model", "NpuBEV"]


def _require_npu():
    try:
        import torch
        import torch_npu  # noqa: F401 - registers the "npu" device with torch
    except ImportError as e:
        raise RuntimeError(f"the NPU example needs torch and torch_npu (installed with CANN's set_env.sh sourced): {e}") from None
    if not torch.npu.is_available():
        raise RuntimeError("torch_npu imports but torch.npu.is_available() is False: no visible Ascend device "
                           "(check npu-smi info and ASCEND_RT_VISIBLE_DEVICES)")
    return torch


class NpuBEV:
    """The tiny BEV model on ``device``; called with a batch whose images are on that device."""

    def __init__(self, device: str = "npu:0", seed: int = 0):
        torch = _require_npu()
        from bev_model import TinyBEV, make_weights  # samples/ on sys.path (the deployment's model.path)

        self.torch = torch
        self.device = torch.device(device)
        self.model = TinyBEV(make_weights(seed=seed)).to(self.device).eval()

    def __call__(self, batch: Any):
        img = batch.img
        if not isinstance(img, self.torch.Tensor) or img.device != self.device:
            raise RuntimeError(f"the batch is not on {self.device} (plan the pipeline with backends=('torch:npu', "
                               "'cpu') so that no host round trip is needed)")
        with self.torch.no_grad():
            out = self.model(img[0], batch.metas)
        self.torch.npu.synchronize()  # the runner times the call: let it cover the NPU work
        return out


def make_npu_model(device: str = "npu:0") -> NpuBEV:
    """The deployment hook: the model built once, on ``device``."""
    return NpuBEV(device)
