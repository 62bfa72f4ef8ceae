"""The software DVPP device: it refuses what the documentation refuses, with the API's return code, applies
the documented silent effects, and writes the real layouts (strided NV12 with a sentinel in the padding).

Each case cites constraints.md (../shared/reference/dvpp/constraints.md).
"""
from __future__ import annotations

import numpy as np
import pytest

import dvpipe as dv
from dvpipe.backends.dvpp import _acl
from dvpipe.backends.dvpp._enums import PIXEL_FORMAT
from dvpipe.backends.dvpp.colour import SENTINEL, nv12_planes, nv12_to_bgr
from dvpipe.backends.dvpp.sim import SimAcl
from dvpipe.testing.dvpp import encode_jpeg, error_stats, synthetic_bgr
from tolerances import tol

from ._sim_device import NV12, nv12_picture, sim_runtime

T310 = dv.Target("Ascend310", "6.0.1")
T310P = dv.Target("Ascend310P3", "7.0.0")
TA2 = dv.Target("Ascend910B3", "8.0.0")
TA3 = dv.Target("Ascend910_9391", "8.1.RC1")


def _session(rt):
    return rt.create_channel(), rt.create_stream()


def _jpeg_to_device(rt, data):
    ptr = rt.malloc(len(data))
    rt.upload(ptr, len(data), data)
    return ptr


def _decode(rt, data, w, h, ws, hs, sync=True):
    chan, stream = _session(rt)
    src = _jpeg_to_device(rt, data)
    size = ws * hs * 3 // 2
    out = rt.malloc(size)
    desc = rt.pic_desc(out, size, NV12, w, h, ws, hs)
    rt.jpeg_decode(chan, src, len(data), desc, stream)
    if sync:
        rt.synchronize(stream)
    return desc, out, size, stream


@pytest.fixture(scope="module")
def kitti_jpeg():
    img = synthetic_bgr(1242, 375, seed=3)
    return img, encode_jpeg(img)


def test_progressive_jpeg_is_refused_with_unsupported_jpeg(kitti_jpeg):
    # §1.1: no progressive JPEG; the documented code of acldvppJpegGetImageInfo is ACL_ERROR_UNSUPPORTED_JPEG
    rt = sim_runtime(T310)
    prog = encode_jpeg(kitti_jpeg[0], progressive=True)
    with pytest.raises(_acl.UnsupportedJpeg) as ei:
        rt.jpeg_info(prog)
    assert ei.value.ret == 148052 and "jpeg-progressive" in str(ei.value) and "jpegd.bitstream" in str(ei.value)
    assert rt.jpeg_info(kitti_jpeg[1]) == (1242, 375, 3)


def _patch_sof(data: bytes, marker=None, factors=()) -> bytes:
    """The JPEG with its frame header's marker (SOFn) or its components' sampling factors (Hi << 4 | Vi) changed:
    a device judges the header alone."""
    d, i = bytearray(data), 2
    while not (0xC0 <= d[i + 1] <= 0xCF and d[i + 1] not in (0xC4, 0xC8, 0xCC)):
        i += 2 + int.from_bytes(d[i + 2:i + 4], "big")
    if marker is not None:
        d[i + 1] = marker
    for c, f in enumerate(factors):
        d[i + 11 + 3 * c] = f
    return bytes(d)


def _pil_jpeg(**options) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(synthetic_bgr(640, 480, seed=1)[..., ::-1]).save(buf, "JPEG", quality=90, **options)
    return buf.getvalue()


