"""dvpipe's own RTSP client (dvpipe.deploy.sources._rtsp_client) and the runner's I/O loop serving it.

References: RTP packets built by hand from RFC 6184 / RFC 7798 (what each packet must give), the
RFC 2617 worked example of Digest authentication, the access units of the files GStreamer's RTSP
server streams as FFmpeg demuxes them, and FFmpeg's RTSP client's sender clock on the same server.
"""
from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest

from dvpipe import Camera
from dvpipe.bitstream import nal_units
from dvpipe.deploy import Runner, load_deployment
from dvpipe.deploy.config import SourceConfig
from dvpipe.deploy.sources import SourceError
from dvpipe.deploy.sources._rtp import RtpDepacketiser, RtpReorder
from dvpipe.deploy.sources._rtsp_client import RtspConnection, digest_response, parse_sdp
from dvpipe.deploy.sources.video import RtspSource
from dvpipe.testing.deployments import encode_access_units
from dvpipe.testing.rtsp_server import LoopbackRtspServer, RtspStream

from ..video.test_structures import media
from .test_rtsp import check_accounted, rtsp_deployment
from .test_rtsp_bframes import GstServer, _gst_rtsp_missing
from tolerances import tol

START = b"\x00\x00\x00\x01"


def rtp(seq: int, ts: int, payload: bytes, marker: bool = False, pt: int = 96, ssrc: int = 0x1234ABCD) -> bytes:
    """An RTP packet (RFC 3550 5.1): version 2, no padding/extension/CSRC."""
    return bytes([0x80, (0x80 if marker else 0) | pt]) + struct.pack(">HII", seq & 0xFFFF, ts & 0xFFFFFFFF,
                                                                       ssrc) + payload


# H.264 NAL units (header byte: F | NRI | type)
SPS, PPS = bytes([0x67, 0x42, 0x00, 0x1E, 0xAB]), bytes([0x68, 0xCE, 0x38, 0x80])
IDR = bytes([0x65]) + bytes(range(200))
P1, P2 = bytes([0x41, 9, 8, 7]), bytes([0x41, 6, 5, 4])


def h264_stream() -> list[bytes]:
    """Three pictures: STAP-A (SPS, PPS) + IDR in three FU-As; then two single NAL unit packets."""
    stap = bytes([0x78]) + struct.pack(">H", len(SPS)) + SPS + struct.pack(">H", len(PPS)) + PPS
    ind = (IDR[0] & 0xE0) | 28
    fus = [bytes([ind, 0x80 | 5]) + IDR[1:101], bytes([ind, 5]) + IDR[101:151], bytes([ind, 0x40 | 5]) + IDR[151:]]
    return [rtp(10, 0, stap), rtp(11, 0, fus[0]), rtp(12, 0, fus[1]), rtp(13, 0, fus[2], marker=True),
            rtp(14, 3000, P1, marker=True), rtp(15, 6000, P2, marker=True)]


def depacketise(codec: str, packets: list[bytes]):
    d = RtpDepacketiser(codec, 96)
    return [u for p in packets for u in d.packet(p)], d


def test_h264_single_stap_a_and_fu_a_give_the_access_units_of_rfc_6184():
    units, d = depacketise("h264", h264_stream())
    assert [bytes(u) for u in units] == [START + SPS + START + PPS + START + IDR, START + P1, START + P2]
    assert [u.pts for u in units] == [0, 3000, 6000] and all(u.damage is None for u in units)
    assert float(units[1].pts * units[1].time_base) == pytest.approx(1 / 30)
    assert d.lost == 0


def test_h265_aggregation_and_fragmentation_units_give_the_access_units_of_rfc_7798():
    vps, sps, pps = bytes([0x40, 0x01, 1, 2]), bytes([0x42, 0x01, 3, 4, 5]), bytes([0x44, 0x01, 6])
    idr = bytes([0x26, 0x01]) + bytes(range(100, 250))  # IDR_W_RADL (19)
    trail = bytes([0x02, 0x01, 7, 7])  # TRAIL_R (1)
    ap = bytes([0x60, 0x01]) + b"".join(struct.pack(">H", len(n)) + n for n in (vps, sps, pps))
    fu = bytes([0x62, 0x01])  # type 49, layer 0, tid 1
    pkts = [rtp(65534, 90000, ap), rtp(65535, 90000, fu + bytes([0x80 | 19]) + idr[2:80]),
            rtp(0, 90000, fu + bytes([0x40 | 19]) + idr[80:], marker=True),  # the sequence number wraps
            rtp(1, 93000, trail, marker=True)]
    units, d = depacketise("h265", pkts)
    assert [bytes(u) for u in units] == [START + vps + START + sps + START + pps + START + idr, START + trail]
    assert [u.pts for u in units] == [0, 3000] and d.lost == 0


def test_lost_packets_damage_the_units_they_touch_and_only_those():
    pkts = h264_stream()
    # the IDR's middle fragment lost: the IDR is damaged (named by sequence number), P1 and P2 are not
    units, d = depacketise("h264", pkts[:2] + pkts[3:])
    assert [u.pts for u in units] == [0, 3000, 6000]
    assert units[0].damage is not None and "12..12" in units[0].damage and d.lost == 1
    assert units[1].damage is None and units[2].damage is None
    # P1 lost whole: P2 follows a lost picture (its reference chain is broken)
    units, _ = depacketise("h264", pkts[:4] + pkts[5:])
    assert [u.pts for u in units] == [0, 6000] and units[0].damage is None and "14..14" in units[1].damage
    # the IDR's last fragment (the marker) lost: the IDR ends at P1's new timestamp, damaged; P1 may have
    # lost its beginning: damaged too
    units, _ = depacketise("h264", pkts[:3] + pkts[4:])
    assert [u.pts for u in units] == [0, 3000, 6000]
    assert units[0].damage and units[1].damage and units[2].damage is None
    # a late duplicate is ignored, not counted twice
    units, d = depacketise("h264", pkts[:4] + [pkts[2]] + pkts[4:])
    assert [bytes(u) for u in units][1:] == [START + P1, START + P2] and d.lost == 0


def test_a_sender_without_marker_bits_loses_nothing():
    pkts = [p[:1] + bytes([p[1] & 0x7F]) + p[2:] for p in h264_stream()]
    units, _ = depacketise("h264", pkts)
    assert [u.pts for u in units] == [0, 3000] and all(u.damage is None for u in units)  # the last waits


def test_digest_response_of_rfc_2617_worked_example():
    # RFC 2617 section 3.5
    assert digest_response("Mufasa", "Circle Of Life", "testrealm@host.com", "dcd98b7102dd2f0e8b11d0f600bfb0c093",
                           "GET", "/dir/index.html", "auth", "00000001", "0a4f113b") == \
        "6629fae49393a05397450978507c4ef1"


def test_sdp_of_a_camera():
    sdp = ("v=0\r\no=- 1 1 IN IP4 192.168.1.64\r\ns=Media Presentation\r\nt=0 0\r\na=control:*\r\n"
           "m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n"
           "a=fmtp:96 profile-level-id=420029; packetization-mode=1; sprop-parameter-sets=Z01AKI2NQDwBE/LCAAAOEAACvyAI,aO44gA==\r\n"
           "a=framerate:25\r\na=control:trackID=1\r\n"
           "m=audio 0 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=control:trackID=2\r\n")
    v = parse_sdp(sdp, "rtsp://192.168.1.64:554/Streaming/Channels/101/")
    assert (v.codec, v.payload_type, v.clock_rate, v.fps) == ("h264", 96, 90000, 25.0)
    assert v.control == "rtsp://192.168.1.64:554/Streaming/Channels/101/trackID=1"
    sets = nal_units(v.parameter_sets)
    assert [n[0] & 0x1F for n in sets] == [7, 8] and sets[1] == bytes([0x68, 0xEE, 0x38, 0x80])
    with pytest.raises(SourceError, match="client: ffmpeg"):
        parse_sdp(sdp.replace("H264/90000", "MP4V-ES/90000"), "rtsp://h/")
    with pytest.raises(SourceError, match="packetization-mode"):
        parse_sdp(sdp.replace("packetization-mode=1", "packetization-mode=2"), "rtsp://h/")


