"""``dvpipe probe``: argument forms, the environment report, target resolution, ``--live`` without pyACL,
the live cache and its planner hook, the matrix, and the generated support matrix.

The golden table/JSON tests for the KITTI and nuScenes rigs are in ``tests/probe/test_golden.py``.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from dvpipe.cli import main as cli_main
from dvpipe.errors import ConfigError
from dvpipe.probe import live
from dvpipe.probe.report import ENCODINGS, camera_encoding, parse_camera
from dvpipe.stages.kernel_registry import KernelQuery
from dvpipe.target import Target

ROOT = Path(__file__).resolve().parents[2]


def run_cli(capsys, *argv):
    rc = cli_main(["probe", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------------------------------- arguments

@pytest.mark.parametrize("text,name,size,enc,cam_enc", [
    ("CAM2=1242x375:png", "CAM2", (1242, 375), "png", "png"),
    ("CAM2J=1242x375:jpeg420", "CAM2J", (1242, 375), "jpeg420", "jpeg"),
    ("F=1600X900:JPEG444", "F", (1600, 900), "jpeg444", "jpeg"),
    ("P=1600x900:jpeg_progressive", "P", (1600, 900), "jpeg-progressive", "jpeg"),
    ("V=1920x1080:h265", "V", (1920, 1080), "h265", "h265"),
    ("R=1920x1080:nv12", "R", (1920, 1080), "nv12", "nv12"),
    ("U=1920x1208:uyvy", "U", (1920, 1208), "uyvy", "uyvy"),
    ("Y=1920x1208:YUYV", "Y", (1920, 1208), "yuyv", "yuyv"),
    ("D=640x480", "D", (640, 480), "jpeg", "jpeg"),
])
def test_camera_argument_forms(text, name, size, enc, cam_enc):
    cam = parse_camera(text)
    assert (cam.name, (cam.width, cam.height), cam.encoding) == (name, size, cam_enc)
    assert camera_encoding(cam) == enc


@pytest.mark.parametrize("text", ["CAM2", "CAM2=1242:png", "CAM2=1242x375:webp", "=1x1:png", "C=0x375:png"])
def test_bad_camera_arguments_say_the_form(text):
    with pytest.raises(ConfigError, match="NAME=WIDTHxHEIGHT:ENCODING|expected WIDTHxHEIGHT|unknown encoding|positive"):
        parse_camera(text)


def test_every_documented_encoding_is_accepted():
    assert set(ENCODINGS) >= {"jpeg420", "jpeg422", "jpeg444", "jpeg440", "jpeg400", "jpeg-progressive", "png",
                              "h264", "h265", "nv12", "uyvy", "yuyv"}


# ------------------------------------------------------------------------------------------- environment

def test_no_arguments_prints_the_environment_and_exits_0(capsys):
    rc, out, _err = run_cli(capsys)
    assert rc == 0
    assert out.startswith("environment:")
    for item in ("python", "pyacl", "cann", "soc"):
        assert f"  {item} " in out
    if "soc          no" in out:  # this machine has no Ascend stack: the report says how to pass a target
        assert "--soc" in out and "--cann" in out


def test_environment_json(capsys):
    rc, out, _err = run_cli(capsys, "--json")
    assert rc == 0
    env = json.loads(out)["environment"]
    assert {"cann_version", "soc", "items"} <= set(env)


def test_missing_target_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.setattr("dvpipe.probe.environment.detect_soc", lambda: (None, "npu-smi not on PATH"))
    monkeypatch.setattr("dvpipe.probe.environment.find_cann_version", lambda env=None: (None, "no install-info"))
    rc, _out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420")
    assert rc == 2
    assert "no DVPP target" in err and "--soc" in err and "--cann" in err
    rc, _out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420", "--soc", "Ascend310P3")
    assert rc == 2 and "no CANN version detected" in err and "no SoC" not in err


def test_unknown_soc_and_market_names_are_refused(capsys):
    rc, _out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420", "--soc", "910C", "--cann", "8.1.RC1")
    assert rc == 2 and "Ascend910_9391" in err  # the alias is explained, never applied silently
    rc, _out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420", "--soc", "Ascend310", "--cann", "6.x")
    assert rc == 2 and "cannot parse CANN version" in err


@pytest.mark.parametrize("info, board, expected", [
    ("| 0       310P3               | OK              |", "", "Ascend310P3"),
    ("| 0       910                 | OK              |", "    Chip Name                 : Ascend910\n    NPU Name                  : 9391\n",
     "Ascend910_9391"),
    ("| 0       910                 | OK              |", "", None),
])
def test_npu_smi_fallback_tells_an_a3_chip_from_an_ascend910(monkeypatch, info, board, expected):
    """constraints.md §7 (CANN 8.3.RC1 / 8.5.0 atlasatcparam_16_0035 / 0036): npu-smi info's Name column gives the
    chip for 910 / 310P / 310B / A2; an Atlas A3 shows as 910 there and its SoC name is <Chip Name>_<NPU Name> of
    npu-smi info -t board. Without that, '910' is not taken for the old Ascend910 family (other DVPP rules)."""
    from dvpipe.backends.dvpp import _acl
    from dvpipe.probe import environment

    monkeypatch.setattr(_acl, "why_unavailable", lambda device: "pyACL cannot be imported")
    monkeypatch.setattr(environment.shutil, "which", lambda name: f"/usr/local/bin/{name}")
    monkeypatch.setattr(environment, "_run", lambda cmd, *a, **k: board if "board" in cmd else info)
    soc, how = environment.detect_soc()
    assert soc == expected
    if expected is None:
        assert "acl.get_soc_name() tells them apart" in how and "printed no SoC name" not in how


def test_live_without_pyacl_says_so_and_exits_3(capsys, monkeypatch):
    monkeypatch.setattr(live, "available", lambda: live.LiveStatus(False, "pyACL (the `acl` module) is not importable"))
    rc, out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420", "--soc", "Ascend310", "--cann", "6.0.1", "--live")
    assert rc == 3 and out == ""
    assert "--live cannot run here" in err and "pyACL" in err


def test_live_without_pyacl_exits_3_before_asking_for_a_target(capsys, monkeypatch):
    """The documented contract (dvpipe/cli/probe.py: exit 3 when --live cannot run): without pyACL it is 3 whether
    or not a target is given; it was 2 ('no DVPP target ... Pass the target') without one."""
    monkeypatch.setattr(live, "available", lambda: live.LiveStatus(False, "pyACL (the `acl` module) is not importable"))
    rc, out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420", "--live")
    assert rc == 3 and out == "" and "--live cannot run here" in err and len(err.strip().splitlines()) == 1


def test_live_needs_the_device_to_open_not_npu_smi(monkeypatch):
    """pyACL imports but acl.rt.set_device fails (107001, an invalid device id): nothing can be measured, so --live
    cannot run, even where npu-smi would name the card."""
    from dvpipe.backends.dvpp import _acl

    def refuse(device, *a, **k):
        raise RuntimeError("acl.rt.set_device returned 107001 (ACL_ERROR_RT_INVALID_DEVICEID)")

    from dvpipe.probe import environment

    monkeypatch.setattr(_acl, "why_unavailable", lambda device: None)
    monkeypatch.setattr(_acl, "runtime", refuse)
    monkeypatch.setattr(environment.shutil, "which", lambda name: f"/usr/local/bin/{name}")
    monkeypatch.setattr(environment, "_run", lambda *a, **k: "| 0       310P3               | OK              |")
    status = live.available()
    assert not status.ok and "does not open" in status.reason and "107001" in status.reason


@pytest.mark.parametrize("flags, says", [
    (("--soc", "Ascend310P3", "--cann", "6.0.1"), "CANN 6.0.1, the installed one is 7.0.0"),
    (("--soc", "Ascend310", "--cann", "7.0.0"), "SoC Ascend310, the device is Ascend310P3"),
])
def test_live_refuses_a_target_other_than_the_device(capsys, monkeypatch, tmp_path, flags, says):
    """--live files what it measures under the target (cache key SoC|CANN|driver): on an Ascend310P3 with CANN 7.0.0
    installed, measurements filed under CANN 6.0.1 (or another SoC) would be trusted by plans for a version they were
    never made on. Refused, exit 3, nothing written."""
    from dvpipe.probe import environment

    monkeypatch.setattr(live, "available", lambda: live.LiveStatus(True, "Ascend310P3 (acl.get_soc_name())"))
    monkeypatch.setattr(live, "detect_soc", lambda: ("Ascend310P3", "acl.get_soc_name()"))
    monkeypatch.setattr(environment, "find_cann_version", lambda *a, **k: ("7.0.0", "ascend_toolkit_install.info"))
    monkeypatch.setattr(live, "run_live", lambda *a, **k: pytest.fail("measured for the wrong target"))
    cache = tmp_path / "live.json"
    rc, out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420", *flags, "--live", "--cache", str(cache))
    assert rc == 3 and out == "" and says in err and len(err.strip().splitlines()) == 1
    assert not cache.exists()


def test_live_results_are_kept_when_the_capacity_measurement_fails(capsys, monkeypatch, tmp_path):
    """run_live's step results are saved even when --capacity's measurement raises afterwards."""
    from dvpipe.probe import capacity_live, environment

    target_seen = []

    def fake_run_live(cams, target, cache, **kw):
        target_seen.append(target)
        cache.record(target, "1600x900 jpeg420|k", {"ok": True, "error": None, "measured": "2026-12-06T00:00:00Z"})

    def failing_capacity(*a, **k):
        raise RuntimeError("VPC call 4 failed")

    monkeypatch.setattr(live, "available", lambda: live.LiveStatus(True, "Ascend310P3 (acl.get_soc_name())"))
    monkeypatch.setattr(live, "detect_soc", lambda: ("Ascend310P3", "acl.get_soc_name()"))
    monkeypatch.setattr(environment, "find_cann_version", lambda *a, **k: ("7.0.0", "ascend_toolkit_install.info"))
    monkeypatch.setattr(live, "run_live", fake_run_live)
    monkeypatch.setattr(capacity_live, "measure_capacity", failing_capacity)
    cache = tmp_path / "live.json"
    run_cli(capsys, "--camera", "C=1600x900:jpeg420", "--soc", "Ascend310P3", "--cann", "7.0.0", "--live",
            "--capacity", "--cache", str(cache))
    assert target_seen and live.LiveCache.load(str(cache)).get(target_seen[0], "1600x900 jpeg420|k")["ok"] is True


def test_live_availability_reports_the_missing_module():
    if importlib.util.find_spec("acl") is not None:
        pytest.skip("pyACL is installed here")
    status = live.available()
    assert not status.ok and "pyACL" in status.reason and "set_env.sh" in status.reason


def test_soc_without_cameras_is_refused(capsys):
    rc, _out, err = run_cli(capsys, "--soc", "Ascend310", "--cann", "6.0.1")
    assert rc == 2 and "--matrix" in err


# ------------------------------------------------------------------------------------------- live cache

def test_live_cache_roundtrip_and_driver_keys(tmp_path):
    path = tmp_path / "cache" / "live.json"
    cache = live.LiveCache.load(str(path))
    t1 = Target("Ascend310P3", "7.0.0", "23.0.3")
    cache.record(t1, "k", {"ok": True, "error": None, "measured": "2026-01-01T00:00:00Z"})
    cache.record(Target("Ascend310P3", "7.0.0", "24.1.0"), "k",
                 {"ok": False, "error": "ret 100000", "measured": "2026-02-01T00:00:00Z"})
    cache.save()
    back = live.LiveCache.load(str(path))
    assert back.get(t1, "k")["ok"] is True
    assert back.get(Target("Ascend310P3", "7.0.0"), "k")["driver"] == "24.1.0"  # no driver: the newest
    assert back.get(Target("Ascend310P3", "8.0.0", "23.0.3"), "k") is None  # another CANN is another target
    assert set(json.loads(path.read_text())["targets"]) == {"Ascend310P3|7.0.0|23.0.3", "Ascend310P3|7.0.0|24.1.0"}


def test_broken_live_cache_is_a_config_error(tmp_path):
    p = tmp_path / "live.json"
    p.write_text("{not json")
    with pytest.raises(ConfigError, match="delete it"):
        live.LiveCache.load(str(p))


def test_driver_version_file(tmp_path):
    p = tmp_path / "version.info"
    p.write_text("Version=23.0.3\nascendhal_version=7.35.19\n")
    assert live.detect_driver([str(p)]) == ("23.0.3", str(p))
    assert live.detect_driver([str(tmp_path / "none")])[0] is None


def test_empirical_failure_overrides_a_documented_ok(tmp_path):
    from dvpipe.backends import load_family, resolve
    from dvpipe.stages import Decode, Resize
    from dvpipe.stages.kernel_registry import kernels_at

    load_family("dvpp")
    kern = next(iter(kernels_at(["decode", "resize"], "dvpp")))
    cam = parse_camera("C=1600x900:jpeg420")
    stages = (Decode(), Resize(scale=0.5))
    spec = __import__("dvpipe.planner", fromlist=["input_spec"]).input_spec(cam)
    target = Target("Ascend310P3", "7.0.0", "23.0.3")
    specs = (stages[0].output_spec(spec), stages[1].output_spec(stages[0].output_spec(spec)))
    query = KernelQuery(stages, spec, specs, cam, resolve("dvpp"), "fast", target)
    cache = live.LiveCache(str(tmp_path / "c.json"))
    documented = kern.check(query)
    assert documented.ok  # constraints.md §1.2, §2.1: 1600x900 JPEG decode + x0.5 resize on 310P
    assert live.prefer_empirical(kern, query, documented, cache) is documented  # nothing measured yet
    key = live.step_key(cam, stages, spec, kern.name)
    cache.record(target, key, {"ok": True, "error": None, "measured": "2026-01-01T00:00:00Z"})
    assert live.prefer_empirical(kern, query, documented, cache) is documented  # measured as documented
    cache.record(target, key, {"ok": False, "error": "acldvppJpegDecodeAsync ret 100000", "measured": "x"})
    v = live.prefer_empirical(kern, query, documented, cache)
    assert v.status == "rejected" and v.rule == "live" and "ret 100000" in v.reason
    sim = KernelQuery(stages, spec, specs, cam, resolve("dvpp-sim"), "fast", target)
    assert live.prefer_empirical(kern, sim, documented, cache) is documented  # the simulator follows the docs
    other = KernelQuery(stages, spec, specs, cam, resolve("dvpp"), "fast", Target("Ascend310P3", "8.0.0", "23.0.3"))
    assert live.prefer_empirical(kern, other, documented, cache) is documented  # another CANN, another target


def test_live_loop_on_the_software_device_fills_the_cache_and_the_report(tmp_path):
    """``run_live`` against ``dvpp-sim``: the same loop ``--live`` runs on the device."""
    from dvpipe.probe.report import build_report

    target = Target("Ascend310", "6.0.1", "23.0.3")
    cams = [parse_camera("CAM2=1242x375:png"), parse_camera("CAM2J=1242x375:jpeg420")]
    cache = live.LiveCache(str(tmp_path / "live.json"))
    results = live.run_live(cams, target, cache, backend="dvpp-sim")
    # only the planned DVPP step is run: PNG decode is refused by the documented rules (§4, §9 q7)
    assert [(r["camera"], r["ok"], r["documented"]) for r in results] == [("CAM2J", True, "ok")]
    cache.save()
    rep = build_report(cams, target, empirical=live.LiveCache.load(cache.path))
    row = rep.cameras[1].steps[0]
    assert row.backend == "dvpp" and row.empirical["ok"] and row.empirical["driver"] == "23.0.3"
    assert "live: ok (measured" in rep.render()
    assert rep.cameras[0].steps[0].empirical is None


@pytest.mark.parametrize("enc", ["jpeg420", "jpeg422", "jpeg444", "jpeg440", "jpeg400", "jpeg-progressive", "png",
                                 "nv12"])
def test_synthetic_frames_have_the_camera_size_and_encoding(enc):
    from dvpipe.codecs import image_info

    cam = parse_camera(f"C=97x61:{enc}")
    data = live.synthetic_frame(cam)
    if enc == "nv12":
        assert data.shape == (60 * 3 // 2, 96)
        return
    info = image_info(data)
    assert (info.width, info.height) == (97, 61)
    assert info.encoding == enc if enc != "png" else info.format == "png"
    if enc == "jpeg440":  # Pillow's decoder reads the frame header: luma sampled 1 x 2, chroma 1 x 1 (4:4:0)
        import io

        from PIL import Image

        assert [layer[1:3] for layer in Image.open(io.BytesIO(data)).layer] == [(1, 2), (1, 1), (1, 1)]


# ------------------------------------------------------------------------------------------- support matrix

def test_support_matrix_is_up_to_date():
    spec = importlib.util.spec_from_file_location("support_matrix", ROOT / "tools" / "support_matrix.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = mod.generate()
    assert (ROOT / "docs" / "support_matrix.md").read_text(encoding="utf-8") == text, \
        "docs/support_matrix.md is stale: run python tools/support_matrix.py"
    # a few facts of constraints.md the table must show
    assert "| JPEGD progressive 1600x900 | no / no |" in text  # §1.1: no progressive JPEG on any product
    assert "| VPC resize 1242x375 -> 621x187 | detour / detour |" in text  # §2.2: odd height -> align-crop


# ------------------------------------------------------------------------------------------- planner agreement

KITTI_ARGS = ("--camera", "CAM2=1242x375:png", "--camera", "CAM2J=1242x375:jpeg420")


def test_require_dvpp_fails_on_fallbacks_and_passes_otherwise(capsys):
    # constraints.md §4/§9 q7: PNGD on Ascend310 (acldvpp only) is open -> the PNG camera falls back
    rc, _out, err = run_cli(capsys, *KITTI_ARGS, "--soc", "Ascend310", "--cann", "6.0.1", "--require", "dvpp")
    assert rc == 1
    assert "CAM2: decode falls back to cpu (unknown)" in err and "CAM2J" not in err
    # §1.2/§1.3/§2.3: 1600x900 JPEG decodes and resizes on 310P3 (output BGR888 on 310P)
    rc, _out, err = run_cli(capsys, str(ROOT / "configs" / "rigs" / "nuscenes.yaml"), "--soc", "Ascend310P3",
                            "--cann", "7.0.0", "--require", "dvpp")
    assert rc == 0 and err == ""


def test_probe_rows_are_the_pipeline_plan():
    """The probe plans with the planner: the backends per step are those of a real Pipeline."""
    import dvpipe as dv
    from dvpipe.probe.report import build_report

    target = Target("Ascend310", "6.0.1")
    rig = dv.Rig((parse_camera("CAM2J=1242x375:jpeg420"),))
    pipe = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=("dvpp-sim", "cpu"), fidelity="fast",
                                    target=target, threads=1)
    rep = build_report(rig, target)
    planned = [(s.name, "dvpp" if s.backend.family == "dvpp" else s.backend.name) for s in pipe.plan.cameras[0].steps]
    assert [(r.stage, r.backend) for r in rep.cameras[0].steps] == planned
    assert planned[0] == ("decode+crop+resize", "dvpp")  # the align-crop detour of §1.3 is in the plan itself


def test_rig_yaml_gives_the_same_rows_as_camera_flags(capsys):
    rc, out, _ = run_cli(capsys, str(ROOT / "configs" / "rigs" / "kitti.yaml"), "--soc", "Ascend310", "--cann", "6.0.1",
                         "--json")
    rig_rows = {c["name"]: c["steps"] for c in json.loads(out)["cameras"]}
    rc2, out2, _ = run_cli(capsys, "--camera", "CAM2=1242x375:png", "--soc", "Ascend310", "--cann", "6.0.1", "--json")
    assert rc == rc2 == 0
    flag_rows = json.loads(out2)["cameras"][0]["steps"]
    assert rig_rows["CAM2"] == rig_rows["CAM3"] == flag_rows


def test_deployment_yaml_uses_its_own_pipeline(capsys):
    dep = ROOT / "configs" / "deployments" / "kitti-stereo.yaml"
    if not dep.exists():
        pytest.skip("no KITTI deployment config")
    rc, out, _ = run_cli(capsys, str(dep), "--soc", "Ascend310P3", "--cann", "7.0.0", "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["profile"] is None  # its stage list (decode, normalise, pad), not the default profile
    assert [c["name"] for c in data["cameras"]] == ["CAM2", "CAM3"]
    assert not any("resize" in s["stage"] for c in data["cameras"] for s in c["steps"])
    rc, _out, err = run_cli(capsys, str(dep), "--profile", "petr", "--soc", "Ascend310P3", "--cann", "7.0.0")
    assert rc == 2 and "brings its own pipeline" in err


def test_colour_only_when_asked_or_on_a_terminal(capsys):
    args = ("--camera", "C=1600x900:jpeg420", "--soc", "Ascend310P3", "--cann", "7.0.0")
    _rc, plain, _ = run_cli(capsys, *args)  # captured output is not a TTY
    assert "\x1b[" not in plain
    _rc, coloured, _ = run_cli(capsys, *args, "--colour", "always")
    assert "\x1b[32m" in coloured
    assert coloured.replace("\x1b[0m", "").replace("\x1b[1m", "").replace("\x1b[2m", "").replace("\x1b[32m", "") == plain


def test_raw_yuv_cameras_are_judged_as_vpc_colour_conversions(capsys):
    # 310P: VPC takes NV12 / YUV422 packed input (6.0.1 aclcppdevg_03_0232) and writes BGR888 (MindX
    # mxvisionapi_0193); dvpipe's DVPP kernels start at JPEGD/VDEC, so the conversion runs on the CPU and says so
    rc, out, _ = run_cli(capsys, "--camera", "N=1920x1080:nv12", "--camera", "U=1920x1208:uyvy", "--soc",
                         "Ascend310P3", "--cann", "7.0.0", "--json")
    rows = {c["name"]: c["steps"][0] for c in json.loads(out)["cameras"]}
    for name, fmt in (("N", "NV12"), ("U", "UYVY")):
        r = rows[name]
        assert (r["stage"], r["unit"], r["backend"], r["ok"]) == ("decode", "VPC", "cpu", False)
        assert f"VPC colour conversion {fmt} -> BGR888" in r["reason"] and "allowed by the documented rules" in r["reason"]
        assert "no kernel that uploads raw" in r["reason"]
    # 310: VPC writes NV12/NV21 only (MindX VpcResize, §2.3): a documented refusal, from a secondary source
    rc, out, _ = run_cli(capsys, "--camera", "U=1920x1208:uyvy", "--soc", "Ascend310", "--cann", "6.0.1", "--json")
    r = json.loads(out)["cameras"][0]["steps"][0]
    assert r["status"] == "rejected" and "output format bgr888 is not supported (nv12, nv21)" in r["reason"]
    assert r["confidence"] == "secondary"


def test_vpc_rejection_is_pinned_on_the_resize_not_on_the_inserted_transfer(capsys):
    """310B at CANN 8.5.0, a 16384x16384 JPEG, bevformer-tiny (resize 0.5 -> 8192x8192): constraints.md
    §1.2 "310B, A2 (910B), A3 | 32x32 ... 16384x16384" (JPEGD takes it) and §2.1 "acldvpp v1, 310B, A2, A3 |
    input 10x6 ... 8192x8192 | output 10x6 ... 4096x8192" (VPC refuses the resize). The decode runs alone
    on DVPP, the planner inserts a device -> host transfer, and the resize is the step that falls back."""
    from dvpipe.probe.matrix import build_matrix
    from dvpipe.probe.report import build_report, probe_camera

    rep = build_report([probe_camera("C", 16384, 16384, "jpeg420")], Target("Ascend310B1", "8.5.0"))
    rows = rep.cameras[0].steps
    decode, resize = rows[0], next(r for r in rows if "resize" in r.stage)
    assert (decode.stage, decode.unit, decode.backend, decode.ok) == ("decode", "JPEGD", "dvpp", True)
    assert (resize.unit, resize.backend, resize.ok, resize.status) == ("VPC", "cpu", False, "rejected")
    assert "input width 16384 exceeds the maximum 8192" in resize.reason
    assert resize.confidence is not None  # a documented rule rejected it (the row had none when misplaced)
    for r in rows:  # every other row (the transfer) is no DVPP failure
        if r is not resize:
            assert r.ok and r.status != "rejected", (r.stage, r.status)
    assert [m.split(" (")[0] for m in rep.require("dvpp")] == ["C: resize+normalise+pad+batch falls back to cpu"]
    rc, _out, err = run_cli(capsys, "--camera", "C=16384x16384:jpeg420", "--soc", "Ascend310B1", "--cann", "8.5.0",
                            "--require", "dvpp", "--no-sources")
    assert rc == 1 and "transfer" not in err and "resize+normalise+pad+batch falls back to cpu (rejected)" in err
    m = build_matrix("Ascend310B1", ["8.5.0"], sizes=[(16384, 16384)], encodings=["jpeg420"])
    assert m.cells[(16384, 16384, "jpeg420", "8.5.0")].code == "+-"  # decode on DVPP, resize rejected


# ------------------------------------------------------------------------------------------- matrix

def test_matrix_cells_follow_the_documented_rules():
    from dvpipe.probe.matrix import build_matrix

    m = build_matrix("Ascend310", ["6.0.1", "8.5.0"], sizes=[(900, 1600), (375, 1242), (4320, 7680)],
                     encodings=["jpeg420", "jpeg-progressive", "png", "h264"])
    code = {(w, h, e, v): c.code for (h, w, e, v), c in m.cells.items()}
    assert code[(1600, 900, "jpeg420", "6.0.1")] == "++"      # §1.1, §1.2, §2.1, §2.4 (ratio 1/2)
    assert code[(1242, 375, "jpeg420", "6.0.1")] == "~~"      # §1.3 odd height floored; §2.3 even NV12 output
    assert code[(7680, 4320, "jpeg420", "6.0.1")] == "++"     # §1.2 JPEGD to 8192; §2.1 8K NV12 resize-only mode
    assert code[(1600, 900, "jpeg-progressive", "6.0.1")] == "--"  # §1.1 no progressive JPEG
    assert code[(1600, 900, "png", "6.0.1")] == "??"          # §4 / §9 q7: acldvpp PNGD support per product open
    assert code[(7680, 4320, "png", "6.0.1")] == "--"         # §4 PNGD input at most 4096x4096
    assert code[(7680, 4320, "h264", "6.0.1")] == "--"        # §3.2 VDEC streams at most 4096x4096 on 310
    assert code[(1242, 375, "h264", "6.0.1")] == "--"         # §3.3 VDEC NV12 output needs even width and height
    assert code[(1600, 900, "jpeg420", "8.5.0")] == "??"      # §8: 310 no longer listed from 8.5.0 (§9 q10)
    text = m.render()
    assert "jpeg420 (symbols: decode, resize)" in text and "1242x375" in text
    assert m.fallback_count() > 0
    data = m.to_dict()
    assert len(data["cells"]) == 3 * 4 * 2 and data["legend"]["~"]


def test_matrix_shows_version_dependent_support():
    from dvpipe.probe.matrix import build_matrix, default_versions

    m = build_matrix("Ascend910_9391", ["8.1.RC1", "8.2.RC1"], sizes=[(1080, 1920)], encodings=["h264"])
    # §8: A3 appears in 8.1.RC1 for JPEGE only; VDEC (and VPC resize) support from the 8.2.RC1 docs
    assert m.cells[(1080, 1920, "h264", "8.1.RC1")].code == "??"
    assert m.cells[(1080, 1920, "h264", "8.2.RC1")].code == "++"
    assert default_versions("Ascend910_9391")[0] == "8.1.RC1"  # the first version whose docs list A3
    assert default_versions("Ascend310")[0] == "5.0.4"


def test_matrix_cli(capsys):
    rc, out, _ = run_cli(capsys, "--matrix", "--soc", "Ascend310P3", "--cann", "7.0.0")
    assert rc == 0
    assert "DVPP support matrix for Ascend310P3" in out
    for size in ("1600x900", "1920x1080", "1920x1280", "1920x886", "1242x375", "1550x2048", "2048x1550",
                 "3840x2160", "4096x2160", "640x480", "1281x721"):
        assert f"  {size} " in out
    rc, _out, err = run_cli(capsys, "--matrix", "--camera", "C=1x1:png", "--soc", "Ascend310")
    assert rc == 2 and "--matrix" in err


def test_deployment_whose_sources_exist_only_on_the_device_is_still_probed(tmp_path, capsys):
    dep = tmp_path / "dep.yaml"
    dep.write_text(f"name: t\nrig: {ROOT / 'configs' / 'rigs' / 'kitti.yaml'}\n"
                   "pipeline: {profile: bevformer-tiny, fidelity: fast}\n"
                   "source: {type: images, uri: '/data/on/the/device/{camera}'}\n")
    rc, out, err = run_cli(capsys, str(dep), "--soc", "Ascend310", "--cann", "6.0.1", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert [c["name"] for c in data["cameras"]] == ["CAM2", "CAM3"] and data["fidelity"] == "fast"
    # what was left out is said on stderr (the JSON on stdout stays clean)
    assert "rig and pipeline probed without its source (2 problems there, e.g. source.uri: folder not found" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("rig: missing.yaml\npipeline: {profile: bevformer-tiny}\nsource: {type: synthetic}\n")
    rc, _out, err = run_cli(capsys, str(bad), "--soc", "Ascend310", "--cann", "6.0.1")
    assert rc == 2 and "rig" in err


def test_a_camera_that_cannot_be_planned_fails_the_probe(capsys, monkeypatch):
    import dvpipe.planner
    from dvpipe.cli import main as cli
    from dvpipe.errors import PlanError

    real = dvpipe.planner.plan_pipeline

    def plan(cameras, *args, **kw):
        if cameras[0].name == "A":
            raise PlanError("no backend can run this camera")
        return real(cameras, *args, **kw)

    monkeypatch.setattr(dvpipe.planner, "plan_pipeline", plan)
    rc = cli(["probe", "--camera", "A=1600x900:jpeg420", "--camera", "B=1600x900:jpeg420", "--soc", "Ascend310",
              "--cann", "6.0.1"])
    out = capsys.readouterr()
    assert rc == 2
    assert "every step that DVPP implements runs on DVPP" not in out.out
    assert "A could not be planned: no backend can run this camera" in out.err
    assert "B could not be planned" not in out.err


def test_a_cann_newer_than_the_docs_checked_is_said_in_text_and_json(capsys):
    from dvpipe.knowledge.socs import latest_checked

    args = ["probe", "--camera", "C=1600x900:jpeg420", "--soc", "Ascend310P3"]
    assert cli_main(args + ["--cann", "99.0.0"]) == 0
    text = capsys.readouterr().out
    assert f"note: CANN 99.0.0 is newer than the latest docs checked ({latest_checked()})" in text
    assert cli_main(args + ["--cann", "99.0.0", "--json"]) == 0
    assert any("newer than the latest docs checked" in n for n in json.loads(capsys.readouterr().out)["notes"])
    assert cli_main(args + ["--cann", str(latest_checked())]) == 0
    assert "newer than the latest docs" not in capsys.readouterr().out


def test_an_unknown_profile_is_one_error_before_any_planning(capsys, samples_dir):
    rc = cli_main(["probe", str(samples_dir / "rig.yaml"), "--profile", "nope", "--soc", "Ascend310P3", "--cann", "7.0.0"])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert captured.err.count("unknown profile") == 1 and "bevformer-tiny" in captured.err


def test_a_rig_in_another_order_than_the_profiles_model_was_fed_is_probed_and_warned_about(capsys):
    """The probe answers what runs where per camera; the camera order is the run's to refuse, and the probe says so."""
    names = ["CAM_FRONT_LEFT", "CAM_FRONT", "CAM_FRONT_RIGHT"]  # BEVDet's order, not the info files'
    cams = [arg for n in names for arg in ("--camera", f"{n}=1600x900:jpeg420")]
    rc, out, err = run_cli(capsys, *cams, "--profile", "bevformer-tiny", "--soc", "Ascend310P3", "--cann", "7.0.0",
                           "--json")
    assert rc == 0 and [c["name"] for c in json.loads(out)["cameras"]] == names
    assert ("warning: profile bevformer-tiny's model was trained on the cameras in the order CAM_FRONT, "
            "CAM_FRONT_RIGHT, CAM_FRONT_LEFT; the rig lists them as CAM_FRONT_LEFT, CAM_FRONT, CAM_FRONT_RIGHT") in err
    rc, _out, err = run_cli(capsys, *cams, "--profile", "bevdet", "--soc", "Ascend310P3", "--cann", "7.0.0", "--json")
    assert rc == 0 and err == ""  # BEVDet's own order
