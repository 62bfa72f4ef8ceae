"""dvpipe's V4L2 reader (dvpipe/deploy/sources/_v4l2.py): its structures against the kernel's own
header, its reading of V4L2's colorimetry codes, the ``reader`` key; and, on a QEMU guest with the
kernel's virtual video driver vivid, the device tests of tests/deploy/test_v4l2_vivid.py."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dvpipe.deploy import load_deployment
from dvpipe.deploy.config import SourceConfig
from dvpipe.deploy.sources import _v4l2
from dvpipe.deploy.sources.video import V4l2Source
from dvpipe.errors import ConfigError
from dvpipe.testing.deployments import tiny_rig
from dvpipe.types import Camera

ROOT = Path(__file__).resolve().parents[2]
HEADER = Path("/usr/include/linux/videodev2.h")

_ABI_PROGRAM = r"""
#include <stddef.h>
#include <stdio.h>
#include <linux/videodev2.h>
#define S(t) printf("sizeof %s %zu\n", #t, sizeof(struct t))
#define O(t, f) printf("offsetof %s.%s %zu\n", #t, #f, offsetof(struct t, f))
#define I(n) printf("ioctl %s %lu\n", #n, (unsigned long)n)
int main(void) {
    S(v4l2_capability); S(v4l2_fmtdesc); S(v4l2_format); S(v4l2_requestbuffers); S(v4l2_buffer);
    S(v4l2_streamparm); S(v4l2_plane); S(v4l2_pix_format_mplane);
    O(v4l2_format, fmt.pix_mp.width); O(v4l2_format, fmt.pix_mp.colorspace);
    O(v4l2_format, fmt.pix_mp.plane_fmt[0].sizeimage); O(v4l2_format, fmt.pix_mp.plane_fmt[0].bytesperline);
    O(v4l2_format, fmt.pix_mp.plane_fmt[1].sizeimage); O(v4l2_format, fmt.pix_mp.plane_fmt[1].bytesperline);
    O(v4l2_format, fmt.pix_mp.num_planes); O(v4l2_format, fmt.pix_mp.ycbcr_enc);
    O(v4l2_format, fmt.pix_mp.quantization);
    O(v4l2_buffer, m.planes); O(v4l2_plane, bytesused); O(v4l2_plane, length); O(v4l2_plane, m.mem_offset);
    O(v4l2_plane, data_offset);
    printf("const V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE %u\nconst V4L2_CAP_VIDEO_CAPTURE_MPLANE %u\n"
           "const VIDEO_MAX_PLANES %u\nfourcc NM12 %u\n", V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE,
           V4L2_CAP_VIDEO_CAPTURE_MPLANE, VIDEO_MAX_PLANES, V4L2_PIX_FMT_NV12M);
    O(v4l2_capability, capabilities); O(v4l2_capability, device_caps);
    O(v4l2_fmtdesc, pixelformat);
    O(v4l2_format, fmt.pix.width); O(v4l2_format, fmt.pix.bytesperline); O(v4l2_format, fmt.pix.colorspace);
    O(v4l2_format, fmt.pix.ycbcr_enc); O(v4l2_format, fmt.pix.quantization); O(v4l2_format, fmt.pix.xfer_func);
    O(v4l2_buffer, bytesused); O(v4l2_buffer, flags); O(v4l2_buffer, timestamp); O(v4l2_buffer, sequence);
    O(v4l2_buffer, memory); O(v4l2_buffer, m.offset); O(v4l2_buffer, length);
    O(v4l2_streamparm, parm.capture.capability); O(v4l2_streamparm, parm.capture.timeperframe.numerator);
    O(v4l2_streamparm, parm.capture.timeperframe.denominator);
    I(VIDIOC_QUERYCAP); I(VIDIOC_ENUM_FMT); I(VIDIOC_G_FMT); I(VIDIOC_S_FMT); I(VIDIOC_REQBUFS);
    I(VIDIOC_QUERYBUF); I(VIDIOC_QBUF); I(VIDIOC_DQBUF); I(VIDIOC_STREAMON); I(VIDIOC_STREAMOFF);
    I(VIDIOC_G_PARM); I(VIDIOC_S_PARM);
    printf("const V4L2_BUF_FLAG_ERROR %u\nconst V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC %u\n"
           "const V4L2_BUF_FLAG_TSTAMP_SRC_SOE %u\nconst V4L2_CAP_STREAMING %u\n",
           V4L2_BUF_FLAG_ERROR, V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC, V4L2_BUF_FLAG_TSTAMP_SRC_SOE, V4L2_CAP_STREAMING);
    printf("fourcc YUYV %u\nfourcc NV12 %u\nfourcc MJPG %u\n", V4L2_PIX_FMT_YUYV, V4L2_PIX_FMT_NV12, V4L2_PIX_FMT_MJPEG);
    for (int cs = 0; cs <= V4L2_COLORSPACE_DCI_P3; cs++)  /* what "default" means for a Y'CbCr format */
        printf("default %d %d\n", cs, V4L2_MAP_YCBCR_ENC_DEFAULT(cs) * 10 + V4L2_MAP_QUANTIZATION_DEFAULT(0, cs, 0));
    printf("quantization full %d\n", V4L2_QUANTIZATION_FULL_RANGE);
    return 0;
}
"""


def _offset(st, field_index: int) -> int:
    """Byte offset of the ``field_index``-th value of a ``struct.Struct``: pack zeros but that one, find it."""
    values: list = []
    for count, code in re.findall(r"(\d*)([a-wyzA-Z])", st.format):  # x: padding, no value
        values += [b""] if code == "s" else [0] * int(count or 1)
    values[field_index] = b"\x5a" if isinstance(values[field_index], bytes) else 0x5A
    return st.pack(*values).index(b"\x5a")


@pytest.mark.skipif(not HEADER.exists() or shutil.which("gcc") is None, reason="no gcc or no linux/videodev2.h")
def test_structures_and_ioctls_are_the_kernel_headers(tmp_path):
    """Every size, field offset, ioctl number and flag the reader uses, as gcc lays them out from the
    kernel's own header (64-bit)."""
    src = tmp_path / "abi.c"
    src.write_text(_ABI_PROGRAM)
    subprocess.run(["gcc", "-o", str(tmp_path / "abi"), str(src)], check=True)
    facts = dict(line.rsplit(" ", 1) for line in subprocess.run([str(tmp_path / "abi")], capture_output=True,
                                                                text=True, check=True).stdout.splitlines())
    facts = {k: int(v) for k, v in facts.items()}
    v = _v4l2
    sizes = {"v4l2_capability": v._CAPABILITY, "v4l2_fmtdesc": v._FMTDESC, "v4l2_format": v._FORMAT,
             "v4l2_requestbuffers": v._REQBUFS, "v4l2_buffer": v._BUFFER, "v4l2_streamparm": v._STREAMPARM}
    for name, st in sizes.items():
        assert st.size == facts[f"sizeof {name}"], name
    # each field the reader reads or writes, by its index in the Struct's values
    fields = {"v4l2_capability.capabilities": (v._CAPABILITY, 4), "v4l2_capability.device_caps": (v._CAPABILITY, 5),
              "v4l2_fmtdesc.pixelformat": (v._FMTDESC, 4),
              "v4l2_format.fmt.pix.width": (v._FORMAT, 1), "v4l2_format.fmt.pix.bytesperline": (v._FORMAT, 5),
              "v4l2_format.fmt.pix.colorspace": (v._FORMAT, 7), "v4l2_format.fmt.pix.ycbcr_enc": (v._FORMAT, 10),
              "v4l2_format.fmt.pix.quantization": (v._FORMAT, 11), "v4l2_format.fmt.pix.xfer_func": (v._FORMAT, 12),
              "v4l2_buffer.bytesused": (v._BUFFER, 2), "v4l2_buffer.flags": (v._BUFFER, 3),
              "v4l2_buffer.timestamp": (v._BUFFER, 5), "v4l2_buffer.sequence": (v._BUFFER, 8),
              "v4l2_buffer.memory": (v._BUFFER, 9), "v4l2_buffer.m.offset": (v._BUFFER, 10),
              "v4l2_buffer.length": (v._BUFFER, 11),
              "v4l2_streamparm.parm.capture.capability": (v._STREAMPARM, 1),
              "v4l2_streamparm.parm.capture.timeperframe.numerator": (v._STREAMPARM, 3),
              "v4l2_streamparm.parm.capture.timeperframe.denominator": (v._STREAMPARM, 4)}
    # the multi-planar API: struct v4l2_format with pix_mp, v4l2_buffer's m.planes, struct v4l2_plane
    assert v._FORMAT_MP.size == facts["sizeof v4l2_format"] and v._PLANE.size == facts["sizeof v4l2_plane"]
    assert v._BUFFER_MP.size == facts["sizeof v4l2_buffer"]
    fields.update({"v4l2_format.fmt.pix_mp.width": (v._FORMAT_MP, 1), "v4l2_format.fmt.pix_mp.colorspace": (v._FORMAT_MP, 5),
                   "v4l2_format.fmt.pix_mp.plane_fmt[0].sizeimage": (v._FORMAT_MP, 6),
                   "v4l2_format.fmt.pix_mp.plane_fmt[0].bytesperline": (v._FORMAT_MP, 7),
                   "v4l2_format.fmt.pix_mp.plane_fmt[1].sizeimage": (v._FORMAT_MP, 8),
                   "v4l2_format.fmt.pix_mp.plane_fmt[1].bytesperline": (v._FORMAT_MP, 9),
                   "v4l2_format.fmt.pix_mp.num_planes": (v._FORMAT_MP, 22),
                   "v4l2_format.fmt.pix_mp.ycbcr_enc": (v._FORMAT_MP, 24),
                   "v4l2_format.fmt.pix_mp.quantization": (v._FORMAT_MP, 25),
                   "v4l2_buffer.m.planes": (v._BUFFER_MP, 10), "v4l2_plane.bytesused": (v._PLANE, 0),
                   "v4l2_plane.length": (v._PLANE, 1), "v4l2_plane.m.mem_offset": (v._PLANE, 2),
                   "v4l2_plane.data_offset": (v._PLANE, 3)})
    for name, (st, index) in fields.items():
        assert _offset(st, index) == facts[f"offsetof {name}"], name
    assert v._CAPTURE_MPLANE == facts["const V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE"]
    assert v._CAP_VIDEO_CAPTURE_MPLANE == facts["const V4L2_CAP_VIDEO_CAPTURE_MPLANE"]
    assert v._MAX_PLANES == facts["const VIDEO_MAX_PLANES"] and v.fourcc_code("NM12") == facts["fourcc NM12"]
    for name in ("QUERYCAP", "ENUM_FMT", "G_FMT", "S_FMT", "REQBUFS", "QUERYBUF", "QBUF", "DQBUF", "STREAMON",
                 "STREAMOFF", "G_PARM", "S_PARM"):
        assert getattr(v, f"VIDIOC_{name}") == facts[f"ioctl VIDIOC_{name}"], name
    assert v._BUF_FLAG_ERROR == facts["const V4L2_BUF_FLAG_ERROR"]
    assert v._BUF_TIMESTAMP_MONOTONIC == facts["const V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC"]
    assert v._BUF_TSTAMP_SRC_SOE == facts["const V4L2_BUF_FLAG_TSTAMP_SRC_SOE"]
    assert v._CAP_STREAMING == facts["const V4L2_CAP_STREAMING"]
    for text in ("YUYV", "NV12", "MJPG"):
        assert v.fourcc_code(text) == facts[f"fourcc {text}"] and v.fourcc_text(facts[f"fourcc {text}"]) == text
    # each colorspace's default encoding and range, as the header's V4L2_MAP_*_DEFAULT macros resolve them
    full = facts["quantization full"]
    for cs in range(13):
        enc, quantization = divmod(facts[f"default {cs}"], 10)
        assert v._colorimetry(cs, 0, 0) == (v._YCBCR_ENC[enc], "full" if quantization == full else "limited"), cs


