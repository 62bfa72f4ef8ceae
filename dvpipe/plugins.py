"""Plugins named in configuration: the object a ``module:attr`` or ``path/to/file.py:attr`` entry names.

Deployments name user sources, stages and exporters this way (:mod:`dvpipe.deploy.config`), and
:class:`dvpipe.mmdet3d.Mmdet3dHook` its model; this module imports nothing of dvpipe, so any layer may use it.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any

__all__ = ["import_entry"]


def import_entry(entry: str) -> Any:
    """The object an entry names: ``package.module:attr.sub`` or ``path/to/file.py:attr``.

    Raises whatever importing or the attribute lookup raises (callers turn it into a ``ConfigError``).
    """
    mod, _, attr = entry.rpartition(":")
    if mod.endswith(".py"):
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(mod))[0], mod)
        assert spec is not None and spec.loader is not None  # a .py path always has a spec and a loader
        obj: Any = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(obj)
    else:
        obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
