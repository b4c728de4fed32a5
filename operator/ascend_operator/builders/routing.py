"""Prefix-aware routing of ``spec.routing`` (pure): the InferencePool, the Endpoint Picker, the HTTPRoute.

The Gateway API Inference Extension routes a request to the replica the Endpoint Picker (EPP)
chooses: the gateway asks the EPP (ext-proc, gRPC on 9002) which pod of the ``InferencePool``
should serve it, and the EPP scores the pods on their queue, KV-cache use (both read from each
engine's ``/metrics``) and on which pod already holds the request's prefix. What is built here
follows the llm-d router chart v0.10.0 (``../shared/reference/epp-chart``), gateway mode:

- ``InferencePool`` ``<name>`` (``inference.networking.k8s.io/v1``): ``selector`` = the serving
  pods' stable labels (:func:`ascend_operator.builders.common.serving_selector_labels`: name,
  instance, component; group leaders only for multi-node replicas), never the template hash, so a
  rollout never empties the pool; ``targetPorts`` the engine's port; ``endpointPickerRef`` the
  EPP Service.
- The EPP ``<name>-epp``: ServiceAccount, Role and RoleBinding (read pods and the pool, and the
  InferenceObjective / InferenceModelRewrite kinds the EPP watches, in the resource's namespace
  only: the chart's Role), ConfigMap (``EndpointPickerConfig`` of the chosen profile), Deployment
  (one replica, Recreate: the prefix index lives in the EPP's memory) and Service (ext-proc
  9002, health 9003, metrics 9090). The metrics port serves without authentication
  (``--metrics-endpoint-auth=false``): authentication would need TokenReview and
  SubjectAccessReview rights, cluster-wide.
- ``HTTPRoute`` ``<name>`` (``gateway.networking.k8s.io/v1``) from the Gateway of
  ``spec.routing.gateway`` (else the operator settings), matching only the resource's own model
  names in ``X-Gateway-Model-Name`` (on ``spec.routing.hostnames`` when set); none without a
  Gateway. :mod:`ascend_operator.routeshadow` says which other route on that Gateway would win
  over it.

:func:`routing_missing` says which API the cluster lacks; :func:`missing_engine_metrics` which
metric names the EPP reads an engine version does not publish.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import yaml
from ascend_runtime.config import DEFAULT_ENGINE_PORT
from packaging.version import InvalidVersion, Version

from ascend_operator.api import AscendLLMDeploymentSpec, RoutingProfile, display_model
from ascend_operator.builders.common import (
    common_labels,
    content_hash,
    selector_labels,
    serving_selector_labels,
    with_spec_hash,
)
from ascend_operator.names import safe_name
from ascend_operator.settings import OperatorSettings

INFERENCE_POOL_API_VERSION = "inference.networking.k8s.io/v1"
HTTP_ROUTE_API_VERSION = "gateway.networking.k8s.io/v1"
INFERENCE_INSTALL_HINT = (
    "install the Gateway API Inference Extension CRDs (kubectl apply -f https://github.com/kubernetes-sigs/"
    "gateway-api-inference-extension/releases/download/v1.6.0/manifests.yaml)"
)
GATEWAY_INSTALL_HINT = "install the Gateway API CRDs (v1.6 standard channel) and a Gateway implementation"
COMPONENT_EPP = "endpoint-picker"
EPP_EXT_PROC_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
#: The gRPC health service the EPP answers for its single replica (the chart's probes).
EPP_HEALTH_SERVICE = "inference-extension"
EPP_CONFIG_KEY = "epp-config.yaml"
EPP_CONFIG_DIR = "/config"
#: The EPP's requests: a small fraction of the chart's 8 CPUs / 8 GiB, which size it for many
#: pools; one pool of a few replicas needs little. The memory limit caps the prefix index.
EPP_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
#: The EPP image runs as a non-root user; the pod says so, so the restricted Pod Security level admits it.
EPP_RUN_AS_USER = 65532
#: The route's request timeout: generation takes minutes for long outputs (the chart's 300 s).
ROUTE_REQUEST_TIMEOUT = "300s"
#: The header the Inference Extension's body-based router (BBR) sets from the request body's
#: ``model`` field (gateway-api-inference-extension pkg/bbr): the served name or an adapter's.
MODEL_NAME_HEADER = "X-Gateway-Model-Name"
#: Gateway API's limit of matches in one HTTPRoute rule (and 128 in one route).
ROUTE_MATCHES_PER_RULE = 64
ROUTING_CONFIG_HASH_ANNOTATION = "llm.ascend.dev/epp-config-hash"

#: The scorers and weights of each profile (the chart's default is prefixCache's).
PROFILE_WEIGHTS: dict[RoutingProfile, tuple[tuple[str, int], ...]] = {
    RoutingProfile.PREFIX_CACHE: (("queue-scorer", 2), ("kv-cache-utilization-scorer", 2),
                                  ("prefix-cache-scorer", 3)),
    RoutingProfile.LOAD: (("queue-scorer", 1), ("kv-cache-utilization-scorer", 1)),
}


@dataclass(frozen=True)
class EngineMetric:
    """A metric the EPP's ``core-metrics-extractor`` reads from each vLLM pod, and the first vLLM
    version the operator knows to publish it."""

    name: str
    feeds: str
    since_vllm: str
    #: What older versions publish instead, if anything.
    older_name: str | None = None


#: The load metrics the EPP's default vLLM mapping reads (the scorers above use them). vLLM
#: renamed ``gpu_cache_usage_perc`` to ``kv_cache_usage_perc`` (vllm PR #18354, May 2025); 0.10.0
#: is the first release the operator has seen publishing it. The EPP also reads
#: ``vllm:lora_requests_info`` (LoRA) and ``vllm:cache_config_info`` (block size); they are not
#: version-checked here.
EPP_ENGINE_METRICS = (
    EngineMetric("vllm:num_requests_waiting", "queue-scorer", "0.6.0"),
    EngineMetric("vllm:num_requests_running", "queue-scorer", "0.6.0"),
    EngineMetric("vllm:kv_cache_usage_perc", "kv-cache-utilization-scorer", "0.10.0",
                 older_name="vllm:gpu_cache_usage_perc"),
)


@dataclass(frozen=True)
class RoutingNames:
    pool: str
    epp: str
    route: str

    @classmethod
    def for_resource(cls, name: str) -> RoutingNames:
        return cls(pool=safe_name(name), epp=safe_name(name, "epp"), route=safe_name(name))


@dataclass(frozen=True)
class GatewayTarget:
    """The Gateway an HTTPRoute attaches to (namespace None: the resource's)."""

    name: str
    namespace: str | None = None
    section_name: str | None = None


def routing_enabled(spec: AscendLLMDeploymentSpec) -> bool:
    return spec.routing is not None and spec.routing.enabled


def resolve_gateway(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> GatewayTarget | None:
    """``spec.routing.gateway``, else the settings' ``routing_gateway_*``, else None (no route)."""
    routing = spec.routing
    if routing is not None and routing.gateway is not None:
        ref = routing.gateway
        return GatewayTarget(ref.name, ref.namespace, ref.section_name)
    if settings.routing_gateway_name:
        return GatewayTarget(settings.routing_gateway_name, settings.routing_gateway_namespace)
    return None


def _serves(installed: AbstractSet[str], group_version: str) -> bool:
    return group_version in installed or group_version.split("/", 1)[0] in installed


def routing_missing(spec: AscendLLMDeploymentSpec, settings: OperatorSettings,
                    installed: AbstractSet[str]) -> str | None:
    """A message for a condition when ``spec.routing`` needs an API the cluster does not serve
    (``installed``: its group/versions); None when nothing is missing or routing is off."""
    if not routing_enabled(spec):
        return None
    missing = []
    if not _serves(installed, INFERENCE_POOL_API_VERSION):
        missing.append(f"{INFERENCE_POOL_API_VERSION} (InferencePool): {INFERENCE_INSTALL_HINT}")
    if resolve_gateway(spec, settings) is not None and not _serves(installed, HTTP_ROUTE_API_VERSION):
        missing.append(f"{HTTP_ROUTE_API_VERSION} (HTTPRoute): {GATEWAY_INSTALL_HINT}")
    if not missing:
        return None
    return ("spec.routing needs APIs the cluster does not serve: " + "; ".join(missing)
            + "; no routing object is made until then (the Service still serves), or remove spec.routing")


def missing_engine_metrics(vllm_version: str | None) -> list[EngineMetric]:
    """The metrics of :data:`EPP_ENGINE_METRICS` that vLLM ``vllm_version`` does not publish;
    none for an unknown version (nothing to say yet)."""
    try:
        version = Version(vllm_version.strip().lstrip("v")) if vllm_version else None
    except InvalidVersion:
        version = None
    if version is None:
        return []
    return [metric for metric in EPP_ENGINE_METRICS if version < Version(metric.since_vllm)]


def epp_config(profile: RoutingProfile) -> str:
    """The EPP's ``EndpointPickerConfig`` (llm-d router v0.10.0 format) for ``profile``."""
    weights = PROFILE_WEIGHTS[profile]
    config = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            *({"type": scorer} for scorer, _ in weights),
            {"type": "metrics-data-source",
             "parameters": {"scheme": "http", "path": "/metrics", "insecureSkipVerify": True}},
            {"type": "core-metrics-extractor"},
        ],
        "schedulingProfiles": [
            {"name": "default", "plugins": [{"pluginRef": scorer, "weight": weight} for scorer, weight in weights]},
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


#: The prefix-based decider sends a request to a prefill pod first only when at least this many
#: of its tokens are not cached on the decode pod chosen (the pinned router's sample value).
PD_NON_CACHED_TOKENS = 16


def pd_epp_config() -> str:
    """The EPP's config of a disaggregated resource: the pinned llm-d router's P/D sample
    (``deploy/config/pd-epp-config.yaml``): a ``decode`` profile on the ``llm-d.ai/role: decode``
    pods, and a ``prefill`` profile on the prefill pods that ``disagg-profile-handler`` runs only
    when ``prefix-based-pd-decider`` finds enough uncached tokens; the chart's metrics plugins."""
    scorers = [{"pluginRef": "prefix-cache-scorer", "weight": 2}, {"pluginRef": "queue-scorer", "weight": 1}]
    config = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "approx-prefix-cache-producer",
             "parameters": {"maxPrefixTokensToMatch": 16384, "lruCapacityPerServer": 31250}},
            {"type": "prefix-cache-scorer"},
            {"type": "queue-scorer"},
            {"type": "prefill-filter"},
            {"type": "decode-filter"},
            {"type": "max-score-picker"},
            {"type": "disagg-profile-handler", "parameters": {"deciders": {"prefill": "prefix-based-pd-decider"}}},
            {"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": PD_NON_CACHED_TOKENS}},
            {"type": "metrics-data-source",
             "parameters": {"scheme": "http", "path": "/metrics", "insecureSkipVerify": True}},
            {"type": "core-metrics-extractor"},
        ],
        "schedulingProfiles": [
            {"name": role, "plugins": [{"pluginRef": f"{role}-filter"}, {"pluginRef": "max-score-picker"}, *scorers]}
            for role in ("prefill", "decode")
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


# Least privilege: what the EPP of chart v0.10.0 reads, in the resource's namespace only.
EPP_ROLE_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["inference.networking.x-k8s.io"], "resources": ["inferenceobjectives", "inferencemodelrewrites"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["llm-d.ai"], "resources": ["inferenceobjectives", "inferencemodelrewrites"],
     "verbs": ["get", "list", "watch"]},
)


