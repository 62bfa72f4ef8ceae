"""Models for the software device, built in Python: :func:`sim_model` registers a numpy function.

The software device has no ATC: its "model file" is a descriptor (docs/models.md). For tests and notebooks
:func:`sim_model` skips the file: it registers the same facts and returns a ``sim-model:NAME`` key that
``OmModel(key, backend="dvpp-sim", target=...)`` loads (``acl.mdl.load_from_file`` accepts it on the
software device only).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError

if TYPE_CHECKING:  # names for the type checker only
    from ..backends.dvpp.aipp import AippConfig

__all__ = ["sim_model", "drop_sim_model", "TensorDecl"]

#: one model input or output: ``(dims, dtype)`` (``((1, 3, 224, 224), "float32")``, any numpy dtype) or a mapping
#: with ``name``, ``dims`` and ``dtype`` (the descriptor's form, docs/models.md)
TensorDecl = Union[tuple[Sequence[int], npt.DTypeLike], Mapping[str, object]]


def _tensors(entries: Sequence[TensorDecl], where: str) -> list:
    out = []
    for i, e in enumerate(entries):
        if isinstance(e, dict):
            out.append(e)
        elif isinstance(e, (tuple, list)) and len(e) == 2:
            dims, dtype = e
            out.append({"name": f"{where[:-1]}{i}", "dims": list(dims), "dtype": str(dtype)})
        else:
            raise ConfigError(f"expected {{name, dims, dtype}} or (dims, dtype), got {e!r}", f"{where}[{i}]")
    return out


def sim_model(fn: Callable[..., Union[np.ndarray, Sequence[np.ndarray]]], *, inputs: Sequence[TensorDecl],
              outputs: Sequence[TensorDecl], aipp: Union[None, str, os.PathLike, AippConfig] = None,
              max_src_image_size: int = 0, name: Optional[str] = None) -> str:
    """Register ``fn`` as a software-device model; returns the key to give :class:`~dvpipe.models.OmModel`.

    Args:
        fn: the model: ``fn(*inputs) -> array or sequence of arrays`` (numpy in, numpy out).
        inputs, outputs: ``(dims, dtype)`` pairs or ``{"name", "dims", "dtype"}`` mappings. With ``aipp``,
            ``inputs[0]`` is the ``(N, 3, H, W)`` tensor AIPP writes (what ``fn`` receives).
        aipp: an :class:`~dvpipe.backends.dvpp.aipp.AippConfig` or ``aipp.cfg`` path (the model "was
            converted with" this static AIPP: input 0 then takes the raw pictures), or ``"dynamic"``.
        max_src_image_size: with ``aipp="dynamic"``, the bytes input 0 accepts.
        name: the key's name (default: the function's name plus a number).

    >>> import numpy as np
    >>> key = sim_model(lambda x: x * 2, inputs=[((2, 3), "float32")], outputs=[((2, 3), "float32")])
    >>> key.startswith("sim-model:")
    True
    """
    from ..backends.dvpp.sim import _mdl as simmdl

    spec_map: dict = {"dvpipe_sim_model": 1, "function": fn, "inputs": _tensors(inputs, "inputs"),
                      "outputs": _tensors(outputs, "outputs")}
    if aipp is not None:
        spec_map["aipp"] = os.fspath(aipp) if isinstance(aipp, os.PathLike) else aipp
    if max_src_image_size:
        spec_map["max_src_image_size"] = int(max_src_image_size)
    label = name or getattr(fn, "__name__", "model").strip("<>") or "model"
    try:
        spec = simmdl.load_spec(spec_map, os.getcwd(), label)
    except ValueError as e:
        raise ConfigError(str(e), "sim_model") from None
    return simmdl.register(spec, name)


def drop_sim_model(key: str) -> None:
    """Forget a :func:`sim_model` registration."""
    from ..backends.dvpp.sim import _mdl as simmdl

    simmdl.unregister(key)
