"""Documented limits at their boundaries on the software DVPP device: the VPC stride maximum, the acldvpp VPC output
maximum before CANN 9.0.0, the paste box minimum and AIPP's padded width. Each case is written from the page, with
the boundary values by hand (constraints.md: ../shared/reference/dvpp/constraints.md).
"""
from __future__ import annotations

import gc

import pytest

import dvpipe as dv
from dvpipe.backends.dvpp import _acl
from dvpipe.backends.dvpp.aipp import AippConfig
from dvpipe.errors import ConfigError
from dvpipe.knowledge import check, stride_for

from ._sim_device import nv12_picture, sim_runtime

T310 = dv.Target("Ascend310", "6.0.1")
T310P = dv.Target("Ascend310P3", "8.0.0")
T310B = dv.Target("Ascend310B1", "8.5.0")
TA2 = dv.Target("Ascend910B3", "8.5.0")


@pytest.fixture(autouse=True)
def _collect_devices():
    """Each test opens software devices of its own; a refusal's traceback keeps one alive in a reference cycle.
    Collect them, so the process-wide ledger (dvpipe.backends.dvpp.sim.ledger) later tests read holds none."""
    yield
    gc.collect()


def _resize(rt, in_size, in_stride, out_size, out_stride):
    """VPC resize of an NV12 picture with the strides the caller sets; raises what the device returns."""
    chan, stream = rt.create_channel(), rt.create_stream()
    src = nv12_picture(rt, *in_size, *in_stride)[0]
    dst = nv12_picture(rt, *out_size, *out_stride, seed=1)[0]
    rt.vpc_resize(chan, src, dst, rt.resize_config(), stream)
    rt.synchronize(stream)
    return rt.pic_info(dst)


# ------------------------------------------------------------------ §2.2: width stride 32..16384, height 6..16384

def test_vpc_input_stride_maximum_16384_on_310_310p_and_open_on_310b_acldvpp():
    # widthStride 32..16384, heightStride 6..16384: 310/910 CANN 6.0.1 en aclcppdevg_03_0168, 310P 6.0.1
    # aclcppdevg_03_0232. 310B's 16384 is the hi_mpi page's (6.2.RC2 aclpythondevg_02_0409): for acldvpp, whose
    # 9.0.0 ranges take an 8192-wide RGB888 input (24576 bytes), above it is open -- refused as undocumented
    rules = {T310: "vpc.v1.stride.310_910", T310P: "vpc.stride.310p"}
    for target, rule in rules.items():
        assert _resize(sim_runtime(target), (640, 480), (16384, 480), (320, 240), (320, 240))[:2] == (320, 240)
        assert _resize(sim_runtime(target), (640, 480), (640, 16384), (320, 240), (320, 240))[:2] == (320, 240)
        with pytest.raises(_acl.InvalidParam, match=f"width stride 16400 bytes exceeds the maximum 16384 .*{rule}"):
            _resize(sim_runtime(target), (640, 480), (16400, 480), (320, 240), (320, 240))
        with pytest.raises(_acl.InvalidParam, match=f"height stride 16386 rows exceeds the maximum 16384 .*{rule}"):
            _resize(sim_runtime(target), (640, 480), (640, 16386), (320, 240), (320, 240))
    assert _resize(sim_runtime(T310B), (640, 480), (16384, 480), (320, 240), (320, 240))[:2] == (320, 240)
    with pytest.raises(_acl.FeatureUnsupported, match="16400 bytes is above 16384.*vpc.stride.310b.acldvpp"):
        _resize(sim_runtime(T310B), (640, 480), (16400, 480), (320, 240), (320, 240))
    v = check("Ascend310B1", "9.0.0", "vpc", "resize", 6000, 4000, "rgb888", out_width=3000, out_height=2000,
              out_fmt="rgb888", api="acldvpp")
    assert v.status == "unknown" and "vpc.stride.310b.acldvpp" in {f.rule_id for f in v.unknowns}
    v = check("Ascend310B1", "9.0.0", "vpc", "resize", 6000, 4000, "rgb888", out_width=3000, out_height=2000,
              out_fmt="rgb888", api="himpi")
    assert v.status == "rejected" and "vpc.stride.310b" in {f.rule_id for f in v.violations}


