"""Fixtures of the cluster tier: one real API server, the CRDs, one operator process, namespaces.

- ``api``: a kubernetes ``ApiClient`` for the session's cluster (``kubeconfig_path``: the given
  kubeconfig, else the local control plane of ``../shared/k8s``).
- ``crds``: this project's CRD (server-side applied from ``crds/``, as ``kubectl apply
  --server-side -f crds/`` does) and the add-on CRDs the examples use (LeaderWorkerSet, KEDA),
  once per session, waited for until Established.
- ``operator``: ``ascend-llm operator run --standalone`` as a subprocess (the pod's entrypoint),
  watching the namespaces ``op-*`` only, with a long resync interval so a test that sees a change
  within seconds shows a watch did it. Its output is kept (across restarts) for the tests to read;
  a failed test that used it reports the output's last lines.
- ``namespace``: a fresh ``op-*`` namespace per test, deleted afterwards.
- ``cluster_harness``: what test modules import (the operator process, its settings, a second
  watched namespace, the API server's own count of the operator's writes).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from install_harness import ROOT, wait_for
from cluster_harness import ADDON_CRDS, NAMESPACE_PREFIX, OperatorUnderTest, watched_namespace


@pytest.fixture(scope="session")
def api(kubeconfig_path: str) -> Any:
    import kubernetes

    return kubernetes.config.new_client_from_config(config_file=kubeconfig_path)


def _apply_crd(api: Any, path: Path) -> str:
    import kubernetes

    body = yaml.safe_load(path.read_text(encoding="utf-8"))
    ext = kubernetes.client.ApiextensionsV1Api(api)
    ext.patch_custom_resource_definition(body["metadata"]["name"], body, field_manager="ascend-llm-tests",
                                         force=True, _content_type="application/apply-patch+yaml")
    return body["metadata"]["name"]


@pytest.fixture(scope="session")
def crds(api: Any) -> list[str]:
    import kubernetes

    names = [_apply_crd(api, ROOT / "crds" / "llm.ascend.dev_ascendllmdeployments.yaml")]
    names += [_apply_crd(api, ROOT / "tests" / "data" / "crds" / name) for name in ADDON_CRDS]
    ext = kubernetes.client.ApiextensionsV1Api(api)

    def established() -> bool:
        for name in names:
            conditions = ext.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    wait_for("the CRDs to be established", established)
    return names


@pytest.fixture(scope="session")
def operator(kubeconfig_path: str, crds: list[str]) -> Iterator[OperatorUnderTest]:
    run = OperatorUnderTest(kubeconfig_path, {})
    run.start()
    try:
        yield run
    finally:
        run.stop()
        output = run.output()
        if "Traceback" in output:
            sys.stderr.write(output[-6000:])


@pytest.fixture
def namespace(api: Any) -> Iterator[str]:
    yield from watched_namespace(api)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that used the session's operator reports the tail of that operator's output
    (a resource it never reconciled is diagnosed there, not in the test's traceback)."""

    report = yield
    run = getattr(item, "funcargs", {}).get("operator")
    if report.failed and isinstance(run, OperatorUnderTest):
        report.sections.append(("the operator's last lines", "\n".join(run.output().splitlines()[-150:])))
    return report


# ----------------------------------------------------------------------------- tenancy tests


@pytest.fixture(scope="session")
def api_client(api: Any) -> Any:
    return api


@pytest.fixture(scope="session")
def crd_installed(crds: list[str]) -> None:
    """The CRD of crds/ server-side applied and Established (with the add-on CRDs)."""


@pytest.fixture
def make_namespace(api: Any) -> Iterator[Callable[..., str]]:
    """``make_namespace(labels)``: a fresh namespace (not one the session's operator watches)
    whose default ServiceAccount exists; deleted after."""
    import kubernetes

    core = kubernetes.client.CoreV1Api(api)
    made: list[str] = []

    def make(labels: dict[str, str] | None = None) -> str:
        name = f"tenancy-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        made.append(name)
        wait_for(f"namespace {name}'s default ServiceAccount", lambda: core.list_namespaced_service_account(
            name, field_selector="metadata.name=default").items)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)
