"""The composable Ray Data form: a fleet's frame sets as a ``ray.data.Dataset`` of tensor columns.

:func:`frame_sets` plans the index into shards as :func:`dvpipe.fleet.run` does (image sets in
groups, video drives in keyframe-aligned segments) and returns
``from_items(shards).map_batches(FrameSetActor, compute=ActorPoolStrategy(size=workers),
batch_format="numpy")``, lazily: nothing runs until the dataset is consumed, and a Ray user chains
``.write_parquet()``, ``.iter_torch_batches()``, ``.map_batches(model)`` and so on. One row per frame
set of the index, in no guaranteed order across shards (``.sort("set_id")`` when it matters):

===========  ==============================================  ===============================================
column       Arrow type                                      content
===========  ==============================================  ===============================================
set_id       string                                          the index's set id
time_ns      int64                                           the set's capture time, epoch ns
images       Ray ``ArrowTensorTypeV2``, shape ``(N, C, H,    the pipeline's output for the set, rig order,
             W)``, dtype uint8 / float16 / float32           the plan's dtype, bit for bit (numpy batches:
                                                             an ``(n, N, C, H, W)`` ndarray)
valid        ``ArrowTensorTypeV2``, shape ``(N,)``, bool     per camera
metas        string                                          JSON list of the cameras' metas, numpy arrays
                                                             (``lidar2img`` ...) as ``{"__ndarray__",
                                                             "dtype", "shape"}``: exact, restored by
                                                             :func:`dvpipe.fleet.decode_metas`
drops        list<string>                                    per camera: why it has no image, or null
error        string (null when processed)                    why the set failed (a file that cannot be read,
                                                             ...); its images are zeros, valid all false
===========  ==============================================  ===============================================

Compared with :func:`dvpipe.fleet.run`, which writes shards where they are computed and returns
only manifests (the exactly-once, resumable path for terabytes, see docs/fleet.md), here the
tensors travel through Ray's object store to whatever consumes the dataset; there is no output
folder, no manifest and no resume: Ray Data re-executes what it needs.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ..errors import ConfigError

__all__ = ["frame_sets", "FrameSetActor", "set_columns"]


def set_columns(results: Sequence, shape: tuple, dtype) -> dict[str, Any]:
    """Frame-set results (:class:`~._process.SetResult`) as one Arrow table of the module's columns.

    ``shape``/``dtype``: the plan's output ``(N, C, H, W)`` and dtype, for the images of failed sets.
    """
    import pyarrow as pa
    from ray.data.extensions import ArrowTensorArray

    from ._writers import encode_metas

    n = len(results)
    images = np.zeros((n, *shape), dtype=dtype)
    valid = np.zeros((n, shape[0]), dtype=bool)
    drops, errors, metas = [], [], []
    for i, r in enumerate(results):
        if r.error is None:
            images[i] = r.images
            valid[i] = r.valid
            drops.append([None if ok else str(m.get("drop_reason", "dropped")) for ok, m in zip(r.valid, r.metas)])
            metas.append(encode_metas(r.metas))
        else:  # no camera has an image: each one's reason is the set's
            drops.append([f"the frame set failed: {r.error}"] * shape[0])
            metas.append("[]")
        errors.append(r.error)
    return pa.table({
        "set_id": pa.array([r.set_id for r in results], pa.string()),
        "time_ns": pa.array([int(r.time_ns) for r in results], pa.int64()),
        "images": ArrowTensorArray.from_numpy(images),
        "valid": ArrowTensorArray.from_numpy(valid),
        "metas": pa.array(metas, pa.string()),
        "drops": pa.array(drops, pa.list_(pa.string())),
        "error": pa.array(errors, pa.string()),
    })


class FrameSetActor:
    """``map_batches`` callable class of :func:`frame_sets`: one pipeline per actor.

    Input batch columns: ``shard`` (int64), ``rows`` (JSON of the shard's index rows). Returns the
    shards' frame sets as one Arrow table (the columns of the module docstring).

    Args:
        spec: ``deployment`` (path), ``backends`` (list or None).
    """

    def __init__(self, spec: dict):
        from ._process import FrameSetProcessor, load_fleet_deployment

        t0 = time.perf_counter()
        dep = load_fleet_deployment(spec["deployment"], spec.get("backends"))
        self.proc = FrameSetProcessor(dep)
        self.init_s = time.perf_counter() - t0

    def __call__(self, batch: dict):
        plan = self.proc.pipe.plan
        results = []
        for rows in batch["rows"]:
            rows = json.loads(str(rows))
            kind = rows[0]["kind"] if rows else "images"
            results += list(self.proc.video_drive(rows) if kind == "video" else self.proc.image_sets(rows))
        return set_columns(results, tuple(plan.out_shape), np.dtype(plan.out_dtype))


def frame_sets(deployment: str, index: str | Sequence[dict], *, workers: int = 1,
               backends: Optional[Sequence[str]] = None, resources: Optional[Mapping[str, float]] = None,
               shard_size: Optional[int] = None, segment_size: Optional[int] = None,
               address: Optional[str] = None, ray_init: Optional[Mapping[str, Any]] = None):
    """The frame sets of ``index`` processed by ``deployment``'s pipeline, as a lazy Ray Dataset.

    Args:
        deployment: the deployment YAML (its pipeline, backends and sync rules).
        index: a frame-set index file (``dvpipe fleet index``), or its rows (:func:`read_index`).
        workers: actors in the pool (each builds the pipeline once; backends resolved there).
        backends: override the deployment's backend preference (e.g. ``["torch:cuda", "cpu"]``).
        resources: per worker, e.g. ``{"gpu": 1}``, ``{"npu": 1}`` (ray-ascend), ``{"cpu": 2}``.
        shard_size: image frame sets per input block (default as :func:`run`).
        segment_size: video frame sets per keyframe-aligned segment (default as :func:`run`; 0:
            a whole video drive per block).
        address: the Ray cluster to join when this process is not connected (None: a local one).
        ray_init: extra ``ray.init`` keyword arguments when this call starts Ray.

    Returns:
        a ``ray.data.Dataset`` with the columns of this module's docstring, one row per frame set.

    Raises:
        ConfigError: bad options, an index of other cameras, an empty index, Ray not installed.
    """
    from ._index import read_index
    from ._process import load_fleet_deployment
    from ._run import (DEFAULT_SEGMENT_SIZE, DEFAULT_SHARD_SIZE, _ray, actor_pool, connect_ray, plan_shards,
                       ray_remote_args)

    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    dep = load_fleet_deployment(deployment, backends)  # bad deployments fail here, not in every actor
    rows = read_index(index)[0] if isinstance(index, (str, os.PathLike)) else [dict(r) for r in index]
    cams = [c.name for c in dep.cameras]
    if not rows:
        raise ConfigError("the index has no frame sets")
    if rows[0]["cameras"] != cams:
        raise ConfigError(f"the index was built for cameras {rows[0]['cameras']}, the deployment has {cams}")
    shards = plan_shards(rows, DEFAULT_SHARD_SIZE if shard_size is None else shard_size,
                         DEFAULT_SEGMENT_SIZE if segment_size is None else segment_size)
    ray = _ray()
    connect_ray(address, ray_init)
    spec = {"deployment": os.path.abspath(deployment), "backends": list(backends) if backends else None}
    items = [{"shard": k, "rows": json.dumps(rs)} for k, rs in enumerate(shards)]
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    return ds.map_batches(FrameSetActor, fn_constructor_kwargs={"spec": spec}, batch_size=1, batch_format="numpy",
                          compute=actor_pool(ray, min(workers, len(items))),
                          **ray_remote_args(resources))
