"""Optional dependencies, imported on first use with an install hint when missing."""
from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError

_HINTS = {
    # PyPI's Linux x86_64 torch is a CUDA build (nvidia-* wheels); the CPU build is on PyTorch's own index
    "torch": ("pip install 'dvpipe[torch]' (CPU only: pip install torch "
              "--index-url https://download.pytorch.org/whl/cpu)"),
    # torch-npu X requires torch==X.*: name the series of the torch installed, or pip replaces that torch
    "torch_npu": ("on a machine with CANN: pip install 'dvpipe[npu]' 'torch-npu==<your torch major.minor>.*' "
                  "(README \"On an Ascend host\")"),
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
