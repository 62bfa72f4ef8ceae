"""Image sequences: a folder (nuScenes-style, one folder per camera) or a glob, with capture times
from the file names, a sidecar file, or a frame rate.

* ``timestamps: filename`` (default): the last run of digits in the file name is the capture time
  (``1700000000008081000.jpg``, ``n015-...__CAM_FRONT__1532402927612460.jpg``); ``unit: auto``
  guesses ns / us / ms / s from the number of digits (19 / 16 / 13 / 10, as epoch times have now).
  A name that ends in a decimal number (``1700000001.100000.jpg``, as ROS bag extractors write
  seconds) is that number, fraction included, converted exactly.
* ``timestamps: sidecar``: a YAML or JSON mapping ``file name -> time``, a CSV with rows
  ``file name, time`` (header optional), or a ``.txt`` with one time per line (KITTI raw
  ``timestamps.txt``: ``2011-09-26 13:02:25.964389445``, UTC); numeric times in ``unit`` (auto as
  above). Files named by frame numbers only (KITTI's ``0000000000.png``) take the ``.txt`` line of
  their number (line i: frame i, or i + 1 for numbers 1..n, ffmpeg's ``%d.jpg``), so a missing file
  shifts nothing; other names take the lines in natural name order and need exactly one per file.
  A time is a number (its decimal digits converted exactly: ``1317042145.964389445`` s is that many
  ns, not a binary float's neighbour) or a date-time (UTC unless it names a zone; every fraction
  digit up to the ns kept), in any of the forms. The loader reads the sidecar: a value that is no
  time, a missing file or line, is one problem line at the source's ``sidecar`` key.
* ``timestamps: fps``: frame k (in natural name order) is captured at ``start_ns + k / fps``.
* ``timestamps: rig`` (set by the deployment loader, not written by users): one image named by a
  single-sample rig file's ``image:``, captured at its ``capture_time_ns`` (option ``capture_epoch_ns``).

``pattern`` is a file-name glob inside the folder, or among the files of a glob ``uri``; the loader
replaces ``{camera}`` in it by the camera's name (``pattern: "*__{camera}__*.jpg"`` for nuScenes' flat
``samples`` folders) and refuses a pattern that matches no file. A ``uri`` that is an existing folder
is one, whatever its name (``run[1]``); in a glob, the leading folders that exist by their very
names are taken literally (:func:`literal_folders`). Hidden files (``._x.jpg``) are never frames.

Files are listed in natural name order (digit runs compared as numbers: ``2.jpg`` before ``10.jpg``);
frames are delivered in capture time order. Files are read lazily, one per ``read()``. A file larger than
``decode.max_bytes`` (default ``8 x decode.max_pixels + 16 MiB``; per source ``max_file_bytes``) is
not read: it is a ``too_large`` drop. A file reached twice (a symbolic link loop under a glob, a
link to a file of the same folder) is read once.
"""
from __future__ import annotations

import csv
import fnmatch
import glob
import json
import os
import re
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_EVEN, Context, Decimal
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence

import yaml

from ...codecs import MAX_FRAME_FILE_BYTES, read_regular_file
from ...errors import ConfigError
from ...latency import now_ns
from ...types import refuse_duplicate_keys
from ...types import short_repr as _show
from . import _options
from ._probe import check_image_header, sniff_file
from .base import Item, SkippedFrame, Source, SourceError
from .registry import SourceContext, option, register_source

__all__ = ["ImageSequence", "ImageOptions", "scan_images", "FileTooLarge"]

_EXTS = (".jpg", ".jpeg", ".png")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


_SCALE = {"ns": 0, "us": 3, "ms": 6, "s": 9}  # powers of ten to ns
_EXACT = Context(prec=100)  # wider than any number _to_ns takes (64 characters): exact
_NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_DATETIME_RE = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})(?:[Tt]|[ \t]+)([0-9]{1,2}):([0-9]{2}):([0-9]{2})"
                          r"(?:\.([0-9]*))?[ \t]*(?:([Zz])|([+-])([0-9]{1,2})(?::?([0-9]{2}))?)?")
#: a file name ending in a decimal number (``1700000001.100000``): read as that number, not its fraction
_DECIMAL_NAME_RE = re.compile(r"(?:^|[^0-9.])([0-9]+\.[0-9]+)$")
_NS_LIMIT = Decimal(1 << 63)  # a capture time (epoch ns) fits an int64


