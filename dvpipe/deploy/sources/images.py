"""Image sequences: a folder (nuScenes-style, one folder per camera) or a glob, with capture times
from the file names, a sidecar file, or a frame rate.

* ``timestamps: filename`` (default): the last run of digits in the file name is the capture time
  (``1700000000008081000.jpg``, ``n015-...__CAM_FRONT__1532402927612460.jpg``); ``unit: auto``
  guesses ns / us / ms / s from the number of digits (19 / 16 / 13 / 10, as epoch times have now).
* ``timestamps: sidecar``: a YAML or JSON mapping ``file name -> time``, a CSV with rows
  ``file name, time`` (header optional), or a ``.txt`` with one time per line for the files in name
  order (KITTI raw ``timestamps.txt``: ``2011-09-26 13:02:25.964389445``, UTC); numeric times in
  ``unit`` (auto as above).
* ``timestamps: fps``: frame k is captured at ``start_ns + k / fps``.
* ``timestamps: rig`` (set by the deployment loader, not written by users): one image named by a
  single-sample rig file's ``image:``, captured at its ``capture_time_ns`` (option ``capture_epoch_ns``).

``pattern`` is a file-name glob inside the folder; the loader replaces ``{camera}`` in it by the
camera's name (``pattern: "*__{camera}__*.jpg"`` for nuScenes' flat ``samples`` folders) and refuses
a pattern that matches no file.

Frames are ordered by capture time; files are read lazily, one per ``read()``. A file larger than
``decode.max_bytes`` (default ``8 x decode.max_pixels + 16 MiB``; per source ``max_file_bytes``) is
not read: it is a ``too_large`` drop. A file reached twice (a symbolic link loop under a glob, a
link to a file of the same folder) is read once.
"""
from __future__ import annotations

import csv
import glob
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Optional, Sequence

from ...codecs import DEFAULT_MAX_PIXELS, max_file_bytes
from ...latency import now_ns
from ...types import short_repr as _show
from . import _options
from ._probe import check_image_header, sniff_file
from .base import Item, Source, SourceError
from .registry import SourceContext, option, register_source

__all__ = ["ImageSequence", "ImageOptions", "scan_images", "FileTooLarge"]

_EXTS = (".jpg", ".jpeg", ".png")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def _to_ns(value: str | int | float, unit: str) -> int:
    if unit == "auto":
        digits = len(str(int(float(value))))
        unit = "ns" if digits >= 18 else "us" if digits >= 15 else "ms" if digits >= 12 else "s"
    if isinstance(value, str):
        value = float(value) if any(c in value for c in ".eE") else int(value)
    return int(round(value * _UNIT_NS[unit])) if isinstance(value, float) else int(value) * _UNIT_NS[unit]


