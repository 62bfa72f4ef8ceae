"""Probing file sources for ``dvpipe validate`` (``load_deployment(..., probe=True)``): headers only.

Each check applies the rule ``dvpipe run`` applies when it opens the source, and reports through the
source's :class:`~dvpipe.deploy.sources.registry.SourceContext` at ``<source>.uri``.
"""
from __future__ import annotations

from typing import Any, Optional

__all__ = ["probe_video", "probe_elementary", "probe_images", "sniff_file"]

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
