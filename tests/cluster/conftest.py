"""Session fixtures of the cluster tier: one API client, the CRD installed once (server-side
apply from crds/), and namespaces made on demand (optionally with Pod Security labels)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ESTABLISH_TIMEOUT_S = 60
SA_TIMEOUT_S = 30


@pytest.fixture(scope="session")
def api_client(kubeconfig_path: str) -> Iterator[Any]:
    import kubernetes

    client = kubernetes.config.new_client_from_config(config_file=kubeconfig_path)
    yield client
    client.close()


@pytest.fixture(scope="session")
def crd_installed(api_client: Any) -> None:
    """The CRD of crds/, server-side applied and Established (once per session)."""
    import kubernetes
    from ascend_operator.crdgen import CRD_NAME, CRD_PATHS

    body = yaml.safe_load((ROOT / CRD_PATHS[0]).read_text(encoding="utf-8"))
    api = kubernetes.client.ApiextensionsV1Api(api_client)
    api.patch_custom_resource_definition(CRD_NAME, body, field_manager="ascend-llm-tests", force=True,
                                         _content_type="application/apply-patch+yaml")
    deadline = time.monotonic() + ESTABLISH_TIMEOUT_S
    while time.monotonic() < deadline:
        conditions = api.read_custom_resource_definition(CRD_NAME).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(0.2)
    pytest.fail(f"CRD {CRD_NAME} not established after {ESTABLISH_TIMEOUT_S}s")


@pytest.fixture
def make_namespace(api_client: Any) -> Iterator[Callable[..., str]]:
    """``make_namespace(labels)``: a fresh namespace whose default ServiceAccount exists; deleted after."""
    import kubernetes

    core = kubernetes.client.CoreV1Api(api_client)
    made: list[str] = []

    def make(labels: dict[str, str] | None = None) -> str:
        name = f"tenancy-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        made.append(name)
        deadline = time.monotonic() + SA_TIMEOUT_S
        while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
            if time.monotonic() > deadline:
                pytest.fail(f"namespace {name} got no default ServiceAccount in {SA_TIMEOUT_S}s")
            time.sleep(0.1)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)
