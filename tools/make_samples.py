#!/usr/bin/env python3
"""Render dvpipe's bundled synthetic 6-camera sample scene (``samples/``).

Usage::

    python tools/make_samples.py [--out samples] [--nuscenes-config configs/rigs/nuscenes.yaml]

What it writes (under ``--out``, default ``samples``):

* ``frames/<CAMERA>/<capture_time_ns>.jpg`` -- 4 frame sets x 6 cameras, 1600x900, baseline JPEG,
  quality 90, 4:2:0 chroma subsampling (``cv2.imwrite``).
* ``rig.yaml``  -- the camera rig in dvpipe's rig schema (``name``, ``cameras[]`` with ``name``,
  ``width``, ``height``, ``encoding``, ``intrinsics`` 3x3, ``lidar2cam`` 4x4; extra keys
  ``description``, ``coordinate_frames``, ``pixel_convention``,
  ``lidar2img``, ``cam2lidar``, ``capture_offset_ms``).
* ``scene.yaml`` -- ground truth per frame set: capture time and file of every camera, the 3D
  position of every marker and box (lidar frame) and their exact projections ``uv`` per camera.

With ``--nuscenes-config PATH`` it also writes the same calibration as a stand-alone rig config
(used for ``configs/rigs/nuscenes.yaml``).

Conventions (the same as dvpipe's geometry module; stated again in ``samples/README.md``):

* lidar frame: x right, y forward, z up; the ground is the plane z = 0.
* camera frame: x right, y down, z forward.  ``p_cam = lidar2cam @ [x, y, z, 1]``,
  ``u = fx * x_c / z_c + cx``, ``v = fy * y_c / z_c + cy`` (``lidar2img = K4 @ lidar2cam``).
* pixels: continuous image coordinates with the origin at the top-left *corner* of the image;
  pixel (col i, row j) covers [i, i+1) x [j, j+1), its centre is (i + 0.5, j + 0.5).  A point
  projecting to (u, v) lies in pixel (floor(u), floor(v)).  The renderer casts rays through
  sub-pixel positions (i + 0.25 | 0.75, j + 0.25 | 0.75), i.e. symmetric about the pixel centre.

Scene: textured road/ground plane with lane and crosswalk markings, a sky gradient, distance haze,
a few oriented 3D boxes (vehicles, a pedestrian, a barrier, buildings; some move between frame
sets) rendered by exact ray casting, and *markers*: white discs (radius 6 px) inside a black
ring (radius 10 px), drawn in image space, anti-aliased, centred exactly on the projection of the
marker's 3D point.  A marker is recorded (and drawn) in a camera only if it is in front of the
camera, its ring lies fully inside the image and no box or the ground occludes its 3D point.
Objects are static within a frame set: every camera of a set is rendered with the positions
recorded for that set's ``timestamp_ns`` (the per-camera capture times only name the files).

Deterministic (fixed seeds, no wall-clock input); needs only numpy, opencv and pyyaml and
deliberately does not import dvpipe, so the samples are an independent reference.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import yaml

WIDTH, HEIGHT = 1600, 900
SUPERSAMPLE = (0.25, 0.75)  # sub-pixel ray offsets per axis (2x2 per pixel)
JPEG_QUALITY = 90
N_FRAMESETS = 4
FRAME_PERIOD_NS = 500_000_000
BASE_TIME_NS = 1_700_000_000_000_000_000
SEED = 20240611

MARKER_DISC_RADIUS = 6.0
MARKER_RING_RADIUS = 10.0
MARKER_MARGIN_PX = 12.0  # ring + margin must be inside the image
MARKER_DISC_BGR = (255.0, 255.0, 255.0)
MARKER_RING_BGR = (0.0, 0.0, 0.0)

# BEVFormer / nuScenes camera order (nuscenes_converter.py camera_types).
CAMERA_ORDER = [
    "CAM_FRONT",
    "CAM_FRONT_RIGHT",
    "CAM_FRONT_LEFT",
    "CAM_BACK",
    "CAM_BACK_LEFT",
    "CAM_BACK_RIGHT",
]

# Per camera: yaw (deg, counter-clockwise seen from above, 0 = looking along +y), small pitch
# (deg, positive = looking down) and roll (deg), optical centre in the lidar frame (m),
# intrinsics, capture-time offset after the frame-set timestamp (ms; nuScenes-like sweep order).
CAMERA_SPECS = {
    "CAM_FRONT": dict(yaw=0.0, pitch=0.6, roll=0.2, pos=(0.00, 0.76, 1.51),
                      fx=1266.42, fy=1266.42, cx=801.27, cy=451.73, offset_ms=8.1),
    "CAM_FRONT_RIGHT": dict(yaw=-55.0, pitch=0.9, roll=-0.3, pos=(0.49, 0.61, 1.50),
                            fx=1260.85, fy=1260.85, cx=797.97, cy=447.33, offset_ms=15.9),
    "CAM_FRONT_LEFT": dict(yaw=55.0, pitch=0.4, roll=0.5, pos=(-0.49, 0.58, 1.51),
                           fx=1272.60, fy=1272.60, cx=804.62, cy=452.95, offset_ms=0.4),
    "CAM_BACK": dict(yaw=180.0, pitch=0.5, roll=0.0, pos=(0.00, -0.91, 1.58),
                     fx=1258.31, fy=1258.31, cx=799.22, cy=448.78, offset_ms=32.8),
    "CAM_BACK_LEFT": dict(yaw=110.0, pitch=1.1, roll=0.4, pos=(-0.48, 0.10, 1.59),
                          fx=1256.74, fy=1256.74, cx=792.11, cy=455.28, offset_ms=39.6),
    "CAM_BACK_RIGHT": dict(yaw=-110.0, pitch=0.7, roll=-0.6, pos=(0.48, 0.07, 1.56),
                           fx=1259.51, fy=1259.51, cx=807.25, cy=446.20, offset_ms=24.3),
}

# Oriented boxes: centre (x, y, z) at frame set 0, size (dx, dy, dz) along the box axes,
# yaw (rad, about +z), velocity (m/s), colour (BGR), kind.
BOXES = [
    dict(name="car_front", center=(0.0, 16.0, 0.8), size=(1.9, 4.6, 1.6), yaw=0.0,
         velocity=(0.0, 2.0, 0.0), bgr=(40, 40, 190), kind="vehicle"),
    dict(name="truck_oncoming", center=(-3.5, 27.0, 1.6), size=(2.5, 8.0, 3.2), yaw=0.0,
         velocity=(0.0, -4.0, 0.0), bgr=(170, 90, 40), kind="vehicle"),
    dict(name="car_parked_right", center=(6.3, 9.0, 0.75), size=(1.8, 4.4, 1.5), yaw=0.05,
         velocity=(0.0, 0.0, 0.0), bgr=(70, 150, 70), kind="vehicle"),
    dict(name="car_behind", center=(0.2, -13.0, 0.8), size=(1.9, 4.5, 1.6), yaw=0.0,
         velocity=(0.0, 1.5, 0.0), bgr=(40, 190, 210), kind="vehicle"),
    dict(name="van_behind_left", center=(-3.8, -22.0, 1.0), size=(2.0, 5.0, 2.0), yaw=0.0,
         velocity=(0.0, -3.0, 0.0), bgr=(150, 150, 150), kind="vehicle"),
    dict(name="pedestrian", center=(8.5, -4.0, 0.9), size=(0.6, 0.6, 1.8), yaw=0.3,
         velocity=(0.0, 0.6, 0.0), bgr=(30, 120, 230), kind="other"),
    dict(name="barrier_left", center=(-9.5, 3.0, 0.5), size=(0.4, 6.0, 1.0), yaw=0.0,
         velocity=(0.0, 0.0, 0.0), bgr=(175, 180, 185), kind="other"),
    dict(name="building_front_left", center=(-30.0, 45.0, 6.0), size=(16.0, 22.0, 12.0), yaw=0.1,
         velocity=(0.0, 0.0, 0.0), bgr=(110, 125, 150), kind="building"),
    dict(name="building_back_right", center=(32.0, -30.0, 5.0), size=(14.0, 16.0, 10.0), yaw=-0.2,
         velocity=(0.0, 0.0, 0.0), bgr=(120, 110, 100), kind="building"),
    dict(name="building_back_left", center=(-34.0, -38.0, 8.0), size=(18.0, 14.0, 16.0), yaw=0.3,
         velocity=(0.0, 0.0, 0.0), bgr=(95, 105, 120), kind="building"),
]

# Markers: azimuth (deg, counter-clockwise from +y), horizontal range from the lidar origin (m),
# height above ground (m), velocity (m/s; some markers move so that every camera's images differ
# between frame sets).  "attach" places the marker relative to a box centre
# (it then moves with the box).
MARKERS = [
    dict(name="M00", az=8.0, rng=10.0, h=0.4),
    dict(name="M01", az=-12.0, rng=22.0, h=2.2, velocity=(0.2, 0.0, 0.0)),
    dict(name="M02", az=28.0, rng=14.0, h=1.0),
    dict(name="M03", az=45.0, rng=18.0, h=0.8, velocity=(-0.4, 0.0, 0.0)),
    dict(name="M04", az=70.0, rng=9.0, h=1.6),
    dict(name="M05", az=-30.0, rng=25.0, h=2.6),
    dict(name="M06", az=-60.0, rng=12.0, h=0.5, velocity=(0.0, 0.5, 0.0)),
    dict(name="M07", az=-80.0, rng=20.0, h=2.5),
    dict(name="M08", az=100.0, rng=11.0, h=1.0, velocity=(0.0, 0.0, 0.3)),
    dict(name="M09", az=125.0, rng=24.0, h=0.6),
    dict(name="M10", az=165.0, rng=15.0, h=1.4),
    dict(name="M11", az=190.0, rng=9.0, h=0.3),
    dict(name="M12", az=-135.0, rng=20.0, h=1.8),
    dict(name="M13", az=-100.0, rng=13.0, h=0.9, velocity=(0.0, -0.3, 0.0)),
    dict(name="M14", attach="car_front", offset=(0.0, 0.0, 1.15)),  # 0.35 m above the roof
    dict(name="M15", az=-165.0, rng=28.0, h=2.0),
]

PIXEL_CONVENTION = (
    "continuous image coordinates, origin at the top-left corner of the image; pixel (col i, row j) "
    "covers [i, i+1) x [j, j+1) and its centre is (i + 0.5, j + 0.5); a point projecting to (u, v) "
    "lies in pixel (floor(u), floor(v))"
)

SKY_ZENITH = np.array([185.0, 120.0, 70.0], np.float32)   # BGR
HAZE = np.array([215.0, 205.0, 195.0], np.float32)        # BGR, horizon / fog colour
LIGHT = np.array([0.35, -0.45, 0.82])
LIGHT = LIGHT / np.linalg.norm(LIGHT)


# --------------------------------------------------------------------------- geometry
def rot_x(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def rot_z(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def camera_model(name: str) -> dict:
    """Intrinsics K, camera->lidar rotation R (columns: camera x, y, z axes), centre C, lidar2cam."""
    sp = CAMERA_SPECS[name]
    # camera axes at yaw 0: x -> +x (right), y -> -z (down), z -> +y (forward)
    base = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])
    # pitch down = rotate the optical axis towards +y_cam (about the camera x axis), roll about z_cam
    r_cam = rot_x(-math.radians(sp["pitch"])) @ rot_z(math.radians(sp["roll"]))
    r_c2l = rot_z(math.radians(sp["yaw"])) @ base @ r_cam
    # re-orthonormalise (exact rotation to machine precision)
    u, _, vt = np.linalg.svd(r_c2l)
    r_c2l = u @ vt
    c = np.array(sp["pos"], dtype=np.float64)
    lidar2cam = np.eye(4)
    lidar2cam[:3, :3] = r_c2l.T
    lidar2cam[:3, 3] = -r_c2l.T @ c
    k = np.array([[sp["fx"], 0.0, sp["cx"]], [0.0, sp["fy"], sp["cy"]], [0.0, 0.0, 1.0]])
    lidar2cam[np.abs(lidar2cam) < 1e-15] = 0.0  # no 1e-19 noise in the YAML
    # Round-trip through Python floats so that what we project with is exactly what YAML stores.
    lidar2cam = np.array([[float(x) for x in row] for row in lidar2cam])
    r_c2l = lidar2cam[:3, :3].T.copy()
    return dict(name=name, K=k, R=r_c2l, C=c, lidar2cam=lidar2cam)


def project(cam: dict, xyz) -> tuple[float, float, float]:
    """(u, v, depth) of a lidar-frame point, exactly as the tests compute it."""
    p = cam["lidar2cam"] @ np.array([xyz[0], xyz[1], xyz[2], 1.0])
    q = cam["K"] @ p[:3]
    return float(q[0] / p[2]), float(q[1] / p[2]), float(p[2])


def rays(cam: dict, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Lidar-frame ray directions (scaled so that the ray parameter equals camera depth)."""
    k = cam["K"]
    xc = (u - k[0, 2]) / k[0, 0]
    yc = (v - k[1, 2]) / k[1, 1]
    r = cam["R"]
    return np.stack([r[i, 0] * xc + r[i, 1] * yc + r[i, 2] for i in range(3)], axis=-1)


