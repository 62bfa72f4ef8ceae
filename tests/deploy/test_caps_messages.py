"""Caps before reading or allocating, and words that match (issue 27 points 4 and 5).

Image files are checked by size before they are read (a sparse 8 GiB file stands in for a real one:
nothing of it is read, so the test is fast and its memory small); the memory budget and the camera
bound are checked by their arithmetic, without opening thousands of cameras; a real 12-bit JPEG
from libjpeg-turbo (made with ``imagecodecs.jpeg8_encode(bitspersample=12)``, which decodes it back
within its quantisation error) is refused as a precision dvpipe does not decode, not as damage.
"""
from __future__ import annotations

import base64
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from dvpipe.cli.validate import check
from dvpipe.deploy import DeploymentError, Runner, load_deployment
from dvpipe.testing.deployments import synthetic_deployment, test_pattern, tiny_rig

#: a 16x16 colour JPEG with 12-bit samples (SOF1, extended sequential), written by libjpeg-turbo 3
#: through imagecodecs 2026.3.6: jpeg8_encode(uint16 image, level=95, bitspersample=12)
JPEG_12BIT = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYFBgYGBwkIBgcJBwYGCAsICQoKCgoKBggL"
    "DAsKDAkKCgr/2wBDAQICAgICAgUDAwUKBwYHCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgr/wQAR"
    "DAAQABADASIAAhEBAxEB/8QAFgABAQEAAAAAAAAAAAAAAAAADAsN/8QAHhAAAAUFAQAAAAAAAAAAAAAAAAsMKUYBJ1Ricjf/xAAVAQEBAAAA"
    "AAAAAAAAAAAAAAAJCv/EAB4RAAEDBAMAAAAAAAAAAAAAAAsAJ0QGIWJyN1NU/9oADAMBAAIRAxEAPwDN6COxJ60tA2xgxPnQMayO1J7eQtr4"
    "MT50FvgjtSe3kLa+DE+dAxrI7EnrW0DbGDE+dBDMPzMdWpNw+mVrml5AFnEOKnM8UvTNf//Z")


