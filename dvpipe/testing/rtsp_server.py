"""A minimal RTSP server on the loopback interface, for tests and demos without cameras.

It serves H.264/H.265 access units (from an MP4/MKV file, an elementary stream, or a list built in
code) as RTP over the RTSP TCP connection (RFC 2326 interleaved transport) or over UDP (to the
client's ``client_port``, from a socket of the server's), with RFC 6184 / RFC 7798 packetisation
(single NAL unit packets and fragmentation units), paced at the stream's frame rate, looping. It
implements what an FFmpeg client needs: OPTIONS, DESCRIBE, SETUP, PLAY, GET_PARAMETER/SET_PARAMETER
(keep-alive), TEARDOWN. With ``tls=(certificate, key)`` (PEM files) it speaks RTSP in TLS: ``rtsps://``.

It binds **only to loopback addresses** (127.0.0.0/8, ::1) and can misbehave on purpose: lose RTP
packets, drop the connection after n access units (to test reconnects), pause at a given access unit or whenever the
test says (:meth:`RtspStream.pause` / :meth:`RtspStream.resume`: the connection stays open, nothing
is sent, the stream resumes where it was), or go away and come back on the same port
(:meth:`LoopbackRtspServer.suspend` / :meth:`LoopbackRtspServer.resume`: a crashed and restarted
server).

Command line (serves each file at ``rtsp://127.0.0.1:PORT/<file stem>``)::

    python -m dvpipe.testing.rtsp_server samples/video/*.mp4 --port 8554
"""
from __future__ import annotations

import argparse
import base64
import ipaddress
import os
import re
import select
import socket
import ssl
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ..bitstream import nal_units
from ..errors import ConfigError

__all__ = ["RtspStream", "LoopbackRtspServer", "read_access_units"]

_RTP_MTU = 1400


def read_access_units(path: str) -> tuple[str, list[bytes], float]:
    """``(codec, access units, fps)`` of a video file or elementary stream, as Annex B bytes."""
    from ..types import Camera
    from ..deploy.config import SourceConfig
    from ..deploy.sources.video import ElementaryStream, VideoFile

    ext = os.path.splitext(path)[1].lower()
    es = {".h264": "h264", ".264": "h264", ".h265": "h265", ".265": "h265", ".hevc": "h265"}.get(ext)
    import av

    codec: Optional[str]
    if es:
        codec = es
    else:
        with av.open(path) as c:
            codec = {"h264": "h264", "hevc": "h265"}.get(c.streams.video[0].codec_context.name)
        if codec is None:
            raise ConfigError(f"{path}: not H.264/H.265 video")
    cam = Camera("serve", width=16, height=16, encoding=codec)
    src: ElementaryStream | VideoFile
    if es:
        src = ElementaryStream(cam, SourceConfig("elementary", path, {"codec": codec, "fps": 30.0}))
    else:
        src = VideoFile(cam, SourceConfig("video", path, {}))
    src.open()
    aus: list[bytes] = []
    stamps: list[int] = []
    while True:
        it = src.read()
        if it is None:
            break
        aus.extend(u.data for u in it.frame.data.units if hasattr(u, "data"))  # decode order
        stamps.append(it.frame.capture_epoch_ns)
    src.close()
    fps = 30.0
    if len(stamps) > 1 and stamps[-1] > stamps[0]:
        fps = (len(stamps) - 1) * 1e9 / (stamps[-1] - stamps[0])
    return codec, aus, fps


@dataclass
class RtspStream:
    """What one path serves.

    Attributes:
        codec: ``h264`` or ``h265``.
        access_units: Annex B access units; the first should be a keyframe with parameter sets.
        fps: pacing (access units per second).
        loop: start over at the end (else the connection ends after the last one).
        drop_after: close the connection abruptly after this many access units, on the first
            ``drop_connections`` connections (reconnect tests).
        pause_at / pause_s: stop sending for ``pause_s`` seconds before access unit ``pause_at``
            (stall tests), on every connection.
        lose: RTP packets lost on the way, on every connection, as ``(k, j)``: packet ``j`` of access
            unit ``k`` (counted from the connection's start), or all of its packets for ``j`` None; their
            sequence numbers are used up as if they had been sent (packet-loss tests).
        reorder: access units (counted from the connection's start) whose RTP packets are sent last
            first, as a UDP network may deliver them (the sequence numbers say the order).
    """

    codec: str
    access_units: Sequence[bytes]
    fps: float = 30.0
    loop: bool = True
    drop_after: Optional[int] = None
    drop_connections: int = 1
    pause_at: Optional[int] = None
    pause_s: float = 0.0
    lose: Sequence[tuple[int, Optional[int]]] = ()
    reorder: Sequence[int] = ()
    connections: int = 0
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _running: threading.Event = field(default_factory=lambda: _set_event(), repr=False)

    def pause(self) -> None:
        """Stop sending on every connection (they stay open) until :meth:`resume`."""
        self._running.clear()

    def resume(self) -> None:
        """Send again, from the access unit where the pause began (at the stream's rate)."""
        self._running.set()


