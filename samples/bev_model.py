"""A tiny BEV-style model for the sample deployment: there for timing and for the metadata contract.

The model = a small strided-conv image backbone (four 3x3 convolutions, stride 2, padding 1, ReLU
between them) + a BEVFormer-style view transform: BEV grid points (x, y on the ground plane at a
few heights z, metres, lidar frame) are projected into every camera with ``metas[i]["lidar2img"]``;
``u, v`` (pixels) are normalised by ``img_shape`` (the *padded* size, as BEVFormer's
``point_sampling`` does) and image features are bilinearly sampled there (``grid_sample``,
``align_corners=False``, zeros outside), masked where the point is behind the camera or outside
the image, and averaged over the cameras that see it; a 1x1 convolution gives one logit per cell.
Random weights (seeded, drawn with numpy): outputs mean nothing, shapes and timing are real.

Two implementations with the same weights and the same outputs (within float32 rounding):

* :class:`NumpyTinyBEV` -- numpy only, so a bare ``pip install dvpipe`` runs the sample;
* :class:`TinyBEV` -- a ``torch.nn.Module`` (defined when torch imports).

Deployment hook: ``model: bev_model.py:run`` calls :func:`run` with each batch; it uses torch when
torch imports and numpy otherwise (:func:`run_numpy` / :func:`run_torch` pin one).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

try:  # optional: the numpy model is the fallback, not a degraded mode (same weights, same outputs)
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # pragma: no cover - exercised by the bare-install test
    torch = None

__all__ = ["make_weights", "bev_points", "NumpyTinyBEV", "TinyBEV", "run", "run_numpy", "run_torch", "BACKEND"]

#: which implementation :func:`run` uses: "torch" when torch imports, else "numpy".
BACKEND = "torch" if torch is not None else "numpy"


def make_weights(channels: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded float32 weights shared by both implementations.

    Returns ``{"conv0.w": (16, 3, 3, 3), "conv0.b": (16,), ..., "conv3.w", "conv3.b", "head.w": (1, C),
    "head.b": (1,)}`` (convolution weights as ``(out, in, kh, kw)``, torch's layout).
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for i, (cin, cout) in enumerate([(3, 16), (16, 32), (32, channels), (channels, channels)]):
        scale = np.sqrt(2.0 / (cin * 9))
        out[f"conv{i}.w"] = (rng.standard_normal((cout, cin, 3, 3)) * scale).astype(np.float32)
        out[f"conv{i}.b"] = (rng.standard_normal(cout) * 0.01).astype(np.float32)
    out["head.w"] = (rng.standard_normal((1, channels)) / np.sqrt(channels)).astype(np.float32)
    out["head.b"] = np.zeros(1, dtype=np.float32)
    return out


def bev_points(bev_cells: int = 50, bev_range_m: float = 40.0,
               z_levels_m: Sequence[float] = (-1.5, -0.5, 0.5)) -> np.ndarray:
    """(Z*Y*X, 4) homogeneous pillar points, metres, lidar frame (x right, y forward, z up), float64.

    Cell centres cover [-range, range] in x and y; row = y, column = x.
    """
    centres = (np.arange(bev_cells, dtype=np.float64) + 0.5) / bev_cells * 2 * bev_range_m - bev_range_m
    ys, xs = np.meshgrid(centres, centres, indexing="ij")
    pts = [np.stack([xs, ys, np.full_like(xs, z), np.ones_like(xs)], -1) for z in z_levels_m]
    return np.stack(pts, 0).reshape(-1, 4)


def _project(points: np.ndarray, metas: list[dict], eps: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    """Grid coordinates in [-1, 1] ``(N, P, 2)`` (float64) and visibility ``(N, P)`` of ``points``."""
    lidar2img = np.stack([np.asarray(m["lidar2img"], dtype=np.float64) for m in metas])
    cam = np.einsum("nij,pj->npi", lidar2img, points)  # (N, P, 4): u*d, v*d, d, 1
    depth = cam[..., 2]
    uv = cam[..., :2] / np.maximum(depth, eps)[..., None]
    pad_h, pad_w = metas[0]["img_shape"][:2]  # BEVFormer normalises by camera 0's padded img_shape
    uv_norm = uv / np.array([pad_w, pad_h], dtype=np.float64)
    valid = (depth > eps) & (uv_norm > 0).all(-1) & (uv_norm < 1).all(-1)
    return uv_norm * 2 - 1, valid


def _conv3x3_s2(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """3x3 convolution, stride 2, zero padding 1, on NHWC ``x``; ``w`` is (out, in, 3, 3)."""
    n, h, wd, c = x.shape
    ho, wo = (h - 1) // 2 + 1, (wd - 1) // 2 + 1
    xp = np.zeros((n, h + 2, wd + 2, c), dtype=x.dtype)
    xp[:, 1:-1, 1:-1] = x
    cols = np.concatenate([xp[:, ki:ki + 2 * ho:2, kj:kj + 2 * wo:2, :] for ki in range(3) for kj in range(3)], -1)
    wmat = w.transpose(2, 3, 1, 0).reshape(9 * c, w.shape[0])  # rows in the (ki, kj, channel) order of cols
    out = cols @ wmat
    out += b
    return out


def _grid_sample(feats: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Bilinear sampling of NCHW ``feats`` at ``grid`` (N, P, 2) in [-1, 1], as
    ``torch.nn.functional.grid_sample(mode="bilinear", padding_mode="zeros", align_corners=False)``.
    Returns (N, C, P)."""
    n, c, h, w = feats.shape
    x = ((grid[..., 0] + 1) * w - 1) / 2  # pixel-centre coordinates: pixel i has its centre at x = i
    y = ((grid[..., 1] + 1) * h - 1) / 2
    x0, y0 = np.floor(x), np.floor(y)
    out = np.zeros((n, c, grid.shape[1]), dtype=np.float32)
    flat = feats.reshape(n, c, h * w)
    for dy in (0, 1):
        for dx in (0, 1):
            xi, yi = x0 + dx, y0 + dy
            wgt = (1 - np.abs(x - xi)) * (1 - np.abs(y - yi))
            inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
            idx = (np.clip(yi, 0, h - 1) * w + np.clip(xi, 0, w - 1)).astype(np.int64)
            vals = np.take_along_axis(flat, idx[:, None, :].repeat(c, 1), axis=2)
            out += vals * (wgt * inside).astype(np.float32)[:, None, :]
    return out


