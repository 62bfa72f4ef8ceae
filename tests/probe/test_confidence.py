"""How sure ``dvpipe probe`` is: confidence per verdict, the CANN version of the cited pages, policy vs
hardware, and ``--matrix --size``.

Expected values come from ../shared/reference/dvpp/constraints.md (section and page in each comment), not
from dvpipe's output.
"""
from __future__ import annotations

import json

import pytest

from dvpipe.cli import main as cli_main
from dvpipe.knowledge import CannVersion, check, confidence_of, page_version


def run_cli(capsys, *argv):
    rc = cli_main(["probe", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def probe_json(capsys, *argv):
    rc, out, _ = run_cli(capsys, *argv, "--json")
    return rc, json.loads(out)


@pytest.mark.parametrize("url,version", [
    # the version directory codes of constraints.md's header
    ("https://www.hiascend.com/document/detail/zh/canncommercial/5046/inferapplicationdev/aclcppdevg/aclcppdevg_03_0168.html", "5.0.4"),
    ("https://www.hiascend.com/doc_center/source/en/canncommercial/601/inferapplicationdev/aclcppdevg/aclcppdevg_03_0168.html", "6.0.1"),
    ("https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/82RC1alpha003/API/appdevgapi/aclcppdevg_03_0339.html", "8.2.RC1.alpha003"),
    ("https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/900beta2/x/aclcppdevg_03_0355.html", "9.0.0beta2"),
    ("https://www.hiascend.com/llms-content/document/canncommercial/canncommercial_API_dvpp_aclcppdevg_03_0337_html.md", "9.0.0"),
    ("https://www.hiascend.com/document/detail/zh/mindsdk/730/vision/visionug/mxvisionapi_0193.html", None),
    ("https://github.com/Ascend/samples", None),
])
def test_page_versions_from_the_url_codes(url, version):
    got = page_version(url)
    assert got == (None if version is None else CannVersion.parse(version))


def test_an_ok_verdict_that_rests_on_later_docs_says_extrapolated():
    # JPEGD output stride on 310 (ws = A(w,128), hs = A(h,16)) was read on the 8.0.0 page (aclpythondevg_01_0321,
    # §1.4): at 6.0.1 it is assumed unchanged; the bitstream rule cites the 5.0.4 page (aclcppdevg_03_0168, §1.1)
    c = confidence_of(check("Ascend310", "6.0.1", "jpegd", "decode", 1600, 900, "jpeg420", out_fmt="nv12"))
    assert (c.level, str(c.since)) == ("extrapolated", "8.0.0")
    assert "5.0.4" in [str(v) for v in c.other_page_versions]
    c = confidence_of(check("Ascend310", "8.0.0", "jpegd", "decode", 1600, 900, "jpeg420", out_fmt="nv12"))
    assert c.level == "documented" and [str(v) for v in c.other_page_versions] == ["5.0.4"]
    assert c.note == "documented (cites CANN 5.0.4 pages)"


def test_probe_json_and_text_carry_the_confidence(capsys):
    args = ("--camera", "C=1600x900:jpeg420", "--soc", "Ascend310", "--cann", "6.0.1")
    rc, rep = probe_json(capsys, *args)
    step = rep["cameras"][0]["steps"][0]
    # VPC resize on 310: the 1/32..16 scale limit is from the legacy DDK guide / MindX / samples (§2.4 secondary);
    # JPEGD's stride only from 8.0.0 (§1.4): the weakest, extrapolated, decides
    assert (step["stage"], step["confidence"], step["extrapolated_from"]) == ("decode+resize", "extrapolated", "8.0.0")
    assert "5.0.4" in step["cited_cann"] and "6.0.1" not in step["cited_cann"]
    assert any(p["rule"] == "vpc.ratio.310_910_310b" and p["cann"] is None for p in step["cited_pages"])
    rc, out, _ = run_cli(capsys, *args)
    assert "confidence: extrapolated from CANN 8.0.0 (assumed unchanged at 6.0.1)" in out


def test_open_questions_read_unknown(capsys):
    # acldvpp PNGD per-product support was not retrieved (§4 Open, §9 q7)
    _rc, rep = probe_json(capsys, "--camera", "P=1242x375:png", "--soc", "Ascend310", "--cann", "6.0.1")
    assert rep["cameras"][0]["steps"][0]["confidence"] == "unknown"


def test_newer_than_the_docs_checked_is_extrapolated_from_the_latest(capsys):
    # the newest docs read are 9.0.0 (constraints.md header); 310P JPEGD limits are documented in 8.5.0 / 9.0.0
    # (§1.2: CE/850 aclcppdevg_03_0354, CE/900beta2 0355)
    c = confidence_of(check("Ascend310P3", "9.5.0", "jpegd", "decode", 1600, 900, "jpeg420", out_fmt="nv12"))
    assert (c.level, str(c.since)) == ("extrapolated", "9.0.0")
    assert confidence_of(check("Ascend310P3", "9.0.0", "jpegd", "decode", 1600, 900, "jpeg420",
                               out_fmt="nv12")).level == "documented"
    # the 310P VPC output stride is dvpipe's reading (assumed to follow the input formula, §2.3): weaker still
    _rc, rep = probe_json(capsys, "--camera", "C=1600x900:jpeg420", "--soc", "Ascend310P3", "--cann", "9.5.0")
    assert rep["cameras"][0]["steps"][0]["confidence"] == "inferred"


def test_fidelity_reference_is_declined_by_policy_not_rejected_and_passes_require(capsys):
    # 310P at 7.0.0 runs JPEGD + VPC resize at fidelity fast (§1.2, §2.1): under reference only the policy declines
    args = ("--camera", "C=1600x900:jpeg420", "--soc", "Ascend310P3", "--cann", "7.0.0", "--fidelity", "reference")
    rc, out, err = run_cli(capsys, *args, "--require", "dvpp")
    assert rc == 0, err
    assert "declined" in out and "rejected" not in out
    assert "declined by the fidelity policy, not by the hardware" in out
    _rc, rep = probe_json(capsys, *args)
    step = rep["cameras"][0]["steps"][0]
    assert (step["status"], step["ok"], step["backend"]) == ("declined", False, "cpu")
    assert step["confidence"] is not None  # the confidence of what it would run at fidelity fast


def test_a_documented_refusal_still_fails_require(capsys):
    # progressive JPEG is not decodable by JPEGD (§1.1)
    rc, out, err = run_cli(capsys, "--camera", "P=1600x900:jpeg-progressive", "--soc", "Ascend310P3", "--cann",
                           "7.0.0", "--fidelity", "reference", "--require", "dvpp")
    assert rc == 1 and "rejected" in err


def test_matrix_custom_sizes_and_which_versions_were_read(capsys):
    rc, m = probe_json(capsys, "--matrix", "--soc", "Ascend310", "--size", "1920x1208", "--size", "1281x721",
                       "--cann", "6.0.1,6.2.RC1,8.0.0")
    assert rc == 0 and m["sizes"] == [[1920, 1208], [1281, 721]]
    # 6.0.1 and 8.0.0 pages were read for 310 (§2.2, §1.4); 6.2.RC1 is the separate 200I/500 A2 doc set (§8)
    assert m["checked_versions"] == ["6.0.1", "8.0.0"] and m["not_checked_versions"] == ["6.2.RC1"]
    cells = {(c["width"], c["height"], c["encoding"], c["cann"]): c for c in m["cells"]}
    # 1281x721 is odd: JPEGD floors the picture to even (§1.3), but whether its stride aligns 1281 (1408, as
    # Huawei's samples do) or the floored 1280 (1280) is not documented: kept off DVPP, saying so
    odd = cells[(1281, 721, "jpeg420", "6.0.1")]
    assert odd["code"] == "--" and "does not say which the device uses" in odd["steps"][0]["reason"]
    assert cells[(1920, 1208, "jpeg420", "6.0.1")]["confidence"] == "extrapolated"
    rc, out, _ = run_cli(capsys, "--matrix", "--soc", "Ascend310", "--size", "1920x1208", "--cann", "6.0.1,6.2.RC1")
    assert "not read" in out and "identical columns 6.0.1 = 6.2.RC1" in out
    assert "1920x1208  ++e" in out


@pytest.mark.parametrize("argv,msg", [
    (("--matrix", "--soc", "Ascend310", "--size", "1920"), "--size '1920': expected WIDTHxHEIGHT"),
    (("--camera", "C=1x1:png", "--soc", "Ascend310", "--cann", "6.0.1", "--size", "8x8"), "--size sets the sizes"),
])
def test_bad_size_arguments_are_one_line_errors(capsys, argv, msg):
    rc, _out, err = run_cli(capsys, *argv)
    assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1
