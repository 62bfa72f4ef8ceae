"""Source types, registered once: ``@register_source("type")`` on a :class:`Source` subclass.

A source type is one class. Its ``Options`` dataclass declares the YAML keys the type takes (besides
the common ``type``, ``uri``, ``offset_ms`` and ``faults``): each field's type, default, bounds and
one line of documentation (:func:`option`). The deployment validator reads them generically —
unknown keys, types, bounds, required keys — and reports each problem as one line at its key path
(``cameras[0].source.fps: must be > 0, got -1``). Checks that are not one field's business (the
``uri``, probing files, defaults that depend on other keys, the camera's encoding) go in the class's
:meth:`Source.validate` classmethod, which gets the parsed options and a :class:`SourceContext`.
Whether a source is live comes from the class (:meth:`Source.is_live`). ::

    from dataclasses import dataclass
    from typing import Optional
    import dvpipe
    from dvpipe.deploy.sources import Source, option

    @dvpipe.register_source("counter")
    class Counter(Source):
        \"\"\"Frames whose bytes count up (a test pattern).\"\"\"

        @dataclass
        class Options:
            fps: float = option(10.0, "frames per second", minimum=0, exclusive_min=True, maximum=1000)
            frames: Optional[int] = option(None, "frames before the end (null: endless)", minimum=1)

        @classmethod
        def validate(cls, options, ctx):
            if ctx.uri is not None:
                ctx.err("uri", "a counter source takes no uri")
            return options

        def _open(self): ...
        def _read(self): ...

Option types the validator knows: ``bool``, ``int``, ``float`` (an int is accepted and converted),
``str`` (non-empty), ``Literal["a", "b"]`` (one of), ``tuple[int, int]`` (written ``[width, height]`` in
pixels in the YAML, each side 1..65535, at most ``decode.max_pixels``; delivered as ``(height, width)``),
another dataclass (a nested mapping, delivered as a read-only mapping), and ``Optional[...]`` of any of
them (``null`` allowed). A field without a default is required. The source reads its options as ``self.options[name]`` (a dict, as
:attr:`dvpipe.deploy.config.SourceConfig.options`).
"""
from __future__ import annotations

import re
import sys
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Optional, TypeVar, Union

from ...errors import ConfigError
from ...types import short_repr as _show
from .._validate import _MISSING, _NUMBER_MAX, _V, _join, _limit, _number_problem, _pair
from .base import Source

if TYPE_CHECKING:  # names for the type checker only
    from ...types import Rig
    from .._schema import SyncConfig

__all__ = ["SOURCES", "register_source", "option", "OptionSpec", "SourceContext", "DeploymentContext", "source_class",
           "option_specs", "parse_options", "COMMON_KEYS", "markdown_reference"]

#: source type -> class, in registration order (the built-in types first)
SOURCES: dict[str, type[Source]] = {}

#: keys every source takes, handled by the deployment loader (not part of any ``Options``)
COMMON_KEYS = ("type", "uri", "offset_ms", "faults")