def test_vpc_output_stride_maximum_follows_the_input_table():
    # the output stride rules follow the input table (the output tables were not retrieved): 310/910 and 310P
    # refuse above 16384 (100000); on 310B/A2/A3 the output maximum is open, so refused as undocumented (200006)
    for target in (T310, T310P):
        assert _resize(sim_runtime(target), (640, 480), (640, 480), (320, 240), (16384, 240))[:4] == (320, 240, 16384, 240)
        with pytest.raises(_acl.InvalidParam, match="VPC output: width stride 16400 bytes exceeds the maximum 16384"):
            _resize(sim_runtime(target), (640, 480), (640, 480), (320, 240), (16400, 240))
        with pytest.raises(_acl.InvalidParam, match="VPC output: height stride 16386 rows exceeds the maximum 16384"):
            _resize(sim_runtime(target), (640, 480), (640, 480), (320, 240), (320, 16386))
    assert _resize(sim_runtime(T310B), (640, 480), (640, 480), (320, 240), (16384, 240))[:4] == (320, 240, 16384, 240)
    with pytest.raises(_acl.FeatureUnsupported, match="width stride 16400 bytes is above 16384, the largest"):
        _resize(sim_runtime(T310B), (640, 480), (640, 480), (320, 240), (16400, 240))


def test_a2_stride_above_16384_is_open_not_refused_as_documented():
    # A2: the stride maximum is not stated (8.0.0 aclpythondevg_01_0429): refused rather than guessed (200006),
    # accepted when the caller accepts what the docs leave open
    assert _resize(sim_runtime(TA2), (640, 480), (16384, 480), (320, 240), (320, 240))[:2] == (320, 240)
    with pytest.raises(_acl.FeatureUnsupported, match="16400 bytes is above 16384.*vpc.stride.a2_a3"):
        _resize(sim_runtime(TA2), (640, 480), (16400, 480), (320, 240), (320, 240))
    assert _resize(sim_runtime(TA2, strict_unknown=False), (640, 480), (16400, 480), (320, 240), (320, 240))[:2] == (320, 240)


def test_stride_for_carries_the_stride_maxima():
    assert stride_for("Ascend310", "6.0.1", "vpc", "nv12", 640, 480).limits == {"ws_max": 16384, "hs_max": 16384}
    assert stride_for("Ascend310B1", "8.5.0", "vpc", "nv12", 640, 480, api="himpi").limits == {"ws_max": 16384,
                                                                                             "hs_max": 16384}
    assert stride_for("Ascend310B1", "8.5.0", "vpc", "nv12", 640, 480).limits == {"ws_max_open": 16384,
                                                                                  "hs_max_open": 16384}
    assert stride_for("Ascend910B3", "8.5.0", "vpc", "nv12", 640, 480).limits == {"ws_max_open": 16384,
                                                                                  "hs_max_open": 16384}


# ------------------------------------------------------------------ §2.1: acldvpp output 4096x8192 read in 9.0.0 only

def test_acldvpp_vpc_output_4096x8192_is_documented_from_cann_9_0_0_only():
    # 4096x8192 output: 9.0.0 aclcppdevg_03_0337 (310B, A2, A3); the 6.0.1 page (aclcppdevg_03_0168) gave
    # 4096x4096 for every product, so before 9.0.0 an output height in (4096, 8192] is unknown
    def v(soc, cann, ow, oh):
        return check(soc, cann, "vpc", "resize", 2048, 4096, "nv12", out_width=ow, out_height=oh, api="acldvpp")

    for soc in ("Ascend310B1", "Ascend910B3", "Ascend910_9391"):
        assert v(soc, "9.0.0", 4096, 8192).status == "ok"
        before = v(soc, "8.5.0", 4096, 8192)
        assert before.status == "unknown"
        assert "vpc.v1.range.310b_a2_a3.before_9_0.open" in {f.rule_id for f in before.unknowns}
        assert v(soc, "8.5.0", 4096, 4096).status == "ok"
    assert v("Ascend910B3", "8.0.0", 4096, 8192).status == "unknown"
    assert v("Ascend910B3", "8.0.0", 4096, 4098).status == "unknown"
    assert v("Ascend910B3", "8.0.0", 4096, 8194).status == "rejected"  # above 8192 under either reading
    assert v("Ascend910B3", "9.0.0", 4096, 8194).status == "rejected"


def test_software_device_refuses_acldvpp_output_above_4096_high_before_cann_9_0_0():
    a2_9, a2_8 = dv.Target("Ascend910B3", "9.0.0"), dv.Target("Ascend910B3", "8.0.0")
    assert _resize(sim_runtime(a2_9), (2048, 4096), (2048, 4096), (4096, 8192), (4096, 8192))[:2] == (4096, 8192)
    with pytest.raises(_acl.FeatureUnsupported, match="output height 8192 is above 4096"):
        _resize(sim_runtime(a2_8), (2048, 4096), (2048, 4096), (4096, 8192), (4096, 8192))
    with pytest.raises(_acl.FeatureUnsupported, match="vpc.v1.range.310b_a2_a3.before_9_0.open"):
        _resize(sim_runtime(dv.Target("Ascend310B1", "7.0.0")), (2048, 4096), (2048, 4096), (2048, 8192), (2048, 8192))
    assert _resize(sim_runtime(a2_8), (2048, 4096), (2048, 4096), (4096, 4096), (4096, 4096))[:2] == (4096, 4096)


