"""RTSP sources against a loopback RTSP server started by the test (dvpipe.testing.rtsp_server:
RTP over the RTSP TCP connection, H.264/H.265): streaming, reconnect with back-off after the
server drops the connection, a stalled stream, and a server that is not there, through dvpipe's
own client (the runner's I/O loop) and FFmpeg's (a reader thread each). Loopback only."""
from __future__ import annotations

import socket

import pytest

from dvpipe import Camera
from dvpipe.deploy import Runner, load_deployment
from dvpipe.deploy.config import SourceConfig
from dvpipe.bitstream import nal_units
from dvpipe.testing.rtsp_server import LoopbackRtspServer, RtspStream
from dvpipe.deploy.sources import SourceError
from dvpipe.deploy.sources.video import RtspSource
from dvpipe.testing.deployments import encode_access_units, tiny_rig

W, H = 96, 64


def rtsp_deployment(urls: dict, **kw) -> dict:
    rig = tiny_rig(list(urls), W, H, encoding=kw.pop("encoding", "h264"))
    reconnect = kw.pop("reconnect", {"initial_ms": 100, "max_ms": 400, "attempts": 20})
    client = kw.pop("client", None)
    transport = kw.pop("transport", "tcp")
    return {
        "name": "rtsp-test",
        "rig": rig,
        "pipeline": {"stages": ["decode", {"normalise": {"mean": [128] * 3, "std": [64] * 3}},
                                {"pad": {"size_divisor": 32}}], "backends": ["cpu"]},
        "cameras": [{"name": n, "source": {"type": "rtsp", "uri": u, "open_timeout_s": 3, "read_timeout_s": 1,
                                           "reconnect": reconnect, "client": client, "transport": transport}}
                     for n, u in urls.items()],
        # the server's cameras are not synchronised: only assert on accounting, not on set contents
        "sync": {"tolerance_ms": 15, "deadline_ms": 40, "on_late": "mask"},
        "run": dict({"queue_size": 1, "stall_timeout_ms": 300}, **kw.pop("run", {})),
        "outputs": {"metrics": False},
    }


def check_accounted(result):
    acc = result.accounting
    assert acc.check() == []
    for c in acc.cameras:
        assert acc.entered[c] == acc.emitted[c] + sum(acc.dropped[c].values())


@pytest.fixture(scope="module")
def h264_units():
    return encode_access_units(30, W, H, codec="h264", gop=10)


def test_packetisation_round_trip(h264_units):
    # every NAL unit survives fragmentation (FU-A) and reassembly byte for byte
    big = bytes([0x65]) + bytes(range(256)) * 20  # one 5 kB IDR slice: fragmented (FU-A)
    pkts = LoopbackRtspServer._packetise(h264_units[0][:4] + bytes([0x67, 1, 2]) + b"\x00\x00\x01" + big, "h264")
    assert pkts[0] == (bytes([0x67, 1, 2]), False)
    fus = [p for p, _m in pkts[1:]]
    assert all(p[0] & 0x1F == 28 for p in fus) and fus[0][1] & 0x80 and fus[-1][1] & 0x40 and pkts[-1][1]
    assert bytes([(fus[0][0] & 0xE0) | (fus[0][1] & 0x1F)]) + b"".join(p[2:] for p in fus) == big
    assert nal_units(b"\x00\x00\x00\x01\x67\x01\x00\x00\x01\x68\x02") == [b"\x67\x01", b"\x68\x02"]


def test_server_binds_loopback_only():
    with pytest.raises(ValueError, match="loopback"):
        LoopbackRtspServer({}, host="0.0.0.0")


