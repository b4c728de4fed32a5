"""The tiny LoRA adapter's files (ascend_runtime.tinymodel): readable by an engine that runs as
another user, as a pod's engine does (safetensors itself writes the weights owner-only)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from ascend_runtime.tinymodel import LORA_TARGETS, build_tiny_lora


def test_the_tiny_adapter_is_readable_by_every_user_under_the_usual_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        directory = build_tiny_lora(tmp_path / "sql", rank=4, seed=3)
    finally:
        os.umask(old)
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o644, name
    config = json.loads((directory / "adapter_config.json").read_text())
    assert (config["r"], config["target_modules"]) == (4, list(LORA_TARGETS))
