"""spec.routing on the real API server (kube-apiserver 1.36 of ../shared/k8s) with the operator running.

- Without the Inference Extension and Gateway API CRDs: the Routing condition and a Warning
  Event say what to install; no routing object exists (nothing half-applied); the engine's own
  children are made.
- With them (the pinned CRDs of tests/data/crds, installed by this module): the EPP's
  ServiceAccount, Role, RoleBinding, ConfigMap, Deployment and Service, the InferencePool and the
  HTTPRoute are accepted by the server as built; the pool's status.parents, written through its
  status subresource as a gateway controller would, reach status.routing and the condition.
- RBAC escalation prevention: a ServiceAccount holding exactly the operator's rules
  (rbac.cluster_role_rules) may create the EPP's Role and RoleBinding; without the delegated
  rules the server refuses the Role for escalation (its message says so; the account's own
  binding is shown active first, since an account not yet bound gets a 403 too).
- The EPP's pod is admitted in a namespace that enforces the restricted Pod Security level.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import yaml
from cluster_harness import WAIT_S
from install_harness import ROOT, wait_for

pytestmark = pytest.mark.cluster

ROUTING_CRDS = ("inference.networking.k8s.io_inferencepools.yaml", "gateway.networking.k8s.io_httproutes.yaml",
                "gateway.networking.k8s.io_gateways.yaml")
POOL = ("inference.networking.k8s.io", "v1", "inferencepools")
ROUTE = ("gateway.networking.k8s.io", "v1", "httproutes")


def _clients(api: Any) -> tuple[Any, Any, Any, Any]:
    import kubernetes

    return (kubernetes.client.CustomObjectsApi(api), kubernetes.client.CoreV1Api(api),
            kubernetes.client.AppsV1Api(api), kubernetes.client.RbacAuthorizationV1Api(api))


def _crd_names() -> list[str]:
    return [yaml.safe_load((ROOT / "tests" / "data" / "crds" / f).read_text(encoding="utf-8"))["metadata"]["name"]
            for f in ROUTING_CRDS]


def _remove_routing_crds(api: Any) -> None:
    import kubernetes
    from kubernetes.client.exceptions import ApiException

    ext = kubernetes.client.ApiextensionsV1Api(api)
    for name in _crd_names():
        try:
            ext.delete_custom_resource_definition(name)
        except ApiException as error:
            if error.status != 404:
                raise

    def gone() -> bool:
        served = {g.name for g in kubernetes.client.ApisApi(api).get_api_versions().groups}
        return not served & {"inference.networking.k8s.io", "gateway.networking.k8s.io"}

    wait_for("the routing CRDs to be gone", gone, timeout_s=WAIT_S)


#: A resync of the cluster tier's operator (conftest.RESYNC_S) and a margin.
RESYNC_WAIT_S = 150.0


def install_routing_crds(api: Any) -> None:
    import kubernetes

    ext = kubernetes.client.ApiextensionsV1Api(api)
    for file in ROUTING_CRDS:
        body = yaml.safe_load((ROOT / "tests" / "data" / "crds" / file).read_text(encoding="utf-8"))
        ext.patch_custom_resource_definition(body["metadata"]["name"], body, field_manager="ascend-llm-tests",
                                             force=True, _content_type="application/apply-patch+yaml")

    def established() -> bool:
        for name in _crd_names():
            conditions = ext.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    wait_for("the routing CRDs to be established", established, timeout_s=WAIT_S)


def _resource(name: str, routing: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "llm.ascend.dev/v1alpha1", "kind": "AscendLLMDeployment",
            "metadata": {"name": name},
            "spec": {"model": {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}}, "platform": "CPU",
                     "replicas": 2, "routing": routing}}


def _create(api: Any, namespace: str, body: dict[str, Any]) -> None:
    custom = _clients(api)[0]
    custom.create_namespaced_custom_object("llm.ascend.dev", "v1alpha1", namespace, "ascendllmdeployments", body)


def _status(api: Any, namespace: str, name: str) -> dict[str, Any]:
    custom = _clients(api)[0]
    return custom.get_namespaced_custom_object("llm.ascend.dev", "v1alpha1", namespace, "ascendllmdeployments",
                                               name).get("status") or {}


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def test_without_the_crds_a_condition_and_an_event_and_nothing_half_applied(api: Any, operator: Any,
                                                                              namespace: str) -> None:
    _remove_routing_crds(api)
    time.sleep(6)  # past the operator's discovery TTL (5 s in this tier)
    _create(api, namespace, _resource("qwen", {"gateway": {"name": "gw"}}))
    custom, core, apps, rbac = _clients(api)

    def reported() -> dict[str, Any] | None:
        condition = _condition(_status(api, namespace, "qwen"), "Routing")
        return condition if condition and condition["reason"] == "RoutingAPIsMissing" else None

    condition = wait_for("the Routing condition", reported, timeout_s=WAIT_S)
    assert condition["status"] == "False"
    assert "inference.networking.k8s.io/v1 (InferencePool)" in condition["message"]
    assert "gateway.networking.k8s.io/v1 (HTTPRoute)" in condition["message"]
    events = wait_for("a Warning Event", lambda: [e for e in core.list_namespaced_event(namespace).items
                                                  if e.reason == "RoutingAPIsMissing" and e.type == "Warning"])
    assert "install the Gateway API Inference Extension CRDs" in events[0].message
    # The engine is made; no routing object is (nothing half-applied).
    wait_for("the engine Deployment", lambda: apps.list_namespaced_deployment(namespace).items)
    assert [d.metadata.name for d in apps.list_namespaced_deployment(namespace).items] == ["qwen"]
    assert not rbac.list_namespaced_role(namespace).items
    assert not rbac.list_namespaced_role_binding(namespace).items
    assert [sa.metadata.name for sa in core.list_namespaced_service_account(namespace).items] == ["default"]
    assert {s.metadata.name for s in core.list_namespaced_service(namespace).items} == {"qwen", "qwen-runtime"}
    assert "routing" in _status(api, namespace, "qwen")


def test_with_the_crds_every_routing_object_is_accepted_and_the_pools_parents_reach_the_status(
        api: Any, operator: Any, namespace: str) -> None:
    install_routing_crds(api)
    time.sleep(6)  # past the operator's discovery TTL
    _create(api, namespace, _resource("qwen", {"gateway": {"name": "inference-gw", "namespace": "gateways"}}))
    custom, core, apps, rbac = _clients(api)

    def made() -> dict[str, Any] | None:
        try:
            return {
                "pool": custom.get_namespaced_custom_object(*POOL[:2], namespace, POOL[2], "qwen"),
                "route": custom.get_namespaced_custom_object(*ROUTE[:2], namespace, ROUTE[2], "qwen"),
                "epp": apps.read_namespaced_deployment("qwen-epp", namespace),
                "service": core.read_namespaced_service("qwen-epp", namespace),
                "configmap": core.read_namespaced_config_map("qwen-epp", namespace),
                "account": core.read_namespaced_service_account("qwen-epp", namespace),
                "role": rbac.read_namespaced_role("qwen-epp", namespace),
                "binding": rbac.read_namespaced_role_binding("qwen-epp", namespace),
            }
        except Exception:  # noqa: BLE001 - not all there yet
            return None

    objects = wait_for("the routing objects", made, timeout_s=WAIT_S)
    pool = objects["pool"]
    assert pool["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "ascend-llm", "app.kubernetes.io/instance": "qwen",
        "app.kubernetes.io/component": "engine"}
    assert pool["spec"]["endpointPickerRef"]["name"] == "qwen-epp"
    assert objects["route"]["spec"]["rules"][0]["backendRefs"][0]["kind"] == "InferencePool"
    assert [p.port for p in objects["service"].spec.ports] == [9002, 9003, 9090]
    assert objects["binding"].role_ref.name == "qwen-epp"
    # The engine pods (kwok runs them) carry the pool's selector: the pool is not empty.
    wait_for("engine pods", lambda: len(core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=engine,app.kubernetes.io/instance=qwen").items) == 2)

    status = wait_for("status.routing", lambda: _status(api, namespace, "qwen").get("routing"))
    assert status["pool"] == "qwen" and status["gateway"] == "gateways/inference-gw"
    assert _condition(_status(api, namespace, "qwen"), "Routing")["reason"] == "AwaitingGateway"

    def write_parents(accepted: str, resolved: str) -> None:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        custom.patch_namespaced_custom_object_status(*POOL[:2], namespace, POOL[2], "qwen", {"status": {"parents": [{
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gw",
                          "namespace": "gateways"},
            "controllerName": "example.com/gateway-controller",
            "conditions": [
                {"type": "Accepted", "status": accepted, "reason": "Accepted" if accepted == "True" else "Refused",
                 "message": "" if accepted == "True" else "the gateway refused the pool", "lastTransitionTime": when},
                {"type": "ResolvedRefs", "status": resolved, "reason": "ResolvedRefs" if resolved == "True"
                 else "InvalidExtensionRef", "message": "" if resolved == "True" else "no EPP Service answers",
                 "lastTransitionTime": when},
            ]}]}}, _content_type="application/merge-patch+json")

    write_parents("True", "True")

    def accepted() -> dict[str, Any] | None:
        condition = _condition(_status(api, namespace, "qwen"), "Routing")
        return condition if condition and condition["reason"] == "PoolAccepted" else None

    # The pool's watch event reconciles at once; should kopf's watch of the just-installed CRD
    # start late, the next resync (120 s here) reads the pool from the API server.
    condition = wait_for("Routing PoolAccepted", accepted, timeout_s=RESYNC_WAIT_S)
    assert condition["status"] == "True"
    assert _status(api, namespace, "qwen")["routing"]["parents"] == [
        {"gateway": "gateways/inference-gw", "accepted": "True", "resolvedRefs": "True"}]

    write_parents("True", "False")

    def refused() -> dict[str, Any] | None:
        condition = _condition(_status(api, namespace, "qwen"), "Routing")
        return condition if condition and condition["reason"] == "PoolNotAccepted" else None

    condition = wait_for("Routing PoolNotAccepted", refused, timeout_s=RESYNC_WAIT_S)
    assert "no EPP Service answers" in condition["message"]
    assert _status(api, namespace, "qwen")["routing"]["resolvedRefs"] == "False"
    wait_for("a Warning Event", lambda: [e for e in core.list_namespaced_event(namespace).items
                                         if e.reason == "PoolNotAccepted" and e.type == "Warning"])

    # Routing off: every routing object is pruned, the engine stays.
    custom.patch_namespaced_custom_object("llm.ascend.dev", "v1alpha1", namespace, "ascendllmdeployments", "qwen",
                                          {"spec": {"routing": {"enabled": False}}},
                                          _content_type="application/merge-patch+json")

    def pruned() -> bool:
        return (not custom.list_namespaced_custom_object(*POOL[:2], namespace, POOL[2])["items"]
                and not custom.list_namespaced_custom_object(*ROUTE[:2], namespace, ROUTE[2])["items"]
                and not rbac.list_namespaced_role(namespace).items
                and [d.metadata.name for d in apps.list_namespaced_deployment(namespace).items] == ["qwen"])

    wait_for("the routing objects pruned", pruned, timeout_s=WAIT_S)


@pytest.fixture
def cluster_roles(api: Any) -> Any:
    """Names of the ClusterRoles and ClusterRoleBindings a test made; deleted after it."""
    made: list[str] = []
    yield made
    rbac = _clients(api)[3]
    for name in made:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)


def _bound_account(api: Any, namespace: str, rules: list[dict[str, Any]], made: list[str]) -> str:
    """A ServiceAccount bound (ClusterRoleBinding) to a fresh ClusterRole of ``rules``; its username."""
    _, core, _, rbac = _clients(api)
    name = f"routing-{uuid.uuid4().hex[:6]}"
    made.append(name)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
    rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
    return f"system:serviceaccount:{namespace}:{name}"


def _apply_as(api: Any, user: str, obj: dict[str, Any]) -> tuple[int, str]:
    """Server-side apply ``obj`` impersonating ``user``; the HTTP status and the response body."""
    import json

    kind = {"Role": "roles", "RoleBinding": "rolebindings"}[obj["kind"]]
    meta = obj["metadata"]
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{meta['namespace']}/{kind}/{meta['name']}"
    method, url, headers, body, post = api.param_serialize(
        method="PATCH", resource_path=path, query_params=[("fieldManager", "ascend-llm-operator"), ("force", "true")],
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json",
                       "Impersonate-User": user}, body=json.dumps(obj), auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers, body=body, post_params=post)
    return response.status, response.read().decode()


def _may(api: Any, user: str, verb: str, resource: str, namespace: str) -> bool:
    """Whether the API server's authorizer lets ``user`` ``verb`` rbac.authorization.k8s.io
    ``resource`` in ``namespace`` now (a SubjectAccessReview: the same authorizer requests meet)."""
    import kubernetes

    review = kubernetes.client.AuthorizationV1Api(api).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated"],
                 "resourceAttributes": {"group": "rbac.authorization.k8s.io", "resource": resource,
                                        "verb": verb, "namespace": namespace}}})
    return bool(review.status.allowed)


def test_the_operators_rules_let_it_create_the_epps_role_and_binding_without_escalate_or_bind(
        api: Any, namespace: str, cluster_roles: list[str]) -> None:
    from ascend_operator.api import parse_spec
    from ascend_operator.builders.routing import build_routing
    from ascend_operator.rbac import OPERATOR_RULES, cluster_role_rules
    from ascend_operator.settings import OperatorSettings

    objects = {o["kind"]: dict(o) for o in build_routing(
        "qwen", namespace, parse_spec(_resource("qwen", {})["spec"]), OperatorSettings())}
    role, binding = objects["Role"], objects["RoleBinding"]
    held = _bound_account(api, namespace, cluster_role_rules(), cluster_roles)
    wait_for("the Role applied as the operator", lambda: _apply_as(api, held, role)[0] in (200, 201),
             timeout_s=WAIT_S)
    assert _apply_as(api, held, binding)[0] in (200, 201)

    # Without the delegated rules (held only to grant them) the server refuses the Role: for
    # escalation, once the account may otherwise patch Roles (its binding is active).
    fewer = [r.as_policy_rule() for r in OPERATOR_RULES
             if not r.delegated and not r.leader_election and not r.pod_proxy]
    lacking = _bound_account(api, namespace, fewer, cluster_roles)
    role["metadata"] = {**role["metadata"], "name": "qwen-epp-2"}
    wait_for("the account's binding active", lambda: _may(api, lacking, "patch", "roles", namespace),
             timeout_s=WAIT_S)
    status, body = _apply_as(api, lacking, role)
    assert status == 403, body
    assert "is attempting to grant RBAC permissions not currently held" in body, body
    # What an account without an active binding gets: a 403 as well, but not for escalation.
    status, body = _apply_as(api, f"system:serviceaccount:{namespace}:unbound", role)
    assert status == 403 and "is attempting to grant" not in body, body


def test_the_endpoint_pickers_pod_is_admitted_under_the_restricted_pod_security_level(
        api: Any, make_namespace: Any) -> None:
    from ascend_operator.api import parse_spec
    from ascend_operator.builders.routing import build_routing
    from ascend_operator.settings import OperatorSettings

    namespace = make_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
    (deployment,) = [o for o in build_routing("qwen", namespace, parse_spec(_resource("qwen", {})["spec"]),
                                              OperatorSettings()) if o["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "epp", "namespace": namespace,
                                                           "labels": template["metadata"]["labels"]},
           "spec": {**template["spec"], "serviceAccountName": "default"}}
    _clients(api)[1].create_namespaced_pod(namespace, pod, dry_run="All")  # refused (403) if not restricted
