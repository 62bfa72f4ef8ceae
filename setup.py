"""Build of dvpipe's one compiled kernel (everything else is in pyproject.toml).

The extension is optional: where no C compiler is available the install still succeeds and the
CPU backend uses its OpenCV path instead (``dvpipe probe`` and plans say which one runs).
"""
import sys

from setuptools import Extension, setup

args = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"]
setup(ext_modules=[Extension("dvpipe.backends._native", ["dvpipe/backends/_native.c"],
                             extra_compile_args=args, optional=True)])
