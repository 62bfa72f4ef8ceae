"""The only module that touches pyACL (``acl``), or the software device that stands in for it.

A :class:`Runtime` is one opened device: ``acl.init``, ``acl.rt.set_device``, a context, the run mode.
``device="hw"`` imports the real ``acl`` module (shipped with CANN); ``device="sim"`` builds a
:class:`~dvpipe.backends.dvpp.sim.SimAcl` for the pipeline's target. Both are used through the same
methods, so the kernels (:mod:`.jpegd`, :mod:`.vpc`, :mod:`.vdec`) never know which one runs.

Every pyACL call goes through :meth:`Runtime.call` and one checker, :func:`check`, which raises a typed
:class:`AclError` carrying the return code, the pyACL and C API names and the sizes/formats involved.
The error classes come from one table (:mod:`._codes`) and also derive from the matching builtin
(``InvalidParam`` is a ``ValueError``, ``BadAlloc`` a ``MemoryError``, ``ApiNotSupport`` a
``NotImplementedError``), so callers can catch either meaning.

Signatures: :data:`API` lists every pyACL function used, the C function behind it, what it returns, and
whether the Python signature was read on a hiascend.com pyACL page (``verified``) or taken from public
Ascend sample code / the C prototype (``inferred``). The software device implements exactly this list.
"""
from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ...errors import BackendUnavailable, ConfigError, DvpipeError
from . import _codes
from ._enums import MEMCPY, RUN_MODE

__all__ = ["AclError", "check", "error_class", "API", "Runtime", "runtime", "why_unavailable", "close_idle",
           "close_open_states",
           "close_all", "register_closer",
           "InvalidParam", "UnsupportedJpeg", "BadAlloc", "ApiNotSupport", "FeatureUnsupported",
           "CallbackTimeout", "RtFailure"]


# ------------------------------------------------------------------------------------------------ errors

class AclError(DvpipeError, RuntimeError):
    """A pyACL call returned a non-zero code.

    Attributes:
        ret: the return code (``100000``).
        code_name: its name (``ACL_ERROR_INVALID_PARAM``).
        api: the pyACL function (``acl.media.dvpp_vpc_resize_async``).
        c_api: the C function behind it (``acldvppVpcResizeAsync``), when known.
        context: sizes, formats and other facts of the call (``width=1242, height=375, format=nv12``).
        detail: the device's own explanation (``acl.get_recent_err_msg()``), when it gives one.
    """

    def __init__(self, ret: int, api: str, context: Optional[dict] = None, detail: str = "", c_api: str = ""):
        self.ret = int(ret)
        self.code_name = _codes.name_of(self.ret)
        self.api = api
        self.c_api = c_api or API.get(api, ("", "", ""))[0]
        self.context = dict(context or {})
        self.detail = detail
        super().__init__(str(self))

    def __str__(self) -> str:
        words = _codes.words_of(self.ret)
        head = f"{self.api}{f' ({self.c_api})' if self.c_api else ''} returned {self.ret} {self.code_name}"
        if words:
            head += f" ({words})"
        ctx = ", ".join(f"{k}={v}" for k, v in self.context.items())
        return head + (f" [{ctx}]" if ctx else "") + (f": {self.detail}" if self.detail else "")

    def __reduce__(self):
        return (error_for, (self.ret, self.api, self.context, self.detail, self.c_api))


def _class_name(code_name: str) -> str:
    return "".join(p.capitalize() for p in code_name.replace("ACL_ERROR_", "").split("_"))


_CLASSES: dict[int, type] = {}
for _name, _code, _base, _words in _codes.CODES:
    _cls = type(_class_name(_name), (AclError, _base), {"__doc__": f"{_name} ({_code}): {_words}.",
                                                        "__module__": __name__})
    _CLASSES[_code] = _cls
    globals()[_cls.__name__] = _cls
InvalidParam = _CLASSES[_codes.ACL_ERROR_INVALID_PARAM]
UnsupportedJpeg = _CLASSES[_codes.ACL_ERROR_UNSUPPORTED_JPEG]
BadAlloc = _CLASSES[_codes.ACL_ERROR_BAD_ALLOC]
ApiNotSupport = _CLASSES[_codes.ACL_ERROR_API_NOT_SUPPORT]
FeatureUnsupported = _CLASSES[_codes.ACL_ERROR_FEATURE_UNSUPPORTED]
CallbackTimeout = _CLASSES[_codes.ACL_ERROR_WAIT_CALLBACK_TIMEOUT]
ReportTimeout = _CLASSES[_codes.ACL_ERROR_RT_REPORT_TIMEOUT]
ThreadNotSubscribe = _CLASSES[_codes.ACL_ERROR_THREAD_NOT_SUBSCRIBE]
RtFailure = _CLASSES[_codes.ACL_ERROR_RT_FAILURE]


def error_class(ret: int) -> type:
    """The :class:`AclError` subclass for a return code (``AclError`` itself for codes outside the table)."""
    return _CLASSES.get(int(ret), AclError)


def error_for(ret: int, api: str, context: Optional[dict] = None, detail: str = "", c_api: str = "") -> AclError:
    return error_class(ret)(ret, api, context, detail, c_api)


def check(ret: Any, api: str, detail: str = "", **context: Any) -> None:
    """Raise the typed :class:`AclError` for a non-zero ``ret`` of ``api``; ``context`` goes into the message.

    >>> check(0, api="acl.rt.synchronize_stream")
    >>> try:
    ...     check(100000, api="acl.media.dvpp_vpc_resize_async", width=1242, height=375)
    ... except ValueError as e:
    ...     print(type(e).__name__, e.ret)
    InvalidParam 100000
    """
    if ret is None or int(ret) == 0:
        return
    raise error_for(int(ret), api, context, detail)


# ------------------------------------------------------------------------------------------------ API table

