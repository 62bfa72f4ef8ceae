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

Placement (:attr:`BackendRef.placement`): where a backend's step outputs live. ``host`` for the CPU
families, the torch device for torch, and the DVPP device (``dvpp-hw:0`` / ``dvpp-sim:0``) for ``dvpp``
and ``aipp``: the planner inserts a timed ``transfer`` step wherever a consumer reads another place.

Importing a family's module registers its kernels. A module may define
``available(ref) -> KernelVerdict`` telling whether the backend can run here, and why not.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Optional

from ..errors import ConfigError
from ..stages.registry import KernelVerdict

__all__ = ["BackendRef", "FAMILIES", "DVPP_FAMILIES", "resolve", "availability", "load_family", "is_dvpp_placement"]

#: family -> module implementing it. A user family registered only through ``register_kernel``
#: (no module) is accepted too.
FAMILIES: dict[str, str] = {
    "cpu": "dvpipe.backends.cpu",
    "reference": "dvpipe.backends.numpy_ref",
    "torch": "dvpipe.backends.torch_device",
    "dvpp": "dvpipe.backends.dvpp",
    "aipp": "dvpipe.backends.dvpp.route",
}

#: families whose steps run on (and hand on memory of) the DVPP device
DVPP_FAMILIES = frozenset({"dvpp", "aipp"})


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
        if self.family == "torch" and self.device != "cpu":
            return self.device
        if self.family in DVPP_FAMILIES:
            return f"dvpp-{self.device}:0"
        return "host"

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
    if name in FAMILIES:
        return BackendRef(name, name, "")
    from ..stages.registry import _REGISTRY  # user families exist only through registered kernels

    if any(k.family == name for bucket in _REGISTRY.values() for k in bucket):
        return BackendRef(name, name, "")
    raise ConfigError(f"unknown backend {name!r}; known: cpu, reference, torch:cpu, torch:cuda[:N], torch:npu[:N], "
                      "dvpp, dvpp-sim, aipp, aipp-sim, or a family you registered kernels for")


def is_dvpp_placement(placement: str) -> bool:
    """True for a DVPP device placement (``dvpp-sim:0``, ``dvpp-hw:0``)."""
    return placement.startswith("dvpp-")


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
