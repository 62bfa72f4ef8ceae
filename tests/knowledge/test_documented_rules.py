"""One hand-written case per documented rule family that no other test pins (the knowledge base's verdicts
for the SoC x CANN x request matrix were once compared against a snapshot of the code's own output; these
cases pin them against the pages instead).

Each case names the page the expectation was read from (``constraints.md`` section and hiascend.com page
id; the full URLs are in the rules' ``source``) and the numbers come from that page, not from the code.
``tests/knowledge/test_knowledge.py``, ``tests/knowledge/test_cann_versions.py`` and ``tests/probe/`` pin the
other rules.
"""
from __future__ import annotations

import pytest

from dvpipe import knowledge as kb

H = "himpi"

# (rule id, page, SoC, CANN, check() arguments, status, finding kind, words of the finding)
CASES = [
    # §1.1 aclcppdevg_03_0185 (CANN 6.0.1): JPEGD applies the EXIF orientation to the output
    ("jpegd.exif_orientation", "aclcppdevg_03_0185", "Ascend310P3", "8.0.0",
     dict(unit="jpegd", width=1600, height=900, fmt="jpeg420", orientation=6), "ok", "effect", ["EXIF orientation"]),
    # same page: on Atlas 200/300/500 large EXIF-rotated pictures (>= 3840x2160) may time out
    ("jpegd.rotation_timeout.310", "aclcppdevg_03_0185", "Ascend310", "6.0.1",
     dict(unit="jpegd", width=3840, height=2160, fmt="jpeg420", orientation=6), "ok", "note", ["time out"]),
    # §1.1 aclcppdevg_03_0354 (8.5.0): a rotation swapping W and H with 4:2:2 at odd height leaves a black border
    ("jpegd.rotation_black_border", "aclcppdevg_03_0354", "Ascend910B3", "9.0.0",
     dict(unit="jpegd", width=1600, height=901, fmt="jpeg422", orientation=6), "ok", "effect", ["black border"]),
    # §1.5 aclcppdevg_03_0688 (8.0.0): hi_mpi JPEGD/VDEC channel ids are [0, 256); on 310B [0, 128)
    ("jpegd.himpi.channels", "aclcppdevg_03_0688", "Ascend310P3", "8.0.0",
     dict(unit="jpegd", width=1600, height=900, fmt="jpeg420", channels=300, api=H), "rejected", "violation",
     ["300 channels", "at most 256"]),
    ("jpegd.himpi.channels.310b", "aclcppdevg_03_0688", "Ascend310B1", "8.0.0",
     dict(unit="jpegd", width=1600, height=900, fmt="jpeg420", channels=200, api=H), "rejected", "violation",
     ["200 channels", "at most 128"]),
    # §1.2 MindX mxvisionapi_0450: RGB/BGR decode output up to 4096x4096 on 310P; beyond it is open (q4)
    ("jpegd.himpi.rgb_out", "mxvisionapi_0450", "Ascend310P3", "8.0.0",
     dict(unit="jpegd", width=5000, height=3000, fmt="jpeg420", out_fmt="rgb888", api=H), "unknown", "unknown",
     ["5000", "4096"]),
    # §3.2 aclcppdevg_03_0597 (7.0.0): 310B H.264 input 128..8192 per side
    ("vdec.range.310b.h264", "aclcppdevg_03_0597", "Ascend310B1", "8.0.0",
     dict(unit="vdec", width=100, height=100, fmt="h264"), "rejected", "violation", ["minimum 128"]),
    # same page: the minimum output is 128x128 when the stream is wider than 4096
    ("vdec.out_min.310b", "aclcppdevg_03_0597", "Ascend310B1", "8.0.0",
     dict(unit="vdec", width=7680, height=4320, fmt="h265", out_width=100, out_height=100), "rejected", "violation",
     ["output width 100", "minimum 128"]),
    # §3.3 aclpythondevg_01_0337 (8.0.0): acldvpp VDEC outputs NV12 / NV21 only
    ("vdec.v1.out_formats.310_910_310p", "aclpythondevg_01_0337", "Ascend310", "8.0.0",
     dict(unit="vdec", width=1920, height=1080, fmt="h264", out_fmt="rgb888"), "rejected", "violation",
     ["rgb888", "nv12, nv21"]),
    ("vdec.v1.out_formats.310b_a2_a3", "aclpythondevg_01_0337", "Ascend910B3", "8.0.0",
     dict(unit="vdec", width=1920, height=1080, fmt="h264", out_fmt="rgb888", api="acldvpp"), "rejected",
     "violation", ["rgb888", "nv12, nv21"]),
    # §3.3 aclcppdevg_03_0280 (6.0.1): hi_mpi VDEC on 310P outputs NV12, NV21, RGB888, BGR888 (no planar RGB)
    ("vdec.v2.out_formats.310p", "aclcppdevg_03_0280", "Ascend310P3", "8.0.0",
     dict(unit="vdec", width=1920, height=1080, fmt="h264", out_fmt="rgb888_planar", api=H), "rejected", "violation",
     ["rgb888_planar"]),
    # §3.3 aclpythondevg_01_0478 (8.0.0): hi_mpi VDEC on 310B/A2 outputs NV12/NV21 and packed or planar RGB/BGR
    ("vdec.v2.out_formats.310b_a2", "aclpythondevg_01_0478", "Ascend910B3", "8.0.0",
     dict(unit="vdec", width=1920, height=1080, fmt="h264", out_fmt="yuv444sp", api=H), "rejected", "violation",
     ["yuv444sp", "rgb888_planar, bgr888_planar"]),
    # §4 aclcppdevg_03_0198 (6.0.1): PNGD outputs RGB888, or RGBA8888 only for an RGBA/AGRAY PNG: a PNG of
    # unstated colour type asked for RGBA8888 is open
    ("pngd.colour_type_unspecified", "aclcppdevg_03_0198", "Ascend310P3", "8.0.0",
     dict(unit="pngd", width=640, height=480, fmt="png", out_fmt="rgba8888"), "unknown", "unknown",
     ["rgba8888", "colour type"]),
    # §3.4 aclpythondevg_01_0345 (8.0.0): aclvdec channel ids [0, 255] on 310P/310B/A2/A3
    ("vdec.v1.channels.256", "aclpythondevg_01_0345", "Ascend310P3", "8.0.0",
     dict(unit="vdec", width=1920, height=1080, fmt="h264", channels=300), "rejected", "violation",
     ["300 channels", "at most 256"]),
    # §3.4 aclcppdevg_03_0688: hi_mpi VDEC shares JPEGD's channel ids: [0, 256) on 310P, [0, 128) on 310B
    ("vdec.v2.channels.310p", "aclcppdevg_03_0688", "Ascend310P3", "8.0.0",
     dict(unit="vdec", width=1920, height=1080, fmt="h264", channels=300, api=H), "rejected", "violation",
     ["at most 256"]),
    ("vdec.v2.channels.310b", "aclcppdevg_03_0688", "Ascend310B1", "8.0.0",
     dict(unit="vdec", width=1920, height=1080, fmt="h264", channels=200, api=H), "rejected", "violation",
     ["at most 128"]),
    # §2.2 aclcppdevg_03_0232 (6.0.1): the 310P acldvpp VPC input list has no YUV440SP; the hi_mpi one no planar RGB
    ("vpc.v1.formats.310p", "aclcppdevg_03_0232", "Ascend310P3", "8.0.0",
     dict(unit="vpc", op="resize", width=1600, height=900, fmt="yuv440sp", out_width=800, out_height=450),
     "unknown", "unknown", ["yuv440sp", "not in the documented list"]),
    ("vpc.v2.formats.310p", "aclcppdevg_03_0232", "Ascend310P3", "8.0.0",
     dict(unit="vpc", op="resize", width=1600, height=900, fmt="rgb888_planar", out_width=800, out_height=450,
          api=H), "unknown", "unknown", ["rgb888_planar", "not in the documented list"]),
    # §2.2 aclpythondevg_01_0429 (8.0.0): the later VPC class's input list has no planar RGB either
    ("vpc.formats.310b_a2_a3_350", "aclpythondevg_01_0429", "Ascend910B3", "8.0.0",
     dict(unit="vpc", op="resize", width=1600, height=900, fmt="rgb888_planar", out_width=800, out_height=450),
     "unknown", "unknown", ["rgb888_planar"]),
    # §2.4 aclcppdevg_03_0675 (Atlas 200I DK A2): resizing RGBA on 310B zeroes the output's alpha
    ("vpc.v1.rgba_alpha.310b", "aclcppdevg_03_0675", "Ascend310B1", "8.0.0",
     dict(unit="vpc", op="resize", width=1600, height=900, fmt="rgba8888", out_width=800, out_height=450),
     "ok", "effect", ["alpha", "0"]),
    # §2.4 aclcppdevg_03_1057: acldvpp's interpolation options were not retrieved (q3); hi_mpi: 0 bilinear, 1 nearest
    ("vpc.v1.interpolation_open", "aclcppdevg_03_1057", "Ascend910B3", "8.0.0",
     dict(unit="vpc", op="resize", width=1600, height=900, fmt="nv12", out_width=800, out_height=450,
          interpolation="bicubic"), "unknown", "unknown", ["interpolation"]),
    ("vpc.v2.interpolation", "aclcppdevg_03_1057", "Ascend910B3", "9.0.0",
     dict(unit="vpc", op="resize", width=1600, height=900, fmt="nv12", out_width=800, out_height=450,
          interpolation="bicubic", api=H), "rejected", "violation", ["bicubic", "bilinear, nearest"]),
    # §2.4 aclpythondevg_01_0433: hi_mpi VPC channel ids are [0, 256)
    ("vpc.v2.channels", "aclpythondevg_01_0433", "Ascend310P3", "8.0.0",
     dict(unit="vpc", op="resize", width=1600, height=900, fmt="nv12", out_width=800, out_height=450, channels=300,
          api=H), "rejected", "violation", ["300 channels", "at most 256"]),
]


