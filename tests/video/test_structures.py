"""Real GOP structures through `dvpipe run`'s machinery: B-frames (H.264 b-pyramid, libx265 defaults),
open GOPs, VFR, a MOV edit list, Annex-B elementary streams with B-frames, a damaged packet in an
MP4, and a no-B-frame control (issue 12, points 1 and 4).

The media come from tools/make_test_media.py (PyAV encoders, a few KB each, made once per session).
The reference is FFmpeg itself: PyAV decoding the same file sequentially, the ordinary way
(``av.open(path).decode(video=0)``: FFmpeg's demux, decode, reordering and edit lists), matched by
pts. Every emitted frame must be the reference picture of its own pts, pixel for pixel (fidelity
``reference``, CPU, decode only: the batch is the decoded BGR as float32 CHW), with capture time
``start_ns + pts``, in increasing pts order, and emitted + dropped must equal the frames of the
file (FFmpeg's count).
"""
from __future__ import annotations

import importlib.util
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dvpipe import Decode, Pipeline, Rig
from dvpipe.deploy import Runner, load_deployment
from dvpipe.deploy.config import SourceConfig
from dvpipe.deploy.sources import open_source
from dvpipe.testing.deployments import tiny_rig

from tolerances import tol

ROOT = Path(__file__).resolve().parents[2]
START_NS = 1_700_000_000_123_456_789  # a start time with every digit in use
ES_FPS = 25.0


