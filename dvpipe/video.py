"""H.264 / H.265 decoding as a plan step, and the one place where decode order becomes presentation order.

A coded video stream arrives in **decode order** (an access unit per coded picture); with B-frames
(the libx264/libx265 default, most dashcam and dataset re-encodes) pictures are *presented* in
another order, and a decoder returns each picture some access units after it received it. A frame
of a dvpipe camera is one *presented* picture, so:

* **Sources emit frames in presentation order** (:class:`PresentationOrder`): each frame is a
  :class:`VideoPacket` that names the picture it stands for (its pts, or its presentation index
  for elementary streams, which carry no timestamps) and carries the access units read since the
  previous frame, looking far enough ahead that the decoder can return that picture.
* **The decode step matches pictures to frames** (:class:`ReorderingDecoder`): it keeps the
  camera's queue of access units, feeds them lazily until the decoder outputs the wanted picture,
  and returns exactly that picture, or raises a :class:`~dvpipe.errors.FrameError` naming why it
  cannot (never another picture). The same class serves the CPU kernel (``decode_video``) and the
  sources that decode themselves (``encoding: raw``); a device decoder plugs in as another
  :class:`Engine`.

Integrity: a decode error, a picture the decoder flags as corrupt, or damage dvpipe finds itself
(:mod:`dvpipe.bitstream`: unreadable headers, a missing reference picture, a slice cut short, an H.265
picture that does not match its decoded picture hash; the source's :attr:`AccessUnit.damage`) breaks
the reference chain (not for streams whose every picture carries a hash: each is judged by its own):
the decoder is drained (pictures already complete stay valid), access units are skipped until the
next keyframe (their frames are drops ``waiting for a keyframe``), and pictures presented before
that keyframe but decoded after it (open-GOP leading pictures, which reference the lost pictures)
are dropped too. A frame dropped before decoding (superseded, late) still feeds its access units to
the decoder: the runner merges its packet into the camera's next one (:func:`merge_packets`).

Layouts: :func:`decode_video` returns HxWx3 uint8 BGR (FFmpeg's ``bgr24`` conversion, the reference
pixels); :func:`decode_picture` the decoder's own picture, whose 8-bit 4:2:0 planes
(:func:`picture_yuv420`: Y full size, Cb and Cr at half width and height, the picture's BT.601/709/2020
matrix and limited/full range) the CPU backend converts straight into its output at fidelity ``fast``.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Iterable, Optional, Sequence, cast

import numpy as np

from .bitstream import StreamHeaders, has_recovery_point_sei, picture_hash_mismatch
from .codecs import VIDEO_ENCODINGS
from .errors import ConfigError, CorruptFrameError, FrameError

__all__ = ["VIDEO_ENCODINGS", "AccessUnit", "VideoPacket", "PresentationOrder", "ReorderingDecoder",
           "decode_video", "decode_picture", "bgr24", "picture_bgr", "picture_yuv420", "picture_swscale_coef",
           "swscale_bgr24_coef", "yuv_matrix", "merge_packets",
           "as_packet", "is_keyframe", "nal_types", "camera_encoder",
           "FILE_LOOKAHEAD", "ELEMENTARY_LOOKAHEAD", "KEYFRAME_WAIT"]

_FFMPEG_NAME = {"h264": "h264", "h265": "hevc"}

#: Access units read beyond a picture before its frame is emitted, for sources with timestamps. H.264
#: and H.265 allow at most 16 pictures to be reordered around any one (max_num_reorder_frames /
#: sps_max_num_reorder_pics <= 16), and FFmpeg delays output by at most that many.
FILE_LOOKAHEAD = 16
#: The same for elementary streams, matched by presentation index: 16 for the reorder, 16 for the delay.
ELEMENTARY_LOOKAHEAD = 32
#: the drop reason's words that classify it as ``keyframe_wait`` (dvpipe.deploy.summary.classify_drop)
KEYFRAME_WAIT = "waiting for a keyframe"
#: at most this many decoded pictures wait for their frame (more means frames were lost upstream)
_MAX_HELD_PICTURES = 64


@dataclass(frozen=True)
class AccessUnit:
    """One coded picture in Annex B form.

    Attributes:
        data: Annex B bytes (start codes; parameter sets in band before keyframes).
        pts_ns: presentation time in ns from the start of its stream, or None (no timestamps).
        keyframe: a decoder can (re)start here (H.264 IDR or recovery point; H.265 IRAP).
        show: False for pictures decoded only as references and never presented (edit lists).
        damage: what the source knows is wrong with the unit (the demuxer flagged its packet
            corrupt), or None: its picture is a ``corrupt`` drop and the reference chain breaks there.
    """

    data: bytes
    pts_ns: Optional[int] = None
    keyframe: bool = False
    show: bool = True
    damage: Optional[str] = None


#: In a packet's unit list: units before this one were lost (the chain is broken here).
GAP = "gap"
#: In a packet's unit list: a new stream starts here (a reopened file, a reconnect): new decoder.
RESET = "reset"


@dataclass
class Lookahead:
    """How many access units a live source reads ahead of a frame; the decoder raises it when short."""

    units: int = 0


@dataclass
class VideoPacket:
    """The payload of one video frame: access units to feed, and which picture the frame is.

    Attributes:
        units: in decode order: :class:`AccessUnit` objects, and the markers :data:`GAP` / :data:`RESET`.
        want: the picture this frame stands for: its ``pts_ns`` (``by`` = "pts"), its presentation
            index since the stream's start (``by`` = "index"), or None for the picture of the last
            unit (``by`` = "unit": one access unit per frame, as the Python API's plain bytes are).
        by: how ``want`` is matched: ``pts``, ``index`` or ``unit``.
        end: no access unit follows in this stream: drain the decoder when the picture is not out.
        lookahead: the source's look-ahead, raised by the decoder when it needed more units.
        keyframe: the wanted picture is a keyframe's (for reports; decoding does not need it).
        arrival: ``(wall clock ns since the epoch, monotonic ns)`` at which the access unit of the
            wanted picture was read by the source, when the source noted it (live sources: the time
            the frame waited in the look-ahead after its own data arrived is latency).
    """

    units: list = field(default_factory=list)
    want: Optional[int] = None
    by: str = "unit"
    end: bool = False
    lookahead: Optional[Lookahead] = None
    keyframe: bool = False
    arrival: Optional[tuple[int, int]] = None

    @property
    def nbytes(self) -> int:
        return sum(len(u.data) for u in self.units if isinstance(u, AccessUnit))


def as_packet(data: Any, codec: str) -> VideoPacket:
    """A frame payload as a :class:`VideoPacket` (plain Annex B bytes: one unit, matched by unit)."""
    if isinstance(data, VideoPacket):
        return data
    if isinstance(data, np.ndarray):
        raise FrameError(f"an {codec} camera delivers encoded access units, got a decoded array")
    au = bytes(data)
    key = is_keyframe(au, codec)
    return VideoPacket([AccessUnit(au, None, key)], None, "unit", keyframe=key)


def merge_packets(held: Sequence[VideoPacket], current: VideoPacket, *, gap: bool = False) -> VideoPacket:
    """``current`` carrying the units of frames dropped before decoding (oldest first).

    ``gap``: units were lost between the held packets and ``current`` (a discontinuity upstream).
    """
    if not held and not gap:
        return current
    units: list = []
    for p in held:
        units.extend(p.units)
    if gap:
        units.append(GAP)
    units.extend(current.units)
    return VideoPacket(units, current.want, current.by, current.end, current.lookahead, current.keyframe,
                       current.arrival)


# -- bitstream facts -----------------------------------------------------------------------------

def nal_types(au: bytes, codec: str) -> list[int]:
    """NAL unit types in an Annex B access unit (H.264: 5 bits; H.265: 6 bits)."""
    types = []
    n = len(au)
    i = au.find(b"\x00\x00\x01")
    while 0 <= i < n - 3:
        head = au[i + 3]
        types.append(head & 0x1F if codec == "h264" else (head >> 1) & 0x3F)
        i = au.find(b"\x00\x00\x01", i + 3)
    return types


def is_keyframe(au: bytes, codec: str, types: Optional[list[int]] = None) -> bool:
    """True when a decoder can start at this access unit: H.264 IDR (or an I picture with a
    recovery-point SEI, as open-GOP encoders write), H.265 IRAP (BLA, IDR, CRA).

    ``types``: the access unit's :func:`nal_types`, when the caller has them already.
    """
    if types is None:
        types = nal_types(au, codec)
    if codec == "h264":
        return 5 in types or (6 in types and 1 in types and has_recovery_point_sei(au))
    return any(16 <= t <= 23 for t in types)


def _random_access_words(codec: str, idr_only: bool = False) -> str:
    """What a decoder waiting to (re)start waits for, in words."""
    if idr_only:
        return "an IDR picture"
    return "an IDR or a recovery-point SEI" if codec == "h264" else \
        "an IRAP picture (IDR, CRA or BLA)" if codec == "h265" else "a keyframe"


def _is_idr(au: bytes, codec: str) -> bool:
    """A keyframe that no presented picture after it depends on anything before (IDR)."""
    types = nal_types(au, codec)
    return 5 in types if codec == "h264" else any(t in (19, 20) for t in types)


# -- source side: decode order -> presentation order ------------------------------------------------

class PresentationOrder:
    """Turns access units in decode order into frames in presentation order (one per shown picture).

    ``push`` each unit as it is read, then take the frames that are ready from ``pop``; at the end
    of the stream ``finish`` releases the rest. A picture's frame is released once ``lookahead``
    more units have been read after every unit presented up to it: by then no unit presented
    before it can still arrive (the standards' reorder bound) and the decoder can output it.

    Args:
        by: ``pts`` (units carry ``pts_ns``; frames are ordered and matched by pts) or ``index``
            (no timestamps: frames are the decoder's output pictures, counted).
        lookahead: units to read ahead (:data:`FILE_LOOKAHEAD`, :data:`ELEMENTARY_LOOKAHEAD`, or a
            :class:`Lookahead` that a live stream's decoder raises when it runs short).
    """

    def __init__(self, by: str, lookahead: int | Lookahead):
        if by not in ("pts", "index"):
            raise ConfigError(f"by must be 'pts' or 'index', got {by!r}")
        self.by = by
        self._lookahead = lookahead if isinstance(lookahead, Lookahead) else Lookahead(int(lookahead))
        self._live = isinstance(lookahead, Lookahead)
        self._units: list = []  # read, not yet handed to a frame
        self._heap: list[tuple[int, int]] = []  # (pts, decode index) of shown pictures not yet emitted
        self._read = 0  # units read in this stream
        self._covered = -1  # highest decode index among pictures emitted (or to emit next)
        self._emitted = 0
        self._max_pts: Optional[int] = None
        self._ended = False
        self._keyframes: dict[int, bool] = {}  # decode index -> keyframe, for pictures not yet emitted
        self._arrivals: dict[int, tuple[int, int]] = {}  # decode index -> arrival, for pictures not yet emitted

    @property
    def lookahead(self) -> int:
        return self._lookahead.units

    @property
    def has_pts(self) -> bool:
        """Whether a unit with a pts was pushed."""
        return self._max_pts is not None

    @property
    def last_pts_ns(self) -> int:
        """The highest pts pushed so far (0 before any)."""
        return self._max_pts or 0

    def mark(self, marker: str) -> None:
        """Put :data:`GAP` or :data:`RESET` into the unit stream at this point."""
        self._units.append(marker)

    def push(self, unit: AccessUnit, arrival: Optional[tuple[int, int]] = None) -> None:
        """Add the next unit in decode order; ``arrival``: ``(wall ns, monotonic ns)`` when it was read."""
        self._units.append(unit)
        d = self._read
        self._read += 1
        if unit.keyframe:
            self._keyframes[d] = True
        if arrival is not None and unit.show:
            self._arrivals[d] = arrival
        if self.by == "index":
            heapq.heappush(self._heap, (d, d))
        elif unit.show and unit.pts_ns is not None:
            if self._live and self._max_pts is not None and unit.pts_ns < self._max_pts and unit.pts_ns >= 0:
                self._lookahead.units = max(self._lookahead.units, FILE_LOOKAHEAD)  # the stream reorders
            self._max_pts = unit.pts_ns if self._max_pts is None else max(self._max_pts, unit.pts_ns)
            heapq.heappush(self._heap, (unit.pts_ns, d))

    def finish(self) -> None:
        """The stream ended: every remaining picture is ready."""
        self._ended = True

    def pop(self) -> Optional[VideoPacket]:
        """The next frame in presentation order, or None until more units are read."""
        if not self._heap:
            if self._ended and self._units and self._emitted:
                self._units.clear()  # trailing units nobody presents (hidden pictures)
            return None
        key, d = self._heap[0]
        covered = max(self._covered, d)
        if self.by == "index":
            covered = max(covered, self._emitted)  # index k may be decoded as late as k + reorder
        if not self._ended and self._read < covered + 1 + self.lookahead:
            return None
        heapq.heappop(self._heap)
        self._covered = covered
        want = key if self.by == "pts" else self._emitted
        self._emitted += 1
        units, self._units = self._units, []
        key = self._keyframes.pop(d, False)
        arrival = self._arrivals.pop(d, None)
        for k in [k for k in self._keyframes if k < d - 2 * ELEMENTARY_LOOKAHEAD]:
            del self._keyframes[k]  # hidden pictures' entries
        for k in [k for k in self._arrivals if k < d - 2 * ELEMENTARY_LOOKAHEAD]:
            del self._arrivals[k]
        return VideoPacket(units, want, self.by, self._ended, self._lookahead if self._live else None, key, arrival)


def presentation_packets(units: Iterable[AccessUnit], by: str, lookahead: int) -> list[VideoPacket]:
    """A whole stream's frames, as a video source emits them: ``units`` in decode order in, one
    :class:`VideoPacket` per shown picture out, in presentation order (tests, tools, benchmarks)."""
    order = PresentationOrder(by, lookahead)
    order.mark(RESET)
    out: list[VideoPacket] = []
    for unit in units:
        order.push(unit)
        while (packet := order.pop()) is not None:
            out.append(packet)
    order.finish()
    while (packet := order.pop()) is not None:
        out.append(packet)
    return out


# -- decoder side: pictures matched to frames ----------------------------------------------------

class Engine:
    """A video decoder as :class:`ReorderingDecoder` drives it (FFmpeg here; a device unit elsewhere).

    ``send(data, tag)`` decodes one access unit and returns the pictures it released, in
    presentation order, as ``(tag, picture, corrupt_reason_or_None)``; ``drain()`` returns the rest
    at the end of a stream (the engine is then spent). ``send`` raises :class:`FrameError` when the
    decoder rejects the unit.
    """

    def send(self, data: bytes, tag: int) -> list[tuple[int, Any, Optional[str]]]:  # pragma: no cover
        raise NotImplementedError

    def drain(self) -> list[tuple[int, Any, Optional[str]]]:  # pragma: no cover
        raise NotImplementedError


class FFmpegEngine(Engine):
    """FFmpeg's software H.264/H.265 decoder through PyAV (slice threads only: frame threading would
    add a picture of delay per thread). A unit it rejects raises; a picture it concealed is flagged.

    Pictures are returned as the decoder made them (PyAV ``VideoFrame``: 8-bit 4:2:0 planes for H.264
    High / H.265 Main, in FFmpeg's frame pool); :func:`picture_bgr` and :func:`picture_yuv420` read them."""

    #: detect what can be detected, conceal, and flag the picture (AV_FRAME_FLAG_CORRUPT): the
    #: decoder keeps the pictures decoded before the damage (``explode`` would discard some)
    ERR_DETECT = "crccheck+bitstream+buffer"

    def __init__(self, codec: str, extradata: Optional[bytes] = None):
        import av

        self._av = av
        self.codec = codec
        self._dec: Any = av.CodecContext.create(_FFMPEG_NAME.get(codec, codec), "r")
        if extradata:
            self._dec.extradata = extradata
        self._dec.thread_type = "SLICE"
        self._dec.options = {"err_detect": self.ERR_DETECT}

    def _pictures(self, frames) -> list:
        return [(f.pts, f, "the decoder flagged the picture as corrupt" if f.is_corrupt else None) for f in frames]

    def send(self, data: bytes, tag: int) -> list:
        pkt = self._av.Packet(data)
        pkt.pts = pkt.dts = None
        pkt.pts = tag
        try:
            return self._pictures(self._dec.decode(pkt))
        except self._av.error.FFmpegError as e:
            raise CorruptFrameError(f"decoder: {getattr(e, 'strerror', None) or e}") from None

    def drain(self) -> list:
        try:
            return self._pictures(self._dec.decode(None))
        except self._av.error.FFmpegError:
            return []


@dataclass
class _Tagged:
    key: Optional[int]  # pts (by pts) or None (assigned at output, by index / unit)
    show: bool
    leading_after: Optional[int]  # resume point: a picture presented before this pts is damaged
    hashed: bool = False  # in a stream whose every picture carries a hash: damage shows in each picture's own


class ReorderingDecoder:
    """One camera's decoder: access units in, the picture each frame stands for out.

    Args:
        codec: ``h264`` or ``h265`` (or another FFmpeg decoder's name, for sources that decode
            themselves: keyframes then come from the container).
        engine: a factory ``codec -> Engine`` (default FFmpeg).
        first_picture_early: the stream's first picture, when it is an IDR picture presented first, is
            decoded by an engine of its own (one access unit, :meth:`_first_picture_early`) instead of
            waiting for the decoder's reorder delay (with B-frames FFmpeg outputs it only after two or
            three more units: ~55 ms of a camera's first 4K frame instead of ~28). Costs one extra
            intra decode per decoder, once. Off for device engines, where a second channel costs more.
    """

    def __init__(self, codec: str, engine: Callable[[str], Engine] = FFmpegEngine, first_picture_early: bool = True):
        self.codec = codec
        self._make_engine = engine
        self._early = first_picture_early and codec in _FFMPEG_NAME  # until the first picture() call
        self._engine: Optional[Engine] = None
        self._pending: deque = deque()
        self._tags: dict[int, _Tagged] = {}
        self._next_tag = 0
        self._held: dict[int, tuple[Any, Optional[str], Optional[int]]] = {}  # key -> (picture, damage, tag)
        self._lost: dict[int, str] = {}  # key -> reason, for pictures that will never come
        self._frontier: Optional[int] = None  # highest key output so far (presentation order)
        self._out_index = 0  # presentation index of the next output picture (by index)
        self._need_key = True
        self._resume_pts: Optional[int] = None
        # the non-IDR keyframe decoding last (re)started at: (its key, "a recovery point" / "a CRA"...)
        self._restart: Optional[tuple[Optional[int], str]] = None
        # dvpipe's own reading of the headers (dvpipe.bitstream): damage the decoder does not report
        self._headers: Optional[StreamHeaders] = StreamHeaders(codec) if codec in _FFMPEG_NAME else None
        self._header_damage: dict[int, str] = {}  # tag -> structural damage of its unit
        self._hashes: dict[int, tuple] = {}  # tag -> (H.265 decoded picture hash, coded size) of its unit
        self._units_seen = 0  # units fed or skipped since the stream started (by index: the next index)
        self._drained = False
        self._by = "unit"
        self._want_unit: Optional[AccessUnit] = None  # by unit: the unit whose picture is wanted
        self._want_tag: Optional[int] = None
        self._want_skipped: Optional[str] = None
        # (first damaged tag, tag of the keyframe decoding resumed at or None): pictures decoded
        # from units in between reference a damaged or lost picture
        self._damaged: list[list[Any]] = []  # [first damaged tag, resume tag or None]
        self._idr_tags: deque = deque(maxlen=_MAX_HELD_PICTURES)  # tags of the IDR units sent, oldest first

    # feeding
    def _new_engine(self) -> None:
        self._engine = self._make_engine(self.codec)
        self._drained = False

    def _drain(self) -> None:
        if self._engine is not None and not self._drained:
            for tag, pic, damage in self._engine.drain():
                self._output(tag, pic, damage)
            self._drained = True
        self._engine = None
        self._need_key = True

    def _break(self, first_damaged_tag: int, late: bool = False) -> None:
        """The reference chain breaks at ``first_damaged_tag``: pictures decoded before it stay valid
        (the decoder goes on and outputs them), units are skipped until the next keyframe. ``late``: the
        verdict came with the picture's output, after later units were sent; if an IDR was among them, the
        decoding that restarted there references nothing before it, so only the pictures in between are
        damaged and no keyframe is waited for."""
        if late:
            resume = next((k for k in self._idr_tags if k > first_damaged_tag), None)
            if resume is not None:
                span = [first_damaged_tag, resume]
                if self._damaged and self._damaged[-1][1] is None:
                    self._damaged.insert(len(self._damaged) - 1, span)  # the open span stays last
                else:
                    self._damaged.append(span)
                return
        self._need_key = True
        self._resume_pts = None
        if self._damaged and self._damaged[-1][1] is None:
            self._damaged[-1][0] = min(self._damaged[-1][0], first_damaged_tag)
        else:
            self._damaged.append([first_damaged_tag, None])

    def _damage_of(self, tag: int) -> Optional[str]:
        for first, resume in self._damaged:
            if first < tag and (resume is None or tag < resume):
                return (f"{self.codec}: {KEYFRAME_WAIT} (decoded from a reference chain broken by a lost or "
                        "corrupt picture)")
        return None

    def _feed(self, unit) -> None:
        if isinstance(unit, str) and unit == GAP:  # (an AccessUnit's own == is a slow Python call)
            self._break(self._next_tag - 1)
            if self._headers is not None:
                self._headers.lost()
            return
        if isinstance(unit, str) and unit == RESET:
            self._drain()
            self._restart = None
            self._header_damage.clear()
            self._hashes.clear()
            if self._headers is not None:
                self._headers = StreamHeaders(self.codec)
            self._damaged.clear()
            self._idr_tags.clear()
            self._tags.clear()
            self._held.clear()
            self._lost.clear()
            self._frontier = None
            self._out_index = 0
            self._units_seen = 0
            return
        if not unit.data:  # a unit the container could not deliver (a damaged packet)
            if self._headers is not None:
                self._headers.lost()
            self._skip(unit, f"corrupt {self.codec} access unit (the demuxer could not read it)")
            self._break(self._next_tag - 1)
            return
        by_index = self._by == "index"
        headers = self._headers.read(unit.data) if self._headers is not None else None
        structural = unit.damage or (headers.damage if headers is not None else None)
        if self._need_key:
            # by index, pictures are counted: only an IDR guarantees that every picture decoded from
            # it on is output (after a CRA the decoder discards the leading pictures, shifting the count)
            idr = _is_idr(unit.data, self.codec) if self.codec in _FFMPEG_NAME else unit.keyframe
            if not (unit.keyframe or idr) or (by_index and not idr) or structural:
                self._skip(unit, f"{self.codec}: {KEYFRAME_WAIT}: {_random_access_words(self.codec, by_index)} "
                                 "(the stream started between random-access points, or pictures before this one "
                                 "were lost or corrupt)")
                return
            if by_index and self._engine is not None:
                self._drain()  # pictures still in the decoder take their indices before the count restarts
            self._need_key = False
            self._resume_pts = None if idr else unit.pts_ns
            self._restart = None if idr else (unit.pts_ns, "a recovery point" if self.codec == "h264" else
                                              "a CRA" if 21 in nal_types(unit.data, self.codec) else "an IRAP picture")
            if by_index:
                self._out_index = self._units_seen
            if self._damaged and self._damaged[-1][1] is None:
                self._damaged[-1][1] = self._next_tag
        tag = self._next_tag
        self._next_tag += 1
        self._units_seen += 1
        if unit.keyframe and (self.codec not in _FFMPEG_NAME or _is_idr(unit.data, self.codec)):
            self._idr_tags.append(tag)  # where a late damage verdict's chain ends (see _break)
        if unit is self._want_unit:
            self._want_tag = tag
        hashed = headers is not None and headers.hashed_stream and headers.poc is not None
        self._tags[tag] = _Tagged(unit.pts_ns, unit.show, self._resume_pts, hashed)
        if headers is not None and headers.picture_hash is not None:
            self._hashes[tag] = (headers.picture_hash, headers.coded_size)
        if structural:
            self._header_damage[tag] = structural
            if unit.pts_ns is not None and unit.show:  # its frame's verdict, should no picture come
                self._lost[unit.pts_ns] = f"corrupt {self.codec} access unit (dvpipe's header check: {structural})"
        if self._engine is None:
            self._new_engine()
        assert self._engine is not None  # _new_engine made one
        try:
            released = self._engine.send(unit.data, tag)
        except FrameError as e:
            self._tags.pop(tag, None)
            reason = f"corrupt {self.codec} access unit ({e.reason})"
            if unit.pts_ns is not None and unit.show:
                self._lost[unit.pts_ns] = reason
            if unit is self._want_unit:
                self._want_skipped = reason
            self._break(tag)
            return
        # what is decoded after a damaged picture may reference it, unless each picture has its own hash, or
        # (H.265) its slice header was unreadable: then it entered no reference state, FFmpeg's or dvpipe's,
        # and a picture that references it names it in its reference picture set and finds it missing
        unread = self.codec == "h265" and headers is not None and headers.poc is None
        if structural and not hashed and not unread:
            self._break(tag)
        for t, pic, damage in released:
            self._output(t, pic, damage)

    def _skip(self, unit: AccessUnit, reason: str) -> None:
        self._units_seen += 1
        if unit.pts_ns is not None and unit.show:
            self._lost[unit.pts_ns] = reason
        if unit is self._want_unit:
            self._want_skipped = reason

    def _output(self, tag: Optional[int], pic, damage: Optional[str]) -> None:
        info = self._tags.pop(tag, None) if tag is not None else None
        while len(self._tags) > _MAX_HELD_PICTURES:  # units whose picture the decoder never output
            del self._tags[min(self._tags)]
        while len(self._header_damage) > _MAX_HELD_PICTURES:
            del self._header_damage[min(self._header_damage)]
        while len(self._hashes) > _MAX_HELD_PICTURES:
            del self._hashes[min(self._hashes)]
        if self._by == "index":
            key = self._out_index
            self._out_index += 1
        elif self._by == "unit":
            key = tag if tag is not None else -1
        else:
            if info is None or info.key is None or not info.show:
                return  # a hidden picture (edit list) or one we cannot place
            key = info.key
        if info is not None and info.leading_after is not None and key < info.leading_after:
            damage = damage or self._leading_reason()
        if tag is not None and damage is None and tag in self._header_damage:
            damage = f"dvpipe's header check: {self._header_damage[tag]}"
        expected = self._hashes.pop(tag, None) if tag is not None else None
        if expected is not None and damage is None:
            damage = picture_hash_mismatch(pic, *expected)
        if tag is not None:
            self._header_damage.pop(tag, None)
            damage = damage or self._damage_of(tag)
            if damage and KEYFRAME_WAIT not in damage and not (info is not None and info.hashed):
                # what is decoded after it may reference it (pictures with their own hash are judged by it)
                self._break(tag, late=True)
        self._held[key] = (pic, damage, tag)
        lowest = min(self._tags) if self._tags else self._next_tag  # the oldest unit still in the decoder
        while self._damaged and self._damaged[0][1] is not None and self._damaged[0][1] <= lowest:
            del self._damaged[0]  # every picture it could damage is out (held ones keep their verdict)
        self._frontier = key if self._frontier is None else max(self._frontier, key)
        if len(self._held) > _MAX_HELD_PICTURES:
            del self._held[min(self._held)]

    # the frame's picture
    def picture(self, packet: VideoPacket, on_corrupt: Optional[Callable[[str], None]] = None):
        """Feed ``packet``'s units and return the picture it stands for (a decoder frame object).

        ``on_corrupt`` is called with the reason when the picture exists but the decoder flagged it
        (``KernelContext.corrupt``: raises to drop the frame, returns to keep it); default: raise.

        Raises:
            FrameError: the picture is lost (corrupt unit, waiting for a keyframe), the decoder
                needs more units than the source read ahead, or the stream reorders pictures
                where frames are matched one unit each.
            CorruptFrameError: the picture is damaged and ``on_corrupt`` did not keep it.
        """
        self._by = packet.by
        self._pending.extend(packet.units)
        # a new stream: the old one's leftover units are never wanted (none is left from an earlier call, so
        # look only when this packet brings a marker: an AccessUnit's own == is a slow Python call)
        if any(isinstance(u, str) for u in packet.units):
            while RESET in self._pending:
                unit = self._pending.popleft()
                if not isinstance(unit, AccessUnit):
                    self._feed(unit)
        want = cast(int, packet.want)  # set for by pts/index; by unit: replaced below
        if self._early:
            self._early = False
            early = self._first_picture_early(want) if packet.by == "pts" else None
            if early is not None:
                return early
        if packet.by == "unit":  # the picture of the packet's last unit, which gets its tag when fed
            self._want_unit = next((u for u in reversed(packet.units) if isinstance(u, AccessUnit)), None)
            self._want_tag = self._want_skipped = None
            while self._pending:
                self._feed(self._pending.popleft())
            self._want_unit = None
            if self._want_skipped is not None:
                raise CorruptFrameError(self._want_skipped) if self._want_skipped.startswith("corrupt") \
                    else FrameError(self._want_skipped)
            want = self._want_tag if self._want_tag is not None else -1
        while True:
            if want in self._held:
                tag = self._held[want][2]
                if tag is not None and self._tags and min(self._tags) < tag and (self._pending or (
                        packet.end and not self._drained and self._engine is not None)):
                    # a picture decoded before this one is not out yet: its damage (which would
                    # reach this one) is known only when it is; decode on until it is out
                    if self._pending:
                        self._feed(self._pending.popleft())
                    else:
                        self._drain()
                    continue
                pic, damage, _ = self._held.pop(want)
                if tag is not None and damage is None:
                    damage = self._damage_of(tag)
                for k in [k for k in self._held if k < want]:
                    del self._held[k]
                self._forget_below(want)
                if damage is not None:
                    if KEYFRAME_WAIT in damage:
                        raise FrameError(damage)
                    (on_corrupt or _raise_corrupt)(f"corrupt {self.codec} picture ({damage})")
                return pic
            if want in self._lost:
                reason = self._lost.pop(want)
                self._forget_below(want)
                raise CorruptFrameError(reason) if reason.startswith("corrupt") else FrameError(reason)
            if self._frontier is not None and self._frontier > want:
                self._forget_below(want)
                if packet.by == "unit":
                    raise FrameError(f"{self.codec}: the decoder returns pictures out of decode order (the "
                                     "stream has B-frames): feed it through a dvpipe video source, which "
                                     "reorders, or encode without B-frames")
                raise FrameError(self._no_picture_reason(want))
            if self._pending:
                self._feed(self._pending.popleft())
                continue
            if packet.end and not self._drained and self._engine is not None:
                self._drain()
                continue
            if packet.end or self._need_key:
                raise FrameError(f"{self.codec}: {KEYFRAME_WAIT}: {_random_access_words(self.codec)} (no "
                                 "picture for this frame: its data was lost or corrupt)")
            if packet.lookahead is not None:
                packet.lookahead.units = min(FILE_LOOKAHEAD, packet.lookahead.units + 1)
            if packet.by == "unit":
                raise FrameError(f"{self.codec} decoder returned no picture for this access unit (a stream with "
                                 "B-frames delays pictures: feed it through a dvpipe video source, which reorders)")
            raise FrameError(f"{self.codec}: the decoder needs more access units than the source read ahead "
                             "(look-ahead raised for the next frames)")

    def _first_picture_early(self, want: int):
        """The stream's first picture without the reorder delay, or None (then decoded as usual).

        Only for an IDR access unit that is the first unit of the stream and the wanted frame (an IDR
        references nothing, so a decoder of its own makes the same pixels), read clean by dvpipe's
        header check, decoded unflagged, and matching its H.265 picture hash if it has one. The unit
        stays pending: the stream's decoder gets it with the next frame's units, and its own copy of
        this picture is then discarded as already presented."""
        if self._engine is not None or not self._pending:
            return None
        unit = self._pending[0]
        if (not isinstance(unit, AccessUnit) or unit.pts_ns != want or not unit.show or unit.damage
                or not unit.data or not _is_idr(unit.data, self.codec)):
            return None
        headers = StreamHeaders(self.codec).read(unit.data)
        if headers.damage is not None:
            return None
        engine = self._make_engine(self.codec)
        try:
            out = engine.send(unit.data, 0) + engine.drain()
        except FrameError:
            return None
        if len(out) != 1 or out[0][2] is not None:
            return None
        pic = out[0][1]
        if headers.picture_hash is not None and picture_hash_mismatch(pic, headers.picture_hash, headers.coded_size):
            return None
        return pic

    def _leading_reason(self) -> str:
        what = self._restart[1] if self._restart is not None else "a random-access point"
        return (f"{self.codec}: {KEYFRAME_WAIT}: a leading picture of {what} decoding (re)started at (it "
                "references pictures before it, which were lost or precede the stream's start)")

    def _no_picture_reason(self, want: int) -> str:
        """Why the decoder output no picture for ``want`` (a key of the current stream)."""
        if self._restart is not None and self._restart[0] is not None:
            if want < self._restart[0]:
                return self._leading_reason()
            if self.codec == "h264":
                return (f"{self.codec}: {KEYFRAME_WAIT}: decoding restarted at a recovery point and the decoder "
                        "outputs pictures only once the recovery is complete (an intra refresh not yet done)")
        return (f"{self.codec}: {KEYFRAME_WAIT}: {_random_access_words(self.codec)} (the decoder produced no "
                "picture for this frame: its data was lost or corrupt)")

    def _forget_below(self, key: int) -> None:
        for k in [k for k in self._lost if k <= key]:
            del self._lost[k]


def _raise_corrupt(reason: str) -> None:
    raise CorruptFrameError(reason)


def decode_picture(data: Any, ctx):
    """Decode one video frame (a :class:`VideoPacket`, or plain Annex B bytes) to the decoder's picture.

    The picture is what the camera's :class:`ReorderingDecoder` (kept in ``ctx.state``) returns for
    the frame: a PyAV ``VideoFrame`` in the decoder's own layout (8-bit 4:2:0 ``yuv420p`` /
    ``yuvj420p`` for H.264 High / H.265 Main), not yet converted or size-checked.

    Raises:
        FrameError: see :meth:`ReorderingDecoder.picture`.
    """
    codec = ctx.spec_in.encoding
    if codec not in VIDEO_ENCODINGS:
        raise FrameError(f"decode_video handles {', '.join(VIDEO_ENCODINGS)}, not {codec!r}")
    packet = as_packet(data, codec)
    dec = ctx.state.get("video_decoder")
    if dec is None or dec.codec != codec:
        dec = ctx.state["video_decoder"] = ReorderingDecoder(codec)
    return dec.picture(packet, getattr(ctx, "corrupt", None))


def decode_video(data: Any, ctx) -> np.ndarray:
    """Decode one video frame (a :class:`VideoPacket`, or plain Annex B bytes) to HxWx3 uint8 BGR.

    Args:
        data: the frame's payload.
        ctx: the kernel context (``ctx.spec_in.encoding`` is ``h264``/``h265``; ``ctx.state`` keeps
            this camera's :class:`ReorderingDecoder`; ``ctx.spec_in`` the declared size;
            ``ctx.corrupt`` the corruption policy).

    Raises:
        FrameError: see :meth:`ReorderingDecoder.picture`; a picture of another size than declared.
    """
    return picture_bgr(decode_picture(data, ctx), ctx.spec_in)


def _check_picture_size(picture, spec) -> None:
    if (picture.width, picture.height) != (spec.width, spec.height):
        raise FrameError(f"frame is {picture.width}x{picture.height} "
                         f"but the camera declares {spec.width}x{spec.height}")


def bgr24(picture) -> np.ndarray:
    """A decoded picture (any layout) as HxWx3 uint8 BGR: FFmpeg's ``bgr24`` conversion (swscale,
    the picture's own colour matrix and range).

    swscale runs on the calling thread only (``threads=1``; the same pixels as its default automatic
    threads): dvpipe's camera threads are the parallelism, and swscale's own thread per core on top
    of them would oversubscribe the CPUs (and measured slower, docs/performance.md)."""
    return picture.reformat(format="bgr24", threads=1).to_ndarray()


def picture_bgr(picture, spec) -> np.ndarray:
    """:func:`bgr24` of a decoded picture, checked against the camera's declared size."""
    _check_picture_size(picture, spec)
    return bgr24(picture)


#: (Kr, Kb) of the Y'CbCr matrices by FFmpeg colorspace code (AVColorSpace); anything else is BT.601,
#: as swscale treats it (SWS_CS_DEFAULT)
_YUV_KR_KB = {1: (0.2126, 0.0722), 4: (0.30, 0.11), 7: (0.212, 0.087), 9: (0.2627, 0.0593), 10: (0.2627, 0.0593)}
_YUV420 = {"yuv420p": False, "yuvj420p": True}  # 8-bit 4:2:0 pixel formats -> full range by the format


def yuv_matrix(colorspace: int, full_range: bool) -> tuple[float, float, float, float, float, float]:
    """``(ky, y0, crv, cgu, cgv, cbu)``: 8-bit Y'CbCr -> R'G'B' in grey levels by the standard.

    ``R = (Y - y0) ky + crv (Cr - 128)``, ``G = (Y - y0) ky - cgu (Cb - 128) - cgv (Cr - 128)``,
    ``B = (Y - y0) ky + cbu (Cb - 128)``. ``colorspace``: FFmpeg's code (1 BT.709, 9/10 BT.2020,
    5/6/2 and the rest BT.601); limited range scales Y by 255/219 from 16 and chroma by 255/224.
    """
    kr, kb = _YUV_KR_KB.get(int(colorspace), (0.299, 0.114))
    kg = 1.0 - kr - kb
    ky, y0, c = (1.0, 0.0, 1.0) if full_range else (255.0 / 219.0, 16.0, 255.0 / 224.0)
    return (ky, y0, c * 2 * (1 - kr), c * 2 * (1 - kb) * kb / kg, c * 2 * (1 - kr) * kr / kg, c * 2 * (1 - kb))


def picture_yuv420(picture, spec):
    """The planes of an 8-bit 4:2:0 picture, zero-copy, for the CPU backend's YUV kernel; None otherwise.

    Returns ``(y, y_stride, u, v, c_stride, coef)``: the picture's own plane buffers (luma
    ``height`` rows of ``width``; Cb, Cr ``ceil(height/2)`` rows of ``ceil(width/2)``; row strides
    in bytes) and its :func:`yuv_matrix`, from the picture's colorspace and range -- the ones FFmpeg's
    ``bgr24`` conversion uses. None for any other layout (4:2:2, 4:4:4, 10-bit...): the caller then
    takes :func:`picture_bgr`. Checked against the camera's declared size (FrameError).
    """
    _check_picture_size(picture, spec)
    full = _yuv420_full_range(picture)
    if full is None:
        return None
    planes = picture.planes
    return (planes[0], planes[0].line_size, planes[1], planes[2], planes[1].line_size,
            yuv_matrix(picture.colorspace, full))


def _yuv420_full_range(picture) -> Optional[bool]:
    """Whether an 8-bit 4:2:0 picture is full range (by its format, or its range tag); None for other layouts."""
    full = _YUV420.get(picture.format.name)
    if full is None:
        return None
    return full or int(picture.color_range) == 2


def picture_swscale_coef(picture) -> Optional[tuple[int, int, int, int, int, int]]:
    """:func:`swscale_bgr24_coef` of an 8-bit 4:2:0 picture of even width and height (where FFmpeg's
    bgr24 conversion is its unscaled converter); None otherwise."""
    full = _yuv420_full_range(picture)
    if full is None or picture.width % 2 or picture.height % 2:
        return None
    return swscale_bgr24_coef(picture.colorspace, full)


#: FFmpeg's Y'CbCr -> RGB coefficients (crv, cbu, cgu, cgv) in 1/65536 by colorspace code (libswscale's
#: ``ff_yuv2rgb_coeffs``), for the codes dvpipe's copy is checked against FFmpeg for
#: (tests/backends/test_swscale_exact.py): BT.709 (1), FCC (4), BT.601 (2 unspecified, 5, 6), SMPTE 240M (7),
#: BT.2020 non-constant luminance (9; FFmpeg refuses constant luminance, 10)
_SWS_COEFFS = {1: (117489, 138438, 13975, 34925), 4: (104448, 132798, 24759, 53109),
               2: (104597, 132201, 25675, 53279), 5: (104597, 132201, 25675, 53279),
               6: (104597, 132201, 25675, 53279), 7: (117579, 136230, 16907, 35559),
               9: (110013, 140363, 12277, 42626)}


def swscale_bgr24_coef(colorspace: int, full_range: bool) -> Optional[tuple[int, int, int, int, int, int]]:
    """``(y_coeff, y_offset, vr, ub, vg, ug)``: the 16-bit integers FFmpeg's unscaled yuv420p -> bgr24
    converter works with for a picture of this colorspace code and range (default contrast, saturation
    and brightness), for ``_native.yuv420_bgr24_normalise``; None for a code outside :data:`_SWS_COEFFS`.

    Derived as libswscale derives them: limited range scales luma by 255/219 from 16, full range the
    chroma by 224/255; each coefficient is rounded to 1/8192 (``(c * 8192 + 32768) >> 16``).
    """
    coeffs = _SWS_COEFFS.get(int(colorspace))
    if coeffs is None:
        return None
    crv, cbu, cgu, cgv = coeffs[0], coeffs[1], -coeffs[2], -coeffs[3]
    if full_range:
        cy, oy = 1 << 16, 0
        crv, cbu, cgu, cgv = (_trunc_div(c * 224, 255) for c in (crv, cbu, cgu, cgv))
    else:
        cy, oy = (1 << 16) * 255 // 219, 16 << 16
    return (_round16(cy * 8192), _round16(oy * 8), _round16(crv * 8192), _round16(cbu * 8192),
            _round16(cgv * 8192), _round16(cgu * 8192))


def _trunc_div(a: int, b: int) -> int:
    """C's integer division (toward zero)."""
    q = abs(a) // b
    return q if a >= 0 else -q


def _round16(x: int) -> int:
    """``x / 65536`` rounded half up and clipped to int16, as libswscale rounds its coefficients."""
    return max(-32768, min(32767, (x + 32768) >> 16))


def camera_encoder(codec: str, width: int, height: int, gop: int, fps: float = 30.0):
    """A PyAV encoder shaped like a camera's: Annex B access units, no B-frames, parameter sets before
    every keyframe, an IDR every ``gop`` pictures (used by the synthetic source and the test helpers)."""
    import av

    cc = av.CodecContext.create("libx264" if codec == "h264" else "libx265", "w")
    cc.width, cc.height, cc.pix_fmt = width, height, "yuv420p"
    cc.time_base = Fraction(1, 1000)
    cc.framerate = Fraction(fps).limit_denominator(1000)
    cc.gop_size = gop
    cc.max_b_frames = 0
    params = f"keyint={gop}:min-keyint={gop}:scenecut=0:repeat-headers=1"
    cc.options = ({"preset": "ultrafast", "tune": "zerolatency", "x264-params": params} if codec == "h264" else
                  {"preset": "ultrafast", "tune": "zerolatency", "x265-params": params + ":bframes=0:log-level=error"})
    return cc


def unpack_access_units(data: Any) -> tuple[list[bytes], bool]:
    """``(access units, discontinuity)`` of a payload whose picture is its last unit's, for decoders
    that return one picture per unit sent (the DVPP VDEC kernel). A packet from a source that
    reorders (``by`` pts or index) is refused: its picture is not its last unit's.

    Raises:
        FrameError: a reordering packet (the caller falls back to a decoder that reorders).
    """
    if not isinstance(data, VideoPacket):
        return [bytes(data)], False
    if data.by != "unit":
        raise FrameError("this decoder returns one picture per access unit and does not reorder: a video "
                         "source's frames need the reordering decoder (dvpipe.video.ReorderingDecoder)")
    units = [u.data for u in data.units if isinstance(u, AccessUnit)]
    return units, any(not isinstance(u, AccessUnit) for u in data.units)
