"""ascend_operator.k8s.Kube.served: cluster discovery, its cache and its failure policy.

Covered: the group/versions of ``GET /apis`` plus the core ``v1``; one request per TTL (a second
call inside it is answered from the cache, one after it asks again); a failed refresh keeps the
last answer; a failure with no earlier answer propagates (the reconcile is retried).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import kubernetes
import pytest
from ascend_operator.k8s import Kube
from kubernetes.client.exceptions import ApiException

APIS = {"kind": "APIGroupList", "groups": [
    {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]},
    {"name": "keda.sh", "versions": [{"groupVersion": "keda.sh/v1alpha1", "version": "v1alpha1"}]},
    {"name": "custom.metrics.k8s.io", "versions": [
        {"groupVersion": "custom.metrics.k8s.io/v1beta2", "version": "v1beta2"},
        {"groupVersion": "custom.metrics.k8s.io/v1beta1", "version": "v1beta1"}]},
]}


@dataclass
class _Response:
    data: bytes


@dataclass
class FakeApisApi:
    """Stands in for kubernetes.client.ApisApi: answers (or fails) and counts the calls."""

    answers: list[Any] = field(default_factory=list)
    calls: int = 0

    def get_api_versions(self, **_: Any) -> _Response:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return _Response(json.dumps(answer).encode())


def kube_with(api: FakeApisApi) -> Kube:
    kube = Kube(kubernetes.client.ApiClient(), field_manager="test")
    kube._apis["ApisApi"] = api
    return kube


async def test_served_lists_every_group_version_and_caches_for_the_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("ascend_operator.k8s.time.monotonic", lambda: clock[0])
    api = FakeApisApi([APIS, {"groups": []}])
    kube = kube_with(api)

    expected = frozenset({"v1", "apps/v1", "keda.sh/v1alpha1", "custom.metrics.k8s.io/v1beta2",
                          "custom.metrics.k8s.io/v1beta1"})
    assert await kube.served(300) == expected
    clock[0] += 299
    assert await kube.served(300) == expected and api.calls == 1  # from the cache
    clock[0] += 2
    assert await kube.served(300) == frozenset({"v1"}) and api.calls == 2  # KEDA was removed meanwhile


async def test_a_failed_refresh_keeps_the_last_answer_and_a_first_failure_raises(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr("ascend_operator.k8s.time.monotonic", lambda: clock[0])
    kube = kube_with(FakeApisApi([APIS, ApiException(status=503, reason="Service Unavailable")]))
    first = await kube.served(10)
    clock[0] += 11
    assert await kube.served(10) == first

    failing = kube_with(FakeApisApi([ApiException(status=503, reason="Service Unavailable")]))
    with pytest.raises(ApiException):
        await failing.served(10)