#: pyACL function -> (C function, returns, how the Python signature is known). ``returns``: ``ret``,
#: ``(value, ret)``-style tuples, or ``value`` (creators and getters, no return code).
API: dict[str, tuple[str, str, str]] = {
    "acl.init": ("aclInit", "ret", "verified: CANN 5.0.4 aclpythondevg_01_0004 (acl.init(config_path); once per "
                                   "process: a second call returns 100002 ACL_ERROR_REPEAT_INITIALIZE)"),
    "acl.finalize": ("aclFinalize", "ret", "verified: pyACL ref"),
    "acl.get_soc_name": ("aclrtGetSocName", "value", "verified: CANN 6.0.1 aclpythondevg_01_0008"),
    "acl.get_recent_err_msg": ("aclGetRecentErrMsg", "value", "inferred: C API aclGetRecentErrMsg"),
    "acl.rt.set_device": ("aclrtSetDevice", "ret", "inferred: Ascend samples"),
    "acl.rt.reset_device": ("aclrtResetDevice", "ret", "inferred: Ascend samples; reference-counted with "
                                                       "set_device (CANN 8.0.0 aclcppdevg_03_0040)"),
    "acl.rt.create_context": ("aclrtCreateContext", "(context, ret)", "inferred: Ascend samples; the new context "
                                                                     "becomes the creating thread's current one "
                                                                     "(CANN 8.0.0 aclcppdevg_03_0061)"),
    "acl.rt.destroy_context": ("aclrtDestroyContext", "ret", "inferred: Ascend samples"),
    "acl.rt.set_context": ("aclrtSetCurrentContext", "ret", "verified: CANN 6.0.1 aclpythondevg_01_0067, 7.0.0 "
                                                           "aclpythondevg_01_0072 (context); one current context "
                                                           "per thread, the last one set"),
    "acl.rt.get_context": ("aclrtGetCurrentContext", "(context, ret)", "verified: CANN 6.0.1 aclpythondevg_01_0068, "
                                                                      "8.0.0 aclpythondevg_01_0075"),
    "acl.rt.get_run_mode": ("aclrtGetRunMode", "(mode, ret)", "inferred: Ascend samples"),
    "acl.rt.create_stream": ("aclrtCreateStream", "(stream, ret)", "inferred: Ascend samples"),
    "acl.rt.destroy_stream": ("aclrtDestroyStream", "ret", "inferred: Ascend samples"),
    "acl.rt.synchronize_stream": ("aclrtSynchronizeStream", "ret", "inferred: constraints.md §6 (not verified "
                                                                   "page by page)"),
    "acl.rt.memcpy": ("aclrtMemcpy", "ret", "verified: CANN 8.0.0 aclpythondevg_01_0120 (dst, dest_max, src, "
                                            "count, kind)"),
    "acl.rt.malloc_host": ("aclrtMallocHost", "(ptr, ret)", "inferred: Ascend samples"),
    "acl.rt.malloc": ("aclrtMalloc", "(ptr, ret)", "inferred: Ascend samples (acl.rt.malloc(size, policy)); VDEC input "
                                                  "may live there (CANN 6.2.RC1 aclcppdevg_03_0209, 9.0.0 "
                                                  "aclcppdevg_03_0373)"),
    "acl.rt.free": ("aclrtFree", "ret", "inferred: Ascend samples"),
    "acl.rt.free_host": ("aclrtFreeHost", "ret", "inferred: Ascend samples"),
    "acl.rt.process_report": ("aclrtProcessReport", "ret", "inferred: Ascend samples (acllite dvpp_vdec.py)"),
    "acl.util.bytes_to_ptr": ("", "value", "verified: CANN 8.5.0 aclpythondevg_01_0055 (bytes only)"),
    "acl.util.ptr_to_bytes": ("", "value", "verified: CANN 8.5.0 aclpythondevg_01_0056 (ptr, size)"),
    "acl.util.start_thread": ("", "(thread_id, ret)", "inferred: Ascend samples (acllite dvpp_vdec.py)"),
    "acl.util.stop_thread": ("", "ret", "inferred: Ascend samples (acllite dvpp_vdec.py)"),
    "acl.media.dvpp_malloc": ("acldvppMalloc", "(ptr, ret)", "verified: constraints.md §6 (pyACL 5.0.4..9.0.0)"),
    "acl.media.dvpp_free": ("acldvppFree", "ret", "verified: constraints.md §6"),
    "acl.media.dvpp_create_channel_desc": ("acldvppCreateChannelDesc", "value", "verified: constraints.md §6"),
    "acl.media.dvpp_destroy_channel_desc": ("acldvppDestroyChannelDesc", "ret", "inferred: C prototype"),
    "acl.media.dvpp_create_channel": ("acldvppCreateChannel", "ret", "verified: constraints.md §6"),
    "acl.media.dvpp_destroy_channel": ("acldvppDestroyChannel", "ret", "inferred: C prototype"),
    "acl.media.dvpp_create_pic_desc": ("acldvppCreatePicDesc", "value", "verified: constraints.md §6"),
    "acl.media.dvpp_destroy_pic_desc": ("acldvppDestroyPicDesc", "ret", "verified: Ascend samples"),
    "acl.media.dvpp_set_pic_desc_data": ("acldvppSetPicDescData", "ret", "verified: constraints.md §6"),
    "acl.media.dvpp_set_pic_desc_size": ("acldvppSetPicDescSize", "ret", "verified: constraints.md §6"),
    "acl.media.dvpp_set_pic_desc_format": ("acldvppSetPicDescFormat", "ret", "verified: constraints.md §6"),
    "acl.media.dvpp_set_pic_desc_width": ("acldvppSetPicDescWidth", "ret", "verified: constraints.md §6"),
    "acl.media.dvpp_set_pic_desc_height": ("acldvppSetPicDescHeight", "ret", "verified: constraints.md §6"),
    "acl.media.dvpp_set_pic_desc_width_stride": ("acldvppSetPicDescWidthStride", "ret", "verified: constraints.md §6"),
    "acl.media.dvpp_set_pic_desc_height_stride": ("acldvppSetPicDescHeightStride", "ret",
                                                  "verified: constraints.md §6"),
    "acl.media.dvpp_get_pic_desc_data": ("acldvppGetPicDescData", "value", "verified: Ascend samples"),
    "acl.media.dvpp_get_pic_desc_size": ("acldvppGetPicDescSize", "value", "verified: Ascend samples"),
    "acl.media.dvpp_get_pic_desc_width": ("acldvppGetPicDescWidth", "value", "inferred: constraints.md §6 "
                                                                             "(getter series)"),
    "acl.media.dvpp_get_pic_desc_height": ("acldvppGetPicDescHeight", "value", "inferred: constraints.md §6"),
    "acl.media.dvpp_get_pic_desc_width_stride": ("acldvppGetPicDescWidthStride", "value", "inferred"),
    "acl.media.dvpp_get_pic_desc_height_stride": ("acldvppGetPicDescHeightStride", "value", "inferred"),
    "acl.media.dvpp_get_pic_desc_ret_code": ("acldvppGetPicDescRetCode", "value", "verified: Ascend samples"),
    "acl.media.dvpp_jpeg_get_image_info": ("acldvppJpegGetImageInfo", "(width, height, components, ret)",
                                           "verified: CANN 8.0.RC3 aclpythondevg_01_0324"),
    "acl.media.dvpp_jpeg_predict_dec_size": ("acldvppJpegPredictDecSize", "(size, ret)",
                                             "verified: constraints.md §6 (data, size, out_fmt)"),
    "acl.media.dvpp_jpeg_decode_async": ("acldvppJpegDecodeAsync", "ret", "verified: constraints.md §6 "
                                                                         "(channel_desc, data, size, out_desc, stream)"),
    "acl.media.dvpp_create_roi_config": ("acldvppCreateRoiConfig", "value", "verified: constraints.md §6 "
                                                                           "(left, right, top, bottom)"),
    "acl.media.dvpp_destroy_roi_config": ("acldvppDestroyRoiConfig", "ret", "inferred: C prototype"),
    "acl.media.dvpp_create_resize_config": ("acldvppCreateResizeConfig", "value", "verified: constraints.md §6"),
    "acl.media.dvpp_set_resize_config_interpolation": ("acldvppSetResizeConfigInterpolation", "ret",
                                                       "inferred: C prototype"),
    "acl.media.dvpp_destroy_resize_config": ("acldvppDestroyResizeConfig", "ret", "inferred: C prototype"),
    "acl.media.dvpp_vpc_resize_async": ("acldvppVpcResizeAsync", "ret", "verified: CANN 8.0.0 "
                                                                       "aclpythondevg_01_0306"),
    "acl.media.dvpp_vpc_crop_resize_async": ("acldvppVpcCropResizeAsync", "ret", "verified: CANN 8.0.0 "
                                                                                "aclpythondevg_01_0308"),
    "acl.media.dvpp_vpc_crop_resize_paste_async": ("acldvppVpcCropResizePasteAsync", "ret",
                                                   "verified: CANN 8.0.0 aclpythondevg_01_0312"),
    "acl.media.dvpp_vpc_convert_color_async": ("acldvppVpcConvertColorAsync", "ret", "verified: CANN 8.1.RC1 "
                                                                                     "aclpythondevg_01_0307"),
    "acl.media.dvpp_create_stream_desc": ("acldvppCreateStreamDesc", "value", "verified: Ascend samples"),
    "acl.media.dvpp_destroy_stream_desc": ("acldvppDestroyStreamDesc", "ret", "verified: Ascend samples"),
    "acl.media.dvpp_set_stream_desc_data": ("acldvppSetStreamDescData", "ret", "verified: Ascend samples"),
    "acl.media.dvpp_set_stream_desc_size": ("acldvppSetStreamDescSize", "ret", "verified: Ascend samples"),
    "acl.media.dvpp_set_stream_desc_eos": ("acldvppSetStreamDescEos", "ret", "verified: CANN 8.0.0 "
                                                                            "aclpythondevg_01_0278"),
    "acl.media.dvpp_get_stream_desc_data": ("acldvppGetStreamDescData", "value", "verified: Ascend samples"),
    "acl.media.dvpp_set_stream_desc_timestamp": ("acldvppSetStreamDescTimestamp", "ret",
                                                 "verified: CANN 8.0.0 aclpythondevg_01_0267 (dvpp_stream_desc, timestamp)"),
    "acl.media.dvpp_get_stream_desc_timestamp": ("acldvppGetStreamDescTimestamp", "value",
                                                 "verified: CANN 8.0.0 aclpythondevg_01_0282"),
    "acl.media.dvpp_get_stream_desc_size": ("acldvppGetStreamDescSize", "value", "verified: Ascend samples"),
    "acl.media.vdec_create_channel_desc": ("aclvdecCreateChannelDesc", "value", "verified: Ascend samples"),
    "acl.media.vdec_destroy_channel_desc": ("aclvdecDestroyChannelDesc", "ret", "inferred: C prototype"),
    "acl.media.vdec_set_channel_desc_channel_id": ("aclvdecSetChannelDescChannelId", "ret", "verified: samples"),
    "acl.media.vdec_set_channel_desc_thread_id": ("aclvdecSetChannelDescThreadId", "ret", "verified: samples"),
    "acl.media.vdec_set_channel_desc_callback": ("aclvdecSetChannelDescCallback", "ret",
                                                 "verified: CANN 8.0.0 aclpythondevg_01_0356; callback(stream_desc, "
                                                 "pic_desc, user_data)"),
    "acl.media.vdec_set_channel_desc_entype": ("aclvdecSetChannelDescEnType", "ret", "verified: samples"),
    "acl.media.vdec_set_channel_desc_out_pic_format": ("aclvdecSetChannelDescOutPicFormat", "ret",
                                                       "verified: samples"),
    "acl.media.vdec_set_channel_desc_out_mode": ("aclvdecSetChannelDescOutMode", "ret",
                                                 "verified: CANN 8.0.RC3 aclpythondevg_01_0353 (0 default: VDEC outputs "
                                                 "only after several frames; 1 fast: a picture per frame, streams "
                                                 "without B-frames or long-term references only)"),
    "acl.media.vdec_set_channel_desc_out_pic_width": ("aclvdecSetChannelDescOutPicWidth", "ret",
                                                      "verified: CANN 6.0.1 aclpythondevg_01_0322, 8.0.0 "
                                                      "aclpythondevg_01_0359 (maximum output width; unset: 1920 on "
                                                      "Ascend310/910, 4096 elsewhere, 8.1.RC1 aclpythondevg_01_0350)"),
    "acl.media.vdec_set_channel_desc_out_pic_height": ("aclvdecSetChannelDescOutPicHeight", "ret",
                                                       "verified: CANN 6.0.1 aclpythondevg_01_0323, 8.0.0 "
                                                       "aclpythondevg_01_0360 (maximum output height; unset: 1120 on "
                                                       "Ascend310/910, 4096 elsewhere, 8.1.RC1 "
                                                       "aclpythondevg_01_0351)"),
    "acl.media.vdec_create_channel": ("aclvdecCreateChannel", "ret", "verified: samples"),
    "acl.media.vdec_destroy_channel": ("aclvdecDestroyChannel", "ret", "verified: samples"),
    "acl.media.vdec_create_frame_config": ("aclvdecCreateFrameConfig", "value", "verified: samples"),
    "acl.media.vdec_destroy_frame_config": ("aclvdecDestroyFrameConfig", "ret", "verified: samples"),
    "acl.media.vdec_send_frame": ("aclvdecSendFrame", "ret", "verified: samples (channel_desc, stream_desc, "
                                                             "pic_desc, frame_config, user_data)"),
    # -- offline models (dvpipe.backends.dvpp._mdl); pages: CANN 8.0.0 "apiref/appdevgapi" unless named
    "acl.mdl.load_from_file": ("aclmdlLoadFromFile", "(model_id, ret)", "verified: CANN 8.0.0 "
                                                                       "aclpythondevg_01_0147"),
    "acl.mdl.load_from_mem": ("aclmdlLoadFromMem", "(model_id, ret)", "verified: CANN 8.0.0 aclpythondevg_01_0149 "
                                                                     "(model, model_size)"),
    "acl.mdl.unload": ("aclmdlUnload", "ret", "inferred: C prototype aclmdlUnload(modelId)"),
    "acl.mdl.create_desc": ("aclmdlCreateDesc", "value", "inferred: C prototype (creator, 0 on failure)"),
    "acl.mdl.destroy_desc": ("aclmdlDestroyDesc", "ret", "inferred: C prototype"),
    "acl.mdl.get_desc": ("aclmdlGetDesc", "ret", "verified: CANN 8.0.0 aclpythondevg_01_0205 (model_desc, model_id)"),
    "acl.mdl.get_num_inputs": ("aclmdlGetNumInputs", "value", "inferred: C prototype (size_t)"),
    "acl.mdl.get_num_outputs": ("aclmdlGetNumOutputs", "value", "inferred: C prototype (size_t)"),
    "acl.mdl.get_input_size_by_index": ("aclmdlGetInputSizeByIndex", "value", "verified: CANN 8.0.0 "
                                                                             "aclpythondevg_01_0199 (bytes)"),
    "acl.mdl.get_output_size_by_index": ("aclmdlGetOutputSizeByIndex", "value", "inferred: the input getter's "
                                                                               "pair"),
    "acl.mdl.get_input_dims": ("aclmdlGetInputDims", "(dims, ret)", "verified: CANN 8.5.0 aclpythondevg_01_0201 "
                                                                  "(dict name/dimCount/dims)"),
    "acl.mdl.get_output_dims": ("aclmdlGetOutputDims", "(dims, ret)", "verified: CANN 8.0.0 aclpythondevg_01_0212"),
    "acl.mdl.get_input_data_type": ("aclmdlGetInputDataType", "value", "inferred: get_output_data_type's pair"),
    "acl.mdl.get_output_data_type": ("aclmdlGetOutputDataType", "value", "verified: CANN 8.0.0 "
                                                                        "aclpythondevg_01_0218 (aclDataType)"),
    "acl.mdl.get_input_name_by_index": ("aclmdlGetInputNameByIndex", "value", "verified: CANN 8.0.0 "
                                                                             "aclpythondevg_01_0213"),
    "acl.mdl.get_input_index_by_name": ("aclmdlGetInputIndexByName", "(index, ret)", "verified: CANN 8.0.0 "
                                                                                    "aclpythondevg_01_0219"),
    "acl.mdl.get_aipp_type": ("aclmdlGetAippType", "(type, dynamic_attached_data_index, ret)",
                              "verified: CANN 8.0.0 aclpythondevg_01_0166"),
    "acl.mdl.get_first_aipp_info": ("aclmdlGetFirstAippInfo", "(aipp_info, ret)",
                                    "verified: CANN 8.0.RC3 aclpythondevg_01_0215 (aipp_info: the aclAippInfo fields, "
                                    "aclpythondevg_01_0925)"),
    "acl.mdl.create_dataset": ("aclmdlCreateDataset", "value", "inferred: C prototype (creator, 0 on failure)"),
    "acl.mdl.destroy_dataset": ("aclmdlDestroyDataset", "ret", "inferred: C prototype (its data buffers are "
                                                              "destroyed separately)"),
    "acl.mdl.add_dataset_buffer": ("aclmdlAddDatasetBuffer", "(dataset, ret)", "verified: CANN 8.0.0 "
                                                                              "aclpythondevg_01_0197"),
    "acl.mdl.get_dataset_num_buffers": ("aclmdlGetDatasetNumBuffers", "value", "inferred: C prototype"),
    "acl.mdl.get_dataset_buffer": ("aclmdlGetDatasetBuffer", "value", "verified: CANN 8.0.0 aclpythondevg_01_0154 "
                                                                     "(sample code)"),
    "acl.mdl.execute": ("aclmdlExecute", "ret", "verified: CANN 8.0.0 aclpythondevg_01_0154"),
    "acl.mdl.execute_async": ("aclmdlExecuteAsync", "ret", "verified: CANN 8.0.0 aclpythondevg_01_0156 (model_id, "
                                                          "input, output, stream; synchronise the stream after)"),
    "acl.mdl.create_aipp": ("aclmdlCreateAIPP", "value", "verified: CANN 8.0.0 aclpythondevg_01_0178 (batch_size)"),
    "acl.mdl.destroy_aipp": ("aclmdlDestroyAIPP", "ret", "inferred: C prototype"),
    "acl.mdl.set_aipp_input_format": ("aclmdlSetAIPPInputFormat", "ret", "inferred: C prototype (set, format)"),
    "acl.mdl.set_aipp_csc_params": ("aclmdlSetAIPPCscParams", "ret", "verified: CANN 8.0.0 aclpythondevg_01_0182 "
                                                                    "(set, switch, 9 matrix, 3 output, 3 input "
                                                                    "biases)"),
    "acl.mdl.set_aipp_rbuv_swap_switch": ("aclmdlSetAIPPRbuvSwapSwitch", "ret", "inferred: C prototype"),
    "acl.mdl.set_aipp_ax_swap_switch": ("aclmdlSetAIPPAxSwapSwitch", "ret", "inferred: C prototype"),
    "acl.mdl.set_aipp_src_image_size": ("aclmdlSetAIPPSrcImageSize", "ret", "inferred: C prototype (set, w, h)"),
    "acl.mdl.set_aipp_scf_params": ("aclmdlSetAIPPScfParams", "ret", "inferred: C prototype"),
    "acl.mdl.set_aipp_crop_params": ("aclmdlSetAIPPCropParams", "ret", "inferred: C prototype (set, switch, "
                                                                      "start_w, start_h, w, h, batch)"),
    "acl.mdl.set_aipp_padding_params": ("aclmdlSetAIPPPaddingParams", "ret", "inferred: C prototype (set, "
                                                                            "switch, top, bottom, left, right, "
                                                                            "batch)"),
    "acl.mdl.set_aipp_dtc_pixel_mean": ("aclmdlSetAIPPDtcPixelMean", "ret", "inferred: C prototype"),
    "acl.mdl.set_aipp_dtc_pixel_min": ("aclmdlSetAIPPDtcPixelMin", "ret", "inferred: C prototype"),
    "acl.mdl.set_aipp_pixel_var_reci": ("aclmdlSetAIPPPixelVarReci", "ret", "inferred: C prototype"),
    "acl.mdl.set_input_aipp": ("aclmdlSetInputAIPP", "ret", "verified: CANN 6.0.1 aclpythondevg_01_0155 (model_id, "
                                                           "dataset, index, aipp_parms_set)"),
    "acl.mdl.set_aipp_by_input_index": ("aclmdlSetAIPPByInputIndex", "ret", "inferred: C prototype, CANN 8.5.0 "
                                                                           "aclcppdevg_03_0311 (model_id, dataset, "
                                                                           "model input index, aipp_parms_set)"),
    "acl.create_data_buffer": ("aclCreateDataBuffer", "value", "verified: CANN 8.0.RC3 aclpythondevg_01_0016 "
                                                              "(data, size)"),
    "acl.destroy_data_buffer": ("aclDestroyDataBuffer", "ret", "inferred: C prototype"),
    "acl.update_data_buffer": ("aclUpdateDataBuffer", "ret", "verified: CANN 8.0.0 aclpythondevg_01_0154 (sample "
                                                            "code: data_buffer, data, size)"),
    "acl.get_data_buffer_addr": ("aclGetDataBufferAddr", "value", "verified: CANN 8.0.0 aclpythondevg_01_0154 "
                                                                 "(sample code)"),
}


