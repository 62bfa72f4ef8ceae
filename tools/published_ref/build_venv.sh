#!/bin/sh
# The harness's venv: mmdet3d 0.17.1, mmcv 1.4.0, mmdet 2.14.0 (+ mmsegmentation 0.14.1, which mmdet3d
# 0.17.1 imports) from PyPI on Python 3.11, without compiled ops (see _stubs.py for what stands in).
#   tools/published_ref/build_venv.sh VENV [PYTHON]
# mmcv 1.4.0's setup.py needs pkg_resources (setuptools < 70) and mmdet3d's needs torch at build time,
# so the sdists build without isolation in the venv itself; mmdet3d 0.17.1's setup.py compiles its
# CUDA/C++ ops, so its sdist is downloaded and its Python package copied into site-packages unbuilt.
# numpy 1.23.5: the newest numpy that keeps np.long / np.int, which mmdet3d 0.17.1 uses.
set -eu
VENV=$1
PY=${2:-python3.11}
"$PY" -m venv "$VENV"
P="$VENV/bin/python"
C="$VENV/constraints.txt"
echo "numpy==1.23.5" > "$C"
"$P" -m pip install -q --upgrade pip
"$P" -m pip install -q -c "$C" wheel 'numpy==1.23.5' 'torch==2.13.0'
# after torch, whose setuptools floor is for building extensions (nothing here builds one): pip warns
"$P" -m pip install -q --no-deps 'setuptools<70' 2>&1 | grep -v -e "dependency resolver" -e "requires setuptools" || true
"$P" -m pip install -q -c "$C" --no-deps 'torchvision==0.28.0'
"$P" -m pip install -q -c "$C" addict 'yapf==0.32.0' pyquaternion 'opencv-python-headless==4.8.0.76' terminaltables \
    pyyaml six 'matplotlib<3.9' pycocotools 'numba<0.59' trimesh plyfile 'scipy<1.12' 'shapely<2.1' 'networkx<3.3' \
    prettytable 'scikit-learn<1.4' tqdm cachetools pandas pillow
"$P" -m pip install -q -c "$C" --no-deps lyft_dataset_sdk nuscenes-devkit
"$P" -m pip install -q -c "$C" --no-deps --no-build-isolation 'mmcv==1.4.0' 'mmdet==2.14.0' 'mmsegmentation==0.14.1'
D=$(mktemp -d)
"$P" -m pip download -q --no-deps --no-build-isolation --no-binary :all: 'mmdet3d==0.17.1' -d "$D"
tar -xzf "$D"/mmdet3d-0.17.1.tar.gz -C "$D"
SP=$("$P" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$SP/mmdet3d"
cp -r "$D/mmdet3d-0.17.1/mmdet3d" "$SP/mmdet3d"
rm -rf "$D"
"$P" -c "import sys; sys.path.insert(0, '$(dirname "$0")'); import _stubs, mmdet3d.datasets; print('mmdet3d', mmdet3d.__version__, 'imports')"
touch "$VENV/.published-ref-ok"