def _meta(name: str, namespace: str, object_name: str, component: str = COMPONENT_EPP) -> dict[str, Any]:
    return {"name": object_name, "namespace": namespace, "labels": common_labels(name, component)}


def _epp_selector(name: str) -> dict[str, str]:
    return {**selector_labels(name), "app.kubernetes.io/component": COMPONENT_EPP}


def _epp_deployment(name: str, namespace: str, names: RoutingNames, settings: OperatorSettings,
                    config_hash: str) -> dict[str, Any]:
    args = [
        "--pool-name", names.pool, "--pool-namespace", namespace, "--pool-group", "inference.networking.k8s.io",
        "--zap-encoder", "json", "--config-file", f"{EPP_CONFIG_DIR}/{EPP_CONFIG_KEY}",
        "--grpc-health-port", str(EPP_HEALTH_PORT), "--tracing=false", "--metrics-endpoint-auth=false",
    ]
    probe = {"grpc": {"port": EPP_HEALTH_PORT, "service": EPP_HEALTH_SERVICE}}
    container = {
        "name": "epp",
        "image": settings.epp_image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "ports": [
            {"name": "grpc", "containerPort": EPP_EXT_PROC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": EPP_METRICS_PORT, "protocol": "TCP"},
        ],
        "env": [
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "livenessProbe": {**probe, "initialDelaySeconds": 5, "periodSeconds": 10},
        "readinessProbe": {**probe, "periodSeconds": 2},
        "resources": EPP_RESOURCES,
        "volumeMounts": [{"name": "epp-config", "mountPath": EPP_CONFIG_DIR, "readOnly": True}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    return with_spec_hash({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, namespace, names.epp),
        "spec": {
            "replicas": 1,
            # One EPP holds the prefix index; a second one during a rolling update would split it.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": _epp_selector(name)},
            "template": {
                "metadata": {"labels": {**common_labels(name, COMPONENT_EPP)},
                             "annotations": {ROUTING_CONFIG_HASH_ANNOTATION: config_hash}},
                "spec": {
                    "serviceAccountName": names.epp,
                    "automountServiceAccountToken": True,  # the EPP watches pods and its pool
                    "enableServiceLinks": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": EPP_RUN_AS_USER,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    # The chart's value: the EPP drains in-flight picks before it stops.
                    "terminationGracePeriodSeconds": 130,
                    "containers": [container],
                    "volumes": [{"name": "epp-config", "configMap": {"name": names.epp}}],
                },
            },
        },
    })


def build_routing(name: str, namespace: str, spec: AscendLLMDeploymentSpec,
                  settings: OperatorSettings) -> tuple[dict[str, Any], ...]:
    """The routing children of ``spec.routing`` in apply order (the EPP's identity and rights
    before the pod that uses them, its config before it, the pool, the route last); ``()`` when
    routing is off."""
    routing = spec.routing
    if routing is None or not routing.enabled:
        return ()
    names = RoutingNames.for_resource(name)
    config_text = pd_epp_config() if spec.disaggregation is not None else epp_config(routing.profile)
    service_account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, namespace, names.epp)}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(name, namespace, names.epp),
            "rules": [dict(rule) for rule in EPP_ROLE_RULES]}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(name, namespace, names.epp),
        "subjects": [{"kind": "ServiceAccount", "name": names.epp, "namespace": namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.epp},
    }
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(name, namespace, names.epp),
                 "data": {EPP_CONFIG_KEY: config_text}}
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": _meta(name, namespace, names.epp),
        "spec": {
            "type": "ClusterIP",
            "selector": _epp_selector(name),
            "ports": [
                {"name": "grpc-ext-proc", "port": EPP_EXT_PROC_PORT, "targetPort": EPP_EXT_PROC_PORT,
                 "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"},
                {"name": "grpc-health", "port": EPP_HEALTH_PORT, "targetPort": EPP_HEALTH_PORT, "protocol": "TCP"},
                {"name": "http-metrics", "port": EPP_METRICS_PORT, "targetPort": EPP_METRICS_PORT, "protocol": "TCP"},
            ],
        },
    }
    pool = {
        "apiVersion": INFERENCE_POOL_API_VERSION, "kind": "InferencePool",
        "metadata": _meta(name, namespace, names.pool, "inference-pool"),
        "spec": {
            "selector": {"matchLabels": serving_selector_labels(name, spec.nodes_per_replica)},
            "targetPorts": [{"number": DEFAULT_ENGINE_PORT}],
            "appProtocol": "http",
            "endpointPickerRef": {"kind": "Service", "name": names.epp, "port": {"number": EPP_EXT_PROC_PORT},
                                  "failureMode": routing.failure_mode.value},
        },
    }
    objects = [service_account, role, binding, configmap,
               _epp_deployment(name, namespace, names, settings, content_hash(config_text)), service, pool]
    route = build_route(name, namespace, spec, settings)
    if route is not None:
        objects.append(route)
    return tuple(obj if obj["kind"] == "Deployment" else with_spec_hash(obj) for obj in objects)


