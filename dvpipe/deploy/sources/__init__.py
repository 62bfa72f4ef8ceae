"""Frame sources: one per camera, each yielding frames with capture timestamps.

=============  =================================================================================
type           what
=============  =================================================================================
images         image sequence: a folder (nuScenes-style per-camera folders) or a glob; capture
               times from file names, a sidecar file or a frame rate (:mod:`.images`)
video          MP4/MKV/... file through PyAV; capture time = start + pts (:mod:`.video`)
elementary     raw H.264/H.265 Annex B file; capture time = start + k / fps
rtsp           RTSP camera/server through PyAV, read timeouts, reconnect with back-off
v4l2           V4L2 capture device through PyAV's libavdevice
synthetic      renders a sample-like scene through the camera's calibration (:mod:`.synthetic`)
infos          an mmdet3d / nuScenes info file: each sample a frame set, each image at its own
               timestamp, calibration and ego pose per sample (:mod:`.infos`)
=============  =================================================================================

:func:`open_source` builds a camera's source from its :class:`~dvpipe.deploy.config.SourceConfig`,
stacked with looping, replay pacing and fault injection as the deployment asks (:mod:`.wrappers`).
"""
from __future__ import annotations

from typing import Optional

from ...types import Camera
from .base import Backoff, Item, Source, SourceError, SourceWrapper, StreamLost, StreamStalled
from .images import ImageSequence
from .infos import InfoSource
from .synthetic import SyntheticSource
from .video import ElementaryStream, RtspSource, V4l2Source, VideoFile
from .wrappers import Faulty, Limited, Looped, Paced, ReplayClock

__all__ = ["SOURCES", "open_source", "Source", "SourceError", "StreamLost", "StreamStalled", "Item", "Backoff",
           "SourceWrapper", "Looped", "Limited", "Paced", "ReplayClock", "Faulty"]

#: source type -> class
SOURCES: dict[str, type[Source]] = {
    "images": ImageSequence,
    "video": VideoFile,
    "elementary": ElementaryStream,
    "rtsp": RtspSource,
    "v4l2": V4l2Source,
    "synthetic": SyntheticSource,
    "infos": InfoSource,
}


def open_source(camera: Camera, cfg, *, loop: bool = False, clock: Optional[ReplayClock] = None,
                start_ns: Optional[int] = None, limit: Optional[int] = None) -> Source:
    """The source for ``camera`` as ``cfg`` describes it (not opened yet).

    Args:
        loop: recordings start over at their end (live sources ignore it).
        clock: pace recordings at their capture rate on this shared clock (``run.realtime``); live
            sources are paced by nature.
        start_ns: the run's common start (epoch ns): synthetic cameras of one run share their
            capture grid (a triggered rig) unless their ``start_ns`` option says otherwise.
        limit: recordings end after this many frames (a run of N frame sets needs at most N each).
    """
    try:
        cls = SOURCES[cfg.type]
    except KeyError:
        raise SourceError(f"unknown source type {cfg.type!r}; known: {', '.join(SOURCES)}") from None
    src: Source = cls(camera, cfg)
    src.run_start_ns = start_ns
    if loop and not src.live:
        src = Looped(src)
    if limit is not None and not src.live:
        src = Limited(src, limit)
    if clock is not None and not src.live:
        src = Paced(src, clock)
    if cfg.faults:
        src = Faulty(src, cfg.faults)
    return src
