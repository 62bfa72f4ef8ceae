"""Separable resampling with OpenCV's exact weights, applied as gathers.

Each image axis gets an operator matrix ``M`` (``n_out x n_in``, float64) built from the run's
crops and its (single) resize: a crop selects rows of ``M``, a resize left-multiplies it by the
weight matrix of :mod:`dvpipe.backends.numpy_ref` (OpenCV ``INTER_LINEAR`` / ``INTER_AREA`` /
``INTER_NEAREST``, computed in float64). ``M`` is turned into *taps*: ``K`` (index, weight)
vectors with ``out[i] = sum_k w[k, i] * in[idx[k, i]]``.

Why not ``torch.nn.functional.interpolate``: it computes source positions in float32, which for
scales that are not powers of two moves the weights by ~1e-4 (up to 0.008 grey levels, 0.0077 on a
1600 -> 704 resize), above the reference tolerance; the taps here carry float64-exact positions and
differ from the reference only by float32 rounding of the products. Crops cost nothing: they shift
the indices. (``interpolate`` is still used for the ``antialias`` option, which the reference does
not define.)

Applying the taps on an ``H x W x C`` image viewed as ``H x (W*C)``: the row pass gathers whole
rows (``index_select`` on dim 0, or a strided view when the indices step evenly); the column pass
gathers along dim 1 with indices ``C * col + channel`` laid out channel-major, which also performs
the HWC -> CHW transpose and any channel reordering (BGR -> RGB) for free.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, cast

import numpy as np
import torch

from ...errors import ConfigError
from ..numpy_ref import _AXIS_WEIGHTS, resize_weights


def resize_matrix(n_in: int, n_out: int, interpolation: str) -> np.ndarray:
    """``(n_out, n_in)`` float64 weights of an OpenCV ``linear`` or ``nearest`` resize along one axis
    (identity if sizes match). ``area`` has no per-axis rule: :func:`resize_matrices`."""
    if interpolation not in _AXIS_WEIGHTS:
        raise ConfigError(f"{interpolation!r} weights depend on both axes: use resize_matrices")
    if n_in == n_out:
        return np.eye(n_in)
    return _AXIS_WEIGHTS[interpolation](n_in, n_out)


def resize_matrices(in_hw: tuple[int, int], out_hw: tuple[int, int],
                    interpolation: str) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)``: the float64 weights of an OpenCV 2-D resize ``(h, w) -> (out_h, out_w)``, per axis.

    OpenCV's ``INTER_AREA`` picks one rule for both axes (area averaging only when neither grows), so
    the axes are computed together (:func:`dvpipe.backends.numpy_ref.resize_weights`)."""
    return resize_weights(in_hw, out_hw, interpolation)


@dataclass
class Taps:
    """One axis' operator as gathers.

    ``idx``/``w``: ``(K, n_out)`` int64 / float32 tensors on the device. ``steps[k]`` is
    ``(start, step)`` when ``idx[k]`` is ``start + step * arange(n_out)`` (a strided view does it),
    else None. ``uniform[k]`` is the weight when all of ``w[k]`` are equal, else None.
    ``selection``: one tap of weight 1 everywhere (a crop or identity: no arithmetic needed).
    """

    n_out: int
    idx: torch.Tensor
    w: torch.Tensor
    steps: list[Optional[tuple[int, int]]]
    uniform: list[Optional[float]]
    selection: bool
    idx_np: np.ndarray
    w_np: np.ndarray

    @property
    def common(self) -> Optional[float]:
        """The weight every tap shares (0.5 for an exact 2x linear shrink), else None.

        The passes can then sum the taps and leave the multiplication to the caller, who folds it
        into the normalisation.
        """
        u = self.uniform
        if self.selection or u[0] is None or any(v != u[0] for v in u):
            return None
        return u[0]


def make_taps(m: np.ndarray, device: torch.device) -> Taps:
    """Taps of an ``(n_out, n_in)`` operator matrix (rows with fewer taps padded with weight 0)."""
    n_out = m.shape[0]
    nz = [np.flatnonzero(row) for row in m]
    k = max(1, max(len(z) for z in nz))
    idx = np.zeros((k, n_out), dtype=np.int64)
    w = np.zeros((k, n_out), dtype=np.float64)
    for i, z in enumerate(nz):
        idx[: len(z), i] = z
        idx[len(z):, i] = z[0] if len(z) else 0
        w[: len(z), i] = m[i, z]
    steps: list[Optional[tuple[int, int]]] = []
    uniform: list[Optional[float]] = []
    for j in range(k):
        d = np.diff(idx[j])
        steps.append((int(idx[j, 0]), int(d[0]) if len(d) else 1) if (len(d) == 0 or (np.all(d == d[0]) and d[0] > 0))
                     else None)
        uniform.append(float(w[j, 0]) if np.all(w[j] == w[j, 0]) else None)
    selection = k == 1 and bool(np.all(w[0] == 1.0))
    return Taps(n_out, torch.from_numpy(idx).to(device), torch.from_numpy(w.astype(np.float32)).to(device),
                steps, uniform, selection, idx, w)


def channel_major_index(taps: Taps, k: int, channels: int, order: Sequence[int], device) -> torch.Tensor:
    """Indices into a ``(rows, W*C)`` view giving ``(rows, C*n_out)`` laid out channel-major.

    Output column ``c * n_out + x`` reads input column ``C * idx[k, x] + order[c]``.
    """
    cols = taps.idx_np[k]
    flat = np.concatenate([channels * cols + src for src in order])
    return torch.from_numpy(flat).to(device)


