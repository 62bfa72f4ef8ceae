"""H.264 / H.265 headers read by dvpipe itself: picture order, and damage the decoder does not report.

A decoder tells its caller little about a damaged stream (FFmpeg's HEVC decoder flags no picture
corrupt, whatever the damage). The headers of every access unit say enough to find much of it
without decoding, and to know a picture's place in presentation order when the stream carries no
timestamps (Annex B files):

* **picture order count** (POC): H.264 8.2.1 (types 0, 1 and 2, and its restart after a picture with
  memory_management_control_operation 5, which the slice header's dec_ref_pic_marking names), H.265 8.3.1;
* **random access**: H.264 IDR and recovery-point SEI, H.265 IRAP (IDR, CRA, BLA) and which
  pictures lead an IRAP that starts decoding (RASL: they reference pictures before it);
* **structural damage**: a NAL unit header that breaks the rules (forbidden bit, reserved layer or
  temporal id), a slice header that cannot be read (runs past the unit, names a parameter set the
  stream never sent, values out of range), a reference picture that never arrived (H.264: a gap in
  ``frame_num`` where the SPS forbids gaps; H.265: a picture of the current picture's reference
  picture set that was never decoded), a picture without a slice.

What stays invisible here: damage inside slice data (bit flips, truncation after the slice
header), which only the decoder sees; a lost picture that nothing references. The measured rates
per damage kind are in docs/deployments.md ("Integrity").

:class:`StreamHeaders` is fed every access unit of one stream in decode order
(:meth:`StreamHeaders.read`) and returns a :class:`Picture` for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional
from .errors import ConfigError, DvpipeError

__all__ = ["Picture", "StreamHeaders", "StreamFormat", "stream_format", "HeaderError", "split_nal_units", "nal_units",
           "picture_hash_mismatch",
           "has_recovery_point_sei"]


class HeaderError(DvpipeError, ValueError):
    """A header that cannot be read as the standard writes it (the unit is damaged)."""


class _PastEnd(HeaderError):
    """A header runs past the bytes read of its unit (a unit cut short, or a header longer than dvpipe reads)."""


# ------------------------------------------------------------------------------------- bit reading
#: bytes of a NAL unit read at most: every header dvpipe reads ends well before (slice data is never read)
_HEAD_BYTES = 4096
#: bytes of an H.264 slice NAL unit read: through dec_ref_pic_marking even with the longest pred_weight_table
#: (two lists of 32 references, luma and chroma weights and offsets of 17-bit codes: 832 bytes)
_SLICE_HEAD_BYTES = 1024


class _Nal(bytes):
    """The first bytes of a NAL unit; ``size``: the whole unit's length in bytes; ``start``: the offset in its
    access unit of the start code before it."""

    size: int
    start: int


def _nal_bounds(au: bytes) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each NAL unit of an Annex B access unit: from after its start code to the next
    start code (or the end of ``au``)."""
    n = len(au)
    i = au.find(b"\x00\x00\x01")
    while 0 <= i < n:
        start = i + 3
        j = au.find(b"\x00\x00\x01", start)
        yield start, (n if j < 0 else j)
        i = j


def split_nal_units(au: bytes) -> list[bytes]:
    """The NAL units of an Annex B access unit, start codes removed, emulation prevention kept; each
    cut to its first :data:`_HEAD_BYTES` bytes (the headers), its full length in ``.size``."""
    out: list[bytes] = []
    for start, end in _nal_bounds(au):
        unit = _Nal(au[start:min(end, start + _HEAD_BYTES)])
        unit.size = end - start
        if end < len(au) and au[end - 1] == 0:  # the next start code's leading zero (4-byte start code)
            unit.size = end - start - 1
            if start + _HEAD_BYTES >= end:
                unit = _Nal(unit.rstrip(b"\x00"))
                unit.size = len(unit)
        unit.start = start - 3
        out.append(unit)
    return out


def nal_units(au: bytes) -> list[bytes]:
    """The whole NAL units of an Annex B access unit, start codes removed (and the zeros before a
    following start code); empty units left out."""
    out = []
    for start, end in _nal_bounds(au):
        nal = au[start:end]
        if end < len(au) and nal.endswith(b"\x00"):
            nal = nal.rstrip(b"\x00")  # the leading zero of a 4-byte start code
        if nal:
            out.append(nal)
    return out


def _rbsp(nal: bytes, limit: int) -> bytes:
    """The first ``limit`` bytes of a NAL unit's payload with emulation prevention bytes removed."""
    return nal[:limit].replace(b"\x00\x00\x03", b"\x00\x00")


class _Bits:
    """MSB-first bit reader over an RBSP; reading past the end raises :class:`HeaderError`."""

    def __init__(self, data: bytes):
        self._v = int.from_bytes(data, "big")
        self._n = len(data) * 8
        self._p = 0

    def u(self, n: int) -> int:
        if n == 0:
            return 0
        if self._p + n > self._n:
            raise _PastEnd("the header runs past the end of the unit")
        self._p += n
        return (self._v >> (self._n - self._p)) & ((1 << n) - 1)

    def flag(self) -> bool:
        return self.u(1) == 1

    @property
    def position(self) -> int:
        """Bits read so far."""
        return self._p

    def ue(self, maximum: int = 1 << 31) -> int:
        zeros = 0
        while self.u(1) == 0:
            zeros += 1
            if zeros > 31:
                raise HeaderError("an Exp-Golomb code longer than 32 bits")
        value = (1 << zeros) - 1 + self.u(zeros)
        if value > maximum:
            raise HeaderError(f"a header value {value} above its limit {maximum}")
        return value

    def se(self) -> int:
        k = self.ue()
        return (k + 1) // 2 if k & 1 else -(k // 2)


# ------------------------------------------------------------------------------------- the result
@dataclass
class Picture:
    """What the headers of one access unit say.

    Attributes:
        poc: picture order count (presentation order within its coded video sequence), or None
            (no slice could be read).
        new_sequence: picture order count restarts at this picture and every picture before it is output
            first: it starts a coded video sequence (H.264 IDR, H.265 IDR/BLA, or a CRA that starts decoding),
            or it is an H.264 picture with memory_management_control_operation 5 (8.2.1: its POC counts as 0).
        random_access: a decoder can start here (H.264 IDR or recovery point; H.265 IRAP).
        leading_skipped: an H.265 RASL picture of an IRAP that started decoding: never output.
        second_field: the second field of an H.264 field pair (the pair is one presented frame).
        damage: the structural problem found, or None.
        picture_hash: H.265 decoded-picture-hash SEI: ``(kind, values per colour component)``, kind
            ``md5`` (16 bytes each), ``crc`` or ``checksum`` (ints); None when the unit has none.
        coded_size: ``(height, width)`` of the decoded picture before cropping (H.265; hashes cover it).
        output_in_decode_order: H.264 with picture order count type 2: pictures are output in decode order,
            and their POC steps (2 after a reference picture, 1 after a non-reference one) do not tell a
            lost picture's place.
        lost_references: reference pictures found missing at this one: H.264, the gap in ``frame_num`` just
            before it; H.265, the pictures its reference picture set uses that the stream lacks (each counted
            at the first picture that names it).
        hashed_stream: every picture of the stream so far carried a decoded picture hash that dvpipe checks
            (MD5 or checksum, pictures not cropped): each picture decoded from this one on is judged by its
            own hash (a damaged reference shows in it).
        joined_at: H.265: the byte offset in the access unit where another picture's damaged unit starts,
            joined to this picture by a parser that reads access units from a byte stream (FFmpeg's): a
            picture whose first slice segment header is unreadable reads as more slices of the one before.
            The bytes before it are this picture, intact; None when the unit is one picture.
        poc_msb: the picture order count's most significant part (PicOrderCntMsb; 0 where the POC type has
            none): after a lost IDR, the part carried over from the sequence before.
    """

    poc: Optional[int] = None
    new_sequence: bool = False
    random_access: bool = False
    leading_skipped: bool = False
    second_field: bool = False
    damage: Optional[str] = None
    picture_hash: Optional[tuple[str, list]] = None
    coded_size: Optional[tuple[int, int]] = None
    output_in_decode_order: bool = False
    lost_references: int = 0
    hashed_stream: bool = False
    joined_at: Optional[int] = None
    poc_msb: int = 0


