"""Value types that flow through dvpipe: cameras, rigs, frames and batches.

Conventions used everywhere:

* Image sizes are ``width`` and ``height`` in pixels; a size as one tuple is ``(height, width)``
  in pixels (numpy order, as ``Resize.size``, ``FrameSpec.size``, ``CameraPlan.out_size``); shapes
  are ``(H, W, C)`` for HWC images and ``(N, 3, H, W)`` for batches. ``WxH`` strings (CLI
  ``--size 1600x900``) are read by :func:`dvpipe.types.parse_wxh` only.
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
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence, cast

import numpy as np

from .device import nv12_batch_to_host
from .errors import ConfigError, DvpipeError, StaleBatchError  # noqa: F401 - StaleBatchError re-exported

if TYPE_CHECKING:  # above this layer: names for the type checker only
    from .latency import Timeline

__all__ = ["PixelFormat", "Camera", "Distortion", "Rig", "Frame", "FrameBatch", "StaleBatchError", "ENCODINGS",
           "DISTORTION_MODELS", "parse_wxh"]

#: Encodings a camera can declare. ``raw`` means the frames arrive as decoded HxWx3 BGR arrays; ``uyvy``,
#: ``yuyv`` (YUV 4:2:2 packed) and ``nv12`` (YUV 4:2:0 semi-planar) are uncompressed camera frames (GMSL,
#: V4L2) whose decode is a colour conversion to BGR (layouts: :mod:`dvpipe.backends._raw_yuv`).
ENCODINGS = ("jpeg", "png", "h264", "h265", "raw", "uyvy", "yuyv", "nv12")


class PixelFormat(str, enum.Enum):
    """What a frame's ``data`` holds."""

    ENCODED = "encoded"  #: compressed bytes (JPEG, PNG, an access unit of H.264/H.265)
    BGR = "bgr"  #: HxWx3 uint8, OpenCV colour order
    RGB = "rgb"  #: HxWx3 uint8
    GRAY = "gray"  #: HxW uint8
    NV12 = "nv12"  #: semi-planar YUV 4:2:0, (H*3/2)xW uint8, Y plane then interleaved UV
    FLOAT_HWC = "float_hwc"  #: HxWx3 float (normalised), channel order set by the stage
    CHW = "chw"  #: 3xHxW planes (float after Normalise), as written into the batch


#: Largest width or height of a camera, in pixels (JPEG's limit; far above any sensor).
CAMERA_MAX_SIDE = 65535
#: Largest magnitude of an intrinsics / lidar2cam entry (pixels, metres): finite products downstream.
_MATRIX_MAX_ABS = 1e9
_CAMERA_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}$")


def similar_key(a: str, b: str) -> bool:
    """Whether key ``a`` looks like a typo of ``b``: one letter added, left out, changed, or two neighbours
    swapped (case aside) -- the "did you mean" of unknown keys. ``cam2lidar`` is not a typo of ``lidar2cam``."""
    a, b = a.lower(), b.lower()
    if a == b:
        return True
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    if abs(len(a) - len(b)) != 1:
        return False
    s, t = (a, b) if len(a) < len(b) else (b, a)
    return any(t[:i] + t[i + 1:] == s for i in range(len(t)))


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (user values in one-line messages: a huge list or
    an integer of thousands of digits must not flood the line, nor fail to print)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - e.g. int -> str beyond Python's digit limit
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


_WXH_RE = re.compile(r"^\s*(\d{1,9})\s*[xX]\s*(\d{1,9})\s*$")


def parse_wxh(text: str, what: str = "size") -> tuple[int, int]:
    """A ``WIDTHxHEIGHT`` string (``"1600x900"``, as CLI flags and YAML comments write sizes) as
    ``(height, width)`` in pixels: the one place where a ``WxH`` string becomes a size tuple.

    >>> parse_wxh("1600x900")
    (900, 1600)

    Raises:
        ConfigError: one line naming ``what`` for anything else, or a side outside 1..CAMERA_MAX_SIDE.
    """
    m = _WXH_RE.match(str(text))
    w, h = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if not (0 < w <= CAMERA_MAX_SIDE and 0 < h <= CAMERA_MAX_SIDE):
        raise ConfigError(f"{what} {short_repr(text)}: expected WIDTHxHEIGHT (WxH) in pixels, each side in "
                          f"1..{CAMERA_MAX_SIDE}, e.g. 1600x900")
    return h, w


