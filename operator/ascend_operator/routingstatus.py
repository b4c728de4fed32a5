"""``status.routing`` and the ``Routing`` condition (spec.routing; pure).

What the reconcile made (the InferencePool, the Endpoint Picker, the HTTPRoute) and what the
gateways say of the pool (its ``status.parents``); the condition says whether traffic reaches the
pool or why not, and :func:`routing_events` announces a problem (Warning) or the pool's acceptance
(Normal) on the transition only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ascend_operator.api import RoutingParentStatus, RoutingStatus
from ascend_operator.builders.routing import missing_engine_metrics, pool_parents
from ascend_operator.conditions import ROUTING, ConditionValue, get_condition


@dataclass(frozen=True)
class RoutingObservation:
    """spec.routing as the reconcile made it: ``missing`` says which API the cluster lacks (then
    nothing was made); ``pool`` is the live InferencePool (its ``status.parents``);
    ``vllm_versions`` the engine versions the pods report."""

    pool_name: str
    epp_name: str
    route_name: str | None
    gateway: str | None
    missing: str | None = None
    pool: Mapping[str, Any] | None = None
    vllm_versions: Sequence[str] = ()


ROUTING_APIS_MISSING = "RoutingAPIsMissing"
ROUTING_DISABLED = "RoutingDisabled"
POOL_NOT_ACCEPTED = "PoolNotAccepted"
ENGINE_METRICS_MISSING = "EngineMetricsMissing"
AWAITING_GATEWAY = "AwaitingGateway"
POOL_ACCEPTED = "PoolAccepted"
#: Routing reasons that announce themselves with a Warning Event when they appear or change.
_ROUTING_WARNINGS = frozenset({ROUTING_APIS_MISSING, POOL_NOT_ACCEPTED, ENGINE_METRICS_MISSING})


def _all(values: list[str]) -> str:
    if not values:
        return "Unknown"
    if "False" in values:
        return "False"
    return "True" if all(v == "True" for v in values) else "Unknown"


def routing_status(observation: RoutingObservation) -> tuple[RoutingStatus, ConditionValue]:
    """``status.routing`` and the Routing condition (see the README's Prefix-aware routing)."""

    made = {"pool": observation.pool_name, "endpoint_picker": observation.epp_name,
            "route": observation.route_name or None, "gateway": observation.gateway or None}
    if observation.missing:
        status = RoutingStatus(**made, accepted="Unknown", resolved_refs="Unknown", parents=[],
                               missing_metrics=[])
        return status, (False, ROUTING_APIS_MISSING, observation.missing)
    parents = pool_parents(dict(observation.pool) if observation.pool is not None else None)
    accepted = _all([p["accepted"] for p in parents])
    resolved = _all([p["resolvedRefs"] for p in parents])
    missing: dict[str, list[str]] = {}
    since: dict[str, str] = {}
    for version in observation.vllm_versions:
        for metric in missing_engine_metrics(version):
            missing.setdefault(metric.name, []).append(version)
            since[metric.name] = metric.since_vllm
    status = RoutingStatus(**made, accepted=accepted, resolved_refs=resolved,
                           parents=[RoutingParentStatus.model_validate(p) for p in parents],
                           missing_metrics=sorted(missing))
    refused = [p for p in parents if "False" in (p["accepted"], p["resolvedRefs"])]
    if refused:
        return status, (False, POOL_NOT_ACCEPTED, "; ".join(
            f"Gateway {p['gateway']}: Accepted {p['accepted']}, ResolvedRefs {p['resolvedRefs']}"
            + (f" ({p['message']})" if p.get("message") else "") for p in refused))
    if missing:
        return status, (False, ENGINE_METRICS_MISSING, "; ".join(
            f"the Endpoint Picker reads {name}, which vLLM {', '.join(sorted(set(versions)))} does not publish "
            f"(its scorer sees no value for these pods); use an image with vLLM {since[name]} or later"
            for name, versions in sorted(missing.items())))
    if accepted == "True" and resolved == "True":
        gateways = ", ".join(p["gateway"] for p in parents)
        return status, (True, POOL_ACCEPTED, f"InferencePool {observation.pool_name} accepted by {gateways}")
    if observation.route_name is None:
        return status, (False, AWAITING_GATEWAY, (
            f"InferencePool {observation.pool_name} and Endpoint Picker {observation.epp_name} made; no Gateway "
            "is set (spec.routing.gateway or the setting ROUTING_GATEWAY_NAME), so no HTTPRoute sends traffic to it"))
    return status, (False, AWAITING_GATEWAY, (
        f"HTTPRoute {observation.route_name} sends {observation.gateway} traffic to InferencePool "
        f"{observation.pool_name}; no gateway has reported on the pool yet (its status.parents is empty)"))


def routing_events(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Routing turning to a problem reason, or changing while at one (Warning), or to PoolAccepted
    (Normal)."""

    events: list[tuple[str, str, str]] = []
    before = get_condition(previous, ROUTING) or {}
    after = get_condition(new, ROUTING) or {}
    if after and (before.get("status"), before.get("reason"), before.get("message")) != (
            after["status"], after["reason"], after["message"]):
        if after["reason"] in _ROUTING_WARNINGS:
            events.append(("Warning", after["reason"], after["message"]))
        elif after["status"] == "True" and before.get("status") != "True":
            events.append(("Normal", POOL_ACCEPTED, after["message"]))
    return events
