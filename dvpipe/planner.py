"""The planner: for each camera and step, which backend runs it and why.

For every camera the planner walks the stage list. At each position it asks the backends in the
user's preference order, first to last, for their registered kernels starting there (longest
run first: that is fusion), and records every answer as a :class:`~dvpipe.stages.KernelVerdict`. The
first kernel that says yes becomes the step. For each step it also plans the same stages on the
backends *after* the chosen one: that is the runtime fallback used when the step fails on a frame.

The resulting :class:`Plan` prints as a table (``print(pipe.plan)``), serialises with
:meth:`Plan.to_dict`, and is exactly what the pipeline executes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, Sequence

import numpy as np

from ._typing import BackendName, Fidelity
from .backends import BackendFamily, BackendRef, availability, family, family_of_placement, load_family, resolve
from .errors import ConfigError, PlanError
from .stages.base import FrameSpec, Stage, camera_matrix_of, matrix_of, output_spec_of
from .stages.image import Batch, Pad, Transfer
from .stages.kernel_registry import Kernel, KernelQuery, KernelVerdict, kernels_at
from .types import Camera, PixelFormat

if TYPE_CHECKING:
    from .target import Target

__all__ = ["Plan", "CameraPlan", "PlanStep", "plan_pipeline", "input_spec", "LiveMeasurements"]


class LiveMeasurements(Protocol):
    """What the planner asks of the measurements made on a device (``plan_pipeline(live=...)``): the
    planning cache :class:`dvpipe.probe.live.LiveCache` (``planning_cache()``) is one. It may also have
    ``verified(kernel, query) -> bool`` (a step measured to work: :attr:`PlanStep.verified`)."""

    def prefer(self, kernel: Kernel, query: KernelQuery, documented: KernelVerdict) -> KernelVerdict:
        """The verdict on ``query`` as measured on the device, else ``documented``."""
        ...


@dataclass
class PlanStep:
    """One executed step: a kernel covering one or more consecutive stages on one backend."""

    stages: tuple[Stage, ...]
    kernel: Kernel
    backend: BackendRef
    spec_in: FrameSpec
    spec_out: FrameSpec
    verdicts: list[tuple[str, KernelVerdict]]
    matrix: np.ndarray
    fallback: list["PlanStep"] = field(default_factory=list)
    #: for a step that moves data between memory domains: bytes per frame, and which way
    transfer: Optional[tuple[str, int]] = None
    #: for a device step: what its picture is in device memory, in its family's words (set by the family's
    #: ``place_outputs`` hook)
    hands_on: str = ""
    #: K' (3x3) when a stage of this step re-projects the image (``Undistort``); ``matrix`` then maps
    #: that stage's output pixels onward, and the camera's ``img_aug`` restarts here
    intrinsics: Optional[np.ndarray] = None
    #: a measurement on this device (the live cache the planner was given) verified this step: its kernel
    #: runs it with what the documentation leaves open accepted, as it was measured
    verified: bool = False

    @property
    def name(self) -> str:
        return "+".join(s.op for s in self.stages)

    @property
    def writes_batch(self) -> bool:
        return self.stages[-1].op == "batch"

    @property
    def chosen(self) -> KernelVerdict:
        return self.verdicts[-1][1]

    def to_dict(self) -> dict:
        return {
            "step": self.name,
            "stages": [s.describe() for s in self.stages],
            "backend": self.backend.name,
            "kernel": self.kernel.name,
            "unit": self.kernel.unit,
            "in": str(self.spec_in),
            "out": str(self.spec_out),
            "verdicts": [{"backend": b, **v.to_dict()} for b, v in self.verdicts],
            "fallback": [s.backend.name + ":" + s.name for s in self.fallback],
            "placement": self.spec_out.placement,
            "transfer": None if self.transfer is None else {"direction": self.transfer[0], "bytes": self.transfer[1]},
        }


@dataclass
class CameraPlan:
    """The steps of one camera plus the geometry they apply.

    Attributes:
        img_aug: 3x3 map from the pixels of ``intrinsics`` to output pixel coordinates (all steps
            after the last re-projecting one).
        intrinsics: 3x3 K that ``img_aug`` applies to: the camera's own, or K' of the last stage that
            re-projected the image (``Undistort``); ``cam2img = img_aug @ intrinsics``.
        prepad_size: ``(height, width)`` in pixels before the first Pad (the image content size).
        out_size: ``(height, width)`` in pixels of the camera's image in the batch.
    """

    camera: Camera
    spec_in: FrameSpec
    steps: list[PlanStep]
    img_aug: np.ndarray
    prepad_size: tuple[int, int]
    out_size: tuple[int, int]
    #: why this camera's device output cannot go to the device batch as planned ("" when it can)
    route_problem: str = ""
    intrinsics: Optional[np.ndarray] = None
    #: this camera's backend preference order (the plan's ``backends``, or its own from ``camera_backends``)
    backends: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.intrinsics is None:
            self.intrinsics = np.asarray(self.camera.intrinsics, dtype=np.float64)

    @property
    def metas_camera(self) -> Camera:
        """The camera as the batch's image sees it: ``intrinsics`` K' after an ``Undistort`` (no distortion
        left), else the rig's camera. Profiles build ``cam2img`` / ``lidar2img`` from it and ``img_aug``."""
        k = self.intrinsics
        cam = self.camera
        if k is None or k is cam.intrinsics or np.array_equal(k, cam.intrinsics):
            return cam
        # P = K [I | b] with the offset t = K b: the re-projected camera keeps b, t' = K' K^-1 t
        offset = k @ np.linalg.solve(cam.intrinsics, cam.projection_offset)
        return dataclasses.replace(cam, intrinsics=k, distortion=None, projection_offset=offset)

    @property
    def route(self) -> str:
        """Where this camera's pixels become the model input: the route word of a family whose steps it runs
        (the ``route`` hooks of the backend table), else ``host``."""
        for hook in _hooks(self.steps, "route"):
            word = hook(self.steps)
            if word:
                return word
        return "host"

    def signature(self) -> tuple:
        return (self.backends,) + tuple((s.name, s.backend.name, str(s.spec_in), str(s.spec_out), s.chosen.reason) for s in self.steps)


