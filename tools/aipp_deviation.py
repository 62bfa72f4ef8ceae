#!/usr/bin/env python3
"""Measure the AIPP route's deviation from the reference pipeline, per profile and colour standard.

Usage::

    python tools/aipp_deviation.py [--data ../shared/data/nuscenes-sample] [--json out.json]

What is compared (the AIPP step alone): each photo is decoded (OpenCV, BGR) and resized once with
the profile's own filter (OpenCV ``INTER_LINEAR`` for ``linear``, Pillow's default bicubic for
``pil_bicubic``). The **reference** takes that BGR picture through the profile's crop,
``(x - mean) / std`` in float32 (mmcv ``imnormalize``) and zero padding. The **AIPP route** encodes the
same picture to NV12 with the source standard's textbook encoder (float64, rounded, 2x2-mean
chroma: what a JPEG decoder's or a video encoder's 4:2:0 holds) and runs the numeric AIPP
(:func:`dvpipe.backends.dvpp.aipp.apply_aipp`) with the config :func:`aipp_for_stages` derives. The
resize itself (DVPP VPC vs OpenCV / Pillow) is not part of this measurement.

The deviation |AIPP - reference| (normalised units, content pixels only) is split into:

* ``yuv8``: the 8-bit Y'CbCr round trip at 4:4:4 (textbook float decode of an unsubsampled encode);
* ``420``: what 4:2:0 chroma adds (float decode of the NV12 picture vs the 4:4:4 one);
* ``csc``: AIPP's fixed-point ``>> 8`` CSC vs the float decode of the same NV12 (float32 output);
* ``fp16``: AIPP's fp16 output vs its float32 output.

Photos: ``samples/frames/*/*.jpg`` (always) and ``--data`` (nuScenes frames, read in place, never
copied). Only profiles whose stages AIPP can express are measured; the others are listed with the
reason. Nothing here runs on a device.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dvpipe.backends.dvpp.aipp import aipp_for_stages, apply_aipp  # noqa: E402
from dvpipe.errors import ConfigError  # noqa: E402
from dvpipe.profiles import PROFILES, profile_stages  # noqa: E402
from dvpipe.types import Camera  # noqa: E402

#: source -> colour standard measured: JPEG photos are full range; video is BT.601 / BT.709 narrow
STANDARDS = ("jpeg_full", "bt601_narrow", "bt709_narrow")
_K = {"jpeg_full": (0.299, 0.114, True), "bt601_narrow": (0.299, 0.114, False),
      "bt709_narrow": (0.2126, 0.0722, False)}


def encode(bgr: np.ndarray, standard: str, subsample: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Textbook float64 encode, rounded to uint8: (Y, U, V), U/V at half size if ``subsample``."""
    kr, kb, full = _K[standard]
    b, g, r = (bgr[..., i].astype(np.float64) for i in range(3))
    y = kr * r + (1 - kr - kb) * g + kb * b
    cb, cr = (b - y) / (2 * (1 - kb)), (r - y) / (2 * (1 - kr))
    Y, U, V = (y, cb + 128, cr + 128) if full else (16 + y * 219 / 255, 128 + cb * 224 / 255, 128 + cr * 224 / 255)
    if subsample:
        h, w = Y.shape
        U = U.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
        V = V.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
    q = lambda a: np.clip(np.floor(a + 0.5), 0, 255).astype(np.uint8)  # noqa: E731
    return q(Y), q(U), q(V)


def decode_float(Y, U, V, standard: str) -> np.ndarray:
    """Textbook float64 decode (chroma replicated if subsampled), clipped: HxWx3 **BGR** float64."""
    kr, kb, full = _K[standard]
    if U.shape != Y.shape:
        U = np.repeat(np.repeat(U, 2, 0), 2, 1)
        V = np.repeat(np.repeat(V, 2, 0), 2, 1)
    y, cb, cr = Y.astype(np.float64), U - 128.0, V - 128.0
    if not full:
        y, cb, cr = (y - 16) * 255 / 219, cb * 255 / 224, cr * 255 / 224
    r, b = y + 2 * (1 - kr) * cr, y + 2 * (1 - kb) * cb
    g = (y - kr * r - kb * b) / (1 - kr - kb)
    return np.clip(np.stack([b, g, r], axis=-1), 0, 255)


def normalise(bgr: np.ndarray, p) -> np.ndarray:
    img = bgr[..., ::-1] if p.to_rgb else bgr
    return ((img.astype(np.float32) - np.float32(p.mean)) / np.float32(p.std)).transpose(2, 0, 1)


def resize(bgr: np.ndarray, size_wh: tuple[int, int], interpolation: str) -> np.ndarray:
    if (bgr.shape[1], bgr.shape[0]) == tuple(size_wh):
        return bgr
    if interpolation == "pil_bicubic":
        return np.asarray(Image.fromarray(bgr[..., ::-1]).resize(size_wh))[..., ::-1].copy()
    return cv2.resize(bgr, size_wh, interpolation=cv2.INTER_LINEAR)


