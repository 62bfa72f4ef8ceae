"""DVPP knowledge base: what Huawei Ascend DVPP accepts, per product family and CANN version.

The documented rules (JPEGD, VPC, VDEC, PNGD) live as data in ``dvpipe/knowledge/data/*.yaml``, each with
its source URL, the CANN versions it was read for and a confidence; this package parses CANN versions,
maps SoC names to families and answers queries. Families, their SoC names, the named groups rules
refer to and the per-family facts the backends act on are data too (``families.yaml``, read through
:mod:`dvpipe.knowledge.socs`); extra data directories add families and rules (:func:`extra_data`).
Importing it reads no file and imports nothing heavier than the standard library; the YAML is parsed on
first use and cached.

Units: sizes and offsets in pixels; width strides and buffers in bytes; height strides in rows. A size
as one tuple is ``(height, width)``; boxes are ``(left, top, right, bottom)``.

    >>> from dvpipe.knowledge import check, stride_for
    >>> v = check("Ascend310", "6.0.1", "vpc", "resize", 1242, 375, "nv12", out_width=620, out_height=188)
    >>> v.status, v.reasons[0].detail
    ('rejected', 'input height 375 must be even (floored to 374 silently)')
    >>> tuple(stride_for("Ascend310", "6.0.1", "jpegd", "nv12", 1242, 375))
    (1280, 384, 737280)
"""
from .detours import Detour, align_down, align_down_even, align_up, legal_box, legal_crop, propose, resize_hops
from .rules import (CONFIDENCES, LEVELS, STATUSES, Confidence, Finding, KnowledgeGap, OpenQuestion, Request,
                    Requirements, Rule, Stride, Verdict, bitstreams, check, combine_confidence, confidence_of,
                    documented_versions, evaluate, open_questions, ops, pixel_formats, requirements, rule_by_id,
                    rule_confidence, rules, stride_for, units)
from .strides import jpegd_odd_size_question
from ._data import add_data_dir, extra_data, register_cache, remove_data_dir
from .socs import (Alias, Family, FamilyFacts, SocInfo, aliases, expand_families, facts, families, family, family_of,
                   find_soc_name, group, groups, known_soc_names, latest_checked, lookup_alias, soc_info, soc_name_re)
from .versions import CannVersion, VersionRange, page_version
from .vocabulary import bytes_per_pixel

__all__ = [
    # versions and names
    "CannVersion", "VersionRange", "Family", "SocInfo", "Alias", "families", "family", "family_of", "soc_info",
    "known_soc_names", "aliases", "lookup_alias", "latest_checked", "FamilyFacts", "facts", "groups", "group",
    "expand_families", "soc_name_re", "find_soc_name",
    # extra data (new families and rules from a directory of YAML files)
    "add_data_dir", "remove_data_dir", "extra_data", "register_cache",
    # queries
    "Request", "Verdict", "Finding", "check", "evaluate", "stride_for", "jpegd_odd_size_question", "Stride",
    "KnowledgeGap", "requirements",
    "Requirements", "CONFIDENCES", "STATUSES",
    # how sure a verdict is
    "LEVELS", "Confidence", "confidence_of", "rule_confidence", "combine_confidence", "rule_by_id",
    "documented_versions", "page_version",
    # listings
    "Rule", "rules", "OpenQuestion", "open_questions", "units", "ops", "pixel_formats", "bitstreams",
    "bytes_per_pixel",
    # detours
    "Detour", "propose", "legal_crop", "legal_box", "resize_hops", "align_up", "align_down", "align_down_even",
]
