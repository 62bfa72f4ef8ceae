"""``check_kernel(kernel, backend)``: one registered kernel against the ``reference`` backend.

For a kernel covering the op run ``(o1, ..., on)`` of a backend family, every *case* is a one-camera
pipeline ``prefix + run + suffix`` on a crop of a real photo from ``samples/frames/`` (odd and prime
sizes, re-encoded as JPEG), at one fidelity:

* ``prefix`` brings the frame to the run's first op (``Decode()``, optionally ``Normalise`` for a float
  input), ``suffix`` ends it with ``Batch()``;
* the kernel's own ``supports`` is asked first, with the :class:`KernelQuery` the planner builds. A
  refusal must carry a reason (and a status other than ``ok``); nothing runs;
* an accepted case is planned with the kernel's family restricted to exactly this kernel at exactly
  this position (:func:`only_kernel`) and ``reference`` (plus the family's helper backends, e.g.
  ``dvpp-sim`` before ``aipp-sim``) for everything else, so the rest of the pipeline is the oracle; the
  plan must really run the kernel there. Its batch is compared with the same stages planned on
  ``reference`` alone, within the bound :func:`tolerances.kernel_bound` gives. A detour the kernel
  announces (``KernelVerdict.replace``) is compared with the reference running the replacement stages.

The ``reference`` backend's own kernels are the oracle of everything else; they are checked the other
way round, against the CPU backend's independent implementation (:data:`ORACLE`). Transfer kernels are
planner-inserted steps: they are checked through the plans that contain them
(tests/backends/test_kernel_conformance.py).

A newly registered kernel is picked up by :func:`registered_kernels`; a stage op with no entry in
:data:`STAGE_VARIANTS` must be given ``variants=`` (or added there).
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import cv2
import numpy as np

import dvpipe as dv
from dvpipe import planner
from dvpipe.backends import FAMILIES, load_family, resolve
from dvpipe.planner import input_spec
from dvpipe.stages import Batch, Crop, Decode, Normalise, Pad, Resize
from dvpipe.stages.base import FrameSpec, Stage
from dvpipe.stages import kernel_registry as registry
from dvpipe.stages.kernel_registry import Kernel, KernelQuery, KernelVerdict

import tolerances

try:  # issue 17: stages see their camera (output_spec(spec, camera)); the planner calls them through this
    from dvpipe.stages.base import output_spec_of
except ImportError:  # before that change
    def output_spec_of(stage: Stage, spec: FrameSpec, camera: Any) -> FrameSpec:
        return stage.output_spec(spec)

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "frames"

#: (width, height) of the cases: both prime, both prime, even (units that need even sizes accept it)
SIZES = ((97, 61), (251, 139), (320, 180))
FIDELITIES = ("reference", "fast")
TINY = dict(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), to_rgb=True)
BASE = dict(mean=(103.530, 116.280, 123.675), std=(1.0, 1.0, 1.0), to_rgb=False)

#: the deployment targets the DVPP families are checked for (software device)
DVPP_TARGETS = (dv.Target("Ascend310P3", "7.0.0"), dv.Target("Ascend910B3", "8.0.0"))

StageFactory = Callable[[FrameSpec], Optional[Stage]]


def _odd(n: int) -> int:
    return max(1, n | 1)


#: per op, the stage declarations a case may use, each built from the spec entering it (None: not for this spec)
STAGE_VARIANTS: dict[str, list[StageFactory]] = {
    "decode": [lambda s: Decode()],
    "resize": [
        lambda s: Resize(scale=0.5),
        lambda s: Resize(size=(_odd(s.height * 2 // 3), _odd(s.width * 3 // 5)), interpolation="area"),
        lambda s: Resize(scale=1.3),
        lambda s: Resize(scale=0.7, interpolation="nearest"),
        lambda s: Resize(size=(_odd(s.height // 2), _odd(s.width // 2)), interpolation="pil_bicubic")
        if s.dtype == "uint8" else None,
    ],
    "crop": [lambda s: Crop(left=3, top=2, width=max(1, s.width - 8), height=max(1, s.height - 5)),
             lambda s: Crop(left=0, top=1, width=max(1, s.width // 2 + 1), height=max(1, s.height - 1))],
    "normalise": [lambda s: Normalise(**TINY), lambda s: Normalise(**BASE, dtype="float16"),
                  lambda s: Normalise(**TINY, dtype="float16"), lambda s: Normalise(**BASE)],
    # a uint8 image is padded with a grey level (a negative value has no uint8 meaning: see the report of issue 17)
    "pad": [lambda s: Pad(size_divisor=32),
            lambda s: Pad(size=(s.height + 3, s.width + 5), value=7.0 if s.dtype == "uint8" else -1.5)],
    "batch": [lambda s: Batch()],
}
try:  # issue 17's per-camera stage (it needs the case's camera to have a lens: see LENS_OPS)
    from dvpipe.stages.camera import Undistort

    STAGE_VARIANTS["undistort"] = [lambda s: Undistort(alpha=0.0), lambda s: Undistort(alpha=1.0)]
except ImportError:
    pass

#: families whose steps need another family's output: the backends planned before them (their own kernels)
HELPERS = {"aipp": ("dvpp-sim",)}
#: the oracle each family is compared with (and that runs the rest of the case): ``reference``, except for
#: the reference backend itself, which is checked against the CPU backend's independent implementation
ORACLE = {"reference": "cpu"}


def backends_for(family: str) -> list[tuple[str, Any]]:
    """``[(backend name, target)]`` a kernel of ``family`` is checked on (one machine-runnable backend each)."""
    if family == "torch":
        return [("torch:cpu", None)]
    if family == "dvpp":
        return [("dvpp-sim", t) for t in DVPP_TARGETS]
    if family == "aipp":
        return [("aipp-sim", DVPP_TARGETS[0])]
    return [(family, None)]


def load_all_families() -> dict[str, Optional[str]]:
    """Import every backend family module that loads here (registering its kernels): ``{family: why not}``."""
    return {family: load_family(family) for family in FAMILIES}


def registered_kernels() -> list[Kernel]:
    """Every registered kernel (all families), in a stable order."""
    if hasattr(registry, "all_kernels"):
        found = registry.all_kernels()
    else:  # before the registry had a public listing
        with registry._LOCK:
            found = [k for bucket in registry._REGISTRY.values() for k in bucket]
    return sorted(found, key=lambda k: (k.family, k.ops, k.name))


def kernel_id(kernel: Kernel) -> str:
    return f"{kernel.family}:{'+'.join(kernel.ops)}:{kernel.name}"


# -- inputs -----------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _photo(camera_index: int) -> np.ndarray:
    cams = sorted(p for p in SAMPLES.iterdir() if p.is_dir())
    path = sorted(cams[camera_index % len(cams)].glob("*.jpg"))[0]
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        raise FileNotFoundError(f"cannot read {path}; regenerate samples/ (python tools/make_samples.py)")
    return img


@lru_cache(maxsize=None)
def photo_jpeg(size: tuple[int, int], camera_index: int = 0) -> bytes:
    """A ``width x height`` window of a real sample photo (BGR), JPEG-encoded (quality 95, 4:2:0)."""
    w, h = size
    img = _photo(camera_index)
    top, left = (img.shape[0] - h) // 3, (img.shape[1] - w) // 3  # off-centre: texture, not sky
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(img[top:top + h, left:left + w]),
                           [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    return buf.tobytes()


#: the lens of the cases whose run includes an op in :data:`LENS_OPS`: OpenCV pinhole (k1, k2, p1, p2, k3)
DISTORTION = (-0.12, 0.03, 0.001, -0.0008, 0.0)
LENS_OPS = {"undistort"}


@lru_cache(maxsize=None)
def rig_for(size: tuple[int, int], distortion: Optional[tuple[float, ...]] = None) -> dv.Rig:
    """A one-camera rig (``CAM0``, JPEG, ``width x height``), with ``distortion`` when given."""
    w, h = size
    f = 0.8 * w
    cam = {"name": "CAM0", "width": w, "height": h, "encoding": "jpeg",
           "intrinsics": [[f, 0, w / 2], [0, f, h / 2], [0, 0, 1]],
           "lidar2cam": [[1, 0, 0, 0], [0, 0, -1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]}
    if distortion is not None:
        cam["distortion"] = list(distortion)
    return dv.Rig.from_dict({"name": "check", "cameras": [cam]})


# -- cases ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One check: ``prefix + run + suffix`` on a ``size`` crop of photo ``photo`` at ``fidelity``."""

    size: tuple[int, int]
    photo: int
    fidelity: str
    prefix: tuple[Stage, ...]
    run: tuple[Stage, ...]
    suffix: tuple[Stage, ...]
    distortion: Optional[tuple[float, ...]] = None  # the camera's lens (None: ideal pinhole)

    @property
    def rig(self) -> dv.Rig:
        return rig_for(self.size, self.distortion)

    @property
    def stages(self) -> tuple[Stage, ...]:
        return self.prefix + self.run + self.suffix

    def __str__(self) -> str:
        parts = [" ".join(s.describe() for s in p) for p in (self.prefix, self.run, self.suffix)]
        return f"{self.size[0]}x{self.size[1]} {self.fidelity}: {parts[0]} | {parts[1]} | {parts[2]}"


