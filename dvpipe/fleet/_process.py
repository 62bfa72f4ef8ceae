"""Processing index rows with a deployment's pipeline: what one fleet worker does, without Ray.

:class:`FrameSetProcessor` builds the deployment's pipeline once (:func:`dvpipe.deploy.runner.build_pipeline`,
backends resolved on the worker: cpu, torch:cuda, dvpp, torch:npu) and turns index rows into
:class:`SetResult` objects. The frames it gives the pipeline are the ones ``dvpipe run`` gives it
for the same frame set: same bytes, ``seq`` and ``capture_epoch_ns``; for a video camera the access units
of the frames the synchroniser dropped since the camera's previous set ride along with the next
frame (the runner's rule), so one decoder per camera sees the whole stream in decode order. The
metas get the runner's annotations (``set_time_ns``, ``stale``, ``sync_skew_ns``, ``drop_reason``).

Image-sequence rows are independent. A video drive's rows must be processed in order, all by one
processor (:meth:`FrameSetProcessor.video_drive`): its recordings are demuxed once, front to back.
A *segment* of a video drive (rows that start at a set the index marks ``cut``, see
:func:`dvpipe.fleet._index.keyframe_starts`) is processed the same way, except that each camera's
decoder is fed from the keyframe the index names (``key_ns``): the access units before it are
demuxed and discarded, the pictures decoded from it that come before the camera's first frame of
the segment are decode-only (their frames are not the segment's), and the pictures of the segment's
frames are those of the whole recording decoded in one go, bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np

from ..codecs import VIDEO_ENCODINGS
from ..latency import Timeline, now_ns
from ..types import Frame, PixelFormat

__all__ = ["FrameSetProcessor", "SetResult", "load_fleet_deployment"]


@dataclass
class SetResult:
    """One frame set, processed (``images`` not None) or failed (``error`` says why).

    Attributes:
        set_id: the index's ``set_id``.
        time_ns: the set's capture time (epoch ns).
        images: ``(N, C, H, W)`` host array, the plan's dtype (uint8, float16 or float32), rig order; a copy.
        valid: ``(N,)`` bool.
        metas: one dict per camera (numpy arrays kept), with the runner's sync annotations.
        timeline: the set's spans (``read`` plus the plan's steps).
        error: the reason the set failed (one line), else None.
    """

    set_id: str
    time_ns: int
    images: Optional[np.ndarray] = None
    valid: Optional[np.ndarray] = None
    metas: list = field(default_factory=list)
    timeline: Optional[Timeline] = None
    error: Optional[str] = None


def load_fleet_deployment(path: str, backends: Optional[Sequence[str]] = None):
    """The deployment at ``path`` as fleet workers use it: no model, no outputs of its own,
    recordings read once (``run.loop``/``frames``/``realtime`` off); ``backends`` overrides every camera's."""
    from ..deploy import load_deployment
    from ..deploy.config import parse_backends

    dep = load_deployment(path)
    dep = replace(dep, model=None).with_run(frames=None, duration_s=None, loop=False, realtime=False)
    if backends:
        b = parse_backends(list(backends), "--backends")
        dep = replace(dep, pipeline=replace(dep.pipeline, backends=b),
                      cameras=tuple(replace(c, backends=None) for c in dep.cameras))
    return dep


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".strip()


