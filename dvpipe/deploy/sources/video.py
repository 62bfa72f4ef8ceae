"""Video sources: files (MP4, MKV, ...), raw H.264/H.265 elementary streams, RTSP and V4L2, through
PyAV; RTSP H.264, H.265 and MJPEG (over TCP or UDP, rtsp:// or rtsps://) through dvpipe's own client by
default (:mod:`._rtsp_client`).

Cameras that declare ``encoding: h264`` / ``h265`` receive **access units** (Annex B bytes, one
coded picture each; MP4/MKV ``avcC``/``hvcC`` packets are converted with FFmpeg's
``*_mp4toannexb`` bitstream filter) and decode them as a plan step
(:mod:`dvpipe.video`). Cameras that declare ``raw`` get BGR arrays decoded here, in
the reader thread (any codec FFmpeg knows); ``jpeg`` cameras accept MJPEG streams packet by packet.

Capture times:

* video file: ``start_ns + pts``; ``start_ns`` defaults to the container's ``creation_time``
  (0 when absent). Cameras recorded together keep their relative timing through their pts.
* elementary stream (no timestamps in the format): ``start_ns + k / fps``, ``k`` the picture's place in
  presentation order, from the picture order count in its slice headers (:mod:`dvpipe.bitstream`;
  a picture missing from the stream leaves its place empty). H.264 with POC type 2 is output in decode
  order: each picture takes the next place, after those of the reference pictures its ``frame_num`` says
  were lost. A unit whose slice header is damaged has no place in a stream placed by POC (a ``corrupt``
  drop counted by the source, :class:`UnplacedUnit`); the next coded video sequence starts after it.
* RTSP / V4L2 (live): the sender's clock where the stream says it and it agrees with the arrival
  clock (RTSP: RTCP sender reports, NTP time per RFC 3550, as FFmpeg's ``start_time_realtime``, from
  the first report on); else the picture's pts (RTP timestamp) plus the clock offset learnt from the
  arrival of every access unit (``min(arrival - pts)``: no picture is captured after its own data
  arrived), moved when the units keep arriving more than 100 ms later than it says (sender clock
  drift, pts jumps). With B-frames a picture waits in the reordering look-ahead after its data
  arrived: its capture time is still its own, and the wait is the ``reorder`` step of the latency
  table. RTSP MJPEG frames are timed the same way (each frame a unit); MJPEG read by FFmpeg's V4L2
  input takes its arrival.
"""
from __future__ import annotations

import bisect
import datetime as _dt
import os
import re
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Optional

from ...codecs import RAW_YUV_ENCODINGS, VIDEO_ENCODINGS
from ...types import short_repr as _show
from ...latency import now_ns, to_epoch_ns, to_monotonic_ns, wall_ns
from ...types import PixelFormat
from ...bitstream import Picture, StreamHeaders, may_be_reference
from ...errors import FrameError
from ...video import (ELEMENTARY_LOOKAHEAD, FILE_LOOKAHEAD, RESET, AccessUnit, FFmpegEngine, Lookahead,
                            PresentationOrder, ReorderingDecoder, VideoPacket, bgr24, is_keyframe, nal_types)
from . import _options
from ._probe import probe_elementary, probe_video
from ._rtsp_client import RtspConnection
from ._v4l2 import FOURCC as V4L2_FOURCC, V4l2Capture, reader_refusal as v4l2_reader_refusal
from .base import Backoff, Item, NothingYet, SkippedFrame, Source, SourceError, StreamLost, StreamStalled
from .registry import SourceContext, option, register_source

__all__ = ["VideoFile", "ElementaryStream", "RtspSource", "V4l2Source", "AvStream", "VideoOptions",
           "ElementaryOptions", "RtspOptions", "Reconnect", "V4l2Options"]

_CODEC_ENCODING = {"h264": "h264", "hevc": "h265"}
_AV_CODEC = {enc: codec for codec, enc in _CODEC_ENCODING.items()}  # encoding -> FFmpeg's codec name
_PARAM_SETS = {"h264": frozenset((7, 8)), "h265": frozenset((32, 33, 34))}  # SPS/PPS (+ VPS) NAL types
_LIVE_REANCHOR_NS = 100_000_000
_MAX_SENDER_LAG_NS = 2_000_000_000  # a stream's data arriving later than this after the sender says it was taken
_MAX_SENDER_AHEAD_NS = 1_000_000_000  # ... or earlier than this: the sender's clock is not this machine's
_LIVE_LAG_WINDOW = 16  # units: the offset moves up when all of the last this many arrived later than it says
_DEMUXER_CORRUPT = ("the demuxer flagged the packet corrupt (part of it was lost: an MPEG-TS continuity "
                    "counter error, or a damaged container)")
_MAX_DEMUX_ERRORS = 100  # consecutive demux errors in a recording before it counts as unreadable
#: FFmpeg demuxers that cut H.264/H.265 access units with its parser (AVSTREAM_PARSE_FULL): a picture whose first
#: slice header is damaged can be joined with the next one into one packet, which keeps the first one's timestamp
_PARSER_FORMATS = frozenset({"mpegts", "mpeg", "rtsp"})
#: the start of an access unit delimiter (H.264 nal_unit_type 9, nal_ref_idc 0; H.265 type 35, nuh_layer_id 0), of
#: which an access unit has at most one, first (H.264 7.4.1.2.3, H.265 7.4.2.4.4); MPEG-TS carries one in each
_DELIMITER = {"h264": b"\x00\x00\x01\x09", "h265": b"\x00\x00\x01\x46"}


def _av():
    try:
        import av  # noqa: F401

        return av
    except ImportError as e:  # pragma: no cover - av is a core dependency
        raise SourceError(f"PyAV is needed for video sources: {e}") from None


def _err_text(e: BaseException) -> str:
    text = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return f"{text}"


