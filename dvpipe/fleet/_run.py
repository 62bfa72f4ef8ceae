"""The driver: shards the index, runs the actors on Ray Data, keeps the account, writes the manifest last."""
from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, TextIO

from ..errors import ConfigError, DvpipeError
from ._index import read_index
from ._latency import FleetLatency
from ._manifest import MANIFEST, OWNER, RUN_SCHEMA, fingerprint, load_shard_manifest, write_json
from ._writers import WRITERS

__all__ = ["run", "plan_shards", "video_segments", "FleetResult", "FleetError", "Progress", "parse_resources"]

DEFAULT_SHARD_SIZE = 64
#: video frame sets per segment (a keyframe-aligned piece of a recording that one worker decodes)
DEFAULT_SEGMENT_SIZE = 256


class FleetError(DvpipeError, RuntimeError):
    """The fleet run could not complete its account (a shard's task failed for good, ...)."""


def _ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"dvpipe fleet needs Ray Data: pip install 'dvpipe[ray]' ({e})") from None
    return ray


def _local_loopback(ray) -> None:
    """Make a local, single-machine Ray cluster bind the loopback address, not the first interface's.

    Ray resolves "127.0.0.1" to the machine's primary address unless multi-node clustering is off
    (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read by ``ray._private.ray_constants``); the raylet and
    workers inherit the variable. Only for clusters dvpipe starts itself (no ``--address``).
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = False  # already imported: the module read the variable before


def plan_shards(rows: Sequence[dict], shard_size: int,
                segment_size: Optional[int] = DEFAULT_SEGMENT_SIZE) -> list[list[dict]]:
    """Index rows cut into shards: per drive, ``shard_size`` image sets each; a video drive in
    keyframe-aligned segments of about ``segment_size`` sets (:func:`video_segments`; 0 or None: the
    whole drive is one shard). Shard k = ``result[k]``."""
    if shard_size < 1:
        raise ConfigError(f"--shard-size must be >= 1, got {shard_size}")
    if segment_size is not None and segment_size < 0:
        raise ConfigError(f"--segment-size must be >= 0 (0: a whole video drive per shard), got {segment_size}")
    by_drive: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["set_id"]):
        by_drive.setdefault(r["drive"], []).append(r)
    shards: list[list[dict]] = []
    for drive in sorted(by_drive):
        rs = by_drive[drive]
        if rs[0]["kind"] == "video":
            cuts = video_segments(rs, segment_size or 0)
            shards += [rs[a:b] for a, b in zip(cuts, cuts[1:] + [len(rs)])]
        else:
            shards += [rs[i:i + shard_size] for i in range(0, len(rs), shard_size)]
    return shards


def video_segments(rows: Sequence[dict], size: int) -> list[int]:
    """Where one video drive's segments start (positions in ``rows``, set order; the first is 0).

    Only sets the index marks ``cut`` qualify: there, every video camera has a keyframe at or before
    its next frame (``dvpipe.fleet._index.keyframe_starts``). Each next start is chosen in the window
    ``size`` +- ``size // 4`` sets after the previous one (the first qualifying set after the window
    when none is in it) as the one whose start costs the fewest decode-only pictures (``lead``,
    summed over cameras), the nearest to ``size`` on a tie. A start where a camera would decode more
    pictures only than ``size`` is not used (a recording with one IDR and no other keyframe a
    decoder can start at is cut only within ``size`` pictures of that IDR). A tail shorter than ``size // 4`` sets stays with the segment
    before it. ``size`` 0: one segment.
    """
    n = len(rows)
    cuts = [0]
    if size <= 0:
        return cuts
    slack = size // 4
    ok = [i for i in range(1, n) if rows[i].get("cut") and max((x or 0 for x in rows[i].get("lead") or ()),
                                                                default=0) <= size]
    while True:
        prev = cuts[-1]
        lo, hi = prev + max(1, size - slack), prev + size + slack
        window = [i for i in ok if lo <= i <= hi] or [i for i in ok if i > hi][:1]
        if not window:
            break
        best = min(window, key=lambda i: (sum(x or 0 for x in rows[i].get("lead") or ()), abs(i - prev - size), i))
        if n - best < max(1, slack):
            break
        cuts.append(best)
    return cuts


def parse_resources(text: Optional[str]) -> dict[str, float]:
    """``npu=1`` / ``gpu=1`` / ``cpu=2`` / ``NAME=X,...`` -> resources per worker."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, eq, value = part.partition("=")
        try:
            amount = float(value)
        except ValueError:
            amount = -1.0
        if not eq or not name or amount <= 0:
            raise ConfigError(f"--resources {text}: expected NAME=AMOUNT[,NAME=AMOUNT] (e.g. npu=1, gpu=1), "
                              f"got {part!r}")
        out[name.strip()] = amount
    return out


