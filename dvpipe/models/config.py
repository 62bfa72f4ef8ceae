"""The ``model:`` section of a deployment: ``{type: om, path: model.om, device: 0, backend: dvpp|dvpp-sim,
target: {soc, cann}, aipp: PATH}`` -> a validated :class:`OmSpec` -> an :class:`~dvpipe.models.OmModel`.

Errors are one line naming the key path (``model.path: file not found: /x/model.om``), as
:class:`dvpipe.errors.ConfigError`; :func:`parse_config` checks everything that can be checked without a
device (for ``dvpipe validate-config``), :func:`from_config` also loads the model.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional

from ..errors import ConfigError

if TYPE_CHECKING:  # names for the type checker only
    from ..target import Target
    from .om import OmModel

__all__ = ["OmSpec", "parse_config", "from_spec", "from_config", "KEYS"]

KEYS = ("type", "path", "device", "backend", "target", "aipp", "name")


@dataclass(frozen=True)
class OmSpec:
    """A validated ``model:`` section (paths absolute)."""

    path: str
    device: int = 0
    backend: str = "dvpp"
    target: Optional[Target] = None
    aipp: Optional[str] = None
    name: Optional[str] = None


def _target(value: object, where: str) -> Optional[Target]:
    from ..target import Target

    if value is None or isinstance(value, Target):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"expected a mapping {{soc, cann}}, got {value!r}", where)
    unknown = set(value) - {"soc", "cann", "driver"}
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(sorted(unknown))} (allowed: soc, cann, driver)", where)
    for k in ("soc", "cann"):
        if k not in value:
            raise ConfigError(f"missing {k} (e.g. soc: Ascend310P3, cann: 8.0.0)", f"{where}.{k}")
    try:
        return Target(str(value["soc"]), str(value["cann"]), value.get("driver"))
    except ConfigError as e:
        raise ConfigError(e.message, where) from None


def parse_config(mapping: object, base_dir: str = ".", *, key: str = "model",
                 default_target: Optional[Target] = None) -> OmSpec:
    """Validate a ``model:`` mapping; relative paths are taken from ``base_dir`` (the deployment's folder).

    ``default_target`` (the deployment's target) is used when ``target`` is absent.
    """
    from .om import BACKENDS

    if not isinstance(mapping, Mapping):
        raise ConfigError(f"expected a mapping with type: om and path, got {mapping!r}", key)
    unknown = set(mapping) - set(KEYS)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(sorted(map(str, unknown)))} (allowed: {', '.join(KEYS)})", key)
    kind = mapping.get("type", "om")
    if kind != "om":
        raise ConfigError(f"only type: om (an Ascend offline model) is supported, got {kind!r}", f"{key}.type")
    backend = mapping.get("backend", "dvpp")
    if backend not in BACKENDS:
        raise ConfigError(f"expected one of {', '.join(BACKENDS)}, got {backend!r}", f"{key}.backend")
    path = mapping.get("path")
    if not isinstance(path, str) or not path:
        raise ConfigError("missing: the .om file (software device: a model descriptor, docs/models.md)", f"{key}.path")
    if not (backend == "dvpp-sim" and path.startswith("sim-model:")):
        path = path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir, path))
        if not os.path.isfile(path):
            raise ConfigError(f"file not found: {path}", f"{key}.path")
    device = mapping.get("device", 0)
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise ConfigError(f"expected a device id >= 0, got {device!r}", f"{key}.device")
    target = _target(mapping.get("target"), f"{key}.target") or default_target
    if backend == "dvpp-sim" and target is None:
        raise ConfigError("the software device simulates one target: give target: {soc: ..., cann: ...} (or the "
                          "deployment's target)", f"{key}.target")
    aipp = mapping.get("aipp")
    if aipp is not None:
        if not isinstance(aipp, str):
            raise ConfigError(f"expected the path of an aipp.cfg, got {aipp!r}", f"{key}.aipp")
        aipp = aipp if os.path.isabs(aipp) else os.path.normpath(os.path.join(base_dir, aipp))
        if not os.path.isfile(aipp):
            raise ConfigError(f"file not found: {aipp}", f"{key}.aipp")
        from ..backends.dvpp.aipp import AippConfig

        try:
            with open(aipp, encoding="utf-8") as f:
                AippConfig.from_cfg(f.read())
        except ConfigError as e:
            raise ConfigError(f"{aipp}: {e}", f"{key}.aipp") from None
    name = mapping.get("name")
    return OmSpec(path, device, backend, target, aipp, None if name is None else str(name))


def from_spec(spec: OmSpec, *, key: str = "model") -> OmModel:
    """Load the model of a validated :class:`OmSpec` (:class:`~dvpipe.models.OmModel`). A model the device
    cannot load (e.g. a file that is no descriptor on the software device) is a ``ConfigError`` on
    ``model.path``."""
    from ..backends.dvpp import _acl
    from .om import OmModel

    try:
        return OmModel(spec.path, device=spec.device, backend=spec.backend, target=spec.target, aipp=spec.aipp,
                       name=spec.name)
    except ConfigError as e:
        raise ConfigError(e.message, f"{key}.{e.path}" if e.path else key) from None
    except _acl.AclError as e:
        if e.api in ("acl.mdl.load_from_file", "acl.mdl.load_from_mem"):
            raise ConfigError(f"the device cannot load it: {e.detail or e}", f"{key}.path") from None
        raise


def from_config(mapping: object, base_dir: str = ".", *, key: str = "model",
                default_target: Optional[Target] = None) -> OmModel:
    """:func:`parse_config`, then :func:`from_spec`: the loaded :class:`~dvpipe.models.OmModel`."""
    return from_spec(parse_config(mapping, base_dir, key=key, default_target=default_target), key=key)