class AvStream(Source):
    """Common demux loop: open a container, pick the video stream, yield its packets as frames."""

    format: Optional[str] = None
    #: whether MJPEG frames (the ``packets`` mode) take their capture times from their pts as access units
    #: do (:meth:`_arrived`; an RTSP stream's RTP timestamps), rather than from their arrival
    _PACKETS_BY_PTS = False
    #: the container's keyframe flags come from its index (MP4 sync samples, Matroska key blocks): once a
    #: flagged packet has proved to be a keyframe by its NAL units, an unflagged packet is taken as not one
    #: without scanning it (the scan reads every byte of the picture). A file that flags nothing, or flags
    #: what is no keyframe, is scanned throughout.
    index_flags_keys = False

    def _container_options(self) -> dict:
        return {}

    def _open_container(self):
        av = _av()
        kwargs: dict[str, Any] = {"options": self._container_options()}
        if self.format:
            kwargs["format"] = self.format
        timeout = self._timeout()
        if timeout is not None:
            kwargs["timeout"] = timeout
        try:
            return av.open(self._url(), **kwargs)
        except av.error.FFmpegError as e:
            raise SourceError(f"cannot open {self._url()}: {_err_text(e)}") from None
        except OSError as e:
            raise SourceError(f"cannot open {self._url()}: {e.strerror or e}") from None

    def _url(self) -> str:
        return self.cfg.uri

    def _timeout(self):
        return None

    def _open(self) -> None:
        av = _av()
        self._container = self._open_container()
        if not self._container.streams.video:
            self._container.close()
            raise SourceError(f"{self._url()} has no video stream")
        index = int(self.options.get("stream") or 0)  # the `stream:` option of a video file (dual-channel recorders)
        if index >= len(self._container.streams.video):
            n = len(self._container.streams.video)
            self._container.close()
            raise SourceError(f"{self._url()} has {n} video stream{'s' if n != 1 else ''}; stream: {index} is not one "
                              f"(0..{n - 1})")
        self._stream = stream = self._container.streams.video[index]
        codec = stream.codec_context.name
        enc = self.camera.encoding
        self._codec = _CODEC_ENCODING.get(codec)
        self._mode = None
        if enc in VIDEO_ENCODINGS:
            if self._codec != enc:
                self._container.close()
                raise SourceError(f"{self._url()} is {codec} video but camera {self.camera.name} declares {enc} "
                                  "(declare the stream's codec, or raw to decode in the source)")
            self._mode = "access_units"
        elif (enc == "jpeg" and codec == "mjpeg") or (enc in RAW_YUV_ENCODINGS and codec == "rawvideo"):
            self._mode = "packets"  # intra-only: one whole frame per packet (V4L2 raw YUV frames too)
        elif enc == "raw":
            self._mode = "decode"
        else:
            self._container.close()
            raise SourceError(f"{self._url()} is {codec} video; camera {self.camera.name} declares {enc} "
                              "(declare raw to decode it in the source)")
        self._bsf = None
        extradata = bytes(stream.codec_context.extradata or b"")
        self._extradata_annexb = b""
        if self._mode in ("access_units", "decode") and self._codec is not None:
            if extradata[:1] == b"\x01":  # avcC / hvcC: length-prefixed packets
                name = "h264_mp4toannexb" if self._codec == "h264" else "hevc_mp4toannexb"
                self._bsf = av.BitStreamFilterContext(name, stream)
            elif extradata:
                self._extradata_annexb = extradata
        self._demux = self._container.demux(stream)
        self._begin_reading(codec, extradata)

    def _begin_reading(self, codec: str, extradata: bytes) -> None:
        """The reading state of a stream just opened (``codec``: FFmpeg's name; ``extradata`` as the
        container gives it)."""
        self._time_base: Optional[tuple[int, int]] = None  # (numerator x 1e9, denominator), see _pts_ns
        self._keys_flagged = False  # see index_flags_keys: set once a flagged packet is a keyframe by its NAL units
        self._corrupt_before = False  # the last packet carried the demuxer's corrupt flag
        self._pending: list = []
        self._unplaced: deque = deque()  # reasons of pictures read that take no frame, each counted as a drop
        fmt = self._container.format.name if self._container is not None else ""  # None: dvpipe's RTSP client
        self._parser_joins = not _PARSER_FORMATS.isdisjoint(fmt.split(","))
        self._eof = False
        self._no_pts = 0
        # decode order -> presentation order, the one place (dvpipe.video)
        self._order = PresentationOrder(self._order_by(), self._lookahead())
        self._order.mark(RESET)  # a (re)opened stream starts a new decoder
        if self._mode == "decode":
            self._raw_decoder = ReorderingDecoder(
                self._codec or codec,
                engine=lambda c, x=(None if self._codec else extradata): FFmpegEngine(c, x))  # type: ignore[misc]  # a lambda with a default

    def _order_by(self) -> str:
        """``pts`` (the container has timestamps) or ``index`` (elementary streams)."""
        return "pts"

    def _lookahead(self):
        """Units read ahead of a frame (see :class:`~dvpipe.video.PresentationOrder`)."""
        n = self.options.get("lookahead")
        return FILE_LOOKAHEAD if n is None else int(n)

    def _close(self) -> None:
        # packets first: FFmpeg's V4L2 input hands out packets that point into the driver's buffers,
        # and freeing one after its container is use after free
        self._pending = []
        self._demux = None
        c = getattr(self, "_container", None)
        if c is not None:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing a broken stream may fail; nothing to do
                pass
            self._container = None

    def _filter(self, pkt) -> list:
        """The packet in Annex B form (one or none; the bitstream filter may hold one back)."""
        if self._bsf is None:
            return [pkt]
        pts_ns = self._pts_ns(pkt)  # before the filter takes the packet
        corrupt = pkt.is_corrupt
        try:
            out = [p for p in self._bsf.filter(pkt) if p.size]
            for p in out:
                p.is_corrupt = p.is_corrupt or corrupt
            return out
        except _av().error.FFmpegError:
            # a damaged length prefix: the packet cannot be delivered; its frame is a corrupt drop
            return [_Damaged(pts_ns)]

    def _next_packet(self):
        """The next packet in decode order, or None at the end of the stream."""
        av = _av()
        errors = 0
        while True:
            if self._pending:
                return self._pending.pop(0)
            try:
                pkt = next(self._demux)
            except StopIteration:
                return None
            except av.error.EOFError:
                return None
            except av.error.FFmpegError as e:
                if self.live or errors >= _MAX_DEMUX_ERRORS:
                    raise StreamLost(f"{self._url()}: {_err_text(e)}") from None
                errors += 1  # a damaged stretch of a recording: resume demuxing after it
                self._pending.append(_Damaged(None))  # no pts: it takes no frame's place
                self._demux = self._container.demux(self._stream)
                continue
            if pkt.size == 0:  # the flush packet at the end
                if self._bsf is not None:
                    try:
                        self._pending.extend(p for p in self._bsf.filter(None) if p.size)
                    except av.error.FFmpegError:
                        pass
                    self._bsf = None
                    continue
                return None
            self._pending.extend(self._filter(pkt))

    def _unit(self, pkt) -> AccessUnit:
        """The access unit of a demuxed packet (parameter sets prepended to keyframes if out of band)."""
        if isinstance(pkt, _Damaged):
            return AccessUnit(b"", pkt.pts_ns, False, pkt.pts_ns is not None)
        data = bytes(pkt)
        pts = self._pts_ns(pkt)
        show = not getattr(pkt, "is_discard", False)
        # the flag can come one access unit early (FFmpeg's parser, joining MPEG-TS payloads into access
        # units, gives the flag of the packet it is reading to the unit it completes): the flagged unit
        # and the next are both damaged
        damage = getattr(pkt, "damage", None) or (_DEMUXER_CORRUPT if pkt.is_corrupt or self._corrupt_before else None)
        self._corrupt_before = bool(pkt.is_corrupt)
        if self._mode == "access_units" or (self._mode == "decode" and self._codec is not None):
            assert self._codec is not None  # access units: the camera's encoding is the stream's codec
            flagged = bool(pkt.is_keyframe)
            if self._parser_joins:
                cut = self._split_joined(data, damage)
                if cut < len(data):
                    data, flagged = data[:cut], False  # the flag may be the joined picture's
            if self._keys_flagged and not flagged:  # the file's index flags its keyframes: no scan
                return AccessUnit(data, pts, False, show, damage)
            types = nal_types(data, self._codec)  # one scan for both questions
            found = is_keyframe(data, self._codec, types)
            key = found or (flagged and self._order.by == "pts")
            self._keys_flagged = self._keys_flagged or (found and flagged and self.index_flags_keys)
            if key and self._extradata_annexb and _PARAM_SETS[self._codec].isdisjoint(types):
                data = self._extradata_annexb + data
            return AccessUnit(data, pts, key, show, damage)
        return AccessUnit(data, pts, bool(pkt.is_keyframe), show)

    def _split_joined(self, data: bytes, damage: Optional[str]) -> int:
        """Where the first access unit of a packet ends: at its second delimiter when it holds two (FFmpeg's
        parser joined a picture to a damaged one before it), else its length. The second is read next as a
        unit of its own, without the timestamp that went with the join: it is decoded (later pictures may
        reference it), shows no frame and is counted as a ``corrupt`` drop; the first is judged by its own
        headers. Both carry ``damage``, what the demuxer said of the packet."""
        assert self._codec is not None
        delimiter = _DELIMITER[self._codec]
        first = data.find(delimiter)
        cut = -1 if first < 0 else data.find(delimiter, first + len(delimiter))
        if cut < 0:
            return len(data)
        joined = _JoinedUnit(data[cut:])
        joined.is_discard, joined.damage, joined.is_keyframe = True, damage, is_keyframe(joined, self._codec)
        self._pending.insert(0, joined)
        self._unplaced.append(f"{self.camera.encoding} picture joined by FFmpeg's parser to the damaged access unit "
                              "before it: its timestamp was lost with the join (decoded for the pictures that "
                              "reference it, no frame)" + (f"; {damage}" if damage else ""))
        return cut

    def _pts_ns(self, pkt) -> Optional[int]:
        if self._order.by != "pts" or pkt is None:
            return None
        t = pkt.pts if pkt.pts is not None else pkt.dts
        if t is None:
            return None
        if self._time_base is None:  # the stream's: every packet of it has it (a Fraction per packet is slow)
            tb = pkt.time_base
            self._time_base = (tb.numerator * 1_000_000_000, tb.denominator)
        scale, den = self._time_base
        q, r = divmod(t * scale, den)  # t x time base in ns, rounded half to even as round() rounds
        return q + (2 * r > den or (2 * r == den and q & 1))

    def _capture_epoch_ns(self, packet: VideoPacket, arrival_wall_ns: int) -> int:  # pragma: no cover - per type
        raise NotImplementedError

    def _capture_mono(self, capture_epoch_ns: int) -> Optional[int]:
        return None

    def _read(self) -> Optional[Item]:
        if self._unplaced:
            raise UnplacedUnit(self._unplaced.popleft())  # (before the next frame: the order of drops is free)
        if self._mode == "packets":
            return self._read_packet()
        item = self._read_units()
        if item is None and self._unplaced:
            raise UnplacedUnit(self._unplaced.popleft())
        return item

    def _read_units(self) -> Optional[Item]:
        t0 = now_ns()
        while True:
            packet = self._order.pop()
            if packet is not None:
                return self._emit(packet, t0)
            if self._eof:
                return self._at_end()
            pkt = self._next_packet()
            if pkt is None:
                self._eof = True
                self._order.finish()
                continue
            unit = self._unit(pkt)
            arrival = (wall_ns(), now_ns()) if self.live else None
            if arrival is not None:
                self._arrived(unit, arrival[0])
            if self._order.by == "pts" and unit.pts_ns is None and unit.data:
                # no timestamp (an RTSP stream's first packet): just after the last one, or before all
                self._no_pts += 1
                pts = self._order.last_pts_ns + 1 if self._order.has_pts else self._no_pts - 1_000_000_000
                unit = AccessUnit(unit.data, pts, unit.keyframe, unit.show, unit.damage)
            self._order.push(unit, arrival)

    def _arrived(self, unit: AccessUnit, arrival_wall_ns: int) -> None:
        """A live source read ``unit`` at ``arrival_wall_ns`` (wall clock)."""

    def _emit(self, packet: VideoPacket, t0: int) -> Item:
        capture = self._capture_epoch_ns(packet, packet.arrival[0] if packet.arrival else wall_ns())
        mono = self._capture_mono(capture)
        end = now_ns()
        read_span, reorder = (t0, end), None
        if packet.arrival is not None:  # live: from its own data's arrival on, the frame waited in the look-ahead
            own = min(packet.arrival[1], end)
            read_span, reorder = (t0, max(t0, own)), (own, end)
        if self._mode == "decode":
            return self._emit_raw(packet, capture, mono, read_span, reorder)
        return self._item(packet, capture, keyframe=packet.keyframe, capture_mono_ns=mono, read_span_ns=read_span,
                          reorder_span_ns=reorder)

    def _emit_raw(self, packet: VideoPacket, capture: int, mono: Optional[int], read_span: tuple[int, int],
                  reorder: Optional[tuple[int, int]]) -> Item:
        """``raw`` cameras: decode here, with the same reordering as the decode step."""
        try:
            data: Any = bgr24(self._raw_decoder.picture(packet))
        except FrameError as e:
            data = e  # the frame is counted and dropped with this reason
        return self._item(data, capture, pixel_format=PixelFormat.BGR, capture_mono_ns=mono, read_span_ns=read_span,
                          reorder_span_ns=reorder)

    def _read_packet(self) -> Optional[Item]:
        """MJPEG: one packet per frame, in order (intra-only: decode order is presentation order)."""
        t0 = now_ns()
        pkt = self._next_packet()
        if pkt is None:
            return self._at_end()
        damage = getattr(pkt, "damage", None)  # dvpipe's RTSP client: what was lost of the frame
        if isinstance(pkt, _Damaged):
            data: Any = FrameError("corrupt MJPEG packet (the demuxer could not read it)")
        elif damage:
            data = FrameError(f"corrupt MJPEG frame: {damage}")
        else:
            data = bytes(pkt)
        pts = pkt.pts_ns if isinstance(pkt, _Damaged) else self._pts_ns(pkt)
        packet = VideoPacket([], pts, "pts")
        if pts is None:
            packet = VideoPacket([], self.seq, "index")
        arrival = wall_ns()
        if self._PACKETS_BY_PTS and isinstance(data, bytes):  # its arrival against its pts, as access units
            self._arrived(AccessUnit(data, pts, True, True), arrival)
        capture = self._capture_epoch_ns(packet, arrival)
        return self._item(data, capture, capture_mono_ns=self._capture_mono(capture), read_span_ns=(t0, now_ns()))

    def _at_end(self) -> Optional[Item]:
        return None


