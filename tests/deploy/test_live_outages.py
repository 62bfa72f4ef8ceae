"""Live outages (issue 12.9): stalled vs disconnected vs back-pressure, outage durations and the
``lost_in_outage`` estimate. The bookkeeping (CameraHealth) is driven with injected times and
checked against hand-computed figures; the runner is checked against the loopback RTSP server
(dvpipe.testing.rtsp_server, 127.0.0.1 only): a sender pause on an open connection, and a server
that goes away and comes back on the same port. No wall-clock upper bounds are asserted.

The RTSP tests keep real time: the runner's clock could be injected, but the read timeouts are the socket's
and the server paces its stream in real time, so a fake clock would disagree with both. They wait on
events, never on a sleep that a loaded machine could outrun: a pause lasts until the runner has counted
its read timeouts (or its disconnect and a failed reconnect), and every wait has a generous bound that
fails with a message instead of hanging. They assert lower bounds that follow from those events (a stall
that held two read timeouts of ``READ_TIMEOUT_S`` lasted at least that), relations between the recorded
figures (stalled + disconnected = duration; lost = duration / period - 1), and a frame period measured on
the stream's RTP timestamps (the media clock), which a loaded machine does not move."""
from __future__ import annotations

import time

import pytest

from dvpipe.deploy import Runner, load_deployment
from dvpipe.testing.rtsp_server import LoopbackRtspServer, RtspStream
from dvpipe.deploy.summary import Accounting, CameraHealth, format_summary
from dvpipe.testing.deployments import encode_access_units, tiny_rig

MS = 1_000_000
P = 40 * MS  # 25 fps


def streaming(h: CameraHealth, n: int, t0: int = 0, media0: int | None = 0) -> int:
    """``n`` frames, one period apart, from ``t0``; returns the time of the last one."""
    h.state, h.streaming_since_ns = "streaming", t0
    for k in range(n):
        h.arrived(t0 + k * P, None if media0 is None else media0 + k * P)
    return t0 + (n - 1) * P


def test_sender_pause_on_an_open_connection_is_a_stall_that_lost_nothing():
    h = CameraHealth()
    last = streaming(h, 10)  # 360 ms
    assert not h.check_stall(last + 300 * MS, 300 * MS)  # not yet: 300 ms is not more than 300 ms
    assert h.check_stall(last + 301 * MS, 300 * MS) and h.state == "stalled"
    assert h.read_timed_out(last + 1000 * MS, "read timeout") == 1000 * MS
    assert h.read_timed_out(last + 2000 * MS, "read timeout") == 2000 * MS
    # the sender resumes where it was: its pts go on by one period (TCP kept everything)
    o = h.arrived(last + 3000 * MS, 9 * P + P)
    assert o.kind == "stalled" and o.duration_ns == 3000 * MS and o.stalled_ns == 3000 * MS
    assert o.disconnected_ns == 0 and o.lost == 0
    assert (h.stalls, h.read_timeouts, h.disconnects, h.outages) == (1, 2, 0, 1)
    assert h.state == "streaming" and h.stalled_ns == 3000 * MS and h.outage_ns == 3000 * MS


def test_stall_with_a_pts_jump_counts_the_skipped_frames():
    h = CameraHealth()
    last = streaming(h, 10)
    h.read_timed_out(last + 1000 * MS, "read timeout")
    o = h.arrived(last + 1200 * MS, 9 * P + 30 * P)  # the sender's clock ran on: 29 frames skipped
    assert o.lost == 29 and h.lost_in_outage == 29


def test_frames_the_source_counted_as_skipped_end_an_outage_once():
    # a V4L2 driver that drops frames inside (uvcvideo with nodrop=0) goes on counting its sequence: the
    # frame after a 3.6 s stall says 89 were skipped, and its timestamp jumped by 90 periods. Counted once.
    h = CameraHealth()
    last = streaming(h, 10)
    h.check_stall(last + 3000 * MS, 300 * MS)
    o = h.arrived(last + 90 * P, 9 * P + 90 * P, lost_before=89)
    assert o.lost == 89 and h.lost_in_outage == 89 and h.lost_at_source == 0
    h.arrived(last + 91 * P, 9 * P + 92 * P, lost_before=1)  # outside an outage: lost at the source
    assert h.lost_in_outage == 89 and h.lost_at_source == 1


