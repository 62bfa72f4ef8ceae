"""Frame accounting and the run summary.

Every frame a source delivers *enters* the run and leaves exactly once: **emitted** (a valid slot
of a batch) or **dropped** with a reason. :class:`Accounting` counts both per camera and checks the
invariant ``entered == emitted + dropped`` (frames still inside the runner are ``in_flight``; at
the end of a run there are none). Slots are counted apart from frames: a **masked** slot (zero
image, ``valid=False``, left so by the synchroniser: the camera's frame was late or missing, by reason)
or a **stale** slot (a camera's last image reused) is not a frame entering. A slot whose frame entered and
was dropped (corrupt, wrong size...) is zero and ``valid=False`` too, and is counted once, as that drop.

Drop categories (the ``reason`` column of the summary):

================  ==============================================================================
corrupt           the decoder rejected the frame (corrupt or truncated data)
wrong_size        the frame's size differs from the camera's declared size (resolution change)
too_large         an image file above ``decode.max_bytes``: not read
unreadable        an image file that could not be read (permissions, removed, an I/O error)
keyframe_wait     video: waiting for a keyframe after a corrupt, lost or mid-GOP start
decode_error      any other failure in a plan step
superseded        a newer frame replaced it (latest-frame policy) or a closer one matched the set
late              it arrived after its frame set was emitted
unmatched         no anchor-camera frame within the tolerance
set_dropped       its set was dropped because another camera was late (``sync.on_late: drop``)
shutdown          still queued when the run stopped (Ctrl-C, --frames, --duration)
================  ==============================================================================

Camera health is reported apart from drops: a camera is **stalled** when its source delivered
nothing for ``run.stall_timeout_ms`` or a read timed out on a connection that is still open (the
sender paused), **disconnected** while its connection is lost and the reader reconnects, and under
**back-pressure** when its reader was blocked because the pipeline did not keep up (downstream's
fault; not an outage: the source was not asked for frames).

**Outages.** An outage runs from the last frame before it to the first frame after it (monotonic
clock): a stall, a disconnect, or a stall that turned into a disconnect (``stall_reconnect_s``).
Its duration is split into the time stalled and the time disconnected, which sum to it. Frames lost
in an outage never entered the run, so they are not drops (``entered == emitted + dropped`` holds
as before); ``lost_in_outage`` estimates them beside the counts: within one connection, from the
stream's own timestamps (``round(pts gap / period) - 1``: 0 for a sender that paused and resumed
where it was, e.g. TCP holding the data); across a reconnect, or without timestamps, from the
arrival gap (``round(gap / period) - 1``). The period is the median of the last
:data:`RATE_WINDOW` frame intervals, else the source's declared rate; with neither, nothing is
estimated. An outage still open when the run ends counts ``floor(duration / period)``.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, cast

__all__ = ["Accounting", "CameraHealth", "Outage", "classify_drop", "DROP_CATEGORIES", "format_summary",
           "RATE_WINDOW"]

#: frame intervals kept per camera to measure its frame rate
RATE_WINDOW = 16
#: events and outages kept per camera (the most recent; counts and durations stay exact)
HEALTH_LOG = 20

DROP_CATEGORIES = ("corrupt", "wrong_size", "too_large", "unreadable", "keyframe_wait", "decode_error", "superseded",
                   "late", "unmatched", "set_dropped", "shutdown")


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
class Outage:
    """One outage of a camera (times in ns on the monotonic clock, durations in ns).

    ``kind`` is ``stalled`` or ``disconnected`` (the worst it reached); ``stalled_ns +
    disconnected_ns == end_ns - start_ns``; ``lost`` is the estimate of frames lost (None: no rate).
    """

    kind: str
    start_ns: int
    end_ns: Optional[int] = None
    stalled_ns: int = 0
    disconnected_ns: int = 0
    lost: Optional[int] = None
    reason: str = ""
    phase: str = "stalled"  # the current phase while open
    phase_since_ns: int = 0
    reconnected: bool = False

    @property
    def duration_ns(self) -> int:
        return (self.end_ns if self.end_ns is not None else self.phase_since_ns) - self.start_ns

    def to_dict(self, origin_ns: int = 0) -> dict[str, Any]:
        """JSON form, times in seconds (``start_s`` from ``origin_ns``, the run's start)."""
        return {"kind": self.kind, "start_s": round((self.start_ns - origin_ns) / 1e9, 3),
                "duration_s": round(self.duration_ns / 1e9, 3), "stalled_s": round(self.stalled_ns / 1e9, 3),
                "disconnected_s": round(self.disconnected_ns / 1e9, 3), "lost_in_outage": self.lost,
                "reason": self.reason, "open": self.end_ns is None}


@dataclass
class CameraHealth:
    """Source-side state of one camera (for the progress line and the summary).

    The reader thread reports arrivals, read timeouts and disconnects, the runner thread stalls
    (no frame for ``run.stall_timeout_ms``); every time is ns on the monotonic clock, passed in (so
    tests inject it). Lists are bounded: the last :data:`HEALTH_LOG` events and outages are kept,
    counts and durations are exact.
    """

    state: str = "starting"  # starting, streaming, stalled, reconnecting, ended, failed
    detail: str = ""
    reconnects: int = 0
    disconnects: int = 0
    stalls: int = 0
    stalled_ns: int = 0
    disconnected_ns: int = 0
    blocked_ns: int = 0  # back-pressure: reader blocked on a full buffer
    read_timeouts: int = 0
    outages: int = 0
    outage_ns: int = 0
    lost_in_outage: int = 0
    lost_at_source: int = 0  # frames the source knows were lost before it read them (V4L2 sequence gaps, ES POC gaps)
    nominal_fps: Optional[float] = None
    last_arrival_ns: Optional[int] = None
    last_media_ns: Optional[int] = None
    streaming_since_ns: Optional[int] = None
    pushing: bool = False
    push_done_ns: Optional[int] = None
    outage: Optional[Outage] = None
    events: deque = field(default_factory=lambda: deque(maxlen=HEALTH_LOG))
    events_total: int = 0
    outage_log: deque = field(default_factory=lambda: deque(maxlen=HEALTH_LOG))
    _intervals: deque = field(default_factory=lambda: deque(maxlen=RATE_WINDOW))
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def note(self, text: str) -> None:
        self.events.append(text)
        self.events_total += 1

    # -- the frame rate ------------------------------------------------------------------------------
    def period_ns(self) -> Optional[int]:
        """The camera's frame period (ns): median of recent intervals, else the declared rate."""
        if self._intervals:
            iv = sorted(self._intervals)
            return iv[len(iv) // 2]
        if self.nominal_fps:
            return int(round(1e9 / self.nominal_fps))
        return None

    # -- events ----------------------------------------------------------------------------------------
    def arrived(self, t: int, media_ns: Optional[int] = None, lost_before: int = 0) -> Optional[Outage]:
        """A frame arrived at ``t``; returns the outage it ended, if any. ``lost_before``: frames the source
        itself counted as skipped just before this one (a V4L2 driver's sequence numbers, an elementary
        stream's picture order counts): exact, so an outage this frame ends has lost those (not an estimate
        from the time gap, which would count them twice), and outside an outage they are :attr:`lost_at_source`."""
        with self._lock:
            ended = self._end_outage(t, media_ns, known_lost=lost_before or None) if self.outage is not None else None
            if ended is None:
                self.lost_at_source += lost_before
            if ended is None and self.last_arrival_ns is not None:
                same_clock = media_ns is not None and self.last_media_ns is not None
                step = (cast(int, media_ns) - cast(int, self.last_media_ns) if same_clock
                        else t - self.last_arrival_ns)
                if step > 0:
                    self._intervals.append(step)
            self.last_arrival_ns, self.last_media_ns = t, media_ns
            if self.state == "stalled":
                self.state = "streaming"
            return ended

    def check_stall(self, t: int, limit_ns: int) -> bool:
        """The runner's check at ``t``: no frame for more than ``limit_ns`` while streaming (and the
        reader not blocked on a full buffer, which is back-pressure) begins a stall. True if it did."""
        with self._lock:
            if self.state != "streaming" or self.outage is not None or self.pushing:
                return False
            last = self._outage_origin(t)
            if t - last <= limit_ns:
                return False
            self.stalled(t, last, f"no frame for {(t - last) / 1e9:.1f} s")
            return True

    def pushing_frame(self, blocked: bool, t: int) -> None:
        """The reader enters (``blocked=True``) or leaves the synchroniser's push at ``t``."""
        with self._lock:
            self.pushing = blocked
            if not blocked:
                self.push_done_ns = t

    def reconnected(self, t: int) -> None:
        """The connection is back at ``t`` (no frame yet: the rest of the outage is a stall)."""
        with self._lock:
            self.reconnects += 1
            self.state, self.detail = "streaming", ""
            self.streaming_since_ns = t
            if self.outage is not None:
                self._switch(t, "stalled")

    def stalled(self, t: int, since_ns: int, reason: str) -> None:
        """No frame since ``since_ns`` (seen at ``t``): an outage begins (if none is open), stalled."""
        with self._lock:
            if self.outage is None:
                self._begin(since_ns, "stalled", reason)
            if self.state == "streaming":
                self.state = "stalled"
                self.stalls += 1
                self.note(f"stalled: {reason}")

    def read_timed_out(self, t: int, reason: str) -> int:
        """A read timed out on an open connection; returns how long the camera has been without frames (ns)."""
        with self._lock:
            self.read_timeouts += 1
            self.stalled(t, self._outage_origin(t), reason)
            assert self.outage is not None  # stalled() opened one if none was open
            return t - self.outage.start_ns

    def disconnected(self, t: int, reason: str) -> None:
        """The connection was lost at ``t``: the outage (open or new) is now disconnected."""
        with self._lock:
            self.disconnects += 1
            self.note(f"disconnected: {reason}")
            if self.outage is None:
                o = self._begin(self._outage_origin(t), "disconnected", reason)
                o.phase, o.phase_since_ns = "disconnected", o.start_ns
            else:
                o = self.outage
                self._switch(t, "disconnected")
                o.reason = reason
            o.kind = "disconnected"
            o.reconnected = True  # whatever comes next comes on a new connection
            self.state, self.detail = "reconnecting", reason

    def finish(self, t: int) -> None:
        """The run ended at ``t``: close an open outage (frames it would have had are lost)."""
        with self._lock:
            if self.outage is not None:
                self._end_outage(t, None, still_down=True)

    # -- internals -------------------------------------------------------------------------------------
    def _outage_origin(self, t: int) -> int:
        known = [x for x in (self.last_arrival_ns, self.streaming_since_ns, self.push_done_ns) if x is not None]
        return max(known) if known else t

    def _begin(self, start: int, kind: str, reason: str) -> Outage:
        self.outage = Outage(kind, start, reason=reason, phase=kind, phase_since_ns=start)
        return self.outage

    def _switch(self, t: int, phase: str) -> None:
        o = self.outage
        assert o is not None  # called while an outage is open
        t = max(t, o.phase_since_ns)
        self._charge(o, t)
        o.phase, o.phase_since_ns = phase, t

    def _charge(self, o: Outage, t: int) -> None:
        d = t - o.phase_since_ns
        if o.phase == "stalled":
            o.stalled_ns += d
            self.stalled_ns += d
        else:
            o.disconnected_ns += d
            self.disconnected_ns += d

    def _end_outage(self, t: int, media_ns: Optional[int], still_down: bool = False,
                    known_lost: Optional[int] = None) -> Outage:
        o = self.outage
        assert o is not None  # called while an outage is open
        t = max(t, o.phase_since_ns)
        self._charge(o, t)
        o.end_ns, o.phase_since_ns = t, t
        o.lost = known_lost if known_lost is not None else self._lost(o, media_ns, still_down)
        self.outages += 1
        self.outage_ns += o.duration_ns
        self.lost_in_outage += o.lost or 0
        self.outage_log.append(o)
        self.outage = None
        if not still_down:
            self.note(f"{o.kind} {o.duration_ns / 1e9:.1f} s"
                      + (f", ~{o.lost} frames lost" if o.lost else "") + f" ({o.reason})")
        return o

    def _lost(self, o: Outage, media_ns: Optional[int], still_down: bool) -> Optional[int]:
        period = self.period_ns()
        if not period:
            return None
        if still_down:
            return o.duration_ns // period
        if not o.reconnected and media_ns is not None and self.last_media_ns is not None:
            gap = media_ns - self.last_media_ns  # the stream's own clock: what the sender skipped
        else:
            gap = o.duration_ns
        return max(0, int(round(gap / period)) - 1)


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
        self.flagged = {c: 0 for c in self.cameras}  # emitted, but marked corrupt (decode.on_corrupt: flag)
        self.greyscale = {c: 0 for c in self.cameras}  # emitted from a one-channel image (grey in B, G and R)
        self.fallbacks: dict[str, dict[str, int]] = {c: {} for c in self.cameras}
        self.sets_emitted = 0
        self.model_errors = 0
        self.health = {c: CameraHealth() for c in self.cameras}
        self.started_ns: Optional[int] = None  # the run's start (monotonic ns): origin of outage times

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

    def flag(self, camera: str, reason: str) -> None:
        """An emitted frame the decoder reported damaged, kept under ``on_corrupt: flag``."""
        with self._lock:
            self.flagged[camera] += 1
            self.examples.setdefault((camera, "flagged corrupt"), reason)

    def grey(self, camera: str) -> None:
        """An emitted frame decoded from a greyscale (one-channel) image: its B, G and R are equal."""
        with self._lock:
            self.greyscale[camera] += 1

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

    def lost_in_outage(self, camera: Optional[str] = None) -> int:
        """Estimated frames lost in outages (never entered: not part of ``entered``)."""
        cams = [camera] if camera else self.cameras
        return sum(self.health[c].lost_in_outage for c in cams)

    def totals(self) -> dict[str, int]:
        return {"entered": sum(self.entered.values()), "emitted": sum(self.emitted.values()),
                "dropped": self.dropped_total(), "lost_in_outage": self.lost_in_outage(),
                "lost_at_source": sum(h.lost_at_source for h in self.health.values()),
                "masked_slots": sum(sum(m.values()) for m in self.masked.values()),
                "stale_slots": sum(self.stale.values()), "flagged_corrupt": sum(self.flagged.values()),
                "greyscale": sum(self.greyscale.values()),
                "fallbacks": sum(sum(f.values()) for f in self.fallbacks.values()),
                "sets": self.sets_emitted}

    def counters(self) -> dict[str, Any]:
        """The live counters (safe to call from any thread, e.g. at a Prometheus scrape): ``{"sets": int,
        "cameras": {camera: {"entered", "emitted", "dropped": {reason: n}, "masked": {reason: n},
        "stalls", "stalled_s", "disconnects", "reconnects"}}}`` (``stalled_s`` in seconds)."""
        with self._lock:
            cams = {c: {"entered": self.entered[c], "emitted": self.emitted[c], "dropped": dict(self.dropped[c]),
                        "masked": dict(self.masked[c])} for c in self.cameras}
        for c, h in self.health.items():
            cams[c].update(stalls=h.stalls, stalled_s=h.stalled_ns / 1e9, disconnects=h.disconnects,
                           reconnects=h.reconnects)
        return {"sets": self.sets_emitted, "cameras": cams}

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (``summary.json``)."""
        cams = {}
        for c in self.cameras:
            h = self.health[c]
            cams[c] = {
                "entered": self.entered[c], "emitted": self.emitted[c], "dropped": dict(self.dropped[c]),
                "lost_in_outage": h.lost_in_outage, "lost_at_source": h.lost_at_source,
                "masked_slots": dict(self.masked[c]), "stale_slots": self.stale[c],
                "flagged_corrupt": self.flagged[c], "greyscale": self.greyscale[c],
                "fallbacks": dict(self.fallbacks[c]),
                "source": _source_dict(h, self.started_ns or 0),
            }
        return {"schema": "dvpipe.run-summary/1", "totals": self.totals(), "model_errors": self.model_errors,
                "accounted": not self.check(), "cameras": cams,
                "examples": {f"{c}/{k}": v for (c, k), v in self.examples.items()}}


def _source_dict(h: CameraHealth, origin_ns: int) -> dict[str, Any]:
    """The ``source`` entry of a camera in ``summary.json`` (durations in seconds)."""
    return {"state": h.state, "detail": h.detail, "disconnects": h.disconnects, "reconnects": h.reconnects,
            "stalls": h.stalls, "read_timeouts": h.read_timeouts, "outages": h.outages,
            "outage_s": h.outage_ns / 1e9, "stalled_s": h.stalled_ns / 1e9, "disconnected_s": h.disconnected_ns / 1e9,
            "backpressure_s": h.blocked_ns / 1e9, "lost_in_outage": h.lost_in_outage, "lost_at_source": h.lost_at_source,
            "frame_period_ms": None if h.period_ns() is None else round(cast(int, h.period_ns()) / 1e6, 3),
            "outage_log": [o.to_dict(origin_ns) for o in h.outage_log],
            "events": list(h.events), "events_total": h.events_total}


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i])
                             for i in range(len(r))).rstrip() for r in rows]


def format_summary(acc: Accounting) -> str:
    """The end-of-run table: frames per camera and reason, slots, source health."""
    cats = [k for k in DROP_CATEGORIES if any(acc.dropped[c].get(k) for c in acc.cameras)]
    cats += sorted({k for c in acc.cameras for k in acc.dropped[c]} - set(cats))
    flags = any(acc.flagged.values())
    head = (["camera", "in", "emitted", "dropped"] + cats + ["masked", "stale"] + (["flagged"] if flags else [])
            + ["fallbacks", "source"])
    rows = [head]
    for c in acc.cameras:
        h = acc.health[c]
        src = h.state
        extra = []
        if h.disconnects:
            extra.append(f"{h.disconnects} disconnect{'s' if h.disconnects != 1 else ''}, {h.reconnects} reconnected, "
                         f"down {h.disconnected_ns / 1e9:.1f} s")
        if h.stalls:
            extra.append(f"stalled {h.stalls}x {h.stalled_ns / 1e9:.1f} s")
        if h.outages:
            extra.append(f"{h.outages} outage{'s' if h.outages != 1 else ''} {h.outage_ns / 1e9:.1f} s"
                         + (f", ~{h.lost_in_outage} lost" if h.lost_in_outage else ""))
        if h.lost_at_source:
            extra.append(f"{h.lost_at_source} lost at the source")
        if h.blocked_ns > 1e8:
            extra.append(f"back-pressure {h.blocked_ns / 1e9:.1f} s")
        if h.state == "failed" and h.detail:
            extra.append(h.detail)
        if extra:
            src += " (" + "; ".join(extra) + ")"
        rows.append([c, str(acc.entered[c]), str(acc.emitted[c]), str(acc.dropped_total(c))]
                    + [str(acc.dropped[c].get(k, 0) or "") for k in cats]
                    + [str(sum(acc.masked[c].values()) or ""), str(acc.stale[c] or "")]
                    + ([str(acc.flagged[c] or "")] if flags else [])
                    + [str(sum(acc.fallbacks[c].values()) or ""), src])
    t = acc.totals()
    rows.append(["total", str(t["entered"]), str(t["emitted"]), str(t["dropped"])]
                + [str(sum(acc.dropped[c].get(k, 0) for c in acc.cameras)) for k in cats]
                + [str(t["masked_slots"] or ""), str(t["stale_slots"] or "")]
                + ([str(t["flagged_corrupt"] or "")] if flags else []) + [str(t["fallbacks"] or ""), ""])
    lines = [f"frames: {t['entered']} in = {t['emitted']} emitted + {t['dropped']} dropped"
             + ("" if not acc.check() else "  (NOT ACCOUNTED: " + "; ".join(acc.check()) + ")")
             + f"; {t['sets']} frame sets"
             + (f"; ~{t['lost_in_outage']} more lost in outages (estimated, never entered)"
                if t["lost_in_outage"] else "")
             + (f"; {t['lost_at_source']} more lost at the source (the device's or the stream's count, never entered)"
                if t["lost_at_source"] else "")]
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
    grey = [c for c in acc.cameras if acc.greyscale[c]]
    if grey:
        lines.append("  greyscale: " + ", ".join(f"{c} {acc.greyscale[c]} of {acc.emitted[c]}" for c in grey)
                     + " emitted frames were one-channel images (grey repeated in B, G and R; metas: greyscale)")
    if acc.model_errors:
        lines.append(f"  model errors: {acc.model_errors}")
    return "\n".join(lines)


def transfers_summary(stats: Any) -> dict[str, Any]:
    """``summary.json["transfers"]``: bytes moved host -> device, device -> host and device -> device per frame
    set (mean over the sets the statistics hold), per camera, and per transfer step, summed from every
    ``transfer`` span that carries ``bytes`` -- a plan's transfer steps, the DVPP upload of the encoded
    frames, a model runner's output download (:meth:`dvpipe.latency.LatencyStats.transfers`)."""
    fn = getattr(stats, "transfers", None)
    if fn is None:
        return {"host_to_device_bytes_per_set": 0.0, "device_to_host_bytes_per_set": 0.0,
                "device_to_device_bytes_per_set": 0.0, "sets": 0, "per_camera": {}, "by_step": {}}
    return fn()


def plan_routes(plan: Any) -> dict[str, str]:
    """``{camera: route}`` (``aipp``, ``torch_npu`` or ``host``) of a plan (a grouped plan: every group's cameras)."""
    cams = getattr(plan, "cameras", None) or []
    return {cp.camera.name: getattr(cp, "route", "host") for cp in cams}
