"""Host image decoding shared by the CPU and reference backends.

JPEG goes through libjpeg-turbo: through ``simplejpeg`` when it is installed (TurboJPEG API,
decoding straight into a reused buffer; ~2.3x faster than ``cv2.imdecode`` for a full-size
1600x900 4:2:0 frame with OpenCV 5's bundled build, bit-identical output: same library, ISLOW
IDCT, fancy upsampling), else through OpenCV's ``cv2.imdecode``. PNG always goes through OpenCV.

The two JPEG paths give the same pixels and the same verdicts. simplejpeg runs in ``strict`` mode
(any libjpeg warning is an error); a clean frame is decoded once. A frame it refuses, and every
JPEG on the reference path (``decoder="cv2"``) or in a coding left to OpenCV (CMYK, arithmetic),
gets libjpeg's verdict from a strict decode at 1/8 scale (:func:`_jpeg_damage`; ~1/5 of a full
decode): a warning -- corrupt data, a premature end, extraneous bytes, a bad restart marker -- is
damage, reported through ``on_corrupt`` (a drop by default; kept with OpenCV's concealed picture
under the ``flag`` policy); a fatal error in TurboJPEG (a coding it does not take) is no verdict,
and OpenCV decodes the frame or rejects it, as the reference pipeline's ``cv2.imread`` would.
Bytes after the EOI marker (camera and phone trailers, padding) are not damage.

A camera's frames come from one encoder, so their headers are laid out alike: after the first
frame, the header check is one comparison of the 10 bytes at the remembered frame-header (SOFn)
offset -- same coding, precision, size and components -- plus libjpeg's own header parse for the
size, instead of a walk over the markers in Python (~0.1 ms per 6-camera set at full size); the
strict decode itself notices a premature end. Any other frame, and any frame the strict decode
refuses, takes the full check, so a damaged frame fails exactly as in the reference.
"""
from __future__ import annotations

from typing import Callable, Optional

import cv2
import numpy as np

from ..codecs import DEFAULT_MAX_PIXELS, image_info, jpeg_frame_header, sniff, unsupported_precision
from ..errors import CorruptFrameError, FrameError
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


def _decode_jpeg_sj(data, out_w: int, out_h: int, state: Optional[dict]) -> tuple[Optional[np.ndarray], str]:
    """Strict simplejpeg decode at ``out_w x out_h`` (a libjpeg scale of the frame).

    Returns ``(image, "")``, or ``(None, why)`` where it declines: libjpeg's message (a warning --
    damage -- or a fatal error such as a coding TurboJPEG does not take), or ``""`` when libjpeg
    would give another scale than the one asked for.
    """
    buf = None
    if state is not None:
        buf = state.get("_sj_buf")
        if buf is None or buf.shape != (out_h, out_w, 3):
            buf = state["_sj_buf"] = np.empty((out_h, out_w, 3), np.uint8)
    try:
        img = _sj.decode_jpeg(data, "BGR", min_height=out_h, min_width=out_w, buffer=buf)
    except (ValueError, TypeError) as e:
        return None, str(e) or type(e).__name__
    if img.shape != (out_h, out_w, 3):  # another scale factor than the one asked for: let OpenCV do it
        return None, ""
    return img, ""


#: libjpeg warnings about metadata, not about the picture's data (JWRN_JFIF_MAJOR, JWRN_BOGUS_ICC,
#: JWRN_ADOBE_XFORM, JWRN_NOT_SEQUENTIAL): not damage
_METADATA_WARNINGS = ("Warning: unknown JFIF revision", "Corrupt JPEG data: bad ICC marker",
                      "Unknown Adobe color transform code", "Invalid SOS parameters for sequential JPEG")


def _jpeg_damage(data, strict_error: Optional[str] = None) -> Optional[str]:
    """libjpeg's verdict on JPEG bytes: a drop reason naming its first warning, or None when it has none.

    libjpeg warns (and conceals) where the data is damaged: corrupt or missing entropy-coded data,
    extraneous bytes before a marker, a bad restart marker, a premature end. The check is a strict
    decode at the smallest DCT scale, in grey (~1/5 of a full decode: every entropy-coded bit is
    still read, which is where those warnings arise); ``strict_error``, when a strict decode already
    failed, skips it. A failure that persists with warnings tolerated is fatal, not damage: a coding
    TurboJPEG does not take (12-bit, lossless) or data no decoder can read; then there is no
    verdict (None) and OpenCV decodes or rejects the frame as before. So is a warning about
    metadata only (:data:`_METADATA_WARNINGS`: a JFIF revision, an ICC or Adobe marker) -- though
    libjpeg stops at its first warning, so damage after such a warning goes unseen.
    """
    small = {"colorspace": "GRAY", "min_height": 1, "min_width": 1}
    if strict_error is None:
        try:
            _sj.decode_jpeg(data, strict=True, **small)
            return None
        except (ValueError, TypeError) as e:
            strict_error = str(e)
    if strict_error.startswith(_METADATA_WARNINGS):
        return None
    try:
        _sj.decode_jpeg(data, strict=False, **small)
    except (ValueError, TypeError):
        return None
    return f"corrupt JPEG (libjpeg: {strict_error.removeprefix('Corrupt JPEG data: ')})"