class _Damaged:
    """A packet the container could not deliver intact (its frame becomes a counted corrupt drop)."""

    __slots__ = ("pts_ns",)

    def __init__(self, pts_ns: Optional[int]):
        self.pts_ns = pts_ns


class _JoinedUnit(bytes):
    """The bytes of a picture that FFmpeg's parser joined to another access unit, read as a packet of its own:
    no timestamp, no flags. An elementary stream's takes its place from its own headers; one split off in a
    container with timestamps (:meth:`AvStream._split_joined`) lost its timestamp with the join and is not
    shown (``is_discard``), and carries what the demuxer said of the packet (``damage``)."""

    is_keyframe = is_corrupt = is_discard = False
    pts = dts = None
    damage: Optional[str] = None


@dataclass
class VideoOptions:
    """The keys of ``type: video``."""

    start_ns: Optional[int] = _options.start_ns("capture time at pts 0 (ns since the Unix epoch; default: the "
                                                "container's creation_time, else 0)")
    lookahead: Optional[int] = _options.lookahead("access units read ahead of a frame (default: dvpipe.video's "
                                                  "FILE_LOOKAHEAD)")
    stream: int = option(0, "which video stream of the file, counted from 0 among its video streams (a "
                            "dual-channel dashcam's second camera: 1)", minimum=0, maximum=64)


