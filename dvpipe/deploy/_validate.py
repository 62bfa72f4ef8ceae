"""Validator primitives of the deployment YAML: :class:`_V` collects every problem with its key path.

Each helper checks one value and returns a default after reporting a problem, so that checking goes
on and :func:`dvpipe.deploy.load_deployment` reports **all** problems at once, each one line::

    cameras[2].source.uri: file not found: /data/cam2.mp4

The numeric limits here are the schema's (see :mod:`dvpipe.deploy.config`): far above any real
deployment, low enough that every conversion the runner makes (ms -> ns as int64, products, sleeps)
stays finite and exact. Source option dataclasses name them in their field bounds.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..codecs import DEFAULT_MAX_PIXELS, max_file_bytes
from ..errors import ConfigError
from ..types import short_repr as _show
from ..types import similar_key

__all__ = ["DeploymentError", "NUMBER_MAX", "DAY_MS", "HOUR_S", "YEAR_S", "MAX_FRAMES", "MAX_FPS", "MAX_START_NS"]


class DeploymentError(ConfigError):
    """A deployment failed validation. ``errors`` holds every ``(path, message)``."""

    def __init__(self, errors: Sequence[tuple[str, str]], where: str = "deployment"):
        self.errors = list(errors)
        problems = tuple(f"{p}: {m}" if p else m for p, m in self.errors)
        lines = "\n".join(f"  {line}" for line in problems)
        n = len(self.errors)
        super().__init__(f"{n} problem{'s' if n != 1 else ''} in {where}:\n{lines}", problems=problems)


_MISSING = object()
_MESSAGE_MAX = 600  #: longest problem message (characters)

# Upper bounds of numeric fields: far above any real deployment, low enough that every conversion
# the runner makes (ms -> ns as int64, products, sleeps) stays finite and exact.
_NUMBER_MAX = 1e9  #: any number without a tighter bound
_DAY_MS = 86_400_000.0  #: durations and ages in milliseconds: at most one day
_HOUR_S = 3600.0  #: timeouts and stalls in seconds: at most one hour
_YEAR_S = 31_622_400.0  #: run.duration_s: at most a (leap) year
_MAX_FRAMES = 10 ** 12  #: frame counts and frame numbers
_MAX_FPS = 10_000.0  #: frames per second
_MAX_START_NS = 2 ** 62  #: capture-time origins (ns since the Unix epoch; ~year 2116)
_MAX_PIXELS_LIMIT = 1 << 30  #: the largest decode.max_pixels one may set
_MAX_FILE_BYTES_LIMIT = 1 << 40  #: the largest decode.max_bytes one may set
_SYNTH_CYCLE_MAX_BYTES = 2 << 30  #: a synthetic source renders its whole cycle (BGR) before encoding

# public names of the limits (source option bounds use them)
NUMBER_MAX, DAY_MS, HOUR_S, YEAR_S = _NUMBER_MAX, _DAY_MS, _HOUR_S, _YEAR_S
MAX_FRAMES, MAX_FPS, MAX_START_NS = _MAX_FRAMES, _MAX_FPS, _MAX_START_NS


def _number_problem(v: Any, *, integer: bool = False, minimum: float | None = None, exclusive_min: bool = False,
                    maximum: float = _NUMBER_MAX) -> Optional[str]:
    """Why ``v`` is not an acceptable number (finite, of the right kind, in range), or None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        hint = ""
        if isinstance(v, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE]\d+", v.strip()):
            x = float(v)  # YAML 1.1 (PyYAML) takes 1e5 and 1.0e30 for text: a float needs a dot and a signed exponent
            mantissa, _, exponent = v.strip().lower().partition("e")
            write = (f"{int(x)}" if integer and x.is_integer()
                     else f"{mantissa if '.' in mantissa else mantissa + '.0'}e+{exponent}")
            hint = f" (YAML reads it as text: write {write})"
        return f"expected {'an integer' if integer else 'a number'}, got {_show(v)}{hint}"
    if isinstance(v, float) and not math.isfinite(v):
        return f"expected a finite number, got {_show(v)}"
    if minimum is not None and (v <= minimum if exclusive_min else v < minimum):
        return f"must be {'>' if exclusive_min else '>='} {_limit(minimum)}, got {_show(v)}"
    if v > maximum:
        return f"must be <= {_limit(maximum)}, got {_show(v)}"
    return None


