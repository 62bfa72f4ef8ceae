"""A tiny BEV-style model for the sample deployment: there for timing and for the metadata contract.

``TinyBEV`` = a small strided-conv image backbone + a BEVFormer-style view transform: BEV grid
points (x, y on the ground plane at a few heights z, lidar frame) are projected into every camera
with ``metas[i]["lidar2img"]``; ``u, v`` are normalised by ``img_shape`` (the *padded* size, as
BEVFormer's ``point_sampling`` does) and image features are bilinearly sampled there
(``grid_sample``), masked where the point is behind the camera or outside the image, and averaged
over the cameras that see it. Random weights (seeded): outputs mean nothing, shapes and timing are real.

Deployment hook: ``model: samples/bev_model.py:run`` calls :func:`run` with each batch.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class TinyBEV(nn.Module):
    """Args:
        bev_cells: BEV grid size (cells along x and y).
        bev_range_m: the grid covers [-range, range] metres in x (right) and y (forward).
        z_levels_m: heights of the sampled pillar points, metres (lidar frame, z up).
        channels: feature channels.
        backbone: override the image backbone (``nn.Identity()`` samples raw pixels: used by the tests).
    """

    def __init__(self, bev_cells: int = 50, bev_range_m: float = 40.0, z_levels_m=(-1.5, -0.5, 0.5),
                 channels: int = 32, backbone: nn.Module | None = None):
        super().__init__()
        self.backbone = backbone if backbone is not None else nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(32, channels, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1),
        )
        centres = (torch.arange(bev_cells, dtype=torch.float64) + 0.5) / bev_cells * 2 * bev_range_m - bev_range_m
        ys, xs = torch.meshgrid(centres, centres, indexing="ij")  # row = y (forward), col = x (right)
        pts = [torch.stack([xs, ys, torch.full_like(xs, z), torch.ones_like(xs)], -1) for z in z_levels_m]
        self.register_buffer("points", torch.stack(pts, 0).reshape(-1, 4), persistent=False)  # (Z*Y*X, 4)
        self.grid_shape = (len(z_levels_m), bev_cells, bev_cells)
        out_channels = channels if backbone is None else 3
        self.head = nn.Conv2d(out_channels, 1, 1) if backbone is None else nn.Identity()

    def view_transform(self, feats: torch.Tensor, metas: list[dict]) -> torch.Tensor:
        """``feats``: (N, C, h, w) features of the N cameras. Returns (C, Y, X) BEV features."""
        n, c = feats.shape[:2]
        lidar2img = torch.as_tensor(np.stack([m["lidar2img"] for m in metas]), dtype=torch.float64)
        cam = torch.einsum("nij,pj->npi", lidar2img, self.points)  # (N, P, 4): u*d, v*d, d, 1
        depth = cam[..., 2]
        eps = 1e-5
        uv = cam[..., :2] / depth.clamp(min=eps)[..., None]
        pad_h, pad_w = metas[0]["img_shape"][:2]  # BEVFormer normalises by camera 0's padded img_shape
        uv_norm = uv / torch.tensor([pad_w, pad_h], dtype=torch.float64)
        valid = (depth > eps) & (uv_norm > 0).all(-1) & (uv_norm < 1).all(-1)
        grid = (uv_norm * 2 - 1).to(feats.dtype)[:, :, None, :]  # (N, P, 1, 2), align_corners=False
        sampled = F.grid_sample(feats, grid, mode="bilinear", padding_mode="zeros", align_corners=False)[..., 0]
        mask = valid.to(feats.dtype)[:, None, :]
        bev = (sampled * mask).sum(0) / mask.sum(0).clamp(min=1.0)  # (C, P)
        z, y, x = self.grid_shape
        return bev.reshape(c, z, y, x).mean(1)

    def forward(self, images: torch.Tensor, metas: list[dict]) -> torch.Tensor:
        feats = self.backbone(images)
        return self.head(self.view_transform(feats, metas)[None])[0]


_MODEL: TinyBEV | None = None


def run(batch) -> torch.Tensor:
    """Deployment hook: BEV logits (1, Y, X) for one batch (``batch.images`` numpy or torch)."""
    global _MODEL
    if _MODEL is None:
        torch.manual_seed(0)
        _MODEL = TinyBEV().eval()
    images = batch.images if isinstance(batch.images, torch.Tensor) else torch.from_numpy(np.asarray(batch.images))
    with torch.inference_mode():
        return _MODEL(images.float(), batch.metas)