def camera_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a camera, or None.

    Camera names are substituted into ``{camera}`` URIs and output file names, so each must be one
    safe path component: 1-64 characters of ``A-Z a-z 0-9 _ . + -``, not starting with ``.`` or
    ``-``, no ``..`` (so no ``/``, ``\\``, NUL, spaces or traversal).
    """
    if not isinstance(name, str) or not name:
        return f"name must be a non-empty string, got {short_repr(name)}"
    if not _CAMERA_NAME_RE.match(name) or ".." in name:
        return (f"name {short_repr(name)} is not a safe file name: use 1-64 of A-Z a-z 0-9 _ . + -, not starting "
                "with '.' or '-', no '..' (it is substituted into {camera} paths)")
    return None


def _matrix(value: Any, shape: tuple[int, int], path: str) -> np.ndarray:
    try:
        m = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"expected a {shape[0]}x{shape[1]} matrix of numbers, got {short_repr(value)}", path) from None
    if m.shape != shape:
        raise ConfigError(f"expected a {shape[0]}x{shape[1]} matrix, got shape {list(m.shape)}", path)
    if not np.all(np.isfinite(m)):
        raise ConfigError("matrix has non-finite entries", path)
    if np.any(np.abs(m) > _MATRIX_MAX_ABS):
        raise ConfigError(f"matrix entries must be within +-{_MATRIX_MAX_ABS:g} (pixels, metres)", path)
    m.setflags(write=False)
    return m


#: lens models :class:`Distortion` knows, with the coefficient counts each takes (OpenCV's order)
DISTORTION_MODELS = {"pinhole": (4, 5, 8), "fisheye": (4,)}
#: largest magnitude of a distortion coefficient (real lenses: |k| < 10; keeps the polynomials finite)
_DISTORTION_MAX_ABS = 1e4


@dataclass(frozen=True)
class Distortion:
    """A camera's lens distortion, in OpenCV's models and coefficient order.

    Attributes:
        model: ``pinhole`` — OpenCV's radial-tangential model (``cv2.undistort``), coefficients
            ``(k1, k2, p1, p2[, k3[, k4, k5, k6]])``: ``x_d = x (1 + k1 r^2 + k2 r^4 + k3 r^6) /
            (1 + k4 r^2 + k5 r^4 + k6 r^6) + 2 p1 x y + p2 (r^2 + 2 x^2)`` (y alike, p1/p2 swapped);
            ``fisheye`` — OpenCV's equidistant fisheye model (``cv2.fisheye``), ``(k1, k2, k3, k4)``:
            ``theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8)``,
            ``theta = atan(r)``, ``x_d = x theta_d / r``.
        coeffs: the coefficients, as floats.

    In a rig file: ``distortion: {model: fisheye, coeffs: [k1, k2, k3, k4]}``, or a plain list for the
    pinhole model (``distortion: [k1, k2, p1, p2, k3]``). The normalised coordinates ``x = (u - cx) / fx``
    use the camera's ``intrinsics`` in dvpipe's pixel convention (:mod:`dvpipe.geometry`: pixel centres at
    ``i + 0.5``); a K calibrated by OpenCV (centres at integers) has ``cx, cy`` 0.5 smaller.

    Sources: OpenCV, "Camera Calibration and 3D Reconstruction" (calib3d,
    https://docs.opencv.org/master/d9/d0c/group__calib3d.html: the pinhole model and its 4, 5, 8, 12 or 14
    coefficients; dvpipe takes 4, 5 or 8) and "Fisheye camera model" (calib3d_fisheye,
    https://docs.opencv.org/3.3.0/db/d58/group__calib3d__fisheye.html: ``(k1, k2, k3, k4)``).
    """

    model: str
    coeffs: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.model not in DISTORTION_MODELS:
            raise ConfigError(f"unknown distortion model {short_repr(self.model)}; allowed: "
                              f"{', '.join(DISTORTION_MODELS)}", "distortion.model")
        try:
            c = tuple(float(x) for x in self.coeffs)
        except (TypeError, ValueError):
            raise ConfigError(f"distortion coefficients must be numbers, got {short_repr(self.coeffs)}",
                              "distortion.coeffs") from None
        counts = DISTORTION_MODELS[self.model]
        if len(c) not in counts:
            raise ConfigError(f"the {self.model} model takes {' or '.join(map(str, counts))} coefficients "
                              f"({'k1, k2, p1, p2[, k3[, k4, k5, k6]]' if self.model == 'pinhole' else 'k1, k2, k3, k4'}), "
                              f"got {len(c)}", "distortion.coeffs")
        if not all(np.isfinite(c)) or any(abs(x) > _DISTORTION_MAX_ABS for x in c):
            raise ConfigError(f"distortion coefficients must be finite and within +-{_DISTORTION_MAX_ABS:g}",
                              "distortion.coeffs")
        object.__setattr__(self, "coeffs", c)

    @property
    def opencv(self) -> np.ndarray:
        """The coefficients as OpenCV takes them: ``(N,)`` float64 (``(4, 1)`` is what cv2.fisheye wants)."""
        return np.array(self.coeffs, dtype=np.float64)

    @classmethod
    def parse(cls, value: object) -> "Distortion | None":
        """A rig file's ``distortion`` value (mapping, list, Distortion or None)."""
        if value is None or isinstance(value, Distortion):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"model", "coeffs"}
            if unknown:
                raise ConfigError(f"unknown key(s) {', '.join(sorted(map(str, unknown)))}; allowed: model, coeffs",
                                  "distortion")
            if "coeffs" not in value:
                raise ConfigError("missing coeffs (the model's coefficients, OpenCV order)", "distortion.coeffs")
            return cls(value.get("model", "pinhole"), value["coeffs"])
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            return cls("pinhole", tuple(value))
        raise ConfigError(f"expected {{model: pinhole|fisheye, coeffs: [...]}} or a list of pinhole coefficients, "
                          f"got {short_repr(value)}", "distortion")


