"""dvpipe's step spans as ranges in the profiler in use: msproftx (Ascend), NVTX (CUDA), torch.profiler.

With ``latency.profiler_ranges: true`` (``dvpipe run --profiler-ranges``, ``Pipeline(...,
profiler_ranges=True)``) every plan step of every camera, and the deployment's model call, is
also opened and closed as a *range* in the vendor profilers found in the process, so that the
step appears in their timelines next to their own rows:

==========  ==========================================================================================
sink        calls, per span
==========  ==========================================================================================
msproftx    pyACL ``acl.prof``: ``stamp = create_stamp()``; ``set_stamp_trace_message(stamp, msg,
            msg_len)``; ``push(stamp)`` ... ``pop()``; ``destroy_stamp(stamp)`` -- the documented order
            (pyACL reference pages: call order aclpythondevg_01_0856, CANN 8.0.0; create_stamp,
            0 on failure, aclpythondevg_01_0858, CANN 8.0.RC3.alpha001; push aclpythondevg_01_0863,
            CANN 8.5.0; pop() without arguments aclpythondevg_01_0864, CANN 8.0.0;
            set_stamp_trace_message aclpythondevg_01_0871, CANN 8.0.0 English edition; the MindStudio
            8.3.0 example atlasprofiling_16_0134 passes ``msg`` as a Python str). A ``create_stamp()``
            of 0 (no profiling session is collecting msproftx: no ``acl.prof.start`` or ``msprof
            --msproftx=on``) makes the span a no-op. ``push``/``pop`` may not cross threads
            (aclpythondevg_01_0863); a span starts and ends on its worker thread, so they do not.
nvtx        ``torch.cuda.nvtx.range_push(msg)`` / ``range_pop()`` on a CUDA build of torch, else the
            ``nvtx`` package's ``push_range(message=msg, domain="dvpipe")`` / ``pop_range(domain=
            "dvpipe")``. NVTX calls are no-ops unless a tool (Nsight Systems) is attached.
torch       ``torch.profiler.record_function(msg)`` entered and exited, only while a torch profiler
            is recording (torch's process-wide flag ``torch.autograd.profiler._is_profiler_enabled``);
            otherwise nothing is called. torch's profiler records the thread that started it; the
            camera worker threads are recorded with ``experimental_config=torch._C._profiler.
            _ExperimentalConfig(profile_all_threads=True)`` (torch 2.13), or with ``threads=1``.
==========  ==========================================================================================

The range message is ``dvpipe:<step>@<camera>`` (``dvpipe:<step>`` for batch-level work such as
``dvpipe:model``): :func:`range_name` / :func:`parse_range_name`. ``dvpipe trace merge`` finds
these ranges in a profiler's export and pairs them with the spans of dvpipe's trace to put both on
one clock (:mod:`dvpipe.latency.merge`).

What ran where: the msproftx sink was written against the pyACL reference and tested with a
stand-in ``acl`` module that enforces the documented names, argument counts and push/pop
pairing; it has not run on an Ascend device. The NVTX sink was measured without a tool attached
(the ``nvtx`` package on a CPU host); the torch sink ran with torch's CPU profiler.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Callable, Iterable, Optional, Sequence

from ..errors import DvpipeError

__all__ = ["ProfilerRangesError", "RANGE_PREFIX", "SINKS", "range_name", "parse_range_name", "MsproftxSink",
           "NvtxSink", "TorchSink", "ProfilerRanges", "profiler_ranges"]

RANGE_PREFIX = "dvpipe:"


class ProfilerRangesError(DvpipeError, ValueError):
    """A requested profiler is unknown or its API is not available (the message says which and why)."""

#: the sinks that ``profiler_ranges=[...]`` may name, in the order ``True`` (auto) tries them
SINKS = ("msproftx", "nvtx", "torch")


def range_name(step: str, camera: Optional[str] = None) -> str:
    """The message of a span's range: ``dvpipe:<step>@<camera>``, or ``dvpipe:<step>`` without a camera."""
    return f"{RANGE_PREFIX}{step}@{camera}" if camera is not None else f"{RANGE_PREFIX}{step}"


