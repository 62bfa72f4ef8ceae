"""mmdet3d ``*_infos_*.pkl`` files as a frame-set source, a rig and a pose source.

Loading a pickle can execute code (its opcodes may call any importable function), so
:func:`load_info_pickle` uses a restricted unpickler: it resolves only the builtin containers and
scalars and the numpy array / dtype / scalar reconstructors that these files contain, and refuses
every other global by name before anything is called.

Layouts read:

* mmdet3d v0.x and BEVFormer's temporal infos: ``{"infos": [...], "metadata": {...}}``, each sample
  with ``token``, ``timestamp`` (microseconds), ``cams`` (per camera ``data_path``,
  ``sensor2lidar_rotation``, ``sensor2lidar_translation``, ``cam_intrinsic``, ``timestamp``),
  ``ego2global_translation``/``_rotation``, ``lidar2ego_*``; BEVFormer adds ``scene_token``,
  ``can_bus`` (18), ``prev``, ``next``, ``frame_idx``.
* mmdet3d v1.x: ``{"metainfo": ..., "data_list": [...]}``, each sample with ``images`` (per camera
  ``img_path``, ``cam2img``, ``lidar2cam``, ``timestamp`` in seconds) and ``ego2global`` (4x4). A bare
  file name in ``img_path`` is joined to ``samples/<CAMERA>/``, the ``data_prefix`` of mmdet3d 1.x's
  nuScenes configs (``data_root`` is then the nuScenes root); a relative path is used as it is.

Samples are ordered by timestamp, as mmdet3d's ``NuScenesDataset`` orders them.

Image paths: the converters (mmdet3d's ``tools/create_data.py``, BEVFormer's
``tools/create_data.py``) store each path as the nuScenes devkit gives it, relative to the folder the
converter ran in, the repository root: ``./data/nuscenes/samples/CAM_FRONT/....jpg``, next to an info
file written to ``./data/nuscenes/``. The published pipelines open that path as it is, from that
folder (``tools/test.py`` runs there), and pass it on unchanged as ``filename``. ``data_root`` is the
folder the stored paths are relative to; without it, the first of the info file's folder, its parent
folders and the working directory under which the first sample's first image exists (the repository
root, for a converter's output), else the info file's folder.

A ``.json`` file with the same structure (arrays as nested lists; what ``mmengine.dump`` writes for a
``.json`` name) is read with :mod:`json`, which runs no code. :func:`open_info_file` caches one
:class:`InfoFile` per file (path, size and modification time) and process, so the cameras of a
deployment that all read one info file load it once.
"""
from __future__ import annotations

import io
import json
import math
import os
import pickle
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np

from ..errors import ConfigError

__all__ = ["load_info_pickle", "load_info_data", "open_info_file", "InfoFile"]

_ALLOWED = {
    ("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "str", "int", "float", "bool", "bytes",
                              "bytearray", "complex", "slice", "range")
} | {("collections", "OrderedDict"), ("numpy", "ndarray"), ("numpy", "dtype")} | {
    (mod, n) for mod in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct", "scalar")
} | {(mod, "_frombuffer") for mod in ("numpy.core.numeric", "numpy._core.numeric")}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name}")


