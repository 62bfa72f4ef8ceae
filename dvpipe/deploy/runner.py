"""The streaming runner: sources -> synchronisation -> pipeline -> model -> outputs.

Threads::

    one reader for all recordings:  each camera with room in its buffer: source.read() -> arrival
                                    stamp -> Synchroniser.offer (a full camera holds its frame);
                                    paced (run.realtime): read_early(), held until its release
    one I/O loop for polled live    RTSP through dvpipe's own client (dvpipe.deploy._live_loop):
    sources:                        poll every socket -> receive -> source.read() until NothingYet
                                    -> arrival stamp -> Synchroniser.offer; a thread per connection
                                    attempt (8 at once), ending with it
    a reader per other source:      other live streams (FFmpeg's RTSP client and V4L2 input),
                                    sources with injected faults or decoding in the source:
                                    source.read() -> Synchroniser.push
    runner (calling) thread:        Synchroniser.poll -> Pipeline.submit (the pipeline's threads decode
                                    the cameras; the next set is submitted before this one is finished,
                                    so no core waits at a per-set barrier) -> result -> late-camera
                                    policy, accounting -> model -> outputs -> stats

* **Start-up apart from the steady state.** Recordings are opened (8 at a time) before the run's
  clock starts; the output buffers are written once when the runner is built (a fresh buffer's
  pages would otherwise fault in inside the first sets' kernels); ``summary.json["startup"]``
  reports the opening time, the first set's output time and that set's latency.

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
  step's host span and the batch-assembly wait (recorded by the pipeline on ``batch.timeline``) and
  the model call (``model``); the set's output is stamped when the model returns. They feed
  :class:`dvpipe.latency.LatencyStats`.
* **Outputs** are the registered exporters (:mod:`dvpipe.deploy.exporters`: ``summary.json``,
  ``latency.json``, the trace, plots, dumps, Prometheus, the HTML report, and any a plugin adds):
  opened when the runner is built, observed after each set's output stamp (so their work is not
  in the set's latency; their cost per call is in ``summary.json["exporters"]``), closed at the end.
* **Clean shutdown** at the end of the input, on ``--frames``/``--duration`` limits and on Ctrl-C:
  readers are stopped and joined, what is still queued is dropped as ``shutdown``, outputs are
  written.
"""
from __future__ import annotations

import threading
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, cast

import numpy as np

from ..errors import ConfigError, DvpipeError
from ..latency import LatencyStats, Timeline, now_ns, wall_ns
from ..types import Frame
from ..video import GAP, VideoPacket, as_packet, merge_packets
from ._assembly import AUTO_BACKENDS, build_pipeline, load_model, resolve_backends, step_budget_notes
from ._budget import camera_problem, memory_problem, output_buffers, pictures_per_job, plan_output
from ._live_loop import LiveLoop, polled
from ._progress import ProgressLine, format_eta
from .config import VIDEO_ENCODINGS, Deployment
from .exporters import EXPORTERS, BatchResult, Exporter, RunContext, run_exporter_options
from .sources import Limited, ReplayClock, Source, SourceError, StreamLost, open_source
from .sources.base import Item, SkippedFrame, StreamStalled, innermost, wrapper_of
from .sources._probe import ORIENTATION_NOTE
from .summary import Accounting, classify_drop, format_summary, plan_routes, transfers_summary
from .sync import Dropped, FrameSet, Synchroniser

if TYPE_CHECKING:
    from ..models.om import OmModel

__all__ = ["Runner", "RunResult", "RunBatch", "RunError", "build_pipeline", "resolve_backends", "AUTO_BACKENDS",
           "load_model", "ProgressLine", "format_eta"]

_MAX_VIDEO_BACKLOG = 600
#: sources being opened at once (opening renders a synthetic cycle, connects, probes a container);
#: the other readers wait their turn, so that many cameras open in parallel without all competing
OPEN_CONCURRENCY = 8
_MAX_CONSECUTIVE_MODEL_ERRORS = 10


