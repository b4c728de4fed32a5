"""The resource's status, computed from what was observed (pure: no I/O, no clock, no globals).

:func:`resource_status` turns the pods of one ``AscendLLMDeployment`` and the runtime states read
from them (``GET /state``; ``None`` where unreadable) into the typed
:class:`ascend_operator.api.AscendLLMDeploymentStatus`; :func:`compute_status` is that status as
the camelCase JSON the operator writes. :func:`invalid_spec_status` is the status of a resource
whose spec the operator refuses. :func:`status_patch` is the merge patch from one status to
another, or ``None`` when nothing changed, so a resync that changes nothing writes nothing.

Each condition family has its module: :mod:`.replicastatus` (the replicas, the phase and
WaitingForNPU), :mod:`.graphstatus` (graph modes, warmup, GraphModeFallback, LeakSuspected),
:mod:`.cachestatus` (ModelCached), :mod:`.autoscalingstatus`, :mod:`.routingstatus`,
:mod:`.lorastatus` and :mod:`.tunedstatus` (the tuned defaults); :mod:`.conditions` holds the transition rule.

What the API server reports overrides the pods: a child it refused (``Progressing`` reason
``ChildRefused``) or a workload that cannot make pods (the Deployment's ``ReplicaFailure``
condition: no PriorityClass, quota exceeded, admission refused) makes the phase ``Failed`` when
no replica is ready and ``Degraded`` otherwise; a refused spec is ``Failed``. The phase is
``Ready`` exactly when the ``Ready`` condition is True. ``Autoscaling``, ``WaitingForNPU``,
``Routing`` and ``LoraWarning`` appear once they first apply (a resource that never autoscaled or
never waited does not carry them) and stay, False, afterwards.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from ascend_runtime.cachelayout import FetchPhase

from ascend_operator.api import (
    AscendLLMDeploymentSpec,
    AscendLLMDeploymentStatus,
    Phase,
    RolesStatus,
    RoleStatus,
    display_chip,
    display_model,
)
from ascend_operator.autoscalingstatus import (
    AUTOSCALING_DISABLED,
    AutoscalingObservation,
    autoscaling_events,
    autoscaling_status,
)
from ascend_operator.cachestatus import cache_condition, cache_status, describe
from ascend_operator.conditions import (
    AUTOSCALING,
    DEGRADED,
    GRAPH_MODE_FALLBACK,
    INVALID_SPEC,
    LEAK_SUSPECTED,
    LORA_WARNING,
    MODEL_CACHED,
    PROGRESSING,
    READY,
    ROUTING,
    WAITING_FOR_NPU,
    get_condition,
    ordered,
    parse_conditions,
    set_condition,
)
from ascend_operator.graphstatus import fallback_condition, graph_status, leak_condition, warmup_status
from ascend_operator.lorastatus import lora_events, lora_status
from ascend_operator.builders.common import PD_ROLE_LABEL
from ascend_operator.observation import Observation, RoleObservation
from ascend_operator.replicastatus import (
    Replica,
    aggregate_phase,
    group_replicas,
    npu_wait_condition,
    pod_replicas,
    workload_failure,
)
from ascend_operator.routingstatus import ROUTING_DISABLED, RoutingObservation, routing_events, routing_status
from ascend_operator.tunedstatus import tuned_defaults_status

#: What callers of this module build its input from (re-exported: the status's inputs in one place).
__all__ = ["AutoscalingObservation", "Observation", "RoleObservation", "RoutingObservation", "compute_status",
           "invalid_spec_status", "resource_status", "status_patch", "transition_events"]

LORA_LIMITATION = "KnownEngineLimitation"
#: Progressing reasons that stop the reconcile from making the workload (Warning Event each).
CHILD_CONFLICT = "ChildConflict"
CHILD_REFUSED = "ChildRefused"
LWS_NOT_INSTALLED = "LeaderWorkerSetNotInstalled"

#: The key kopf keeps its own bookkeeping under; never part of the operator's status diff.
KOPF_STATUS_KEY = "kopf"


def resource_status(
    spec: AscendLLMDeploymentSpec,
    observation: Observation,
    previous: Mapping[str, Any] | None,
    now: datetime,
) -> AscendLLMDeploymentStatus:
    """The full status of a resource with a valid spec, typed (``previous``: the stored status)."""

    previous = previous or {}
    pods = pod_replicas(observation)
    roles = {role: _role_replicas(observation, role, info) for role, info in observation.roles.items()}
    if roles:
        multi_node = any(info.nodes_per_replica > 1 for info in observation.roles.values())
        replicas = [r for role_replicas, _ in roles.values() for r in role_replicas]
        behind = [b for _, role_behind in roles.values() for b in role_behind]
        wanted = sum(_desired(spec, role) for role in roles)
    else:
        multi_node = observation.nodes_per_replica > 1
        replicas, behind = group_replicas(pods, observation.nodes_per_replica) if multi_node else (pods, [])
        wanted = spec.replicas
    ready = sum(1 for r in replicas if r.ready)
    updated = sum(1 for r in replicas if r.updated)
    phase, why = aggregate_phase(wanted, replicas, ready)
    short = [f"{role} {sum(r.ready for r in rs)}/{_desired(spec, role)} ready" for role, (rs, _) in roles.items()
             if sum(r.ready for r in rs) < _desired(spec, role)]
    if phase == Phase.READY and short:  # a surplus of one role does not make up for the other
        phase, why = Phase.DEGRADED, f"{why}; {', '.join(short)}"
    generation = observation.generation
    cache = observation.cache
    downloading = cache is not None and cache.held_back and cache.state is not None
    if downloading and not replicas and wanted > 0:
        assert cache is not None and cache.state is not None
        failed = cache.state.phase == FetchPhase.FAILED
        phase, why = (Phase.FAILED if failed else Phase.DOWNLOADING), describe(cache, retry=False)
    failure = workload_failure(observation.workload)
    # What the API server says overrides what the pods show (see the module docstring).
    blocked = observation.refused or (f"{failure[0]}: {failure[1]}" if failure else None)
    if blocked and wanted > 0:
        phase = Phase.DEGRADED if ready > 0 else Phase.FAILED
        why = f"{ready}/{wanted} replicas ready; {blocked}"

    conditions = parse_conditions(previous)

    def put(type_: str, status: bool | str, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = set_condition(conditions, type_, status, reason, message, now, generation)

    all_ready = wanted > 0 and phase == Phase.READY
    put(READY, all_ready if wanted > 0 else False, "AllReplicasReady" if all_ready else phase.value, why)
    rollout_done = updated >= wanted and ready >= wanted and len(replicas) <= wanted
    if observation.refused:
        put(PROGRESSING, False, CHILD_REFUSED, observation.refused)
    elif observation.conflicts:
        put(PROGRESSING, False, CHILD_CONFLICT, "; ".join(observation.conflicts))
    elif failure:
        put(PROGRESSING, False, failure[0], failure[1])
    elif downloading:
        assert cache is not None
        cached, reason, message = cache_condition(cache)
        put(PROGRESSING, reason != "DownloadFailed", reason,
            message + "; new pods wait for the download" if not cached else message)
    elif observation.lws_missing:
        put(PROGRESSING, False, LWS_NOT_INSTALLED,
            observation.lws_missing + "; the children are left as they were until then")
    elif phase == Phase.FAILED:
        put(PROGRESSING, False, "ReplicasFailed", why)
    elif rollout_done:
        put(PROGRESSING, False, "RolloutComplete", f"{updated}/{wanted} replicas updated and ready")
    else:
        put(PROGRESSING, True, phase.value, f"{updated}/{wanted} replicas updated; {why}")
    if phase in (Phase.DEGRADED, Phase.FAILED):
        put(DEGRADED, True, "ReplicasUnavailable" if phase == Phase.DEGRADED else "ReplicasFailed", why)
    else:
        put(DEGRADED, False, "AsExpected", why)
    npu_wait = npu_wait_condition(pods, observation.resource_name)
    if npu_wait[0] or get_condition(previous, WAITING_FOR_NPU):
        put(WAITING_FOR_NPU, *npu_wait)
    autoscaling = None
    if observation.autoscaling is not None:
        autoscaling, autoscaling_condition = autoscaling_status(spec, observation.autoscaling)
        put(AUTOSCALING, *autoscaling_condition)
    elif get_condition(previous, AUTOSCALING):
        put(AUTOSCALING, False, AUTOSCALING_DISABLED,
            "autoscaling is off; spec.replicas (kubectl scale) sets the replicas")
    if cache is not None:
        put(MODEL_CACHED, *cache_condition(cache))
    routing = None
    if observation.routing is not None:
        routing, routing_condition = routing_status(observation.routing)
        put(ROUTING, *routing_condition)
    elif get_condition(previous, ROUTING):
        put(ROUTING, False, ROUTING_DISABLED, "spec.routing is off; no InferencePool, Endpoint Picker or HTTPRoute")
    put(GRAPH_MODE_FALLBACK, *fallback_condition(replicas))
    put(LEAK_SUSPECTED, *leak_condition(replicas))
    if observation.lora_warnings:
        put(LORA_WARNING, True, LORA_LIMITATION, "; ".join(observation.lora_warnings))
    elif get_condition(previous, LORA_WARNING):
        put(LORA_WARNING, False, "NoKnownLimitation",
            "the LoRA guard knows of no problem with this spec and image")
    put(INVALID_SPEC, False, "Valid", "the spec is valid")

    return AscendLLMDeploymentStatus(
        observed_generation=generation,
        phase=phase,
        replicas=len(replicas),
        ready_replicas=ready,
        updated_replicas=updated,
        ready=f"{ready}/{wanted}",  # the Ready printer column
        selector=observation.selector,
        endpoint=observation.endpoint or None,
        model=display_model(spec, observation.name),
        chip=display_chip(spec),
        graph=graph_status(replicas, previous, observation.remembered_for),
        warmup=warmup_status(replicas),
        tuned_defaults=tuned_defaults_status(replicas),
        groups=len(replicas) if multi_node else None,
        ready_groups=ready if multi_node else None,
        groups_behind=behind if multi_node else None,
        autoscaling=autoscaling,
        model_cache=cache_status(cache) if cache is not None else None,
        lora=lora_status(spec, [(replica.name, replica.state) for replica in replicas],
                         observation.adapter_downloads),
        routing=routing,
        roles=RolesStatus(**{role: _role_status(spec, role, observation.roles[role].workload, rs)
                             for role, (rs, _) in roles.items()}) if roles else None,
        conditions=ordered(conditions),
    )


def _desired(spec: AscendLLMDeploymentSpec, role: str) -> int:
    assert spec.disaggregation is not None
    return getattr(spec.disaggregation, role).replicas


def _role_replicas(observation: Observation, role: str, info: RoleObservation) -> tuple[list[Replica], list[Any]]:
    """One role's replicas (its pods by label, checked against its own config hash) and its groups behind."""
    pods = [pod for pod in observation.pods
            if ((pod.get("metadata") or {}).get("labels") or {}).get(PD_ROLE_LABEL) == role]
    mine = pod_replicas(replace(observation, pods=pods, template_hash=info.template_hash))
    return group_replicas(mine, info.nodes_per_replica) if info.nodes_per_replica > 1 else (mine, [])


