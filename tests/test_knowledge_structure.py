"""The knowledge base's structure: family groups in the data, the engine split by job, table-driven checks,
a new SoC family from data only.

The reference for "the verdicts did not change" is ``tests/data/knowledge_matrix_before.json``: the whole
(rule, SoC, CANN version) matrix -- which rules apply, every verdict of a fixed request set for every family
and CANN version (statuses, reasons, messages, confidence), strides, requirements and rule confidences --
captured from the committed code *before* the restructuring (``git show HEAD:dvpipe/knowledge/...`` into a
temporary package, then ``python tests/test_knowledge_structure.py --capture <package dir>``). The test
recomputes the same matrix with today's code and compares cell by cell.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tests" / "data" / "knowledge_matrix_before.json"

# --------------------------------------------------------------------------------------------- the matrix

#: the CANN versions of dvpipe.probe.matrix.CANN_VERSIONS at capture time, plus one older than any doc
#: checked and one newer than the latest checked (the "extrapolated" / "not documented before" paths)
VERSIONS = ("5.0.2", "5.0.4", "6.0.1", "6.2.RC1", "6.3.RC2", "7.0.RC1", "7.0.0", "8.0.RC1", "8.0.0", "8.1.RC1",
            "8.2.RC1", "8.3.RC1", "8.5.0", "9.0.0", "9.1.0")
#: names matched only by a documented pattern (confidence "inferred")
PATTERN_SOCS = ("Ascend310P5", "Ascend910_9399")


def _requests() -> list[tuple[str, dict]]:
    """(label, check() keyword arguments) covering every unit, op, input format and condition key."""
    out: list[tuple[str, dict]] = []
    jpegs = ("jpeg", "jpeg444", "jpeg422", "jpeg420", "jpeg400", "jpeg440", "jpeg411", "jpeg-progressive",
             "jpeg-arithmetic", "jpeg-lossless", "jpeg-extended", "jpeg2000", "jpeg-cmyk")
    for fmt in jpegs:
        out.append((f"jpegd {fmt} 1600x900", dict(unit="jpegd", width=1600, height=900, fmt=fmt)))
    for w, h in ((1242, 375), (1243, 376), (12000, 9000), (8192, 8192), (16, 16), (5000, 3000)):
        out.append((f"jpegd jpeg420 {w}x{h}", dict(unit="jpegd", width=w, height=h, fmt="jpeg420")))
    for of in ("nv21", "yuv444sp", "yuv422sp", "yuv440sp", "rgb888", "bgr888", "yuv400"):
        out.append((f"jpegd jpeg444 -> {of}", dict(unit="jpegd", width=1920, height=1080, fmt="jpeg444", out_fmt=of)))
        out.append((f"jpegd jpeg422 1243x375 -> {of}",
                    dict(unit="jpegd", width=1243, height=375, fmt="jpeg422", out_fmt=of)))
    out.append(("jpegd exif 6", dict(unit="jpegd", width=1600, height=900, fmt="jpeg420", orientation=6)))
    out.append(("jpegd exif 3", dict(unit="jpegd", width=1600, height=900, fmt="jpeg420", orientation=3)))
    out.append(("jpegd channels 300", dict(unit="jpegd", width=1600, height=900, fmt="jpeg420", channels=300)))
    out.append(("jpegd batch 64", dict(unit="jpegd", width=1600, height=900, fmt="jpeg420", batch=64)))
    for fmt in ("png", "png-rgb", "png-gray", "png-rgba", "png-agray", "png-palette"):
        out.append((f"pngd {fmt} 1242x375", dict(unit="pngd", width=1242, height=375, fmt=fmt)))
    out.append(("pngd 5000x4000", dict(unit="pngd", width=5000, height=4000, fmt="png-rgb")))
    out.append(("pngd rgba -> rgba8888", dict(unit="pngd", width=640, height=480, fmt="png-rgba", out_fmt="rgba8888")))
    for fmt in ("h264", "h265"):
        for w, h in ((1920, 1080), (7680, 4320), (100, 100), (4096, 2304), (1281, 721)):
            out.append((f"vdec {fmt} {w}x{h}", dict(unit="vdec", width=w, height=h, fmt=fmt)))
        out.append((f"vdec {fmt} 10-bit", dict(unit="vdec", width=1920, height=1080, fmt=fmt, bit_depth=10)))
        out.append((f"vdec {fmt} interlaced", dict(unit="vdec", width=1920, height=1080, fmt=fmt, interlaced=True)))
        out.append((f"vdec {fmt} main10", dict(unit="vdec", width=1920, height=1080, fmt=fmt, profile="main10")))
        out.append((f"vdec {fmt} high", dict(unit="vdec", width=1920, height=1080, fmt=fmt, profile="high",
                                              level=5.1, chroma="420")))
        out.append((f"vdec {fmt} 422", dict(unit="vdec", width=1920, height=1080, fmt=fmt, chroma="4:2:2")))
        out.append((f"vdec {fmt} mp4", dict(unit="vdec", width=1920, height=1080, fmt=fmt, container="mp4")))
        out.append((f"vdec {fmt} 300 channels", dict(unit="vdec", width=1920, height=1080, fmt=fmt, channels=300)))
        out.append((f"vdec {fmt} -> rgb888", dict(unit="vdec", width=1920, height=1080, fmt=fmt, out_fmt="rgb888")))
        out.append((f"vdec {fmt} -> nv21", dict(unit="vdec", width=1920, height=1080, fmt=fmt, out_fmt="nv21")))
    import itertools
    pixel = ("yuv400", "nv12", "nv21", "yuv422sp", "yvu422sp", "yuv444sp", "yvu444sp", "yuv440sp", "yvu440sp",
             "yuyv", "uyvy", "yvyu", "vyuy", "yuv444packed", "rgb888", "bgr888", "argb8888", "abgr8888",
             "rgba8888", "bgra8888", "rgb888_planar", "bgr888_planar")
    for fmt in pixel:
        out.append((f"vpc resize {fmt}", dict(unit="vpc", op="resize", width=1600, height=900, fmt=fmt,
                                               out_width=800, out_height=450)))
    for of in ("rgb888", "bgr888", "nv21", "yuv444sp", "rgb888_planar"):
        out.append((f"vpc resize nv12 -> {of}", dict(unit="vpc", op="resize", width=1600, height=900, fmt="nv12",
                                                     out_fmt=of, out_width=800, out_height=450)))
        out.append((f"vpc csc nv12 -> {of}", dict(unit="vpc", op="csc", width=1600, height=900, fmt="nv12",
                                                  out_fmt=of)))
    for (w, h), (ow, oh) in itertools.product(((1242, 375), (1281, 721), (7680, 4320), (8192, 8192), (10, 6),
                                               (4097, 100)), ((621, 187), (640, 360), (40, 22), (4096, 4096))):
        out.append((f"vpc resize {w}x{h}->{ow}x{oh}", dict(unit="vpc", op="resize", width=w, height=h, fmt="nv12",
                                                           out_width=ow, out_height=oh)))
    out.append(("vpc resize 7680x4320 yuv444sp", dict(unit="vpc", op="resize", width=7680, height=4320,
                                                      fmt="yuv444sp", out_width=3840, out_height=2160)))
    out.append(("vpc resize x32", dict(unit="vpc", op="resize", width=64, height=64, fmt="nv12", out_width=2048,
                                       out_height=2048)))
    out.append(("vpc resize x17", dict(unit="vpc", op="resize", width=100, height=100, fmt="nv12", out_width=1700,
                                       out_height=1700)))
    for interp in ("bilinear", "nearest", "bicubic"):
        out.append((f"vpc resize {interp}", dict(unit="vpc", op="resize", width=1600, height=900, fmt="nv12",
                                                 out_width=800, out_height=450, interpolation=interp)))
    out.append(("vpc resize batch 300", dict(unit="vpc", op="resize", width=1600, height=900, fmt="nv12",
                                             out_width=800, out_height=450, batch=300)))
    out.append(("vpc resize channels 300", dict(unit="vpc", op="resize", width=1600, height=900, fmt="nv12",
                                                out_width=800, out_height=450, channels=300)))
    for crop in ((0, 0, 799, 449), (1, 1, 800, 450), (0, 0, 8, 8), (2, 2, 9, 9)):
        out.append((f"vpc crop {crop}", dict(unit="vpc", op="crop", width=1600, height=900, fmt="nv12", crop=crop)))
        out.append((f"vpc crop_resize {crop}", dict(unit="vpc", op="crop_resize", width=1600, height=900,
                                                    fmt="nv12", crop=crop, out_width=400, out_height=224)))
    for paste in ((0, 0, 799, 449), (8, 0, 807, 449), (16, 2, 815, 451), (3, 3, 802, 452)):
        out.append((f"vpc paste {paste}", dict(unit="vpc", op="crop_resize_paste", width=1600, height=900,
                                               fmt="nv12", crop=(0, 0, 799, 449), out_width=1600, out_height=900,
                                               paste=paste)))
    for border in ((0, 124, 0, 0), (0, 200, 0, 0), (10, 10, 10, 10)):
        out.append((f"vpc make_border {border}", dict(unit="vpc", op="make_border", width=1600, height=900,
                                                      fmt="nv12", border=border)))
    out.append(("vpc make_border 4000", dict(unit="vpc", op="make_border", width=4000, height=4000, fmt="nv12",
                                             border=(0, 200, 0, 0))))
    out.append(("vpc csc rgb -> nv12", dict(unit="vpc", op="csc", width=1600, height=900, fmt="rgb888",
                                            out_fmt="nv12")))
    return out


_FIELD_NAMES: dict = {}  # dataclass type -> its field names, in order


def _plain(x: Any) -> Any:
    """JSON-ready copy: dataclasses as dicts, versions/fractions as strings, sets sorted.

    Called ~7 million times per capture: plain values are returned first, and a dataclass instance is
    told by its type's ``__dataclass_fields__`` (what ``dataclasses.is_dataclass`` looks up, without its
    overhead), its field names cached per type; the output is the same."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if hasattr(type(x), "__dataclass_fields__"):
        names = _FIELD_NAMES.get(type(x))
        if names is None:
            names = _FIELD_NAMES[type(x)] = tuple(f.name for f in dataclasses.fields(x))
        return {n: _plain(getattr(x, n)) for n in names}
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (frozenset, set)):
        return sorted(_plain(v) for v in x)
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return str(x)


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(_plain(obj), sort_keys=True).encode()).hexdigest()[:20]


