"""The exporter registry: ``@register_exporter("name")`` on an :class:`Exporter` subclass.

An exporter is what a run writes or serves besides the batches themselves (the trace, the JSON
statistics, plots, dumps, Prometheus, ``summary.json``, the HTML report, or a user's CSV). Its life
has three calls, made by the runner for every registered exporter the deployment enables, in
registration order (built-ins first):

* ``open(run)`` once, when the :class:`~dvpipe.deploy.Runner` is built, with a :class:`RunContext`;
* ``observe(result)`` once per completed frame set, with a :class:`BatchResult` (the set's finished
  timeline and what the statistics extracted from it). It runs on the runner's completion thread,
  after the set's end-to-end time was stamped: its time is not part of the set's latency, but it
  delays the next set, so an exporter that writes files hands the writing to its own thread (as the
  ``dumps`` exporter does) and keeps ``observe`` to a copy;
* ``close(result) -> {name: path}`` once at the end, with the :class:`~dvpipe.deploy.RunResult`;
  what it returns is merged into ``result.outputs`` (a path, or a sentence saying why nothing was
  written).

A user exporter's YAML keys are an ``Options`` dataclass on the class, declared with
:func:`~dvpipe.deploy.sources.registry.option` and read by the same generic validator as a source
type's options (types, defaults, bounds, required keys; one line per problem at its key path, e.g.
``outputs.latency_csv.every: must be >= 1, got 0``). The deployment enables it by naming it under
``outputs:`` (``outputs: {latency_csv: {path: e2e.csv}}``; ``true`` or ``{}``: every default), and
imports the module that registers it under ``plugins:``. ::

    from dataclasses import dataclass
    from dvpipe.deploy.exporters import Exporter, option, register_exporter

    @register_exporter("latency_csv")
    class LatencyCsv(Exporter):
        \"\"\"End-to-end latency of each frame set as CSV.\"\"\"

        @dataclass
        class Options:
            path: str = option("e2e.csv", "file name (relative to outputs.dir)")

        def open(self, run):
            self.rows = []
            self.path = run.output_path(self.options["path"])

        def observe(self, result):
            self.rows.append((result.index, result.record.capture_to_output_ns))

        def close(self, result):
            ...  # write self.rows to self.path
            return {"latency_csv": self.path}

The built-in exporters declare their keys the same way; their short YAML forms (``trace: true``,
``trace: t.json``, ``prometheus: 9108``) are turned into the mapping form by
:meth:`Exporter.shorthand` first, and their parsed options become the fields of
:class:`~dvpipe.deploy.config.OutputsConfig` (:meth:`Exporter.outputs_fields`) that the CLI's flags
can override.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, is_dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Optional, TypeVar

from ..errors import ConfigError
from ..types import short_repr as _show
from .sources.registry import OptionSpec, _identity, _specs, _TYPE_RE, option, parse_options

if TYPE_CHECKING:
    from ..latency import BatchRecord, LatencyStats, Timeline
    from ._schema import Deployment, OutputsConfig
    from ._validate import _V
    from .summary import Accounting
    from .sync import FrameSet

__all__ = ["EXPORTERS", "Exporter", "RunContext", "BatchResult", "register_exporter", "exporter_class",
           "exporter_option_specs", "parse_exporter_options", "OUTPUT_KEYS", "option", "output_keys",
           "markdown_reference"]

#: exporter name -> class, in registration order (the built-ins first): the order of open/observe/close
EXPORTERS: dict[str, type["Exporter"]] = {}

#: keys of ``outputs:`` that are no one exporter's own: the folder, ``metrics`` (``summary.json`` and
#: ``latency.json``), the trace's ring size (kept beside ``trace`` for existing deployments)
OUTPUT_KEYS = ("dir", "metrics", "trace_max_events")

_E = TypeVar("_E", bound=type)


@dataclass
class RunContext:
    """What an exporter's :meth:`Exporter.open` sees of the run.

    Attributes:
        deployment: the :class:`~dvpipe.deploy.config.Deployment` being run.
        out_dir: ``outputs.dir`` (absolute; None: no output folder).
        cameras: camera names in rig order.
        stats: the run's :class:`~dvpipe.latency.LatencyStats` (filled as sets complete).
        accounting: the run's :class:`~dvpipe.deploy.summary.Accounting` (read it under its lock from
            another thread).
        plan: the pipeline's plan (``.to_dict()``).
        clock: the runner's monotonic clock (ns), :func:`dvpipe.latency.now_ns` unless injected.
        overrides: paths given to the :class:`~dvpipe.deploy.Runner` (``trace_path``, ``json_path``,
            ``plots_dir``, ``report_path``, ``trace_max_events``); None when not given.
        write_files: False when the runner writes no files (``write_outputs=False``,
            ``--no-outputs``); exporters that write files are then not opened at all.
        summary: the runner's ``summary.json`` content so far (a callable: it is read at the end).
    """

    deployment: "Deployment"
    out_dir: Optional[str]
    cameras: tuple[str, ...]
    stats: "LatencyStats"
    accounting: "Accounting"
    plan: Any
    clock: Callable[[], int]
    overrides: Mapping[str, Any] = field(default_factory=dict)
    write_files: bool = True
    summary: Callable[[], dict] = field(default=dict, repr=False)

    def output_path(self, path: str) -> str:
        """``path`` made absolute: relative paths are relative to ``outputs.dir`` (the working directory
        without one)."""
        path = os.path.expanduser(path)
        if os.path.isabs(path):
            return path
        return os.path.join(self.out_dir or os.getcwd(), path)


@dataclass(frozen=True)
class BatchResult:
    """One completed frame set, as :meth:`Exporter.observe` receives it.

    Attributes:
        frame_set: the :class:`~dvpipe.deploy.sync.FrameSet` (``index``, ``time_ns``, members).
        batch: the pipeline's batch (``images`` ``(N, 3, H, W)`` in rig order, ``metas``, ``valid``).
            Its buffer is reused two sets later: copy what you keep.
        output: what the model returned (None without a model or after a model error).
        timeline: the set's finished :class:`~dvpipe.latency.Timeline` (monotonic ns).
        record: the :class:`~dvpipe.latency.BatchRecord` the statistics extracted from it
            (``capture_to_output_ns``, ``arrival_to_output_ns``, per-camera times, steps), in ns.
        warmup: True for the first ``latency.warmup_sets`` sets, which the statistics leave out.
    """

    frame_set: "FrameSet"
    batch: Any
    output: Any
    timeline: "Timeline"
    record: "BatchRecord"
    warmup: bool = False

    @property
    def index(self) -> int:
        """The frame set's index (0, 1, ... in the order the sets were formed)."""
        return self.frame_set.index