def route_model_names(name: str, spec: AscendLLMDeploymentSpec) -> list[str]:
    """The model names the route sends to the pool: the served name, then each adapter's."""
    adapters = [adapter.name for adapter in spec.lora.adapters] if spec.lora is not None else []
    return [display_model(spec, name), *adapters]


def build_route(name: str, namespace: str, spec: AscendLLMDeploymentSpec,
                settings: OperatorSettings) -> dict[str, Any] | None:
    """The HTTPRoute ``<name>`` to the pool (no spec-hash yet), or None without a Gateway.

    A Gateway may front many tenants' models, so the route never claims the whole gateway: each
    match is one model name in the header the body-based router sets
    (:data:`MODEL_NAME_HEADER`), on ``spec.routing.hostnames`` (every host when empty)."""
    gateway = resolve_gateway(spec, settings)
    if gateway is None or spec.routing is None:
        return None
    parent: dict[str, Any] = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name}
    if gateway.namespace:
        parent["namespace"] = gateway.namespace
    if gateway.section_name:
        parent["sectionName"] = gateway.section_name
    matches = [{"path": {"type": "PathPrefix", "value": "/"},
                "headers": [{"type": "Exact", "name": MODEL_NAME_HEADER, "value": model}]}
               for model in route_model_names(name, spec)]
    backend = [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": RoutingNames.for_resource(name).pool}]
    rules = [{"matches": matches[start:start + ROUTE_MATCHES_PER_RULE], "backendRefs": backend,
              "timeouts": {"request": ROUTE_REQUEST_TIMEOUT}}
             for start in range(0, len(matches), ROUTE_MATCHES_PER_RULE)]
    route_spec: dict[str, Any] = {"parentRefs": [parent]}
    if spec.routing.hostnames:
        route_spec["hostnames"] = list(spec.routing.hostnames)
    route_spec["rules"] = rules
    return {"apiVersion": HTTP_ROUTE_API_VERSION, "kind": "HTTPRoute",
            "metadata": _meta(name, namespace, RoutingNames.for_resource(name).route, "route"), "spec": route_spec}


def pool_parents(pool: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``status.parents`` of a live InferencePool as ``{gateway, accepted, resolvedRefs, message}``
    (each condition's status, ``Unknown`` when the parent has not set it)."""
    out = []
    for parent in ((pool or {}).get("status") or {}).get("parents") or []:
        ref = parent.get("parentRef") or {}
        conditions = {c.get("type"): c for c in parent.get("conditions") or []}
        gateway = f"{ref['namespace']}/{ref.get('name')}" if ref.get("namespace") else str(ref.get("name"))
        messages = [f"{t}: {c.get('message')}" for t, c in conditions.items()
                    if c.get("status") != "True" and c.get("message")]
        out.append({
            "gateway": gateway,
            "accepted": (conditions.get("Accepted") or {}).get("status", "Unknown"),
            "resolvedRefs": (conditions.get("ResolvedRefs") or {}).get("status", "Unknown"),
            **({"message": "; ".join(messages)} if messages else {}),
        })
    return out

