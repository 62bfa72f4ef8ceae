"""Frame sources: one per camera, each yielding frames with capture timestamps.

Every source type is a :class:`Source` subclass registered once with
:func:`register_source` (``@dvpipe.register_source("type")``): its ``Options`` dataclass declares
its YAML keys, which the deployment validator reads (:mod:`.registry`). :data:`SOURCES` maps each
type to its class; ``docs/deployments.md`` holds the reference table made from it
(:func:`.registry.markdown_reference`).

The built-in types: ``images`` (:mod:`.images`), ``video``, ``elementary``, ``rtsp``, ``v4l2``
(:mod:`.video`), ``synthetic`` (:mod:`.synthetic`) and ``infos`` (:mod:`.infos`); each class's
docstring and ``Options`` say what it reads and how it stamps capture times.

:func:`open_source` builds a camera's source from its :class:`~dvpipe.deploy.config.SourceConfig`,
stacked with looping, replay pacing and fault injection as the deployment asks (:mod:`.wrappers`).
"""
from __future__ import annotations

from typing import Optional

from ...types import Camera
from .base import Backoff, Item, NothingYet, Source, SourceError, SourceWrapper, StreamLost, StreamStalled
from .registry import SOURCES, SourceContext, option, register_source, source_class
# the built-in types register themselves on import, in this order
from .images import ImageSequence  # noqa: E402,F401
from .video import ElementaryStream, RtspSource, V4l2Source, VideoFile  # noqa: E402,F401
from .synthetic import SyntheticSource  # noqa: E402,F401
from .infos import InfoSource  # noqa: E402,F401
from .wrappers import Faulty, Limited, Looped, Paced, ReplayClock

__all__ = ["SOURCES", "open_source", "register_source", "option", "source_class", "SourceContext", "Source",
           "SourceError", "StreamLost", "StreamStalled", "NothingYet", "Item", "Backoff", "SourceWrapper", "Looped",
           "Limited", "Paced", "ReplayClock", "Faulty"]


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
    cls = SOURCES.get(cfg.type)
    if cls is None:
        raise SourceError(f"unknown source type {cfg.type!r}; known: {', '.join(SOURCES)}")
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