class FrameSetProcessor:
    """A deployment's pipeline, built once, applied to index rows.

    Args:
        dep: a deployment from :func:`load_fleet_deployment`.
    """

    def __init__(self, dep):
        from ..deploy.runner import build_pipeline

        #: the last :meth:`video_drive` call's segment start per camera (``keyframe_ns``,
        #: ``decode_only`` pictures, ``demuxed_only`` access units); empty for a drive's first set
        self.segment_start: dict[str, dict] = {}

        self.dep = dep
        self.cameras = [c.name for c in dep.cameras]
        self.pipe, self.backend_notes = build_pipeline(dep)
        self._codec = {c.name: c.encoding for c in dep.rig.cameras if c.encoding in VIDEO_ENCODINGS}
        self._counters = dep.latency.counters_only

    def close(self) -> None:
        getattr(self.pipe, "close", lambda: None)()

    # -- one set ------------------------------------------------------------------------------------
    def _finish(self, row: dict, frames: dict, tl: Timeline) -> SetResult:
        formed = now_ns()  # the runner's queue_wait: from each frame's arrival to the set's processing
        for cam, st in list(tl.cameras.items()):
            if st.arrival_ns is not None:
                tl.record("queue_wait", st.arrival_ns, max(formed, st.arrival_ns), "wait", camera=cam)
        try:
            batch = self.pipe.process(frames, timeline=tl)
        except Exception as e:  # noqa: BLE001 - a set that cannot be processed is listed as failed
            return SetResult(row["set_id"], row["time_ns"], error=_one_line(e))
        images = batch.images
        images = images.detach().cpu().numpy().copy() if hasattr(images, "detach") else np.array(images, copy=True)
        valid = np.array(batch.valid, dtype=bool, copy=True)
        metas = self._settle(row, batch, valid)
        tl.finish()
        return SetResult(row["set_id"], row["time_ns"], images, valid, metas, tl)

    def _settle(self, row: dict, batch, valid: np.ndarray) -> list:
        """The runner's annotations of metas (``Runner._settle`` with on_late mask or drop)."""
        reasons = dict(batch.drops)
        out = []
        for i, cam in enumerate(self.cameras):
            k = row["cameras"].index(cam)
            m = dict(batch.metas[i])
            m["set_time_ns"] = row["time_ns"]
            m["stale"] = False
            if row["sources"][k] is not None:
                m["sync_skew_ns"] = row["capture_epoch_ns"][k] - row["time_ns"]
                if not valid[i]:
                    m["drop_reason"] = reasons.get(cam, "dropped")
            else:
                m["sync_skew_ns"] = None
                m["drop_reason"] = row["reasons"][k] or reasons.get(cam, "missing")
            out.append(m)
        return out

    def _timeline(self, row: dict) -> Timeline:
        return Timeline(index=int(row["index"]), counters_only=self._counters)

    def _read_image(self, tl: Timeline, cam: str, path: str, seq: int, capture_epoch_ns: int) -> Frame:
        t0 = now_ns()
        with open(path, "rb") as f:
            data = f.read()
        t1 = now_ns()
        tl.set_frame(cam, arrival_ns=t1)
        tl.record("read", t0, t1, "io", camera=cam)
        return Frame(cam, seq, capture_epoch_ns, data, PixelFormat.ENCODED)

    def image_set(self, row: dict) -> SetResult:
        """Process one image-sequence row (independent of every other row)."""
        tl = self._timeline(row)
        frames = {}
        for cam, path, seq, cap in zip(row["cameras"], row["sources"], row["seqs"], row["capture_epoch_ns"]):
            if path is None:
                continue
            try:
                frames[cam] = self._read_image(tl, cam, path, seq, cap)
            except OSError as e:
                return SetResult(row["set_id"], row["time_ns"], error=f"cannot read {path}: {e.strerror or e}")
        return self._finish(row, frames, tl)

    def image_sets(self, rows: Iterable[dict]) -> Iterator[SetResult]:
        for row in rows:
            yield self.image_set(row)

    # -- one video drive ----------------------------------------------------------------------------
    def video_drive(self, rows: Sequence[dict]) -> Iterator[SetResult]:
        """Process one drive's rows in index order; each video camera's recording is demuxed once, in order.

        A frame the index names but the recording no longer has (it changed since indexing) fails
        that set and every later set of the drive (their decoder state would be wrong).
        """
        from ..deploy.sources import open_source
        from ..deploy.sources.video import VideoFile
        from ..video import as_packet, merge_packets
        from ._seek import SeekingVideoFile

        rows = sorted(rows, key=lambda r: r["index"])
        segment = bool(rows) and int(rows[0]["index"]) > 0
        keys: dict[str, Optional[int]] = {}
        leads: dict[str, Optional[int]] = {}
        self.segment_start = {}
        if segment:
            first = rows[0]
            keys = dict(zip(first["cameras"], first.get("key_ns") or [None] * len(first["cameras"])))
            leads = dict(zip(first["cameras"], first.get("lead") or [None] * len(first["cameras"])))
        files: dict[str, str] = {}
        for r in rows:
            for cam, src in zip(r["cameras"], r["sources"]):
                if src is not None and self._is_video(cam):
                    files.setdefault(cam, src)
        sources, streams = {}, {}
        broken: Optional[str] = None
        if segment and not rows[0].get("cut"):
            broken = (f"set {rows[0]['set_id']} cannot start a segment (a camera has no keyframe at or before its "
                      "frame): plan the drive's shards with plan_shards")
            files = {}
        try:
            for cam, path in files.items():
                if segment and keys.get(cam) is None:
                    broken = f"camera {cam}: the index names no keyframe for segment {rows[0]['set_id']}"
                    break
                cfg = replace(self.dep.camera(cam).source, uri=path)

                def plain(cam=cam, cfg=cfg):  # the recording from its start
                    src = open_source(self.dep.rig[cam], cfg)
                    src.open()
                    return src

                try:
                    if segment and type(open_source(self.dep.rig[cam], cfg)) is VideoFile:
                        src = SeekingVideoFile(self.dep.rig[cam], cfg, keys[cam])  # demux from the keyframe
                        src.open()
                    else:
                        src = plain()
                except Exception as e:  # noqa: BLE001 - the drive's sets fail with the reason
                    broken = f"camera {cam}: {path} did not open: {_one_line(e)}"
                    break
                sources[cam] = src
                streams[cam] = _Stream(src, self._codec.get(cam), keys.get(cam) if segment else None, plain)
                if segment:
                    self.segment_start[cam] = {"keyframe_ns": keys[cam], "decode_only": leads.get(cam),
                                               "demuxed_only": 0, "seeked": streams[cam].seeked}
            for row in rows:
                if broken is not None:
                    yield SetResult(row["set_id"], row["time_ns"], error=broken)
                    continue
                tl = self._timeline(row)
                frames = {}
                try:
                    for cam, path, seq, cap in zip(row["cameras"], row["sources"], row["seqs"], row["capture_epoch_ns"]):
                        if path is None:
                            continue
                        if cam not in streams:
                            frames[cam] = self._read_image(tl, cam, path, seq, cap)
                            continue
                        held, item = streams[cam].take(seq, cap)
                        if cam in self.segment_start:
                            self.segment_start[cam].update(demuxed_only=streams[cam].demuxed_only,
                                                           seeked=streams[cam].seeked)
                        if streams[cam].missed:
                            raise _Changed(f"camera {cam}: {path} changed since indexing (no keyframe at capture "
                                           f"time {keys[cam]})")
                        if item is None or item.frame.capture_epoch_ns != cap:
                            got = "the recording ended" if item is None else f"capture time {item.frame.capture_epoch_ns}"
                            raise _Changed(f"camera {cam}: {path} changed since indexing (frame {seq}: "
                                           f"expected capture time {cap}, {got})")
                        t = now_ns()
                        tl.set_frame(cam, arrival_ns=t)
                        if item.read_span_ns is not None:
                            tl.record("read", item.read_span_ns[0], item.read_span_ns[1], "io", camera=cam)
                        data = item.frame.data
                        if cam in self._codec:
                            data = merge_packets([as_packet(h.frame.data, self._codec[cam]) for h in held],
                                                 as_packet(data, self._codec[cam]))
                        frames[cam] = Frame(cam, seq, item.frame.capture_epoch_ns, data, item.frame.pixel_format)
                except _Changed as e:
                    broken = str(e)
                    yield SetResult(row["set_id"], row["time_ns"], error=broken)
                    continue
                except OSError as e:
                    yield SetResult(row["set_id"], row["time_ns"], error=f"cannot read: {e.strerror or e}")
                    continue
                except Exception as e:  # noqa: BLE001 - a demux failure ends the drive
                    broken = f"demux failed: {_one_line(e)}"
                    yield SetResult(row["set_id"], row["time_ns"], error=broken)
                    continue
                yield self._finish(row, frames, tl)
        finally:
            for src in list(sources.values()) + [st.src for st in streams.values()]:
                try:
                    src.close()  # safe twice
                except Exception:  # noqa: BLE001 - closing must not hide the results
                    pass

    def _is_video(self, cam: str) -> bool:
        return self.dep.camera(cam).source.type == "video"


