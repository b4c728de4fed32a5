"""Pod and runtime state -> the resource's status, through the real client path.

The tests play the Deployment controller and the kubelet (they put pods into the emulator) and
the in-pod runtime (they set what each pod's ``GET /state`` answers through the API server's pod
proxy). The operator's resync reads both and writes the status: phase, ready replicas, the graph
mode per replica, the remembered mode (and its use and loss), conditions, and Events posted once
per transition (WaitingForNPU naming the resource and the count). A resync with nothing changed
computes no status but still reads the runtimes; a pass made by a child's status change computes
the status but asks a settled runtime no sooner than a skipped pass would; an unreadable runtime
is asked less and less often until its pod changes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ascend_runtime.config import GraphMode, RuntimePhase, RuntimeState, WarmupReport
from k8s_emulator import RealisticEmulator
from operator_harness import (
    CONFIGMAPS,
    DEPLOYMENTS,
    EVENTS,
    NAMESPACE,
    PODS,
    RESYNC_S,
    api,
    apply_resource,
    cr_path,
    get_resource,
    pod,
    settle,
    wait_for,
)

ASCEND_SPEC: dict[str, Any] = {
    "model": {"hostPath": {"path": "/models/qwen"}, "servedName": "qwen"},
    "replicas": 2,
    "npu": {"perReplica": 1},
}
NPU = "huawei.com/Ascend910"


def state(phase: RuntimePhase, mode: GraphMode | None = GraphMode.FULL_AND_PIECEWISE, **fields: Any) -> dict[str, Any]:
    ready = phase == RuntimePhase.READY
    values: dict[str, Any] = {"phase": phase, "ready": ready, "mode": mode,
                              "requested_mode": GraphMode.FULL_AND_PIECEWISE, **fields}
    return RuntimeState(**values).model_dump(mode="json", by_alias=True)


def status(emulator: RealisticEmulator, name: str = "qwen") -> dict[str, Any]:
    return (get_resource(emulator, name) or {}).get("status") or {}


def condition(emulator: RealisticEmulator, type_: str, name: str = "qwen") -> dict[str, Any]:
    return next((c for c in status(emulator, name).get("conditions", []) if c["type"] == type_), {})


def events(emulator: RealisticEmulator, reason: str) -> list[dict[str, Any]]:
    return [e for e in emulator.list(*EVENTS, NAMESPACE) if e.get("reason") == reason]


def add_pod(emulator: RealisticEmulator, index: int, runtime: dict[str, Any] | None, **kwargs: Any) -> str:
    body = pod("qwen", index, emulator, **kwargs)
    emulator.put_object(*PODS, body)
    if runtime is not None:
        emulator.set_pod_state(NAMESPACE, body["metadata"]["name"], runtime)
    return body["metadata"]["name"]


async def created(emulator: RealisticEmulator, spec: dict[str, Any] = ASCEND_SPEC) -> None:
    await apply_resource(emulator, "qwen", spec)
    await wait_for(lambda: status(emulator).get("phase") == "Pending", what="phase Pending")


async def test_ready_pods_make_the_resource_ready(emulator, operator) -> None:
    await created(emulator)
    add_pod(emulator, 0, state(RuntimePhase.READY, warmup=WarmupReport(outcome="succeeded", seconds=3.5, requests=9)))
    add_pod(emulator, 1, state(RuntimePhase.WARMING_UP, warmup=WarmupReport(outcome="running")), ready=False)

    await wait_for(lambda: status(emulator).get("phase") == "Degraded", what="phase Degraded")
    assert status(emulator)["readyReplicas"] == 1
    assert condition(emulator, "Ready")["status"] == "False"
    assert condition(emulator, "Degraded")["status"] == "True"

    add_pod(emulator, 1, state(RuntimePhase.READY))
    await wait_for(lambda: status(emulator).get("phase") == "Ready", what="phase Ready")
    current = status(emulator)
    assert (current["replicas"], current["readyReplicas"], current["updatedReplicas"]) == (2, 2, 2)
    assert current["graph"]["mode"] == "FULL_AND_PIECEWISE"
    assert [r["pod"] for r in current["graph"]["replicas"]] == ["qwen-0", "qwen-1"]
    assert "rememberedMode" not in current["graph"]  # no fallback: nothing to remember
    assert current["warmup"] == {"succeeded": 1, "failed": 0, "pending": 1, "lastSeconds": 3.5}
    assert condition(emulator, "Ready")["status"] == "True"
    assert condition(emulator, "Progressing")["reason"] == "RolloutComplete"
    assert condition(emulator, "GraphModeFallback")["status"] == "False"
    await settle(emulator)
    assert len(events(emulator, "Ready")) == 1


async def test_a_fallback_sets_the_condition_once_and_is_remembered(emulator, operator) -> None:
    await created(emulator, {**ASCEND_SPEC, "replicas": 1})
    reason = "graph capture failed: aclgraph capture out of memory"
    add_pod(emulator, 0, state(RuntimePhase.READY, mode=GraphMode.PIECEWISE, rung=3, fallbacks=1,
                               fallback_reason=reason, fallback_deterministic=True))

    fallback = await wait_for(lambda: condition(emulator, "GraphModeFallback").get("status") == "True"
                              and condition(emulator, "GraphModeFallback"), what="GraphModeFallback")
    assert fallback["reason"] == "FellBack"
    assert fallback["message"] == f"qwen-0 runs PIECEWISE instead of FULL_AND_PIECEWISE: {reason}"
    assert status(emulator)["graph"]["rememberedMode"] == "PIECEWISE"
    assert status(emulator)["graph"]["rememberedReason"] == f"pod qwen-0: {reason}"
    assert status(emulator)["graph"]["fallbacks"] == 1
    # New pods start at the remembered mode: the engine config carries it.
    await wait_for(lambda: "startMode: PIECEWISE" in emulator.get(*CONFIGMAPS, NAMESPACE, "qwen-config")["data"][
        "engine-config.yaml"], what="startMode in the engine config")
    await settle(emulator, quiet=4 * RESYNC_S)
    assert len(events(emulator, "FellBack")) == 1


async def test_an_image_change_drops_the_remembered_mode(emulator, operator) -> None:
    await created(emulator, {**ASCEND_SPEC, "replicas": 1})
    add_pod(emulator, 0, state(RuntimePhase.READY, mode=GraphMode.PIECEWISE, rung=3, fallbacks=1,
                               fallback_reason="capture failed", fallback_deterministic=True))
    await wait_for(lambda: status(emulator).get("graph", {}).get("rememberedMode") == "PIECEWISE",
                   what="the remembered mode")
    remembered_for = status(emulator)["graph"]["rememberedFor"]

    await api(emulator, "PATCH", cr_path("qwen"), {"spec": {"image": "registry.local/runtime:2"}})
    # The old pod still reports its mode, but it runs the old image: nothing is remembered now.
    await wait_for(lambda: "rememberedMode" not in status(emulator).get("graph", {})
                   and status(emulator).get("observedGeneration") == 2, what="the mode to be dropped")
    assert status(emulator)["updatedReplicas"] == 0
    config = emulator.get(*CONFIGMAPS, NAMESPACE, "qwen-config")["data"]["engine-config.yaml"]
    assert "startMode" not in config and "image: registry.local/runtime:2" in config
    assert remembered_for != ""


async def test_pods_unschedulable_for_lack_of_npus_are_waiting_for_npu(emulator, operator) -> None:
    await created(emulator, {**ASCEND_SPEC, "replicas": 1})
    message = f"0/4 nodes are available: 4 Insufficient {NPU}. preemption: 0/4 nodes are available."
    add_pod(emulator, 0, None, scheduled=("Unschedulable", message))

    await wait_for(lambda: status(emulator).get("phase") == "WaitingForNPU", what="phase WaitingForNPU")
    assert message in condition(emulator, "Ready")["message"]
    assert condition(emulator, "Progressing")["status"] == "True"
    waiting = condition(emulator, "WaitingForNPU")
    assert (waiting["status"], waiting["reason"]) == ("True", "InsufficientNPU")
    # The resource and the count come from the pod's own request (npu.perReplica 1).
    assert waiting["message"] == (
        f"1 pod(s) cannot be scheduled: not enough free {NPU} (1 asked for in all); "
        f"qwen-0 asks for 1 {NPU}. Scheduler: {message}")
    await settle(emulator, quiet=4 * RESYNC_S)
    posted = events(emulator, "WaitingForNPU")
    assert len(posted) == 1 and posted[0]["type"] == "Warning" and NPU in posted[0]["message"]

    add_pod(emulator, 0, state(RuntimePhase.READY))  # scheduled after all: the condition clears
    await wait_for(lambda: condition(emulator, "WaitingForNPU").get("status") == "False", what="NPUs allocated")
    assert condition(emulator, "WaitingForNPU")["reason"] == "NPUsAllocated"


async def test_a_crash_looping_pod_is_failed(emulator, operator) -> None:
    await created(emulator, {**ASCEND_SPEC, "replicas": 1})
    add_pod(emulator, 0, None, ready=False, waiting="CrashLoopBackOff")

    await wait_for(lambda: status(emulator).get("phase") == "Failed", what="phase Failed")
    assert condition(emulator, "Degraded")["reason"] == "ReplicasFailed"
    assert "CrashLoopBackOff" in condition(emulator, "Degraded")["message"]


async def test_a_leak_is_reported_once(emulator, operator) -> None:
    await created(emulator, {**ASCEND_SPEC, "replicas": 1})
    add_pod(emulator, 0, state(RuntimePhase.READY, leak_suspected=True,
                               live_reasons=["host RSS grows 900 MB/h (limit 512)"]))

    leak = await wait_for(lambda: condition(emulator, "LeakSuspected").get("status") == "True"
                          and condition(emulator, "LeakSuspected"), what="LeakSuspected")
    assert leak["reason"] == "MemoryLeakSuspected"
    assert "host RSS grows 900 MB/h" in leak["message"]
    await settle(emulator, quiet=4 * RESYNC_S)
    assert len(events(emulator, "MemoryLeakSuspected")) == 1


async def test_an_unreadable_runtime_is_unknown_not_an_error(emulator, operator) -> None:
    await created(emulator, {**ASCEND_SPEC, "replicas": 1})
    add_pod(emulator, 0, None, ready=False)  # running, but nothing answers on the runtime port yet

    await wait_for(lambda: status(emulator).get("phase") == "Loading", what="phase Loading")
    assert status(emulator)["graph"]["replicas"] == [
        {"pod": "qwen-0", "ready": False, "fallbacks": 0, "image": status(emulator)["graph"]["replicas"][0]["image"]}]
    proxied = [r for r in emulator.request_log if r.url.path.endswith("/pods/qwen-0:8080/proxy/state")]
    assert proxied, "the operator did not ask the pod proxy"

    emulator.set_pod_state(NAMESPACE, "qwen-0", {"not": "a state", "phase": "Nonsense"})
    await settle(emulator)
    assert status(emulator)["phase"] == "Loading"  # a malformed answer is as unknown as none


def state_reads(emulator: RealisticEmulator, pod_name: str, since: int) -> int:
    return sum(1 for r in emulator.request_log[since:] if r.url.path.endswith(f"/pods/{pod_name}:8080/proxy/state"))


def count_status_computations(monkeypatch: Any) -> list[int]:
    """A list that grows by one each time a pass computes the status (a full pass)."""
    from ascend_operator.handlers import handle_reconcile

    computed: list[int] = []
    real = handle_reconcile.compute_status

    def counting(*args: Any, **kwargs: Any) -> Any:
        computed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(handle_reconcile, "compute_status", counting)
    return computed


async def test_a_resync_with_nothing_changed_computes_nothing_and_a_runtime_change_still_shows(
        emulator, operator, monkeypatch) -> None:
    computed = count_status_computations(monkeypatch)
    await created(emulator, {**ASCEND_SPEC, "replicas": 1})
    name = add_pod(emulator, 0, state(RuntimePhase.READY))
    await wait_for(lambda: status(emulator).get("phase") == "Ready", what="phase Ready")
    await settle(emulator, quiet=2 * RESYNC_S)
    computed.clear()
    mark = len(emulator.request_log)
    await wait_for(lambda: state_reads(emulator, name, mark) >= 3, what="resyncs reading the runtime")
    assert computed == []  # the passes were skipped: same objects, same runtime state

    emulator.set_pod_state(NAMESPACE, name, state(RuntimePhase.READY, leak_suspected=True,
                                                  live_reasons=["host RSS grows 900 MB/h (limit 512)"]))
    await wait_for(lambda: condition(emulator, "LeakSuspected").get("status") == "True", what="LeakSuspected")
    assert computed


async def test_a_childs_status_change_asks_a_settled_runtime_no_sooner(emulator, operator, monkeypatch) -> None:
    """The controller manager updates a Deployment's status (at 10,000 resources, thousands of
    them minutes after every resource was Ready): each update is a full pass, which writes nothing
    and so keeps the settled runtime's wait (podreads.Settled) instead of asking it each time."""
    computed = count_status_computations(monkeypatch)
    await created(emulator, {**ASCEND_SPEC, "replicas": 1})
    name = add_pod(emulator, 0, state(RuntimePhase.READY))
    await wait_for(lambda: status(emulator).get("phase") == "Ready", what="phase Ready")
    await settle(emulator, quiet=8 * RESYNC_S)  # the runtime's wait doubled to its cap (5 resyncs)
    mark = len(emulator.request_log)
    for update in range(8):
        computed.clear()
        deployment = emulator.get(*DEPLOYMENTS, NAMESPACE, "qwen")
        assert deployment is not None
        deployment.setdefault("status", {})["observedGeneration"] = 100 + update  # status alone
        emulator.put_object(*DEPLOYMENTS, deployment)
        await wait_for(lambda: bool(computed), what="a full pass after the Deployment's status changed")
    reads = state_reads(emulator, name, mark)
    assert reads <= 3, reads  # eight full passes in about 2 resyncs: asked only when its wait ran out
    assert status(emulator).get("phase") == "Ready"