def test_an_srtp_stream_is_refused_in_one_line():
    sdp = "v=0\r\nm=video 0 RTP/SAVP 96\r\na=rtpmap:96 H264/90000\r\na=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:x\r\n"
    with pytest.raises(SourceError, match=r"SRTP \(RTP/SAVP\).*client: ffmpeg"):
        parse_sdp(sdp, "rtsp://10.0.0.2/s")


def test_interleaved_frames_split_anywhere_with_answers_between_them():
    """The connection's parser against the hand-built stream, delivered a few bytes at a time with an
    answer to a keep-alive and an RTCP packet between the RTP frames."""
    a, b = socket.socketpair()
    conn = RtspConnection("rtsp://127.0.0.1:1/x")
    conn._sock = b
    conn._depacketiser = RtpDepacketiser("h264", 96)
    b.setblocking(False)
    wire = bytearray()
    for k, p in enumerate(h264_stream()):
        wire += b"$\x00" + struct.pack(">H", len(p)) + p
        if k == 2:
            wire += b"RTSP/1.0 200 OK\r\nCSeq: 7\r\nContent-Length: 4\r\n\r\nabcd"
            rr = bytes([0x80, 201, 0, 1]) + b"\0\0\0\1"  # an empty receiver report
            wire += b"$\x01" + struct.pack(">H", len(rr)) + rr
    for i in range(0, len(wire), 7):
        a.send(bytes(wire[i:i + 7]))
        time.sleep(0.0005)
        conn.receive()
    conn.receive()
    assert [bytes(u) for u in conn.units] == [START + SPS + START + PPS + START + IDR, START + P1, START + P2]
    assert a.recv(4096).startswith(b"OPTIONS rtsp://127.0.0.1:1/x RTSP/1.0\r\n")  # the keep-alive, once
    a.close()
    with pytest.raises(SourceError, match="closed the connection"):
        conn.receive()
    conn.close()


@pytest.mark.parametrize("codec", ["h264", "h265"])
def test_own_and_ffmpeg_clients_read_the_same_access_units(codec):
    aus = encode_access_units(16, 96, 64, codec=codec, gop=8)
    got = {}
    with LoopbackRtspServer({"cam": RtspStream(codec, aus, fps=60)}) as srv:
        for client in ("dvpipe", "ffmpeg"):
            src = RtspSource(Camera("cam", width=96, height=64, encoding=codec),
                             SourceConfig("rtsp", srv.url("cam"), {"client": client}))
            src.open()
            items = [src.read() for _ in range(10)]
            src.close()
            got[client] = [[n for u in it.frame.data.units if hasattr(u, "data") for n in nal_units(u.data)]
                           for it in items]
    assert got["dvpipe"] == got["ffmpeg"] == [nal_units(au) for au in aus[:10]]