def _load_media():
    spec = importlib.util.spec_from_file_location("make_test_media", ROOT / "tools" / "make_test_media.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


media = _load_media()

CONTAINER_FILES = ["h264_bframes", "h265_default", "h264_open_gop", "h264_vfr", "h264_editlist_mov",
                   "h264_no_bframes"]
ES_FILES = ["h264_annexb", "h265_annexb"]
CORRUPT_FILES = ["h264_corrupt", "h264_corrupt_slice"]
CODEC = {"h264_bframes": "h264", "h265_default": "h265", "h264_open_gop": "h264", "h264_vfr": "h264",
         "h264_editlist_mov": "h264", "h264_no_bframes": "h264", "h264_annexb": "h264", "h265_annexb": "h265",
         "h264_corrupt": "h264", "h264_corrupt_slice": "h264"}


@pytest.fixture(scope="session")
def media_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("video_structures")


_made: dict[str, Path] = {}
_refs: dict[tuple, list] = {}


def media_file(name: str, folder: Path) -> Path:
    if name not in _made:
        _made[name] = media.make(name, folder)
    return _made[name]


def reference(path: Path, es: bool = False) -> list[tuple[int, np.ndarray, bool]]:
    """FFmpeg's decode: ``[(capture_epoch_ns, BGR, corrupt_flag)]`` in output order, capture = START + pts
    (an elementary stream has no timestamps: START + k / fps, k = the frame's place in presentation order)."""
    key = (str(path), es)
    if key not in _refs:
        out = []
        for k, r in enumerate(media.reference_frames(path)):
            if es:
                t = START_NS + round(k * 1e9 / ES_FPS)
            else:
                assert r["pts"] is not None, f"{path.name}: FFmpeg gives frame {k} no pts"
                t = START_NS + round(Fraction(r["pts"]) * r["time_base"] * 10**9)
            out.append((t, r["image"], r["corrupt"]))
        _refs[key] = out
    return _refs[key]


def deployment(path: Path, encoding: str, width: int, height: int, es: bool = False, **source) -> dict:
    """One camera of the video's size; its source the file; decode only, reference fidelity, cpu;
    recorded input as fast as possible (readers block, nothing is dropped for lateness)."""
    if es:
        src = {"type": "elementary", "uri": str(path), "codec": CODEC[path.stem.split(".")[0]],
               "fps": ES_FPS, "start_ns": START_NS}
    else:
        src = {"type": "video", "uri": str(path), "start_ns": START_NS}
    src.update(source)
    return {
        "name": "video-structures",
        "rig": tiny_rig(["CAM0"], width, height, encoding=encoding),
        "pipeline": {"stages": ["decode"], "fidelity": "reference", "backends": ["cpu"]},
        "source": src,
        "cameras": [{"name": "CAM0"}],
        "sync": {"tolerance_ms": 5, "on_late": "mask", "deadline_ms": 10_000},
        "run": {"realtime": False, "loop": False, "queue_size": 4, "stall_timeout_ms": 10_000},
        "outputs": {"metrics": False},
    }


def run_collect(path: Path, encoding: str, width: int, height: int, es: bool = False, **source):
    """Run the deployment; returns ``(frames, accounting)``: ``frames`` = ``[(capture_epoch_ns, HxWx3 float32
    BGR)]`` of every valid slot, in emission order (copied: the batch is a ring buffer)."""
    r = Runner(load_deployment(deployment(path, encoding, width, height, es, **source)), write_outputs=False)
    got = []
    for rb in r.batches():
        b = rb.batch
        if not b.valid[0]:
            continue
        it = rb.frame_set.members.get("CAM0")
        assert it is not None, "a valid slot without a frame (reuse is off)"
        assert b.metas[0]["capture_epoch_ns"] == it.frame.capture_epoch_ns
        got.append((int(it.frame.capture_epoch_ns), np.asarray(b.images[0]).transpose(1, 2, 0).copy()))
    result = r.finish()
    acc = result.accounting
    assert acc.check() == []
    return got, acc


def check_against_reference(got, ref, label: str) -> None:
    """Every emitted frame = FFmpeg's picture of its pts (exactly), capture = START + pts (1 us),
    emitted in increasing pts order, none twice."""
    times = [t for t, _ in got]
    assert times == sorted(times) and len(set(times)) == len(times), \
        f"{label}: frames not in increasing pts order (or repeated): {[(t - START_NS) / 1e6 for t in times][:20]} ms"
    ref_times = np.array([t for t, _, _ in ref], dtype=np.int64)
    for t, img in got:
        j = int(np.argmin(np.abs(ref_times - t)))
        assert abs(int(ref_times[j]) - t) <= tol("pts_us").atol, \
            f"{label}: emitted capture {(t - START_NS) / 1e6:.3f} ms matches no frame pts of the file"
        want = ref[j][1].astype(np.float32)
        diff = np.abs(img - want)
        assert diff.max() == 0, (f"{label}: frame at pts {(t - START_NS) / 1e6:.3f} ms differs from FFmpeg's "
                                 f"picture of that pts (max {diff.max():.0f}, {np.mean(diff > 0):.0%} of values); "
                                 f"it is FFmpeg's picture {_which(img, ref)}")


def _which(img, ref) -> str:
    for k, (t, r, _) in enumerate(ref):
        if np.array_equal(img, r.astype(np.float32)):
            return f"#{k} (pts {(t - START_NS) / 1e6:.3f} ms)"
    return "of no frame"


def drops(acc) -> dict:
    return {k: v for k, v in acc.dropped["CAM0"].items() if v}


# ------------------------------------------------------------------------------ the media themselves
def test_the_media_have_the_structures_they_claim(media_dir):
    """Guards the generator: B-frames reorder (pts != dts), the open GOP has leading pictures before
    its I-frames, the MOV has an edit list whose cut packets read back as discard, VFR durations vary."""
    for name in CONTAINER_FILES + CORRUPT_FILES:
        pk = media.packet_info(media_file(name, media_dir))
        reorder = sum(p["pts"] != p["dts"] for p in pk)
        if name == "h264_no_bframes":
            assert reorder == 0
            assert [p["pts"] for p in pk] == sorted(p["pts"] for p in pk)
        else:
            assert [p["pts"] for p in pk] != sorted(p["pts"] for p in pk), f"{name}: no reordering"
    og = media.packet_info(media_file("h264_open_gop", media_dir))
    keys = [i for i, p in enumerate(og) if p["key"]]
    assert len(keys) >= 3 and any(og[i + 1]["pts"] < og[i]["pts"] for i in keys[1:]), "no leading B-frames"
    mov = media_file("h264_editlist_mov", media_dir)
    elst = media.mov_edit_lists(mov)
    assert elst and elst[0] and elst[0][0][1] > 0, elst  # the media starts later than the file's pts 0
    pk = media.packet_info(mov)
    assert sum(p["discard"] for p in pk) == media.EDIT_CUT
    assert len(media.reference_frames(mov)) == len(pk) - media.EDIT_CUT
    vfr = sorted(p["pts"] for p in media.packet_info(media_file("h264_vfr", media_dir)))
    assert len(set(np.diff(vfr))) > 10
    for name in ES_FILES:
        assert len(media.reference_frames(media_file(name, media_dir))) == 40


# ------------------------------------------------------------------------------ clean files
# access units (camera encoding = the file's codec, decoded as a plan step) for every file; raw
# (decoded in the source) for the container files (an elementary source takes h264/h265 cameras only)
CLEAN_CASES = [(n, "access_units") for n in CONTAINER_FILES + ES_FILES] + [(n, "raw") for n in CONTAINER_FILES]


@pytest.mark.parametrize("name,path_kind", CLEAN_CASES)
def test_every_frame_once_in_pts_order_equal_to_ffmpeg(media_dir, name, path_kind):
    es = name in ES_FILES
    path = media_file(name, media_dir)
    ref = reference(path, es)
    h, w = ref[0][1].shape[:2]
    encoding = CODEC[name] if path_kind == "access_units" else "raw"
    got, acc = run_collect(path, encoding, w, h, es)
    label = f"{name} ({encoding}; {len(got)} emitted, drops {drops(acc)}, FFmpeg {len(ref)} frames)"
    check_against_reference(got, ref, label)
    n_drop = sum(drops(acc).values())
    assert acc.entered["CAM0"] == acc.emitted["CAM0"] + n_drop
    assert len(got) + n_drop == len(ref), (f"{label}: {len(got)} emitted + {n_drop} dropped {drops(acc)} "
                                           f"!= FFmpeg's {len(ref)} frames")
    # a clean file: no drops at all, so every FFmpeg frame was emitted
    assert drops(acc) == {} and len(got) == len(ref), f"{label}: {len(got)}/{len(ref)} emitted, drops {drops(acc)}"


# ------------------------------------------------------------------------------ a damaged packet
@pytest.mark.parametrize("path_kind", ["access_units", "raw"])
@pytest.mark.parametrize("name", CORRUPT_FILES)
def test_a_bad_packet_costs_only_the_frames_it_damages(media_dir, name, path_kind):
    path = media_file(name, media_dir)
    ref = reference(path)
    clean = reference(media.clean_path(path))
    info = media.corrupt_info(path)
    pk = media.packet_info(path)
    h, w = clean[0][1].shape[:2]
    to_ns = lambda p: START_NS + round(Fraction(p["pts"]) * p["time_base"] * 10**9)  # noqa: E731
    # damaged = FFmpeg's picture differs from the clean twin's, or FFmpeg has none for that pts
    ref_by_t = {t: img for t, img, _ in ref}
    damaged = {t for t, img, _ in clean if t not in ref_by_t or not np.array_equal(ref_by_t[t], img)}
    assert to_ns(pk[info["index"]]) in damaged and len(damaged) >= 5  # the generator did damage the GOP
    # frames decoded before the bad packet, and from the next keyframe on (closed GOPs), are intact
    required = {to_ns(p) for p in pk[:info["index"]]} | {to_ns(p) for p in pk[info["next_key"]:]}
    assert not required & damaged

    encoding = "h264" if path_kind == "access_units" else "raw"
    got, acc = run_collect(path, encoding, w, h)
    d = drops(acc)
    label = f"{name} ({encoding}; {len(got)} emitted, drops {d}, the file has {len(clean)} frames)"
    # the camera goes on after the bad packet (decode index info["index"]): every frame is accounted
    assert acc.entered["CAM0"] == len(clean), \
        f"{label}: the source delivered {acc.entered['CAM0']} frames (did the camera end at the bad packet, " \
        f"decode index {info['index']}?)"
    assert len(got) + sum(d.values()) == len(clean), label
    assert set(d) <= {"corrupt", "keyframe_wait"} and d.get("corrupt", 0) >= 1, f"{label}: drop reasons"
    emitted = [t for t, _ in got]
    missing = sorted((t - START_NS) / 1e6 for t in required - set(emitted))
    assert not missing, f"{label}: {len(missing)} intact frames not emitted, at {missing[:8]} ms ..."
    check_against_reference(got, ref, label)
    bad = sorted((t - START_NS) / 1e6 for t in set(emitted) & damaged)
    assert not bad, f"{label}: damaged frames emitted as valid at {bad} ms"


# ------------------------------------------------------------------------------ Pipeline directly
@pytest.mark.parametrize("encoding", ["codec", "raw"])
@pytest.mark.parametrize("name", ["h264_bframes", "h265_default", "h264_open_gop", "h264_editlist_mov"])
def test_pipeline_fed_by_the_video_source_in_order(media_dir, name, encoding):
    """A user's own loop: the video source's items, in order, through sequential Pipeline.process."""
    path = media_file(name, media_dir)
    ref = reference(path)
    h, w = ref[0][1].shape[:2]
    enc = CODEC[name] if encoding == "codec" else "raw"
    rig = Rig.from_dict(tiny_rig(["CAM0"], w, h, encoding=enc))
    src = open_source(rig.cameras[0], SourceConfig("video", str(path), {"start_ns": START_NS}))
    pipe = Pipeline(rig, [Decode()], ("cpu",), fidelity="reference")
    got, reasons = [], []
    src.open()
    try:
        while (it := src.read()) is not None:
            b = pipe.process({"CAM0": it.frame})
            if b.valid[0]:
                assert b.metas[0]["capture_epoch_ns"] == it.frame.capture_epoch_ns
                got.append((int(it.frame.capture_epoch_ns), np.asarray(b.images[0]).transpose(1, 2, 0).copy()))
            else:
                reasons += [r for _c, r in b.drops]
    finally:
        src.close()
        pipe.close()
    label = f"{name} ({enc}, Pipeline)"
    check_against_reference(got, ref, label)
    assert not reasons and len(got) == len(ref), f"{label}: {len(got)}/{len(ref)} valid; drops {reasons[:3]}"


def test_too_short_a_lookahead_drops_frames_and_never_misplaces_them(media_dir):
    """With no look-ahead the decoder cannot return a B-frame stream's pictures in time: those frames
    are counted drops with the reason, and every frame that is emitted is still FFmpeg's picture."""
    path = media_file("h264_bframes", media_dir)
    ref = reference(path)
    h, w = ref[0][1].shape[:2]
    got, acc = run_collect(path, "h264", w, h, lookahead=0)
    check_against_reference(got, ref, "h264_bframes (lookahead 0)")
    d = drops(acc)
    assert len(got) + sum(d.values()) == len(ref)
    assert sum(d.values()) > 0, "a B-frame stream with no look-ahead cannot give every picture in time"
    # frames released before an earlier-presented one arrives come too early for the sync (late,
    # superseded); pictures the decoder holds back are decode errors naming the look-ahead
    assert set(d) <= {"decode_error", "late", "superseded"}, d
    assert "look-ahead" in " ".join(acc.examples.values())


def test_an_elementary_stream_cut_mid_gop_gives_one_frame_period_per_picture(media_dir):
    """A recording cut mid-GOP: its first pictures come before any parameter sets (headers unreadable, not
    decodable). Each is still a place in presentation order, and from the next IDR on (closed GOPs: all of
    them present before it) every picture is one frame period after the last, although x264's picture order
    count steps by 2. Reference: the file's own structure (NAL types) and FFmpeg's decode of the cut file."""
    units = media.annexb_units(media_file("h264_annexb", media_dir), "h264")
    cut = 5
    idr = next(k for k in range(cut, len(units)) if 5 in _nal_types(units[k]))
    assert 7 not in {t for u in units[cut:idr] for t in _nal_types(u)}, "the cut keeps no SPS before the IDR"
    path = media_dir / "cut" / "h264_annexb.h264"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"".join(units[cut:]))
    ref = reference(path, es=True)  # FFmpeg's pictures, from the IDR on, in presentation order
    h, w = ref[0][1].shape[:2]
    got, acc = run_collect(path, "h264", w, h, es=True)
    period = 1e9 / ES_FPS
    assert [round((t - START_NS) / period, 3) for t, _ in got] == [float(idr - cut + j) for j in range(len(ref))]
    assert all(np.array_equal(img, r[1].astype(np.float32)) for (_, img), r in zip(got, ref))
    assert drops(acc) == {"keyframe_wait": idr - cut}


