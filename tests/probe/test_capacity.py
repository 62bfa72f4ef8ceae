"""``dvpipe probe --capacity``: the forecast's arithmetic against hand-computed cases (one per SoC family,
saturating ones included), every figure's source in the data, and the predicted device times of the
software DVPP device (present only there, labelled).

The expected numbers are worked out by hand in the comments from the documented figures quoted in
``dvpipe/knowledge/data/capacity.yaml`` (e.g. 310P JPEGD: n x 128 fps up to 2048 at 1080p), never taken
from the code's output.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dvpipe.cli import main as cli_main
from dvpipe.probe import capacity
from dvpipe.probe.capacity_inputs import first_frames
from dvpipe.probe.capacity_text import render
from dvpipe.probe.capacity import WorkItem, forecast
from dvpipe.target import Target

from tolerances import tol

ROOT = Path(__file__).resolve().parents[2]
P1080 = 1920 * 1080
P900 = 1600 * 900


def _cams(n, unit, pixels, fps, prefix="C"):
    return [WorkItem(f"{prefix}{i}", unit, pixels, fps) for i in range(n)]


# ------------------------------------------------------------------------------------------- arithmetic

def test_310p_six_nuscenes_cameras_jpegd_by_hand():
    """Atlas 300I Pro (310P3), 6 x 1600x900 JPEG at 12 fps, JPEGD: n x 128 up to 2048 at 1080p (0279)."""
    fc = forecast(_cams(6, "JPEGD", P900, 12.0), Target("Ascend310P3", "8.0.0"))
    u = fc.units[0]
    w = 1_440_000 / 2_073_600                       # 0.694444 reference frames per camera frame
    assert u.reference == "1080p" and u.per_channel_fps == 128 and u.max_total_fps == 2048
    assert u.capacity_fps == pytest.approx(768.0)   # min(6 x 128, 2048)
    assert u.load_fps == pytest.approx(50.0)        # 6 x 12 x 0.694444
    assert u.utilisation == pytest.approx(50.0 / 768.0)
    assert u.max_fps_per_camera == pytest.approx(184.32)   # 768 / (6 x 0.694444)
    assert u.step_ms["C0"] == pytest.approx(1e3 * w / 128)  # 5.425 ms on one channel
    assert u.set_ms == pytest.approx(5.425347, rel=tol("hand_rounded_figure").rtol)    # max(5.425, 1000 x 4.1667 / 768 = 5.425)
    assert u.max_cameras == 245                     # floor(2048 / (12 x 0.694444)) = floor(245.76); 256 channels
    assert [lim["max_channels"] for lim in u.limits] == [256] and u.limits[0]["used"] == 6
    assert fc.fits is True and fc.first_saturating is u


def test_310_jpegd_saturates_by_hand():
    """Atlas 200/300/500 (Ascend310): JPEGD 128 fps on one channel, 256 on two or more (0187).
    8 x 1080p cameras at 40 fps need 320 fps: over."""
    fc = forecast(_cams(8, "JPEGD", P1080, 40.0) + _cams(8, "VPC", P1080, 40.0), Target("Ascend310", "6.0.1"))
    jpegd, vpc = fc.units
    assert jpegd.capacity_fps == 256 and jpegd.load_fps == pytest.approx(320.0)
    assert jpegd.utilisation == pytest.approx(1.25) and jpegd.fits is False
    assert jpegd.max_fps_per_camera == pytest.approx(32.0)   # 256 / 8
    assert jpegd.max_cameras == 6                            # floor(256 / 40)
    assert jpegd.set_ms == pytest.approx(31.25)              # max(1000/128 = 7.8125, 1000 x 8/256 = 31.25)
    # VPC (0338): n x 360 up to 1440 (n >= 4): 320 of 1440
    assert vpc.capacity_fps == 1440 and vpc.utilisation == pytest.approx(320 / 1440)
    assert vpc.set_ms == pytest.approx(1e3 * 8 / 1440)      # 5.556 > 1000/360 = 2.778
    assert fc.fits is False and fc.first_saturating is jpegd
    assert fc.set_ms == pytest.approx(31.25 + 1e3 * 8 / 1440)
    text = render(fc)
    assert "does NOT fit" in text and "first to saturate: JPEGD at 32.0 fps per camera, or 6 such cameras" in text


def test_310_single_camera_gets_one_channel_rate():
    """One 4K camera on the 310: the 4K row (32 fps on one channel), not 256 x 1/4."""
    fc = forecast(_cams(1, "JPEGD", 3840 * 2160, 10.0), Target("Ascend310", "6.0.1"))
    u = fc.units[0]
    assert u.reference == "4k" and u.capacity_fps == 32 and u.step_ms["C0"] == pytest.approx(31.25)
    assert u.max_fps_per_camera == pytest.approx(32.0)


def test_310_each_camera_is_bound_by_its_own_channel():
    """Ascend310 JPEGD (0187): "1-channel 4K 32 FPS; n-channel 4K (n >= 2) 64 FPS". A 4K and a 720p camera at
    40 fps: the 720p frame is 1280 x 720 / (3840 x 2160) = 1/9 of a 4K frame, so the unit's total use is
    40 x (1 + 1/9) / 64 = 69.4%, but the 4K camera's own channel needs 40 of its 32 fps (125%): no fit.
    Each camera reaches at most 32 fps (its channel), not 64 / (10/9) = 57.6."""
    t = Target("Ascend310", "6.0.1")
    items = [WorkItem("BIG", "JPEGD", 3840 * 2160, 40.0), WorkItem("SMALL", "JPEGD", 1280 * 720, 40.0)]
    fc = forecast(items, t)
    u = fc.units[0]
    assert u.reference == "4k" and u.capacity_fps == 64
    assert u.utilisation == pytest.approx(40 * (1 + 1 / 9) / 64)
    assert u.max_fps_per_camera == pytest.approx(32.0)
    assert u.fits is False and fc.fits is False
    assert u.channel_utilisation == pytest.approx(40 / 32)
    assert u.max_cameras == 0                      # one channel (32 fps) cannot carry a 4K camera at 40 fps
    assert u.to_dict()["channel_utilisation"] == pytest.approx(1.25)
    text = render(fc)
    assert "does NOT fit" in text and "first to saturate: JPEGD at 32.0 fps per camera" in text
    assert re.search(r"^  JPEGD .* 69\.4%  125\.0% ", text, re.M)  # use, then the busiest channel's use
    # at 30 fps the 4K channel has 30 of 32 (93.75%), the total 33.3 of 64: it fits; such cameras (mean
    # weight 5/9, 16.67 4K frames/s each): floor(64 / 16.67) = 3
    ok = forecast([WorkItem("BIG", "JPEGD", 3840 * 2160, 30.0), WorkItem("SMALL", "JPEGD", 1280 * 720, 30.0)], t)
    assert ok.units[0].channel_utilisation == pytest.approx(30 / 32) and ok.fits is True
    assert ok.units[0].max_cameras == 3


def test_310_vdec_total_and_channels_by_hand():
    """Ascend310 VDEC (0184): 480 fps in total at 1080p whatever n, 32 channels (aclpythondevg_01_0345)."""
    t = Target("Ascend310", "6.0.1")
    at_limit = forecast(_cams(16, "VDEC", P1080, 30.0), t).units[0]
    assert at_limit.capacity_fps == 480 and at_limit.utilisation == pytest.approx(1.0) and at_limit.fits is True
    assert at_limit.set_ms == pytest.approx(1e3 * 16 / 480)
    one_more = forecast(_cams(17, "VDEC", P1080, 30.0), t).units[0]
    assert one_more.fits is False and one_more.channels_ok       # throughput, not channels
    too_many = forecast(_cams(33, "VDEC", P1080, 1.0), t)
    assert too_many.units[0].utilisation == pytest.approx(33 / 480) and not too_many.units[0].channels_ok
    assert too_many.fits is False and too_many.first_saturating is too_many.units[0]
    assert "VDEC channels (33 used, at most 32" in render(too_many)


VDEC_0479 = "https://www.hiascend.com/document/detail/en/canncommercial/850/API/appdevgapi/aclpythondevg_01_0479.html"


def test_310p_vdec_by_hand():
    """CANN 8.5.0 aclpythondevg_01_0479, "Table 1 Performance specifications of the Atlas inference products":
    n-channel 1080p (1 <= n <= 12) n * 240fps, (n > 12) 2880 FPS; 4K n * 60fps, (n > 12) 720 FPS.
    16 x 1080p H.264 cameras at 30 fps: min(16 x 240, 2880) = 2880 of which 480 used (16.7%); per camera
    min(2880 / 16 = 180, 240 / 1) = 180 fps; at 30 fps floor(2880 / 30) = 96 cameras; one channel 1000 / 240 ms."""
    fc = forecast(_cams(16, "VDEC", P1080, 30.0), Target("Ascend310P3", "8.5.0"))
    u = fc.units[0]
    assert u.figure is not None and u.figure.source == VDEC_0479 and u.why_unknown is None
    assert u.reference == "1080p" and (u.per_channel_fps, u.max_total_fps) == (240, 2880)
    assert u.capacity_fps == 2880 and u.load_fps == pytest.approx(480.0) and u.utilisation == pytest.approx(480 / 2880)
    assert u.max_fps_per_camera == pytest.approx(180.0) and u.max_cameras == 96
    assert u.step_ms["C0"] == pytest.approx(1000 / 240) and fc.fits is True
    assert "300V" in u.figure.note                                   # the card with the lower figures is named
    four_k = forecast(_cams(13, "VDEC", 3840 * 2160, 1.0), Target("Ascend310P3", "8.5.0")).units[0]
    assert four_k.reference == "4k" and four_k.capacity_fps == 720  # n > 12: 720 FPS


def test_310b_vdec_by_hand():
    """Same page, "Table 2 Performance specifications of the Atlas 200I/500 A2 inference products": n-channel 1080p
    (1 <= n <= 4) n * 300fps, (n > 4) 1200 (printed "n x 1200", 1200 on aclcppdevg_03_0687); 720p n * 600fps, (n > 4)
    2400 FPS. 6 x 1080p at 30 fps: min(6 x 300, 1200) = 1200, 180 used (15%); per camera 1200 / 6 = 200 fps."""
    fc = forecast(_cams(6, "VDEC", P1080, 30.0), Target("Ascend310B1", "8.5.0"))
    u = fc.units[0]
    assert u.figure is not None and u.figure.source == VDEC_0479
    assert u.capacity_fps == 1200 and u.utilisation == pytest.approx(180 / 1200)
    assert u.max_fps_per_camera == pytest.approx(200.0) and u.step_ms["C0"] == pytest.approx(1000 / 300)
    small = forecast(_cams(5, "VDEC", 1280 * 720, 10.0), Target("Ascend310B1", "8.5.0")).units[0]
    assert small.reference == "720p" and small.capacity_fps == 2400   # min(5 x 600, 2400)
    # JPEGD and VPC on the 310B stay unknown (their 8.5.0 tables have no product headings)
    jpegd = forecast(_cams(1, "JPEGD", P1080, 10.0), Target("Ascend310B1", "8.5.0")).units[0]
    assert jpegd.figure is None and "product headings" in jpegd.why_unknown


def test_no_unit_is_both_documented_and_open():
    """A (family, unit) pair with a figure has no 'open' reason left in capacity.yaml."""
    from dvpipe.knowledge.socs import families

    for fam in families():
        for unit in ("JPEGD", "VPC", "VDEC", "AIPP"):
            if capacity.throughput_figure(fam.key, unit) is not None:
                assert not any(unit in d["units"] and fam.key in capacity._families(d["families"])
                               for d in capacity._data()["open"]), (fam.key, unit)


def test_a2_vdec_saturates_on_channels_without_a_throughput_figure():
    """Atlas A2 (Ascend910B3): no attributable throughput page (the 8.5.0 VDEC page's third table has its
    heading cut after "Atlas A2 training"), but hi_mpi VDEC at most 32 channels (0707)."""
    fc = forecast(_cams(40, "VDEC", P1080, 30.0), Target("Ascend910B3", "8.5.0"))
    u = fc.units[0]
    assert u.figure is None and u.utilisation is None and "heading is cut" in u.why_unknown
    limits = {lim["id"]: lim for lim in u.limits}
    assert limits["channels.himpi.vdec.a2_a3"]["ok"] is False and limits["channels.himpi.vdec.a2_a3"]["used"] == 40
    assert limits["channels.himpi.jpegd_vdec.a2_a3"]["ok"] is True      # 40 of the shared 256
    assert fc.fits is False and fc.first_saturating is u and fc.set_ms is None


def test_a3_shared_pool_counts_jpegd_and_vdec_together():
    """Atlas A3: JPEGD and VDEC share 256 channels (0707): 200 JPEG + 60 video cameras = 260 > 256."""
    items = _cams(200, "JPEGD", P1080, 1.0, "J") + _cams(60, "VDEC", P1080, 1.0, "V")
    fc = forecast(items, Target("Ascend910_9391", "8.5.0"))
    pool = [lim for u in fc.units for lim in u.limits if lim["id"] == "channels.himpi.jpegd_vdec.a2_a3"]
    assert {lim["used"] for lim in pool} == {260} and not any(lim["ok"] for lim in pool)
    assert fc.fits is False


def test_unknown_units_make_the_verdict_unknown_never_a_guess():
    fc = forecast(_cams(6, "JPEGD", P900, 12.0) + _cams(6, "AIPP", 800 * 480, 12.0), Target("Ascend310P3", "8.0.0"))
    aipp = fc.units[-1]
    assert aipp.unit == "AIPP" and aipp.figure is None and aipp.set_ms is None and aipp.fits is None
    assert fc.fits is None and fc.set_ms is None and fc.known_set_ms == pytest.approx(fc.units[0].set_ms)
    d = fc.to_dict()
    assert d["unknown_units"] == ["AIPP"] and d["device_set_ms"] is None and d["hardware_measurement"] is False


def test_no_rate_gives_ceilings_but_no_verdict():
    fc = forecast(_cams(6, "JPEGD", P900, None), Target("Ascend310P3", "8.0.0"))
    u = fc.units[0]
    assert u.utilisation is None and u.max_fps_per_camera == pytest.approx(184.32) and fc.fits is None


# ------------------------------------------------------------------------------------------- the data

# the version segment of each documentation URL, read by hand from the URL scheme of hiascend.com
_URL_VERSIONS = {"5046": "5.0.4", "601": "6.0.1", "800": "8.0.0", "82RC1": "8.2.RC1", "83RC1": "8.3.RC1",
                 "850": "8.5.0", "900": "9.0.0"}


def _facts():
    data = capacity._data()
    out = [("scaling", data["scaling"]), ("scaling.vpc_reference", data["scaling"]["vpc_reference"])]
    for section in ("throughput", "transfers", "channels", "memory"):
        out += [(f"{section}.{d['id']}", d) for d in data[section]]
    return out


@pytest.mark.parametrize("key,fact", _facts(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_figure_has_a_resolvable_source(key, fact):
    """One fact, one source: a hiascend.com page whose id and CANN version are the fact's own."""
    url, page, cann = fact["source"], fact["page"], str(fact["cann"])
    assert url.startswith("https://www.hiascend.com/") and url.endswith(f"/{page}.html"), key
    seg = next(s for s in url.split("/") if s in _URL_VERSIONS)
    assert _URL_VERSIONS[seg] == cann, f"{key}: URL says {_URL_VERSIONS[seg]}, fact says {cann}"
    assert fact.get("quote"), f"{key}: no quote of the page"
    from dvpipe.knowledge import CannVersion

    CannVersion.parse(cann)


