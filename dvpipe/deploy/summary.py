"""Frame accounting and the run summary.

Every frame a source delivers *enters* the run and leaves exactly once: **emitted** (a valid slot
of a batch) or **dropped** with a reason. :class:`Accounting` counts both per camera and checks the
invariant ``entered == emitted + dropped`` (frames still inside the runner are ``in_flight``; at
the end of a run there are none). Slots are counted apart from frames: a **masked** slot (zero
image, ``valid=False``) or a **stale** slot (a camera's last image reused) is not a frame entering.

Drop categories (the ``reason`` column of the summary):

================  ==============================================================================
corrupt           the decoder rejected the frame (corrupt or truncated data)
wrong_size        the frame's size differs from the camera's declared size (resolution change)
keyframe_wait     video: waiting for a keyframe after a corrupt, lost or mid-GOP start
decode_error      any other failure in a plan step
superseded        a newer frame replaced it (latest-frame policy) or a closer one matched the set
late              it arrived after its frame set was emitted
unmatched         no anchor-camera frame within the tolerance
set_dropped       its set was dropped because another camera was late (``sync.on_late: drop``)
shutdown          still queued when the run stopped (Ctrl-C, --frames, --duration)
================  ==============================================================================

Camera health is reported apart from drops: a camera is **stalled** when its source delivered
nothing for ``run.stall_timeout_ms`` (the source's fault), and under **back-pressure** when its
reader was blocked because the pipeline did not keep up (downstream's fault).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

__all__ = ["Accounting", "CameraHealth", "classify_drop", "DROP_CATEGORIES", "format_summary"]

DROP_CATEGORIES = ("corrupt", "wrong_size", "keyframe_wait", "decode_error", "superseded", "late", "unmatched",
                   "set_dropped", "shutdown")


def classify_drop(reason: str) -> str:
    """Category of a pipeline drop reason (``decode on cpu: truncated JPEG ...`` -> ``corrupt``)."""
    r = reason.lower()
    if "waiting for a keyframe" in r:
        return "keyframe_wait"
    if "but the camera declares" in r or "resolution" in r:
        return "wrong_size"
    if any(w in r for w in ("corrupt", "truncated", "not a jpeg", "not a png", "unrecognised", "rejected",
                            "raw frames must be", "invalid data")):
        return "corrupt"
    return "decode_error"


@dataclass
class CameraHealth:
    """Source-side state of one camera (for the progress line and the summary)."""

    state: str = "starting"  # starting, streaming, stalled, reconnecting, ended, failed
    detail: str = ""
    reconnects: int = 0
    disconnects: int = 0
    stalls: int = 0
    stalled_ns: int = 0
    blocked_ns: int = 0  # back-pressure: reader blocked on a full buffer
    last_arrival_ns: Optional[int] = None
    streaming_since_ns: Optional[int] = None
    stall_started_ns: Optional[int] = None
    events: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.events) < 20:
            self.events.append(text)


class Accounting:
    """Per-camera frame counts, drops by category, and slot counts. Thread-safe."""

    def __init__(self, cameras: Sequence[str]):
        self.cameras = list(cameras)
        self._lock = threading.Lock()
        self.entered = {c: 0 for c in self.cameras}
        self.emitted = {c: 0 for c in self.cameras}
        self.dropped: dict[str, dict[str, int]] = {c: {} for c in self.cameras}
        self.examples: dict[tuple[str, str], str] = {}
        self.masked: dict[str, dict[str, int]] = {c: {} for c in self.cameras}
        self.stale = {c: 0 for c in self.cameras}
        self.fallbacks: dict[str, dict[str, int]] = {c: {} for c in self.cameras}
        self.sets_emitted = 0
        self.model_errors = 0
        self.health = {c: CameraHealth() for c in self.cameras}

    def enter(self, camera: str) -> None:
        with self._lock:
            self.entered[camera] += 1

    def emit(self, camera: str) -> None:
        with self._lock:
            self.emitted[camera] += 1

    def drop(self, camera: str, category: str, detail: str = "") -> None:
        with self._lock:
            d = self.dropped[camera]
            d[category] = d.get(category, 0) + 1
            self.examples.setdefault((camera, category), detail)

    def fallback(self, camera: str, step: str, from_backend: str, to_backend: str, reason: str) -> None:
        """A step that failed on ``from_backend`` for one frame and ran on ``to_backend`` instead."""
        key = f"{step}: {from_backend} -> {to_backend}"
        with self._lock:
            f = self.fallbacks[camera]
            f[key] = f.get(key, 0) + 1
            self.examples.setdefault((camera, "fallback " + key), reason)

    def mask(self, camera: str, reason: str) -> None:
        key = reason.split(":", 1)[0].strip() or reason
        with self._lock:
            m = self.masked[camera]
            m[key] = m.get(key, 0) + 1
            self.examples.setdefault((camera, "masked:" + key), reason)

    def reuse(self, camera: str) -> None:
        with self._lock:
            self.stale[camera] += 1

    def dropped_total(self, camera: Optional[str] = None) -> int:
        cams = [camera] if camera else self.cameras
        return sum(sum(self.dropped[c].values()) for c in cams)

    def in_flight(self, camera: Optional[str] = None) -> int:
        """Frames entered but neither emitted nor dropped yet (0 at the end of a run)."""
        cams = [camera] if camera else self.cameras
        return sum(self.entered[c] - self.emitted[c] - sum(self.dropped[c].values()) for c in cams)

    def check(self) -> list[str]:
        """Violations of ``entered == emitted + dropped`` per camera (empty when all is accounted for)."""
        out = []
        for c in self.cameras:
            d = sum(self.dropped[c].values())
            if self.entered[c] != self.emitted[c] + d:
                out.append(f"{c}: {self.entered[c]} entered != {self.emitted[c]} emitted + {d} dropped")
        return out

    def totals(self) -> dict[str, int]:
        return {"entered": sum(self.entered.values()), "emitted": sum(self.emitted.values()),
                "dropped": self.dropped_total(), "masked_slots": sum(sum(m.values()) for m in self.masked.values()),
                "stale_slots": sum(self.stale.values()), "fallbacks": sum(sum(f.values()) for f in self.fallbacks.values()),
                "sets": self.sets_emitted}

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (``summary.json``)."""
        cams = {}
        for c in self.cameras:
            h = self.health[c]
            cams[c] = {
                "entered": self.entered[c], "emitted": self.emitted[c], "dropped": dict(self.dropped[c]),
                "masked_slots": dict(self.masked[c]), "stale_slots": self.stale[c],
                "fallbacks": dict(self.fallbacks[c]),
                "source": {"state": h.state, "detail": h.detail, "disconnects": h.disconnects,
                           "reconnects": h.reconnects, "stalls": h.stalls, "stalled_s": h.stalled_ns / 1e9,
                           "backpressure_s": h.blocked_ns / 1e9, "events": list(h.events)},
            }
        return {"schema": "dvpipe.run-summary/1", "totals": self.totals(), "model_errors": self.model_errors,
                "accounted": not self.check(), "cameras": cams,
                "examples": {f"{c}/{k}": v for (c, k), v in self.examples.items()}}


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i])
                             for i in range(len(r))).rstrip() for r in rows]