def may_be_reference(au: bytes, codec: str) -> bool:
    """Whether the picture of Annex B access unit ``au`` may be a reference picture, by the NAL unit header of its
    first slice (H.264: ``nal_ref_idc`` not 0; H.265: not a sub-layer non-reference type), which damage to the
    slice header leaves readable; True when no slice is found."""
    for start, end in _nal_bounds(au):
        if start >= end:
            continue
        header = au[start]
        if codec == "h264":
            if header & 0x1F in (1, 5):
                return header & 0x60 != 0  # nal_ref_idc
        else:
            t = (header >> 1) & 0x3F
            if t <= 9 or 16 <= t <= 21:
                return not _sub_layer_non_reference(t)
    return True


def _sub_layer_non_reference(t: int) -> bool:
    """H.265 NAL unit type ``t`` is TRAIL_N, TSA_N, STSA_N, RADL_N, RASL_N or RSV_VCL_N10/12/14 (7.4.2.2)."""
    return t <= 14 and t % 2 == 0


def _store_parameter_set(table: dict, parse: Callable[[bytes], tuple[int, Any]], rbsp: bytes,
                         kind: str) -> Optional[str]:
    """Parse a parameter set into ``table`` by its id. One that cannot be read is left out (a decoder keeps the
    one of its id sent before): the damage it gives the access unit's picture is returned."""
    try:
        set_id, value = parse(rbsp)
    except HeaderError as e:
        return f"a damaged {kind} parameter set ({e})"
    table[set_id] = value
    return None


# ------------------------------------------------------------------------------------- H.264
@dataclass
class _Sps264:
    log2_max_frame_num: int
    poc_type: int
    log2_max_poc_lsb: int = 0
    delta_pic_order_always_zero: bool = False
    offset_for_non_ref_pic: int = 0
    offset_for_top_to_bottom_field: int = 0
    offsets_for_ref_frame: list = field(default_factory=list)
    gaps_allowed: bool = False
    frame_mbs_only: bool = True
    separate_colour_plane: bool = False
    chroma_format_idc: int = 1  # 0 monochrome, 1 4:2:0, 2 4:2:2, 3 4:4:4
    bit_depth_luma: int = 8

    @property
    def chroma_array_type(self) -> int:
        """ChromaArrayType (7.4.2.1.1): 0 for monochrome or separate colour planes."""
        return 0 if self.separate_colour_plane else self.chroma_format_idc


@dataclass
class _Pps264:
    """The picture parameter set fields a slice header depends on up to dec_ref_pic_marking (7.3.2.2)."""

    sps_id: int
    bottom_field_pic_order_present: bool
    num_ref_idx_default: tuple[int, int] = (1, 1)  # l0, l1 active references
    weighted_pred: bool = False
    weighted_bipred_idc: int = 0
    redundant_pic_cnt_present: bool = False
    cabac: bool = False  # entropy_coding_mode_flag
    pic_init_qp: int = 26
    complete: bool = False  # every field above read (a slice group map too long to read leaves it False)


_HIGH_PROFILES = (100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135)


def _skip_scaling_list(r: _Bits, size: int) -> None:
    last = nxt = 8
    for _ in range(size):
        if nxt != 0:
            delta = r.se()
            if not -128 <= delta <= 127:
                raise HeaderError("a scaling list delta out of range")
            nxt = (last + delta + 256) % 256
        last = nxt if nxt != 0 else last


def _sps264(rbsp: bytes) -> tuple[int, _Sps264]:
    r = _Bits(rbsp)
    profile = r.u(8)
    r.u(16)  # constraint flags, level
    sps_id = r.ue(31)
    chroma = 1
    separate = False
    depth = 8
    if profile in _HIGH_PROFILES:
        chroma = r.ue(3)
        if chroma == 3:
            separate = r.flag()
        depth = r.ue(6) + 8
        r.ue(6)  # chroma bit depth
        r.u(1)
        if r.flag():  # seq_scaling_matrix_present_flag
            for i in range(8 if chroma != 3 else 12):
                if r.flag():
                    _skip_scaling_list(r, 16 if i < 6 else 64)
    log2_max_frame_num = r.ue(12) + 4
    poc_type = r.ue(2)
    sps = _Sps264(log2_max_frame_num, poc_type, separate_colour_plane=separate, chroma_format_idc=chroma,
                  bit_depth_luma=depth)
    if poc_type == 0:
        sps.log2_max_poc_lsb = r.ue(12) + 4
    elif poc_type == 1:
        sps.delta_pic_order_always_zero = r.flag()
        sps.offset_for_non_ref_pic = r.se()
        sps.offset_for_top_to_bottom_field = r.se()
        sps.offsets_for_ref_frame = [r.se() for _ in range(r.ue(255))]
    r.ue(32)  # max_num_ref_frames
    sps.gaps_allowed = r.flag()
    r.ue()
    r.ue()  # size in macroblocks
    sps.frame_mbs_only = r.flag()
    return sps_id, sps


def _pps264(rbsp: bytes) -> tuple[int, _Pps264]:
    r = _Bits(rbsp)
    pps_id, sps_id = r.ue(255), r.ue(31)
    cabac = r.flag()
    pps = _Pps264(sps_id, r.flag(), cabac=cabac)
    try:
        groups = r.ue(7) + 1
        if groups > 1:  # slice group maps (Baseline's FMO)
            map_type = r.ue(6)
            if map_type == 0:
                for _ in range(groups):
                    r.ue()
            elif map_type == 2:
                for _ in range(2 * (groups - 1)):
                    r.ue()
            elif map_type in (3, 4, 5):
                r.u(1), r.ue()
            elif map_type == 6:
                bits = (groups - 1).bit_length()
                for _ in range(r.ue() + 1):
                    r.u(bits)
        pps.num_ref_idx_default = (r.ue(31) + 1, r.ue(31) + 1)
        pps.weighted_pred, pps.weighted_bipred_idc = r.flag(), r.u(2)
        pps.pic_init_qp = 26 + r.se()
        r.se(), r.se()  # pic_init_qs, chroma_qp_index_offset
        r.u(2)  # deblocking_filter_control_present, constrained_intra_pred
        pps.redundant_pic_cnt_present = r.flag()
        pps.complete = True
    except HeaderError:  # the fields slices need for their picture order count were read; these were not
        pass
    return pps_id, pps


