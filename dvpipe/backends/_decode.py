"""Host image decoding shared by the CPU and reference backends (OpenCV's libjpeg-turbo / libpng)."""
from __future__ import annotations

import cv2
import numpy as np

from ..codecs import image_info
from ..errors import FrameError
from ..stages.base import FrameSpec
from ..types import PixelFormat

# IMREAD_COLOR converts grayscale to 3 channels; ignoring EXIF orientation keeps sensor pixel order
# (mmcv's IMREAD_UNCHANGED does not rotate either), so the calibration stays valid.
_FLAGS = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
          8: cv2.IMREAD_REDUCED_COLOR_8}


def decode_bgr(data, spec_in: FrameSpec, reduce: int = 1) -> np.ndarray:
    """Decode JPEG/PNG bytes (or validate a BGR array) to HxWx3 uint8 BGR.

    ``reduce`` (1, 2, 4, 8) decodes JPEG at 1/reduce scale in the DCT domain (libjpeg scaling:
    output size ``ceil(W / reduce) x ceil(H / reduce)``). Raises :class:`FrameError` for corrupt,
    truncated or wrongly sized frames.
    """
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 3 or data.shape[2] != 3:
            raise FrameError(f"raw frames must be HxWx3 uint8 BGR arrays, got {data.dtype} {data.shape}")
        got = (data.shape[1], data.shape[0])
        if got != spec_in.size:
            raise FrameError(f"frame is {got[0]}x{got[1]} but the camera declares {spec_in.width}x{spec_in.height}")
        return data
    info = image_info(data)
    if (info.width, info.height) != spec_in.size:
        raise FrameError(f"frame is {info.width}x{info.height} but the camera declares {spec_in.width}x{spec_in.height}")
    if info.format == "png" and reduce != 1:
        raise FrameError("DCT-domain reduction applies to JPEG only")
    buf = np.frombuffer(data, dtype=np.uint8)
    img = cv2.imdecode(buf, _FLAGS[reduce] | cv2.IMREAD_IGNORE_ORIENTATION)
    if img is None:
        raise FrameError(f"corrupt {info.format.upper()} (the decoder rejected it)")
    if img.ndim == 2:  # defensive: some builds return 2D for gray even with IMREAD_COLOR
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    return img


def expect_hwc(spec: FrameSpec) -> bool:
    return spec.pixel_format in (PixelFormat.BGR, PixelFormat.RGB, PixelFormat.FLOAT_HWC)
