"""Output folders of a deployment: can a run create and write them (``dvpipe validate``)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional

from ..types import short_repr as _show
from ._schema import OutputsConfig
from .exporters import output_files, output_folders, run_exporter_options

__all__ = ["output_problems"]

_NAME_MAX = 255  # bytes of one path component (Linux, macOS, Windows)


def output_problems(outputs: OutputsConfig, given: Optional[Mapping[str, Any]] = None) -> list[tuple[str, str]]:
    """``(key path, message)`` for each output folder a run could not create or write into: the
    folders of the exporters the run opens (the deployment's, with ``given`` as the runner's
    ``outputs=``; :meth:`~dvpipe.deploy.exporters.Exporter.output_folders`), and each file named that is
    a folder (:meth:`~dvpipe.deploy.exporters.Exporter.output_files`).

    Checks without leaving anything behind: missing folders are not created (their nearest existing
    ancestor must be a writable folder), and writing is tried with an anonymous temporary file.
    """
    problems = []
    options = run_exporter_options(outputs, given)
    for key, folder in output_folders(outputs, options):
        problem = _folder_problem(folder)
        if problem is not None:
            problems.append((key, problem))
    for key, path in output_files(outputs, options):
        if os.path.isdir(path):
            problems.append((key, f"{_show(path, 200)} is a folder; name a file in it"))
    return problems


def _folder_problem(folder: str) -> Optional[str]:
    """Why ``folder`` could not be created (when missing) and written into, or None."""
    if "\0" in folder:
        return f"a path cannot contain a NUL character: {_show(folder)}"
    long = [part for part in Path(folder).parts if len(os.fsencode(part)) > _NAME_MAX]
    if long:
        return f"cannot create {_show(folder, 200)}: the name {_show(long[0])} is longer than {_NAME_MAX} bytes"
    existing = Path(os.path.abspath(folder))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot create {_show(folder, 200)}: {existing} is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        verb = "write into" if str(existing) == os.path.abspath(folder) else f"create {folder} in"
        return f"cannot {verb} {existing}: {e.strerror or e}"
    return None
