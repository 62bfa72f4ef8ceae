"""Build of dvpipe's one compiled kernel, and the sample deployment as package data
(everything else is in pyproject.toml).

* The extension is optional: where no C compiler is available the install still succeeds and the
  CPU backend uses its OpenCV path instead (``dvpipe probe``'s ``cpu_kernel`` line and plans say
  which one runs). A wheel built without it is tagged ``py3-none-any`` (pure), not as a platform
  wheel that would claim a compiled kernel, and records the fact in ``dvpipe/_build.json``
  (``{"native_kernel": false, "reason": ...}``).
* The repository's ``samples/`` folder (the sample deployment ``dvpipe run`` runs without
  arguments) is copied into the built package as ``dvpipe/samples/``, so an installed dvpipe has it.
  An editable install (``pip install -e .``) uses the repository's ``samples/`` directly.
* The core requirements (``install_requires``; ``dependencies`` is dynamic in pyproject.toml) name
  the OpenCV distribution that is already installed where this build installs, so that pip does not
  add a second ``cv2`` next to it (mmcv installs ``opencv-python``): one of :data:`OPENCV_DISTRIBUTIONS`
  if present, else ``opencv-python-headless``; ``DVPIPE_OPENCV=<name>`` (or ``none``: require no
  OpenCV, for a ``cv2`` from Debian, conda or a source build) overrides the choice. The choice is made
  once, when the wheel is built: ``pip install .`` and an sdist build on the installing machine, but a
  prebuilt wheel keeps the choice of the machine that built it (README "OpenCV flavour").
"""
import json
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE_FILES = ("deployment.yaml", "rig.yaml", "scene.yaml", "README.md", "bev_model.py", "custom_stage.py")
_NATIVE = {"native_kernel": False, "reason": "not attempted"}

#: Distributions that install the ``cv2`` package, most capable first (the order picks one when an
#: environment already has several, which overwrite each other's ``cv2`` folder)
OPENCV_DISTRIBUTIONS = ("opencv-contrib-python", "opencv-python", "opencv-contrib-python-headless",
                        "opencv-python-headless")
OPENCV_DEFAULT = "opencv-python-headless"  # no GUI libraries needed: a bare install runs on a server
OPENCV_MIN = ">=4.8"
#: The core requirements but OpenCV (supported ranges: README "Install")
CORE_REQUIRES = [
    "numpy>=1.24",
    "av>=17.0",  # 12.x has no BitStreamFilterContext; 13-15.0 lose filtered packets' time_base; 15.1-16.x convert BT.709 to bgr24 as BT.601 (make test-lowest)
    "pillow>=10",
    "pyyaml>=6",
    "simplejpeg>=1.7",  # libjpeg-turbo decode into reused buffers: 2.3x cv2.imdecode at full size (docs/performance.md)
]

# Run by the interpreter this build installs for, with its own sys.path: pip's isolated build
# environment takes that interpreter's site-packages off sys.path and sets PYTHONNOUSERSITE
# (pip/_internal/build_env.py; build_env/virtual.py in pip 26), so importlib.metadata in this process
# sees only the build requirements (why an in-process check, as albumentations' setup.py had, still
# adds a second cv2 under pip; tried here: the slow test in tests/test_opencv_flavour.py then fails).
_LIST_DISTRIBUTIONS = ("import importlib.metadata as m, json; "
                       "print(json.dumps(sorted({(d.metadata['Name'] or '') for d in m.distributions()})))")


def _norm(name: str) -> str:
    """A distribution name as PEP 503 compares it (``OpenCV_Python`` -> ``opencv-python``)."""
    return "-".join(name.replace("_", "-").replace(".", "-").lower().split("-"))


