"""``dvpipe probe --live``: run each DVPP step on the device and cache what really happens.

The documented rules say what Huawei's pages promise; the device has the last word. ``--live``
plans each camera exactly as the probe does, then runs one synthetic frame of the camera's size and
encoding through the plan on the real DVPP backend (pyACL). Every step a DVPP unit implements is
tried on the device, including the steps the documented rules reject or leave open (those are run
*in addition to* the planned fallback, so the chain goes on). Each result is stored in a JSON cache
keyed by the target (SoC, CANN version, driver version) and by the step (camera size and encoding,
the stages, the input spec).

Where pyACL is absent (a laptop, CI) ``--live`` refuses with the reason and ``dvpipe probe`` exits 3.

The planner prefers an empirical result over the documented one through :func:`prefer_empirical`
(the hook ``planner._plan_range`` calls for DVPP kernels). Cache file schema (version 1)::

    {"schema": 1,
     "targets": {"Ascend310P3|7.0.0|23.0.3": {
         "soc": "Ascend310P3", "cann": "7.0.0", "driver": "23.0.3",
         "steps": {"1242x375 png|decode|decode|1242x375 png": {
             "ok": true, "error": null, "measured": "2026-11-30T10:00:00Z", "kernel": "...",
             "backend": "dvpp", "ms": 1.9, "documented": "unknown"}}}}}
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

__all__ = ["LiveStatus", "LiveCache", "available", "detect_driver", "step_key", "target_key", "synthetic_frame",
           "run_live", "prefer_empirical", "default_cache_path"]

_SCHEMA = 1
_DRIVER_INFO = ("/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/version.txt")


@dataclass(frozen=True)
class LiveStatus:
    ok: bool
    reason: str = ""


def available() -> LiveStatus:
    """Whether ``--live`` can run here: pyACL importable and a SoC answering (never raises)."""
    try:
        import acl  # noqa: F401
    except Exception as e:  # noqa: BLE001 - report, never raise
        return LiveStatus(False, f"pyACL (the `acl` module shipped with CANN) is not importable ({type(e).__name__}: "
                                 f"{e}); run on the Ascend machine after `source <install>/set_env.sh`. The "
                                 "documented verdicts need no device: drop --live")
    from .environment import detect_soc

    soc, how = detect_soc()
    if not soc:
        return LiveStatus(False, f"pyACL imports but no Ascend SoC answers ({how})")
    return LiveStatus(True, f"{soc} ({how})")


def detect_driver(paths: Sequence[str] = _DRIVER_INFO) -> tuple[Optional[str], str]:
    """``(driver version, where)`` from the driver's ``version.info`` (``Version=23.0.3``), else ``(None, why)``."""
    for path in paths:
        try:
            with open(path, "r", encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = re.match(r"\s*(?:Version|version)\s*=\s*(\S+)", line)
                    if m:
                        return m.group(1), path
        except OSError:
            continue
    return None, f"no driver version file ({', '.join(paths)})"


def default_cache_path() -> str:
    """``$XDG_CACHE_HOME/dvpipe/dvpp-live.json`` (``~/.cache/dvpipe/dvpp-live.json``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dvpipe", "dvpp-live.json")


def target_key(soc: str, cann: str, driver: Optional[str]) -> str:
    return f"{soc}|{cann}|{driver or '?'}"


def step_key(camera: Any, stages: Sequence[Any], spec_in: Any) -> str:
    """The cache key of one step: camera size and encoding, ops, stage parameters, input spec."""
    from .report import camera_encoding

    ops = "+".join(s.op for s in stages)
    desc = "; ".join(s.describe() for s in stages)
    return f"{camera.width}x{camera.height} {camera_encoding(camera)}|{ops}|{desc}|{spec_in}"


@dataclass
class LiveCache:
    """The empirical results, loaded from and saved to one JSON file."""

    path: str
    data: dict = field(default_factory=lambda: {"schema": _SCHEMA, "targets": {}})

    @classmethod
    def load(cls, path: Optional[str] = None) -> "LiveCache":
        """Read ``path`` (default :func:`default_cache_path`); a missing file is an empty cache."""
        from ..errors import ConfigError

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

    def record(self, target: Any, key: str, result: dict) -> None:
        t = self.data["targets"].setdefault(target_key(target.soc, target.cann, target.driver),
                                            {"soc": target.soc, "cann": str(target.cann),
                                             "driver": target.driver, "steps": {}})
        t["steps"][key] = dict(result)

    def get(self, target: Any, key: str) -> Optional[dict]:
        """The result for ``key`` on ``target``; with an unknown driver, the newest of any driver."""
        if getattr(target, "driver", None):
            t = self.data["targets"].get(target_key(target.soc, target.cann, target.driver))
            return dict(t["steps"][key], driver=t["driver"]) if t and key in t["steps"] else None
        found = [dict(t["steps"][key], driver=t["driver"]) for t in self.data["targets"].values()
                 if t["soc"] == target.soc and t["cann"] == str(target.cann) and key in t["steps"]]
        return max(found, key=lambda e: e.get("measured", "")) if found else None

    def lookup_step(self, target: Any, camera: Any, step: Any) -> Optional[dict]:
        """The result for a :class:`~dvpipe.planner.PlanStep` of ``camera`` (as the probe report shows it)."""
        return self.get(target, step_key(camera, step.stages, step.spec_in))


# ------------------------------------------------------------------------------------------- running

def synthetic_frame(camera: Any) -> Any:
    """One frame of ``camera``'s size and probe encoding: JPEG (with its subsampling / progressive), PNG,
    an H.264/H.265 access unit, or an NV12 array. Textured, so decoders do real work."""
    import numpy as np

    from .report import camera_encoding

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
        elif enc == "jpeg440":
            # Pillow has no 4:4:0 preset; libjpeg via OpenCV does not either: the closest honest frame is 4:4:4
            # with the note in the result
            kw["subsampling"] = 0
        buf = io.BytesIO()
        img.save(buf, format="JPEG", **kw)
        return buf.getvalue()
    if enc in ("h264", "h265"):
        import av

        codec = {"h264": "libx264", "h265": "libx265"}[enc]
        stream_buf = bytearray()
        ctx = av.CodecContext.create(codec, "w")
        ctx.width, ctx.height, ctx.pix_fmt = w - w % 2, h - h % 2, "yuv420p"
        frame = av.VideoFrame.from_ndarray(bgr[: ctx.height, : ctx.width], format="bgr24").reformat(format="yuv420p")
        for pkt in list(ctx.encode(frame)) + list(ctx.encode(None)):
            stream_buf += bytes(pkt)
        return bytes(stream_buf)
    raise ValueError(f"no synthetic frame for encoding {enc!r}")


def run_live(cameras: Sequence[Any], target: Any, cache: LiveCache, *, profile: Optional[str] = None,
             stages: Optional[Sequence[Any]] = None, fidelity: str = "fast", backend: str = "dvpp") -> list[dict]:
    """Run one synthetic frame per camera through its probe plan and try every DVPP step on ``backend``.

    Steps the plan puts on DVPP run there; steps it routes elsewhere although a DVPP kernel exists are
    *also* tried on DVPP (forcing the kernel, whatever the documented rules say), and the chain then goes on
    with the planned backend's output. Every DVPP attempt is recorded in ``cache`` (not saved here).
    ``backend="dvpp-sim"`` runs the same loop against the software device (tests).

    Returns the recorded results, each with its ``key``.
    """
    from ..backends import resolve
    from ..codecs import read_frame_bytes
    from ..planner import plan_pipeline
    from ..stages.registry import KernelContext, kernels_at
    from .report import stages_for

    ref = resolve(backend)
    results = []
    for cam in cameras:
        plan = plan_pipeline([cam], stages_for(cam, profile, stages, fidelity), (backend, "cpu"), fidelity=fidelity,
                             target=target)
        cp = plan.cameras[0]
        data: Any = synthetic_frame(cam)
        if isinstance(data, (bytes, bytearray)):
            data = read_frame_bytes(bytes(data))
        out = None
        for step in cp.steps:
            on_dvpp = step.backend.family == "dvpp"
            candidates = [step.kernel] if on_dvpp else [k for k in kernels_at([s.op for s in step.stages], "dvpp")
                                                        if len(k.ops) == len(step.stages)]
            documented = next((v.status for b, v in step.verdicts if resolve(b).family == "dvpp"), "none")
            if step.writes_batch:
                import numpy as np

                out = np.zeros((3, step.spec_out.height, step.spec_out.width), dtype=step.spec_out.dtype)
            produced = None
            for kern in candidates:
                ctx = KernelContext(cam, step.spec_in, step.spec_out, ref, plan.fidelity, out=out)
                t0 = time.perf_counter()
                try:
                    produced = kern.fn(data, step.stages, ctx)
                    err = None
                except Exception as e:  # noqa: BLE001 - the device's answer is the result
                    err = f"{type(e).__name__}: {e}"
                entry = {"ok": err is None, "error": err, "kernel": kern.name, "backend": backend,
                         "ms": round((time.perf_counter() - t0) * 1e3, 3), "documented": documented,
                         "measured": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
                key = step_key(cam, step.stages, step.spec_in)
                cache.record(target, key, entry)
                results.append(dict(entry, key=key, camera=cam.name))
                if err is None:
                    break
            if on_dvpp and produced is not None:
                data = produced
                continue
            if on_dvpp:  # failed on the device: go on with the planned runtime fallback
                for fb in step.fallback:
                    fctx = KernelContext(cam, fb.spec_in, fb.spec_out, fb.backend, plan.fidelity,
                                         out=out if fb.writes_batch else None)
                    data = fb.kernel.fn(data, fb.stages, fctx)
                continue
            ctx = KernelContext(cam, step.spec_in, step.spec_out, step.backend, plan.fidelity,
                                out=out if step.writes_batch else None)
            data = step.kernel.fn(data, step.stages, ctx)
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


def prefer_empirical(query: Any, documented: Any, cache: Optional[LiveCache] = None) -> Any:
    """The planner's verdict for a DVPP kernel, preferring a measured result over the documented one.

    Args:
        query: the :class:`~dvpipe.stages.registry.KernelQuery` the kernel was asked.
        documented: the kernel's own (documented-rules) :class:`~dvpipe.stages.registry.Verdict`.
        cache: the live cache (default: :func:`default_cache_path`, when it exists).

    Returns ``documented`` unchanged when there is no target or no measurement for this step; otherwise
    a verdict saying what was measured, with the documented verdict in its reason. A detour the rules
    prescribe is kept when the device accepted the step as asked only if the measurement was of the
    original step (it always is: live records the step before any replacement).
    """
    target = getattr(query, "target", None)
    if target is None or getattr(query.backend, "device", "") == "sim":
        return documented
    cache = cache if cache is not None else _default_cache()
    if cache is None:
        return documented
    e = cache.get(target, step_key(query.camera, query.stages, query.spec_in))
    if e is None:
        return documented
    from ..stages.registry import Verdict

    when = f"measured {e.get('measured', '?')}, driver {e.get('driver') or '?'}"
    if e["ok"] and not documented.ok:
        return Verdict("ok", f"runs on this device ({when}); the documented rules say: {documented.status}, "
                             f"{documented.reason}", rule="live", source=cache.path)
    if not e["ok"] and documented.ok:
        return Verdict("rejected", f"fails on this device ({when}): {e.get('error')}; the documented rules allow it",
                       rule="live", source=cache.path)
    return documented
