"""``acl.mdl`` and the ``acl.*_data_buffer`` calls of the software device: a numpy function as the "model".

There is no ATC here, so a "model file" for the software device is a small descriptor the user writes
(YAML or JSON; see docs/models.md and :class:`SimModelSpec`): the function to run, the inputs and outputs
(dims, dtype), and optionally the AIPP the model was "converted" with (``aipp: aipp.cfg``, as
``atc --insert_op_conf aipp.cfg`` would bake it in: static AIPP) or ``aipp: dynamic`` (a dynamic-AIPP
input whose parameters are set through ``acl.mdl.set_input_aipp``). :func:`register` gives a descriptor
a ``sim-model:NAME`` key that ``acl.mdl.load_from_file`` accepts, for tests that build models in code.

Same names, argument order and return values as pyACL (pages cited in :mod:`dvpipe.backends.dvpp._mdl`).
What the software device enforces, as the real runtime does or as its documentation says:

* every input buffer of the input dataset must hold exactly ``get_input_size_by_index`` bytes and every
  output buffer at least ``get_output_size_by_index`` bytes, and live in device memory (``acl.rt.malloc``
  or ``acl.media.dvpp_malloc``); otherwise ``execute`` returns ``ACL_ERROR_INVALID_PARAM`` (100000 --
  the pages name no dedicated code; parameter checks return this one);
* a destroyed dataset, data buffer, description or an unloaded model is an invalid handle
  (``ACL_ERROR_INVALID_PARAM``); destroying a dataset does not destroy its data buffers (pyACL leaves
  them to ``acl.destroy_data_buffer``);
* ``execute_async`` queues the work on the stream: outputs appear at ``acl.rt.synchronize_stream``;
* loading, executing and unloading a model happen in one context (aclmdlUnload, CANN 8.0.0 aclcppdevg_03_0291):
  on a thread with no current context ``load_from_file`` / ``load_from_mem`` / ``execute`` / ``execute_async`` /
  ``unload`` return 107002 ``ACL_ERROR_RT_CONTEXT_NULL`` (as ``create_stream`` does), and a model used or unloaded
  from another context returns 107004 ``ACL_ERROR_RT_MODEL_CONTEXT``;
* ``unload`` while ``execute_async`` work of the model is still queued on a stream is refused
  (``ACL_ERROR_INVALID_PARAM``; the model stays loaded): the page asks the caller to make sure nothing uses the
  model when unloading, so the software device refuses at that call rather than run the queued job on an
  unloaded model and freed memory at the next synchronisation;
* ``get_first_aipp_info`` returns the static AIPP a model was "converted" with as the ``aclAippInfo`` dict;
* the AIPP input of a statically converted model takes the raw picture batch (YUV420SP: ``N * H * W *
  3/2`` bytes), the function receives the AIPP output (``apply_aipp``: ``(N, 3, H, W)``, cast to the
  declared input dtype); with dynamic AIPP the parameters are those ``set_input_aipp`` wrote into the
  dynamic-AIPP input buffer; executing without them set returns ``ACL_ERROR_INVALID_PARAM``;
* every ``set_aipp_*`` call is checked against its page: the argument count and each argument's documented
  range (:data:`AIPP_RANGES`; ``batch_index`` in ``[0, batch_size)``), ``ACL_ERROR_INVALID_PARAM`` otherwise;
  the even-size / even-crop-start rules of YUV420SP_U8, crop inside the source, the padded width <= 1080 and
  the output size equal to the model input are checked when ``set_input_aipp`` binds the set;
* a dynamic AIPP input's data buffer holds exactly the N pictures set by ``set_aipp_src_image_size``, back to
  back (ATC atlasatc_16_0024: N x w x h x 1.5 for YUV420SP_U8) and at most ``max_src_image_size`` bytes: a
  buffer with gaps between the pictures (the AIPP route's slot pitch) is refused, not misread;
* fault injection: with the ``mdl`` unit faulted, every call fails with ``ACL_ERROR_RT_FAILURE`` and the
  creators return 0.

Nothing here ran on Ascend hardware.
"""
from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ....errors import ConfigError
from .. import _codes as C

__all__ = ["SimModelSpec", "TensorSpec", "register", "unregister", "load_spec", "MdlNamespace", "DataBuffer",
           "Dataset", "ModelDescObj", "AippSet", "DTYPES", "DYNAMIC_AIPP_NAME", "DYNAMIC_AIPP_BYTES"]

#: aclDataType -> numpy dtype name (CANN 8.0.0 aclcppdevg_03_1346 / 8.5.0 aclpythondevg_01_0912)
DTYPES = {0: "float32", 1: "float16", 2: "int8", 3: "int32", 4: "uint8", 6: "int16", 7: "uint16", 8: "uint32",
          9: "int64", 10: "uint64", 11: "float64", 12: "bool"}
DTYPE_CODES = {v: k for k, v in DTYPES.items()}
#: aclAippInputFormat (CANN 8.0.0 aclpythondevg_01_0935)
AIPP_INPUT_FORMATS = {1: "YUV420SP_U8", 2: "XRGB8888_U8", 3: "RGB888_U8", 4: "YUV400_U8"}
#: aclmdlInputAippType (CANN 6.0.1 aclpythondevg_01_0132)
WITHOUT_AIPP, WITH_STATIC_AIPP, WITH_DYNAMIC_AIPP, DYNAMIC_AIPP_NODE = 0, 1, 2, 3
#: the name ATC gives the dynamic-AIPP parameter input (ACL_DYNAMIC_AIPP_NAME, aclpythondevg set_input_aipp page)
DYNAMIC_AIPP_NAME = "ascend_dynamic_aipp_data"
#: size of the dynamic-AIPP parameter input on the software device (the device's own size differs: always
#: read it with get_input_size_by_index)
DYNAMIC_AIPP_BYTES = 4096
_NO_INDEX = 0xFFFFFFFF
#: what aclmdlGetFirstAippInfo returns for an input without (static) AIPP: the aclError page (CANN 8.0.0
#: aclcppdevg_03_1345) marks ACL_ERROR_NOT_STATIC_AIPP (100038) deprecated in favour of ACL_ERROR_GE_AIPP_NOT_EXIST,
#: 145015 in GE's ge_error_codes.h
ACL_ERROR_GE_AIPP_NOT_EXIST = 145015
#: aclFormat ACL_FORMAT_NCHW (the original input's format the sim reports: its inputs are declared NCHW)
_ACL_FORMAT_NCHW = 0

_REGISTRY: dict[str, "SimModelSpec"] = {}
_REG_LOCK = threading.Lock()
_REG_IDS = itertools.count(1)
KEY_PREFIX = "sim-model:"


# ------------------------------------------------------------------------------------------------ descriptor

