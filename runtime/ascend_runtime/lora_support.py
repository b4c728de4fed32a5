"""Which LoRA setups the installed engine can serve, as refusals and warnings naming the field.

Pure (the config model and ``packaging`` only), so the operator can refuse a spec at admission
with the same words the runtime uses at start-up. Known failures on vllm-ascend, from its issues
and docs (an NPU is needed to confirm them for a given model):

==========================================  ===================================================
LoRA with ``engine.parallel.tensor`` > 1,   refused. Open reports: "hidden in should be smaller
vllm-ascend 0.20.2rc1 through 0.23.x        than hidden out" at start-up with TP 4 on
                                            v0.20.2rc1 (vllm-ascend#10562); ``sgmv_expand``
                                            crashes or hangs with TP > 1 on v0.23.0
                                            (vllm-ascend#16586). Later versions are not
                                            checked until a source says how they behave.
LoRA with ``engine.parallel.expert``,       refused: the v0.23.0 LoRA guide says expert
vllm-ascend up to 0.23.x                    parallel is not supported for MoE models with LoRA
                                            (and before PR #10977 MoE LoRA was not at all).
LoRA with ``engine.quantization`` on        warned: the same guide says quantized MoE models
vllm-ascend up to 0.23.x                    are not supported with LoRA (dense models are not
                                            covered by that note; the runtime cannot tell).
==========================================  ===================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from ascend_runtime.config import EngineConfig

__all__ = ["LoraSupport", "check_lora_support"]

#: vllm-ascend releases with open reports of LoRA failing under tensor parallel (module docstring).
TP_BROKEN_FROM = Version("0.20.2rc1")
#: The last minor series the sources describe; later ones are not refused.
LAST_KNOWN_SERIES = (0, 23)

TP_ISSUES = "vllm-ascend#10562, vllm-ascend#16586"
LORA_GUIDE = "vllm-ascend v0.23.0 docs, user_guide/feature_guide/lora.md"


@dataclass
class LoraSupport:
    """``errors``: the engine cannot serve this (refuse); ``warnings``: it may not."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _version(text: str | None) -> Version | None:
    if not text:
        return None
    try:
        return Version(text)  # a leading "v" (an image tag) is valid PEP 440
    except InvalidVersion:
        return None


def check_lora_support(config: EngineConfig, platform: str, vllm_ascend: str | None) -> LoraSupport:
    """Whether ``config.lora`` can be served by vllm-ascend ``vllm_ascend`` on ``platform``.

    ``platform`` is ``ascend``, ``cpu`` or ``cuda``; ``vllm_ascend`` a version such as
    ``0.23.0`` or an image tag such as ``v0.23.0`` (None or unparseable: no version checks).
    """

    out = LoraSupport()
    lora = config.lora
    if lora is None or not lora.enabled or platform != "ascend":
        return out
    version = _version(vllm_ascend)
    if version is None or version.release[:2] > LAST_KNOWN_SERIES:
        return out
    label = vllm_ascend
    parallel = config.engine.parallel
    if parallel.tensor > 1 and version >= TP_BROKEN_FROM:
        out.errors.append(
            f"lora.enabled with engine.parallel.tensor {parallel.tensor}: vllm-ascend {label} fails to serve "
            f"LoRA under tensor parallel ({TP_ISSUES}); set engine.parallel.tensor to 1 (use data parallel "
            "for more throughput), or use an image whose vllm-ascend is outside 0.20.2rc1-0.23.x"
        )
    if parallel.expert:
        out.errors.append(
            f"lora.enabled with engine.parallel.expert: vllm-ascend {label} does not support expert parallel "
            f"with LoRA ({LORA_GUIDE}); set engine.parallel.expert to false"
        )
    if config.engine.quantization:
        out.warnings.append(
            f"lora.enabled with engine.quantization {config.engine.quantization}: vllm-ascend {label} does not "
            f"support LoRA on quantized MoE models ({LORA_GUIDE}); a dense model is not covered by that note"
        )
    return out
