"""Soak run (a tool, not a test): image, video and RTSP cameras in one live deployment, with faults.

    python tools/soak.py                          # 30 minutes, 6 cameras (2 per group), 640x360, 10 fps
    python tools/soak.py --minutes 2 --json out/soak.json
    python tools/soak.py --minutes 30 --out /tmp/soak --restart-every-s 60

One deployment (built here as a dict through ``dvpipe.deploy.load_deployment``, so it tracks the
schema), three camera groups, real-time pacing, looping:

* ``images``: JPEG sequences written at start from ``samples/frames`` (resized, a moving square per
  frame); in each pass three files are corrupt: truncated, bit-flipped entropy data, a zeroed block.
* ``video``: H.264 MP4s with B-frames (libx264 ``bframes=3``, made with PyAV at start), looped;
  faults ``corrupt_every`` (damaged access units) and ``lose`` (packets lost in the source).
* ``rtsp``: the loopback server (:mod:`dvpipe.testing.rtsp_server`, 127.0.0.1) serving H.264 (no
  B-frames, as camera encoders stream), read by dvpipe's RTSP client on the runner's one I/O thread
  (``--rtsp-client ffmpeg``: FFmpeg's, a reader thread each);
  this tool stops the server every ``--restart-every-s`` seconds for ``--outage-s`` seconds (server
  restarts: disconnect, outage, reconnect), and the server loses the RTP packets of every
  ``--lose-every``-th picture of a connection (the next picture a ``corrupt`` drop, then
  ``keyframe_wait`` until the keyframe).

Outputs on, in ``--out`` (default a new temporary folder): ``summary.json``, ``latency.json``,
``trace.json`` and dumps. Resident memory (``/proc/self/statm``) is sampled every ``--sample-s``
seconds; a progress line is printed every ``--progress-s`` seconds (60).

Pass criteria (exit status 1 otherwise):

* memory slope, least squares over the samples after ``--warmup-min``: <= ``--max-slope-mb-min``
  (MiB/min, default 1.0);
* frames in = frames emitted + frames dropped, per camera;
* unexpected drops (categories other than ``--expected-drops``: what the injected faults and
  real-time pacing cause) <= ``--max-unexpected`` of the frames in (default 1 %);
* end-to-end latency (capture -> output) p99 <= ``--max-p99-ms`` (default 250 ms);
* each group emits at least ``--min-emitted`` of its frames in (default 50 %), so that a flood of
  "expected" drops cannot hide a breakage.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from dvpipe.deploy import Runner, load_deployment  # noqa: E402
from dvpipe.deploy.config import DeploymentError  # noqa: E402
from dvpipe.testing.rtsp_server import LoopbackRtspServer, RtspStream  # noqa: E402
from dvpipe.deploy.summary import format_summary  # noqa: E402
from dvpipe.testing.deployments import encode_access_units, tiny_rig  # noqa: E402
from dvpipe.latency import wall_ns  # noqa: E402

GROUPS = ("images", "video", "rtsp")
#: drop categories the injected faults and real-time pacing cause (the rest are "unexpected")
EXPECTED_DROPS = ("corrupt", "keyframe_wait", "lost_in_outage", "superseded", "late", "shutdown")
MIB = 2 ** 20


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fit_slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``[(minutes, MiB), ...]`` in MiB/min (None with fewer than 3 points)."""
    if len(points) < 3:
        return None
    t = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    if np.ptp(t) == 0:
        return None
    return float(np.polyfit(t, y, 1)[0])