@dataclass(frozen=True)
class TensorSpec:
    """One model input or output: ``dims`` (ints), numpy ``dtype`` name, ``name``."""

    name: str
    dims: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.dims, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class SimModelSpec:
    """A model for the software device.

    Attributes:
        fn: the "model": ``fn(*inputs) -> array or sequence of arrays``; inputs are numpy arrays of the
            declared dims/dtype (input 0 after AIPP when the model has AIPP), outputs are cast to the
            declared output dtypes and must have the declared dims.
        inputs, outputs: :class:`TensorSpec` lists. With AIPP, ``inputs[0]`` is the tensor the model computes
            on (the AIPP output, ``(N, 3, H, W)``), not the raw picture batch.
        aipp: the static ``AippConfig`` input 0 was converted with, ``"dynamic"``, or None.
        max_src_image_size: with dynamic AIPP, the bytes input 0 accepts (ATC ``max_src_image_size``).
        name: for messages.
    """

    fn: Callable[..., Any]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    aipp: Any = None
    max_src_image_size: int = 0
    name: str = "model"

    @property
    def dynamic(self) -> bool:
        return isinstance(self.aipp, str) and self.aipp == "dynamic"

    @property
    def static(self) -> bool:
        return self.aipp is not None and not self.dynamic

    def raw_input_bytes(self) -> int:
        """Bytes of input 0 as the application fills it (the raw picture batch when AIPP is on)."""
        if self.dynamic:
            return int(self.max_src_image_size)
        if self.static:
            n = self.inputs[0].dims[0]
            return n * _picture_bytes(self.aipp)
        return self.inputs[0].nbytes


def _picture_bytes(cfg: Any) -> int:
    w, h = int(cfg.src_image_size_w), int(cfg.src_image_size_h)
    fmt = str(cfg.input_format).upper()
    if fmt == "YUV420SP_U8":
        return w * h * 3 // 2
    if fmt == "RGB888_U8":
        return w * h * 3
    if fmt in ("XRGB8888_U8", "ARGB8888_U8"):
        return w * h * 4
    if fmt == "YUV400_U8":
        return w * h
    raise ConfigError(f"aipp input_format {cfg.input_format!r} is not simulated (YUV420SP_U8, RGB888_U8, "
                      "XRGB8888_U8, YUV400_U8 are)")


def _pictures(cfg: Any, raw: np.ndarray, n: int) -> np.ndarray:
    """The raw batch as ``apply_aipp`` takes it: ``(N, H*3/2, W)`` NV12 or ``(N, H, W, C)`` packed."""
    w, h = int(cfg.src_image_size_w), int(cfg.src_image_size_h)
    fmt = str(cfg.input_format).upper()
    if fmt == "YUV420SP_U8":
        return raw.reshape(n, h * 3 // 2, w)
    if fmt == "YUV400_U8":
        return raw.reshape(n, h, w)
    return raw.reshape(n, h, w, -1)


def _tensor(entry: Any, where: str) -> TensorSpec:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a mapping with dims and dtype, got {entry!r}")
    unknown = set(entry) - {"name", "dims", "dtype"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (allowed: name, dims, dtype)")
    dims = entry.get("dims")
    if not isinstance(dims, (list, tuple)) or not dims or not all(isinstance(d, int) and d > 0 for d in dims):
        raise ConfigError(f"{where}.dims: expected a list of positive ints, got {dims!r}")
    dtype = str(entry.get("dtype", "float32"))
    if dtype not in DTYPE_CODES:
        raise ConfigError(f"{where}.dtype: {dtype!r} is not one of {', '.join(DTYPE_CODES)}")
    return TensorSpec(str(entry.get("name", where.split(".")[-1])), tuple(int(d) for d in dims), dtype)


def resolve_function(ref: object, base_dir: str) -> Callable[..., Any]:
    """``module:callable`` (imported) or ``path/file.py:callable`` (relative to ``base_dir``)."""
    if not isinstance(ref, str) or ":" not in ref:
        raise ConfigError(f"function: expected 'module:callable' or 'file.py:callable', got {ref!r}")
    mod_ref, _, attr = ref.rpartition(":")
    if mod_ref.endswith(".py"):
        path = mod_ref if os.path.isabs(mod_ref) else os.path.join(base_dir, mod_ref)
        if not os.path.isfile(path):
            raise ConfigError(f"function: file not found: {path}")
        spec = importlib.util.spec_from_file_location(f"_dvpipe_sim_model_{abs(hash(path))}", path)
        assert spec is not None and spec.loader is not None  # a .py path always has a spec and a loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(mod_ref)
        except ImportError as e:
            raise ConfigError(f"function: cannot import {mod_ref!r} ({e})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"function: {mod_ref} has no callable {attr!r}")
    return fn


def load_spec(mapping: Any, base_dir: str = ".", name: str = "model") -> SimModelSpec:
    """Validate a parsed descriptor (see docs/models.md); ``ConfigError`` (a ``ValueError``) naming the key otherwise."""
    if not isinstance(mapping, dict) or "dvpipe_sim_model" not in mapping:
        raise ConfigError("not a software-device model descriptor (a real .om cannot run on the software device; "
                          "write a descriptor with 'dvpipe_sim_model: 1', see docs/models.md)")
    allowed = {"dvpipe_sim_model", "function", "inputs", "outputs", "aipp", "max_src_image_size", "name"}
    unknown = set(mapping) - allowed
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(allowed))})")
    if mapping["dvpipe_sim_model"] != 1:
        raise ConfigError(f"dvpipe_sim_model: version 1 is the only one, got {mapping['dvpipe_sim_model']!r}")
    fn = mapping.get("function")
    fn = fn if callable(fn) else resolve_function(fn, base_dir)
    for key in ("inputs", "outputs"):
        if not isinstance(mapping.get(key), (list, tuple)) or not mapping[key]:
            raise ConfigError(f"{key}: expected a non-empty list of {{name, dims, dtype}}")
    inputs = tuple(_tensor(e, f"inputs[{i}]") for i, e in enumerate(mapping["inputs"]))
    outputs = tuple(_tensor(e, f"outputs[{i}]") for i, e in enumerate(mapping["outputs"]))
    aipp = mapping.get("aipp")
    max_src = int(mapping.get("max_src_image_size", 0) or 0)
    if isinstance(aipp, str) and aipp == "dynamic":
        if max_src <= 0:
            raise ConfigError("max_src_image_size: aipp: dynamic needs the bytes input 0 accepts (ATC "
                              "max_src_image_size), e.g. N * W * H * 3 // 2 for YUV420SP_U8")
    elif isinstance(aipp, str):
        path = aipp if os.path.isabs(aipp) else os.path.join(base_dir, aipp)
        if not os.path.isfile(path):
            raise ConfigError(f"aipp: file not found: {path}")
        from ..aipp import AippConfig

        with open(path, encoding="utf-8") as f:
            aipp = AippConfig.from_cfg(f.read())
    if aipp is not None and not (isinstance(aipp, str)):
        dims = inputs[0].dims
        if len(dims) != 4 or dims[1] != 3:
            raise ConfigError(f"inputs[0].dims: with AIPP, input 0 is the (N, 3, H, W) tensor AIPP writes, got "
                              f"{list(dims)}")
        if aipp.aipp_mode == "static" and not (aipp.src_image_size_w and aipp.src_image_size_h):
            # src_image_size_w/h 0 or omitted: the model input's width / height (the aipp_op template's default;
            # ATC atlasatc_16_0025: in static AIPP only input_format is required, the rest takes its default).
            # Substituted before the output-size and byte checks; replace() validates again (YUV420SP: even size)
            w0, h0 = int(aipp.src_image_size_w or dims[3]), int(aipp.src_image_size_h or dims[2])
            try:
                aipp = aipp.replace(src_image_size_w=w0, src_image_size_h=h0)
            except ConfigError as e:
                raise ConfigError(f"aipp: src_image_size 0 means the model input's size, {w0}x{h0} (WxH) here: "
                                  f"{e}") from None
        if tuple(aipp.output_hw) != tuple(dims[2:]):
            raise ConfigError(f"aipp: the configuration writes {aipp.output_hw[0]}x{aipp.output_hw[1]} (HxW) but "
                              f"inputs[0] is {dims[2]}x{dims[3]}; ATC would refuse this conversion")
        _picture_bytes(aipp)
    return SimModelSpec(fn, inputs, outputs, aipp, max_src, str(mapping.get("name", name)))


