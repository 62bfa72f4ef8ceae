#!/usr/bin/env python3
"""Run a command on a Linux virtual machine that has V4L2 cameras: the kernel's own virtual video
driver, vivid (drivers/media/test-drivers/vivid), in a QEMU guest that sees this machine's files.

    python tools/vivid_vm/run.py [--vivid "n_devs=2 ..."] [--timeout 300] -- COMMAND [ARG ...]

COMMAND runs as root in the guest, in the current directory, with this machine's root file system
and the current directory mounted read-only (the project's virtual environment included) and a fresh
/tmp (so nothing else of this machine's /tmp); its output is printed, and its exit status is this
program's. Nothing on this machine is written but the cache.

The guest runs under QEMU's software emulation (TCG): slower than KVM (Python starts in ~8 s), but it
needs no virtualisation from the host (the machines this project is tested on cannot nest KVM).
What it needs, and takes where it can: ``qemu-system-x86_64`` (``apt-get install qemu-system-x86``),
gcc with a static C library (the guest's init, ``init.c``), and a Debian kernel package
(``apt-get download``'s ``linux-image-amd64`` image, ~70 MB, cached in ``~/.cache/dvpipe/vivid-vm``).
Exit status 3 and one line when something is missing.

vivid's parameters (``--vivid``; the kernel's Documentation/admin-guide/media/vivid.rst): by default
``n_devs=1 node_types=0x1 input_types=0x0`` (one capture node, a webcam input); the guest also loads
everything vivid depends on, found from the modules' own ``depends=`` lists.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("DVPIPE_VIVID_VM_CACHE", Path.home() / ".cache" / "dvpipe" / "vivid-vm"))
#: modules the guest needs besides vivid: 9p over virtio for the host's files
BASE_MODULES = ("virtio_pci", "9pnet_virtio", "9p")
DEFAULT_VIVID = "n_devs=1 node_types=0x1 input_types=0x0"
_P9_OPTIONS = "trans=virtio,version=9p2000.L,cache=loose,msize=512000"


class Missing(Exception):
    """Something the machine needs is not here (the message says what to install)."""


def kernel_package() -> Path:
    """The unpacked Debian kernel package (cached): ``boot/vmlinuz-*`` and ``lib/modules/*``."""
    root = CACHE / "kernel"
    if list(root.glob("boot/vmlinuz-*")):
        return root
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise Missing("no kernel cached and no apt-get/dpkg-deb to fetch Debian's linux-image-amd64")
    CACHE.mkdir(parents=True, exist_ok=True)
    depends = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True).stdout
    names = [w.split()[-1] for w in depends.splitlines() if "Depends:" in w and "linux-image-" in w]
    if not names:
        raise Missing("apt-cache knows no linux-image-amd64 (run apt-get update)")
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        got = subprocess.run(["apt-get", "download", names[0]], cwd=tmp, capture_output=True, text=True)
        debs = list(Path(tmp).glob("*.deb"))
        if got.returncode != 0 or not debs:
            raise Missing(f"apt-get download {names[0]} failed: {got.stderr.strip().splitlines()[-1:]}")
        unpacked = Path(tmp) / "kernel"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], check=True)
        unpacked.rename(root)
    return root


def module_files(kernel: Path, wanted: list[str]) -> list[Path]:
    """``wanted`` and every module they depend on (``depends=`` in each module's .modinfo), in an
    order that loads each module after its dependencies."""
    index = {p.name[:-3].replace("-", "_"): p for p in kernel.glob("lib/modules/*/kernel/**/*.ko")}
    order: list[Path] = []

    def add(name: str) -> None:
        key = name.replace("-", "_")
        path = index.get(key)
        if path is None:
            raise Missing(f"the kernel package has no module {name}")
        if path in order:
            return
        for dep in _depends(path):
            add(dep)
        order.append(path)

    for name in wanted:
        add(name)
    return order


def _depends(module: Path) -> list[str]:
    for field in module.read_bytes().split(b"\0"):
        if field.startswith(b"depends="):
            return [d for d in field[8:].decode().split(",") if d]
    return []


def _cpio_entry(name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0), ino: int = 0) -> bytes:
    """One record of a ``newc`` cpio archive (the initramfs format)."""
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name) + 1, 0]
    head = b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0"
    head += b"\0" * (-len(head) % 4)
    return head + data + b"\0" * (-len(data) % 4)


