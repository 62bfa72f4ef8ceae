"""Image sequences' capture times: sidecar values (exact decimals, date-times, bad values), file names
with decimal seconds, the order of numbered files, KITTI raw ``timestamps.txt`` with a frame missing.

Expected times are computed by hand: 2011-09-26 13:02:25 UTC is 1317042145 s since the epoch and
2023-11-14 22:13:20 UTC is 1700000000 s (``date -u -d '2011-09-26 13:02:25' +%s``)."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from dvpipe import Camera
from dvpipe.deploy.config import SourceConfig
from dvpipe.deploy.sources import SourceError
from dvpipe.deploy.sources.images import ImageSequence

T_KITTI = 1317042145  # 2011-09-26 13:02:25 UTC
T_1700 = 1700000000  # 2023-11-14 22:13:20 UTC


def _write(folder: Path, names, ext: str = ".jpg", size: tuple[int, int] = (64, 96)) -> None:
    """Black images, ``size`` (height, width) pixels: tiny_rig's cameras are 96x64."""
    folder.mkdir(parents=True, exist_ok=True)
    data = cv2.imencode(ext, np.zeros((*size, 3), np.uint8))[1].tobytes()
    for n in names:
        (folder / n).write_bytes(data)


def _stamps(folder: Path, encoding: str = "jpeg", **options) -> list[tuple[str, int]]:
    src = ImageSequence(Camera("C", width=96, height=64, encoding=encoding), SourceConfig("images", str(folder), options))
    src.open()
    return [(Path(p).name, t) for t, p in src.stamped_files()]


def _deployment(root: Path, source: dict) -> Path:
    from dvpipe.testing.deployments import tiny_rig

    dep = {"rig": tiny_rig(1), "pipeline": {"profile": "bevformer-tiny", "backends": ["cpu"]}, "source": source}
    (root / "dep.yaml").write_text(yaml.safe_dump(dep))
    return root / "dep.yaml"


# -- sidecar values --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["csv", "yaml", "json"])
def test_a_sidecar_naming_a_file_twice_is_refused(tmp_path, kind):
    """Two times for one file: YAML and JSON parsers keep the last, a dict the last row; one time would be lost
    silently. The sidecar is refused naming the file."""
    from dvpipe.deploy.sources.base import SourceError

    _write(tmp_path / "img", ["a.jpg", "b.jpg"])
    side = tmp_path / f"t.{kind}"
    side.write_text({"csv": "a.jpg,1.5\nb.jpg,2.5\na.jpg,3.5\n", "yaml": "a.jpg: 1.5\nb.jpg: 2.5\na.jpg: 3.5\n",
                     "json": '{"a.jpg": 1.5, "b.jpg": 2.5, "a.jpg": 3.5}'}[kind])
    # YAML: the loader's words ("twice"); CSV and JSON: the sidecar's ("two times")
    with pytest.raises(SourceError, match=r"a\.jpg.*(twice|two times)"):
        _stamps(tmp_path / "img", timestamps="sidecar", sidecar=str(side))


@pytest.mark.parametrize("kind", ["csv", "txt", "yaml", "json"])
def test_numeric_sidecar_times_with_a_fraction_are_exact(tmp_path, kind):
    """Seconds with 9 fraction digits (KITTI, ROS) are the ns written, not a binary float's neighbour
    (1317042145.964389445 s through a double is ...389632 ns)."""
    _write(tmp_path / "img", ["a.jpg", "b.jpg"])
    a, b = f"{T_KITTI}.964389445", f"{T_1700}.000000001"
    side = tmp_path / f"t.{kind}"
    if kind == "csv":
        side.write_text(f"file,time_s\na.jpg,{a}\nb.jpg,{b}\n")
    elif kind == "txt":
        side.write_text(f"{a}\n{b}\n")
    elif kind == "yaml":
        side.write_text(f"a.jpg: {a}\nb.jpg: {b}\n")  # plain YAML floats
    else:
        side.write_text(f'{{"a.jpg": {a}, "b.jpg": {b}}}')  # JSON numbers
    assert _stamps(tmp_path / "img", timestamps="sidecar", sidecar=str(side)) == [
        ("a.jpg", 1317042145_964389445), ("b.jpg", 1700000000_000000001)]


