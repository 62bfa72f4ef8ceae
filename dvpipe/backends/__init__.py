"""The backend table: one row per backend family, nothing imported until a plan asks for it.

Backend names a user writes:

==================  =========  ======================================================
name                family     what runs
==================  =========  ======================================================
``cpu``             cpu        OpenCV / numpy kernels, threads across cameras
``reference``       reference  plain numpy, slow and obviously correct (test oracle)
``torch:DEVICE``    torch      torch kernels on ``cpu``, ``cuda[:N]`` or ``npu[:N]``
``dvpp``            dvpp       Ascend DVPP through pyACL on a real device
``dvpp-sim``        dvpp       the same DVPP code against the software DVPP device
``aipp``            aipp       the AIPP route: normalise + pad + batch left to the model's AIPP; the batch
                               is DVPP's NV12 in a per-batch device buffer (``aipp-sim``: on the
                               software device)
==================  =========  ======================================================

Each family is one row of the table (:class:`BackendFamily`, :func:`register_family`): the module that
registers its kernels, where its steps' outputs live (:attr:`BackendRef.placement`: ``host`` for the CPU
families, the torch device for torch, the DVPP device ``dvpp-hw:0`` / ``dvpp-sim:0`` for ``dvpp`` and
``aipp``), which placements are its memory, and the planner's hooks: how its steps hand their outputs
on (``place_outputs``), which transfer steps a consumer of its memory needs (``transfer``), and, for a
family that writes a device-resident batch, its route, batch layout and conflicts. The planner asks the
rows and names no family; adding a device family is one :func:`register_family` call (a row here for
the built-in ones) plus its kernels.

Importing a family's module registers its kernels. A module may define
``available(ref, target) -> KernelVerdict`` telling whether the backend can run here, and why not.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from ..errors import ConfigError
from ..stages.registry import KernelVerdict, all_kernels

__all__ = ["BackendRef", "BackendFamily", "FAMILIES", "DVPP_FAMILIES", "family", "register_family", "family_of_placement",
           "resolve", "availability", "load_family", "is_dvpp_placement"]

#: a hook of a family row: a callable, or ``"module:attribute"`` imported when the planner first calls it
Hook = Union[str, Callable[..., Any], None]


def _host(ref: "BackendRef") -> str:
    return "host"


def _owns_nothing(placement: str) -> bool:
    return False


@dataclass(frozen=True)
class BackendFamily:
    """One row of the backend table: what the planner needs to know about a backend family.

    Attributes:
        name: the family (:attr:`BackendRef.family`), e.g. ``torch``.
        module: imported on first use (registering the family's kernels; it may define ``available``);
            None for a family registered from outside whose kernels are already registered.
        placement: ``ref -> str``: where the steps of backend ``ref`` leave their outputs (``host``,
            ``cuda:0``, ``dvpp-sim:0``).
        owns: ``placement -> bool``: whether a placement is this family's memory; the family that owns a
            step's input (else the one that owns the step's own placement) plans the transfer between them.
        device_ref: ``placement -> BackendRef``: the backend whose ``transfer`` kernel copies to and from
            that placement (used by the default ``transfer``).
        transfer: ``(step, previous) -> (steps to insert before step, step)`` for a step reading from a
            placement other than its own; default: one ``Transfer`` step on the family's ``transfer``
            kernel (:func:`dvpipe.planner.device_transfer`).
        place_outputs: ``(steps, camera, target) -> (steps, problem)``: called once per camera after its
            steps are chosen, when one of them is this family's: gives its steps the spec of what they
            hand on and their consumers the matching input; ``problem`` says why a device consumer cannot
            read it as planned ("" when it can; the planner then re-plans without the device batch).
        route: ``steps -> str``: the camera's route word (``aipp``, ``torch_npu``) when this family decides
            it, "" otherwise (the plan says ``host``).
        batch_conflict: ``camera_plans -> str``: why this family cannot write the plan's batch for every
            camera ("" when it can or is not used); the planner declines the family and re-plans.
        batch_layout: ``plan -> dict``: the per-batch device buffer when the plan's batch step is this
            family's (``Plan.device_batch``).
        describe_batch: ``layout -> str``: one line describing that buffer for ``print(plan)``.
        measured: whether a live cache's measurements replace the family's documented verdicts
            (``plan_pipeline(..., live=...)``).
    """

    name: str
    module: Optional[str] = None
    placement: Callable[["BackendRef"], str] = _host
    owns: Callable[[str], bool] = _owns_nothing
    device_ref: Optional[Callable[[str], "BackendRef"]] = None
    transfer: Hook = None
    place_outputs: Hook = None
    route: Hook = None
    batch_conflict: Hook = None
    batch_layout: Hook = None
    describe_batch: Hook = None
    measured: bool = False

    def hook(self, name: str) -> Optional[Callable[..., Any]]:
        """The hook ``name`` as a callable (importing its module on first use), or None."""
        h = getattr(self, name)
        if isinstance(h, str):
            module, attr = h.split(":")
            h = getattr(importlib.import_module(module), attr)
        return h


def _dvpp_placement(ref: "BackendRef") -> str:
    return f"dvpp-{ref.device}:0"


def is_dvpp_placement(placement: str) -> bool:
    """True for a DVPP device placement (``dvpp-sim:0``, ``dvpp-hw:0``)."""
    return placement.startswith("dvpp-")


def _torch_placement(ref: "BackendRef") -> str:
    return "host" if ref.device == "cpu" else ref.device


def _torch_owns(placement: str) -> bool:
    return placement.split(":")[0] in ("cuda", "npu")


def _torch_ref(placement: str) -> "BackendRef":
    return resolve(f"torch:{placement}")


_DVPP_HOOKS = "dvpipe.backends.dvpp.placement:"

_TABLE: dict[str, BackendFamily] = {}

#: family -> module implementing it (a view of the table). A user family registered only through
#: ``register_kernel`` (no row) is accepted too: it runs on the host.
FAMILIES: dict[str, str] = {}


def register_family(row: BackendFamily) -> BackendFamily:
    """Add (or replace) a family's row. Its kernels come from ``row.module`` or ``register_kernel``."""
    if not isinstance(row, BackendFamily) or not row.name:
        raise ConfigError(f"register_family takes a BackendFamily with a name, got {row!r}")
    _TABLE[row.name] = row
    if row.module:
        FAMILIES[row.name] = row.module
    else:
        FAMILIES.pop(row.name, None)
    _LOADED.pop(row.name, None)
    return row