class RunError(DvpipeError, RuntimeError):
    """The run could not go on (the model kept failing, ...)."""


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
        outputs: options per exporter, merged over the deployment's ``outputs:``
            (:func:`dvpipe.deploy.exporters.run_exporter_options`): ``{"trace": {"path": "t.json",
            "max_events": 400}, "report": True, "prometheus": False}``; checked like the YAML.
        write_outputs: False writes no files at all (tests, soak runs); exporters that write no files
            (Prometheus) still run.
        opening: called (from the reader threads or the I/O loop) each time a camera's source opened or finally failed
            to (``sources_opened`` of ``len(cameras)``), for a display while many cameras open.
        clock: the runner's monotonic clock in ns (run limits, stall detection, arrival stamps, the
            model wait, elapsed time); default :func:`dvpipe.latency.clock.now_ns`. The pipeline's
            step spans always use ``now_ns``: inject another clock only to test the runner's decisions.

    Outputs are the registered exporters the deployment enables (:mod:`dvpipe.deploy.exporters`),
    opened here, observed after every completed frame set and closed by :meth:`finish` (or on leaving
    a ``with`` block that did not call it).
    """

    #: recordings that only hand over bytes share one reader thread (:func:`shares_reader`); False gives
    #: each its own (``tools/bench/video.py`` compares the two)
    share_reader = True

    def __init__(self, deployment: Deployment, *, model: Optional[Callable] = None,
                 progress: Optional[Callable[["Runner"], None]] = None,
                 outputs: Optional[Mapping[str, Any]] = None, write_outputs: bool = True,
                 keep_timelines: int = 16, clock: Callable[[], int] = now_ns,
                 opening: Optional[Callable[["Runner"], None]] = None):
        self.dep = dep = deployment
        self.clock = clock
        self.cameras = [c.name for c in dep.cameras]
        check_memory(dep)  # before the pipeline allocates its output buffers
        self.pipe, self.backend_notes = build_pipeline(dep)
        #: ``run.pictures_per_job`` as this run uses it (``auto`` resolved on the plan), and why
        self.pictures_per_job, self.pictures_per_job_reason = pictures_per_job(dep, self.pipe)
        #: ``latency.steps_ms`` keys that name no step of the plan (their budgets are never checked), one line each
        self.budget_notes = step_budget_notes(dep, self.pipe.plan)
        if getattr(self.pipe.plan, "device_batch", None) and dep.sync.on_late == "reuse":
            getattr(self.pipe, "close", lambda: None)()
            raise ConfigError("sync.on_late: reuse keeps host copies of each camera's image, but on the AIPP route "
                              "the batch is NV12 in device memory; use on_late: mask (or drop aipp from the backends)")
        try:
            self.model = model if model is not None else load_model(dep)
            # a model the runner built from the deployment (an OmModel holds device memory) is closed with it
            self._owned_model: Optional[OmModel] = (
                cast("OmModel", self.model) if model is None and dep.model is not None and dep.model.om is not None
                else None)
        except BaseException:
            getattr(self.pipe, "close", lambda: None)()
            raise
        self.progress = progress
        self.write_outputs = write_outputs
        self.acc = Accounting(self.cameras)
        self.stats = LatencyStats(budgets=dep.latency.budgets_ns(), window=dep.latency.window,
                                  keep_timelines=keep_timelines, counters_only=dep.latency.counters_only,
                                  warmup=dep.latency.warmup_for(dep.run.frames), camera_order=self.cameras)
        self.run_context = RunContext(dep, dep.outputs.dir, tuple(self.cameras), self.stats, self.acc, self.pipe.plan,
                                      clock, write_outputs, self.summary_dict)
        try:
            self.exporters: dict[str, Exporter] = self._open_exporters(self.run_context, outputs)
        except BaseException:
            if self._owned_model is not None:
                self._owned_model.close()
            getattr(self.pipe, "close", lambda: None)()
            raise
        live = dep.live
        latest = {"auto": live, "true": True, "false": False}[dep.run.latest_only]
        # with pictures per job, the next N sets' frames wait read (encoded: small) while the last N finish
        self.sync = Synchroniser(self.cameras, dep.sync, live=live,
                                 capacity=max(dep.run.queue_size, self.pictures_per_job),
                                 latest_only=latest, wait_ms=dep.run.stall_timeout_ms)
        self.stop_event = threading.Event()
        self.opening = opening
        self.sources_opened = 0  # sources that opened, or finally failed to, at the first attempt series
        self._open_slots = threading.Semaphore(OPEN_CONCURRENCY)
        self._open_lock = threading.Lock()
        self._go = threading.Event()  # readers start opening once every reader thread exists
        self._threads: list[threading.Thread] = []
        self._sources: dict[str, Source] = {}
        self._limited: dict[str, Any] = {}  # camera -> its Limited wrapper (run.frames on a recording)
        self._video = {c.name for c in dep.rig.cameras if c.encoding in VIDEO_ENCODINGS}
        self._codec = {c.name: c.encoding for c in dep.rig.cameras if c.encoding in VIDEO_ENCODINGS}
        # per video camera: (seq, discontinuity before it, packet) of frames dropped before decoding
        self._backlog: dict[str, list[tuple[int, bool, VideoPacket]]] = {c: [] for c in self._video}
        self._discontinuity: dict[str, bool] = {c: False for c in self._video}
        self._reuse: dict[str, tuple[Any, int]] = {}  # camera -> (copy of its last image, capture_epoch_ns)
        self._index = {c: dep.rig.index(c) for c in self.cameras}
        self._model_fail_streak = 0
        self._unprocessed: list[FrameSet] = []
        self.model_error: Optional[str] = None
        self.sets_done = 0
        self.sets_prepared = 0  # handed to the pipeline: ahead of sets_done by the sets in flight and the model's
        self.outputs: dict[str, str] = {}
        self.exporters_closed = False
        self._exporter_ns: dict[str, list[int]] = {}  # exporter -> [observe calls, ns summed, ns max]
        self._exporter_errors: dict[str, str] = {}  # exporter -> why it stopped (its observe raised)
        self.started_ns: Optional[int] = None
        #: the run's start-up, apart from its steady state (ms): ``open_ms`` (recordings opened before the clock
        #: starts), ``first_set_ms`` (clock start -> the first frame set's output) and ``first_set_latency_ms``
        #: (that set's own latency: it pays for decoders' and kernels' first calls); in ``summary.json``
        self.startup: dict[str, float] = {}
        self.stopped_by = "end of input"
        self.interrupted = False
        self._stop_request: Optional[str] = None
        self._finished = False
        # the model runs on its own thread so that frame set k+1 is preprocessed while the model works on
        # set k (the output ring has its buffer beside those of the sets in flight)
        self._model_pool = (ThreadPoolExecutor(1, thread_name_prefix="dvpipe-model")
                            if self.model is not None and dep.run.overlap_model else None)
        self._pending: deque = deque()
        #: frame sets handed to the pipeline and not yet finished: (set, PendingBatch, timeline), oldest first
        self._inflight: deque = deque()
        # the ring holds the sets in flight and the one the model reads (the memory budget counts them)
        self.pipe.reserve_output_buffers(output_buffers(self.pictures_per_job))
        self.pipe.touch_output_buffers()
        self._sets_ahead = self.pictures_per_job
        # runs of pictures once the first set is out: before, the first set's cameras would wait behind the
        # runs of those the workers took first (a first set after ~0.5 s instead of ~70 ms, 12 x 1600x900)
        self.pipe.locality = 1

    @property
    def sets_ahead(self) -> int:
        """Frame sets preprocessed at once beyond the one being finished: ``run.pictures_per_job`` as the run
        resolved it (``auto``: up to 24 for recordings read as fast as possible, else 1), as many as the output
        ring (:func:`~dvpipe.deploy._budget.output_buffers`) holds beside the set being finished and the one the
        model reads. Fewer may be set (0: one set at a time, with a barrier between sets; ``tools/bench/video.py``
        compares the two), not more (ConfigError): the ring would hand a batch still in use to the next set."""
        return self._sets_ahead

    @sets_ahead.setter
    def sets_ahead(self, sets: int) -> None:
        if not 0 <= sets <= self.pictures_per_job:
            raise ConfigError(f"sets_ahead {sets}: this runner's output ring holds at most {self.pictures_per_job} "
                              "set(s) ahead (run.pictures_per_job)")
        self._sets_ahead = sets

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Close the runner and, unless :meth:`finish` was called, finish it: the exporters close (files
        written, servers stopped). An exception leaving the block is not hidden by one of finishing."""
        self.close()
        if not self.exporters_closed:
            try:
                self.finish()
            except Exception:  # noqa: BLE001
                if exc_type is None:
                    raise

    def start(self) -> None:
        """Open the sources and start reading.

        Recordings (sources that are not live) are opened here, :data:`OPEN_CONCURRENCY` at once,
        before the run's clock starts (``open_ms`` in :attr:`startup`): opening renders, probes and
        seeks, none of which is a frame set's work; recordings paced by ``run.realtime`` too. Those that
        only read bytes (no injected faults, no decoding in the source: see :func:`shares_reader`) are
        then read by one thread for all of them, which holds a paced frame until its release; every
        other source has its own reader thread (a live stream connects when its reader can take its
        frames at once).
        """
        if self.started_ns is not None:
            return
        clock = ReplayClock(self.dep.run.speed) if self.dep.run.realtime else None
        start_wall = wall_ns()
        for cc in self.dep.cameras:
            src = open_source(self.dep.rig[cc.name], cc.source, loop=self.dep.run.loop, clock=clock,
                              start_ns=start_wall, limit=self.dep.run.frames)
            src.set_stop(self.stop_event)
            self._sources[cc.name] = src
        self._limited = {cam: w for cam, src in self._sources.items() if (w := wrapper_of(src, Limited)) is not None}
        for w in self._limited.values():
            w.slack = self.dep.run.queue_size + 1  # the frames a camera's reader may hold ahead of the sets
        if self._limited:
            self.sync.on_drop = self._credit  # at the drop, not when the runner takes it: the reader reads on
        t0 = self.clock()
        recordings = [cam for cam, src in self._sources.items() if not src.live or _paced(src) is not None]
        opened: dict[str, Optional[str]] = {}
        if recordings:
            ex = ThreadPoolExecutor(min(OPEN_CONCURRENCY, len(recordings)), thread_name_prefix="dvpipe-open")
            try:
                opened = dict(zip(recordings, ex.map(self._open_first, recordings)))
            except BaseException:  # Ctrl-C while opening: open no more (those opening finish)
                self.stop_event.set()
                raise
            finally:
                ex.shutdown(wait=True, cancel_futures=True)
        self.started_ns = self.clock()
        self.startup["open_ms"] = (self.started_ns - t0) / 1e6
        self.acc.started_ns = self.started_ns  # the origin of outage times in the summary
        shared, polled_cams = [], []
        for cam, src in self._sources.items():
            if cam in opened:
                err = opened[cam]
                if err is not None:
                    if err != "stopped":
                        self._fail(cam, f"source did not open: {err}")
                    continue
                self._streaming(cam, src)
                if self.share_reader and shares_reader(src):
                    shared.append(cam)
                    continue
            elif polled(src):
                polled_cams.append(cam)
                continue
            t = threading.Thread(target=self._reader, args=(cam, src, cam in opened), name=f"dvpipe-src-{cam}",
                                 daemon=True)
            self._threads.append(t)
        if shared:
            self._threads.append(threading.Thread(target=self._shared_reader, args=(shared,), name="dvpipe-src-files",
                                                  daemon=True))
        if polled_cams:
            states = [_ReadState(cam, self._sources[cam], self.acc.health[cam]) for cam in polled_cams]
            self._threads.append(LiveLoop(self, states, OPEN_CONCURRENCY).thread)
        for t in self._threads:
            t.start()
        self._go.set()

    def _open_first(self, cam: str) -> Optional[str]:
        """The first open of ``cam``'s source; None on success, else the reason. Counts :attr:`sources_opened`."""
        err = self._open(cam, self._sources[cam], again=False)
        self._count_opened()
        return err

    def _count_opened(self) -> None:
        """One more source opened, or finally failed to, at its first series of attempts."""
        with self._open_lock:
            self.sources_opened += 1
            if self.opening is not None:
                self.opening(self)

    def _streaming(self, cam: str, src: Source) -> None:
        h = self.acc.health[cam]
        h.state, h.detail = "streaming", ""
        h.streaming_since_ns = self.clock()
        h.nominal_fps = src.nominal_fps()

    def close(self) -> None:
        """Stop the readers, account for what is still queued, release the pipeline. Idempotent."""
        if self._finished:
            return
        self._finished = True
        self.stop_event.set()  # the readers stop: a frame one has read enters and is dropped as "shutdown"
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
        self.sync.close()  # from now on a frame a reader still gets (one that outlived its join) never enters
        for fs, _pending, _tl in self._inflight:  # handed to the pipeline, not finished (closing it stops them)
            for it in fs.members.values():
                self._account_drop(Dropped(it, "shutdown", "the run stopped while its set was processed"))
        self._inflight.clear()
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
                if again:
                    src.reopen()
                else:
                    with self._open_slots:  # at most OPEN_CONCURRENCY first opens at once (not their back-off)
                        if self.stop_event.is_set():
                            return "stopped"
                        src.open()
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

    def _reader(self, cam: str, src: Source, opened: bool = False) -> None:
        h = self.acc.health[cam]
        try:
            self._read_loop(cam, src, h, opened)
        finally:
            h.finish(self.clock())  # an outage still open when the reader stops lasts until then

    def _read_loop(self, cam: str, src: Source, h, opened: bool) -> None:
        """Open (unless ``opened``), read and push until the input ends, the run stops or the source fails."""
        self._go.wait()
        if not opened:
            err = self._open_first(cam)
            if err is not None:
                if err != "stopped":
                    self._fail(cam, f"source did not open: {err}")
                return
            self._streaming(cam, src)
        st = _ReadState(cam, src, h)
        while not self.stop_event.is_set():
            item = self._read_item(st)
            if item is _END:
                return
            if item is _AGAIN:
                continue
            assert isinstance(item, Item)
            h.pushing_frame(True, item.arrival_ns)
            try:
                pushed = self.sync.push(item, self.stop_event, on_enter=self.acc.enter)
            finally:
                h.pushing_frame(False, self.clock())
            if not pushed and self.sync.closed:
                return

    def _shared_reader(self, cams: list[str]) -> None:
        """One thread reading every recording in ``cams`` (opened already): each camera with room in its
        buffer gets its next frame in turn; a camera whose buffer is full holds the frame it read (as a
        reader blocked in ``push`` would: back-pressure, counted in ``blocked_ns``) while the others read on.
        When every camera is full the thread sleeps until the runner takes a frame set."""
        self._go.wait()
        states = [_ReadState(cam, self._sources[cam], self.acc.health[cam]) for cam in cams]
        active = list(states)
        try:
            while active and not self.stop_event.is_set():
                progressed = False
                wait_s = 0.05  # the longest sleep: until the next release of a paced frame read early
                for st in list(active):
                    if st.held is None:
                        pace = st.pace
                        if st.early is None:
                            item = self._read_item(st, early=pace is not None)
                            if item is _END:
                                active.remove(st)
                                continue
                            progressed = True
                            if item is _AGAIN:
                                continue
                            assert isinstance(item, Item)
                            if pace is not None:
                                st.early = item
                            else:
                                st.held, st.held_since = item, None
                        if pace is not None and st.early is not None:  # a paced frame arrives at its release
                            release = st.early.capture_mono_ns
                            assert release is not None  # Paced.read_early sets it
                            ahead_ns = release - pace.clock.now()
                            if ahead_ns > 0:
                                wait_s = min(wait_s, ahead_ns / 1e9)
                                continue
                            st.held, st.held_since, st.early = self._arrived(st, st.early), None, None
                            progressed = True
                    assert st.held is not None
                    entered = self.sync.offer(st.held, on_enter=self.acc.enter)
                    if entered is False:  # closed: the run is stopping
                        return
                    if entered is None:  # full: back-pressure from the pipeline
                        if st.held_since is None:
                            st.held_since = self.clock()
                            st.health.pushing_frame(True, st.held_since)
                        continue
                    if st.held_since is not None:
                        t = self.clock()
                        st.health.pushing_frame(False, t)
                        self.sync.blocked_ns[st.cam] += t - st.held_since
                    st.held = None
                    progressed = True
                if not progressed:
                    self.sync.wait_for_room([st.cam for st in active if st.early is None], wait_s)
        finally:
            for st in states:
                if st.early is not None:  # a paced frame read before its release
                    st.held, st.early = self._arrived(st, st.early), None
                if st.held is not None:  # read before the stop: it enters and is dropped as "shutdown"
                    self.sync.push(st.held, self.stop_event, on_enter=self.acc.enter)
                    st.health.pushing_frame(False, self.clock())
                st.health.finish(self.clock())

    def _read_item(self, st: "_ReadState", early: bool = False) -> "Item | object":
        """The camera's next frame, stamped on arrival; :data:`_AGAIN` (read again: a stall, a skipped
        file, a reconnect) or :data:`_END` (the input ended, the run stopped or the source failed).
        ``early``: a paced recording's next frame before its release, not stamped (the caller stamps it
        when it is due).

        A read timeout on an open connection (:class:`StreamStalled`) is a stall: the reader reads on,
        and reconnects only when the camera has been without frames for ``src.stall_reconnect_s``.
        """
        cam, src, h = st.cam, st.src, st.health
        try:
            item = src.read_early() if early else src.read()  # type: ignore[attr-defined]  # early: a Paced
        except StreamStalled as e:
            without_ns = h.read_timed_out(self.clock(), e.reason)
            limit = src.stall_reconnect_s
            if src.backoff is None or limit is None or without_ns < limit * 1e9:
                return _AGAIN
            if not self._reconnect(cam, src, h, f"no frame for {without_ns / 1e9:.1f} s on an open connection "
                                                 f"(more than stall_reconnect_s {limit:g} s)"):
                return _END
            st.gap_next = True
            return _AGAIN
        except SkippedFrame as e:  # not delivered (a file not read, an unplaced unit): a counted drop; reads on
            self.acc.enter(cam)
            self.acc.drop(cam, e.category, e.reason)
            return _AGAIN
        except StreamLost as e:
            if src.backoff is None:
                h.disconnected(self.clock(), e.reason)
                self._fail(cam, f"stream lost: {e.reason}")
                return _END
            if not self._reconnect(cam, src, h, e.reason):
                return _END
            st.gap_next = True
            return _AGAIN
        except SourceError as e:
            self._fail(cam, e.reason)
            return _END
        except Exception as e:  # noqa: BLE001 - a broken source must not take the others down
            self._fail(cam, f"{type(e).__name__}: {e}")
            return _END
        if item is None:
            if not self.stop_event.is_set():
                self._fail(cam, "end of input", state="ended")
            return _END
        return item if early else self._arrived(st, item)

    def _arrived(self, st: "_ReadState", item: Item) -> Item:
        """Stamp a frame just read: its arrival time, whether frames were lost before it."""
        t = self.clock()
        item.arrival_ns = t
        seq = item.frame.seq
        # (frames the source counted as lost before this one are no discontinuity of their own: a source
        # whose losses break a decoder's reference chain says so in item.discontinuity)
        item.discontinuity = (item.discontinuity or st.gap_next
                              or (st.last_seq is not None and seq != st.last_seq + 1))
        st.gap_next = False
        st.last_seq = seq
        st.health.arrived(t, item.media_ns, item.lost_before)
        return item

    def _reconnect(self, cam: str, src: Source, h, reason: str) -> bool:
        """The connection is lost (``reason``): reconnect with the source's back-off. False: give up."""
        h.disconnected(self.clock(), reason)
        err = self._open(cam, src, again=True)
        if err is not None:
            if err != "stopped":
                self._fail(cam, f"stream lost and did not come back: {err}")
            return False
        h.reconnected(self.clock())
        h.nominal_fps = src.nominal_fps() or h.nominal_fps
        return True

    def _check_stalls(self, now: int) -> None:
        """Begin a stall for each streaming camera without a frame for ``run.stall_timeout_ms``."""
        limit = round(self.dep.run.stall_timeout_ms * 1e6)
        for h in self.acc.health.values():
            h.check_stall(now, limit)

    # -- accounting of drops (video cameras keep feeding their decoder) ------------------------------
    def _account_drop(self, d: Dropped) -> None:
        cam = d.item.frame.camera
        self.acc.drop(cam, d.category, d.detail)
        if cam in self._video:
            self._carry(cam, d.item)

    def _credit(self, d: Dropped) -> None:
        """A frame the synchroniser dropped: run.frames counts sets, not a camera's frames, so the camera's
        recording may read one more. Called as the frame is dropped (under the synchroniser's lock, maybe on
        the reader's thread), so that a reader at its limit reads on rather than ending its camera before the
        runner has taken the drop."""
        limited = self._limited.get(d.item.frame.camera)
        if limited is not None and d.category in _SYNC_DROPS:
            limited.credit()

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
        if r.duration_s is not None and now - cast(int, self.started_ns) >= r.duration_s * 1e9:  # set by start()
            self.stopped_by = f"--duration {r.duration_s:g} s"
            return True
        return False

    def batches(self) -> Iterator[RunBatch]:
        """Process frame sets as they become ready; stops at the end of input or a run limit.

        Up to :attr:`sets_ahead` sets are preprocessed at once (:meth:`dvpipe.Pipeline.submit`): set k+1's
        cameras start while set k's slowest camera finishes. Sets complete in order."""
        self.start()
        while not self.stop_event.is_set():
            now = self.clock()
            if self._limits_reached(now):
                break
            sets = self.sync.poll(now)
            for d in self.sync.take_drops():  # recorded since the last poll, and by this one, in order
                self._account_drop(d)
            self._unprocessed = list(sets)  # formed but not processed when the run stops: see close()
            first = True
            while self._unprocessed:
                if not first and self._limits_reached(self.clock()):
                    break
                first = False
                self._start_set(self._unprocessed.pop(0))
                while len(self._inflight) > self.sets_ahead:
                    yield from self._finish_oldest()
            if self.stopped_by != "end of input":
                break
            self._check_stalls(self.clock())
            if not sets:
                if self._inflight:  # nothing new: finish the oldest set rather than wait
                    yield from self._finish_oldest()
                    continue
                if self.sync.done:
                    break
                deadline = self.sync.next_deadline_ns
                timeout = 0.05 if deadline is None else min(0.05, max(0.0, (deadline - self.clock()) / 1e9))
                if timeout > 0:
                    self.sync.wait(timeout)
        while self._inflight:
            yield from self._finish_oldest()
        while self._pending:
            yield self._pending.popleft().result()

    def wait_in_flight(self) -> None:
        """Return once the frame sets handed to the pipeline have been preprocessed (not yet completed):
        a benchmark that times rounds of :meth:`batches` calls it at the end of each round, so that the
        sets submitted ahead are not worked on between its rounds."""
        for _fs, pending, _tl in list(self._inflight):
            pending.wait()

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
        """Close (if needed), close the exporters (writing the outputs), check the accounting, and
        return the result. Idempotent: a second call returns the same outputs without rewriting them."""
        self.close()
        now = self.clock()
        elapsed = (now - (now if self.started_ns is None else self.started_ns)) / 1e9
        result = RunResult(self.dep, self.acc, self.stats, self.pipe.plan, self.backend_notes, self.sets_done,
                           elapsed, self.interrupted, self.stopped_by, dict(self.outputs), self.model_error)
        if not self.exporters_closed:
            self._close_exporters(result)
        else:
            result.outputs.update(self.outputs)
        problems = self.acc.check()
        if problems:  # an internal bug if it happens: say so loudly rather than report wrong numbers
            raise RunError("frame accounting does not add up: " + "; ".join(problems))
        return result

    # -- one frame set -------------------------------------------------------------------------------
    def _start_set(self, fs: FrameSet) -> None:
        """Hand ``fs`` to the pipeline (:meth:`dvpipe.Pipeline.submit`); it joins :attr:`_inflight`."""
        tl = Timeline(index=fs.index, counters_only=self.dep.latency.counters_only)
        formed = self.clock()
        frames: dict[str, Frame] = {}
        for cam, it in fs.members.items():
            f = it.frame
            if cam in self._video:  # the decoder gets the access units held back since the last decode
                f = Frame(cam, f.seq, f.capture_epoch_ns, self._video_payload(cam, it), f.pixel_format)
            frames[cam] = f
            tl.set_frame(cam, capture_mono_ns=it.capture_mono_ns, arrival_ns=it.arrival_ns)
            if it.read_span_ns is not None:
                tl.record("read", it.read_span_ns[0], it.read_span_ns[1], "io", camera=cam)
            if it.reorder_span_ns is not None:  # a live B-frame stream's look-ahead: its data had arrived
                tl.record("reorder", it.reorder_span_ns[0], it.reorder_span_ns[1], "wait", camera=cam)
            tl.record("queue_wait", it.arrival_ns, max(formed, it.arrival_ns), "wait", camera=cam)
        self._inflight.append((fs, self.pipe.submit(frames, timeline=tl), tl))  # spans go into the set's timeline
        self.sets_prepared += 1

    def _finish_oldest(self) -> Iterator[RunBatch]:
        """Take the oldest set in flight: its batch, settled (late-camera policy, accounting), then complete it
        (model, outputs, statistics) here or on the model thread."""
        fs, pending, tl = self._inflight.popleft()
        try:
            batch = pending.result()
        except BaseException:  # Ctrl-C or fallback="error": the run stops, its frames are still accounted
            for it in fs.members.values():
                self._account_drop(Dropped(it, "shutdown", "the run stopped while its set was processed"))
            raise
        self._settle(fs, batch)
        if self._model_pool is None:
            yield self._complete(fs, batch, tl, self.clock())
            return
        try:
            while self._pending:  # at most one set in the model's hands: its output buffer is still in use
                yield self._pending.popleft().result()
        finally:  # settled (its frames counted as emitted): it completes even if the caller stops iterating here
            self._pending.append(self._model_pool.submit(self._complete, fs, batch, tl, self.clock()))

    def _complete(self, fs: FrameSet, batch, tl: Timeline, ready_ns: int) -> RunBatch:
        started = self.clock()
        if started > ready_ns:
            tl.record("model_wait", ready_ns, started, "wait")  # the previous set still had the model
        output = None
        if self.model is not None:
            output = self._call_model(tl, batch)
        tl.finish(self.clock())
        if self.sets_done == 0:
            self.pipe.locality = self.pictures_per_job  # the first set is out: runs of pictures from now on
            if self.started_ns is not None:
                self.startup["first_set_ms"] = (self.clock() - self.started_ns) / 1e6
                arrival = tl.end_to_end_ns("arrival")  # from the set's first frame's arrival
                if arrival is not None:
                    self.startup["first_set_latency_ms"] = arrival / 1e6
        warm_before = self.stats.warmup_batches
        record = self.stats.add(tl)
        if self.exporters:
            self._observe(BatchResult(fs, batch, output, tl, record, warmup=self.stats.warmup_batches > warm_before))
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
        max_age = round(self.dep.sync.max_reuse_age_ms * 1e6)  # nearest ns, as the synchroniser rounds its tolerance
        reasons = dict(batch.drops)
        new_drops = []
        for cam in self.cameras:
            i = self._index[cam]
            m = batch.metas[i]
            m["set_time_ns"] = fs.time_ns
            m["stale"] = False
            if cam in fs.members:
                it = fs.members[cam]
                m["sync_skew_ns"] = it.frame.capture_epoch_ns - fs.time_ns
                if batch.valid[i]:
                    self.acc.emit(cam)
                    if cam not in self._video and is_greyscale(it.frame.data):
                        m["greyscale"] = True
                        self.acc.grey(cam)
                    if m.get("corrupt"):
                        self.acc.flag(cam, m.get("corrupt_reason", "corrupt"))
                    if policy == "reuse":  # one buffer per camera, refilled in place
                        kept = self._reuse.get(cam)
                        self._reuse[cam] = (_copy(batch.images[i], kept[0] if kept else None), it.frame.capture_epoch_ns)
                else:
                    reason = reasons.get(cam, "dropped")
                    category = classify_drop(reason)
                    if category == "wrong_size" and ORIENTATION_NOTE not in reason:
                        reason += ORIENTATION_NOTE  # a rotated picture is a wrong size: say what is not applied
                    self.acc.drop(cam, category, reason)
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
                m["capture_epoch_ns"] = cached[1]
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
        assert self.model is not None  # _complete calls this only with a model
        ranges = getattr(self.pipe, "profiler_ranges", None)  # latency.profiler_ranges: "dvpipe:model"
        tokens = None if ranges is None else ranges.push(ranges.message("model"))
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
        finally:
            if tokens is not None and ranges is not None:
                ranges.pop(tokens)

    # -- outputs: the registered exporters ----------------------------------------------------------
    def _open_exporters(self, run: RunContext, given: Optional[Mapping[str, Any]]) -> dict[str, Exporter]:
        """Open every registered exporter the deployment (or ``given``, the runner's ``outputs=``)
        enables, in registry order; when one fails to open, those already open are released and the
        error propagates."""
        opened: dict[str, Exporter] = {}
        try:
            for name, options in run_exporter_options(self.dep.outputs, given).items():
                cls = EXPORTERS[name]
                if cls.writes_files and not run.write_files:
                    continue
                exp = cls(options)
                exp.open(run)
                opened[name] = exp
        except BaseException:
            for exp in opened.values():
                try:
                    exp.abort()
                except Exception:  # noqa: BLE001 - the first error is the one to report
                    pass
            raise
        return opened

    @property
    def trace(self):
        """The trace exporter's :class:`~dvpipe.latency.TraceWriter` (None: no trace is written)."""
        exp = self.exporters.get("trace")
        return getattr(exp, "writer", None)

    @property
    def prometheus(self):
        """The :class:`~dvpipe.latency.prometheus.PrometheusExporter` serving ``/metrics`` (None: off)."""
        exp = self.exporters.get("prometheus")
        return getattr(exp, "exporter", None)

    def _observe(self, result: BatchResult) -> None:
        """Hand the completed set to each exporter, timing each (``summary.json["exporters"]``). An
        exporter whose ``observe`` raises is stopped (released with ``abort``, not closed) and reported
        in ``outputs``; the run and the other exporters go on."""
        for name, exp in self.exporters.items():
            if name in self._exporter_errors:
                continue
            t0 = self.clock()
            try:
                exp.observe(result)
            except Exception as e:  # noqa: BLE001 - a broken exporter must not take the run down
                self._exporter_errors[name] = (f"not written: observe failed on frame set {result.index}: "
                                               f"{type(e).__name__}: {e}")
                try:
                    exp.abort()
                except Exception:  # noqa: BLE001 - the observe error is the one to report
                    pass
            d = self.clock() - t0
            cost = self._exporter_ns.setdefault(name, [0, 0, 0])
            cost[0] += 1
            cost[1] += d
            cost[2] = max(cost[2], d)

    def _close_exporters(self, result: "RunResult") -> None:
        """Close every open exporter (in registry order); what they return goes into ``result.outputs``.
        An exporter that fails is reported in ``outputs`` and the others still close."""
        for name, exp in self.exporters.items():
            try:
                paths = ({name: self._exporter_errors[name]} if name in self._exporter_errors
                         else exp.close(result))
            except Exception as e:  # noqa: BLE001 - one broken exporter must not lose the others' outputs
                paths = {name: f"not written: {type(e).__name__}: {e}"}
            self.outputs.update(paths)
            result.outputs.update(paths)
        self.exporters_closed = True

    def summary_dict(self) -> dict:
        d = self.acc.to_dict()
        d.update({"deployment": self.dep.name, "deployment_path": self.dep.path, "sets": self.sets_done,
                  "stopped_by": self.stopped_by, "backend_notes": self.backend_notes,
                  "plan": self.pipe.plan.to_dict(), "transfers": transfers_summary(self.stats),
                  "routes": plan_routes(self.pipe.plan),
                  # what each exporter's observe cost the completion thread (not part of any set's latency)
                  "exporters": {name: {"observe_calls": c[0], "observe_ns_sum": c[1], "observe_ns_max": c[2]}
                                for name, c in ((n, self._exporter_ns.get(n, [0, 0, 0])) for n in self.exporters)},
                  "startup": dict(self.startup),
                  "pictures_per_job": {"value": self.pictures_per_job, "why": self.pictures_per_job_reason}})
        if self.model_error:
            d["model_error"] = self.model_error
        return d


