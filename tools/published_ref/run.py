#!/usr/bin/env python3
"""Reference harness: dvpipe's images and metas against the published test pipelines running for real.

Usage (``make test-published``)::

    python tools/published_ref/run.py [--venv build/published-ref/venv] [--models bevformer-tiny,...]

1. Builds the harness venv once (``build_venv.sh``: mmdet3d 0.17.1, mmcv 1.4.0, mmdet 2.14.0 from PyPI).
2. Writes the bundled sample (``samples/``) as a converter writes nuScenes (``prepare_infos.py``): a
   repository root ``build/published-ref/repo`` holding ``data/nuscenes/samples_infos_temporal.pkl``
   (``tools/make_info_file.py``'s content) whose ``data_path`` are ``./data/nuscenes/samples/<CAM>/...``
   relative to that root.
3. Runs each model's published test pipeline there (``published.py`` in the harness venv, the
   project's plugin modules under ``plugins/``), and dvpipe's ``Pipeline.from_mmdet3d_config`` (and
   the named profile) on the same file, with ``InfoFile``'s default ``data_root``.
4. Compares the image tensors and every metas key (``box_type_3d`` / ``box_mode_3d`` as dvpipe resolves
   them where mmdet3d imports: evaluated in the published venv, the project's having no mmdet3d) and prints one table (also written to
   ``build/published-ref/table.md``). Exit status 1 when a key the published pipeline gives is
   missing or differs beyond the stated tolerance (the v1 row: other than the differences of form
   in ``KNOWN_V1``).

5. mmdet3d 1.x's layout (``--no-v1`` skips it): a second venv (``build_venv_v1.sh``: mmdet3d 1.4.0,
   mmengine, mmdet 3.2.0, mmcv-lite 2.1.0) converts the same file with mmdet3d 1.4's own
   ``update_infos_to_v2.py`` and loads it with its ``NuScenesDataset`` (``published_v1.py``); dvpipe
   reads the converted file; one more row.

Nothing is fetched at run time beyond the venvs' packages. Not part of the test suite.
"""
from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CONFIGS = ROOT / "tests" / "data" / "mmdet3d_configs"
MODELS = {  # name: (config, dvpipe profile)
    "bevformer-tiny": ("bevformer/bevformer_tiny.py", "bevformer-tiny"),
    "bevformer-small": ("bevformer/bevformer_small.py", "bevformer-small"),
    "bevformer-base": ("bevformer/bevformer_base.py", "bevformer-base"),
    "petr": ("petr/petr_vovnet_gridmask_p4_800x320.py", "petr"),
    "bevdet": ("bevdet/bevdet-r50.py", "bevdet"),
}
#: dvpipe keys that the published metas do not have, and why they are there
EXTRA_REASONS = {
    "prev_bev_exists": "dvpipe's: BEVFormer's forward_test derives it from scene_token",
    "timestamp": "the dataset's input_dict key, not collected by Collect3D",
    "img_timestamp": "PETR's input_dict key (PETRv2 reads it), not collected by PETR's Collect3D",
    "ego2global_translation": "the dataset's input_dict key, not collected",
    "ego2global_rotation": "the dataset's input_dict key, not collected",
    "cameras": "dvpipe's: camera names in batch order",
    "valid": "dvpipe's: which cameras delivered an image",
    "cam2img": "dvpipe's: K (4x4) through the image transform",
    "img_aug": "dvpipe's: the 3x3 image transform",
    "intrinsics": "PETR's input_dict key (updated by ResizeCropFlipImage), not collected; BEVDet's img_inputs[3]",
    "lidar2cam": "collected by BEVFormer's CustomCollect3D only",
    "lidar2img": "not set by BEVDet's bevdet prototype (it passes img_inputs)",
    "img_norm_cfg": "BEVDet normalises inside its loader, no img_norm_cfg",
    "post_rot": "BEVDet's img_inputs[4]",
    "post_tran": "BEVDet's img_inputs[5] (first two entries)",
    "filename": "BEVDet's loader sets no filename",
    "img_shape": "BEVDet's loader sets no shapes",
    "ori_shape": "BEVDet's loader sets no shapes",
    "pad_shape": "BEVDet's loader sets no shapes",
    "scale_factor": "BEVDet's loader sets no scale_factor",
    "scene_token": "collected by BEVFormer's CustomCollect3D only",
    "can_bus": "collected by BEVFormer's CustomCollect3D only",
    "prev_idx": "collected by BEVFormer's CustomCollect3D only",
    "next_idx": "collected by BEVFormer's CustomCollect3D only",
}


