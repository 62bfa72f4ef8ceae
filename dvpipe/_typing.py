"""Type aliases of the public API: the string choices that ``Pipeline``, the planner and the
deployment dataclasses accept. Aliases only (no runtime checks; each function still validates its
arguments and raises ``ConfigError`` with the allowed values); mypy checks callers against them.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Literal, Mapping, Optional, Sequence, Union

__all__ = ["Fidelity", "Fallback", "OnCorrupt", "MetasFormat", "Timing", "OnLate", "BuiltinBackend", "BackendName",
           "PoseSource", "ProfilerRangesSetting"]

#: ``reference``: match the reference pipeline within float rounding; ``fast``: the cheaper kernels.
Fidelity = Literal["reference", "fast"]
#: a step that fails on a frame: ``next`` retries it on the next planned backend, ``error`` raises.
Fallback = Literal["next", "error"]
#: a frame its decoder reports damaged: ``drop`` (a counted drop) or ``flag`` (kept, meta ``corrupt: True``).
OnCorrupt = Literal["drop", "flag"]
#: what ``batch.metas`` holds: one dict per camera, or mmdet3d's one sample dict with per-camera lists.
MetasFormat = Literal["per_camera", "mmdet3d"]
#: ``spans`` (every step on the batch timeline) or ``counters`` (count, sum and max per step).
Timing = Literal["spans", "counters"]
#: a late or missing camera in a frame set (``sync.on_late``): masked, its last frame reused, or the set dropped.
OnLate = Literal["mask", "reuse", "drop"]
#: the backend names dvpipe itself defines: the names its rows of the backend table declare
#: (``dvpipe.backends``; ``tests/backends/test_family.py`` checks the two agree).
BuiltinBackend = Literal["cpu", "reference", "torch", "torch:cpu", "torch:cuda", "torch:npu",
                         "dvpp", "dvpp-sim", "aipp", "aipp-sim"]
#: a backend name: a built-in one, or any other string ``resolve`` accepts (``torch:cuda:1``, ``torch:npu:3``,
#: a family registered with ``register_kernel``). ``Literal[...] | str`` is ``str`` to a type checker; the
#: Literal documents the built-in names and lets editors complete them.
BackendName = Union[BuiltinBackend, str]
#: the pose source of ``metas_format="mmdet3d"``: a callable ``(timestamp_ns, seq) -> pose record``
#: (``dvpipe.mmdet3d.JsonPoses`` or your own), or the path of a nuScenes-style ``ego_pose.json``.
PoseSource = Union[Callable[[Optional[int], Optional[int]], Mapping[str, Any]], str, "os.PathLike[str]"]
#: ``profiler_ranges=``: ``True`` (every profiler found), ``False`` (none), or the names of exactly those to use
#: (``["msproftx", "nvtx", "torch"]``; see ``dvpipe.latency.profiler_ranges``).
ProfilerRangesSetting = Union[bool, Sequence[str]]
