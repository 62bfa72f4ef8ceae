"""Deployment YAML: loading into frozen objects, every error at once with its key path, the
example deployments, and `dvpipe validate`."""
from __future__ import annotations

import dataclasses
import glob
from pathlib import Path

import pytest
import yaml

from dvpipe import ConfigError
from dvpipe.cli import main as cli_main
from dvpipe.deploy import DeploymentError, load_deployment
from dvpipe.testing.deployments import synthetic_deployment, tiny_rig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(glob.glob(str(ROOT / "configs" / "deployments" / "*.yaml")))
EXAMPLES.append(str(ROOT / "samples" / "deployment.yaml"))


def write(tmp_path: Path, data: dict, name: str = "dep.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def image_dirs(tmp_path: Path, names=("CAM0", "CAM1", "CAM2")) -> None:
    """A real JPEG per camera at tiny_rig's size (96x64): `dvpipe validate` reads the first image's header."""
    import cv2
    import numpy as np

    jpeg = cv2.imencode(".jpg", np.full((64, 96, 3), 128, np.uint8))[1].tobytes()
    for n in names:
        d = tmp_path / "frames" / n
        d.mkdir(parents=True)
        (d / "1700000000000000000.jpg").write_bytes(jpeg)


def base(tmp_path: Path) -> dict:
    image_dirs(tmp_path)
    return {"rig": tiny_rig(3), "pipeline": {"profile": "bevformer-tiny", "backends": ["cpu"]},
            "source": {"type": "images", "uri": "frames/{camera}"}}


def test_loads_into_frozen_objects_with_paths_resolved(tmp_path):
    d = base(tmp_path)
    d["cameras"] = [{"name": "CAM1", "backends": ["reference", "cpu"]}]
    d["sync"] = {"tolerance_ms": 40, "on_late": "reuse", "anchor": "CAM0"}
    dep = load_deployment(write(tmp_path, d))
    assert dep.name == "dep" and [c.name for c in dep.cameras] == ["CAM0", "CAM1", "CAM2"]
    assert dep.cameras[1].source.uri == str(tmp_path / "frames" / "CAM1")
    assert dep.cameras[1].backends == ("reference", "cpu") and dep.cameras[0].backends is None
    assert dep.sync.on_late == "reuse" and dep.sync.anchor == "CAM0"
    assert dep.pipeline.backends == ("cpu",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        dep.sync.on_late = "drop"  # type: ignore[misc]
    with pytest.raises(TypeError):
        dep.cameras[0].source.options["uri"] = "x"  # type: ignore[index]
    assert not dep.live


def test_every_error_is_reported_at_once_with_its_key_path(tmp_path):
    image_dirs(tmp_path, ("CAM0", "CAM1"))  # CAM2's folder is missing
    d = {
        "rig": tiny_rig(3),
        "pipeline": {"profile": "bevformer-huge", "backends": ["cpu", "gpu9"]},
        "source": {"type": "images", "uri": "frames/{camera}"},
        "cameras": [{"name": "CAM0", "source": {"type": "video", "uri": "missing.mp4"}},
                    {"name": "CAM9"},
                    {"name": "CAM1", "backnds": ["cpu"]}],
        "sync": {"tolerance_ms": -1, "on_late": "skip"},
        "run": {"frames": 0, "speed": "fast"},
        "outputs": {"dumps": {"every": 0}},
        "model": "not a module path",
        "extra": 1,
    }
    with pytest.raises(DeploymentError) as ei:
        load_deployment(write(tmp_path, d))
    errors = dict(ei.value.errors)
    msg = str(ei.value)
    assert ei.value.errors and isinstance(ei.value, ConfigError)
    expected = {
        "pipeline.profile": "unknown profile 'bevformer-huge'",
        "pipeline.backends[1]": "unknown backend 'gpu9'",
        "cameras[0].source.uri": "file not found",
        "cameras[1].name": "'CAM9' is not a camera of the rig",
        "cameras[2].backnds": "did you mean 'backends'?",
        "source.uri": "folder not found",
        "sync.tolerance_ms": "must be >= 0",
        "sync.on_late": "'skip' is not one of mask, reuse, drop",
        "run.frames": "must be >= 1",
        "run.speed": "expected a number",
        "outputs.dumps.every": "must be >= 1",
        "model.entry": "expected 'module:callable'",
        "extra": "unknown key",
    }
    for path, text in expected.items():
        assert path in errors, f"{path} not reported; got {sorted(errors)}"
        assert text in errors[path], (path, errors[path])
        assert f"  {path}: " in msg
    assert "CAM2" in errors["source.uri"]  # a shared default's error names the folder it looked for
    assert f"{len(ei.value.errors)} problems in" in msg


def test_rig_errors_carry_the_rig_path(tmp_path):
    rig = tiny_rig(2)
    rig["cameras"][1]["intrinsics"] = [[1, 0], [0, 1]]
    (tmp_path / "rig.yaml").write_text(yaml.safe_dump(rig))
    d = {"rig": "rig.yaml", "pipeline": {"profile": "bevformer-tiny"}, "source": {"type": "synthetic"}}
    with pytest.raises(DeploymentError) as ei:
        load_deployment(write(tmp_path, d))
    (path, msg), = ei.value.errors
    assert path.startswith("rig (") and path.endswith("cameras[1].intrinsics") and "3x3" in msg
    d["rig"] = "nope.yaml"
    with pytest.raises(DeploymentError, match=r"rig: file not found"):
        load_deployment(write(tmp_path, d))


def test_rig_key_typos_are_errors_and_each_problem_is_one_line(tmp_path):
    """A rig camera's unknown keys are kept (Camera.extra: a scene file's own keys), but a known key's typo
    (one letter off or two neighbours swapped) would leave the field at its default -- identity intrinsics --
    silently: it is an error naming the key. A problem whose message holds "; " stays one problem."""
    rig = tiny_rig(2)
    rig["cameras"][0]["intrinsic"] = rig["cameras"][0].pop("intrinsics", [[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    rig["cameras"][0]["widht"] = 3
    rig["cameras"][1]["cam2lidar"] = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]  # not a typo: kept
    rig["cameras"][1]["encoding"] = "h266"
    d = {"rig": rig, "pipeline": {"profile": "bevformer-tiny"}, "source": {"type": "synthetic"}}
    with pytest.raises(DeploymentError) as ei:
        load_deployment(write(tmp_path, d))
    errors = dict(ei.value.errors)
    assert sorted(errors) == ["rig.cameras[0].intrinsic", "rig.cameras[0].widht", "rig.cameras[1].encoding"]
    # as ConfigError states them for every caller that catches one: one "key.path: message" a problem
    assert sorted(ei.value.problems) == sorted(f"{k}: {m}" for k, m in errors.items())
    assert "did you mean 'intrinsics'?" in errors["rig.cameras[0].intrinsic"]
    assert "did you mean 'width'?" in errors["rig.cameras[0].widht"]
    assert "unknown encoding 'h266'; allowed: jpeg" in errors["rig.cameras[1].encoding"]
    del rig["cameras"][0]["widht"], rig["cameras"][1]["encoding"]
    rig["cameras"][0]["intrinsics"] = rig["cameras"][0].pop("intrinsic")
    dep = load_deployment(write(tmp_path, d))
    assert "cam2lidar" in dep.rig["CAM1"].extra
    d["rig"] = None  # "rig:" with nothing after it
    with pytest.raises(DeploymentError) as ei:
        load_deployment(write(tmp_path, d))
    assert dict(ei.value.errors) == {"rig": "expected a rig file path or an inline rig {cameras: [...]}, got null"}


@pytest.mark.parametrize("source, path, text", [
    ({"type": "images"}, "source.uri", "required"),
    ({"type": "ftp", "uri": "x"}, "source.type", "'ftp' is not one of images, video"),
    ({"type": "rtsp", "uri": "http://cam/1"}, "source.uri", "expected rtsp://"),
    ({"type": "rtsp", "uri": "rtsp://h/1", "reconnect": {"factor": 0.5}}, "source.reconnect.factor", ">= 1"),
    # a port outside 1..65535 (RFC 3986 ports are 16-bit; 0 is no port) is the configuration's problem, not a
    # network failure to retry; the message does not repeat the URL (it may hold a password)
    ({"type": "rtsp", "uri": "rtsp://u:secret@127.0.0.1:99999/x"}, "source.uri", "not a number from 1 to 65535"),
    ({"type": "rtsp", "uri": "rtsp://127.0.0.1:0/x"}, "source.uri", "not a number from 1 to 65535"),
    ({"type": "rtsp", "uri": "rtsp://u:secret@:554/x"}, "source.uri", "rtsp:// and rtsps://host[:port]/path URLs"),
    ({"type": "synthetic", "resolution": [640]}, "source.resolution", "[width, height]"),
    ({"type": "synthetic", "faults": {"corrupt": "3"}}, "source.faults.corrupt", "frame numbers"),
    ({"type": "synthetic", "faults": {"late_ms": {2: -5}}}, "source.faults.late_ms.2", "non-negative"),
    ({"type": "elementary", "uri": "x.bin"}, "source.uri", "file not found"),
])
def test_source_errors(tmp_path, source, path, text):
    d = {"rig": tiny_rig(1), "pipeline": {"profile": "bevformer-tiny"}, "source": source}
    with pytest.raises(DeploymentError) as ei:
        load_deployment(write(tmp_path, d))
    errors = dict(ei.value.errors)
    assert path in errors and text in errors[path], ei.value.errors
    assert "secret" not in errors[path]  # a URL's password is not repeated in a message


@pytest.mark.parametrize("source, problems", [
    # a key refused for its type or value gets no second problem that only follows from it
    ({"type": "rtsp", "uri": 5}, {"source.uri": "expected a string, got 5"}),
    ({"type": "elementary", "uri": "x.bin", "codec": "vp9"},
     {"source.codec": "'vp9' is not one of h264, h265", "source.uri": "file not found"}),
])
def test_a_refused_key_is_one_problem(tmp_path, source, problems):
    d = {"rig": tiny_rig(1, encoding="h264"), "pipeline": {"profile": "bevformer-tiny"}, "source": source}
    with pytest.raises(DeploymentError) as ei:
        load_deployment(write(tmp_path, d))
    assert [p for p, _m in ei.value.errors] == list(problems), ei.value.errors
    for (path, msg), want in zip(ei.value.errors, problems.values()):
        assert want in msg, (path, msg)


def test_an_unknown_placeholder_in_the_output_folder_is_refused(tmp_path):
    """outputs.dir substitutes {name}; any other {...} (a typo of it) would become a literal folder name."""
    d = {"rig": tiny_rig(1), "pipeline": {"profile": "bevformer-tiny"}, "source": {"type": "synthetic"},
         "outputs": {"dir": "out/{nmae}/{date}"}}
    with pytest.raises(DeploymentError) as ei:
        load_deployment(write(tmp_path, d))
    assert dict(ei.value.errors) == {"outputs.dir": "unknown placeholder {date}, {nmae} (the one there is: {name}, the "
                                                    "deployment's name)"}
    d["outputs"]["dir"] = "out/{name}"
    assert load_deployment(write(tmp_path, d)).outputs.dir.endswith("/out/dep")


def test_camera_encoding_must_fit_the_source(tmp_path):
    (tmp_path / "a.h265").write_bytes(b"\x00\x00\x00\x01")
    d = {"rig": tiny_rig(1, encoding="h264"), "pipeline": {"profile": "bevformer-tiny"},
         "source": {"type": "elementary", "uri": "a.h265"}}
    with pytest.raises(DeploymentError, match=r"the stream is h265 but camera CAM0 declares encoding h264"):
        load_deployment(write(tmp_path, d))
    d["encoding"] = "h265"  # the deployment may override the rig's encodings
    dep = load_deployment(write(tmp_path, d))
    assert dep.rig["CAM0"].encoding == "h265" and dep.cameras[0].source.options["codec"] == "h265"


def test_profile_needs_one_camera_size_and_stage_lists_are_checked(tmp_path):
    rig = tiny_rig(2)
    rig["cameras"][1]["width"] = 128
    d = {"rig": rig, "pipeline": {"profile": "bevformer-tiny"}, "source": {"type": "synthetic"}}
    with pytest.raises(DeploymentError, match=r"pipeline.profile: profile bevformer-tiny needs every camera at one"):
        load_deployment(d)
    d["pipeline"] = {"stages": ["decode", {"resize": {"size": [640]}}, {"blur": {}}, {"pad": {"size_divisor": 32}}]}
    with pytest.raises(DeploymentError) as ei:
        load_deployment(d)
    errors = dict(ei.value.errors)
    assert "Resize.size must be (height, width)" in errors["pipeline.stages[1].resize"]
    assert "unknown stage 'blur'" in errors["pipeline.stages[2]"]
    d["pipeline"] = {"stages": ["decode"], "profile": "petr"}
    with pytest.raises(DeploymentError, match=r"pipeline: needs exactly one of 'profile'"):
        load_deployment(d)


def test_model_entry_must_be_importable(tmp_path):
    (tmp_path / "mymodel.py").write_text("def infer(batch):\n    return batch.images.shape\n")
    d = synthetic_deployment(model={"entry": "mymodel:infer", "path": str(tmp_path)})
    dep = load_deployment(d)
    assert dep.model.entry == "mymodel:infer" and dep.model.path == str(tmp_path)
    d["model"] = "no_such_module_xyz:infer"
    with pytest.raises(DeploymentError, match=r"model.entry: module 'no_such_module_xyz' not found"):
        load_deployment(d)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: Path(p).name)
def test_example_deployments_validate_and_plan(path):
    from dvpipe.cli.validate import check

    r = check(path)
    assert r["ok"], r["errors"]
    assert "decode" in r["plan"]


def test_validate_cli_reports_every_error_and_exit_status(tmp_path, capsys):
    d = base(tmp_path)
    d["sync"] = {"on_late": "skip"}
    d["cameras"] = [{"name": "CAM0", "source": {"type": "video", "uri": "nope.mp4"}}]
    bad = write(tmp_path, d, "bad.yaml")
    good = write(tmp_path, base_good := synthetic_deployment(), "good.yaml")
    assert base_good
    assert cli_main(["validate", str(good)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ok: {good}") and "CAM0" in out
    assert cli_main(["validate", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"invalid: {bad} (2 problems)" in out
    assert "  cameras[0].source.uri: file not found" in out and "  sync.on_late: 'skip' is not one of" in out
    assert cli_main(["validate", str(tmp_path / "missing.yaml")]) == 1
    assert "deployment file not found" in capsys.readouterr().out


def test_validate_reports_plan_errors(tmp_path, capsys):
    d = synthetic_deployment(width=97)  # odd size: fine; but a crop larger than the image is not
    d["pipeline"]["stages"].insert(1, {"crop": {"width": 200, "height": 10}})
    p = write(tmp_path, d)
    assert cli_main(["validate", str(p)]) == 1
    assert "pipeline: " in capsys.readouterr().out
