"""A backend family added from outside the package: one row of the backend table plus its kernels, and
the planner plans and the pipeline runs through it without a line of dvpipe changing (issue 31).

The family here, ``boxgpu``, keeps its pictures in a "device" of its own (placement ``boxgpu:0``: a
:class:`Box` wrapping the host array, so nothing host-side can read it by accident). It declares, on its
row, where its outputs live, which placements are its memory, a ``place_outputs`` hook (what its steps
hand on) and its ``route`` word; its transfers come from the default hook, which runs the family's own
``transfer`` kernel. The reference for the pixels is the CPU backend running the same stages.
"""
from __future__ import annotations

import numpy as np
import pytest

import dvpipe as dv
from dvpipe import backends
from dvpipe.backends import BackendFamily, BackendRef, register_family
from dvpipe.testing.dvpp import encode_jpeg, synthetic_bgr
from dvpipe.errors import PlanError
from dvpipe.planner import plan_pipeline
from dvpipe.stages import kernel_registry as registry
from dvpipe.stages.kernel_registry import KernelVerdict, kernels_at, register_kernel


class Box:
    """A picture in the ``boxgpu`` device's memory (host code must go through the transfer kernel)."""

    def __init__(self, array: np.ndarray):
        self.array = array


def _upload_or_download(data, stages, ctx):
    if ctx.spec_out.placement == "host":
        assert isinstance(data, Box), "the download step reads device memory"
        ctx.moved = ("device_to_host", int(data.array.nbytes))
        return data.array
    assert not isinstance(data, Box), "the upload step reads host memory"
    arr = np.ascontiguousarray(data)
    ctx.moved = ("host_to_device", int(arr.nbytes))
    return Box(arr)


def _resize_on_device(data, stages, ctx):
    assert isinstance(data, Box), "a boxgpu step reads its own memory: the planner must have uploaded"
    cpu_resize = kernels_at(("resize",), "cpu")[0]
    return Box(cpu_resize.fn(data.array, stages, ctx))


PLACED: list[tuple[str, str]] = []


def _place_outputs(steps, camera, target):
    """Say what each boxgpu step hands on (recorded, so the test sees the planner called it)."""
    for k, s in enumerate(steps):
        if s.backend.family == "boxgpu":
            PLACED.append((camera.name, s.name))
            s.hands_on = "boxed BGR"
    return steps, ""


def _route(steps) -> str:
    return "boxgpu" if any(s.backend.family == "boxgpu" for s in steps) else ""


@pytest.fixture
def boxgpu(monkeypatch):
    """Register the family (row + kernels) for one test, leaving the table and the kernel registry as found."""
    # every built-in family loaded before the copy (a test may resolve or ask the availability of any of them):
    # their kernels stay registered after the test
    assert backends.load_family("cpu") is None
    for name in list(backends.FAMILIES):
        backends.load_family(name)
    monkeypatch.setattr(registry, "_REGISTRY", {k: list(v) for k, v in registry._REGISTRY.items()})
    monkeypatch.setattr(backends, "_TABLE", dict(backends._TABLE))
    monkeypatch.setattr(backends, "FAMILIES", dict(backends.FAMILIES))
    register_kernel("resize", backend="boxgpu", unit="boxgpu", name="boxgpu.resize")(_resize_on_device)
    register_kernel("transfer", backend="boxgpu", unit="boxgpu", name="boxgpu.copy",
                    supports=lambda q: KernelVerdict.yes("host <-> boxgpu copy"))(_upload_or_download)
    row = register_family(BackendFamily(
        "boxgpu", placement=lambda ref: "boxgpu:0", owns=lambda placement: placement.startswith("boxgpu"),
        device_ref=lambda placement: BackendRef("boxgpu", "boxgpu", "0"), place_outputs=_place_outputs,
        route=_route))
    PLACED.clear()
    yield row


def _rig():
    return dv.Rig([dv.Camera(name, width=320, height=240, encoding="jpeg") for name in "AB"])


def test_a_family_registered_from_outside_is_planned_with_its_placement_and_transfers(boxgpu):
    rig = _rig()
    plan = plan_pipeline(rig.cameras, [dv.Decode(), dv.Resize(size=(120, 160))], ("boxgpu", "cpu"))
    for cp in plan.cameras:
        names = [(s.name, s.backend.name, s.spec_in.placement, s.spec_out.placement) for s in cp.steps]
        # decode: no boxgpu kernel -> cpu; the resize on boxgpu needs an upload before it and the host batch
        # a download after it, both the family's own transfer kernel
        assert names == [("decode", "cpu", "host", "host"),
                         ("transfer", "boxgpu", "host", "boxgpu:0"),
                         ("resize", "boxgpu", "boxgpu:0", "boxgpu:0"),
                         ("transfer", "boxgpu", "boxgpu:0", "host"),
                         ("batch", "cpu", "host", "host")], names
        assert [s.kernel.name for s in cp.steps if s.name == "transfer"] == ["boxgpu.copy", "boxgpu.copy"]
        assert cp.route == "boxgpu"
        assert next(s for s in cp.steps if s.name == "resize").hands_on == "boxed BGR"
    assert PLACED == [("A", "resize"), ("B", "resize")]