def test_documented_4k_rows_are_a_quarter_of_the_1080p_rows():
    """The evidence behind the pixel-count scaling (capacity.yaml ``scaling.assumption``): for JPEGD and VPC
    every 4K figure is the 1080p figure / 4 (4K has 4x the pixels of 1080p)."""
    checked = 0
    for fig in capacity.figures():
        if fig.unit in ("JPEGD", "VPC") and {"1080p", "4k"} <= set(fig.rows):
            (p1, m1), (p4, m4) = fig.rows["1080p"], fig.rows["4k"]
            assert (p4, m4) == (p1 / 4, m1 / 4), fig.id
            checked += 1
    assert checked >= 3


def test_every_family_unit_pair_is_a_figure_or_an_open_question():
    from dvpipe.knowledge.socs import families

    for fam in families():
        for unit in ("JPEGD", "VPC", "VDEC", "AIPP"):
            if capacity.throughput_figure(fam.key, unit) is None:
                assert not capacity.unknown_reason(fam.key, unit).startswith("no page read gives"), (fam.key, unit)


# ------------------------------------------------------------------------------------------- the CLI

def run_cli(capsys, *argv):
    rc = cli_main(["probe", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_forecasts_the_bundled_deployment(capsys):
    rc, out, err = run_cli(capsys, str(ROOT / "samples" / "deployment.yaml"), "--capacity", "--soc", "Ascend310P3",
                           "--cann", "8.0.0", "--fps", "12", "--no-cpu", "--json")
    assert rc == 0, err
    cap = json.loads(out)["capacity"]
    units = {u["unit"]: u for u in cap["units"]}
    assert set(units) == {"JPEGD", "VPC"}
    assert units["JPEGD"]["max_fps_per_camera"] == pytest.approx(184.32, abs=tol("json_rounded_ms").atol)
    # VPC calls per camera on 310P: resize 1600x900 -> 800x450 (max 1.44 Mpx), then the colour conversion at
    # 800x450 (0.36 Mpx): (1.44 + 0.36) / 2.0736 reference frames; 360 fps a channel
    assert units["VPC"]["step_ms"]["CAM_FRONT"] == pytest.approx(1e3 * (1.44 + 0.36) / 2.0736 / 360, rel=tol("json_rounded_relative").rtol)
    assert cap["fits"] is True and cap["first_saturating"]["unit"] == "JPEGD"
    assert any("fidelity fast" in n for n in cap["notes"])   # the sample's reference fidelity declines DVPP
    for u in cap["units"]:
        assert u["figure"]["source"] in {d["source"] for d in capacity._data()["throughput"]}


def test_cli_rate_from_the_sample_capture_times(capsys):
    """The sample's files are 0.5 s apart (samples/README.md): 2 fps."""
    rc, out, _err = run_cli(capsys, str(ROOT / "samples" / "deployment.yaml"), "--capacity", "--soc", "Ascend310",
                            "--cann", "6.0.1", "--no-cpu", "--no-sources")
    assert rc == 0
    assert re.search(r"6 camera\(s\) at 2 fps \(capture times", out)
    assert "not measured on hardware" in out


def _image_deployment(tmp, source: str, files=("0000000000.jpg", "0000000001.jpg", "0000000002.jpg",
                                                "0000000003.jpg"), extra: str = "") -> Path:
    """A deployment of the sample rig whose six cameras have the folders frames/{camera} of ``files`` (copies of
    a sample frame), with the default ``source:`` mapping ``source`` (YAML flow keys after type and uri)."""
    import shutil

    frame = sorted((ROOT / "samples" / "frames" / "CAM_FRONT").glob("*.jpg"))[0]
    for cam in ("CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_FRONT_LEFT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_BACK_RIGHT"):
        (tmp / "frames" / cam).mkdir(parents=True)
        for f in files:
            shutil.copy(frame, tmp / "frames" / cam / f)
    dep = tmp / "dep.yaml"
    dep.write_text(f"name: t\nrig: {ROOT / 'samples' / 'rig.yaml'}\npipeline: {{profile: bevformer-tiny, backends: auto}}\n"
                   f"source: {{type: images, uri: 'frames/{{camera}}'{', ' + source if source else ''}}}\n{extra}",
                   encoding="utf-8")
    return dep


@pytest.mark.parametrize("fps,why", [
    ("-5", "must be > 0, got -5"), ("0", "must be > 0, got 0"), ("abc", "expected a number, got 'abc'"),
    ("20000", "must be <= 10000, got 20000"), (".nan", "expected a finite number"), ("true", "expected a number"),
])
def test_cli_source_fps_is_checked_like_the_loader(capsys, tmp_path, fps, why):
    """source.fps is a frame rate as the loader (dvpipe/deploy/sources/_options.py: 0 < fps <= MAX_FPS = 10000)
    and --fps (0 < fps <= 10000) take it; anything else is one configuration error naming the key, exit 2,
    never a forecast (fps -5 gave negative loads and 'verdict: fits')."""
    dep = _image_deployment(tmp_path, f"fps: {fps}")
    rc, out, err = run_cli(capsys, str(dep), "--capacity", "--soc", "Ascend310P3", "--cann", "8.5.0", "--no-cpu")
    assert rc == 2 and "verdict" not in out
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "please report" not in err
    assert "source.fps: " in err and why in err


def test_cli_camera_source_fps_is_checked(capsys, tmp_path):
    extra = "cameras:\n  - {name: CAM_BACK, source: {type: images, uri: 'frames/CAM_BACK', fps: -1}}\n"
    dep = _image_deployment(tmp_path, "", extra=extra)
    rc, _out, err = run_cli(capsys, str(dep), "--capacity", "--soc", "Ascend310P3", "--cann", "8.5.0", "--no-cpu")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "cameras[0].source.fps: must be > 0, got -1" in err


def test_cli_a_cameras_own_source_rate_is_its_rate(capsys, tmp_path):
    """A camera's own ``cameras[i].source`` replaces the default source (the loader's rule), so its ``fps`` is that
    camera's rate: 5 cameras at 12 fps and CAM_BACK at 30, each 1600x900 JPEG on the 310P3's JPEGD (1080p
    reference, aclpythondevg_01_0279): load = (5 x 12 + 30) x 1600*900/(1920*1080) = 62.5 reference frames / s.
    It used to be forecast at the default's 12 fps (50)."""
    extra = "cameras:\n  - {name: CAM_BACK, source: {type: images, uri: 'frames/CAM_BACK', timestamps: fps, fps: 30}}\n"
    dep = _image_deployment(tmp_path, "timestamps: fps, fps: 12", extra=extra)
    rc, out, err = run_cli(capsys, str(dep), "--capacity", "--soc", "Ascend310P3", "--cann", "8.5.0", "--no-cpu",
                           "--json")
    assert rc == 0, err
    cap = json.loads(out)["capacity"]
    assert cap["fps"]["CAM_BACK"] == 30 and cap["fps"]["CAM_FRONT"] == 12 and len(cap["fps"]) == 6
    jpegd = next(u for u in cap["units"] if u["unit"] == "JPEGD")
    assert jpegd["load_fps"] == pytest.approx((5 * 12 + 30) * 1600 * 900 / (1920 * 1080))  # 62.5 exactly
    assert "source.fps" in cap["fps_source"] and "cameras[0].source.fps" in cap["fps_source"]


def test_cli_a_camera_without_a_rate_leaves_the_load_unjudged(capsys, tmp_path):
    """One camera's own source states no rate (a video file without fps): no load is summed (it would leave that
    camera out), and the note names the camera."""
    extra = "cameras:\n  - {name: CAM_BACK, source: {type: video, uri: 'cam.mp4'}}\n"
    dep = _image_deployment(tmp_path, "timestamps: fps, fps: 12", extra=extra)
    rc, out, err = run_cli(capsys, str(dep), "--capacity", "--soc", "Ascend310P3", "--cann", "8.5.0", "--no-cpu",
                           "--json")
    assert rc == 0, err
    cap = json.loads(out)["capacity"]
    assert cap["fps"]["CAM_BACK"] is None and cap["fps"]["CAM_FRONT"] == 12
    assert all(u["load_fps"] is None for u in cap["units"])
    assert any("no frame rate for CAM_BACK" in n for n in cap["notes"])


SIDECAR_YAML = "".join(f"000000000{k}.jpg: 1700000000{k}00000000\n" for k in range(4))   # ns, 0.1 s apart
SIDECAR_TXT = "".join(f"2011-09-26 13:02:25.{k}64389445\n" for k in range(4))          # KITTI raw, 0.1 s apart


@pytest.mark.parametrize("name,text", [("times.yaml", SIDECAR_YAML), ("timestamps.txt", SIDECAR_TXT)])
def test_cli_rate_from_a_sidecar_as_the_loader_infers_it(capsys, tmp_path, name, text):
    """KITTI-style frames named by index (0000000000.jpg ...) with ``sidecar:`` and no ``timestamps:``: the loader
    (images.py, ImageSequence.validate) times them by the sidecar; its times are 0.1 s apart: 10 fps (the file
    names, read as seconds, would give 1 fps)."""
    dep = _image_deployment(tmp_path, f"sidecar: {name}")
    (tmp_path / name).write_text(text, encoding="utf-8")
    rc, out, err = run_cli(capsys, str(dep), "--capacity", "--soc", "Ascend310P3", "--cann", "8.5.0", "--no-cpu",
                           "--json")
    assert rc == 0, err
    cap = json.loads(out)["capacity"]
    assert cap["fps"]["CAM_FRONT"] == pytest.approx(10.0, rel=tol("frame_rate", "any", "float64").rtol)
    assert "sidecar" in cap["fps_source"]


def test_cli_rate_of_timestamps_fps_without_fps_is_the_loaders_default(capsys, tmp_path):
    """images.py: ``fps = 10.0 if options.fps is None and timestamps == "fps"`` (ImageOptions: 'default 10')."""
    dep = _image_deployment(tmp_path, "timestamps: fps")
    rc, out, err = run_cli(capsys, str(dep), "--capacity", "--soc", "Ascend310P3", "--cann", "8.5.0", "--no-cpu",
                           "--json")
    assert rc == 0, err
    assert json.loads(out)["capacity"]["fps"]["CAM_FRONT"] == pytest.approx(10.0)


def test_cli_capacity_arguments(capsys):
    rc, out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420", "--soc", "Ascend310", "--cann", "6.0.1",
                           "--fps", "10")
    assert rc == 2 and "--fps and --no-cpu go with --capacity" in err and out == ""
    rc, _out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420", "--soc", "Ascend310", "--cann", "6.0.1",
                            "--capacity", "--fps", "0")
    assert rc == 2 and "frame rate" in err and len(err.strip().splitlines()) == 1


