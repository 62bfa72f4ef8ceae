"""Read-only environment detection: what this machine can run, and why not.

Nothing here raises: every item is reported as available with its version/details, or unavailable
with the reason. Nothing is installed, initialised on a device longer than needed, or written.

Sources for the Ascend paths (constraints.md §7):
- CANN <= 8.3: ``<install>/ascend-toolkit/latest/<arch>-linux/ascend_toolkit_install.info``
  (``<install>`` = ``/usr/local/Ascend`` for root, ``$HOME/Ascend`` otherwise; 5.0.4 wrote ``arm64``);
  NNRT: ``nnrt/latest/<arch>-linux/ascend_nnrt_install.info``; NNAE: ``nnae/latest/ascend_nnae_install.info``.
- CANN >= 8.5: ``<install>/cann/<arch>-linux/ascend_toolkit_install.info``.
- ``$ASCEND_HOME_PATH`` / ``$ASCEND_TOOLKIT_HOME`` (set by set_env.sh; names not verified in the docs).
- SoC: ``acl.get_soc_name()`` after ``acl.init()``; else ``npu-smi info``.
"""
from __future__ import annotations

import importlib
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import ConfigError
from ..knowledge import find_soc_name  # the SoC names and patterns of families.yaml, one regex
from ..target import Target

__all__ = ["Item", "EnvironmentReport", "detect", "detect_target", "find_cann_version", "detect_soc"]


@dataclass
class Item:
    """One line of the report: ``name``, ``ok``, and ``detail`` (version or the reason it is unavailable)."""

    name: str
    ok: bool
    detail: str


@dataclass
class EnvironmentReport:
    items: list[Item] = field(default_factory=list)
    cann_version: Optional[str] = None
    cann_source: Optional[str] = None
    soc: Optional[str] = None

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.items.append(Item(name, ok, detail))

    def to_dict(self) -> dict:
        return {"cann_version": self.cann_version, "cann_source": self.cann_source, "soc": self.soc,
                "items": [asdict(i) for i in self.items]}

    def __str__(self) -> str:
        width = max(len(i.name) for i in self.items) if self.items else 0
        lines = ["environment:"]
        for i in self.items:
            lines.append(f"  {i.name.ljust(width)}  {'yes' if i.ok else 'no '}  {i.detail}")
        return "\n".join(lines)


def _arches() -> list[str]:
    m = platform.machine().lower()
    primary = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(m, m)
    return [primary] + (["arm64"] if primary == "aarch64" else [])


def _install_roots(env: dict) -> list[str]:
    roots = []
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        if env.get(var):
            roots.append(env[var])
    roots += ["/usr/local/Ascend", os.path.join(env.get("HOME", os.path.expanduser("~")), "Ascend")]
    return list(dict.fromkeys(roots))


def candidate_info_files(env: Optional[dict] = None) -> list[str]:
    """Install-info paths to look at, most specific first (both the pre-8.5 and the 8.5+ layouts)."""
    env = dict(os.environ if env is None else env)
    out = []
    for root in _install_roots(env):
        for arch in _arches():
            out += [
                os.path.join(root, "cann", f"{arch}-linux", "ascend_toolkit_install.info"),                   # >= 8.5
                os.path.join(root, "ascend-toolkit", "latest", f"{arch}-linux", "ascend_toolkit_install.info"),  # <= 8.3
                os.path.join(root, "nnrt", "latest", f"{arch}-linux", "ascend_nnrt_install.info"),
            ]
            # $ASCEND_HOME_PATH may already point at .../latest or .../cann
            out.append(os.path.join(root, f"{arch}-linux", "ascend_toolkit_install.info"))
        out.append(os.path.join(root, "nnae", "latest", "ascend_nnae_install.info"))
    return list(dict.fromkeys(out))


def find_cann_version(env: Optional[dict] = None) -> tuple[Optional[str], str]:
    """``(version, where)`` from the first install-info file with a ``version=`` line, else ``(None, why)``."""
    looked = candidate_info_files(env)
    found = read_version_file(looked, r"\s*version\s*=\s*(\S+)")
    return found or (None, f"no CANN install-info file found (looked at {len(looked)} paths, e.g. {looked[0]})")