def initramfs(init: Path, modules: list[Path], vivid_args: str) -> bytes:
    """The guest's initramfs: ``/init``, ``/dev/console``, ``/modules/NN-name.ko`` in load order."""
    entries = [("dev", 0o40755, b""), ("newroot", 0o40755, b""), ("modules", 0o40755, b""),
               ("init", 0o100755, init.read_bytes())]
    for i, m in enumerate(modules):
        stem = f"modules/{i:02d}-{m.name[:-3]}"
        entries.append((stem + ".ko", 0o100644, m.read_bytes()))
        if m.name == "vivid.ko":
            entries.append((stem + ".args", 0o100644, vivid_args.encode()))
    out = b"".join(_cpio_entry(n, mode, data, ino=k + 1) for k, (n, mode, data) in enumerate(entries))
    out += _cpio_entry("dev/console", 0o20600, rdev=(5, 1), ino=len(entries) + 1)
    return out + _cpio_entry("TRAILER!!!", 0)


def build_init() -> Path:
    """``init.c`` compiled statically (cached by the source's modification time)."""
    src = HERE / "init.c"
    out = CACHE / "init"
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    if shutil.which("gcc") is None:
        raise Missing("gcc is needed to build the guest's init")
    CACHE.mkdir(parents=True, exist_ok=True)
    got = subprocess.run(["gcc", "-static", "-O2", "-o", str(out), str(src)], capture_output=True, text=True)
    if got.returncode != 0:
        raise Missing(f"cannot build the guest's init (a static C library is needed): {got.stderr.strip()[:300]}")
    return out


def needs() -> str:
    """QEMU's path when this machine can run the guest; :class:`Missing` says what it lacks (without
    downloading anything)."""
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        raise Missing("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
    if shutil.which("gcc") is None:
        raise Missing("gcc is needed to build the guest's init")
    if not list((CACHE / "kernel").glob("boot/vmlinuz-*")) and shutil.which("apt-get") is None:
        raise Missing("no kernel cached and no apt-get to fetch Debian's linux-image-amd64")
    return qemu


def run(command: list[str], vivid_args: str = DEFAULT_VIVID, timeout_s: float = 300.0, memory_mb: int = 2048,
        quiet: bool = False) -> int:
    """Run ``command`` on the guest (see the module's docstring); its exit status."""
    qemu = needs()
    kernel = kernel_package()
    modules = module_files(kernel, list(BASE_MODULES) + ["vivid"])
    with tempfile.TemporaryDirectory(prefix="dvpipe-vm-") as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        initrd = Path(tmp) / "initrd.cpio"
        initrd.write_bytes(initramfs(build_init(), modules, vivid_args))
        cwd = shlex.quote(os.getcwd())
        # the current directory is shared on its own too: the guest's /tmp is its own, and a checkout
        # may live under this machine's /tmp
        (out / "run.sh").write_text(f"mkdir -p {cwd} && mount -t 9p -o ro,{_P9_OPTIONS} cwd {cwd} && cd {cwd} "
                                    "|| exit 126\n"
                                    f"exec {' '.join(shlex.quote(c) for c in command)} </dev/null\n")
        vmlinuz = next(kernel.glob("boot/vmlinuz-*"))
        args = [qemu, "-accel", "tcg", "-cpu", "max", "-smp", str(os.cpu_count() or 1), "-m", str(memory_mb),
                "-nodefaults", "-nographic", "-serial", "stdio", "-no-reboot", "-nic", "none",
                "-kernel", str(vmlinuz), "-initrd", str(initrd),
                "-append", "console=ttyS0 panic=-1 quiet loglevel=3",
                "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
                "-virtfs", f"local,path={os.getcwd()},mount_tag=cwd,security_model=none,readonly=on,multidevs=remap",
                "-virtfs", f"local,path={out},mount_tag=out,security_model=none"]
        try:
            subprocess.run(args, timeout=timeout_s, stdout=subprocess.DEVNULL if quiet else None, check=False)
        except subprocess.TimeoutExpired:
            print(f"vivid-vm: the guest did not finish in {timeout_s:g} s", file=sys.stderr)
            return 124
        rc = out / "rc"
        if not rc.exists():
            print("vivid-vm: the guest ended without running the command (see its console above)", file=sys.stderr)
            return 125
        return int(rc.read_text().strip() or 125)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vivid", default=DEFAULT_VIVID, help=f"vivid's module parameters (default: {DEFAULT_VIVID})")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before the guest is stopped")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    a = p.parse_args(argv)
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        p.error("a command is needed: -- COMMAND [ARG ...]")
    try:
        return run(command, a.vivid, a.timeout)
    except Missing as e:
        print(f"vivid-vm: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
