"""The kernel signature is typed: ``KernelFn = Callable[[FrameData, tuple[Stage, ...], KernelContext], FrameData]``.

``FrameData`` is checked against what really flows between steps (every registered kernel wrapped while real
pipelines run on each built-in backend), and a type checker refuses a kernel of another shape."""
from __future__ import annotations

import subprocess
import sys
import typing

import numpy as np
import pytest

import dvpipe as dv
from conftest import ROOT, encode_jpeg, textured_bgr
from dvpipe.stages.kernel_registry import FrameData, Kernel, KernelContext, KernelFn, all_kernels, register_kernel


def _members() -> tuple[type, ...]:
    """The classes of the FrameData union, its forward reference (``torch.Tensor``) resolved."""
    import torch

    return tuple(torch.Tensor if isinstance(a, typing.ForwardRef) else a for a in typing.get_args(FrameData))


def test_the_kernel_registry_is_typed_with_the_named_alias():
    torch = pytest.importorskip("torch")
    resolved = typing.get_type_hints(Kernel, localns={"torch": torch})["fn"]
    params, ret = typing.get_args(resolved)
    assert params[1:] == [tuple[dv.Stage, ...], KernelContext]
    assert set(typing.get_args(params[0])) == set(typing.get_args(ret)) == set(_members())
    assert Kernel.__annotations__["fn"] == "KernelFn"
    reg = typing.get_type_hints(register_kernel, localns={"torch": torch})
    assert typing.get_origin(reg["return"]) is not None  # Callable[[F], F], not a bare Callable
    assert typing.get_args(reg["supports"])[0] is not typing.Any  # Optional[Callable[[KernelQuery], KernelVerdict]]
    for name in ("KernelFn", "FrameData"):
        assert name in dv.stages.__all__ and name in dv.__all__ and getattr(dv, name) is getattr(dv.stages, name)


#: (backends, camera encoding): the built-in routes a frame takes (host, torch on the CPU, the software DVPP
#: device with a host download, and the AIPP route's device-resident batch)
ROUTES = [(("reference",), "jpeg"), (("cpu",), "jpeg"), (("cpu",), "raw"), (("cpu",), "h264"),
          (("torch:cpu", "cpu"), "jpeg"), (("dvpp-sim", "cpu"), "jpeg"), (("dvpp-sim", "aipp-sim", "cpu"), "jpeg")]


@pytest.mark.parametrize("backends, encoding", ROUTES)
def test_what_flows_between_steps_is_frame_data(backends, encoding):
    """Every value a kernel receives or returns on a real run is an instance of a ``FrameData`` member."""
    if "torch:cpu" in backends:
        pytest.importorskip("torch")
    members = _members()
    seen: list[tuple[str, str, type]] = []
    cam = dv.Camera("CAM", width=64, height=48, encoding=encoding)
    stages = ([dv.Decode(), dv.Resize((32, 48)), dv.Normalise(mean=(0, 0, 0), std=(1, 1, 1)), dv.Batch()]
              if "aipp-sim" not in backends else dv.profile_stages("bevformer-tiny", "fast", cam))
    pipe = dv.Pipeline(dv.Rig((cam,)), stages, backends, fidelity="fast", target=dv.Target("Ascend310P3", "7.0.0"))
    originals = []  # the backends' kernels are registered now; a pipeline reads kernel.fn at its first frame
    for kernel in all_kernels():
        def wrapped(data, stages, ctx, _fn=kernel.fn, _name=kernel.name):
            seen.append((_name, "in", type(data)))
            out = _fn(data, stages, ctx)
            seen.append((_name, "out", type(out)))
            return out
        originals.append((kernel, kernel.fn))
        object.__setattr__(kernel, "fn", wrapped)  # Kernel is frozen: restored below
    try:
        bgr = textured_bgr(64, 48)
        if encoding == "jpeg":
            frame = encode_jpeg(bgr)
        elif encoding == "raw":
            frame = bgr
        else:
            from dvpipe.probe.live import synthetic_frame

            frame = synthetic_frame(cam)
        batch = pipe.process({"CAM": frame})
        assert batch.valid.tolist() == [True], batch.drops
    finally:
        pipe.close()
        for kernel, fn in originals:
            object.__setattr__(kernel, "fn", fn)
    assert seen, "no kernel ran"
    if "aipp-sim" in backends:  # the AIPP route hands a device buffer on
        from dvpipe.device import DeviceTensor

        assert DeviceTensor in {t for _n, _w, t in seen}, seen
    outside = [(n, w, t) for n, w, t in seen if not issubclass(t, members)]
    assert not outside, f"values outside FrameData {members}: {outside}"


_CHECKED = '''
import numpy as np

import dvpipe
from dvpipe.stages import FrameData, KernelContext


@dvpipe.register_kernel("typed_ok", backend="cpu")
def fits(data: FrameData, stages: tuple[dvpipe.Stage, ...], ctx: KernelContext) -> np.ndarray:
    return np.asarray(data)


@dvpipe.register_kernel("typed_bad", backend="cpu")
def takes_a_string(data: str, stages: tuple, ctx: KernelContext) -> int:
    return len(data)
'''


@pytest.mark.slow
def test_a_type_checker_refuses_a_kernel_of_another_shape(tmp_path):
    """mypy (the project's checker, ``make typecheck``) accepts a kernel of the ``KernelFn`` shape and refuses
    one that takes a ``str`` and returns an ``int``; with the old bare ``Callable`` it refused neither."""
    pytest.importorskip("mypy")
    (tmp_path / "user_kernels.py").write_text(_CHECKED, encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
                          "--follow-imports=silent", str(tmp_path / "user_kernels.py")],
                         capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    bad_line = _CHECKED.splitlines().index('@dvpipe.register_kernel("typed_bad", backend="cpu")') + 1
    assert len(errors) == 1 and f"user_kernels.py:{bad_line}:" in errors[0], run.stdout + run.stderr
    assert "Callable[[str, tuple[Any, ...], KernelContext], int]" in errors[0]