def test_disconnect_and_reconnect_split_the_outage_and_estimate_from_arrivals():
    h = CameraHealth()
    last = streaming(h, 10)
    h.check_stall(last + 500 * MS, 300 * MS)          # stalled from the last frame
    h.disconnected(last + 800 * MS, "connection reset")  # then the connection went
    h.reconnected(last + 8_800 * MS)
    o = h.arrived(last + 8_840 * MS, 0)  # a new connection: its pts start over, so use the arrival gap
    assert o.kind == "disconnected"
    assert (o.stalled_ns, o.disconnected_ns) == (800 * MS + 40 * MS, 8_000 * MS)
    assert o.stalled_ns + o.disconnected_ns == o.duration_ns == 8_840 * MS
    assert o.lost == round(8_840 / 40) - 1 == 220
    assert (h.disconnects, h.reconnects, h.stalls) == (1, 1, 1)


def test_outage_still_open_at_the_end_and_declared_rate():
    h = CameraHealth(nominal_fps=25.0)  # no interval measured: the declared rate gives the period
    h.state, h.streaming_since_ns = "streaming", 0
    h.arrived(0, None)
    h.disconnected(100 * MS, "gone")
    h.finish(1_000 * MS)
    (o,) = h.outage_log
    assert o.duration_ns == 1_000 * MS and o.lost == 25 and h.lost_in_outage == 25


def test_a_reader_blocked_on_a_full_buffer_is_back_pressure_not_a_stall():
    h = CameraHealth()
    last = streaming(h, 3)
    h.pushing_frame(True, last)
    assert not h.check_stall(last + 5_000 * MS, 300 * MS) and h.outage is None
    h.pushing_frame(False, last + 5_000 * MS)
    assert not h.check_stall(last + 5_200 * MS, 300 * MS)  # counted from when the push returned
    assert h.check_stall(last + 5_301 * MS, 300 * MS)


def test_summary_reports_outages_beside_the_invariant():
    acc = Accounting(["A"])
    acc.started_ns = 0
    for _ in range(10):
        acc.enter("A")
        acc.emit("A")
    h = acc.health["A"]
    last = streaming(h, 10)
    h.disconnected(last + 100 * MS, "connection reset")
    h.reconnected(last + 2_000 * MS)
    h.arrived(last + 2_040 * MS, 0)
    d = acc.to_dict()
    cam = d["cameras"]["A"]
    assert d["accounted"] and cam["entered"] == cam["emitted"] == 10 and cam["lost_in_outage"] == 50
    src = cam["source"]
    assert src["outages"] == 1 and src["outage_s"] == pytest.approx(2.04)
    # opened by the disconnect: disconnected from the last frame to the reconnect, then 40 ms stalled
    assert src["disconnected_s"] == pytest.approx(2.0) and src["stalled_s"] == pytest.approx(0.04)
    assert src["outage_log"][0]["kind"] == "disconnected" and d["totals"]["lost_in_outage"] == 50
    text = format_summary(acc)
    assert "10 in = 10 emitted + 0 dropped" in text and "~50 more lost in outages" in text
    assert "1 outage 2.0 s" in text and "down 2.0 s" in text


def test_frames_lost_at_the_source_are_reported_beside_the_account():
    """A V4L2 driver skipped 3 + 2 sequence numbers: 5 lost at the source, exact, not drops."""
    acc = Accounting(["A", "B"])
    for _ in range(8):
        acc.enter("A")
        acc.emit("A")
    acc.health["A"].arrived(0, 0)
    acc.health["A"].arrived(4 * P, 4 * P, lost_before=3)
    acc.health["A"].arrived(7 * P, 7 * P, lost_before=2)
    d = acc.to_dict()
    assert d["accounted"] and d["totals"]["lost_at_source"] == 5 and d["cameras"]["A"]["lost_at_source"] == 5
    assert d["cameras"]["A"]["source"]["lost_at_source"] == 5 and d["cameras"]["B"]["lost_at_source"] == 0
    text = format_summary(acc)
    assert "8 in = 8 emitted + 0 dropped" in text and "5 more lost at the source" in text
    assert any(line.split()[0] == "A" and line.endswith("(5 lost at the source)") for line in text.splitlines())


