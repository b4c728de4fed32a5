"""The model cache on the real API server: what admission refuses so that no child is refused later.

A cache claim's storage class and access mode cannot change once the claim exists, nor can its
size shrink (the server would refuse the claim's update, leaving the resource half-applied), and a
cache ``hostPath`` must be normalised like every other host path.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.cluster

HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B"}}


def body(name: str, cache: dict[str, Any]) -> dict[str, Any]:
    from ascend_operator.api import API_VERSION, KIND

    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name},
            "spec": {"platform": "CPU", "model": {**HF, "cache": cache}}}


def refusal(error: Any) -> list[tuple[str, str]]:
    details = json.loads(error.body).get("details") or {}
    return [(c.get("field", ""), c.get("message", "")) for c in details.get("causes") or []]


@pytest.mark.parametrize(("change", "field"), [
    ({"storageClassName": "ceph"}, "spec.model.cache.create.storageClassName"),
    ({"accessMode": "ReadWriteOnce"}, "spec.model.cache.create.accessMode"),
])
def test_a_cache_claim_s_fixed_fields_cannot_change_but_its_size_can(
        api_client: Any, crd_installed: None, make_namespace: Any, change: dict[str, str], field: str) -> None:
    import kubernetes
    from ascend_operator.api import GROUP, PLURAL, VERSION

    namespace = make_namespace()
    custom = kubernetes.client.CustomObjectsApi(api_client)
    create = {"size": "10Gi", "storageClassName": "nfs"}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body("c", {"create": create}))
    patch = {"spec": {"model": {"cache": {"create": {**create, **change}}}}}
    with pytest.raises(kubernetes.client.ApiException) as error:
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "c", patch)
    assert error.value.status == 422
    assert any(f == field and "cannot change" in m for f, m in refusal(error.value)), refusal(error.value)
    grown = {"spec": {"model": {"cache": {"create": {**create, "size": "20Gi"}}}}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "c", grown)


def test_a_cache_claim_s_size_cannot_shrink_at_admission(
        api_client: Any, crd_installed: None, make_namespace: Any) -> None:
    import kubernetes
    from ascend_operator.api import GROUP, PLURAL, VERSION

    namespace = make_namespace()
    custom = kubernetes.client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body("c", {"create": {"size": "1Ti"}}))
    with pytest.raises(kubernetes.client.ApiException) as error:  # 1000Gi < 1Ti: compared as quantities
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "c",
                                              {"spec": {"model": {"cache": {"create": {"size": "1000Gi"}}}}})
    assert error.value.status == 422
    assert any(f == "spec.model.cache.create.size" and "cannot shrink" in m
               for f, m in refusal(error.value)), refusal(error.value)
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "c",
                                          {"spec": {"model": {"cache": {"create": {"size": "1100Gi"}}}}})


@pytest.mark.parametrize("path", ["/data/llm-cache/../../etc", "/data/llm-cache/./x", "/data/llm-cache/.."])
def test_a_cache_host_path_that_is_not_normalised_is_refused_at_admission(
        api_client: Any, crd_installed: None, make_namespace: Any, path: str) -> None:
    import kubernetes
    from ascend_operator.api import GROUP, PLURAL, VERSION

    namespace = make_namespace()
    custom = kubernetes.client.CustomObjectsApi(api_client)
    with pytest.raises(kubernetes.client.ApiException) as error:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body("h", {"hostPath": path}))
    assert error.value.status == 422
    assert any(f == "spec.model.cache.hostPath" and "normalised" in m for f, m in refusal(error.value)), \
        refusal(error.value)
