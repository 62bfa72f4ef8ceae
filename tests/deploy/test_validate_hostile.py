"""`dvpipe validate` runs every check `dvpipe run` runs, and no input, however hostile, ends in
"unexpected ...": non-finite and out-of-range numbers, ports, decode.max_pixels, YAML bombs and deep
nesting, unsafe camera names, file codecs against declared encodings, unwritable output folders, and
a seeded fuzz of type confusion through `load_deployment` and the CLI (issue 12 point 8)."""
from __future__ import annotations

import copy
import math
import os
import random
import tracemalloc
from pathlib import Path

import pytest
import yaml

from dvpipe import ConfigError
from dvpipe.cli import main as cli_main
from dvpipe.cli.validate import check
from dvpipe.deploy import DeploymentError, load_deployment
from dvpipe.testing.deployments import synthetic_deployment, tiny_rig

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_MP4 = ROOT / "samples" / "video" / "CAM_FRONT.mp4"  # H.264 (tools/make_video_sample.py)


def write(tmp_path: Path, data, name: str = "dep.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return p


def errors_of(data, **kwargs) -> dict[str, str]:
    with pytest.raises(DeploymentError) as ei:
        load_deployment(data, **kwargs)
    return dict(ei.value.errors)


def assert_one_line_problems(output: str) -> None:
    """The documented form: no traceback, never "unexpected", each problem one indented line."""
    assert "unexpected" not in output and "Traceback" not in output, output
    for line in output.splitlines():
        assert line.startswith(("ok: ", "invalid: ", "  ")), line


# ------------------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("section, key, value, text", [
    ("sync", "tolerance_ms", math.inf, "finite"),
    ("sync", "tolerance_ms", math.nan, "finite"),
    ("sync", "max_reuse_age_ms", 1e308, "must be <= 86400000"),
    ("sync", "deadline_ms", -math.inf, "finite"),
    ("run", "stall_timeout_ms", 1e308, "must be <= 86400000"),
    ("run", "duration_s", math.inf, "finite"),
    ("run", "frames", 10 ** 30, "must be <="),
    ("run", "speed", 1e300, "must be <= 1000"),
    ("latency", "budget_ms", math.nan, "finite"),
    ("latency", "window", 10 ** 20, "must be <="),
])
def test_non_finite_and_overflowing_numbers_are_refused_with_their_key_path(section, key, value, text):
    d = synthetic_deployment(1)
    d[section] = {key: value}
    errors = errors_of(d)
    assert text in errors[f"{section}.{key}"], errors


def test_a_number_yaml_reads_as_text_says_why(tmp_path):
    """PyYAML (YAML 1.1) reads 1.0e30 and 1e5 as strings (its float needs a dot and the exponent's sign): the message
    says so and what to write, which PyYAML then reads as that number."""
    p = tmp_path / "dep.yaml"
    p.write_text("rig: {cameras: [{name: A, width: 64, height: 32}]}\npipeline: {profile: bevformer-tiny}\n"
                 "source: {type: synthetic}\nsync: {tolerance_ms: 1.5e1, deadline_ms: 2e2}\nrun: {frames: 1e3}\n")
    assert isinstance(yaml.safe_load(p.read_text())["run"]["frames"], str)  # the premise
    errors = errors_of(p)
    written = {"sync.tolerance_ms": ("1.5e+1", 15.0), "sync.deadline_ms": ("2.0e+2", 200.0),
               "run.frames": ("1000", 1000)}
    for key, (text, value) in written.items():
        assert errors[key].endswith(f"(YAML reads it as text: write {text})"), errors[key]
        assert yaml.safe_load(f"x: {text}")["x"] == value  # the advice is read as the number


def test_source_numbers_are_bounded():
    d = synthetic_deployment(1)
    d["source"].update(fps=math.inf, offset_ms=1e308, start_ns=2 ** 70, quality=1000)
    errors = errors_of(d)
    assert "finite" in errors["source.fps"]
    assert "must be <= 86400000" in errors["source.offset_ms"]
    assert "0..2**62" in errors["source.start_ns"]
    assert "must be <= 100" in errors["source.quality"]
    d = synthetic_deployment(1)
    d["source"] = {"type": "rtsp", "uri": "rtsp://h/1", "open_timeout_s": math.inf,
                   "reconnect": {"max_ms": 1e308}, "faults": {"stall": {3: math.inf}, "late_ms": {2: 1e300}}}
    errors = errors_of(d)
    assert "finite" in errors["source.open_timeout_s"]
    assert "must be <=" in errors["source.reconnect.max_ms"]
    assert "at most 3600" in errors["source.faults.stall.3"]
    assert "at most 86400000" in errors["source.faults.late_ms.2"]


