"""AIPP: the aipp_op config, its text form, its derivation from a profile, and the numeric model.

References used here (none of them is dvpipe's own AIPP code):

* the textbook Y'CbCr <-> R'G'B' formulas with each standard's (Kr, Kb) and range, in float64
  (ITU-R BT.601 / BT.709; JFIF for JPEG), written out below;
* OpenCV's ``COLOR_BGR2YUV_I420`` (BT.601 limited range) as a second encoder;
* the ATC tool guide's documented example "YUV420SP_U8 to BGR" (Sample Reference, atlasatc_16_0028,
  CANN 8.0.0) and the documented CSC matrices ("CSC Configuration", atlasatc_16_0021);
* integer arithmetic written out by hand for a few pixels.
"""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from dvpipe.backends.dvpp.aipp import (AIPP_SET, COLOUR_STANDARDS, AippConfig, aipp_for, aipp_for_stages, apply_aipp,
                                       dynamic_aipp_calls, parse_cfg_blocks)
from dvpipe.cli import main as cli_main
from dvpipe.errors import ConfigError
from dvpipe.profiles import PROFILES, profile_stages
from dvpipe.stages import Crop, Decode, Normalise, Pad, Resize
from dvpipe.types import Camera

from tolerances import tol

ROOT = Path(__file__).resolve().parents[3]
FRAMES = sorted((ROOT / "samples" / "frames").glob("*/*.jpg"))

# (Kr, Kb, full_range) per standard
_STD = {"jpeg_full": (0.299, 0.114, True), "bt601_full": (0.299, 0.114, True), "bt601_narrow": (0.299, 0.114, False),
        "bt709_full": (0.2126, 0.0722, True), "bt709_narrow": (0.2126, 0.0722, False)}