def test_health_lists_are_bounded():
    h = CameraHealth()
    t = streaming(h, 2)
    for k in range(200):
        t += 10 * P
        h.disconnected(t, f"reset {k}")
        h.reconnected(t + P)
        t += 2 * P
        h.arrived(t, None)
    assert h.outages == 200 and h.disconnects == 200
    assert len(h.outage_log) <= 20 and len(h.events) <= 20 and h.events_total >= 400


# -------------------------------------------------------------------------------- real RTSP
W, H = 96, 64
READ_TIMEOUT_S = 0.25  #: the RTSP sources' read timeout: short, since the tests wait on counted timeouts
RECONNECT_S = 0.1  #: the first reconnect back-off: a failed reconnect is followed by at least this wait
EVENT_BOUND_S = 60.0  #: longest wait for an event the test expects (a failure message, not a hang)
#: dvpipe's RTSP client (the runner's I/O loop) and FFmpeg's (a reader thread each) report outages alike
CLIENTS = pytest.mark.parametrize("client", ["dvpipe", "ffmpeg"])


@pytest.fixture(scope="module")
def units():
    return encode_access_units(30, W, H, codec="h264", gop=10)


def deployment(urls: dict, stall_reconnect_s: float | None = None, client: str = "dvpipe", **run):
    rig = tiny_rig(list(urls), W, H, encoding="h264")
    rtsp = {"type": "rtsp", "open_timeout_s": 2, "read_timeout_s": READ_TIMEOUT_S, "client": client,
            "reconnect": {"initial_ms": RECONNECT_S * 1000, "max_ms": 200, "attempts": 0}}
    if stall_reconnect_s:
        rtsp["stall_reconnect_s"] = stall_reconnect_s
    d = {"name": "outages", "rig": rig,
         "pipeline": {"stages": ["decode", {"normalise": {"mean": [128] * 3, "std": [64] * 3}}], "backends": ["cpu"]},
         "cameras": [{"name": n, "source": dict(rtsp, uri=u)} for n, u in urls.items()],
         "sync": {"tolerance_ms": 15, "deadline_ms": 40, "on_late": "mask"},
         "run": dict({"queue_size": 1, "stall_timeout_ms": 300}, **run),
         "outputs": {"metrics": False}}
    return load_deployment(d)


def run_while(dep, action):
    """Run ``dep`` in this thread while ``action(runner)`` drives the server from another one."""
    import threading

    runner = Runner(dep, write_outputs=False)
    t = threading.Thread(target=action, args=(runner,), daemon=True)
    runner.start()
    t.start()
    result = runner.run()
    t.join(10)
    return result


def wait_until(runner, condition, what: str) -> None:
    """Poll ``condition()`` until it holds; past :data:`EVENT_BOUND_S` stop the run and fail saying ``what``."""
    bound = time.monotonic() + EVENT_BOUND_S
    while not condition():
        if runner.stop_event.is_set():
            return
        if time.monotonic() > bound:
            runner.request_stop(f"test: no {what}")
            pytest.fail(f"no {what} within {EVENT_BOUND_S:g} s")
        time.sleep(0.02)


def wait_for_frames(runner, cam: str, n: int) -> None:
    wait_until(runner, lambda: runner.acc.entered[cam] >= n, f"{n} frames from {cam}")


def the_outage(h, kind: str, after_ns: int):
    """The outage of ``kind`` still open at ``after_ns`` (runner clock: when the test broke the stream);
    a start-up stall may come before it."""
    found = [o for o in h.outage_log if o.kind == kind and o.end_ns is not None and o.end_ns > after_ns]
    assert len(found) == 1, [o.to_dict() for o in h.outage_log]
    return found[0]