def _threads(prefix: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def _certificate(folder, name: str) -> tuple[str, str]:
    """A self-signed certificate and its key (PEM) for ``name`` (an IP address or a DNS name), by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl (the command) is needed to make a test certificate")
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    san = f"IP:{name}" if name[0].isdigit() else f"DNS:{name}"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", f"/CN={name}", "-addext", f"subjectAltName={san}"],
                   check=True, capture_output=True)
    return str(cert), str(key)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """The loopback server's certificate (127.0.0.1) and one for another name."""
    d = tmp_path_factory.mktemp("tls")
    return {"loopback": _certificate(d, "127.0.0.1"), "other": _certificate(d, "camera.example")}


@pytest.mark.parametrize("transport, scheme", [("tcp", "rtsp"), ("udp", "rtsp"), ("tcp", "rtsps")])
def test_twelve_rtsp_cameras_are_read_by_one_thread(transport, scheme, request):
    aus = encode_access_units(30, 96, 64, codec="h264", gop=10)
    streams = {f"c{i}": RtspStream("h264", aus, fps=30) for i in range(12)}
    counts: dict[str, int] = {}
    cert = request.getfixturevalue("tls")["loopback"] if scheme == "rtsps" else None
    with LoopbackRtspServer(streams, tls=cert) as srv:
        # stall_timeout_ms at its default (1 s, not the 300 ms of the other RTSP tests): a camera the one
        # thread starves goes a second without a frame, while a loaded 2-core CI host can pause every
        # thread of this process (server, reader, runner) for a few hundred ms
        spec = rtsp_deployment({n: srv.url(n) for n in streams}, transport=transport,
                               run={"duration_s": 1.5, "stall_timeout_ms": 1000})
        if cert is not None:
            for cam in spec["cameras"]:
                cam["source"]["ca_file"] = cert[0]
        dep = load_deployment(spec)
        runner = Runner(dep, write_outputs=False)
        seen = threading.Event()

        def look(r):
            if r.sets_done == 20:
                counts.update({k: _threads(k) for k in ("dvpipe-src-", "dvpipe-live-io", "dvpipe-connect")})
                seen.set()

        runner.progress = look
        result = runner.run()
    check_accounted(result)
    assert seen.is_set()
    assert counts["dvpipe-src-"] == 0 and counts["dvpipe-live-io"] == 1 and counts["dvpipe-connect"] == 0, counts
    assert all(result.accounting.emitted[c] >= 20 for c in streams), result.accounting.emitted
    health = result.accounting.health
    assert all(h.stalls == 0 and h.disconnects == 0 for h in health.values()), \
        {c: list(h.events) for c, h in health.items() if h.stalls or h.disconnects}


def test_a_camera_whose_receive_breaks_fails_alone_and_the_io_thread_serves_the_others(monkeypatch):
    # an unexpected error inside one camera's receive() (a driver or parser bug) used to end the I/O thread
    # that serves every polled camera: the others then stopped without a word
    aus = encode_access_units(30, 96, 64, codec="h264", gop=10)
    streams = {f"c{i}": RtspStream("h264", aus, fps=30) for i in range(2)}
    real, calls = RtspSource.receive, {"c0": 0}

    def receive(self):
        if self.camera.name == "c0":
            calls["c0"] += 1
            if calls["c0"] == 20:
                raise RuntimeError("a parser bug")
        return real(self)

    monkeypatch.setattr(RtspSource, "receive", receive)
    with LoopbackRtspServer(streams) as srv:
        dep = load_deployment(rtsp_deployment({n: srv.url(n) for n in streams}, run={"duration_s": 1.5}))
        result = Runner(dep, write_outputs=False).run()
    check_accounted(result)
    health = result.accounting.health
    assert calls["c0"] == 20
    assert health["c0"].state == "failed" and "RuntimeError: a parser bug" in health["c0"].detail
    assert health["c1"].state != "failed" and result.accounting.emitted["c1"] >= 30, result.accounting.emitted


def test_ffmpeg_client_keeps_a_reader_thread_per_camera():
    aus = encode_access_units(30, 96, 64, codec="h264", gop=10)
    streams = {f"c{i}": RtspStream("h264", aus, fps=30) for i in range(3)}
    counts: dict[str, int] = {}
    with LoopbackRtspServer(streams) as srv:
        spec = rtsp_deployment({n: srv.url(n) for n in streams}, run={"duration_s": 1.0})
        for cam in spec["cameras"]:
            cam["source"]["client"] = "ffmpeg"
        runner = Runner(load_deployment(spec), write_outputs=False)
        runner.progress = lambda r: counts.setdefault("src", _threads("dvpipe-src-")) if r.sets_done == 5 else None
        result = runner.run()
    check_accounted(result)
    assert counts["src"] == 3


def test_client_dvpipe_for_raw_and_a_missing_ca_file_are_refused_in_one_line(tmp_path):
    from dvpipe.errors import ConfigError

    spec = rtsp_deployment({"A": "rtsps://127.0.0.1:1/a"}, encoding="raw")
    spec["cameras"][0]["source"].update({"client": "dvpipe"})
    with pytest.raises(ConfigError, match=r"cameras\[0\]\.source\.client.*not raw pictures.*client: ffmpeg can"):
        load_deployment(spec)
    spec = rtsp_deployment({"A": "rtsps://127.0.0.1:1/a"})
    spec["cameras"][0]["source"]["ca_file"] = str(tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match=r"cameras\[0\]\.source\.ca_file"):
        load_deployment(spec)


@pytest.mark.parametrize("encoding", ["h264", "h265", "jpeg"])
@pytest.mark.parametrize("url", ["rtsp://127.0.0.1:1/a", "rtsps://127.0.0.1:1/a"])
@pytest.mark.parametrize("transport", ["tcp", "udp"])
def test_dvpipe_reads_either_transport_and_scheme_by_default(transport, url, encoding):
    src = RtspSource(Camera("A", width=96, height=64, encoding=encoding),
                     SourceConfig("rtsp", url, {"transport": transport}))
    assert src.pollable
    raw = RtspSource(Camera("A", width=96, height=64, encoding="raw"), SourceConfig("rtsp", url, {"transport": transport}))
    assert not raw.pollable


def test_rtsps_checks_the_servers_certificate_and_reads_what_ffmpeg_reads(tls):
    """The loopback server speaks RTSP in TLS with a self-signed certificate for 127.0.0.1: dvpipe's client
    reads the access units sent when that certificate is its ca_file (over TCP and UDP) or tls_verify is
    off; FFmpeg's client (which checks nothing) reads the same. Without ca_file, or with a certificate
    for another name, the camera is refused in one line that says what to set."""
    aus = encode_access_units(12, 320, 240, codec="h264", gop=6)
    want = [nal_units(au) for au in aus[:6]]
    cert = tls["loopback"][0]

    def units(url: str, **options) -> list:
        src = RtspSource(Camera("cam", width=320, height=240, encoding="h264"), SourceConfig("rtsp", url, options))
        src.open()
        try:
            assert src.pollable == (options.get("client") != "ffmpeg")
            items = [src.read() for _ in range(6)]
        finally:
            src.close()
        return [[n for u in it.frame.data.units if hasattr(u, "data") for n in nal_units(u.data)] for it in items]

    with LoopbackRtspServer({"cam": RtspStream("h264", aus, fps=60)}, tls=tls["loopback"]) as srv:
        url = srv.url("cam")
        assert url.startswith("rtsps://")
        assert units(url, ca_file=cert) == want
        assert units(url, ca_file=cert, transport="udp") == want
        assert units(url, tls_verify=False) == want
        assert units(url, client="ffmpeg") == want
        with pytest.raises(SourceError, match=r"certificate was not accepted \(self.signed.*ca_file.*tls_verify: false"):
            units(url)
    with LoopbackRtspServer({"cam": RtspStream("h264", aus, fps=60)}, tls=tls["other"]) as srv:
        with pytest.raises(SourceError, match=r"certificate was not accepted \(.*(mismatch|match).*ca_file"):
            units(srv.url("cam"), ca_file=tls["other"][0])
        assert units(srv.url("cam"), tls_verify=False) == want


def test_the_first_sequence_number_is_the_video_streams_in_rtp_info():
    """RFC 2326 12.33: one ``url=...;seq=...;rtptime=...`` entry per stream, comma-separated."""
    from dvpipe.deploy.sources._rtsp_client import _first_seq

    both = "url=rtsp://cam/live/trackID=1;seq=7;rtptime=10,url=rtsp://cam/live/trackID=2;seq=65535;rtptime=3"
    assert _first_seq(both, "rtsp://cam/live/trackID=2") == 65535
    assert _first_seq(both, "rtsp://cam/live/trackID=1") == 7
    assert _first_seq("url=rtsp://cam/live/stream=0;seq=4711;rtptime=0", "rtsp://other/x") == 4711  # the only one
    assert _first_seq("url=rtsp://cam/live/stream=0;rtptime=0", "rtsp://cam/live/stream=0") is None
    assert _first_seq("", "rtsp://cam/live") is None


def _reordered(packets: list[bytes], order: list[int], reorder: RtpReorder, clock: list[float]) -> list[bytes]:
    out = []
    for i in order:
        clock[0] += 0.001
        out += reorder.push(packets[i], clock[0])
    return out


def test_packets_out_of_order_give_the_units_of_the_packets_in_order():
    """UDP may deliver RTP packets in any order: put back by sequence number, they give the access units
    the stream has (RFC 6184 by hand: h264_stream), with nothing lost or late."""
    packets = h264_stream()
    want = [START + SPS + START + PPS + START + IDR, START + P1, START + P2]
    for order in ([0, 2, 1, 3, 4, 5], [0, 3, 2, 1, 5, 4], [0, 5, 4, 3, 2, 1], [0, 1, 2, 3, 4, 5]):
        reorder, clock = RtpReorder(), [0.0]
        got, d = depacketise("h264", _reordered(packets, order, reorder, clock))
        assert [bytes(u) for u in got] == want, order
        assert d.lost == 0 and reorder.late == 0 and all(u.damage is None for u in got)


def test_a_missing_packet_is_waited_for_then_counted_lost_and_dropped_when_it_comes_late():
    """Packet 12 (the IDR's second fragment) does not come within max_delay_s: the packets after it go
    on, the IDR is damaged by its loss and the P pictures are intact; when 12 comes after all, it is
    dropped as late. Duplicates are dropped the same way."""
    packets = h264_stream()
    reorder, clock = RtpReorder(max_delay_s=0.1), [0.0]
    passed = _reordered(packets, [0, 1, 3, 4, 5], reorder, clock)
    assert passed == packets[:2]  # 13, 14, 15 wait for 12
    passed += reorder.expire(clock[0] + 0.05)
    assert passed == packets[:2]
    passed += reorder.expire(clock[0] + 0.2)
    assert passed == packets[:2] + packets[3:]
    assert reorder.push(packets[2], clock[0] + 0.3) == [] and reorder.push(packets[4], clock[0] + 0.3) == []
    assert reorder.late == 2
    got, d = depacketise("h264", passed)
    assert d.lost == 1
    assert [bytes(u) for u in got[1:]] == [START + P1, START + P2] and got[1].damage is None
    assert "sequence numbers 12..12" in got[0].damage


def test_too_many_packets_waiting_give_up_on_the_gap():
    """At most max_packets wait: one more gives up on the gap, without waiting for max_delay_s."""
    packets = [rtp(seq, 3000 * k, bytes([0x41, k]), marker=True) for k, seq in enumerate(range(100, 110))]
    reorder = RtpReorder(max_delay_s=10.0, max_packets=3)
    assert reorder.push(packets[0], 0.0) == [packets[0]]
    assert [reorder.push(p, 0.0) for p in packets[2:5]] == [[], [], []]
    assert reorder.push(packets[5], 0.0) == packets[2:6]  # the fourth waiting packet: 101 is given up on
    assert reorder.push(packets[1], 0.0) == [] and reorder.late == 1


def test_reordering_across_the_sequence_number_wrap():
    packets = [rtp(seq, 3000 * k, bytes([0x41, k]), marker=True) for k, seq in enumerate(range(65533, 65539))]
    reorder, clock = RtpReorder(), [0.0]
    got = _reordered(packets, [0, 2, 1, 4, 3, 5], reorder, clock)
    assert got == packets and reorder.late == 0
    units, d = depacketise("h264", got)
    assert len(units) == 6 and d.lost == 0


def test_a_receive_buffer_smaller_than_asked_is_told_once(monkeypatch):
    """Whatever the machine's net.core.rmem_max, 1 GB is more than it gives: one warning that names it."""
    from dvpipe.deploy.sources import _rtsp_client

    monkeypatch.setattr(_rtsp_client, "_UDP_RECEIVE_BUFFER", 1 << 30)
    monkeypatch.setattr(_rtsp_client, "_small_buffer_told", False)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
        with pytest.warns(RuntimeWarning, match=r"KB receive buffer per camera .*net.core.rmem_max.*transport: tcp"):
            _rtsp_client._receive_buffer(a)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _rtsp_client._receive_buffer(b)  # told once


def test_udp_packets_out_of_order_on_the_way_lose_no_picture():
    """The test server sends the RTP packets of pictures 0 (the IDR) and 3-7 last first over UDP: dvpipe's
    client, which starts at the packet PLAY's RTP-Info names, reads every picture whole, the access units
    sent. FFmpeg's client with transport udp reads the same from picture 1 on (it starts at the first
    packet to arrive, and drops the IDR's earlier slices as late)."""
    aus = encode_access_units(16, 320, 240, codec="h264", gop=8)
    assert len(LoopbackRtspServer._packetise(aus[0], "h264")) >= 3  # the IDR is several packets
    got = {}
    with LoopbackRtspServer({"cam": RtspStream("h264", aus, fps=60, reorder=[0, 3, 4, 5, 6, 7])}) as srv:
        for client in ("dvpipe", "ffmpeg"):
            src = RtspSource(Camera("cam", width=320, height=240, encoding="h264"),
                             SourceConfig("rtsp", srv.url("cam"), {"client": client, "transport": "udp"}))
            src.open()
            items = [src.read() for _ in range(10)]
            if client == "dvpipe":
                assert src._conn._udp is not None
                assert src._conn.packets_lost == 0 and src._conn.packets_late == 0
                assert all(u.damage is None for it in items for u in it.frame.data.units if hasattr(u, "damage"))
            src.close()
            got[client] = [[n for u in it.frame.data.units if hasattr(u, "data") for n in nal_units(u.data)]
                           for it in items]
    want = [nal_units(au) for au in aus[:10]]
    assert got["dvpipe"] == want and got["ffmpeg"][1:] == want[1:]


@pytest.mark.parametrize("reader", ["own thread", "io loop"])
def test_a_udp_gap_is_given_up_on_when_its_wait_ends_not_when_the_next_packet_comes(reader):
    """A packet in the middle of picture 2 is lost: the packets after it wait behind the gap for
    max_delay_s (100 ms), then picture 2 is complete (damaged: the loss named). The camera sends 2
    pictures a second: picture 2 must be read before picture 3 is sent, not when picture 3's packets come
    half a second later and find the wait over (the gap was given up on only when a datagram came)."""
    from dvpipe.testing.deployments import tiny_rig

    w, h = 640, 480
    aus = encode_access_units(5, w, h, codec="h264", gop=5)
    lost = 2
    assert len(LoopbackRtspServer._packetise(aus[lost], "h264")) >= 4  # packets after the one lost
    stream = RtspStream("h264", aus, fps=2, loop=False, lose=[(lost, 1)])
    read: list = []  # per frame read: (pictures sent by then, the loss it names)
    with LoopbackRtspServer({"A": stream}) as srv:
        if reader == "own thread":
            src = RtspSource(Camera("A", width=w, height=h, encoding="h264"),
                             SourceConfig("rtsp", srv.url("A"), {"transport": "udp"}))
            src.open()
            try:
                for _ in range(lost + 1):
                    item = src.read()
                    read.append((stream.sent, [u.damage for u in item.frame.data.units if hasattr(u, "damage")]))
            finally:
                src.close()
        else:
            dep = rtsp_deployment({"A": srv.url("A")}, transport="udp", run={"frames": lost + 2})
            dep["rig"] = tiny_rig(["A"], w, h, encoding="h264")
            r = Runner(load_deployment(dep), write_outputs=False)
            arrived = r._arrived

            def spy(st, item):
                read.append((stream.sent, [u.damage for u in item.frame.data.units if hasattr(u, "damage")]))
                return arrived(st, item)

            r._arrived = spy
            for _ in r.batches():
                pass
            check_accounted(r.finish())
    sent, damage = read[lost]  # picture k is sent when stream.sent becomes k + 1
    assert any(d and "RTP packets lost" in d for d in damage), read
    assert sent == lost + 1, read


@pytest.mark.skipif(bool(_gst_rtsp_missing()), reason=_gst_rtsp_missing() or "ok")
@pytest.mark.parametrize("codec, transport", [("h264", "tcp"), ("h265", "tcp"), ("h264", "udp")])
def test_units_from_gstreamer_are_the_files_pictures_and_the_sender_clock_agrees_with_ffmpeg(codec, transport,
                                                                                              tmp_path):
    """GStreamer's RTSP server (rtph264pay / rtph265pay) streams a file, over the RTSP connection or over
    UDP: every slice dvpipe's client receives is the file's slice as FFmpeg demuxes it, at the file's
    pts; its sender clock (first RTCP report) agrees with FFmpeg client's ``start_time_realtime`` (the
    same transport) and the server's own start."""
    if codec == "h264":
        path = media.make_h264_bframes(tmp_path, n=120)
    else:
        path = _tagged_hvc1(media.make_h265_default(tmp_path, n=120), tmp_path / "cam.h265.mp4")
    want = _file_slices(path, codec)
    server = GstServer({"A": path})
    origins = {}
    try:
        for client in ("dvpipe", "ffmpeg"):
            src = RtspSource(Camera("A", width=128, height=72, encoding=codec),
                             SourceConfig("rtsp", server.url("A"), {"client": client, "lookahead": 0,
                                                                    "transport": transport}))
            src.open()
            got = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < 3.2:  # the first report comes ~2.5 s into the session
                it = src.read()
                got.extend(u for u in it.frame.data.units if hasattr(u, "data"))
            origins[client] = src._sender_origin_ns()
            if client == "dvpipe":
                slices = [(u.pts_ns, _slices(u.data, codec)) for u in got]
                assert src._conn.packets_lost == 0 and (src._conn._udp is not None) == (transport == "udp")
            src.close()
            time.sleep(0.3)
    finally:
        server.close()
    # decode order; pts from the session's first picture
    base = want[0][0]
    assert len(slices) >= 60
    assert [s for _p, s in slices] == [s for _p, s in want[:len(slices)]]
    assert all(abs(p - (q - base)) <= tol("rtp_pts").atol for (p, _s), (q, _t) in zip(slices, want))
    starts = server.starts["A"]
    assert origins["dvpipe"] is not None and origins["ffmpeg"] is not None
    # each session's sender clock against the server's own report of when it started
    ours, ffmpeg = origins["dvpipe"] - starts[0], origins["ffmpeg"] - starts[1]
    bound, between = tol("rtsp_sender_origin").atol, tol("rtsp_sender_origin_clients").atol
    assert abs(ffmpeg) <= bound and abs(ours) <= bound and abs(ours - ffmpeg) <= between, (ours / 1e6, ffmpeg / 1e6)


@pytest.mark.skipif(bool(_gst_rtsp_missing()), reason=_gst_rtsp_missing() or "ok")
def test_rtsps_from_gstreamers_server_gives_the_files_pictures(tls, tmp_path):
    """GStreamer's RTSP server in TLS (its certificate: ``tls``'s self-signed one for 127.0.0.1): dvpipe's
    client, trusting that certificate, reads the file's slices in decode order over TCP and over UDP."""
    path = media.make_h264_no_bframes(tmp_path, n=60)
    want = [s for _p, s in _file_slices(path, "h264")]
    cert, key = tls["loopback"]
    server = GstServer({"tls": f"{cert}:{key}", "A": path})
    try:
        for transport in ("tcp", "udp"):
            src = RtspSource(Camera("A", width=96, height=64, encoding="h264"),
                             SourceConfig("rtsp", server.url("A").replace("rtsp://", "rtsps://"),
                                          {"ca_file": cert, "transport": transport, "lookahead": 0}))
            src.open()
            items = [src.read() for _ in range(20)]
            assert (src._conn._udp is not None) == (transport == "udp") and src._conn.packets_lost == 0
            src.close()
            got = [_slices(u.data, "h264") for it in items for u in it.frame.data.units if hasattr(u, "data")]
            assert got == want[:len(got)] and len(got) >= 20, transport
    finally:
        server.close()


def _mjpeg_file(path, n: int = 40):
    """``n`` JPEG pictures (FFmpeg's MJPEG encoder, 4:2:0, the standard Huffman tables RFC 2435 assumes)
    of the test pictures in a QuickTime file, and each picture's JPEG bytes."""
    import av
    import cv2

    with av.open(str(path), "w") as out:
        st = out.add_stream("mjpeg", rate=30)
        st.width, st.height, st.pix_fmt = 320, 240, "yuvj420p"
        st.codec_context.options = {"huffman": "default"}
        for k in range(n):
            img = cv2.resize(media.frame_image(k), (320, 240))
            for pkt in st.encode(av.VideoFrame.from_ndarray(img, format="bgr24")):
                out.mux(pkt)
        for pkt in st.encode(None):
            out.mux(pkt)
    with av.open(str(path)) as c:
        return [bytes(pkt) for pkt in c.demux(c.streams.video[0]) if pkt.size]


@pytest.mark.skipif(bool(_gst_rtsp_missing()), reason=_gst_rtsp_missing() or "ok")
def test_mjpeg_from_gstreamers_server_decodes_to_the_files_pixels(tmp_path):
    """GStreamer's rtpjpegpay (RFC 2435, the JPEGs' quantisation tables in band) serves an MJPEG file:
    every JPEG dvpipe's client rebuilds, over TCP and over UDP, decodes (OpenCV) to the pixels of the
    file's own JPEG, as FFmpeg's client's frames do; the camera is served by the I/O loop (pollable).
    Once the first RTCP sender report came (~2.5 s in), each frame's capture time is the sender's clock
    of its RTP timestamp, and that clock agrees with the server's own start of the session."""
    import cv2
    import numpy as np

    path = tmp_path / "cam.mjpeg.mov"
    files = _mjpeg_file(path, n=120)  # 4 s: the first sender report comes ~2.5 s in

    def pixels(jpeg: bytes):
        img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
        assert img is not None
        return img

    server = GstServer({"A": path})
    try:
        for client, transport in (("dvpipe", "tcp"), ("dvpipe", "udp"), ("ffmpeg", "tcp")):
            src = RtspSource(Camera("A", width=320, height=240, encoding="jpeg"),
                             SourceConfig("rtsp", server.url("A"), {"client": client, "transport": transport}))
            src.open()
            try:
                assert src.pollable == (client == "dvpipe")
                items = [src.read() for _ in range(12)]
                if client == "dvpipe" and transport == "tcp":
                    t0 = time.monotonic()
                    while time.monotonic() - t0 < 3.0:
                        items.append(src.read())
                    origin, timed = src._sender_origin_ns(), items[-5:]  # the last read after the report
            finally:
                src.close()
            frames = [it.frame.data for it in items[:len(files)]]
            assert all(isinstance(f, bytes) for f in frames), (client, transport)
            assert all(np.array_equal(pixels(f), pixels(files[k])) for k, f in enumerate(frames)), (client, transport)
        assert origin is not None
        assert abs(origin - server.starts["A"][0]) <= tol("rtsp_sender_origin").atol
        assert all(it.frame.capture_epoch_ns == origin + it.media_ns for it in timed), \
            [(it.frame.capture_epoch_ns - origin - it.media_ns) / 1e6 for it in timed]
    finally:
        server.close()


def _tagged_hvc1(src, dst):
    """``src`` (FFmpeg's MP4 muxer tags H.265 ``hev1``) remuxed as ``hvc1``, what rtph265pay takes: the
    same packets, parameter sets in the sample description only."""
    import av

    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        st = inp.streams.video[0]
        o = out.add_stream_from_template(st)
        o.codec_tag = "hvc1"
        for pkt in inp.demux(st):
            if pkt.size:
                pkt.stream = o
                out.mux(pkt)
    return dst


def _slices(au: bytes, codec: str) -> list[bytes]:
    """The coded slices of an access unit (what the pictures are; parameter sets and SEI may be repeated
    or dropped by a payloader)."""
    if codec == "h264":
        return [n for n in nal_units(au) if 1 <= n[0] & 0x1F <= 5]
    return [n for n in nal_units(au) if (n[0] >> 1) & 0x3F < 32]


def _file_slices(path, codec: str) -> list[tuple[int, list[bytes]]]:
    import av

    out = []
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        bsf = av.BitStreamFilterContext("h264_mp4toannexb" if codec == "h264" else "hevc_mp4toannexb", st)
        for pkt in c.demux(st):
            for p in bsf.filter(pkt if pkt.size else None):
                out.append((int(round(float(p.pts * p.time_base) * 1e9)), _slices(bytes(p), codec)))
    return out


@pytest.mark.skipif(bool(_gst_rtsp_missing()), reason=_gst_rtsp_missing() or "ok")
@pytest.mark.parametrize("method", ["basic", "digest"])
def test_authentication_against_gstreamers_server(method, tmp_path):
    """GStreamer's RTSP server asking for a user (RFC 7617 Basic or RFC 2617 Digest): the URL's user and
    password open the stream; a wrong password and none are refused in one line that says so."""
    path = media.make_h264_no_bframes(tmp_path, n=60)
    server = GstServer({"auth": f"{method}:cam-user:s3cret pass", "A": path})
    host = server.url("A").split("//", 1)[1]

    def source(userinfo: str) -> RtspSource:
        return RtspSource(Camera("A", width=96, height=64, encoding="h264"),
                          SourceConfig("rtsp", f"rtsp://{userinfo}{host}", {"client": "dvpipe"}))

    try:
        src = source("cam-user:s3cret%20pass@")
        src.open()
        items = [src.read() for _ in range(5)]
        src.close()
        assert all(it is not None for it in items) and items[0].keyframe
        with pytest.raises(SourceError, match="401 .*password was refused"):
            source("cam-user:wrong@").open()
        with pytest.raises(SourceError, match="401 .*give user:password@"):
            source("").open()
    finally:
        server.close()


@pytest.mark.parametrize("client, transport", [("dvpipe", "tcp"), ("ffmpeg", "tcp"), ("dvpipe", "udp")])
def test_a_picture_lost_on_the_way_breaks_the_chain_until_the_next_keyframe(client, transport):
    """The server loses picture 13's RTP packet (GOP 10: pictures 0, 10, 20 are IDRs). dvpipe's client
    sees the gap in the sequence numbers: picture 14 is a ``corrupt`` drop naming it, 15-19 wait for the
    keyframe, 20 on are emitted. (FFmpeg's client does not flag the loss: its decoder conceals it and
    dvpipe's own checks find the gap in frame_num instead; the counts are the same.)"""
    aus = encode_access_units(40, 96, 64, codec="h264", gop=10)
    streams = {"A": RtspStream("h264", aus, fps=30, lose=[(13, None)])}
    with LoopbackRtspServer(streams) as srv:  # 1.2 s: about 36 pictures, within the first loop (40)
        spec = rtsp_deployment({"A": srv.url("A")}, client=client, transport=transport,
                               run={"duration_s": 1.2, "queue_size": 8})
        result = Runner(load_deployment(spec), write_outputs=False).run()
    check_accounted(result)
    acc = result.accounting
    assert 25 <= acc.entered["A"] <= 39 and acc.health["A"].disconnects == 0  # picture 13 is no frame
    assert acc.dropped["A"].get("corrupt") == 1 and acc.dropped["A"].get("keyframe_wait") == 5, acc.dropped["A"]
    if client == "dvpipe":
        assert "RTP packets lost" in acc.examples[("A", "corrupt")], acc.examples


def test_rtp_sent_before_the_answer_to_play_is_kept():
    """A server that starts streaming before it answers PLAY (allowed: the answer and the data share the
    connection): the pictures sent first are part of the stream, in order."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    frames = [b"$\x00" + struct.pack(">H", len(p)) + p for p in h264_stream()]

    def serve():
        conn, _ = listener.accept()
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            method, cseq = head.split(b" ", 1)[0], head.split(b"CSeq: ")[1].split(b"\r\n")[0]
            ok = b"RTSP/1.0 200 OK\r\nCSeq: " + cseq + b"\r\n"
            if method == b"DESCRIBE":
                sdp = b"v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:track1\r\n"
                conn.sendall(ok + b"Content-Length: %d\r\n\r\n" % len(sdp) + sdp)
            elif method == b"SETUP":
                conn.sendall(ok + b"Session: 42\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
            elif method == b"PLAY":
                conn.sendall(b"".join(frames[:4]) + ok + b"Session: 42\r\n\r\n" + b"".join(frames[4:]))
            else:
                conn.close()
                return

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    conn = RtspConnection(f"rtsp://127.0.0.1:{port}/cam", open_timeout_s=5)
    video = conn.open()
    assert video.control == f"rtsp://127.0.0.1:{port}/cam/track1"
    deadline = time.monotonic() + 5
    while len(conn.units) < 3 and time.monotonic() < deadline:
        conn.wait(0.1)
        conn.receive()
    assert [bytes(u) for u in conn.units] == [START + SPS + START + PPS + START + IDR, START + P1, START + P2]
    conn.close()
    listener.close()


def test_a_picture_lost_whole_damages_the_next_unit_even_when_some_of_its_fragments_came():
    """Picture 2 is one FU-A NAL unit of three fragments (RFC 6184 5.8) whose first is lost: no NAL unit
    of it can be rebuilt, so it gives no unit; picture 3 refers to it and is damaged by the loss, as it
    is when picture 2 is lost whole."""
    ind = (P1[0] & 0xE0) | 28
    fus = [bytes([ind, 0x80 | 1]) + b"\x11" * 10, bytes([ind, 1]) + b"\x22" * 10, bytes([ind, 0x40 | 1]) + b"\x33" * 10]
    pkts = [rtp(10, 0, IDR, marker=True), rtp(12, 3000, fus[1]), rtp(13, 3000, fus[2], marker=True),
            rtp(14, 6000, P2, marker=True)]  # 11 (fus[0]) lost
    units, d = depacketise("h264", pkts)
    assert [(bytes(u), u.pts) for u in units] == [(START + IDR, 0), (START + P2, 6000)]
    assert units[0].damage is None and "sequence numbers 11..11" in units[1].damage and d.lost == 1


def test_a_packet_without_payload_counts_in_the_sequence():
    """RFC 3550 5.1: the sequence number counts every packet. Packet 11 is padding only (P bit, its last
    byte the padding length 4), packet 13 a header extension (X bit, 1 word) and nothing after it:
    nothing is lost."""
    head = lambda b0, seq, ts: bytes([b0, 96]) + struct.pack(">HII", seq, ts, 0x1234ABCD)
    padding_only = head(0xA0, 11, 0) + b"\0\0\0\x04"
    extension_only = head(0x90, 13, 3000) + struct.pack(">HH", 0xBEDE, 1) + b"\x10\xAA\0\0"
    pkts = [rtp(10, 0, IDR, marker=True), padding_only, rtp(12, 3000, P1, marker=True), extension_only,
            rtp(14, 6000, P2, marker=True)]
    units, d = depacketise("h264", pkts)
    assert [(bytes(u), u.pts, u.damage) for u in units] == [(START + IDR, 0, None), (START + P1, 3000, None),
                                                            (START + P2, 6000, None)]
    assert d.lost == 0
    # a gap before a packet without payload still damages the next picture
    units, d = depacketise("h264", pkts[:1] + pkts[3:])
    assert [u.pts for u in units] == [0, 6000] and "sequence numbers 11..12" in units[1].damage and d.lost == 2


def _session(seq: int, ts: int, n: int, ssrc: int = 0x1234ABCD) -> list[bytes]:
    """``n`` pictures of one packet each, 3000 ticks apart (30 fps), the first an IDR."""
    return [rtp(seq + k, ts + 3000 * k, IDR if k == 0 else bytes([0x41, k]), marker=True, ssrc=ssrc)
            for k in range(n)]


@pytest.mark.parametrize("new_ssrc", [0x9999, 0x1234ABCD])
@pytest.mark.parametrize("new_seq", [30000, 45000, 40007])
def test_a_sender_restarting_its_rtp_session_is_followed(new_ssrc, new_seq):
    """A camera restarts its encoder mid-stream: new random sequence numbers and timestamps (RFC 3550
    5.1), with a new SSRC or not. RFC 3550 A.1: a new SSRC, or a jump beyond MAX_DROPOUT (3000) ahead or
    MAX_MISORDER (100) behind followed by the next packet, starts the sequence afresh. Every picture of
    the new session comes; the timestamps go on 3000 ticks a picture; the first is damaged (the chain
    starts again), nothing is lost or late. Over TCP (the depacketiser alone) and over UDP (the reorder
    buffer first). 40007 with the same SSRC is no restart: 3 packets are lost."""
    old = _session(40000, 1000, 5)
    new = _session(new_seq, 5_000_000, 20, new_ssrc)
    restart = new_ssrc != 0x1234ABCD or new_seq != 40007
    for udp in (False, True):
        if udp:
            reorder, clock = RtpReorder(), [0.0]
            packets = _reordered(old + new, list(range(25)), reorder, clock) + reorder.expire(clock[0] + 1)
            assert packets == old + new and reorder.late == 0
        else:
            packets = old + new
        units, d = depacketise("h264", packets)
        assert [u.pts for u in units] == [3000 * k for k in range(25 if restart else 25 + 3)][:25] if restart \
            else [3000 * k for k in range(5)] + [3000 * (k + 8) for k in range(20)]
        assert [bytes(u) for u in units] == [START + p[12:] for p in old + new]
        damaged = [k for k, u in enumerate(units) if u.damage]
        assert damaged == [5], [u.damage for u in units]
        if restart:
            assert "restarted its RTP stream" in units[5].damage and d.lost == 0 and d.restarts == 1
        else:
            assert "sequence numbers 40005..40006" in units[5].damage and d.lost == 2 and d.restarts == 0
        assert d.late == 0


def test_a_stray_packet_far_from_the_sequence_is_late_not_a_restart():
    """RFC 3550 A.1: a jump that the next packet does not follow is dropped (counted late), and so is a
    packet up to MAX_MISORDER (100) behind; a gap up to MAX_DROPOUT (3000) ahead is packets lost."""
    pkts = _session(100, 0, 6)
    stray, behind = rtp(20000, 99, P1, marker=True), rtp(30, 99, P1, marker=True)
    units, d = depacketise("h264", pkts[:2] + [stray] + pkts[2:4] + [behind] + pkts[4:])
    assert [u.pts for u in units] == [0, 3000, 6000, 9000, 12000, 15000]
    assert all(u.damage is None for u in units) and d.late == 2 and d.lost == 0 and d.restarts == 0
    reorder = RtpReorder()
    assert _reordered(pkts[:2] + [stray] + pkts[2:4] + [behind] + pkts[4:], list(range(8)), reorder, [0.0]) == pkts
    assert reorder.late == 2
    # 2998 lost (packets 102 .. 3099): still the same session
    units, d = depacketise("h264", pkts[:2] + [rtp(3100, 6000, P1, marker=True)])
    assert [u.pts for u in units] == [0, 3000, 6000] and d.lost == 2998 and d.restarts == 0
    assert "sequence numbers 102..3099" in units[2].damage


def test_late_packets_over_tcp_are_counted():
    conn = RtspConnection("rtsp://127.0.0.1:1/x")
    conn._depacketiser = RtpDepacketiser("h264", 96)
    pkts = h264_stream()
    for p in pkts[:5] + [pkts[3]] + pkts[5:]:  # packet 13 twice
        conn._rtp(p)
    assert len(conn.units) == 3 and conn.packets_late == 1 and conn.packets_lost == 0


def test_the_sender_clock_is_anchored_again_after_a_restart():
    """RTCP sender reports (RFC 3550 6.4.1): NTP time 1 s after the Unix epoch (2208988801) at RTP
    timestamp T. The old session's report gives pts 0 the time 1 s - (report's T - first T) / 90000; after
    a restart (new SSRC) the anchor is the new session's first report, at its own timestamps."""
    def sr(ssrc: int, ntp_s: int, ts: int) -> bytes:
        return struct.pack(">BBHIIII", 0x80, 200, 6, ssrc, ntp_s, 0, ts) + bytes(8)

    conn = RtspConnection("rtsp://127.0.0.1:1/x")
    conn._depacketiser = RtpDepacketiser("h264", 96)
    for p in _session(40000, 1000, 3):
        conn._rtp(p)
    conn._rtcp(sr(0x1234ABCD, 2208988801, 1000 + 9000))  # 1 s at pts 9000 (0.1 s)
    assert conn.sender_origin_ns == 900_000_000
    new = _session(500, 7_000_000, 3, ssrc=0x9999)
    conn._rtp(new[0])  # pts 9000 (the old session's last picture, 6000, and one step)
    assert conn.sender_origin_ns is None
    conn._rtcp(sr(0x1234ABCD, 2208988805, 1000 + 9000))  # a late report of the old session: not taken
    assert conn.sender_origin_ns is None
    conn._rtcp(sr(0x9999, 2208988810, 7_000_000 + 18000))  # 10 s at the new session's pts 9000 + 18000
    assert conn.sender_origin_ns == 10_000_000_000 - 27000 * 1_000_000_000 // 90000
    assert [u.pts for u in conn.units] == [0, 3000, 6000, 9000]


