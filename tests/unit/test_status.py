"""ascend_operator.status: pure status computation, conditions, diffs and transition events.

Covered: complete status dicts for the main situations (no pods, mixed start-up, all ready,
WaitingForNPU, crash loop, zero replicas, invalid spec); phase precedence; the remembered mode
(taken from ready pods of the current spec only, the safest when they disagree, kept while its key
matches, dropped when it does not); GraphModeFallback and LeakSuspected conditions; set_condition's
lastTransitionTime rule; status_patch (no patch when equal, nulls for removed keys, kopf's key
ignored); transition_events firing once; and that a second pass with a later clock changes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from ascend_operator.api import AscendLLMDeploymentStatus, Condition, ConditionStatus, Phase, parse_spec
from ascend_operator.conditions import set_condition
from ascend_operator.replicastatus import classify_pod
from ascend_operator.status import (
    Observation,
    compute_status,
    invalid_spec_status,
    resource_status,
    status_patch,
    transition_events,
)
from ascend_runtime.config import GraphMode, RuntimePhase, RuntimeState, WarmupReport

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
T0 = "2026-12-01T12:00:00Z"
LATER = NOW + timedelta(minutes=5)
T5 = "2026-12-01T12:05:00Z"
NPU = "huawei.com/Ascend910"
SELECTOR = "app.kubernetes.io/component=engine,app.kubernetes.io/instance=qwen,app.kubernetes.io/name=ascend-llm"
ENDPOINT = "http://qwen.llm.svc.cluster.local:8000/v1"
HASH_KEY = "llm.ascend.dev/config-hash"


def spec(**overrides: Any) -> Any:
    return parse_spec({"model": {"hostPath": {"path": "/models/qwen"}, "servedName": "qwen"}, "replicas": 2,
                       **overrides})


def pod(name: str, *, ready: bool = True, phase: str = "Running", template: str = "h1",
        scheduled: tuple[str, str] | None = None, waiting: str | None = None,
        created: str = "2026-12-01T11:00:00Z", image: str = "img:1") -> dict[str, Any]:
    conditions: list[dict[str, Any]] = [{"type": "PodScheduled", "status": "True"}]
    if scheduled:  # an unscheduled pod is Pending and never ready
        conditions = [{"type": "PodScheduled", "status": "False", "reason": scheduled[0], "message": scheduled[1]}]
        ready, phase = False, "Pending"
    conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    statuses = []
    if waiting:
        statuses = [{"name": "engine", "state": {"waiting": {"reason": waiting}}}]
    return {
        "metadata": {"name": name, "creationTimestamp": created, "annotations": {HASH_KEY: template}},
        "spec": {"containers": [{"name": "engine", "image": image}]},
        "status": {"phase": phase, "conditions": conditions, "containerStatuses": statuses},
    }


def runtime(phase: RuntimePhase, mode: GraphMode | None = GraphMode.FULL_AND_PIECEWISE, **fields: Any) -> RuntimeState:
    return RuntimeState(phase=phase, ready=phase == RuntimePhase.READY, mode=mode,
                        requested_mode=GraphMode.FULL_AND_PIECEWISE, **fields)


def observe(pods: list[dict[str, Any]], states: dict[str, RuntimeState | None] | None = None, *,
            key: str = "key1", conflicts: tuple[str, ...] = ()) -> Observation:
    return Observation(name="qwen", generation=3, selector=SELECTOR, endpoint=ENDPOINT, resource_name=NPU,
                       remembered_for=key, template_hash="h1", template_hash_key=HASH_KEY, pods=pods,
                       states=states or {}, conflicts=conflicts)


def cond(type_: str, status: str, reason: str, message: str, when: str = T0) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": when, "observedGeneration": 3}


def conditions(ready: tuple[str, str, str], progressing: tuple[str, str, str], degraded: tuple[str, str, str],
               fallback: tuple[str, str, str] = ("Unknown", "NoReports", "no runtime has reported its graph mode yet"),
               leak: tuple[str, str, str] = ("Unknown", "NoReports", "no runtime has reported its health yet"),
               ) -> list[dict[str, Any]]:
    return [
        cond("Ready", *ready), cond("Progressing", *progressing), cond("Degraded", *degraded),
        cond("GraphModeFallback", *fallback), cond("LeakSuspected", *leak),
        cond("InvalidSpec", "False", "Valid", "the spec is valid"),
    ]


def base(wanted: int = 2, **fields: Any) -> dict[str, Any]:
    status = {"observedGeneration": 3, "phase": "Pending", "replicas": 0, "readyReplicas": 0, "updatedReplicas": 0,
              "selector": SELECTOR, "model": "qwen", "chip": "910B",
              "graph": {"replicas": [], "fallbacks": 0}, "warmup": {"succeeded": 0, "failed": 0, "pending": 0},
              "endpoint": ENDPOINT}
    status.update(fields)
    status["ready"] = f"{status['readyReplicas']}/{wanted}"
    return status


def test_no_pods_is_pending() -> None:
    assert compute_status(spec(), observe([]), None, NOW) == base(conditions=conditions(
        ("False", "Pending", "no pods yet"),
        ("True", "Pending", "0/2 replicas updated; no pods yet"),
        ("False", "AsExpected", "no pods yet"),
    ))


def test_one_ready_one_warming_is_degraded_with_every_field() -> None:
    pods = [pod("qwen-a"), pod("qwen-b", ready=False)]
    states = {
        "qwen-a": runtime(RuntimePhase.READY, warmup=WarmupReport(outcome="succeeded", seconds=4.0), image="img:1"),
        "qwen-b": runtime(RuntimePhase.WARMING_UP, mode=GraphMode.FULL_AND_PIECEWISE, message="warming up (3/9)",
                          warmup=WarmupReport(outcome="running")),
    }
    why = "1/2 replicas ready; qwen-b: WarmingUp (warming up (3/9))"
    assert compute_status(spec(), observe(pods, states), None, NOW) == base(
        phase="Degraded", replicas=2, readyReplicas=1, updatedReplicas=2,
        graph={
            "replicas": [
                {"pod": "qwen-a", "ready": True, "fallbacks": 0, "phase": "Ready", "mode": "FULL_AND_PIECEWISE",
                 "image": "img:1"},
                {"pod": "qwen-b", "ready": False, "fallbacks": 0, "phase": "WarmingUp", "mode": "FULL_AND_PIECEWISE",
                 "image": "img:1"},
            ],
            "fallbacks": 0, "mode": "FULL_AND_PIECEWISE",  # no fallback: nothing to remember
        },
        warmup={"succeeded": 1, "failed": 0, "pending": 1, "lastSeconds": 4.0},
        conditions=conditions(
            ("False", "Degraded", why),
            ("True", "Degraded", f"2/2 replicas updated; {why}"),
            ("True", "ReplicasUnavailable", why),
            ("False", "AsRequested", "every reporting replica runs its requested graph mode"),
            ("False", "Healthy", "no replica reports a leak or a hang"),
        ),
    )


def test_all_ready_is_ready_and_a_later_pass_changes_nothing() -> None:
    pods = [pod("qwen-a"), pod("qwen-b")]
    states = {name: runtime(RuntimePhase.READY) for name in ("qwen-a", "qwen-b")}
    first = compute_status(spec(), observe(pods, states), None, NOW)
    assert first["phase"] == "Ready"
    assert first["conditions"][:3] == [
        cond("Ready", "True", "AllReplicasReady", "2/2 replicas ready"),
        cond("Progressing", "False", "RolloutComplete", "2/2 replicas updated and ready"),
        cond("Degraded", "False", "AsExpected", "2/2 replicas ready"),
    ]
    second = compute_status(spec(), observe(pods, states), first, LATER)
    assert second == first
    assert status_patch(first, second) is None


def test_a_ready_runtime_in_a_pod_the_kubelet_has_not_marked_ready_is_not_ready() -> None:
    # Seen on a real kubelet (tests/node): the runtime's /state says ready a readiness-probe period
    # before the pod's Ready condition; the resource must not say Ready with 0/1 replicas ready.
    status = compute_status(spec(replicas=1), observe([pod("qwen-a", ready=False)],
                                                      {"qwen-a": runtime(RuntimePhase.READY)}), None, NOW)
    assert status["phase"] == "WarmingUp"
    assert status["conditions"][0]["status"] == "False"
    assert status["conditions"][0]["message"].startswith("0/1 replicas ready; qwen-a: Ready")
    ready = compute_status(spec(replicas=1), observe([pod("qwen-a")], {"qwen-a": runtime(RuntimePhase.READY)}),
                           None, NOW)
    assert ready["phase"] == "Ready"


def test_unschedulable_for_npus_is_waiting_for_npu_but_other_reasons_are_pending() -> None:
    npu = f"0/3 nodes are available: 3 Insufficient {NPU}."
    status = compute_status(spec(replicas=1), observe([pod("qwen-a", scheduled=("Unschedulable", npu))]), None, NOW)
    assert status["phase"] == "WaitingForNPU"
    assert status["conditions"][0] == cond("Ready", "False", "WaitingForNPU",
                                           f"0/1 replicas ready; qwen-a: WaitingForNPU ({npu})")
    taint = "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: infra}."
    pending = compute_status(spec(replicas=1), observe([pod("qwen-a", scheduled=("Unschedulable", taint))]), None, NOW)
    assert pending["phase"] == "Pending"


@pytest.mark.parametrize("broken", [
    pod("qwen-a", ready=False, waiting="CrashLoopBackOff"),
    pod("qwen-a", ready=False, waiting="ImagePullBackOff"),
    pod("qwen-a", ready=False, phase="Failed"),
])
def test_a_broken_pod_without_ready_ones_is_failed(broken: dict[str, Any]) -> None:
    status = compute_status(spec(replicas=1), observe([broken]), None, NOW)
    assert status["phase"] == "Failed"
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"][:3]] == [
        ("Ready", "False", "Failed"), ("Progressing", "False", "ReplicasFailed"), ("Degraded", "True", "ReplicasFailed")]


def test_the_slowest_starting_pod_sets_the_phase() -> None:
    pods = [pod("qwen-a", ready=False), pod("qwen-b", ready=False)]
    states = {"qwen-a": runtime(RuntimePhase.WARMING_UP), "qwen-b": runtime(RuntimePhase.CAPTURING_GRAPHS)}
    assert compute_status(spec(), observe(pods, states), None, NOW)["phase"] == "CapturingGraphs"


def test_zero_replicas_is_stopped() -> None:
    status = compute_status(spec(replicas=0), observe([]), None, NOW)
    assert status["phase"] == "Stopped"
    assert status["conditions"][0] == cond("Ready", "False", "Stopped", "0 replicas requested")


@pytest.mark.parametrize(("pod_status", "state", "expected"), [
    (pod("p"), None, Phase.READY),  # the kubelet says ready, the runtime is not readable
    (pod("p", ready=False), None, Phase.LOADING),
    (pod("p", ready=False, phase="Pending"), None, Phase.PENDING),
    (pod("p"), runtime(RuntimePhase.PREFLIGHT), Phase.LOADING),
    (pod("p"), runtime(RuntimePhase.DRAINING), Phase.DEGRADED),
    (pod("p"), runtime(RuntimePhase.FAILED), Phase.FAILED),
])
def test_classify_pod(pod_status: dict[str, Any], state: RuntimeState | None, expected: Phase) -> None:
    assert classify_pod(pod_status, state, NPU)[0] == expected


def fell_back(mode: GraphMode, reason: str, deterministic: bool = True, **fields: Any) -> RuntimeState:
    return runtime(RuntimePhase.READY, mode=mode, fallbacks=1, fallback_reason=reason,
                   fallback_deterministic=deterministic, versions={"vllm": "0.23.0", "vllmAscend": "0.23.0"},
                   **fields)


def test_remembered_mode_comes_from_deterministic_fallbacks_of_current_pods_and_is_the_safest() -> None:
    pods = [pod("qwen-a"), pod("qwen-b"), pod("qwen-c"), pod("qwen-old", template="h0")]
    states = {"qwen-a": fell_back(GraphMode.FULL_DECODE_ONLY, "FULL_AND_PIECEWISE -> FULL_DECODE_ONLY: x"),
              "qwen-b": fell_back(GraphMode.PIECEWISE, "FULL_AND_PIECEWISE -> PIECEWISE: capture failed: 207005"),
              "qwen-c": runtime(RuntimePhase.READY, mode=GraphMode.FULL_AND_PIECEWISE),  # no fallback
              "qwen-old": fell_back(GraphMode.EAGER, "older spec: ignored")}
    graph = compute_status(spec(replicas=4), observe(pods, states), None, NOW)["graph"]
    assert (graph["mode"], graph["rememberedMode"], graph["rememberedFor"]) == ("Mixed", "PIECEWISE", "key1")
    assert graph["rememberedReason"] == "pod qwen-b: FULL_AND_PIECEWISE -> PIECEWISE: capture failed: 207005"
    assert graph["rememberedVersions"] == "vllm 0.23.0, vllm-ascend 0.23.0"


def test_a_transient_fallback_or_a_plain_ready_pod_is_not_remembered() -> None:
    states = {"qwen-a": fell_back(GraphMode.EAGER, "PIECEWISE -> EAGER: capture did not finish", deterministic=False),
              "qwen-b": runtime(RuntimePhase.READY, mode=GraphMode.PIECEWISE)}
    graph = compute_status(spec(replicas=2), observe([pod("qwen-a"), pod("qwen-b")], states), None, NOW)["graph"]
    assert "rememberedMode" not in graph and "rememberedReason" not in graph


def test_a_new_engine_version_forgets_the_remembered_mode() -> None:
    previous = {"graph": {"rememberedMode": "EAGER", "rememberedFor": "key1", "rememberedReason": "pod qwen-a: x",
                          "rememberedVersions": "vllm 0.23.0, vllm-ascend 0.23.0"}}
    same = {"qwen-b": runtime(RuntimePhase.READY, mode=GraphMode.EAGER,
                              versions={"vllm": "0.23.0", "vllmAscend": "0.23.0"})}
    kept = compute_status(spec(replicas=1), observe([pod("qwen-b")], same), previous, NOW)["graph"]
    assert (kept["rememberedMode"], kept["rememberedReason"]) == ("EAGER", "pod qwen-a: x")
    newer = {"qwen-b": runtime(RuntimePhase.READY, mode=GraphMode.EAGER,
                               versions={"vllm": "0.24.0", "vllmAscend": "0.24.0"})}
    dropped = compute_status(spec(replicas=1), observe([pod("qwen-b")], newer), previous, NOW)["graph"]
    assert "rememberedMode" not in dropped


def test_a_remembered_mode_this_operator_does_not_know_is_dropped() -> None:
    # A newer operator's mode (the reconcile starts from the top for it): the typed status drops it.
    previous = {"graph": {"rememberedMode": "SOME_NEWER_MODE", "rememberedFor": "key1"}}
    starting = {"qwen-a": runtime(RuntimePhase.LOADING, mode=None)}
    observation = observe([pod("qwen-a", ready=False)], starting)
    graph = compute_status(spec(replicas=1), observation, previous, NOW)["graph"]
    assert "rememberedMode" not in graph and "rememberedFor" not in graph


def test_the_typed_status_is_what_compute_status_writes() -> None:
    """compute_status is resource_status's typed model as camelCase JSON: fields left unset or None
    are not written (no warmup warnings when there are none, no groups on single-node replicas,
    no lora without spec.lora), enums are their values, and the JSON parses back to the same."""
    pods = [pod("qwen-a"), pod("qwen-b", ready=False)]
    states = {
        "qwen-a": fell_back(GraphMode.PIECEWISE, "FULL_AND_PIECEWISE -> PIECEWISE: capture failed: 207005",
                            warmup=WarmupReport(outcome="succeeded", seconds=4.0, warnings=["no chat template"])),
        "qwen-b": runtime(RuntimePhase.LOADING, mode=None),
    }
    typed = resource_status(spec(), observe(pods, states), None, NOW)
    assert isinstance(typed, AscendLLMDeploymentStatus)
    assert typed.phase == Phase.DEGRADED and typed.graph is not None and typed.warmup is not None
    assert typed.graph.remembered_mode == GraphMode.PIECEWISE and typed.warmup.warnings == ["no chat template"]
    written = compute_status(spec(), observe(pods, states), None, NOW)
    assert typed.wire() == written
    assert written["graph"]["rememberedMode"] == "PIECEWISE" and written["phase"] == "Degraded"
    assert written["graph"]["replicas"][1] == {
        "pod": "qwen-b", "ready": False, "fallbacks": 0, "phase": "Loading", "image": "img:1"}
    assert written["warmup"] == {"succeeded": 1, "failed": 0, "pending": 1, "lastSeconds": 4.0,
                                 "warnings": ["no chat template"]}
    absent = {"groups", "readyGroups", "groupsBehind", "lora", "autoscaling", "modelCache", "routing", "kopf"}
    assert not absent & set(written)
    assert AscendLLMDeploymentStatus.model_validate(written).wire() == written
    quiet = compute_status(spec(), observe([pod("qwen-a")], {"qwen-a": runtime(RuntimePhase.READY)}), None, NOW)
    assert quiet["warmup"] == {"succeeded": 0, "failed": 0, "pending": 1}


def test_remembered_mode_is_kept_while_the_key_matches_and_dropped_when_not() -> None:
    previous = {"graph": {"rememberedMode": "PIECEWISE", "rememberedFor": "key1"}}
    starting = {"qwen-a": runtime(RuntimePhase.LOADING, mode=None)}
    kept = compute_status(spec(replicas=1), observe([pod("qwen-a", ready=False)], starting), previous, NOW)["graph"]
    assert (kept.get("rememberedMode"), kept.get("rememberedFor")) == ("PIECEWISE", "key1")
    dropped = compute_status(spec(replicas=1), observe([pod("qwen-a", ready=False)], starting, key="key2"),
                             previous, NOW)["graph"]
    assert "rememberedMode" not in dropped and "rememberedFor" not in dropped
    assert status_patch(previous, {"graph": dropped}) == {"graph": {
        "rememberedMode": None, "rememberedFor": None, "fallbacks": 0,
        "replicas": [{"pod": "qwen-a", "ready": False, "fallbacks": 0, "phase": "Loading", "image": "img:1"}],
    }}


def test_fallback_and_leak_conditions_name_the_pods_and_reasons() -> None:
    states = {"qwen-a": runtime(RuntimePhase.READY, mode=GraphMode.PIECEWISE, rung=3, fallbacks=1,
                                fallback_reason="capture failed: out of memory"),
              "qwen-b": runtime(RuntimePhase.READY, hung=True)}
    status = compute_status(spec(), observe([pod("qwen-a"), pod("qwen-b")], states), None, NOW)
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["GraphModeFallback"] == cond(
        "GraphModeFallback", "True", "FellBack",
        "qwen-a runs PIECEWISE instead of FULL_AND_PIECEWISE: capture failed: out of memory")
    assert by_type["LeakSuspected"] == cond("LeakSuspected", "True", "RequestsHung", "qwen-b: requests hung")
    assert status["graph"]["fallbacks"] == 1


def test_a_child_conflict_stops_progressing() -> None:
    status = compute_status(spec(replicas=1), observe([], conflicts=("ConfigMap llm/qwen-config exists",)), None, NOW)
    assert status["conditions"][1] == cond("Progressing", "False", "ChildConflict", "ConfigMap llm/qwen-config exists")


def test_a_refused_child_fails_a_resource_without_ready_replicas_and_degrades_one_with() -> None:
    from dataclasses import replace

    refused = "the API server refused Deployment qwen (HTTP 422): spec.template...: Invalid value"
    status = compute_status(spec(replicas=1), replace(observe([]), refused=refused), None, NOW)
    assert status["phase"] == "Failed"
    assert status["conditions"][1] == cond("Progressing", "False", "ChildRefused", refused)
    assert status["conditions"][0]["status"] == "False" and refused in status["conditions"][0]["message"]
    assert transition_events(None, status)[0] == ("Warning", "ChildRefused", refused)
    serving = compute_status(spec(replicas=2), replace(observe([pod("a"), pod("b")]), refused=refused), None, NOW)
    assert serving["phase"] == "Degraded" and serving["readyReplicas"] == 2


def test_a_workload_that_cannot_make_pods_says_why() -> None:
    from dataclasses import replace

    message = 'pods "qwen-7d-" is forbidden: no PriorityClass with name x was found'
    workload = {"status": {"conditions": [
        {"type": "Available", "status": "False"},
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": message}]}}
    status = compute_status(spec(replicas=1), replace(observe([]), workload=workload), None, NOW)
    assert status["phase"] == "Failed"
    assert status["conditions"][1] == cond("Progressing", "False", "FailedCreate", message)
    stuck = {"status": {"conditions": [{"type": "Progressing", "status": "False",
                                        "reason": "ProgressDeadlineExceeded", "message": "too slow"}]}}
    status = compute_status(spec(replicas=1), replace(observe([]), workload=stuck), None, NOW)
    assert status["conditions"][1]["reason"] == "ProgressDeadlineExceeded"
    healthy = {"status": {"conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}}
    ready = compute_status(spec(replicas=1), replace(observe([pod("a")]), workload=healthy), None, NOW)
    assert ready["phase"] == "Ready"


def test_more_ready_replicas_than_wanted_is_scaling_not_ready() -> None:
    status = compute_status(spec(replicas=1), observe([pod("a"), pod("b")]), None, NOW)
    assert status["phase"] == "Scaling" and status["ready"] == "2/1"
    assert status["conditions"][0]["status"] == "False"


def test_the_phase_is_ready_exactly_when_the_ready_condition_is_true() -> None:
    cases = [observe([]), observe([pod("a")]), observe([pod("a"), pod("b")]), observe([pod("a", ready=False)])]
    for observation in cases:
        status = compute_status(spec(replicas=1), observation, None, NOW)
        assert (status["phase"] == "Ready") == (status["conditions"][0]["status"] == "True")


def test_set_condition_moves_the_transition_time_only_on_a_flip() -> None:
    def wire(conditions: list[Condition]) -> list[dict[str, Any]]:
        return [condition.wire() for condition in conditions]

    start = set_condition([], "Ready", False, "Pending", "no pods yet", NOW, 1)
    assert wire(start) == [{"type": "Ready", "status": "False", "reason": "Pending", "message": "no pods yet",
                            "lastTransitionTime": T0, "observedGeneration": 1}]
    same = set_condition(start, "Ready", False, "Loading", "loading weights", LATER, 2)
    assert wire(same) == [{"type": "Ready", "status": "False", "reason": "Loading", "message": "loading weights",
                           "lastTransitionTime": T0, "observedGeneration": 2}]
    flipped = set_condition(same, "Ready", True, "AllReplicasReady", "1/1", LATER, 2)
    assert flipped[0].last_transition_time == T5 and flipped[0].status == ConditionStatus.TRUE
    other = set_condition(flipped, "Degraded", "Unknown", "NoReports", "", LATER, None)
    assert other[0] == flipped[0]
    assert other[1].wire() == {"type": "Degraded", "status": "Unknown", "reason": "NoReports", "message": "",
                               "lastTransitionTime": T5}


def test_invalid_spec_status_keeps_what_was_observed() -> None:
    previous = base(phase="Ready", readyReplicas=2, kopf={"progress": {}},
                    conditions=[cond("Ready", "True", "AllReplicasReady", "2/2 replicas ready")])
    status = invalid_spec_status(previous, "invalid spec: spec.npu.perReplica: must equal", 4, LATER)
    assert status == {
        **{k: v for k, v in previous.items() if k != "kopf"},
        "observedGeneration": 4,
        "phase": "Failed",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "the spec is invalid; see InvalidSpec",
             "lastTransitionTime": T5, "observedGeneration": 4},
            {"type": "InvalidSpec", "status": "True", "reason": "InvalidSpec",
             "message": "invalid spec: spec.npu.perReplica: must equal", "lastTransitionTime": T5,
             "observedGeneration": 4},
        ],
    }


def test_status_patch_is_a_merge_patch_or_none() -> None:
    old = {"phase": "Ready", "graph": {"mode": "EAGER", "rememberedMode": "EAGER", "replicas": [1]},
           "kopf": {"x": 1}, "endpoint": "a"}
    new = {"phase": "Ready", "graph": {"mode": "PIECEWISE", "replicas": [1, 2]}, "selector": "s"}
    assert status_patch(old, new) == {
        "endpoint": None, "selector": "s",
        "graph": {"mode": "PIECEWISE", "rememberedMode": None, "replicas": [1, 2]},
    }
    assert status_patch({**new, "kopf": {"y": 2}}, new) is None
    assert status_patch(None, {"phase": "Pending"}) == {"phase": "Pending"}


def test_transition_events_fire_once_per_transition() -> None:
    before = {"conditions": [cond("Ready", "False", "Loading", "0/1"), cond("GraphModeFallback", "False", "AsRequested", "")]}
    after = {"conditions": [cond("Ready", "True", "AllReplicasReady", "1/1 replicas ready"),
                            cond("GraphModeFallback", "True", "FellBack", "qwen-a runs EAGER instead of PIECEWISE")]}
    assert transition_events(before, after) == [
        ("Warning", "FellBack", "qwen-a runs EAGER instead of PIECEWISE"),
        ("Normal", "Ready", "1/1 replicas ready"),
    ]
    assert transition_events(after, after) == []
    another = {"conditions": [cond("GraphModeFallback", "True", "FellBack", "qwen-a ...; qwen-b runs EAGER")]}
    assert transition_events(after, another) == [("Warning", "FellBack", "qwen-a ...; qwen-b runs EAGER")]


def test_warmup_warnings_of_the_pods_show_once_each() -> None:
    from ascend_runtime.config import WarmupReport

    warning = "chat warmup skipped: the model has no chat template (...)"
    report = WarmupReport(outcome="succeeded", seconds=2.0, requests=6, warnings=[warning])
    states = {"qwen-a": runtime(RuntimePhase.READY, warmup=report),
              "qwen-b": runtime(RuntimePhase.READY, warmup=report)}
    warmup = compute_status(spec(replicas=2), observe([pod("qwen-a"), pod("qwen-b")], states), None, NOW)["warmup"]
    assert warmup["warnings"] == [warning] and warmup["succeeded"] == 2


# --- status.tunedDefaults -------------------------------------------------------------------------

MOE_REPORT = {
    "enabled": True, "modelClass": "MoE", "scenario": "large MoE",
    "summary": "MoE, 128 experts, ~235B parameters, vllm-ascend 0.13.0",
    "applied": [
        {"kind": "env", "setting": "HCCL_BUFFSIZE=512", "source": "docs/source/tutorials/Qwen3-235B-A22B.md@v0.13.0"},
        {"kind": "flag", "setting": "--async-scheduling", "source": "docs/source/tutorials/Qwen3-235B-A22B.md@v0.13.0"},
    ],
    "skipped": [{"kind": "env", "setting": "OMP_NUM_THREADS=1", "source": "docs/source/tutorials/x.md@v0.13.0",
                 "skipped": "OMP_NUM_THREADS is set in engine.env"}],
    "notes": ["a note /state keeps"],
}


def reporting(report: dict[str, Any] | None, **fields: Any) -> RuntimeState:
    """A ready runtime whose /state JSON carries ``report`` (parsed as podreads parses /state)."""
    wire = runtime(RuntimePhase.READY, **fields).model_dump(mode="json", by_alias=True, exclude_none=True)
    return RuntimeState.model_validate({**wire, **({"tunedDefaults": report} if report is not None else {})})


def test_tuned_defaults_come_from_an_updated_ready_pod_one_line_each_and_skipped_counted() -> None:
    pods = [pod("qwen-c"), pod("qwen-b"), pod("qwen-a", ready=False), pod("qwen-old", template="h0")]
    other = {**MOE_REPORT, "summary": "not this one"}
    states = {"qwen-a": reporting(other), "qwen-old": reporting(other),  # not ready; outdated
              "qwen-b": reporting(MOE_REPORT), "qwen-c": reporting(other)}  # the first by name speaks
    status = compute_status(spec(replicas=4), observe(pods, states), None, NOW)
    assert status["tunedDefaults"] == {
        "pod": "qwen-b",
        "summary": "MoE, 128 experts, ~235B parameters, vllm-ascend 0.13.0",
        "applied": ["HCCL_BUFFSIZE=512 (docs/source/tutorials/Qwen3-235B-A22B.md@v0.13.0)",
                    "--async-scheduling (docs/source/tutorials/Qwen3-235B-A22B.md@v0.13.0)"],
        "skipped": 1,
    }
    # What is written parses back into the typed status (the CRD's schema is generated from it).
    assert AscendLLMDeploymentStatus.model_validate(status).tuned_defaults.skipped == 1  # type: ignore[union-attr]
    # Written once: a later pass with the same reports changes nothing.
    assert status_patch(status, compute_status(spec(replicas=4), observe(pods, states), status, LATER)) is None


def test_tuned_defaults_turned_off_show_the_reason_and_no_report_shows_nothing() -> None:
    off = {"enabled": False, "reason": "engine.tunedDefaults is false"}
    status = compute_status(spec(replicas=1), observe([pod("qwen-a")], {"qwen-a": reporting(off)}), None, NOW)
    assert status["tunedDefaults"] == {"pod": "qwen-a", "reason": "engine.tunedDefaults is false"}
    # A runtime without the report (an older image), or none ready yet: the field is not written.
    for states, ready in (({"qwen-a": reporting(None)}, True), ({"qwen-a": reporting(MOE_REPORT)}, False)):
        status = compute_status(spec(replicas=1), observe([pod("qwen-a", ready=ready)], states), None, NOW)
        assert "tunedDefaults" not in status


def test_tuned_defaults_status_keeps_at_most_the_limit_of_applied_lines() -> None:
    from ascend_operator.api.status import MAX_TUNED_APPLIED

    many = {**MOE_REPORT, "applied": [{"kind": "env", "setting": f"V{i}=1", "source": "s@v1"} for i in range(40)]}
    status = compute_status(spec(replicas=1), observe([pod("qwen-a")], {"qwen-a": reporting(many)}), None, NOW)
    assert status["tunedDefaults"]["applied"] == [f"V{i}=1 (s@v1)" for i in range(MAX_TUNED_APPLIED)]


def test_engine_relaunches_container_restarts_and_a_resumed_ladder_show_per_pod_and_summed() -> None:
    # Seen on a real kubelet (tests/node/test_node_restarts.py): an engine killed in its container
    # is relaunched by the runtime, a hung one restarted by the kubelet; the status says both.
    restarted = pod("qwen-b")
    restarted["status"]["containerStatuses"] = [{"name": "engine", "restartCount": 2, "state": {"running": {}}}]
    states = {
        "qwen-a": runtime(RuntimePhase.READY, engine_restarts=1),
        "qwen-b": runtime(RuntimePhase.READY, engine_restarts=3,
                          resumed="rung 1 (PIECEWISE), kept from this pod's previous container: x"),
    }
    graph = compute_status(spec(), observe([pod("qwen-a"), restarted], states), None, NOW)["graph"]
    first, second = graph["replicas"]
    assert first["engineRestarts"] == 1 and "containerRestarts" not in first and "resumed" not in first
    assert second["engineRestarts"] == 3 and second["containerRestarts"] == 2
    assert second["resumed"].startswith("rung 1 (PIECEWISE)")
    assert graph["engineRestarts"] == 4 and graph["containerRestarts"] == 2
    # A pod whose runtime cannot be read still shows the kubelet's count.
    unread = compute_status(spec(), observe([pod("qwen-a"), restarted], {}), None, NOW)["graph"]
    assert unread["containerRestarts"] == 2 and "engineRestarts" not in unread
    quiet = compute_status(spec(), observe([pod("qwen-a")], {"qwen-a": runtime(RuntimePhase.READY)}), None, NOW)
    assert not {"engineRestarts", "containerRestarts"} & set(quiet["graph"])
    assert not {"engineRestarts", "containerRestarts", "resumed"} & set(quiet["graph"]["replicas"][0])
