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
``Stopped`` (0 replicas wanted) > ``Pending`` (no pods yet) > ``Scaling`` (more ready replicas
than wanted: surplus pods are still being removed) > ``Ready`` (ready == wanted, no degraded
runtime) > ``Degraded`` (some ready, or a runtime reports Degraded) > ``Failed`` (none ready and
some pod failed: crash loop, image error, failed runtime) > ``WaitingForNPU`` (a pod is
unschedulable for lack of the NPU resource) > the least advanced start-up phase of the pods
(``Pending``, ``Loading``, ``CapturingGraphs``, ``WarmingUp``).

What the API server reports overrides the pods: a child it refused (``Progressing`` reason
``ChildRefused``) or a workload that cannot make pods (the Deployment's ``ReplicaFailure``
condition: no PriorityClass, quota exceeded, admission refused) makes the phase ``Failed`` when
no replica is ready and ``Degraded`` otherwise; a refused spec is ``Failed``. The phase is
``Ready`` exactly when the ``Ready`` condition is True.

Multi-node replicas (``nodesPerReplica`` > 1, one LeaderWorkerSet group each): the pods are
grouped by LWS's ``group-index`` label; a group is one replica, ready when all its pods exist and
are ready (LWS's own definition), and its phase is that of its least advanced pod (a failed or
NPU-starved pod first). ``groups``, ``readyGroups`` and ``groupsBehind`` (which worker of which
group is not ready, or not there) say where a group stands.

Autoscaling (``spec.autoscaling.enabled``): ``status.autoscaling`` carries the autoscaler, its
bounds, the ``spec.replicas`` last seen and what the HPA (ours, or the one KEDA made) reports
(desired and current replicas, last scale time); the ``Autoscaling`` condition says whether the
autoscaler owns ``spec.replicas`` or why it cannot. :func:`transition_events` announces the
autoscaler taking over, its scales, and a manual change of ``spec.replicas`` that the autoscaler
will undo. ``Autoscaling`` and ``WaitingForNPU`` appear once they first apply (a resource that
never autoscaled or never waited does not carry them) and stay, False, afterwards.

LoRA (``spec.lora`` enabled): ``status.lora`` says per adapter on how many replicas it is loaded
or failed, and for a hub adapter where its download stands (:mod:`ascend_operator.lorastatus`).
The ``LoraWarning`` condition is True with the LoRA guard's warnings while it has any (a Warning
Event per new message), appears once it first applies and stays, False, afterwards.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ascend_runtime.cachelayout import FetchPhase
from ascend_runtime.config import GraphMode, RuntimePhase, RuntimeState

from ascend_operator.api import AscendLLMDeploymentSpec, Phase, display_chip, display_model
from ascend_operator.builders.common import LWS_GROUP_INDEX_LABEL, LWS_WORKER_INDEX_LABEL
from ascend_operator.builders.routing import missing_engine_metrics, pool_parents
from ascend_operator.cachestatus import (
    MODEL_CACHED,
    AdapterDownload,
    CacheObservation,
    cache_condition,
    cache_status,
    describe,
)
from ascend_operator.lorastatus import lora_events, lora_status

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
WAITING_FOR_NPU = "WaitingForNPU"
AUTOSCALING = "Autoscaling"
#: spec.routing: the pool, the Endpoint Picker and the route, and what the gateways say.
ROUTING = "Routing"
GRAPH_MODE_FALLBACK = "GraphModeFallback"
LEAK_SUSPECTED = "LeakSuspected"
INVALID_SPEC = "InvalidSpec"
#: spec.lora: a combination the installed vllm-ascend may not serve (the LoRA guard's warnings).
LORA_WARNING = "LoraWarning"
LORA_LIMITATION = "KnownEngineLimitation"
#: The order conditions appear in (``kubectl describe`` shows them as listed).
CONDITION_ORDER = (READY, PROGRESSING, DEGRADED, WAITING_FOR_NPU, MODEL_CACHED, AUTOSCALING, ROUTING,
                   GRAPH_MODE_FALLBACK, LEAK_SUSPECTED, LORA_WARNING, INVALID_SPEC)