@register_source("video")
class VideoFile(AvStream):
    """Video file (MP4, MKV, ...) through PyAV: capture time = ``start_ns`` (default: ``creation_time``) + pts."""

    Options = VideoOptions
    uri_help = "a video file (required)"
    index_flags_keys = True

    @classmethod
    def validate(cls, options: VideoOptions, ctx: SourceContext) -> VideoOptions:
        ctx.require_file("a video file (MP4, MKV, ...)")
        if ctx.encoding not in VIDEO_ENCODINGS + ("raw", "jpeg"):
            ctx.err(None, f"a video source needs camera encoding h264, h265 (decoded as a plan step) or raw "
                          f"(decoded in the source); camera {ctx.camera} declares {ctx.encoding}")
        elif ctx.probe and ctx.uri is not None and os.path.isfile(ctx.uri):
            probe_video(ctx.uri, ctx, options.stream)
        return options

    def _open(self) -> None:
        super()._open()
        start = self.options.get("start_ns")
        if start is None:
            start = _creation_time_ns(self._container) or 0
        self._start_ns = int(start)

    def _capture_epoch_ns(self, packet: VideoPacket, arrival_wall_ns: int) -> int:
        if packet.by != "pts" or packet.want is None:
            rate = float(self._stream.average_rate or 30)
            return self._start_ns + int(round(self.seq * 1e9 / rate))
        return self._start_ns + packet.want


def _creation_time_ns(container) -> Optional[int]:
    text = (container.metadata or {}).get("creation_time")
    if not text:
        return None
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    delta = t - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


#: order keys an elementary stream keeps to learn its picture order count step from (the most recent of twice as many)
_KEYS_KEPT = 64

_ES_EXT: dict[str, Literal["h264", "h265"]] = {".h264": "h264", ".264": "h264", ".avc": "h264",
                                              ".h265": "h265", ".265": "h265", ".hevc": "h265"}


@dataclass
class ElementaryOptions:
    """The keys of ``type: elementary``."""

    codec: Optional[Literal["h264", "h265"]] = option(None, "the stream's codec (default: by the file name's "
                                                            "extension, .h264/.264/.avc or .h265/.265/.hevc)")
    fps: float = _options.fps(30.0)
    start_ns: Optional[int] = _options.start_ns("capture time of the first frame (ns since the Unix epoch; "
                                                "default 0)")
    lookahead: Optional[int] = _options.lookahead("access units read ahead of a frame (default: dvpipe.video's "
                                                  "ELEMENTARY_LOOKAHEAD)")


class UnplacedUnit(SkippedFrame):
    """A picture read that takes no frame, a ``corrupt`` drop: an elementary stream's access unit whose slice
    header is damaged, in a stream whose pictures take their places from their picture order counts (its place
    is unknown), or a picture whose timestamp FFmpeg's parser lost by joining it to a damaged one."""

    category = "corrupt"


