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

An exporter may also take a short YAML form (:meth:`Exporter.shorthand`: ``trace: true``,
``trace: t.json``, ``prometheus: 9108``) and a ``dvpipe run`` flag (:attr:`Exporter.flag`, a
:class:`CliFlag`: ``--trace PATH``); both are declared on the class, so that an exporter with a short
form and a flag is still one file, the built-ins included (``_builtin_exporters.py``). ``outputs:``
is ``{dir, metrics, <exporter>: options}``: the parsed options of the exporters the deployment
names are ``OutputsConfig.exporters[name]``. The :class:`~dvpipe.deploy.Runner` takes options per
exporter (``Runner(dep, outputs={"trace": {"path": "t.json"}})``), merged over the deployment's:
:func:`run_exporter_options` decides what a run opens, with what.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, is_dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Optional, Sequence, TypeVar

from ..errors import ConfigError
from ..types import short_repr as _show
from ._validate import _V
from .sources.registry import OptionSpec, _identity, _specs, _TYPE_RE, option, parse_options

if TYPE_CHECKING:
    from ..latency import BatchRecord, LatencyStats, Timeline
    from ._schema import Deployment, OutputsConfig
    from .summary import Accounting
    from .sync import FrameSet

__all__ = ["EXPORTERS", "Exporter", "CliFlag", "RunContext", "BatchResult", "register_exporter", "exporter_class",
           "exporter_option_specs", "parse_exporter_options", "run_exporter_options", "output_folders", "output_files",
           "OUTPUT_KEYS", "option", "output_keys", "markdown_reference"]

#: exporter name -> class, in registration order (the built-ins first): the order of open/observe/close
EXPORTERS: dict[str, type["Exporter"]] = {}

#: keys of ``outputs:`` that are no one exporter's: the folder and ``metrics`` (``summary.json`` and
#: ``latency.json``); an exporter's older spellings (:attr:`Exporter.legacy_keys`) follow them
OUTPUT_KEYS = ("dir", "metrics")

_E = TypeVar("_E", bound=type)


@dataclass(frozen=True)
class CliFlag:
    """The ``dvpipe run`` flag of an exporter: given, it turns the exporter on with the options
    :meth:`Exporter.from_flag` makes of its value (merged over the deployment's options for it).

    Attributes:
        name: the flag, ``--`` and lower-case words joined by ``-`` (``--trace``, ``--latency-csv``).
        metavar: what the value is in ``--help`` (``PATH``, ``[HOST:]PORT``).
        help: one line for ``--help``.
    """

    name: str
    metavar: str
    help: str

    def __post_init__(self) -> None:
        if not re.match(r"^--[a-z][a-z0-9]*(-[a-z0-9]+)*$", str(self.name)):
            raise ConfigError(f"an exporter's flag is '--' and lower-case words joined by '-' (e.g. --latency-csv), "
                              f"got {_show(self.name)}")

    @property
    def dest(self) -> str:
        """The argparse attribute the flag's value lands in."""
        return "exporter_" + self.name[2:].replace("-", "_")


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
    write_files: bool = True
    summary: Callable[[], dict] = field(default=dict, repr=False)

    def output_path(self, path: str) -> str:
        """``path`` made absolute: relative paths are relative to ``outputs.dir`` (the working directory
        without one)."""
        return _under(self.out_dir, path)


