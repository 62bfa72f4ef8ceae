#!/usr/bin/env python3
"""Open a ``dvpipe run --report`` page in a real headless browser and check that it renders.

Usage::

    python tools/check_report_html.py out/report.html [--screenshot shot.png] [--chromium PATH]

Chromium (Debian: ``apt-get install -y chromium``) is started headless, sandbox-less and offline-ish
(no background networking, no component updates, no sync, a fresh profile folder), twice: once to
dump the DOM after load, once to take a screenshot. The check passes when

* the DOM holds the report's sections (run line, frame account, latency table, plots, plan) and
  the plot images as ``data:image/png`` URIs, and
* the screenshot is not blank and shows the plots' colours (matplotlib's tab10 blue, the first
  camera's bars, in at least 0.02% of the pixels): the embedded PNGs were decoded and drawn.

Exit status 0 when it passes, 1 with one line per failure otherwise, 2 when chromium is missing.
The reference here is the browser and the pixels, not dvpipe: nothing of dvpipe is imported.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SECTIONS = ('id="run-line"', 'id="account"', 'id="latency"', 'id="plots"', 'id="plan"')
TAB10_BLUE_RGB = (31, 119, 180)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--disable-dev-shm-usage", "--mute-audio"]


def find_chromium(explicit: str | None = None) -> str | None:
    for name in ([explicit] if explicit else []) + ["chromium", "chromium-browser", "google-chrome"]:
        path = shutil.which(name) if name and not os.path.isabs(name) else name
        if path and os.path.exists(path):
            return path
    return None


def _chromium(binary: str, args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="dvpipe-chromium-") as profile:
        cmd = [binary, *FLAGS, f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)


def check(report: Path, screenshot: Path, binary: str, timeout_s: float = 90.0) -> list[str]:
    """Failures (empty: the page rendered); writes the screenshot to ``screenshot``."""
    import cv2
    import numpy as np

    if not report.is_file():
        return [f"{report}: no such file"]
    url = report.resolve().as_uri()
    problems = []
    dom = _chromium(binary, ["--dump-dom", "--virtual-time-budget=5000", url], timeout_s)
    if dom.returncode != 0 or "<html" not in dom.stdout:
        return [f"chromium --dump-dom failed (rc {dom.returncode}): {dom.stderr.strip().splitlines()[-1:]}"]
    for marker in SECTIONS:
        if marker not in dom.stdout:
            problems.append(f"the DOM has no {marker}")
    n_png = dom.stdout.count('src="data:image/png;base64,')
    if n_png < 4:
        problems.append(f"the DOM has {n_png} embedded PNG plots, expected 4")
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    shot = _chromium(binary, [f"--screenshot={screenshot}", "--window-size=1280,4200",
                              "--virtual-time-budget=5000", url], timeout_s)
    img = cv2.imread(str(screenshot)) if screenshot.exists() else None
    if shot.returncode != 0 or img is None:
        return problems + [f"chromium --screenshot failed (rc {shot.returncode})"]
    if float(img.std()) < 5.0:
        problems.append(f"the screenshot is blank (pixel std {img.std():.1f})")
    b, g, r = (img[..., i].astype(int) for i in range(3))
    blue = (abs(r - TAB10_BLUE_RGB[0]) < 12) & (abs(g - TAB10_BLUE_RGB[1]) < 12) & (abs(b - TAB10_BLUE_RGB[2]) < 12)
    share = float(np.mean(blue))
    if share < 0.0002:
        problems.append(f"no plot colours in the screenshot ({100 * share:.3f}% tab10-blue pixels): "
                        "the embedded plots were not drawn")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("report", type=Path)
    p.add_argument("--screenshot", type=Path, default=None, help="where to write the screenshot (PNG)")
    p.add_argument("--chromium", default=None, help="browser binary (default: chromium on PATH)")
    a = p.parse_args(argv)
    binary = find_chromium(a.chromium)
    if binary is None:
        print("check_report_html: chromium not found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    shot = a.screenshot or a.report.with_suffix(".png")
    problems = check(a.report, shot, binary)
    for msg in problems:
        print(f"check_report_html: {msg}", file=sys.stderr)
    if not problems:
        print(f"check_report_html: {a.report} renders in {Path(binary).name}; screenshot {shot}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