def _encode_nv12(bgr: np.ndarray, standard: str, chroma: str = "mean") -> np.ndarray:
    """Textbook float64 R'G'B' -> Y'CbCr, rounded; chroma = 2x2 block ``mean`` (or its ``topleft``
    sample). (H*3/2, W) uint8 NV12."""
    kr, kb, full = _STD[standard]
    b, g, r = (bgr[..., i].astype(np.float64) for i in range(3))
    y = kr * r + (1 - kr - kb) * g + kb * b
    cb = (b - y) / (2 * (1 - kb))
    cr = (r - y) / (2 * (1 - kr))
    if full:
        Y, U, V = y, cb + 128, cr + 128
    else:
        Y, U, V = 16 + y * 219 / 255, 128 + cb * 224 / 255, 128 + cr * 224 / 255
    h, w = Y.shape
    if chroma == "mean":
        U = U.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
        V = V.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
    else:
        U, V = U[::2, ::2], V[::2, ::2]
    q = lambda a: np.clip(np.floor(a + 0.5), 0, 255).astype(np.uint8)  # noqa: E731
    uv = np.stack([q(U), q(V)], axis=-1).reshape(h // 2, w)
    return np.concatenate([q(Y), uv], axis=0)


def _decode_rgb_float(nv12: np.ndarray, standard: str) -> np.ndarray:
    """Textbook float64 Y'CbCr -> R'G'B' of an NV12 picture (chroma replicated per 2x2), clipped: HxWx3 RGB."""
    kr, kb, full = _STD[standard]
    h = nv12.shape[0] * 2 // 3
    Y = nv12[:h].astype(np.float64)
    uv = nv12[h:].reshape(h // 2, -1, 2).astype(np.float64)
    U = np.repeat(np.repeat(uv[..., 0], 2, 0), 2, 1) - 128
    V = np.repeat(np.repeat(uv[..., 1], 2, 0), 2, 1) - 128
    if full:
        y, cb, cr = Y, U, V
    else:
        y, cb, cr = (Y - 16) * 255 / 219, U * 255 / 224, V * 255 / 224
    r = y + 2 * (1 - kr) * cr
    b = y + 2 * (1 - kb) * cb
    g = (y - kr * r - kb * b) / (1 - kr - kb)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255)


def _photo(index: int = 0, size=(800, 450)) -> np.ndarray:
    img = cv2.imread(str(FRAMES[index]), cv2.IMREAD_COLOR)
    return cv2.resize(img, size, interpolation=cv2.INTER_AREA)


# -- numeric model against the float reference ------------------------------------------------
@pytest.mark.parametrize("standard", COLOUR_STANDARDS)
@pytest.mark.parametrize("profile", ["bevformer-tiny", "bevformer-base"])
def test_aipp_matches_float_reference_on_the_same_yuv(standard, profile):
    """Same NV12 picture in both: AIPP (fixed-point CSC, fp16) vs the textbook float conversion then
    ``(x - mean) / std``. What remains is the >>8 truncation and coefficient rounding (<= 2 levels)
    and fp16 rounding."""
    p = PROFILES[profile]
    nv12 = _encode_nv12(_photo(0), standard)
    cfg = aipp_for(p.mean, p.std, channel_order="rgb" if p.to_rgb else "bgr", colour_standard=standard,
                   src_size=(450, 800), content_size=(450, 800), out_size=(450, 800))
    out = apply_aipp(cfg, nv12[None])[0].astype(np.float64)
    rgb = _decode_rgb_float(nv12, standard)
    ref_hwc = rgb if p.to_rgb else rgb[..., ::-1]
    ref = ((ref_hwc - np.array(p.mean)) / np.array(p.std)).transpose(2, 0, 1)
    err_levels = (out - ref) * np.array(p.std)[:, None, None]  # back to 0..255 pixel units
    fp16_half_ulp = np.abs(ref) * 2.0 ** -11 * np.array(p.std)[:, None, None]
    assert np.all(np.abs(err_levels) <= 2.0 + fp16_half_ulp + 1e-6), np.abs(err_levels).max()
    # the documented >> 8 has no rounding term: AIPP is on average about half a level low
    assert -1.0 < err_levels.mean() < -0.2, err_levels.mean()


def test_hand_written_encoder_agrees_with_opencv_bt601_narrow():
    """OpenCV's COLOR_BGR2YUV_I420 is BT.601 limited range and takes the top-left sample of each 2x2
    block as its chroma (no averaging)."""
    bgr = _photo(1, (64, 36))
    ours = _encode_nv12(bgr, "bt601_narrow", chroma="topleft")
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
    assert np.abs(ours[:36].astype(int) - i420[:36]).max() <= tol("opencv_i420_rounding").atol
    uv = ours[36:].reshape(18, 32, 2).astype(int)
    assert np.abs(uv[..., 0] - i420[36:45].reshape(18, 32)).max() <= tol("opencv_i420_rounding").atol
    assert np.abs(uv[..., 1] - i420[45:54].reshape(18, 32)).max() <= tol("opencv_i420_rounding").atol


def _nv12_2x2(y4, u, v) -> np.ndarray:
    return np.array([[y4[0], y4[1]], [y4[2], y4[3]], [u, v]], np.uint8)


def test_fixed_point_by_hand_jpeg_rgb():
    # JPEG matrix (rows R, G, B): 256 0 359 / 256 -88 -183 / 256 454 0; biases 0 128 128
    # Y=100, U=150, V=200: (U-128, V-128) = (22, 72)
    #   R = (256*100 + 359*72) >> 8          = 51448 >> 8 = 200
    #   G = (256*100 - 88*22 - 183*72) >> 8  = 10488 >> 8 = 40
    #   B = (256*100 + 454*22) >> 8          = 35588 >> 8 = 139
    cfg = aipp_for((0, 0, 0), (1, 1, 1), channel_order="rgb", colour_standard="jpeg_full", src_size=(2, 2),
                   content_size=(2, 2), out_size=(2, 2))
    out = apply_aipp(cfg, _nv12_2x2([100] * 4, 150, 200))
    assert out.dtype == np.float16 and out.shape == (1, 3, 2, 2)
    assert out[0, :, 0, 0].tolist() == [200.0, 40.0, 139.0]
    bgr = apply_aipp(cfg.replace(**{k: getattr(cfg, k.replace("r0", "rX").replace("r2", "r0").replace("rX", "r2"))
                                    for k in ("matrix_r0c0", "matrix_r0c1", "matrix_r0c2", "matrix_r2c0",
                                              "matrix_r2c1", "matrix_r2c2")}), _nv12_2x2([100] * 4, 150, 200))
    assert bgr[0, :, 0, 0].tolist() == [139.0, 40.0, 200.0]


def test_fixed_point_by_hand_narrow_floor_and_saturation():
    # BT.601 narrow: 298 0 409 / 298 -100 -208 / 298 516 0, biases 16 128 128
    #   Y=235, U=V=128 (white): (298*219) >> 8 = 65262 >> 8 = 254 (not 255: >> 8 floors 254.93)
    #   Y=16, U=V=128 (black): 0
    #   Y=255, U=128, V=255: R = (298*239 + 409*127) >> 8 = 123165 >> 8 = 481 -> saturates to 255
    #                        G = (298*239 - 208*127) >> 8 = 44806 >> 8 = 175;  B = 71222 >> 8 = 278 -> 255
    cfg = aipp_for((0, 0, 0), (1, 1, 1), channel_order="rgb", colour_standard="bt601_narrow", src_size=(2, 2),
                   content_size=(2, 2), out_size=(2, 2))
    assert apply_aipp(cfg, _nv12_2x2([235] * 4, 128, 128))[0, :, 0, 0].tolist() == [254, 254, 254]
    assert apply_aipp(cfg, _nv12_2x2([16] * 4, 128, 128))[0, :, 0, 0].tolist() == [0, 0, 0]
    assert apply_aipp(cfg, _nv12_2x2([255] * 4, 128, 255))[0, :, 0, 0].tolist() == [255, 175, 255]


def test_normalisation_by_hand_mean_split_and_fp16():
    # bevformer-tiny R: mean 123.675 -> mean_chn 123 + min_chn 0.675; var_reci 1/58.395 held as fp16
    p = PROFILES["bevformer-tiny"]
    cfg = aipp_for(p.mean, p.std, channel_order="rgb", colour_standard="jpeg_full", src_size=(2, 2),
                   content_size=(2, 2), out_size=(2, 2))
    assert (cfg.mean_chn_0, cfg.mean_chn_1, cfg.mean_chn_2) == (123, 116, 103)
    assert cfg.min_chn_0 == pytest.approx(0.675) and cfg.min_chn_2 == pytest.approx(0.53)
    assert cfg.var_reci_chn_0 == pytest.approx(1 / 58.395)
    out = apply_aipp(cfg, _nv12_2x2([100] * 4, 150, 200))  # R = 200 (see the JPEG case)
    var16 = float(np.float16(1 / 58.395))
    expected = np.float16((200 - 123 - float(np.float16(0.675))) * var16)
    assert out[0, 0, 0, 0] == expected
    assert abs(float(out[0, 0, 0, 0]) - (200 - 123.675) / 58.395) < tol("aipp_fp16_output").atol


def test_crop_and_padding():
    # 4x4 picture, Y rising by column; crop (2, 2) 2x2; pad right 1, bottom 3 with -7.5
    y = np.tile(np.array([10, 20, 30, 40], np.uint8), (4, 1))
    uv = np.full((2, 4), 128, np.uint8)
    nv12 = np.concatenate([y, uv])
    cfg = AippConfig(src_image_size_w=4, src_image_size_h=4, crop=True, load_start_pos_w=2, load_start_pos_h=2,
                     crop_size_w=2, crop_size_h=2, csc_switch=False, padding=True, right_padding_size=1,
                     bottom_padding_size=3, padding_value=-7.5)
    assert cfg.output_hw == (5, 3)
    out = apply_aipp(cfg, nv12)[0]
    assert out.shape == (3, 5, 3)
    assert out[0, :2, :2].tolist() == [[30, 40], [30, 40]]  # csc off: channel 0 is Y
    assert out[1, :2, :2].tolist() == [[128, 128], [128, 128]]
    assert np.all(out[:, :, 2] == -7.5) and np.all(out[:, 2:, :] == -7.5)


def test_rgb888_input_and_swap():
    rgb = np.zeros((1, 2, 2, 3), np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 10, 20, 30
    cfg = AippConfig(input_format="RGB888_U8", src_image_size_w=2, src_image_size_h=2, mean_chn_0=5)
    assert apply_aipp(cfg, rgb)[0, :, 0, 0].tolist() == [5, 20, 30]
    swapped = apply_aipp(cfg.replace(rbuv_swap_switch=True), rgb)
    assert swapped[0, :, 0, 0].tolist() == [25, 20, 10]


# -- text form ----------------------------------------------------------------------------------
_ATC_EXAMPLE = """
aipp_op {
    aipp_mode: static
    input_format: YUV420SP_U8
    csc_switch: true
    # If the input image is a YVU420SP_U8 (NV21) image, set rbuv_swap_switch to true.
    rbuv_swap_switch: false
    related_input_rank: 0
    src_image_size_w: 256
    src_image_size_h: 256
    crop: false
    matrix_r0c0: 298
    matrix_r0c1: 516
    matrix_r0c2: 0
    matrix_r1c0: 298
    matrix_r1c1: -100
    matrix_r1c2: -208
    matrix_r2c0: 298
    matrix_r2c1: 0
    matrix_r2c2: 409
    input_bias_0: 16
    input_bias_1: 128
    input_bias_2: 128
    mean_chn_0: 104
    mean_chn_1: 117
    mean_chn_2: 123
    min_chn_0: 0.0
    min_chn_1: 0.0
    min_chn_2: 0.0
    var_reci_chn_0: 1.0
    var_reci_chn_1: 1.0
    var_reci_chn_2: 1.0
}
"""


def test_golden_against_the_atc_guide_example():
    """ATC tool guide, Sample Reference, "YUV420SP_U8 to BGR" (atlasatc_16_0028, CANN 8.0.0): NV12 in,
    BGR out, 256x256, BT.601 narrow, mean 104/117/123, no crop, var_reci 1.0."""
    documented = AippConfig.from_cfg(_ATC_EXAMPLE)
    ours = aipp_for((104, 117, 123), (1, 1, 1), channel_order="bgr", colour_standard="bt601_narrow",
                    src_size=(256, 256), content_size=(256, 256), out_size=(256, 256))
    expected = {"aipp_mode": "static", "input_format": "YUV420SP_U8", "csc_switch": True, "rbuv_swap_switch": False,
                "related_input_rank": 0, "src_image_size_w": 256, "src_image_size_h": 256, "crop": False,
                "matrix_r0c0": 298, "matrix_r0c1": 516, "matrix_r0c2": 0, "matrix_r1c0": 298, "matrix_r1c1": -100,
                "matrix_r1c2": -208, "matrix_r2c0": 298, "matrix_r2c1": 0, "matrix_r2c2": 409, "input_bias_0": 16,
                "input_bias_1": 128, "input_bias_2": 128, "mean_chn_0": 104, "mean_chn_1": 117, "mean_chn_2": 123,
                "min_chn_0": 0.0, "min_chn_1": 0.0, "min_chn_2": 0.0, "var_reci_chn_0": 1.0, "var_reci_chn_1": 1.0,
                "var_reci_chn_2": 1.0, "padding": False}
    for key, value in expected.items():
        assert getattr(documented, key) == value, key
        assert getattr(ours, key) == value, key


@pytest.mark.parametrize("standard,row0,row1,row2,bias", [
    # ATC guide, "CSC Configuration" (atlasatc_16_0021), "YUV420SP_U8 to RGB"
    ("jpeg_full", (256, 0, 359), (256, -88, -183), (256, 454, 0), (0, 128, 128)),
    ("bt601_narrow", (298, 0, 409), (298, -100, -208), (298, 516, 0), (16, 128, 128)),
    ("bt601_full", (256, 0, 359), (256, -88, -183), (256, 454, 0), (0, 128, 128)),
    ("bt709_narrow", (298, 0, 459), (298, -55, -136), (298, 541, 0), (16, 128, 128)),
    ("bt709_full", (256, 0, 403), (256, -48, -120), (256, 475, 0), (0, 128, 128)),
])
def test_documented_matrices(standard, row0, row1, row2, bias):
    cfg = aipp_for((0, 0, 0), (1, 1, 1), channel_order="rgb", colour_standard=standard, src_size=(2, 2),
                   content_size=(2, 2), out_size=(2, 2))
    assert cfg.matrix.tolist() == [list(row0), list(row1), list(row2)]
    assert (cfg.input_bias_0, cfg.input_bias_1, cfg.input_bias_2) == bias
    # and each is round(256 x the textbook coefficient) within one unit
    kr, kb, full = _STD[standard]
    ys, cs = (1.0, 1.0) if full else (255 / 219, 255 / 224)
    textbook = [[ys, 0, 2 * (1 - kr) * cs], [ys, -2 * kb * (1 - kb) / (1 - kr - kb) * cs,
                                             -2 * kr * (1 - kr) / (1 - kr - kb) * cs], [ys, 2 * (1 - kb) * cs, 0]]
    assert np.abs(np.array(textbook) * 256 - cfg.matrix).max() <= tol("aipp_csc_coefficients").atol


def test_cfg_round_trip():
    p = PROFILES["bevformer-tiny"]
    cfg = aipp_for(p.mean, p.std, channel_order="rgb", colour_standard="bt709_narrow", src_size=(452, 816),
                   content_size=(450, 800), out_size=(480, 800), padding_value=-0.5)
    text = cfg.to_cfg()
    assert text.startswith("aipp_op {\n") and "    padding_value : -0.5\n" in text
    assert AippConfig.from_cfg(text) == cfg
    two = parse_cfg_blocks(text + cfg.replace(related_input_rank=1).to_cfg())
    assert [b.related_input_rank for b in two] == [0, 1]
    # the CSC page prints its blocks on one line ("YUV420SP_U8 to YVU444", atlasatc_16_0021)
    one_line = AippConfig.from_cfg("aipp_op { aipp_mode: static input_format : YUV420SP_U8 csc_switch : false "
                                   "rbuv_swap_switch : true }")
    assert one_line.rbuv_swap_switch and not one_line.csc_switch and one_line.input_format == "YUV420SP_U8"
    dyn = AippConfig(aipp_mode="dynamic", max_src_image_size=752640)
    assert AippConfig.from_cfg(dyn.to_cfg()) == dyn and "input_format" not in dyn.to_cfg()


@pytest.mark.parametrize("text,match", [
    ("aipp_op {\n input_format : YUV420SP_U8\n colour : 3\n}", "unknown aipp_op key 'colour'"),
    ("aipp_op {\n input_format : YUV420SP_U8\n resize : true\n}", "not modelled"),
    ("aipp_op {\n input_format : YUV420SP_U8\n csc_switch : true\n matrix_r0c0 : 256\n}", "nine matrix"),
    ("aipp_op {\n input_format : YUV420SP_U8\n crop : maybe\n}", "cannot read 'maybe'"),
    ("aipp_op {\n input_format : YUV420SP_U8\n", "unterminated"),
    ("aipp_op {\n input_format : YUV444SP_U8\n}", "not modelled"),
    ("aipp_op {\n src_image_size_w : 9\n src_image_size_h : 4\n}", "even src_image_size"),
    ("aipp_op {\n aipp_mode static\n}", "unexpected 'aipp_mode'"),
    ("input_format : YUV420SP_U8", "outside an aipp_op"),
])
def test_cfg_errors(text, match):
    with pytest.raises(ConfigError, match=match):
        AippConfig.from_cfg(text)


# -- dynamic AIPP --------------------------------------------------------------------------------
def test_dynamic_call_sequence_follows_the_documented_signatures():
    p = PROFILES["bevformer-tiny"]
    cfg = aipp_for(p.mean, p.std, channel_order="rgb", colour_standard="jpeg_full", src_size=(450, 800),
                   content_size=(450, 800), out_size=(480, 800))
    calls = dynamic_aipp_calls(cfg, batch_size=2)
    names = [n for n, _ in calls]
    assert names[0] == "acl.mdl.create_aipp" and calls[0][1] == (2,)
    assert names[-2:] == ["acl.mdl.set_aipp_by_input_index", "acl.mdl.destroy_aipp"]
    assert names.count("acl.mdl.set_aipp_padding_params") == 2  # one per batch index
    args = dict(calls)
    assert args["acl.mdl.set_aipp_input_format"] == (AIPP_SET, 1)  # ACL_YUV420SP_U8 = 1
    csc = args["acl.mdl.set_aipp_csc_params"]  # handle, switch, 9 matrix, 3 output bias, 3 input bias
    assert len(csc) == 17 and csc[1] == 1 and csc[2:11] == (256, 0, 359, 256, -88, -183, 256, 454, 0)
    assert csc[14:] == (0, 128, 128)
    assert args["acl.mdl.set_aipp_src_image_size"] == (AIPP_SET, 800, 450)
    pads = [a for n, a in calls if n == "acl.mdl.set_aipp_padding_params"]
    assert pads == [(AIPP_SET, 1, 0, 30, 0, 0, 0), (AIPP_SET, 1, 0, 30, 0, 0, 1)]  # switch, top, bottom, left, right, b
    means = [a for n, a in calls if n == "acl.mdl.set_aipp_dtc_pixel_mean"]
    assert means[1] == (AIPP_SET, 123, 116, 103, 0, 1)
    assert dynamic_aipp_calls(cfg, by_input_index=False)[-2][0] == "acl.mdl.set_input_aipp"


# -- from stage lists, and what AIPP cannot express -------------------------------------------
def test_profile_routes():
    cam = Camera("CAM_FRONT", width=1600, height=900)
    petr = aipp_for_stages(profile_stages("petr", "fast", cam), (900, 1600), colour_standard="jpeg_full").config
    # PETR: resize 0.5 -> 800x450, crop 800x320 at (0, 450 - 320), no pad (320, 800 divide by 32)
    assert (petr.src_image_size_w, petr.src_image_size_h) == (800, 450)
    assert (petr.crop, petr.load_start_pos_w, petr.load_start_pos_h, petr.crop_size_w, petr.crop_size_h) == \
        (True, 0, 130, 800, 320)
    assert not petr.padding and petr.output_hw == (320, 800)
    assert petr.matrix_r0c1 == 454  # BGR: row 0 is B = Y + 1.772 U
    bevdet = aipp_for_stages(profile_stages("bevdet", "fast", cam), (900, 1600), colour_standard="jpeg_full").config
    # BEVDet: 704/1600 + 0.04 = 0.48 -> 768x432, crop 704x256 at (32, 176)
    assert (bevdet.src_image_size_w, bevdet.load_start_pos_w, bevdet.load_start_pos_h) == (768, 32, 176)
    assert bevdet.output_hw == (256, 704)


@pytest.mark.parametrize("stages,match", [
    ([Decode(), Normalise(mean=(1, 2, 3), std=(1, 1, 1)), Resize(scale=0.5)], "Resize after Normalise"),
    ([Decode(), Pad(size_divisor=32), Normalise()], "Pad before Normalise"),
    ([Decode(), Crop(left=1, top=0, width=10, height=10), Normalise()], "even start"),
    ([Decode(), Resize(scale=0.5)], "no Normalise"),
    ([Decode(), Normalise(), Pad(size=(500, 1000))], "at most 32"),
    ([Normalise()], "begin with Decode"),
])
def test_stage_lists_aipp_cannot_express(stages, match):
    with pytest.raises(ConfigError, match=match):
        aipp_for_stages(stages, (450, 800), colour_standard="jpeg_full")


def test_bevformer_base_is_refused_for_the_documented_padding_width():
    cam = Camera("CAM_FRONT", width=1600, height=900)
    with pytest.raises(ConfigError, match="1080"):
        aipp_for_stages(profile_stages("bevformer-base", "fast", cam), (900, 1600), colour_standard="jpeg_full")


def test_aipp_for_argument_errors():
    kw = dict(channel_order="rgb", colour_standard="jpeg_full", src_size=(8, 8), content_size=(8, 8),
              out_size=(8, 8))
    with pytest.raises(ConfigError, match="0..255"):
        aipp_for((300, 0, 0), (1, 1, 1), **kw)
    with pytest.raises(ConfigError, match="unknown colour standard"):
        aipp_for((0, 0, 0), (1, 1, 1), **{**kw, "colour_standard": "bt2020"})
    with pytest.raises(ConfigError, match="only pads"):
        aipp_for((0, 0, 0), (1, 1, 1), **{**kw, "out_size": (8, 4)})


# -- CLI -------------------------------------------------------------------------------------------
def test_cli_sample_deployment(tmp_path, capsys):
    out = tmp_path / "aipp.cfg"
    assert cli_main(["aipp", str(ROOT / "samples" / "deployment.yaml"), "-o", str(out), "--soc", "Ascend310P3"]) == 0
    printed = capsys.readouterr().out
    blocks = parse_cfg_blocks(out.read_text())
    assert len(blocks) == 1  # six identical 1600x900 JPEG cameras share one aipp_op
    cfg = blocks[0]
    # bevformer-tiny: 1600x900 * 0.5 = 800x450, pad to /32 -> 800x480; ImageNet mean/std in RGB
    assert (cfg.src_image_size_w, cfg.src_image_size_h, cfg.bottom_padding_size, cfg.right_padding_size) == \
        (800, 450, 30, 0)
    assert cfg.output_hw == (480, 800)
    assert (cfg.matrix_r0c0, cfg.matrix_r0c2, cfg.matrix_r2c1) == (256, 359, 454)  # JPEG, rows R G B
    assert cfg.mean_chn_0 + cfg.min_chn_0 == pytest.approx(123.675)
    assert cfg.var_reci_chn_2 == pytest.approx(1 / 57.375)
    assert "CAM_FRONT, CAM_FRONT_RIGHT" in printed and "channels RGB" in printed and "bottom 30" in printed


def test_cli_says_when_the_deployments_own_run_would_not_take_the_aipp_route(tmp_path, capsys):
    """The config is the AIPP route's; a deployment whose run would not take that route (``backends: auto`` never
    picks AIPP, docs/dvpp.md; fidelity reference declines the AIPP step, docs/device_path.md; a camera's own
    backends without AIPP) is told so, else its model would be built for NV12 and fed normalised tensors."""
    out = tmp_path / "aipp.cfg"
    aipp_dep = ROOT / "configs" / "deployments" / "nuscenes-aipp-sim.yaml"
    assert cli_main(["aipp", str(aipp_dep), "-o", str(out)]) == 0
    assert "does not take the AIPP route" not in capsys.readouterr().out  # backends [dvpp-sim, aipp-sim, cpu], fast
    assert cli_main(["aipp", str(ROOT / "samples" / "deployment.yaml"), "-o", str(out), "--soc", "Ascend310P3"]) == 0
    printed = capsys.readouterr().out
    assert "pipeline.backends is [auto]" in printed and "fidelity reference" in printed
    dep = tmp_path / "dep.yaml"
    text = aipp_dep.read_text().replace("../../", f"{ROOT}/").replace("../models/", f"{ROOT}/configs/models/")
    dep.write_text(text + "cameras:\n  - {name: CAM_BACK, backends: [dvpp-sim, cpu]}\n", encoding="utf-8")
    assert cli_main(["aipp", str(dep), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "CAM_BACK: the camera's own backends name no AIPP backend" in printed
    assert "pipeline.backends is" not in printed and "fidelity" not in printed.split("channels")[0]


def test_cli_profile_soc(tmp_path, capsys):
    out = tmp_path / "tiny.cfg"
    assert cli_main(["aipp", "--profile", "bevformer-tiny", "--soc", "Ascend310P3", "-o", str(out)]) == 0
    cfg = AippConfig.from_cfg(out.read_text())
    assert cfg.output_hw == (480, 800)
    assert cli_main(["aipp", "--profile", "bevformer-tiny", "--soc", "Ascend310P3", "--source", "h264",
                     "--colour-standard", "bt709_narrow", "-o", str(out)]) == 0
    cfg = AippConfig.from_cfg(out.read_text())
    assert (cfg.matrix_r0c2, cfg.input_bias_0) == (459, 16)


@pytest.mark.parametrize("argv,match", [
    (["--profile", "nope", "--soc", "Ascend310P3"], "unknown profile"),
    (["--profile", "petr"], "needs --soc"),
    (["--profile", "petr", "--soc", "Ascend999"], "unknown SoC name"),
    (["--profile", "petr", "--soc", "Ascend310P3", "--size", "big"], "WxH"),
    ([], "DEPLOYMENT.yaml or --profile"),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, capsys, argv, match):
    assert cli_main(["aipp", *argv, "-o", str(tmp_path / "x.cfg")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err and not (tmp_path / "x.cfg").exists()


def test_cli_plans_the_rig_as_one_batch_as_the_run_does(tmp_path, capsys):
    # the Waymo-like rig: 1920x1280 front and 1920x886 side cameras; resize 0.5, pad to /32
    src = (ROOT / "configs" / "deployments" / "waymo-synthetic.yaml").read_text()
    dep = tmp_path / "waymo.yaml"
    dep.write_text(src.replace("../rigs/waymo.yaml", str(ROOT / "configs" / "rigs" / "waymo.yaml"))
                   .replace("pad: {size: [640, 960]}", "pad: {size_divisor: 32}"))
    out = tmp_path / "aipp.cfg"
    # 960x640 fronts and 960x448 sides: the run cannot batch them (one model input), so there is no config to write
    assert cli_main(["aipp", str(dep), "-o", str(out), "--soc", "Ascend310P3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a batch needs one size" in err and not out.exists()
    # as shipped (pad to 640 rows) the sides would need 198 rows of AIPP padding (at most 32): the run puts the five
    # cameras on the canvas route (VPC pastes each picture into a 960x640 slot), one config, no crop and no padding
    dep.write_text(src.replace("../rigs/waymo.yaml", str(ROOT / "configs" / "rigs" / "waymo.yaml")))
    assert cli_main(["aipp", str(dep), "-o", str(out), "--soc", "Ascend310P3"]) == 0
    printed = capsys.readouterr().out
    (block,) = parse_cfg_blocks(out.read_text())
    assert (block.src_image_size_w, block.src_image_size_h, block.crop, block.padding) == (960, 640, False, False)
    assert "SIDE_LEFT, SIDE_RIGHT: input NV12 960x640 (canvas slot: VPC pastes the 960x442 DVPP picture" in printed
    assert "FRONT, FRONT_LEFT, FRONT_RIGHT: input NV12 960x640 (canvas slot: VPC pastes the 960x640 DVPP picture" \
        in printed
    # the run puts the five cameras in one batch on the canvas route and hands the model this very block
    import dvpipe as dv
    from dvpipe.deploy import load_deployment
    from dvpipe.knowledge import latest_checked

    d = load_deployment(dep)
    pipe = dv.Pipeline(d.rig, list(d.pipeline.stages), ("dvpp-sim", "aipp-sim", "cpu"), fidelity="fast",
                       target=dv.Target("Ascend310P3", str(latest_checked())))
    try:
        assert pipe.plan.device_batch["aipp"] == block
        assert pipe.plan.device_batch["canvas"]["pictures"]["SIDE_LEFT"] == (442, 960)
    finally:
        pipe.close()
    # without a target the detours are unknown: the CLI asks for one rather than guess
    assert cli_main(["aipp", str(dep), "-o", str(out)]) == 2
    assert "give --soc" in capsys.readouterr().err


@pytest.mark.parametrize("soc, cann, stride_w", [("Ascend310P3", "7.0.0", 624), ("Ascend310", "6.0.1", 624),
                                                 ("Ascend910B3", "8.0.0", 620)])
def test_cli_config_for_an_odd_camera_is_the_one_the_run_hands_the_model(tmp_path, soc, cann, stride_w):
    """Issue 26 point 3: KITTI 1242x375 with bevformer-tiny. The documented detours, worked by hand: JPEGD floors
    the odd height (375 -> 374, jpegd.v1.odd_floor), the 0.5 resize gives 621x187, VPC's NV12 output is even
    (620x186), its output stride is the width up to 16 (624) and the height up to 2 (186); pad to /32 -> 640x192:
    right 20, bottom 6 (on Atlas A2 the documented VPC output stride is the width itself: no crop). The stage list alone
    would say source 624x188, crop 621x187, padding 19/5, which the
    batch (620x186 pictures) does not match. The written block must equal the run's own plan.device_batch."""
    import dvpipe as dv

    out = tmp_path / "aipp.cfg"
    assert cli_main(["aipp", "--profile", "bevformer-tiny", "--size", "1242x375", "--soc", soc, "--cann", cann,
                     "-o", str(out)]) == 0
    cfg = AippConfig.from_cfg(out.read_text())
    assert (cfg.src_image_size_w, cfg.src_image_size_h) == (stride_w, 186)
    assert (cfg.crop, cfg.crop_size_w, cfg.crop_size_h) == ((True, 620, 186) if stride_w != 620 else (False, 0, 0))
    assert (cfg.right_padding_size, cfg.bottom_padding_size, cfg.output_hw) == (20, 6, (192, 640))
    cam = dv.Camera("camera", width=1242, height=375)
    pipe = dv.Pipeline(dv.Rig((cam,)), profile_stages("bevformer-tiny", "fast", cam), ("dvpp-sim", "aipp-sim", "cpu"),
                       fidelity="fast", target=dv.Target(soc, cann))
    try:
        assert pipe.plan.device_batch["aipp"] == cfg
    finally:
        pipe.close()


def test_cli_writes_the_canvas_route_config_for_bevformer_base(tmp_path, capsys, samples_dir):
    """bevformer-base pads 1600x900 to 1600x928, beyond AIPP's padding limits (32 a side, padded width <= 1080);
    the run pastes the picture into a padded canvas slot on VPC and its AIPP only normalises. The CLI writes that
    config (no crop, no padding, source = the whole slot at its strides, equal to the plan's device batch) and says
    so. A model converted with it, fed the run's batch, receives the reference pipeline's input within the
    published deviation (docs/dvpp.md, canvas route: content mean 0.58, p99 2.0; pad rows max 0.72); fed a canvas
    built here from OpenCV's decode with the textbook JFIF encoder, likewise."""
    import dvpipe as dv
    from dvpipe.testing.dvpp import sample_frame_sets
    from dvpipe.device import nv12_batch_to_host

    out = tmp_path / "aipp.cfg"
    assert cli_main(["aipp", "--profile", "bevformer-base", "--soc", "Ascend310P3", "--cann", "7.0.0",
                     "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    text = out.read_text()
    cfg = AippConfig.from_cfg(text)
    assert (cfg.src_image_size_w, cfg.src_image_size_h, cfg.crop, cfg.padding) == (1600, 928, False, False)
    assert cfg.output_hw == (928, 1600)
    assert "canvas slot: VPC pastes the 1600x900 DVPP picture into its top-left" in printed
    assert "# canvas route (camera): the source is the whole 1600x928 slot" in text
    rig = dv.Rig.from_yaml(samples_dir / "rig.yaml")
    frames = sample_frame_sets(rig, samples_dir, count=1)[0]
    with dv.Pipeline.from_profile("bevformer-base", rig, backends=("dvpp-sim", "aipp-sim", "cpu"),
                                  target=dv.Target("Ascend310P3", "7.0.0"), fidelity="fast") as pipe:
        b = pipe.plan.device_batch
        assert b["aipp"] == cfg and (cfg.src_image_size_w, cfg.src_image_size_h) == b["strides"]
        y, u, v = b["canvas"]["pad_nv12"]
        assert f"border NV12 ({y}, {u}, {v})" in printed
        batch = pipe.process(frames)
        got = apply_aipp(cfg, nv12_batch_to_host(batch.images)).astype(np.float64)
    ref = np.asarray(dv.Pipeline.from_profile("bevformer-base", rig, backends=("reference",)).process(frames).images,
                     np.float64)
    err = np.abs(got - ref)
    content, pad = err[:, :, :900], err[:, :, 900:]
    assert content.mean() < 0.7 and np.percentile(content, 99) <= 2.5, (content.mean(), np.percentile(content, 99))
    assert pad.max() < 0.75, pad.max()
    # independent of dvpipe's DVPP path: OpenCV's decode, the textbook JFIF NV12, pasted top-left into the slot
    name = rig.cameras[0].name
    bgr = cv2.imdecode(np.frombuffer(frames[name], np.uint8), cv2.IMREAD_COLOR)
    canvas = np.empty((928 * 3 // 2, 1600), np.uint8)
    canvas[:928], canvas[928:, 0::2], canvas[928:, 1::2] = y, u, v
    pic = _encode_nv12(bgr, "jpeg_full")
    canvas[:900], canvas[928:928 + 450] = pic[:900], pic[900:]
    own = np.abs(apply_aipp(cfg, canvas[None])[0].astype(np.float64) - ref[0])
    assert own[:, :900].mean() < 0.7 and np.percentile(own[:, :900], 99) <= 2.5
    assert own[:, 900:].max() < 0.75


def test_cli_refuses_a_camera_the_run_keeps_off_the_aipp_route(tmp_path, capsys):
    # PETR's resize + crop: DVPP does not take them here, so the run normalises on the host; no aipp.cfg
    assert cli_main(["aipp", "--profile", "petr", "--soc", "Ascend310P3", "-o", str(tmp_path / "x.cfg")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not put this camera on the AIPP route" in err


# -- documented ranges (issue 26 point 8) ----------------------------------------------------------
@pytest.mark.parametrize("fields, match", [
    ({"min_chn_0": 300.0}, r"min_chn_0 must be in \[0, 255\]"),       # aclmdlSetAIPPDtcPixelMin: [0, 255]
    ({"min_chn_1": -0.5}, r"min_chn_1 must be in \[0, 255\]"),
    ({"src_image_size_w": 4098, "src_image_size_h": 16}, "src_image_size"),  # aclmdlSetAIPPSrcImageSize: [2, 4096]
    ({"input_format": "RGB888_U8", "src_image_size_w": 1, "src_image_size_h": 16}, "src_image_size"),
    ({"crop": True, "crop_size_w": 4097, "crop_size_h": 2}, r"\[1, 4096\]"),  # aclmdlSetAIPPCropParams
    ({"csc_switch": True, "matrix_r0c0": 32677}, "matrix_r0c0"),  # aclmdlSetAIPPCscParams: [-32677, 32676]
    ({"input_bias_0": 256}, "input_bias_0"),  # uint8_t
    ({"var_reci_chn_0": 70000.0}, "var_reci_chn_0"),  # [-65504, 65504]
])
def test_config_refuses_values_outside_the_documented_ranges(fields, match):
    base = {"src_image_size_w": 64, "src_image_size_h": 32}
    with pytest.raises(ConfigError, match=match):
        AippConfig(**{**base, **fields})


def test_documented_range_edges_are_accepted():
    AippConfig(src_image_size_w=4096, src_image_size_h=4096, min_chn_0=255.0, min_chn_1=0.0, mean_chn_2=255,
               var_reci_chn_0=-65504.0, csc_switch=True, matrix_r0c0=-32677, matrix_r2c2=32676)
    AippConfig(input_format="RGB888_U8", src_image_size_w=2, src_image_size_h=1)


# -- YUV420SP_U8 crop size parity (aclAippInfo, CANN 8.5.0 aclpythondevg_01_0925; Atlas 500 ATC guide) ----------
@pytest.mark.parametrize("name, size", [("crop_size_w", (51, 28)), ("crop_size_h", (52, 27))])
def test_config_refuses_an_odd_yuv420sp_crop_size(name, size):
    """The documented rule: for YUV420SP_U8 crop_size_w and crop_size_h are even (a 4:2:0 chroma sample covers 2x2
    pixels). Each odd size alone is refused, the message names the field."""
    with pytest.raises(ConfigError, match=f"{name} must be even"):
        AippConfig(input_format="YUV420SP_U8", src_image_size_w=64, src_image_size_h=32, crop=True,
                   load_start_pos_w=2, load_start_pos_h=2, crop_size_w=size[0], crop_size_h=size[1])


def test_even_yuv420sp_crop_and_odd_rgb888_crop_are_accepted():
    AippConfig(input_format="YUV420SP_U8", src_image_size_w=64, src_image_size_h=32, crop=True,
               load_start_pos_w=2, load_start_pos_h=2, crop_size_w=52, crop_size_h=28)
    AippConfig(input_format="RGB888_U8", src_image_size_w=64, src_image_size_h=32, crop=True,  # rule is YUV420SP's
               load_start_pos_w=1, load_start_pos_h=1, crop_size_w=51, crop_size_h=27)


def test_stage_list_with_an_odd_trailing_crop_is_refused_with_the_reason():
    """Resize to 128x64, then Crop 127x63 at (0, 0): AIPP would have to crop 127x63 out of the NV12 picture, an odd
    YUV420SP_U8 crop size."""
    stages = [Decode(), Resize(size=(64, 128)), Crop(0, 0, 127, 63), Normalise(mean=(123.675, 116.28, 103.53),
                                                                              std=(58.395, 57.12, 57.375), to_rgb=True)]
    with pytest.raises(ConfigError, match="even size .*127x63"):
        aipp_for_stages(stages, (128, 256), colour_standard="jpeg_full")
    even = aipp_for_stages(stages[:2] + [Crop(0, 0, 126, 62)] + stages[3:], (128, 256), colour_standard="jpeg_full")
    assert (even.config.crop_size_w, even.config.crop_size_h) == (126, 62)


def test_dynamic_calls_refuse_a_padding_value_no_setter_takes():
    """set_aipp_padding_params takes the switch, four sizes and the batch index, no value (aclpythondevg_01_0188):
    a non-zero padding_value cannot reach the device through dynamic AIPP; dropping it would pad with something else."""
    cfg = aipp_for((123.675, 116.28, 103.53), (58.395, 57.12, 57.375), channel_order="rgb",
                   colour_standard="jpeg_full", src_size=(32, 64), content_size=(30, 64), out_size=(32, 64),
                   padding_value=-0.5)
    with pytest.raises(ConfigError, match="padding_value -0.5 cannot be set through dynamic AIPP"):
        dynamic_aipp_calls(cfg)
    assert dynamic_aipp_calls(cfg.replace(padding_value=0.0))  # the value the device's padding is assumed to hold


def test_vpc_filter_refusal_no_longer_says_undocumented():
    """The resize filter is set explicitly (acldvppSetResizeConfigInterpolation 1, aclcppdevg_03_0820): a refusal
    of another filter names that, not an open question."""
    import dvpipe as dv
    from dvpipe.backends.dvpp.support import plan_step
    from dvpipe.planner import input_spec

    cam = Camera("C", width=1600, height=900)
    verdict, program = plan_step([Decode(), Resize(scale=0.5, interpolation="nearest")], input_spec(cam), cam,
                                 dv.Target("Ascend310P3", "7.0.0"))
    assert program is None and not verdict.ok
    assert "aclcppdevg_03_0820" in verdict.reason and "not documented" not in verdict.reason


# -- runtime-fallback frames in the slot's colour standard (issue 26 point 7) ------------------------
def _blocky_bgr(w: int, h: int, seed: int) -> np.ndarray:
    """Colours constant over each 2x2 block (so 4:2:0 chroma loses nothing), spanning the gamut."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 2, w // 2, 3), dtype=np.uint8)
    return np.repeat(np.repeat(small, 2, 0), 2, 1)


@pytest.mark.parametrize("standard", ["jpeg_full", "bt601_narrow", "bt709_narrow"])
def test_a_fallback_frame_uploaded_into_a_slot_reaches_aipp_with_its_colours(standard):
    """A frame the DVPP step's fallback decoded on the CPU is written into the slot as NV12 in the slot's colour
    standard, so that the model's AIPP (whose CSC is for that standard) gives the frame's colours back. It was
    written full-range BT.601 whatever the slot's standard: ~16 grey levels of gain/offset for video cameras."""
    import types

    import dvpipe as dv
    from dvpipe.backends.dvpp import _acl
    from dvpipe.backends.dvpp.route import _kernel
    from dvpipe.device import DeviceBatch

    w, h = 64, 32
    bgr = _blocky_bgr(w, h, seed=7)
    rt = _acl.runtime("sim", dv.Target("Ascend310P3", "7.0.0"))
    batch = DeviceBatch(rt, 1, w, h, (w, h), rt.name, {"colour_standard": standard})
    try:
        ctx = types.SimpleNamespace(slot=batch[0], out=None, device_spans=[])
        _kernel(bgr, (), ctx)
        nv12 = np.asarray(batch[0].to_host()).reshape(h * 3 // 2, w)
    finally:
        batch.close()
    cfg = aipp_for((0, 0, 0), (1, 1, 1), channel_order="bgr", colour_standard=standard, src_size=(h, w),
                   content_size=(h, w), out_size=(h, w))
    got = apply_aipp(cfg, nv12, dtype=np.float32)[0].transpose(1, 2, 0)
    err = np.abs(got - bgr.astype(np.float32))
    # 8-bit fixed-point CSC (>> 8 truncates, coefficients rounded to 1/256) and 8-bit YUV rounding: a few levels;
    # saturated colours clip where the narrow range cannot hold them exactly
    assert err.max() <= 3 and err.mean() < 1.0, (err.max(), err.mean())  # measured: max 2, mean 0.57-0.64


def test_video_camera_colour_standard_from_its_rig_keys():
    """A stream whose VUI signals BT.709 is declared with yuv_matrix: bt709 on its camera; the plan's AIPP then
    converts with the BT.709 narrow matrix (ATC CSC page, atlasatc_16_0021: r0c2 459) and the slot says so."""
    import dvpipe as dv
    from dvpipe.backends.dvpp.route import _colour_standard
    from dvpipe.planner import plan_pipeline

    assert _colour_standard(Camera("V", width=1920, height=1080, encoding="h264")) == "bt601_narrow"
    cam = Camera("V", width=1600, height=900, encoding="h264", extra={"yuv_matrix": "bt709"})
    assert _colour_standard(cam) == "bt709_narrow"
    assert _colour_standard(Camera("J", width=1600, height=900, encoding="jpeg",
                                   extra={"yuv_matrix": "bt709"})) == "jpeg_full"
    plan = plan_pipeline([cam], profile_stages("bevformer-tiny", "fast", cam), ("dvpp-sim", "aipp-sim", "cpu"),
                         fidelity="fast", target=dv.Target("Ascend310P3", "7.0.0"))
    assert plan.device_batch is not None, str(plan)
    assert plan.device_batch["colour_standard"] == "bt709_narrow"
    cfg = plan.device_batch["aipp"]
    assert (cfg.matrix_r0c0, cfg.matrix_r0c2, cfg.input_bias_0) == (298, 459, 16)
