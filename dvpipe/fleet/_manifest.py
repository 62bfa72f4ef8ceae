"""Manifests: what each shard holds, and the run's account of every frame set of the index.

Layout of an output folder::

    DIR/manifest.json                  the run (written last, after every shard)
    DIR/run.json                       the configuration's fingerprint, written before the first shard:
                                       a run of another configuration into DIR is refused
    DIR/shards/shard-NNNNN.parquet     (or .tar) the shard's data, renamed into place when complete
    DIR/shards/shard-NNNNN.json        the shard's manifest, written after the rename: the shard is
                                       complete exactly when this file exists and agrees with its data
    DIR/shards/shard-NNNNN.*.tmp-PID   a shard being written (or left by a killed worker)
    DIR/shards/shard-NNNNN.claim-PID   a worker is on it (attempts = claims seen)

A shard manifest (``dvpipe.fleet.shard/1``): ``shard``, ``file``, ``format``, ``bytes``, ``sha256``,
``fingerprint`` (of the deployment, options and the shard's index rows), ``set_ids`` (written, in
order), ``failed`` (set id -> reason), ``worker`` (host:pid), ``attempts`` (workers that started
it), ``busy_s`` (processing + writing), ``started_unix`` / ``ended_unix`` (wall clock, s),
``worker_init_s`` (that worker's deployment load + pipeline build); for a video shard ``segment``:
``drive``, ``first_set``, ``last_set``, ``sets`` and ``start`` (None for a drive's first segment, else per
video camera ``keyframe_ns`` (the keyframe its decoder started at), ``decode_only`` (pictures decoded
from it before the camera's first frame of the segment), ``demuxed_only`` (access units read before
it: 0 when the seek landed on it), ``seeked``).

The run manifest (``dvpipe.fleet/1``): ``deployment``, ``index``, ``format``, ``shard_size``, ``segment_size``,
``fingerprint``, ``sets`` (in the index), ``written``, ``failed`` (set id -> reason), ``complete``
(written + failed = sets, each set once), ``shards`` (the shard manifests), ``workers`` (per worker:
``sets``, ``busy_s``, ``sets_per_s``), ``elapsed_s``, ``sets_per_s``, ``dropped_frames`` (by the
synchroniser at indexing, per category), ``latency`` (the merged statistics, ``dvpipe.latency/1``).
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Optional

__all__ = ["MANIFEST", "OWNER", "SHARD_SCHEMA", "RUN_SCHEMA", "write_json", "shard_manifest_path", "load_shard_manifest",
           "sha256_file", "fingerprint"]

MANIFEST = "manifest.json"
OWNER = "run.json"  # the configuration the folder's shards are for: written before the first shard, kept
SHARD_SCHEMA = "dvpipe.fleet.shard/1"
RUN_SCHEMA = "dvpipe.fleet/1"


def write_json(path: str, obj: Any) -> None:
    """Write JSON atomically (temporary file, fsync, rename)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(*parts: Any) -> str:
    """sha256 (hex, 16 characters) of the JSON of ``parts``."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def shard_manifest_path(shards_dir: str, shard: int) -> str:
    return os.path.join(shards_dir, f"shard-{shard:05d}.json")


def load_shard_manifest(shards_dir: str, shard: int, expect_fingerprint: str) -> Optional[dict]:
    """The shard's manifest when the shard is complete and current, else None (it is to be redone).

    Complete: the manifest parses, its fingerprint is ``expect_fingerprint``, and its data file exists
    with the recorded size.
    """
    path = shard_manifest_path(shards_dir, shard)
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return None
    if m.get("schema") != SHARD_SCHEMA or m.get("fingerprint") != expect_fingerprint:
        return None
    data = os.path.join(shards_dir, m.get("file", ""))
    try:
        if os.path.getsize(data) != m.get("bytes"):
            return None
    except OSError:
        return None
    return m
