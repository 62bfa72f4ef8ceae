"""Reading the YAML knowledge base shipped as package data (``dvpipe/knowledge/data/*.yaml``).

Files are parsed on first use and cached for the life of the process; importing
:mod:`dvpipe.knowledge` reads nothing.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data"

__all__ = ["DATA_DIR", "load_yaml", "rule_files", "strip_private"]


@functools.lru_cache(maxsize=None)
def load_yaml(name: str) -> dict:
    """Parse ``data/<name>`` once (cached). Raises ``ValueError`` if the top level is not a mapping."""
    import yaml  # deferred: keeps `import dvpipe.knowledge` cheap

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(DATA_DIR / name, encoding="utf-8") as fh:
        data = yaml.load(fh, Loader=loader)  # noqa: S506 - a safe loader
    if not isinstance(data, dict):
        raise ValueError(f"knowledge file {name}: top level must be a mapping")
    return data


def rule_files() -> tuple[str, ...]:
    """Names of the ``rules_*.yaml`` files, sorted."""
    return tuple(sorted(p.name for p in DATA_DIR.glob("rules_*.yaml")))


def strip_private(data: dict) -> dict[str, Any]:
    """Drop keys starting with ``x-`` (they only hold YAML anchors)."""
    return {k: v for k, v in data.items() if not str(k).startswith("x-")}
