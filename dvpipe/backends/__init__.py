"""The backend table: one row per backend family, nothing imported until a plan asks for it.

Backend names a user writes (each declared by its family's row: ``names``, ``device_kinds``):

==================  =========  ======================================================
name                family     what runs
==================  =========  ======================================================
``cpu``             cpu        OpenCV / numpy kernels, threads across cameras
``reference``       reference  plain numpy, slow and obviously correct (test oracle)
``torch:DEVICE``    torch      torch kernels on ``cpu``, ``cuda[:N]`` or ``npu[:N]`` (``torch``: ``torch:cpu``)
``dvpp``            dvpp       Ascend DVPP through pyACL on a real device
``dvpp-sim``        dvpp       the same DVPP code against the software DVPP device
``aipp``            aipp       the AIPP route: normalise + pad + batch left to the model's AIPP; the batch
                               is DVPP's NV12 in a per-batch device buffer (``aipp-sim``: on the
                               software device)
==================  =========  ======================================================

Each family is one row of the table (:class:`BackendFamily`, :func:`register_family`): the names it
answers to (:func:`resolve` reads them; so do the error listing the known names, the ``BuiltinBackend``
Literal's test and ``backends: auto``, whose preference order is the rows' ``auto`` ranks:
:func:`auto_backends`), the module that registers its kernels, where its steps' outputs live
(:attr:`BackendRef.placement`: ``host`` for the CPU families, the torch device for torch, the DVPP device
``dvpp-hw:0`` / ``dvpp-sim:0`` for ``dvpp`` and ``aipp``), which placements are its memory, and the
planner's hooks: how its steps hand their outputs on (``place_outputs``), which transfer steps a consumer
of its memory needs (``transfer``), and, for a family that writes a device-resident batch, its route,
batch layout and conflicts. The planner asks the rows and names no family; adding a device family is one
:func:`register_family` call (a row here for the built-in ones) plus its kernels.

Importing a family's module registers its kernels. A module may define
``available(ref, target) -> KernelVerdict`` telling whether the backend can run here, and why not.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union

from ..errors import ConfigError
from ..stages.kernel_registry import KernelVerdict, all_kernels

if TYPE_CHECKING:
    from ..target import Target

__all__ = ["BackendRef", "BackendFamily", "FAMILIES", "DVPP_FAMILIES", "family", "register_family", "family_of_placement",
           "resolve", "availability", "load_family", "is_dvpp_placement", "auto_backends", "known_names"]

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
        names: the exact backend names this family answers to -> the device each means (``dvpp``: ``hw``,
            ``dvpp-sim``: ``sim``). A row with neither ``names`` nor ``device_kinds`` answers to its own name.
        device_kinds: the family also answers to ``NAME:KIND`` and ``NAME:KIND:N`` for these kinds (torch:
            ``cpu``, ``cuda``, ``npu``; the device is what follows ``NAME:``), and to ``NAME`` alone as
            ``NAME:default_device``.
        default_device: the kind ``NAME`` alone means (with ``device_kinds``).
        auto: backend names of this family that ``backends: auto`` tries -> their rank in its preference
            order (lower first; :func:`auto_backends`).
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
    names: Mapping[str, str] = field(default_factory=dict, hash=False)
    device_kinds: tuple[str, ...] = ()
    default_device: str = ""
    auto: Mapping[str, int] = field(default_factory=dict, hash=False)

    @property
    def backend_names(self) -> tuple[str, ...]:
        """Every backend name this row declares (``NAME:KIND`` without the ``:N`` forms)."""
        if not self.names and not self.device_kinds:
            return (self.name,)
        kinds = ((self.name,) + tuple(f"{self.name}:{k}" for k in self.device_kinds)) if self.device_kinds else ()
        return tuple(self.names) + kinds

    @property
    def name_forms(self) -> tuple[str, ...]:
        """The names as the error listing known backends writes them (``torch:cuda[:N]``)."""
        kinds = tuple(f"{self.name}:{k}" + ("" if k == self.default_device else "[:N]") for k in self.device_kinds)
        return (tuple(self.names) or (() if kinds else (self.name,))) + kinds

    def parse(self, name: str) -> Optional["BackendRef"]:
        """The backend ``name`` means if this row declares it, else None. Raises ``ConfigError`` for
        ``NAME:KIND`` with a kind the row does not declare."""
        if name in self.names:
            return BackendRef(name, self.name, self.names[name])
        if not self.device_kinds:
            return BackendRef(name, self.name, "") if name == self.name and not self.names else None
        if name == self.name:
            return BackendRef(f"{name}:{self.default_device}", self.name, self.default_device)
        if not name.startswith(self.name + ":"):
            return None
        device = name.split(":", 1)[1]
        if device.split(":")[0] not in self.device_kinds:
            forms = [f for f in self.name_forms if ":" in f]
            use = forms[0] if len(forms) == 1 else f"{', '.join(forms[:-1])} or {forms[-1]}"
            raise ConfigError(f"unknown {self.name} device {device!r} in backend {name!r}; use {use}")
        kind, sep, index = device.partition(":")
        if sep and not (index.isascii() and index.isdigit()):  # torch:npu:x, torch:cuda:-1, torch:cuda:0:1
            raise ConfigError(f"backend {name!r}: a device number is 0, 1, 2... ({self.name}:{kind}:0), got {index!r}")
        return BackendRef(name, self.name, device)

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
    """Add (or replace) a family's row. Its kernels come from ``row.module`` or ``register_kernel``.

    Raises ``ConfigError`` when the row declares a backend name another family answers to, or puts in
    ``auto`` a name it does not declare."""
    if not isinstance(row, BackendFamily) or not row.name:
        raise ConfigError(f"register_family takes a BackendFamily with a name, got {row!r}")
    for other in _TABLE.values():
        clash = [n for n in row.backend_names if other.name != row.name and _declares(other, n)]
        if clash:
            raise ConfigError(f"backend family {row.name!r} declares {', '.join(map(repr, clash))}, already a name of "
                              f"family {other.name!r}; choose other names")
    stray = [n for n in row.auto if not _declares(row, n)]
    if stray:
        raise ConfigError(f"backend family {row.name!r} puts {', '.join(map(repr, stray))} in auto but does not "
                          "declare it; list it in names (or use NAME:KIND of its device_kinds)")
    _TABLE[row.name] = row
    if row.module:
        FAMILIES[row.name] = row.module
    else:
        FAMILIES.pop(row.name, None)
    _LOADED.pop(row.name, None)
    return row


def _declares(row: BackendFamily, name: str) -> bool:
    """Whether ``name`` is in ``row``'s names (a ``NAME:...`` it refuses is still in its namespace)."""
    try:
        return row.parse(name) is not None
    except ConfigError:
        return True


