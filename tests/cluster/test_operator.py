"""The operator on a real API server (``../shared/k8s``, or any cluster given by kubeconfig).

Each test has its own namespace; one operator process serves them all (see conftest.py). kwok
plays the kubelet: pods that the scheduler binds become Running and Ready at once; nothing runs
in them, so runtime ``/state`` reads fail and the status comes from the pods and the workload.

Covered (issue: the operator on a real API server): every example reconciles to schema-valid
children that ``ascend-llm render`` predicts field by field; a create costs one apply per child
and an idle resync or a restart writes nothing (the server's own request counts); every kind of
hand edit of a child is repaired within seconds; a runtime Service with a cluster IP (as 0.1 made
it) is made again headless; a child the server refuses and a workload that
cannot make pods reach the status, an Event and backoff; deletes never wait for an operator and
an operator 0.1 finalizer is removed; status follows pods within seconds and is compared with
the server's; kill -9 mid-reconcile leaves no duplicate or orphan; defaults the server sets
(replicas) and host requests of NPU pods.
"""

from __future__ import annotations

import copy
import os
import signal
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import yaml
from ascend_operator.api import GROUP, PLURAL, VERSION
from ascend_operator.builders.common import RESOURCE_LABEL
from ascend_operator.drift import find_drift
from ascend_operator.names import label_value
from cluster_harness import (DISCOVERY_TTL_S, OPERATOR_SETTINGS, WAIT_S, OperatorUnderTest, operator_writes, raw_get,
                      writes)
from install_harness import ROOT, wait_for
from test_routing_on_server import install_routing_crds

pytestmark = pytest.mark.cluster

EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.yaml"))
#: A valid NPU spec that needs nothing outside the cluster (a hub model, one 910B NPU).
SMALL_NPU_SPEC: dict[str, Any] = {
    "model": {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}, "sizeGiB": 1},
    "npu": {"perReplica": 1},
    "parallelism": {"tensor": 1},
    "replicas": 2,
}


def _clients(api: Any) -> tuple[Any, Any, Any, Any]:
    import kubernetes

    return (kubernetes.client.CustomObjectsApi(api), kubernetes.client.AppsV1Api(api),
            kubernetes.client.CoreV1Api(api), kubernetes.client.PolicyV1Api(api))


