"""RTP packets of one H.264/H.265 stream -> Annex B access units (RFC 3550, RFC 6184, RFC 7798); of
one JPEG stream -> JPEG files (RFC 2435, :mod:`._rtp_jpeg`).

H.264: single NAL unit packets, STAP-A and FU-A (packetisation modes 0 and 1). H.265: single NAL unit
packets, aggregation packets and fragmentation units, without DONL fields. An access unit ends at the
marker bit or at a new RTP timestamp. A gap in the sequence numbers, or a fragment that lost its first
or last piece, marks the access units it touches as damaged, with the sequence numbers lost; a picture
lost whole (no NAL unit of it came complete) passes its damage on to the next access unit (which may
refer to it). A packet without payload (padding only) counts in the sequence all the same.
Over UDP, packets may arrive out of order: :class:`RtpReorder` puts them back in sequence-number order
first (waiting a bounded time for a missing one), so that only packets that did not come count as lost.

Sequence numbers are checked as RFC 3550 Appendix A.1 checks them: a packet up to
:data:`MAX_MISORDER` behind the next one expected is late (dropped, counted in ``late``), one up to
:data:`MAX_DROPOUT` ahead is in order after a gap; a larger jump is a sender that restarted its RTP
session when the next packet follows it (else the jumping packet is dropped as late), and so is a new
SSRC at once. A restart starts the sequence afresh and continues the timestamps from the last ones (a
new session's first RTP timestamp is random); the first access unit after it is damaged (the decoder's
reference chain starts again at a keyframe).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from ._rtp_jpeg import JpegFrames
from .base import StreamLost

__all__ = ["RtpDepacketiser", "RtpReorder", "RtpUnit"]

_MAX_UNIT = 32 << 20  # bytes of one access unit
MAX_DROPOUT = 3000  # packets: a larger jump ahead is a restarted sender (RFC 3550 A.1)
MAX_MISORDER = 100  # packets: one further behind is a restarted sender, not a late packet (RFC 3550 A.1)


def _in_order(ahead: int) -> Optional[bool]:
    """RFC 3550 A.1's ``update_seq`` for a packet ``ahead`` (16-bit) of the next one expected: True in
    order (after a gap of ``ahead`` packets), False late or a duplicate, None a jump (a restart?)."""
    if ahead < MAX_DROPOUT - 1:  # A.1's udelta (ahead + 1) below MAX_DROPOUT
        return True
    if ahead >= 0x10000 - MAX_MISORDER:
        return False
    return None


@dataclass
class RtpUnit:
    """One depacketised access unit, shaped as the demuxer's packets are for the source's reader:
    ``bytes(unit)`` is the Annex B data, ``pts * time_base`` its presentation time in seconds from the
    stream's first RTP timestamp, ``damage`` what is known to be lost (None: intact)."""

    data: bytes
    pts: int
    time_base: Fraction
    damage: Optional[str] = None
    dts = None
    is_keyframe = False
    is_corrupt = False
    is_discard = False

    def __bytes__(self) -> bytes:
        return self.data