#: per-camera keys of a single-sample rig file (e.g. one nuScenes sample): one frame of the camera.
FRAME_KEYS = ("image", "capture_time_ns")


@dataclass(frozen=True, eq=False)
class Camera:
    """One camera of a rig: ``Camera("CAM_FRONT", width=1600, height=900, encoding="jpeg")``.

    ``width`` and ``height`` are keyword-only: sizes in dvpipe's Python API are ``(height, width)``, so a
    positional ``(width, height)`` pair would read backwards (a positional call raises ``TypeError``).

    Attributes:
        name: unique name (``CAM_FRONT``).
        width: image width in pixels (keyword-only).
        height: image height in pixels (keyword-only).
        encoding: one of :data:`ENCODINGS`; what the camera's frames arrive as.
        intrinsics: 3x3 K (pixels).
        lidar2cam: 4x4 rigid transform, ``p_cam = lidar2cam @ [x, y, z, 1]`` (metres).
        distortion: the lens's :class:`Distortion` (``None``: an ideal pinhole, or images already
            undistorted); the ``Undistort`` stage reads it.
        projection_offset: the fourth column ``t`` of the camera's 3x4 projection ``[K | t]`` (pixels
            times depth; zero for a projection that is K alone). A rectified stereo camera's projection
            holds its baseline there (KITTI's P2: ``[44.857, 0.216, 0.00275]``); rig files give it as
            ``cam2img`` (3x4 or 4x4, mmdet3d's name). ``cam2img`` and ``lidar2img`` include it.
        extra: other keys from the rig file, kept verbatim (``cam2ego``, ``lidar2img``...). The frame
            keys :data:`FRAME_KEYS` (``image``: a file next to the rig file; ``capture_time_ns``) are
            checked by :meth:`Rig.from_dict` and used by deployments: a camera the deployment gives no
            source reads that one image (a one-frame sequence at that capture time); a camera with a
            source warns that they are not used.
    """

    name: str
    width: int = field(kw_only=True)
    height: int = field(kw_only=True)
    encoding: str = "jpeg"
    intrinsics: np.ndarray = field(default_factory=lambda: np.eye(3))
    lidar2cam: np.ndarray = field(default_factory=lambda: np.eye(4))
    extra: Mapping[str, Any] = field(default_factory=dict)
    distortion: "Distortion | None" = None
    projection_offset: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"name must be a non-empty string, got {short_repr(self.name)}", "camera.name")
        path = f"camera {self.name!r}"
        for key in ("width", "height"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 < v <= CAMERA_MAX_SIDE:
                raise ConfigError(f"must be an integer number of pixels in 1..{CAMERA_MAX_SIDE}, got {short_repr(v)}",
                                  f"{path}.{key}")
            object.__setattr__(self, key, int(v))
        if not isinstance(self.encoding, str) or self.encoding not in ENCODINGS:
            raise ConfigError(f"unknown encoding {short_repr(self.encoding)}; allowed: {', '.join(ENCODINGS)}", f"{path}.encoding")
        K = _matrix(self.intrinsics, (3, 3), f"{path}.intrinsics")
        det = np.linalg.det(K)
        if not abs(det) > 1e-12:  # projection, undistortion and rays all invert K
            raise ConfigError(f"the camera matrix is singular (determinant {det:g}): a pinhole K has fx and fy "
                              "non-zero and the last row [0, 0, 1]", f"{path}.intrinsics")
        object.__setattr__(self, "intrinsics", K)
        object.__setattr__(self, "lidar2cam", _matrix(self.lidar2cam, (4, 4), f"{path}.lidar2cam"))
        offset = _matrix(np.reshape(np.asarray(self.projection_offset, dtype=object), (1, -1)), (1, 3),
                         f"{path}.projection_offset")
        object.__setattr__(self, "projection_offset", offset.reshape(3))
        try:
            object.__setattr__(self, "distortion", Distortion.parse(self.distortion))
        except ConfigError as e:
            sub = e.path.split(".", 1)[1] + ": " if e.path and "." in e.path else ""
            raise ConfigError(sub + e.message, f"{path}.distortion") from None

    @property
    def projection(self) -> np.ndarray:
        """3x4 ``[K | projection_offset]``: a camera-frame point ``(x, y, z, 1)`` -> ``(u*d, v*d, d)``."""
        return np.hstack([self.intrinsics, self.projection_offset.reshape(3, 1)])

    @property
    def lidar2img(self) -> np.ndarray:
        """4x4 ``P4 @ lidar2cam`` for the camera's native image (P4: :attr:`projection` in the top rows of
        eye(4); K4 when the offset is zero)."""
        p4 = np.eye(4)
        p4[:3, :] = self.projection
        return p4 @ self.lidar2cam

    def __repr__(self) -> str:
        return f"Camera({self.name!r}, {self.width}x{self.height}, {self.encoding})"



def _projection(item: Mapping[str, Any], where: str) -> tuple[Any, Any]:
    """``(intrinsics, projection offset)`` of a rig camera: ``intrinsics`` (3x3) and/or ``cam2img`` (a 3x4 or
    4x4 projection ``[K | t]``, mmdet3d's name); given both, K must be the projection's left 3x3."""
    if "cam2img" not in item:
        return item.get("intrinsics", np.eye(3)), np.zeros(3)
    raw = item["cam2img"]
    try:
        rows = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"expected a 3x4 or 4x4 projection matrix, got {short_repr(raw)}", f"{where}.cam2img") from None
    if rows.shape == (4, 4):
        if not np.allclose(rows[3], [0, 0, 0, 1]):
            raise ConfigError(f"a 4x4 projection's last row must be [0, 0, 0, 1], got {rows[3].tolist()}", f"{where}.cam2img")
        rows = rows[:3]
    P = _matrix(rows, (3, 4), f"{where}.cam2img")
    if "intrinsics" in item:
        K = _matrix(item["intrinsics"], (3, 3), f"{where}.intrinsics")
        if not np.allclose(K, P[:, :3], rtol=1e-9, atol=1e-9):
            raise ConfigError(f"the projection's left 3x3 {P[:, :3].tolist()} differs from intrinsics {K.tolist()}; "
                              "give one of them, or the same K in both", f"{where}.cam2img")
    return P[:, :3], P[:, 3]


