"""JPEG integrity: damaged frames are counted drops (or flagged), bytes after EOI are not damage, a
header declaring a huge frame is refused before any buffer is made.

The variants come from real photos (matplotlib's grace_hopper.jpg; the nuScenes frame where
../shared/data is present) through tools/corrupt_jpegs.py. The references are independent of
dvpipe: OpenCV's decode of the same bytes for the pictures; for libjpeg's verdict, Debian's djpeg
(exit status 2 on a warning, 1 on a fatal error; those tests skip where it is not installed) and,
always, the JPEG structure itself for the variants that cannot decode completely by construction
(entropy data cut short; a restart marker inside a scan that declares no restart interval).
"""
from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

import dvpipe as dv
from dvpipe.backends import _decode
from dvpipe.deploy.summary import classify_drop
from dvpipe.errors import CorruptFrameError, FrameError
from dvpipe.stages.base import FrameSpec, PixelFormat

from conftest import NUSCENES, rig_dict
from tolerances import tol

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import corrupt_jpegs as cj  # noqa: E402

DJPEG = shutil.which("djpeg")
needs_djpeg = pytest.mark.skipif(DJPEG is None, reason="djpeg (libjpeg-turbo-progs) not installed: no independent libjpeg verdict")
needs_sj = pytest.mark.skipif(_decode._sj is None, reason="libjpeg's verdict is read through simplejpeg")

PHOTOS = ["grace_hopper", "nuscenes"]
BACKENDS = ["cpu", "reference"]
#: fidelity -> stages: at ``fast`` the CPU backend decodes at 1/2 scale in the DCT domain
STAGES = {"reference": lambda: [dv.Decode()], "fast": lambda: [dv.Decode(), dv.Resize(scale=0.5)]}


@functools.lru_cache(maxsize=None)
def photo(name: str) -> bytes:
    """A real photo's bytes (skips when it is not on this machine)."""
    if name == "nuscenes":
        path = NUSCENES / "CAM_FRONT.jpg"
    else:
        mpl = pytest.importorskip("matplotlib.cbook")
        path = Path(mpl.get_sample_data("grace_hopper.jpg", asfileobj=False))
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path.read_bytes()


def cv2_decode(data: bytes, reduce: int = 1) -> np.ndarray:
    flags = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2}[reduce] | cv2.IMREAD_IGNORE_ORIENTATION
    return cv2.imdecode(np.frombuffer(data, np.uint8), flags)


@functools.lru_cache(maxsize=None)
def djpeg_flags(data: bytes) -> bool:
    """Whether libjpeg (djpeg) reports the data: a warning (exit 2) or a fatal error (exit 1)."""
    return subprocess.run([DJPEG, "-outfile", os.devnull], input=data, capture_output=True).returncode != 0


def structurally_incomplete(name: str) -> bool:
    """Variants of a Huffman-coded photo no decoder can read to the end: scan data missing (a Huffman
    decoder runs out of bits; an arithmetic one would pad with zeros, silently), or an RSTn marker in a
    scan that declares no restart interval."""
    return name.startswith(("truncated", "rst"))


@functools.lru_cache(maxsize=None)
def variants(name: str) -> dict[str, bytes]:
    data = photo(name)
    out = {"clean": data, **cj.damage_variants(data)}
    out.update({f"trailer_{k}": v for k, v in cj.trailer_variants(data).items()})
    return out


@functools.lru_cache(maxsize=None)
def run_all(name: str, backend: str, fidelity: str, on_corrupt: str = "drop"):
    """Every variant of one photo as one camera each, in one frame set: ``{variant: (valid, drop reason, image HWC, meta)}``."""
    vs = variants(name)
    h, w = cv2_decode(vs["clean"]).shape[:2]
    rig = dv.Rig.from_dict(rig_dict([(w, h)] * len(vs)))
    pipe = dv.Pipeline(rig, STAGES[fidelity](), backends=(backend,), fidelity=fidelity, on_corrupt=on_corrupt)
    batch = pipe.process({f"CAM{k}": v for k, v in enumerate(vs.values())})
    drops = dict(batch.drops)
    return {v: (bool(batch.valid[k]), drops.get(f"CAM{k}"), np.asarray(batch.images[k]).transpose(1, 2, 0), batch.metas[k])
            for k, v in enumerate(vs)}


