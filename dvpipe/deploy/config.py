"""Deployment YAML: the schema, and :func:`load_deployment`, which validates it in named steps.

The parts live in modules of one job each, re-exported here: the frozen objects the runner uses
(:mod:`._schema`: :class:`Deployment`, :class:`SourceConfig`...), the validator primitives
(:mod:`._validate`: ``_V``, :class:`DeploymentError`), one camera's ``source:`` mapping
(:mod:`._sources`, with each type's keys and checks on its class: :mod:`.sources.registry`) and the
output-folder checks (:mod:`._outputs`).

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
    plugins: [mypkg.sources, my_source.py]  # imported first: modules that register source types
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
      pictures_per_job: auto | N       # recordings, not realtime: a worker decodes up to N consecutive pictures
                                       #   of one camera (sets started N ahead): faster, each set's latency longer;
                                       #   auto: 24 for H.264/H.265 recordings up to 1920x1088 with no latency
                                       #   budget on the CPU (fewer above 1 GiB of ring), else 1
      memory_budget_mb: auto           # host memory the run may plan for (default: half of this machine's);
                                       #   cameras x output buffers beyond it are refused before anything is read
    latency:
      budget_ms: 100                   # end to end (capture -> output)
      steps_ms: {decode: 10}
      window: 100
      counters_only: false             # true: count/sum/max per step only (cheapest; no percentiles of steps)
      warmup_sets: 2                   # first frame sets left out of the statistics (counted separately)
      profiler_ranges: false           # true: each step span also a range in msproftx / NVTX / torch.profiler
    outputs:
      dir: out/{name}
      metrics: true                    # latency.json + summary.json
      # then one key per exporter (dvpipe.deploy.exporters), its options or a short form:
      trace: false | true | PATH | {path: PATH, max_events: N}  # Chrome/Perfetto trace
      plots: false | true | DIR
      dumps: false | {every: N, max: M}
      prometheus: PORT | {port: PORT, addr: 127.0.0.1}  # /metrics (dvpipe[prometheus]); addr 0.0.0.0 exposes it
      report: false | true | PATH      # the one-page HTML report
    decode:
      on_corrupt: drop | flag          # a frame the decoder reports damaged: a `corrupt` drop, or kept and flagged
      max_pixels: 64000000             # largest decoded frame (width x height, pixels); a larger camera is an error
      max_bytes: auto                  # largest image file read (bytes; default 8 x max_pixels + 16 MiB): a
                                       #   larger file is not read, it is a `too_large` drop
    model: module:callable | file.py:callable | {entry: ..., path: DIR, init: {...}}
         | {type: om, path: model.om, device: 0, backend: dvpp|dvpp-sim, target: {...}, aipp: PATH}  # docs/models.md
    target: {soc: Ascend310P3, cann: 7.0.0}   # DVPP steps are planned against it (default: detected)

SOURCE (``type`` required; each registered type's keys: :mod:`dvpipe.deploy.sources`, the table in
docs/deployments.md)::

    {type: images, uri: DIR|GLOB, pattern: "*__{camera}__*.jpg", timestamps: filename|sidecar|fps,
     unit: auto|ns|us|ms|s, sidecar: FILE, fps: 10, start_ns: INT, max_file_bytes: INT}
    {type: video, uri: FILE.mp4, start_ns: INT, lookahead: 16, stream: 0}
    {type: elementary, uri: FILE.h264, codec: h264|h265, fps: 30, start_ns: INT, lookahead: 32}
    {type: rtsp, uri: rtsp[s]://HOST/PATH, transport: tcp|udp, open_timeout_s: 5, read_timeout_s: 2, lookahead: 0,
     reconnect: {initial_ms: 250, max_ms: 5000, factor: 2, attempts: 0}, stall_reconnect_s: 10,
     client: dvpipe|ffmpeg, tls_verify: true, ca_file: CA.pem}
    {type: v4l2, uri: /dev/video0, fps: 30, size: [W, H], stall_reconnect_s: 10, reader: dvpipe|ffmpeg,
     input_format: mjpeg}
    {type: synthetic, fps: 30, resolution: [W, H], cycle: 16, quality: 90, frames: N, start_ns: INT,
     realtime: true}
    {type: infos, uri: nuscenes_infos_temporal_val.pkl, data_root: DIR, camera: CAM_FRONT, max_file_bytes: INT}
                                       # an mmdet3d info file (.pkl, restricted unpickler; or .json): each
                                       # sample is a frame set, the camera's images at their own timestamps;
                                       # camera: the file's key (default: the rig camera's name)
    common: offset_ms: 0 (added to capture times), faults: FAULTS (testing; see sources.faults)

A source type from user code: a ``Source`` subclass with ``@dvpipe.register_source("type")`` in a
module the deployment names under ``plugins:`` (imported before the sources are read).

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

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Optional, Sequence

from ..codecs import DEFAULT_MAX_PIXELS, VIDEO_ENCODINGS
from ..errors import ConfigError
from ..plugins import import_entry
from ..target import Target
from ..types import Rig, check_one_size, short_repr as _show
from ._budget import MAX_PICTURES_PER_JOB, camera_problem
from ._outputs import output_problems
from ._schema import (ON_CORRUPT, ON_LATE, CameraConfig, DecodeConfig, Deployment, Faults, LatencyConfig,
                      ModelConfig, OutputsConfig, PipelineConfig, RunConfig, SourceConfig, SyncConfig)
from ._sources import parse_source
from ._validate import (_DAY_MS, _MAX_FILE_BYTES_LIMIT, _MAX_FRAMES, _MAX_PIXELS_LIMIT, _NUMBER_MAX, _V, _YEAR_S,
                        DeploymentError, _kind)

#: the smallest latency budget (ms): 1 ns, what the statistics count in (a smaller one would round to 0)
_MIN_BUDGET_MS = 1e-6

__all__ = [
    "Deployment", "CameraConfig", "SourceConfig", "PipelineConfig", "SyncConfig", "RunConfig",
    "LatencyConfig", "OutputsConfig", "DecodeConfig", "ModelConfig", "Faults", "DeploymentError", "load_deployment",
    "parse_backends", "import_entry",
    "SOURCE_TYPES", "ON_LATE", "ON_CORRUPT", "VIDEO_ENCODINGS", "DEFAULT_MAX_PIXELS", "output_problems",
]


def __getattr__(name: str) -> Any:
    """``SOURCE_TYPES``: the registered source types, now (built-in ones and any a plugin added)."""
    if name == "SOURCE_TYPES":
        from .sources import SOURCES

        return tuple(SOURCES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------- backends, stages, model, decode

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
    """``{YAML name: stage class}`` from the stage registry (:func:`dvpipe.register_stage`): the built-ins and
    every stage a module imported so far (``plugins:``, ``module:Class``) registered."""
    from ..stages.stage_registry import yaml_names

    return yaml_names()


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
    params: Any  # a YAML value: checked below
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


def _exit_at_import(what: str, e: SystemExit) -> str:
    """The problem line of a module that called ``sys.exit()`` (raised ``SystemExit``) while imported."""
    return (f"cannot import {what}: it called sys.exit({e.code!r}) while being imported; a module that registers "
            "sources or stages must not exit (move the code under if __name__ == '__main__':)")


def _import_entry(entry: str, path: str, V: _V) -> Any:
    try:
        return import_entry(entry)
    except SystemExit as e:
        V.err(path, _exit_at_import(entry, e))
        return None
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
    init = m.get("init")
    if init is not None and not isinstance(init, Mapping):
        V.err("model.init", f"expected a mapping of keyword arguments, got {_kind(init)}")
        init = None
    init_args = MappingProxyType(dict(init)) if init is not None else None  # {}: the factory called with none
    if entry is not None and _FILE_ENTRY_RE.match(entry):  # path/to/file.py:callable
        file, _, attr = entry.rpartition(":")
        file = V.path(file, "model.entry")
        if V.probe and os.path.isfile(file):
            _check_import(f"{file}:{attr}", None, V)
        return ModelConfig(f"{file}:{attr}", None, init_args)
    if entry is not None and not _ENTRY_RE.match(entry):
        V.err("model.entry", f"expected 'module:callable' or 'path/to/file.py:callable' (for example "
                             f"'mypkg.model:infer'), got {_show(entry)}")
        entry = None
    path = V.string(m, "path", "model", None)
    if path is not None:
        path = V.path(path, "model.path", kind="dir")
    if entry is not None:
        mod = entry.split(":")[0]
        with _on_import_path(path):
            try:
                found = importlib.util.find_spec(mod) is not None
            except (ImportError, ValueError):
                found = False
        if not found:
            V.err("model.entry", f"module {_show(mod)} not found" + (f" (also looked in {path})" if path else ""))
        elif V.probe:
            _check_import(entry, path, V)
    if entry is None:
        return None
    return ModelConfig(entry, path, init_args)


@contextlib.contextmanager
def _on_import_path(path: Optional[str]) -> Iterator[None]:
    """``model.path`` first on ``sys.path`` while validation looks the entry up (removed after, unless it
    was there before)."""
    added = path if path is not None and path not in sys.path else None
    if added is not None:
        sys.path.insert(0, added)
    try:
        yield
    finally:
        if added is not None:
            sys.path.remove(added)


def _check_import(entry: str, path: Optional[str], V: _V) -> None:
    """``dvpipe validate``: import the model's entry as ``dvpipe run`` will (its module runs), so that a missing
    attribute or a syntax error is reported here, at ``model.entry``; its ``init`` is not called."""
    with _on_import_path(path):
        try:
            import_entry(entry)
        except Exception as e:  # noqa: BLE001 - the user's module: any error it raises is the problem to report
            V.err("model.entry", f"cannot import {entry}: {type(e).__name__}: {e}")


_TOP_KEYS = ("version", "name", "description", "plugins", "rig", "pipeline", "encoding", "source", "cameras", "sync",
             "run", "latency", "outputs", "decode", "model", "target")


def _parse_decode(v: Any, V: _V) -> DecodeConfig:
    m = V.mapping(v, "decode", ("on_corrupt", "max_pixels", "max_bytes")) or {}
    return DecodeConfig(
        on_corrupt=V.choice(m, "on_corrupt", "decode", ON_CORRUPT, "drop"),
        max_pixels=V.number(m, "max_pixels", "decode", DEFAULT_MAX_PIXELS, integer=True, minimum=1,
                            maximum=_MAX_PIXELS_LIMIT),
        max_bytes=V.number(m, "max_bytes", "decode", None, integer=True, minimum=1, allow_none=True,
                           maximum=_MAX_FILE_BYTES_LIMIT),
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


# ------------------------------------------------------------------------------ load_deployment
def load_deployment(source: str | os.PathLike | Mapping[str, object], *,
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
    data, path, where = _read(source)
    base = Path(base_dir) if base_dir is not None else (path.resolve().parent if path else Path.cwd())
    V = _V(base, probe=probe)
    top = V.mapping(data, "", _TOP_KEYS, required=("rig", "pipeline"))
    if top is None:
        raise DeploymentError(V.errors, where)
    if top.get("version", 1) != 1:
        V.err("version", f"this dvpipe reads deployment version 1, got {_show(top.get('version'))}")
    _import_plugins(top.get("plugins"), V)
    name = _parse_name(top, path, V)
    description = V.string(top, "description", "", "") or ""
    decode = _parse_decode(top.get("decode"), V)
    V.max_pixels = decode.max_pixels
    V.max_bytes = decode.max_file_bytes
    rig, rig_path = _parse_rig(top.get("rig"), V)
    too_many = camera_problem(len(rig.cameras)) if rig is not None else None
    if too_many is not None:  # before a source per camera is checked: one line, not one per camera
        V.err(f"rig ({rig_path})" if rig_path else "rig", too_many)
        rig = None
    pipeline = _parse_pipeline(top, V)
    rig, cameras = _parse_cameras(top, rig, rig_path, path, V)
    sync = _parse_sync(top.get("sync"), rig, V)
    run = _parse_run(top.get("run"), V)
    latency = _parse_latency(top.get("latency"), V)
    outputs = _parse_outputs(top.get("outputs"), name, V)
    target = _parse_target(top.get("target"), V)
    model = _parse_model(top["model"], V, target) if top.get("model") is not None else None
    _check_across(rig, rig_path, pipeline, cameras, sync, run, V)
    if V.errors:
        raise DeploymentError(list(dict.fromkeys(V.errors)), where)
    assert rig is not None
    return Deployment(name=name, rig=rig, pipeline=pipeline, cameras=tuple(cameras), sync=sync, run=run,
                      latency=latency, outputs=outputs, decode=decode, model=model, target=target,
                      description=description,
                      path=str(path.resolve()) if path else None, rig_path=rig_path, warnings=tuple(V.warnings))


# ------------------------------------------------------------------------- the steps, in order
def _read(source: str | os.PathLike | Mapping[str, Any]) -> tuple[Any, Optional[Path], str]:
    """``(content, the file's path or None, what to call it in errors)``."""
    from ..types import read_yaml

    if isinstance(source, Mapping):
        return dict(source), None, "deployment"
    if not os.fspath(source):  # Path("") is ".": the folder would be blamed for a missing name
        raise DeploymentError([("", "no deployment file named (an empty path)")], "''")
    path = Path(source)
    try:
        data = read_yaml(path, "deployment file")
    except ConfigError as e:
        raise DeploymentError([("", e.message)], str(path)) from None
    return ({} if data is None else data), path, str(path)


def _import_plugins(v: Any, V: _V) -> None:
    """``plugins: [module, path/to/file.py, ...]``: imported before the sources are read, so that the
    source types they register (``@dvpipe.register_source``) can be used. A file is imported once
    per process (by its absolute path); relative paths are relative to the YAML file."""
    if v is None:
        return
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, Sequence) or isinstance(v, str):
        V.err("plugins", f"expected a list of modules or .py files, got {_kind(v)}")
        return
    for i, item in enumerate(v):
        p = f"plugins[{i}]"
        if not isinstance(item, str) or not item:
            V.err(p, f"expected a module name or a .py file, got {_show(item)}")
            continue
        try:
            if item.endswith(".py"):
                file = V.path(item, p)
                if os.path.isfile(file):
                    _import_file(file)
            elif re.match(r"^[A-Za-z_][\w.]*$", item):
                importlib.import_module(item)
            else:
                V.err(p, f"expected a module name (mypkg.sources) or a .py file, got {_show(item)}")
        except SystemExit as e:  # sys.exit() at import: not dvpipe's exit status, a problem of the module
            V.err(p, _exit_at_import(item, e))
        except Exception as e:  # noqa: BLE001 - any failure of a user's module is a problem at its key
            V.err(p, f"cannot import {item}: {type(e).__name__}: {e}")


