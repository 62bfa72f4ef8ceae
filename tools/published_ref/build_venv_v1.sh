#!/bin/sh
# The harness's second venv, for mmdet3d 1.x's info layout: mmdet3d 1.4.0, mmengine 0.10.7, mmdet 3.2.0 and
# mmcv-lite 2.1.0 (mmcv 2.1 without compiled ops; mmdet3d 1.4 wants mmcv < 2.2), all pure-Python wheels from
# PyPI, on Python 3.11.
#   tools/published_ref/build_venv_v1.sh VENV [PYTHON]
set -eu
VENV=$1
PY=${2:-python3.11}
"$PY" -m venv "$VENV"
P="$VENV/bin/python"
C="$VENV/constraints.txt"
echo "numpy==1.23.5" > "$C"
"$P" -m pip install -q --upgrade pip
"$P" -m pip install -q -c "$C" wheel 'numpy==1.23.5' 'torch==2.13.0'
"$P" -m pip install -q -c "$C" --no-deps 'torchvision==0.28.0'
"$P" -m pip install -q -c "$C" 'mmengine==0.10.7' 'mmcv-lite==2.1.0' pyquaternion 'opencv-python-headless==4.8.0.76' \
    terminaltables pyyaml six 'matplotlib<3.9' pycocotools 'numba<0.59' trimesh plyfile 'scipy<1.12' 'shapely<2.1' \
    'networkx<3.3' prettytable 'scikit-learn<1.4' tqdm cachetools pandas pillow scikit-image
"$P" -m pip install -q -c "$C" --no-deps lyft_dataset_sdk nuscenes-devkit 'mmdet==3.2.0' 'mmdet3d==1.4.0'
"$P" -c "import sys; sys.path.insert(0, '$(dirname "$0")'); import _stubs, mmdet3d.datasets; print('mmdet3d', mmdet3d.__version__, 'imports')"
touch "$VENV/.published-ref-ok"