class Scratch:
    """Named reusable tensors on one device (allocated on first use, reused for later frames)."""

    def __init__(self, device: torch.device):
        self.device = device
        self._bufs: dict[str, torch.Tensor] = {}

    def get(self, key: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        buf = self._bufs.get(key)
        if buf is None or tuple(buf.shape) != tuple(shape) or buf.dtype != dtype:
            buf = self._bufs[key] = torch.empty(shape, dtype=dtype, device=self.device)
        return buf


def as_float(t: torch.Tensor, scratch: "Scratch", key: str) -> torch.Tensor:
    """``t`` as float32: itself, or cast into a reused buffer (mixed-dtype arithmetic would allocate
    a cast copy per call on the CPU)."""
    if t.dtype == torch.float32:
        return t
    buf = scratch.get(key, tuple(t.shape), torch.float32)
    buf.copy_(t)
    return buf


def row_pass(x2: torch.Tensor, taps: Taps, scratch: Scratch, key: str, fold: bool = False) -> torch.Tensor:
    """Apply ``taps`` along dim 0 of a 2-D tensor. A selection keeps the dtype (a view when it
    can); otherwise the result is float32, in a reused buffer. ``fold``: with a common weight
    (:attr:`Taps.common`) return the plain sum of the taps."""
    n = taps.n_out

    def tap(j: int) -> torch.Tensor:
        st = taps.steps[j]
        if st is not None:
            start, step = st
            return x2[start: start + step * (n - 1) + 1: step]
        return torch.index_select(x2, 0, taps.idx[j], out=scratch.get(f"{key}.tap", (n, x2.shape[1]), x2.dtype))

    if taps.selection:
        return tap(0)
    acc = scratch.get(f"{key}.acc", (n, x2.shape[1]), torch.float32)
    summing = fold and taps.common is not None
    for j in range(len(taps.steps)):
        if j == 0 and summing:
            acc.copy_(tap(0))  # the cast to float32 is the copy
            continue
        t = as_float(tap(j), scratch, f"{key}.f32")
        u = 1.0 if summing else taps.uniform[j]
        if j == 0:
            torch.mul(t, u if u is not None else taps.w[j].view(n, 1), out=acc)
        elif u is not None:
            acc.add_(t, alpha=u)
        else:
            acc.addcmul_(t, taps.w[j].view(n, 1))
    return acc


def column_weights(taps: Taps, channels: int, device) -> list:
    """Per tap: the uniform weight (a float) or the weights tiled channel-major, ``(1, C*n_out)``."""
    out: list = []
    for j, u in enumerate(taps.uniform):
        if u is not None:
            out.append(u)
        else:
            out.append(torch.from_numpy(np.tile(taps.w_np[j].astype(np.float32), channels)).to(device).view(1, -1))
    return out


def column_pass(r: torch.Tensor, taps: Taps, col_index: list[torch.Tensor], col_w: list, scratch: Scratch,
                key: str) -> torch.Tensor:
    """Apply ``taps`` along the columns of ``r`` (``rows x (W*C)``), giving ``rows x (C*n_out)``
    channel-major (see :func:`channel_major_index`); float32 unless the taps are a selection."""
    rows = r.shape[0]
    width = int(col_index[0].shape[0])
    if taps.selection:
        return torch.index_select(r, 1, col_index[0], out=scratch.get(f"{key}.sel", (rows, width), r.dtype))
    acc = scratch.get(f"{key}.acc", (rows, width), torch.float32)
    tmp = scratch.get(f"{key}.tap", (rows, width), r.dtype)
    for j, w in enumerate(col_w):
        t = as_float(torch.index_select(r, 1, col_index[j], out=tmp), scratch, f"{key}.f32")
        if j == 0:
            torch.mul(t, w, out=acc)
        elif isinstance(w, float):
            acc.add_(t, alpha=w)
        else:
            acc.addcmul_(t, w)
    return acc


def column_pass_hwc(r: torch.Tensor, taps: Taps, channels: int, scratch: Scratch, key: str,
                    fold: bool = False) -> torch.Tensor:
    """Column pass for taps whose indices all step evenly: strided views, no gather.

    ``r`` is ``rows x (W*C)``; the result is ``rows x n_out x C`` (HWC, channel order unchanged),
    float32 in a reused buffer.
    """
    rows = r.shape[0]
    n = taps.n_out
    r3 = r.view(rows, -1, channels)
    acc = scratch.get(f"{key}.acc", (rows, n, channels), torch.float32)
    summing = fold and taps.common is not None
    for j, (start, step) in enumerate(cast("list[tuple[int, int]]", taps.steps)):  # all even (see above)
        view = r3[:, start: start + step * (n - 1) + 1: step]
        if j == 0 and summing:
            acc.copy_(view)
            continue
        t = as_float(view, scratch, f"{key}.f32")
        u = 1.0 if summing else taps.uniform[j]
        w = u if u is not None else taps.w[j].view(1, n, 1)
        if j == 0:
            torch.mul(t, w, out=acc)
        elif u is not None:
            acc.add_(t, alpha=u)
        else:
            acc.addcmul_(t, cast(torch.Tensor, w))  # u is None: w is the weight tensor
    return acc