def _datetime_ns(text: str) -> int:
    """``2011-09-26 13:02:25.964389445`` (KITTI raw timestamps.txt, UTC) -> epoch ns."""
    import datetime as dt

    date, _, frac = text.strip().partition(".")
    t = dt.datetime.strptime(date.replace("T", " "), "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp()) * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


def _read_sidecar(path: str):
    """A mapping file name -> time, or (``.txt``) a list of times in file-name order."""
    text = Path(path).read_text(encoding="utf-8")
    if path.lower().endswith(".txt"):
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
        return [_datetime_ns(ln) if "-" in ln[:10] else ln for ln in lines]
    if path.lower().endswith((".yaml", ".yml", ".json")):
        import yaml

        data = json.loads(text) if path.lower().endswith(".json") else yaml.safe_load(text)
        if isinstance(data, dict):
            return {str(k): v for k, v in data.items()}
        raise SourceError(f"sidecar {path}: expected a mapping file name -> time")
    rows = [r for r in csv.reader(text.splitlines()) if r and not r[0].startswith("#")]
    out = {}
    for r in rows:
        if len(r) < 2:
            raise SourceError(f"sidecar {path}: expected rows 'file name, time', got {r!r}")
        name, t = r[0].strip(), r[1].strip()
        if not re.match(r"^-?[\d.eE+]+$", t):
            continue  # a header row
        out[name] = t
    return out


def scan_images(uri: str, pattern: Optional[str] = None) -> list[str]:
    """Image files of a folder (optionally matching ``pattern``) or a glob, sorted by name; a file
    reached by several names (symbolic links, a link loop under a glob) once, by its first name."""
    if os.path.isdir(uri):
        if pattern:
            files = glob.glob(os.path.join(uri, pattern))
        else:
            files = [os.path.join(uri, f) for f in os.listdir(uri) if f.lower().endswith(_EXTS)]
    else:
        files = glob.glob(uri)
    seen: set[str] = set()
    out = []
    for f in sorted(f for f in files if os.path.isfile(f)):
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


class FileTooLarge(SourceError):
    """An image file larger than the cap (``decode.max_bytes``): not read; the runner counts the frame
    as a ``too_large`` drop and reads on."""

    category = "too_large"


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
        cap = self.options.get("max_file_bytes") or max_file_bytes(DEFAULT_MAX_PIXELS)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > cap:
                    raise FileTooLarge(too_large_reason(path, size, cap))
                data = f.read(cap + 1)  # a file that grew since: still never more than the cap
        except OSError as e:
            raise SourceError(f"cannot read {path}: {e.strerror or e}{self.read_hint}") from None
        if len(data) > cap:
            raise FileTooLarge(too_large_reason(path, len(data), cap))
        return self._item(data, capture_epoch_ns, read_span_ns=(t0, now_ns()))

    def stamped_files(self) -> list[tuple[int, str]]:
        """``(capture time in epoch ns, path)`` of every frame, in delivery order (after ``open``)."""
        return list(self._files)


def too_large_reason(path: str, size: int, cap: int) -> str:
    """One line: the file ``path`` of ``size`` bytes is above the cap (bytes) and was not read."""
    return (f"{path} is {size} bytes, more than the {cap} bytes an image file may have (decode.max_bytes, "
            "default 8 x decode.max_pixels + 16 MiB); not read")


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
        elif any(ch in uri for ch in "*?["):
            uri = ctx.resolve(uri, must_exist=False)
            if not glob.glob(uri):
                ctx.err("uri", f"no files match {uri}")
        else:
            uri = ctx.resolve(uri, kind="dir")
        ctx.uri = uri
        raw, pattern = ctx.given.get("pattern"), options.pattern
        if pattern is not None and ("/" in pattern or os.sep in pattern):
            ctx.err("pattern", f"a file-name pattern (e.g. '*__{{camera}}__*.jpg'), got {_show(raw)}; "
                               "put folders in uri")
        elif pattern and uri is not None and ctx.ok and os.path.isdir(uri) and not scan_images(uri, pattern):
            ctx.err("pattern", f"{_show(pattern)} matches no file in {uri}"
                               + (f" (camera {ctx.camera})" if "{camera}" in str(raw) else ""))
        if ctx.probe and ctx.encoding in ("jpeg", "png") and uri is not None and ctx.ok:
            probe_images(uri, pattern, ctx, options.max_file_bytes or ctx.max_bytes)
        timestamps = options.timestamps or ("sidecar" if "sidecar" in ctx.given else
                                            "fps" if "fps" in ctx.given else "filename")
        if timestamps == "sidecar" and options.sidecar is None:
            ctx.err("sidecar", "required when timestamps: sidecar (a YAML/JSON/CSV file: image name -> time, "
                               "or a .txt)")
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
        mode, unit = o.get("timestamps", "filename"), o.get("unit", "auto")
        stamped: list[tuple[int, str]] = []
        if mode == "filename":
            for f in files:
                digits = re.findall(r"\d+", Path(f).stem)
                if not digits:
                    raise SourceError(f"{f}: no digits in the file name to read a capture time from "
                                      "(use timestamps: sidecar or fps)")
                stamped.append((_to_ns(digits[-1], unit), f))
        elif mode == "sidecar":
            table = _read_sidecar(o["sidecar"])
            if isinstance(table, list):  # one time per line, matched to the files in name order
                if len(table) < len(files):
                    raise SourceError(f"sidecar {o['sidecar']} lists {len(table)} times for {len(files)} images")
                stamped = [(t if isinstance(t, int) else _to_ns(t, unit), f) for t, f in zip(table, files)]
            else:
                for f in files:
                    t = table.get(Path(f).name, table.get(Path(f).stem))
                    if t is None:
                        raise SourceError(f"{f}: not listed in the sidecar {o['sidecar']}")
                    stamped.append((_to_ns(t, unit), f))
        elif mode == "rig":
            stamped = [(int(o.get("capture_epoch_ns") or 0), f) for f in files[:1]]
        else:
            start = o.get("start_ns") or 0
            period = 1e9 / o.get("fps", 10.0)
            stamped = [(start + int(round(k * period)), f) for k, f in enumerate(files)]
        stamped.sort()
        self._files = stamped
        self._next = 0

    @property
    def period_ns(self) -> Optional[int]:
        """Median spacing of capture times (None with fewer than two frames)."""
        stamps = [t for t, _ in self._files]
        if len(stamps) < 2:
            return None
        diffs = sorted(b - a for a, b in zip(stamps, stamps[1:]))
        return diffs[len(diffs) // 2]