def _marking_operations(r: _Bits, sps: _Sps264, pps: _Pps264, slice_type: int, idr: bool = False,
                        ref_idc: int = 1) -> list[int]:
    """The memory_management_control_operation values of a slice (7.3.3.3; none but for a non-IDR reference
    slice), ``r`` just after the picture order count fields: the fields between (7.3.3: redundant_pic_cnt,
    the reference index counts, ref_pic_list_modification 7.3.3.1, pred_weight_table 7.3.3.2) are read past;
    ``r`` is left after dec_ref_pic_marking."""
    if pps.redundant_pic_cnt_present:
        r.ue(127)
    kind = slice_type % 5  # 0 P, 1 B, 2 I, 3 SP, 4 SI
    if kind == 1:
        r.u(1)  # direct_spatial_mv_pred_flag
    counts = list(pps.num_ref_idx_default)
    if kind in (0, 1, 3) and r.flag():  # num_ref_idx_active_override_flag
        counts[0] = r.ue(31) + 1
        if kind == 1:
            counts[1] = r.ue(31) + 1
    lists = counts[:2 if kind == 1 else 1] if kind in (0, 1, 3) else []
    for _ in lists:
        if r.flag():  # ref_pic_list_modification_flag_lX
            while r.ue(3) != 3:  # modification_of_pic_nums_idc (4 and 5 are MVC's, NAL unit type 20)
                r.ue()
    if (pps.weighted_pred and kind in (0, 3)) or (pps.weighted_bipred_idc == 1 and kind == 1):
        r.ue(7)  # luma_log2_weight_denom
        if sps.chroma_array_type:
            r.ue(7)
        for n in lists:
            for _ in range(n):
                if r.flag():
                    r.se(), r.se()
                if sps.chroma_array_type and r.flag():
                    r.se(), r.se(), r.se(), r.se()
    operations: list[int] = []
    if idr:
        r.u(2)  # no_output_of_prior_pics_flag, long_term_reference_flag
    elif ref_idc and r.flag():  # adaptive_ref_pic_marking_mode_flag
        while (op := r.ue(6)) != 0:
            operations.append(op)
            if op in (1, 3):
                r.ue()  # difference_of_pic_nums_minus1
            if op == 2:
                r.ue()  # long_term_pic_num
            if op in (3, 6):
                r.ue()  # long_term_frame_idx
            if op == 4:
                r.ue()  # max_long_term_frame_idx_plus1
    return operations


def _slice_tail(r: _Bits, sps: _Sps264, pps: _Pps264, slice_type: int, idr: bool,
                ref_idc: int) -> tuple[list[int], int]:
    """The rest of a slice header (7.3.3) from just after the picture order count fields to slice_qp_delta:
    ``(memory_management_control_operation values, slice_qp_delta)``. Raises :class:`HeaderError` for a value
    no encoder writes (an Exp-Golomb code longer than 32 bits, a slice QP outside -QpBdOffset..51, 7.4.3): a
    damaged header whose first fields happened to read as numbers (a zeroed unit reads frame_num 0, POC 0)."""
    operations = _marking_operations(r, sps, pps, slice_type, idr, ref_idc)
    if pps.cabac and slice_type % 5 not in (2, 4):
        r.ue(2)  # cabac_init_idc
    delta = r.se()  # slice_qp_delta
    qp, lowest = pps.pic_init_qp + delta, -6 * (sps.bit_depth_luma - 8)
    if not lowest <= qp <= 51:
        raise HeaderError(f"a slice QP of {qp}, outside {lowest}..51")
    return operations, delta


def _sei_number(rbsp: bytes, i: int) -> tuple[int, int]:
    """An SEI payload type or size at byte ``i`` (0xFF bytes add 255 each, then the last byte): ``(value,
    next i)``; ``next i`` is past the end when the unit is cut short."""
    value = 0
    while i < len(rbsp) and rbsp[i] == 0xFF:
        value += 255
        i += 1
    if i >= len(rbsp):
        return value, len(rbsp) + 1
    return value + rbsp[i], i + 1


def _sei_recovery_point(rbsp: bytes) -> bool:
    """Whether an H.264 SEI NAL unit holds a recovery-point message (payload type 6)."""
    i = 0
    while i < len(rbsp) and rbsp[i] != 0x80:  # rbsp_trailing_bits
        ptype, i = _sei_number(rbsp, i)
        size, i = _sei_number(rbsp, i)
        if i > len(rbsp):
            return False
        if ptype == 6:
            return True
        i += size
    return False


def has_recovery_point_sei(au: bytes) -> bool:
    """Whether an H.264 access unit (Annex B) holds a recovery-point SEI message (payload type 6), in any of
    its SEI NAL units and at any place in one (cameras group several messages in one unit)."""
    for start, end in _nal_bounds(au):
        if start < len(au) and au[start] & 0x1F == 6 and _sei_recovery_point(_rbsp(au[start + 1:end], end - start)):
            return True
    return False


