#!/usr/bin/env bash
# Build dvpipe's compiled kernel for aarch64 (the CPU of Ascend hosts) and run tools/native_check.py
# on it under qemu-user, with Debian bookworm's arm64 Python and numpy. Needs root, apt and network
# access to deb.debian.org; takes a few minutes the first time (the arm64 packages are cached in
# $WORK). Emulation checks results, not speed.
#
#   sudo tools/native_aarch64.sh            # WORK=/tmp/dvpipe-aarch64 by default
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/dvpipe-aarch64}
ROOT=$WORK/rootfs
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
mkdir -p "$WORK/mod"
# the flags of setup.py; the sysroot supplies Python's headers (pyconfig.h for aarch64)
aarch64-linux-gnu-gcc -O3 -ffp-contract=off -fPIC -shared -Wall -Wextra \
    -I"$ROOT/usr/include/python3.11" -idirafter "$ROOT/usr/include" \
    dvpipe/backends/_native.c -o "$WORK/mod/_native.cpython-311-aarch64-linux-gnu.so"
echo "NEON vector instructions: $(aarch64-linux-gnu-objdump -d "$WORK/mod/"_native*.so | grep -cE '\bld3\b|v[0-9]+\.4s'),"\
     "fused multiply-adds: $(aarch64-linux-gnu-objdump -d "$WORK/mod/"_native*.so | grep -cE '\bfmla\b|\bfmadd\b')"
cp tools/native_check.py "$WORK/native_check.py"
qemu-aarch64-static -L "$ROOT" "$ROOT/usr/bin/python3.11" "$WORK/native_check.py" "$WORK/mod"