def load_info_pickle(path: "str | Path") -> Any:
    """Unpickle an info file allowing only builtin and numpy types (never runs other code).

    Raises:
        ConfigError: the file cannot be read, or it names a global outside the allowed set.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read info file {path}: {e.strerror or e}") from None
    try:
        return _RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        raise ConfigError(f"{path}: the pickle refers to {e}, which dvpipe does not load from info files "
                          "(only builtin and numpy types)") from None
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file
        raise ConfigError(f"{path}: not a readable info pickle ({type(e).__name__}: {e})") from None


def load_info_data(path: "str | Path") -> Any:
    """An info file's content: ``.json`` through :mod:`json`, anything else through
    :func:`load_info_pickle` (the restricted unpickler)."""
    if str(path).lower().endswith(".json"):
        try:
            return json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"cannot read info file {path}: {e.strerror or e}") from None
        except ValueError as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from None
    return load_info_pickle(path)


_CACHE: dict[tuple, "InfoFile"] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 4  #: info files kept loaded per process (a nuScenes val file is tens of MB)


def open_info_file(path: "str | Path", data_root: "str | Path | None" = None) -> "InfoFile":
    """The :class:`InfoFile` of ``path`` (all its cameras), loaded once per process while the file
    is unchanged (same size and modification time). Thread-safe: camera readers share it."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise ConfigError(f"cannot read info file {path}: {e.strerror or e}") from None
    key = (os.path.abspath(path), None if data_root is None else os.path.abspath(data_root), st.st_size, st.st_mtime_ns)
    with _CACHE_LOCK:
        info = _CACHE.get(key)
        if info is None:
            info = InfoFile(path, data_root=data_root)
            if len(_CACHE) >= _CACHE_MAX:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key] = info
        return info


def _lidar2cam_v0(cam: Mapping) -> np.ndarray:
    # BEVFormer's get_data_info: lidar2cam_r = inv(sensor2lidar_rotation), t = sensor2lidar_translation @ r.T
    r = np.linalg.inv(np.asarray(cam["sensor2lidar_rotation"], dtype=np.float64))
    t = np.asarray(cam["sensor2lidar_translation"], dtype=np.float64) @ r.T
    out = np.eye(4)
    out[:3, :3] = r
    out[:3, 3] = -t
    return out


def _seconds_ns(t: Any) -> int:
    # v1.x stores nuScenes' integer microseconds as float seconds, which keep only ~0.24 us at 1.7e9 s:
    # round to the microsecond (what the value was) before scaling, so every camera's time is exact
    return int(round(float(t) * 1e6)) * 1000


def _rotation_quaternion(R: np.ndarray) -> list[float]:
    # (w, x, y, z) of a rotation matrix (Shepperd's method)
    t = np.trace(R)
    if t > 0:
        s = math.sqrt(t + 1.0) * 2
        return [0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s]
    i = int(np.argmax(np.diag(R)))
    j, k = (i + 1) % 3, (i + 2) % 3
    s = math.sqrt(1.0 + R[i, i] - R[j, j] - R[k, k]) * 2
    q = [0.0] * 4
    q[0] = (R[k, j] - R[j, k]) / s
    q[1 + i] = 0.25 * s
    q[1 + j] = (R[j, i] + R[i, j]) / s
    q[1 + k] = (R[k, i] + R[i, k]) / s
    return q


