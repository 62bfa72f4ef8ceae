"""The one tolerance table of the test suite.

Every numeric comparison a test makes between two computations of the same quantity takes its bound
from :data:`TABLE`, keyed by ``(what is compared, fidelity, backend family or dtype)``; each entry says
in one line why the bound is what it is. A test never writes a tolerance literal: it names the entry
(``tol("float_path", "reference", "float32").atol``) or calls :func:`kernel_bound`.

Units: ``atol`` is in the compared array's own units (grey levels for uint8 output, normalised units
after ``Normalise``); ``levels`` is an allowance in **uint8 grey levels**, converted to output units by
the smallest ``std`` of the stage list's ``Normalise`` (``1 / 57.12`` for the mmdet3d ImageNet std);
``frac`` is the largest fraction of the values allowed to use that allowance (rounding ties that fall
apart); ``mean_abs`` (when given) bounds the mean absolute error.

The DVPP steps' bounds are the backend's own published table (``dvpipe.backends.dvpp.TOLERANCES``,
documented in docs/dvpp.md): the tests read them from there rather than restating them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

__all__ = ["Bound", "TABLE", "tol", "kernel_bound", "grey_level"]


@dataclass(frozen=True)
class Bound:
    """``|got - want| <= atol + rtol * |want|`` everywhere, except on at most ``frac`` of the values,
    which may exceed it by up to ``levels`` grey levels (``levels * unit`` in output units)."""

    atol: float
    why: str
    rtol: float = 0.0
    levels: float = 0.0
    frac: float = 0.0
    mean_abs: Optional[float] = None
    p99_abs: Optional[float] = None  # bound on the 99th percentile of |err|, when given
    unit: float = 1.0  # output units per grey level (1 / std); set by kernel_bound

    def limit(self, want: np.ndarray) -> np.ndarray:
        return self.atol + self.rtol * np.abs(np.asarray(want, np.float64))

    def violation(self, err: np.ndarray, want: np.ndarray) -> str:
        """Why ``err = |got - want|`` breaks this bound, in words; ``""`` when within."""
        err = np.asarray(err, np.float64)
        limit = self.limit(want)
        over = err > limit
        if self.levels and over.any():
            far = err > limit + self.levels * self.unit
            if far.any():
                return (f"max |err| {err.max():.4g} > {self.atol:g} + {self.rtol:g}*|ref| + "
                        f"{self.levels:g} grey level(s) ({self.levels * self.unit:.4g}) [{self.why}]")
            if over.mean() > self.frac:
                return f"{over.mean():.3%} of the values use the rounding allowance (at most {self.frac:.3%}) [{self.why}]"
        elif over.any():
            return f"max |err| {err.max():.4g} > {self.atol:g} + {self.rtol:g}*|ref| [{self.why}]"
        if self.mean_abs is not None and err.size and err.mean() > self.mean_abs:
            return f"mean |err| {err.mean():.4g} > {self.mean_abs:g} [{self.why}]"
        if self.p99_abs is not None and err.size and np.percentile(err, 99) > self.p99_abs:
            return f"p99 |err| {np.percentile(err, 99):.4g} > {self.p99_abs:g} [{self.why}]"
        return ""

    @property
    def allclose(self) -> dict:
        """``atol`` / ``rtol`` for ``np.allclose`` / ``np.testing.assert_allclose`` (same inequality; only
        for bounds without a grey-level allowance)."""
        assert not self.levels, f"{self.why}: has a grey-level allowance; use Bound.violation"
        return {"atol": self.atol, "rtol": self.rtol}

    def check(self, got, want, unit: float = 1.0) -> None:
        """Assert ``got`` is within this bound of ``want`` (``unit``: output units per grey level)."""
        got = np.asarray(got, np.float64)
        want = np.asarray(want, np.float64)
        assert got.shape == want.shape, (got.shape, want.shape)
        problem = self.scaled(unit).violation(np.abs(got - want), want)
        assert not problem, problem

    def scaled(self, unit: float) -> "Bound":
        return dataclasses.replace(self, unit=unit)


_F16_ULP = 2.0 ** -10  # one float16 ulp, relative (10 fraction bits)
_F32_EPS = 2.0 ** -23

#: ``(what is compared, fidelity, backend family or dtype) -> Bound``; ``any`` matches every value.
TABLE: dict[tuple[str, str, str], Bound] = {
    # -- check_kernel: one kernel against the reference backend (tests/kernel_check.py) -------------
    ("kernel_copy", "any", "any"): Bound(
        0.0, "crop, pad, batch and decode at fidelity reference copy or decode the same pixels (libjpeg-turbo "
             "is the decoder of both cv2.imdecode and simplejpeg): bit-identical"),
    ("kernel_float", "any", "float32"): Bound(
        2e-6, "float32 kernels vs float64 math rounded to float32 (values <= 4.5 after the ImageNet std): a few "
              "float32 ulp (2^-23 ~ 1.2e-7 relative); 1e-6 relative for std = 1 values up to 255",
        rtol=1e-6),
    ("kernel_uint8_resize", "reference", "torch"): Bound(
        0.0, "torch resizes uint8 in float32 and rounds as OpenCV's 8-bit resize does; a value within float32 "
             "rounding of a .5 tie rounds apart by 1 grey level: measured on up to 1.07% of the values (a "
             "243x134 -> 121x67 crop of a sample photo; 0.5% at camera sizes, tests/backends/test_torch.py)",
        levels=1.0, frac=1.5e-2),
    ("kernel_uint8_resize", "fast", "torch"): Bound(
        0.0, "at fidelity fast torch keeps the resized uint8 image in float (no rounding before Normalise): "
             "half a grey level from the rounded reference, 1 where float32 noise meets the tie",
        levels=1.0, frac=1.0),
    ("kernel_dct_decode", "fast", "cpu"): Bound(
        0.0, "fidelity fast's DCT-domain 1/2 decode is not the bilinear resize of the full decode: the mean "
             "of dct_decode_mean (0.02 after std 57.12 = 1.14 grey levels; docs/performance.md), max 0.47 "
             "(27 levels) measured on samples/ (tests/backends/test_cpu.py)", levels=27.0, frac=1.0,
        mean_abs=0.02 * 57.12),
    ("kernel_aipp", "fast", "aipp"): Bound(
        0.0, "AIPP on DVPP's NV12: the JPEGD 4:2:0 chroma bound (dvpipe.backends.dvpp.TOLERANCES jpegd/samples, "
             "max 24 levels) plus AIPP's >>8 CSC truncation (<= 2 levels) and fp16 output (2^-11 relative)",
        rtol=2.0 ** -11, levels=26.0, frac=1.0),
    ("kernel_undistort", "any", "cpu"): Bound(
        2e-6, "cv2.remap quantises each source position to 1/32 pixel (INTER_TAB_SIZE) with 15-bit weights: "
              "an error of up to |gradient| / 64 per value, at most 4 grey levels on the photos' edges (measured "
              "4.0 with alpha 1), plus the uint8 rounding", rtol=1e-6, levels=5.0, frac=1.0),
    ("kernel_undistort", "any", "torch"): Bound(
        2e-6, "grid_sample in float32 vs the float64 remap, rounded to uint8: a .5 tie rounds apart by one grey "
              "level", rtol=1e-6, levels=1.0, frac=1e-2),
    ("kernel_undistort_float", "any", "torch"): Bound(
        2e-6, "grid_sample on float pixels: source positions in float32 normalised coordinates (~1e-5 px) "
              "times the image gradient: under 0.01 grey level (measured 0.005)", rtol=1e-6, levels=0.01,
        frac=1.0),
    # -- whole pipelines against the reference backend or a formula ---------------------------------
    ("float_path", "any", "float32"): Bound(
        1e-4, "float32 pipeline vs the float64 reference (decode -> resize -> normalise -> pad, camera sizes up "
              "to 1600x900, values <= 4.5 after the ImageNet std): float32 rounding, under 1/100 of a grey level"),
    ("float_path_relative", "any", "float32"): Bound(
        1e-4, "float32 normalise + pad with std = 1 (values up to 255): 1e-4 plus 1e-6 relative (8 float32 ulp)",
        rtol=1e-6),
    ("float_path_exact_sum", "any", "float32"): Bound(
        2e-6, "the exact 2x2-sum resize path: integer sums, then one float32 scale and normalise: a few float32 "
              "ulp of |x| <= 4.5"),
    ("float16_output", "any", "float16"): Bound(
        1e-4, "fp16 batch vs the reference rounded to fp16: one fp16 ulp (2^-10 relative; a float32 value near "
              "a rounding tie may round the other way) plus float32 noise", rtol=1e-3),
    ("uint8_resize", "any", "cpu"): Bound(
        1e-4, "OpenCV resizes uint8 in fixed point (11-bit weights), the reference in float64 then rounds: one "
              "grey level (1/std after Normalise) plus float32 noise", levels=1.0, frac=1.0),
    ("uint8_resize", "reference", "torch"): Bound(
        1e-4, "torch resizes uint8 in float32 and rounds as OpenCV's 8-bit resize does; a value within float32 "
              "rounding of a .5 tie rounds apart by 1 grey level, on at most 0.5% of the values (camera sizes)",
        levels=1.0, frac=5e-3),
    ("uint8_resize_real_frames", "reference", "torch"): Bound(
        1e-4, "the same on real frames at the worst scales: an exact .5 tie is decided by float noise in both "
              "backends (float32 / float64): measured on up to 1.9% of the values (nuScenes 1600x900 at scale 0.3, "
              "docs/torch.md)", levels=1.0, frac=2.5e-2),
    ("fast_vs_ffmpeg_bgr24", "fast", "cpu"): Bound(
        float("inf"), "fidelity fast's own YUV -> BGR (the picture's matrix and range) vs FFmpeg's fixed-point "
                      "bgr24 conversion, std = 1: about one grey level (a wrong matrix or range costs 4-8)",
        mean_abs=1.6, p99_abs=3.5),
    ("uint8_mean_rounding", "fast", "cpu"): Bound(
        0.5 / 57.12 + 1e-5, "fidelity fast rounds the uint8 2x2 mean before normalising: half a grey level "
                            "after std 57.12, plus float32 noise"),
    ("denormalised_channels", "any", "float32"): Bound(
        1e-3, "a grey image's three channels after x * std + mean of the float32 batch: float32 ulp of |x| <= "
              "4.5 (4.8e-7) times std 58: 3e-5, with margin"),
    ("native_kernel", "any", "float32"): Bound(
        1e-6, "the compiled 2x2 normalise kernel vs its float64 formula: a few float32 ulp of |x| <= 4.5"),
    ("yuv_formula", "fast", "float32"): Bound(
        1e-4, "the fused YUV 4:2:0 -> normalise kernel vs the float64 formula on FFmpeg's planes (|x| <= 4.5): "
              "float32 rounding"),
    ("yuv_formula_std1", "fast", "float32"): Bound(
        1e-3, "the same conversion with std = 1 (values up to 255): float32 BT.601 coefficients (~4e-6 "
              "relative) and ulp 1.5e-5 at 128"),
    ("video_mean2x2", "reference", "float32"): Bound(
        1e-5, "2x2 mean of FFmpeg's bgr24 integers, one float32 normalise: a few float32 ulp of |x| <= 4.5"),
    ("video_batch", "any", "float32"): Bound(
        1e-5, "decoded synthetic video frames through (x - 128) / 64 in float32: exact in binary, float32 "
              "rounding at most"),
    ("nv12_to_bgr", "any", "uint8"): Bound(
        0.0, "NV12 -> BGR in float32 vs the float64 formula, both rounded to uint8: a value within float32 "
             "rounding of a .5 tie rounds apart by 1 grey level, on under 0.1% of the values",
        levels=1.0, frac=1e-3),
    ("model_feature", "any", "float64"): Bound(
        1e-5, "a model's per-image mean feature over the float32 batch vs the float64 mean: float32 "
              "accumulation of values <= 4.5"),
    ("bench_mean_deviation", "fast", "cpu"): Bound(
        1e-5, "dvpipe bench: the CPU plan's mean deviation from the reference backend: float rounding only"),
    ("bench_mean_deviation", "fast", "dvpp"): Bound(
        0.05, "dvpipe bench: dvpp-sim's mean deviation after std 57 (~3 grey levels): the NV12 round trip's "
              "4:2:0 chroma (dvpipe.backends.dvpp.TOLERANCES 'batch' is 0.006 at camera sizes)"),
    ("bev_marker", "any", "float32"): Bound(
        0.15, "a BEV cell's feature vs the white its marker was rendered in, relative to max |white|: the "
              "bilinear sample at the projected point mixes in the marker's anti-aliased edge"),
    ("uint8_rounding_flip", "any", "uint8"): Bound(
        0.0, "two uint8 results of the same colour formula rounded separately (float64 vs fixed point or "
             "float32): a value near a .5 tie rounds apart by one grey level", levels=1.0, frac=1.0),
    ("uint8_resize", "fast", "torch"): Bound(
        0.0, "torch's uint8 batch at fidelity fast is rounded as at reference: a .5 tie in float32 rounds "
             "apart by one grey level, on under 1% of the values", levels=1.0, frac=1e-2),
    ("fast_unrounded_resize", "fast", "torch"): Bound(
        1e-4, "fidelity fast keeps the resized uint8 image in float (no rounding before Normalise): half a "
              "grey level from the rounded reference, plus float32 noise", levels=0.5, frac=1.0),
    ("nv12_fused", "any", "torch"): Bound(
        1e-4, "NV12 -> BGR inside the fused torch kernel vs the float64 conversion rounded to uint8: one grey "
              "level where a tie rounds apart (averaged down by the resize), plus float32 noise",
        levels=1.0, frac=1.0),
    ("colour_bars", "any", "uint8"): Bound(
        2.0, "75% colour bars' nominal BGR vs decoded raw YUV: the bars' YUV codes are integers (BT.601), the "
             "round trip rounds twice"),
    ("chroma_blur", "fast", "cpu"): Bound(
        0.5 + 1e-3, "the fast path's [1,6,1]/8 chroma blur vs its float64 definition: rounded to uint8 once "
                    "(half a grey level), plus float32 noise"),
    ("chroma_blur_luma", "fast", "cpu"): Bound(
        0.5, "the chroma blur keeps the luma where nothing clips: up to the one uint8 rounding"),
    ("dct_decode_mean", "fast", "cpu"): Bound(
        0.0, "fidelity fast's DCT-domain 1/2 decode vs the reference's bilinear resize of the full decode, "
             "normalised (std 57-58): mean <= 0.02 (docs/performance.md)", mean_abs=0.02),
    ("damaged_dct_decode_mean", "fast", "cpu"): Bound(
        0.0, "a damaged JPEG through the fast 1/2-scale decode vs OpenCV's 1/2 decode of the same bytes: on "
             "average within a grey level (another or an empty picture is tens of levels off)", mean_abs=1.0),
    ("vpc_bilinear_luma", "any", "dvpp"): Bound(
        1.0, "the software VPC's bilinear resize vs OpenCV INTER_LINEAR on the luma plane: fixed-point "
             "rounding, one grey level"),
    ("marker_centroid", "any", "px"): Bound(
        1.0, "a rendered marker's brightness centroid vs its projection through the output lidar2img: the "
             "anti-aliased disc sampled on the pixel grid and cut by the profile's resize: 1 px"),
    ("box_centre_2d", "any", "px"): Bound(
        2e-3, "nuScenes' annotated center_2d vs the projection of the 3D box centre through the output "
              "matrices: the devkit's own projection of the same box, stored in float32"),
    # -- geometry and metadata (float64) ----------------------------------------------------------------
    ("geometry", "any", "float64"): Bound(
        1e-9, "float64 products of calibration (entries up to ~1600) and box geometry: ~1e-12 rounding; 1e-9 "
              "absolute"),
    ("geometry_exact", "any", "float64"): Bound(
        1e-12, "a composed 3x3 image transform vs its hand-written product of small rationals: float64 rounding"),
    ("point_map", "any", "float64"): Bound(
        1e-6, "pixel coordinates mapped through the plan's 3x3 transform vs projected with the new lidar2img: "
              "float64 rounding of ~1e3 px through a division by depth"),
    ("undistort_points", "any", "px"): Bound(
        1e-6, "cv2.undistortPoints' iterative inverse of the lens model (its default stopping criteria) vs the exact "
              "projection through K' of the same point: 3e-8 px measured"),
    ("frame_rate", "any", "float64"): Bound(
        0.0, "a frame rate from the median interval of capture times (1e9 / 100_000_000 ns): float64 division "
             "of exact integers", rtol=1e-9),
    ("rotation", "any", "float64"): Bound(
        1e-6, "R^T R = I and det R = 1 for rotations written to 7 significant digits in YAML"),
    ("can_bus", "any", "float64"): Bound(
        1e-9, "can_bus entries (translation, quaternion, velocity) derived in float64 from the same poses"),
    # -- bounds named when the tests' own literals moved here (tests/test_tolerance_literals.py) ----------
    ("opencv_i420_rounding", "any", "uint8"): Bound(
        1.0, "a hand-written BT.601 limited-range NV12 encoder in float64 vs OpenCV's fixed-point "
             "COLOR_BGR2YUV_I420: one code where a value falls on a .5 boundary"),
    ("aipp_fp16_output", "any", "float16"): Bound(
        2e-3, "AIPP's fp16 output vs the float64 normalise (200 - 123.675) / 58.395 = 1.31: fp16 rounding of the "
              "variance, the mean's fraction and the result (2^-11 relative each, ~1.5e-3 together)"),
    ("aipp_csc_coefficients", "any", "int"): Bound(
        1.0, "an ATC CSC matrix entry is an integer near 256 x the textbook coefficient: within one unit"),
    ("numpy_model_vs_torch", "any", "float32"): Bound(
        1e-4, "the pure-numpy model example vs the same model in torch, both float32 (convolutions summed in "
              "another order): 1e-4 relative, atol scaled by the output's largest magnitude", rtol=1e-4),
    ("grid_sample_numpy", "any", "float32"): Bound(
        1e-5, "the numpy bilinear grid_sample in float64 vs torch's in float32 on features ~1: float32 rounding"),
    ("dvpp_sim_resize_mean", "fast", "dvpp"): Bound(
        0.0, "the software device's JPEGD + VPC resize to 800x450 vs OpenCV's decode + INTER_LINEAR resize: the "
             "NV12 round trip's 4:2:0 chroma, under 3 grey levels on average", mean_abs=3.0),
    ("fp16_input_mean", "any", "float32"): Bound(
        0.0, "a model's per-image mean of its fp16 input, accumulated in float32, vs numpy's mean of the same "
             "fp16 values: float32 accumulation", rtol=1e-6),
    ("undistort_torch_vs_cpu", "any", "uint8"): Bound(
        1.0, "torch's grid_sample vs cv2.remap, both rounded to uint8: one grey level where a tie rounds apart"),
    ("undistort_float", "any", "float32"): Bound(
        1e-4, "the pipeline's remap of a normalised smooth float32 image vs cv2.undistort of the same image: "
              "1/32-pixel position quantisation times the small gradient"),
    ("raw_yuv_encoder", "any", "uint8"): Bound(
        1.0, "the raw YUV encoder vs the textbook formula (4-decimal coefficients) or OpenCV's fixed-point "
             "encoder: one code where a value falls on a .5 boundary"),
    ("rounded_once", "any", "uint8"): Bound(
        0.5 + 1e-9, "an integer code vs the float64 formula it was rounded from: half a code, plus float64 noise"),
    ("yuv_round_trip", "any", "uint8"): Bound(
        2.0, "BGR -> full-range YUV -> BGR, rounded to integer codes at each step: two grey levels"),
    ("same_cpu_kernels", "any", "float32"): Bound(
        1e-4, "the same CPU kernels in two pipelines (one planning a device route for other cameras): float32 "
              "noise at most"),
    ("bevdet_reference", "any", "float32"): Bound(
        1e-5, "BEVDet's reference (Pillow resize, torchvision ToTensor + Normalize in float32) vs dvpipe's "
              "float32 path on the same uint8 pixels: float32 rounding of |x| <= 2.7"),
    ("bevdet_post_rot", "any", "float32"): Bound(
        1e-6, "BEVDet's post_rot, built in torch float32, vs dvpipe's float64: float32 rounding of entries <= 1"),
    ("bevdet_post_tran", "any", "float32"): Bound(
        1e-4, "BEVDet's post_tran, built in torch float32, vs dvpipe's float64: float32 rounding of offsets of "
              "hundreds of pixels (ulp 3e-5 at 256)"),
    ("reference_intrinsics", "any", "float32"): Bound(
        1e-6, "a reference repository's intrinsics updated by the resize and crop in float32 vs dvpipe's float64: "
              "float32 rounding, relative", rtol=1e-6),
    ("reference_lidar2img", "any", "float32"): Bound(
        1e-5, "a reference repository's lidar2img composed in float32 vs dvpipe's float64 (entries up to ~1e3): "
              "float32 rounding", rtol=1e-6),
    ("geometry_relative", "any", "float64"): Bound(
        1e-9, "float64 products of calibration computed in another order (entries up to ~1e3)", rtol=1e-9),
    ("projection", "any", "float64"): Bound(
        1e-6, "a sample's stored pixel coordinates and depths vs their projection through the rig recomputed in "
              "float64: the stored values' rounding"),
    ("kitti_focal", "any", "px"): Bound(
        0.5, "the sample rig's KITTI focal length vs KITTI's published 721.5377 px: within half a pixel"),
    ("timestamp_s", "any", "float64"): Bound(
        1e-6, "a microsecond timestamp converted to seconds in float64: 1 us"),
    ("camera_spread_ns", "any", "ns"): Bound(
        1e3, "a spread or gap computed from microsecond timestamps vs the same figure from the scene file: 1 us"),
    ("json_float_rounding", "any", "float64"): Bound(
        1e-12, "matrix products written to JSON on two machines: numpy's SIMD paths sum in different orders, "
               "last-digit differences", rtol=1e-12),
    ("ns_mean", "any", "float64"): Bound(
        0.0, "a mean of integer nanoseconds computed two ways in float64", rtol=1e-9),
    ("percentile_ns", "any", "float64"): Bound(
        1e-6, "percentiles of integer nanoseconds from the exporter vs numpy's: float64 interpolation rounding"),
    ("hand_rounded_figure", "any", "float64"): Bound(
        0.0, "a figure the test writes to 7 significant digits (5.425347)", rtol=1e-5),
    ("json_rounded_ms", "any", "ms"): Bound(
        1e-3, "a capacity figure (ms or fps) the JSON report rounds to 3 decimals"),
    ("json_rounded_relative", "any", "ms"): Bound(
        0.0, "a capacity figure of a few ms the JSON report rounds to 3 decimals, as a relative bound", rtol=1e-3),
    ("integer_ns", "any", "ns"): Bound(
        1.0, "a duration or capture time rounded to integer nanoseconds"),
    ("pts_90khz", "any", "ns"): Bound(
        6000.0, "a capture time carried as an MP4 pts in 1/90000 s (11.1 us) vs the scene's: half a tick"),
    ("pts_us", "any", "ns"): Bound(
        1000.0, "a capture time derived from a pts in microseconds vs the reference's: 1 us"),
    ("frame_match_window", "any", "ns"): Bound(
        40e6, "a camera's picture belongs to the frame set within 40 ms of the set's time (under half the 100 ms "
              "set period of the test's cameras)"),
    ("rtsp_capture_jitter", "any", "ns"): Bound(
        2e6, "an RTSP picture's capture time vs its place at the nominal frame period: 2 ms of RTP clock "
             "rounding and server pacing"),
    ("rtsp_session_start", "any", "frames"): Bound(
        4.0, "the test RTSP server reports each session's start from its pipeline position: within ~4 frames"),
    ("vivid_colour_bars", "any", "uint8"): Bound(
        3.0, "vivid's 75% bars (191 or 0 per primary) through 8-bit limited-range Y'CbCr and back: the "
             "driver's and the conversion's roundings, 1-2 levels; a wrong matrix, range or byte order is 20+"),
    ("v4l2_frame_period", "any", "s"): Bound(
        0.02, "a driver's timestamps one frame apart (0.1 s at 10 fps): vivid stamps each frame from its "
              "own frame counter, a few ms of jitter on an emulated CPU; a stamp taken at the read instead is "
              "off by the reader's scheduling, a frame counter mistaken for time by whole periods"),
    ("rtp_pts", "any", "ns"): Bound(
        100_000.0, "a pts from a 90 kHz RTP timestamp vs the file's pts in its own time base: 0.1 ms of rounding"),
    ("rtsp_sender_origin", "any", "ns"): Bound(
        300e6, "a client's sender clock of pts 0 vs GStreamer's report of the session's start, which reads the "
               "pipeline's position once (~100 ms late, tens of ms of jitter); a wrong NTP epoch, fraction or "
               "clock rate is seconds off"),
    ("rtsp_sender_origin_clients", "any", "ns"): Bound(
        60e6, "dvpipe's and FFmpeg's clients' sender-clock offsets from that report, two sessions apart: the "
              "report's jitter"),
}


def tol(what: str, fidelity: str = "any", family: str = "any") -> Bound:
    """The entry for ``(what, fidelity, family)``, falling back to ``any`` for fidelity then family."""
    for key in ((what, fidelity, family), (what, "any", family), (what, fidelity, "any"), (what, "any", "any")):
        if key in TABLE:
            return TABLE[key]
    # an "any" in the request matches every entry; it must then be unambiguous
    found = [k for k in TABLE if k[0] == what and fidelity in ("any", k[1]) and family in ("any", k[2])]
    if len(found) == 1:
        return TABLE[found[0]]
    raise KeyError(f"no single tolerance for {(what, fidelity, family)} in tests/tolerances.py "
                   f"(entries for {what!r}: {[k for k in TABLE if k[0] == what]})")


def grey_level(stages: Sequence) -> float:
    """Output units of one uint8 grey level after the stage list's ``Normalise`` (1 without one)."""
    for st in stages:
        if st.op == "normalise":
            return 1.0 / min(st.std)
    return 1.0