def installed_opencv() -> list:
    """The OpenCV distributions installed where this build installs, in :data:`OPENCV_DISTRIBUTIONS`
    order; ``[]`` when none is, or when the interpreter cannot be asked (then the default is used)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    try:
        r = subprocess.run([sys.executable, "-c", _LIST_DISTRIBUTIONS], capture_output=True, text=True,
                           env=env, cwd=sys.prefix, timeout=120, check=True)  # cwd: not this folder's egg-info
        names = {_norm(n) for n in json.loads(r.stdout)}
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        print(f"setup.py: cannot list the installed distributions ({e}); requiring {OPENCV_DEFAULT}",
              file=sys.stderr)
        return []
    return [d for d in OPENCV_DISTRIBUTIONS if d in names]


def opencv_requirement() -> list:
    """``[<distribution>>=4.8]``: ``DVPIPE_OPENCV`` if set (``none``: ``[]``), else the installed
    OpenCV distribution, else ``opencv-python-headless``."""
    forced = os.environ.get("DVPIPE_OPENCV", "").strip()
    if forced:
        if forced.lower() == "none":
            return []
        if _norm(forced) not in OPENCV_DISTRIBUTIONS:
            raise SystemExit(f"setup.py: DVPIPE_OPENCV={forced!r} is not one of "
                             f"{', '.join(OPENCV_DISTRIBUTIONS)} or none (unset it to use the installed one)")
        return [_norm(forced) + OPENCV_MIN]
    found = installed_opencv()
    if len(found) > 1:
        print(f"setup.py: several OpenCV distributions are installed ({', '.join(found)}); they overwrite "
              f"each other's cv2 folder: requiring {found[0]}; uninstall the others and reinstall it",
              file=sys.stderr)
    return [(found[0] if found else OPENCV_DEFAULT) + OPENCV_MIN]


try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70 ships it in the wheel package
    from wheel.bdist_wheel import bdist_wheel


class BuildExt(build_ext):
    """Records whether the optional kernel compiled (``optional=True`` makes a failure a warning)."""

    def build_extension(self, ext):
        super().build_extension(ext)  # compiles, or skips when the output is newer than the sources
        built = os.path.exists(self.get_ext_fullpath(ext.name))
        _NATIVE.update(native_kernel=built, reason="" if built else "the C compiler failed (see the build log)")

    def run(self):
        if not self.extensions:
            return
        _NATIVE.update(native_kernel=False, reason="no C compiler or build failure")
        super().run()
        if not _NATIVE["native_kernel"]:  # a kernel left in build/ by an earlier build is not this build's
            for ext in self.extensions:
                stale = self.get_ext_fullpath(ext.name)
                if os.path.exists(stale):
                    os.remove(stale)
        if not getattr(self, "editable_mode", False) and not self.inplace:
            _write_build_info(self.build_lib)


class BuildPy(build_py):
    """Copies ``samples/`` into the built package as ``dvpipe/samples/`` (wheels and non-editable installs)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        src = os.path.join(HERE, "samples")
        if not os.path.isdir(src):  # building from an sdist that lacks them: MANIFEST.in grafts samples/
            raise SystemExit(f"setup.py: {src} is missing; the sample deployment cannot be packaged")
        dst = os.path.join(self.build_lib, "dvpipe", "samples")
        os.makedirs(dst, exist_ok=True)
        for name in SAMPLE_FILES:
            shutil.copy2(os.path.join(src, name), os.path.join(dst, name))
        shutil.copytree(os.path.join(src, "frames"), os.path.join(dst, "frames"), dirs_exist_ok=True)
        _write_build_info(self.build_lib)


class BdistWheel(bdist_wheel):
    """A wheel without the compiled kernel is pure (``py3-none-any``): its tag must not claim one."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False  # decided in run(), once build_ext has tried

    def run(self):
        self.run_command("build_ext")
        if not _NATIVE["native_kernel"]:  # build and install as a pure distribution: purelib, no .so
            self.root_is_pure = True
            self.distribution.ext_modules = []
        super().run()

    def get_tag(self):
        if not _NATIVE["native_kernel"]:
            return "py3", "none", "any"
        return super().get_tag()


def _write_build_info(root):
    folder = os.path.join(root, "dvpipe")
    if os.path.isdir(folder):
        with open(os.path.join(folder, "_build.json"), "w", encoding="utf-8") as f:
            json.dump(_NATIVE, f)


args = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"]
setup(install_requires=CORE_REQUIRES + opencv_requirement(),
      ext_modules=[Extension("dvpipe.backends._native", ["dvpipe/backends/_native.c"],
                             extra_compile_args=args, optional=True)],
      cmdclass={"build_ext": BuildExt, "build_py": BuildPy, "bdist_wheel": BdistWheel})
