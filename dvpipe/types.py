"""Value types that flow through dvpipe: cameras, rigs, frames and batches.

Conventions used everywhere:

* Image sizes are ``width`` and ``height`` in pixels; shapes are numpy order ``(H, W, C)`` for
  HWC images and ``(N, 3, H, W)`` for batches.
* Colour order is named explicitly (``PixelFormat.BGR``, ``PixelFormat.RGB``); OpenCV decodes
  to BGR.
* Times are integer nanoseconds; names end in ``_ns``.
* ``intrinsics`` is the 3x3 pinhole matrix K mapping camera-frame points (x right, y down,
  z forward) to continuous pixel coordinates (see :mod:`dvpipe.geometry` for the pixel
  convention); ``lidar2cam`` is the 4x4 rigid transform with ``p_cam = lidar2cam @ p_lidar``.
"""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .errors import ConfigError

__all__ = ["PixelFormat", "Camera", "Rig", "Frame", "Batch", "ENCODINGS"]

#: Encodings a camera can declare. ``raw`` means the frames arrive as decoded HxWx3 BGR arrays.
ENCODINGS = ("jpeg", "png", "h264", "h265", "raw")


class PixelFormat(str, enum.Enum):
    """What a frame's ``data`` holds."""

    ENCODED = "encoded"  #: compressed bytes (JPEG, PNG, an access unit of H.264/H.265)
    BGR = "bgr"  #: HxWx3 uint8, OpenCV colour order
    RGB = "rgb"  #: HxWx3 uint8
    GRAY = "gray"  #: HxW uint8
    NV12 = "nv12"  #: semi-planar YUV 4:2:0, (H*3/2)xW uint8, Y plane then interleaved UV
    FLOAT_HWC = "float_hwc"  #: HxWx3 float (normalised), channel order set by the stage
    CHW = "chw"  #: 3xHxW planes (float after Normalise), as written into the batch


def _matrix(value: Any, shape: tuple[int, int], path: str) -> np.ndarray:
    try:
        m = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"expected a {shape[0]}x{shape[1]} matrix of numbers, got {value!r}", path) from None
    if m.shape != shape:
        raise ConfigError(f"expected a {shape[0]}x{shape[1]} matrix, got shape {list(m.shape)}", path)
    if not np.all(np.isfinite(m)):
        raise ConfigError("matrix has non-finite entries", path)
    m.setflags(write=False)
    return m


