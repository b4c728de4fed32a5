"""The real-cluster tier: the CRD, a CPU example and the operator on a real API server.

Skipped unless a kubeconfig is given (``--kubeconfig`` or ``KUBECONFIG``; see tests/conftest.py).
What it checks that the emulator cannot: the API server accepts the generated CRD (structural
schema, CEL rules) and the children the operator applies (real validation, defaulting,
server-side apply), the status subresource keeps the status the operator writes (no pruning),
and garbage collection removes the children. The operator runs in this process (standalone),
against a fresh namespace that is deleted afterwards.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def client(kubeconfig_path: str) -> Any:
    import kubernetes

    return kubernetes.config.new_client_from_config(config_file=kubeconfig_path)


@pytest.fixture(scope="module")
def namespace(client: Any) -> Iterator[str]:
    import kubernetes

    core = kubernetes.client.CoreV1Api(client)
    name = f"ascend-llm-test-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def crd(client: Any) -> None:
    import kubernetes
    from ascend_operator.crdgen import CRD_NAME, CRD_PATHS

    body = yaml.safe_load((ROOT / CRD_PATHS[0]).read_text(encoding="utf-8"))
    api = kubernetes.client.ApiextensionsV1Api(client)
    api.patch_custom_resource_definition(CRD_NAME, body, field_manager="ascend-llm-tests", force=True,
                                         _content_type="application/apply-patch+yaml")
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        conditions = api.read_custom_resource_definition(CRD_NAME).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(1)
    pytest.fail(f"CRD {CRD_NAME} not established after {TIMEOUT_S}s")


@pytest.fixture(scope="module")
def operator(kubeconfig_path: str, crd: None, namespace: str) -> Iterator[None]:
    import kopf
    from kopf.testing import KopfRunner

    # The operator reads its settings and the kubeconfig from the environment, as in a pod.
    env = {"KUBECONFIG": kubeconfig_path, "ASCEND_LLM_OPERATOR_RESYNC_INTERVAL_S": "2",
           "ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES": "/models",  # the example's hostPath model
           "ASCEND_LLM_OPERATOR_STANDALONE": "true"}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    # The client read KUBECONFIG when first imported (by the client fixture, before it was set).
    import kubernetes.config.kube_config as kube_config

    saved_location = kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = kubeconfig_path
    try:
        with KopfRunner(["run", "--standalone", "-n", namespace, "-m", "ascend_operator.main"],
                        settings=kopf.OperatorSettings()) as runner:
            yield
    finally:
        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = saved_location
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert runner.exception is None, runner.output


def _wait(what: str, check: Any) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(1)
    pytest.fail(f"timed out after {TIMEOUT_S}s waiting for {what}")


def test_cpu_example_gets_its_children_and_a_status(client: Any, namespace: str, operator: None) -> None:
    import kubernetes
    from ascend_operator.api import GROUP, PLURAL, VERSION

    custom = kubernetes.client.CustomObjectsApi(client)
    apps = kubernetes.client.AppsV1Api(client)
    core = kubernetes.client.CoreV1Api(client)
    example = yaml.safe_load((ROOT / "examples" / "cpu-tiny.yaml").read_text(encoding="utf-8"))
    example["metadata"]["namespace"] = namespace
    created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, example)
    name = created["metadata"]["name"]

    deployment = _wait("the Deployment", lambda: next(iter(apps.list_namespaced_deployment(
        namespace, label_selector=f"llm.ascend.dev/deployment={name}").items), None))
    assert deployment.metadata.owner_references[0].uid == created["metadata"]["uid"]
    assert core.read_namespaced_service(name, namespace).spec.ports[0].port == 8000
    status = _wait("a status", lambda: custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name).get("status", {}).get("observedGeneration"))
    assert status == 1

    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    _wait("garbage collection", lambda: not apps.list_namespaced_deployment(
        namespace, label_selector=f"llm.ascend.dev/deployment={name}").items)