def family(name: str) -> BackendFamily:
    """The row of family ``name`` (a family known only by its registered kernels gets a host row)."""
    return _TABLE.get(name) or BackendFamily(name)


def family_of_placement(placement: str) -> Optional[BackendFamily]:
    """The family whose memory ``placement`` is (None for ``host`` and places no family owns)."""
    return next((row for row in _TABLE.values() if row.owns(placement)), None)


@dataclass(frozen=True)
class BackendRef:
    """A backend as named by the user: ``name`` (``torch:cuda:0``), ``family`` (``torch``), ``device`` (``cuda:0``)."""

    name: str
    family: str
    device: str = ""

    @property
    def placement(self) -> str:
        """Where this backend's outputs live: ``host``, the torch device string (``npu:0``), or the DVPP
        device (``dvpp-sim:0``, ``dvpp-hw:0``)."""
        return family(self.family).placement(self)

    def __str__(self) -> str:
        return self.name


def resolve(name: str) -> BackendRef:
    """Parse a backend name (see the module table). Raises ``ConfigError`` listing the forms."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"backend names are strings like 'cpu', 'torch:cuda', 'dvpp-sim'; got {name!r}")
    if name == "torch":
        return BackendRef("torch:cpu", "torch", "cpu")
    if name.startswith("torch:"):
        device = name.split(":", 1)[1]
        if device.split(":")[0] not in ("cpu", "cuda", "npu"):
            raise ConfigError(f"unknown torch device {device!r} in backend {name!r}; use torch:cpu, torch:cuda[:N] or torch:npu[:N]")
        return BackendRef(name, "torch", device)
    if name == "dvpp-sim":
        return BackendRef(name, "dvpp", "sim")
    if name == "dvpp":
        return BackendRef(name, "dvpp", "hw")
    if name == "aipp-sim":
        return BackendRef(name, "aipp", "sim")
    if name == "aipp":
        return BackendRef(name, "aipp", "hw")
    if name in _TABLE:
        return BackendRef(name, name, "")
    if any(k.family == name for k in all_kernels()):
        return BackendRef(name, name, "")
    raise ConfigError(f"unknown backend {name!r}; known: cpu, reference, torch:cpu, torch:cuda[:N], torch:npu[:N], "
                      "dvpp, dvpp-sim, aipp, aipp-sim, or a family you registered kernels for")


_LOADED: dict[str, Optional[str]] = {}


def load_family(family: str) -> Optional[str]:
    """Import a family's module (registering its kernels). Returns None, or why it failed."""
    if family not in _LOADED:
        module = FAMILIES.get(family)
        if module is None:
            _LOADED[family] = None
        else:
            try:
                importlib.import_module(module)
                _LOADED[family] = None
            except ImportError as e:
                _LOADED[family] = f"cannot import {module}: {e}"
    return _LOADED[family]


def availability(ref: BackendRef, target=None) -> KernelVerdict:
    """Whether ``ref`` can run on this machine (for ``target``), with the reason if not."""
    err = load_family(ref.family)
    if err:
        return KernelVerdict("unavailable", err)
    module = FAMILIES.get(ref.family)
    if module is None:
        return KernelVerdict.yes()
    check = getattr(importlib.import_module(module), "available", None)
    return check(ref, target) if check else KernelVerdict.yes()


for _row in (
    BackendFamily("cpu", "dvpipe.backends.cpu"),
    BackendFamily("reference", "dvpipe.backends.numpy_ref"),
    BackendFamily("torch", "dvpipe.backends.torch_device", placement=_torch_placement, owns=_torch_owns,
                  device_ref=_torch_ref),
    BackendFamily("dvpp", "dvpipe.backends.dvpp", placement=_dvpp_placement, owns=is_dvpp_placement,
                  transfer=_DVPP_HOOKS + "transfer", place_outputs=_DVPP_HOOKS + "place_outputs",
                  route=_DVPP_HOOKS + "route", measured=True),
    BackendFamily("aipp", "dvpipe.backends.dvpp.route", placement=_dvpp_placement, route=_DVPP_HOOKS + "route",
                  batch_conflict=_DVPP_HOOKS + "batch_conflict", batch_layout="dvpipe.backends.dvpp.route:batch_layout",
                  describe_batch=_DVPP_HOOKS + "describe_batch"),
):
    register_family(_row)

#: families whose steps run on (and hand on memory of) the DVPP device
DVPP_FAMILIES = frozenset(row.name for row in _TABLE.values() if row.placement is _dvpp_placement)