class Exporter:
    """Base class of exporters; see the module docstring for the lifecycle.

    Class attributes:
        name: the registered name (set by :func:`register_exporter`): the key under ``outputs:``.
        Options: the dataclass of the exporter's YAML keys (none: the exporter takes none).
        writes_files: False for exporters that write nothing (Prometheus serves over HTTP): they run
            even when the runner writes no files.
        takes_key: False for exporters that ``outputs.<name>`` does not configure (``summary`` and
            ``latency`` follow ``metrics``; ``report`` follows ``--report``).
    """

    name: ClassVar[str] = ""
    writes_files: ClassVar[bool] = True
    takes_key: ClassVar[bool] = True  # configured by outputs.<name> (False: by shared keys or the runner's arguments)
    enabled_by: ClassVar[str] = ""  # for the reference table, when takes_key is False: what turns it on

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options: Mapping[str, Any] = options

    @classmethod
    def shorthand(cls, value: Any) -> Optional[Any]:
        """The YAML value of ``outputs.<name>`` as a mapping of ``Options`` keys; None: the exporter is
        off. Default: ``true`` / ``null`` -> ``{}`` (every default), ``false`` -> off, anything else as
        it is (a non-mapping is then reported). Raise ``ValueError(message)`` for a value of the wrong
        shape: it is reported at ``outputs.<name>``."""
        if value is False:
            return None
        return {} if value is True or value is None else value

    @classmethod
    def outputs_fields(cls, options: Mapping[str, Any], out_dir: str) -> Optional[dict[str, Any]]:
        """For a built-in: the :class:`~dvpipe.deploy.config.OutputsConfig` fields its parsed options
        set. None (the default, every user exporter): the options are kept in
        ``OutputsConfig.exporters[name]``."""
        return None

    @classmethod
    def enabled(cls, outputs: "OutputsConfig", overrides: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
        """The options this exporter runs with in a deployment, or None when it is off.

        The default: the options parsed from ``outputs.<name>`` (present only when the deployment
        names the exporter)."""
        return outputs.exporters.get(cls.name)

    def open(self, run: RunContext) -> None:
        """Once, when the runner is built. Raise :class:`~dvpipe.ConfigError` for a problem the user
        can fix (one line)."""

    def observe(self, result: BatchResult) -> None:
        """Once per completed frame set, on the runner's completion thread; keep it short."""

    def close(self, result: Any) -> dict[str, str]:
        """Once at the end with the :class:`~dvpipe.deploy.RunResult`; returns ``{output name: path}``."""
        return {}

    def abort(self) -> None:
        """Release what :meth:`open` holds when the run ends without :meth:`close` (the runner failed
        to start). Default: nothing."""


def register_exporter(name: str) -> Callable[[_E], _E]:
    """Class decorator: register an :class:`Exporter` subclass as ``outputs.<name>``.

    The ``Options`` dataclass is read once here (a field the validator cannot check raises
    ``TypeError`` at import). A name taken by another class (or one of the shared ``outputs:`` keys)
    raises :class:`~dvpipe.ConfigError`; the same class again (its module re-imported, or a copy of
    the plugin file) replaces it.
    """
    if not isinstance(name, str) or not _TYPE_RE.match(name):
        raise ConfigError(f"an exporter name is a lower-case name of letters, digits, '_' or '-' (1-32 characters, "
                          f"starting with a letter), got {_show(name)}")
    caller_globals = sys._getframe(1).f_globals  # the registering module: resolves its annotations

    def deco(cls: _E) -> _E:
        if not (isinstance(cls, type) and issubclass(cls, Exporter)):
            raise TypeError(f"@register_exporter({name!r}) decorates a dvpipe Exporter subclass, got {cls!r}")
        opts = cls.__dict__.get("Options", getattr(cls, "Options", None))
        if opts is None:
            opts = dataclass(type("Options", (), {}))
            cls.Options = opts  # type: ignore[attr-defined]
        if not (isinstance(opts, type) and is_dataclass(opts)):
            raise TypeError(f"exporter {name!r}: {cls.__name__}.Options must be a @dataclass")
        specs = _specs(opts, caller_globals, f"exporter {name!r}")
        old = EXPORTERS.get(name)
        if old is None and name in OUTPUT_KEYS:
            raise ConfigError(f"exporter name {name!r} is already an outputs key; choose another name")
        if old is not None and _identity(old) != _identity(cls):
            raise ConfigError(f"exporter {name!r} is already registered by {old.__module__}.{old.__qualname__}; "
                              "choose another name")
        cls.name = name
        cls._option_specs = specs  # type: ignore[attr-defined]
        EXPORTERS[name] = cls
        return cls

    return deco


def exporter_class(name: str) -> type[Exporter]:
    """The class registered as ``name``; ``ConfigError`` listing the known exporters otherwise."""
    try:
        return EXPORTERS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown exporter {_show(name)}; known: {', '.join(EXPORTERS)}") from None


def exporter_option_specs(cls: type[Exporter]) -> tuple[OptionSpec, ...]:
    """The YAML keys of a registered exporter (its ``Options`` fields, in order)."""
    return getattr(cls, "_option_specs", ())


def parse_exporter_options(om: Mapping[str, Any], V: "_V") -> dict[str, Mapping[str, Any]]:
    """``{name: options}`` of each registered exporter that ``outputs:`` names (and does not turn off).

    ``outputs.<name>`` goes through the exporter's :meth:`Exporter.shorthand`, then its keys through
    the generic option validator (unknown keys, types, bounds, required keys; one line per problem at
    its key path)."""
    out: dict[str, Mapping[str, Any]] = {}
    for name, cls in EXPORTERS.items():
        if not cls.takes_key or name not in om:
            continue
        path = f"outputs.{name}"
        try:
            v = cls.shorthand(om[name])
        except ValueError as e:
            V.err(path, str(e))
            continue
        if v is None:
            continue
        specs = exporter_option_specs(cls)
        sub = V.mapping(v, path, tuple(s.name for s in specs))
        if sub is None:
            continue
        out[name] = MappingProxyType(parse_options(specs, sub, path, V, camera=""))
    return out


def output_keys() -> tuple[str, ...]:
    """Every key ``outputs:`` accepts: the shared ones, then one per registered exporter that takes one."""
    return OUTPUT_KEYS + tuple(name for name, cls in EXPORTERS.items() if cls.takes_key)


def markdown_reference() -> str:
    """The registered exporters and their ``outputs:`` keys as two Markdown tables (for
    docs/deployments.md; generated, like the source tables, so that they cannot drift)."""
    def md(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| exporter | enabled by | what |", "|---|---|---|"]
    for name, cls in EXPORTERS.items():
        what = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        rows.append(f"| `{name}` | {f'`outputs.{name}`' if cls.takes_key else md(cls.enabled_by)} | {md(what)} |")
    rows += ["", "| key | value | default | meaning |", "|---|---|---|---|"]
    for name, cls in EXPORTERS.items():
        for spec in exporter_option_specs(cls) if cls.takes_key else ():
            rows.append(f"| `outputs.{name}.{spec.name}` | {md(spec.value_text())} | {md(spec.default_text())} "
                        f"| {md(spec.doc)} |")
    return "\n".join(rows) + "\n"
