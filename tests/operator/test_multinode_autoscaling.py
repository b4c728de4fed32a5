"""The real operator against the emulated API: multi-node replicas and autoscalers, by what the
cluster serves.

Covered: switching nodesPerReplica 1 -> 2 -> 1 replaces the Deployment with a LeaderWorkerSet and
back (the old workload pruned); a cluster without the LeaderWorkerSet API gets the
LeaderWorkerSetNotInstalled condition and one Event, no child of that resource is written, other
resources are reconciled as usual, and installing LWS later heals it; status groups / readyGroups
/ groupsBehind from LWS-labelled pods; autoscaling off -> on picks a ScaledObject where KEDA is
served, an HPA where only a custom metrics API is, and a KedaNotInstalled condition where KEDA is
asked for and missing; a provider switch prunes the other kind, a change patches the autoscaler,
off removes it; the AutoscalerOwnsReplicas Event comes once; a manual scale while autoscaling is
on gets a ManualScaleOverridden Event, a scale the autoscaler reports gets AutoscalerScaled; and
the writes per create, and ZERO writes for a resync or restart with LWS and autoscaling on.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ascend_operator.api import parse_spec
from ascend_operator.builders import BuildMeta, build_children
from ascend_operator.settings import OperatorSettings
from k8s_emulator import RealisticEmulator
from operator_harness import (
    CONFIGMAPS,
    DEPLOYMENTS,
    EVENTS,
    HPAS,
    LEADERWORKERSETS,
    NAMESPACE,
    PDBS,
    PODS,
    RESYNC_S,
    SCALED_OBJECTS,
    SERVICES,
    api,
    apply_resource,
    cr_path,
    get_resource,
    lws_pod,
    settle,
    wait_for,
)
from test_reconcile import operator_writes

MODEL = {"hostPath": {"path": "/models/ds"}, "servedName": "ds"}
ONE_NODE: dict[str, Any] = {"model": MODEL, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8}}
TWO_NODES: dict[str, Any] = {**ONE_NODE, "nodesPerReplica": 2,
                             "parallelism": {"tensor": 4, "data": 4, "expert": True}}
#: Back to one node: the merge patch removes what only the two-node spec had.
TO_ONE_NODE = {"spec": {"nodesPerReplica": 1, "parallelism": {"tensor": 8, "data": None, "expert": None}}}
AUTOSCALING = {"maxReplicas": 4}


def status(emulator: RealisticEmulator, name: str = "ds") -> dict[str, Any]:
    return (get_resource(emulator, name) or {}).get("status") or {}


def condition(emulator: RealisticEmulator, type_: str, name: str = "ds") -> dict[str, Any]:
    return next((c for c in status(emulator, name).get("conditions", []) if c["type"] == type_), {})


def events(emulator: RealisticEmulator, reason: str) -> list[dict[str, Any]]:
    return [e for e in emulator.list(*EVENTS, NAMESPACE) if e.get("reason") == reason]


def expected(spec: dict[str, Any], settings: OperatorSettings, generation: int, autoscaler: Any = None,
             name: str = "ds") -> dict[str, dict[str, Any]]:
    children = build_children(BuildMeta(name, NAMESPACE, generation), parse_spec(spec), settings,
                              autoscaler=autoscaler)
    # Keyed by kind; the runtime Service (the second Service) as "RuntimeService".
    return {("RuntimeService" if child is children.runtime_service else child["kind"]): child
            for child in children.objects()}


def body(obj: dict[str, Any] | None) -> dict[str, Any]:
    """What the builders decide: everything but server-set metadata and status."""
    assert obj is not None
    return {key: value for key, value in obj.items() if key not in ("metadata", "status")}


async def test_switching_nodes_per_replica_swaps_the_deployment_and_the_leaderworkerset(
        emulator, operator, operator_settings) -> None:
    emulator.serve("leaderworkerset")
    await apply_resource(emulator, "ds", ONE_NODE)
    await wait_for(lambda: emulator.get(*DEPLOYMENTS, NAMESPACE, "ds"), what="the Deployment")
    await settle(emulator)
    assert emulator.list(*LEADERWORKERSETS, NAMESPACE) == []

    await api(emulator, "PATCH", cr_path("ds"), {"spec": {"nodesPerReplica": 2, "parallelism": TWO_NODES["parallelism"]}})
    await wait_for(lambda: emulator.get(*LEADERWORKERSETS, NAMESPACE, "ds-lws")
                   and emulator.get(*DEPLOYMENTS, NAMESPACE, "ds") is None, what="LWS in, Deployment out")
    await settle(emulator)
    want = expected(TWO_NODES, operator_settings, 2)
    assert body(emulator.get(*LEADERWORKERSETS, NAMESPACE, "ds-lws")) == body(want["LeaderWorkerSet"])
    assert body(emulator.get(*SERVICES, NAMESPACE, "ds")) == body(want["Service"])  # now on the leaders
    assert "leaderworkerset.sigs.k8s.io/worker-index=0" in status(emulator)["selector"]
    assert (status(emulator)["groups"], status(emulator)["readyGroups"]) == (0, 0)

    await api(emulator, "PATCH", cr_path("ds"), TO_ONE_NODE)
    await wait_for(lambda: emulator.get(*DEPLOYMENTS, NAMESPACE, "ds")
                   and emulator.get(*LEADERWORKERSETS, NAMESPACE, "ds-lws") is None, what="Deployment back")
    await settle(emulator)
    assert body(emulator.get(*DEPLOYMENTS, NAMESPACE, "ds")) == body(expected(ONE_NODE, operator_settings, 3)["Deployment"])
    assert "groups" not in status(emulator) and "groupsBehind" not in status(emulator)


async def test_without_the_lws_api_a_multinode_resource_gets_a_condition_and_nothing_is_written(
        emulator, operator) -> None:
    await apply_resource(emulator, "ds", TWO_NODES)
    await apply_resource(emulator, "small", ONE_NODE)
    missing = await wait_for(lambda: condition(emulator, "Progressing").get("reason") == "LeaderWorkerSetNotInstalled"
                             and condition(emulator, "Progressing"), what="LeaderWorkerSetNotInstalled")
    await wait_for(lambda: emulator.get(*PDBS, NAMESPACE, "small"), what="the other resource's children")
    await settle(emulator, quiet=4 * RESYNC_S)

    assert missing["status"] == "False"
    assert "leaderworkerset.x-k8s.io/v1" in missing["message"] and "install LeaderWorkerSet" in missing["message"]
    for api_version, plural in (CONFIGMAPS, DEPLOYMENTS, SERVICES, PDBS):
        assert [o["metadata"]["name"] for o in emulator.list(api_version, plural, NAMESPACE)
                if o["metadata"]["labels"].get("llm.ascend.dev/deployment") == "ds"] == []
    posted = events(emulator, "LeaderWorkerSetNotInstalled")
    assert len(posted) == 1 and posted[0]["type"] == "Warning"
    assert condition(emulator, "Ready", "small")["status"] == "False"  # reconciled normally (no pods yet)
    assert not emulator.failures

    emulator.serve("leaderworkerset")  # someone installs LWS: the next discovery refresh heals it
    await wait_for(lambda: emulator.get(*LEADERWORKERSETS, NAMESPACE, "ds-lws"), what="the LWS after the install")
    await wait_for(lambda: condition(emulator, "Progressing").get("reason") != "LeaderWorkerSetNotInstalled",
                   what="the condition to clear")


async def test_group_status_names_the_worker_that_is_behind(emulator, operator) -> None:
    emulator.serve("leaderworkerset")
    await apply_resource(emulator, "ds", {**TWO_NODES, "replicas": 2})
    await wait_for(lambda: emulator.get(*LEADERWORKERSETS, NAMESPACE, "ds-lws"), what="the LWS")
    for group, worker, ready in ((0, 0, True), (0, 1, True), (1, 0, True), (1, 1, False)):
        emulator.put_object(*PODS, lws_pod("ds", group, worker, emulator, ready=ready))

    await wait_for(lambda: status(emulator).get("readyGroups") == 1 and status(emulator).get("groups") == 2,
                   what="2 groups, 1 ready")
    current = status(emulator)
    assert current["groupsBehind"] == [{"group": 1, "readyNodes": 1, "nodes": 2, "behind": [
        {"pod": "ds-lws-1-1", "workerIndex": 1, "phase": "Loading",
         "reason": "running; runtime state not readable yet"}]}]
    assert (current["phase"], current["replicas"], current["readyReplicas"]) == ("Degraded", 2, 1)
    assert [r["pod"] for r in current["graph"]["replicas"]] == ["ds-lws-0", "ds-lws-1"]  # one per group

    emulator.put_object(*PODS, lws_pod("ds", 1, 1, emulator, ready=True))
    await wait_for(lambda: status(emulator).get("readyGroups") == 2, what="both groups ready")
    assert status(emulator)["groupsBehind"] == []


async def test_autoscaling_on_switch_change_off(emulator, operator, operator_settings) -> None:
    emulator.serve("keda", "custom-metrics")
    await apply_resource(emulator, "ds", ONE_NODE)
    await wait_for(lambda: emulator.get(*DEPLOYMENTS, NAMESPACE, "ds"), what="the Deployment")
    await settle(emulator)
    assert "autoscaling" not in status(emulator) and condition(emulator, "Autoscaling") == {}

    # On, provider auto: KEDA is served, so a ScaledObject.
    await api(emulator, "PATCH", cr_path("ds"), {"spec": {"autoscaling": AUTOSCALING}})
    await wait_for(lambda: emulator.get(*SCALED_OBJECTS, NAMESPACE, "ds"), what="the ScaledObject")
    await settle(emulator)
    spec = {**ONE_NODE, "autoscaling": AUTOSCALING}
    assert body(emulator.get(*SCALED_OBJECTS, NAMESPACE, "ds")) == body(
        expected(spec, operator_settings, 2, "keda")["ScaledObject"])
    assert emulator.list(*HPAS, NAMESPACE) == []
    assert status(emulator)["autoscaling"] == {"provider": "ScaledObject", "name": "ds", "minReplicas": 1,
                                               "maxReplicas": 4, "specReplicas": 1}
    owns = condition(emulator, "Autoscaling")
    assert (owns["status"], owns["reason"]) == ("True", "KedaScaledObject")
    assert "ScaledObject ds owns spec.replicas" in owns["message"]
    assert len(events(emulator, "AutoscalerOwnsReplicas")) == 1

    # Switch to an HPA: the ScaledObject goes.
    await api(emulator, "PATCH", cr_path("ds"), {"spec": {"autoscaling": {"provider": "hpa"}}})
    await wait_for(lambda: emulator.get(*HPAS, NAMESPACE, "ds")
                   and emulator.get(*SCALED_OBJECTS, NAMESPACE, "ds") is None, what="HPA in, ScaledObject out")
    await settle(emulator)
    assert condition(emulator, "Autoscaling")["reason"] == "HorizontalPodAutoscaler"
    assert len(events(emulator, "AutoscalerOwnsReplicas")) == 2  # one per transition: the switch is one

    # A change patches the HPA in place.
    await api(emulator, "PATCH", cr_path("ds"), {"spec": {"autoscaling": {"maxReplicas": 6}}})
    await wait_for(lambda: emulator.get(*HPAS, NAMESPACE, "ds")["spec"]["maxReplicas"] == 6, what="maxReplicas 6")
    await settle(emulator)
    assert status(emulator)["autoscaling"]["maxReplicas"] == 6

    # Off: the HPA goes, the condition says spec.replicas rules again.
    await api(emulator, "PATCH", cr_path("ds"), {"spec": {"autoscaling": {"enabled": False}}})
    await wait_for(lambda: emulator.get(*HPAS, NAMESPACE, "ds") is None, what="the HPA removed")
    await settle(emulator)
    off = condition(emulator, "Autoscaling")
    assert (off["status"], off["reason"]) == ("False", "AutoscalingDisabled")
    assert "autoscaling" not in status(emulator)
    assert len(events(emulator, "AutoscalingDisabled")) == 1


async def test_only_a_custom_metrics_api_gives_an_hpa(emulator, operator) -> None:
    emulator.serve("custom-metrics")
    await apply_resource(emulator, "ds", {**ONE_NODE, "autoscaling": AUTOSCALING})
    await wait_for(lambda: emulator.get(*HPAS, NAMESPACE, "ds"), what="the HPA")
    await settle(emulator)
    assert emulator.list(*SCALED_OBJECTS, NAMESPACE) == []  # not served: listed as nothing, no error
    assert condition(emulator, "Autoscaling")["reason"] == "HorizontalPodAutoscaler"


async def test_keda_asked_for_but_not_installed_is_a_condition_not_a_crash(emulator, operator) -> None:
    await apply_resource(emulator, "ds", {**ONE_NODE, "autoscaling": {**AUTOSCALING, "provider": "keda"}})
    missing = await wait_for(lambda: condition(emulator, "Autoscaling").get("reason") == "KedaNotInstalled"
                             and condition(emulator, "Autoscaling"), what="KedaNotInstalled")
    await settle(emulator, quiet=4 * RESYNC_S)
    assert missing["status"] == "False" and "install KEDA" in missing["message"]
    assert emulator.list(*HPAS, NAMESPACE) == []
    assert emulator.get(*DEPLOYMENTS, NAMESPACE, "ds") is not None  # the rest is reconciled
    assert status(emulator)["autoscaling"] == {"minReplicas": 1, "maxReplicas": 4, "specReplicas": 1}
    assert len(events(emulator, "KedaNotInstalled")) == 1

    emulator.serve("keda")
    await wait_for(lambda: emulator.get(*SCALED_OBJECTS, NAMESPACE, "ds"), what="the ScaledObject after the install")


def set_hpa_status(emulator: RealisticEmulator, name: str, **fields: Any) -> None:
    """Play the HPA controller: what it reports in the HPA's status."""
    hpa = emulator.get(*HPAS, NAMESPACE, name)
    assert hpa is not None
    hpa["status"] = {"currentReplicas": 1, "desiredReplicas": 1, **fields}
    emulator.put_object(*HPAS, hpa)


