"""Every registered kernel against the reference backend (``check_kernel``, tests/kernel_check.py).

The parametrisation is the kernel registry itself after importing every backend family module that
loads here (cpu, reference, torch on the CPU, dvpp and aipp on the software DVPP device): a kernel
registered in one of them is checked without touching this file. Each kernel runs on crops of real
sample photos at odd, prime and even sizes, at both fidelities; what it accepts must match the reference
within the bound of tests/tolerances.py, what it refuses it must refuse with a reason.

A toy kernel registered from this file shows that a user's kernel is checked the same way, and that a
wrong one fails. A defect this check finds is pinned by a test of its own below (a strict ``xfail`` while it is
open, so that fixing it flips the test).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import dvpipe as dv
import kernel_check as kc
from dvpipe.stages.kernel_registry import KernelContext, KernelVerdict, register_kernel

LOADED = kc.load_all_families()
KERNELS = kc.registered_kernels()

#: kernels that refuse every case here, and why (each refusal still has to carry a reason)
REFUSE_ALL_HERE = {
    # decode-into-the-slot for video encodings; a JPEG goes through the DCT-scaled run (decode, resize first).
    # Their video path is tested in tests/video/test_yuv_path.py.
    "cpu:decode+normalise+batch:fused_decode_normalise_batch": "video encodings only",
    "cpu:decode+normalise+pad+batch:fused_decode_normalise_pad_batch": "video encodings only",
    "cpu:decode+normalise+resize+batch:fused_decode_normalise_resize_batch": "video encodings only",
    "cpu:decode+normalise+resize+pad+batch:fused_decode_normalise_resize_pad_batch": "video encodings only",
}


def _torchvision_missing() -> bool:
    try:
        import torchvision  # noqa: F401
    except ImportError:
        return True
    return False


if _torchvision_missing():
    REFUSE_ALL_HERE["torch:decode:torchvision.decode"] = "torchvision is not installed here"


@pytest.mark.parametrize("kernel", [k for k in KERNELS if k.ops[0] != "transfer"], ids=kc.kernel_id)
def test_kernel_matches_the_reference_or_refuses_with_a_reason(kernel):
    outcomes = kc.check_kernel(kernel)
    assert outcomes, f"{kc.kernel_id(kernel)}: no case was built for this kernel"
    compared = [o for o in outcomes if not o.refused]
    assert all(o.verdict.reason.strip() for o in outcomes if o.refused)
    if kc.kernel_id(kernel) in REFUSE_ALL_HERE:
        assert not compared, f"{kc.kernel_id(kernel)} now accepts cases: check them and drop it from REFUSE_ALL_HERE"
    else:
        assert compared, (f"{kc.kernel_id(kernel)} refused every case: "
                          + "; ".join(sorted({o.verdict.reason[:120] for o in outcomes})[:3]))
        for o in compared:  # the kernel really ran: its name is in the executed plan
            assert kernel.name in o.plan, (o.case, o.plan)


def test_every_backend_family_module_loads_here():
    import importlib.util

    optional = {"torch": importlib.util.find_spec("torch") is not None}  # the only optional family here
    for family, why in LOADED.items():
        if optional.get(family, True):
            assert why is None, (family, why)
        else:
            assert why and "torch" in why, (family, why)  # a bare install says why
    expected = {"cpu", "reference", "dvpp", "aipp"} | ({"torch"} if optional["torch"] else set())
    assert expected <= {k.family for k in KERNELS}


def test_the_dvpp_download_runs_in_the_checked_dvpp_plans():
    download = kc.find(("transfer",), "dvpp")
    outcomes = kc.check_kernel(kc.find(("decode",), "dvpp"))
    compared = [o for o in outcomes if not o.refused]
    assert compared and all(download.name in o.plan for o in compared), [o.plan for o in compared]


def test_the_torch_transfer_round_trip_is_the_identity():
    pytest.importorskip("torch")
    from dvpipe.backends import resolve
    from dvpipe.planner import input_spec
    from dvpipe.stages.image import Transfer
    from dvpipe.types import PixelFormat

    transfer = kc.find(("transfer",), "torch")
    cam = kc.rig_for((97, 61)).cameras[0]
    spec = input_spec(cam).with_(pixel_format=PixelFormat.BGR, encoding="", channel_order="bgr")
    img = np.random.default_rng(0).integers(0, 256, (61, 97, 3), dtype=np.uint8)
    ref = resolve("torch:cpu")
    up = KernelContext(cam, spec, spec.with_(placement="cpu"), ref, "reference")
    on_device = transfer.fn(img, (Transfer(placement="cpu"),), up)
    down = KernelContext(cam, spec.with_(placement="cpu"), spec, ref, "reference")
    back = transfer.fn(on_device, (Transfer(placement="host"),), down)
    assert np.array_equal(np.asarray(back), img)


# -- a user's kernel is checked the same way ---------------------------------------------------------
@pytest.fixture
def toy_kernel():
    """Register ``fn`` as the ``normalise`` kernel of family ``toy`` for one test, then remove it."""
    made = []

    def register(fn, supports=None):
        register_kernel("normalise", backend="toy", supports=supports, name=fn.__name__, replace=True)(fn)
        made.append(kc.find(("normalise",), "toy"))
        return made[-1]

    yield register
    for k in made:
        kc.unregister(k)


def test_a_toy_kernel_registered_here_is_picked_up_and_passes(toy_kernel):
    def toy_normalise(data, stages, ctx):
        (st,) = stages
        x = np.asarray(data, np.float32)[..., ::-1] if st.to_rgb else np.asarray(data, np.float32)
        return ((x - np.float32(st.mean)) / np.float32(st.std)).astype(st.dtype)

    kernel = toy_kernel(toy_normalise)
    assert kernel in kc.registered_kernels()
    outcomes = kc.check_kernel(kernel)
    assert outcomes and not any(o.refused for o in outcomes)
    assert {o.case.fidelity for o in outcomes} == {"reference", "fast"}
    assert {o.case.size for o in outcomes} >= {(97, 61), (320, 180)}


def test_a_wrong_toy_kernel_fails_the_check(toy_kernel):
    def toy_normalise_forgets_to_rgb(data, stages, ctx):
        (st,) = stages
        return ((np.asarray(data, np.float32) - np.float32(st.mean)) / np.float32(st.std)).astype(st.dtype)

    kernel = toy_kernel(toy_normalise_forgets_to_rgb)
    with pytest.raises(AssertionError, match="max \\|err\\|"):
        kc.check_kernel(kernel)


def test_a_toy_kernel_off_by_a_tenth_of_a_grey_level_fails_the_check(toy_kernel):
    def toy_normalise_biased(data, stages, ctx):
        (st,) = stages
        x = np.asarray(data, np.float64)[..., ::-1] if st.to_rgb else np.asarray(data, np.float64)
        return ((x + 0.1 - np.array(st.mean)) / np.array(st.std)).astype(st.dtype)

    with pytest.raises(AssertionError, match="max \\|err\\|"):
        kc.check_kernel(toy_kernel(toy_normalise_biased))


def test_a_toy_kernel_refusing_must_say_why(toy_kernel):
    def toy_normalise_refuses(data, stages, ctx):
        raise AssertionError("never runs: it refuses every query")

    kernel = toy_kernel(toy_normalise_refuses, supports=lambda q: KernelVerdict.no("toy: float16 only"))
    outcomes = kc.check_kernel(kernel)
    assert outcomes and all(o.refused and o.verdict.reason == "toy: float16 only" for o in outcomes)
    silent = toy_kernel(toy_normalise_refuses, supports=lambda q: KernelVerdict("rejected", ""))
    with pytest.raises(AssertionError, match="without a reason"):
        kc.check_kernel(silent)


def test_a_toy_kernel_with_its_own_stage_gives_its_variants():
    @dataclass(frozen=True)
    class Invert(dv.Stage):
        op = "toy_invert"

    @register_kernel("toy_invert", backend="reference", name="toy_invert_reference")
    def invert_reference(data, stages, ctx):
        return 255 - np.asarray(data)

    @register_kernel("toy_invert", backend="toy", name="toy_invert")
    def invert_toy(data, stages, ctx):
        return np.bitwise_not(np.asarray(data, np.uint8))

    made = [kc.find(("toy_invert",), "reference"), kc.find(("toy_invert",), "toy")]
    try:
        with pytest.raises(KeyError, match="no stage variants for op 'toy_invert'"):
            kc.check_kernel(made[1])
        outcomes = kc.check_kernel(made[1], variants={"toy_invert": [lambda spec: Invert()
                                                                     if spec.dtype == "uint8" else None]})
        assert outcomes and all(not o.refused and o.max_err == 0 for o in outcomes)
    finally:
        for k in made:
            kc.unregister(k)


# -- defects this check found, fixed (each test guards its fix) ----------------------------------------
def test_torch_nearest_resize_of_uint8_matches_the_reference():
    """It raised 'result type Float can't be cast to the desired output type Byte' at run time after the torch
    kernel's supports() accepted it (the pipeline's cpu fallback hid it)."""
    pytest.importorskip("torch")
    kernel = kc.find(("resize",), "torch")
    case = kc.Case((97, 61), 0, "reference", (dv.Decode(),), (dv.Resize(scale=0.7, interpolation="nearest"),),
                   (dv.Batch(),))
    outcome = kc.run_case(kernel, case, "torch:cpu", None)
    assert not outcome.refused and outcome.problem == "", outcome.problem


def test_pad_with_a_value_uint8_cannot_hold_is_refused_at_plan_time():
    with pytest.raises(dv.ConfigError):
        dv.Pipeline(kc.rig_for((97, 61)), [dv.Decode(), dv.Pad(size_divisor=32, value=-1.5)], backends=("reference",))


# -- the tolerance table itself -------------------------------------------------------------------------
def test_every_tolerance_entry_says_why_and_is_found_by_its_key():
    import tolerances

    for (what, fidelity, family), bound in tolerances.TABLE.items():
        assert len(bound.why) > 30, (what, bound.why)
        assert tolerances.tol(what, fidelity, family) is bound
        assert bound.atol >= 0 and bound.rtol >= 0 and bound.levels >= 0 and 0 <= bound.frac <= 1


def test_a_bound_reports_each_way_of_breaking_it():
    import tolerances
    from tolerances import Bound

    want = np.zeros(1000)
    b = Bound(1e-4, "test bound", levels=1.0, frac=0.01, mean_abs=0.05, unit=0.5)
    assert b.violation(np.full(1000, 1e-4), want) == ""
    assert "grey level" in b.violation(np.r_[np.zeros(999), 0.6], want)  # past one level (0.5) + atol
    assert "rounding allowance" in b.violation(np.r_[np.zeros(980), np.full(20, 0.4)], want)  # 2% > 1%
    assert "mean |err|" in Bound(1.0, "test bound", mean_abs=0.05).violation(np.full(10, 0.1), np.zeros(10))
    assert "p99" in Bound(1.0, "test bound", p99_abs=0.05).violation(np.full(10, 0.1), np.zeros(10))
    assert "max |err|" in Bound(1e-3, "test bound", rtol=1e-3).violation(np.array([2.1e-3]), np.array([1.0]))  # not a tolerance: a Bound under test
    assert Bound(1e-3, "test bound", rtol=1e-3).violation(np.array([1.9e-3]), np.array([1.0])) == ""  # not a tolerance: a Bound under test
    with pytest.raises(KeyError, match="no single tolerance"):
        tolerances.tol("no_such_comparison")
