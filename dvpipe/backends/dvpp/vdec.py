"""VDEC: H.264/H.265 access units -> NV12 in DVPP memory, through a channel with a callback thread.

pyACL call sequence (CANN "VDEC" API call sequence; Ascend samples ``acllite/dvpp_vdec.py``,
``vdec_resnet50_classification/src/acl_vdec.py``):

1. a callback thread: ``acl.util.start_thread(loop)``, the loop calling ``acl.rt.process_report(ms)``
   (a timeout is ``ACL_ERROR_RT_REPORT_TIMEOUT`` 507012, or the deprecated 100036; before a channel names
   the thread the call returns ``ACL_ERROR_THREAD_NOT_SUBSCRIBE`` at once, so the loop waits before it asks
   again instead of spinning);
2. ``acl.media.vdec_create_channel_desc`` + ``vdec_set_channel_desc_channel_id / _thread_id / _callback /
   _entype / _out_pic_format / _out_mode``, ``acl.media.vdec_create_channel``;
3. per access unit (Annex-B, sent frame by frame): the bytes into a pooled DVPP buffer, an input stream
   descriptor carrying the unit's tag as its timestamp (``dvpp_set_stream_desc_timestamp``,
   aclpythondevg_01_0267), an output picture descriptor (buffer size from the documented VDEC stride),
   ``acl.media.vdec_send_frame(channel, stream_desc, pic_desc, 0, tag)``: the frame configuration is
   reserved and may be NULL (CANN 8.0.0 aclcppdevg_03_0375); the tag is the user data, which the docs
   name as the way for the callback to know which frame it processes;
4. the callback ``(stream_desc, pic_desc, user_data)`` runs on the callback thread, pictures in display
   order; ``acl.media.dvpp_get_pic_desc_ret_code`` says whether a picture came out;
5. end of stream: a send whose stream descriptor has ``eos = 1`` returns once every picture still held
   has come out and its callback has run (aclcppdevg_03_0348); then the channel is destroyed, the
   channel description and the callback thread after it ("stop the callback thread after all callbacks
   ran", aclcppdevg_03_0377).

**Output mode** (``vdec_set_channel_desc_out_mode``, aclpythondevg_01_0353): 0 (default) buffers several
frames before the first output; 1 (fast) outputs a picture per frame sent, for streams without B-frames
or long-term references only. A camera whose frames are single access units matched unit by unit (the
plain bytes of the Python API, which may not reorder) runs in mode 1 and waits for each unit's picture; a
video source's frames (:class:`dvpipe.video.VideoPacket` with ``by`` = ``pts``/``index``: presentation
order, the access units read ahead) run in mode 0 and are matched to pictures by
:class:`dvpipe.video.ReorderingDecoder`, the same class that reorders for the CPU decoder.
:class:`VdecEngine` is the :class:`dvpipe.video.Engine` that drives the channel.

In-flight bound: in mode 0 a send waits while more than :data:`MAX_IN_FLIGHT` sends (16, the most
pictures an H.264/H.265 decoded picture buffer holds) have no callback yet. On a device a picture's
callback may still be on its way when the next unit is sent; the software device returns from a send
only once the callbacks it released ran (deterministic CI). Neither was measured on hardware.

:func:`decode_stream` decodes an elementary stream or an MP4/MKV file (demuxed with PyAV, converted to
Annex-B) and yields frames in display order with their timestamps; :func:`run` is the pipeline kernel.
"""
from __future__ import annotations

import heapq
import itertools
import os
import queue
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional

import numpy as np

from ...bitstream import stream_format
from ...codecs import VIDEO_ENCODINGS
from ...errors import ConfigError, CorruptFrameError, FrameError
from ...latency.clock import DeviceSpan, now_ns
from . import _acl, _codes, vpc
from ._enums import ENTYPE, PIXEL_FORMAT
from .pool import BufferPool, pool_for
from .support import StepRefused
from .vpc import Picture, StepState

__all__ = ["VdecEngine", "VdecPicture", "VideoFrame", "decode_stream", "access_units", "run", "MAX_IN_FLIGHT",
           "OUT_MODE_DEFAULT", "OUT_MODE_FAST"]

OUT_MODE_DEFAULT = 0
OUT_MODE_FAST = 1
#: mode 0: sends without a callback before a send waits (the largest H.264/H.265 decoded picture buffer)
MAX_IN_FLIGHT = 16

_IDS_LOCK = threading.Lock()
_IDS_IN_USE: dict[int, set] = {}  # id(runtime) -> VDEC channel ids in use