async def test_a_manual_scale_while_autoscaling_gets_an_event_saying_why_it_will_not_stick(
        emulator, operator) -> None:
    emulator.serve("custom-metrics")
    await apply_resource(emulator, "ds", {**ONE_NODE, "autoscaling": AUTOSCALING})
    await wait_for(lambda: emulator.get(*HPAS, NAMESPACE, "ds"), what="the HPA")
    set_hpa_status(emulator, "ds", lastScaleTime="2026-12-01T10:00:00Z")
    await wait_for(lambda: status(emulator).get("autoscaling", {}).get("desiredReplicas") == 1, what="HPA status")
    assert status(emulator)["autoscaling"]["lastScaleTime"] == "2026-12-01T10:00:00Z"

    # kubectl scale (the emulator has no scale subresource; the effect on spec.replicas is the same).
    await api(emulator, "PATCH", cr_path("ds"), {"spec": {"replicas": 3}})
    overridden = await wait_for(lambda: events(emulator, "ManualScaleOverridden"), what="ManualScaleOverridden")
    assert overridden[0]["type"] == "Warning"
    assert "spec.replicas changed from 1 to 3" in overridden[0]["message"]
    assert "HorizontalPodAutoscaler ds owns the replica count and sets it back to 1" in overridden[0]["message"]

    # The autoscaler scaling: it reports the new count as desired, then writes it.
    set_hpa_status(emulator, "ds", desiredReplicas=2, currentReplicas=3)
    await wait_for(lambda: status(emulator).get("autoscaling", {}).get("desiredReplicas") == 2, what="desired 2")
    await api(emulator, "PATCH", cr_path("ds"), {"spec": {"replicas": 2}})
    scaled = await wait_for(lambda: events(emulator, "AutoscalerScaled"), what="AutoscalerScaled")
    assert scaled[0]["type"] == "Normal"
    assert scaled[0]["message"] == "HorizontalPodAutoscaler ds scaled spec.replicas from 3 to 2 (3 running before)"
    await settle(emulator, quiet=4 * RESYNC_S)
    assert len(events(emulator, "ManualScaleOverridden")) == 1 and len(events(emulator, "AutoscalerScaled")) == 1


