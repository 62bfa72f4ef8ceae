"""dvpipe: multi-camera image and video preprocessing off the CPU critical path.

Public API only; importing dvpipe never imports torch, torch_npu or acl.
"""
from ._version import __version__
from .errors import (BackendUnavailable, ClosedError, ConfigError, CorruptFrameError, DvpipeError, FrameError,
                     MissingDependencyError, PlanError, StaleBatchError)
from .pipeline import Pipeline
from .planner import Plan
from .profiles import PROFILES, profile_stages, register_profile
from .stages import (Batch, Crop, Decode, FrameData, FrameSpec, KernelContext, KernelFn, KernelQuery, KernelVerdict,
                     Normalise, Normalize, Pad, Resize, Stage, Undistort, register_kernel, register_stage,
                     registered_stages)
from .target import Target
from .types import Camera, Frame, FrameBatch, PixelFormat, Rig

__all__ = [
    "__version__", "Pipeline", "Plan", "Target", "Rig", "Camera", "Frame", "FrameBatch", "PixelFormat",
    "Stage", "FrameSpec", "Decode", "Resize", "Crop", "Normalise", "Normalize", "Pad", "Batch", "Undistort",
    "KernelVerdict", "KernelQuery", "KernelContext", "KernelFn", "FrameData", "register_kernel", "register_stage",
    "registered_stages",
    "PROFILES", "profile_stages", "register_profile",
    "DvpipeError", "ConfigError", "FrameError", "CorruptFrameError", "StaleBatchError", "PlanError",
    "BackendUnavailable", "MissingDependencyError", "ClosedError",
    "load_deployment", "Runner", "register_source", "register_exporter", "probe", "latency",
]

_LAZY = {"load_deployment": ("dvpipe.deploy", "load_deployment"), "Runner": ("dvpipe.deploy", "Runner"),
         "register_source": ("dvpipe.deploy.sources", "register_source"),
         "register_exporter": ("dvpipe.deploy.exporters", "register_exporter"),
         "probe": ("dvpipe.probe", None), "latency": ("dvpipe.latency", None)}


def __getattr__(name: str):
    """``dvpipe.load_deployment``, ``dvpipe.Runner``, ``dvpipe.register_source``, ``dvpipe.probe``,
    ``dvpipe.latency``, imported on first use; any registered stage class by its name (``dvpipe.Gamma``
    once a user module registered it with :func:`register_stage`)."""
    if name not in _LAZY:
        for info in registered_stages().values():
            if info.cls.__name__ == name:
                return info.cls
        raise AttributeError(f"module 'dvpipe' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    mod = importlib.import_module(module)
    return mod if attr is None else getattr(mod, attr)
