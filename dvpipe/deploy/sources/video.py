"""Video sources through PyAV: files (MP4, MKV, ...), raw H.264/H.265 elementary streams, RTSP and V4L2.

Cameras that declare ``encoding: h264`` / ``h265`` receive **access units** (Annex B bytes, one
coded picture each; MP4/MKV ``avcC``/``hvcC`` packets are converted with FFmpeg's
``*_mp4toannexb`` bitstream filter) and decode them as a plan step
(:mod:`dvpipe.deploy.video_decode`). Cameras that declare ``raw`` get BGR arrays decoded here, in
the reader thread (any codec FFmpeg knows); ``jpeg`` cameras accept MJPEG streams packet by packet.

Capture times:

* video file: ``start_ns + pts``; ``start_ns`` defaults to the container's ``creation_time``
  (0 when absent). Cameras recorded together keep their relative timing through their pts.
* elementary stream (no timestamps in the format): ``start_ns + k / fps``.
* RTSP / V4L2 (live): the wall clock at arrival of the first frame plus the stream's pts
  progression, re-anchored when it drifts more than 100 ms from the arrival clock (sender clock
  drift, pts jumps after a reconnect).
"""
from __future__ import annotations

import datetime as _dt
import os
from typing import Any, Optional

from ...codecs import VIDEO_ENCODINGS
from ...latency import now_ns, to_monotonic_ns, wall_ns
from ...types import PixelFormat
from ..video_decode import is_keyframe, nal_types
from .base import Backoff, Item, Source, SourceError, StreamLost

__all__ = ["VideoFile", "ElementaryStream", "RtspSource", "V4l2Source", "AvStream"]

_CODEC_ENCODING = {"h264": "h264", "hevc": "h265"}
_PARAM_SETS = {"h264": frozenset((7, 8)), "h265": frozenset((32, 33, 34))}  # SPS/PPS (+ VPS) NAL types
_LIVE_REANCHOR_NS = 100_000_000


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
        self._stream = stream = self._container.streams.video[0]
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
        elif enc == "jpeg" and codec == "mjpeg":
            self._mode = "packets"
        elif enc == "raw":
            self._mode = "decode"
            self._decoder = stream.codec_context
        else:
            self._container.close()
            raise SourceError(f"{self._url()} is {codec} video; camera {self.camera.name} declares {enc} "
                              "(declare raw to decode it in the source)")
        self._bsf = None
        extradata = bytes(stream.codec_context.extradata or b"")
        self._extradata_annexb = b""
        if self._mode == "access_units":
            if extradata[:1] == b"\x01":  # avcC / hvcC: length-prefixed packets
                name = "h264_mp4toannexb" if self._codec == "h264" else "hevc_mp4toannexb"
                self._bsf = av.BitStreamFilterContext(name, stream)
            elif extradata:
                self._extradata_annexb = extradata
        self._demux = self._container.demux(stream)
        self._pending: list = []

    def _close(self) -> None:
        c = getattr(self, "_container", None)
        if c is not None:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing a broken stream may fail; nothing to do
                pass
            self._container = None

    def _next_packet(self):
        av = _av()
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
                raise StreamLost(f"{self._url()}: {_err_text(e)}") from None
            if pkt.size == 0:  # the flush packet at the end
                if self._bsf is not None:
                    self._pending.extend(p for p in self._bsf.filter(None) if p.size)
                    self._bsf = None
                    continue
                return None
            if self._bsf is not None:
                self._pending.extend(p for p in self._bsf.filter(pkt) if p.size)
                continue
            return pkt

    def _capture_ns(self, pkt, arrival_wall_ns: int) -> int:  # pragma: no cover - per type
        raise NotImplementedError

    def _capture_mono(self, capture_ns: int) -> Optional[int]:
        return None

    def _read(self) -> Optional[Item]:
        while True:
            t0 = now_ns()
            pkt = self._next_packet()
            if pkt is None:
                return self._at_end()
            arrival_wall = wall_ns()
            capture = self._capture_ns(pkt, arrival_wall)
            if self._mode == "decode":
                try:
                    frames = self._decoder.decode(pkt)
                except _av().error.FFmpegError:
                    # a corrupt packet: pass the bytes on so that the frame is counted and dropped
                    return self._item(bytes(pkt), capture, capture_mono_ns=self._capture_mono(capture),
                                      read_span_ns=(t0, now_ns()))
                if not frames:
                    continue
                img = frames[-1].to_ndarray(format="bgr24")
                return self._item(img, capture, pixel_format=PixelFormat.BGR,
                                  capture_mono_ns=self._capture_mono(capture), read_span_ns=(t0, now_ns()))
            data = bytes(pkt)
            key = None
            if self._mode == "access_units":
                types = nal_types(data, self._codec)  # one scan for both questions
                key = is_keyframe(data, self._codec, types)
                has_params = not _PARAM_SETS[self._codec].isdisjoint(types)
                if key and self._extradata_annexb and not has_params:
                    data = self._extradata_annexb + data
            return self._item(data, capture, keyframe=key, capture_mono_ns=self._capture_mono(capture),
                              read_span_ns=(t0, now_ns()))

    def _at_end(self) -> Optional[Item]:
        return None