def test_microsecond_sidecar_times_with_a_fraction_are_exact(tmp_path):
    _write(tmp_path / "img", ["a.jpg"])
    (tmp_path / "t.csv").write_text("a.jpg,1532402927612460.5\n")  # us, half a us
    assert _stamps(tmp_path / "img", timestamps="sidecar", sidecar=str(tmp_path / "t.csv")) == [
        ("a.jpg", 1532402927612460500)]


def test_yaml_sidecar_date_times_keep_every_ns_digit(tmp_path):
    """A YAML sidecar may write date-times, as the .txt form does (KITTI raw); PyYAML's own date-time
    keeps microseconds only, the file says ns."""
    _write(tmp_path / "img", ["a.jpg", "b.jpg", "c.jpg"])
    (tmp_path / "t.yaml").write_text("a.jpg: 2011-09-26 13:02:25.964389445\n"
                                     "b.jpg: 2011-09-26T13:02:26.068528219Z\n"
                                     "c.jpg: 2011-09-26 15:02:26.5 +02:00\n")
    assert _stamps(tmp_path / "img", timestamps="sidecar", sidecar=str(tmp_path / "t.yaml")) == [
        ("a.jpg", T_KITTI * 10**9 + 964389445), ("b.jpg", (T_KITTI + 1) * 10**9 + 68528219),
        ("c.jpg", (T_KITTI + 1) * 10**9 + 500_000_000)]


@pytest.mark.parametrize("name, text, value", [
    ("t.json", json.dumps({"a.jpg": "1700000000.0s", "b.jpg": 1700000000.1}), "'1700000000.0s'"),
    ("t.yaml", "a.jpg: soon\nb.jpg: 1700000000.1\n", "'soon'"),
    ("t.yaml", "a.jpg: [1, 2]\nb.jpg: 1700000000.1\n", "[1, 2]"),
    ("t.csv", "file,t\na.jpg,n/a\nb.jpg,1700000000.1\n", "'n/a'"),
    ("t.yaml", "a.jpg: 2011-02-30 13:02:25\nb.jpg: 1700000000.1\n", "'2011-02-30 13:02:25'"),
])
def test_a_bad_sidecar_value_is_one_line_at_the_sidecar_key(tmp_path, name, text, value):
    """Validation reads the sidecar (`dvpipe validate` fails, at `source.sidecar`, naming the sidecar,
    the file and the value); a source opened anyway raises a SourceError, not a TypeError/ValueError."""
    from dvpipe.deploy import DeploymentError, load_deployment

    _write(tmp_path / "frames", ["a.jpg", "b.jpg"])
    (tmp_path / name).write_text(text)
    with pytest.raises(DeploymentError) as e:
        load_deployment(_deployment(tmp_path, {"type": "images", "uri": "frames", "sidecar": name}))
    (line,) = [ln for ln in str(e.value).splitlines() if "source.sidecar" in ln]
    assert line.strip().startswith("source.sidecar: ")
    assert str(tmp_path / name) in line and "a.jpg" in line and value in line
    with pytest.raises(SourceError) as opened:
        _stamps(tmp_path / "frames", timestamps="sidecar", sidecar=str(tmp_path / name))
    assert "\n" not in str(opened.value) and "a.jpg" in str(opened.value) and value in str(opened.value)


def test_validate_cli_fails_on_a_bad_sidecar_value(tmp_path, capsys):
    from dvpipe.cli import main as cli_main

    _write(tmp_path / "frames", ["a.jpg", "b.jpg"])
    (tmp_path / "t.json").write_text(json.dumps({"a.jpg": "1700000000.0s", "b.jpg": "1700000000.1s"}))
    assert cli_main(["validate", "--no-plan", str(_deployment(tmp_path, {"type": "images", "uri": "frames",
                                                                          "sidecar": "t.json"}))]) == 1
    out = capsys.readouterr()
    assert "source.sidecar:" in out.out + out.err and "Traceback" not in out.out + out.err


