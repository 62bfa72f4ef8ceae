"""The offline-model (``acl.mdl``) calls, through :meth:`dvpipe.backends.dvpp._acl.Runtime.call`.

One job: turn the pyACL model API into a few small functions with typed results, every call checked by
the runtime's one checker (a non-zero code raises :class:`~dvpipe.backends.dvpp._acl.AclError` carrying
the code, the API name and the recent error message). :class:`dvpipe.models.OmModel` uses them.

pyACL call sequence (CANN 8.0.0 pyACL "Model Loading" / "Model Execution"; signatures in
:data:`dvpipe.backends.dvpp._acl.API`, each with its page):

1. ``model_id, ret = acl.mdl.load_from_file(path)`` (aclpythondevg_01_0147) or ``load_from_mem(ptr, size)``
   (01_0149) -- loading, executing and unloading must happen in one context;
2. ``desc = acl.mdl.create_desc()``, ``ret = acl.mdl.get_desc(desc, model_id)`` (01_0205), then per input /
   output ``get_input_size_by_index`` (bytes, 01_0199), ``get_input_dims`` (``{"name", "dimCount", "dims"}``,
   8.5.0 01_0201), ``get_output_data_type`` (``aclDataType``, 01_0218), ``get_aipp_type(model_id, i)``
   (``(type, dynamic_attached_data_index, ret)``, 01_0166); a tensor whose ``aclDataType`` is not in
   :data:`DTYPES` (``ACL_BF16`` 27, ``ACL_INT4`` 29, ``ACL_STRING`` 13, ...) is refused here, at load;
   for an input with static AIPP ``aipp_info, ret = acl.mdl.get_first_aipp_info(model_id, index)``
   (8.0.RC1 aclpythondevg_01_0207, 8.0.RC3 01_0215): the ``aclAippInfo`` dict (01_0925) the model was
   converted with (:func:`first_aipp_info`);
3. datasets: ``acl.mdl.create_dataset()``, ``buf = acl.create_data_buffer(ptr, size)`` (8.0.RC3 01_0016;
   ``ptr`` 0 with ``size`` 0 is an empty buffer), ``dataset, ret = acl.mdl.add_dataset_buffer(dataset, buf)``
   (01_0197); ``acl.update_data_buffer(buf, ptr, size)`` re-points a buffer (01_0154 sample);
4. dynamic AIPP: ``acl.mdl.create_aipp(batch)`` (01_0178), the ``set_aipp_*`` calls,
   ``acl.mdl.set_input_aipp(model_id, dataset, index, aipp)`` (6.0.1 01_0155), ``destroy_aipp``;
5. ``ret = acl.mdl.execute_async(model_id, input, output, stream)`` (01_0156) then
   ``acl.rt.synchronize_stream``: the call only queues the task;
6. teardown: ``acl.destroy_data_buffer`` for each buffer, ``destroy_dataset``, ``destroy_desc``, ``unload``.

Nothing here has run on Ascend hardware: it is written against the documented API and exercised on the
software device (:mod:`dvpipe.backends.dvpp.sim._mdl`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence
from ...errors import ConfigError
from .aipp import ACL_AIPP_INPUT_FORMAT

__all__ = ["TensorInfo", "ModelInfo", "Dataset", "DTYPES", "ACL_DATA_TYPE_NAMES", "AIPP_TYPES", "AIPP_INFO_FIELDS",
           "load", "unload", "describe", "first_aipp_info", "create_dataset", "destroy_dataset", "point_buffer",
           "execute_async", "run_aipp_calls"]

#: aclDataType -> numpy dtype name (CANN 8.0.0 aclcppdevg_03_1346; 8.5.0 aclpythondevg_01_0912)
DTYPES = {0: "float32", 1: "float16", 2: "int8", 3: "int32", 4: "uint8", 6: "int16", 7: "uint16", 8: "uint32",
          9: "int64", 10: "uint64", 11: "float64", 12: "bool"}
#: the aclDataType values dvpipe has no numpy type for (same pages), named for messages; any other value outside
#: :data:`DTYPES` is refused too
ACL_DATA_TYPE_NAMES = {-1: "ACL_DT_UNDEFINED", 13: "ACL_STRING", 16: "ACL_COMPLEX64", 17: "ACL_COMPLEX128",
                       27: "ACL_BF16", 29: "ACL_INT4", 30: "ACL_UINT1", 33: "ACL_COMPLEX32"}
#: aclmdlInputAippType (CANN 6.0.1 aclpythondevg_01_0132)
AIPP_TYPES = {0: "none", 1: "static", 2: "dynamic", 3: "dynamic_params"}
#: the name of the dynamic-AIPP parameter input (ACL_DYNAMIC_AIPP_NAME; set_input_aipp page)
DYNAMIC_AIPP_NAME = "ascend_dynamic_aipp_data"
#: aclAippInputFormat (CANN 8.0.0 aclpythondevg_01_0935) -> the ATC ``input_format`` name
AIPP_INPUT_FORMATS = {code: name for name, code in ACL_AIPP_INPUT_FORMAT.items()}
#: key of the ``aclAippInfo`` dict ``acl.mdl.get_first_aipp_info`` returns (pyACL aclAippInfo, CANN 8.0.0
#: aclpythondevg_01_0925: the C struct's field names, aclcppdevg_03_1363) -> the ATC ``aipp_op`` field
#: (:class:`~dvpipe.backends.dvpp.aipp.AippConfig`). ``resizeSwitch`` / ``singleLineMode`` have no ``aipp_op``
#: field dvpipe writes (always off); ``srcFormat`` ... ``outDims`` describe the original model input, not AIPP.
AIPP_INFO_FIELDS = {
    "inputFormat": "input_format", "srcImageSizeW": "src_image_size_w", "srcImageSizeH": "src_image_size_h",
    "cropSwitch": "crop", "loadStartPosW": "load_start_pos_w", "loadStartPosH": "load_start_pos_h",
    "cropSizeW": "crop_size_w", "cropSizeH": "crop_size_h", "resizeSwitch": "resize", "paddingSwitch": "padding",
    "leftPaddingSize": "left_padding_size", "rightPaddingSize": "right_padding_size",
    "topPaddingSize": "top_padding_size", "bottomPaddingSize": "bottom_padding_size", "cscSwitch": "csc_switch",
    "rbuvSwapSwitch": "rbuv_swap_switch", "axSwapSwitch": "ax_swap_switch", "singleLineMode": "single_line_mode",
    **{f"matrixR{r}C{c}": f"matrix_r{r}c{c}" for r in range(3) for c in range(3)},
    **{f"outputBias{i}": f"output_bias_{i}" for i in range(3)},
    **{f"inputBias{i}": f"input_bias_{i}" for i in range(3)},
    **{f"meanChn{i}": f"mean_chn_{i}" for i in range(4)},
    **{f"minChn{i}": f"min_chn_{i}" for i in range(4)},
    **{f"varReciChn{i}": f"var_reci_chn_{i}" for i in range(4)},
}


@dataclass(frozen=True)
class TensorInfo:
    """One model input or output as the model description reports it.

    Attributes:
        index: position in the dataset.
        name: tensor name.
        dims: shape (``get_input_dims``; for an input with static AIPP the source picture batch as NHWC).
        dtype: numpy dtype name (``aclDataType``; uint8 for an AIPP input).
        nbytes: bytes the buffer must hold (``get_input_size_by_index`` / ``get_output_size_by_index``).
        aipp: ``none``, ``static``, ``dynamic`` (parameters come through another input) or
            ``dynamic_params`` (this input carries them) -- inputs only.
        aipp_index: for ``dynamic``, the index of the input carrying the parameters.
    """

    index: int
    name: str
    dims: tuple[int, ...]
    dtype: str
    nbytes: int
    aipp: str = "none"
    aipp_index: Optional[int] = None

    def describe(self) -> str:
        """``1x3x480x800 float16 (2304000 B)``."""
        shape = "x".join(str(d) for d in self.dims) or "?"
        extra = {"static": ", raw pictures for its static AIPP", "dynamic": ", raw pictures for its dynamic AIPP",
                 "dynamic_params": ", dynamic AIPP parameters"}.get(self.aipp, "")
        return f"{shape} {self.dtype} ({self.nbytes} B{extra})"


@dataclass(frozen=True)
class ModelInfo:
    """Inputs and outputs of a loaded model."""

    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]

    @property
    def data_inputs(self) -> tuple[TensorInfo, ...]:
        """The inputs the application fills (all but the dynamic-AIPP parameter inputs)."""
        return tuple(t for t in self.inputs if t.aipp != "dynamic_params")


@dataclass
class Dataset:
    """An ``aclmdlDataset`` handle and the ``aclDataBuffer`` handles added to it, in order."""

    handle: int
    buffers: list


def load(rt: Any, path: Optional[str] = None, data: Optional[bytes] = None) -> int:
    """Load a model from ``path`` (``acl.mdl.load_from_file``) or from the host bytes ``data``
    (``acl.mdl.load_from_mem``); returns the model id."""
    if (path is None) == (data is None):
        raise ConfigError("load needs a path or the model bytes, not both")
    if path is not None:
        return rt.call("acl.mdl.load_from_file", str(path), model=str(path))
    assert data is not None  # checked above: exactly one of path and data
    ptr = rt.call("acl.util.bytes_to_ptr", data)
    return rt.call("acl.mdl.load_from_mem", ptr, len(data), model_bytes=len(data))


def _dims(out: Any) -> tuple[str, tuple[int, ...]]:
    if isinstance(out, dict):
        return str(out.get("name", "")), tuple(int(d) for d in out.get("dims", ()))
    return "", ()


def _dtype(code: Any, side: str, index: int, name: str) -> str:
    """The numpy dtype name of ``aclDataType`` ``code``; a ``ConfigError`` (one line) for a type dvpipe cannot
    read (bf16, int4, string, ...): read as another type, every value would be reinterpreted."""
    value = int(code)
    if value in DTYPES:
        return DTYPES[value]
    label = f" ({ACL_DATA_TYPE_NAMES[value]})" if value in ACL_DATA_TYPE_NAMES else ""
    raise ConfigError(f"{side} {index} ({name or '?'}) has aclDataType {value}{label}, which dvpipe cannot read "
                      f"(aclDataType, CANN aclcppdevg_03_1346; it reads {' '.join(DTYPES.values())}): convert the "
                      "model with one of those types", "path")


def describe(rt: Any, model_id: int) -> tuple[int, ModelInfo]:
    """``(desc handle, ModelInfo)``; the caller destroys the description with ``acl.mdl.destroy_desc``.

    A data input or an output whose ``aclDataType`` has no numpy type here is refused (``ConfigError`` on
    ``path``). The inputs an AIPP reads (raw uint8 pictures) and the dynamic-AIPP parameter input are filled as
    bytes: their type is not read as data, and an unknown one stays ``uint8``."""
    desc = rt.call("acl.mdl.create_desc")
    try:
        rt.call("acl.mdl.get_desc", desc, model_id)
        inputs = []
        for i in range(int(rt.call("acl.mdl.get_num_inputs", desc))):
            name, dims = _dims(rt.call("acl.mdl.get_input_dims", desc, i))
            kind, attached, = rt.call("acl.mdl.get_aipp_type", model_id, i)
            aipp = AIPP_TYPES.get(int(kind), "none")
            if name == DYNAMIC_AIPP_NAME:
                aipp = "dynamic_params"
            code = int(rt.call("acl.mdl.get_input_data_type", desc, i))
            dtype = _dtype(code, "input", i, name) if aipp == "none" else DTYPES.get(code, "uint8")
            inputs.append(TensorInfo(i, name, dims, dtype, int(rt.call("acl.mdl.get_input_size_by_index", desc, i)),
                                     aipp, int(attached) if aipp == "dynamic" else None))
        outputs = []
        for i in range(int(rt.call("acl.mdl.get_num_outputs", desc))):
            name, dims = _dims(rt.call("acl.mdl.get_output_dims", desc, i))
            dtype = _dtype(rt.call("acl.mdl.get_output_data_type", desc, i), "output", i, name)
            outputs.append(TensorInfo(i, name, dims, dtype, int(rt.call("acl.mdl.get_output_size_by_index", desc, i))))
    except Exception:
        rt.acl.mdl.destroy_desc(desc)
        raise
    return desc, ModelInfo(tuple(inputs), tuple(outputs))


def first_aipp_info(rt: Any, model_id: int, index: int) -> dict:
    """The static AIPP input ``index`` was converted with, as ``aipp_op`` field -> value (:data:`AIPP_INFO_FIELDS`;
    ``input_format`` as its ATC name, switches as bool), from ``aipp_info, ret =
    acl.mdl.get_first_aipp_info(model_id, index)`` (CANN 8.0.RC3 aclpythondevg_01_0215; the dict is
    ``aclAippInfo``, aclpythondevg_01_0925). Only for an input ``get_aipp_type`` reports as static AIPP: for a
    dynamic one the page says only srcFormat, srcDatatype, srcDimNum, shapeCount and outDims are valid, and an
    input without AIPP is an error (ACL_ERROR_GE_AIPP_NOT_EXIST). Keys the dict lacks are left out, but a dict
    with none of the documented keys is refused: its names differ from the page's, and nothing would be compared."""
    info = rt.call("acl.mdl.get_first_aipp_info", int(model_id), int(index), model_id=model_id, input=index)
    if not isinstance(info, dict):
        raise ConfigError(f"acl.mdl.get_first_aipp_info returned {type(info).__name__}, not the aclAippInfo dict its "
                          "page documents (aclpythondevg_01_0925): this pyACL differs from the documented one (report "
                          "it with your CANN version)", "model")
    if not any(key in info for key in AIPP_INFO_FIELDS):
        raise ConfigError("acl.mdl.get_first_aipp_info returned a dict without any of the aclAippInfo keys its page "
                          f"documents (aclpythondevg_01_0925; got {sorted(info)[:6]}): this pyACL differs from the "
                          "documented one (report it with your CANN version)", "model")
    out: dict = {}
    for key, field in AIPP_INFO_FIELDS.items():
        if key not in info:
            continue
        value = info[key]
        if key == "inputFormat":
            value = AIPP_INPUT_FORMATS.get(int(value), f"aclAippInputFormat {int(value)}")
        elif key.endswith(("Switch", "Mode")):
            value = bool(value)
        out[field] = value
    return out