def test_an_answer_split_after_its_first_four_bytes_loses_no_frame():
    """An answer to a keep-alive comes between RTP frames, and the connection's read ends right after
    its "RTSP": the parser waits for the rest. (The session id holds a '$', which RFC 2326 3.4 allows:
    read as a frame, it would take the frames after it.)"""
    frame = lambda p: b"$\x00" + struct.pack(">H", len(p)) + p
    pkts = _session(100, 0, 50)
    answer = b"RTSP/1.0 200 OK\r\nCSeq: 9\r\nSession: 12$45678\r\n\r\n"
    wire = frame(pkts[0]) + answer + b"".join(frame(p) for p in pkts[1:])
    cut = len(frame(pkts[0])) + 4
    conn = RtspConnection("rtsp://127.0.0.1:1/x")
    conn._depacketiser = RtpDepacketiser("h264", 96)
    for chunk in (wire[:cut], wire[cut:]):
        conn._buf += chunk
        conn._parse()
    assert [bytes(u) for u in conn.units] == [START + p[12:] for p in pkts]
    assert conn.packets_lost == 0 and all(u.damage is None for u in conn.units)


def test_h265_parameter_set_lists_give_every_nal_unit():
    """RFC 7798 7.1: sprop-vps, sprop-sps and sprop-pps are comma-separated lists of base64 NAL units."""
    import base64

    vps, sps = bytes([0x40, 0x01, 0x0C, 0x01]), bytes([0x42, 0x01, 0x01, 0x01, 0x60])
    pps0, pps1 = bytes([0x44, 0x01, 0xC1, 0x72, 0xB4]), bytes([0x44, 0x01, 0xC0, 0xF7, 0xC0])
    b64 = lambda n: base64.b64encode(n).decode()
    sdp = ("v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H265/90000\r\n"
           f"a=fmtp:96 sprop-vps={b64(vps)};sprop-sps={b64(sps)};sprop-pps={b64(pps0)},{b64(pps1)}\r\n"
           "a=control:trackID=1\r\n")
    assert parse_sdp(sdp, "rtsp://cam/s").parameter_sets == START + vps + START + sps + START + pps0 + START + pps1