def test_cli_measures_the_cpu_path(capsys, monkeypatch):
    """The CPU figures come from timing the kernels with the injected clock (1 ms per call here)."""
    from dvpipe.probe import capacity_cpu

    ticks = iter(range(0, 10**12, 1_000_000))
    real = capacity_cpu.time_plan
    monkeypatch.setattr(capacity_cpu, "time_plan",
                        lambda *a, **k: real(*a, **dict(k, clock=lambda: next(ticks))))
    rc, out, err = run_cli(capsys, "--camera", "C=640x480:jpeg420", "--soc", "Ascend310P3", "--cann", "8.0.0",
                           "--capacity", "--fps", "30", "--json")
    assert rc == 0, err
    cpu = json.loads(out)["capacity"]["cpu"]
    # CPU path of bevformer-tiny: its steps each timed 1 ms by the fake clock
    assert cpu["per_camera_ms"]["C"] == pytest.approx(float(round(cpu["per_camera_ms"]["C"])))
    assert cpu["per_camera_ms"]["C"] >= 1.0 and cpu["set_ms"] == cpu["per_camera_ms"]["C"]
    assert cpu["remaining_steps"] and "dvpp" not in " ".join(cpu["remaining_steps"])


# ------------------------------------------------------------------------------------------- dvpp-sim

