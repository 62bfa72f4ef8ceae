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
"""
import json
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE_FILES = ("deployment.yaml", "rig.yaml", "scene.yaml", "README.md", "bev_model.py", "custom_stage.py")
_NATIVE = {"native_kernel": False, "reason": "not attempted"}

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
setup(ext_modules=[Extension("dvpipe.backends._native", ["dvpipe/backends/_native.c"],
                             extra_compile_args=args, optional=True)],
      cmdclass={"build_ext": BuildExt, "build_py": BuildPy, "bdist_wheel": BdistWheel})