def create_dataset(rt: Any, buffers: Sequence[tuple[int, int]]) -> Dataset:
    """A dataset over ``(device pointer, bytes)`` pairs (``(0, 0)``: an empty buffer to point later). No
    memory is copied or allocated: the data buffers describe memory someone else owns."""
    ds = Dataset(rt.call("acl.mdl.create_dataset"), [])
    try:
        for ptr, size in buffers:
            buf = rt.call("acl.create_data_buffer", int(ptr), int(size))
            ds.buffers.append(buf)
            rt.call("acl.mdl.add_dataset_buffer", ds.handle, buf)
    except Exception:
        destroy_dataset(rt, ds)
        raise
    return ds


def destroy_dataset(rt: Any, ds: Dataset) -> None:
    """Destroy the data buffers, then the dataset (the memory they describe is not freed). Best effort: every
    handle is released even when one call fails; the first failure is raised at the end."""
    first: Optional[BaseException] = None
    for buf in ds.buffers:
        try:
            rt.call("acl.destroy_data_buffer", buf)
        except Exception as e:  # noqa: BLE001 - teardown goes on
            first = first or e
    ds.buffers = []
    try:
        rt.call("acl.mdl.destroy_dataset", ds.handle)
    except Exception as e:  # noqa: BLE001
        first = first or e
    if first is not None:
        raise first