class _Required:
    """The default of an option without one (a required key)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

_TYPE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_S = TypeVar("_S", bound=type)


def option(default: Any = MISSING, doc: str = "", *, default_factory: Any = MISSING, minimum: Optional[float] = None,
           maximum: Optional[float] = None, exclusive_min: bool = False, path: Optional[str] = None,
           camera: bool = False, message: Optional[str] = None) -> Any:
    """A field of a source's ``Options`` dataclass with its YAML rules.

    Args:
        default: the value when the key is absent (omit it, and ``default_factory``, for a required key).
        doc: one line: what the key means, with its unit.
        default_factory: for a dataclass-typed (nested mapping) field: its default.
        minimum, maximum, exclusive_min: bounds of a number (``maximum`` default: 1e9, the schema's
            bound of any number).
        path: ``"file"`` or ``"dir"``: a string that names an existing file or folder, made absolute
            (relative to the YAML file).
        camera: ``{camera}`` in the string is replaced by the camera's name (before ``path``).
        message: replaces the message of a number out of range or of the wrong kind; ``{got}`` is
            the value as written.
    """
    if path not in (None, "file", "dir"):
        raise ConfigError(f"option(path=...) takes 'file' or 'dir' (or None for a plain string), got {path!r}")
    meta = {"doc": doc, "minimum": minimum, "maximum": maximum, "exclusive_min": exclusive_min, "path": path,
            "camera": camera, "message": message}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class OptionSpec:
    """One YAML key of a source type, as the validator reads it (built from an ``Options`` field).

    ``kind`` is ``bool``, ``int``, ``float``, ``str``, ``choice`` (one of ``choices``), ``pixels``
    (YAML ``[width, height]``, delivered as ``(height, width)``) or ``mapping`` (``nested`` are its keys).
    """

    name: str
    kind: str
    optional: bool = False
    default: Any = REQUIRED
    doc: str = ""
    minimum: Optional[float] = None
    maximum: float = _NUMBER_MAX
    exclusive_min: bool = False
    choices: tuple = ()
    path: Optional[str] = None
    camera: bool = False
    message: Optional[str] = None
    nested: tuple["OptionSpec", ...] = ()

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def value_text(self) -> str:
        """The accepted values in words: ``number > 0 and <= 10000``, ``tcp | udp``."""
        if self.kind == "choice":
            text = " | ".join(map(str, self.choices))
        elif self.kind in ("int", "float"):
            text = "integer" if self.kind == "int" else "number"
            bounds = []
            if self.minimum is not None:
                bounds.append(f"{'>' if self.exclusive_min else '>='} {_bound(self.minimum)}")
            if self.maximum != _NUMBER_MAX:
                bounds.append(f"<= {_bound(self.maximum)}")
            text += (" " + " and ".join(bounds)) if bounds else ""
        elif self.kind == "pixels":
            text = "[W, H] pixels"
        elif self.kind == "mapping":
            text = "{" + ", ".join(s.name for s in self.nested) + "}"
        elif self.kind == "str":
            text = {"file": "file path", "dir": "folder path"}.get(self.path or "", "text")
        else:
            text = "true | false"
        return text + (" | null" if self.optional else "")

    def default_text(self) -> str:
        if self.required:
            return "required"
        if self.kind == "mapping":
            return "(each key's default)"
        d = self.default
        return "null" if d is None else ("true" if d is True else "false" if d is False else _limit(d)
                                         if isinstance(d, (int, float)) else str(d))


def _bound(x: float) -> str:
    """A bound as the schema writes it: ``2**62``, ``1e12``, ``86400000``, ``0.5``."""
    if float(x).is_integer() and x >= 1e9:
        n = int(x)
        if n & (n - 1) == 0:
            return f"2**{n.bit_length() - 1}"
        if str(n).rstrip("0") == "1":
            return f"1e{len(str(n)) - 1}"
    return _limit(x)


# ------------------------------------------------------------------------------ registration
def register_source(type_name: str) -> Callable[[_S], _S]:
    """Class decorator: register a :class:`Source` subclass as YAML ``type: type_name``.

    The class's ``Options`` dataclass (none: the type takes no keys of its own) is read once here;
    a field the validator cannot check raises ``TypeError`` at import, not at the first deployment.
    Registering another class under a taken name raises :class:`~dvpipe.ConfigError`; the same class
    again (same name, defined in a file of the same name: its module re-imported, or a copy of the
    plugin file next to another deployment) replaces it.
    """
    if not isinstance(type_name, str) or not _TYPE_RE.match(type_name):
        raise ConfigError(f"a source type is a lower-case name of letters, digits, '_' or '-' (1-32 characters, "
                          f"starting with a letter), got {_show(type_name)}")
    caller_globals = sys._getframe(1).f_globals  # the module that registers: resolves its annotations

    def deco(cls: _S) -> _S:
        if not (isinstance(cls, type) and issubclass(cls, Source)):
            raise TypeError(f"@register_source({type_name!r}) decorates a dvpipe Source subclass, got {cls!r}")
        opts = cls.__dict__.get("Options", getattr(cls, "Options", None))
        if opts is None:
            opts = dataclass(type("Options", (), {}))
            cls.Options = opts  # type: ignore[attr-defined]
        if not (isinstance(opts, type) and is_dataclass(opts)):
            raise TypeError(f"source {type_name!r}: {cls.__name__}.Options must be a @dataclass")
        specs = _specs(opts, caller_globals, f"source {type_name!r}")
        clash = [s.name for s in specs if s.name in COMMON_KEYS]
        if clash:
            raise TypeError(f"source {type_name!r}: option {clash[0]!r} is a key every source has "
                            f"({', '.join(COMMON_KEYS)})")
        old = SOURCES.get(type_name)
        if old is not None and _identity(old) != _identity(cls):
            raise ConfigError(f"source type {type_name!r} is already registered by "
                              f"{old.__module__}.{old.__qualname__}; choose another name")
        cls.type = type_name
        cls._option_specs = specs  # type: ignore[attr-defined]
        SOURCES[type_name] = cls
        return cls

    return deco


def _identity(cls: type) -> tuple[str, str]:
    """What makes two registrations "the same class again": its qualified name and the name of the
    file it is defined in (a plugin imported from two copies of one file, a module re-imported)."""
    import os

    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return cls.__qualname__, os.path.basename(file) if file else cls.__module__


def source_class(type_name: str) -> type[Source]:
    """The class registered as ``type_name``; ``ConfigError`` listing the known types otherwise."""
    try:
        return SOURCES[type_name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown source type {_show(type_name)}; known: {', '.join(SOURCES)}") from None


def option_specs(cls: type[Source]) -> tuple[OptionSpec, ...]:
    """The keys of a registered source class (its ``Options`` fields, in order)."""
    return getattr(cls, "_option_specs", ())


def _specs(opts: type, globalns: Mapping[str, Any], where: str) -> tuple[OptionSpec, ...]:
    try:
        hints = typing.get_type_hints(opts)
    except NameError:
        hints = typing.get_type_hints(opts, globalns=dict(globalns))
    out = []
    for f in fields(opts):
        meta = dict(f.metadata)
        hint = hints.get(f.name, f.type)
        out.append(_spec(f.name, hint, f, meta, globalns, f"{where}, option {f.name!r}"))
    return tuple(out)


def _spec(name: str, hint: Any, f: Any, meta: Mapping[str, Any], globalns: Mapping[str, Any], where: str) -> OptionSpec:
    optional = False
    origin = typing.get_origin(hint)
    if origin is Union or (hasattr(types, "UnionType") and origin is getattr(types, "UnionType")):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1 or len(args) == len(typing.get_args(hint)):
            raise TypeError(f"{where}: a union is only Optional[X], got {hint!r}")
        optional, hint, origin = True, args[0], typing.get_origin(args[0])
    choices: tuple = ()
    nested: tuple[OptionSpec, ...] = ()
    if origin is Literal:
        kind, choices = "choice", typing.get_args(hint)
    elif hint is bool or hint is int or hint is float or hint is str:
        kind = hint.__name__
    elif origin is tuple and typing.get_args(hint) == (int, int):
        kind = "pixels"
    elif isinstance(hint, type) and is_dataclass(hint):
        kind, nested = "mapping", _specs(hint, globalns, where)
    else:
        raise TypeError(f"{where}: type {hint!r} is not one the validator checks (bool, int, float, str, "
                        "Literal[...], tuple[int, int], a dataclass, or Optional[one of them])")
    if kind == "mapping":
        default = None  # absent: each nested key's own default
    elif f.default is not MISSING:
        default = f.default
    elif f.default_factory is not MISSING:
        default = f.default_factory()
    else:
        default = REQUIRED
    if (meta.get("path") or meta.get("camera")) and kind != "str":
        raise TypeError(f"{where}: path= and camera= are for str options")
    maximum = meta.get("maximum")
    return OptionSpec(name=name, kind=kind, optional=optional, default=default, doc=str(meta.get("doc", "")),
                      minimum=meta.get("minimum"), maximum=_NUMBER_MAX if maximum is None else maximum,
                      exclusive_min=bool(meta.get("exclusive_min")), choices=choices, path=meta.get("path"),
                      camera=bool(meta.get("camera")), message=meta.get("message"), nested=nested)


# ---------------------------------------------------------------------------------- validation
@dataclass
class SourceContext:
    """What :meth:`Source.validate` knows about the camera and the YAML, and how it reports.

    Attributes:
        camera: the rig camera's name.
        encoding: the camera's declared encoding (``jpeg``, ``h264``, ``raw``, ``nv12``...).
        size: the camera's ``(height, width)`` in pixels.
        path: key path of this source mapping (``source``, ``cameras[2].source``).
        uri: the ``uri`` as written, ``{camera}`` replaced (None: not given). ``validate`` may set it
            (e.g. to the absolute path :meth:`resolve` returns): the source gets what it holds.
        given: the keys as written in the YAML (to tell "absent" from "the default").
        probe: ``dvpipe validate``: also open files (headers only) to check them.
        max_pixels: ``decode.max_pixels``.
        max_bytes: the largest encoded image file read (``decode.max_bytes``, or the default
            ``max_pixels`` implies), in bytes.
    """

    camera: str
    encoding: str
    size: tuple[int, int]
    path: str
    uri: Optional[str]
    given: Mapping[str, Any]
    probe: bool
    max_pixels: int
    max_bytes: int = 0
    _v: _V = field(repr=False, default=None)  # type: ignore[assignment]
    _mark: int = field(repr=False, default=0)

    def key(self, key: Optional[str]) -> str:
        """The full key path of ``key`` of this source (None: the source itself)."""
        return self.path if key is None else _join(self.path, key)

    def err(self, key: Optional[str], message: str) -> None:
        """Report a problem at ``key`` of this source (None: the source as a whole); one line. A key already
        refused while this source was read (a wrong type, a value not allowed) gets no second problem: what
        follows from the refused value ("required", "cannot tell ...") would only repeat it."""
        path = self.key(key)
        if key is not None and any(p == path for p, _m in self._v.errors[self._mark:]):
            return
        self._v.err(path, message)

    def warn(self, message: str, key: Optional[str] = None) -> None:
        """A warning (``dvpipe validate`` prints it; the deployment still loads)."""
        self._v.warnings.append(f"{self.key(key)}: {message}" if key else message)

    def resolve(self, value: str, key: str = "uri", *, kind: str = "file", must_exist: bool = True) -> str:
        """``value`` made absolute (relative to the YAML file); with ``must_exist``, a problem at ``key``
        unless it is an existing ``kind`` (``file`` or ``dir``)."""
        return self._v.path(value, self.key(key), kind=kind, must_exist=must_exist)

    def require_file(self, what: str) -> None:
        """The source reads one file: ``uri`` is required (a problem naming ``what`` otherwise) and is made
        absolute, checked to exist."""
        if self.uri is None:
            self.err("uri", f"required: {what}")
        else:
            self.uri = self.resolve(self.uri)

    @property
    def ok(self) -> bool:
        """No problem reported since this source's keys began to be read (its uri and options, then
        :meth:`Source.validate`): follow-on checks can rely on the values checked so far."""
        return len(self._v.errors) == self._mark


@dataclass
class DeploymentContext:
    """What :meth:`Source.validate_cameras` sees of a valid deployment.

    Attributes:
        rig: the :class:`~dvpipe.Rig` (encodings as the deployment sets them).
        rig_key: the key path problems of the rig are reported at (``rig``, ``rig (/abs/rig.yaml)``).
        sync: the deployment's :class:`~dvpipe.deploy.config.SyncConfig`.
    """

    rig: Rig
    rig_key: str
    sync: SyncConfig
    _v: _V = field(repr=False, default=None)  # type: ignore[assignment]

    def err(self, key: str, message: str) -> None:
        """Report a problem at the key path ``key`` (a full path: ``rig``, ``sync.tolerance_ms``)."""
        self._v.err(key, message)

    def warn(self, message: str) -> None:
        self._v.warnings.append(message)


def parse_options(specs: tuple[OptionSpec, ...], m: Mapping[str, Any], path: str, V: _V,
                  camera: str) -> dict[str, Any]:
    """``{name: value}`` for every spec: the YAML's value checked, or the default (also after a problem,
    which is reported at its key path). Unknown keys are the caller's check (:meth:`_V.mapping`)."""
    out: dict[str, Any] = {}
    for s in specs:
        p = _join(path, s.name)
        v = m.get(s.name, _MISSING)
        if v is _MISSING:
            if s.kind == "mapping":
                out[s.name] = MappingProxyType(parse_options(s.nested, {}, p, V, camera))
            elif s.required:
                V.err(p, "required")
                out[s.name] = None
            else:
                out[s.name] = s.default
            continue
        out[s.name] = _check(s, v, p, V, camera)
    return out