class _H264:
    def __init__(self) -> None:
        self.sps: dict[int, _Sps264] = {}
        self.pps: dict[int, _Pps264] = {}
        self.prev_ref: Optional[tuple[int, int, int]] = None  # (poc msb, poc lsb, frame_num) of the last reference
        self.prev_frame_num = 0
        self.prev_frame_num_offset = 0
        self.prev_field: Optional[tuple[int, bool, bool]] = None  # (frame_num, bottom, reference) of a lone first field
        self.started = False

    def read(self, nals: list[bytes]) -> Picture:
        pic = Picture()
        slice_nal = None
        recovery = False
        sets: Optional[str] = None  # a damaged parameter set: the slice is read with those sent before
        for nal in nals:
            if not nal:
                continue
            if nal[0] & 0x80:
                raise HeaderError("a NAL unit with its forbidden bit set")
            t = nal[0] & 0x1F
            if t == 7:
                sets = _store_parameter_set(self.sps, _sps264, _rbsp(nal[1:], 600), "sequence") or sets
            elif t == 8:
                sets = _store_parameter_set(self.pps, _pps264, _rbsp(nal[1:], _HEAD_BYTES), "picture") or sets
            elif t == 6:
                recovery = recovery or _sei_recovery_point(_rbsp(nal[1:], _HEAD_BYTES))
            elif t in (1, 5) and slice_nal is None:
                slice_nal = nal
        if slice_nal is None:
            raise HeaderError(sets or "an access unit without a slice")
        try:
            pic = self._slice(slice_nal, recovery, pic)
        except HeaderError as e:
            if slice_nal[0] & 0x1F != 5:
                raise
            pic = self._damaged_idr(str(e))
        pic.damage = pic.damage or sets
        return pic

    def _damaged_idr(self, damage: str) -> Picture:
        """An IDR picture whose slice header cannot be read (its NAL unit type can): a coded video sequence
        starts here all the same, so the state restarts as at an IDR (POC 0, frame_num 0: 8.2.1, 7.4.3; an
        IDR's pic_order_cnt_lsb is 0 in every encoder's streams) and the pictures after it are placed from it.
        Output in decode order as the last sequence parameter set read says (one per stream in practice)."""
        self.prev_ref, self.prev_frame_num, self.prev_frame_num_offset = (0, 0, 0), 0, 0
        self.prev_field, self.started = None, True
        last = next(reversed(self.sps.values()), None)
        return Picture(poc=0, new_sequence=True, damage=damage,
                       output_in_decode_order=last is not None and last.poc_type == 2)

    def _slice(self, nal: bytes, recovery: bool, pic: Picture) -> Picture:
        ref_idc = (nal[0] >> 5) & 3
        idr = nal[0] & 0x1F == 5
        r = _Bits(_rbsp(nal[1:], _SLICE_HEAD_BYTES))
        r.ue()  # first_mb_in_slice
        slice_type = r.ue()
        if slice_type > 9:
            raise HeaderError("a slice type above 9")
        pps_id = r.ue(255)
        pps = self.pps.get(pps_id)
        if pps is None:
            raise HeaderError(f"a slice names picture parameter set {pps_id}, which the stream never sent")
        bottom_present = pps.bottom_field_pic_order_present
        sps = self.sps.get(pps.sps_id)
        if sps is None:
            raise HeaderError(f"a slice names sequence parameter set {pps.sps_id}, which the stream never sent")
        if sps.separate_colour_plane:
            r.u(2)
        frame_num = r.u(sps.log2_max_frame_num)
        field_pic = bottom = False
        if not sps.frame_mbs_only:
            field_pic = r.flag()
            if field_pic:
                bottom = r.flag()
        if idr:
            r.ue(65535)
        lsb = delta_bottom = 0
        delta = [0, 0]
        if sps.poc_type == 0:
            lsb = r.u(sps.log2_max_poc_lsb)
            if bottom_present and not field_pic:
                delta_bottom = r.se()
        elif sps.poc_type == 1 and not sps.delta_pic_order_always_zero:
            delta[0] = r.se()
            if bottom_present and not field_pic:
                delta[1] = r.se()
        reset = False  # memory_management_control_operation 5 (8.2.1, 8.2.5.4)
        if pps.complete:  # a value no encoder writes raises here, before the stream's state takes the picture
            try:
                reset = 5 in _slice_tail(r, sps, pps, slice_type, idr, ref_idc)[0]
            except _PastEnd:  # past the bytes read: the picture order count is what it was
                pass
        max_frame_num = 1 << sps.log2_max_frame_num
        pic.random_access = idr or recovery
        pic.new_sequence = idr
        # a lone first field followed by its second field: one frame
        if field_pic and self.prev_field is not None and self.prev_field[0] == frame_num \
                and self.prev_field[1] != bottom and not idr:
            pic.second_field = True
        # frame_num continuity (7.4.3): a reference picture lost in between leaves a gap
        if not idr and self.started and not sps.gaps_allowed and self.prev_ref is not None:
            prev = self.prev_ref[2]
            if frame_num not in (prev, (prev + 1) % max_frame_num):
                gap = (frame_num - prev - 1) % max_frame_num
                # frame_num 1 follows an IDR (frame_num 0): a gap that ends there is one lost IDR far more
                # often than a run of lost reference pictures that happens to wrap to it
                pic.lost_references = 1 if frame_num == 1 else gap
                pic.damage = (f"a reference picture is missing (frame_num {frame_num} after {prev}: "
                              + ("the IDR before it lost)" if frame_num == 1 else f"{gap} lost)"))
                # 8.2.5.2: the frames of the gap are inferred, the last of them the previous reference picture
                self.prev_ref = (self.prev_ref[0], self.prev_ref[1], (frame_num - 1) % max_frame_num)
        self.started = self.started or idr or recovery
        # picture order count (8.2.1)
        if sps.poc_type == 0:
            if idr or self.prev_ref is None:
                prev_msb, prev_lsb = 0, 0
            else:
                prev_msb, prev_lsb = self.prev_ref[0], self.prev_ref[1]
            max_lsb = 1 << sps.log2_max_poc_lsb
            if lsb < prev_lsb and prev_lsb - lsb >= max_lsb // 2:
                msb = prev_msb + max_lsb
            elif lsb > prev_lsb and lsb - prev_lsb > max_lsb // 2:
                msb = prev_msb - max_lsb
            else:
                msb = prev_msb
            top = msb + lsb
            pic.poc = top if field_pic else min(top, top + delta_bottom)
            pic.poc_msb = msb
            if ref_idc:
                self.prev_ref = (msb, lsb, frame_num)
        else:
            if idr:
                offset = 0
            elif self.prev_frame_num > frame_num:
                offset = self.prev_frame_num_offset + max_frame_num
            else:
                offset = self.prev_frame_num_offset
            if sps.poc_type == 2:
                pic.poc = 0 if idr else 2 * (offset + frame_num) - (0 if ref_idc else 1)
                pic.output_in_decode_order = True
            else:
                pic.poc = self._poc_type1(sps, offset, frame_num, ref_idc, delta, field_pic, bottom)
            self.prev_frame_num_offset = offset
            if ref_idc:
                self.prev_ref = (0, 0, frame_num)
        self.prev_frame_num = frame_num
        if reset:
            # 8.2.1: the picture's POC becomes 0 (tempPicOrderCnt subtracted) and every picture before it is
            # output first; the next pictures count from it as from an IDR whose frame_num is 0 (7.4.3) and,
            # POC type 0, whose TopFieldOrderCnt is its own after the subtraction (0 for a field)
            pic.poc, pic.new_sequence = 0, True
            top_after = max(0, -delta_bottom) if sps.poc_type == 0 and not field_pic else 0
            self.prev_ref = (0, top_after, 0)
            self.prev_frame_num = self.prev_frame_num_offset = 0
            frame_num = 0
        self.prev_field = None if (not field_pic or pic.second_field) else (frame_num, bottom, bool(ref_idc))
        return pic

    @staticmethod
    def _poc_type1(sps: _Sps264, offset: int, frame_num: int, ref_idc: int, delta: list, field_pic: bool,
                   bottom: bool) -> int:
        cycle = sps.offsets_for_ref_frame
        absolute = offset + frame_num if cycle else 0
        if ref_idc == 0 and absolute > 0:
            absolute -= 1
        expected = 0
        if absolute > 0:
            count, within = divmod(absolute - 1, len(cycle))
            expected = count * sum(cycle) + sum(cycle[:within + 1])
        if ref_idc == 0:
            expected += sps.offset_for_non_ref_pic
        top = expected + delta[0]
        bot = top + sps.offset_for_top_to_bottom_field + delta[1]
        if field_pic:
            return bot if bottom else top
        return min(top, bot)


# ------------------------------------------------------------------------------------- H.265
@dataclass
class _Sps265:
    log2_max_poc_lsb: int
    separate_colour_plane: bool
    rps: list  # per short-term RPS of the SPS: (negative deltas, positive deltas, used flags neg, used flags pos)
    long_term_present: bool
    lt_sps: list  # (poc lsb, used by curr)
    size: tuple[int, int] = (0, 0)  # (height, width) in luma samples, before cropping
    ctbs: int = 1  # coding tree blocks in a picture (PicSizeInCtbsY)
    chroma_format: int = 1
    sao: bool = False
    temporal_mvp: bool = False
    cropped: bool = False  # a conformance window: pictures are output smaller than coded (and hashed)
    bit_depth: int = 8  # luma


@dataclass
class _Pps265:
    """The picture parameter set fields the slice header depends on (7.3.2.3.1)."""

    sps_id: int
    dependent_slices: bool = False  # dependent_slice_segments_enabled_flag
    output_flag: bool = False
    extra_bits: int = 0
    cabac_init_present: bool = False
    ref_idx_default: tuple[int, int] = (1, 1)
    slice_chroma_qp_offsets: bool = False
    weighted_pred: bool = False
    weighted_bipred: bool = False
    entry_points: bool = False  # tiles or wavefront (WPP): slices list their substreams' byte offsets
    tiles: bool = False
    loop_filter_across_slices: bool = False
    deblocking_override: bool = False
    deblocking_disabled: bool = False
    lists_modification: bool = False
    header_extension: bool = False
    complete: bool = False  # every field read (no range or other extension the slice header would need)


def _pps265(rbsp: bytes) -> tuple[int, _Pps265]:
    r = _Bits(rbsp)
    pps_id, p = r.ue(63), _Pps265(r.ue(15))
    p.dependent_slices = r.flag()
    p.output_flag, p.extra_bits = r.flag(), r.u(3)
    try:
        r.u(1)
        p.cabac_init_present = r.flag()
        p.ref_idx_default = (r.ue(14) + 1, r.ue(14) + 1)
        r.se()
        r.u(2)
        if r.flag():
            r.ue()
        r.se()
        r.se()
        p.slice_chroma_qp_offsets, p.weighted_pred, p.weighted_bipred = r.flag(), r.flag(), r.flag()
        r.u(1)
        tiles, wpp = r.flag(), r.flag()
        p.tiles, p.entry_points = tiles, tiles or wpp
        if tiles:
            cols, rows = r.ue(), r.ue()
            if not r.flag():
                for _ in range(cols + rows):
                    r.ue()
            r.u(1)
        p.loop_filter_across_slices = r.flag()
        if r.flag():  # deblocking_filter_control_present_flag
            p.deblocking_override = r.flag()
            p.deblocking_disabled = r.flag()
            if not p.deblocking_disabled:
                r.se()
                r.se()
        if r.flag():
            _skip_scaling_list_data(r)
        p.lists_modification = r.flag()
        r.ue()
        p.header_extension = r.flag()
        p.complete = not r.flag()  # pps_extension_present_flag: range / SCC fields change the slice header
    except HeaderError:
        p.complete = False  # a PPS cut short by the head limit; its first fields are enough for POC
    return pps_id, p


