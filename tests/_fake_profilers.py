"""Stand-in profiler modules for the profiler-range tests: a strict ``acl`` (pyACL's ``acl.prof`` msproftx
functions) and an ``nvtx`` package.

The fake ``acl.prof`` follows the pyACL reference and the pyACL wrapper's argument parsing
(``PyArg_ParseTuple`` formats): ``create_stamp()`` takes no argument and returns 0 (nullptr) unless a
profiling session was started (``start(config)``), ``set_stamp_trace_message(stamp, msg, msg_len)``
takes an int, a str and the str's length, ``push(stamp)`` takes one stamp, ``pop()`` takes none and
closes the calling thread's innermost push (push/pop may not cross threads), ``range_start(stamp)``
returns ``(range_id, ret)``, ``range_stop(range_id)``, ``mark(stamp)``, ``destroy_stamp(stamp)``.
It is stricter than the device where the pages allow it: a wrong argument count or type, an unknown
or destroyed stamp, a push before the stamp's message was set (the documented call order), a pop
with nothing pushed on this thread, or a stamp destroyed while pushed raises ``FakeAclError``.
Each closed range is kept as ``(message, thread id, start_ns, end_ns)`` on ``time.perf_counter_ns``.
"""
from __future__ import annotations

import importlib.machinery
import threading
import time
import types


class FakeAclError(AssertionError):
    """A call the documentation does not allow."""


def _check_args(name: str, args: tuple, types_: tuple) -> None:
    if len(args) != len(types_):
        raise FakeAclError(f"acl.prof.{name} takes {len(types_)} argument(s), got {len(args)}")
    for i, (a, t) in enumerate(zip(args, types_)):
        if not isinstance(a, t) or isinstance(a, bool):
            raise FakeAclError(f"acl.prof.{name} argument {i + 1} must be {t.__name__}, got {type(a).__name__}")


class FakeAclProf:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = False
        self._next = 0x7F0000001000
        self.stamps: dict[int, dict] = {}   # live stamps: {"msg": str | None, "pushed": bool}
        self._stacks: dict[int, list[tuple[int, int]]] = {}  # thread -> [(stamp, start_ns)]
        self.ranges: list[tuple[str, int, int, int]] = []
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def start(self, *args) -> int:
        _check_args("start", args, (int,))
        self.started = True
        return 0

    def stop(self, *args) -> int:
        _check_args("stop", args, (int,))
        if self.stamps:
            raise FakeAclError(f"acl.prof.stop with {len(self.stamps)} stamp(s) not destroyed")
        self.started = False
        return 0

    def create_stamp(self, *args) -> int:
        _check_args("create_stamp", args, ())
        self._count("create_stamp")
        if not self.started:
            return 0
        with self._lock:
            self._next += 0x40
            self.stamps[self._next] = {"msg": None, "pushed": False}
            return self._next

    def _live(self, name: str, stamp: int) -> dict:
        st = self.stamps.get(stamp)
        if st is None:
            raise FakeAclError(f"acl.prof.{name}: {stamp:#x} is not a stamp from create_stamp (or was destroyed)")
        return st

    def set_stamp_trace_message(self, *args) -> int:
        _check_args("set_stamp_trace_message", args, (int, str, int))
        self._count("set_stamp_trace_message")
        stamp, msg, msg_len = args
        if msg_len != len(msg.encode()):
            raise FakeAclError(f"acl.prof.set_stamp_trace_message: msg_len {msg_len} is not the length of {msg!r}")
        self._live("set_stamp_trace_message", stamp)["msg"] = msg
        return 0

    def mark(self, *args) -> int:
        _check_args("mark", args, (int,))
        self._live("mark", args[0])
        return 0

    def push(self, *args) -> int:
        _check_args("push", args, (int,))
        self._count("push")
        st = self._live("push", args[0])
        if st["msg"] is None:
            raise FakeAclError("acl.prof.push before set_stamp_trace_message (the documented call order)")
        st["pushed"] = True
        self._stacks.setdefault(threading.get_ident(), []).append((args[0], time.perf_counter_ns()))
        return 0

    def pop(self, *args) -> int:
        _check_args("pop", args, ())
        self._count("pop")
        end_ns = time.perf_counter_ns()
        stack = self._stacks.get(threading.get_ident())
        if not stack:
            raise FakeAclError("acl.prof.pop with no push open on this thread (push/pop may not cross threads)")
        stamp, start_ns = stack.pop()
        st = self._live("pop", stamp)
        st["pushed"] = False
        with self._lock:
            self.ranges.append((st["msg"], threading.get_ident(), start_ns, end_ns))
        return 0

    def range_start(self, *args):
        _check_args("range_start", args, (int,))
        self._live("range_start", args[0])
        return 1, 0

    def range_stop(self, *args) -> int:
        _check_args("range_stop", args, (int,))
        return 0

    def destroy_stamp(self, *args) -> None:
        _check_args("destroy_stamp", args, (int,))
        self._count("destroy_stamp")
        st = self._live("destroy_stamp", args[0])
        if st["pushed"]:
            raise FakeAclError("acl.prof.destroy_stamp of a stamp still pushed (pop first)")
        with self._lock:
            del self.stamps[args[0]]

    def open_pushes(self) -> int:
        return sum(len(s) for s in self._stacks.values())


def fake_acl() -> types.ModuleType:
    mod = types.ModuleType("acl")
    mod.__spec__ = importlib.machinery.ModuleSpec("acl", None)
    mod.prof = FakeAclProf()  # type: ignore[attr-defined]
    return mod


class FakeNvtx(types.ModuleType):
    """The ``nvtx`` package's push_range/pop_range (keyword names as in nvtx 0.2.x), per thread and domain."""

    def __init__(self) -> None:
        super().__init__("nvtx")
        self.__spec__ = importlib.machinery.ModuleSpec("nvtx", None)
        self._stacks: dict[tuple[int, object], list[tuple[str, int]]] = {}
        self.ranges: list[tuple[str, object, int, int, int]] = []
        self._lock = threading.Lock()

    def push_range(self, message=None, color="blue", domain=None, category=None, payload=None):
        self._stacks.setdefault((threading.get_ident(), domain), []).append((message, time.perf_counter_ns()))

    def pop_range(self, domain=None):
        end = time.perf_counter_ns()
        stack = self._stacks.get((threading.get_ident(), domain))
        if not stack:
            raise AssertionError(f"nvtx.pop_range(domain={domain!r}) with no range pushed on this thread")
        msg, start = stack.pop()
        with self._lock:
            self.ranges.append((msg, domain, threading.get_ident(), start, end))

    def open_ranges(self) -> int:
        return sum(len(s) for s in self._stacks.values())
