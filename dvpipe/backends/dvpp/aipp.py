"""AIPP (the AI Core's input pre-processing): the ATC ``aipp_op`` configuration and its arithmetic.

Pure numpy; no ``acl`` import. Nothing here has run on Ascend hardware: the numeric model below
implements the arithmetic the CANN documentation writes down, and the places where the
documentation is silent are marked *assumption*.

What an ``aipp_op`` does, in the documented order (ATC tool guide, "Configuration File Template",
General Restrictions, atlasatc_16_0025, CANN 8.0.0: "channel swap (rbuv_swap_switch) -> cropping
-> CSC -> mean subtraction/normalization -> padding"):

1. **swap**: ``rbuv_swap_switch`` swaps U/V of a YUV input (NV21 -> NV12) or R/B of an RGB input.
2. **crop**: the window ``(load_start_pos_w, load_start_pos_h, crop_size_w, crop_size_h)``; for
   YUV420SP_U8 the start must be even (ATC guide, "Cropping and Padding Configuration",
   atlasatc_16_0023, CANN 8.0.0). 4:2:0 chroma becomes 4:4:4 (*assumption*: each chroma sample
   serves its 2x2 block, nearest; the documentation says only that YUV input is completed to
   YUV444, CANN Kit "AIPP参数").
3. **CSC** in 8-bit fixed point: ``out_i = (sum_j matrix_rIcJ * (in_j - input_bias_j)) >> 8``
   (YUV -> RGB/BGR) or ``out_i = ((sum_j matrix_rIcJ * in_j) >> 8) + output_bias_i`` (RGB -> YUV)
   (ATC guide, "CSC Configuration", atlasatc_16_0021, CANN 8.0.0; pyACL
   ``acl.mdl.set_aipp_csc_params``, aclpythondevg_01_0173, CANN 8.5.0). ``>> 8`` is an arithmetic
   shift (floor), with no rounding term, as written. The result is saturated to 0..255
   (*assumption*: the next stage is documented as a uint8 -> fp16 conversion).
   Output channel ``i`` is matrix row ``i``: the documented "YUV420SP_U8 to BGR" matrices are the
   "to RGB" ones with rows 0 and 2 exchanged.
4. **DTC** (normalisation): ``pixel_out = (pixel_in - mean_chn_i - min_chn_i) * var_reci_chn_i``
   (ATC guide, "Normalization Configuration", atlasatc_16_0022, CANN 8.0.0); ``mean_chn_i`` is an
   integer in 0..255 (``aclmdlSetAIPPDtcPixelMean``, CANN 8.0.0 aclcppdevg_03_1422), ``min_chn_i`` a float
   in [0, 255] (``aclmdlSetAIPPDtcPixelMin``, aclcppdevg_03_1423) and ``var_reci_chn_i`` a float in
   [-65504, 65504] (``aclmdlSetAIPPPixelVarReci``, aclcppdevg_03_1424). That last range is fp16's, so
   this model stores ``min_chn`` and ``var_reci_chn`` as fp16 (*assumption*),
   computes in float32 and rounds the result to fp16 once (the model input is fp16).
5. **padding**: ``left/right/top/bottom_padding_size`` (each 0..32) filled with ``padding_value``
   after normalisation, i.e. in output units; the padded width must be <= 1080 (pyACL
   ``set_aipp_padding_params``, aclpythondevg_01_0188, CANN 8.0.0, Restrictions).

``mean_chn`` / ``min_chn`` split: :func:`aipp_for` writes ``mean_chn_i = floor(mean_i)`` and
``min_chn_i = mean_i - floor(mean_i)`` (a fraction in [0, 1)). The integer part is subtracted
exactly; only the fraction goes through fp16, where its error is below 2**-12 pixel units. Writing
``min_chn_i = mean_i`` and ``mean_chn_i = 0`` instead would round e.g. 123.675 to fp16's 1/16
grid (123.6875, an error of 0.0125 pixel units, 2e-4 after dividing by std 58).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from typing import Any, Optional, Sequence

import numpy as np

from ...errors import ConfigError

__all__ = ["AippConfig", "COLOUR_STANDARDS", "CSC_MATRICES", "aipp_for", "apply_aipp", "dynamic_aipp_calls",
           "AIPP_SET", "MODEL_ID", "DATASET", "INPUT_FORMATS", "ACL_AIPP_INPUT_FORMAT", "MAX_PADDING",
           "MAX_PADDED_WIDTH", "AippRoute", "aipp_for_stages", "parse_cfg_blocks", "recolour", "SRC_W_RANGE",
           "SRC_H_RANGE", "CSC_MATRIX_RANGE"]

#: The source colour standards :func:`aipp_for` knows (ATC guide, "CSC Configuration",
#: atlasatc_16_0021: JPEG, BT-601NARROW, BT-601WIDE, BT-709NARROW, BT-709WIDE). JPEG is JFIF's
#: full-range BT.601; "wide" is the ATC guide's word for full range.
COLOUR_STANDARDS = ("jpeg_full", "bt601_narrow", "bt601_full", "bt709_narrow", "bt709_full")

#: YUV -> **RGB** matrices (rows R, G, B; columns Y, U, V; 8-bit fixed point) and input biases from
#: the ATC guide's "CSC Configuration" page ("色域转换配置说明", atlasatc_16_0021, CANN 8.0.RC3 / 8.0.0),
#: section "YUV420SP_U8 to RGB"; BGR output swaps rows 0 and 2 (the page's "YUV420SP_U8 to BGR").
#: The JPEG and BT-601NARROW blocks were read on hiascend.com; the hiascend.com excerpts read here end
#: before the BT-709 blocks, which come from a markdown copy of the same page (public code index,
#: repository not identified). Older copies (Atlas 500 "色域转换配置说明", 2021; HarmonyOS CANN Kit
#: "AIPP参数") print BT-709NARROW as 460 / -137; the markdown copy prints 459 / -136, which is also
#: round(256 * 1.7927) and round(256 * -0.5329). dvpipe uses 459 / -136 (the two differ by < 1 level).
CSC_MATRICES: dict[str, tuple[tuple[tuple[int, int, int], ...], tuple[int, int, int]]] = {
    "jpeg_full": (((256, 0, 359), (256, -88, -183), (256, 454, 0)), (0, 128, 128)),
    "bt601_narrow": (((298, 0, 409), (298, -100, -208), (298, 516, 0)), (16, 128, 128)),
    "bt601_full": (((256, 0, 359), (256, -88, -183), (256, 454, 0)), (0, 128, 128)),
    "bt709_narrow": (((298, 0, 459), (298, -55, -136), (298, 541, 0)), (16, 128, 128)),
    "bt709_full": (((256, 0, 403), (256, -48, -120), (256, 475, 0)), (0, 128, 128)),
}

#: The ``input_format`` values this model implements (of those ATC accepts).
INPUT_FORMATS = ("YUV420SP_U8", "RGB888_U8")
#: pyACL ``aclAippInputFormat`` values (aclpythondevg_01_0935, CANN 8.0.0).
ACL_AIPP_INPUT_FORMAT = {"YUV420SP_U8": 1, "XRGB8888_U8": 2, "RGB888_U8": 3, "YUV400_U8": 4}
#: ``src_image_size`` width / height ranges (``aclmdlSetAIPPSrcImageSize``, CANN 6.0.1 aclcppdevg_03_0707,
#: CANN 8.0.0 aclcppdevg_03_1418: "[2, 4096]" / "[1, 4096]"; 0 in a static block: the model input's size).
SRC_W_RANGE = (2, 4096)
SRC_H_RANGE = (1, 4096)
#: CSC matrix coefficient range as printed (``aclmdlSetAIPPCscParams``, CANN 8.0.RC1 aclcppdevg_03_1317:
#: "[-32677, 32676]", narrower than int16; the printed range is the one enforced).
CSC_MATRIX_RANGE = (-32677, 32676)
#: Largest padding on one side (pyACL ``set_aipp_padding_params``: "Value range: [0, 32]").
MAX_PADDING = 32
#: Largest width after padding (pyACL ``set_aipp_padding_params`` Restrictions: "<= 1080").
MAX_PADDED_WIDTH = 1080

#: Placeholders in :func:`dynamic_aipp_calls`' argument tuples, replaced by the caller at run time:
#: the handle ``acl.mdl.create_aipp`` returned, the loaded model's id and the input dataset.
AIPP_SET = "$aipp_parms_set"
MODEL_ID = "$model_id"
DATASET = "$dataset"

# keys of the documented aipp_op grammar that dvpipe's model does not implement (insert_op.proto,
# mindspore-ai/graphengine src/proto/insert_op.proto; CANN Kit "AIPP参数"): refused by name
_UNSUPPORTED_KEYS = ("input_edge_idx", "support_rotation", "single_line_mode", "cpadding_value", "resize",
                     "resize_output_w", "resize_output_h", "rotation_angle", "padding_value_chn_0",
                     "padding_value_chn_1", "padding_value_chn_2", "padding_value_chn_3")


@dataclass(frozen=True)
class AippConfig:
    """One ``aipp_op`` block; every field is the ATC ``aipp_op`` parameter of the same name.

    Defaults: every switch off, means, minima, biases and matrix 0, ``var_reci`` 1.0 (the default the
    pyACL setter documents, aclpythondevg_01_0182); :meth:`from_cfg` requires all nine ``matrix_r*c*``
    when ``csc_switch`` is on rather than assume ATC's template values.
    ``aipp_mode="dynamic"`` blocks carry only ``related_input_rank`` and ``max_src_image_size``;
    the parameters then come at run time through :func:`dynamic_aipp_calls`.

    Sizes are pixels; ``src_image_size_w/h`` is the picture AIPP reads (for a DVPP output: its
    stride-aligned size), the crop selects the valid content, the padding grows it to the model's
    input size.
    """

    aipp_mode: str = "static"
    related_input_rank: int = 0
    max_src_image_size: int = 0
    input_format: str = "YUV420SP_U8"
    src_image_size_w: int = 0
    src_image_size_h: int = 0
    crop: bool = False
    load_start_pos_w: int = 0
    load_start_pos_h: int = 0
    crop_size_w: int = 0
    crop_size_h: int = 0
    csc_switch: bool = False
    rbuv_swap_switch: bool = False
    ax_swap_switch: bool = False
    matrix_r0c0: int = 0
    matrix_r0c1: int = 0
    matrix_r0c2: int = 0
    matrix_r1c0: int = 0
    matrix_r1c1: int = 0
    matrix_r1c2: int = 0
    matrix_r2c0: int = 0
    matrix_r2c1: int = 0
    matrix_r2c2: int = 0
    output_bias_0: int = 0
    output_bias_1: int = 0
    output_bias_2: int = 0
    input_bias_0: int = 0
    input_bias_1: int = 0
    input_bias_2: int = 0
    mean_chn_0: int = 0
    mean_chn_1: int = 0
    mean_chn_2: int = 0
    mean_chn_3: int = 0
    min_chn_0: float = 0.0
    min_chn_1: float = 0.0
    min_chn_2: float = 0.0
    min_chn_3: float = 0.0
    var_reci_chn_0: float = 1.0
    var_reci_chn_1: float = 1.0
    var_reci_chn_2: float = 1.0
    var_reci_chn_3: float = 1.0
    padding: bool = False
    left_padding_size: int = 0
    right_padding_size: int = 0
    top_padding_size: int = 0
    bottom_padding_size: int = 0
    padding_value: float = 0.0

    def __post_init__(self) -> None:
        if self.aipp_mode not in ("static", "dynamic"):
            raise ConfigError(f"aipp_mode must be 'static' or 'dynamic', got {self.aipp_mode!r}")
        if self.aipp_mode == "dynamic":
            return
        if self.input_format not in INPUT_FORMATS:
            raise ConfigError(f"input_format {self.input_format!r} is not modelled; supported: "
                              f"{', '.join(INPUT_FORMATS)}")
        w, h = self.src_image_size_w, self.src_image_size_h
        if (w or h) and not (SRC_W_RANGE[0] <= w <= SRC_W_RANGE[1] and SRC_H_RANGE[0] <= h <= SRC_H_RANGE[1]):
            raise ConfigError(f"src_image_size must be 0 (the model's input size) or width in {list(SRC_W_RANGE)}, height "
                              f"in {list(SRC_H_RANGE)}, got {w}x{h} (aclmdlSetAIPPSrcImageSize, CANN 8.0.0 "
                              "aclcppdevg_03_1418)")
        yuv = self.input_format == "YUV420SP_U8"
        if yuv and (w % 2 or h % 2):
            raise ConfigError(f"YUV420SP_U8 needs an even src_image_size, got {w}x{h}")
        if self.crop:
            if not (1 <= self.crop_size_w <= 4096 and 1 <= self.crop_size_h <= 4096):
                raise ConfigError(f"crop: true needs crop_size_w/h in [1, 4096], got {self.crop_size_w}x"
                                  f"{self.crop_size_h} (aclmdlSetAIPPCropParams, CANN 8.0.0 aclcppdevg_03_1420)")
            if not (0 <= self.load_start_pos_w <= 4095 and 0 <= self.load_start_pos_h <= 4095):
                raise ConfigError(f"load_start_pos_w/h must be in [0, 4095], got ({self.load_start_pos_w}, "
                                  f"{self.load_start_pos_h}) (aclmdlSetAIPPCropParams, aclcppdevg_03_1420)")
            if yuv and (self.load_start_pos_w % 2 or self.load_start_pos_h % 2):
                raise ConfigError("YUV420SP_U8: load_start_pos_w/h must be even (ATC, Cropping and Padding "
                                  f"Configuration), got ({self.load_start_pos_w}, {self.load_start_pos_h})")
            for name in ("crop_size_w", "crop_size_h"):  # aclAippInfo (CANN 8.5.0 aclpythondevg_01_0925), Atlas 500 ATC guide
                if yuv and getattr(self, name) % 2:
                    raise ConfigError(f"YUV420SP_U8: {name} must be even (aclAippInfo), got {getattr(self, name)}")
            if w and h and (self.load_start_pos_w + self.crop_size_w > w
                            or self.load_start_pos_h + self.crop_size_h > h):
                raise ConfigError(f"crop window ({self.load_start_pos_w}, {self.load_start_pos_h}) + "
                                  f"{self.crop_size_w}x{self.crop_size_h} leaves the {w}x{h} source")
        if self.padding:
            sizes = (self.left_padding_size, self.right_padding_size, self.top_padding_size, self.bottom_padding_size)
            if any(s < 0 or s > MAX_PADDING for s in sizes):
                raise ConfigError(f"padding sizes must be 0..{MAX_PADDING} per side, got left/right/top/bottom {sizes}")
            # the padded width is known from the crop size with crop on, else from src_image_size (0 there: the
            # model's input size, not known here)
            if (self.crop or w) and self.output_hw[1] > MAX_PADDED_WIDTH:
                raise ConfigError(f"the padded width {self.output_hw[1]} exceeds AIPP's {MAX_PADDED_WIDTH} "
                                  "(acl.mdl.set_aipp_padding_params restrictions)")
        for r in range(3):
            for c in range(3):
                m = getattr(self, f"matrix_r{r}c{c}")
                if not CSC_MATRIX_RANGE[0] <= m <= CSC_MATRIX_RANGE[1]:
                    raise ConfigError(f"matrix_r{r}c{c} must be in {list(CSC_MATRIX_RANGE)}, got {m} "
                                      "(aclmdlSetAIPPCscParams, CANN 8.0.RC1 aclcppdevg_03_1317)")
        for i in range(3):
            for name in (f"input_bias_{i}", f"output_bias_{i}"):
                if not 0 <= getattr(self, name) <= 255:
                    raise ConfigError(f"{name} must be in [0, 255] (uint8_t, aclmdlSetAIPPCscParams), got "
                                      f"{getattr(self, name)}")
        for i in range(4):
            m = getattr(self, f"mean_chn_{i}")
            if not 0 <= m <= 255:
                raise ConfigError(f"mean_chn_{i} must be an integer in 0..255, got {m} (aclmdlSetAIPPDtcPixelMean, "
                                  "CANN 8.0.0 aclcppdevg_03_1422)")
            v = getattr(self, f"min_chn_{i}")
            if not (math.isfinite(v) and 0 <= v <= 255):
                raise ConfigError(f"min_chn_{i} must be in [0, 255], got {v} (aclmdlSetAIPPDtcPixelMin, CANN 8.0.0 "
                                  "aclcppdevg_03_1423)")
            v = getattr(self, f"var_reci_chn_{i}")
            if not (math.isfinite(v) and abs(v) <= 65504):
                raise ConfigError(f"var_reci_chn_{i} must be in [-65504, 65504], got {v} (aclmdlSetAIPPPixelVarReci, "
                                  "CANN 8.0.0 aclcppdevg_03_1424)")

    # -- geometry -----------------------------------------------------------------------------
    @property
    def output_hw(self) -> tuple[int, int]:
        """``(height, width)`` of the tensor the model receives (crop, then padding)."""
        h, w = (self.crop_size_h, self.crop_size_w) if self.crop else (self.src_image_size_h, self.src_image_size_w)
        if self.padding:
            h += self.top_padding_size + self.bottom_padding_size
            w += self.left_padding_size + self.right_padding_size
        return h, w

    @property
    def matrix(self) -> np.ndarray:
        """The CSC matrix as a 3x3 int32 array (row = output channel)."""
        return np.array([[getattr(self, f"matrix_r{r}c{c}") for c in range(3)] for r in range(3)], np.int32)

    # -- text form ----------------------------------------------------------------------------
    def to_cfg(self) -> str:
        """The ``aipp_op { ... }`` block for ``atc --insert_op_conf`` (prototxt text format).

        Static blocks write every field that takes part in the configured switches; dynamic blocks
        write ``aipp_mode``, ``related_input_rank`` and ``max_src_image_size`` only (ATC guide,
        "Dynamic AIPP").
        """
        lines = ["aipp_op {"]

        def put(name: str) -> None:
            lines.append(f"    {name} : {_fmt(getattr(self, name))}")

        put("aipp_mode")
        put("related_input_rank")
        if self.aipp_mode == "dynamic":
            put("max_src_image_size")
            return "\n".join(lines + ["}"]) + "\n"
        for name in ("input_format", "src_image_size_w", "src_image_size_h", "crop"):
            put(name)
        if self.crop:
            for name in ("load_start_pos_w", "load_start_pos_h", "crop_size_w", "crop_size_h"):
                put(name)
        for name in ("csc_switch", "rbuv_swap_switch", "ax_swap_switch"):
            put(name)
        if self.csc_switch:
            for r in range(3):
                for c in range(3):
                    put(f"matrix_r{r}c{c}")
            for name in ("output_bias", "input_bias"):
                for i in range(3):
                    put(f"{name}_{i}")
        for stem in ("mean_chn", "min_chn", "var_reci_chn"):
            for i in range(4):
                put(f"{stem}_{i}")
        put("padding")
        if self.padding:
            for name in ("left_padding_size", "right_padding_size", "top_padding_size", "bottom_padding_size",
                         "padding_value"):
                put(name)
        return "\n".join(lines + ["}"]) + "\n"

    @classmethod
    def from_cfg(cls, text: str) -> "AippConfig":
        """Parse one ``aipp_op { ... }`` block (what :meth:`to_cfg` writes, or a hand-written file of
        the same grammar: ``key : value`` or ``key: value`` lines, ``#`` comments). A file with several
        blocks: use :func:`parse_cfg_blocks`.

        Raises:
            ConfigError: unknown or unsupported keys, bad values, or not exactly one block.
        """
        blocks = parse_cfg_blocks(text)
        if len(blocks) != 1:
            raise ConfigError(f"expected one aipp_op block, found {len(blocks)}; use parse_cfg_blocks for several")
        return blocks[0]

    def replace(self, **changes: Any) -> "AippConfig":
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)


_FIELD_TYPES = {f.name: f.type for f in fields(AippConfig)}
_BOOL_FIELDS = {n for n, t in _FIELD_TYPES.items() if t == "bool"}
_FLOAT_FIELDS = {n for n, t in _FIELD_TYPES.items() if t == "float"}
_STR_FIELDS = {"aipp_mode", "input_format"}


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(float(value))  # shortest text that reads back to the same double
    return str(value)


# prototxt tokens: '{', '}', 'key : value' (value up to whitespace or a brace; quoted allowed), a bare word
_TOKEN = re.compile(r'\{|\}|([A-Za-z_]\w*)\s*:\s*("[^"\n]*"|[^\s{}"]+)|([A-Za-z_]\w*)\s*:?|(\S)')


def parse_cfg_blocks(text: str) -> list[AippConfig]:
    """All ``aipp_op { ... }`` blocks of an ``--insert_op_conf`` file, in order (prototxt text: ``key : value``
    or ``key: value`` pairs, one or several per line, ``#`` comments)."""
    blocks: list[AippConfig] = []
    body = "\n".join(ln.split("#", 1)[0] for ln in text.splitlines())
    current: dict[str, Any] | None = None
    opened = False  # 'aipp_op' seen, '{' not yet
    for m in _TOKEN.finditer(body):
        lineno = body.count("\n", 0, m.start()) + 1
        tok = m.group(0)
        if tok == "{":
            if not opened:
                raise ConfigError(f"line {lineno}: '{{' without 'aipp_op' before it")
            opened, current = False, {}
        elif tok == "}":
            if current is None:
                raise ConfigError(f"line {lineno}: '}}' without an open aipp_op block")
            blocks.append(_build(current, lineno))
            current = None
        elif m.group(1) is not None:
            key, value = m.group(1), m.group(2)
            if current is None:
                raise ConfigError(f"line {lineno}: {key!r} outside an aipp_op {{ ... }} block")
            if key in _UNSUPPORTED_KEYS:
                raise ConfigError(f"line {lineno}: aipp_op key {key!r} is valid ATC but not modelled by dvpipe")
            if key not in _FIELD_TYPES:
                raise ConfigError(f"line {lineno}: unknown aipp_op key {key!r}")
            if key in current:
                raise ConfigError(f"line {lineno}: {key} given twice")
            current[key] = _value(key, value, lineno)
        elif m.group(3) is not None and m.group(3) == "aipp_op" and current is None and not opened:
            opened = True
        else:
            where = "inside a block" if current is not None else "at the top level"
            raise ConfigError(f"line {lineno}: unexpected {tok.strip()!r} {where} (expected 'key : value' pairs in "
                              "'aipp_op { ... }')")
    if current is not None or opened:
        raise ConfigError("unterminated aipp_op block (missing '}')")
    return blocks


def _value(key: str, text: str, lineno: int) -> Any:
    text = text.strip().strip('"')
    try:
        if key in _BOOL_FIELDS:
            if text.lower() not in ("true", "false"):
                raise ValueError  # builtin on purpose: caught just below
            return text.lower() == "true"
        if key in _STR_FIELDS:
            return text
        if key in _FLOAT_FIELDS:
            return float(text)
        return int(text)
    except ValueError:
        raise ConfigError(f"line {lineno}: {key}: cannot read {text!r} as {_FIELD_TYPES[key]}") from None


def _build(values: dict[str, Any], lineno: int) -> AippConfig:
    if values.get("csc_switch") and not all(f"matrix_r{r}c{c}" in values for r in range(3) for c in range(3)):
        raise ConfigError(f"block ending line {lineno}: csc_switch: true without all nine matrix_r*c* "
                          "(dvpipe does not assume ATC's template defaults)")
    try:
        return AippConfig(**values)
    except ConfigError as e:
        raise ConfigError(f"block ending line {lineno}: {e}") from None


# -- derivation --------------------------------------------------------------------------------
def aipp_for(mean: Sequence[float], std: Sequence[float], *, channel_order: str, colour_standard: str,
             src_size: tuple[int, int], content_size: tuple[int, int], out_size: tuple[int, int],
             padding_value: float = 0.0, related_input_rank: int = 0) -> AippConfig:
    """The static ``aipp_op`` that turns a DVPP NV12 picture into a profile's normalised tensor.

    Args:
        mean: per-channel mean in the model's channel order, 0..255 units (mmdet3d ``img_norm_cfg``).
        std: per-channel std, same order and units (> 0).
        channel_order: ``rgb`` or ``bgr``, the order of the model's input channels.
        colour_standard: the NV12 picture's YCbCr standard, one of :data:`COLOUR_STANDARDS`
            (``jpeg_full`` for JPEGD output; ``bt601_narrow`` / ``bt709_narrow`` for most video).
        src_size: ``(height, width)`` in pixels of the picture AIPP reads: the DVPP output's
            stride-aligned size (``src_image_size_h/w``).
        content_size: ``(height, width)`` in pixels of the valid picture at the top-left of it (the
            crop window).
        out_size: ``(height, width)`` in pixels of the model input after bottom/right padding (the
            size divisor).
        padding_value: value of the padded area in output (normalised) units; the reference pads the
            normalised image with 0.

    Raises:
        ConfigError: anything AIPP cannot express (sizes, padding over 32 per side or past width
            1080, a mean outside 0..255, an unknown standard or order).
    """
    if colour_standard not in CSC_MATRICES:
        raise ConfigError(f"unknown colour standard {colour_standard!r}; known: {', '.join(COLOUR_STANDARDS)}")
    if channel_order not in ("rgb", "bgr"):
        raise ConfigError(f"channel_order must be 'rgb' or 'bgr', got {channel_order!r}")
    mean = [float(m) for m in mean]
    std = [float(s) for s in std]
    if len(mean) != 3 or len(std) != 3:
        raise ConfigError(f"mean and std need three values each, got {len(mean)} and {len(std)}")
    if any(not (0.0 <= m <= 255.0) for m in mean):
        raise ConfigError(f"AIPP's mean_chn is 0..255; mean {mean} is outside")
    if any(not (s > 0 and math.isfinite(s)) for s in std):
        raise ConfigError(f"std must be positive, got {std}")
    sh, sw = (int(v) for v in src_size)
    ch, cw = (int(v) for v in content_size)
    oh, ow = (int(v) for v in out_size)
    if cw > sw or ch > sh or cw <= 0 or ch <= 0:
        raise ConfigError(f"content {cw}x{ch} must lie inside the source picture {sw}x{sh}")
    if ow < cw or oh < ch:
        raise ConfigError(f"output {ow}x{oh} is smaller than the content {cw}x{ch}; AIPP only pads (no resize here)")
    right, bottom = ow - cw, oh - ch
    if right > MAX_PADDING or bottom > MAX_PADDING:
        raise ConfigError(f"padding {cw}x{ch} to {ow}x{oh} needs right {right} / bottom {bottom}; AIPP pads at most "
                          f"{MAX_PADDING} per side (acl.mdl.set_aipp_padding_params)")
    if (right or bottom) and ow > MAX_PADDED_WIDTH:
        raise ConfigError(f"AIPP padding allows a padded width of at most {MAX_PADDED_WIDTH}, this output is {ow} wide "
                          "(acl.mdl.set_aipp_padding_params restrictions); pad in the model or on the host instead")
    rows, bias = CSC_MATRICES[colour_standard]
    if channel_order == "bgr":
        rows = (rows[2], rows[1], rows[0])
    kw: dict[str, Any] = {f"matrix_r{r}c{c}": rows[r][c] for r in range(3) for c in range(3)}
    kw.update({f"input_bias_{i}": bias[i] for i in range(3)})
    for i in range(3):
        whole = int(math.floor(mean[i]))
        kw[f"mean_chn_{i}"] = whole
        kw[f"min_chn_{i}"] = round(mean[i] - whole, 10)
        kw[f"var_reci_chn_{i}"] = 1.0 / std[i]
    crop = (cw, ch) != (sw, sh)
    pad = bool(right or bottom)
    return AippConfig(
        related_input_rank=related_input_rank, input_format="YUV420SP_U8", src_image_size_w=sw, src_image_size_h=sh,
        crop=crop, load_start_pos_w=0, load_start_pos_h=0, crop_size_w=cw if crop else 0, crop_size_h=ch if crop else 0,
        csc_switch=True, rbuv_swap_switch=False, padding=pad, right_padding_size=right, bottom_padding_size=bottom,
        padding_value=float(padding_value) if pad else 0.0, **kw)


def recolour(cfg: AippConfig, colour_standard: str) -> AippConfig:
    """``cfg`` with the CSC matrix and input biases of ``colour_standard`` (same channel order: row 0 uses V
    for R, U for B), everything else kept."""
    if colour_standard not in CSC_MATRICES:
        raise ConfigError(f"unknown colour standard {colour_standard!r}; known: {', '.join(COLOUR_STANDARDS)}")
    rows, bias = CSC_MATRICES[colour_standard]
    if cfg.matrix_r0c2 == 0:  # BGR output: row 0 is B
        rows = (rows[2], rows[1], rows[0])
    kw: dict[str, Any] = {f"matrix_r{r}c{c}": rows[r][c] for r in range(3) for c in range(3)}
    kw.update({f"input_bias_{i}": bias[i] for i in range(3)})
    return cfg.replace(**kw)


# -- numeric model -----------------------------------------------------------------------------
def apply_aipp(cfg: AippConfig, images: np.ndarray, *, dtype: Any = np.float16) -> np.ndarray:
    """Run ``cfg``'s documented arithmetic on a batch (the software device's AIPP).

    Args:
        cfg: a static :class:`AippConfig`.
        images: ``(N, src_h * 3 // 2, src_w)`` uint8 NV12 (Y plane, then interleaved U V rows) for
            ``YUV420SP_U8``; ``(N, src_h, src_w, 3)`` uint8 packed for ``RGB888_U8``. One picture
            without the batch axis is accepted too.
        dtype: output type; ``float16`` is what the model receives. ``float32`` skips only the final
            fp16 rounding (for measuring what fp16 costs).

    Returns:
        ``(N, 3, out_h, out_w)`` of ``dtype`` (float16), NCHW, channels in the order the CSC matrix rows
        give (without CSC: the input's channel order, after ``rbuv_swap_switch``).

    Raises:
        ConfigError: a dynamic config, or images of the wrong dtype or shape.
    """
    if cfg.aipp_mode != "static":
        raise ConfigError("apply_aipp needs a static aipp_op; a dynamic one gets its parameters at run time")
    arr = np.asarray(images)
    if arr.dtype != np.uint8:
        raise ConfigError(f"AIPP input must be uint8, got {arr.dtype}")
    sw, sh = cfg.src_image_size_w, cfg.src_image_size_h
    if cfg.input_format == "YUV420SP_U8":
        if arr.ndim == 2:
            arr = arr[None]
        if arr.ndim != 3 or arr.shape[1:] != (sh * 3 // 2, sw):
            raise ConfigError(f"YUV420SP_U8 {sw}x{sh} expects (N, {sh * 3 // 2}, {sw}) uint8, got {arr.shape}")
        n = arr.shape[0]
        y = arr[:, :sh, :]
        uv = arr[:, sh:, :].reshape(n, sh // 2, sw // 2, 2)
        if cfg.rbuv_swap_switch:
            uv = uv[..., ::-1]
        chans = [y, uv[..., 0], uv[..., 1]]
        full = [False, True, True]
    else:
        if arr.ndim == 3:
            arr = arr[None]
        if arr.ndim != 4 or arr.shape[1:] != (sh, sw, 3):
            raise ConfigError(f"RGB888_U8 {sw}x{sh} expects (N, {sh}, {sw}, 3) uint8, got {arr.shape}")
        n = arr.shape[0]
        order = (2, 1, 0) if cfg.rbuv_swap_switch else (0, 1, 2)
        chans = [arr[..., k] for k in order]
        full = [False, False, False]
    if cfg.crop:
        x0, y0, cw, ch = cfg.load_start_pos_w, cfg.load_start_pos_h, cfg.crop_size_w, cfg.crop_size_h
    else:
        x0, y0, cw, ch = 0, 0, sw, sh
    planes = []
    for c, sub in zip(chans, full):
        if sub:  # 4:2:0 chroma -> 4:4:4, each sample serving its 2x2 block (assumption, see module doc)
            c = c[:, y0 // 2:(y0 + ch + 1) // 2, x0 // 2:(x0 + cw + 1) // 2]
            c = np.repeat(np.repeat(c, 2, axis=1), 2, axis=2)[:, :ch, :cw]
        else:
            c = c[:, y0:y0 + ch, x0:x0 + cw]
        planes.append(c.astype(np.int32))
    if cfg.csc_switch:
        m = cfg.matrix
        if cfg.input_format == "YUV420SP_U8":
            ins = [planes[j] - getattr(cfg, f"input_bias_{j}") for j in range(3)]
            planes = [np.clip((m[i, 0] * ins[0] + m[i, 1] * ins[1] + m[i, 2] * ins[2]) >> 8, 0, 255) for i in range(3)]
        else:
            planes = [np.clip(((m[i, 0] * planes[0] + m[i, 1] * planes[1] + m[i, 2] * planes[2]) >> 8)
                              + getattr(cfg, f"output_bias_{i}"), 0, 255) for i in range(3)]
    oh, ow = cfg.output_hw
    out = np.empty((n, 3, oh, ow), dtype)
    top, left = (cfg.top_padding_size, cfg.left_padding_size) if cfg.padding else (0, 0)
    if cfg.padding:
        out[...] = np.float16(cfg.padding_value)
    for i in range(3):
        mean_i = getattr(cfg, f"mean_chn_{i}")
        min_i = np.float32(np.float16(getattr(cfg, f"min_chn_{i}")))
        var_i = np.float32(np.float16(getattr(cfg, f"var_reci_chn_{i}")))
        val = ((planes[i] - mean_i).astype(np.float32) - min_i) * var_i
        out[:, i, top:top + ch, left:left + cw] = val.astype(dtype)
    return out


# -- dynamic AIPP ------------------------------------------------------------------------------
def dynamic_aipp_calls(cfg: AippConfig, *, batch_size: int = 1, input_index: int | None = None,
                       by_input_index: bool = True, model_id: Any = MODEL_ID, dataset: Any = DATASET
                       ) -> list[tuple[str, tuple]]:
    """The pyACL call sequence that sets ``cfg``'s parameters on a model converted with
    ``aipp_mode: dynamic`` (one ``(api_name, args)`` per call, in order; ``args`` in the documented
    positional order). :data:`AIPP_SET` in ``args`` stands for the handle ``acl.mdl.create_aipp``
    returns; ``model_id`` / ``dataset`` default to the placeholders :data:`MODEL_ID` / :data:`DATASET`.

    Per-batch calls (crop, padding, mean, min, var_reci) are repeated for ``batch_index`` 0 ..
    ``batch_size - 1``. The last-but-one call binds the parameters to the model input:
    ``acl.mdl.set_aipp_by_input_index(model_id, dataset, index, aipp)`` with the model input's index
    (default ``cfg.related_input_rank``), or, with ``by_input_index=False``,
    ``acl.mdl.set_input_aipp(model_id, dataset, index, aipp)`` whose index is the dynamic AIPP
    input's own (``acl.mdl.get_input_index_by_name(..., "ascend_dynamic_aipp_data")``).

    Signatures (pyACL, CANN 8.0.0 / 8.5.0 "Function: ..." pages): ``create_aipp(batch_size)``,
    ``set_aipp_input_format(aipp_parms_set, input_format)``, ``set_aipp_csc_params(aipp_parms_set,
    csc_switch, 9 x matrix, 3 x output bias, 3 x input bias)``, ``set_aipp_rbuv_swap_switch(...,
    switch)``, ``set_aipp_ax_swap_switch(..., switch)``, ``set_aipp_src_image_size(..., w, h)``,
    ``set_aipp_crop_params(..., switch, start_w, start_h, size_w, size_h, batch_index)``,
    ``set_aipp_padding_params(..., switch, top, bottom, left, right, batch_index)``,
    ``set_aipp_dtc_pixel_mean/min(..., chn0, chn1, chn2, chn3, batch_index)``,
    ``set_aipp_pixel_var_reci(..., chn0, chn1, chn2, chn3, batch_index)``, ``destroy_aipp(...)``.
    Not run on hardware.

    Raises:
        ConfigError: a parameter no dynamic call can set: ``padding_value`` other than 0 (the pages give
            ``set_aipp_padding_params`` the switch, four sizes and the batch index, no value: pyACL
            aclpythondevg_01_0188, CANN 8.0.0), or no ``src_image_size`` (required in the dynamic scenario,
            aclcppdevg_03_1418).
    """
    if cfg.aipp_mode != "static":
        raise ConfigError("dynamic_aipp_calls takes the static parameters to set (an AippConfig with aipp_mode static)")
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if cfg.padding and cfg.padding_value != 0:
        raise ConfigError(f"padding_value {cfg.padding_value:g} cannot be set through dynamic AIPP (no setter takes it: "
                          "acl.mdl.set_aipp_padding_params sets the sizes only); pad with 0, or convert the model with "
                          "static AIPP")
    if not (cfg.src_image_size_w and cfg.src_image_size_h):
        raise ConfigError("dynamic AIPP needs src_image_size_w/h (aclmdlSetAIPPSrcImageSize is required in the dynamic "
                          "scenario)")
    s = AIPP_SET
    calls: list[tuple[str, tuple]] = [
        ("acl.mdl.create_aipp", (batch_size,)),
        ("acl.mdl.set_aipp_input_format", (s, ACL_AIPP_INPUT_FORMAT[cfg.input_format])),
        ("acl.mdl.set_aipp_csc_params", (s, int(cfg.csc_switch), *cfg.matrix.reshape(-1).tolist(),
                                         cfg.output_bias_0, cfg.output_bias_1, cfg.output_bias_2,
                                         cfg.input_bias_0, cfg.input_bias_1, cfg.input_bias_2)),
        ("acl.mdl.set_aipp_rbuv_swap_switch", (s, int(cfg.rbuv_swap_switch))),
        ("acl.mdl.set_aipp_ax_swap_switch", (s, int(cfg.ax_swap_switch))),
        ("acl.mdl.set_aipp_src_image_size", (s, cfg.src_image_size_w, cfg.src_image_size_h)),
    ]
    for b in range(batch_size):
        calls += [
            ("acl.mdl.set_aipp_crop_params", (s, int(cfg.crop), cfg.load_start_pos_w, cfg.load_start_pos_h,
                                              cfg.crop_size_w, cfg.crop_size_h, b)),
            ("acl.mdl.set_aipp_padding_params", (s, int(cfg.padding), cfg.top_padding_size, cfg.bottom_padding_size,
                                                 cfg.left_padding_size, cfg.right_padding_size, b)),
            ("acl.mdl.set_aipp_dtc_pixel_mean", (s, cfg.mean_chn_0, cfg.mean_chn_1, cfg.mean_chn_2, cfg.mean_chn_3, b)),
            ("acl.mdl.set_aipp_dtc_pixel_min", (s, cfg.min_chn_0, cfg.min_chn_1, cfg.min_chn_2, cfg.min_chn_3, b)),
            ("acl.mdl.set_aipp_pixel_var_reci", (s, cfg.var_reci_chn_0, cfg.var_reci_chn_1, cfg.var_reci_chn_2,
                                                 cfg.var_reci_chn_3, b)),
        ]
    index = cfg.related_input_rank if input_index is None else input_index
    api = "acl.mdl.set_aipp_by_input_index" if by_input_index else "acl.mdl.set_input_aipp"
    calls.append((api, (model_id, dataset, index, s)))
    calls.append(("acl.mdl.destroy_aipp", (s,)))
    return calls


# -- from a stage list -------------------------------------------------------------------------
@dataclass(frozen=True)
class AippRoute:
    """What the AIPP route does for one camera: the ``aipp_op`` and the facts behind it.

    Attributes:
        config: the static :class:`AippConfig`.
        dvpp_size: ``(height, width)`` in pixels of the picture DVPP writes (after its resizes and crops).
        notes: what differs from the stage list as written (re-ordering, dtype, resize filter).
        canvas_pad_nv12: the canvas route only (padding AIPP cannot do): VPC pastes the ``dvpp_size`` picture
            into the top-left of a slot of the model input's size whose border holds this ``(Y, U, V)``
            colour, and the config has no crop and no padding; None on the plain AIPP route.
    """

    config: AippConfig
    dvpp_size: tuple[int, int]
    notes: tuple[str, ...] = ()
    canvas_pad_nv12: Optional[tuple[int, int, int]] = None

    def describe(self) -> str:
        c = self.config
        oh, ow = c.output_hw
        crop = (f"{c.crop_size_w}x{c.crop_size_h}+{c.load_start_pos_w}+{c.load_start_pos_h}" if c.crop else "none")
        pad = (f"right {c.right_padding_size}, bottom {c.bottom_padding_size} (value {c.padding_value:g})"
               if c.padding else "none")
        dh, dw = self.dvpp_size
        if self.canvas_pad_nv12 is not None:
            source = (f"canvas slot: VPC pastes the {dw}x{dh} DVPP picture into its top-left, border NV12 "
                      f"{tuple(self.canvas_pad_nv12)}")
        else:
            source = f"DVPP picture {dw}x{dh}"
        return (f"input NV12 {c.src_image_size_w}x{c.src_image_size_h} ({source}), crop {crop}, padding {pad}, "
                f"output 3x{oh}x{ow} fp16")


def _default_stride(height: int, width: int) -> tuple[int, int]:
    return -(-height // 2) * 2, -(-width // 16) * 16


def aipp_for_stages(stages: Sequence[Any], camera_size: tuple[int, int], *, colour_standard: str,
                    stride: Any = None, related_input_rank: int = 0) -> AippRoute:
    """The AIPP route for one camera's stage list: DVPP decodes and resizes (and crops before a resize),
    AIPP does the trailing crop, colour conversion, Normalise and Pad.

    Args:
        stages: ``dvpipe.stages`` objects (Decode first), as ``profile_stages`` or a deployment gives.
        camera_size: the camera's picture size, ``(height, width)`` in pixels.
        colour_standard: the NV12 picture's standard (:data:`COLOUR_STANDARDS`).
        stride: ``(height, width) -> (height_stride, width_stride)`` of the DVPP output picture, in
            pixels (default: height up to 2, width up to 16).

    Raises:
        ConfigError: the stage list cannot be expressed on this route, with the reason.
    """
    from ...stages import Crop, Decode, Normalise, Pad, Resize  # lazy: keeps this module numpy-only at import

    stride = stride or _default_stride
    names = [type(s).__name__ for s in stages]
    if not stages or not isinstance(stages[0], Decode):
        raise ConfigError(f"the AIPP route starts with DVPP decoding; the stage list must begin with Decode, "
                          f"got {names}")
    h, w = (int(v) for v in camera_size)
    norm = None
    pad = None
    crop_box: tuple[int, int, int, int] | None = None  # trailing crops after the last resize, composed
    notes: list[str] = []
    for s in stages[1:]:
        kind = type(s).__name__
        if kind == "Transfer" or kind == "Batch":
            continue
        if isinstance(s, Resize):
            if norm is not None:
                raise ConfigError("a Resize after Normalise resizes the float image; on the AIPP route DVPP resizes "
                                  "the uint8 picture before AIPP normalises (use fidelity 'fast' or move Resize first)")
            if crop_box is not None:  # a crop before this resize: DVPP crops and resizes (VPC crop-resize)
                w, h = crop_box[2], crop_box[3]
                crop_box = None
            spec = s.output_spec(_spec(w, h))
            w, h = spec.width, spec.height
            if s.interpolation != "linear":
                notes.append(f"the profile resizes with {s.interpolation}; DVPP VPC resizes bilinearly "
                             "(not bit-identical)")
        elif isinstance(s, Crop):
            if norm is not None:
                raise ConfigError("a Crop after Normalise is not expressible: AIPP crops before it normalises "
                                  "(move the Crop before Normalise)")
            s.output_spec(_spec(*(crop_box[2:] if crop_box else (w, h))))
            if crop_box is None:
                crop_box = (s.left, s.top, s.width, s.height)
            else:
                crop_box = (crop_box[0] + s.left, crop_box[1] + s.top, s.width, s.height)
        elif isinstance(s, Normalise):
            if norm is not None:
                raise ConfigError("two Normalise stages; AIPP normalises once")
            norm = s
        elif isinstance(s, Pad):
            if norm is None:
                raise ConfigError("a Pad before Normalise pads pixels that are then normalised per channel; AIPP pads "
                                  "after normalising with one constant (move Pad after Normalise)")
            if pad is not None:
                raise ConfigError("two Pad stages; AIPP pads once")
            pad = s
        else:
            raise ConfigError(f"stage {kind} has no AIPP equivalent; the AIPP route covers Decode, Resize, Crop, "
                              "Normalise and Pad")
    if norm is None:
        raise ConfigError("no Normalise stage: the AIPP route exists to normalise on the AI Core")
    if norm.dtype != "float16":
        notes.append(f"the model receives fp16 from AIPP (the stage list asks for {norm.dtype})")
    if crop_box is not None and (crop_box[0] % 2 or crop_box[1] % 2):
        raise ConfigError(f"AIPP crops YUV420SP only from an even start, the crop starts at ({crop_box[0]}, "
                          f"{crop_box[1]}); crop on DVPP instead")
    cw, ch = (crop_box[2], crop_box[3]) if crop_box else (w, h)
    oh, ow = pad.padded_size((ch, cw)) if pad is not None else (ch, cw)
    sh, sw = (int(v) for v in stride(h, w))
    if (cw, ch) != (sw, sh) and (cw % 2 or ch % 2):  # AIPP crops the DVPP picture out of its stride-aligned source
        raise ConfigError(f"AIPP crops YUV420SP_U8 only to an even size (crop_size_w/h, aclAippInfo), this route needs "
                          f"a {cw}x{ch} crop; make the Crop/Resize size even, or run this stage list on the dvpp backend")
    order = "rgb" if norm.to_rgb else "bgr"
    cfg = aipp_for(norm.mean, norm.std, channel_order=order, colour_standard=colour_standard, src_size=(sh, sw),
                   content_size=(ch, cw), out_size=(oh, ow), padding_value=pad.value if pad else 0.0,
                   related_input_rank=related_input_rank)
    if crop_box is not None and (crop_box[0] or crop_box[1]):
        cfg = cfg.replace(crop=True, load_start_pos_w=crop_box[0], load_start_pos_h=crop_box[1],
                          crop_size_w=cw, crop_size_h=ch)
    return AippRoute(cfg, (h, w), tuple(notes))


def _spec(w: int, h: int):
    from ...stages.base import FrameSpec
    from ...types import PixelFormat

    return FrameSpec(width=w, height=h, pixel_format=PixelFormat.BGR)