def _uint8_resize(ops: Sequence[str], stages: Sequence) -> bool:
    """Whether the kernel's run resizes uint8 pixels (no Normalise before its resize in the stage list)."""
    if "resize" not in ops:
        return False
    for st in stages:
        if st.op == "normalise":
            return False
        if st.op == "resize":
            return True
    return False


def kernel_bound(family: str, ops: Sequence[str], stages: Sequence, fidelity: str, dtype: str) -> Bound:
    """The bound for a kernel of ``family`` covering ``ops`` inside ``stages`` (at ``fidelity``, batch of
    ``dtype``) against the reference backend, in the batch's units (:func:`grey_level` per grey level)."""
    unit = grey_level(stages)
    if family == "dvpp":  # the backend's published table, for the bundled sample photos
        from dvpipe.backends.dvpp import TOLERANCES
        from dvpipe.backends.dvpp.support import TOLERANCE_WHY

        step = "jpegd+vpc.resize" if "resize" in ops else "jpegd"
        b = TOLERANCES[(step, "samples")]
        return Bound(0.0, f"dvpipe.backends.dvpp.TOLERANCES[{step!r}, 'samples']: {TOLERANCE_WHY[step]}",
                     levels=b["max_abs"], frac=1.0, mean_abs=b["mean_abs"] * unit, unit=unit)
    if family == "aipp":
        return tol("kernel_aipp", fidelity, "aipp").scaled(unit)
    if family == "cpu" and fidelity == "fast" and ops[:2] == ("decode", "resize"):
        b = tol("kernel_dct_decode", "fast", "cpu")
        return dataclasses.replace(b, mean_abs=b.mean_abs * unit, unit=unit)  # its mean_abs is in grey levels
    if "undistort" in ops:
        if family == "torch":
            return tol("kernel_undistort" if dtype == "uint8" else "kernel_undistort_float", fidelity, "torch").scaled(unit)
        return tol("kernel_undistort", fidelity, "cpu").scaled(unit)
    if _uint8_resize(ops, stages):
        base = tol("kernel_uint8_resize", fidelity, "torch") if family == "torch" else tol("uint8_resize", fidelity, "cpu")
        if dtype != "uint8":  # the flipped level, then the float rounding of what follows
            f = tol("float16_output", fidelity, dtype) if dtype == "float16" else tol("kernel_float", fidelity, dtype)
            base = Bound(f.atol, f"{base.why}; then {f.why}", f.rtol, base.levels, base.frac)
        return base.scaled(unit)
    if dtype == "uint8":
        return tol("kernel_copy").scaled(unit)
    if dtype == "float16":
        return tol("float16_output", fidelity, dtype).scaled(unit)
    return tol("kernel_float", fidelity, dtype).scaled(unit)
