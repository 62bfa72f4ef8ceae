"""Optional dependencies, imported on first use with an install hint when missing."""
from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError

_HINTS = {
    "torch": "pip install 'dvpipe[torch]' (CPU wheel: pip install torch==2.13.0)",
    "torch_npu": "pip install 'dvpipe[npu]' on a machine with CANN installed",
    "acl": "pyACL ships with the CANN toolkit: source <install>/set_env.sh (see `dvpipe probe`)",
    "matplotlib": "pip install 'dvpipe[plots]'",
    "prometheus_client": "pip install 'dvpipe[prometheus]'",
    "torchvision": "pip install torchvision (matching your torch version)",
}


def require(module: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        hint = _HINTS.get(module.split(".")[0], f"pip install {module}")
        raise MissingDependencyError(f"{module} is needed here but cannot be imported ({e}); {hint}") from e


def why_unavailable(module: str) -> str | None:
    """None when ``module`` imports, else the reason (never raises)."""
    try:
        importlib.import_module(module)
        return None
    except Exception as e:  # noqa: BLE001 - any import-time failure is a reason to report
        return f"{type(e).__name__}: {e}"