def _check_lidar2img(cam: Camera, item: Mapping[str, Any], where: str) -> None:
    """A rig camera's own ``lidar2img`` must be the one dvpipe derives (``P4 @ lidar2cam``): a projection
    with an offset given only there (KITTI's P2 as ``intrinsics`` alone) would be lost silently."""
    if "lidar2img" not in item:
        return
    try:
        given = np.asarray(item["lidar2img"], dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"expected a 4x4 matrix, got {short_repr(item['lidar2img'])}", f"{where}.lidar2img") from None
    derived = cam.lidar2img
    if given.shape != (4, 4) or not np.allclose(given, derived, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(derived).max())):
        raise ConfigError("differs from the projection and lidar2cam given (lidar2img = P4 @ lidar2cam); a projection "
                          "with an offset (a rectified stereo camera's baseline, KITTI's P2) goes in cam2img "
                          "(3x4 or 4x4)", f"{where}.lidar2img")


#: Limits on the YAML dvpipe reads (rig files, deployments): far above any real file, far below harm.
YAML_MAX_BYTES = 4 * 1024 * 1024
#: Deepest nesting of collections, aliases followed (a deployment nests about 6 levels).
YAML_MAX_DEPTH = 64
#: Most nodes (scalars and collections) once every alias is expanded ("billion laughs" bombs); a file
#: without aliases is bounded by its size alone (10,000 calibrated cameras are ~700,000 values).
YAML_MAX_NODES = 200_000


