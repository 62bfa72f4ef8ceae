"""The stand-in "model" behind the software device's AIPP (configs/models/aipp-sim/model.om): per camera
and channel, the mean and standard deviation of the normalised (N, 3, H, W) fp16 tensor AIPP produced
(channels in the profile's order, RGB for bevformer-tiny). Over real photos normalised with their
dataset's mean/std these sit near 0 and 1: a quick check that the AIPP route delivers normalised
tensors. numpy only."""
import numpy as np


def channel_stats(x: np.ndarray) -> np.ndarray:
    """``x``: (N, 3, H, W) float16, normalised. Returns (N, 3, 2) float32: mean and std per channel."""
    x = x.astype(np.float32)
    return np.stack([x.mean(axis=(2, 3)), x.std(axis=(2, 3))], axis=-1)