@pytest.mark.parametrize("port, ok", [(0, False), (1, True), (65535, True), (65536, False), (70000, False)])
def test_prometheus_port_is_1_to_65535(port, ok):
    d = synthetic_deployment(1, outputs={"metrics": False, "prometheus": port})
    if ok:
        assert load_deployment(d).outputs.exporters["prometheus"]["port"] == port
    else:
        assert "outputs.prometheus.port" in errors_of(d)


# ------------------------------------------------------------------------- decode: {max_pixels}
def test_decode_section_defaults_and_values():
    dep = load_deployment(synthetic_deployment(1))
    assert (dep.decode.on_corrupt, dep.decode.max_pixels) == ("drop", 64_000_000)
    dep = load_deployment(synthetic_deployment(1, decode={"on_corrupt": "flag", "max_pixels": 7000}))
    assert (dep.decode.on_corrupt, dep.decode.max_pixels) == ("flag", 7000)
    errors = errors_of(synthetic_deployment(1, decode={"on_corrupt": "keep", "max_pixels": math.inf}))
    assert "'keep' is not one of drop, flag" in errors["decode.on_corrupt"]
    assert "expected an integer" in errors["decode.max_pixels"]
    assert "unknown key" in errors_of(synthetic_deployment(1, decode={"max_pixel": 5}))["decode.max_pixel"]


def test_a_camera_larger_than_max_pixels_is_a_configuration_error():
    d = synthetic_deployment(1, width=10000, height=8000)  # 80 MP > the default 64 MP
    errors = errors_of(d)
    assert "10000x8000 = 80000000 pixels" in errors["rig.cameras[0]"]
    assert "decode.max_pixels (64000000)" in errors["rig.cameras[0]"]
    d["decode"] = {"max_pixels": 80_000_000}
    load_deployment(d)  # allowed once the cap is raised
    d = synthetic_deployment(1)  # 96x64 = 6144 pixels
    d["decode"] = {"max_pixels": 6000}
    assert "rig.cameras[0]" in errors_of(d)
    d["decode"] = {"max_pixels": 100_000}
    d["source"]["resolution"] = [1000, 1000]
    assert "more than decode.max_pixels (100000)" in errors_of(d)["source.resolution"]
    assert "1..65535" in errors_of(synthetic_deployment(1, width=100_000, height=100_000))["rig.cameras[0].width"]


def test_validate_refuses_an_oversized_camera_before_allocating_anything():
    # 9000 x 9000 (81 MP): a planned float32 batch alone would be 972 MB
    tracemalloc.start()
    try:
        r = check_mapping(synthetic_deployment(1, width=9000, height=9000))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not r["ok"] and r["errors"][0][0] == "rig.cameras[0]"
    assert peak < 50 * 2 ** 20, f"validate allocated {peak / 2 ** 20:.0f} MiB"


def test_validate_refuses_stages_that_blow_the_batch_up():
    d = synthetic_deployment(1)
    d["pipeline"]["stages"].insert(1, {"resize": {"size": [60000, 60000]}})  # (height, width)
    r = check_mapping(d)
    assert not r["ok"]
    (key, msg), = r["errors"]
    assert key == "pipeline" and "60000x60000 = 3600000000 pixels" in msg



def check_mapping(d: dict) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return check(str(write(Path(tmp), d)))


# ---------------------------------------------------------------------------------------- YAML
def _alias_bomb(levels: int = 9) -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for k in range(1, levels):
        prev, cur = chr(ord("a") + k - 1), chr(ord("a") + k)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, expected", [
    (_alias_bomb() + "rig: {cameras: *i}\npipeline: {profile: bevformer-tiny}\n", "alias bomb"),
    ("rig: " + "[" * 5000 + "]" * 5000 + "\npipeline: {}\n", "nested more than 64 levels"),
    ("rig: &r {cameras: [*r]}\npipeline: {}\n", "recursive structure"),
    ("rig: " + "9" * 5000 + "\n", "not valid YAML"),
    ("rig: [1, 2\npipeline: {}\n", "not valid YAML: expected ',' or ']'"),
    # PyYAML keeps the last of two equal keys: the first would be lost silently
    ("run: {frames: 5}\nrig: x.yaml\nrun: {frames: 7}\n", "found key 'run' twice in one mapping (first at line 1)"),
    ("sync: {tolerance_ms: 10, tolerance_ms: 60}\n", "found key 'tolerance_ms' twice"),
])
def test_hostile_yaml_is_one_line_naming_the_file(tmp_path, capsys, text, expected):
    p = tmp_path / "dep.yaml"
    p.write_text(text)
    with pytest.raises(DeploymentError) as ei:
        load_deployment(p)
    (key, msg), = ei.value.errors
    assert expected in msg and str(p) in msg and "\n" not in msg
    assert cli_main(["validate", str(p)]) == 1
    out = capsys.readouterr()
    assert_one_line_problems(out.out + out.err)
    assert expected in out.out


