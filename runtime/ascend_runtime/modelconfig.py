"""The model's ``config.json`` before the first launch, for the tuned defaults (ascend_runtime.tuning).

A model on a volume (a path, the model cache) has it on disk. A Hugging Face hub id that the
engine downloads itself has nothing on disk yet: the runtime fetches ``config.json`` alone from
the same endpoint, with the same token and into the same cache (``HF_ENDPOINT``, ``HF_TOKEN``,
``HF_HOME``), so the engine's own download later finds that file there. A fetch that fails (no
network, a gated repo without a token) leaves the defaults off and says why in ``/state``; the
engine's own download then fails or succeeds on its own terms. ModelScope ids are not fetched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from ascend_runtime.config import ModelConfig

#: ``org/name`` as the hubs spell repository ids.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+$")


def is_hub_id(path: str) -> bool:
    """Whether the engine's ``--model`` is a hub id (``org/name``, no such folder here)."""
    return bool(_HUB_ID.match(path)) and not Path(path).exists()


def _on(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def fetch_config_dir(model: ModelConfig, env: Mapping[str, str]) -> str:
    """A folder holding ``model``'s ``config.json``, fetched from the hub; ``ValueError`` naming the cause."""
    if _on(env, "VLLM_USE_MODELSCOPE"):
        raise ValueError(f"{model.path} comes from ModelScope: its config.json is not fetched before the launch")
    if _on(env, "HF_HUB_OFFLINE"):
        raise ValueError(f"HF_HUB_OFFLINE is set: {model.path}'s config.json is not fetched")
    from huggingface_hub import hf_hub_download

    cache = env.get("HF_HUB_CACHE") or (str(Path(env["HF_HOME"]) / "hub") if env.get("HF_HOME") else None)
    try:
        path = hf_hub_download(model.path, "config.json", revision=model.revision, cache_dir=cache,
                               endpoint=env.get("HF_ENDPOINT") or None, token=env.get("HF_TOKEN") or None)
    except Exception as error:  # noqa: BLE001 - every hub or network error means the same here
        raise ValueError(f"cannot fetch {model.path}'s config.json from the hub ({type(error).__name__}: "
                         f"{str(error).splitlines()[0] if str(error) else 'no detail'})") from None
    return str(Path(path).parent)
