"""stdout that a reader may leave: ``dvpipe validate ... | head -1``."""
from __future__ import annotations

import os

__all__ = ["PipeSafe"]


class PipeSafe:
    """A text stream that stops writing, silently, once its reader has gone (``BrokenPipeError``:
    ``dvpipe run | head -1``); the run goes on, its files are written and its exit status is its own.
    The stream's descriptor is then pointed at /dev/null so that Python's final flush is quiet too."""

    def __init__(self, stream):
        self.stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # not a real file (tests' capture): nothing to quiet
            pass

    def __getattr__(self, name: str):
        return getattr(self.stream, name)
