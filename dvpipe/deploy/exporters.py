"""Exporters: what a run writes or serves besides its batches, one registry (see
:mod:`dvpipe.deploy._exporter_registry` for the lifecycle and an example).

Adding an exporter is one file: an :class:`Exporter` subclass with ``@register_exporter("name")``
and an ``Options`` dataclass, optionally a short YAML form (``shorthand``) and a ``dvpipe run`` flag
(``flag = CliFlag(...)``); a deployment names the file under ``plugins:`` and enables it under
``outputs: {name: {...}}``.
"""
from __future__ import annotations

from ._builtin_exporters import BUILTIN_EXPORTERS  # registers the built-in exporters first
from ._exporter_registry import (EXPORTERS, OUTPUT_KEYS, BatchResult, CliFlag, Exporter, RunContext, exporter_class,
                                 exporter_option_specs, markdown_reference, option, output_files, output_folders, output_keys,
                                 parse_exporter_options, register_exporter, run_exporter_options)

__all__ = ["EXPORTERS", "BUILTIN_EXPORTERS", "OUTPUT_KEYS", "Exporter", "CliFlag", "RunContext", "BatchResult",
           "register_exporter", "option", "exporter_class", "exporter_option_specs", "output_keys",
           "parse_exporter_options", "run_exporter_options", "output_folders", "output_files", "markdown_reference"]