async def test_an_unreadable_runtime_is_asked_less_often_until_its_pod_changes(emulator, operator) -> None:
    await created(emulator, {**ASCEND_SPEC, "replicas": 1})
    name = add_pod(emulator, 0, None, ready=False)  # running; nothing answers on the runtime port
    await wait_for(lambda: status(emulator).get("phase") == "Loading", what="phase Loading")
    mark = len(emulator.request_log)
    await asyncio.sleep(16 * RESYNC_S)  # a pass every RESYNC_S: the replica is still starting
    passes = sum(1 for r in emulator.request_log[mark:] if r.url.path == "/apis/")  # each refreshes discovery
    reads = state_reads(emulator, name, mark)
    assert passes >= 8 and reads <= 6, (passes, reads)  # retries after 1, 2, 4, 8... poll intervals

    add_pod(emulator, 0, state(RuntimePhase.READY))  # the pod changed (ready): its runtime is asked at once
    await wait_for(lambda: status(emulator).get("phase") == "Ready", what="phase Ready")


async def test_the_tuned_defaults_switch_reaches_the_pods_and_their_report_the_status(emulator, operator) -> None:
    await created(emulator, {**ASCEND_SPEC, "replicas": 1, "engine": {"tunedDefaults": False}})
    await wait_for(lambda: "tunedDefaults: false" in emulator.get(*CONFIGMAPS, NAMESPACE, "qwen-config")["data"][
        "engine-config.yaml"], what="tunedDefaults in the engine config")
    off = {"enabled": False, "reason": "engine.tunedDefaults is false"}
    add_pod(emulator, 0, state(RuntimePhase.READY, tuned_defaults=off))

    await wait_for(lambda: "tunedDefaults" in status(emulator), what="status.tunedDefaults")
    assert status(emulator)["tunedDefaults"] == {"pod": "qwen-0", "reason": "engine.tunedDefaults is false"}
    await settle(emulator)  # written once: the resyncs that read the same report write nothing

    source = "docs/source/tutorials/Qwen3-235B-A22B.md@v0.13.0"
    emulator.set_pod_state(NAMESPACE, "qwen-0", state(RuntimePhase.READY, tuned_defaults={
        "summary": "MoE, 128 experts, vllm-ascend 0.13.0",
        "applied": [{"kind": "env", "setting": "HCCL_BUFFSIZE=512", "source": source}],
        "skipped": [{"kind": "flag", "setting": "--async-scheduling", "source": source,
                     "skipped": "engine.extraArgs sets --async-scheduling"}]}))
    await wait_for(lambda: status(emulator).get("tunedDefaults", {}).get("skipped") == 1, what="the new report")
    assert status(emulator)["tunedDefaults"] == {"pod": "qwen-0", "summary": "MoE, 128 experts, vllm-ascend 0.13.0",
                                                  "applied": [f"HCCL_BUFFSIZE=512 ({source})"], "skipped": 1}