def point_buffer(rt: Any, ds: Dataset, index: int, ptr: int, size: int) -> None:
    """Re-point buffer ``index`` of ``ds`` at ``size`` bytes of device memory at ``ptr`` (no copy)."""
    rt.call("acl.update_data_buffer", ds.buffers[index], int(ptr), int(size), index=index, bytes=int(size))


def execute_async(rt: Any, model_id: int, inputs: Dataset, outputs: Dataset, stream: int) -> None:
    """Queue the model on ``stream`` (synchronise the stream before reading the outputs)."""
    rt.call("acl.mdl.execute_async", model_id, inputs.handle, outputs.handle, stream, model_id=model_id)


def run_aipp_calls(rt: Any, calls: Sequence[tuple[str, tuple]], *, model_id: int, dataset: Dataset) -> int:
    """Run a dynamic-AIPP call list (:func:`dvpipe.backends.dvpp.aipp.dynamic_aipp_calls`) up to its
    ``destroy_aipp``: the placeholders become the handle ``acl.mdl.create_aipp`` returns, ``model_id`` and
    the dataset. Returns the parameter set, kept alive for the executions that follow (the caller calls
    ``acl.mdl.destroy_aipp`` when it changes the parameters or closes: whether the device reads the set
    again at execution is not documented, so it is never destroyed under a model that may). On a failure
    the set is destroyed here and the error raised."""
    from .aipp import AIPP_SET, DATASET, MODEL_ID

    handle = None
    try:
        for api, args in calls:
            if api == "acl.mdl.create_aipp":
                handle = rt.call(api, *args)
                continue
            if api == "acl.mdl.destroy_aipp":
                continue  # the caller's, later
            subst = {AIPP_SET: handle, MODEL_ID: model_id, DATASET: dataset.handle}
            rt.call(api, *[subst.get(a, a) if isinstance(a, str) else a for a in args])
    except Exception:
        if handle is not None:
            try:
                rt.call("acl.mdl.destroy_aipp", handle)
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
        raise
    if handle is None:
        raise ConfigError("the dynamic AIPP call list has no acl.mdl.create_aipp")
    return handle


def unload(rt: Any, model_id: int, desc: Optional[int]) -> None:
    """Destroy the description and unload the model (best effort; the first failure is raised)."""
    first: Optional[BaseException] = None
    if desc is not None:
        try:
            rt.call("acl.mdl.destroy_desc", desc)
        except Exception as e:  # noqa: BLE001
            first = e
    try:
        rt.call("acl.mdl.unload", model_id)
    except Exception as e:  # noqa: BLE001
        first = first or e
    if first is not None:
        raise first
