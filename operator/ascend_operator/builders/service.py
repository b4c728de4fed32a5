"""The Service in front of the engine pods (pure).

For multi-node replicas it selects the group leaders only (the workers run headless): the
selector is :func:`ascend_operator.builders.common.serving_selector_labels`.
"""

from __future__ import annotations

from typing import Any

from ascend_runtime.config import DEFAULT_RUNTIME_PORT

from ascend_operator.api import AscendLLMDeploymentSpec
from ascend_operator.builders.common import common_labels, serving_selector_labels, with_spec_hash


def build_service(
    name: str, namespace: str, service_name: str, spec: AscendLLMDeploymentSpec
) -> dict[str, Any]:
    """Service: port ``http`` (spec.service.port -> the engine) and ``metrics`` (the runtime)."""
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