@register_source("elementary")
class ElementaryStream(AvStream):
    """Raw H.264/H.265 Annex B file (no timestamps): capture time = ``start_ns + k / fps``."""

    Options = ElementaryOptions
    uri_help = "an Annex B .h264/.h265 file (required)"

    @classmethod
    def validate(cls, options: ElementaryOptions, ctx: SourceContext) -> ElementaryOptions:
        ctx.require_file("an H.264/H.265 elementary stream file")
        codec = options.codec
        if codec is None and ctx.uri is not None:
            codec = _ES_EXT.get(Path(ctx.uri).suffix.lower())
            if codec is None:
                ctx.err("codec", f"required: cannot tell h264 from h265 by the name {Path(ctx.uri).name}")
        if codec and ctx.encoding != codec:
            ctx.err(None, f"the stream is {codec} but camera {ctx.camera} declares encoding {ctx.encoding}")
        elif codec and ctx.probe and ctx.uri is not None and os.path.isfile(ctx.uri):
            probe_elementary(ctx.uri, ctx, codec)
        return replace(options, codec=codec)

    @property
    def format(self) -> str:  # type: ignore[override]
        return "h264" if self.options.get("codec") == "h264" else "hevc"

    def _open(self) -> None:
        super()._open()
        self._start_places()

    def _start_places(self) -> None:
        """The state that turns slice headers into places in presentation order, as at the stream's start."""
        self._headers = StreamHeaders(self.options.get("codec") or self.camera.encoding)
        self._sequence_base = 0  # order key of POC 0 in the current coded video sequence
        self._max_key = -1
        self._place = -1  # place in presentation order of the last frame emitted since the stream (re)opened
        self._last_key: Optional[int] = None
        self._last_guessed = False
        self._poc_step: Optional[int] = None  # picture order count between consecutive pictures (x264: 2, x265: 1)
        self._shown_keys: list[int] = []  # order keys of the shown pictures read (sorted; see _learn_poc_step)
        self._guessed_keys: set[int] = set()  # keys of pictures whose headers were unreadable (no POC to learn from)
        self._poc_ordered = False  # the last readable picture had its place from its POC (not output in decode order)
        # pictures of the current sequence with unreadable headers that may be references, not yet named missing
        # by a later picture
        self._unread_references = 0
        self._lost_idr: dict[int, int] = {}  # sequence base -> key of its IDR, which the stream lacks
        self._sequence_pictures: dict[int, int] = {0: 0}  # sequence base -> shown pictures read in it (damaged too)
        self._emitting: Optional[tuple[int, int]] = None  # (base, place of its first frame) of the sequence emitted
        self._unplaced_places = 0  # damaged units counted as drops whose empty places no frame has passed yet
        self._lost_places = 0  # empty places before the next frame that no damaged unit explains: lost pictures

    def _order_by(self) -> str:
        # Annex B carries no timestamps: a picture's place in presentation order is its picture order
        # count (slice headers), restarting at every IDR; the order key is that place. Frames are then
        # matched to the decoder's pictures by it, as a container's pts (open GOPs restart decoding
        # at a recovery point or a CRA; a picture the decoder does not output is a counted drop).
        return "pts"

    def _pts_ns(self, pkt) -> Optional[int]:
        return None

    def _unit(self, pkt) -> AccessUnit:
        unit = super()._unit(pkt)
        if not unit.data:
            return unit
        pic = self._headers.read(unit.data)
        if pic.joined_at is not None:
            # another picture's damaged unit, joined to this one by FFmpeg's parser: two units again, the
            # damaged one read next (its own headers judge it: a corrupt drop, or an IDR that restarts)
            data = unit.data[:pic.joined_at]
            self._pending.insert(0, _JoinedUnit(unit.data[pic.joined_at:]))
            unit = AccessUnit(data, unit.pts_ns, is_keyframe(data, self._headers.codec), unit.show, unit.damage)
        if pic.poc is None and self._poc_ordered and not unit.keyframe:
            # a damaged slice header in a stream placed by POC: the picture's place is unknown and any guess
            # would move the frames after it; the decoder still gets the unit (what references it is judged),
            # its frame takes no place and is counted as a corrupt drop (_read)
            reason = f"corrupt {self.camera.encoding} access unit (dvpipe's header check: {pic.damage})"
            self._unplaced.append(reason)
            self._unplaced_places += 1
            self._count_picture()  # its place is in this sequence, wherever it is
            self._unread_references += may_be_reference(unit.data, self._headers.codec)
            return AccessUnit(unit.data, None, False, False, unit.damage or pic.damage)
        key = self._place_key(pic)
        show = unit.show and not pic.second_field
        if show:
            self._count_picture()
            if pic.poc is None:
                self._unread_references += may_be_reference(unit.data, self._headers.codec)
        if pic.lost_references:
            # reference pictures of this sequence missing from the stream: places of its own, so that the next
            # sequence starts after them (one lost last in presentation order leaves no other trace); those that
            # are the damaged units counted above are not counted twice
            named = min(pic.lost_references, self._unread_references)
            self._unread_references -= named
            self._count_picture(pic.lost_references - named)
        return AccessUnit(unit.data, key, unit.keyframe, show, unit.damage)

    def _has_key(self, key: int) -> bool:
        keys = self._shown_keys
        i = bisect.bisect_left(keys, key)
        return i < len(keys) and keys[i] == key

    def _learn_poc_step(self, key: int) -> None:
        """The stream's order key step (the picture order count's, x264: 2 a frame, x265: 1; 1 for pictures output
        in decode order): the smallest gap between the keys of the pictures read, in decode order and ahead of
        the frames emitted, so that a picture missing before the second one shown is not taken for the step
        (which would move every later frame)."""
        keys = self._shown_keys
        i = bisect.bisect_left(keys, key)
        for other in keys[max(0, i - 1):i + 1]:
            gap = abs(key - other)
            if gap and (self._poc_step is None or gap < self._poc_step):
                self._poc_step = gap
        keys.insert(i, key)
        if len(keys) > 2 * _KEYS_KEPT:
            del keys[:_KEYS_KEPT]  # the earliest in presentation order: long read and emitted

    def _count_picture(self, n: int = 1) -> None:
        base = self._sequence_base
        self._sequence_pictures[base] = self._sequence_pictures.get(base, 0) + n

    def _place_key(self, pic: Picture) -> int:
        """The order key of a picture (its headers read in decode order): its place in presentation order."""
        if pic.poc is not None:
            self._poc_ordered = not pic.output_in_decode_order
        if pic.poc is None:  # headers unreadable: a frame after the ones known (the decoder judges it)
            key = self._max_key + 1
            self._guessed_keys.add(key)
        elif pic.output_in_decode_order:  # the next place, after those of the reference pictures lost
            key = self._max_key + 1 + pic.lost_references
        else:
            # a picture order count read before in this sequence: the IDR that started a new one was lost (its
            # pictures count from it again); they take a sequence of their own, the IDR's place in it counted
            repeated = not pic.new_sequence and not pic.second_field and self._has_key(self._sequence_base + pic.poc)
            if pic.new_sequence or repeated:
                self._sequence_base = self._max_key + 1 + (1 << 32)  # above every key so far, even leading POCs < 0
                self._unread_references = 0
            if repeated:
                pic.lost_references = 1
                # its key: POC 0 of the sequence, whose high part the POCs read carry over from the one before
                self._lost_idr[self._sequence_base] = self._sequence_base + pic.poc_msb
            key = self._sequence_base + pic.poc
        self._max_key = max(self._max_key, key)
        if pic.poc is not None and not pic.second_field:
            self._learn_poc_step(key)
        return key

    def _lookahead(self):
        n = self.options.get("lookahead")
        return ELEMENTARY_LOOKAHEAD if n is None else int(n)

    def _capture_epoch_ns(self, packet: VideoPacket, arrival_wall_ns: int) -> int:
        """``start_ns + k / fps``, ``k`` the picture's place: the place of the frame before it plus its
        picture order count step(s) (a picture missing from the stream leaves its place empty). A picture
        whose headers were unreadable (a recording cut mid-GOP, before its first parameter sets) is the next
        place, and its key, one more than the last, teaches nothing about the stream's POC step. A coded video
        sequence (from an IDR, POC restarting) starts after every picture read in the one before, those with
        damaged headers and no place of their own and the reference pictures found missing included (at least
        one place after the last frame); one whose IDR was lost starts at the IDR's place."""
        key, last = packet.want, self._last_key
        guessed = False
        if key is not None and key in self._guessed_keys:
            guessed = True
            self._guessed_keys = {k for k in self._guessed_keys if k > key}  # keys come in increasing order
        sequence = next((b for b in self._sequence_pictures if key is not None and abs(key - b) < (1 << 31)), None)
        if sequence is not None and self._emitting is not None and sequence != self._emitting[0]:
            base, first = self._emitting
            start = max(self._place + 1, first + self._sequence_pictures.pop(base, 0))
            # a sequence whose IDR was lost starts at the IDR's place: its first frame is its POC's steps after
            origin = self._lost_idr.pop(sequence, None)
            offset = 0 if origin is None or key is None else max(0, round((key - origin) / (self._poc_step or 1)))
            self._skip_places(start + offset - self._place - 1)
            self._place = start + offset
            self._emitting = (sequence, start)
            self._last_key, self._last_guessed = key, guessed
            return self._place_time()
        step = 1
        if (key is not None and last is not None and 0 < key - last < (1 << 31)  # the same coded video sequence
                and not guessed and not self._last_guessed):
            delta = key - last
            step = max(1, round(delta / (self._poc_step or delta)))
        self._last_key, self._last_guessed = key, guessed
        self._skip_places(step - 1)
        self._place += step
        if self._emitting is None and sequence is not None:
            self._emitting = (sequence, self._place)
        return self._place_time()

    def _skip_places(self, n: int) -> None:
        """``n`` places left empty before the next frame: damaged units already counted as drops explain
        some (whichever were read, in decode order, before; the rest wait for a later gap), pictures lost
        from the stream the rest (:meth:`_emit` hands them over as lost at the source)."""
        n = max(0, n)
        explained = min(n, self._unplaced_places)
        self._unplaced_places -= explained
        self._lost_places += n - explained

    def _emit(self, packet: VideoPacket, t0: int) -> Item:
        item = super()._emit(packet, t0)
        item.lost_before, self._lost_places = self._lost_places, 0
        return item

    def _place_time(self) -> int:
        return int(self.options.get("start_ns") or 0) + int(round(self._place * 1e9 / self.options.get("fps", 30.0)))


