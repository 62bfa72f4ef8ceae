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

* ``decode`` — JPEGD (JPEG) or VDEC (H.264/H.265) to NV12, then to host BGR uint8 (VPC colour
  conversion where the product writes BGR888, else on the host);
* ``decode+resize``, ``decode+crop``, ``decode+crop+resize``, ``decode+resize+crop`` — the decoder and
  the VPC calls queued on one stream with one synchronisation (fused decode-resize), crops before a
  resize as the VPC crop box, crops after it sliced from the host copy.

The step's output is what the next stage expects from a decode: ``H x W x 3`` uint8 BGR on the host.
Everything after (normalise, pad, batch) runs on the next backend, e.g. ``cpu``. Device memory comes
from a pool (:mod:`.pool`); nothing is allocated per frame after the first ones. Each step records
device spans (enqueue to stream sync) on the frame's timeline.

Only :mod:`._acl` touches pyACL. ``available()`` says why the backend cannot run (no pyACL, no target).
"""
from __future__ import annotations

from typing import Any

from ...stages.registry import KernelContext, Verdict, register_kernel
from . import _acl, jpegd, vdec
from .pool import BufferPool, pool_for
from .support import TOLERANCES, DvppDecode, Program, StepRefused, accepts_unknown, plan_step, supports
from .vpc import StepState

__all__ = ["available", "plan_step", "Program", "DvppDecode", "StepRefused", "TOLERANCES", "BufferPool",
           "pool_for", "step_state", "close_state", "close_states", "OPS"]

#: the runs of ops the DVPP kernel covers (longest first is the planner's business)
OPS = (("decode",), ("decode", "crop"), ("decode", "resize"), ("decode", "crop", "resize"),
       ("decode", "resize", "crop"))


def available(ref: Any, target: Any = None) -> Verdict:
    """Whether ``ref`` (``dvpp`` or ``dvpp-sim``) can run here for ``target``, and why not."""
    if ref.device == "sim":
        if target is None:
            return Verdict("unavailable", "dvpp-sim simulates one deployment target: pass "
                                          "target=dvpipe.Target(soc=..., cann=...)")
        return Verdict.yes(f"software DVPP device simulating {target}")
    why = _acl.why_unavailable("hw")
    if why:
        return Verdict("unavailable", why)
    try:
        rt = _acl.runtime("hw", target)
        soc = rt.soc_name()
    except Exception as e:  # noqa: BLE001 - any failure to open the device is the reason
        return Verdict("unavailable", f"cannot open the Ascend device: {e}")
    if target is not None and soc and soc != target.soc:
        return Verdict("unavailable", f"the device reports SoC {soc}, the target is {target.soc}; plan for the "
                                      "device (target=dvpipe.Target.detect()) or use dvpp-sim")
    return Verdict.yes(f"Ascend device {soc}")


def _target(ctx: KernelContext, stages: tuple) -> Any:
    target = getattr(ctx, "target", None) or getattr(stages[0], "target", None)
    if target is None and ctx.backend.device == "hw":
        from ...target import Target

        target = Target.detect()
    return target


def step_state(ctx: KernelContext, stages: tuple) -> StepState:
    """The per-camera state of a DVPP step (opened on the first frame, kept in ``ctx.state``; released by
    :func:`close_state`)."""
    st = ctx.state.get("dvpp")
    if st is not None and st.closed:
        st = None
    if st is None:
        target = _target(ctx, stages)
        verdict, prog = plan_step(stages, ctx.spec_in, ctx.camera, target, "fast", accepts_unknown()
                                  or _verified_here(ctx, stages, target))
        if prog is None:
            raise StepRefused(verdict.reason)
        st = StepState.open(ctx.backend.device, target, prog, ctx.camera.name)
        st.extra["codec"] = ctx.spec_in.encoding
        ctx.state["dvpp"] = st
    return st


def _verified_here(ctx: KernelContext, stages: tuple, target: Any) -> bool:
    """Whether a measurement on this device (the live cache) verified this step (device ``hw`` only)."""
    if ctx.backend.device != "hw" or target is None:
        return False
    try:
        from ...probe.live import measured_ok

        return measured_ok(ctx.camera, stages, ctx.spec_in, "dvpp." + "+".join(s.op for s in stages), target)
    except Exception:  # noqa: BLE001 - a broken cache never breaks a step
        return False


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
    if st.program.source == "jpegd":
        return jpegd.run(st, data, ctx)
    return vdec.run(st, data, ctx)


for _ops in OPS:
    register_kernel(_ops, backend="dvpp", supports=supports, unit="dvpp", name="dvpp." + "+".join(_ops))(_kernel)
