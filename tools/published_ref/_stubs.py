"""What the harness's venv lacks, and how it is stood in for (imported before mmcv / mmdet3d).

* Compiled ops: mmcv 1.4.0 is installed without its ops (``mmcv``, not ``mmcv-full``) and mmdet3d
  0.17.1's CUDA/C++ extensions are not built, but ``mmdet.core`` / ``mmdet3d.ops`` import them at
  module level. ``mmcv._ext`` and mmdet3d's extension modules (the names in its ``setup.py``) are
  provided as modules whose every function raises when called: the data pipeline calls none
  (a run that completes is the proof).
* ``numba.errors``: mmdet3d 0.17.1 pins numba 0.48, which has no Python 3.11 build; newer numba
  keeps the same ``NumbaPerformanceWarning`` in ``numba.core.errors``.
* ``torchvision``: PyPI's wheels are CUDA builds whose ops do not load against the CPU torch; the
  package's ``__init__`` (which registers those ops) is bypassed and its pure-Python modules
  (``torchvision.transforms``, what BEVDet's loader uses) are imported as they are.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

#: mmdet3d 0.17.1 setup.py's extension modules
MMDET3D_EXTENSIONS = {"sparse_conv_ext", "iou3d_cuda", "voxel_layer", "roiaware_pool3d_ext", "ball_query_ext",
                      "knn_ext", "assign_score_withk_ext", "group_points_ext", "interpolate_ext",
                      "furthest_point_sample_ext", "gather_points_ext"}


class _NoOps(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def missing(*args, **kwargs):
            raise RuntimeError(f"compiled op {self.__name__}.{name} was called; the harness venv has no compiled ops")
        return missing


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "mmcv._ext" or (name.startswith("mmdet3d.ops.") and name.rsplit(".", 1)[-1] in MMDET3D_EXTENSIONS):
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        return _NoOps(spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())

import numba.core.errors  # noqa: E402

sys.modules.setdefault("numba.errors", numba.core.errors)

_tv = importlib.util.find_spec("torchvision")
if _tv is not None and "torchvision" not in sys.modules:
    _pkg = types.ModuleType("torchvision")
    _pkg.__path__ = list(_tv.submodule_search_locations)
    _pkg.__file__ = _tv.origin
    sys.modules["torchvision"] = _pkg
    import torchvision.version  # noqa: E402

    _pkg.__version__ = torchvision.version.__version__
    import torchvision.transforms  # noqa: E402,F401
