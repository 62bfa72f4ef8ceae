"""What a source is: something that opens, yields frames with capture times, and closes.

A :class:`Source` delivers :class:`Item` objects (a :class:`~dvpipe.Frame` plus timing facts) from
``read()``, ``None`` at the end of its input. It raises :class:`SourceError` when it cannot open or
go on, and :class:`StreamLost` when a stream broke in a way a reconnect may fix; the runner's reader
thread owns the retry loop (:class:`Backoff`), so every source type reconnects the same way. A live
source raises :class:`StreamStalled` when a read timed out on a connection that is still open: the
reader counts a stall and reads on, and reconnects only once the stall passes the source's
:attr:`Source.stall_reconnect_s`.

Times: ``Frame.capture_epoch_ns`` is the capture time as the source knows it, in nanoseconds since the
Unix epoch (file names, container timestamps, the wall clock at capture). ``Item.capture_mono_ns``
is the same moment on dvpipe's monotonic clock (:func:`dvpipe.latency.now_ns`) when that is
meaningful (live sources, paced replay), else None: a recording processed as fast as possible has
no meaningful capture-to-output latency.
"""
from __future__ import annotations

import select
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence, TypeVar

from ...errors import DvpipeError
from ...types import Camera, Frame, PixelFormat

if TYPE_CHECKING:  # names for the type checker only
    from .._schema import CameraConfig, SourceConfig
    from .registry import DeploymentContext, SourceContext

__all__ = ["Item", "Source", "SourceError", "SkippedFrame", "StreamLost", "StreamStalled", "NothingYet", "Backoff",
           "SourceWrapper", "wrapper_of", "innermost", "wait_readable"]


