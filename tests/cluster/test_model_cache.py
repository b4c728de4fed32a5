"""spec.model.cache on a real API server: the claim, the fetch Job, pods held back, retries.

kwok runs no container: a fetch Job's pod goes Running and then Succeeded at once, so these
tests check what the API server and the operator do around the download (the claim kept after
a delete, the workload made only after the Job completed, a Job that cannot run failing and
being replaced, a second resource on the same claim); the download itself runs for real in
tests/runtime/test_fetch.py against a local hub. A static PersistentVolume per test binds the
claims (the control plane has no storage provisioner). A ResourceQuota of 0 pods holds a Job's
pod back, the way a cluster short of quota would.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from ascend_operator.api import GROUP, PLURAL, VERSION
from install_harness import wait_for
from test_operator import condition, create, get

pytestmark = pytest.mark.cluster

HUB = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}, "revision": "main", "sizeGiB": 1}
CPU = {"platform": "CPU", "engine": {"kvCacheSpaceGiB": 1}}


def _core(api: Any) -> Any:
    import kubernetes
    return kubernetes.client.CoreV1Api(api)


def _batch(api: Any) -> Any:
    import kubernetes
    return kubernetes.client.BatchV1Api(api)


def _apps(api: Any) -> Any:
    import kubernetes
    return kubernetes.client.AppsV1Api(api)


@pytest.fixture
def volume(api: Any) -> Any:
    """A storage class name whose one static PersistentVolume binds the first claim that asks."""

    names: list[str] = []

    def make() -> str:
        name = f"cache-{uuid.uuid4().hex[:8]}"
        _core(api).create_persistent_volume({"metadata": {"name": name}, "spec": {
            "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": name,
            "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{name}"}}})
        names.append(name)
        return name

    yield make
    for name in names:
        _core(api).delete_persistent_volume(name)


def block_pods(api: Any, namespace: str) -> None:
    _core(api).create_namespaced_resource_quota(namespace, {"metadata": {"name": "no-pods"},
                                                            "spec": {"hard": {"pods": "0"}}})


def unblock_pods(api: Any, namespace: str) -> None:
    _core(api).delete_namespaced_resource_quota("no-pods", namespace)


def jobs(api: Any, namespace: str) -> list[Any]:
    return _batch(api).list_namespaced_job(namespace).items


def deployment(api: Any, namespace: str, name: str) -> Any:
    from kubernetes.client.exceptions import ApiException
    try:
        return _apps(api).read_namespaced_deployment(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def status_of(api: Any, namespace: str, name: str) -> dict[str, Any]:
    return get(api, namespace, name).get("status") or {}


def test_pods_wait_for_the_download_a_new_revision_too_and_the_claim_outlives_the_resource(
        api: Any, operator: Any, namespace: str, volume: Any) -> None:
    block_pods(api, namespace)
    create(api, namespace, "qwen", {**CPU, "model": {**HUB, "cache": {
        "create": {"size": "10Gi", "storageClassName": volume()}}}})

    (job,) = wait_for("the fetch Job", lambda: jobs(api, namespace) or None)
    claim = wait_for("the claim", lambda: _core(api).list_namespaced_persistent_volume_claim(namespace).items)[0]
    assert claim.metadata.name == "qwen-model-cache" and not claim.metadata.owner_references
    assert [o.kind for o in job.metadata.owner_references] == ["AscendLLMDeployment"]
    status = wait_for("phase Downloading", lambda: (s := status_of(api, namespace, "qwen")).get("phase")
                      == "Downloading" and s)
    assert status["modelCache"]["claimName"] == "qwen-model-cache"
    assert status["modelCache"]["retainedOnDelete"] is True
    assert status["modelCache"]["job"] == job.metadata.name
    assert condition(get(api, namespace, "qwen"), "ModelCached")["reason"] == "Downloading"
    assert deployment(api, namespace, "qwen") is None  # no serving pod before the cache is complete

    unblock_pods(api, namespace)
    made = wait_for("the Deployment, once the Job completed", lambda: deployment(api, namespace, "qwen"))
    done = _batch(api).read_namespaced_job(job.metadata.name, namespace)
    assert any(c.type == "Complete" and c.status == "True" for c in done.status.conditions or [])
    volumes = {v.name: v for v in made.spec.template.spec.volumes}
    assert volumes["model-cache"].persistent_volume_claim.claim_name == "qwen-model-cache"
    wait_for("ModelCached True", lambda: condition(get(api, namespace, "qwen"), "ModelCached").get("status")
             == "True")

    # A new revision: the running pods keep the old one until the new one is cached.
    import kubernetes
    block_pods(api, namespace)
    template = made.spec.template.metadata.annotations
    kubernetes.client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "qwen", {"spec": {"model": {"revision": "v2"}}})
    wait_for("ModelCached Downloading for v2", lambda: "@v2" in condition(
        get(api, namespace, "qwen"), "ModelCached").get("message", ""))
    assert deployment(api, namespace, "qwen").spec.template.metadata.annotations == template
    unblock_pods(api, namespace)
    wait_for("the Deployment rolled to v2", lambda: deployment(
        api, namespace, "qwen").spec.template.metadata.annotations != template)


    kubernetes.client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "qwen")
    wait_for("the Job and the Deployment garbage-collected",
             lambda: not jobs(api, namespace) and deployment(api, namespace, "qwen") is None)
    kept = _core(api).read_namespaced_persistent_volume_claim("qwen-model-cache", namespace)
    assert kept.metadata.deletion_timestamp is None


def test_a_second_resource_on_the_same_claim_uses_it(api: Any, operator: Any, namespace: str, volume: Any) -> None:
    create(api, namespace, "first", {**CPU, "model": {**HUB, "cache": {
        "create": {"size": "10Gi", "storageClassName": volume()}}}})
    wait_for("the first Deployment", lambda: deployment(api, namespace, "first"))
    create(api, namespace, "second", {**CPU, "model": {**HUB, "cache": {"claimName": "first-model-cache"}}})
    second = wait_for("the second Deployment", lambda: deployment(api, namespace, "second"))
    volumes = {v.name: v for v in second.spec.template.spec.volumes}
    assert volumes["model-cache"].persistent_volume_claim.claim_name == "first-model-cache"
    assert len(_core(api).list_namespaced_persistent_volume_claim(namespace).items) == 1
    assert status_of(api, namespace, "second")["modelCache"]["claimName"] == "first-model-cache"


def test_a_fetch_job_that_fails_is_reported_and_replaced(api: Any, operator: Any, namespace: str,
                                                         volume: Any) -> None:
    # The operator's fetch Jobs have a 20 s deadline here and are retried 3 s after failing.
    block_pods(api, namespace)
    create(api, namespace, "qwen", {**CPU, "model": {**HUB, "cache": {
        "create": {"size": "10Gi", "storageClassName": volume()}}}})
    (first,) = wait_for("the fetch Job", lambda: jobs(api, namespace) or None)
    failed = wait_for("phase Failed", lambda: (s := status_of(api, namespace, "qwen")).get("phase") == "Failed"
                      and s, timeout_s=90)
    assert failed["modelCache"]["reason"] == "DeadlineExceeded"
    progressing = condition(get(api, namespace, "qwen"), "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "DownloadFailed")
    events = _core(api).list_namespaced_event(namespace, field_selector="involvedObject.name=qwen").items
    assert any(e.type == "Warning" and "DeadlineExceeded" in (e.message or "") for e in events)

    def replaced() -> Any:
        now = jobs(api, namespace)
        return now if now and now[0].metadata.uid != first.metadata.uid else None

    wait_for("a new fetch Job", replaced, timeout_s=90)
    unblock_pods(api, namespace)
    wait_for("the Deployment", lambda: deployment(api, namespace, "qwen"), timeout_s=90)


def test_a_claim_of_someone_else_is_not_taken_over(api: Any, operator: Any, namespace: str) -> None:
    _core(api).create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": "qwen-model-cache"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    create(api, namespace, "qwen", {**CPU, "model": {**HUB, "cache": {"create": {"size": "10Gi"}}}})
    wait_for("a conflict", lambda: condition(get(api, namespace, "qwen"), "Progressing").get("reason")
             == "ChildConflict")
    claim = _core(api).read_namespaced_persistent_volume_claim("qwen-model-cache", namespace)
    assert claim.spec.resources.requests["storage"] == "1Gi" and not jobs(api, namespace)


def test_a_new_image_or_token_of_a_cached_resource_updates_the_workload_in_one_pass(
        api: Any, operator: Any, namespace: str, volume: Any) -> None:
    """A Job's template is immutable: the fetch Job runs the operator's own image (spec.image is
    not in it) and is named after its template, so a new token reference is a new Job; the
    request a fetch completed is remembered, so the workload is not held back by that Job."""
    import kubernetes

    spec = {**CPU, "image": "registry.example.com/llm/vllm-cpu:1.0",
            "model": {**HUB, "tokenSecretRef": {"name": "hf-a", "key": "token"},
                      "cache": {"create": {"size": "10Gi", "storageClassName": volume()}}}}
    create(api, namespace, "qwen", spec)
    made = wait_for("the Deployment, once the Job completed", lambda: deployment(api, namespace, "qwen"))
    (first,) = jobs(api, namespace)
    from ascend_operator.settings import OperatorSettings

    # The operator's own image, never spec.image (a tenant's code must not write to the cache).
    assert first.spec.template.spec.containers[0].image == OperatorSettings.model_fields["fetch_image"].default
    wait_for("status.modelCache.completedRequest",
             lambda: status_of(api, namespace, "qwen").get("modelCache", {}).get("completedRequest"))

    block_pods(api, namespace)  # no new fetch pod can run: nothing may wait for one
    kubernetes.client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "qwen",
        {"spec": {"image": "registry.example.com/llm/vllm-cpu:1.1",
                  "model": {"tokenSecretRef": {"name": "hf-b", "key": "token"}}}})
    rolled = wait_for("the Deployment on the new image", lambda: (
        d := deployment(api, namespace, "qwen")).spec.template.spec.containers[0].image.endswith(":1.1") and d)
    assert rolled.metadata.uid == made.metadata.uid
    (second,) = wait_for("the old Job replaced by the new token's", lambda: [
        j for j in jobs(api, namespace) if j.metadata.name != first.metadata.name] or None)
    env = second.spec.template.spec.containers[0].env
    assert [e.value_from.secret_key_ref.name for e in env if e.value_from is not None] == ["hf-b"]
    wait_for("the old Job deleted", lambda: first.metadata.name not in {j.metadata.name for j in jobs(api, namespace)})
    progressing = condition(get(api, namespace, "qwen"), "Progressing")
    assert progressing.get("reason") != "ChildRefused", progressing


def test_a_kept_claim_larger_than_a_new_size_is_refused_naming_the_field_and_blocks_nothing(
        api: Any, operator: Any, namespace: str, volume: Any) -> None:
    """A kept claim cannot shrink: the server would refuse the claim's update naming its own
    field, so the operator refuses it naming the spec's, and still makes the rest (the claim as
    it is serves)."""
    import kubernetes

    storage_class = volume()
    create(api, namespace, "qwen", {**CPU, "model": {**HUB, "cache": {
        "create": {"size": "10Gi", "storageClassName": storage_class}}}})
    wait_for("the Deployment", lambda: deployment(api, namespace, "qwen"))
    kubernetes.client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "qwen")
    wait_for("the Deployment garbage-collected", lambda: deployment(api, namespace, "qwen") is None)

    create(api, namespace, "qwen", {**CPU, "model": {**HUB, "cache": {
        "create": {"size": "5Gi", "storageClassName": storage_class}}}})
    refused = wait_for("the claim refused", lambda: (c := condition(get(api, namespace, "qwen"), "Progressing"))
                       .get("reason") == "ChildRefused" and c)
    assert "spec.model.cache.create.size 5Gi is below the claim's 10Gi" in refused["message"], refused
    wait_for("the Deployment made all the same", lambda: deployment(api, namespace, "qwen"))
    claim = _core(api).read_namespaced_persistent_volume_claim("qwen-model-cache", namespace)
    assert claim.spec.resources.requests["storage"] == "10Gi"
    events = _core(api).list_namespaced_event(namespace, field_selector="involvedObject.name=qwen").items
    assert any(e.type == "Warning" and "spec.model.cache.create.size" in (e.message or "") for e in events)