def _requirements_record(kb: Any, r: Any) -> dict:
    """``_plain(r)`` with ``crop_min`` as ``[width, height]``, the order the snapshot was taken in; code from
    issue 17 on gives sizes as ``(height, width)`` (told apart by ``align_down_even``'s answer)."""
    d = _plain(r)
    if d.get("crop_min") is not None and tuple(kb.align_down_even(3, 4)) == (4, 2):
        d["crop_min"] = d["crop_min"][::-1]
    return d


def _verdict_record(kb: Any, v: Any) -> dict:
    d = _plain(v)
    d["confidence_of"] = kb.confidence_of(v).to_dict()
    d["alternatives"] = [dict(_plain(a), confidence_of=kb.confidence_of(a).to_dict()) for a in v.alternatives]
    return d


def capture(kb: Any) -> dict:
    """The whole matrix as evaluated by the knowledge package ``kb`` (a module with the public API).

    Rows are keyed by family (one representative SoC, the first listed) and request; each row holds a
    readable summary per CANN version (status and API letters and the rules that decided the verdict:
    violations, unknowns or effects), run-length coded over the versions, and a digest of
    everything the verdicts carry (messages, sources, effects, confidences, alternatives, requirements).
    """
    fams = [f.key for f in kb.families()]
    socs = list(kb.known_soc_names()) + list(PATTERN_SOCS)
    out: dict = {"versions": list(VERSIONS), "families": fams, "socs": socs}
    # the family table as evaluated
    out["family_table"] = {f.key: _plain(f) for f in kb.families()}
    out["soc_info"] = {s: _plain(kb.soc_info(s)) for s in socs}
    out["documented_versions"] = {f: [str(v) for v in kb.documented_versions(f)] for f in fams}
    out["latest_checked"] = str(kb.latest_checked())
    # (rule, family, CANN): 1 where the rule's family list and CANN window include it
    cv = [kb.CannVersion.parse(v) for v in VERSIONS]
    out["rules"] = {}
    for r in kb.rules():
        out["rules"][r.id] = {
            "families": sorted(r.families),
            "applies": {f: "".join("1" if (f in r.families and v in r.cann) else "0" for v in cv) for f in fams},
            "digest": _digest(dict(_plain(r), families=sorted(r.families))),
            "confidence": {f: _digest([kb.rule_confidence(r.id, f, v).to_dict() for v in VERSIONS]) for f in fams},
        }
    # verdicts of the request set, per family and CANN version
    reps = {f.key: f.soc_names[0] for f in kb.families()}
    letters = {"ok": "o", "rejected": "r", "unknown": "?"}
    rows: dict = {}
    for fam, soc in reps.items():
        for label, args in _requests():
            summary, full = [], []
            for ver in VERSIONS:
                a = dict(args)
                try:
                    v = kb.check(soc, ver, a.pop("unit"), a.pop("op", None), a.pop("width"), a.pop("height"),
                                 a.pop("fmt"), **a)
                except ValueError as e:
                    summary.append(f"E:{e}")
                    full.append(str(e))
                    continue
                deciding = {"ok": "effect", "rejected": "violation", "unknown": "unknown"}[v.status]
                ids = ",".join(dict.fromkeys(x.rule_id for x in v.reasons if x.kind == deciding))
                summary.append(f"{letters[v.status]}{v.api[0]}:{ids}")
                rec = _verdict_record(kb, v)
                rec["requirements"] = [_requirements_record(kb, kb.requirements(v.request, api))
                                       for api in ("acldvpp", "himpi")]
                full.append(rec)
            runs: list = []  # [first CANN version, summary] for each run of equal summaries
            for ver, text in zip(VERSIONS, summary):
                if not runs or runs[-1][1] != text:
                    runs.append([ver, text])
            rows[f"{fam} | {label}"] = {"summary": runs, "digest": _digest(full)}
    out["verdicts"] = rows
    # every SoC name (its note and confidence reach the verdict), one request each
    out["per_soc"] = {}
    for soc in socs:
        full = [_verdict_record(kb, kb.check(soc, ver, "vpc", "resize", 1242, 375, "nv12", out_width=621,
                                             out_height=187)) for ver in VERSIONS]
        out["per_soc"][soc] = _digest(full)
    # strides: every family, unit, side and pixel format, two sizes
    out["strides"] = {}
    for fam in fams:
        for unit in kb.units():
            for side in ("in", "out"):
                cells = []
                for fmt in kb.pixel_formats():
                    for ver in VERSIONS:
                        for w, h in ((1242, 375), (1920, 1080)):
                            try:
                                s = kb.stride_for(None, ver, unit, fmt, w, h, family=fam, side=side)
                                cells.append([list(s), s.rule_id, s.confidence, s.source, s.api, s.note])
                            except kb.KnowledgeGap as e:
                                cells.append(["gap", e.reason, e.source, e.rule_id])
                ok = sum(1 for c in cells if c[0] != "gap")
                out["strides"][f"{fam} {unit} {side}"] = {"documented": ok, "digest": _digest(cells)}
    out["open_questions"] = _plain(kb.open_questions())
    return out


