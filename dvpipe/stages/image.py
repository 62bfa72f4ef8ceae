"""Built-in stage declarations: Decode, Resize, Crop, Normalise, Pad, Batch.

All are frozen dataclasses validated at construction; errors say what is allowed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional, Sequence

import numpy as np

from .. import geometry
from ..errors import ConfigError
from ..types import Camera, PixelFormat
from .base import FrameSpec, Stage
from .stage_registry import register_stage

__all__ = ["Decode", "Resize", "Crop", "Normalise", "Normalize", "Pad", "Transfer", "Batch", "INTERPOLATIONS", "DTYPES"]

INTERPOLATIONS = ("linear", "area", "nearest", "pil_bicubic")
DTYPES = ("float32", "float16")


def _positive_int(value, name: str, stage: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ConfigError(f"{stage}: {name} must be a positive integer, got {value!r}")
    return int(value)


def _require_pixels(spec: FrameSpec, stage: str) -> None:
    if spec.pixel_format is PixelFormat.ENCODED:
        raise ConfigError(f"{stage} needs decoded pixels but gets encoded {spec.encoding or 'data'}; put Decode() first")
    if spec.pixel_format is PixelFormat.CHW:
        raise ConfigError(f"{stage} cannot follow Batch(); Batch must be the last stage")


@register_stage("decode")
@dataclass(frozen=True)
class Decode(Stage):
    """Decode encoded frames (JPEG baseline/progressive, any chroma subsampling or grayscale; PNG)
    to HxWx3 uint8 **BGR**. Raw HxWx3 uint8 BGR arrays pass through (validated).

    Grayscale sources are expanded to three equal channels. EXIF orientation is ignored (as
    ``cv2.imread(..., IMREAD_UNCHANGED)`` in mmcv does), so pixels stay in sensor order and the
    calibration stays valid.
    """

    op: ClassVar[str] = "decode"

    def output_spec(self, spec: FrameSpec, camera: Optional[Camera] = None) -> FrameSpec:
        if spec.pixel_format not in (PixelFormat.ENCODED, PixelFormat.BGR):
            raise ConfigError(f"Decode takes encoded frames or BGR arrays, got {spec.pixel_format.value}")
        return spec.with_(pixel_format=PixelFormat.BGR, dtype="uint8", channel_order="bgr", encoding="")

    def describe(self) -> str:
        return "decode"


@register_stage("resize")
@dataclass(frozen=True)
class Resize(Stage):
    """Resize to a target ``size=(height, width)`` or by ``scale`` (or ``scale=(sx, sy)``).

    Args:
        size: output ``(height, width)`` in pixels.
        scale: factor; the output ``(height, width)`` is ``(int(H * sy), int(W * sx))`` (truncation, as mmcv).
        interpolation: ``linear`` = OpenCV ``INTER_LINEAR`` (bilinear, half-pixel centres, no
            antialias; exactly the 2x2 mean for a 0.5 scale), ``area`` = ``INTER_AREA``,
            ``nearest`` = ``INTER_NEAREST`` (source index ``min(floor(x * (1 / (W'/W))), W - 1)`` in double, as
            OpenCV computes it), ``pil_bicubic`` =
            Pillow's ``Image.resize(size)`` default (bicubic, antialiased, fixed-point, rounded to
            uint8 after each pass; what PETR's ``ResizeCropFlipImage`` and BEVDet's loader call):
            uint8 input only, bit-identical to Pillow on the ``cpu`` and ``reference`` backends.
        geometry: ``exact`` reports the true pixel mapping ``diag(W'/W, H'/H)``; ``nominal`` reports
            ``diag(sx, sy)`` as mmdet3d/BEVFormer do for ``lidar2img`` (the two differ only when
            ``W * s`` is not an integer, by under one output pixel at the far edge).
    """

    op: ClassVar[str] = "resize"
    size: Optional[tuple[int, int]] = None
    scale: Optional[float | tuple[float, float]] = None
    interpolation: str = "linear"
    geometry: str = "exact"

    def __post_init__(self) -> None:
        if (self.size is None) == (self.scale is None):
            raise ConfigError("Resize needs exactly one of size=(height, width) or scale=factor")
        if self.size is not None:
            if not isinstance(self.size, Sequence) or len(self.size) != 2:
                raise ConfigError(f"Resize.size must be (height, width), got {self.size!r}")
            object.__setattr__(self, "size", tuple(_positive_int(v, "size", "Resize") for v in self.size))
        if self.scale is not None:
            sc = self.scale if isinstance(self.scale, Sequence) else (self.scale, self.scale)
            if len(sc) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 64 for v in sc):
                raise ConfigError(f"Resize.scale must be a factor in (0, 64) or a pair (sx, sy), got {self.scale!r}")
            object.__setattr__(self, "scale", float(sc[0]) if sc[0] == sc[1] else (float(sc[0]), float(sc[1])))
        if self.interpolation not in INTERPOLATIONS:
            raise ConfigError(f"Resize.interpolation {self.interpolation!r} is not one of {', '.join(INTERPOLATIONS)}")
        if self.geometry not in ("exact", "nominal"):
            raise ConfigError(f"Resize.geometry must be 'exact' or 'nominal', got {self.geometry!r}")
        if self.geometry == "nominal" and self.scale is None:
            raise ConfigError("Resize.geometry='nominal' needs scale=, not size=")

    @property
    def scale_xy(self) -> Optional[tuple[float, float]]:
        if self.scale is None:
            return None
        return self.scale if isinstance(self.scale, tuple) else (self.scale, self.scale)

    def out_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """Output ``(height, width)`` in pixels for an input of ``size`` ``(height, width)``."""
        if self.size is not None:
            return self.size[0], self.size[1]
        assert self.scale_xy is not None  # __post_init__: size or scale
        sx, sy = self.scale_xy
        return geometry.scaled_size(size, sy)[0], geometry.scaled_size(size, sx)[1]

    def output_spec(self, spec: FrameSpec, camera: Optional[Camera] = None) -> FrameSpec:
        _require_pixels(spec, "Resize")
        if self.interpolation == "pil_bicubic" and spec.dtype != "uint8":
            raise ConfigError(f"Resize(interpolation='pil_bicubic') takes uint8 pixels, got {spec.dtype}; "
                              "put it before Normalise")
        h, w = self.out_size(spec.size)
        return spec.with_(width=w, height=h)

    def matrix(self, spec: FrameSpec, camera: Optional[Camera] = None) -> np.ndarray:
        if self.geometry == "nominal":
            assert self.scale_xy is not None  # __post_init__: nominal needs scale
            return geometry.scale_matrix(*self.scale_xy)
        return geometry.resize_matrix(spec.size, self.out_size(spec.size))

    def describe(self) -> str:
        what = f"{self.size[1]}x{self.size[0]}" if self.size else f"x{self.scale}"
        return f"resize {what} {self.interpolation}"


@register_stage("crop")
@dataclass(frozen=True)
class Crop(Stage):
    """Keep the ``width x height`` window whose top-left pixel is (``left``, ``top``)."""

    op: ClassVar[str] = "crop"
    left: int = 0
    top: int = 0
    width: int = 1
    height: int = 1

    def __post_init__(self) -> None:
        for k in ("left", "top"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ConfigError(f"Crop.{k} must be a non-negative integer, got {v!r}")
        _positive_int(self.width, "width", "Crop")
        _positive_int(self.height, "height", "Crop")

    def output_spec(self, spec: FrameSpec, camera: Optional[Camera] = None) -> FrameSpec:
        _require_pixels(spec, "Crop")
        if self.left + self.width > spec.width or self.top + self.height > spec.height:
            raise ConfigError(
                f"Crop window {self.width}x{self.height} at ({self.left}, {self.top}) does not fit a "
                f"{spec.width}x{spec.height} image")
        return spec.with_(width=self.width, height=self.height)

    def matrix(self, spec: FrameSpec, camera: Optional[Camera] = None) -> np.ndarray:
        return geometry.crop_matrix(self.left, self.top)

    def describe(self) -> str:
        return f"crop {self.width}x{self.height}+{self.left}+{self.top}"


@register_stage("normalise", yaml=("normalise", "normalize"))
@dataclass(frozen=True)
class Normalise(Stage):
    """``out[c] = (in[c] - mean[c]) / std[c]`` per channel, as float.

    Args:
        mean: three values in 0..255 units, **in the output channel order**.
        std: three positive values, output channel order.
        to_rgb: swap BGR -> RGB before normalising (input is BGR after Decode).
        dtype: ``float32`` or ``float16``.
    """

    op: ClassVar[str] = "normalise"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    to_rgb: bool = False
    dtype: str = "float32"

    def __post_init__(self) -> None:
        for k in ("mean", "std"):
            v = getattr(self, k)
            try:
                t = tuple(float(x) for x in v)
            except (TypeError, ValueError):
                raise ConfigError(f"Normalise.{k} must be three numbers, got {v!r}") from None
            if len(t) != 3 or not all(math.isfinite(x) for x in t):
                raise ConfigError(f"Normalise.{k} must be three finite numbers, got {v!r}")
            object.__setattr__(self, k, t)
        if any(s <= 0 for s in self.std):
            raise ConfigError(f"Normalise.std must be positive, got {self.std}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"Normalise.dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")

    def output_spec(self, spec: FrameSpec, camera: Optional[Camera] = None) -> FrameSpec:
        _require_pixels(spec, "Normalise")
        if spec.pixel_format is PixelFormat.FLOAT_HWC:
            raise ConfigError("Normalise applied twice")
        order = spec.channel_order
        if self.to_rgb:
            if order != "bgr":
                raise ConfigError(f"Normalise(to_rgb=True) expects BGR input, got {order}")
            order = "rgb"
        return spec.with_(pixel_format=PixelFormat.FLOAT_HWC, dtype=self.dtype, channel_order=order)

    def describe(self) -> str:
        return f"normalise{' to_rgb' if self.to_rgb else ''} {self.dtype}"


#: US spelling, kept as an alias.
Normalize = Normalise


@register_stage("pad")
@dataclass(frozen=True)
class Pad(Stage):
    """Pad at the bottom and right to a multiple of ``size_divisor`` or to ``size=(height, width)``.

    ``value`` is written as is into the output (output space): after Normalise, ``value=0`` is the
    mean colour, as mmcv's ``impad_to_multiple`` after ``imnormalize`` gives.
    """

    op: ClassVar[str] = "pad"
    size_divisor: Optional[int] = None
    size: Optional[tuple[int, int]] = None
    value: float = 0.0

    def __post_init__(self) -> None:
        if (self.size_divisor is None) == (self.size is None):
            raise ConfigError("Pad needs exactly one of size_divisor=n or size=(height, width)")
        if self.size_divisor is not None:
            _positive_int(self.size_divisor, "size_divisor", "Pad")
        if self.size is not None:
            if not isinstance(self.size, Sequence) or len(self.size) != 2:
                raise ConfigError(f"Pad.size must be (height, width), got {self.size!r}")
            object.__setattr__(self, "size", tuple(_positive_int(v, "size", "Pad") for v in self.size))
        if not isinstance(self.value, (int, float)) or isinstance(self.value, bool):
            raise ConfigError(f"Pad.value must be a number, got {self.value!r}")

    def padded_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """Output ``(height, width)`` in pixels for an input of ``size`` ``(height, width)``."""
        if self.size_divisor is not None:
            d = self.size_divisor
            return -(-size[0] // d) * d, -(-size[1] // d) * d
        assert self.size is not None  # __post_init__: size or size_divisor
        return self.size[0], self.size[1]

    def output_spec(self, spec: FrameSpec, camera: Optional[Camera] = None) -> FrameSpec:
        _require_pixels(spec, "Pad")
        if spec.dtype == "uint8" and not (float(self.value).is_integer() and 0 <= self.value <= 255):
            # every backend would store it differently (saturate, wrap, truncate): refuse it for all
            raise ConfigError(f"Pad.value {self.value!r} cannot be stored in uint8 pixels (integers 0..255): use a value "
                              "in 0..255, or pad after normalise (float output)")
        h, w = self.padded_size(spec.size)
        if w < spec.width or h < spec.height:
            raise ConfigError(f"Pad.size {h}x{w} (HxW) is smaller than the {spec.height}x{spec.width} image")
        return spec.with_(width=w, height=h)

    def describe(self) -> str:
        if self.size_divisor:
            return f"pad /{self.size_divisor}"
        assert self.size is not None  # __post_init__: size or size_divisor
        return f"pad {self.size[1]}x{self.size[0]}"


@register_stage("transfer", yaml=())
@dataclass(frozen=True)
class Transfer(Stage):
    """Move the frame between host memory and a device (``placement``: ``host``, ``cuda:0``, ``npu:0``;
    from ``dvpp-sim:0`` / ``dvpp-hw:0`` to ``host``: DVPP's download + NV12 -> BGR on the host).

    Inserted by the planner wherever consecutive steps live in different memory domains, so that
    every copy is a timed step of its own, with its bytes (docs/device_path.md); one in a user's stage
    list is dropped (the planner places its own).
    """

    op: ClassVar[str] = "transfer"
    placement: str = "host"

    def output_spec(self, spec: FrameSpec, camera: Optional[Camera] = None) -> FrameSpec:
        return spec.with_(placement=self.placement)

    def describe(self) -> str:
        return f"transfer to {self.placement}"


@register_stage("batch")
@dataclass(frozen=True)
class Batch(Stage):
    """Write each camera's image as CHW into the ``(N, 3, H, W)`` batch, in rig order. Must be last.

    Args:
        layout: ``NCHW``.
        device: where ``batch.images`` is handed over: None (as the plan's last step produced it: a
            numpy array for host backends), or a torch device as ``torch:cpu`` (``torch.from_numpy``,
            no copy), ``torch:cuda[:N]`` or ``torch:npu[:N]`` (one timed host-to-device copy into a
            reused device buffer when the batch was written on the host).
    """

    op: ClassVar[str] = "batch"
    layout: str = "NCHW"
    device: Optional[str] = None

    def __post_init__(self) -> None:
        if self.layout != "NCHW":
            raise ConfigError(f"Batch.layout {self.layout!r} is not supported; allowed: NCHW")
        if self.device is not None and not (isinstance(self.device, str) and self.device.startswith("torch:")
                                            and self.device.split(":")[1] in ("cpu", "cuda", "npu")):
            raise ConfigError(f"Batch.device must be None or torch:cpu, torch:cuda[:N], torch:npu[:N]; "
                              f"got {self.device!r}")

    def output_spec(self, spec: FrameSpec, camera: Optional[Camera] = None) -> FrameSpec:
        _require_pixels(spec, "Batch")
        if spec.channel_order == "gray":
            raise ConfigError("Batch needs 3-channel images")
        return spec.with_(pixel_format=PixelFormat.CHW)
