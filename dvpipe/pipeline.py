"""Pipeline: plan once, then run frame sets through the plan.

``Pipeline(rig, stages, backends=...)`` plans every camera (see :mod:`dvpipe.planner`), allocates
a small ring of output buffers and a thread pool, and ``process(frames)`` runs one frame set:
each camera's steps in a worker thread, writing straight into its slot of the ``(N, 3, H, W)``
batch buffer. A frame that fails becomes a counted drop (``batch.valid[i] = False``, zero image)
while the other cameras are still produced; a step that fails on a frame is retried on the
planned fallback backend first (``fallback="next"``), or raises (``fallback="error"``).
"""
from __future__ import annotations

import importlib
import os
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np

from ._camera_pool import CameraPool, Ticket
from ._typing import BackendName, Fallback, Fidelity, MetasFormat, OnCorrupt, PoseSource, ProfilerRangesSetting, Timing
from .backends import FAMILIES
from .codecs import DEFAULT_MAX_PIXELS, read_frame_bytes
from .device import DeviceBatch
from .errors import ConfigError, FrameError
from .latency.clock import now_ns, to_monotonic_ns
from .latency.profiler_ranges import ProfilerRanges, profiler_ranges as make_profiler_ranges
from .latency.timeline import WORKER_WAIT, Timeline
from .planner import CameraPlan, LiveMeasurements, Plan, PlanStep, plan_pipeline
from .profiles import Profile, camera_order_problem, profile_metas, profile_stages
from .stages.base import Stage
from .stages.kernel_registry import KernelContext
from .types import IDENTITY_3X3, Frame, FrameBatch, PixelFormat, Rig, check_one_size
from .video import VideoPacket


if TYPE_CHECKING:
    from .latency import LatencyStats
    from .mmdet3d import MappedConfig, Mmdet3dMetas
    from .target import Target

__all__ = ["Pipeline", "PendingBatch", "check_one_size"]

#: Exceptions that mean a kernel is wrong rather than that a frame was refused; they propagate.
_PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, AssertionError)