class InfoFile:
    """The samples of an info file, normalised.

    Args:
        path: the ``.pkl``.
        data_root: folder that relative image paths are resolved against (default: see the module
            docstring: the folder under which the first image exists, e.g. the converter's repository root).
        cameras: camera names in batch order (default: the first sample's order).

    Each sample: ``token``, ``timestamp_ns``, ``scene_token`` (or None), ``can_bus`` (or None),
    ``translation``, ``rotation`` (ego to global), ``prev`` / ``next`` / ``lidar_path`` (or None),
    ``cameras``: name -> ``path`` (resolved), ``filename`` (as stored), ``intrinsics`` (3x3),
    ``lidar2cam`` (4x4), ``timestamp_ns``. :attr:`data_root` is the folder used.
    """

    def __init__(self, path: "str | Path", *, data_root: "str | Path | None" = None,
                 cameras: Optional[Sequence[str]] = None):
        self.path = str(path)
        raw = load_info_data(path)
        if isinstance(raw, Mapping) and "infos" in raw:
            items, v1 = raw["infos"], False
        elif isinstance(raw, Mapping) and "data_list" in raw:
            items, v1 = raw["data_list"], True
        elif isinstance(raw, list):
            items, v1 = raw, False
        else:
            raise ConfigError(f"{path}: expected {{'infos': [...]}} (mmdet3d v0.x) or {{'data_list': [...]}} (v1.x)")
        root = Path(data_root) if data_root is not None else _find_root(Path(path), items, v1)
        self.data_root = str(root)
        try:
            samples = [self._sample(s, v1, root) for s in items]
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{path}: a sample lacks a field dvpipe needs ({type(e).__name__}: {e})") from None
        if not samples:
            raise ConfigError(f"{path}: no samples")
        self.samples = sorted(samples, key=lambda s: s["timestamp_ns"])
        self.cameras = list(cameras) if cameras is not None else list(self.samples[0]["cameras"])
        missing = [c for c in self.cameras if c not in self.samples[0]["cameras"]]
        if missing:
            raise ConfigError(f"{path}: camera {missing[0]} is not in the info file "
                              f"({', '.join(self.samples[0]['cameras'])})")
        # every camera image's capture time -> its sample (the pose lookup of a deployment's frame sets)
        self._by_time: dict[int, int] = {}
        for k, smp in enumerate(self.samples):
            for c in smp["cameras"].values():
                self._by_time.setdefault(c["timestamp_ns"], k)
        self._sample_ns = np.array([smp["timestamp_ns"] for smp in self.samples], dtype=np.int64)
        # a looped replay (run.loop) shifts each pass of a camera by its span plus its first frame interval
        # (dvpipe.deploy.sources.wrappers.Looped): per camera (first capture, that pass length) in ns
        self._passes: list[tuple[int, int]] = []
        for name in self.samples[0]["cameras"] if self.samples else ():
            t = sorted(smp["cameras"][name]["timestamp_ns"] for smp in self.samples if name in smp["cameras"])
            gap = (t[1] - t[0]) if len(t) > 1 and t[1] > t[0] else (t[-1] - t[0]) or 100_000_000
            self._passes.append((t[0], t[-1] - t[0] + gap))
        #: a capture time that is no camera's own is matched to the nearest sample within this (ms)
        self.tolerance_ms = 100.0

    @staticmethod
    def _sample(s: Mapping, v1: bool, root: Path) -> dict:
        cams = {}
        if v1:
            for name, c in s["images"].items():
                rel = str(c["img_path"])
                if "/" not in rel and os.sep not in rel:
                    # mmdet3d 1.x stores the bare file name and joins the dataset's data_prefix for the
                    # camera, 'samples/<CAMERA>' in its nuScenes configs
                    rel = f"samples/{name}/{rel}"
                cams[name] = {"path": str(root / rel), "filename": str(root / rel),
                              "intrinsics": np.asarray(c["cam2img"], float)[:3, :3],
                              "lidar2cam": np.asarray(c["lidar2cam"], dtype=np.float64),
                              "timestamp_ns": _seconds_ns(c.get("timestamp", s["timestamp"]))}
            e2g = np.asarray(s["ego2global"], dtype=np.float64)
            translation, rotation = e2g[:3, 3].tolist(), _rotation_quaternion(e2g[:3, :3])
            t_ns = _seconds_ns(s["timestamp"])
        else:
            for name, c in s["cams"].items():
                cams[name] = {"path": str(root / c["data_path"]), "filename": str(c["data_path"]),
                              "intrinsics": np.asarray(c["cam_intrinsic"], dtype=np.float64),
                              "lidar2cam": _lidar2cam_v0(c), "timestamp_ns": int(c.get("timestamp", s["timestamp"])) * 1000}
            translation, rotation = list(s["ego2global_translation"]), list(s["ego2global_rotation"])
            t_ns = int(s["timestamp"]) * 1000
        return {"token": s.get("token", s.get("sample_idx")), "timestamp_ns": t_ns, "scene_token": s.get("scene_token"),
                "can_bus": None if s.get("can_bus") is None else np.asarray(s["can_bus"], dtype=np.float64),
                "translation": translation, "rotation": rotation, "cameras": cams,
                "prev": s.get("prev"), "next": s.get("next"),
                "lidar_path": None if s.get("lidar_path") is None else str(s["lidar_path"])}

    def __len__(self) -> int:
        return len(self.samples)

    def rig(self, width: Optional[int] = None, height: Optional[int] = None, name: str = "infos"):
        """A :class:`~dvpipe.Rig` from the first sample's calibration; sizes read from its images
        unless given (every camera the same size)."""
        from ..types import Rig

        first = self.samples[0]["cameras"]
        cams = []
        for cam in self.cameras:
            c = first[cam]
            h, w = (height, width) if width and height else _image_size(c["path"])
            cams.append({"name": cam, "width": w, "height": h, "encoding": "jpeg",
                         "intrinsics": c["intrinsics"].tolist(), "lidar2cam": c["lidar2cam"].tolist()})
        return Rig.from_dict({"name": name, "cameras": cams})

    def frame_sets(self) -> Iterator[dict]:
        """``{camera: dv.Frame(camera, index, capture_epoch_ns, image path)}`` per sample, in time order."""
        from ..types import Frame

        for k, s in enumerate(self.samples):
            yield {cam: Frame(cam, k, s["cameras"][cam]["timestamp_ns"], s["cameras"][cam]["path"])
                   for cam in self.cameras}

    def camera_spread_ns(self, cameras: Optional[Sequence[str]] = None) -> tuple[int, Optional[int]]:
        """``(spread, interval)`` in ns over ``cameras`` (default: this file's): the largest difference of
        capture times within one sample, and the smallest from one sample's first image to the next
        sample's first (None with one sample). A synchroniser tolerance ``tol`` with
        ``spread <= tol < interval`` groups exactly the file's samples (``anchor: earliest``: a set spans
        ``tol`` from its sample's first image)."""
        cams = list(cameras) if cameras is not None else self.cameras
        firsts, spread = [], 0
        for smp in self.samples:
            t = [smp["cameras"][c]["timestamp_ns"] for c in cams if c in smp["cameras"]]
            if t:
                firsts.append(min(t))
                spread = max(spread, max(t) - min(t))
        interval = min((b - a for a, b in zip(firsts, firsts[1:])), default=None)
        return spread, interval

    def sample_index(self, timestamp_ns: Optional[int], seq: Optional[int] = None) -> int:
        """The sample of a frame set: the one holding a camera image captured at ``timestamp_ns``
        (epoch ns) -- in a later pass of a looped replay (``run.loop``), at that time less the passes
        before -- else the sample nearest in time within :attr:`tolerance_ms`; without a capture time,
        sample ``seq`` (the order of :meth:`frame_sets`)."""
        return self._locate(timestamp_ns, seq)[0]

    def _locate(self, timestamp_ns: Optional[int], seq: Optional[int]) -> tuple[int, int]:
        """``(sample index, pass)`` of :meth:`sample_index`; ``pass`` 0 for the file's own times, p >= 1 for the
        p-th repetition of a looped replay."""
        if timestamp_ns is None:
            if seq is None or not 0 <= seq < len(self.samples):
                raise ConfigError(f"{self.path}: no sample {seq!r} (frame sets from InfoFile.frame_sets carry it)")
            return seq, 0
        t = int(timestamp_ns)
        k = self._by_time.get(t)
        if k is not None:
            return k, 0
        for first, length in self._passes:  # a later pass of a looped replay: the same sample as in the first
            if t >= first + length:
                k = self._by_time.get(first + (t - first) % length)
                if k is not None:
                    return k, (t - first) // length
        i = int(np.argmin(np.abs(self._sample_ns - int(timestamp_ns))))
        if abs(int(self._sample_ns[i]) - int(timestamp_ns)) > self.tolerance_ms * 1e6:
            raise ConfigError(f"{self.path}: no sample within {self.tolerance_ms:g} ms of capture time "
                              f"{int(timestamp_ns)} ns (is the source's offset_ms set, or another info file?)")
        return i, 0

    def __call__(self, timestamp_ns: Optional[int], seq: Optional[int] = None) -> dict:
        """Pose source for :class:`~dvpipe.mmdet3d.Mmdet3dMetas`: :meth:`pose` with the file's camera names."""
        return self.pose(timestamp_ns, seq)

    def pose(self, timestamp_ns: Optional[int], seq: Optional[int] = None,
             cameras: Optional[Mapping[str, str]] = None) -> dict:
        """The pose record (:func:`pose_record`) of the sample of :meth:`sample_index`: ego pose, ``can_bus``, scene,
        token and each camera's calibration and file name; ``cameras``: ``{name in the batch: the file's camera
        key}`` (default: the file's names). In the p-th repetition of a looped replay the scene token is
        ``"<scene_token>#loop<p>"`` (``"dvpipe-loop-<p>"`` for a file without scene tokens): a pass is a new
        scene to a temporal model (BEVFormer's test loop drops ``prev_bev`` when the token changes), not the
        continuation of the file's last sample."""
        k, repetition = self._locate(timestamp_ns, seq)
        record = pose_record(self.samples[k], cameras if cameras is not None else {c: c for c in self.cameras})
        if repetition:
            scene = record.get("scene_token")
            record["scene_token"] = f"{scene}#loop{repetition}" if scene is not None else f"dvpipe-loop-{repetition}"
        return record