def _sample_run(backends, soc="Ascend310P3", cann="8.0.0", sets=2):
    import glob

    from dvpipe import Pipeline
    from dvpipe.types import Rig

    rig = Rig.from_yaml(ROOT / "samples" / "rig.yaml")
    rig = Rig(rig.cameras[:1])
    cam = rig.cameras[0].name
    frame = Path(sorted(glob.glob(str(ROOT / "samples" / "frames" / cam / "*.jpg")))[0]).read_bytes()
    with Pipeline.from_profile("bevformer-tiny", rig, backends=backends, target=Target(soc, cann),
                               fidelity="fast") as p:
        for _ in range(sets):
            p.process({cam: frame})
        return p.latency


def test_software_device_records_the_predicted_device_time():
    stats = _sample_run(("dvpp-sim", "cpu"))
    pred = stats.predicted()
    (name, entry), = pred.items()
    assert name.startswith("jpegd+vpc.resize")
    # JPEGD 1600x900 at 128 fps/channel (1080p), VPC resize (max 1.44 Mpx) and colour conversion (0.36 Mpx)
    # at 360 fps/channel: (1.44/128 + 1.44/360 + 0.36/360) / 2.0736 s
    expected_ns = 1e9 * (1.44 / 128 + 1.44 / 360 + 0.36 / 360) / 2.0736
    assert entry["run"].count == 2 and entry["run"].p50_ns == pytest.approx(expected_ns, abs=tol("integer_ns").atol)
    assert "documented throughput on Ascend310P3" in entry["basis"] and "aclcppdevg_03_0279" in entry["basis"]
    text = stats.report()
    assert f"{name} [predicted]" in text and "not measured" in text
    assert stats.to_json()["predicted"][name]["run"]["count"] == 2


