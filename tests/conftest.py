"""Shared fixtures: synthetic encoded images built in code, and optional real data."""
from __future__ import annotations

import io
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
# a local Ray cluster (tests/fleet/test_fleet.py) binds 127.0.0.1, not this machine's interface address
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

NUSCENES = Path(os.environ.get("DVPIPE_NUSCENES", ROOT.parent / "shared" / "data" / "nuscenes-sample"))
KITTI = Path(os.environ.get("DVPIPE_KITTI", ROOT.parent / "shared" / "data" / "kitti-sample"))


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/* from the current output (review each changed line against constraints.md)")


def textured_bgr(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A smooth-plus-detail test image (JPEG-friendly but not flat), HxWx3 uint8 BGR."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([
        128 + 100 * np.sin(x / (7 + seed) + y / 13),
        128 + 90 * np.cos(y / (5 + seed) - x / 17),
        128 + 80 * np.sin((x + y) / 11),
    ], axis=-1)
    base += rng.normal(0, 12, base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


def encode_jpeg(bgr: np.ndarray, subsampling: str = "420", progressive: bool = False, quality: int = 90,
                gray: bool = False) -> bytes:
    """JPEG bytes through Pillow (any subsampling, progressive, grayscale) — independent of dvpipe."""
    rgb = bgr[..., ::-1]
    img = Image.fromarray(rgb).convert("L") if gray else Image.fromarray(rgb)
    sub = {"444": 0, "422": 1, "420": 2}.get(subsampling, 2)
    buf = io.BytesIO()
    kw = dict(quality=quality, progressive=progressive)
    if not gray:
        kw["subsampling"] = sub
    img.save(buf, format="JPEG", **kw)
    return buf.getvalue()


def encode_png(bgr: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", bgr)
    assert ok
    return buf.tobytes()


_RULE_YAML = """schema_version: 1
rules:
  - id: {rid}
    section: "§2"
    unit: vpc
    api: any
    families: [{families}]
    aspects: [in_range]
{body}
    confidence: inferred
    source: "https://example.org/test-page"
"""


def rule_yaml(rid: str, body: str, families: str = "ascend310p") -> str:
    """A ``rules_*.yaml`` file with one VPC rule ``rid`` for ``families``; ``body``: its further keys, indented
    by four spaces (``"    check: {in_w: [10, 4096]}"``). For tests that load extra knowledge data."""
    return _RULE_YAML.format(rid=rid, families=families, body=body)


def rig_dict(sizes, encoding="jpeg", seed=0):
    """A rig with plausible calibration, one camera per (width, height)."""
    rng = np.random.default_rng(seed)
    cams = []
    for k, (w, h) in enumerate(sizes):
        yaw = 2 * np.pi * k / max(1, len(sizes))
        # lidar (x right, y forward, z up) -> camera (x right, y down, z forward), then yaw about lidar z
        base = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]], dtype=float)
        c, s = np.cos(yaw), np.sin(yaw)
        rz = np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]])
        T = np.eye(4)
        T[:3, :3] = base @ rz
        T[:3, 3] = rng.normal(0, 0.3, 3)
        f = 0.8 * w
        K = [[f, 0, w / 2 + rng.normal(0, 5)], [0, f, h / 2 + rng.normal(0, 5)], [0, 0, 1]]
        cams.append({"name": f"CAM{k}", "width": w, "height": h, "encoding": encoding,
                     "intrinsics": K, "lidar2cam": T.tolist()})
    return {"name": "test", "cameras": cams}



def camera_folders(root, rig: dict) -> dict:
    """One textured JPEG per camera of ``rig`` (a :func:`rig_dict`) in ``root/<camera>/1000000000.jpg``, the
    layout an ``images`` source reads; returns camera name -> the JPEG's bytes."""
    frames = {}
    for k, cam in enumerate(rig["cameras"]):
        folder = root / cam["name"]
        folder.mkdir()
        frames[cam["name"]] = encode_jpeg(textured_bgr(cam["width"], cam["height"], seed=k))
        (folder / "1000000000.jpg").write_bytes(frames[cam["name"]])
    return frames

@pytest.fixture(scope="session")
def nuscenes_dir():
    if not (NUSCENES / "rig.yaml").exists():
        pytest.skip(f"real nuScenes sample not present at {NUSCENES}")
    return NUSCENES


@pytest.fixture(scope="session")
def kitti_dir():
    if not (KITTI / "rig.yaml").exists():
        pytest.skip(f"real KITTI sample not present at {KITTI}")
    return KITTI


@pytest.fixture(scope="session")
def samples_dir():
    if not (SAMPLES / "rig.yaml").exists():
        pytest.skip("samples/ not generated (python tools/make_samples.py)")
    return SAMPLES


#: the test files in tests/backends/dvpp/ whose every test must leave the software device's ledger empty
_LEDGER_DIR = Path(__file__).resolve().parent / "backends" / "dvpp"
_LEDGER_FILES = ("test_acl.py", "test_backend.py", "test_fidelity.py", "test_sim.py", "test_teardown.py",
                 "test_vdec.py", "tests/backends/dvpp/test_ascend_smoke.py", "tests/backends/dvpp/test_om_model.py", "tests/backends/dvpp/test_device_route.py")


@pytest.fixture(autouse=True)
def dvpp_ledger(request):
    """After every DVPP test (the files in _LEDGER_FILES): once the test's step states
    are closed and the runtimes nobody holds are closed, the software device's ledger
    (dvpipe.backends.dvpp.sim.ledger()) shows nothing alive: every ACL object the test made was released."""
    path = request.node.path
    if not (path.parent.resolve() == _LEDGER_DIR and path.name in _LEDGER_FILES):
        yield
        return
    yield
    import gc

    from dvpipe.backends.dvpp import _acl, sim

    gc.collect()
    # step states of pipelines the test did not close (Pipeline.close reaches them once the pipeline calls
    # dvpipe.backends.dvpp.close_states): closed here, so that what is checked is that the teardown path
    # itself releases everything (no descriptor, picture or buffer leaked per frame)
    _acl.close_open_states()
    held = _acl.close_idle()
    live = {k: v for k, v in sim.ledger().items() if v}
    sim.clear_faults()
    assert not held and not live, f"ACL objects left alive after the test: runtimes held {held}, ledger {live}"


def plain_meta(v):
    """A meta value in comparable form (for ``json.dumps``): arrays as (dtype, shape, values), tuples as lists."""
    if isinstance(v, np.ndarray):
        return ["ndarray", v.dtype.str, list(v.shape), v.tolist()]
    if isinstance(v, dict):
        return {k: plain_meta(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain_meta(x) for x in v]
    return v.item() if isinstance(v, np.generic) else v


@pytest.fixture(scope="module")
def ray_cluster():
    """A real local Ray cluster on 127.0.0.1 with 2 CPUs, one per test module."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()
