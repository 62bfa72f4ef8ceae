"""Software VDEC: ``acl.media.vdec_*`` and the stream descriptors of the acldvpp (v1) API, on PyAV.

Model (what the software device does; the docs describe the calls, not every pairing rule):

* ``vdec_send_frame`` takes one Annex-B access unit in DVPP memory (``acl.media.dvpp_malloc``; from
  CANN 6.2.RC1 on also ``acl.rt.malloc`` memory: "acldvppMalloc ... or aclrtMalloc", CANN 6.2.RC1
  aclcppdevg_03_0209 and 9.0.0 aclcppdevg_03_0373; CANN 6.0.1 aclcppdevg_03_0203 names acldvppMalloc
  only) and an output picture descriptor; the picture decoded from it comes back through the channel's
  callback, on the thread named with ``vdec_set_channel_desc_thread_id``, when that thread calls
  ``acl.rt.process_report``. The frame configuration is reserved and may be 0 (NULL), on every send
  including the end-of-stream one (CANN 8.0.0 aclcppdevg_03_0375, ``config``).
* **Output mode** (``vdec_set_channel_desc_out_mode``, CANN aclpythondevg_01_0353): in mode 0 (the
  default) "VDEC starts to output decoding results only after it has received several frames of the
  stream": the software device holds :data:`HOLD` decoded pictures before it releases the oldest (the
  number is not documented; the model is "several"). In mode 1 (fast) each picture is output as soon as
  it is decoded (documented for streams without B-frames or long-term references only).
* Pictures come back in **display order**, each callback carrying the input stream descriptor, output
  picture descriptor and ``user_data`` of the send whose access unit coded that picture (the docs say
  the callback's input "is the input of aclvdecSendFrame" and that user data carries the frame number
  so the callback knows which frame it processes, aclcppdevg_03_0375/0377: the pairing under
  reordering is inferred from that, never measured).
* ``dvpp_set_stream_desc_eos(desc, 1)`` on a send flushes the decoder: every held picture comes out,
  and every send still waiting gets its callback (``dvpp_get_pic_desc_ret_code`` = 1 when no picture
  came out of it); the end-of-stream send returns once those callbacks have run (documented).
* Timing (an assumption of the software device, stricter than a device): an ordinary send also returns
  only once the callbacks of the pictures it released have run, so that CI is deterministic.
* **Maximum output size** (``vdec_set_channel_desc_out_pic_width/height``, CANN 6.0.1
  aclpythondevg_01_0322/0323, 8.1.RC1 aclpythondevg_01_0350/0351): a picture larger than the channel's
  maximum fails (ret code 1, ``ACL_ERROR_INVALID_PARAM`` as the reason); unset, the maximum is the family's
  default, 1920x1120 on Ascend310/910 and 4096x4096 elsewhere. How a device fails is not documented; the
  per-picture failure is the software device's choice.
* Output: NV12/NV21 with the strides of the knowledge base's VDEC rule (the descriptor's width,
  height and strides are written by the device), padding bytes set to the sentinel.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ....bitstream import stream_format
from .. import _codes as C
from .._enums import PIXEL_FORMAT_NAME
from ..colour import write_nv12
from ..support import kcheck
from ._dvpp import PicDesc, _stride

__all__ = ["VdecMedia", "StreamDesc", "VdecChannelDesc", "HOLD"]

#: pictures the software VDEC holds in output mode 0 before it releases the oldest ("several frames")
HOLD = 3

_CODEC = {0: "h265", 1: "h264", 2: "h264", 3: "h264"}
_FFMPEG = {"h264": "h264", "h265": "hevc"}


@dataclass
class StreamDesc:
    data: int = 0
    size: int = 0
    eos: int = 0
    timestamp: int = 0
    ret_code: int = 0


@dataclass
class FrameConfig:
    pass


@dataclass
class VdecChannelDesc:
    channel_id: int = 0
    thread_id: int = 0
    callback: Any = None
    entype: int = 2
    out_format: int = 1
    out_mode: int = 0
    #: vdec_set_channel_desc_out_pic_width/height (0: not set, the family's default applies)
    out_pic_width: int = 0
    out_pic_height: int = 0
    created: bool = False
    decoder: Any = None
    codec: str = "h264"
    checked: bool = False
    refused: str = ""
    #: what the stream's first sequence parameter set declares (dvpipe.bitstream.StreamFormat), checked with its size
    stream_format: Any = None
    pending: dict = field(default_factory=dict)  # send seq -> (stream desc, pic desc, user data)
    held: deque = field(default_factory=deque)  # decoded pictures not yet output: (seq, frame)
    seq: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class VdecMedia:
    """VDEC calls (mixed into the software device's ``media`` namespace)."""

    _sim: Any
    # provided by the namespace this is mixed into (_dvpp.py)
    _create: Callable[..., int]
    _faulted: Callable[[str], Optional[int]]

    # -- stream descriptors -------------------------------------------------------------------------
    def dvpp_create_stream_desc(self):
        return self._create(StreamDesc())

    def dvpp_destroy_stream_desc(self, desc: int) -> int:
        return C.ACL_SUCCESS if self._sim.objs.pop(desc, StreamDesc) else C.ACL_ERROR_INVALID_PARAM

    def _sset(self, desc: int, name: str, value: int) -> int:
        d = self._sim.objs.get(desc, StreamDesc)
        if d is None:
            return C.ACL_ERROR_INVALID_PARAM
        setattr(d, name, int(value))
        return C.ACL_SUCCESS

    def _sget(self, desc: int, name: str) -> int:
        d = self._sim.objs.get(desc, StreamDesc)
        return 0 if d is None else getattr(d, name)

    def dvpp_set_stream_desc_data(self, desc, data): return self._sset(desc, "data", data)
    def dvpp_set_stream_desc_size(self, desc, size): return self._sset(desc, "size", size)
    def dvpp_set_stream_desc_eos(self, desc, eos): return self._sset(desc, "eos", eos)
    def dvpp_set_stream_desc_timestamp(self, desc, ts): return self._sset(desc, "timestamp", ts)
    def dvpp_get_stream_desc_data(self, desc): return self._sget(desc, "data")
    def dvpp_get_stream_desc_size(self, desc): return self._sget(desc, "size")
    def dvpp_get_stream_desc_eos(self, desc): return self._sget(desc, "eos")
    def dvpp_get_stream_desc_timestamp(self, desc): return self._sget(desc, "timestamp")
    def dvpp_get_stream_desc_ret_code(self, desc): return self._sget(desc, "ret_code")

    # -- channel descriptors ------------------------------------------------------------------------
    def vdec_create_channel_desc(self):
        return self._create(VdecChannelDesc(), "vdec")

    def vdec_destroy_channel_desc(self, desc: int) -> int:
        ch = self._sim.objs.get(desc, VdecChannelDesc)
        if ch is None:
            return C.ACL_ERROR_INVALID_PARAM
        if ch.created:
            return C.ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED
        self._sim.objs.pop(desc, VdecChannelDesc)
        return C.ACL_SUCCESS

    def _cset(self, desc: int, name: str, value: Any) -> int:
        ch = self._sim.objs.get(desc, VdecChannelDesc)
        if ch is None:
            return C.ACL_ERROR_INVALID_PARAM
        setattr(ch, name, value)
        return C.ACL_SUCCESS

    def vdec_set_channel_desc_channel_id(self, desc, cid): return self._cset(desc, "channel_id", int(cid))
    def vdec_set_channel_desc_thread_id(self, desc, tid): return self._cset(desc, "thread_id", int(tid))
    def vdec_set_channel_desc_callback(self, desc, cb): return self._cset(desc, "callback", cb)
    def vdec_set_channel_desc_entype(self, desc, entype): return self._cset(desc, "entype", int(entype))
    def vdec_set_channel_desc_out_pic_format(self, desc, fmt): return self._cset(desc, "out_format", int(fmt))
    def vdec_set_channel_desc_out_mode(self, desc, mode): return self._cset(desc, "out_mode", int(mode))

    def vdec_set_channel_desc_out_pic_width(self, desc, width):
        if int(width) <= 0:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"out_pic_width {width}: must be positive")
        return self._cset(desc, "out_pic_width", int(width))

    def vdec_set_channel_desc_out_pic_height(self, desc, height):
        if int(height) <= 0:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"out_pic_height {height}: must be positive")
        return self._cset(desc, "out_pic_height", int(height))

    def vdec_get_channel_desc_out_mode(self, desc):
        ch = self._sim.objs.get(desc, VdecChannelDesc)
        return 0 if ch is None else ch.out_mode

    def vdec_create_frame_config(self):
        return self._create(FrameConfig(), "vdec")

    def vdec_destroy_frame_config(self, cfg: int) -> int:
        return C.ACL_SUCCESS if self._sim.objs.pop(cfg, FrameConfig) else C.ACL_ERROR_INVALID_PARAM

    # -- channel ------------------------------------------------------------------------------------
    def vdec_create_channel(self, desc: int) -> int:
        sim = self._sim
        if not sim._initialised:
            return C.ACL_ERROR_UNINITIALIZE
        bad = self._faulted("vdec")
        if bad:
            return bad
        ch = sim.objs.get(desc, VdecChannelDesc)
        if ch is None:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, "unknown VDEC channel description")
        if ch.created:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, "the VDEC channel description already has a channel")
        if ch.out_mode not in (0, 1):
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"out mode {ch.out_mode}: 0 or 1 (aclpythondevg_01_0353)")
        if any(o.created and o.channel_id == ch.channel_id for o in sim.objs.of(VdecChannelDesc)):
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"VDEC channel id {ch.channel_id} is in use")
        codec = _CODEC.get(ch.entype)
        if codec is None:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"unknown stream format (entype) {ch.entype}")
        if ch.callback is None or not ch.thread_id:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, "a VDEC channel needs a callback and a callback thread id")
        if PIXEL_FORMAT_NAME.get(ch.out_format) not in ("nv12", "nv21"):
            return sim.fail(C.ACL_ERROR_FEATURE_UNSUPPORTED, "the software device writes NV12/NV21 VDEC output")
        t = sim.target
        v = kcheck(t, "vdec", "decode", 1920, 1080, codec, channels=ch.channel_id + 1)
        over = [f for f in v.violations if "channels" in f.subject.split(",")]
        if over:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"channel id {ch.channel_id}: {over[0].message} "
                                                       f"[rule {over[0].rule_id}]")
        try:
            import av  # noqa: F401 - the check that PyAV imports
        except ImportError as e:  # the software device's own dependency
            from ....errors import MissingDependencyError

            raise MissingDependencyError(f"the software VDEC decodes with PyAV, which cannot be imported ({e}); "
                                         "pip install av") from e
        ch.decoder = self._new_decoder(codec)
        ch.codec = codec
        ch.created = True
        sim.reports.subscribe(ch.thread_id)
        return C.ACL_SUCCESS

    @staticmethod
    def _new_decoder(codec: str):
        import av

        dec = av.CodecContext.create(_FFMPEG[codec], "r")
        dec.thread_type = "SLICE"
        return dec

    def vdec_destroy_channel(self, desc: int) -> int:
        ch = self._sim.objs.get(desc, VdecChannelDesc)
        if ch is None or not ch.created:
            return C.ACL_ERROR_INVALID_PARAM
        with ch.lock:
            ch.created = False
            ch.decoder = None
            ch.pending.clear()
            ch.held.clear()
        self._sim.reports.unsubscribe(ch.thread_id)
        return C.ACL_SUCCESS

    def vdec_send_frame(self, channel_desc: int, input_stream_desc: int, output_pic_desc: int, frame_config: int,
                        user_data: Any) -> int:
        sim = self._sim
        bad = self._faulted("vdec")
        if bad:
            return bad
        ch = sim.objs.get(channel_desc, VdecChannelDesc)
        if ch is None or not ch.created:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, "the VDEC channel description does not belong to a created "
                                                       "channel")
        sd = sim.objs.get(input_stream_desc, StreamDesc)
        if sd is None:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, "unknown input stream description")
        if frame_config and sim.objs.get(frame_config, FrameConfig) is None:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, "unknown frame configuration (0 is allowed: it is reserved)")
        before = sim.reports.posted(ch.thread_id)
        with ch.lock:
            if sd.eos:
                out = self._decode(ch, None, None)
                ch.held.extend(out)
                self._release(ch, len(ch.held))
                for seq in sorted(ch.pending):  # sends that produced no picture
                    self._post_entry(ch, seq, None)
                ch.decoder = self._new_decoder(ch.codec)
            else:
                space, view = sim.memory.resolve(sd.data, sd.size)
                if sd.size <= 0 or view is None:
                    return sim.fail(C.ACL_ERROR_INVALID_PARAM, "an empty stream packet is sent only with eos = 1")
                if space not in self._input_spaces():
                    return sim.fail(C.ACL_ERROR_INVALID_PARAM, "VDEC input must be in device memory from "
                                    + " or ".join(self._input_spaces_words()))
                if sim.objs.get(output_pic_desc, PicDesc) is None:
                    return sim.fail(C.ACL_ERROR_INVALID_PARAM, "unknown output picture description")
                seq = ch.seq
                ch.seq += 1
                ch.pending[seq] = (input_stream_desc, output_pic_desc, user_data)
                data = view.tobytes()
                if ch.stream_format is None and not ch.checked:  # profile, level, bit depth, chroma (§3.1)
                    ch.stream_format = stream_format(data, ch.codec)
                out = self._decode(ch, data, seq)
                ch.held.extend(out)
                keep = 0 if ch.out_mode == 1 else HOLD
                self._release(ch, max(0, len(ch.held) - keep))
            posted = sim.reports.posted(ch.thread_id)
        # EOS is documented to return once the callbacks ran; the software device does it on every send
        if posted > before:
            sim.reports.wait_done(ch.thread_id, posted)
        return C.ACL_SUCCESS

    def _input_spaces(self) -> tuple:
        from ....knowledge.versions import CannVersion

        rt_ok = CannVersion.parse(str(self._sim.target.cann)) >= CannVersion.parse("6.2.RC1")
        return ("device", "rt") if rt_ok else ("device",)

    def _input_spaces_words(self) -> list:
        words = ["acl.media.dvpp_malloc"]
        if "rt" in self._input_spaces():
            words.append("acl.rt.malloc")
        return words

    # -- internals ----------------------------------------------------------------------------------
    def _decode(self, ch: VdecChannelDesc, data: Optional[bytes], seq: Optional[int]) -> list:
        """Decode one unit (None: flush); returns ``[(seq, frame)]`` in display order. A unit the decoder
        rejects gets its failure callback at once."""
        import av

        try:
            if data is None:
                frames = list(ch.decoder.decode(None))
            else:
                pkt = av.Packet(data)
                pkt.pts = seq
                frames = list(ch.decoder.decode(pkt))
        except av.error.FFmpegError as e:
            self._sim.fail(C.ACL_ERROR_RT_FAILURE, f"VDEC: corrupt access unit ({e})")
            if seq is not None:
                self._post_entry(ch, seq, None)
            return []
        return [(f.pts, f) for f in frames if f.pts is not None]

    def _release(self, ch: VdecChannelDesc, n: int) -> None:
        for _ in range(n):
            seq, frame = ch.held.popleft()
            self._post_entry(ch, seq, frame)

    def _post_entry(self, ch: VdecChannelDesc, seq: int, frame: Any) -> None:
        entry = ch.pending.pop(seq, None)
        if entry is None:
            return
        sdh, pdh, user_data = entry
        pic = self._sim.objs.get(pdh, PicDesc)
        ok = frame is not None and pic is not None and self._write(ch, frame, pic, self._sim.target)
        if pic is not None:
            pic.ret_code = 0 if ok else 1
        self._post(ch, sdh, pdh, user_data)

    def _write(self, ch: VdecChannelDesc, frame: Any, pic: PicDesc, t: Any) -> bool:
        sim = self._sim
        w, h = frame.width, frame.height
        if not ch.checked:
            extras = ch.stream_format.check_extras() if ch.stream_format is not None else {}
            v = kcheck(t, "vdec", "decode", w, h, ch.codec, **extras)
            hard = v.violations
            if hard:
                ch.refused = f"{hard[0].message} [rule {hard[0].rule_id}]"
            elif v.unknowns and sim.strict_unknown:
                ch.refused = f"{v.unknowns[0].message} [rule {v.unknowns[0].rule_id}: left open by the docs]"
            ch.checked = True
        if ch.refused:
            sim.fail(C.ACL_ERROR_INVALID_PARAM, ch.refused)
            return False
        mw, mh = self._max_out(ch, t)
        if w > mw or h > mh:
            sim.fail(C.ACL_ERROR_INVALID_PARAM,
                     f"VDEC picture {w}x{h} is larger than the channel's maximum output size {mw}x{mh} "
                     + ("(set with vdec_set_channel_desc_out_pic_width/height)" if ch.out_pic_width or ch.out_pic_height
                        else "(the default when vdec_set_channel_desc_out_pic_width/height are not set; "
                             "aclpythondevg_01_0322/0323)"))
            return False
        fmt = PIXEL_FORMAT_NAME.get(ch.out_format, "nv12")
        st, _wa, _ha, gap = _stride(t.soc, str(t.cann), "vdec", fmt, w // 2 * 2, h // 2 * 2, "out")
        if st is None:
            sim.fail(C.ACL_ERROR_FEATURE_UNSUPPORTED, gap)
            return False
        if pic.size < st.buffer_bytes:
            sim.fail(C.ACL_ERROR_INVALID_PARAM, f"VDEC output buffer {pic.size} bytes < {st.buffer_bytes} "
                                                f"({st.width_stride}x{st.height_stride} {fmt}) [rule {st.rule_id}]")
            return False
        space, buf = sim.memory.resolve(pic.data, pic.size)
        if space != "device":
            sim.fail(C.ACL_ERROR_INVALID_PARAM, "VDEC output must be in DVPP memory")
            return False
        nv = frame.reformat(format="nv12").to_ndarray()  # (h*3/2, w)
        ow, oh = w // 2 * 2, h // 2 * 2
        y = nv[:oh, :ow]
        uv = nv[h:h + oh // 2, :ow].reshape(oh // 2, ow // 2, 2)
        if fmt == "nv21":
            uv = uv[..., ::-1]
        write_nv12(buf, np.ascontiguousarray(y), np.ascontiguousarray(uv), st.width_stride, st.height_stride)
        pic.width, pic.height, pic.width_stride, pic.height_stride = ow, oh, st.width_stride, st.height_stride
        return True

    @staticmethod
    def _max_out(ch: VdecChannelDesc, t: Any) -> tuple[int, int]:
        """The channel's maximum output ``(width, height)``: what was set, else the family's documented default
        (families.yaml ``vdec_default_out_size``: 1920x1120 on Ascend310/910, 4096x4096 elsewhere)."""
        from ....knowledge import facts

        dw, dh = facts(t.soc).vdec_default_out_size
        return ch.out_pic_width or dw, ch.out_pic_height or dh

    def _post(self, ch: VdecChannelDesc, sdh: int, pdh: int, user_data: Any) -> None:
        cb = ch.callback
        if not self._sim.reports.post(ch.thread_id, lambda: cb(sdh, pdh, user_data)):
            self._sim.fail(C.ACL_ERROR_THREAD_NOT_SUBSCRIBE, f"callback thread {ch.thread_id} does not exist")