def _nal_types(unit: bytes) -> set[int]:
    """The H.264 NAL unit types of an Annex B access unit (the byte after each 00 00 01 start code)."""
    return {unit[k + 3] & 0x1F for k in range(len(unit) - 3) if unit[k:k + 3] == b"\x00\x00\x01"}


@pytest.mark.parametrize("name", ["h264_bframes", "h264_open_gop"])
def test_a_looped_recording_gives_every_picture_again_on_every_pass(media_dir, name):
    """Looping reopens the file: a new decoder per pass; pass k's frames are FFmpeg's pictures again."""
    path = media_file(name, media_dir)
    ref = reference(path)
    h, w = ref[0][1].shape[:2]
    n = len(ref)
    dep = deployment(path, "h264", w, h)
    dep["run"].update(loop=True, frames=2 * n + n // 2)
    r = Runner(load_deployment(dep), write_outputs=False)
    got = [np.asarray(rb.batch.images[0]).transpose(1, 2, 0).copy() for rb in r.batches() if rb.batch.valid[0]]
    acc = r.finish().accounting
    assert acc.check() == [] and drops(acc) == {}
    assert len(got) == 2 * n + n // 2
    for k, img in enumerate(got):
        np.testing.assert_array_equal(img, ref[k % n][1].astype(np.float32), err_msg=f"frame {k} (pass {k // n})")


def test_flag_policy_keeps_the_picture_ffmpeg_flagged_and_counts_it(media_dir):
    """decode.on_corrupt: flag -- the victim FFmpeg concealed and flagged is emitted, marked and counted;
    the pictures decoded from it until the next keyframe have no trustworthy picture either way."""
    path = media_file("h264_corrupt_slice", media_dir)
    ref = reference(path)
    info = media.corrupt_info(path)
    pk = media.packet_info(path)
    victim = START_NS + round(Fraction(pk[info["index"]]["pts"]) * pk[info["index"]]["time_base"] * 10**9)
    h, w = ref[0][1].shape[:2]
    dep = deployment(path, "h264", w, h)
    dep["decode"] = {"on_corrupt": "flag"}
    r = Runner(load_deployment(dep), write_outputs=False)
    flagged = []
    for rb in r.batches():
        m = rb.batch.metas[0]
        if rb.batch.valid[0] and m.get("corrupt"):
            flagged.append(m["capture_epoch_ns"])
            assert "corrupt" in m["corrupt_reason"]
    acc = r.finish().accounting
    assert abs(flagged[0] - victim) < tol("pts_us").atol and len(flagged) == 1, (flagged, victim)
    assert acc.flagged["CAM0"] == 1 and "corrupt" not in drops(acc)
