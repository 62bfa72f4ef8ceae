"""Probing file sources for ``dvpipe validate`` (``load_deployment(..., probe=True)``): headers only.

Each check applies the rule ``dvpipe run`` applies when it opens the source, and reports through the
source's :class:`~dvpipe.deploy.sources.registry.SourceContext` at ``<source>.uri``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["probe_video", "probe_elementary", "sniff_file", "check_image_header", "stream_colour", "with_stream_colour"]

#: FFmpeg codec name -> camera encoding, for the rules of sources/video.py ``AvStream._open``
_FFMPEG_ENCODING = {"h264": "h264", "hevc": "h265", "mjpeg": "jpeg"}


def _video_header(uri: str, ctx: Any, fmt: Optional[str] = None, stream: int = 0) -> Optional[_Header]:
    """The header facts of video stream ``stream`` of ``uri`` (header only; FFmpeg probes a few
    frames for the size), or None after reporting why it cannot be read."""
    try:
        import av
    except ImportError as e:  # pragma: no cover - av is a core dependency
        ctx.err("uri", f"PyAV is needed to check video sources: {e}")
        return None
    if os.path.isfile(uri) and os.path.getsize(uri) == 0:
        ctx.err("uri", f"{uri} is empty (0 bytes): there is no video to read")
        return None
    try:
        with av.open(uri, format=fmt) as container:
            videos = container.streams.video
            if not videos:
                ctx.err("uri", f"{uri} has no video stream")
                return None
            if stream >= len(videos):
                ctx.err("stream", f"{uri} has {len(videos)} video stream{'s' if len(videos) != 1 else ''}; "
                                  f"{stream} is not one (0..{len(videos) - 1})")
                return None
            cc = videos[stream].codec_context
            sizes = [(int(v.codec_context.width or 0), int(v.codec_context.height or 0)) for v in videos]
            return _Header(cc.name, container.format.name, int(cc.width or 0), int(cc.height or 0), sizes,
                           _display_rotation(container, videos[stream]))
    except (av.error.FFmpegError, OSError, ValueError) as e:
        if fmt is not None or not isinstance(e, av.error.InvalidDataError):
            ctx.err("uri", f"cannot read {uri} as video: {getattr(e, 'strerror', None) or e}")
            return None
        raise


@dataclass(frozen=True)
class _Header:
    """What a video file's header says: the chosen stream's codec, the container, its size (0: not
    known from the header), and every video stream's ``(width, height)``."""

    codec: str
    format: str
    width: int
    height: int
    sizes: list
    rotation: int = 0  # the display rotation the file asks players to apply (degrees; FFmpeg's sign)


def _display_rotation(container: Any, stream: Any) -> int:
    """The display rotation of ``stream``'s first picture (FFmpeg's display matrix, degrees), 0 when
    none or when no picture decodes (the decode's own failure is the run's to report)."""
    try:
        for frame in container.decode(stream):
            return int(round(getattr(frame, "rotation", 0) or 0))
    except Exception:  # noqa: BLE001 - any decode failure: no rotation known here
        return 0
    return 0


def _check_video_size(uri: str, header: _Header, ctx: Any, stream: int) -> None:
    """The chosen stream is at the camera's size (when the header tells it); several video streams: which one."""
    h, w = ctx.size
    turned = (f"; the file asks players to rotate it by {header.rotation} degrees" if header.rotation else "")
    if header.width and header.height and (header.width, header.height) != (w, h):
        others = [i for i, size in enumerate(header.sizes) if size == (w, h) and i != stream]
        hint = f"; its video stream {others[0]} is {w}x{h}: choose it with stream: {others[0]}" if others else ""
        ctx.err("uri", f"{uri} video stream {stream} is {header.width}x{header.height} but camera {ctx.camera} declares "
                       f"{w}x{h} (the run would drop every frame as wrong_size){hint}{turned}{ORIENTATION_NOTE}")
        return
    if turned:
        ctx.warn(f"{uri}{turned}: dvpipe uses the pixels as stored (the camera's calibration is of its sensor's "
                 "pixels)", "uri")
    if len(header.sizes) > 1 and "stream" not in ctx.given:
        ctx.warn(f"{uri} has {len(header.sizes)} video streams ("
                 + ", ".join(f"{i}: {a}x{b}" for i, (a, b) in enumerate(header.sizes))
                 + "); camera " + ctx.camera + " reads stream 0 (choose another with stream: N)", "uri")