def _file_text(path: Optional[str]) -> str:
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


@dataclass
class FleetResult:
    """What a fleet run did. ``manifest`` is the run manifest as written (see :mod:`._manifest`)."""

    out: str
    manifest: dict
    latency: FleetLatency
    skipped_shards: int = 0
    processed_shards: int = 0
    elapsed_s: float = 0.0
    timings: dict = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return bool(self.manifest["complete"])

    @property
    def failed(self) -> dict[str, str]:
        return self.manifest["failed"]


class Progress:
    """Progress line with an ETA and throughput per worker (to ``stream`` every ``every_s`` seconds,
    redrawn in place on a terminal)."""

    def __init__(self, total: int, done: int = 0, stream: TextIO = sys.stderr, every_s: float = 5.0):
        self.total, self.done0, self.done = total, done, done
        self.failed = 0
        self.workers: dict[str, list[float]] = {}  # worker -> [sets, busy_s]
        self.stream = stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.every_s = 0.2 if self.tty else every_s
        self.t0 = time.monotonic()
        self._last = 0.0

    def update(self, manifest: dict) -> None:
        n = len(manifest["set_ids"])
        self.done += n + len(manifest["failed"])
        self.failed += len(manifest["failed"])
        w = self.workers.setdefault(manifest["worker"], [0, 0.0])
        w[0] += n
        w[1] += manifest["busy_s"]
        now = time.monotonic()
        if now - self._last >= self.every_s or self.done >= self.total:
            self._last = now
            self.draw(now)

    def line(self, now: Optional[float] = None) -> str:
        elapsed = max(1e-9, (now or time.monotonic()) - self.t0)
        rate = (self.done - self.done0) / elapsed
        left = self.total - self.done
        eta = f"ETA {left / rate:.0f} s" if rate > 0 and left else ("done" if not left else "ETA -")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        per = ", ".join(f"{w} {s / b:.1f}/s" if b > 0 else f"{w} -" for w, (s, b) in sorted(self.workers.items()))
        return (f"fleet: {self.done}/{self.total} sets ({pct:.0f}%)  {rate:.1f} sets/s  {eta}"
                + (f"  failed {self.failed}" if self.failed else "") + (f"  | workers: {per}" if per else ""))

    def draw(self, now: Optional[float] = None) -> None:
        text = self.line(now)
        self.stream.write(("\r" + text[:200].ljust(100)) if self.tty else text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run(deployment: str, index: str, out: str, *, workers: int = 1, address: Optional[str] = None,
        resources: Optional[Mapping[str, float]] = None, format: str = "parquet",
        shard_size: int = DEFAULT_SHARD_SIZE, segment_size: Optional[int] = DEFAULT_SEGMENT_SIZE,
        backends: Optional[Sequence[str]] = None, progress: Optional[Progress | bool] = None, hold_path: Optional[str] = None,
        ray_init: Optional[Mapping[str, Any]] = None) -> FleetResult:
    """Process every frame set of ``index`` with ``deployment``'s pipeline on Ray, into ``out``.

    Args:
        deployment: the deployment YAML (its pipeline, backends and sync rules; the model and the
            deployment's own outputs are not used).
        index: a frame-set index (``dvpipe fleet index``).
        out: output folder; running again with the same folder resumes (complete shards are skipped,
            partial ones redone).
        workers: actors (each with one pipeline).
        address: Ray cluster (``auto``, ``ray://HOST:PORT``); None joins the cluster this process is
            connected to, or starts a local one.
        resources: per worker, e.g. ``{"gpu": 1}``, ``{"npu": 1}`` (ray-ascend's ``NPU`` resource),
            ``{"cpu": 2}``; other names are custom Ray resources.
        format: ``parquet`` or ``tar`` (:mod:`._writers`).
        shard_size: image frame sets per shard.
        segment_size: video frame sets per shard, about: a recording is cut into keyframe-aligned
            segments that workers decode independently (:func:`video_segments`); 0 or None: a whole
            video drive per shard.
        backends: override the deployment's backend preference (e.g. ``["torch:cuda", "cpu"]``).
        progress: a :class:`Progress`, True for one on stderr, None/False for none.
        hold_path: tests only: workers park mid-shard while this file exists (to kill one there).
        ray_init: extra ``ray.init`` keyword arguments when this call starts Ray.

    Returns:
        a :class:`FleetResult`; its manifest accounts for every set of the index (written or failed).

    Raises:
        ConfigError: bad options, or ``out`` holds another deployment's outputs.
        FleetError: the cluster failed in a way the retries did not recover from.
    """
    from ._process import load_fleet_deployment

    t_start = time.perf_counter()
    if format not in WRITERS:
        raise ConfigError(f"--format {format!r}: expected one of {', '.join(WRITERS)}")
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    dep = load_fleet_deployment(deployment, backends)
    rows, meta = read_index(index)
    cams = [c.name for c in dep.cameras]
    if meta.get("cameras") != cams:
        raise ConfigError(f"--index {index} was built for cameras {meta.get('cameras')}, the deployment has {cams}")
    shards = plan_shards(rows, shard_size, segment_size)
    config_fp = fingerprint(_file_text(dep.path), _file_text(dep.rig_path), list(backends or ()), format)
    fps = {str(k): fingerprint(config_fp, rs) for k, rs in enumerate(shards)}
    out = os.path.abspath(out)
    shards_dir = os.path.join(out, "shards")
    os.makedirs(shards_dir, exist_ok=True)
    _claim(out, config_fp)
    done: dict[int, dict] = {}
    for k in range(len(shards)):
        m = load_shard_manifest(shards_dir, k, fps[str(k)])
        if m is not None:
            done[k] = m
    todo = [k for k in range(len(shards)) if k not in done]
    if isinstance(progress, bool):
        progress = Progress(len(rows)) if progress else None
    if progress is not None:
        progress.total = len(rows)
        progress.done = progress.done0 = sum(len(m["set_ids"]) + len(m["failed"]) for m in done.values())
    latency = FleetLatency(dep)
    timings: dict[str, float] = {}
    if todo:
        timings = _run_ray(dep, shards, todo, fps, out, format, workers, address, resources, backends, hold_path,
                           ray_init, done, latency, progress, deployment)
    if progress is not None:
        progress.close()
    manifest = _account(dep, deployment, index, meta, rows, shards, done, format, (shard_size, segment_size), config_fp,
                        latency, time.perf_counter() - t_start, len(shards) - len(todo))
    _clean(shards_dir, done, len(shards))
    write_json(os.path.join(out, MANIFEST), manifest)
    return FleetResult(out, manifest, latency, len(shards) - len(todo), len(todo),
                       time.perf_counter() - t_start, timings)


def connect_ray(address: Optional[str] = None, ray_init: Optional[Mapping[str, Any]] = None) -> bool:
    """Join the Ray cluster at ``address`` (``auto``, ``ray://HOST:PORT``), or start a local one on
    127.0.0.1 when None, unless this process is connected already; True when this call connected.
    Ray Data's progress bars are turned off (``dvpipe fleet`` prints its own progress)."""
    ray = _ray()
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False)
        if address is None:  # a local cluster: this machine's loopback only
            _local_loopback(ray)
            kwargs["_node_ip_address"] = "127.0.0.1"
        kwargs.update(ray_init or {})
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ConfigError(f"--address {address or '(local)'}: cannot start or join a Ray cluster "
                              f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})") from None
        started = True
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    return started


