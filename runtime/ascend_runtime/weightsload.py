"""How the engine reads the weights: the loader per storage kind, gated by the installed vLLM.

vLLM reads safetensors through mmap by default: fast on a local disk, slow on network file
systems, where random page faults become round trips. It also offers whole-file reads
(``--safetensors-load-strategy eager``), a parallel read-ahead into the page cache
(``prefetch``), the Run:ai Model Streamer (``--load-format runai_streamer``, concurrent reads, and
the only loader that reads ``s3://``, ``gs://`` and ``az://`` URIs) and fastsafetensors. Which of
them the installed vLLM knows (each checked in that version's ``vllm/config``/``config.py`` and
``vllm/engine/arg_utils.py`` from its PyPI source distribution):

======================================  =========  ================================================
loader                                  from vLLM  absent in
======================================  =========  ================================================
``--load-format runai_streamer``        0.6.6      0.6.5 (``LoadFormat.RUNAI_STREAMER``)
``--load-format fastsafetensors``       0.8.2      0.8.1 (``LoadFormat.FASTSAFETENSORS``)
``--safetensors-load-strategy`` lazy,   0.10.2     0.10.1.1
eager
``--safetensors-load-strategy prefetch``  0.18.0   0.17.0 (``weight_utils.py`` has no prefetch)
======================================  =========  ================================================

:func:`resolve` is pure: it turns ``engine.weightsLoader`` (``auto`` by default) and
``engine.weightsStorage`` (set by the operator from the model's source and cache kind) into the
flags, or into a refusal naming the field. ``auto`` picks per storage: ``local`` keeps vLLM's
default (mmap; no flag), ``network`` (a PersistentVolumeClaim) reads ahead (``prefetch``, else
``eager`` on vLLM 0.10.2-0.17), ``objectStorage`` streams (``runaiStreamer``). An ``auto`` choice
the installed vLLM lacks falls back to the next one that it has, down to no flag; a loader the
user named that it lacks is refused. A flag the user passes in ``engine.extraArgs`` wins.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from packaging.version import Version

__all__ = [
    "LOADER_SINCE",
    "LoaderChoice",
    "WeightsLoader",
    "WeightsStorage",
    "loader_known",
    "resolve",
]


class WeightsLoader(str, enum.Enum):
    AUTO = "auto"
    #: vLLM's default: mmap (``lazy``); passed as ``--safetensors-load-strategy lazy`` where the
    #: flag exists, so vLLM 0.23+'s own NFS auto-prefetch stays off too.
    MMAP = "mmap"
    EAGER = "eager"
    PREFETCH = "prefetch"
    RUNAI_STREAMER = "runaiStreamer"
    FASTSAFETENSORS = "fastsafetensors"


class WeightsStorage(str, enum.Enum):
    """Where the weights are read from, as the operator knows it from the source and cache kind."""

    LOCAL = "local"
    NETWORK = "network"
    OBJECT_STORAGE = "objectStorage"


#: The first vLLM release that knows each loader (module docstring).
LOADER_SINCE: dict[WeightsLoader, Version] = {
    WeightsLoader.MMAP: Version("0.10.2"),
    WeightsLoader.EAGER: Version("0.10.2"),
    WeightsLoader.PREFETCH: Version("0.18.0"),
    WeightsLoader.RUNAI_STREAMER: Version("0.6.6"),
    WeightsLoader.FASTSAFETENSORS: Version("0.8.2"),
}
#: What ``auto`` tries per storage kind, best first; the last resort is always vLLM's default.
AUTO_ORDER: dict[WeightsStorage, tuple[WeightsLoader, ...]] = {
    WeightsStorage.LOCAL: (),
    WeightsStorage.NETWORK: (WeightsLoader.PREFETCH, WeightsLoader.EAGER),
    WeightsStorage.OBJECT_STORAGE: (WeightsLoader.RUNAI_STREAMER,),
}
#: vLLM's fastsafetensors iterator places tensors on ``cuda:<device>`` (``weight_utils.py``
#: ``fastsafetensors_weights_iterator``, v0.8.2 to v0.32.0): no other platform can use it.
FASTSAFETENSORS_PLATFORMS = ("cuda",)
_LOADER_FLAGS = ("--load-format", "--safetensors-load-strategy")


@dataclass
class LoaderChoice:
    """The flags to pass, the loader they stand for, and why (for the log and ``/state``)."""

    loader: WeightsLoader | None
    args: list[str] = field(default_factory=list)
    reason: str = ""
    #: Set when the user's explicit choice cannot run here: the start is refused with it.
    error: str | None = None


def loader_known(loader: WeightsLoader, vllm: Version | None) -> bool:
    """True when vLLM ``vllm`` has ``loader`` (an unknown version is assumed to have none)."""
    if loader is WeightsLoader.AUTO:
        return True
    return vllm is not None and vllm >= LOADER_SINCE[loader]


def _args(loader: WeightsLoader, vllm: Version | None) -> list[str]:
    if loader is WeightsLoader.RUNAI_STREAMER:
        return ["--load-format", "runai_streamer"]
    if loader is WeightsLoader.FASTSAFETENSORS:
        return ["--load-format", "fastsafetensors"]
    if loader is WeightsLoader.MMAP and not loader_known(loader, vllm):
        return []  # before the flag existed, mmap was the only behaviour
    strategy = "lazy" if loader is WeightsLoader.MMAP else loader.value
    return ["--safetensors-load-strategy", strategy]


def _given(extra_args: Sequence[str]) -> str | None:
    for token in extra_args:
        name = token.split("=", 1)[0]
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        if name in _LOADER_FLAGS:
            return name
    return None


def _unavailable(loader: WeightsLoader, vllm: Version | None, platform: str, streamer_installed: bool) -> str | None:
    if loader is WeightsLoader.MMAP:
        return None
    if not loader_known(loader, vllm):
        return (f"vLLM {vllm if vllm is not None else '(version unknown)'} has no {loader.value} loader "
                f"(from vLLM {LOADER_SINCE[loader]})")
    if loader is WeightsLoader.FASTSAFETENSORS and platform not in FASTSAFETENSORS_PLATFORMS:
        return (f"vLLM's fastsafetensors loader places tensors on CUDA devices only (weight_utils.py); "
                f"platform {platform} cannot use it")
    if loader is WeightsLoader.RUNAI_STREAMER and not streamer_installed:
        return "the image has no runai-model-streamer package (pip install 'vllm[runai]')"
    return None


def resolve(loader: WeightsLoader, storage: WeightsStorage, vllm: Version | None, platform: str,
            extra_args: Sequence[str] = (), *, streamer_installed: bool = True) -> LoaderChoice:
    """The loader flags for ``loader`` on ``storage`` with vLLM ``vllm`` on ``platform``.

    ``extra_args``: the user's ``engine.extraArgs`` (a loader flag there wins); ``streamer_installed``:
    whether the Run:ai Model Streamer package can be imported in the engine's environment.
    """

    given = _given(extra_args)
    if given is not None:
        return LoaderChoice(None, [], f"engine.extraArgs sets {given}")
    if loader is not WeightsLoader.AUTO:
        why = _unavailable(loader, vllm, platform, streamer_installed)
        if why is None and storage is WeightsStorage.OBJECT_STORAGE and loader is not WeightsLoader.RUNAI_STREAMER:
            why = "only the Run:ai Model Streamer (runaiStreamer) reads object storage"
        if why is not None:
            return LoaderChoice(loader, [], why, error=f"engine.weightsLoader {loader.value}: {why}; choose "
                                                       "another loader or auto")
        return LoaderChoice(loader, _args(loader, vllm), "engine.weightsLoader")
    skipped: list[str] = []
    for candidate in AUTO_ORDER[storage]:
        why = _unavailable(candidate, vllm, platform, streamer_installed)
        if why is None:
            reason = f"auto for {storage.value} storage" + (f" ({'; '.join(skipped)})" if skipped else "")
            return LoaderChoice(candidate, _args(candidate, vllm), reason)
        skipped.append(f"not {candidate.value}: {why}")
    reason = f"auto for {storage.value} storage: vLLM's default (mmap)" + (f"; {'; '.join(skipped)}" if skipped else "")
    if storage is WeightsStorage.OBJECT_STORAGE:
        return LoaderChoice(None, [], reason, error=f"engine.weightsStorage objectStorage: {'; '.join(skipped)}; "
                                                     "only the Run:ai Model Streamer reads object storage")
    return LoaderChoice(None, [], reason)
