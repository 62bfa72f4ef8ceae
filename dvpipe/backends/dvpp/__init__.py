"""The Ascend DVPP backend (family ``dvpp``): JPEGD, VPC and VDEC through pyACL, on a device or on the
software DVPP device.

Backend names: ``dvpp`` runs on the local Ascend device (pyACL, the target detected or given);
``dvpp-sim`` runs the same code against :class:`~dvpipe.backends.dvpp.sim.SimAcl`, a software device
that enforces the documented rules of the pipeline's ``target``::

    pipe = dvpipe.Pipeline.from_profile("bevformer-tiny", rig, backends=("dvpp-sim", "cpu"), fidelity="fast",
                                        target=dvpipe.Target(soc="Ascend310", cann="6.0.1"))

Kernels (one function, :func:`_kernel`, registered for each run of ops; the verdicts come from
:func:`.support.plan_step`, which consults the knowledge base for every unit call and takes the
documented detours):

* ``decode`` — JPEGD (JPEG) or VDEC (H.264/H.265) to NV12 in DVPP memory (VPC colour conversion to
  BGR888 where the product documents it and a host consumer follows);
* ``decode+resize``, ``decode+crop``, ``decode+crop+resize``, ``decode+resize+crop`` — the decoder and
  the VPC calls queued on one stream with one synchronisation (fused decode-resize), crops before a
  resize as the VPC crop box, crops after it sliced from the host copy;
* ``transfer`` (``dvpp.download``) — the host route's explicit, timed device -> host step: the picture
  downloaded from its strides, NV12 -> BGR on the host (BT.601, the camera's range), host crop.

The step's output stays on the DVPP device (placement ``dvpp-sim:0`` / ``dvpp-hw:0``): a
:class:`~dvpipe.device.DeviceTensor`. The planner decides who reads it (docs/device_path.md): the AIPP
route (:mod:`.route`, whose per-batch NV12 buffer the last VPC call writes into), a ``torch:npu`` step
(one device-to-device copy), or a host backend through the ``transfer`` step. Device memory comes from a
pool (:mod:`.pool`); nothing is allocated per frame after the first ones. Each step records device spans
(enqueue to stream sync) and its transfers (``h2d``: the encoded bytes, ``d2d``, ``d2h``: with their
bytes) on the frame's timeline.

Only :mod:`._acl` touches pyACL. ``available()`` says why the backend cannot run (no pyACL, no target).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...device import DeviceTensor
from ...stages.kernel_registry import KernelContext, KernelVerdict, register_kernel
from . import _acl, jpegd, vdec, vpc
from .colour import camera_colour_standard
from .placement import device_output, picture_layout, program_for_output
from .pool import BufferPool, pool_for
from .support import TOLERANCES, DvppDecode, Program, StepRefused, accepts_unknown, plan_step, supports
from .vpc import StepState

__all__ = ["available", "plan_step", "Program", "DvppDecode", "StepRefused", "TOLERANCES", "BufferPool",
           "pool_for", "step_state", "close_state", "close_states", "OPS", "device_output", "program_for_output",
           "picture_layout"]

#: the runs of ops the DVPP kernel covers (longest first is the planner's business)
OPS = (("decode",), ("decode", "crop"), ("decode", "resize"), ("decode", "crop", "resize"),
       ("decode", "resize", "crop"))


def available(ref: Any, target: Any = None) -> KernelVerdict:
    """Whether ``ref`` (``dvpp`` or ``dvpp-sim``) can run here for ``target``, and why not."""
    if ref.device == "sim":
        if target is None:
            return KernelVerdict("unavailable", "dvpp-sim simulates one deployment target: pass "
                                                "target=dvpipe.Target(soc=..., cann=...)")
        return KernelVerdict.yes(f"software DVPP device simulating {target}")
    why = _acl.why_unavailable("hw")
    if why:
        return KernelVerdict("unavailable", why)
    try:
        rt = _acl.runtime("hw", target)
        soc = rt.soc_name()
    except Exception as e:  # noqa: BLE001 - any failure to open the device is the reason
        return KernelVerdict("unavailable", f"cannot open the Ascend device: {e}")
    if target is not None and soc and soc != target.soc:
        return KernelVerdict("unavailable", f"the device reports SoC {soc}, the target is {target.soc}; plan for the "
                                            "device (target=dvpipe.probe.detect_target()) or use dvpp-sim")
    return KernelVerdict.yes(f"Ascend device {soc}")


def _target(ctx: KernelContext, stages: tuple) -> Any:
    """The plan's target (a step planned without one was refused by :func:`.support.plan_step`)."""
    return getattr(ctx, "target", None) or getattr(stages[0], "target", None)