@dataclass(frozen=True, eq=False)
class Camera:
    """One camera of a rig.

    Attributes:
        name: unique name (``CAM_FRONT``).
        width: image width in pixels.
        height: image height in pixels.
        encoding: one of :data:`ENCODINGS`; what the camera's frames arrive as.
        intrinsics: 3x3 K (pixels).
        lidar2cam: 4x4 rigid transform, ``p_cam = lidar2cam @ [x, y, z, 1]`` (metres).
        extra: other keys from the rig file, kept verbatim (``cam2ego``, ``capture_time_ns``...).
    """

    name: str
    width: int
    height: int
    encoding: str = "jpeg"
    intrinsics: np.ndarray = field(default_factory=lambda: np.eye(3))
    lidar2cam: np.ndarray = field(default_factory=lambda: np.eye(4))
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        path = f"camera {self.name!r}" if isinstance(self.name, str) else "camera"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"name must be a non-empty string, got {self.name!r}", path)
        for key in ("width", "height"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise ConfigError(f"must be a positive integer number of pixels, got {v!r}", f"{path}.{key}")
            object.__setattr__(self, key, int(v))
        if self.encoding not in ENCODINGS:
            raise ConfigError(f"unknown encoding {self.encoding!r}; allowed: {', '.join(ENCODINGS)}", f"{path}.encoding")
        object.__setattr__(self, "intrinsics", _matrix(self.intrinsics, (3, 3), f"{path}.intrinsics"))
        object.__setattr__(self, "lidar2cam", _matrix(self.lidar2cam, (4, 4), f"{path}.lidar2cam"))

    @property
    def lidar2img(self) -> np.ndarray:
        """4x4 ``K4 @ lidar2cam`` for the camera's native image (K4: K in the top-left of eye(4))."""
        k4 = np.eye(4)
        k4[:3, :3] = self.intrinsics
        return k4 @ self.lidar2cam

    def __repr__(self) -> str:
        return f"Camera({self.name!r}, {self.width}x{self.height}, {self.encoding})"



def read_yaml(path: str | os.PathLike, what: str = "file") -> Any:
    """The parsed YAML of ``path``; ``ConfigError`` (naming ``what``) if it is missing or not YAML."""
    import yaml

    try:
        with open(path, "r", encoding="utf-8") as f:
            return yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None


@dataclass(frozen=True)
class Rig:
    """An ordered set of cameras; the order is the batch order (``batch.images[i]``)."""

    cameras: tuple[Camera, ...]
    name: str = "rig"

    def __post_init__(self) -> None:
        cams = tuple(self.cameras)
        if not cams:
            raise ConfigError("a rig needs at least one camera", "cameras")
        seen: set[str] = set()
        for i, cam in enumerate(cams):
            if not isinstance(cam, Camera):
                raise ConfigError(f"expected a Camera, got {type(cam).__name__}", f"cameras[{i}]")
            if cam.name in seen:
                raise ConfigError(f"duplicate camera name {cam.name!r}", f"cameras[{i}].name")
            seen.add(cam.name)
        object.__setattr__(self, "cameras", cams)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cameras)

    def index(self, name: str) -> int:
        """Position of camera ``name`` in the rig order; ``KeyError`` listing the names otherwise."""
        for i, c in enumerate(self.cameras):
            if c.name == name:
                return i
        raise KeyError(f"unknown camera {name!r}; the rig has {', '.join(self.names)}")

    def __getitem__(self, key: int | str) -> Camera:
        return self.cameras[self.index(key)] if isinstance(key, str) else self.cameras[key]

    def __len__(self) -> int:
        return len(self.cameras)

    def __iter__(self) -> Iterator[Camera]:
        return iter(self.cameras)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "") -> "Rig":
        """Build a rig from the rig-YAML structure (``{cameras: [{name, width, ...}]}``).

        Every problem is reported at once, each with its key path.
        """
        prefix = f"{path}." if path else ""
        if not isinstance(data, Mapping) or "cameras" not in data:
            raise ConfigError("a rig needs a 'cameras' list", f"{prefix}cameras")
        items = data["cameras"]
        if not isinstance(items, Sequence) or isinstance(items, (str, bytes)):
            raise ConfigError(f"expected a list of cameras, got {type(items).__name__}", f"{prefix}cameras")
        known = {"name", "width", "height", "encoding", "intrinsics", "lidar2cam"}
        cams, errors = [], []
        for i, item in enumerate(items):
            where = f"{prefix}cameras[{i}]"
            if not isinstance(item, Mapping):
                errors.append(f"{where}: expected a mapping, got {type(item).__name__}")
                continue
            missing = [k for k in ("name", "width", "height") if k not in item]
            if missing:
                errors.append(f"{where}: missing {', '.join(missing)}")
                continue
            try:
                cam = Camera(
                    name=item["name"], width=item["width"], height=item["height"],
                    encoding=item.get("encoding", "jpeg"),
                    intrinsics=item.get("intrinsics", np.eye(3)),
                    lidar2cam=item.get("lidar2cam", np.eye(4)),
                    extra={k: v for k, v in item.items() if k not in known},
                )
                cams.append(cam)
            except ConfigError as e:
                field_name = e.path.rsplit(".", 1)[1] if e.path and "." in e.path else ""
                errors.append(f"{where}{'.' + field_name if field_name else ''}: {e.message}")
        if errors:
            raise ConfigError("; ".join(errors))
        return cls(tuple(cams), name=str(data.get("name", "rig")))

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "Rig":
        """Load a rig file (see ``configs/rigs/``). Errors name the file and the field."""
        return cls.from_yaml_data(read_yaml(path, "rig file"), path)

    @classmethod
    def from_yaml_data(cls, data: Any, path: str | os.PathLike) -> "Rig":
        """:meth:`from_dict` on the parsed contents of the rig file ``path`` (errors name the file)."""
        try:
            return cls.from_dict(data or {})
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None


