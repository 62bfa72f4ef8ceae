"""What runs where: the environment report and the per-camera, per-step DVPP probe.

``detect()`` reports this machine (read-only, never raising), ``detect_target()`` its deployment target; ``build_report(rig, target)`` plans
every camera against a DVPP target and explains each step (``dvpipe probe`` prints it).
"""
from .environment import EnvironmentReport, detect, detect_target
from .report import ProbeReport, build_report

__all__ = ["detect", "detect_target", "EnvironmentReport", "build_report", "ProbeReport"]
