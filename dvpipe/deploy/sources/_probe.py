"""Probing file sources for ``dvpipe validate`` (``load_deployment(..., probe=True)``): headers only.

Each check applies the rule ``dvpipe run`` applies when it opens the source, and reports through the
source's :class:`~dvpipe.deploy.sources.registry.SourceContext` at ``<source>.uri``.
"""
from __future__ import annotations

from typing import Any, Optional

__all__ = ["probe_video", "probe_elementary", "probe_images", "sniff_file", "stream_colour", "with_stream_colour"]

#: FFmpeg codec name -> camera encoding, for the rules of sources/video.py ``AvStream._open``
_FFMPEG_ENCODING = {"h264": "h264", "hevc": "h265", "mjpeg": "jpeg"}


def _video_header(uri: str, ctx: Any, fmt: Optional[str] = None) -> Optional[tuple[str, str]]:
    """``(codec, container format)`` of the first video stream of ``uri`` (header only), or None after
    reporting why it cannot be read."""
    try:
        import av
    except ImportError as e:  # pragma: no cover - av is a core dependency
        ctx.err("uri", f"PyAV is needed to check video sources: {e}")
        return None
    try:
        with av.open(uri, format=fmt) as container:
            if not container.streams.video:
                ctx.err("uri", f"{uri} has no video stream")
                return None
            return container.streams.video[0].codec_context.name, container.format.name
    except (av.error.FFmpegError, OSError, ValueError) as e:
        if fmt is not None or not isinstance(e, av.error.InvalidDataError):
            ctx.err("uri", f"cannot read {uri} as video: {getattr(e, 'strerror', None) or e}")
            return None
        raise


def probe_video(uri: str, ctx: Any) -> None:
    """The rules ``dvpipe run`` applies when it opens a video file: h264/h265 cameras need that codec,
    jpeg cameras MJPEG, raw cameras any video stream."""
    import av

    try:
        header = _video_header(uri, ctx)
    except av.error.InvalidDataError:
        ctx.err("uri", f"{uri} is not a video file FFmpeg can read")
        return
    if header is None:
        return
    codec, _fmt = header
    found = _FFMPEG_ENCODING.get(codec)
    if ctx.encoding != "raw" and found != ctx.encoding:
        ctx.err("uri", f"{uri} is {codec} video but camera {ctx.camera} declares encoding {ctx.encoding} "
                       "(declare the stream's codec, or raw to decode it in the source)")


def probe_elementary(uri: str, ctx: Any, codec: str) -> None:
    """An Annex B file must hold ``codec``: FFmpeg's own detection must not find another codec or a
    container; a file it cannot detect must at least open as ``codec`` (as ``dvpipe run`` opens it)."""
    import av

    try:
        header = _video_header(uri, ctx)
    except av.error.InvalidDataError:  # not detected: run forces the format, so try that
        _video_header(uri, ctx, fmt="h264" if codec == "h264" else "hevc")
        return
    if header is None:
        return
    found, fmt = header
    if fmt not in ("h264", "hevc") or _FFMPEG_ENCODING.get(found) != codec:
        ctx.err("uri", f"{uri} holds {found} video ({fmt} format), not an Annex B {codec} elementary stream")


def sniff_file(path: str, ctx: Any) -> None:
    """The image file ``path`` is of the camera's declared encoding (JPEG or PNG, by its first bytes)."""
    from ...codecs import sniff

    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        ctx.err("uri", f"cannot read {path}: {e.strerror or e}")
        return
    found = sniff(head)
    if found != ctx.encoding:
        ctx.err("uri", f"{path} is {'a ' + found.upper() if found else 'neither JPEG nor PNG'} but camera "
                       f"{ctx.camera} declares encoding {ctx.encoding}")


def probe_images(uri: str, pattern: Optional[str], ctx: Any) -> None:
    """The folder or glob has images, and the first one (by name) is of the declared encoding."""
    from .images import scan_images

    try:
        files = scan_images(uri, pattern)
    except (OSError, ValueError) as e:
        ctx.err("uri", f"cannot list {uri}: {getattr(e, 'strerror', None) or e}")
        return
    if not files:
        ctx.err("uri", f"no images in {uri}" + (f" matching {pattern}" if pattern else ""))
        return
    sniff_file(files[0], ctx)


#: FFmpeg colour codes (AVColorSpace, AVColorRange) -> the rig keys ``yuv_matrix`` / ``yuv_range``; anything else
#: (unspecified, BT.2020, ...) is not taken: the run's default (BT.601, limited range) stays
_MATRIX = {1: "bt709", 5: "bt601", 6: "bt601"}  # BT.709; BT.470BG and SMPTE 170M are BT.601
_RANGE = {1: "limited", 2: "full"}  # MPEG (studio swing), JPEG (full swing)


def stream_colour(uri: str, fmt: Optional[str] = None) -> dict[str, str]:
    """The Y'CbCr standard a video file's first video stream signals (its VUI, as FFmpeg reads it from the
    header: ``codec_context.colorspace`` / ``color_range``), as the rig keys ``yuv_matrix`` (``bt601`` /
    ``bt709``) and ``yuv_range`` (``limited`` / ``full``); a key the stream leaves unspecified (or signals as
    something else, e.g. BT.2020) is absent. Read-only; ``{}`` when the file cannot be read (the run reports
    that when it opens the source)."""
    import av

    try:
        with av.open(uri, format=fmt) as container:
            if not container.streams.video:
                return {}
            cc = container.streams.video[0].codec_context
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
        found = stream_colour(cc.source.uri, fmt)
        if found:
            cams[cc.name] = dataclasses.replace(cam, extra={**extra, **found})
            changed = True
    if not changed:
        return dep
    return dataclasses.replace(dep, rig=dataclasses.replace(dep.rig, cameras=tuple(cams[c.name] for c in dep.rig.cameras)))
