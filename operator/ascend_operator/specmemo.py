"""Each resource's spec, parsed and checked once per generation instead of once per pass.

A pass needs the typed spec, the administrator's policies applied to it, the model cache's and hub
adapters' plans and the LoRA guard's verdict; all of them depend only on the spec, the resource's
name and the settings. The API server bumps ``metadata.generation`` on every change of a custom
resource's spec (the CRD has a status subresource), so ``(uid, generation)`` names one spec:
the status refreshes between two spec changes (most passes at 1,000 resources: pod events and
resyncs; bench/README.md) reuse the result. A refused spec is remembered as its error. A body
without a generation (never from the API server) is checked afresh every time. The memo keeps
the :data:`CAPACITY` resources checked last (a checked spec takes about 10 kB; a skipped pass,
``ascend_operator.lastpass``, needs none).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ascend_operator.api import AscendLLMDeploymentSpec, SpecError, parse_spec
from ascend_operator.builders import Plans, make_plans
from ascend_operator.kvcheck import enforce_kv_transfer
from ascend_operator.lora import enforce_lora
from ascend_operator.policy import enforce_policy
from ascend_operator.weightsloader import enforce_weights_loader
from ascend_operator.settings import OperatorSettings


@dataclass(frozen=True)
class CheckedSpec:
    """A spec as a pass uses it: typed, within the policies, planned, with the LoRA guard's warnings."""

    spec: AscendLLMDeploymentSpec
    plans: Plans
    warnings: tuple[str, ...]


def check_spec(name: str, spec: Mapping[str, Any], settings: OperatorSettings) -> CheckedSpec:
    """Parse and check ``spec`` of resource ``name``; raises :class:`SpecError` naming what is refused."""

    parsed = parse_spec(spec)
    enforce_policy(parsed, settings)  # the administrator's policies refuse like the schema
    # The model cache's plan and the hub adapters' downloads; each refuses a repo id or revision
    # the cache cannot store.
    plans = make_plans(name, parsed, settings)
    enforce_weights_loader(parsed, settings)  # the image's vLLM must have the loader named
    enforce_kv_transfer(parsed, settings)  # what the image's vllm-ascend version refuses
    # What the CRD cannot see (the resource name, the image); the warnings go to LoraWarning.
    return CheckedSpec(parsed, plans, tuple(enforce_lora(name, parsed, settings, plans.cache_plan)))


#: Resources whose checked spec is kept (the least recently used goes first).
CAPACITY = 512


class SpecMemo:
    """Resource key -> its last checked spec (or refusal), valid for one uid, generation and settings."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        #: key -> ((uid, generation, name), settings, the checked spec or the refusal).
        self._checked: OrderedDict[str, tuple[tuple[str, int, str], OperatorSettings, CheckedSpec | SpecError]] = (
            OrderedDict())

    def __len__(self) -> int:
        return len(self._checked)

    def check(self, key: str, body: Mapping[str, Any], settings: OperatorSettings) -> CheckedSpec:
        """``body``'s spec checked (:func:`check_spec`), from the memo when its generation was."""

        meta = body["metadata"]
        generation = int(meta.get("generation") or 0)
        ident = (meta.get("uid") or "", generation, meta["name"])
        held = self._checked.get(key)
        if held is not None and held[0] == ident and held[1] is settings and generation:
            self._checked.move_to_end(key)
            if isinstance(held[2], SpecError):
                raise SpecError(held[2].problems)  # a fresh one: a raised one keeps its traceback
            return held[2]
        try:
            checked: CheckedSpec | SpecError = check_spec(meta["name"], body.get("spec") or {}, settings)
        except SpecError as error:
            checked = error
        if generation:
            self._checked[key] = (ident, settings, checked)
            self._checked.move_to_end(key)
            if len(self._checked) > self._capacity:
                self._checked.popitem(last=False)
        if isinstance(checked, SpecError):
            raise SpecError(checked.problems)
        return checked

    def forget(self, key: str) -> None:
        self._checked.pop(key, None)
