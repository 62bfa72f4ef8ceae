"""The streaming runner: sources -> synchronisation -> pipeline -> model -> outputs.

Threads::

    reader thread per camera:  source.read() -> arrival stamp -> Synchroniser.push (bounded buffer)
    runner (calling) thread:   Synchroniser.poll -> Pipeline.process (the pipeline decodes the
                               cameras of a set in parallel threads) -> model -> outputs -> stats

* **Bounded queues.** Each camera buffers ``run.queue_size`` frames. Live sources (RTSP, V4L2,
  real-time synthetic, paced replay) use the latest-frame policy: a full buffer drops its oldest
  frame, so a slow pipeline never builds a backlog. Recordings processed as fast as possible block
  their reader instead (back-pressure), losing nothing.
* **Faults never take down the other cameras.** A source that does not open, stalls, disconnects or
  ends is handled per camera (reconnect with back-off for live sources; the camera is masked or its
  last image reused meanwhile); a corrupt or resized frame is a counted drop of that camera only.
* **Stalled versus back-pressure.** A camera whose source delivered nothing for
  ``run.stall_timeout_ms`` is *stalled* (the source's fault); a reader blocked on a full buffer is
  *back-pressure* (the pipeline's fault). Both are reported per camera.
* **Accounting.** Every frame a source delivered is emitted or dropped with a reason
  (:mod:`dvpipe.deploy.summary`); the runner asserts the invariant at the end of every run.
* **Timelines.** Each frame set gets a :class:`dvpipe.latency.Timeline`: per camera the capture and
  arrival stamps, the source read (``read``, io), the wait in the buffer (``queue_wait``), each plan
  step's host span and the batch-assembly wait (recorded by the pipeline on ``batch.timeline``),
  the model call (``model``) and writing outputs (``output``); they feed
  :class:`dvpipe.latency.LatencyStats` and the trace.
* **Clean shutdown** at the end of the input, on ``--frames``/``--duration`` limits and on Ctrl-C:
  readers are stopped and joined, what is still queued is dropped as ``shutdown``, outputs are
  written.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, TextIO

import numpy as np

from ..errors import ConfigError, DvpipeError
from ..latency import LatencyStats, Timeline, TraceWriter, now_ns, wall_ns
from ..latency.trace import DEFAULT_MAX_EVENTS
from ..target import Target
from ..types import Frame, Rig
from .config import VIDEO_ENCODINGS, Deployment, import_entry
from .sources import ReplayClock, Source, SourceError, StreamLost, open_source
from .sources.base import StreamStalled
from .summary import Accounting, classify_drop, format_summary, plan_routes, transfers_summary
from .sync import Dropped, FrameSet, Synchroniser
from ..video import GAP, VideoPacket, as_packet, merge_packets

__all__ = ["Runner", "RunResult", "RunError", "build_pipeline", "resolve_backends", "AUTO_BACKENDS", "load_model"]

#: preference order that ``backends: auto`` picks from (only the available ones are kept; cpu last).
AUTO_BACKENDS = ("dvpp", "torch:npu", "torch:cuda", "cpu")
_MAX_VIDEO_BACKLOG = 600
_MAX_CONSECUTIVE_MODEL_ERRORS = 10


class RunError(DvpipeError, RuntimeError):
    """The run could not go on (the model kept failing, ...)."""


# -------------------------------------------------------------------------------- backends
def resolve_backends(names: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """Expand ``auto`` into the available backends of :data:`AUTO_BACKENDS`.

    Returns ``(backends, notes)``; notes say why each skipped backend was skipped.
    """
    from ..backends import availability, resolve

    out: list[str] = []
    notes: list[str] = []
    for name in names:
        if name != "auto":
            if name not in out:
                out.append(name)
            continue
        for cand in AUTO_BACKENDS:
            if cand in out:
                continue
            v = availability(resolve(cand))
            if v.ok:
                out.append(cand)
            else:
                notes.append(f"{cand}: {v.reason}")
    return tuple(out) or ("cpu",), notes


# -------------------------------------------------------------------------------- pipelines
class _GroupPlan:
    """The plans of a pipeline split by per-camera backend preferences."""

    def __init__(self, groups: list[tuple[tuple[str, ...], Any]]):
        self.groups = groups

    @property
    def cameras(self) -> list:
        return [cp for _b, pipe in self.groups for cp in pipe.plan.cameras]

    def to_dict(self) -> dict:
        return {"groups": [{"backends": list(b), "plan": pipe.plan.to_dict()} for b, pipe in self.groups]}

    def __str__(self) -> str:
        parts = []
        for b, pipe in self.groups:
            names = ", ".join(pipe.rig.names)
            parts.append(f"[{names}] backends {' > '.join(b)}\n{pipe.plan}")
        return "\n".join(parts)


class _GroupedPipeline:
    """Cameras with different backend preferences: one Pipeline per preference, one batch in rig order.

    Each group writes its own batch; the images are copied into a combined host buffer (one copy
    of the batch; a single-preference deployment avoids it).
    """

    def __init__(self, rig: Rig, groups: list[tuple[tuple[str, ...], Any]], output_buffers: int = 2):
        from ..types import Batch

        self._Batch = Batch
        self.rig = rig
        self.groups = groups
        self.plan = _GroupPlan(groups)
        places = {pipe.plan.out_placement for _b, pipe in groups}
        if places != {"host"}:
            raise ConfigError("per-camera backends need every camera's output on the host for now "
                              f"(got {', '.join(sorted(places))}); give the cameras one backend preference")
        dtypes = {pipe.plan.out_dtype for _b, pipe in groups}
        shapes = {pipe.plan.out_shape[1:] for _b, pipe in groups}
        if len(dtypes) > 1 or len(shapes) > 1:
            raise ConfigError("per-camera backend groups produce different output shapes or dtypes")
        shape, dtype = (len(rig),) + shapes.pop(), dtypes.pop()
        self._buffers = [np.zeros(shape, dtype=dtype) for _ in range(output_buffers)]
        self._next = 0
        self._slots = [[rig.index(name) for name in pipe.rig.names] for _b, pipe in groups]  # group row -> batch row
        self._order = {c: k for k, c in enumerate(rig.names)}

    def process(self, frames, timeline: Optional[Timeline] = None):
        images = self._buffers[self._next]
        self._next = (self._next + 1) % len(self._buffers)
        n = len(self.rig)
        metas: list = [None] * n
        valid = np.zeros(n, dtype=bool)
        drops, fallbacks = [], []
        tl = timeline if timeline is not None else Timeline()
        for (_b, pipe), slots in zip(self.groups, self._slots):
            sub = pipe.process({k: v for k, v in frames.items() if k in pipe.rig.names}, timeline=tl)
            for j, i in enumerate(slots):
                images[i] = sub.images[j]
                metas[i] = sub.metas[j]
                valid[i] = sub.valid[j]
            drops += sub.drops
            fallbacks += sub.fallbacks
        drops.sort(key=lambda d: self._order[d[0]])
        return self._Batch(images, metas, valid, drops, self.rig.names, fallbacks, tl)

    def close(self) -> None:
        for _b, pipe in self.groups:
            pipe.close()


def build_pipeline(dep: Deployment) -> tuple[Any, list[str]]:
    """The deployment's pipeline (planned) and notes on how ``auto`` backends were resolved."""
    from ..pipeline import Pipeline
    from ..profiles import profile_stages

    p = dep.pipeline
    profile = p.profile
    if p.mmdet3d_config is not None:
        from ..mmdet3d import check_rig, profile_from_config

        mapped = profile_from_config(p.mmdet3d_config, skip=p.skip)
        check_rig(mapped, dep.rig.cameras)
        profile = mapped.profile
    if profile is not None:
        stages = profile_stages(profile, p.fidelity, dep.rig.cameras[0])
    else:
        stages = list(p.stages or ())
    notes: list[str] = []
    groups: dict[tuple[str, ...], list[str]] = {}
    for cc in dep.cameras:
        b, n = resolve_backends(cc.backends or p.backends)
        notes += [x for x in n if x not in notes]
        groups.setdefault(b, []).append(cc.name)
    target = dep.target if dep.target is not None else Target.detect()
    kwargs = dict(profile=profile, fidelity=p.fidelity, threads=p.threads, fallback=p.fallback, target=target,
                  timing="counters" if dep.latency.counters_only else "spans",
                  on_corrupt=dep.decode.on_corrupt, max_pixels=dep.decode.max_pixels)
    if len(groups) == 1:
        (backends,) = groups
        return Pipeline(dep.rig, stages, backends, **kwargs), notes
    built = []
    for backends, names in groups.items():
        sub = Rig(tuple(c for c in dep.rig.cameras if c.name in names), name=f"{dep.rig.name}:{'+'.join(backends)}")
        built.append((backends, Pipeline(sub, stages, backends, **kwargs)))
    return _GroupedPipeline(dep.rig, built), notes




