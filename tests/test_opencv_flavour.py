"""``pip install .`` requires the OpenCV flavour already installed (one ``cv2``), else the headless one.

setup.py chooses dvpipe's OpenCV requirement when the wheel is built (README "OpenCV flavour"). The
fast tests read the metadata setuptools writes (``prepare_metadata_for_build_wheel``, what pip calls)
from a copy of the project's packaging files; the slow ones install the project with pip into fresh
venvs and count the installed OpenCV distributions with ``importlib.metadata`` in that venv. The
expected requirements are written out here from the README's supported ranges, not read from setup.py.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLAVOURS = {"opencv-python", "opencv-python-headless", "opencv-contrib-python", "opencv-contrib-python-headless"}
CORE = ["numpy>=1.24", "av>=17.0", "pillow>=10", "pyyaml>=6", "simplejpeg>=1.7"]  # README "Supported ranges"
_LIST = ("import importlib.metadata as m, json; "
         "print(json.dumps(sorted({d.metadata['Name'].lower().replace('_', '-') for d in m.distributions()})))")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DVPIPE_OPENCV")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def packaging(tmp_path_factory) -> Path:
    """pyproject.toml, setup.py, README.md and the two modules setuptools reads, in a folder of their own
    (metadata written there, not into the shared checkout)."""
    if not _setuptools_is_recent():
        pytest.skip("setuptools >= 77 is the build requirement (the lowest-pins venv has the bundled one)")
    d = tmp_path_factory.mktemp("pkg")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, d / name)
    (d / "dvpipe").mkdir()
    for name in ("__init__.py", "_version.py"):
        shutil.copy2(ROOT / "dvpipe" / name, d / "dvpipe" / name)
    return d


def _setuptools_is_recent() -> bool:
    try:
        from importlib.metadata import version

        return int(version("setuptools").split(".")[0]) >= 77
    except Exception:
        return False


def _metadata(folder: Path, out: Path, **env) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    code = ("import sys; from setuptools import build_meta as b; "
            "print('DIST-INFO=' + b.prepare_metadata_for_build_wheel(sys.argv[1]))")
    return subprocess.run([sys.executable, "-c", code, str(out)], cwd=folder, capture_output=True, text=True,
                          env=_clean_env(**env), timeout=300)


def _core_requires(folder: Path, out: Path, **env) -> list[str]:
    r = _metadata(folder, out, **env)
    assert r.returncode == 0, r.stderr[-3000:]
    dist_info = re.search(r"^DIST-INFO=(.+)$", r.stdout, re.M).group(1)
    lines = (out / dist_info / "METADATA").read_text().splitlines()
    return [ln.split(":", 1)[1].strip().replace(" ", "") for ln in lines
            if ln.startswith("Requires-Dist:") and "extra==" not in ln.replace(" ", "")]


def _opencv(reqs: list[str]) -> list[str]:
    return [r for r in reqs if _norm(re.split(r"[<>=!~;\[ ]", r)[0]) in FLAVOURS]


@pytest.mark.parametrize("forced", ["opencv-contrib-python", "opencv-python", "OpenCV_Python_Headless"])
def test_dvpipe_opencv_names_the_requirement(packaging, tmp_path, forced):
    reqs = _core_requires(packaging, tmp_path, DVPIPE_OPENCV=forced)
    assert _opencv(reqs) == [_norm(forced) + ">=4.8"]
    assert sorted(r for r in reqs if r not in _opencv(reqs)) == sorted(CORE)  # the rest unchanged


def test_dvpipe_opencv_none_requires_no_opencv(packaging, tmp_path):
    reqs = _core_requires(packaging, tmp_path, DVPIPE_OPENCV="none")
    assert _opencv(reqs) == [] and sorted(reqs) == sorted(CORE)


def test_an_unknown_dvpipe_opencv_is_a_one_line_error(packaging, tmp_path):
    r = _metadata(packaging, tmp_path, DVPIPE_OPENCV="opencv-headless")
    assert r.returncode != 0
    assert "DVPIPE_OPENCV='opencv-headless' is not one of" in r.stderr and "Traceback" not in r.stderr


def test_without_the_override_the_installed_flavour_is_required(packaging, tmp_path):
    """This interpreter's own OpenCV distribution, as importlib.metadata lists it in a clean process."""
    import json

    names = json.loads(subprocess.run([sys.executable, "-c", _LIST], capture_output=True, text=True,
                                      env=_clean_env(), cwd=tmp_path, check=True).stdout)
    installed = sorted(FLAVOURS & {_norm(n) for n in names})
    if len(installed) > 1:
        pytest.skip(f"this environment has several OpenCV distributions ({installed}); the test needs one or none")
    want = (installed[0] if installed else "opencv-python-headless") + ">=4.8"
    assert _opencv(_core_requires(packaging, tmp_path)) == [want]


