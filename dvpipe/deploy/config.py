"""Deployment YAML: schema, validation, and the frozen objects the runner uses.

A deployment names the rig, a source per camera, the preprocessing (a profile or a stage list),
backend preferences (global and per camera), the synchronisation policy, run limits, latency
budgets, outputs and an optional model hook. :func:`load_deployment` validates everything at load
and reports **all** problems at once, each with its key path::

    cameras[2].source.uri: file not found: /data/cam2.mp4
    sync.on_late: 'skip' is not one of mask, reuse, drop

Paths *read* by the deployment (rig file, source files, model path) are relative to the YAML
file; paths *written* (``outputs.dir``) are relative to the working directory.

Schema (every key optional unless marked)::

    name: str                          # default: the file name without .yaml
    description: str
    rig: PATH | {cameras: [...]}       # required; the rig YAML format (dvpipe.Rig)
    encoding: h264                     # overrides the rig's camera encodings (jpeg, png, h264, h265, raw)
    pipeline:                          # required
      profile: bevformer-tiny          # exactly one of profile / stages
      stages: [decode, {resize: {scale: 0.5}}, {normalise: {mean: [..], std: [..], to_rgb: true}},
               {pad: {size_divisor: 32}}]      # an op "module:Class" builds a user stage
      fidelity: reference | fast
      backends: auto | [cpu, ...]      # auto: the best available on this machine, cpu last
      threads: int
      fallback: next | error
    source: SOURCE                     # default source of every camera; "{camera}" in uri is replaced
    cameras:                           # per-camera settings, by name (each needs a source from here
      - name: CAM_FRONT                #   or from the default)
        source: SOURCE
        backends: auto | [...]
        encoding: h264                 # this camera's encoding, if not the rig's
    sync:
      tolerance_ms: 25                 # frames within +-tolerance of the set's time form a set
      on_late: mask | reuse | drop     # a late or missing camera: masked, its last frame reused
      deadline_ms: 100                 #   (flagged stale), or the whole set dropped
      max_reuse_age_ms: 500
      anchor: earliest | CAMERA        # what a set's time is: the earliest waiting frame, or one camera
    run:
      frames: N                        # stop after N frame sets
      duration_s: S
      loop: false                      # recorded sources start over at their end
      realtime: false                  # replay recorded sources at their capture rate (x speed)
      speed: 1.0
      queue_size: 2                    # frames waiting per camera
      latest_only: auto | true | false # live: drop the oldest waiting frame rather than block
      stall_timeout_ms: 1000           # no frame for this long: the camera is "stalled"
      overlap_model: true              # preprocess set k+1 while the model runs on set k
    latency:
      budget_ms: 100                   # end to end (capture -> output)
      steps_ms: {decode: 10}
      window: 100
      counters_only: false             # true: count/sum/max per step only (cheapest; no percentiles of steps)
      warmup_sets: 2                   # first frame sets left out of the statistics (counted separately)
    outputs:
      dir: out/{name}
      metrics: true                    # latency.json + summary.json
      trace: false | true | PATH       # Chrome/Perfetto trace
      plots: false | true | DIR
      dumps: false | {every: N, max: M}
      prometheus: PORT | {port: PORT, addr: 127.0.0.1}  # /metrics (dvpipe[prometheus]); addr 0.0.0.0 exposes it
    decode:
      on_corrupt: drop | flag          # a frame the decoder reports damaged: a `corrupt` drop, or kept and flagged
      max_pixels: 64000000             # largest decoded frame (width x height, pixels); a larger camera is an error
    model: module:callable | file.py:callable | {entry: ..., path: DIR, init: {...}}
         | {type: om, path: model.om, device: 0, backend: dvpp|dvpp-sim, target: {...}, aipp: PATH}  # docs/models.md
    target: {soc: Ascend310P3, cann: 7.0.0}   # DVPP steps are planned against it (default: detected)

SOURCE (``type`` required; see :mod:`dvpipe.deploy.sources` for each type)::

    {type: images, uri: DIR|GLOB, pattern: "*__{camera}__*.jpg", timestamps: filename|sidecar|fps,
     unit: auto|ns|us|ms|s, sidecar: FILE, fps: 10, start_ns: INT}
    {type: video, uri: FILE.mp4, start_ns: INT, lookahead: 16}
    {type: elementary, uri: FILE.h264, codec: h264|h265, fps: 30, start_ns: INT, lookahead: 32}
    {type: rtsp, uri: rtsp://HOST/PATH, transport: tcp|udp, open_timeout_s: 5, read_timeout_s: 2, lookahead: 0,
     reconnect: {initial_ms: 250, max_ms: 5000, factor: 2, attempts: 0}}
    {type: v4l2, uri: /dev/video0, input_format: mjpeg, fps: 30, size: [W, H]}
    {type: synthetic, fps: 30, resolution: [W, H], cycle: 16, quality: 90, frames: N, start_ns: INT}
    {type: infos, uri: nuscenes_infos_temporal_val.pkl, data_root: DIR, camera: CAM_FRONT}
                                       # an mmdet3d info file (.pkl, restricted unpickler; or .json): each
                                       # sample is a frame set, the camera's images at their own timestamps;
                                       # camera: the file's key (default: the rig camera's name)
    common: offset_ms: 0 (added to capture times), faults: FAULTS (testing; see sources.faults)

Limits (each violation is a problem at its key path): every number is finite; durations and ages
in ms at most one day (86400000), timeouts and stalls in s at most an hour, ``run.duration_s`` at
most a year, fps at most 10000, frame counts at most 1e12, ports 1..65535, ``start_ns`` in 0..2**62.
Camera sides are 1..65535 pixels and a frame at most ``decode.max_pixels``. Camera names are one
safe path component (``A-Z a-z 0-9 _ . + -``, 1-64 characters, not starting with ``.`` or ``-``, no
``..``): they are substituted into ``{camera}`` URIs and output names, so a substitution cannot leave
the folder the user wrote (an absolute or ``..`` path the user writes is theirs). YAML files (this
one and rig files) are read within :data:`dvpipe.types.YAML_MAX_BYTES` bytes,
:data:`~dvpipe.types.YAML_MAX_DEPTH` levels and :data:`~dvpipe.types.YAML_MAX_NODES` values after
alias expansion. ``load_deployment(..., probe=True)`` (``dvpipe validate``) also opens each file
source's header to check its codec against the camera's encoding; :func:`output_problems` checks
that the output folders can be created and written.
"""
from __future__ import annotations

import glob as _glob
import importlib.util
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence

from ..codecs import DEFAULT_MAX_PIXELS, RAW_YUV_ENCODINGS, VIDEO_ENCODINGS
from ..errors import ConfigError
from ..target import Target
from ..types import Rig, short_repr as _show

__all__ = [
    "Deployment", "CameraConfig", "SourceConfig", "PipelineConfig", "SyncConfig", "RunConfig",
    "LatencyConfig", "OutputsConfig", "DecodeConfig", "ModelConfig", "Faults", "DeploymentError", "load_deployment",
    "parse_backends",
    "SOURCE_TYPES", "ON_LATE", "ON_CORRUPT", "VIDEO_ENCODINGS", "DEFAULT_MAX_PIXELS", "output_problems",
]

SOURCE_TYPES = ("images", "video", "elementary", "rtsp", "v4l2", "synthetic", "infos")
ON_LATE = ("mask", "reuse", "drop")
ON_CORRUPT = ("drop", "flag")
#: decode.max_pixels by default: the largest decoded frame, in pixels (64 MP)
_LIVE_TYPES = ("rtsp", "v4l2")


class DeploymentError(ConfigError):
    """A deployment failed validation. ``errors`` holds every ``(path, message)``."""

    def __init__(self, errors: Sequence[tuple[str, str]], where: str = "deployment"):
        self.errors = list(errors)
        lines = "\n".join(f"  {p}: {m}" if p else f"  {m}" for p, m in self.errors)
        n = len(self.errors)
        super().__init__(f"{n} problem{'s' if n != 1 else ''} in {where}:\n{lines}")