def _jpeg(k: int, w: int = 96, h: int = 64) -> bytes:
    ok, buf = cv2.imencode(".jpg", test_pattern(k, w, h), [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return buf.tobytes()


def _images_deployment(folder: Path, *, cameras: int = 1, extra_decode=None, **top) -> dict:
    dep = synthetic_deployment(cameras, frames=None)
    dep["source"] = {"type": "images", "uri": str(folder), "timestamps": "filename"}
    if extra_decode:
        dep["decode"] = extra_decode
    dep.update(top)
    return dep


def _folder(tmp_path: Path, n: int = 3) -> Path:
    folder = tmp_path / "cam"
    folder.mkdir()
    for k in range(n):
        (folder / f"{1_700_000_000_000_000_000 + k * 100_000_000}.jpg").write_bytes(_jpeg(k))
    return folder


def _write(tmp_path: Path, data: dict) -> str:
    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return str(p)


# ------------------------------------------------------------------------------ point 4: file sizes
def _sparse(path: Path, size: int) -> None:
    """A file of ``size`` bytes that starts like a JPEG and occupies almost no disk (a hole)."""
    with open(path, "wb") as f:
        f.write(_jpeg(0)[:64])
        f.truncate(size)


def test_an_8_gib_file_among_jpegs_is_refused_by_validate_and_never_read_by_the_run(tmp_path):
    folder = _folder(tmp_path, 3)
    huge = folder / f"{1_700_000_000_000_000_000 + 3 * 100_000_000}.jpg"
    _sparse(huge, 8 << 30)
    r = check(_write(tmp_path, _images_deployment(folder)), plan=False)
    cap = 8 * 64_000_000 + (16 << 20)  # the documented default: 8 x decode.max_pixels + 16 MiB
    assert not r["ok"]
    (key, msg), = r["errors"]
    assert key == "source.uri" and f"is {8 << 30} bytes" in msg and f"{cap} bytes" in msg, msg
    dep = load_deployment(_images_deployment(folder))  # the run: counted, not read (else 8 GiB in memory)
    result = Runner(dep, write_outputs=False).run()
    acc = result.accounting
    assert acc.dropped["CAM0"] == {"too_large": 1}
    assert acc.emitted["CAM0"] == 3 and not acc.check()
    assert str(huge) in acc.examples[("CAM0", "too_large")]


def test_decode_max_bytes_sets_the_cap(tmp_path):
    folder = _folder(tmp_path, 3)
    sizes = sorted(p.stat().st_size for p in folder.iterdir())
    cap = sizes[1]  # the largest file is above it (files differ by their content)
    assert sizes[-1] > cap
    r = check(_write(tmp_path, _images_deployment(folder, extra_decode={"max_bytes": cap})), plan=False)
    assert not r["ok"] and f"more than the {cap} bytes" in r["errors"][0][1]
    dep = load_deployment(_images_deployment(folder, extra_decode={"max_bytes": cap}))
    result = Runner(dep, write_outputs=False).run()
    n_big = sum(s > cap for s in sizes)
    assert result.accounting.dropped["CAM0"] == {"too_large": n_big}
    assert result.accounting.emitted["CAM0"] == 3 - n_big
    assert "decode.max_bytes" in errors_of(_images_deployment(folder, extra_decode={"max_bytes": 0}))


def test_a_file_that_cannot_be_read_is_a_counted_drop_and_the_camera_reads_on(tmp_path, monkeypatch):
    """An image removed after the source listed its folder (or unreadable: permissions, an I/O error) is one
    ``unreadable`` drop with the reason; the camera's other frames are still read (it failed the camera)."""
    from dvpipe.deploy.sources.images import ImageSequence

    folder = _folder(tmp_path, 4)
    gone = sorted(folder.iterdir())[1]
    listed = ImageSequence.open

    def open_then_remove(self):
        listed(self)
        if gone.exists():
            gone.unlink()

    monkeypatch.setattr(ImageSequence, "open", open_then_remove)
    result = Runner(load_deployment(_images_deployment(folder)), write_outputs=False).run()
    acc = result.accounting
    assert acc.dropped["CAM0"] == {"unreadable": 1} and acc.emitted["CAM0"] == 3 and not acc.check()
    assert f"cannot read {gone}" in acc.examples[("CAM0", "unreadable")]


def errors_of(data) -> str:
    with pytest.raises(DeploymentError) as ei:
        load_deployment(data)
    return str(ei.value)


# ------------------------------------------------------------------------------ point 5: words that match
def _one_camera(folder: Path, w: int, h: int) -> dict:
    dep = _images_deployment(folder)
    dep["rig"] = tiny_rig(1, w, h)
    return dep


def test_a_12_bit_jpeg_is_an_unsupported_precision_not_corrupt_in_validate_and_in_the_run(tmp_path):
    folder = tmp_path / "cam"
    folder.mkdir()
    (folder / "1700000000000000000.jpg").write_bytes(JPEG_12BIT)
    r = check(_write(tmp_path, _one_camera(folder, 16, 16)), plan=False)
    assert not r["ok"]
    (key, msg), = r["errors"]
    assert key == "source.uri" and "unsupported JPEG precision: 12-bit" in msg and "corrupt" not in msg, msg
    result = Runner(load_deployment(_one_camera(folder, 16, 16)), write_outputs=False).run()
    drops = result.accounting.dropped["CAM0"]
    assert drops == {"decode_error": 1}, drops
    reason = result.accounting.examples[("CAM0", "decode_error")]
    assert "unsupported JPEG precision: 12-bit" in reason and "corrupt" not in reason.split(";")[0], reason


def test_a_glob_over_a_symlink_loop_reads_each_file_once(tmp_path):
    sub = _folder(tmp_path, 3)
    (sub / "loop").symlink_to(sub, target_is_directory=True)  # cam/loop -> cam: cam/*/*.jpg finds cam/loop/*.jpg
    (tmp_path / "alias").symlink_to(sub, target_is_directory=True)
    dep = _images_deployment(tmp_path / "*" / "*.jpg")  # cam/..., alias/... and cam/loop/... name the same 3 files
    dep["source"]["uri"] = str(tmp_path / "*" / "*.jpg")
    loaded = load_deployment(dep)
    assert not [w for w in loaded.warnings if "image sequences of" in w], loaded.warnings
    result = Runner(loaded, write_outputs=False).run()
    assert result.accounting.entered["CAM0"] == 3 and result.accounting.emitted["CAM0"] == 3


def test_a_greyscale_picture_on_a_camera_is_a_validate_warning_and_counted_in_the_run(tmp_path):
    folder = tmp_path / "cam"
    folder.mkdir()
    grey = cv2.cvtColor(test_pattern(0, 96, 64), cv2.COLOR_BGR2GRAY)
    for k in range(2):
        ok, buf = cv2.imencode(".jpg", grey if k == 0 else test_pattern(k, 96, 64))
        (folder / f"{1_700_000_000_000_000_000 + k * 100_000_000}.jpg").write_bytes(buf.tobytes())
    r = check(_write(tmp_path, _images_deployment(folder)), plan=False)
    assert r["ok"] and any("greyscale JPEG" in w for w in r["warnings"]), r
    runner = Runner(load_deployment(_images_deployment(folder)), write_outputs=False)
    metas = [rb.batch.metas[0].get("greyscale", False) for rb in runner.batches()]
    result = runner.finish()
    assert metas == [True, False]
    assert result.accounting.greyscale["CAM0"] == 1
    assert "greyscale: CAM0 1 of 2 emitted frames" in result.summary()


def test_a_wrong_size_says_that_orientation_is_not_applied(tmp_path):
    folder = _folder(tmp_path, 1)
    r = check(_write(tmp_path, _one_camera(folder, 64, 96)), plan=False)  # the images are 96x64, stored
    (key, msg), = r["errors"]
    assert "is 96x64 but camera CAM0 declares 64x96" in msg and "EXIF orientation" in msg, msg
    result = Runner(load_deployment(_one_camera(folder, 64, 96)), write_outputs=False).run()
    reason = result.accounting.examples[("CAM0", "wrong_size")]
    assert "EXIF orientation" in reason, reason


# ------------------------------------------------------------------------------ point 4: memory, threads, opening
def test_memory_needed_is_cameras_x_output_x_buffers_plus_decoded_pictures():
    from dvpipe.deploy._budget import memory_needed

    # the rig: 10,000 768x576 cameras, a float32 3x576x768 output, the runner's ring of 3 batches
    need = memory_needed((10_000, 3, 576, 768), 4, [(576, 768)] * 10_000)
    assert need["outputs"] == 3 * 10_000 * 3 * 576 * 768 * 4 == 159_252_480_000
    assert need["decoded"] == 10_000 * 576 * 768 * 3
    assert need["total"] == need["outputs"] + need["decoded"]


def test_a_deployment_above_its_memory_budget_is_refused_by_validate_and_before_the_run(tmp_path):
    from dvpipe import ConfigError

    # 3 cameras 96x64, normalise (float32) + pad to 32: output 3 x 3x64x96 float32, three buffers
    total = 3 * 3 * 3 * 64 * 96 * 4 + 3 * 64 * 96 * 3  # = 718,848 bytes = 702.0 KiB
    small = synthetic_deployment(3, run={"memory_budget_mb": total / (1 << 20) * 0.99})
    r = check(_write(tmp_path, small))
    assert not r["ok"]
    (key, msg), = r["errors"]
    assert key == "pipeline" and msg.startswith("the run needs at least 702.0 KiB of memory: 3 cameras x 3x64x96 "
                                                "float32 x 3 output buffers"), msg
    with pytest.raises(ConfigError, match="the run needs at least 702.0 KiB"):
        Runner(load_deployment(small), write_outputs=False)
    enough = synthetic_deployment(3, run={"memory_budget_mb": total / (1 << 20) * 1.01})
    assert check(_write(tmp_path, enough))["ok"]


def test_a_ring_too_large_for_the_budget_names_the_pictures_per_job_that_fit(tmp_path):
    """run.pictures_per_job N grows the ring to N + 2 batches: a budget it exceeds names the largest N that fits.
    By hand: 3 cameras 96x64, output 3 x 3x64x96 float32 = 221,184 B a batch, decoded 55,296 B; a budget of 1.5 MiB
    (1,572,864 B) holds 1 + (1,572,864 - 3 x 221,184 - 55,296) // 221,184 = 4 pictures per job, not 8."""
    d = synthetic_deployment(3, frames=4, realtime=False, run={"pictures_per_job": 8, "memory_budget_mb": 1.5})
    (key, msg), = check(_write(tmp_path, d))["errors"]
    assert key == "pipeline" and "x 10 output buffers" in msg
    assert "lower run.pictures_per_job from 8 to 4 or less (or auto)" in msg
    d["run"]["pictures_per_job"] = 4
    assert check(_write(tmp_path, d))["ok"]


def test_more_cameras_than_the_bound_are_one_line_not_one_thread_each(monkeypatch):
    import dvpipe.deploy._budget as budget

    text = errors_of(synthetic_deployment(budget.MAX_CAMERAS + 1, width=16, height=16))
    assert text.count("\n") == 1, text  # one problem line, not one per camera
    assert f"{budget.MAX_CAMERAS + 1} cameras" in text and f"at most {budget.MAX_CAMERAS} cameras" in text
    monkeypatch.setattr(budget, "MAX_CAMERAS", 4)
    assert "at most 4 cameras" in errors_of(synthetic_deployment(5))
    load_deployment(synthetic_deployment(4))


def test_sources_open_in_parallel_a_bounded_number_at_once_and_report_progress(monkeypatch):
    import threading
    import time

    import dvpipe.deploy.runner as runner_mod
    from dvpipe.deploy.sources.synthetic import SyntheticSource

    monkeypatch.setattr(runner_mod, "OPEN_CONCURRENCY", 3)
    inside, most, lock = [0], [0], threading.Lock()
    original = SyntheticSource._open

    def slow_open(self):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)  # long enough that readers overlap; the bound is what is asserted
        try:
            original(self)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(SyntheticSource, "_open", slow_open)
    seen: list[int] = []
    r = Runner(load_deployment(synthetic_deployment(12, frames=2)), write_outputs=False,
               opening=lambda run: seen.append(run.sources_opened))
    r.run()
    assert most[0] == 3  # in parallel, and never more than the bound at once
    assert seen == list(range(1, 13))


def test_dvpipe_run_shows_the_sources_opening_when_there_are_many(tmp_path, capsys):
    from dvpipe.cli import main as cli_main
    from dvpipe.cli.run import OPENING_LINE_FROM

    path = _write(tmp_path, synthetic_deployment(OPENING_LINE_FROM, frames=2, width=32, height=32))
    assert cli_main(["run", path, "--no-outputs"]) == 0
    err = capsys.readouterr().err
    assert f"opening sources: {OPENING_LINE_FROM}/{OPENING_LINE_FROM}" in err, err
    assert cli_main(["run", path, "--no-outputs", "-q"]) == 0  # -q: no progress display of any kind
    assert "opening sources" not in capsys.readouterr().err


def _dual_mp4(path: Path, front=(96, 64), rear=(64, 48), n: int = 6) -> None:
    """A dual-channel dashcam file: two H.264 video streams of different sizes (libx264 through PyAV)."""
    import av

    with av.open(str(path), "w") as c:
        streams = []
        for w, h in (rear, front):  # the rear camera is the file's first video stream
            st = c.add_stream("libx264", rate=10)
            st.width, st.height, st.pix_fmt = w, h, "yuv420p"
            st.options = {"bframes": "0"}
            streams.append(st)
        for k in range(n):
            for st in streams:
                fr = av.VideoFrame.from_ndarray(test_pattern(k, st.width, st.height), format="bgr24")
                fr.pts = k
                for p in st.encode(fr):
                    c.mux(p)
        for st in streams:
            for p in st.encode(None):
                c.mux(p)


def _video_deployment(uri: Path, **source) -> dict:
    dep = synthetic_deployment(1, frames=None, encoding="h264")
    dep["source"] = dict({"type": "video", "uri": str(uri)}, **source)
    return dep


def test_a_dual_stream_mp4_is_caught_by_validate_and_read_with_the_stream_option(tmp_path):
    mp4 = tmp_path / "dashcam.mp4"
    _dual_mp4(mp4)
    r = check(_write(tmp_path, _video_deployment(mp4)), plan=False)
    (key, msg), = r["errors"]
    assert key == "source.uri" and "video stream 0 is 64x48 but camera CAM0 declares 96x64" in msg, msg
    assert "choose it with stream: 1" in msg, msg
    chosen = _video_deployment(mp4, stream=1)
    assert check(_write(tmp_path, chosen), plan=False)["ok"]
    result = Runner(load_deployment(chosen), write_outputs=False).run()
    assert result.accounting.emitted["CAM0"] == 6 and result.accounting.dropped_total() == 0
    r = check(_write(tmp_path, _video_deployment(mp4, stream=2)), plan=False)
    assert r["errors"] == [["source.stream", f"{mp4} has 2 video streams; 2 is not one (0..1)"]], r["errors"]


def test_an_empty_h264_file_fails_validate(tmp_path):
    es = tmp_path / "cam.h264"
    es.write_bytes(b"")
    dep = synthetic_deployment(1, frames=None, encoding="h264")
    dep["source"] = {"type": "elementary", "uri": str(es)}
    r = check(_write(tmp_path, dep), plan=False)
    assert not r["ok"] and r["errors"] == [["source.uri", f"{es} is empty (0 bytes): there is no video to read"]]


def test_an_h264_file_of_another_size_than_the_camera_fails_validate(tmp_path):
    from dvpipe.testing.deployments import encode_access_units

    es = tmp_path / "cam.h264"
    es.write_bytes(b"".join(encode_access_units(4, 96, 64, codec="h264")))  # libx264: 96x64 pictures
    dep = synthetic_deployment(1, frames=None, encoding="h264", width=128, height=64)
    dep["source"] = {"type": "elementary", "uri": str(es)}
    r = check(_write(tmp_path, dep), plan=False)
    (key, msg), = r["errors"]
    assert key == "source.uri" and "video stream 0 is 96x64 but camera CAM0 declares 128x64" in msg, msg
    dep["rig"] = tiny_rig(1, 96, 64, encoding="h264")
    assert check(_write(tmp_path, dep), plan=False)["ok"]


def test_a_plugin_that_exits_at_import_is_one_problem_line(tmp_path, capsys):
    from dvpipe.cli import main as cli_main

    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    dep = synthetic_deployment(1)
    dep["plugins"] = ["exits.py"]
    path = _write(tmp_path, dep)
    assert cli_main(["validate", path]) == 1
    out = capsys.readouterr().out
    assert "plugins[0]: cannot import exits.py: it called sys.exit(3) while being imported" in out, out
    assert cli_main(["run", path, "--no-outputs"]) == 2  # dvpipe's status for a bad deployment, not the plugin's 3
    assert "it called sys.exit(3)" in capsys.readouterr().err


def test_a_run_that_emits_nothing_exits_1_with_one_line(tmp_path, capsys):
    from dvpipe.cli import main as cli_main

    folder = _folder(tmp_path, 3)
    path = _write(tmp_path, _one_camera(folder, 64, 96))  # every frame the wrong size: sets formed, all dropped
    assert cli_main(["run", path, "--no-outputs", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("dvpipe run: nothing was emitted: 3 frames in, every one dropped (wrong_size 3); "
                              "wrong_size: decode on cpu: frame is 96x64 but the camera declares 64x96"), err


def test_dvpipe_run_piped_into_head_finishes_the_run(tmp_path):
    import subprocess
    import sys

    out_dir = tmp_path / "out"
    dep = synthetic_deployment(2, frames=4, outputs={"dir": str(out_dir), "metrics": True})
    path = _write(tmp_path, dep)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    # `dvpipe run DEP | head -1`: the reader takes one line and goes away
    proc = subprocess.run(f"{sys.executable} -m dvpipe run {path} | head -1; echo \"status=${{PIPESTATUS[0]}}\"",
                          shell=True, executable="/bin/bash", capture_output=True, text=True, env=env, timeout=300)
    assert "status=0" in proc.stdout, (proc.stdout, proc.stderr)
    assert "Broken pipe" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert (out_dir / "summary.json").is_file()  # the run went to its end and wrote its outputs


def test_many_calibrated_cameras_without_an_alias_are_not_an_alias_bomb(tmp_path, monkeypatch):
    import dvpipe.types as types_mod
    from dvpipe import ConfigError
    from dvpipe.types import read_yaml

    monkeypatch.setattr(types_mod, "YAML_MAX_NODES", 100)  # the limit, scaled down with the rig
    rig = tiny_rig(10)  # 10 cameras x 45 values (name, size, encoding, K 3x3, lidar2cam 4x4): 450 values
    plain = tmp_path / "rig.yaml"
    plain.write_text(yaml.safe_dump(rig), encoding="utf-8")
    assert read_yaml(plain)["cameras"][9]["name"] == "CAM9"
    bomb = tmp_path / "bomb.yaml"  # 9 levels of 10 aliases each: 10^9 values once expanded, 100 written
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    bomb.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="alias bomb"):
        read_yaml(bomb)


def test_libjpeg_and_numpy_warnings_are_counted_and_summarised_not_printed_raw(tmp_path, capfd):
    from dvpipe.cli import main as cli_main

    folder = _folder(tmp_path, 3)
    first = sorted(folder.iterdir())[0]
    data = first.read_bytes()
    first.write_bytes(data[:len(data) // 2] + b"\xff\xd9")  # the scan cut in half: libjpeg warns, OpenCV conceals
    (tmp_path / "model.py").write_text("import numpy as np\n\ndef infer(batch):\n"
                                       "    return np.log(np.zeros(1))  # numpy: RuntimeWarning divide by zero\n")
    dep = _images_deployment(folder, extra_decode={"on_corrupt": "flag"})
    dep["model"] = str(tmp_path / "model.py") + ":infer"
    path = _write(tmp_path, dep)
    capfd.readouterr()
    assert cli_main(["run", path, "--no-outputs", "-q"]) == 0
    err = capfd.readouterr().err
    lines = err.splitlines()
    assert not [ln for ln in lines if ln.startswith(("Corrupt JPEG data", "RuntimeWarning")) or "Warning:" in ln
                and not ln.startswith("library messages")], err
    summary = [ln for ln in lines if ln.startswith("library messages: ")]
    assert len(summary) == 1, err
    assert "1 x Corrupt JPEG data: premature end of data segment" in summary[0], summary
    assert "3 x RuntimeWarning: divide by zero encountered in log" in summary[0], summary  # one per frame set


def test_exif_orientation_is_stated_by_validate(tmp_path):
    """A JPEG written by Pillow with EXIF orientation 6 (a viewer turns it 90 degrees clockwise): at the
    camera's size it is a warning (dvpipe uses the stored pixels); at another size the error says it."""
    import io

    from PIL import Image

    folder = tmp_path / "cam"
    folder.mkdir()
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    Image.fromarray(test_pattern(0, 96, 64)[..., ::-1]).save(buf, "JPEG", exif=exif.tobytes())
    (folder / "1700000000000000000.jpg").write_bytes(buf.getvalue())
    r = check(_write(tmp_path, _one_camera(folder, 96, 64)), plan=False)
    assert r["ok"] and any("its EXIF orientation is 6 (to be turned 90 degrees clockwise)" in w
                           for w in r["warnings"]), r["warnings"]
    r = check(_write(tmp_path, _one_camera(folder, 64, 96)), plan=False)  # the size a viewer would show
    (key, msg), = r["errors"]
    assert "is 96x64 but camera CAM0 declares 64x96" in msg and "its EXIF orientation is 6" in msg, msg


def test_an_mp4_display_rotation_is_stated_by_validate(tmp_path):
    import av

    mp4 = tmp_path / "turned.mp4"
    with av.open(str(mp4), "w") as c:  # PyAV/FFmpeg write the display matrix of a 90-degree rotation
        st = c.add_stream("libx264", rate=10)
        st.width, st.height, st.pix_fmt = 96, 64, "yuv420p"
        st.set_display_rotation(90)
        for k in range(3):
            fr = av.VideoFrame.from_ndarray(test_pattern(k, 96, 64), format="bgr24")
            fr.pts = k
            for p in st.encode(fr):
                c.mux(p)
        for p in st.encode(None):
            c.mux(p)
    r = check(_write(tmp_path, _video_deployment(mp4)), plan=False)
    assert r["ok"] and any("asks players to rotate it by 90 degrees" in w for w in r["warnings"]), r