def probe_video(uri: str, ctx: Any, stream: int = 0) -> None:
    """The rules ``dvpipe run`` applies when it opens a video file: h264/h265 cameras need that codec,
    jpeg cameras MJPEG, raw cameras any video stream; the chosen stream at the camera's size."""
    import av

    try:
        header = _video_header(uri, ctx, stream=stream)
    except av.error.InvalidDataError:
        ctx.err("uri", f"{uri} is not a video file FFmpeg can read")
        return
    if header is None:
        return
    found = _FFMPEG_ENCODING.get(header.codec)
    if ctx.encoding != "raw" and found != ctx.encoding:
        ctx.err("uri", f"{uri} is {header.codec} video but camera {ctx.camera} declares encoding {ctx.encoding} "
                       "(declare the stream's codec, or raw to decode it in the source)")
        return
    _check_video_size(uri, header, ctx, stream)


def probe_elementary(uri: str, ctx: Any, codec: str) -> None:
    """An Annex B file must hold ``codec``: FFmpeg's own detection must not find another codec or a
    container; a file it cannot detect must at least open as ``codec`` (as ``dvpipe run`` opens it);
    an empty file is refused; the size its sequence header gives is the camera's."""
    import av

    try:
        header = _video_header(uri, ctx)
    except av.error.InvalidDataError:  # not detected: run forces the format, so try that
        header = _video_header(uri, ctx, fmt="h264" if codec == "h264" else "hevc")
        if header is not None:
            _check_video_size(uri, header, ctx, 0)
        return
    if header is None:
        return
    if header.format not in ("h264", "hevc") or _FFMPEG_ENCODING.get(header.codec) != codec:
        ctx.err("uri", f"{uri} holds {header.codec} video ({header.format} format), not an Annex B {codec} "
                       "elementary stream")
        return
    _check_video_size(uri, header, ctx, 0)


def sniff_file(path: str, ctx: Any) -> bool:
    """Whether the image file ``path`` is of the camera's declared encoding (JPEG or PNG, by its first
    bytes); reports why not."""
    from ...codecs import sniff

    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        ctx.err("uri", f"cannot read {path}: {e.strerror or e}")
        return False
    found = sniff(head)
    if found != ctx.encoding:
        ctx.err("uri", f"{path} is {'a ' + found.upper() if found else 'neither JPEG nor PNG'} but camera "
                       f"{ctx.camera} declares encoding {ctx.encoding}")
        return False
    return True


def check_image_header(path: str, ctx: Any, cap: Optional[int] = None) -> None:
    """The image ``path`` as the run's decode step checks it from its header: the camera's size (with
    what EXIF orientation does not change), a sample precision dvpipe decodes; greyscale: a warning."""
    from ...codecs import image_info, unsupported_precision
    from ...errors import FrameError

    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1 if cap else -1)
    except OSError as e:
        ctx.err("uri", f"cannot read {path}: {e.strerror or e}")
        return
    if cap and len(data) > cap:
        return  # reported with the sizes
    try:
        info = image_info(data)
    except FrameError as e:
        ctx.err("uri", f"{path}: {e}")
        return
    why = unsupported_precision(info)
    if why is not None:
        ctx.err("uri", f"{path}: {why}")
        return
    h, w = ctx.size
    turn = exif_orientation(data) if info.format == "jpeg" else None
    said = f"; its EXIF orientation is {turn} ({_EXIF_TURNS.get(turn, 'not a valid value')})" if turn not in (None, 1) \
        else ""
    if (info.height, info.width) != (h, w):
        ctx.err("uri", f"{path} is {info.width}x{info.height} but camera {ctx.camera} declares {w}x{h} "
                       f"(the run would drop every such frame as wrong_size){said}{ORIENTATION_NOTE}")
        return
    if said:  # the right size, but stored turned or mirrored: the run uses the pixels as stored
        ctx.warn(f"{path}{said}: dvpipe uses the pixels as stored (the camera's calibration is of its sensor's "
                 "pixels), as a viewer that applies the orientation would not show them", "uri")
    if info.components in (1, 2):
        ctx.warn(f"{path} is a greyscale {info.format.upper()} (one channel): camera {ctx.camera}'s batch would repeat "
                 "the grey in B, G and R (the run counts such frames as greyscale)", "uri")


#: EXIF orientation values (TIFF tag 0x0112): what a viewer does to show the stored pixels upright
_EXIF_TURNS = {1: "upright", 2: "mirrored left-right", 3: "turned 180 degrees", 4: "mirrored top-bottom",
               5: "mirrored along the main diagonal", 6: "to be turned 90 degrees clockwise",
               7: "mirrored along the other diagonal", 8: "to be turned 90 degrees counter-clockwise"}


