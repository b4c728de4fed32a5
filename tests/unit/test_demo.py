"""`ascend-llm demo`'s pure parts: the embedded default resource and the local engine config.

The demo must run what a pod runs: the resource goes through the operator's own spec model
and engine-config builder; only what differs on localhost (model path, ports, this Python,
caches) is changed. The full demo (a real engine) runs in tests/engine/test_demo_command.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from ascend_operator.demo import EMBEDDED_RESOURCE, load_resource, render_local_config
from ascend_runtime.config import EngineConfig

REPO = Path(__file__).resolve().parents[2]


def test_embedded_resource_is_the_cpu_example():
    assert EMBEDDED_RESOURCE.read_text() == (REPO / "examples" / "cpu-tiny.yaml").read_text()


def test_local_config_is_the_pod_config_adapted_to_localhost(tmp_path):
    resource = load_resource(None)
    config = EngineConfig.model_validate(render_local_config(resource, tmp_path / "m", tmp_path, 8100, 8101))
    assert config.model.path == str(tmp_path / "m")
    assert config.model.served_name == "tiny"
    assert (config.engine.host, config.engine.port) == ("127.0.0.1", 8100)
    assert (config.runtime.host, config.runtime.port) == ("127.0.0.1", 8101)
    assert config.engine.command[0] == sys.executable
    assert config.engine.command[1:] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert config.engine.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert config.engine.env["VLLM_CACHE_ROOT"] == str(tmp_path / "vllm-cache")
    # The CPU threads are the runtime's default, as in a pod (ascend_runtime.flags.cpu_binding_env).
    assert {"VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS"}.isdisjoint(config.engine.env)
    # What the example asks for reaches the engine config unchanged.
    assert config.engine.max_model_len == 512
    assert config.engine.dtype == "float32"
    assert config.warmup.prompt_lengths == [8, 64]
    assert config.warmup.concurrency == [1, 4]


def test_an_npu_resource_is_refused_with_the_field_to_change(tmp_path):
    resource = yaml.safe_load((REPO / "examples" / "qwen72b-910b-tp8.yaml").read_text())
    with pytest.raises(SystemExit, match="spec.platform: CPU"):
        render_local_config(resource, tmp_path, tmp_path, 8100, 8101)


def test_a_file_that_is_not_a_resource_is_refused(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("kind: Deployment\n")
    with pytest.raises(SystemExit, match="not an AscendLLMDeployment"):
        load_resource(path)