def test_predicted_rows_only_on_the_software_device():
    stats = _sample_run(("cpu",))
    assert stats.predicted() == {} and "[predicted]" not in stats.report()
    assert stats.to_json()["predicted"] == {}


def test_predicted_row_says_when_there_is_no_figure():
    stats = _sample_run(("dvpp-sim", "cpu"), soc="Ascend910B3", cann="8.5.0", sets=1)
    (name, entry), = stats.predicted().items()
    assert entry["run"].count == 0 and "no documented JPEGD figure" in entry["basis"]
    assert "no figure" in stats.report()


# ------------------------------------------------------------------------------------------- --live --capacity

class _Ticks:
    """A thread-safe fake clock: every call is ``tick`` seconds after the previous one."""

    def __init__(self, tick):
        import threading

        self.tick, self.n, self.lock = tick, 0, threading.Lock()

    def __call__(self):
        with self.lock:
            self.n += 1
            return self.n * self.tick


def test_capacity_burst_on_the_software_device_is_labelled_not_hardware(tmp_path):
    from dvpipe.probe import live
    from dvpipe.probe.capacity_live import measure_capacity, measured_figures
    from dvpipe.probe.report import parse_camera

    target = Target("Ascend310P3", "8.0.0", "23.0.3")
    cams = [parse_camera("A=640x480:jpeg420"), parse_camera("B=640x480:jpeg420")]
    cache = live.LiveCache(str(tmp_path / "live.json"))
    entries = measure_capacity(cams, target, cache, backend="dvpp-sim", frames=5, clock=_Ticks(0.01))
    got = {(e["unit"], e["channels"]): e for e in entries}
    assert set(got) == {("JPEGD", 1), ("JPEGD", 2), ("JPEGD+VPC", 1), ("JPEGD+VPC", 2)}
    # n threads each read the clock twice (start, end): the wall is (2n - 1) ticks
    assert got[("JPEGD", 1)]["seconds"] == pytest.approx(0.01) and got[("JPEGD", 1)]["fps"] == pytest.approx(500)
    assert got[("JPEGD", 2)]["seconds"] == pytest.approx(0.03) and got[("JPEGD", 2)]["fps"] == pytest.approx(333.333)
    assert all(e["hardware"] is False and e["backend"] == "dvpp-sim" for e in entries)
    cache.save()
    figs = measured_figures(live.LiveCache.load(cache.path), target)
    assert set(figs) == {"JPEGD"}   # the fused JPEGD+VPC step is shown, not used for a single unit
    fig = figs["JPEGD"]
    assert fig.rows == {"640x480": (pytest.approx(500), pytest.approx(333.333))}
    assert "NOT a hardware measurement" in fig.label()
    fc = forecast(_cams(2, "JPEGD", 640 * 480, 10.0), target, measured=figs)
    assert fc.units[0].capacity_fps == pytest.approx(333.333)        # min(2 x 500, 333.333)
    assert fc.to_dict()["hardware_measurement"] is False


