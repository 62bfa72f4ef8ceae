"""A deployment model hook that hands a detector mmdet3d's inputs: ``img`` and ``img_metas``.

``dvpipe run`` calls the deployment's model with each batch in dvpipe's per-camera layout.
:class:`Mmdet3dHook` wraps a detector-style callable and calls it as mmdet3d's test loop calls
``forward_test``::

    model(img=[img], img_metas=[[meta]])   # img: (1, N, 3, H, W); meta: the sample dict

with the sample dict of :class:`~dvpipe.mmdet3d.Mmdet3dMetas` (``can_bus``, ``scene_token``,
``prev_bev_exists``, per-camera lists ...) built from the batch and a pose source: an info file
(each sample's ego pose, ``can_bus`` and calibration), a nuScenes-style ``ego_pose.json``, or
none. In a deployment::

    model:
      entry: dvpipe.mmdet3d:Mmdet3dHook
      init: {model: my_detector.py:forward, infos: /work/BEVFormer/data/nuscenes/nuscenes_infos_temporal_val.pkl,
             data_root: /work/BEVFormer, can_bus_rotation: published}

The hook keeps the previous sample for the temporal keys, so one hook serves one stream, called in
order (the runner calls its model one frame set at a time, in order).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ..errors import ConfigError

if TYPE_CHECKING:  # names for the type checker only
    from ..types import FrameBatch
    from ._metas import PoseFn

__all__ = ["Mmdet3dHook"]


class Mmdet3dHook:
    """Calls ``model(img=[img], img_metas=[[meta]])`` for each batch (see the module docstring).

    Args:
        model: the callable, or ``module:callable`` / ``file.py:callable`` (imported as a
            deployment's ``model.entry`` is).
        infos: an info file (``.pkl`` through the restricted unpickler, or ``.json``) as the pose
            source; rig camera names must be the file's camera keys. ``data_root`` as for
            :class:`~dvpipe.mmdet3d.InfoFile`.
        poses: a nuScenes-style ``ego_pose.json`` instead (or any ``(timestamp_ns, seq) -> record``).
        can_bus, scene_gap_s, can_bus_rotation: as :class:`~dvpipe.mmdet3d.Mmdet3dMetas` (``can_bus_rotation``:
            ``published`` = ``[w, w, w, w]`` as BEVFormer's checkpoints were trained, ``quaternion`` the
            corrected value; None: the profile's).

    ``img`` is ``batch.img``: a ``torch.Tensor`` view when torch imports (``torch.from_numpy``, no
    copy), else the numpy view. Both are views of the pipeline's buffer, valid during the call.
    """

    def __init__(self, model: Union[str, Callable[..., object]], *, infos: Optional[str] = None,
                 data_root: Optional[str] = None, poses: Union[str, PoseFn, None] = None, can_bus: str = "absolute",
                 scene_gap_s: float = 1.0, can_bus_rotation: Optional[str] = None):
        from ._infos import open_info_file
        from ._metas import JsonPoses, Mmdet3dMetas

        if isinstance(model, str):
            from ..plugins import import_entry

            model = import_entry(model)
        if not callable(model):
            raise ConfigError(f"Mmdet3dHook: model must be callable, got {type(model).__name__}")
        if infos is not None and poses is not None:
            raise ConfigError("Mmdet3dHook: give infos= or poses=, not both")
        pose = open_info_file(infos, data_root) if infos is not None else (
            JsonPoses(poses) if isinstance(poses, str) else poses)
        self.model = model
        self.metas = Mmdet3dMetas(pose, can_bus=can_bus, scene_gap_s=scene_gap_s, can_bus_rotation=can_bus_rotation)

    def __call__(self, batch: FrameBatch) -> Any:
        img, meta = self.metas(batch)
        try:
            import torch

            if not isinstance(img, torch.Tensor):
                img = torch.from_numpy(img)
        except ImportError:
            pass
        return self.model(img=[img], img_metas=[[meta]])
