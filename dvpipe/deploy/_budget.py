"""What a deployment will hold in memory and how many threads it will start, checked before anything
is read or allocated (``dvpipe validate`` and :class:`~dvpipe.deploy.Runner` before it plans).

* **Cameras.** The runner reads the recordings that only hand over bytes with one thread, the cameras of
  dvpipe's own RTSP client and V4L2 reader with one I/O thread, and every other source (streams and devices
  FFmpeg reads, which block in their own reads) with a thread of its own; a deployment takes at most
  :data:`MAX_CAMERAS` cameras, so a run starts at most that many reader threads (plus the pipeline's workers, at most one per CPU by default, and the model's). A larger rig
  is split into several deployments, one process each.
* **Memory.** The host memory a run holds whatever its input: the ring of
  :func:`output_buffers` output batches (cameras x C x H x W x the output's bytes per value) and one
  decoded BGR picture per camera (height x width x 3 bytes) while a set is processed. This is a
  lower bound (decoders' reference pictures, queued encoded frames and the model come on top), so a
  deployment above the budget cannot run in it. The budget is ``run.memory_budget_mb``, by default
  half of this machine's physical memory.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence

__all__ = ["MAX_CAMERAS", "OUTPUT_BUFFERS", "MAX_PICTURES_PER_JOB", "AUTO_LOCALITY_MAX_SIZE", "output_buffers",
           "pictures_per_job", "camera_problem", "memory_needed", "memory_budget", "memory_problem", "format_bytes"]

#: the most cameras one deployment takes (bounds the reader threads: one per source that FFmpeg reads)
MAX_CAMERAS = 256
#: output batches the runner's pipeline keeps in its ring: the set preprocessed ahead, the one being
#: finished, the one the model reads (a batch stays valid while the model reads it)
OUTPUT_BUFFERS = 3
#: the most consecutive pictures of one camera a worker decodes (``run.pictures_per_job``): a recording's
#: GOP at 2 s / 12 fps (decoding pictures in runs keeps paying off up to a GOP: docs/performance.md)
MAX_PICTURES_PER_JOB = 24
#: ``run.pictures_per_job: auto`` decodes pictures of at most this many pixels (width, height) in runs: measured on a 2-core
#: machine, runs of 24 pictures cost 0.83-0.87x one picture per camera in turn from 1280x720 to 1920x1080, but
#: 0.97x at 2560x1440 and 3840x2160, where one camera's reference pictures alone outgrow the caches
#: (docs/performance.md, "Runs of pictures by default")
AUTO_LOCALITY_MAX_SIZE = (1920, 1088)
#: under ``auto`` the ring's extra batches take at most this share of the memory budget, and at most
#: :data:`AUTO_LOCALITY_MAX_BYTES` (the ring is written once when the run is built: ~1.2 s a GiB on a 2-core VM)
AUTO_LOCALITY_MEMORY_SHARE = 0.25
AUTO_LOCALITY_MAX_BYTES = 1 << 30


def output_buffers(pictures_per_job: int = 1) -> int:
    """Batches in the runner's ring: :data:`OUTPUT_BUFFERS`, plus one per further set started ahead
    (``run.pictures_per_job``)."""
    return OUTPUT_BUFFERS + max(1, pictures_per_job) - 1


def pictures_per_job(dep: Any, pipe: Any) -> tuple[int, str]:
    """``run.pictures_per_job`` as a run of ``dep`` on the pipeline ``pipe`` (built, planned) uses it, and why
    (words for ``summary.json``).

    A number in the deployment is used as it is. ``auto`` (the default) decodes in runs of up to
    :data:`MAX_PICTURES_PER_JOB` pictures where that is known to pay and costs nothing the deployment asked
    for: every camera H.264/H.265, read from recordings as fast as possible (no live camera, no
    ``run.realtime``), no latency budget (a run of N pictures delays each frame set by up to N pictures'
    work), every step of the plan on the CPU with more than one pipeline thread, pictures of at most
    :data:`AUTO_LOCALITY_MAX_SIZE` pixels; N is lowered until the ring's extra batches fit in
    :data:`AUTO_LOCALITY_MEMORY_SHARE` of the memory budget, in :data:`AUTO_LOCALITY_MAX_BYTES` and in what
    the budget leaves beside the run at one picture per job. Anywhere else ``auto`` is 1.
    """
    import numpy as np

    from ..codecs import VIDEO_ENCODINGS

    if dep.run.pictures_per_job is not None:
        return dep.run.pictures_per_job, "run.pictures_per_job"
    plan = pipe.plan
    cams = [dep.rig[c.name] for c in dep.cameras]
    max_w, max_h = AUTO_LOCALITY_MAX_SIZE
    why = ("live cameras" if any(c.source.live for c in dep.cameras) else
           "run.realtime" if dep.run.realtime else
           "a latency budget is set" if dep.latency.budgets_ns() else
           "cameras other than H.264/H.265" if any(c.encoding not in VIDEO_ENCODINGS for c in cams) else
           "one pipeline thread" if getattr(pipe, "threads", 1) < 2 else
           "steps off the CPU" if any(s.backend.family != "cpu" for cp in plan.cameras for s in cp.steps) else
           f"pictures above {max_w}x{max_h}" if max(c.width * c.height for c in cams) > max_w * max_h else
           None)
    if why is not None:
        return 1, f"auto: {why}"
    budget = memory_budget(dep.run.memory_budget_mb)
    batch, left = _batch_and_room(plan.out_shape, np.dtype(plan.out_dtype).itemsize, cams, budget)
    bounds = {f"{AUTO_LOCALITY_MEMORY_SHARE:.0%} of the memory budget": int(budget * AUTO_LOCALITY_MEMORY_SHARE),
              format_bytes(AUTO_LOCALITY_MAX_BYTES): AUTO_LOCALITY_MAX_BYTES,
              "the memory budget left at one picture per job": left}
    bound = min(bounds, key=lambda k: bounds[k])
    n = max(1, min(MAX_PICTURES_PER_JOB, 1 + bounds[bound] // max(1, batch)))
    if n == MAX_PICTURES_PER_JOB:
        return n, "auto: H.264/H.265 recordings read as fast as possible"
    return n, (f"auto: H.264/H.265 recordings read as fast as possible; {n}, not {MAX_PICTURES_PER_JOB}: the ring's "
               f"extra batches within {bound}")


def camera_problem(n_cameras: int) -> Optional[str]:
    """Why ``n_cameras`` cameras are too many for one deployment, or None."""
    if n_cameras <= MAX_CAMERAS:
        return None
    return (f"{n_cameras} cameras: a deployment takes at most {MAX_CAMERAS} cameras (a source FFmpeg reads takes a "
            f"thread of its own); split the rig into deployments of at most {MAX_CAMERAS} cameras (one dvpipe run each)")


def memory_needed(out_shape: Sequence[int], out_itemsize: int, camera_sizes: Sequence[tuple[int, int]],
                  buffers: int = OUTPUT_BUFFERS) -> dict[str, int]:
    """The bytes a run holds at least: ``{"outputs", "decoded", "total"}``.

    Args:
        out_shape: the batch's shape ``(N cameras, C, H, W)`` (or any shape whose product is the values).
        out_itemsize: bytes per value of the output (4 for float32, 1 for uint8).
        camera_sizes: each camera's ``(height, width)`` in pixels (one decoded BGR picture each).
        buffers: output batches in the ring.
    """
    values = 1
    for d in out_shape:
        values *= int(d)
    outputs = buffers * values * int(out_itemsize)
    decoded = sum(3 * int(h) * int(w) for h, w in camera_sizes)
    return {"outputs": outputs, "decoded": decoded, "total": outputs + decoded}


def memory_budget(budget_mb: Optional[float]) -> int:
    """The budget in bytes: ``budget_mb`` MiB, or half of this machine's physical memory (None)."""
    if budget_mb is not None:
        return int(budget_mb * (1 << 20))
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):  # not a POSIX system: no default bound
        return 1 << 62