# ----------------------------------------------------------------------------------- objects
@dataclass(frozen=True)
class Faults:
    """Faults injected by a source wrapper, to rehearse a deployment's policies (see ``sources.faults``).

    Frame numbers are the source's sequence numbers (0-based).

    Attributes:
        corrupt: frames whose bytes are damaged (the decoder rejects them).
        corrupt_every: damage every n-th frame (0: never).
        late_ms: ``((seq, ms), ...)``: frame delivered ``ms`` after its normal time.
        stall: ``((seq, seconds), ...)``: the source delivers nothing for ``seconds`` before ``seq``.
        disconnect: the stream is lost before these frames (a live source reconnects).
        resize: ``((seq, (width, height)), ...)``: from ``seq`` on, frames come at this size.
        lose: frames lost inside the source (never delivered, so never counted as entered).
        fail_open: the first n attempts to open the source fail (-1: it never opens).
    """

    corrupt: tuple[int, ...] = ()
    corrupt_every: int = 0
    late_ms: tuple[tuple[int, float], ...] = ()
    stall: tuple[tuple[int, float], ...] = ()
    disconnect: tuple[int, ...] = ()
    resize: tuple[tuple[int, tuple[int, int]], ...] = ()
    lose: tuple[int, ...] = ()
    fail_open: int = 0

    def __bool__(self) -> bool:
        return bool(self.corrupt or self.corrupt_every or self.late_ms or self.stall or self.disconnect
                    or self.resize or self.lose or self.fail_open)


@dataclass(frozen=True)
class SourceConfig:
    """Where one camera's frames come from.

    Attributes:
        type: one of :data:`SOURCE_TYPES`.
        uri: file, folder, glob, device or URL (file paths made absolute), or None (synthetic).
        options: the type's other keys, validated, defaults filled in (read-only mapping).
        offset_ms: added to every capture time (fixes a known clock offset of this camera).
        faults: injected faults (testing), or None.
    """

    type: str
    uri: Optional[str] = None
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    offset_ms: float = 0.0
    faults: Optional[Faults] = None

    @property
    def live(self) -> bool:
        """True for sources that capture now (RTSP, V4L2, real-time synthetic)."""
        return self.type in _LIVE_TYPES or (self.type == "synthetic" and bool(self.options.get("realtime")))

    def describe(self) -> str:
        what = self.uri if self.uri else ", ".join(f"{k}={v}" for k, v in self.options.items() if v is not None)
        return f"{self.type} {what}".strip()


@dataclass(frozen=True)
class CameraConfig:
    """A rig camera and how it is fed. ``backends`` None: the pipeline's preference."""

    name: str
    source: SourceConfig
    backends: Optional[tuple[str, ...]] = None


@dataclass(frozen=True)
class PipelineConfig:
    """Preprocessing: a profile name or a stage list, planned on ``backends`` (``("auto",)`` allowed)."""

    profile: Optional[str] = None
    stages: Optional[tuple[Any, ...]] = None
    mmdet3d_config: Optional[str] = None  # a model's mmdet3d config (.py), read without executing it
    skip: tuple[str, ...] = ()  # its transforms to ignore (dvpipe.mmdet3d.map_test_pipeline)
    fidelity: str = "reference"
    backends: tuple[str, ...] = ("auto",)
    threads: Optional[int] = None
    fallback: str = "next"


@dataclass(frozen=True)
class SyncConfig:
    """How frames are grouped into frame sets (see :mod:`dvpipe.deploy.sync`)."""

    tolerance_ms: float = 25.0
    on_late: str = "mask"
    deadline_ms: float = 100.0
    max_reuse_age_ms: float = 500.0
    anchor: str = "earliest"


@dataclass(frozen=True)
class RunConfig:
    """Run limits and queueing (see :mod:`dvpipe.deploy.runner`)."""

    frames: Optional[int] = None
    duration_s: Optional[float] = None
    loop: bool = False
    realtime: bool = False
    speed: float = 1.0
    queue_size: int = 2
    latest_only: str = "auto"
    stall_timeout_ms: float = 1000.0
    overlap_model: bool = True