def test_jpeg_outside_jpegds_formats_is_refused_with_unsupported_jpeg():
    """§1.1 (aclcppdevg_03_0168): Huffman-coded, YUV colour space, 4:4:4/4:2:2/4:2:0/4:0:0/4:4:0. An RGB-stored
    JPEG (Pillow keep_rgb: Adobe transform 0; FFmpeg decodes it to gbrp, planar RGB), sampling factors no listed
    subsampling has (Y 4x2 over chroma 1x1: 4:1:0), and a hierarchical frame (SOF6, T.81 Table B.1: differential
    progressive) are refused, as progressive is."""
    import io

    from PIL import Image

    av = pytest.importorskip("av")
    rgb = _pil_jpeg(keep_rgb=True, subsampling=0)
    if Image.open(io.BytesIO(rgb)).info.get("adobe_transform") != 0:  # Pillow ignores options it does not know
        pytest.skip("this Pillow cannot write an RGB JPEG (keep_rgb)")
    with av.open(io.BytesIO(rgb), format="mjpeg") as c:
        assert next(c.decode(video=0)).format.name == "gbrp"  # an independent reading: stored as RGB
    rt = sim_runtime(T310P)
    cases = {"jpeg-rgb": rgb, "jpeg-sampling-other": _patch_sof(_pil_jpeg(subsampling=2), factors=(0x42, 0x11, 0x11)),
             "jpeg-hierarchical": _patch_sof(_pil_jpeg(subsampling=2), marker=0xC6)}
    for name, data in cases.items():
        with pytest.raises(_acl.UnsupportedJpeg) as ei:
            rt.jpeg_info(data)
        assert ei.value.ret == 148052 and name in str(ei.value), name
    assert rt.jpeg_info(_pil_jpeg(subsampling=0)) == (640, 480, 3)  # the same picture in YCbCr 4:4:4 (JFIF)


