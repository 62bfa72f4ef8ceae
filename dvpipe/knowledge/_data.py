"""Reading the YAML knowledge base shipped as package data (``dvpipe/knowledge/data/*.yaml``).

Files are parsed on first use and cached for the life of the process; importing
:mod:`dvpipe.knowledge` reads nothing.

Extra data directories (:func:`add_data_dir`, :func:`extra_data`) are layered over the shipped data: a
``families.yaml`` there adds families, groups (or members to existing groups) and aliases; its
``rules_*.yaml`` files add rules; an ``open_questions.yaml`` adds open questions. Every cache in the
knowledge package is registered here (:func:`cached`) and cleared when the layers change.
"""
from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, TypeVar, Union
from ..errors import ConfigError

DATA_DIR = Path(__file__).resolve().parent / "data"

__all__ = ["DATA_DIR", "load_yaml", "rule_files", "strip_private", "data_dirs", "layers", "add_data_dir",
           "remove_data_dir", "extra_data", "cached", "clear_caches", "register_cache", "file_label"]

_F = TypeVar("_F", bound=Callable[..., Any])


class Clearable(Protocol):
    """Anything with ``cache_clear()`` (a ``functools.lru_cache`` wrapper, say)."""

    def cache_clear(self) -> None: ...


_C = TypeVar("_C", bound=Clearable)

_EXTRA_DIRS: list[Path] = []
_CACHES: list[Any] = []


def cached(fn: _F) -> _F:
    """``functools.lru_cache`` that :func:`clear_caches` clears (every derived table of the package)."""
    c = functools.lru_cache(maxsize=None)(fn)
    _CACHES.append(c)
    return c  # type: ignore[return-value]


def register_cache(c: _C) -> _C:
    """Have :func:`clear_caches` also clear ``c`` (anything with ``cache_clear()``, e.g. a caller's
    ``functools.lru_cache`` of verdicts) whenever the data layers change. Returns ``c``."""
    if not callable(getattr(c, "cache_clear", None)):
        raise TypeError(f"{c!r} has no cache_clear()")
    _CACHES.append(c)
    return c


def clear_caches() -> None:
    """Forget every parsed file and derived table (done by :func:`add_data_dir` / :func:`remove_data_dir`)."""
    for c in _CACHES:
        c.cache_clear()


@cached
def load_yaml(name: str, directory: Union[str, Path, None] = None) -> dict:
    """Parse ``<directory>/<name>`` (default: the shipped ``data/``) once (cached).

    Raises ``ConfigError`` (a ``ValueError``) if the top level is not a mapping.
    """
    import yaml  # deferred: keeps `import dvpipe.knowledge` cheap

    path = (DATA_DIR if directory is None else Path(directory)) / name
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as fh:
        data = yaml.load(fh, Loader=loader)  # noqa: S506 - a safe loader
    if not isinstance(data, dict):
        raise ConfigError(f"knowledge file {file_label(path)}: top level must be a mapping")
    return data


def file_label(path: Path) -> str:
    """How messages name a data file: the bare name for shipped files, the full path for extra ones."""
    return path.name if path.parent == DATA_DIR else str(path)


def data_dirs() -> tuple[Path, ...]:
    """The shipped data directory, then the extra ones in the order they were added."""
    return (DATA_DIR, *_EXTRA_DIRS)


def layers(name: str) -> list[tuple[str, dict]]:
    """``(file label, parsed mapping)`` for ``name`` in every data directory that has it, shipped first."""
    out = [(name, load_yaml(name))]
    for d in _EXTRA_DIRS:
        if (d / name).is_file():
            out.append((file_label(d / name), load_yaml(name, d)))
    return out


def rule_files() -> tuple[str, ...]:
    """Names of the shipped ``rules_*.yaml`` files, sorted."""
    return tuple(sorted(p.name for p in DATA_DIR.glob("rules_*.yaml")))


def rule_layers() -> list[tuple[str, dict]]:
    """``(file label, parsed mapping)`` of every ``rules_*.yaml``: the shipped ones, then each extra
    directory's, each directory sorted by name."""
    out = [(name, load_yaml(name)) for name in rule_files()]
    for d in _EXTRA_DIRS:
        for p in sorted(d.glob("rules_*.yaml")):
            out.append((file_label(p), load_yaml(p.name, d)))
    return out


def add_data_dir(path: Union[str, "os.PathLike[str]"]) -> Path:
    """Layer the YAML files in ``path`` over the shipped knowledge base (see the module docstring).

    Caches are cleared; the next query reads and validates the combined data, so a bad file fails there
    with a one-line ``ConfigError`` naming it. Callers that keep their own caches of verdicts (the DVPP
    backend's) register them with :func:`register_cache`. Returns the resolved path.
    """
    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise ConfigError(f"knowledge data directory {str(path)!r} does not exist")
    if p == DATA_DIR:
        raise ConfigError("the shipped knowledge data directory is always loaded; give a directory of extra files")
    if p not in _EXTRA_DIRS:
        _EXTRA_DIRS.append(p)
    clear_caches()
    return p


def remove_data_dir(path: Union[str, "os.PathLike[str]"]) -> None:
    """Undo :func:`add_data_dir` (no error when the directory was not added)."""
    p = Path(path).expanduser().resolve()
    if p in _EXTRA_DIRS:
        _EXTRA_DIRS.remove(p)
    clear_caches()


@contextlib.contextmanager
def extra_data(path: Union[str, "os.PathLike[str]"]) -> Iterator[Path]:
    """``with extra_data(dir):`` the knowledge base includes ``dir``'s files, and only inside the block."""
    p = add_data_dir(path)
    try:
        yield p
    finally:
        remove_data_dir(p)


def strip_private(data: dict) -> dict[str, Any]:
    """Drop keys starting with ``x-`` (they only hold YAML anchors)."""
    return {k: v for k, v in data.items() if not str(k).startswith("x-")}
