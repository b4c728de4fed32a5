"""ascend_operator.k8s.Kube: creates of Services with a ClusterIP are limited in flight.

The API server allocates ClusterIPs one at a time under one lock for the cluster; a burst of
creates beyond a few only waits there (each holding a request seat, timing out with 504 after
60 s when thousands of resources are created at once: bench/README.md, issue 24). Covered: at
most ``cluster_ip_creates`` such creates in flight; headless Services, ExternalName Services,
other kinds and updates of existing Services are not held back.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kubernetes
import pytest
from ascend_operator.k8s import Kube, Outcome, allocates_cluster_ip

OWNER = "uid-1"


def service(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{"uid": OWNER}],
                         "annotations": {"llm.ascend.dev/spec-hash": "new"}},
            "spec": {"selector": {"app": name}, "ports": [{"port": 8000}], **spec}}


class CountingKube(Kube):
    """Applies take 20 ms each; the most in flight at once is recorded."""

    def __init__(self, limit: int) -> None:
        super().__init__(kubernetes.client.ApiClient(), field_manager="test", cluster_ip_creates=limit)
        self.in_flight = self.most = 0

    async def read(self, kind, namespace, name):  # noqa: ANN001, ANN201 - nothing exists yet
        return None

    async def apply(self, kind, child, *, dry_run=False):  # noqa: ANN001, ANN201
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.02)
        self.in_flight -= 1
        return dict(child)


async def test_creates_of_clusterip_services_keep_to_the_limit() -> None:
    kube = CountingKube(limit=2)
    results = await asyncio.gather(*(kube.ensure(service(f"s{i}"), OWNER) for i in range(10)))
    assert {r.outcome for r in results} == {Outcome.CREATED}
    assert kube.most == 2


@pytest.mark.parametrize("child", [
    service("h", clusterIP="None"),
    service("x", type="ExternalName", externalName="example.com"),
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {}},
], ids=["headless", "external-name", "configmap"])
async def test_creates_that_allocate_nothing_are_not_held_back(child: dict[str, Any]) -> None:
    kube = CountingKube(limit=1)
    children = []
    for i in range(6):
        one = {**child, "metadata": {**child["metadata"], "name": f"{child['metadata']['name']}{i}"}}
        children.append(one)
    await asyncio.gather(*(kube.ensure(one, OWNER) for one in children))
    assert kube.most == 6


async def test_updates_of_existing_clusterip_services_are_not_held_back() -> None:
    kube = CountingKube(limit=1)
    live = [{**service(f"s{i}"), "metadata": {**service(f"s{i}")["metadata"],
                                              "annotations": {"llm.ascend.dev/spec-hash": "old"}}}
            for i in range(4)]
    results = await asyncio.gather(*(kube.ensure(service(f"s{i}"), OWNER, live[i]) for i in range(4)))
    assert {r.outcome for r in results} == {Outcome.UPDATED}
    assert kube.most == 4


def test_allocates_cluster_ip() -> None:
    assert allocates_cluster_ip(service("a"))
    assert allocates_cluster_ip(service("a", type="NodePort"))
    assert not allocates_cluster_ip(service("a", clusterIP="None"))
    assert not allocates_cluster_ip(service("a", type="ExternalName"))
    assert not allocates_cluster_ip({"kind": "ConfigMap"})


def test_the_setting_refuses_no_slot_naming_the_variable() -> None:
    from ascend_operator.settings import SettingsError, load_settings

    assert load_settings({}).max_concurrent_cluster_ip_creates == 4
    with pytest.raises(SettingsError, match="ASCEND_LLM_OPERATOR_MAX_CONCURRENT_CLUSTER_IP_CREATES='0'"):
        load_settings({"ASCEND_LLM_OPERATOR_MAX_CONCURRENT_CLUSTER_IP_CREATES": "0"})