@dataclass(frozen=True)
class LatencyConfig:
    """Budgets in milliseconds (end to end and per step), the sliding-window size in batches, and
    ``warmup_sets``: the first frame sets of a run, left out of every statistic (they pay for lazy
    initialisation) and reported as a count of their own."""

    budget_ms: Optional[float] = None
    steps_ms: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    window: int = 100
    counters_only: bool = False
    warmup_sets: int = 2  # frame sets; see warmup_for()

    def warmup_for(self, frames: Optional[int]) -> int:
        """Warm-up sets of a run of ``frames`` sets (None: unknown length): ``warmup_sets``, but at most
        half of a run of known length, so that a short run (``--frames 2``) still measures something."""
        return self.warmup_sets if frames is None else min(self.warmup_sets, frames // 2)

    def budgets_ns(self) -> dict[str, float]:
        out = {k: v * 1e6 for k, v in self.steps_ms.items()}
        if self.budget_ms is not None:
            out["end_to_end"] = self.budget_ms * 1e6
        return out


@dataclass(frozen=True)
class OutputsConfig:
    """What is written where. Paths are absolute after loading; None means "not written"."""

    dir: Optional[str] = None
    metrics: bool = True
    trace: Optional[str] = None
    plots: Optional[str] = None
    dumps_every: int = 0
    dumps_max: int = 0
    prometheus_port: Optional[int] = None
    prometheus_addr: str = "127.0.0.1"  # loopback: only this machine scrapes unless the user exposes it
    trace_max_events: Optional[int] = None  # the trace's ring (default dvpipe.latency.trace.DEFAULT_MAX_EVENTS)


@dataclass(frozen=True)
class DecodeConfig:
    """Integrity policy and resource cap of decoding.

    Attributes:
        on_corrupt: ``drop`` (a frame the decoder reports damaged is a drop with reason ``corrupt``)
            or ``flag`` (kept, ``metas[i]["corrupt"] = True``, counted).
        max_pixels: largest decoded frame, in pixels (width x height), checked from the header before
            any buffer is made; a camera declared larger is a configuration error.
    """

    on_corrupt: str = "drop"
    max_pixels: int = DEFAULT_MAX_PIXELS


@dataclass(frozen=True)
class ModelConfig:
    """``entry`` = ``module:callable`` (``path`` is added to ``sys.path``) or ``/abs/file.py:callable``;
    with ``init``, ``callable(**init)`` builds the model once."""

    entry: str
    path: Optional[str] = None
    init: Optional[Mapping[str, Any]] = None
    om: Optional[Any] = None  # type: om -> dvpipe.models.OmSpec; entry is then "om:PATH"


@dataclass(frozen=True)
class Deployment:
    """A validated deployment (frozen). Build with :func:`load_deployment`."""

    name: str
    rig: Rig
    pipeline: PipelineConfig
    cameras: tuple[CameraConfig, ...]
    sync: SyncConfig = SyncConfig()
    run: RunConfig = RunConfig()
    latency: LatencyConfig = LatencyConfig()
    outputs: OutputsConfig = OutputsConfig()
    decode: DecodeConfig = DecodeConfig()
    model: Optional[ModelConfig] = None
    target: Optional[Target] = None
    description: str = ""
    path: Optional[str] = None
    rig_path: Optional[str] = None
    warnings: tuple[str, ...] = ()

    @property
    def live(self) -> bool:
        """True when any source captures now (RTSP, V4L2, real-time synthetic) or replay is paced."""
        return self.run.realtime or any(c.source.live for c in self.cameras)

    def camera(self, name: str) -> CameraConfig:
        for c in self.cameras:
            if c.name == name:
                return c
        raise KeyError(f"unknown camera {name!r}; the deployment has {', '.join(c.name for c in self.cameras)}")

    def with_run(self, **changes) -> "Deployment":
        """A copy with run settings changed (``frames=``, ``duration_s=``...), e.g. from CLI flags."""
        from dataclasses import replace

        return replace(self, run=replace(self.run, **changes))

    def with_outputs(self, **changes) -> "Deployment":
        from dataclasses import replace

        return replace(self, outputs=replace(self.outputs, **changes))

    def describe(self) -> str:
        lines = [f"deployment {self.name}" + (f" ({self.path})" if self.path else ""),
                 f"  rig: {len(self.rig)} cameras" + (f" from {self.rig_path}" if self.rig_path else " (inline)"),
                 "  pipeline: " + (f"profile {self.pipeline.profile}" if self.pipeline.profile else
                                   f"{len(self.pipeline.stages or ())} stages")
                 + f", fidelity {self.pipeline.fidelity}, backends {' > '.join(self.pipeline.backends)}",
                 f"  sync: +-{self.sync.tolerance_ms:g} ms, late cameras: {self.sync.on_late}"
                 + (f" after {self.sync.deadline_ms:g} ms" if self.live else ""),
                 ]
        for c in self.cameras:
            cam = self.rig[c.name]
            extra = f", backends {' > '.join(c.backends)}" if c.backends else ""
            lines.append(f"  {c.name:<16} {cam.width}x{cam.height} {cam.encoding:<5} <- {c.source.describe()}{extra}")
        if self.model:
            lines.append(f"  model: {self.model.entry}")
        return "\n".join(lines)


# -------------------------------------------------------------------------------- validation
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
_SYNTH_CYCLE_MAX_BYTES = 2 << 30  #: a synthetic source renders its whole cycle (BGR) before encoding


def _number_problem(v: Any, *, integer: bool = False, minimum: float | None = None, exclusive_min: bool = False,
                    maximum: float = _NUMBER_MAX) -> Optional[str]:
    """Why ``v`` is not an acceptable number (finite, of the right kind, in range), or None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        return f"expected {'an integer' if integer else 'a number'}, got {_show(v)}"
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
                close = [a for a in allowed if _similar(str(k), a)]
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


def _similar(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    if a == b:
        return True
    if abs(len(a) - len(b)) > 2:
        return False
    # one edit apart, or the same letters in another order
    if sorted(a) == sorted(b):
        return True
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    s, t = (a, b) if len(a) < len(b) else (b, a)
    return any(t[:i] + t[i + 1:] == s for i in range(len(t)))


def _pair(v: Any, path: str, V: _V, max_pixels: Optional[int] = None) -> Optional[tuple[int, int]]:
    """``[width, height]`` in pixels, each side in 1..CAMERA_MAX_SIDE and (given) at most ``max_pixels``."""
    from ..types import CAMERA_MAX_SIDE

    if (not isinstance(v, Sequence) or isinstance(v, str) or len(v) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= CAMERA_MAX_SIDE for x in v)):
        V.err(path, f"expected [width, height] of integers in 1..{CAMERA_MAX_SIDE} (pixels), got {_show(v)}")
        return None
    w, h = int(v[0]), int(v[1])
    if max_pixels is not None and w * h > max_pixels:
        V.err(path, f"{w}x{h} is {w * h} pixels per frame, more than decode.max_pixels ({max_pixels})")
        return None
    return w, h


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


def _parse_faults(v: Any, path: str, V: _V, max_pixels: int) -> Optional[Faults]:
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


_COMMON_SOURCE_KEYS = ("type", "uri", "offset_ms", "faults")
_SOURCE_KEYS = {
    "images": ("pattern", "timestamps", "unit", "sidecar", "fps", "start_ns"),
    "video": ("start_ns", "lookahead"),
    "elementary": ("codec", "fps", "start_ns", "lookahead"),
    "rtsp": ("transport", "open_timeout_s", "read_timeout_s", "reconnect", "lookahead", "stall_reconnect_s"),
    "v4l2": ("input_format", "fps", "size", "stall_reconnect_s"),
    "synthetic": ("fps", "resolution", "cycle", "quality", "frames", "start_ns", "realtime"),
    "infos": ("data_root", "camera"),
}
_ES_EXT = {".h264": "h264", ".264": "h264", ".avc": "h264", ".h265": "h265", ".265": "h265", ".hevc": "h265"}


def _lookahead(m: Mapping, where: str, V: "_V", opts: dict) -> None:
    """``lookahead``: access units a video source reads ahead of a frame (dvpipe.video); default per type."""
    if m.get("lookahead") is not None:
        opts["lookahead"] = V.number(m, "lookahead", where, None, integer=True, minimum=0, maximum=64)


def _stall_reconnect(m: Mapping, where: str, V: "_V", opts: dict) -> None:
    """``stall_reconnect_s``: a live stall (no frames, connection open) longer than this reconnects;
    null: never. Absent: the source type's default."""
    if "stall_reconnect_s" in m:
        opts["stall_reconnect_s"] = V.number(m, "stall_reconnect_s", where, None, minimum=0, exclusive_min=True,
                                             maximum=_HOUR_S, allow_none=True)


def _parse_source(v: Any, path: str, V: _V, camera_name: str, encoding: str,
                  size: tuple[int, int] = (1, 1)) -> Optional[SourceConfig]:
    """One camera's source (``size``: the camera's ``(width, height)`` in pixels)."""
    where = path  # errors of a shared default repeat per camera; load_deployment keeps one of each
    if not isinstance(v, Mapping):
        V.err(where, f"expected a mapping with a 'type' ({', '.join(SOURCE_TYPES)}), got {_kind(v)}")
        return None
    typ = v.get("type")
    if typ not in SOURCE_TYPES:
        V.err(_join(where, "type"), "required" if typ is None else f"{_show(typ)} is not one of {', '.join(SOURCE_TYPES)}")
        return None
    m = V.mapping(v, where, _COMMON_SOURCE_KEYS + _SOURCE_KEYS[typ])
    if m is None:
        return None
    opts: dict[str, Any] = {}
    uri = m.get("uri")
    if uri is not None and not isinstance(uri, str):
        V.err(_join(where, "uri"), f"expected a string, got {_show(uri)}")
        uri = None
    if isinstance(uri, str):
        uri = uri.replace("{camera}", camera_name)
    start_ns = m.get("start_ns")
    if start_ns is not None and _number_problem(start_ns, integer=True, minimum=0, maximum=_MAX_START_NS):
        V.err(_join(where, "start_ns"), f"expected an integer in 0..2**62 (ns since the Unix epoch), "
                                        f"got {_show(start_ns)}")
        start_ns = None
    upath = _join(where, "uri")

    n_errors = len(V.errors)
    if typ == "images":
        if uri is None:
            V.err(upath, "required: a folder of images or a glob pattern")
        else:
            if any(ch in uri for ch in "*?["):
                uri = V.path(uri, upath, must_exist=False)
                if not _glob.glob(uri):
                    V.err(upath, f"no files match {uri}")
            else:
                uri = V.path(uri, upath, kind="dir")
        pattern = V.string(m, "pattern", where, None)
        opts["pattern"] = pattern.replace("{camera}", camera_name) if pattern else pattern
        if pattern is not None and ("/" in pattern or os.sep in pattern):
            V.err(_join(where, "pattern"), f"a file-name pattern (e.g. '*__{{camera}}__*.jpg'), got {_show(pattern)}; "
                                            "put folders in uri")
        elif opts["pattern"] and uri is not None and len(V.errors) == n_errors and os.path.isdir(uri):
            from .sources.images import scan_images

            if not scan_images(uri, opts["pattern"]):
                V.err(_join(where, "pattern"), f"{_show(opts['pattern'])} matches no file in {uri}"
                                                + (f" (camera {camera_name})" if "{camera}" in pattern else ""))
        if V.probe and encoding in ("jpeg", "png") and uri is not None and len(V.errors) == n_errors:
            _probe_images(uri, opts["pattern"], upath, V, camera_name, encoding)
        opts["timestamps"] = V.choice(m, "timestamps", where, ("filename", "sidecar", "fps"),
                                      "sidecar" if "sidecar" in m else ("fps" if "fps" in m else "filename"))
        opts["unit"] = V.choice(m, "unit", where, ("auto", "ns", "us", "ms", "s"), "auto")
        sidecar = V.string(m, "sidecar", where, None)
        if sidecar is not None:
            sidecar = V.path(sidecar.replace("{camera}", camera_name), _join(where, "sidecar"))
        if opts["timestamps"] == "sidecar" and sidecar is None:
            V.err(_join(where, "sidecar"),
                  "required when timestamps: sidecar (a YAML/JSON/CSV file: image name -> time, or a .txt)")
        opts["sidecar"] = sidecar
        opts["fps"] = V.number(m, "fps", where, 10.0 if opts["timestamps"] == "fps" else None, minimum=0,
                               exclusive_min=True, allow_none=True, maximum=_MAX_FPS)
        opts["start_ns"] = start_ns
        if encoding not in ("jpeg", "png"):
            V.err(where, f"an image sequence needs camera encoding jpeg or png; "
                         f"camera {camera_name} declares {encoding}")
    elif typ == "video":
        if uri is None:
            V.err(upath, "required: a video file (MP4, MKV, ...)")
        else:
            uri = V.path(uri, upath)
        opts["start_ns"] = start_ns
        _lookahead(m, where, V, opts)
        if encoding not in VIDEO_ENCODINGS + ("raw", "jpeg"):
            V.err(where, f"a video source needs camera encoding h264, h265 (decoded as a plan step) or raw "
                         f"(decoded in the source); camera {camera_name} declares {encoding}")
        elif V.probe and uri is not None and os.path.isfile(uri):
            _probe_video(uri, upath, V, camera_name, encoding)
    elif typ == "elementary":
        if uri is None:
            V.err(upath, "required: an H.264/H.265 elementary stream file")
        else:
            uri = V.path(uri, upath)
        codec = V.choice(m, "codec", where, VIDEO_ENCODINGS, None)
        if codec is None and uri is not None:
            codec = _ES_EXT.get(Path(uri).suffix.lower())
            if codec is None:
                V.err(_join(where, "codec"), f"required: cannot tell h264 from h265 by the name {Path(uri).name}")
        opts["codec"] = codec
        opts["fps"] = V.number(m, "fps", where, 30.0, minimum=0, exclusive_min=True, maximum=_MAX_FPS)
        opts["start_ns"] = start_ns
        _lookahead(m, where, V, opts)
        if codec and encoding != codec:
            V.err(where, f"the stream is {codec} but camera {camera_name} declares encoding {encoding}")
        elif codec and V.probe and uri is not None and os.path.isfile(uri):
            _probe_elementary(uri, upath, V, codec)
    elif typ == "rtsp":
        if uri is None:
            V.err(upath, "required: rtsp://host[:port]/path")
        elif not re.match(r"^rtsps?://[^/\s]+", uri):
            V.err(upath, f"expected rtsp://host[:port]/path, got {_show(uri)}")
        opts["transport"] = V.choice(m, "transport", where, ("tcp", "udp"), "tcp")
        _lookahead(m, where, V, opts)
        _stall_reconnect(m, where, V, opts)
        opts["open_timeout_s"] = V.number(m, "open_timeout_s", where, 5.0, minimum=0, exclusive_min=True,
                                          maximum=_HOUR_S)
        opts["read_timeout_s"] = V.number(m, "read_timeout_s", where, 2.0, minimum=0, exclusive_min=True,
                                          maximum=_HOUR_S)
        rp = _join(where, "reconnect")
        r = V.mapping(m.get("reconnect"), rp, ("initial_ms", "max_ms", "factor", "attempts")) or {}
        opts["reconnect"] = MappingProxyType({
            "initial_ms": V.number(r, "initial_ms", rp, 250.0, minimum=0, maximum=_DAY_MS),
            "max_ms": V.number(r, "max_ms", rp, 5000.0, minimum=0, maximum=_DAY_MS),
            "factor": V.number(r, "factor", rp, 2.0, minimum=1, maximum=1000),
            "attempts": V.number(r, "attempts", rp, 0, integer=True, minimum=0),
        })
        if encoding not in VIDEO_ENCODINGS + ("jpeg", "raw"):
            V.err(where, f"an RTSP source needs camera encoding h264, h265, jpeg (MJPEG) or raw; "
                         f"camera {camera_name} declares {encoding}")
    elif typ == "v4l2":
        if uri is None:
            V.err(upath, "required: a V4L2 device such as /dev/video0")
        elif not os.path.exists(uri):
            V.warnings.append(f"{upath}: device {uri} does not exist on this machine")
        opts["input_format"] = V.string(m, "input_format", where, None)
        opts["fps"] = V.number(m, "fps", where, None, minimum=0, exclusive_min=True, allow_none=True,
                               maximum=_MAX_FPS)
        opts["size"] = (_pair(m["size"], _join(where, "size"), V, V.max_pixels)
                        if m.get("size") is not None else None)
        _stall_reconnect(m, where, V, opts)
    elif typ == "synthetic":
        if uri is not None:
            V.err(upath, "a synthetic source takes no uri")
        opts["fps"] = V.number(m, "fps", where, 30.0, minimum=0, exclusive_min=True, maximum=_MAX_FPS)
        res = m.get("resolution")
        opts["resolution"] = _pair(res, _join(where, "resolution"), V, V.max_pixels) if res is not None else None
        opts["cycle"] = V.number(m, "cycle", where, 16, integer=True, minimum=1, maximum=1000)
        w, h = opts["resolution"] or size
        if encoding in RAW_YUV_ENCODINGS and opts["resolution"] is not None and tuple(opts["resolution"]) != tuple(size):
            V.err(_join(where, "resolution"), f"a raw {encoding.upper()} frame has the camera's size "
                                              f"{size[0]}x{size[1]} (camera {camera_name}); drop resolution:")
        if encoding in RAW_YUV_ENCODINGS and (size[0] % 2 or (encoding == "nv12" and size[1] % 2)):
            V.err(where, f"camera {camera_name} is {size[0]}x{size[1]}: {encoding.upper()} frames need an even "
                         f"width{' and height' if encoding == 'nv12' else ''}")
        if opts["cycle"] * w * h * 3 > _SYNTH_CYCLE_MAX_BYTES:
            V.err(_join(where, "cycle"), f"{opts['cycle']} frames of {w}x{h} take "
                                         f"{opts['cycle'] * w * h * 3 / 2 ** 30:.1f} GiB while the cycle is "
                                         f"encoded (at most {_SYNTH_CYCLE_MAX_BYTES >> 30} GiB); use a shorter cycle")
        opts["quality"] = V.number(m, "quality", where, 90, integer=True, minimum=1, maximum=100)
        opts["frames"] = V.number(m, "frames", where, None, integer=True, minimum=1, allow_none=True,
                                  maximum=_MAX_FRAMES)
        opts["start_ns"] = start_ns
        opts["realtime"] = V.boolean(m, "realtime", where, True)
    elif typ == "infos":
        if uri is None:
            V.err(upath, "required: an mmdet3d info file (*_infos_*.pkl, or the same structure as .json)")
        else:
            uri = V.path(uri, upath)
        root = V.string(m, "data_root", where, None)
        opts["data_root"] = V.path(root, _join(where, "data_root"), kind="dir") if root is not None else None
        key = V.string(m, "camera", where, None)
        opts["camera"] = key = (key or camera_name).replace("{camera}", camera_name)
        if encoding not in ("jpeg", "png"):
            V.err(where, f"an info file's images need camera encoding jpeg or png; camera {camera_name} declares "
                         f"{encoding}")
        if uri is not None and len(V.errors) == n_errors:
            from ..mmdet3d import open_info_file

            try:
                info = open_info_file(uri, opts["data_root"])
            except ConfigError as e:
                V.err(upath, str(e))
            else:
                first = next((smp["cameras"][key] for smp in info.samples if key in smp["cameras"]), None)
                if first is None:
                    V.err(_join(where, "camera") if "camera" in m else where,
                          f"camera {key} is not in the info file {uri} ({', '.join(info.samples[0]['cameras'])})"
                          + ("" if "camera" in m else "; name the file's camera with camera:"))
                elif not os.path.isfile(first["path"]):
                    V.err(_join(where, "data_root"), f"the info file's first {key} image is not there: "
                                                     f"{_show(first['path'], 300)} (set data_root to the folder its "
                                                     "paths are relative to)")
                elif V.probe and encoding in ("jpeg", "png"):
                    from ..codecs import sniff

                    with open(first["path"], "rb") as f:
                        found = sniff(f.read(16))
                    if found != encoding:
                        V.err(upath, f"{first['path']} is {'a ' + found.upper() if found else 'neither JPEG nor PNG'} "
                                     f"but camera {camera_name} declares encoding {encoding}")
    offset_ms = V.number(m, "offset_ms", where, 0.0, minimum=-_DAY_MS, maximum=_DAY_MS)
    faults = (_parse_faults(m["faults"], _join(where, "faults"), V, V.max_pixels)
              if m.get("faults") is not None else None)
    return SourceConfig(typ, uri, MappingProxyType(opts), offset_ms, faults if faults else None)


def parse_backends(value: Any, path: str = "backends") -> tuple[str, ...]:
    """``auto``, a backend name or a list of them -> a tuple of names; ``ConfigError`` naming ``path``."""
    V = _V(Path.cwd())
    out = _parse_backends(value, path, V)
    if V.errors:
        raise DeploymentError(V.errors, path)
    return out or ("cpu",)


def _parse_backends(v: Any, path: str, V: _V) -> Optional[tuple[str, ...]]:
    from ..backends import resolve

    if v == "auto":
        return ("auto",)
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, Sequence) or not v:
        V.err(path, f"expected 'auto' or a list of backend names such as [cpu], got {_show(v)}")
        return None
    out = []
    for i, b in enumerate(v):
        if b == "auto":
            out.append("auto")
            continue
        try:
            out.append(resolve(b).name)
        except ConfigError as e:
            V.err(f"{path}[{i}]", e.message)
    return tuple(out)