def _build(ops: Sequence[str], spec: FrameSpec, offset: int, variants: dict[str, list[StageFactory]],
           camera: Any) -> Optional[tuple[tuple[Stage, ...], FrameSpec]]:
    out = []
    for j, op in enumerate(ops):
        choices = variants.get(op)
        if not choices:
            raise KeyError(f"no stage variants for op {op!r}: pass variants={{{op!r}: [factory, ...]}} to "
                           "check_kernel or add it to kernel_check.STAGE_VARIANTS")
        # offset < 0: the first variant only; else the first variant from (offset + j) on that applies to this spec
        order = [0] if offset < 0 else [(offset + j + k) % len(choices) for k in range(len(choices))]
        stage = None
        for index in order:
            stage = choices[index](spec)
            if stage is not None:
                try:
                    spec = output_spec_of(stage, spec, camera)
                except dv.ConfigError:
                    stage = None
                    continue
                break
        if stage is None:
            return None
        out.append(stage)
    return tuple(out), spec


def cases_for(kernel: Kernel, variants: Optional[dict[str, list[StageFactory]]] = None) -> list[Case]:
    """The cases ``kernel`` is checked on: every size, both fidelities, each stage variant at least once,
    with a uint8 and (when the run does not normalise) a float input."""
    variants = {**STAGE_VARIANTS, **(variants or {})}
    ops = kernel.ops
    if ops[0] == "transfer":
        return []  # a planner-inserted step: checked through the plans that contain it
    prefixes: list[tuple[Stage, ...]] = [()] if ops[0] == "decode" else [(Decode(),)]
    if ops[0] != "decode" and "normalise" not in ops:  # the run on float pixels too
        prefixes.append((Decode(), Normalise(**TINY)))
    n_var = max(len(variants.get(o, ())) for o in ops)
    cases = []
    for k, prefix in enumerate(prefixes):
        # v = -1: the canonical case (every op's first variant, the even size); then each variant once
        for v in range(-1, max(n_var, len(SIZES))):
            size = SIZES[-1] if v < 0 else SIZES[(v + k) % len(SIZES)]
            lens = DISTORTION if LENS_OPS & set(ops) else None
            cam = rig_for(size, lens).cameras[0]
            spec = input_spec(cam)
            built = _build([s.op for s in prefix], spec, 0, variants, cam) if prefix else ((), spec)
            if built is None:
                continue
            run = _build(ops, built[1], v, variants, cam)
            if run is None:
                continue
            suffix = () if ops[-1] == "batch" else (Batch(),)
            # decoders and resizers have fidelity-specific paths: both fidelities each time; the others alternate
            both = ops[0] in ("decode", "resize") or v < 1
            fids = FIDELITIES if both else (FIDELITIES[(v + k) % 2],)
            if kernel.family in ORACLE:  # the oracle runs at fidelity reference (the reference kernels ignore it)
                fids = ("reference",)
            for fidelity in fids:
                cases.append(Case(size, (v + k) % 6, fidelity, prefix, run[0], suffix, lens))
    return cases