def read_version_file(paths, pattern: str) -> Optional[tuple[str, str]]:
    """``(value, path)`` of the first line matching ``pattern`` (one group) in the first readable file."""
    for path in paths:
        try:
            with open(path, "r", encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = re.match(pattern, line)
                    if m:
                        return m.group(1), path
        except OSError:
            continue
    return None


def _run(cmd: list[str], timeout: float = 5.0) -> Optional[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _board_soc_name(text: str) -> Optional[str]:
    """The SoC name of ``npu-smi info -t board`` output, ``<Chip Name>_<NPU Name>`` (constraints.md §7, from
    CANN 8.3.RC1 / 8.5.0 atlasatcparam_16_0035 / 0036: e.g. ``Ascend910_9391``), when dvpipe knows it."""
    from ..knowledge.socs import known_soc_name

    fields = dict(re.findall(r"^\s*(Chip Name|NPU Name)\s*:\s*(\S+)\s*$", text, re.M))
    chip, npu = fields.get("Chip Name"), fields.get("NPU Name")
    if not chip or not npu:
        return None
    return known_soc_name(f"{chip}_{npu}", f"Ascend{chip}_{npu}")


def detect_soc() -> tuple[Optional[str], str]:
    """``(soc_name, how)`` via pyACL, else npu-smi; ``(None, why)`` when neither answers."""
    reasons = []
    try:
        # through the DVPP backend's runtime: the only module that touches acl; it stays initialised for
        # the run that follows (some CANN releases refuse acl.init after acl.finalize)
        from ..backends.dvpp._acl import runtime, why_unavailable

        why = why_unavailable("hw")
        if why:
            reasons.append(why)
        else:
            name = runtime("hw").soc_name()
            if name:
                return str(name), "acl.get_soc_name()"
            reasons.append(f"acl.get_soc_name() returned {name!r}")
    except Exception as e:  # noqa: BLE001 - report, never raise
        reasons.append(f"pyACL call failed: {type(e).__name__}: {e}")
    if shutil.which("npu-smi"):
        out = _run(["npu-smi", "info"]) or ""
        name = find_soc_name(out)
        if name == "Ascend910":  # also how Atlas A3 chips show: their SoC name is <Chip Name>_<NPU Name>
            board = _board_soc_name(_run(["npu-smi", "info", "-t", "board", "-i", "0", "-c", "0"]) or "")
            if board:
                return board, "npu-smi info -t board"
            reasons.append("npu-smi info names Ascend910, as it does Atlas A3 chips, and npu-smi info -t board gave "
                           "no <Chip Name>_<NPU Name> dvpipe knows: acl.get_soc_name() tells them apart")
        elif name:
            return name, "npu-smi info"
        else:
            reasons.append("npu-smi info printed no SoC name that dvpipe knows (dvpipe/knowledge/data/families.yaml)")
    else:
        reasons.append("npu-smi not on PATH")
    return None, "; ".join(reasons)


def detect_target() -> Optional[Target]:
    """The local deployment target (SoC from :func:`detect_soc`, CANN from :func:`find_cann_version`), or None
    when no Ascend SoC or CANN install is found (never raises)."""
    soc, _how = detect_soc()
    cann, _where = find_cann_version()
    if not soc or not cann:
        return None
    try:
        return Target(soc, cann)
    except ConfigError:
        return None


def _version_of(module: str) -> tuple[bool, str]:
    try:
        mod = importlib.import_module(module)
        return True, str(getattr(mod, "__version__", "installed"))
    except Exception as e:  # noqa: BLE001
        return False, f"not importable ({type(e).__name__}: {e})"


def detect(probe_soc: bool = True) -> EnvironmentReport:
    """Build the environment report (read-only; never raises)."""
    rep = EnvironmentReport()
    rep.add("python", True, f"{sys.version.split()[0]} on {platform.machine()} {platform.system()}")
    ok, v = _version_of("numpy")
    rep.add("numpy", ok, v)
    try:
        import cv2

        jpeg = re.search(r"JPEG:\s*(.+)", cv2.getBuildInformation())
        rep.add("opencv", True, f"{cv2.__version__}; JPEG {jpeg.group(1).strip() if jpeg else 'unknown'}; "
                                f"{cv2.getNumThreads()} threads")
    except Exception as e:  # noqa: BLE001
        rep.add("opencv", False, f"not importable ({e})")
    try:
        from ..backends import cpu as cpu_backend

        native = cpu_backend._native
        rep.add("cpu_kernel", native is not None,
                f"compiled normalise kernel built ({Path(native.__file__).name})" if native is not None
                else f"{cpu_backend.NATIVE_REASON}; the CPU backend uses its OpenCV path (~1.8x slower conversion)")
    except Exception as e:  # noqa: BLE001
        rep.add("cpu_kernel", False, f"CPU backend not importable ({e})")
    try:
        import av

        decoders = [c for c in ("h264", "hevc", "mjpeg") if c in av.codecs_available]
        rep.add("pyav", True, f"{av.__version__}; FFmpeg decoders: {', '.join(decoders) or 'none'}")
    except Exception as e:  # noqa: BLE001
        rep.add("pyav", False, f"not importable ({e})")
    try:
        torch = importlib.import_module("torch")
        rep.add("torch", True, torch.__version__)
        if torch.cuda.is_available():
            rep.add("cuda", True, f"{torch.cuda.device_count()} device(s): {torch.cuda.get_device_name(0)}")
        else:
            rep.add("cuda", False, "torch reports no CUDA device" + ("" if torch.version.cuda else " (CPU-only torch build)"))
        ok, v = _version_of("torchvision")
        rep.add("torchvision", ok, v)
    except Exception as e:  # noqa: BLE001
        rep.add("torch", False, f"not importable ({type(e).__name__}: {e}); pip install 'dvpipe[torch]'")
        rep.add("cuda", False, "needs torch")
    ok, v = _version_of("torch_npu")
    rep.add("torch_npu", ok, v if ok else v + "; on a machine with CANN: pip install 'dvpipe[npu]' "
            "'torch-npu==<your torch major.minor>.*' (README \"On an Ascend host\")")
    from ..backends.dvpp._acl import why_unavailable

    why = why_unavailable("hw")
    rep.add("pyacl", why is None, "importable" if why is None else why)
    version, where = find_cann_version()
    rep.cann_version, rep.cann_source = version, where if version else None
    rep.add("cann", version is not None, f"{version} ({where})" if version else where)
    if probe_soc:
        soc, how = detect_soc()
        rep.soc = soc
        rep.add("soc", soc is not None, f"{soc} ({how})" if soc else how)
    return rep
