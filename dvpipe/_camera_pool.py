"""The pipeline's worker threads: ``threads - 1`` workers plus the thread that calls ``run``.

``run(fn, n)`` calls ``fn(0) .. fn(n - 1)`` once each, the calling thread and the workers taking
indices from one shared counter, and returns when all have finished. Compared with
``ThreadPoolExecutor.map`` there is no future per item and the caller works instead of waiting,
so a frame set costs one wake-up per worker rather than a queue hand-off per camera: about
0.2 ms less per 6-camera set at 2 threads on a 2-core machine (docs/performance.md). The heavy
work inside ``fn`` (decoders, OpenCV, the compiled kernel) releases the GIL, so the threads run
in parallel.

Indices come from an ``itertools.count`` (atomic under the GIL); the only lock is taken once per
item, when it finishes. Errors: the first exception of any item is re-raised by ``run`` once
every started item has finished. ``KeyboardInterrupt`` / ``SystemExit`` (in an item, or while the
caller waits) cancel the run: the indices not yet handed out are drained and counted as skipped,
so Ctrl-C takes effect within one camera's work, and no item of that call is still running when
``run`` raises: the next call never overlaps it.

The workers hold only the shared state, not the pool: a pool that is garbage-collected without
``close()`` stops its threads.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import Callable, Optional


class _Run:
    """One ``run`` call: its items, how many finished or were skipped, the first exception."""

    __slots__ = ("fn", "n", "next_index", "done", "skipped", "cancelled", "error")

    def __init__(self, fn: Callable[[int], None], n: int):
        self.fn, self.n = fn, n
        self.next_index = itertools.count().__next__  # atomic under the GIL: each index is handed out once
        self.done = self.skipped = 0
        self.cancelled = False
        self.error: Optional[BaseException] = None

    def settled(self) -> bool:
        """Every item finished, or was skipped after a cancellation."""
        return self.done + self.skipped == self.n


class _Shared:
    """What the caller and the workers share (the workers never reference the pool itself)."""

    def __init__(self):
        self.cv = threading.Condition()
        self.run: Optional[_Run] = None
        self.generation = 0
        self.closed = False

    def work(self, run: _Run) -> None:
        """Take and run items until none is left or the run is cancelled (one lock per item, at its end)."""
        while not run.cancelled:
            i = run.next_index()
            if i >= run.n:
                return
            error = None
            try:
                run.fn(i)
            except BaseException as e:  # noqa: BLE001 - handed to the caller of run()
                error = e
            with self.cv:
                run.done += 1
                if error is not None and run.error is None:
                    run.error = error
                if run.settled():
                    self.cv.notify_all()
            if error is not None and not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit
                self.cancel(run)

    def cancel(self, run: _Run) -> None:
        """Start no more items of ``run``: the indices not yet handed out are counted as skipped."""
        run.cancelled = True
        skipped = 0
        while run.next_index() < run.n:
            skipped += 1
        with self.cv:
            run.skipped += skipped
            if run.settled():
                self.cv.notify_all()

    def worker(self) -> None:
        seen = 0
        while True:
            with self.cv:
                while self.generation == seen and not self.closed:
                    self.cv.wait()
                if self.closed:
                    return
                seen, run = self.generation, self.run
            if run is not None:  # None: woke after that run had finished
                self.work(run)  # a worker that wakes late finds nothing left and sleeps again

    def shut(self) -> None:
        with self.cv:
            self.closed = True
            self.cv.notify_all()


class CameraPool:
    """``threads - 1`` daemon workers; the caller of :meth:`run` is the last thread."""

    def __init__(self, threads: int, name: str = "dvpipe-cam"):
        self._shared = shared = _Shared()
        self._threads = [threading.Thread(target=shared.worker, name=f"{name}_{k}", daemon=True)
                         for k in range(threads - 1)]
        for t in self._threads:
            t.start()
        # an unclosed pool stops its workers when collected -- but not at interpreter exit: waking daemon
        # threads while the interpreter finalizes makes them pthread_exit, which aborts a process that
        # has C++ libraries (torch) loaded ("terminate called without an active exception")
        weakref.finalize(self, shared.shut).atexit = False

    def run(self, fn: Callable[[int], None], n: int) -> None:
        """Call ``fn(i)`` for every ``i < n`` across the threads; re-raises the first exception."""
        shared, run = self._shared, _Run(fn, n)
        cv = shared.cv
        if self._threads and n > 1:
            with cv:
                shared.run = run
                shared.generation += 1
                cv.notify_all()
        try:
            shared.work(run)
            with cv:
                while not run.settled():
                    cv.wait()
        except BaseException:  # Ctrl-C while waiting: start nothing more, let started items finish
            shared.cancel(run)
            while True:
                try:
                    with cv:
                        while not run.settled():
                            cv.wait()
                    break
                except KeyboardInterrupt:  # a second Ctrl-C: still wait, items take milliseconds
                    continue
            raise
        finally:
            with cv:
                shared.run = None  # frees the frame set the closure holds
        if run.error is not None:
            raise run.error

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        self._shared.shut()
        for t in self._threads:
            t.join()