def test_a_merge_keys_values_may_be_overridden_as_yaml_defines(tmp_path):
    from dvpipe.types import read_yaml

    p = tmp_path / "m.yaml"
    p.write_text("base: &b {frames: 5, loop: true}\nrun:\n  <<: *b\n  frames: 7\n")
    assert read_yaml(p)["run"] == {"frames": 7, "loop": True}


def test_hostile_rig_files_and_huge_or_binary_files(tmp_path):
    (tmp_path / "rig.yaml").write_text(_alias_bomb() + "cameras: *i\n")
    d = {"rig": "rig.yaml", "pipeline": {"profile": "bevformer-tiny"}, "source": {"type": "synthetic"}}
    errors = errors_of(write(tmp_path, d))
    assert "alias bomb" in errors["rig"] and "rig.yaml" in errors["rig"]
    from dvpipe.types import Rig

    with pytest.raises(ConfigError, match=r"rig\.yaml: refused: .*alias bomb"):
        Rig.from_yaml(tmp_path / "rig.yaml")
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 500_000)  # 5 MB of comments
    assert "larger than 4 MiB" in errors_of(big)[""]
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"rig: \xff\xfe\x00")
    assert "not UTF-8" in errors_of(binary)[""]
    assert "is a folder" in errors_of(tmp_path)[""]
    assert errors_of("")[""] == "no deployment file named (an empty path)"  # Path("") would be "."