class _YamlLimit(Exception):
    """A YAML document exceeded one of the ``YAML_MAX_*`` limits."""


def refuse_duplicate_keys(loader: Any, node: Any) -> None:
    """For a PyYAML loader's ``construct_mapping``: raise ``ConstructorError`` (with its line) when the mapping
    ``node`` gives one key twice -- PyYAML keeps the last, so the first would be lost silently. Merge keys
    (``<<``) are left out: YAML defines that the mapping's own keys override them."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict = {}
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"found key {key!r} twice in one mapping (first at line {seen[key] + 1}): one would be "
                "lost", key_node.start_mark)
        seen[key] = key_node.start_mark.line


def _bounded_loader(text: str):
    """A ``yaml.SafeLoader`` on ``text`` that refuses documents nested deeper than :data:`YAML_MAX_DEPTH`, and
    a mapping that gives one key twice (PyYAML keeps the last: the first would be lost silently; a merge
    key's values are overridden as YAML defines)."""
    import yaml

    class _Loader(yaml.SafeLoader):
        _depth = 0

        def construct_mapping(self, node, deep=False):  # noqa: D401 - PyYAML hook
            refuse_duplicate_keys(self, node)
            return super().construct_mapping(node, deep)

        def compose_node(self, parent, index):  # noqa: D401 - PyYAML hook
            self._depth += 1
            try:
                if self._depth > YAML_MAX_DEPTH:
                    raise _YamlLimit(f"nested more than {YAML_MAX_DEPTH} levels deep")
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    return _Loader(text)


def _expanded_size(node: Any, depth: int, memo: dict, active: set) -> tuple[int, int]:
    """``(nodes, height)`` of ``node`` with aliases expanded; raises :class:`_YamlLimit` past the limits.

    Shared (aliased) nodes are measured once (``memo``), so this costs the document's size, not the
    expansion's; ``active`` holds the nodes on the current path (an alias to one is a cycle).
    """
    import yaml

    if depth > YAML_MAX_DEPTH:
        raise _YamlLimit(f"nested more than {YAML_MAX_DEPTH} levels deep once aliases are followed")
    key = id(node)
    if key in active:
        raise _YamlLimit("an alias refers to a collection that contains it (a recursive structure)")
    if key not in memo:
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        active.add(key)
        size, height = 1, 0
        for child in children:
            s, h = _expanded_size(child, depth + 1, memo, active)
            size, height = size + s, max(height, h + 1)
            # without aliases a subtree is as large as the nodes written (in memo, or on the path): the file's
            # size (YAML_MAX_BYTES) bounds it; only an expansion beyond what is written is a bomb
            if size > YAML_MAX_NODES and size > len(memo) + len(active):
                raise _YamlLimit(f"more than {YAML_MAX_NODES} values once aliases are expanded (an alias bomb?)")
        active.discard(key)
        memo[key] = (size, height)
    size, height = memo[key]
    if depth + height > YAML_MAX_DEPTH:
        raise _YamlLimit(f"nested more than {YAML_MAX_DEPTH} levels deep once aliases are followed")
    return size, height


def _yaml_error_line(e: Exception) -> str:
    """One line for a PyYAML error: the problem and where (PyYAML's own text spans several lines)."""
    problem = getattr(e, "problem", None)
    if problem:  # PyYAML's "found unexpected ..." reads like a crash report; say what it means
        problem = problem.replace("found unexpected end of stream", "the file ends too early")
        problem = problem.replace("found unexpected", "found misplaced")
    mark = getattr(e, "problem_mark", None)
    if problem and mark is not None:
        context = getattr(e, "context", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}"
        return f"{problem} at {where}" + (f" ({context})" if context else "")
    return " ".join(str(e).split())


def read_yaml(path: str | os.PathLike, what: str = "file") -> Any:
    """The parsed YAML of ``path`` (safe types only), within the ``YAML_MAX_*`` limits.

    Raises:
        ConfigError: one line naming the file: missing, unreadable, not UTF-8, larger than
            :data:`YAML_MAX_BYTES` bytes, not YAML, nested too deep, or too many values after
            alias expansion.
    """
    import yaml

    from .codecs import read_regular_file

    try:  # a FIFO or a device node is refused, not waited on
        _size, raw = read_regular_file(os.fspath(path), YAML_MAX_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except (OSError, ValueError) as e:  # permissions, name too long, NUL in the name, not a regular file...
        if os.path.isdir(path):
            raise ConfigError(f"{what} {path} is a folder, not a YAML file") from None
        raise ConfigError(f"cannot read {what} {path}: {getattr(e, 'strerror', None) or e}") from None
    if raw is None:
        raise ConfigError(f"{path}: larger than {YAML_MAX_BYTES // (1024 * 1024)} MiB; not a {what} dvpipe reads")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}); a {what} is UTF-8 YAML") from None
    loader = _bounded_loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _expanded_size(root, 1, {}, set())
        return loader.construct_document(root)
    except _YamlLimit as e:
        raise ConfigError(f"{path}: refused: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_error_line(e)}") from None
    except (ValueError, TypeError, OverflowError) as e:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    finally:
        loader.dispose()


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
    def from_dict(cls, data: Mapping[str, object], path: str = "") -> "Rig":
        """Build a rig from the rig-YAML structure (``{cameras: [{name, width, ...}]}``).

        Every problem is reported at once, each with its key path. Camera names must be safe path
        components here (see :func:`camera_name_problem`): rig files feed deployments, which
        substitute them into ``{camera}`` URIs and output names.

        A camera's projection is ``intrinsics`` (3x3 K) or ``cam2img`` (3x4 or 4x4 ``[K | t]``: a
        rectified stereo camera's, KITTI's P2, whose offset ``t`` holds the baseline); a ``lidar2img``
        the file also gives must be ``P4 @ lidar2cam`` (a projection whose offset is only there is refused,
        not lost).
        """
        prefix = f"{path}." if path else ""
        if not isinstance(data, Mapping) or "cameras" not in data:
            raise ConfigError("a rig needs a 'cameras' list", f"{prefix}cameras")
        items = data["cameras"]
        if not isinstance(items, Sequence) or isinstance(items, (str, bytes)):
            raise ConfigError(f"expected a list of cameras, got {type(items).__name__}", f"{prefix}cameras")
        known = {"name", "width", "height", "encoding", "intrinsics", "lidar2cam", "distortion", "cam2img"}
        cams, errors = [], []
        for i, item in enumerate(items):  # frame keys (a scene file as a rig): checked here, used by deployments
            if isinstance(item, Mapping):
                if "image" in item and (not isinstance(item["image"], str) or not item["image"]):
                    errors.append(f"{prefix}cameras[{i}].image: expected an image file name, got {short_repr(item['image'])}")
                t = item.get("capture_time_ns")
                if "capture_time_ns" in item and (isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 2 ** 63):
                    errors.append(f"{prefix}cameras[{i}].capture_time_ns: expected an integer >= 0 (ns since the Unix "
                                  f"epoch), got {short_repr(t)}")
                if "capture_time_ns" in item and "image" not in item:
                    errors.append(f"{prefix}cameras[{i}].capture_time_ns: given without image (the time of which frame?)")
        for key in data:  # other keys are kept (scene files carry their own), but not a known key's typo
            close = [k for k in ("cameras", "name") if key not in ("cameras", "name") and similar_key(str(key), k)]
            if close:
                errors.append(f"{prefix}{key}: unknown key (did you mean {close[0]!r}?)")
        for i, item in enumerate(items):
            where = f"{prefix}cameras[{i}]"
            if not isinstance(item, Mapping):
                errors.append(f"{where}: expected a mapping, got {type(item).__name__}")
                continue
            for key in item:  # kept in Camera.extra: a typo there would leave its field at the default silently
                close = [k for k in sorted(known) if key not in known and similar_key(str(key), k)]
                if close:
                    errors.append(f"{where}.{key}: unknown key (did you mean {close[0]!r}? other keys are kept as "
                                  "Camera.extra)")
            missing = [k for k in ("name", "width", "height") if k not in item]
            if missing:
                errors.append(f"{where}: missing {', '.join(missing)}")
                continue
            name_problem = camera_name_problem(item["name"])  # rig files name cameras in paths
            if name_problem is not None:
                errors.append(f"{where}.name: {name_problem}")
                continue
            try:
                intrinsics, offset = _projection(item, where)
                cam = Camera(
                    name=item["name"], width=item["width"], height=item["height"],
                    encoding=item.get("encoding", "jpeg"),
                    intrinsics=intrinsics,
                    lidar2cam=item.get("lidar2cam", np.eye(4)),
                    extra={k: v for k, v in item.items() if k not in known},
                    distortion=item.get("distortion"),
                    projection_offset=offset,
                )
                _check_lidar2img(cam, item, where)
                cams.append(cam)
            except ConfigError as e:
                field_name = e.path.rsplit(".", 1)[1] if e.path and "." in e.path else ""
                errors.append(f"{where}{'.' + field_name if field_name else ''}: {e.message}")
        if errors:
            raise ConfigError("; ".join(errors), problems=tuple(errors))
        name = data.get("name", "rig")
        return cls(tuple(cams), name=name if isinstance(name, str) else short_repr(name))

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "Rig":
        """Load a rig file (see ``configs/rigs/``). Errors name the file and the field."""
        return cls.from_yaml_data(read_yaml(path, "rig file"), path)

    @classmethod
    def from_yaml_data(cls, data: object, path: str | os.PathLike) -> "Rig":
        """:meth:`from_dict` on the parsed contents of the rig file ``path`` (errors name the file)."""
        try:
            return cls.from_dict(cast(Mapping[str, object], data or {}))  # from_dict checks it is one
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}", problems=tuple(f"{path}: {p}" for p in e.problems)) from None