def _stage_table() -> dict[str, Any]:
    from ..stages import Batch, Crop, Decode, Normalise, Pad, Resize

    return {"decode": Decode, "resize": Resize, "crop": Crop, "normalise": Normalise, "normalize": Normalise,
            "pad": Pad, "batch": Batch}


def _to_tuples(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_to_tuples(x) for x in v)
    return v


def _parse_stages(v: Any, path: str, V: _V) -> Optional[tuple]:
    table = _stage_table()
    if not isinstance(v, Sequence) or isinstance(v, str) or not v:
        V.err(path, f"expected a non-empty list of stages such as [decode, {{resize: {{scale: 0.5}}}}], got {_show(v)}")
        return None
    out = []
    for i, item in enumerate(v):
        p = f"{path}[{i}]"
        if isinstance(item, str):
            op, params = item, {}
        elif isinstance(item, Mapping) and len(item) == 1:
            op, params = next(iter(item.items()))
            params = params or {}
        else:
            V.err(p, f"expected an op name or {{op: {{params}}}}, got {_show(item)}")
            continue
        if not isinstance(params, Mapping):
            V.err(f"{p}.{op}", f"expected a mapping of parameters, got {_kind(params)}")
            continue
        if isinstance(op, str) and ":" in op:
            cls = _import_entry(op, f"{p}", V)
        else:
            cls = table.get(op)
            if cls is None:
                V.err(p, f"unknown stage {_show(op)}; known: {', '.join(sorted(set(table)))}, "
                         "or 'module:Class' for your own")
        if cls is None:
            continue
        try:
            out.append(cls(**{k: _to_tuples(x) for k, x in params.items()}))
        except ConfigError as e:
            V.err(f"{p}.{op}", e.message if not e.path else str(e))
        except TypeError as e:
            V.err(f"{p}.{op}", _stage_type_error(cls, e))
        except (ValueError, OverflowError, ArithmeticError) as e:  # a stage that checks less than it should
            V.err(f"{p}.{op}", f"invalid parameters: {' '.join(str(e).split())[:200]}")
    return tuple(out)