def test_the_variants_are_real_damage_and_the_trailers_are_not():
    """The corruption tool's own check: every structurally incomplete variant changes OpenCV's picture; no trailer does."""
    vs = variants("grace_hopper")
    clean = cv2_decode(vs["clean"])
    for v, data in vs.items():
        img = cv2_decode(data)
        if structurally_incomplete(v):
            assert img is None or not np.array_equal(img, clean), v
        if v.startswith("trailer_"):
            assert np.array_equal(img, clean), v
    assert cj.damage_variants(vs["clean"]) == cj.damage_variants(vs["clean"])  # deterministic


@needs_sj
@pytest.mark.parametrize("fidelity", ["reference", "fast"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", PHOTOS)
def test_structurally_incomplete_jpegs_are_corrupt_drops(name, backend, fidelity):
    out = run_all(name, backend, fidelity)
    checked = [v for v in out if structurally_incomplete(v)]
    assert len(checked) >= 8
    for v in checked:
        valid, reason, _, _ = out[v]
        assert not valid and classify_drop(reason) == "corrupt", (v, reason)


@needs_djpeg
@needs_sj
@pytest.mark.parametrize("fidelity", ["reference", "fast"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", PHOTOS)
def test_dvpipe_drops_exactly_what_libjpeg_reports(name, backend, fidelity):
    """djpeg's verdict, variant by variant: reported -> a ``corrupt`` drop; not reported -> emitted.

    The variants djpeg does not report but whose pixels differ from the clean photo (a bit flip the
    Huffman decoder stays in step after) are damage no JPEG decoder can see: emitted, as libjpeg does.
    """
    out = run_all(name, backend, fidelity)
    reported = {v for v, data in variants(name).items() if djpeg_flags(data)}
    assert "clean" not in reported and not any(v.startswith("trailer_") for v in reported)
    assert len(reported) >= 15
    for v, (valid, reason, _, _) in out.items():
        if v in reported:
            assert not valid and classify_drop(reason) == "corrupt", (v, reason)
        else:
            assert valid, (v, reason)


@needs_sj
@needs_djpeg  # which bit flips are damage is djpeg's (the independent libjpeg) verdict
@pytest.mark.parametrize("fidelity", ["reference", "fast"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_flag_policy_keeps_the_picture_opencv_conceals(backend, fidelity):
    reduce = 2 if fidelity == "fast" and backend == "cpu" else 1  # the CPU's DCT-scaled decode at fast
    out = run_all("grace_hopper", backend, fidelity, on_corrupt="flag")
    vs = variants("grace_hopper")
    flagged = [v for v in out if structurally_incomplete(v) or (DJPEG and djpeg_flags(vs[v]))]
    for v, (valid, reason, img, meta) in out.items():
        if v in flagged:
            assert valid and meta.get("corrupt") is True and "corrupt" in meta["corrupt_reason"], (v, reason)
            if fidelity == "reference":
                assert np.array_equal(img, cv2_decode(vs[v], reduce)), v
            elif backend == "cpu":  # the 1/2-scale decode, whose chroma fast filters as the reference's
                # upsample + 2x2 mean would ([1,6,1]/8): on average within a grey level of OpenCV's 1/2
                # decode of the same damaged bytes (another or an empty picture is tens of levels off)
                diff = np.abs(img.astype(int) - cv2_decode(vs[v], 2).astype(int))
                assert diff.mean() < tol("damaged_dct_decode_mean", "fast", "cpu").mean_abs, (v, diff.mean())
        else:
            assert valid and not meta.get("corrupt"), (v, meta)


@needs_sj
@pytest.mark.parametrize("decoder", ["auto", "cv2"])
def test_decode_bgr_reports_damage_through_on_corrupt_then_returns_the_concealed_picture(decoder):
    data = photo("grace_hopper")
    h, w = cv2_decode(data).shape[:2]
    spec = FrameSpec(width=w, height=h, pixel_format=PixelFormat.ENCODED, encoding="jpeg")
    state: dict = {}
    assert np.array_equal(_decode.decode_bgr(data, spec, state=state, decoder=decoder), cv2_decode(data))  # primes the stream
    for bad in (cj.truncate_with_eoi(data, 0.5), cj.zero_block(data, 0.5), cj.bogus_rst(data, 1, 0)):
        seen: list[str] = []
        img = _decode.decode_bgr(bad, spec, state=state, decoder=decoder, on_corrupt=seen.append)
        assert len(seen) == 1 and seen[0].startswith("corrupt JPEG (libjpeg: ") and "\n" not in seen[0]
        assert np.array_equal(img, cv2_decode(bad))
        with pytest.raises(CorruptFrameError, match="premature end of data segment"):
            _decode.decode_bgr(bad, spec, state=state, decoder=decoder)
    # truncated without an EOI: the same one-line drop on both decoders, whatever the policy
    with pytest.raises(FrameError, match=r"^truncated JPEG \(no EOI marker after the scan data\)$"):
        _decode.decode_bgr(data[: len(data) // 2], spec, state=state, decoder=decoder, on_corrupt=lambda r: None)


@pytest.mark.parametrize("name", PHOTOS)
def test_trailers_after_eoi_decode_exactly_as_opencv(name):
    data = photo(name)
    h, w = cv2_decode(data).shape[:2]
    spec = FrameSpec(width=w, height=h, pixel_format=PixelFormat.ENCODED, encoding="jpeg")
    state: dict = {}
    _decode.decode_bgr(data, spec, state=state, decoder="auto")
    for v, blob in cj.trailer_variants(data).items():
        want = cv2_decode(blob)
        for kw in ({"decoder": "cv2"}, {"decoder": "auto"}, {"decoder": "auto", "state": state}):
            assert np.array_equal(_decode.decode_bgr(blob, spec, on_corrupt=pytest.fail, **kw), want), (v, kw)
    for backend in BACKENDS:
        out = run_all(name, backend, "reference")
        for v, (valid, reason, img, meta) in out.items():
            if v.startswith("trailer_"):
                assert valid and not meta.get("corrupt"), (backend, v, reason)
                assert np.array_equal(img, cv2_decode(variants(name)[v])), (backend, v)


@needs_sj
def test_a_stream_with_trailers_stays_on_the_fast_path(monkeypatch):
    data = photo("grace_hopper")
    h, w = cv2_decode(data).shape[:2]
    spec = FrameSpec(width=w, height=h, pixel_format=PixelFormat.ENCODED, encoding="jpeg")
    walks = []
    real = _decode.jpeg_frame_header
    monkeypatch.setattr(_decode, "jpeg_frame_header", lambda d: walks.append(1) or real(d))
    state: dict = {}
    for blob in cj.trailer_variants(data).values():
        assert np.array_equal(_decode.decode_bgr(blob, spec, state=state, decoder="auto"), cv2_decode(blob))
    assert len(walks) == 1


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


@pytest.mark.parametrize("decoder", ["auto", "cv2"])
def test_a_header_declaring_20000x20000_is_refused_before_any_buffer(decoder):
    blob = cj.header_only(photo("grace_hopper"))
    assert len(blob) < 1000
    spec = FrameSpec(width=20000, height=20000, pixel_format=PixelFormat.ENCODED, encoding="jpeg")
    before = _maxrss_mb()
    with pytest.raises(FrameError) as e:
        _decode.decode_bgr(blob, spec, state={}, decoder=decoder)
    assert _maxrss_mb() - before < 200  # a decode would touch 1.2 GB (20000 x 20000 x 3 bytes)
    msg = str(e.value)
    assert "\n" not in msg and "20000x20000" in msg and "64.0 MP" in msg and "max_pixels" in msg
    # a 100-pixel cap refuses a 12x10 frame: the cap is the argument's, not a constant
    tiny = cv2.imencode(".jpg", np.zeros((10, 12, 3), np.uint8))[1].tobytes()
    with pytest.raises(FrameError, match="above the decode cap"):
        _decode.decode_bgr(tiny, FrameSpec(width=12, height=10, pixel_format=PixelFormat.ENCODED, encoding="jpeg"),
                           decoder=decoder, max_pixels=100)


@needs_sj
def test_a_header_only_jpeg_under_a_raised_cap_is_corrupt_not_a_grey_frame():
    blob = cj.header_only(photo("grace_hopper"), 4000, 3000)  # 12 MP: under the default cap
    spec = FrameSpec(width=4000, height=3000, pixel_format=PixelFormat.ENCODED, encoding="jpeg")
    if DJPEG:
        assert djpeg_flags(blob)
    for decoder in ("auto", "cv2"):
        with pytest.raises(CorruptFrameError, match="corrupt JPEG"):
            _decode.decode_bgr(blob, spec, decoder=decoder)
        with pytest.raises(CorruptFrameError):
            _decode.decode_bgr(blob, spec, reduce=4, state={}, decoder=decoder)


@pytest.mark.parametrize("decoder", ["auto", "cv2"])
def test_a_warning_about_metadata_only_is_not_damage(decoder):
    data = cj.jfif_revision(photo("grace_hopper"), 2)
    if DJPEG:  # libjpeg warns about the header alone
        err = subprocess.run([DJPEG, "-outfile", os.devnull], input=data, capture_output=True).stderr.decode()
        assert err.strip() == "Warning: unknown JFIF revision number 2.01"
    h, w = cv2_decode(data).shape[:2]
    spec = FrameSpec(width=w, height=h, pixel_format=PixelFormat.ENCODED, encoding="jpeg")
    img = _decode.decode_bgr(data, spec, state={}, decoder=decoder, on_corrupt=pytest.fail)
    assert np.array_equal(img, cv2_decode(photo("grace_hopper")))


@pytest.mark.parametrize("decoder", ["auto", "cv2"])
def test_a_damaged_png_is_a_corrupt_drop(decoder):
    """libpng refuses a CRC error in IDAT (OpenCV conceals nothing): the frame is a one-line corrupt drop."""
    bgr = cv2_decode(photo("grace_hopper"))
    png = bytearray(cv2.imencode(".png", bgr)[1].tobytes())
    idat = png.index(b"IDAT")
    png[idat + 1000] ^= 0x10
    spec = FrameSpec(width=bgr.shape[1], height=bgr.shape[0], pixel_format=PixelFormat.ENCODED, encoding="png")
    with pytest.raises(CorruptFrameError) as e:
        _decode.decode_bgr(bytes(png), spec, state={}, decoder=decoder, on_corrupt=lambda r: None)
    assert classify_drop(str(e.value)) == "corrupt" and "\n" not in str(e.value)


def _cmyk(data: bytes) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("CMYK").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _arithmetic(data: bytes) -> bytes:
    jpegtran = shutil.which("jpegtran")
    if jpegtran is None:
        pytest.skip("jpegtran (libjpeg-turbo-progs) not installed: no arithmetic-coded JPEG")
    return subprocess.run([jpegtran, "-arithmetic"], input=data, capture_output=True, check=True).stdout


@pytest.mark.parametrize("coding", ["cmyk", "arithmetic"])
def test_codings_left_to_opencv_decode_as_before_and_their_damage_is_seen(coding):
    data = {"cmyk": _cmyk, "arithmetic": _arithmetic}[coding](photo("grace_hopper"))
    h, w = cv2_decode(data).shape[:2]
    spec = FrameSpec(width=w, height=h, pixel_format=PixelFormat.ENCODED, encoding="jpeg")
    for decoder in ("auto", "cv2"):
        img = _decode.decode_bgr(data, spec, state={}, decoder=decoder, on_corrupt=pytest.fail)
        assert np.array_equal(img, cv2_decode(data)), decoder
    bad = cj.bogus_rst(data, 1, 0)  # a marker inside a scan without restart interval
    if DJPEG:
        assert djpeg_flags(bad)
    for decoder in ("auto", "cv2"):
        with pytest.raises(CorruptFrameError):
            _decode.decode_bgr(bad, spec, state={}, decoder=decoder)
