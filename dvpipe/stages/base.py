"""What a stage is: a frozen declaration that can say what it does to a frame without running.

A stage knows three things:

* ``op`` — the name kernels are registered under (``"resize"``);
* :meth:`Stage.output_spec` — the :class:`FrameSpec` it produces from an input spec (size, pixel
  format, dtype, colour order), raising :class:`~dvpipe.errors.ConfigError` when the input is not
  something it can take;
* :meth:`Stage.matrix` — the 3x3 image-plane transform it applies (identity for photometric stages).

Kernels (the code that runs a stage on a backend) live in :mod:`dvpipe.stages.registry` and the
backends; a stage never names a backend.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from ..types import PixelFormat

__all__ = ["Stage", "FrameSpec"]


@dataclass(frozen=True)
class FrameSpec:
    """What a frame looks like between two steps, known at plan time.

    Attributes:
        width: pixels.
        height: pixels.
        pixel_format: what the data holds (encoded bytes, BGR uint8, float HWC, ...).
        dtype: numpy dtype name of the pixel data (``uint8``, ``float32``, ``float16``).
        channel_order: ``bgr``, ``rgb`` or ``gray`` (``""`` for encoded data).
        encoding: for encoded data, the camera's encoding (``jpeg``, ``png``, ``h264``...).
        placement: where the data lives: ``host``, or a device name (``cuda:0``, ``npu:0``, ``dvpp``).
    """

    width: int
    height: int
    pixel_format: PixelFormat
    dtype: str = "uint8"
    channel_order: str = "bgr"
    encoding: str = ""
    placement: str = "host"

    def with_(self, **changes) -> "FrameSpec":
        return replace(self, **changes)

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` in pixels."""
        return self.width, self.height

    def __str__(self) -> str:
        what = self.encoding if self.pixel_format is PixelFormat.ENCODED else f"{self.pixel_format.value}/{self.dtype}"
        return f"{self.width}x{self.height} {what}"


@dataclass(frozen=True)
class Stage:
    """Base of every stage declaration (built-in or user-defined).

    A user stage is a frozen dataclass deriving from ``Stage`` with a class attribute ``op`` and,
    if it changes the frame's size or format, an ``output_spec`` (and ``matrix`` if it moves pixels).
    """

    op: ClassVar[str] = ""

    def output_spec(self, spec: FrameSpec) -> FrameSpec:
        """The spec this stage produces from ``spec``. Default: unchanged."""
        return spec

    def matrix(self, spec: FrameSpec) -> np.ndarray:
        """3x3 map from input to output pixel coordinates for an input of ``spec``. Default: identity."""
        return np.eye(3)

    def describe(self) -> str:
        """Short human description for plan tables."""
        return self.op