def _import_file(file: str) -> Any:
    """Import the Python file ``file`` once per process (``sys.modules`` key: ``dvpipe_plugin_<hash>``)."""
    import hashlib

    key = "dvpipe_plugin_" + hashlib.sha1(os.path.realpath(file).encode()).hexdigest()[:12]
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"{file} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module


def _parse_name(top: Mapping, path: Optional[Path], V: _V) -> str:
    name = V.string(top, "name", "", path.stem if path else "deployment")
    if name and (any(ch in name for ch in "/\\\0") or ".." in name or name.startswith(".")):
        V.err("name", f"{_show(name)} cannot name output folders (out/{{name}}): no '/', '\\', NUL or '..', "
                      "not starting with '.'")
        name = "deployment"
    return name


def _parse_rig(rig_v: Any, V: _V) -> tuple[Optional[Rig], Optional[str]]:
    """``(rig, its file's absolute path or None when inline)``; rig None after a problem."""
    from ..types import read_yaml

    rig: Optional[Rig] = None
    rig_path: Optional[str] = None
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
    else:  # null too: "rig:" with nothing after it
        V.err("rig", f"expected a rig file path or an inline rig {{cameras: [...]}}, got {_kind(rig_v)}")
    return rig, rig_path


def _parse_pipeline(top: Mapping, V: _V) -> PipelineConfig:
    pm = V.mapping(top.get("pipeline"), "pipeline",
                   ("profile", "stages", "mmdet3d_config", "skip", "fidelity", "backends", "threads", "fallback"))
    if pm is None or "pipeline" not in top:
        return PipelineConfig()
    profile = V.string(pm, "profile", "pipeline", None)
    stages = _parse_stages(pm["stages"], "pipeline.stages", V) if "stages" in pm else None
    mm = V.path(str(pm["mmdet3d_config"]), "pipeline.mmdet3d_config") if "mmdet3d_config" in pm else None
    skip = tuple(str(x) for x in (pm.get("skip") or ()))
    if [profile is not None, "stages" in pm, "mmdet3d_config" in pm].count(True) != 1:
        V.err("pipeline", "needs exactly one of 'profile' (bevformer-tiny, ...), 'stages' (a list) or "
              "'mmdet3d_config' (a model's .py config)")
    mapped = None
    if mm is not None:
        from ..mmdet3d import profile_from_config

        try:
            mapped = profile_from_config(mm, skip=skip)  # read once: kept for the pipeline
        except ConfigError as e:
            V.err("pipeline.mmdet3d_config", str(e))
    if profile is not None:
        from ..profiles import PROFILES

        if profile not in PROFILES:
            V.err("pipeline.profile", f"unknown profile {_show(profile)}; known: {', '.join(PROFILES)}")
    backends = _parse_backends(pm["backends"], "pipeline.backends", V) if "backends" in pm else ("auto",)
    return PipelineConfig(
        profile=profile, stages=stages, mmdet3d_config=mm, skip=skip, mapped=mapped,
        fidelity=V.choice(pm, "fidelity", "pipeline", ("reference", "fast"), "reference"),
        backends=backends or ("cpu",),
        threads=V.number(pm, "threads", "pipeline", None, integer=True, minimum=1, allow_none=True, maximum=1024),
        fallback=V.choice(pm, "fallback", "pipeline", ("next", "error"), "next"),
    )


