"""What a stage is: a frozen declaration that can say what it does to a frame without running.

A stage knows three things:

* ``op`` — the name kernels are registered under (``"resize"``);
* :meth:`Stage.output_spec` ``(spec, camera)`` — the :class:`FrameSpec` it produces from an input spec
  (size, pixel format, dtype, colour order) for that camera, raising :class:`~dvpipe.errors.ConfigError`
  when the input is not something it can take;
* :meth:`Stage.matrix` ``(spec, camera)`` — the 3x3 image-plane transform it applies (identity for
  photometric stages);
* :meth:`Stage.camera_matrix` ``(spec, camera)`` — for a stage that re-projects the image (``Undistort``),
  the intrinsics K' of its output pixels; None (the default) for every stage that only moves pixels by
  ``matrix``.

Stages see the camera (its size, intrinsics and distortion), so one stage list can do per-camera work.
The planner and every other caller go through :func:`output_spec_of`, :func:`matrix_of` and
:func:`camera_matrix_of`, which still accept a user stage written for the old one-argument signature
(``output_spec(self, spec)``), with a :class:`DeprecationWarning` naming the class.

Kernels (the code that runs a stage on a backend) live in :mod:`dvpipe.stages.kernel_registry` and the
backends; a stage never names a backend.
"""
from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional

import numpy as np

from ..types import PixelFormat

if TYPE_CHECKING:
    from ..types import Camera

__all__ = ["Stage", "FrameSpec", "output_spec_of", "matrix_of", "camera_matrix_of"]


@dataclass(frozen=True)
class FrameSpec:
    """What a frame looks like between two steps, known at plan time:
    ``FrameSpec(width=1600, height=900, pixel_format=PixelFormat.BGR)``.

    ``width`` and ``height`` are keyword-only (the API's sizes are ``(height, width)``: :attr:`size`).

    Attributes:
        width: pixels (keyword-only).
        height: pixels (keyword-only).
        pixel_format: what the data holds (encoded bytes, BGR uint8, float HWC, ...).
        dtype: numpy dtype name of the pixel data (``uint8``, ``float32``, ``float16``).
        channel_order: ``bgr``, ``rgb`` or ``gray`` (``""`` for encoded data).
        encoding: for encoded data, the camera's encoding (``jpeg``, ``png``, ``h264``...).
        placement: where the data lives: ``host``, or a device name (``cuda:0``, ``npu:0``, ``dvpp``).
    """

    width: int = field(kw_only=True)
    height: int = field(kw_only=True)
    pixel_format: PixelFormat
    dtype: str = "uint8"
    channel_order: str = "bgr"
    encoding: str = ""
    placement: str = "host"

    def with_(self, **changes) -> "FrameSpec":
        return replace(self, **changes)

    @property
    def size(self) -> tuple[int, int]:
        """``(height, width)`` in pixels."""
        return self.height, self.width

    def __str__(self) -> str:
        what = self.encoding if self.pixel_format is PixelFormat.ENCODED else f"{self.pixel_format.value}/{self.dtype}"
        return f"{self.width}x{self.height} {what}"


@dataclass(frozen=True)
class Stage:
    """Base of every stage declaration (built-in or user-defined).

    A user stage is a frozen dataclass deriving from ``Stage``, registered with
    ``@dvpipe.register_stage("op")`` (which sets ``op`` and its YAML names) and, if it changes the
    frame's size or format, an ``output_spec`` (and ``matrix`` if it moves pixels). ``camera`` is the
    :class:`~dvpipe.types.Camera` whose frames the stage is planned for (None only where a caller plans
    without a rig, e.g. the AIPP derivation of a bare stage list).
    """

    op: ClassVar[str] = ""

    def output_spec(self, spec: FrameSpec, camera: "Optional[Camera]" = None) -> FrameSpec:
        """The spec this stage produces from ``spec`` for ``camera``. Default: unchanged."""
        return spec

    def matrix(self, spec: FrameSpec, camera: "Optional[Camera]" = None) -> np.ndarray:
        """3x3 map from input to output pixel coordinates (pixel convention of :mod:`dvpipe.geometry`)
        for an input of ``spec``. Default: identity."""
        return np.eye(3)

    def camera_matrix(self, spec: FrameSpec, camera: "Optional[Camera]" = None) -> Optional[np.ndarray]:
        """The 3x3 intrinsics K' of this stage's *output* pixels when the stage re-projects the image
        (the output pixel of a camera-frame point ``X`` is ``K' X``, whatever came before); None (default)
        when the stage only moves pixels by :meth:`matrix`. The planner restarts the camera's ``img_aug``
        at such a stage and derives ``cam2img`` / ``lidar2img`` from K' instead of the rig's K."""
        return None

    def describe(self) -> str:
        """Short human description for plan tables."""
        return self.op


_ONE_ARG: dict[tuple[type, str], bool] = {}


def _takes_camera(stage: Stage, name: str) -> bool:
    """Whether ``type(stage).<name>`` accepts ``(spec, camera)``; warns once per class when it does not."""
    key = (type(stage), name)
    if key not in _ONE_ARG:
        fn = getattr(type(stage), name)
        try:
            params = list(inspect.signature(fn).parameters.values())[1:]  # drop self
        except (TypeError, ValueError):
            params = []
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        takes = len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)
        _ONE_ARG[key] = takes
        if not takes:
            warnings.warn(f"{type(stage).__qualname__}.{name}(self, spec) is deprecated: define "
                          f"{name}(self, spec, camera) (dvpipe passes the camera the stage is planned for)",
                          DeprecationWarning, stacklevel=3)
    return _ONE_ARG[key]


def _call(stage: Stage, name: str, spec: FrameSpec, camera: "Optional[Camera]") -> Any:
    fn: Callable = getattr(stage, name)
    return fn(spec, camera) if _takes_camera(stage, name) else fn(spec)


def output_spec_of(stage: Stage, spec: FrameSpec, camera: "Optional[Camera]") -> FrameSpec:
    """``stage.output_spec(spec, camera)``, or ``stage.output_spec(spec)`` for an old one-argument stage."""
    return _call(stage, "output_spec", spec, camera)


def matrix_of(stage: Stage, spec: FrameSpec, camera: "Optional[Camera]") -> np.ndarray:
    """``stage.matrix(spec, camera)`` (3x3), or ``stage.matrix(spec)`` for an old one-argument stage."""
    return np.asarray(_call(stage, "matrix", spec, camera), dtype=np.float64)


def camera_matrix_of(stage: Stage, spec: FrameSpec, camera: "Optional[Camera]") -> Optional[np.ndarray]:
    """``stage.camera_matrix(spec, camera)``: the intrinsics K' of the stage's output, or None."""
    fn = getattr(stage, "camera_matrix", None)
    if fn is None:
        return None
    k = _call(stage, "camera_matrix", spec, camera)
    return None if k is None else np.asarray(k, dtype=np.float64)