# ------------------------------------------------------------------------------------------------ loading

def _import_acl():
    import acl  # noqa: PLC0415 - pyACL ships with CANN; imported only for device "hw"

    return acl


def why_unavailable(device: str) -> Optional[str]:
    """None when ``device`` (``hw`` or ``sim``) can be opened here, else why not (never raises)."""
    if device == "sim":
        return None
    try:
        _import_acl()
    except Exception as e:  # noqa: BLE001 - any import-time failure is a reason to report
        return (f"pyACL cannot be imported ({type(e).__name__}: {e}); pyACL ships with the CANN toolkit: source "
                "<install>/set_env.sh, or plan with backend 'dvpp-sim' and a target")
    return None


@dataclass(frozen=True)
class _Key:
    device: str
    device_id: int
    soc: str
    cann: str


_RUNTIMES: dict[_Key, "Runtime"] = {}
_RUNTIMES_LOCK = threading.Lock()


def runtime(device: str, target: Any = None, device_id: int = 0) -> "Runtime":
    """The opened :class:`Runtime` for ``device`` (``hw``: pyACL; ``sim``: the software device for ``target``).

    One per process and device for ``hw`` (``acl.init`` may run once), one per target for ``sim``.
    """
    if device == "sim":
        if target is None:
            raise BackendUnavailable("dvpp-sim", "the software device simulates one target: pass "
                                     "target=dvpipe.Target(soc=..., cann=...)")
        key = _Key("sim", device_id, target.soc, str(target.cann))
    elif device == "hw":
        key = _Key("hw", device_id, "", "")
    else:
        raise ConfigError(f"DVPP device is 'hw' or 'sim', got {device!r}")
    with _RUNTIMES_LOCK:
        rt = _RUNTIMES.get(key)
        if rt is None:
            if device == "sim":
                from .sim import SimAcl

                acl = SimAcl(target)
            else:
                why = why_unavailable("hw")
                if why:
                    raise BackendUnavailable("dvpp", why)
                acl = _import_acl()
            rt = Runtime(acl, device, device_id, target)
            rt.open()
            _RUNTIMES[key] = rt
    return rt


