"""Live memory sources behind one small interface, chosen by platform.

Every source has a ``name`` (the ``source`` label of the runtime's metrics), a ``kind``
(``"device"`` or ``"host"``) and ``sample() -> MemorySample``. A sample that cannot be taken
raises :class:`MemorySourceError`; the health monitor logs it and skips that source for the
round, so a flaky ``npu-smi`` never takes the pod down.

What each source measures, and why:

* :class:`NpuSmiSource` (Ascend): runs ``npu-smi info`` and sums HBM used / total over the
  pod's chips. It does not match processes by PID: the process section lists *host* PIDs, which
  differ from the container's PID namespace, and names are often blank in containers. Which chips
  are the pod's: ``devices``, the physical device ids from ``ASCEND_VISIBLE_DEVICES`` /
  ``ASCEND_RT_VISIBLE_DEVICES`` (:mod:`ascend_runtime.memory.devices`), so that on a node shared
  by several pods a neighbour's chips never count; without them, every chip the container sees
  (with the Ascend Docker Runtime, only its own). The chips' totals are the engine's (plus a few
  hundred MB of driver context per chip, constant). ``per_process`` carries the host-PID map for
  diagnosis only.
* :class:`DcmiSource` (Ascend, optional): the same numbers through ``libdcmi.so``
  (``dcmi_get_card_list``, ``dcmi_get_device_num_in_card``, ``dcmi_get_device_hbm_info``), as
  Ascend's npu-exporter reads them, without a subprocess per sample. DCMI enumerates every card
  of the node, so with ``devices`` each chip's physical id (``dcmi_get_device_logic_id``, then
  ``dcmi_get_device_phyid_from_logicid``) decides whether it counts. Chips without HBM (310P)
  are not supported by that call; :func:`select_sources` falls back to npu-smi.
* :class:`NvmlSource` (CUDA): ``nvmlDeviceGetMemoryInfo`` summed over the visible GPUs
  (nvidia-ml-py, the ``cuda`` extra; imported when the source is built).
* :class:`HostRssSource` (every platform): RSS of the engine process and all its descendants
  (vLLM's engine core and workers are children), capacity = the cgroup memory limit when one is
  set, else the machine's memory. Processes that exit during the walk are skipped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import psutil

from ascend_runtime.memory.npusmi import NpuSmiParseError, parse_npu_smi

__all__ = [
    "DcmiSource",
    "HostRssSource",
    "MemorySample",
    "MemorySource",
    "MemorySourceError",
    "NpuSmiSource",
    "NvmlSource",
    "cgroup_memory_limit_mb",
    "select_sources",
]

log = logging.getLogger(__name__)
MB = 1024 * 1024
SourceKind = Literal["device", "host"]


class MemorySourceError(RuntimeError):
    """One sample could not be taken; the message says which source and why."""


@dataclass(frozen=True)
class MemorySample:
    """Memory in MB. ``total_mb`` is the capacity when known; ``per_process`` maps PID -> MB."""

    used_mb: float
    total_mb: float | None = None
    per_process: dict[int, float] | None = None


@runtime_checkable
class MemorySource(Protocol):
    name: str
    kind: SourceKind

    def sample(self) -> MemorySample: ...


# --------------------------------------------------------------------------------------------
# Ascend: npu-smi


Runner = Callable[[Sequence[str]], str]


def run_command(argv: Sequence[str], timeout_s: float = 10.0) -> str:
    """Run a command and return its stdout; raise :class:`MemorySourceError` on any failure."""

    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise MemorySourceError(f"{argv[0]} not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise MemorySourceError(f"{' '.join(argv)} did not answer within {timeout_s:.0f}s") from None
    except OSError as error:
        raise MemorySourceError(f"cannot run {' '.join(argv)}: {error.strerror}") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        raise MemorySourceError(f"{' '.join(argv)} exited with {done.returncode}: {detail[0]}")
    return done.stdout


class NpuSmiSource:
    """HBM of the pod's Ascend chips, from ``npu-smi info``."""

    kind: SourceKind = "device"

    def __init__(
        self,
        runner: Runner = run_command,
        devices: Iterable[int] | None = None,
        command: Sequence[str] = ("npu-smi", "info"),
        name: str = "npu-hbm",
    ) -> None:
        self._runner = runner
        self._devices = None if devices is None else frozenset(devices)
        self._command = tuple(command)
        self.name = name

    def sample(self) -> MemorySample:
        text = self._runner(self._command)
        try:
            report = parse_npu_smi(text)
        except NpuSmiParseError as error:
            raise MemorySourceError(f"{' '.join(self._command)}: {error}") from None
        chips = list(report.restricted_to(self._devices).chips)
        if not chips:
            wanted = "no chip" if self._devices is None else f"none of the pod's devices {sorted(self._devices)}"
            raise MemorySourceError(f"{' '.join(self._command)} shows {wanted}")
        if any(c.hbm_used_mb is None or c.hbm_total_mb is None for c in chips):
            raise MemorySourceError(f"{' '.join(self._command)} gives no used/total memory for some chips")
        seen = {(c.npu, c.chip) for c in chips}
        per_process: dict[int, float] = {}
        for proc in report.processes:
            if (proc.npu, proc.chip) in seen:
                per_process[proc.pid] = per_process.get(proc.pid, 0.0) + proc.memory_mb
        return MemorySample(
            used_mb=float(sum(c.hbm_used_mb or 0 for c in chips)),
            total_mb=float(sum(c.hbm_total_mb or 0 for c in chips)),
            per_process=per_process,
        )