def parse_descriptor(text: str, base_dir: str, name: str = "model") -> SimModelSpec:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"not YAML/JSON ({str(e).splitlines()[0]})") from None
    return load_spec(data, base_dir, name)


def register(spec: SimModelSpec, name: Optional[str] = None) -> str:
    """Make ``spec`` loadable as ``acl.mdl.load_from_file("sim-model:NAME")``; returns that key."""
    key = KEY_PREFIX + (name or f"{spec.name}-{next(_REG_IDS)}")
    with _REG_LOCK:
        _REGISTRY[key] = spec
    return key


def unregister(key: str) -> None:
    with _REG_LOCK:
        _REGISTRY.pop(key, None)


def registered(key: str) -> Optional[SimModelSpec]:
    with _REG_LOCK:
        return _REGISTRY.get(key)


# ------------------------------------------------------------------------------------------------ objects

@dataclass
class DataBuffer:
    ptr: int
    size: int


@dataclass
class Dataset:
    buffers: list = field(default_factory=list)  # DataBuffer handles


@dataclass
class ModelDescObj:
    model_id: Optional[int] = None


@dataclass
class AippSet:
    batch: int
    calls: list = field(default_factory=list)  # (api, args) in the order received


class _LoadedModel:
    def __init__(self, spec: SimModelSpec):
        self.spec = spec
        n_in = len(spec.inputs)
        self.input_names = [t.name for t in spec.inputs] + ([DYNAMIC_AIPP_NAME] if spec.dynamic else [])
        self.input_sizes = [spec.raw_input_bytes()] + [t.nbytes for t in spec.inputs[1:]]
        if spec.dynamic:
            self.input_sizes.append(DYNAMIC_AIPP_BYTES)
        self.n_inputs = n_in + (1 if spec.dynamic else 0)
        self.context = 0  # the context current when it was loaded (never 0: 107002 without one; 107004 from another)


#: set_aipp_* name -> (number of arguments after the aipp set, ATC aipp_op field names they set); the argument
#: order is that of the pyACL pages (CANN 8.0.0 aclpythondevg_01_0178..0192: create_aipp, set_aipp_*)
AIPP_SETTERS: dict[str, tuple[int, tuple[str, ...]]] = {
    "set_aipp_input_format": (1, ("input_format",)),
    "set_aipp_csc_params": (16, ("csc_switch", "matrix_r0c0", "matrix_r0c1", "matrix_r0c2", "matrix_r1c0",
                                 "matrix_r1c1", "matrix_r1c2", "matrix_r2c0", "matrix_r2c1", "matrix_r2c2",
                                 "output_bias_0", "output_bias_1", "output_bias_2", "input_bias_0", "input_bias_1",
                                 "input_bias_2")),
    "set_aipp_rbuv_swap_switch": (1, ("rbuv_swap_switch",)),
    "set_aipp_ax_swap_switch": (1, ("ax_swap_switch",)),
    "set_aipp_src_image_size": (2, ("src_image_size_w", "src_image_size_h")),
    "set_aipp_scf_params": (6, ("scf_switch", "scf_input_w", "scf_input_h", "scf_output_w", "scf_output_h",
                                "batch_index")),
    "set_aipp_crop_params": (6, ("crop", "load_start_pos_w", "load_start_pos_h", "crop_size_w", "crop_size_h",
                                 "batch_index")),
    "set_aipp_padding_params": (6, ("padding", "top_padding_size", "bottom_padding_size", "left_padding_size",
                                    "right_padding_size", "batch_index")),
    "set_aipp_dtc_pixel_mean": (5, ("mean_chn_0", "mean_chn_1", "mean_chn_2", "mean_chn_3", "batch_index")),
    "set_aipp_dtc_pixel_min": (5, ("min_chn_0", "min_chn_1", "min_chn_2", "min_chn_3", "batch_index")),
    "set_aipp_pixel_var_reci": (5, ("var_reci_chn_0", "var_reci_chn_1", "var_reci_chn_2", "var_reci_chn_3",
                                    "batch_index")),
}


_SW = (0, 1)
_U8 = (0, 255)
_FP16 = (-65504.0, 65504.0)
_CSC = (-32677, 32676)
_PAD = (0, 32)
_BATCH = None  # [0, batch_size): batch_size as create_aipp set it
#: every set_aipp_* argument's documented range (after the parameter set), in the pages' order. Pages: CANN 8.0.0
#: "aclmdlAIPP" (aclcppdevg_03_1412 input format, 03_1414 CSC, 03_1418 source size, 03_1420 crop, 03_1421
#: padding, 03_1422 mean, 03_1423 min, 03_1424 var_reci; pyACL aclpythondevg_01_0178..0192). Switches are 0 or 1;
#: input_format one of the aclAippInputFormat values (aclpythondevg_01_0935); the CSC coefficients as printed
#: (CANN 8.0.RC1 aclcppdevg_03_1317: [-32677, 32676]), the biases uint8_t; the scf (resize) call is accepted
#: with its switch off only (resizing is "not supported currently", aclcppdevg_03_0308). Where a page gives no
#: range the C type's is used.
AIPP_RANGES: dict[str, tuple[Any, ...]] = {
    "set_aipp_input_format": ((1, 4),),
    "set_aipp_csc_params": (_SW, *[_CSC] * 9, *[_U8] * 6),
    "set_aipp_rbuv_swap_switch": (_SW,),
    "set_aipp_ax_swap_switch": (_SW,),
    "set_aipp_src_image_size": ((2, 4096), (1, 4096)),
    "set_aipp_scf_params": ((0, 0), (0, 4096), (0, 4096), (0, 4096), (0, 4096), _BATCH),
    "set_aipp_crop_params": (_SW, (0, 4095), (0, 4095), (1, 4096), (1, 4096), _BATCH),
    "set_aipp_padding_params": (_SW, _PAD, _PAD, _PAD, _PAD, _BATCH),
    "set_aipp_dtc_pixel_mean": (_U8, _U8, _U8, _U8, _BATCH),
    "set_aipp_dtc_pixel_min": (*[(0.0, 255.0)] * 4, _BATCH),  # float, [0, 255]
    "set_aipp_pixel_var_reci": (_FP16, _FP16, _FP16, _FP16, _BATCH),
}
#: arguments whose value only matters when the call's switch (argument 0) is on: the pages call them "invalid"
#: then, so a switched-off crop may carry zeros
_SWITCHED = {"set_aipp_crop_params", "set_aipp_padding_params"}


