"""The pipeline's worker threads: ``threads - 1`` workers plus the thread that calls ``run``.

``run(fn, n)`` calls ``fn(0) .. fn(n - 1)`` once each, the calling thread and the workers taking
indices from one shared counter, and returns when all have finished. Compared with
``ThreadPoolExecutor.map`` there is no future per item and the caller works instead of waiting,
so a frame set costs one wake-up per worker rather than a queue hand-off per camera: about
0.2 ms less per 6-camera set at 2 threads on a 2-core machine (docs/performance.md). The heavy
work inside ``fn`` (decoders, OpenCV, the compiled kernel) releases the GIL, so the threads run
in parallel.
"""
from __future__ import annotations

import itertools
import threading
from typing import Callable, Optional


class _Run:
    """One ``run`` call: the index counter, how many items finished, the first exception."""

    __slots__ = ("fn", "n", "next_index", "done", "error")

    def __init__(self, fn: Callable[[int], None], n: int):
        self.fn, self.n = fn, n
        self.next_index = itertools.count().__next__  # atomic under the GIL
        self.done = 0
        self.error: Optional[BaseException] = None


class CameraPool:
    """``threads - 1`` daemon workers; the caller of :meth:`run` is the last thread."""

    def __init__(self, threads: int, name: str = "dvpipe-cam"):
        self._cv = threading.Condition()
        self._run: Optional[_Run] = None
        self._generation = 0
        self._closed = False
        self._threads = [threading.Thread(target=self._worker, name=f"{name}_{k}", daemon=True)
                         for k in range(threads - 1)]
        for t in self._threads:
            t.start()

    def _work(self, run: _Run) -> None:
        while True:
            i = run.next_index()
            if i >= run.n:
                return
            try:
                run.fn(i)
            except BaseException as e:  # noqa: BLE001 - handed to the caller of run()
                if run.error is None:
                    run.error = e
            with self._cv:
                run.done += 1
                if run.done == run.n:
                    self._cv.notify_all()

    def _worker(self) -> None:
        seen = 0
        while True:
            with self._cv:
                while self._generation == seen and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                seen, run = self._generation, self._run
            if run is not None:  # None: woke after that run had finished
                self._work(run)  # a worker that wakes late finds the counter spent and sleeps again

    def run(self, fn: Callable[[int], None], n: int) -> None:
        """Call ``fn(i)`` for every ``i < n`` across the threads; re-raises the first exception."""
        run = _Run(fn, n)
        if self._threads and n > 1:
            with self._cv:
                self._run = run
                self._generation += 1
                self._cv.notify_all()
        self._work(run)
        with self._cv:
            while run.done < n:
                self._cv.wait()
            self._run = None  # frees the frame set the closure holds
        if run.error is not None:
            raise run.error

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for t in self._threads:
            t.join()