def _load_package(pkg_dir: Path) -> Any:
    """Import the knowledge package found at ``pkg_dir`` under a private name (the code before a change)."""
    name = "_kb_capture_" + hashlib.sha1(str(pkg_dir).encode()).hexdigest()[:8]
    spec = importlib.util.spec_from_file_location(name, pkg_dir / "__init__.py",
                                                  submodule_search_locations=[str(pkg_dir)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------------------------ tests

@pytest.fixture(scope="module")
def before() -> dict:
    return json.loads(SNAPSHOT.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def now() -> dict:
    from dvpipe import knowledge as kb

    return capture(kb)


def _diff(a: dict, b: dict, n: int = 3) -> str:
    keys = [k for k in a if a[k] != b.get(k)] + [k for k in b if k not in a]
    return f"{len(keys)} differ, e.g. " + "; ".join(f"{k}: before {a.get(k)!r:.300} now {b.get(k)!r:.300}"
                                                     for k in keys[:n])


def test_snapshot_covers_the_whole_matrix(before):
    # the fixture is the full (rule, family, CANN) grid, every SoC name, every unit/op, both APIs
    assert len(before["rules"]) == 104 and len(before["families"]) == 7 and len(before["versions"]) == 15
    assert len(before["socs"]) == 28 + len(PATTERN_SOCS)
    assert len(before["verdicts"]) == 7 * len(_requests())
    statuses = {run[1][0] for row in before["verdicts"].values() for run in row["summary"]}
    assert statuses == {"o", "r", "?"}  # ok, rejected and unknown all occur
    apis = {run[1][1] for row in before["verdicts"].values() for run in row["summary"]}
    assert apis == {"a", "h"}  # acldvpp and himpi verdicts


@pytest.mark.parametrize("section", ["rules", "verdicts", "per_soc", "strides", "soc_info", "documented_versions",
                                     "open_questions", "latest_checked", "socs", "families", "versions"])
def test_matrix_identical_to_the_code_before(before, now, section):
    a, b = before[section], now[section]
    assert a == b, _diff(a, b) if isinstance(a, dict) else f"before {a!r:.500} now {b!r:.500}"


def test_family_table_keeps_every_field(before, now):
    # the family table gained fields (groups, facts, ...); every field it had is unchanged
    for key, old in before["family_table"].items():
        new = {k: now["family_table"][key].get(k) for k in old}
        assert new == old, _diff(old, new)


def test_rules_name_groups_instead_of_repeating_them():
    import yaml

    from dvpipe.knowledge import groups
    from dvpipe.knowledge._data import DATA_DIR

    gs = groups()
    repeated = []
    for path in sorted(DATA_DIR.glob("rules_*.yaml")):
        for raw in yaml.safe_load(path.read_text(encoding="utf-8"))["rules"]:
            plain = {f for f in raw["families"] if f not in gs}
            for g, members in gs.items():
                if len(members) > 1 and set(members) <= plain:
                    repeated.append(f"{path.name} {raw['id']}: lists {g}'s members")
    assert not repeated, repeated[:5]
    assert gs["ascend310_class"] == ("ascend310", "ascend910")


def test_api_groups_agree_with_the_apis_each_family_lists():
    from dvpipe.knowledge import families, groups

    gs = groups()
    assert gs["all_families"] == tuple(f.key for f in families())
    assert gs["acldvpp_families"] == tuple(f.key for f in families() if "acldvpp" in f.apis)
    assert gs["himpi_families"] == tuple(f.key for f in families() if "himpi" in f.apis)
    assert "ascend310_class" in [g for g in families()[0].groups]


def test_family_facts_read_from_the_data():
    from dvpipe.knowledge import facts

    # CANN 6.0.1 aclcppdevg_03_0820 (acldvppSetResizeConfigInterpolation): 0 is the high-order filter on
    # Atlas 200/300/500 and Atlas training; on Atlas inference (310P) 0 means 1 and 3, 4 are not supported
    assert facts("Ascend310").acldvpp_default_filter == "high_order"
    assert facts("Ascend910ProB").acldvpp_default_filter == "high_order"
    assert facts("Ascend310P3").acldvpp_default_filter == "bilinear"
    assert facts("Ascend310P3").acldvpp_resize_refused == (3, 4)
    assert facts(family="ascend310").acldvpp_resize_interpolations == (0, 1, 2, 3, 4)
    # CANN 6.2.RC2 aclpythondevg_02_0298: Atlas 200/500 A2 also accepts 5 (the high-order filter)
    assert 5 in facts("Ascend310B1").acldvpp_resize_interpolations
    # dvpp_vpc_convert_color_async (CANN 8.0.RC3 aclcppdevg_03_0335; 9.0.0 aclpythondevg_01_0307):
    # not supported on Atlas 200/300/500 inference and Atlas training
    assert not facts("Ascend310").acldvpp_csc and not facts("Ascend910").acldvpp_csc
    assert facts("Ascend310P3").acldvpp_csc and facts("Ascend910B1").acldvpp_csc
    assert facts("Ascend910_9391").undocumented_layout_as == "Ascend910B3"
    assert all(u.startswith("https://") for u in facts("Ascend310").sources.values())
    with pytest.raises(ValueError, match="unknown SoC name"):
        facts("Ascend311")


@pytest.mark.parametrize("text, name", [
    ("| 0     910B4-1     | OK      |", "Ascend910B4-1"),     # A2 variant with a hyphen
    ("| 0     910B        | OK      |", "Ascend910B"),        # the bare name is the legacy 910
    ("NPU   Name 310P3  Health OK", "Ascend310P3"),
    ("Ascend910_9391", "Ascend910_9391"),
    ("chip 910_9399 ok", "Ascend910_9399"),                   # the documented A3 name pattern
    ("chip 310P7", "Ascend310P7"),                           # the 310P pattern
    ("Ascend950PR", "Ascend950PR"),
    ("910B3C", None),                                         # not a known name (B2C is; B3C is not)
    ("X310P3", None),                                         # never inside a longer word
    ("no chip here", None),
])
def test_soc_names_found_in_tool_output(text, name):
    from dvpipe.knowledge import find_soc_name

    assert find_soc_name(text) == name


def test_no_family_names_in_the_knowledge_code():
    """Family keys and SoC names appear only in the data: no string constant in the package's code (docstrings
    aside) names one."""
    import ast

    from dvpipe.knowledge import families

    names = {f.key for f in families()} | {n for f in families() for n in f.soc_names}
    found = []
    for path in sorted((ROOT / "dvpipe" / "knowledge").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                hits = [n for n in names if n in node.value.replace("-", " ").split() or node.value == n]
                if hits:
                    found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert not found, found


# the public names dvpipe.knowledge.rules exported before it was split (HEAD's rules.__all__)
_RULES_ALL = ["CONFIDENCES", "STATUSES", "Rule", "Request", "Finding", "Verdict", "Stride", "Requirements",
              "KnowledgeGap", "OpenQuestion", "check", "evaluate", "stride_for", "requirements", "rules",
              "open_questions", "units", "ops", "pixel_formats", "bitstreams", "LEVELS", "Confidence", "confidence_of",
              "rule_confidence", "combine_confidence", "rule_by_id", "documented_versions"]


def test_split_modules_keep_the_public_names():
    import dvpipe.knowledge as kb

    rules = importlib.import_module("dvpipe.knowledge.rules")  # the package attribute `rules` is the function
    for name in _RULES_ALL:
        assert getattr(rules, name) is getattr(kb, name), name
    assert rules.align_up(375, 16) == 384  # used by the detour helpers
    for mod in ("vocabulary", "schema", "checks", "request", "evaluation", "strides", "confidence"):
        m = importlib.import_module(f"dvpipe.knowledge.{mod}")
        assert m.__doc__ and all(hasattr(m, n) for n in m.__all__), mod


def test_condition_keys_are_declared_once_in_the_tables():
    from dvpipe.knowledge.checks import CHECKS, SELECTORS, check_keys
    from dvpipe.knowledge.schema import RULE_KEYS, Rule

    # the schema accepts what the tables declare, and the tables declare what the schema header documents
    header = (ROOT / "dvpipe" / "knowledge" / "data" / "rules_vpc.yaml").read_text(encoding="utf-8").split(
        "schema_version")[0]
    for key in list(SELECTORS) + sorted(check_keys()):
        assert key in header, f"{key} is not documented in the rules_vpc.yaml schema header"
    assert check_keys() == set(CHECKS) | {"in_formats_unknown"}
    assert RULE_KEYS == {f for f in Rule.__dataclass_fields__} - {"file"}
    assert all(c.doc for c in CHECKS.values()) and all(s.doc for s in SELECTORS.values())


_RULE = """schema_version: 1
rules:
  - id: {rid}
    section: "§2"
    unit: vpc
    api: any
    families: [{families}]
    aspects: [in_range]
{body}
    confidence: inferred
    source: "https://example.org/test-page"
"""


@pytest.mark.parametrize("body, words", [
    ("    check: {in_wdith: [10, 4096]}", ["unknown check 'in_wdith'", "did you mean 'in_w'?"]),
    ("    when: {fmt_nto: [nv12]}\n    check: {in_w: [10, 4096]}", ["unknown selector 'fmt_nto'"]),
    ("    chekc: {in_w: [10, 4096]}", ["unknown key 'chekc'", "did you mean 'check'?"]),
    ("    stride: {side: in, ws_alig: 16}", ["unknown stride key 'ws_alig'"]),
])
def test_unknown_rule_key_is_refused_in_one_line(tmp_path, body, words):
    from dvpipe import knowledge as kb

    (tmp_path / "rules_extra.yaml").write_text(_RULE.format(rid="test.bad_key", families="ascend310p", body=body),
                                               encoding="utf-8")
    with kb.extra_data(tmp_path):
        with pytest.raises(ValueError) as e:
            kb.rules()
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{tmp_path / 'rules_extra.yaml'}: rule test.bad_key: ")
    for w in words:
        assert w in msg
    assert kb.rule_by_id("vpc.v1.range.310_910") is not None  # the shipped data is back once the block ends


def test_unknown_family_or_group_is_refused(tmp_path):
    from dvpipe import knowledge as kb

    (tmp_path / "rules_extra.yaml").write_text(
        _RULE.format(rid="test.bad_family", families="ascend310_clas", body="    check: {in_w: [10, 4096]}"),
        encoding="utf-8")
    with kb.extra_data(tmp_path), pytest.raises(ValueError, match=r"rule test.bad_family: unknown family or group "
                                                                  r"'ascend310_clas'.*groups: .*ascend310_class"):
        kb.rules()


_NEW_FAMILY = """schema_version: 1
families:
  ascend999:
    label: "Ascend999 (test family)"
    soc_names: [Ascend999X]
    soc_patterns: ["Ascend999[A-Z][0-9]"]
    soc_confidence: inferred
    soc_source: "https://example.org/ascend999"
    apis: [acldvpp, himpi]
    documented_from: "8.0.0"
    documented_from_source: "https://example.org/ascend999"
    facts:
      acldvpp_resize_refused: [4]
groups:
  # the new family joins the groups whose rules hold for it; the shipped rules then apply to it
  all_families: [ascend999]
  acldvpp_families: [ascend999]
  himpi_families: [ascend999]
  ascend310b_class: [ascend999]
  test_only: [ascend999, ascend310p]
"""


def test_a_new_family_from_data_only(tmp_path):
    from dvpipe import knowledge as kb

    (tmp_path / "families.yaml").write_text(_NEW_FAMILY, encoding="utf-8")
    (tmp_path / "rules_ascend999.yaml").write_text(
        _RULE.format(rid="vpc.test.ascend999.width", families="test_only", body="    check: {in_w: [10, 2048]}"),
        encoding="utf-8")
    with pytest.raises(ValueError, match="unknown SoC name"):
        kb.family_of("Ascend999X")
    with kb.extra_data(tmp_path):
        assert kb.family_of("Ascend999X") == "ascend999"
        assert kb.soc_info("Ascend999Q7").confidence == "inferred"          # by its pattern
        assert kb.find_soc_name("| 0   999X   | OK |") == "Ascend999X"      # the npu-smi regex too
        assert kb.group("himpi_families")[-1] == "ascend999"
        assert kb.facts("Ascend999X").acldvpp_resize_refused == (4,)
        assert kb.facts("Ascend999X").acldvpp_csc is True                  # from fact_defaults
        ids = {r.id for r in kb.rules(family="ascend999")}
        # group rules of the shipped data (rules_pngd.yaml pngd.range: all families; rules_vpc.yaml
        # vpc.formats.310b_a2_a3_350: the later VPC class) and the new file's rule (group test_only)
        assert {"pngd.range", "vpc.formats.310b_a2_a3_350", "vpc.test.ascend999.width"} <= ids
        assert "vpc.v1.range.310_910" not in ids                               # a group it did not join
        # rules_pngd.yaml pngd.range: PNG input 32..4096 pixels per side, so 5000 wide is refused
        v = kb.check("Ascend999X", "9.0.0", "pngd", None, 5000, 4000, "png-rgb")
        assert v.status == "rejected" and "pngd.range" in {f.rule_id for f in v.violations}
        assert "input width 5000 exceeds the maximum 4096" in v.summary
        # the new rule: at most 2048 wide on this family (and on 310P, which the new group names)
        v = kb.check("Ascend999X", "9.0.0", "vpc", "resize", 3000, 1000, "nv12", out_width=1500, out_height=500)
        assert "vpc.test.ascend999.width" in {f.rule_id for f in v.reasons}
        assert "input width 3000 exceeds the maximum 2048" in " ".join(f.message for f in v.reasons)
        v = kb.check("Ascend310P3", "8.0.0", "vpc", "resize", 3000, 1000, "nv12", out_width=1500, out_height=500)
        assert "vpc.test.ascend999.width" in {f.rule_id for f in v.reasons}
        # before its first documented version the family is "not in the docs" (family.*.documented_from)
        v = kb.check("Ascend999X", "7.0.0", "pngd", None, 640, 480, "png-rgb")
        assert v.status == "unknown" and "family.ascend999.documented_from" in {f.rule_id for f in v.unknowns}
    # gone again outside the block, and the shipped rules no longer name it
    with pytest.raises(ValueError, match="unknown SoC name"):
        kb.family_of("Ascend999X")
    assert "ascend999" not in kb.groups()["all_families"]
    assert kb.rule_by_id("vpc.test.ascend999.width") is None


def test_extra_family_data_is_validated(tmp_path):
    from dvpipe import knowledge as kb

    bad = _NEW_FAMILY.replace("acldvpp_resize_refused: [4]", "acldvpp_csc_typo: true")
    (tmp_path / "families.yaml").write_text(bad, encoding="utf-8")
    with kb.extra_data(tmp_path), pytest.raises(ValueError, match=r"family ascend999: unknown fact "
                                                                  r"\['acldvpp_csc_typo'\]; known: "):
        kb.family_of("Ascend310")
    clash = _NEW_FAMILY.replace("  ascend999:\n", "  ascend310:\n")
    (tmp_path / "families.yaml").write_text(clash, encoding="utf-8")
    with kb.extra_data(tmp_path), pytest.raises(ValueError, match="family ascend310 is already defined"):
        kb.families()
    with pytest.raises(ValueError, match="does not exist"):
        kb.add_data_dir(tmp_path / "missing")


def test_registered_caches_are_cleared_when_the_data_changes(tmp_path):
    import functools

    from dvpipe import knowledge as kb

    calls = []

    @functools.lru_cache(maxsize=16)
    def verdict_cache(soc):  # what a backend caches: a verdict per target
        calls.append(soc)
        return kb.family_of(soc)

    kb.register_cache(verdict_cache)
    verdict_cache("Ascend310P3"), verdict_cache("Ascend310P3")
    assert calls == ["Ascend310P3"]
    (tmp_path / "families.yaml").write_text(_NEW_FAMILY, encoding="utf-8")
    with kb.extra_data(tmp_path):
        verdict_cache("Ascend310P3")
    assert calls == ["Ascend310P3", "Ascend310P3"]  # recomputed against the new layers
    with pytest.raises(TypeError):
        kb.register_cache(object())


def test_import_stays_lazy_with_the_split():
    code = ("import sys, dvpipe.knowledge as k; from dvpipe.knowledge import _data; "
            "assert _data.load_yaml.cache_info().currsize == 0; "
            "k.find_soc_name('310P3'); assert _data.load_yaml.cache_info().currsize == 1")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


if __name__ == "__main__":  # python tests/test_knowledge_structure.py --capture <knowledge package dir>
    import argparse
    import importlib.util

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capture", type=Path, required=True, help="a dvpipe/knowledge package directory")
    ap.add_argument("--out", type=Path, default=SNAPSHOT)
    args = ap.parse_args()
    data = capture(_load_package(args.capture.resolve()))
    args.out.write_text(json.dumps(data, sort_keys=True, indent=0, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, {len(data['verdicts'])} verdict rows)")