def _set_event() -> threading.Event:
    e = threading.Event()
    e.set()
    return e


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class LoopbackRtspServer:
    """Serves :class:`RtspStream` objects at ``rtsp://HOST:PORT/<path>`` (HOST a loopback address).

    ``with LoopbackRtspServer({"cam": stream}) as srv: url = srv.url("cam")``; port 0 picks a free one.
    """

    def __init__(self, streams: dict[str, RtspStream], host: str = "127.0.0.1", port: int = 0,
                 tls: Optional[tuple[str, str]] = None):
        if not _is_loopback(host):
            raise ConfigError(f"the test RTSP server binds to loopback addresses only, not {host!r}")
        self._tls: Optional[ssl.SSLContext] = None
        if tls is not None:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._tls.load_cert_chain(*tls)
        self.streams = dict(streams)
        self.host = host
        self._sock = self._listen(port)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []

    def _listen(self, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, port))
        sock.listen(16)
        return sock

    def suspend(self) -> None:
        """Go away as a crashed server does: close the port and every connection (clients see the
        connection reset and cannot connect) until :meth:`resume`."""
        self.stop()

    def resume(self) -> "LoopbackRtspServer":
        """Come back on the same port (streams start over for new connections)."""
        self._sock = self._listen(self.port)
        self._stop = threading.Event()
        self._threads, self._conns = [], []
        return self.start()

    def url(self, path: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'rtsps' if self._tls else 'rtsp'}://{host}:{self.port}/{path}"

    def start(self) -> "LoopbackRtspServer":
        t = threading.Thread(target=self._accept, name="rtsp-accept", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        try:
            self._sock.close()
        except OSError:
            pass
        for c in list(self._conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        for t in self._threads:
            t.join(timeout=2.0)

    def __enter__(self) -> "LoopbackRtspServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- connections ---------------------------------------------------------------------------------
    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _addr = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:  # the handshake on the connection's own thread
                conn = self._tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), name="rtsp-conn", daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        send_lock = threading.Lock()
        buf = b""
        session = f"{int(time.time() * 1000) & 0xFFFFFFF:08d}"
        path: Optional[str] = None
        streaming: Optional[threading.Event] = None
        udp: Optional[tuple[socket.socket, tuple]] = None  # (the server's RTP socket, the client's RTP address)
        if isinstance(conn, ssl.SSLSocket):
            conn.settimeout(5.0)
            try:
                conn.do_handshake()
            except (ssl.SSLError, OSError):  # the client refused the certificate, or went away
                conn.close()
                return
        conn.settimeout(0.2)

        def send(data: bytes) -> bool:
            with send_lock:
                try:
                    conn.sendall(data)
                    return True
                except OSError:
                    return False

        def receive() -> bytes:
            """What the client sent (socket.timeout after 0.2 s without). A TLS connection is read under
            the send lock: OpenSSL's connection may not read and write on two threads at once."""
            if not isinstance(conn, ssl.SSLSocket):
                return conn.recv(65536)
            if not conn.pending() and not select.select([conn], [], [], 0.2)[0]:
                raise socket.timeout()
            with send_lock:
                return conn.recv(65536)

        def send_rtp(rtp: bytes) -> bool:
            if udp is None:
                return send(b"$\x00" + struct.pack(">H", len(rtp)) + rtp)
            try:
                udp[0].sendto(rtp, udp[1])
            except OSError:
                pass  # UDP: a datagram the client's host refused is lost, the session goes on
            return True

        try:
            while not self._stop.is_set():
                try:
                    chunk = receive()
                except socket.timeout:
                    if streaming is not None and streaming.is_set():
                        return  # the streamer ended the connection
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                while buf:
                    if buf[:1] == b"$":  # interleaved data from the client (RTCP receiver reports)
                        if len(buf) < 4:
                            break
                        n = struct.unpack(">H", buf[2:4])[0]
                        if len(buf) < 4 + n:
                            break
                        buf = buf[4 + n:]
                        continue
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    head = buf[:end].decode("latin-1")
                    lines = head.split("\r\n")
                    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
                    body_len = int(headers.get("content-length", "0") or 0)
                    if len(buf) < end + 4 + body_len:
                        break
                    buf = buf[end + 4 + body_len:]
                    method, url, _ver = (lines[0].split(" ") + ["", "", ""])[:3]
                    cseq = headers.get("cseq", "0")
                    req_path = url.split("://", 1)[-1].split("/", 1)[1] if "/" in url.split("://", 1)[-1] else ""
                    req_path = req_path.split("?")[0]
                    if method == "OPTIONS":
                        send(self._reply(cseq, "Public: OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER, "
                                               "SET_PARAMETER"))
                    elif method == "DESCRIBE":
                        name = req_path.rstrip("/")
                        if name not in self.streams:
                            send(self._reply(cseq, status="404 Not Found"))
                            continue
                        path = name
                        sdp = self._sdp(name).encode()
                        send(self._reply(cseq, f"Content-Base: {url.rstrip('/')}/\r\nContent-Type: application/sdp",
                                         body=sdp))
                    elif method == "SETUP":
                        transport = headers.get("transport", "")
                        ports = re.search(r"client_port=(\d+)(?:-(\d+))?", transport)
                        if "TCP" not in transport.upper() and ports is None:
                            send(self._reply(cseq, status="461 Unsupported Transport"))
                            continue
                        if path is None:
                            path = req_path.split("/")[0]
                        if "TCP" in transport.upper():
                            send(self._reply(cseq, "Transport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n"
                                                   f"Session: {session};timeout=60"))
                            continue
                        assert ports is not None  # not TCP: the client's ports were given
                        if udp is None:
                            rtp_sock = socket.socket(conn.family, socket.SOCK_DGRAM)
                            rtp_sock.bind((conn.getsockname()[0], 0))
                            udp = (rtp_sock, (conn.getpeername()[0], int(ports.group(1))))
                        mine = udp[0].getsockname()[1]
                        send(self._reply(cseq, f"Transport: RTP/AVP;unicast;client_port={ports.group(1)}-"
                                               f"{ports.group(2) or int(ports.group(1)) + 1};server_port={mine}-"
                                               f"{mine + 1}\r\nSession: {session};timeout=60"))
                    elif method == "PLAY":
                        if path not in self.streams:
                            send(self._reply(cseq, status="454 Session Not Found"))
                            continue
                        send(self._reply(cseq, f"Session: {session}\r\nRange: npt=0.000-\r\n"
                                               f"RTP-Info: url={url.rstrip('/')}/track0;seq=0;rtptime=0"))
                        if streaming is None:
                            streaming = threading.Event()
                            t = threading.Thread(target=self._stream, args=(conn, send_rtp, self.streams[path], streaming),
                                                 name="rtsp-stream", daemon=True)
                            t.start()
                    elif method in ("GET_PARAMETER", "SET_PARAMETER"):
                        send(self._reply(cseq, f"Session: {session}"))
                    elif method == "TEARDOWN":
                        send(self._reply(cseq, f"Session: {session}"))
                        return
                    else:
                        send(self._reply(cseq, status="405 Method Not Allowed"))
        finally:
            if streaming is not None:
                streaming.set()
            try:
                conn.close()
            except OSError:
                pass
            if udp is not None:
                udp[0].close()

    @staticmethod
    def _reply(cseq: str, headers: str = "", status: str = "200 OK", body: bytes = b"") -> bytes:
        head = f"RTSP/1.0 {status}\r\nCSeq: {cseq}\r\nServer: dvpipe-loopback\r\n"
        if headers:
            head += headers + "\r\n"
        if body:
            head += f"Content-Length: {len(body)}\r\n"
        return (head + "\r\n").encode("latin-1") + body

    def _sdp(self, name: str) -> str:
        st = self.streams[name]
        enc = "H264" if st.codec == "h264" else "H265"
        fmtp = ""
        if st.codec == "h264":
            nals = nal_units(st.access_units[0]) if st.access_units else []
            sps = next((n for n in nals if n[0] & 0x1F == 7), None)
            pps = next((n for n in nals if n[0] & 0x1F == 8), None)
            fmtp = "a=fmtp:96 packetization-mode=1"
            if sps and pps:
                fmtp += (f";profile-level-id={sps[1:4].hex()};sprop-parameter-sets="
                         f"{base64.b64encode(sps).decode()},{base64.b64encode(pps).decode()}")
            fmtp += "\r\n"
        return ("v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=dvpipe loopback\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                f"m=video 0 RTP/AVP 96\r\na=rtpmap:96 {enc}/90000\r\n{fmtp}a=control:track0\r\n")

    def _stream(self, conn: socket.socket, send_rtp, st: RtspStream, done: threading.Event) -> None:
        with st.lock:
            st.connections += 1
            conn_no = st.connections
        seq = 0
        ssrc = 0x1234ABCD
        period = 1.0 / st.fps
        t0 = time.monotonic()
        k = 0
        try:
            while not self._stop.is_set() and not done.is_set():
                if k >= len(st.access_units) and not st.loop:
                    break
                if st.drop_after is not None and conn_no <= st.drop_connections and k >= st.drop_after:
                    try:
                        conn.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    break
                if st.pause_at is not None and k == st.pause_at and st.pause_s > 0:
                    if self._stop.wait(st.pause_s) or done.is_set():
                        break
                    t0 += st.pause_s
                if not st._running.is_set():  # paused by the test: hold the connection, send nothing
                    paused = time.monotonic()
                    while not st._running.wait(0.05):
                        if self._stop.is_set() or done.is_set():
                            return
                    t0 += time.monotonic() - paused
                wait = t0 + k * period - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    break
                au = st.access_units[k % len(st.access_units)]
                ts = int(k * 90000 * period) & 0xFFFFFFFF
                out = []
                for j, (payload, marker) in enumerate(self._packetise(au, st.codec)):
                    hdr = struct.pack(">BBHII", 0x80, (0x80 if marker else 0) | 96, seq & 0xFFFF, ts, ssrc)
                    seq += 1
                    if (k, None) not in st.lose and (k, j) not in st.lose:
                        out.append(hdr + payload)
                for rtp in reversed(out) if k in st.reorder else out:
                    if not send_rtp(rtp):
                        return
                with st.lock:
                    st.sent += 1
                k += 1
        finally:
            done.set()

    @staticmethod
    def _packetise(au: bytes, codec: str) -> list[tuple[bytes, bool]]:
        nals = nal_units(au)
        out: list[tuple[bytes, bool]] = []
        for j, nal in enumerate(nals):
            last = j == len(nals) - 1
            if len(nal) <= _RTP_MTU:
                out.append((nal, last))
                continue
            if codec == "h264":
                ind = bytes([(nal[0] & 0xE0) | 28])
                typ = nal[0] & 0x1F
                rest = nal[1:]
                chunks = [rest[i:i + _RTP_MTU] for i in range(0, len(rest), _RTP_MTU)]
                for c, chunk in enumerate(chunks):
                    fu = (0x80 if c == 0 else 0) | (0x40 if c == len(chunks) - 1 else 0) | typ
                    out.append((ind + bytes([fu]) + chunk, last and c == len(chunks) - 1))
            else:
                typ = (nal[0] >> 1) & 0x3F
                ph = bytes([(nal[0] & 0x81) | (49 << 1), nal[1]])
                rest = nal[2:]
                chunks = [rest[i:i + _RTP_MTU] for i in range(0, len(rest), _RTP_MTU)]
                for c, chunk in enumerate(chunks):
                    fu = (0x80 if c == 0 else 0) | (0x40 if c == len(chunks) - 1 else 0) | typ
                    out.append((ph + bytes([fu]) + chunk, last and c == len(chunks) - 1))
        return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dvpipe.testing.rtsp_server", description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="MP4/MKV (H.264/H.265) or .h264/.h265 files; each served at /<file stem>")
    ap.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8554)
    ap.add_argument("--fps", type=float, default=None, help="pace at this rate (default: the file's)")
    args = ap.parse_args(argv)
    streams = {}
    for f in args.files:
        codec, aus, fps = read_access_units(f)
        streams[os.path.splitext(os.path.basename(f))[0]] = RtspStream(codec, aus, args.fps or fps)
    with LoopbackRtspServer(streams, args.host, args.port) as srv:
        for name, st in streams.items():
            print(f"{srv.url(name)}  {st.codec}, {len(st.access_units)} access units at {st.fps:g} fps, looping")
        print("Ctrl-C to stop", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