_AGAIN = object()  # _read_item: nothing delivered this time, read again
_END = object()  # _read_item: this camera's reading is over


class _ReadState:
    """What a reader keeps per camera between reads."""

    __slots__ = ("cam", "src", "health", "last_seq", "gap_next", "held", "held_since", "early", "pace")

    def __init__(self, cam: str, src: Source, health):
        self.cam, self.src, self.health = cam, src, health
        self.pace = _paced(src)  # the Paced wrapper of a paced recording (run.realtime), else None
        self.last_seq: Optional[int] = None
        self.gap_next = False  # the next frame follows a reconnect: a discontinuity
        self.held: Optional[Item] = None  # read, waiting for room in the camera's buffer (the shared reader)
        self.held_since: Optional[int] = None
        self.early: Optional[Item] = None  # a paced frame read before its release (the shared reader)


def shares_reader(src: Source) -> bool:
    """Whether a recording is read by the runner's one thread for all recordings: it is a recording (paced
    by ``run.realtime`` or not: that thread holds each paced frame until its release), has no injected
    faults (they sleep) and hands over bytes (a ``raw`` camera's source decodes in its reader: each keeps
    its own thread)."""
    from .sources.wrappers import Faulty, Paced

    if src.camera.encoding == "raw" or (src.live and not isinstance(src, Paced)):
        return False
    return wrapper_of(src, Faulty) is None and not innermost(src).live


