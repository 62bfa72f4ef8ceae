"""The stage registry: op name -> stage class and the YAML names a deployment may use for it.

One decorator declares a stage, built-in or user-defined, everywhere dvpipe needs it::

    @dvpipe.register_stage("gamma", yaml=("gamma",))
    @dataclass(frozen=True)
    class Gamma(dvpipe.Stage):
        gamma: float = 2.2

Then ``Gamma`` is planned like a built-in (``dvpipe.Gamma`` resolves it), a deployment's
``stages: [decode, {gamma: {gamma: 2.2}}]`` builds it (``dvpipe.deploy.config._stage_table`` reads
this registry), and its kernels (``@dvpipe.register_kernel("gamma", backend="cpu")``, in the same
file) are listed per backend by :func:`kernels_by_backend`. A module a deployment names under
``plugins:`` (or as ``module:Class`` in ``stages:``) is imported before the stage list is read, so a
registered YAML name from user code works there too.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, TypeVar

from ..errors import ConfigError
from .base import Stage

__all__ = ["StageInfo", "register_stage", "registered_stages", "stage_class", "yaml_names", "kernels_by_backend"]

S = TypeVar("S", bound=type)


@dataclass(frozen=True)
class StageInfo:
    """One registered stage.

    Attributes:
        op: the op name kernels are registered under (``resize``).
        cls: the :class:`~dvpipe.stages.Stage` subclass.
        yaml: the names a deployment's ``stages:`` list may use (``("normalise", "normalize")``).
    """

    op: str
    cls: type
    yaml: tuple[str, ...]


_LOCK = threading.Lock()
_BY_OP: dict[str, StageInfo] = {}
_BY_YAML: dict[str, StageInfo] = {}


def register_stage(op: str, *, yaml: Optional[Sequence[str]] = None, replace: bool = False) -> Callable[[S], S]:
    """Class decorator registering a :class:`~dvpipe.stages.Stage` subclass under ``op``.

    Args:
        op: the op name (sets the class's ``op``); kernels are registered under it.
        yaml: the names a deployment's ``stages:`` list may use; default ``(op,)``; ``()``: none (a stage
            only the planner places, as ``transfer``).
        replace: allow re-registering ``op`` or a YAML name (default: a clash is a :class:`ConfigError`).
    """
    if not isinstance(op, str) or not op or not op.replace("_", "").isalnum():
        raise ConfigError(f"register_stage: op must be a word such as 'gamma', got {op!r}")
    names = (op,) if yaml is None else ((yaml,) if isinstance(yaml, str) else tuple(yaml))
    if not all(isinstance(n, str) and n and ":" not in n for n in names):
        raise ConfigError(f"register_stage({op!r}): yaml must be names without ':', got {yaml!r}")

    def deco(cls: S) -> S:
        if not (isinstance(cls, type) and issubclass(cls, Stage)):
            raise ConfigError(f"register_stage({op!r}) decorates a dvpipe.Stage subclass, not {cls!r}")
        if "op" not in cls.__dict__ or not cls.__dict__["op"]:
            cls.op = op
        elif cls.__dict__["op"] != op:
            raise ConfigError(f"register_stage({op!r}): {cls.__qualname__}.op is {cls.__dict__['op']!r}")
        info = StageInfo(op, cls, names)
        with _LOCK:
            if not replace:
                old = _BY_OP.get(op)
                if old is not None and old.cls is not cls:
                    raise ConfigError(f"stage op {op!r} is already registered ({old.cls.__module__}."
                                      f"{old.cls.__qualname__}); pass replace=True to override")
                for n in names:
                    old = _BY_YAML.get(n)
                    if old is not None and old.cls is not cls:
                        raise ConfigError(f"stage YAML name {n!r} is already taken by {old.cls.__qualname__}; "
                                          "pick another or pass replace=True")
            previous = _BY_OP.get(op)
            if previous is not None:
                for n in previous.yaml:
                    _BY_YAML.pop(n, None)
            _BY_OP[op] = info
            for n in names:
                _BY_YAML[n] = info
        return cls

    return deco


def registered_stages() -> dict[str, StageInfo]:
    """``{op: StageInfo}`` of every registered stage, in registration order."""
    with _LOCK:
        return dict(_BY_OP)


def stage_class(name: str) -> Optional[type]:
    """The class registered under YAML name or op ``name``, or None."""
    with _LOCK:
        info = _BY_YAML.get(name) or _BY_OP.get(name)
    return None if info is None else info.cls


def yaml_names() -> dict[str, type]:
    """``{YAML name: class}`` for a deployment's ``stages:`` list."""
    with _LOCK:
        return {n: info.cls for n, info in _BY_YAML.items()}


def kernels_by_backend(op: str) -> dict[str, list[tuple[str, ...]]]:
    """``{backend family: [op run, ...]}`` of the registered kernels whose run contains ``op``."""
    from .kernel_registry import all_kernels

    out: dict[str, list[tuple[str, ...]]] = {}
    for k in all_kernels():
        if op in k.ops:
            out.setdefault(k.family, []).append(k.ops)
    return {f: sorted(set(runs), key=lambda r: (len(r), r)) for f, runs in sorted(out.items())}