class _LiveStream(AvStream):
    """Live capture: arrival-anchored capture times, reconnects, end of stream = stream lost.

    A read that times out (``read_timeout_s``; FFmpeg's interrupt, "Immediate exit requested") on a
    connection that is still open raises :class:`StreamStalled`: the sender paused, the stream is not
    lost, and the next :meth:`read` goes on from the same connection. The reader reconnects only
    when the stall lasts longer than ``stall_reconnect_s`` (default :attr:`STALL_RECONNECT_S`
    seconds). A closed or reset connection or the end of the stream is :class:`StreamLost`.
    """

    live = True
    STALL_RECONNECT_S = 10.0
    #: whether the runner's I/O loop can serve it (:meth:`filenos`, :meth:`receive`, ``nonblocking``):
    #: set by the types that read without blocking (dvpipe's RTSP client and V4L2 reader)
    pollable = False
    #: set by the I/O loop: :meth:`read` raises :class:`NothingYet` instead of waiting for data
    nonblocking = False

    class _TimeoutGuard:
        """Iterates a container's packets; a read timeout raises :class:`StreamStalled` and the next
        call reads on from the same connection (a new demux generator: the old one ended with it)."""

        def __init__(self, container, stream, url: str, read_timeout_s: Optional[float]):
            self._container, self._stream, self._url = container, stream, url
            self._timeout_s = read_timeout_s
            self._demux = container.demux(stream)

        def __iter__(self):
            return self

        def __next__(self):
            try:
                return next(self._demux)
            except _av().error.ExitError:
                self._demux = self._container.demux(self._stream)
                raise StreamStalled.read_timeout(self._url, self._timeout_s) from None

    def __init__(self, camera, cfg):
        super().__init__(camera, cfg)
        r = self.options.get("reconnect") or {}
        self.backoff = Backoff(r.get("initial_ms", 250.0), r.get("max_ms", 5000.0), r.get("factor", 2.0),
                               int(r.get("attempts", 0)))
        limit = self.options.get("stall_reconnect_s", self.STALL_RECONNECT_S)
        self.stall_reconnect_s = None if limit is None else float(limit)
        self._media_ns: Optional[int] = None

    def _open(self) -> None:
        super()._open()
        self._begin_live()
        timeout = self._timeout()
        self._demux = self._TimeoutGuard(self._container, self._stream, self._url(), timeout and timeout[1])

    @property
    def read_timeout_s(self) -> float:
        """A read waiting longer than this (s) is a stall."""
        return 2.0

    def filenos(self) -> list[int]:  # pragma: no cover - per pollable type
        """The descriptors the I/O loop polls for this source (pollable types); none when closed."""
        raise NotImplementedError

    def receive(self) -> int:  # pragma: no cover - per pollable type
        """Take what arrived without waiting (pollable types); how much came."""
        raise NotImplementedError

    def due_s(self) -> Optional[float]:
        """When (``time.monotonic()``) :meth:`receive` has work even if nothing arrives (pollable types: a
        packet reordering wait that ends); None when nothing is due."""
        return None

    def _next_ready(self, ready: deque, waiter: Any) -> Any:
        """The first of ``ready`` (what :meth:`receive` filled), waiting for it on ``waiter.wait(s)``:
        :class:`NothingYet` when the I/O loop serves this source, a stall after ``read_timeout_s``."""
        stall_at = time.monotonic() + self.read_timeout_s
        while not ready:
            if self.nonblocking:
                raise NothingYet()
            due = self.due_s()
            until = stall_at if due is None else min(stall_at, due)
            if waiter.wait(max(0.0, until - time.monotonic())):
                stall_at = time.monotonic() + self.read_timeout_s
            elif due is None or time.monotonic() < due:
                raise StreamStalled.read_timeout(self._url(), self.read_timeout_s)
            self.receive()
        return ready.popleft()

    def _begin_live(self) -> None:
        self._offset: Optional[int] = None  # capture = pts + offset (wall clock ns)
        self._recent_lags: deque = deque(maxlen=_LIVE_LAG_WINDOW)
        self._media_ns = None

    def nominal_fps(self) -> Optional[float]:
        """The stream's declared rate (frames per second) when it has one, else the ``fps`` option."""
        stream = getattr(self, "_stream", None)
        rate = (getattr(stream, "average_rate", None) or getattr(stream, "guessed_rate", None)) if stream else None
        if rate and 1.0 <= float(rate) <= 1000.0:
            return float(rate)
        return super().nominal_fps()

    def _item(self, *args, **kwargs) -> Item:
        item = super()._item(*args, **kwargs)
        item.media_ns = self._media_ns  # this frame's pts on this connection (for outage accounting)
        return item

    def _lookahead(self):
        # live: no look-ahead (latency) until the stream shows it reorders or the decoder runs short
        n = self.options.get("lookahead")
        return Lookahead(0 if n is None else int(n))

    def _arrived(self, unit: AccessUnit, arrival_wall_ns: int) -> None:
        """The clock offset from the units' arrival: ``offset = min(arrival - pts)`` over the units
        read (no picture is captured after its data arrived; the earliest unit relative to its pts
        had the least delay), moved up when every unit of the last :data:`_LIVE_LAG_WINDOW` came
        more than 100 ms later than it says (sender clock drift, a pts jump)."""
        if unit.pts_ns is None or not unit.show or not unit.data:
            return
        lag = arrival_wall_ns - unit.pts_ns
        self._recent_lags.append(lag)
        if self._offset is None or lag < self._offset:
            self._offset = lag
        elif len(self._recent_lags) == _LIVE_LAG_WINDOW and min(self._recent_lags) - self._offset > _LIVE_REANCHOR_NS:
            self._offset = min(self._recent_lags)

    def _capture_epoch_ns(self, packet: VideoPacket, arrival_wall_ns: int) -> int:
        """Each picture's own time from the stream, in presentation order: the sender's clock where it
        says it (RTSP: the RTCP sender report's NTP time of pts 0, FFmpeg's ``start_time_realtime``)
        and agrees with the arrival of the stream's data (its least delay within
        -:data:`_MAX_SENDER_AHEAD_NS` .. :data:`_MAX_SENDER_LAG_NS`: else the sender's clock is not
        this machine's); otherwise
        ``pts + offset`` (:meth:`_arrived`); the arrival time where there is no pts."""
        self._media_ns = packet.want if packet.by == "pts" else None
        if packet.by != "pts" or packet.want is None:
            return arrival_wall_ns
        sender_origin = self._sender_origin_ns()
        if sender_origin is not None and self._offset is not None:
            # trusted when the stream's data arrives as it says: its least delay (self._offset, the
            # arrival clock's origin of pts 0) within [-1 s, +2 s] of the sender's origin
            if -_MAX_SENDER_AHEAD_NS <= self._offset - sender_origin <= _MAX_SENDER_LAG_NS:
                return sender_origin + packet.want
        if self._offset is None:
            return arrival_wall_ns
        return min(packet.want + self._offset, arrival_wall_ns)

    def _sender_origin_ns(self) -> Optional[int]:
        """The sender's wall clock (ns since the Unix epoch) of pts 0, when the stream says it."""
        realtime_us = getattr(self._container, "start_time_realtime", None) if self._container is not None else None
        return None if realtime_us is None else int(realtime_us) * 1000

    def _capture_mono(self, capture_epoch_ns: int) -> Optional[int]:
        return to_monotonic_ns(capture_epoch_ns)

    def _at_end(self) -> Optional[Item]:
        raise StreamLost(f"{self._url()}: the stream ended (end of file from the sender)")


@dataclass
class Reconnect:
    """Reconnect delays of a live source (:class:`~dvpipe.deploy.sources.Backoff`)."""

    initial_ms: float = option(250.0, "delay before the first reconnect (ms)", minimum=0, maximum=_options.DAY_MS)
    max_ms: float = option(5000.0, "longest delay (ms)", minimum=0, maximum=_options.DAY_MS)
    factor: float = option(2.0, "delay growth per failed attempt", minimum=1, maximum=1000)
    attempts: int = option(0, "failed attempts before the camera fails (0: retry forever)", minimum=0)


