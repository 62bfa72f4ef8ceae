"""The frozen objects a validated deployment is made of (:class:`Deployment` and its parts).

:func:`dvpipe.deploy.load_deployment` builds them; the runner, the fleet and the CLI read them.
Nothing here validates: every value is checked before one of these is made.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Optional

from .._typing import Fallback, Fidelity, OnCorrupt, OnLate
from ..codecs import DEFAULT_MAX_PIXELS, FILE_METADATA_BYTES, MAX_BYTES_PER_PIXEL, max_file_bytes  # noqa: F401
from ..target import Target
from ..types import Rig

__all__ = ["Deployment", "CameraConfig", "SourceConfig", "PipelineConfig", "SyncConfig", "RunConfig",
           "LatencyConfig", "OutputsConfig", "DecodeConfig", "ModelConfig", "Faults", "ON_LATE", "ON_CORRUPT"]

ON_LATE = ("mask", "reuse", "drop")
ON_CORRUPT = ("drop", "flag")


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
        resize: ``((seq, (height, width)), ...)``: from ``seq`` on, frames come at this size (pixels; YAML
            writes ``[width, height]``).
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
        type: a registered source type (:data:`dvpipe.deploy.sources.SOURCES`).
        uri: file, folder, glob, device or URL (file paths made absolute), or None (synthetic).
        options: the type's other keys (its ``Options`` fields), validated, defaults filled in
            (read-only mapping).
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
        """True for sources that capture now (RTSP, V4L2, real-time synthetic): the source class says
        (:meth:`dvpipe.deploy.sources.Source.is_live`)."""
        from .sources import SOURCES

        cls = SOURCES.get(self.type)
        return cls is not None and cls.is_live(self.options)

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
    #: the config as read at load (a dvpipe.mmdet3d.MappedConfig): the runner's pipeline is built from it,
    #: not from the file read again
    mapped: Any = field(default=None, compare=False, repr=False)
    fidelity: Fidelity = "reference"
    backends: tuple[str, ...] = ("auto",)
    threads: Optional[int] = None
    fallback: Fallback = "next"


@dataclass(frozen=True)
class SyncConfig:
    """How frames are grouped into frame sets (see :mod:`dvpipe.deploy.sync`)."""

    tolerance_ms: float = 25.0
    on_late: OnLate = "mask"
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
    memory_budget_mb: Optional[float] = None  # host memory the run may plan for (None: half of this machine's)
    #: recordings read as fast as possible: a worker decodes up to this many consecutive pictures of one camera
    #: (frame sets started that far ahead), for cache locality; each set's latency grows (docs/performance.md);
    #: None: auto (:func:`dvpipe.deploy._budget.pictures_per_job`)
    pictures_per_job: Optional[int] = None


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
    profiler_ranges: bool = False  # each step span also a range in msproftx / NVTX / torch.profiler

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
    """What is written where: ``outputs: {dir, metrics, <exporter>: options}``.

    Attributes:
        dir: the output folder (absolute after loading; None: none).
        metrics: write ``summary.json`` and ``latency.json`` into ``dir``.
        exporters: the options of each registered exporter (:mod:`dvpipe.deploy.exporters`) that
            ``outputs:`` names, by name, as its ``Options`` keys (relative paths are relative to
            ``dir``): ``exporters["trace"] == {"path": "trace.json", "max_events": 50000}``.
        presets: options that older keys set for an exporter the deployment leaves off
            (``trace_max_events`` without ``trace``), used when a flag or the runner turns it on.
    """

    dir: Optional[str] = None
    metrics: bool = True
    exporters: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class DecodeConfig:
    """Integrity policy and resource cap of decoding.

    Attributes:
        on_corrupt: ``drop`` (a frame the decoder reports damaged is a drop with reason ``corrupt``)
            or ``flag`` (kept, ``metas[i]["corrupt"] = True``, counted).
        max_pixels: largest decoded frame, in pixels (width x height), checked from the header before
            any buffer is made; a camera declared larger is a configuration error.
        max_bytes: largest encoded image file read, in bytes (None: :func:`max_file_bytes` of
            ``max_pixels``); a larger file is not read: it is a ``too_large`` drop.
    """

    on_corrupt: OnCorrupt = "drop"
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_bytes: Optional[int] = None

    @property
    def max_file_bytes(self) -> int:
        """The cap on an encoded image file, in bytes: ``max_bytes`` or the one ``max_pixels`` implies."""
        return self.max_bytes if self.max_bytes is not None else max_file_bytes(self.max_pixels)


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
        """A copy with ``outputs`` fields changed (``dir=``, ``metrics=``). An exporter's options are
        given to the run instead: ``Runner(dep, outputs={"trace": {"path": "t.json"}})``."""
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

