"""Stage declarations and the kernel registry."""
from .base import FrameSpec, Stage
from .image import Batch, Crop, Decode, Normalise, Normalize, Pad, Resize, Transfer
from .registry import KernelContext, KernelQuery, Verdict, register_kernel

__all__ = ["Stage", "FrameSpec", "Decode", "Resize", "Crop", "Normalise", "Normalize", "Pad", "Transfer", "Batch",
           "Verdict", "KernelQuery", "KernelContext", "register_kernel"]