#: the synchroniser's drops: frames that left a run without joining a set (they do not count toward run.frames)
_SYNC_DROPS = frozenset({"unmatched", "superseded", "late", "set_dropped"})


def _paced(src: Source) -> Any:
    """``src`` itself when it is a paced recording (``run.realtime``: a ``Paced``), else None."""
    from .sources.wrappers import Paced

    return src if isinstance(src, Paced) else None


def check_memory(dep: Deployment) -> None:
    """``ConfigError`` (one line) when the deployment's cameras x output x buffers need more than its
    memory budget (:mod:`dvpipe.deploy._budget`), before anything is allocated."""
    too_many = camera_problem(len(dep.cameras))
    if too_many is not None:
        raise ConfigError(too_many)
    planned = plan_output(dep)
    if planned is not None:
        problem = memory_problem(dep, *planned)
        if problem is not None:
            raise ConfigError(problem)


def is_greyscale(data: Any) -> bool:
    """Whether encoded image bytes hold a one-channel (or grey + alpha) JPEG or PNG, from the header;
    False for anything else (a raw array, unreadable bytes: those have their own verdicts)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return False
    from ..codecs import image_info
    from ..errors import FrameError

    try:
        return image_info(cast(bytes, data)).components in (1, 2)  # the header readers take any bytes-like
    except (FrameError, ValueError, IndexError):
        return False


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
