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
from dvpipe.deploy.testing import synthetic_deployment, test_pattern, tiny_rig

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