class RtpDepacketiser:
    """RTP packets of one H.264/H.265 stream -> :class:`RtpUnit` access units (decode order); of a JPEG
    stream (``codec="jpeg"``) -> one unit per frame, a whole JPEG file (``dimensions``: the SDP's
    ``a=x-dimensions`` for frames whose header gives no size).

    ``packet(rtp_bytes)`` returns the access units it completed (usually none or one). ``lost`` counts the
    packets missing from the sequence, ``late`` those dropped as late or duplicated (or after a jump no
    packet followed), ``restarts`` the RTP sessions restarted by the sender (a new SSRC or sequence)."""

    _START = b"\x00\x00\x00\x01"

    def __init__(self, codec: str, payload_type: int, clock_rate: int = 90000,
                 dimensions: Optional[tuple[int, int]] = None):
        self.codec = codec
        self._jpeg = JpegFrames(dimensions) if codec == "jpeg" else None
        self.payload_type = payload_type
        self.time_base = Fraction(1, clock_rate)
        self.first_ts: Optional[int] = None  # unwrapped RTP timestamp of the first packet
        self._last_ts32: Optional[int] = None
        self._ts_high = 0
        self._next_seq: Optional[int] = None
        self._ts: Optional[int] = None  # unwrapped timestamp of the unit being assembled
        self._nals: list[bytes] = []
        self._size = 0
        self._fu: Optional[list[bytes]] = None  # the fragmented NAL unit being joined
        self._damage: list[str] = []
        self.lost = 0  # packets
        self.late = 0  # packets
        self.restarts = 0
        self.ssrc: Optional[int] = None
        self._gap: Optional[str] = None  # packets lost before a packet without payload
        self._probe: Optional[bytes] = None  # a packet after a jump: a restart if the next one follows it
        self._restarted: Optional[str] = None  # why the sequence starts afresh at the next packet
        self._step = 1  # the last step between two pictures' timestamps (a restart continues by it)
        self._last_ts: Optional[int] = None  # unwrapped timestamp of the last packet

    def unwrap(self, ts32: int) -> int:
        """A 32-bit RTP timestamp as a count that does not wrap (steps of either sign below 2^31)."""
        if self._last_ts32 is not None:
            delta = (ts32 - self._last_ts32) & 0xFFFFFFFF
            if delta >= 1 << 31:
                delta -= 1 << 32
            self._ts_high += delta
        else:
            self._ts_high = ts32
        self._last_ts32 = ts32
        return self._ts_high

    def packet(self, pkt: bytes | bytearray) -> list[RtpUnit]:
        if len(pkt) < 12 or pkt[0] >> 6 != 2:
            return []
        b0, b1 = pkt[0], pkt[1]
        if b1 & 0x7F != self.payload_type:
            return []
        seq, ts32, ssrc = struct.unpack_from(">HII", pkt, 2)
        probe, self._probe = self._probe, None
        if self._next_seq is not None:
            if ssrc != self.ssrc:
                self.late += probe is not None
                return self._restart(f"the sender restarted its RTP stream (SSRC {self.ssrc:08X} -> {ssrc:08X})") \
                    + self.packet(pkt)
            if probe is not None:
                if seq == (struct.unpack_from(">H", probe, 2)[0] + 1) & 0xFFFF:
                    return self._restart(f"the sender restarted its RTP stream (sequence numbers jumped from "
                                         f"{(self._next_seq - 1) & 0xFFFF} to {(seq - 1) & 0xFFFF})") \
                        + self.packet(probe) + self.packet(pkt)
                self.late += 1
            order = _in_order((seq - self._next_seq) & 0xFFFF)
            if order is None:  # a jump: held until the next packet says whether the sender restarted
                self._probe = bytes(pkt)
                return []
            if not order:
                self.late += 1  # a late or duplicate packet: already counted as lost
                return []
        start = 12 + 4 * (b0 & 0x0F)
        if b0 & 0x10 and len(pkt) >= start + 4:  # header extension
            start += 4 + 4 * struct.unpack_from(">H", pkt, start + 2)[0]
        elif b0 & 0x10:
            start = len(pkt)
        end = len(pkt)
        if b0 & 0x20:  # padding: its length is the last byte
            end -= pkt[-1]
        gap, self._gap = self._gap, None  # packets lost before a packet without payload
        if self._next_seq is None:  # the stream's first packet, or the first since a restart
            self.ssrc = ssrc
            if self._restarted is not None:
                if self._jpeg is None:  # JPEG frames stand alone
                    self._damage.append(self._restarted)
                last = self._last_ts if self._last_ts is not None else self._ts_high
                self._last_ts32, self._ts_high = ts32, last + self._step
                self._restarted = None
        elif seq != self._next_seq:
            missing = (seq - self._next_seq) & 0xFFFF
            self.lost += missing
            lost = (f"RTP packets lost (sequence numbers {self._next_seq}..{(seq - 1) & 0xFFFF}, "
                    f"{missing} packet{'s' if missing != 1 else ''})")
            gap = f"{gap}; {lost}" if gap is not None else lost
        self._next_seq = (seq + 1) & 0xFFFF
        if end <= start:  # no payload (padding only): its sequence number counts all the same (RFC 3550 5.1)
            self._gap = gap
            return []
        ts = self.unwrap(ts32)
        if self.first_ts is None:
            self.first_ts = ts
        if self._last_ts is not None and 0 < ts - self._last_ts <= self.time_base.denominator:
            self._step = ts - self._last_ts
        self._last_ts = ts
        out: list[RtpUnit] = []
        if self._ts is not None and ts != self._ts:  # a new picture, the last one had no marker bit
            if gap is not None:
                self._damage.append(gap)  # it may have lost its end (its marker packet)
            out.extend(self._flush())
        if gap is not None:  # this picture lost packets, or its beginning, or pictures before it were lost
            self._damage.append(gap)
        self._ts = ts
        self._payload(memoryview(pkt)[start:end])
        if b1 & 0x80:  # marker: the access unit's last packet
            out.extend(self._flush())
        return out

    def _restart(self, why: str) -> list[RtpUnit]:
        """The sender's new RTP session starts at the next packet: the unit being assembled ends here."""
        out: list[RtpUnit] = []
        if self._ts is not None:  # the old session's last unit, its marker not come
            self._damage.append(why)
            out = self._flush()
        self.restarts += 1
        self._next_seq, self._gap, self._restarted = None, None, why
        return out

    def _add(self, nal: bytes) -> None:
        self._size += len(nal) + 4
        if self._size > _MAX_UNIT:
            raise StreamLost(f"an access unit over {_MAX_UNIT >> 20} MB (no marker bit): not a video stream "
                             "dvpipe can read")
        self._nals.append(nal)

    def _payload(self, p: memoryview) -> None:
        if self._jpeg is not None:
            self._jpeg.payload(p)
            return
        if self.codec == "h264":
            kind, header_len = p[0] & 0x1F, 1
            single, aggregate, fragment = 1 <= kind <= 23, kind == 24, kind == 28
        else:
            if len(p) < 2:
                return
            kind, header_len = (p[0] >> 1) & 0x3F, 2
            single, aggregate, fragment = kind < 48, kind == 48, kind == 49
        if self._fu is not None and not fragment:
            self._damage.append("a fragmented NAL unit lost its last fragment")
            self._fu = None
        if single:
            self._add(bytes(p))
        elif aggregate:
            i = header_len
            while i + 2 <= len(p):
                n = (p[i] << 8) | p[i + 1]
                if n == 0 or i + 2 + n > len(p):
                    self._damage.append("an aggregation packet's sizes do not fit it")
                    break
                self._add(bytes(p[i + 2:i + 2 + n]))
                i += 2 + n
        elif fragment:
            if len(p) <= header_len + 1:
                return
            fu = p[header_len]
            first, last = bool(fu & 0x80), bool(fu & 0x40)
            if first:
                if self._fu is not None:
                    self._damage.append("a fragmented NAL unit lost its last fragment")
                if self.codec == "h264":
                    head = bytes([(p[0] & 0xE0) | (fu & 0x1F)])
                else:
                    head = bytes([(p[0] & 0x81) | ((fu & 0x3F) << 1), p[1]])
                self._fu = [head]
            elif self._fu is None:
                self._damage.append("a fragmented NAL unit lost its first fragment")
                return
            self._fu.append(bytes(p[header_len + 1:]))
            if last:
                self._add(b"".join(self._fu))
                self._fu = None
        else:
            self._damage.append(f"RTP payload of NAL type {kind} (not read by dvpipe's RTSP client)")

    def _flush(self) -> list[RtpUnit]:
        if self._jpeg is not None:
            return self._flush_jpeg()
        if self._fu is not None:
            self._damage.append("a fragmented NAL unit lost its last fragment")
            self._fu = None
        out = []
        if self._nals and self._ts is not None:
            assert self.first_ts is not None
            data = self._START + self._START.join(self._nals)
            damage = "; ".join(dict.fromkeys(self._damage)) if self._damage else None
            out.append(RtpUnit(data, self._ts - self.first_ts, self.time_base, damage))
            self._damage = []
        # else no NAL unit of the picture came whole: its damage is the next unit's (which may refer to it)
        self._nals, self._size, self._ts = [], 0, None
        return out

    def _flush_jpeg(self) -> list[RtpUnit]:
        assert self._jpeg is not None
        data, damage = self._jpeg.finish()
        out = []
        if data is not None and self._ts is not None:
            assert self.first_ts is not None
            why = list(dict.fromkeys(self._damage + ([damage] if damage else [])))
            out.append(RtpUnit(data, self._ts - self.first_ts, self.time_base, "; ".join(why) if why else None))
        self._ts, self._damage = None, []
        return out