def _stage_type_error(cls: Any, e: TypeError) -> str:
    """A stage constructor's ``TypeError`` (wrong or missing parameters) in the words of the schema."""
    import inspect

    try:
        params = [n for n in inspect.signature(cls).parameters if n not in ("self", "args", "kwargs")]
    except (TypeError, ValueError):
        params = []
    takes = f"; {getattr(cls, '__name__', 'the stage')} takes {', '.join(params) or 'no parameters'}"
    text = str(e)
    bad = re.search(r"unexpected keyword argument '([^']*)'", text)
    if bad:
        return f"unknown parameter {bad.group(1)!r}{takes}"
    if "keywords must be strings" in text:
        return f"parameter names must be strings{takes}"
    return re.sub(r"^[\w.]*__init__\(\) ", "", text) + (takes if "argument" in text else "")


def import_entry(entry: str) -> Any:
    """The object an entry names: ``package.module:attr.sub`` or ``path/to/file.py:attr``.

    Raises whatever importing or the attribute lookup raises (callers turn it into a ``ConfigError``).
    """
    import importlib
    import importlib.util

    mod, _, attr = entry.rpartition(":")
    if mod.endswith(".py"):
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(mod))[0], mod)
        obj: Any = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(obj)
    else:
        obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _import_entry(entry: str, path: str, V: _V) -> Any:
    try:
        return import_entry(entry)
    except Exception as e:  # noqa: BLE001 - any import failure is a config error at this path
        V.err(path, f"cannot import {entry}: {type(e).__name__}: {e}")
        return None


_ENTRY_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_FILE_ENTRY_RE = re.compile(r"^.+\.py:[A-Za-z_][\w.]*$")


def _parse_model(v: Any, V: _V, target: Any = None) -> Optional[ModelConfig]:
    if isinstance(v, Mapping) and "type" in v:  # {type: om, path, device, backend, target, aipp}
        from ..models import parse_config

        try:
            spec = parse_config(v, str(V.base_dir), default_target=target)
        except ConfigError as e:
            V.err(e.path or "model", e.message)
            return None
        return ModelConfig(f"om:{spec.path}", om=spec)
    if isinstance(v, str):
        v = {"entry": v}
    m = V.mapping(v, "model", ("entry", "path", "init"), required=("entry",))
    if m is None:
        return None
    entry = V.string(m, "entry", "model", None, required=True)
    if entry is not None and _FILE_ENTRY_RE.match(entry):  # path/to/file.py:callable
        file, _, attr = entry.rpartition(":")
        file = V.path(file, "model.entry")
        init = m.get("init")
        return ModelConfig(f"{file}:{attr}", None, MappingProxyType(dict(init)) if isinstance(init, Mapping) else None)
    if entry is not None and not _ENTRY_RE.match(entry):
        V.err("model.entry", f"expected 'module:callable' or 'path/to/file.py:callable' (for example "
                             f"'mypkg.model:infer'), got {_show(entry)}")
        entry = None
    path = V.string(m, "path", "model", None)
    if path is not None:
        path = V.path(path, "model.path", kind="dir")
    init = m.get("init")
    if init is not None and not isinstance(init, Mapping):
        V.err("model.init", f"expected a mapping of keyword arguments, got {_kind(init)}")
        init = None
    if entry is not None:
        import sys

        mod = entry.split(":")[0]
        added = path is not None and path not in sys.path
        if added:
            sys.path.insert(0, path)
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            found = False
        finally:
            if added:
                sys.path.remove(path)
        if not found:
            V.err("model.entry", f"module {_show(mod)} not found" + (f" (also looked in {path})" if path else ""))
    if entry is None:
        return None
    return ModelConfig(entry, path, MappingProxyType(dict(init)) if init else None)


_TOP_KEYS = ("version", "name", "description", "rig", "pipeline", "encoding", "source", "cameras", "sync", "run",
             "latency", "outputs", "decode", "model", "target")


def _parse_decode(v: Any, V: _V) -> DecodeConfig:
    m = V.mapping(v, "decode", ("on_corrupt", "max_pixels")) or {}
    return DecodeConfig(
        on_corrupt=V.choice(m, "on_corrupt", "decode", ON_CORRUPT, "drop"),
        max_pixels=V.number(m, "max_pixels", "decode", DEFAULT_MAX_PIXELS, integer=True, minimum=1,
                            maximum=_MAX_PIXELS_LIMIT),
    )


