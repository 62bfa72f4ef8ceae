"""Host-side picture helpers for the DVPP backend: strided views, NV12 <-> BGR.

Layouts (what DVPP reads and writes, see constraints.md §1.4, §2.2, §3.3):

* **NV12** (``PIXEL_FORMAT_YUV_SEMIPLANAR_420``): a ``ws x hs`` luma plane (``ws`` bytes per row,
  ``hs`` rows), then a ``ws x hs/2`` plane of interleaved ``U V`` pairs. The picture is the top-left
  ``width x height`` of each plane (chroma: ``width x height/2`` bytes); everything else is padding.
* **BGR888 / RGB888** packed: ``hs`` rows of ``ws`` bytes (``ws >= 3 * width``).

Colour: JPEG holds full-range (JFIF) BT.601 YCbCr, so JPEGD output is converted with the full-range
matrix (OpenCV ``COLOR_YCrCb2BGR``); H.264/H.265 streams normally carry limited range ("studio swing",
``video_full_range_flag = 0``), converted with OpenCV's ``COLOR_YUV2BGR_NV12`` matrix (BT.601), or, for a
camera whose stream signals BT.709 (rig key ``yuv_matrix: bt709``), the BT.709 matrix in float. Chroma is
upsampled bilinearly with the sample at the centre of its 2x2 block (``INTER_LINEAR`` 2x), which is
libjpeg-turbo's default "fancy" upsampling, so a JPEGD + host conversion reproduces a libjpeg-turbo
decode up to the 4:2:0 round trip (see docs/dvpp.md for the measured bounds).
"""
from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from ...codecs import VIDEO_ENCODINGS
from ...errors import ConfigError

__all__ = ["SENTINEL", "nv12_planes", "packed_view", "nv12_to_bgr", "bgr_to_nv12_planes", "write_nv12",
           "write_packed", "fill_padding_nv12", "fill_padding_packed", "STANDARDS", "nv12_in_standard", "split_standard",
           "camera_colour_standard"]

#: Byte value the software device writes into every padding byte of a picture it outputs (the
#: region between ``width`` and the width stride, and between ``height`` and the height stride),
#: so that code reading a picture without cropping it from its strides shows the value.
SENTINEL = 0xA5


