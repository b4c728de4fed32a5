"""The baseline of ``bench/operator_scale.py``: the least a kopf operator for
``AscendLLMDeployment`` can do, so the benchmark can say what the project's operator costs on top.

On create and on resume it server-side applies the same kinds of children as the project's
operator (a ConfigMap, a Deployment, a Service and a PodDisruptionBudget), each with an owner
reference to the resource, and writes a trivial status (``observedGeneration``). Nothing else: no
resync, no drift repair, no pod reading, no validation. kopf's defaults are kept, except that
handler successes are not posted as Events (the project's operator does not post them either, so
the baseline does not pay writes the project's operator does not make). With
``MINIMAL_OPERATOR_SAME_CHILDREN=1`` (the benchmark's ``minimal-same``) it applies, instead of its
own four small children, exactly the children the project's operator makes (its pure builders:
what ``ascend-llm render`` prints), so that the product's objects and the operator's own cost
can be told apart.

Run: ``KUBECONFIG=... kopf run --standalone -n NS bench/minimal_operator.py``.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import kopf
import kubernetes

GROUP = "llm.ascend.dev"
VERSION = "v1alpha1"
PLURAL = "ascendllmdeployments"
KIND = "AscendLLMDeployment"
FIELD_MANAGER = "minimal-operator"
APPLY = "application/apply-patch+yaml"
IMAGE = "ghcr.io/ascend-llm/runtime:0.1.0-vllm-cpu"
ENGINE_PORT = 8000


def children(name: str, namespace: str, uid: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The children of one resource (four small ones, or the project's), owned by it (the garbage
    collector deletes them)."""

    labels = {"app.kubernetes.io/name": "minimal-operator", "app.kubernetes.io/instance": name}
    owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": name, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}

    def meta(child_name: str) -> dict[str, Any]:
        return {"name": child_name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]}

    container = {"name": "engine", "image": IMAGE, "ports": [{"name": "http", "containerPort": ENGINE_PORT}],
                 "resources": spec.get("resources") or {}}
    if os.environ.get("MINIMAL_OPERATOR_SAME_CHILDREN") == "1":
        return rendered(name, namespace, spec, owner)
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{name}-config"),
         "data": {"spec.json": json.dumps(spec, sort_keys=True)}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name),
         "spec": {"replicas": spec.get("replicas", 1), "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta(name),
         "spec": {"selector": labels,
                  "ports": [{"name": "http", "port": ENGINE_PORT, "targetPort": "http"}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(name),
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
    ]


def rendered(name: str, namespace: str, spec: dict[str, Any], owner: dict[str, Any]) -> list[dict[str, Any]]:
    """The project's children of the resource, as its builders make them, owned by it."""

    from ascend_operator.api import parse_spec
    from ascend_operator.builders import BuildMeta, build_children
    from ascend_operator.settings import load_settings

    objects = build_children(BuildMeta(name, namespace, 1), parse_spec(spec), load_settings()).objects()
    for obj in objects:
        obj["metadata"]["ownerReferences"] = [owner]
    return objects


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.level = logging.WARNING
    kubernetes.config.load_kube_config()  # KUBECONFIG, as kopf's own login
    api = kubernetes.client.ApiClient()
    memo["apply"] = {
        "ConfigMap": kubernetes.client.CoreV1Api(api).patch_namespaced_config_map,
        "Deployment": kubernetes.client.AppsV1Api(api).patch_namespaced_deployment,
        "Service": kubernetes.client.CoreV1Api(api).patch_namespaced_service,
        "PodDisruptionBudget": kubernetes.client.PolicyV1Api(api).patch_namespaced_pod_disruption_budget,
    }


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
def reconcile(name: str, namespace: str, uid: str, spec: kopf.Spec, meta: kopf.Meta, patch: kopf.Patch,
              memo: kopf.Memo, **_: Any) -> None:
    for child in children(name, namespace, uid, json.loads(json.dumps(dict(spec)))):
        memo["apply"][child["kind"]](child["metadata"]["name"], namespace, child, field_manager=FIELD_MANAGER,
                                     force=True, _content_type=APPLY)
    patch.status["observedGeneration"] = meta.get("generation")
