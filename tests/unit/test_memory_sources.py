"""Memory sources: npu-smi (fake runner over real samples), NVML (fake module), host RSS of a
real process tree, cgroup limits, source selection, and the health monitor that drives them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from ascend_runtime.config import HealthConfig, LeakLimits
from ascend_runtime.health.monitor import HealthMonitor
from ascend_runtime.memory.sources import (
    HostRssSource,
    MemorySample,
    MemorySource,
    MemorySourceError,
    NpuSmiSource,
    NvmlSource,
    cgroup_memory_limit_mb,
    select_sources,
)

# The real samples of ../shared/reference/fixtures, copied into the repository (CI has no network).
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "reference-fixtures" / "npu-smi"


def runner_for(name: str):
    text = (FIXTURES / name).read_text(encoding="utf-8")
    calls: list[tuple[str, ...]] = []

    def run(argv):
        calls.append(tuple(argv))
        return text

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_npu_smi_source_sums_visible_chips_and_maps_host_pids() -> None:
    run = runner_for("info-a3-4chip-namedproc-nputop.txt")
    sample = NpuSmiSource(runner=run).sample()
    assert run.calls == [("npu-smi", "info")]  # type: ignore[attr-defined]
    assert sample == MemorySample(
        used_mb=3133 + 2876 + 3116 + 10568, total_mb=4 * 65536, per_process={990711: 7746.0}
    )


def test_npu_smi_source_restricted_to_the_pods_devices() -> None:
    # A3: NPU 1 chip 1 is physical device 3 (its Phy-ID).
    source = NpuSmiSource(runner=runner_for("info-a3-4chip-namedproc-nputop.txt"), devices=[3])
    assert source.sample() == MemorySample(used_mb=10568, total_mb=65536, per_process={990711: 7746.0})


def test_node_wide_npu_smi_counts_only_the_pods_chips_and_processes() -> None:
    # A node shared by several pods: npu-smi lists all 16 chips, each held by another pod's
    # engine (about 58 GB each). This pod owns physical devices 4 and 5 (NPU 2, chips 0 and 1).
    source = NpuSmiSource(runner=runner_for("info-a3-16chip-multiproc-issue3002.txt"), devices=[4, 5])
    assert source.sample() == MemorySample(
        used_mb=61633 + 61623, total_mb=2 * 65536, per_process={930907: 58560.0, 931572: 58779.0})


def test_npu_smi_source_reports_unparseable_output_as_a_source_error() -> None:
    source = NpuSmiSource(runner=lambda argv: "dcmi module initialize failed. ret is -8005\n")
    with pytest.raises(MemorySourceError, match="npu-smi info: expected the output"):
        source.sample()


def test_npu_smi_source_with_no_matching_chip() -> None:
    source = NpuSmiSource(runner=runner_for("info-910b4-4chip-noproc-issue1401.txt"), devices=[9])
    with pytest.raises(MemorySourceError, match=r"shows none of the pod's devices \[9\]"):
        source.sample()


class FakeNvml:
    class NVMLError(Exception):
        pass

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def nvmlInit(self) -> None:
        if self.fail:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int):
        return SimpleNamespace(used=(1000 + handle) * 1024**2, total=81559 * 1024**2)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int):
        return [SimpleNamespace(pid=4242, usedGpuMemory=900 * 1024**2)]


def test_nvml_source_sums_selected_gpus() -> None:
    sample = NvmlSource(indices=[1], nvml=FakeNvml()).sample()
    assert sample == MemorySample(used_mb=1001.0, total_mb=81559.0, per_process={4242: 900.0})


def test_nvml_init_failure_is_a_source_error() -> None:
    with pytest.raises(MemorySourceError, match="NVML init failed: Driver Not Loaded"):
        NvmlSource(nvml=FakeNvml(fail=True))


def test_host_rss_covers_the_whole_process_tree() -> None:
    child_code = "import time; b = bytearray(64 * 1024 * 1024); time.sleep(30)"
    parent_code = (
        "import subprocess, sys, time; "
        f"c = subprocess.Popen([sys.executable, '-c', {child_code!r}]); "
        "print(c.pid, flush=True); time.sleep(30)"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(parent.stdout.readline())  # type: ignore[union-attr]
        source = HostRssSource(parent.pid, capacity_mb=1000.0)
        deadline = time.monotonic() + 20  # the child touches its 64 MB shortly after starting
        while True:  # (on a loaded machine "shortly" can be seconds)
            sample = source.sample()
            if sample.per_process and sample.per_process.get(child_pid, 0) > 60 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert sample.per_process is not None
        assert set(sample.per_process) == {parent.pid, child_pid}
        assert sample.per_process[child_pid] > 60
        assert sample.used_mb == pytest.approx(sum(sample.per_process.values()))
        assert sample.total_mb == 1000.0
    finally:
        parent.kill()
        parent.wait()


def test_host_rss_of_a_gone_process_is_a_source_error() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(MemorySourceError, match=f"process {proc.pid}"):
        HostRssSource(proc.pid).sample()


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"memory.max": "8589934592\n"}, 8192.0),
        ({"memory.max": "max\n"}, None),
        ({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),  # v1 "unlimited"
        ({"memory/memory.limit_in_bytes": "4294967296\n"}, 4096.0),
        ({}, None),
    ],
)
def test_cgroup_memory_limit(tmp_path: Path, files: dict[str, str], expected: float | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_memory_limit_mb(str(tmp_path)) == expected


def test_select_sources_per_platform() -> None:
    cpu = select_sources("cpu", engine_pid=1)
    assert [(s.kind, type(s).__name__) for s in cpu] == [("host", "HostRssSource")]
    npu = select_sources(
        "ascend", engine_pid=1, prefer_dcmi=False, runner=runner_for("info-910b4-4chip-noproc-issue1401.txt")
    )
    assert [type(s).__name__ for s in npu] == ["NpuSmiSource", "HostRssSource"]
    assert all(isinstance(s, MemorySource) for s in npu)
    with pytest.raises(ValueError, match="unknown platform 'tpu'"):
        select_sources("tpu", engine_pid=1)


# -- the monitor over sources --------------------------------------------------------------


class ScriptedSource:
    kind = "host"

    def __init__(self, name: str, values) -> None:
        self.name = name
        self.values = iter(values)

    def sample(self) -> MemorySample:
        value = next(self.values)
        if value is None:
            raise MemorySourceError("npu-smi did not answer within 10s")
        return MemorySample(used_mb=value, total_mb=65536.0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_monitor_turns_unhealthy_on_a_leak_and_exports_gauges() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    limits = LeakLimits()
    leaking = ScriptedSource(
        "host-rss", (20000 + 3000 * i * limits.sample_interval_s / 3600 for i in range(10_000))
    )
    monitor = HealthMonitor(HealthConfig(), [leaking], registry, clock=clock)
    monitor.mark_baseline()
    verdict = monitor.verdict()
    while verdict.healthy and clock.now < 3 * 3600:
        monitor.sample_memory()
        verdict = monitor.verdict()
        clock.now += limits.sample_interval_s
    assert not verdict.healthy
    assert verdict.reasons[0].startswith("host-rss: host memory grows")
    assert verdict.details["memory"]["host-rss"]["unhealthy"] is True
    get = registry.get_sample_value
    assert get("ascend_llm_leak_suspected", {"source": "host-rss"}) == 1
    assert get("ascend_llm_memory_slope_mb_per_hour", {"source": "host-rss"}) == pytest.approx(3000, rel=0.1)
    # The baseline is the median of the first samples after the mark, already on the ramp.
    assert get("ascend_llm_memory_baseline_mb", {"source": "host-rss"}) == pytest.approx(20025)
    assert get("ascend_llm_memory_projected_exhaustion_seconds", {"source": "host-rss"}) > 0
    assert get("ascend_llm_engine_hung") == 0


def test_monitor_skips_a_failing_source_and_stays_healthy() -> None:
    clock = FakeClock()
    monitor = HealthMonitor(
        HealthConfig(), [ScriptedSource("npu-hbm", [None, 58000.0])], CollectorRegistry(), clock=clock
    )
    assert monitor.sample_memory() == {}
    verdict = monitor.verdict()
    assert verdict.healthy
    assert verdict.details["memory"]["npu-hbm"]["last_error"] == "npu-smi did not answer within 10s"
    assert set(monitor.sample_memory()) == {"npu-hbm"}


def test_monitor_reports_a_hung_engine_and_recovers_after_reset() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    monitor = HealthMonitor(HealthConfig(hang_timeout_s=60), [], registry, clock=clock)
    text = "vllm:num_requests_running 4\nvllm:generation_tokens_total 99\n"
    monitor.observe_engine_metrics(text)
    clock.now = 61
    monitor.observe_engine_metrics(text)
    verdict = monitor.verdict()
    assert not verdict.healthy and verdict.reasons[0].startswith("engine hung: 4 requests running")
    assert registry.get_sample_value("ascend_llm_engine_hung") == 1
    monitor.reset()
    assert monitor.verdict().healthy
    assert monitor.observe_engine_metrics("<html>not metrics</html>") is None
    assert "expected Prometheus text" in (monitor.verdict().details["engine"]["metrics_error"] or "")


class FakeDcmi:
    """libdcmi.so as ctypes sees it: out-parameters come as byref() objects or arrays."""

    def __init__(self, cards: dict[int, list[tuple[int, int, int]]]) -> None:
        # card -> [(physical id, used MB, total MB)] per device of the card
        self.cards = cards

    def dcmi_init(self) -> int:
        return 0

    def dcmi_get_card_list(self, count, cards, limit) -> int:
        count._obj.value = len(self.cards)
        for index, card in enumerate(self.cards):
            cards[index] = card
        return 0

    def dcmi_get_device_num_in_card(self, card, count) -> int:
        count._obj.value = len(self.cards[card])
        return 0

    def dcmi_get_device_logic_id(self, logic, card, device) -> int:
        logic._obj.value = card * 100 + device
        return 0

    def dcmi_get_device_phyid_from_logicid(self, logic, physical) -> int:
        physical._obj.value = self.cards[logic // 100][logic % 100][0]
        return 0

    def dcmi_get_device_hbm_info(self, card, device, info) -> int:
        _, used, total = self.cards[card][device]
        info._obj.memory_usage, info._obj.memory_size = used, total
        return 0


def test_dcmi_counts_only_the_pods_chips_of_every_card_on_the_node() -> None:
    from ascend_runtime.memory.sources import DcmiSource

    node = FakeDcmi({0: [(0, 60000, 65536)], 1: [(1, 100, 65536)], 2: [(2, 200, 65536)], 3: [(3, 58000, 65536)]})
    assert DcmiSource(lib=node).sample() == MemorySample(used_mb=118300, total_mb=4 * 65536)
    assert DcmiSource(lib=node, devices=[1, 2]).sample() == MemorySample(used_mb=300, total_mb=2 * 65536)
    with pytest.raises(MemorySourceError, match=r"none of the pod's devices \[7\]"):
        DcmiSource(lib=node, devices=[7]).sample()


@pytest.mark.parametrize(("env", "expected"), [
    ({}, None),
    ({"ASCEND_VISIBLE_DEVICES": "4,5"}, {4, 5}),
    ({"ASCEND_VISIBLE_DEVICES": "Ascend910-4,Ascend910-5"}, {4, 5}),
    ({"ASCEND_VISIBLE_DEVICES": "0-3"}, {0, 1, 2, 3}),
    ({"ASCEND_RT_VISIBLE_DEVICES": "2"}, {2}),
    ({"ASCEND_VISIBLE_DEVICES": "4,5,6", "ASCEND_RT_VISIBLE_DEVICES": "1,2"}, {5, 6}),
])
def test_the_pods_devices_from_the_environment(env, expected) -> None:
    from ascend_runtime.memory.devices import visible_devices

    assert visible_devices(env) == (None if expected is None else frozenset(expected))


def test_a_bad_device_list_names_the_variable_and_the_form() -> None:
    from ascend_runtime.memory.devices import VisibleDevicesError, visible_devices

    with pytest.raises(VisibleDevicesError, match=r"ASCEND_VISIBLE_DEVICES='0,x': 'x' is not a device id"):
        visible_devices({"ASCEND_VISIBLE_DEVICES": "0,x"})
    with pytest.raises(VisibleDevicesError, match="selects position 2, but ASCEND_VISIBLE_DEVICES='4,5' gives"):
        visible_devices({"ASCEND_VISIBLE_DEVICES": "4,5", "ASCEND_RT_VISIBLE_DEVICES": "2"})
