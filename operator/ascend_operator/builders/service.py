"""The Services in front of the engine pods (pure).

Two Services, so that what is exposed to clients carries only the OpenAI API:

- ``<name>`` (``spec.service.type``, possibly a LoadBalancer): port ``http`` -> the engine;
- ``<name>-runtime`` (headless: ``clusterIP: None``): port ``metrics`` -> the runtime
  (``/metrics``, ``/state``, the probes' endpoints), which the chart's ServiceMonitor selects by
  the label ``app.kubernetes.io/component: runtime``. Its readers (Prometheus, the operator) go
  to each pod, never through a virtual IP, so it takes no cluster IP: no address for the API
  server to allocate (with 1,000 resources applied at once, a Service with one took it 4.2 s on
  average against 0.09 s for a Deployment: bench/README.md) and no kube-proxy rules on the nodes.

For multi-node replicas both select the group leaders only (the workers run headless): the
selector is :func:`ascend_operator.builders.common.serving_selector_labels`.
"""

from __future__ import annotations

from typing import Any

from ascend_runtime.config import DEFAULT_RUNTIME_PORT

from ascend_operator.api import AscendLLMDeploymentSpec
from ascend_operator.builders.common import (
    COMPONENT_RUNTIME,
    common_labels,
    serving_selector_labels,
    with_spec_hash,
)


def build_service(
    name: str, namespace: str, service_name: str, spec: AscendLLMDeploymentSpec
) -> dict[str, Any]:
    """The clients' Service: port ``http`` (spec.service.port -> the engine) only."""
    return with_spec_hash(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service_name, "namespace": namespace, "labels": common_labels(name)},
            "spec": {
                "type": spec.service.type.value,
                "selector": serving_selector_labels(name, spec.nodes_per_replica),
                "ports": [
                    {"name": "http", "port": spec.service.port, "targetPort": "http", "protocol": "TCP"},
                ],
            },
        }
    )


def build_runtime_service(
    name: str, namespace: str, service_name: str, spec: AscendLLMDeploymentSpec
) -> dict[str, Any]:
    """The in-cluster Service of the runtime port: headless, port ``metrics`` -> ``runtime``."""
    return with_spec_hash(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": service_name,
                "namespace": namespace,
                "labels": common_labels(name, COMPONENT_RUNTIME),
            },
            "spec": {
                "type": "ClusterIP",
                "clusterIP": "None",
                "selector": serving_selector_labels(name, spec.nodes_per_replica),
                "ports": [
                    {
                        "name": "metrics",
                        "port": DEFAULT_RUNTIME_PORT,
                        "targetPort": "runtime",
                        "protocol": "TCP",
                    },
                ],
            },
        }
    )


def endpoint_url(
    service_name: str, namespace: str, spec: AscendLLMDeploymentSpec, cluster_domain: str
) -> str:
    """In-cluster base URL of the OpenAI API (``status.endpoint``)."""
    return f"http://{service_name}.{namespace}.svc.{cluster_domain}:{spec.service.port}/v1"
