"""V4L2 capture of dvpipe's own: memory-mapped streaming I/O through the kernel's video API
(``linux/videodev2.h``), never blocking, so that the runner's I/O loop serves V4L2 cameras with the
others on one thread.

:class:`V4l2Capture` opens a capture device, sets its pixel format, size and frame rate, maps
:data:`BUFFERS` driver buffers and queues them; ``receive()`` then dequeues every filled buffer without
waiting, copies its bytes out (``bytesused``; raw YUV with the row padding of ``bytesperline``
removed) and gives the buffer back. Each :class:`Captured` frame keeps what the driver says of it:
its sequence number (a gap: frames the driver dropped, usually for want of a free buffer), its
timestamp (``CLOCK_MONOTONIC``, dvpipe's clock, when the driver stamps that clock; end of frame or
start of exposure) and its error flag (``V4L2_BUF_FLAG_ERROR``: the data may be damaged).

Both capture APIs are spoken: the single-planar one and the multi-planar one
(``V4L2_CAP_VIDEO_CAPTURE_MPLANE``, which many SoC camera interfaces offer alone, and which FFmpeg's
``v4l2`` input does not read): a frame whose planes come in separate buffers (NV12 as ``NM12``, luma
and chroma apart) is joined into the one layout of the camera's encoding. Formats: :data:`FOURCC`
(YUYV, UYVY, NV12 -- or NM12 where the device has no NV12 --, MJPEG). The structure layouts are those
of 64-bit Linux (x86-64, AArch64), checked against the kernel's header by the tests. H.264 cameras and
32-bit systems are read by FFmpeg's ``v4l2`` input (``reader: ffmpeg``); a device without streaming
I/O by neither (FFmpeg's input asks for ``V4L2_CAP_STREAMING`` too).
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
import platform
import ctypes
import struct
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .base import SourceError, StreamLost, wait_readable

__all__ = ["V4l2Capture", "Captured", "Negotiated", "FOURCC", "BUFFERS", "V4l2Error", "V4l2Lost", "reader_refusal"]

#: driver buffers mapped per device: the frames the driver can fill before the reader takes one
BUFFERS = 4

#: camera encoding -> the V4L2 pixel format read for it
FOURCC = {"yuyv": "YUYV", "uyvy": "UYVY", "nv12": "NV12", "jpeg": "MJPG"}

# -- the kernel's API: structures (64-bit layout, offsets as in the header) and ioctl numbers --------
_CAPABILITY = struct.Struct("=16s32s32sIII12x")  # struct v4l2_capability, 104 bytes
_FMTDESC = struct.Struct("=III32sII12x")  # struct v4l2_fmtdesc, 64 bytes
# struct v4l2_format, 208 bytes: type, 4 bytes of padding (the union holds pointers), struct
# v4l2_pix_format (width, height, pixelformat, field, bytesperline, sizeimage, colorspace, priv,
# flags, ycbcr_enc, quantization, xfer_func), the rest of the 200-byte union
_FORMAT = struct.Struct("=I4x12I152x")
_REQBUFS = struct.Struct("=IIIIB3x")  # struct v4l2_requestbuffers, 20 bytes
# the same with struct v4l2_pix_format_mplane (packed): width, height, pixelformat, field, colorspace,
# 8 x struct v4l2_plane_pix_format (sizeimage, bytesperline, 12 reserved bytes), num_planes, flags,
# ycbcr_enc, quantization, xfer_func, 7 reserved bytes; then the union's last 8 bytes
_FORMAT_MP = struct.Struct("=I4x5I" + "II12x" * 8 + "5B7x8x")
# struct v4l2_buffer, 88 bytes: index, type, bytesused, flags, field, (pad), timeval, timecode,
# sequence, memory, m.offset (the union's first 4 of 8 bytes), length, reserved2, request_fd, (pad)
_BUFFER = struct.Struct("=IIIII4xqq16sIII4xIIi4x")
# the same for the multi-planar API: m.planes, a pointer to ``length`` struct v4l2_plane
_BUFFER_MP = struct.Struct("=IIIII4xqq16sIIQIIi4x")
# struct v4l2_plane, 64 bytes: bytesused, length, m.mem_offset (the union's first 4 of 8 bytes),
# data_offset, 44 reserved bytes
_PLANE = struct.Struct("=III4xI44x")
_MAX_PLANES = 8
# struct v4l2_streamparm, 204 bytes: type, struct v4l2_captureparm (capability, capturemode,
# timeperframe numerator / denominator, extendedmode, readbuffers, reserved[4]), the union's rest
_STREAMPARM = struct.Struct("=IIIIIII16x160x")


def _ioc(direction: int, number: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (ord("V") << 8) | number


_READ, _WRITE, _BOTH = 2, 1, 3
VIDIOC_QUERYCAP = _ioc(_READ, 0, _CAPABILITY.size)
VIDIOC_ENUM_FMT = _ioc(_BOTH, 2, _FMTDESC.size)
VIDIOC_G_FMT = _ioc(_BOTH, 4, _FORMAT.size)
VIDIOC_S_FMT = _ioc(_BOTH, 5, _FORMAT.size)
VIDIOC_REQBUFS = _ioc(_BOTH, 8, _REQBUFS.size)
VIDIOC_QUERYBUF = _ioc(_BOTH, 9, _BUFFER.size)
VIDIOC_QBUF = _ioc(_BOTH, 15, _BUFFER.size)
VIDIOC_DQBUF = _ioc(_BOTH, 17, _BUFFER.size)
VIDIOC_STREAMON = _ioc(_WRITE, 18, 4)
VIDIOC_STREAMOFF = _ioc(_WRITE, 19, 4)
VIDIOC_G_PARM = _ioc(_BOTH, 21, _STREAMPARM.size)
VIDIOC_S_PARM = _ioc(_BOTH, 22, _STREAMPARM.size)

_CAPTURE, _CAPTURE_MPLANE = 1, 9  # V4L2_BUF_TYPE_VIDEO_CAPTURE, V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE
_MMAP = 1  # V4L2_MEMORY_MMAP
_FIELD_NONE = 1  # progressive frames
_CAP_VIDEO_CAPTURE, _CAP_VIDEO_CAPTURE_MPLANE = 0x1, 0x1000
_CAP_STREAMING, _CAP_DEVICE_CAPS = 0x04000000, 0x80000000
_CAP_TIMEPERFRAME = 0x1000
_BUF_FLAG_ERROR = 0x40
_BUF_TIMESTAMP_MASK, _BUF_TIMESTAMP_MONOTONIC = 0xE000, 0x2000
_BUF_TSTAMP_SRC_MASK, _BUF_TSTAMP_SRC_SOE = 0x70000, 0x10000

# V4L2's colorimetry codes -> dvpipe's yuv_matrix / yuv_range (the header's V4L2_MAP_*_DEFAULT rules)
_COLORSPACE_SMPTE240M, _COLORSPACE_REC709, _COLORSPACE_JPEG, _COLORSPACE_BT2020, _COLORSPACE_DCI_P3 = 2, 3, 7, 10, 12
_YCBCR_ENC = {1: "bt601", 2: "bt709", 3: "bt601", 4: "bt709", 5: "bt601", 6: "bt2020",
              7: "bt2020 constant luminance", 8: "smpte240m"}


def fourcc_code(text: str) -> int:
    """A four-character code as V4L2's ``pixelformat`` integer (little-endian)."""
    return struct.unpack("<I", text.encode("ascii").ljust(4)[:4])[0]


