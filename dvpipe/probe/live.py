"""``dvpipe probe --live``: run each DVPP step on the device and cache what really happens.

The documented rules say what Huawei's pages promise; the device has the last word. ``--live`` plans
each camera exactly as the probe does, then runs one synthetic frame of the camera's size and encoding
(JPEG with its subsampling, PNG, one H.264/H.265 intra access unit) through the plan with every DVPP
step on the real device (pyACL). Each DVPP step's outcome is stored in a JSON cache keyed by the target
(SoC, CANN version, driver version) and by the step (camera size and encoding, the kernel, the stages
the planner asked it about, the input spec); ``dvpipe probe`` shows it next to the documented verdict.

Steps the documented rules refuse are not forced onto the device: dvpipe's DVPP kernels re-check the
rules and never call the device for a refused step (forcing needs a mode in the DVPP backend).

Where pyACL is absent (a laptop, CI) ``--live`` refuses with the reason and ``dvpipe probe`` exits 3.

The planner prefers the measured result over the documented one when it is handed the cache
(``plan_pipeline(..., live=planning_cache())``, ``Pipeline(..., live_cache=...)``; the planner reads no
file itself and imports nothing from here), through :meth:`LiveCache.prefer` / :func:`prefer_empirical`: a
step the docs allow but the device failed is planned on the next backend (``rejected``, the measurement
as the reason); a step the docs leave open (``unknown``) that succeeded on this device is planned on DVPP,
its reason reading "verified on this device (<date>, driver <version>)", in the plan and in
``dvpipe probe``. On a device (backend ``dvpp``), a step whose documented verdict is ``unknown`` and that
was never measured for this target is verified when the pipeline is planned (:func:`verify_step`: one
synthetic frame of the step's exact input spec, the result stored in the cache and saved). The software
device (``dvpp-sim``) is never consulted: it follows the documentation. None of this ran on Ascend
hardware yet; the tests drive it on the software device with its refusal of unknowns switched off.
Cache file schema (version 1)::

    {"schema": 1,
     "targets": {"Ascend310P3|7.0.0|23.0.3": {
         "soc": "Ascend310P3", "cann": "7.0.0", "driver": "23.0.3",
         "steps": {"1600x900 jpeg420|dvpp.decode+resize|decode; resize x0.5 linear|1600x900 jpeg": {
             "ok": true, "error": null, "measured": "2026-11-30T10:00:00Z", "kernel": "dvpp.decode+resize",
             "backend": "dvpp", "ms": 1.9, "documented": "ok"}}}}}
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from .._typing import Fidelity
from ..backends import resolve
from ..codecs import VIDEO_ENCODINGS, read_frame_bytes
from ..errors import ConfigError
from ..planner import plan_pipeline
from ..stages.kernel_registry import KernelContext, KernelVerdict
from .environment import detect_soc, read_version_file
from .keys import camera_encoding, step_key, target_key
from .report import replay_dvpp, stages_for

if TYPE_CHECKING:  # names for the type checker only
    import numpy as np

    from ..stages.base import FrameSpec, Stage
    from ..stages.kernel_registry import Kernel, KernelQuery
    from ..target import Target
    from ..types import Camera

__all__ = ["LiveStatus", "LiveCache", "available", "detect_driver", "step_key", "target_key", "synthetic_frame",
           "run_live", "prefer_empirical", "default_cache_path", "verify_step", "measured_ok", "verified_words"]

_SCHEMA = 1
_DRIVER_INFO = ("/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/version.txt")


@dataclass(frozen=True)
class LiveStatus:
    ok: bool
    reason: str = ""


def available() -> LiveStatus:
    """Whether ``--live`` can run here: pyACL importable and the device opening through it (``acl.init``,
    ``acl.rt.set_device``, a context) with a SoC name (never raises). ``npu-smi`` seeing a card is not enough:
    the steps run through pyACL, and a device it cannot open would measure nothing."""
    from ..backends.dvpp._acl import runtime, why_unavailable

    why = why_unavailable("hw")
    if why:
        return LiveStatus(False, f"--live runs steps on the device and needs pyACL: {why}. The documented verdicts "
                                 "need no device: drop --live")
    try:
        soc = runtime("hw").soc_name()
    except Exception as e:  # noqa: BLE001 - the reason is the answer
        return LiveStatus(False, f"pyACL imports but the device does not open: {' '.join(str(e).split())[:300]}")
    if not soc:
        return LiveStatus(False, f"pyACL opened the device but acl.get_soc_name() returned {soc!r}")
    return LiveStatus(True, f"{soc} (acl.get_soc_name())")


def target_mismatch(target: Target) -> Optional[str]:
    """Why ``target`` is not this device (``--live`` measures the device here and files the results under the
    target: a SoC or CANN version other than the device's would file them under the wrong key), or None."""
    from .environment import find_cann_version

    soc, _how = detect_soc()
    cann, where = find_cann_version()
    wrong = []
    if soc and soc.lower() != target.soc.lower():
        wrong.append(f"SoC {target.soc}, the device is {soc}")
    if cann and cann != str(target.cann):
        wrong.append(f"CANN {target.cann}, the installed one is {cann} ({where})")
    if not wrong:
        return None
    return (f"--live measures this device and files the results under the target; the target asked for has "
            f"{' and '.join(wrong)}: drop --soc / --cann (the device's are used) or give the device's")


def detect_driver(paths: Sequence[str] = _DRIVER_INFO) -> tuple[Optional[str], str]:
    """``(driver version, where)`` from the driver's ``version.info`` (``Version=23.0.3``), else ``(None, why)``."""
    found = read_version_file(paths, r"\s*(?:Version|version)\s*=\s*(\S+)")
    return found or (None, f"no driver version file ({', '.join(paths)})")


def default_cache_path() -> str:
    """``$XDG_CACHE_HOME/dvpipe/dvpp-live.json`` (``~/.cache/dvpipe/dvpp-live.json``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dvpipe", "dvpp-live.json")


@dataclass
class LiveCache:
    """The empirical results, loaded from and saved to one JSON file."""

    path: str
    data: dict = field(default_factory=lambda: {"schema": _SCHEMA, "targets": {}})

    @classmethod
    def load(cls, path: Optional[str] = None) -> "LiveCache":
        """Read ``path`` (default :func:`default_cache_path`); a missing file is an empty cache."""
        path = path or default_cache_path()
        try:
            with open(path, "r", encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError) as e:
            raise ConfigError(f"live cache {path}: cannot read it ({e}); delete it to start over") from None
        if not isinstance(data, dict) or data.get("schema") != _SCHEMA or not isinstance(data.get("targets"), dict):
            raise ConfigError(f"live cache {path}: not a schema-{_SCHEMA} dvpipe live cache; delete it to start over")
        return cls(path, data)

    def save(self) -> None:
        """Write atomically (a temporary file renamed over the cache)."""
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".dvpp-live.", dir=os.path.dirname(os.path.abspath(self.path)))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)

    def record(self, target: Target, key: str, result: dict) -> None:
        t = self.data["targets"].setdefault(target_key(target.soc, target.cann, target.driver),
                                            {"soc": target.soc, "cann": str(target.cann),
                                             "driver": target.driver, "steps": {}})
        t["steps"][key] = dict(result)

    def get(self, target: Target, key: str) -> Optional[dict]:
        """The result for ``key`` on ``target``; with an unknown driver, the newest of any driver."""
        if getattr(target, "driver", None):
            t = self.data["targets"].get(target_key(target.soc, target.cann, target.driver))
            return dict(t["steps"][key], driver=t["driver"]) if t and key in t["steps"] else None
        found = [dict(t["steps"][key], driver=t["driver"]) for t in self.data["targets"].values()
                 if t["soc"] == target.soc and t["cann"] == str(target.cann) and key in t["steps"]]
        return max(found, key=lambda e: e.get("measured", "")) if found else None

    def prefer(self, kernel: Kernel, query: KernelQuery, documented: KernelVerdict) -> KernelVerdict:
        """The planner's hook (``plan_pipeline(..., live=cache)``): :func:`prefer_empirical` on this cache."""
        return prefer_empirical(kernel, query, documented, cache=self)

    def verified(self, kernel: Kernel, query: KernelQuery) -> bool:
        """The planner's other hook: whether this cache holds a success of the step on the query's target,
        measured on the device (never for the software device, which follows the documentation). The planner
        records it as :attr:`dvpipe.planner.PlanStep.verified`; the DVPP kernel reads it from its context."""
        target = query.target
        if getattr(query.backend, "device", "") != "hw" or target is None:
            return False
        return measured_ok(query.camera, query.stages, query.spec_in, kernel.name, target, cache=self)


# ------------------------------------------------------------------------------------------- running

def synthetic_frame(camera: Camera) -> Union[bytes, np.ndarray]:
    """One frame of ``camera``'s size and probe encoding: JPEG (with its subsampling / progressive), PNG,
    an H.264/H.265 access unit, or an NV12 array. Textured, so decoders do real work."""
    import numpy as np

    w, h = camera.width, camera.height
    y, x = np.mgrid[0:h, 0:w]
    bgr = np.stack([(x * 255 // max(1, w - 1)), (y * 255 // max(1, h - 1)), ((x + y) % 256)], -1).astype(np.uint8)
    enc = camera_encoding(camera)
    if enc == "nv12":
        import cv2

        i420 = cv2.cvtColor(bgr[: h - h % 2, : w - w % 2], cv2.COLOR_BGR2YUV_I420)
        hh, ww = h - h % 2, w - w % 2
        yplane, u, v = i420[:hh], i420[hh:hh + hh // 4].reshape(-1), i420[hh + hh // 4:].reshape(-1)
        uv = np.stack([u, v], -1).reshape(hh // 2, ww)
        return np.concatenate([yplane, uv], 0)
    if enc == "png":
        import cv2

        return cv2.imencode(".png", bgr)[1].tobytes()
    if enc == "jpeg440":  # Pillow has no 4:4:0; libjpeg through OpenCV writes it (H1 = 1, V1 = 2)
        import cv2

        return cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90, cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
                                          cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440])[1].tobytes()
    if enc.startswith("jpeg"):
        import io

        from PIL import Image

        img = Image.fromarray(bgr[..., ::-1])
        kw: dict = {"quality": 90}
        if enc == "jpeg400":
            img = img.convert("L")
        elif enc == "jpeg-progressive":
            kw["progressive"] = True
        elif enc in ("jpeg444", "jpeg422", "jpeg420"):
            kw["subsampling"] = {"jpeg444": 0, "jpeg422": 1, "jpeg420": 2}[enc]
        buf = io.BytesIO()
        img.save(buf, format="JPEG", **kw)
        return buf.getvalue()
    if enc in VIDEO_ENCODINGS:
        import io

        import av

        buf = io.BytesIO()
        out = av.open(buf, "w", format="h264" if enc == "h264" else "hevc")
        s = out.add_stream("libx264" if enc == "h264" else "libx265", rate=10)
        s.width, s.height, s.pix_fmt = w - w % 2, h - h % 2, "yuv420p"
        # one intra picture, no B-frames: a decoder returns it for this access unit alone
        s.options = {"bf": "0", "g": "1"} if enc == "h264" else {"x265-params": "bframes=0:keyint=1:log-level=error"}
        for pkt in list(s.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(bgr[: s.height, : s.width]),
                                                            format="bgr24"))) + list(s.encode()):
            out.mux(pkt)
        out.close()
        return buf.getvalue()
    raise ConfigError(f"the live probe has no synthetic frame for encoding {enc!r}: it makes nv12, png, jpeg "
                      "(jpeg400, jpeg-progressive), h264 and h265 frames; probe this camera without --live")


def run_live(cameras: Sequence[Camera], target: Target, cache: LiveCache, *, profile: Optional[str] = None,
             stages: Optional[Sequence[Stage]] = None, fidelity: Fidelity = "fast", backend: str = "dvpp") -> list[dict]:
    """Run one synthetic frame per camera through its probe plan, each DVPP step on ``backend``.

    Every step the plan puts on DVPP is run on the device and its outcome recorded in ``cache`` (not saved
    here); when it fails, the chain goes on with the step's planned runtime fallback. Steps the documented
    rules route elsewhere are not forced onto the device: dvpipe's DVPP kernels re-check the rules and do
    not call the device for a refused step. ``backend="dvpp-sim"`` runs the same loop on the software
    device (tests).

    Returns the recorded results, each with its ``key`` and ``camera``.
    """
    import numpy as np

    results = []
    for cam in cameras:
        # planned on the documented verdicts (no live cache): every step the docs put on DVPP is measured again
        plan = plan_pipeline([cam], stages_for(cam, profile, stages, fidelity), (backend, "cpu"), fidelity=fidelity,
                             target=target)
        cp = plan.cameras[0]
        _declined, asked = replay_dvpp(cam, stages_for(cam, profile, stages, fidelity), cp.steps, (backend, "cpu"),
                                        fidelity, target)
        data: Any = synthetic_frame(cam)
        if isinstance(data, (bytes, bytearray)):
            data = read_frame_bytes(bytes(data))
        for k, step in enumerate(cp.steps):
            out = np.zeros((3, step.spec_out.height, step.spec_out.width), step.spec_out.dtype) \
                if step.writes_batch else None
            if step.backend.family != "dvpp" or step.stages[0].op == "transfer":  # a transfer is no DVPP unit
                ctx = KernelContext(cam, step.spec_in, step.spec_out, step.backend, plan.fidelity, out=out,
                                    target=target)
                data = step.kernel.fn(data, step.stages, ctx)
                continue
            state: dict = {}
            # the step's state is closed right after it (below): its picture comes back to the host in the step
            # (the plan's transfer step after it then passes the host pixels through)
            ctx = KernelContext(cam, step.spec_in, step.spec_out.with_(placement="host"), resolve(backend),
                                plan.fidelity, out=out, target=target, state=state)
            t0 = time.perf_counter()
            try:
                produced, err = step.kernel.fn(data, step.stages, ctx), None
            except Exception as e:  # noqa: BLE001 - the device's answer is the result
                produced, err = None, f"{type(e).__name__}: {e}"
            finally:
                from ..backends.dvpp import close_state

                close_state(state)  # the step's channel, stream and configuration, released in order
            entry = {"ok": err is None, "error": err, "kernel": step.kernel.name, "backend": backend,
                     "ms": round((time.perf_counter() - t0) * 1e3, 3), "documented": step.chosen.status,
                     "measured": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
            key = step_key(cam, asked.get(k, step.stages), step.spec_in, step.kernel.name)
            cache.record(target, key, entry)
            results.append(dict(entry, key=key, camera=cam.name))
            if err is None:
                data = produced
                continue
            for fb in step.fallback:  # failed on the device: the planned runtime fallback
                fout = np.zeros((3, fb.spec_out.height, fb.spec_out.width), fb.spec_out.dtype) if fb.writes_batch \
                    else None
                data = fb.kernel.fn(data, fb.stages, KernelContext(cam, fb.spec_in, fb.spec_out, fb.backend,
                                                                   plan.fidelity, out=fout, target=target))
    return results


# ------------------------------------------------------------------------------------------- planner hook

_DEFAULT: dict[str, Optional[LiveCache]] = {}


def _default_cache() -> Optional[LiveCache]:
    path = default_cache_path()
    if path not in _DEFAULT:
        try:
            _DEFAULT[path] = LiveCache.load(path) if os.path.exists(path) else None
        except Exception:  # noqa: BLE001 - a broken cache never breaks planning
            _DEFAULT[path] = None
    return _DEFAULT[path]


def planning_cache() -> LiveCache:
    """The live cache ``dvpipe run`` and ``dvpipe probe`` hand the planner (``plan_pipeline(live=...)``,
    ``Pipeline(live_cache=...)``): :func:`default_cache_path`'s contents, an empty cache at that path when the
    file is missing or unreadable (a broken cache never breaks planning). Loaded once per process."""
    cache = _default_cache()
    if cache is None:
        cache = _DEFAULT[default_cache_path()] = LiveCache(default_cache_path())
    return cache


def _device_here() -> bool:
    """pyACL imports and a SoC answers (a plan made on a laptop never tries to run a step)."""
    try:
        return available().ok
    except Exception:  # noqa: BLE001
        return False


def verified_words(entry: dict) -> str:
    """``verified on this device (2026-11-30T10:00:00Z, driver 23.0.3)`` for a cache entry."""
    return f"verified on this device ({entry.get('measured', '?')}, driver {entry.get('driver') or '?'})"


def measured_ok(camera: Camera, stages: Sequence[Stage], spec_in: FrameSpec, kernel_name: str, target: Target,
                cache: Optional[LiveCache] = None) -> bool:
    """Whether the live cache holds a success for this step on ``target``."""
    cache = cache if cache is not None else _default_cache()
    if cache is None:
        return False
    e = cache.get(target, step_key(camera, stages, spec_in, kernel_name))
    return bool(e and e.get("ok"))


def verify_step(kernel: Kernel, query: KernelQuery, cache: LiveCache, backend: Optional[str] = None) -> dict:
    """Run ``kernel`` once on a synthetic frame of ``query``'s camera (its exact size and encoding), with
    what the docs leave open accepted, and record the outcome in ``cache`` (not saved here).

    Returns the cache entry (``ok``, ``error``, ``measured``, ``driver`` ...). ``backend``: ``dvpp`` (the
    device; default: the query's backend) or ``dvpp-sim`` (tests, with the software device's refusal of
    unknowns switched off by the caller).
    """
    from ..backends.dvpp.support import accepting_unknown

    name = backend or query.backend.name
    cam, target = query.camera, query.target
    if target is None:
        raise ConfigError("verify_step needs a query planned for a target: plan with target=dvpipe.Target(soc, cann)")
    data: Any = synthetic_frame(cam)
    if isinstance(data, (bytes, bytearray)):
        data = read_frame_bytes(bytes(data))
    state: dict = {}
    spec_out = query.specs[-1] if getattr(query, "specs", None) else query.spec_in
    ctx = KernelContext(cam, query.spec_in, spec_out, resolve(name), "fast", state=state, target=target)
    t0 = time.perf_counter()
    try:
        with accepting_unknown():
            kernel.fn(data, tuple(query.stages), ctx)
        err = None
    except Exception as e:  # noqa: BLE001 - the device's answer is the result
        err = f"{type(e).__name__}: {e}"
    finally:
        from ..backends.dvpp import close_state

        close_state(state)
    entry = {"ok": err is None, "error": err, "kernel": kernel.name, "backend": name,
             "ms": round((time.perf_counter() - t0) * 1e3, 3), "documented": "unknown",
             "measured": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    cache.record(target, step_key(cam, query.stages, query.spec_in, kernel.name), entry)
    return dict(entry, driver=getattr(target, "driver", None))


def prefer_empirical(kernel: Kernel, query: KernelQuery, documented: KernelVerdict, cache: Optional[LiveCache] = None,
                     verify: bool = True) -> KernelVerdict:
    """The planner's verdict for a DVPP kernel, preferring a measured result over the documented one.

    Args:
        kernel: the :class:`~dvpipe.stages.kernel_registry.Kernel` asked.
        query: the :class:`~dvpipe.stages.kernel_registry.KernelQuery` it was asked.
        documented: the kernel's own (documented-rules) :class:`~dvpipe.stages.kernel_registry.KernelVerdict`.
        cache: the live cache (default: :func:`default_cache_path`, when it exists).
        verify: on a device, verify a documented-``unknown`` step never measured (:func:`verify_step`).

    Returns ``documented`` unchanged when there is no target, the backend is the software device, or nothing
    was measured for this step on this target. When the device contradicts the documentation, a verdict
    saying what was measured (with the documented verdict in its reason): ``rejected`` for a documented-ok
    step that failed on the device; ``ok`` ("verified on this device (date, driver)") for a documented-
    ``unknown`` step that worked there. A measured success of a documented-ok step keeps the documented
    verdict (and its detour, which is what ran on the device).
    """
    target = getattr(query, "target", None)
    if target is None or getattr(query.backend, "device", "") == "sim":
        return documented
    key = step_key(query.camera, query.stages, query.spec_in, kernel.name)
    explicit = cache is not None
    cache = cache if cache is not None else _default_cache()
    e = cache.get(target, key) if cache is not None else None
    if e is None and verify and documented.status == "unknown" and getattr(query.backend, "device", "") == "hw" \
            and _device_here():
        if cache is None:
            cache = LiveCache.load(default_cache_path())
            _DEFAULT[cache.path] = cache
        e = verify_step(kernel, query, cache)
        try:
            cache.save()
        except OSError:
            pass
    if e is None:
        return documented
    assert cache is not None  # a measurement comes from a cache
    when = f"measured {e.get('measured', '?')}, driver {e.get('driver') or '?'}"
    if not e["ok"] and documented.ok:
        return KernelVerdict("rejected", f"fails on this device ({when}): {e.get('error')}; the documented rules allow it",
                             rule="live", source=cache.path)
    if e["ok"] and documented.status == "unknown":
        from ..backends.dvpp.support import accepting_unknown

        with accepting_unknown():
            v = kernel.check(query)
        if v.ok:
            return KernelVerdict("ok", f"{verified_words(e)}: {v.reason}; the documentation leaves it open "
                                       f"({documented.reason})", rule="live", source=cache.path, detour=v.detour,
                                 replace=v.replace)
    del explicit
    return documented