def known_names() -> tuple[str, ...]:
    """Every backend name the table's rows declare (``torch:cuda[:N]`` forms: see
    :attr:`BackendFamily.backend_names`)."""
    return tuple(n for row in _TABLE.values() for n in row.backend_names)


def auto_backends() -> tuple[str, ...]:
    """The preference order ``backends: auto`` picks from: every row's ``auto`` names by rank (rows in
    registration order between equal ranks). ``dvpipe.deploy`` keeps only the available ones."""
    ranked = [(rank, k, name) for k, row in enumerate(_TABLE.values()) for name, rank in row.auto.items()]
    return tuple(name for _r, _k, name in sorted(ranked))


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
    """Parse a backend name: the names the table's rows declare (see the module table), or a family known
    only by its registered kernels. Raises ``ConfigError`` listing the known names."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"backend names are strings like 'cpu', 'torch:cuda', 'dvpp-sim'; got {name!r}")
    for row in _TABLE.values():
        ref = row.parse(name)
        if ref is not None:
            return ref
    if any(k.family == name for k in all_kernels()):
        return BackendRef(name, name, "")
    forms = [f for row in _TABLE.values() for f in row.name_forms]
    raise ConfigError(f"unknown backend {name!r}; known: {', '.join(forms)}, or a family you registered kernels for")


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


def availability(ref: BackendRef, target: Optional[Target] = None) -> KernelVerdict:
    """Whether ``ref`` can run on this machine (for ``target``), with the reason if not."""
    err = load_family(ref.family)
    if err:
        return KernelVerdict("unavailable", err)
    module = FAMILIES.get(ref.family)
    if module is None:
        return KernelVerdict.yes()
    check = getattr(importlib.import_module(module), "available", None)
    return check(ref, target) if check else KernelVerdict.yes()


# ``auto`` ranks: a DVPP device first, then the torch accelerators, the CPU last
for _row in (
    BackendFamily("cpu", "dvpipe.backends.cpu", names={"cpu": ""}, auto={"cpu": 100}),
    BackendFamily("reference", "dvpipe.backends.numpy_ref", names={"reference": ""}),
    BackendFamily("torch", "dvpipe.backends.torch_device", device_kinds=("cpu", "cuda", "npu"), default_device="cpu",
                  auto={"torch:npu": 20, "torch:cuda": 30}, placement=_torch_placement, owns=_torch_owns,
                  device_ref=_torch_ref),
    BackendFamily("dvpp", "dvpipe.backends.dvpp", names={"dvpp": "hw", "dvpp-sim": "sim"}, auto={"dvpp": 10},
                  placement=_dvpp_placement, owns=is_dvpp_placement,
                  transfer=_DVPP_HOOKS + "transfer", place_outputs=_DVPP_HOOKS + "place_outputs",
                  route=_DVPP_HOOKS + "route", measured=True),
    BackendFamily("aipp", "dvpipe.backends.dvpp.route", names={"aipp": "hw", "aipp-sim": "sim"},
                  placement=_dvpp_placement, route=_DVPP_HOOKS + "route",
                  batch_conflict=_DVPP_HOOKS + "batch_conflict", batch_layout="dvpipe.backends.dvpp.route:batch_layout",
                  describe_batch=_DVPP_HOOKS + "describe_batch"),
):
    register_family(_row)

#: families whose steps run on (and hand on memory of) the DVPP device
DVPP_FAMILIES = frozenset(row.name for row in _TABLE.values() if row.placement is _dvpp_placement)
