"""ACL return codes the DVPP backend and the software device use (plain constants, no pyACL import).

Values from the aclError table of the CANN runtime reference (e.g. CANN 8.0.0 aclpythondevg "aclError";
CANN 9.0.0 runtimeapi aclcppdevg_03_1345): 1xxxxx = a caller or environment mistake, 2xxxxx = a resource
or a feature the hardware does not have, 5xxxxx = an internal or device failure.

Each row: ``(name, code, builtin meaning, plain words)``. :mod:`._acl` turns the rows into exception
classes that derive from both :class:`~dvpipe.backends.dvpp._acl.AclError` and the builtin, so callers can
catch ``ValueError`` for a rejected parameter or ``MemoryError`` for a failed allocation.
"""
from __future__ import annotations

__all__ = ["ACL_SUCCESS", "CODES", "REPORT_TIMEOUTS", "name_of", "words_of"]

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

_BY_CODE = {code: (name, words) for name, code, _base, words in CODES}


def name_of(code: int) -> str:
    """``ACL_ERROR_INVALID_PARAM`` for 100000; ``ACL error <code>`` for codes outside the table."""
    return _BY_CODE.get(code, (f"ACL error {code}", ""))[0]


def words_of(code: int) -> str:
    """Plain words for a code (empty when unknown)."""
    return _BY_CODE.get(code, ("", ""))[1]
