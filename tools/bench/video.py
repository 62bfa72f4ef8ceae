#!/usr/bin/env python3
"""Multi-camera H.264 on the CPU: dvpipe against the decode floor and its peers, in one process.

One command::

    .venv/bin/python tools/bench/video.py                    # 6 x 1600x900 H.264 (B-frames), 1 and 2 threads
    .venv/bin/python tools/bench/video.py --scaling          # + 12 and 24 cameras and 6 x 3840x2160
    .venv/bin/python tools/bench/video.py --runner-ab        # + the Runner with a reader per camera, one set at a time
    .venv/bin/python tools/bench/video.py --whole-runs       # + whole dvpipe runs against the floor
    .venv/bin/python tools/bench/video.py --decode-runs      # + decoding R pictures of a camera in a row (R = 1..24)
    .venv/bin/python tools/bench/video.py --quick            # 8 rounds, a smoke run
    .venv/bin/python tools/bench/video.py --json out/video.json

Streams: six cameras of H.264 made here with PyAV's libx264 (``preset veryfast``, ``crf 23``,
``bframes=3`` with a B-pyramid, GOP 24 at 12 fps, as real re-encodes of camera recordings are) from
the nuScenes frames in ``--data`` (``../shared/data/nuscenes-sample`` when present: each camera's
frame, slowly zoomed and panned, with sensor-like noise) or, without it, from synthetic camera-like
scenes. Every method decodes the same Annex B access units, frame set by frame set, in presentation
order (dvpipe gets them as a video source hands them over: :class:`dvpipe.video.PresentationOrder`
packets), looping over the recording (a new decoder at each loop, for every method alike).

Rows (each run once per round -- 24 consecutive frame sets, one GOP, 2 s of video -- in an order
rotated every round; ms per frame set of N cameras):

* ``floor: decode (PyAV -> YUV)`` -- FFmpeg's H.264 decoder through PyAV (``CodecContext``, slice
  threads as dvpipe's engine), pictures left in the decoder's 4:2:0 planes: the least work any
  method does. ``/decode`` in the tables is relative to it.
* ``floor: decode, camera-parallel`` -- the same decoding, but each camera decodes the round's 24
  pictures in one job of the pool, with no barrier between frame sets (whole files decoded in
  parallel): the floor of anything that keeps the cameras independent. ``/par`` is relative to it;
  ``PyAV + bgr24, camera-parallel`` (``/bgrpar``) is the same with bgr24.
* ``floor: decode CPU time / threads`` -- not a run: the camera-parallel floor's decoding CPU time (each job's
  thread CPU time, summed) per frame set divided by the threads, what that work would take spread evenly
  over them. Whole cameras' jobs on T threads end unevenly where cameras cost unequal time (the nuScenes
  cameras' pictures differ by up to ~9%), so the camera-parallel floor's wall time is above it.
* ``floor: decode+kernel, camera-parallel`` -- the camera-parallel floor plus dvpipe's compiled YUV kernel
  on every picture into an output ring as large as the Runner's (what ``dvpipe run`` at ``fast`` must
  do at the least): the Runner's rows over it are what reading, synchronising and accounting cost.
* ``floor: decode+write`` -- the same plus writing every byte of the output tensor once.
* ``PyAV -> YUV, dvpipe's err_detect`` -- the decode floor with the error detection dvpipe's engine
  turns on (``FFmpegEngine.ERR_DETECT``), to separate what integrity checking costs.
* ``PyAV + bgr24`` -- the decode floor plus FFmpeg's own conversion to BGR (``reformat("bgr24",
  threads=1)``: swscale on the camera's thread, as dvpipe runs it): the floor of anything that
  needs BGR pixels; ``/bgr`` in the tables is relative to it.
* ``PyAV + bgr24, swscale auto threads`` -- the same with swscale's default (a thread per core for
  each conversion, on top of the camera threads), for comparison.
* ``dvpipe fast`` / ``dvpipe reference`` -- ``Pipeline.from_profile("bevformer-tiny", rig,
  fidelity=..., threads=T).process(frame set)`` -> (N, 3, 480, 800) float32: at ``fast`` the
  decoder's YUV planes go straight into the compiled kernel (``fused_decode_*``); at
  ``reference`` too, through a copy of FFmpeg's bgr24 arithmetic (bit-identical to FFmpeg's bgr24
  picture through the fused 2x2 kernel, which ran until 2026-12-05).
* ``dvpipe fast, submitted ahead`` -- the same pipeline through ``Pipeline.submit`` with one frame set
  kept ahead (set k+1's cameras start while set k's slowest camera finishes: no per-set barrier).
* ``Runner fast`` / ``Runner reference`` -- what ``dvpipe run`` times: a :class:`dvpipe.deploy.Runner` on the
  same access units muxed into one Matroska file per camera (``type: video`` sources), the same
  pipeline, no model, no files: reading, synchronising, preprocessing, accounting and statistics;
  ``run.pictures_per_job`` left at ``auto`` as a deployment leaves it (24 up to 1920x1088: a worker
  decodes up to 24 consecutive pictures of one camera, sets started 24 ahead; 1 at 4K).
  Each round takes 24 frame sets from ``Runner.batches()``; between its rounds its readers wait on
  full buffers. After the rounds, ``dvpipe run (fast)`` is a whole run of the same deployment timed
  by the run's own clock (``RunResult.elapsed_s`` per set, the sources opened before it starts), with
  the start-up reported apart (``summary.json["startup"]``).
* ``Runner fast, 1 picture per job`` -- the same with ``run.pictures_per_job: 1`` (one picture per camera
  in turn, set by set, as a live rig runs); ``--pictures-per-job N`` for another N.
* ``OpenCV VideoCapture`` -- ``cv2.VideoCapture`` on the same elementary stream, ``read()`` (BGR).
* ``torchcodec CPU`` -- ``torchcodec.decoders.VideoDecoder(device="cpu")`` (one FFmpeg thread per
  camera, its default), frames in order as RGB CHW uint8 tensors; it reads a container, so it gets
  the same access units muxed into Matroska (:func:`mux_mkv`; checked: its frames equal FFmpeg's
  rgb24 of the same pictures). Compare with ``PyAV + bgr24`` (both decode and convert to 8-bit colour).
* GPU peers, gated (skipped with the reason where no CUDA device or library is present; never run
  on the development machine): ``torchcodec CUDA (NVDEC)``, ``PyNvVideoCodec (NVDEC)`` and
  ``DALI video decoder`` (``fn.experimental.decoders.video``, GPU).

Threads: T threads across cameras (dvpipe's ``CameraPool`` for the floors and the CPU peers, as
dvpipe itself), at T = 1 and 2. Ratios are medians of per-round ratios (methods of one round ran
back to back, in the same phase of a shared machine); ``(p10)`` the same from the 10th percentiles.

Checks: dvpipe ``reference`` against FFmpeg's bgr24 of the same pictures, 2x2-averaged and
normalised in numpy (must be <= 1e-4); dvpipe ``fast`` against ``reference`` (mean / p99 / max in
normalised units) and against the standard's Y'CbCr -> RGB formula of FFmpeg's own planes in numpy.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import av  # noqa: E402

import dvpipe as dv  # noqa: E402
from dvpipe._camera_pool import CameraPool  # noqa: E402
from dvpipe.backends import _native  # noqa: E402
from dvpipe.backends.cpu import _fill_pad  # noqa: E402
from dvpipe.stages import FrameSpec  # noqa: E402
from dvpipe.types import PixelFormat  # noqa: E402
from dvpipe.video import (FILE_LOOKAHEAD, AccessUnit, VideoPacket, is_keyframe, picture_yuv420,  # noqa: E402
                          presentation_packets, yuv_matrix)

FPS = 12
GOP = 24  # pictures per IDR period of the bench's streams
#: frame sets per timed call: one GOP (24 pictures), so that every call of every method decodes the
#: same work -- one IDR and 23 other pictures per camera -- whatever the phase of its decoding. With
#: 12 sets (half a GOP) the IDR (3x the bytes of the rest) fell in every other call, and in a different
#: call for methods that decode lazily (dvpipe feeds units until the wanted picture is out) than for
#: those that decode each frame set's units as they come: per-round ratios then paired unequal work
#: (the floor's cheap rounds against dvpipe's dear ones), which read as ~3 ms of "overhead" at the
#: 10th percentile. Times are reported per frame set.
SETS_PER_RUN = GOP
ROWS: list[str] = []  # --rows: keep only the rows whose names start with these (memory: 4K decoders are large)
PICTURES_PER_JOB: int | str = 1  # --pictures-per-job: the second Runner row's run.pictures_per_job
RUNNER_AB = False  # --runner-ab: also the Runner with a reader per camera, and one set at a time (the designs before)
WHOLE_RUNS = False  # --whole-runs: also whole dvpipe runs against the floor over the same sets
MEAN = np.array([123.675, 116.28, 103.53])
STD = np.array([58.395, 57.12, 57.375])
CAMS = ("CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_FRONT_LEFT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_BACK_RIGHT")


# -- streams ---------------------------------------------------------------------------------------
def camera_frames(base: np.ndarray, n: int, w: int, h: int, seed: int) -> list[np.ndarray]:
    """``n`` frames of a slowly zooming and panning camera over ``base``, with sensor-like noise."""
    rng = np.random.default_rng(seed)
    base = cv2.resize(base, (w, h), interpolation=cv2.INTER_AREA if base.shape[1] > w else cv2.INTER_CUBIC)
    out = []
    for k in range(n):
        s = 1.0 + 0.004 * k
        m = np.array([[s, 0, -(s - 1) * w / 2 + 2.5 * k * w / 1600], [0, s, -(s - 1) * h / 2 + 0.8 * k * h / 900]])
        img = cv2.warpAffine(base, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
        out.append(np.clip(img + rng.normal(0, 1.5, img.shape), 0, 255).astype(np.uint8))
    return out


def synthetic_scene(w: int, h: int, seed: int) -> np.ndarray:
    """A camera-like scene without data: sky gradient, road, blocks of texture and edges."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.empty((h, w, 3), np.float32)
    sky = y < 0.45 * h
    img[..., 0] = np.where(sky, 200 - 60 * y / h, 90 + 20 * np.sin(x / 23))
    img[..., 1] = np.where(sky, 170 - 40 * y / h, 95 + 15 * np.cos(y / 17))
    img[..., 2] = np.where(sky, 140 - 30 * y / h, 100)
    for _ in range(40):
        x0, y0 = rng.integers(0, w - 80), rng.integers(int(0.25 * h), h - 60)
        img[y0:y0 + rng.integers(20, 120), x0:x0 + rng.integers(20, 200)] = rng.integers(20, 235, 3)
    img += cv2.GaussianBlur(rng.normal(0, 25, (h, w, 1)).astype(np.float32), (0, 0), 1.2)[..., None]
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(frames: list[np.ndarray], w: int, h: int) -> list[tuple[bytes, int, bool]]:
    """Annex B access units in decode order, ``(data, pts_ms, keyframe)``: libx264 with B-frames."""
    cc = av.CodecContext.create("libx264", "w")
    cc.width, cc.height, cc.pix_fmt = w, h, "yuv420p"
    cc.time_base = Fraction(1, 1000)
    cc.framerate = Fraction(FPS)
    cc.gop_size = GOP
    cc.max_b_frames = 3
    cc.thread_type = "FRAME"  # x264's default frame threads: one slice per picture, as camera re-encodes have
    cc.options = {"preset": "veryfast", "crf": "23",
                  "x264-params": "bframes=3:b-pyramid=normal:repeat-headers=1:sliced-threads=0"}
    aus = []
    for k, img in enumerate(frames):
        f = av.VideoFrame.from_ndarray(img, format="bgr24")
        f.pts = round(k * 1000 / FPS)
        aus += [(bytes(p), int(p.pts), bool(p.is_keyframe)) for p in cc.encode(f)]
    aus += [(bytes(p), int(p.pts), bool(p.is_keyframe)) for p in cc.encode(None)]
    return aus


