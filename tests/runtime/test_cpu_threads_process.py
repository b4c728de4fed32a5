"""The CPU engine's threads: the real `ascend-llm run` process hands the engine the runtime's
thread default (``ascend_runtime.flags.cpu_binding_env``: on shared cores ``nobind`` and one
OpenMP thread fewer than the usable CPUs), and a value in ``engine.env`` wins."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ascend_runtime.versions import detect_versions

THREADS = ("VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS")


def engine_env(runtime, log: Path) -> dict[str, str]:
    runtime.wait_for(lambda s: s["phase"] == "Ready", 30, "Ready")
    return json.loads(log.read_text().splitlines()[-1])


def test_the_engine_gets_the_thread_default_and_a_set_value_wins(runtime_factory, tmp_path) -> None:
    versions = detect_versions()
    if not versions.shared_cpus or versions.usable_cpus is None or {*THREADS} & set(os.environ):
        pytest.skip("the default applies on shared cores with no thread setting in the environment")
    expected = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": str(max(1, versions.usable_cpus - 1))}
    config = {"warmup": {"enabled": False}}
    default = engine_env(runtime_factory(config, {"FAKE_ENGINE_THREADS_LOG": str(tmp_path / "a.jsonl")}), tmp_path / "a.jsonl")
    assert default == expected
    mine = {**config, "engine": {"env": {"OMP_NUM_THREADS": "3"}}}
    set_by_user = engine_env(runtime_factory(mine, {"FAKE_ENGINE_THREADS_LOG": str(tmp_path / "b.jsonl")}), tmp_path / "b.jsonl")
    assert set_by_user == {**expected, "OMP_NUM_THREADS": "3"}
