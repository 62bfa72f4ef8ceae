"""Environment detection: both CANN install layouts, never raising, every gap with a reason."""
from __future__ import annotations

import platform

import pytest

from dvpipe.probe.environment import detect, find_cann_version

ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(platform.machine().lower(),
                                                                                           platform.machine().lower())


@pytest.mark.parametrize("layout,version", [
    # constraints.md §7: <= 8.3 layout, and the 8.5.0+ layout
    ("Ascend/ascend-toolkit/latest/{arch}-linux/ascend_toolkit_install.info", "8.0.RC1"),
    ("Ascend/cann/{arch}-linux/ascend_toolkit_install.info", "8.5.0"),
    ("Ascend/nnrt/latest/{arch}-linux/ascend_nnrt_install.info", "7.0.0"),
])
def test_cann_version_from_both_install_layouts(tmp_path, layout, version):
    path = tmp_path / layout.format(arch=ARCH)
    path.parent.mkdir(parents=True)
    path.write_text(f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001C15\n")
    found, where = find_cann_version({"HOME": str(tmp_path)})
    assert found == version and where == str(path)


def test_cann_version_from_ascend_home_path(tmp_path):
    path = tmp_path / "custom" / f"{ARCH}-linux" / "ascend_toolkit_install.info"
    path.parent.mkdir(parents=True)
    path.write_text("version=6.0.1\n")
    assert find_cann_version({"ASCEND_HOME_PATH": str(tmp_path / "custom"), "HOME": "/nonexistent"})[0] == "6.0.1"


def test_no_cann_is_a_reason_not_an_error(tmp_path):
    version, why = find_cann_version({"HOME": str(tmp_path)})
    assert version is None and "no CANN install-info file" in why


def test_report_never_raises_and_explains_gaps():
    rep = detect()
    names = [i.name for i in rep.items]
    for required in ("python", "opencv", "cpu_kernel", "pyav", "torch", "cuda", "torch_npu", "pyacl", "cann", "soc"):
        assert required in names
    assert all(i.detail for i in rep.items)
    assert "environment:" in str(rep)
    assert set(rep.to_dict()) == {"cann_version", "cann_source", "soc", "items"}