def mux_mkv(aus, path: Path, w: int, h: int) -> Path:
    """Access units in decode order ``(data, pts_ms, keyframe)`` into a Matroska file, bytes unchanged
    (decode timestamps: the sorted presentation times moved back by the largest reordering delay)."""
    pts = [p for _, p, _ in aus]
    ordered = sorted(pts)
    delay = max(0, max(o - p for o, p in zip(ordered, pts)))
    with av.open(str(path), "w") as out:
        st = out.add_stream("h264", rate=FPS)
        st.width, st.height, st.time_base = w, h, Fraction(1, 1000)
        for k, (data, p, key) in enumerate(aus):
            pkt = av.Packet(data)
            pkt.pts, pkt.dts, pkt.time_base, pkt.stream, pkt.is_keyframe = p, ordered[k] - delay, st.time_base, st, key
            out.mux(pkt)
    return path


def to_packets(aus) -> list[VideoPacket]:
    """Frames in presentation order, as a dvpipe video source emits them (pts-matched, look-ahead 16)."""
    return presentation_packets((AccessUnit(data, pts * 1_000_000, key or is_keyframe(data, "h264"))
                                 for data, pts, key in aus), "pts", FILE_LOOKAHEAD)


class Streams:
    """N cameras of one recording each, looped into one continuous stream (every loop starts at an IDR):
    access units, presentation-order packets, an elementary-stream file.

    A source reads ``FILE_LOOKAHEAD`` units ahead, so the first frame's packet carries 17 units and
    the last 16 frames' none; the loops make the stream long enough that every measured round (after
    the warm-up) is in the steady state: one access unit in, one presented picture out per camera.
    """

    def __init__(self, bases: list[np.ndarray], w: int, h: int, n_frames: int, tmp: Path, sets: int,
                 copies: int = 1):
        self.w, self.h = w, h
        one = [encode(camera_frames(b, n_frames, w, h, seed=k), w, h) for k, b in enumerate(bases)]
        loops = -(-(sets + FILE_LOOKAHEAD + 1) // n_frames)
        span = round(n_frames * 1000 / FPS)
        aus = [[(d, pts + j * span, key) for j in range(loops) for d, pts, key in a] for a in one]
        self.first = [a for _ in range(copies) for a in one]  # one loop, for the checks
        self.aus = [a for _ in range(copies) for a in aus]
        self.packets = [to_packets(a) for a in self.aus]
        self.n = len(self.aus)
        self.sets = len(self.packets[0]) - FILE_LOOKAHEAD  # frame sets before the look-ahead's tail
        assert self.sets >= sets
        paths = []
        tmp.mkdir(parents=True, exist_ok=True)
        for k, a in enumerate(aus):
            p = tmp / f"cam{k}_{w}x{h}.h264"
            p.write_bytes(b"".join(d for d, _, _ in a))
            paths.append(p)
        self.paths = [p for _ in range(copies) for p in paths]
        self.bytes_per_set = sum(len(d) for a in one for d, _, _ in a) * copies / n_frames
        self._mkv: dict[Path, Path] = {}

    def mkv(self, cam: int) -> Path:
        """Camera ``cam``'s stream in a Matroska file (the same access units, with timestamps): for
        readers that need a container's duration and frame times (torchcodec); written on first use."""
        src = self.paths[cam]
        if src not in self._mkv:
            self._mkv[src] = mux_mkv(self.aus[cam], src.with_suffix(".mkv"), self.w, self.h)
        return self._mkv[src]

    def units(self, cam: int, idx: int) -> list[bytes]:
        return [u.data for u in self.packets[cam][idx].units if isinstance(u, AccessUnit)]


# -- methods ---------------------------------------------------------------------------------------
class Method:
    name = "?"

    def __init__(self, s: Streams, threads: int):
        self.s, self.threads = s, threads
        self.pool = CameraPool(threads)
        self.k = 0  # frame index of the next set (every method steps through the recording alike)
        self.last = None

    def run(self):
        for _ in range(SETS_PER_RUN):
            self.pool.run(self.job, self.s.n)
            self.step()
        return self.last

    def step(self):
        self.k += 1
        if self.k >= self.s.sets:
            raise RuntimeError("the recording is too short for this many rounds (raise --frames)")

    def job(self, i):
        raise NotImplementedError

    def close(self):
        self.pool.close()


def floor_decoder(thread_type: str = "SLICE"):
    """FFmpeg's H.264 decoder as the floors use it (slice threads, as dvpipe's engine)."""
    cc = av.CodecContext.create("h264", "r")
    cc.thread_type = thread_type
    return cc


class PyAV(Method):
    """FFmpeg's decoder through PyAV; ``mode``: ``yuv`` (the floor), ``write`` (+ the output write), ``bgr24``
    (``sws_threads``: swscale's threads per conversion, 0 = its automatic count)."""

    def __init__(self, s, threads, mode, thread_type="SLICE", err_detect=None, sws_threads=1):
        super().__init__(s, threads)
        self.mode, self.thread_type, self.err_detect, self.sws_threads = mode, thread_type, err_detect, sws_threads
        self.name = {"yuv": "floor: decode (PyAV -> YUV)", "write": "floor: decode+write",
                     "bgr24": "PyAV + bgr24"}[mode] + ("" if thread_type == "SLICE" else f" [{thread_type} threads]")
        if mode == "bgr24" and sws_threads != 1:
            self.name += ", swscale auto threads"
        if err_detect:
            self.name = "PyAV -> YUV, dvpipe's err_detect"
        self.dec = [None] * s.n
        self.out = np.zeros((s.n, 3, -(-s.h // 2 // 32) * 32, -(-s.w // 2 // 32) * 32), np.float32)
        self.pics = [None] * s.n

    def _new(self):
        cc = floor_decoder(self.thread_type)
        if self.thread_type == "FRAME":
            cc.thread_count = 2
        if self.err_detect:
            cc.options = {"err_detect": self.err_detect}
        return cc

    def job(self, i):
        if self.dec[i] is None:
            self.dec[i] = self._new()
        dec = self.dec[i]
        pics = []
        for data in self.s.units(i, self.k):
            pics += dec.decode(av.Packet(data))
        if self.mode == "bgr24":
            self.pics[i] = [p.reformat(format="bgr24", threads=self.sws_threads).to_ndarray() for p in pics]
        elif self.mode == "write":
            self.out[i].fill(0.5)
            self.pics[i] = pics
        else:
            self.pics[i] = pics


class Dvpipe(Method):
    def __init__(self, s, threads, fidelity, profile="bevformer-tiny"):
        super().__init__(s, threads)
        self.name = f"dvpipe {fidelity}"
        rig = dv.Rig.from_dict(_rig(s))
        self.names = [c.name for c in rig]
        self.pipe = dv.Pipeline.from_profile(profile, rig, fidelity=fidelity, threads=threads)
        self.steps = [st.kernel.name for st in self.pipe.plan.cameras[0].steps]

    def run(self, sets=None):
        for _ in range(sets or SETS_PER_RUN):
            b = self.pipe.process({n: self.s.packets[i][self.k] for i, n in enumerate(self.names)})
            self.step()
        self.last = b
        return b

    def close(self):
        self.pipe.close()
        super().close()


class DvpipeAhead(Dvpipe):
    """``Pipeline.submit`` keeping one frame set ahead (what the Runner does), on packets in memory: the
    pipeline without the per-set barrier, apart from the Runner's reading and accounting."""

    def __init__(self, s, threads, fidelity, profile="bevformer-tiny"):
        super().__init__(s, threads, fidelity, profile)
        self.name = f"dvpipe {fidelity}, submitted ahead"
        self.pipe.reserve_output_buffers(3)
        self.pending = None

    def run(self, sets=None):
        b = None
        for _ in range(sets or SETS_PER_RUN):
            nxt = self.pipe.submit({n: self.s.packets[i][self.k] for i, n in enumerate(self.names)})
            if self.pending is not None:
                b = self.pending.result()
            self.pending = nxt
            self.step()
        self.pending.wait()  # the set submitted ahead is this round's work, not the next rows' time
        self.last = b
        return b

    def close(self):
        if self.pending is not None:
            self.pending.result()
        super().close()


class PyAVParallel(PyAV):
    """The camera-parallel floor: each camera decodes a whole round's pictures (``SETS_PER_RUN`` frame
    sets) in one job, with no barrier between frame sets -- what decoding whole files in parallel costs;
    ``mode``: ``yuv`` or ``bgr24`` as :class:`PyAV`, or ``kernel``: each picture's planes also go through
    dvpipe's compiled YUV kernel (``_native.yuv420_normalise``, bevformer-tiny's 2x shrink and
    normalisation, pad rows filled) into an output ring as large as the Runner's at ``auto``:
    the work of ``Runner fast, N pictures per job`` without the Runner (reading, synchronising, the
    pipeline's Python, accounting)."""

    def __init__(self, s, threads, mode):
        super().__init__(s, threads, "yuv" if mode == "kernel" else mode)
        self.name = {"yuv": "floor: decode, camera-parallel", "bgr24": "PyAV + bgr24, camera-parallel",
                     "kernel": "floor: decode+kernel, camera-parallel"}[mode]
        self.ring = None
        if mode == "kernel":
            from dvpipe.deploy._budget import output_buffers

            # as large as the Runner's ring at run.pictures_per_job auto (its own rule: size, memory bounds)
            self.ring = [np.zeros_like(self.out) for _ in range(output_buffers(runner_pictures_per_job(s, threads)))]
            self.mean, self.inv_std = tuple(float(x) for x in MEAN), tuple(float(x) for x in 1.0 / STD)
            self.spec = FrameSpec(width=s.w, height=s.h, pixel_format=PixelFormat.ENCODED, encoding="h264")

    def run(self, sets: int = SETS_PER_RUN):
        """Decode ``sets`` frame sets: each camera's pictures in one job (no barrier between the sets); sets
        ``cpu_ms_per_set``, the jobs' CPU time per set over the threads (the ``CPU_FLOOR`` row)."""
        self._cpu_s: list[float] = []
        self.pool.run(functools.partial(self.whole, sets=sets), self.s.n)
        self.cpu_ms_per_set = sum(self._cpu_s) * 1e3 / self.threads / sets
        for _ in range(sets):
            self.step()
        return self.last

    def whole(self, i, sets: int = SETS_PER_RUN):
        k, t0 = self.k, time.thread_time()
        for j in range(sets):
            self._one(i, k + j)
        self._cpu_s.append(time.thread_time() - t0)

    def _one(self, i, idx):
        if self.dec[i] is None:
            self.dec[i] = self._new()
        pics = []
        for data in self.s.units(i, idx):
            pics += self.dec[i].decode(av.Packet(data))
        if self.mode == "bgr24":
            pics = [p.reformat(format="bgr24", threads=1).to_ndarray() for p in pics]
        elif self.ring is not None:
            out = self.ring[idx % len(self.ring)][i]
            h, w = self.s.h // 2, self.s.w // 2
            for p in pics:  # as dvpipe's fast path writes a camera's slot (backends/cpu.py _video_yuv_write)
                y, ys, u, v, cs, coef = picture_yuv420(p, self.spec)
                _native.yuv420_normalise(y, ys, u, v, cs, self.s.w, self.s.h, out[:, :h, :w], (2, 1, 0), self.mean,
                                         self.inv_std, 2, coef)
                _fill_pad(out, h, w, 0.0)
            pics = None
        self.pics[i] = pics


class RunnerMethod(Method):
    """``dvpipe run``'s engine: a :class:`dvpipe.deploy.Runner` over the same streams muxed into Matroska files
    (``type: video`` sources, one per camera), pipeline ``bevformer-tiny`` at ``fidelity``, no model, no files
    written; each round takes ``SETS_PER_RUN`` frame sets from :meth:`~dvpipe.deploy.Runner.batches` (reading,
    synchronising, preprocessing, accounting and statistics: everything ``dvpipe run`` times)."""

    def __init__(self, s, threads, fidelity, share_reader=True, sets_ahead=None, pictures_per_job="auto"):
        super().__init__(s, threads)
        self.name = (f"Runner {fidelity}" + ("" if share_reader else ", a reader per camera")
                     + ("" if sets_ahead is None else f", {sets_ahead} set(s) ahead")
                     + ("" if pictures_per_job == "auto" else
                        f", {pictures_per_job} picture{'' if pictures_per_job == 1 else 's'} per job"))
        self.fidelity = fidelity
        self.runner = make_runner(s, threads, fidelity, pictures_per_job=pictures_per_job)
        self.runner.share_reader = share_reader  # before batches() starts it
        if sets_ahead is not None:
            self.runner.sets_ahead = sets_ahead
        self.it = self.runner.batches()

    def run(self):
        for _ in range(SETS_PER_RUN):
            next(self.it)
            self.step()
        self.runner.wait_in_flight()  # the sets submitted ahead are this round's work, not the next rows' time
        return None

    def close(self):
        self.it.close()
        self.runner.close()
        super().close()


def runner_files(s: Streams) -> list[Path]:
    """One Matroska file per camera (copies of a recording get their own file: a deployment refuses two
    cameras reading one file)."""
    import shutil

    out = []
    for i in range(s.n):
        src = s.mkv(i)
        p = src.with_name(f"runner_cam{i}.mkv")
        if not p.exists():
            shutil.copyfile(src, p)
        out.append(p)
    return out


def make_runner(s: Streams, threads: int, fidelity: str, frames=None, pictures_per_job="auto"):
    from dvpipe.deploy import Runner

    return Runner(make_runner_deployment(s, threads, fidelity, frames, pictures_per_job), write_outputs=False)


def make_runner_deployment(s: Streams, threads: int, fidelity: str, frames=None, pictures_per_job="auto"):
    from dvpipe.deploy import load_deployment

    rig = _rig(s)
    files = runner_files(s)
    return load_deployment({
        "name": "bench-runner", "rig": rig,
        "pipeline": {"profile": "bevformer-tiny", "fidelity": fidelity, "backends": ["cpu"], "threads": threads},
        "source": {"type": "video", "uri": str(files[0])},
        "cameras": [{"name": c["name"], "source": {"type": "video", "uri": str(files[k])}}
                    for k, c in enumerate(rig["cameras"])],
        "sync": {"tolerance_ms": 20},
        "run": dict({"frames": frames} if frames else {}, pictures_per_job=pictures_per_job),
        "latency": {"warmup_sets": 0}, "outputs": {"metrics": False}})


def runner_pictures_per_job(s: Streams, threads: int) -> int:
    """``run.pictures_per_job`` as the Runner resolves ``auto`` for these streams (``fast``): the size of its ring."""
    from dvpipe.deploy._assembly import build_pipeline
    from dvpipe.deploy._budget import pictures_per_job

    dep = make_runner_deployment(s, threads, "fast")
    pipe, _notes = build_pipeline(dep)
    try:
        return pictures_per_job(dep, pipe)[0]
    finally:
        pipe.close()


def dvpipe_run_timing(s: Streams, threads: int, fidelity: str, sets: int) -> dict:
    """``dvpipe run``'s own figures for ``sets`` frame sets: ``RunResult.elapsed_s`` per set (the clock starts
    once the sources are open), the first set's latency (startup) and the steady mean."""
    r = make_runner(s, threads, fidelity, frames=sets)
    t0 = time.perf_counter()
    res = r.run()
    wall = time.perf_counter() - t0
    startup = getattr(r, "startup", {}) or {}
    return {"sets": res.sets, "elapsed_s": res.elapsed_s, "ms_per_set": res.elapsed_s * 1e3 / max(1, res.sets),
            "wall_s_with_open": wall, "startup": startup}


def first_set_floors(s: Streams, threads: int) -> dict:
    """Two floors of a run's first frame set (ms from a fresh start to every camera's first picture; fresh
    decoders on a fresh pool of ``threads``, cameras in parallel, as :func:`dvpipe_run_timing` starts):
    ``reorder`` -- FFmpeg fed units until it outputs the camera's first picture (with B-frames, after its
    reorder delay: 3 units here); ``idr`` -- the first IDR unit alone, decoded and drained (what
    ``ReorderingDecoder(first_picture_early=True)`` does for the first frame)."""
    def first(c: int, drain: bool) -> None:
        dec = floor_decoder()
        for data, _, _ in s.aus[c]:
            if dec.decode(av.Packet(data)) or (drain and dec.decode(None)):
                return
        raise RuntimeError("no picture")

    out = {}
    for name, drain in (("reorder", False), ("idr", True)):
        pool = CameraPool(threads)
        t0 = time.perf_counter()
        pool.run(lambda c: first(c, drain), s.n)
        out[name] = (time.perf_counter() - t0) * 1e3
        pool.close()
    return out


def first_set_rounds(s: Streams, threads: int, fidelity: str, rounds: int = 5) -> dict:
    """``dvpipe run``'s first-set latency (``startup["first_set_ms"]``, runs of 48 sets: long enough for the
    sets started ahead and the runs of pictures per camera to have their say) and :func:`first_set_floors`,
    interleaved; medians of ``rounds``."""
    got: dict[str, list] = {"dvpipe run": [], "reorder": [], "idr": []}
    for _ in range(rounds):
        for k, v in first_set_floors(s, threads).items():
            got[k].append(v)
        r = make_runner(s, threads, fidelity, frames=min(48, s.sets - 1))
        r.run()
        got["dvpipe run"].append(r.startup["first_set_ms"])
    return {k: float(np.median(v)) for k, v in got.items()} | {"rounds": rounds}


def decode_runs(s: Streams, log, reps: int = 3, runs=(1, 2, 3, 4, 6, 12, 24)) -> dict:
    """What decoding a camera's pictures in runs is worth: one thread decodes every camera's pictures, R
    consecutive pictures of a camera before the next camera (R = 1: one picture per camera per frame set,
    as set-by-set work does; R = 24: a GOP, as the camera-parallel floor does). ms per frame set, best of
    ``reps``; fresh decoders (slice threads, as dvpipe's engine) for every run length."""
    n = min(len(a) for a in s.aus) // max(runs) * max(runs)
    got: dict[int, list] = {}
    for _ in range(reps):
        for r in runs:
            decs = [floor_decoder() for _c in range(s.n)]
            t0 = time.perf_counter()
            for base in range(0, n, r):
                for c in range(s.n):
                    for k in range(base, base + r):
                        decs[c].decode(av.Packet(s.aus[c][k][0]))
            got.setdefault(r, []).append((time.perf_counter() - t0) * 1e3 / n)
    best = {r: min(v) for r, v in got.items()}
    log(f"decoding in runs ({s.n} cameras, 1 thread, ms per frame set, best of {reps}): " +
        ", ".join(f"R={r}: {v:.2f} ({v / best[1]:.2f})" for r, v in best.items()))
    return best


def whole_runs(s: Streams, threads: int, log, sets: int = 192, reps: int = 5, pictures_per_job=("auto", 1),
               fidelity: str = "fast") -> dict:
    """Whole runs against the camera-parallel floor over the same frame sets, interleaved: each rep times
    the floor (fresh decoders, ``sets`` sets, each camera decoding all its ``sets`` pictures in one job; for
    ``reference`` with FFmpeg's bgr24 conversion) and a whole ``dvpipe run`` of ``sets`` sets (fresh
    Runner, ``fidelity``, its own clock:
    ``RunResult.elapsed_s``) per ``run.pictures_per_job``; medians of per-rep ratios. Both sides pay
    their start (decoders' first pictures), which a round of a running method does not."""
    rounds = sets // SETS_PER_RUN
    got: dict[str, list] = {}
    for _ in range(reps):
        floor = PyAVParallel(s, threads, "yuv" if fidelity == "fast" else "bgr24")
        t0 = time.perf_counter()
        floor.run(rounds * SETS_PER_RUN)  # whole files: each camera's sets in one job, as the run has no barrier
        got.setdefault("floor", []).append((time.perf_counter() - t0) * 1e3 / (rounds * SETS_PER_RUN))
        got.setdefault("cpu floor", []).append(floor.cpu_ms_per_set)
        floor.close()
        for n in pictures_per_job:
            res = make_runner(s, threads, fidelity, frames=rounds * SETS_PER_RUN, pictures_per_job=n).run()
            got.setdefault(n, []).append(res.elapsed_s * 1e3 / res.sets)
    floor_ms, cpu_ms = np.array(got["floor"]), np.array(got["cpu floor"])
    out = {"floor_ms": float(np.median(floor_ms)), "cpu_floor_ms": float(np.median(cpu_ms)), "reps": reps,
           "sets": rounds * SETS_PER_RUN, "fidelity": fidelity}
    for n in pictures_per_job:
        ms = np.array(got[n])
        out[f"pictures_per_job={n}"] = {"ms": float(np.median(ms)), "to_parallel": float(np.median(ms / floor_ms)),
                                        "to_parallel_range": [float((ms / floor_ms).min()), float((ms / floor_ms).max())],
                                        "to_cpu_floor": float(np.median(ms / cpu_ms))}
    runs = [(n, out[f"pictures_per_job={n}"]) for n in pictures_per_job]
    log(f"whole runs ({s.n} x {s.w}x{s.h}, {threads} threads, {out['sets']} sets, medians of {reps} interleaved reps): "
        f"camera-parallel {'YUV' if fidelity == 'fast' else 'bgr24'} floor {out['floor_ms']:.2f} ms per set (its CPU "
        f"time / threads {out['cpu_floor_ms']:.2f} ms); " + "; ".join(
            f"dvpipe run {fidelity}, pictures_per_job {n}: {r['ms']:.2f} ms = {r['to_parallel']:.2f}x "
            f"({r['to_parallel_range'][0]:.2f}-{r['to_parallel_range'][1]:.2f}), {r['to_cpu_floor']:.2f}x the CPU time "
            f"/ threads" for n, r in runs))
    return out


class OpenCV(Method):
    name = "OpenCV VideoCapture"

    def __init__(self, s, threads):
        super().__init__(s, threads)
        self.caps = [None] * s.n

    def job(self, i):
        if self.caps[i] is None:
            self.caps[i] = cv2.VideoCapture(str(self.s.paths[i]), cv2.CAP_FFMPEG)
        ok, _ = self.caps[i].read()
        if not ok:
            raise RuntimeError("VideoCapture.read failed")

    def close(self):
        for c in self.caps:
            if c is not None:
                c.release()
        super().close()


class TorchCodec(Method):
    def __init__(self, s, threads, device="cpu"):
        super().__init__(s, threads)
        from torchcodec.decoders import VideoDecoder

        self.name = "torchcodec CPU" if device == "cpu" else "torchcodec CUDA (NVDEC)"
        # torchcodec needs a container (duration, frame times): the same access units in Matroska
        files = [s.mkv(i) for i in range(s.n)]
        self._make = lambda i: iter(VideoDecoder(str(files[i]), device=device, seek_mode="approximate"))
        self.its = [None] * s.n

    def job(self, i):
        if self.its[i] is None:
            self.its[i] = self._make(i)
        next(self.its[i])


class PyNvCodec(Method):
    """NVDEC through NVIDIA's PyNvVideoCodec (demuxer + decoder per camera), pictures left on the GPU (NV12)."""

    name = "PyNvVideoCodec (NVDEC)"

    def __init__(self, s, threads):
        super().__init__(s, threads)
        import PyNvVideoCodec as nvc

        self.nvc = nvc
        self.state = [None] * s.n

    def job(self, i):
        nvc = self.nvc
        if self.state[i] is None:
            demux = nvc.CreateDemuxer(filename=str(self.s.paths[i]))
            dec = nvc.CreateDecoder(gpuid=0, codec=demux.GetNvCodecId(), usedevicememory=True)
            self.state[i] = [demux, dec, iter(demux), []]
        demux, dec, packets, ready = self.state[i]
        while not ready:  # one presented picture per frame set
            pkt = next(packets, None)
            if pkt is None:
                break
            ready.extend(dec.Decode(pkt))
        if ready:
            ready.pop(0)


class DaliVideo(Method):
    """DALI's GPU video decoder on the encoded streams, all cameras in one pipeline run per frame set."""

    name = "DALI video decoder (GPU)"

    def __init__(self, s, threads):
        super().__init__(s, threads)
        from nvidia.dali import fn, pipeline_def, types

        data = [np.frombuffer(p.read_bytes(), np.uint8) for p in s.paths]

        @pipeline_def(batch_size=s.n, num_threads=threads, device_id=0)
        def pipe():
            enc = fn.external_source(source=lambda: data, dtype=types.UINT8, batch=True)
            return fn.experimental.decoders.video(enc, device="mixed")

        self.p = pipe()
        self.p.build()

    def run(self):  # DALI decodes whole sequences: measured per sequence, reported per frame set
        t = self.p.run()
        for _ in range(SETS_PER_RUN):
            self.step()
        return t


def _rig(s: Streams) -> dict:
    from conftest import rig_dict

    d = rig_dict([(s.w, s.h)] * s.n, encoding="h264")
    return d


def gpu_reason() -> str | None:
    try:
        import torch

        if torch.cuda.is_available():
            return None
        return f"no CUDA device (torch {torch.__version__})"
    except ImportError:
        return "torch is not installed"


def skip_reason(e: BaseException) -> str:
    """Why an optional peer did not load, in one line: the exception's type and first line."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"


def peers(s: Streams, threads: int, only=None) -> tuple[list[Method], dict]:
    ms: list[Method] = [PyAV(s, threads, "yuv"), PyAVParallel(s, threads, "yuv"), PyAVParallel(s, threads, "kernel"),
                        PyAV(s, threads, "write"),
                        PyAV(s, threads, "bgr24"), PyAVParallel(s, threads, "bgr24"),
                        Dvpipe(s, threads, "fast"), Dvpipe(s, threads, "reference"), DvpipeAhead(s, threads, "fast"),
                        RunnerMethod(s, threads, "fast"), RunnerMethod(s, threads, "reference"), OpenCV(s, threads)]
    if PICTURES_PER_JOB != "auto":  # auto is the default row
        ms.append(RunnerMethod(s, threads, "fast", pictures_per_job=PICTURES_PER_JOB))
    from dvpipe.video import FFmpegEngine

    ms.append(PyAV(s, threads, "yuv", err_detect=FFmpegEngine.ERR_DETECT))
    ms.append(PyAV(s, threads, "bgr24", sws_threads=0))
    skips: dict[str, str] = {}
    gpu = gpu_reason()
    for name, make, needs_gpu in (("torchcodec CPU", lambda: TorchCodec(s, threads), False),
                                  ("torchcodec CUDA (NVDEC)", lambda: TorchCodec(s, threads, "cuda"), True),
                                  ("PyNvVideoCodec (NVDEC)", lambda: PyNvCodec(s, threads), True),
                                  ("DALI video decoder (GPU)", lambda: DaliVideo(s, threads), True)):
        if only and not any(name.startswith(o) for o in only):
            continue
        if needs_gpu and gpu:
            skips[name] = gpu
            continue
        try:
            ms.append(make())
        except Exception as e:  # noqa: BLE001 - an optional peer that does not load here is a skip with its reason
            skips[name] = skip_reason(e)
    if RUNNER_AB:
        # the designs before, set by set (one picture per camera per set), as a live rig runs
        ms.append(RunnerMethod(s, threads, "fast", share_reader=False, pictures_per_job=1))
        ms.append(RunnerMethod(s, threads, "fast", sets_ahead=0, pictures_per_job=1))
    if ROWS:  # --rows: only these (prefixes); the rest are closed before they run
        keep = [m for m in ms if m.name.startswith(tuple(ROWS))]
        for m in ms:
            if m not in keep:
                m.close()
        return keep, skips
    if only:
        keep = [m for m in ms if m.name.startswith(("floor", "PyAV + bgr24", "dvpipe", "Runner"))
                or any(m.name.startswith(o) for o in only)]
        for m in ms:
            if m not in keep:
                m.close()
        ms = keep
    return ms, skips


# -- the harness -----------------------------------------------------------------------------------
def _cpu_busy_s() -> float:
    """Seconds of CPU time every process on the machine has used (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def bench(methods, rounds, warmup=3):
    """Interleaved rounds; also, per round, the share of the machine's cores other processes used
    (``OTHERS`` of the round, from ``/proc/stat`` minus this process's own CPU time)."""
    times = {m.name: [] for m in methods}
    others: list[float] = []
    ncpu = os.cpu_count() or 1
    for r in range(warmup + rounds):
        k = r % len(methods)
        busy0, own0, w0 = _cpu_busy_s(), _own_cpu_s(), time.perf_counter()
        for m in methods[k:] + methods[:k]:
            t0 = time.perf_counter()
            m.run()
            if r >= warmup:
                times[m.name].append((time.perf_counter() - t0) * 1e3 / SETS_PER_RUN)
                if m.name == PAR:  # its jobs' CPU time too
                    times.setdefault(CPU_FLOOR, []).append(m.cpu_ms_per_set)
        if r >= warmup:
            wall = time.perf_counter() - w0
            others.append(max(0.0, (_cpu_busy_s() - busy0) - (_own_cpu_s() - own0)) / (ncpu * wall))
    times[OTHERS] = others
    return times


OTHERS = "_others"  # bench(): per round, the share of the cores other processes used
PAR = "floor: decode, camera-parallel"
#: the camera-parallel floor's decoding CPU time per set / threads: what it would take spread evenly over the threads
CPU_FLOOR = "floor: decode CPU time / threads"
QUIET = 0.10  # rounds in which other processes used at most this share of the cores are "quiet"


def checks(s: Streams, log) -> dict:
    """Correctness of dvpipe's two fidelities on the first frames (independent references in numpy)."""
    nchk = 8
    res = {}
    outs = {}
    for fid in ("reference", "fast"):
        m = Dvpipe(s, 1, fid)
        got = []
        for _ in range(nchk):
            b = m.run(1)
            assert b.valid.all(), f"dvpipe {fid}: a frame was dropped"
            got.append(b.images[:, :, :s.h // 2, :s.w // 2].astype(np.float64))
        outs[fid] = np.stack(got)
        res[f"steps {fid}"] = m.steps
        m.close()
    # FFmpeg's own decode, presentation order
    want_ref, want_fast = [], []
    for i in range(s.n):
        dec = av.CodecContext.create("h264", "r")
        pics = []
        for data, pts, _ in s.first[i]:
            p = av.Packet(data)
            p.pts = pts
            pics += dec.decode(p)
        pics += dec.decode(None)
        pics.sort(key=lambda f: f.pts)
        r_i, f_i = [], []
        for f in pics[:nchk]:
            bgr = f.to_ndarray(format="bgr24").astype(np.float64)
            mean2 = bgr.reshape(s.h // 2, 2, s.w // 2, 2, 3).mean((1, 3))
            r_i.append(((mean2[..., ::-1] - MEAN) / STD).transpose(2, 0, 1))
            ky, y0, crv, cgu, cgv, cbu = yuv_matrix(f.colorspace, f.format.name == "yuvj420p" or int(f.color_range) == 2)
            y = np.frombuffer(f.planes[0], np.uint8).reshape(s.h, -1)[:, :s.w].astype(np.float64)
            u = np.frombuffer(f.planes[1], np.uint8).reshape(s.h // 2, -1)[:, :s.w // 2] - 128.0
            v = np.frombuffer(f.planes[2], np.uint8).reshape(s.h // 2, -1)[:, :s.w // 2] - 128.0
            yl = (y.reshape(s.h // 2, 2, s.w // 2, 2).mean((1, 3)) - y0) * ky
            rgb = np.stack([yl + crv * v, yl - cgu * u - cgv * v, yl + cbu * u], -1).clip(0, 255)
            f_i.append(((rgb - MEAN) / STD).transpose(2, 0, 1))
        want_ref.append(r_i)
        want_fast.append(f_i)
        if i == 0:
            res["torchcodec CPU (Matroska) vs FFmpeg rgb24 of the same pts: max abs"] = _torchcodec_check(s, pics[:nchk])
    want_ref = np.stack(want_ref, 1)
    want_fast = np.stack(want_fast, 1)
    res["reference vs FFmpeg bgr24 + numpy 2x2 + normalise: max abs"] = float(np.abs(outs["reference"] - want_ref).max())
    res["fast vs FFmpeg planes + numpy BT.601/709 formula: max abs"] = float(np.abs(outs["fast"] - want_fast).max())
    d = np.abs(outs["fast"] - outs["reference"])
    res["fast vs reference (normalised units)"] = {"mean": float(d.mean()), "p99": float(np.percentile(d, 99)),
                                                   "max": float(d.max())}
    for k, v in res.items():
        log(f"check: {k}: {v}")
    return res


def _torchcodec_check(s: Streams, pictures) -> object:
    """torchcodec's frames of camera 0 (read from :func:`mux_mkv`'s file) against FFmpeg's rgb24 of the same
    pictures: 0 when the Matroska file carries the stream unchanged; the reason when torchcodec does not load."""
    try:
        from torchcodec.decoders import VideoDecoder
    except Exception as e:  # noqa: BLE001 - optional peer
        return f"skipped: {skip_reason(e)}"
    dec = VideoDecoder(str(s.mkv(0)), device="cpu")
    return max(int(np.abs(dec[k].data.numpy().transpose(1, 2, 0).astype(int)
                          - p.to_ndarray(format="rgb24").astype(int)).max()) for k, p in enumerate(pictures))


def run_block(label, s: Streams, threads, rounds, log, only=None, run_timing=("fast",)):
    ms, skips = peers(s, threads, only)
    times = bench(ms, rounds)
    for m in ms:
        m.close()
    others = np.array(times.pop(OTHERS))
    quiet = others <= QUIET
    rows_quiet = _rows({n: list(np.array(t)[quiet]) for n, t in times.items()}) if quiet.sum() >= 3 else None
    rows = _rows(times)
    log(f"\n## {label}, {threads} thread{'s' if threads > 1 else ''} ({s.n} x {s.w}x{s.h} H.264, B-frames, "
        f"{s.bytes_per_set / 1024:.0f} KiB per frame set; {rounds} rounds; other processes used "
        f"{np.median(others) * 100:.0f}% of the cores (median of rounds, {others.min() * 100:.0f}-"
        f"{others.max() * 100:.0f}%); {int(quiet.sum())} rounds at <= {QUIET * 100:.0f}%)")
    _table(rows, log)
    if rows_quiet is not None:
        log(f"-- the {int(quiet.sum())} quiet rounds only:")
        _table(rows_quiet, log)
    for name, why in skips.items():
        log(f"{name:40s} skipped: {why}")
    runs = {}
    par_ms = rows.get(PAR, rows["floor: decode (PyAV -> YUV)"])["median_ms"]
    for fid in run_timing:  # `dvpipe run`'s own clock, a whole run after the interleaved rounds
        t = dvpipe_run_timing(s, threads, fid, min(s.sets - 1, 8 * SETS_PER_RUN))
        runs[fid] = t
        st = t["startup"]
        log(f"dvpipe run ({fid}): {t['sets']} sets in {t['elapsed_s']:.2f} s = {t['ms_per_set']:.2f} ms per set "
            f"({t['ms_per_set'] / par_ms:.2f}x the camera-parallel floor's "
            f"median; opening the sources took {st.get('open_ms', float('nan')):.0f} ms, before the clock); "
            f"first set {st.get('first_set_ms', float('nan')):.0f} ms after the start")
        fs = t["first_set"] = first_set_rounds(s, threads, fid)
        log(f"first set ({fid}, medians of {fs['rounds']} fresh starts): dvpipe run {fs['dvpipe run']:.0f} ms; floors: "
            f"FFmpeg until each camera's first picture {fs['reorder']:.0f} ms, the first IDR alone {fs['idr']:.0f} ms")
    out = {"rows": rows, "rows_quiet": rows_quiet, "others": others.tolist(), "skips": skips, "dvpipe_run": runs}
    if WHOLE_RUNS and threads > 1:
        out["whole_runs"] = {fid: whole_runs(s, threads, log, pictures_per_job=tuple(dict.fromkeys(("auto", PICTURES_PER_JOB))),
                                             fidelity=fid)
                             for fid in run_timing}
    return out


def _rows(times) -> dict:
    floor = np.array(times["floor: decode (PyAV -> YUV)"])
    par = np.array(times.get(PAR, floor))
    bgr = np.array(times.get("PyAV + bgr24", np.full(len(floor), np.nan)))
    bgr_par = np.array(times.get("PyAV + bgr24, camera-parallel", bgr))
    fast = np.array(times.get("dvpipe fast", floor))
    kernel = np.array(times.get("floor: decode+kernel, camera-parallel", np.full(len(floor), np.nan)))
    cpu = np.array(times.get(CPU_FLOOR, np.full(len(floor), np.nan)))
    rows = {}
    for name, t in times.items():
        t = np.array(t)
        rows[name] = {"median_ms": float(np.median(t)), "p90_ms": float(np.percentile(t, 90)),
                      "p10_ms": float(np.percentile(t, 10)),
                      "to_decode": float(np.median(t / floor)), "to_bgr": float(np.median(t / bgr)),
                      "to_parallel": float(np.median(t / par)), "to_bgr_parallel": float(np.median(t / bgr_par)),
                      "vs_dvpipe_fast": float(np.median(t / fast)), "to_kernel_parallel": float(np.median(t / kernel)),
                      "to_cpu_floor": float(np.median(t / cpu)),
                      "to_decode_p10": float(np.percentile(t, 10) / np.percentile(floor, 10)),
                      "to_bgr_p10": float(np.percentile(t, 10) / np.percentile(bgr, 10))}
    return rows


def _table(rows, log) -> None:
    log(f"{'method':40s} {'median':>7s} {'p90':>7s} {'p10':>7s} {'/decode':>7s} {'(p10)':>6s} {'/par':>6s} "
        f"{'/bgr':>6s} {'(p10)':>6s} {'/bgrpar':>7s} {'vs fast':>8s}")
    for name, r in rows.items():
        log(f"{name:40s} {r['median_ms']:7.2f} {r['p90_ms']:7.2f} {r['p10_ms']:7.2f} {r['to_decode']:7.2f} "
            f"{r['to_decode_p10']:6.2f} {r['to_parallel']:6.2f} {r['to_bgr']:6.2f} {r['to_bgr_p10']:6.2f} "
            f"{r['to_bgr_parallel']:7.2f} {r['vs_dvpipe_fast']:7.2f}x")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "nuscenes-sample"))
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--frames", type=int, default=48, help="frames per camera in the recording (default 48, 4 s; "
                    "looped as often as the rounds need)")
    ap.add_argument("--scaling", action="store_true", help="also 12 and 24 cameras and 6 x 3840x2160")
    ap.add_argument("--only", default="", help="peer rows to keep (prefixes, comma-separated); floors and dvpipe always run")
    ap.add_argument("--quick", action="store_true", help="8 rounds")
    ap.add_argument("--pictures-per-job", default="1", help="run.pictures_per_job of the second Runner row (the "
                    "first is the default, auto); also the second of the whole runs")
    ap.add_argument("--runner-ab", action="store_true", help="also the Runner with a reader thread per camera, and one frame set at a time (sets_ahead 0)")
    ap.add_argument("--no-4k", action="store_true", help="--scaling without the 6 x 3840x2160 block")
    ap.add_argument("--blocks", default="6", help="frame sets to run: 6, 12, 24, 4k (comma-separated; --scaling: all)")
    ap.add_argument("--rows", default="", help="keep only these rows (name prefixes, separated by commas not "
                    "followed by a space, so that 'floor: decode, camera-parallel' is one; the "
                    "set-by-set YUV floor always runs; ratios to a floor left out are to it instead): a 4K block with every "
                    "row needs ~18 GB")
    ap.add_argument("--whole-runs", action="store_true", help="also whole dvpipe runs (192 sets, pictures_per_job "
                    "auto and --pictures-per-job) against the camera-parallel floor over the same sets, interleaved")
    ap.add_argument("--decode-runs", action="store_true", help="also what decoding R consecutive pictures of a camera "
                    "at a time costs against one picture per camera in turn (1 thread)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rounds = 8 if a.quick else a.rounds
    global RUNNER_AB, PICTURES_PER_JOB, WHOLE_RUNS
    RUNNER_AB, WHOLE_RUNS = a.runner_ab, a.whole_runs
    PICTURES_PER_JOB = a.pictures_per_job if a.pictures_per_job == "auto" else int(a.pictures_per_job)
    if a.rows:
        # prefixes split at commas not followed by a space: row names have ", " in them ("floor: decode, camera-parallel")
        ROWS[:] = ["floor: decode (PyAV -> YUV)"] + [r.strip() for r in re.split(r",(?! )", a.rows) if r.strip()]
    blocks_wanted = {"6", "12", "24", "4k"} if a.scaling else {b.strip() for b in a.blocks.split(",")}
    if a.no_4k:
        blocks_wanted.discard("4k")
    threads = [int(t) for t in a.threads.split(",")]
    only = [o.strip() for o in a.only.split(",") if o.strip()] or None
    lines = []

    def log(msg=""):
        print(msg, flush=True)
        lines.append(msg)

    data = Path(a.data)
    if (data / "CAM_FRONT.jpg").exists():
        bases = [cv2.imread(str(data / f"{c}.jpg")) for c in CAMS]
        src = f"nuScenes frames from {data}"
    else:
        bases = [synthetic_scene(1600, 900, seed=k) for k in range(6)]
        src = "synthetic camera-like scenes (no --data)"
    log(f"# dvpipe video bench: PyAV {av.__version__}, FFmpeg {av.library_versions.get('libavcodec')}, "
        f"OpenCV {cv2.__version__}, {os.cpu_count()} CPUs; streams from {src}; load average at the start "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    out = {"source": src, "blocks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        sets = (rounds + 3) * SETS_PER_RUN + 8
        s = Streams(bases, 1600, 900, a.frames, Path(tmp), sets)
        log(f"encoded {s.n} x {a.frames} frames in {time.perf_counter() - t0:.1f} s")
        out["checks"] = checks(s, log)
        if a.decode_runs:
            out["decode_runs"] = decode_runs(s, log)
        if "6" in blocks_wanted:
            for t in threads:
                out["blocks"][f"6x1600x900/{t}"] = run_block("bevformer-tiny, 6 x 1600x900", s, t, rounds, log, only,
                                                             run_timing=("fast", "reference"))
        if blocks_wanted - {"6"}:
            srounds = max(8, rounds // 2)
            sets = (srounds + 3) * SETS_PER_RUN + 8
            blocks = []  # made one at a time: each block's streams and decoders are freed before the next
            if "12" in blocks_wanted:
                blocks.append(("12 x 1600x900", lambda: Streams(bases, 1600, 900, a.frames, Path(tmp, "x12"), sets,
                                                                copies=2)))
            if "24" in blocks_wanted:
                blocks.append(("24 x 1600x900", lambda: Streams(bases, 1600, 900, a.frames, Path(tmp, "x24"), sets,
                                                                copies=4)))
            if "4k" in blocks_wanted:
                blocks.append(("6 x 3840x2160", lambda: Streams(bases, 3840, 2160, a.frames // 2, Path(tmp, "4k"),
                                                                sets)))
            for lab, make in blocks:
                st = make()
                for t in threads:
                    out["blocks"][f"{lab}/{t}"] = run_block(f"bevformer-tiny, {lab}", st, t, srounds, log,
                                                            only=["floor", "PyAV", "dvpipe"])
                del st
    log("\n## targets (ratios from this run: medians of per-round ratios; of the quiet rounds where there were "
        "at least 3)")
    for key, b in out["blocks"].items():
        r = b["rows_quiet"] or b["rows"]
        log(f"{key}: {'quiet rounds' if b['rows_quiet'] else 'all rounds (fewer than 3 quiet ones)'}")
        if "dvpipe fast" in r and "dvpipe reference" in r:
            f, ref = r["dvpipe fast"], r["dvpipe reference"]
            log(f"{key}: dvpipe fast {f['median_ms']:.1f} ms = {f['to_decode']:.2f}x the YUV decode floor (target <= 1.15; "
                f"p10 {f['to_decode_p10']:.2f}x); dvpipe reference {ref['median_ms']:.1f} ms = {ref['to_bgr']:.2f}x "
                f"decode + bgr24 (target <= 1.15; p10 {ref['to_bgr_p10']:.2f}x)")
        for name in [n for n in r if n.startswith("Runner fast")]:
            if name in r:
                rf = r[name]
                log(f"{key}: {name} {rf['median_ms']:.1f} ms = {rf['to_parallel']:.2f}x the camera-parallel YUV floor "
                    f"(target <= 1.25; 4K <= 1.15), {rf['to_decode']:.2f}x the set-by-set floor, "
                    f"{rf['to_kernel_parallel']:.2f}x camera-parallel decode+kernel, {rf['to_cpu_floor']:.2f}x the "
                    f"decode CPU time / threads")
        if "Runner reference" in r:
            rr = r["Runner reference"]
            log(f"{key}: Runner reference {rr['median_ms']:.1f} ms = {rr['to_bgr_parallel']:.2f}x the camera-parallel "
                f"decode + bgr24 floor (target <= 1.15), {rr['to_bgr']:.2f}x set-by-set")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
