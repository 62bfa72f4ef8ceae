"""Multi-camera synchronisation: frames grouped into frame sets by capture time.

The :class:`Synchroniser` holds a small buffer per camera, filled by the reader threads
(:meth:`~Synchroniser.push`) and consumed by the runner (:meth:`~Synchroniser.poll`). It is a
state machine with an explicit clock argument, so that every policy can be tested without threads.

Forming a set (``tol`` = ``sync.tolerance_ms``):

1. The set's time ``T`` is the capture time of the earliest waiting frame over all cameras
   (``anchor: earliest``), or of the anchor camera's next frame (``anchor: CAM``; older frames of
   the other cameras, more than ``tol`` before it, are dropped as *unmatched*; once the anchor's
   source has ended and its last frame is used, the earliest again).
2. Each camera contributes its waiting frame closest to ``T`` within ``+-tol``; its older waiting
   frames are dropped as *superseded*. For recordings, a camera whose next frame is not read yet and
   could be closer (its best is more than half its shortest frame interval so far before ``T``, and its
   buffer has room) is waited for as a late one is, so that the choice does not depend on how far its
   reader has got (a camera faster than twice the tolerance; same-rate cameras never wait so).
3. A camera without such a frame is **late** when it has nothing waiting (its frame may still come)
   and **missing** when its next frame is already past ``T + tol`` (it skipped this set). A camera
   whose source ended or failed, with nothing left waiting, is **absent**.
4. While some camera is late, the set waits until its deadline: ``deadline_ms`` after the first
   frame of the set arrived for live deployments, or ``wait_ms`` (the runner's stall timeout) after
   the set started waiting for recordings processed as fast as possible (there, "late" only means
   the reader has not got there yet).
5. Then the set is emitted. Late and missing cameras get ``on_late``: ``mask`` (the runner zeroes
   the slot, ``valid=False``), ``reuse`` (the runner reuses the camera's last image if it is at most
   ``max_reuse_age_ms`` old, flagged stale, else masks), or ``drop`` (the whole set is dropped, its
   frames counted as dropped). Absent cameras are masked or reused, never a reason to drop sets:
   a dead camera must not take the others down.

A frame that arrives after its set was emitted (capture time ``<= T_last + tol``) is dropped as
*late*. Tolerance should stay under half the frame period.

Buffers hold ``capacity`` frames per camera. With ``latest_only`` (live sources) a full buffer
drops its oldest frame (*superseded*), never building a backlog; otherwise :meth:`push` blocks the
reader (back-pressure), and the time blocked is counted per camera.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from .sources.base import Item

__all__ = ["Synchroniser", "FrameSet", "Dropped"]


@dataclass
class Dropped:
    """A frame that leaves without being emitted: ``category`` (late, superseded, ...) and ``detail``."""

    item: Item
    category: str
    detail: str


@dataclass
class FrameSet:
    """One synchronised set.

    Attributes:
        index: 0-based count of emitted sets.
        time_ns: the set's capture time (epoch ns), the anchor.
        members: camera -> item for the cameras that have a frame in the set.
        late: camera -> reason for late or missing cameras (``on_late`` applies).
        absent: camera -> reason for cameras whose source ended or failed.
        formed_ns: monotonic time the set was decided.
    """

    index: int
    time_ns: int
    members: dict[str, Item]
    late: dict[str, str] = field(default_factory=dict)
    absent: dict[str, str] = field(default_factory=dict)
    formed_ns: int = 0

    def skew_ns(self, camera: str) -> Optional[int]:
        """Capture time of ``camera``'s frame minus the set's time (None when it has no frame)."""
        it = self.members.get(camera)
        return None if it is None else it.frame.capture_epoch_ns - self.time_ns


class Synchroniser:
    """Groups the cameras' frames into :class:`FrameSet` objects; see the module docstring.

    Args:
        cameras: camera names, rig order.
        cfg: the deployment's :class:`~dvpipe.deploy.config.SyncConfig`.
        live: deadlines on capture times (live) or waits on data (recordings).
        capacity: frames buffered per camera.
        latest_only: a full buffer drops its oldest frame instead of blocking the reader.
        wait_ms: how long a recording's set waits for a camera that has nothing yet.
    """

    def __init__(self, cameras: Sequence[str], cfg, *, live: bool, capacity: int = 2, latest_only: bool = False,
                 wait_ms: float = 1000.0):
        self.cameras = list(cameras)
        self.cfg = cfg
        self.live = live
        self.capacity = max(1, int(capacity))
        self.latest_only = latest_only
        self.tol_ns = round(cfg.tolerance_ms * 1e6)  # to the nearest ns: int() makes 4.1 ms 4_099_999 ns
        self.deadline_ns = round(cfg.deadline_ms * 1e6)
        self.wait_ns = round(wait_ms * 1e6)
        self.pending: dict[str, deque[Item]] = {c: deque() for c in self.cameras}
        self.ended: dict[str, str] = {}
        self.last_set_ns: Optional[int] = None
        self.sets = 0
        self.blocked_ns: dict[str, int] = {c: 0 for c in self.cameras}
        self._drops: list[Dropped] = []
        #: called (under the lock, on the thread that drops) for each frame dropped, as it is dropped: what must
        #: not wait for the consumer's :meth:`take_drops` (the runner's ``run.frames`` credit to a recording)
        self.on_drop: Optional[Callable[[Dropped], None]] = None
        # (set time, cameras waited for, monotonic start of the wait) of the set waiting now
        self._waiting_since: Optional[tuple[int, frozenset, int]] = None
        # per camera: the last capture time pushed and the shortest interval seen between its frames (ns)
        self._last_capture: dict[str, int] = {}
        self._interval: dict[str, int] = {}
        self._next_deadline: Optional[int] = None
        self._cond = threading.Condition()
        self.closed = False

    # -- producer side (reader threads) ------------------------------------------------------------
    def push(self, item: Item, stop: Optional[threading.Event] = None,
             on_enter: Optional[Callable[[str], None]] = None) -> bool:
        """Add a frame. Blocks while the camera's buffer is full unless ``latest_only``.

        ``on_enter(camera)`` is called (under the lock) when the frame is accepted, so that counting
        it and closing the synchroniser cannot race. Returns False when the synchroniser is closed
        (the frame did not enter) or ``stop`` was set while blocked (it entered and is dropped as
        "shutdown").
        """
        cam = item.frame.camera
        with self._cond:
            if self.closed:
                return False
            if on_enter is not None:
                on_enter(cam)
            buf = self.pending[cam]
            if len(buf) >= self.capacity and not self.latest_only:
                import time

                t0 = time.perf_counter_ns()
                while len(buf) >= self.capacity and not self.closed and not (stop is not None and stop.is_set()):
                    self._cond.wait(0.05)
                self.blocked_ns[cam] += time.perf_counter_ns() - t0
                if len(buf) >= self.capacity:
                    self._drop(item, "shutdown", "still queued when the run stopped")
                    self._cond.notify_all()
                    return False
            while len(buf) >= self.capacity:
                old = buf.popleft()
                self._drop(old, "superseded", "a newer frame arrived while the pipeline was busy (latest-frame policy)")
            buf.append(item)
            cap, prev = item.frame.capture_epoch_ns, self._last_capture.get(cam)
            if prev is not None and cap > prev:
                self._interval[cam] = min(self._interval.get(cam, cap - prev), cap - prev)
            self._last_capture[cam] = cap
            self._cond.notify_all()
        return True

    def offer(self, item: Item, on_enter: Optional[Callable[[str], None]] = None) -> Optional[bool]:
        """:meth:`push` that never blocks, for a reader serving several cameras: None when the camera's
        buffer is full (the frame did not enter, nothing was counted: offer it again later), True when it
        entered, False when the synchroniser is closed. With ``latest_only`` it is :meth:`push`."""
        cam = item.frame.camera
        with self._cond:
            if self.closed:
                return False
            if len(self.pending[cam]) >= self.capacity and not self.latest_only:
                return None
        return self.push(item, on_enter=on_enter)  # only this reader pushes for ``cam``: there is room

    def wait_for_room(self, cameras: Sequence[str], timeout_s: float) -> None:
        """Block until one of ``cameras`` has room in its buffer, the synchroniser closes, or ``timeout_s``."""
        with self._cond:
            if not self.closed and all(len(self.pending[c]) >= self.capacity for c in cameras):
                self._cond.wait(timeout_s)

    def close(self) -> None:
        """Accept no more frames (the run is stopping); blocked readers give up."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def end(self, camera: str, reason: str) -> None:
        """The camera's source ended or failed for good; it is absent from later sets."""
        with self._cond:
            self.ended[camera] = reason
            self._cond.notify_all()

    def wait(self, timeout_s: float) -> None:
        """Block the consumer until a push/end happens or ``timeout_s`` passes."""
        with self._cond:
            self._cond.wait(timeout_s)

    # -- consumer side (the runner) ----------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Every source ended and nothing is waiting."""
        with self._cond:
            return len(self.ended) == len(self.cameras) and not any(self.pending.values())

    @property
    def next_deadline_ns(self) -> Optional[int]:
        """When a waiting set's deadline expires (monotonic), if one is waiting."""
        return self._next_deadline

    def take_drops(self) -> list[Dropped]:
        with self._cond:
            out, self._drops = self._drops, []
            return out

    def flush(self, category: str = "shutdown", detail: str = "still queued when the run stopped") -> list[Dropped]:
        """Drop everything waiting (at the end of a run)."""
        with self._cond:
            for buf in self.pending.values():
                while buf:
                    self._drop(buf.popleft(), category, detail)
            self._cond.notify_all()
        return self.take_drops()

    def poll(self, now_ns: int) -> list[FrameSet]:
        """Emit every set that can be decided at ``now_ns``; drops are collected for :meth:`take_drops`."""
        out: list[FrameSet] = []
        with self._cond:
            self._next_deadline = None
            while True:
                fs = self._form(now_ns)
                if fs is None:
                    break
                if fs is not False:
                    out.append(fs)
            if out or self._drops:
                self._cond.notify_all()  # room in the buffers for blocked readers
        return out

    def _drop(self, item: Item, category: str, detail: str) -> None:
        d = Dropped(item, category, detail)
        self._drops.append(d)
        if self.on_drop is not None:
            self.on_drop(d)

    def _form(self, now_ns: int):
        """One decision: a FrameSet, False (something dropped, try again), or None (wait)."""
        tol = self.tol_ns
        if self.last_set_ns is not None:
            limit = self.last_set_ns + tol
            for buf in self.pending.values():
                while buf and buf[0].frame.capture_epoch_ns <= limit:
                    it = buf.popleft()
                    detail = "arrived after its frame set was emitted"
                    if it.capture_mono_ns is not None:
                        detail += f" ({(it.arrival_ns - it.capture_mono_ns) / 1e6:.0f} ms after capture)"
                    self._drop(it, "late", detail)
        heads = {c: b[0] for c, b in self.pending.items() if b}
        if not heads:
            return None
        anchor_cam = self.cfg.anchor
        # the anchor rules hold until the anchor camera has ended and its last frames are used
        if anchor_cam != "earliest" and (anchor_cam not in self.ended or self.pending[anchor_cam]):
            if anchor_cam not in heads:
                # the set's time is unknown until the anchor camera's frame comes; bounded by the deadline
                oldest = min(heads.values(), key=lambda it: it.frame.capture_epoch_ns)
                if not self._expired(oldest.frame.capture_epoch_ns, [oldest], now_ns, frozenset([anchor_cam])):
                    return None
                t_set = oldest.frame.capture_epoch_ns
            else:
                t_set = heads[anchor_cam].frame.capture_epoch_ns
                dropped = False
                for buf in self.pending.values():
                    while buf and buf[0].frame.capture_epoch_ns < t_set - tol:
                        self._drop(buf.popleft(), "unmatched", f"no {anchor_cam} frame within +-{tol / 1e6:.4g} ms")
                        dropped = True
                if dropped:
                    return False
        else:
            t_set = min(it.frame.capture_epoch_ns for it in heads.values())
        members: dict[str, Item] = {}
        late: dict[str, str] = {}
        absent: dict[str, str] = {}
        waiting: list[str] = []
        closer: list[str] = []  # recordings: a camera whose next frame, not read yet, may be closer to T
        for cam in self.cameras:
            buf = self.pending[cam]
            best = None
            beyond = False
            for k, it in enumerate(buf):
                d = abs(it.frame.capture_epoch_ns - t_set)
                if d <= tol and (best is None or d < best[1]):
                    best = (k, d)
                if it.frame.capture_epoch_ns > t_set + tol:
                    beyond = True
                    break
            if best is not None:
                members[cam] = buf[best[0]]
                if not (self.live or beyond or cam in self.ended or len(buf) >= self.capacity):
                    interval = self._interval.get(cam)
                    if interval is not None and members[cam].frame.capture_epoch_ns < t_set - interval / 2:
                        closer.append(cam)
            elif buf:
                nxt = buf[0].frame.capture_epoch_ns - t_set
                late[cam] = (f"missing: no frame within +-{tol / 1e6:.4g} ms of the set "
                             f"(its next is {nxt / 1e6:+.1f} ms)")
            elif cam in self.ended:
                absent[cam] = self.ended[cam]
            else:
                waiting.append(cam)
        if waiting or closer:
            if not self._expired(t_set, list(members.values()), now_ns, frozenset(waiting + closer)):
                return None
            for cam in waiting:
                late[cam] = (f"late: no frame within the {self.cfg.deadline_ms:.4g} ms deadline" if self.live else
                             f"stalled: no frame within {self.wait_ns / 1e6:.4g} ms")
        self._waiting_since = None  # decided: the next set waits afresh
        # take the members (and drop the older frames they supersede)
        for cam, it in members.items():
            buf = self.pending[cam]
            while buf[0] is not it:
                self._drop(buf.popleft(), "superseded", "another frame of this camera was closer to the set's time")
            buf.popleft()
            while buf and buf[0].frame.capture_epoch_ns <= t_set + tol:
                self._drop(buf.popleft(), "superseded", "another frame of this camera was closer to the set's time")
        self.last_set_ns = t_set
        if late and self.cfg.on_late == "drop":
            names = ", ".join(sorted(late))
            for it in members.values():
                self._drop(it, "set_dropped",
                           f"its frame set was dropped: {names} late or missing (sync.on_late: drop)")
            return False
        fs = FrameSet(self.sets, t_set, members, late, absent, now_ns)
        self.sets += 1
        return fs

    def _expired(self, t_set: int, members: list[Item], now_ns: int, waiting: frozenset) -> bool:
        """Whether the set at ``t_set``, waiting for the cameras ``waiting``, has waited its deadline.

        The wait starts when the set first waits (live: at its first frame's arrival) and is not
        restarted by newer frames replacing the waiting ones (latest-frame buffers: the set's time moves,
        the cameras it waits for are the same), so a camera that stopped cannot hold the others back
        for longer than the deadline. A wait recorded for another set (another time *and* other cameras
        waited for: an anchor frame that came and made the earlier frames unmatched) is not this one's."""
        known = self._waiting_since
        if known is not None and known[0] != t_set and known[1] != waiting:
            known = None  # the recorded wait belongs to another set
        if known is None:
            start = min((it.arrival_ns for it in members), default=now_ns) if self.live else now_ns
            known = self._waiting_since = (t_set, waiting, start)
        deadline = known[2] + (self.deadline_ns if self.live else self.wait_ns)
        if now_ns >= deadline:
            return True
        self._next_deadline = deadline if self._next_deadline is None else min(self._next_deadline, deadline)
        return False