def test_live_capacity_needs_a_device(capsys, monkeypatch):
    from dvpipe.probe import live

    monkeypatch.setattr(live, "available", lambda: live.LiveStatus(False, "pyACL (the `acl` module) is not importable"))
    rc, out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420", "--soc", "Ascend310P3", "--cann", "8.0.0",
                           "--live", "--capacity")
    assert rc == 3 and out == "" and "--live cannot run here" in err


def test_cached_device_measurement_replaces_the_documented_figure(capsys, tmp_path):
    """A --live --capacity result in the cache (as a device writes it) is used and labelled with date and driver."""
    cache = {"schema": 1, "targets": {"Ascend310P3|8.0.0|23.0.3": {
        "soc": "Ascend310P3", "cann": "8.0.0", "driver": "23.0.3", "steps": {}, "capacity": {
            f"1600x900 jpeg420|JPEGD|{n}ch": {"unit": "JPEGD", "size": "1600x900", "encoding": "jpeg420",
                                              "pixels": 1440000, "channels": n, "frames": 20 * n, "seconds": 1.0,
                                              "fps": fps, "date": "2026-12-01T10:00:00Z", "driver": "23.0.3",
                                              "backend": "dvpp", "hardware": True, "kernel": "dvpp.decode"}
            for n, fps in ((1, 150.0), (2, 240.0))}}}}
    path = tmp_path / "live.json"
    path.write_text(json.dumps(cache))
    rc, out, err = run_cli(capsys, "--camera", "A=1600x900:jpeg420", "--camera", "B=1600x900:jpeg420", "--soc",
                           "Ascend310P3", "--cann", "8.0.0", "--driver", "23.0.3", "--cache", str(path), "--capacity",
                           "--fps", "100", "--no-cpu")
    assert rc == 0, err
    assert "measured on this device (2026-12-01T10:00:00Z, driver 23.0.3)" in out
    # JPEGD at 1600x900 (the measured size, weight 1): min(2 x 150, 240) = 240 fps; 2 x 100 = 200 -> 83.3 %
    assert re.search(r"JPEGD\s+2\s+1600x900\s+150\s+240\s+240\.0\s+200\.0\s+83\.3%", out), out


