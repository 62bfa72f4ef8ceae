"""Legal geometry for rejected requests: the minimal change that the documented rules accept.

All sizes and offsets in pixels; boxes are ``(left, top, right, bottom)`` with inclusive offsets.
The constraints come from :func:`dvpipe.knowledge.requirements`, i.e. from the YAML rules; nothing here
knows about particular products.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Optional, Sequence, cast

from .rules import Request, Requirements, Verdict, align_up, evaluate, requirements
from .versions import VersionLike

__all__ = ["align_up", "align_down", "align_down_even", "legal_box", "legal_crop", "resize_hops", "Detour",
           "propose"]


def align_down(x: int, n: int) -> int:
    """``x`` rounded down to a multiple of ``n``."""
    return int(x) // int(n) * int(n)


def align_down_even(width: int, height: int) -> tuple[int, int]:
    """``(height, width)`` in pixels with odd sizes floored to even (what VPC on 310/910 does silently)."""
    return (height - height % 2, width - width % 2)


def legal_box(box: Sequence[int], reqs: Requirements, *, limit: tuple[int, int], paste: bool = False,
              min_size: Optional[tuple[int, int]] = None) -> Optional[tuple[int, int, int, int]]:
    """The largest box inside ``box`` that meets ``reqs.roi`` parity (and, for a paste box, the left-offset
    alignment), within ``limit``, the ``(height, width)`` in pixels of the picture or canvas.

    A paste box is shifted left to the alignment (its width kept), then trimmed. Returns None when nothing
    of at least ``min_size`` (``(height, width)``; default ``reqs.crop_min``) is left.
    """
    left, top, right, bottom = (int(x) for x in box)
    if paste and reqs.paste_left_align > 1 and left % reqs.paste_left_align:
        shift = left - align_down(left, reqs.paste_left_align)
        left, right = left - shift, right - shift
    roi = reqs.roi
    if roi.get("left") == "even" and left % 2:
        left += 1
    if roi.get("top") == "even" and top % 2:
        top += 1
    right = min(right, limit[1] - 1)
    bottom = min(bottom, limit[0] - 1)
    if roi.get("right") == "odd" and right % 2 == 0:
        right -= 1
    if roi.get("bottom") == "odd" and bottom % 2 == 0:
        bottom -= 1
    need = min_size or reqs.crop_min or (1, 1)
    if bottom - top + 1 < need[0] or right - left + 1 < need[1]:
        return None
    return (left, top, right, bottom)


def legal_crop(soc: Optional[str], cann: VersionLike, box: Sequence[int], width: int, height: int, *,
               fmt: str = "nv12", api: Optional[str] = None, family: Optional[str] = None,
               paste: bool = False) -> Optional[tuple[int, int, int, int]]:
    """The largest crop box inside ``box`` (of a ``width`` x ``height`` picture) that VPC accepts on this
    target: e.g. on 310/910 left/top rounded up to even and right/bottom down to odd. With ``paste=True``
    ``box`` is a paste box in a ``width`` x ``height`` canvas and its left offset is aligned too (16 on
    310/910/310P). Where the rule is undocumented (310B, A3, hi_mpi) the strictest documented rule is used.
    Returns None if no box of the minimum crop size remains.
    """
    box = tuple(int(x) for x in box)
    if paste:
        req = Request.make(soc, cann, "vpc", "crop_resize_paste", width, height, fmt, family=family or "",
                           api=api, crop=(0, 0, width - 1, height - 1), out_width=width, out_height=height,
                           paste=box)
    else:
        req = Request.make(soc, cann, "vpc", "crop", width, height, fmt, family=family or "", api=api, crop=box)
    return legal_box(box, requirements(req), limit=(height, width), paste=paste)


def resize_hops(soc: Optional[str], cann: VersionLike, size: tuple[int, int], out_size: tuple[int, int], *,
                fmt: str = "nv12", api: Optional[str] = None, family: Optional[str] = None,
                max_hops: int = 4) -> Optional[list[tuple[int, int]]]:
    """Split a resize whose per-axis scale lies outside the target's ratio limits into hops that each
    respect them. ``size``, ``out_size`` and the returned sizes are ``(height, width)`` in pixels.
    Returns the output size of every hop (the last is ``out_size``); a single element means one hop is
    enough; None if ``max_hops`` do not suffice. Intermediate sizes are rounded to the output alignment
    (even for NV12) and kept within the output range.
    """
    req = Request.make(soc, cann, "vpc", "resize", size[1], size[0], fmt, family=family or "", api=api,
                       out_width=out_size[1], out_height=out_size[0])
    return _hops(req, requirements(req), max_hops)


def _hops(req: Request, reqs: Requirements, max_hops: int) -> Optional[list[tuple[int, int]]]:
    if reqs.ratio is None:
        return [req.out_size]
    lo, hi = reqs.ratio
    src = (req.height, req.width) if req.op == "resize" else req.crop_size
    dst = req.out_size if req.op != "crop_resize_paste" else req.paste_size
    assert src is not None and dst is not None  # a resize request has both sizes
    aligns = (reqs.out_h_align, reqs.out_w_align)  # per axis of a (height, width) size
    ranges = (reqs.out_h or (1, 1 << 30), reqs.out_w or (1, 1 << 30))
    for k in range(1, max_hops + 1):
        sizes: list[tuple[int, ...]] = []
        for step in range(1, k + 1):
            if step == k:
                sizes.append(tuple(dst))
                continue
            dims = []
            for ax in range(2):
                exact = src[ax] * (dst[ax] / src[ax]) ** (step / k)
                v = max(aligns[ax], int(round(exact / aligns[ax])) * aligns[ax])
                dims.append(min(max(v, ranges[ax][0]), align_down(ranges[ax][1], aligns[ax])))
            sizes.append(tuple(dims))
        prev, ok = tuple(src), True
        for s in sizes:
            for ax in range(2):
                if not lo <= Fraction(s[ax], prev[ax]) <= hi:
                    ok = False
            prev = s
        if ok:
            return cast("list[tuple[int, int]]", [tuple(s) for s in sizes])
    return None


@dataclass(frozen=True)
class Detour:
    """A legal replacement for a rejected (or unknown) DVPP step.

    Attributes:
        kinds: what was changed: ``align_crop`` (input trimmed to the required alignment),
            ``even_output`` (output size rounded down), ``legal_crop`` / ``legal_paste`` (box adjusted to the
            parity/alignment rules), ``two_hop_resize`` (split to respect the scale limits).
        steps: each change in plain words, with its effect on the picture/geometry.
        requests: the DVPP request(s) that replace the original, in order.
        verdicts: their verdicts.
    """

    kinds: tuple[str, ...]
    steps: tuple[str, ...]
    requests: tuple[Request, ...]
    verdicts: tuple[Verdict, ...]

    @property
    def status(self) -> str:
        """``rejected`` if any hop is rejected, else ``unknown`` if any is unknown, else ``ok``."""
        st = {v.status for v in self.verdicts}
        return "rejected" if "rejected" in st else "unknown" if "unknown" in st else "ok"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def propose(verdict: Verdict) -> Optional[Detour]:
    """The minimal legal geometry for a rejected or unknown verdict, re-checked against the rules.

    Fixes, in order: input alignment (align-crop: trim the last column/row), crop/paste box parity and
    paste alignment, output alignment, and scale limits (two or more hops). Range violations that no
    geometry change can fix (e.g. an input larger than the unit accepts) give None, as does a fix that is
    still rejected. An ``ok`` verdict gives None.
    """
    if verdict.ok:
        return None
    req = verdict.request
    reqs = requirements(req, verdict.api)
    kinds: list[str] = []
    steps: list[str] = []
    new = req
    # 1. input alignment -> align-crop
    w2, h2 = align_down(req.width, reqs.w_align), align_down(req.height, reqs.h_align)
    if (w2, h2) != (req.width, req.height) and w2 > 0 and h2 > 0:
        dropped = []
        if w2 != req.width:
            dropped.append(f"the last {req.width - w2} column(s)")
        if h2 != req.height:
            dropped.append(f"the last {req.height - h2} row(s)")
        crop = new.crop
        if crop is not None:
            crop = (crop[0], crop[1], min(crop[2], w2 - 1), min(crop[3], h2 - 1))
        new = replace(new, width=w2, height=h2, crop=crop)
        kinds.append("align_crop")
        steps.append(f"align-crop the input to {w2}x{h2} (drops {' and '.join(dropped)}; the principal point is "
                     "unchanged)")
    # 2. crop and paste boxes
    if new.crop is not None:
        box = legal_box(new.crop, reqs, limit=(new.height, new.width))
        if box is None:
            return None
        if box != new.crop:
            kinds.append("legal_crop")
            steps.append(f"crop box {new.crop} -> {box} (left/top/right/bottom rules; shifts the principal "
                         f"point by ({-(box[0] - new.crop[0])}, {-(box[1] - new.crop[1])}) px)")
            new = replace(new, crop=box)
    if new.paste is not None:
        box = legal_box(new.paste, reqs, limit=new.out_size, paste=True, min_size=(1, 1))
        if box is None:
            return None
        if box != new.paste:
            kinds.append("legal_paste")
            steps.append(f"paste box {new.paste} -> {box} (the picture lands at x={box[0]}, y={box[1]} in the "
                         "canvas)")
            new = replace(new, paste=box)
    # 3. output alignment
    oh, ow = new.out_size
    ow2, oh2 = align_down(ow, reqs.out_w_align), align_down(oh, reqs.out_h_align)
    if (ow2, oh2) != (ow, oh) and ow2 > 0 and oh2 > 0:
        if new.op in ("resize", "crop_resize"):
            new = replace(new, out_width=ow2, out_height=oh2)
            kinds.append("even_output")
            steps.append(f"output {ow}x{oh} -> {ow2}x{oh2} (the scale changes slightly; update the intrinsics "
                         "with the new scale)")
        elif new.op == "crop" and new.crop is not None:
            c = new.crop
            new = replace(new, crop=(c[0], c[1], c[0] + ow2 - 1, c[1] + oh2 - 1))
            kinds.append("even_output")
            steps.append(f"crop {ow}x{oh} -> {ow2}x{oh2} (drops the last column/row of the crop)")
    hop_reqs: list[Request] = [new]
    # 4. scale limits -> hops
    if any("ratio" in f.check.split(",") for f in verdict.reasons if f.kind in ("violation", "unknown")):
        hops = _hops(new, requirements(new, verdict.api), 4)
        if hops is None:
            return None
        if len(hops) > 1:
            hop_reqs = []
            cur = new
            for i, size in enumerate(hops):
                assert cur.out_fmt is not None  # Request.__post_init__ fills it
                if i == 0:
                    op = "crop_resize" if new.op in ("crop_resize", "crop_resize_paste") else "resize"
                    hop = replace(new, op=op, out_width=size[1], out_height=size[0], paste=None)
                elif i == len(hops) - 1 and new.op == "crop_resize_paste":
                    ch, cw = cur.out_size
                    hop = replace(new, width=cw, height=ch, fmt=cur.out_fmt, crop=(0, 0, cw - 1, ch - 1))
                else:
                    ch, cw = cur.out_size
                    hop = replace(new, op="resize", width=cw, height=ch, fmt=cur.out_fmt, crop=None, paste=None,
                                  out_width=size[1], out_height=size[0])
                hop_reqs.append(hop)
                cur = hop
            kinds.append("two_hop_resize")
            assert reqs.ratio is not None  # more than one hop only under a ratio limit (_hops)
            chain = " -> ".join(f"{w}x{h}" for h, w in hops)
            steps.append(f"resize in {len(hops)} VPC passes ({chain}) to respect the per-pass scale limits "
                         f"[{reqs.ratio[0]}, {reqs.ratio[1]}]")
    if not kinds:
        return None
    verdicts = tuple(evaluate(r) for r in hop_reqs)
    detour = Detour(tuple(kinds), tuple(steps), tuple(v.request for v in verdicts), verdicts)
    if detour.status == "rejected" or (verdict.status == "unknown" and detour.status == "unknown"):
        return None
    return detour
