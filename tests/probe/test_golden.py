"""Golden tests of ``dvpipe probe`` (table and JSON) for the KITTI and nuScenes rigs.

REVIEW (what each golden says, checked by hand against ../shared/reference/dvpp/constraints.md)
=====================================================================================================
Every golden file below was read line by line against constraints.md (sections in brackets). Lines that
state dvpipe's own design, not a documented fact, are marked [dvpipe]. Profile: bevformer-tiny in the
fast order (decode, resize x0.5, normalise, pad /32), so 1242x375 -> 621x187 and 1600x900 -> 800x450.

probe_kitti_ascend310_6.0.1 (.txt and .json)
  header "Ascend310 ... family ascend310": acl.get_soc_name() returns "Ascend310" for Atlas 200/300/500 [§0].
  CAM2 png, decode: PNGD, runs on cpu, status unknown, "which products support acldvpp (v1) PNG decode was not
    retrieved": the per-product list for acldvppPngDecodeAsync is open [§4 Open, §9 q7]; 310 has acldvpp only,
    no hi_mpi [§6]; 1242x375 is inside PNGD's 32x32..4096x4096 [§4], so open, not rejected. Source
    .../601/.../aclcppdevg_03_0198.html is the §4 PNGD page (6.0.1). "PNG decoding is not implemented" [dvpipe].
  CAM2 png, resize+normalise+pad+batch: VPC, cpu, unknown, "see decode above" [dvpipe: the DVPP step resizes
    only fused with its own decode, so it inherits the PNGD verdict].
  CAM2J jpeg420, decode+crop+resize on dvpp, "detour":
    JPEGD takes Huffman 4:2:0 [§1.1] at 1242x375 (32..8192) [§1.2] and writes NV12 [§1.3 jpeg420 -> NV12/NV21];
    "output height 375 is rounded down to 374 (YUV420SP output needs even sizes)": odd sizes floored in
    YUV420SP output [§1.3, 5.0.4 aclcppdevg_03_0170 / 6.0.1 0188];
    "VPC resize ...: output width 621 must be even, output height 187 must be even; NV12/NV21 output needs even
    width and height": 310 VPC writes NV12/NV21 only [§2.3, MindX], strides A(w,16)/A(h,2) from the Ascend
    samples [§2.3 secondary] and NV12 needs w2/h2 [§2.2 table]; hence the secondary source
    github.com/Ascend/ascend-referenceapps among the sources;
    source line: every rule that shaped the step, in order, with its page: jpegd.bitstream (5.0.4
    aclcppdevg_03_0168, §1.1), jpegd.v1.odd_floor (5.0.4 aclcppdevg_03_0170, §1.3), vpc.v1.out_stride.310_910
    (Ascend samples, §2.3 secondary);
    "runs as: JPEGD 1242x375 -> NV12 1242x374; VPC resize -> NV12 620x186": scale 620/1242, 186/374 inside
    [1/32, 16] [§2.4], sizes inside 10x6..4096x4096 [§2.1]; "NV12 -> BGR on the host": no BGR888 VPC output
    is documented for 310 [§2.3];
    detour "drops the last 1 row; the principal point is unchanged" and "621x187 -> 620x186 (the scale changes
    slightly)" [dvpipe geometry: a crop at the origin keeps cx, cy; an even size changes the scale].
  normalise+pad+batch on cpu: DVPP has no normalise unit; VPC make-border could pad [§2] but dvpipe's DVPP
    backend does not use it [dvpipe].
  confidence lines (issue 18): CAM2 rows "unknown (the docs leave it open)" [§4 Open, q7]; CAM2J "extrapolated
    from CANN 8.0.0 (assumed unchanged at 6.0.1) (cites CANN 5.0.4, 8.0.0 pages)": the 310 JPEGD stride A(w,128)
    is from the 8.0.0 page aclpythondevg_01_0321 only [§1.4], the bitstream/range/output-format rules from the
    5.0.4 page aclcppdevg_03_0168 [§1.1-1.3], neither is a 6.0.1 page; the VPC scale rule's page (DDK guide) and
    the Ascend samples are not versioned CANN pages ("cann": null in cited_pages) [§2.3, §2.4 secondary].
  footer: exactly the two CAM2 rows fall back; JSON: same rows, CAM2J "out" 620x186, rule
    "jpegd.bitstream; jpegd.v1.odd_floor; vpc.v1.out_stride.310_910" (§1.1, §1.3, §2.3), CAM2 rule
    pngd.v1.support_open (§4, q7).

probe_kitti_ascend910_9391_8.1.RC1 (.txt and .json)
  header "family ascend910_93": Ascend910_93xx strings are Atlas A3 ("910C" is only a market name) [§0].
  CAM2 png decode and CAM2J jpeg420 decode+resize: unknown, cpu, "Atlas A3 is documented for JPEGE only in CANN
    8.1.RC1; its VPC, VDEC and JPEGD support first appears in the 8.2.RC1 docs": A3 first appears in 8.1.RC1
    (JPEGE limits) and is added to the VDEC/JPEGD channel table and acldvppVpcResizeAsync in 8.2.RC1 [§8];
    source .../81RC1beta1/.../aclpythondevg_01_0328.html is the §8 8.1.RC1 evidence. PNG is open anyway [§4 q7].
  CAM2J decode on cpu, then resize+normalise+pad+batch (the CPU's DCT-scaled decode takes only exact 2x
    shrinks since the cpu-kernel change; 375 -> 187 is not one) [dvpipe]; the resize row inherits the JPEGD verdict
    ("see decode above") as CAM2's does.
  confidence: every row "unknown" -- A3 is not in the 8.1.RC1 DVPP docs [§8].
  CAM2 resize row: as for Ascend310 [dvpipe]. Footer: all four DVPP-capable steps fall back.

probe_nuscenes_ascend310p3_7.0.0 (.txt and .json)
  header "family ascend310p": Ascend310P3 is an Atlas inference (310P) SoC [§0].
  six cameras 1600x900 "jpeg" (the rig states no subsampling): decode+resize on dvpp, ok: JPEGD takes every
    Huffman subsampling listed [§1.1] at 32..8192 on 310P [§1.2, documented 8.5.0/9.0.0; no JPEGD limit changed
    across versions, §8], 1600x900 is even so nothing is floored [§1.3]; "VPC resize -> BGR888 800x450": 310P
    adds RGB888/BGR888 VPC output up to 4096x4096 [§2.3 MindX], NV12 1600x900 meets w2/h2 [§2.2 310P],
    scale 1/2 inside [1/32, 16] [§2.4], 800x450 inside 10x6..4096x4096 [§2.1].
  source line: jpegd.bitstream (5.0.4 aclcppdevg_03_0168, §1.1) and vpc.v1.range.310p (6.0.1 aclcppdevg_03_0168,
    the 310P row of the VPC range table, §2.1).
  confidence "inferred (dvpipe's reading of the docs)": the 310P VPC output stride is assumed to follow the
    documented input formula [§2.3: the output table was not retrieved, q1], the weakest rule behind the step;
    cited pages 5.0.4 (bitstream §1.1), 8.5.0 (310P JPEGD range §1.2), 8.0.0 (JPEGD stride §1.4), 6.0.1 (VPC §2.1-2.2).
  normalise+pad+batch on cpu [dvpipe]; footer: nothing falls back.

Regenerate (only after re-reviewing every changed line against constraints.md)::

    pytest tests/probe/test_golden.py --update-golden
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from dvpipe.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
KITTI_CAMERAS = ("--camera", "CAM2=1242x375:png", "--camera", "CAM2J=1242x375:jpeg420")

CASES = {
    # name: the probe's arguments (the default profile: bevformer-tiny stages in the fast order)
    "probe_kitti_ascend310_6.0.1": (*KITTI_CAMERAS, "--soc", "Ascend310", "--cann", "6.0.1"),
    "probe_kitti_ascend910_9391_8.1.RC1": (*KITTI_CAMERAS, "--soc", "Ascend910_9391", "--cann", "8.1.RC1"),
    "probe_nuscenes_ascend310p3_7.0.0": (str(ROOT / "configs" / "rigs" / "nuscenes.yaml"), "--soc", "Ascend310P3",
                                         "--cann", "7.0.0"),
}


def _probe(capsys, *argv) -> tuple[int, str]:
    rc = cli_main(["probe", *argv])
    out = capsys.readouterr()
    assert out.err == "" or rc != 0, out.err
    return rc, out.out


def _check(request, path: Path, text: str) -> None:
    if request.config.getoption("--update-golden", default=False):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        pytest.skip(f"rewrote {path.name}")
    assert path.exists(), f"missing golden {path}; run with --update-golden and review it"
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "\n".join(difflib.unified_diff(expected.splitlines(), text.splitlines(), "golden", "now", lineterm=""))
        pytest.fail(f"{path.name} differs from the golden file:\n{diff}")


@pytest.mark.parametrize("name", list(CASES))
def test_table_golden(name, capsys, request):
    rc, out = _probe(capsys, *CASES[name], "--colour", "never")
    assert rc == 0
    _check(request, GOLDEN / f"{name}.txt", out)


@pytest.mark.parametrize("name", list(CASES))
def test_json_golden(name, capsys, request):
    rc, out = _probe(capsys, *CASES[name], "--json")
    assert rc == 0
    data = json.loads(out)
    # the documented schema: these keys are stable (keys may be added, never changed)
    assert {"soc", "cann"} <= set(data["target"])
    for cam in data["cameras"]:
        assert {"name", "width", "height", "encoding", "steps"} <= set(cam)
        for step in cam["steps"]:
            assert {"stage", "unit", "backend", "ok", "reason", "source", "detour"} <= set(step)
            assert isinstance(step["ok"], bool)
    _check(request, GOLDEN / f"{name}.json", out)
