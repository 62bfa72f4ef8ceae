"""Where DVPP steps leave their pictures and who reads them: the ``dvpp`` and ``aipp`` families' planner hooks.

The planner asks the rows of the backend table (:class:`dvpipe.backends.BackendFamily`) and names no family;
these are the DVPP device's answers:

* :func:`place_outputs` -- after a camera's steps are chosen, each DVPP decode step gets the spec of what it
  really hands on: NV12 in DVPP memory (``dvpp-sim:0`` / ``dvpp-hw:0``) when the next step reads DVPP
  memory itself (the AIPP route, a ``torch:npu`` step: :func:`reads_dvpp`), without the VPC colour
  conversion; else the BGR picture the host holds after the download (VPC's BGR888 where the product
  documents the conversion, else NV12 converted on the host).
* :func:`transfer` -- the steps a consumer of DVPP memory needs: none for the AIPP route and ``torch:npu``
  (the copy is inside their step), the timed ``dvpp.download`` step for a host consumer, and a plan error
  for any other device.
* :func:`route`, :func:`batch_conflict`, :func:`describe_batch` -- the AIPP route: the camera's route word,
  why the per-batch device buffer cannot hold every camera (the planner then plans the host batch), and
  the buffer's line in ``print(plan)``. The buffer itself is :func:`.route.batch_layout`.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

import numpy as np

from ...errors import PlanError
from ...planner import PlanStep
from ...stages.base import FrameSpec
from ...stages.image import Transfer
from ...stages.kernel_registry import KernelVerdict, kernels_at
from ...types import Camera, PixelFormat
from .. import resolve
from . import vpc
from .support import Program, plan_step

__all__ = ["reads_dvpp", "device_output", "program_for_output", "picture_layout", "place_outputs", "transfer",
           "route", "batch_conflict", "describe_batch"]


def reads_dvpp(ref: Any) -> bool:
    """Whether ``ref``'s kernels read DVPP device memory themselves (no transfer step before them): the AIPP
    route, and ``torch:npu`` (one device-to-device copy inside its step)."""
    return ref.family == "aipp" or (ref.family == "torch" and ref.device.startswith("npu"))


def program_for_output(prog: Program, spec_out: Any) -> Program:
    """The program for the step's planned output: a consumer reading NV12 on the device (AIPP, torch_npu)
    gets the decoder/VPC NV12 as it is -- no VPC colour conversion to BGR888."""
    if getattr(spec_out, "pixel_format", None) is PixelFormat.NV12 and any(op.kind == "csc" for op in prog.ops):
        return dataclasses.replace(prog, ops=tuple(op for op in prog.ops if op.kind != "csc"),
                                   host_csc="limited" if prog.source == "vdec" else "full")
    return prog


def device_output(step: Any, camera: Any, target: Any, nv12: bool) -> tuple[Any, Optional[Program], str]:
    """What a planned DVPP step hands on in device memory: ``(spec, program, why_not)``.

    ``nv12``: the consumer reads NV12 (AIPP, torch_npu): the spec is NV12 on the step's placement; for a
    host consumer it stays the decode's BGR spec (what the host holds after the transfer step). ``why_not``
    is non-empty when the picture cannot go to an NV12 consumer as planned (a crop after the last resize is
    a slice of the host copy)."""
    _v, prog = plan_step(step.stages, step.spec_in, camera, target, "fast", True)
    spec = step.spec_out
    if prog is None:
        return spec, None, ""
    if nv12:
        prog = program_for_output(prog, spec.with_(pixel_format=PixelFormat.NV12))
    why = ""
    if nv12 and prog.host_crop is not None:
        why = (f"the DVPP step crops {prog.host_crop[2]}x{prog.host_crop[3]} after its last resize from the host "
               "copy; a device consumer would read the uncropped picture")
    if nv12:
        spec = spec.with_(pixel_format=PixelFormat.NV12, channel_order="", dtype="uint8")
    # for a host consumer the spec stays the decode's (BGR, as the host sees it after the transfer step);
    # what the picture is in device memory (NV12, or BGR888 where VPC converts) is the transfer's business
    return spec, prog, why


def picture_layout(prog: Program, target: Any) -> tuple[str, str, tuple[int, int], tuple[int, int], int]:
    """``(unit, fmt, (height, width), (width_stride, height_stride), nbytes)`` of the picture a program's last
    call writes (the documented stride for the target; nbytes with the padding). ``prog`` is a planned
    step's program: a layout the docs leave open is the one the step runs with (see :func:`.vpc.layout`)."""
    last = prog.ops[-1] if prog.ops else None
    unit = "vpc" if last is not None else prog.source
    fmt = last.out_fmt if last is not None else "nv12"
    h, w = last.out_size if last is not None else prog.decode_size
    st = vpc.layout(target, unit, fmt, w, h, accept_unknown=True)
    ws, hs = int(st.width_stride), int(st.height_stride)
    return unit, fmt, (h, w), (ws, hs), ws * hs * 3 // 2 if fmt == "nv12" else ws * hs