def _role_status(spec: AscendLLMDeploymentSpec, role: str, workload: str, replicas: list[Replica]) -> RoleStatus:
    modes = {r.state.mode.value for r in replicas if r.state is not None and r.state.mode is not None}
    return RoleStatus(workload=workload, desired_replicas=_desired(spec, role), replicas=len(replicas),
                      ready_replicas=sum(1 for r in replicas if r.ready),
                      mode=modes.pop() if len(modes) == 1 else "Mixed" if modes else None)


def compute_status(
    spec: AscendLLMDeploymentSpec,
    observation: Observation,
    previous: Mapping[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    """The full status of a resource with a valid spec (camelCase, as stored)."""
    return resource_status(spec, observation, previous, now).wire()


def invalid_spec_status(
    previous: Mapping[str, Any] | None, message: str, generation: int, now: datetime,
) -> dict[str, Any]:
    """The status of a refused spec: InvalidSpec True with the message naming the field(s);
    Ready False; everything observed before is kept (the children are left as they were)."""

    status = {key: copy.deepcopy(value) for key, value in (previous or {}).items() if key != KOPF_STATUS_KEY}
    conditions = set_condition(parse_conditions(status), INVALID_SPEC, True, "InvalidSpec", message, now,
                               generation)
    conditions = set_condition(conditions, READY, False, "InvalidSpec", "the spec is invalid; see InvalidSpec",
                               now, generation)
    status["conditions"] = [condition.wire() for condition in ordered(conditions)]
    status["observedGeneration"] = generation
    status["phase"] = Phase.FAILED.value
    return status


# ------------------------------------------------------------------------------- events

#: Conditions whose turning True (or changing while True) is announced with a Warning Event.
_WARN_WHEN_TRUE = (GRAPH_MODE_FALLBACK, LEAK_SUSPECTED, LORA_WARNING, INVALID_SPEC)
#: Progressing False for these reasons is no problem; any other reason (a refused or conflicting
#: child, a workload that cannot make pods, LeaderWorkerSet missing) is a Warning Event per message.
_PROGRESSING_OK_REASONS = frozenset({"RolloutComplete", "ReplicasFailed"})


def transition_events(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Events ``(type, reason, message)`` for what changed between two statuses.

    Only transitions produce events, so a resync that changes nothing posts none: a warning
    condition turning True (or its message changing while True, e.g. another pod fell back),
    WaitingForNPU turning True, Progressing turning to ChildConflict or LeaderWorkerSetNotInstalled,
    Routing turning to a problem reason (Warning) or to PoolAccepted (Normal), Ready turning True
    (Normal), the autoscaling ones (:func:`autoscaling_events`) and the LoRA ones
    (:func:`ascend_operator.lorastatus.lora_events`).
    """

    events = _condition_events(previous, new)
    events += autoscaling_events(previous, new)
    events += lora_events(previous, new)
    return events


def _condition_events(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    events: list[tuple[str, str, str]] = []
    npu_before = (get_condition(previous, WAITING_FOR_NPU) or {}).get("status")
    npu_after = get_condition(new, WAITING_FOR_NPU) or {}
    if npu_after.get("status") == "True" and npu_before != "True":
        events.append(("Warning", WAITING_FOR_NPU, npu_after["message"]))
    events += routing_events(previous, new)
    for type_ in (*_WARN_WHEN_TRUE, PROGRESSING, READY):
        before = get_condition(previous, type_) or {}
        after = get_condition(new, type_)
        if after is None:
            continue
        changed = (before.get("status"), before.get("reason"), before.get("message")) != (
            after["status"], after["reason"], after["message"])
        if not changed:
            continue
        if type_ in _WARN_WHEN_TRUE and after["status"] == "True" or (
                type_ == PROGRESSING and after["status"] == "False"
                and after["reason"] not in _PROGRESSING_OK_REASONS):
            events.append(("Warning", after["reason"], after["message"]))
        elif type_ == READY and after["status"] == "True" and before.get("status") != "True":
            events.append(("Normal", "Ready", after["message"]))
    return events


# ------------------------------------------------------------------------------- diffing


def _diff(old: Any, new: Any) -> Any:
    """A JSON merge patch turning ``old`` into ``new`` (dicts recurse; ``None`` deletes)."""

    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            nested = _diff(before, value)
            if nested:
                patch[key] = nested
        elif before != value or key not in old:
            patch[key] = copy.deepcopy(value)
    return patch


def status_patch(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch from ``previous`` to ``new`` status, or ``None`` when they are equal.

    kopf's own ``status.kopf`` bookkeeping is neither compared nor touched.
    """

    old = {key: value for key, value in (previous or {}).items() if key != KOPF_STATUS_KEY}
    wanted = {key: value for key, value in new.items() if key != KOPF_STATUS_KEY}
    patch = _diff(old, wanted)
    return patch or None