# -- planning with one kernel -----------------------------------------------------------------------
@contextlib.contextmanager
def only_kernel(kernel: Kernel, start: int, n_stages: int) -> Iterator[None]:
    """Within the block the planner sees, for ``kernel.family``, only ``kernel`` and only at stage ``start``
    of an ``n_stages`` list; other families' kernels only where they do not run into that stage from
    before it (so the plan runs ``kernel`` there when it accepts, and another backend when it declines). Transfer kernels stay: the planner inserts them."""
    original = planner.kernels_at

    def kernels_at(ops: Sequence[str], family: str) -> list[Kernel]:
        if ops and ops[0] == "transfer":
            return original(ops, family)
        pos = n_stages - len(ops)
        if family == kernel.family:
            return [kernel] if pos == start and tuple(ops[:len(kernel.ops)]) == kernel.ops else []
        return [k for k in original(ops, family) if not pos < start < pos + len(k.ops)]

    planner.kernels_at = kernels_at
    try:
        yield
    finally:
        planner.kernels_at = original


def query_for(kernel: Kernel, case: Case, backend: str, target: Any) -> KernelQuery:
    """The :class:`KernelQuery` the planner asks ``kernel`` for ``case`` (specs through the prefix on the host)."""
    cam = case.rig.cameras[0]
    spec = input_spec(cam)
    for st in case.prefix:
        spec = output_spec_of(st, spec, cam)
    ref = resolve(backend)
    if case.prefix and kernel.family in HELPERS:  # the helper's step leaves the frame in its memory
        spec = spec.with_(placement=resolve(HELPERS[kernel.family][0]).placement)
    specs, s = [], spec
    for st in case.run:
        s = output_spec_of(st, s, cam)
        specs.append(s)
    return KernelQuery(case.run, spec, tuple(specs), cam, ref, case.fidelity, target)


