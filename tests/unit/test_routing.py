"""spec.routing (builders/routing.py, status.py): whole objects, validated against the pinned
Inference Extension and Gateway API CRDs (tests/data/crds) and the Kubernetes schemas; the pool's
selector across a rollout; the missing-API message; the engine metric check per vLLM version;
the Routing condition and its Events from the pool's status.parents; render with and without
the APIs served; the RBAC the EPP's Role needs is what the chart's EPP Role grants."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from ascend_operator.api import SpecError, parse_spec
from ascend_operator.builders import BuildMeta, build_children
from ascend_operator.builders.common import CONFIG_HASH_ANNOTATION
from ascend_operator.builders.routing import (
    EPP_ROLE_RULES,
    RoutingNames,
    build_routing,
    epp_config,
    missing_engine_metrics,
    routing_missing,
)
from ascend_operator.cli import render_children
from ascend_operator.conditions import ROUTING, get_condition
from ascend_operator.settings import OperatorSettings
from ascend_operator.status import (
    Observation,
    RoutingObservation,
    compute_status,
    transition_events,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
SERVED = frozenset({"v1", "inference.networking.k8s.io/v1", "gateway.networking.k8s.io/v1"})
#: The llm-d router chart v0.10.0 beside the checkout (../shared/reference/epp-chart), when there.
EPP_CHART_DIR = Path(__file__).resolve().parents[3] / "shared" / "reference" / "epp-chart"


def resource(routing: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body = {"model": {"huggingFace": {"id": "Qwen/Qwen2.5-7B-Instruct"}}, "replicas": 2,
            "npu": {"perReplica": 1}, **spec}
    if routing is not None:
        body["routing"] = routing
    return {"apiVersion": "llm.ascend.dev/v1alpha1", "kind": "AscendLLMDeployment",
            "metadata": {"name": "qwen", "namespace": "llm"}, "spec": body}


def routing_objects(routing: dict[str, Any], settings: OperatorSettings | None = None, **spec: Any
                    ) -> dict[str, dict[str, Any]]:
    parsed = parse_spec(resource(routing, **spec)["spec"])
    return {obj["kind"]: obj for obj in build_routing("qwen", "llm", parsed, settings or OperatorSettings())}


def without_hash(obj: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(obj)
    body["metadata"].pop("annotations", None)
    return body


def labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "ascend-llm", "app.kubernetes.io/instance": "qwen",
            "app.kubernetes.io/component": component, "app.kubernetes.io/managed-by": "ascend-llm-operator",
            "app.kubernetes.io/part-of": "ascend-llm", "llm.ascend.dev/deployment": "qwen"}


def test_pool_and_route_are_the_whole_expected_objects() -> None:
    objects = routing_objects({"gateway": {"name": "inference-gw", "namespace": "gateways", "sectionName": "http"}})
    assert without_hash(objects["InferencePool"]) == {
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": "qwen", "namespace": "llm", "labels": labels("inference-pool")},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "ascend-llm", "app.kubernetes.io/instance": "qwen",
                                         "app.kubernetes.io/component": "engine"}},
            "targetPorts": [{"number": 8000}],
            "appProtocol": "http",
            "endpointPickerRef": {"kind": "Service", "name": "qwen-epp", "port": {"number": 9002},
                                  "failureMode": "FailOpen"},
        },
    }
    assert without_hash(objects["HTTPRoute"]) == {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "qwen", "namespace": "llm", "labels": labels("route")},
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gw",
                            "namespace": "gateways", "sectionName": "http"}],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                       "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                        "name": "qwen"}],
                       "timeouts": {"request": "300s"}}],
        },
    }


def test_the_endpoint_picker_is_the_whole_expected_set() -> None:
    objects = routing_objects({"profile": "load", "failureMode": "FailClose"},
                              OperatorSettings(routing_gateway_name="shared-gw"))
    assert list(objects) == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service",
                             "InferencePool", "HTTPRoute"]
    assert without_hash(objects["Role"])["rules"] == list(EPP_ROLE_RULES)
    assert without_hash(objects["RoleBinding"]) == {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "qwen-epp", "namespace": "llm", "labels": labels("endpoint-picker")},
        "subjects": [{"kind": "ServiceAccount", "name": "qwen-epp", "namespace": "llm"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "qwen-epp"},
    }
    assert objects["Service"]["spec"]["ports"] == [
        {"name": "grpc-ext-proc", "port": 9002, "targetPort": 9002, "protocol": "TCP",
         "appProtocol": "kubernetes.io/h2c"},
        {"name": "grpc-health", "port": 9003, "targetPort": 9003, "protocol": "TCP"},
        {"name": "http-metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"},
    ]
    deployment = objects["Deployment"]
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
    assert container["args"] == [
        "--pool-name", "qwen", "--pool-namespace", "llm", "--pool-group", "inference.networking.k8s.io",
        "--zap-encoder", "json", "--config-file", "/config/epp-config.yaml", "--grpc-health-port", "9003",
        "--tracing=false", "--metrics-endpoint-auth=false",
    ]
    assert container["readinessProbe"]["grpc"] == {"port": 9003, "service": "inference-extension"}
    assert pod["spec"]["serviceAccountName"] == "qwen-epp"
    # Non-root, no privilege escalation, no capabilities, RuntimeDefault seccomp (Pod Security restricted).
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532,
                                              "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert deployment["spec"]["strategy"] == {"type": "Recreate"} and deployment["spec"]["replicas"] == 1
    # The EPP's Service selects the EPP pod only, and the engine's selector never the EPP.
    assert objects["Service"]["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "endpoint-picker"
    assert objects["InferencePool"]["spec"]["endpointPickerRef"]["failureMode"] == "FailClose"
    # The settings' Gateway, in the resource's namespace (no namespace in the parentRef).
    assert objects["HTTPRoute"]["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "shared-gw"}]


@pytest.mark.parametrize("routing", [
    {}, {"profile": "load"}, {"gateway": {"name": "gw"}}, {"gateway": {"name": "gw", "namespace": "infra"}},
])
@pytest.mark.parametrize("nodes", [1, 2])
def test_every_routing_object_is_valid_for_its_schema(routing: dict[str, Any], nodes: int,
                                                      validate_manifest: Callable[..., None]) -> None:
    extra: dict[str, Any] = {"nodesPerReplica": nodes, "npu": {"perReplica": 8},
                             "parallelism": {"tensor": 8, "data": nodes}} if nodes > 1 else {}
    objects = routing_objects(routing, **extra)
    assert ("HTTPRoute" in objects) == ("gateway" in routing)
    for obj in objects.values():
        validate_manifest(obj)


def test_the_scoring_profiles() -> None:
    prefix = yaml.safe_load(epp_config(parse_spec(resource({})["spec"]).routing.profile))
    assert (prefix["apiVersion"], prefix["kind"]) == ("llm-d.ai/v1alpha1", "EndpointPickerConfig")
    assert prefix["schedulingProfiles"] == [{"name": "default", "plugins": [
        {"pluginRef": "queue-scorer", "weight": 2}, {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
        {"pluginRef": "prefix-cache-scorer", "weight": 3}]}]
    load = yaml.safe_load(routing_objects({"profile": "load"})["ConfigMap"]["data"]["epp-config.yaml"])
    assert [p["pluginRef"] for p in load["schedulingProfiles"][0]["plugins"]] == [
        "queue-scorer", "kv-cache-utilization-scorer"]
    assert {p["type"] for p in load["plugins"]} >= {"metrics-data-source", "core-metrics-extractor"}
    # A profile change rolls the EPP (it reads its config at start): the pod template changes.
    before = routing_objects({})["Deployment"]["spec"]["template"]
    after = routing_objects({"profile": "load"})["Deployment"]["spec"]["template"]
    assert before["metadata"]["annotations"] != after["metadata"]["annotations"]


def test_a_rollout_never_changes_the_pools_selector_and_new_pods_match_it() -> None:
    settings = OperatorSettings()
    old = build_children(BuildMeta("qwen", "llm"), parse_spec(resource({})["spec"]), settings)
    new_spec = parse_spec(resource({}, image="registry.example.com/runtime:2", engine={"maxModelLen": 4096})["spec"])
    new = build_children(BuildMeta("qwen", "llm"), new_spec, settings)
    pool = {obj["kind"]: obj for obj in old.routing}["InferencePool"]
    new_pool = {obj["kind"]: obj for obj in new.routing}["InferencePool"]
    selector = pool["spec"]["selector"]["matchLabels"]
    assert new_pool["spec"]["selector"]["matchLabels"] == selector
    old_hash = old.pod_template_annotations()[CONFIG_HASH_ANNOTATION]
    assert old_hash != new.pod_template_annotations()[CONFIG_HASH_ANNOTATION]  # it is a rollout
    for children in (old, new):  # the pods of both templates are in the pool while they serve
        pod_labels = children.workload["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items()
    assert CONFIG_HASH_ANNOTATION not in selector and selector == old.service["spec"]["selector"]


def test_a_multi_node_pool_holds_the_group_leaders_only() -> None:
    objects = routing_objects({}, nodesPerReplica=2, npu={"perReplica": 8}, parallelism={"tensor": 8, "data": 2})
    assert objects["InferencePool"]["spec"]["selector"]["matchLabels"][
        "leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_routing_missing_names_each_api_and_the_fix() -> None:
    settings = OperatorSettings()
    with_gateway = parse_spec(resource({"gateway": {"name": "gw"}})["spec"])
    no_gateway = parse_spec(resource({})["spec"])
    assert routing_missing(parse_spec(resource()["spec"]), settings, frozenset({"v1"})) is None
    assert routing_missing(parse_spec(resource({"enabled": False})["spec"]), settings, frozenset({"v1"})) is None
    assert routing_missing(with_gateway, settings, SERVED) is None
    message = routing_missing(with_gateway, settings, frozenset({"v1"}))
    assert message is not None and "inference.networking.k8s.io/v1 (InferencePool)" in message
    assert "gateway.networking.k8s.io/v1 (HTTPRoute)" in message and "remove spec.routing" in message
    # No Gateway: no HTTPRoute, so only the pool's API is needed.
    assert routing_missing(no_gateway, settings, frozenset({"v1", "inference.networking.k8s.io/v1"})) is None
    only_pool = routing_missing(with_gateway, settings, frozenset({"v1", "inference.networking.k8s.io/v1"}))
    assert only_pool is not None and "InferencePool" not in only_pool


@pytest.mark.parametrize(("version", "missing"), [
    ("0.9.2", ["vllm:kv_cache_usage_perc"]), ("0.10.0", []), ("0.13.0rc2.dev12+g1a2b", []), ("0.32.0", []),
    (None, []), ("not-a-version", []),
])
def test_engine_metrics_per_vllm_version(version: str | None, missing: list[str]) -> None:
    assert [m.name for m in missing_engine_metrics(version)] == missing


def test_render_includes_routing_only_where_the_cluster_serves_it() -> None:
    body = resource({"gateway": {"name": "gw"}})
    served = {obj["kind"] for obj in render_children(body, served=SERVED)}
    assert {"InferencePool", "HTTPRoute", "Role", "RoleBinding", "ServiceAccount"} <= served
    bare = {obj["kind"] for obj in render_children(body)}
    assert not bare & {"InferencePool", "HTTPRoute", "Role", "RoleBinding", "ServiceAccount"}
    assert {"Deployment", "Service"} <= bare  # the engine itself is unaffected


def test_bad_routing_specs_name_the_field() -> None:
    with pytest.raises(SpecError, match=r"spec\.routing\.failureMode"):
        parse_spec(resource({"failureMode": "FailClosed"})["spec"])
    with pytest.raises(SpecError, match=r"spec\.routing\.gateway\.name"):
        parse_spec(resource({"gateway": {"name": "Not_A_Name"}})["spec"])


def test_the_epp_role_grants_what_the_epp_chart_grants() -> None:
    # The chart's namespaced rules (pods; pools, objectives and rewrites), minus its optional
    # ClusterRole for authenticated metrics, which --metrics-endpoint-auth=false makes unneeded.
    files = [EPP_CHART_DIR / "routerlib" / "templates" / "_rbac.yaml",
             EPP_CHART_DIR / "llm-d-router-gateway" / "templates" / "rbac.yaml"]
    if not all(f.exists() for f in files):
        pytest.skip("the reference chart is not beside this checkout")
    text = "".join(f.read_text(encoding="utf-8") for f in files)
    assert 'resources: ["pods"]' in text and 'verbs: ["get", "watch", "list"]' in text
    for rule in EPP_ROLE_RULES:
        for group in rule["apiGroups"]:
            assert f'"{group}"' in text
        for resource_name in rule["resources"]:
            assert resource_name in text


# ------------------------------------------------------------------------------ status


def observed(**routing: Any) -> Observation:
    names = RoutingNames.for_resource("qwen")
    fields = {"pool_name": names.pool, "epp_name": names.epp, "route_name": "qwen", "gateway": "infra/gw", **routing}
    return Observation(name="qwen", generation=1, selector="s", endpoint=None, resource_name=None,
                       remembered_for="k", routing=RoutingObservation(**fields))


def parent(accepted: str, resolved: str, message: str = "") -> dict[str, Any]:
    when = "2026-12-01T12:00:00Z"
    return {"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw", "namespace": "infra"},
            "controllerName": "example.com/gateway",
            "conditions": [{"type": "Accepted", "status": accepted, "reason": "R", "message": message,
                            "lastTransitionTime": when},
                           {"type": "ResolvedRefs", "status": resolved, "reason": "R", "message": message,
                            "lastTransitionTime": when}]}


def routed_status(observation: Observation, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    return compute_status(parse_spec(resource({"gateway": {"name": "gw", "namespace": "infra"}})["spec"]),
                          observation, previous, NOW)


def test_the_pools_parents_reach_the_status_and_the_routing_condition() -> None:
    waiting = routed_status(observed(pool={"status": {}}))
    assert waiting["routing"] == {"pool": "qwen", "endpointPicker": "qwen-epp", "route": "qwen",
                                  "gateway": "infra/gw", "accepted": "Unknown", "resolvedRefs": "Unknown",
                                  "parents": [], "missingMetrics": []}
    assert get_condition(waiting, ROUTING)["reason"] == "AwaitingGateway"
    assert all(e[1] != "AwaitingGateway" for e in transition_events(None, waiting))  # normal, no Event
    accepted = routed_status(observed(pool={"status": {"parents": [parent("True", "True")]}}), waiting)
    assert accepted["routing"]["parents"] == [{"gateway": "infra/gw", "accepted": "True", "resolvedRefs": "True"}]
    assert (accepted["routing"]["accepted"], accepted["routing"]["resolvedRefs"]) == ("True", "True")
    condition = get_condition(accepted, ROUTING)
    assert (condition["status"], condition["reason"]) == ("True", "PoolAccepted")
    assert ("Normal", "PoolAccepted", condition["message"]) in transition_events(waiting, accepted)
    refused = routed_status(observed(pool={"status": {"parents": [parent("True", "False", "no such Service")]}}),
                            accepted)
    condition = get_condition(refused, ROUTING)
    assert (condition["status"], condition["reason"]) == ("False", "PoolNotAccepted")
    assert "infra/gw" in condition["message"] and "no such Service" in condition["message"]
    assert ("Warning", "PoolNotAccepted", condition["message"]) in transition_events(accepted, refused)
    assert transition_events(refused, routed_status(observed(
        pool={"status": {"parents": [parent("True", "False", "no such Service")]}}), refused)) == []


def test_missing_apis_and_missing_engine_metrics_are_conditions_with_a_warning() -> None:
    missing = routed_status(observed(missing="spec.routing needs APIs ..."))
    condition = get_condition(missing, ROUTING)
    assert (condition["status"], condition["reason"]) == ("False", "RoutingAPIsMissing")
    assert ("Warning", "RoutingAPIsMissing", "spec.routing needs APIs ...") in transition_events(None, missing)
    old_engine = routed_status(observed(pool={"status": {"parents": [parent("True", "True")]}},
                                        vllm_versions=("0.9.2", "0.23.0")))
    assert old_engine["routing"]["missingMetrics"] == ["vllm:kv_cache_usage_perc"]
    condition = get_condition(old_engine, ROUTING)
    assert (condition["status"], condition["reason"]) == ("False", "EngineMetricsMissing")
    assert "vllm:kv_cache_usage_perc" in condition["message"] and "vLLM 0.9.2" in condition["message"]
    assert "vLLM 0.10.0 or later" in condition["message"] and "0.23.0" not in condition["message"]
    assert ("Warning", "EngineMetricsMissing", condition["message"]) in transition_events(None, old_engine)


def test_routing_turned_off_says_so_and_drops_the_routing_status() -> None:
    on = routed_status(observed(pool={"status": {"parents": [parent("True", "True")]}}))
    off = compute_status(parse_spec(resource()["spec"]), Observation(
        name="qwen", generation=2, selector="s", endpoint=None, resource_name=None, remembered_for="k"), on, NOW)
    assert "routing" not in off
    assert get_condition(off, ROUTING)["reason"] == "RoutingDisabled"