class RtpReorder:
    """RTP packets as UDP delivers them (out of order, duplicated) -> in sequence-number order.

    ``push(packet, now_s)`` returns the packets now in order (usually just this one). A packet ahead of
    the next one expected waits for those before it, at most ``max_delay_s`` seconds (``now_s``: a
    monotonic clock) and while at most ``max_packets`` wait -- the defaults of FFmpeg's RTSP client over
    UDP (``max_delay`` 100 ms, ``reorder_queue_size`` 500) -- then the missing packets are given up on: the
    depacketiser sees the gap and counts them as lost. A packet behind the next one expected (a
    duplicate, or one that came after its gap was given up on) is dropped and counted in ``late``.
    :meth:`expire` gives up on gaps without a new packet (call it by :meth:`deadline`). The first packet
    expected is the one :meth:`start_at` names (RTSP's ``RTP-Info: seq``), else the first to arrive.
    A new SSRC, or a jump of the sequence numbers (RFC 3550 A.1: over :data:`MAX_DROPOUT` ahead or
    :data:`MAX_MISORDER` behind) that the next packet follows, is a sender that restarted: the packets
    waiting go on (their gaps given up on), then the new sequence.
    """

    def __init__(self, max_delay_s: float = 0.1, max_packets: int = 500):
        self.max_delay_s = max_delay_s
        self.max_packets = max_packets
        self.late = 0
        self._next: Optional[int] = None  # the 16-bit sequence number expected next
        self._ssrc: Optional[bytes] = None
        self._held: dict[int, tuple[bytes, float]] = {}  # sequence number -> (packet, arrival s)
        self._probe: Optional[bytes] = None  # a packet after a jump: a restart if the next one follows it

    def start_at(self, seq: int) -> None:
        """The stream's first packet is ``seq`` (those that came before it are dropped as late)."""
        self._next = seq & 0xFFFF

    def push(self, pkt: bytes, now_s: float) -> list[bytes]:
        if len(pkt) < 12:
            return [pkt]  # not RTP: the depacketiser refuses it
        seq, ssrc = (pkt[2] << 8) | pkt[3], pkt[8:12]
        probe, self._probe = self._probe, None
        if self._next is None:
            self._next = seq
        if self._ssrc is None:
            self._ssrc = ssrc
        if ssrc != self._ssrc:  # a new RTP session
            self.late += probe is not None
            return self._restart(ssrc, seq) + [pkt]
        if probe is not None:
            if seq == ((probe[2] << 8) + probe[3] + 1) & 0xFFFF:
                return self._restart(ssrc, seq) + [probe, pkt]
            self.late += 1
        ahead = (seq - self._next) & 0xFFFF
        order = _in_order(ahead)
        if order is None:  # a jump: held until the next packet says whether the sender restarted
            self._probe = pkt
            return self.expire(now_s)
        if not order or seq in self._held:
            self.late += 1
            return []
        if ahead:
            self._held[seq] = (pkt, now_s)
            return self.expire(now_s)
        self._next = (seq + 1) & 0xFFFF
        if not self._held:  # in order, nothing waiting: the usual case
            return [pkt]
        return [pkt] + self._in_order() + self.expire(now_s)

    def expire(self, now_s: float) -> list[bytes]:
        """The waiting packets whose gap is given up on (too many wait, or the oldest waited too long)."""
        out: list[bytes] = []
        held = self._held
        while held and (len(held) > self.max_packets or now_s - min(a for _p, a in held.values()) > self.max_delay_s):
            out.extend(self._skip_gap())
        return out

    def deadline(self) -> Optional[float]:
        """When (``now_s`` clock) :meth:`expire` gives up on the oldest gap if no packet comes; None when
        nothing waits."""
        if not self._held:
            return None
        return min(a for _p, a in self._held.values()) + self.max_delay_s

    def _restart(self, ssrc: bytes, seq: int) -> list[bytes]:
        """The packets of the old session still waiting (their gaps given up on); the new one goes on
        after ``seq``."""
        out: list[bytes] = []
        while self._held:
            out.extend(self._skip_gap())
        self._ssrc, self._next = ssrc, (seq + 1) & 0xFFFF
        return out

    def _skip_gap(self) -> list[bytes]:
        assert self._next is not None
        nxt = self._next
        self._next = min(self._held, key=lambda s: (s - nxt) & 0xFFFF)  # the gap before it: lost
        return self._in_order()

    def _in_order(self) -> list[bytes]:
        out = []
        while self._next in self._held:
            out.append(self._held.pop(self._next)[0])
            self._next = (self._next + 1) & 0xFFFF
        return out
