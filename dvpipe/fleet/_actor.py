"""The Ray Data actor: builds the pipeline once, processes whole shards, writes them, reports back.

:class:`ShardActor` is the class given to ``Dataset.map_batches`` (with an
``ActorPoolStrategy``): Ray constructs it once per actor process, so the deployment is loaded and
its pipeline planned once per worker (backends are resolved there: the worker's device). Each
input row is one shard: its index rows as JSON. ``__call__`` processes the shard's frame sets
(:class:`~._process.FrameSetProcessor`), writes them with the output format's writer (temporary
file, renamed), then the shard manifest, and returns one small row per shard (counts, failures,
timelines, worker): the tensors never travel through the driver.

Why the actor writes: a fleet's outputs are terabytes; writing where they are computed keeps the
driver to bookkeeping and makes each shard's completion one rename plus one manifest, which is what
exactly-once rests on. A killed actor is restarted by Ray and its shard retried from scratch (Ray
Data's defaults for actor pools: ``max_restarts=-1``, ``max_task_retries=-1``; tests/fleet/test_fleet.py
kills one mid-shard): the retry writes the same shard under the same
name, so nothing is lost and nothing is written twice.
"""
from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

import numpy as np

from ._latency import timeline_to_json
from ._manifest import SHARD_SCHEMA, shard_manifest_path, write_json
from ._writers import WRITERS, shard_name

__all__ = ["ShardActor", "process_shard"]

_CHUNK = 8  # frame sets per Parquet row group / per append


def process_shard(proc, spec: dict, shard: int, fp: str, rows: list[dict], state: dict) -> dict[str, Any]:
    """Process and write one shard; returns the shard's report (see :class:`ShardActor`)."""
    shards_dir = os.path.join(spec["out"], "shards")
    os.makedirs(shards_dir, exist_ok=True)
    fname = shard_name(shard, spec["format"])
    claim = os.path.join(shards_dir, f"shard-{shard:05d}.claim-{os.getpid()}")
    attempts = 1 + sum(1 for f in os.listdir(shards_dir) if f.startswith(f"shard-{shard:05d}.claim-"))
    with open(claim, "w", encoding="utf-8") as f:
        f.write(state["worker"])
    t0 = time.perf_counter_ns()
    started_unix = time.time()
    writer = WRITERS[spec["format"]](os.path.join(shards_dir, fname))
    written: list[str] = []
    failed: dict[str, str] = {}
    timelines: list[dict] = []
    kind = rows[0]["kind"] if rows else "images"
    results = proc.video_drive(rows) if kind == "video" else proc.image_sets(rows)
    hold = spec.get("hold_path")
    try:
        chunk = []
        for r in results:
            if r.error is not None:
                failed[r.set_id] = r.error
                continue
            chunk.append(r)
            written.append(r.set_id)
            state["sets"] += 1
            timelines.append(timeline_to_json(r.timeline, warmup=state["sets"] <= state["warmup"]))
            if len(chunk) >= _CHUNK:
                writer.append(chunk)
                chunk = []
            while hold and os.path.exists(hold):  # fault-injection hook of the tests: park mid-shard
                time.sleep(0.02)
        writer.append(chunk)
        nbytes = writer.commit()
    except BaseException:
        writer.abort()
        raise
    busy_s = (time.perf_counter_ns() - t0) / 1e9
    manifest = {"schema": SHARD_SCHEMA, "shard": shard, "file": fname, "format": spec["format"], "bytes": nbytes,
                "sha256": writer.sha256, "fingerprint": fp,
                "set_ids": written, "failed": failed, "worker": state["worker"], "attempts": attempts,
                "busy_s": busy_s, "started_unix": started_unix, "ended_unix": time.time(),
                "worker_init_s": state.get("init_s")}
    if kind == "video" and rows:  # the segment of its recording(s) this shard is
        manifest["segment"] = {"drive": rows[0]["drive"], "first_set": rows[0]["set_id"],
                               "last_set": rows[-1]["set_id"], "sets": len(rows),
                               "start": dict(proc.segment_start) or None}
    write_json(shard_manifest_path(shards_dir, shard), manifest)
    for entry in os.listdir(shards_dir):  # the claims of this shard, this one's and those of killed workers
        if entry.startswith(f"shard-{shard:05d}.claim-"):
            try:
                os.unlink(os.path.join(shards_dir, entry))
            except OSError:
                pass
    return {"shard": shard, "manifest": json.dumps(manifest), "timelines": json.dumps(timelines)}


class ShardActor:
    """``map_batches`` callable class: one pipeline per actor; a batch holds whole shards.

    Args:
        spec: ``deployment`` (path), ``backends`` (list or None), ``out`` (folder), ``format``
            (``parquet``/``tar``), ``hold_path`` (tests).

    Input batch columns: ``shard`` (int64), ``fingerprint`` (str), ``rows`` (JSON of the shard's index rows).
    Output batch columns: ``shard`` (int64), ``manifest`` (the shard manifest, JSON), ``timelines``
    (JSON list of the sets' timelines), all Arrow-compatible.
    """

    def __init__(self, spec: dict):
        from ._process import FrameSetProcessor, load_fleet_deployment

        t0 = time.perf_counter()
        self.spec = spec
        dep = load_fleet_deployment(spec["deployment"], spec.get("backends"))
        self.proc = FrameSetProcessor(dep)
        self.state = {"worker": f"{socket.gethostname()}:{os.getpid()}", "sets": 0,
                      "warmup": dep.latency.warmup_sets, "init_s": time.perf_counter() - t0}

    def __call__(self, batch: dict) -> dict:
        out: dict[str, list] = {"shard": [], "manifest": [], "timelines": []}
        for shard, fp, rows in zip(batch["shard"], batch["fingerprint"], batch["rows"]):
            rep = process_shard(self.proc, self.spec, int(shard), str(fp), json.loads(str(rows)), self.state)
            for k in out:
                out[k].append(rep[k])
        return {"shard": np.array(out["shard"], dtype=np.int64), "manifest": np.array(out["manifest"], dtype=object),
                "timelines": np.array(out["timelines"], dtype=object)}
