"""A pod on a node shared with other pods: only its own chips count.

The real `ascend-llm run` process on an assumed Ascend stack, with a stand-in `npu-smi` that
prints a node-wide sample (vllm-ascend #1895: another engine's processes on NPU 0-3, NPU 4-7
idle). A pod given devices 4 and 5 passes its preflight and watches only their memory; a pod
given device 3 waits, naming the process on it.
"""

from __future__ import annotations

import os

from runtime_harness import REPO

NODE_WIDE = REPO / "tests/data/reference-fixtures/npu-smi/info-910b3-8chip-mixedproc-npusmi23-issue1895.txt"
ASCEND = {
    "ASCEND_LLM_ASSUME_VERSIONS": "platform=ascend,vllm=0.23.0,vllm_ascend=0.23.0",
    "FAKE_NPU_SMI_OUTPUT": str(NODE_WIDE),
    "PATH": f"{REPO / 'tests/fakes'}{os.pathsep}{os.environ['PATH']}",
}
CONFIG = {"warmup": {"enabled": False}, "runtime": {"preflight": True},
          "health": {"leak": {"sampleIntervalS": 0.5}}}


def test_neighbours_on_other_chips_neither_block_the_start_nor_count(runtime_factory):
    runtime = runtime_factory(CONFIG, {**ASCEND, "ASCEND_VISIBLE_DEVICES": "4,5"})
    runtime.wait_for(lambda s: s["phase"] == "Ready", 30, "Ready despite the neighbour's processes")
    state = runtime.wait_for(lambda s: (s["health"].get("memory") or {}).get("npu-hbm", {}).get("used_mb"),
                             30, "a device memory sample")
    device = state["health"]["memory"]["npu-hbm"]
    assert (device["used_mb"], device["capacity_mb"]) == (3353 + 3353, 2 * 65536)


def test_a_process_on_the_pods_own_chip_is_a_leftover(runtime_factory):
    runtime = runtime_factory(CONFIG, {**ASCEND, "ASCEND_VISIBLE_DEVICES": "3,4"})
    state = runtime.wait_for(lambda s: s["phase"] == "WaitingForNPU", 30, "WaitingForNPU")
    assert "NPU 3 chip 0" in state["message"]
    assert "NPU 0" not in state["message"] and runtime.launches() == []


def test_a_malformed_device_list_exits_2_naming_it(tmp_path):
    import subprocess
    import sys

    config = tmp_path / "c.yaml"
    config.write_text("schemaVersion: 1\nmodel: {path: /m}\n")
    result = subprocess.run([sys.executable, "-m", "ascend_runtime.cli", "run", "--config", str(config)],
                            env={**os.environ, "ASCEND_VISIBLE_DEVICES": "0,one"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "ASCEND_VISIBLE_DEVICES='0,one': 'one' is not a device id" in result.stderr