def _limit(x: float) -> str:
    """A bound as people write it: ``86400000``, ``0.5``."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


class _V:
    """Collects every problem with its key path; helpers return a default on error so that checking goes on."""

    def __init__(self, base_dir: Path, *, probe: bool = False, max_pixels: int = DEFAULT_MAX_PIXELS):
        self.base_dir = base_dir
        self.probe = probe  # open file sources to check their codec (dvpipe validate)
        self.max_pixels = max_pixels
        self.max_bytes = max_file_bytes(max_pixels)  # decode.max_bytes: largest image file read
        self.errors: list[tuple[str, str]] = []
        self.warnings: list[str] = []

    def err(self, path: str, msg: str) -> None:
        """Record a problem: one line, at most :data:`_MESSAGE_MAX` characters (values can be huge)."""
        msg = " ".join(str(msg).split())
        self.errors.append((path, msg if len(msg) <= _MESSAGE_MAX else msg[:_MESSAGE_MAX - 3] + "..."))

    def mapping(self, value: Any, path: str, allowed: Sequence[str], required: Sequence[str] = ()) -> Optional[dict]:
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            self.err(path, f"expected a mapping, got {_kind(value)}")
            return None
        for k in value:
            if k not in allowed:
                close = [a for a in allowed if similar_key(str(k), a)]
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.err(_join(path, k), f"unknown key{hint}; allowed: {', '.join(allowed)}")
        for k in required:
            if k not in value:
                self.err(_join(path, k), "required")
        return dict(value)

    def number(self, m: Mapping, key: str, path: str, default: Any, *, integer: bool = False,
               minimum: float | None = None, exclusive_min: bool = False, allow_none: bool = False,
               maximum: float = _NUMBER_MAX) -> Any:
        """``m[key]`` as a finite int/float in ``[minimum, maximum]`` (or ``default`` after an error)."""
        v = m.get(key, _MISSING)
        if v is _MISSING or (v is None and allow_none):
            return default
        p = _join(path, key)
        problem = _number_problem(v, integer=integer, minimum=minimum, exclusive_min=exclusive_min, maximum=maximum)
        if problem is not None:
            self.err(p, problem)
            return default
        return int(v) if integer else float(v)

    def boolean(self, m: Mapping, key: str, path: str, default: bool) -> bool:
        v = m.get(key, _MISSING)
        if v is _MISSING:
            return default
        if not isinstance(v, bool):
            self.err(_join(path, key), f"expected true or false, got {_show(v)}")
            return default
        return v

    def choice(self, m: Mapping, key: str, path: str, choices: Sequence[str], default: Any) -> Any:
        v = m.get(key, _MISSING)
        if v is _MISSING:
            return default
        if v not in choices:
            self.err(_join(path, key), f"{_show(v)} is not one of {', '.join(map(str, choices))}")
            return default
        return v

    def string(self, m: Mapping, key: str, path: str, default: Any = None, required: bool = False) -> Any:
        v = m.get(key, _MISSING)
        if v is _MISSING or v is None:
            if required and v is _MISSING:
                return default  # "required" already reported by mapping()
            if required:
                self.err(_join(path, key), "must not be empty")
            return default
        if not isinstance(v, str) or not v:
            self.err(_join(path, key), f"expected a non-empty string, got {_show(v)}")
            return default
        return v

    def path(self, value: str, path: str, *, kind: str = "file", must_exist: bool = True) -> str:
        """``value`` made absolute (relative to :attr:`base_dir`); with ``must_exist``, an error unless
        it is an existing ``kind`` (``file`` or ``dir``)."""
        if "\0" in value:
            self.err(path, f"a path cannot contain a NUL character: {_show(value)}")
            return value
        p = Path(os.path.expanduser(value))
        if not p.is_absolute():
            p = self.base_dir / p
        p = Path(os.path.normpath(p))
        if must_exist:
            is_kind = os.path.isfile if kind == "file" else os.path.isdir  # False on any OSError
            if not is_kind(p):
                what = "file" if kind == "file" else "folder"
                self.err(path, f"{'not a ' + what if os.path.exists(p) else what + ' not found'}: {_show(str(p), 300)}")
        return str(p)


def _join(path: str, key: Any) -> str:
    key = key if isinstance(key, str) and len(key) <= 60 else _show(key)
    return f"{path}.{key}" if path else key


def _kind(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _pair(v: Any, path: str, V: _V, max_pixels: Optional[int] = None) -> Optional[tuple[int, int]]:
    """A YAML ``[width, height]`` in pixels (the file's order) as ``(height, width)``: the one place where a
    source's or fault's YAML size pair becomes a size tuple (stage arguments are the Python API's (H, W)). Each side in 1..CAMERA_MAX_SIDE and (given) at most ``max_pixels``."""
    from ..types import CAMERA_MAX_SIDE

    if (not isinstance(v, Sequence) or isinstance(v, str) or len(v) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= CAMERA_MAX_SIDE for x in v)):
        V.err(path, f"expected [width, height] of integers in 1..{CAMERA_MAX_SIDE} (pixels), got {_show(v)}")
        return None
    w, h = int(v[0]), int(v[1])
    if max_pixels is not None and w * h > max_pixels:
        V.err(path, f"{w}x{h} is {w * h} pixels per frame, more than decode.max_pixels ({max_pixels})")
        return None
    return h, w


def _int_list(v: Any, path: str, V: _V) -> tuple[int, ...]:
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, Sequence) or isinstance(v, str) or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _MAX_FRAMES for x in v):
        V.err(path, f"expected a list of frame numbers (non-negative integers), got {_show(v)}")
        return ()
    return tuple(sorted(set(int(x) for x in v)))


def _seq_map(v: Any, path: str, V: _V, value_check) -> tuple:
    """``{seq: value}`` -> ``((seq, value), ...)`` sorted by seq."""
    if not isinstance(v, Mapping):
        V.err(path, f"expected a mapping frame number -> value, got {_kind(v)}")
        return ()
    out = []
    for k, val in v.items():
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= _MAX_FRAMES:
            V.err(_join(path, k), f"keys are frame numbers (integers in 0..{_MAX_FRAMES})")
            continue
        checked = value_check(val, _join(path, k))
        if checked is not None:
            out.append((int(k), checked))
    return tuple(sorted(out))