def _check_camera_pixels(rig: Rig, rig_key: str, V: _V) -> None:
    """A camera declared larger than ``decode.max_pixels`` is a configuration error (checked before any
    frame, plan or buffer exists)."""
    for i, cam in enumerate(rig.cameras):
        pixels = cam.width * cam.height
        if pixels > V.max_pixels:
            V.err(f"{rig_key}.cameras[{i}]", f"camera {cam.name} is {cam.width}x{cam.height} = {pixels} pixels per "
                                             f"frame, more than decode.max_pixels ({V.max_pixels}); raise "
                                             "decode.max_pixels if the camera really is that large")


def load_deployment(source: str | os.PathLike | Mapping[str, Any], *,
                    base_dir: str | os.PathLike | None = None, probe: bool = False) -> Deployment:
    """Load and validate a deployment from a YAML file or an already-parsed mapping.

    Args:
        source: path of the YAML file, or its content as a mapping.
        base_dir: folder that relative input paths refer to (default: the file's folder, or the
            working directory for a mapping).
        probe: also open each file source (header only) and check its codec against the camera's
            encoding, and that image folders hold images of the declared format (``dvpipe validate``).

    Returns:
        a frozen :class:`Deployment`.

    Raises:
        DeploymentError: listing every problem with its key path (a ``ConfigError``).
    """
    from ..types import read_yaml

    path: Optional[Path] = None
    if isinstance(source, Mapping):
        data = dict(source)
        where = "deployment"
    else:
        path = Path(source)
        where = str(path)
        try:
            data = read_yaml(path, "deployment file")
        except ConfigError as e:
            raise DeploymentError([("", e.message)], where) from None
        if data is None:
            data = {}
    base = Path(base_dir) if base_dir is not None else (path.resolve().parent if path else Path.cwd())
    V = _V(base, probe=probe)
    top = V.mapping(data, "", _TOP_KEYS, required=("rig", "pipeline"))
    if top is None:
        raise DeploymentError(V.errors, where)
    if top.get("version", 1) != 1:
        V.err("version", f"this dvpipe reads deployment version 1, got {_show(top.get('version'))}")
    name = V.string(top, "name", "", path.stem if path else "deployment")
    if name and (any(ch in name for ch in "/\\\0") or ".." in name or name.startswith(".")):
        V.err("name", f"{_show(name)} cannot name output folders (out/{{name}}): no '/', '\\', NUL or '..', "
                      "not starting with '.'")
        name = "deployment"
    description = V.string(top, "description", "", "") or ""
    decode = _parse_decode(top.get("decode"), V)
    V.max_pixels = decode.max_pixels

    # rig ---------------------------------------------------------------------------------------
    rig: Optional[Rig] = None
    rig_path: Optional[str] = None
    rig_v = top.get("rig")
    if isinstance(rig_v, str):
        rig_path = V.path(rig_v, "rig")
        if os.path.isfile(rig_path):
            try:
                rig_data = read_yaml(rig_path, "rig file") or {}
            except ConfigError as e:
                V.err("rig", e.message)
            else:
                rig = _rig_from(rig_data, f"rig ({rig_path})", V)
                if rig is not None:
                    _check_camera_pixels(rig, f"rig ({rig_path})", V)
    elif isinstance(rig_v, Mapping):
        rig = _rig_from(rig_v, "rig", V)
        if rig is not None:
            _check_camera_pixels(rig, "rig", V)
    elif rig_v is not None:
        V.err("rig", f"expected a rig file path or an inline rig {{cameras: [...]}}, got {_kind(rig_v)}")

    # pipeline ----------------------------------------------------------------------------------
    pm = V.mapping(top.get("pipeline"), "pipeline",
                   ("profile", "stages", "mmdet3d_config", "skip", "fidelity", "backends", "threads", "fallback"))
    pipeline = PipelineConfig()
    if pm is not None and "pipeline" in top:
        profile = V.string(pm, "profile", "pipeline", None)
        stages = _parse_stages(pm["stages"], "pipeline.stages", V) if "stages" in pm else None
        mm = V.path(str(pm["mmdet3d_config"]), "pipeline.mmdet3d_config") if "mmdet3d_config" in pm else None
        skip = tuple(str(x) for x in (pm.get("skip") or ()))
        if [profile is not None, "stages" in pm, "mmdet3d_config" in pm].count(True) != 1:
            V.err("pipeline", "needs exactly one of 'profile' (bevformer-tiny, ...), 'stages' (a list) or "
                  "'mmdet3d_config' (a model's .py config)")
        if mm is not None:
            from ..mmdet3d import profile_from_config

            try:
                profile_from_config(mm, skip=skip)
            except ConfigError as e:
                V.err("pipeline.mmdet3d_config", str(e))
        if profile is not None:
            from ..profiles import PROFILES

            if profile not in PROFILES:
                V.err("pipeline.profile", f"unknown profile {_show(profile)}; known: {', '.join(PROFILES)}")
        backends = _parse_backends(pm["backends"], "pipeline.backends", V) if "backends" in pm else ("auto",)
        pipeline = PipelineConfig(
            profile=profile, stages=stages, mmdet3d_config=mm, skip=skip,
            fidelity=V.choice(pm, "fidelity", "pipeline", ("reference", "fast"), "reference"),
            backends=backends or ("cpu",),
            threads=V.number(pm, "threads", "pipeline", None, integer=True, minimum=1, allow_none=True, maximum=1024),
            fallback=V.choice(pm, "fallback", "pipeline", ("next", "error"), "next"),
        )

    # cameras and sources -----------------------------------------------------------------------
    default_source = top.get("source")
    entries: dict[str, tuple[int, Mapping]] = {}
    cams_v = top.get("cameras", [])
    if cams_v is None:
        cams_v = []
    if not isinstance(cams_v, Sequence) or isinstance(cams_v, str):
        V.err("cameras", f"expected a list of {{name, source, backends}}, got {_kind(cams_v)}")
        cams_v = []
    rig_names = rig.names if rig is not None else ()
    for i, item in enumerate(cams_v):
        p = f"cameras[{i}]"
        m = V.mapping(item, p, ("name", "source", "backends", "encoding"), required=("name",))
        if m is None or "name" not in m:
            continue
        nm = m["name"]
        if not isinstance(nm, str):
            V.err(f"{p}.name", f"expected a camera name, got {_show(nm)}")
            continue
        if rig is not None and nm not in rig_names:
            V.err(f"{p}.name", f"{_show(nm)} is not a camera of the rig ({', '.join(rig_names)})")
            continue
        if nm in entries:
            V.err(f"{p}.name", f"camera {_show(nm)} is listed twice (also cameras[{entries[nm][0]}])")
            continue
        entries[nm] = (i, m)
    if rig is not None:
        from dataclasses import replace as _replace

        from ..types import ENCODINGS

        default_enc = V.choice(top, "encoding", "", ENCODINGS, None)
        changed = []
        for cam in rig.cameras:
            idx, m = entries.get(cam.name, (None, {}))
            enc = V.choice(m, "encoding", f"cameras[{idx}]", ENCODINGS, None) if idx is not None else None
            enc = enc or default_enc
            changed.append(_replace(cam, encoding=enc) if enc and enc != cam.encoding else cam)
        rig = Rig(tuple(changed), name=rig.name)
    cameras: list[CameraConfig] = []
    if rig is not None:
        for cam in rig.cameras:
            idx, m = entries.get(cam.name, (None, {}))
            rig_image = cam.extra.get("image")
            if rig_image is not None and (default_source is not None or (idx is not None and "source" in m)):
                V.warnings.append(f"rig camera {cam.name}: its image: {rig_image} and capture_time_ns are not used "
                                  "(the deployment gives the camera a source)")
            if idx is not None and "source" in m:
                src = _parse_source(m["source"], f"cameras[{idx}].source", V, cam.name, cam.encoding,
                                    (cam.width, cam.height))
            elif default_source is None and rig_image is not None:  # a one-sample rig: its frame is the source
                base = os.path.dirname(rig_path) if rig_path else (str(path.parent) if path else os.getcwd())
                image = rig_image if os.path.isabs(rig_image) else os.path.join(base, rig_image)
                if not os.path.isfile(image):
                    V.err(f"rig ({rig_path or 'inline'}).cameras[{rig.index(cam.name)}].image", f"file not found: {image}")
                    src = None
                else:
                    opts = {"pattern": None, "timestamps": "rig", "unit": "ns", "sidecar": None, "fps": None,
                            "start_ns": None, "capture_ns": cam.extra.get("capture_time_ns", 0)}
                    src = SourceConfig("images", os.path.abspath(image), MappingProxyType(opts))
            elif default_source is not None:
                src = _parse_source(default_source, "source", V, cam.name, cam.encoding, (cam.width, cam.height))
            else:
                V.err("cameras" if idx is None else f"cameras[{idx}].source",
                      f"camera {cam.name} has no source (give it one under cameras, or a default 'source')")
                src = None
            backends = _parse_backends(m["backends"], f"cameras[{idx}].backends", V) if "backends" in m else None
            if src is not None:
                cameras.append(CameraConfig(cam.name, src, backends))
        if not V.errors:
            _warn_shared_images(cameras, V)

    # sync ----------------------------------------------------------------------------------------
    sm = V.mapping(top.get("sync"), "sync",
                   ("tolerance_ms", "on_late", "deadline_ms", "max_reuse_age_ms", "anchor")) or {}
    anchor = V.string(sm, "anchor", "sync", "earliest")
    if anchor != "earliest" and rig is not None and anchor not in rig_names:
        V.err("sync.anchor", f"expected 'earliest' or a camera of the rig ({', '.join(rig_names)}), got {_show(anchor)}")
        anchor = "earliest"
    sync = SyncConfig(
        tolerance_ms=V.number(sm, "tolerance_ms", "sync", 25.0, minimum=0, maximum=_DAY_MS),
        on_late=V.choice(sm, "on_late", "sync", ON_LATE, "mask"),
        deadline_ms=V.number(sm, "deadline_ms", "sync", 100.0, minimum=0, maximum=_DAY_MS),
        max_reuse_age_ms=V.number(sm, "max_reuse_age_ms", "sync", 500.0, minimum=0, maximum=_DAY_MS),
        anchor=anchor,
    )

    # run -----------------------------------------------------------------------------------------
    rm = V.mapping(top.get("run"), "run", ("frames", "duration_s", "loop", "realtime", "speed", "queue_size",
                                           "latest_only", "stall_timeout_ms", "overlap_model")) or {}
    latest = rm.get("latest_only", "auto")
    if not (latest == "auto" or isinstance(latest, bool)):
        V.err("run.latest_only", f"expected auto, true or false, got {_show(latest)}")
        latest = "auto"
    run = RunConfig(
        frames=V.number(rm, "frames", "run", None, integer=True, minimum=1, allow_none=True, maximum=_MAX_FRAMES),
        duration_s=V.number(rm, "duration_s", "run", None, minimum=0, exclusive_min=True, allow_none=True,
                            maximum=_YEAR_S),
        loop=V.boolean(rm, "loop", "run", False),
        realtime=V.boolean(rm, "realtime", "run", False),
        speed=V.number(rm, "speed", "run", 1.0, minimum=0, exclusive_min=True, maximum=1000),
        queue_size=V.number(rm, "queue_size", "run", 2, integer=True, minimum=1, maximum=10_000),
        latest_only={True: "true", False: "false"}.get(latest, "auto") if isinstance(latest, bool) else latest,
        stall_timeout_ms=V.number(rm, "stall_timeout_ms", "run", 1000.0, minimum=0, exclusive_min=True,
                                  maximum=_DAY_MS),
        overlap_model=V.boolean(rm, "overlap_model", "run", True),
    )

    # latency -------------------------------------------------------------------------------------
    lm = V.mapping(top.get("latency"), "latency", ("budget_ms", "steps_ms", "window", "counters_only",
                                                   "warmup_sets")) or {}
    steps_ms: dict[str, float] = {}
    if lm.get("steps_ms") is not None:
        steps = lm["steps_ms"]
        sp = V.mapping(steps, "latency.steps_ms", tuple(steps) if isinstance(steps, Mapping) else ())
        for k in (sp or {}):
            val = V.number(sp, k, "latency.steps_ms", None, minimum=0, exclusive_min=True, maximum=_DAY_MS)
            if val is not None:
                steps_ms[str(k)] = val
    latency = LatencyConfig(
        budget_ms=V.number(lm, "budget_ms", "latency", None, minimum=0, exclusive_min=True, allow_none=True,
                           maximum=_DAY_MS),
        steps_ms=MappingProxyType(steps_ms),
        window=V.number(lm, "window", "latency", 100, integer=True, minimum=1, maximum=10_000_000),
        counters_only=V.boolean(lm, "counters_only", "latency", False),
        warmup_sets=V.number(lm, "warmup_sets", "latency", 2, integer=True, minimum=0, maximum=_MAX_FRAMES),
    )

    # outputs -------------------------------------------------------------------------------------
    om = V.mapping(top.get("outputs"), "outputs", ("dir", "metrics", "trace", "trace_max_events", "plots", "dumps",
                                                   "prometheus")) or {}
    out_dir_v = V.string(om, "dir", "outputs", "out/{name}")
    out_dir = os.path.abspath(os.path.expanduser(out_dir_v.replace("{name}", name or "deployment")))

    def out_file(key: str, default_name: str) -> Optional[str]:
        v = om.get(key, False)
        if v is False or v is None:
            return None
        if v is True:
            return os.path.join(out_dir, default_name)
        if isinstance(v, str) and v:
            return v if os.path.isabs(v) else os.path.join(out_dir, v)
        V.err(f"outputs.{key}", f"expected true, false or a path, got {_show(v)}")
        return None

    dumps = om.get("dumps", False)
    dumps_every = dumps_max = 0
    if dumps not in (False, None):
        dm = V.mapping(dumps if dumps is not True else {}, "outputs.dumps", ("every", "max"))
        if dm is not None:
            dumps_every = V.number(dm, "every", "outputs.dumps", 1, integer=True, minimum=1, maximum=_MAX_FRAMES)
            dumps_max = V.number(dm, "max", "outputs.dumps", 10, integer=True, minimum=1, maximum=1_000_000)
    prom_port, prom_addr = None, "127.0.0.1"
    prom = om.get("prometheus")
    if prom is not None and prom is not False:
        pm_ = prom if isinstance(prom, Mapping) else {"port": prom}
        pmv = V.mapping(pm_, "outputs.prometheus", ("port", "addr"), required=("port",))
        if pmv is not None:
            prom_port = V.number(pmv, "port", "outputs.prometheus", None, integer=True, minimum=1, maximum=65535)
            prom_addr = V.string(pmv, "addr", "outputs.prometheus", "127.0.0.1")
    outputs = OutputsConfig(dir=out_dir, metrics=V.boolean(om, "metrics", "outputs", True),
                            trace=out_file("trace", "trace.json"), plots=out_file("plots", "plots"),
                            dumps_every=dumps_every, dumps_max=dumps_max, prometheus_port=prom_port,
                            prometheus_addr=prom_addr,
                            trace_max_events=V.number(om, "trace_max_events", "outputs", None, integer=True, minimum=1,
                                                      maximum=100_000_000, allow_none=True))

    # target (the Ascend SoC and CANN version DVPP steps are planned against; default: detected) ---
    target = None
    tm = V.mapping(top.get("target"), "target", ("soc", "cann"), required=("soc", "cann")) if top.get(
        "target") is not None else None
    if tm is not None and "soc" in tm and "cann" in tm:
        try:
            target = Target(soc=str(tm["soc"]), cann=str(tm["cann"]))
        except ConfigError as e:
            field_name, _, msg = str(e).partition(": ")
            V.err(f"target.{field_name.split('.')[-1]}" if msg else "target", msg or str(e))

    model = _parse_model(top["model"], V, target) if top.get("model") is not None else None

    # cross-field checks ------------------------------------------------------------------------
    if rig is not None and (pipeline.profile is not None or pipeline.mmdet3d_config is not None):
        sizes = {(c.width, c.height) for c in rig.cameras}
        if len(sizes) > 1:
            V.err("pipeline.profile" if pipeline.profile is not None else "pipeline.mmdet3d_config",
                  f"profile {pipeline.profile or 'of the mmdet3d config'} needs every camera at one size; the rig mixes "
                  + ", ".join(f"{c.name} {c.width}x{c.height}" for c in rig.cameras)
                  + " (use a stage list with resize/pad to one size)")

    infos = [c for c in cameras if c.source.type == "infos"]
    if infos and rig is not None and not V.errors:  # an info file's samples and calibration (sources.infos)
        from ..mmdet3d import open_info_file
        from .sources.infos import calibration_problem, sync_problem

        by_file: dict[tuple, list[str]] = {}
        for c in infos:
            key = c.source.options.get("camera") or c.name
            by_file.setdefault((c.source.uri, c.source.options.get("data_root")), []).append(key)
            info = open_info_file(c.source.uri, c.source.options.get("data_root"))
            first = next(s["cameras"][key] for s in info.samples if key in s["cameras"])
            problem = calibration_problem(rig[c.name], first, f" ({key}, first sample)")
            if problem:
                V.err(f"rig ({rig_path})" if rig_path else "rig", problem)
        for (uri, root), keys in by_file.items():
            problem = sync_problem(*open_info_file(uri, root).camera_spread_ns(keys), sync.tolerance_ms)
            if problem:
                V.warnings.append(f"sync.tolerance_ms: {problem}")
    live_cams = [c.name for c in cameras if c.source.live]
    recorded = [c.name for c in cameras if not c.source.live]
    if live_cams and recorded and not run.realtime:
        V.warnings.append(f"{', '.join(recorded)} read recordings as fast as possible next to live cameras "
                          f"({', '.join(live_cams)}); set run.realtime: true to replay them at their capture rate")
    if V.errors:
        raise DeploymentError(list(dict.fromkeys(V.errors)), where)
    assert rig is not None
    return Deployment(name=name, rig=rig, pipeline=pipeline, cameras=tuple(cameras), sync=sync, run=run,
                      latency=latency, outputs=outputs, decode=decode, model=model, target=target,
                      description=description,
                      path=str(path.resolve()) if path else None, rig_path=rig_path, warnings=tuple(V.warnings))


