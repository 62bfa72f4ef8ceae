"""Shard writers: Parquet with tensor columns, or WebDataset-style tar of ``.npy`` + ``.json``.

Every shard is written to a temporary name in its folder and renamed when complete, so a shard file
under its final name is always whole; the shard's manifest (:mod:`._manifest`) is written after the
rename and is what marks it complete.

Parquet (``shard-NNNNN.parquet``), one row per frame set:

==========  ======================================================  ==========================================
column      Arrow type                                              content
==========  ======================================================  ==========================================
set_id      string                                                  the index's set id
time_ns     int64                                                   the set's capture time, epoch ns
images      ``arrow.fixed_shape_tensor`` of uint8 / halffloat /     ``(N, C, H, W)`` in rig order, the plan's
            float, shape ``[N, C, H, W]``                           output dtype, bit for bit
valid       list<bool>                                              per camera
metas       string                                                  JSON list of the cameras' metas
                                                                    (:func:`encode_metas`)
==========  ======================================================  ==========================================

Tar (``shard-NNNNN.tar``), per frame set, key ``sNNNNNN`` (its position in the shard):
``KEY.images.npy`` (``numpy.save`` of the ``(N, C, H, W)`` array), ``KEY.valid.npy`` (bool ``(N,)``)
and ``KEY.json`` (``{"set_id", "time_ns", "metas"}``): a WebDataset sample each.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from typing import Any, Optional, Sequence, cast

import numpy as np

from ..errors import ConfigError
from ._process import SetResult

__all__ = ["ShardWriter", "ParquetShardWriter", "TarShardWriter", "WRITERS", "encode_metas", "decode_metas",
           "shard_name"]

_ND = "__ndarray__"


def _enc(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return {_ND: v.tolist(), "dtype": v.dtype.str, "shape": list(v.shape)}
    if isinstance(v, dict):
        return {str(k): _enc(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_enc(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _dec(v: Any) -> Any:
    if isinstance(v, dict):
        if _ND in v:
            return np.array(v[_ND], dtype=np.dtype(v["dtype"])).reshape(v["shape"])
        return {k: _dec(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_dec(x) for x in v]
    return v


def encode_metas(metas: Sequence[dict]) -> str:
    """Metas as JSON; numpy arrays as ``{"__ndarray__": nested lists, "dtype", "shape"}`` (exact for
    float16/32/64 and integers: JSON floats round-trip), tuples as lists."""
    return json.dumps([_enc(m) for m in metas], separators=(",", ":"))


def decode_metas(text: str) -> list:
    """Inverse of :func:`encode_metas` (arrays come back with their dtype and shape)."""
    return [_dec(m) for m in json.loads(text)]


def shard_name(shard: int, fmt: str) -> str:
    return f"shard-{shard:05d}.{WRITERS[fmt].suffix}"


class _HashingFile(io.RawIOBase):
    """A binary file being written whose sha256 is computed on the way (no second read of the shard)."""

    def __init__(self, path: str):
        super().__init__()
        self._f = open(path, "wb")
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.sha.update(b)
        self.size += len(b)
        return self._f.write(b)

    def tell(self) -> int:
        return self.size

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
        super().close()


class ShardWriter:
    """Writes one shard: :meth:`append` results, then :meth:`commit` (rename) or :meth:`abort`.

    After :meth:`commit`, ``sha256`` is the hex digest of the file as written.
    """

    suffix = ""

    def __init__(self, path: str):
        self.path = path
        self.tmp = f"{path}.tmp-{os.getpid()}"
        self.sets = 0
        self._file = _HashingFile(self.tmp)
        self.sha256: Optional[str] = None

    def append(self, results: Sequence[SetResult]) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    def commit(self) -> int:
        """Close and rename into place; returns the size in bytes."""
        self._close()
        self._file.close()
        self.sha256 = self._file.sha.hexdigest()
        os.replace(self.tmp, self.path)
        return self._file.size

    def abort(self) -> None:
        try:
            self._close()
        except Exception:  # noqa: BLE001 - aborting after an error: the temporary file goes anyway
            pass
        self._file.close()
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


class ParquetShardWriter(ShardWriter):
    """Parquet shard with a fixed-shape tensor column (one row group per :meth:`append`)."""

    suffix = "parquet"

    def __init__(self, path: str):
        super().__init__(path)
        self._writer: Any = None  # a pyarrow ParquetWriter; False once closed

    def append(self, results: Sequence[SetResult]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        ok = [r for r in results if r.error is None]
        if not ok:
            return
        # a set without an error has its images and valid mask
        images = np.ascontiguousarray(np.stack([cast(np.ndarray, r.images) for r in ok]))
        table = pa.table({
            "set_id": pa.array([r.set_id for r in ok], pa.string()),
            "time_ns": pa.array([int(r.time_ns) for r in ok], pa.int64()),
            "images": pa.FixedShapeTensorArray.from_numpy_ndarray(images),
            "valid": pa.array([cast(np.ndarray, r.valid).tolist() for r in ok], pa.list_(pa.bool_())),
            "metas": pa.array([encode_metas(r.metas) for r in ok], pa.string()),
        })
        if self._writer is None:
            # uncompressed: float tensors barely compress and the codec costs more than the disk (docs/fleet.md)
            self._writer = pq.ParquetWriter(self._file, table.schema, compression="none", use_dictionary=False)
        elif table.schema != self._writer.schema:
            raise ConfigError(f"frame set {ok[0].set_id}: output {table.schema.field('images').type} differs from "
                              f"the shard's {self._writer.schema.field('images').type}")
        self._writer.write_table(table)
        self.sets += len(ok)

    def _close(self) -> None:
        if self._writer is None:  # no set written: an empty file with the columns' names only
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"set_id": pa.array([], pa.string()), "time_ns": pa.array([], pa.int64())}),
                           self._file)
            self._writer = False
        elif self._writer is not False:
            self._writer.close()
            self._writer = False


class TarShardWriter(ShardWriter):
    """WebDataset-style tar shard: ``KEY.images.npy``, ``KEY.valid.npy``, ``KEY.json`` per frame set."""

    suffix = "tar"

    def __init__(self, path: str):
        super().__init__(path)
        self._tar: Optional[tarfile.TarFile] = tarfile.open(fileobj=self._file, mode="w")

    def _add(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = 0  # deterministic bytes: a redone shard is identical
        assert self._tar is not None  # not closed
        self._tar.addfile(info, io.BytesIO(data))

    def append(self, results: Sequence[SetResult]) -> None:
        for r in results:
            if r.error is not None:
                continue
            key = f"s{self.sets:06d}"
            for suffix, arr in (("images", r.images), ("valid", r.valid)):
                buf = io.BytesIO()
                np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
                self._add(f"{key}.{suffix}.npy", buf.getvalue())
            meta = {"set_id": r.set_id, "time_ns": int(r.time_ns), "metas": json.loads(encode_metas(r.metas))}
            self._add(f"{key}.json", json.dumps(meta, separators=(",", ":")).encode())
            self.sets += 1

    def _close(self) -> None:
        if self._tar is not None:
            self._tar.close()
            self._tar = None


#: format name -> writer class
WRITERS: dict[str, type[ShardWriter]] = {"parquet": ParquetShardWriter, "tar": TarShardWriter}
