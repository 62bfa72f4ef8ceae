"""Host image decoding shared by the CPU and reference backends.

JPEG goes through libjpeg-turbo: through ``simplejpeg`` when it is installed (TurboJPEG API,
decoding straight into a reused buffer; ~2.3x faster than ``cv2.imdecode`` for a full-size
1600x900 4:2:0 frame with OpenCV 5's bundled build, bit-identical output: same library, ISLOW
IDCT, fancy upsampling), else through OpenCV's ``cv2.imdecode``. PNG always goes through OpenCV.

The two JPEG paths give the same pixels: simplejpeg runs in ``strict`` mode (any libjpeg warning
is an error), and any frame it refuses (CMYK, arithmetic coding, recoverable corruption) is
decoded again by OpenCV, which then decides exactly as the reference pipeline's ``cv2.imread``
would (a warning is tolerated, a fatal error becomes a :class:`FrameError`).

A camera's frames come from one encoder, so their headers are laid out alike: after the first
frame, the header check is one comparison of the 10 bytes at the remembered frame-header (SOFn)
offset -- same coding, precision, size and components -- plus libjpeg's own header parse for the
size and the end-of-image check, instead of a walk over the markers in Python (~0.1 ms per
6-camera set at full size). Any other frame takes the full check, so a damaged frame fails
exactly as in the reference.
"""
from __future__ import annotations

from typing import Optional

import cv2
import numpy as np

from ..codecs import image_info, jpeg_complete, jpeg_frame_header, sniff
from ..errors import FrameError
from ..stages.base import FrameSpec

try:  # optional: a faster front end to the same libjpeg-turbo
    import simplejpeg as _sj
except ImportError:  # pragma: no cover - exercised where simplejpeg is absent
    _sj = None

# IMREAD_COLOR converts grayscale to 3 channels; ignoring EXIF orientation keeps sensor pixel order
# (mmcv's IMREAD_UNCHANGED does not rotate either), so the calibration stays valid.
_FLAGS = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
          8: cv2.IMREAD_REDUCED_COLOR_8}

#: JPEG codings simplejpeg (TurboJPEG) decodes to BGR; anything else goes to OpenCV directly.
_SJ_CODINGS = ("baseline", "extended", "progressive")

#: which decoder the CPU backend uses for JPEG (shown in plans and benchmark output)
JPEG_DECODER = "simplejpeg (libjpeg-turbo)" if _sj is not None else "cv2.imdecode (libjpeg-turbo)"


def _decode_jpeg_sj(data, out_w: int, out_h: int, state: Optional[dict]) -> Optional[np.ndarray]:
    """simplejpeg decode at ``out_w x out_h`` (a libjpeg scale of the frame), or None if it declines."""
    buf = None
    if state is not None:
        buf = state.get("_sj_buf")
        if buf is None or buf.shape != (out_h, out_w, 3):
            buf = state["_sj_buf"] = np.empty((out_h, out_w, 3), np.uint8)
    try:
        img = _sj.decode_jpeg(data, "BGR", min_height=out_h, min_width=out_w, buffer=buf)
    except (ValueError, TypeError):
        return None
    if img.shape != (out_h, out_w, 3):  # another scale factor than the one asked for: let OpenCV do it
        return None
    return img


def _same_stream(data, state: dict, spec_in: FrameSpec) -> bool:
    """Whether ``data`` is a complete JPEG laid out like the camera's last decoded frame, at the declared size."""
    known = state.get("_sof")  # (offset, first 10 bytes of the SOFn segment) of this camera's stream
    if known is None or data[known[0]:known[0] + 10] != known[1] or not jpeg_complete(data):
        return False
    try:  # libjpeg's own header parse (C): the real size, whatever the bytes at the offset were
        return _sj.decode_jpeg_header(data)[:2] == (spec_in.height, spec_in.width)
    except ValueError:
        return False


def decode_bgr(data, spec_in: FrameSpec, reduce: int = 1, state: Optional[dict] = None,
               decoder: str = "cv2") -> np.ndarray:
    """Decode JPEG/PNG bytes (or validate a BGR array) to HxWx3 uint8 BGR.

    Args:
        data: encoded bytes or an HxWx3 uint8 BGR array.
        spec_in: the camera's input spec (declared size).
        reduce: 1, 2, 4 or 8: decode JPEG at 1/reduce scale in the DCT domain (libjpeg scaling,
            output size ``ceil(W / reduce) x ceil(H / reduce)``).
        state: a per-(camera, step) dict; when given, the decoded image is written into a buffer
            kept there and reused by the next call (the result is valid until then).
        decoder: ``cv2`` (OpenCV only: what the reference backend uses, as mmcv does) or
            ``auto`` (simplejpeg when installed, OpenCV for what it declines: the CPU backend).

    Raises:
        FrameError: corrupt, truncated or wrongly sized frames.
    """
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 3 or data.shape[2] != 3:
            raise FrameError(f"raw frames must be HxWx3 uint8 BGR arrays, got {data.dtype} {data.shape}")
        got = (data.shape[1], data.shape[0])
        if got != spec_in.size:
            raise FrameError(f"frame is {got[0]}x{got[1]} but the camera declares {spec_in.width}x{spec_in.height}")
        return data
    tried_sj = decoder == "auto" and _sj is not None and state is not None and _same_stream(data, state, spec_in)
    if tried_sj:
        img = _decode_jpeg_sj(data, -(-spec_in.width // reduce), -(-spec_in.height // reduce), state)
        if img is not None:
            return img
    if sniff(data) == "jpeg":
        sof, info = jpeg_frame_header(data)
    else:
        sof, info = None, image_info(data)
    if (info.width, info.height) != spec_in.size:
        raise FrameError(f"frame is {info.width}x{info.height} but the camera declares {spec_in.width}x{spec_in.height}")
    if info.format == "png" and reduce != 1:
        raise FrameError("DCT-domain reduction applies to JPEG only")
    if decoder == "auto" and _sj is not None and not tried_sj and info.coding in _SJ_CODINGS and info.components in (1, 3):
        img = _decode_jpeg_sj(data, -(-info.width // reduce), -(-info.height // reduce), state)
        if img is not None:
            if state is not None:
                state["_sof"] = (sof, bytes(data[sof:sof + 10]))
            return img
    buf = np.frombuffer(data, dtype=np.uint8)
    img = cv2.imdecode(buf, _FLAGS[reduce] | cv2.IMREAD_IGNORE_ORIENTATION)
    if img is None:
        raise FrameError(f"corrupt {info.format.upper()} (the decoder rejected it)")
    if img.ndim == 2:  # defensive: some builds return 2D for gray even with IMREAD_COLOR
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    return img