def _check(s: OptionSpec, v: Any, p: str, V: _V, camera: str) -> Any:
    fallback = None if s.required or s.kind == "mapping" else s.default
    if v is None and s.kind == "mapping":
        v = {}
    if v is None:
        if s.optional:
            return None
        V.err(p, f"expected {s.value_text()}, got null")
        return fallback
    if s.kind == "bool":
        if not isinstance(v, bool):
            V.err(p, f"expected true or false, got {_show(v)}")
            return fallback
        return v
    if s.kind in ("int", "float"):
        problem = _number_problem(v, integer=s.kind == "int", minimum=s.minimum, exclusive_min=s.exclusive_min,
                                  maximum=s.maximum)
        if problem is not None:
            V.err(p, s.message.format(got=_show(v)) if s.message else problem)
            return fallback
        return int(v) if s.kind == "int" else float(v)
    if s.kind == "str":
        if not isinstance(v, str) or not v:
            V.err(p, f"expected a non-empty string, got {_show(v)}")
            return fallback
        if s.camera:
            v = v.replace("{camera}", camera)
        if s.path:
            v = V.path(v, p, kind=s.path)
        return v
    if s.kind == "choice":
        if isinstance(v, (bool, list, dict)) or v not in s.choices:
            V.err(p, f"{_show(v)} is not one of {', '.join(map(str, s.choices))}")
            return fallback
        return v
    if s.kind == "pixels":
        pair = _pair(v, p, V, V.max_pixels)
        return fallback if pair is None else pair
    # mapping
    sub = V.mapping(v, p, tuple(n.name for n in s.nested))
    return MappingProxyType(parse_options(s.nested, sub or {}, p, V, camera))


