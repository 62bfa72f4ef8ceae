"""The runner's I/O loop: every live camera whose source reads without blocking, on one thread.

A source is served here when it is ``pollable`` (dvpipe's own RTSP client and V4L2 reader:
``filenos()`` to poll, ``receive()`` to take what arrived, ``read()`` raising
:class:`~dvpipe.deploy.sources.NothingYet` when no frame is complete), so the run's thread count does
not grow with its cameras: one thread polls every socket and device (``selectors``), and each
(re)connection attempt runs on a thread that ends with it (at most
:data:`~dvpipe.deploy.runner.OPEN_CONCURRENCY` at once), because the RTSP handshake waits for answers
(and a V4L2 device's setup may take a while).

What a reader thread of its own does, the loop does the same way (and reports it the same way):
a read timeout on an open connection (``read_timeout_s`` without a byte) is a stall; a stall past
``stall_reconnect_s`` or a lost connection reconnects with the source's back-off (timers of the
loop, not sleeping threads); frames enter the synchroniser as they are read (latest-frame policy: a
full buffer drops its oldest; without it a full buffer holds the frame and stops reading that
camera's sockets, which is TCP's back-pressure on the sender; RTP over UDP has none: the kernel's
receive buffer fills and drops datagrams, which show as lost packets and damaged pictures; a V4L2
driver runs out of buffers and drops frames, counted as lost at the source).
"""
from __future__ import annotations

import heapq
import itertools
import queue
import selectors
import socket
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Iterator, Optional

from .sources.base import Item, NothingYet, Source, SourceError, StreamLost, StreamStalled

if TYPE_CHECKING:
    from .runner import Runner, _ReadState

__all__ = ["LiveLoop", "polled"]

_HELD_POLL_S = 0.005  # how often a frame held for room in a full buffer is offered again
_IDLE_POLL_S = 0.05  # the longest the loop sleeps (stop requests, read timeouts)


def polled(src: Source) -> bool:
    """Whether the I/O loop can serve ``src``: a live source that reads without blocking, not wrapped
    (injected faults sleep in ``read``)."""
    return bool(src.live and getattr(src, "pollable", False) is True)


class _Camera:
    """What the loop keeps per camera."""

    __slots__ = ("cam", "src", "st", "first", "attempt", "delays", "connected", "last_data", "held",
                 "held_since", "done")

    def __init__(self, cam: str, src: Source, st: "_ReadState"):
        self.cam, self.st = cam, st
        self.src: Any = src  # a Source with filenos(), receive(), due_s(), read_timeout_s, nonblocking (:func:`polled`)
        self.first = True  # the first series of attempts (not a reconnect)
        self.attempt = 0
        self.delays: Iterator[float] = iter(())
        self.connected = False
        self.last_data = 0.0  # time.monotonic() of the last byte (or of the last stall report)
        self.held: Optional[Item] = None  # read, waiting for room in a full buffer
        self.held_since: Optional[int] = None
        self.done = False