class Pipeline:
    """A planned multi-camera preprocessing pipeline.

    Args:
        rig: the cameras, in batch order.
        stages: stage declarations (``Decode()``, ``Resize(...)``...); ``Batch()`` is appended if missing.
        backends: preference order, e.g. ``("dvpp-sim", "cpu")``; each step runs on the first
            backend whose kernel accepts it, the others in order are its runtime fallback.
        camera_backends: camera name -> that camera's own preference order (the others use ``backends``),
            e.g. ``{"CAM_BACK": ("cpu",)}``; still one batch, so every camera's output must meet in one
            place and size (:func:`~dvpipe.planner.plan_pipeline` says which cameras differ).
        profile: name of the metadata profile for ``batch.metas`` (None: generic metas).
        target: a deployment target (``dvpipe.Target``) that DVPP planning checks rules against.
        fidelity: ``reference`` (match the reference pipeline within float rounding) or ``fast``.
        threads: worker threads across cameras (default: min(cameras, CPU count)).
        fallback: ``next`` (retry a failed step on the next backend, counted) or ``error``.
        output_buffers: size of the ring of reused output buffers; a batch's images stay valid
            until this many later ``process`` calls.
        timing: ``spans`` (every step of every camera on ``batch.timeline``) or ``counters``
            (count, sum and max per step only: the cheapest accounting).
        metas_format, pose: what ``batch.metas`` holds (see :meth:`set_metas_format`).
        on_corrupt: ``drop`` (a frame whose decoder reports damage -- libjpeg warnings, FFmpeg's
            corrupt flag or a decode error -- is a drop) or ``flag`` (the concealed picture is kept
            and its meta says ``corrupt: True`` with ``corrupt_reason``). A frame with no picture
            at all is a drop either way.
        max_pixels: the largest frame (width x height) a camera may declare; checked before any
            buffer is allocated (a frame's header must match its camera's declared size).
        live_cache: measurements made on this Ascend device (``dvpipe.probe.live.planning_cache()``)
            that the planner prefers over the documented DVPP verdicts; None (default): documented only.
        profiler_ranges: also emit every step span as a range to the profiler in use (msproftx via
            pyACL, NVTX, ``torch.profiler.record_function``): ``True`` for every one found, a list
            of names (``["msproftx"]``) for exactly those; see :mod:`dvpipe.latency.profiler_ranges`.
            ``False`` (default): none (``pipe.profiler_ranges`` is None).

    Concurrency: ``process`` runs a set's cameras in parallel; :meth:`submit` starts a set without
    waiting, so that the next set's cameras use the threads the slowest camera of this one leaves idle.
    Sets from several calls or threads are ordered (in the order the calls take the pipeline's lock):
    each camera's frames run one at a time in that order, since the cameras' decoders keep per-camera
    state, and batches are assembled in that order. Each call's batch is correct when it returns; the
    output ring is shared, so a batch stays valid for ``output_buffers`` later calls from any thread.
    """

    def __init__(self, rig: Rig, stages: Sequence[Stage], backends: Sequence[BackendName] | BackendName = ("cpu",), *,
                 camera_backends: Optional[Mapping[str, Sequence[BackendName] | BackendName]] = None,
                 profile: Optional[str | Profile] = None, target: Optional[Target] = None,
                 fidelity: Fidelity = "reference", threads: Optional[int] = None, fallback: Fallback = "next",
                 output_buffers: int = 2, timing: Timing = "spans", on_corrupt: OnCorrupt = "drop",
                 max_pixels: int = DEFAULT_MAX_PIXELS, metas_format: MetasFormat = "per_camera",
                 pose: Optional[PoseSource] = None, live_cache: Optional[LiveMeasurements] = None,
                 profiler_ranges: ProfilerRangesSetting | ProfilerRanges = False):
        if not isinstance(rig, Rig):
            raise ConfigError(f"rig must be a dvpipe.Rig (Rig.from_yaml(path)), got {type(rig).__name__}")
        if fallback not in ("next", "error"):
            raise ConfigError(f"fallback must be 'next' or 'error', got {fallback!r}")
        if timing not in ("spans", "counters"):
            raise ConfigError(f"timing must be 'spans' or 'counters', got {timing!r}")
        self.timing = timing
        if on_corrupt not in ("drop", "flag"):
            raise ConfigError(f"on_corrupt must be 'drop' or 'flag', got {on_corrupt!r}")
        self.on_corrupt = on_corrupt
        if not isinstance(max_pixels, int) or max_pixels < 1:
            raise ConfigError(f"max_pixels must be a positive integer, got {max_pixels!r}")
        for cam in getattr(rig, "cameras", ()):
            if cam.width * cam.height > max_pixels:
                raise ConfigError(f"camera {cam.name} declares {cam.width}x{cam.height} = {cam.width * cam.height} "
                                  f"pixels, above max_pixels={max_pixels} (raise max_pixels if this is intended)")
        if not isinstance(output_buffers, int) or output_buffers < 1:
            raise ConfigError(f"output_buffers must be a positive integer, got {output_buffers!r}")
        self.rig = rig
        self._names = rig.names  # batch order
        self._name_set = frozenset(self._names)
        self.profile = profile
        self.fallback = fallback
        self.plan: Plan = plan_pipeline(rig.cameras, stages, backends, fidelity=fidelity, target=target,
                                        live=live_cache, camera_backends=camera_backends)
        try:  # after planning: a torch backend has imported torch by now
            self.profiler_ranges: Optional[ProfilerRanges] = make_profiler_ranges(profiler_ranges)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self._metas = [profile_metas(profile, cp.metas_camera, cp.img_aug, cp.prepad_size, cp.out_size, stages=stages)
                       for cp in self.plan.cameras]
        for m, cp in zip(self._metas, self.plan.cameras):
            if cp.metas_camera is not cp.camera:  # an Undistort re-projected the image: a sample's own
                m["undistort_k"] = np.array(cp.intrinsics)  # calibration (mmdet3d metas) starts from K'
                m["undistort_k"].setflags(write=False)  # shared by every batch, as the other arrays
        self._buffers = [self._allocate() for _ in range(output_buffers)]
        self._device = getattr(self.plan.cameras[0].steps[-1].stages[-1], "device", None)
        if self._device is not None and str(self._device).startswith("torch:"):  # refused now, not at every batch
            from .backends import availability, resolve

            verdict = availability(resolve(str(self._device)))  # imports torch_npu for torch:npu (its device type)
            if not verdict.ok:
                raise ConfigError(f"Batch(device={self._device!r}): {verdict.reason}")
        self._device_buffers: dict[int, Any] = {}
        self._next_buffer = 0
        self._states: dict[tuple[int, int, str], dict] = {}  # per (camera, step, tag): the kernel's scratch
        self._prepared: dict[tuple[int, int, str], tuple] = {}  # per (camera, step, tag): see _prepare
        n_threads = threads if threads is not None else min(len(rig), os.cpu_count() or 1)
        if not isinstance(n_threads, int) or n_threads < 1:
            raise ConfigError(f"threads must be a positive integer, got {threads!r}")
        self.threads = n_threads
        self._pool = CameraPool(n_threads) if n_threads > 1 else None
        self._lock = threading.Lock()
        # sets start one at a time, in the order the calls take it; notified when a set is collected (its buffer free)
        self._room = threading.Condition()
        self._collecting = threading.Lock()  # and are assembled in that order
        self._uncollected: deque[_SetWork] = deque()  # started, batch not yet assembled (oldest first)
        self._corrupt: list[list[str]] = [[] for _ in self.plan.cameras]  # per camera: its current frame's damage
        self._count = 0
        # batch timelines not yet folded into `latency`: appending is the only per-batch cost
        self._unreported: deque = deque(maxlen=self.LATENCY_BACKLOG)
        self._latency: Optional[LatencyStats] = None
        self._generations = [0] * output_buffers  # writes per output buffer (a stale FrameBatch.images raises)
        self._metas_builder: Optional[Mmdet3dMetas] = None  # metas_format="mmdet3d" (set_metas_format)
        self._metas_format: Optional[tuple[str, Any, str, float, Optional[str]]] = None
        if metas_format != "per_camera" or pose is not None:
            self.set_metas_format(metas_format, pose=pose)

    def __new__(cls, *args, **kwargs):
        # the construction arguments, for pickling: a pipeline holds threads and buffers, so a copy is
        # rebuilt (re-planned) from what built this one
        self = super().__new__(cls)
        self._init_args = (args, dict(kwargs))
        return self

    def __reduce__(self):
        """Pickles as the construction arguments; unpickling builds (plans) a fresh pipeline.

        The copy starts with empty latency statistics and its own output buffers and threads, so a
        pipeline can be sent to DataLoader workers, ``multiprocessing``, Dask or Ray.
        """
        args, kwargs = self._init_args
        return (_rebuild_pipeline, (type(self), args, kwargs, self._metas_format))

    _init_args: tuple[tuple[Any, ...], dict[str, Any]]  # set by __new__

    #: batches whose timelines wait to be folded into :attr:`latency` (older ones are dropped)
    LATENCY_BACKLOG = 1024

    @property
    def latency(self) -> LatencyStats:
        """:class:`dvpipe.latency.LatencyStats` of this pipeline's batches (``pipe.latency.report()``).

        Timelines are folded in when this is read; at most :attr:`LATENCY_BACKLOG` batches wait in
        between (read it at least that often in long runs). Batches processed on a caller's timeline
        (``process(frames, timeline=...)``, as a deployment's runner does) are not included: the
        caller keeps its own statistics.
        """
        if self._latency is None:
            from .latency import LatencyStats

            self._latency = LatencyStats(counters_only=self.timing == "counters")
        while self._unreported:
            self._latency.add(self._unreported.popleft())
        return self._latency

    @classmethod
    def from_profile(cls, name: str | Profile, rig: Rig, backends: Sequence[BackendName] | BackendName = ("cpu",), *,
                     fidelity: Fidelity = "reference", target: Optional[Target] = None, **kwargs: Any) -> "Pipeline":
        """Pipeline with profile ``name``'s stages and metas (``bevformer-tiny``, ``petr``...); a
        :class:`~dvpipe.profiles.Profile` object is taken as it is. Every camera at one size
        (:func:`check_one_size`); a rig of the cameras the model was trained on in the order it was fed
        them (:func:`~dvpipe.profiles.camera_order_problem`)."""
        problem = camera_order_problem(name, rig.names)
        if problem:
            raise ConfigError(problem)
        what = f"profile {name if isinstance(name, str) else name.name}"
        stages = profile_stages(name, fidelity, check_one_size(rig.cameras, what))
        return cls(rig, stages, backends, profile=name, target=target, fidelity=fidelity, **kwargs)

    @classmethod
    def from_mmdet3d_config(cls, config: str | os.PathLike[str] | Mapping[str, Any] | MappedConfig, rig: Rig,
                            backends: Sequence[BackendName] | BackendName = ("cpu",), *, allow_code: bool = False,
                            skip: Sequence[str] = (), fidelity: Fidelity = "reference",
                            target: Optional[Target] = None, **kwargs: Any) -> "Pipeline":
        """Pipeline reproducing an mmdet3d / mmcv config's ``test_pipeline`` and its ``img_metas`` contract.

        Args:
            config: a ``.py`` config path (``_base_`` files are followed), a loaded config dict, or
                the :class:`~dvpipe.mmdet3d.MappedConfig` that :func:`~dvpipe.mmdet3d.profile_from_config`
                returned for one (taken as it is: not read again; ``skip`` and ``allow_code`` then unused).
            rig: the cameras, in the order the model expects them.
            allow_code: run the file with mmengine's ``Config`` (this executes it) instead of the
                restricted literal reader; only for a config you trust.
            skip: transform names to ignore on your responsibility (see :mod:`dvpipe.mmdet3d`).
            Other arguments as for :class:`Pipeline`.

        Raises:
            ConfigError: a construct the reader does not evaluate, a transform it cannot map (named),
                or cameras whose size differs from the size the config's transform assumes.
        """
        from .mmdet3d import MappedConfig, check_rig, order_rig, profile_from_config

        metas_format = kwargs.pop("metas_format", None)
        pose = kwargs.pop("pose", None)
        mapped = (config if isinstance(config, MappedConfig)
                  else profile_from_config(config, skip=skip, allow_code=allow_code))
        rig = order_rig(mapped, rig)  # BEVDet's data_config['cams'] order
        check_rig(mapped, rig.cameras)
        pipe = cls.from_profile(mapped.profile, rig, backends, target=target, fidelity=fidelity, **kwargs)
        if metas_format is not None:
            pipe.set_metas_format(metas_format, pose=pose)
        return pipe

    def set_metas_format(self, metas_format: MetasFormat = "per_camera", *, pose: Any = None, can_bus: str = "absolute",
                         scene_gap_s: float = 1.0, can_bus_rotation: Optional[str] = None) -> "Pipeline":
        """Choose what ``batch.metas`` holds from the next ``process`` call on.

        Args:
            metas_format: ``per_camera`` (one dict per camera, the default) or ``mmdet3d``: a list of
                one sample dict with per-camera lists, as ``forward_test(img_metas=[batch.metas],
                img=[batch.img])`` reads it, with the temporal keys (``can_bus``, ``scene_token``,
                ``prev_bev_exists``, per-camera ``img_timestamp``; see :mod:`dvpipe.mmdet3d`).
            pose: the pose source for ``mmdet3d`` (a callable ``(timestamp_ns, seq) -> record``, or a
                nuScenes-style ``ego_pose.json`` path); None: identity pose.
            can_bus: ``absolute`` (for ``forward_test``) or ``delta`` (for ``simple_test``).
            scene_gap_s: capture-time jump that starts a new scene when the pose gives no scene_token.
            can_bus_rotation: ``published`` (``can_bus[3:7] = [w, w, w, w]``, as BEVFormer's checkpoints were
                trained) or ``quaternion``; None: the profile's (see :class:`~dvpipe.mmdet3d.Mmdet3dMetas`).

        Returns:
            this pipeline.
        """
        if metas_format not in ("per_camera", "mmdet3d"):
            raise ConfigError(f"metas_format must be 'per_camera' or 'mmdet3d', got {metas_format!r}")
        builder = None
        if metas_format == "mmdet3d":
            from .mmdet3d import JsonPoses, Mmdet3dMetas

            source = JsonPoses(pose) if isinstance(pose, (str, os.PathLike)) else pose
            builder = Mmdet3dMetas(source, can_bus=can_bus, scene_gap_s=scene_gap_s, can_bus_rotation=can_bus_rotation)
        self._metas_builder = builder
        self._metas_format = (metas_format, pose, can_bus, scene_gap_s, can_bus_rotation)
        return self

    # -- execution ---------------------------------------------------------------------------------
    def _allocate(self):
        shape, dtype = self.plan.out_shape, self.plan.out_dtype
        family = self.plan.cameras[0].steps[-1].backend.family
        alloc = getattr(importlib.import_module(FAMILIES[family]), "allocate_output", None) if family in FAMILIES else None
        if alloc is not None and self.plan.device_batch is not None:  # the AIPP route: a per-batch device buffer
            return alloc(self.plan.cameras[0].steps[-1].backend, shape, dtype, plan=self.plan)
        if alloc is not None:
            return alloc(self.plan.cameras[0].steps[-1].backend, shape, dtype)
        return np.zeros(shape, dtype=dtype)

    @property
    def locality(self) -> int:
        """Frames of one camera a worker thread runs in a row when that camera's later frame sets are already
        submitted (:meth:`submit`); 1 (default): first in first out across cameras. More keeps a camera's
        decoder state in that thread's caches (faster decoding of recordings), while the other cameras
        of the earlier set wait longer: each set's latency grows by up to that many frames' work."""
        return self._pool.locality if self._pool is not None else 1

    @locality.setter
    def locality(self, frames: int) -> None:
        if not isinstance(frames, int) or frames < 1:
            raise ConfigError(f"locality must be a positive integer, got {frames!r}")
        if self._pool is not None:
            self._pool.locality = frames

    def reserve_output_buffers(self, count: int) -> None:
        """Grow the ring of output buffers to at least ``count`` (before the first frame set: a caller that
        keeps sets in flight with :meth:`submit`, or holds batches longer, needs one buffer for each)."""
        if self._count:
            raise ConfigError("reserve_output_buffers is for a pipeline that has not run a frame set yet; "
                              "give output_buffers= to the constructor instead")
        while len(self._buffers) < count:
            self._buffers.append(self._allocate())
            self._generations.append(0)

    def touch_output_buffers(self) -> None:
        """Write every page of the host output buffers once, now: a fresh ``np.zeros`` buffer is mapped lazily,
        and the first frame sets would otherwise pay the page faults inside their kernels (at 6 x 3840x2160 ->
        (6, 3, 480, 800) float32: ~27 MB a buffer). Device buffers (torch CUDA, the AIPP route) are left alone."""
        for buf in self._buffers:
            if isinstance(buf, np.ndarray) and buf.flags.writeable:
                buf.fill(0)

    def _prepare(self, step: PlanStep, cam_index: int, cp: CameraPlan, tag: str) -> tuple:
        """What running ``step`` for camera ``cam_index`` needs, built once and reused every frame set."""
        key = (cam_index, id(step), tag)
        state = self._states.setdefault(key, {})
        ctx = KernelContext(cp.camera, step.spec_in, step.spec_out, step.backend, self.plan.fidelity,
                            state=state, target=self.plan.target, on_corrupt=self.on_corrupt,
                            corruption=self._corrupt[cam_index], verified=step.verified)
        spec = step.spec_out
        check = None
        if spec.pixel_format in (PixelFormat.BGR, PixelFormat.FLOAT_HWC) and spec.placement == "host":
            check = (spec.height, spec.width)
        kind = "transfer" if step.stages[0].op == "transfer" else "host"
        prepared = self._prepared[key] = (step.kernel.fn, step.stages, ctx, step.writes_batch, step.name,
                                          step.kernel.unit, step.backend.name, check, kind)
        return prepared

    def _run_steps(self, steps: Sequence[PlanStep], data, cam_index: int, cp: CameraPlan, out, tl: Timeline, tag: str):
        name = cp.camera.name
        ranges = self.profiler_ranges
        for step in steps:
            prepared = self._prepared.get((cam_index, id(step), tag)) or self._prepare(step, cam_index, cp, tag)
            fn, stages, ctx, writes_batch, step_name, unit, backend, check, kind = prepared
            ctx.out = out if writes_batch else None
            ctx.slot = out
            t0 = now_ns()
            tokens = None if ranges is None else ranges.push(ranges.message(step_name, name))
            try:
                data = fn(data, stages, ctx)
            finally:
                if tokens is not None and ranges is not None:
                    ranges.pop(tokens)
                attrs = {"unit": unit, "backend": backend}
                if ctx.moved is not None:  # a transfer step: its bytes ride on its span
                    attrs["direction"], attrs["bytes"] = ctx.moved
                    ctx.moved = None
                tl.record_checked(step_name, t0, now_ns(), kind, name, attrs)
                ctx.out = ctx.slot = None  # the batch buffer is not held between frame sets
                if ctx.device_spans:
                    for ds in ctx.device_spans:
                        ds.camera = ds.camera or name
                        tl.add_device(ds, kind="transfer" if "direction" in ds.attrs else "device")
                    ctx.device_spans = []
            if check is not None:
                shape = getattr(data, "shape", None)
                if shape is None or tuple(shape[:2]) != check:
                    raise FrameError(f"{step_name} produced {shape} but the plan expects {check[0]}x{check[1]}")
        return data

    def _run_fallback(self, step: PlanStep, data, i: int, cp: CameraPlan, out, tl: Timeline):
        """Run ``step``'s planned fallback; a host fallback writing a device batch slot goes through a host copy,
        one writing a torch CPU batch slot writes it through its numpy view (same memory)."""
        host = step.fallback[0].backend.family in ("cpu", "reference")
        if step.writes_batch and host and type(out).__module__.startswith("torch") and out.device.type == "cpu":
            self._run_steps(step.fallback, data, i, cp, out.numpy(), tl, "fb:")
            return out
        if step.writes_batch and type(out).__module__.startswith("torch") and out.device.type != "cpu":
            import torch

            slot = torch.zeros(tuple(out.shape), dtype=out.dtype).numpy()
            data = self._run_steps(step.fallback, data, i, cp, slot, tl, "fb:")
            out.copy_(torch.from_numpy(slot))
            return out
        return self._run_steps(step.fallback, data, i, cp, out, tl, "fb:")

    def _run_camera(self, i: int, value, out, tl: Timeline, fallbacks) -> Optional[str]:
        """Run camera ``i``; returns None on success or the drop reason."""
        cp = self.plan.cameras[i]
        self._corrupt[i].clear()
        data = value.data if isinstance(value, Frame) else value
        if isinstance(data, FrameError):  # a source that decodes itself could not produce this frame
            return data.reason
        try:
            if not isinstance(data, VideoPacket):
                data = read_frame_bytes(data)
        except FrameError as e:
            return e.reason
        for step in cp.steps:
            try:
                data = self._run_steps((step,), data, i, cp, out, tl, "")
            except _PROGRAMMING_ERRORS:
                raise  # a bug in a kernel, not a frame the backend refused: never hide it behind a fallback
            except Exception as e:  # noqa: BLE001 - a kernel failure is a frame failure, reported below
                reason = e.reason if isinstance(e, FrameError) else f"{type(e).__name__}: {e}"
                if self.fallback == "error" and not isinstance(e, FrameError):
                    raise
                if not step.fallback or (isinstance(e, FrameError) and step.backend.family in ("cpu", "reference")):
                    return f"{step.name} on {step.backend.name}: {reason}"
                try:
                    data = self._run_fallback(step, data, i, cp, out, tl)
                except _PROGRAMMING_ERRORS:
                    raise
                except Exception as e2:  # noqa: BLE001
                    r2 = e2.reason if isinstance(e2, FrameError) else f"{type(e2).__name__}: {e2}"
                    return f"{step.name} on {step.backend.name}: {reason}; fallback {step.fallback[0].backend.name}: {r2}"
                with self._lock:
                    fallbacks.append((cp.camera.name, step.name, step.backend.name, step.fallback[0].backend.name, reason))
        return None

    def process(self, frames: Mapping[str, Any], timeline: Optional[Timeline] = None) -> FrameBatch:
        """Run one frame set.

        Args:
            frames: camera name -> encoded bytes, a file path, an HxWx3 uint8 BGR array, or a
                :class:`~dvpipe.Frame`. A camera missing from the mapping is dropped ("missing").
            timeline: record the set's spans into this timeline (a deployment runner's, which holds
                the true capture and arrival stamps) instead of a new one stamped here.

        Returns:
            a :class:`~dvpipe.FrameBatch`; ``images`` is a buffer of the pipeline's output ring.

        Raises:
            ConfigError: a key is not a camera of the rig (nothing is run).
        """
        work = self._begin(frames, timeline, block=True)
        if work.ticket is not None:
            assert self._pool is not None
            try:
                self._pool.wait(work.ticket, help=True)  # the caller works on the set too
            except BaseException as e:  # noqa: BLE001 - raised by _collect, in submission order
                work.ticket, work.failure = None, e
        return self._collect(work)

    def submit(self, frames: Mapping[str, Any], timeline: Optional[Timeline] = None) -> "PendingBatch":
        """Start one frame set and return at once; ``.result()`` gives its :class:`~dvpipe.FrameBatch`.

        Sets submitted one after another overlap: set k+1's cameras start on the threads that set k's
        slowest camera leaves idle (each camera's own frames still run in order, one at a time), so a
        caller that keeps one set ahead never waits at a per-set barrier. Results are collected in
        submission order (``result()`` of a later set collects the earlier ones first); at most
        ``output_buffers`` sets may be uncollected at once, since set k + ``output_buffers`` writes set
        k's output buffer. Arguments as for :meth:`process`; the calling thread does not work on the
        set (the pool grows to ``threads`` worker threads on the first ``submit``).

        Raises:
            ConfigError: a key is not a camera of the rig, or ``output_buffers`` sets are uncollected.
        """
        if self._pool is not None and self._pool.workers < self.threads:
            self._pool.grow(self.threads)
        work = self._begin(frames, timeline, block=False)
        return PendingBatch(work)

    def _begin(self, frames: Mapping[str, Any], timeline: Optional[Timeline], block: bool) -> "_SetWork":
        """Take the next output buffer and queue the set's camera jobs (run inline without a pool); with every
        buffer held by an uncollected set, wait (``block``) or raise."""
        if not isinstance(frames, Mapping):
            raise ConfigError(f"process() takes a mapping camera name -> frame, got {type(frames).__name__}")
        unknown = [k for k in frames if k not in self._name_set]
        if unknown:
            raise ConfigError(f"unknown camera(s) {', '.join(map(str, unknown))}; the rig has {', '.join(self._names)}")
        for name, value in frames.items():
            aug = value.img_aug if isinstance(value, Frame) else IDENTITY_3X3
            if aug is not IDENTITY_3X3 and not np.array_equal(aug, IDENTITY_3X3):
                raise ConfigError(f"camera {name}: the frame's img_aug is not the identity; a pipeline takes the "
                                  "camera's own pictures (apply image transforms as stages: the plan's img_aug "
                                  "then says what they did)")
        with self._room:
            while len(self._uncollected) >= len(self._buffers):
                if not block or self._uncollected[0].thread == threading.get_ident():  # none would collect it
                    raise ConfigError(f"{len(self._uncollected)} frame sets submitted and not collected: collect one "
                                      f"(.result()) before submitting another, or raise output_buffers "
                                      f"(now {len(self._buffers)})")
                self._room.wait()  # process() from several threads: wait for the oldest set's caller
            slot = self._next_buffer
            self._next_buffer = (slot + 1) % len(self._buffers)
            self._generations[slot] += 1  # a batch still pointing at this buffer is stale from here on
            stamp = timeline is None  # the caller's timeline carries its own capture/arrival stamps
            tl = Timeline(index=self._count, counters_only=self.timing == "counters") if timeline is None else timeline
            self._count += 1
            work = _SetWork(self, frames, tl, slot, stamp)
            self._uncollected.append(work)
            if self._pool is None:
                try:
                    for i in range(len(self._names)):
                        work.job(i)
                except BaseException as e:  # noqa: BLE001 - the set's own caller gets it from _collect
                    work.failure = e  # (and its buffer is freed there), as with a pool
            else:
                work.ticket = self._pool.submit(work.job, len(self._names))
        return work

    def _collect(self, work: "_SetWork") -> FrameBatch:
        """``work``'s batch, once its jobs have finished; sets are assembled in submission order (an
        earlier set's error is kept for its own caller, a Ctrl-C is raised at once)."""
        with self._collecting:
            while work.batch is None and work.error is None:
                first = self._uncollected[0]
                try:
                    if first.failure is not None:  # its jobs raised (while its caller helped): no batch
                        raise first.failure
                    if first.ticket is not None:
                        if self._pool is None:
                            raise ConfigError("the pipeline was closed before this frame set was collected")
                        self._pool.wait(first.ticket)
                    first.batch = self._assemble(first)
                except BaseException as e:  # noqa: BLE001 - raised to the set's own caller below
                    first.error = e
                    if first is not work and not isinstance(e, Exception):  # Ctrl-C: now, not later
                        self._collected()
                        raise
                self._collected()
        if work.error is not None:
            raise work.error
        assert work.batch is not None
        return work.batch

    def _collected(self) -> None:
        """The oldest set is assembled: its place in the ring counts as free for the next one."""
        with self._room:
            self._uncollected.popleft()
            self._room.notify_all()

    def _assemble(self, work: "_SetWork") -> FrameBatch:
        names, tl, images, reasons = self._names, work.tl, work.images, work.reasons
        tl.record_assembly(work.ready)
        valid = np.array([r is None for r in reasons], dtype=bool)
        drops = [(names[i], r) for i, r in enumerate(reasons) if r is not None]
        device_batch = isinstance(images, DeviceBatch)
        for i, r in enumerate(reasons):
            if r is not None:
                if device_batch:  # a dropped camera's slot of the device buffer: zero bytes, one timed upload
                    t0 = now_ns()
                    nbytes = images.clear(i)
                    tl.record_checked("clear_slot", t0, now_ns(), "transfer", names[i],
                                      {"unit": "dvpp", "direction": "host_to_device", "bytes": nbytes})
                else:
                    images[i] = 0
        if device_batch:
            images = images.tensor
        elif self._device is not None:
            images = self._hand_over(images, tl)
        metas = []
        frames = work.frames
        for i, m in enumerate(self._metas):
            m = {k: dict(v) if isinstance(v, dict) else v for k, v in m.items()}  # nested dicts (img_norm_cfg) too
            value = frames.get(names[i])
            if isinstance(value, Frame):
                m["capture_epoch_ns"], m["seq"] = value.capture_epoch_ns, value.seq
            if valid[i] and work.corrupt[i]:
                m["corrupt"], m["corrupt_reason"] = True, "; ".join(work.corrupt[i])
            metas.append(m)
        builder = self._metas_builder
        if builder is not None:  # metas_format="mmdet3d": one sample dict with per-camera lists
            metas = [builder.sample(metas, names, valid)]
        if work.stamp:  # a caller's timeline (a deployment runner's) is the caller's to account
            self._unreported.append(tl)  # not finished: a model timed on it (batch.timeline.time) still counts
        ring = self._generations
        return FrameBatch(images, metas, valid, drops, names, work.fallbacks, tl, ring=ring, slot=work.slot,
                          generation=ring[work.slot])

    def _hand_over(self, images, tl: Timeline):
        """``batch.images`` on ``Batch(device=...)``: zero-copy on the CPU, one timed copy to a device."""
        import torch

        assert self._device is not None  # called only for a plan that ends on a device
        device = torch.device(self._device.split(":", 1)[1])
        host = torch.from_numpy(images) if isinstance(images, np.ndarray) else images
        if host.device == device:
            return host
        key = id(images)  # one device buffer per output buffer of the ring
        dev = self._device_buffers.get(key)
        if dev is None:
            dev = self._device_buffers[key] = torch.empty(tuple(host.shape), dtype=host.dtype, device=device)
        t0 = now_ns()
        dev.copy_(host)
        tl.record("h2d_batch", t0, now_ns(), "transfer", unit=device.type, direction="host_to_device",
                  bytes=int(host.numel() * host.element_size()))
        return dev

    def run(self, frame_sets: Iterable[Mapping[str, Any]]) -> Iterator[FrameBatch]:
        """``process`` every frame set of an iterable, yielding batches."""
        for frames in frame_sets:
            yield self.process(frames)

    def close(self) -> None:
        """Stop the worker threads and release every kernel's per-camera state (DVPP channels,
        streams and device memory, in the documented order). Idempotent; ``with Pipeline(...)`` calls it."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        states = list(self._states.values())
        self._states.clear()
        self._prepared.clear()
        if any("dvpp" in s for s in states):
            from .backends.dvpp import close_states  # releases every ACL object, in documented order

            close_states(states)
        for buf in self._buffers:  # per-batch device buffers (the AIPP route): freed after the steps' objects
            if isinstance(buf, DeviceBatch):
                buf.close()

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Pipeline({len(self.rig)} cameras, backends={self.plan.backends}, profile={self.profile})"


_NOT_RUN = "not run: the frame set was cancelled before this camera's turn"


class _SetWork:
    """One started frame set: its frames, timeline and output buffer, and what each camera job left."""

    __slots__ = ("pipe", "frames", "tl", "slot", "stamp", "images", "arrival", "reasons", "corrupt", "ready",
                 "fallbacks", "ticket", "failure", "batch", "error", "thread")

    def __init__(self, pipe: Pipeline, frames: Mapping[str, Any], tl: Timeline, slot: int, stamp: bool):
        n = len(pipe._names)
        self.pipe, self.frames, self.tl, self.slot, self.stamp = pipe, frames, tl, slot, stamp
        self.images = pipe._buffers[slot]
        self.arrival = now_ns()
        self.reasons: list[Optional[str]] = [_NOT_RUN] * n  # None once a camera's job produced its image
        self.corrupt: list[tuple[str, ...]] = [()] * n  # per camera: what its decoder reported damaged
        self.ready: dict[str, int] = {}  # camera -> when its image was ready (monotonic ns)
        self.fallbacks: list = []
        self.ticket: Optional[Ticket] = None
        self.failure: Optional[BaseException] = None  # what its jobs raised, seen by a caller that helped
        self.batch: Optional[FrameBatch] = None
        self.error: Optional[BaseException] = None  # what collecting it raised (its caller's to raise)
        self.thread = threading.get_ident()  # the thread that started it (and so collects it)

    def job(self, i: int) -> None:
        """Camera ``i``'s part of the set (a worker thread, or the caller)."""
        pipe = self.pipe
        name = pipe._names[i]
        if name not in self.frames:
            self.reasons[i] = "missing: no frame for this camera in the frame set"
            return
        value = self.frames[name]
        if self.stamp:
            capture = to_monotonic_ns(value.capture_epoch_ns) if isinstance(value, Frame) else None
            self.tl.set_frame(name, capture_mono_ns=capture, arrival_ns=self.arrival)
        self.tl.record_checked(WORKER_WAIT, self.arrival, now_ns(), "wait", name, {})  # until a thread took it
        self.reasons[i] = pipe._run_camera(i, value, self.images[i], self.tl, self.fallbacks)
        damage = pipe._corrupt[i]  # the camera's, reused by its next frame: kept with this set
        if damage:
            self.corrupt[i] = tuple(damage)
        self.ready[name] = now_ns()


