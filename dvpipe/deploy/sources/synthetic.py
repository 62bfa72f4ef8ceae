"""A synthetic camera: renders a sample-like scene through the camera's own calibration.

Each camera sees the same world (lidar frame: x right, y forward, z up, ground z = 0): a tiled
ground plane with lane lines, sky with distance haze, and boxes (from ``samples/scene.yaml`` when
it is there, else a built-in set) moving with their velocities. The static background is ray cast
once per camera; ``cycle`` frames with the boxes at successive positions are drawn and encoded
at open (in the camera's declared encoding: JPEG, PNG, raw BGR, H.264/H.265 as one closed GOP
of ``cycle`` pictures, so that replaying the cycle is a valid stream, or the raw camera layouts
UYVY / YUYV / NV12 of a GMSL or V4L2 camera: see :func:`encode_raw_yuv`). ``read()`` then costs
nothing but a timestamp, which makes the source suitable for soak runs.

``realtime: true`` (default) makes it a live camera: frame k is captured at ``start + k / fps`` on
the wall clock and delivered then; when the reader falls behind, image frames whose time has passed
are never captured (a live camera does not buffer), while video access units are all delivered
(late), as an encoder's stream is; after a reconnect, video resumes at the next keyframe.
``realtime: false`` delivers as fast as read: a recording of ``frames`` frames (endless without), which
a reopen (``run.loop``'s next pass) starts over from frame 0, as a file does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import cv2
import numpy as np

from ...backends._raw_yuv import MATRICES, RANGES, colour_of
from ...codecs import RAW_YUV_ENCODINGS, VIDEO_ENCODINGS
from ...errors import ConfigError
from ...latency import now_ns, to_monotonic_ns, wall_ns
from ...types import Camera, PixelFormat
from ...video import camera_encoder, is_keyframe
from .._validate import MAX_FRAMES
from . import _options
from .base import Backoff, Item, Source, SourceError
from .registry import SourceContext, option, register_source

__all__ = ["SyntheticSource", "SyntheticOptions", "render_background", "render_frame", "encode_raw_yuv"]

_CYCLE_MAX_BYTES = 2 << 30  #: the whole cycle is rendered (BGR) before it is encoded

_SCENE = Path(__file__).resolve().parents[3] / "samples" / "scene.yaml"
_DEFAULT_BOXES = [  # center xyz (m), size (m), yaw (rad), velocity (m/s), BGR colour
    ((-1.8, 14.0, 0.8), (1.9, 4.5, 1.6), 0.0, (0.0, 3.0, 0.0), (40, 40, 200)),
    ((1.8, 24.0, 0.8), (1.9, 4.5, 1.6), 0.0, (0.0, -4.0, 0.0), (200, 90, 30)),
    ((5.5, -12.0, 1.4), (2.5, 9.0, 2.8), 0.0, (0.0, 2.0, 0.0), (60, 160, 60)),
    ((-6.0, -4.0, 0.9), (0.6, 0.6, 1.8), 0.0, (0.8, 0.0, 0.0), (30, 200, 230)),
    ((9.0, 6.0, 0.8), (4.5, 1.9, 1.6), math.pi / 2, (-2.5, 0.0, 0.0), (150, 150, 150)),
    ((-10.0, 18.0, 4.0), (8.0, 8.0, 8.0), 0.3, (0.0, 0.0, 0.0), (120, 110, 140)),
]


def _boxes() -> list[tuple]:
    if _SCENE.is_file():
        try:
            import yaml

            scene = yaml.safe_load(_SCENE.read_text(encoding="utf-8"))
            out = []
            for k, b in enumerate(scene["timestamps"][0]["boxes"]):
                rng = np.random.default_rng(k)
                colour = tuple(int(c) for c in rng.integers(40, 220, 3))
                out.append((tuple(b["center"]), tuple(b["size"]), float(b.get("yaw", 0.0)),
                            tuple(b.get("velocity", (0.0, 0.0, 0.0))), colour))
            if out:
                return out
        except Exception:  # noqa: BLE001 - a malformed scene file only means the built-in boxes
            pass
    return list(_DEFAULT_BOXES)


def render_background(camera: Camera, width: int, height: int) -> np.ndarray:
    """Ground, lane lines and sky for ``camera`` at ``width x height`` (intrinsics scaled to it)."""
    K = np.array(camera.intrinsics, dtype=np.float64)
    S = np.diag([width / camera.width, height / camera.height, 1.0])
    Kinv = np.linalg.inv(S @ K)
    T = np.array(camera.lidar2cam, dtype=np.float64)
    R, t = T[:3, :3], T[:3, 3]
    centre = -R.T @ t
    u, v = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    rays = np.stack([u, v, np.ones_like(u)], -1) @ Kinv.T @ R  # camera rays in the lidar frame
    dz = rays[..., 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(dz < -1e-6, -centre[2] / dz, np.inf)
    x = centre[0] + s * rays[..., 0]
    y = centre[1] + s * rays[..., 1]
    ground = np.isfinite(s) & (s < 250)
    tile = ((np.floor(np.nan_to_num(x) / 2) + np.floor(np.nan_to_num(y) / 2)) % 2).astype(np.float32)
    img = np.empty((height, width, 3), np.float32)
    base = 70 + 18 * tile
    img[..., 0] = base
    img[..., 1] = base + 4
    img[..., 2] = base + 2
    lanes = np.zeros_like(ground)
    for lx in (-5.25, -1.75, 1.75, 5.25):
        lanes |= np.abs(x - lx) < 0.08
    dashed = (np.floor(np.nan_to_num(y) / 3) % 2 == 0) | (np.abs(np.abs(x) - 5.25) < 0.1)
    img[lanes & dashed & ground] = (235, 235, 235)
    dist = np.nan_to_num(np.hypot(x - centre[0], y - centre[1]), nan=1e9, posinf=1e9)
    haze = np.clip(dist / 150.0, 0, 1)[..., None]
    sky_row = np.clip((v / height)[..., None], 0, 1)
    sky = np.concatenate([235 - 80 * sky_row, 200 - 60 * sky_row, 150 - 40 * sky_row], -1)
    img = np.where(ground[..., None], img * (1 - haze) + np.array([210, 200, 190]) * haze, sky)
    return np.clip(img, 0, 255).astype(np.uint8)


def _box_corners(center, size, yaw) -> np.ndarray:
    dx, dy, dz = (s / 2 for s in size)
    local = np.array([[sx * dx, sy * dy, sz * dz] for sz in (-1, 1) for sy in (-1, 1) for sx in (-1, 1)])
    c, s = math.cos(yaw), math.sin(yaw)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    return local @ rot.T + np.asarray(center)


_FACES = [(0, 1, 3, 2), (4, 5, 7, 6), (0, 1, 5, 4), (2, 3, 7, 6), (0, 2, 6, 4), (1, 3, 7, 5)]
_SHADE = [0.55, 1.0, 0.8, 0.7, 0.85, 0.75]


def render_frame(background: np.ndarray, camera: Camera, boxes: list[tuple], t_s: float) -> np.ndarray:
    """The background with the boxes at time ``t_s`` drawn over it (far to near)."""
    height, width = background.shape[:2]
    img = background.copy()
    K = np.diag([width / camera.width, height / camera.height, 1.0]) @ np.array(camera.intrinsics)
    T = np.array(camera.lidar2cam)
    polys = []
    for center, size, yaw, vel, colour in boxes:
        c = np.asarray(center) + np.asarray(vel) * t_s
        corners = _box_corners(c, size, yaw)
        cam = corners @ T[:3, :3].T + T[:3, 3]
        if np.any(cam[:, 2] < 0.5):
            continue
        px = cam @ K.T
        px = px[:, :2] / px[:, 2:3]
        if (px[:, 0].max() < 0 or px[:, 0].min() > width or px[:, 1].max() < 0 or px[:, 1].min() > height):
            continue
        for f, shade in zip(_FACES, _SHADE):
            polys.append((float(cam[list(f), 2].mean()), px[list(f)], tuple(int(ch * shade) for ch in colour)))
    for _, pts, colour in sorted(polys, key=lambda p: -p[0]):
        cv2.fillConvexPoly(img, np.round(pts * 16).astype(np.int32), colour, lineType=cv2.LINE_AA, shift=4)
    return img


def _encode_video(images: list[np.ndarray], codec: str, fps: float) -> list[bytes]:
    import av

    h, w = images[0].shape[:2]
    n = len(images)
    cc = camera_encoder(codec, w, h, gop=n, fps=fps)
    out: list[Any] = []
    for k, img in enumerate(images):
        frame = av.VideoFrame.from_ndarray(img, format="bgr24")
        frame.pts = k
        out.extend(bytes(p) for p in cc.encode(frame))
    out.extend(bytes(p) for p in cc.encode(None))
    if len(out) != n or not is_keyframe(out[0], codec):
        raise SourceError(f"synthetic {codec} encoding gave {len(out)} access units for {n} pictures")
    return out


def _check_raw_size(encoding: str, w: int, h: int) -> None:
    if w % 2 or (encoding == "nv12" and h % 2):
        raise SourceError(f"{encoding.upper()} needs an even width{' and height' if encoding == 'nv12' else ''}; "
                          f"the camera is {w}x{h}")


def encode_raw_yuv(bgr: np.ndarray, encoding: str, matrix: str = "bt601", rng: str = "limited") -> bytes:
    """An HxWx3 uint8 BGR picture as one tightly packed raw camera frame (the layouts of
    :mod:`dvpipe.backends._raw_yuv`): ``uyvy`` / ``yuyv`` (4:2:2 packed, ``2 * W * H`` bytes; W even)
    or ``nv12`` (Y plane, then interleaved U V per 2x2 block; ``W * H * 3 / 2`` bytes; W and H even).

    The inverse of that module's conversion, for the camera's ``yuv_matrix`` / ``yuv_range``:
    ``Y' = Kr R + (1 - Kr - Kb) G + Kb B``, ``Cb = (B - Y') / (2 (1 - Kb))``, ``Cr = (R - Y') / (2 (1 - Kr))``
    (0..255 scale), then ``Y = y0 + Y' / ys``, ``U = 128 + Cb / cs``, ``V = 128 + Cr / cs`` (limited:
    16, 255/219, 255/224; full: 0, 1, 1), in float64, rounded half up, clipped to 0..255. Chroma is the
    mean of the pixel pair (4:2:2) or 2x2 block (4:2:0) before rounding, as a camera's chroma filter
    would. Decoded, it gives back the picture within the quantisation where the colour is flat over the
    pair or block (2 levels; 3 through OpenCV's fixed-point decode: tests/video/test_synthetic_raw_yuv.py) and
    the pair's or block's mean chroma at colour edges.
    """
    if encoding not in RAW_YUV_ENCODINGS:
        raise ConfigError(f"encode_raw_yuv: {encoding!r} is not a raw YUV encoding; give one of "
                          f"{', '.join(RAW_YUV_ENCODINGS)}")
    if bgr.dtype != np.uint8 or bgr.ndim != 3 or bgr.shape[2] != 3:
        raise ConfigError(f"encode_raw_yuv needs an HxWx3 uint8 BGR picture, got {bgr.dtype} {bgr.shape}; "
                          "convert it first (e.g. cv2.cvtColor(..., cv2.COLOR_GRAY2BGR), .astype(np.uint8))")
    h, w = bgr.shape[:2]
    _check_raw_size(encoding, w, h)
    kr, kb = MATRICES[matrix]
    y0, ys, cs = RANGES[rng]
    b, g, r = (bgr[..., k].astype(np.float64) for k in range(3))
    yp = kr * r + (1.0 - kr - kb) * g + kb * b
    cb = (b - yp) / (2 * (1 - kb))
    cr = (r - yp) / (2 * (1 - kr))

    def q(x: np.ndarray) -> np.ndarray:
        return np.clip(np.floor(x + 0.5), 0, 255).astype(np.uint8)

    y = q(y0 + yp / ys)
    if encoding == "nv12":
        u = cb.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
        v = cr.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
        uv = np.stack([q(128 + u / cs), q(128 + v / cs)], axis=-1).reshape(h // 2, w)
        return y.tobytes() + uv.tobytes()
    u = q(128 + cb.reshape(h, w // 2, 2).mean(axis=2) / cs)
    v = q(128 + cr.reshape(h, w // 2, 2).mean(axis=2) / cs)
    y0s, y1s = y[:, 0::2], y[:, 1::2]
    order = (u, y0s, v, y1s) if encoding == "uyvy" else (y0s, u, y1s, v)
    return np.stack(order, axis=-1).tobytes()


@dataclass
class SyntheticOptions:
    """The keys of ``type: synthetic``."""

    fps: float = _options.fps(30.0)
    resolution: Optional[tuple[int, int]] = option(None, "rendered size (default: the camera's)")
    cycle: int = option(16, "frames rendered and encoded at open, then repeated", minimum=1, maximum=1000)
    quality: int = option(90, "JPEG quality", minimum=1, maximum=100)
    frames: Optional[int] = option(None, "frames before the end (null: endless)", minimum=1, maximum=MAX_FRAMES)
    start_ns: Optional[int] = _options.start_ns("capture time of frame 0 (ns since the Unix epoch; default: the "
                                                "run's start)")
    realtime: bool = option(True, "a live camera: frame k captured at start + k / fps on the wall clock")


@register_source("synthetic")
class SyntheticSource(Source):
    """Renders a sample-like scene through the camera's calibration; capture time ``start + k / fps`` (on
    the wall clock, live, with ``realtime``)."""

    Options = SyntheticOptions
    uri_help = None
    live_help = "yes, unless `realtime: false`"

    @classmethod
    def is_live(cls, options: Mapping[str, Any]) -> bool:
        return bool(options.get("realtime", True))

    @classmethod
    def validate(cls, options: SyntheticOptions, ctx: SourceContext) -> SyntheticOptions:
        if ctx.uri is not None:
            ctx.err("uri", "a synthetic source takes no uri")
        enc, size = ctx.encoding, ctx.size
        h, w = options.resolution or size
        if enc in RAW_YUV_ENCODINGS and options.resolution is not None and tuple(options.resolution) != tuple(size):
            ctx.err("resolution", f"a raw {enc.upper()} frame has the camera's size {size[1]}x{size[0]} "
                                  f"(camera {ctx.camera}); drop resolution:")
        if enc in RAW_YUV_ENCODINGS and (size[1] % 2 or (enc == "nv12" and size[0] % 2)):
            ctx.err(None, f"camera {ctx.camera} is {size[1]}x{size[0]}: {enc.upper()} frames need an even "
                          f"width{' and height' if enc == 'nv12' else ''}")
        if options.cycle * w * h * 3 > _CYCLE_MAX_BYTES:
            ctx.err("cycle", f"{options.cycle} frames of {w}x{h} take {options.cycle * w * h * 3 / 2 ** 30:.1f} GiB "
                             f"while the cycle is encoded (at most {_CYCLE_MAX_BYTES >> 30} GiB); use a shorter cycle")
        return options

    def __init__(self, camera: Camera, cfg):
        super().__init__(camera, cfg)
        self.live = self.is_live(self.options)
        self.backoff = Backoff(100.0, 1000.0, 2.0, 0) if self.live else None
        self._cycle: Optional[list] = None
        self._resync = False

    def _prepare(self) -> None:
        o = self.options
        h, w = o.get("resolution") or (self.camera.height, self.camera.width)
        if self.camera.encoding in RAW_YUV_ENCODINGS and (w, h) != (self.camera.width, self.camera.height):
            raise SourceError(f"camera {self.camera.name}: a raw {self.camera.encoding.upper()} frame has the "
                              f"camera's size {self.camera.width}x{self.camera.height}, so the synthetic "
                              f"resolution {w}x{h} cannot be used; drop resolution: or declare that size")
        if self.camera.encoding in RAW_YUV_ENCODINGS:
            _check_raw_size(self.camera.encoding, w, h)  # before rendering: fail at once
        fps = float(o.get("fps", 30.0))
        n = int(o.get("cycle", 16))
        bg = render_background(self.camera, w, h)
        boxes = _boxes()
        images = [render_frame(bg, self.camera, boxes, k / fps) for k in range(n)]
        enc = self.camera.encoding
        if enc == "jpeg":
            q = [int(cv2.IMWRITE_JPEG_QUALITY), int(o.get("quality", 90))]
            self._cycle = [cv2.imencode(".jpg", im, q)[1].tobytes() for im in images]
        elif enc == "png":
            q = [int(cv2.IMWRITE_PNG_COMPRESSION), 1]
            self._cycle = [cv2.imencode(".png", im, q)[1].tobytes() for im in images]
        elif enc in RAW_YUV_ENCODINGS:  # a GMSL / V4L2 camera's frames, in the camera's colour
            matrix, rng = colour_of(self.camera)
            self._cycle = [encode_raw_yuv(im, enc, matrix, rng) for im in images]
        elif enc == "raw":
            for im in images:
                im.setflags(write=False)
            self._cycle = images
        else:
            self._cycle = _encode_video(images, enc, fps)
            self._keys = [is_keyframe(au, enc) for au in self._cycle]

    def _open(self) -> None:
        if self._cycle is None:
            self._prepare()
        if getattr(self, "_t0_wall", None) is None:  # a reopen after a disconnect keeps the clock
            start = self.options.get("start_ns")
            if start is not None:  # a fixed capture grid (reproducible runs): frame 0 is released now
                self._t0_wall, self._t0_mono = int(start), now_ns()
            else:
                self._t0_wall = int(self.run_start_ns or wall_ns())
                self._t0_mono = to_monotonic_ns(self._t0_wall)
            self._k = 0
            self.seq = 0
            self._resync = self.live  # the camera starts capturing now (on the run's grid), at a keyframe
        elif self.live:
            self._resync = True  # after a reconnect: resume now (at a keyframe for video)
        else:  # a recording opened again (run.loop's next pass): from its first frame, as a file starts over
            self._k = 0
            self.seq = 0

    def _period_ns(self) -> float:
        return 1e9 / float(self.options.get("fps", 30.0))

    def _skip_to_now(self) -> None:
        due = int((now_ns() - self._t0_mono) // self._period_ns())
        if due > self._k:
            self._k = due

    def _read(self) -> Optional[Item]:
        limit = self.options.get("frames")
        if limit is not None and self.seq >= limit:
            return None
        period = self._period_ns()
        video = self.camera.encoding in VIDEO_ENCODINGS
        assert self._cycle is not None  # made by open()
        if self.live:
            # a live camera does not keep frames nobody read; a video stream does (its encoder
            # coded every picture), except across a reconnect, which resumes at the next keyframe
            if not video or self._resync:
                self._skip_to_now()
            if video and self._resync:
                while not self._keys[self._k % len(self._cycle)]:
                    self._k += 1
            self._resync = False
            release = self._t0_mono + int(self._k * period)
            wait = release - now_ns()
            if wait > 0 and self.stop.wait(wait / 1e9):
                return None
        k = self._k
        self._k += 1
        data = self._cycle[k % len(self._cycle)]
        capture = self._t0_wall + int(round(k * period))
        mono = self._t0_mono + int(round(k * period)) if self.live else None
        key = self._keys[k % len(self._cycle)] if video else None
        fmt = PixelFormat.BGR if self.camera.encoding == "raw" else PixelFormat.ENCODED
        return self._item(data, capture, keyframe=key, pixel_format=fmt, capture_mono_ns=mono)
