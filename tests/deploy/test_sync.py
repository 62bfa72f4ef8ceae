"""Frame-set synchronisation: tolerance, anchors, late/missing/absent cameras and the three policies.

The Synchroniser is driven directly with an explicit clock (no threads, no sleeps); end-to-end
versions of each policy with injected lateness are in tests/deploy/test_runner.py.
"""
from __future__ import annotations

import threading

import pytest

from dvpipe import Frame
from dvpipe.deploy.config import SyncConfig
from dvpipe.deploy.sources.base import Item
from dvpipe.deploy.sync import Synchroniser

MS = 1_000_000
CAMS = ["A", "B", "C"]


def item(cam: str, seq: int, capture_ms: float, arrival_ms: float | None = None) -> Item:
    cap = int(capture_ms * MS)
    arr = int((capture_ms if arrival_ms is None else arrival_ms) * MS)
    return Item(Frame(cam, seq, cap, b"x"), None, cap, arr)


def sync(on_late="mask", live=True, tolerance_ms=10.0, deadline_ms=50.0, anchor="earliest", capacity=4, **kw):
    cfg = SyncConfig(tolerance_ms=tolerance_ms, on_late=on_late, deadline_ms=deadline_ms, anchor=anchor)
    return Synchroniser(CAMS, cfg, live=live, capacity=capacity, **kw)


def push_set(s: Synchroniser, seq: int, t_ms: float, cams=CAMS, skew_ms=(0.0, 3.0, -2.0)):
    for cam, sk in zip(cams, skew_ms):
        s.push(item(cam, seq, t_ms + sk))


def test_complete_sets_form_immediately_with_skew_in_metas():
    s = sync()
    push_set(s, 0, 100.0)
    push_set(s, 1, 200.0)
    out = s.poll(now_ns=int(201 * MS))
    assert [fs.index for fs in out] == [0, 1]
    fs = out[0]
    assert set(fs.members) == set(CAMS) and not fs.late and not fs.absent
    assert fs.time_ns == int(98 * MS)  # the earliest frame anchors the set
    assert fs.skew_ns("B") == 5 * MS and fs.skew_ns("C") == 0
    assert s.take_drops() == []


def test_late_camera_waits_until_the_deadline_then_is_reported_late():
    s = sync(deadline_ms=50)
    s.push(item("A", 0, 100.0))
    s.push(item("B", 0, 101.0))
    assert s.poll(int(120 * MS)) == []
    assert s.next_deadline_ns == int(150 * MS)  # first arrival + deadline
    assert s.poll(int(149 * MS)) == []
    (fs,) = s.poll(int(150 * MS))
    assert set(fs.members) == {"A", "B"}
    assert "late" in fs.late["C"] and "50 ms deadline" in fs.late["C"]
    # C's frame for that set arrives afterwards: dropped as late, never in a later set
    s.push(item("C", 0, 102.0, arrival_ms=170.0))
    push_set(s, 1, 200.0)
    (fs2,) = s.poll(int(201 * MS))
    assert set(fs2.members) == set(CAMS)
    (d,) = s.take_drops()
    assert (d.item.frame.camera, d.category) == ("C", "late") and "after its frame set was emitted" in d.detail


def test_newer_frames_replacing_waiting_ones_do_not_restart_the_deadline():
    # latest-frame buffers: A and B keep replacing their waiting frame while C has stopped; the
    # deadline runs from the first wait, so C cannot starve the others
    s = sync(deadline_ms=50, capacity=1, latest_only=True, tolerance_ms=5)
    out = []
    for k in range(6):
        t = 100.0 + 20 * k
        s.push(item("A", k, t))
        s.push(item("B", k, t))
        out += s.poll(int(t * MS))
    assert out and set(out[0].late) == {"C"} and out[0].formed_ns == int(160 * MS)  # first poll after 150 ms


def test_a_camera_that_skipped_the_set_is_missing_without_waiting():
    s = sync(deadline_ms=1000)
    s.push(item("A", 0, 100.0))
    s.push(item("B", 0, 101.0))
    s.push(item("C", 1, 200.0))  # C lost its frame of the first set: its next one is already later
    (fs,) = s.poll(int(101 * MS))
    assert set(fs.members) == {"A", "B"} and fs.late["C"].startswith("missing")


def test_drop_policy_drops_the_whole_set_and_counts_its_frames():
    s = sync(on_late="drop", deadline_ms=20)
    s.push(item("A", 0, 100.0))
    s.push(item("B", 0, 101.0))
    assert s.poll(int(119 * MS)) == []
    assert s.poll(int(121 * MS)) == []  # decided: dropped, nothing emitted
    drops = s.take_drops()
    assert sorted((d.item.frame.camera, d.category) for d in drops) == [("A", "set_dropped"), ("B", "set_dropped")]
    assert "C late" in drops[0].detail
    push_set(s, 1, 200.0)
    (fs,) = s.poll(int(201 * MS))
    assert fs.index == 0 and set(fs.members) == set(CAMS)