def parse_range_name(text: Any) -> Optional[tuple[str, Optional[str]]]:
    """``(step, camera)`` of a range message written by :func:`range_name`; None for any other name.

    Camera names cannot hold ``@`` (they are one safe path component), so the last ``@`` splits.
    """
    if not isinstance(text, str) or not text.startswith(RANGE_PREFIX):
        return None
    body = text[len(RANGE_PREFIX):]
    step, at, camera = body.rpartition("@")
    if not at:
        return (body, None) if body else None
    return (step, camera) if step and camera else None


class MsproftxSink:
    """msproftx ranges through pyACL's ``acl.prof`` (see the module docstring for the pages)."""

    name = "msproftx"

    def __init__(self, acl_module: Any) -> None:
        self._prof = acl_module.prof

    def push(self, message: str) -> int:
        """Open a range; returns the stamp to close it with (0: nothing was opened)."""
        prof = self._prof
        stamp = prof.create_stamp()
        if not stamp:  # 0 (nullptr): no profiling session collects msproftx now
            return 0
        prof.set_stamp_trace_message(stamp, message, len(message.encode()))
        if prof.push(stamp) != 0:
            prof.destroy_stamp(stamp)
            return 0
        return stamp

    def pop(self, stamp: int) -> None:
        if stamp:
            self._prof.pop()
            self._prof.destroy_stamp(stamp)


class NvtxSink:
    """NVTX push/pop ranges (torch.cuda.nvtx on a CUDA build, else the ``nvtx`` package, domain "dvpipe")."""

    name = "nvtx"

    def __init__(self, push: Callable[[str], Any], pop: Callable[[], Any], source: str) -> None:
        self._push = push
        self._pop = pop
        self.source = source

    @classmethod
    def detect(cls) -> tuple[Optional["NvtxSink"], str]:
        """The sink and "" when an NVTX API loads; else None and why not."""
        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                from torch._C import _nvtx  # noqa: F401 - present on CUDA builds only
                nv = torch.cuda.nvtx
                return cls(nv.range_push, nv.range_pop, "torch.cuda.nvtx"), ""
            except ImportError:
                pass
        if importlib.util.find_spec("nvtx") is None:
            return None, "no NVTX API: torch is not a CUDA build (or not loaded) and the nvtx package is not installed"
        nvtx = importlib.import_module("nvtx")
        return cls(lambda m: nvtx.push_range(message=m, domain="dvpipe"),
                   lambda: nvtx.pop_range(domain="dvpipe"), "nvtx"), ""

    def push(self, message: str) -> bool:
        self._push(message)
        return True

    def pop(self, token: bool) -> None:
        self._pop()


class TorchSink:
    """``torch.profiler.record_function`` ranges, only while a torch profiler records."""

    name = "torch"

    def __init__(self, torch: Any) -> None:
        # torch's process-wide "a profiler is recording" flag (torch.autograd.profiler, set by every
        # torch profiler on start and stop); _profiler_enabled() is per thread and says False on the
        # worker threads that a profile(..., profile_all_threads=True) does record
        self._profiler = torch.autograd.profiler
        self._record_function = torch.profiler.record_function

    def push(self, message: str) -> Any:
        if not getattr(self._profiler, "_is_profiler_enabled", True):
            return None
        rf = self._record_function(message)
        rf.__enter__()
        return rf

    def pop(self, rf: Any) -> None:
        if rf is not None:
            rf.__exit__(None, None, None)


class _Range:
    """``with ranges.range(step, camera): ...``"""

    __slots__ = ("_ranges", "_message", "_tokens")

    def __init__(self, ranges: "ProfilerRanges", message: str) -> None:
        self._ranges = ranges
        self._message = message
        self._tokens: list = []

    def __enter__(self) -> "_Range":
        self._tokens = self._ranges.push(self._message)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ranges.pop(self._tokens)