def _datetime_ns(text: str) -> int:
    """``2011-09-26 13:02:25.964389445`` (KITTI raw timestamps.txt; UTC unless a zone ``Z`` / ``+02:00``
    follows) -> epoch ns, every digit of the fraction up to the ns kept (further ones cut).

    Raises:
        ConfigError: not such a date-time (a ValueError).
    """
    import datetime as dt

    m = _DATETIME_RE.fullmatch(text.strip())
    if m is None:
        raise ConfigError(f"expected a date-time YYYY-MM-DD HH:MM:SS[.fraction] (UTC), got {_show(text)}")
    y, mo, d, h, mi, sec, frac, _z, sign, zh, zm = m.groups()
    try:
        t = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), tzinfo=dt.timezone.utc)
    except ValueError as e:
        raise ConfigError(f"{_show(text)} is not a date-time: {e}") from None
    zone_s = (int(zh) * 3600 + int(zm or 0) * 60) * (1 if sign == "+" else -1) if sign else 0
    return (int(t.timestamp()) - zone_s) * 1_000_000_000 + int(((frac or "") + "000000000")[:9])


def _to_ns(value: Any, unit: str) -> int:
    """A capture time in epoch ns from a number in ``unit`` (``auto``: ns / us / ms / s by the digits of its
    integer part, 19 / 16 / 13 / 10 as epoch times have now) or its decimal text (``"1317042145.964389445"``:
    converted exactly, as written, never through a binary float; rounded to the ns), a date-time's text
    (:func:`_datetime_ns`) or a ``datetime`` (UTC when it names no zone). A float (a number some loader
    read) is taken as its shortest decimal text.

    Raises:
        ConfigError: not a time (one line: what was expected, the value; a ValueError).
    """
    import datetime as dt

    if isinstance(value, dt.datetime):
        t = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        delta = t - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"expected a number or a date-time, got {_show(value)}")
    if isinstance(value, int):
        d = Decimal(value)
    else:
        text = repr(value) if isinstance(value, float) else value.strip()
        if isinstance(value, str) and "-" in text[1:10] and ":" in text:
            return _datetime_ns(text)
        if len(text) > 64 or not _NUMBER_RE.fullmatch(text):
            raise ConfigError(f"expected a number (in {'ns, us, ms or s' if unit == 'auto' else unit}) or a date-time, "
                             f"got {_show(value)}")
        d = Decimal(text)
    if unit == "auto":
        digits = d.adjusted() + 1 if d else 1
        unit = "ns" if digits >= 18 else "us" if digits >= 15 else "ms" if digits >= 12 else "s"
    ns = d.scaleb(_SCALE[unit], context=_EXACT).to_integral_value(rounding=ROUND_HALF_EVEN, context=_EXACT)
    if not -_NS_LIMIT < ns < _NS_LIMIT:
        raise ConfigError(f"{_show(value)} ({unit}) is out of range: a capture time in ns fits 64 bits")
    return int(ns)


class _TextFloatLoader(yaml.SafeLoader):
    """YAML's safe loader, but a float or a date-time stays its text: :func:`_to_ns` converts it exactly
    (PyYAML's float is binary, its date-time keeps microseconds); a file named twice is refused."""

    def construct_mapping(self, node, deep=False):  # noqa: D401 - PyYAML hook
        refuse_duplicate_keys(self, node)
        return super().construct_mapping(node, deep)


