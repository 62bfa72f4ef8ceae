"""Raw camera frames (GMSL / V4L2): UYVY, YUYV and NV12 to HxWx3 uint8 BGR.

For these camera encodings the plan's ``decode`` step is a colour conversion. Layouts (tightly packed:
no row padding; V4L2's ``bytesperline`` must equal the row size given here):

* ``uyvy`` -- YUV 4:2:2 packed, V4L2_PIX_FMT_UYVY: each pair of pixels is 4 bytes ``U0 Y0 V0 Y1``;
  a frame is ``2 * W * H`` bytes, or a uint8 array of shape ``(H, W, 2)`` or ``(H, 2 * W)``. W even.
* ``yuyv`` -- YUV 4:2:2 packed, V4L2_PIX_FMT_YUYV (FourCC YUY2): ``Y0 U0 Y1 V0`` per pixel pair;
  same sizes and shapes as ``uyvy``.
* ``nv12`` -- YUV 4:2:0 semi-planar, V4L2_PIX_FMT_NV12: the Y plane (H rows of W bytes), then H/2 rows
  of W bytes interleaving ``U V`` for each 2x2 block; ``W * H * 3 / 2`` bytes, or a uint8 array of shape
  ``(H * 3 // 2, W)``. W and H even.

Colour: the Y'CbCr -> R'G'B' matrix and range are per camera, ``yuv_matrix`` (``bt601`` default, or
``bt709``) and ``yuv_range`` (``limited`` default: Y' in 16..235, Cb/Cr in 16..240; or ``full``: 0..255)
as keys of the camera in the rig file (kept in :attr:`dvpipe.Camera.extra`). BT.601 limited range is the
default because it is what V4L2 assumes for Y'CbCr when a driver reports no encoding for SDTV/sRGB
colourspaces (V4L2_YCBCR_ENC_601 with V4L2_QUANTIZATION_LIM_RANGE; Rec.709 sources report
V4L2_YCBCR_ENC_709), what GMSL serialiser camera modules commonly emit, and the only conversion OpenCV's
``cvtColor`` implements for these layouts.

The conversion (:func:`to_bgr_reference`, the reference backend)::

    y' = (Y - y0) * ys,  cb = (U - 128) * cs,  cr = (V - 128) * cs      (limited: y0 16, ys 255/219,
    R = y' + 2 (1 - Kr) cr                                               cs 255/224; full: 0, 1, 1)
    B = y' + 2 (1 - Kb) cb
    G = y' - (2 Kb (1 - Kb) cb + 2 Kr (1 - Kr) cr) / (1 - Kr - Kb)

with (Kr, Kb) = (0.299, 0.114) for BT.601 and (0.2126, 0.0722) for BT.709, in float64, rounded half up
and clipped to 0..255. Chroma is not interpolated: every pixel takes the chroma sample of its pixel
pair (4:2:2) or 2x2 block (4:2:0), as OpenCV does. The cpu backend (:func:`to_bgr_cv2`) calls OpenCV's
``cv2.cvtColor`` (``COLOR_YUV2BGR_UYVY`` / ``_YUY2`` / ``_NV12``: BT.601 limited range in 20-bit fixed
point) and differs from the reference by at most 1 grey level wherever Y >= 16 (tests/video/test_raw_yuv.py);
below black (Y < 16, limited-range footroom) OpenCV clamps Y - 16 to 0 before the matrix, the reference
does not, so there they differ by up to 19 levels. For BT.709 or full range the cpu backend runs the
reference formula in float32.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import ConfigError, FrameError

__all__ = ["MATRICES", "RANGES", "colour_of", "planes", "to_bgr_reference", "to_bgr_cv2", "frame_bytes"]

#: (Kr, Kb) per colour matrix (ITU-R BT.601 and BT.709)
MATRICES: dict[str, tuple[float, float]] = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}
#: (Y offset, Y scale, chroma scale) per range
RANGES: dict[str, tuple[float, float, float]] = {"limited": (16.0, 255.0 / 219.0, 255.0 / 224.0),
                                                 "full": (0.0, 1.0, 1.0)}


def colour_of(camera: Any) -> tuple[str, str]:
    """``(matrix, range)`` of a raw YUV camera from its ``yuv_matrix`` / ``yuv_range`` keys (defaults
    ``bt601``, ``limited``); :class:`~dvpipe.errors.ConfigError` for other values."""
    extra: Mapping[str, Any] = getattr(camera, "extra", None) or {}
    matrix = str(extra.get("yuv_matrix", "bt601")).lower()
    rng = str(extra.get("yuv_range", "limited")).lower()
    name = getattr(camera, "name", "?")
    if matrix not in MATRICES:
        raise ConfigError(f"camera {name}: yuv_matrix {extra.get('yuv_matrix')!r} is not one of {', '.join(MATRICES)}")
    if rng not in RANGES:
        raise ConfigError(f"camera {name}: yuv_range {extra.get('yuv_range')!r} is not one of {', '.join(RANGES)}")
    return matrix, rng


def frame_bytes(encoding: str, width: int, height: int) -> int:
    """Bytes of one tightly packed frame."""
    return width * height * 2 if encoding in ("uyvy", "yuyv") else width * height * 3 // 2


def _as_array(data: Any, encoding: str, width: int, height: int) -> np.ndarray:
    """The frame as its documented 2-D uint8 layout: ``(H, 2W)`` for 4:2:2, ``(H*3/2, W)`` for NV12."""
    if encoding in ("uyvy", "yuyv"):
        if width % 2:
            raise FrameError(f"{encoding.upper()} frames need an even width, the camera declares {width}")
        shape, shapes = (height, 2 * width), f"(H, W, 2) = ({height}, {width}, 2) or (H, 2W) = ({height}, {2 * width})"
    else:
        if width % 2 or height % 2:
            raise FrameError(f"NV12 frames need an even width and height, the camera declares {width}x{height}")
        shape, shapes = (height * 3 // 2, width), f"(H*3/2, W) = ({height * 3 // 2}, {width})"
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise FrameError(f"{encoding.upper()} frames are uint8, got {data.dtype}")
        if data.ndim == 1 and data.size == shape[0] * shape[1]:
            return data.reshape(shape)
        if data.shape == shape or (encoding != "nv12" and data.shape == (height, width, 2)):
            return data.reshape(shape)
        raise FrameError(f"{encoding.upper()} frame has shape {data.shape}; a {width}x{height} camera needs {shapes}")
    try:
        buf = np.frombuffer(data, dtype=np.uint8)
    except TypeError:
        raise FrameError(f"{encoding.upper()} frames are bytes or uint8 arrays, got {type(data).__name__}") from None
    if buf.size != shape[0] * shape[1]:
        raise FrameError(f"{encoding.upper()} frame is {buf.size} bytes; a {width}x{height} camera needs "
                         f"{shape[0] * shape[1]}")
    return buf.reshape(shape)


def planes(data: Any, encoding: str, width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Y, U, V)`` as HxW uint8 each, chroma repeated over its pixel pair or 2x2 block."""
    a = _as_array(data, encoding, width, height)
    if encoding == "nv12":
        y = a[:height]
        uv = a[height:].reshape(height // 2, width // 2, 2)
        u = np.repeat(np.repeat(uv[..., 0], 2, axis=0), 2, axis=1)
        v = np.repeat(np.repeat(uv[..., 1], 2, axis=0), 2, axis=1)
        return y, u, v
    quads = a.reshape(height, width // 2, 4)
    if encoding == "uyvy":
        u, y0, v, y1 = (quads[..., k] for k in range(4))
    else:
        y0, u, y1, v = (quads[..., k] for k in range(4))
    y = np.stack([y0, y1], axis=-1).reshape(height, width)
    return y, np.repeat(u, 2, axis=1), np.repeat(v, 2, axis=1)


def _convert(y: np.ndarray, u: np.ndarray, v: np.ndarray, matrix: str, rng: str, dtype) -> np.ndarray:
    kr, kb = MATRICES[matrix]
    y0, ys, cs = RANGES[rng]
    yp = (y.astype(dtype) - y0) * dtype(ys)
    cb = (u.astype(dtype) - 128) * dtype(cs)
    cr = (v.astype(dtype) - 128) * dtype(cs)
    kg = 1.0 - kr - kb
    out = np.empty(y.shape + (3,), dtype)
    out[..., 2] = yp + dtype(2 * (1 - kr)) * cr
    out[..., 0] = yp + dtype(2 * (1 - kb)) * cb
    out[..., 1] = yp - dtype(2 * kb * (1 - kb) / kg) * cb - dtype(2 * kr * (1 - kr) / kg) * cr
    return np.clip(np.floor(out + dtype(0.5)), 0, 255).astype(np.uint8)


def to_bgr_reference(data: Any, encoding: str, width: int, height: int, matrix: str = "bt601",
                     rng: str = "limited") -> np.ndarray:
    """HxWx3 uint8 BGR by the formula in the module docstring, in float64 (the reference backend)."""
    y, u, v = planes(data, encoding, width, height)
    return _convert(y, u, v, matrix, rng, np.float64)


_CV_CODES = {"uyvy": "COLOR_YUV2BGR_UYVY", "yuyv": "COLOR_YUV2BGR_YUY2", "nv12": "COLOR_YUV2BGR_NV12"}


def to_bgr_cv2(data: Any, encoding: str, width: int, height: int, matrix: str = "bt601",
               rng: str = "limited") -> np.ndarray:
    """HxWx3 uint8 BGR through ``cv2.cvtColor`` (BT.601 limited range); other colours by the formula in
    float32 (the cpu backend)."""
    import cv2

    a = _as_array(data, encoding, width, height)
    if (matrix, rng) != ("bt601", "limited"):
        y, u, v = planes(a, encoding, width, height)
        return _convert(y, u, v, matrix, rng, np.float32)
    src = a.reshape(height, width, 2) if encoding != "nv12" else a
    return cv2.cvtColor(src, getattr(cv2, _CV_CODES[encoding]))