def format_bytes(n: float) -> str:
    """``1.5 GiB``, ``12.0 MiB``... (the largest unit the rounded figure reaches: never ``1024.0 MiB``)"""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if round(n / size, 1) >= 1:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _batch_and_room(out_shape: Sequence[int], itemsize: int, cams: Sequence[Any], budget: int) -> tuple[int, int]:
    """(bytes of one output batch, bytes the budget leaves beside a run at one picture per job): the ring's
    extra batches (one per further picture per job) must fit in that room."""
    one = memory_needed(out_shape, itemsize, [(c.height, c.width) for c in cams], output_buffers(1))
    return one["outputs"] // output_buffers(1), budget - one["total"]


def memory_problem(dep: Any, out_shape: Sequence[int], out_dtype: str) -> Optional[str]:
    """One line when ``dep``'s cameras x output x buffers need more than its memory budget, else None."""
    import numpy as np

    cams = [dep.rig[c.name] for c in dep.cameras]
    ring = output_buffers(dep.run.pictures_per_job or 1)  # auto fits its ring in the budget's room (pictures_per_job)
    need = memory_needed(out_shape, np.dtype(out_dtype).itemsize, [(c.height, c.width) for c in cams], ring)
    budget = memory_budget(dep.run.memory_budget_mb)
    if need["total"] <= budget:
        return None
    shape = "x".join(str(int(d)) for d in out_shape[1:])
    origin = ("run.memory_budget_mb" if dep.run.memory_budget_mb is not None
              else "half of this machine's memory; set run.memory_budget_mb")
    remedy = "use fewer cameras per deployment or a smaller output (resize)"
    n = dep.run.pictures_per_job or 1
    if n > 1:  # the ring grows with the pictures per job: say how many would fit
        batch, room = _batch_and_room(out_shape, np.dtype(out_dtype).itemsize, cams, budget)
        fits = 1 + max(0, room // batch) if batch else n
        if fits < n:
            remedy = f"lower run.pictures_per_job from {n} to {fits} or less (or auto), or {remedy}"
    return (f"the run needs at least {format_bytes(need['total'])} of memory: {len(cams)} cameras x {shape} "
            f"{out_dtype} x {ring} output buffers = {format_bytes(need['outputs'])}, plus "
            f"{format_bytes(need['decoded'])} of decoded pictures; the budget is {format_bytes(budget)} ({origin}); "
            f"{remedy}")


def plan_output(dep: Any) -> Optional[tuple[tuple[int, ...], str]]:
    """``(batch shape, dtype)`` of ``dep``'s pipeline planned on the CPU (no buffer is made), or None
    when the CPU cannot plan it (the real planning reports why)."""
    from ..planner import plan_pipeline
    from ..profiles import profile_stages

    p = dep.pipeline
    try:
        profile = p.profile
        if p.mmdet3d_config is not None:
            from ..mmdet3d import profile_from_config

            profile = profile_from_config(p.mmdet3d_config, skip=p.skip).profile
        stages = profile_stages(profile, p.fidelity, dep.rig.cameras[0]) if profile else list(p.stages or ())
        plan = plan_pipeline(dep.rig.cameras, stages, ("cpu",), fidelity=p.fidelity)
    except Exception:  # noqa: BLE001 - whatever fails here fails again, and is reported, in the real planning
        return None
    return tuple(int(d) for d in plan.out_shape), str(plan.out_dtype)