@pytest.mark.parametrize("policy", ["mask", "reuse"])
def test_mask_and_reuse_emit_the_set_with_the_camera_late(policy):
    # the policy itself (zero slot or last image) is applied by the runner; the set is emitted either way
    s = sync(on_late=policy, deadline_ms=20)
    s.push(item("A", 0, 100.0))
    s.push(item("B", 0, 100.0))
    (fs,) = s.poll(int(125 * MS))
    assert set(fs.late) == {"C"}


def test_absent_cameras_never_drop_sets():
    s = sync(on_late="drop")
    s.end("C", "failed: source did not open")
    push_set(s, 0, 100.0, cams=["A", "B"])
    (fs,) = s.poll(int(100 * MS))
    assert fs.absent == {"C": "failed: source did not open"} and not fs.late
    assert not s.done
    s.end("A", "ended")
    s.end("B", "ended")
    assert s.done


def test_recordings_wait_for_data_not_for_the_clock():
    s = sync(live=False, deadline_ms=1, wait_ms=500)
    s.push(item("A", 0, 100.0, arrival_ms=0))
    s.push(item("B", 0, 100.0, arrival_ms=0))
    assert s.poll(int(10 * MS)) == []
    assert s.poll(int(400 * MS)) == []  # the 1 ms live deadline does not apply
    s.push(item("C", 0, 104.0, arrival_ms=450))
    (fs,) = s.poll(int(450 * MS))
    assert set(fs.members) == set(CAMS)
    # a camera with nothing for longer than wait_ms is reported stalled
    s.push(item("A", 1, 200.0, arrival_ms=460))
    s.push(item("B", 1, 200.0, arrival_ms=460))
    assert s.poll(int(470 * MS)) == []
    (fs,) = s.poll(int(971 * MS))
    assert fs.late["C"].startswith("stalled")


def test_closest_frame_within_tolerance_wins_and_older_ones_are_superseded():
    s = sync(tolerance_ms=10)
    s.push(item("A", 0, 100.0))
    s.push(item("B", 0, 92.0))
    s.push(item("B", 1, 99.0))
    s.push(item("C", 0, 101.0))
    (fs,) = s.poll(int(101 * MS))
    assert fs.time_ns == int(92 * MS) and fs.members["B"].frame.seq == 0
    (d,) = s.take_drops()
    assert (d.item.frame.seq, d.category) == (1, "superseded")
    assert sum(len(b) for b in s.pending.values()) == 0


def test_anchor_camera_sets_the_time_and_unmatched_frames_are_dropped():
    s = sync(anchor="B", tolerance_ms=5)
    s.push(item("A", 0, 50.0))   # no B frame near 50 ms
    s.push(item("A", 1, 100.0))
    s.push(item("B", 0, 101.0))
    s.push(item("C", 0, 99.0))
    (fs,) = s.poll(int(101 * MS))
    assert fs.time_ns == int(101 * MS) and set(fs.members) == set(CAMS)
    (d,) = s.take_drops()
    assert (d.item.frame.camera, d.category) == ("A", "unmatched")


def test_the_anchor_rules_hold_until_the_anchor_cameras_last_frames_are_used():
    """The anchor camera's source ends (its reader read the last frame) while that frame still waits: the
    sets keep the anchor's times (docstring step 1) -- A's frame between them is unmatched, not a set of its
    own with the anchor masked. Only after the anchor's last frame, the others form sets by the earliest."""
    s = sync(anchor="B", tolerance_ms=5, live=False)
    for k, t in enumerate((100.0, 150.0, 200.0, 250.0)):
        s.push(item("A", k, t))
    s.push(item("B", 0, 100.0))
    s.push(item("B", 1, 200.0))
    s.push(item("C", 0, 100.0))
    s.push(item("C", 1, 200.0))
    for cam in ("B", "C"):
        s.end(cam, "ended: end of input")
    sets = s.poll(0)
    assert [(fs.time_ns, sorted(fs.members)) for fs in sets] == [
        (int(100 * MS), ["A", "B", "C"]), (int(200 * MS), ["A", "B", "C"]), (int(250 * MS), ["A"])]
    assert [(d.item.frame.seq, d.category) for d in s.take_drops()] == [(1, "unmatched")]


def test_a_recordings_fast_camera_gives_its_closest_frame_whatever_its_reader_had_read():
    """Rule 2, the closest frame within the tolerance: C runs at 20 fps (50 ms) against a 40 ms tolerance,
    so two of its frames can fall in one set's window. With only the earlier one (470 ms) read when the
    set at 500 ms is decided, the set waits for C's next frame (520 ms, closer) instead of taking 470 --
    a recording's sets do not depend on how far a reader had got (the fleet index fills every buffer)."""
    s = sync(anchor="A", tolerance_ms=40, live=False, wait_ms=10_000, capacity=4)
    s.push(item("C", 0, 420.0))
    s.push(item("C", 1, 470.0))  # C's interval: 50 ms
    s.push(item("A", 0, 500.0))
    s.push(item("B", 0, 503.0))
    assert s.poll(int(1 * MS)) == []  # 470 is 30 ms early, more than half C's interval: 520 could be closer
    s.push(item("C", 2, 520.0))
    (fs,) = s.poll(int(2 * MS))
    assert fs.time_ns == int(500 * MS) and fs.members["C"].frame.seq == 2
    assert sorted((d.item.frame.seq, d.category) for d in s.take_drops()) == [(0, "unmatched"), (1, "superseded")]