def place_outputs(steps: list[PlanStep], cam: Camera, target: Any) -> tuple[list[PlanStep], str]:
    """Give every DVPP step the spec of what it really hands on (NV12 or BGR888 in DVPP memory) and its
    consumer the same input spec. Returns the steps and, when a device consumer cannot read the picture as
    planned, why (the planner then re-plans without that route)."""
    why = ""
    for k, step in enumerate(steps):
        if step.backend.family != "dvpp" or step.stages[0].op != "decode":
            continue
        nxt = steps[k + 1] if k + 1 < len(steps) else None
        nv12 = nxt is not None and reads_dvpp(nxt.backend)
        spec, prog, problem = device_output(step, cam, target, nv12)
        if problem:
            why = why or f"camera {cam.name}: {problem}"
        verdicts = list(step.verdicts)
        if nv12 and prog is not None:
            assert nxt is not None  # nv12 implies a next step
            b, v = verdicts[-1]
            reason = re.sub(r"; (VPC colour conversion -> BGR888 \d+x\d+|NV12 -> BGR on the host \([^)]*\))", "",
                            v.reason)
            verdicts[-1] = (b, dataclasses.replace(v, reason=f"{reason}; hands on NV12 in {spec.placement} to "
                                                           f"{nxt.backend.name} (no VPC colour conversion)"))
        hands_on = "NV12" if prog is None or nv12 or prog.host_csc else "BGR888"
        steps[k] = step = dataclasses.replace(step, spec_out=spec, verdicts=verdicts, hands_on=hands_on)
        if nxt is not None:
            nbytes = picture_layout(prog, target)[4] if prog is not None else None
            changes: dict = {"spec_in": spec}
            if nv12 and nxt.backend.family == "aipp":
                changes["fallback"] = []  # the AIPP batch buffer is device memory: no host kernel writes it
                changes["spec_out"] = nxt.spec_out.with_(dtype="float16")  # what AIPP feeds the model
            steps[k + 1] = nxt = dataclasses.replace(nxt, **changes)
            if not reads_dvpp(nxt.backend) and nbytes is not None:
                step.transfer = ("device_to_host", nbytes)  # moved onto the download step by transfer()
    return steps, why


def _download_step(spec_in: FrameSpec, picture: str = "NV12") -> PlanStep:
    """The host route's explicit device -> host step after a DVPP step: download + NV12 -> BGR on the host
    (``picture`` NV12), or BGR888 rows cropped from their stride."""
    ref = resolve("dvpp-sim" if spec_in.placement.startswith("dvpp-sim") else "dvpp")
    kernels = kernels_at(("transfer",), "dvpp")
    if not kernels:
        raise PlanError(f"no DVPP transfer kernel to copy {spec_in.placement} -> host (dvpipe.backends.dvpp not loaded)")
    t_out = spec_in.with_(placement="host", pixel_format=PixelFormat.BGR, dtype="uint8", channel_order="bgr")
    what = "BGR888 rows" if picture == "BGR888" else "NV12 -> BGR on the host"
    return PlanStep((Transfer(placement="host"),), kernels[0], ref, spec_in, t_out,
                    [(ref.name, KernelVerdict.yes(f"{spec_in.placement} -> host: download, {what}"))], np.eye(3))


def transfer(step: PlanStep, previous: Optional[PlanStep]) -> tuple[list[PlanStep], PlanStep]:
    """The steps before ``step`` when it reads DVPP memory from elsewhere (or writes DVPP memory from the host).

    DVPP memory is read in place by the AIPP route and by ``torch:npu`` steps (a device-to-device copy inside
    the step, timed there); a host consumer gets the ``dvpp.download`` step, which takes over the bytes the
    DVPP step announced (:func:`place_outputs`)."""
    src, dst = step.spec_in.placement, step.backend.placement
    if not src.startswith("dvpp-"):
        raise PlanError(f"{step.name} on {step.backend.name} reads from {src}, and no backend copies {src} -> {dst}")
    if reads_dvpp(step.backend):
        return [], step
    if dst != "host":
        raise PlanError(f"{step.name} on {step.backend.name} reads from {src}; dvpipe copies DVPP memory to "
                        "the host or to an NPU only")
    t = _download_step(step.spec_in, previous.hands_on if previous is not None else "NV12")
    if previous is not None and previous.transfer is not None and previous.backend.family == "dvpp":
        t.transfer, previous.transfer = previous.transfer, None
    return [t], dataclasses.replace(step, spec_in=t.spec_out)


def route(steps: list[PlanStep]) -> str:
    """``aipp`` when the camera's batch step is the AIPP route, ``torch_npu`` when a ``torch:npu`` batch reads
    a DVPP step's picture, else "" (the host route)."""
    last = steps[-1].backend
    if last.family == "aipp":
        return "aipp"
    if last.family == "torch" and last.device.startswith("npu") and any(s.backend.family == "dvpp" for s in steps):
        return "torch_npu"
    return ""


def batch_conflict(cam_plans: list) -> str:
    """Why the AIPP route cannot hold this plan's batch (empty when it can, or is not used)."""
    on_aipp = [cp for cp in cam_plans if cp.steps[-1].backend.family == "aipp"]
    if not on_aipp:
        return ""
    for cp in cam_plans:
        if cp.route_problem:
            return f"{cp.route_problem}; the batch has one placement, so every camera uses the host batch"
    off = [cp for cp in cam_plans if cp.steps[-1].backend.family != "aipp"]
    if off:
        cp = off[0]
        first = cp.steps[0]
        why = "; ".join(f"{b}: {v.reason}" for b, v in first.verdicts[:-1]) or f"{first.name} runs on {first.backend.name}"
        return (f"camera {cp.camera.name} reaches the batch on {cp.steps[-1].backend.name} ({why}); the batch has one "
                "placement, so every camera uses the host batch")
    return ""


def describe_batch(b: dict) -> str:
    """The AIPP route's batch buffer in one line (``print(plan)``)."""
    return (f"batch buffer: {b['n']} x NV12 {b['width']}x{b['height']} at stride {b['strides'][0]}x"
            f"{b['strides'][1]} ({b['slot_bytes']} bytes a camera, {b['pitch']} apart) on {b['placement']}; "
            f"the model's AIPP ({b['colour_standard']}) makes the (N, 3, H, W) float16 input")
