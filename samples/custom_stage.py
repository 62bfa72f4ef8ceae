"""A user-defined stage with its own CPU kernel, planned, fused, timed and reported like a built-in.

Run: python samples/custom_stage.py

``Gamma`` brightens dark images (a common fix for night cameras) on the uint8 image before
normalisation. ``@dv.register_stage("gamma")`` declares it (its op, and ``gamma`` as its name in a
deployment's ``stages:`` list once this module is listed under ``plugins:``); its kernel is registered
for the ``cpu`` backend with ``register_kernel``; a second, fused kernel covers
``gamma + normalise + pad + batch`` and writes straight into the batch buffer. Nothing in dvpipe is
subclassed except the frozen ``Stage`` declaration itself, and no dvpipe file is edited.
``output_spec(spec, camera)`` sees the camera it is planned for (unused here).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import cv2
import numpy as np

import dvpipe as dv


@dv.register_stage("gamma", replace=True)  # replace: the sample may be run twice in one process
@dataclass(frozen=True)
class Gamma(dv.Stage):
    """Per-pixel ``out = 255 * (in / 255) ** (1 / gamma)`` on uint8 BGR; size and format unchanged."""

    gamma: float = 2.2

    def __post_init__(self):
        if not self.gamma > 0:
            raise dv.ConfigError(f"Gamma.gamma must be positive, got {self.gamma!r}")

    def output_spec(self, spec: dv.FrameSpec, camera: Optional[dv.Camera] = None) -> dv.FrameSpec:
        if spec.dtype != "uint8":
            raise dv.ConfigError("Gamma works on uint8 images; put it before Normalise()")
        return spec

    def describe(self) -> str:
        return f"gamma {self.gamma}"


def _lut(gamma: float) -> np.ndarray:
    return np.clip(np.round(255.0 * (np.arange(256) / 255.0) ** (1.0 / gamma)), 0, 255).astype(np.uint8)


@dv.register_kernel("gamma", backend="cpu", name="cv2.LUT", replace=True)
def gamma_cpu(data, stages, ctx):
    (stage,) = stages
    return cv2.LUT(data, _lut(stage.gamma))


@dv.register_kernel(("gamma", "normalise", "pad", "batch"), backend="cpu", name="gamma_normalise_fused", replace=True)
def gamma_normalise_fused(data, stages, ctx):
    gamma, norm, pad = stages[0], stages[1], stages[2]
    corrected = cv2.LUT(data, _lut(gamma.gamma))
    h, w = corrected.shape[:2]
    order = (2, 1, 0) if norm.to_rgb else (0, 1, 2)
    for c, src in enumerate(order):
        plane = np.ascontiguousarray(corrected[..., src])
        cv2.addWeighted(plane, 1 / norm.std[c], plane, 0, -norm.mean[c] / norm.std[c], dst=ctx.out[c, :h, :w],
                        dtype=cv2.CV_32F)
    ctx.out[:, h:, :] = pad.value
    ctx.out[:, :h, w:] = pad.value
    return ctx.out


def main() -> None:
    root = Path(__file__).resolve().parent
    rig = dv.Rig.from_yaml(root / "rig.yaml")
    stages = [dv.Decode(), Gamma(1.8), dv.Normalise(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), to_rgb=True),
              dv.Pad(size_divisor=32)]
    pipe = dv.Pipeline(rig, stages, backends=("cpu",))
    print(pipe.plan)
    frames = {cam.name: sorted((root / "frames" / cam.name).glob("*.jpg"))[0] for cam in rig}
    batch = pipe.process(frames)
    print(batch, {k: round(v, 2) for k, v in batch.step_ms().items()}, "ms summed over cameras")


if __name__ == "__main__":
    main()