def test_jpegd_floors_odd_height_and_pads_with_the_sentinel(kitti_jpeg):
    # §1.3: YUV420SP output floors odd sizes (read the real size back); §1.4: 310 strides A(w,128) x A(h,16)
    img, data = kitti_jpeg
    rt = sim_runtime(T310)
    desc, out, size, _ = _decode(rt, data, 1242, 374, 1280, 384)
    w, h, ws, hs, ret = rt.pic_info(desc)
    assert (w, h, ws, hs, ret) == (1242, 374, 1280, 384, 0)
    raw = rt.download(out, size)
    yfull = raw[:ws * hs].reshape(hs, ws)
    assert np.all(yfull[:, 1242:] == SENTINEL) and np.all(yfull[374:, :] == SENTINEL)
    cfull = raw[ws * hs:].reshape(hs // 2, ws)
    assert np.all(cfull[:, 1242:] == SENTINEL) and np.all(cfull[187:, :] == SENTINEL)
    y, uv = nv12_planes(raw, w, h, ws, hs)
    bgr = nv12_to_bgr(y, uv, "full")
    import cv2

    ref = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[:374]
    assert error_stats(bgr, ref)["mean_abs"] < 1.0


def _up(x: int, n: int) -> int:
    """x rounded up to a multiple of n (Huawei's samples: ALIGN_UP)."""
    return -(-x // n) * n


@pytest.mark.parametrize("target, wa", [(T310, 128), (T310P, 64)])
@pytest.mark.parametrize("w, h", [(1281, 721), (1281, 720), (1279, 721)])
def test_jpegd_refuses_an_odd_size_whose_two_stride_readings_differ(target, wa, w, h):
    """§1.3/§1.4 do not say whether the output stride of an odd-size JPEG aligns the floored size or the source size
    (Huawei's samples: ALIGN_UP128(width) / ALIGN_UP16(height) of the source on 310, 64 on 310P). Where the two
    readings differ the software device refuses the decode with ACL_ERROR_INVALID_PARAM, whichever stride is set."""
    source, floored = (_up(w, wa), _up(h, 16)), (_up(w // 2 * 2, wa), _up(h // 2 * 2, 16))
    assert source != floored  # the case under test, by hand
    data = encode_jpeg(synthetic_bgr(w, h, seed=1))
    for ws, hs in (source, floored):
        rt = sim_runtime(target)
        with pytest.raises(_acl.InvalidParam) as ei:
            _decode(rt, data, w // 2 * 2, h // 2 * 2, ws, hs)
        assert ei.value.ret == 100000 and "does not say" in str(ei.value), str(ei.value)


@pytest.mark.parametrize("target, wa", [(T310, 128), (T310P, 64)])
def test_jpegd_odd_size_whose_readings_agree_decodes_at_that_stride(target, wa):
    """1279x719: aligning 1279x719 or the floored 1278x718 gives the same 1280x720 stride (by hand); the decode
    runs, the descriptor reads back the floored size (§1.3) and that stride; the predicted buffer is 1280*720*3/2."""
    w, h = 1279, 719
    assert (_up(w, wa), _up(h, 16)) == (_up(w - 1, wa), _up(h - 1, 16)) == (1280, 720)
    data = encode_jpeg(synthetic_bgr(w, h, seed=2))
    rt = sim_runtime(target)
    assert rt.jpeg_predict_size(data, NV12) == 1280 * 720 * 3 // 2
    desc, _out, _size, _ = _decode(rt, data, 1278, 718, 1280, 720)
    assert rt.pic_info(desc) == (1278, 718, 1280, 720, 0)


def test_jpegd_output_stride_follows_the_product_table(kitti_jpeg):
    # §1.4: 310/910 need A(w,128); 310P/310B/A2 need A(w,64). 1242 -> 1280 either way; 1600-wide shows it.
    data = encode_jpeg(synthetic_bgr(1600, 900))
    for target, ws, ok in ((T310, 1600, False), (T310P, 1600, True), (TA2, 1600, True), (T310, 1664, True)):
        rt = sim_runtime(target)
        if ok:
            desc, *_ = _decode(rt, data, 1600, 900, ws, 912)
            assert rt.pic_info(desc)[:2] == (1600, 900)
        else:
            with pytest.raises(_acl.InvalidParam, match=r"jpegd\.v1\.stride\.128.*width stride is 1664"):
                _decode(rt, data, 1600, 900, ws, 912)
    with pytest.raises(_acl.InvalidParam, match="height stride"):
        _decode(sim_runtime(T310P), data, 1600, 900, 1600, 900)  # hs must be A(h,16) = 912


def test_undocumented_combination_is_refused_not_guessed():
    # §8 / families: Atlas A3 JPEGD is not documented at CANN 8.1.RC1 -> unknown -> the software device refuses
    data = encode_jpeg(synthetic_bgr(640, 480))
    rt = sim_runtime(TA3)
    with pytest.raises(_acl.FeatureUnsupported) as ei:
        _decode(rt, data, 640, 480, 640, 480)
    assert ei.value.ret == 200006 and "A3" in str(ei.value)
    lenient = sim_runtime(TA3, strict_unknown=False)
    desc, *_ = _decode(lenient, data, 640, 480, 640, 480)  # strict_unknown=False: accepted as if it worked
    assert lenient.pic_info(desc)[:2] == (640, 480)


def test_accepting_the_undocumented_still_checks_what_every_reading_documents():
    """With its refusal of unknowns off (how live verification is driven) the software device still takes the
    stricter reading: every documented JPEGD rule (constraints.md §1.4) wants a height stride of A(h,16) (900 -> 912)
    and an output buffer of DVPP memory (acl.media.dvpp_malloc); on Atlas A3, whose layout the docs leave open,
    both were accepted (a live check could pass a layout no reading allows)."""
    data = encode_jpeg(synthetic_bgr(1600, 900))
    for target in (TA2, TA3):
        strict_or_not = sim_runtime(target, strict_unknown=False)
        with pytest.raises(_acl.InvalidParam, match="height stride"):
            _decode(strict_or_not, data, 1600, 900, 1600, 900)
        chan, stream = _session(strict_or_not)
        src = _jpeg_to_device(strict_or_not, data)
        size = 1600 * 912 * 3 // 2
        host = strict_or_not.call("acl.rt.malloc_host", size)
        desc = strict_or_not.pic_desc(host, size, NV12, 1600, 900, 1600, 912)
        with pytest.raises(_acl.InvalidParam, match="DVPP memory"):
            strict_or_not.jpeg_decode(chan, src, len(data), desc, stream)
            strict_or_not.synchronize(stream)
        desc, *_ = _decode(strict_or_not, data, 1600, 900, 1600, 912)  # the documented layout decodes
        assert strict_or_not.pic_info(desc)[:2] == (1600, 900)


def test_async_work_runs_at_stream_sync(kitti_jpeg):
    rt = sim_runtime(T310)
    desc, out, size, stream = _decode(rt, kitti_jpeg[1], 1242, 374, 1280, 384, sync=False)
    before = rt.download(out, size)
    assert np.all(before == 0xCD)  # fresh DVPP memory: nothing written before the sync
    rt.synchronize(stream)
    assert not np.all(rt.download(out, size) == 0xCD)


def _vpc_out(rt, fmt, w, h, ws, hs):
    size = ws * hs * 3 // 2 if fmt == "nv12" else ws * hs
    ptr = rt.malloc(size)
    return rt.pic_desc(ptr, size, PIXEL_FORMAT[fmt], w, h, ws, hs), ptr, size


def test_vpc_rejects_odd_nv12_output_on_310():
    # §2.3 (310/910 v1 output: NV12 only, even width and height)
    rt = sim_runtime(T310)
    chan, stream = _session(rt)
    src, _ = nv12_picture(rt, 1242, 374, 1248, 374)
    cfg = rt.resize_config()
    dst, *_ = _vpc_out(rt, "nv12", 621, 187, 624, 188)
    with pytest.raises(_acl.InvalidParam, match=r"output width 621 must be even.*vpc\.v1\.out_stride\.310_910"):
        rt.vpc_resize(chan, src, dst, cfg, stream)
    dst, ptr, size = _vpc_out(rt, "nv12", 620, 186, 624, 186)
    rt.vpc_resize(chan, src, dst, cfg, stream)
    rt.synchronize(stream)
    raw = rt.download(ptr, size).reshape(-1)
    assert np.all(raw[:624 * 186].reshape(186, 624)[:, 620:] == SENTINEL)


def test_vpc_floors_odd_input_silently_on_310_but_refuses_on_310p():
    # §2.2: "If the input width or height is odd, VPC on 310/910 silently floors it"; 310P: h2 for NV12
    for target, ok in ((T310, True), (T310P, False)):
        rt = sim_runtime(target)
        chan, stream = _session(rt)
        src, _ = nv12_picture(rt, 1242, 375, 1248, 376)
        dst, *_ = _vpc_out(rt, "nv12", 620, 186, 624, 186)
        if ok:
            rt.vpc_resize(chan, src, dst, rt.resize_config(), stream)
            rt.synchronize(stream)
        else:
            with pytest.raises(_acl.InvalidParam, match="input height 375 must be even"):
                rt.vpc_resize(chan, src, dst, rt.resize_config(), stream)


def test_vpc_bgr_output_and_colour_conversion_per_product():
    # §2.3: 310/910 VPC writes NV12/NV21 only; 310P adds RGB888/BGR888; acldvppVpcConvertColorAsync is not
    # supported on Atlas 200/300/500 (pyACL reference)
    for target, ok in ((T310, False), (T310P, True)):
        rt = sim_runtime(target)
        chan, stream = _session(rt)
        src, _ = nv12_picture(rt, 640, 480, 640, 480)
        dst, ptr, size = _vpc_out(rt, "bgr888", 320, 240, 960, 240)
        if ok:
            rt.vpc_resize(chan, src, dst, rt.resize_config(), stream)
            rt.synchronize(stream)
            assert rt.pic_info(dst)[4] == 0
        else:
            with pytest.raises(_acl.InvalidParam, match="bgr888 is not supported"):
                rt.vpc_resize(chan, src, dst, rt.resize_config(), stream)
            csc, *_ = _vpc_out(rt, "bgr888", 640, 480, 1920, 480)
            with pytest.raises(_acl.ApiNotSupport):
                rt.vpc_convert_color(chan, src, csc, stream)


def test_vpc_crop_box_parity_on_310_only():
    # §2.4: 310/910 crop left/top even, right/bottom odd; 310P no parity rule
    for target, ok in ((T310, False), (T310P, True)):
        rt = sim_runtime(target)
        chan, stream = _session(rt)
        src, _ = nv12_picture(rt, 640, 480, 640, 480)
        dst, *_ = _vpc_out(rt, "nv12", 320, 240, 320, 240)
        roi = rt.roi(1, 0, 320, 239)  # left 1 (odd), right 320 (even)
        if ok:
            rt.vpc_crop_resize(chan, src, dst, roi, rt.resize_config(), stream)
            rt.synchronize(stream)
        else:
            with pytest.raises(_acl.InvalidParam, match="crop left 1 must be even"):
                rt.vpc_crop_resize(chan, src, dst, roi, rt.resize_config(), stream)


def test_vpc_crop_resize_paste_writes_into_the_canvas_only():
    # §2.4: paste left offset 16-aligned on 310
    rt = sim_runtime(T310)
    chan, stream = _session(rt)
    src, _ = nv12_picture(rt, 640, 480, 640, 480)
    canvas, ptr, size = _vpc_out(rt, "nv12", 640, 480, 640, 480)
    rt.upload(ptr, size, bytes(size))  # a black canvas
    crop, paste = rt.roi(0, 0, 639, 479), rt.roi(8, 8, 327, 247)
    with pytest.raises(_acl.InvalidParam, match="paste left 8 must be a multiple of 16"):
        rt.vpc_crop_resize_paste(chan, src, canvas, crop, paste, rt.resize_config(), stream)
    paste = rt.roi(16, 8, 335, 247)
    rt.vpc_crop_resize_paste(chan, src, canvas, crop, paste, rt.resize_config(), stream)
    rt.synchronize(stream)
    y = rt.download(ptr, size)[:640 * 480].reshape(480, 640)
    assert np.all(y[:8] == 0) and np.all(y[:, :16] == 0) and np.all(y[248:] == 0)
    assert y[8:248, 16:336].std() > 10


def test_descriptor_buffer_must_be_dvpp_memory():
    rt = sim_runtime(T310)
    chan, stream = _session(rt)
    data = encode_jpeg(synthetic_bgr(64, 64))
    host = rt.call("acl.util.bytes_to_ptr", data)
    out = rt.malloc(128 * 64 * 3 // 2)
    desc = rt.pic_desc(out, 128 * 64 * 3 // 2, NV12, 64, 64, 128, 64)
    with pytest.raises(_acl.InvalidParam, match="DVPP memory"):
        rt.jpeg_decode(chan, host, len(data), desc, stream)


# ------------------------------------------------------------------ issue 13: points 4, 5 and 9 (JPEGD, VPC)

def _nv12_src(rt, w, h, seed=1):
    """A w x h NV12 picture in DVPP memory (stride A(w,16) x A(h,2), the 310/910 VPC input rule)."""
    from dvpipe.backends.dvpp.colour import bgr_to_nv12_planes, write_nv12

    ws, hs = -(-w // 16) * 16, -(-h // 2) * 2
    y, uv = bgr_to_nv12_planes(synthetic_bgr(w, h, seed=seed), "full")
    size = ws * hs * 3 // 2
    ptr = rt.malloc(size)
    buf = np.zeros(size, np.uint8)
    write_nv12(buf, y, uv, ws, hs)
    rt.upload(ptr, size, buf.tobytes())
    return rt.pic_desc(ptr, size, NV12, w, h, ws, hs), y, uv


def _resized_y(rt, target_interp, src_desc, ow, oh):
    chan, stream = _session(rt)
    ws, hs = -(-ow // 16) * 16, -(-oh // 2) * 2
    size = ws * hs * 3 // 2
    ptr = rt.malloc(size)
    dst = rt.pic_desc(ptr, size, NV12, ow, oh, ws, hs)
    cfg = rt.resize_config(target_interp)
    rt.vpc_resize(chan, src_desc, dst, cfg, stream)
    rt.synchronize(stream)
    y, _uv = nv12_planes(rt.download(ptr, size), ow, oh, ws, hs)
    return np.asarray(y, np.int16)


def test_resize_filter_default_on_310_is_not_bilinear_and_the_backend_sets_bilinear():
    """aclcppdevg_03_0820 (CANN 6.0.1): interpolation 0 (default) is Huawei's own high-order filter on
    Atlas 200/300/500 and Atlas training products; 1 is bilinear (OpenCV-like); on Atlas inference (310P)
    0 means 1. Reference: OpenCV INTER_LINEAR on the luma plane (the formula the docs compare with)."""
    import cv2

    for target, default_is_bilinear in ((T310, False), (T310P, True)):
        rt = sim_runtime(target)
        src, y, _uv = _nv12_src(rt, 320, 240)
        want = cv2.resize(np.ascontiguousarray(y), (200, 150), interpolation=cv2.INTER_LINEAR).astype(np.int16)
        assert np.abs(_resized_y(rt, 1, src, 200, 150) - want).max() <= tol("vpc_bilinear_luma").atol
        default = _resized_y(rt, None, src, 200, 150)
        assert bool(np.abs(default - want).max() <= tol("vpc_bilinear_luma").atol) is default_is_bilinear
    # the backend's step sets 1 explicitly on every target (so 310/910 run bilinear, not the default)
    from dvpipe.backends.dvpp import step_state
    from dvpipe.backends.dvpp.vpc import RESIZE_INTERPOLATION

    rig = dv.Rig((dv.Camera("C", width=640, height=480, encoding="jpeg"),))
    with dv.Pipeline(rig, [dv.Decode(), dv.Resize(scale=0.5)], backends=("dvpp-sim", "cpu"), target=T310,
                     fidelity="fast") as pipe:
        b = pipe.process({"C": encode_jpeg(synthetic_bgr(640, 480))})
        assert b.valid.all() and not b.fallbacks
        st = next(s["dvpp"] for s in pipe._states.values() if "dvpp" in s)
        assert RESIZE_INTERPOLATION == 1
        assert st.runtime.acl.media.dvpp_get_resize_config_interpolation(st.resize_cfg) == 1
    del step_state


def test_creators_return_0_on_failure_and_the_runtime_raises_under_their_name():
    """aclpythondevg_01_0244 (CANN 8.0.0, dvpp_create_pic_desc): 'non-0 success, 0 failure'. The software
    device's creators return 0 before acl.init and for a unit with an injected fault; the backend raises at
    the creator, naming it, instead of failing later in another API."""
    from dvpipe.backends.dvpp import sim

    bare = SimAcl(T310)
    assert bare.media.dvpp_create_pic_desc() == 0 and bare.media.dvpp_create_stream_desc() == 0
    rt = sim_runtime(T310)
    assert rt.call("acl.media.dvpp_create_pic_desc") != 0
    with sim.faults("vdec"):
        assert rt.acl.media.vdec_create_channel_desc() == 0
        with pytest.raises(_acl.AclError, match=r"acl\.media\.vdec_create_channel_desc .*returned 500001"):
            rt.call("acl.media.vdec_create_channel_desc")
    rt.close()


@pytest.mark.parametrize("ws, hs", [(1280 + 128, 384), (1280, 384 + 16)])
def test_jpegd_stride_is_exactly_the_documented_one(kitti_jpeg, ws, hs):
    """aclpythondevg_01_0321 (CANN 8.0.0, table 2): on Atlas 200/300/500 the JPEGD output width stride *is*
    align(w, 128) and the height stride align(h, 16): 1242x374 -> 1280x384 and nothing else."""
    rt = sim_runtime(T310)
    with pytest.raises(_acl.InvalidParam, match="exactly"):
        _decode(rt, kitti_jpeg[1], 1242, 374, ws, hs)
    desc, *_ = _decode(rt, kitti_jpeg[1], 1242, 374, 1280, 384)
    assert rt.pic_info(desc)[:2] == (1242, 374)
    rt.close()