def _check_size(info, spec_in: FrameSpec, max_pixels: int) -> None:
    """FrameError when the header's size is above the decode cap or is not the camera's declared size."""
    if info.width * info.height > max_pixels:
        raise FrameError(f"frame is {info.width}x{info.height} ({info.width * info.height / 1e6:.1f} MP), above the "
                         f"decode cap of {max_pixels / 1e6:.1f} MP per frame "
                         "(raise decode.max_pixels, or max_pixels= in Python, to allow it)")
    if (info.height, info.width) != spec_in.size:
        raise FrameError(f"frame is {info.width}x{info.height} but the camera declares {spec_in.width}x{spec_in.height}")


def _same_stream(data, state: dict, spec_in: FrameSpec) -> bool:
    """Whether ``data`` is a JPEG laid out like the camera's last decoded frame, at the declared size.

    Completeness is left to the strict decode that follows (libjpeg warns on a premature end; any
    refusal takes the full check, which names a truncation as the reference does).
    """
    known = state.get("_sof")  # (offset, first 10 bytes of the SOFn segment) of this camera's stream
    if known is None or data[known[0]:known[0] + 10] != known[1]:
        return False
    try:  # libjpeg's own header parse (C): the real size, whatever the bytes at the offset were
        return _sj.decode_jpeg_header(data)[:2] == (spec_in.height, spec_in.width)
    except ValueError:
        return False


def decode_bgr(data, spec_in: FrameSpec, reduce: int = 1, state: Optional[dict] = None,
               decoder: str = "cv2", on_corrupt: Optional[Callable[[str], None]] = None,
               max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
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
            Both judge damage alike, by libjpeg's warnings (see :func:`_jpeg_damage`).
        on_corrupt: called with the reason when libjpeg reports damage it concealed; if it
            returns, the concealed picture (OpenCV's) is returned. None raises
            :class:`CorruptFrameError` (pass ``KernelContext.corrupt`` for the pipeline's policy).
        max_pixels: cap on the frame's width x height, checked from its header before decoding.

    Raises:
        FrameError: truncated, undecodable, too large or wrongly sized frames
            (:class:`CorruptFrameError` for damaged data).
    """
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 3 or data.shape[2] != 3:
            raise FrameError(f"raw frames must be HxWx3 uint8 BGR arrays, got {data.dtype} {data.shape}")
        if data.shape[:2] != spec_in.size:
            raise FrameError(f"frame is {data.shape[1]}x{data.shape[0]} but the camera declares "
                             f"{spec_in.width}x{spec_in.height}")
        return data
    strict_error = None  # libjpeg's message when a strict full decode refused this frame
    tried_sj = (decoder == "auto" and _sj is not None and state is not None
                and spec_in.width * spec_in.height <= max_pixels and _same_stream(data, state, spec_in))
    if tried_sj:
        img, strict_error = _decode_jpeg_sj(data, -(-spec_in.width // reduce), -(-spec_in.height // reduce), state)
        if img is not None:
            return img
    if sniff(data) == "jpeg":
        sof, info = jpeg_frame_header(data)
    else:
        sof, info = None, image_info(data)
    _check_size(info, spec_in, max_pixels)
    unsupported = unsupported_precision(info)
    if unsupported is not None:  # a valid file dvpipe does not decode: not "corrupt"
        raise FrameError(unsupported)
    if info.format == "png" and reduce != 1:
        raise FrameError("DCT-domain reduction applies to JPEG only")
    if decoder == "auto" and _sj is not None and not tried_sj and info.coding in _SJ_CODINGS and info.components in (1, 3):
        img, strict_error = _decode_jpeg_sj(data, -(-info.width // reduce), -(-info.height // reduce), state)
        if img is not None:
            if state is not None:
                assert sof is not None  # simplejpeg decodes JPEG only, whose header gave sof
                state["_sof"] = (sof, bytes(data[sof:sof + 10]))
            return img
    damage = None
    if info.format == "jpeg" and _sj is not None:
        damage = _jpeg_damage(data, strict_error or None)
    if damage is not None and on_corrupt is None:
        raise CorruptFrameError(damage)  # no picture wanted: skip the concealing decode
    buf = np.frombuffer(data, dtype=np.uint8)
    img = cv2.imdecode(buf, _FLAGS[reduce] | cv2.IMREAD_IGNORE_ORIENTATION)
    if img is None:
        raise CorruptFrameError(f"corrupt {info.format.upper()} (the decoder rejected it)")
    if img.ndim == 2:  # defensive: some builds return 2D for gray even with IMREAD_COLOR
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    if damage is not None:
        assert on_corrupt is not None  # raised above otherwise
        on_corrupt(damage)
    return img
