"""A video file source that starts demuxing at a keyframe: where a worker's segment of a recording begins.

:class:`SeekingVideoFile` is the deployment's own ``video`` source (:class:`dvpipe.deploy.sources.VideoFile`:
the same access units, Annex B conversion, presentation order and capture times), opened and then
moved with FFmpeg's seek (``av_seek_frame`` through PyAV's ``InputContainer.seek``, ``backward=True``,
``any_frame=False``: the keyframe at or before the target, in the stream's time base) to the keyframe
a segment starts at, so a worker demuxes its segment, not the recording up to it.

What the seek changes, and what it does not: the frames' ``seq`` counts from the seek point (the
fleet worker matches a segment's frames by capture time and takes ``seq`` from the index), and the
access units before the landing keyframe are never read. Capture times are those of the whole
recording (``start_ns`` + pts: the container's ``creation_time`` does not move). Demuxers land on
an index entry at or before the target (MP4: the sample table's sync samples, matched by their
decode time; Matroska: the cues), so the landing point is the segment's keyframe or an earlier one;
:class:`dvpipe.fleet._process.FrameSetProcessor` discards what comes before the segment's keyframe
and falls back to reading from the start should a demuxer land after it.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Optional

from ..deploy.sources.video import VideoFile

__all__ = ["SeekingVideoFile"]


class SeekingVideoFile(VideoFile):
    """:class:`VideoFile` that, once open, seeks to the keyframe presented at or before ``seek_ns``.

    Args:
        camera, cfg: as :class:`VideoFile`.
        seek_ns: a capture time (epoch ns, as the source reports them) to start demuxing at.

    Attributes:
        seeked: whether the seek happened (False: the container cannot seek; reading starts at 0).
    """

    def __init__(self, camera, cfg, seek_ns: Optional[int]):
        super().__init__(camera, cfg)
        self._seek_ns = seek_ns
        self.seeked = False

    def _open(self) -> None:
        import av

        super()._open()
        self.seeked = False
        tb = self._stream.time_base
        if self._seek_ns is None or tb is None or self._mode != "access_units":
            return
        pts_ns = int(self._seek_ns) - self._start_ns - self.offset_ns  # capture = start + pts + offset
        ts = round(Fraction(pts_ns, 10**9) / Fraction(tb))  # the inverse of the source's pts -> ns
        try:
            self._container.seek(ts, stream=self._stream, backward=True, any_frame=False)
        except av.error.FFmpegError:
            return
        self._demux = self._container.demux(self._stream)
        self.seeked = True
