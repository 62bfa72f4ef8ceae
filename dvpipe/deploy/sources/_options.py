"""Option fields several built-in source types share (capture-time origin, look-ahead, stalls, rates)."""
from __future__ import annotations

from typing import Any

from .._validate import DAY_MS, HOUR_S, MAX_FPS, MAX_START_NS
from .registry import option

__all__ = ["start_ns", "lookahead", "stall_reconnect_s", "fps", "DAY_MS", "HOUR_S", "MAX_FPS"]


def start_ns(doc: str = "capture time of the first frame (ns since the Unix epoch)") -> Any:
    return option(None, doc, minimum=0, maximum=MAX_START_NS,
                  message="expected an integer in 0..2**62 (ns since the Unix epoch), got {got}")


def lookahead(doc: str) -> Any:
    return option(None, doc, minimum=0, maximum=64)


def stall_reconnect_s(default: float) -> Any:
    return option(default, "a stall (no frames, the connection open) longer than this reconnects (s; null: never)",
                  minimum=0, exclusive_min=True, maximum=HOUR_S)


def fps(default: Any, doc: str = "frames per second") -> Any:
    return option(default, doc, minimum=0, exclusive_min=True, maximum=MAX_FPS)