def _camera_entries(top: Mapping, rig: Optional[Rig], V: _V) -> dict[str, tuple[int, Mapping]]:
    """The ``cameras:`` list by camera name: ``{name: (index in the list, its mapping)}``."""
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
    return entries


def _apply_encodings(top: Mapping, rig: Rig, entries: Mapping[str, tuple[int, Mapping]], V: _V) -> Rig:
    """The rig with the deployment's ``encoding`` (top level, then per camera) over the rig file's."""
    from dataclasses import replace as _replace

    from ..types import ENCODINGS

    default_enc = V.choice(top, "encoding", "", ENCODINGS, None)
    changed = []
    for cam in rig.cameras:
        idx, m = entries.get(cam.name, (None, {}))
        enc = V.choice(m, "encoding", f"cameras[{idx}]", ENCODINGS, None) if idx is not None else None
        enc = enc or default_enc
        changed.append(_replace(cam, encoding=enc) if enc and enc != cam.encoding else cam)
    return Rig(tuple(changed), name=rig.name)


def _parse_cameras(top: Mapping, rig: Optional[Rig], rig_path: Optional[str], path: Optional[Path],
                   V: _V) -> tuple[Optional[Rig], list[CameraConfig]]:
    """``(the rig with the deployment's encodings, a CameraConfig per rig camera that has a source)``."""
    entries = _camera_entries(top, rig, V)
    if rig is None:
        return None, []
    rig = _apply_encodings(top, rig, entries, V)
    default_source = top.get("source")
    cameras: list[CameraConfig] = []
    for cam in rig.cameras:
        idx, m = entries.get(cam.name, (None, {}))
        rig_image = cam.extra.get("image")
        if rig_image is not None and (default_source is not None or (idx is not None and "source" in m)):
            V.warnings.append(f"rig camera {cam.name}: its image: {rig_image} and capture_time_ns are not used "
                              "(the deployment gives the camera a source)")
        if idx is not None and "source" in m:
            src = parse_source(m["source"], f"cameras[{idx}].source", V, cam.name, cam.encoding,
                               (cam.height, cam.width))
        elif default_source is None and rig_image is not None:  # a one-sample rig: its frame is the source
            src = _rig_image_source(rig, cam, rig_image, rig_path, path, V)
        elif default_source is not None:
            src = parse_source(default_source, "source", V, cam.name, cam.encoding, (cam.height, cam.width))
        else:
            V.err("cameras" if idx is None else f"cameras[{idx}].source",
                  f"camera {cam.name} has no source (give it one under cameras, or a default 'source')")
            src = None
        backends = _parse_backends(m["backends"], f"cameras[{idx}].backends", V) if "backends" in m else None
        if src is not None:
            cameras.append(CameraConfig(cam.name, src, backends))
    return rig, cameras