@pytest.mark.parametrize("colorspace, ycbcr_enc, quantization, want", [
    (8, 0, 0, ("bt601", "limited")),  # sRGB, defaults: the header maps sRGB to 601, limited for Y'CbCr
    (3, 0, 0, ("bt709", "limited")),  # Rec. 709
    (7, 0, 0, ("bt601", "full")),  # JPEG: 601, full range
    (1, 2, 1, ("bt709", "full")),  # SMPTE 170M colorspace, but the encoding and range said outright
    (10, 0, 0, ("bt2020", "limited")),
    (2, 0, 0, ("smpte240m", "limited")),  # SMPTE 240M is colorspace 2 (4 is BT.878: 601)
    (4, 0, 0, ("bt601", "limited")),
    (10, 7, 0, ("bt2020 constant luminance", "limited")),  # not BT.2020's matrix: refused by the source
])
def test_colorimetry_codes(colorspace, ycbcr_enc, quantization, want):
    assert _v4l2._colorimetry(colorspace, ycbcr_enc, quantization) == want


def _spec(encoding: str, **source) -> dict:
    return {"name": "v", "rig": tiny_rig(["A"], 64, 48, encoding=encoding), "pipeline": {"stages": ["decode"]},
            "cameras": [{"name": "A", "source": dict({"type": "v4l2", "uri": "/dev/video0"}, **source)}],
            "outputs": {"metrics": False}}