class SourceError(DvpipeError, RuntimeError):
    """A source cannot open, or cannot go on. ``reason`` is a short sentence for reports."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class SkippedFrame(SourceError):
    """A frame the source cannot deliver (an image file that was not read, an elementary stream's access unit
    with no place in presentation order): the runner counts it as a drop of :attr:`category` (the reason is the
    message) and the camera reads on."""

    category = "decode_error"


class StreamLost(SourceError):
    """The stream broke (disconnect, EOF of a live stream); a reconnect may fix it."""


class StreamStalled(StreamLost):
    """A read timed out but the connection is still open (the sender paused): a stall, not a
    disconnect. The source can be read again as it is. (A subclass of :class:`StreamLost`, so that
    code that knows only that one reconnects, as before.)"""

    @classmethod
    def read_timeout(cls, where: str, seconds: Optional[float]) -> "StreamStalled":
        """The stall of a read that waited ``seconds`` (None: unknown) for data from ``where``."""
        waited = f" for {seconds:g} s" if seconds else ""
        return cls(f"{where}: no data{waited} (read timeout; the connection is open)")


class NothingYet(DvpipeError):
    """A source read without waiting (``nonblocking``, served by the runner's I/O loop) has no frame now:
    poll its socket and read again once data came. Not an error."""


def wait_readable(fds: int | Sequence[int], timeout_s: float) -> bool:
    """Whether ``fds`` (a descriptor or several: sockets, a device) have data within ``timeout_s``
    seconds: for a source read by a thread of its own. ``poll()``, not ``select()``, which refuses
    descriptors above 1023 (a run with many cameras and sockets reaches them)."""
    poller = select.poll()
    for fd in (fds,) if isinstance(fds, int) else fds:
        poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0.0, timeout_s) * 1000.0))


@dataclass
class Item:
    """One frame from a source, with timing facts for sync and the latency timeline.

    Attributes:
        frame: the frame (``data``: encoded bytes, one access unit for video, or a BGR array).
        keyframe: for video access units, whether it starts a new reference chain; else None.
        capture_mono_ns: capture time on the monotonic clock, or None when not meaningful.
        arrival_ns: when the runner received it (monotonic; set by the reader thread).
        read_span_ns: ``(start, end)`` of reading/demuxing this frame (monotonic), if measured.
        discontinuity: frames of this camera were lost just before this one (a gap in the stream,
            a reconnect): a video decoder must wait for a keyframe.
        media_ns: the frame's time on the stream's own clock (pts, ns), continuous within one
            connection of a live source; None when unknown. Used to count frames lost in an outage.
        reorder_span_ns: ``(arrival of the frame's own data, emission)`` (monotonic) when a live video
            source held the frame in its reordering look-ahead (B-frames): latency of its own.
        lost_before: frames of this camera the source knows were lost just before this one and never
            read (a V4L2 driver's sequence numbers skipped them; an elementary stream's picture order
            counts left their places empty): counted as lost at the source. Not a discontinuity by itself
            (the elementary stream's decoder judges the references from the headers; a lost picture that
            nothing references costs no other frame).
    """

    frame: Frame
    keyframe: Optional[bool] = None
    capture_mono_ns: Optional[int] = None
    arrival_ns: int = 0
    read_span_ns: Optional[tuple[int, int]] = None
    discontinuity: bool = False
    media_ns: Optional[int] = None
    reorder_span_ns: Optional[tuple[int, int]] = None
    lost_before: int = 0


@dataclass(frozen=True)
class Backoff:
    """Reconnect delays: ``initial_ms``, times ``factor`` per failed attempt, at most ``max_ms``.

    ``attempts`` = 0 retries forever; otherwise the source fails after that many failed attempts.
    """

    initial_ms: float = 250.0
    max_ms: float = 5000.0
    factor: float = 2.0
    attempts: int = 0

    def delays_s(self) -> Iterator[float]:
        """Delay before each attempt, in seconds (infinite when ``attempts`` is 0)."""
        d = self.initial_ms
        n = 0
        while self.attempts == 0 or n < self.attempts:
            yield min(d, self.max_ms) / 1000.0
            d *= self.factor
            n += 1


class Source:
    """Base class of the source types. Subclasses implement ``_open``, ``_read`` and ``_close``.

    Attributes:
        camera: the rig camera this source feeds.
        cfg: its :class:`~dvpipe.deploy.config.SourceConfig`.
        live: True when frames are captured now (no backlog is ever wanted).
        backoff: reconnect policy, or None when a lost stream is final (recordings).
        stop: set by the runner to interrupt waits (pacing, stalls, reconnect delays).
    """

    type = ""  #: the YAML ``type`` (set by :func:`~dvpipe.deploy.sources.register_source`)
    live = False
    #: what the ``uri`` names, in a few words, for the reference table (None: the type takes none)
    uri_help: Optional[str] = None
    #: whether it is live, in words, when :meth:`is_live` depends on the options (reference table)
    live_help: Optional[str] = None
    #: a stall (read timeouts on an open connection) longer than this many seconds is handled as a
    #: disconnect: the reader reconnects. None: never (recordings).
    stall_reconnect_s: Optional[float] = None

    def __init__(self, camera: Camera, cfg: Optional[SourceConfig]):
        self.camera = camera
        self.cfg: Any = cfg  # validated: a source that reads a uri has one
        self.options = dict(cfg.options) if cfg is not None else {}
        self.offset_ns = int(round((cfg.offset_ms if cfg is not None else 0.0) * 1e6))
        self.seq = 0
        self.backoff: Optional[Backoff] = None
        self.stop = threading.Event()
        self.is_open = False
        self.run_start_ns: Optional[int] = None

    # -- declaration: read by the deployment validator ------------------------------------------
    @classmethod
    def validate(cls, options: Any, ctx: SourceContext) -> Any:
        """Checks of a deployment's source of this type beyond each ``Options`` field's own (the
        ``uri``, files, defaults that depend on other keys, the camera's encoding).

        Args:
            options: the ``Options`` dataclass, each field already checked (a field that failed holds
                its default).
            ctx: a :class:`~dvpipe.deploy.sources.registry.SourceContext`: the camera, the ``uri``
                (set ``ctx.uri`` to change it), ``ctx.err(key, message)`` for one-line problems.

        Returns:
            the options to use (``dataclasses.replace`` fills defaults computed here).
        """
        return options

    @classmethod
    def validate_cameras(cls, cameras: Sequence[CameraConfig], ctx: DeploymentContext) -> None:
        """Checks across the cameras that read this type, once the whole deployment is valid
        (files two cameras would share, a file's calibration against the rig...).

        Args:
            cameras: the deployment's :class:`~dvpipe.deploy.config.CameraConfig` of this type.
            ctx: a :class:`~dvpipe.deploy.sources.registry.DeploymentContext` (the rig, the sync
                policy, ``ctx.err(key, message)``, ``ctx.warn(message)``).
        """

    @classmethod
    def is_live(cls, options: Mapping[str, Any]) -> bool:
        """Whether a source of this class with these ``options`` (a mapping) captures now."""
        return bool(cls.live)

    # -- the interface the reader thread uses ----------------------------------------------------
    def open(self) -> None:
        """Open (or reopen) the source. Raises :class:`SourceError` with the reason."""
        self._open()
        self.is_open = True

    def read(self) -> Optional[Item]:
        """The next frame, or None at the end of the input. May raise :class:`StreamLost`."""
        return self._read()

    def close(self) -> None:
        """Release files, sockets and decoders. Safe to call twice."""
        if self.is_open:
            self.is_open = False
            self._close()

    def reopen(self) -> None:
        """Close and open again (after :class:`StreamLost`)."""
        self.close()
        self.open()

    def describe(self) -> str:
        return self.cfg.describe() if self.cfg is not None else self.type

    def nominal_fps(self) -> Optional[float]:
        """The frame rate the source declares (frames per second), or None when it declares none."""
        fps = self.options.get("fps")
        return float(fps) if fps else None

    def set_stop(self, event: threading.Event) -> None:
        """Use ``event`` to interrupt this source's waits (the runner's stop flag)."""
        self.stop = event

    # -- helpers for subclasses ------------------------------------------------------------------
    def _item(self, data: Any, capture_epoch_ns: int, *, keyframe: Optional[bool] = None,
              pixel_format: PixelFormat = PixelFormat.ENCODED, capture_mono_ns: Optional[int] = None,
              read_span_ns: Optional[tuple[int, int]] = None,
              reorder_span_ns: Optional[tuple[int, int]] = None) -> Item:
        frame = Frame(self.camera.name, self.seq, int(capture_epoch_ns) + self.offset_ns, data, pixel_format)
        self.seq += 1
        mono = None if capture_mono_ns is None else capture_mono_ns + self.offset_ns
        return Item(frame, keyframe, mono, 0, read_span_ns, reorder_span_ns=reorder_span_ns)

    def _open(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _read(self) -> Optional[Item]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.camera.name!r}, {self.describe()})"


class SourceWrapper(Source):
    """A source that changes another's stream (looping, pacing, faults); delegates the rest."""

    def __init__(self, inner: Source):
        super().__init__(inner.camera, inner.cfg)
        self.inner = inner
        self.live = inner.live
        self.backoff = inner.backoff
        self.stop = inner.stop
        self.type = inner.type

    def open(self) -> None:
        self.inner.open()
        self.is_open = True

    def read(self) -> Optional[Item]:
        return self.inner.read()

    def close(self) -> None:
        self.is_open = False
        self.inner.close()

    def reopen(self) -> None:
        self.inner.reopen()
        self.is_open = True

    def describe(self) -> str:
        return self.inner.describe()

    def nominal_fps(self) -> Optional[float]:
        return self.inner.nominal_fps()

    @property
    def stall_reconnect_s(self) -> Optional[float]:  # type: ignore[override]
        return self.inner.stall_reconnect_s

    def set_stop(self, event: threading.Event) -> None:
        for layer in _layers(self):
            layer.stop = event


def _layers(src: Source) -> Iterator[Source]:
    """``src`` and every source it wraps, outermost first."""
    layer: Optional[Source] = src
    while layer is not None:
        yield layer
        layer = layer.inner if isinstance(layer, SourceWrapper) else None


T = TypeVar("T", bound=Source)


def wrapper_of(src: Source, kind: type[T]) -> Optional[T]:
    """The outermost layer of ``src`` (itself or a source it wraps) that is a ``kind``, or None."""
    return next((layer for layer in _layers(src) if isinstance(layer, kind)), None)


def innermost(src: Source) -> Source:
    """The source that ``src``'s wrappers wrap (``src`` itself when it wraps none): the one that reads."""
    *_, reader = _layers(src)
    return reader
