"""The replicas as the status sees them, their phase, and the ``WaitingForNPU`` condition (pure).

Phase precedence, from the pods (terminating pods are ignored):
``Stopped`` (0 replicas wanted) > ``Pending`` (no pods yet) > ``Scaling`` (more ready replicas
than wanted: surplus pods are still being removed) > ``Ready`` (ready == wanted, no degraded
runtime) > ``Degraded`` (some ready, or a runtime reports Degraded) > ``Failed`` (none ready and
some pod failed: crash loop, image error, failed runtime) > ``WaitingForNPU`` (a pod is
unschedulable for lack of the NPU resource) > the least advanced start-up phase of the pods
(``Pending``, ``Loading``, ``CapturingGraphs``, ``WarmingUp``).

Multi-node replicas (``nodesPerReplica`` > 1, one LeaderWorkerSet group each): the pods are
grouped by LWS's ``group-index`` label; a group is one replica, ready when all its pods exist and
are ready (LWS's own definition), and its phase is that of its least advanced pod (a failed or
NPU-starved pod first). ``groups``, ``readyGroups`` and ``groupsBehind`` (which worker of which
group is not ready, or not there) say where a group stands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ascend_runtime.config import RuntimePhase, RuntimeState

from ascend_operator.api import GroupBehind, NodeBehind, Phase
from ascend_operator.builders.common import LWS_GROUP_INDEX_LABEL, LWS_WORKER_INDEX_LABEL
from ascend_operator.conditions import ConditionValue
from ascend_operator.observation import Observation

#: Progressing reason when the workload reports it cannot make pods, if its condition has none.
WORKLOAD_FAILURE = "WorkloadFailure"
#: How many pods a message names before it says "and N more".
NAMED_PODS = 5

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


@dataclass(frozen=True)
class Replica:
    """One pod, or one LeaderWorkerSet group (a multi-node replica), as the status sees it."""

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
    #: The kubelet's restarts of the pod's containers (``containerStatuses[].restartCount``).
    restarts: int = 0


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


def container_restarts(pod: Mapping[str, Any]) -> int:
    """The kubelet's restarts of the pod's containers (init containers not counted)."""

    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(container.get("restartCount") or 0) for container in statuses)


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


def pod_replicas(observation: Observation) -> list[Replica]:
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
        replicas.append(Replica(
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
            restarts=container_restarts(pod),
        ))
    return sorted(replicas, key=lambda replica: replica.name)


def _startup_rank(phase: Phase) -> int:
    return _STARTUP_ORDER.index(phase) if phase in _STARTUP_ORDER else 0


def _group_phase(members: list[Replica], missing: list[int], size: int) -> tuple[Phase, str]:
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


def group_replicas(pods: list[Replica], size: int) -> tuple[list[Replica], list[GroupBehind]]:
    """One replica per LeaderWorkerSet group, and the groups that are not ready with their
    lagging (or missing) workers. Pods without LWS labels (a Deployment's on its way out) are
    not part of any group."""

    by_group: dict[int, list[Replica]] = {}
    for member in pods:
        if member.group is not None and member.worker is not None:
            by_group.setdefault(member.group, []).append(member)
    replicas: list[Replica] = []
    behind: list[GroupBehind] = []
    for index in sorted(by_group):
        members = sorted(by_group[index], key=lambda m: m.worker or 0)
        present = {m.worker for m in members}
        missing = [worker for worker in range(size) if worker not in present]
        lagging = [m for m in members if not m.ready]
        phase, why = _group_phase(members, missing, size)
        leader = next((m for m in members if m.worker == 0), None)
        head = leader or members[0]
        ready = not missing and not lagging
        replicas.append(Replica(
            name=head.name, phase=phase, why=why, ready=ready, updated=all(m.updated for m in members),
            state=leader.state if leader is not None else None, image=head.image, created=head.created,
            npus=sum(m.npus for m in members), group=index, worker=0,
            restarts=sum(m.restarts for m in members),
        ))
        if not ready:
            nodes = [NodeBehind(pod=m.name, worker_index=m.worker, phase=m.phase.value, reason=m.why)
                     for m in lagging]
            nodes += [NodeBehind(worker_index=worker, phase="Missing", reason="the pod does not exist yet")
                      for worker in missing]
            behind.append(GroupBehind(group=index, ready_nodes=len(members) - len(lagging), nodes=size,
                                      behind=sorted(nodes, key=lambda node: node.worker_index)))
    return replicas, behind


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


def aggregate_phase(wanted: int, replicas: list[Replica], ready: int) -> tuple[Phase, str]:
    """The phase of the resource from its replicas, and why (see the module docstring)."""
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
    slowest = min(starting, key=_startup_rank)
    return slowest, f"{summary}; {detail}"


def _named(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMED_PODS])
    return shown + (f" and {len(names) - NAMED_PODS} more" if len(names) > NAMED_PODS else "")


def npu_wait_condition(pods: list[Replica], resource_name: str | None) -> ConditionValue:
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