def nv12_planes(buf: np.ndarray, width: int, height: int, ws: int, hs: int) -> tuple[np.ndarray, np.ndarray]:
    """Views ``(Y: height x width, UV: height/2 x width/2 x 2)`` of an NV12 buffer with strides ``ws, hs``."""
    need = ws * hs * 3 // 2
    if buf.size < need:
        raise ConfigError(f"NV12 buffer of {buf.size} bytes cannot hold stride {ws}x{hs} ({need} bytes)")
    flat = buf.reshape(-1)[:need]
    y = flat[:ws * hs].reshape(hs, ws)[:height, :width]
    uv = flat[ws * hs:need].reshape(hs // 2, ws)[:height // 2, :width].reshape(height // 2, width // 2, 2)
    return y, uv


def packed_view(buf: np.ndarray, width: int, height: int, ws: int, hs: int, channels: int = 3) -> np.ndarray:
    """``height x width x channels`` view of a packed picture with row stride ``ws`` bytes."""
    need = ws * hs
    if buf.size < need:
        raise ConfigError(f"packed buffer of {buf.size} bytes cannot hold stride {ws}x{hs} ({need} bytes)")
    rows = buf.reshape(-1)[:need].reshape(hs, ws)
    return rows[:height, :width * channels].reshape(height, width, channels)


def nv12_to_bgr(y: np.ndarray, uv: np.ndarray, colour_range: str = "full", out: np.ndarray | None = None,
                scratch: dict | None = None, matrix: str = "bt601") -> np.ndarray:
    """NV12 planes (views are fine) -> ``H x W x 3`` uint8 BGR.

    Args:
        y: ``H x W`` luma.
        uv: ``H/2 x W/2 x 2`` interleaved Cb, Cr.
        colour_range: ``full`` (JPEG / JFIF) or ``limited`` (studio swing, video).
        out: optional destination.
        scratch: optional dict for reused intermediate buffers.
        matrix: ``bt601`` (JPEG, and video whose VUI says BT.601 or nothing) or ``bt709`` (the textbook
            inverse of :func:`nv12_in_standard`'s formulas in float, each chroma sample replicated over its 2x2
            block as OpenCV's ``COLOR_YUV2BGR_NV12`` does, rounded).
    """
    h, w = y.shape
    s = scratch if scratch is not None else {}
    if matrix == "bt709":
        return _nv12_to_bgr_float(y, uv, f"bt709_{'full' if colour_range == 'full' else 'narrow'}", out)
    if matrix != "bt601":
        raise ConfigError(f"matrix must be 'bt601' or 'bt709', got {matrix!r}")
    if colour_range == "limited":
        yc = np.ascontiguousarray(y)
        uvc = np.ascontiguousarray(uv)
        res = cv2.cvtColorTwoPlane(yc, uvc, cv2.COLOR_YUV2BGR_NV12)
        if out is not None:
            out[...] = res
            return out
        return res
    if colour_range != "full":
        raise ConfigError(f"colour_range must be 'full' or 'limited', got {colour_range!r}")
    up = s.get("uv_up")
    if up is None or up.shape != (h, w, 2):
        up = s["uv_up"] = np.empty((h, w, 2), np.uint8)
    cv2.resize(np.ascontiguousarray(uv), (w, h), dst=up, interpolation=cv2.INTER_LINEAR)
    ycc = s.get("ycrcb")
    if ycc is None or ycc.shape != (h, w, 3):
        ycc = s["ycrcb"] = np.empty((h, w, 3), np.uint8)
    ycc[..., 0] = y
    ycc[..., 1] = up[..., 1]  # Cr
    ycc[..., 2] = up[..., 0]  # Cb
    if out is None:
        return cv2.cvtColor(ycc, cv2.COLOR_YCrCb2BGR)
    cv2.cvtColor(ycc, cv2.COLOR_YCrCb2BGR, dst=out)
    return out


def bgr_to_nv12_planes(bgr: np.ndarray, colour_range: str = "full") -> tuple[np.ndarray, np.ndarray]:
    """``H x W x 3`` BGR (H, W even) -> ``(Y: H x W, UV: H/2 x W/2 x 2)``; chroma is the 2x2 mean
    (full range; limited range: each 2x2 block's top-left sample, as OpenCV's converter takes it)."""
    h, w = bgr.shape[:2]
    if h % 2 or w % 2:
        raise ConfigError(f"NV12 needs an even size, got {w}x{h}")
    if colour_range == "full":
        ycc = cv2.cvtColor(bgr, cv2.COLOR_BGR2YCrCb)
        y = ycc[..., 0]
        c = cv2.resize(ycc[..., 1:], (w // 2, h // 2), interpolation=cv2.INTER_AREA)  # 2x2 mean
        uv = np.empty((h // 2, w // 2, 2), np.uint8)
        uv[..., 0], uv[..., 1] = c[..., 1], c[..., 0]
        return np.ascontiguousarray(y), uv
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)  # limited range; chroma = each 2x2 block's top-left sample (OpenCV does not average)
    y = i420[:h]
    u = i420[h:h + h // 4].reshape(h // 2, w // 2)
    v = i420[h + h // 4:].reshape(h // 2, w // 2)
    return np.ascontiguousarray(y), np.stack([u, v], axis=-1)


#: colour standard (the AIPP CSC names, :data:`dvpipe.backends.dvpp.aipp.COLOUR_STANDARDS`) -> (Kr, Kb, full range)
#: (ITU-R BT.601 / BT.709 luma coefficients; JPEG is JFIF's full-range BT.601, ITU-T T.871)
STANDARDS: dict[str, tuple[float, float, bool]] = {
    "jpeg_full": (0.299, 0.114, True), "bt601_full": (0.299, 0.114, True), "bt601_narrow": (0.299, 0.114, False),
    "bt709_full": (0.2126, 0.0722, True), "bt709_narrow": (0.2126, 0.0722, False)}


def nv12_in_standard(bgr: np.ndarray, strides: tuple[int, int], standard: str) -> np.ndarray:
    """Host ``H x W x 3`` uint8 BGR -> NV12 at ``strides = (width_stride, height_stride)`` in ``standard``
    (:data:`STANDARDS`): ``Y' = Kr R + (1 - Kr - Kb) G + Kb B``, ``Cb = (B - Y') / (2 (1 - Kb))``, ``Cr = (R - Y')
    / (2 (1 - Kr))``; full range: ``Y = Y'``, ``C = 128 + C'``; narrow: ``Y = 16 + 219/255 Y'``, ``C = 128 + 224/255
    C'``; chroma is the 2x2 mean (an odd last row / column repeated), rounded to nearest. Returns ``(hs * 3 / 2,
    ws)`` uint8 with zero padding. The encoding a slot's colour standard asks for, so that AIPP's CSC for that
    standard gives the picture's colours back."""
    if standard not in STANDARDS:
        raise ConfigError(f"colour standard must be one of {', '.join(STANDARDS)}, got {standard!r}")
    kr, kb, full = STANDARDS[standard]
    h, w = bgr.shape[:2]
    ws, hs = strides
    x = bgr.astype(np.float64)
    b, g, r = x[..., 0], x[..., 1], x[..., 2]
    y = kr * r + (1.0 - kr - kb) * g + kb * b
    cb = (b - y) / (2.0 * (1.0 - kb))
    cr = (r - y) / (2.0 * (1.0 - kr))
    ys, cs = (1.0, 1.0) if full else (219.0 / 255.0, 224.0 / 255.0)
    y0 = 0.0 if full else 16.0
    ch, cw = (h + 1) // 2, (w + 1) // 2
    out = np.zeros((hs * 3 // 2, ws), np.uint8)
    out[:h, :w] = np.clip(np.rint(y0 + ys * y), 0, 255)
    for k, c in enumerate((cb, cr)):
        c = np.pad(c, ((0, 2 * ch - h), (0, 2 * cw - w)), mode="edge").reshape(ch, 2, cw, 2).mean(axis=(1, 3))
        out[hs:hs + ch, k:2 * cw:2] = np.clip(np.rint(128.0 + cs * c), 0, 255)
    return out


def split_standard(standard: str) -> tuple[str, str]:
    """``(matrix, colour_range)`` of a colour standard (:data:`STANDARDS`) for :func:`nv12_to_bgr`:
    ``jpeg_full`` -> ``("bt601", "full")``, ``bt709_narrow`` -> ``("bt709", "limited")``."""
    if standard not in STANDARDS:
        raise ConfigError(f"colour standard must be one of {', '.join(STANDARDS)}, got {standard!r}")
    return ("bt709" if standard.startswith("bt709") else "bt601"), ("full" if STANDARDS[standard][2] else "limited")


def _nv12_to_bgr_float(y: np.ndarray, uv: np.ndarray, standard: str, out: np.ndarray | None) -> np.ndarray:
    """The inverse of :func:`nv12_in_standard`'s formulas in float64 (each chroma sample replicated over its 2x2
    block), rounded and clipped: ``H x W x 3`` uint8 BGR."""
    kr, kb, full = STANDARDS[standard]
    h, w = y.shape
    up = np.repeat(np.repeat(uv, 2, axis=0), 2, axis=1)[:h, :w].astype(np.float64) - 128.0
    yy = y.astype(np.float64)
    if not full:
        yy, up = (yy - 16.0) * (255.0 / 219.0), up * (255.0 / 224.0)
    r = yy + 2.0 * (1.0 - kr) * up[..., 1]
    b = yy + 2.0 * (1.0 - kb) * up[..., 0]
    g = (yy - kr * r - kb * b) / (1.0 - kr - kb)
    res = np.clip(np.rint(np.stack([b, g, r], axis=-1)), 0, 255).astype(np.uint8)
    if out is not None:
        out[...] = res
        return out
    return res


def fill_padding_nv12(buf: np.ndarray, width: int, height: int, ws: int, hs: int, value: int = SENTINEL) -> None:
    """Write ``value`` into every byte of an NV12 buffer outside the picture (right of ``width``, below
    ``height`` in both planes, and after the chroma plane)."""
    flat = buf.reshape(-1)
    need = ws * hs * 3 // 2
    ypl = flat[:ws * hs].reshape(hs, ws)
    ypl[:, width:] = value
    ypl[height:, :width] = value
    cpl = flat[ws * hs:need].reshape(hs // 2, ws)
    cpl[:, width:] = value
    cpl[height // 2:, :width] = value
    flat[need:] = value


def fill_padding_packed(buf: np.ndarray, width: int, height: int, ws: int, hs: int, channels: int = 3,
                        value: int = SENTINEL) -> None:
    """Write ``value`` into every byte of a packed buffer outside the picture."""
    flat = buf.reshape(-1)
    rows = flat[:ws * hs].reshape(hs, ws)
    rows[:, width * channels:] = value
    rows[height:, :width * channels] = value
    flat[ws * hs:] = value


def write_nv12(buf: np.ndarray, y: np.ndarray, uv: np.ndarray, ws: int, hs: int, pad: bool = True) -> None:
    """Write planes into an NV12 buffer with strides ``ws, hs`` (padding set to :data:`SENTINEL` if ``pad``)."""
    h, w = y.shape
    dy, duv = nv12_planes(buf, w, h, ws, hs)
    dy[...] = y
    duv[...] = uv
    if pad:
        fill_padding_nv12(buf, w, h, ws, hs)


def write_packed(buf: np.ndarray, img: np.ndarray, ws: int, hs: int, pad: bool = True) -> None:
    """Write an ``H x W x C`` picture into a packed buffer with row stride ``ws`` bytes."""
    h, w, c = img.shape
    packed_view(buf, w, h, ws, hs, c)[...] = img
    if pad:
        fill_padding_packed(buf, w, h, ws, hs, c)


def camera_colour_standard(camera: Any) -> str:
    """JPEG: ``jpeg_full``. Video: the camera's rig keys ``yuv_matrix`` (``bt601`` / ``bt709``) and ``yuv_range``
    (``limited`` / ``full``), default ``bt601_narrow``. A deployment's video file source fills in the keys a rig
    leaves out from the stream's VUI before planning (:func:`dvpipe.deploy.sources._probe.with_stream_colour`;
    most HD H.264 cameras signal BT.709); a live stream or a camera built in Python needs them set."""
    if camera.encoding not in VIDEO_ENCODINGS:
        return "jpeg_full"
    extra = getattr(camera, "extra", {}) or {}
    matrix = str(extra.get("yuv_matrix", "bt601")).lower()
    rng = "full" if str(extra.get("yuv_range", "limited")).lower() == "full" else "narrow"
    if matrix not in ("bt601", "bt709"):
        raise ConfigError(f"camera {camera.name}: yuv_matrix {matrix!r} is not bt601 or bt709")
    return f"{matrix}_{rng}"
