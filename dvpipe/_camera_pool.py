"""The pipeline's worker threads, with one lane per camera and no barrier between frame sets.

A frame set is one *submission* of ``n`` items, item ``i`` being camera ``i``'s work.
``submit(fn, n)`` queues the items and returns a :class:`Ticket` at once; ``wait(ticket)`` returns
when all of its items have finished. Items run first-in first-out across submissions, with one rule:
camera ``i``'s item of a set never starts before (nor runs beside) its item of an earlier set, since
a camera's decoder keeps state from picture to picture. Set ``k + 1``'s cameras therefore start on
the cores that set ``k``'s slowest camera leaves idle, instead of every core waiting for it. With
:attr:`CameraPool.locality` above 1 a worker runs up to that many queued items of one lane in a row (a
camera's decoder state stays in its caches), at the cost of the earlier set's other cameras waiting
longer.

``run(fn, n)`` is ``submit`` then ``wait(help=True)``: the calling thread works on the queued items
too rather than sleeping (a pool built with ``threads`` has ``threads - 1`` workers plus the
caller), which costs one wake-up per worker per set rather than a hand-off per camera. A caller that
submits several sets ahead (:meth:`dvpipe.Pipeline.submit`) does other work meanwhile, so the pool
grows to ``threads`` workers (:meth:`CameraPool.grow`). A caller waiting for a set (``wait``, ``join``)
is woken when the set settles, not at each of its items (a helping caller also when an item is
queued); workers are woken when items are queued.

The heavy work inside an item (decoders, OpenCV, the compiled kernel) releases the GIL, so the
threads run in parallel. Errors: the first exception of a submission's items is re-raised by
``wait`` once every started item of it has finished. ``KeyboardInterrupt`` / ``SystemExit`` (in
an item, or while the caller waits) cancel that submission: its items not yet started are skipped,
so Ctrl-C takes effect within one camera's work, and none of its items is still running when
``wait`` raises. The workers hold only the shared state, not the pool: a pool that is
garbage-collected without ``close()`` stops its threads.
"""
from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Callable, Optional

__all__ = ["CameraPool", "Ticket"]


class Ticket:
    """One submission: its items, how many finished or were skipped, the first exception."""

    __slots__ = ("fn", "n", "order", "done", "skipped", "cancelled", "error")

    def __init__(self, fn: Callable[[int], None], n: int, order: int):
        self.fn, self.n, self.order = fn, n, order
        self.done = self.skipped = 0
        self.cancelled = False
        self.error: Optional[BaseException] = None

    def settled(self) -> bool:
        """Every item finished, or was skipped after a cancellation."""
        return self.done + self.skipped == self.n


class _Shared:
    """What the callers and the workers share (the workers never reference the pool itself)."""

    def __init__(self):
        lock = threading.Lock()
        self.cv = threading.Condition(lock)  # workers wait here for ready items
        # callers of wait / join wait here, woken when a submission settles -- and, while some of them help
        # (``helpers``), when an item is queued -- not at every item (a frame set's waiter woke once per camera)
        self.settled_cv = threading.Condition(lock)
        self.helpers = 0
        self.ready: deque[tuple[Ticket, int]] = deque()  # items whose lane is free, first in first out
        self.lanes: dict[int, deque[Ticket]] = {}  # lane -> later submissions waiting for its current item
        self.busy: set[int] = set()  # lanes with an item queued in `ready` or running
        self.closed = False
        self.locality = 1  # items of one lane a worker runs in a row when later ones wait (CameraPool.locality)

    def submit(self, ticket: Ticket) -> None:
        with self.cv:
            for i in range(ticket.n):
                if i in self.busy:
                    self.lanes.setdefault(i, deque()).append(ticket)
                else:
                    self.busy.add(i)
                    self.ready.append((ticket, i))
            self.cv.notify_all()  # (a helping waiter takes only its own set's items or earlier ones: not these)

    def _take(self, upto: Optional[Ticket]) -> Optional[tuple[Ticket, int]]:
        """The first ready item (under ``cv``); with ``upto``: the first of ``upto`` or an earlier submission
        (a caller waiting for a set helps with it, not with the sets after it). Items of a cancelled
        submission met on the way are skipped."""
        k = 0
        while k < len(self.ready):
            ticket, i = self.ready[k]
            if ticket.cancelled:
                del self.ready[k]
                ticket.skipped += 1
                self._release(i)
                if ticket.settled():
                    self.settled_cv.notify_all()
                continue
            if upto is None or ticket.order <= upto.order:
                del self.ready[k]
                return ticket, i
            k += 1
        return None

    def _release(self, lane: int) -> None:
        """Lane ``lane``'s item finished (under ``cv``): queue its next submission's item, if any."""
        waiting = self.lanes.get(lane)
        if waiting:
            self.ready.append((waiting.popleft(), lane))
            self.cv.notify()
            if self.helpers:
                self.settled_cv.notify_all()
        else:
            self.busy.discard(lane)

    def execute(self, ticket: Ticket, i: int, keep: bool = False) -> Optional[tuple[Ticket, int]]:
        """Run item ``i`` of ``ticket``. ``keep``: hand back the lane's next item (of a later submission)
        for this thread to run at once, if one waits, instead of queueing it behind the others."""
        error = None
        try:
            ticket.fn(i)
        except BaseException as e:  # noqa: BLE001 - handed to the caller of wait()
            error = e
        with self.cv:
            ticket.done += 1
            if error is not None and ticket.error is None:
                ticket.error = error
            if error is not None and not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit
                ticket.cancelled = True
            if ticket.settled():
                self.settled_cv.notify_all()
            waiting = self.lanes.get(i)
            if keep and waiting and not waiting[0].cancelled and not self.closed:
                return waiting.popleft(), i
            self._release(i)
        return None

    def worker(self) -> None:
        item: Optional[tuple[Ticket, int]] = None
        streak = 0  # items of one lane run in a row by this thread
        while True:
            if item is None:
                with self.cv:
                    item = self._take(None)
                    while item is None:
                        if self.closed:
                            return
                        self.cv.wait()
                        item = self._take(None)
                streak = 0
            streak += 1
            item = self.execute(*item, keep=streak < self.locality)

    def shut(self) -> None:
        """Stop the workers; items not started are skipped (their waiters return)."""
        with self.cv:
            self.closed = True
            while self.ready:
                self.ready.popleft()[0].skipped += 1
            for waiting in self.lanes.values():  # behind a queued item, or behind one still running
                for t in waiting:
                    t.skipped += 1
            self.lanes.clear()
            self.busy.clear()
            self.cv.notify_all()
            self.settled_cv.notify_all()