def test_a_pipeline_runs_through_the_outside_family_and_matches_the_cpu_backend(boxgpu):
    rig = _rig()
    frames = {c.name: encode_jpeg(synthetic_bgr(320, 240, seed=k)) for k, c in enumerate(rig.cameras)}
    stages = [dv.Decode(), dv.Resize(size=(120, 160)), dv.Normalize(mean=(0, 0, 0), std=(1, 1, 1))]
    with dv.Pipeline(rig, stages, backends=("boxgpu", "cpu")) as pipe:
        assert [s.backend.name for s in pipe.plan.cameras[0].steps].count("boxgpu") == 3
        batch = pipe.process(frames)
    with dv.Pipeline(rig, stages, backends=("cpu",)) as cpu:
        ref = cpu.process(frames)
    np.testing.assert_array_equal(np.asarray(batch.images), np.asarray(ref.images))
    moved = sorted((s.attrs.get("direction"), s.attrs.get("bytes")) for s in batch.timeline.spans
                   if s.kind == "transfer" and s.camera == "A")
    assert moved == [("device_to_host", 120 * 160 * 3), ("host_to_device", 240 * 320 * 3)]


def test_a_family_without_a_transfer_kernel_is_refused_with_the_reason(boxgpu, monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", {k: [x for x in v if x.name != "boxgpu.copy"]
                                                for k, v in registry._REGISTRY.items()})
    with pytest.raises(PlanError, match=r"resize on boxgpu reads from host, and no backend copies host -> boxgpu:0"):
        plan_pipeline(_rig().cameras, [dv.Decode(), dv.Resize(size=(120, 160))], ("boxgpu", "cpu"))


def test_the_planner_names_no_backend_family():
    """The planner asks the backend table's rows: no family's name appears in its code (identifiers and strings;
    docstrings and the example in one error message aside). Before, it named dvpp and aipp 38 times."""
    import ast
    import re
    from pathlib import Path

    import dvpipe.planner as planner

    tree = ast.parse(Path(planner.__file__).read_text(encoding="utf-8"))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(n) is not None}
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if "must name at least one backend" not in node.value:  # "e.g. ('cpu',)" in the message
                words.update(re.findall(r"[a-z]+", node.value.lower()))
        elif isinstance(node, ast.Name):
            words.update(re.findall(r"[a-z]+", node.id.lower()))
        elif isinstance(node, ast.Attribute):
            words.update(re.findall(r"[a-z]+", node.attr.lower()))
    assert words & {"cpu", "torch", "dvpp", "aipp", "cuda", "npu", "acl", "nv12"} == set()


# ------------------------------------------------------------------------------------------ backend names
def test_the_builtin_backend_literal_is_the_names_the_table_declares():
    """``BuiltinBackend`` stays a Literal for type checkers; a name added to the table (or to the Literal) only
    fails here."""
    from typing import get_args

    from dvpipe._typing import BuiltinBackend

    declared = [n for row in backends._TABLE.values() if (row.module or "").startswith("dvpipe.")
                for n in row.backend_names]
    assert sorted(get_args(BuiltinBackend)) == sorted(declared)
    assert len(set(declared)) == len(declared)


