"""CANN version parsing, ordering and ranges (constraints.md, "Version directory codes" and §8)."""
from __future__ import annotations

import itertools
import random

import pytest

from dvpipe.knowledge import CannVersion, VersionRange

# The release chain from the issue brief, oldest first.
CHAIN = ["5.0.4", "5.1.RC2", "6.0.RC1", "6.0.1", "6.2.RC1", "6.3.RC2", "7.0.RC1", "7.0.0", "8.0.RC1", "8.0.RC3",
         "8.0.0", "8.1.RC1", "8.2.RC1", "8.3.RC1", "8.5.0", "9.0.0"]


def test_chain_is_strictly_increasing():
    parsed = [CannVersion.parse(s) for s in CHAIN]
    for a, b in zip(parsed, parsed[1:]):
        assert a < b, (a, b)
        assert not b < a
        assert a != b


def test_sorting_a_shuffled_chain_restores_it():
    shuffled = CHAIN[:]
    random.Random(7).shuffle(shuffled)
    assert [str(v) for v in sorted(CannVersion.parse(s) for s in shuffled)] == CHAIN


@pytest.mark.parametrize("pre, release", [
    ("8.0.RC1.alpha002", "8.0.RC1"),
    ("8.1.RC1.beta1", "8.1.RC1"),
    ("9.0.0.beta2", "9.0.0"),
    ("9.0.0beta1", "9.0.0"),
    ("8.0.RC1.alpha002", "8.0.RC1.beta1"),   # alpha < beta
    ("9.0.0beta1", "9.0.0.beta2"),
    ("8.2.RC1alpha003", "8.2.RC1"),
])
def test_prereleases_sort_before_their_release(pre, release):
    assert CannVersion.parse(pre) < CannVersion.parse(release)


def test_prerelease_sorts_after_the_previous_release():
    # 8.0.RC1.alpha002 is a pre-release of 8.0.RC1, so it is newer than 7.0.0
    assert CannVersion.parse("7.0.0") < CannVersion.parse("8.0.RC1.alpha002") < CannVersion.parse("8.0.RC1")
    assert CannVersion.parse("8.0.RC3") < CannVersion.parse("8.0.0.alpha001") < CannVersion.parse("8.0.0")


@pytest.mark.parametrize("text", CHAIN + ["8.0.RC1.alpha002", "8.1.RC1.beta1", "9.0.0beta1", "9.0.0.beta2",
                                          "8.0.RC2.2", "10.0.0"])
def test_str_round_trips(text):
    assert str(CannVersion.parse(text)) == text
    assert CannVersion.parse(str(CannVersion.parse(text))) == CannVersion.parse(text)


def test_equal_spellings_hash_equal():
    a, b = CannVersion.parse("9.0.0beta1"), CannVersion.parse("9.0.0.beta1")
    assert a == b and hash(a) == hash(b)
    assert len({a, b, CannVersion.parse("9.0.0")}) == 2
    assert CannVersion.parse("8.0.rc1") == CannVersion.parse("8.0.RC1")


def test_compares_with_strings_and_is_hashable_in_dicts():
    v = CannVersion.parse("8.0.RC1")
    assert v == "8.0.RC1"
    assert v < "8.0.0"
    assert {v: 1}[CannVersion.parse("8.0.RC1")] == 1


def test_parse_accepts_a_version_and_whitespace():
    v = CannVersion.parse(" 8.0.0 ")
    assert CannVersion.parse(v) is v
    assert str(v) == "8.0.0"


def test_rc_and_ga_attributes():
    rc, ga = CannVersion.parse("8.0.RC3"), CannVersion.parse("8.0.1")
    assert rc.is_rc and rc.rc == 3 and rc.patch is None
    assert not ga.is_rc and ga.patch == 1
    assert CannVersion.parse("9.0.0beta1").is_prerelease


@pytest.mark.parametrize("bad", ["", "8", "8.0", "8.0.RC", "v8.0.0", "8.0.0-rc1", "8.0.RC1.gamma1", "eight",
                                 "8.0.0.beta.1", None, 800])
def test_unparsable_raises_with_the_accepted_forms(bad):
    with pytest.raises(ValueError) as exc:
        CannVersion.parse(bad)
    msg = str(exc.value)
    assert "8.0.RC1" in msg and "8.0.0" in msg and "alpha" in msg


def test_build_numbers_sort_between_releases():
    assert CannVersion.parse("8.0.RC2") < CannVersion.parse("8.0.RC2.2") < CannVersion.parse("8.0.RC3")


def test_total_order_is_consistent():
    vs = [CannVersion.parse(s) for s in CHAIN + ["8.0.RC1.alpha002", "9.0.0beta1", "8.1.RC1.beta1"]]
    for a, b in itertools.product(vs, vs):
        assert (a < b) + (b < a) + (a == b) == 1


# ---------------------------------------------------------------------------------------------- ranges

def test_version_range_inclusive_and_open():
    r = VersionRange("6.0.1", "8.3.RC1")
    assert "6.0.1" in r and "8.3.RC1" in r and "7.0.0" in r
    assert "6.0.RC1" not in r and "8.5.0" not in r
    assert "5.0.4" in VersionRange(None, "6.0.1")
    assert "99.0.0" in VersionRange("8.5.0")
    assert "1.0.0" in VersionRange()
    assert VersionRange().is_open


def test_version_range_before_is_exclusive():
    r = VersionRange(before="8.5.0")
    assert "8.3.RC1" in r
    assert "8.5.0.alpha001" in r          # a pre-release of 8.5.0 is still before 8.5.0
    assert "8.5.0" not in r


def test_version_range_rejects_empty_and_bad_keys():
    with pytest.raises(ValueError):
        VersionRange("9.0.0", "8.0.0")
    with pytest.raises(ValueError):
        VersionRange.from_mapping({"from": "8.0.0"})
    assert str(VersionRange("8.0.0", before="9.0.0")) == ">= 8.0.0, < 9.0.0"