# ---------------------------------------------------------------------------------------- slow: real pip
def _sh(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd}: rc {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory) -> Path:
    """The project as an sdist would carry it, without the checkout's build/ (a stale kernel) or venvs."""
    dst = tmp_path_factory.mktemp("src") / "dvpipe"
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(".venv", "build", "dist", ".git", "out", "__pycache__",
                                                             "*.so", "*.egg-info", ".pytest_cache", "tests"))
    return dst


def _venv(path: Path) -> Path:
    _sh([sys.executable, "-m", "venv", str(path)], timeout=300)
    return path / "bin" / "python"


def _installed_opencv(py: Path) -> list[str]:
    import json

    names = json.loads(_sh([str(py), "-c", _LIST], env=_clean_env(), cwd=py.parent).stdout)
    return sorted(FLAVOURS & {_norm(n) for n in names})


def _runs_the_sample(venv: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _sh([str(venv / "bin" / "dvpipe"), "run", "--frames", "3"], cwd=empty, env=_clean_env(), timeout=900)
    assert re.search(r"^latency \(ms\): \d+ batches, 6 cameras", r.stdout, re.M), r.stdout
    assert "OpenCV distributions share one cv2" not in r.stderr  # dvpipe run's warning of a second copy


@pytest.mark.slow
def test_pip_install_next_to_opencv_python_adds_no_second_cv2(tmp_path, source_copy):
    """mmcv's situation: opencv-python (with GUI) is there first; ``pip install .`` keeps it the only one."""
    venv = tmp_path / "venv"
    py = _venv(venv)
    _sh([str(py), "-m", "pip", "install", "-q", "opencv-python>=4.8"], env=_clean_env(), timeout=900)
    assert _installed_opencv(py) == ["opencv-python"]
    _sh([str(py), "-m", "pip", "install", "-q", str(source_copy)], env=_clean_env(), timeout=1800)
    assert _installed_opencv(py) == ["opencv-python"]
    requires = _sh([str(py), "-c", "import importlib.metadata as m; print('\\n'.join(m.requires('dvpipe')))"],
                   env=_clean_env(), cwd=tmp_path).stdout.split()  # not the checkout's dvpipe.egg-info
    assert "opencv-python>=4.8" in requires and "opencv-python-headless>=4.8" not in requires
    _sh([str(py), "-c", "import cv2"], env=_clean_env())
    _runs_the_sample(venv, tmp_path)


@pytest.mark.slow
def test_pip_install_into_an_empty_venv_gets_the_headless_flavour(tmp_path, source_copy):
    venv = tmp_path / "venv"
    py = _venv(venv)
    assert _installed_opencv(py) == []
    _sh([str(py), "-m", "pip", "install", "-q", str(source_copy)], env=_clean_env(), timeout=1800)
    assert _installed_opencv(py) == ["opencv-python-headless"]
    _sh([str(py), "-c", "import cv2"], env=_clean_env())
    _runs_the_sample(venv, tmp_path)