def step_state(ctx: KernelContext, stages: tuple) -> StepState:
    """The per-camera state of a DVPP step (opened on the first frame, kept in ``ctx.state``; released by
    :func:`close_state`)."""
    st = ctx.state.get("dvpp")
    if st is not None and st.closed:
        st = None
    if st is None:
        target = _target(ctx, stages)
        accept = accepts_unknown() or ctx.verified
        verdict, prog = plan_step(stages, ctx.spec_in, ctx.camera, target, "fast", accept)
        if prog is None:
            raise StepRefused(verdict.reason)
        prog = program_for_output(prog, ctx.spec_out)
        # a step verified on this device runs with the layouts it was verified with, on every frame and
        # thread (not only under the verification's thread-local accepting_unknown)
        st = StepState.open(ctx.backend.device, target, prog, ctx.camera.name, accept_unknown=accept,
                            colour_standard=camera_colour_standard(ctx.camera))
        st.extra["codec"] = ctx.spec_in.encoding
        ctx.state["dvpp"] = st
    return st


def close_state(state: dict) -> None:
    """Release the DVPP resources a kernel state dict holds (the pipeline's teardown hook; see
    :meth:`.vpc.StepState.close` for the order). Safe to call twice and on states of other backends."""
    st = state.pop("dvpp", None) if isinstance(state, dict) else None
    if st is not None:
        st.close()


def close_states(states: Any) -> None:
    """:func:`close_state` for every state dict of an iterable (``Pipeline._states.values()``)."""
    for state in list(states):
        close_state(state)


def _kernel(data: Any, stages: tuple, ctx: KernelContext):
    st = step_state(ctx, stages)
    with st.runtime.bound():  # dvpipe's context for the frame's calls, the caller's again after them
        if st.program.source == "jpegd":
            return jpegd.run(st, data, ctx)
        return vdec.run(st, data, ctx)


for _ops in OPS:
    register_kernel(_ops, backend="dvpp", supports=supports, unit="dvpp", name="dvpp." + "+".join(_ops))(_kernel)


def _supports_download(q: Any) -> KernelVerdict:
    return KernelVerdict.yes("device -> host: download + NV12 -> BGR on the host")


@register_kernel("transfer", backend="dvpp", supports=_supports_download, unit="dvpp", name="dvpp.download")
def _download(data: Any, stages: tuple, ctx: KernelContext):
    """The host route's transfer step: a picture :class:`~dvpipe.device.DeviceTensor` -> ``H x W x 3`` uint8
    BGR on the host (download from its strides, BT.601 conversion of NV12, host crop). Host pixels (a
    frame the DVPP step's runtime fallback produced on the CPU) pass through: nothing to move."""
    if not isinstance(data, DeviceTensor):
        return np.asarray(data)
    scratch = ctx.state.setdefault("download", {})
    h, w = data.shape[1], data.shape[2]
    buf = scratch.get("out")
    if buf is None or buf.shape != (h, w, 3):
        buf = scratch["out"] = np.empty((h, w, 3), np.uint8)
    try:
        out = vpc.tensor_to_host(data, scratch, out=buf)
    finally:
        done = data.meta.get("release")
        if done is not None:
            done()  # the picture was read: its buffer goes back to the pool now
    ctx.moved = ("device_to_host", int(data.nbytes))
    return out
