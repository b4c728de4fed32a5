"""The serving side of the model cache, through the real `ascend-llm run` process and the fake
engine: no engine before the cache's marker says the snapshot is complete, and one compile
cache directory per launch, warm on the next start."""

from __future__ import annotations

import json
import time
from pathlib import Path

from runtime_harness import REPO, is_ready, mode_of

from ascend_runtime.cachelayout import CacheMarker, FetchRequest

ASCEND_0_23 = {"ASCEND_LLM_ASSUME_VERSIONS": "platform=ascend,vllm=0.23.0,vllm_ascend=0.23.0"}
CAPTURE_LOG = (REPO / "tests/data/reference-fixtures/vllm-logs"
               / "capture-op-tiling-561002-fullDecodeOnly-issue5771.log")


def snapshot(tmp_path: Path) -> tuple[FetchRequest, CacheMarker]:
    """A fetched snapshot on a cache volume, as `ascend-llm fetch` leaves it (marker not yet written)."""

    request = FetchRequest(repo_id="org/model", cache_root=str(tmp_path / "cache"), revision="v1")
    directory = Path(request.model_dir)
    directory.mkdir(parents=True)
    files = {"config.json": b"{}", "model.safetensors": b"\0" * 1000, "tokenizer.json": b"{}"}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    marker = CacheMarker.now(request, "a" * 40, len(files), sum(len(d) for d in files.values()))
    return request, marker


def cache_config(request: FetchRequest, extra: dict | None = None) -> dict:
    return {"model": {"path": str(request.model_dir), "cacheMarker": str(request.marker_path)},
            "compileCache": {"root": request.cache_root}, "warmup": {"enabled": False}, **(extra or {})}


def env_log(runtime) -> list[dict]:
    path = runtime.workdir / "env.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_engine_waits_for_a_complete_cache_and_the_second_start_finds_a_warm_compile_cache(
        runtime_factory, tmp_path):
    request, marker = snapshot(tmp_path)
    env = {"FAKE_ENGINE_COMPILE": "1"}
    runtime = runtime_factory(cache_config(request),
                              {**env, "FAKE_ENGINE_ENV_LOG": str(tmp_path / "env1.jsonl")})
    state = runtime.wait_for(lambda s: "no marker at" in (s["message"] or ""), 20,
                             "the missing marker reported")
    assert state["phase"] == "Preflight" and not state["ready"]
    assert "model.cacheMarker" in state["message"] and str(request.marker_path) in state["message"]

    wrong = marker.model_copy(update={"files": marker.files + 1})
    Path(request.marker_path).write_text(wrong.to_json())
    state = runtime.wait_for(lambda s: "incomplete" in (s["message"] or ""), 20,
                             "the incomplete snapshot reported")
    assert "3 of the marker's 4 files" in state["message"]
    time.sleep(1)
    assert runtime.launches() == [], "no engine while the cache is incomplete"

    Path(request.marker_path).write_text(marker.to_json())
    state = runtime.wait_for(is_ready, 30, "Ready once the marker is complete")
    cache = state["compileCache"]
    assert cache["warm"] is False and cache["mode"] == "PIECEWISE"
    assert Path(cache["dir"]).parent == Path(request.cache_root) / "compile"
    launched = [json.loads(line) for line in (tmp_path / "env1.jsonl").read_text().splitlines()]
    assert launched == [{"VLLM_CACHE_ROOT": str(Path(cache["dir"]) / "vllm"), "TORCHAIR_CACHE_HOME": None,
                         "HF_HUB_OFFLINE": "1"}]
    assert (Path(cache["dir"]) / "vllm" / "torch_compile_cache" / "fake" / "graph.py").exists()
    assert runtime.terminate() == 0

    again = runtime_factory(cache_config(request),
                            {**env, "FAKE_ENGINE_ENV_LOG": str(tmp_path / "env2.jsonl")})
    state = again.wait_for(is_ready, 30, "the second start Ready")
    assert state["compileCache"]["dir"] == cache["dir"] and state["compileCache"]["warm"] is True


def test_each_rung_of_the_ladder_gets_its_own_compile_cache_directory(runtime_factory, tmp_path):
    request, marker = snapshot(tmp_path)
    Path(request.marker_path).write_text(marker.to_json())
    log = tmp_path / "env.jsonl"
    runtime = runtime_factory(cache_config(request), {
        **ASCEND_0_23, "FAKE_ENGINE_CAPTURE_FAIL": str(CAPTURE_LOG),
        "FAKE_ENGINE_CAPTURE_FAIL_MODES": "FULL_AND_PIECEWISE", "FAKE_ENGINE_ENV_LOG": str(log),
    })
    state = runtime.wait_for(is_ready, 60, "Ready one rung down")
    assert [mode_of(argv) for argv in runtime.launches()] == ["FULL_AND_PIECEWISE", "PIECEWISE"]
    roots = [json.loads(line)["VLLM_CACHE_ROOT"] for line in log.read_text().splitlines()]
    homes = [json.loads(line)["TORCHAIR_CACHE_HOME"] for line in log.read_text().splitlines()]
    assert len(set(roots)) == 2, "a fallback launch compiles into another directory"
    assert state["compileCache"]["mode"] == "PIECEWISE"
    assert roots[1] == str(Path(state["compileCache"]["dir"]) / "vllm")
    assert homes[1] == str(Path(state["compileCache"]["dir"]) / "torchair"), "TorchAir's cache on Ascend"


def test_a_cache_that_never_completes_fails_the_start_with_exit_6(runtime_factory, tmp_path):
    request, _ = snapshot(tmp_path)
    runtime = runtime_factory(cache_config(request, {"runtime": {"readyTimeoutS": 10, "preflight": False}}))
    code = runtime.process.wait(timeout=40)
    assert code == 6
    assert "gave up after runtime.readyTimeoutS (10 s)" in runtime.log_tail()
    assert runtime.launches() == []
