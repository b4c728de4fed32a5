"""Two tenants behind one administrator Gateway (the settings ROUTING_GATEWAY_NAME / _NAMESPACE)
on the real API server, with the operator running (docs/routing.md, "A shared Gateway").

- Resources in two namespaces get HTTPRoutes on the same Gateway whose matches do not overlap:
  each matches only its own model names in X-Gateway-Model-Name.
- A third resource serving the first one's model name on that Gateway gets no HTTPRoute; its
  Routing condition is RouteShadowed, naming the first resource, with a Warning Event. Serving
  another name makes its route; taking the first one's name again deletes it; the first one's
  deletion makes it again within seconds.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ascend_operator.routeshadow import shadowing_routes
from cluster_harness import RESYNC_S, WAIT_S, OperatorUnderTest, watched_namespace
from install_harness import wait_for
from test_routing_on_server import RESYNC_WAIT_S, ROUTE, _clients, _condition, _create, _status, install_routing_crds

pytestmark = pytest.mark.cluster

GATEWAY = {"ASCEND_LLM_OPERATOR_ROUTING_GATEWAY_NAME": "shared",
           "ASCEND_LLM_OPERATOR_ROUTING_GATEWAY_NAMESPACE": "gateways"}


@pytest.fixture
def admin_gateway_operator(operator: OperatorUnderTest) -> Iterator[OperatorUnderTest]:
    """The session's operator restarted with the administrator's Gateway set; restored after."""
    operator.stop()
    operator.env_overrides.update(GATEWAY)
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
        # pytest shows a test's captured stderr only when it failed: the operator's side of it.
        sys.stderr.write("\n".join(operator.output().splitlines()[-300:]) + "\n")
        for key in GATEWAY:
            operator.env_overrides.pop(key, None)
        operator.start()


@pytest.fixture
def second_namespace(api: Any) -> Iterator[str]:
    yield from watched_namespace(api)


def _resource(name: str, served: str | None = None) -> dict[str, Any]:
    model: dict[str, Any] = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}}
    if served:
        model["servedName"] = served
    return {"apiVersion": "llm.ascend.dev/v1alpha1", "kind": "AscendLLMDeployment", "metadata": {"name": name},
            "spec": {"model": model, "platform": "CPU", "replicas": 1, "routing": {}}}


def _route(api: Any, namespace: str, name: str) -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return _clients(api)[0].get_namespaced_custom_object(*ROUTE[:2], namespace, ROUTE[2], name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _wait_route(api: Any, namespace: str, name: str, what: str) -> dict[str, Any]:
    """The route, once made; on a timeout the resource's status and every HTTPRoute on the server
    go to stderr first (what the operator saw: a Routing condition, a route shadowing it)."""
    try:
        return wait_for(what, lambda: _route(api, namespace, name), timeout_s=RESYNC_WAIT_S)
    except pytest.fail.Exception:
        routes = _clients(api)[0].list_cluster_custom_object(*ROUTE[:2], ROUTE[2])["items"]
        sys.stderr.write(f"{what}: status of {namespace}/{name}: {json.dumps(_status(api, namespace, name))}\n"
                         f"HTTPRoutes: {json.dumps([{'metadata': r['metadata'], 'spec': r['spec']} for r in routes])}\n")
        raise


def _models(route: dict[str, Any]) -> set[tuple[str, str]]:
    return {(header["name"], header["value"]) for rule in route["spec"]["rules"] for match in rule["matches"]
            for header in match.get("headers") or []}


def test_two_tenants_share_a_gateway_and_a_shadowing_route_is_refused_naming_the_other(
        api: Any, admin_gateway_operator: OperatorUnderTest, namespace: str, second_namespace: str) -> None:
    install_routing_crds(api)
    custom, core, _, _ = _clients(api)
    _create(api, namespace, _resource("qwen"))
    route_a = _wait_route(api, namespace, "qwen", "tenant A's route")
    _create(api, second_namespace, _resource("chat", served="team-b-chat"))
    route_b = _wait_route(api, second_namespace, "chat", "tenant B's route")

    # One administrator Gateway, two routes whose matches are disjoint model names.
    parent = [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "shared", "namespace": "gateways"}]
    assert route_a["spec"]["parentRefs"] == parent and route_b["spec"]["parentRefs"] == parent
    assert _models(route_a) == {("X-Gateway-Model-Name", "Qwen/Qwen2.5-0.5B-Instruct")}
    assert _models(route_b) == {("X-Gateway-Model-Name", "team-b-chat")}
    assert all(match["path"] == {"type": "PathPrefix", "value": "/"} and match["headers"]
               for route in (route_a, route_b) for rule in route["spec"]["rules"] for match in rule["matches"])
    assert shadowing_routes(route_a, [route_b]) == [] and shadowing_routes(route_b, [route_a]) == []

    # Tenant B asks for tenant A's model name on the same Gateway: no route, a condition naming A.
    _create(api, second_namespace, _resource("thief"))

    def shadowed() -> dict[str, Any] | None:
        condition = _condition(_status(api, second_namespace, "thief"), "Routing")
        return condition if condition and condition["reason"] == "RouteShadowed" else None

    condition = wait_for("Routing RouteShadowed", shadowed, timeout_s=RESYNC_WAIT_S)
    assert condition["status"] == "False"
    assert f"HTTPRoute {namespace}/qwen of AscendLLMDeployment {namespace}/qwen on Gateway gateways/shared" \
        in condition["message"]
    assert _route(api, second_namespace, "thief") is None
    # The pool and the Endpoint Picker are still made: only the route is held back.
    assert custom.get_namespaced_custom_object("inference.networking.k8s.io", "v1", second_namespace,
                                               "inferencepools", "thief")
    wait_for("a Warning Event", lambda: [e for e in core.list_namespaced_event(second_namespace).items
                                         if e.reason == "RouteShadowed" and e.type == "Warning"], timeout_s=WAIT_S)
    # Tenant A's route is untouched.
    assert _models(_route(api, namespace, "qwen") or {"spec": {"rules": []}}) == _models(route_a)

    # Another served name: the route is made, and the condition leaves RouteShadowed. First a new
    # second: creationTimestamp has whole seconds, and between routes made in the same second the
    # Gateway API's tie-break is namespace/name (routeshadow._age), so the random namespaces would
    # decide which of the two later shadows the other.
    time.sleep(1.1)
    custom.patch_namespaced_custom_object("llm.ascend.dev", "v1alpha1", second_namespace, "ascendllmdeployments",
                                          "thief", {"spec": {"model": {"servedName": "thief-own"}}},
                                          _content_type="application/merge-patch+json")
    route_c = _wait_route(api, second_namespace, "thief", "the renamed route")
    assert _models(route_c) == {("X-Gateway-Model-Name", "thief-own")}
    wait_for("Routing not RouteShadowed", lambda: (_condition(_status(api, second_namespace, "thief"), "Routing")
                                                   or {}).get("reason") not in (None, "RouteShadowed"),
             timeout_s=RESYNC_WAIT_S)

    # Back to tenant A's model name: the route it had is deleted, and RouteShadowed again.
    custom.patch_namespaced_custom_object("llm.ascend.dev", "v1alpha1", second_namespace, "ascendllmdeployments",
                                          "thief", {"spec": {"model": {"servedName": "Qwen/Qwen2.5-0.5B-Instruct"}}},
                                          _content_type="application/merge-patch+json")
    wait_for("the shadowed route deleted", lambda: _route(api, second_namespace, "thief") is None,
             timeout_s=RESYNC_WAIT_S)
    assert wait_for("Routing RouteShadowed again", shadowed, timeout_s=RESYNC_WAIT_S)["status"] == "False"

    # Tenant A goes: its route is deleted (garbage collection), and the route it held back is made
    # at once, not at the next resync (RESYNC_S, 120 s here): a route's deletion asks again the
    # resources it shadowed (handle_events.child_event).
    custom.delete_namespaced_custom_object("llm.ascend.dev", "v1alpha1", namespace, "ascendllmdeployments", "qwen")
    wait_for("tenant A's route deleted", lambda: _route(api, namespace, "qwen") is None, timeout_s=WAIT_S)
    gone = time.monotonic()
    route_d = _wait_route(api, second_namespace, "thief", "the route no longer shadowed")
    assert time.monotonic() - gone < RESYNC_S / 2
    assert _models(route_d) == {("X-Gateway-Model-Name", "Qwen/Qwen2.5-0.5B-Instruct")}


def test_the_route_of_the_most_adapters_is_accepted_by_the_server(api: Any, namespace: str) -> None:
    """127 adapters and the served name: 128 matches in two rules, what Gateway API allows (its CEL)."""
    from ascend_operator.api import parse_spec
    from ascend_operator.builders.routing import build_route
    from ascend_operator.settings import OperatorSettings

    install_routing_crds(api)
    spec = parse_spec({"model": {"huggingFace": {"id": "Qwen/Qwen2.5-7B-Instruct"}, "cache": {"create": {"size": "50Gi"}}},
                       "routing": {"hostnames": ["llm.team-a.example.com"]},
                       "lora": {"adapters": [{"name": f"a{i}", "source": {"huggingFace": {"id": f"org/a{i}"}}}
                                             for i in range(127)]}})
    route = build_route("qwen", namespace, spec, OperatorSettings(routing_gateway_name="shared",
                                                                   routing_gateway_namespace="gateways"))
    assert route is not None
    accepted = _clients(api)[0].create_namespaced_custom_object(*ROUTE[:2], namespace, ROUTE[2], route, dry_run="All")
    assert sum(len(rule["matches"]) for rule in accepted["spec"]["rules"]) == 128