class _Changed(Exception):
    pass


#: parameter-set NAL unit types (H.264 SPS, PPS; H.265 VPS, SPS, PPS)
_PARAM_SETS: dict[Optional[str], frozenset[int]] = {"h264": frozenset((7, 8)), "h265": frozenset((32, 33, 34))}


def _nal_units(au: bytes) -> list[bytes]:
    """The NAL units of an Annex B access unit, without start codes (nor trailing zero bytes)."""
    out = []
    i = au.find(b"\x00\x00\x01")
    while i >= 0:
        j = au.find(b"\x00\x00\x01", i + 3)
        nal = au[i + 3: j if j >= 0 else len(au)].rstrip(b"\x00")
        if nal:
            out.append(nal)
        i = j
    return out


def _nal_type(nal: bytes, codec: Optional[str]) -> int:
    return nal[0] & 0x1F if codec == "h264" else (nal[0] >> 1) & 0x3F


class _Stream:
    """A camera's source read front to back; :meth:`take` returns the frames skipped before its frame.

    ``key_ns`` (a segment): the source was opened at (or before) the keyframe presented at that
    capture time (:class:`~._seek.SeekingVideoFile`), or at the recording's start. The access units
    before that keyframe are discarded as they are read (``demuxed_only`` counts them), and so are
    the frames whose units all precede it; the frame whose packet holds the keyframe's unit carries
    a new stream from there (:data:`dvpipe.video.RESET`, then the keyframe's unit): the camera's
    decoder restarts on it. Frames are then matched by capture time (a seek renumbers ``seq``).
    ``missed``: the recording has no such keyframe. ``plain`` opens the recording afresh from its
    start: when a seek landed after the keyframe, and for the parameter sets of an open-GOP keyframe.
    """

    def __init__(self, src, codec: Optional[str] = None, key_ns: Optional[int] = None, plain=None):
        self.src = src
        self.done = False
        self.codec = codec
        self.key_ns = key_ns
        self.by_capture = key_ns is not None
        self.plain = plain
        self.seeked = bool(getattr(src, "seeked", False))
        self.demuxed_only = 0
        self.missed = False
        self._params: dict[bytes, int] = {}  # parameter-set NAL units seen before the keyframe, in order

    def _restart_plain(self) -> None:
        self.src.close()
        self.src = self.plain()
        self.seeked = False
        self.demuxed_only = 0
        self._params.clear()

    def _read(self):
        from ..video import RESET, AccessUnit, VideoPacket, as_packet

        while True:
            it = self.src.read()
            if it is None or self.key_ns is None:
                if it is None and self.key_ns is not None:
                    if self.seeked and self.plain is not None:
                        self._restart_plain()
                        continue
                    self.missed = True
                return it
            p = as_packet(it.frame.data, self.codec or "h264")
            off = it.frame.capture_epoch_ns - p.want if p.by == "pts" and p.want is not None else None
            for i, u in enumerate(p.units):
                if not isinstance(u, AccessUnit):
                    continue
                cap = off + u.pts_ns if off is not None and u.pts_ns is not None else None
                if u.keyframe and cap == self.key_ns:
                    self.key_ns = None
                    packet = VideoPacket([RESET, self._with_parameter_sets(u)] + p.units[i + 1:], p.want, p.by,
                                         p.end, p.lookahead, p.keyframe)
                    it.frame = Frame(it.frame.camera, it.frame.seq, it.frame.capture_epoch_ns, packet, it.frame.pixel_format)
                    return it
                if u.keyframe and cap is not None and cap > self.key_ns:  # keyframes come in time order
                    if self.seeked and self.plain is not None:  # the demuxer landed after it
                        self._restart_plain()
                        break
                    self.missed = True
                    return None
                self.demuxed_only += 1
                self._remember_parameter_sets(u)

    def take(self, seq: int, capture_epoch_ns: Optional[int] = None):
        """``(held, item)``: the frames read before the one with ``seq`` (a segment: ``capture_epoch_ns``),
        and that frame's item, or None when the recording has no such frame."""
        held: list[Any] = []
        while not self.done:
            it = self._read()
            if it is None:
                self.done = True
                break
            got, want = (it.frame.capture_epoch_ns, capture_epoch_ns) if self.by_capture else (it.frame.seq, seq)
            if got == want:
                return held, it
            if got > want:
                break
            held.append(it)
        return held, None

    def _remember_parameter_sets(self, unit) -> None:
        for nal in _nal_units(unit.data):
            t = _nal_type(nal, self.codec)
            if t in _PARAM_SETS.get(self.codec, ()):
                self._params.pop(nal, None)
                self._params[nal] = t  # the latest last; at most a few distinct ones in a recording
                while len(self._params) > 32:
                    del self._params[next(iter(self._params))]

    def _with_parameter_sets(self, unit):
        """The keyframe's unit, with the parameter sets read before it in front when it has none.

        An IDR carries them (in band, or put there by FFmpeg's ``*_mp4toannexb`` filter), but an
        open-GOP keyframe of an MP4/MKV recording (an H.264 recovery-point I picture) does not:
        they came with the stream's first IDR (read from the recording's first frame when a seek
        skipped it). The same parameter sets decode the same pictures. A recording whose
        parameter sets change mid-stream at a non-IDR keyframe is not handled after a seek.
        """
        from ..video import AccessUnit

        types = {_nal_type(n, self.codec) for n in _nal_units(unit.data)}
        if not types.isdisjoint(_PARAM_SETS.get(self.codec, ())):
            return unit
        if not self._params and self.plain is not None:  # a seek skipped them: the recording's first frame's
            src = self.plain()
            try:
                first = src.read()
                for u in getattr(first.frame.data, "units", ()) if first is not None else ():
                    if hasattr(u, "data"):
                        self._remember_parameter_sets(u)
            finally:
                src.close()
        if not self._params:
            return unit
        head = b"".join(b"\x00\x00\x00\x01" + n for n in self._params)
        return AccessUnit(head + unit.data, unit.pts_ns, unit.keyframe, unit.show)
