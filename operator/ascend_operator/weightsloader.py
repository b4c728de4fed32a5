"""The weights-loader check the schema cannot make: does the image's vLLM have the loader asked for?

``spec.engine.weightsLoader`` names a loader; the vLLM that runs it is the one the vllm-ascend
release in the image's tag pairs with (``...-vllm-ascend-v0.13.0`` runs vLLM 0.13.0, as the
runtime assumes when it cannot read vLLM's own version). A loader that vLLM lacks
(:data:`ascend_runtime.weightsload.LOADER_SINCE`) is refused here, as a
:class:`ascend_operator.api.SpecError` naming the field (the InvalidSpec condition and its Event),
instead of a pod that exits at start-up. An image whose tag names no version (the CPU image, a
digest) is not checked here; the runtime refuses at start-up then, with the same words. ``auto``
is never refused: it falls back to a loader the installed vLLM has.
"""

from __future__ import annotations

from ascend_runtime.weightsload import LOADER_SINCE, WeightsLoader, loader_known
from packaging.version import InvalidVersion, Version

from ascend_operator.api import AscendLLMDeploymentSpec, Platform, SpecError
from ascend_operator.builders import resolve_image
from ascend_operator.lora import image_vllm_ascend
from ascend_operator.settings import OperatorSettings

FIELD = "spec.engine.weightsLoader"


def image_vllm(image: str) -> Version | None:
    """The vLLM release the image's vllm-ascend tag pairs with, or None (no version in the tag)."""
    tag = image_vllm_ascend(image)
    if tag is None:
        return None
    try:
        return Version(".".join(str(part) for part in Version(tag).release[:3]))
    except InvalidVersion:
        return None


def weights_loader_problems(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> list[tuple[str, str]]:
    """``(field, message)`` when the image's vLLM lacks the loader ``spec.engine.weightsLoader`` names."""
    loader = spec.engine.weights_loader
    if loader is None or loader in (WeightsLoader.AUTO, WeightsLoader.MMAP) or spec.platform == Platform.CPU:
        return []
    image = resolve_image(spec, settings)
    vllm = image_vllm(image)
    if vllm is None or loader_known(loader, vllm):
        return []
    return [(FIELD, f"engine.weightsLoader {loader.value}: the image {image} runs vLLM {vllm}, which has no "
                    f"{loader.value} loader (from vLLM {LOADER_SINCE[loader]}); choose auto, mmap or a loader "
                    "that version has, or an image with a newer vllm-ascend")]


def enforce_weights_loader(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> None:
    """Raise :class:`SpecError` when :func:`weights_loader_problems` finds one."""
    problems = weights_loader_problems(spec, settings)
    if problems:
        raise SpecError(problems)
