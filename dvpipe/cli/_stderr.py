"""stderr carries dvpipe's lines: what decoders' C libraries and Python's warnings print during a run
is counted and summarised in one line at its end, not left on the terminal raw.

* **C libraries** (libjpeg in OpenCV: ``Corrupt JPEG data: premature end of data segment``; FFmpeg:
  ``[h264 @ 0x55...] ...``) write to file descriptor 2. While :class:`LibraryMessages` is active, fd 2
  is a pipe read by a thread; a line of a known decoder form is counted (by its text, addresses and
  numbers made generic), any other line is passed on unchanged. dvpipe's own lines (``sys.stderr``)
  go straight to the real stderr.
* **Python warnings** (numpy's ``RuntimeWarning: invalid value encountered in divide``...) are counted
  by category and message instead of being printed (runtime and user warnings: every occurrence,
  not only the first of each line of code).

The verdicts on the frames are dvpipe's own (a damaged frame is a ``corrupt`` drop or flagged, with
its reason, whatever the library printed): these lines are only the libraries' side of it.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import warnings
from collections import Counter
from typing import Any, Optional

__all__ = ["LibraryMessages", "DECODER_LINE"]

#: lines of decoders' C libraries: libjpeg's warnings and errors, FFmpeg's log lines ("[h264 @ 0x...]")
DECODER_LINE = re.compile(r"^(Corrupt JPEG data|Premature end of JPEG file|Invalid SOS parameters|Bogus |"
                          r"Unsupported JPEG|Warning: |libpng (warning|error)|\[[\w.-]+ @ 0x[0-9a-f]+\])")


def _generic(line: str) -> str:
    """A message with its addresses and numbers made generic, so that repeats count as one kind."""
    line = re.sub(r"@ 0x[0-9a-f]+", "@ 0x...", line.strip())
    return re.sub(r"\b\d+\b", "N", line)


def _fileno(stream: Any) -> Optional[int]:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


class LibraryMessages:
    """A context manager (see the module docstring). ``counts``: ``{message kind: times}`` after it."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._saved_fd: Optional[int] = None
        self._reader: Optional[threading.Thread] = None
        self._old_stderr: Any = None
        self._catch: Any = None
        self._lock = threading.Lock()

    def __enter__(self) -> "LibraryMessages":
        try:
            sys.stderr.flush()
            os.fstat(2)
            fd: Optional[int] = 2
        except (AttributeError, OSError, ValueError):  # no file descriptor 2 (embedded): warnings only
            fd = None
        if fd == 2:
            self._saved_fd = os.dup(2)
            read_end, write_end = os.pipe()
            os.dup2(write_end, 2)
            os.close(write_end)
            self._old_stderr = sys.stderr
            if _fileno(sys.stderr) == 2:  # dvpipe's lines go to the real stderr (a replaced sys.stderr is kept)
                sys.stderr = open(self._saved_fd, "w", buffering=1, encoding=getattr(sys.stderr, "encoding", None)
                                  or "utf-8", errors="replace", closefd=False)
            self._reader = threading.Thread(target=self._read, args=(read_end,), name="dvpipe-stderr", daemon=True)
            self._reader.start()
        self._catch = warnings.catch_warnings()  # restores the filters and showwarning on exit
        self._catch.__enter__()
        for category in (RuntimeWarning, UserWarning):  # every occurrence counted, not the first per line
            warnings.filterwarnings("always", category=category)
        warnings.showwarning = self._warning
        return self

    def __exit__(self, *exc: Any) -> None:
        self._catch.__exit__(*exc)
        if self._saved_fd is None:
            return
        sys.stderr.flush()
        os.dup2(self._saved_fd, 2)  # the pipe's last writer goes: the reader sees its end
        if self._reader is not None:
            self._reader.join(timeout=5.0)
        if sys.stderr is not self._old_stderr:
            sys.stderr.close()
            sys.stderr = self._old_stderr
        os.close(self._saved_fd)
        self._saved_fd = None

    def _read(self, fd: int) -> None:
        assert self._saved_fd is not None  # started by __enter__ after the dup
        with open(fd, "rb", closefd=True) as pipe:
            for raw in pipe:
                line = raw.decode("utf-8", "replace")
                if DECODER_LINE.match(line):
                    with self._lock:
                        self.counts[_generic(line)] += 1
                else:
                    os.write(self._saved_fd, raw)

    def _warning(self, message: Any, category: type, filename: str, lineno: int, file: Any = None,
                 line: Optional[str] = None) -> None:
        with self._lock:
            self.counts[f"{category.__name__}: {_generic(str(message))}"] += 1

    def summary(self, most: int = 3) -> Optional[str]:
        """One line: how many library messages were held back, the commonest kinds; None when none."""
        with self._lock:
            total = sum(self.counts.values())
            if not total:
                return None
            kinds = self.counts.most_common(most)
            rest = len(self.counts) - len(kinds)
        shown = "; ".join(f"{n} x {text}" for text, n in kinds) + (f"; {rest} more kinds" if rest > 0 else "")
        return (f"library messages: {total} held back from stderr ({shown}); the frames' verdicts are in the "
                "frame account")