class PendingBatch:
    """A frame set started by :meth:`Pipeline.submit`; :meth:`result` is its :class:`~dvpipe.FrameBatch`."""

    __slots__ = ("_work",)

    def __init__(self, work: _SetWork):
        self._work = work

    def done(self) -> bool:
        """Whether every camera of the set has finished (``result()`` then returns without waiting on them)."""
        t = self._work.ticket
        return t is None or t.settled()

    def wait(self) -> None:
        """Return once every camera of the set has finished, without assembling the batch (nor raising a
        step's error: :meth:`result` does)."""
        work = self._work
        if work.ticket is not None and work.pipe._pool is not None:
            work.pipe._pool.join(work.ticket)

    def result(self) -> FrameBatch:
        """The set's batch (collecting the sets submitted before it first); re-raises a step's error
        (``fallback="error"``) or a kernel bug as :meth:`Pipeline.process` would."""
        work = self._work
        return work.pipe._collect(work)


def _rebuild_pipeline(cls, args, kwargs, metas_format=None):
    pipe = cls(*args, **kwargs)
    if metas_format is not None:
        fmt, pose, can_bus, gap, rotation = metas_format
        pipe.set_metas_format(fmt, pose=pose, can_bus=can_bus, scene_gap_s=gap, can_bus_rotation=rotation)
    return pipe