class NumpyTinyBEV:
    """The sample model in numpy (no torch needed).

    Args:
        bev_cells: BEV grid size (cells along x and y).
        bev_range_m: the grid covers [-range, range] metres in x (right) and y (forward).
        z_levels_m: heights of the sampled pillar points, metres (lidar frame, z up).
        channels: feature channels.
        weights: from :func:`make_weights` (default: seed 0).
        backbone: False samples raw pixels (no convolutions, no head): used by the tests.
    """

    def __init__(self, bev_cells: int = 50, bev_range_m: float = 40.0, z_levels_m=(-1.5, -0.5, 0.5),
                 channels: int = 32, weights: Optional[dict] = None, backbone: bool = True):
        self.weights = weights if weights is not None else make_weights(channels)
        self.points = bev_points(bev_cells, bev_range_m, z_levels_m)
        self.grid_shape = (len(z_levels_m), bev_cells, bev_cells)
        self.use_backbone = backbone

    def features(self, images: np.ndarray) -> np.ndarray:
        """(N, 3, H, W) images -> (N, C, H/16, W/16) features (float32)."""
        x = np.ascontiguousarray(np.asarray(images, dtype=np.float32).transpose(0, 2, 3, 1))
        for i in range(4):
            x = _conv3x3_s2(x, self.weights[f"conv{i}.w"], self.weights[f"conv{i}.b"])
            if i < 3:
                np.maximum(x, 0, out=x)
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))

    def view_transform(self, feats: np.ndarray, metas: list[dict]) -> np.ndarray:
        """``feats``: (N, C, h, w) features of the N cameras. Returns (C, Y, X) BEV features."""
        c = feats.shape[1]
        grid, valid = _project(self.points, metas)
        sampled = _grid_sample(np.asarray(feats, dtype=np.float32), grid.astype(np.float32))
        mask = valid.astype(np.float32)[:, None, :]
        bev = (sampled * mask).sum(0) / np.maximum(mask.sum(0), 1.0)  # (C, P)
        z, y, x = self.grid_shape
        return bev.reshape(c, z, y, x).mean(1)

    def __call__(self, images: np.ndarray, metas: list[dict]) -> np.ndarray:
        if not self.use_backbone:
            return self.view_transform(np.asarray(images, dtype=np.float32), metas)
        bev = self.view_transform(self.features(images), metas)  # (C, Y, X)
        w, b = self.weights["head.w"], self.weights["head.b"]
        return (np.tensordot(w, bev, axes=(1, 0)) + b[:, None, None]).astype(np.float32)  # (1, Y, X)


