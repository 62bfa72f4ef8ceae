"""Stream changers stacked on any source: looping, real-time replay pacing, injected faults.

The runner builds ``source -> Looped -> Paced -> Faulty`` as the deployment asks:

* :class:`Looped` (``run.loop``): a recording starts over at its end; capture times continue
  (shifted by the recording's span plus one frame period) and sequence numbers keep counting.
* :class:`Paced` (``run.realtime``): each frame is delivered at ``t0 + (capture - capture_0) / speed``
  on the monotonic clock, as if captured now; that moment becomes its ``capture_mono_ns``.
* :class:`Faulty` (``source.faults``): corrupt, late, lost frames, stalls, disconnects, resolution
  changes and a source that never opens, at given frame numbers: to rehearse a deployment's policies
  and to test them.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import cv2
import numpy as np

from ...codecs import VIDEO_ENCODINGS
from ...latency import now_ns
from ...types import PixelFormat
from ...video import AccessUnit, VideoPacket, is_keyframe
from .base import Item, Source, SourceError, SourceWrapper, StreamLost, wrapper_of

__all__ = ["Looped", "Limited", "Paced", "ReplayClock", "Faulty", "corrupt_data"]


class Looped(SourceWrapper):
    """Start a recording over at its end, continuing capture times and sequence numbers.

    Each new pass starts one frame period (ns) after the last frame delivered: its shift is computed
    from the first capture time the reopened source reports, so it is right whether the inner source
    restarts its capture times at each open (files: pts) or keeps counting (a per-source frame
    counter). The period is the one seen between the first two frames; a one-frame recording repeats
    every :attr:`SINGLE_FRAME_PERIOD_NS` (10 Hz).
    """

    SINGLE_FRAME_PERIOD_NS = 100_000_000

    def __init__(self, inner: Source):
        super().__init__(inner)
        self._count = 0
        self._shift_ns = 0
        self._first: Optional[int] = None  # first and last capture (as the inner source reports) of this pass
        self._last: Optional[int] = None
        self._last_out: Optional[int] = None  # last capture delivered (shifted)
        self._next_pass_ns: Optional[int] = None  # where the next pass's first frame goes
        self._period: Optional[int] = None
        self.loops = 0

    def read(self) -> Optional[Item]:
        item = self.inner.read()
        if item is None:
            if self._count == 0 or self._first is None:
                return None
            assert self._last_out is not None  # set with the first frame of the pass
            self._next_pass_ns = self._last_out + self._pass_gap_ns()
            self.inner.reopen()
            self._first = self._last = None
            self.loops += 1
            item = self.inner.read()
            if item is None:
                return None
        cap = item.frame.capture_epoch_ns
        if self._first is None:
            self._first = cap
            if self._next_pass_ns is not None:
                self._shift_ns = self._next_pass_ns - cap
        elif self._last is not None and cap > self._last and self._period is None:
            self._period = cap - self._last
        self._last = cap
        item.frame.capture_epoch_ns = cap + self._shift_ns
        self._last_out = item.frame.capture_epoch_ns
        if item.capture_mono_ns is not None:
            item.capture_mono_ns += self._shift_ns
        item.frame.seq = self._count
        self._count += 1
        return item

    def _pass_gap_ns(self) -> int:
        """From the last frame of a pass to the first of the next (ns): one frame period."""
        if self._period:
            return self._period
        assert self._last is not None and self._first is not None  # called at the end of a non-empty pass
        span = self._last - self._first
        return span if span > 0 else self.SINGLE_FRAME_PERIOD_NS


class Limited(SourceWrapper):
    """End a recording after ``count`` frames: a run of N frame sets uses N frames of a camera whose every
    frame joins a set, so nothing is read ahead only to be dropped at the stop. A frame the synchroniser
    drops instead (a faster camera's frames between sets, one without a partner: :meth:`credit`) is
    replaced by one more, and from the first such drop on the camera may read ``slack`` frames ahead (a
    drop is decided only once later frames came): those that the run does not use are dropped at its stop."""

    def __init__(self, inner: Source, count: int, slack: int = 3):
        super().__init__(inner)
        self.remaining = int(count)
        self.slack = int(slack)
        self._credited = False
        self._lock = threading.Lock()

    def read(self) -> Optional[Item]:
        with self._lock:
            if self.remaining <= 0:
                return None
        item = self.inner.read()
        if item is not None:
            with self._lock:
                self.remaining -= 1
        return item

    def credit(self) -> None:
        """One of this camera's frames left the run without joining a set: it may read one more."""
        with self._lock:
            self.remaining += 1 if self._credited else 1 + self.slack
            self._credited = True

    def refund(self) -> None:
        """A frame read here never reached the run (an injected loss, ``faults.lose``): one more may be read."""
        with self._lock:
            self.remaining += 1


class ReplayClock:
    """Shared by the paced sources of a run: capture time ``c0`` (the first frame read by any camera)
    is released at ``t0`` (when it was read); others at ``t0 + (capture - c0) / speed``.

    Args:
        speed: replay speed (2.0 = twice real time).
        now: the monotonic clock, ns (default :func:`dvpipe.latency.now_ns`; tests inject a fake one).
        wait: ``wait(stop_event, seconds) -> bool`` sleeps until the release or the stop (True when
            stopped); default ``stop_event.wait``. A fake clock advances its time here.
    """

    def __init__(self, speed: float = 1.0, *, now: Optional[Callable[[], int]] = None,
                 wait: Optional[Callable[[threading.Event, float], bool]] = None):
        self.speed = float(speed)
        self.c0_ns: Optional[int] = None
        self.t0_mono_ns: Optional[int] = None
        self.now = now or now_ns
        self.wait = wait or (lambda stop, seconds: stop.wait(seconds))
        self._lock = threading.Lock()

    def release_ns(self, capture_epoch_ns: int) -> int:
        """Monotonic time (ns) at which the frame captured at ``capture_epoch_ns`` (epoch ns) is released."""
        with self._lock:
            if self.c0_ns is None:
                self.c0_ns, self.t0_mono_ns = capture_epoch_ns, self.now()
            assert self.t0_mono_ns is not None  # set with c0_ns
            return self.t0_mono_ns + int((capture_epoch_ns - self.c0_ns) / self.speed)


class Paced(SourceWrapper):
    """Deliver a recording at its capture rate (times the clock's speed), as if captured now."""

    def __init__(self, inner: Source, clock: Optional[ReplayClock] = None):
        super().__init__(inner)
        self.live = True
        self.clock = clock or ReplayClock()

    def read(self) -> Optional[Item]:
        item = self.read_early()
        if item is None:
            return None
        assert item.capture_mono_ns is not None  # read_early sets it
        wait = item.capture_mono_ns - self.clock.now()
        if wait > 0:
            # a stop cuts the wait short: the frame, read, is still handed over (it enters and is dropped as
            # "shutdown" with the others)
            self.clock.wait(self.stop, wait / 1e9)
        return item

    def read_early(self) -> Optional[Item]:
        """The next frame at once, ``capture_mono_ns`` its release time (monotonic ns): the caller holds
        it until then (the runner's one reader thread for all recordings does, for every paced camera)."""
        item = self.inner.read()
        if item is not None:
            item.capture_mono_ns = self.clock.release_ns(item.frame.capture_epoch_ns)
        return item


def corrupt_data(data, pixel_format: PixelFormat):
    """Damage a frame so that its decoder rejects it (truncated image, zeroed access unit, bad array)."""
    if isinstance(data, np.ndarray):
        return np.zeros(data.shape, np.float32)  # not uint8: the raw-frame check rejects it
    if isinstance(data, VideoPacket):  # the access units delivered with this frame (decode order)
        units = [AccessUnit(u.data[:6] + bytes(len(u.data) - 6), u.pts_ns, u.keyframe, u.show)
                 if isinstance(u, AccessUnit) else u for u in data.units]
        return VideoPacket(units, data.want, data.by, data.end, data.lookahead, data.keyframe)
    b = bytes(data)
    if b[:3] == b"\xff\xd8\xff" or b[:4] == b"\x89PNG":
        return b[: max(8, len(b) // 2)]  # truncated: no EOI / IEND
    return b[:6] + bytes(len(b) - 6)  # an access unit whose NAL payloads are zeros


class _Resizer:
    """Re-encodes a video camera's stream at another size (for the resolution-change fault)."""

    def __init__(self, codec: str):
        import av

        self.codec = codec
        self.size: Optional[tuple[int, int]] = None
        self.dec = av.CodecContext.create("h264" if codec == "h264" else "hevc", "r")
        self.enc: Any = None  # an av VideoCodecContext (CodecContext.create's declared type lacks its video fields)
        self.n = 0

    def feed(self, au: bytes):
        """Decode (every access unit must pass here, to keep the reference chain)."""
        import av

        try:
            return self.dec.decode(av.Packet(au))
        except av.error.FFmpegError:
            return []

    def __call__(self, au: bytes, size: tuple[int, int]) -> bytes:
        """``au`` re-encoded at ``size``, ``(height, width)`` in pixels."""
        from fractions import Fraction

        import av

        frames = self.feed(au)
        if not frames:
            raise SourceError("resize fault: the decoder gave no picture")
        h, w = size
        img = cv2.resize(frames[-1].to_ndarray(format="bgr24"), (w, h), interpolation=cv2.INTER_AREA)  # dsize: (W, H)
        if self.enc is None or self.size != size:
            self.size = size
            self.n = 0
            name = "libx264" if self.codec == "h264" else "libx265"
            self.enc = av.CodecContext.create(name, "w")
            self.enc.width, self.enc.height, self.enc.pix_fmt = w, h, "yuv420p"
            self.enc.time_base = Fraction(1, 1000)
            self.enc.max_b_frames = 0
            self.enc.options = ({"preset": "ultrafast", "tune": "zerolatency", "x264-params": "repeat-headers=1"}
                                if self.codec == "h264" else
                                {"preset": "ultrafast", "tune": "zerolatency",
                                 "x265-params": "bframes=0:repeat-headers=1:log-level=error"})
        frame = av.VideoFrame.from_ndarray(img, format="bgr24")
        frame.pts = self.n
        self.n += 1
        out = b"".join(bytes(p) for p in self.enc.encode(frame))
        if not out:
            raise SourceError("resize fault: the encoder buffered the picture")
        return out


class Faulty(SourceWrapper):
    """Inject the faults of a :class:`~dvpipe.deploy.config.Faults` into a source's stream."""

    def __init__(self, inner: Source, faults):
        super().__init__(inner)
        self.faults = faults
        self._opens = 0
        self._fired: set[tuple[str, int]] = set()
        self._resizer: Optional[_Resizer] = None
        self._resize_to: Optional[tuple[int, int]] = None
        self._late = dict(faults.late_ms)
        self._stall = dict(faults.stall)
        self._resize = dict(faults.resize)
        # the recording's run.frames limit, if any: a lost frame is not one of the run's
        self._limited: Optional[Limited] = wrapper_of(inner, Limited)

    def open(self) -> None:
        self._opens += 1
        n = self.faults.fail_open
        if n == -1 or self._opens <= n:
            raise SourceError(f"injected fault: the source does not open (attempt {self._opens})")
        super().open()

    def reopen(self) -> None:
        self.inner.close()
        self.open()

    def _once(self, kind: str, seq: int) -> bool:
        if (kind, seq) in self._fired:
            return False
        self._fired.add((kind, seq))
        return True

    def read(self) -> Optional[Item]:
        while True:
            item = self.inner.read()
            if item is None:
                return None
            seq = item.frame.seq
            if seq in self._stall and self._once("stall", seq):
                self.stop.wait(self._stall[seq])  # (a stop ends the wait: the frame read is handed over)
            if seq in self.faults.disconnect and self._once("disconnect", seq):
                raise StreamLost(f"injected fault: stream lost before frame {seq}")
            if seq in self.faults.lose:
                if self._limited is not None:
                    self._limited.refund()
                continue
            break
        f = item.frame
        if seq in self._resize:
            self._resize_to = self._resize[seq]
        if self._resize and self.camera.encoding in VIDEO_ENCODINGS:
            if self._resizer is None:
                self._resizer = _Resizer(self.camera.encoding)
            if self._resize_to is None:
                self._resizer.feed(bytes(f.data))
            else:
                f.data = self._resizer(bytes(f.data), self._resize_to)
                item.keyframe = is_keyframe(f.data, self.camera.encoding)
        elif self._resize_to is not None:
            f.data = self._resized(f.data)
        every = self.faults.corrupt_every
        if seq in self.faults.corrupt or (every and seq % every == every - 1):
            f.data = corrupt_data(f.data, f.pixel_format)
        if seq in self._late:
            self.stop.wait(self._late[seq] / 1000.0)
        return item

    def _resized(self, data):
        assert self._resize_to is not None  # called only when a resize is due
        h, w = self._resize_to
        if isinstance(data, np.ndarray):
            return cv2.resize(data, (w, h), interpolation=cv2.INTER_AREA)  # OpenCV's dsize is (W, H)
        b = bytes(data)
        img = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            return b
        img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
        return cv2.imencode(".png" if b[:4] == b"\x89PNG" else ".jpg", img)[1].tobytes()
