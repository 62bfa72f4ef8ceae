"""The DVPP knowledge base against constraints.md.

Every verdict case below was written from ../shared/reference/dvpp/constraints.md (not from the YAML);
its id starts with the section it checks ("s1.2-..." = constraints.md §1.2). Expected: the status and a
substring of the reason that decided it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dvpipe import knowledge as kb
from dvpipe.knowledge import (CannVersion, KnowledgeGap, Request, check, evaluate, family_of, legal_crop, propose,
                              resize_hops, stride_for)

ROOT = Path(__file__).resolve().parents[2]

A310, A910, P310, B310, A2, A3, A350 = ("Ascend310", "Ascend910ProB", "Ascend310P3", "Ascend310B1", "Ascend910B1",
                                        "Ascend910_9391", "Ascend950PR")


def case(id_, soc, cann, unit, op, w, h, fmt, status, reason="", **kw):
    return pytest.param(soc, cann, unit, op, w, h, fmt, kw, status, reason, id=id_)


CASES = [
    # ---------------------------------------------------------------- §1.1 JPEG bitstream (all products)
    case("s1.1-310-progressive", A310, "6.0.1", "jpegd", None, 1920, 1080, "jpeg-progressive", "rejected",
         "jpeg-progressive"),
    case("s1.1-310P-progressive", P310, "7.0.0", "jpegd", None, 1920, 1080, "jpeg-progressive", "rejected",
         "progressive"),
    case("s1.1-A2-progressive-8.5", A2, "8.5.0", "jpegd", None, 1920, 1080, "jpeg-progressive", "rejected",
         "progressive"),
    case("s1.1-A3-arithmetic", A3, "9.0.0", "jpegd", None, 1920, 1080, "jpeg-arithmetic", "rejected",
         "jpeg-arithmetic"),
    case("s1.1-350-progressive-himpi", A350, "9.0.0", "jpegd", None, 1920, 1080, "jpeg-progressive", "rejected",
         "progressive"),
    case("s1.1-310-jpeg2000", A310, "6.0.1", "jpegd", None, 1920, 1080, "jpeg2000", "rejected", "JPEG2000"),
    case("s1.1-310-411-subsampling", A310, "6.0.1", "jpegd", None, 1920, 1080, "jpeg411", "rejected", "jpeg411"),
    # ---------------------------------------------------------------- §1.3 output format per subsampling
    case("s1.3-310-444-to-yuv444sp", A310, "6.0.1", "jpegd", None, 1920, 1080, "jpeg444", "ok", out_fmt="yuv444sp"),
    case("s1.3-310-444-to-nv21", A310, "6.0.1", "jpegd", None, 1920, 1080, "jpeg444", "ok", out_fmt="nv21"),
    case("s1.3-310-440-to-yuv440sp", A310, "6.0.1", "jpegd", None, 1920, 1080, "jpeg440", "ok", out_fmt="yuv440sp"),
    case("s1.3-310P-440-to-nv12", P310, "8.0.0", "jpegd", None, 1920, 1080, "jpeg440", "ok"),
    case("s1.3-310P-440-not-444", P310, "8.0.0", "jpegd", None, 1920, 1080, "jpeg440", "rejected",
         "not available from jpeg440", out_fmt="yuv444sp", api="acldvpp"),   # §1.3 is the acldvpp table
    case("s1.3-310-420-not-444", A310, "6.0.1", "jpegd", None, 1920, 1080, "jpeg420", "rejected",
         "not available from jpeg420", out_fmt="yuv444sp"),
    case("s1.3-310-400-to-nv12", A310, "6.0.1", "jpegd", None, 640, 480, "jpeg400", "ok"),
    case("s1.3-310-no-rgb-out-v1", A310, "6.0.1", "jpegd", None, 640, 480, "jpeg420", "rejected", "rgb888",
         out_fmt="rgb888"),
    case("s1.3-unspecified-subsampling-444-out", P310, "8.0.0", "jpegd", None, 640, 480, "jpeg", "unknown",
         "subsampling", out_fmt="yuv444sp", api="acldvpp"),
    case("s1.3-310-odd-height-floored", A310, "6.0.1", "jpegd", None, 1242, 375, "jpeg420", "ok"),
    case("s1.4-422sp-output-needs-even", A310, "6.0.1", "jpegd", None, 1243, 376, "jpeg422", "rejected",
         "must be even", out_fmt="yuv422sp"),
    # ---------------------------------------------------------------- §1.2 JPEGD input resolution
    case("s1.2-310-8192-ok", A310, "6.0.1", "jpegd", None, 8192, 8192, "jpeg420", "ok"),
    case("s1.2-310-8193-rejected", A310, "6.0.1", "jpegd", None, 8193, 4000, "jpeg420", "rejected", "8192"),
    case("s1.2-310-min-32", A310, "6.0.1", "jpegd", None, 16, 16, "jpeg420", "rejected", "minimum 32"),
    case("s1.2-910-9000-rejected", A910, "8.0.0", "jpegd", None, 9000, 9000, "jpeg420", "rejected", "8192"),
    case("s1.2-310P-9000-rejected", P310, "9.0.0", "jpegd", None, 9000, 9000, "jpeg420", "rejected", "8192"),
    case("s1.2-A2-16384-at-8.5", "Ascend910B4-1", "8.5.0", "jpegd", None, 16384, 16384, "jpeg420", "ok"),
    case("s1.2-A2-16385-at-8.5", A2, "8.5.0", "jpegd", None, 16385, 100, "jpeg420", "rejected", "16384"),
    case("s1.2-310B-16384-at-8.5", B310, "8.5.0", "jpegd", None, 16384, 8000, "jpeg420", "ok"),
    case("s1.2-A2-12000-before-8.5-unknown", A2, "8.0.0", "jpegd", None, 12000, 9000, "jpeg420", "unknown",
         "8192 or 16384"),
    case("s1.2-A2-8192-before-8.5-ok", A2, "8.0.0", "jpegd", None, 8192, 8192, "jpeg420", "ok"),
    case("s1.2-A2-20000-before-8.5-rejected", A2, "8.0.0", "jpegd", None, 20000, 100, "jpeg420", "rejected",
         "16384"),
    case("s1.2-A3-before-8.5-unknown", A3, "8.2.RC1", "jpegd", None, 1920, 1080, "jpeg420", "unknown", "8.5.0"),
    case("s1.4-A3-stride-not-in-table", A3, "9.0.0", "jpegd", None, 1920, 1080, "jpeg420", "unknown",
         "stride table"),
    # ---------------------------------------------------------------- §2.1 VPC ranges
    case("s2.1-310-min-10x6", A310, "6.0.1", "vpc", "resize", 8, 6, "nv12", "rejected", "minimum 10",
         out_width=16, out_height=12),
    case("s2.1-310-10x6-ok", A310, "6.0.1", "vpc", "resize", 10, 6, "nv12", "ok", out_width=20, out_height=12),
    case("s2.1-310-output-cap-4096", A310, "6.0.1", "vpc", "resize", 1920, 1080, "nv12", "rejected", "4096",
         out_width=4098, out_height=2000),
    case("s2.1-A2-output-4096x8192", A2, "9.0.0", "vpc", "resize", 1920, 1080, "nv12", "ok", out_width=2048,
         out_height=6000),
    case("s2.1-A2-output-width-capped", A2, "9.0.0", "vpc", "resize", 1920, 1080, "nv12", "rejected", "4096",
         out_width=5000, out_height=2000),
    case("s2.1-310P-output-height-capped", P310, "9.0.0", "vpc", "resize", 1920, 1080, "nv12", "rejected",
         "4096", out_width=2048, out_height=6000),
    case("s2.1-A2-yuv440-width-4096", A2, "9.0.0", "vpc", "resize", 5000, 1000, "yuv440sp", "rejected", "4096",
         out_width=5000 // 2, out_height=500),
    # ---------------------------------------------------------------- §2.1 8K mode
    case("s2.1-310-8k-nv12-resize-ok", A310, "6.0.1", "vpc", "resize", 6000, 4000, "nv12", "ok", out_width=3000,
         out_height=2000),
    case("s2.1-310-8k-yuv444-rejected", A310, "6.0.1", "vpc", "resize", 6000, 4000, "yuv444sp", "rejected", "8K",
         out_fmt="nv12", out_width=3000, out_height=2000),
    case("s2.1-310-8k-no-crop", A310, "6.0.1", "vpc", "crop", 6000, 4000, "nv12", "rejected", "cannot crop",
         crop=(0, 0, 999, 999)),
    case("s2.1-910-8192-ok", A910, "8.0.0", "vpc", "resize", 8192, 8192, "nv12", "ok", out_width=4096,
         out_height=4096),
    case("s2.1-910-8194-rejected", A910, "8.0.0", "vpc", "resize", 8194, 4000, "nv12", "rejected", "8192",
         out_width=4096, out_height=2000),
    case("s2.1-310P-8k-yuv444-ok", P310, "7.0.0", "vpc", "resize", 6000, 4000, "yuv444sp", "ok", out_fmt="nv12",
         out_width=3000, out_height=2000),
    case("s2.1-310P-8k-rgb-rejected", P310, "7.0.0", "vpc", "resize", 6000, 4000, "rgb888", "rejected", "8K",
         api="acldvpp", out_width=3000, out_height=2000),
    case("s2.1-310P-8k-crop-unknown", P310, "7.0.0", "vpc", "crop", 6000, 4000, "nv12", "unknown", "8K mode",
         api="acldvpp", crop=(0, 0, 999, 999)),
    # 310B/A2 acldvpp before 9.0.0: the 8.0.RC1 page's 8K-mode formats (aclcppdevg_03_0272); from 9.0.0 any but 440
    case("s2.1-310B-8k-rgb-before-9.0-rejected", "Ascend310B1", "8.0.0", "vpc", "resize", 6000, 4000, "rgb888",
         "rejected", "8K mode", api="acldvpp", out_fmt="rgb888", out_width=3000, out_height=2000),
    case("s2.1-A2-8k-bgra-before-9.0-rejected", "Ascend910B1", "8.0.RC1", "vpc", "resize", 4000, 6000, "bgra8888",
         "rejected", "8K mode", api="acldvpp", out_fmt="bgra8888", out_width=2000, out_height=3000),
    case("s2.1-A2-8k-nv12-before-9.0-ok", "Ascend910B1", "8.0.0", "vpc", "resize", 6000, 4000, "nv12", "ok",
         api="acldvpp", out_width=3000, out_height=2000),
    # ---------------------------------------------------------------- §2.2 alignment and stride
    case("s2.2-310-odd-height-nv12", A310, "6.0.1", "vpc", "resize", 1242, 375, "nv12", "rejected",
         "input height 375 must be even (floored to 374 silently)", out_width=620, out_height=186),
    case("s2.2-310P-odd-height-nv12", P310, "7.0.0", "vpc", "resize", 1242, 375, "nv12", "rejected",
         "input height 375 must be even", out_width=620, out_height=186),
    case("s2.2-A2-odd-width-yuyv", A2, "9.0.0", "vpc", "resize", 1243, 376, "yuyv", "rejected",
         "input width 1243 must be even", out_width=620, out_height=188),
    case("s2.2-310-yuv444-odd-floored-silently", A310, "6.0.1", "vpc", "resize", 1243, 375, "yuv444sp", "ok",
         out_fmt="nv12", out_width=620, out_height=188),
    case("s2.2-310P-ws-over-16384", P310, "9.0.0", "vpc", "resize", 6000, 100, "rgb888", "rejected", "16384",
         api="himpi", out_width=3000, out_height=50),
    case("s2.2-A2-ws-max-not-stated", A2, "8.0.0", "vpc", "resize", 6000, 100, "rgb888", "unknown", "16384",
         api="himpi", out_width=3000, out_height=50),
    case("s2.2-310-rgb-input-table-not-retrieved", A310, "6.0.1", "vpc", "resize", 640, 480, "rgb888", "unknown",
         "not retrieved", out_fmt="nv12", out_width=320, out_height=240),
    # ---------------------------------------------------------------- §2.3 output formats
    case("s2.3-310-no-rgb-output", A310, "6.0.1", "vpc", "csc", 640, 480, "nv12", "rejected", "NV12/NV21 only",
         out_fmt="rgb888"),
    case("s2.3-310P-rgb-output", P310, "7.0.0", "vpc", "csc", 640, 480, "nv12", "ok", out_fmt="rgb888"),
    case("s2.3-A2-csc-table-not-retrieved", A2, "9.0.0", "vpc", "csc", 640, 480, "nv12", "unknown",
         "not retrieved", out_fmt="rgb888"),
    # ---------------------------------------------------------------- §2.4 scale ratio
    case("s2.4-310-ratio-1-40-rejected", A310, "6.0.1", "vpc", "resize", 4000, 3000, "nv12", "rejected", "1/40",
         out_width=100, out_height=60),
    case("s2.4-310-ratio-exactly-1-32-ok", A310, "6.0.1", "vpc", "resize", 1024, 1024, "nv12", "ok", out_width=32,
         out_height=32),
    case("s2.4-310-ratio-17-rejected", A310, "6.0.1", "vpc", "resize", 100, 100, "nv12", "rejected", "[1/32, 16]",
         out_width=1700, out_height=1700),
    case("s2.4-A2-ratio-undocumented", A2, "9.0.0", "vpc", "resize", 4000, 3000, "nv12", "unknown",
         "no scale limit is documented", out_width=100, out_height=60),
    case("s2.4-310P-v2-ratio-20-open", P310, "9.0.0", "vpc", "resize", 100, 100, "nv12", "unknown", "512",
         api="himpi", out_width=2000, out_height=2000),
    case("s2.4-310P-v1-ratio-20-rejected", P310, "9.0.0", "vpc", "resize", 100, 100, "nv12", "rejected", "16",
         api="acldvpp", out_width=2000, out_height=2000),
    # ---------------------------------------------------------------- §2.4 crop parity and paste alignment
    case("s2.4-310-crop-left-odd", A310, "6.0.1", "vpc", "crop", 1600, 900, "nv12", "rejected",
         "crop left 1 must be even", crop=(1, 0, 100, 99)),
    case("s2.4-310-crop-right-even", A310, "6.0.1", "vpc", "crop", 1600, 900, "nv12", "rejected",
         "crop right 100 must be odd", crop=(0, 0, 100, 99)),
    case("s2.4-310-crop-legal", A310, "6.0.1", "vpc", "crop", 1600, 900, "nv12", "ok", crop=(0, 0, 99, 99)),
    case("s2.4-310P-no-parity", P310, "7.0.0", "vpc", "crop_resize", 1600, 900, "nv12", "ok", api="acldvpp",
         crop=(1, 1, 800, 450), out_width=400, out_height=224),
    case("s2.4-A2-no-parity", A2, "8.0.0", "vpc", "crop", 1600, 900, "nv12", "ok", crop=(1, 1, 100, 100)),
    case("s2.4-310B-parity-unknown", B310, "8.0.0", "vpc", "crop", 1600, 900, "nv12", "unknown", "not documented",
         crop=(1, 1, 100, 100)),
    case("s2.4-A3-parity-unknown", A3, "9.0.0", "vpc", "crop", 1600, 900, "nv12", "unknown", "not documented",
         crop=(1, 1, 100, 100)),
    case("s2.4-310B-strictest-box-ok", B310, "8.0.0", "vpc", "crop", 1600, 900, "nv12", "ok", crop=(0, 0, 99, 99)),
    case("s2.4-310-paste-left-16", A310, "6.0.1", "vpc", "crop_resize_paste", 1600, 900, "nv12", "rejected",
         "multiple of 16", crop=(0, 0, 799, 449), out_width=640, out_height=640, paste=(8, 0, 407, 224 + 1)),
    case("s2.4-310P-paste-left-16", P310, "7.0.0", "vpc", "crop_resize_paste", 1600, 900, "nv12", "rejected",
         "multiple of 16", api="acldvpp", crop=(0, 0, 799, 449), out_width=640, out_height=640,
         paste=(8, 0, 407, 225)),
    case("s2.4-A2-paste-free", A2, "8.0.0", "vpc", "crop_resize_paste", 1600, 900, "nv12", "ok", api="acldvpp",
         crop=(0, 0, 799, 449), out_width=640, out_height=640, paste=(8, 0, 407, 225)),
    case("s2.4-crop-min-10x6", A310, "6.0.1", "vpc", "crop", 1600, 900, "nv12", "rejected", "minimum",
         crop=(0, 0, 7, 5)),
    case("s2.4-himpi-batch-256", P310, "9.0.0", "vpc", "resize", 640, 480, "nv12", "rejected", "at most 256",
         api="himpi", batch=300, out_width=320, out_height=240),
    case("s2.4-310B-vpc-channels-128", B310, "9.0.0", "vpc", "resize", 640, 480, "nv12", "rejected",
         "at most 128", api="himpi", channels=200, out_width=320, out_height=240),
    # ---------------------------------------------------------------- §0/§6/§8 version and API windows
    case("s0-A3-before-docs", A3, "8.0.0", "vpc", "resize", 1920, 1080, "nv12", "unknown", "8.1.RC1",
         out_width=960, out_height=540),
    case("s8-A3-8.1-jpege-only", A3, "8.1.RC1", "vpc", "resize", 1920, 1080, "nv12", "unknown", "8.2.RC1",
         out_width=960, out_height=540),
    case("s8-A3-8.2-v1-resize", A3, "8.2.RC1", "vpc", "resize", 1920, 1080, "nv12", "ok", api="acldvpp",
         out_width=960, out_height=540),
    case("s8-A3-8.2-himpi-not-yet", A3, "8.2.RC1", "vpc", "resize", 1920, 1080, "nv12", "unknown", "8.5.0",
         api="himpi", out_width=960, out_height=540),
    case("s8-310-dropped-8.5", A310, "8.5.0", "vpc", "resize", 1920, 1080, "nv12", "unknown", "no longer listed",
         out_width=960, out_height=540),
    case("s8-310-8.3-still-listed", A310, "8.3.RC1", "vpc", "resize", 1920, 1080, "nv12", "ok", out_width=960,
         out_height=540),
    case("s8-310B-before-6.2", B310, "6.0.1", "vpc", "resize", 1920, 1080, "nv12", "unknown", "6.2.RC1",
         out_width=960, out_height=540),
    case("s6-350-no-acldvpp", A350, "9.0.0", "vpc", "resize", 1920, 1080, "nv12", "rejected", "acldvpp",
         api="acldvpp", out_width=960, out_height=540),
    case("s6-310-no-himpi", A310, "6.0.1", "vpc", "resize", 1920, 1080, "nv12", "rejected", "hi_mpi", api="himpi",
         out_width=960, out_height=540),
    # ---------------------------------------------------------------- §3 VDEC
    case("s3.2-310-h264-1080p", A310, "6.0.1", "vdec", None, 1920, 1080, "h264", "ok"),
    case("s3.2-310-min-128", A310, "6.0.1", "vdec", None, 100, 100, "h264", "rejected", "minimum 128"),
    case("s3.2-310-4097-rejected", A310, "6.0.1", "vdec", None, 4097, 2160, "h264", "rejected", "4096"),
    case("s3.2-310B-h264-8k", B310, "7.0.0", "vdec", None, 8192, 4320, "h264", "ok"),
    case("s3.2-310B-h265-5400x8192", B310, "7.0.0", "vdec", None, 5400, 8192, "h265", "ok"),
    case("s3.2-310B-h265-8192x5400-ambiguous", B310, "7.0.0", "vdec", None, 8192, 5400, "h265", "unknown",
         "ambiguous"),
    case("s3.2-310B-h265-8192x8192", B310, "7.0.0", "vdec", None, 8192, 8192, "h265", "rejected", "5400"),
    case("s3.1-h264-10bit", A310, "6.0.1", "vdec", None, 1920, 1080, "h264", "rejected", "10-bit", bit_depth=10),
    case("s3.1-h265-10bit", A310, "6.0.1", "vdec", None, 1920, 1080, "h265", "ok", bit_depth=10),
    case("s3.1-h265-interlaced", P310, "7.0.0", "vdec", None, 1920, 1080, "h265", "rejected", "interlaced",
         interlaced=True),
    case("s3.1-h264-high10-profile", A310, "6.0.1", "vdec", None, 1920, 1080, "h264", "rejected", "profile",
         profile="high10"),
    case("s3.1-annexb-only", A310, "6.0.1", "vdec", None, 1920, 1080, "h264", "rejected", "Annex-B",
         container="mp4"),
    case("s3.4-310-vdec-32-channels", A310, "6.0.1", "vdec", None, 1920, 1080, "h264", "rejected", "at most 32",
         channels=33),
    case("s3.4-310P-vdec-200-channels", P310, "7.0.0", "vdec", None, 1920, 1080, "h264", "ok", api="acldvpp",
         channels=200),
    case("s3.4-A2-himpi-vdec-32", A2, "8.0.0", "vdec", None, 1920, 1080, "h264", "rejected", "at most 32",
         api="himpi", channels=33),
    case("s3.4-350-vdec-open", A350, "9.0.0", "vdec", None, 1920, 1080, "h264", "unknown", "JPEGD only"),
    case("s3.3-310-odd-output-rejected", A310, "6.0.1", "vdec", None, 1242, 375, "h264", "rejected", "even"),
    # ---------------------------------------------------------------- §4 PNGD
    case("s4-310-v1-support-open", A310, "6.0.1", "pngd", None, 1242, 375, "png", "unknown", "not retrieved"),
    case("s4-310P-himpi-rgba", P310, "7.0.0", "pngd", None, 1242, 375, "png-rgba", "ok", out_fmt="rgba8888"),
    case("s4-310P-rgb-to-rgba-rejected", P310, "7.0.0", "pngd", None, 1242, 375, "png-rgb", "rejected",
         "rgba8888", out_fmt="rgba8888"),
    case("s4-310P-4097-rejected", P310, "7.0.0", "pngd", None, 5000, 100, "png-rgb", "rejected", "4096"),
    case("s4-palette-rejected", A2, "9.0.0", "pngd", None, 640, 480, "png-palette", "rejected", "png-palette"),
]


@pytest.mark.parametrize("soc, cann, unit, op, w, h, fmt, extras, status, reason", CASES)
def test_verdicts_from_constraints_md(soc, cann, unit, op, w, h, fmt, extras, status, reason):
    v = check(soc, cann, unit, op, w, h, fmt, **extras)
    deciding = {"rejected": v.violations, "unknown": v.unknowns, "ok": v.reasons}[status]
    assert v.status == status, [f.message for f in v.reasons]
    if reason:
        assert any(reason in f.message for f in deciding), [f.message for f in v.reasons]
    for f in v.reasons:
        assert f.source.startswith("https://"), f
        assert f.confidence in kb.CONFIDENCES
        assert f.message.startswith(("JPEGD", "VPC", "VDEC", "PNGD"))
    assert v.ok is (status == "ok")


def test_case_count():
    assert len(CASES) >= 100  # the README's "100+ test cases written from the prose"


# ---------------------------------------------------------------------------------------------- verdict details

def test_brief_example_message_and_fields():
    v = check(soc="Ascend310", cann="6.0.1", unit="vpc", op="resize", width=1242, height=375, fmt="nv12",
              out_width=620, out_height=186)
    assert v.status == "rejected" and not v.ok
    f = v.violations[0]
    assert f.message == "VPC resize on Ascend310 (CANN 6.0.1): input height 375 must be even (floored to 374 silently)"
    assert f.effect == "floored to 374 silently"
    assert f.rule_id == "vpc.v1.stride.310_910"
    assert f.confidence == "documented" and f.section == "§2.2"
    assert f.source.startswith("https://www.hiascend.com/")
    assert v.api == "acldvpp" and v.confidence == "documented"


def test_ok_verdict_carries_silent_effects():
    # §1.3: 1242x375 JPEG on 310 decodes to 1242x374 NV12, silently
    v = check("Ascend310", "6.0.1", "jpegd", None, 1242, 375, "jpeg420")
    assert v.ok
    assert [f.subject for f in v.effects] == ["out_h"]
    assert "374" in v.effects[0].message and v.effects[0].effect


def test_vpc_310_odd_size_floor_is_an_effect_when_no_rule_is_broken():
    # §2.2: yuv444sp has no alignment rule, but VPC on 310 still floors odd sizes
    v = check("Ascend310", "8.2.RC1", "vpc", "resize", 15, 15, "yuv444sp", out_fmt="nv12", out_width=14,
              out_height=14)
    assert v.ok
    assert {f.subject for f in v.effects} == {"in_w", "in_h"}
    assert "processed as 14" in v.effects[0].message


def test_unknowns_say_why_and_name_the_open_question():
    v = check("Ascend910B1", "8.0.0", "jpegd", None, 12000, 9000, "jpeg420")
    assert v.status == "unknown" and v.confidence is None
    assert all(f.open_question == "q5" for f in v.unknowns)
    assert any(q.id == "q5" and "8.5.0" in q.text for q in kb.open_questions())


def test_rejection_beats_unknown():
    # progressive JPEG on A3 before its JPEGD limits are documented: still rejected (§1.1 holds everywhere)
    v = check("Ascend910_9391", "8.2.RC1", "jpegd", None, 1920, 1080, "jpeg-progressive")
    assert v.status == "rejected"
    assert v.unknowns  # the undocumented aspects are still reported


def test_api_autoselect_and_alternatives():
    # §4: v1 PNGD support is open, hi_mpi PNGD is documented on 310P -> the hi_mpi verdict, v1 as alternative
    v = check("Ascend310P3", "7.0.0", "pngd", None, 1242, 375, "png")
    assert v.ok and v.api == "himpi" and v.request.api == "himpi"
    assert [a.api for a in v.alternatives] == ["acldvpp"] and v.alternatives[0].status == "unknown"
    v1 = check("Ascend310P3", "7.0.0", "pngd", None, 1242, 375, "png", api="v1")
    assert v1.status == "unknown" and v1.api == "acldvpp"


def test_extrapolated_rules_are_marked_inferred():
    # §1.4's stride table was read in 8.0.0; applied to 6.0.1 it is an assumption, and the verdict says so
    v = check("Ascend310", "6.0.1", "jpegd", None, 1920, 1080, "jpeg420")
    assert v.ok and v.confidence == "inferred"
    assert any(f.rule_id == "knowledge.extrapolated" and "jpegd.v1.stride.128" in f.message for f in v.notes)
    assert check("Ascend310", "8.0.0", "jpegd", None, 1920, 1080, "jpeg420").confidence == "documented"


def test_secondary_sources_keep_their_confidence():
    # §2.4: the 1/32..16 ratio comes from legacy/MindX docs and samples
    v = check("Ascend310", "6.0.1", "vpc", "resize", 4000, 3000, "nv12", out_width=100, out_height=60)
    assert v.status == "rejected" and v.confidence == "secondary"
    assert "support.huaweicloud.com" in v.violations[0].source


def test_family_key_instead_of_soc():
    v = check(family="ascend910b", cann="8.5.0", unit="jpegd", width=16384, height=16384, fmt="jpeg420")
    assert v.ok and v.request.soc is None and v.request.family == "ascend910b"
    assert "on ascend910b (CANN 8.5.0" in v.summary


def test_newer_cann_than_docs_is_noted():
    v = check("Ascend310P3", "10.0.0", "vdec", None, 1920, 1080, "h264")
    assert v.ok
    assert any(f.rule_id == "knowledge.newer_than_docs" for f in v.notes)


def test_a_soc_name_matched_by_a_family_pattern_is_a_note_not_an_open_verdict():
    """Ascend310P7 is not a listed SoC string but matches the 310P naming pattern: the family's documented rules
    apply (a note says how the name was matched); only a listed name dvpipe guessed (Atlas 350) leaves it open."""
    v = check("Ascend310P7", "8.0.0", "jpegd", "decode", 1600, 900, "jpeg", out_fmt="nv12")
    assert v.status == "ok" and any(f.rule_id == "family.soc_name" and f.kind == "note" for f in v.reasons)


def test_atlas350_names_are_inferred():
    """constraints.yaml products.atlas350: no SoC string is documented ("probe should report 'unknown product'");
    dvpipe's guessed names reach the family's rules, but a verdict on a guessed name stays open, never ok."""
    v = check("Ascend950DT", "9.0.0", "vpc", "resize", 1920, 1080, "nv12", out_width=960, out_height=540)
    assert v.api == "himpi" and v.status == "unknown"
    assert any(f.rule_id == "family.soc_name" and f.confidence == "inferred" and f.kind == "unknown"
               for f in v.reasons)
    assert check("Ascend950PR", "8.5.0", "vpc", "resize", 1920, 1080, "nv12", out_width=960,
                 out_height=540).status == "unknown"


def test_check_accepts_a_request_object():
    req = Request.make("Ascend310P3", "7.0.0", "vpc", "resize", 1600, 900, "nv12", out_width=800, out_height=448)
    assert check(req).ok and evaluate(req).ok
    assert req.scale is not None and req.out_size == (448, 800)


@pytest.mark.parametrize("kwargs, msg", [
    (dict(soc="Ascend999", cann="8.0.0", unit="jpegd", width=10, height=10, fmt="jpeg420"), "unknown SoC"),
    (dict(soc="Ascend310", cann="eight", unit="jpegd", width=10, height=10, fmt="jpeg420"), "cannot parse"),
    (dict(soc="Ascend310", cann="8.0.0", unit="gpu", width=10, height=10, fmt="jpeg420"), "unknown DVPP unit"),
    (dict(soc="Ascend310", cann="8.0.0", unit="vpc", width=10, height=10, fmt="nv12"), "needs an op"),
    (dict(soc="Ascend310", cann="8.0.0", unit="vpc", op="resize", width=10, height=10, fmt="nv12"), "out_width"),
    (dict(soc="Ascend310", cann="8.0.0", unit="vpc", op="crop", width=100, height=100, fmt="nv12",
          crop=(0, 0, 100, 99)), "outside"),
    (dict(soc="Ascend310", cann="8.0.0", unit="vpc", op="resize", width=10, height=10, fmt="jpeg420",
          out_width=10, out_height=10), "pixel format"),
    (dict(soc="Ascend310", cann="8.0.0", unit="jpegd", width=10, height=10, fmt="h264"), "input of vdec"),
    (dict(soc="Ascend310", cann="8.0.0", unit="jpegd", width=0, height=10, fmt="jpeg420"), "positive"),
    (dict(soc="Ascend310", cann="8.0.0", unit="jpegd", width=10, height=10, fmt="jpeg420", api="v3"), "API"),
    (dict(soc="Ascend310", cann="8.0.0", unit="jpegd", width=10, height=10, fmt="jpeg420", colour="red"),
     "unknown request fields"),
])
def test_malformed_requests_raise(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        check(**kwargs)


def test_every_family_unit_and_version_answers_without_error():
    sizes = [(1242, 375), (1600, 900), (1920, 1080), (4096, 2160), (640, 480)]
    versions = ["5.0.4", "6.0.1", "7.0.0", "8.0.0", "8.2.RC1", "8.5.0", "9.0.0"]
    for fam in kb.families():
        for cann in versions:
            for w, h in sizes:
                for unit, op, fmt, kw in (("jpegd", None, "jpeg420", {}), ("pngd", None, "png", {}),
                                          ("vdec", None, "h264", {}),
                                          ("vpc", "resize", "nv12", dict(out_width=w // 2, out_height=h // 2))):
                    v = check(family=fam.key, cann=cann, unit=unit, op=op, width=w, height=h, fmt=fmt, **kw)
                    assert v.status in kb.STATUSES
                    if v.status != "ok":
                        assert v.violations or v.unknowns
                    for f in v.reasons:
                        assert f.message and f.source.startswith("https://")


# ---------------------------------------------------------------------------------------------- SoC names (§0)

@pytest.mark.parametrize("soc, fam", [
    ("Ascend310", "ascend310"),
    ("Ascend910", "ascend910"), ("Ascend910A", "ascend910"), ("Ascend910ProA", "ascend910"),
    ("Ascend910ProB", "ascend910"), ("Ascend910PremiumA", "ascend910"),
    ("Ascend910B", "ascend910"),            # the bare legacy name is the OLD 910, not A2
    ("Ascend310P1", "ascend310p"), ("Ascend310P3", "ascend310p"),
    ("Ascend310B1", "ascend310b"), ("Ascend310B2", "ascend310b"), ("Ascend310B3", "ascend310b"),
    ("Ascend310B4", "ascend310b"),
    ("Ascend910B1", "ascend910b"), ("Ascend910B2", "ascend910b"), ("Ascend910B2C", "ascend910b"),
    ("Ascend910B3", "ascend910b"), ("Ascend910B4", "ascend910b"), ("Ascend910B4-1", "ascend910b"),
    ("Ascend910_9391", "ascend910_93"), ("Ascend910_9381", "ascend910_93"), ("Ascend910_9392", "ascend910_93"),
    ("Ascend910_9382", "ascend910_93"), ("Ascend910_9372", "ascend910_93"), ("Ascend910_9362", "ascend910_93"),
    ("Ascend910_9361", "ascend910_93"),
    ("Ascend950PR", "atlas350"), ("Ascend950DT", "atlas350"),
])
def test_family_of(soc, fam):
    assert family_of(soc) == fam


@pytest.mark.parametrize("name", [
    "Ascend310X", "Ascend3101", "Ascend310P", "Ascend910B5", "Ascend910B1-1", "Ascend910B2CX", "Ascend910_93",
    "Ascend910_939", "ascend310", "ASCEND310", "Ascend910C", "910C", "Ascend", "", "Ascend910B ",
])
def test_no_prefix_or_loose_matching(name):
    with pytest.raises(ValueError, match="unknown SoC name"):
        family_of(name)


def test_unknown_soc_error_lists_known_names_and_hints():
    with pytest.raises(ValueError) as exc:
        family_of("910C")
    msg = str(exc.value)
    assert "Ascend310P3" in msg and "Ascend910_9391" in msg and "alias" in msg
    with pytest.raises(ValueError, match="family key"):
        family_of("ascend910b")


def test_mapping_confidence():
    assert kb.soc_info("Ascend310").confidence == "documented"
    assert kb.soc_info("Ascend910B2C").confidence == "secondary"
    assert kb.soc_info("Ascend950PR").confidence == "inferred"
    unlisted = kb.soc_info("Ascend910_9399")   # A3 naming pattern <ChipName>_<NPUName>, not in the list
    assert unlisted.family == "ascend910_93" and unlisted.confidence == "inferred"


def test_aliases_are_explicit_and_never_silent():
    a = kb.lookup_alias("910C")
    assert a.family == "ascend910_93" and a.suggest == "Ascend910_9391" and family_of(a.suggest) == a.family
    assert kb.lookup_alias("a2").family == "ascend910b"
    with pytest.raises(ValueError, match="ambiguous"):
        kb.lookup_alias("910B")
    with pytest.raises(ValueError):
        kb.lookup_alias("Ascend310")
    for alias in kb.aliases():
        assert family_of(alias.suggest) == alias.family and alias.note


def test_families_listing():
    keys = [f.key for f in kb.families()]
    assert keys == ["ascend310", "ascend910", "ascend310p", "ascend310b", "ascend910b", "ascend910_93", "atlas350"]
    assert kb.family("atlas350").apis == ("himpi",)
    assert kb.family("ascend310").dropped_from == CannVersion.parse("8.5.0")
    assert kb.family("ascend910_93").documented_from < CannVersion.parse("8.1.RC1")
    with pytest.raises(ValueError):
        kb.family("ascend920")


# ---------------------------------------------------------------------------------------------- strides (§1.4, §2.2, §3.3)

@pytest.mark.parametrize("soc, w, h, expect", [
    ("Ascend310", 1242, 375, (1280, 384)),      # A(1242,128), A(375,16)
    ("Ascend310P3", 1242, 375, (1280, 384)),    # A(1242,64) = 1280
    ("Ascend310", 1600, 900, (1664, 912)),
    ("Ascend310P3", 1600, 900, (1600, 912)),
    ("Ascend910A", 1920, 1080, (1920, 1088)),
    ("Ascend910B1", 1920, 1080, (1920, 1088)),
])
def test_jpegd_strides(soc, w, h, expect):
    s = stride_for(soc, "8.0.0", "jpegd", "nv12", w, h)
    assert (s.width_stride, s.height_stride) == expect
    assert s.buffer_bytes == expect[0] * expect[1] * 3 // 2
    ws, hs, size = s                            # unpacks like a tuple
    assert s == (ws, hs, size)
    assert s.rule_id.startswith("jpegd.v1.stride") and s.source.startswith("https://")


def test_jpegd_stride_brief_examples_and_buffer_multipliers():
    assert tuple(stride_for("Ascend310", "6.0.1", "jpegd", "nv12", 1242, 375)) == (1280, 384, 737280)
    assert stride_for("Ascend310", "8.0.0", "jpegd", "yuv444sp", 1242, 375)[2] == 1280 * 384 * 3
    assert stride_for("Ascend310", "8.0.0", "jpegd", "yuv422sp", 1242, 375)[2] == 1280 * 384 * 2


def test_jpegd_stride_provenance():
    assert stride_for("Ascend310", "6.0.1", "jpegd", "nv12", 1242, 375).confidence == "inferred"  # table read in 8.0.0
    assert stride_for("Ascend310", "8.0.0", "jpegd", "nv12", 1242, 375).confidence == "documented"
    # open question 8 (constraints.md §1.4): acldvpp says A(w,64) for 310B, MindX aligns to 128; JPEGD's output stride
    # is set exactly, so where the readings differ the decode is left open (the stricter view), where they agree ok
    assert stride_for("Ascend310B1", "8.0.0", "jpegd", "nv12", 1242, 375).width_stride == 1280
    open_q8 = check("Ascend310B1", "8.0.0", "jpegd", "decode", 1600, 900, "jpeg", out_fmt="nv12")
    assert open_q8.status == "unknown" and "open question 8" in str(open_q8)
    for w in (1280, 1530, 1500):  # A(w,64) == A(w,128): 1280, 1536, 1536
        assert check("Ascend310B1", "8.0.0", "jpegd", "decode", w, 720, "jpeg", out_fmt="nv12").status == "ok", w
    assert check("Ascend310P3", "8.0.0", "jpegd", "decode", 1600, 900, "jpeg", out_fmt="nv12").status == "ok"
    with pytest.raises(KnowledgeGap, match="A3"):
        stride_for("Ascend910_9391", "9.0.0", "jpegd", "nv12", 1242, 375)


def test_vpc_strides():
    assert tuple(stride_for("Ascend310", "6.0.1", "vpc", "nv12", 1242, 374)) == (1248, 374, 1248 * 374 * 3 // 2)
    assert tuple(stride_for("Ascend310", "6.0.1", "vpc", "nv12", 10, 6))[:2] == (32, 6)          # ws minimum 32
    assert tuple(stride_for("Ascend310", "6.0.1", "vpc", "yuyv", 640, 480))[:2] == (1280, 480)    # A(w,16)*2
    assert stride_for("Ascend310", "6.0.1", "vpc", "yuv400", 640, 480)[2] == 640 * 480 * 3 // 2   # like 420
    assert tuple(stride_for("Ascend310P3", "7.0.0", "vpc", "rgb888", 1242, 375))[:2] == (1248 * 3, 375)
    assert tuple(stride_for("Ascend310P3", "7.0.0", "vpc", "nv12", 1242, 375))[:2] == (1248, 376)
    assert tuple(stride_for("Ascend910B1", "9.0.0", "vpc", "nv12", 1242, 375))[:2] == (1242, 376)  # no alignment
    assert tuple(stride_for("Ascend910B1", "9.0.0", "vpc", "rgb888", 1242, 375))[:2] == (3726, 375)
    assert tuple(stride_for("Ascend950PR", "9.0.0", "vpc", "nv12", 1242, 375))[:2] == (1242, 375)  # 350: hs = h


def test_vdec_and_pngd_strides():
    assert tuple(stride_for("Ascend310", "8.0.0", "vdec", "nv12", 1920, 1080)) == (1920, 1080, 1920 * 1080 * 3 // 2)
    assert stride_for("Ascend310", "8.0.0", "vdec", "nv12", 8, 128)[0] == 32
    assert tuple(stride_for("Ascend310B1", "8.0.0", "vdec", "nv12", 1922, 1080))[:2] == (1922, 1080)
    assert tuple(stride_for("Ascend310P3", "8.0.0", "vdec", "rgb888", 1920, 1080, api="himpi"))[:2] == (5760, 1080)
    assert tuple(stride_for("Ascend310P3", "8.0.0", "pngd", "rgba8888", 1242, 375, api="acldvpp"))[:2] == (1280 * 4,
                                                                                                             384)


# ---------------------------------------------------------------------------------------------- detours

def test_propose_align_crop_for_odd_height():
    v = check("Ascend310", "6.0.1", "vpc", "resize", 1242, 375, "nv12", out_width=621, out_height=187)
    d = propose(v)
    assert d is not None and d.ok
    assert d.kinds == ("align_crop", "even_output")
    assert "drops the last 1 row(s)" in d.steps[0] and "principal point is unchanged" in d.steps[0]
    assert (d.requests[0].width, d.requests[0].height, d.requests[0].out_size) == (1242, 374, (186, 620))


def test_propose_two_hop_resize():
    v = check("Ascend310", "6.0.1", "vpc", "resize", 4000, 3000, "nv12", out_width=100, out_height=60)
    d = propose(v)
    assert d is not None and d.ok and d.kinds == ("two_hop_resize",)
    assert len(d.requests) == 2 and d.requests[-1].out_size == (60, 100)
    assert d.requests[1].width == d.requests[0].out_size[1]
    assert "2 VPC passes" in d.steps[0]


def test_propose_legal_crop_and_paste():
    v = check("Ascend310", "6.0.1", "vpc", "crop_resize", 1600, 900, "nv12", crop=(1, 1, 800, 450), out_width=400,
              out_height=224)
    d = propose(v)
    assert d.ok and d.requests[0].crop == (2, 2, 799, 449)
    v = check("Ascend310", "6.0.1", "vpc", "crop_resize_paste", 1600, 900, "nv12", crop=(0, 0, 799, 449),
              out_width=640, out_height=640, paste=(5, 0, 404, 224))
    d = propose(v)
    assert d.ok and d.requests[0].paste == (0, 0, 399, 223)


def test_propose_turns_unknown_parity_into_ok_with_strictest_rule():
    v = check("Ascend310B1", "8.0.0", "vpc", "crop", 1600, 900, "nv12", crop=(1, 1, 100, 100))
    assert v.status == "unknown"
    d = propose(v)
    assert d is not None and d.ok and d.requests[0].crop == (2, 2, 99, 99)


def test_propose_gives_none_when_geometry_cannot_help():
    v = check("Ascend310", "6.0.1", "vpc", "resize", 9000, 4000, "nv12", out_width=4000, out_height=2000)
    assert v.status == "rejected" and propose(v) is None
    assert propose(check("Ascend310", "6.0.1", "jpegd", None, 640, 480, "jpeg420")) is None   # already ok


def test_legal_crop_and_helpers():
    assert legal_crop("Ascend310", "6.0.1", (3, 3, 100, 100), 1242, 375) == (4, 4, 99, 99)
    assert legal_crop("Ascend910B1", "8.0.0", (3, 3, 100, 100), 1242, 375) == (3, 3, 100, 100)
    assert legal_crop("Ascend310", "6.0.1", (3, 3, 8, 8), 1242, 375) is None                # below 10x6
    assert legal_crop("Ascend310P3", "7.0.0", (20, 0, 419, 239), 640, 640, paste=True, api="acldvpp") == (16, 0, 415,
                                                                                                           239)
    assert kb.align_down_even(1243, 375) == (374, 1242)
    assert kb.align_up(1242, 128) == 1280 and kb.align_down(1242, 64) == 1216


def test_resize_hops():
    assert resize_hops("Ascend310", "6.0.1", (1080, 1920), (540, 960)) == [(540, 960)]
    hops = resize_hops("Ascend310", "6.0.1", (3000, 4000), (60, 100))
    assert len(hops) == 2 and hops[-1] == (60, 100)
    prev = (3000, 4000)
    for hop in hops:
        for a, b in zip(prev, hop):
            assert 1 / 32 <= b / a <= 16 and b % 2 == 0
        prev = hop
    up = resize_hops("Ascend310", "6.0.1", (60, 100), (3000, 4000))
    assert up[-1] == (3000, 4000) and all(max(h) <= 4096 for h in up)


def test_requirements():
    req = Request.make("Ascend310", "6.0.1", "vpc", "crop_resize", 1242, 375, "nv12", crop=(0, 0, 99, 99),
                       out_width=50, out_height=50)
    r = kb.requirements(req)
    assert (r.w_align, r.h_align, r.out_w_align, r.out_h_align) == (2, 2, 2, 2)
    assert r.roi == {"left": "even", "top": "even", "right": "odd", "bottom": "odd"}
    assert r.paste_left_align == 16 and r.crop_min == (6, 10)  # (height, width); the rule says 10x6
    assert r.out_w == (10, 4096) and float(r.ratio[0]) == 1 / 32


# ---------------------------------------------------------------------------------------------- the data itself

def test_rules_data_integrity():
    rs = kb.rules()
    assert len(rs) >= 60
    assert len({r.id for r in rs}) == len(rs)
    for r in rs:
        assert r.confidence in kb.CONFIDENCES
        assert r.source.startswith("https://") and "CC/" not in r.source and "LLM/" not in r.source
        assert r.section.startswith("§")
        assert r.families
    units = {r.unit for r in rs}
    assert {"jpegd", "vpc", "vdec", "pngd"} <= units
    assert kb.rules(family="atlas350", unit="vpc") and not kb.rules(family="nope")


def test_every_open_question_in_section_9_is_listed():
    qs = {q.id: q for q in kb.open_questions()}
    assert len(qs) == 10
    for q in ("q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8"):
        assert qs[q].rule_ids, q


def test_units_ops_and_formats():
    assert kb.units() == ("jpegd", "vpc", "vdec", "pngd")
    assert kb.ops("vpc") == ("resize", "crop", "crop_resize", "crop_resize_paste", "make_border", "csc")
    assert "nv12" in kb.pixel_formats() and "jpeg-progressive" in kb.bitstreams()


def test_make_border_is_unknown_not_guessed():
    v = check("Ascend310P3", "8.0.0", "vpc", "make_border", 1600, 900, "nv12", border=(0, 124, 0, 0))
    assert v.status == "unknown" and "no limit on the border sizes was found" in v.unknowns[0].message
    v = check("Ascend310P3", "8.0.0", "vpc", "make_border", 4000, 4000, "nv12", border=(0, 200, 0, 0))
    assert v.status == "rejected"   # the generic output range still applies (4200 > 4096)


def test_import_is_lazy_and_light():
    code = ("import sys, dvpipe.knowledge as k; from dvpipe.knowledge import _data; "
            "assert _data.load_yaml.cache_info().currsize == 0, 'YAML parsed at import'; "
            "k.family_of('Ascend310'); assert _data.load_yaml.cache_info().currsize == 1")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_api_names_are_read_alike_everywhere():
    # one normalisation (case, spaces, v1/v2 aliases) for requests and stride lookups
    from dvpipe.knowledge.rules import stride_for

    args = ("Ascend310P3", "7.0.0", "vpc", "nv12", 1600, 900)
    assert stride_for(*args, api=" V1 ", side="out") == stride_for(*args, api="acldvpp", side="out")
    with pytest.raises(ValueError, match="unknown API"):
        stride_for(*args, api="v3", side="out")


def test_vpc_make_border_is_refused_on_310_and_910_and_open_elsewhere():
    """acldvppVpcMakeBorderAsync and its border configuration are not supported on Atlas 200/300/500 or Atlas
    training (CANN 6.0.1 aclcppdevg_03_0866, 8.0.0 aclcppdevg_03_0348); 310P, 200I/500 A2, A2 and A3 document
    it (9.0.0 aclcppdevg_03_1579) but no border-size limit was found: unknown there, never ok."""
    from dvpipe.knowledge import check as kcheck

    for soc, cann in (("Ascend310", "6.0.1"), ("Ascend910", "8.0.0")):
        v = kcheck(soc, cann, unit="vpc", op="make_border", width=1600, height=900, fmt="nv12", border=(0, 28, 0, 0))
        assert v.status == "rejected" and v.violations[0].rule_id == "vpc.make_border.v1.unsupported.310_910"
        assert "aclcppdevg_03_0866" in v.violations[0].source
    for soc, cann in (("Ascend310P3", "7.0.0"), ("Ascend910B3", "8.0.0"), ("Ascend910_9391", "8.5.0")):
        v = kcheck(soc, cann, unit="vpc", op="make_border", width=1600, height=900, fmt="nv12", border=(0, 28, 0, 0))
        assert v.status == "unknown" and "documented on this product" in v.unknowns[0].message