@pytest.mark.parametrize("key", ["sprop-max-don-diff", "sprop-depack-buf-nalus"])
@pytest.mark.parametrize("value", ['"2"', "x", "-1", "1.5", "1", "32767"])
def test_decoding_order_numbers_or_a_malformed_count_are_refused_in_one_line(key, value):
    """RFC 7798 7.1 / 4.4: either parameter > 0 means DONL fields in the NAL units (FFmpeg's rtpdec_hevc.c and
    live555's MediaSession.cpp read sprop-depack-buf-nalus > 0 so); dvpipe's client does not read them."""
    sdp = f"v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H265/90000\r\na=fmtp:96 {key}={value}\r\n"
    with pytest.raises(SourceError, match=rf"{key} .*client: ffmpeg") as e:
        parse_sdp(sdp, "rtsp://cam/s")
    assert "\n" not in str(e.value)
    assert parse_sdp(sdp.replace(f"{key}={value}", f"{key}=0"), "rtsp://cam/s").codec == "h265"


RFC2617_CHALLENGE = ('Digest realm="testrealm@host.com", qop="auth,auth-int", '
                     'nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", opaque="5ccc069c403ebaf9f0171e9517f40e41"')


@pytest.mark.parametrize("headers", [
    [RFC2617_CHALLENGE, 'Basic realm="testrealm@host.com"'],
    ['Basic realm="testrealm@host.com"', RFC2617_CHALLENGE],
    ['Basic realm="testrealm@host.com", ' + RFC2617_CHALLENGE.replace('"auth,auth-int"', '"auth-int,auth"')],
])
def test_digest_is_chosen_over_basic_and_answers_rfc_2617s_worked_example(headers, monkeypatch):
    """A 401 answer with a Digest and a Basic challenge (two headers, or both in one), in either order:
    the answer is Digest's, the response RFC 2617 3.5's for its user, password, nonce and cnonce."""
    import os

    conn = RtspConnection("rtsp://Mufasa:Circle%20Of%20Life@127.0.0.1:1/x")
    conn._buf = bytearray(b"RTSP/1.0 401 Unauthorized\r\nCSeq: 1\r\n"
                          + b"".join(b"WWW-Authenticate: " + h.encode() + b"\r\n" for h in headers) + b"\r\n")
    reply = conn._read_response()
    conn._auth = conn._challenge(reply.challenges)
    monkeypatch.setattr(os, "urandom", lambda n: bytes.fromhex("0a4f113b"))
    assert conn._authorization("GET", "/dir/index.html") == (
        'Digest username="Mufasa", realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", '
        'uri="/dir/index.html", response="6629fae49393a05397450978507c4ef1", qop=auth, nc=00000001, '
        'cnonce="0a4f113b", opaque="5ccc069c403ebaf9f0171e9517f40e41"')


