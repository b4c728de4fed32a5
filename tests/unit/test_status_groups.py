"""ascend_operator.status, the multi-node, NPU-wait and autoscaling pieces (complete dicts).

Covered: LeaderWorkerSet groups (ready only when every pod is; groupsBehind names the lagging
and the missing workers; pods without LWS labels belong to no group); WaitingForNPU naming the
resource and the counts, and its Event on the flip only; status.autoscaling and the Autoscaling
condition for a working autoscaler, a missing one, and autoscaling turned off; the autoscaling
Events (taking over, provider switch, problem, off, a manual scale, the autoscaler's own scale);
LeaderWorkerSetNotInstalled on Progressing with its Event.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ascend_operator.api import parse_spec
from ascend_operator.autoscalingstatus import autoscaling_events
from ascend_operator.conditions import get_condition
from ascend_operator.status import (
    AutoscalingObservation,
    Observation,
    compute_status,
    transition_events,
)

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
T0 = "2026-12-01T12:00:00Z"
NPU = "huawei.com/Ascend910"
HASH_KEY = "llm.ascend.dev/config-hash"
LEADERS = ("app.kubernetes.io/component=engine,app.kubernetes.io/instance=ds,app.kubernetes.io/name=ascend-llm,"
           "leaderworkerset.sigs.k8s.io/worker-index=0")
TWO_NODES = {"model": {"hostPath": {"path": "/models/ds"}, "servedName": "ds"}, "replicas": 2, "nodesPerReplica": 2,
             "npu": {"perReplica": 8}, "parallelism": {"tensor": 4, "data": 4}}
ONE_NODE = {"model": {"hostPath": {"path": "/models/ds"}, "servedName": "ds"}, "npu": {"perReplica": 8},
            "parallelism": {"tensor": 8}}


def pod(name: str, *, group: int | None = None, worker: int | None = None, ready: bool = True,
        unschedulable: str | None = None, npus: int = 8) -> dict[str, Any]:
    labels = {}
    if group is not None:
        labels = {"leaderworkerset.sigs.k8s.io/group-index": str(group),
                  "leaderworkerset.sigs.k8s.io/worker-index": str(worker)}
    conditions = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True" if ready else "False"}]
    phase = "Running"
    if unschedulable:
        conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable},
                      {"type": "Ready", "status": "False"}]
        phase = "Pending"
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {HASH_KEY: "h1"},
                     "creationTimestamp": "2026-12-01T11:00:00Z"},
        "spec": {"containers": [{"name": "engine", "image": "img:1",
                                 "resources": {"requests": {NPU: str(npus)}, "limits": {NPU: str(npus)}}}]},
        "status": {"phase": phase, "conditions": conditions, "containerStatuses": []},
    }


def observe(pods: list[dict[str, Any]], **fields: Any) -> Observation:
    values: dict[str, Any] = {"name": "ds", "generation": 1, "selector": LEADERS, "endpoint": None, "resource_name": NPU,
                                  "remembered_for": "k", "template_hash": "h1", "template_hash_key": HASH_KEY, "pods": pods}
    values.update(fields)
    return Observation(**values)


def cond(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": T0,
            "observedGeneration": 1}


NO_REPORTS = [
    cond("GraphModeFallback", "Unknown", "NoReports", "no runtime has reported its graph mode yet"),
    cond("LeakSuspected", "Unknown", "NoReports", "no runtime has reported its health yet"),
    cond("InvalidSpec", "False", "Valid", "the spec is valid"),
]


def test_two_groups_one_behind_names_its_worker_and_a_missing_one() -> None:
    pods = [
        pod("ds-lws-0", group=0, worker=0), pod("ds-lws-0-1", group=0, worker=1),
        pod("ds-lws-1", group=1, worker=0),  # its worker 1 does not exist yet
        pod("ds-old-abc"),  # the Deployment's pod on its way out: in no group
    ]
    why_group = "worker(s) 1 of 2 not created yet"
    why = f"1/2 replicas ready; ds-lws-1: Pending ({why_group})"
    assert compute_status(parse_spec(TWO_NODES), observe(pods, nodes_per_replica=2), None, NOW) == {
        "observedGeneration": 1, "phase": "Degraded", "replicas": 2, "readyReplicas": 1, "updatedReplicas": 2,
        "ready": "1/2", "selector": LEADERS, "model": "ds", "chip": "910B",
        "graph": {"replicas": [{"pod": "ds-lws-0", "ready": True, "fallbacks": 0, "image": "img:1"},
                               {"pod": "ds-lws-1", "ready": False, "fallbacks": 0, "image": "img:1"}],
                  "fallbacks": 0},
        "warmup": {"succeeded": 0, "failed": 0, "pending": 2},
        "groups": 2, "readyGroups": 1,
        "groupsBehind": [{"group": 1, "readyNodes": 1, "nodes": 2, "behind": [
            {"workerIndex": 1, "phase": "Missing", "reason": "the pod does not exist yet"}]}],
        "conditions": [
            cond("Ready", "False", "Degraded", why),
            cond("Progressing", "True", "Degraded", f"2/2 replicas updated; {why}"),
            cond("Degraded", "True", "ReplicasUnavailable", why),
            *NO_REPORTS,
        ],
    }


def test_a_group_with_an_npu_starved_worker_waits_for_npu_with_resource_and_count() -> None:
    scheduler = f"0/3 nodes are available: 3 Insufficient {NPU}."
    pods = [pod("ds-lws-0", group=0, worker=0, ready=False),
            pod("ds-lws-0-1", group=0, worker=1, unschedulable=scheduler)]
    status = compute_status(parse_spec({**TWO_NODES, "replicas": 1}), observe(pods, nodes_per_replica=2), None, NOW)
    assert status["phase"] == "WaitingForNPU"
    assert status["groupsBehind"] == [{"group": 0, "readyNodes": 0, "nodes": 2, "behind": [
        {"pod": "ds-lws-0", "workerIndex": 0, "phase": "Loading", "reason": "running; runtime state not readable yet"},
        {"pod": "ds-lws-0-1", "workerIndex": 1, "phase": "WaitingForNPU", "reason": scheduler}]}]
    assert get_condition(status, "WaitingForNPU") == cond(
        "WaitingForNPU", "True", "InsufficientNPU",
        f"1 pod(s) cannot be scheduled: not enough free {NPU} (8 asked for in all); ds-lws-0-1 asks for 8 {NPU}. "
        f"Scheduler: {scheduler}")
    assert ("Warning", "WaitingForNPU", get_condition(status, "WaitingForNPU")["message"]) in transition_events(None, status)

    # Another pod waiting changes the message, not the state: no second Event.
    more = [*pods, pod("ds-lws-1-1", group=1, worker=1, unschedulable=scheduler, npus=16)]
    later = compute_status(parse_spec(TWO_NODES), observe(more, nodes_per_replica=2), status, NOW)
    assert get_condition(later, "WaitingForNPU")["message"].startswith(
        f"2 pod(s) cannot be scheduled: not enough free {NPU} (24 asked for in all); ds-lws-0-1 asks for 8 {NPU}; "
        f"ds-lws-1-1 asks for 16 {NPU}.")
    assert [e for e in transition_events(status, later) if e[1] == "WaitingForNPU"] == []


def test_a_resource_that_never_waited_or_autoscaled_carries_neither_condition() -> None:
    status = compute_status(parse_spec(ONE_NODE), observe([pod("ds-0")]), None, NOW)
    assert get_condition(status, "WaitingForNPU") is None and get_condition(status, "Autoscaling") is None
    assert "autoscaling" not in status and "groups" not in status


HPA_OWNS = AutoscalingObservation(
    reason="HorizontalPodAutoscaler", message="a HorizontalPodAutoscaler scales spec.replicas", problem=False,
    provider="HorizontalPodAutoscaler", name="ds", min_replicas=1, max_replicas=4,
    hpa={"status": {"desiredReplicas": 2, "currentReplicas": 1, "lastScaleTime": "2026-12-01T11:59:00Z"}},
)
OWNS_MESSAGE = ("HorizontalPodAutoscaler ds owns spec.replicas (between 1 and 4) and sets it back after a manual "
                "kubectl scale; change spec.autoscaling.minReplicas/maxReplicas, or set spec.autoscaling.enabled "
                "false to set the replicas by hand")
AUTOSCALED = {**ONE_NODE, "replicas": 2, "autoscaling": {"maxReplicas": 4}}


def test_a_working_autoscaler_owns_the_replicas() -> None:
    status = compute_status(parse_spec(AUTOSCALED), observe([], autoscaling=HPA_OWNS), None, NOW)
    assert status["autoscaling"] == {"provider": "HorizontalPodAutoscaler", "name": "ds", "minReplicas": 1,
                                     "maxReplicas": 4, "specReplicas": 2, "desiredReplicas": 2, "currentReplicas": 1,
                                     "lastScaleTime": "2026-12-01T11:59:00Z"}
    assert get_condition(status, "Autoscaling") == cond("Autoscaling", "True", "HorizontalPodAutoscaler", OWNS_MESSAGE)
    assert autoscaling_events(None, status) == [("Normal", "AutoscalerOwnsReplicas", OWNS_MESSAGE)]
    again = compute_status(parse_spec(AUTOSCALED), observe([], autoscaling=HPA_OWNS), status, NOW)
    assert again == status and autoscaling_events(status, again) == []


def test_keda_missing_is_a_false_condition_with_the_fix_and_one_warning() -> None:
    missing = AutoscalingObservation(reason="KedaNotInstalled", message="... ; install KEDA (helm install ...)",
                                     problem=True, provider=None, name=None, min_replicas=1, max_replicas=4)
    status = compute_status(parse_spec(AUTOSCALED), observe([], autoscaling=missing), None, NOW)
    assert status["autoscaling"] == {"minReplicas": 1, "maxReplicas": 4, "specReplicas": 2}
    assert get_condition(status, "Autoscaling") == cond("Autoscaling", "False", "KedaNotInstalled", missing.message)
    assert autoscaling_events(None, status) == [("Warning", "KedaNotInstalled", missing.message)]


def test_turning_autoscaling_off_flips_the_condition_and_drops_the_status() -> None:
    on = compute_status(parse_spec(AUTOSCALED), observe([], autoscaling=HPA_OWNS), None, NOW)
    off = compute_status(parse_spec({**ONE_NODE, "replicas": 2}), observe([]), on, NOW)
    message = "autoscaling is off; spec.replicas (kubectl scale) sets the replicas"
    assert get_condition(off, "Autoscaling") == cond("Autoscaling", "False", "AutoscalingDisabled", message)
    assert "autoscaling" not in off
    assert autoscaling_events(on, off) == [("Normal", "AutoscalingDisabled", message)]


def with_replicas(status: dict[str, Any], spec_replicas: int, desired: int | None) -> dict[str, Any]:
    autoscaling = {**status["autoscaling"], "specReplicas": spec_replicas}
    autoscaling.pop("desiredReplicas", None)
    if desired is not None:
        autoscaling["desiredReplicas"] = desired
    return {**status, "autoscaling": autoscaling}


def test_a_manual_scale_warns_and_the_autoscalers_own_scale_is_reported() -> None:
    before = compute_status(parse_spec(AUTOSCALED), observe([], autoscaling=HPA_OWNS), None, NOW)
    manual = with_replicas(before, 5, desired=2)
    assert autoscaling_events(before, manual) == [("Warning", "ManualScaleOverridden", (
        "spec.replicas changed from 2 to 5, but autoscaling is on: HorizontalPodAutoscaler ds owns the replica "
        "count and sets it back to 2; to change the range set spec.autoscaling.minReplicas/maxReplicas, or set "
        "spec.autoscaling.enabled false to scale by hand"))]
    unknown = with_replicas(before, 5, desired=None)  # the HPA has not reported yet
    assert "sets it back between 1 and 4 as the load asks" in autoscaling_events(before, unknown)[0][2]
    by_hpa = with_replicas(before, 3, desired=3)
    assert autoscaling_events(before, by_hpa) == [
        ("Normal", "AutoscalerScaled", "HorizontalPodAutoscaler ds scaled spec.replicas from 2 to 3 (1 running before)")]
    # A change of spec.replicas together with a provider switch is the switch, not a manual scale.
    switched = {**by_hpa, "autoscaling": {**by_hpa["autoscaling"], "provider": "ScaledObject", "desiredReplicas": 9}}
    assert autoscaling_events(before, switched) == []


def test_lws_missing_is_a_progressing_reason_with_one_warning() -> None:
    message = "nodesPerReplica 2 runs each replica as a LeaderWorkerSet, but the cluster does not serve ..."
    status = compute_status(parse_spec(TWO_NODES), observe([], nodes_per_replica=2, lws_missing=message), None, NOW)
    progressing = get_condition(status, "Progressing")
    full = f"{message}; the children are left as they were until then"
    assert progressing == cond("Progressing", "False", "LeaderWorkerSetNotInstalled", full)
    assert ("Warning", "LeaderWorkerSetNotInstalled", full) in transition_events(None, status)
    again = compute_status(parse_spec(TWO_NODES), observe([], nodes_per_replica=2, lws_missing=message), status, NOW)
    assert transition_events(status, again) == []