def close_runtime(rt: "Runtime") -> None:
    """Close ``rt`` and forget it (the next :func:`runtime` call opens a fresh one)."""
    with _RUNTIMES_LOCK:
        for k, v in list(_RUNTIMES.items()):
            if v is rt:
                del _RUNTIMES[k]
    rt.close()


#: objects with a ``close()`` that hold ACL resources (per-camera step states): closed before the runtimes
_CLOSERS: "weakref.WeakSet" = weakref.WeakSet()


def register_closer(obj: Any) -> None:
    """Close ``obj`` (before the runtimes) at :func:`close_all` / interpreter exit, if it is still alive."""
    _CLOSERS.add(obj)


def close_open_states() -> int:
    """Close every step state still open (a pipeline not closed); returns how many there were."""
    n = 0
    for obj in list(_CLOSERS):
        if not getattr(obj, "closed", False):
            n += 1
            try:
                obj.close()
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
    return n


def close_idle() -> list:
    """Close every runtime no step state holds; returns the runtimes still held (their names)."""
    with _RUNTIMES_LOCK:
        rts = list(_RUNTIMES.values())
    held = []
    for rt in rts:
        if rt.holders:
            held.append(rt.name + f" ({rt.holders} holder(s))")
        else:
            close_runtime(rt)
    return held