def _rig_image_source(rig: Rig, cam: Any, rig_image: str, rig_path: Optional[str], path: Optional[Path],
                      V: _V) -> Optional[SourceConfig]:
    """A one-sample rig camera's ``image:`` (at its ``capture_time_ns``) as its source."""
    base = os.path.dirname(rig_path) if rig_path else (str(path.parent) if path else os.getcwd())
    image = rig_image if os.path.isabs(rig_image) else os.path.join(base, rig_image)
    if not os.path.isfile(image):
        V.err(f"rig ({rig_path or 'inline'}).cameras[{rig.index(cam.name)}].image", f"file not found: {image}")
        return None
    opts = {"pattern": None, "timestamps": "rig", "unit": "ns", "sidecar": None, "fps": None,
            "start_ns": None, "capture_epoch_ns": cam.extra.get("capture_time_ns", 0),
            "max_file_bytes": V.max_bytes}  # decode.max_bytes, as an images source gets it
    return SourceConfig("images", os.path.abspath(image), MappingProxyType(opts))


def _parse_sync(v: Any, rig: Optional[Rig], V: _V) -> SyncConfig:
    sm = V.mapping(v, "sync", ("tolerance_ms", "on_late", "deadline_ms", "max_reuse_age_ms", "anchor")) or {}
    rig_names = rig.names if rig is not None else ()
    anchor = V.string(sm, "anchor", "sync", "earliest")
    if anchor != "earliest" and rig is not None and anchor not in rig_names:
        V.err("sync.anchor", f"expected 'earliest' or a camera of the rig ({', '.join(rig_names)}), got {_show(anchor)}")
        anchor = "earliest"
    return SyncConfig(
        tolerance_ms=V.number(sm, "tolerance_ms", "sync", 25.0, minimum=0, maximum=_DAY_MS),
        on_late=V.choice(sm, "on_late", "sync", ON_LATE, "mask"),
        deadline_ms=V.number(sm, "deadline_ms", "sync", 100.0, minimum=0, maximum=_DAY_MS),
        max_reuse_age_ms=V.number(sm, "max_reuse_age_ms", "sync", 500.0, minimum=0, maximum=_DAY_MS),
        anchor=anchor,
    )


