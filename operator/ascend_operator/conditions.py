"""The resource's conditions: their types, the order they are listed in, and the transition rule.

Conditions follow the Kubernetes convention (LeaderWorkerSet's ``setCondition``): the
``lastTransitionTime`` moves only when a condition's status flips; reason and message are updated
in place. That, and nothing in the status depending on the current time otherwise, is what keeps
a status stable across resyncs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ascend_operator.api import Condition, ConditionStatus

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
WAITING_FOR_NPU = "WaitingForNPU"
#: spec.model.cache: the download of the model (ascend_operator.cachestatus).
MODEL_CACHED = "ModelCached"
AUTOSCALING = "Autoscaling"
#: spec.routing: the pool, the Endpoint Picker and the route, and what the gateways say.
ROUTING = "Routing"
GRAPH_MODE_FALLBACK = "GraphModeFallback"
LEAK_SUSPECTED = "LeakSuspected"
INVALID_SPEC = "InvalidSpec"
#: spec.lora: a combination the installed vllm-ascend may not serve (the LoRA guard's warnings).
LORA_WARNING = "LoraWarning"
#: The order conditions appear in (``kubectl describe`` shows them as listed).
CONDITION_ORDER = (READY, PROGRESSING, DEGRADED, WAITING_FOR_NPU, MODEL_CACHED, AUTOSCALING, ROUTING,
                   GRAPH_MODE_FALLBACK, LEAK_SUSPECTED, LORA_WARNING, INVALID_SPEC)

#: A condition as the families compute it: (status: True/False or "Unknown", reason, message).
ConditionValue = tuple[bool | str, str, str]


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """``conditions`` with condition ``type_`` set; its lastTransitionTime changes only when its
    status flips (or it is new). Other conditions are kept as they are."""

    value = ConditionStatus(status if isinstance(status, str) else ("True" if status else "False"))
    result: list[Condition] = []
    found = False
    for condition in conditions:
        if condition.type != type_:
            result.append(condition)
            continue
        found = True
        transition = condition.last_transition_time if condition.status == value else None
        result.append(_condition(type_, value, reason, message, transition or timestamp(now), generation))
    if not found:
        result.append(_condition(type_, value, reason, message, timestamp(now), generation))
    return result


def _condition(type_: str, status: ConditionStatus, reason: str, message: str, when: str,
               generation: int | None) -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=message, last_transition_time=when,
                     observed_generation=generation)


def timestamp(now: datetime) -> str:
    """``now`` as a condition's RFC 3339 time, to the second."""
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_conditions(status: Mapping[str, Any] | None) -> list[Condition]:
    """The conditions of a stored status (camelCase), typed."""
    return [Condition.model_validate(condition) for condition in (status or {}).get("conditions") or []]


def get_condition(status: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The condition ``type_`` of a stored (camelCase) ``status``, if present."""

    for condition in (status or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return dict(condition)
    return None


def ordered(conditions: list[Condition]) -> list[Condition]:
    """``conditions`` in :data:`CONDITION_ORDER` (unknown types last, by name)."""
    rank = {type_: index for index, type_ in enumerate(CONDITION_ORDER)}
    return sorted(conditions, key=lambda c: (rank.get(c.type, len(rank)), c.type))