def create(api: Any, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    custom = _clients(api)[0]
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AscendLLMDeployment",
            "metadata": {"name": name, "namespace": namespace}, "spec": copy.deepcopy(spec)}
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def get(api: Any, namespace: str, name: str) -> dict[str, Any]:
    return _clients(api)[0].get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def condition(resource: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (resource.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def settled(api: Any, namespace: str, name: str, phase: str = "Ready") -> dict[str, Any]:
    last: dict[str, Any] = {}

    def check() -> dict[str, Any] | None:
        resource = last["resource"] = get(api, namespace, name)
        status = resource.get("status") or {}
        ok = (status.get("observedGeneration") == resource["metadata"]["generation"]
              and status.get("phase") == phase)
        return resource if ok else None

    try:
        return wait_for(f"{namespace}/{name} to reach {phase}", check)
    except pytest.fail.Exception as failed:  # say where it stopped: its status, its pods, the Events
        core = _clients(api)[2]
        pods = [(pod.metadata.name, pod.spec.node_name, pod.status.phase)
                for pod in core.list_namespaced_pod(namespace).items]
        events = [f"{event.involved_object.kind}/{event.involved_object.name} {event.reason}: {event.message}"
                  for event in core.list_namespaced_event(namespace).items]
        pytest.fail(f"{failed}\ngeneration {last['resource']['metadata']['generation']}, status "
                    f"{last['resource'].get('status')}\npods {pods}\nevents:\n" + "\n".join(events))


def raw(api: Any, path: str) -> dict[str, Any] | None:
    """GET any API path as JSON (None on 404)."""

    import json

    from kubernetes.client.exceptions import ApiException

    try:
        return json.loads(raw_get(api, path))
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def live_of(api: Any, child: dict[str, Any]) -> dict[str, Any] | None:
    group_version = child["apiVersion"]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    plural = {"ConfigMap": "configmaps", "Service": "services", "Deployment": "deployments",
              "PodDisruptionBudget": "poddisruptionbudgets", "LeaderWorkerSet": "leaderworkersets",
              "HorizontalPodAutoscaler": "horizontalpodautoscalers", "ScaledObject": "scaledobjects",
              "PersistentVolumeClaim": "persistentvolumeclaims", "Job": "jobs",
              "ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings",
              "InferencePool": "inferencepools", "HTTPRoute": "httproutes"}[child["kind"]]
    meta = child["metadata"]
    return raw(api, f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}")


def served(api: Any) -> frozenset[str]:
    """The group/versions the server serves, as ``ascend-llm render --api-versions`` takes them."""

    groups = raw(api, "/apis") or {}
    return frozenset({"v1", *(v["groupVersion"] for g in groups.get("groups", []) for v in g["versions"])})


def rendered(api: Any, example: str, namespace: str) -> list[dict[str, Any]]:
    from ascend_operator.cli import render_children

    resource = yaml.safe_load((ROOT / "examples" / example).read_text(encoding="utf-8"))
    with mock.patch.dict(os.environ, OPERATOR_SETTINGS):  # the settings of the operator under test
        return render_children(resource, namespace, served=served(api))


def wait_children_match(api: Any, children: list[dict[str, Any]]) -> None:
    problems: list[str] = []

    def matches() -> bool:
        problems.clear()
        for child in children:
            live = live_of(api, child)
            name = f"{child['kind']} {child['metadata']['name']}"
            if live is None:
                problems.append(f"{name} missing")
            elif drift := find_drift(child, live):
                problems.append(f"{name} differs at {drift}")
        return not problems

    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not matches():
        time.sleep(0.2)
    assert not problems, problems


def wait_quiet(api: Any, seconds: float = 3.0) -> None:
    """Wait until no namespace is terminating (an earlier test's: deleting its pods makes the
    operator write their resources' status) and the operator has not written for ``seconds``."""

    import kubernetes

    deadline = time.monotonic() + WAIT_QUIET_MAX_S
    core = kubernetes.client.CoreV1Api(api)
    while any(ns.status.phase == "Terminating" for ns in core.list_namespace().items):
        if time.monotonic() > deadline:
            pytest.fail("a namespace kept terminating")
        time.sleep(0.5)
    last = writes(api)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = writes(api)
        if operator_writes(last, now):
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= seconds:
            return
    pytest.fail("the operator kept writing")


WAIT_QUIET_MAX_S = 60.0


#: Valid for the CRD and the operator (affinity is passed through verbatim), refused by the API
#: server in the Deployment's pod template: operator In needs values.
REFUSED_BY_THE_SERVER: dict[str, Any] = {**SMALL_NPU_SPEC, "npu": {**SMALL_NPU_SPEC["npu"], "affinity": {
    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "accelerator", "operator": "In"}]}]}}}}}
SMALL_CPU_SPEC: dict[str, Any] = {
    "platform": "CPU",
    "model": {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}, "sizeGiB": 1},
    "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}},
}


# ----------------------------------------------------------------------------- examples


@pytest.fixture
def example_prerequisites(api: Any, namespace: str) -> Iterator[None]:
    """What the examples expect of a cluster beyond the CRDs of conftest: the routing CRDs
    (Inference Extension, Gateway API), a PersistentVolume of each created model cache's
    StorageClass (this control plane has no provisioner; the fetch Job's pod is scheduled only
    once its claim is bound) and the token Secrets the examples name."""

    core = _clients(api)[2]
    install_routing_crds(api)
    volumes: list[str] = []
    secrets: dict[str, dict[str, str]] = {}
    try:
        for example in EXAMPLES:
            model = yaml.safe_load((ROOT / "examples" / example).read_text(encoding="utf-8"))["spec"]["model"]
            if create_claim := (model.get("cache") or {}).get("create"):
                name = f"example-{uuid.uuid4().hex[:8]}"
                core.create_persistent_volume({"metadata": {"name": name}, "spec": {
                    "capacity": {"storage": create_claim["size"]},
                    "accessModes": [create_claim.get("accessMode", "ReadWriteMany")],
                    "storageClassName": create_claim["storageClassName"],
                    "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{name}"}}})
                volumes.append(name)
            if token := model.get("tokenSecretRef"):
                secrets.setdefault(token["name"], {})[token["key"]] = "hf_example"
        for name, data in secrets.items():
            core.create_namespaced_secret(namespace, {"metadata": {"name": name}, "stringData": data})
        time.sleep(DISCOVERY_TTL_S + 1)  # the operator's discovery sees the routing APIs
        yield
    finally:
        for name in volumes:
            core.delete_persistent_volume(name)


