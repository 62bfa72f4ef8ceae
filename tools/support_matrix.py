#!/usr/bin/env python3
"""Generate the support matrix (``docs/support_matrix.md``) from the kernel registry and the DVPP
knowledge base, so the README's table never drifts from the code.

Usage::

    python tools/support_matrix.py            # (re)write docs/support_matrix.md
    python tools/support_matrix.py --check    # exit 1 when docs/support_matrix.md is out of date
    python tools/support_matrix.py --stdout   # print it

What it contains:

1. which backend implements which stage (the kernel registry, every backend family imported);
2. the DVPP product families: SoC names, API generations, the CANN versions whose docs list them;
3. typical camera cases judged for every family, at the first and at the latest CANN version whose docs
   list the family (``dvpipe.knowledge.check``, detours from ``dvpipe.knowledge.propose``), with the
   reason for each answer that is not a plain yes;
4. every rule with its source, CANN range and confidence; 5. the open questions.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "support_matrix.md"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: (label, check() arguments). Sizes in pixels; VPC inputs are NV12 unless stated.
CASES: list[tuple[str, dict]] = [
    ("JPEGD 1600x900 4:2:0", dict(unit="jpegd", width=1600, height=900, fmt="jpeg420")),
    ("JPEGD 1242x375 4:2:0 (odd height)", dict(unit="jpegd", width=1242, height=375, fmt="jpeg420")),
    ("JPEGD 1920x1080 4:4:4", dict(unit="jpegd", width=1920, height=1080, fmt="jpeg444")),
    ("JPEGD 1920x1080 4:4:0", dict(unit="jpegd", width=1920, height=1080, fmt="jpeg440")),
    ("JPEGD progressive 1600x900", dict(unit="jpegd", width=1600, height=900, fmt="jpeg-progressive")),
    ("JPEGD 12000x9000 4:2:0", dict(unit="jpegd", width=12000, height=9000, fmt="jpeg420")),
    ("PNGD 1242x375 RGB", dict(unit="pngd", width=1242, height=375, fmt="png-rgb")),
    ("PNGD 5000x4000 RGB", dict(unit="pngd", width=5000, height=4000, fmt="png-rgb")),
    ("VDEC H.264 1920x1080", dict(unit="vdec", width=1920, height=1080, fmt="h264")),
    ("VDEC H.265 3840x2160", dict(unit="vdec", width=3840, height=2160, fmt="h265")),
    ("VDEC H.264 7680x4320", dict(unit="vdec", width=7680, height=4320, fmt="h264")),
    ("VPC resize 1600x900 -> 800x450", dict(unit="vpc", op="resize", width=1600, height=900, fmt="nv12",
                                            out_width=800, out_height=450)),
    ("VPC resize 1242x375 -> 621x187", dict(unit="vpc", op="resize", width=1242, height=375, fmt="nv12",
                                            out_width=621, out_height=187)),
    ("VPC resize 7680x4320 -> 3840x2160 NV12", dict(unit="vpc", op="resize", width=7680, height=4320, fmt="nv12",
                                                    out_width=3840, out_height=2160)),
    ("VPC resize 7680x4320 YUV444SP", dict(unit="vpc", op="resize", width=7680, height=4320, fmt="yuv444sp",
                                           out_width=3840, out_height=2160)),
    ("VPC resize 1920x1080 -> 40x22 (below 1/32)", dict(unit="vpc", op="resize", width=1920, height=1080,
                                                        fmt="nv12", out_width=40, out_height=22)),
    ("VPC crop (1,1)-(800,450) of 1600x900", dict(unit="vpc", op="crop", width=1600, height=900, fmt="nv12",
                                                  crop=(1, 1, 800, 450))),
    ("VPC paste at x=8 in 1600x900", dict(unit="vpc", op="crop_resize_paste", width=1600, height=900, fmt="nv12",
                                          crop=(0, 0, 799, 449), out_width=1600, out_height=900,
                                          paste=(8, 0, 807, 449))),
]
_BACKENDS = ("cpu", "reference", "torch", "dvpp", "aipp")
_WORD = {"ok": "yes", "rejected": "no", "unknown": "open"}


def _versions(fam: Any) -> tuple[str, str]:
    from dvpipe.knowledge import CannVersion, latest_checked
    from dvpipe.probe.matrix import CANN_VERSIONS

    listed = [v for v in CANN_VERSIONS if CannVersion.parse(v) >= fam.documented_from
              and CannVersion.parse(v) <= latest_checked()
              and (fam.dropped_from is None or CannVersion.parse(v) < fam.dropped_from)]
    return listed[0], listed[-1]


def _judge(fam_key: str, cann: str, case: dict) -> tuple[str, str, Optional[str], Optional[str]]:
    """``(cell, reason, detour, source)`` for one family, version and case."""
    from dvpipe.knowledge import check, propose

    args = dict(case)
    v = check(None, cann, args.pop("unit"), args.pop("op", None), args.pop("width"), args.pop("height"),
              args.pop("fmt"), family=fam_key, **args)
    first = (v.violations or v.unknowns or v.effects or (None,))[0]
    reason = first.detail if first is not None else ""
    source = first.source if first is not None else None
    if v.ok:
        return ("yes*" if v.effects else "yes"), reason, None, source
    d = propose(v)
    if d is not None and d.ok:
        return "detour", reason, "; ".join(d.steps), source
    return _WORD[v.status], reason, None, source


def _esc(text: str) -> str:
    return text.replace("|", "\\|")


def generate() -> str:
    """The whole markdown document (deterministic: same code and data, same bytes)."""
    from dvpipe.backends import load_family
    from dvpipe.knowledge import families, latest_checked, open_questions, rules
    from dvpipe.stages.kernel_registry import _LOCK, _REGISTRY

    loaded = {b: load_family(b) for b in _BACKENDS}
    out = ["# Support matrix", "",
           "Generated by `tools/support_matrix.py` from the kernel registry and the DVPP knowledge base "
           "(`dvpipe/knowledge/data/*.yaml`). Do not edit by hand: run `python tools/support_matrix.py`.", "",
           "## Stages by backend", "",
           "A mark means the backend family registers a kernel for the stage; whether it runs for a given camera "
           "and target is the planner's verdict (`print(pipe.plan)`, `dvpipe probe`).", ""]
    with _LOCK:  # dvpipe's own kernels only (a test or a user may have registered more in this process)
        own = [k for b in _REGISTRY.values() for k in b if getattr(k.fn, "__module__", "").startswith("dvpipe.")]
    ops: dict[str, set] = {}
    for k in own:
        for op in k.ops:
            ops.setdefault(op, set()).add(k.family)
    ops = {op: ops[op] for op in sorted(ops)}
    single = {(k.family, k.ops[0]) for k in own if len(k.ops) == 1}
    out.append("| stage | " + " | ".join(_BACKENDS) + " |")
    out.append("|---|" + "---|" * len(_BACKENDS))
    for op, fams in ops.items():
        cells = ["" if b not in fams else "yes" if (b, op) in single else "fused only" for b in _BACKENDS]
        out.append(f"| {op} | " + " | ".join(cells) + " |")
    out += ["", "`fused only`: the backend runs the stage only inside a fused step (e.g. DVPP resizes in the same "
                "step as its decode, fed from the decoder's output)."]
    missing = [f"`{b}` ({why})" for b, why in loaded.items() if why]
    if missing:
        out += ["", "Not importable when this file was generated: " + ", ".join(missing) + "."]
    fused = sorted({(k.family, "+".join(k.ops), k.name) for k in own if len(k.ops) > 1})
    if fused:
        out += ["", "Fused kernels (one step covering several stages):", ""]
        for fam in dict.fromkeys(f for f, _o, _n in fused):
            mine = [(o, n) for f, o, n in fused if f == fam]
            if len(mine) <= 8:
                out += [f"- {fam}: " + ", ".join(f"{o} (`{n}`)" for o, n in mine)]
            else:
                stages = sorted({op for o, _n in mine for op in o.split("+")})
                longest = max((o for o, _n in mine), key=lambda o: o.count("+"))
                out += [f"- {fam}: {len(mine)} runs over {', '.join(stages)} (e.g. {longest})"]

    out += ["", "## DVPP product families", "",
            "SoC names are matched in full, as `acl.get_soc_name()` returns them (never by prefix: the bare "
            "`Ascend910B` is a first-generation 910).", "",
            "| family | SoC names | APIs | listed in the DVPP docs |", "|---|---|---|---|"]
    for f in families():
        listed = f"from CANN {f.documented_from}" + (f", not from {f.dropped_from}" if f.dropped_from else "")
        apis = ", ".join({"acldvpp": "acldvpp (v1)", "himpi": "hi_mpi (v2)"}[a] for a in f.apis)
        names = ", ".join(f.soc_names) + (f" (+ {', '.join(f.soc_patterns)})" if f.soc_patterns else "")
        out.append(f"| {f.label} | {names} | {apis} | {listed} |")

    out += ["", "## Typical camera cases per family", "",
            "Each cell: first / latest CANN version whose docs list the family (shown in the header). "
            "`yes`: accepted; `yes*`: accepted with a silent effect (e.g. an odd size floored to even); "
            "`detour`: rejected as asked, accepted after the legal detour below; `no`: rejected; `open`: the docs "
            "leave it open (dvpipe then falls back rather than guess).", ""]
    fams = list(families())
    vers = {f.key: _versions(f) for f in fams}
    out.append("| case | " + " | ".join(f"{f.key} ({vers[f.key][0]} / {vers[f.key][1]})" for f in fams) + " |")
    out.append("|---|" + "---|" * len(fams))
    details: dict[tuple, list[str]] = {}
    for label, case in CASES:
        row = []
        for f in fams:
            cells = []
            for cann in dict.fromkeys(vers[f.key]):
                cell, reason, detour, source = _judge(f.key, cann, case)
                cells.append(cell)
                if cell != "yes":
                    details.setdefault((label, cell, reason, detour, source), []).append(f"{f.key} {cann}")
            row.append(" / ".join(cells))
        out.append(f"| {label} | " + " | ".join(row) + " |")
    out += ["", "### Why (every answer that is not a plain yes)", ""]
    for (label, cell, reason, detour, source), where in details.items():
        line = f"- **{label}** — {cell} on {', '.join(where)}: {_esc(reason)}"
        if detour:
            line += f". Detour: {_esc(detour)}"
        if source:
            line += f" ([source]({source}))"
        out.append(line)

    out += ["", "## Rules", "",
            f"{len(rules())} rules; the newest CANN docs read were {latest_checked()}. Confidence: `documented` "
            "(CANN docs), `mindx` (MindX SDK docs), `secondary` (sample code, legacy guide), `inferred` (dvpipe's "
            "reading).", "", "| rule | unit | ops | families | CANN | confidence | section | source |",
            "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rules(), key=lambda r: (r.unit, r.id)):
        ops_ = ", ".join(r.ops) if r.ops else "all"
        cann = str(r.cann) if not r.cann.is_open else "all"
        out.append(f"| `{r.id}` | {r.unit} | {ops_} | {', '.join(r.families)} | {_esc(cann)} | {r.confidence} | "
                   f"{r.section} | [link]({r.source}) |")
    out += ["", "## Open questions", "",
            "What the retrieved docs leave open (constraints.md §9); verdicts that depend on them are `unknown`.", ""]
    for q in open_questions():
        out.append(f"- **{q.id}**: {_esc(q.text)}" + (f" (rules: {', '.join(q.rule_ids)})" if q.rule_ids else ""))
    return "\n".join(out) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(OUT), help="where to write (default docs/support_matrix.md)")
    ap.add_argument("--check", action="store_true", help="exit 1 when the file differs from what would be written")
    ap.add_argument("--stdout", action="store_true", help="print instead of writing")
    a = ap.parse_args(argv)
    text = generate()
    if a.stdout:
        sys.stdout.write(text)
        return 0
    path = Path(a.out)
    if a.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is out of date: run python tools/support_matrix.py", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