def fourcc_text(code: int) -> str:
    """V4L2's ``pixelformat`` integer as its four characters (``-BE``: the big-endian flag, bit 31)."""
    text = struct.pack("<I", code & 0x7FFFFFFF).decode("ascii", "replace").rstrip()
    return text + "-BE" if code & 0x80000000 else text


#: machines (``platform.machine()``) whose kernel numbers ioctls the generic way (asm-generic/ioctl.h: 2
#: direction bits, read 2, write 1); powerpc, mips, sparc, alpha and parisc number them otherwise
_GENERIC_IOCTL_MACHINES = ("x86_64", "amd64", "aarch64", "arm64", "riscv64", "loongarch64", "s390x")


def reader_refusal() -> Optional[str]:
    """Why this process cannot use :class:`V4l2Capture` at all (a 32-bit Python: other structure layouts;
    a machine whose ioctl numbers are not the generic ones), or None."""
    if struct.calcsize("P") != 8:
        return "dvpipe's V4L2 reader speaks the 64-bit structure layout; this Python is 32-bit"
    machine = platform.machine().lower()
    if machine not in _GENERIC_IOCTL_MACHINES:
        return (f"dvpipe's V4L2 reader numbers its ioctls as x86-64, aarch64, riscv64, loongarch64 and s390x do, "
                f"not as {machine or 'this machine'} does")
    return None


