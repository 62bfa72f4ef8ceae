"""``OmModel``: an Ascend offline model (``.om``) run over ``acl.mdl`` on the pipeline's device memory.

The runner loads the model once, allocates its output buffers once (``acl.rt.malloc``) and builds its
datasets once; per call it re-points the input data buffer at the batch's device memory
(``acl.update_data_buffer``: no copy), queues ``acl.mdl.execute_async`` on its stream, synchronises, and
downloads each output once. A host numpy input is uploaded (one explicit, counted copy) into a device
buffer allocated on first use and reused. The AIPP route's batch, whose pictures sit ``slot_pitch`` bytes
apart, is packed densely on the device first (N device->device copies a call into a buffer allocated on first
use: AIPP reads the pictures back to back).

Timeline (``batch.timeline``, :mod:`dvpipe.latency.timeline`): a host span ``model`` (kind ``model``:
binding the inputs, queueing, waiting), the step's device span ``model.execute`` (kind ``device``, unit
``npu``, stream ``om:<name>``, ``step="model"``; enqueue to synchronisation -- no device events are read,
so it is the host-observed interval; its own name keeps the latency table's ``model`` row the host's), and a
``transfer`` span per copy with its ``bytes`` and ``direction`` (``model_upload`` host->device for a host
input, ``model_gather`` device->device for the AIPP route's pitched batch, ``model_download`` device->host per
output). So on the device-resident route the device->host bytes of a frame set are exactly the outputs' bytes.

Checked before the device sees a batch: bytes, dtype and (static) dims of each data input (a host array or a
``DeviceTensor`` of the same bytes in another dtype or shape is refused, not reinterpreted), and for a model
with static AIPP the configuration it was converted with (``acl.mdl.get_first_aipp_info``) against the batch's
``meta["aipp"]``. Refused at load: tensors of an ``aclDataType`` with no numpy type (bf16, int4, ...), dynamic
shapes, and more than one dynamic-AIPP input (dvpipe feeds one picture batch).

Written against the documented pyACL API (pages cited in :mod:`dvpipe.backends.dvpp._mdl`); it has not run
on Ascend hardware. CI runs it on the software device (``backend="dvpp-sim"``, a descriptor instead of a
real ``.om``: docs/models.md).
"""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union, cast

import numpy as np

from ..device import DeviceTensor
from ..errors import ClosedError, ConfigError, DvpipeError
from ..latency.clock import now_ns

if TYPE_CHECKING:
    from ..backends.dvpp._mdl import Dataset
    from ..backends.dvpp.aipp import AippConfig
    from ..latency import Timeline
    from ..target import Target
    from ..types import FrameBatch

__all__ = ["OmModel", "ModelInputError", "BACKENDS"]

#: runner backend -> ``dvpipe.backends.dvpp._acl.runtime`` device
BACKENDS = {"dvpp": "hw", "dvpp-sim": "sim"}


class ModelInputError(DvpipeError, ValueError):
    """The batch does not fit the model's input (size, dtype, shape, device or AIPP)."""