def box_at(box: dict, t_s: float) -> dict:
    c = np.array(box["center"], float) + t_s * np.array(box["velocity"], float)
    return dict(box, center=tuple(round(float(x), 6) for x in c))


def box_corners(box: dict) -> np.ndarray:
    dx, dy, dz = (s / 2.0 for s in box["size"])
    local = np.array([[sx * dx, sy * dy, sz * dz]
                      for sz in (-1, 1) for sy in (-1, 1) for sx in (-1, 1)])
    return local @ rot_z(box["yaw"]).T + np.array(box["center"])


def marker_at(m: dict, t_s: float) -> tuple[float, float, float]:
    if "attach" in m:
        box = next(b for b in BOXES if b["name"] == m["attach"])
        c = np.array(box_at(box, t_s)["center"]) + np.array(m["offset"])
    else:
        a = math.radians(m["az"])
        c = np.array([-math.sin(a) * m["rng"], math.cos(a) * m["rng"], m["h"]])
        c = c + t_s * np.array(m.get("velocity", (0.0, 0.0, 0.0)))
    return tuple(round(float(x), 4) for x in c)


# --------------------------------------------------------------------------- shading
class Textures:
    def __init__(self, rng: np.random.Generator):
        big = rng.random((320, 320)).astype(np.float32)
        self.big = cv2.GaussianBlur(big, (0, 0), 1.0)
        self.big = (self.big - self.big.min()) / (self.big.max() - self.big.min())
        self.fine = rng.random((800, 800)).astype(np.float32)

    @staticmethod
    def _sample(grid, x, y, cell, origin):
        # cv2.remap wants 2D maps smaller than 32767 per side: lay the points out in rows of 1024
        n = x.size
        rows = -(-n // 1024)
        mx = np.zeros(rows * 1024, np.float32)
        my = np.zeros(rows * 1024, np.float32)
        mx[:n] = ((x.ravel() - origin) / cell)
        my[:n] = ((y.ravel() - origin) / cell)
        out = cv2.remap(grid, mx.reshape(rows, 1024), my.reshape(rows, 1024), cv2.INTER_LINEAR,
                        borderMode=cv2.BORDER_REFLECT_101)
        return out.ravel()[:n].reshape(x.shape)

    def big_noise(self, x, y):
        return self._sample(self.big, x, y, 2.0, -320.0)

    def fine_noise(self, x, y):
        return self._sample(self.fine, x, y, 0.25, -100.0)


def coverage(dist_out, fp):
    """Box-filter coverage of a region given signed distance outside it and the pixel footprint."""
    return np.clip(0.5 - dist_out / fp, 0.0, 1.0)


def ground_colour(tex: Textures, x, y, fp):
    """BGR colour of the ground plane at lidar (x, y); fp = approximate pixel footprint (m)."""
    ax = np.abs(x)
    fade = np.clip(1.0 - fp / 0.12, 0.0, 1.0)
    nb = tex.big_noise(x, y) - 0.5
    nf = (tex.fine_noise(x, y) - 0.5) * fade
    # asphalt (road |x| < 7), kerb-side pavement (7..11), grass beyond
    asphalt = 88.0 + 22.0 * nb + 16.0 * nf
    pave = 150.0 + 14.0 * nb + 10.0 * nf
    tile = np.minimum(np.abs(((y + 1.0) % 2.0) - 1.0), np.abs(((x + 1.0) % 2.0) - 1.0))
    pave = pave - 35.0 * coverage(tile - 0.03, fp)
    grass_g = 105.0 + 30.0 * nb + 14.0 * nf
    road_w = coverage(ax - 7.0, fp)
    grass_w = 1.0 - coverage(ax - 11.0, fp)
    gray = road_w * asphalt + (1.0 - road_w) * pave
    col = np.stack([gray * 1.03, gray, gray * 0.96], axis=-1)
    grass = np.stack([0.45 * grass_g, grass_g, 0.62 * grass_g], axis=-1)
    col = col * (1.0 - grass_w)[..., None] + grass * grass_w[..., None]

    white = np.zeros_like(x)
    # solid edge lines at |x| = 6.8, dashed lane line at x = +1.75 (3 m on, 6 m off)
    white = np.maximum(white, coverage(np.abs(ax - 6.8) - 0.08, fp))
    p = y % 9.0
    dash = np.where(p < 3.0, -np.minimum(p, 3.0 - p), np.minimum(p - 3.0, 9.0 - p))
    white = np.maximum(white, np.minimum(coverage(np.abs(x - 1.75) - 0.075, fp), coverage(dash, fp)))
    # crosswalk across the road, 20..24 m ahead, 0.5 m stripes
    q = np.abs(((x + 0.25) % 1.0) - 0.5) - 0.25
    cw = np.minimum(coverage(np.abs(y - 22.0) - 2.0, fp), coverage(ax - 6.5, fp))
    white = np.maximum(white, np.minimum(cw, coverage(q, fp)))
    # stop line behind the crosswalk (ego lane only)
    white = np.maximum(white, np.minimum(coverage(np.abs(y - 19.2) - 0.25, fp),
                                         coverage(np.abs(x) - 1.75, fp)))
    # double yellow centre line at x = -1.75 +- 0.12
    yellow = np.maximum(coverage(np.abs(x + 1.63) - 0.05, fp), coverage(np.abs(x + 1.87) - 0.05, fp))
    col = col * (1.0 - white)[..., None] + np.array([225.0, 228.0, 230.0]) * white[..., None]
    col = col * (1.0 - yellow)[..., None] + np.array([40.0, 190.0, 220.0]) * yellow[..., None]
    return col


def sky_colour(dz):
    s = np.clip(dz / 0.45, 0.0, 1.0) ** 0.7
    return HAZE * (1.0 - s)[..., None] + SKY_ZENITH * s[..., None]


def apply_fog(col, dist):
    f = (1.0 - np.exp(-dist / 140.0))[..., None]
    return col * (1.0 - f) + HAZE * f


def render_background(cam: dict, tex: Textures, ox: float, oy: float):
    """Colour (H, W, 3) float32 and depth (H, W) (inf = sky) for sub-pixel offset (ox, oy)."""
    u, v = np.meshgrid(np.arange(WIDTH) + ox, np.arange(HEIGHT) + oy)
    d = rays(cam, u, v)
    norm = np.linalg.norm(d, axis=-1)
    dz = d[..., 2] / norm
    cz = cam["C"][2]
    hit = d[..., 2] < -1e-9
    t = np.where(hit, -cz / np.where(hit, d[..., 2], -1.0), np.inf)
    far = t * norm > 2000.0
    hit &= ~far
    t = np.where(hit, t, np.inf)
    col = sky_colour(np.maximum(dz, 0.0)).astype(np.float32)
    if hit.any():
        tt = t[hit]
        x = cam["C"][0] + tt * d[..., 0][hit]
        y = cam["C"][1] + tt * d[..., 1][hit]
        dist = tt * norm[hit]
        fx = cam["K"][0, 0]
        grazing = np.maximum(-dz[hit], 0.02)
        fp = dist / fx / np.sqrt(grazing)
        gc = ground_colour(tex, x, y, np.maximum(fp, 1e-4))
        col[hit] = apply_fog(gc, dist).astype(np.float32)
    return col, t.astype(np.float64)


def intersect_box(cam: dict, box: dict, d: np.ndarray):
    """Ray/oriented-box intersection; returns (t_near, hit mask, local normal axis & sign, local hit)."""
    rz = rot_z(-box["yaw"])
    o = rz @ (cam["C"] - np.array(box["center"]))
    dl = d @ rz.T
    half = np.array(box["size"]) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / np.where(np.abs(dl) < 1e-12, 1e-12, dl)
        t1 = (-half - o) * inv
        t2 = (half - o) * inv
    tmin = np.minimum(t1, t2)
    tmax = np.maximum(t1, t2)
    tnear = tmin.max(axis=-1)
    tfar = tmax.min(axis=-1)
    axis = tmin.argmax(axis=-1)
    hit = (tnear <= tfar) & (tnear > 1e-6)
    sign = -np.sign(np.take_along_axis(dl, axis[..., None], -1)[..., 0])
    p_local = o + tnear[..., None] * dl
    return tnear, hit, axis, sign, p_local


def shade_box(box: dict, axis, sign, p_local, dist):
    n_local = np.zeros(axis.shape + (3,))
    np.put_along_axis(n_local, axis[..., None], sign[..., None], -1)
    n = n_local @ rot_z(box["yaw"]).T
    lam = 0.38 + 0.62 * np.clip(n @ LIGHT, 0.0, 1.0)
    base = np.array(box["bgr"], float)
    col = lam[..., None] * base
    half = np.array(box["size"]) / 2.0
    zrel = (p_local[..., 2] + half[2]) / box["size"][2]
    side = axis != 2
    if box["kind"] == "vehicle":  # dark glass band on the upper sides
        glass = side & (zrel > 0.55) & (zrel < 0.92)
        col[glass] = col[glass] * 0.35 + 15.0
    elif box["kind"] == "building":  # window grid
        along = np.where(axis == 0, p_local[..., 1], p_local[..., 0])
        win = side & ((p_local[..., 2] + half[2]) % 3.0 > 1.2) & ((along % 3.0) > 1.4) & (zrel < 0.95)
        col[win] = col[win] * 0.5 + 20.0
    # darken the box edges a little so that face boundaries are visible
    edge = np.sort(half - np.abs(p_local), axis=-1)[..., 1]
    col = col * (0.75 + 0.25 * np.clip(edge / 0.05, 0.0, 1.0))[..., None]
    return apply_fog(col, dist)


def image_rect(cam: dict, box: dict):
    """Pixel rectangle (x0, x1, y0, y1) that contains the box, or None if it is behind the camera."""
    cs = box_corners(box)
    p = (cam["lidar2cam"] @ np.c_[cs, np.ones(8)].T)[:3]
    if (p[2] <= 0.05).all():
        return None
    if (p[2] <= 0.05).any():
        return 0, WIDTH, 0, HEIGHT
    q = cam["K"] @ p
    u, v = q[0] / q[2], q[1] / q[2]
    x0, x1 = int(max(0, math.floor(u.min()) - 1)), int(min(WIDTH, math.ceil(u.max()) + 1))
    y0, y1 = int(max(0, math.floor(v.min()) - 1)), int(min(HEIGHT, math.ceil(v.max()) + 1))
    if x0 >= x1 or y0 >= y1:
        return None
    return x0, x1, y0, y1


def scene_depth_along(cam: dict, boxes: list, u: float, v: float) -> float:
    """Depth of the first surface (ground or box) hit by the ray through image point (u, v)."""
    d = rays(cam, np.array([u]), np.array([v]))
    best = -cam["C"][2] / d[0, 2] if d[0, 2] < -1e-9 else np.inf
    for box in boxes:
        t, hit, *_ = intersect_box(cam, box, d)
        if hit[0] and t[0] < best:
            best = float(t[0])
    return float(best)


def draw_marker(img: np.ndarray, u: float, v: float) -> None:
    """Anti-aliased white disc + black ring centred exactly at continuous point (u, v)."""
    r_out = MARKER_RING_RADIUS
    x0, x1 = int(math.floor(u - r_out)) - 1, int(math.floor(u + r_out)) + 2
    y0, y1 = int(math.floor(v - r_out)) - 1, int(math.floor(v + r_out)) + 2
    n = 8
    sub = (np.arange(n) + 0.5) / n
    xs = (np.arange(x0, x1)[:, None] + sub[None, :]).ravel()
    ys = (np.arange(y0, y1)[:, None] + sub[None, :]).ravel()
    r2 = (ys[:, None] - v) ** 2 + (xs[None, :] - u) ** 2
    h, w = y1 - y0, x1 - x0

    def cov(r):
        m = (r2 <= r * r).astype(np.float32)
        return m.reshape(h, n, w, n).mean(axis=(1, 3))

    c_disc = cov(MARKER_DISC_RADIUS)[..., None]
    c_ring = cov(r_out)[..., None]
    patch = img[y0:y1, x0:x1]
    img[y0:y1, x0:x1] = (patch * (1.0 - c_ring) + np.array(MARKER_RING_BGR) * (c_ring - c_disc)
                         + np.array(MARKER_DISC_BGR) * c_disc)


def locate_marker(gray: np.ndarray, u: float, v: float, window: float = 8.0):
    """Intensity-weighted centroid (continuous coords) of the bright disc near (u, v)."""
    x0, x1 = int(math.floor(u - window)), int(math.floor(u + window)) + 1
    y0, y1 = int(math.floor(v - window)), int(math.floor(v + window)) + 1
    patch = gray[y0:y1, x0:x1].astype(np.float64)
    yy, xx = np.mgrid[y0:y1, x0:x1] + 0.5
    inside = (xx - u) ** 2 + (yy - v) ** 2 <= window * window
    w = np.clip(patch - 40.0, 0.0, None) * inside
    return float((w * xx).sum() / w.sum()), float((w * yy).sum() / w.sum())


# --------------------------------------------------------------------------- output
def fl(a):
    return [fl(x) for x in a] if isinstance(a, (list, tuple, np.ndarray)) else float(a)


def rig_dict(cams: dict) -> dict:
    out = dict(
        name="nuscenes-synthetic",
        description="Synthetic nuScenes-like 6-camera rig rendered by tools/make_samples.py "
                    "(plausible, synthetic calibration).",
        coordinate_frames="lidar: x right, y forward, z up, ground plane z = 0; camera: x right, y down, "
               "z forward; p_cam = lidar2cam @ [x, y, z, 1]; lidar2img = K4 @ lidar2cam",
        pixel_convention=PIXEL_CONVENTION,
        cameras=[],
    )
    for name in CAMERA_ORDER:
        c = cams[name]
        k4 = np.eye(4)
        k4[:3, :3] = c["K"]
        cam2lidar = np.eye(4)
        cam2lidar[:3, :3] = c["R"]
        cam2lidar[:3, 3] = c["C"]
        out["cameras"].append(dict(
            name=name, width=WIDTH, height=HEIGHT, encoding="jpeg",
            intrinsics=fl(c["K"]), lidar2cam=fl(c["lidar2cam"]),
            lidar2img=fl(k4 @ c["lidar2cam"]), cam2lidar=fl(cam2lidar),
            capture_offset_ms=CAMERA_SPECS[name]["offset_ms"],
        ))
    return out


def dump_yaml(path: Path, data: dict, header: str = "") -> None:
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
    path.write_text(header + text)


def capture_times(rng: np.random.Generator) -> list[dict]:
    sets = []
    for k in range(N_FRAMESETS):
        ts = BASE_TIME_NS + k * FRAME_PERIOD_NS
        caps = {}
        for name in CAMERA_ORDER:
            jitter_us = int(rng.integers(-250, 251))
            off_ns = int(round(CAMERA_SPECS[name]["offset_ms"] * 1e6)) + jitter_us * 1000
            caps[name] = ts + max(off_ns, 0)
        sets.append(dict(timestamp_ns=ts, t_s=k * FRAME_PERIOD_NS / 1e9, capture=caps))
    return sets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="samples", help="output folder (default: samples)")
    ap.add_argument("--nuscenes-config", default=None,
                    help="also write the rig as a stand-alone config to this path")
    args = ap.parse_args(argv)

    out = Path(args.out)
    frames_dir = out / "frames"
    if frames_dir.exists():
        shutil.rmtree(frames_dir)
    frames_dir.mkdir(parents=True)

    rng = np.random.default_rng(SEED)
    tex = Textures(rng)
    cams = {name: camera_model(name) for name in CAMERA_ORDER}
    sets = capture_times(rng)

    # ---- ground truth per frame set
    scene_sets = []
    for k, fs in enumerate(sets):
        boxes = [box_at(b, fs["t_s"]) for b in BOXES]
        entry = dict(index=k, timestamp_ns=fs["timestamp_ns"], frames={}, markers=[], boxes=[])
        for name in CAMERA_ORDER:
            ns = fs["capture"][name]
            entry["frames"][name] = dict(capture_time_ns=ns, image=f"frames/{name}/{ns}.jpg")
        for m in MARKERS:
            xyz = marker_at(m, fs["t_s"])
            rec = dict(name=m["name"], xyz=list(xyz), cameras=[], uv={}, depth={})
            for name in CAMERA_ORDER:
                u, v, z = project(cams[name], xyz)
                if z <= 0.5:
                    continue
                if not (MARKER_MARGIN_PX <= u <= WIDTH - MARKER_MARGIN_PX
                        and MARKER_MARGIN_PX <= v <= HEIGHT - MARKER_MARGIN_PX):
                    continue
                if scene_depth_along(cams[name], boxes, u, v) <= z:
                    print(f"  note: {m['name']} occluded in {name} at set {k}")
                    continue
                rec["cameras"].append(name)
                rec["uv"][name] = [u, v]
                rec["depth"][name] = z
            if not rec["cameras"]:
                raise SystemExit(f"marker {m['name']} is visible in no camera at set {k}")
            entry["markers"].append(rec)
        for b in boxes:
            rec = dict(name=b["name"], center=list(b["center"]), size=fl(b["size"]), yaw=float(b["yaw"]),
                       velocity=fl(b["velocity"]), corners=fl(box_corners(b)), cameras=[], uv={}, depth={})
            for name in CAMERA_ORDER:
                u, v, z = project(cams[name], b["center"])
                if z > 0.5 and 0.0 <= u < WIDTH and 0.0 <= v < HEIGHT:
                    rec["cameras"].append(name)
                    rec["uv"][name] = [u, v]
                    rec["depth"][name] = z
            entry["boxes"].append(rec)
        scene_sets.append((entry, boxes))

    # sanity: markers of one camera do not overlap, every camera sees >= 2 markers per set
    for entry, _ in scene_sets:
        for name in CAMERA_ORDER:
            pts = [m["uv"][name] for m in entry["markers"] if name in m["uv"]]
            if len(pts) < 2:
                raise SystemExit(f"{name} sees {len(pts)} markers at set {entry['index']}")
            for i in range(len(pts)):
                for j in range(i + 1, len(pts)):
                    if math.dist(pts[i], pts[j]) < 2 * MARKER_RING_RADIUS + 4:
                        raise SystemExit(f"markers overlap in {name} at set {entry['index']}")

    # ---- render
    total = 0
    worst = 0.0
    params = [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY, cv2.IMWRITE_JPEG_PROGRESSIVE, 0,
              cv2.IMWRITE_JPEG_OPTIMIZE, 0]
    if hasattr(cv2, "IMWRITE_JPEG_SAMPLING_FACTOR"):
        params += [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420]
    for name in CAMERA_ORDER:
        cam = cams[name]
        (frames_dir / name).mkdir()
        bg = [render_background(cam, tex, ox, oy) for oy in SUPERSAMPLE for ox in SUPERSAMPLE]
        offsets = [(ox, oy) for oy in SUPERSAMPLE for ox in SUPERSAMPLE]
        for entry, boxes in scene_sets:
            acc = np.zeros((HEIGHT, WIDTH, 3), np.float64)
            for (col0, depth0), (ox, oy) in zip(bg, offsets):
                col = col0.copy()
                depth = depth0.copy()
                for box in boxes:
                    rect = image_rect(cam, box)
                    if rect is None:
                        continue
                    x0, x1, y0, y1 = rect
                    u, v = np.meshgrid(np.arange(x0, x1) + ox, np.arange(y0, y1) + oy)
                    d = rays(cam, u, v)
                    t, hit, axis, sign, p_local = intersect_box(cam, box, d)
                    sub_depth = depth[y0:y1, x0:x1]
                    hit &= t < sub_depth
                    if not hit.any():
                        continue
                    dist = t[hit] * np.linalg.norm(d[hit], axis=-1)
                    sub_col = col[y0:y1, x0:x1]
                    sub_col[hit] = shade_box(box, axis[hit], sign[hit], p_local[hit], dist)
                    sub_depth[hit] = t[hit]
                acc += col
            img = acc / len(bg)
            for m in entry["markers"]:
                if name in m["uv"]:
                    draw_marker(img, *m["uv"][name])
            img8 = np.clip(np.rint(img), 0, 255).astype(np.uint8)
            path = out / entry["frames"][name]["image"]
            if not cv2.imwrite(str(path), img8, params):
                raise SystemExit(f"failed to write {path}")
            total += path.stat().st_size
            # self-check: markers are found where recorded, after JPEG
            gray = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
            for m in entry["markers"]:
                if name in m["uv"]:
                    u, v = m["uv"][name]
                    cu, cv_ = locate_marker(gray, u, v)
                    worst = max(worst, math.hypot(cu - u, cv_ - v))
        print(f"{name}: {len(scene_sets)} frames")
    if worst > 0.3:
        raise SystemExit(f"marker localisation error {worst:.3f} px after JPEG is too large")

    rig = rig_dict(cams)
    dump_yaml(out / "rig.yaml", rig,
              "# Generated by tools/make_samples.py -- do not edit; re-run the script instead.\n")
    scene = dict(
        name="nuscenes-synthetic",
        generator="tools/make_samples.py",
        rig="rig.yaml",
        camera_order=list(CAMERA_ORDER),
        image_size=[WIDTH, HEIGHT],
        pixel_convention=PIXEL_CONVENTION,
        marker_style=dict(disc_radius_px=MARKER_DISC_RADIUS, ring_radius_px=MARKER_RING_RADIUS,
                          disc_bgr=list(MARKER_DISC_BGR), ring_bgr=list(MARKER_RING_BGR)),
        notes="All coordinates in the lidar frame (x right, y forward, z up; ground z = 0). "
              "uv = exact projection (lidar2cam, intrinsics of rig.yaml) of xyz (markers) or of the box "
              "centre (boxes); depth = camera z. A marker is listed for a camera only if drawn there "
              "(in front, ring inside the image, not occluded). Box uv/cameras only say where the centre "
              "projects into the image (no occlusion test). Objects are static within a frame set.",
        timestamps=[e for e, _ in scene_sets],
    )
    dump_yaml(out / "scene.yaml", scene,
              "# Generated by tools/make_samples.py -- do not edit; re-run the script instead.\n")
    if args.nuscenes_config:
        header = (
            "# nuScenes-like 6-camera rig (BEVFormer camera order), 1600x900 JPEG.\n"
            "# Numbers: plausible, synthetic -- the calibration of dvpipe's bundled synthetic sample scene\n"
            "# (samples/rig.yaml), written by `python tools/make_samples.py --nuscenes-config <this file>`.\n"
            "# Intrinsics/extrinsics resemble nuScenes' (fx ~ 1260, camera yaws 0/-55/55/180/110/-110 deg,\n"
            "# ~1.5 m mounting height) but are not the calibration of any real nuScenes vehicle.\n"
            "# Frames: lidar x right, y forward, z up; camera x right, y down, z forward;\n"
            "# p_cam = lidar2cam @ [x, y, z, 1].\n"
        )
        cfg = dict(rig, name="nuscenes")
        cfg["description"] = "nuScenes-like 6-camera rig (plausible, synthetic calibration)."
        for c in cfg["cameras"]:
            c.pop("capture_offset_ms", None)
        dump_yaml(Path(args.nuscenes_config), cfg, header)
    print(f"wrote {len(scene_sets) * len(CAMERA_ORDER)} images, {total / 1024:.0f} KB of JPEG, "
          f"worst marker localisation error {worst:.3f} px")
    return 0


if __name__ == "__main__":
    sys.exit(main())