if torch is not None:
    class TinyBEV(nn.Module):
        """The sample model as a ``torch.nn.Module`` (same weights and outputs as :class:`NumpyTinyBEV`).

        Args:
            bev_cells, bev_range_m, z_levels_m, channels: as :class:`NumpyTinyBEV`.
            weights: from :func:`make_weights` (default: seed 0).
            backbone: override the image backbone (``nn.Identity()`` samples raw pixels: used by the tests).
        """

        def __init__(self, bev_cells: int = 50, bev_range_m: float = 40.0, z_levels_m=(-1.5, -0.5, 0.5),
                     channels: int = 32, backbone: Optional[nn.Module] = None, weights: Optional[dict] = None):
            super().__init__()
            wts = weights if weights is not None else make_weights(channels)
            if backbone is None:
                convs = [nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.Conv2d(16, 32, 3, stride=2, padding=1),
                         nn.Conv2d(32, channels, 3, stride=2, padding=1),
                         nn.Conv2d(channels, channels, 3, stride=2, padding=1)]
                with torch.no_grad():
                    for i, conv in enumerate(convs):
                        conv.weight.copy_(torch.from_numpy(wts[f"conv{i}.w"]))
                        conv.bias.copy_(torch.from_numpy(wts[f"conv{i}.b"]))
                backbone = nn.Sequential(convs[0], nn.ReLU(inplace=True), convs[1], nn.ReLU(inplace=True),
                                         convs[2], nn.ReLU(inplace=True), convs[3])
                self.head = nn.Conv2d(channels, 1, 1)
                with torch.no_grad():
                    self.head.weight.copy_(torch.from_numpy(wts["head.w"]).reshape(1, channels, 1, 1))
                    self.head.bias.copy_(torch.from_numpy(wts["head.b"]))
            else:
                self.head = nn.Identity()
            self.backbone = backbone
            self.register_buffer("points", torch.from_numpy(bev_points(bev_cells, bev_range_m, z_levels_m)),
                                 persistent=False)  # (Z*Y*X, 4)
            self.grid_shape = (len(z_levels_m), bev_cells, bev_cells)

        def view_transform(self, feats: "torch.Tensor", metas: list[dict]) -> "torch.Tensor":
            """``feats``: (N, C, h, w) features of the N cameras. Returns (C, Y, X) BEV features."""
            c = feats.shape[1]
            lidar2img = torch.as_tensor(np.stack([m["lidar2img"] for m in metas]), dtype=torch.float64)
            # geometry in float64 on the host (accelerators such as the NPU lack float64); features stay put
            cam = torch.einsum("nij,pj->npi", lidar2img, self.points.cpu())  # (N, P, 4): u*d, v*d, d, 1
            depth = cam[..., 2]
            eps = 1e-5
            uv = cam[..., :2] / depth.clamp(min=eps)[..., None]
            pad_h, pad_w = metas[0]["img_shape"][:2]  # BEVFormer normalises by camera 0's padded img_shape
            uv_norm = uv / torch.tensor([pad_w, pad_h], dtype=torch.float64)
            valid = (depth > eps) & (uv_norm > 0).all(-1) & (uv_norm < 1).all(-1)
            grid = (uv_norm * 2 - 1).to(device=feats.device, dtype=feats.dtype)[:, :, None, :]  # (N, P, 1, 2)
            sampled = F.grid_sample(feats, grid, mode="bilinear", padding_mode="zeros", align_corners=False)[..., 0]
            mask = valid.to(device=feats.device, dtype=feats.dtype)[:, None, :]
            bev = (sampled * mask).sum(0) / mask.sum(0).clamp(min=1.0)  # (C, P)
            z, y, x = self.grid_shape
            return bev.reshape(c, z, y, x).mean(1)

        def forward(self, images: "torch.Tensor", metas: list[dict]) -> "torch.Tensor":
            feats = self.backbone(images)
            return self.head(self.view_transform(feats, metas)[None])[0]
else:
    TinyBEV = None  # type: ignore[assignment,misc]


_MODELS: dict[str, object] = {}


def run_numpy(batch) -> np.ndarray:
    """Deployment hook, numpy: BEV logits (1, Y, X) float32 for one batch (``batch.images`` numpy or torch)."""
    model = _MODELS.get("numpy")
    if model is None:
        model = _MODELS["numpy"] = NumpyTinyBEV()
    images = batch.images
    if not isinstance(images, np.ndarray):  # a torch tensor from a device backend
        images = images.detach().float().cpu().numpy()
    return model(images, batch.metas)


def run_torch(batch):
    """Deployment hook, torch: BEV logits (1, Y, X) as a tensor (needs torch)."""
    if torch is None:
        raise ImportError("run_torch needs torch (pip install 'dvpipe[torch]'); run_numpy needs nothing more")
    model = _MODELS.get("torch")
    if model is None:
        model = _MODELS["torch"] = TinyBEV().eval()
    images = batch.images if isinstance(batch.images, torch.Tensor) else torch.from_numpy(np.asarray(batch.images))
    with torch.inference_mode():
        return model(images.float(), batch.metas)


def run(batch):
    """Deployment hook: :func:`run_torch` when torch imports, else :func:`run_numpy` (see :data:`BACKEND`)."""
    return run_torch(batch) if torch is not None else run_numpy(batch)