def pose_record(s: Mapping, cameras: Mapping[str, str]) -> dict:
    """The pose record of a normalised sample ``s`` for :class:`~dvpipe.mmdet3d.Mmdet3dMetas`:
    ego pose, ``can_bus``, scene, token, ``prev`` / ``next`` / ``lidar_path`` and, per camera
    ``{name in the batch: the file's camera key}``, its calibration and stored file name;
    ``camera_order``: those batch names in the file's order (the order mmdet3d's datasets feed them)."""
    cams = {}
    for name, key in cameras.items():
        c = s["cameras"].get(key)
        if c is not None:
            cams[name] = {"intrinsics": c["intrinsics"], "lidar2cam": c["lidar2cam"], "filename": c["filename"]}
    names = {key: name for name, key in cameras.items()}
    return {"translation": s["translation"], "rotation": s["rotation"], "can_bus": s["can_bus"],
            "scene_token": s["scene_token"], "token": s["token"], "prev": s["prev"], "next": s["next"],
            "lidar_path": s["lidar_path"], "cameras": cams,
            "camera_order": [names[key] for key in s["cameras"] if key in names]}


def _first_image(items: Any, v1: bool) -> Optional[str]:
    """The stored relative path of the first sample's first image, or None (absolute, or none)."""
    try:
        first = items[0]
        if v1:
            name, c = next(iter(first["images"].items()))
            rel = str(c["img_path"])
            rel = rel if ("/" in rel or os.sep in rel) else f"samples/{name}/{rel}"
        else:
            rel = str(next(iter(first["cams"].values()))["data_path"])
    except (KeyError, TypeError, IndexError, StopIteration, AttributeError):
        return None
    return None if os.path.isabs(rel) else rel


def _find_root(path: Path, items: Any, v1: bool) -> Path:
    """The default ``data_root``: the info file's folder, a parent of it, or the working directory,
    the first under which the first sample's first image exists; else the info file's folder."""
    folder = path.resolve().parent
    rel = _first_image(items, v1)
    if rel is not None:
        for root in (folder, *folder.parents, Path.cwd()):
            if (root / rel).is_file():
                return root
    return folder


def _image_size(path: str) -> tuple[int, int]:
    """``(height, width)`` in pixels of the image at ``path``."""
    import cv2

    img = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    if img is None:
        raise ConfigError(f"cannot read image {path} to learn the camera size; pass width= and height=")
    return img.shape[0], img.shape[1]
