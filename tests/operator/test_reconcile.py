"""The real operator against the emulated API: children, updates, deletion, invalid specs, writes.

Covered: a create makes the ConfigMap, Deployment, Service and PDB with owner references and
spec-hashes, and exactly the writes measured below; an update patches only the children whose
manifest changed; deleting the resource lets the garbage collector take the children; an invalid
spec (written past the schema, which the emulator does not enforce) gets an InvalidSpec condition
and Event and no child, and a fix recovers; a resync or a restart with nothing changed sends zero
writes, and passes with nothing changed build no child while an edited child is still repaired; drift (a deleted child) is repaired; one bad object (invalid spec, name conflict) does not
stop the reconcile of the others.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ascend_operator.api import API_VERSION, KIND, parse_spec
from ascend_operator.builders import SPEC_HASH_ANNOTATION, BuildMeta, build_children
from ascend_operator.settings import OperatorSettings
from k8s_emulator import RealisticEmulator, parse_api_path
from operator_harness import (
    CONFIGMAPS,
    DEPLOYMENTS,
    EVENTS,
    NAMESPACE,
    PDBS,
    RESYNC_S,
    SERVICES,
    api,
    apply_resource,
    cr_path,
    get_resource,
    settle,
    wait_for,
)

CPU_SPEC: dict[str, Any] = {
    "platform": "CPU",
    "model": {"hostPath": {"path": "/models/tiny"}, "servedName": "tiny"},
    "engine": {"maxModelLen": 512},
}
CHILDREN = {"ConfigMap": CONFIGMAPS, "Deployment": DEPLOYMENTS, "Service": SERVICES, "RuntimeService": SERVICES,
            "PodDisruptionBudget": PDBS}


def operator_writes(emulator: RealisticEmulator, since: int = 0) -> Counter[str]:
    """Writes the operator sent (not the test's own), as ``"METHOD plural[/sub]"`` counts."""

    counts: Counter[str] = Counter()
    for request in emulator.request_log[since:]:
        if request.method.value not in ("POST", "PUT", "PATCH", "DELETE"):
            continue
        if request.headers.get("User-Agent", "").startswith("kmock/"):
            continue  # the test's own requests (kubectl's role)
        parsed = parse_api_path(request.url.path)
        assert parsed is not None
        target = parsed.plural if not parsed.subresource else f"{parsed.plural}/{parsed.subresource}"
        counts[f"{request.method.value} {target}"] += 1
    return counts


def expected_children(name: str, spec: dict[str, Any], settings: OperatorSettings) -> dict[str, dict[str, Any]]:
    children = build_children(BuildMeta(name, NAMESPACE, 1), parse_spec(spec), settings)
    # Keyed by kind; the runtime Service (the second Service) as "RuntimeService".
    return {("RuntimeService" if child is children.runtime_service else child["kind"]): child
            for child in children.objects()}


def events(emulator: RealisticEmulator, reason: str) -> list[dict[str, Any]]:
    return [event for event in emulator.list(*EVENTS, NAMESPACE) if event.get("reason") == reason]


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item["type"] == type_:
            return item
    return {}


async def test_create_makes_every_child_owned_and_hashed(emulator, operator, operator_settings) -> None:
    created = await apply_resource(emulator, "tiny", CPU_SPEC)
    await wait_for(lambda: (get_resource(emulator, "tiny") or {}).get("status"), what="a status")
    await settle(emulator)

    expected = expected_children("tiny", CPU_SPEC, operator_settings)
    owner = {"apiVersion": API_VERSION, "kind": KIND, "name": "tiny", "uid": created["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    for kind, (api_version, plural) in CHILDREN.items():
        live = emulator.get(api_version, plural, NAMESPACE, expected[kind]["metadata"]["name"])
        assert live is not None, f"{kind} was not created"
        assert live["metadata"]["ownerReferences"] == [owner]
        assert live["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == (
            expected[kind]["metadata"]["annotations"][SPEC_HASH_ANNOTATION])
        # What the builders produced is what is stored (server-set metadata aside).
        assert {k: v for k, v in live.items() if k not in ("metadata", "status")} == {
            k: v for k, v in expected[kind].items() if k != "metadata"}

    # Writes per create: one server-side apply per child and one status patch; nothing of kopf's
    # (no finalizer, no diff-base annotation: the handlers are event handlers).
    assert operator_writes(emulator) == Counter({
        "PATCH configmaps": 1, "PATCH deployments": 1, "PATCH services": 2, "PATCH poddisruptionbudgets": 1,
        "PATCH ascendllmdeployments/status": 1,
    })
    status = get_resource(emulator, "tiny")["status"]
    assert status["observedGeneration"] == 1
    assert status["phase"] == "Pending"
    assert status["endpoint"] == "http://tiny.llm.svc.cluster.local:8000/v1"


async def test_resync_and_restart_with_nothing_changed_send_zero_writes(emulator, operator) -> None:
    await apply_resource(emulator, "tiny", CPU_SPEC)
    await wait_for(lambda: (get_resource(emulator, "tiny") or {}).get("status"), what="a status")
    await settle(emulator)
    mark = len(emulator.request_log)

    def reads() -> Counter[str]:
        return Counter(r.url.path for r in emulator.request_log[mark:] if r.method.value == "GET")

    await operator.restart()  # the resume handler runs for the existing object
    # The resume and the resyncs ran (each refreshed discovery: its TTL is one resync here); on a
    # loaded machine the restart alone can take longer than a fixed quiet window, so wait for them.
    await wait_for(lambda: reads()["/apis/"] >= 2, what="a resume and a resync")
    await settle(emulator, quiet=4 * RESYNC_S)  # and several more resync passes

    assert operator_writes(emulator, since=mark) == Counter()
    # ... and compared the children the watches show: none was read.
    assert reads()[f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/tiny"] == 0


async def test_passes_with_nothing_changed_build_nothing_and_a_child_edit_is_still_repaired(
        emulator, operator, monkeypatch) -> None:
    from ascend_operator.handlers import handle_reconcile

    builds: list[str] = []
    real_build = handle_reconcile.build_children

    def counting(meta: BuildMeta, *args: Any, **kwargs: Any) -> Any:
        builds.append(meta.name)
        return real_build(meta, *args, **kwargs)

    monkeypatch.setattr(handle_reconcile, "build_children", counting)
    await apply_resource(emulator, "tiny", CPU_SPEC)
    await wait_for(lambda: (get_resource(emulator, "tiny") or {}).get("status"), what="a status")
    await settle(emulator, quiet=2 * RESYNC_S)
    builds.clear()
    mark = len(emulator.request_log)
    # Resync passes (each refreshes discovery: its TTL is one resync here); the memo says nothing changed.
    await wait_for(lambda: Counter(r.url.path for r in emulator.request_log[mark:]
                                   if r.method.value == "GET")["/apis/"] >= 3, what="resync passes")
    assert builds == []

    name = "tiny-config"
    garbage = {**emulator.get(*CONFIGMAPS, NAMESPACE, name), "data": {"engine-config.yaml": "garbage"}}
    await api(emulator, "PUT", f"/api/v1/namespaces/{NAMESPACE}/configmaps/{name}", garbage)
    await wait_for(lambda: emulator.get(*CONFIGMAPS, NAMESPACE, name)["data"]["engine-config.yaml"] != "garbage",
                   what="the engine config to be repaired")
    assert builds  # the edit made the next pass a full one


async def test_update_patches_only_the_changed_children(emulator, operator, operator_settings) -> None:
    await apply_resource(emulator, "tiny", CPU_SPEC)
    await wait_for(lambda: emulator.get(*PDBS, NAMESPACE, "tiny"), what="the children")
    await settle(emulator)

    mark = len(emulator.request_log)
    await api(emulator, "PATCH", cr_path("tiny"), {"spec": {"replicas": 3}})
    await wait_for(lambda: emulator.get(*DEPLOYMENTS, NAMESPACE, "tiny")["spec"]["replicas"] == 3,
                   what="replicas 3")
    await settle(emulator)
    writes = operator_writes(emulator, since=mark)
    assert writes["PATCH deployments"] == 1
    assert writes["PATCH configmaps"] == writes["PATCH services"] == writes["PATCH poddisruptionbudgets"] == 0
    assert get_resource(emulator, "tiny")["status"]["observedGeneration"] == 2

    mark = len(emulator.request_log)
    await api(emulator, "PATCH", cr_path("tiny"), {"spec": {"engine": {"maxModelLen": 1024}}})
    await wait_for(lambda: "maxModelLen: 1024" in emulator.get(*CONFIGMAPS, NAMESPACE, "tiny-config")["data"][
        "engine-config.yaml"], what="the new engine config")
    await settle(emulator)
    writes = operator_writes(emulator, since=mark)
    # The engine config changed, and the pod template carries its hash (pods must restart).
    assert writes["PATCH configmaps"] == writes["PATCH deployments"] == 1
    assert writes["PATCH services"] == writes["PATCH poddisruptionbudgets"] == 0
    updated = {**CPU_SPEC, "replicas": 3, "engine": {"maxModelLen": 1024}}
    expected = expected_children("tiny", updated, operator_settings)["Deployment"]
    assert emulator.get(*DEPLOYMENTS, NAMESPACE, "tiny")["spec"] == expected["spec"]


async def test_deleting_the_resource_garbage_collects_its_children(emulator, operator) -> None:
    await apply_resource(emulator, "tiny", CPU_SPEC)
    await wait_for(lambda: emulator.get(*PDBS, NAMESPACE, "tiny"), what="the children")
    await settle(emulator)

    await api(emulator, "DELETE", cr_path("tiny"))
    # kopf stops the resync daemon, drops its finalizer, and the garbage collector cascades.
    await wait_for(lambda: get_resource(emulator, "tiny") is None, what="the resource to go")
    for api_version, plural in CHILDREN.values():
        assert emulator.list(api_version, plural, NAMESPACE) == []


async def test_a_deleted_child_is_recreated_by_the_resync(emulator, operator) -> None:
    await apply_resource(emulator, "tiny", CPU_SPEC)
    await wait_for(lambda: emulator.get(*SERVICES, NAMESPACE, "tiny"), what="the service")
    await settle(emulator)

    await api(emulator, "DELETE", f"/api/v1/namespaces/{NAMESPACE}/services/tiny")
    await wait_for(lambda: emulator.get(*SERVICES, NAMESPACE, "tiny"), what="the service to come back")


async def test_an_invalid_spec_gets_a_condition_and_an_event_and_no_children(emulator, operator) -> None:
    # The emulator has no schema, so this reaches the operator as a real server's schema would not.
    bad = {**CPU_SPEC, "platform": "Ascend", "parallelism": {"tensor": 2}, "npu": {"perReplica": 1}}
    await apply_resource(emulator, "broken", bad)
    invalid = await wait_for(lambda: condition(get_resource(emulator, "broken"), "InvalidSpec"), what="InvalidSpec")
    await settle(emulator)

    assert invalid["status"] == "True"
    assert "spec.npu.perReplica" in invalid["message"]
    assert condition(get_resource(emulator, "broken"), "Ready")["status"] == "False"
    posted = events(emulator, "InvalidSpec")
    assert len(posted) == 1 and "spec.npu.perReplica" in posted[0]["message"]
    assert posted[0]["type"] == "Warning"
    writes = operator_writes(emulator)
    assert not [w for w in writes if w.split()[1] in ("configmaps", "deployments", "services", "poddisruptionbudgets")]
    for api_version, plural in CHILDREN.values():
        assert emulator.list(api_version, plural, NAMESPACE) == []
    # The resyncs since did not repeat the Event (it is posted on the transition only).
    assert len(events(emulator, "InvalidSpec")) == 1

    await api(emulator, "PATCH", cr_path("broken"), {"spec": {"npu": {"perReplica": 2}}})
    await wait_for(lambda: emulator.get(*DEPLOYMENTS, NAMESPACE, "broken"), what="children after the fix")
    await wait_for(lambda: condition(get_resource(emulator, "broken"), "InvalidSpec").get("status") == "False",
                   what="InvalidSpec False")


async def test_one_bad_object_does_not_stop_the_others(emulator, operator) -> None:
    # A spec that is not even a mapping, and a resource whose ConfigMap name is taken by someone else.
    await api(emulator, "POST", cr_path(), {"apiVersion": API_VERSION, "kind": KIND,
                                           "metadata": {"name": "garbage", "namespace": NAMESPACE}, "spec": 42},
              "application/json")
    emulator.put_object("v1", "configmaps", {"metadata": {"name": "taken-config", "namespace": NAMESPACE},
                                             "data": {"mine": "yes"}})
    await apply_resource(emulator, "taken", CPU_SPEC)
    await apply_resource(emulator, "good", CPU_SPEC)

    await wait_for(lambda: emulator.get(*PDBS, NAMESPACE, "good"), what="the good resource's children")
    await wait_for(lambda: condition(get_resource(emulator, "garbage"), "InvalidSpec").get("status") == "True",
                   what="InvalidSpec on the garbage")
    conflict = await wait_for(
        lambda: condition(get_resource(emulator, "taken"), "Progressing").get("reason") == "ChildConflict"
        and condition(get_resource(emulator, "taken"), "Progressing"), what="ChildConflict")
    assert "taken-config" in conflict["message"] and "not owned" in conflict["message"]
    assert emulator.get(*CONFIGMAPS, NAMESPACE, "taken-config")["data"] == {"mine": "yes"}  # untouched
    assert emulator.get(*DEPLOYMENTS, NAMESPACE, "taken") is not None  # the rest is still made
    await settle(emulator)
    assert len(events(emulator, "ChildConflict")) == 1


async def test_zero_replicas_is_stopped(emulator, operator) -> None:
    await apply_resource(emulator, "idle", {**CPU_SPEC, "replicas": 0})
    status = await wait_for(lambda: (get_resource(emulator, "idle") or {}).get("status"), what="a status")
    assert status["phase"] == "Stopped"
    assert condition(get_resource(emulator, "idle"), "Ready")["status"] == "False"