# --------------------------------------------------------------------------------------------
# Ascend: libdcmi through ctypes


class _DcmiHbmInfo(ctypes.Structure):
    # struct dcmi_hbm_info in dcmi_interface_api.h (MB, as npu-exporter exports them).
    _fields_ = [
        ("memory_size", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("memory_usage", ctypes.c_ulonglong),
        ("temp", ctypes.c_int),
        ("bandwith_util_rate", ctypes.c_uint),
    ]


#: Where the driver installs libdcmi.so (the device plugin mounts /usr/local/dcmi).
DCMI_PATHS = ("/usr/local/dcmi/libdcmi.so", "/usr/local/Ascend/driver/lib64/driver/libdcmi.so")
_MAX_CARDS = 64


class DcmiSource:
    """HBM of the pod's Ascend chips through ``libdcmi.so`` (no subprocess per sample).

    Written from the public header (``dcmi_interface_api.h``); not yet run on an NPU. ``lib``
    replaces the loaded library (tests).
    """

    kind: SourceKind = "device"

    def __init__(
        self,
        library: str | None = None,
        devices: Iterable[int] | None = None,
        name: str = "npu-hbm",
        lib: Any = None,
    ) -> None:
        self._devices = None if devices is None else frozenset(devices)
        self.name = name
        self._lib = lib if lib is not None else self._load(library)
        self._check("dcmi_init", self._lib.dcmi_init())

    def _load(self, library: str | None) -> Any:
        path = (
            library
            or next((p for p in DCMI_PATHS if Path(p).exists()), None)
            or ctypes.util.find_library("dcmi")
        )
        if not path:
            raise MemorySourceError(
                f"libdcmi.so not found (looked in {', '.join(DCMI_PATHS)} and the loader path)"
            )
        try:
            lib = ctypes.CDLL(path)
        except OSError as error:
            raise MemorySourceError(f"cannot load {path}: {error}") from None
        int_p = ctypes.POINTER(ctypes.c_int)
        lib.dcmi_init.argtypes, lib.dcmi_init.restype = [], ctypes.c_int
        lib.dcmi_get_card_list.argtypes = [int_p, int_p, ctypes.c_int]
        lib.dcmi_get_card_list.restype = ctypes.c_int
        lib.dcmi_get_device_num_in_card.argtypes = [ctypes.c_int, int_p]
        lib.dcmi_get_device_num_in_card.restype = ctypes.c_int
        lib.dcmi_get_device_hbm_info.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_DcmiHbmInfo)]
        lib.dcmi_get_device_hbm_info.restype = ctypes.c_int
        if self._devices is not None:
            try:
                lib.dcmi_get_device_logic_id.argtypes = [int_p, ctypes.c_int, ctypes.c_int]
                lib.dcmi_get_device_logic_id.restype = ctypes.c_int
                lib.dcmi_get_device_phyid_from_logicid.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_uint)]
                lib.dcmi_get_device_phyid_from_logicid.restype = ctypes.c_int
            except AttributeError as error:  # an old driver: npu-smi filters instead
                raise MemorySourceError(f"{path} cannot map chips to device ids: {error}") from None
        return lib

    @staticmethod
    def _check(call: str, code: int) -> None:
        if code != 0:
            raise MemorySourceError(f"{call} failed with DCMI error {code}")

    def chips(self) -> list[tuple[int, int]]:
        count = ctypes.c_int()
        cards = (ctypes.c_int * _MAX_CARDS)()
        self._check(
            "dcmi_get_card_list", self._lib.dcmi_get_card_list(ctypes.byref(count), cards, _MAX_CARDS)
        )
        found = []
        for card in cards[: count.value]:
            per_card = ctypes.c_int()
            self._check(
                "dcmi_get_device_num_in_card",
                self._lib.dcmi_get_device_num_in_card(card, ctypes.byref(per_card)),
            )
            found.extend((card, device) for device in range(per_card.value))
        return found

    def physical_id(self, card: int, device: int) -> int:
        logic = ctypes.c_int()
        self._check(f"dcmi_get_device_logic_id({card}, {device})",
                    self._lib.dcmi_get_device_logic_id(ctypes.byref(logic), card, device))
        physical = ctypes.c_uint()
        self._check(f"dcmi_get_device_phyid_from_logicid({logic.value})",
                    self._lib.dcmi_get_device_phyid_from_logicid(logic.value, ctypes.byref(physical)))
        return physical.value

    def sample(self) -> MemorySample:
        used = total = 0.0
        chips = [c for c in self.chips() if self._devices is None or self.physical_id(*c) in self._devices]
        if not chips:
            wanted = "no chip" if self._devices is None else f"none of the pod's devices {sorted(self._devices)}"
            raise MemorySourceError(f"DCMI lists {wanted}")
        for card, device in chips:
            info = _DcmiHbmInfo()
            self._check(
                f"dcmi_get_device_hbm_info({card}, {device})",
                self._lib.dcmi_get_device_hbm_info(card, device, ctypes.byref(info)),
            )
            used += info.memory_usage
            total += info.memory_size
        return MemorySample(used_mb=used, total_mb=total)


