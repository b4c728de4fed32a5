"""LoRA checks the schema cannot make, run when a resource is reconciled (pure).

- An adapter named like the base model when the served name is the resource name (the CRD's
  CEL rule sees ``model.servedName`` and the hub id, not ``metadata.name`` from the spec).
- The runtime's own guard, :func:`ascend_runtime.lora_support.check_lora_support`, on the engine
  config the operator builds, for the vllm-ascend version the image names in its tag
  (``...-vllm-ascend-v0.23.0``, as the operator's default images do); an image whose tag names
  none is not checked here (the runtime still refuses at start-up, exit 2). Its refusals come
  back with the spec's field names, as :class:`ascend_operator.api.SpecError` problems; its
  warnings (LoRA with ``spec.engine.quantization`` on vllm-ascend up to 0.23.x) as messages in
  the same words, :func:`lora_warnings`, which the status shows in the ``LoraWarning`` condition.
"""

from __future__ import annotations

import re

from ascend_runtime.lora_support import check_lora_support

from ascend_operator.api import AscendLLMDeploymentSpec, Platform, SpecError, display_model
from ascend_operator.builders import build_engine_config, resolve_image
from ascend_operator.builders.adapters import lora_enabled
from ascend_operator.builders.imagetag import image_vllm_ascend  # noqa: F401  (re-exported)
from ascend_operator.builders.modelcache import CachePlan, plan_cache
from ascend_operator.settings import OperatorSettings

#: The engine config's field names in the runtime's messages, and the spec's fields they come from.
_SPEC_FIELDS = {
    "engine.parallel.tensor": "spec.parallelism.tensor",
    "engine.parallel.expert": "spec.parallelism.expert",
    "engine.quantization": "spec.engine.quantization",
    "lora.enabled": "spec.lora.enabled",
}
_CONFIG_FIELD = re.compile(r"(?<![\w.])(" + "|".join(re.escape(key) for key in _SPEC_FIELDS) + r")(?![\w])")


def _in_spec_words(message: str) -> tuple[str, str]:
    """The runtime's message with spec field names, and the field it is about."""
    fields = [_SPEC_FIELDS[key] for key in _CONFIG_FIELD.findall(message)]
    about = next((field for field in fields if field != "spec.lora.enabled"), "spec.lora")
    return about, _CONFIG_FIELD.sub(lambda m: _SPEC_FIELDS[m.group(1)], message)


def lora_problems(name: str, spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> list[tuple[str, str]]:
    """``(field, message)`` for each LoRA setting of resource ``name`` the operator refuses."""
    return _check(name, spec, settings, plan_cache(name, spec, settings))[0]


def lora_warnings(name: str, spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> list[str]:
    """What the guard warns of for resource ``name`` (the engine may not serve it), in spec words."""
    return _check(name, spec, settings, plan_cache(name, spec, settings))[1]


def enforce_lora(name: str, spec: AscendLLMDeploymentSpec, settings: OperatorSettings,
                 cache_plan: CachePlan | None) -> list[str]:
    """Raise :class:`SpecError` naming each refused LoRA setting; else return the guard's warnings
    (:func:`lora_warnings`), from one check (``cache_plan``: the pass's own, not planned again)."""
    problems, warnings = _check(name, spec, settings, cache_plan)
    if problems:
        raise SpecError(problems)
    return warnings


def _check(name: str, spec: AscendLLMDeploymentSpec, settings: OperatorSettings,
           cache_plan: CachePlan | None) -> tuple[list[tuple[str, str]], list[str]]:
    if not lora_enabled(spec) or spec.lora is None:
        return [], []
    problems: list[tuple[str, str]] = []
    served = display_model(spec, name)
    for index, adapter in enumerate(spec.lora.adapters):
        if adapter.name == served:
            problems.append((
                f"spec.lora.adapters[{index}].name",
                f"adapter name {adapter.name!r} is the base model's served name (here the resource name); "
                "rename the adapter or set model.servedName",
            ))
    image = resolve_image(spec, settings)
    config = build_engine_config(name, spec, settings, image=image, cache_plan=cache_plan)
    platform = "cpu" if spec.platform == Platform.CPU else "ascend"
    support = check_lora_support(config, platform, image_vllm_ascend(image))
    problems.extend(_in_spec_words(error) for error in support.errors)
    return problems, [_in_spec_words(warning)[1] for warning in support.warnings]
