"""H.264 / H.265 decoding as a plan step (CPU, PyAV's FFmpeg software decoders).

A camera that declares ``encoding: h264`` (or ``h265``) delivers one **access unit** per frame:
Annex B bytes (start codes, parameter sets in band before keyframes) of one coded picture. The
``decode`` step turns it into an HxWx3 uint8 BGR image like a JPEG decode, so the plan table and the
latency report show video decoding as a step with its backend. A DVPP VDEC kernel can replace it
later on its own backend family.

Video is not JPEG: pictures reference earlier pictures. Two consequences handled here:

* **State per camera.** One ``av.CodecContext`` per camera lives in the kernel's ``ctx.state``
  (the pipeline keeps one state dict per camera and step). The decoder runs without frame
  threading, so a stream without B-frames (every camera stream) gives one picture per access unit.
* **Frames dropped before decoding still feed the decoder.** When the runner drops a frame before
  it reaches the plan (superseded by a newer one, late, its set dropped), the next frame sent to
  decode carries the skipped access units too (:func:`pack_access_units`), so the reference chain
  stays intact; the skipped ones are decoded as references only and stay counted as dropped. A
  keyframe starts a new chain, so nothing before it is carried. When the chain is broken anyway
  (a decoder error, a lost frame, a stream that starts mid-GOP) frames are dropped with the reason
  "waiting for a keyframe" until the next keyframe.

Errors are :class:`~dvpipe.errors.FrameError` (a counted drop for that camera): a corrupt access
unit (the decoder rejects it), a picture whose size differs from the camera's declared size (a
resolution change mid-stream), a decoder that produced no picture.
"""
from __future__ import annotations

import struct
from fractions import Fraction
from typing import Any, Optional, Sequence

import numpy as np

from ..codecs import VIDEO_ENCODINGS
from ..errors import FrameError

__all__ = ["VIDEO_ENCODINGS", "decode_video", "pack_access_units", "unpack_access_units", "is_keyframe",
           "nal_types"]

_FFMPEG_NAME = {"h264": "h264", "h265": "hevc"}
_BUNDLE_MAGIC = b"\x00DVB"  # never the start of Annex B data (00 00 01 / 00 00 00 01)
_FLAG_DISCONTINUITY = 1


def pack_access_units(access_units: Sequence[bytes], *, discontinuity: bool = False) -> bytes:
    """Bundle several access units (oldest first) into one frame payload for :func:`decode_video`.

    The picture returned is the last one's; the others are decoded as references. ``discontinuity``
    tells the decoder that access units are missing before the first one (wait for a keyframe).
    """
    parts = [_BUNDLE_MAGIC, struct.pack("<BI", _FLAG_DISCONTINUITY if discontinuity else 0, len(access_units))]
    for au in access_units:
        parts.append(struct.pack("<I", len(au)))
        parts.append(bytes(au))
    return b"".join(parts)


def unpack_access_units(data: bytes | memoryview) -> tuple[list[bytes], bool]:
    """``(access units, discontinuity)`` of a payload: a bundle, or a single access unit."""
    mv = memoryview(data)
    if bytes(mv[:4]) != _BUNDLE_MAGIC:
        return [data if isinstance(data, bytes) else bytes(mv)], False
    try:
        flags, count = struct.unpack_from("<BI", mv, 4)
        pos, out = 9, []
        for _ in range(count):
            (n,) = struct.unpack_from("<I", mv, pos)
            pos += 4
            if pos + n > len(mv):
                raise struct.error("short bundle")
            out.append(bytes(mv[pos:pos + n]))
            pos += n
    except struct.error:
        raise FrameError("corrupt access-unit bundle") from None
    return out, bool(flags & _FLAG_DISCONTINUITY)


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
    """True when the access unit starts a new reference chain (H.264 IDR; H.265 IRAP: BLA, IDR, CRA).

    ``types``: the access unit's :func:`nal_types`, when the caller has them already.
    """
    if types is None:
        types = nal_types(au, codec)
    if codec == "h264":
        return 5 in types
    return any(16 <= t <= 23 for t in types)


def _decoder(ctx, codec: str):
    import av

    state = ctx.state
    dec = state.get("video_decoder")
    if dec is None or state.get("video_codec") != codec:
        dec = av.CodecContext.create(_FFMPEG_NAME[codec], "r")
        dec.thread_type = "SLICE"  # frame threading would delay pictures by one per thread
        dec.options = {"err_detect": "explode"}  # an error raises instead of a silently concealed picture
        state["video_decoder"] = dec
        state["video_codec"] = codec
        state["need_keyframe"] = True
    return dec


def decode_video(data: Any, ctx) -> np.ndarray:
    """Decode one access unit (or a bundle from :func:`pack_access_units`) to HxWx3 uint8 BGR.

    Args:
        data: Annex B bytes of one access unit, or a bundle.
        ctx: the kernel context (``ctx.spec_in.encoding`` is ``h264``/``h265``; ``ctx.state`` keeps
            this camera's decoder; ``ctx.spec_in`` the declared size).

    Raises:
        FrameError: corrupt data, waiting for a keyframe, no picture, or a picture of another size.
    """
    import av

    codec = ctx.spec_in.encoding
    if codec not in VIDEO_ENCODINGS:
        raise FrameError(f"decode_video handles {', '.join(VIDEO_ENCODINGS)}, not {codec!r}")
    if isinstance(data, np.ndarray):
        raise FrameError(f"an {codec} camera delivers encoded access units, got a decoded array")
    aus, discontinuity = unpack_access_units(data)
    dec = _decoder(ctx, codec)
    state = ctx.state
    if discontinuity:
        state["need_keyframe"] = True
    picture = None
    error = None
    for k, au in enumerate(aus):
        last = k == len(aus) - 1
        types = nal_types(au, codec)
        if not types:
            state["need_keyframe"] = True
            error = f"corrupt {codec} access unit (no NAL units)"
            continue
        if state.get("need_keyframe", True):
            if not is_keyframe(au, codec, types):
                if last:
                    raise FrameError(f"{codec}: waiting for a keyframe (the stream started mid-GOP, "
                                     "or frames before this one were lost or corrupt)")
                continue
            state["need_keyframe"] = False
        try:
            frames = dec.decode(av.Packet(au))
        except av.error.FFmpegError as e:
            state["need_keyframe"] = True
            error = f"corrupt {codec} access unit (decoder: {getattr(e, 'strerror', None) or e})"
            continue
        error = None
        if frames:
            picture = frames[-1]
            if getattr(picture, "is_corrupt", False):
                state["need_keyframe"] = True
                error = f"corrupt {codec} picture (the decoder flagged it)"
    if error is not None:
        raise FrameError(error)
    if picture is None:
        raise FrameError(f"{codec} decoder returned no picture for this access unit "
                         "(a stream with B-frames delays pictures; encode camera streams without B-frames)")
    spec = ctx.spec_in
    if (picture.width, picture.height) != (spec.width, spec.height):
        raise FrameError(f"frame is {picture.width}x{picture.height} "
                         f"but the camera declares {spec.width}x{spec.height}")
    return picture.to_ndarray(format="bgr24")


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
