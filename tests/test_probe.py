"""``dvpipe probe``: argument forms, the environment report, target resolution, ``--live`` without pyACL,
the live cache and its planner hook, the matrix, and the generated support matrix.

The golden table/JSON tests for the KITTI and nuScenes rigs are in ``tests/test_probe_golden.py``.
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
from dvpipe.stages.registry import KernelQuery, Verdict
from dvpipe.target import Target

ROOT = Path(__file__).resolve().parent.parent


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
    ("R=1920x1080:nv12", "R", (1920, 1080), "nv12", "raw"),
    ("D=640x480", "D", (640, 480), "jpeg", "jpeg"),
])
def test_camera_argument_forms(text, name, size, enc, cam_enc):
    cam = parse_camera(text)
    assert (cam.name, (cam.width, cam.height), cam.encoding) == (name, size, cam_enc)
    assert camera_encoding(cam) == enc


@pytest.mark.parametrize("text", ["CAM2", "CAM2=1242:png", "CAM2=1242x375:webp", "=1x1:png", "C=0x375:png"])
def test_bad_camera_arguments_say_the_form(text):
    with pytest.raises(ConfigError, match="NAME=WIDTHxHEIGHT:ENCODING|unknown encoding|positive"):
        parse_camera(text)


def test_every_documented_encoding_is_accepted():
    assert set(ENCODINGS) >= {"jpeg420", "jpeg422", "jpeg444", "jpeg440", "jpeg400", "jpeg-progressive", "png",
                              "h264", "h265", "nv12"}


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


def test_live_without_pyacl_says_so_and_exits_3(capsys, monkeypatch):
    monkeypatch.setattr(live, "available", lambda: live.LiveStatus(False, "pyACL (the `acl` module) is not importable"))
    rc, out, err = run_cli(capsys, "--camera", "C=1600x900:jpeg420", "--soc", "Ascend310", "--cann", "6.0.1", "--live")
    assert rc == 3 and out == ""
    assert "--live cannot run here" in err and "pyACL" in err


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


def test_empirical_result_overrides_the_documented_verdict(tmp_path):
    from dvpipe.backends import resolve
    from dvpipe.stages import Resize
    from dvpipe.stages.base import FrameSpec
    from dvpipe.types import PixelFormat

    cam = parse_camera("C=1242x375:png")
    spec = FrameSpec(1242, 375, PixelFormat.BGR)
    stages = (Resize(scale=0.5),)
    target = Target("Ascend310", "6.0.1", "23.0.3")
    query = KernelQuery(stages, spec, (stages[0].output_spec(spec),), cam, resolve("dvpp"), "fast", target)
    cache = live.LiveCache(str(tmp_path / "c.json"))
    documented_no = Verdict.no("VPC resize on Ascend310 (CANN 6.0.1): input height 375 must be even")
    assert live.prefer_empirical(query, documented_no, cache) is documented_no  # nothing measured yet
    cache.record(target, live.step_key(cam, stages, spec), {"ok": True, "error": None, "measured": "2026-01-01"})
    v = live.prefer_empirical(query, documented_no, cache)
    assert v.ok and v.rule == "live" and "input height 375 must be even" in v.reason
    cache.record(target, live.step_key(cam, stages, spec), {"ok": False, "error": "ret 507018", "measured": "x"})
    v = live.prefer_empirical(query, Verdict.yes(), cache)
    assert v.status == "rejected" and "ret 507018" in v.reason
    sim = KernelQuery(stages, spec, query.specs, cam, resolve("dvpp-sim"), "fast", target)
    assert live.prefer_empirical(sim, documented_no, cache) is documented_no  # the simulator follows the docs


@pytest.mark.parametrize("enc", ["jpeg420", "jpeg422", "jpeg444", "jpeg400", "jpeg-progressive", "png", "nv12"])
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