def actor_pool(ray, size: int):
    """``ActorPoolStrategy`` of ``size`` workers, each given one shard at a time: a shard takes seconds
    to minutes, so a worker takes the next one when it is free (Ray Data would otherwise queue several
    on the first worker up, and leave another idle at the end of the run)."""
    return ray.data.ActorPoolStrategy(size=size, max_tasks_in_flight_per_actor=1)


def ray_remote_args(resources: Optional[Mapping[str, float]]) -> dict[str, Any]:
    """``map_batches`` resource arguments per worker from ``{"gpu": 1}`` / ``{"npu": 1}`` (ray-ascend's
    ``NPU``) / ``{"cpu": 2}`` / custom names; one CPU by default."""
    res = {k.lower(): v for k, v in (resources or {}).items()}
    remote: dict[str, Any] = {"num_cpus": res.pop("cpu", 1)}
    if "gpu" in res:
        remote["num_gpus"] = res.pop("gpu")
    custom = {("NPU" if k == "npu" else k): v for k, v in res.items()}
    if custom:
        remote["resources"] = custom
    return remote


def _run_ray(dep, shards, todo, fps, out, fmt, workers, address, resources, backends, hold_path, ray_init, done,
             latency, progress, deployment) -> dict:
    ray = _ray()
    from ._actor import ShardActor

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    started = connect_ray(address, ray_init)
    timings["ray_init_s"] = time.perf_counter() - t0
    try:
        remote = ray_remote_args(resources)
        spec = {"deployment": os.path.abspath(deployment), "backends": list(backends) if backends else None,
                "out": out, "format": fmt, "hold_path": hold_path}
        items = [{"shard": k, "fingerprint": fps[str(k)], "rows": json.dumps(shards[k])} for k in todo]
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        ds = ds.map_batches(ShardActor, fn_constructor_kwargs={"spec": spec}, batch_size=1, batch_format="numpy",
                            compute=actor_pool(ray, min(workers, len(items))), **remote)
        t1 = time.perf_counter()
        timings["execute_start_unix"] = time.time()
        first = None
        try:
            for row in ds.iter_rows():
                if first is None:
                    first = time.perf_counter() - t1
                m = json.loads(row["manifest"])
                k = int(row["shard"])
                if k in done:  # a retried shard reported twice: the first report stands (same file, same sets)
                    continue
                done[k] = m
                latency.add(json.loads(row["timelines"]))
                if progress is not None:
                    progress.update(m)
        except Exception as e:  # noqa: BLE001 - Ray's errors are long; the manifest says what is missing
            first_line = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise FleetError(f"the Ray job failed ({type(e).__name__}: {first_line}); the shards already "
                             "written are kept: fix the cause and run again with the same --out to resume") from e
        timings["first_shard_s"] = first or 0.0
        timings["execute_s"] = time.perf_counter() - t1
    finally:
        if started:
            ray.shutdown()
    return timings


