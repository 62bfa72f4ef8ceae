"""torch ``DataLoader`` integration: a dataset of preprocessed frame sets, sharded across workers.

``FrameSetDataset`` is an ``IterableDataset`` over a deployment (each worker runs it and keeps its
share of the frame sets) or over any frame-set iterable with a pipeline (each worker gets its own
copy of the pipeline: a :class:`~dvpipe.Pipeline` pickles as its construction arguments). Samples
own their images (``batch.keep()``), so they survive the pipeline's buffer reuse and the transfer
from a worker process. :func:`collate_mmdet3d` stacks samples into what an mmdet3d detector takes::

    ds = FrameSetDataset("configs/deployments/nuscenes-images.yaml", metas_format="mmdet3d")
    loader = torch.utils.data.DataLoader(ds, batch_size=1, num_workers=2, collate_fn=collate_mmdet3d)
    for data in loader:
        model.forward_test(img=[data["img"]], img_metas=[data["img_metas"]])

Sharding: frame set ``k`` goes to worker ``k % num_workers``. With a deployment every worker
reads and preprocesses every set (the sources and the synchroniser run per worker) and yields
its own, so a deployment with live sources (or ``run.realtime``), whose workers would each see other
frames, is refused with more than one worker; with a frame-set iterable only the sets a worker keeps are
preprocessed.
"""
from __future__ import annotations

import os
import pickle
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from ._optional import require
from .errors import ConfigError

if TYPE_CHECKING:
    import torch
    import torch.utils.data

    from .deploy import Deployment
    from .mmdet3d import PoseFn
    from .pipeline import Pipeline
else:
    torch = require("torch")  # a clear install hint when torch is missing

__all__ = ["FrameSetDataset", "collate_mmdet3d"]