def test_every_example_reconciles_as_render_predicts_and_an_idle_operator_writes_nothing(
        api: Any, namespace: str, operator: OperatorUnderTest, example_prerequisites: None) -> None:
    """All examples at once, with the routing APIs served: every one accepted by the server,
    children as predicted (a model cache's claim and fetch Job, then its workload once the Job
    completed; the routing objects), status written, then no write at all."""

    custom = _clients(api)[0]
    assert {"inference.networking.k8s.io/v1", "gateway.networking.k8s.io/v1"} <= served(api)
    predicted: dict[str, list[dict[str, Any]]] = {}
    for example in EXAMPLES:
        resource = yaml.safe_load((ROOT / "examples" / example).read_text(encoding="utf-8"))
        resource["metadata"]["namespace"] = namespace
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, resource)
        predicted[resource["metadata"]["name"]] = rendered(api, example, namespace)
    kinds = {child["kind"] for children in predicted.values() for child in children}
    # Every feature's children are among those compared (the examples cover every feature).
    assert {"PersistentVolumeClaim", "Job", "Deployment", "LeaderWorkerSet", "ScaledObject",
            "InferencePool", "HTTPRoute", "Role"} <= kinds
    for name, children in predicted.items():
        wait_children_match(api, children)
        wait_for(f"{name}'s status", lambda name=name: (get(api, namespace, name).get("status") or {})
                 .get("observedGeneration") == 1)
    wait_quiet(api)
    before, log_mark = writes(api), len(operator.output())
    time.sleep(8)  # several watch events (controllers update the children's status) and polls
    assert operator_writes(before, writes(api)) == {}, operator.output()[log_mark:][-4000:]