def check_aipp_args(api: str, args: tuple, batch: int) -> Optional[str]:
    """Why ``api(aipp_set, *args)`` is refused (argument count or a documented range), or None."""
    n, names = AIPP_SETTERS[api]
    if len(args) != n:
        return f"expected {n} arguments after the parameter set, got {len(args)}"
    ranges = AIPP_RANGES[api]
    off = api in _SWITCHED and not args[0]
    for k, (name, value, rng) in enumerate(zip(names, args, ranges)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            return f"{name} must be a number, got {value!r}"
        if rng is None:
            lo, hi = 0, batch - 1
        elif off and k not in (0, n - 1):
            continue
        else:
            lo, hi = rng
        if isinstance(lo, int) and float(value) != int(value):
            return f"{name} must be an integer, got {value!r}"
        if not (np.isfinite(float(value)) and lo <= value <= hi):
            return f"{name} {value!r} is outside the documented range [{lo}, {hi}]"
    return None


#: the per-batch setters (their last argument is ``batch_index``)
_PER_BATCH = tuple(api for api, (_n, names) in AIPP_SETTERS.items() if names[-1] == "batch_index")
#: the setters whose arguments decide the image size after AIPP (scaling, crop, padding)
_GEOMETRY = ("set_aipp_scf_params", "set_aipp_crop_params", "set_aipp_padding_params")
_BOOL_FIELDS = ("csc_switch", "rbuv_swap_switch", "ax_swap_switch", "crop", "padding", "scf_switch")


class AippBatchSizeMismatch(ConfigError):
    """Dynamic AIPP parameters whose image size after AIPP differs between batches (the device refuses them)."""


def _per_batch_defaults() -> dict[str, dict]:
    """What a batch the caller never set uses: the documented defaults (every switch off, means and minima 0,
    var_reci 1.0: the aipp_op defaults of :class:`~..aipp.AippConfig`, pyACL aclpythondevg_01_0182)."""
    from ..aipp import AippConfig

    base = AippConfig()
    out = {}
    for api in _PER_BATCH:
        names = AIPP_SETTERS[api][1][:-1]
        out[api] = {k: (_norm(k, getattr(base, k)) if hasattr(base, k) else 0) for k in names}
    return out


def _norm(key: str, value: Any) -> Any:
    return bool(value) if key in _BOOL_FIELDS else value


def _effective(api: str, vals: dict) -> dict:
    """A per-batch call's arguments as they act: a switched-off crop / padding / scaling ignores the rest (the
    pages call them invalid then)."""
    vals = {k: _norm(k, v) for k, v in vals.items()}
    switch = next(iter(vals))
    if api in _GEOMETRY and not vals[switch]:
        return {switch: False}
    return vals


def _size_after(src: Optional[tuple[int, int]], params: dict) -> Optional[tuple[int, int]]:
    """``(height, width)`` after AIPP for one batch's crop and padding (scaling on is refused anyway), or None
    when the source size was not set."""
    crop, pad = params["set_aipp_crop_params"], params["set_aipp_padding_params"]
    if crop.get("crop"):
        h, w = int(crop["crop_size_h"]), int(crop["crop_size_w"])
    elif src is None:
        return None
    else:
        w, h = src
    if pad.get("padding"):
        h += int(pad["top_padding_size"]) + int(pad["bottom_padding_size"])
        w += int(pad["left_padding_size"]) + int(pad["right_padding_size"])
    return h, w


def aipp_fields(calls: Sequence[tuple[str, tuple]], batch: Optional[int] = None) -> dict:
    """The ATC aipp_op fields a sequence of ``set_aipp_*`` calls sets (batch 0's, the last call wins).

    ``batch``: the parameter set's batch size (``create_aipp(batch)``; default: the highest batch index the
    calls name, plus one). Every batch's per-batch parameters are compared, whatever the call order, a batch
    never set holding the documented defaults: the image size after dynamic AIPP is computed per batch and must
    be the same for every batch (aclmdlSetInputAIPP / aclmdlSetAIPPByInputIndex restrictions, CANN 8.0.0
    aclcppdevg_03_0308 / _0311), so a difference in it raises :class:`AippBatchSizeMismatch`; any other
    difference raises :class:`ConfigError` (one configuration for every picture is what the software device
    applies: per-picture parameters are not simulated)."""
    out: dict = {"aipp_mode": "static"}
    per: dict[int, dict[str, dict]] = {}  # batch -> per-batch api -> its last arguments
    for api, args in calls:
        n, names = AIPP_SETTERS[api]
        vals = dict(zip(names, args))
        b = int(vals.pop("batch_index", 0) or 0)
        if api in _PER_BATCH:
            per.setdefault(b, {})[api] = dict(vals)
        if b:
            continue
        if api == "set_aipp_scf_params":
            continue
        if "input_format" in vals:
            vals["input_format"] = AIPP_INPUT_FORMATS.get(int(vals["input_format"]), str(vals["input_format"]))
        for k in _BOOL_FIELDS:
            if k in vals:
                vals[k] = bool(vals[k])
        out.update(vals)
    defaults = _per_batch_defaults()
    n_batch = batch if batch is not None else max(per, default=0) + 1
    eff = [{api: _effective(api, per.get(b, {}).get(api, defaults[api])) for api in _PER_BATCH}
           for b in range(max(n_batch, 1))]
    for b, params in enumerate(eff):
        if params["set_aipp_scf_params"]["scf_switch"]:
            raise ConfigError(f"scaling (set_aipp_scf_params with the switch on{f', batch {b}' if b else ''}) is "
                              "not simulated")
    src = ((int(out["src_image_size_w"]), int(out["src_image_size_h"])) if "src_image_size_w" in out else None)
    size0 = _size_after(src, eff[0])
    for b, params in enumerate(eff[1:], 1):
        size = _size_after(src, params)
        if size != size0 and size is not None and size0 is not None:
            raise AippBatchSizeMismatch(
                f"batch {b}'s image size after AIPP is {size[0]}x{size[1]} (HxW), batch 0's {size0[0]}x{size0[1]}"
                f"{'' if b in per else f' (batch {b} was never set: the defaults, no crop and no padding)'}; it "
                "must be the same for every batch and equal the model input (set_input_aipp restrictions, "
                "aclcppdevg_03_0308)")
        for api in _PER_BATCH:
            if params[api] != eff[0][api]:
                unset = "" if b in per and api in per[b] else f" (batch {b} never set: the defaults)"
                raise ConfigError(f"{api}: batch {b} differs from batch 0{unset}; per-picture AIPP parameters are "
                                  "not simulated")
    return out


# ------------------------------------------------------------------------------------------------ namespace

class MdlNamespace:
    """``acl.mdl`` of the software device."""

    def __init__(self, sim: Any):
        self._sim = sim
        self.calls: list[tuple[str, tuple]] = []  # every acl.mdl call received, in order (tests read it)
        self._models: dict[int, _LoadedModel] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    # -- helpers ----------------------------------------------------------------------------------------
    def _log(self, api: str, args: tuple) -> Optional[int]:
        """Record the call; the fault code when the ``mdl`` unit is faulted, else None."""
        self.calls.append((api, args))
        del self.calls[:-4096]
        sim = self._sim
        if not sim._initialised:
            return sim.fail(C.ACL_ERROR_UNINITIALIZE, f"acl.mdl.{api}: acl.init was not called")
        if sim.fault("mdl"):
            return sim.fail(C.ACL_ERROR_RT_FAILURE, "injected fault: every acl.mdl call fails")
        return None

    def _model(self, model_id: Any) -> Optional[_LoadedModel]:
        return self._models.get(model_id) if isinstance(model_id, int) else None

    def _desc_model(self, desc: Any) -> Optional[_LoadedModel]:
        d = self._sim.objs.get(desc, ModelDescObj)
        return None if d is None else self._model(d.model_id)

    def _context_error(self, api: str, m: Optional["_LoadedModel"] = None) -> Optional[int]:
        """The code for calling ``api`` (on model ``m``) from this thread, or None. Loading, executing and
        unloading a model must happen in one context (aclmdlUnload, CANN 8.0.0 aclcppdevg_03_0291): no current
        context is 107002 ACL_ERROR_RT_CONTEXT_NULL, as create_stream answers; another context than the model's is
        107004 ACL_ERROR_RT_MODEL_CONTEXT (rt_error_codes.h: "model not in current context")."""
        sim = self._sim
        ctx = sim.current_context()
        if not ctx:
            return sim.fail(C.ACL_ERROR_RT_CONTEXT_NULL, f"{api}: no current context on this thread (load, execute "
                                                         "and unload a model in one context)")
        if m is not None and m.context != ctx:
            return sim.fail(C.ACL_ERROR_RT_MODEL_CONTEXT, f"{api}: model not in current context (loaded in context "
                                                          f"{m.context:#x}, the thread's current context is {ctx:#x})")
        return None

    def _queued(self, m: "_LoadedModel") -> int:
        """How many execute_async jobs of ``m`` wait on a stream for its synchronisation."""
        from ._stream import _Stream

        n = 0
        for s in self._sim.objs.of(_Stream):
            with s.lock:
                n += sum(1 for job in s.queue if getattr(job, "model", None) is m)
        return n

    @property
    def live_models(self) -> int:
        return len(self._models)

    # -- load / unload --------------------------------------------------------------------------------
    def _load(self, spec_or_err: Any) -> tuple:
        if isinstance(spec_or_err, str):
            return None, self._sim.fail(C.ACL_ERROR_INVALID_FILE, spec_or_err)
        with self._lock:
            mid = next(self._ids)
            self._models[mid] = m = _LoadedModel(spec_or_err)
            m.context = self._sim.current_context()  # the model belongs to it (107004 from another; see _Rt)
        return mid, C.ACL_SUCCESS

    def load_from_file(self, model_path: str):
        err = self._log("load_from_file", (model_path,)) or self._context_error("load_from_file")
        if err:
            return None, err
        spec = registered(str(model_path))
        if spec is None:
            if str(model_path).startswith(KEY_PREFIX):
                return self._load(f"load_from_file: {model_path} is not registered (dvpipe.models.sim_model)")
            if not os.path.isfile(model_path):
                return self._load(f"load_from_file: no such file: {model_path}")
            try:
                with open(model_path, encoding="utf-8") as f:
                    text = f.read()
                spec = parse_descriptor(text, os.path.dirname(os.path.abspath(model_path)),
                                        os.path.splitext(os.path.basename(model_path))[0])
            except (ValueError, UnicodeDecodeError) as e:
                return self._load(f"load_from_file: {model_path}: {e}")
        return self._load(spec)

    def load_from_mem(self, model: int, model_size: int):
        """``model`` is a host address (``acl.util.bytes_to_ptr``) of the descriptor text; relative paths in it
        are taken from the current directory."""
        err = self._log("load_from_mem", (model, model_size)) or self._context_error("load_from_mem")
        if err:
            return None, err
        _space, view = self._sim.memory.resolve(model, model_size)
        if view is None:
            return self._load(f"load_from_mem: {model_size} bytes at {model:#x} are not mapped")
        try:
            spec = parse_descriptor(view.tobytes().decode("utf-8"), os.getcwd())
        except (ValueError, UnicodeDecodeError) as e:
            return self._load(f"load_from_mem: {e}")
        return self._load(spec)

    def unload(self, model_id: int) -> int:
        """Refused from a thread without the model's context (see :meth:`_context_error`) and while execute_async
        work of the model is queued: aclmdlUnload (CANN 8.0.0 aclcppdevg_03_0291) asks the caller to make sure no
        other call is using the model. Of the two ways to model that -- refuse the unload, or let it go and fail the
        queued job and its synchronisation -- the page supports the first: its restriction is on the unload call, and
        the job would otherwise run on an unloaded model and, typically, freed buffers. The pages name no code:
        ``ACL_ERROR_INVALID_PARAM``, as for the other precondition checks here; the model stays loaded."""
        err = self._log("unload", (model_id,))
        if err:
            return err
        with self._lock:
            m = self._models.get(model_id) if isinstance(model_id, int) else None
            if m is None:
                return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"unload: no model {model_id}")
            err = self._context_error("unload", m)
            if err:
                return err
            queued = self._queued(m)
            if queued:
                return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"unload: model {model_id} still has {queued} "
                                                                 "execute_async job(s) queued; synchronise the stream "
                                                                 "first (the model must not be in use when unloaded)")
            del self._models[model_id]
        return C.ACL_SUCCESS

    # -- description ----------------------------------------------------------------------------------
    def create_desc(self):
        if self._log("create_desc", ()):
            return 0
        return self._sim.objs.add(ModelDescObj())

    def destroy_desc(self, model_desc: int) -> int:
        err = self._log("destroy_desc", (model_desc,))
        if err:
            return err
        return C.ACL_SUCCESS if self._sim.objs.pop(model_desc, ModelDescObj) else C.ACL_ERROR_INVALID_PARAM

    def get_desc(self, model_desc: int, model_id: int) -> int:
        err = self._log("get_desc", (model_desc, model_id))
        if err:
            return err
        d = self._sim.objs.get(model_desc, ModelDescObj)
        if d is None or self._model(model_id) is None:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, "get_desc: unknown description or model id")
        d.model_id = model_id
        return C.ACL_SUCCESS

    def get_num_inputs(self, model_desc: int) -> int:
        self._log("get_num_inputs", (model_desc,))
        m = self._desc_model(model_desc)
        return 0 if m is None else m.n_inputs

    def get_num_outputs(self, model_desc: int) -> int:
        self._log("get_num_outputs", (model_desc,))
        m = self._desc_model(model_desc)
        return 0 if m is None else len(m.spec.outputs)

    def get_input_size_by_index(self, model_desc: int, index: int) -> int:
        self._log("get_input_size_by_index", (model_desc, index))
        m = self._desc_model(model_desc)
        return 0 if m is None or not 0 <= index < m.n_inputs else m.input_sizes[index]

    def get_output_size_by_index(self, model_desc: int, index: int) -> int:
        self._log("get_output_size_by_index", (model_desc, index))
        m = self._desc_model(model_desc)
        return 0 if m is None or not 0 <= index < len(m.spec.outputs) else m.spec.outputs[index].nbytes

    def _dims(self, name: str, dims: Sequence[int]) -> dict:
        return {"name": name, "dimCount": len(dims), "dims": list(dims)}

    def get_input_dims(self, model_desc: int, index: int):
        """aclmdlIODims as a dict. The AIPP input of a static model reports the source picture as NHWC
        (``[N, src_h, src_w, C]``, C = 3 for YUV420SP/RGB888 -- inferred from the note that get_input_dims
        follows the input image, CANN 8.5.0 aclpythondevg_01_0201; not checked against its Table 1)."""
        err = self._log("get_input_dims", (model_desc, index))
        if err:
            return None, err
        m = self._desc_model(model_desc)
        if m is None or not 0 <= index < m.n_inputs:
            return None, self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"get_input_dims: no input {index}")
        spec = m.spec
        if index == len(spec.inputs):
            return self._dims(DYNAMIC_AIPP_NAME, [DYNAMIC_AIPP_BYTES]), C.ACL_SUCCESS
        t = spec.inputs[index]
        if index == 0 and spec.static:
            c = 1 if str(spec.aipp.input_format).upper() == "YUV400_U8" else 3
            return self._dims(t.name, [t.dims[0], int(spec.aipp.src_image_size_h),
                                       int(spec.aipp.src_image_size_w), c]), C.ACL_SUCCESS
        return self._dims(t.name, t.dims), C.ACL_SUCCESS

    def get_output_dims(self, model_desc: int, index: int):
        err = self._log("get_output_dims", (model_desc, index))
        if err:
            return None, err
        m = self._desc_model(model_desc)
        if m is None or not 0 <= index < len(m.spec.outputs):
            return None, self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"get_output_dims: no output {index}")
        t = m.spec.outputs[index]
        return self._dims(t.name, t.dims), C.ACL_SUCCESS

    def get_input_data_type(self, model_desc: int, index: int) -> int:
        self._log("get_input_data_type", (model_desc, index))
        m = self._desc_model(model_desc)
        if m is None or not 0 <= index < m.n_inputs:
            return -1
        if (index == 0 and m.spec.aipp is not None) or index == len(m.spec.inputs):
            return DTYPE_CODES["uint8"]
        return DTYPE_CODES[m.spec.inputs[index].dtype]

    def get_output_data_type(self, model_desc: int, index: int) -> int:
        self._log("get_output_data_type", (model_desc, index))
        m = self._desc_model(model_desc)
        if m is None or not 0 <= index < len(m.spec.outputs):
            return -1
        return DTYPE_CODES[m.spec.outputs[index].dtype]

    def get_input_name_by_index(self, model_desc: int, index: int) -> str:
        self._log("get_input_name_by_index", (model_desc, index))
        m = self._desc_model(model_desc)
        return "" if m is None or not 0 <= index < m.n_inputs else m.input_names[index]

    def get_input_index_by_name(self, model_desc: int, name: str):
        err = self._log("get_input_index_by_name", (model_desc, name))
        if err:
            return None, err
        m = self._desc_model(model_desc)
        if m is None or name not in m.input_names:
            return None, self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"get_input_index_by_name: no input {name!r}")
        return m.input_names.index(name), C.ACL_SUCCESS

    def get_aipp_type(self, model_id: int, index: int):
        err = self._log("get_aipp_type", (model_id, index))
        if err:
            return None, None, err
        m = self._model(model_id)
        if m is None or not 0 <= index < m.n_inputs:
            return None, None, self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"get_aipp_type: no input {index}")
        spec = m.spec
        if index == 0 and spec.dynamic:
            return WITH_DYNAMIC_AIPP, len(spec.inputs), C.ACL_SUCCESS
        if index == 0 and spec.static:
            return WITH_STATIC_AIPP, _NO_INDEX, C.ACL_SUCCESS
        if spec.dynamic and index == len(spec.inputs):
            return DYNAMIC_AIPP_NODE, _NO_INDEX, C.ACL_SUCCESS
        return WITHOUT_AIPP, _NO_INDEX, C.ACL_SUCCESS

    def get_first_aipp_info(self, model_id: int, index: int):
        """``aipp_info, ret = acl.mdl.get_first_aipp_info(model_id, index)`` (CANN 8.0.RC1 aclpythondevg_01_0207,
        8.0.RC3 01_0215): the AIPP configuration of input ``index`` as the ``aclAippInfo`` dict (aclpythondevg_01_0925,
        the C struct's field names, aclcppdevg_03_1363). For a static model: the descriptor's ``aipp.cfg`` (its
        ``src_image_size`` 0 already the model input's size; switches 0/1; minima and var_reci as C floats). For a
        dynamic AIPP input only srcFormat, srcDatatype, srcDimNum, shapeCount and outDims are valid (the page's
        restriction; the rest is 0 here). An input without AIPP: ``ACL_ERROR_GE_AIPP_NOT_EXIST``. srcFormat is
        NCHW (the descriptor's inputs are NCHW), srcDimNum the input's dim count; shapeCount / outDims (the gears of
        a dynamic batch or resolution) are not modelled: 0 and []."""
        err = self._log("get_first_aipp_info", (model_id, index))
        if err:
            return None, err
        m = self._model(model_id)
        if m is None or not isinstance(index, int) or not 0 <= index < m.n_inputs:
            return None, self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"get_first_aipp_info: no model {model_id} or "
                                                                   f"no input {index}")
        spec = m.spec
        if index != 0 or spec.aipp is None:
            return None, self._sim.fail(ACL_ERROR_GE_AIPP_NOT_EXIST, f"get_first_aipp_info: input {index} has no "
                                                                     "AIPP configuration")
        t = spec.inputs[0]
        info: dict = {"inputFormat": 0, "srcImageSizeW": 0, "srcImageSizeH": 0, "cropSwitch": 0, "loadStartPosW": 0,
                      "loadStartPosH": 0, "cropSizeW": 0, "cropSizeH": 0, "resizeSwitch": 0, "resizeOutputW": 0,
                      "resizeOutputH": 0, "paddingSwitch": 0, "leftPaddingSize": 0, "rightPaddingSize": 0,
                      "topPaddingSize": 0, "bottomPaddingSize": 0, "cscSwitch": 0, "rbuvSwapSwitch": 0,
                      "axSwapSwitch": 0, "singleLineMode": 0}
        info.update({f"matrixR{r}C{c}": 0 for r in range(3) for c in range(3)})
        info.update({f"{k}Bias{i}": 0 for k in ("output", "input") for i in range(3)})
        info.update({f"{k}Chn{i}": 0 for k in ("mean", "min", "varReci") for i in range(4)})
        if spec.static:
            cfg = spec.aipp
            formats = {v: k for k, v in AIPP_INPUT_FORMATS.items()}
            info.update({
                "inputFormat": formats.get(str(cfg.input_format).upper(), 0),
                "srcImageSizeW": int(cfg.src_image_size_w), "srcImageSizeH": int(cfg.src_image_size_h),
                "cropSwitch": int(bool(cfg.crop)), "loadStartPosW": int(cfg.load_start_pos_w),
                "loadStartPosH": int(cfg.load_start_pos_h), "cropSizeW": int(cfg.crop_size_w),
                "cropSizeH": int(cfg.crop_size_h), "paddingSwitch": int(bool(cfg.padding)),
                "leftPaddingSize": int(cfg.left_padding_size), "rightPaddingSize": int(cfg.right_padding_size),
                "topPaddingSize": int(cfg.top_padding_size), "bottomPaddingSize": int(cfg.bottom_padding_size),
                "cscSwitch": int(bool(cfg.csc_switch)), "rbuvSwapSwitch": int(bool(cfg.rbuv_swap_switch)),
                "axSwapSwitch": int(bool(cfg.ax_swap_switch))})
            info.update({f"matrixR{r}C{c}": int(getattr(cfg, f"matrix_r{r}c{c}")) for r in range(3) for c in range(3)})
            info.update({f"outputBias{i}": int(getattr(cfg, f"output_bias_{i}")) for i in range(3)})
            info.update({f"inputBias{i}": int(getattr(cfg, f"input_bias_{i}")) for i in range(3)})
            info.update({f"meanChn{i}": int(getattr(cfg, f"mean_chn_{i}")) for i in range(4)})
            info.update({f"minChn{i}": float(np.float32(getattr(cfg, f"min_chn_{i}"))) for i in range(4)})
            info.update({f"varReciChn{i}": float(np.float32(getattr(cfg, f"var_reci_chn_{i}"))) for i in range(4)})
        info.update({"srcFormat": _ACL_FORMAT_NCHW, "srcDatatype": DTYPE_CODES[t.dtype], "srcDimNum": len(t.dims),
                     "shapeCount": 0, "outDims": []})
        return info, C.ACL_SUCCESS

    # -- datasets -------------------------------------------------------------------------------------
    def create_dataset(self):
        if self._log("create_dataset", ()):
            return 0
        return self._sim.objs.add(Dataset())

    def destroy_dataset(self, dataset: int) -> int:
        err = self._log("destroy_dataset", (dataset,))
        if err:
            return err
        return C.ACL_SUCCESS if self._sim.objs.pop(dataset, Dataset) else C.ACL_ERROR_INVALID_PARAM

    def add_dataset_buffer(self, dataset: int, data_buffer: int):
        err = self._log("add_dataset_buffer", (dataset, data_buffer))
        if err:
            return dataset, err
        ds = self._sim.objs.get(dataset, Dataset)
        if ds is None or self._sim.objs.get(data_buffer, DataBuffer) is None:
            return dataset, self._sim.fail(C.ACL_ERROR_INVALID_PARAM, "add_dataset_buffer: unknown dataset or buffer")
        ds.buffers.append(data_buffer)
        return dataset, C.ACL_SUCCESS

    def get_dataset_num_buffers(self, dataset: int) -> int:
        self._log("get_dataset_num_buffers", (dataset,))
        ds = self._sim.objs.get(dataset, Dataset)
        return 0 if ds is None else len(ds.buffers)

    def get_dataset_buffer(self, dataset: int, index: int) -> int:
        self._log("get_dataset_buffer", (dataset, index))
        ds = self._sim.objs.get(dataset, Dataset)
        return 0 if ds is None or not 0 <= index < len(ds.buffers) else ds.buffers[index]

    # -- dynamic AIPP ---------------------------------------------------------------------------------
    def create_aipp(self, batch_size: int):
        if self._log("create_aipp", (batch_size,)) or int(batch_size) <= 0:
            return 0
        return self._sim.objs.add(AippSet(int(batch_size)))

    def destroy_aipp(self, aipp_parms_set: int) -> int:
        err = self._log("destroy_aipp", (aipp_parms_set,))
        if err:
            return err
        return C.ACL_SUCCESS if self._sim.objs.pop(aipp_parms_set, AippSet) else C.ACL_ERROR_INVALID_PARAM

    def _setter(self, api: str) -> Callable[..., int]:
        def setter(aipp_parms_set: int, *args: Any) -> int:
            err = self._log(api, (aipp_parms_set, *args))
            if err:
                return err
            s = self._sim.objs.get(aipp_parms_set, AippSet)
            if s is None:
                return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: unknown aipp parameter set")
            why = check_aipp_args(api, tuple(args), s.batch)
            if why:
                return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: {why}")
            s.calls.append((api, tuple(args)))
            return C.ACL_SUCCESS

        setter.__name__ = api
        return setter

    def __getattr__(self, name: str) -> Any:
        if name in AIPP_SETTERS:
            return self._setter(name)
        raise AttributeError(name)

    def set_input_aipp(self, model_id: int, dataset: int, index: int, aipp_parms_set: int) -> int:
        """Writes the parameters into the dataset's buffer of the dynamic-AIPP input ``index`` (the AIPP
        input's own index, ``get_input_index_by_name(desc, "ascend_dynamic_aipp_data")``)."""
        err = self._log("set_input_aipp", (model_id, dataset, index, aipp_parms_set))
        if err:
            return err
        m = self._model(model_id)
        if m is None or not m.spec.dynamic or index != len(m.spec.inputs):
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"set_input_aipp: input {index} is not a dynamic "
                                                             "AIPP input")
        return self._write_aipp(m, dataset, index, aipp_parms_set, "set_input_aipp")

    def set_aipp_by_input_index(self, model_id: int, dataset: int, index: int, aipp_parms_set: int) -> int:
        """As :meth:`set_input_aipp`, ``index`` being the model input the AIPP applies to (CANN 8.5.0
        aclcppdevg_03_0311: an input without an associated dynamic AIPP input is an error)."""
        err = self._log("set_aipp_by_input_index", (model_id, dataset, index, aipp_parms_set))
        if err:
            return err
        m = self._model(model_id)
        if m is None or not m.spec.dynamic or index != 0:
            return self._sim.fail(C.ACL_ERROR_INVALID_PARAM, f"set_aipp_by_input_index: input {index} has no "
                                                             "associated dynamic AIPP input")
        return self._write_aipp(m, dataset, len(m.spec.inputs), aipp_parms_set, "set_aipp_by_input_index")

    def _write_aipp(self, m: "_LoadedModel", dataset: int, index: int, aipp_parms_set: int, api: str) -> int:
        sim = self._sim
        ds = sim.objs.get(dataset, Dataset)
        s = sim.objs.get(aipp_parms_set, AippSet)
        if ds is None or s is None:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: unknown dataset or parameter set")
        if index >= len(ds.buffers):
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: the dataset has no buffer {index}")
        if s.batch != m.spec.inputs[0].dims[0]:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: the parameter set was created for batch "
                                                       f"{s.batch}, the model's batch is {m.spec.inputs[0].dims[0]}")
        try:
            fields = aipp_fields(s.calls, s.batch)
        except AippBatchSizeMismatch as e:  # the documented rule: the device refuses these parameters
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: {e}")
        except ValueError as e:
            return sim.fail(C.ACL_ERROR_FEATURE_UNSUPPORTED, f"{api}: {e}")
        if "src_image_size_w" not in fields:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: set_aipp_src_image_size was not called (required in "
                                                       "the dynamic AIPP scenario, aclcppdevg_03_1418)")
        from ..aipp import AippConfig

        try:  # the cross-argument rules: even YUV420SP sizes and crop starts, crop inside, padding, width <= 1080
            cfg = AippConfig(**fields)
        except (TypeError, ValueError) as e:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: {e}")
        dims = m.spec.inputs[0].dims
        if tuple(cfg.output_hw) != tuple(dims[2:]):  # set_input_aipp restrictions (aclcppdevg_03_0308)
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: AIPP would write {cfg.output_hw[0]}x{cfg.output_hw[1]} "
                                                       f"(HxW), the model input is {dims[2]}x{dims[3]}")
        raw = json.dumps(fields).encode()
        buf = sim.objs.get(ds.buffers[index], DataBuffer)
        view = self._device_view(buf, len(raw) + 1) if buf is not None else None
        if view is None or len(raw) + 1 > buf.size:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"{api}: the dynamic AIPP input buffer is not device "
                                                       "memory of get_input_size_by_index bytes")
        view[:len(raw)] = np.frombuffer(raw, np.uint8)
        view[len(raw)] = 0
        return C.ACL_SUCCESS

    # -- execution ------------------------------------------------------------------------------------
    def _device_view(self, buf: DataBuffer, nbytes: int) -> Optional[np.ndarray]:
        space, view = self._sim.memory.resolve(buf.ptr, nbytes)
        return view if space in ("device", "rt") else None

    def _prepare(self, model_id: int, input_ds: int, output_ds: int) -> Any:
        """Validate the call; returns an error code or a function running the model."""
        sim = self._sim
        m = self._model(model_id)
        if m is None:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"execute: no loaded model {model_id}")
        err = self._context_error("execute", m)
        if err:
            return err
        ins, outs = sim.objs.get(input_ds, Dataset), sim.objs.get(output_ds, Dataset)
        if ins is None or outs is None:
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, "execute: the input or output dataset was destroyed or never "
                                                       "created")
        spec = m.spec
        if len(ins.buffers) != m.n_inputs or len(outs.buffers) != len(spec.outputs):
            return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"execute: the model has {m.n_inputs} input(s) and "
                                                       f"{len(spec.outputs)} output(s), the datasets hold "
                                                       f"{len(ins.buffers)} and {len(outs.buffers)} buffer(s)")
        in_views = []
        for i, h in enumerate(ins.buffers):
            b = sim.objs.get(h, DataBuffer)
            if b is None:
                return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"execute: input buffer {i} was destroyed")
            dyn_src = i == 0 and spec.dynamic  # up to max_src_image_size (ATC); the pictures' size is checked below
            if (b.size > m.input_sizes[i] or b.size <= 0) if dyn_src else b.size != m.input_sizes[i]:
                return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"execute: input {i} holds {b.size} B, the model expects "
                                                           f"{'at most ' if dyn_src else ''}{m.input_sizes[i]} B "
                                                           "(get_input_size_by_index)")
            v = self._device_view(b, b.size)
            if v is None:
                return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"execute: input {i} at {b.ptr:#x} is not device memory "
                                                           f"of {b.size} B")
            in_views.append(v)
        out_views = []
        for i, h in enumerate(outs.buffers):
            b = sim.objs.get(h, DataBuffer)
            need = spec.outputs[i].nbytes
            if b is None or b.size < need:
                return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"execute: output {i} needs {need} B "
                                                           f"(get_output_size_by_index)")
            v = self._device_view(b, need)
            if v is None:
                return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"execute: output {i} at {b.ptr:#x} is not device memory")
            out_views.append(v)
        cfg = spec.aipp if spec.static else None
        if spec.dynamic:
            raw = in_views[-1].tobytes().split(b"\0", 1)[0]
            try:
                fields = json.loads(raw.decode()) if raw else None
            except (ValueError, UnicodeDecodeError):
                fields = None
            if not fields:
                return sim.fail(C.ACL_ERROR_INVALID_PARAM, "execute: the dynamic AIPP parameters were not set "
                                                           "(acl.mdl.set_input_aipp)")
            from ..aipp import AippConfig

            try:
                cfg = AippConfig(**fields)
                need = spec.inputs[0].dims[0] * _picture_bytes(cfg)
            except (TypeError, ValueError) as e:
                return sim.fail(C.ACL_ERROR_FEATURE_UNSUPPORTED, f"execute: dynamic AIPP parameters: {e}")
            if len(in_views[0]) != need:
                # ATC "AIPP Verification of the Model Input Size" (CANN 8.0.0 atlasatc_16_0024): N x w x h x 1.5
                # for YUV420SP_U8, the N pictures back to back; the dynamic page only bounds it by
                # max_src_image_size, so the software device takes the stricter reading: exactly N pictures
                return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"execute: input 0 holds {len(in_views[0])} B, the "
                                                           f"dynamic AIPP source size {cfg.src_image_size_w}x"
                                                           f"{cfg.src_image_size_h} needs {need} B: "
                                                           f"{spec.inputs[0].dims[0]} pictures back to back")
        def run() -> int:  # reads the inputs when the stream runs the task, as the device does
            return self._run(m, cfg, [v.copy() for v in in_views[:len(spec.inputs)]], out_views)

        run.model = m  # type: ignore[attr-defined]  # what unload looks for in the stream queues
        return run

    def _run(self, m: _LoadedModel, cfg: Any, data: list, out_views: list) -> int:
        sim, spec = self._sim, m.spec
        try:
            arrays = []
            for i, raw in enumerate(data):
                t = spec.inputs[i]
                if i == 0 and cfg is not None:
                    from ..aipp import apply_aipp

                    n = t.dims[0]
                    pics = _pictures(cfg, raw[:n * _picture_bytes(cfg)], n)
                    x = np.asarray(apply_aipp(cfg, pics))
                    if x.shape != t.dims:
                        return sim.fail(C.ACL_ERROR_INVALID_PARAM, f"execute: AIPP writes {x.shape}, the model "
                                                                   f"input is {t.dims}")
                    arrays.append(x.astype(t.dtype, copy=False))
                else:
                    arrays.append(raw.view(t.dtype).reshape(t.dims))
            result = spec.fn(*arrays)
        except Exception as e:  # noqa: BLE001 - the user's model failed: a device task failure
            return sim.fail(C.ACL_ERROR_RT_FAILURE, f"execute: the model function raised {type(e).__name__}: {e}")
        outs = list(result) if isinstance(result, (list, tuple)) else [result]
        if len(outs) != len(spec.outputs):
            return sim.fail(C.ACL_ERROR_RT_FAILURE, f"execute: the model function returned {len(outs)} output(s), "
                                                    f"the descriptor declares {len(spec.outputs)}")
        for i, (o, t, v) in enumerate(zip(outs, spec.outputs, out_views)):
            a = np.asarray(o)
            if a.shape != t.dims:
                return sim.fail(C.ACL_ERROR_RT_FAILURE, f"execute: output {i} has shape {a.shape}, the descriptor "
                                                        f"declares {t.dims}")
            v[:] = np.ascontiguousarray(a.astype(t.dtype, copy=False)).view(np.uint8).reshape(-1)
        return C.ACL_SUCCESS

    def execute(self, model_id: int, input: int, output: int) -> int:  # noqa: A002 - pyACL's parameter name
        err = self._log("execute", (model_id, input, output))
        if err:
            return err
        job = self._prepare(model_id, input, output)
        return job if isinstance(job, int) else job()

    def execute_async(self, model_id: int, input: int, output: int, stream: int) -> int:  # noqa: A002
        err = self._log("execute_async", (model_id, input, output, stream))
        if err:
            return err
        s, ret = self._sim.stream(stream, "execute_async")
        if ret:
            return ret
        job = self._prepare(model_id, input, output)
        if isinstance(job, int):
            return job
        with s.lock:
            s.queue.append(job)
        return C.ACL_SUCCESS