def test_first_frames_of_the_bundled_deployment():
    """The CPU path is measured on the deployment's own first frame of each camera."""
    import glob

    frames = first_frames(str(ROOT / "samples" / "deployment.yaml"))
    assert len(frames) == 6
    for cam, data in frames.items():
        first = sorted(glob.glob(str(ROOT / "samples" / "frames" / cam / "*.jpg")))[0]
        assert data == Path(first).read_bytes()


def test_aipp_route_forecast_counts_no_colour_conversion(capsys):
    """nuscenes-aipp-sim: VPC hands NV12 to the model's AIPP, so per camera JPEGD 1600x900 + one VPC resize:
    (1.44/128 + 1.44/360) / 2.0736 s = 7.3505 ms; AIPP has no documented throughput: unknown, never guessed."""
    rc, out, err = run_cli(capsys, str(ROOT / "configs" / "deployments" / "nuscenes-aipp-sim.yaml"), "--capacity",
                           "--fps", "12", "--no-cpu", "--json")
    assert rc == 0, err
    cap = json.loads(out)["capacity"]
    assert [u["unit"] for u in cap["units"]] == ["JPEGD", "VPC", "AIPP"]
    assert cap["device_set_ms_known_units"] == pytest.approx(1e3 * (1.44 / 128 + 1.44 / 360) / 2.0736, abs=tol("json_rounded_ms").atol)
    assert cap["device_set_ms"] is None and cap["unknown_units"] == ["AIPP"] and cap["fits"] is None


