"""Elementary streams carry no timestamps: a picture's capture time is its place in presentation order
(``start_ns + k / fps``), read from its slice headers. References: H.264 access units whose headers are
written here bit by bit from the standard's syntax (7.3.2.1 SPS, 7.3.2.2 PPS, 7.3.3 slice header), and
the places that syntax gives by hand."""
from __future__ import annotations

from dvpipe.deploy.sources.video import ElementaryStream
from dvpipe.video import VideoPacket

from .test_h265_damage import _BitWriter
from .test_structures import media


def _nal(header: int, w: _BitWriter) -> bytes:
    return media.annexb_nal(header, w.rbsp())


def _se(w: _BitWriter, v: int) -> None:
    w.ue(2 * v - 1 if v > 0 else -2 * v)


def _parameter_sets() -> bytes:
    sps = _BitWriter()
    sps.u(8, 66), sps.u(16, 0x001E)  # Baseline, level 3.0
    sps.ue(0), sps.ue(0), sps.ue(2)  # sps id, log2_max_frame_num 4, pic_order_cnt_type 2
    sps.ue(1), sps.u(1, 0), sps.ue(3), sps.ue(3)  # one reference frame, no gaps allowed, 64x64
    sps.u(1, 1), sps.u(1, 1), sps.u(1, 0), sps.u(1, 0)  # frame_mbs_only, direct_8x8, no cropping, no VUI
    pps = _BitWriter()
    pps.ue(0), pps.ue(0), pps.u(1, 0), pps.u(1, 0), pps.ue(0), pps.ue(0), pps.ue(0), pps.u(1, 0), pps.u(2, 0)
    _se(pps, 0), _se(pps, 0), _se(pps, 0), pps.u(1, 0), pps.u(1, 0), pps.u(1, 0)
    return _nal(0x67, sps) + _nal(0x68, pps)


def _slice(idr: bool, frame_num: int, reference: bool) -> bytes:
    w = _BitWriter()
    w.ue(0), w.ue(7 if idr else 5), w.ue(0), w.u(4, frame_num)  # first_mb, I or P slice, pps id, frame_num
    if idr:
        w.ue(0), w.u(1, 0), w.u(1, 0)  # idr_pic_id; dec_ref_pic_marking: no_output_of_prior_pics, long_term
    else:
        w.u(1, 0), w.u(1, 0)  # num_ref_idx_active_override, ref_pic_list_modification_flag_l0
        if reference:
            w.u(1, 0)  # adaptive_ref_pic_marking_mode_flag
    _se(w, 0)  # slice_qp_delta
    return _nal(0x65 if idr else (0x41 if reference else 0x01), w)


def _layered_stream(pictures: int) -> list[bytes]:
    """An IDR, then temporal layering as cameras encode it: reference, reference, non-reference, ... A
    non-reference picture does not advance frame_num (7.4.3), so POC type 2 (8.2.1.3) steps 2, 1, 1, 2, ..."""
    units, prev_ref = [_parameter_sets() + _slice(True, 0, True)], 0
    for k in range(1, pictures):
        reference = k % 3 != 2
        frame_num = (prev_ref + 1) % 16
        units.append(_slice(False, frame_num, reference))
        if reference:
            prev_ref = frame_num
    return units


def _capture_periods(units: list[bytes]) -> list[float]:
    es = ElementaryStream.__new__(ElementaryStream)  # the state _open() sets, without a file
    es.options = {"fps": 10.0, "start_ns": 0, "codec": "h264"}
    es._start_places()
    keys = [es._place_key(es._headers.read(u)) for u in units]
    return [es._capture_epoch_ns(VideoPacket([], key, "pts"), 0) / 1e8 for key in keys]


def test_poc_type_2_with_non_reference_pictures_gives_one_frame_period_per_picture():
    # the POC steps are 2 and 1 in turn, yet each picture is the next frame (output order is decode order)
    assert _capture_periods(_layered_stream(9)) == [0, 1, 2, 3, 4, 5, 6, 7, 8]


def test_poc_type_2_leaves_the_place_of_a_lost_reference_picture_empty():
    units = _layered_stream(9)
    del units[4]  # a reference picture (frame_num 3): the next one's frame_num 4 shows the gap
    assert _capture_periods(units) == [0, 1, 2, 3, 5, 6, 7, 8]
