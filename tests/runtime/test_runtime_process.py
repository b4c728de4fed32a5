"""The real `ascend-llm run` process supervising a fake engine (tests/fakes/fake_engine.py).

Covers, in seconds per test, what the runtime decides by itself: graph capture failure ->
one rung down at once (without waiting for the engine to exit); repeated replay failures ->
one rung down; a crash -> relaunch with backoff, counted; too many failures -> exit code;
a failed warmup -> failed start with the reason; a remembered start mode; SIGTERM -> readiness
fails first and in-flight requests finish; probes before ready; a leaking or hung engine ->
liveness fails with the reason; /metrics carries the runtime's and the engine's families;
a bad config -> exit 2 naming the field. The same paths with the real vLLM engine are in
tests/engine/.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from runtime_harness import REPO, deep_merge, http

CAPTURE_LOG = REPO / "tests/data/reference-fixtures/vllm-logs/capture-207005-alloc-sqcq-issue2629.log"
REPLAY_LOG = REPO / "tests/data/reference-fixtures/vllm-logs/replay-507000-executeasync-piecewise-issue1999.log"


#: Leak limits scaled down so a 20 MB/s leak (72 GB/h) is caught in seconds; the shipped
#: defaults and their detection delays are measured in bench/leak_detection.py.
FAST_LEAK_LIMITS = {"health": {"leak": {"windowS": 10, "graceS": 2, "sampleIntervalS": 0.5,
                                        "hostGrowthMbPerHour": 10000, "minTimeToExhaustionS": 60}}}


def alive(pid: int) -> bool:
    """Running, not a zombie: a killed orphan stays a zombie where pid 1 does not reap it."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


def complete(runtime, prompt: str = "hello", timeout: float = 30) -> int | None:
    """The HTTP status, or None when the engine died mid-request (which some tests cause)."""
    try:
        return http("POST", f"{runtime.engine_url}/v1/completions",
                    {"model": "fake-model", "prompt": prompt, "max_tokens": 3}, timeout=timeout)[0]
    except (ConnectionError, OSError):
        return None


def test_capture_failure_falls_back_one_rung_without_waiting_for_exit(runtime_factory):
    runtime = runtime_factory({}, {"FAKE_ENGINE_CAPTURE_FAIL": str(CAPTURE_LOG)})
    started = time.monotonic()
    state = runtime.wait_for(is_ready, 60, "Ready after the fallback")
    # The fake engine hangs for an hour after printing the failure: reaching Ready at all
    # proves the runtime acted on the log line.
    assert time.monotonic() - started < 60
    assert state["mode"] == "EAGER"
    assert state["fallbacks"] == 1
    assert "capture" in state["fallbackReason"].lower()
    launches = runtime.launches()
    assert len(launches) == 2
    assert "--enforce-eager" not in launches[0]
    assert "--enforce-eager" in launches[1]
    assert state["warmup"]["outcome"] == "succeeded"
    assert state["warmup"]["requests"] > 0


def test_remembered_start_mode_skips_the_failing_rung(runtime_factory):
    runtime = runtime_factory({"graph": {"startMode": "EAGER"}}, {"FAKE_ENGINE_CAPTURE_FAIL": str(CAPTURE_LOG)})
    state = runtime.wait_for(is_ready, 60, "Ready")
    assert state["mode"] == "EAGER"
    assert state["fallbacks"] == 0
    assert len(runtime.launches()) == 1


def test_without_fallback_a_capture_failure_is_a_failed_start(runtime_factory):
    runtime = runtime_factory(
        {"graph": {"fallback": False}, "runtime": {"readyTimeoutS": 10, "restart": {"maxRestarts": 0}}},
        {"FAKE_ENGINE_CAPTURE_FAIL": str(CAPTURE_LOG)},
    )
    assert runtime.process.wait(timeout=60) == 3  # EXIT_START_FAILED, after the start budget
    launches = runtime.launches()
    assert len(launches) == 1
    assert "--enforce-eager" not in launches[0]


