"""spec.lora on a real API server: admission refuses bad adapter lists naming the field, the
adapters ConfigMap follows the spec, and an adapter added on a volume already mounted changes
only that ConfigMap (the Deployment's pod template, and so its pods, stay as they are). A hub
adapter added to a running resource gets its own fetch Job and enters the ConfigMap once that
Job completed, again without a new pod template or a new download of the model (kwok completes
a Job's pod at once; a ResourceQuota of 0 pods holds it back, as in tests/cluster/test_model_cache.py).

kwok runs no engine, so adapters are never loaded here (status.lora reports no replica);
status.lora from runtime states is covered in tests/unit/test_lora_operator.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from ascend_operator.api import GROUP, PLURAL, VERSION
from ascend_runtime.config import ADAPTERS_FILE_KEY, parse_adapter_set
from cluster_harness import OperatorUnderTest
from install_harness import wait_for
from test_model_cache import _batch, block_pods, jobs, unblock_pods, volume  # noqa: F401 (a fixture)
from test_operator import SMALL_CPU_SPEC, _clients, condition, create, get, raw

pytestmark = pytest.mark.cluster


def adapter(name: str, claim: str = "adapters") -> dict[str, Any]:
    return {"name": name, "source": {"pvc": {"claimName": claim, "subPath": f"qwen/{name}"}}}


def with_lora(**lora: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SMALL_CPU_SPEC)
    spec["model"]["servedName"] = "base"
    spec["lora"] = lora
    return spec


def adapter_names(api: Any, namespace: str, name: str) -> list[str] | None:
    configmap = raw(api, f"/api/v1/namespaces/{namespace}/configmaps/{name}-adapters")
    if configmap is None:
        return None
    adapters = parse_adapter_set(yaml.safe_load(configmap["data"][ADAPTERS_FILE_KEY]))
    return [a.name for a in adapters.adapters]


def deployment(api: Any, namespace: str, name: str) -> dict[str, Any]:
    return _clients(api)[1].read_namespaced_deployment(name, namespace).to_dict()


def set_adapters(api: Any, namespace: str, name: str, adapters: list[dict[str, Any]] | None) -> None:
    patch = {"spec": {"lora": {"adapters": adapters}}} if adapters is not None else {"spec": {"lora": None}}
    _clients(api)[0].patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch)


def test_adapters_on_a_mounted_claim_change_the_configmap_and_roll_no_pods(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    create(api, namespace, "lora", with_lora(adapters=[adapter("sql")]))
    wait_for("the adapters ConfigMap", lambda: adapter_names(api, namespace, "lora") == ["sql"])
    wait_for("the Deployment", lambda: raw(api, f"/apis/apps/v1/namespaces/{namespace}/deployments/lora"))
    before = deployment(api, namespace, "lora")

    set_adapters(api, namespace, "lora", [adapter("sql"), adapter("chat")])
    wait_for("chat in the ConfigMap", lambda: adapter_names(api, namespace, "lora") == ["sql", "chat"])
    wait_for("the status of generation 2",
             lambda: (get(api, namespace, "lora").get("status") or {}).get("observedGeneration") == 2)
    # kwok runs no runtime: no replica reports, and the server keeps status.lora as written.
    assert get(api, namespace, "lora")["status"]["lora"] == {"replicas": 0, "adapters": [
        {"name": "sql", "loaded": 0, "failed": 0}, {"name": "chat", "loaded": 0, "failed": 0}]}
    after = deployment(api, namespace, "lora")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]

    # An adapter on another claim needs a volume: a new pod template (a rollout).
    set_adapters(api, namespace, "lora", [adapter("sql"), adapter("chat"), adapter("new", claim="more")])
    wait_for("a new pod template", lambda: deployment(api, namespace, "lora")["metadata"]["generation"]
             > before["metadata"]["generation"])
    claims = [v["persistent_volume_claim"]["claim_name"] for v in deployment(api, namespace, "lora")["spec"][
        "template"]["spec"]["volumes"] if v.get("persistent_volume_claim")]
    assert sorted(claims) == ["adapters", "more"]

    # LoRA off: the ConfigMap goes.
    set_adapters(api, namespace, "lora", None)
    wait_for("the adapters ConfigMap to go", lambda: adapter_names(api, namespace, "lora") is None)


def test_a_hub_adapter_added_to_a_running_resource_is_downloaded_then_listed_and_rolls_no_pods(
        api: Any, namespace: str, operator: OperatorUnderTest, volume: Any) -> None:
    spec = with_lora(adapters=[adapter("sql")])
    spec["model"].update({"revision": "main", "cache": {"create": {"size": "10Gi", "storageClassName": volume()}}})
    create(api, namespace, "hub", spec)
    (model_job,) = wait_for("the model's fetch Job", lambda: jobs(api, namespace) or None)
    wait_for("the Deployment", lambda: raw(api, f"/apis/apps/v1/namespaces/{namespace}/deployments/hub"))
    wait_for("the adapters ConfigMap", lambda: adapter_names(api, namespace, "hub") == ["sql"])
    before = deployment(api, namespace, "hub")

    block_pods(api, namespace)  # the adapter's fetch pod waits: its download is not complete
    hub_adapter = {"name": "chat", "source": {"huggingFace": {"id": "org/chat-lora", "revision": "v1"}}}
    set_adapters(api, namespace, "hub", [adapter("sql"), hub_adapter])
    adapter_job = wait_for("the adapter's fetch Job", lambda: next(
        (j for j in jobs(api, namespace) if j.metadata.name.startswith("hub-adapter-")), None))
    status = wait_for("status.lora with the download", lambda: (s := (get(api, namespace, "hub").get("status") or {})
                      .get("lora")) and len(s["adapters"]) == 2 and s)
    download = status["adapters"][1]["download"]
    assert (download["source"], download["job"], download["phase"]) == (
        "huggingface:org/chat-lora@v1", adapter_job.metadata.name, "Pending")
    assert adapter_names(api, namespace, "hub") == ["sql"]  # not listed before the download completed

    unblock_pods(api, namespace)
    wait_for("chat in the ConfigMap once its Job completed",
             lambda: adapter_names(api, namespace, "hub") == ["sql", "chat"], timeout_s=90)
    done = _batch(api).read_namespaced_job(adapter_job.metadata.name, namespace)
    assert any(c.type == "Complete" and c.status == "True" for c in done.status.conditions or [])
    configmap = raw(api, f"/api/v1/namespaces/{namespace}/configmaps/hub-adapters")
    chat = parse_adapter_set(yaml.safe_load(configmap["data"][ADAPTERS_FILE_KEY])).adapters[1]
    assert chat.path == "/var/cache/ascend-llm-model/models/huggingface/org/chat-lora/v1"
    assert chat.cache_marker == "/var/cache/ascend-llm-model/models/huggingface/org/chat-lora/v1.complete.json"
    wait_for("the download Complete in status.lora", lambda: get(api, namespace, "hub")["status"]["lora"][
        "adapters"][1]["download"]["phase"] == "Complete")
    # The running pods stay as they were, and the model is not downloaded again.
    after = deployment(api, namespace, "hub")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]
    model_jobs = [j for j in jobs(api, namespace) if not j.metadata.name.startswith("hub-adapter-")]
    assert [j.metadata.uid for j in model_jobs] == [model_job.metadata.uid]

    # The completed Job deleted (a TTL controller, a clean-up): a new one is made, and the adapter the
    # pods serve stays listed meanwhile (it is not unloaded and loaded again).
    block_pods(api, namespace)
    _batch(api).delete_namespaced_job(adapter_job.metadata.name, namespace, propagation_policy="Background")
    wait_for("a new adapter fetch Job", lambda: any(
        j.metadata.name == adapter_job.metadata.name and j.metadata.uid != adapter_job.metadata.uid
        for j in jobs(api, namespace)))
    wait_for("the new download Pending in status.lora", lambda: get(api, namespace, "hub")["status"]["lora"][
        "adapters"][1]["download"]["phase"] == "Pending")
    assert adapter_names(api, namespace, "hub") == ["sql", "chat"]
    unblock_pods(api, namespace)

    # Removing it drops its entry and its Job; still no rollout.
    set_adapters(api, namespace, "hub", [adapter("sql")])
    wait_for("chat gone from the ConfigMap", lambda: adapter_names(api, namespace, "hub") == ["sql"])
    wait_for("the adapter's Job deleted", lambda: all(
        not j.metadata.name.startswith("hub-adapter-") or j.metadata.deletion_timestamp for j in jobs(api, namespace)))
    assert deployment(api, namespace, "hub")["spec"]["template"] == before["spec"]["template"]


def test_a_hub_adapters_download_holds_back_no_pod_and_a_failed_one_is_reported_and_replaced(
        api: Any, namespace: str, operator: OperatorUnderTest, volume: Any) -> None:
    # The operator's fetch Jobs have a 20 s deadline here and are retried 3 s after failing.
    block_pods(api, namespace)
    spec = with_lora(adapters=[{"name": "chat", "source": {"modelScope": {"id": "org/chat-lora"}}}])
    spec["model"] = {"pvc": {"claimName": "weights"}, "servedName": "base", "sizeGiB": 1,
                     "cache": {"create": {"size": "10Gi", "storageClassName": volume()}}}
    create(api, namespace, "late", spec)
    (first,) = wait_for("the adapter's fetch Job", lambda: jobs(api, namespace) or None)
    assert first.metadata.name.startswith("late-adapter-")
    wait_for("the Deployment, while the adapter's download waits",
             lambda: raw(api, f"/apis/apps/v1/namespaces/{namespace}/deployments/late"))
    assert adapter_names(api, namespace, "late") == []

    download = wait_for("the download Failed in status.lora", lambda: (d := (get(api, namespace, "late").get(
        "status") or {}).get("lora", {}).get("adapters", [{}])[0].get("download")) and d["phase"] == "Failed" and d,
        timeout_s=90)
    assert download["reason"] == "DeadlineExceeded"
    assert download["message"].startswith("downloading modelscope:org/chat-lora@default failed (DeadlineExceeded)")
    events = _clients(api)[2].list_namespaced_event(namespace, field_selector="involvedObject.name=late").items
    assert [e.message for e in events if e.type == "Warning" and e.reason == "AdapterDownloadFailed"] == [
        f"adapter chat is not served: {download['message']}; the fetch Job is made again after the operator's "
        "fetch retry interval"]
    wait_for("a new adapter fetch Job", lambda: any(j.metadata.uid != first.metadata.uid for j in jobs(api, namespace)),
             timeout_s=90)
    unblock_pods(api, namespace)
    wait_for("chat in the ConfigMap", lambda: adapter_names(api, namespace, "late") == ["chat"], timeout_s=90)


def test_a_hub_adapter_id_the_cache_cannot_store_is_refused_at_reconcile(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    spec = with_lora(adapters=[adapter("sql"), {"name": "odd", "source": {"huggingFace": {"id": "org/.hidden"}}}])
    spec["model"]["cache"] = {"claimName": "shared"}
    create(api, namespace, "odd", spec)
    refused = wait_for("InvalidSpec", lambda: (c := condition(get(api, namespace, "odd"), "InvalidSpec"))
                       .get("status") == "True" and c)
    assert "spec.lora.adapters[1].source.huggingFace: " in refused["message"]
    assert "not a hub repo id" in refused["message"]
    assert raw(api, f"/apis/apps/v1/namespaces/{namespace}/deployments/odd") is None and not jobs(api, namespace)


def test_a_hub_adapter_without_a_claim_cache_is_refused_at_admission(api: Any, namespace: str, crds: list[str]) -> None:
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as refused:
        create(api, namespace, "bad", with_lora(adapters=[
            {"name": "chat", "source": {"modelScope": {"id": "org/chat-lora"}}}]))
    assert refused.value.status == 422
    body = refused.value.body
    assert "spec.lora.adapters" in body and "set spec.model.cache.create or spec.model.cache.claimName" in body


@pytest.mark.parametrize(("lora", "field", "words"), [
    ({"adapters": [adapter("a"), adapter("a")]}, "spec.lora.adapters", "adapter names must be unique"),
    ({"adapters": [adapter("base")]}, "spec.lora.adapters", "named like the base model"),
    ({"maxRank": 12}, "spec.lora.maxRank", "one of 1, 8, 16, 32, 64, 128, 256, 320, 512"),
    ({"maxRank": 1024}, "spec.lora.maxRank", "a rank vLLM accepts"),
    ({"maxLoras": 4, "maxCpuLoras": 2}, "spec.lora.maxCpuLoras", "at least maxLoras"),
    ({"enabled": False, "adapters": [adapter("a")]}, "spec.lora.adapters", "only with LoRA enabled"),
    ({"adapters": [{"name": "a", "source": {"pvc": {"claimName": "x", "subPath": "../up"}}}]},
     "spec.lora.adapters[0].source.pvc.subPath", "stay inside the volume"),
])
def test_admission_refuses_bad_lora_naming_the_field(
        api: Any, namespace: str, crds: list[str], lora: dict[str, Any], field: str, words: str) -> None:
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as refused:
        create(api, namespace, "bad", with_lora(**lora))
    assert refused.value.status == 422
    assert field in refused.value.body and words in refused.value.body, refused.value.body


def test_lora_under_tensor_parallel_on_the_default_image_is_refused_at_reconcile(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    spec = {"model": {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}, "sizeGiB": 1},
            "npu": {"perReplica": 2}, "parallelism": {"tensor": 2}, "lora": {"adapters": [adapter("sql")]}}
    create(api, namespace, "tp", spec)
    refused = wait_for("InvalidSpec", lambda: (c := condition(get(api, namespace, "tp"), "InvalidSpec"))
                       .get("status") == "True" and c)
    assert "spec.parallelism.tensor" in refused["message"] and "vllm-ascend v0.23.0" in refused["message"]
    assert raw(api, f"/apis/apps/v1/namespaces/{namespace}/deployments/tp") is None


def test_lora_with_quantization_on_the_default_image_is_served_with_a_warning(
        api: Any, namespace: str, operator: OperatorUnderTest) -> None:
    spec = {"model": {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}, "sizeGiB": 1},
            "engine": {"quantization": "ascend"}, "lora": {"adapters": [adapter("sql")]}}
    create(api, namespace, "quant", spec)
    warned = wait_for("LoraWarning", lambda: (c := condition(get(api, namespace, "quant"), "LoraWarning"))
                      .get("status") == "True" and c)
    assert warned["reason"] == "KnownEngineLimitation"
    assert warned["message"].startswith("spec.lora.enabled with spec.engine.quantization ascend: vllm-ascend v0.23.0")
    assert condition(get(api, namespace, "quant"), "InvalidSpec")["status"] == "False"
    wait_for("the Deployment", lambda: raw(api, f"/apis/apps/v1/namespaces/{namespace}/deployments/quant"))
    core = _clients(api)[2]
    events = wait_for("the Warning Event", lambda: [
        e for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name=quant").items
        if e.type == "Warning" and e.reason == "KnownEngineLimitation"] or None)
    assert len(events) == 1 and events[0].message == warned["message"] and (events[0].count or 1) == 1