@dataclass
class RtspOptions:
    """The keys of ``type: rtsp``."""

    transport: Literal["tcp", "udp"] = option("tcp", "RTP transport")
    tls_verify: bool = option(True, "rtsps:// with client dvpipe: check the server's certificate (against ca_file, "
                                    "else the system's CAs) and its name (FFmpeg's client checks neither)")
    ca_file: Optional[str] = option(None, "rtsps:// with client dvpipe: PEM file of the CAs to trust (a camera's "
                                          "self-signed certificate)", path="file")
    open_timeout_s: float = option(5.0, "longest wait for the stream to open (s)", minimum=0, exclusive_min=True,
                                   maximum=_options.HOUR_S)
    read_timeout_s: float = option(2.0, "a read waiting longer is a stall (s)", minimum=0, exclusive_min=True,
                                   maximum=_options.HOUR_S)
    reconnect: Reconnect = option(doc="reconnect back-off", default_factory=Reconnect)
    lookahead: Optional[int] = _options.lookahead("access units read ahead of a frame (default 0: none until "
                                                  "the stream reorders)")
    stall_reconnect_s: Optional[float] = _options.stall_reconnect_s(10.0)
    client: Optional[Literal["dvpipe", "ffmpeg"]] = option(
        None, "RTSP client: dvpipe (its own: read by the runner's one I/O thread with the other cameras; "
              "TCP or UDP, rtsp or rtsps, H.264/H.265/MJPEG) or ffmpeg (a reader thread per camera; also "
              "raw cameras); default: dvpipe where it can")


def _rtsp_client(encoding: str) -> Optional[str]:
    """Why dvpipe's own RTSP client cannot read this camera's stream, or None when it can."""
    if encoding not in VIDEO_ENCODINGS + ("jpeg",):
        return f"it hands over H.264/H.265 access units and JPEG frames, not {encoding} pictures"
    return None


@register_source("rtsp")
class RtspSource(_LiveStream):
    """RTSP camera or server, read timeouts, reconnect with back-off; capture time: each picture's pts
    on the sender's clock (RTCP), else on the arrival clock.

    Read by dvpipe's own client (:mod:`._rtsp_client`) where it can (``client: dvpipe``, the default for
    H.264/H.265 over TCP): the runner's I/O loop then serves the camera with the others on one
    thread (:attr:`pollable`); else by PyAV/FFmpeg's client on a reader thread of its own."""

    Options = RtspOptions
    uri_help = "rtsp[s]://host[:port]/path (required)"
    _PACKETS_BY_PTS = True

    @classmethod
    def validate(cls, options: RtspOptions, ctx: SourceContext) -> RtspOptions:
        if ctx.uri is None:
            ctx.err("uri", "required: rtsp://host[:port]/path")
        elif not re.match(r"^rtsps?://[^/\s]+", ctx.uri):
            ctx.err("uri", f"expected rtsp://host[:port]/path, got {_show(ctx.uri)}")
        else:
            from ._rtsp_client import url_problem

            problem = url_problem(ctx.uri)  # a port out of 1..65535 is the configuration's, not a network failure
            if problem is not None:
                ctx.err("uri", problem)
        if ctx.encoding not in VIDEO_ENCODINGS + ("jpeg", "raw"):
            ctx.err(None, f"an RTSP source needs camera encoding h264, h265, jpeg (MJPEG) or raw; "
                          f"camera {ctx.camera} declares {ctx.encoding}")
        elif options.client == "dvpipe":
            why = _rtsp_client(ctx.encoding)
            if why:
                ctx.err("client", f"dvpipe's RTSP client cannot read this stream: {why} (client: ffmpeg can)")
        return options

    def __init__(self, camera, cfg):
        super().__init__(camera, cfg)
        client = self.options.get("client")
        if client is None:
            client = "ffmpeg" if _rtsp_client(camera.encoding) else "dvpipe"
        self.pollable = client == "dvpipe"
        self._conn: Optional[RtspConnection] = None

    def _open(self) -> None:
        if not self.pollable:
            super()._open()
            return
        conn = RtspConnection(self._url(), float(self.options.get("open_timeout_s", 5.0)),
                              transport=self.options.get("transport", "tcp"),
                              tls_verify=bool(self.options.get("tls_verify", True)), ca_file=self.options.get("ca_file"))
        video = conn.open()
        if video.codec != self.camera.encoding:
            conn.close()
            raise SourceError(f"{self._url()} is {video.codec} video but camera {self.camera.name} declares "
                              f"{self.camera.encoding}")
        self._conn, self._container, self._stream = conn, None, None
        jpeg = video.codec == "jpeg"
        self._codec, self._mode, self._bsf = (None, "packets", None) if jpeg else (video.codec, "access_units", None)
        self._extradata_annexb = video.parameter_sets
        self._begin_reading("mjpeg" if jpeg else _AV_CODEC[video.codec], b"")
        self._begin_live()

    def filenos(self) -> list[int]:
        """The connection's sockets (for the I/O loop's poll): the RTSP connection's, and with UDP the
        RTP and RTCP sockets; none when closed."""
        return self._conn.filenos() if self._conn is not None else []

    def receive(self) -> int:
        """Take the bytes that arrived (never waits); raises :class:`StreamLost` when the connection
        closed. Returns how many bytes came."""
        if self._conn is None:
            raise StreamLost(f"{self._url()}: not connected")
        return self._conn.receive()

    def due_s(self) -> Optional[float]:
        return self._conn.due_s() if self._conn is not None else None

    def _next_packet(self):
        conn = self._conn
        if conn is None:
            return super()._next_packet()
        return self._next_ready(conn.units, conn)

    def _sender_origin_ns(self) -> Optional[int]:
        if self._conn is not None:
            return self._conn.sender_origin_ns
        return super()._sender_origin_ns()

    def nominal_fps(self) -> Optional[float]:
        if self._conn is not None and self._conn.video is not None and self._conn.video.fps:
            return self._conn.video.fps
        return super().nominal_fps()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        super()._close()

    def _container_options(self) -> dict:
        # no stream analysis: the decode step needs nothing from it, and analysing costs up to a
        # second of frames at open (and every reconnect); the packets read at open are kept
        return {"rtsp_transport": self.options.get("transport", "tcp"), "analyzeduration": "0", "probesize": "1024"}

    @property
    def read_timeout_s(self) -> float:
        """A read waiting longer than this (s) is a stall (``read_timeout_s``)."""
        return float(self.options.get("read_timeout_s", 2.0))

    def _timeout(self):
        return (self.options.get("open_timeout_s", 5.0), self.read_timeout_s)


@dataclass
class V4l2Options:
    """The keys of ``type: v4l2``."""

    input_format: Optional[str] = option(None, "the device's pixel format or codec (FFmpeg's name, e.g. mjpeg; "
                                               "default: the camera's encoding's)")
    fps: Optional[float] = _options.fps(None, "frames per second to ask the device for")
    size: Optional[tuple[int, int]] = option(None, "frame size to ask the device for (default: the camera's)")
    stall_reconnect_s: Optional[float] = _options.stall_reconnect_s(10.0)
    reader: Optional[Literal["dvpipe", "ffmpeg"]] = option(
        None, "V4L2 reader: dvpipe (its own: memory-mapped buffers read by the runner's one I/O thread with the "
              "other cameras, the driver's timestamps and sequence numbers; yuyv, uyvy, nv12, jpeg cameras) or "
              "ffmpeg (a reader thread per camera; h264, h265, raw; not multi-planar devices); default: dvpipe "
              "where it can")


#: FFmpeg's ``input_format`` names of the pixel formats dvpipe's V4L2 reader takes (camera encoding -> name)
_FFMPEG_V4L2_NAME = {"yuyv": "yuyv422", "uyvy": "uyvy422", "nv12": "nv12", "jpeg": "mjpeg"}