# -- file names ------------------------------------------------------------------------------------------
def test_file_names_with_decimal_seconds_are_the_seconds_and_their_fraction(tmp_path):
    """ROS / bag extractors name frames ``<seconds>.<fraction>.jpg``: the time is the whole number
    (exactly: 9 fraction digits are ns), and the frames keep their order."""
    _write(tmp_path, ["1700000000.900000.jpg", "1700000001.000000.jpg", "1700000001.100000.jpg",
                      "cam0_1700000001.123456789.jpg"])
    assert _stamps(tmp_path) == [
        ("1700000000.900000.jpg", T_1700 * 10**9 + 900_000_000),
        ("1700000001.000000.jpg", (T_1700 + 1) * 10**9),
        ("1700000001.100000.jpg", (T_1700 + 1) * 10**9 + 100_000_000),
        ("cam0_1700000001.123456789.jpg", (T_1700 + 1) * 10**9 + 123_456_789)]


# -- the order of numbered files -------------------------------------------------------------------------
def test_fps_times_follow_the_frame_numbers_not_the_alphabet(tmp_path):
    """ffmpeg's ``%d.jpg`` (1.jpg .. 12.jpg, unpadded): frame k is 1 + the k-th number, never
    ``1, 10, 11, 12, 2, ...``."""
    _write(tmp_path, [f"{k}.jpg" for k in range(1, 13)])
    assert _stamps(tmp_path, timestamps="fps", fps=10.0, start_ns=T_1700 * 10**9) == [
        (f"{k}.jpg", T_1700 * 10**9 + (k - 1) * 100_000_000) for k in range(1, 13)]


def test_txt_sidecar_lines_follow_the_frame_numbers_not_the_alphabet(tmp_path):
    _write(tmp_path / "img", [f"frame{k}.jpg" for k in range(1, 13)])
    (tmp_path / "t.txt").write_text("".join(f"{T_1700}.{k:02d}\n" for k in range(1, 13)))  # line k-1: frame k
    assert _stamps(tmp_path / "img", timestamps="sidecar", sidecar=str(tmp_path / "t.txt")) == [
        (f"frame{k}.jpg", T_1700 * 10**9 + k * 10_000_000) for k in range(1, 13)]


def test_glob_and_folder_list_numbered_files_in_number_order(tmp_path):
    from dvpipe.deploy.sources.images import scan_images

    _write(tmp_path, ["b10.jpg", "b2.jpg", "a10.jpg", "a9.jpg"])
    expected = ["a9.jpg", "a10.jpg", "b2.jpg", "b10.jpg"]
    assert [Path(p).name for p in scan_images(str(tmp_path))] == expected
    assert [Path(p).name for p in scan_images(str(tmp_path / "*.jpg"))] == expected


# -- .txt sidecars and missing files ---------------------------------------------------------------------
KITTI_LINES = [f"2011-09-26 13:02:25.{k}00000000" for k in range(5)]  # frame k at 13:02:25 + k/10 s


def test_kitti_raw_txt_line_i_is_frame_i_when_a_frame_file_is_missing(tmp_path):
    """The KITTI raw devkit: timestamps.txt line i is the time of frame i (image_02/data/%010d.png).
    Frame 2 missing: frames 3 and 4 keep lines 3 and 4 (they took lines 2 and 3)."""
    _write(tmp_path / "data", [f"{k:010d}.png" for k in (0, 1, 3, 4)], ext=".png")
    (tmp_path / "timestamps.txt").write_text("\n".join(KITTI_LINES) + "\n")
    assert _stamps(tmp_path / "data", encoding="png", timestamps="sidecar", sidecar=str(tmp_path / "timestamps.txt")) == [
        (f"{k:010d}.png", T_KITTI * 10**9 + k * 100_000_000) for k in (0, 1, 3, 4)]