#: Progressing reasons that stop the reconcile from making the workload (Warning Event each).
CHILD_CONFLICT = "ChildConflict"
CHILD_REFUSED = "ChildRefused"
LWS_NOT_INSTALLED = "LeaderWorkerSetNotInstalled"
#: Progressing reason when the workload reports it cannot make pods, if its condition has none.
WORKLOAD_FAILURE = "WorkloadFailure"
AUTOSCALING_DISABLED = "AutoscalingDisabled"
#: How many pods a message names before it says "and N more".
NAMED_PODS = 5

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
    #: Pods per replica: above 1 the pods are LeaderWorkerSet groups (``pods`` holds them all).
    nodes_per_replica: int = 1
    #: None while ``spec.autoscaling`` is off.
    autoscaling: AutoscalingObservation | None = None
    #: Why the LeaderWorkerSet cannot be made (the cluster does not serve its API), if so.
    lws_missing: str | None = None
    #: The API server's refusal of a child (kind, name and the server's message), if any.
    refused: str | None = None
    #: The live workload (Deployment or LeaderWorkerSet), for its conditions.
    workload: Mapping[str, Any] | None = None
    #: spec.model.cache: the claim and the download (ascend_operator.cachestatus).
    cache: CacheObservation | None = None
    #: The hub LoRA adapters' downloads (their fetch Jobs), for status.lora.
    adapter_downloads: Sequence[AdapterDownload] = ()
    #: The LoRA guard's warnings (ascend_operator.lora.lora_warnings), for the LoraWarning condition.
    lora_warnings: Sequence[str] = ()
    #: None while spec.routing is off.
    routing: RoutingObservation | None = None


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
    #: The NPUs the pod asks for (its containers' requests, else limits, of the resource).
    npus: int = 0
    #: LeaderWorkerSet group and worker index (labels), None on other pods.
    group: int | None = None
    worker: int | None = None


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


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    value = labels.get(key)
    return int(value) if value is not None and value.isdigit() else None


def _npus(pod: Mapping[str, Any], resource_name: str | None) -> int:
    if not resource_name:
        return 0
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get(resource_name, (resources.get("limits") or {}).get(resource_name))
        if value is not None and str(value).isdigit():  # extended resources are whole numbers
            total += int(value)
    return total


def _pods(observation: Observation) -> list[_Replica]:
    """Every live pod (terminating ones dropped), classified, sorted by name."""

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
        labels = meta.get("labels") or {}
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
            npus=_npus(pod, observation.resource_name),
            group=_int_label(labels, LWS_GROUP_INDEX_LABEL),
            worker=_int_label(labels, LWS_WORKER_INDEX_LABEL),
        ))
    return sorted(replicas, key=lambda replica: replica.name)


def _startup_rank(phase: Phase) -> int:
    return _STARTUP_ORDER.index(phase) if phase in _STARTUP_ORDER else 0


def _group_phase(members: list[_Replica], missing: list[int], size: int) -> tuple[Phase, str]:
    """A group's phase: ready when every pod is; else its most stuck pod's, named."""

    if not missing and all(m.ready for m in members):
        degraded = [m for m in members if m.phase == Phase.DEGRADED]
        if degraded:
            return Phase.DEGRADED, "; ".join(f"{m.name} (worker {m.worker}): {m.why}" for m in degraded)
        return Phase.READY, f"all {size} nodes ready"
    for phase in (Phase.FAILED, Phase.WAITING_FOR_NPU):
        stuck = [m for m in members if m.phase == phase]
        if stuck:
            return phase, "; ".join(f"{m.name} (worker {m.worker}): {m.why}" for m in stuck)
    if missing:
        return Phase.PENDING, f"worker(s) {', '.join(map(str, missing))} of {size} not created yet"
    slowest = min((m for m in members if not m.ready), key=lambda m: _startup_rank(m.phase))
    return slowest.phase, f"{slowest.name} (worker {slowest.worker}): {slowest.why}"


