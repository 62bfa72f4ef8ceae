"""Fleet re-processing on Ray Data: one deployment's pipeline over many drives, exactly once, resumable.

* :func:`build_index` / :func:`write_index` (``dvpipe fleet index``): the frame-set index of image
  sequences or video files, grouped by the runner's synchroniser, or of an mmdet3d / nuScenes info
  file, grouped as it groups its samples (:mod:`._index`).
* :func:`run` (``dvpipe fleet``): the index as a Ray Dataset of shards (image groups, keyframe-aligned
  video segments: :func:`plan_shards`), ``map_batches`` on :class:`ShardActor`
  (one pipeline per actor), Parquet or tar shards with manifests, resume, progress with an ETA and
  the merged per-step latency statistics (:mod:`._run`).
* :func:`read`: ``(set_id, images, metas)`` back from an output folder (:mod:`._reader`).
* :func:`frame_sets`: the composable form, a lazy ``ray.data.Dataset`` of frame sets with tensor
  columns (``images``, ``valid``) and JSON ``metas`` (:mod:`._dataset`), to chain with
  ``write_parquet``, ``iter_torch_batches``, ...

Ray (``pip install 'dvpipe[ray]'``) is imported only by :func:`run` and :func:`frame_sets`; indexing and
reading need pyarrow.
See docs/fleet.md.
"""
from ._actor import ShardActor, process_shard
from ._dataset import FrameSetActor, frame_sets, set_columns
from ._index import build_index, index_from_infos, keyframe_starts, read_index, write_index
from ._latency import FleetLatency, timeline_from_json, timeline_to_json
from ._process import FrameSetProcessor, SetResult, load_fleet_deployment
from ._reader import read, read_manifest
from ._run import FleetError, FleetResult, Progress, parse_resources, plan_shards, run, video_segments
from ._writers import WRITERS, decode_metas, encode_metas

__all__ = ["build_index", "index_from_infos", "write_index", "read_index", "run", "read", "read_manifest", "FleetResult", "FleetError",
           "Progress", "ShardActor", "process_shard", "FrameSetProcessor", "SetResult", "load_fleet_deployment",
           "FleetLatency", "timeline_to_json", "timeline_from_json", "plan_shards", "parse_resources", "WRITERS",
           "encode_metas", "decode_metas", "frame_sets", "FrameSetActor", "set_columns", "video_segments",
           "keyframe_starts"]
