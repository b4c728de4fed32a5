"""The resource's status, computed from what was observed (pure: no I/O, no clock, no globals).

:func:`compute_status` turns the pods of one ``AscendLLMDeployment`` and the runtime states read
from them (``GET /state`` through the pod proxy; ``None`` where unreadable) into the fields of
:class:`ascend_operator.api.AscendLLMDeploymentStatus`. :func:`invalid_spec_status` is the status
of a resource whose spec the operator refuses. :func:`status_patch` is the merge patch from one
status to another, or ``None`` when nothing changed, so a resync that changes nothing writes
nothing.

Conditions follow the Kubernetes convention (LeaderWorkerSet's ``setCondition``): the
``lastTransitionTime`` moves only when a condition's status flips; reason and message are updated
in place. That, and nothing in the status depending on the current time otherwise, is what keeps
a status stable across resyncs.

Phase precedence, from the pods (terminating pods are ignored):
``Stopped`` (0 replicas wanted) > ``Pending`` (no pods yet) > ``Ready`` (ready == wanted, no
degraded runtime) > ``Degraded`` (some ready, or a runtime reports Degraded) > ``Failed`` (none
ready and some pod failed: crash loop, image error, failed runtime) > ``WaitingForNPU`` (a pod is
unschedulable for lack of the NPU resource) > the least advanced start-up phase of the pods
(``Pending``, ``Loading``, ``CapturingGraphs``, ``WarmingUp``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ascend_runtime.config import GraphMode, RuntimePhase, RuntimeState

from ascend_operator.api import AscendLLMDeploymentSpec, Phase, display_chip, display_model

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
GRAPH_MODE_FALLBACK = "GraphModeFallback"
LEAK_SUSPECTED = "LeakSuspected"
INVALID_SPEC = "InvalidSpec"
#: The order conditions appear in (``kubectl describe`` shows them as listed).
CONDITION_ORDER = (READY, PROGRESSING, DEGRADED, GRAPH_MODE_FALLBACK, LEAK_SUSPECTED, INVALID_SPEC)

#: The key kopf keeps its own bookkeeping under; never part of the operator's status diff.
KOPF_STATUS_KEY = "kopf"

#: Container waiting reasons that will not resolve by waiting: the pod counts as failed.
FAILED_WAITING_REASONS = frozenset({
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
})

_RUNTIME_TO_PHASE = {
    RuntimePhase.PREFLIGHT: Phase.LOADING,
    RuntimePhase.WAITING_FOR_NPU: Phase.WAITING_FOR_NPU,
    RuntimePhase.LOADING: Phase.LOADING,
    RuntimePhase.CAPTURING_GRAPHS: Phase.CAPTURING_GRAPHS,
    RuntimePhase.WARMING_UP: Phase.WARMING_UP,
    RuntimePhase.READY: Phase.READY,
    RuntimePhase.DEGRADED: Phase.DEGRADED,
    # A draining pod is on its way out; until it is gone it serves nothing new.
    RuntimePhase.DRAINING: Phase.DEGRADED,
    RuntimePhase.FAILED: Phase.FAILED,
}

#: Start-up phases from least to most advanced (the aggregate shows the slowest pod).
_STARTUP_ORDER = (Phase.PENDING, Phase.LOADING, Phase.CAPTURING_GRAPHS, Phase.WARMING_UP, Phase.READY)
_LADDER = tuple(GraphMode)


@dataclass(frozen=True)
class Observation:
    """What the reconcile saw of one resource, besides its spec.

    ``pods`` are raw pod dicts selected by the resource's pod selector; ``states`` maps pod names
    to the runtime state read from them (``None``: not readable). ``template_hash`` is the hash
    annotation of the desired pod template (``template_hash_key`` on pods): pods carrying another
    value run an older spec. ``remembered_for`` is the remembered-mode key of the current spec.
    """

    name: str
    generation: int
    selector: str
    endpoint: str | None
    resource_name: str | None
    remembered_for: str
    template_hash: str | None = None
    template_hash_key: str = "llm.ascend.dev/config-hash"
    pods: Sequence[Mapping[str, Any]] = ()
    states: Mapping[str, RuntimeState | None] = field(default_factory=dict)
    #: Children the operator could not write (a same-named object it does not own), as messages.
    conflicts: Sequence[str] = ()


@dataclass(frozen=True)
class _Replica:
    """One pod as the status sees it."""

    name: str
    phase: Phase
    why: str
    ready: bool
    updated: bool
    state: RuntimeState | None
    image: str | None
    created: str


# ------------------------------------------------------------------------------- conditions


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None,
) -> list[dict[str, Any]]:
    """``conditions`` with condition ``type_`` set; its lastTransitionTime changes only when its
    status flips (or it is new). Other conditions are kept as they are."""

    value = status if isinstance(status, str) else ("True" if status else "False")
    result: list[dict[str, Any]] = []
    found = False
    for condition in conditions:
        if condition.get("type") != type_:
            result.append(dict(condition))
            continue
        found = True
        transition = condition.get("lastTransitionTime") if condition.get("status") == value else None
        result.append(_condition(type_, value, reason, message, transition or _timestamp(now), generation))
    if not found:
        result.append(_condition(type_, value, reason, message, _timestamp(now), generation))
    return result


def _condition(type_: str, status: str, reason: str, message: str, when: str,
               generation: int | None) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": when,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def _timestamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def get_condition(status: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The condition ``type_`` of ``status``, if present."""

    for condition in (status or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return dict(condition)
    return None


def _ordered(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rank = {type_: index for index, type_ in enumerate(CONDITION_ORDER)}
    return sorted(conditions, key=lambda c: (rank.get(c["type"], len(rank)), c["type"]))


# ------------------------------------------------------------------------------- pods


def _pod_condition(pod: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return condition
    return None


def _waiting_failure(pod: Mapping[str, Any]) -> str | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for container in statuses:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FAILED_WAITING_REASONS:
            detail = waiting.get("message")
            return f"container {container.get('name')}: {waiting['reason']}" + (f" ({detail})" if detail else "")
    return None


def _pod_image(pod: Mapping[str, Any]) -> str | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    return containers[0].get("image") if containers else None


def classify_pod(pod: Mapping[str, Any], state: RuntimeState | None, resource_name: str | None) -> tuple[Phase, str]:
    """The phase of one pod and why, from the pod's own status and its runtime state."""

    status = pod.get("status") or {}
    failure = _waiting_failure(pod)
    if status.get("phase") == "Failed":
        return Phase.FAILED, status.get("message") or status.get("reason") or "the pod failed"
    if failure:
        return Phase.FAILED, failure
    scheduled = _pod_condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        message = scheduled.get("message") or "the pod cannot be scheduled"
        if (scheduled.get("reason") == "Unschedulable" and resource_name
                and resource_name in message):
            return Phase.WAITING_FOR_NPU, message
        return Phase.PENDING, message
    if state is not None:
        phase = _RUNTIME_TO_PHASE[state.phase]
        return phase, state.message or f"runtime {state.phase.value}"
    ready = _pod_condition(pod, "Ready")
    if ready is not None and ready.get("status") == "True":
        return Phase.READY, "ready (runtime state not readable)"
    if status.get("phase") == "Running":
        return Phase.LOADING, "running; runtime state not readable yet"
    return Phase.PENDING, status.get("reason") or "the pod is starting"


def _replicas(observation: Observation) -> list[_Replica]:
    replicas = []
    for pod in observation.pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue  # terminating: neither serving nor counted
        name = meta.get("name", "")
        state = observation.states.get(name)
        phase, why = classify_pod(pod, state, observation.resource_name)
        ready_condition = _pod_condition(pod, "Ready")
        pod_hash = (meta.get("annotations") or {}).get(observation.template_hash_key)
        replicas.append(_Replica(
            name=name,
            phase=phase,
            why=why,
            # The kubelet's Ready condition is what the Service routes by.
            ready=ready_condition is not None and ready_condition.get("status") == "True",
            updated=observation.template_hash is None or pod_hash == observation.template_hash,
            state=state,
            image=(state.image if state is not None and state.image else _pod_image(pod)),
            created=meta.get("creationTimestamp") or "",
        ))
    return sorted(replicas, key=lambda replica: replica.name)


# ------------------------------------------------------------------------------- aggregation


def _aggregate_phase(wanted: int, replicas: list[_Replica], ready: int) -> tuple[Phase, str]:
    if wanted == 0:
        return Phase.STOPPED, "0 replicas requested"
    if not replicas:
        return Phase.PENDING, "no pods yet"
    summary = f"{ready}/{wanted} replicas ready"
    degraded = [r for r in replicas if r.ready and r.phase == Phase.DEGRADED]
    if ready >= wanted and not degraded:
        return Phase.READY, summary
    not_serving = [r for r in replicas if not r.ready or r.phase == Phase.DEGRADED]
    detail = "; ".join(f"{r.name}: {r.phase.value} ({r.why})" for r in not_serving)
    if ready > 0:
        return Phase.DEGRADED, f"{summary}; {detail}"
    for phase in (Phase.FAILED, Phase.WAITING_FOR_NPU):
        if any(r.phase == phase for r in replicas):
            return phase, f"{summary}; {detail}"
    slowest = min(
        (r.phase for r in replicas),
        key=lambda p: _STARTUP_ORDER.index(p) if p in _STARTUP_ORDER else 0,
    )
    return slowest, f"{summary}; {detail}"


def _graph(replicas: list[_Replica], previous: Mapping[str, Any], remembered_for: str) -> dict[str, Any]:
    reports = []
    for replica in replicas:
        state = replica.state
        report: dict[str, Any] = {"pod": replica.name, "ready": bool(state.ready) if state else replica.ready,
                                  "fallbacks": state.fallbacks if state else 0}
        if state is not None:
            report["phase"] = state.phase.value
            if state.mode is not None:
                report["mode"] = state.mode.value
            if state.fallback_reason:
                report["fallbackReason"] = state.fallback_reason
        if replica.image:
            report["image"] = replica.image
        reports.append(report)
    graph: dict[str, Any] = {"replicas": reports, "fallbacks": sum(r["fallbacks"] for r in reports)}
    modes = {r["mode"] for r in reports if "mode" in r}
    if len(modes) == 1:
        graph["mode"] = modes.pop()
    elif modes:
        graph["mode"] = "Mixed"

    # Remember a mode only from pods that run the current spec and serve with it; when they
    # disagree, the mode furthest down the ladder is the one known to work on all of them.
    working = [r.state.mode for r in replicas
               if r.updated and r.state is not None and r.state.mode is not None
               and r.state.phase == RuntimePhase.READY]
    previous_graph = previous.get("graph") or {}
    if working:
        graph["rememberedMode"] = max(working, key=_LADDER.index).value
        graph["rememberedFor"] = remembered_for
    elif previous_graph.get("rememberedMode") and previous_graph.get("rememberedFor") == remembered_for:
        graph["rememberedMode"] = previous_graph["rememberedMode"]
        graph["rememberedFor"] = remembered_for
    return graph


def _warmup(replicas: list[_Replica]) -> dict[str, Any]:
    counts = {"succeeded": 0, "failed": 0, "pending": 0}
    finished: list[tuple[str, float]] = []
    for replica in replicas:
        report = replica.state.warmup if replica.state is not None else None
        if report is None or report.outcome in ("pending", "running"):
            counts["pending"] += 1
            continue
        counts["failed" if report.outcome == "failed" else "succeeded"] += 1
        if report.seconds is not None and report.outcome != "skipped":
            finished.append((replica.created, report.seconds))
    warmup: dict[str, Any] = dict(counts)
    if finished:
        warmup["lastSeconds"] = max(finished)[1]  # the newest pod's warmup
    return warmup


def _fallback_condition(replicas: list[_Replica]) -> tuple[bool | str, str, str]:
    fell_back = [r for r in replicas if r.state is not None and (r.state.rung > 0 or r.state.fallbacks > 0)]
    if fell_back:
        parts = []
        for replica in fell_back:
            state = replica.state
            assert state is not None
            wanted = state.requested_mode.value if state.requested_mode else "the first choice"
            runs = state.mode.value if state.mode else "no mode yet"
            parts.append(f"{replica.name} runs {runs} instead of {wanted}"
                         + (f": {state.fallback_reason}" if state.fallback_reason else ""))
        return True, "FellBack", "; ".join(parts)
    if not any(r.state is not None for r in replicas):
        return "Unknown", "NoReports", "no runtime has reported its graph mode yet"
    return False, "AsRequested", "every reporting replica runs its requested graph mode"


def _leak_condition(replicas: list[_Replica]) -> tuple[bool | str, str, str]:
    leaking = [r for r in replicas if r.state is not None and r.state.leak_suspected]
    hung = [r for r in replicas if r.state is not None and r.state.hung]
    if leaking or hung:
        reason = "MemoryLeakSuspected" if leaking else "RequestsHung"
        parts = []
        for replica in leaking:
            assert replica.state is not None
            reasons = ", ".join(replica.state.live_reasons) or "memory trend above the limits"
            parts.append(f"{replica.name}: memory leak suspected ({reasons})")
        for replica in hung:
            parts.append(f"{replica.name}: requests hung")
        return True, reason, "; ".join(parts)
    if not any(r.state is not None for r in replicas):
        return "Unknown", "NoReports", "no runtime has reported its health yet"
    return False, "Healthy", "no replica reports a leak or a hang"


def compute_status(
    spec: AscendLLMDeploymentSpec,
    observation: Observation,
    previous: Mapping[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    """The full status of a resource with a valid spec (camelCase, as stored)."""

    previous = previous or {}
    replicas = _replicas(observation)
    wanted = spec.replicas
    ready = sum(1 for r in replicas if r.ready)
    updated = sum(1 for r in replicas if r.updated)
    phase, why = _aggregate_phase(wanted, replicas, ready)
    generation = observation.generation

    conditions = [dict(c) for c in previous.get("conditions") or []]

    def put(type_: str, status: bool | str, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = set_condition(conditions, type_, status, reason, message, now, generation)

    all_ready = wanted > 0 and ready >= wanted and phase == Phase.READY
    put(READY, all_ready if wanted > 0 else False, "AllReplicasReady" if all_ready else phase.value, why)
    rollout_done = updated >= wanted and ready >= wanted and len(replicas) <= wanted
    if observation.conflicts:
        put(PROGRESSING, False, "ChildConflict", "; ".join(observation.conflicts))
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
    put(GRAPH_MODE_FALLBACK, *_fallback_condition(replicas))
    put(LEAK_SUSPECTED, *_leak_condition(replicas))
    put(INVALID_SPEC, False, "Valid", "the spec is valid")

    status: dict[str, Any] = {
        "observedGeneration": generation,
        "phase": phase.value,
        "replicas": len(replicas),
        "readyReplicas": ready,
        "updatedReplicas": updated,
        "selector": observation.selector,
        "model": display_model(spec, observation.name),
        "chip": display_chip(spec),
        "graph": _graph(replicas, previous, observation.remembered_for),
        "warmup": _warmup(replicas),
        "conditions": _ordered(conditions),
    }
    if observation.endpoint:
        status["endpoint"] = observation.endpoint
    return status


def invalid_spec_status(
    previous: Mapping[str, Any] | None, message: str, generation: int, now: datetime,
) -> dict[str, Any]:
    """The status of a refused spec: InvalidSpec True with the message naming the field(s);
    Ready False; everything observed before is kept (the children are left as they were)."""

    status = {key: copy.deepcopy(value) for key, value in (previous or {}).items() if key != KOPF_STATUS_KEY}
    conditions = [dict(c) for c in status.get("conditions") or []]
    conditions = set_condition(conditions, INVALID_SPEC, True, "InvalidSpec", message, now, generation)
    conditions = set_condition(conditions, READY, False, "InvalidSpec", "the spec is invalid; see InvalidSpec",
                               now, generation)
    status["conditions"] = _ordered(conditions)
    status["observedGeneration"] = generation
    return status


# ------------------------------------------------------------------------------- events

#: Conditions whose turning True (or changing while True) is announced with a Warning Event.
_WARN_WHEN_TRUE = (GRAPH_MODE_FALLBACK, LEAK_SUSPECTED, INVALID_SPEC)


def transition_events(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Events ``(type, reason, message)`` for what changed between two statuses.

    Only transitions produce events, so a resync that changes nothing posts none: a warning
    condition turning True (or its message changing while True, e.g. another pod fell back),
    Progressing turning to ChildConflict, and Ready turning True (Normal).
    """

    events: list[tuple[str, str, str]] = []
    for type_ in (*_WARN_WHEN_TRUE, PROGRESSING, READY):
        before = get_condition(previous, type_) or {}
        after = get_condition(new, type_)
        if after is None:
            continue
        changed = (before.get("status"), before.get("reason"), before.get("message")) != (
            after["status"], after["reason"], after["message"])
        if not changed:
            continue
        if type_ in _WARN_WHEN_TRUE and after["status"] == "True":
            events.append(("Warning", after["reason"], after["message"]))
        elif type_ == PROGRESSING and after["reason"] == "ChildConflict":
            events.append(("Warning", "ChildConflict", after["message"]))
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