def _nal_offset(payload: bytes, rbsp_bytes: int) -> int:
    """Bytes of ``payload`` (a NAL unit after its header, emulation prevention kept) that hold its first
    ``rbsp_bytes`` RBSP bytes."""
    i = k = zeros = 0
    while k < rbsp_bytes and i < len(payload):
        b = payload[i]
        i += 1
        if zeros >= 2 and b == 3:
            zeros = 0
            continue
        k += 1
        zeros = zeros + 1 if b == 0 else 0
    return i


def _skip_profile_tier_level(r: _Bits, max_sub_layers_minus1: int) -> None:
    r.u(32)
    r.u(32)
    r.u(32)  # general profile (88 bits) and level (8)
    present = [(r.flag(), r.flag()) for _ in range(max_sub_layers_minus1)]
    if max_sub_layers_minus1 > 0:
        r.u(2 * (8 - max_sub_layers_minus1))
    for profile, level in present:
        if profile:
            r.u(32)
            r.u(32)
            r.u(24)
        if level:
            r.u(8)


def _skip_scaling_list_data(r: _Bits) -> None:
    for size_id in range(4):
        for _ in range(0, 6, 3 if size_id == 3 else 1):
            if not r.flag():
                r.ue()
            else:
                if size_id > 1:
                    r.se()
                for _ in range(min(64, 1 << (4 + (size_id << 1)))):
                    r.se()


def _st_ref_pic_set(r: _Bits, idx: int, sets: list, in_slice: bool = False) -> tuple:
    """H.265 7.3.7 / 7.4.8: ``(negative deltas, positive deltas, used neg, used pos)``. ``in_slice``: the set
    of a slice header (stRpsIdx == num_short_term_ref_pic_sets), the only one with ``delta_idx_minus1``."""
    if idx != 0 and r.flag():  # inter_ref_pic_set_prediction_flag
        delta_idx = r.ue(idx - 1) + 1 if in_slice else 1
        sign = r.u(1)
        delta_rps = (1 - 2 * sign) * (r.ue(32767) + 1)
        neg_r, pos_r, used_neg_r, used_pos_r = sets[idx - delta_idx]
        n = len(neg_r) + len(pos_r)
        used_by_curr, use_delta = [], []
        for _ in range(n + 1):
            u = r.flag()
            used_by_curr.append(u)
            use_delta.append(True if u else r.flag())
        nneg = len(neg_r)
        neg, used_neg, pos, used_pos = [], [], [], []
        for j in range(len(pos_r) - 1, -1, -1):
            d = pos_r[j] + delta_rps
            if d < 0 and use_delta[nneg + j]:
                neg.append(d)
                used_neg.append(used_by_curr[nneg + j])
        if delta_rps < 0 and use_delta[n]:
            neg.append(delta_rps)
            used_neg.append(used_by_curr[n])
        for j in range(nneg):
            d = neg_r[j] + delta_rps
            if d < 0 and use_delta[j]:
                neg.append(d)
                used_neg.append(used_by_curr[j])
        for j in range(nneg - 1, -1, -1):
            d = neg_r[j] + delta_rps
            if d > 0 and use_delta[j]:
                pos.append(d)
                used_pos.append(used_by_curr[j])
        if delta_rps > 0 and use_delta[n]:
            pos.append(delta_rps)
            used_pos.append(used_by_curr[n])
        for j in range(len(pos_r)):
            d = pos_r[j] + delta_rps
            if d > 0 and use_delta[nneg + j]:
                pos.append(d)
                used_pos.append(used_by_curr[nneg + j])
        return neg, pos, used_neg, used_pos
    nneg, npos = r.ue(16), r.ue(16)
    neg, used_neg, pos, used_pos = [], [], [], []
    prev = 0
    for _ in range(nneg):
        prev -= r.ue(32767) + 1
        neg.append(prev)
        used_neg.append(r.flag())
    prev = 0
    for _ in range(npos):
        prev += r.ue(32767) + 1
        pos.append(prev)
        used_pos.append(r.flag())
    return neg, pos, used_neg, used_pos


