"""NV12 (YUV 4:2:0 semi-planar) to RGB/BGR with BT.601 coefficients, full or limited range.

Which range is which:

* **full** (JFIF, ``Y, Cb, Cr`` in 0..255, no offset on Y): what a JPEG holds. DVPP JPEGD writes
  the decoded JPEG planes as they are, so its NV12 output is full range, and converting it with
  these coefficients reproduces libjpeg-turbo / OpenCV ``imdecode`` within +-1 grey level
  (``R = Y + 1.402 Cr'``, ``G = Y - 0.344136 Cb' - 0.714136 Cr'``, ``B = Y + 1.772 Cb'``,
  ``C' = C - 128``).
* **limited** (BT.601 "studio swing", Y in 16..235, C in 16..240): what H.264/H.265 streams
  normally carry (``video_full_range_flag = 0``), hence DVPP VDEC output; also what OpenCV's
  ``COLOR_YUV2BGR_NV12`` assumes (``R = 1.164383 (Y-16) + 1.596027 Cr'``, ...).

Chroma is upsampled like libjpeg's default "fancy" upsampling: bilinear with the chroma sample
at the centre of its 2x2 block and edges replicated (weights 9/16, 3/16, 3/16, 1/16), which
is OpenCV ``INTER_LINEAR`` from ``(H/2, W/2)`` to ``(H, W)``.

The NV12 buffer is a 2-D ``uint8`` array of ``Hs * 3 / 2`` rows and ``Ws`` columns (the strides
DVPP aligns to); the image is its top-left ``width x height``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ...errors import ConfigError, FrameError
from .resample import Scratch, channel_major_index, column_pass, column_weights, make_taps, row_pass, resize_matrix

#: (Y scale, Y offset, R<-Cr, G<-Cb, G<-Cr, B<-Cb)
COEFFS = {
    "full": (1.0, 0.0, 1.402, -0.344136, -0.714136, 1.772),
    "limited": (255.0 / 219.0, 16.0, 1.596027, -0.391762, -0.812968, 2.017232),
}


def coefficients(matrix: str, colour_range: str) -> tuple[float, ...]:
    """``(y scale, y offset, R per Cr, G per Cb, G per Cr, B per Cb)`` of a Y'CbCr matrix and range: ``bt601``
    the published constants above, ``bt709`` as :func:`dvpipe.video.yuv_matrix` derives it."""
    from ...video import yuv_matrix

    if colour_range not in COEFFS:
        raise ConfigError(f"colour range must be 'full' or 'limited', got {colour_range!r}")
    if matrix not in ("bt601", "bt709"):
        raise ConfigError(f"yuv_matrix must be bt601 or bt709, got {matrix!r}")
    if matrix == "bt601":
        return COEFFS[colour_range]
    ky, y0, crv, cgu, cgv, cbu = yuv_matrix(1, colour_range == "full")  # FFmpeg's code 1: BT.709
    return ky, y0, crv, -cgu, -cgv, cbu


def nv12_geometry(rows: int, cols: int, width: int, height: int) -> int:
    """The height stride ``Hs`` of an NV12 buffer of ``rows x cols``; FrameError if it cannot hold the image."""
    if rows % 3 or (rows * 2 // 3) % 2:
        raise FrameError(f"an NV12 buffer has Hs*3/2 rows with Hs even; got {rows} rows")
    hs = rows * 2 // 3
    if hs < height or cols < width or cols < 2 * math.ceil(width / 2):
        raise FrameError(f"NV12 buffer {cols}x{rows} (stride {cols}x{hs}) is smaller than the {width}x{height} image")
    return hs


class NV12Converter:
    """Converts NV12 buffers of one size to ``height x width x 3`` float32, reusing its buffers."""

    def __init__(self, width: int, height: int, order: str, colour_range: str, device: torch.device,
                 matrix: str = "bt601"):
        self.coeffs = coefficients(matrix, colour_range)
        self.width, self.height, self.order, self.range = width, height, order, colour_range
        self.ch, self.cw = math.ceil(height / 2), math.ceil(width / 2)
        self.rows = make_taps(resize_matrix(self.ch, 2 * self.ch, "linear")[:height], device)
        self.cols = make_taps(resize_matrix(self.cw, 2 * self.cw, "linear")[:width], device)
        self.col_index = [channel_major_index(self.cols, k, 2, (0, 1), device) for k in range(len(self.cols.steps))]
        self.col_w = column_weights(self.cols, 2, device)
        self.scratch = Scratch(device)

    def __call__(self, t2: torch.Tensor, round_u8: bool) -> torch.Tensor:
        w, h = self.width, self.height
        hs = nv12_geometry(t2.shape[0], t2.shape[1], w, h)
        y = t2[:h, :w]
        uv = t2[hs:hs + self.ch, : 2 * self.cw]
        r = row_pass(uv, self.rows, self.scratch, "uv.rows")
        cbcr = column_pass(r, self.cols, self.col_index, self.col_w, self.scratch, "uv.cols")  # (h, 2w): Cb | Cr
        cbcr.sub_(128.0)
        cb, cr = cbcr[:, :w], cbcr[:, w:]
        ys, y0, r_cr, g_cb, g_cr, b_cb = self.coeffs
        yf = self.scratch.get("y", (h, w), torch.float32)
        torch.sub(y, y0, out=yf)
        if ys != 1.0:
            yf.mul_(ys)
        out = self.scratch.get("rgb", (h, w, 3), torch.float32)
        ri, bi = (0, 2) if self.order == "rgb" else (2, 0)
        torch.add(yf, cr, alpha=r_cr, out=out[..., ri])
        g = out[..., 1]
        torch.add(yf, cb, alpha=g_cb, out=g)
        g.add_(cr, alpha=g_cr)
        torch.add(yf, cb, alpha=b_cb, out=out[..., bi])
        out.clamp_(0.0, 255.0)
        if round_u8:
            out.add_(0.5).floor_()
        return out


def nv12_from_bgr(bgr: np.ndarray, colour_range: str = "full", stride: tuple[int, int] | None = None) -> np.ndarray:
    """Test/bench helper: BGR uint8 -> NV12 (2x2 mean chroma), optionally padded to ``stride=(Ws, Hs)``."""
    h, w = bgr.shape[:2]
    x = bgr.astype(np.float64)
    b, g, r = x[..., 0], x[..., 1], x[..., 2]
    yv = 0.299 * r + 0.587 * g + 0.114 * b
    cb = (b - yv) / 1.772
    cr = (r - yv) / 1.402
    if colour_range == "limited":
        yv, cb, cr = 16 + yv * 219 / 255, cb * 224 / 255, cr * 224 / 255
    cb, cr = cb + 128, cr + 128
    ch, cw = math.ceil(h / 2), math.ceil(w / 2)

    def sub(p):
        p = np.pad(p, ((0, 2 * ch - h), (0, 2 * cw - w)), mode="edge")
        return p.reshape(ch, 2, cw, 2).mean(axis=(1, 3))

    ws, hs = stride or (2 * cw, 2 * ch)
    buf = np.zeros((hs * 3 // 2, ws), np.uint8)
    buf[:h, :w] = np.clip(np.round(yv), 0, 255)
    uv = np.stack([sub(cb), sub(cr)], axis=-1).reshape(ch, 2 * cw)
    buf[hs:hs + ch, :2 * cw] = np.clip(np.round(uv), 0, 255)
    return buf
