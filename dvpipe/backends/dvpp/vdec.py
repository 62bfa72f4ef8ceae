"""VDEC: H.264/H.265 access units -> NV12 in DVPP memory, through a channel with a callback thread.

pyACL call sequence (CANN "VDEC" API call sequence; Ascend samples ``acllite/dvpp_vdec.py``):

1. a callback thread: ``acl.util.start_thread(loop)``, the loop calling ``acl.rt.process_report(ms)``;
2. ``acl.media.vdec_create_channel_desc`` + ``vdec_set_channel_desc_channel_id / _thread_id / _callback /
   _entype / _out_pic_format``, ``acl.media.vdec_create_channel``, ``acl.media.vdec_create_frame_config``;
3. per access unit (Annex-B, sent frame by frame, constraints.md §3.1): the bytes into a pooled DVPP
   buffer, an input stream descriptor, an output picture descriptor (buffer size from the documented
   VDEC stride), ``acl.media.vdec_send_frame(channel, stream_desc, pic_desc, frame_config, user_data)``;
4. the callback ``(stream_desc, pic_desc, user_data)`` runs on the callback thread for every send, in
   display order; ``acl.media.dvpp_get_pic_desc_ret_code`` says whether a picture came out;
5. end of stream: a send whose stream descriptor has ``eos = 1`` flushes the pictures still held
   (reordering), then the channel is destroyed and the thread stopped.

:class:`VdecChannel` wraps one channel; :func:`decode_stream` decodes an elementary stream or an
MP4/MKV file (demuxed with PyAV, converted to Annex-B) and yields frames in display order with their
timestamps; :func:`run` is the pipeline kernel for ``h264``/``h265`` cameras (one access unit per frame).
"""
from __future__ import annotations

import heapq
import itertools
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import numpy as np

from ...codecs import VIDEO_ENCODINGS
from ...errors import FrameError
from ...latency.clock import now_ns
from . import _acl, vpc
from ._enums import ENTYPE, PIXEL_FORMAT
from .pool import BufferPool, pool_for
from .support import StepRefused
from .vpc import Picture, StepState

__all__ = ["VdecChannel", "VideoFrame", "decode_stream", "access_units", "run"]

_CHANNEL_IDS = itertools.count()


def _entype(codec: str, profile: Optional[str] = None) -> int:
    if codec == "h265":
        return ENTYPE["h265_main"]
    p = (profile or "").lower()
    if "baseline" in p:
        return ENTYPE["h264_baseline"]
    if p == "main":
        return ENTYPE["h264_main"]
    return ENTYPE["h264_high"]


@dataclass
class _Sent:
    seq: int
    inbuf: Any
    outbuf: Any
    stream_desc: int
    pic_desc: int


@dataclass
class Decoded:
    """One callback: the send's ``seq`` (user data), its picture (None when decoding failed) and ret code."""

    seq: int
    picture: Optional[Picture]
    ret_code: int