def load_model(dep: Deployment) -> Optional[Callable]:
    """Import the deployment's model hook (``module:callable``; built with ``init`` when given)."""
    m = dep.model
    if m is None:
        return None
    if m.om is not None:  # {type: om}: an offline model on the pipeline's device (dvpipe.models.OmModel)
        from ..models import from_spec

        return from_spec(m.om)
    if m.path and m.path not in sys.path:
        sys.path.insert(0, m.path)
    try:
        obj = import_entry(m.entry)
    except Exception as e:  # noqa: BLE001 - reported as a config error naming the entry
        raise ConfigError(f"cannot import {m.entry}: {type(e).__name__}: {e}", "model.entry") from None
    if m.init is not None:
        obj = obj(**dict(m.init))
    if not callable(obj):
        raise ConfigError(f"{m.entry} is not callable", "model.entry")
    return obj


# -------------------------------------------------------------------------------- results
@dataclass
class RunResult:
    """What a run produced: accounting, latency statistics, output paths."""

    deployment: Deployment
    accounting: Accounting
    stats: LatencyStats
    plan: Any
    backend_notes: list[str]
    sets: int
    elapsed_s: float
    interrupted: bool = False
    stopped_by: str = "end of input"
    outputs: dict[str, str] = field(default_factory=dict)
    model_error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return not self.accounting.check()

    def summary(self) -> str:
        return format_summary(self.accounting)


@dataclass
class RunBatch:
    """One processed frame set, as yielded by :meth:`Runner.batches`."""

    frame_set: FrameSet
    batch: Any
    output: Any = None