def test_probe_and_aipp_print_one_line_per_problem(tmp_path, capsys):
    """Every command prints several problems as a count and one indented line each (a rig file's problems were
    joined with "; " on one line, and a message's own "; allowed:" read like another problem)."""
    rig = tiny_rig(2)
    rig["cameras"][0]["encoding"], rig["cameras"][1]["encoding"] = "h266", "vp9"
    (tmp_path / "rig.yaml").write_text(yaml.safe_dump(rig))
    assert cli_main(["probe", str(tmp_path / "rig.yaml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "dvpipe probe: error: 2 problems:" and len(err) == 3
    assert "cameras[0].encoding: unknown encoding 'h266'; allowed: jpeg" in err[1] and err[1].startswith("  ")
    assert "cameras[1].encoding: unknown encoding 'vp9'" in err[2]
    d = {"rig": tiny_rig(1), "pipeline": {"stages": [{"resize": {"scale": -0.5}}, {"normalise": {"mean": [1, 2]}}]},
         "source": {"type": "synthetic"}}
    assert cli_main(["aipp", str(write(tmp_path, d)), "--soc", "Ascend310P3", "-o", str(tmp_path / "a.cfg")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("dvpipe aipp: error: 2 problems in") and len(err) == 3
    assert err[1].startswith("  pipeline.stages[0].resize: ") and err[2].startswith("  pipeline.stages[1].normalise: ")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_is_refused_not_waited_on(tmp_path):
    """open() of a FIFO blocks until a writer comes: validate would hang. It is refused at once, for a
    deployment and for the rig it names."""
    os.mkfifo(tmp_path / "dep.yaml")
    assert "not a regular file" in errors_of(tmp_path / "dep.yaml")[""]
    os.mkfifo(tmp_path / "rig.yaml")
    d = {"rig": "rig.yaml", "pipeline": {"profile": "bevformer-tiny"}, "source": {"type": "synthetic"}}
    assert "not a file" in errors_of(write(tmp_path, d, "d2.yaml"))["rig"]


# -------------------------------------------------------------------------------- camera names
@pytest.mark.parametrize("name", ["../../etc", "a/b", "..", ".hidden", "-rf", "a\\b", "a\0b", "x" * 65, "",
                                  "CAM FRONT", "caméra", "a..b"])
def test_unsafe_camera_names_are_refused(name):
    rig = tiny_rig(1)
    rig["cameras"][0]["name"] = name
    d = {"rig": rig, "pipeline": {"profile": "bevformer-tiny"}, "source": {"type": "images", "uri": "f/{camera}"}}
    errors = errors_of(d)
    assert "rig.cameras[0].name" in errors, errors
    assert not any(k.startswith("source") for k in errors)  # nothing was looked up with that name


@pytest.mark.parametrize("name", ["CAM_FRONT", "ring_front_left", "cam-2.left", "CAM2", "a+b"])
def test_ordinary_camera_names_stay_valid_and_absolute_uris_stay_the_users(tmp_path, name):
    (tmp_path / "frames" / name).mkdir(parents=True)
    rig = tiny_rig([name])
    d = {"rig": rig, "pipeline": {"profile": "bevformer-tiny"},
         "source": {"type": "images", "uri": str(tmp_path / "frames" / "{camera}")}}
    dep = load_deployment(d, base_dir="/nonexistent")
    assert dep.cameras[0].source.uri == str(tmp_path / "frames" / name)


def test_a_deployment_name_cannot_escape_the_output_folder():
    d = synthetic_deployment(1, name="../../etc")
    assert "name" in errors_of(d)


# -------------------------------------------------------------------------- codecs of file sources
def video_deployment(tmp_path: Path, encoding: str, source: dict) -> dict:
    return {"rig": tiny_rig(1, encoding=encoding), "pipeline": {"stages": ["decode"], "backends": ["cpu"]},
            "source": source, "outputs": {"metrics": False}}


@pytest.mark.parametrize("encoding", ["h264", "h265", "jpeg", "raw"])
def test_validate_probes_a_video_files_codec_as_run_opens_it(tmp_path, encoding):
    from dvpipe.deploy.sources import SourceError, open_source

    d = video_deployment(tmp_path, encoding, {"type": "video", "uri": str(SAMPLE_MP4)})
    d["rig"] = tiny_rig(1, 1600, 900, encoding=encoding)  # the sample's size (validate checks it too)
    dep = load_deployment(d)  # without probing: the schema alone accepts every one of these
    src = open_source(dep.rig["CAM0"], dep.cameras[0].source)
    try:
        src.open()
        run_refuses = False
    except SourceError:
        run_refuses = True
    finally:
        src.close()
    assert run_refuses == (encoding in ("h265", "jpeg"))  # the sample is H.264
    if run_refuses:
        msg = errors_of(d, probe=True)["source.uri"]
        assert f"is h264 video but camera CAM0 declares encoding {encoding}" in msg
    else:
        load_deployment(d, probe=True)


def test_validate_probes_elementary_streams_and_image_folders(tmp_path, capsys):
    from dvpipe.testing.deployments import encode_access_units

    (tmp_path / "cam.h265").write_bytes(b"".join(encode_access_units(3, codec="h264")))  # misnamed
    (tmp_path / "cam.h264").write_bytes(b"".join(encode_access_units(3, codec="h264")))
    (tmp_path / "stub.h264").write_bytes(b"\x00\x00\x00\x01")
    d = video_deployment(tmp_path, "h265", {"type": "elementary", "uri": "cam.h265"})
    msg = errors_of(write(tmp_path, d), probe=True)["source.uri"]
    assert "holds h264 video" in msg and "not an Annex B h265" in msg
    load_deployment(write(tmp_path, video_deployment(tmp_path, "h264", {"type": "elementary", "uri": "cam.h264"})),
                    probe=True)
    d = video_deployment(tmp_path, "h264", {"type": "elementary", "uri": "stub.h264"})
    assert "cannot read" in errors_of(write(tmp_path, d), probe=True)["source.uri"]
    load_deployment(write(tmp_path, d))  # without probing: only the schema
    # an image folder of PNGs for a camera declared jpeg
    import cv2
    import numpy as np

    (tmp_path / "png").mkdir()
    cv2.imwrite(str(tmp_path / "png" / "1700000000000000000.png"), np.zeros((64, 96, 3), np.uint8))
    (tmp_path / "empty").mkdir()
    d = video_deployment(tmp_path, "jpeg", {"type": "images", "uri": "png"})
    assert "is a PNG but camera CAM0 declares encoding jpeg" in errors_of(write(tmp_path, d), probe=True)["source.uri"]
    d["source"]["uri"] = "empty"
    assert "no images in" in errors_of(write(tmp_path, d), probe=True)["source.uri"]
    assert cli_main(["validate", str(write(tmp_path, d))]) == 1
    assert "  source.uri: no images in" in capsys.readouterr().out


# ------------------------------------------------------------------------------- output folders
def test_output_folders_must_be_creatable_and_writable_and_are_not_created(tmp_path):
    (tmp_path / "a_file").write_text("x")
    d = synthetic_deployment(1, outputs={"dir": str(tmp_path / "a_file" / "out"), "metrics": True})
    r = check(str(write(tmp_path, d)))
    assert not r["ok"] and r["errors"][0][0] == "outputs.dir" and "is a file, not a folder" in r["errors"][0][1]
    d["outputs"] = {"dir": str(tmp_path / "new" / "out"), "trace": str(tmp_path / "a_file" / "t.json")}
    r = check(str(write(tmp_path, d)))
    assert [k for k, _m in r["errors"]] == ["outputs.trace"]
    d["outputs"] = {"dir": str(tmp_path / "new" / "out"), "trace": True}
    assert check(str(write(tmp_path, d)))["ok"]
    assert sorted(os.listdir(tmp_path)) == ["a_file", "dep.yaml"]  # nothing created, nothing left behind
    d["outputs"] = {"dir": str(tmp_path / "a_file" / "out"), "metrics": False}
    assert check(str(write(tmp_path, d)))["ok"]  # nothing is written: nothing to check


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_output_folder_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        d = synthetic_deployment(1, outputs={"dir": str(ro / "out")})
        r = check(str(write(tmp_path, d)))
        assert r["errors"][0][0] == "outputs.dir" and "cannot create" in r["errors"][0][1]
    finally:
        ro.chmod(0o700)


# -------------------------------------------------------------------------------------- fuzzing
_HOSTILE = [None, "", [], {}, [[]], [{}], "名前", "\0", "../../etc", 10 ** 30, -10 ** 30, 2 ** 63, math.inf,
            -math.inf, math.nan, 1e308, -1e308, True, False, 0, -1, "x" * 5000, {"a": 1}, [1, "a", None],
            {"type": "video"}, {"cameras": "x"}, {1: 2}, [0] * 500, 3.5, "auto", "{camera}", {"": None}]


def _paths(obj, prefix=()):
    """Every key path into a nested dict/list structure."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _mutate(base: dict, rng: random.Random) -> dict:
    d = copy.deepcopy(base)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(d) if p]
        target = rng.choice(paths)
        parent = d
        for k in target[:-1]:
            parent = parent[k]
        value = copy.deepcopy(rng.choice(_HOSTILE))
        if rng.random() < 0.2 and isinstance(parent, dict):
            parent[rng.choice(["decode", "outputs", "sync", "run", "cameras", "zz", "type", "uri"])] = value
        else:
            parent[target[-1]] = value
    return d


def _fuzz_bases(tmp_path: Path) -> list[dict]:
    (tmp_path / "frames" / "CAM0").mkdir(parents=True)
    (tmp_path / "frames" / "CAM0" / "1700000000000000000.jpg").write_bytes(b"\xff\xd8\xff\xd9")
    full = synthetic_deployment(2, faults={"CAM1": {"corrupt": [2], "late_ms": {3: 10}, "resize": {4: [32, 32]}}},
                                run={"frames": 3, "queue_size": 2}, outputs={"metrics": False, "dumps": {"every": 2}},
                                decode={"on_corrupt": "drop", "max_pixels": 10 ** 6})
    full["latency"] = {"budget_ms": 100, "steps_ms": {"decode": 5}, "window": 10}
    full["cameras"][0]["backends"] = ["cpu"]
    images = {"rig": tiny_rig(1), "pipeline": {"profile": "bevformer-tiny", "backends": "auto"},
              "source": {"type": "images", "uri": str(tmp_path / "frames" / "{camera}"), "timestamps": "filename"},
              "sync": {"on_late": "reuse", "anchor": "CAM0"}, "outputs": {"metrics": False, "prometheus": 9100}}
    rtsp = synthetic_deployment(1)
    rtsp["source"] = {"type": "rtsp", "uri": "rtsp://127.0.0.1:1/x", "reconnect": {"initial_ms": 10}}
    return [full, images, rtsp]


def _check_errors(errors) -> None:
    assert errors
    for key, msg in errors:
        assert isinstance(key, str) and isinstance(msg, str) and msg
        assert "\n" not in key and "\n" not in msg, (key, msg)
        assert "unexpected" not in msg and "Traceback" not in msg
        assert len(msg) < 1000, msg[:200]


def test_fuzzed_mappings_end_as_a_deployment_or_key_path_errors(tmp_path):
    rng = random.Random(12)
    bases = _fuzz_bases(tmp_path)
    refused = 0
    for k in range(400):
        d = _mutate(bases[k % len(bases)], rng)
        try:
            load_deployment(d, base_dir=tmp_path)
        except DeploymentError as e:
            refused += 1
            _check_errors(e.errors)
            assert all(key for key, _m in e.errors), e.errors  # a mapping's every problem has a key path
    assert refused > 300  # nearly every mutation breaks something (the fuzz is not vacuous)


def test_fuzzed_files_through_the_cli_end_in_ok_or_one_line_per_problem(tmp_path, capsys):
    rng = random.Random(8)
    bases = _fuzz_bases(tmp_path)
    files = []
    for k in range(40):
        d = _mutate(bases[k % len(bases)], rng)
        text = yaml.safe_dump(d, allow_unicode=True, sort_keys=False)
        if k % 4 == 3:  # damage the text too: truncation or a flipped byte
            cut = rng.randrange(len(text))
            text = text[:cut] if k % 8 == 3 else text[:cut] + rng.choice("[{:&*!|>'\"\t") + text[cut + 1:]
        p = tmp_path / f"f{k}.yaml"
        p.write_text(text, encoding="utf-8")
        files.append(str(p))
    rc = cli_main(["validate", "--no-plan", *files])
    out = capsys.readouterr()
    assert rc == 1
    assert_one_line_problems(out.out + out.err)
    assert out.err == ""
    assert out.out.count("invalid: ") + out.out.count("ok: ") == len(files)


@pytest.mark.parametrize("json_out", [False, True])
def test_a_reader_that_leaves_early_does_not_change_validates_status(json_out):
    """``dvpipe validate ... | head -1``: the reader goes after one line; every file is valid, so the status is
    0 (docs/deployments.md: 0 when every file is valid, 1 otherwise), with nothing on stderr."""
    import subprocess
    import sys

    sample = Path(__file__).resolve().parents[2] / "samples" / "deployment.yaml"
    cmd = [sys.executable, "-m", "dvpipe", "validate", "--no-plan"] + (["--json"] if json_out else [])
    proc = subprocess.Popen(cmd + [str(sample)] * 60, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()  # as head -1 does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == "", err


def test_a_latency_budget_under_a_nanosecond_is_refused_by_validate_not_by_the_run(tmp_path):
    """The statistics count in whole ns (a budget under 1 ns would round to 0: every sample over it); such a budget
    passed `dvpipe validate` and failed the run with an error naming an internal key in ns."""
    from dvpipe.testing.deployments import synthetic_deployment

    d = synthetic_deployment(1, frames=2)
    d["latency"] = {"budget_ms": 1e-7, "steps_ms": {"decode": 1e-8}}
    with pytest.raises(DeploymentError) as e:
        load_deployment(d)
    keys = {k for k, _m in e.value.errors}
    assert keys == {"latency.budget_ms", "latency.steps_ms.decode"}
    d["latency"] = {"budget_ms": 1e-6, "steps_ms": {"decode": 1e-6}}  # 1 ns: the smallest the statistics hold
    load_deployment(d)


@pytest.mark.parametrize("K", [[[0, 0, 0], [0, 0, 0], [0, 0, 0]], [[0, 0, 48], [0, 500, 32], [0, 0, 1]],
                               [[500, 0, 48], [0, 500, 32], [0, 0, 0]]])
def test_a_singular_camera_matrix_is_refused_at_its_key(K):
    """Projection (lidar2img), undistortion and a synthetic camera's rays invert K: a singular one passed validate
    and failed the run (LinAlgError 'please report it', the camera failed, or OpenCV's raw message per frame)."""
    from dvpipe.testing.deployments import synthetic_deployment

    d = synthetic_deployment(1, frames=2)
    d["rig"]["cameras"][0]["intrinsics"] = K
    with pytest.raises(DeploymentError) as e:
        load_deployment(d)
    (key, msg), = e.value.errors
    assert key.endswith("intrinsics") and "singular" in msg
