"""Processing index rows with a deployment's pipeline: what one fleet worker does, without Ray.

:class:`FrameSetProcessor` builds the deployment's pipeline once (:func:`dvpipe.deploy.runner.build_pipeline`,
backends resolved on the worker: cpu, torch:cuda, dvpp, torch:npu) and turns index rows into
:class:`SetResult` objects. The frames it gives the pipeline are the ones ``dvpipe run`` gives it
for the same frame set: same bytes, ``seq`` and ``capture_ns``; for a video camera the access units
of the frames the synchroniser dropped since the camera's previous set ride along with the next
frame (the runner's rule), so one decoder per camera sees the whole stream in decode order. The
metas get the runner's annotations (``set_time_ns``, ``stale``, ``sync_skew_ns``, ``drop_reason``).

Image-sequence rows are independent. A video drive's rows must be processed in order, all by one
processor (:meth:`FrameSetProcessor.video_drive`): its recordings are demuxed once, front to back.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, Optional, Sequence

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
                m["sync_skew_ns"] = row["capture_ns"][k] - row["time_ns"]
                if not valid[i]:
                    m["drop_reason"] = reasons.get(cam, "dropped")
            else:
                m["sync_skew_ns"] = None
                m["drop_reason"] = row["reasons"][k] or reasons.get(cam, "missing")
            out.append(m)
        return out

    def _timeline(self, row: dict) -> Timeline:
        return Timeline(index=int(row["index"]), counters_only=self._counters)

    def _read_image(self, tl: Timeline, cam: str, path: str, seq: int, capture_ns: int) -> Frame:
        t0 = now_ns()
        with open(path, "rb") as f:
            data = f.read()
        t1 = now_ns()
        tl.set_frame(cam, arrival_ns=t1)
        tl.record("read", t0, t1, "io", camera=cam)
        return Frame(cam, seq, capture_ns, data, PixelFormat.ENCODED)

    def image_set(self, row: dict) -> SetResult:
        """Process one image-sequence row (independent of every other row)."""
        tl = self._timeline(row)
        frames = {}
        for cam, path, seq, cap in zip(row["cameras"], row["sources"], row["seqs"], row["capture_ns"]):
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
        from ..video import as_packet, merge_packets

        rows = sorted(rows, key=lambda r: r["index"])
        files: dict[str, str] = {}
        for r in rows:
            for cam, src in zip(r["cameras"], r["sources"]):
                if src is not None and self._is_video(cam):
                    files.setdefault(cam, src)
        sources, streams = {}, {}
        broken: Optional[str] = None
        try:
            for cam, path in files.items():
                cc = self.dep.camera(cam)
                src = open_source(self.dep.rig[cam], replace(cc.source, uri=path))
                try:
                    src.open()
                except Exception as e:  # noqa: BLE001 - the drive's sets fail with the reason
                    broken = f"camera {cam}: {path} did not open: {_one_line(e)}"
                    break
                sources[cam] = src
                streams[cam] = _Stream(src)
            for row in rows:
                if broken is not None:
                    yield SetResult(row["set_id"], row["time_ns"], error=broken)
                    continue
                tl = self._timeline(row)
                frames = {}
                try:
                    for cam, path, seq, cap in zip(row["cameras"], row["sources"], row["seqs"], row["capture_ns"]):
                        if path is None:
                            continue
                        if cam not in streams:
                            frames[cam] = self._read_image(tl, cam, path, seq, cap)
                            continue
                        held, item = streams[cam].take(seq)
                        if item is None or item.frame.capture_ns != cap:
                            got = "the recording ended" if item is None else f"capture time {item.frame.capture_ns}"
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
                        frames[cam] = Frame(cam, item.frame.seq, item.frame.capture_ns, data, item.frame.pixel_format)
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
            for src in sources.values():
                try:
                    src.close()
                except Exception:  # noqa: BLE001 - closing must not hide the results
                    pass

    def _is_video(self, cam: str) -> bool:
        return self.dep.camera(cam).source.type == "video"


class _Changed(Exception):
    pass


class _Stream:
    """A camera's source read front to back; :meth:`take` returns the frames skipped before ``seq``."""

    def __init__(self, src):
        self.src = src
        self.done = False

    def take(self, seq: int):
        held = []
        while not self.done:
            it = self.src.read()
            if it is None:
                self.done = True
                break
            if it.frame.seq == seq:
                return held, it
            if it.frame.seq > seq:
                break
            held.append(it)
        return held, None