# ------------------------------------------------------------------------------------------ media
def sequence(n: int, width: int, height: int, seed: int) -> list[np.ndarray]:
    """``n`` BGR pictures: the sample frames of one camera, resized, with a square that moves per frame."""
    cams = sorted(p for p in (ROOT / "samples" / "frames").iterdir() if p.is_dir())
    files = sorted((cams[seed % len(cams)]).glob("*.jpg")) if cams else []
    base = [cv2.resize(cv2.imread(str(f), cv2.IMREAD_COLOR), (width, height), interpolation=cv2.INTER_AREA)
            for f in files]
    if not base:  # no samples: a gradient
        y, x = np.mgrid[0:height, 0:width]
        base = [np.stack([x * 255 // width, y * 255 // height, np.full_like(x, 96)], -1).astype(np.uint8)]
    out = []
    s = max(8, height // 8)
    for k in range(n):
        img = base[k % len(base)].copy()
        x0 = (k * 7 * s // 4) % max(1, width - s)
        cv2.rectangle(img, (x0, height // 3), (x0 + s, height // 3 + s), ((k * 53) % 256, 255, (k * 29) % 256), -1)
        out.append(img)
    return out


def corrupt_jpeg(data: bytes, kind: str, rng: np.random.Generator) -> bytes:
    """Damage a JPEG: ``truncated`` (no EOI), ``bitflip`` (entropy data, EOI kept), ``zeroed`` (a block)."""
    sos = data.find(b"\xff\xda")
    start = sos + 4 + int.from_bytes(data[sos + 2:sos + 4], "big")
    end = len(data) - 2  # the EOI marker
    if kind == "truncated":
        return data[: start + (end - start) * 3 // 5]
    b = bytearray(data)
    if kind == "bitflip":
        for i in rng.integers(start, end, size=24):
            b[i] ^= 1 << int(rng.integers(0, 8))
    else:
        mid = (start + end) // 2
        n = min(1024, (end - start) // 4)
        b[mid:mid + n] = bytes(n)
    return bytes(b)


JPEG_FAULTS = ("truncated", "bitflip", "zeroed")


def write_images(folder: Path, pics: list[np.ndarray], rng: np.random.Generator) -> dict[int, str]:
    """One JPEG per picture (``000000.jpg``, ...); returns ``{index: fault}`` of the damaged files."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(pics)
    faulty = {n // 4: "truncated", n // 2: "bitflip", (3 * n) // 4: "zeroed"}
    for k, img in enumerate(pics):
        data = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
        if k in faulty:
            data = corrupt_jpeg(data, faulty[k], rng)
        (folder / f"{k:06d}.jpg").write_bytes(data)
    return faulty


def write_bframe_mp4(path: Path, pics: list[np.ndarray], fps: int, gop: int) -> None:
    """H.264 MP4 with B-frames (libx264 ``bframes=3``, b-pyramid: pts != dts), pts in 1/fps."""
    import av

    h, w = pics[0].shape[:2]
    with av.open(str(path), "w", format="mp4") as c:
        st = c.add_stream("libx264", rate=fps)
        st.width, st.height, st.pix_fmt = w, h, "yuv420p"
        st.codec_context.time_base = Fraction(1, fps)
        st.codec_context.max_b_frames = 3
        st.options = {"preset": "veryfast", "crf": "28",
                      "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes=3:b-pyramid=normal"}
        for k, img in enumerate(pics):
            fr = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="bgr24")
            fr.pts = k
            for p in st.encode(fr):
                c.mux(p)
        for p in st.encode(None):
            c.mux(p)


class RestartingServer:
    """The loopback RTSP server, stopped every ``every_s`` seconds for ``outage_s`` and started again
    on the same port (server restarts as the cameras see them)."""

    def __init__(self, streams: dict[str, RtspStream], every_s: float, outage_s: float):
        self.streams, self.every_s, self.outage_s = streams, every_s, outage_s
        self.server = LoopbackRtspServer(streams, "127.0.0.1", 0).start()
        self.port = self.server.port
        self.restarts: list[float] = []  # seconds since start() of each outage's beginning
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-rtsp-restarts", daemon=True)

    def url(self, path: str) -> str:
        return f"rtsp://127.0.0.1:{self.port}/{path}"

    def start(self) -> None:
        self._t0 = time.monotonic()
        if self.every_s > 0:
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.restarts.append(time.monotonic() - self._t0)
            self.server.stop()
            if self._stop.wait(self.outage_s):
                return
            for _attempt in range(20):  # the port can stay busy for a moment after the stop
                try:
                    self.server = LoopbackRtspServer(self.streams, "127.0.0.1", self.port).start()
                    break
                except OSError as e:
                    if self._stop.wait(0.25):
                        return
                    err = str(e)
            else:
                self.failed.append(f"restart at {self.restarts[-1]:.0f} s: {err}")
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.server.stop()


def make_media(args, work: Path) -> dict:
    """Write the image folders and MP4s, encode the RTSP streams; returns what the deployment needs."""
    fps = int(round(args.fps))
    n = max(2 * fps, 8)  # frames per pass: images and RTSP 2 s, video 4 s (at 10 fps)
    rng = np.random.default_rng(12)
    media: dict = {"images": {}, "video": {}, "rtsp": {}, "jpeg_faults": {}, "frames_per_pass": {}}
    for g in GROUPS:
        for j in range(args.per_group):
            name = f"{g.upper()}{j}"
            seed = GROUPS.index(g) * args.per_group + j
            if g == "images":
                pics = sequence(n, args.width, args.height, seed)
                media["jpeg_faults"][name] = write_images(work / "images" / name, pics, rng)
                media["images"][name] = str(work / "images" / name)
                media["frames_per_pass"][name] = n
            elif g == "video":
                pics = sequence(2 * n, args.width, args.height, seed)
                path = work / "video" / f"{name}.mp4"
                path.parent.mkdir(parents=True, exist_ok=True)
                write_bframe_mp4(path, pics, fps, gop=fps)
                media["video"][name] = str(path)
                media["frames_per_pass"][name] = 2 * n
            else:
                pics = sequence(n, args.width, args.height, seed)
                # pictures whose RTP packets the server loses on the way (counted on each connection)
                total = int(args.minutes * 60 * args.fps) + 10 * fps
                lost = [(k, None) for k in range(args.lose_every // 2 + 3, total, args.lose_every)] \
                    if args.lose_every else []
                media["rtsp"][name] = RtspStream("h264", encode_access_units(n, args.width, args.height, "h264",
                                                                             gop=fps, images=pics), fps=args.fps,
                                                 lose=lost)
    return media


# ------------------------------------------------------------------------------------- deployment
def soak_deployment(args, media: dict, rtsp_urls: dict[str, str], out_dir: Path, start_ns: int,
                    decode_key: bool) -> dict:
    """The deployment mapping. ``start_ns``: capture time of the recordings' first frame (epoch ns), so
    that replayed recordings and live RTSP frames share one time base."""
    names = [n for g in GROUPS for n in (media[g] if g != "rtsp" else rtsp_urls)]
    rig = tiny_rig(names, args.width, args.height, encoding="h264")
    for cam in rig["cameras"]:
        if cam["name"] in media["images"]:
            cam["encoding"] = "jpeg"
    period_ms = 1000.0 / args.fps
    total = int(args.minutes * 60 * args.fps) + 10 * int(args.fps)  # frames a camera can deliver in the run
    lose = list(range(args.lose_every // 2, total, args.lose_every)) if args.lose_every else []
    cameras = []
    for name, folder in media["images"].items():
        cameras.append({"name": name, "source": {"type": "images", "uri": folder, "timestamps": "fps",
                                                 "fps": args.fps, "start_ns": start_ns}})
    for name, path in media["video"].items():
        faults = {"corrupt_every": args.corrupt_every} if args.corrupt_every else {}
        if lose:
            faults["lose"] = lose
        cameras.append({"name": name, "source": {"type": "video", "uri": path, "start_ns": start_ns,
                                                 **({"faults": faults} if faults else {})}})
    for name, url in rtsp_urls.items():
        src = {"type": "rtsp", "uri": url, "transport": "tcp", "open_timeout_s": 3, "read_timeout_s": 1,
               "reconnect": {"initial_ms": 200, "max_ms": 1000, "factor": 2, "attempts": 0}}
        if args.rtsp_client:
            src["client"] = args.rtsp_client
        cameras.append({"name": name, "source": src})
    dep = {
        "name": "soak-images-video-rtsp",
        "rig": rig,
        "pipeline": {"profile": args.profile, "backends": args.backends.split(",")},
        "cameras": cameras,
        # the anchor is an image camera (never loses a frame); +-half a period finds each RTSP frame,
        # whatever its phase against the replayed recordings (it changes at every reconnect)
        "sync": {"tolerance_ms": period_ms / 2, "deadline_ms": period_ms, "on_late": "mask",
                 "anchor": next(iter(media["images"]), "earliest")},
        "run": {"duration_s": args.minutes * 60, "loop": True, "realtime": True, "queue_size": 2,
                "stall_timeout_ms": 1000},
        "outputs": {"dir": str(out_dir), "metrics": True, "trace": args.trace,
                    "dumps": {"every": max(1, int(args.fps * args.dump_every_s)), "max": args.dumps_max}},
    }
    if decode_key:
        dep["decode"] = {"on_corrupt": "drop"}
    return dep


def load(args, media, urls, out_dir, start_ns, notes: list[str]):
    """Load the deployment; without ``decode.on_corrupt`` when the schema does not have it yet."""
    try:
        return load_deployment(soak_deployment(args, media, urls, out_dir, start_ns, decode_key=True)), True
    except DeploymentError as e:
        if not any(p == "decode" or p.startswith("decode.") for p, _m in e.errors):
            raise
    notes.append("decode.on_corrupt is not in the deployment schema yet: the default integrity policy applies")
    return load_deployment(soak_deployment(args, media, urls, out_dir, start_ns, decode_key=False)), False


# ------------------------------------------------------------------------------------------- run
class Sampler(threading.Thread):
    """RSS and frame counters every ``every_s`` seconds; a progress line every ``progress_s``."""

    def __init__(self, runner: Runner, every_s: float, progress_s: float, warmup_min: float, server):
        super().__init__(name="soak-sampler", daemon=True)
        self.runner, self.every_s, self.progress_s, self.warmup_min = runner, every_s, progress_s, warmup_min
        self.server = server
        self.samples: list[dict] = []
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()

    def sample(self) -> dict:
        t = self.runner.acc.totals()
        s = {"t_s": round(time.monotonic() - self.t0, 2), "rss_mib": round(rss_bytes() / MIB, 2),
             "frames_in": t["entered"], "emitted": t["emitted"], "dropped": t["dropped"]}
        self.samples.append(s)
        return s

    def slope(self) -> float | None:
        return fit_slope([(s["t_s"] / 60, s["rss_mib"]) for s in self.samples
                          if s["t_s"] / 60 >= self.warmup_min and not s.get("after_run")])

    def run(self) -> None:
        self.sample()
        last_print = 0.0
        while not self.stop_event.wait(self.every_s):
            s = self.sample()
            if s["t_s"] - last_print >= self.progress_s:
                last_print = s["t_s"]
                sl = self.slope()
                slope = "warming up" if s["t_s"] / 60 < self.warmup_min else (
                    f"{sl:+.3f} MiB/min" if sl is not None else "n/a")
                print(f"{s['t_s'] / 60:5.1f} min  frames {s['frames_in']} in, {s['emitted']} emitted, "
                      f"{s['dropped']} dropped  RSS {s['rss_mib']:.1f} MiB  slope {slope}  "
                      f"RTSP restarts {len(self.server.restarts)}", flush=True)


def redirect_stderr(path: Path) -> int:
    """Send file descriptor 2 (C libraries write there too) to ``path``; returns the saved descriptor."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    return saved


def restore_stderr(saved: int) -> None:
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)


def group_of(name: str) -> str:
    return next(g for g in GROUPS if name.startswith(g.upper()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="run length (default 30)")
    ap.add_argument("--fps", type=float, default=10.0, help="every camera's frame rate (default 10)")
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=360)
    ap.add_argument("--per-group", type=int, default=2, help="cameras per group: images, video, rtsp (default 2)")
    ap.add_argument("--profile", default="bevformer-tiny")
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("--corrupt-every", type=int, default=97, help="video: damage every n-th access unit (0: never)")
    ap.add_argument("--lose-every", type=int, default=151, help="video, RTSP: lose every n-th frame (0: never)")
    ap.add_argument("--rtsp-client", choices=("dvpipe", "ffmpeg"), default=None,
                    help="the RTSP cameras' client (default: dvpipe's, every camera on the runner's I/O thread)")
    ap.add_argument("--restart-every-s", type=float, default=30.0, help="restart the RTSP server this often (0: never)")
    ap.add_argument("--outage-s", type=float, default=2.0, help="how long the RTSP server stays down (default 2)")
    ap.add_argument("--sample-s", type=float, default=5.0, help="sample RSS every N seconds (default 5)")
    ap.add_argument("--progress-s", type=float, default=60.0, help="print a progress line every N seconds (60)")
    ap.add_argument("--warmup-min", type=float, default=None,
                    help="minutes left out of the memory fit (default: 20%% of the run, at most 5)")
    ap.add_argument("--max-slope-mb-min", type=float, default=1.0, help="memory slope limit, MiB/min (1.0)")
    ap.add_argument("--max-unexpected", type=float, default=0.01,
                    help="unexpected drops, as a fraction of the frames in (0.01)")
    ap.add_argument("--expected-drops", default=",".join(EXPECTED_DROPS),
                    help=f"drop categories the faults cause (default {','.join(EXPECTED_DROPS)})")
    ap.add_argument("--min-emitted", type=float, default=0.5,
                    help="each group emits at least this fraction of its frames in (0.5; the faults cost ~10-20 %%)")
    ap.add_argument("--max-p99-ms", type=float, default=250.0, help="end-to-end latency p99 limit, ms (250)")
    ap.add_argument("--trace", action=argparse.BooleanOptionalAction, default=True,
                    help="write the Chrome/Perfetto trace (default on; --no-trace to tell its memory apart)")
    ap.add_argument("--dump-every-s", type=float, default=10.0, help="dump a frame set every N seconds (10)")
    ap.add_argument("--dumps-max", type=int, default=30)
    ap.add_argument("--out", default=None, help="work folder (default: a new temporary folder); outputs in OUT/out")
    ap.add_argument("--keep-media", action="store_true", help="keep the generated media in OUT/media")
    ap.add_argument("--json", default=None, help="write every figure here")
    args = ap.parse_args(argv)
    warmup_min = args.warmup_min if args.warmup_min is not None else min(5.0, 0.2 * args.minutes)
    expected = {c.strip() for c in args.expected_drops.split(",") if c.strip()}

    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="dvpipe-soak-"))
    media_dir, out_dir = work / "media", work / "out"
    notes: list[str] = []
    t_setup = time.monotonic()
    try:
        media = make_media(args, media_dir)
    except Exception as e:  # noqa: BLE001 - one line, then out
        print(f"soak: cannot make the test media: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    server = RestartingServer(media["rtsp"], args.restart_every_s, args.outage_s)
    urls = {name: server.url(name) for name in media["rtsp"]}
    try:
        dep, _ = load(args, media, urls, out_dir, wall_ns(), notes)
        runner = Runner(dep)
        # the recordings' capture times must start when the run does (live RTSP frames carry the wall
        # clock), so the deployment is loaded again, unchanged but for start_ns, once the pipeline is built
        runner.dep, decode_key = load(args, media, urls, out_dir, wall_ns(), [])
    except Exception as e:  # noqa: BLE001
        server.stop()
        print(f"soak: {type(e).__name__}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    cams = [c.name for c in dep.cameras]
    print(f"soak: {len(cams)} cameras {args.width}x{args.height} at {args.fps:g} fps "
          f"({', '.join(f'{g} {sum(group_of(c) == g for c in cams)}' for g in GROUPS)}), {args.minutes:g} min, "
          f"profile {args.profile} on {args.backends}; faults: JPEG {'/'.join(JPEG_FAULTS)} per pass, video "
          f"corrupt every {args.corrupt_every}, lose every {args.lose_every}, RTSP server restart every "
          f"{args.restart_every_s:g} s ({args.outage_s:g} s down); outputs in {out_dir} "
          f"(setup {time.monotonic() - t_setup:.1f} s)", flush=True)
    for n in notes:
        print(f"note: {n}", flush=True)

    sampler = Sampler(runner, args.sample_s, args.progress_s, warmup_min, server)
    server.start()
    sampler.start()
    run_error = None
    result = None
    out_dir.mkdir(parents=True, exist_ok=True)
    stderr_log = out_dir / "stderr.log"
    saved_fd2 = redirect_stderr(stderr_log)  # decoder warnings (libjpeg, FFmpeg) would bury the progress lines
    try:
        result = runner.run()
    except Exception as e:  # noqa: BLE001 - RunError (accounting) or anything else: a FAIL, reported
        run_error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    finally:
        sampler.stop_event.set()
        sampler.join(timeout=10)
        server.stop()
        restore_stderr(saved_fd2)
    elapsed = sampler.samples[-1]["t_s"]
    in_run_end = sampler.samples[-1]["rss_mib"]
    after = sampler.sample()  # after the outputs were written (the trace is serialised at the end)
    after["after_run"] = True
    stderr_lines = stderr_log.read_text(encoding="utf-8", errors="replace").splitlines()
    if stderr_lines:
        notes.append(f"{len(stderr_lines)} lines on stderr during the run (in {stderr_log}), first: "
                     f"{stderr_lines[0][:120]}")
    acc = runner.acc

    # ---- figures
    groups = {}
    for g in GROUPS:
        members = [c for c in cams if group_of(c) == g]
        groups[g] = {"cameras": members,
                     "frames_in": sum(acc.entered[c] for c in members),
                     "emitted": sum(acc.emitted[c] for c in members),
                     "dropped": sum(acc.dropped_total(c) for c in members),
                     "masked_slots": sum(sum(acc.masked[c].values()) for c in members)}
    drops: dict[str, int] = {}
    for c in cams:
        for k, v in acc.dropped[c].items():
            drops[k] = drops.get(k, 0) + v
    totals = acc.totals()
    unexpected = {k: v for k, v in drops.items() if k not in expected}
    n_unexpected = sum(unexpected.values())
    # injected JPEG faults: files read (entered) whose index in the pass is a damaged one
    injected_jpeg = 0
    for c, faulty in media["jpeg_faults"].items():
        n, e = media["frames_per_pass"][c], acc.entered[c]
        injected_jpeg += sum(e // n + (1 if e % n > k else 0) for k in faulty)
    corrupt_images = sum(acc.dropped[c].get("corrupt", 0) for c in media["images"])
    injected_video = sum(acc.entered[c] // args.corrupt_every for c in media["video"]) if args.corrupt_every else 0
    corrupt_video = sum(acc.dropped[c].get("corrupt", 0) for c in media["video"])
    summary_json: dict = {}
    try:
        summary_json = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        notes.append("summary.json was not written")
    sources = {}
    for c, d in (summary_json.get("cameras") or {}).items():
        s = d.get("source") or {}
        sources[c] = {k: v for k, v in s.items() if k != "events"}  # outage fields as the summary has them
    if not any("outage_s" in s for s in sources.values()):
        notes.append("the summary reports no outage durations yet (no source.*outage* field)")
    lost = totals.get("lost_in_outage")  # estimated by newer dvpipes, never entered (not in the invariant)
    if lost is None:
        notes.append("this dvpipe does not estimate frames lost in outages (no totals.lost_in_outage)")
    for g in GROUPS:
        groups[g]["lost_in_outage"] = sum((summary_json.get("cameras") or {}).get(c, {}).get("lost_in_outage") or 0
                                          for c in groups[g]["cameras"])
    rss = [s["rss_mib"] for s in sampler.samples]
    warm = [s for s in sampler.samples if s["t_s"] / 60 >= warmup_min and not s.get("after_run")]
    slope = sampler.slope()
    e2e = runner.stats.end_to_end("capture")
    p50 = e2e.p50_ns / 1e6 if e2e.p50_ns is not None else None
    p99 = e2e.p99_ns / 1e6 if e2e.p99_ns is not None else None

    failures = []
    if run_error:
        failures.append(f"the run failed: {run_error}")
    if acc.check():
        failures.append("frames not accounted for: " + "; ".join(acc.check()))
    if slope is None:
        failures.append(f"too few memory samples after the {warmup_min:g} min warm-up to fit a slope")
    elif slope > args.max_slope_mb_min:
        failures.append(f"memory slope {slope:+.3f} MiB/min > {args.max_slope_mb_min:g}")
    if totals["entered"] == 0:
        failures.append("no frames entered")
    elif n_unexpected > args.max_unexpected * totals["entered"]:
        failures.append(f"unexpected drops {n_unexpected} ({', '.join(f'{k} {v}' for k, v in unexpected.items())}) "
                        f"> {args.max_unexpected:.1%} of {totals['entered']} frames in")
    if p99 is None:
        failures.append("no end-to-end latency measured")
    elif p99 > args.max_p99_ms:
        failures.append(f"latency p99 {p99:.1f} ms > {args.max_p99_ms:g} ms")
    for g in GROUPS:
        d = groups[g]
        if d["cameras"] and d["emitted"] < args.min_emitted * max(1, d["frames_in"]):
            failures.append(f"group {g} emitted {d['emitted']} of {d['frames_in']} frames in "
                            f"(< {args.min_emitted:.0%}: the expected drops hide a breakage)")
    failures += [f"RTSP server {f}" for f in server.failed]
    ok = not failures

    report = {
        "pass": ok, "failures": failures, "notes": notes, "elapsed_s": elapsed, "minutes": args.minutes,
        "cameras": len(cams), "size": [args.width, args.height], "fps": args.fps, "profile": args.profile,
        "backends": args.backends, "sets": totals["sets"], "frames_in": totals["entered"],
        "emitted": totals["emitted"], "dropped": totals["dropped"], "masked_slots": totals["masked_slots"],
        "lost_in_outage": lost,
        "groups": groups, "drops": drops, "unexpected_drops": unexpected, "expected_drops": sorted(expected),
        "faults": {"jpeg_damaged_read": injected_jpeg, "jpeg_counted_corrupt": corrupt_images,
                   "video_damaged_approx": injected_video, "video_counted_corrupt": corrupt_video,
                   "video_corrupt_every": args.corrupt_every, "lose_every": args.lose_every,
                   "rtsp_restarts": len(server.restarts), "rtsp_outage_s": args.outage_s,
                   "decode_on_corrupt_key": decode_key},
        "sources": sources,
        "rss_mib": {"start": rss[0], "warm": warm[0]["rss_mib"] if warm else None, "end": in_run_end,
                    "after_outputs": rss[-1], "peak": max(rss)},
        "warmup_min": warmup_min, "slope_mib_per_min": slope, "max_slope_mib_per_min": args.max_slope_mb_min,
        "latency_ms": {"p50": p50, "p90": e2e.p90_ns / 1e6 if e2e.p90_ns is not None else None, "p99": p99,
                       "max": e2e.max_ns / 1e6 if e2e.max_ns is not None else None, "limit_p99": args.max_p99_ms},
        "outputs": dict(result.outputs) if result is not None else {}, "out_dir": str(out_dir),
        "rss_samples": sampler.samples,
    }

    # ---- the summary
    print(format_summary(acc))
    print(f"\nsoak {'PASS' if ok else 'FAIL'}: {elapsed / 60:.1f} min, {totals['sets']} sets, "
          f"frames {totals['entered']} in = {totals['emitted']} emitted + {totals['dropped']} dropped")
    for g in GROUPS:
        d = groups[g]
        print(f"  {g:<7} {len(d['cameras'])} cameras: {d['frames_in']} in, {d['emitted']} emitted, "
              f"{d['dropped']} dropped, {d['masked_slots']} masked slots"
              + (f", ~{d['lost_in_outage']} lost in outages" if d["lost_in_outage"] else ""))
    print("  drops by reason: " + (", ".join(f"{k} {v}" + ("" if k in expected else " (unexpected)")
                                             for k, v in sorted(drops.items())) or "none")
          + (f"; ~{lost} more lost in outages (estimated, never entered)" if lost else ""))
    print(f"  faults: {injected_jpeg} damaged JPEGs read, {corrupt_images} counted corrupt; "
          f"~{injected_video} damaged video access units, {corrupt_video} video frames counted corrupt")
    print(f"  RTSP server down {len(server.restarts)} x {args.outage_s:g} s = "
          f"{len(server.restarts) * args.outage_s:g} s (injected); as the cameras saw it:")
    for c, s in sources.items():
        if group_of(c) == "rtsp":
            extra = ", ".join(f"{k} {round(v, 1) if isinstance(v, float) else v}" for k, v in s.items()
                              if k in ("outages", "outage_s", "disconnected_s", "lost_in_outage"))
            print(f"    {c}: {s.get('disconnects', 0)} disconnects, {s.get('reconnects', 0)} reconnects, "
                  f"stalled {s.get('stalls', 0)}x {s.get('stalled_s', 0):.1f} s" + (f", {extra}" if extra else ""))
    print(f"  RSS {rss[0]:.1f} MiB at start, {report['rss_mib']['warm'] or float('nan'):.1f} MiB after the "
          f"{warmup_min:g} min warm-up, {in_run_end:.1f} MiB at the end ({rss[-1]:.1f} after writing the outputs); "
          "slope "
          + (f"{slope:+.3f}" if slope is not None else "n/a") + f" MiB/min (limit {args.max_slope_mb_min:g})")
    print("  latency capture -> output: p50 " + (f"{p50:.1f}" if p50 is not None else "n/a") + " ms, p99 "
          + (f"{p99:.1f}" if p99 is not None else "n/a") + f" ms (limit {args.max_p99_ms:g})")
    for n in notes:
        print(f"  note: {n}")
    for f in failures:
        print(f"  FAIL: {f}")
    print(f"  outputs: {out_dir}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    if not args.keep_media:
        shutil.rmtree(media_dir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