def test_reader_key_is_checked_in_one_line():
    with pytest.raises(ConfigError, match=r"cameras\[0\]\.source\.reader: .*not h264 .*reader: ffmpeg"):
        load_deployment(_spec("h264", reader="dvpipe"))
    with pytest.raises(ConfigError, match=r"cameras\[0\]\.source\.reader: .*not input_format mjpeg"):
        load_deployment(_spec("yuyv", reader="dvpipe", input_format="mjpeg"))
    load_deployment(_spec("yuyv", reader="dvpipe", input_format="yuyv422"))


@pytest.mark.parametrize("encoding, options, pollable", [("yuyv", {}, True), ("nv12", {}, True), ("jpeg", {}, True),
                                                         ("h264", {}, False), ("raw", {}, False),
                                                         ("yuyv", {"reader": "ffmpeg"}, False)])
def test_default_reader(encoding, options, pollable):
    src = V4l2Source(Camera("A", width=64, height=48, encoding=encoding), SourceConfig("v4l2", "/dev/video0", options))
    assert src.pollable is pollable


def _capture(fourcc: str, width: int = 64, height: int = 48, strides: tuple = ()) -> _v4l2.V4l2Capture:
    """A V4l2Capture as open() leaves it, without a device: negotiated, one buffer of one plane."""
    dev = _v4l2.V4l2Capture("/dev/video9", fourcc, (height, width))
    dev.negotiated = _v4l2.Negotiated(width, height, fourcc, strides[0] if strides else 0, 0, None, "bt601", "limited")
    dev._strides = strides
    return dev