def _to_numpy(images: Any, family: str) -> np.ndarray:
    if type(images).__module__.startswith("torch"):
        return images.detach().cpu().numpy()
    if hasattr(images, "meta") and getattr(images, "layout", "") == "NV12":  # AIPP route: apply the model's AIPP
        from dvpipe.backends.dvpp.aipp import apply_aipp

        cfg = images.meta["aipp"]
        n, rows, w = images.shape[0], cfg.src_image_size_h * 3 // 2, cfg.src_image_size_w
        flat = np.asarray(images.to_host()).reshape(n, -1)  # one slot per camera, possibly padded at its end
        return apply_aipp(cfg, flat[:, :rows * w].reshape(n, rows, w))
    return np.asarray(images)


_REFERENCE_CACHE: dict[tuple, np.ndarray] = {}


def reference_batch(stages: Sequence[Stage], case: Case, oracle: str = "reference") -> np.ndarray:
    """The ``oracle`` backend's batch for ``stages`` on the case's photo and camera at fidelity ``reference``
    (cached)."""
    key = (tuple(stages), case.size, case.photo, case.distortion, oracle)
    if key not in _REFERENCE_CACHE:
        with dv.Pipeline(case.rig, list(stages), backends=(oracle,), fidelity="reference") as pipe:
            batch = pipe.process({"CAM0": photo_jpeg(case.size, case.photo)})
            assert batch.valid.all(), f"the reference cannot run {list(stages)}: {batch.drops}"
            _REFERENCE_CACHE[key] = np.array(batch.images, copy=True)
    return _REFERENCE_CACHE[key]


@dataclass
class Outcome:
    """What one case gave: ``refused`` (with the verdict) or compared (with the error and the bound)."""

    case: Case
    backend: str
    verdict: KernelVerdict
    max_err: float = float("nan")
    bound: Optional[tolerances.Bound] = None
    problem: str = ""  # empty when the case passed
    plan: tuple[str, ...] = ()  # the kernel names of the camera's planned steps (accepted cases)

    @property
    def refused(self) -> bool:
        return not self.verdict.ok


def run_case(kernel: Kernel, case: Case, backend: str, target: Any) -> Outcome:
    """Check ``kernel`` on one case (see the module docstring); an exception is a failed case."""
    try:
        return _run_case(kernel, case, backend, target)
    except Exception as e:  # noqa: BLE001 - reported as the case's problem, with the others
        return Outcome(case, backend, KernelVerdict.yes(), problem=f"raised {type(e).__name__}: {e}")