@pytest.mark.parametrize("codec", ["h264", "h265"])
def test_rtsp_source_reads_access_units(codec):
    aus = encode_access_units(20, W, H, codec=codec, gop=10)
    with LoopbackRtspServer({"cam": RtspStream(codec, aus, fps=50)}) as srv:
        src = RtspSource(Camera("cam", width=W, height=H, encoding=codec),
                         SourceConfig("rtsp", srv.url("cam"), {"read_timeout_s": 2.0}))
        src.open()
        items = [src.read() for _ in range(12)]
        src.close()
    assert all(it is not None and it.capture_mono_ns is not None for it in items)
    assert items[0].keyframe  # the stream analysis at open does not eat the first frames
    sent = [nal_units(au) for au in aus]
    got = [[n for u in it.frame.data.units if hasattr(u, "data") for n in nal_units(u.data)] for it in items]
    assert got == sent[:12]  # whole access units, Annex B, one per frame (no B-frames: no look-ahead)
    caps = [it.frame.capture_epoch_ns for it in items]
    assert caps == sorted(caps)


@pytest.mark.parametrize("client", ["dvpipe", "ffmpeg"])
def test_rtsp_deployment_reconnects_after_the_server_drops_it(h264_units, client):
    streams = {"A": RtspStream("h264", h264_units, fps=30, drop_after=25),
               "B": RtspStream("h264", h264_units, fps=30)}
    with LoopbackRtspServer(streams) as srv:
        dep = load_deployment(rtsp_deployment({n: srv.url(n) for n in streams}, run={"duration_s": 2.5},
                                              client=client))
        result = Runner(dep, write_outputs=False).run()
    check_accounted(result)
    acc = result.accounting
    h = acc.health["A"]
    assert h.disconnects >= 1 and h.reconnects >= 1, h.events
    assert streams["A"].connections >= 2
    assert acc.emitted["A"] >= 10 and acc.emitted["B"] >= 20
    assert acc.health["B"].disconnects == 0
    # after the reconnect the decoder waits for a keyframe at most; nothing is corrupt
    assert "corrupt" not in acc.dropped["A"]


@pytest.mark.parametrize("client", ["dvpipe", "ffmpeg"])
def test_rtsp_stall_is_reported_and_does_not_block_the_other_camera(h264_units, client):
    streams = {"A": RtspStream("h264", h264_units, fps=30, pause_at=15, pause_s=0.8),
               "B": RtspStream("h264", h264_units, fps=30)}
    with LoopbackRtspServer(streams) as srv:
        dep = load_deployment(rtsp_deployment({n: srv.url(n) for n in streams}, client=client,
                                              reconnect={"initial_ms": 100, "attempts": 5},
                                              # A pauses 0.8 s; B must not read a host's pause as a stall
                                              run={"duration_s": 2.5, "stall_timeout_ms": 450}))
        result = Runner(dep, write_outputs=False).run()
    check_accounted(result)
    acc = result.accounting
    assert acc.health["A"].stalls >= 1 or acc.health["A"].disconnects >= 1, acc.health["A"].events
    assert sum(acc.masked["A"].values()) >= 3
    assert acc.health["B"].stalls == 0 and acc.emitted["B"] >= 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("client", ["dvpipe", "ffmpeg"])
def test_rtsp_server_that_is_not_there(h264_units, client):
    port = _free_port()  # nothing listens here
    with pytest.raises(SourceError, match="cannot open"):
        RtspSource(Camera("X", width=W, height=H, encoding="h264"),
                   SourceConfig("rtsp", f"rtsp://127.0.0.1:{port}/x", {"open_timeout_s": 1.0, "client": client})).open()
    with LoopbackRtspServer({"B": RtspStream("h264", h264_units, fps=30)}) as srv:
        dep = load_deployment(rtsp_deployment({"A": f"rtsp://127.0.0.1:{port}/x", "B": srv.url("B")}, client=client,
                                              reconnect={"initial_ms": 50, "max_ms": 100, "attempts": 3},
                                              run={"duration_s": 1.5}))
        result = Runner(dep, write_outputs=False).run()
    check_accounted(result)
    acc = result.accounting
    assert acc.health["A"].state == "failed" and "did not open" in acc.health["A"].detail
    assert "after 4 attempts" in acc.health["A"].detail
    assert acc.entered["A"] == 0 and acc.emitted["B"] >= 15
    assert sum(acc.masked["A"].values()) >= 15