@pytest.mark.parametrize("rule_id, page, soc, cann, args, status, kind, words", CASES, ids=[c[0] for c in CASES])
def test_a_documented_rule_decides_its_case(rule_id, page, soc, cann, args, status, kind, words):
    a = dict(args)
    v = kb.check(soc, cann, a.pop("unit"), a.pop("op", None), a.pop("width"), a.pop("height"), a.pop("fmt"), **a)
    assert v.status == status, v.summary
    found = [f for f in v.reasons if f.rule_id == rule_id]
    assert found and found[0].kind == kind, [(f.rule_id, f.kind) for f in v.reasons]
    for w in words:
        assert w in found[0].message, found[0].message
    assert page in found[0].source + " ".join(getattr(kb.rule_by_id(rule_id), "also", ())), found[0].source


@pytest.mark.parametrize("soc, unit, fmt, size, api, stride, rule_id, page", [
    # §1.4 aclpythondevg_01_0321 (8.0.0): JPEGD output width stride 128-aligned on 310/910, 64 on 310P/310B/A2;
    # height 16-aligned. 1030 wide: 9 x 128 = 1152, 17 x 64 = 1088; 375 high: 24 x 16 = 384
    ("Ascend310", "jpegd", "nv12", (375, 1030), None, (1152, 384), "jpegd.v1.stride.128", "aclpythondevg_01_0321"),
    ("Ascend310P3", "jpegd", "nv12", (375, 1030), None, (1088, 384), "jpegd.v1.stride.64", "aclpythondevg_01_0321"),
    # §4 aclcppdevg_03_0198 (6.0.1): PNGD output width aligned to 128 then x 3 bytes for RGB, height to 16
    ("Ascend310", "pngd", "rgb888", (375, 1000), None, (1024 * 3, 384), "pngd.v1.stride", "aclcppdevg_03_0198"),
    # §3.3 aclcppdevg_03_0280: hi_mpi VDEC RGB on 310P: width aligned to 16, x 3 bytes; height as is
    ("Ascend310P3", "vdec", "rgb888", (375, 1000), H, (1008 * 3, 375), "vdec.v2.out_stride.rgb.310p",
     "aclcppdevg_03_0280"),
    # §3.3 aclpythondevg_01_0478: hi_mpi VDEC on 310B/A2: RGB width x 3 bytes unaligned; planar RGB the width
    ("Ascend910B3", "vdec", "rgb888", (375, 1000), H, (3000, 375), "vdec.v2.out_stride.rgb.310b_a2",
     "aclpythondevg_01_0478"),
    ("Ascend910B3", "vdec", "rgb888_planar", (375, 1000), H, (1000, 375), "vdec.v2.out_stride.planar.310b_a2",
     "aclpythondevg_01_0478"),
])
def test_a_documented_stride_rule_gives_its_alignment(soc, unit, fmt, size, api, stride, rule_id, page):
    h, w = size
    kw = {"api": api} if api else {}
    s = kb.stride_for(soc, "8.0.0", unit, fmt, w, h, side="out", **kw)
    assert tuple(s)[:2] == stride and s.rule_id == rule_id  # (width stride in bytes, height stride in rows)
    assert page in s.source