def test_an_ended_camera_with_a_frame_left_is_missing_not_absent():
    """Rule 3: a camera whose next waiting frame is past T + tol skipped the set (missing: on_late applies,
    here drop), even when its source has ended meanwhile; absent (masked) is for a camera with nothing left."""
    s = sync(tolerance_ms=10, on_late="drop", live=False)
    s.push(item("A", 0, 100.0))
    s.push(item("B", 0, 100.0))
    s.push(item("C", 0, 160.0))
    s.end("C", "ended: end of input")
    assert s.poll(int(1 * MS)) == []  # the set at 100 ms: C missing -> dropped, not emitted with C absent
    assert {(d.item.frame.camera, d.category) for d in s.take_drops()} == {("A", "set_dropped"), ("B", "set_dropped")}


def test_latest_only_buffers_drop_the_oldest_never_block():
    s = sync(capacity=2, latest_only=True)
    for k in range(5):
        assert s.push(item("A", k, 100.0 * k))
    assert [it.frame.seq for it in s.pending["A"]] == [3, 4]
    drops = s.take_drops()
    assert [d.item.frame.seq for d in drops] == [0, 1, 2] and all(d.category == "superseded" for d in drops)


def test_full_buffers_block_the_reader_until_room_or_stop():
    s = sync(capacity=1, latest_only=False, live=False)
    s.push(item("A", 0, 100.0))
    stop = threading.Event()
    entered = []
    t = threading.Thread(target=lambda: entered.append(s.push(item("A", 1, 200.0), stop, on_enter=lambda c: None)))
    t.start()
    t.join(0.2)
    assert t.is_alive()  # blocked: back-pressure
    stop.set()
    t.join(2)
    assert entered == [False]
    (d,) = s.take_drops()
    assert d.category == "shutdown" and s.blocked_ns["A"] > 0
    # once closed, frames are not accepted at all (they never entered)
    s.close()
    assert s.push(item("B", 0, 100.0), on_enter=lambda c: pytest.fail("must not enter")) is False


def test_a_wait_recorded_for_another_set_is_not_reused():
    """A recording's set waits for the anchor camera; the anchor frame comes later in time (the waiting
    frame is unmatched) and the new set waits for other cameras: its wait starts then, not at the first."""
    s = sync(live=False, anchor="A", wait_ms=100.0)
    s.push(item("B", 0, 100.0))
    assert s.poll(0) == []  # waits up to 100 ms for an A frame
    s.push(item("A", 0, 200.0))
    assert s.poll(90 * MS) == []  # B's frame is unmatched; the set at 200 ms now waits for B and C, from 90 ms
    assert [d.category for d in s.take_drops()] == ["unmatched"]
    assert s.poll(100 * MS) == []  # 10 ms of waiting, not the 100 ms of the earlier wait
    (fs,) = s.poll(190 * MS)
    assert set(fs.members) == {"A"} and set(fs.late) == {"B", "C"}


def test_a_latest_only_replacement_does_not_restart_the_wait():
    """Live, latest-frame buffers: newer frames replace the waiting ones (the set's time moves) while the
    same camera is still missing; the deadline runs from the first wait."""
    s = sync(live=True, capacity=1, latest_only=True, deadline_ms=50.0)
    s.push(item("A", 0, 100.0, 100.0))
    s.push(item("B", 0, 100.0, 100.0))
    assert s.poll(110 * MS) == []
    s.push(item("A", 1, 130.0, 130.0))  # replaces A's frame at 100 ms (superseded)
    s.push(item("B", 1, 130.0, 130.0))
    assert s.poll(140 * MS) == []
    (fs,) = s.poll(150 * MS)  # 50 ms after the first frame arrived at 100 ms, not after 130 ms
    assert set(fs.members) == {"A", "B"} and set(fs.late) == {"C"}


def test_millisecond_settings_are_rounded_to_the_nearest_ns():
    """4.1 ms is 4_100_000 ns; int(4.1 * 1e6) would give 4_099_999 and put a frame exactly at the
    tolerance outside it (and cut the deadline and wait 1 ns short)."""
    cfg = SyncConfig(tolerance_ms=4.1, deadline_ms=50.3, anchor="earliest")
    s = Synchroniser(["A", "B"], cfg, live=True, wait_ms=100.7)
    assert (s.tol_ns, s.deadline_ns, s.wait_ns) == (4_100_000, 50_300_000, 100_700_000)
    cap = 100 * MS
    s.push(Item(Frame("A", 0, cap, b"x"), None, cap, cap))
    s.push(Item(Frame("B", 0, cap + 4_100_000, b"x"), None, cap + 4_100_000, 101 * MS))  # skew = the tolerance
    (fs,) = s.poll(101 * MS)  # complete at once: nothing late, no deadline wait
    assert set(fs.members) == {"A", "B"} and not fs.late
    assert fs.skew_ns("B") == 4_100_000
