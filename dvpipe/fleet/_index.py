"""The frame-set index: one row per frame set of a fleet's recordings, built with the runner's own rules.

An index is built from a deployment (its cameras' sources and their capture-time rules) and,
optionally, a list of *drive* folders that hold the same layout as the deployment's sources (each
camera's ``uri`` taken relative to the folder the cameras' sources have in common, e.g.
``frames/{camera}`` or ``video/{camera}.mp4``). Per drive, every camera's source is opened as
``dvpipe run`` opens it (:func:`dvpipe.deploy.sources.open_source`: the same file ordering, capture
times and ``offset_ms``), and the frames are grouped by :class:`dvpipe.deploy.sync.Synchroniser` with
the deployment's ``sync`` settings, as the runner groups a recording read as fast as possible
(:func:`group_frames` says exactly how). Frames the synchroniser drops (superseded,
unmatched, whole sets under ``on_late: drop``) are counted in the index's metadata.

Rows (Parquet, one per frame set, sorted by ``set_id``):

================  ========================  ==========================================================
column            Arrow type                meaning
================  ========================  ==========================================================
set_id            string                    ``DRIVE/NNNNNNNN`` (the set's 0-based index in its drive)
drive             string                    the drive's name (its folder name, or the deployment's)
index             int64                     the set's index in its drive
time_ns           int64                     the set's capture time, epoch ns (the synchroniser's T)
kind              string                    ``images`` (sets are independent) or ``video`` (the drive's
                                            sets must be decoded in order, by one decoder per camera)
cameras           list<string>              rig order
sources           list<string>              per camera: the image file, the video file, or null
seqs              list<int64>               per camera: the frame's index in its source, or null
capture_epoch_ns  list<int64>               per camera: the frame's capture time (epoch ns), or null
reasons           list<string>              per camera without a frame: why (late, missing, absent)
cut               bool                      a video segment may start at this set (:func:`keyframe_starts`);
                                            always true for image sets and for a drive's first set
key_ns            list<int64>               per video camera: capture time of the keyframe a decoder
                                            starting at this set starts at, or null
lead              list<int64>               per video camera: the pictures such a start decodes only
                                            (decoded after that keyframe, presented before the camera's
                                            next frame in a set), or null
================  ========================  ==========================================================

Indexes written before ``cut``/``key_ns``/``lead`` existed read back with ``cut`` false past a video
drive's first set (such a drive is one shard) and nulls; their ``capture_ns`` column (the name before
``capture_epoch_ns``) reads back as ``capture_epoch_ns``.

An mmdet3d / nuScenes info file is indexed as it groups its samples (:func:`index_from_infos`).

Table metadata (``dvpipe.fleet.index`` key, JSON): the deployment's path and name, the sync
settings, per drive the frames read and the frames dropped by category.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Iterator, Optional, Sequence

from ..codecs import VIDEO_ENCODINGS
from ..errors import ConfigError
from ..types import Frame, PixelFormat
from ..video import AccessUnit, VideoPacket

__all__ = ["build_index", "index_from_infos", "write_index", "read_index", "IndexRow", "drive_deployment",
           "keyframe_starts", "INDEX_SCHEMA"]

INDEX_SCHEMA = "dvpipe.fleet.index/1"
_META_KEY = b"dvpipe.fleet.index"
_SUPPORTED_TYPES = ("images", "video")


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ConfigError(f"dvpipe fleet needs pyarrow (pip install 'dvpipe[ray]'): {e}") from None
    return pa, pq


def _common_root(dep) -> str:
    parents = [os.path.dirname(os.path.abspath(c.source.uri)) for c in dep.cameras]
    return os.path.commonpath(parents) if parents else ""


def drive_deployment(dep, drive: Optional[str]):
    """``dep`` with every camera's source re-rooted into the folder ``drive`` (None: ``dep`` itself).

    A camera's uri keeps its path relative to the common folder of the deployment's sources.
    """
    if drive is None:
        return dep
    root = _common_root(dep)
    cams = []
    for cc in dep.cameras:
        rel = os.path.relpath(os.path.abspath(cc.source.uri), root)
        uri = os.path.join(os.path.abspath(drive), rel)
        if not os.path.exists(uri):
            raise ConfigError(f"drive {drive}: camera {cc.name} has no {rel} there ({uri} not found)")
        cams.append(replace(cc, source=replace(cc.source, uri=uri)))
    return replace(dep, cameras=tuple(cams))


def check_deployment(dep) -> str:
    """``images`` or ``video``: what kind of index this deployment gives; ConfigError when none."""
    types = {c.source.type for c in dep.cameras}
    bad = sorted(types - set(_SUPPORTED_TYPES))
    if bad:
        raise ConfigError(f"dvpipe fleet indexes image-sequence and video-file sources; this deployment has "
                          f"{', '.join(bad)} (live and synthetic sources have no recording to index)")
    if dep.sync.on_late == "reuse":
        raise ConfigError("sync.on_late: reuse is not supported by dvpipe fleet (it carries images from set to "
                          "set, and fleet workers process sets independently); use mask or drop")
    faulty = [c.name for c in dep.cameras if c.source.faults]
    if faulty:
        raise ConfigError(f"camera {faulty[0]}: source faults are for testing live runs; remove faults: to index "
                          "its recording")
    if dep.live:
        raise ConfigError("dvpipe fleet processes recordings as fast as possible; set run.realtime: false")
    video = any(dep.rig[cc.name].encoding in VIDEO_ENCODINGS or cc.source.type == "video" for cc in dep.cameras)
    return "video" if video else "images"


def _stamped(src, packets: Optional[list] = None) -> Iterator:
    """A camera's frames as source Items, in the source's order. Image files are not read: the index
    needs their capture times only (ImageSequence keeps them after open). ``packets`` (video) collects
    each frame's ``(capture_epoch_ns, by, want, ((pts_ns, starts_stream, show) per access unit))`` for
    :func:`keyframe_starts` (the packet's unit facts, not its bytes)."""
    files = src.stamped_files() if hasattr(src, "stamped_files") else None
    if files is not None and src.type == "images":
        for seq, (t, path) in enumerate(files):
            yield _Item(Frame(src.camera.name, seq, int(t) + src.offset_ns, path, PixelFormat.ENCODED))
        return
    while True:
        it = src.read()
        if it is None:
            return
        if packets is not None and isinstance(it.frame.data, VideoPacket):  # what keyframe_starts needs, no bytes
            p = it.frame.data
            codec = src.camera.encoding
            packets.append((int(it.frame.capture_epoch_ns), p.by, p.want,
                            tuple((u.pts_ns, bool(u.keyframe) and starts_stream(u.data, codec), bool(u.show))
                                  for u in p.units if isinstance(u, AccessUnit))))
        it.frame = Frame(it.frame.camera, it.frame.seq, it.frame.capture_epoch_ns, src.cfg.uri, it.frame.pixel_format)
        yield it


class _Item:
    """The part of a source Item the synchroniser reads (recordings: no monotonic stamps)."""

    __slots__ = ("frame", "arrival_ns", "capture_mono_ns")

    def __init__(self, frame: Frame):
        self.frame = frame
        self.arrival_ns = 0
        self.capture_mono_ns = None


def group_frames(dep, items: dict[str, list]) -> tuple[list, dict[str, int]]:
    """Frame sets of one drive from each camera's items (source order), as the runner forms them.

    The runner's readers fill bounded buffers (``run.queue_size`` frames per camera, back-pressure)
    while the runner polls the synchroniser; here every buffer is refilled before each poll, i.e. the
    runner with readers ahead of the pipeline (recordings processed as fast as possible). The result
    is deterministic and the runner's own (the synchroniser does not decide a recording's set on what a
    reader happened to have read: :mod:`dvpipe.deploy.sync`, rules 1-3).

    Returns ``(sets, drops)``: :class:`~dvpipe.deploy.sync.FrameSet` objects and dropped frames by category.
    """
    from ..deploy.sync import Synchroniser

    cams = [c.name for c in dep.cameras]
    cap = max(1, int(dep.run.queue_size))
    sync = Synchroniser(cams, dep.sync, live=False, capacity=cap, latest_only=False,
                        wait_ms=dep.run.stall_timeout_ms)
    feeds = {c: iter(items.get(c, ())) for c in cams}
    sets: list = []
    drops: dict[str, int] = {}
    while True:
        read = 0
        for cam in cams:  # the readers: fill each buffer; a camera ends when its frames are used up
            while cam not in sync.ended and len(sync.pending[cam]) < cap:
                it = next(feeds[cam], None)
                if it is None:
                    sync.end(cam, "ended: end of input")
                else:
                    sync.push(it)
                    read += 1
        formed = sync.poll(0)  # time stands still: a recording's set never times out waiting
        sets += formed
        dropped = sync.take_drops()  # a poll that forms no set may still make room (unmatched, dropped sets)
        for d in dropped:
            drops[d.category] = drops.get(d.category, 0) + 1
        if sync.done or not (formed or dropped or read):
            break
    for d in sync.take_drops() + sync.flush():
        drops[d.category] = drops.get(d.category, 0) + 1
    return sets, drops


def _rbsp(nal: bytes) -> bytes:
    """A NAL unit's payload without emulation-prevention bytes (``00 00 03`` -> ``00 00``)."""
    return nal.replace(b"\x00\x00\x03", b"\x00\x00")


def _ue(data: bytes, bit: int) -> tuple[Optional[int], int]:
    """An Exp-Golomb ``ue(v)`` at bit offset ``bit``: ``(value, next bit)``; None past the end."""
    zeros = 0
    while bit < 8 * len(data) and not (data[bit // 8] >> (7 - bit % 8)) & 1:
        zeros += 1
        bit += 1
    if bit + zeros >= 8 * len(data):
        return None, bit
    value = 0
    for _ in range(zeros + 1):
        value = (value << 1) | ((data[bit // 8] >> (7 - bit % 8)) & 1)
        bit += 1
    return value - 1, bit


def _recovery_frame_cnt(sei: bytes) -> Optional[int]:
    """``recovery_frame_cnt`` of an H.264 SEI NAL unit's recovery-point message, or None without one."""
    d = _rbsp(sei[1:])
    i = 0
    while i < len(d) and d[i] != 0x80:  # 0x80: rbsp trailing bits
        ptype = psize = 0
        while i < len(d) and d[i] == 0xFF:
            ptype, i = ptype + 255, i + 1
        if i >= len(d):
            return None
        ptype, i = ptype + d[i], i + 1
        while i < len(d) and d[i] == 0xFF:
            psize, i = psize + 255, i + 1
        if i >= len(d):
            return None
        psize, i = psize + d[i], i + 1
        if ptype == 6:
            return _ue(d[i:i + psize], 0)[0]
        i += psize
    return None


def starts_stream(au: bytes, codec: str) -> bool:
    """Whether every picture presented from this access unit's on decodes from it alone, so that a
    segment's decoder may start there (stricter than :func:`dvpipe.video.is_keyframe`, which also
    accepts a container's key flag for resynchronising a live stream).

    H.265: an IRAP picture (NAL types 16-21: BLA, IDR, CRA; its RASL leading pictures are presented
    before it). H.264: an IDR (type 5), or a non-IDR picture with a recovery-point SEI whose
    ``recovery_frame_cnt`` is 0 (ITU-T H.264 D.2.8: the recovery point is the picture itself; the
    open-GOP I pictures of x264 ``open-gop=1``). A recovery point with a count > 0 (gradual decoder
    refresh: x264 ``intra-refresh``) is not: pictures up to the count after it may be wrong.
    """
    if not au:
        return False
    nals = []
    i = au.find(b"\x00\x00\x01")
    while i >= 0:
        j = au.find(b"\x00\x00\x01", i + 3)
        nals.append(au[i + 3: j if j >= 0 else len(au)])
        i = j
    if codec == "h265":
        return any(n and 16 <= (n[0] >> 1) & 0x3F <= 21 for n in nals)
    types = [n[0] & 0x1F for n in nals if n]
    if 5 in types:
        return True
    if 1 not in types:
        return False
    return any(n and n[0] & 0x1F == 6 and _recovery_frame_cnt(n) == 0 for n in nals)


class _Decoded:
    """One video camera's stream as the index sees it: its access units in decode order."""

    def __init__(self, packets: list):
        self.ok = True
        off = None
        self.units: list[tuple[int, bool, bool]] = []  # (capture ns, starts a stream, shown), decode order
        for cap, by, want, units in packets:
            if by != "pts" or want is None:
                self.ok = False  # matched by index (no timestamps): no keyframe can be placed in time
                return
            off = cap - want if off is None else off
            for pts, key, show in units:
                if pts is not None:
                    self.units.append((off + pts, key, show))
        self.keys = [(cap, d) for d, (cap, key, _show) in enumerate(self.units) if key]  # in time and decode order
        self._key_caps = [c for c, _d in self.keys]

    def start(self, first_ns: int) -> Optional[tuple[int, int]]:
        """``(keyframe capture ns, decode-only pictures)`` of a decoder that starts for the frame at
        ``first_ns``: the latest keyframe presented at or before it; None when there is none."""
        import bisect

        from ..video import ELEMENTARY_LOOKAHEAD

        k = bisect.bisect_right(self._key_caps, first_ns) - 1
        if not self.ok or k < 0:
            return None
        key_ns, d = self.keys[k]
        lead = later = 0
        for cap, _key, show in self.units[d:]:
            if cap < first_ns:
                lead += show
                later = 0
            else:  # a picture presented earlier is decoded at most the reorder bound (16) later
                later += 1
                if later > ELEMENTARY_LOOKAHEAD:
                    break
        return key_ns, lead


def keyframe_starts(rows: list, packets: dict[str, list]) -> None:
    """Fill one video drive's rows' ``cut``, ``key_ns`` and ``lead`` (in place; rows in set order).

    A segment may start at set ``s`` when every video camera can start decoding there: for each
    camera with a frame in set ``s`` or a later one, a keyframe presented at or before that frame
    (an IDR, or a CRA / recovery-point I picture: every picture presented from it on is decodable
    from it, while its leading pictures, presented before it, are not, and are never that frame).
    A worker starting there feeds each camera's decoder from that keyframe on: the pictures it
    decodes before the camera's first frame of the segment (``lead``) are decode-only. A drive's
    first set is always a start (the whole recording from its beginning, as one decoder sees it).

    Args:
        rows: the drive's rows (``cameras``, ``capture_epoch_ns``, ``sources``), sorted by set index.
        packets: per video camera, its frames' ``(capture_epoch_ns, by, want, units)`` in the source's
            order (``units``: ``(pts_ns, starts_stream, show)`` of the access units the frame's packet
            carries, :func:`starts_stream`).
    """
    streams = {c: _Decoded(p) for c, p in packets.items()}
    nxt: dict[str, Optional[int]] = {c: None for c in streams}
    for row in reversed(rows):
        cut = True
        for k, cam in enumerate(row["cameras"]):
            if cam not in streams:
                continue
            if row["sources"][k] is not None:
                nxt[cam] = row["capture_epoch_ns"][k]
            want = nxt[cam]
            if want is None:
                continue  # the camera has no frame from this set on: it does not constrain the start
            st = streams[cam].start(want)
            if st is None:
                cut = False
            else:
                row["key_ns"][k], row["lead"][k] = st
        row["cut"] = cut or row["index"] == 0


class IndexRow(dict):
    """One row of the index (a dict with the columns of the module docstring)."""


def _drive_rows(dep, drive_name: str, kind: str) -> tuple[list[IndexRow], dict]:
    from ..deploy.sources import open_source

    from ..deploy.sources import SourceError

    items: dict[str, list] = {}
    packets: dict[str, list] = {}
    for cc in dep.cameras:
        src = open_source(dep.rig[cc.name], cc.source)
        try:
            src.open()
            items[cc.name] = list(_stamped(src, packets.setdefault(cc.name, [])))
        except SourceError as e:
            raise ConfigError(f"drive {drive_name}: camera {cc.name}: {e.reason}") from None
        finally:
            src.close()
    sets, drops = group_frames(dep, items)
    cams = [c.name for c in dep.cameras]
    rows = []
    for fs in sets:
        srcs, seqs, caps, reasons = [], [], [], []
        for cam in cams:
            it = fs.members.get(cam)
            srcs.append(None if it is None else str(it.frame.data))
            seqs.append(None if it is None else int(it.frame.seq))
            caps.append(None if it is None else int(it.frame.capture_epoch_ns))
            reasons.append(None if it is not None else (fs.late.get(cam) or fs.absent.get(cam) or "missing"))
        rows.append(IndexRow(set_id=f"{drive_name}/{fs.index:08d}", drive=drive_name, index=int(fs.index),
                             time_ns=int(fs.time_ns), kind=kind, cameras=cams, sources=srcs, seqs=seqs,
                             capture_epoch_ns=caps, reasons=reasons, cut=True, key_ns=[None] * len(cams),
                             lead=[None] * len(cams)))
    if kind == "video":
        keyframe_starts(rows, {c: p for c, p in packets.items() if p})
    info = {"frames": {c: len(v) for c, v in items.items()}, "dropped": drops, "sets": len(rows)}
    return rows, info


def build_index(dep, drives: Optional[Sequence[str]] = None) -> tuple[list[IndexRow], dict]:
    """Index the frame sets of ``dep``'s recordings (or of each drive folder, see the module docstring).

    Args:
        dep: a loaded :class:`~dvpipe.deploy.config.Deployment` with image-sequence or video-file sources.
        drives: drive folders, each with the deployment's source layout; None: the deployment's sources.

    Returns:
        ``(rows, metadata)``: rows sorted by ``set_id``; metadata as stored in the Parquet file.
    """
    kind = check_deployment(dep)
    names: list[tuple[Optional[str], str]] = []
    if drives:
        seen: set[str] = set()
        for d in drives:
            name = os.path.basename(os.path.normpath(d))
            if name in seen:
                raise ConfigError(f"two drives are named {name!r} ({d}); drive folder names must be unique")
            seen.add(name)
            names.append((d, name))
    else:
        names.append((None, dep.name))
    rows: list[IndexRow] = []
    per_drive = {}
    for folder, name in names:
        r, info = _drive_rows(drive_deployment(dep, folder), name, kind)
        rows += r
        per_drive[name] = dict(info, folder=os.path.abspath(folder) if folder else None)
    rows.sort(key=lambda r: r["set_id"])
    meta = {"schema": INDEX_SCHEMA, "deployment": dep.path, "name": dep.name, "kind": kind,
            "cameras": [c.name for c in dep.cameras],
            "sync": {"tolerance_ms": dep.sync.tolerance_ms, "on_late": dep.sync.on_late, "anchor": dep.sync.anchor},
            "drives": per_drive}
    return rows, meta


def index_from_infos(dep, info_path: str, data_root: Optional[str] = None) -> tuple[list[IndexRow], dict]:
    """Index an mmdet3d / nuScenes info file (``*_infos_*.pkl``, read by :class:`dvpipe.mmdet3d.InfoFile`).

    The info file already groups the cameras' images into samples: each sample is one frame set (no
    synchronisation; its time is the sample's ``timestamp``), a drive per ``scene_token`` (the file's
    name when there is none); ``seq`` is the sample's index in the file's time order, as in
    ``InfoFile.frame_sets``. The deployment's cameras must all be in the file.
    """
    from ..mmdet3d import InfoFile

    cams = [c.name for c in dep.cameras]
    infos = InfoFile(info_path, data_root=data_root, cameras=cams)
    default = os.path.splitext(os.path.basename(info_path))[0]
    counts: dict[str, int] = {}
    rows = []
    for k, smp in enumerate(infos.samples):
        drive = str(smp["scene_token"] or default)
        i = counts.get(drive, 0)
        counts[drive] = i + 1
        rows.append(IndexRow(set_id=f"{drive}/{i:08d}", drive=drive, index=i, time_ns=int(smp["timestamp_ns"]),
                             kind="images", cameras=cams, sources=[smp["cameras"][c]["path"] for c in cams],
                             seqs=[k] * len(cams), capture_epoch_ns=[int(smp["cameras"][c]["timestamp_ns"]) for c in cams],
                             reasons=[None] * len(cams), cut=True, key_ns=[None] * len(cams),
                             lead=[None] * len(cams)))
    rows.sort(key=lambda r: r["set_id"])
    meta = {"schema": INDEX_SCHEMA, "deployment": dep.path, "name": dep.name, "kind": "images", "cameras": cams,
            "infos": os.path.abspath(info_path),
            "drives": {d: {"frames": {c: n for c in cams}, "dropped": {}, "sets": n, "folder": None}
                       for d, n in counts.items()}}
    return rows, meta


def _schema():
    pa, _ = _pa()
    return pa.schema([("set_id", pa.string()), ("drive", pa.string()), ("index", pa.int64()),
                      ("time_ns", pa.int64()), ("kind", pa.string()), ("cameras", pa.list_(pa.string())),
                      ("sources", pa.list_(pa.string())), ("seqs", pa.list_(pa.int64())),
                      ("capture_epoch_ns", pa.list_(pa.int64())), ("reasons", pa.list_(pa.string())),
                      ("cut", pa.bool_()), ("key_ns", pa.list_(pa.int64())), ("lead", pa.list_(pa.int64()))])


def write_index(rows: Sequence[dict], meta: dict, path: str) -> str:
    """Write the index as Parquet (atomically: a temporary file renamed); returns the path."""
    pa, pq = _pa()
    schema = _schema().with_metadata({_META_KEY: json.dumps(meta).encode()})
    table = pa.Table.from_pylist([dict(r) for r in rows], schema=schema)
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def read_index(path: str) -> tuple[list[IndexRow], dict]:
    """``(rows, metadata)`` of an index written by :func:`write_index`."""
    _, pq = _pa()
    if not os.path.isfile(path):
        raise ConfigError(f"--index {path}: no such file (build one with `dvpipe fleet index`)")
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one line for the user
        raise ConfigError(f"--index {path}: not a Parquet index ({type(e).__name__}: {e})") from None
    raw = (table.schema.metadata or {}).get(_META_KEY)
    if raw is None:
        raise ConfigError(f"--index {path}: not a dvpipe fleet index (no {_META_KEY.decode()} metadata)")
    meta = json.loads(raw)
    if meta.get("schema") != INDEX_SCHEMA:
        raise ConfigError(f"--index {path}: index schema {meta.get('schema')!r}, this dvpipe reads {INDEX_SCHEMA}")
    rows = [IndexRow(r) for r in table.to_pylist()]
    for r in rows:  # an index from before segments: a video drive is one shard
        if "capture_ns" in r:  # an index from before the clock was named in the column
            r["capture_epoch_ns"] = r.pop("capture_ns")
        n = len(r["cameras"])
        if r.get("cut") is None:
            r["cut"] = r["kind"] != "video" or r["index"] == 0
        if r.get("key_ns") is None:
            r["key_ns"] = [None] * n
        if r.get("lead") is None:
            r["lead"] = [None] * n
    return rows, meta