def _rig_from(data: Any, path: str, V: _V) -> Optional[Rig]:
    try:
        return Rig.from_dict(data)
    except ConfigError as e:
        msg = str(e)
        for part in msg.split("; "):
            field_path, sep, rest = part.partition(": ")
            if sep and re.match(r"^[\w\[\].]+$", field_path):
                V.err(f"{path}.{field_path}", rest)
            else:
                V.err(path, part)
        return None


# ------------------------------------------------------------------ probing file sources (validate)
#: FFmpeg codec name -> camera encoding, for the rules of sources/video.py ``AvStream._open``
_FFMPEG_ENCODING = {"h264": "h264", "hevc": "h265", "mjpeg": "jpeg"}


def _video_header(uri: str, upath: str, V: _V, fmt: Optional[str] = None) -> Optional[tuple[str, str]]:
    """``(codec, container format)`` of the first video stream of ``uri`` (header only), or None after
    reporting why it cannot be read."""
    try:
        import av
    except ImportError as e:  # pragma: no cover - av is a core dependency
        V.err(upath, f"PyAV is needed to check video sources: {e}")
        return None
    try:
        with av.open(uri, format=fmt) as container:
            if not container.streams.video:
                V.err(upath, f"{uri} has no video stream")
                return None
            return container.streams.video[0].codec_context.name, container.format.name
    except (av.error.FFmpegError, OSError, ValueError) as e:
        if fmt is not None or not isinstance(e, av.error.InvalidDataError):
            V.err(upath, f"cannot read {uri} as video: {getattr(e, 'strerror', None) or e}")
            return None
        raise