def test_mjpeg_buffers_that_hold_no_picture_are_damaged_frames():
    jpeg = b"\xff\xd8\xff\xe0" + bytes(60) + b"\xff\xd9"
    for data, used, reason in [(jpeg, (len(jpeg), 0), None), (jpeg + b"\0" * 8, (len(jpeg) + 8, 0), None),
                               (jpeg, (0, 0), "empty frame"), (b"\0\0" + jpeg, (len(jpeg) + 2, 0), "no SOI")]:
        dev = _capture("MJPG")
        dev._maps = [[bytearray(data)]]
        got = dev._frame(0, [used], 0, 0, 0, 7)
        assert (got.damaged is None) if reason is None else (reason in got.damaged), (used, got.damaged)
        assert reason is not None or got.data == data[:used[0]]


def test_a_row_stride_shorter_than_a_row_is_refused():
    _capture("YUYV", strides=(128,))._check_strides("YUYV", 64, 48)  # 64 pixels x 2 bytes: fits
    with pytest.raises(_v4l2.V4l2Error, match="stride of 100 bytes, shorter than a row of 64 pixels .128 bytes."):
        _capture("YUYV", strides=(100,))._check_strides("YUYV", 64, 48)
    with pytest.raises(_v4l2.V4l2Error, match="plane 1 a stride of 32"):
        _capture("NM12", strides=(64, 32))._check_strides("NM12", 64, 48)