@dataclass
class Frame:
    """One camera's image on its way through a plan.

    Attributes:
        camera: camera name.
        seq: sequence number of the frame in its source (0-based).
        capture_ns: capture time, epoch nanoseconds as the source reports it.
        data: bytes (``ENCODED``), or an array in ``pixel_format``.
        pixel_format: what ``data`` holds.
        img_aug: 3x3 image-plane transform already applied to ``data`` (original sensor pixel coords ->
            coords in ``data``; identity for frames straight from a camera). What a plan applies on
            top is known at plan time: ``pipe.plan.cameras[i].img_aug`` and ``batch.metas[i]["img_aug"]``.
    """

    camera: str
    seq: int
    capture_ns: int
    data: Any
    pixel_format: PixelFormat = PixelFormat.ENCODED
    img_aug: np.ndarray = field(default_factory=lambda: np.eye(3))

    def __repr__(self) -> str:
        d = f"{len(self.data)} bytes" if isinstance(self.data, (bytes, bytearray, memoryview)) else (
            f"array{tuple(self.data.shape)}" if hasattr(self.data, "shape") else type(self.data).__name__)
        return f"Frame({self.camera!r}, seq={self.seq}, capture_ns={self.capture_ns}, {self.pixel_format.value}, {d})"


@dataclass
class Batch:
    """The model input for one frame set.

    Attributes:
        images: ``(N, 3, H, W)`` array (float32 or float16) in rig order; a torch tensor when the
            plan's batch step runs on a torch device. Owned by the pipeline and overwritten by a
            later call once its ring of output buffers wraps (``Pipeline(output_buffers=...)``):
            copy it to keep it.
        metas: one dict per camera, keys defined by the profile (``lidar2img``, ``img_shape``...).
        valid: ``(N,)`` bool; False where the camera's frame was dropped (its image is zeros).
        drops: ``(camera, reason)`` for every dropped frame.
        cameras: camera names in batch order.
        fallbacks: ``(camera, step, from_backend, to_backend, reason)`` for runtime fallbacks.
        timeline: the batch's :class:`dvpipe.latency.Timeline` (every step's span per camera,
            device spans, batch-assembly wait).
    """

    images: Any
    metas: list[dict]
    valid: np.ndarray
    drops: list[tuple[str, str]]
    cameras: tuple[str, ...]
    fallbacks: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    timeline: Any = None

    @property
    def timings(self) -> list[tuple[str, str, int, int, str]]:
        """Host step spans ``(camera, step, start_ns, end_ns, backend)`` from the timeline (empty when the
        pipeline keeps counters only: use :meth:`step_ms`)."""
        if self.timeline is None:
            return []
        return [(s.camera, s.name, s.start_ns, s.end_ns, s.attrs.get("backend", ""))
                for s in self.timeline.spans if s.kind == "host" and s.camera is not None]

    def step_ms(self) -> dict[str, float]:
        """Sum of host time per step name over cameras, in milliseconds."""
        out: dict[str, float] = {}
        if self.timeline is not None and getattr(self.timeline, "counters_only", False):
            for (step, cam, kind, _unit), (_n, total_ns, _max) in self.timeline.counters().items():
                if kind == "host" and cam is not None:
                    out[step] = out.get(step, 0.0) + total_ns / 1e6
            return out
        for _cam, step, t0, t1, _b in self.timings:
            out[step] = out.get(step, 0.0) + (t1 - t0) / 1e6
        return out

    def __repr__(self) -> str:
        shape = tuple(getattr(self.images, "shape", ()))
        return f"Batch(images{shape}, valid={self.valid.tolist()}, drops={len(self.drops)})"