def _under(out_dir: Optional[str], path: str) -> str:
    path = os.path.expanduser(path)
    if os.path.isabs(path):
        return path
    return os.path.join(out_dir or os.getcwd(), path)


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

    Class attributes (all optional but ``Options`` for an exporter that takes keys):
        name: the registered name (set by :func:`register_exporter`): the key under ``outputs:``.
        Options: the dataclass of the exporter's YAML keys (none: the exporter takes none).
        flag: its ``dvpipe run`` flag (a :class:`CliFlag`), or None.
        writes_files: False for exporters that write nothing (Prometheus serves over HTTP): they run
            even when the runner writes no files.
        takes_key: False for exporters that ``outputs.<name>`` does not configure (``summary`` and
            ``latency`` follow ``metrics``, :meth:`implied`); a flag or the runner's ``outputs=`` still can.
        enabled_by: for the reference table: what else turns it on (``outputs.metrics``).
        legacy_keys: older ``outputs:`` keys that set one of its options (``{"trace_max_events":
            "max_events"}``): still read, so that existing deployments load unchanged.
    """

    name: ClassVar[str] = ""
    flag: ClassVar[Optional[CliFlag]] = None
    writes_files: ClassVar[bool] = True
    takes_key: ClassVar[bool] = True
    enabled_by: ClassVar[str] = ""
    legacy_keys: ClassVar[Mapping[str, str]] = MappingProxyType({})

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
    def from_flag(cls, value: str) -> Mapping[str, Any]:
        """The options the flag's value stands for. Default: :meth:`shorthand` of the value. A path
        given on the command line is relative to the working directory (make it absolute here: an
        option's relative path is relative to ``outputs.dir``). Raise :class:`~dvpipe.ConfigError`
        (one line naming the flag) for a bad value."""
        v = cls.shorthand(value)
        if not isinstance(v, Mapping):
            raise ConfigError(f"{cls.flag.name if cls.flag else cls.name} {value}: not a value this exporter takes")
        return v

    @classmethod
    def implied(cls, outputs: "OutputsConfig") -> Optional[Mapping[str, Any]]:
        """The options this exporter runs with when neither the deployment nor the run names it; None
        (the default): it stays off."""
        return None

    @classmethod
    def output_folders(cls, options: Mapping[str, Any]) -> Sequence[str]:
        """The folders it writes into, for the checks before a run (``dvpipe validate``, the flags);
        relative ones are relative to ``outputs.dir``. Default: none besides ``outputs.dir``."""
        return ()

    @classmethod
    def output_files(cls, options: Mapping[str, Any]) -> Sequence[str]:
        """The files it writes whose names the user gives, for the same checks (a name that is a folder);
        relative ones are relative to ``outputs.dir``. Default: none."""
        return ()

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
    ``TypeError`` at import). A name taken by another class (or one of the shared ``outputs:`` keys),
    or a flag another exporter has, raises :class:`~dvpipe.ConfigError`; the same class again (its
    module re-imported, or a copy of the plugin file) replaces it.
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
        for hook in ("enabled", "outputs_fields"):  # hooks of earlier dvpipe versions: refused, not ignored
            if hasattr(cls, hook):
                raise TypeError(f"exporter {name!r}: {cls.__name__}.{hook}() is no longer called; say when the "
                                "exporter runs unnamed with implied(outputs), and take options from self.options")
        for old, new in cls.legacy_keys.items():
            if new not in {s.name for s in specs}:
                raise TypeError(f"exporter {name!r}: legacy key {old!r} names {new!r}, which is not an option")
        old_cls = EXPORTERS.get(name)
        if old_cls is None and name in output_keys():
            raise ConfigError(f"exporter name {name!r} is already an outputs key; choose another name")
        if old_cls is not None and _identity(old_cls) != _identity(cls):
            raise ConfigError(f"exporter {name!r} is already registered by {old_cls.__module__}."
                              f"{old_cls.__qualname__}; choose another name")
        if cls.flag is not None:
            if not isinstance(cls.flag, CliFlag):
                raise TypeError(f"exporter {name!r}: flag must be a dvpipe CliFlag, got {cls.flag!r}")
            taken = next((n for n, c in EXPORTERS.items() if n != name and c.flag and c.flag.name == cls.flag.name),
                         None)
            if taken is not None:
                raise ConfigError(f"exporter {name!r}: the flag {cls.flag.name} is taken by exporter {taken!r}; "
                                  "choose another flag")
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


def _options(cls: type[Exporter], value: Any, path: str, V: _V) -> Optional[Mapping[str, Any]]:
    """``value`` (a mapping of ``Options`` keys) checked by the generic option validator, defaults
    filled in; None after a problem of shape (reported)."""
    specs = exporter_option_specs(cls)
    sub = V.mapping(value, path, tuple(s.name for s in specs))
    if sub is None:
        return None
    return MappingProxyType(parse_options(specs, sub, path, V, camera=""))


def parse_exporter_options(om: Mapping[str, Any], V: _V) -> tuple[dict[str, Mapping[str, Any]],
                                                                    dict[str, Mapping[str, Any]]]:
    """``(on, presets)`` from the ``outputs:`` mapping ``om``.

    ``on``: ``{name: options}`` of each registered exporter that ``outputs:`` names (and does not
    turn off): ``outputs.<name>`` goes through the exporter's :meth:`Exporter.shorthand`, then its
    keys through the generic option validator (unknown keys, types, bounds, required keys; one line
    per problem at its key path). An exporter's :attr:`~Exporter.legacy_keys` are read into its
    options. ``presets``: options that legacy keys set for an exporter the deployment leaves off
    (``trace_max_events`` without ``trace``): a flag or the runner's ``outputs=`` that turns it on
    starts from them."""
    on: dict[str, Mapping[str, Any]] = {}
    presets: dict[str, Mapping[str, Any]] = {}
    for name, cls in EXPORTERS.items():
        legacy = _legacy_options(cls, om, V)
        path = f"outputs.{name}"
        v = None
        if cls.takes_key and name in om:
            try:
                v = cls.shorthand(om[name])
            except ValueError as e:
                V.err(path, str(e))
                continue
        if v is None:
            if legacy:
                options = _options(cls, legacy, path, V)
                if options is not None:
                    presets[name] = options
            continue
        if isinstance(v, Mapping):
            for old, new in cls.legacy_keys.items():
                if old in om and om[old] is not None and new in v:
                    V.err(f"outputs.{old}", f"given twice (also {path}.{new}); keep {path}.{new}")
            v = {**legacy, **v}
        options = _options(cls, v, path, V)
        if options is not None:
            on[name] = options
    return on, presets


def _legacy_options(cls: type[Exporter], om: Mapping[str, Any], V: _V) -> dict[str, Any]:
    """The options ``cls``'s legacy keys set in ``om`` (``{new name: value}``), each checked at its
    own key path (``outputs.trace_max_events``); a null legacy key sets nothing."""
    out: dict[str, Any] = {}
    specs = {s.name: s for s in exporter_option_specs(cls)}
    for old, new in cls.legacy_keys.items():
        if om.get(old) is None:
            continue
        n = len(V.errors)
        parse_options((replace(specs[new], name=old),), {old: om[old]}, "outputs", V, camera="")
        if len(V.errors) == n:
            out[new] = om[old]
    return out


def run_exporter_options(outputs: "OutputsConfig", given: Optional[Mapping[str, Any]] = None,
                         where: str = "outputs") -> dict[str, Mapping[str, Any]]:
    """``{name: options}`` of every exporter a run opens, in registration order.

    ``given`` (the runner's ``outputs=``, the CLI's flags) is per exporter: a mapping of its options
    (merged over the deployment's options for it, or its presets: ``{"trace": {"max_events": 400}}``
    keeps the deployment's trace path), a short form as in YAML (``"t.json"``, ``True``), or
    ``False`` / None to turn it off. Exporters not given keep what the deployment says; those it does
    not name run with :meth:`Exporter.implied`. Raises :class:`~dvpipe.ConfigError` (one line per
    problem, at ``<where>.<name>.<key>``) for an unknown exporter or a bad option.
    """
    given = dict(given or {})
    V = _V(Path.cwd())
    for name in given:
        if name not in EXPORTERS:
            V.err(f"{where}.{name}", f"unknown exporter; known: {', '.join(EXPORTERS)}")
    out: dict[str, Mapping[str, Any]] = {}
    for name, cls in EXPORTERS.items():
        if name not in given:
            options = outputs.exporters.get(name)
            if options is None:
                options = cls.implied(outputs)
            if options is not None:
                out[name] = options
            continue
        path = f"{where}.{name}"
        try:
            v = given[name] if isinstance(given[name], Mapping) else cls.shorthand(given[name])
        except ValueError as e:
            V.err(path, str(e))
            continue
        if v is None:
            continue
        base = outputs.exporters.get(name) or outputs.presets.get(name) or {}
        options = _options(cls, {**base, **v} if isinstance(v, Mapping) else v, path, V)
        if options is not None:
            out[name] = options
    if V.errors:
        raise ConfigError("; ".join(f"{p}: {m}" for p, m in V.errors))
    return out


def output_folders(outputs: "OutputsConfig", options: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(key path, absolute folder)`` of each folder the exporters with ``options`` write into:
    ``outputs.dir`` when any of them writes files there, then each one's
    :meth:`Exporter.output_folders` (at ``outputs.<name>``)."""
    wanted: list[tuple[str, str]] = []
    writers = [n for n in options if EXPORTERS[n].writes_files]
    if outputs.dir and writers:
        wanted.append(("outputs.dir", outputs.dir))
    for name in writers:
        for folder in EXPORTERS[name].output_folders(options[name]):
            wanted.append((f"outputs.{name}", _under(outputs.dir, folder)))
    return wanted


def output_files(outputs: "OutputsConfig", options: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(key path, absolute path)`` of each file the exporters with ``options`` write under a name the
    user gives (:meth:`Exporter.output_files`, at ``outputs.<name>``)."""
    return [(f"outputs.{name}", _under(outputs.dir, path)) for name in options if EXPORTERS[name].writes_files
            for path in EXPORTERS[name].output_files(options[name])]


def output_keys() -> tuple[str, ...]:
    """Every key ``outputs:`` accepts: the shared ones, the exporters' legacy keys, then one per
    registered exporter that takes one."""
    legacy = tuple(k for cls in EXPORTERS.values() for k in cls.legacy_keys)
    return OUTPUT_KEYS + legacy + tuple(name for name, cls in EXPORTERS.items() if cls.takes_key)


def markdown_reference() -> str:
    """The registered exporters and their ``outputs:`` keys as two Markdown tables (for
    docs/deployments.md; generated, like the source tables, so that they cannot drift)."""
    def md(text: str) -> str:  # reST roles and double backticks as Markdown code
        text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
        return text.replace("|", "\\|")

    rows = ["| exporter | enabled by | what |", "|---|---|---|"]
    for name, cls in EXPORTERS.items():
        what = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        how = ([f"`outputs.{name}`"] if cls.takes_key else []) + ([cls.enabled_by] if cls.enabled_by else [])
        how += [f"`{cls.flag.name} {cls.flag.metavar}`"] if cls.flag else []
        rows.append(f"| `{name}` | {md(', '.join(how))} | {md(what)} |")
    rows += ["", "| key | value | default | meaning |", "|---|---|---|---|"]
    for name, cls in EXPORTERS.items():
        for spec in exporter_option_specs(cls) if cls.takes_key else ():
            rows.append(f"| `outputs.{name}.{spec.name}` | {md(spec.value_text())} | {md(spec.default_text())} "
                        f"| {md(spec.doc)} |")
        for old, new in cls.legacy_keys.items():
            rows.append(f"| `outputs.{old}` | as `outputs.{name}.{new}` | | older spelling of `outputs.{name}.{new}` |")
    return "\n".join(rows) + "\n"
