"""The torch backend: one set of kernels for ``torch:cpu``, ``torch:cuda[:N]`` and ``torch:npu[:N]``.

This module is the family's entry (``FAMILIES["torch"]``): it imports torch (it is imported only when a
plan names a torch backend), says whether and why not a torch device can run here (:func:`available`,
:func:`environment`), and registers the kernels, which live by job under :mod:`dvpipe.backends._torch`.
``torch_npu`` and ``torchvision`` are imported on first need. When torch, the device or torch_npu is
missing, :func:`available` says so and why, and the planner moves on; without torch the kernels are still
registered (so support matrices list them) and each one's verdict is the same reason.

Kernels (all registered on family ``torch``):

``decode`` (:mod:`._torch.decode`)
    JPEG/PNG -> ``H x W x 3`` uint8 BGR with ``torchvision.io``: libjpeg-turbo on ``torch:cpu``, nvJPEG
    on ``torch:cuda`` (JPEG, fidelity ``fast``) with a counted per-frame CPU fallback.
``resize``, ``crop``, ``normalise``, ``pad``, ``batch`` and every run of them (:mod:`._torch.program`)
    One fused kernel (:data:`PIXEL_RUNS`): per-axis gathers with OpenCV's float64 weights, the channel
    reorder and HWC -> CHW on the column gather, one ``addcmul`` into the camera's batch slot. Takes host
    arrays, device tensors, HWC uint8/float or NV12.
``undistort`` (:mod:`._torch.undistort`)
    ``grid_sample`` on the camera's grid from OpenCV's float maps.
``transfer`` (:mod:`._torch.transfer`)
    Host <-> device copy as its own step (for the planner's transfer steps): pinned staging
    buffers reused across frames, ``non_blocking`` copy, device events.

On accelerators each step runs on its own stream, after the default stream's queued work, and
synchronises before returning; its device spans (:class:`dvpipe.latency.clock.DeviceSpan`:
``name, enqueue_ns, sync_ns, device_duration_ns``, unit ``cuda``/``npu``) go to ``ctx.device_spans``
(``upload`` for the host -> device copy inside a fused step, then the step's compute). Everything a step
needs across frames (staging, scratch, gather indices, events) lives in ``ctx.state``
(:mod:`._torch.device`): after the first frame set no memory is allocated per frame.
"""
from __future__ import annotations

import importlib
from typing import Any, Iterator, Optional

try:
    import torch
    _TORCH_ERROR: Optional[str] = None
except ImportError as _e:  # the module still imports, so available() can say why
    torch = None  # type: ignore[assignment]
    _TORCH_ERROR = f"{type(_e).__name__}: {_e}"

from .._optional import why_unavailable
from ..errors import MissingDependencyError
from ..stages.kernel_registry import KernelQuery, KernelVerdict, fused_runs, register_kernel

__all__ = ["available", "allocate_output", "environment", "decode_jpeg_batch", "PIXEL_RUNS"]

_NPU_HINT = ("pip install 'dvpipe[npu]' (torch-npu matching your torch) on a machine with the CANN toolkit, "
             "then source <CANN>/set_env.sh")


# -- availability ----------------------------------------------------------------------------------
def _torch_missing() -> str:
    return f"torch is not installed ({_TORCH_ERROR}); pip install 'dvpipe[torch]'"


def _device_index(device: str) -> int:
    """The ``N`` of ``KIND:N`` (0 without one); ValueError when it is not a whole number (a negative one is
    returned: the caller refuses it)."""
    parts = device.split(":")
    return int(parts[1]) if len(parts) > 1 and parts[1] else 0


