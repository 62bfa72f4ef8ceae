"""dvpipe.Target: validated against the knowledge base (constraints.md §0 names, §7 detection)."""
import importlib.util

import pytest

import dvpipe as dv


@pytest.mark.parametrize("soc,family", [
    ("Ascend310", "ascend310"), ("Ascend910B", "ascend910"),  # bare Ascend910B is the old 910 (§0)
    ("Ascend910B4-1", "ascend910b"), ("Ascend910_9391", "ascend910_93"), ("Ascend310P3", "ascend310p"),
])
def test_target_family(soc, family):
    t = dv.Target(soc=soc, cann="8.0.RC1")
    assert t.family == family and str(t) == f"{soc} (CANN 8.0.RC1)"


@pytest.mark.parametrize("soc,cann,match", [
    ("910C", "8.0.0", "Ascend910_9391"), ("Ascend910B9", "8.0.0", "unknown SoC"), ("Ascend310", "six", "cannot parse"),
    ("Ascend31", "6.0.1", "unknown SoC"),
])
def test_target_errors_say_what_to_do(soc, cann, match):
    with pytest.raises(dv.ConfigError, match=match):
        dv.Target(soc=soc, cann=cann)


@pytest.mark.skipif(importlib.util.find_spec("acl") is not None, reason="an Ascend stack is installed here")
def test_detect_returns_none_without_ascend_stack():
    from dvpipe.probe import detect_target

    assert detect_target() is None