class VdecChannel:
    """One VDEC channel with its callback thread (see the module docstring).

    Args:
        runtime: an opened :class:`~dvpipe.backends.dvpp._acl.Runtime`.
        pool: the buffer pool of that runtime.
        target: the deployment target (strides come from the knowledge base).
        codec: ``h264`` or ``h265``.
        width, height: the stream's picture size (for the output buffers).
        channel_id: VDEC channel id (default: the next free one in this process).
    """

    def __init__(self, runtime: Any, pool: BufferPool, target: Any, codec: str, width: int, height: int,
                 channel_id: Optional[int] = None, profile: Optional[str] = None):
        if codec not in VIDEO_ENCODINGS:
            raise ValueError(f"VDEC decodes h264 or h265, not {codec!r}")
        self.rt, self.pool, self.target = runtime, pool, target
        self.codec, self.width, self.height = codec, int(width), int(height)
        self.channel_id = next(_CHANNEL_IDS) % 32 if channel_id is None else int(channel_id)
        st = vpc.layout(target, "vdec", "nv12", self.width // 2 * 2, self.height // 2 * 2, "out")
        self.out_bytes = int(st.buffer_bytes)
        self._results: "queue.Queue[Decoded]" = queue.Queue()
        self._sent: dict[int, _Sent] = {}
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._running = True
        self._closed = False
        self.callbacks = 0
        self.thread_id = runtime.start_thread(self._report_loop, [])
        try:
            self.desc = runtime.vdec_channel(self.channel_id, self.thread_id, self._callback,
                                             _entype(codec, profile), PIXEL_FORMAT["nv12"])
            self.frame_config = runtime.frame_config()
        except Exception:
            self._running = False
            runtime.stop_thread(self.thread_id)
            raise

    # -- callback thread ------------------------------------------------------------------------------
    def _report_loop(self, _args: Any) -> None:
        self.rt.bind()
        while self._running:
            try:
                self.rt.process_report(50)
            except _acl.AclError:
                if not self._running:
                    break

    def _callback(self, stream_desc: int, pic_desc: int, user_data: Any) -> None:
        """Runs on the callback thread: hand the picture to the sender, free the input side."""
        self.callbacks += 1
        seq = int(user_data)
        with self._lock:
            sent = self._sent.pop(seq, None)
        if sent is None:
            return
        rt = self.rt
        try:
            w, h, ws, hs, ret = rt.pic_info(pic_desc)
            rt.destroy_stream_desc(stream_desc)
        except _acl.AclError:
            w = h = ws = hs = 0
            ret = 1
        self.pool.release(sent.inbuf)
        if ret:
            rt.destroy_pic_desc(pic_desc)
            self.pool.release(sent.outbuf)
            self._results.put(Decoded(seq, None, ret))
            return
        self._results.put(Decoded(seq, Picture(sent.outbuf, "nv12", w, h, ws, hs, pic_desc), 0))

    # -- sending --------------------------------------------------------------------------------------
    def send(self, access_unit: bytes) -> int:
        """Send one Annex-B access unit; returns its sequence number (the callback's user data)."""
        raw = access_unit if isinstance(access_unit, bytes) else bytes(access_unit)
        rt, pool = self.rt, self.pool
        seq = next(self._seq)
        inbuf = pool.acquire_stream(len(raw), self.codec)
        outbuf = pool.acquire(self.out_bytes, "nv12")
        sdesc = pdesc = None
        try:
            rt.upload(inbuf.ptr, inbuf.size, raw)
            sdesc = rt.stream_desc(inbuf.ptr, len(raw))
            pdesc = rt.output_pic_desc(outbuf.ptr, self.out_bytes, PIXEL_FORMAT["nv12"])
            with self._lock:
                self._sent[seq] = _Sent(seq, inbuf, outbuf, sdesc, pdesc)
            rt.vdec_send(self.desc, sdesc, pdesc, self.frame_config, seq, au_bytes=len(raw), codec=self.codec,
                         channel_id=self.channel_id)
        except Exception:
            with self._lock:
                self._sent.pop(seq, None)
            for d, fn in ((sdesc, rt.destroy_stream_desc), (pdesc, rt.destroy_pic_desc)):
                if d is not None:
                    fn(d)
            pool.release(inbuf)
            pool.release(outbuf)
            raise
        return seq

    def end_of_stream(self) -> None:
        """Send the end-of-stream marker: the decoder returns every picture it still holds."""
        sdesc = self.rt.stream_desc(0, 0, eos=True)
        try:
            self.rt.vdec_send(self.desc, sdesc, 0, self.frame_config, -1, eos=1)
        finally:
            self.rt.destroy_stream_desc(sdesc)

    @property
    def pending(self) -> int:
        """Sends whose callback has not come yet."""
        with self._lock:
            return len(self._sent)

    def receive(self, timeout_s: float = 5.0) -> Decoded:
        """The next callback result (display order); ``CallbackTimeout`` when none comes in time."""
        try:
            return self._results.get(timeout=timeout_s)
        except queue.Empty:
            raise _acl.CallbackTimeout(100036, "acl.rt.process_report",
                                       {"pending": self.pending, "channel_id": self.channel_id},
                                       "no VDEC callback within the timeout") from None

    def release(self, pic: Optional[Picture]) -> None:
        vpc.release(self.rt, self.pool, pic)

    def close(self) -> None:
        """Flush, destroy the channel and stop the callback thread (pictures not received are freed)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.pending:
                self.end_of_stream()
                deadline = 50
                while self.pending and deadline:
                    deadline -= 1
                    threading.Event().wait(0.02)
        finally:
            try:
                self.rt.vdec_destroy(self.desc)
                self.rt.destroy_frame_config(self.frame_config)
            finally:
                self._running = False
                self.rt.stop_thread(self.thread_id)
                while not self._results.empty():
                    self.release(self._results.get_nowait().picture)


# ------------------------------------------------------------------------------------------------ streams

@dataclass
class VideoFrame:
    """A decoded picture: display ``index``, ``pts`` (stream time base units, or None), ``image`` (BGR or NV12)."""

    index: int
    pts: Optional[int]
    image: np.ndarray


def access_units(source: Any, codec: Optional[str] = None) -> tuple[str, Optional[str], int, int, Iterator]:
    """``(codec, profile, width, height, iterator of (annexb_bytes, pts))`` for an elementary stream
    (``.h264``/``.264``/``.h265``/``.265``/``.hevc`` path or bytes) or an MP4/MKV file demuxed with PyAV."""
    import av

    ext = os.path.splitext(str(source))[1].lower() if isinstance(source, (str, os.PathLike)) else ""
    if isinstance(source, (bytes, bytearray)) or ext in (".h264", ".264", ".h265", ".265", ".hevc"):
        data = bytes(source) if isinstance(source, (bytes, bytearray)) else open(source, "rb").read()
        codec = codec or ("h265" if ext in (".h265", ".265", ".hevc") else "h264")
        parser = av.CodecContext.create("hevc" if codec == "h265" else "h264", "r")
        probe = av.CodecContext.create("hevc" if codec == "h265" else "h264", "r")
        pkts = [bytes(p) for p in parser.parse(data)] + [bytes(p) for p in parser.parse(None)]
        width = height = 0
        for p in pkts:
            for fr in probe.decode(av.Packet(p)):
                width, height = fr.width, fr.height
                break
            if width:
                break
        return codec, None, width, height, iter([(p, None) for p in pkts])
    container = av.open(str(source))
    stream = container.streams.video[0]
    name = stream.codec_context.name
    codec = {"h264": "h264", "hevc": "h265"}.get(name)
    if codec is None:
        container.close()
        raise ValueError(f"{source}: {name} video; VDEC decodes H.264 and H.265")
    extradata = bytes(stream.codec_context.extradata or b"")
    bsf = None
    if extradata[:1] == b"\x01":
        bsf = av.BitStreamFilterContext("h264_mp4toannexb" if codec == "h264" else "hevc_mp4toannexb", stream)

    def gen():
        try:
            for pkt in container.demux(stream):
                outs = [pkt] if bsf is None else list(bsf.filter(pkt if pkt.size else None))
                for o in outs:
                    if o.size:
                        yield bytes(o), o.pts
        finally:
            container.close()

    return codec, stream.codec_context.profile, stream.codec_context.width, stream.codec_context.height, gen()


def decode_stream(source: Any, target: Any, device: str = "sim", output: str = "bgr",
                  codec: Optional[str] = None, timeout_s: float = 5.0) -> Iterator[VideoFrame]:
    """Decode a whole stream on VDEC; yields frames in display order (timestamps assigned in pts order).

    Args:
        source: path to an Annex-B elementary stream or an MP4/MKV file, or elementary-stream bytes.
        target: the :class:`dvpipe.Target` (with ``device="sim"``, the target the software device simulates).
        device: ``hw`` (pyACL) or ``sim``.
        output: ``bgr`` (host BGR, BT.601 limited range) or ``nv12`` (host ``H*3/2 x W`` NV12 copy).
    """
    from .support import kcheck

    codec, profile, width, height, aus = access_units(source, codec)
    kv = kcheck(target, "vdec", "decode", max(width, 1), max(height, 1), codec, out_fmt="nv12")
    if not kv.ok:
        f = (kv.violations or kv.unknowns or kv.reasons)[0]
        raise StepRefused(f"{f.message} [rule {f.rule_id}; {f.source}]")
    rt = _acl.runtime(device, target)
    ch = VdecChannel(rt, pool_for(rt), target, codec, width, height, profile=profile)
    pts_heap: list = []
    index = 0

    def emit(d: Decoded) -> Optional[VideoFrame]:
        nonlocal index
        pts = heapq.heappop(pts_heap) if pts_heap else None
        if d.picture is None:
            return None
        try:
            img = _host_image(rt, d.picture, output)
        finally:
            ch.release(d.picture)
        frame = VideoFrame(index, None if pts is None or pts < 0 else pts, img)
        index += 1
        return frame

    try:
        k = 0
        for au, pts in aus:
            heapq.heappush(pts_heap, pts if pts is not None else k)
            ch.send(au)
            k += 1
            while True:
                try:
                    d = ch._results.get_nowait()
                except queue.Empty:
                    break
                f = emit(d)
                if f is not None:
                    yield f
        ch.end_of_stream()
        while ch.pending or not ch._results.empty():
            f = emit(ch.receive(timeout_s))
            if f is not None:
                yield f
    finally:
        ch.close()


def _host_image(rt: Any, pic: Picture, output: str) -> np.ndarray:
    if output == "bgr":
        return vpc.to_host(rt, pic, "limited")
    raw = rt.download(pic.buf.ptr, pic.nbytes)
    y, uv = vpc.nv12_planes(raw, pic.width, pic.height, pic.ws, pic.hs)
    out = np.empty((pic.height * 3 // 2, pic.width), np.uint8)
    out[:pic.height] = y
    out[pic.height:] = uv.reshape(pic.height // 2, pic.width)
    return out


# ------------------------------------------------------------------------------------------------ kernel

def _units(data: Any) -> tuple[list[bytes], bool]:
    from ...video import unpack_access_units

    return unpack_access_units(data)


def run(s: StepState, data: Any, ctx: Any) -> np.ndarray:
    """One access unit (or a bundle of them, the last one shown) through VDEC and the step's VPC calls."""
    if isinstance(data, np.ndarray):
        raise FrameError(f"an {s.program.source} camera delivers encoded access units, got a decoded array")
    aus, discontinuity = _units(data)
    ch: Optional[VdecChannel] = s.extra.get("vdec")
    if ch is None or discontinuity:
        if ch is not None:
            ch.close()
        w, h = s.program.in_size
        ch = s.extra["vdec"] = VdecChannel(s.runtime, s.pool, s.target, s.extra.get("codec", "h264"), w, h)
    t0 = now_ns()
    last = None
    for au in aus:
        last = ch.send(au)
    picture = None
    while True:
        d = ch.receive()
        if d.seq == last or d.seq > last:
            picture = d.picture
            break
        ch.release(d.picture)  # a reference picture of an earlier access unit in the bundle
    ctx.device_spans.append(s.span("vdec", t0, access_units=len(aus)))
    if picture is None:
        raise StepRefused("VDEC returned no picture for this access unit (ret code set by the decoder)")
    if (picture.width, picture.height) != s.program.decode_size:
        ch.release(picture)
        raise StepRefused(f"VDEC wrote {picture.width}x{picture.height}; the step expects "
                          f"{s.program.decode_size[0]}x{s.program.decode_size[1]}")
    pics: list = [picture]
    rois: list = []
    try:
        t1 = now_ns()
        s.run_vpc(picture, pics, rois)
        if len(pics) > 1:
            s.runtime.synchronize(s.stream, step="vpc", camera=s.camera)
            ctx.device_spans.append(s.span("vpc", t1))
        out = s.finish(pics[-1])
        s.frames += 1
        return out
    finally:
        s.cleanup(pics, rois)
