"""Tenant isolation of the model cache: the administrator's cache prefixes (pure)."""

from __future__ import annotations

import pytest
from ascend_operator.api import SpecError, parse_spec
from ascend_operator.policy import cache_prefix, enforce_policy
from ascend_operator.settings import SettingsError, load_settings

HF = {"huggingFace": {"id": "Qwen/Qwen2.5-7B-Instruct"}}


def settings(**env: str):
    return load_settings({f"ASCEND_LLM_OPERATOR_{key}": value for key, value in env.items()})


def test_a_cache_host_path_needs_a_cache_prefix_not_a_model_folder_prefix() -> None:
    spec = parse_spec({"model": {**HF, "cache": {"hostPath": "/data/models/cache"}}})
    with pytest.raises(SpecError, match="CACHE_HOST_PATH_PREFIXES") as error:
        enforce_policy(spec, settings(HOST_PATH_PREFIXES="/data/models"))
    assert "spec.model.cache.hostPath" in str(error.value)
    allowed = settings(HOST_PATH_PREFIXES="/data/models", CACHE_HOST_PATH_PREFIXES="/data/llm-cache")
    enforce_policy(parse_spec({"model": {**HF, "cache": {"hostPath": "/data/llm-cache/team"}}}), allowed)
    assert cache_prefix("/data/llm-cache/team", allowed) == "/data/llm-cache"
    assert cache_prefix("/data/llm-cache-other", allowed) is None


@pytest.mark.parametrize("models, caches", [
    ("/data", "/data/llm-cache"),  # a model folder prefix would read every namespace's cache
    ("/data/llm-cache/models", "/data/llm-cache"),
    ("/data/models", "/data/models"),
    ("", "/data/a,/data/a/b"),  # nested cache prefixes: one namespace's tree inside another's
    ("", "/"),
])
def test_cache_prefixes_that_overlap_model_folders_or_each_other_are_refused(models: str, caches: str) -> None:
    with pytest.raises(SettingsError, match="CACHE_HOST_PATH_PREFIXES"):
        settings(HOST_PATH_PREFIXES=models, CACHE_HOST_PATH_PREFIXES=caches)