def test_a_driver_without_frame_rate_control_opens_at_its_own_rate(monkeypatch):
    # the kernel answers VIDIOC_G_PARM with ENOTTY for a driver with neither g_parm nor g_std (v4l2-dev.c);
    # rkisp1's and other SoC capture nodes have neither: the rate is then unknown, not an error
    dev = _capture("NV12")
    dev._fd = 3

    def ioctl(fd, request, buf, mutate):
        assert request == _v4l2.VIDIOC_G_PARM
        raise OSError(25, "Inappropriate ioctl for device")

    monkeypatch.setattr(_v4l2.fcntl, "ioctl", ioctl)
    assert dev._set_rate() is None
    dev._fd = -1


def test_the_reader_refuses_machines_whose_ioctls_are_numbered_otherwise(monkeypatch):
    # powerpc numbers them with 3 direction bits (read 2, write 4, none 1): VIDIOC_QUERYCAP is 0x40685600
    # there, 0x80685600 on x86-64 and aarch64
    for machine, ok in (("x86_64", True), ("aarch64", True), ("ppc64le", False), ("mips64", False)):
        monkeypatch.setattr(_v4l2.platform, "machine", lambda m=machine: m)
        why = _v4l2.reader_refusal()
        assert (why is None) == ok and (ok or machine in why), (machine, why)


def test_a_device_whose_format_does_not_serve_the_camera_is_closed(monkeypatch):
    closed = []
    got = _v4l2.Negotiated(64, 48, "YUYV", 128, 6144, 30.0, "bt2020", "limited")
    monkeypatch.setattr(_v4l2.V4l2Capture, "open", lambda self: got)
    monkeypatch.setattr(_v4l2.V4l2Capture, "close", lambda self: closed.append(self.path))
    monkeypatch.setattr(V4l2Source, "pollable", True)
    src = V4l2Source(Camera("A", width=64, height=48, encoding="yuyv"), SourceConfig("v4l2", "/dev/video9", {}))
    with pytest.raises(Exception, match="says its YUYV is bt2020 limited range, which dvpipe does not convert"):
        src._open_device()
    monkeypatch.setattr(V4l2Source, "_device_problem", lambda self, got: 1 / 0)  # any failure of the checks
    with pytest.raises(ZeroDivisionError):
        src._open_device()
    assert closed == ["/dev/video9", "/dev/video9"]


@pytest.mark.slow
def test_on_a_guest_with_vivid():
    """tests/deploy/test_v4l2_vivid.py on a QEMU guest with seven vivid devices, the last multi-planar
    (about a minute under emulation: ``make test-slow``, which keeps the default suite under 10 minutes)."""
    sys.path.insert(0, str(ROOT / "tools" / "vivid_vm"))
    try:
        import run as vivid_vm
    finally:
        sys.path.pop(0)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--color=no", "-rfEs",
               "tests/deploy/test_v4l2_vivid.py"]
    try:
        vivid_vm.needs()
    except vivid_vm.Missing as e:
        pytest.skip(f"no guest with vivid here: {e} (make test-deps installs it)")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "vivid_vm" / "run.py"), "--vivid",
                           "n_devs=7 node_types=0x1 input_types=0x0 multiplanar=1,1,1,1,1,1,2", "--timeout", "400",
                           "--", *command],
                          cwd=ROOT, capture_output=True, text=True, timeout=500)
    out = proc.stdout + proc.stderr
    if proc.returncode == 3 and out.startswith("vivid-vm: "):  # what it lacks, found only now (the kernel package)
        pytest.skip(f"no guest with vivid here: {out.strip()}")
    summary = re.findall(r"^(\d+ passed.*|.*failed.*|.*error.*) in [\d.]+s", out, re.M)
    assert proc.returncode == 0, out[-6000:]
    assert summary and "skipped" not in summary[-1] and "failed" not in summary[-1], out[-6000:]
