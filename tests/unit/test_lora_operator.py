"""spec.lora on the operator side: the children it builds, what rolls pods and what does not, the
guard at reconcile, the policy on adapter host paths, and status.lora from runtime states."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ascend_operator.api import AscendLLMDeploymentStatus, SpecError, parse_spec
from ascend_operator.builders import CONFIG_HASH_ANNOTATION, BuildMeta, Children, build_children
from ascend_operator.builders.modelcache import plan_cache
from ascend_operator.lora import enforce_lora, image_vllm_ascend, lora_problems, lora_warnings
from ascend_operator.lorastatus import adapters_settling, lora_events, lora_status
from ascend_operator.policy import enforce_policy
from ascend_operator.settings import load_settings
from ascend_operator.status import Observation, compute_status, transition_events
from ascend_runtime.config import (
    ADAPTERS_FILE_KEY,
    CONFIG_FILE_KEY,
    AdapterPhase,
    AdapterStatus,
    EngineConfig,
    RuntimePhase,
    RuntimeState,
    parse_adapter_set,
)

HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}}
DEFAULTS = load_settings({})
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def lora_wire(*args: Any) -> dict[str, Any] | None:
    """``status.lora`` as written (camelCase JSON), or None while LoRA is off."""
    status = lora_status(*args)
    return status.wire() if status is not None else None


def adapter(name: str, claim: str = "adapters", sub_path: str | None = None) -> dict[str, Any]:
    pvc: dict[str, Any] = {"claimName": claim}
    if sub_path:
        pvc["subPath"] = sub_path
    return {"name": name, "source": {"pvc": pvc}}


def lora_spec(*adapters: dict[str, Any], **lora: Any) -> dict[str, Any]:
    return {"model": HF, "platform": "CPU", "lora": {**lora, "adapters": list(adapters)}}


def render(spec: dict[str, Any], name: str = "demo") -> Children:
    children = build_children(BuildMeta(name, "llm"), parse_spec(spec), DEFAULTS)
    for obj in children.objects():
        kubernetes_validate.validate(obj, "1.30", strict=True)
    return children


def template(children: Children) -> dict[str, Any]:
    return children.deployment["spec"]["template"]


# --- children ---------------------------------------------------------------------------


def test_lora_builds_the_adapters_configmap_engine_flags_and_one_mount_per_volume() -> None:
    children = render(lora_spec(
        adapter("sql", sub_path="sql"), adapter("chat", sub_path="team/chat"),
        {"name": "node", "source": {"hostPath": {"path": "/data/adapters", "subPath": "node"}}},
        maxRank=32, maxLoras=2, maxCpuLoras=4,
    ))
    pod = template(children)["spec"]
    pvc_volume = next(v["name"] for v in pod["volumes"] if "persistentVolumeClaim" in v)
    host_volume = next(v["name"] for v in pod["volumes"] if v.get("hostPath", {}).get("path") == "/data/adapters")
    adapters = parse_adapter_set(yaml.safe_load(children.adapters_configmap["data"][ADAPTERS_FILE_KEY]))
    paths = adapters.paths()
    assert paths == {
        "sql": f"/mnt/adapters/{pvc_volume}/sql",
        "chat": f"/mnt/adapters/{pvc_volume}/team/chat",
        "node": f"/mnt/adapters/{host_volume}/node",
    }
    assert children.adapters_configmap == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "demo-adapters",
            "namespace": "llm",
            "labels": {
                "app.kubernetes.io/name": "ascend-llm",
                "app.kubernetes.io/instance": "demo",
                "app.kubernetes.io/component": "adapters",
                "app.kubernetes.io/managed-by": "ascend-llm-operator",
                "app.kubernetes.io/part-of": "ascend-llm",
                "llm.ascend.dev/deployment": "demo",
            },
            "annotations": {"llm.ascend.dev/spec-hash": children.adapters_configmap["metadata"]["annotations"][
                "llm.ascend.dev/spec-hash"]},
        },
        "data": {ADAPTERS_FILE_KEY: (
            f"adapters:\n- name: sql\n  path: /mnt/adapters/{pvc_volume}/sql\n"
            f"- name: chat\n  path: /mnt/adapters/{pvc_volume}/team/chat\n"
            f"- name: node\n  path: /mnt/adapters/{host_volume}/node\n"
        )},
    }
    config = yaml.safe_load(children.configmap["data"][CONFIG_FILE_KEY])
    assert config["lora"] == {
        "enabled": True, "maxRank": 32, "maxLoras": 2, "maxCpuLoras": 4,
        "adaptersFile": "/etc/ascend-llm/adapters/adapters.yaml",
        "pollIntervalS": 5.0, "retryInitialS": 2.0, "retryMaxS": 300.0,
    }
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["engine-config"] == {"name": "engine-config", "projected": {"sources": [
        {"configMap": {"name": "demo-config", "items": [{"key": CONFIG_FILE_KEY, "path": CONFIG_FILE_KEY}]}},
        {"configMap": {"name": "demo-adapters", "optional": True,
                       "items": [{"key": ADAPTERS_FILE_KEY, "path": "adapters/adapters.yaml"}]}},
    ]}}
    assert volumes[pvc_volume] == {"name": pvc_volume,
                                   "persistentVolumeClaim": {"claimName": "adapters", "readOnly": True}}
    assert volumes[host_volume] == {"name": host_volume, "hostPath": {"path": "/data/adapters", "type": "Directory"}}
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "engine-config", "mountPath": "/etc/ascend-llm", "readOnly": True} in mounts
    lora_mounts = [m for m in mounts if m["name"].startswith("lora-")]
    assert lora_mounts == sorted([
        {"name": pvc_volume, "mountPath": f"/mnt/adapters/{pvc_volume}", "readOnly": True},
        {"name": host_volume, "mountPath": f"/mnt/adapters/{host_volume}", "readOnly": True},
    ], key=lambda m: m["name"])
    # The ConfigMaps come before the pods that mount them.
    kinds = [(obj["kind"], obj["metadata"]["name"]) for obj in children.objects()]
    assert kinds.index(("ConfigMap", "demo-adapters")) < kinds.index(("Deployment", "demo"))
    # What the runtime reads back is what the operator wrote.
    assert EngineConfig.model_validate(config).lora.max_cpu_loras == 4
    assert pvc_volume.startswith("lora-") and host_volume.startswith("lora-") and pvc_volume != host_volume


def test_without_lora_there_is_no_adapters_configmap_and_the_config_volume_is_unchanged() -> None:
    for spec in ({"model": HF, "platform": "CPU"}, lora_spec(enabled=False)):
        children = render(spec)
        assert children.adapters_configmap is None
        assert "lora" not in yaml.safe_load(children.configmap["data"][CONFIG_FILE_KEY])
        assert template(children)["spec"]["volumes"][0] == {"name": "engine-config", "configMap": {
            "name": "demo-config", "items": [{"key": CONFIG_FILE_KEY, "path": CONFIG_FILE_KEY}]}}
    # LoRA off renders exactly what a spec without spec.lora renders.
    assert render({"model": HF, "platform": "CPU"}).deployment == render(lora_spec(enabled=False)).deployment


def test_adapters_on_a_mounted_volume_change_the_configmap_not_the_pod_template() -> None:
    one = render(lora_spec(adapter("sql", sub_path="sql")))
    more = render(lora_spec(adapter("chat", sub_path="chat"), adapter("sql", sub_path="sql/v2"),
                            adapter("root")))
    assert one.adapters_configmap["data"] != more.adapters_configmap["data"]
    assert one.deployment == more.deployment
    assert one.configmap == more.configmap


def test_a_new_volume_changes_the_pod_template_and_the_volume_order_does_not() -> None:
    one = render(lora_spec(adapter("sql")))
    other = render(lora_spec(adapter("sql"), adapter("chat", claim="more")))
    assert template(one) != template(other)
    assert template(one)["metadata"]["annotations"][CONFIG_HASH_ANNOTATION] == (
        template(other)["metadata"]["annotations"][CONFIG_HASH_ANNOTATION])  # a new pod spec, same config
    swapped = render(lora_spec(adapter("chat", claim="more"), adapter("sql")))
    assert template(swapped) == template(other)


def test_engine_flags_roll_the_pods() -> None:
    base = render(lora_spec(adapter("sql")))
    for change in ({"maxRank": 64}, {"maxLoras": 2}, {"maxCpuLoras": 3}):
        changed = render(lora_spec(adapter("sql"), **change))
        assert (template(changed)["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
                != template(base)["metadata"]["annotations"][CONFIG_HASH_ANNOTATION])


def test_multinode_leader_and_workers_mount_the_adapters() -> None:
    spec = {"model": HF, "nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 1, "data": 16},
            "lora": {"adapters": [adapter("sql")]}}
    children = build_children(BuildMeta("big", "llm"), parse_spec(spec), DEFAULTS)
    lws = children.leaderworkerset["spec"]["leaderWorkerTemplate"]
    for pod_template in (lws["leaderTemplate"], lws["workerTemplate"]):
        names = [volume["name"] for volume in pod_template["spec"]["volumes"]]
        assert "projected" in pod_template["spec"]["volumes"][0]
        assert any(name.startswith("lora-") for name in names)


# --- the guard and the policy -----------------------------------------------------------


@pytest.mark.parametrize(("image", "version"), [
    ("ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0-a3", "v0.23.0"),
    ("reg.example:5000/runtime:0.2-vllm-ascend-v0.20.2rc1", "v0.20.2rc1"),
    ("reg.example:5000/runtime", None),
    ("runtime:v0.23.0", None),
    ("runtime:0.1.0-vllm-ascend-v0.23.0@sha256:abcd", "v0.23.0"),
    ("runtime@sha256:abcd", None),
])
def test_the_vllm_ascend_version_comes_from_the_image_tag(image: str, version: str | None) -> None:
    assert image_vllm_ascend(image) == version


TP2 = {"model": {"pvc": {"claimName": "w"}}, "npu": {"perReplica": 2}, "parallelism": {"tensor": 2}}


def test_tensor_parallel_lora_is_refused_on_the_default_vllm_ascend_naming_the_fields() -> None:
    spec = parse_spec({**TP2, "lora": {"adapters": [adapter("sql")]}})
    with pytest.raises(SpecError) as error:
        enforce_lora("demo", spec, DEFAULTS, plan_cache("demo", spec, DEFAULTS))
    [(field, message)] = error.value.problems
    assert field == "spec.parallelism.tensor"
    assert message.startswith("spec.lora.enabled with spec.parallelism.tensor 2: vllm-ascend v0.23.0 ")
    assert "set spec.parallelism.tensor to 1" in message and "engine.parallel" not in message


@pytest.mark.parametrize("image", ["reg/runtime:1.0-vllm-ascend-v0.24.0", "reg/runtime:custom"])
def test_tensor_parallel_lora_passes_where_no_source_says_it_fails(image: str) -> None:
    assert lora_problems("demo", parse_spec({**TP2, "image": image, "lora": {}}), DEFAULTS) == []


def test_tensor_parallel_without_lora_and_lora_on_one_npu_pass() -> None:
    assert lora_problems("demo", parse_spec({**TP2, "lora": {"enabled": False}}), DEFAULTS) == []
    assert lora_problems("demo", parse_spec({**TP2}), DEFAULTS) == []
    assert lora_problems("demo", parse_spec({"model": HF, "lora": {"adapters": [adapter("a")]}}), DEFAULTS) == []


def test_expert_parallel_lora_is_refused_naming_the_field() -> None:
    spec = parse_spec({"model": HF, "npu": {"perReplica": 2}, "parallelism": {"data": 2, "expert": True},
                       "lora": {}})
    [(field, message)] = lora_problems("demo", spec, DEFAULTS)
    assert field == "spec.parallelism.expert" and "set spec.parallelism.expert to false" in message


def test_an_adapter_named_like_the_resource_is_refused_when_that_is_the_served_name() -> None:
    spec = parse_spec({"model": {"pvc": {"claimName": "w"}}, "lora": {"adapters": [adapter("x"), adapter("demo")]}})
    assert lora_problems("demo", spec, DEFAULTS) == [(
        "spec.lora.adapters[1].name",
        "adapter name 'demo' is the base model's served name (here the resource name); rename the adapter "
        "or set model.servedName",
    )]
    named = parse_spec({"model": {"pvc": {"claimName": "w"}, "servedName": "qwen"},
                        "lora": {"adapters": [adapter("demo")]}})
    assert lora_problems("demo", named, DEFAULTS) == []


def test_adapter_host_paths_need_an_allowed_prefix() -> None:
    spec = parse_spec(lora_spec({"name": "a", "source": {"hostPath": {"path": "/data/adapters"}}}))
    with pytest.raises(SpecError) as error:
        enforce_policy(spec, DEFAULTS)
    assert error.value.problems == [(
        "spec.lora.adapters[0].source.hostPath.path",
        "host path /data/adapters is not under an allowed prefix (none); use a pvc, or ask the administrator to "
        "allow the directory (operator setting ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES)",
    )]
    enforce_policy(spec, load_settings({"ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES": "/data"}))


# --- status -------------------------------------------------------------------------------


def state(*adapters: AdapterStatus, error: str | None = None) -> RuntimeState:
    return RuntimeState(phase=RuntimePhase.READY, ready=True, adapters=list(adapters), adapters_error=error)


def loaded(name: str) -> AdapterStatus:
    return AdapterStatus(name=name, path=f"/mnt/adapters/x/{name}", state=AdapterPhase.LOADED, loaded_at=1.0)


def failed(name: str, why: str) -> AdapterStatus:
    return AdapterStatus(name=name, path=f"/mnt/adapters/x/{name}", state=AdapterPhase.FAILED, last_error=why,
                         failures=2, next_retry_at=9.0)


SPEC = parse_spec(lora_spec(adapter("sql"), adapter("chat"), adapter("new")))


def test_status_counts_each_adapter_per_replica_with_the_first_error() -> None:
    status = lora_wire(SPEC, [
        ("demo-a", state(loaded("sql"), failed("chat", "rank 64 > max 16"), loaded("gone"))),
        ("demo-b", state(loaded("sql"), loaded("chat"), AdapterStatus(name="new", state=AdapterPhase.LOADING))),
        ("demo-c", None),  # not readable: not counted
    ])
    assert status == {"replicas": 2, "adapters": [
        {"name": "sql", "loaded": 2, "failed": 0},
        {"name": "chat", "loaded": 1, "failed": 1, "lastError": "demo-a: rank 64 > max 16"},
        {"name": "new", "loaded": 0, "failed": 0},
    ]}
    AscendLLMDeploymentStatus.model_validate({"lora": status})  # declared, so the server keeps it
    assert lora_wire(parse_spec({"model": HF}), [("demo-a", state())]) is None


def test_the_operator_polls_while_a_replica_has_neither_loaded_nor_failed_an_adapter() -> None:
    two = parse_spec(lora_spec(adapter("sql"), adapter("chat")))
    # chat is in the spec, not yet on demo-b (its adapters file not swapped in, or loading).
    assert adapters_settling(lora_wire(two, [("demo-a", state(loaded("sql"), loaded("chat"))),
                                             ("demo-b", state(loaded("sql")))]))
    assert adapters_settling(lora_wire(two, [("demo-a", state(loaded("sql"),
                                                              AdapterStatus(name="chat", state=AdapterPhase.LOADING)))]))
    # Loaded or failed everywhere (a failure is retried by the runtime, reported on change): settled.
    assert not adapters_settling(lora_wire(two, [("demo-a", state(loaded("sql"), failed("chat", "rank"))),
                                                 ("demo-b", state(loaded("sql"), loaded("chat"))),
                                                 ("demo-c", None)]))
    assert not adapters_settling(None)  # LoRA off
    # A hub adapter still downloading is polled for its download, not counted here.
    downloading = {"replicas": 1, "adapters": [{"name": "hub", "loaded": 0, "failed": 0,
                                                "download": {"phase": "Downloading"}}]}
    assert not adapters_settling(downloading)
    downloading["adapters"][0]["download"]["phase"] = "Complete"
    assert adapters_settling(downloading)


def test_status_reports_a_file_the_runtime_cannot_use() -> None:
    status = lora_wire(SPEC, [("demo-a", state(error="adapters[1].name 'a' is also adapters[0].name"))])
    assert status["fileError"] == "demo-a: adapters[1].name 'a' is also adapters[0].name"


def test_compute_status_carries_lora_from_the_replicas_states() -> None:
    pod = {"metadata": {"name": "demo-a", "creationTimestamp": "2026-12-01T11:00:00Z"},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    observation = Observation(name="demo", generation=1, selector="x", endpoint=None, resource_name=None,
                              remembered_for="k", pods=[pod], states={"demo-a": state(loaded("sql"))})
    status = compute_status(SPEC, observation, None, NOW)
    assert status["lora"]["adapters"][0] == {"name": "sql", "loaded": 1, "failed": 0}
    assert "lora" not in compute_status(parse_spec({"model": HF, "platform": "CPU"}), observation, None, NOW)


def test_a_warning_when_an_adapter_fails_on_every_replica_once() -> None:
    some = {"lora": lora_wire(SPEC, [("demo-a", state(failed("chat", "no such file"))),
                                       ("demo-b", state(loaded("chat")))])}
    every = {"lora": lora_wire(SPEC, [("demo-a", state(failed("chat", "no such file"))),
                                        ("demo-b", state(failed("chat", "no such file")))])}
    assert lora_events(None, some) == []
    events = lora_events(some, every)
    assert events == [("Warning", "AdapterFailed", (
        "adapter chat failed to load on all 2 replica(s) reporting; the base model and the other adapters keep "
        "serving and the load is retried; demo-a: no such file"))]
    assert lora_events(every, copy.deepcopy(every)) == []  # no transition, no event
    assert ("Warning", "AdapterFailed", events[0][2]) in transition_events(some, every)


def test_a_warning_for_a_new_file_error() -> None:
    bad = {"lora": lora_wire(SPEC, [("demo-a", state(error="not a mapping"))])}
    assert lora_events({}, bad) == [("Warning", "AdaptersFileInvalid",
                                     "the adapters file cannot be used, the last good set stays in force: "
                                     "demo-a: not a mapping")]
    assert lora_events(bad, bad) == []


# --- the guard's warnings -----------------------------------------------------------------------

QUANTIZED = {"model": {"pvc": {"claimName": "w"}, "servedName": "base"}, "engine": {"quantization": "ascend"},
             "lora": {"adapters": [adapter("sql")]}}


def test_lora_with_quantization_is_warned_of_in_spec_words_where_the_guard_knows_the_version() -> None:
    [warning] = lora_warnings("demo", parse_spec(QUANTIZED), DEFAULTS)
    assert warning == (
        "spec.lora.enabled with spec.engine.quantization ascend: vllm-ascend v0.23.0 does not support LoRA on "
        "quantized MoE models (vllm-ascend v0.23.0 docs, user_guide/feature_guide/lora.md); a dense model is not "
        "covered by that note")
    assert lora_problems("demo", parse_spec(QUANTIZED), DEFAULTS) == []  # a warning, not a refusal
    quantized = parse_spec(QUANTIZED)
    assert enforce_lora("demo", quantized, DEFAULTS, plan_cache("demo", quantized, DEFAULTS)) == [warning]  # what the reconcile shows
    for other in ({"image": "reg/runtime:1.0-vllm-ascend-v0.24.0"}, {"lora": {"enabled": False}},
                  {"engine": {}}):
        assert lora_warnings("demo", parse_spec({**QUANTIZED, **other}), DEFAULTS) == []


def _observed(warnings: tuple[str, ...]) -> Observation:
    return Observation(name="demo", generation=1, selector="x", endpoint=None, resource_name=None,
                       remembered_for="k", lora_warnings=warnings)


def test_the_warning_is_a_condition_and_one_warning_event_per_new_message() -> None:
    spec = parse_spec(QUANTIZED)
    first = compute_status(spec, _observed(("w1",)), None, NOW)
    condition = next(c for c in first["conditions"] if c["type"] == "LoraWarning")
    assert (condition["status"], condition["reason"], condition["message"]) == ("True", "KnownEngineLimitation", "w1")
    assert ("Warning", "KnownEngineLimitation", "w1") in transition_events({}, first)
    again = compute_status(spec, _observed(("w1",)), first, NOW)
    assert not [e for e in transition_events(first, again) if e[1] == "KnownEngineLimitation"]
    other = compute_status(spec, _observed(("w1", "w2")), again, NOW)
    assert ("Warning", "KnownEngineLimitation", "w1; w2") in transition_events(again, other)
    cleared = compute_status(spec, _observed(()), other, NOW)
    condition = next(c for c in cleared["conditions"] if c["type"] == "LoraWarning")
    assert (condition["status"], condition["reason"]) == ("False", "NoKnownLimitation")
    assert not [e for e in transition_events(other, cleared) if e[0] == "Warning"]
    # A resource that never had a warning carries no such condition.
    assert "LoraWarning" not in {c["type"] for c in compute_status(spec, _observed(()), None, NOW)["conditions"]}