def test_quoted_challenge_values_may_hold_commas():
    conn = RtspConnection("rtsp://u:p@127.0.0.1:1/x")
    auth = conn._challenge(['Digest realm="Acme, Inc", nonce="a,b", qop="auth-int, auth", opaque="x\\"y"'])
    assert auth is not None
    assert (auth["realm"], auth["nonce"], auth["qop"], auth["opaque"]) == ("Acme, Inc", "a,b", "auth", 'x"y')
    assert conn._challenge(['Digest realm="r", nonce="n", qop="auth-int"'])["qop"] is None
    assert conn._challenge(['Basic realm="Acme, Inc"']) == {"scheme": "basic"}


def _fake_server(answer) -> tuple[socket.socket, list]:
    """An RTSP server on 127.0.0.1 that answers each request with ``answer(method, url, headers)`` (the
    answer's text, ``CSEQ`` replaced by the request's CSeq); the listening socket and the requests."""
    listener = socket.create_server(("127.0.0.1", 0))
    log: list = []

    def serve():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        chunk = conn.recv(4096)
                    except OSError:  # the client reset the connection
                        return
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode().split("\r\n")
                method, url = lines[0].split(" ")[:2]
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
                log.append((method, url, headers))
                conn.sendall(answer(method, url, headers).replace("CSEQ", headers["cseq"]).encode())

    threading.Thread(target=serve, daemon=True).start()
    return listener, log