class VideoFile(AvStream):
    """A recorded video file; capture time = ``start_ns`` (default: ``creation_time``) + pts."""

    type = "video"

    def _open(self) -> None:
        super()._open()
        start = self.options.get("start_ns")
        if start is None:
            start = _creation_time_ns(self._container) or 0
        self._start_ns = int(start)

    def _capture_ns(self, pkt, arrival_wall_ns: int) -> int:
        if pkt.pts is None:
            rate = float(self._stream.average_rate or 30)
            return self._start_ns + int(round(self.seq * 1e9 / rate))
        return self._start_ns + int(round(float(pkt.pts * pkt.time_base) * 1e9))


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


class ElementaryStream(AvStream):
    """A raw H.264/H.265 Annex B file (no timestamps): capture time = ``start_ns + k / fps``."""

    type = "elementary"

    @property
    def format(self) -> str:  # type: ignore[override]
        return "h264" if self.options.get("codec") == "h264" else "hevc"

    def _capture_ns(self, pkt, arrival_wall_ns: int) -> int:
        return int(self.options.get("start_ns") or 0) + int(round(self.seq * 1e9 / self.options.get("fps", 30.0)))


class _LiveStream(AvStream):
    """Live capture: arrival-anchored capture times, reconnects, end of stream = stream lost."""

    live = True

    def __init__(self, camera, cfg):
        super().__init__(camera, cfg)
        r = self.options.get("reconnect") or {}
        self.backoff = Backoff(r.get("initial_ms", 250.0), r.get("max_ms", 5000.0), r.get("factor", 2.0),
                               int(r.get("attempts", 0)))

    def _open(self) -> None:
        super()._open()
        self._anchor = None  # (pts_ns, wall_ns)

    def _capture_ns(self, pkt, arrival_wall_ns: int) -> int:
        if pkt.pts is None:
            return arrival_wall_ns
        pts_ns = int(round(float(pkt.pts * pkt.time_base) * 1e9))
        if self._anchor is not None:
            capture = self._anchor[1] + (pts_ns - self._anchor[0])
            if abs(capture - arrival_wall_ns) <= _LIVE_REANCHOR_NS and capture <= arrival_wall_ns:
                return capture
        self._anchor = (pts_ns, arrival_wall_ns)
        return arrival_wall_ns

    def _capture_mono(self, capture_ns: int) -> Optional[int]:
        return to_monotonic_ns(capture_ns)

    def _at_end(self) -> Optional[Item]:
        raise StreamLost(f"{self._url()}: the stream ended (end of file from the sender)")


class RtspSource(_LiveStream):
    """An RTSP camera or server (PyAV/FFmpeg client), with read timeouts and reconnects."""

    type = "rtsp"

    def _container_options(self) -> dict:
        # no stream analysis: the decode step needs nothing from it, and analysing costs up to a
        # second of frames at open (and every reconnect); the packets read at open are kept
        return {"rtsp_transport": self.options.get("transport", "tcp"), "analyzeduration": "0", "probesize": "1024"}

    def _timeout(self):
        return (self.options.get("open_timeout_s", 5.0), self.options.get("read_timeout_s", 2.0))


class V4l2Source(_LiveStream):
    """A V4L2 capture device through PyAV's ``v4l2`` input (libavdevice)."""

    type = "v4l2"
    format = "v4l2"

    def __init__(self, camera, cfg):
        super().__init__(camera, cfg)
        self.backoff = Backoff(500.0, 5000.0, 2.0, 0)

    def _container_options(self) -> dict:
        o = {}
        if self.options.get("input_format"):
            o["input_format"] = str(self.options["input_format"])
        if self.options.get("fps"):
            o["framerate"] = f"{self.options['fps']:g}"
        if self.options.get("size"):
            w, h = self.options["size"]
            o["video_size"] = f"{w}x{h}"
        return o

    def _open(self) -> None:
        av = _av()
        if not any("v4l2" in f.split(",") for f in av.formats_available):
            raise SourceError("this PyAV/FFmpeg build has no v4l2 input device")
        if not os.path.exists(self.cfg.uri):
            raise SourceError(f"no such V4L2 device: {self.cfg.uri}")
        super()._open()

    def _timeout(self):
        return (5.0, 2.0)