@dataclass
class Plan:
    """Per camera, per step: backend, verdicts and specs. ``print(plan)`` gives a table."""

    cameras: list[CameraPlan]
    backends: tuple[str, ...]
    fidelity: Fidelity
    target: Optional[Target] = None
    #: the per-batch device buffer of the family writing the batch (its row's ``batch_layout`` hook), else None
    device_batch: Optional[dict] = None

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        h, w = self.cameras[0].out_size
        return (len(self.cameras), 3, h, w)

    @property
    def out_dtype(self) -> str:
        return self.cameras[0].steps[-1].spec_out.dtype

    @property
    def out_placement(self) -> str:
        return self.cameras[0].steps[-1].spec_out.placement

    def fallbacks(self) -> list[tuple[str, str, str, str]]:
        """``(camera, step, backend not taken, reason)`` for every preferred backend that said no."""
        out = []
        for cp in self.cameras:
            for s in cp.steps:
                for b, v in s.verdicts[:-1]:
                    out.append((cp.camera.name, s.name, b, v.reason))
        return out

    def to_dict(self) -> dict:
        """JSON-serialisable form (stable keys: ``backends``, ``fidelity``, ``target``, ``cameras``)."""
        return {
            "backends": list(self.backends),
            "fidelity": self.fidelity,
            "target": None if self.target is None else str(self.target),
            "output": {"shape": list(self.out_shape), "dtype": self.out_dtype, "placement": self.out_placement,
                       **({"device_batch": _jsonable(self.device_batch)} if self.device_batch else {})},
            "cameras": [
                {"name": cp.camera.name, "backends": list(cp.backends or self.backends), "input": str(cp.spec_in),
                 "route": cp.route,
                 "img_aug": cp.img_aug.tolist(), "intrinsics": np.asarray(cp.intrinsics).tolist(),
                 "steps": [s.to_dict() for s in cp.steps]}
                for cp in self.cameras
            ],
        }

    def __str__(self) -> str:
        groups: dict[tuple, list[CameraPlan]] = {}
        for cp in self.cameras:
            groups.setdefault(cp.signature(), []).append(cp)
        head = (f"plan: {len(self.cameras)} camera(s), backends {' > '.join(self.backends)}, fidelity {self.fidelity}"
                + (f", target {self.target}" if self.target is not None else "")
                + f" -> output {tuple(self.out_shape)} {self.out_dtype} on {self.out_placement}")
        own: dict[tuple[str, ...], list[str]] = {}  # cameras planned on their own preference order (``camera_backends``), by order
        for cp in self.cameras:
            if cp.backends and cp.backends != self.backends:
                own.setdefault(cp.backends, []).append(cp.camera.name)
        for prefs, cams in own.items():
            head += f"\n  cameras {', '.join(cams)}: backends {' > '.join(prefs)}"
        describe = family(self.cameras[0].steps[-1].backend.family).hook("describe_batch")
        if self.device_batch and describe is not None:
            head += "\n  " + describe(self.device_batch)
        rows = [("cameras", "step", "backend", "in -> out", "verdict")]
        for cps in groups.values():
            names = cps[0].camera.name if len(cps) == 1 else f"{cps[0].camera.name} (+{len(cps) - 1} alike)"
            for k, s in enumerate(cps[0].steps):
                notes = [f"{b}: {v.status}, {v.reason}" for b, v in s.verdicts[:-1]]
                if s.chosen.reason:
                    notes.append(s.chosen.reason)
                if s.chosen.detour:
                    notes.append(f"detour: {s.chosen.detour}")
                if s.transfer is not None:
                    notes.append(f"{s.transfer[0]}: {s.transfer[1]} bytes a frame")
                rows.append((names if k == 0 else "", s.name, s.backend.name, f"{s.spec_in} -> {s.spec_out}",
                             "ok" + (" (" + "; ".join(notes) + ")" if notes else "")))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [head] + ["  " + "  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
        return "\n".join(lines)


def _jsonable(d: Optional[dict]) -> Optional[dict]:
    if d is None:
        return None
    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return dataclasses.asdict(v)
        return list(v) if isinstance(v, tuple) else v

    out = {k: plain(v) for k, v in d.items()}
    if "out_size" in out:  # the JSON keeps [width, height], as written before sizes became (height, width)
        out["out_size"] = out["out_size"][::-1]
    return out


def input_spec(camera: Camera) -> FrameSpec:
    """What a camera's frames look like when they enter the plan."""
    if camera.encoding == "raw":
        return FrameSpec(width=camera.width, height=camera.height, pixel_format=PixelFormat.BGR, dtype="uint8",
                         channel_order="bgr")
    return FrameSpec(width=camera.width, height=camera.height, pixel_format=PixelFormat.ENCODED, dtype="uint8",
                     channel_order="", encoding=camera.encoding)


def _specs_after(stages: Sequence[Stage], spec: FrameSpec, cam: Camera, offset: int) -> list[FrameSpec]:
    out = []
    for k, st in enumerate(stages):
        try:
            spec = output_spec_of(st, spec, cam)
        except ConfigError as e:
            raise ConfigError(f"camera {cam.name}: stage {offset + k} ({st.describe()}): {e}") from None
        out.append(spec)
    return out


def _plan_range(stages: Sequence[Stage], spec: FrameSpec, specs: list[FrameSpec], cam: Camera,
                prefs: Sequence[BackendRef], avail: dict[str, KernelVerdict], fidelity: Fidelity,
                target: Optional[Target], with_fallback: bool, live: Optional[LiveMeasurements] = None) -> tuple[list[PlanStep], list[Stage], list[FrameSpec]]:
    """Plan ``stages`` (with ``specs[k]`` the spec after stage k); returns the steps and the stage and
    spec lists as detours left them."""
    stages, steps = list(stages), []
    i = 0
    while i < len(stages):
        ops = [s.op for s in stages[i:]]
        verdicts: list[tuple[str, KernelVerdict]] = []
        chosen: Optional[tuple[Kernel, BackendRef, int]] = None
        verified = False
        for p, ref in enumerate(prefs):
            if not avail[ref.name].ok:
                verdicts.append((ref.name, avail[ref.name]))
                continue
            kernels = kernels_at(ops, ref.family)
            if not kernels:
                verdicts.append((ref.name, KernelVerdict.no(f"no {ref.family} kernel for {ops[0]}")))
                continue
            best_no: Optional[KernelVerdict] = None
            for kern in kernels:
                n = len(kern.ops)
                query = KernelQuery(tuple(stages[i:i + n]), spec, tuple(specs[i:i + n]), cam, ref, fidelity, target)
                v = kern.check(query)
                kernel_verified = False
                if live is not None and target is not None and family(ref.family).measured:
                    v = live.prefer(kern, query, v)  # a measurement on this device beats the docs
                    kernel_verified = v.ok and _verified(live, kern, query)
                if v.ok and v.replace is not None:
                    # a detour: the kernel runs other stages than those asked about; re-derive the specs
                    detoured = list(stages[:i]) + list(v.replace) + list(stages[i + n:])
                    problem = None
                    try:
                        new_specs = specs[:i] + _specs_after(detoured[i:], spec, cam, i)
                    except ConfigError as e:
                        problem = f"the later stages do not fit what the detour produces ({e})"
                    else:
                        if new_specs[-1].size != specs[-1].size:
                            problem = (f"the detour would change the batch image from {specs[-1].width}x"
                                       f"{specs[-1].height} to {new_specs[-1].width}x{new_specs[-1].height}")
                    if problem is not None:
                        # dvpipe's policy (the batch size must not change), not a hardware limit
                        v = KernelVerdict(v.status if not v.ok else "declined", f"{v.reason}; declined: {problem}",
                                          v.rule, v.source, v.detour)
                    else:
                        stages, specs = detoured, new_specs
                        assert v.replace is not None  # checked above (mypy loses it across the try)
                        kern = dataclasses.replace(kern, ops=tuple(st.op for st in v.replace))
                if v.ok:
                    chosen, verified = (kern, ref, p), kernel_verified
                    verdicts.append((ref.name, v))
                    break
                # keep the verdict of the shortest run: it is the one that explains the fallback
                best_no = v
            if chosen:
                break
            assert best_no is not None  # kernels is not empty and none accepted
            verdicts.append((ref.name, best_no))
        if chosen is None:
            detail = "; ".join(f"{b}: {v.reason}" for b, v in verdicts)
            raise PlanError(f"camera {cam.name}: no backend can run {stages[i].describe()} on {spec} ({detail})")
        kern, ref, p = chosen
        n = len(kern.ops)
        covered = tuple(stages[i:i + n])
        matrix, new_k = np.eye(3), None
        s_in = spec
        for st, s_out in zip(covered, specs[i:i + n]):
            k = camera_matrix_of(st, s_in, cam)
            if k is not None:  # the stage re-projects: its output pixels are K' @ ray, whatever came before
                matrix, new_k = np.eye(3), k
            matrix = matrix_of(st, s_in, cam) @ matrix
            s_in = s_out
        out_spec = specs[i + n - 1]
        if ref.placement != "host":
            out_spec = out_spec.with_(placement=ref.placement)
        fallback: list[PlanStep] = []
        if with_fallback and p + 1 < len(prefs):
            try:
                fallback = _plan_range(covered, spec, list(specs[i:i + n]), cam, prefs[p + 1:], avail, fidelity,
                                       target, with_fallback=False, live=live)[0]
            except PlanError:
                fallback = []
        steps.append(PlanStep(covered, kern, ref, spec, out_spec, verdicts, matrix, fallback, intrinsics=new_k,
                              verified=verified))
        spec = out_spec
        i += n
    return steps, stages, specs


def _verified(live: LiveMeasurements, kernel: Kernel, query: KernelQuery) -> bool:
    """Whether ``live`` holds a measured success of this step (``live.verified``; False for a cache without it)."""
    check = getattr(live, "verified", None)
    return bool(check is not None and check(kernel, query))


def _hooks(steps: Sequence[PlanStep], name: str) -> list:
    """The distinct ``name`` hooks of the families running ``steps``, in step order."""
    out: list = []
    for s in steps:
        h = family(s.backend.family).hook(name)
        if h is not None and h not in out:
            out.append(h)
    return out


def device_transfer(row: BackendFamily, step: PlanStep) -> list[PlanStep]:
    """The default ``transfer`` of a family: one ``Transfer`` step on the family's ``transfer`` kernel, run by
    the backend of the family's side of the copy (``row.device_ref``)."""
    src, dst = step.spec_in.placement, step.backend.placement
    ref = row.device_ref(dst if row.owns(dst) else src) if row.device_ref is not None else None
    kernels = kernels_at(("transfer",), ref.family) if ref is not None else []
    if not kernels:
        raise PlanError(f"{step.name} on {step.backend.name} reads from {src}, and no backend copies {src} -> {dst}")
    assert ref is not None  # no kernels without a device side (raised above)
    st = Transfer(placement=dst)
    t_out = output_spec_of(st, step.spec_in, None)
    return [PlanStep((st,), kernels[0], ref, step.spec_in, t_out, [(ref.name, KernelVerdict.yes(f"{src} -> {dst}"))],
                     np.eye(3))]


def _insert_transfers(steps: list[PlanStep]) -> list[PlanStep]:
    """Insert an explicit, timed transfer step wherever a step reads from another memory domain.

    The family owning the memory read (else the one owning the step's own placement) says which steps
    (``transfer`` hook of its row; by default one ``Transfer`` step on its ``transfer`` kernel)."""
    out: list[PlanStep] = []
    for step in steps:
        src, dst = step.spec_in.placement, step.backend.placement
        if src != dst and step.spec_in.pixel_format is not PixelFormat.ENCODED:
            row = family_of_placement(src) or family_of_placement(dst)
            if row is None:
                raise PlanError(f"{step.name} on {step.backend.name} reads from {src}, and no backend copies {src} -> {dst}")
            hook = row.hook("transfer")
            if hook is None:
                inserted = device_transfer(row, step)
                step = dataclasses.replace(step, spec_in=inserted[-1].spec_out)
            else:
                inserted, step = hook(step, out[-1] if out else None)
            out.extend(inserted)
        if step.fallback:  # the fallback gets the failed step's input as it is at run time
            first = dataclasses.replace(step.fallback[0], spec_in=step.spec_in)
            step.fallback = _insert_transfers([first] + step.fallback[1:])
        out.append(step)
    return out


def _place_outputs(steps: list[PlanStep], cam: Camera, target: Optional[Target]) -> tuple[list[PlanStep], str]:
    """Let each family running a step place its outputs (its row's ``place_outputs`` hook). Returns the
    steps and why a device consumer cannot read a picture as planned ("" when it can)."""
    why = ""
    for hook in _hooks(steps, "place_outputs"):
        steps, problem = hook(steps, cam, target)
        why = why or problem
    return steps, why


def plan_pipeline(cameras: Sequence[Camera], stages: Sequence[Stage], backends: Sequence[BackendName] | BackendName, *,
                  fidelity: Fidelity = "reference", target: Optional[Target] = None,
                  assume_available: Sequence[str] = (), live: Optional[LiveMeasurements] = None,
                  camera_backends: Optional[Mapping[str, Sequence[BackendName] | BackendName]] = None) -> Plan:
    """Plan ``stages`` for every camera on the ``backends`` preference order.

    A ``Batch()`` stage is appended when the list does not end with one; ``Transfer`` stages in the list
    are dropped (the planner inserts its own wherever consecutive steps live in different places). Raises
    :class:`ConfigError` for stage lists that cannot apply to a camera, and :class:`PlanError`
    when no backend can run a step (the message lists every backend's verdict). ``camera_backends``: camera
    name -> that camera's own preference order (the other cameras use ``backends``); every camera still
    writes its slot of the one batch, so their outputs must meet in one place and size (a
    :class:`ConfigError` says which cameras differ). ``assume_available``: backend
    names planned as if this machine could run them (the probe asking what a device with torch_npu would do);
    their kernels still judge every step. ``live``: the measurements made on this device
    (:class:`dvpipe.probe.live.LiveCache`, or any object with ``prefer(kernel, query, verdict) -> KernelVerdict``
    and optionally ``verified(kernel, query) -> bool``); the verdict of a family whose row says ``measured``,
    planned against a ``target``, is replaced by what was measured there, and a step measured to work is
    marked :attr:`PlanStep.verified` (its kernel reads that fact from its context, never from a file).
    Default None: the documented verdicts only (planning reads no file; ``dvpipe run`` / ``dvpipe probe``
    pass the cache).
    """
    if fidelity not in ("reference", "fast"):
        raise ConfigError(f"fidelity must be 'reference' or 'fast', got {fidelity!r}")
    stages = list(stages)
    for k, st in enumerate(stages):
        if not isinstance(st, Stage) or not st.op:
            raise ConfigError(f"stages[{k}] is {st!r}, not a dvpipe stage (Decode(), Resize(...), or a Stage subclass with an op)")
    # transfers are the planner's to place (where placements differ); one in the list (e.g. the stages of
    # another plan replayed) says nothing about this plan's placements
    stages = [st for st in stages if st.op != "transfer"]
    if not stages or stages[-1].op != "batch":
        stages.append(Batch())
    if any(st.op == "batch" for st in stages[:-1]):
        raise ConfigError("Batch() must be the last stage")
    cameras = list(cameras)
    prefs = _preferences(backends, "backends")
    cam_prefs = [prefs] * len(cameras)
    if camera_backends:
        names = [cam.name for cam in cameras]
        unknown = [str(n) for n in camera_backends if n not in names]
        if unknown:
            raise ConfigError(f"camera_backends names {', '.join(unknown)}, not a camera of the rig "
                              f"({', '.join(names)})")
        cam_prefs = [_preferences(camera_backends[cam.name], f"camera_backends[{cam.name!r}]")
                     if cam.name in camera_backends else prefs for cam in cameras]
    refs = list({ref.name: ref for p in [prefs] + cam_prefs for ref in p}.values())
    avail = {ref.name: availability(ref, target) for ref in refs}
    for ref in refs:
        if ref.name in assume_available and not avail[ref.name].ok:
            load_family(ref.family)
            avail[ref.name] = KernelVerdict.yes(f"assumed available (here: {avail[ref.name].reason})")

    cam_plans = _plan_cameras(cameras, stages, cam_prefs, avail, fidelity, target, live)
    # the batch has one placement: when the device route cannot take every camera, re-plan without it
    # (the verdict says which camera and why), so the cameras meet in a host batch
    for _ in range(len(refs)):
        conflict = _batch_conflict(cam_plans, refs, avail)
        if conflict is None:
            break
        fam, why = conflict
        for ref in refs:
            if ref.family == fam and avail[ref.name].ok:
                avail[ref.name] = KernelVerdict("declined", why)
        cam_plans = _plan_cameras(cameras, stages, cam_prefs, avail, fidelity, target, live)

    _check_one_batch(cam_plans, mixed=any(p != prefs for p in cam_prefs))
    plan = Plan(cam_plans, tuple(r.name for r in prefs), fidelity, target)
    layout = family(cam_plans[0].steps[-1].backend.family).hook("batch_layout")
    if layout is not None:
        plan.device_batch = layout(plan)
    return plan


def _preferences(backends: Sequence[BackendName] | BackendName, key: str) -> list[BackendRef]:
    """A preference order as backend references (``key`` names it in the error)."""
    if isinstance(backends, str):
        backends = (backends,)
    if not backends:
        raise ConfigError(f"{key} must name at least one backend, e.g. ('cpu',)")
    return [resolve(b) for b in backends]


def _check_one_batch(cam_plans: list[CameraPlan], mixed: bool) -> None:
    """The cameras write one batch: one size, one placement (the dtype is the stage list's, the same for
    every camera). ``mixed``: some cameras have their own preference order, which the message then names."""
    sizes = {cp.out_size for cp in cam_plans}
    if len(sizes) > 1:
        listing = ", ".join(f"{cp.camera.name} {cp.out_size[1]}x{cp.out_size[0]}" for cp in cam_plans)
        raise ConfigError(f"cameras produce different output sizes ({listing}); a batch needs one size: "
                          "add Resize(size=...) or Pad(size=...)")
    places = {cp.steps[-1].spec_out.placement for cp in cam_plans}
    if len(places) > 1:
        listing = ", ".join(f"{cp.camera.name} on {cp.steps[-1].spec_out.placement} ({cp.steps[-1].backend.name})"
                            for cp in cam_plans)
        if mixed:
            raise ConfigError(f"cameras with their own backends would write their batch slots in different places "
                              f"({listing}); every camera's output must be where the batch is: give the batch "
                              "step's backend to every camera's preference order")
        raise PlanError(f"cameras would write their batch slots on different devices ({', '.join(sorted(places))}); "
                        "give the batch step one backend for all cameras")


def _plan_cameras(cameras: Sequence[Camera], stages: list, cam_prefs: Sequence[list[BackendRef]], avail: dict,
                  fidelity: Fidelity, target: Optional[Target], live: Optional[LiveMeasurements] = None) -> list[CameraPlan]:
    cam_plans = []
    for cam, prefs in zip(cameras, cam_prefs):
        spec0 = input_spec(cam)
        specs = _specs_after(stages, spec0, cam, 0)
        steps, cam_stages, specs = _plan_range(stages, spec0, specs, cam, prefs, avail, fidelity, target,
                                               with_fallback=True, live=live)
        steps, why = _place_outputs(steps, cam, target)
        steps = _insert_transfers(steps)
        img_aug, K = np.eye(3), np.asarray(cam.intrinsics, dtype=np.float64)
        for s in steps:
            if s.intrinsics is not None:
                img_aug, K = s.matrix, s.intrinsics
            else:
                img_aug = s.matrix @ img_aug
        prepad = next((spec_before.size for st, spec_before in zip(cam_stages, [spec0] + specs) if isinstance(st, Pad)),
                      specs[-1].size)
        cp = CameraPlan(cam, spec0, steps, img_aug, prepad, specs[-1].size, intrinsics=K,
                        backends=tuple(r.name for r in prefs))
        cp.route_problem = why
        cam_plans.append(cp)
    return cam_plans


def _batch_conflict(cam_plans: list[CameraPlan], prefs: Sequence[BackendRef],
                    avail: dict[str, KernelVerdict]) -> Optional[tuple[str, str]]:
    """``(family, why)`` for the first available family whose row says it cannot write this plan's batch
    for every camera (its ``batch_conflict`` hook), else None."""
    for name in dict.fromkeys(ref.family for ref in prefs if avail[ref.name].ok):
        hook = family(name).hook("batch_conflict")
        why = hook(cam_plans) if hook is not None else ""
        if why:
            return name, why
    return None