def prepare(venv: Path, build: Path) -> Path:
    """The converter-style repository root with the sample's info file (``prepare_infos.py``, run in the
    harness venv so that the pickle is numpy 1.x's, as the converters wrote it); returns the info file."""
    out = subprocess.run([str(venv / "bin" / "python"), str(HERE / "prepare_infos.py"), str(build / "repo")],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def run_published(venv: Path, model: str, info: Path, out: Path) -> dict:
    cmd = [str(venv / "bin" / "python"), str(HERE / "published.py"), "--model", model,
           "--config", str(CONFIGS / MODELS[model][0]), "--ann-file", str(info), "--out", str(out)]
    subprocess.run(cmd, cwd=info.parents[2], check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    with open(out, "rb") as f:
        return pickle.load(f)


#: mmdet3d 1.x's layout against dvpipe's, for the v1 row: differences of form, with their reason (shown, not
#: a failure; any other difference in any row is)
KNOWN_V1 = {
    "ori_shape": "1.x's loader gives one (H, W) for all views; dvpipe a per-camera (H, W, 3) list",
    "img_shape": "1.x's loader gives one (H, W) for all views; dvpipe a per-camera (H, W, 3) list",
    "pad_shape": "1.x's loader gives one (H, W) for all views; dvpipe a per-camera (H, W, 3) list",
    "sample_idx": "1.x numbers the samples (0, 1, ...); dvpipe gives the sample's token",
    "img_norm_cfg": "1.x's loader stamps a zero-mean unit-std img_norm_cfg; this dvpipe pipeline does not normalise",
    "scale_factor": "1.x's loader stamps 1.0; dvpipe's metas without a profile have none",
}
#: the 1.x keys the v1 row compares under dvpipe's name (1.x name -> dvpipe name)
V1_NAMES = {"img_path": "filename"}
#: 1.x keys dvpipe does not give, with their reason
V1_ABSENT = {"ori_cam2img": "1.x's copy of cam2img before augmentation (none here)",
             "ego2global": "dvpipe gives ego2global_translation / _rotation",
             "num_views": "1.x's loader's count", "num_ref_frames": "1.x's loader's count (-1: none)"}


def run_v1(venv_v1: Path, info: Path, out: Path) -> tuple[dict, list]:
    """mmdet3d 1.4's converter and dataset (``published_v1.py``), then dvpipe on the converted file with
    mmdet3d 1.x's ``data_root`` (``data/nuscenes/``, relative to the repository root, the working directory)."""
    import dvpipe as dv
    from dvpipe.mmdet3d import InfoFile
    from dvpipe.stages import Decode

    repo = info.parents[2]
    subprocess.run([str(venv_v1 / "bin" / "python"), str(HERE / "published_v1.py"), "--v0",
                    str(info.relative_to(repo)), "--out", str(out)], cwd=repo, check=True,
                   env={**os.environ, "PYTHONWARNINGS": "ignore"}, stdout=subprocess.DEVNULL)
    with open(out, "rb") as f:
        published = pickle.load(f)
    here = os.getcwd()
    os.chdir(repo)
    try:
        src = InfoFile(Path(published["v1_file"]).relative_to(repo), data_root="data/nuscenes/")
        pipe = dv.Pipeline(src.rig(), [Decode()], metas_format="mmdet3d", pose=src)
        ours = []
        for frames in src.frame_sets():
            batch = pipe.process(frames)
            ours.append((np.array(batch.img[0]), batch.metas[0]))
        pipe.close()
    finally:
        os.chdir(here)
    for smp in published["samples"]:  # 1.x's names and forms, as its multi-view models read them
        m = smp["metas"]
        for old, new in V1_NAMES.items():
            m[new] = m.pop(old)
        for key in V1_ABSENT:
            m.pop(key, None)
        pads = []
        for k in m["cam2img"]:
            pad = np.eye(4)
            pad[:3, :3] = np.asarray(k, dtype=np.float64)
            pads.append(pad)
        m["cam2img"] = pads
        m["lidar2cam"] = [np.asarray(x, dtype=np.float64) for x in m["lidar2cam"]]
        # mmdet3d 1.4's dataset sets no per-camera lidar2img; its multi-view models form cam2img @ lidar2cam
        m["lidar2img"] = [k @ x for k, x in zip(m["cam2img"], m["lidar2cam"])]
    return published, ours


def run_dvpipe(model: str, info_path: Path, use_profile: bool) -> list[tuple[np.ndarray, dict]]:
    import dvpipe as dv
    from dvpipe.mmdet3d import InfoFile

    info = InfoFile(info_path)  # default data_root: found at the repository root
    rig = info.rig()
    config, profile = MODELS[model]
    if use_profile:
        if model == "bevdet":  # the profile does not know the config's camera order
            from dvpipe.mmdet3d import order_rig, profile_from_config

            rig = order_rig(profile_from_config(CONFIGS / config), rig)
        pipe = dv.Pipeline.from_profile(profile, rig, metas_format="mmdet3d", pose=info)
    else:
        pipe = dv.Pipeline.from_mmdet3d_config(CONFIGS / config, rig, metas_format="mmdet3d", pose=info)
    out = []
    for frames in info.frame_sets():
        batch = pipe.process(frames)
        out.append((np.array(batch.img[0]), batch.metas[0]))
    pipe.close()
    return out


def _norm(v):
    """A value in comparable form (box types by class name, enums by value)."""
    if isinstance(v, dict) and set(v) == {"class"}:
        return v["class"].rsplit(".", 1)[-1]
    if isinstance(v, dict) and set(v) == {"enum", "value"}:
        return v["value"]
    if isinstance(v, type):
        return v.__name__
    return v


def _short(v) -> str:
    """A value in a few characters: a list by its length and first item."""
    if isinstance(v, list) and v:
        return f"[{v[0]!r}, ...] ({len(v)})"
    return f"{v!r:.40}"


def compare_value(ref, got) -> tuple[bool, str]:
    """(equal, detail): arrays to 1e-9 (max abs shown), everything else exactly (types: tuple vs list)."""
    ref, got = _norm(ref), _norm(got)
    if isinstance(ref, dict) and isinstance(got, dict):
        if set(ref) != set(got):
            return False, f"keys {sorted(ref)} vs {sorted(got)}"
        parts = [compare_value(ref[k], got[k]) for k in ref]
        return all(p[0] for p in parts), "; ".join(f"{k}: {p[1]}" for k, p in zip(ref, parts) if p[1])
    if isinstance(ref, np.ndarray) or isinstance(got, np.ndarray):
        a, b = np.asarray(ref, dtype=np.float64), np.asarray(got, dtype=np.float64)
        if a.shape != b.shape:
            return False, f"shape {a.shape} vs {b.shape}"
        d = float(np.abs(a - b).max()) if a.size else 0.0
        return d <= 1e-9, (f"max {d:.2g}" if d else "")
    if isinstance(ref, (list, tuple)) and isinstance(got, (list, tuple)):
        if type(ref) is not type(got) and not (isinstance(ref, tuple) and isinstance(got, tuple)):
            return False, f"{type(ref).__name__} vs {type(got).__name__}: {_short(ref)} vs {_short(got)}"
        if len(ref) != len(got):
            return False, f"length {len(ref)} vs {len(got)}"
        parts = [compare_value(r, g) for r, g in zip(ref, got)]
        worst = [p[1] for p in parts if p[1]]
        return all(p[0] for p in parts), (worst[0] if worst else "")
    if isinstance(ref, float) or isinstance(got, float):
        try:
            d = abs(float(ref) - float(got))
        except (TypeError, ValueError):
            return False, f"{ref!r:.60} vs {got!r:.60}"
        return d <= 1e-9, (f"{d:.2g}" if d else "")
    return ref == got, "" if ref == got else f"{ref!r:.60} vs {got!r:.60}"


def compare(model: str, published: dict, ours: list, label: str) -> dict:
    samples = published["samples"]
    assert len(samples) == len(ours), f"{model}: {len(samples)} published samples, dvpipe {len(ours)}"
    img_max, equal, differ, missing, extra = 0.0, set(), {}, set(), set()
    here = published.get("dvpipe_here", {})
    for ref, (img, meta) in zip(samples, ours):
        img_max = max(img_max, float(np.abs(ref["img"].astype(np.float64) - img).max()))
        # the project's venv has no mmdet3d, so dvpipe gave the fallbacks ("LiDAR", 0); what dvpipe resolves
        # where mmdet3d imports was evaluated in the published venv
        meta = dict(meta, **{k: v for k, v in here.items() if k in meta})
        rmeta = dict(ref["metas"])
        if ref["inputs"]:  # BEVDet's img_inputs against dvpipe's per-camera keys
            rmeta["post_rot"] = list(ref["inputs"]["post_rots"])
            rmeta["post_tran"] = list(ref["inputs"]["post_trans"])
            rmeta["intrinsics"] = list(ref["inputs"]["intrins"])
            meta = dict(meta, post_rot=[np.asarray(r, np.float32) for r in meta["post_rot"]],
                        post_tran=[np.asarray(t, np.float32) for t in meta["post_tran"]])
            tol_keys = {"post_rot": 1e-6, "post_tran": 1e-4, "intrinsics": 1e-4}  # float32 tensors
        else:
            tol_keys = {}
        for key, rv in rmeta.items():
            if key not in meta:
                missing.add(key)
                continue
            if key in tol_keys:
                a = np.asarray(rv, np.float64)
                b = np.asarray(meta[key], np.float64)
                d = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
                ok, detail = d <= tol_keys[key], f"max {d:.2g} (float32)"
            else:
                ok, detail = compare_value(rv, meta[key])
            if ok:
                equal.add(key)
            else:
                differ[key] = detail
        extra |= set(meta) - set(rmeta)
    equal -= set(differ)
    return {"model": model, "dvpipe": label, "samples": len(samples), "img_max": img_max, "equal": sorted(equal),
            "differ": differ, "missing": sorted(missing), "extra": sorted(extra)}


def table(rows: list[dict], versions: dict) -> str:
    lines = ["| model | dvpipe side | samples | image max abs | keys equal | keys differing | missing in dvpipe | "
             "dvpipe only |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        differ = "; ".join(f"`{k}` ({v})" for k, v in sorted(r["differ"].items())) or "none"
        lines.append(f"| {r['model']} | {r['dvpipe']} | {r['samples']} | {r['img_max']:.2g} | {len(r['equal'])}: "
                     f"{', '.join(r['equal'])} | {differ} | {', '.join(r['missing']) or 'none'} | "
                     f"{', '.join(r['extra']) or 'none'} |")
    lines.append("")
    known_v1 = sorted({k for r in rows if r["model"].startswith("mmdet3d 1") for k in [*r["differ"], *r["missing"]]
                       if k in KNOWN_V1})
    lines += [f"Known (v1 row): `{k}`: {KNOWN_V1[k]}." for k in known_v1]
    lines += [f"Not compared (v1 row): `{k}`: {why}." for k, why in V1_ABSENT.items()] + [""]
    lines.append("Published side: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build" / "published-ref"))
    ap.add_argument("--venv", default=None, help="the harness venv (default BUILD/venv, built when absent)")
    ap.add_argument("--python", default="python3.11", help="the interpreter the venv is built with")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--no-v1", action="store_true", help="skip mmdet3d 1.x's converter and dataset (second venv)")
    a = ap.parse_args(argv)
    build = Path(a.build).resolve()
    venv = Path(a.venv).resolve() if a.venv else build / "venv"
    if not (venv / ".published-ref-ok").exists():
        subprocess.run(["sh", str(HERE / "build_venv.sh"), str(venv), a.python], check=True)
    info = prepare(venv, build)
    rows, versions, bad = [], {}, False
    for model in a.models.split(","):
        published = run_published(venv, model, info, build / f"{model}.pkl")
        versions = published["versions"]
        for label, use_profile in ((f"config {MODELS[model][0]}", False), (f"profile {MODELS[model][1]}", True)):
            row = compare(model, published, run_dvpipe(model, info, use_profile), label)
            bad |= bool(row["differ"] or row["missing"])
            rows.append(row)
    if not a.no_v1:
        venv_v1 = build / "venv-v1"
        if not (venv_v1 / ".published-ref-ok").exists():
            subprocess.run(["sh", str(HERE / "build_venv_v1.sh"), str(venv_v1), a.python], check=True)
        published, ours = run_v1(venv_v1, info, build / "mmdet3d-1.x.pkl")
        row = compare("mmdet3d 1.4 v1 infos", published, ours, "Pipeline([Decode()]), data_root data/nuscenes/")
        row["differ"] = {k: v + (", known" if k in KNOWN_V1 else "") for k, v in row["differ"].items()}
        bad |= bool(set(row["differ"]) - set(KNOWN_V1) or set(row["missing"]) - set(KNOWN_V1))
        rows.append(row)
        versions = {**versions, **{f"v1 {k}": v for k, v in published["versions"].items()}}
    text = table(rows, versions)
    print(text)
    (build / "table.md").write_text(text + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