#: relative tolerance for the float fields of a static AIPP (min_chn, var_reci): the device holds them in fp16
#: (11 significant bits: a value is off by at most 2**-11 of itself); a configuration for another normalisation
#: differs far more (var_reci of std 57.12 and 58.395: 2.2%). Relative even below 1: var_reci is ~0.017
_AIPP_FLOAT_RTOL = 1e-3
#: the fields each AIPP switch governs (the pages call them invalid while it is off)
_AIPP_SWITCHED = {
    "crop": ("load_start_pos_w", "load_start_pos_h", "crop_size_w", "crop_size_h"),
    "padding": ("top_padding_size", "bottom_padding_size", "left_padding_size", "right_padding_size"),
    "csc_switch": tuple(f"matrix_r{r}c{c}" for r in range(3) for c in range(3)),
}


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _aipp_differences(model: dict, want: Any) -> list[str]:
    """``field: model X vs batch Y`` for each field in which the static AIPP a model was converted with
    (:func:`dvpipe.backends.dvpp._mdl.first_aipp_info`) differs from ``want`` (the batch's ``AippConfig``) in
    what AIPP computes. Fields a switch turns off are compared only when it is on in both; a source size of 0
    (the model input's size) matches any; mean and min are compared as their sum (AIPP subtracts both); the CSC
    input biases for a YUV input, the output biases for an RGB one (the one each direction uses); three
    channels (the formats a batch's configuration has, YUV420SP_U8 and RGB888_U8)."""
    out: list[str] = []

    def cmp(name: str, mv: Any, wv: Any) -> None:
        if isinstance(mv, float) or isinstance(wv, float):
            ok = abs(float(mv) - float(wv)) <= _AIPP_FLOAT_RTOL * max(abs(float(mv)), abs(float(wv)))
        else:
            ok = mv == wv
        if not ok:
            out.append(f"{name}: model {_fmt(mv)} vs batch {_fmt(wv)}")

    fmt = str(want.input_format)
    if "input_format" in model:
        cmp("input_format", model["input_format"], fmt)
    for f in ("src_image_size_w", "src_image_size_h"):
        if model.get(f) and getattr(want, f):
            cmp(f, int(model[f]), int(getattr(want, f)))
    bias = "input_bias" if fmt.startswith("YUV") else "output_bias"
    switched = {**_AIPP_SWITCHED, "csc_switch": _AIPP_SWITCHED["csc_switch"] + tuple(f"{bias}_{i}" for i in range(3))}
    for switch, fields in switched.items():
        if switch not in model:
            continue
        cmp(switch, bool(model[switch]), bool(getattr(want, switch)))
        if model[switch] and getattr(want, switch):
            for f in fields:
                if f in model:
                    cmp(f, int(model[f]), int(getattr(want, f)))
    for f in ("rbuv_swap_switch", "ax_swap_switch"):
        if f in model:
            cmp(f, bool(model[f]), bool(getattr(want, f)))
    for f in ("resize", "single_line_mode"):  # no aipp_op field dvpipe writes: off in every batch's configuration
        if model.get(f):
            out.append(f"{f}: model on vs batch off")
    for i in range(3):
        mean, low, var = f"mean_chn_{i}", f"min_chn_{i}", f"var_reci_chn_{i}"
        if mean in model or low in model:
            cmp(f"{mean}+{low}", float(model.get(mean, 0)) + float(model.get(low, 0.0)),
                float(getattr(want, mean)) + float(getattr(want, low)))
        if var in model:
            cmp(var, float(model[var]), float(getattr(want, var)))
    return out


def _same_dims(given: Sequence[int], dims: Sequence[int]) -> bool:
    """Whether an array of shape ``given`` is the model tensor of static ``dims``: the same dims, size-1 dims
    aside (those change no byte's place). Unknown dims (not > 0) leave the check to the byte count."""
    if not dims or any(int(d) <= 0 for d in dims):
        return True
    return [int(d) for d in given if int(d) != 1] == [int(d) for d in dims if int(d) != 1]


def _load_aipp(aipp: Any) -> Any:
    if aipp is None:
        return None
    from ..backends.dvpp.aipp import AippConfig

    if isinstance(aipp, AippConfig):
        return aipp
    path = os.fspath(aipp)
    if not os.path.isfile(path):
        raise ConfigError(f"file not found: {path} (an aipp.cfg as `dvpipe aipp` writes)", "aipp")
    with open(path, encoding="utf-8") as f:
        return AippConfig.from_cfg(f.read())


