"""One loader for the benches under ``bench/`` (scripts, not a package), shared by their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def load_bench(script: str) -> ModuleType:
    """``bench/<script>.py`` as the module ``<script>_bench`` (registered in ``sys.modules``:
    dataclasses resolve their annotations through it)."""
    spec = importlib.util.spec_from_file_location(f"{script}_bench", BENCH_DIR / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