def _parse_run(v: Any, V: _V) -> RunConfig:
    rm = V.mapping(v, "run", ("frames", "duration_s", "loop", "realtime", "speed", "queue_size",
                              "latest_only", "stall_timeout_ms", "overlap_model", "memory_budget_mb",
                              "pictures_per_job")) or {}
    latest = rm.get("latest_only", "auto")
    if not (latest == "auto" or isinstance(latest, bool)):
        V.err("run.latest_only", f"expected auto, true or false, got {_show(latest)}")
        latest = "auto"
    return RunConfig(
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
        memory_budget_mb=_auto_or_number(rm, "memory_budget_mb", V, minimum=0, exclusive_min=True),
        pictures_per_job=_auto_or_number(rm, "pictures_per_job", V, integer=True, minimum=1,
                                         maximum=MAX_PICTURES_PER_JOB),
    )


def _auto_or_number(rm: Mapping, key: str, V: _V, **limits: Any) -> Any:
    """``run.<key>``: None for ``auto`` (or absent), else a number within ``limits`` (as :meth:`_V.number`)."""
    v = rm.get(key)
    if v == "auto":
        return None
    if isinstance(v, str):
        V.err(f"run.{key}", f"expected auto or a number, got {_show(v)}")
        return None
    return V.number(rm, key, "run", None, allow_none=True, **limits)