def available(ref, target=None) -> KernelVerdict:
    """Whether ``ref`` (``torch:cpu``, ``torch:cuda[:N]``, ``torch:npu[:N]``) can run here, and why not."""
    if torch is None:
        return KernelVerdict("unavailable", _torch_missing())
    kind = ref.device.split(":")[0]
    if kind == "cpu":  # torch accepts "cpu:N" but has one CPU device: an index there is a mistake
        return KernelVerdict.yes() if ref.device == "cpu" else KernelVerdict(
            "unavailable", f"{ref.name!r}: the CPU takes no device index; use torch:cpu")
    bad = KernelVerdict("unavailable", f"bad device index in {ref.name!r}; use {kind} or {kind}:N (N from 0)")
    try:
        index = _device_index(ref.device)
    except ValueError:
        return bad
    if index < 0:
        return bad
    if kind == "cuda":
        if not torch.cuda.is_available():
            if torch.version.cuda is None:
                why = (f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None); "
                       "install a CUDA wheel of torch")
            else:
                why = (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device: "
                       "torch.cuda.is_available() is False (no GPU, driver missing or too old, or CUDA_VISIBLE_DEVICES hides it)")
            return KernelVerdict("unavailable", why)
        count = torch.cuda.device_count()
        if index >= count:
            return KernelVerdict("unavailable", f"{ref.name} asked for, but torch sees {count} CUDA device(s)")
        return KernelVerdict.yes()
    if kind == "npu":
        missing = why_unavailable("torch_npu")
        if missing is not None:
            return KernelVerdict("unavailable", f"torch_npu cannot be imported ({missing}); {_NPU_HINT}")
        npu = torch.npu  # type: ignore[attr-defined]  # registered on torch by importing torch_npu
        if not npu.is_available():
            return KernelVerdict("unavailable", "torch_npu is installed but torch.npu.is_available() is False "
                                                "(no Ascend device visible: driver, ASCEND_RT_VISIBLE_DEVICES, or set_env.sh not sourced)")
        count = npu.device_count()
        if index >= count:
            return KernelVerdict("unavailable", f"{ref.name} asked for, but torch_npu sees {count} NPU(s)")
        return KernelVerdict.yes()
    return KernelVerdict("unavailable", f"unknown torch device {ref.device!r}")


def environment() -> dict:
    """What the torch backend finds on this machine, each missing piece with its reason (for probes).

    Keys: ``torch``, ``torchvision``, ``cuda``, ``npu`` (each ``{"ok": bool, "version"/"devices"..., "reason"}``).
    """
    from . import BackendRef

    def row(v: KernelVerdict, **extra) -> dict:
        return {"ok": v.ok, "reason": v.reason, **extra}

    env: dict[str, Any] = {}
    if torch is None:
        env["torch"] = {"ok": False, "reason": _torch_missing()}
        return env
    env["torch"] = {"ok": True, "version": torch.__version__, "reason": ""}
    from ._torch.decode import torchvision_error

    tv = torchvision_error()
    env["torchvision"] = {"ok": tv is None, "reason": tv or ""}
    cuda = available(BackendRef("torch:cuda", "torch", "cuda"))
    env["cuda"] = row(cuda, devices=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                      if cuda.ok else [], cuda_version=torch.version.cuda)
    env["npu"] = row(available(BackendRef("torch:npu", "torch", "npu")))
    return env


def allocate_output(ref, shape: tuple, dtype: str):
    """The ``(N, 3, H, W)`` batch buffer: a zeroed torch tensor on the backend's device."""
    from ._torch.device import resolve_device, torch_dtype

    return torch.zeros(tuple(shape), dtype=torch_dtype(dtype), device=resolve_device(ref.device))


def decode_jpeg_batch(frames: list[bytes], device: str = "cuda") -> list:
    """Decode several JPEGs in one ``torchvision.io.decode_jpeg`` call (nvJPEG batched decode on CUDA).

    Returns ``3 x H x W`` RGB uint8 tensors. Used by ``tools/bench/gpu.py`` to compare batched
    with per-camera decode; the pipeline decodes each camera as its own job on its worker threads.
    """
    if torch is None:
        raise MissingDependencyError(_torch_missing())
    from ._torch.decode import decode_jpeg_batch as batched

    return batched(frames, device)


# -- registration ----------------------------------------------------------------------------------
#: the pixel kernel's runs: resize, crop and normalise in any order (each at most once), then pad, batch
PIXEL_RUNS = fused_runs(any_order=("resize", "crop", "normalise"), then=("pad", "batch"))


def _kernels() -> Iterator[tuple[tuple[str, ...], str, str]]:
    """``(op run, kernel name, job module under ._torch)`` of every torch kernel; each module has
    ``supports(query) -> KernelVerdict`` and ``kernel(data, stages, ctx)``."""
    yield ("decode",), "torchvision.decode", "decode"
    for ops in PIXEL_RUNS:
        yield ops, "torch_" + ("fused_" if len(ops) > 1 else "") + "_".join(ops), "program"
    yield ("undistort",), "torch_grid_sample", "undistort"
    yield ("transfer",), "torch_transfer", "transfer"


def _no_torch(q: KernelQuery) -> KernelVerdict:
    return KernelVerdict.no(_torch_missing())


def _not_run(data, stages, ctx) -> Any:  # never called: its verdict is always no
    raise MissingDependencyError(_torch_missing())


for _ops, _name, _job in _kernels():
    if torch is None:  # the same kernels, each saying why it cannot run
        register_kernel(_ops, backend="torch", supports=_no_torch, unit="torch", name=_name)(_not_run)
    else:
        _module = importlib.import_module(f"{__package__}._torch.{_job}")
        register_kernel(_ops, backend="torch", supports=_module.supports, unit="torch", name=_name)(_module.kernel)