def test_rule_confidence_follows_the_cann_version_of_the_page_read():
    """docs/knowledge.md "How sure a verdict is": a rule read at the target's CANN version, or on earlier pages
    within the versions checked, is ``documented``; before its first page, or newer than ``latest_checked()``,
    it is ``extrapolated`` with ``since`` the version read. vpc.v1.range.310_910 was read on the CANN 6.0.1
    page aclcppdevg_03_0168 (directory code 601)."""
    rid, page = "vpc.v1.range.310_910", "canncommercial/601/inferapplicationdev/aclcppdevg/aclcppdevg_03_0168"
    at = {v: kb.rule_confidence(rid, "ascend310", v) for v in ("5.0.2", "6.0.1", "7.0.0", "99.0.0")}
    assert (at["6.0.1"].level, at["7.0.0"].level) == ("documented", "documented")
    assert at["5.0.2"].level == "extrapolated" and str(at["5.0.2"].since) == "6.0.1"
    latest = str(kb.latest_checked())
    assert at["99.0.0"].level == "extrapolated" and str(at["99.0.0"].since) == latest
    assert all(page in p[1] for c in at.values() for p in c.pages)


def test_documented_versions_are_the_versions_of_the_pages_a_family_was_read_from():
    """``documented_versions(family)`` lists the CANN versions of the pages some rule of the family cites
    (docs/knowledge.md): for Atlas 200/300/500 (ascend310) the 6.0.1 VPC page above and the 5.0.4 JPEGD
    input-address page (aclcppdevg_03_0168 under directory code 5046); no version that no page has."""
    versions = [str(v) for v in kb.documented_versions("ascend310")]
    assert {"5.0.4", "6.0.1"} <= set(versions)
    assert versions == sorted(versions, key=kb.CannVersion.parse)
    assert "7.0.RC2" not in versions and "5.0.2" not in versions