def check_one_size(cameras: Sequence[Any], what: str) -> Any:
    """The one-size rule of a model profile: every camera at one size (its stages, metas and the
    model assume one image size). Returns the first camera (profiles place crops by its size);
    raises :class:`~dvpipe.ConfigError` naming the sizes otherwise. Used by
    :meth:`dvpipe.Pipeline.from_profile` (and so ``from_mmdet3d_config``) and by the deployment
    validator, which reports the same message at ``pipeline.profile``."""
    sizes = {(c.height, c.width) for c in cameras}
    if len(sizes) > 1:
        raise ConfigError(f"{what} needs every camera at one size; the rig mixes "
                          + ", ".join(f"{c.name} {c.width}x{c.height}" for c in cameras)
                          + " (use a stage list with resize/pad to one size)")
    return cameras[0] if cameras else None


#: the identity 3x3 transform (read-only, shared): :attr:`Frame.img_aug` of a camera's own picture
IDENTITY_3X3 = np.eye(3)
IDENTITY_3X3.flags.writeable = False


@dataclass
class Frame:
    """One camera's image on its way through a plan.

    Attributes:
        camera: camera name.
        seq: sequence number of the frame in its source (0-based).
        capture_epoch_ns: capture time, epoch nanoseconds as the source reports it.
        data: bytes (``ENCODED``), or an array in ``pixel_format`` (any :data:`dvpipe.FrameData`: a video
            source hands a :class:`~dvpipe.video.VideoPacket`); a :class:`~dvpipe.errors.FrameError` from a
            source that could not produce the frame (the pipeline counts it as a drop with its reason).
        pixel_format: what ``data`` holds.
        img_aug: 3x3 image-plane transform already applied to ``data`` (original sensor pixel coords ->
            coords in ``data``). A pipeline takes the identity only (the camera's own pictures, and
            :class:`~dvpipe.errors.ConfigError` otherwise): image transforms are stages, and what a plan
            applies is known at plan time: ``pipe.plan.cameras[i].img_aug`` and ``batch.metas[i]["img_aug"]``.
    """

    camera: str
    seq: int
    capture_epoch_ns: int
    data: Any
    pixel_format: PixelFormat = PixelFormat.ENCODED
    img_aug: np.ndarray = field(default_factory=lambda: IDENTITY_3X3)

    def __repr__(self) -> str:
        d = f"{len(self.data)} bytes" if isinstance(self.data, (bytes, bytearray, memoryview)) else (
            f"array{tuple(self.data.shape)}" if hasattr(self.data, "shape") else type(self.data).__name__)
        return (f"Frame({self.camera!r}, seq={self.seq}, capture_epoch_ns={self.capture_epoch_ns}, "
                f"{self.pixel_format.value}, {d})")


