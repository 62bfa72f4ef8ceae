"""The kernel registry: ``{first op: [Kernel, ...]}``.

A kernel implements a run of one or more consecutive stages (``("normalise", "pad", "batch")``)
on one backend family (``cpu``, ``reference``, ``torch``, ``dvpp``, or a user's). The planner takes,
for each position in a camera's stage list, the longest registered run whose ``supports`` says yes
on the first backend of the user's preference order that has one — that is what "fusion" means here.

Registering a kernel for a user stage (the stage itself registered with
:func:`dvpipe.register_stage`, :mod:`dvpipe.stages.stage_registry`)::

    @dvpipe.register_stage("gamma")
    @dataclass(frozen=True)
    class Gamma(dvpipe.Stage):
        gamma: float = 2.2

    @dvpipe.register_kernel("gamma", backend="cpu")
    def gamma_cpu(data, stages, ctx):
        (stage,) = stages
        return (255.0 * (data / 255.0) ** (1 / stage.gamma)).astype(data.dtype)

A fused kernel declares the op runs it covers once, with :func:`fused_runs` (which ops fuse, in
which orders), not as a hand-kept list. A kernel is a :data:`KernelFn`, ``fn(data, stages, ctx) -> data``:
``data`` is a :data:`FrameData` (what the previous step handed on), ``stages`` the tuple of stage
declarations it covers, ``ctx`` a :class:`KernelContext`. A kernel whose run ends in ``batch`` writes the
camera's image into ``ctx.out`` (a ``(3, H, W)`` view of the batch buffer) and returns it.
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeVar, Union

import numpy as np

from .._typing import Fidelity
from ..device import DeviceTensor
from ..errors import ConfigError, CorruptFrameError
from ..types import Camera
from ..video import VideoPacket
from .base import FrameSpec, Stage

if TYPE_CHECKING:  # torch is optional and imported lazily; the backends and targets sit above this layer
    import torch

    from ..backends import BackendRef
    from ..target import Target

__all__ = ["FrameData", "KernelFn", "KernelVerdict", "Kernel", "KernelQuery", "KernelContext", "register_kernel",
           "kernels_at", "registered_ops", "all_kernels", "fused_runs"]

#: What flows between the steps of a camera's plan: a kernel's ``data`` argument and its return value.
#:
#: - ``bytes`` / ``bytearray`` / ``memoryview``: an encoded picture (JPEG, PNG) or one video access unit,
#:   what ``Pipeline.process`` hands the first step (a file path is read into bytes before it);
#: - ``numpy.ndarray``: host pixels -- ``H x W x 3`` uint8 BGR (a raw camera frame, a CPU decode), ``H x W x 3``
#:   float32 after ``normalise``, ``(3, H, W)`` in the batch buffer, or an NV12 picture (``3H/2 x W`` uint8);
#: - :class:`~dvpipe.video.VideoPacket`: the access units of one video frame with the picture it stands for
#:   (from a deployment's video sources; the video decode kernels take it);
#: - ``torch.Tensor``: pixels on a torch device (``cuda``, ``npu``), same layouts as the arrays;
#: - :class:`~dvpipe.device.DeviceTensor`: a picture in accelerator memory (DVPP's NV12 output, the AIPP
#:   route's batch slot), read on the host only through a ``transfer`` step.
#:
#: A kernel checks which of these it was given (``isinstance``) and refuses the others with a
#: :class:`~dvpipe.errors.FrameError`. ``torch.Tensor`` is a forward reference (torch is optional):
#: ``typing.get_type_hints(..., localns={"torch": torch})`` resolves it.
FrameData = Union[bytes, bytearray, memoryview, np.ndarray, VideoPacket, "torch.Tensor", DeviceTensor]


@dataclass(frozen=True)
class KernelVerdict:
    """A backend's answer to "can you run this step here?" (what a kernel's ``supports`` returns; the DVPP
    rule engine's own answer for one request is :class:`dvpipe.knowledge.Verdict`).

    Attributes:
        status: ``ok``, ``rejected`` (a rule of the hardware forbids it), ``declined`` (dvpipe's own
            policy, e.g. fidelity ``reference``, keeps it off this backend; not ok, not a hardware
            limit), ``unknown`` (the documentation leaves it open; treated as not ok), or
            ``unavailable`` (the backend cannot run on this machine).
        reason: plain words; empty when ok without remarks.
        rule: identifier of the rule that decided, if any.
        source: where the rule comes from (a documentation URL), if any.
        detour: the legal workaround taken or proposed, in plain words, if any.
        replace: for an ok verdict with a detour, the stages the kernel runs *instead of* the ones it
            was asked about (e.g. ``(Decode(), Crop(0, 0, 1242, 374))`` when the unit floors an odd
            height). The planner substitutes them, so their geometry reaches ``lidar2img`` through
            the usual stage matrices.
    """

    status: str = "ok"
    reason: str = ""
    rule: Optional[str] = None
    source: Optional[str] = None
    detour: Optional[str] = None
    replace: Optional[tuple] = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def yes(cls, reason: str = "", **kw) -> "KernelVerdict":
        return cls("ok", reason, **kw)

    @classmethod
    def no(cls, reason: str, **kw) -> "KernelVerdict":
        return cls("rejected", reason, **kw)

    def to_dict(self) -> dict:
        return {"status": self.status, "ok": self.ok, "reason": self.reason, "rule": self.rule,
                "source": self.source, "detour": self.detour}


@dataclass(frozen=True)
class KernelQuery:
    """What a kernel's ``supports`` function is asked about, at plan time.

    ``specs[k]`` is the spec after ``stages[k]``; ``spec_in`` the spec entering the run.
    """

    stages: tuple[Stage, ...]
    spec_in: FrameSpec
    specs: tuple[FrameSpec, ...]
    camera: Camera
    backend: BackendRef
    fidelity: Fidelity
    target: Optional[Target] = None

    @property
    def spec_out(self) -> FrameSpec:
        return self.specs[-1]


@dataclass
class KernelContext:
    """What a kernel sees when it runs.

    Attributes:
        camera: the camera whose frame this is.
        spec_in / spec_out: plan-time specs entering and leaving the step.
        out: ``(3, H, W)`` destination in the batch buffer when the step ends in ``batch``.
        backend: the :class:`~dvpipe.backends.BackendRef` running the step.
        state: a per-(pipeline, camera, step) dict for reusable scratch buffers.
        fidelity: ``reference`` or ``fast``.
        device_spans: kernels doing asynchronous device work append
            :class:`dvpipe.latency.DeviceSpan` objects here (host enqueue and sync stamps plus
            the device-reported duration); the pipeline puts them on the batch timeline.
        target: the plan's deployment target (``dvpipe.Target``) or None.
        on_corrupt: ``drop`` (a damaged frame is a counted drop) or ``flag`` (kept, marked in its
            meta); kernels report damage through :meth:`corrupt`.
        corruption: the reasons recorded for this frame under ``on_corrupt="flag"``.
        slot: the camera's slot of the batch buffer, given to every step (not only the one that ends in
            ``batch``): a step whose output goes straight into a per-batch device buffer (DVPP's VPC
            writing NV12 for the AIPP route) writes there. None outside a pipeline.
        moved: a ``transfer`` kernel sets ``(direction, bytes)`` (``host_to_device``, ``device_to_host``,
            ``device_to_device``) for the frame it copied; the pipeline records the step as a
            ``transfer`` span carrying them.
        verified: the plan step was verified on this device (:attr:`dvpipe.planner.PlanStep.verified`, from
            the live cache the planner was given): run it with what the documentation leaves open accepted.
    """

    camera: Camera
    spec_in: FrameSpec
    spec_out: FrameSpec
    backend: BackendRef
    fidelity: Fidelity
    out: Any = None
    state: dict = field(default_factory=dict)
    device_spans: list = field(default_factory=list)
    target: Optional[Target] = None
    on_corrupt: str = "drop"
    corruption: list = field(default_factory=list)
    slot: Any = None
    moved: Optional[tuple[str, int]] = None
    verified: bool = False

    def corrupt(self, reason: str) -> None:
        """Report that the decoder flagged this frame as damaged but produced a picture.

        Raises :class:`~dvpipe.errors.CorruptFrameError` under ``on_corrupt="drop"``; under
        ``"flag"`` records ``reason`` and returns, and the kernel goes on with the picture.
        """
        if self.on_corrupt != "flag":
            raise CorruptFrameError(reason)
        self.corruption.append(reason)


#: A kernel: ``fn(data, stages, ctx) -> data``. ``data`` is the step's input :data:`FrameData`, ``stages`` the
#: stage declarations of the run it covers (in order, one per op), ``ctx`` the :class:`KernelContext`; it
#: returns the :data:`FrameData` the next step receives (a ``batch`` step returns ``ctx.out``, filled).
KernelFn = Callable[[FrameData, tuple[Stage, ...], KernelContext], FrameData]
#: :func:`register_kernel` hands back the function it registered, with its own (narrower) signature.
_KernelFnT = TypeVar("_KernelFnT", bound=KernelFn)


@dataclass(frozen=True)
class Kernel:
    """A registered implementation of a run of ops on one backend family."""

    ops: tuple[str, ...]
    family: str
    fn: KernelFn
    supports: Optional[Callable[[KernelQuery], KernelVerdict]] = None
    unit: str = "cpu"
    name: str = ""

    def check(self, query: KernelQuery) -> KernelVerdict:
        if self.supports is None:
            return KernelVerdict.yes()
        return self.supports(query)


_LOCK = threading.Lock()
_REGISTRY: dict[str, list[Kernel]] = {}


def register_kernel(ops: str | Sequence[str], backend: str, *,
                    supports: Optional[Callable[[KernelQuery], KernelVerdict]] = None, unit: Optional[str] = None,
                    name: Optional[str] = None, replace: bool = False) -> Callable[[_KernelFnT], _KernelFnT]:
    """Decorator registering a :data:`KernelFn` ``fn(data, stages, ctx) -> data`` for ``ops`` on backend
    family ``backend``; it returns ``fn`` unchanged.

    Args:
        ops: one op name or a sequence of consecutive op names the kernel covers (a fused kernel).
        backend: backend family (``cpu``, ``reference``, ``torch``, ``dvpp``, or a new name).
        supports: optional ``f(query: KernelQuery) -> KernelVerdict`` deciding per camera/spec/target.
        unit: hardware unit for latency accounting (``cpu``, ``dvpp``, ``cuda``, ``npu``); default
            ``cpu`` for host backends.
        name: name shown in plans; default the function name.
        replace: allow re-registering the same (ops, backend) pair (default: error).
    """
    op_tuple = (ops,) if isinstance(ops, str) else tuple(ops)
    if not op_tuple or not all(isinstance(o, str) and o for o in op_tuple):
        raise ConfigError(f"register_kernel: ops must be op names, got {ops!r}")

    def deco(fn: _KernelFnT) -> _KernelFnT:
        kernel = Kernel(op_tuple, backend, fn, supports, unit or "cpu", name or fn.__name__)
        with _LOCK:
            bucket = _REGISTRY.setdefault(op_tuple[0], [])
            clash = [k for k in bucket if k.ops == op_tuple and k.family == backend]
            if clash and not replace:
                raise ConfigError(f"a kernel for {'+'.join(op_tuple)} on backend {backend!r} is already registered "
                                  f"({clash[0].name}); pass replace=True to override")
            bucket[:] = [k for k in bucket if not (k.ops == op_tuple and k.family == backend)] + [kernel]
        return fn

    return deco


def kernels_at(ops: Sequence[str], family: str) -> list[Kernel]:
    """Kernels of ``family`` whose op run is a prefix of ``ops``, longest first."""
    with _LOCK:
        bucket = list(_REGISTRY.get(ops[0], ())) if ops else []
    found = [k for k in bucket if k.family == family and tuple(ops[: len(k.ops)]) == k.ops]
    return sorted(found, key=lambda k: -len(k.ops))


def all_kernels() -> list[Kernel]:
    """Every registered kernel."""
    with _LOCK:
        return [k for bucket in _REGISTRY.values() for k in bucket]


def fused_runs(*segments: Sequence[Sequence[str]], any_order: Sequence[str] = (),
               then: Sequence[str] = ()) -> list[tuple[str, ...]]:
    """The op runs one fused kernel covers, from a declaration of which ops fuse (shortest first).

    Args:
        segments: each a list of alternative op runs (tuples); a run is one alternative of every segment,
            concatenated (``[("normalise",), ("resize", "normalise")], [("batch",), ("pad", "batch")]``
            gives four runs). An empty alternative ``()`` makes a segment optional.
        any_order: after the segments, any subset of these ops in any order, each at most once.
        then: after that, these ops in this order, each optional (``("pad", "batch")`` gives the tails
            ``()``, ``(pad,)``, ``(batch,)``, ``(pad, batch)``).

    Empty runs are left out. Example: the torch backend's pixel kernel is
    ``fused_runs(any_order=("resize", "crop", "normalise"), then=("pad", "batch"))``: 63 runs.
    """
    heads: list[tuple[str, ...]] = [()]
    for seg in segments:
        heads = [h + tuple(alt) for h in heads for alt in seg]
    free: list[tuple[str, ...]] = [()]
    for k in range(1, len(any_order) + 1):
        free += [tuple(p) for c in itertools.combinations(any_order, k) for p in itertools.permutations(c)]
    tails = [tuple(op for op, keep in zip(then, mask) if keep)
             for mask in itertools.product((False, True), repeat=len(then))]
    runs = {h + f + t for h in heads for f in free for t in tails}
    runs.discard(())
    return sorted(runs, key=lambda r: (len(r), r))


def registered_ops() -> dict[str, list[str]]:
    """``{op: [backend family, ...]}`` of every registered kernel (for support matrices)."""
    out: dict[str, set[str]] = {}
    with _LOCK:
        for bucket in _REGISTRY.values():
            for k in bucket:
                for op in k.ops:
                    out.setdefault(op, set()).add(k.family)
    return {op: sorted(v) for op, v in sorted(out.items())}