def _parse_latency(v: Any, V: _V) -> LatencyConfig:
    lm = V.mapping(v, "latency", ("budget_ms", "steps_ms", "window", "counters_only", "warmup_sets",
                                  "profiler_ranges")) or {}
    steps_ms: dict[str, float] = {}
    if lm.get("steps_ms") is not None:
        steps = lm["steps_ms"]
        sp = V.mapping(steps, "latency.steps_ms", tuple(steps) if isinstance(steps, Mapping) else ())
        for k in (sp or {}):
            assert sp is not None  # the loop is empty otherwise
            val = V.number(sp, k, "latency.steps_ms", None, minimum=_MIN_BUDGET_MS, maximum=_DAY_MS)
            if val is not None:
                steps_ms[str(k)] = val
    return LatencyConfig(
        budget_ms=V.number(lm, "budget_ms", "latency", None, minimum=_MIN_BUDGET_MS, allow_none=True,
                           maximum=_DAY_MS),
        steps_ms=MappingProxyType(steps_ms),
        window=V.number(lm, "window", "latency", 100, integer=True, minimum=1, maximum=10_000_000),
        counters_only=V.boolean(lm, "counters_only", "latency", False),
        warmup_sets=V.number(lm, "warmup_sets", "latency", 2, integer=True, minimum=0, maximum=_MAX_FRAMES),
        profiler_ranges=V.boolean(lm, "profiler_ranges", "latency", False),
    )