class ProfilerRanges:
    """Emits each span as a range to every sink (see the module docstring). Thread-safe: a range is
    opened and closed on one thread, and sinks keep no state between calls."""

    def __init__(self, sinks: Sequence[Any]) -> None:
        self.sinks = tuple(sinks)
        self._names: dict[tuple[str, Optional[str]], str] = {}

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sinks]

    def message(self, step: str, camera: Optional[str] = None) -> str:
        """:func:`range_name`, cached per (step, camera)."""
        key = (step, camera)
        msg = self._names.get(key)
        if msg is None:
            msg = self._names[key] = range_name(step, camera)
        return msg

    def push(self, message: str) -> list:
        """Open ``message`` in every sink; returns the tokens for :meth:`pop`. When a sink fails to open it, the
        ranges the sinks before it opened are closed again (none is left open) and the error propagates."""
        tokens: list = []
        try:
            for s in self.sinks:
                tokens.append(s.push(message))
        except BaseException:
            self.pop(tokens)
            raise
        return tokens

    def pop(self, tokens: list) -> None:
        """Close the ranges :meth:`push` opened, innermost sink first."""
        for s, t in zip(reversed(self.sinks[:len(tokens)]), reversed(tokens)):
            s.pop(t)

    def range(self, step: str, camera: Optional[str] = None) -> _Range:
        """Context manager: the range of one span."""
        return _Range(self, self.message(step, camera))

    def __repr__(self) -> str:
        return f"ProfilerRanges({', '.join(self.names) or 'no sinks'})"


def _load(name: str) -> tuple[Optional[Any], str]:
    """(sink, "") or (None, why it is not available)."""
    if name == "msproftx":
        if importlib.util.find_spec("acl") is None:
            return None, "pyACL (the acl module of CANN) is not installed"
        acl = importlib.import_module("acl")
        if not hasattr(getattr(acl, "prof", None), "create_stamp"):
            return None, "the acl module has no acl.prof.create_stamp (a CANN without msproftx)"
        return MsproftxSink(acl), ""
    if name == "nvtx":
        return NvtxSink.detect()
    if name == "torch":
        torch = sys.modules.get("torch")
        if torch is None:
            if importlib.util.find_spec("torch") is None:
                return None, "torch is not installed"
            torch = importlib.import_module("torch")
        return TorchSink(torch), ""
    raise ProfilerRangesError(f"profiler_ranges: unknown profiler {name!r}; "
                              f"use {', '.join(SINKS)} (or true for every one found)")


def profiler_ranges(setting: Any) -> Optional[ProfilerRanges]:
    """The :class:`ProfilerRanges` of a setting, or None when no range is to be emitted.

    ``False``/``None``: None (the pipeline's hot path then costs one ``is None`` test per span).
    ``True``: every sink whose API is already available -- msproftx when pyACL imports, NVTX when
    torch is a loaded CUDA build or the ``nvtx`` package is installed, torch when torch is already
    imported (the backend or the model uses it); None when none is. A list of names
    (``["msproftx", "torch"]``) asks for exactly those and raises :class:`ProfilerRangesError` naming
    the one that is not available. A ready :class:`ProfilerRanges` (or one with stand-in sinks)
    is used as given.
    """
    if setting is None or setting is False:
        return None
    if isinstance(setting, ProfilerRanges):
        return setting
    if setting is True:
        sinks = []
        for name in SINKS:
            if name == "torch" and "torch" not in sys.modules:
                continue  # "where torch is the backend": never import torch just for this
            sink, _why = _load(name)
            if sink is not None:
                sinks.append(sink)
        return ProfilerRanges(sinks) if sinks else None
    names: Iterable[Any] = [setting] if isinstance(setting, str) else setting
    sinks = []
    for name in names:
        sink, why = _load(str(name))
        if sink is None:
            raise ProfilerRangesError(f"profiler_ranges: {name} ranges are not available: {why}")
        sinks.append(sink)
    return ProfilerRanges(sinks) if sinks else None