class V4l2Error(SourceError):
    """The device refused something (the message says what, and what it offers)."""


class V4l2Lost(StreamLost):
    """The device stopped streaming: unplugged (``ENODEV``), a fatal driver error (``EIO``, ``EPIPE``)."""


@dataclass(frozen=True)
class Negotiated:
    """What the device agreed to: frame size (pixels), format, line stride (bytes), frame rate and colorimetry.

    ``yuv_matrix`` / ``yuv_range``: the Y'CbCr encoding the device says it uses, in dvpipe's names
    (``bt601``, ``bt709``, ...; ``limited`` / ``full``), resolved by the kernel header's default rules
    where the device says "default"."""

    width: int
    height: int
    fourcc: str
    bytesperline: int
    sizeimage: int
    fps: Optional[float]
    yuv_matrix: str
    yuv_range: str


@dataclass(frozen=True)
class Captured:
    """One dequeued frame.

    Attributes:
        data: the frame's bytes: raw YUV tightly packed (no row padding), MJPEG as the device gave it.
        sequence: the driver's frame counter (consecutive unless the driver dropped frames).
        timestamp_ns: ``CLOCK_MONOTONIC`` (ns; dvpipe's :func:`~dvpipe.latency.clock.now_ns`) when the
            driver stamps that clock, else None.
        start_of_exposure: the timestamp is the exposure's start (else the frame's end).
        damaged: why the data cannot be trusted (the driver's error flag, a short frame), or None.
    """

    data: bytes
    sequence: int
    timestamp_ns: Optional[int]
    start_of_exposure: bool
    damaged: Optional[str] = None