async def test_writes_per_create_and_zero_writes_per_noop_resync_with_lws_and_autoscaling(
        emulator, operator) -> None:
    emulator.serve("leaderworkerset", "keda", "custom-metrics")
    await apply_resource(emulator, "ds", {**TWO_NODES, "autoscaling": AUTOSCALING})
    await wait_for(lambda: emulator.get(*SCALED_OBJECTS, NAMESPACE, "ds"), what="the ScaledObject")
    await settle(emulator)

    # Writes per create: one server-side apply
    # per child, one status patch, and the AutoscalerOwnsReplicas Event.
    assert operator_writes(emulator) == Counter({
        "PATCH configmaps": 1, "PATCH leaderworkersets": 1, "PATCH services": 2,
        "PATCH poddisruptionbudgets": 1, "PATCH scaledobjects": 1,
        "PATCH ascendllmdeployments/status": 1, "POST events": 1,
    })
    mark = len(emulator.request_log)
    await settle(emulator, quiet=6 * RESYNC_S)  # several resync passes
    await operator.restart()  # and a resume
    await settle(emulator, quiet=4 * RESYNC_S)

    assert operator_writes(emulator, since=mark) == Counter()
    reads = Counter(r.url.path for r in emulator.request_log[mark:] if r.method.value == "GET")
    assert reads["/apis/"] >= 2  # discovery was refreshed on the resyncs (TTL = one resync here)
    # ... and those passes compared the children the watches show: no child was read.
    assert reads[f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NAMESPACE}/leaderworkersets/ds-lws"] == 0
