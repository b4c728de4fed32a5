"""Preflight decisions on real `npu-smi info` samples: idle chips pass, leftover processes and
too little free HBM make the runtime wait with a reason that names the chip or the process."""

from __future__ import annotations

from pathlib import Path

from ascend_runtime.memory.npusmi import parse_npu_smi
from ascend_runtime.preflight import assess_npu_report

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "reference-fixtures" / "npu-smi"


def report(name: str) -> dict:
    return parse_npu_smi((SAMPLES / name).read_text()).to_json()


def test_idle_chips_with_enough_memory_pass():
    assert assess_npu_report(report("info-910b4-4chip-noproc-issue1401.txt"), 1024) == (True, None)
    assert assess_npu_report(report("info-310p3-duo-4chip-noproc-issue4148.txt"), 1024) == (True, None)


def test_leftover_processes_block_the_launch_and_are_named():
    ok, reason = assess_npu_report(report("info-910b3-8chip-issue6299.txt"), 1024)
    assert not ok
    first = report("info-910b3-8chip-issue6299.txt")["processes"][0]
    assert f"pid {first['pid']}" in reason
    assert "and 4 more" in reason  # eight processes, four named


def test_too_little_free_memory_names_the_chip_and_the_setting():
    ok, reason = assess_npu_report(report("info-910b4-4chip-npu1to4-npusmi2306-issue1999.txt"), 40000)
    assert not ok
    assert "NPU 1 chip 0" in reason  # this sample's NPU ids start at 1
    assert "runtime.minFreeDeviceMb" in reason


def test_no_chips_is_a_clear_wait():
    ok, reason = assess_npu_report({"chips": [], "processes": []}, 0)
    assert not ok and "no NPU chips" in reason


def preflight_on(sample: str, devices: frozenset[int] | None, min_free_mb: int = 1024):
    """make_preflight's Ascend check against a recorded npu-smi output."""

    import asyncio
    import os
    import stat
    import tempfile

    from ascend_runtime.preflight import make_preflight

    with tempfile.TemporaryDirectory() as tmp:
        tool = os.path.join(tmp, "npu-smi")
        with open(tool, "w") as handle:
            handle.write(f"#!/bin/sh\ncat {SAMPLES / sample}\n")
        os.chmod(tool, stat.S_IRWXU)
        check = make_preflight("ascend", min_free_mb, which=lambda _: tool, devices=devices)
        return asyncio.run(check())


def test_other_pods_processes_on_other_chips_are_not_leftovers():
    # Node-wide npu-smi: processes on NPU 0-3 (another pod's engine), NPU 4-7 idle.
    sample = "info-910b3-8chip-mixedproc-npusmi23-issue1895.txt"
    assert preflight_on(sample, frozenset({4, 5, 6, 7})) == (True, None)
    ok, reason = preflight_on(sample, frozenset({3, 4}))
    assert not ok and "on NPU 3 chip 0" in reason
    ok, reason = preflight_on(sample, None)  # no device list: everything the container sees counts
    assert not ok and "leftover processes" in reason


def test_a_pod_whose_devices_npu_smi_does_not_show_waits_with_the_ids():
    ok, reason = preflight_on("info-910b4-4chip-noproc-issue1401.txt", frozenset({6}))
    assert not ok
    assert reason == ("npu-smi lists none of this pod's devices [6] (from ASCEND_VISIBLE_DEVICES / "
                      "ASCEND_RT_VISIBLE_DEVICES); it shows device ids [0, 1, 2, 3]")