def _parse_outputs(v: Any, name: str, V: _V) -> OutputsConfig:
    """``outputs:``: the folder and ``metrics``, then each registered exporter's key, read from its
    ``Options`` by the generic option validator (:mod:`dvpipe.deploy.exporters`), the built-ins' as
    any user exporter's: ``OutputsConfig.exporters[name]``."""
    from .exporters import output_keys, parse_exporter_options

    om = V.mapping(v, "outputs", output_keys()) or {}
    out_dir_v = V.string(om, "dir", "outputs", "out/{name}")
    other = sorted(set(re.findall(r"\{[^{}]*\}", out_dir_v)) - {"{name}"})
    if other:  # a typo of {name} would become a folder of that name
        V.err("outputs.dir", f"unknown placeholder {', '.join(other)} (the one there is: {{name}}, the "
                             "deployment's name)")
    out_dir = os.path.abspath(os.path.expanduser(out_dir_v.replace("{name}", name or "deployment")))
    on, presets = parse_exporter_options(om, V)
    return OutputsConfig(dir=out_dir, metrics=V.boolean(om, "metrics", "outputs", True),
                         exporters=MappingProxyType(on), presets=MappingProxyType(presets))


def _parse_target(v: Any, V: _V) -> Optional[Target]:
    """The Ascend SoC and CANN version DVPP steps are planned against (None: detected at run time)."""
    if v is None:
        return None
    tm = V.mapping(v, "target", ("soc", "cann"), required=("soc", "cann"))
    if tm is None or "soc" not in tm or "cann" not in tm:
        return None
    try:
        return Target(soc=str(tm["soc"]), cann=str(tm["cann"]))
    except ConfigError as e:
        field_name, _, msg = str(e).partition(": ")
        V.err(f"target.{field_name.split('.')[-1]}" if msg else "target", msg or str(e))
        return None


