"""The probe's shared keys: how a camera's encoding, a deployment target and a planned step are named in the
probe's tables and in the live cache (:mod:`.live`, :mod:`.report` and the capacity modules all use them)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:  # names for the type checker only
    from ..stages.base import FrameSpec, Stage
    from ..types import Camera

__all__ = ["camera_encoding", "target_key", "step_key", "DECODER_BY_ENCODING"]

#: the DVPP unit that takes a camera's frames first, by camera encoding (raw YUV goes straight to VPC)
DECODER_BY_ENCODING = {"jpeg": "JPEGD", "png": "PNGD", "h264": "VDEC", "h265": "VDEC", "uyvy": "VPC",
                       "yuyv": "VPC", "nv12": "VPC"}


def camera_encoding(cam: Camera) -> str:
    """The probe encoding of a camera (``jpeg420`` when its bitstream is known, else its encoding)."""
    extra = cam.extra or {}
    if cam.encoding == "raw" and extra.get("pixel_format"):
        return str(extra["pixel_format"])
    return str(extra.get("bitstream") or cam.encoding)


def target_key(soc: str, cann: str, driver: Optional[str]) -> str:
    """The live cache's key of a target: ``soc|cann|driver`` (``?`` for an unknown driver)."""
    return f"{soc}|{cann}|{driver or '?'}"


def step_key(camera: Camera, stages: Sequence[Stage], spec_in: FrameSpec, kernel: str) -> str:
    """The cache key of one step: camera size and encoding, the kernel, the stages it was *asked* to run (before
    a detour replaced them; what the planner's ``KernelQuery`` holds) and the input spec."""
    desc = "; ".join(s.describe() for s in stages)
    return f"{camera.width}x{camera.height} {camera_encoding(camera)}|{kernel}|{desc}|{spec_in}"