def _worker() -> tuple[int, int]:
    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class FrameSetDataset(torch.utils.data.IterableDataset):
    """Preprocessed frame sets as samples ``{"img", "img_metas", "valid", "cameras", "index"}``.

    Args:
        source: a deployment (a YAML path, a mapping, or a loaded ``Deployment``), or a zero-argument
            picklable callable returning an iterable of frame sets (camera -> frame mappings).
        pipeline: with a callable ``source``, the :class:`~dvpipe.Pipeline` (copied into each worker)
            or a picklable zero-argument factory returning one.
        metas_format: ``per_camera`` or ``mmdet3d`` (see :meth:`dvpipe.Pipeline.set_metas_format`);
            ``pose`` is its pose source; by default, for a deployment whose cameras read one info file
            (``type: infos``), that file, per sample (:func:`dvpipe.deploy.sources.infos.deployment_poses`).

    A sample's ``img`` is an ``(N, 3, H, W)`` tensor, ``img_metas`` the batch's metas (a list of
    per-camera dicts, or one sample dict for ``mmdet3d``), ``valid`` an ``(N,)`` bool tensor and
    ``index`` the frame set's number in the source.
    """

    def __init__(self, source: Union[str, os.PathLike, Mapping[str, object], Deployment,
                                     Callable[[], Iterable[Mapping[str, object]]]],
                 pipeline: Union[Pipeline, Callable[[], Pipeline], None] = None, *, metas_format: str = "per_camera",
                 pose: Union[str, os.PathLike, PoseFn, None] = None):
        super().__init__()
        is_deployment = isinstance(source, (str, os.PathLike, Mapping)) or type(source).__name__ == "Deployment"
        if not is_deployment and not callable(source):
            raise ConfigError(f"FrameSetDataset source must be a deployment or a callable returning frame sets, "
                              f"got {type(source).__name__}")
        if is_deployment and pipeline is not None:
            raise ConfigError("a deployment brings its own pipeline; pass pipeline= only with a frame-set callable")
        if not is_deployment and pipeline is None:
            raise ConfigError("a frame-set callable needs pipeline= (a Pipeline or a factory returning one)")
        if metas_format not in ("per_camera", "mmdet3d"):
            raise ConfigError(f"metas_format must be 'per_camera' or 'mmdet3d', got {metas_format!r}")
        self.source: Any = source  # checked above: a deployment, or a callable with pipeline=
        self.pipeline: Any = pipeline
        self.metas_format = metas_format
        self.pose = pose
        self._deployment = is_deployment

    def _meta(self, batch) -> Any:
        """The mmdet3d sample dict of ``batch`` (per-camera metas), advancing the temporal state."""
        assert self._builder is not None  # callers check it
        return self._builder.sample(batch.metas, batch.cameras, batch.valid)

    def _sample(self, batch, index: int, metas: Any = None) -> dict:
        kept = batch.keep()
        images = kept.images
        img = images if isinstance(images, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(images))
        return {"img": img, "img_metas": kept.metas if metas is None else metas,
                "valid": torch.from_numpy(np.array(kept.valid, dtype=bool)), "cameras": list(kept.cameras),
                "index": index}

    def _make_builder(self, default_pose: Any = None, settings: Optional[tuple] = None) -> None:
        """The stream-wide builder of the mmdet3d sample dicts, if any. ``settings``: the pipeline's own
        ``set_metas_format("mmdet3d", ...)`` choices ``(pose, can_bus, scene_gap_s, can_bus_rotation)``, kept
        (the dataset's ``pose=`` first) when the dataset builds the sample dicts in its place."""
        self._builder = None
        if self.metas_format != "mmdet3d" and settings is None:
            return
        from .mmdet3d import JsonPoses, Mmdet3dMetas

        pose, options = self.pose, {}
        if settings is not None:
            pose = pose if pose is not None else settings[0]
            options = dict(zip(("can_bus", "scene_gap_s", "can_bus_rotation"), settings[1:]))
        pose = JsonPoses(pose) if isinstance(pose, (str, os.PathLike)) else pose
        self._builder = Mmdet3dMetas(pose if pose is not None else default_pose, **options)

    def __iter__(self) -> Iterator[dict]:
        # The temporal keys (prev_bev_exists, can_bus deltas, scenes) follow the stream, not a worker's
        # share of it: every worker builds the sample dict of every frame set (metas only, cheap) and
        # preprocesses and yields its own sets.
        wid, n = _worker()
        if self._deployment:
            yield from self._iter_deployment(wid, n)
            return
        if hasattr(self.pipeline, "process"):
            # in a worker a fresh copy: a forked process inherits the parent's pipeline without its threads
            pipe = pickle.loads(pickle.dumps(self.pipeline)) if n > 1 or wid else self.pipeline
        else:
            pipe = self.pipeline()
        # a pipeline set to mmdet3d metas would build them from its share of the sets only: the dataset builds
        # them stream-wide in its place, with the pipeline's settings, in the pipeline's layout (a list of one)
        own = pipe._metas_format if pipe._metas_format is not None and pipe._metas_format[0] == "mmdet3d" else None
        self._make_builder(settings=own[1:] if own is not None else None)
        if self._builder is not None:
            pipe.set_metas_format("per_camera")  # the dataset builds the sample dicts (see above)
        as_list = own is not None and self.metas_format == "per_camera"
        names = list(pipe.rig.names)
        try:
            for k, frames in enumerate(self.source()):
                if k % n == wid:
                    batch = pipe.process(frames)
                    meta = self._meta(batch) if self._builder is not None else None
                    yield self._sample(batch, k, [meta] if as_list else meta)
                elif self._builder is not None:
                    self._builder.sample(_frame_metas(frames, names), names, np.ones(len(names), dtype=bool))
        finally:
            if own is not None and pipe is self.pipeline:  # the caller's pipeline keeps its own choice
                fmt, pose, can_bus, gap, rotation = own
                pipe.set_metas_format(fmt, pose=pose, can_bus=can_bus, scene_gap_s=gap, can_bus_rotation=rotation)

    def _iter_deployment(self, wid: int, n: int) -> Iterator[dict]:
        from .deploy import Runner, load_deployment
        from .deploy.sources.infos import deployment_poses

        dep = self.source if type(self.source).__name__ == "Deployment" else load_deployment(self.source)
        if n > 1 and (dep.live or dep.run.realtime):
            # every worker runs the deployment's sources itself: live cameras (or a paced replay) would give each
            # worker other frames under the same set numbers, so the shards would repeat and miss frames
            raise ConfigError(f"deployment {dep.name!r} has live sources (or run.realtime): its frame sets cannot be "
                              f"split across {n} DataLoader workers, each reading the cameras itself; use "
                              "num_workers=0 (or 1)")
        # a deployment over an info file: each sample's pose and calibration from it
        self._make_builder(deployment_poses(dep) if self.metas_format == "mmdet3d" else None)
        with Runner(dep, model=lambda batch: None, write_outputs=False) as runner:
            for rb in runner.batches():
                k = rb.frame_set.index
                meta = self._meta(rb.batch) if self._builder is not None else None
                if k % n == wid:
                    yield self._sample(rb.batch, k, meta)


def _frame_metas(frames: Mapping, names: Sequence[str]) -> list[dict]:
    """Per-camera metas with only the capture time and seq (a skipped set's, for the temporal state)."""
    out = []
    for name in names:
        f = frames.get(name)
        out.append({"capture_epoch_ns": getattr(f, "capture_epoch_ns", None), "seq": getattr(f, "seq", None)})
    return out


def collate_mmdet3d(samples: Sequence[dict]) -> dict:
    """Stack samples: ``img`` ``(B, N, 3, H, W)``, ``img_metas`` a list of B metas, ``valid`` ``(B, N)``,
    ``index`` a list (as ``forward_test(img=[img], img_metas=[img_metas])`` takes them)."""
    if not samples:
        raise ConfigError("collate_mmdet3d got no samples")
    return {"img": torch.stack([s["img"] for s in samples]), "img_metas": [s["img_metas"] for s in samples],
            "valid": torch.stack([s["valid"] for s in samples]), "cameras": samples[0]["cameras"],
            "index": [s["index"] for s in samples]}
