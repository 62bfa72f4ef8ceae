#!/usr/bin/env bash
# dvpipe on aarch64 (the CPU of Ascend hosts), under qemu-user, with Debian bookworm's arm64 Python.
#
#   tools/native_aarch64.sh                      # the compiled kernel: tools/native_check.py (~30 s)
#   tools/native_aarch64.sh tests/backends/test_cpu.py tests/test_pipeline.py ...
#                                                # also these test files, with PyPI's aarch64 wheels
#
# Needs root, apt, and network access to deb.debian.org and PyPI; WORK (default /tmp/dvpipe-aarch64)
# caches the arm64 sysroot and wheels. Emulation checks results, not speed. Tests that start a
# subprocess fail under qemu-user without binfmt_misc (Exec format error): that is the emulator.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/dvpipe-aarch64}
ROOT=$WORK/rootfs
PYTHON=${PYTHON:-python3}   # the host's, for pip downloads
apt-get install -y -q gcc-aarch64-linux-gnu qemu-user-static debootstrap >/dev/null
if [ ! -x "$ROOT/usr/bin/python3.11" ]; then
    # first stage only (no arm64 code runs): it downloads python3, numpy and the headers with their
    # dependencies; unpacking every downloaded package gives a sysroot qemu can run from
    debootstrap --arch=arm64 --foreign --variant=minbase --include=python3,python3-numpy,libpython3.11-dev \
        bookworm "$ROOT" http://deb.debian.org/debian >"$WORK.log" 2>&1
    for deb in "$ROOT"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$ROOT"; done
    ln -sf blas/libblas.so.3 "$ROOT/usr/lib/aarch64-linux-gnu/libblas.so.3"        # update-alternatives' links
    ln -sf lapack/liblapack.so.3 "$ROOT/usr/lib/aarch64-linux-gnu/liblapack.so.3"
fi
SO=_native.cpython-311-aarch64-linux-gnu.so
mkdir -p "$WORK/mod"
# the flags of setup.py; the sysroot supplies Python's headers (pyconfig.h for aarch64)
aarch64-linux-gnu-gcc -O3 -ffp-contract=off -fPIC -shared -Wall -Wextra \
    -I"$ROOT/usr/include/python3.11" -idirafter "$ROOT/usr/include" dvpipe/backends/_native.c -o "$WORK/mod/$SO"
echo "NEON vector instructions: $(aarch64-linux-gnu-objdump -d "$WORK/mod/$SO" | grep -cE '\bld3\b|v[0-9]+\.4s'),"\
     "fused multiply-adds: $(aarch64-linux-gnu-objdump -d "$WORK/mod/$SO" | grep -cE '\bfmla\b|\bfmadd\b')"
run() { qemu-aarch64-static -L "$ROOT" "$ROOT/usr/bin/python3.11" "$@"; }
cp tools/native_check.py "$WORK/native_check.py"
run "$WORK/native_check.py" "$WORK/mod"
[ $# -eq 0 ] && exit 0

# the test files: dvpipe's dependencies as PyPI's aarch64 wheels, and a copy of this checkout with the
# aarch64 kernel in place (torch is left out: its tests skip)
if [ ! -d "$WORK/site/cv2" ]; then
    "$PYTHON" -m pip install -q --target "$WORK/site" --python-version 3.11 --implementation cp --only-binary=:all: \
        --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
        "numpy>=1.24" "opencv-python-headless>=4.8" "av>=12" "pillow>=10" "pyyaml>=6" "simplejpeg>=1.7" pytest
fi
rm -rf "$WORK/src" && mkdir -p "$WORK/src"
git ls-files -z | xargs -0 cp --parents -t "$WORK/src"
cp "$WORK/mod/$SO" "$WORK/src/dvpipe/backends/"
cd "$WORK/src" && PYTHONPATH="$WORK/site:$WORK/src" run -m pytest -q -p no:cacheprovider "$@"
