"""ACL return codes the DVPP backend and the software device use (plain constants, no pyACL import).

Values from the aclError table of the CANN runtime reference (e.g. CANN 8.0.0 aclpythondevg "aclError";
CANN 9.0.0 runtimeapi aclcppdevg_03_1345): 1xxxxx = a caller or environment mistake, 2xxxxx = a resource
or a feature the hardware does not have, 5xxxxx = an internal or device failure.

Each row: ``(name, code, builtin meaning, plain words)``. :mod:`._acl` turns the rows into exception
classes that derive from both :class:`~dvpipe.backends.dvpp._acl.AclError` and the builtin, so callers can
catch ``ValueError`` for a rejected parameter or ``MemoryError`` for a failed allocation.
"""
from __future__ import annotations

__all__ = ["ACL_SUCCESS", "CODES", "RUNTIME_CODES", "REPORT_TIMEOUTS", "name_of", "words_of", "picture_ret_code"]

ACL_SUCCESS = 0
ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_UNINITIALIZE = 100001
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_INVALID_FILE = 100003
ACL_ERROR_THREAD_NOT_SUBSCRIBE = 100035
ACL_ERROR_WAIT_CALLBACK_TIMEOUT = 100036
ACL_ERROR_REPEAT_FINALIZE = 100037
ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED = 148051
ACL_ERROR_UNSUPPORTED_JPEG = 148052
ACL_ERROR_BAD_ALLOC = 200000
ACL_ERROR_API_NOT_SUPPORT = 200001
ACL_ERROR_INVALID_DEVICE = 200002
ACL_ERROR_MEMORY_ADDRESS_UNALIGNED = 200003
ACL_ERROR_RESOURCE_NOT_MATCH = 200004
ACL_ERROR_INVALID_RESOURCE_HANDLE = 200005
ACL_ERROR_FEATURE_UNSUPPORTED = 200006
#: runtime codes (rt_error_codes.h, e.g. CANN 8.5.0; the aclError table): 107002 "current context null",
#: 107003 "stream not in current context", 107004 "model not in current context"
ACL_ERROR_RT_CONTEXT_NULL = 107002
ACL_ERROR_RT_STREAM_CONTEXT = 107003
ACL_ERROR_RT_MODEL_CONTEXT = 107004
ACL_ERROR_STORAGE_OVER_LIMIT = 300000
ACL_ERROR_INTERNAL_ERROR = 500000
ACL_ERROR_FAILURE = 500001
ACL_ERROR_RT_FAILURE = 500003
ACL_ERROR_DRV_FAILURE = 500004
#: ``acl.rt.process_report`` timed out (aclError table, CANN 8.0.0 runtime reference; it replaces the
#: deprecated ``ACL_ERROR_WAIT_CALLBACK_TIMEOUT`` 100036, which older runtimes still return)
ACL_ERROR_RT_REPORT_TIMEOUT = 507012
#: codes that mean "no callback report within the timeout" (both are accepted, see above)
REPORT_TIMEOUTS = (ACL_ERROR_RT_REPORT_TIMEOUT, ACL_ERROR_WAIT_CALLBACK_TIMEOUT)

