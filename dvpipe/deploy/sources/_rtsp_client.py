"""dvpipe's own RTSP client: RTP over the RTSP TCP connection or over UDP, rtsp:// or rtsps:// (TLS),
read without blocking.

FFmpeg's RTSP demuxer blocks in its read, so each camera read through it needs a thread. This client
does the RTSP handshake (RFC 2326: DESCRIBE, SETUP, PLAY; Basic and Digest authentication, RFC 7617 /
RFC 2617; OPTIONS as keep-alive at half the session's timeout) with blocking socket calls and a
deadline, then hands over sockets that the runner's I/O loop (:mod:`dvpipe.deploy._live_loop`) polls
with the other cameras' sockets: :meth:`RtspConnection.receive` takes what the kernel has and never
waits.

Transports (SETUP):

* ``tcp`` (``RTP/AVP/TCP;unicast;interleaved=0-1``): interleaved frames (``$``, channel, 16-bit
  length) on the RTP and RTCP channels SETUP agreed, with RTSP responses between them (keep-alive
  answers: skipped).
* ``udp`` (``RTP/AVP;unicast;client_port=N-N+1``, RFC 3550 / RFC 2326 12.39): RTP on a UDP socket of
  an even port N, RTCP on N+1, both bound to the address of the RTSP connection and taking datagrams
  only from the server's host (or the ``source`` SETUP names); packets are put back in sequence-number
  order (:class:`._rtp.RtpReorder`: a missing packet is waited for at most 100 ms, then counted as
  lost). Right after SETUP, an RTP header without payload goes from the RTP socket to the server's RTP
  port and an RTCP receiver report from the RTCP socket to its RTCP port, as FFmpeg's client sends
  them: they open a NAT or stateful firewall on the way for the stream. A receiver report with the
  client's CNAME is sent again after PLAY and every 5 s (RFC 3550 6.2: receivers report). The
  receive buffer asked for is 4 MB (the kernel caps it at ``net.core.rmem_max``): a datagram dropped
  by a full buffer shows as a lost packet, and the picture it belonged to as damaged.

``rtsps://`` (RFC 7826's scheme; port 322 by default): the RTSP connection in TLS (Python's ``ssl``:
the server's certificate checked against the system's CAs, or ``ca_file``, and its name against the
URL's host, unless ``tls_verify`` is off); RTP over it, or over UDP as above.

What it reads: RTP packets of one H.264, H.265 or JPEG (MJPEG, RFC 2435) video stream, depacketised
into access units or JPEG files by :mod:`._rtp` (a sender that restarts its RTP session -- a new SSRC
or sequence -- is followed, the first unit after it damaged, and the sender clock anchored again by the
new session's first report); RTCP
sender reports (RFC 3550 6.4.1): the first one gives the sender's wall clock of the stream's first RTP
timestamp, as FFmpeg's ``start_time_realtime`` does.

Not read: ``raw`` cameras (the source picks FFmpeg's client for them by default); multicast (neither client
is asked for it: ``transport`` is tcp or udp, unicast); SRTP (RTP/SAVP), H.264 interleaved mode (STAP-B,
MTAP, FU-B), H.265 with DONL fields (``sprop-max-don-diff`` or ``sprop-depack-buf-nalus`` > 0, or not a
number) and other codecs
(refused at open in one line that names ``client: ffmpeg``); JPEG types other than 0/1 (4:2:2 / 4:2:0)
and 64/65 (with restart markers), whose frames are damaged.

Authentication: of the challenges a 401 answer offers (every ``WWW-Authenticate`` header), Digest with
MD5 before Basic; a later 401 with a new challenge (a new nonce: ``stale=TRUE``) is answered once more,
to a request of the handshake and to a keep-alive (OPTIONS) while streaming.
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import socket
import ssl
import struct
import time
import urllib.parse
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from ._rtp import RtpDepacketiser, RtpReorder
from .base import SourceError, StreamLost, wait_readable

__all__ = ["RtspConnection", "SdpVideo", "parse_sdp", "digest_response"]

_NTP_UNIX_OFFSET_S = 2_208_988_800  # seconds from 1900-01-01 (NTP) to 1970-01-01 (Unix)
_RECV_BYTES = 1 << 18
_MAX_BUFFER = 16 << 20  # bytes of unparsed input before the stream counts as garbage
_USER_AGENT = "dvpipe"
_UDP_RECEIVE_BUFFER = 4 << 20  # bytes asked for each RTP socket (a 4K keyframe is ~1 MB of datagrams)
_RECEIVER_REPORT_S = 5.0  # seconds between RTCP receiver reports (RFC 3550's minimum interval)


@dataclass(frozen=True)
class SdpVideo:
    """The video stream a DESCRIBE answer offers.

    Attributes:
        codec: ``h264``, ``h265`` or ``jpeg``.
        payload_type: the RTP payload type (``m=video ... RTP/AVP <pt>``).
        clock_rate: RTP timestamp units per second (90000 for video).
        control: the absolute URL to SETUP.
        parameter_sets: SPS/PPS (and VPS) from ``sprop-*`` as Annex B bytes (empty when not given).
        fps: ``a=framerate`` when given, else None.
        dimensions: ``a=x-dimensions:W,H`` when given (JPEG frames wider or taller than 2040 pixels).
    """

    codec: str
    payload_type: int
    clock_rate: int
    control: str
    parameter_sets: bytes = b""
    fps: Optional[float] = None
    dimensions: Optional[tuple[int, int]] = None


def _b64_nal(text: str) -> bytes:
    try:
        nal = base64.b64decode(text.strip() + "=" * (-len(text.strip()) % 4), validate=False)
    except (ValueError, TypeError):
        return b""
    return b"\x00\x00\x00\x01" + nal if nal else b""


def _resolve(base: str, control: str) -> str:
    if not control or control == "*":
        return base
    if re.match(r"^rtsps?://", control, re.I):
        return control
    return base + ("" if base.endswith("/") else "/") + control.lstrip("/")


def parse_sdp(text: str, base_url: str) -> SdpVideo:
    """The first H.264/H.265/JPEG video stream of an SDP description (RFC 4566).

    ``base_url``: the Content-Base (else Content-Location, else the DESCRIBE URL), against which a
    relative ``a=control`` resolves. Raises :class:`SourceError` when there is no stream this client
    can read (the reason says which client can)."""
    session_control = ""
    medias: list[dict] = []
    for raw in text.splitlines():
        line = raw.strip()
        if len(line) < 2 or line[1] != "=":
            continue
        kind, value = line[0], line[2:]
        if kind == "m":
            parts = value.split()
            medias.append({"media": parts[0] if parts else "", "proto": parts[2] if len(parts) > 2 else "",
                           "pts": parts[3:], "attrs": []})
        elif kind == "a":
            if medias:
                medias[-1]["attrs"].append(value)
            elif value.startswith("control:"):
                session_control = value[len("control:"):].strip()
    base = _resolve(base_url, session_control) if session_control and session_control != "*" else base_url
    seen = []
    for m in medias:
        if m["media"] != "video":
            continue
        if "SAVP" in m["proto"].upper():
            raise SourceError(f"the stream is SRTP ({m['proto']}); dvpipe's RTSP client reads plain RTP: set "
                              "client: ffmpeg")
        rtpmap: dict[int, tuple[str, int]] = {}
        fmtp: dict[int, dict[str, str]] = {}
        control, fps, dimensions = "", None, None
        for a in m["attrs"]:
            name, _, rest = a.partition(":")
            if name == "rtpmap":
                pt, _, enc = rest.partition(" ")  # "96 H264/90000"
                enc_name, _, clock = enc.partition("/")
                clock = clock.split("/")[0].strip()
                if pt.strip().isdigit():
                    rate = int(clock) if clock.isdigit() and int(clock) else 90000
                    rtpmap[int(pt)] = (enc_name.strip().upper(), rate)
            elif name == "fmtp":
                pt, _, params = rest.partition(" ")
                if pt.strip().isdigit():
                    fmtp[int(pt)] = {k.strip().lower(): v.strip() for k, _, v in
                                     (p.partition("=") for p in params.split(";")) if k.strip()}
            elif name == "control":
                control = rest.strip()
            elif name == "x-dimensions":
                size = re.match(r"\s*(\d+)\s*,\s*(\d+)", rest)
                if size and int(size.group(1)) and int(size.group(2)):
                    dimensions = (int(size.group(1)), int(size.group(2)))
            elif name in ("framerate", "x-framerate"):
                try:
                    fps = float(rest.strip())
                except ValueError:
                    fps = None
        for pt_text in m["pts"]:
            if not pt_text.isdigit():
                continue
            pt = int(pt_text)
            enc, clock = rtpmap.get(pt, ("JPEG" if pt == 26 else "", 90000))  # 26: JPEG's static type (RFC 3551)
            seen.append(enc or f"payload type {pt}")
            params = fmtp.get(pt, {})
            if enc == "H264":
                if params.get("packetization-mode", "0") not in ("0", "1"):
                    raise SourceError(f"the stream's H.264 packetization-mode is {params['packetization-mode']} "
                                      "(interleaved); dvpipe's RTSP client reads modes 0 and 1: set client: ffmpeg")
                sets = b"".join(_b64_nal(s) for s in params.get("sprop-parameter-sets", "").split(",") if s)
                codec = "h264"
            elif enc in ("H265", "HEVC"):
                # RFC 7798 7.1: either parameter > 0 means NAL units carry DONL fields (FFmpeg's and live555's
                # RTSP clients read it so too)
                for key in ("sprop-max-don-diff", "sprop-depack-buf-nalus"):
                    value = params.get(key, "0") or "0"
                    if not value.isdigit():
                        raise SourceError(f"the stream's H.265 {key} is {value[:20]!r}, not a number; dvpipe's RTSP "
                                          "client cannot tell whether its RTP carries decoding order numbers: "
                                          "set client: ffmpeg")
                    if int(value) > 0:
                        raise SourceError(f"the stream's H.265 RTP carries decoding order numbers ({key} > 0); "
                                          "dvpipe's RTSP client does not read them: set client: ffmpeg")
                # RFC 7798 7.1: each a comma-separated list of NAL units
                sets = b"".join(_b64_nal(nal) for k in ("sprop-vps", "sprop-sps", "sprop-pps")
                                for nal in params.get(k, "").split(",") if nal.strip())
                codec = "h265"
            elif enc == "JPEG":
                sets, codec = b"", "jpeg"
            else:
                continue
            return SdpVideo(codec, pt, clock, _resolve(base, control), sets,
                            fps if fps and 0 < fps <= 1000 else None, dimensions)
    offered = ", ".join(seen) if seen else "no video stream"
    raise SourceError(f"the server offers {offered}; dvpipe's RTSP client reads H.264/H.265/JPEG video (set "
                      "client: ffmpeg for other codecs)")


def digest_response(user: str, password: str, realm: str, nonce: str, method: str, uri: str,
                    qop: Optional[str] = None, nc: str = "00000001", cnonce: str = "") -> str:
    """The ``response`` of HTTP Digest authentication with MD5 (RFC 2617 3.2.2), as RTSP uses it."""
    def md5(s: str) -> str:
        return hashlib.md5(s.encode("utf-8")).hexdigest()  # noqa: S324 - the protocol's hash, not a secret store

    ha1, ha2 = md5(f"{user}:{realm}:{password}"), md5(f"{method}:{uri}")
    if qop:
        return md5(f"{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}")
    return md5(f"{ha1}:{nonce}:{ha2}")


@dataclass
class _Response:
    status: int
    reason: str
    headers: dict[str, str]  # the last of each name
    body: bytes = b""
    challenges: list[str] = field(default_factory=list)  # every WWW-Authenticate header


# RFC 7235 2.1: an auth-scheme, or an auth-param (token "=" token or quoted-string)
_AUTH_ITEM = re.compile(r'[\s,]*([^\s,=]+)(?:\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]*))?')


def _challenges(headers: list[str]) -> list[tuple[str, dict[str, str]]]:
    """The challenges of WWW-Authenticate headers (RFC 7235 4.1; one header may hold several): the
    scheme (lower case) and its parameters (names in lower case, quoted strings unquoted)."""
    out: list[tuple[str, dict[str, str]]] = []
    for header in headers:
        pos = 0
        while (m := _AUTH_ITEM.match(header, pos)) is not None and m.end() > pos:
            pos = m.end()
            name, value = m.group(1), m.group(2)
            if value is None:
                out.append((name.lower(), {}))
            elif out:
                if value.startswith('"'):
                    value = re.sub(r"\\(.)", r"\1", value[1:-1])
                out[-1][1][name.lower()] = value
    return out


@dataclass
class _Url:
    text: str  # without credentials
    host: str
    port: int
    user: Optional[str] = None
    password: Optional[str] = None
    tls: bool = False


def url_problem(url: str) -> Optional[str]:
    """Why dvpipe's RTSP client cannot read ``url``, in words that do not repeat it (it may hold a password),
    or None."""
    u = urllib.parse.urlsplit(url)
    if u.scheme.lower() not in ("rtsp", "rtsps") or not u.hostname:
        return "dvpipe's RTSP client reads rtsp:// and rtsps://host[:port]/path URLs"
    try:
        port = u.port  # ValueError: ":99999", ":x"
    except ValueError:
        port = 0
    return "the port is not a number from 1 to 65535" if port == 0 else None


def _parse_url(url: str) -> _Url:
    problem = url_problem(url)
    if problem is not None:  # the URL itself is not repeated: it may hold a password
        raise SourceError(f"the RTSP URL: {problem}")
    u = urllib.parse.urlsplit(url)
    scheme = u.scheme.lower()
    assert u.hostname is not None  # url_problem checked it
    port = u.port or (322 if scheme == "rtsps" else 554)
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    clean = urllib.parse.urlunsplit((scheme, f"{host}:{u.port}" if u.port else host, u.path or "/", u.query, ""))
    user = urllib.parse.unquote(u.username) if u.username is not None else None
    password = urllib.parse.unquote(u.password) if u.password is not None else None
    return _Url(clean, u.hostname, port, user, password, scheme == "rtsps")


@dataclass
class RtspConnection:
    """One RTSP session carrying one video stream, over the RTSP TCP connection (``transport="tcp"``)
    or over UDP (``"udp"``); for ``rtsps://`` URLs the connection is TLS, the server's certificate
    checked against ``ca_file`` (a PEM file; default: the system's CAs) unless ``tls_verify`` is False.

    ``open()`` connects and plays (blocking, within ``open_timeout_s``); then ``receive()`` reads what
    has arrived without waiting and queues access units (``units``), ``filenos()`` are the sockets to
    poll, ``close()`` sends TEARDOWN (without waiting for the answer) and closes.
    """

    url: str
    open_timeout_s: float = 5.0
    transport: str = "tcp"
    tls_verify: bool = True
    ca_file: Optional[str] = None
    video: Optional[SdpVideo] = None
    units: deque = field(default_factory=deque)
    #: the sender's wall clock (ns since the Unix epoch) of the stream's first RTP timestamp, from the
    #: first RTCP sender report; None until one came
    sender_origin_ns: Optional[int] = None

    def __post_init__(self) -> None:
        self._url = _parse_url(self.url)
        self._sock: Optional[socket.socket] = None
        self._cseq = 0
        self._session: Optional[str] = None
        self._session_timeout_s = 60.0
        self._auth: Optional[dict] = None
        self._buf = bytearray()
        self._early = bytearray()  # interleaved frames that came before an answer
        self._rtp_channel, self._rtcp_channel = 0, 1
        self._depacketiser: Optional[RtpDepacketiser] = None
        self._first_report: Optional[tuple[int, int]] = None  # (NTP ns since the Unix epoch, unwrapped RTP ts)
        self._keepalive_at = 0.0
        self._deadline = 0.0
        self._udp: Optional[_UdpPair] = None

    # -- handshake (blocking, with a deadline) -------------------------------------------------------
    def open(self) -> SdpVideo:
        self._deadline = time.monotonic() + self.open_timeout_s
        where = f"{self._url.host}:{self._url.port}"
        try:
            self._sock = socket.create_connection((self._url.host, self._url.port), timeout=self.open_timeout_s)
        except socket.timeout:
            raise SourceError(f"cannot open {self._url.text}: no answer from {where} within "
                              f"{self.open_timeout_s:g} s") from None
        except OSError as e:
            raise SourceError(f"cannot open {self._url.text}: {e.strerror or e}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._url.tls:
            self._sock = self._start_tls(self._sock)
        try:
            return self._handshake()
        except BaseException:
            self.close(teardown=False)
            raise

    def _start_tls(self, sock: socket.socket) -> ssl.SSLSocket:
        """The connection in TLS (the handshake within the open timeout), or a one-line SourceError."""
        what = f"cannot open {self._url.text}"
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
            if not self.tls_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            return ctx.wrap_socket(sock, server_hostname=self._url.host)
        except ssl.SSLCertVerificationError as e:
            sock.close()
            raise SourceError(f"{what}: the server's certificate was not accepted ({e.verify_message}); give the "
                              "CA that signed it as ca_file (a PEM file), or set tls_verify: false") from None
        except FileNotFoundError:
            sock.close()
            raise SourceError(f"{what}: ca_file {self.ca_file} does not exist") from None
        except socket.timeout:
            sock.close()
            raise SourceError(f"{what}: no TLS handshake within {self.open_timeout_s:g} s") from None
        except (ssl.SSLError, OSError) as e:
            sock.close()
            raise SourceError(f"{what}: the TLS handshake failed ({getattr(e, 'reason', None) or e})") from None

    def _handshake(self) -> SdpVideo:
        url = self._url.text
        for _ in range(3):  # follow at most two redirects
            reply = self._request("DESCRIBE", url, {"Accept": "application/sdp"})
            if reply.status in (301, 302, 303, 307) and reply.headers.get("location"):
                url = reply.headers["location"]
                continue
            break
        self._check(reply, "DESCRIBE", url)
        base = reply.headers.get("content-base") or reply.headers.get("content-location") or url
        video = parse_sdp(reply.body.decode("utf-8", "replace"), base)
        if self.transport == "udp":
            assert self._sock is not None
            self._udp = _UdpPair.bind(self._sock)
            wanted = f"RTP/AVP;unicast;client_port={self._udp.port}-{self._udp.port + 1}"
        else:
            wanted = "RTP/AVP/TCP;unicast;interleaved=0-1"
        reply = self._request("SETUP", video.control, {"Transport": wanted})
        if reply.status == 461:
            other = "udp" if self.transport == "tcp" else "tcp"
            raise SourceError(f"{self._url.text}: the server does not send RTP over "
                              f"{'the RTSP connection' if self.transport == 'tcp' else 'UDP'} (461 Unsupported "
                              f"Transport); set transport: {other}")
        self._check(reply, "SETUP", video.control)
        transport = reply.headers.get("transport", "")
        if self._udp is not None:
            if "interleaved" in transport.lower():  # the server chose RTP over the connection after all
                self._udp.close()
                self._udp = None
            else:
                assert self._sock is not None
                self._udp.agree(transport, self._sock.getpeername()[0])
                self._udp.punch()
        session = reply.headers.get("session", "")
        self._session = session.split(";")[0].strip() or None
        m = re.search(r"timeout\s*=\s*(\d+)", session)
        if m and int(m.group(1)) > 0:
            self._session_timeout_s = float(m.group(1))
        m = re.search(r"interleaved\s*=\s*(\d+)(?:-(\d+))?", transport)
        if m:
            self._rtp_channel = int(m.group(1))
            self._rtcp_channel = int(m.group(2)) if m.group(2) else self._rtp_channel + 1
        play_url = base if base.rstrip("/") != video.control.rstrip("/") else video.control
        reply = self._request("PLAY", play_url, {"Range": "npt=0.000-"})
        self._check(reply, "PLAY", play_url)
        first = _first_seq(reply.headers.get("rtp-info", ""), video.control)
        if self._udp is not None and first is not None:
            self._udp.reorder.start_at(first)
        self.video = video
        self._depacketiser = RtpDepacketiser(video.codec, video.payload_type, video.clock_rate, video.dimensions)
        assert self._sock is not None
        self._sock.setblocking(False)
        self._keepalive_at = time.monotonic() + self._session_timeout_s / 2
        self._buf[:0], self._early = self._early, bytearray()
        self._parse()  # what came before and right after PLAY's answer
        if self._udp is not None:
            self._udp.start()
        return video

    def _check(self, reply: _Response, method: str, url: str) -> None:
        if reply.status == 200:
            return
        hint = ""
        if reply.status == 401:
            hint = (" (give user:password@ in the URL)" if self._url.user is None
                    else " (the URL's user name or password was refused)")
        elif reply.status == 404:
            hint = " (no stream at this path)"
        raise SourceError(f"cannot open {self._url.text}: {method} answered {reply.status} {reply.reason}{hint}")

    def _request(self, method: str, url: str, headers: dict[str, str]) -> _Response:
        """The answer to a request; a 401 with a challenge not answered yet (the first, or a new nonce:
        RFC 2617 3.2.1's ``stale``) is answered once with the credentials."""
        reply = self._exchange(method, url, headers)
        if reply.status == 401 and self._new_challenge(reply.challenges):
            reply = self._exchange(method, url, headers)
        return reply

    def _new_challenge(self, headers: list[str]) -> bool:
        """Take the challenge of a 401's WWW-Authenticate ``headers`` when it is one not answered yet (the
        first, or a new nonce); False when there is none to answer (or no credentials)."""
        if self._url.user is None:
            return False
        auth = self._challenge(headers)
        if auth is None or (self._auth is not None and auth["scheme"] == self._auth["scheme"]
                            and auth.get("nonce") == self._auth.get("nonce")):
            return False
        self._auth = auth
        return True

    def _refused_keepalive(self, head: bytes) -> None:
        """An answer read between the RTP frames (``head``: status line and headers): a 401 to a keep-alive
        with a new challenge (RFC 2617 3.2.1: the nonce went stale) gets the keep-alive again, answered."""
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(" ", 2)
        if len(status) > 1 and status[1] == "401" and self._new_challenge(
                [line.split(":", 1)[1].strip() for line in lines[1:] if line.lower().startswith("www-authenticate:")]):
            self._send_nowait(self._request_bytes("OPTIONS", self._url.text, {}))

    def _challenge(self, headers: list[str]) -> Optional[dict]:
        """The challenge of WWW-Authenticate headers to answer: Digest (MD5, qop auth or none) before
        Basic; None when neither is offered."""
        offered = _challenges(headers)
        for scheme, params in offered:
            if scheme == "digest" and "nonce" in params and params.get("algorithm", "MD5").upper() == "MD5":
                qops = [q.strip().lower() for q in params.get("qop", "").split(",")]
                return {"scheme": "digest", "realm": params.get("realm", ""), "nonce": params["nonce"],
                        "opaque": params.get("opaque"), "qop": "auth" if "auth" in qops else None, "nc": 0}
        if any(scheme == "basic" for scheme, _ in offered):
            return {"scheme": "basic"}
        return None

    def _authorization(self, method: str, url: str) -> Optional[str]:
        a, user, password = self._auth, self._url.user or "", self._url.password or ""
        if a is None:
            return None
        if a["scheme"] == "basic":
            return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        a["nc"] += 1
        nc, cnonce = f"{a['nc']:08x}", os.urandom(8).hex()
        resp = digest_response(user, password, a["realm"], a["nonce"], method, url, a["qop"], nc, cnonce)
        text = f'Digest username="{user}", realm="{a["realm"]}", nonce="{a["nonce"]}", uri="{url}", response="{resp}"'
        if a["qop"]:
            text += f', qop={a["qop"]}, nc={nc}, cnonce="{cnonce}"'
        if a["opaque"]:
            text += f', opaque="{a["opaque"]}"'
        return text

    def _request_bytes(self, method: str, url: str, headers: dict[str, str]) -> bytes:
        self._cseq += 1
        lines = [f"{method} {url} RTSP/1.0", f"CSeq: {self._cseq}", f"User-Agent: {_USER_AGENT}"]
        if self._session:
            lines.append(f"Session: {self._session}")
        auth = self._authorization(method, url)
        if auth:
            lines.append(f"Authorization: {auth}")
        lines.extend(f"{k}: {v}" for k, v in headers.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _exchange(self, method: str, url: str, headers: dict[str, str]) -> _Response:
        assert self._sock is not None
        self._send_all(self._request_bytes(method, url, headers))
        cseq = str(self._cseq)
        while True:
            reply = self._read_response()
            if reply.headers.get("cseq", cseq) == cseq:
                return reply

    def _send_all(self, data: bytes) -> None:
        assert self._sock is not None
        self._sock.settimeout(max(0.001, self._deadline - time.monotonic()))
        try:
            self._sock.sendall(data)
        except socket.timeout:
            raise SourceError(f"cannot open {self._url.text}: the server took no request within "
                              f"{self.open_timeout_s:g} s") from None
        except OSError as e:
            raise SourceError(f"cannot open {self._url.text}: {e.strerror or e}") from None

    def _recv_more(self) -> None:
        assert self._sock is not None
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise SourceError(f"cannot open {self._url.text}: no answer within {self.open_timeout_s:g} s")
        self._sock.settimeout(left)
        try:
            chunk = self._sock.recv(65536)
        except socket.timeout:
            raise SourceError(f"cannot open {self._url.text}: no answer within {self.open_timeout_s:g} s") from None
        except OSError as e:
            raise SourceError(f"cannot open {self._url.text}: {e.strerror or e}") from None
        if not chunk:
            raise SourceError(f"cannot open {self._url.text}: the server closed the connection")
        self._buf += chunk

    def _read_response(self) -> _Response:
        while True:
            buf = self._buf
            if buf[:1] == b"$":  # RTP before PLAY's answer (some servers start at once): kept for the stream
                if len(buf) >= 4 and len(buf) >= 4 + ((buf[2] << 8) | buf[3]):
                    n = 4 + ((buf[2] << 8) | buf[3])
                    self._early += buf[:n]
                    del buf[:n]
                    continue
            elif buf.startswith(b"RTSP/") or len(buf) < 5:
                end = buf.find(b"\r\n\r\n")
                if end >= 0:
                    head = bytes(buf[:end]).decode("latin-1").split("\r\n")
                    fields = [(k.strip().lower(), v.strip()) for k, _, v in (h.partition(":") for h in head[1:])]
                    headers = dict(fields)
                    try:
                        length = int(headers.get("content-length", "0") or 0)
                    except ValueError:
                        length = 0
                    if len(buf) >= end + 4 + length:
                        body = bytes(buf[end + 4:end + 4 + length])
                        del buf[:end + 4 + length]
                        status_line = head[0].split(" ", 2)
                        try:
                            status = int(status_line[1])
                        except (IndexError, ValueError):
                            raise SourceError(f"cannot open {self._url.text}: not an RTSP answer "
                                              f"({head[0][:60]!r})") from None
                        return _Response(status, status_line[2] if len(status_line) > 2 else "", headers, body,
                                         [v for k, v in fields if k == "www-authenticate"])
            else:
                raise SourceError(f"cannot open {self._url.text}: not an RTSP server (it answered "
                                  f"{bytes(buf[:40])!r})")
            self._recv_more()

    # -- streaming (non-blocking) --------------------------------------------------------------------
    def filenos(self) -> list[int]:
        """The sockets to poll: the RTSP connection, and with UDP the RTP and RTCP sockets; none when closed."""
        if self._sock is None:
            return []
        return [self._sock.fileno()] + (self._udp.filenos() if self._udp is not None else [])

    def due_s(self) -> Optional[float]:
        """When (``time.monotonic()``) :meth:`receive` has work without new data: a gap in the UDP packets
        given up on (their reorder wait over), completing the picture behind it; None when nothing waits."""
        return self._udp.reorder.deadline() if self._udp is not None else None

    def wait(self, timeout_s: float) -> bool:
        """Block until data arrives (True) or ``timeout_s`` passes (False): for a reader of its own."""
        fds = self.filenos()
        return bool(fds) and wait_readable(fds, timeout_s)

    def receive(self) -> int:
        """Take what the kernel holds (never waits) and queue the access units completed; the number
        of bytes taken. Raises :class:`StreamLost` when the server closed or reset the connection."""
        if self._sock is None:
            raise StreamLost(f"{self._url.text}: the connection is closed")
        taken = self._receive_connection()
        if self._udp is not None:
            taken += self._udp.receive(self._rtp, self._rtcp, self._url.text)
        return taken

    def _receive_connection(self) -> int:
        assert self._sock is not None
        taken = 0
        while True:
            try:
                chunk = self._sock.recv(_RECV_BYTES)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as e:
                raise StreamLost(f"{self._url.text}: {e.strerror or e}") from None
            if not chunk:
                self._parse()
                raise StreamLost(f"{self._url.text}: the server closed the connection")
            self._buf += chunk
            taken += len(chunk)
            if len(chunk) < _RECV_BYTES and not self._url.tls:  # TLS: until the records decrypted are taken too
                break
        self._parse()
        now = time.monotonic()
        if now >= self._keepalive_at:
            self._keepalive_at = now + self._session_timeout_s / 2
            self._send_nowait(self._request_bytes("OPTIONS", self._url.text, {}))
        return taken

    def _rtp(self, packet: bytes | bytearray) -> None:
        dep = self._depacketiser
        if dep is None:
            return
        restarts = dep.restarts
        self.units.extend(dep.packet(packet))
        if dep.restarts != restarts:  # a new RTP session: its timestamps are anchored by its own reports
            self._first_report, self.sender_origin_ns = None, None
        if self.sender_origin_ns is None and self._first_report is not None:
            self._anchor()

    def _send_nowait(self, data: bytes) -> None:
        try:
            if self._sock is not None:
                self._sock.send(data)  # a few hundred bytes: the socket's send buffer takes them
        except OSError:
            pass  # a broken connection shows in the next receive

    def _parse(self) -> None:
        buf, pos, n = self._buf, 0, len(self._buf)
        dep = self._depacketiser
        while pos + 4 <= n:
            if buf[pos] == 0x24:  # '$'
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                if pos + 4 + length > n:
                    break
                channel = buf[pos + 1]
                payload = buf[pos + 4:pos + 4 + length]  # a bytearray slice: one copy (bytes() made two)
                pos += 4 + length
                if channel == self._rtp_channel and dep is not None:
                    self._rtp(payload)
                elif channel == self._rtcp_channel:
                    self._rtcp(payload)
            elif buf[pos:pos + 5] in (b"RTSP/", b"RTSP") or buf[pos:pos + 4] in (b"OPTI", b"GET_", b"SET_", b"ANNO"):
                # an answer to a keep-alive (its "/" maybe not come yet), or a request from the server
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    break
                m = re.search(rb"(?i)content-length:\s*(\d+)", buf[pos:end])
                length = int(m.group(1)) if m else 0
                if end + 4 + length > n:
                    break
                if buf[pos:pos + 9] == b"RTSP/1.0 ":
                    self._refused_keepalive(bytes(buf[pos:end]))
                pos = end + 4 + length
            else:  # not a frame boundary: skip to the next '$'
                nxt = buf.find(b"$", pos + 1)
                pos = n if nxt < 0 else nxt
        if pos:
            del buf[:pos]
        if len(buf) > _MAX_BUFFER:
            raise StreamLost(f"{self._url.text}: {len(buf) >> 20} MB of input that is no RTP frame")

    def _rtcp(self, data: bytes | bytearray) -> None:
        """Sender reports in a compound RTCP packet: the first one anchors the sender's clock."""
        i = 0
        while i + 8 <= len(data):
            pt = data[i + 1]
            length = 4 * (((data[i + 2] << 8) | data[i + 3]) + 1)
            if pt == 200 and i + 20 <= len(data):  # SR: SSRC, NTP seconds, NTP fraction, RTP timestamp
                ssrc, sec, frac, ts32 = struct.unpack_from(">IIII", data, i + 4)
                dep = self._depacketiser
                if self._first_report is None and sec and (dep is None or not dep.restarts or ssrc == dep.ssrc):
                    ntp_ns = (sec - _NTP_UNIX_OFFSET_S) * 1_000_000_000 + (frac * 1_000_000_000 >> 32)
                    if self._depacketiser is not None:  # the same clock as the RTP packets: one unwrapping
                        self._first_report = (ntp_ns, self._depacketiser.unwrap(ts32))
            i += length
        self._anchor()

    def _anchor(self) -> None:
        """``sender_origin_ns`` once both the first report and the first RTP packet came."""
        dep = self._depacketiser
        if self.sender_origin_ns is not None or self._first_report is None or dep is None or dep.first_ts is None:
            return
        ntp_ns, ts = self._first_report
        self.sender_origin_ns = ntp_ns - (ts - dep.first_ts) * 1_000_000_000 * dep.time_base.numerator \
            // dep.time_base.denominator

    @property
    def packets_lost(self) -> int:
        return self._depacketiser.lost if self._depacketiser is not None else 0

    @property
    def packets_late(self) -> int:
        """Packets that came after their gap was given up on (UDP), or behind the sequence, or twice (dropped)."""
        late = self._depacketiser.late if self._depacketiser is not None else 0
        return late + (self._udp.reorder.late if self._udp is not None else 0)

    def close(self, teardown: bool = True) -> None:
        """Send TEARDOWN (without waiting for the answer) and close the connection. Safe to call twice."""
        sock, self._sock = self._sock, None
        udp, self._udp = self._udp, None
        if udp is not None:
            udp.close()
        if sock is None:
            return
        if teardown and self._session and self.video is not None:
            try:
                sock.setblocking(False)
                sock.send(self._request_bytes("TEARDOWN", self._url.text, {}))
            except OSError:
                pass
        try:
            sock.close()
        except OSError:
            pass


def _first_seq(rtp_info: str, control: str) -> Optional[int]:
    """The sequence number of the stream's first RTP packet from PLAY's ``RTP-Info`` (RFC 2326 12.33:
    ``url=...;seq=N;rtptime=T`` per stream, comma-separated): the entry of ``control``, or the only one."""
    found = []  # (url, seq) of each entry with a seq
    for entry in rtp_info.split(","):
        seq = re.search(r"seq\s*=\s*(\d+)", entry)
        if seq is not None:
            where = re.search(r"url\s*=\s*([^;\s]+)", entry)
            found.append((where.group(1).rstrip("/") if where else "", int(seq.group(1)) & 0xFFFF))
    track = control.rstrip("/").rsplit("/", 1)[-1]
    for url, first in found:
        if len(found) == 1 or url.endswith(track):
            return first
    return None


_small_buffer_told = False


def _receive_buffer(sock: socket.socket) -> None:
    """Ask for :data:`_UDP_RECEIVE_BUFFER` bytes of receive buffer; a warning, once per process, when the
    kernel gives less (Linux: ``net.core.rmem_max``, 208 KB by default)."""
    global _small_buffer_told
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _UDP_RECEIVE_BUFFER)
    granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)  # Linux reports twice what it keeps
    if granted < _UDP_RECEIVE_BUFFER and not _small_buffer_told:
        _small_buffer_told = True
        warnings.warn(f"dvpipe: RTP over UDP gets a {granted >> 10} KB receive buffer per camera (asked "
                      f"{_UDP_RECEIVE_BUFFER >> 20} MB; Linux caps it at net.core.rmem_max): a burst larger than "
                      "that (a high-bitrate keyframe) loses packets; raise it (sysctl -w "
                      f"net.core.rmem_max={_UDP_RECEIVE_BUFFER}) or use transport: tcp", RuntimeWarning, stacklevel=2)


class _UdpPair:
    """The RTP (even port) and RTCP (port + 1) sockets of a UDP session, bound to the RTSP connection's
    local address; datagrams from other hosts than the server's are not read."""

    def __init__(self, rtp: socket.socket, rtcp: socket.socket):
        self.rtp, self.rtcp = rtp, rtcp
        self.port = rtp.getsockname()[1]
        self.reorder = RtpReorder()
        self.foreign = 0  # datagrams from other hosts (dropped)
        self._hosts: set[str] = set()
        self._server_rtp: Optional[tuple[str, int]] = None
        self._server_rtcp: Optional[tuple[str, int]] = None
        self._ssrc = struct.unpack(">I", os.urandom(4))[0]
        self._report_at = 0.0

    @classmethod
    def bind(cls, connection: socket.socket) -> "_UdpPair":
        local = connection.getsockname()[0]
        for _ in range(64):
            rtp = socket.socket(connection.family, socket.SOCK_DGRAM)
            rtp.bind((local, 0))
            port = rtp.getsockname()[1]
            if port % 2 == 0 and port < 65535:
                rtcp = socket.socket(connection.family, socket.SOCK_DGRAM)
                try:
                    rtcp.bind((local, port + 1))
                except OSError:
                    rtcp.close()
                else:
                    _receive_buffer(rtp)
                    return cls(rtp, rtcp)
            rtp.close()
        raise SourceError(f"no two neighbouring free UDP ports on {local} for RTP and RTCP")

    def agree(self, transport: str, server_host: str) -> None:
        """What the server's answer to SETUP says: its RTCP port and the host it sends from."""
        self._hosts = {server_host}
        m = re.search(r"source\s*=\s*([^;\s]+)", transport)
        if m:
            self._hosts.add(m.group(1))
        m = re.search(r"server_port\s*=\s*(\d+)(?:-(\d+))?", transport)
        if m:
            port = int(m.group(2)) if m.group(2) else int(m.group(1)) + 1
            self._server_rtp, self._server_rtcp = (server_host, int(m.group(1))), (server_host, port)

    def punch(self) -> None:
        """Open the way for the stream through a NAT or stateful firewall, as FFmpeg's client does after
        SETUP (``ff_rtp_send_punch_packets``): an RTP header without payload (payload type 0, sequence
        number, timestamp and SSRC 0) from the RTP socket to the server's RTP port, and a receiver report
        from the RTCP socket to its RTCP port."""
        if self._server_rtp is not None:
            try:
                self.rtp.sendto(bytes([0x80, 0]) + bytes(10), self._server_rtp)
            except OSError:
                pass  # best effort, as the reports
        self._report()

    def start(self) -> None:
        self.rtp.setblocking(False)
        self.rtcp.setblocking(False)
        self._report()

    def filenos(self) -> list[int]:
        return [self.rtp.fileno(), self.rtcp.fileno()]

    def receive(self, on_rtp, on_rtcp, url: str) -> int:
        """Hand the datagrams that came to ``on_rtp`` (in sequence-number order) and ``on_rtcp``; the
        number of bytes taken."""
        taken = 0
        now = time.monotonic()
        for sock, rtp in ((self.rtp, True), (self.rtcp, False)):
            while True:
                try:
                    data, addr = sock.recvfrom(65536)
                except (BlockingIOError, InterruptedError):
                    break
                except ConnectionRefusedError:  # an ICMP answer to a report sent: not this socket's data
                    continue
                except OSError as e:
                    raise StreamLost(f"{url}: {e.strerror or e}") from None
                if addr[0] not in self._hosts:
                    self.foreign += 1
                    continue
                taken += len(data)
                if rtp:
                    for packet in self.reorder.push(data, now):
                        on_rtp(packet)
                else:
                    on_rtcp(data)
        for packet in self.reorder.expire(now):
            on_rtp(packet)
        if now >= self._report_at:
            self._report()
        return taken

    def _report(self) -> None:
        """An RTCP receiver report without report blocks, with the client's CNAME (RFC 3550 6.4.2, 6.5.1)."""
        self._report_at = time.monotonic() + _RECEIVER_REPORT_S
        if self._server_rtcp is None:
            return
        cname = f"{_USER_AGENT}@{socket.gethostname()}".encode()[:255]
        items = bytes([1, len(cname)]) + cname + b"\0"
        items += b"\0" * (-len(items) % 4)
        rr = struct.pack(">BBHI", 0x80, 201, 1, self._ssrc)
        sdes = struct.pack(">BBHI", 0x81, 202, (4 + len(items)) // 4, self._ssrc) + items
        try:
            self.rtcp.sendto(rr + sdes, self._server_rtcp)
        except OSError:
            pass  # a report is best effort: the stream shows whether the server still sends

    def close(self) -> None:
        for sock in (self.rtp, self.rtcp):
            try:
                sock.close()
            except OSError:
                pass