class DataBufferCalls:
    """``acl.create_data_buffer`` and friends (top-level pyACL functions), mixed into the software device."""

    # provided by the software device (SimAcl) this is mixed into
    _initialised: bool
    objs: Any
    fault: Callable[[str], bool]
    fail: Callable[[int, str], int]

    def create_data_buffer(self, data: int, size: int) -> int:
        """``output = acl.create_data_buffer(data, size)`` (CANN 8.0.RC3 aclpythondevg_01_0016): ``data`` 0 with
        ``size`` 0 is an empty buffer; 0 (NULL) on failure."""
        if not self._initialised or self.fault("mdl"):
            self.fail(C.ACL_ERROR_RT_FAILURE if self._initialised else C.ACL_ERROR_UNINITIALIZE,
                      "create_data_buffer: " + ("injected fault" if self._initialised else "acl.init was not called"))
            return 0
        if (data == 0) != (size == 0) or size < 0:
            self.fail(C.ACL_ERROR_INVALID_PARAM, "create_data_buffer: data 0 needs size 0")
            return 0
        return self.objs.add(DataBuffer(int(data), int(size)))

    def destroy_data_buffer(self, data_buffer: int) -> int:
        return C.ACL_SUCCESS if self.objs.pop(data_buffer, DataBuffer) else C.ACL_ERROR_INVALID_PARAM

    def update_data_buffer(self, data_buffer: int, data: int, size: int) -> int:
        b = self.objs.get(data_buffer, DataBuffer)
        if b is None:
            return C.ACL_ERROR_INVALID_PARAM
        b.ptr, b.size = int(data), int(size)
        return C.ACL_SUCCESS

    def get_data_buffer_addr(self, data_buffer: int) -> int:
        b = self.objs.get(data_buffer, DataBuffer)
        return 0 if b is None else b.ptr

    def get_data_buffer_size_v2(self, data_buffer: int) -> int:
        b = self.objs.get(data_buffer, DataBuffer)
        return 0 if b is None else b.size