def test_repeated_replay_failures_demote_the_mode(runtime_factory):
    runtime = runtime_factory(
        {"warmup": {"enabled": False}, "graph": {"replayFailureThreshold": 2}},
        {"FAKE_ENGINE_REPLAY_FAIL_AFTER": "0", "FAKE_ENGINE_REPLAY_LOG": str(REPLAY_LOG)},
    )
    runtime.wait_for(is_ready, 30, "first Ready")
    complete(runtime)  # the engine dies of a replay failure: one is not yet "repeated"
    state = runtime.wait_for(lambda s: is_ready(s) and s["engineRestarts"] == 1, 30, "Ready after a restart")
    assert state["mode"] != "EAGER"
    complete(runtime)  # the second within the window: one rung down
    state = runtime.wait_for(lambda s: is_ready(s) and s["mode"] == "EAGER", 30, "Ready in EAGER")
    assert state["fallbacks"] == 1
    assert "replay" in state["fallbackReason"].lower()
    assert complete(runtime) == 200  # eager does not replay graphs


def test_crash_is_relaunched_with_backoff_and_counted(runtime_factory):
    # The engine leaves a child holding its stdout, as vLLM's engine core does when the API
    # server dies: the runtime must neither wait for that pipe nor leave the child behind.
    runtime = runtime_factory({"warmup": {"enabled": False}},
                              {"FAKE_ENGINE_CRASH_ONCE_AFTER_S": "1.5", "FAKE_ENGINE_SPAWN_CHILD": "1"})
    runtime.wait_for(is_ready, 30, "Ready")
    state = runtime.wait_for(lambda s: s["engineRestarts"] == 1 and is_ready(s), 30, "Ready after the crash")
    assert state["fallbacks"] == 0
    first_child = int((runtime.workdir / "children").read_text().split()[0])
    assert not alive(first_child)
    _, metrics = http("GET", f"{runtime.url}/metrics")
    assert 'ascend_llm_engine_restarts_total{reason="crash"} 1.0' in metrics


def test_sparse_crashes_after_healthy_runs_never_use_up_the_restart_budget(runtime_factory):
    # maxRestarts 1: a second crash would end the container, unless the engine served
    # resetAfterS (1 s) before each crash, which starts the count over.
    runtime = runtime_factory({"warmup": {"enabled": False},
                               "runtime": {"restart": {"maxRestarts": 1, "resetAfterS": 1}}},
                              {"FAKE_ENGINE_CRASH_AFTER_S": "2.5"})
    state = runtime.wait_for(lambda s: s["engineRestarts"] >= 3, 60, "three crashes")
    assert runtime.process.poll() is None and state["phase"] != "Failed"


def test_without_a_healthy_run_the_restart_budget_runs_out(runtime_factory):
    runtime = runtime_factory({"warmup": {"enabled": False},
                               "runtime": {"restart": {"maxRestarts": 1, "resetAfterS": 60}}},
                              {"FAKE_ENGINE_CRASH_AFTER_S": "2.5"})
    assert runtime.process.wait(timeout=60) == 4  # EXIT_CRASHED after the second crash
    assert len(runtime.launches()) == 2


def test_failed_warmup_is_a_failed_start_with_reason_and_exit_code(runtime_factory):
    runtime = runtime_factory({"runtime": {"restart": {"maxRestarts": 1}}}, {"FAKE_ENGINE_FAIL_REQUESTS": "1"})
    code = runtime.process.wait(timeout=60)
    assert code == 3  # EXIT_START_FAILED
    log = runtime.log_path.read_text()
    assert "warmup failed" in log
    assert "HTTP 500" in log
    assert len(runtime.launches()) == 2