def _v4l2_reader(encoding: str, input_format: Optional[str]) -> Optional[str]:
    """Why dvpipe's own V4L2 reader cannot read this camera, or None when it can."""
    if encoding not in V4L2_FOURCC:
        return f"it takes yuyv, uyvy, nv12 and jpeg (MJPEG) cameras, not {encoding}"
    if input_format and input_format.lower() not in (_FFMPEG_V4L2_NAME[encoding], V4L2_FOURCC[encoding].lower()):
        return f"it reads the camera's encoding {encoding} ({V4L2_FOURCC[encoding]}), not input_format {input_format}"
    return v4l2_reader_refusal()


@register_source("v4l2")
class V4l2Source(_LiveStream):
    """V4L2 capture device; capture time: the driver's timestamp of each frame (dvpipe's reader), else
    the arrival clock.

    Read by dvpipe's own reader (:mod:`._v4l2`) where it can (``reader: dvpipe``, the default for
    yuyv, uyvy, nv12 and jpeg cameras): the runner's I/O loop then serves the camera with the others on
    one thread (:attr:`pollable`); frames the driver dropped (its sequence numbers) are counted as lost
    at the source, a buffer the driver flags is a corrupt drop. Else by PyAV's libavdevice ``v4l2``
    input on a reader thread of its own."""

    format = "v4l2"
    Options = V4l2Options
    uri_help = "a device such as /dev/video0 (required)"

    @classmethod
    def validate(cls, options: V4l2Options, ctx: SourceContext) -> V4l2Options:
        if ctx.uri is None:
            ctx.err("uri", "required: a V4L2 device such as /dev/video0")
        elif not os.path.exists(ctx.uri):
            ctx.warn(f"device {ctx.uri} does not exist on this machine", "uri")
        if options.reader == "dvpipe":
            why = _v4l2_reader(ctx.encoding, options.input_format)
            if why:
                ctx.err("reader", f"dvpipe's V4L2 reader cannot read this camera: {why} (reader: ffmpeg can)")
        return options

    def __init__(self, camera, cfg):
        super().__init__(camera, cfg)
        self.backoff = Backoff(500.0, 5000.0, 2.0, 0)
        reader = self.options.get("reader")
        if reader is None:
            reader = "ffmpeg" if _v4l2_reader(camera.encoding, self.options.get("input_format")) else "dvpipe"
        self.pollable = reader == "dvpipe"
        self._device: Optional[V4l2Capture] = None

    def _container_options(self) -> dict:
        cam = self.camera
        o = {}
        fmt = self.options.get("input_format") or _FFMPEG_V4L2_NAME.get(cam.encoding)
        if fmt:
            o["input_format"] = str(fmt)
        if self.options.get("fps"):
            o["framerate"] = f"{self.options['fps']:g}"
        h, w = self._size()
        o["video_size"] = f"{w}x{h}"
        return o

    def _size(self) -> tuple[int, int]:
        """``(height, width)`` to ask the device for: the ``size`` option, else the camera's."""
        h, w = self.options.get("size") or (self.camera.height, self.camera.width)
        return int(h), int(w)

    def _open(self) -> None:
        if not os.path.exists(self.cfg.uri):
            raise SourceError(f"no such V4L2 device: {self.cfg.uri}")
        if self.pollable:
            self._open_device()
            return
        av = _av()
        if not any("v4l2" in f.split(",") for f in av.formats_available):
            raise SourceError("this PyAV/FFmpeg build has no v4l2 input device")
        super()._open()

    def _open_device(self) -> None:
        cam = self.camera
        device = V4l2Capture(self.cfg.uri, V4L2_FOURCC[cam.encoding], self._size(), self.options.get("fps"))
        got = device.open()
        try:
            problem = self._device_problem(got)
        except BaseException:
            device.close()
            raise
        if problem:
            device.close()
            raise SourceError(problem)
        self._device = device
        self._last_sequence: Optional[int] = None
        self._stamp_ahead_ns = 0  # the most the driver's stamps were ahead of the frames' arrival (ns)
        self._begin_live()

    def _device_problem(self, got) -> Optional[str]:
        """Why the device's negotiated format (:class:`~._v4l2.Negotiated`) does not serve this camera, or None."""
        cam = self.camera
        if (got.height, got.width) != (cam.height, cam.width):
            return (f"{self.cfg.uri} captures {got.width}x{got.height}; camera {cam.name} is "
                    f"{cam.width}x{cam.height} (ask the device for the camera's size, or declare the device's)")
        if cam.encoding not in RAW_YUV_ENCODINGS:
            return None
        from ...backends._raw_yuv import MATRICES, colour_of

        if got.yuv_matrix not in MATRICES:
            return (f"{self.cfg.uri} says its {got.fourcc} is {got.yuv_matrix} {got.yuv_range} range, which dvpipe "
                    f"does not convert (it converts {', '.join(MATRICES)})")
        declared = colour_of(cam)
        if declared != (got.yuv_matrix, got.yuv_range):
            return (f"{self.cfg.uri} says its {got.fourcc} is {got.yuv_matrix} {got.yuv_range} range; camera "
                    f"{cam.name} is converted as {declared[0]} {declared[1]} (set the camera's yuv_matrix: "
                    f"{got.yuv_matrix} and yuv_range: {got.yuv_range})")
        return None

    # -- dvpipe's reader: what the I/O loop calls ------------------------------------------------------
    def filenos(self) -> list[int]:
        """The device's descriptor (for the I/O loop's poll); none when closed."""
        return [self._device.fileno()] if self._device is not None else []

    def receive(self) -> int:
        """Take the frames the driver filled (never waits); raises :class:`StreamLost` when the
        device stopped streaming. Returns how many frames came."""
        if self._device is None:
            raise StreamLost(f"{self.cfg.uri}: not open")
        return self._device.receive()

    def _read(self) -> Optional[Item]:
        device = self._device
        if device is None:
            return super()._read()
        t0 = now_ns()
        f = self._next_ready(device.frames, device)
        arrival_mono = now_ns()
        lost = 0
        if self._last_sequence is not None:
            lost = (f.sequence - self._last_sequence - 1) % (1 << 32)
            lost = 0 if lost >= 1 << 31 else lost  # the driver's counter restarted
        self._last_sequence = f.sequence
        mono = arrival_mono
        if f.timestamp_ns is not None:
            # no frame is captured after it was read: a driver that stamps ahead of delivery (vivid stamps
            # the end of the frame's period and hands the frame over before it) is moved back by the
            # most it was ahead on this connection
            ahead = f.timestamp_ns - arrival_mono
            self._stamp_ahead_ns = max(self._stamp_ahead_ns, ahead)
            mono = f.timestamp_ns - self._stamp_ahead_ns
        self._media_ns = f.timestamp_ns  # the driver's clock: frames lost in an outage, from its gaps
        data: Any = FrameError(f"{self.cfg.uri}: corrupt frame: {f.damaged}") if f.damaged else f.data
        item = self._item(data, to_epoch_ns(mono), capture_mono_ns=mono, read_span_ns=(t0, now_ns()))
        item.lost_before = lost
        return item

    def nominal_fps(self) -> Optional[float]:
        if self._device is not None and self._device.negotiated is not None and self._device.negotiated.fps:
            return self._device.negotiated.fps
        return super().nominal_fps()

    def _close(self) -> None:
        device, self._device = self._device, None
        if device is not None:
            device.close()
        super()._close()

    def _timeout(self):
        return (5.0, self.read_timeout_s)
