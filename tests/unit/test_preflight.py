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
