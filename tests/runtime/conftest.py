"""Fixtures that run the real `ascend-llm run` process, with a fake or the real engine."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from runtime_harness import RuntimeProcess, start_runtime


@pytest.fixture
def runtime_factory(tmp_path: Path):
    started: list[RuntimeProcess] = []

    def factory(config_extra: dict | None = None, env_extra: dict[str, str] | None = None, **kwargs) -> RuntimeProcess:
        sub = tmp_path / f"rt{len(started)}"
        sub.mkdir()
        runtime = start_runtime(sub, config_extra or {}, env_extra or {}, **kwargs)
        started.append(runtime)
        return runtime

    yield factory
    for runtime in started:
        runtime.terminate(timeout=30)
        try:  # the engine's own process group, in case the runtime was killed
            os.killpg(runtime.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