def test_txt_frames_numbered_from_one_take_line_number_minus_one(tmp_path):
    """ffmpeg's %d.jpg numbers frames from 1: with as many lines as the last number, line k-1 is frame k."""
    _write(tmp_path / "img", [f"{k}.jpg" for k in range(1, 13)])
    (tmp_path / "t.txt").write_text("".join(f"{T_1700}.{k:02d}\n" for k in range(1, 13)))
    assert _stamps(tmp_path / "img", timestamps="sidecar", sidecar=str(tmp_path / "t.txt")) == [
        (f"{k}.jpg", T_1700 * 10**9 + k * 10_000_000) for k in range(1, 13)]


def test_txt_frame_number_past_the_last_line_is_refused(tmp_path):
    from dvpipe.deploy import DeploymentError, load_deployment

    _write(tmp_path / "data", [f"{k:010d}.jpg" for k in (0, 1, 7)])
    (tmp_path / "timestamps.txt").write_text("\n".join(KITTI_LINES) + "\n")
    with pytest.raises(SourceError, match=r"timestamps\.txt has 5 times .*0000000007\.jpg is frame 7"):
        _stamps(tmp_path / "data", timestamps="sidecar", sidecar=str(tmp_path / "timestamps.txt"))
    with pytest.raises(DeploymentError, match=r"source\.sidecar: .*0000000007\.jpg is frame 7"):
        load_deployment(_deployment(tmp_path, {"type": "images", "uri": "data", "sidecar": "timestamps.txt"}))


@pytest.mark.parametrize("lines", [3, 5])
def test_txt_lines_for_other_names_must_be_as_many_as_the_files(tmp_path, lines):
    """Names that are not frame numbers are matched in order: a missing file (or line) would shift
    every later time, so the counts must be equal (both ways)."""
    _write(tmp_path / "img", ["a.jpg", "b.jpg", "c.jpg", "d.jpg"])
    (tmp_path / "t.txt").write_text("\n".join(KITTI_LINES[:lines]) + "\n")
    with pytest.raises(SourceError, match=rf"t\.txt lists {lines} times for 4 images") as e:
        _stamps(tmp_path / "img", timestamps="sidecar", sidecar=str(tmp_path / "t.txt"))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind, text", [
    ("json", "[" * 100_000), ("yaml", "[" * 100_000), ("csv", "a.jpg," + "9" * 140_000 + "\n"),
])
def test_a_sidecar_too_deep_or_too_wide_for_its_parser_is_one_line(tmp_path, kind, text, capsys):
    """Nesting past Python's recursion limit (json/yaml) and a field past the csv module's limit raised
    RecursionError / csv.Error, reported as 'unexpected ... please report it'; it is one line at source.sidecar."""
    from dvpipe.cli import main as cli_main

    _write(tmp_path / "img", ["1700000000000000000.jpg"])
    (tmp_path / f"t.{kind}").write_text(text)
    dep = _deployment(tmp_path, {"type": "images", "uri": str(tmp_path / "img"), "timestamps": "sidecar",
                                 "sidecar": str(tmp_path / f"t.{kind}")})
    assert cli_main(["validate", str(dep)]) == 1
    out = capsys.readouterr()
    assert "please report" not in out.err + out.out and "source.sidecar: sidecar" in out.out


def test_a_file_name_without_a_time_is_found_by_validate(tmp_path, capsys):
    """timestamps: filename (the default): one name without digits failed the camera at open while validate said ok;
    validate now reads the names' times as the run does."""
    from dvpipe.cli import main as cli_main

    _write(tmp_path / "img", ["1700000000000000000.jpg", "frame.jpg"])
    dep = _deployment(tmp_path, {"type": "images", "uri": str(tmp_path / "img")})
    assert cli_main(["validate", str(dep)]) == 1
    out = capsys.readouterr().out
    assert "source.uri:" in out and "frame.jpg: no digits in the file name" in out