def test_a_create_applies_each_child_once_and_a_restart_writes_nothing(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    wait_quiet(api)
    before = writes(api)
    create(api, namespace, "once", SMALL_NPU_SPEC)
    settled(api, namespace, "once")
    wait_quiet(api)
    counted = operator_writes(before, writes(api))
    applies = {key: value for key, value in counted.items() if key[0] == "APPLY"}
    # ConfigMap, the two Services (the API's, the runtime's), Deployment, PodDisruptionBudget:
    # one server-side apply each.
    assert applies == {("APPLY", "configmaps", ""): 1, ("APPLY", "services", ""): 2,
                       ("APPLY", "deployments", ""): 1, ("APPLY", "poddisruptionbudgets", ""): 1}
    status_patches = counted.get(("PATCH", "ascendllmdeployments", "status"), 0)
    # One patch per status the operator saw on the way (no pods, pods pending, 1/2, 2/2 ready,
    # as kwok schedules and readies them); each is a change, and nothing is patched twice.
    assert 1 <= status_patches <= 6
    assert set(counted) - {("PATCH", "ascendllmdeployments", "status"), ("POST", "ascendllmdeployments", "")} \
        == set(applies)

    operator.stop()
    before = writes(api)
    operator.start()
    time.sleep(5)  # the initial listing reconciles every resource
    assert operator_writes(before, writes(api)) == {}


# ----------------------------------------------------------------------------- drift


def test_hand_edits_of_children_are_repaired_within_seconds(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    custom, apps, core, _ = _clients(api)
    create(api, namespace, "drift", SMALL_NPU_SPEC)
    settled(api, namespace, "drift")
    deployment = apps.read_namespaced_deployment("drift", namespace)
    selector = deployment.spec.selector.match_labels
    label_key = next(key for key in deployment.spec.template.metadata.labels if key not in selector)
    owned_label = deployment.spec.template.metadata.labels[label_key]
    config_name = "drift-config"
    config = core.read_namespaced_config_map(config_name, namespace)

    edits = {
        "a pod-template label": (
            lambda: apps.patch_namespaced_deployment(
                "drift", namespace, {"spec": {"template": {"metadata": {"labels": {label_key: "edited"}}}}}),
            lambda: apps.read_namespaced_deployment("drift", namespace).spec.template.metadata.labels[label_key]
            == owned_label),
        "kubectl scale of the Deployment": (
            lambda: apps.patch_namespaced_deployment_scale("drift", namespace, {"spec": {"replicas": 5}}),
            lambda: apps.read_namespaced_deployment("drift", namespace).spec.replicas == 2),
        "the Service's ports replaced": (
            lambda: core.patch_namespaced_service(
                "drift", namespace, [{"op": "replace", "path": "/spec/ports",
                                      "value": [{"name": "x", "port": 9999, "targetPort": 9999}]}]),
            lambda: any(p.port == 8000 for p in core.read_namespaced_service("drift", namespace).spec.ports)),
        "the engine config replaced by garbage": (
            lambda: core.replace_namespaced_config_map(config_name, namespace, {
                "metadata": {"name": config_name, "namespace": namespace,
                             "resourceVersion": core.read_namespaced_config_map(config_name, namespace)
                             .metadata.resource_version,
                             "labels": config.metadata.labels, "annotations": config.metadata.annotations,
                             "ownerReferences": [r.to_dict() for r in config.metadata.owner_references]},
                "data": {"engine-config.yaml": "garbage"}}),
            lambda: core.read_namespaced_config_map(config_name, namespace).data == config.data),
    }
    for what, (edit, repaired) in edits.items():
        edit()
        wait_for(f"{what} to be repaired", repaired, timeout_s=15)
    status = settled(api, namespace, "drift")["status"]
    assert status["ready"] == "2/2"
    wait_quiet(api)
    before = writes(api)
    time.sleep(5)
    assert operator_writes(before, writes(api)) == {}


def test_a_deleted_child_comes_back(api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    _, apps, core, policy = _clients(api)
    create(api, namespace, "gone", SMALL_NPU_SPEC)
    settled(api, namespace, "gone")
    core.delete_namespaced_service("gone", namespace)
    policy.delete_namespaced_pod_disruption_budget("gone", namespace)
    wait_for("the Service", lambda: core.list_namespaced_service(namespace, field_selector="metadata.name=gone").items,
             timeout_s=15)
    wait_for("the PDB", lambda: policy.list_namespaced_pod_disruption_budget(
        namespace, field_selector="metadata.name=gone").items, timeout_s=15)


def test_a_runtime_service_with_a_cluster_ip_is_made_again_headless(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    """An earlier operator gave ``<name>-runtime`` a cluster IP, which the server never lets
    change: the operator deletes it and makes it again, headless, instead of failing the apply."""

    from kubernetes.client.exceptions import ApiException

    core = _clients(api)[2]
    create(api, namespace, "oldsvc", SMALL_NPU_SPEC)
    settled(api, namespace, "oldsvc")
    live = api.sanitize_for_serialization(core.read_namespaced_service("oldsvc-runtime", namespace))
    assert live["spec"]["clusterIP"] == "None"
    meta = {key: live["metadata"][key] for key in ("name", "namespace", "labels", "annotations", "ownerReferences")}
    spec = {key: value for key, value in live["spec"].items() if key not in ("clusterIP", "clusterIPs")}
    old = None
    for _ in range(5):  # made in the operator's 0.5 s debounce after the delete, as 0.1 made it
        core.delete_namespaced_service("oldsvc-runtime", namespace)
        try:
            old = core.create_namespaced_service(namespace, {"metadata": meta, "spec": spec})
            break
        except ApiException as error:
            if error.status != 409:
                raise
            time.sleep(1)
    assert old is not None and old.spec.cluster_ip not in (None, "None")

    def headless_again() -> bool:
        try:
            now = core.read_namespaced_service("oldsvc-runtime", namespace)
        except ApiException as error:
            if error.status == 404:  # between the operator's delete and its create
                return False
            raise
        return now.metadata.uid != old.metadata.uid and now.spec.cluster_ip == "None"

    wait_for("the runtime Service to be made again, headless", headless_again, timeout_s=20)
    resource = settled(api, namespace, "oldsvc")
    assert condition(resource, "Progressing")["reason"] != "ChildRefused"


# ----------------------------------------------------------------------------- failures


def test_a_child_the_server_refuses_reaches_status_and_an_event(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    """An affinity the CRD passes through verbatim, which the API server's pod validation refuses
    (operator In without values)."""

    _, apps, core, _ = _clients(api)
    create(api, namespace, "refused", REFUSED_BY_THE_SERVER)
    resource = settled(api, namespace, "refused", phase="Failed")
    progressing = condition(resource, "Progressing")
    assert progressing["status"] == "False" and progressing["reason"] == "ChildRefused"
    assert "refused Deployment refused" in progressing["message"]
    assert "spec.template.spec.affinity" in progressing["message"] and "values" in progressing["message"]
    assert "HTTP 422" in progressing["message"]
    assert condition(resource, "Ready")["status"] == "False"
    events = wait_for("a Warning Event", lambda: [e for e in core.list_namespaced_event(namespace).items
                                                  if e.reason == "ChildRefused" and e.type == "Warning"])
    assert len(events) == 1 and "affinity" in events[0].message
    assert not apps.list_namespaced_deployment(namespace).items

    # The fix goes through: the next reconcile is the edit's own event, not a backoff wait.
    custom = _clients(api)[0]
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "refused",
                                          {"spec": {"npu": {"affinity": None}}})
    resource = settled(api, namespace, "refused")
    assert condition(resource, "Progressing")["reason"] != "ChildRefused"
    output = operator.output()
    assert "refused Deployment refused (HTTP 422)" in output


def test_a_workload_that_cannot_make_pods_says_why(api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    spec = copy.deepcopy(SMALL_NPU_SPEC)
    spec["npu"]["priorityClassName"] = "no-such-class"
    create(api, namespace, "nopc", spec)
    resource = settled(api, namespace, "nopc", phase="Failed")
    progressing = condition(resource, "Progressing")
    assert progressing["reason"] == "FailedCreate"
    assert "no PriorityClass with name no-such-class was found" in progressing["message"]
    assert "no-such-class" in condition(resource, "Ready")["message"]


def test_one_bad_resource_never_stops_the_others(api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    create(api, namespace, "bad", REFUSED_BY_THE_SERVER)
    create(api, namespace, "good", SMALL_NPU_SPEC)
    settled(api, namespace, "good")
    settled(api, namespace, "bad", phase="Failed")


# ----------------------------------------------------------------------------- deletes


def test_deletes_need_no_operator_and_an_old_finalizer_is_removed(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    custom, apps, _, _ = _clients(api)
    create(api, namespace, "del", SMALL_NPU_SPEC)
    settled(api, namespace, "del")
    assert not get(api, namespace, "del")["metadata"].get("finalizers")
    # Operator 0.1 put its finalizer on every resource; this one takes it off.
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "del",
                                          {"metadata": {"finalizers": [f"{GROUP}/finalizer"]}})
    wait_for("the old finalizer to be removed", lambda: not get(api, namespace, "del")["metadata"].get("finalizers"))

    operator.stop()
    try:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "del")
        wait_for("the resource to go without an operator",
                 lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"],
                 timeout_s=15)
        wait_for("garbage collection of the children", lambda: not apps.list_namespaced_deployment(namespace).items)
    finally:
        operator.start()


# ----------------------------------------------------------------------------- status


def test_status_follows_pods_within_seconds_and_outside_writes_are_undone(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    custom, _, core, _ = _clients(api)
    create(api, namespace, "lag", SMALL_NPU_SPEC)
    settled(api, namespace, "lag")
    pod = core.list_namespaced_pod(namespace, label_selector=f"{RESOURCE_LABEL}={label_value('lag')}").items[0]
    lags = []
    for ready, wanted in (("False", 1), ("True", 2)) * 3:
        # What a kubelet reports when a readiness probe fails or passes again (kwok leaves it).
        conditions = [{"type": t, "status": ready} for t in ("Ready", "ContainersReady")]
        start = time.monotonic()
        core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {"conditions": conditions}})
        wait_for(f"{wanted}/2 in status", lambda wanted=wanted: get(api, namespace, "lag")["status"]
                 ["readyReplicas"] == wanted, timeout_s=30, interval_s=0.05)
        lags.append(time.monotonic() - start)
    # Far below the resync interval (120 s here): the pod watch did it, not a timer.
    assert max(lags) < 10, lags
    print(f"status lag after a pod readiness change: median {statistics.median(lags):.2f}s, max {max(lags):.2f}s")

    custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "lag",
                                                 {"status": {"phase": "Failed", "readyReplicas": 0}})
    wait_for("the status to be corrected", lambda: get(api, namespace, "lag")["status"]["phase"] == "Ready",
             timeout_s=15)


def test_kill_9_mid_reconcile_leaves_no_duplicate_or_orphan(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    custom, apps, core, policy = _clients(api)
    names = [f"k{i}" for i in range(12)]
    for name in names:
        create(api, namespace, name, SMALL_NPU_SPEC)
    time.sleep(0.7)  # some reconciles are mid-way
    assert operator.stop(signal.SIGKILL) == -signal.SIGKILL
    operator.start()
    for name in names:
        settled(api, namespace, name)
    selector = RESOURCE_LABEL
    deployments = apps.list_namespaced_deployment(namespace, label_selector=selector).items
    services = core.list_namespaced_service(namespace, label_selector=selector).items
    configs = core.list_namespaced_config_map(namespace, label_selector=selector).items
    pdbs = policy.list_namespaced_pod_disruption_budget(namespace, label_selector=selector).items
    uids = {get(api, namespace, name)["metadata"]["uid"] for name in names}
    for objects, per_resource in ((deployments, 1), (services, 2), (configs, 1), (pdbs, 1)):
        # Exactly the children of each kind per resource (two Services), each owned by a live resource.
        assert sorted(o.metadata.labels[RESOURCE_LABEL] for o in objects) == sorted(names * per_resource)
        assert {o.metadata.owner_references[0].uid for o in objects} == uids


def test_the_server_defaults_replicas_for_autoscaled_resources(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    example = yaml.safe_load((ROOT / "examples" / "qwen7b-autoscaled.yaml").read_text(encoding="utf-8"))
    spec = example["spec"]
    spec.pop("replicas", None)
    created = create(api, namespace, "auto", spec)
    assert created["spec"]["replicas"] == 1
    scale = raw(api, f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/auto/scale")
    assert scale is not None and scale["spec"]["replicas"] == 1


def test_npu_pods_request_host_cpu_and_memory(api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    _, _, core, _ = _clients(api)
    create(api, namespace, "qos", SMALL_NPU_SPEC)
    settled(api, namespace, "qos")
    pod = core.list_namespaced_pod(namespace, label_selector=f"{RESOURCE_LABEL}=qos").items[0]
    requests = pod.spec.containers[0].resources.requests
    assert requests["cpu"] == "8" and requests["memory"] == "64Gi"
    assert pod.status.qos_class == "Burstable"


def test_many_resources_at_once_never_exhaust_the_connection_pool(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    for i in range(40):  # CPU replicas: 40 NPU ones would not fit the 32 NPUs of the kwok nodes
        create(api, namespace, f"p{i}", SMALL_CPU_SPEC)
    for i in range(40):
        settled(api, namespace, f"p{i}")
    assert "Connection pool is full" not in operator.output()


def test_render_matches_the_server_for_the_autoscaled_example(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    example = "qwen7b-autoscaled.yaml"
    resource = yaml.safe_load((ROOT / "examples" / example).read_text(encoding="utf-8"))
    resource["metadata"]["namespace"] = namespace
    _clients(api)[0].create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, resource)
    children = rendered(api, example, namespace)
    kinds = {child["kind"] for child in children}
    assert kinds & {"HorizontalPodAutoscaler", "ScaledObject"}, kinds
    wait_children_match(api, children)



@pytest.mark.parametrize(("npu", "field", "words"), [
    ({"nodeSelector": {"accelerator": "not a label value"}}, "spec.npu.nodeSelector", "should match"),
    ({"nodeSelector": {"bad key!": "x"}}, "spec.npu.nodeSelector", ""),
    ({"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}, "spec.npu.tolerations[0].value",
     "remove value"),
    ({"tolerations": [{"key": "a", "tolerationSeconds": 5}]}, "spec.npu.tolerations[0].tolerationSeconds",
     "NoExecute"),
])
def test_admission_refuses_what_the_server_would_refuse_in_a_child(
        api: Any, namespace: str, crds: list[str], npu: dict[str, Any], field: str, words: str) -> None:
    from kubernetes.client.exceptions import ApiException

    spec = copy.deepcopy(SMALL_NPU_SPEC)
    spec["npu"].update(npu)
    with pytest.raises(ApiException) as refused:
        create(api, namespace, "bad", spec)
    assert refused.value.status == 422
    assert field in refused.value.body and words in refused.value.body


def test_replicas_elect_one_leader_and_a_standby_takes_over(
        api: Any, namespace: str, crds: list[str], operator: OperatorUnderTest) -> None:
    """Two non-standalone operators on a Lease: only the leader writes; killing it hands over.

    The session's standalone operator is stopped meanwhile (it would reconcile too)."""

    import kubernetes

    operator.stop()
    env = {"ASCEND_LLM_OPERATOR_LEASE_NAMESPACE": namespace, "ASCEND_LLM_OPERATOR_LEASE_DURATION_S": "5",
           "ASCEND_LLM_OPERATOR_LEASE_RENEW_DEADLINE_S": "4", "ASCEND_LLM_OPERATOR_LEASE_RETRY_PERIOD_S": "1.5"}
    first = OperatorUnderTest(operator.kubeconfig, env, standalone=False)
    second = OperatorUnderTest(operator.kubeconfig, env, standalone=False)
    coordination = kubernetes.client.CoordinationV1Api(api)
    try:
        first.start()
        wait_for("the first replica to lead", lambda: "leads; reconciling" in first.output())
        second.start()  # both answer their liveness probe
        create(api, namespace, "ha", SMALL_NPU_SPEC)
        settled(api, namespace, "ha")
        holder = coordination.read_namespaced_lease("ascend-llm-operator", namespace).spec.holder_identity
        assert holder in first.output() and "leads; reconciling" not in second.output()
        assert f"{namespace}/ha: created" in first.output() and f"{namespace}/ha" not in second.output()

        first.stop(signal.SIGKILL)  # no release: the standby waits for the lease to expire
        wait_for("the standby to lead", lambda: "leads; reconciling" in second.output(), timeout_s=30)
        _clients(api)[1].patch_namespaced_deployment_scale("ha", namespace, {"spec": {"replicas": 5}})
        wait_for("the new leader to repair the Deployment",
                 lambda: _clients(api)[1].read_namespaced_deployment("ha", namespace).spec.replicas == 2,
                 timeout_s=15)
    finally:
        first.stop()
        second.stop()
        operator.start()


def test_text_beyond_the_basic_plane_reaches_the_children(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    """An emoji in an engine env value (it goes into the engine-config ConfigMap): the apply body
    carries it unescaped (the server's YAML decoder refuses the JSON surrogate escapes the typed
    client would send)."""

    spec = copy.deepcopy(SMALL_NPU_SPEC)
    spec["engine"] = {"env": {"GREETING": "hi \U0001F600"}}
    create(api, namespace, "emoji", spec)
    settled(api, namespace, "emoji")
    config = _clients(api)[2].read_namespaced_config_map("emoji-config", namespace).data
    engine_config = yaml.safe_load(next(iter(config.values())))
    assert engine_config["engine"]["env"]["GREETING"] == "hi \U0001F600"
