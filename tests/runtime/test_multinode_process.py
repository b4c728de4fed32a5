"""Two real `ascend-llm run` processes on localhost as one multi-node group (backend mp).

A leader (``LWS_WORKER_INDEX=0``) and a worker (``LWS_WORKER_INDEX=1``) supervise the fake
engine (tests/fakes/fake_engine.py; the worker runs its ``serve --headless`` form). Covers: the
worker waits for the leader's graph mode and launches the headless worker command (start rank,
leader address); a capture failure on the leader makes it fall back to EAGER and the worker
relaunches in EAGER, uncounted; a killed leader engine is relaunched by the leader and the
worker relaunches for the new engine; a crash of the worker's own process is restarted and
counted; readiness is the group's; SIGTERM to both -> both exit 0. What the real vLLM does
with these command lines is in tests/engine/test_multinode_cpu.py.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from runtime_harness import FAKE_ENGINE, REPO

CAPTURE_LOG = REPO / "tests/data/reference-fixtures/vllm-logs/capture-207005-alloc-sqcq-issue2629.log"

GROUP = {
    "engine": {"parallel": {"data": 2}},
    "warmup": {"enabled": False},
    "distributed": {
        "nodes": 2,
        "backend": "mp",
        "npusPerNode": 1,
        "leaderAddress": "127.0.0.1",
        "workerCommand": [sys.executable, str(FAKE_ENGINE), "serve"],
    },
}
LWS = {"LWS_GROUP_SIZE": "2", "LWS_LEADER_ADDRESS": "127.0.0.1", "POD_IP": "127.0.0.1"}


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


def start_group(runtime_factory, leader_env: dict[str, str] | None = None,
                worker_env: dict[str, str] | None = None):
    """The leader first (the worker's config needs the leader's runtime port), then the worker."""
    leader = runtime_factory(GROUP, {**LWS, "LWS_WORKER_INDEX": "0", **(leader_env or {})})
    worker_config = {**GROUP, "distributed": {**GROUP["distributed"], "leaderRuntimePort": leader.port}}
    worker = runtime_factory(worker_config, {**LWS, "LWS_WORKER_INDEX": "1", **(worker_env or {})})
    return leader, worker


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_worker_follows_the_leaders_fallback_and_engine_relaunch(runtime_factory):
    # The leader's first rung fails only after 5 s, longer than the worker's 2 s poll: the
    # worker sees PIECEWISE first and must then follow the fallback.
    leader, worker = start_group(
        runtime_factory,
        leader_env={"FAKE_ENGINE_CAPTURE_FAIL": str(CAPTURE_LOG), "FAKE_ENGINE_CAPTURE_FAIL_AFTER_S": "5"},
    )
    first = worker.wait_for(lambda s: s["engineRestarts"] == 0 and len(worker.launches()) >= 1
                            and s["leaderMode"] == "PIECEWISE", 20, "the worker's launch for PIECEWISE")
    assert first["role"] == "worker"
    assert first["leader"] == f"http://127.0.0.1:{leader.port}/state"
    assert not first["ready"]  # the leader is still starting
    headless = worker.launches()[0]
    assert headless[:2] == ["serve", "fake-model"]
    assert "--headless" in headless
    assert option(headless, "--data-parallel-start-rank") == "1"
    assert option(headless, "--data-parallel-address") == "127.0.0.1"
    assert option(headless, "--data-parallel-size-local") == "1"
    assert "--enforce-eager" not in headless

    leader_state = leader.wait_for(is_ready, 30, "the leader Ready after its fallback")
    assert leader_state["role"] == "leader"
    assert (leader_state["mode"], leader_state["fallbacks"]) == ("EAGER", 1)
    leader_argv = leader.launches()[-1]
    assert "--headless" not in leader_argv
    assert option(leader_argv, "--data-parallel-address") == "127.0.0.1"
    assert "--data-parallel-start-rank" not in leader_argv

    state = worker.wait_for(lambda s: is_ready(s) and s["leaderMode"] == "EAGER", 20, "the worker Ready in EAGER")
    assert state["mode"] == "EAGER"
    assert state["engineRestarts"] == 0  # following the leader is not a failure of the worker
    assert state["warmup"]["outcome"] == "pending"  # the leader's warmup drives the group
    launches = worker.launches()
    assert len(launches) == 2
    assert "--enforce-eager" in launches[1]
    assert worker.probe("ready") == 200

    # The leader's engine dies: the leader relaunches it, the worker relaunches for the new one.
    old_pid = leader_state["enginePid"]
    os.killpg(old_pid, signal.SIGKILL)
    leader_state = leader.wait_for(lambda s: is_ready(s) and s["enginePid"] not in (None, old_pid), 30,
                                   "the leader Ready with a new engine")
    assert leader_state["engineRestarts"] == 1
    state = worker.wait_for(lambda s: is_ready(s) and len(worker.launches()) == 3, 20,
                            "the worker relaunched for the new leader engine")
    assert state["engineRestarts"] == 0
    assert "--enforce-eager" in worker.launches()[2]

    # SIGTERM to both, as when the group is deleted.
    leader.process.send_signal(signal.SIGTERM)
    worker.process.send_signal(signal.SIGTERM)
    assert leader.process.wait(timeout=30) == 0
    assert worker.process.wait(timeout=30) == 0


def test_a_worker_crash_is_restarted_and_counted_and_readiness_is_the_groups(runtime_factory):
    leader, worker = start_group(runtime_factory, leader_env={"FAKE_ENGINE_STARTUP_S": "4"},
                                 worker_env={"FAKE_ENGINE_CRASH_ONCE_AFTER_S": "1"})
    # The worker's engine runs the leader's mode, but the leader is not serving yet.
    state = worker.wait_for(lambda s: s["leaderMode"] is not None and s["enginePid"] is not None, 20,
                            "the worker's first launch")
    assert not state["ready"]
    assert worker.probe("ready") == 503
    state = worker.wait_for(lambda s: s["engineRestarts"] == 1 and is_ready(s), 30,
                            "the worker Ready after its crash")
    assert len(worker.launches()) == 2
    assert leader.state()["engineRestarts"] == 0  # the leader's engine was never touched
    started = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)  # only the worker: it stops at once
    assert worker.process.wait(timeout=30) == 0
    assert time.monotonic() - started < 10