def format_summary(acc: Accounting) -> str:
    """The end-of-run table: frames per camera and reason, slots, source health."""
    cats = [k for k in DROP_CATEGORIES if any(acc.dropped[c].get(k) for c in acc.cameras)]
    cats += sorted({k for c in acc.cameras for k in acc.dropped[c]} - set(cats))
    head = ["camera", "in", "emitted", "dropped"] + cats + ["masked", "stale", "fallbacks", "source"]
    rows = [head]
    for c in acc.cameras:
        h = acc.health[c]
        src = h.state
        extra = []
        if h.disconnects:
            extra.append(f"{h.disconnects} disconnect{'s' if h.disconnects != 1 else ''}, {h.reconnects} reconnected")
        if h.stalls:
            extra.append(f"stalled {h.stalls}x {h.stalled_ns / 1e9:.1f} s")
        if h.blocked_ns > 1e8:
            extra.append(f"back-pressure {h.blocked_ns / 1e9:.1f} s")
        if h.state == "failed" and h.detail:
            extra.append(h.detail)
        if extra:
            src += " (" + "; ".join(extra) + ")"
        rows.append([c, str(acc.entered[c]), str(acc.emitted[c]), str(acc.dropped_total(c))]
                    + [str(acc.dropped[c].get(k, 0) or "") for k in cats]
                    + [str(sum(acc.masked[c].values()) or ""), str(acc.stale[c] or ""),
                   str(sum(acc.fallbacks[c].values()) or ""), src])
    t = acc.totals()
    rows.append(["total", str(t["entered"]), str(t["emitted"]), str(t["dropped"])]
                + [str(sum(acc.dropped[c].get(k, 0) for c in acc.cameras)) for k in cats]
                + [str(t["masked_slots"] or ""), str(t["stale_slots"] or ""), str(t["fallbacks"] or ""), ""])
    lines = [f"frames: {t['entered']} in = {t['emitted']} emitted + {t['dropped']} dropped"
             + ("" if not acc.check() else "  (NOT ACCOUNTED: " + "; ".join(acc.check()) + ")")
             + f"; {t['sets']} frame sets"]
    lines += _table(rows, right=set(range(1, len(head) - 1)))
    by_reason: dict[tuple[str, str], list[str]] = {}
    for (cam, cat), text in acc.examples.items():
        if text:
            by_reason.setdefault((cat, text), []).append(cam)
    for k, ((cat, text), cams) in enumerate(by_reason.items()):
        if k == 10:
            lines.append(f"  ... {len(by_reason) - 10} more reasons in summary.json")
            break
        if len(cams) == 1:
            who = cams[0]
        else:
            who = f"{len(cams)} cameras" if len(cams) == len(acc.cameras) else ", ".join(cams)
        lines.append(f"  {cat} ({who}): {text}")
    if acc.model_errors:
        lines.append(f"  model errors: {acc.model_errors}")
    return "\n".join(lines)
