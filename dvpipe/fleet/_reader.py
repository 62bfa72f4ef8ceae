"""Reading a fleet output folder back: ``(set_id, images, metas)`` per frame set."""
from __future__ import annotations

import io
import json
import os
import tarfile
from typing import Iterator

import numpy as np

from ..errors import ConfigError
from ._manifest import MANIFEST
from ._writers import decode_metas

__all__ = ["read", "read_manifest"]


def read_manifest(out_dir: str) -> dict:
    """The run manifest of ``out_dir`` (ConfigError when the run never finished writing it)."""
    path = os.path.join(out_dir, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{out_dir}: no {MANIFEST} (the run did not finish; run it again with the same --out "
                          "to resume)") from None


def read(out_dir: str, *, with_valid: bool = False) -> Iterator[tuple]:
    """Iterate the frame sets written to ``out_dir``, in shard order then set order.

    Yields ``(set_id, images, metas)``: ``images`` is the ``(N, C, H, W)`` array as the pipeline made
    it (uint8, float16 or float32; rig order), ``metas`` the cameras' dicts (numpy arrays restored);
    with ``with_valid``, ``(set_id, images, metas, valid)``. Failed sets are in
    ``read_manifest(out_dir)["failed"]``.
    """
    m = read_manifest(out_dir)
    shards_dir = os.path.join(out_dir, "shards")
    for sm in m["shards"]:
        path = os.path.join(shards_dir, sm["file"])
        it = _parquet(path) if sm["format"] == "parquet" else _tar(path)
        for set_id, images, metas, valid in it:
            yield (set_id, images, metas, valid) if with_valid else (set_id, images, metas)


def _parquet(path: str):
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    for g in range(f.num_row_groups):
        t = f.read_row_group(g)
        if "images" not in t.column_names:
            continue
        images = t.column("images").combine_chunks().to_numpy_ndarray()
        for i, (sid, metas, valid) in enumerate(zip(t.column("set_id").to_pylist(), t.column("metas").to_pylist(),
                                                    t.column("valid").to_pylist())):
            yield sid, images[i], decode_metas(metas), np.array(valid, dtype=bool)


def _tar(path: str):
    with tarfile.open(path, "r") as tar:
        sample: dict = {}
        for member in tar:
            key, _, ext = member.name.partition(".")
            fobj = tar.extractfile(member)
            assert fobj is not None  # the shard writer adds regular files only
            data = fobj.read()
            if sample and sample["key"] != key:
                yield _sample(sample)
                sample = {}
            sample["key"] = key
            sample[ext] = data
        if sample:
            yield _sample(sample)


def _sample(s: dict):
    meta = json.loads(s["json"])
    images = np.load(io.BytesIO(s["images.npy"]), allow_pickle=False)
    valid = np.load(io.BytesIO(s["valid.npy"]), allow_pickle=False)
    return meta["set_id"], images, decode_metas(json.dumps(meta["metas"])), valid
