"""The one-line progress display of ``dvpipe run`` (:class:`ProgressLine`)."""
from __future__ import annotations

import math
import sys
from typing import Any, Callable, Optional, TextIO

from ..latency.clock import now_ns

__all__ = ["ProgressLine", "format_eta"]


def format_eta(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss`` from an hour) of a number of seconds, rounded to the second (>= 0);
    ``?`` for a number that is not finite."""
    if not math.isfinite(seconds):
        return "?"
    s = int(round(max(0.0, seconds)))
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60}:{rem % 60:02d}"


class ProgressLine:
    """A one-line progress display: sets done (of N), rate, an ETA when the run's length is known
    (``total`` sets: from the rate so far; ``duration_s``: the time left), drops, camera problems.

    On a terminal the line is redrawn in place (at most 10 times a second, the rest of the row erased);
    elsewhere a line is printed every ``every_s`` seconds. A stream that can no longer be written (a
    reader that went away, a full disk, a closed stderr) ends the display, not the run. ``runner`` is a
    :class:`~dvpipe.deploy.Runner` (``sets_done``, ``started_ns``, ``acc``); ``clock`` is its monotonic
    clock in ns.
    """

    #: the longest line drawn on a terminal (characters)
    WIDTH = 160

    def __init__(self, total: Optional[int] = None, duration_s: Optional[float] = None,
                 stream: Optional[TextIO] = sys.stderr, every_s: float = 5.0, clock: Callable[[], int] = now_ns):
        self.total = total
        self.duration_s = duration_s
        self.stream = stream
        try:
            self.tty = bool(stream is not None and stream.isatty())
        except (AttributeError, OSError, ValueError):
            self.tty = False
        self.every_ns = int((0.1 if self.tty else every_s) * 1e9)
        self._last = 0
        self._t0: Optional[int] = None
        self._drawn = False
        self.clock = clock  # monotonic ns (injected by tests)

    def __call__(self, runner: Any) -> None:
        now = self.clock()
        if self._t0 is None:
            self._t0 = runner.started_ns or now
        if now - self._last < self.every_ns:
            return
        self._last = now
        self._draw(runner, now)

    def _draw(self, runner: Any, now: int) -> None:
        done = runner.sets_done
        # close() may draw before any update (a run that ended before its first set): start as update() would
        t0 = self._t0 if self._t0 is not None else (runner.started_ns or now)
        elapsed = max(1e-9, (now - t0) / 1e9)
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
        trouble = [(c, h) for c, h in acc.health.items() if h.state not in ("streaming", "ended", "starting")]
        issues = [f"{c} {h.state}" for c, h in trouble]
        if len(trouble) == 1 and trouble[0][1].detail:  # one camera down: why (a refused connection...), shortened
            detail = " ".join(str(trouble[0][1].detail).split())
            issues[0] += f" ({detail if len(detail) <= 80 else detail[:77] + '...'})"
        line = (f"{bar}  {done / elapsed:.1f} sets/s  frames {t['entered']} in, {t['dropped']} dropped"
                + (f", {t['masked_slots']} masked" if t["masked_slots"] else "")
                + (f"  | {', '.join(issues)}" if issues else ""))
        if self.tty:
            self._write("\r" + line[:self.WIDTH] + "\x1b[K")  # ECMA-48 EL: erase the old line's tail
            self._drawn = True
        else:
            self._write(line + "\n")

    def _write(self, text: str) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # gone (EPIPE, ENOSPC, closed): the run goes on without its display
            self.stream = None

    def close(self, runner: Optional[Any] = None) -> None:
        if runner is not None and (self.tty or runner.sets_done):
            self._draw(runner, self.clock())
        if self.tty and self._drawn:
            self._write("\n")