_SDP = "v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:track1\r\n"


def _ok(method: str, extra: str = "") -> str:
    if method == "DESCRIBE":
        return f"RTSP/1.0 200 OK\r\nCSeq: CSEQ\r\nContent-Length: {len(_SDP)}\r\n\r\n{_SDP}"
    if method == "SETUP" and not extra:
        extra = "Session: 42\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n"
    return f"RTSP/1.0 200 OK\r\nCSeq: CSEQ\r\n{extra}\r\n"


def test_a_new_nonce_is_answered_once_more():
    """RFC 2617 3.2.1: a 401 with a new nonce (``stale=TRUE``: the old one expired) asks for the request
    again with it. The server's nonce changes at SETUP; the answers are checked as RFC 2617 3.2.2 computes
    them (MD5 of user:realm:password, method:uri and those with the nonce). The same nonce refused twice
    is a wrong password."""
    import hashlib

    md5 = lambda t: hashlib.md5(t.encode()).hexdigest()
    state = {"nonce": "n1", "password": "pw"}

    def answer(method, url, headers):
        if method == "SETUP" and state["nonce"] == "n1":
            state["nonce"] = "n2"
        auth = headers.get("authorization", "")
        want = md5(f"{md5('u:r:' + state['password'])}:{state['nonce']}:{md5(method + ':' + url)}")
        if f'response="{want}"' not in auth:
            stale = ', stale=TRUE' if f'nonce="{state["nonce"]}"' not in auth and auth else ""
            return f'RTSP/1.0 401 Unauthorized\r\nCSeq: CSEQ\r\nWWW-Authenticate: Digest realm="r", ' \
                   f'nonce="{state["nonce"]}"{stale}\r\n\r\n'
        return _ok(method)

    listener, log = _fake_server(answer)
    port = listener.getsockname()[1]
    conn = RtspConnection(f"rtsp://u:pw@127.0.0.1:{port}/cam", open_timeout_s=5)
    conn.open()
    nonces = [(m, h.get("authorization", "nonce=\"-\"").split('nonce="')[1].split('"')[0]) for m, _u, h in log]
    assert nonces == [("DESCRIBE", "-"), ("DESCRIBE", "n1"), ("SETUP", "n1"), ("SETUP", "n2"), ("PLAY", "n2")]
    conn.close()
    listener.close()
    state.update(nonce="n1", password="other")
    listener, log = _fake_server(answer)
    conn = RtspConnection(f"rtsp://u:pw@127.0.0.1:{listener.getsockname()[1]}/cam", open_timeout_s=5)
    with pytest.raises(SourceError, match="DESCRIBE answered 401 .*user name or password was refused"):
        conn.open()
    assert [m for m, _u, _h in log] == ["DESCRIBE", "DESCRIBE"]
    listener.close()