class CameraPool:
    """Worker threads with one lane per camera: ``threads - 1`` workers to start with (the caller of
    :meth:`run` is the last thread); :meth:`grow` adds the last one for callers that submit ahead."""

    def __init__(self, threads: int, name: str = "dvpipe-cam"):
        self._shared = shared = _Shared()
        self._name = name
        self._order = 0
        self._threads: list[threading.Thread] = []
        self.grow(threads - 1)
        # an unclosed pool stops its workers when collected -- but not at interpreter exit: waking daemon
        # threads while the interpreter finalizes makes them pthread_exit, which aborts a process that
        # has C++ libraries (torch) loaded ("terminate called without an active exception")
        weakref.finalize(self, shared.shut).atexit = False

    @property
    def workers(self) -> int:
        """Worker threads started (the caller of :meth:`run` not counted)."""
        return len(self._threads)

    @property
    def locality(self) -> int:
        """Items of one lane (camera) a worker runs in a row when that lane's later items are already queued
        (1, the default: first in first out across lanes). More keeps a camera's decoder state in the
        worker's caches, at the cost of the other cameras' items of the earlier set waiting longer."""
        return self._shared.locality

    @locality.setter
    def locality(self, items: int) -> None:
        self._shared.locality = max(1, int(items))

    def grow(self, workers: int) -> None:
        """Start workers until there are ``workers`` of them."""
        while len(self._threads) < workers:
            t = threading.Thread(target=self._shared.worker, name=f"{self._name}_{len(self._threads)}", daemon=True)
            t.start()
            self._threads.append(t)

    def submit(self, fn: Callable[[int], None], n: int) -> Ticket:
        """Queue ``fn(0) .. fn(n - 1)`` (item ``i`` in lane ``i``, after that lane's earlier items); returns at once."""
        self._order += 1
        ticket = Ticket(fn, n, self._order)
        if n:
            self._shared.submit(ticket)
        return ticket

    def wait(self, ticket: Ticket, *, help: bool = False) -> None:
        """Return when ``ticket``'s items have all finished; re-raises the first exception of one.

        ``help``: the calling thread runs queued items of this submission (and of earlier ones) itself
        while it waits. A ``BaseException`` while waiting (Ctrl-C) cancels the submission's items not
        yet started and returns (re-raising) only once none of its items is running."""
        shared = self._shared
        cv = shared.cv
        try:
            while True:
                with cv:
                    if ticket.settled():
                        break
                    helping = help or not self._threads
                    item = shared._take(ticket) if helping else None
                    if item is None:
                        if not ticket.settled():  # (taking may have skipped its last cancelled items)
                            shared.helpers += helping
                            try:
                                shared.settled_cv.wait()
                            finally:
                                shared.helpers -= helping
                        continue
                shared.execute(*item)
        except BaseException:  # Ctrl-C while waiting: start nothing more of it, let started items finish
            self._cancel(ticket)
            raise
        if ticket.error is not None:
            error, ticket.error = ticket.error, None
            raise error

    def join(self, ticket: Ticket) -> None:
        """Return when ``ticket``'s items have all finished (or were skipped), without helping and without
        raising their error (:meth:`wait` still raises it)."""
        with self._shared.cv:
            while not ticket.settled():
                self._shared.settled_cv.wait()

    def _cancel(self, ticket: Ticket) -> None:
        shared = self._shared
        cv = shared.cv
        with cv:
            ticket.cancelled = True
        while True:
            try:
                with cv:
                    # queued items of a cancelled ticket are skipped when taken; take them now if no worker will
                    while not ticket.settled():
                        item = self._shared._take(ticket)
                        if item is not None:  # an item of an earlier submission: run it, its lane waits on it
                            cv.release()
                            try:
                                self._shared.execute(*item)
                            finally:
                                cv.acquire()
                        elif not ticket.settled():
                            shared.helpers += 1  # it takes the ticket's items as they are queued
                            try:
                                shared.settled_cv.wait()
                            finally:
                                shared.helpers -= 1
                break
            except KeyboardInterrupt:  # a second Ctrl-C: still wait, items take milliseconds
                continue

    def run(self, fn: Callable[[int], None], n: int) -> None:
        """Call ``fn(i)`` for every ``i < n`` across the threads (the caller too); re-raises the first exception."""
        self.wait(self.submit(fn, n), help=True)

    def close(self) -> None:
        """Stop the workers (idempotent); items not started are skipped."""
        self._shared.shut()
        for t in self._threads:
            t.join()
