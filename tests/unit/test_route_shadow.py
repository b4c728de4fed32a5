"""HTTPRoutes on a shared Gateway (builders/routing.py build_route, routeshadow.py, the Routing
condition): each route matches only its own model names (X-Gateway-Model-Name, as the body-based
router sets it) on its own hostnames; a route another live route would win over is named."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from ascend_operator.api import SpecError, parse_spec
from ascend_operator.builders.routing import build_route, build_routing
from ascend_operator.conditions import ROUTING, get_condition
from ascend_operator.routeshadow import Shadow, hostnames_overlap, matches_overlap, shadowing_routes
from ascend_operator.settings import OperatorSettings
from ascend_operator.status import Observation, RoutingObservation, compute_status, transition_events

from tests.unit.test_routing import NOW, labels, resource

CACHE = {"create": {"size": "50Gi"}}
SHARED = OperatorSettings(routing_gateway_name="shared", routing_gateway_namespace="gateways")


def route_of(name: str = "qwen", namespace: str = "llm", created: str | None = None, **spec: Any) -> dict[str, Any]:
    body = resource(spec.pop("routing", {}), **spec)
    parsed = parse_spec(body["spec"])
    route = build_route(name, namespace, parsed, SHARED)
    assert route is not None
    if created:
        route["metadata"]["creationTimestamp"] = created
        route["metadata"]["ownerReferences"] = [{"apiVersion": "llm.ascend.dev/v1alpha1",
                                                 "kind": "AscendLLMDeployment", "name": name, "uid": "u"}]
    return route


def adapters(*names: str) -> dict[str, Any]:
    return {"adapters": [{"name": n, "source": {"huggingFace": {"id": "org/" + n.replace("/", "-")}}} for n in names]}


def header(model: str) -> dict[str, Any]:
    return {"path": {"type": "PathPrefix", "value": "/"},
            "headers": [{"type": "Exact", "name": "X-Gateway-Model-Name", "value": model}]}


def test_the_route_on_a_shared_gateway_is_the_whole_expected_object() -> None:
    route = route_of(model={"huggingFace": {"id": "Qwen/Qwen2.5-7B-Instruct"}, "servedName": "qwen-chat",
                            "cache": CACHE}, lora=adapters("sql", "legal"))
    assert route == {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "qwen", "namespace": "llm", "labels": labels("route")},
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "shared",
                            "namespace": "gateways"}],
            # The served name, then each adapter's: requests for any other model never match.
            "rules": [{"matches": [header("qwen-chat"), header("sql"), header("legal")],
                       "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                        "name": "qwen"}],
                       "timeouts": {"request": "300s"}}],
        },
    }


def test_hostnames_from_the_spec_and_many_adapters_split_into_rules(validate_manifest: Callable[..., None]) -> None:
    names = [f"a{i}" for i in range(127)]
    route = route_of(routing={"hostnames": ["llm.team-a.example.com", "*.team-a.example.com"]},
                     lora=adapters(*names), model={"huggingFace": {"id": "Qwen/Qwen2.5-7B-Instruct"}, "cache": CACHE})
    assert route["spec"]["hostnames"] == ["llm.team-a.example.com", "*.team-a.example.com"]
    # Gateway API: at most 64 matches a rule, 128 a route.
    assert [len(rule["matches"]) for rule in route["spec"]["rules"]] == [64, 64]
    assert [m["headers"][0]["value"] for rule in route["spec"]["rules"] for m in rule["matches"]] == [
        "Qwen/Qwen2.5-7B-Instruct", *names]
    validate_manifest(route)


def test_a_128th_adapter_and_a_bad_hostname_are_refused_naming_the_field() -> None:
    with pytest.raises(SpecError, match="lora.adapters"):
        parse_spec(resource({}, lora=adapters(*(f"a{i}" for i in range(128))),
                            model={"huggingFace": {"id": "Qwen/Qwen2.5-7B-Instruct"}, "cache": CACHE})["spec"])
    with pytest.raises(SpecError, match="routing.hostnames"):
        parse_spec(resource({"hostnames": ["Bad_Host"]})["spec"])
    with pytest.raises(SpecError, match="routing.hostnames"):
        parse_spec(resource({"hostnames": ["*"]})["spec"])


def test_two_tenants_with_different_models_do_not_shadow_each_other() -> None:
    a = route_of("qwen", "team-a", "2026-12-01T10:00:00Z")
    b = route_of("llama", "team-b", model={"huggingFace": {"id": "meta-llama/Llama-3.1-8B-Instruct"}})
    assert shadowing_routes(b, [a]) == [] and shadowing_routes(a, [b]) == []


def test_the_same_model_name_on_the_same_gateway_is_shadowed_by_the_older_route() -> None:
    older = route_of("qwen", "team-a", "2026-12-01T10:00:00Z")
    newer = route_of("thief", "team-b")  # the same hub id, so the same served name
    assert shadowing_routes(newer, [older]) == [
        Shadow("team-a/qwen", "AscendLLMDeployment team-a/qwen", "gateways/shared")]
    # The older route is not shadowed by the newer one (it wins the tie by age).
    newer["metadata"]["creationTimestamp"] = "2026-12-01T11:00:00Z"
    assert shadowing_routes(older, [newer]) == []
    # An adapter named like the other's served name shadows as well.
    by_adapter = route_of("x", "team-c", model={"huggingFace": {"id": "org/other"}, "cache": CACHE},
                          lora=adapters("Qwen/Qwen2.5-7B-Instruct"))
    assert [s.route for s in shadowing_routes(by_adapter, [older])] == ["team-a/qwen"]


def test_disjoint_hostnames_other_gateways_and_listeners_do_not_shadow() -> None:
    older = route_of("qwen", "team-a", "2026-12-01T10:00:00Z", routing={"hostnames": ["a.example.com"]})
    assert shadowing_routes(route_of("qwen", "team-b", routing={"hostnames": ["b.example.com"]}), [older]) == []
    # A route without hostnames takes every host, so it overlaps; a wildcard covers its subdomains.
    assert shadowing_routes(route_of("qwen", "team-b"), [older])
    assert shadowing_routes(route_of("qwen", "team-b", routing={"hostnames": ["*.example.com"]}), [older])
    other_gateway = route_of("qwen", "team-b", routing={"gateway": {"name": "own", "namespace": "team-b"}})
    assert shadowing_routes(other_gateway, [older]) == []
    listener_a = copy.deepcopy(older)
    listener_a["spec"]["parentRefs"][0]["sectionName"] = "a"
    listener_b = route_of("qwen", "team-b", routing={"gateway": {"name": "shared", "namespace": "gateways",
                                                                  "sectionName": "b"}, "hostnames": ["a.example.com"]})
    assert shadowing_routes(listener_b, [listener_a]) == []
    assert hostnames_overlap(["*.example.com"], ["*.b.example.com"]) and not hostnames_overlap(["a.x"], ["b.x"])


def test_a_foreign_route_wins_by_precedence_not_only_by_age() -> None:
    mine = route_of("qwen", "team-b", "2026-12-01T09:00:00Z")
    catch_all = {"metadata": {"name": "default", "namespace": "gateways", "creationTimestamp": "2026-01-01T00:00:00Z"},
                 "spec": {"parentRefs": [{"name": "shared"}], "rules": [{"backendRefs": []}]}}
    # An older catch-all (no header match) loses to the model-name match: Gateway API precedence.
    assert shadowing_routes(mine, [catch_all]) == []
    # A longer path prefix with the same model header wins over ours even when younger.
    longer = {"metadata": {"name": "steal", "namespace": "team-x", "creationTimestamp": "2026-12-02T00:00:00Z"},
              "spec": {"parentRefs": [{"name": "shared", "namespace": "gateways"}],
                       "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"},
                                               "headers": [{"name": "x-gateway-model-name",
                                                            "value": "Qwen/Qwen2.5-7B-Instruct"}]}]}]}}
    assert shadowing_routes(mine, [longer]) == [Shadow("team-x/steal", None, "gateways/shared")]
    assert not matches_overlap(header("a"), header("b"))
    assert not matches_overlap({"path": {"type": "PathPrefix", "value": "/v1"}},
                               {"path": {"type": "Exact", "value": "/v10"}})


def test_a_shadowed_route_is_not_built_and_the_condition_names_the_other_resource() -> None:
    spec = parse_spec(resource({})["spec"])
    observation = Observation(
        name="qwen", generation=1, selector="s", endpoint=None, resource_name=None, remembered_for="k",
        routing=RoutingObservation(pool_name="qwen", epp_name="qwen-epp", route_name=None, gateway="gateways/shared",
                                   shadowed_by=("HTTPRoute team-a/qwen of AscendLLMDeployment team-a/qwen on "
                                                "Gateway gateways/shared",)))
    status = compute_status(spec, observation, {}, NOW)
    condition = get_condition(status, ROUTING)
    assert condition is not None and condition["status"] == "False" and condition["reason"] == "RouteShadowed"
    assert "AscendLLMDeployment team-a/qwen" in condition["message"]
    assert "spec.routing.hostnames" in condition["message"]
    assert "route" not in status["routing"] and status["routing"]["gateway"] == "gateways/shared"
    assert ("Warning", "RouteShadowed", condition["message"]) in transition_events({}, status)
    # The route is the last routing child; the rest is built whatever the Gateway holds.
    assert [o["kind"] for o in build_routing("qwen", "llm", spec, SHARED)][-1] == "HTTPRoute"