def _sps265(rbsp: bytes) -> tuple[int, _Sps265]:
    r = _Bits(rbsp)
    r.u(4)
    max_sub_layers_minus1 = r.u(3)
    if max_sub_layers_minus1 > 6:
        raise HeaderError("an SPS with more than 7 sub-layers")
    r.u(1)
    _skip_profile_tier_level(r, max_sub_layers_minus1)
    sps_id = r.ue(15)
    chroma = r.ue(3)
    separate = r.flag() if chroma == 3 else False
    width = r.ue(1 << 16)
    height = r.ue(1 << 16)
    cropped = False
    if r.flag():  # conformance window
        cropped = any([r.ue() for _ in range(4)])
    bit_depth = r.ue(8) + 8
    r.ue(8)  # chroma bit depth
    log2_max_poc_lsb = r.ue(12) + 4
    ordering_all = r.flag()
    for _ in range(0 if ordering_all else max_sub_layers_minus1, max_sub_layers_minus1 + 1):
        r.ue()
        r.ue()
        r.ue()
    log2_ctb = r.ue(3) + 3
    log2_ctb += r.ue(3)  # log2 of the smallest coding block, the difference to the largest (CtbLog2SizeY)
    for _ in range(4):
        r.ue()  # transform block sizes, hierarchy depths
    ctb = 1 << log2_ctb
    ctbs = -(-width // ctb) * -(-height // ctb)
    if r.flag() and r.flag():  # scaling_list_enabled_flag, sps_scaling_list_data_present_flag
        _skip_scaling_list_data(r)
    r.u(1)  # amp
    sao = r.flag()
    if r.flag():  # pcm
        r.u(8)
        r.ue()
        r.ue()
        r.u(1)
    sets: list = []
    for i in range(r.ue(64)):
        sets.append(_st_ref_pic_set(r, i, sets))
    long_term = r.flag()
    lt_sps = []
    if long_term:
        for _ in range(r.ue(32)):
            lt_sps.append((r.u(log2_max_poc_lsb), r.flag()))
    temporal_mvp = r.flag()
    return sps_id, _Sps265(log2_max_poc_lsb, separate, sets, long_term, lt_sps, (height, width), ctbs, chroma,
                           sao, temporal_mvp, cropped, bit_depth)


def _sei_picture_hash(rbsp: bytes, components: int) -> Optional[tuple[str, list]]:
    """The decoded picture hash (payload type 132) of an H.265 suffix SEI NAL unit's payload, or None."""
    i = 0
    while i + 2 <= len(rbsp) and rbsp[i] != 0x80:
        ptype = size = 0
        while i < len(rbsp) and rbsp[i] == 0xFF:
            ptype, i = ptype + 255, i + 1
        ptype, i = ptype + rbsp[i], i + 1
        while i < len(rbsp) and rbsp[i] == 0xFF:
            size, i = size + 255, i + 1
        if i >= len(rbsp):
            return None
        size, i = size + rbsp[i], i + 1
        if ptype == 132 and i + size <= len(rbsp) and size >= 1:
            body = rbsp[i:i + size]
            kind = {0: "md5", 1: "crc", 2: "checksum"}.get(body[0])
            width = {"md5": 16, "crc": 2, "checksum": 4}.get(kind or "", 0)
            if kind is None or size < 1 + width * components:
                raise HeaderError("a decoded picture hash SEI that is too short or of an unknown kind")
            values = [body[1 + c * width:1 + (c + 1) * width] for c in range(components)]
            return kind, [v if kind == "md5" else int.from_bytes(v, "big") for v in values]
        i += size
    return None


def _ceil_log2(n: int) -> int:
    return max(0, (n - 1).bit_length())


def _pred_weight_table(r: _Bits, sps: _Sps265, counts: tuple[int, ...]) -> None:
    chroma = sps.chroma_format != 0 and not sps.separate_colour_plane
    r.ue(7)
    if chroma:
        r.se()
    for n in counts:
        luma = [r.flag() for _ in range(n)]
        chroma_flags = [r.flag() for _ in range(n)] if chroma else [False] * n
        for lf, cf in zip(luma, chroma_flags):
            if lf:
                r.se()
                r.se()
            if cf:
                for _ in range(4):
                    r.se()


def _entry_point_check(r: _Bits, nal: bytes, sps: _Sps265, pps: _Pps265, slice_type: int, idr: bool,
                       used_refs: int) -> Optional[str]:
    """The rest of an H.265 slice segment header (7.3.6.1) up to its entry points: the byte offsets of its
    wavefront rows or tiles in the slice data. A slice shorter than its last entry point was cut short."""
    temporal_mvp = sps.temporal_mvp and not idr and r.flag()
    sao_luma = sao_chroma = False
    if sps.sao:
        sao_luma = r.flag()
        if sps.chroma_format != 0 and not sps.separate_colour_plane:
            sao_chroma = r.flag()
    if slice_type < 2:  # P (1) or B (0)
        l0, l1 = pps.ref_idx_default
        if r.flag():
            l0 = r.ue(14) + 1
            l1 = r.ue(14) + 1 if slice_type == 0 else l1
        counts = (l0, l1) if slice_type == 0 else (l0,)
        if pps.lists_modification and used_refs > 1:
            for n in counts:
                if r.flag():
                    for _ in range(n):
                        r.u(_ceil_log2(used_refs))
        if slice_type == 0:
            r.u(1)  # mvd_l1_zero_flag
        if pps.cabac_init_present:
            r.u(1)
        if temporal_mvp:
            from_l0 = r.flag() if slice_type == 0 else True
            if (from_l0 and l0 > 1) or (not from_l0 and slice_type == 0 and l1 > 1):
                r.ue(14)
        if (pps.weighted_pred and slice_type == 1) or (pps.weighted_bipred and slice_type == 0):
            _pred_weight_table(r, sps, counts)
        r.ue(4)  # five_minus_max_num_merge_cand
    r.se()  # slice_qp_delta
    if pps.slice_chroma_qp_offsets:
        r.se()
        r.se()
    disabled = pps.deblocking_disabled
    if pps.deblocking_override and r.flag():
        disabled = r.flag()
        if not disabled:
            r.se()
            r.se()
    if pps.loop_filter_across_slices and (sao_luma or sao_chroma or not disabled):
        r.u(1)
    n = r.ue(1 << 16)
    total = 0
    if n:
        bits = r.ue(31) + 1
        total = sum(r.u(bits) + 1 for _ in range(n))
    if pps.header_extension:
        for _ in range(r.ue(256)):
            r.u(8)
    if r.u(1) != 1:  # byte_alignment(): a one, then zeros
        return "a slice header that does not end where the standard says (damaged header)"
    header = _nal_offset(nal[2:], (r.position + 7) // 8)
    data = getattr(nal, "size", len(nal)) - 2 - header
    if n and data <= total:
        return (f"the slice is cut short: {data} bytes of slice data where its {n} entry point(s) say more "
                f"than {total}")
    return None


class _H265:
    #: pictures remembered as decoded (the decoded picture buffer holds at most 16)
    _MAX_REFS = 32
    #: picture order counts remembered to find one repeated (a lost IDR)
    _MAX_POCS = 256

    def __init__(self) -> None:
        self.sps: dict[int, _Sps265] = {}
        self.pps: dict[int, _Pps265] = {}
        self.prev_tid0: Optional[int] = None  # POC of the previous TemporalId-0 picture (8.3.1)
        self.refs: set[int] = set()  # POCs of the pictures the decoder holds for reference
        self.missing: set[int] = set()  # POCs of the coded video sequence's pictures found missing as references
        self.pocs: dict[int, None] = {}  # POCs of the coded video sequence's latest pictures (_MAX_POCS, in order)
        self.started = False
        self.after_eos = False
        self.leading_of_restart = False  # RASL pictures now lead an IRAP that started decoding
        self._pps_id = -1  # of the last slice read
        self.hashed = 0  # pictures in a row that carried a decoded picture hash SEI
        self.hash_kind = ""  # of the last one: md5, crc or checksum
        self.segments: Optional[int] = None  # slice segments of every picture so far (None: none read; 0: they differ)

    def read(self, nals: list[bytes]) -> Picture:
        slices: list[bytes] = []
        hash_nals = []
        sets: Optional[str] = None  # a damaged parameter set: the slices are read with those sent before
        for nal in nals:
            if len(nal) < 2:
                if nal:
                    raise HeaderError("a NAL unit shorter than its header")
                continue
            if nal[0] & 0x80:
                raise HeaderError("a NAL unit with its forbidden bit set")
            t = (nal[0] >> 1) & 0x3F
            layer = ((nal[0] & 1) << 5) | (nal[1] >> 3)
            if nal[1] & 7 == 0:
                raise HeaderError("a NAL unit with TemporalId + 1 = 0")
            if layer != 0:
                continue  # another layer's unit: single-layer decoders ignore it
            if t == 33:
                sets = _store_parameter_set(self.sps, _sps265, _rbsp(nal[2:], 1200), "sequence") or sets
            elif t == 34:
                sets = _store_parameter_set(self.pps, _pps265, _rbsp(nal[2:], _HEAD_BYTES), "picture") or sets
            elif t in (36, 37):  # end of sequence / bitstream: the next IRAP starts decoding afresh
                self.after_eos = True
            elif t == 40:  # suffix SEI: a decoded picture hash, perhaps
                hash_nals.append(nal)
            elif t <= 9 or 16 <= t <= 21:
                slices.append(nal)
            elif 10 <= t <= 15 or 22 <= t <= 31 or 41 <= t <= 47:
                raise HeaderError(f"a NAL unit of reserved type {t}")
        if not slices:
            raise HeaderError(sets or "an access unit without a slice")
        try:
            pic = self._slice(slices[0])
        except HeaderError as e:
            damaged = self._damaged_idr(str(e)) if (slices[0][0] >> 1) & 0x3F in (19, 20) else Picture(damage=str(e))
            # the parser joins the next picture to a damaged first slice segment (it found no picture start
            # before that picture's): the bytes from that picture's first slice segment on are that picture
            damaged.joined_at = next((getattr(nal, "start", None) for nal in slices[1:] if nal[2:3] >= b"\x80"),
                                     None)
            damaged.damage = damaged.damage or sets
            return damaged
        pic.damage = pic.damage or sets
        self._segments(slices, pic)
        if pic.joined_at is not None:
            hash_nals = [nal for nal in hash_nals if getattr(nal, "start", 0) < pic.joined_at]
        active = self.sps.get(self.pps[self._pps_id].sps_id) if self._pps_id in self.pps else None
        if active is not None:
            pic.coded_size = active.size
            for nal in hash_nals:
                try:
                    pic.picture_hash = pic.picture_hash or _sei_picture_hash(
                        _rbsp(nal[2:], _HEAD_BYTES), 1 if active.chroma_format == 0 else 3)
                except HeaderError as e:  # the picture was read (and is a reference): damaged, not unread
                    pic.damage = pic.damage or f"a damaged decoded picture hash SEI ({e})"
        # the chain of references is kept through damage only where every picture's own hash will be checked:
        # not a CRC, nor a cropped picture (its hash covers the samples before cropping: picture_hash_mismatch)
        if pic.picture_hash is not None:
            self.hash_kind = pic.picture_hash[0]
        pic.hashed_stream = self.hashed >= 2 and active is not None and not active.cropped and self.hash_kind != "crc"
        if pic.picture_hash is not None:
            self.hashed += 1
        elif self.hashed >= 2 and pic.damage is None:  # a hash on every picture so far, and none here
            pic.damage = ("the picture's decoded-picture hash SEI is missing, which every picture before it "
                          "carried (the access unit was cut short)")
        else:
            self.hashed = 0
        return pic

    def _new_sequence(self) -> None:
        """A coded video sequence starts (an IRAP that starts decoding): nothing before it is referenced."""
        self._forget_sequence()
        self.started, self.after_eos, self.leading_of_restart = True, False, True

    def _forget_sequence(self) -> None:
        """The pictures of the coded video sequence so far are no references, missing or read."""
        self.refs, self.missing = set(), set()
        self.pocs.clear()

    def _damaged_idr(self, damage: str) -> Picture:
        """An IDR picture whose slice header cannot be read (its NAL unit type can): its picture order count
        is 0 (8.3.1) and a coded video sequence starts here all the same; the pictures after it that
        reference it find it missing (its picture is not one to decode from)."""
        self._new_sequence()
        self.missing, self.pocs[0] = {0}, None  # missing as a reference, yet read: not a lost picture
        self.prev_tid0 = 0
        self.hashed = 0
        return Picture(poc=0, new_sequence=True, random_access=True, damage=damage)

    def _segments(self, slices: list[bytes], pic: Picture) -> None:
        """Check the slice segments after a picture's first (7.3.6.1: the same NAL unit type and picture
        parameter set, addresses inside the picture and increasing). One that is not -- its header zeroed or
        garbled -- is another picture joined to this one by the parser (``pic.joined_at``) when it comes after
        as many segments as every picture before had (one, in most streams); else it is this picture's own
        damage. With tiles, segments follow the tile scan: addresses need not increase in raster order."""
        t = (slices[0][0] >> 1) & 0x3F
        pps = self.pps[self._pps_id]
        ctbs = self.sps[pps.sps_id].ctbs
        last, count = 0, len(slices)
        for n, nal in enumerate(slices[1:], 1):
            other = (nal[0] >> 1) & 0x3F
            try:
                if other != t:
                    raise HeaderError(f"NAL unit type {other} in a picture of type {t}")
                r = _Bits(_rbsp(nal[2:], 16))
                if r.flag():  # the first segment of another picture, intact: not this check's business
                    count = n
                    break
                if 16 <= t <= 23:
                    r.u(1)
                if r.ue(63) != self._pps_id:
                    raise HeaderError("a slice segment names another picture parameter set than its picture's")
                if pps.dependent_slices:
                    r.u(1)
                address = r.u(_ceil_log2(ctbs))
                if not (0 if pps.tiles else last) < address < ctbs:
                    raise HeaderError(f"slice segment address {address} after {last} in a picture of {ctbs} "
                                      "coding tree blocks")
                last = address
            except HeaderError as e:
                if n == self.segments:
                    pic.joined_at = getattr(nal, "start", None)
                    count = n
                    break
                pic.damage = pic.damage or f"slice segment {n + 1} of the picture is damaged ({e})"
                return
        self.segments = count if self.segments in (None, count) else 0

    def _slice(self, nal: bytes) -> Picture:
        t = (nal[0] >> 1) & 0x3F
        tid = (nal[1] & 7) - 1
        irap = 16 <= t <= 23
        idr = t in (19, 20)
        r = _Bits(_rbsp(nal[2:], 600))
        if not r.flag():
            raise HeaderError("the access unit's first slice segment is missing (its picture starts mid-way)")
        if irap:
            r.u(1)
        pps_id = self._pps_id = r.ue(63)
        if pps_id not in self.pps:
            raise HeaderError(f"a slice names picture parameter set {pps_id}, which the stream never sent")
        pps = self.pps[pps_id]
        sps = self.sps.get(pps.sps_id)
        if sps is None:
            raise HeaderError(f"a slice names sequence parameter set {pps.sps_id}, which the stream never sent")
        r.u(pps.extra_bits)
        slice_type = r.ue()
        if slice_type > 2:
            raise HeaderError("a slice type above 2")
        if pps.output_flag:
            r.u(1)
        if sps.separate_colour_plane:
            r.u(2)
        pic = Picture(random_access=irap)
        # NoRaslOutputFlag: IDR, BLA, the first picture, or the first after an end of sequence
        restart = irap and (t <= 20 or not self.started or self.after_eos)
        pic.new_sequence = restart
        curr: list[int] = []
        foll: list[int] = []
        lsb = 0
        if not idr:
            lsb = r.u(sps.log2_max_poc_lsb)
            if r.flag():  # short_term_ref_pic_set_sps_flag
                n = len(sps.rps)
                if n == 0:
                    raise HeaderError("a slice uses an SPS reference picture set, and the SPS has none")
                idx = r.u(_ceil_log2(n)) if n > 1 else 0
                if idx >= n:
                    raise HeaderError("a slice names a reference picture set the SPS does not have")
                neg, pos, used_neg, used_pos = sps.rps[idx]
            else:
                neg, pos, used_neg, used_pos = _st_ref_pic_set(r, len(sps.rps), sps.rps, in_slice=True)
            st = [(d, u) for d, u in zip(neg, used_neg)] + [(d, u) for d, u in zip(pos, used_pos)]
            lt = self._long_term(r, sps) if sps.long_term_present else []
        else:
            st, lt = [], []
        if pps.entry_points and pps.complete:
            used = sum(u for _, u in st) + sum(u for _, u, _ in lt)
            pic.damage = _entry_point_check(r, nal, sps, pps, slice_type, idr, used)
        # picture order count (8.3.1)
        max_lsb = 1 << sps.log2_max_poc_lsb
        if restart or self.prev_tid0 is None:
            msb = 0
        else:
            prev_lsb, prev_msb = self.prev_tid0 % max_lsb, self.prev_tid0 - self.prev_tid0 % max_lsb
            if lsb < prev_lsb and prev_lsb - lsb >= max_lsb // 2:
                msb = prev_msb + max_lsb
            elif lsb > prev_lsb and lsb - prev_lsb > max_lsb // 2:
                msb = prev_msb - max_lsb
            else:
                msb = prev_msb
        poc = msb + lsb
        pic.poc, pic.poc_msb = poc, msb
        if restart:
            self._new_sequence()
        elif poc in self.pocs:
            # a picture order count read before in this coded video sequence (7.4.3.1: each is unique): the IDR
            # or BLA that started a new one was lost, and nothing before it can be referenced
            self._forget_sequence()
        if irap and not restart:
            self.leading_of_restart = False
        rasl = t in (8, 9)
        pic.leading_skipped = rasl and self.leading_of_restart
        for delta, used in st:
            (curr if used else foll).append(poc + delta)
        for lt_poc, used, full in lt:
            if full:
                (curr if used else foll).append(lt_poc)
        if self.started and not pic.leading_skipped and pic.damage is None:
            missing = [p for p in curr if p not in self.refs]
            # long-term pictures named by their POC lsb only: compared modulo MaxPicOrderCntLsb
            missing_lt = [p for p, used, full in lt if used and not full
                          and not any(q % max_lsb == p for q in self.refs)]
            pic.lost_references = len(set(missing) - self.missing)
            self.missing.update(missing)
            if len(self.missing) > self._MAX_REFS:  # a stream that never restarts: the latest are enough
                self.missing = set(sorted(self.missing)[-self._MAX_REFS:])
            if missing or missing_lt:
                pic.damage = (f"a reference picture is missing (POC {', '.join(map(str, missing + missing_lt))} "
                              f"for POC {poc}: lost, or never sent)")
        if not self.started:
            pic.damage = None
        keep = set(curr) | set(foll) | {p for p, _, full in lt if full}
        lt_lsbs = {p for p, _, full in lt if not full}
        self.refs = {p for p in self.refs if p in keep or p % max_lsb in lt_lsbs}
        self.refs.add(poc)
        self.pocs[poc] = None
        if len(self.pocs) > self._MAX_POCS:
            del self.pocs[next(iter(self.pocs))]
        if len(self.refs) > self._MAX_REFS:
            self.refs = set(sorted(self.refs)[-self._MAX_REFS:])
        if tid == 0 and not (6 <= t <= 9) and not _sub_layer_non_reference(t):
            self.prev_tid0 = poc
        return pic

    def _long_term(self, r: _Bits, sps: _Sps265) -> list:
        """Long-term entries ``(poc or poc lsb, used by the current picture, full POC known)``."""
        n_sps = r.ue(32) if sps.lt_sps else 0
        n_pics = r.ue(32)
        out = []
        for i in range(n_sps + n_pics):
            if i < n_sps:
                idx = r.u(_ceil_log2(len(sps.lt_sps))) if len(sps.lt_sps) > 1 else 0
                if idx >= len(sps.lt_sps):
                    raise HeaderError("a slice names a long-term picture the SPS does not have")
                lsb, used = sps.lt_sps[idx]
            else:
                lsb, used = r.u(sps.log2_max_poc_lsb), r.flag()
            if r.flag():  # delta_poc_msb_present_flag (its cycle is not used: compared by lsb)
                r.ue()
            out.append((lsb, used, False))
        return out


class StreamHeaders:
    """The headers of one stream, read access unit by access unit in decode order.

    Args:
        codec: ``h264`` or ``h265``.
    """

    def __init__(self, codec: str):
        if codec not in ("h264", "h265"):
            raise ConfigError(f"codec must be h264 or h265, got {codec!r}")
        self.codec = codec
        self._reader: _H264 | _H265 = _H264() if codec == "h264" else _H265()

    def read(self, au: bytes) -> Picture:
        """What the headers of access unit ``au`` (Annex B) say; a header that cannot be read gives a
        :class:`Picture` with ``poc`` None and ``damage`` naming the problem."""
        try:
            return self._reader.read(split_nal_units(au))
        except HeaderError as e:
            return Picture(damage=str(e))

    def lost(self) -> None:
        """Units were lost here: references are unknown until the next random-access point."""
        self._reader.started = False


def picture_hash_mismatch(picture, expected: tuple[str, list], coded_size: Optional[tuple[int, int]]) -> Optional[str]:
    """Compare a decoded picture (PyAV ``VideoFrame``, planar YUV) with its H.265 decoded picture hash
    (H.265 D.3.19: MD5 or checksum of each colour component's samples, row by row, one byte per
    sample up to 8 bits, two little-endian bytes above). Returns the mismatch in words, or None when
    it matches or cannot be checked (a cropped picture: the hash covers the samples before cropping; a CRC)."""
    import hashlib

    import numpy as np

    if coded_size is not None and (picture.height, picture.width) != coded_size:
        return None
    kind, values = expected
    planes = picture.planes
    if kind == "crc":  # the CRC variant is not checked (libx265's chroma CRCs did not match our reading of D.3.19)
        return None
    if len(planes) < len(values):
        return None
    for c, (plane, want) in enumerate(zip(planes, values)):
        h, w = plane.height, plane.width
        wide = picture.format.components[0].bits > 8 if picture.format.components else False
        row = w * (2 if wide else 1)
        data = np.frombuffer(plane, np.uint8).reshape(h, plane.line_size)[:, :row]
        if kind == "md5":
            got: object = hashlib.md5(np.ascontiguousarray(data).tobytes()).digest()
        else:
            samples = data.view("<u2").astype(np.int64) if wide else data.astype(np.int64)
            y, x = np.mgrid[0:h, 0:w]
            mask = (x & 0xFF) ^ (y & 0xFF) ^ (x >> 8) ^ (y >> 8)
            total = int(((samples & 0xFF) ^ mask).sum())
            if wide:
                total += int(((samples >> 8) ^ mask).sum())
            got = total & 0xFFFFFFFF
        if got != want:
            return (f"the decoded picture does not match its decoded-picture hash SEI ({kind} of colour "
                    f"component {c}): it was decoded from damaged data")
    return None


# ------------------------------------------------------------------------------------- stream format
_PROFILES_264 = {66: "baseline", 77: "main", 88: "extended", 100: "high", 110: "high10", 122: "high422",
                 244: "high444", 44: "cavlc444"}
_PROFILES_265 = {1: "main", 2: "main10", 3: "mainstillpicture", 4: "rext", 5: "highthroughput", 9: "scc"}
_CHROMA = {0: "400", 1: "420", 2: "422", 3: "444"}


@dataclass(frozen=True)
class StreamFormat:
    """What a stream's sequence parameter set says a decoder must support.

    Attributes:
        profile: ``baseline``, ``main``, ``high``, ``high10``... (H.264 profile_idc, A.2), ``main``, ``main10``,
            ``rext``... (H.265 general_profile_idc, A.3), or ``profile_idc N`` for another.
        level: the level number (H.264 level_idc / 10, level 1b as 1.0; H.265 general_level_idc / 30).
        bit_depth: luma bits per sample.
        chroma: ``420``, ``422``, ``444`` or ``400`` (chroma_format_idc).
        interlaced: H.264 pictures may be fields (frame_mbs_only_flag 0); False for H.265 (signalled elsewhere).
    """

    profile: str
    level: float
    bit_depth: int
    chroma: str
    interlaced: bool = False

    def check_extras(self) -> dict:
        """The keyword arguments :func:`dvpipe.knowledge.check` takes for these properties."""
        return {"profile": self.profile, "level": self.level, "bit_depth": self.bit_depth, "chroma": self.chroma,
                "interlaced": self.interlaced}


def stream_format(au: bytes, codec: str) -> Optional[StreamFormat]:
    """The format the first sequence parameter set in Annex B access unit ``au`` declares (H.264 7.3.2.1.1,
    H.265 7.3.2.2), or None when the unit has none or it cannot be read."""
    for nal in split_nal_units(au):
        try:
            if codec == "h264" and nal and nal[0] & 0x1F == 7:
                return _format264(_rbsp(nal[1:], 600))
            if codec == "h265" and len(nal) > 2 and (nal[0] >> 1) & 0x3F == 33:
                return _format265(_rbsp(nal[2:], _HEAD_BYTES))
        except HeaderError:
            return None
    return None


def _format264(rbsp: bytes) -> StreamFormat:
    _, sps = _sps264(rbsp)
    profile, constraints, level_idc = rbsp[0], rbsp[1], rbsp[2]  # byte-aligned, as _sps264 read them
    one_b = level_idc == 9 or (level_idc == 11 and constraints & 0x10 and profile in (66, 77, 88))  # A.3.1
    return StreamFormat(_PROFILES_264.get(profile, f"profile_idc {profile}"), 1.0 if one_b else level_idc / 10,
                        sps.bit_depth_luma, _CHROMA[sps.chroma_format_idc], not sps.frame_mbs_only)


def _format265(rbsp: bytes) -> StreamFormat:
    if len(rbsp) < 13:
        raise HeaderError("an SPS shorter than its profile_tier_level")
    profile, level_idc = rbsp[1] & 0x1F, rbsp[12]  # byte-aligned: general_profile_idc, general_level_idc
    _, sps = _sps265(rbsp)
    return StreamFormat(_PROFILES_265.get(profile, f"profile_idc {profile}"), level_idc / 30, sps.bit_depth,
                        _CHROMA[sps.chroma_format])
