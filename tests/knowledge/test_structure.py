"""The knowledge base's structure: family groups in the data, the engine split by job, table-driven checks,
a new SoC family from data only.

The verdicts themselves are pinned against the documentation by ``tests/knowledge/test_knowledge.py``,
``tests/knowledge/test_documented_rules.py``, ``tests/knowledge/test_cann_versions.py`` and ``tests/probe/test_golden.py``.
"""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import rule_yaml

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize("body, words", [
    ("    check: {in_wdith: [10, 4096]}", ["unknown check 'in_wdith'", "did you mean 'in_w'?"]),
    ("    when: {fmt_nto: [nv12]}\n    check: {in_w: [10, 4096]}", ["unknown selector 'fmt_nto'"]),
    ("    chekc: {in_w: [10, 4096]}", ["unknown key 'chekc'", "did you mean 'check'?"]),
    ("    stride: {side: in, ws_alig: 16}", ["unknown stride key 'ws_alig'"]),
])
def test_unknown_rule_key_is_refused_in_one_line(tmp_path, body, words):
    from dvpipe import knowledge as kb

    (tmp_path / "rules_extra.yaml").write_text(rule_yaml("test.bad_key", body),
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
        rule_yaml("test.bad_family", "    check: {in_w: [10, 4096]}", families="ascend310_clas"),
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
        rule_yaml("vpc.test.ascend999.width", "    check: {in_w: [10, 2048]}", families="test_only"),
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