class LiveLoop:
    """Serves the cameras of ``states`` (their sources :func:`polled`) for ``runner`` on one thread,
    :attr:`thread`, connecting at most ``max_connecting`` at once."""

    def __init__(self, runner: "Runner", states: "list[_ReadState]", max_connecting: int):
        self.r = runner
        self._cams = {st.cam: _Camera(st.cam, st.src, st) for st in states}
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._connected: queue.SimpleQueue = queue.SimpleQueue()  # (camera, None or why it did not connect)
        self._max_connecting = max(1, max_connecting)
        self._waiting: deque[tuple[str, bool]] = deque()  # attempts to start: (camera, reopen)
        self._attempts: list[threading.Thread] = []  # attempts started (pruned as they end)
        self._running = 0  # attempts started and not yet taken by the loop
        self._timers: list[tuple[float, int, str]] = []  # (time.monotonic() due, tie-break, camera): reconnect
        self._tie = itertools.count()
        self.thread = threading.Thread(target=self._run, name="dvpipe-live-io", daemon=True)

    # -- the loop --------------------------------------------------------------------------------------
    def _run(self) -> None:
        r = self.r
        r._go.wait()
        try:
            for c in self._cams.values():
                self._start_series(c)
            while not r.stop_event.is_set() and not all(c.done for c in self._cams.values()):
                timeout = _HELD_POLL_S if any(c.held is not None for c in self._cams.values()) else _IDLE_POLL_S
                due = self._due()
                if self._timers:
                    due = min(due, self._timers[0][0])
                timeout = min(timeout, max(0.0, due - time.monotonic()))
                served = set()
                for key, _events in self._sel.select(timeout):
                    if key.data is None:
                        self._drain_wake()
                    else:
                        self._readable(key.data)
                        served.add(key.data.cam)
                self._take_connected()
                now = time.monotonic()
                self._serve_due(now, served)
                while self._timers and self._timers[0][0] <= now:
                    self._connect(self._cams[heapq.heappop(self._timers)[2]])
                self._offer_held()
                self._check_read_timeouts(now)
        finally:
            for t in self._attempts:  # each ends within its source's open timeout (the handshake's deadline)
                t.join()
            for c in self._cams.values():
                if c.held is not None:  # read before the stop: it enters and is dropped as "shutdown"
                    r.sync.push(c.held, r.stop_event, on_enter=r.acc.enter)
                    c.st.health.pushing_frame(False, r.clock())
                c.st.health.finish(r.clock())
            self._sel.close()
            self._wake_r.close()
            self._wake_w.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # the loop has ended and closed it
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    # -- connecting (a thread per attempt: the handshake waits for the server) ----------------------------
    def _start_series(self, c: _Camera) -> None:
        """The first attempt of a series (the first connection, or a reconnect): at once, then the back-off."""
        c.delays = c.src.backoff.delays_s() if c.src.backoff is not None else iter(())
        c.attempt = 0
        self._connect(c)

    def _connect(self, c: _Camera) -> None:
        c.attempt += 1
        self._waiting.append((c.cam, not c.first or c.attempt > 1))
        self._start_attempts()

    def _start_attempts(self) -> None:
        """Start waiting attempts, each on a thread of its own that ends with it, at most
        ``max_connecting`` at once: no thread is kept for cameras that are streaming."""
        while self._waiting and self._running < self._max_connecting and not self.r.stop_event.is_set():
            cam, again = self._waiting.popleft()
            self._attempts = [t for t in self._attempts if t.is_alive()]
            t = threading.Thread(target=self._attempt, args=(cam, again), name="dvpipe-connect", daemon=True)
            self._attempts.append(t)
            self._running += 1
            t.start()

    def _attempt(self, cam: str, again: bool) -> None:
        src = self._cams[cam].src
        reason: Optional[str] = None
        try:
            if self.r.stop_event.is_set():
                reason = "stopped"
            elif again:
                src.reopen()
            else:
                src.open()
        except SourceError as e:
            reason = e.reason
        except Exception as e:  # noqa: BLE001 - any failure of a source is that camera's failure
            reason = f"{type(e).__name__}: {e}"
        self._connected.put((cam, reason))
        self._wake()

    def _take_connected(self) -> None:
        r = self.r
        while True:
            try:
                cam, reason = self._connected.get_nowait()
            except queue.Empty:
                self._start_attempts()
                return
            self._running -= 1
            c = self._cams[cam]
            h = c.st.health
            if r.stop_event.is_set():
                return
            if reason is None:
                if c.first:
                    r._count_opened()
                    r._streaming(cam, c.src)
                else:
                    h.reconnected(r.clock())
                    h.nominal_fps = c.src.nominal_fps() or h.nominal_fps
                    c.st.gap_next = True
                c.first, c.attempt, c.connected = False, 0, True
                c.src.nonblocking = True
                c.last_data = time.monotonic()
                self._watch(c)
                self._drain(c)  # what came with the answer to PLAY
                continue
            delay = next(c.delays, None)
            if delay is None:
                final = reason if c.attempt == 1 else f"{reason} (after {c.attempt} attempts)"
                if c.first:
                    r._count_opened()
                    r._fail(cam, f"source did not open: {final}")
                else:
                    r._fail(cam, f"stream lost and did not come back: {final}")
                c.done = True
                continue
            h.state = "connecting" if c.first else "reconnecting"
            h.detail = f"attempt {c.attempt}: {reason}"
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._tie), cam))

    def _lost(self, c: _Camera, reason: str) -> None:
        """The connection of ``c`` is lost: reconnect with the source's back-off, or fail."""
        r = self.r
        self._unregister(c)
        c.st.health.disconnected(r.clock(), reason)
        if c.src.backoff is None:
            r._fail(c.cam, f"stream lost: {reason}")
            c.done = True
            return
        self._start_series(c)

    def _end(self, c: _Camera, reason: str, state: str = "failed") -> None:
        """``c``'s reading is over (the source failed or ended)."""
        self._unregister(c)
        self.r._fail(c.cam, reason, state=state)
        c.done = True

    def _unregister(self, c: _Camera) -> None:
        if c.connected:
            c.connected = False
            self._unwatch(c)

    def _watch(self, c: _Camera) -> None:
        for fd in c.src.filenos():
            self._sel.register(fd, selectors.EVENT_READ, c)

    def _unwatch(self, c: _Camera) -> None:
        for fd in c.src.filenos():
            try:
                self._sel.unregister(fd)
            except (KeyError, ValueError):
                pass

    # -- reading ----------------------------------------------------------------------------------------
    def _due(self) -> float:
        """The earliest time (``time.monotonic()``) a watched camera has work without new data (its
        source's ``due_s``: a packet reordering wait that ends); infinity when none has."""
        times = [t for c in self._cams.values() if c.connected and c.held is None
                 and (t := c.src.due_s()) is not None]
        return min(times, default=float("inf"))

    def _serve_due(self, now: float, served: set) -> None:
        """Let each watched camera whose work is due and that had no data this round do it (and hand on
        the frames it completes)."""
        for c in self._cams.values():
            if c.connected and c.held is None and c.cam not in served:
                due = c.src.due_s()
                if due is not None and due <= now:
                    self._readable(c)

    def _readable(self, c: _Camera) -> None:
        try:
            if c.src.receive():
                c.last_data = time.monotonic()
        except StreamLost as e:
            self._drain(c)  # the units completed before the end still count
            if c.connected:
                self._lost(c, e.reason)
            return
        except SourceError as e:
            self._drain(c)
            if c.connected:
                self._end(c, e.reason)
            return
        except Exception as e:  # noqa: BLE001 - a broken source must not take the others (and this thread) down
            self._drain(c)
            if c.connected:
                self._end(c, f"{type(e).__name__}: {e}")
            return
        self._drain(c)

    def _drain(self, c: _Camera) -> None:
        """Read the frames completed and hand them to the synchroniser (until one has to wait for room)."""
        r = self.r
        while c.held is None and c.connected and not r.stop_event.is_set():
            try:
                item = c.src.read()
            except NothingYet:
                return
            except StreamLost as e:
                self._lost(c, e.reason)
                return
            except SourceError as e:
                self._end(c, e.reason)
                return
            except Exception as e:  # noqa: BLE001 - a broken source must not take the others down
                self._end(c, f"{type(e).__name__}: {e}")
                return
            if item is None:
                self._end(c, "end of input", "ended")
                return
            c.held = r._arrived(c.st, item)
            self._offer(c)

    def _offer(self, c: _Camera) -> None:
        r = self.r
        assert c.held is not None
        entered = r.sync.offer(c.held, on_enter=r.acc.enter)
        if entered is None:  # full, without the latest-frame policy: back-pressure; stop reading the socket
            if c.held_since is None:
                c.held_since = r.clock()
                c.st.health.pushing_frame(True, c.held_since)
                if c.connected:
                    self._unwatch(c)
            return
        if c.held_since is not None:
            t = r.clock()
            c.st.health.pushing_frame(False, t)
            r.sync.blocked_ns[c.cam] += t - c.held_since
            c.held_since = None
            if c.connected:
                self._watch(c)
        c.held = None  # entered, or the synchroniser is closed (the run is stopping: it was never counted)

    def _offer_held(self) -> None:
        for c in self._cams.values():
            if c.held is not None:
                self._offer(c)
                if c.held is None:
                    self._drain(c)

    def _check_read_timeouts(self, now: float) -> None:
        """A connected camera without a byte for ``read_timeout_s``: a stall; past ``stall_reconnect_s``
        without a frame, a reconnect."""
        r = self.r
        for c in self._cams.values():
            if not c.connected or c.held is not None:
                continue
            timeout = c.src.read_timeout_s
            if now - c.last_data < timeout:
                continue
            c.last_data = now
            reason = StreamStalled.read_timeout(c.src.cfg.uri, timeout).reason
            without_ns = c.st.health.read_timed_out(r.clock(), reason)
            limit = c.src.stall_reconnect_s
            if c.src.backoff is not None and limit is not None and without_ns >= limit * 1e9:
                self._lost(c, f"no frame for {without_ns / 1e9:.1f} s on an open connection (more than "
                              f"stall_reconnect_s {limit:g} s)")