#: (name, code, builtin base, plain words)
CODES: tuple[tuple[str, int, type, str], ...] = (
    ("ACL_ERROR_INVALID_PARAM", ACL_ERROR_INVALID_PARAM, ValueError, "a parameter failed validation"),
    ("ACL_ERROR_UNINITIALIZE", ACL_ERROR_UNINITIALIZE, RuntimeError, "acl.init was not called"),
    ("ACL_ERROR_REPEAT_INITIALIZE", ACL_ERROR_REPEAT_INITIALIZE, RuntimeError, "initialised twice"),
    ("ACL_ERROR_INVALID_FILE", ACL_ERROR_INVALID_FILE, FileNotFoundError, "invalid file"),
    ("ACL_ERROR_THREAD_NOT_SUBSCRIBE", ACL_ERROR_THREAD_NOT_SUBSCRIBE, RuntimeError,
     "the thread is not subscribed to callback reports"),
    ("ACL_ERROR_WAIT_CALLBACK_TIMEOUT", ACL_ERROR_WAIT_CALLBACK_TIMEOUT, TimeoutError,
     "no callback report within the timeout (deprecated code; current runtimes return 507012)"),
    ("ACL_ERROR_REPEAT_FINALIZE", ACL_ERROR_REPEAT_FINALIZE, RuntimeError, "finalised twice"),
    ("ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED", ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED, RuntimeError,
     "a resource bound to this one was not released first"),
    ("ACL_ERROR_UNSUPPORTED_JPEG", ACL_ERROR_UNSUPPORTED_JPEG, ValueError,
     "JPEGD does not decode this JPEG (arithmetic or progressive coding, JPEG2000, non-YUV colour space)"),
    ("ACL_ERROR_BAD_ALLOC", ACL_ERROR_BAD_ALLOC, MemoryError, "memory allocation failed"),
    ("ACL_ERROR_API_NOT_SUPPORT", ACL_ERROR_API_NOT_SUPPORT, NotImplementedError,
     "the API is not supported on this product"),
    ("ACL_ERROR_INVALID_DEVICE", ACL_ERROR_INVALID_DEVICE, LookupError, "no such device"),
    ("ACL_ERROR_MEMORY_ADDRESS_UNALIGNED", ACL_ERROR_MEMORY_ADDRESS_UNALIGNED, ValueError, "unaligned address"),
    ("ACL_ERROR_RESOURCE_NOT_MATCH", ACL_ERROR_RESOURCE_NOT_MATCH, ValueError, "resources do not match"),
    ("ACL_ERROR_INVALID_RESOURCE_HANDLE", ACL_ERROR_INVALID_RESOURCE_HANDLE, ValueError,
     "invalid resource handle (freed or never created)"),
    ("ACL_ERROR_FEATURE_UNSUPPORTED", ACL_ERROR_FEATURE_UNSUPPORTED, NotImplementedError,
     "the feature is not supported here"),
    ("ACL_ERROR_RT_CONTEXT_NULL", ACL_ERROR_RT_CONTEXT_NULL, RuntimeError,
     "the calling thread has no current context"),
    ("ACL_ERROR_RT_STREAM_CONTEXT", ACL_ERROR_RT_STREAM_CONTEXT, RuntimeError,
     "stream not in current context (the stream belongs to another context than the thread's current one)"),
    ("ACL_ERROR_RT_MODEL_CONTEXT", ACL_ERROR_RT_MODEL_CONTEXT, RuntimeError,
     "model not in current context (the model was loaded in another context than the thread's current one)"),
    ("ACL_ERROR_STORAGE_OVER_LIMIT", ACL_ERROR_STORAGE_OVER_LIMIT, MemoryError, "storage over limit"),
    ("ACL_ERROR_INTERNAL_ERROR", ACL_ERROR_INTERNAL_ERROR, RuntimeError, "internal error"),
    ("ACL_ERROR_FAILURE", ACL_ERROR_FAILURE, RuntimeError, "failure"),
    ("ACL_ERROR_RT_FAILURE", ACL_ERROR_RT_FAILURE, RuntimeError, "runtime failure (a device task failed)"),
    ("ACL_ERROR_DRV_FAILURE", ACL_ERROR_DRV_FAILURE, RuntimeError, "driver failure"),
    ("ACL_ERROR_RT_REPORT_TIMEOUT", ACL_ERROR_RT_REPORT_TIMEOUT, TimeoutError,
     "no callback report within the timeout (acl.rt.process_report)"),
)