def test_a_model_without_a_chat_template_becomes_ready_with_a_warning(runtime_factory):
    runtime = runtime_factory({}, {"FAKE_ENGINE_NO_CHAT_TEMPLATE": "1"})
    state = runtime.wait_for(is_ready, 60, "Ready without the chat waves")
    assert state["engineRestarts"] == 0 and len(runtime.launches()) == 1
    assert state["warmup"]["outcome"] == "succeeded"
    assert [w.split(":")[0] for w in state["warmup"]["warnings"]] == ["chat warmup skipped"]


def test_chat_warmup_can_be_turned_off(runtime_factory):
    runtime = runtime_factory({"warmup": {"chat": False}}, {"FAKE_ENGINE_NO_CHAT_TEMPLATE": "1"})
    state = runtime.wait_for(is_ready, 60, "Ready")
    assert state["warmup"]["warnings"] == []
    # Completions only: the plan derived from the launched argv (the fake engine lists a model
    # length of 2048) plus the harness's lengths [4, 16] x levels [1, 2], and no chat wave.
    # (Before the derived plan: 2 lengths x (1 + 2) = 6.)
    from dataclasses import replace

    from ascend_runtime.config import EngineOptions, WarmupConfig
    from ascend_runtime.enginelimits import engine_limits
    from ascend_runtime.warmup import engine_shapes, plan_warmup

    argv = runtime.launches()[0]
    seqs = engine_limits(argv, EngineOptions(), cpu=True).max_num_seqs
    shapes = replace(engine_shapes(argv), max_num_seqs=engine_shapes(argv).max_num_seqs or seqs)
    config = WarmupConfig(prompt_lengths=[4, 16], concurrency=[1, 2], max_tokens=2, chat=False)
    waves = plan_warmup(config, 2048, seqs, shapes)
    assert all(request.kind == "completion" for wave in waves for request in wave)
    assert state["warmup"]["requests"] == sum(len(wave) for wave in waves) > 6


def test_probes_before_ready_and_after(runtime_factory):
    runtime = runtime_factory({}, {"FAKE_ENGINE_STARTUP_S": "3"})
    runtime.wait_for(lambda s: s["phase"] in ("Loading", "WarmingUp"), 20, "Loading")
    assert runtime.probe("startup") == 503
    assert runtime.probe("ready") == 503
    assert runtime.probe("live") == 200
    runtime.wait_for(is_ready, 30, "Ready")
    assert runtime.probe("startup") == 200
    assert runtime.probe("ready") == 200


def test_metrics_carry_runtime_and_engine_families(runtime_factory):
    runtime = runtime_factory({"warmup": {"enabled": False}}, {})
    runtime.wait_for(is_ready, 30, "Ready")
    status, text = http("GET", f"{runtime.url}/metrics")
    assert status == 200
    assert 'ascend_llm_graph_mode{mode="PIECEWISE"} 1.0' in text
    assert "ascend_llm_ready 1.0" in text
    assert "vllm:generation_tokens_total" in text


def test_sigterm_fails_readiness_and_drains_in_flight_requests(runtime_factory):
    runtime = runtime_factory({"warmup": {"enabled": False}, "engine": {"shutdownTimeoutS": 20}},
                              {"FAKE_ENGINE_REQUEST_S": "2"})
    runtime.wait_for(is_ready, 30, "Ready")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(complete, runtime, f"p{i}") for i in range(4)]
        time.sleep(0.5)  # the requests are in flight
        runtime.process.send_signal(15)
        time.sleep(0.3)
        assert runtime.probe("ready") == 503  # readiness drops first
        statuses = [future.result() for future in futures]
    assert statuses == [200, 200, 200, 200]
    assert runtime.process.wait(timeout=30) == 0


def test_host_memory_leak_fails_liveness_with_reason(runtime_factory):
    runtime = runtime_factory(deep_merge({"warmup": {"enabled": False}}, FAST_LEAK_LIMITS),
                              {"FAKE_ENGINE_RSS_MB_PER_S": "20"})
    runtime.wait_for(is_ready, 30, "Ready")
    state = runtime.wait_for(lambda s: not s["live"], 60, "liveness to fail")
    assert runtime.probe("live") == 503
    assert any("host" in reason.lower() for reason in state["liveReasons"])
    assert state["leakSuspected"] is True