# ---------------------------------------------------------------------------------- reference
def markdown_reference() -> str:
    """The registered source types and their keys as two Markdown tables (docs/deployments.md holds
    this text between its ``source-table`` markers; a test keeps the two equal)."""
    rows = ["| type | uri | live | what |", "|---|---|---|---|"]
    for name, cls in SOURCES.items():
        live = cls.live_help or ("yes" if cls.live else "no")
        rows.append(f"| `{name}` | {cls.uri_help or 'none'} | {live} | {_summary(cls)} |")
    rows += ["", "| type | key | value | default | meaning |", "|---|---|---|---|---|"]
    for name, cls in SOURCES.items():
        for s in option_specs(cls):
            rows.append(f"| `{name}` | `{s.name}` | {_md(s.value_text())} | {_md(s.default_text())} | {_md(s.doc)} |")
            for n in s.nested:
                rows.append(f"| `{name}` | `{s.name}.{n.name}` | {_md(n.value_text())} | {_md(n.default_text())} "
                            f"| {_md(n.doc)} |")
    return "\n".join(rows) + "\n"


def _summary(cls: type) -> str:
    doc = (cls.__doc__ or "").strip()
    return _md(" ".join(doc.split("\n\n")[0].split()))


def _md(text: str) -> str:
    return text.replace("|", "\\|")
