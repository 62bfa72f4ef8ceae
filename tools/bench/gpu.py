#!/usr/bin/env python3
"""The torch backend on a GPU: parity with the CPU backend, per-step device time, end-to-end latency.

One command::

    .venv/bin/python tools/bench/gpu.py                     # samples/ (6 x 1600x900), 50 rounds
    .venv/bin/python tools/bench/gpu.py --rounds 200        # tighter p99
    .venv/bin/python tools/bench/gpu.py --data ../shared/data/nuscenes-sample
    .venv/bin/python tools/bench/gpu.py --device cuda:1 --json out/gpu.json

Targets: the ``bevformer-tiny`` and ``bevformer-base`` frame sets (batch of 6 cameras, the
BEVFormer test-time preprocessing, anchors.md §A), the frame sets of ``--data`` repeated in turn.

Rows (each a dvpipe plan; every plan runs once per round, in an order rotated every round):

* ``cpu``: the CPU backend (OpenCV), the baseline and the parity oracle;
* ``torch:cpu``: OpenCV decode, then the torch kernels on CPU tensors;
* ``torch:cuda ref``: fidelity ``reference``: OpenCV decode on the host, then one fused torch step
  (upload of the uint8 frame timed as its own device span, resize/normalise/pad/CHW written into
  the preallocated (6, 3, H, W) CUDA tensor);
* ``torch:cuda fast``: fidelity ``fast``: nvJPEG decode on the GPU (torchvision), then the same
  fused step (skipped, with the reason, without torchvision);
* ``nvjpeg x6 batched`` / ``nvjpeg x6 per camera``: the decode alone, one batched
  ``decode_jpeg`` call vs six calls (what cross-camera batching would save).

Columns: parity (max |out - cpu| over the batch; at fidelity reference the tolerance is 1e-4,
1 grey level / std for rounding ties), end-to-end ``process()`` latency median and p99 (ms), and
per step the median host time and the median device time per frame set (ms, summed over the six
cameras, from CUDA events), and CUDA allocator calls per frame set after warm-up
(``torch.cuda.memory_stats``: caching-allocator block allocations / cudaMalloc segments; the
fused torch steps should show 0.0/0.0, the nvJPEG rows allocate their output images).

Without CUDA it says why and still runs the ``cpu`` and ``torch:cpu`` rows (parity + timings).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import dvpipe as dv  # noqa: E402
from dvpipe.backends import availability, resolve  # noqa: E402

PROFILES = ("bevformer-tiny", "bevformer-base")


def load_frame_sets(data: Path) -> tuple[dv.Rig, list[dict]]:
    """The rig and its frame sets: ``frames/<CAMERA>/*.jpg`` (samples/) or ``<CAMERA>.jpg`` (one set)."""
    rig = dv.Rig.from_yaml(data / "rig.yaml")
    if (data / "frames").is_dir():
        files = {c.name: sorted((data / "frames" / c.name).glob("*.jpg")) for c in rig}
        n = min(len(v) for v in files.values())
        return rig, [{c: files[c][k].read_bytes() for c in files} for k in range(n)]
    return rig, [{c.name: (data / f"{c.name}.jpg").read_bytes() for c in rig}]


def _to_numpy(images):
    return images.detach().cpu().numpy() if hasattr(images, "detach") else np.asarray(images)


class Row:
    def __init__(self, label: str, pipe: dv.Pipeline | None = None, fn=None, skip: str = ""):
        self.label, self.pipe, self.fn, self.skip = label, pipe, fn, skip
        self.e2e_ns: list[int] = []
        self.host: dict[str, list[float]] = {}
        self.device: dict[str, list[float]] = {}
        self.parity: float | None = None
        self.parity_note = ""
        self.alloc_blocks = self.alloc_segments = 0
        self.memory_stats = None  # torch.cuda.memory_stats for the device, when there is one

    @property
    def allocs(self) -> str:
        n = len(self.e2e_ns)
        return f"{self.alloc_blocks / n:.1f}/{self.alloc_segments / n:.1f}" if self.memory_stats and n else ""

    def run(self, frames: dict):
        s0 = self.memory_stats() if self.memory_stats else None
        t0 = time.perf_counter_ns()
        batch = self.pipe.process(frames) if self.pipe is not None else self.fn(frames)
        self.e2e_ns.append(time.perf_counter_ns() - t0)
        if s0 is not None:
            s1 = self.memory_stats()
            self.alloc_blocks += s1.get("allocation.all.allocated", 0) - s0.get("allocation.all.allocated", 0)
            self.alloc_segments += s1.get("segment.all.allocated", 0) - s0.get("segment.all.allocated", 0)
        if self.pipe is None:
            return batch
        assert batch.valid.all(), batch.drops
        host: dict[str, float] = {}
        dev: dict[str, float] = {}
        tl = batch.timeline
        for s in tl.spans_for(kind="host"):
            if s.camera is not None:
                host[s.name] = host.get(s.name, 0.0) + s.duration_ns / 1e6
        for s in tl.spans_for(kind="device"):
            ns = s.attrs.get("device_duration_ns", s.duration_ns)
            dev[s.name] = dev.get(s.name, 0.0) + ns / 1e6
        for k, v in host.items():
            self.host.setdefault(k, []).append(v)
        for k, v in dev.items():
            self.device.setdefault(k, []).append(v)
        return batch


def _ms(values) -> str:
    return f"{np.median(values):.2f}" if len(values) else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT / "samples", help="rig.yaml + frames (default: samples/)")
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="torch CUDA device (cuda, cuda:1)")
    ap.add_argument("--json", type=Path, help="also write every number here")
    args = ap.parse_args(argv)

    import torch

    rig, sets = load_frame_sets(args.data)
    print(f"dvpipe {dv.__version__}, torch {torch.__version__}, {len(rig)} cameras "
          f"{rig[0].width}x{rig[0].height} from {args.data}, {len(sets)} frame set(s), {args.rounds} rounds, "
          f"CPU threads {os.cpu_count()}, torch intra-op threads {torch.get_num_threads()}")
    cuda_ref = resolve(f"torch:{args.device}")
    cuda = availability(cuda_ref)
    if cuda.ok:
        print(f"CUDA: {torch.cuda.get_device_name(torch.device(args.device))}, CUDA {torch.version.cuda}")
    else:
        print(f"CUDA is absent: {cuda.reason}. Running the cpu and torch:cpu rows only.")
    from dvpipe.backends import torch_device as td
    from dvpipe.backends._torch.decode import torchvision_error

    tv_error = torchvision_error()
    print("torchvision:", "ok" if tv_error is None else tv_error)

    report: dict = {"device": args.device, "cuda": cuda.ok, "cuda_reason": cuda.reason, "targets": {}}
    for profile in PROFILES:
        rows = [Row("cpu", dv.Pipeline.from_profile(profile, rig, backends=("cpu",))),
                Row("torch:cpu", dv.Pipeline.from_profile(profile, rig, backends=("torch:cpu", "cpu")))]
        if cuda.ok:
            name = f"torch:{args.device}"
            rows.append(Row(f"{name} ref", dv.Pipeline.from_profile(profile, rig, backends=(name, "cpu"))))
            fast = dv.Pipeline.from_profile(profile, rig, backends=(name, "cpu"), fidelity="fast")
            if fast.plan.cameras[0].steps[0].backend.name == name:
                rows.append(Row(f"{name} fast", fast))
            else:
                rows.append(Row(f"{name} fast", skip=fast.plan.cameras[0].steps[0].verdicts[0][1].reason))
            if tv_error is None:
                dev = torch.device(args.device)
                rows.append(Row("nvjpeg x6 batched", fn=lambda f: (td.decode_jpeg_batch(list(f.values()), dev),
                                                                  torch.cuda.synchronize(dev))))
                rows.append(Row("nvjpeg x6 per camera", fn=lambda f: ([td.decode_jpeg_batch([b], dev) for b in f.values()],
                                                                     torch.cuda.synchronize(dev))))
        live = [r for r in rows if not r.skip]
        # parity on every frame set, against the CPU backend
        for frames in sets:
            want = _to_numpy(rows[0].pipe.process(frames).images)
            for r in live[1:]:
                if r.pipe is None:
                    continue
                d = float(np.abs(_to_numpy(r.pipe.process(frames).images) - want).max())
                r.parity = d if r.parity is None else max(r.parity, d)
        std = min(dv.PROFILES[profile].std)
        for r in live[1:]:
            if r.pipe is not None:
                tol = 1e-4 if r.pipe.plan.fidelity == "reference" else 8.0 / std
                r.parity_note = "ok" if r.parity <= tol else f"> {tol:.3g}"
        for _ in range(args.warmup):
            for r in live:
                r.run(sets[0])
        for r in live:
            r.e2e_ns.clear(), r.host.clear(), r.device.clear()
            if cuda.ok:
                r.memory_stats = lambda: torch.cuda.memory_stats(torch.device(args.device))
        for k in range(args.rounds):
            order = live[k % len(live):] + live[:k % len(live)]
            for r in order:
                r.run(sets[k % len(sets)])
        print_table(profile, rows)
        report["targets"][profile] = {
            r.label: {"skip": r.skip, "parity_max_abs": r.parity, "e2e_ms_median": _ms_f(r.e2e_ns, 1e6, 50),
                      "e2e_ms_p99": _ms_f(r.e2e_ns, 1e6, 99),
                      "host_ms": {k: float(np.median(v)) for k, v in r.host.items()},
                      "device_ms": {k: float(np.median(v)) for k, v in r.device.items()}} for r in rows}
        base = np.median(rows[0].e2e_ns)
        print(f"  torch:cpu / cpu end-to-end: {np.median(rows[1].e2e_ns) / base:.2f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def _ms_f(values, scale, q):
    return float(np.percentile(values, q) / scale) if values else None


def print_table(profile: str, rows: list[Row]) -> None:
    print(f"\n{profile}: ms per frame set of {len(rows[0].pipe.rig)} cameras (median over rounds; p99 end to end)")
    head = ("plan", "parity", "e2e med", "e2e p99", "host steps", "device steps", "allocs/frame")
    lines = [head]
    for r in rows:
        if r.skip:
            lines.append((r.label, "skipped", "", "", r.skip, "", ""))
            continue
        e2e = np.array(r.e2e_ns) / 1e6
        parity = "" if r.parity is None else f"{r.parity:.2g} {r.parity_note}"
        host = ", ".join(f"{k} {_ms(v)}" for k, v in r.host.items())
        dev = ", ".join(f"{k} {_ms(v)}" for k, v in r.device.items())
        lines.append((r.label, parity, f"{np.median(e2e):.2f}", f"{np.percentile(e2e, 99):.2f}", host, dev, r.allocs))
    widths = [max(len(str(x[i])) for x in lines) for i in range(len(head))]
    for x in lines:
        print("  " + "  ".join(str(v).ljust(w) for v, w in zip(x, widths)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