def _plane_rows(fourcc: str, width: int, height: int) -> list[tuple[int, int]]:
    """``(rows, bytes per row)`` of each memory plane of a raw frame, tightly packed; [] for compressed
    formats (the bytes the driver filled)."""
    if fourcc in ("YUYV", "UYVY"):
        return [(height, width * 2)]
    if fourcc == "NV12":
        return [(height * 3 // 2, width)]
    if fourcc == "NM12":  # NV12 with luma and chroma in two buffers
        return [(height, width), (height // 2, width)]
    return []


#: the multi-planar form of a camera's format, read where the device does not offer the single-buffer one
_SEPARATE_PLANES = {"NV12": "NM12"}


class V4l2Capture:
    """A V4L2 capture device streaming into memory-mapped buffers, read without blocking.

    ``open()`` negotiates and starts streaming; ``fileno()`` is what to poll (readable: a buffer is
    filled); ``receive()`` moves every filled buffer's frame into :attr:`frames`; ``wait(s)`` polls for
    at most ``s`` seconds; ``close()`` stops streaming and releases everything.
    """

    def __init__(self, path: str, fourcc: str, size: Optional[tuple[int, int]] = None, fps: Optional[float] = None,
                 buffers: int = BUFFERS, bytesperline: int = 0):
        """``size``: ``(height, width)`` pixels to ask for (None: the device's current size); ``fps``:
        frames per second to ask for (None: the device's current rate); ``bytesperline``: the row
        stride to ask for (0: the driver's choice; drivers may pad rows, the reader removes it)."""
        self.path, self.fourcc, self.size, self.fps, self.buffers = path, fourcc, size, fps, buffers
        self.bytesperline = bytesperline
        self.frames: deque[Captured] = deque()
        self.negotiated: Optional[Negotiated] = None
        self._fd = -1
        self._maps: list[list[mmap.mmap]] = []  # per buffer, its planes' maps
        self._streaming = False
        self._type = _CAPTURE  # or _CAPTURE_MPLANE: the API the device speaks
        self._planes = 1  # memory planes per buffer (multi-planar API)
        self._plane_array = ctypes.create_string_buffer(_PLANE.size * _MAX_PLANES)  # m.planes of each ioctl
        self._strides: tuple[int, ...] = ()

    # -- opening ---------------------------------------------------------------------------------------
    def open(self) -> Negotiated:
        """Open, negotiate, map and queue the buffers, start streaming. :class:`V4l2Error` on refusal."""
        why = reader_refusal()
        if why:
            raise V4l2Error(why)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise V4l2Error(f"cannot open {self.path}: {e.strerror}") from None
        try:
            self._check_capabilities()
            self.negotiated = self._set_format()
            self._map_buffers()
            self._ioctl(VIDIOC_STREAMON, struct.pack("=I", self._type), "start streaming (VIDIOC_STREAMON)")
            self._streaming = True
        except BaseException:
            self.close()
            raise
        return self.negotiated

    def _ioctl(self, request: int, payload: bytes, what: str) -> bytearray:
        buf = bytearray(payload)
        try:
            fcntl.ioctl(self._fd, request, buf, True)
        except OSError as e:
            cls = V4l2Lost if e.errno in (errno.ENODEV, errno.EIO, errno.EPIPE) else V4l2Error
            raise cls(f"{self.path}: cannot {what}: {e.strerror}") from None
        return buf

    def _check_capabilities(self) -> None:
        fields = _CAPABILITY.unpack(self._ioctl(VIDIOC_QUERYCAP, bytes(_CAPABILITY.size), "query its capabilities"))
        driver, card, caps, device_caps = fields[0], fields[1], fields[4], fields[5]
        if caps & _CAP_DEVICE_CAPS:
            caps = device_caps
        card_name, driver_name = (t.rstrip(b"\0").decode(errors="replace") for t in (card, driver))
        name = f"{self.path} ({card_name}, driver {driver_name})"
        if caps & _CAP_VIDEO_CAPTURE:
            self._type = _CAPTURE
        elif caps & _CAP_VIDEO_CAPTURE_MPLANE:
            self._type = _CAPTURE_MPLANE
        else:
            raise V4l2Error(f"{name} is not a video capture device")
        if not caps & _CAP_STREAMING:
            raise V4l2Error(f"{name} has no streaming I/O (memory-mapped buffers), which dvpipe's reader and "
                            "FFmpeg's v4l2 input both need")

    def offered_formats(self) -> list[str]:
        """The pixel formats the device offers for capture (four-character codes, in its order)."""
        out = []
        for index in range(256):
            try:
                got = self._ioctl(VIDIOC_ENUM_FMT, _FMTDESC.pack(index, self._type, 0, b"", 0, 0), "list formats")
            except V4l2Error:
                break
            out.append(fourcc_text(_FMTDESC.unpack(got)[4]))
        return out

    def _set_format(self) -> Negotiated:
        if self._type == _CAPTURE_MPLANE:
            return self._set_format_mplane()
        current = _FORMAT.unpack(self._ioctl(VIDIOC_G_FMT, _FORMAT.pack(_CAPTURE, *([0] * 12)), "read its format"))
        height, width = self.size if self.size is not None else (current[2], current[1])
        want = list(current[1:])
        want[0:4] = [width, height, fourcc_code(self.fourcc), _FIELD_NONE]
        want[4:6] = [self.bytesperline, 0]  # sizeimage: the driver's
        got = _FORMAT.unpack(self._ioctl(VIDIOC_S_FMT, _FORMAT.pack(_CAPTURE, *want), f"set format {self.fourcc}"))
        _, w, h, pixelformat, field, bpl, sizeimage, colorspace, _, _, ycbcr_enc, quantization, _ = got
        self._check_agreed(self.fourcc, pixelformat, (width, height), (w, h), field)
        self._strides = (bpl,)
        self._check_strides(self.fourcc, w, h)
        matrix, rng = _colorimetry(colorspace, ycbcr_enc, quantization)
        return Negotiated(w, h, self.fourcc, bpl, sizeimage, self._set_rate(), matrix, rng)

    def _set_format_mplane(self) -> Negotiated:
        """The multi-planar API's negotiation: the camera's format, or its separate-planes form (NM12 for
        NV12) where the device offers only that; each plane's row stride."""
        blank = [0] * (len(_FORMAT_MP.unpack(bytes(_FORMAT_MP.size))) - 1)
        current = _FORMAT_MP.unpack(self._ioctl(VIDIOC_G_FMT, _FORMAT_MP.pack(_CAPTURE_MPLANE, *blank),
                                                "read its format"))
        height, width = self.size if self.size is not None else (current[2], current[1])
        fourcc = self.fourcc
        if fourcc in _SEPARATE_PLANES and fourcc not in self.offered_formats():
            fourcc = _SEPARATE_PLANES[fourcc]
        want = list(current[1:])
        want[0:4] = [width, height, fourcc_code(fourcc), _FIELD_NONE]
        for i in range(_MAX_PLANES):  # sizeimage and bytesperline of each plane: the driver's (or the stride asked)
            want[5 + 2 * i:7 + 2 * i] = [0, self.bytesperline if i < 2 else 0]
        got = _FORMAT_MP.unpack(self._ioctl(VIDIOC_S_FMT, _FORMAT_MP.pack(_CAPTURE_MPLANE, *want),
                                            f"set format {fourcc}"))
        _, w, h, pixelformat, field, colorspace = got[:6]
        planes = got[6:6 + 2 * _MAX_PLANES]
        num_planes, _flags, ycbcr_enc, quantization = got[22:26]
        self._check_agreed(fourcc, pixelformat, (width, height), (w, h), field)
        expected = len(_plane_rows(fourcc, w, h)) or 1
        if not 1 <= num_planes <= _MAX_PLANES or num_planes != expected:
            raise V4l2Error(f"{self.path} gives {fourcc} in {num_planes} memory planes; dvpipe's reader expects "
                            f"{expected}")
        self._planes = num_planes
        self._strides = tuple(planes[2 * i + 1] for i in range(num_planes))
        self._check_strides(fourcc, w, h)
        matrix, rng = _colorimetry(colorspace, ycbcr_enc, quantization)
        return Negotiated(w, h, fourcc, self._strides[0], sum(planes[2 * i] for i in range(num_planes)),
                          self._set_rate(), matrix, rng)

    def _check_agreed(self, fourcc: str, pixelformat: int, asked: tuple[int, int], got: tuple[int, int],
                      field: int) -> None:
        """A one-line :class:`V4l2Error` unless the driver agreed to ``fourcc`` at the ``asked`` (width,
        height), progressive; a format it does not offer lists what it offers."""
        if fourcc_text(pixelformat) != fourcc:
            offered = self.offered_formats()
            listed = ", ".join(offered[:12]) + (f", ... ({len(offered)} in all)" if len(offered) > 12 else "")
            raise V4l2Error(f"{self.path} does not capture {self.fourcc}; it offers {listed or 'nothing'}")
        if got != asked:
            raise V4l2Error(f"{self.path} does not capture {fourcc} at {asked[0]}x{asked[1]}; it chose "
                            f"{got[0]}x{got[1]}")
        if field not in (0, _FIELD_NONE):
            raise V4l2Error(f"{self.path} gives interlaced fields (field {field}); dvpipe's reader takes "
                            "progressive frames")

    def _check_strides(self, fourcc: str, width: int, height: int) -> None:
        """A one-line :class:`V4l2Error` where the driver gives a raw plane's rows a stride (bytesperline)
        shorter than the row: its frames cannot be read as rows (they would overlap)."""
        for k, ((_rows, row), stride) in enumerate(zip(_plane_rows(fourcc, width, height), self._strides)):
            if stride < row:
                raise V4l2Error(f"{self.path} gives {fourcc} rows of plane {k} a stride of {stride} bytes, shorter "
                                f"than a row of {width} pixels ({row} bytes)")

    def _set_rate(self) -> Optional[float]:
        """The frame rate the device runs at after asking for :attr:`fps` (frames per second), or None where it
        does not say: a driver without VIDIOC_G_PARM (many SoC capture nodes: the rate is the sensor's)."""
        try:
            parm = self._ioctl(VIDIOC_G_PARM, _STREAMPARM.pack(self._type, *([0] * 6)), "read its frame rate")
        except V4l2Error:  # (unplugged: V4l2Lost, raised)
            return None
        _, capability, mode, num, den, ext, rb = _STREAMPARM.unpack(parm)
        if self.fps and capability & _CAP_TIMEPERFRAME:
            want = _STREAMPARM.pack(self._type, capability, mode, 1000, int(round(self.fps * 1000)), ext, rb)
            _, _, _, num, den, _, _ = _STREAMPARM.unpack(self._ioctl(VIDIOC_S_PARM, want, "set the frame rate"))
        return den / num if num and den else None

    def _map_buffers(self) -> None:
        got = self._ioctl(VIDIOC_REQBUFS, _REQBUFS.pack(self.buffers, self._type, _MMAP, 0, 0), "allocate buffers")
        count = _REQBUFS.unpack(got)[0]
        if count < 2:
            raise V4l2Error(f"{self.path} gave {count} capture buffer(s); at least 2 are needed")
        for index in range(count):
            info = self._ioctl(VIDIOC_QUERYBUF, self._buffer(index), "query a buffer")
            if self._type == _CAPTURE:
                offset, length = _BUFFER.unpack(info)[10:12]
                places = [(offset, length)]
            else:  # each plane's (bytesused, length, mem_offset, data_offset)
                places = [(plane[2], plane[1]) for plane in self._plane_info()]
            self._maps.append([mmap.mmap(self._fd, length, mmap.MAP_SHARED, mmap.PROT_READ, offset=offset)
                               for offset, length in places])
            self._ioctl(VIDIOC_QBUF, self._buffer(index), "queue a buffer")

    def _buffer(self, index: int) -> bytes:
        """A struct v4l2_buffer naming buffer ``index`` (multi-planar: its planes in :attr:`_plane_array`)."""
        if self._type == _CAPTURE:
            return _BUFFER.pack(index, _CAPTURE, 0, 0, 0, 0, 0, b"", 0, _MMAP, 0, 0, 0, 0)
        ctypes.memset(self._plane_array, 0, _PLANE.size * _MAX_PLANES)
        return _BUFFER_MP.pack(index, _CAPTURE_MPLANE, 0, 0, 0, 0, 0, b"", 0, _MMAP,
                               ctypes.addressof(self._plane_array), self._planes, 0, 0)

    def _plane_info(self) -> list[tuple[int, int, int, int]]:
        """``(bytesused, length, mem_offset, data_offset)`` of each plane the last ioctl filled in."""
        return [_PLANE.unpack_from(self._plane_array, i * _PLANE.size) for i in range(self._planes)]

    # -- reading -----------------------------------------------------------------------------------------
    def fileno(self) -> int:
        """The device's descriptor (readable when a buffer is filled), -1 when closed."""
        return self._fd

    def receive(self) -> int:
        """Dequeue every filled buffer into :attr:`frames` (never waits); returns how many.
        :class:`V4l2Lost` when the device stopped streaming."""
        if self._fd < 0:
            raise V4l2Lost(f"{self.path}: not open")
        n = 0
        while True:
            buf = bytearray(self._buffer(0))
            try:
                fcntl.ioctl(self._fd, VIDIOC_DQBUF, buf, True)
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    return n
                raise V4l2Lost(f"{self.path}: the device stopped streaming: {e.strerror}") from None
            index, _, bytesused, flags, _, sec, usec, _, sequence = _BUFFER.unpack(buf)[:9]
            # where each plane's data is: (bytes filled, from byte) of each plane's map
            used = [(bytesused, 0)] if self._type == _CAPTURE else [(u, d) for u, _, _, d in self._plane_info()]
            try:
                self.frames.append(self._frame(index, used, flags, sec, usec, sequence))
            finally:
                self._ioctl(VIDIOC_QBUF, self._buffer(index), "give a buffer back")
            n += 1

    def _frame(self, index: int, used: list[tuple[int, int]], flags: int, sec: int, usec: int,
               sequence: int) -> Captured:
        """Buffer ``index``'s frame: ``used`` is each plane's (bytes filled, data offset) in its map."""
        neg = self.negotiated
        assert neg is not None  # open() negotiated before streaming
        monotonic = flags & _BUF_TIMESTAMP_MASK == _BUF_TIMESTAMP_MONOTONIC
        stamp = sec * 1_000_000_000 + usec * 1000 if monotonic else None
        soe = flags & _BUF_TSTAMP_SRC_MASK == _BUF_TSTAMP_SRC_SOE
        damaged = "the driver flagged the buffer (V4L2_BUF_FLAG_ERROR)" if flags & _BUF_FLAG_ERROR else None
        maps, layout = self._maps[index], _plane_rows(neg.fourcc, neg.width, neg.height)
        if not layout:  # compressed (MJPEG): the bytes the driver filled
            filled, start = used[0]
            data = maps[0][start:filled] if filled > start else b""
            if not data:
                damaged = damaged or "an empty frame from the driver (0 bytes filled)"
            elif not data.startswith(b"\xff\xd8"):
                damaged = damaged or "not a JPEG picture (no SOI marker at its start)"
            return Captured(data, sequence, stamp, soe, damaged)
        parts: list = []  # each plane's rows, tight: a view of its map, or a copy where the rows are padded
        for view, (rows, row), stride, (filled, start) in zip(maps, layout, self._strides, used):
            if filled - start < (rows - 1) * stride + row:
                tight = sum(r * w for r, w in layout)
                return Captured(b"", sequence, stamp, soe,
                                damaged or f"a short frame: {filled - start} bytes of a plane of {rows * row} "
                                           f"({tight} in all) from the driver")
            if stride == row:
                parts.append(memoryview(view)[start:start + rows * row])
                continue
            padded = np.frombuffer(view, np.uint8, rows * stride - (stride - row), start)  # an export of the map
            parts.append(np.lib.stride_tricks.as_strided(padded, (rows, row), (stride, 1)).tobytes())  # rows tight
            del padded
        data = bytes(parts[0]) if len(parts) == 1 else b"".join(parts)  # one copy of the map's bytes
        parts.clear()  # the views export the maps, which cannot close while exported
        return Captured(data, sequence, stamp, soe, damaged)

    def wait(self, timeout_s: float) -> bool:
        """Whether a buffer is filled within ``timeout_s`` seconds."""
        if self._fd < 0:
            return False
        return wait_readable(self._fd, timeout_s)

    # -- closing -------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop streaming, unmap, close (never raises; closing an unplugged device may fail inside)."""
        if self._fd < 0:
            return
        if self._streaming:
            try:
                fcntl.ioctl(self._fd, VIDIOC_STREAMOFF, struct.pack("=I", self._type))
            except OSError:
                pass
            self._streaming = False
        for planes in self._maps:
            for m in planes:
                m.close()
        self._maps = []
        try:
            os.close(self._fd)
        except OSError:
            pass
        self._fd = -1


def _colorimetry(colorspace: int, ycbcr_enc: int, quantization: int) -> tuple[str, str]:
    """``(yuv_matrix, yuv_range)`` for V4L2's codes, "default" resolved as the header's
    ``V4L2_MAP_YCBCR_ENC_DEFAULT`` and ``V4L2_MAP_QUANTIZATION_DEFAULT`` (Y'CbCr formats) do."""
    if ycbcr_enc == 0:
        matrix = ("bt709" if colorspace in (_COLORSPACE_REC709, _COLORSPACE_DCI_P3) else
                  "bt2020" if colorspace == _COLORSPACE_BT2020 else "smpte240m" if colorspace == _COLORSPACE_SMPTE240M else "bt601")
    else:
        matrix = _YCBCR_ENC.get(ycbcr_enc, f"code {ycbcr_enc}")
    if quantization == 0:
        rng = "full" if colorspace == _COLORSPACE_JPEG else "limited"
    else:
        rng = "full" if quantization == 1 else "limited"
    return matrix, rng