def _groups(pods: list[_Replica], size: int) -> tuple[list[_Replica], list[dict[str, Any]]]:
    """One replica per LeaderWorkerSet group, and the groups that are not ready with their
    lagging (or missing) workers. Pods without LWS labels (a Deployment's on its way out) are
    not part of any group."""

    by_group: dict[int, list[_Replica]] = {}
    for member in pods:
        if member.group is not None and member.worker is not None:
            by_group.setdefault(member.group, []).append(member)
    replicas: list[_Replica] = []
    behind: list[dict[str, Any]] = []
    for index in sorted(by_group):
        members = sorted(by_group[index], key=lambda m: m.worker or 0)
        present = {m.worker for m in members}
        missing = [worker for worker in range(size) if worker not in present]
        lagging = [m for m in members if not m.ready]
        phase, why = _group_phase(members, missing, size)
        leader = next((m for m in members if m.worker == 0), None)
        head = leader or members[0]
        ready = not missing and not lagging
        replicas.append(_Replica(
            name=head.name, phase=phase, why=why, ready=ready, updated=all(m.updated for m in members),
            state=leader.state if leader is not None else None, image=head.image, created=head.created,
            npus=sum(m.npus for m in members), group=index, worker=0,
        ))
        if not ready:
            nodes = [{"pod": m.name, "workerIndex": m.worker, "phase": m.phase.value, "reason": m.why}
                     for m in lagging]
            nodes += [{"workerIndex": worker, "phase": "Missing", "reason": "the pod does not exist yet"}
                      for worker in missing]
            behind.append({"group": index, "readyNodes": len(members) - len(lagging), "nodes": size,
                           "behind": sorted(nodes, key=lambda node: node["workerIndex"])})
    return replicas, behind


def _replicas(observation: Observation) -> list[_Replica]:
    """The replicas: one per pod, or one per LeaderWorkerSet group."""

    pods = _pods(observation)
    if observation.nodes_per_replica > 1:
        return _groups(pods, observation.nodes_per_replica)[0]
    return pods


# ------------------------------------------------------------------------------- aggregation