def photos(data: Path | None, samples: bool = True) -> list[Path]:
    found = sorted((ROOT / "samples" / "frames").glob("*/*.jpg")) if samples else []
    if data is not None and data.is_dir():
        found += sorted(data.glob("*.jpg"))
    return found


class Acc:
    """Collects |differences| to report mean / p99 / max."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.signed: list[float] = []

    def add(self, diff: np.ndarray) -> None:
        self.parts.append(np.abs(diff).astype(np.float32).ravel())
        self.signed.append(float(diff.mean()))

    def stats(self) -> dict:
        a = np.concatenate(self.parts)
        return {"mean": float(a.mean()), "p99": float(np.percentile(a, 99)), "max": float(a.max()),
                "bias": float(np.mean(self.signed))}


def measure(files: list[Path]) -> tuple[list[dict], list[tuple[str, str]]]:
    rows, refused = [], []
    images = [cv2.imread(str(f), cv2.IMREAD_COLOR) for f in files]
    for name, p in PROFILES.items():
        h0, w0 = images[0].shape[:2]
        cam = Camera("camera", width=w0, height=h0)
        try:
            route = aipp_for_stages(profile_stages(name, "fast", cam), (h0, w0), colour_standard="jpeg_full")
        except ConfigError as e:
            refused.append((name, str(e)))
            continue
        c0 = route.config
        dh, dw = route.dvpp_size
        x0, y0 = (c0.load_start_pos_w, c0.load_start_pos_h) if c0.crop else (0, 0)
        cw, ch = (c0.crop_size_w, c0.crop_size_h) if c0.crop else (dw, dh)
        for standard in STANDARDS:
            cfg = aipp_for_stages(profile_stages(name, "fast", cam), (h0, w0), colour_standard=standard).config
            acc = {k: Acc() for k in ("total", "yuv8", "420", "csc", "fp16")}
            for img in images:
                if img.shape[:2] != (h0, w0):
                    continue
                small = resize(img, (dw, dh), p.interpolation)
                ref = normalise(small[y0:y0 + ch, x0:x0 + cw], p)
                Y, U, V = encode(small, standard, subsample=True)
                Y4, U4, V4 = encode(small, standard, subsample=False)
                nv12 = np.zeros((cfg.src_image_size_h * 3 // 2, cfg.src_image_size_w), np.uint8)
                nv12[:dh, :dw] = Y
                uv = nv12[cfg.src_image_size_h:cfg.src_image_size_h + dh // 2, :dw].reshape(dh // 2, dw // 2, 2)
                uv[..., 0], uv[..., 1] = U, V
                a16 = apply_aipp(cfg, nv12[None])[0, :, :ch, :cw].astype(np.float32)
                a32 = apply_aipp(cfg, nv12[None], dtype=np.float32)[0, :, :ch, :cw]
                f420 = normalise(decode_float(Y, U, V, standard)[y0:y0 + ch, x0:x0 + cw], p)
                f444 = normalise(decode_float(Y4, U4, V4, standard)[y0:y0 + ch, x0:x0 + cw], p)
                acc["total"].add(a16 - ref)
                acc["yuv8"].add(f444 - ref)
                acc["420"].add(f420 - f444)
                acc["csc"].add(a32 - f420)
                acc["fp16"].add(a16 - a32)
            rows.append({"profile": name, "standard": standard, "images": len(acc["total"].parts),
                         "out": f"{cfg.output_hw[1]}x{cfg.output_hw[0]}", "std": list(p.std),
                         **{k: v.stats() for k, v in acc.items()}})
    return rows, refused


def table(rows: list[dict]) -> str:
    head = ("| profile | source standard | images | total mean / p99 / max | 8-bit YUV 4:4:4 p99 / max "
            "| 4:2:0 chroma p99 / max | fixed-point CSC p99 / max | fp16 p99 / max |")
    lines = [head, "|" + "---|" * 8]
    f = lambda s: f"{s['p99']:.4f} / {s['max']:.4f}"  # noqa: E731
    for r in rows:
        t = r["total"]
        lines.append(f"| {r['profile']} | {r['standard']} | {r['images']} | {t['mean']:.4f} / {t['p99']:.4f} / "
                     f"{t['max']:.4f} | {f(r['yuv8'])} | {f(r['420'])} | {f(r['csc'])} | {f(r['fp16'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "nuscenes-sample",
                    help="a folder of extra 1600x900 JPEG photos (default ../shared/data/nuscenes-sample if present)")
    ap.add_argument("--no-samples", action="store_true", help="only the --data photos")
    ap.add_argument("--json", type=Path, help="also write the numbers as JSON")
    args = ap.parse_args(argv)
    files = photos(args.data, samples=not args.no_samples)
    if not files:
        print("aipp_deviation: no photos found (samples/frames, --data)", file=sys.stderr)
        return 2
    rows, refused = measure(files)
    print(f"{len(files)} photos ({sum(1 for f in files if 'samples' in f.parts)} from samples/frames)\n")
    print(table(rows))
    for name, why in refused:
        print(f"\nnot measured: {name}: {why}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "refused": refused}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