def test_nothing_on_dvpp_is_no_verdict():
    fc = forecast([], Target("Ascend910_9391", "8.5.0"), fps={"A": 12.0})
    assert fc.fits is None and fc.set_ms is None and len(fc.fps) == 1
    assert "nothing to forecast: no step runs on DVPP" in render(fc)


def test_vpc_channels_on_310p():
    """hi_mpi VPC: at most 256 channels on the 310P (aclpythondevg_01_0431): 300 cameras are over."""
    u = forecast(_cams(300, "VPC", P900, 1.0), Target("Ascend310P3", "8.0.0")).units[0]
    assert [(x["max_channels"], x["used"], x["ok"]) for x in u.limits] == [(256, 300, False)]
    assert u.utilisation == pytest.approx(300 * 1.0 * (P900 / P1080) / 4320)   # throughput alone would fit


def test_worked_example_in_the_docs_is_current(capsys):
    """docs/probe.md's 310P table rows are what the command prints (the CPU lines vary and are not compared)."""
    rc, out, _err = run_cli(capsys, str(ROOT / "samples" / "deployment.yaml"), "--capacity", "--soc", "Ascend310P3",
                            "--cann", "8.5.0", "--fps", "12", "--no-cpu")
    assert rc == 0
    doc = (ROOT / "docs" / "probe.md").read_text(encoding="utf-8")
    for line in out.splitlines():
        if line.startswith(("  unit", "  JPEGD", "  VPC", "verdict", "first to saturate", "predicted device time",
                            "source ")):
            assert line in doc, f"docs/probe.md is stale: {line!r}"


def test_310_vdec_memory_and_host_copy_note():
    """Ascend310 VDEC memory (0184): about 56 MB a 1080p channel, 182 MB a 4K one; the raw-image host->device
    ceiling (0338) is named but does not bound a plan that uploads bitstreams."""
    items = _cams(3, "VDEC", P1080, 10.0) + [WorkItem("K", "VDEC", 3840 * 2160, 10.0)]
    fc = forecast(items, Target("Ascend310", "6.0.1"))
    assert fc.units[0].memory["mb"] == pytest.approx(3 * 56 + 182)
    assert any("1080p about 1000 fps" in n and "bitstream" in n for n in fc.notes)
    assert "VDEC memory: about 350 MB for 4 channel(s)" in render(fc)


def test_capacity_keeps_the_require_gate(capsys):
    rc, _out, err = run_cli(capsys, "--camera", "P=1242x375:png", "--soc", "Ascend310", "--cann", "6.0.1",
                            "--capacity", "--fps", "10", "--no-cpu", "--require", "dvpp")
    assert rc == 1 and "--require dvpp" in err