# -------------------------------------------------------------------------------- the runner
class Runner:
    """Runs a deployment. Use :meth:`run` (blocking, returns a :class:`RunResult`) or iterate
    :meth:`batches` (``with Runner(dep) as r: for rb in r.batches(): ...``).

    Args:
        deployment: a loaded :class:`~dvpipe.deploy.config.Deployment`.
        model: overrides the deployment's model hook (a callable taking the batch).
        progress: called after every frame set with the runner (for progress displays).
        trace_path / json_path / plots_dir: override the deployment's outputs.
        trace_max_events: bound of the trace (events kept: the most recent frame sets'); default
            ``outputs.trace_max_events`` or :data:`dvpipe.latency.trace.DEFAULT_MAX_EVENTS`.
        write_outputs: False writes no files at all (tests, soak runs).
    """

    def __init__(self, deployment: Deployment, *, model: Optional[Callable] = None,
                 progress: Optional[Callable[["Runner"], None]] = None, trace_path: Optional[str] = None,
                 json_path: Optional[str] = None, plots_dir: Optional[str] = None, write_outputs: bool = True,
                 keep_timelines: int = 16, trace_max_events: Optional[int] = None):
        self.dep = dep = deployment
        self.cameras = [c.name for c in dep.cameras]
        self.pipe, self.backend_notes = build_pipeline(dep)
        if getattr(self.pipe.plan, "device_batch", None) and dep.sync.on_late == "reuse":
            getattr(self.pipe, "close", lambda: None)()
            raise ConfigError("sync.on_late: reuse keeps host copies of each camera's image, but on the AIPP route "
                              "the batch is NV12 in device memory; use on_late: mask (or drop aipp from the backends)")
        try:
            self.model = model if model is not None else load_model(dep)
            # a model the runner built from the deployment (an OmModel holds device memory) is closed with it
            self._owned_model = (self.model if model is None and dep.model is not None and dep.model.om is not None
                                 else None)
        except BaseException:
            getattr(self.pipe, "close", lambda: None)()
            raise
        self.progress = progress
        self.write_outputs = write_outputs
        self.trace_path = trace_path if trace_path is not None else dep.outputs.trace
        self.json_path = json_path
        self.plots_dir = plots_dir if plots_dir is not None else dep.outputs.plots
        self.acc = Accounting(self.cameras)
        self.prometheus = None
        if dep.outputs.prometheus_port is not None:
            from ..latency.prometheus import PrometheusExporter

            self.prometheus = PrometheusExporter(port=dep.outputs.prometheus_port, addr=dep.outputs.prometheus_addr)
            self.prometheus.watch(self._prometheus_snapshot)
        self.stats = LatencyStats(budgets=dep.latency.budgets_ns(), window=dep.latency.window,
                                  keep_timelines=keep_timelines, counters_only=dep.latency.counters_only,
                                  listeners=[self.prometheus] if self.prometheus is not None else (),
                                  warmup=dep.latency.warmup_for(dep.run.frames), camera_order=self.cameras)
        # a ring of the most recent frame sets' events: memory and file stay bounded however long the run
        max_events = trace_max_events or getattr(dep.outputs, "trace_max_events", None) or DEFAULT_MAX_EVENTS
        self.trace = TraceWriter(self.trace_path, metadata={"deployment": dep.name}, max_events=max_events) if (
            self.trace_path and write_outputs) else None
        live = dep.live
        latest = {"auto": live, "true": True, "false": False}[dep.run.latest_only]
        self.sync = Synchroniser(self.cameras, dep.sync, live=live, capacity=dep.run.queue_size,
                                 latest_only=latest, wait_ms=dep.run.stall_timeout_ms)
        self.stop_event = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sources: dict[str, Source] = {}
        self._video = {c.name for c in dep.rig.cameras if c.encoding in VIDEO_ENCODINGS}
        self._codec = {c.name: c.encoding for c in dep.rig.cameras if c.encoding in VIDEO_ENCODINGS}
        # per video camera: (seq, discontinuity before it, packet) of frames dropped before decoding
        self._backlog: dict[str, list[tuple[int, bool, VideoPacket]]] = {c: [] for c in self._video}
        self._discontinuity: dict[str, bool] = {c: False for c in self._video}
        self._reuse: dict[str, tuple[Any, int]] = {}  # camera -> (copy of its last image, capture_ns)
        self._index = {c: dep.rig.index(c) for c in self.cameras}
        self._model_fail_streak = 0
        self._unprocessed: list[FrameSet] = []
        self.model_error: Optional[str] = None
        self.sets_done = 0
        self.sets_prepared = 0  # ahead of sets_done by the set the model is working on
        self.dumps_written = 0
        self.outputs: dict[str, str] = {}
        self.started_ns: Optional[int] = None
        self.stopped_by = "end of input"
        self.interrupted = False
        self._stop_request: Optional[str] = None
        self._finished = False
        # the model runs on its own thread so that frame set k+1 is preprocessed while the model works on
        # set k (the pipeline's ring of two output buffers makes that safe with one set in flight)
        self._model_pool = (ThreadPoolExecutor(1, thread_name_prefix="dvpipe-model")
                            if self.model is not None and dep.run.overlap_model else None)
        self._pending: deque = deque()

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Open the sources (each in its reader thread)."""
        if self.started_ns is not None:
            return
        self.started_ns = now_ns()
        clock = ReplayClock(self.dep.run.speed) if self.dep.run.realtime else None
        start_wall = wall_ns()
        for cc in self.dep.cameras:
            src = open_source(self.dep.rig[cc.name], cc.source, loop=self.dep.run.loop, clock=clock,
                              start_ns=start_wall, limit=self.dep.run.frames)
            src.set_stop(self.stop_event)
            self._sources[cc.name] = src
            t = threading.Thread(target=self._reader, args=(cc.name, src), name=f"dvpipe-src-{cc.name}", daemon=True)
            self._threads.append(t)
        for t in self._threads:
            t.start()

    def close(self) -> None:
        """Stop the readers, account for what is still queued, release the pipeline. Idempotent."""
        if self._finished:
            return
        self._finished = True
        self.stop_event.set()
        self.sync.close()  # from now on a frame a reader still gets never enters
        if self._model_pool is not None:  # sets handed to the model are emitted: let them finish
            for fut in self._pending:
                try:
                    fut.result()
                except Exception:  # noqa: BLE001 - already counted as a model error; the run is stopping
                    pass
            self._pending.clear()
            self._model_pool.shutdown(wait=True)
        for t in self._threads:
            t.join(timeout=5.0)
        for fs in self._unprocessed:
            for it in fs.members.values():
                self._account_drop(Dropped(it, "shutdown", "its frame set was formed as the run stopped"))
        self._unprocessed = []
        for d in self.sync.flush():
            self._account_drop(d)
        for d in self.sync.take_drops():
            self._account_drop(d)
        for cam, h in self.acc.health.items():
            h.blocked_ns = self.sync.blocked_ns.get(cam, 0)
        for src in self._sources.values():
            try:
                src.close()
            except Exception:  # noqa: BLE001 - a source that fails to close must not hide the results
                pass
        if self._owned_model is not None:  # its datasets point into the pipeline's batch buffers: first
            self._owned_model.close()
        close = getattr(self.pipe, "close", None)
        if close:
            close()

    # -- readers -----------------------------------------------------------------------------------
    def _open(self, cam: str, src: Source, again: bool) -> Optional[str]:
        """Open or reopen with the source's back-off; None on success, else the final reason."""
        h = self.acc.health[cam]
        delays = src.backoff.delays_s() if src.backoff is not None else iter(())
        attempt = 0
        while True:
            attempt += 1
            try:
                src.reopen() if again else src.open()
                return None
            except SourceError as e:
                reason = e.reason
            except Exception as e:  # noqa: BLE001 - any failure of a source is that camera's failure
                reason = f"{type(e).__name__}: {e}"
            if self.stop_event.is_set():
                return "stopped"
            delay = next(delays, None)
            if delay is None:
                return reason if attempt == 1 else f"{reason} (after {attempt} attempts)"
            h.state = "reconnecting" if again else "connecting"
            h.detail = f"attempt {attempt}: {reason}"
            if self.stop_event.wait(delay):
                return "stopped"
            again = True

    def _fail(self, cam: str, reason: str, state: str = "failed") -> None:
        h = self.acc.health[cam]
        h.state, h.detail = state, reason
        h.note(f"{state}: {reason}")
        self.sync.end(cam, f"{state}: {reason}" if state == "failed" else "ended: end of input")

    def _reader(self, cam: str, src: Source) -> None:
        h = self.acc.health[cam]
        try:
            self._read_loop(cam, src, h)
        finally:
            h.finish(now_ns())  # an outage still open when the reader stops lasts until then

    def _read_loop(self, cam: str, src: Source, h) -> None:
        """Open, read and push until the input ends, the run stops or the source fails.

        A read timeout on an open connection (:class:`StreamStalled`) is a stall: the reader reads on,
        and reconnects only when the camera has been without frames for ``src.stall_reconnect_s``.
        """
        if self.acc.started_ns is None:
            self.acc.started_ns = self.started_ns  # the origin of outage times in the summary
        err = self._open(cam, src, again=False)
        if err is not None:
            if err != "stopped":
                self._fail(cam, f"source did not open: {err}")
            return
        h.state, h.detail = "streaming", ""
        h.streaming_since_ns = now_ns()
        h.nominal_fps = src.nominal_fps()
        last_seq: Optional[int] = None
        gap_next = False
        while not self.stop_event.is_set():
            try:
                item = src.read()
            except StreamStalled as e:
                without_ns = h.read_timed_out(now_ns(), e.reason)
                limit = src.stall_reconnect_s
                if src.backoff is None or limit is None or without_ns < limit * 1e9:
                    continue
                if not self._reconnect(cam, src, h, f"no frame for {without_ns / 1e9:.1f} s on an open connection "
                                                     f"(more than stall_reconnect_s {limit:g} s)"):
                    return
                gap_next = True
                continue
            except StreamLost as e:
                if src.backoff is None:
                    h.disconnected(now_ns(), e.reason)
                    self._fail(cam, f"stream lost: {e.reason}")
                    return
                if not self._reconnect(cam, src, h, e.reason):
                    return
                gap_next = True
                continue
            except SourceError as e:
                self._fail(cam, e.reason)
                return
            except Exception as e:  # noqa: BLE001 - a broken source must not take the others down
                self._fail(cam, f"{type(e).__name__}: {e}")
                return
            if item is None:
                if not self.stop_event.is_set():
                    self._fail(cam, "end of input", state="ended")
                return
            t = now_ns()
            item.arrival_ns = t
            seq = item.frame.seq
            item.discontinuity = item.discontinuity or gap_next or (last_seq is not None and seq != last_seq + 1)
            gap_next = False
            last_seq = seq
            h.arrived(t, item.media_ns)
            h.pushing_frame(True, t)
            try:
                pushed = self.sync.push(item, self.stop_event, on_enter=self.acc.enter)
            finally:
                h.pushing_frame(False, now_ns())
            if not pushed and self.sync.closed:
                return

    def _reconnect(self, cam: str, src: Source, h, reason: str) -> bool:
        """The connection is lost (``reason``): reconnect with the source's back-off. False: give up."""
        h.disconnected(now_ns(), reason)
        err = self._open(cam, src, again=True)
        if err is not None:
            if err != "stopped":
                self._fail(cam, f"stream lost and did not come back: {err}")
            return False
        h.reconnected(now_ns())
        h.nominal_fps = src.nominal_fps() or h.nominal_fps
        return True

    def _check_stalls(self, now: int) -> None:
        """Begin a stall for each streaming camera without a frame for ``run.stall_timeout_ms``."""
        limit = int(self.dep.run.stall_timeout_ms * 1e6)
        for h in self.acc.health.values():
            h.check_stall(now, limit)

    # -- accounting of drops (video cameras keep feeding their decoder) ------------------------------
    def _account_drop(self, d: Dropped) -> None:
        cam = d.item.frame.camera
        self.acc.drop(cam, d.category, d.detail)
        if cam in self._video:
            self._carry(cam, d.item)

    def _carry(self, cam: str, item) -> None:
        """A video frame dropped before decoding: keep its access units for the camera's next decode."""
        bl = self._backlog[cam]
        bl.append((item.frame.seq, bool(item.discontinuity), as_packet(item.frame.data, self._codec[cam])))
        if len(bl) > _MAX_VIDEO_BACKLOG:  # far behind: what is held is dropped; the decoder restarts at a keyframe
            bl.clear()
            self._discontinuity[cam] = True

    def _video_payload(self, cam: str, item):
        """The frame's packet, carrying the units of the camera's frames dropped before it (in stream
        order: a poll can drop a frame later than a set it forms, whose units must wait for a later frame)."""
        seq = item.frame.seq
        held = sorted((e for e in self._backlog[cam] if e[0] < seq), key=lambda e: e[0])
        self._backlog[cam] = [e for e in self._backlog[cam] if e[0] >= seq]
        disc, self._discontinuity[cam] = self._discontinuity[cam], False
        current = as_packet(item.frame.data, self._codec[cam])
        if not held and not disc and not item.discontinuity:
            return current
        units: list = [GAP] if disc else []
        for _seq, gap, packet in held:
            if gap:
                units.append(GAP)
            units.extend(packet.units)
        if item.discontinuity:
            units.append(GAP)
        return merge_packets([VideoPacket(units)], current)

    # -- the loop ----------------------------------------------------------------------------------
    def request_stop(self, reason: str, interrupted: bool = False) -> None:
        """Stop the run cleanly at the next frame set (Ctrl-C, SIGTERM): outputs are written and every
        frame is accounted for, as at a run limit. Safe to call from a signal handler or another thread.
        ``interrupted`` marks the result as interrupted by the user (``dvpipe run`` exits 130)."""
        self.interrupted = self.interrupted or interrupted
        self._stop_request = reason

    def _limits_reached(self, now: int) -> bool:
        if self._stop_request is not None:
            self.stopped_by = self._stop_request
            return True
        r = self.dep.run
        if r.frames is not None and self.sets_prepared >= r.frames:
            self.stopped_by = f"--frames {r.frames}"
            return True
        if r.duration_s is not None and now - self.started_ns >= r.duration_s * 1e9:
            self.stopped_by = f"--duration {r.duration_s:g} s"
            return True
        return False

    def batches(self) -> Iterator[RunBatch]:
        """Process frame sets as they become ready; stops at the end of input or a run limit."""
        self.start()
        while not self.stop_event.is_set():
            now = now_ns()
            if self._limits_reached(now):
                break
            sets = self.sync.poll(now)
            for d in self.sync.take_drops():  # recorded since the last poll, and by this one, in order
                self._account_drop(d)
            self._unprocessed = list(sets)  # formed but not processed when the run stops: see close()
            first = True
            while self._unprocessed:
                if not first and self._limits_reached(now_ns()):
                    break
                first = False
                yield from self._submit(self._unprocessed.pop(0))
            if self.stopped_by != "end of input":
                break
            self._check_stalls(now_ns())
            if not sets:
                if self.sync.done:
                    break
                deadline = self.sync.next_deadline_ns
                timeout = 0.05 if deadline is None else min(0.05, max(0.0, (deadline - now_ns()) / 1e9))
                if timeout > 0:
                    self.sync.wait(timeout)
        while self._pending:
            yield self._pending.popleft().result()

    def run(self) -> RunResult:
        """Run to the end (input, limits or Ctrl-C) and write the outputs."""
        try:
            for _ in self.batches():
                pass
        except KeyboardInterrupt:
            self.interrupted = True
            self.stopped_by = "Ctrl-C"
        finally:
            self.close()
        return self.finish()

    def finish(self) -> RunResult:
        """Close (if needed), write outputs, check the accounting, and return the result."""
        self.close()
        if self.prometheus is not None:
            self.prometheus.close()
        elapsed = (now_ns() - (self.started_ns or now_ns())) / 1e9
        if self.write_outputs:
            self._write_outputs()
        problems = self.acc.check()
        if problems:  # an internal bug if it happens: say so loudly rather than report wrong numbers
            raise RunError("frame accounting does not add up: " + "; ".join(problems))
        return RunResult(self.dep, self.acc, self.stats, self.pipe.plan, self.backend_notes, self.sets_done, elapsed,
                         self.interrupted, self.stopped_by, dict(self.outputs), self.model_error)

    # -- one frame set -------------------------------------------------------------------------------
    def _process(self, fs: FrameSet) -> tuple[FrameSet, Any, Timeline]:
        tl = Timeline(index=fs.index, counters_only=self.dep.latency.counters_only)
        formed = now_ns()
        frames: dict[str, Frame] = {}
        for cam, it in fs.members.items():
            f = it.frame
            if cam in self._video:  # the decoder gets the access units held back since the last decode
                f = Frame(cam, f.seq, f.capture_ns, self._video_payload(cam, it), f.pixel_format)
            frames[cam] = f
            tl.set_frame(cam, capture_ns=it.capture_mono_ns, arrival_ns=it.arrival_ns)
            if it.read_span_ns is not None:
                tl.record("read", it.read_span_ns[0], it.read_span_ns[1], "io", camera=cam)
            tl.record("queue_wait", it.arrival_ns, max(formed, it.arrival_ns), "wait", camera=cam)
        try:
            batch = self.pipe.process(frames, timeline=tl)  # the steps' spans go straight into the set's timeline
        except BaseException:  # Ctrl-C or fallback="error": the run stops, its frames are still accounted
            for it in fs.members.values():
                self._account_drop(Dropped(it, "shutdown", "the run stopped while its set was processed"))
            raise
        self._settle(fs, batch)
        self.sets_prepared += 1
        return fs, batch, tl

    def _submit(self, fs: FrameSet) -> Iterator[RunBatch]:
        """Preprocess ``fs``; complete it (model, outputs, statistics) here or on the model thread."""
        fs, batch, tl = self._process(fs)
        if self._model_pool is None:
            yield self._complete(fs, batch, tl, now_ns())
            return
        while self._pending:  # at most one set in the model's hands: its output buffer is still in use
            yield self._pending.popleft().result()
        self._pending.append(self._model_pool.submit(self._complete, fs, batch, tl, now_ns()))

    def _complete(self, fs: FrameSet, batch, tl: Timeline, ready_ns: int) -> RunBatch:
        started = now_ns()
        if started > ready_ns:
            tl.record("model_wait", ready_ns, started, "wait")  # the previous set still had the model
        output = None
        if self.model is not None:
            output = self._call_model(tl, batch)
        if self.write_outputs and self.dep.outputs.dumps_every and self.dumps_written < self.dep.outputs.dumps_max \
                and fs.index % self.dep.outputs.dumps_every == 0:
            t0 = now_ns()
            self._dump(fs, batch)
            tl.record("output", t0, now_ns(), "io")
        tl.finish()
        self.stats.add(tl)
        if self.trace is not None:
            self.trace.add(tl)
        self.sets_done += 1
        self.acc.sets_emitted += 1
        if self.progress is not None:
            self.progress(self)
        return RunBatch(fs, batch, output)

    def _settle(self, fs: FrameSet, batch) -> None:
        """Apply the late-camera policy to the batch, annotate metas, count emitted and dropped frames."""
        for fb in batch.fallbacks:
            self.acc.fallback(*fb)
        policy = self.dep.sync.on_late
        max_age = int(self.dep.sync.max_reuse_age_ms * 1e6)
        reasons = dict(batch.drops)
        new_drops = []
        for cam in self.cameras:
            i = self._index[cam]
            m = batch.metas[i]
            m["set_time_ns"] = fs.time_ns
            m["stale"] = False
            if cam in fs.members:
                it = fs.members[cam]
                m["sync_skew_ns"] = it.frame.capture_ns - fs.time_ns
                if batch.valid[i]:
                    self.acc.emit(cam)
                    if m.get("corrupt"):
                        self.acc.flag(cam, m.get("corrupt_reason", "corrupt"))
                    if policy == "reuse":  # one buffer per camera, refilled in place
                        kept = self._reuse.get(cam)
                        self._reuse[cam] = (_copy(batch.images[i], kept[0] if kept else None), it.frame.capture_ns)
                else:
                    reason = reasons.get(cam, "dropped")
                    self.acc.drop(cam, classify_drop(reason), reason)
                    new_drops.append((cam, reason))
                    m["drop_reason"] = reason
                continue
            why = fs.late.get(cam) or fs.absent.get(cam) or reasons.get(cam, "missing")
            m["sync_skew_ns"] = None
            cached = self._reuse.get(cam) if policy == "reuse" else None
            if cached is not None and fs.time_ns - cached[1] <= max_age:
                _assign(batch.images, i, cached[0])
                batch.valid[i] = True
                m["stale"] = True
                m["stale_age_ns"] = fs.time_ns - cached[1]
                m["capture_ns"] = cached[1]
                m["stale_reason"] = why
                self.acc.reuse(cam)
                continue
            if policy == "reuse":
                why += " (no recent frame to reuse)" if cached is None else \
                    f" (last frame {(fs.time_ns - cached[1]) / 1e6:.0f} ms old > max_reuse_age_ms)"
            self.acc.mask(cam, why)
            m["drop_reason"] = why
            new_drops.append((cam, why))
        batch.drops[:] = new_drops

    def _call_model(self, tl: Timeline, batch):
        try:
            # a model that records its own spans (OmModel: model, model.execute, its transfers) is not wrapped
            out = (self.model(batch, timeline=tl) if getattr(self.model, "records_timeline", False)
                   else tl.time("model", self.model, batch))
            self._model_fail_streak = 0
            return out
        except Exception as e:  # noqa: BLE001 - a model error is counted; it stops the run only if it persists
            self.acc.model_errors += 1
            self._model_fail_streak += 1
            if self.model_error is None:
                self.model_error = "".join(traceback.format_exception_only(type(e), e)).strip()
            if self._model_fail_streak >= _MAX_CONSECUTIVE_MODEL_ERRORS:
                raise RunError(f"the model failed on {self._model_fail_streak} batches in a row; "
                               f"first error: {self.model_error}") from e
            return None

    # -- outputs ---------------------------------------------------------------------------------------
    _DUMP_QUEUE = 4  #: dumps waiting for the writer thread; beyond it a dump is skipped (and counted)
    _dumps: Optional[dict] = None  # the dump writer's state, made by the first _dump

    def _dump(self, fs: FrameSet, batch) -> None:
        """Hand a copy of the set to the dump writer thread: only the copy is on the critical path.

        The queue is bounded (:attr:`_DUMP_QUEUE`): when the disk cannot keep up, a dump is skipped
        rather than stalling the run, and counted; every dump accepted is written, or its failure
        counted, by the time outputs are written (``outputs["dumps"]`` then reads ``DIR: N written,
        M skipped (writer queue full), K failed`` when anything was skipped or failed)."""
        import queue

        if self._dumps is None:
            self._dumps = {"accepted": 0, "skipped": 0, "failed": 0, "error": None, "queue": None, "thread": None}
        st = self._dumps
        if st["accepted"] >= self.dep.outputs.dumps_max:
            return
        if st["queue"] is None:
            st["queue"] = queue.Queue(self._DUMP_QUEUE)
            st["thread"] = threading.Thread(target=self._dump_writer, args=(st,), name="dvpipe-dumps", daemon=True)
            st["thread"].start()
        images = batch.images
        if isinstance(images, np.ndarray):
            images = np.array(images, copy=True)
        elif hasattr(images, "to_host"):  # the AIPP route: the NV12 batch, (N, Hs * 3 / 2, Ws) uint8 (one download)
            from ..device import nv12_batch_to_host

            images = np.array(nv12_batch_to_host(images), copy=True)
        else:
            images = images.detach().cpu().numpy()
        doc = {"index": fs.index, "set_time_ns": fs.time_ns, "cameras": list(batch.cameras),
               "drops": list(batch.drops), "metas": [_jsonable(m) for m in batch.metas]}
        try:
            st["queue"].put_nowait((fs.index, images, np.array(batch.valid, copy=True), doc))
            st["accepted"] += 1
        except queue.Full:
            st["skipped"] += 1

    def _dump_writer(self, st: dict) -> None:
        out = os.path.join(self.dep.outputs.dir, "dumps")
        while True:
            job = st["queue"].get()
            if job is None:
                return
            index, images, valid, doc = job
            try:
                os.makedirs(out, exist_ok=True)
                base = os.path.join(out, f"set_{index:06d}")
                np.savez_compressed(base + ".npz", images=images, valid=valid)
                with open(base + ".json", "w", encoding="utf-8") as f:
                    json.dump(doc, f, indent=1)
                self.dumps_written += 1
                self.outputs["dumps"] = out
            except Exception as e:  # noqa: BLE001 - a failed dump is counted and reported, the run goes on
                st["failed"] += 1
                st["error"] = st["error"] or f"{type(e).__name__}: {e}"

    def _flush_dumps(self) -> None:
        """Wait for the dump writer to write what it accepted; note skipped or failed dumps."""
        st = self._dumps
        if st is None or st["thread"] is None:
            return
        st["queue"].put(None)
        st["thread"].join()
        st["thread"] = None
        if st["skipped"] or st["failed"]:
            self.outputs["dumps"] = (f"{self.outputs.get('dumps', 'dumps')}: {self.dumps_written} written, "
                                     f"{st['skipped']} skipped (writer queue full), {st['failed']} failed"
                                     + (f" ({st['error']})" if st["error"] else ""))

    def _write_outputs(self) -> None:
        self._flush_dumps()
        o = self.dep.outputs
        if o.metrics and o.dir:
            os.makedirs(o.dir, exist_ok=True)
            path = os.path.join(o.dir, "summary.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(self.summary_dict(), f, indent=1)
            self.outputs["summary"] = path
        json_path = self.json_path or (os.path.join(o.dir, "latency.json") if o.metrics and o.dir else None)
        if json_path:
            os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
            with open(json_path, "w", encoding="utf-8") as f:
                json.dump(self.stats.to_json(), f, indent=1)
            self.outputs["latency"] = json_path
        if self.trace is not None and self.sets_done:
            self.outputs["trace"] = str(self.trace.write())
        if self.plots_dir and self.sets_done:
            from ..latency.plots import write_plots

            try:
                paths = write_plots(self.stats, self.plots_dir)
                self.outputs["plots"] = str(self.plots_dir)
                self.outputs.update({f"plot_{k}": str(v) for k, v in paths.items()})
            except ImportError as e:
                self.outputs["plots"] = f"not written: {e}"

    def _prometheus_snapshot(self) -> dict:
        """Per-camera counters for the Prometheus exporter (read at every scrape, from any thread)."""
        acc = self.acc
        with acc._lock:
            cams = {c: {"entered": acc.entered[c], "emitted": acc.emitted[c], "dropped": dict(acc.dropped[c]),
                        "masked": dict(acc.masked[c])} for c in acc.cameras}
        for c, h in acc.health.items():
            cams[c].update(stalls=h.stalls, stalled_s=h.stalled_ns / 1e9, disconnects=h.disconnects,
                           reconnects=h.reconnects)
        return {"sets": acc.sets_emitted, "cameras": cams}

    def summary_dict(self) -> dict:
        d = self.acc.to_dict()
        d.update({"deployment": self.dep.name, "deployment_path": self.dep.path, "sets": self.sets_done,
                  "stopped_by": self.stopped_by, "backend_notes": self.backend_notes,
                  "plan": self.pipe.plan.to_dict(), "transfers": transfers_summary(self.stats),
                  "routes": plan_routes(self.pipe.plan)})
        if self.model_error:
            d["model_error"] = self.model_error
        return d


def _copy(x, into=None):
    """A copy of ``x`` (numpy or torch), written into ``into`` when it is a buffer of the same shape."""
    if into is not None and tuple(into.shape) == tuple(x.shape) and type(into) is type(x):
        if hasattr(into, "copy_"):
            into.copy_(x)
        else:
            np.copyto(into, x)
        return into
    return x.clone() if hasattr(x, "clone") else np.array(x, copy=True)


def _assign(images, i: int, value) -> None:
    if hasattr(images, "copy_"):
        images[i].copy_(value)
    else:
        images[i] = value


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    return v


# -------------------------------------------------------------------------------- progress
def format_eta(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss`` from an hour) of a number of seconds, rounded to the second (>= 0)."""
    s = int(round(max(0.0, seconds)))
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60}:{rem % 60:02d}"


class ProgressLine:
    """A one-line progress display: sets done (of N), rate, an ETA when the run's length is known
    (``total`` sets: from the rate so far; ``duration_s``: the time left), drops, camera problems.

    On a terminal the line is redrawn in place (at most 10 times a second); elsewhere a line is
    printed every ``every_s`` seconds.
    """

    def __init__(self, total: Optional[int] = None, duration_s: Optional[float] = None, stream: TextIO = sys.stderr,
                 every_s: float = 5.0):
        self.total = total
        self.duration_s = duration_s
        self.stream = stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.every_ns = int((0.1 if self.tty else every_s) * 1e9)
        self._last = 0
        self._t0: Optional[int] = None
        self._drawn = False

    def __call__(self, runner: Runner) -> None:
        now = now_ns()
        if self._t0 is None:
            self._t0 = runner.started_ns or now
        if now - self._last < self.every_ns:
            return
        self._last = now
        self._draw(runner, now)

    def _draw(self, runner: Runner, now: int) -> None:
        done = runner.sets_done
        elapsed = max(1e-9, (now - self._t0) / 1e9)
        eta = None
        if self.total:
            frac = min(1.0, done / self.total)
            bar = f"[{'#' * int(frac * 24):<24}] {done}/{self.total} sets"
            if 0 < done < self.total:
                eta = (self.total - done) * elapsed / done
            if self.duration_s:  # both limits: whichever comes first
                eta = min(eta if eta is not None else self.duration_s, max(0.0, self.duration_s - elapsed))
        elif self.duration_s:
            frac = min(1.0, elapsed / self.duration_s)
            bar = f"[{'#' * int(frac * 24):<24}] {elapsed:.0f}/{self.duration_s:g} s, {done} sets"
            eta = max(0.0, self.duration_s - elapsed)
        else:
            bar = f"{done} sets"
        if eta is not None and done < (self.total or float("inf")):
            bar += f"  ETA {format_eta(eta)}"
        acc = runner.acc
        t = acc.totals()
        issues = [f"{c} {h.state}" for c, h in acc.health.items() if h.state not in ("streaming", "ended", "starting")]
        line = (f"{bar}  {done / elapsed:.1f} sets/s  frames {t['entered']} in, {t['dropped']} dropped"
                + (f", {t['masked_slots']} masked" if t["masked_slots"] else "")
                + (f"  | {', '.join(issues)}" if issues else ""))
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(100))
            self._drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self, runner: Optional[Runner] = None) -> None:
        if runner is not None and (self.tty or runner.sets_done):
            self._draw(runner, now_ns())
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
