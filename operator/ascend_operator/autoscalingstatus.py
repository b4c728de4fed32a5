"""``status.autoscaling``, the ``Autoscaling`` condition and the autoscaler's Events (pure).

While ``spec.autoscaling.enabled``, ``status.autoscaling`` carries the autoscaler, its bounds, the
``spec.replicas`` last seen and what the HPA (ours, or the one KEDA made) reports (desired and
current replicas, last scale time); the ``Autoscaling`` condition says whether the autoscaler owns
``spec.replicas`` or why it cannot. :func:`autoscaling_events` announces the autoscaler taking
over, its scales, and a manual change of ``spec.replicas`` that the autoscaler will undo.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ascend_operator.api import AscendLLMDeploymentSpec, AutoscalingStatus
from ascend_operator.conditions import AUTOSCALING, ConditionValue, get_condition

AUTOSCALING_DISABLED = "AutoscalingDisabled"


@dataclass(frozen=True)
class AutoscalingObservation:
    """The autoscaler of a resource whose ``spec.autoscaling`` is on, as the reconcile made it.

    ``reason`` / ``message`` / ``problem`` are :class:`ascend_operator.builders.AutoscalerChoice`'s.
    ``provider`` is the kind created (``HorizontalPodAutoscaler`` or ``ScaledObject``) and ``name``
    its name; both None when none could be (e.g. KEDA not installed). ``hpa`` is the live HPA that
    does the scaling (ours, or the one KEDA made for the ScaledObject), for its status.
    """

    reason: str
    message: str
    problem: bool
    provider: str | None
    name: str | None
    min_replicas: int
    max_replicas: int
    hpa: Mapping[str, Any] | None = None


def autoscaling_status(spec: AscendLLMDeploymentSpec,
                       auto: AutoscalingObservation) -> tuple[AutoscalingStatus, ConditionValue]:
    """``status.autoscaling`` and the Autoscaling condition of a resource that autoscales."""

    named = bool(auto.provider and auto.name)
    found = (auto.hpa or {}).get("status") or {}
    status = AutoscalingStatus(
        provider=auto.provider if named else None, name=auto.name if named else None,
        min_replicas=auto.min_replicas, max_replicas=auto.max_replicas, spec_replicas=spec.replicas,
        desired_replicas=found.get("desiredReplicas"), current_replicas=found.get("currentReplicas"),
        last_scale_time=found.get("lastScaleTime"),
    )
    if auto.problem:
        return status, (False, auto.reason, auto.message)
    return status, (True, auto.reason, (
        f"{auto.provider} {auto.name} owns spec.replicas (between {auto.min_replicas} and {auto.max_replicas}) "
        "and sets it back after a manual kubectl scale; change spec.autoscaling.minReplicas/maxReplicas, "
        "or set spec.autoscaling.enabled false to set the replicas by hand"
    ))


def autoscaling_events(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Events about the autoscaler, each on a transition only:

    - the Autoscaling condition turning True, or changing reason while True (a provider switch):
      Normal ``AutoscalerOwnsReplicas``; turning to a problem reason: a Warning of that reason;
      turning to AutoscalingDisabled from True: Normal ``AutoscalingDisabled``;
    - ``spec.replicas`` changed while the same autoscaler was in charge before and after: Normal
      ``AutoscalerScaled`` when the autoscaler reports that count as its desired one, else
      Warning ``ManualScaleOverridden`` (someone ran ``kubectl scale``; it will not stick).
    """

    events: list[tuple[str, str, str]] = []
    before = get_condition(previous, AUTOSCALING) or {}
    after = get_condition(new, AUTOSCALING)
    if after is not None and (before.get("status"), before.get("reason")) != (after["status"], after["reason"]):
        if after["status"] == "True":
            events.append(("Normal", "AutoscalerOwnsReplicas", after["message"]))
        elif after["reason"] != AUTOSCALING_DISABLED:
            events.append(("Warning", after["reason"], after["message"]))
        elif before.get("status") == "True":
            events.append(("Normal", AUTOSCALING_DISABLED, after["message"]))

    old = (previous or {}).get("autoscaling") or {}
    now = new.get("autoscaling") or {}
    same_autoscaler = old.get("name") and (old.get("provider"), old.get("name")) == (now.get("provider"), now.get("name"))
    was, wanted = old.get("specReplicas"), now.get("specReplicas")
    if same_autoscaler and was is not None and wanted is not None and was != wanted:
        who = f"{now['provider']} {now['name']}"
        desired = now.get("desiredReplicas")
        if desired == wanted:
            current = now.get("currentReplicas")
            events.append(("Normal", "AutoscalerScaled", f"{who} scaled spec.replicas from {was} to {wanted}"
                           + (f" ({current} running before)" if current is not None else "")))
        else:
            back = f"back to {desired}" if desired is not None else (
                f"back between {now.get('minReplicas')} and {now.get('maxReplicas')} as the load asks")
            events.append(("Warning", "ManualScaleOverridden", (
                f"spec.replicas changed from {was} to {wanted}, but autoscaling is on: {who} owns the replica "
                f"count and sets it {back}; to change the range set spec.autoscaling.minReplicas/maxReplicas, "
                "or set spec.autoscaling.enabled false to scale by hand")))
    return events