class OmModel:
    """An offline model on an Ascend device (``backend="dvpp"``) or the software device (``"dvpp-sim"``).

    Args:
        path: the ``.om`` file (software device: a descriptor file, or a ``sim-model:NAME`` key from
            :func:`dvpipe.models.sim_model`).
        device: device id.
        backend: ``dvpp`` (pyACL) or ``dvpp-sim``.
        target: the :class:`dvpipe.Target` the software device simulates (required for ``dvpp-sim``; the
            pipeline's target, so that the model shares the pipeline's device memory).
        aipp: for a model converted with ``aipp_mode: dynamic``: the :class:`AippConfig` (or an
            ``aipp.cfg`` path) to set through ``acl.mdl.set_input_aipp``; without it the batch's
            ``DeviceTensor.meta["aipp"]`` is used. Refused for a model without a dynamic AIPP input.
        name: for the stream name and messages (default: the file name).

    Call it with a :class:`dvpipe.FrameBatch` (its ``images`` a :class:`~dvpipe.device.DeviceTensor` or a host
    array; its ``timeline`` gets the spans), a ``DeviceTensor`` or a numpy array, then the other data inputs
    in order; returns the outputs as numpy arrays (the model's dims and dtypes, read-only). ``close()``
    (or ``with``) releases every ACL object. Not run on hardware.
    """

    def __init__(self, path: Union[str, os.PathLike], *, device: int = 0, backend: str = "dvpp",
                 target: Optional[Target] = None, aipp: Union[None, str, os.PathLike, AippConfig] = None,
                 name: Optional[str] = None):
        from ..backends.dvpp import _acl, _mdl

        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}", "backend")
        spath = os.fspath(path)
        is_key = backend == "dvpp-sim" and spath.startswith("sim-model:")
        if not is_key and not os.path.isfile(spath):
            raise ConfigError(f"file not found: {spath}", "path")
        self.path, self.backend, self.device_id = spath, backend, int(device)
        self.name = name or os.path.splitext(os.path.basename(spath.split(":", 1)[-1]))[0]
        self._aipp_cfg = _load_aipp(aipp)
        self._lock = threading.Lock()
        self.closed = False
        self.model_id: Optional[int] = None
        self._desc: Any = None
        self._stream: Optional[int] = None
        self._in: Optional[Dataset] = None
        self._out: Optional[Dataset] = None
        self._out_ptrs: list[int] = []
        self._staging: dict[int, int] = {}  # input index -> device buffer for host inputs
        self._aipp_ptr: Optional[int] = None
        self._aipp_applied: Any = None
        self._aipp_set: Optional[int] = None
        self._bound: dict[int, tuple[int, int]] = {}
        #: input index -> the static AIPP it was converted with (acl.mdl.get_first_aipp_info, as aipp_op fields)
        self._static_aipp: dict[int, dict] = {}
        self._aipp_checked: dict[int, Any] = {}  # input index -> the batch AippConfig last found to match
        #: counters over the model's life: ``calls``, ``host_to_device_bytes``, ``device_to_host_bytes``,
        #: ``device_to_device_bytes`` (the AIPP route's per-call gather, ``model_gather``)
        self.stats = {"calls": 0, "host_to_device_bytes": 0, "device_to_host_bytes": 0, "device_to_device_bytes": 0}
        self.runtime = _acl.runtime(BACKENDS[backend], target, device_id=self.device_id).hold()
        _acl.register_closer(self)
        rt = self.runtime
        try:
            self.model_id = _mdl.load(rt, path=spath)
            self._desc, self.info = _mdl.describe(rt, self.model_id)
            self._check_aipp()
            for t in self.info.inputs:
                if t.aipp == "static":
                    self._static_aipp[t.index] = _mdl.first_aipp_info(rt, self.model_id, t.index)
            for t in (*self.info.data_inputs, *self.info.outputs):
                if t.nbytes <= 0 or any(d <= 0 for d in t.dims):
                    raise ConfigError(f"{t.name or t.index}: dynamic shapes ({list(t.dims)}, {t.nbytes} B) are not "
                                      "supported by OmModel; convert the model with static shapes", "path")
            self._stream = rt.create_stream()
            for t in self.info.outputs:
                self._out_ptrs.append(rt.call("acl.rt.malloc", max(t.nbytes, 1), 0, alloc_bytes=t.nbytes))
            self._out = _mdl.create_dataset(rt, [(p, t.nbytes) for p, t in zip(self._out_ptrs, self.info.outputs)])
            for t in self.info.inputs:
                if t.aipp == "dynamic_params":
                    self._aipp_ptr = rt.call("acl.rt.malloc", t.nbytes, 0, alloc_bytes=t.nbytes)
            # the input dataset is built on the first call, over the first batch's memory (an empty data buffer,
            # data 0 / size 0, is documented only from CANN 8.0.RC3 on), then re-pointed when the memory moves
        except Exception:
            self.close()
            raise

    # -- facts -----------------------------------------------------------------------------------------
    @property
    def inputs(self) -> tuple:
        """The data inputs (:class:`~dvpipe.backends.dvpp._mdl.TensorInfo`) a call fills, in order."""
        return self.info.data_inputs

    @property
    def outputs(self) -> tuple:
        return self.info.outputs

    @property
    def dynamic_aipp(self) -> bool:
        return any(t.aipp == "dynamic" for t in self.info.inputs)

    def _check_aipp(self) -> None:
        dyn = [t.index for t in self.info.inputs if t.aipp == "dynamic"]
        params = [t.index for t in self.info.inputs if t.aipp == "dynamic_params"]
        if len(dyn) > 1 or len(params) > 1:
            raise ConfigError(f"the model {self.path} has {len(dyn)} inputs with dynamic AIPP (inputs "
                              f"{', '.join(map(str, dyn))}; parameter inputs {', '.join(map(str, params))}); OmModel "
                              "feeds one picture batch through one dynamic AIPP input: convert the model with one",
                              "path")
        if self._aipp_cfg is not None and not self.dynamic_aipp:
            raise ConfigError(f"the model {self.path} has no dynamic AIPP input (it was converted with static AIPP "
                              "or none): drop aipp, or convert it with aipp_mode: dynamic", "aipp")

    # -- call ------------------------------------------------------------------------------------------
    #: the runner lets the model record its own ``model`` spans (instead of wrapping the call in one)
    records_timeline = True

    def __call__(self, x: Union[FrameBatch, DeviceTensor, np.ndarray], *more: Union[DeviceTensor, np.ndarray],
                 timeline: Optional[Timeline] = None) -> list[np.ndarray]:
        """Run the model on a batch; see the class docstring. Returns one numpy array per output.

        ``timeline`` (default: ``x.timeline`` for a batch) receives the ``model`` host and device spans and
        the transfer spans."""
        from ..backends.dvpp import _mdl

        if self.closed:
            raise ClosedError(f"OmModel {self.name} is closed; open a new OmModel to run it again")
        images, tl = (x.images, getattr(x, "timeline", None)) if hasattr(x, "images") else (x, None)
        tl = timeline if timeline is not None else tl
        values = (images, *more)
        data = self.inputs
        if len(values) != len(data):
            raise ModelInputError(f"the model {self.name} has {len(data)} data input(s), got {len(values)}")
        rt = self.runtime
        with self._lock:
            # uploads first (their own transfer spans), then the model span: bind, queue, wait
            bound = [self._host_input(t, v, tl) if not isinstance(v, DeviceTensor) else self._device_input(t, v, tl)
                     for t, v in zip(data, values)]
            t0 = now_ns()
            # set by __init__ (a model that failed to load raised there)
            assert self.model_id is not None and self._stream is not None and self._out is not None
            if self._in is None:
                where = {t.index: pb for t, pb in zip(data, bound)}
                # inputs not bound here are the dynamic-AIPP parameter input, whose buffer __init__ allocated
                self._in = _mdl.create_dataset(rt, [where.get(t.index, (cast(int, self._aipp_ptr), t.nbytes))
                                                    for t in self.info.inputs])
                self._bound = dict(where)
            for t, (ptr, size) in zip(data, bound):
                if self._bound.get(t.index) != (ptr, size):
                    _mdl.point_buffer(rt, self._in, t.index, ptr, size)
                    self._bound[t.index] = (ptr, size)
            if self.dynamic_aipp:
                self._set_dynamic_aipp(values)
            enq = now_ns()
            _mdl.execute_async(rt, self.model_id, self._in, self._out, self._stream)
            rt.synchronize(self._stream, step="model", model=self.name)
            t1 = now_ns()
            if tl is not None:
                tl.record("model", t0, t1, "model", unit="npu", model=self.name)
                tl.record("model.execute", enq, t1, "device", unit="npu", stream=f"om:{self.name}", model=self.name,
                          step="model")
            outs = []
            for t, ptr in zip(self.info.outputs, self._out_ptrs):
                d0 = now_ns()
                raw = rt.download(ptr, t.nbytes, step="model_download", output=t.index)
                if tl is not None:
                    tl.record("model_download", d0, now_ns(), "transfer", bytes=int(t.nbytes),
                              direction="device_to_host", output=t.name or t.index)
                outs.append(raw.view(t.dtype).reshape(t.dims))
            self.stats["device_to_host_bytes"] += sum(t.nbytes for t in self.info.outputs)
            self.stats["calls"] += 1
        return outs

    def _mismatch(self, t: Any, what: str) -> ModelInputError:
        return ModelInputError(f"the model {self.name} expects {t.describe()} at input {t.index}, the batch is {what}")

    @staticmethod
    def _describe_tensor(v: DeviceTensor) -> str:
        return (f"a {v.layout} DeviceTensor {tuple(v.shape)} {v.dtype}"
                f"{f' strides {tuple(v.strides)}' if v.strides else ''} of {v.nbytes} B")

    def _check_static_aipp(self, t: Any, v: DeviceTensor) -> None:
        """A model converted with static AIPP computes with the configuration it was converted with: refuse a
        batch whose ``meta["aipp"]`` (what its pictures need: colour standard, channel order, crop, mean/std,
        padding) differs from it, naming the fields."""
        want = v.meta.get("aipp") if isinstance(v.meta, dict) else None
        have = self._static_aipp.get(t.index)
        if want is None or have is None or getattr(want, "aipp_mode", "static") != "static":
            return
        seen = self._aipp_checked.get(t.index)
        if seen is want or seen == want:  # the pipeline hands the same configuration every call: no field compare
            return
        diff = _aipp_differences(have, want)
        if diff:
            raise ModelInputError(f"the static AIPP the model {self.name} was converted with (input {t.index}, "
                                  f"acl.mdl.get_first_aipp_info) is not the batch's meta['aipp']: it differs in: "
                                  f"{', '.join(diff)}; convert the model with the aipp.cfg `dvpipe aipp` writes for "
                                  "this pipeline")
        self._aipp_checked[t.index] = want

    def _device_input(self, t: Any, v: DeviceTensor, tl: Any) -> tuple[int, int]:
        if v.runtime is not self.runtime:
            raise ModelInputError(f"input {t.index} lives on {v.placement} (another device or target); the model "
                                  f"{self.name} runs on {self.runtime.name} for {self.runtime.target}: give the "
                                  "model the pipeline's backend and target")
        if t.aipp == "none":
            # bytes, dtype and (static) dims: the same bytes in another dtype or layout would be reinterpreted
            if (int(v.nbytes) != t.nbytes or np.dtype(v.dtype) != np.dtype(t.dtype)
                    or not _same_dims(v.shape, t.dims)):
                raise self._mismatch(t, self._describe_tensor(v))
            return int(v.ptr), int(v.nbytes)
        if np.dtype(v.dtype) != np.uint8:  # AIPP reads raw 8-bit pictures
            raise self._mismatch(t, self._describe_tensor(v) + " (an AIPP input takes the raw uint8 pictures)")
        if t.aipp == "static":
            self._check_static_aipp(t, v)
        per = v.strides[0] * v.strides[1] * 3 // 2 if v.layout == "NV12" and v.strides else 0
        pitch = int(v.meta.get("slot_pitch", per)) if per else 0
        if per and pitch != per:
            # AIPP (static and dynamic) reads the N pictures back to back (ATC atlasatc_16_0024: input_size =
            # N x w x h x 1.5); a dynamic input takes them in a buffer of up to max_src_image_size bytes
            need = int(v.shape[0]) * per
            if need == t.nbytes or (t.aipp == "dynamic" and need <= t.nbytes):
                return self._gather(t, v, per, pitch, tl)
        # dynamic AIPP: the input takes up to max_src_image_size bytes (the source size is set at run time)
        if (int(v.nbytes) > t.nbytes) if t.aipp == "dynamic" else int(v.nbytes) != t.nbytes:
            raise self._mismatch(t, self._describe_tensor(v))
        return int(v.ptr), int(v.nbytes)

    def _gather(self, t: Any, v: DeviceTensor, per: int, pitch: int, tl: Any) -> tuple[int, int]:
        """Pack the batch's N pictures, ``pitch`` bytes apart in their DVPP allocation (each DVPP segment is
        128-byte aligned with a 32-byte-plus gap, :func:`dvpipe.device.slot_pitch`), densely into the model's
        input buffer: N device -> device copies, timed as one ``model_gather`` transfer. AIPP reads its input's
        N pictures back to back, static and dynamic alike (static: ``get_input_size_by_index`` = N x picture
        bytes; dynamic: the first N x picture bytes of up to ``max_src_image_size``), so this copy is needed
        whenever the picture size is not itself a multiple of the segment layout. Returns ``(buffer, N x
        picture bytes)``. Not run on a device."""
        dst = self._staging.get(t.index)
        if dst is None:
            dst = self.runtime.call("acl.rt.malloc", t.nbytes, 0, alloc_bytes=t.nbytes)
            self._staging[t.index] = dst
        g0 = now_ns()
        n = int(v.shape[0])
        for i in range(n):
            self.runtime.device_copy(dst + i * per, t.nbytes - i * per, v.ptr + i * pitch, per, step="model_gather",
                                     input=t.index)
        if tl is not None:
            tl.record("model_gather", g0, now_ns(), "transfer", bytes=n * per, direction="device_to_device",
                      input=t.name or t.index)
        self.stats["device_to_device_bytes"] += n * per
        return dst, n * per

    def _host_input(self, t: Any, v: Any, tl: Any) -> tuple[int, int]:
        arr = np.asarray(v)
        if t.aipp == "none":
            n = int(np.prod(t.dims)) if t.dims else 0
            if (arr.dtype != np.dtype(t.dtype) and arr.size == n and _same_dims(arr.shape, t.dims)
                    and np.can_cast(arr.dtype, t.dtype, "same_kind")):
                arr = arr.astype(t.dtype)  # e.g. a host float32 batch for an fp16 model: same elements
            ok = arr.dtype == np.dtype(t.dtype) and arr.nbytes == t.nbytes and _same_dims(arr.shape, t.dims)
            hint = ""
        else:  # the raw pictures of an AIPP input (dynamic AIPP: up to max_src_image_size bytes)
            ok = arr.dtype == np.uint8 and (arr.nbytes == t.nbytes or (t.aipp == "dynamic" and 0 < arr.nbytes <= t.nbytes))
            hint = (" (the model was converted with AIPP: it takes the raw uint8 pictures, e.g. the AIPP route's NV12 "
                    "device buffer)")
        if not ok:
            raise self._mismatch(t, f"a host {tuple(arr.shape)} {arr.dtype} array of {arr.nbytes} B{hint}")
        raw = np.ascontiguousarray(arr)
        ptr = self._staging.get(t.index)
        if ptr is None:
            ptr = self.runtime.call("acl.rt.malloc", t.nbytes, 0, alloc_bytes=t.nbytes)
            self._staging[t.index] = ptr
        u0 = now_ns()
        self.runtime.upload(ptr, t.nbytes, raw.tobytes(), step="model_upload", input=t.index)
        if tl is not None:
            tl.record("model_upload", u0, now_ns(), "transfer", bytes=int(raw.nbytes), direction="host_to_device",
                      input=t.name or t.index)
        self.stats["host_to_device_bytes"] += int(raw.nbytes)
        return ptr, int(raw.nbytes)

    def _set_dynamic_aipp(self, values: Sequence[Any]) -> None:
        from ..backends.dvpp import _mdl
        from ..backends.dvpp.aipp import dynamic_aipp_calls

        cfg = self._aipp_cfg
        if cfg is None:
            v = values[0]
            cfg = v.meta.get("aipp") if isinstance(v, DeviceTensor) else None
        if cfg is None:
            raise ModelInputError(f"the model {self.name} has a dynamic AIPP input: pass OmModel(aipp=...) or a "
                                  "DeviceTensor whose meta['aipp'] carries the AippConfig")
        target = next(t for t in self.info.inputs if t.aipp == "dynamic")
        batch = int(target.dims[0]) if target.dims else 1
        per = cfg.src_image_size_w * cfg.src_image_size_h * {"YUV420SP_U8": 3, "RGB888_U8": 6}[cfg.input_format] // 2
        bound = self._bound.get(target.index, (0, 0))[1]
        if bound != batch * per:  # AIPP reads exactly N pictures back to back (ATC atlasatc_16_0024)
            raise ModelInputError(f"the model {self.name}'s dynamic AIPP reads {batch} {cfg.input_format} pictures of "
                                  f"{cfg.src_image_size_w}x{cfg.src_image_size_h} back to back ({batch * per} B); "
                                  f"the batch gives {bound} B")
        if cfg == self._aipp_applied:
            return  # the parameters stay in the dynamic-AIPP input buffer
        calls = dynamic_aipp_calls(cfg, batch_size=batch, input_index=target.aipp_index, by_input_index=False)
        if self._aipp_set is not None:
            old, self._aipp_set, self._aipp_applied = self._aipp_set, None, None
            self.runtime.call("acl.mdl.destroy_aipp", old)
        assert self.model_id is not None and self._in is not None  # called from __call__, after the dataset exists
        self._aipp_set = _mdl.run_aipp_calls(self.runtime, calls, model_id=self.model_id, dataset=self._in)
        self._aipp_applied = cfg

    # -- teardown --------------------------------------------------------------------------------------
    def close(self) -> None:
        """Destroy datasets and buffers, free the device memory, destroy the stream, unload, release the
        runtime (in that order). Idempotent; best effort (teardown goes on after a failure)."""
        if self.closed:
            return
        self.closed = True
        from ..backends.dvpp import _mdl

        rt = self.runtime
        steps: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        if self._aipp_set is not None:
            steps.append((rt.call, ("acl.mdl.destroy_aipp", self._aipp_set)))
        for ds in (self._in, self._out):
            if ds is not None:
                steps.append((_mdl.destroy_dataset, (rt, ds)))
        for ptr in [*self._out_ptrs, *self._staging.values(), *([self._aipp_ptr] if self._aipp_ptr else [])]:
            steps.append((rt.call, ("acl.rt.free", ptr)))
        if self._stream is not None:
            steps.append((rt.destroy_stream, (self._stream,)))
        if self.model_id is not None:
            steps.append((_mdl.unload, (rt, self.model_id, self._desc)))
        elif self._desc is not None:
            steps.append((rt.call, ("acl.mdl.destroy_desc", self._desc)))
        for fn, args in steps:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
        self._in = self._out = None
        self._out_ptrs, self._staging = [], {}
        rt.unhold()

    def __enter__(self) -> "OmModel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        ins = ", ".join(t.describe() for t in self.inputs)
        outs = ", ".join(t.describe() for t in self.outputs)
        return f"OmModel({self.name}, {self.runtime.name}, inputs=[{ins}], outputs=[{outs}])"