def _take_channel_id(rt: Any) -> int:
    """The lowest VDEC channel id no open channel of ``rt`` uses (ids come back at close; the device
    checks the documented maximum when the channel is created)."""
    with _IDS_LOCK:
        used = _IDS_IN_USE.setdefault(id(rt), set())
        cid = next(i for i in range(len(used) + 1) if i not in used)
        used.add(cid)
        return cid


def _give_channel_id(rt: Any, cid: int) -> None:
    with _IDS_LOCK:
        _IDS_IN_USE.get(id(rt), set()).discard(cid)


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
    tag: int
    inbuf: Any
    outbuf: Any
    stream_desc: int
    pic_desc: int


def _release_picture(rt: Any, pool: BufferPool, pic: Picture) -> None:
    try:
        vpc.release(rt, pool, pic)
    except Exception:  # noqa: BLE001 - a picture outliving its runtime: nothing left to free
        pass


class VdecPicture:
    """A VDEC output picture in DVPP memory: ``width``, ``height`` (pixels), the NV12 :class:`Picture`
    (``ws x hs`` luma plane then ``ws x hs/2`` interleaved UV).

    :meth:`take` hands the picture over (the caller releases it); :meth:`release` gives it back; a picture
    dropped without either (e.g. one :class:`~dvpipe.video.ReorderingDecoder` skips) is given back when it
    is garbage-collected."""

    def __init__(self, rt: Any, pool: BufferPool, picture: Picture):
        self.picture = picture
        self.width, self.height = picture.width, picture.height
        self._fin = weakref.finalize(self, _release_picture, rt, pool, picture)

    def take(self) -> Picture:
        self._fin.detach()
        return self.picture

    def release(self) -> None:
        self._fin()

    def nv12(self, rt: Any) -> np.ndarray:
        """The picture as a host ``(H*3/2) x W`` uint8 NV12 array (cropped from its strides)."""
        pic = self.picture
        raw = rt.download(pic.buf.ptr, pic.nbytes)
        y, uv = vpc.nv12_planes(raw, pic.width, pic.height, pic.ws, pic.hs)
        out = np.empty((pic.height * 3 // 2, pic.width), np.uint8)
        out[:pic.height] = y
        out[pic.height:] = uv.reshape(pic.height // 2, pic.width)
        return out


def _engine_base():
    from ...video import Engine

    return Engine


if TYPE_CHECKING:
    from ...video import Engine as _EngineBase
else:
    _EngineBase = _engine_base()


class VdecEngine(_EngineBase):
    """One VDEC channel with its callback thread, driven as a :class:`dvpipe.video.Engine`.

    ``send(access_unit, tag)`` returns ``[(tag, VdecPicture or None, damage or None)]`` for the pictures
    whose callbacks arrived, in display order (None and a reason when VDEC could not decode one);
    ``drain()`` sends the end of stream and returns the rest.

    Args:
        runtime: an opened :class:`~dvpipe.backends.dvpp._acl.Runtime`.
        pool: the buffer pool of that runtime.
        target: the deployment target (strides come from the knowledge base).
        codec: ``h264`` or ``h265``.
        width, height: the stream's picture size (for the output buffers).
        out_mode: :data:`OUT_MODE_DEFAULT` (0) or :data:`OUT_MODE_FAST` (1, streams without B-frames).
        profile: the H.264 profile name (``High``...), for the stream format.
        timeout_s: how long to wait for a callback before ``CallbackTimeout``.
        channel_id: the VDEC channel id (default: the lowest one no open channel of the runtime uses).
    """

    def __init__(self, runtime: Any, pool: BufferPool, target: Any, codec: str, width: int, height: int,
                 out_mode: int = OUT_MODE_DEFAULT, profile: Optional[str] = None, timeout_s: float = 5.0,
                 channel_id: Optional[int] = None, accept_unknown: bool = False):
        if codec not in VIDEO_ENCODINGS:
            raise ConfigError(f"VDEC decodes h264 or h265, not {codec!r}")
        self.rt, self.pool, self.target = runtime, pool, target
        self.codec, self.width, self.height = codec, int(width), int(height)
        self.out_mode = int(out_mode)
        self.timeout_s = timeout_s
        self.max_in_flight = 0 if self.out_mode == OUT_MODE_FAST else MAX_IN_FLIGHT
        st = vpc.layout(target, "vdec", "nv12", self.width // 2 * 2, self.height // 2 * 2, "out", accept_unknown)
        self.out_bytes = int(st.buffer_bytes)
        self._results: "queue.Queue[tuple]" = queue.Queue()
        self._sent: dict[int, _Sent] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self.callbacks = 0
        self.timestamp_mismatches = 0
        self.desc = self.thread_id = 0
        self._own_id = channel_id is None
        self.channel_id = _take_channel_id(runtime) if channel_id is None else int(channel_id)
        try:
            self.thread_id = runtime.start_thread(self._report_loop, [])
            # the channel's maximum output size is the stream's: unset it is 1920x1120 on Ascend310/910
            # (CANN 6.0.1 aclpythondevg_01_0322/0323; 8.0.0 aclpythondevg_01_0359/0360), too small for 4K
            self.desc = runtime.vdec_channel(self.channel_id, self.thread_id, self._callback,
                                             _entype(codec, profile), PIXEL_FORMAT["nv12"], self.out_mode,
                                             out_size=(self.width, self.height))
        except Exception:
            self._closed = True
            self._stop.set()
            if self.thread_id:
                try:
                    runtime.stop_thread(self.thread_id)
                except _acl.AclError:
                    pass
            if self._own_id:
                _give_channel_id(runtime, self.channel_id)
            raise

    # -- callback thread ------------------------------------------------------------------------------
    def _report_loop(self, _args: Any) -> None:
        """``acl.rt.process_report`` until stopped; waits 10 ms before asking again when the thread is not
        subscribed yet (that code returns at once) or the call failed, so it never spins."""
        self.rt.bind()
        while not self._stop.is_set():
            try:
                self.rt.process_report(50)
            except _acl.AclError:
                self._stop.wait(0.01)

    def _callback(self, stream_desc: int, pic_desc: int, user_data: Any) -> None:
        """Runs on the callback thread: the picture of the send tagged ``user_data``."""
        self.callbacks += 1
        tag = int(user_data)
        rt = self.rt
        with self._lock:
            sent = self._sent.pop(tag, None)
        if sent is None:
            return
        try:
            if rt.stream_timestamp(stream_desc) != tag:
                self.timestamp_mismatches += 1
            w, h, ws, hs, ret = rt.pic_info(pic_desc)
        except _acl.AclError:
            w = h = ws = hs = 0
            ret = 1
        try:
            rt.destroy_stream_desc(stream_desc)
        except _acl.AclError:
            pass
        self.pool.release(sent.inbuf)
        if ret:
            _release_picture(rt, self.pool, Picture(sent.outbuf, "nv12", 0, 0, 0, 0, pic_desc))
            self._results.put((tag, None, f"VDEC could not decode this picture (picture ret code "
                                          f"{_codes.picture_ret_code(ret)})"))
            return
        pic = Picture(sent.outbuf, "nv12", w, h, ws, hs, pic_desc)
        self._results.put((tag, VdecPicture(rt, self.pool, pic), None))

    # -- Engine -----------------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Sends whose callback has not come yet."""
        with self._lock:
            return len(self._sent)

    def _ready(self) -> list:
        out = []
        while True:
            try:
                out.append(self._results.get_nowait())
            except queue.Empty:
                return out

    def _wait_one(self) -> tuple:
        try:
            return self._results.get(timeout=self.timeout_s)
        except queue.Empty:
            raise _acl.CallbackTimeout(_acl._codes.ACL_ERROR_RT_REPORT_TIMEOUT, "acl.rt.process_report",
                                       {"in_flight": self.in_flight, "channel_id": self.channel_id,
                                        "out_mode": self.out_mode},
                                       f"no VDEC callback within {self.timeout_s} s") from None

    def send(self, data: bytes, tag: int) -> list:
        """Send one Annex-B access unit tagged ``tag`` (user data and stream timestamp); returns the pictures
        whose callbacks came, in display order."""
        raw = data if isinstance(data, bytes) else bytes(data)
        rt, pool = self.rt, self.pool
        tag = int(tag)
        inbuf = pool.acquire_stream(len(raw), self.codec)
        outbuf = pool.acquire(self.out_bytes, "nv12")
        sdesc = pdesc = None
        try:
            rt.upload(inbuf.ptr, inbuf.size, raw)
            sdesc = rt.stream_desc(inbuf.ptr, len(raw), timestamp=tag)
            pdesc = rt.output_pic_desc(outbuf.ptr, self.out_bytes, PIXEL_FORMAT["nv12"])
            with self._lock:
                self._sent[tag] = _Sent(tag, inbuf, outbuf, sdesc, pdesc)
            rt.vdec_send(self.desc, sdesc, pdesc, 0, tag, au_bytes=len(raw), codec=self.codec,
                         channel_id=self.channel_id)
        except Exception:
            with self._lock:
                self._sent.pop(tag, None)
            for d, fn in ((sdesc, rt.destroy_stream_desc), (pdesc, rt.destroy_pic_desc)):
                if d is not None:
                    fn(d)
            pool.release(inbuf)
            pool.release(outbuf)
            raise  # an API failure, not damaged data: the step falls back for this frame
        out = self._ready()
        while self.in_flight > self.max_in_flight:
            out.append(self._wait_one())
        return out + self._ready()

    def end_of_stream(self) -> None:
        """Send the end-of-stream marker (no data, no output descriptor, no frame configuration)."""
        sdesc = self.rt.stream_desc(0, 0, eos=True)
        try:
            self.rt.vdec_send(self.desc, sdesc, 0, 0, -1, eos=1)
        finally:
            self.rt.destroy_stream_desc(sdesc)

    def drain(self) -> list:
        """End of stream: every picture still held, in display order (the engine can be used again)."""
        self.end_of_stream()
        out = self._ready()
        while self.in_flight:
            out.append(self._wait_one())
        return out + self._ready()

    def close(self) -> None:
        """Flush, destroy the channel and its description, stop the callback thread (in that order: the
        thread goes after every callback ran), give back every picture not taken. Idempotent."""
        if self._closed:
            return
        self._closed = True
        rt = self.rt
        try:
            if self.in_flight:
                try:
                    self.drain()
                except Exception:  # noqa: BLE001 - teardown goes on
                    pass
        finally:
            for fn, args in ((rt.vdec_destroy, (self.desc,)),):
                try:
                    fn(*args)
                except Exception:  # noqa: BLE001
                    pass
            self._stop.set()
            try:
                rt.stop_thread(self.thread_id)
            except Exception:  # noqa: BLE001
                pass
            for _tag, pic, _damage in self._ready():
                if pic is not None:
                    pic.release()
            with self._lock:
                left, self._sent = list(self._sent.values()), {}
            for s in left:  # sends whose callback never came (a device fault): free what we own
                for d, fn in ((s.stream_desc, rt.destroy_stream_desc), (s.pic_desc, rt.destroy_pic_desc)):
                    try:
                        fn(d)
                    except Exception:  # noqa: BLE001
                        pass
                self.pool.release(s.inbuf)
                self.pool.release(s.outbuf)
            if self._own_id:
                _give_channel_id(rt, self.channel_id)


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
        for p in [*pkts, None]:  # None drains: a stream of one or two pictures is output only then
            for fr in probe.decode(None if p is None else av.Packet(p)):
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
        raise ConfigError(f"{source}: {name} video; VDEC decodes H.264 and H.265")
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
    """Decode a whole stream on VDEC (output mode 0); yields frames in display order (timestamps assigned
    in pts order).

    Args:
        source: path to an Annex-B elementary stream or an MP4/MKV file, or elementary-stream bytes.
        target: the :class:`dvpipe.Target` (with ``device="sim"``, the target the software device simulates).
        device: ``hw`` (pyACL) or ``sim``.
        output: ``bgr`` (host ``H x W x 3`` uint8 BGR, BT.601 limited range) or ``nv12`` (host ``H*3/2 x W``).
    """
    from .support import kcheck

    codec, profile, width, height, aus = access_units(source, codec)
    first = next(aus, None)  # its sequence parameter set: profile, level, bit depth, chroma (§3.1)
    fmt = stream_format(first[0], codec) if first is not None else None
    aus = itertools.chain([first] if first is not None else [], aus)
    kv = kcheck(target, "vdec", "decode", max(width, 1), max(height, 1), codec, out_fmt="nv12",
                **(fmt.check_extras() if fmt is not None else {}))
    if not kv.ok:
        f = (kv.violations or kv.unknowns or kv.reasons)[0]
        raise StepRefused(f"{f.message} [rule {f.rule_id}; {f.source}]")
    rt = _acl.runtime(device, target).hold()
    eng = None
    try:
        eng = VdecEngine(rt, pool_for(rt), target, codec, width, height, OUT_MODE_DEFAULT, profile, timeout_s)
        pts_heap: list = []
        index = 0

        def emit(item: tuple) -> Optional[VideoFrame]:
            nonlocal index
            _tag, pic, _damage = item
            pts = heapq.heappop(pts_heap) if pts_heap else None
            if pic is None:
                return None
            try:
                img = _host_image(rt, pic, output)
            finally:
                pic.release()
            frame = VideoFrame(index, None if pts is None or pts < 0 else pts, img)
            index += 1
            return frame

        k = 0
        for au, pts in aus:
            heapq.heappush(pts_heap, pts if pts is not None else k)
            for item in eng.send(au, k):
                f = emit(item)
                if f is not None:
                    yield f
            k += 1
        for item in eng.drain():
            f = emit(item)
            if f is not None:
                yield f
    finally:
        if eng is not None:
            eng.close()
        rt.unhold()


def _host_image(rt: Any, pic: VdecPicture, output: str) -> np.ndarray:
    if output == "bgr":
        return vpc.to_host(rt, pic.picture, "limited")
    return pic.nv12(rt)


# ------------------------------------------------------------------------------------------------ kernel

def _decoder(s: StepState, out_mode: int):
    """The step's :class:`dvpipe.video.ReorderingDecoder` over VDEC engines in ``out_mode`` (a new engine
    for each stream the decoder starts; the previous one is closed)."""
    from ...video import ReorderingDecoder

    codec = s.extra.get("codec", "h264")

    def make(_codec: str) -> VdecEngine:
        old = s.extra.pop("vdec", None)
        if old is not None:
            old.close()
        h, w = s.program.in_size
        eng = s.extra["vdec"] = VdecEngine(s.runtime, s.pool, s.target, codec, w, h, out_mode,
                                           accept_unknown=s.accept_unknown)
        return eng

    dec = s.extra.get("decoder")
    if dec is None or s.extra.get("out_mode") != out_mode:
        old = s.extra.pop("vdec", None)
        if old is not None:
            old.close()
        dec = s.extra["decoder"] = ReorderingDecoder(codec, engine=make, first_picture_early=False)
        s.extra["out_mode"] = out_mode
    return dec


def run(s: StepState, data: Any, ctx: Any) -> np.ndarray:
    """One video frame through VDEC (matched by :class:`dvpipe.video.ReorderingDecoder`) and the step's
    VPC calls; returns ``H x W x 3`` uint8 BGR on the host.

    Frames matched unit by unit (plain Annex-B bytes, ``VideoPacket.by == "unit"``) use output mode 1 (one
    picture per unit; such frames may not reorder); frames of a video source (``by`` pts or index) mode 0.
    """
    from ...video import as_packet

    if isinstance(data, np.ndarray):
        raise FrameError(f"an {s.program.source} camera delivers encoded access units, got a decoded array")
    packet = as_packet(data, s.extra.get("codec", "h264"))
    mode = OUT_MODE_FAST if packet.by == "unit" else OUT_MODE_DEFAULT
    dec = _decoder(s, mode)
    t0 = now_ns()
    try:
        vp = dec.picture(packet, getattr(ctx, "corrupt", None))
    except FrameError:
        raise
    except Exception:
        # an API failure: this frame falls back; the next one starts a new channel at a keyframe
        s.extra.pop("decoder", None)
        old = s.extra.pop("vdec", None)
        if old is not None:
            old.close()
        raise
    ctx.device_spans.append(s.span("vdec", t0, access_units=packet.nbytes and len(packet.units)))
    if packet.nbytes:  # the access units' bytes went host -> device inside the VDEC call (its time is the vdec span's)
        ctx.device_spans.append(DeviceSpan("h2d", t0, t0, None, unit="dvpp", stream=s.stream_name,
                                           attrs={"direction": "host_to_device", "bytes": int(packet.nbytes)}))
    if vp is None:
        raise CorruptFrameError("VDEC returned no picture for this frame (ret code set by the decoder)")
    picture = vp.take()
    pics: list = [picture]
    rois: list = []
    try:
        if (picture.height, picture.width) != s.program.decode_size:
            raise StepRefused(f"VDEC wrote {picture.width}x{picture.height}; the step expects "
                              f"{s.program.decode_size[1]}x{s.program.decode_size[0]}")
        t1 = now_ns()
        slot = vpc.batch_slot(ctx)
        s.run_vpc(picture, pics, rois, slot)
        if len(pics) > 1:
            s.runtime.synchronize(s.stream, step="vpc", camera=s.camera)
            ctx.device_spans.append(s.span("vpc", t1))
        s.frames += 1
        if vpc.on_device(ctx):
            return s.hand_on(pics, slot, ctx.device_spans)
        return s.finish(pics[-1])
    finally:
        s.cleanup(pics, rois)