@dataclass
class FrameBatch:
    """The model input for one frame set.

    Attributes:
        images: ``(N, 3, H, W)`` array (float32 or float16) in rig order; a torch tensor when the
            plan's batch step runs on a torch device; on the AIPP route a :class:`dvpipe.device.DeviceTensor`
            (NV12 ``(N, H, W)`` in the per-batch device buffer, ``meta["aipp"]`` the configuration the
            model's AIPP applies; :meth:`keep` downloads it as ``(N, Hs * 3 / 2, Ws)`` uint8). Owned by the pipeline and overwritten by a
            later call once its ring of output buffers wraps (``Pipeline(output_buffers=...)``):
            reading it after that raises :class:`StaleBatchError`; :meth:`keep` returns a copy
            that owns its images.
        metas: one dict per camera, keys defined by the profile (``lidar2img``, ``img_shape``...); with
            ``metas_format="mmdet3d"``, a list of one sample dict holding per-camera lists.
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
    timeline: Optional[Timeline] = None
    #: the pipeline's per-buffer write counts, this batch's buffer and its count then (None: owned images)
    ring: Any = field(default=None, repr=False, compare=False)
    slot: int = field(default=0, repr=False, compare=False)
    generation: int = field(default=0, repr=False, compare=False)

    @property
    def img(self):
        """``images`` as ``(1, N, 3, H, W)`` (a view), the layout mmdet3d detectors take."""
        return self.images[None]

    @property
    def stale(self) -> bool:
        """True once the pipeline has started writing another frame set into this batch's buffer."""
        return self.ring is not None and self.ring[self.slot] != self.generation

    def _check_fresh(self) -> None:
        if self.stale:
            raise StaleBatchError(
                f"batch {getattr(self.timeline, 'index', '?')}'s images were overwritten: its output buffer holds a "
                f"later frame set now (the pipeline reuses output_buffers={len(self.ring)} buffers); call "
                "batch.keep() to own a copy, or raise output_buffers")

    def keep(self) -> "FrameBatch":
        """A copy that owns its images (and writeable copies of the metas' arrays), valid forever.

        Raises:
            StaleBatchError: the images were overwritten, before the copy or while it was made (another
                thread's frame set took the buffer: the copy would mix the two).
        """
        images = self.images
        if hasattr(images, "to_host") and getattr(images, "layout", "") == "NV12":  # a DeviceTensor batch (AIPP)
            images = np.array(nv12_batch_to_host(images), copy=True)
        else:
            images = images.clone() if hasattr(images, "clone") else np.array(images, copy=True)
        self._check_fresh()  # still this set's buffer once copied: the copy is whole
        return FrameBatch(images, _copy_metas(self.metas), np.array(self.valid, copy=True), list(self.drops),
                     tuple(self.cameras), list(self.fallbacks), self.timeline)

    def __getstate__(self) -> dict:
        # a pickled batch owns its images: the ring it points into stays in this process
        kept = self.keep()
        state = dict(kept.__dict__)
        state.pop("ring", None)
        tl = state.get("timeline")
        slots = getattr(type(tl), "__slots__", None)
        if slots and "_lock" in slots:  # a Timeline holds a lock: carry its other slots, a new lock on load
            state["timeline"] = ("__timeline__", type(tl), {k: getattr(tl, k) for k in slots
                                                           if k != "_lock" and hasattr(tl, k)})
        return state

    def __setstate__(self, state: dict) -> None:
        images = state.pop("_images", None)
        tl = state.get("timeline")
        if isinstance(tl, tuple) and len(tl) == 3 and tl[0] == "__timeline__":
            import threading

            obj = tl[1].__new__(tl[1])
            for k, v in tl[2].items():
                object.__setattr__(obj, k, v)
            object.__setattr__(obj, "_lock", threading.Lock())
            state["timeline"] = obj
        self.__dict__.update(state)
        self.__dict__.setdefault("ring", None)
        self._images = images

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
        shape = tuple(getattr(self.__dict__.get("_images"), "shape", ()))
        return f"FrameBatch(images{shape}, valid={self.valid.tolist()}, drops={len(self.drops)})"


def _get_images(batch: FrameBatch):
    batch._check_fresh()
    return batch.__dict__["_images"]


def _set_images(batch: FrameBatch, value) -> None:
    batch.__dict__["_images"] = value


# a data descriptor over the dataclass field: every read of batch.images checks the generation
FrameBatch.images = property(_get_images, _set_images,
                             doc=cast(str, FrameBatch.__doc__).split("Attributes:")[1].split("metas:")[0].strip())


def _copy_metas(metas):
    def copy(v):
        if isinstance(v, np.ndarray):
            return np.array(v, copy=True)
        if isinstance(v, dict):
            return {k: copy(x) for k, x in v.items()}
        if isinstance(v, list):
            return [copy(x) for x in v]
        return v
    return copy(metas)