# --------------------------------------------------------------------------------------------
# CUDA: NVML


class NvmlSource:
    """Device memory of the visible GPUs through NVML (``pip install 'ascend-llm[cuda]'``)."""

    kind: SourceKind = "device"

    def __init__(
        self, indices: Iterable[int] | None = None, nvml: Any = None, name: str = "cuda-memory"
    ) -> None:
        if nvml is None:
            try:
                import pynvml as nvml  # nvidia-ml-py
            except ImportError:
                raise MemorySourceError(
                    "NVML bindings missing: install nvidia-ml-py (pip install 'ascend-llm[cuda]')"
                ) from None
        self._nvml = nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as error:
            raise MemorySourceError(f"NVML init failed: {error}") from None
        self._indices = list(range(count)) if indices is None else list(indices)
        self.name = name

    def sample(self) -> MemorySample:
        nvml = self._nvml
        used = total = 0.0
        per_process: dict[int, float] = {}
        try:
            for index in self._indices:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                info = nvml.nvmlDeviceGetMemoryInfo(handle)
                used += info.used / MB
                total += info.total / MB
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.usedGpuMemory is not None:
                        per_process[proc.pid] = per_process.get(proc.pid, 0.0) + proc.usedGpuMemory / MB
        except nvml.NVMLError as error:
            raise MemorySourceError(f"NVML: {error}") from None
        return MemorySample(used_mb=used, total_mb=total, per_process=per_process)