def _account(dep, deployment, index, meta, rows, shards, done, fmt, shard_size, config_fp, latency, elapsed,
             skipped) -> dict:
    seen: dict[str, int] = {}
    failed: dict[str, str] = {}
    written = 0
    for m in done.values():
        for sid in m["set_ids"]:
            seen[sid] = seen.get(sid, 0) + 1
            written += 1
        for sid, why in m["failed"].items():
            seen[sid] = seen.get(sid, 0) + 1
            failed[sid] = why
    for k, rs in enumerate(shards):
        if k not in done:
            for r in rs:
                failed.setdefault(r["set_id"], "not processed: its shard's task did not complete")
    dup = sorted(s for s, n in seen.items() if n > 1)
    complete = not dup and written + len(failed) == len(rows) and all(k in done for k in range(len(shards)))
    workers: dict[str, dict] = {}
    for m in done.values():
        w = workers.setdefault(m["worker"], {"sets": 0, "busy_s": 0.0})
        w["sets"] += len(m["set_ids"])
        w["busy_s"] += m["busy_s"]
    for w in workers.values():
        w["sets_per_s"] = w["sets"] / w["busy_s"] if w["busy_s"] > 0 else None
    dropped: dict[str, int] = {}
    for info in meta.get("drives", {}).values():
        for cat, n in info.get("dropped", {}).items():
            dropped[cat] = dropped.get(cat, 0) + n
    return {"schema": RUN_SCHEMA, "deployment": os.path.abspath(deployment), "name": dep.name,
            "index": os.path.abspath(index), "format": fmt, "shard_size": shard_size[0],
            "segment_size": shard_size[1],
            "config_fingerprint": config_fp, "sets": len(rows), "written": written, "failed": dict(sorted(failed.items())),
            "duplicates": dup, "complete": complete, "skipped_shards": skipped,
            "shards": [done[k] for k in sorted(done)], "workers": workers, "elapsed_s": elapsed,
            "sets_per_s": (written / elapsed) if elapsed > 0 else None, "dropped_frames": dropped,
            "latency_sets": latency.stats.batches, "latency": latency.to_json()}


def _claim(out: str, config_fp: str) -> None:
    """Make ``out`` this configuration's folder: refused when it holds another's outputs (its
    :data:`OWNER` file, written before the first shard and kept, or the manifest of a finished run);
    the run manifest is removed (it is written last: from now on the folder is a run in progress)."""
    for name in (OWNER, MANIFEST):
        path = os.path.join(out, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                prev = json.load(f).get("config_fingerprint")
        except (OSError, ValueError, AttributeError):
            prev = None
        if prev is not None and prev != config_fp:
            raise ConfigError(f"--out {out} holds the outputs of another deployment, backends or format; "
                              "use another --out (or remove it)")
    write_json(os.path.join(out, OWNER), {"schema": RUN_SCHEMA, "config_fingerprint": config_fp})
    if os.path.isfile(os.path.join(out, MANIFEST)):
        os.unlink(os.path.join(out, MANIFEST))


def _clean(shards_dir: str, done: dict, planned: int) -> None:
    """Remove temporary files and claims left by killed workers of shards now complete, and the files of
    shards beyond the ``planned`` ones (an earlier run's plan, with another shard size or index: their
    sets are in this plan's shards; left there, a reader of the folder would see them twice)."""
    for f in os.listdir(shards_dir):
        m = re.match(r"shard-(\d+)\.", f)
        if m is None:
            continue
        k = int(m.group(1))
        if k >= planned or ((".tmp-" in f or ".claim-" in f) and k in done):
            try:
                os.unlink(os.path.join(shards_dir, f))
            except OSError:
                pass