def test_every_builtin_name_resolves_as_before():
    """The table's names give the references the old if-chain gave (written out here by hand)."""
    from dvpipe.backends import resolve

    expected = {"cpu": ("cpu", "cpu", ""), "reference": ("reference", "reference", ""),
                "torch": ("torch:cpu", "torch", "cpu"), "torch:cpu": ("torch:cpu", "torch", "cpu"),
                "torch:cuda": ("torch:cuda", "torch", "cuda"), "torch:cuda:1": ("torch:cuda:1", "torch", "cuda:1"),
                "torch:npu:3": ("torch:npu:3", "torch", "npu:3"), "dvpp": ("dvpp", "dvpp", "hw"),
                "dvpp-sim": ("dvpp-sim", "dvpp", "sim"), "aipp": ("aipp", "aipp", "hw"),
                "aipp-sim": ("aipp-sim", "aipp", "sim")}
    assert {n: (r.name, r.family, r.device) for n in expected for r in [resolve(n)]} == expected
    with pytest.raises(dv.ConfigError) as e:
        resolve("torch:gpu")
    assert str(e.value) == "unknown torch device 'gpu' in backend 'torch:gpu'; use torch:cpu, torch:cuda[:N] or torch:npu[:N]"
    for bad, form, index in (("torch:npu:x", "torch:npu:0", "'x'"), ("torch:cuda:-1", "torch:cuda:0", "'-1'"),
                             ("torch:cuda:0:1", "torch:cuda:0", "'0:1'")):
        with pytest.raises(dv.ConfigError) as e:  # in a list of backends it read as "unavailable", not as a typo
            resolve(bad)
        assert str(e.value) == f"backend '{bad}': a device number is 0, 1, 2... ({form}), got {index}"
    with pytest.raises(dv.ConfigError) as e:
        resolve("gpu9")
    assert str(e.value) == ("unknown backend 'gpu9'; known: cpu, reference, torch:cpu, torch:cuda[:N], torch:npu[:N], "
                            "dvpp, dvpp-sim, aipp, aipp-sim, or a family you registered kernels for")
    from dvpipe.deploy._assembly import AUTO_BACKENDS

    assert AUTO_BACKENDS == ("dvpp", "torch:npu", "torch:cuda", "cpu")


def test_a_family_from_outside_declares_its_names_and_its_place_in_auto(boxgpu):
    from dvpipe.backends import known_names, resolve
    from dvpipe.deploy._assembly import resolve_backends

    row = register_family(BackendFamily(
        "boxgpu", placement=boxgpu.placement, owns=boxgpu.owns, device_ref=lambda placement: BackendRef("box", "boxgpu", "0"),
        place_outputs=boxgpu.place_outputs, route=boxgpu.route,
        names={"box": "0", "box-sim": "sim"}, auto={"box": 5}))
    assert (resolve("box"), resolve("box-sim")) == (BackendRef("box", "boxgpu", "0"), BackendRef("box-sim", "boxgpu", "sim"))
    assert {"box", "box-sim"} <= set(known_names()) and row.backend_names == ("box", "box-sim")
    with pytest.raises(dv.ConfigError, match=r"known: cpu, .*, aipp-sim, box, box-sim, or a family"):
        resolve("boxx")
    # auto: rank 5 puts it before dvpp (10); unavailable built-ins are skipped with their reason
    backends_, notes = resolve_backends(("auto",))
    assert backends_[0] == "box" and backends_[-1] == "cpu"
    assert all(not n.startswith("box") for n in notes)
    plan = plan_pipeline(_rig().cameras, [dv.Decode(), dv.Resize(size=(120, 160))], backends_)
    assert [s.backend.name for s in plan.cameras[0].steps] == ["cpu", "box", "box", "box", "cpu"]


def test_a_family_cannot_take_a_name_another_family_answers_to(boxgpu):
    with pytest.raises(dv.ConfigError, match=r"^backend family 'other' declares 'dvpp-sim', already a name of family 'dvpp'"):
        register_family(BackendFamily("other", names={"dvpp-sim": "x"}))
    with pytest.raises(dv.ConfigError, match=r"declares 'torch:gpu', already a name of family 'torch'"):
        register_family(BackendFamily("other", names={"torch:gpu": "x"}))
    with pytest.raises(dv.ConfigError, match=r"puts 'elsewhere' in auto but does not declare it"):
        register_family(BackendFamily("other", names={"here": ""}, auto={"elsewhere": 1}))


# ------------------------------------------------------------------------------------- per-camera backends
def test_a_camera_whose_own_backends_leave_its_output_off_the_batch_placement_is_refused(boxgpu):
    """Per-camera preferences still write one batch: a camera batching in the family's device memory while the
    others batch on the host is a ConfigError naming where each camera's output is."""
    register_kernel("batch", backend="boxgpu", unit="boxgpu", name="boxgpu.batch")(_resize_on_device)
    rig = _rig()
    stages = [dv.Decode(), dv.Resize(size=(120, 160))]
    on_one = plan_pipeline(rig.cameras, stages, ("boxgpu", "cpu"))  # every camera batching on the device: fine
    assert {cp.steps[-1].spec_out.placement for cp in on_one.cameras} == {"boxgpu:0"}
    with pytest.raises(dv.ConfigError) as e:
        plan_pipeline(rig.cameras, stages, ("cpu",), camera_backends={"B": ("boxgpu", "cpu")})
    assert str(e.value) == ("cameras with their own backends would write their batch slots in different places "
                            "(A on host (cpu), B on boxgpu:0 (boxgpu)); every camera's output must be where the batch "
                            "is: give the batch step's backend to every camera's preference order")