def test_a_keepalive_refused_for_a_stale_nonce_is_sent_again_with_the_new_one():
    """While streaming, the server answers the keep-alive (OPTIONS) 401 with a new nonce (RFC 2617 3.2.1,
    ``stale=TRUE``): the keep-alive goes again at once, its Digest response computed with the new nonce as
    RFC 2617 3.2.2 computes it; the same challenge once more is not answered again (a loop)."""
    import hashlib

    md5 = lambda t: hashlib.md5(t.encode()).hexdigest()
    a, b = socket.socketpair()
    url = "rtsp://u:pw@127.0.0.1:1/x"
    conn = RtspConnection(url)
    conn._sock = b
    conn._depacketiser = RtpDepacketiser("h264", 96)
    conn._auth = {"scheme": "digest", "realm": "r", "nonce": "n1", "opaque": None, "qop": None, "nc": 0}
    b.setblocking(False)
    conn.receive()  # the first keep-alive, with the old nonce
    refused = b'RTSP/1.0 401 Unauthorized\r\nCSeq: 5\r\nWWW-Authenticate: Digest realm="r", nonce="n2", stale=TRUE\r\n\r\n'
    p = h264_stream()[0]
    a.send(refused + b"$\x00" + struct.pack(">H", len(p)) + p)
    time.sleep(0.01)
    conn.receive()
    a.send(refused)
    time.sleep(0.01)
    conn.receive()
    time.sleep(0.01)
    sent = a.recv(65536).decode("latin-1").split("\r\n\r\n")
    requests = [r for r in sent if r.startswith("OPTIONS")]
    assert len(requests) == 2, requests
    text = conn._url.text
    want = md5(f"{md5('u:r:pw')}:n2:{md5('OPTIONS:' + text)}")
    assert 'nonce="n1"' in requests[0] and f'nonce="n2"' in requests[1] and f'response="{want}"' in requests[1]
    a.close()
    conn.close()


def test_udp_setup_opens_the_way_for_the_stream_before_play():
    """As FFmpeg's client (ff_rtp_send_punch_packets): after SETUP, before PLAY, an RTP header (version 2,
    12 bytes) from the client's RTP port to the server's RTP port, and an RTCP receiver report (packet
    type 201, RFC 3550 6.4.2) from the client's RTCP port to the server's RTCP port."""
    import select

    rtp_sock, rtcp_sock = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    for s in (rtp_sock, rtcp_sock):
        s.bind(("127.0.0.1", 0))
    seen: dict = {}

    def answer(method, url, headers):
        if method == "SETUP":
            seen["client_port"] = int(headers["transport"].split("client_port=")[1].split("-")[0])
            return _ok(method, f"Session: 42\r\nTransport: RTP/AVP;unicast;client_port={seen['client_port']}-"
                               f"{seen['client_port'] + 1};server_port={rtp_sock.getsockname()[1]}-"
                               f"{rtcp_sock.getsockname()[1]}\r\n")
        if method == "PLAY":
            for s in (rtp_sock, rtcp_sock):
                if select.select([s], [], [], 2.0)[0]:
                    seen[s] = s.recvfrom(2048)
        return _ok(method)

    listener, _log = _fake_server(answer)
    conn = RtspConnection(f"rtsp://127.0.0.1:{listener.getsockname()[1]}/cam", open_timeout_s=5, transport="udp")
    conn.open()
    try:
        assert rtp_sock in seen and rtcp_sock in seen, seen
        (rtp_data, rtp_from), (rtcp_data, rtcp_from) = seen[rtp_sock], seen[rtcp_sock]
        assert len(rtp_data) == 12 and rtp_data[0] >> 6 == 2 and rtp_from == ("127.0.0.1", seen["client_port"])
        assert rtcp_data[0] >> 6 == 2 and rtcp_data[1] == 201 and rtcp_from == ("127.0.0.1", seen["client_port"] + 1)
    finally:
        conn.close()
        listener.close()
        rtp_sock.close()
        rtcp_sock.close()


@pytest.mark.parametrize("url", ["rtsp://u:secret@127.0.0.1:99999/x", "rtsp://u:secret@:554/x", "http://u:secret@h/x"])
def test_a_url_the_client_cannot_read_is_refused_without_repeating_its_password(url):
    """The Python API reaches the client without `dvpipe validate`: its error names the problem, not the URL."""
    with pytest.raises(SourceError) as e:
        RtspConnection(url)
    assert "secret" not in str(e.value) and str(e.value).startswith("the RTSP URL: "), str(e.value)