def close_all() -> None:
    """Close every live step state, then every runtime (registered with ``atexit``: the callback threads
    stop and every ACL object is released in order at interpreter exit)."""
    for obj in list(_CLOSERS):
        try:
            obj.close()
        except Exception:  # noqa: BLE001 - teardown goes on
            pass
    with _RUNTIMES_LOCK:
        rts = list(_RUNTIMES.values())
    for rt in rts:
        close_runtime(rt)


atexit.register(close_all)


# ------------------------------------------------------------------------------------------------ runtime

class Runtime:
    """One opened device (real pyACL or the software device) and every call the kernels make.

    The kernels call only these methods; each goes through :meth:`call` and :func:`check`.

    Contexts: a thread has one current context (aclrtSetCurrentContext, CANN 8.0.0 aclcppdevg_03_0061), and
    streams and models belong to the context they were made in (107003 / 107004 from another). The
    runtime's context is made current only for the duration of each call, or of a :meth:`bound` block, and the
    thread's previous context is restored after it: a torch_npu thread that calls into dvpipe keeps torch's
    context. Only threads dvpipe starts itself (the VDEC callback thread) are bound for good (:meth:`bind`).
    Streams and channels are per camera step, so cameras run in parallel.

    ACL ownership: ``acl.init`` runs once per process (CANN 5.0.4 aclpythondevg_01_0004); when it returns
    100002 someone else (torch_npu) initialised ACL and owns it: :meth:`close` then releases only what this
    runtime made (its context, and its reference on the device: set/reset_device are reference-counted,
    CANN 8.0.0 aclcppdevg_03_0040) and never calls ``acl.finalize``.
    """

    def __init__(self, acl: Any, device: str, device_id: int = 0, target: Any = None):
        self.acl = acl
        self.device = device
        self.device_id = device_id
        self.target = target
        self.context = None
        self.run_mode = RUN_MODE["host"]
        self._tls = threading.local()
        self._opened = False
        self._lock = threading.Lock()
        self._holders = 0
        self._stagings: list[int] = []  # pinned host buffers of every thread (freed at close)
        #: False when ``acl.init`` returned 100002: another user of this process owns ACL (never finalised here)
        self.owns_acl = True

    @property
    def is_sim(self) -> bool:
        return self.device == "sim"

    @property
    def name(self) -> str:
        return f"dvpp-{self.device}:{self.device_id}"

    # -- generic call ---------------------------------------------------------------------------------
    def _fn(self, api: str) -> Callable:
        obj = self.acl
        for part in api.split(".")[1:]:
            obj = getattr(obj, part)
        return obj

    def call(self, api: str, *args: Any, **context: Any) -> Any:
        """Call pyACL function ``api`` (``acl.media.dvpp_malloc``) with ``args``; check its return code.

        Returns the values before ``ret`` (one value unwrapped, several as a tuple), or None. For creators
        and getters (no return code) returns the value; a creator returning 0 (NULL: pyACL's creators return
        0 on failure, CANN 8.0.0 aclpythondevg_01_0244) or None raises here, under the creator's own name,
        instead of the handle failing later in another call.
        """
        with self.bound():
            out = self._fn(api)(*args)
        kind = API.get(api, ("", "ret", ""))[1]
        if kind == "value":
            if (out is None or (isinstance(out, int) and out == 0)) and (
                    "create" in api or api.endswith("bytes_to_ptr")):
                raise error_for(_codes.ACL_ERROR_FAILURE, api, context,
                                self.recent_error() or "the creator returned 0 (NULL)")
            return out
        if isinstance(out, tuple):
            *values, ret = out
            if ret:
                raise error_for(ret, api, context, self.recent_error())
            return values[0] if len(values) == 1 else tuple(values)
        if out:
            raise error_for(out, api, context, self.recent_error())
        return None

    def recent_error(self) -> str:
        fn = getattr(self.acl, "get_recent_err_msg", None)
        if fn is None:
            return ""
        try:
            return str(fn() or "")
        except Exception:  # noqa: BLE001 - the explanation is a nicety, never a second failure
            return ""

    # -- lifecycle -------------------------------------------------------------------------------------
    def open(self) -> None:
        """``acl.init``, ``set_device``, ``create_context``, run mode. When a step fails, what the earlier
        steps did is undone in reverse order (destroy the context, reset the device, ``acl.finalize`` when this
        runtime initialised ACL) before the error is raised."""
        if self._opened:
            return
        ret = self.acl.init()
        if ret not in (0, _codes.ACL_ERROR_REPEAT_INITIALIZE):
            check(ret, api="acl.init")
        self.owns_acl = ret == 0
        # set_device and create_context change the calling thread's current context: keep the one another
        # owner of ACL (torch_npu) had set on this thread, and restore it afterwards
        prev = None if self.owns_acl else self._current_context()
        undo: list = [(self.acl.finalize, ())] if self.owns_acl else []
        try:
            check(self.acl.rt.set_device(self.device_id), api="acl.rt.set_device", device_id=self.device_id)
            undo.append((self.acl.rt.reset_device, (self.device_id,)))
            ctx, ret = self.acl.rt.create_context(self.device_id)
            check(ret, api="acl.rt.create_context", device_id=self.device_id)
            undo.append((self.acl.rt.destroy_context, (ctx,)))
            mode, ret = self.acl.rt.get_run_mode()
            check(ret, api="acl.rt.get_run_mode")
            self.context = ctx
        except Exception:
            for fn, args in reversed(undo):
                try:
                    fn(*args)
                except Exception:  # noqa: BLE001 - unwinding goes on; the first error is the one raised
                    pass
            raise
        finally:
            if prev:
                self.acl.rt.set_context(prev)
        self.run_mode = mode
        self._opened = True

    @property
    def opened(self) -> bool:
        return self._opened

    @property
    def holders(self) -> int:
        """How many step states hold this runtime (see :meth:`hold`)."""
        return self._holders

    def register_closer(self, obj: Any) -> None:
        """Close ``obj`` (it holds this runtime's memory) before the runtimes at :func:`close_all` / exit, if it
        is still alive (:func:`register_closer`; device buffers call it without importing this module)."""
        register_closer(obj)

    def hold(self) -> "Runtime":
        """Count one more user (a camera step's state); :meth:`unhold` when it is closed."""
        with self._lock:
            self._holders += 1
        return self

    def unhold(self) -> None:
        """One user less. The last one frees the pooled DVPP memory and the pinned host buffers; the
        software device is then closed entirely (context, device, finalize). A device runtime keeps its
        context until :func:`close_all` (interpreter exit): pyACL documents ``acl.init`` once per process."""
        with self._lock:
            self._holders = max(0, self._holders - 1)
            last = self._holders == 0
        if not last:
            return
        if self.is_sim:
            close_runtime(self)
        else:
            self.trim()

    def trim(self) -> None:
        """Free the pool's idle DVPP buffers and the pinned host staging buffers."""
        from .pool import drop_pool

        drop_pool(self)
        with self._lock:
            stagings, self._stagings = self._stagings, []
        for ptr in stagings:
            try:
                check(self.acl.rt.free_host(ptr), api="acl.rt.free_host")
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
        self._tls = threading.local()

    def close(self) -> None:
        """Free the pool and staging buffers, destroy the context, reset the device, finalize, in that order
        (pyACL resource release order: memory, context, device, ``acl.finalize``). ``acl.finalize`` only when
        this runtime initialised ACL (:attr:`owns_acl`); the device reset balances this runtime's own
        ``set_device`` (reference-counted). The calling thread's current context is kept. Errors are
        ignored: teardown is best effort and goes on."""
        if not self._opened:
            return
        self.trim()
        self._opened = False
        prev = self._current_context()
        steps: list = [(self.acl.rt.destroy_context, (self.context,)), (self.acl.rt.reset_device, (self.device_id,))]
        if self.owns_acl:
            steps.append((self.acl.finalize, ()))
        for fn, args in steps:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001
                pass
        if prev and prev != self.context and not self.owns_acl:
            try:
                self.acl.rt.set_context(prev)
            except Exception:  # noqa: BLE001
                pass
        self.context = None

    def _current_context(self) -> Any:
        """The calling thread's current context (``acl.rt.get_context``), or None when it has none."""
        fn = getattr(self.acl.rt, "get_context", None)
        if fn is None:
            return None
        try:
            ctx, ret = fn()
        except Exception:  # noqa: BLE001 - no context is an answer, not a failure
            return None
        return ctx if not ret and ctx else None

    @contextlib.contextmanager
    def bound(self):
        """``with rt.bound(): ...``: the runtime's context is current on this thread for the block, and the
        thread's previous context is current again after it (nested blocks and calls switch nothing)."""
        depth = getattr(self._tls, "depth", 0)
        if depth or self.context is None or getattr(self._tls, "bound", False):
            self._tls.depth = depth + 1
            try:
                yield
            finally:
                self._tls.depth = depth
            return
        prev = self._current_context()
        if prev != self.context:
            check(self.acl.rt.set_context(self.context), api="acl.rt.set_context")
        self._tls.depth = 1
        try:
            yield
        finally:
            self._tls.depth = 0
            if prev and prev != self.context:
                check(self.acl.rt.set_context(prev), api="acl.rt.set_context", restoring="the previous context")

    def bind(self) -> None:
        """Make the runtime's context current on the calling thread for good: only for threads dvpipe starts
        itself (the VDEC callback thread); every other thread gets it per call (:meth:`bound`)."""
        if getattr(self._tls, "bound", False) or self.context is None:
            return
        check(self.acl.rt.set_context(self.context), api="acl.rt.set_context")
        self._tls.bound = True

    def soc_name(self) -> Optional[str]:
        return self.acl.get_soc_name()

    # -- memory ----------------------------------------------------------------------------------------
    def malloc(self, nbytes: int, **context: Any) -> int:
        return self.call("acl.media.dvpp_malloc", int(nbytes), alloc_bytes=int(nbytes), **context)

    def free(self, ptr: int) -> None:
        self.call("acl.media.dvpp_free", ptr)

    def _staging(self, nbytes: int) -> int:
        """A pinned host buffer of at least ``nbytes`` for downloads, reused per thread."""
        st = getattr(self._tls, "staging", None)
        if st is None or st[1] < nbytes:
            if st is not None:
                with self._lock:
                    if st[0] in self._stagings:
                        self._stagings.remove(st[0])
                self.call("acl.rt.free_host", st[0])
            size = 1 << max(16, (int(nbytes) - 1).bit_length())
            st = (self.call("acl.rt.malloc_host", size, alloc_bytes=size), size)
            with self._lock:
                self._stagings.append(st[0])
            self._tls.staging = st
        return st[0]

    def upload(self, dev_ptr: int, dev_size: int, data: Any, **context: Any) -> None:
        """Copy host ``data`` (bytes-like) into device memory at ``dev_ptr``."""
        raw = data if isinstance(data, bytes) else bytes(data)
        src = self.call("acl.util.bytes_to_ptr", raw)
        kind = MEMCPY["host_to_device"] if self.run_mode == RUN_MODE["host"] else MEMCPY["device_to_device"]
        self.call("acl.rt.memcpy", dev_ptr, int(dev_size), src, len(raw), kind, copy_bytes=len(raw), **context)

    def download(self, dev_ptr: int, nbytes: int, **context: Any) -> np.ndarray:
        """Copy ``nbytes`` of device memory to the host; returns a read-only ``uint8`` array."""
        host = self._staging(nbytes)
        kind = MEMCPY["device_to_host"] if self.run_mode == RUN_MODE["host"] else MEMCPY["device_to_device"]
        self.call("acl.rt.memcpy", host, int(nbytes), dev_ptr, int(nbytes), kind, copy_bytes=int(nbytes), **context)
        return np.frombuffer(self.call("acl.util.ptr_to_bytes", host, int(nbytes)), np.uint8)

    def device_copy(self, dst_ptr: int, dst_size: int, src_ptr: int, nbytes: int, **context: Any) -> None:
        """Copy ``nbytes`` between two device buffers (e.g. a DVPP picture into a torch-npu tensor)."""
        self.call("acl.rt.memcpy", dst_ptr, int(dst_size), src_ptr, int(nbytes), MEMCPY["device_to_device"],
                  copy_bytes=int(nbytes), **context)

    # -- streams and channels ----------------------------------------------------------------------------
    def create_stream(self) -> int:
        return self.call("acl.rt.create_stream")

    def destroy_stream(self, stream: int) -> None:
        self.call("acl.rt.destroy_stream", stream)

    def synchronize(self, stream: int, **context: Any) -> None:
        self.call("acl.rt.synchronize_stream", stream, **context)

    def create_channel(self) -> int:
        desc = self.call("acl.media.dvpp_create_channel_desc")
        try:
            self.call("acl.media.dvpp_create_channel", desc)
        except Exception:
            self._discard("acl.media.dvpp_destroy_channel_desc", desc)
            raise
        return desc

    def destroy_channel(self, desc: int) -> None:
        self.call("acl.media.dvpp_destroy_channel", desc)
        self.call("acl.media.dvpp_destroy_channel_desc", desc)

    # -- picture descriptors and configs -------------------------------------------------------------------
    def pic_desc(self, ptr: int, size: int, fmt: int, width: int, height: int, ws: int, hs: int) -> int:
        d = self.output_pic_desc(ptr, size, fmt)
        try:
            self.call("acl.media.dvpp_set_pic_desc_width", d, int(width))
            self.call("acl.media.dvpp_set_pic_desc_height", d, int(height))
            self.call("acl.media.dvpp_set_pic_desc_width_stride", d, int(ws))
            self.call("acl.media.dvpp_set_pic_desc_height_stride", d, int(hs))
        except Exception:
            self._discard("acl.media.dvpp_destroy_pic_desc", d)
            raise
        return d

    def output_pic_desc(self, ptr: int, size: int, fmt: int) -> int:
        """A descriptor with only buffer and format set (VDEC writes the geometry)."""
        d = self.call("acl.media.dvpp_create_pic_desc")
        try:
            self.call("acl.media.dvpp_set_pic_desc_data", d, ptr)
            self.call("acl.media.dvpp_set_pic_desc_size", d, int(size))
            self.call("acl.media.dvpp_set_pic_desc_format", d, int(fmt))
        except Exception:
            self._discard("acl.media.dvpp_destroy_pic_desc", d)
            raise
        return d

    def _discard(self, api: str, handle: int) -> None:
        """Destroy ``handle`` with ``api`` on an error path: best effort, the caller re-raises its own error."""
        try:
            with self.bound():
                self._fn(api)(handle)
        except Exception:  # noqa: BLE001 - the first error is the one raised
            pass

    def pic_info(self, desc: int) -> tuple[int, int, int, int, int]:
        """``(width, height, width_stride, height_stride, ret_code)`` read back from a descriptor."""
        g = self.call
        return (g("acl.media.dvpp_get_pic_desc_width", desc), g("acl.media.dvpp_get_pic_desc_height", desc),
                g("acl.media.dvpp_get_pic_desc_width_stride", desc), g("acl.media.dvpp_get_pic_desc_height_stride", desc),
                g("acl.media.dvpp_get_pic_desc_ret_code", desc))

    def destroy_pic_desc(self, desc: int) -> None:
        self.call("acl.media.dvpp_destroy_pic_desc", desc)

    def roi(self, left: int, top: int, right: int, bottom: int) -> int:
        """An ROI config from an inclusive box (pyACL's argument order is left, right, top, bottom)."""
        return self.call("acl.media.dvpp_create_roi_config", int(left), int(right), int(top), int(bottom))

    def destroy_roi(self, roi: int) -> None:
        self.call("acl.media.dvpp_destroy_roi_config", roi)

    def resize_config(self, interpolation: Optional[int] = None) -> int:
        cfg = self.call("acl.media.dvpp_create_resize_config")
        if interpolation is not None:
            try:
                self.call("acl.media.dvpp_set_resize_config_interpolation", cfg, int(interpolation))
            except BaseException:
                self._discard("acl.media.dvpp_destroy_resize_config", cfg)
                raise
        return cfg

    def destroy_resize_config(self, cfg: int) -> None:
        self.call("acl.media.dvpp_destroy_resize_config", cfg)

    # -- JPEGD ---------------------------------------------------------------------------------------------
    def jpeg_info(self, data: bytes, **context: Any) -> tuple[int, int, int]:
        """``(width, height, components)`` from the JPEG header (host memory)."""
        raw = data if isinstance(data, bytes) else bytes(data)
        ptr = self.call("acl.util.bytes_to_ptr", raw)
        return self.call("acl.media.dvpp_jpeg_get_image_info", ptr, len(raw), jpeg_bytes=len(raw), **context)

    def jpeg_predict_size(self, data: bytes, fmt: int, **context: Any) -> int:
        raw = data if isinstance(data, bytes) else bytes(data)
        ptr = self.call("acl.util.bytes_to_ptr", raw)
        return self.call("acl.media.dvpp_jpeg_predict_dec_size", ptr, len(raw), int(fmt), **context)

    def jpeg_decode(self, channel: int, dev_ptr: int, size: int, out_desc: int, stream: int, **context: Any) -> None:
        self.call("acl.media.dvpp_jpeg_decode_async", channel, dev_ptr, int(size), out_desc, stream, **context)

    # -- VPC -----------------------------------------------------------------------------------------------
    def vpc_resize(self, channel: int, src: int, dst: int, cfg: int, stream: int, **context: Any) -> None:
        self.call("acl.media.dvpp_vpc_resize_async", channel, src, dst, cfg, stream, **context)

    def vpc_crop_resize(self, channel: int, src: int, dst: int, crop: int, cfg: int, stream: int,
                        **context: Any) -> None:
        self.call("acl.media.dvpp_vpc_crop_resize_async", channel, src, dst, crop, cfg, stream, **context)

    def vpc_crop_resize_paste(self, channel: int, src: int, dst: int, crop: int, paste: int, cfg: int, stream: int,
                              **context: Any) -> None:
        self.call("acl.media.dvpp_vpc_crop_resize_paste_async", channel, src, dst, crop, paste, cfg, stream,
                  **context)

    def vpc_convert_color(self, channel: int, src: int, dst: int, stream: int, **context: Any) -> None:
        self.call("acl.media.dvpp_vpc_convert_color_async", channel, src, dst, stream, **context)

    # -- VDEC ----------------------------------------------------------------------------------------------
    def start_thread(self, fn: Callable, args: Any = None) -> int:
        return self.call("acl.util.start_thread", fn, [] if args is None else args)

    def stop_thread(self, tid: int) -> None:
        self.call("acl.util.stop_thread", tid)

    def process_report(self, timeout_ms: int) -> bool:
        """Run one pending callback on this thread; False on timeout.

        Timeout: ``ACL_ERROR_RT_REPORT_TIMEOUT`` (507012) or the deprecated ``ACL_ERROR_WAIT_CALLBACK_TIMEOUT``
        (100036) that older runtimes return. ``ACL_ERROR_THREAD_NOT_SUBSCRIBE`` (100035: no channel names
        this thread yet) returns at once on the device, so it raises :class:`ThreadNotSubscribe` and the
        caller's loop must wait before it asks again (it would spin otherwise).
        """
        self.bind()
        ret = self.acl.rt.process_report(int(timeout_ms))
        if ret in _codes.REPORT_TIMEOUTS:
            return False
        check(ret, api="acl.rt.process_report")
        return True

    def vdec_channel(self, channel_id: int, thread_id: int, callback: Callable, entype: int, out_fmt: int,
                     out_mode: int = 0, out_size: Optional[tuple[int, int]] = None) -> int:
        """A created VDEC channel; ``out_mode`` 0 (default: VDEC holds several frames before its first output)
        or 1 (fast: one picture per frame sent, for streams without B-frames), CANN aclpythondevg_01_0353.
        ``out_size`` ``(width, height)`` in pixels: the channel's maximum output size
        (``vdec_set_channel_desc_out_pic_width/height``; unset it is 1920x1120 on Ascend310/910, CANN 6.0.1
        aclpythondevg_01_0322/0323, so a larger stream would not decode there)."""
        d = self.call("acl.media.vdec_create_channel_desc")
        try:
            self.call("acl.media.vdec_set_channel_desc_channel_id", d, int(channel_id))
            self.call("acl.media.vdec_set_channel_desc_thread_id", d, int(thread_id))
            self.call("acl.media.vdec_set_channel_desc_callback", d, callback)
            self.call("acl.media.vdec_set_channel_desc_entype", d, int(entype))
            self.call("acl.media.vdec_set_channel_desc_out_pic_format", d, int(out_fmt))
            self.call("acl.media.vdec_set_channel_desc_out_mode", d, int(out_mode))
            if out_size is not None:
                self.call("acl.media.vdec_set_channel_desc_out_pic_width", d, int(out_size[0]))
                self.call("acl.media.vdec_set_channel_desc_out_pic_height", d, int(out_size[1]))
            self.call("acl.media.vdec_create_channel", d, channel_id=channel_id, entype=entype, out_mode=out_mode)
        except Exception:
            self.acl.media.vdec_destroy_channel_desc(d)
            raise
        return d

    def vdec_destroy(self, desc: int) -> None:
        self.call("acl.media.vdec_destroy_channel", desc)
        self.call("acl.media.vdec_destroy_channel_desc", desc)

    def frame_config(self) -> int:
        return self.call("acl.media.vdec_create_frame_config")

    def destroy_frame_config(self, cfg: int) -> None:
        self.call("acl.media.vdec_destroy_frame_config", cfg)

    def stream_desc(self, ptr: int, size: int, eos: bool = False, timestamp: Optional[int] = None) -> int:
        """An input stream descriptor: data and size (unless ``ptr`` is 0), the end-of-stream flag, and a
        timestamp (``acl.media.dvpp_set_stream_desc_timestamp``, CANN 8.0.0 aclpythondevg_01_0267)."""
        d = self.call("acl.media.dvpp_create_stream_desc")
        try:
            if ptr:
                self.call("acl.media.dvpp_set_stream_desc_data", d, ptr)
                self.call("acl.media.dvpp_set_stream_desc_size", d, int(size))
            if eos:
                self.call("acl.media.dvpp_set_stream_desc_eos", d, 1)
            if timestamp is not None:
                self.call("acl.media.dvpp_set_stream_desc_timestamp", d, int(timestamp))
        except Exception:
            self.acl.media.dvpp_destroy_stream_desc(d)
            raise
        return d

    def stream_timestamp(self, desc: int) -> int:
        return int(self.call("acl.media.dvpp_get_stream_desc_timestamp", desc) or 0)

    def destroy_stream_desc(self, desc: int) -> None:
        self.call("acl.media.dvpp_destroy_stream_desc", desc)

    def vdec_send(self, channel: int, stream_desc: int, pic_desc: int, frame_config: int, user_data: Any,
                  **context: Any) -> None:
        """``acl.media.vdec_send_frame``; ``frame_config`` may be 0: the frame configuration is reserved and
        may be NULL (CANN 8.0.0 aclcppdevg_03_0375, ``config``)."""
        self.call("acl.media.vdec_send_frame", channel, stream_desc, pic_desc, frame_config, user_data, **context)

    def __repr__(self) -> str:
        return f"Runtime({self.name}, target={self.target})"