# --------------------------------------------------------------------------------------------
# Host RSS


def cgroup_memory_limit_mb(root: str = "/sys/fs/cgroup") -> float | None:
    """The container's memory limit (cgroup v2 ``memory.max`` or v1 ``memory.limit_in_bytes``)."""

    for name in ("memory.max", "memory/memory.limit_in_bytes"):
        try:
            text = (Path(root) / name).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):  # v1 reports "no limit" as a huge number
            return int(text) / MB
    return None


class HostRssSource:
    """RSS of a process and all its descendants; capacity = cgroup limit or machine memory."""

    kind: SourceKind = "host"

    def __init__(self, root_pid: int, name: str = "host-rss", capacity_mb: float | None = None) -> None:
        self.root_pid = root_pid
        self.name = name
        self._capacity_mb = capacity_mb

    def capacity_mb(self) -> float:
        if self._capacity_mb is None:
            limit = cgroup_memory_limit_mb()
            machine = psutil.virtual_memory().total / MB
            self._capacity_mb = min(limit, machine) if limit else machine
        return self._capacity_mb

    def sample(self) -> MemorySample:
        try:
            root = psutil.Process(self.root_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            raise MemorySourceError(f"process {self.root_pid} is gone") from None
        except psutil.AccessDenied:
            raise MemorySourceError(f"not allowed to read process {self.root_pid}") from None
        per_process: dict[int, float] = {}
        for proc in tree:
            try:
                per_process[proc.pid] = proc.memory_info().rss / MB
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue  # exited during the walk: normal while workers come and go
            except psutil.AccessDenied:
                continue
        if self.root_pid not in per_process:
            raise MemorySourceError(f"process {self.root_pid} exited while being sampled")
        return MemorySample(
            used_mb=sum(per_process.values()), total_mb=self.capacity_mb(), per_process=per_process
        )


# --------------------------------------------------------------------------------------------
# Selection


def select_sources(
    platform: str,
    engine_pid: int,
    *,
    devices: Iterable[int] | None = None,
    prefer_dcmi: bool = True,
    runner: Runner = run_command,
) -> list[MemorySource]:
    """The sources for a platform (``ascend``/``npu``, ``cuda``/``gpu``, ``cpu``); host RSS always.

    ``devices``: the pod's physical NPU ids (:func:`~ascend_runtime.memory.devices.visible_devices`).

    A device source that cannot be set up here (no npu-smi, no NVML) is left out with a warning:
    the host source still guards the engine.
    """

    sources: list[MemorySource] = []
    platform = platform.lower()
    if platform in ("ascend", "npu"):
        device: MemorySource | None = None
        if prefer_dcmi:
            try:
                device = DcmiSource(devices=devices)
            except MemorySourceError as error:
                log.info("DCMI not usable (%s); reading npu-smi instead", error)
        if device is None:
            if runner is run_command and shutil.which("npu-smi") is None:
                log.warning("npu-smi not found on PATH: device memory is not watched")
            else:
                device = NpuSmiSource(runner=runner, devices=devices)
        if device is not None:
            sources.append(device)
    elif platform in ("cuda", "gpu"):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        indices = None
        if visible and all(part.strip().isdigit() for part in visible.split(",")):
            indices = [int(part) for part in visible.split(",")]
        try:
            sources.append(NvmlSource(indices=indices))
        except MemorySourceError as error:
            log.warning("device memory is not watched: %s", error)
    elif platform != "cpu":
        raise ValueError(f"unknown platform {platform!r}: expected 'ascend', 'cuda' or 'cpu'")
    sources.append(HostRssSource(engine_pid))
    return sources