@CLIENTS
def test_rtsp_sender_pause_is_a_stall_not_a_disconnect(units, client):
    broken: list[int] = []  # when the test broke the stream (runner clock)
    streams = {"A": RtspStream("h264", units, fps=25), "B": RtspStream("h264", units, fps=25)}

    def pause_a(runner):
        wait_for_frames(runner, "A", 10)
        before = runner.acc.health["A"].read_timeouts
        broken.append(runner.clock())
        streams["A"].pause()  # until the reader has timed out twice on the open connection
        wait_until(runner, lambda: runner.acc.health["A"].read_timeouts >= before + 2, "read timeouts of A")
        streams["A"].resume()
        wait_for_frames(runner, "A", runner.acc.entered["A"] + 10)
        runner.request_stop("test done")

    with LoopbackRtspServer(streams) as srv:
        result = run_while(deployment({n: srv.url(n) for n in streams}, client=client, duration_s=20), pause_a)
    acc = result.accounting
    assert acc.check() == []
    h = acc.health["A"]
    assert h.disconnects == 0 and streams["A"].connections == 1, list(h.events)  # no "Immediate exit requested"
    assert h.read_timeouts >= 2  # the pause lasted two read timeouts
    o = the_outage(h, "stalled", broken[0])
    # it held the two read timeouts, each READ_TIMEOUT_S of waiting on the socket
    assert o.duration_ns >= 2 * READ_TIMEOUT_S * 1e9 and o.stalled_ns == o.duration_ns and o.disconnected_ns == 0
    assert o.lost == 0  # the server resumed where it paused: its RTP timestamps skipped nothing
    assert acc.health["B"].disconnects == 0


@CLIENTS
def test_rtsp_server_restart_is_a_disconnect_with_frames_lost(units, client):
    broken: list[int] = []  # when the test broke the stream (runner clock)
    streams = {"A": RtspStream("h264", units, fps=25)}

    def restart(runner):
        wait_for_frames(runner, "A", 10)
        broken.append(runner.clock())
        srv.suspend()  # until the reader has lost the connection and failed to reconnect once
        h = runner.acc.health["A"]
        wait_until(runner, lambda: h.disconnects >= 1 and h.state == "reconnecting", "failed reconnect of A")
        srv.resume()
        wait_for_frames(runner, "A", runner.acc.entered["A"] + 10)
        runner.request_stop("test done")

    srv = LoopbackRtspServer(streams).start()
    try:
        result = run_while(deployment({"A": srv.url("A")}, client=client, duration_s=20), restart)
    finally:
        srv.stop()
    acc = result.accounting
    assert acc.check() == []
    h = acc.health["A"]
    assert h.disconnects == 1 and h.reconnects == 1 and streams["A"].connections == 2, list(h.events)
    # a reconnect attempt failed while the server was down, and the reader waited its back-off after it
    o = the_outage(h, "disconnected", broken[0])
    assert o.duration_ns >= RECONNECT_S * 1e9
    assert o.disconnected_ns > 0 and o.stalled_ns + o.disconnected_ns == o.duration_ns
    period = h.period_ns()
    assert 35 * MS <= period <= 45 * MS  # measured from the arrivals: 25 fps
    assert o.lost == max(0, round(o.duration_ns / period) - 1) and o.lost >= round(RECONNECT_S * 25) - 1
    assert acc.lost_in_outage("A") >= o.lost and acc.to_dict()["cameras"]["A"]["lost_in_outage"] == h.lost_in_outage
    assert h.outage_ns >= o.duration_ns and h.disconnected_ns >= o.disconnected_ns


@CLIENTS
def test_rtsp_stall_past_the_limit_reconnects(units, client):
    broken: list[int] = []  # when the test broke the stream (runner clock)
    streams = {"A": RtspStream("h264", units, fps=25)}

    def pause_a(runner):
        wait_for_frames(runner, "A", 10)
        broken.append(runner.clock())
        streams["A"].pause()
        wait_until(runner, lambda: runner.acc.health["A"].disconnects >= 1, "stall reconnect of A")
        streams["A"].resume()
        wait_for_frames(runner, "A", runner.acc.entered["A"] + 10)
        runner.request_stop("test done")

    with LoopbackRtspServer(streams) as srv:
        result = run_while(deployment({"A": srv.url("A")}, stall_reconnect_s=1.2, client=client, duration_s=20), pause_a)
    acc = result.accounting
    assert acc.check() == []
    h = acc.health["A"]
    assert h.disconnects == 1 and h.reconnects == 1 and streams["A"].connections == 2, list(h.events)
    assert any("stall_reconnect_s" in e for e in h.events)
    o = the_outage(h, "disconnected", broken[0])
    assert o.stalled_ns >= 1.2e9  # stalled up to the limit (the reader reconnects only past it), then disconnected
    assert o.stalled_ns + o.disconnected_ns == o.duration_ns
