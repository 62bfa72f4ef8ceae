"""The text of ``dvpipe probe --capacity``: one row per DVPP unit, the verdict, per-set times and sources
(:func:`render` of a :class:`~dvpipe.probe.capacity.Forecast`)."""
from __future__ import annotations

from typing import Optional

from .capacity import Forecast, scaling

__all__ = ["render"]



def _fmt(v: Optional[float], nd: int = 1) -> str:
    return "unknown" if v is None else f"{v:,.{nd}f}"


def render(fc: Forecast, *, sources: bool = True) -> str:
    """The human table of a forecast (one row per unit, then the verdict, per-set times and sources)."""
    rates = sorted(r for r in fc.fps.values() if r is not None)
    rate = ", ".join(dict.fromkeys(f"{r:.3g}" for r in rates)) or "not given"
    lines = [f"DVPP capacity forecast: {fc.soc} (CANN {fc.cann}), family {fc.family}; {len(fc.fps)} camera(s) at "
             f"{rate} fps ({fc.fps_source or 'rate'})",
             "  predicted from documented figures, not measured on hardware"
             if not any(u.figure is not None and u.figure.measured for u in fc.units) else
             "  documented figures, with the measured ones where the --live cache has them (labelled)"]
    rows = [["unit", "cams", "ref", "per ch fps", "max fps", "capacity", "load", "use", "ch use", "headroom", "max fps/cam",
             "max cams", "channels", "step ms", "set ms"]]
    for u in fc.units:
        step = sorted(set(round(v, 2) for v in u.step_ms.values()))
        lim = "; ".join(f"{x['used']}/{x['max_channels']}{'' if x['ok'] else ' OVER'}" for x in u.limits) or "-"
        rows.append([u.unit, str(u.channels), u.reference or "-",
                     "-" if u.figure is None else ("n/a" if u.per_channel_fps is None else f"{u.per_channel_fps:g}"),
                     "-" if u.max_total_fps is None else f"{u.max_total_fps:g}",
                     _fmt(u.capacity_fps), _fmt(u.load_fps),
                     "unknown" if u.utilisation is None else f"{100 * u.utilisation:.1f}%",
                     "unknown" if u.channel_utilisation is None else f"{100 * u.channel_utilisation:.1f}%",
                     "unknown" if u.utilisation is None else f"{100 * (1 - u.utilisation):.1f}%",
                     _fmt(u.max_fps_per_camera), "unknown" if u.max_cameras is None else str(u.max_cameras), lim,
                     "unknown" if not step else "/".join(f"{s:.2f}" for s in step), _fmt(u.set_ms, 2)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
    fits = fc.fits
    first = fc.first_saturating
    verdict = {True: "fits", False: "does NOT fit", None: "unknown (a unit has no figure, or no frame rate)"}[fits]
    if not fc.units:
        verdict = "nothing to forecast: no step runs on DVPP"
    elif fits is None and all(u.fits is not False for u in fc.units) and any(u.fits for u in fc.units):
        verdict = ("unknown: the units with a figure fit; "
                   + ", ".join(u.unit for u in fc.units if u.fits is None) + " unknown")
    lines.append(f"verdict: {verdict}")
    if first is not None:
        if not first.channels_ok:
            over = next(x for x in first.limits if not x["ok"])
            lines.append(f"first to saturate: {first.unit} channels ({over['used']} used, at most {over['max_channels']}: "
                         f"{over['page']}, CANN {over['cann']})")
        else:
            cams = "" if first.max_cameras is None else f", or {first.max_cameras} such cameras at this rate"
            lines.append(f"first to saturate: {first.unit} at {first.max_fps_per_camera:,.1f} fps per camera{cams}")
    why: dict[str, list[str]] = {}
    for u in fc.units:
        if u.figure is None:
            why.setdefault(str(u.why_unknown), []).append(u.unit)
    for text, names in why.items():
        lines.append(f"  {', '.join(names)}: unknown -- {text}")
    for u in fc.units:
        if u.memory:
            lines.append(f"{u.unit} memory: about {u.memory['mb']:,.0f} MB for {u.channels} channel(s) (documented per "
                         f"channel: {u.memory['quote']}; {u.memory['page']}, CANN {u.memory['cann']})")
    total = fc.set_ms
    if total is not None:
        lines.append(f"predicted device time per frame set: {total:.2f} ms (units one after the other; "
                     + ", ".join(f"{u.unit} {u.set_ms:.2f}" for u in fc.units) + ")")
    else:
        missing = ", ".join(u.unit for u in fc.units if u.set_ms is None)
        known = "" if all(u.set_ms is None for u in fc.units) else f"; the known units add {fc.known_set_ms:.2f} ms"
        lines.append(f"predicted device time per frame set: unknown ({missing} without a figure{known})" if fc.units
                     else "predicted device time per frame set: no step runs on DVPP")
    if fc.cpu:
        c = fc.cpu
        lines.append(f"CPU path ({c['how']}): {c['set_ms']:.2f} ms of CPU work per frame set "
                     f"({', '.join(f'{k} {v:.2f}' for k, v in c['per_camera_ms'].items())} ms per camera)")
        if c.get("remaining_set_ms") is not None:
            lines.append(f"  on DVPP the CPU keeps {c['remaining_set_ms']:.2f} ms per frame set "
                         f"({', '.join(c.get('remaining_steps', [])) or 'nothing'})")
    for n in fc.notes:
        lines.append(f"note: {n}")
    sc = scaling()
    lines.append(f"scaling: {' '.join(str(sc['rule']).split())} ({sc['page']}, CANN {sc['cann']}; "
                 f"assumption: {' '.join(str(sc['assumption']).split())})")
    if sources:
        seen = set()
        for u in fc.units:
            if u.figure is not None and u.figure.source not in seen:
                seen.add(u.figure.source)
                lines.append(f"source {u.unit}: {u.figure.label()}: {u.figure.source}")
            for x in u.limits:
                if x["source"] not in seen:
                    seen.add(x["source"])
                    lines.append(f"source {u.unit} channels: {x['page']} (CANN {x['cann']}): {x['source']}")
    return "\n".join(lines)