def workload_failure(workload: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """``(reason, message)`` when the workload says it cannot make its pods, else ``None``.

    A Deployment copies its ReplicaSet's pod-creation failure into ``ReplicaFailure`` (reason
    ``FailedCreate``, the API server's message); ``Progressing`` False means the rollout passed
    its deadline. A LeaderWorkerSet is read the same way.
    """

    if not workload:
        return None
    conditions = (workload.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == "ReplicaFailure" and condition.get("status") == "True":
            return condition.get("reason") or WORKLOAD_FAILURE, condition.get("message") or "pods cannot be created"
    for condition in conditions:
        if condition.get("type") == "Progressing" and condition.get("status") == "False":
            return condition.get("reason") or WORKLOAD_FAILURE, condition.get("message") or "the rollout is stuck"
    return None


def _aggregate_phase(wanted: int, replicas: list[_Replica], ready: int) -> tuple[Phase, str]:
    if wanted == 0:
        return Phase.STOPPED, "0 replicas requested"
    if not replicas:
        return Phase.PENDING, "no pods yet"
    summary = f"{ready}/{wanted} replicas ready"
    degraded = [r for r in replicas if r.ready and r.phase == Phase.DEGRADED]
    if ready > wanted:
        return Phase.SCALING, f"{summary}: {ready - wanted} surplus replica(s) being removed"
    if ready == wanted and not degraded:
        return Phase.READY, summary
    not_serving = [r for r in replicas if not r.ready or r.phase == Phase.DEGRADED]
    detail = "; ".join(f"{r.name}: {r.phase.value} ({r.why})" for r in not_serving)
    if ready > 0:
        return Phase.DEGRADED, f"{summary}; {detail}"
    for phase in (Phase.FAILED, Phase.WAITING_FOR_NPU):
        if any(r.phase == phase for r in replicas):
            return phase, f"{summary}; {detail}"
    # No pod is Ready yet. A runtime that reports ready before the kubelet's readiness probe has
    # passed (a probe period later) serves no traffic through the Service: still warming up.
    starting = [Phase.WARMING_UP if r.phase == Phase.READY else r.phase for r in replicas]
    slowest = min(starting, key=lambda p: _STARTUP_ORDER.index(p) if p in _STARTUP_ORDER else 0)
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

    graph.update(_remembered_mode(replicas, previous.get("graph") or {}, remembered_for))
    return graph


def _engine_versions(state: RuntimeState) -> str | None:
    versions = state.versions or {}
    parts = [f"{name} {versions[key]}" for key, name in (("vllm", "vllm"), ("vllmAscend", "vllm-ascend"))
             if versions.get(key)]
    return ", ".join(parts) or None


def _remembered_mode(replicas: list[_Replica], previous_graph: Mapping[str, Any], remembered_for: str
                     ) -> dict[str, Any]:
    """The mode new pods start in, and why; {} to start at the top of the ladder.

    Only a deterministic failure is remembered: a pod of the current spec that serves after
    falling back from a classified capture or replay failure (not an OOM, a crash or a hung
    capture, which may not recur). When several did, the mode furthest down the ladder works on
    all of them. A remembered mode is kept while the key matches (image, model, parallelism, the
    retry annotation) and no current pod runs other engine versions than it was seen with.
    """

    evidence = [r for r in replicas
                if r.updated and r.state is not None and r.state.mode is not None
                and r.state.phase == RuntimePhase.READY and r.state.fallbacks > 0
                and r.state.fallback_deterministic]
    if evidence:
        chosen = max(evidence, key=lambda r: _LADDER.index(r.state.mode))  # type: ignore[union-attr,arg-type]
        state = chosen.state
        assert state is not None and state.mode is not None
        remembered = {"rememberedMode": state.mode.value, "rememberedFor": remembered_for,
                      "rememberedReason": f"pod {chosen.name}: {state.fallback_reason or 'graph failure'}"}
        versions = _engine_versions(state)
        if versions:
            remembered["rememberedVersions"] = versions
        return remembered
    if not previous_graph.get("rememberedMode") or previous_graph.get("rememberedFor") != remembered_for:
        return {}
    seen_with = previous_graph.get("rememberedVersions")
    running = {_engine_versions(r.state) for r in replicas if r.updated and r.state is not None}
    if seen_with and any(v is not None and v != seen_with for v in running):
        return {}  # a new engine version: let new pods try the higher rungs again
    return {key: previous_graph[key] for key in ("rememberedMode", "rememberedReason", "rememberedVersions")
            if previous_graph.get(key)} | {"rememberedFor": remembered_for}


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
    warnings: list[str] = []
    for replica in replicas:
        for warning in replica.state.warmup.warnings if replica.state is not None else ():
            if warning not in warnings:
                warnings.append(warning)
    if warnings:
        warmup["warnings"] = warnings[:16]
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


def _named(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMED_PODS])
    return shown + (f" and {len(names) - NAMED_PODS} more" if len(names) > NAMED_PODS else "")


def _npu_wait_condition(pods: list[_Replica], resource_name: str | None) -> tuple[bool, str, str]:
    """WaitingForNPU: which pods the scheduler cannot place for lack of the NPU resource, how
    many NPUs each asks for, and the scheduler's own words (from the first of them)."""

    waiting = [p for p in pods if p.phase == Phase.WAITING_FOR_NPU]
    resource = resource_name or "the NPU resource"
    if not waiting:
        return False, "NPUsAllocated", f"no pod waits for {resource}"
    by_ask: dict[int, list[str]] = {}
    for replica in waiting:
        by_ask.setdefault(replica.npus, []).append(replica.name)
    asks = "; ".join(
        f"{_named(names)} {'asks' if len(names) == 1 else 'ask'} for {npus} {resource}{'' if len(names) == 1 else ' each'}"
        for npus, names in sorted(by_ask.items())
    )
    total = sum(p.npus for p in waiting)
    return True, "InsufficientNPU", (
        f"{len(waiting)} pod(s) cannot be scheduled: not enough free {resource} ({total} asked for in all); "
        f"{asks}. Scheduler: {waiting[0].why}"
    )


def _hpa_status(hpa: Mapping[str, Any] | None) -> dict[str, Any]:
    found = (hpa or {}).get("status") or {}
    return {key: found[key] for key in ("desiredReplicas", "currentReplicas", "lastScaleTime") if key in found}


def _autoscaling(spec: AscendLLMDeploymentSpec,
                 auto: AutoscalingObservation) -> tuple[dict[str, Any], tuple[bool, str, str]]:
    """``status.autoscaling`` and the Autoscaling condition of a resource that autoscales."""

    status: dict[str, Any] = {}
    if auto.provider and auto.name:
        status.update(provider=auto.provider, name=auto.name)
    status.update(minReplicas=auto.min_replicas, maxReplicas=auto.max_replicas, specReplicas=spec.replicas)
    status.update(_hpa_status(auto.hpa))
    if auto.problem:
        return status, (False, auto.reason, auto.message)
    return status, (True, auto.reason, (
        f"{auto.provider} {auto.name} owns spec.replicas (between {auto.min_replicas} and {auto.max_replicas}) "
        "and sets it back after a manual kubectl scale; change spec.autoscaling.minReplicas/maxReplicas, "
        "or set spec.autoscaling.enabled false to set the replicas by hand"
    ))


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


def _routing(observation: RoutingObservation) -> tuple[dict[str, Any], tuple[bool, str, str]]:
    """``status.routing`` and the Routing condition (see the README's Prefix-aware routing)."""

    status: dict[str, Any] = {"pool": observation.pool_name, "endpointPicker": observation.epp_name}
    if observation.route_name:
        status["route"] = observation.route_name
    if observation.gateway:
        status["gateway"] = observation.gateway
    if observation.missing:
        status.update(accepted="Unknown", resolvedRefs="Unknown", parents=[], missingMetrics=[])
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
    status.update(accepted=accepted, resolvedRefs=resolved, parents=parents, missingMetrics=sorted(missing))
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


def compute_status(
    spec: AscendLLMDeploymentSpec,
    observation: Observation,
    previous: Mapping[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    """The full status of a resource with a valid spec (camelCase, as stored)."""

    previous = previous or {}
    pods = _pods(observation)
    behind: list[dict[str, Any]] = []
    if observation.nodes_per_replica > 1:
        replicas, behind = _groups(pods, observation.nodes_per_replica)
    else:
        replicas = pods
    wanted = spec.replicas
    ready = sum(1 for r in replicas if r.ready)
    updated = sum(1 for r in replicas if r.updated)
    phase, why = _aggregate_phase(wanted, replicas, ready)
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

    conditions = [dict(c) for c in previous.get("conditions") or []]

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
    npu_wait = _npu_wait_condition(pods, observation.resource_name)
    if npu_wait[0] or get_condition(previous, WAITING_FOR_NPU):
        put(WAITING_FOR_NPU, *npu_wait)
    autoscaling: dict[str, Any] | None = None
    if observation.autoscaling is not None:
        autoscaling, autoscaling_condition = _autoscaling(spec, observation.autoscaling)
        put(AUTOSCALING, *autoscaling_condition)
    elif get_condition(previous, AUTOSCALING):
        put(AUTOSCALING, False, AUTOSCALING_DISABLED,
            "autoscaling is off; spec.replicas (kubectl scale) sets the replicas")
    if cache is not None:
        put(MODEL_CACHED, *cache_condition(cache))
    routing: dict[str, Any] | None = None
    if observation.routing is not None:
        routing, routing_condition = _routing(observation.routing)
        put(ROUTING, *routing_condition)
    elif get_condition(previous, ROUTING):
        put(ROUTING, False, ROUTING_DISABLED, "spec.routing is off; no InferencePool, Endpoint Picker or HTTPRoute")
    put(GRAPH_MODE_FALLBACK, *_fallback_condition(replicas))
    put(LEAK_SUSPECTED, *_leak_condition(replicas))
    if observation.lora_warnings:
        put(LORA_WARNING, True, LORA_LIMITATION, "; ".join(observation.lora_warnings))
    elif get_condition(previous, LORA_WARNING):
        put(LORA_WARNING, False, "NoKnownLimitation",
            "the LoRA guard knows of no problem with this spec and image")
    put(INVALID_SPEC, False, "Valid", "the spec is valid")

    status: dict[str, Any] = {
        "observedGeneration": generation,
        "phase": phase.value,
        "replicas": len(replicas),
        "readyReplicas": ready,
        "updatedReplicas": updated,
        "ready": f"{ready}/{wanted}",  # the Ready printer column
        "selector": observation.selector,
        "model": display_model(spec, observation.name),
        "chip": display_chip(spec),
        "graph": _graph(replicas, previous, observation.remembered_for),
        "warmup": _warmup(replicas),
        "conditions": _ordered(conditions),
    }
    if observation.nodes_per_replica > 1:
        status["groups"] = len(replicas)
        status["readyGroups"] = ready
        status["groupsBehind"] = behind
    if autoscaling is not None:
        status["autoscaling"] = autoscaling
    if cache is not None:
        status["modelCache"] = cache_status(cache)
    lora = lora_status(spec, [(replica.name, replica.state) for replica in replicas],
                       observation.adapter_downloads)
    if lora is not None:
        status["lora"] = lora
    if routing is not None:
        status["routing"] = routing
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
    routing_before = get_condition(previous, ROUTING) or {}
    routing_after = get_condition(new, ROUTING) or {}
    if routing_after and (routing_before.get("status"), routing_before.get("reason"), routing_before.get("message")) != (
            routing_after["status"], routing_after["reason"], routing_after["message"]):
        if routing_after["reason"] in _ROUTING_WARNINGS:
            events.append(("Warning", routing_after["reason"], routing_after["message"]))
        elif routing_after["status"] == "True" and routing_before.get("status") != "True":
            events.append(("Normal", POOL_ACCEPTED, routing_after["message"]))
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