def _probe_video(uri: str, upath: str, V: _V, camera_name: str, encoding: str) -> None:
    """The rules ``dvpipe run`` applies when it opens a video file: h264/h265 cameras need that codec,
    jpeg cameras MJPEG, raw cameras any video stream."""
    import av

    try:
        header = _video_header(uri, upath, V)
    except av.error.InvalidDataError:
        V.err(upath, f"{uri} is not a video file FFmpeg can read")
        return
    if header is None:
        return
    codec, _fmt = header
    found = _FFMPEG_ENCODING.get(codec)
    if encoding != "raw" and found != encoding:
        V.err(upath, f"{uri} is {codec} video but camera {camera_name} declares encoding {encoding} "
                     "(declare the stream's codec, or raw to decode it in the source)")


def _probe_elementary(uri: str, upath: str, V: _V, codec: str) -> None:
    """An Annex B file must hold ``codec``: FFmpeg's own detection must not find another codec or a
    container; a file it cannot detect must at least open as ``codec`` (as ``dvpipe run`` opens it)."""
    import av

    try:
        header = _video_header(uri, upath, V)
    except av.error.InvalidDataError:  # not detected: run forces the format, so try that
        _video_header(uri, upath, V, fmt="h264" if codec == "h264" else "hevc")
        return
    if header is None:
        return
    found, fmt = header
    if fmt not in ("h264", "hevc") or _FFMPEG_ENCODING.get(found) != codec:
        V.err(upath, f"{uri} holds {found} video ({fmt} format), not an Annex B {codec} elementary stream")


def _warn_shared_images(cameras: Sequence["CameraConfig"], V: "_V") -> None:
    """Warn when one image file belongs to several cameras' sequences (``pattern: '*CAM_FRONT*'`` also
    matches ``CAM_FRONT_LEFT.jpg``): each camera would read the other's frames."""
    from .sources.images import scan_images

    owners: dict[str, list[str]] = {}
    for c in cameras:
        if c.source.type != "images" or not c.source.uri:
            continue
        try:
            files = scan_images(c.source.uri, c.source.options.get("pattern"))
        except (OSError, ValueError):
            continue
        for f in files:
            owners.setdefault(os.path.realpath(f), []).append(c.name)
    shared = {f: names for f, names in owners.items() if len(names) > 1}
    if shared:
        f, names = next(iter(shared.items()))
        more = f" (and {len(shared) - 1} more file{'s' if len(shared) > 2 else ''})" if len(shared) > 1 else ""
        V.warnings.append(f"{f} is in the image sequences of {', '.join(names)}{more}: each of those cameras would "
                          "read it; make the patterns distinct (e.g. pattern: '*__{camera}__*.jpg')")


def _probe_images(uri: str, pattern: Optional[str], upath: str, V: _V, camera_name: str, encoding: str) -> None:
    """The folder or glob has images, and the first one (by name) is of the declared ``encoding``."""
    from ..codecs import sniff
    from .sources.images import scan_images

    try:
        files = scan_images(uri, pattern)
    except (OSError, ValueError) as e:
        V.err(upath, f"cannot list {uri}: {getattr(e, 'strerror', None) or e}")
        return
    if not files:
        V.err(upath, f"no images in {uri}" + (f" matching {pattern}" if pattern else ""))
        return
    try:
        with open(files[0], "rb") as f:
            head = f.read(16)
    except OSError as e:
        V.err(upath, f"cannot read {files[0]}: {e.strerror or e}")
        return
    found = sniff(head)
    if found != encoding:
        V.err(upath, f"{files[0]} is {'a ' + found.upper() if found else 'neither JPEG nor PNG'} but camera "
                     f"{camera_name} declares encoding {encoding}")


# ------------------------------------------------------------------------ outputs (validate)
_NAME_MAX = 255  # bytes of one path component (Linux, macOS, Windows)


def output_problems(outputs: OutputsConfig) -> list[tuple[str, str]]:
    """``(key path, message)`` for each output folder a run could not create or write into.

    Checks without leaving anything behind: missing folders are not created (their nearest existing
    ancestor must be a writable folder), and writing is tried with an anonymous temporary file.
    """
    wanted: list[tuple[str, str]] = []
    if outputs.dir and (outputs.metrics or outputs.dumps_every):
        wanted.append(("outputs.dir", outputs.dir))
    if outputs.trace:
        wanted.append(("outputs.trace", os.path.dirname(outputs.trace) or "."))
    if outputs.plots:
        wanted.append(("outputs.plots", outputs.plots))
    problems = []
    for key, folder in wanted:
        problem = _folder_problem(folder)
        if problem is not None:
            problems.append((key, problem))
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
