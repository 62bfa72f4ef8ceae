""":class:`Request`: one DVPP step to judge, normalised and validated on construction.

Sizes in pixels; boxes are ``(left, top, right, bottom)`` with inclusive offsets; borders
``(top, bottom, left, right)``. Malformed requests raise ``ValueError`` with one line saying what to pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Optional

from ..errors import ConfigError
from .socs import family as _family, soc_info
from .versions import CannVersion, VersionLike
from .vocabulary import _norm_api, _norm_bitstream, _norm_op, _norm_pixel, _norm_unit, _vocab

__all__ = ["Request"]


def _box(value: Any, name: str) -> Optional[tuple[int, int, int, int]]:
    if value is None:
        return None
    try:
        left, top, right, bottom = (int(x) for x in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be (left, top, right, bottom) in pixels, inclusive; got {value!r}") from None
    if left < 0 or top < 0 or right < left or bottom < top:
        raise ConfigError(f"{name} {value!r} is not a box: need 0 <= left <= right and 0 <= top <= bottom "
                          "(inclusive offsets)")
    return (left, top, right, bottom)


@dataclass(frozen=True)
class Request:
    """One DVPP step to judge. Sizes in pixels.

    Attributes:
        soc: SoC name as returned by ``acl.get_soc_name()`` (or None when ``family`` is given).
        cann: CANN version.
        unit: ``jpegd`` | ``vpc`` | ``vdec`` | ``pngd``.
        op: ``decode`` for decoders; VPC: ``resize``, ``crop``, ``crop_resize``, ``crop_resize_paste``,
            ``make_border``, ``csc``.
        width, height: input picture (or stream) size in pixels.
        fmt: input format: a bitstream for decoders (``jpeg420``, ``jpeg-progressive``, ``png-rgba``,
            ``h264``...), a pixel format for VPC (``nv12``, ``yuv444sp``, ``rgb888``...).
        out_fmt: output pixel format; default ``nv12`` for JPEGD/VDEC, ``rgb888`` for PNGD, the input
            format for VPC.
        out_width, out_height: output size (resize, crop-resize, the paste canvas; decoders: default = input).
        crop: crop box ``(left, top, right, bottom)``, inclusive offsets, in the input.
        paste: paste box ``(left, top, right, bottom)``, inclusive, in the ``out_width`` x ``out_height`` canvas.
        border: make-border widths ``(top, bottom, left, right)``.
        api: ``acldvpp`` (v1) or ``himpi`` (v2); None: the family's APIs are tried in order of preference.
        family: family key, when no SoC name is known (support matrices).
        bit_depth, profile, level, interlaced, chroma, container: VDEC stream properties.
        orientation: EXIF orientation of a JPEG (1 = none; 5..8 swap width and height).
        channels: number of channels the deployment wants to open on this unit.
        batch: pictures per hi_mpi call.
        interpolation: ``bilinear`` | ``nearest`` (resize), or None for the hardware default.
    """

    soc: Optional[str]
    cann: CannVersion
    unit: str
    op: str
    width: int
    height: int
    fmt: str
    out_fmt: Optional[str] = None
    out_width: Optional[int] = None
    out_height: Optional[int] = None
    crop: Optional[tuple[int, int, int, int]] = None
    paste: Optional[tuple[int, int, int, int]] = None
    border: Optional[tuple[int, int, int, int]] = None
    api: Optional[str] = None
    family: str = ""
    bit_depth: Optional[int] = None
    profile: Optional[str] = None
    level: Optional[float] = None
    interlaced: Optional[bool] = None
    chroma: Optional[str] = None
    container: Optional[str] = None
    orientation: int = 1
    channels: Optional[int] = None
    batch: Optional[int] = None
    interpolation: Optional[str] = None
    soc_confidence: str = field(default="documented", compare=False)
    soc_note: str = field(default="", compare=False)

    @classmethod
    def make(cls, soc: Optional[str] = None, cann: Optional[VersionLike] = None, unit: str = "", op: Optional[str] = None,
             width: int = 0, height: int = 0, fmt: str = "", **kw: Any) -> "Request":
        """Build and validate a request (same arguments as :func:`check`)."""
        unknown = set(kw) - {f for f in cls.__dataclass_fields__} - {"soc_confidence", "soc_note"}
        if unknown:
            known = sorted(set(cls.__dataclass_fields__) - {"soc_confidence", "soc_note"})
            raise ConfigError(f"unknown request fields {sorted(unknown)}; known: {', '.join(known)}")
        if cann is None:
            raise ConfigError("a CANN version is required, e.g. cann='8.0.RC1'")
        return cls(soc=soc, cann=cann, unit=unit, op=op, width=width, height=height, fmt=fmt, **kw)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        s = object.__setattr__
        s(self, "cann", CannVersion.parse(self.cann))
        if self.soc is None and not self.family:
            raise ConfigError("give soc='Ascend...' (from acl.get_soc_name()) or family='ascend310p'")
        if self.soc is not None:
            info = soc_info(self.soc)
            if self.family and self.family != info.family:
                raise ConfigError(f"soc {self.soc} is in family {info.family}, not {self.family}")
            s(self, "family", info.family)
            s(self, "soc_confidence", info.confidence)
            s(self, "soc_note", info.note)
        else:
            _family(self.family)
            s(self, "soc_confidence", "documented")
        unit = _norm_unit(self.unit)
        s(self, "unit", unit)
        s(self, "op", _norm_op(unit, self.op))
        for name in ("width", "height"):
            val = getattr(self, name)
            if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
                raise ConfigError(f"{name} must be a positive integer number of pixels, got {val!r}")
        v = _vocab()
        if v.units[unit]["input"] == "pixel":
            s(self, "fmt", _norm_pixel(self.fmt, "input"))
        else:
            s(self, "fmt", _norm_bitstream(self.fmt, unit))
        out_fmt = self.out_fmt if self.out_fmt is not None else v.units[unit].get("default_out_fmt", self.fmt)
        s(self, "out_fmt", _norm_pixel(out_fmt, "output"))
        if self.api is not None:
            s(self, "api", _norm_api(self.api))
        s(self, "crop", _box(self.crop, "crop"))
        s(self, "paste", _box(self.paste, "paste"))
        if self.border is not None:
            b = tuple(int(x) for x in self.border)
            if len(b) != 4 or min(b) < 0:
                raise ConfigError("border must be (top, bottom, left, right), non-negative pixels")
            s(self, "border", b)
        if self.interpolation is not None:
            s(self, "interpolation", str(self.interpolation).strip().lower())
        if self.container is not None:
            s(self, "container", str(self.container).strip().lower().replace("-", ""))
        if self.profile is not None:
            s(self, "profile", str(self.profile).strip().lower().replace(" ", ""))
        if not 1 <= int(self.orientation) <= 8:
            raise ConfigError("orientation is the EXIF orientation 1..8")
        self._validate_geometry()

    def _validate_geometry(self) -> None:
        op = self.op
        if op in ("crop", "crop_resize", "crop_resize_paste"):
            if self.crop is None:
                raise ConfigError(f"VPC {op} needs crop=(left, top, right, bottom)")
            if self.crop[2] >= self.width or self.crop[3] >= self.height:
                raise ConfigError(f"crop box {self.crop} lies outside the {self.width}x{self.height} input "
                                  "(offsets are inclusive: right <= width-1, bottom <= height-1)")
        if op in ("resize", "crop_resize", "crop_resize_paste") and (self.out_width is None or self.out_height is None):
            raise ConfigError(f"VPC {op} needs out_width and out_height")
        if op == "crop_resize_paste":
            if self.paste is None:
                raise ConfigError("VPC crop_resize_paste needs paste=(left, top, right, bottom) in the output canvas")
            assert self.out_width is not None and self.out_height is not None  # checked just above
            if self.paste[2] >= self.out_width or self.paste[3] >= self.out_height:
                raise ConfigError(f"paste box {self.paste} lies outside the {self.out_width}x{self.out_height} canvas")
        if op == "crop" and self.out_width is not None and (self.out_height, self.out_width) != self.crop_size:
            raise ConfigError("VPC crop outputs the crop size; use crop_resize to scale")
        if op == "make_border" and self.border is None:
            raise ConfigError("VPC make_border needs border=(top, bottom, left, right)")
        for name in ("out_width", "out_height"):
            val = getattr(self, name)
            if val is not None and (not isinstance(val, int) or val <= 0):
                raise ConfigError(f"{name} must be a positive integer number of pixels, got {val!r}")

    # ---- derived geometry
    @property
    def crop_size(self) -> Optional[tuple[int, int]]:
        """``(height, width)`` in pixels of the crop box, or None."""
        if self.crop is None:
            return None
        return (self.crop[3] - self.crop[1] + 1, self.crop[2] - self.crop[0] + 1)

    @property
    def paste_size(self) -> Optional[tuple[int, int]]:
        """``(height, width)`` in pixels of the paste box, or None."""
        if self.paste is None:
            return None
        return (self.paste[3] - self.paste[1] + 1, self.paste[2] - self.paste[0] + 1)

    @property
    def out_size(self) -> tuple[int, int]:
        """``(height, width)`` in pixels of the output picture (the canvas for crop-resize-paste)."""
        if self.op == "crop":
            return self.crop_size  # type: ignore[return-value]
        if self.op == "make_border":
            t, b, l, r = self.border  # type: ignore[misc]
            return (self.height + t + b, self.width + l + r)
        if self.op == "csc":
            return (self.height, self.width)
        if self.out_width is not None and self.out_height is not None:
            return (self.out_height, self.out_width)
        return (self.height, self.width)

    @property
    def scale(self) -> Optional[tuple[Fraction, Fraction]]:
        """Per-axis scale (output/input) of a resizing op as ``(horizontal, vertical)``, or None."""
        if self.op == "resize":
            src, dst = (self.height, self.width), self.out_size
        elif self.op == "crop_resize":
            src, dst = self.crop_size, self.out_size  # type: ignore[assignment]
        elif self.op == "crop_resize_paste":
            src, dst = self.crop_size, self.paste_size  # type: ignore[assignment]
        else:
            return None
        return (Fraction(dst[1], src[1]), Fraction(dst[0], src[0]))

    @property
    def who(self) -> str:
        return self.soc or self.family
