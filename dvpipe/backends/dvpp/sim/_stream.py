"""A stream of the software device: the queue of calls enqueued on it, run at its synchronisation."""
from __future__ import annotations

import threading
from typing import Callable, Optional

__all__ = ["_Stream"]


class _Stream:
    def __init__(self, context: Optional[int] = None) -> None:
        self.queue: list[Callable[[], int]] = []
        self.lock = threading.Lock()
        #: the context current on the creating thread: the stream belongs to it (107003 from any other)
        self.context = context