#: the other runtime codes (name, code, the header's own words): CANN's ``acl/error_codes/rt_error_codes.h``
#: (107xxx: a caller mistake, 207xxx: a resource or feature missing, 507xxx: a device or runtime failure); named
#: in messages, raised as plain :class:`~dvpipe.backends.dvpp._acl.AclError`
RUNTIME_CODES: tuple[tuple[str, int, str], ...] = tuple((f"ACL_ERROR_RT_{n}", c, w) for n, c, w in (
    ("PARAM_INVALID", 107000, "param invalid"), ("INVALID_DEVICEID", 107001, "invalid device id"),
    ("STREAM_MODEL", 107005, "stream not in model"),
    ("EVENT_TIMESTAMP_INVALID", 107006, "event timestamp invalid"),
    ("EVENT_TIMESTAMP_REVERSAL", 107007, "event timestamp reversal"),
    ("ADDR_UNALIGNED", 107008, "memory address unaligned"), ("FILE_OPEN", 107009, "open file failed"),
    ("FILE_WRITE", 107010, "write file failed"), ("STREAM_SUBSCRIBE", 107011, "error subscribe stream"),
    ("THREAD_SUBSCRIBE", 107012, "error subscribe thread (the thread is not subscribed to callback reports)"),
    ("GROUP_NOT_SET", 107013, "group not set"), ("GROUP_NOT_CREATE", 107014, "group not create"),
    ("STREAM_NO_CB_REG", 107015, "callback not register to stream"),
    ("INVALID_MEMORY_TYPE", 107016, "invalid memory type"), ("INVALID_HANDLE", 107017, "invalid handle"),
    ("INVALID_MALLOC_TYPE", 107018, "invalid malloc type"), ("WAIT_TIMEOUT", 107019, "wait timeout"),
    ("TASK_TIMEOUT", 107020, "task timeout"),
    ("FEATURE_NOT_SUPPORT", 207000, "feature not support"), ("MEMORY_ALLOCATION", 207001, "memory allocation error"),
    ("MEMORY_FREE", 207002, "memory free error"), ("AICORE_OVER_FLOW", 207003, "aicore over flow"),
    ("NO_DEVICE", 207004, "no device"), ("RESOURCE_ALLOC_FAIL", 207005, "resource alloc fail"),
    ("NO_PERMISSION", 207006, "no permission"), ("NO_EVENT_RESOURCE", 207007, "no event resource"),
    ("NO_STREAM_RESOURCE", 207008, "no stream resource"), ("NO_NOTIFY_RESOURCE", 207009, "no notify resource"),
    ("NO_MODEL_RESOURCE", 207010, "no model resource"), ("OVER_LIMIT", 207012, "over limit"),
    ("QUEUE_EMPTY", 207013, "queue is empty"), ("QUEUE_FULL", 207014, "queue is full"),
    ("REPEATED_INIT", 207015, "repeated init"),
    ("INTERNAL_ERROR", 507000, "runtime internal error"), ("TS_ERROR", 507001, "ts internal error"),
    ("STREAM_TASK_FULL", 507002, "task full in stream"), ("STREAM_TASK_EMPTY", 507003, "task empty in stream"),
    ("STREAM_NOT_COMPLETE", 507004, "stream not complete"), ("END_OF_SEQUENCE", 507005, "end of sequence"),
    ("EVENT_NOT_COMPLETE", 507006, "event not complete"), ("CONTEXT_RELEASE_ERROR", 507007, "context release error"),
    ("SOC_VERSION", 507008, "soc version error"), ("TASK_TYPE_NOT_SUPPORT", 507009, "task type not support"),
    ("LOST_HEARTBEAT", 507010, "ts lost heartbeat"), ("MODEL_EXECUTE", 507011, "model execute failed"),
    ("SYS_DMA", 507013, "sys dma error"), ("AICORE_TIMEOUT", 507014, "aicore timeout"),
    ("AICORE_EXCEPTION", 507015, "aicore exception"), ("AICORE_TRAP_EXCEPTION", 507016, "aicore trap exception"),
    ("AICPU_TIMEOUT", 507017, "aicpu timeout"), ("AICPU_EXCEPTION", 507018, "aicpu exception"),
    ("DEV_SETUP_ERROR", 507033, "device setup error"), ("DRV_INTERNAL_ERROR", 507899, "drv internal error"),
    ("AICPU_INTERNAL_ERROR", 507900, "aicpu internal error"), ("SOCKET_CLOSE", 507901, "hdc disconnect"),
))

_BY_CODE = {code: (name, words) for name, code, words in RUNTIME_CODES}
_BY_CODE.update({code: (name, words) for name, code, _base, words in CODES})


def picture_ret_code(ret: int) -> str:
    """A DVPP picture description's return code (``acl.media.dvpp_get_pic_desc_ret_code``) as Huawei's pages
    list it, in hex (CANN 8.0.0 / 9.0.0 aclpythondevg_01_0261: look the hex code up in the return-code table):
    ``0x10004 (65540)``."""
    return f"{ret:#x} ({ret})"


def name_of(code: int) -> str:
    """``ACL_ERROR_INVALID_PARAM`` for 100000; ``ACL error <code>`` for codes outside the table."""
    return _BY_CODE.get(code, (f"ACL error {code}", ""))[0]


def words_of(code: int) -> str:
    """Plain words for a code (empty when unknown)."""
    return _BY_CODE.get(code, ("", ""))[1]
