"""One camera's ``source:`` mapping -> a :class:`~dvpipe.deploy.config.SourceConfig`.

The keys every source takes (``type``, ``uri``, ``offset_ms``, ``faults``) are checked here; the
type's own keys by the registry from its ``Options`` dataclass
(:func:`dvpipe.deploy.sources.registry.parse_options`), then the type's ``validate`` classmethod.
"""
from __future__ import annotations

from dataclasses import fields
from types import MappingProxyType
from typing import Any, Mapping, Optional, cast

from ..types import short_repr as _show
from ._schema import Faults, SourceConfig
from ._validate import (_DAY_MS, _HOUR_S, _MAX_FRAMES, _V, _int_list, _join, _kind, _limit, _number_problem, _pair,
                        _seq_map)

__all__ = ["parse_source", "parse_faults"]


def parse_source(v: Any, path: str, V: _V, camera_name: str, encoding: str,
                 size: tuple[int, int] = (1, 1)) -> Optional[SourceConfig]:
    """One camera's source (``size``: the camera's ``(height, width)`` in pixels); None after a
    problem that leaves nothing to build (every problem is reported on ``V``)."""
    from .sources.registry import COMMON_KEYS, SOURCES, SourceContext, option_specs, parse_options

    where = path  # errors of a shared default repeat per camera; load_deployment keeps one of each
    known = ", ".join(SOURCES)
    if not isinstance(v, Mapping):
        V.err(where, f"expected a mapping with a 'type' ({known}), got {_kind(v)}")
        return None
    typ = v.get("type")
    cls = SOURCES.get(typ) if isinstance(typ, str) else None
    if cls is None:
        V.err(_join(where, "type"), "required" if typ is None else f"{_show(typ)} is not one of {known}")
        return None
    assert isinstance(typ, str)  # a registered type was found
    specs = option_specs(cls)
    m = V.mapping(v, where, COMMON_KEYS + tuple(s.name for s in specs))
    if m is None:
        return None
    mark = len(V.errors)  # this source's own problems from here (SourceContext.ok, one problem per key)
    uri = m.get("uri")
    if uri is not None and not isinstance(uri, str):
        V.err(_join(where, "uri"), f"expected a string, got {_show(uri)}")
        uri = None
    if isinstance(uri, str):
        uri = uri.replace("{camera}", camera_name)
    values = parse_options(specs, m, where, V, camera_name)
    options = cls.Options(**values)  # type: ignore[attr-defined]
    ctx = SourceContext(camera=camera_name, encoding=encoding, size=cast("tuple[int, int]", tuple(size)), path=where,
                        uri=uri,
                        given=MappingProxyType({k: m[k] for k in m if k not in COMMON_KEYS}), probe=V.probe,
                        max_pixels=V.max_pixels, max_bytes=V.max_bytes, _v=V, _mark=mark)
    options = cls.validate(options, ctx)
    opts = {f.name: getattr(options, f.name) for f in fields(options)}
    offset_ms = V.number(m, "offset_ms", where, 0.0, minimum=-_DAY_MS, maximum=_DAY_MS)
    faults = parse_faults(m["faults"], _join(where, "faults"), V, V.max_pixels) if m.get("faults") is not None else None
    return SourceConfig(typ, ctx.uri, MappingProxyType(opts), offset_ms, faults if faults else None)


def parse_faults(v: Any, path: str, V: _V, max_pixels: int) -> Optional[Faults]:
    """A source's ``faults:`` mapping (testing; see :class:`~dvpipe.deploy.config.Faults`)."""
    m = V.mapping(v, path, ("corrupt", "corrupt_every", "late_ms", "stall", "disconnect", "resize", "lose",
                            "fail_open"))
    if m is None:
        return None

    def bounded(maximum: float, unit: str):
        def check(val, p):
            if _number_problem(val, minimum=0, maximum=maximum) is not None:
                V.err(p, f"expected a non-negative number of {unit}, at most {_limit(maximum)}, got {_show(val)}")
                return None
            return float(val)
        return check

    fail_open = m.get("fail_open", 0)
    if fail_open is True:
        fail_open = -1
    if isinstance(fail_open, bool) or not isinstance(fail_open, int) or not -1 <= fail_open <= 1_000_000:
        V.err(_join(path, "fail_open"),
              f"expected a number of failed attempts (-1 or true: never opens), got {_show(fail_open)}")
        fail_open = 0
    return Faults(
        corrupt=_int_list(m["corrupt"], _join(path, "corrupt"), V) if "corrupt" in m else (),
        corrupt_every=V.number(m, "corrupt_every", path, 0, integer=True, minimum=0, maximum=_MAX_FRAMES),
        late_ms=_seq_map(m["late_ms"], _join(path, "late_ms"), V, bounded(_DAY_MS, "ms")) if "late_ms" in m else (),
        stall=_seq_map(m["stall"], _join(path, "stall"), V, bounded(_HOUR_S, "seconds")) if "stall" in m else (),
        disconnect=_int_list(m["disconnect"], _join(path, "disconnect"), V) if "disconnect" in m else (),
        resize=(_seq_map(m["resize"], _join(path, "resize"), V, lambda val, p: _pair(val, p, V, max_pixels))
                if "resize" in m else ()),
        lose=_int_list(m["lose"], _join(path, "lose"), V) if "lose" in m else (),
        fail_open=int(fail_open),
    )