def _as_text(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    return str(loader.construct_scalar(node)).replace("_", "")


_TextFloatLoader.add_constructor("tag:yaml.org,2002:float", _as_text)
_TextFloatLoader.add_constructor("tag:yaml.org,2002:timestamp", _as_text)


def _read_sidecar(path: str) -> list[str] | dict[str, Any]:
    """A mapping file name -> time, or (``.txt``) a list of times, one per line (line i: frame i), as
    written (text, or a YAML / JSON integer): :func:`_sidecar_ns` converts each."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"cannot read the sidecar {path}: {getattr(e, 'strerror', None) or e}") from None
    if path.lower().endswith(".txt"):
        return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    if path.lower().endswith((".yaml", ".yml", ".json")):
        def unique_pairs(pairs: list) -> dict:  # json keeps the last of two equal keys: one time would be lost
            out: dict = {}
            for key, value in pairs:
                if key in out:
                    raise SourceError(f"sidecar {path}: {_show(key)} is given two times (one would be lost)")
                out[key] = value
            return out

        try:
            data = (json.loads(text, parse_float=str, object_pairs_hook=unique_pairs) if path.lower().endswith(".json")
                    else yaml.load(text, Loader=_TextFloatLoader))  # noqa: S506 - a safe loader
        except (ValueError, yaml.YAMLError, RecursionError) as e:  # RecursionError: nesting deeper than Python's
            raise SourceError(f"sidecar {path}: not valid {'JSON' if path.lower().endswith('.json') else 'YAML'}: "
                              + (" ".join(str(e).split())[:200] if not isinstance(e, RecursionError)
                                 else "nested too deeply")) from None
        if isinstance(data, dict):
            return {str(k): v for k, v in data.items()}
        raise SourceError(f"sidecar {path}: expected a mapping file name -> time, got {type(data).__name__}")
    try:
        rows = [r for r in csv.reader(text.splitlines()) if r and not r[0].startswith("#")]
    except csv.Error as e:  # a field over the csv module's limit, a NUL byte
        raise SourceError(f"sidecar {path}: not valid CSV: {e}") from None
    out = {}
    for i, r in enumerate(rows):
        if len(r) < 2:
            raise SourceError(f"sidecar {path}: expected rows 'file name, time', got {_show(r)}")
        name, t = r[0].strip(), r[1].strip()
        if i == 0 and not _is_time(t):
            continue  # a header row
        if name in out:
            raise SourceError(f"sidecar {path}: {_show(name)} is given two times (row {i + 1}: one would be lost)")
        out[name] = t
    return out


def _is_time(value: Any) -> bool:
    try:
        _to_ns(value, "auto")
    except ValueError:
        return False
    return True


def _sidecar_ns(value: Any, unit: str, sidecar: str, file: str) -> int:
    """One sidecar time in epoch ns; a :class:`SourceError` naming the sidecar, the file and the value."""
    try:
        return _to_ns(value, unit)
    except ValueError as e:
        raise SourceError(f"sidecar {sidecar}: the time of {os.path.basename(file)}: {e}") from None


def name_order(path: str) -> tuple:
    """Sort key of a file path in natural order: digit runs compare as numbers (``2.jpg`` before
    ``10.jpg``, as ffmpeg's ``%d.jpg`` numbers frames), ties (``01`` / ``1``) by the text."""
    parts = re.split(r"([0-9]+)", path)
    return tuple(int(p) if k % 2 else p for k, p in enumerate(parts)), path


def literal_folders(uri: str) -> str:
    """The glob ``uri`` with its longest leading path that is an existing folder by that very name
    escaped (:func:`glob.escape`): ``/data/run[1]/*.jpg`` reads the folder ``run[1]`` (not ``run1``),
    and a deployment in ``project[v2]/`` globs under it."""
    parts = uri.split(os.sep)
    for k in range(len(parts) - 1, 0, -1):
        head = os.sep.join(parts[:k])
        if head and os.path.isdir(head):
            return os.path.join(glob.escape(head), *parts[k:])
    return uri


def scan_images(uri: str, pattern: Optional[str] = None) -> list[str]:
    """Image files of a folder (optionally matching ``pattern``; a name starting with ``.``, hidden,
    is none, as with a glob) or a glob, in natural name order (:func:`name_order`); a file reached by
    several names (symbolic links, a link loop under a glob) once, by its first name."""
    if os.path.isdir(uri):  # a folder, even one named like a glob (run[1])
        if pattern:
            files = glob.glob(os.path.join(glob.escape(uri), pattern))
        else:
            # not hidden files (macOS' AppleDouble ._x.jpg), as a glob or a pattern skips them
            files = [os.path.join(uri, f) for f in os.listdir(uri)
                     if f.lower().endswith(_EXTS) and not f.startswith(".")]
    else:
        files = glob.glob(literal_folders(uri))
        if pattern:  # the file-name pattern narrows the glob's files (one camera's among several)
            files = [f for f in files if fnmatch.fnmatch(os.path.basename(f), pattern)]
    seen: set[str] = set()
    out = []
    for f in sorted((f for f in files if os.path.isfile(f)), key=name_order):
        real = os.path.realpath(f)
        if real not in seen:
            seen.add(real)
            out.append(f)
    return out


def probe_images(uri: str, pattern: Optional[str], ctx: SourceContext, max_bytes: Optional[int] = None) -> None:
    """The folder or glob has images; none is larger than ``max_bytes`` (each file's size, not its
    content); the first one (by name) is of the declared encoding, at the camera's size, of a
    precision dvpipe decodes (a 12-bit JPEG is refused as such), and a greyscale first image on the
    camera is a warning."""
    try:
        files = scan_images(uri, pattern)
    except (OSError, ValueError) as e:
        ctx.err("uri", f"cannot list {uri}: {getattr(e, 'strerror', None) or e}")
        return
    if not files:
        ctx.err("uri", f"no images in {uri}" + (f" matching {pattern}" if pattern else ""))
        return
    cap = max_bytes or ctx.max_bytes
    if cap:
        big = []
        for f in files:
            try:
                size = os.stat(f).st_size
            except OSError:
                continue
            if size > cap:
                big.append((f, size))
        if big:
            more = f" (and {len(big) - 1} more)" if len(big) > 1 else ""
            ctx.err("uri", f"{big[0][0]} is {big[0][1]} bytes{more}, more than the {cap} bytes an image file may have "
                           "(decode.max_bytes, default 8 x decode.max_pixels + 16 MiB); the run would not read it "
                           "(a too_large drop): remove it, or raise decode.max_bytes")
    if sniff_file(files[0], ctx):
        check_image_header(files[0], ctx, cap)


class FileTooLarge(SkippedFrame):
    """An image file larger than the cap (``decode.max_bytes``): a ``too_large`` drop."""

    category = "too_large"


class FileUnreadable(SkippedFrame):
    """An image file that cannot be read (permissions, removed since the source opened, an I/O error):
    an ``unreadable`` drop."""

    category = "unreadable"


@dataclass
class ImageOptions:
    """The keys of ``type: images`` (see the module docstring)."""

    pattern: Optional[str] = option(None, "file-name glob inside the folder ({camera}: the camera's name)",
                                    camera=True)
    timestamps: Optional[Literal["filename", "sidecar", "fps"]] = option(
        None, "where capture times come from (default: sidecar with a sidecar, fps with an fps, else filename)")
    unit: Literal["auto", "ns", "us", "ms", "s"] = option("auto", "unit of numeric times (auto: by digit count)")
    sidecar: Optional[str] = option(None, "YAML/JSON/CSV file: image name -> time, or a .txt of times",
                                    camera=True, path="file")
    fps: Optional[float] = _options.fps(None, "frames per second of timestamps: fps (default 10)")
    start_ns: Optional[int] = _options.start_ns("capture time of the first frame with timestamps: fps "
                                                "(ns since the Unix epoch; default 0)")
    max_file_bytes: Optional[int] = option(None, "largest image file read, in bytes (default: decode.max_bytes); "
                                                 "a larger one is a too_large drop", minimum=1, maximum=1 << 40)


class StampedFiles(Source):
    """A source that delivers a list of ``(capture time in epoch ns, path)`` files, one frame each, read
    whole (an image sequence, an info file's images). Subclasses fill ``self._files`` in ``open``.

    A file larger than the ``max_file_bytes`` option (default: the cap ``decode.max_pixels``'s default
    implies) is not read: :class:`FileTooLarge` (the runner's ``too_large`` drop)."""

    _files: Sequence[tuple[int, str]] = ()
    _next = 0
    #: appended to a read error (what the user should check)
    read_hint = ""

    def _read(self) -> Optional[Item]:
        if self._next >= len(self._files):
            return None
        capture_epoch_ns, path = self._files[self._next]
        self._next += 1
        t0 = now_ns()
        cap = self.options.get("max_file_bytes") or MAX_FRAME_FILE_BYTES
        try:
            size, data = read_regular_file(path, cap)  # a FIFO or device node: refused, not waited on
        except OSError as e:
            raise FileUnreadable(f"cannot read {path}: {e.strerror or e}{self.read_hint}") from None
        if data is None:
            raise FileTooLarge(too_large_reason(path, size, cap))
        return self._item(data, capture_epoch_ns, read_span_ns=(t0, now_ns()))

    def stamped_files(self) -> list[tuple[int, str]]:
        """``(capture time in epoch ns, path)`` of every frame, in delivery order (after ``open``)."""
        return list(self._files)


def too_large_reason(path: str, size: int, cap: int) -> str:
    """One line: the file ``path`` of ``size`` bytes is above the cap (bytes) and was not read."""
    return (f"{path} is {size} bytes, more than the {cap} bytes an image file may have (decode.max_bytes, "
            "default 8 x decode.max_pixels + 16 MiB); not read")


def stamp_files(files: Sequence[str], o: Mapping[str, Any]) -> list[tuple[int, str]]:
    """``(capture time in epoch ns, path)`` of each of ``files`` (in name order) by the options ``o`` of
    an ``images`` source (``timestamps``, ``unit``, ``sidecar``, ``fps``, ``start_ns``, ``capture_epoch_ns``),
    in capture order.

    Raises:
        SourceError: a time cannot be read (one line: the file, the sidecar, the value).
    """
    mode, unit = o.get("timestamps", "filename"), o.get("unit", "auto")
    stamped: list[tuple[int, str]] = []
    if mode == "filename":
        for f in files:
            stem = Path(f).stem
            decimal = _DECIMAL_NAME_RE.search(stem)  # 1700000001.100000.jpg (ROS exports): seconds and a fraction
            digits = [decimal.group(1)] if decimal else re.findall(r"\d+", stem)
            if not digits:
                raise SourceError(f"{f}: no digits in the file name to read a capture time from "
                                  "(use timestamps: sidecar or fps)")
            try:
                stamped.append((_to_ns(digits[-1], unit), f))
            except ValueError as e:
                raise SourceError(f"{f}: the capture time in the file name: {e}") from None
    elif mode == "sidecar":
        side = o["sidecar"]
        table = _read_sidecar(side)
        if isinstance(table, list):  # one time per line
            stamped = [(_sidecar_ns(table[line], unit, side, f), f) for line, f in _txt_lines(files, len(table), side)]
        else:
            for f in files:
                t = table.get(Path(f).name, table.get(Path(f).stem))
                if t is None:
                    raise SourceError(f"{f}: not listed in the sidecar {side}")
                stamped.append((_sidecar_ns(t, unit, side, f), f))
    elif mode == "rig":
        stamped = [(int(o.get("capture_epoch_ns") or 0), f) for f in files[:1]]
    else:
        start = o.get("start_ns") or 0
        period = 1e9 / o.get("fps", 10.0)
        stamped = [(start + int(round(k * period)), f) for k, f in enumerate(files)]
    stamped.sort(key=lambda tf: (tf[0], name_order(tf[1])))
    return stamped


def _txt_lines(files: Sequence[str], n: int, side: str) -> list[tuple[int, str]]:
    """``(line, file)``: which line of a ``.txt`` sidecar of ``n`` times is each file's.

    File names that are all frame numbers (KITTI raw ``0000000000.png``: its devkit's timestamps.txt
    has line i for frame i) are matched by number, so a missing file shifts nothing: line i is frame
    i, or frame i + 1 when the numbers start at 1 and reach ``n`` (ffmpeg's ``%d.jpg``). Other names
    are matched in name order, one line each: the counts must be equal.

    Raises:
        SourceError: a frame number past the last line, or (other names) counts that differ.
    """
    stems = [Path(f).stem for f in files]
    if files and all(s.isascii() and s.isdigit() for s in stems):
        numbers = [int(s) for s in stems]
        first = 1 if min(numbers) >= 1 and max(numbers) == n else 0
        for k, f in zip(numbers, files):
            if k - first >= n:
                raise SourceError(f"sidecar {side} has {n} times (line i: frame {'i + 1' if first else 'i'}), "
                                  f"{os.path.basename(f)} is frame {k}: a file of another sequence, or lines missing")
        return [(k - first, f) for k, f in zip(numbers, files)]
    if n != len(files):
        raise SourceError(f"sidecar {side} lists {n} times for {len(files)} images (one line per image, in name "
                          "order; a file missing would shift the rest): they must be as many")
    return list(enumerate(files))


@register_source("images")
class ImageSequence(StampedFiles):
    """Image sequence (JPEG/PNG): capture times from the file names, a sidecar file or ``start_ns + k / fps``."""

    Options = ImageOptions
    uri_help = "a folder of images or a glob (required)"

    @classmethod
    def validate(cls, options: ImageOptions, ctx: SourceContext) -> ImageOptions:
        uri = ctx.uri
        if uri is None:
            ctx.err("uri", "required: a folder of images or a glob pattern")
        elif os.path.isdir(resolved := ctx.resolve(uri, must_exist=False)):  # a folder, even run[1]
            uri = resolved
        elif any(ch in uri for ch in "*?["):
            uri = resolved
            if not glob.glob(literal_folders(uri)):
                ctx.err("uri", f"no files match {uri}")
        else:
            uri = ctx.resolve(uri, kind="dir")
        ctx.uri = uri
        raw, pattern = ctx.given.get("pattern"), options.pattern
        if pattern is not None and ("/" in pattern or os.sep in pattern):
            ctx.err("pattern", f"a file-name pattern (e.g. '*__{{camera}}__*.jpg'), got {_show(raw)}; "
                               "put folders in uri")
        elif pattern and uri is not None and ctx.ok and not scan_images(uri, pattern):
            ctx.err("pattern", f"{_show(pattern)} matches no file {'in' if os.path.isdir(uri) else 'of'} {uri}"
                               + (f" (camera {ctx.camera})" if "{camera}" in str(raw) else ""))
        if ctx.probe and ctx.encoding in ("jpeg", "png") and uri is not None and ctx.ok:
            probe_images(uri, pattern, ctx, options.max_file_bytes or ctx.max_bytes)
        timestamps = options.timestamps or ("sidecar" if "sidecar" in ctx.given else
                                            "fps" if "fps" in ctx.given else "filename")
        if timestamps == "sidecar" and options.sidecar is None:
            ctx.err("sidecar", "required when timestamps: sidecar (a YAML/JSON/CSV file: image name -> time, "
                               "or a .txt)")
        elif timestamps in ("sidecar", "filename") and uri is not None and ctx.ok:  # the run would fail at open
            try:
                stamp_files(scan_images(uri, pattern), {"timestamps": timestamps, "unit": options.unit,
                                                        "sidecar": options.sidecar})
            except SourceError as e:
                ctx.err("sidecar" if timestamps == "sidecar" else "uri", e.reason)
            except (OSError, ValueError):
                pass  # the folder cannot be listed: the run says so (probe_images did above, with probe)
        fps = 10.0 if options.fps is None and timestamps == "fps" else options.fps
        max_bytes = options.max_file_bytes or ctx.max_bytes or None
        if ctx.encoding not in ("jpeg", "png"):
            ctx.err(None, f"an image sequence needs camera encoding jpeg or png; camera {ctx.camera} declares "
                          f"{ctx.encoding}")
        return replace(options, timestamps=timestamps, fps=fps, max_file_bytes=max_bytes)

    @classmethod
    def validate_cameras(cls, cameras, ctx) -> None:
        """Warn when one image file belongs to several cameras' sequences (``pattern: '*CAM_FRONT*'``
        also matches ``CAM_FRONT_LEFT.jpg``): each camera would read the other's frames."""
        owners: dict[str, list[str]] = {}
        for c in cameras:
            if not c.source.uri:
                continue
            try:
                files = scan_images(c.source.uri, c.source.options.get("pattern"))
            except (OSError, ValueError):
                continue
            for f in files:
                names = owners.setdefault(os.path.realpath(f), [])
                if c.name not in names:
                    names.append(c.name)
        shared = {f: names for f, names in owners.items() if len(names) > 1}
        if shared:
            f, names = next(iter(shared.items()))
            more = f" (and {len(shared) - 1} more file{'s' if len(shared) > 2 else ''})" if len(shared) > 1 else ""
            ctx.warn(f"{f} is in the image sequences of {', '.join(names)}{more}: each of those cameras would read "
                     "it; make the patterns distinct (e.g. pattern: '*__{camera}__*.jpg')")

    def _open(self) -> None:
        o = self.options
        files = scan_images(self.cfg.uri, o.get("pattern"))
        if not files:
            matching = f" matching {o['pattern']}" if o.get("pattern") else ""
            raise SourceError(f"no images in {self.cfg.uri}{matching}")
        self._files = stamp_files(files, o)
        self._next = 0

    @property
    def period_ns(self) -> Optional[int]:
        """Median spacing of capture times (None with fewer than two frames)."""
        stamps = [t for t, _ in self._files]
        if len(stamps) < 2:
            return None
        diffs = sorted(b - a for a, b in zip(stamps, stamps[1:]))
        return diffs[len(diffs) // 2]
