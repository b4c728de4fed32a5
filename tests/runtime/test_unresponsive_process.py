"""A serving engine that wedges, errors or dies: readiness goes first, then liveness.

The real `ascend-llm run` process with the fake engine: an API server that answers nothing
(stopped with SIGSTOP) or only HTTP 500 loses readiness at the next /health poll and fails
/live after ``health.hangTimeoutS``; one that answers again gets readiness back. A replay
fallback or a crash takes readiness away before the dying engine is stopped, while its
/health still answers 200. The real CPU engine version is in tests/engine/test_engine_cpu.py.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time

import psutil

from runtime_harness import REPO, http

REPLAY_LOG = REPO / "tests/data/reference-fixtures/vllm-logs/replay-507000-executeasync-piecewise-issue1999.log"
NO_WARMUP = {"warmup": {"enabled": False}}
HANG = {"health": {"hangTimeoutS": 10}}


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def engine_health(runtime) -> int | None:
    try:
        return http("GET", f"{runtime.engine_url}/health", timeout=1)[0]
    except OSError:
        return None


def test_an_engine_that_answers_nothing_loses_readiness_then_liveness(runtime_factory):
    runtime = runtime_factory({**NO_WARMUP, **HANG}, {})
    state = runtime.wait_for(is_ready, 30, "Ready")
    pid = state["enginePid"]
    try:
        os.kill(pid, signal.SIGSTOP)  # alive, answering nothing
        stopped_at = time.monotonic()
        state = runtime.wait_for(lambda s: not s["ready"], 10, "readiness to drop")
        assert time.monotonic() - stopped_at < 5  # one poll plus its 2 s timeout
        assert state["phase"] == "Ready" and "did not answer" in state["unanswered"]
        assert runtime.probe("ready") == 503
        assert runtime.probe("live") == 200  # not yet hangTimeoutS

        os.kill(pid, signal.SIGCONT)  # a blip: it answers again
        runtime.wait_for(is_ready, 10, "readiness back once it answers")
        assert runtime.probe("live") == 200

        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        state = runtime.wait_for(lambda s: not s["live"], 30, "liveness to fail")
        assert 10 <= time.monotonic() - stopped_at < 20
        assert state["hung"] is True
        assert any("no good answer to /health" in reason for reason in state["liveReasons"])
        assert runtime.probe("live") == 503
        assert running(pid)  # the process never died: only the answers tell
    finally:
        os.killpg(pid, signal.SIGKILL)


def test_an_engine_that_answers_only_errors_fails_liveness(runtime_factory):
    runtime = runtime_factory({**NO_WARMUP, **HANG}, {"FAKE_ENGINE_ERRORS_AFTER_S": "3"})
    runtime.wait_for(is_ready, 30, "Ready")
    state = runtime.wait_for(lambda s: not s["ready"], 15, "readiness to drop on HTTP 500")
    assert state["unanswered"] == "/health answered HTTP 500"
    state = runtime.wait_for(lambda s: not s["live"], 30, "liveness to fail on HTTP 500 only")
    assert any("HTTP 500" in reason for reason in state["liveReasons"])


def test_readiness_drops_before_a_fallback_stops_the_engine(runtime_factory):
    # The engine logs a replay failure, keeps answering /health and ignores SIGTERM, so its
    # stop takes the whole 10 s grace: no request may be routed to it meanwhile.
    runtime = runtime_factory({**NO_WARMUP, "graph": {"replayFailureThreshold": 1}}, {
        "FAKE_ENGINE_REPLAY_FAIL_AFTER": "0", "FAKE_ENGINE_REPLAY_LOG": str(REPLAY_LOG),
        "FAKE_ENGINE_FAILURE_LINGER_S": "60", "FAKE_ENGINE_IGNORE_SIGTERM": "1",
    })
    state = runtime.wait_for(is_ready, 30, "Ready")
    pid = state["enginePid"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(http, "POST", f"{runtime.engine_url}/v1/completions",
                    {"model": "fake-model", "prompt": "x", "max_tokens": 2}, 10)
        failed_at = time.monotonic()
        runtime.wait_for(lambda s: not s["ready"], 5, "readiness to drop at the failure line")
        assert time.monotonic() - failed_at < 2
        assert running(pid) and engine_health(runtime) == 200  # still up and answering
        assert runtime.probe("ready") == 503
    state = runtime.wait_for(lambda s: is_ready(s) and s["mode"] == "EAGER", 40, "Ready in EAGER")
    assert state["fallbacks"] == 1


def test_readiness_drops_when_the_engine_core_dies_before_the_server_exits(runtime_factory):
    runtime = runtime_factory(NO_WARMUP, {"FAKE_ENGINE_CRASH_ONCE_AFTER_S": "2", "FAKE_ENGINE_FAILURE_LINGER_S": "6"})
    state = runtime.wait_for(is_ready, 30, "Ready")
    pid = state["enginePid"]
    state = runtime.wait_for(lambda s: not s["ready"], 10, "readiness to drop at the fatal line")
    assert "engine reported a failure" in state["unanswered"]
    assert running(pid) and engine_health(runtime) == 200  # its API server still answers
    state = runtime.wait_for(lambda s: is_ready(s) and s["engineRestarts"] == 1, 40, "Ready after the crash")
    assert state["enginePid"] != pid