# ------------------------------------------------------------------ §2.1 / §2.4: the paste box is at least 10x6

def _paste(rt, crop, paste):
    chan, stream = rt.create_channel(), rt.create_stream()
    src = nv12_picture(rt, 640, 480, 640, 480)[0]
    dst = nv12_picture(rt, 640, 480, 640, 480, seed=1)[0]
    rt.vpc_crop_resize_paste(chan, src, dst, rt.roi(*crop), rt.roi(*paste), rt.resize_config(), stream)
    rt.synchronize(stream)
    return rt.pic_info(dst)


def test_software_device_refuses_a_paste_box_below_10x6():
    # output minimum 10x6 (§2.1, CANN 6.0.1 aclcppdevg_03_0168) and crop minimum 10x6 (§2.4): the paste box is the
    # resize target, so the stricter reading holds it to 10x6 too, in the rule check (probe) and on the device.
    # Boxes inclusive; on 310 left 16-aligned, right odd
    assert _paste(sim_runtime(T310), (0, 0, 255, 191), (16, 0, 25, 5))[:2] == (640, 480)  # 10x6
    with pytest.raises(_acl.InvalidParam, match=r"paste width 8 is below the minimum 10.*vpc.crop_min"):
        _paste(sim_runtime(T310), (0, 0, 255, 191), (16, 0, 23, 5))
    with pytest.raises(_acl.InvalidParam, match="paste height 4 is below the minimum 6"):
        _paste(sim_runtime(T310), (0, 0, 63, 31), (16, 0, 25, 3))
    assert _paste(sim_runtime(T310P), (0, 0, 255, 191), (16, 0, 25, 5))[:2] == (640, 480)
    with pytest.raises(_acl.InvalidParam, match="paste width 9 is below the minimum 10"):
        _paste(sim_runtime(T310P), (0, 0, 255, 191), (16, 0, 24, 5))
    for paste, status in (((16, 0, 25, 5), "ok"), ((16, 0, 23, 5), "rejected")):
        v = check("Ascend310", "6.0.1", "vpc", "crop_resize_paste", 640, 480, "nv12", out_width=640, out_height=480,
                  crop=(0, 0, 255, 191), paste=paste, api="acldvpp")
        assert v.status == status, v.summary


# ------------------------------------------------------------------ AIPP: padded width at most 1080

def test_aipp_padded_width_is_checked_from_the_crop_size_without_a_source_size():
    # pyACL set_aipp_padding_params: the padded width is at most 1080 (aclpythondevg_01_0188); with crop on the
    # output width is the crop width, known whatever src_image_size says (0: the model's input size)
    def cfg(crop_w, pad, src=(0, 0)):
        return AippConfig(input_format="YUV420SP_U8", src_image_size_w=src[0], src_image_size_h=src[1], crop=True,
                          crop_size_w=crop_w, crop_size_h=480, padding=True, left_padding_size=pad,
                          right_padding_size=pad)

    with pytest.raises(ConfigError, match="padded width 1104 exceeds AIPP's 1080"):
        cfg(1040, 32)
    with pytest.raises(ConfigError, match="padded width 1104 exceeds AIPP's 1080"):
        cfg(1040, 32, src=(1040, 480))
    assert cfg(1016, 32).output_hw == (480, 1080)
    assert cfg(1040, 20).output_hw == (480, 1080)
    assert cfg(1016, 32, src=(1920, 1080)).output_hw == (480, 1080)


# ------------------------------------------------------------------ §2.2: ws = A(w, 16) * bytes per pixel

def test_a_packed_formats_caller_stride_alignment_is_16_pixels_not_16_bytes():
    """VPC input widthStride is A(w, 16) x bytes per pixel on 310/310P (CANN 6.0.1 aclcppdevg_03_0168 / 0232): the
    alignment a caller's stride must keep is 16 pixels -- 32 bytes for YUYV, 48 for YUV444 packed, 64 for
    ARGB8888 (it was 16 bytes for every format but RGB888/BGR888). The device runs VPC from NV12/NV21 only, so the
    rule is read where the device reads it."""
    from dvpipe.backends.dvpp.sim._dvpp import _stride

    for fmt, bpp in (("nv12", 1), ("yuyv", 2), ("yuv444packed", 3), ("rgb888", 3), ("argb8888", 4)):
        st, ws_align, _hs_align, gap = _stride("Ascend310P3", "8.0.0", "vpc", fmt, 100, 50, "in")
        assert not gap and ws_align == 16 * bpp, (fmt, ws_align)
        assert st.width_stride == -(-100 // 16) * 16 * bpp