def _check_across(rig: Optional[Rig], rig_path: Optional[str], pipeline: PipelineConfig,
                  cameras: Sequence[CameraConfig], sync: SyncConfig, run: RunConfig, V: _V) -> None:
    """Checks across sections: one size for a profile, each source type's checks across its cameras,
    recordings read next to live cameras."""
    if rig is not None and (pipeline.profile is not None or pipeline.mmdet3d_config is not None):
        try:  # the rule Pipeline.from_profile applies, said at load
            check_one_size(rig.cameras, f"profile {pipeline.profile or 'of the mmdet3d config'}")
        except ConfigError as e:
            V.err("pipeline.profile" if pipeline.profile is not None else "pipeline.mmdet3d_config", str(e))
    if rig is not None and not V.errors:
        _check_types(rig, rig_path, cameras, sync, V)
    infos = [c.name for c in cameras if c.source.type == "infos"]
    if infos and any(getattr(st, "op", "") == "undistort" for st in (pipeline.stages or ())):
        # the info file's per-sample calibration replaces the rig's in the metas: it would replace K' too
        V.err("pipeline.stages", f"undistort with an info-file source ({', '.join(infos)}) is not supported: the "
                                 "metas take each sample's intrinsics from the info file, not the undistorted K'; "
                                 "undistort the images offline or use an images source with the rig's calibration")
    live_cams = [c.name for c in cameras if c.source.live]
    recorded = [c.name for c in cameras if not c.source.live]
    if (run.pictures_per_job or 1) > 1 and (live_cams or run.realtime):
        V.err("run.pictures_per_job", "is for recordings read as fast as possible: it starts frame sets ahead and "
                                      "delays each one, which a live or paced run ("
                                      + (f"live cameras {', '.join(live_cams)}" if live_cams else "run.realtime: true")
                                      + ") cannot afford; remove it or set it to 1")
    if live_cams and recorded and not run.realtime:
        V.warnings.append(f"{', '.join(recorded)} read recordings as fast as possible next to live cameras "
                          f"({', '.join(live_cams)}); set run.realtime: true to replay them at their capture rate")


def _check_types(rig: Rig, rig_path: Optional[str], cameras: Sequence[CameraConfig], sync: SyncConfig,
                 V: _V) -> None:
    """Each source type's checks across its cameras (:meth:`dvpipe.deploy.sources.Source.validate_cameras`)."""
    from .sources.registry import SOURCES, DeploymentContext

    ctx = DeploymentContext(rig, f"rig ({rig_path})" if rig_path else "rig", sync, V)
    by_type: dict[str, list[CameraConfig]] = {}
    for c in cameras:
        by_type.setdefault(c.source.type, []).append(c)
    for typ, cams in by_type.items():
        SOURCES[typ].validate_cameras(tuple(cams), ctx)


def _rig_from(data: Any, path: str, V: _V) -> Optional[Rig]:
    try:
        return Rig.from_dict(data)
    except ConfigError as e:
        for part in e.problems:
            field_path, sep, rest = part.partition(": ")
            if sep and re.match(r"^[\w\[\].]+$", field_path):
                V.err(f"{path}.{field_path}", rest)
            else:
                V.err(path, part)
        return None
