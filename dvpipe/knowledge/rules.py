"""DVPP rules as data, and the queries over them: verdicts, strides, requirements.

Facts live in ``data/rules_*.yaml`` (schema in the header of ``rules_vpc.yaml``). This module is the
stable import point; the work is split by job:

- :mod:`.vocabulary`: units, ops, pixel formats, bitstreams, API names, confidences (``vocabulary.yaml``);
- :mod:`.schema`: :class:`Rule`, loading and validating the rule files, listings;
- :mod:`.checks`: the ``when:`` selectors and ``check:`` constraints, one table each;
- :mod:`.request`: :class:`Request`;
- :mod:`.evaluation`: :class:`Verdict`, :func:`evaluate`, :func:`check`, :func:`requirements`;
- :mod:`.strides`: :class:`Stride`, :func:`stride_for`;
- :mod:`.confidence`: :class:`Confidence` and how sure a verdict is.

Sizes are in pixels, strides and buffers in bytes (the width stride ``ws``) or rows (the
height stride ``hs``), as in the CANN docs.

Typical use::

    from dvpipe.knowledge import check
    v = check("Ascend310", "6.0.1", "vpc", "resize", 1242, 375, "nv12", out_width=620, out_height=188)
    v.status      # "rejected"
    v.reasons[0].message
    # 'VPC resize on Ascend310 (CANN 6.0.1): input height 375 must be even (floored to 374 silently)'

A verdict is ``ok`` only when every applicable documented rule passes and every aspect the request needs
(input range, formats, stride, ...) is covered by some rule; what the docs leave open is ``unknown`` with
the reason, never a guess.
"""
from __future__ import annotations

from .confidence import LEVELS, Confidence, combine_confidence, confidence_of, documented_versions, rule_confidence
from .evaluation import Finding, Requirements, Verdict, check, evaluate, requirements
from .request import Request
from .schema import OpenQuestion, Rule, open_questions, rule_by_id, rules
from .strides import Stride, stride_for
from .vocabulary import CONFIDENCES, STATUSES, KnowledgeGap, align_up, bitstreams, ops, pixel_formats, units

__all__ = [
    "CONFIDENCES", "STATUSES", "Rule", "Request", "Finding", "Verdict", "Stride", "Requirements",
    "KnowledgeGap", "OpenQuestion", "check", "evaluate", "stride_for", "requirements", "rules",
    "open_questions", "units", "ops", "pixel_formats", "bitstreams", "LEVELS", "Confidence", "confidence_of",
    "rule_confidence", "combine_confidence", "rule_by_id", "documented_versions",
]