def _run_case(kernel: Kernel, case: Case, backend: str, target: Any) -> Outcome:
    verdict = kernel.check(query_for(kernel, case, backend, target))
    if not verdict.ok:
        problem = ""
        if not verdict.reason.strip():
            problem = f"refused ({verdict.status}) without a reason"
        elif verdict.status not in ("rejected", "declined", "unknown", "unavailable"):
            problem = f"refused with status {verdict.status!r}"
        return Outcome(case, backend, verdict, problem=problem)
    start = len(case.prefix)
    stages = list(case.stages)
    want_stages = list(case.prefix) + list(verdict.replace or case.run) + list(case.suffix)
    oracle = ORACLE.get(kernel.family, "reference")
    prefs = (backend,) + HELPERS.get(kernel.family, ()) + (oracle,)
    with only_kernel(kernel, start, len(stages)):
        pipe = dv.Pipeline(case.rig, stages, backends=prefs, fidelity=case.fidelity, target=target)
    with pipe:
        steps = [s for s in pipe.plan.cameras[0].steps if s.stages[0].op != "transfer" or s.kernel.fn is kernel.fn]
        ran = [s for s in steps if s.kernel.fn is kernel.fn and s.backend.name == backend]
        if not ran:  # the planner's own policy declined it (e.g. a detour that would change the batch size)
            at = steps[start] if start < len(steps) else steps[-1]
            mine = [v for b, v in at.verdicts if b == backend]
            v = mine[-1] if mine else KernelVerdict("declined", "")
            return Outcome(case, backend, v, problem="" if v.reason.strip() and not v.ok else
                           f"the kernel accepted but the plan does not run it and gives no reason:\n{pipe.plan}")
        batch = pipe.process({"CAM0": photo_jpeg(case.size, case.photo)})
        if not batch.valid.all():
            return Outcome(case, backend, verdict, problem=f"accepted, then dropped the frame: {batch.drops}")
        if batch.fallbacks:
            return Outcome(case, backend, verdict, problem=f"accepted, then fell back: {batch.fallbacks}")
        got = _to_numpy(batch.images, kernel.family)
        plan = tuple(st.kernel.name for st in pipe.plan.cameras[0].steps)
    want = reference_batch(want_stages, case, oracle)
    bound = tolerances.kernel_bound(ORACLE.get(kernel.family, kernel.family), kernel.ops, case.stages, case.fidelity,
                                    str(want.dtype))
    if got.shape != want.shape:
        return Outcome(case, backend, verdict, bound=bound, problem=f"shape {got.shape}, reference {want.shape}",
                       plan=plan)
    if str(got.dtype) != str(want.dtype) and kernel.family != "aipp":
        return Outcome(case, backend, verdict, bound=bound, problem=f"dtype {got.dtype}, reference {want.dtype}",
                       plan=plan)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    problem = bound.violation(err, want) if np.isfinite(got).all() else "non-finite output"
    return Outcome(case, backend, verdict, float(err.max()), bound, problem, plan)


def check_kernel(kernel: Kernel, backend: Optional[str] = None, *, target: Any = None,
                 variants: Optional[dict[str, list[StageFactory]]] = None,
                 skip: Optional[Callable[[Kernel, Case], bool]] = None) -> list[Outcome]:
    """Check ``kernel`` on every case for ``backend`` (default: each of :func:`backends_for`) and return the
    outcomes; raises ``AssertionError`` listing every failing case. ``skip(kernel, case)`` leaves out the
    cases of a known, separately tested defect."""
    runs = [(backend, target)] if backend is not None else backends_for(kernel.family)
    cases = [c for c in cases_for(kernel, variants) if skip is None or not skip(kernel, c)]
    outcomes = [run_case(kernel, case, b, t) for (b, t), case in itertools.product(runs, cases)]
    bad = [o for o in outcomes if o.problem]
    if bad:
        lines = [f"{o.backend} {o.case}: {o.problem}" for o in bad[:8]]
        raise AssertionError(f"{kernel_id(kernel)}: {len(bad)} of {len(outcomes)} cases fail\n  " + "\n  ".join(lines))
    return outcomes


def unregister(kernel: Kernel) -> None:
    """Remove ``kernel`` from the registry (test teardown: the registry has no public removal yet)."""
    with registry._LOCK:
        bucket = registry._REGISTRY.get(kernel.ops[0], [])
        bucket[:] = [k for k in bucket if k is not kernel]
        if not bucket:
            registry._REGISTRY.pop(kernel.ops[0], None)


def find(ops: Sequence[str], family: str) -> Kernel:
    """The registered kernel of ``family`` for exactly ``ops``."""
    found = [k for k in registered_kernels() if k.family == family and k.ops == tuple(ops)]
    assert found, f"no {family} kernel for {'+'.join(ops)}"
    return found[0]


__all__ = ["check_kernel", "cases_for", "registered_kernels", "kernel_id", "load_all_families", "run_case",
           "Outcome", "Case", "STAGE_VARIANTS", "unregister", "find", "photo_jpeg", "rig_for", "only_kernel"]