def exif_orientation(jpeg: bytes) -> Optional[int]:
    """The EXIF orientation (TIFF tag 0x0112 of IFD0 in the APP1 ``Exif`` segment) of JPEG bytes, or
    None when there is none or it cannot be read. Only the segments before the first scan are read."""
    import struct

    i, n = 2, len(jpeg)
    while i + 4 <= n and jpeg[i] == 0xFF:
        marker = jpeg[i + 1]
        if marker == 0xDA:  # start of scan: no more header segments
            return None
        (length,) = struct.unpack(">H", jpeg[i + 2:i + 4])
        seg = jpeg[i + 4:i + 2 + length]
        if marker == 0xE1 and seg[:6] == b"Exif\0\0":
            tiff = seg[6:]
            order = {b"II": "<", b"MM": ">"}.get(bytes(tiff[:2]))
            if order is None or len(tiff) < 8:
                return None
            (ifd,) = struct.unpack(order + "I", tiff[4:8])
            if ifd + 2 > len(tiff):
                return None
            (count,) = struct.unpack(order + "H", tiff[ifd:ifd + 2])
            for k in range(count):
                e = ifd + 2 + 12 * k
                if e + 12 > len(tiff):
                    return None
                tag, typ = struct.unpack(order + "HH", tiff[e:e + 4])
                if tag == 0x0112 and typ == 3:  # SHORT
                    return int(struct.unpack(order + "H", tiff[e + 8:e + 10])[0])
            return None
        i += 2 + length
    return None


#: appended to a size mismatch: what dvpipe does not apply (calibration is of the stored pixels)
ORIENTATION_NOTE = ("; sizes are the stored pixels: EXIF orientation and a video's display rotation are not applied "
                    "(the calibration is of the sensor's pixels)")


#: FFmpeg colour codes (AVColorSpace, AVColorRange) -> the rig keys ``yuv_matrix`` / ``yuv_range``; anything else
#: (unspecified, BT.2020, ...) is not taken: the run's default (BT.601, limited range) stays
_MATRIX = {1: "bt709", 5: "bt601", 6: "bt601"}  # BT.709; BT.470BG and SMPTE 170M are BT.601
_RANGE = {1: "limited", 2: "full"}  # MPEG (studio swing), JPEG (full swing)


def stream_colour(uri: str, fmt: Optional[str] = None, stream: int = 0) -> dict[str, str]:
    """The Y'CbCr standard a video file's video stream ``stream`` (counted among its video streams, the
    source's ``stream:`` option) signals (its VUI, as FFmpeg reads it from the header:
    ``codec_context.colorspace`` / ``color_range``), as the rig keys ``yuv_matrix`` (``bt601`` /
    ``bt709``) and ``yuv_range`` (``limited`` / ``full``); a key the stream leaves unspecified (or signals as
    something else, e.g. BT.2020) is absent. Read-only; ``{}`` when the file cannot be read (the run reports
    that when it opens the source)."""
    import av

    try:
        with av.open(uri, format=fmt) as container:
            if len(container.streams.video) <= stream:
                return {}
            cc = container.streams.video[stream].codec_context
            found = {"yuv_matrix": _MATRIX.get(int(cc.colorspace or 0)),
                     "yuv_range": _RANGE.get(int(cc.color_range or 0))}
    except (av.error.FFmpegError, OSError, ValueError):
        return {}
    return {k: v for k, v in found.items() if v is not None}


def with_stream_colour(dep: Any) -> Any:
    """``dep`` with each H.264 / H.265 camera that sets neither ``yuv_matrix`` nor ``yuv_range`` in the rig
    given the colour standard its file source (``video``, ``elementary``) signals (:func:`stream_colour`), so
    that a plan made before the stream is opened converts with the stream's own matrix (the AIPP route's CSC,
    the NV12 of a fallback frame, the host conversion of VDEC output). Live sources (``rtsp``, ``v4l2``) are
    not opened here: set the keys on the camera. The rig keys always win."""
    import dataclasses

    from ...codecs import VIDEO_ENCODINGS

    cams = {c.name: c for c in dep.rig.cameras}
    changed = False
    for cc in dep.cameras:
        cam = cams.get(cc.name)
        extra = dict(getattr(cam, "extra", None) or {})
        if (cam is None or cam.encoding not in VIDEO_ENCODINGS or {"yuv_matrix", "yuv_range"} & set(extra)
                or cc.source.type not in ("video", "elementary") or not cc.source.uri):
            continue
        fmt = None if cc.source.type == "video" else ("h264" if cam.encoding == "h264" else "hevc")
        found = stream_colour(cc.source.uri, fmt, int(cc.source.options.get("stream") or 0))
        if found:
            cams[cc.name] = dataclasses.replace(cam, extra={**extra, **found})
            changed = True
    if not changed:
        return dep
    return dataclasses.replace(dep, rig=dataclasses.replace(dep.rig, cameras=tuple(cams[c.name] for c in dep.rig.cameras)))