def test_steady_engine_stays_live(runtime_factory):
    runtime = runtime_factory(deep_merge({"warmup": {"enabled": False}}, FAST_LEAK_LIMITS), {})
    runtime.wait_for(is_ready, 30, "Ready")
    deadline = time.monotonic() + 15  # longer than the leaking engine needs to fail
    while time.monotonic() < deadline:
        assert runtime.probe("live") == 200
        time.sleep(0.5)


def test_hung_engine_fails_liveness(runtime_factory):
    runtime = runtime_factory({"warmup": {"enabled": False}, "health": {"hangTimeoutS": 10}},
                              {"FAKE_ENGINE_HANG_AFTER": "0"})
    runtime.wait_for(is_ready, 30, "Ready")
    assert runtime.probe("live") == 200  # idle is healthy
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(complete, runtime, "hang", 60)
        state = runtime.wait_for(lambda s: not s["live"], 40, "liveness to fail on the hang")
        assert state["hung"] is True
        assert any("token" in reason.lower() or "hung" in reason.lower() for reason in state["liveReasons"])
        os.killpg(state["enginePid"], signal.SIGKILL)  # ends the hanging request too


def test_bad_config_exits_2_naming_the_field(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("schemaVersion: 1\nmodel: {path: /m}\nwarmup: {concurrency: [0]}\n")
    result = subprocess.run([sys.executable, "-m", "ascend_runtime.cli", "run", "--config", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "warmup.concurrency" in result.stderr


def test_the_runtime_adopts_the_engines_orphans_and_leaves_no_zombie(runtime_factory):
    # The engine's child outlives it in a session of its own (no group kill reaches it), as
    # vLLM's engine core can outlive a dead API server. It re-parents to the runtime, the
    # subreaper of its tree (as PID 1 of a container would be), which waits for it once it dies.
    runtime = runtime_factory({"warmup": {"enabled": False}},
                              {"FAKE_ENGINE_CRASH_ONCE_AFTER_S": "1.5", "FAKE_ENGINE_SPAWN_CHILD": "detached"})
    try:
        runtime.wait_for(lambda s: s["engineRestarts"] == 1 and is_ready(s), 30, "Ready after the crash")
        orphan = psutil.Process(int((runtime.workdir / "children").read_text().split()[0]))
        assert orphan.ppid() == runtime.process.pid
        orphan.kill()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                status = orphan.status()
            except psutil.NoSuchProcess:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the engine's orphan {orphan.pid} is still there ({status})")
        zombies = [c.pid for c in psutil.Process(runtime.process.pid).children()
                   if c.status() == psutil.STATUS_ZOMBIE]
        assert zombies == []
    finally:  # every launch left one such child; none may outlive the test
        for pid in map(int, (runtime.workdir / "children").read_text().split()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_the_warmup_plan_is_derived_from_the_launched_argv_with_the_users_lengths_on_top(runtime_factory):
    # The harness lists promptLengths [4, 16] and concurrency [1, 2]. Derived from the argv:
    # 64 - 2 generated - 8 margin = 54 the longest prompt; the ladder 16, 32 (32 is also the chunk
    # from extraArgs); a decode wave of maxNumSeqs = 2. Then the user's cells not sent already:
    # (4, 1), (4, 2) x2, (16, 2) x2. 3 + 2 + 5 = 10 requests.
    runtime = runtime_factory({"engine": {"maxModelLen": 64, "maxNumSeqs": 2,
                                          "extraArgs": ["--max-num-batched-tokens", "32"]},
                               "warmup": {"chat": False}})
    state = runtime.wait_for(is_ready, 120, "Ready")
    assert state["warmup"]["outcome"] == "succeeded", state["warmup"]
    assert state["warmup"]["requests"] == 10, state["warmup"]
