"""Stage declarations, the stage registry and the kernel registry.

The built-in stages are imported here (importing registers them); any registered stage, built-in or a
user's, is also reachable as ``dvpipe.stages.<ClassName>`` through :func:`registered_stages`.
"""
from .base import FrameSpec, Stage, camera_matrix_of, matrix_of, output_spec_of
from .stage_registry import StageInfo, kernels_by_backend, register_stage, registered_stages, stage_class
from .image import Batch, Crop, Decode, Normalise, Normalize, Pad, Resize, Transfer
from .camera import Undistort
from .kernel_registry import (FrameData, KernelContext, KernelFn, KernelQuery, KernelVerdict, fused_runs,
                              register_kernel)

__all__ = ["Stage", "FrameSpec", "Decode", "Resize", "Crop", "Normalise", "Normalize", "Pad", "Transfer", "Batch",
           "Undistort", "KernelVerdict", "KernelQuery", "KernelContext", "KernelFn", "FrameData", "register_kernel",
           "register_stage", "registered_stages", "stage_class", "kernels_by_backend", "StageInfo", "fused_runs",
           "output_spec_of", "matrix_of", "camera_matrix_of"]


def __getattr__(name: str):
    """A registered stage class by its class name (a user's stage registered after import)."""
    for info in registered_stages().values():
        if info.cls.__name__ == name:
            return info.cls
    raise AttributeError(f"module 'dvpipe.stages' has no attribute {name!r}")
