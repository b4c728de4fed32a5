"""An administrator tightens a policy while a resource runs (real API server).

The operator restarted with the stricter settings refuses the resource on its next pass:
``InvalidSpec`` naming the field and the setting, one Warning Event, and no child touched, so
pods that already serve are not disrupted.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from install_harness import OperatorProcess, free_port, wait_for

pytestmark = pytest.mark.cluster

TIMEOUT_S = 90.0
SPEC = {"platform": "CPU", "model": {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B"}},
        "image": "docker.io/someone/vllm-cpu:1"}


def operator(kubeconfig: str, namespace: str, **policy: str) -> OperatorProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ASCEND_LLM_OPERATOR_")}
    env.update({"KUBECONFIG": kubeconfig, "PYTHONUNBUFFERED": "1", "ASCEND_LLM_OPERATOR_RESYNC_INTERVAL_S": "60",
                **{f"ASCEND_LLM_OPERATOR_{key}": value for key, value in policy.items()}})
    url = f"http://127.0.0.1:{free_port()}/healthz"
    return OperatorProcess(["--standalone", "-n", namespace, "--liveness", url], env).start()


def test_a_policy_tightened_later_refuses_the_running_resource_without_touching_its_children(
        api_client: Any, crd_installed: None, make_namespace: Any, kubeconfig_path: str) -> None:
    import kubernetes
    from ascend_operator.api import API_VERSION, GROUP, KIND, PLURAL, VERSION

    namespace = make_namespace()
    custom = kubernetes.client.CustomObjectsApi(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "running"}, "spec": SPEC})

    first = operator(kubeconfig_path, namespace)  # the defaults allow any image
    try:
        wait_for("the Deployment", lambda: apps.list_namespaced_deployment(namespace).items, timeout_s=TIMEOUT_S)
    finally:
        first.stop()
    before = apps.read_namespaced_deployment("running", namespace)

    second = operator(kubeconfig_path, namespace, ALLOWED_IMAGE_PREFIXES="registry.example.com/llm/")
    try:
        def refused() -> dict[str, Any] | None:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "running")
            return next((c for c in (obj.get("status") or {}).get("conditions") or []
                         if c["type"] == "InvalidSpec" and c["status"] == "True"), None)

        condition = wait_for("InvalidSpec after the policy changed", refused, timeout_s=TIMEOUT_S)
        warnings = wait_for("a Warning Event", lambda: [
            e for e in core.list_namespaced_event(namespace).items
            if e.type == "Warning" and e.involved_object.name == "running" and "spec.image" in (e.message or "")],
            timeout_s=TIMEOUT_S)
        time.sleep(3)  # further passes (the requeue) must not touch the children either
    finally:
        second.stop()
    assert "spec.image" in condition["message"] and "ALLOWED_IMAGE_PREFIXES" in condition["message"]
    assert len(warnings) == 1, [e.message for e in warnings]
    after = apps.read_namespaced_deployment("running", namespace)
    assert (after.metadata.uid, after.metadata.resource_version) == (before.metadata.uid,
                                                                      before.metadata.resource_version)
