"""Prefill/decode disaggregation and KV offload: the children (whole objects, the A2 example),
the role wiring of the A3 example's LeaderWorkerSet, the runtime's ``--kv-transfer-config`` from
the ConfigMap the operator writes, and the version checks the CRD cannot make (docs/kv-transfer.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ascend_operator.api import SpecError, parse_spec
from ascend_operator.builders import BuildMeta, Children, build_children
from ascend_operator.kvcheck import enforce_kv_transfer, kv_problems
from ascend_operator.names import ChildNames
from ascend_operator.settings import load_settings
from ascend_runtime.config import CONFIG_FILE_KEY, EngineConfig, GraphMode
from ascend_runtime.flags import render_engine_command
from ascend_runtime.kvtransfer import KvTransferError
from ascend_runtime.versions import Versions
from golden import BASE_MOUNTS, base_volumes, engine_config_dict, engine_container, engine_pod_spec, labels, selector

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = load_settings({})
HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}}
IMAGE = "ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0"


def render_example(example: str) -> Children:
    resource = yaml.safe_load((ROOT / "examples" / example).read_text())
    children = build_children(BuildMeta(resource["metadata"]["name"], "llm"), parse_spec(resource["spec"]), DEFAULTS)
    for obj in children.objects():
        if obj["kind"] != "LeaderWorkerSet":
            kubernetes_validate.validate(obj, "1.30", strict=True)
    return children


def by_name(children: Children, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in children.objects() if o["kind"] == kind and o["metadata"]["name"] == name)


def engine_config_of(configmap: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(configmap["data"][CONFIG_FILE_KEY])


def role_labels(role: str) -> dict[str, str]:
    return {**labels("qwen32b-pd"), "llm-d.ai/role": role, "llm.ascend.dev/pd-role": role}


KV_ENV = [
    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"name": "HCCL_IF_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
]
HCCN_MOUNTS = [
    {"name": "hccn-conf", "mountPath": "/etc/hccn.conf", "readOnly": True},
    {"name": "hccn-tool", "mountPath": "/usr/local/Ascend/driver/tools/hccn_tool", "readOnly": True},
]
HCCN_VOLUMES = [
    {"name": "hccn-conf", "hostPath": {"path": "/etc/hccn.conf", "type": "File"}},
    {"name": "hccn-tool", "hostPath": {"path": "/usr/local/Ascend/driver/tools/hccn_tool", "type": "File"}},
]
KV_SECTION = {
    "prefill": {"tensor": 4, "pipeline": 1, "data": 1},
    "decode": {"tensor": 2, "pipeline": 1, "data": 1},
    "npusPerNode": 8,
    "transport": "roce",
    "connectTimeoutMs": 10000,
    "transferTimeoutMs": 10000,
}


def expected_deployment(role: str, replicas: int, npus: int, spec_hash: str, config_hash: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"qwen32b-pd-{role}", "namespace": "llm", "labels": role_labels(role),
                     "annotations": {"llm.ascend.dev/spec-hash": spec_hash}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {**selector("qwen32b-pd"), "llm.ascend.dev/pd-role": role}},
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 4156,
            "template": {
                "metadata": {"labels": role_labels(role),
                             "annotations": {"llm.ascend.dev/config-hash": config_hash}},
                "spec": engine_pod_spec(
                    container=engine_container(
                        image=IMAGE,
                        startup_failures=1778,
                        env=[{"name": "ASCEND_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
                            "fieldPath": "metadata.annotations['huawei.com/Ascend910']"}}}, *KV_ENV],
                        resources={
                            "requests": {"huawei.com/Ascend910": npus, "cpu": str(8 * npus),
                                         "memory": f"{64 * npus}Gi"},
                            "limits": {"huawei.com/Ascend910": npus},
                        },
                        volumeMounts=[*BASE_MOUNTS, {"name": "model", "mountPath": "/mnt/model", "readOnly": True,
                                                     "subPath": "Qwen2.5-32B-Instruct"}, *HCCN_MOUNTS],
                    ),
                    volumes=[*base_volumes(f"qwen32b-pd-{role}-config"),
                             {"name": "model", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
                             *HCCN_VOLUMES],
                    nodeSelector={"accelerator": "huawei-Ascend910"},
                ),
            },
        },
    }


def expected_service(name: str, role: str, spec_hash: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "llm",
                     "labels": {**labels("qwen32b-pd"), "llm.ascend.dev/pd-role": role},
                     "annotations": {"llm.ascend.dev/spec-hash": spec_hash}},
        "spec": {"type": "ClusterIP", "selector": {**selector("qwen32b-pd"), "llm.ascend.dev/pd-role": role},
                 "ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]},
    }


def expected_engine_config(role: str) -> dict[str, Any]:
    tensor, seqs = (4, 16) if role == "prefill" else (2, 64)
    engine: dict[str, Any] = {"maxModelLen": 16384, "maxNumSeqs": seqs, "gpuMemoryUtilization": 0.9,
                              "dtype": "bfloat16", "parallel": {"tensor": tensor},
                              "weightsStorage": "network"}  # the model is on a claim
    if role == "prefill":
        engine["enablePrefixCaching"] = True
    config = engine_config_dict(name="qwen32b-pd", image=IMAGE, served_name="qwen2.5-32b-instruct",
                                ready_timeout_s=604, engine=engine)
    return {**config, "kvTransfer": {"role": role, **KV_SECTION}}


def test_a2_example_children_are_one_workload_per_role_with_the_kv_wiring() -> None:
    children = render_example("qwen32b-pd-910b.yaml")
    assert [(o["kind"], o["metadata"]["name"]) for o in children.objects()] == [
        ("ConfigMap", "qwen32b-pd-decode-config"), ("Deployment", "qwen32b-pd-decode"), ("Service", "qwen32b-pd"),
        ("Service", "qwen32b-pd-runtime"), ("PodDisruptionBudget", "qwen32b-pd"),
        ("ConfigMap", "qwen32b-pd-prefill-config"), ("Deployment", "qwen32b-pd-prefill"),
        ("Service", "qwen32b-pd-prefill"),
    ]
    assert children.deployment == expected_deployment("decode", 2, 2, "37f35ed4fe364416", "f0e6f4d37076d535")
    assert by_name(children, "Deployment", "qwen32b-pd-prefill") == expected_deployment(
        "prefill", 1, 4, "63e12299e410cd90", "4744cb352763861b")
    assert children.service == expected_service("qwen32b-pd", "decode", "0b2da173620146a6")
    assert by_name(children, "Service", "qwen32b-pd-prefill") == expected_service(
        "qwen32b-pd-prefill", "prefill", "cabe48b802134ee6")
    for role in ("decode", "prefill"):
        configmap = by_name(children, "ConfigMap", f"qwen32b-pd-{role}-config")
        assert engine_config_of(configmap) == expected_engine_config(role)
    # The runtime Service and the PDB still select every engine pod of the resource.
    assert by_name(children, "Service", "qwen32b-pd-runtime")["spec"]["selector"] == selector("qwen32b-pd")
    assert children.pdb["spec"]["selector"]["matchLabels"] == selector("qwen32b-pd")


def test_the_runtime_renders_the_mooncake_flag_from_the_configmap_per_pod() -> None:
    children = render_example("qwen32b-pd-910b.yaml")
    for role, kv_role, tp in (("prefill", "kv_producer", 4), ("decode", "kv_consumer", 2)):
        config = EngineConfig.model_validate(engine_config_of(by_name(children, "ConfigMap", f"qwen32b-pd-{role}-config")))
        command = render_engine_command(config, Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0"),
                                        GraphMode.EAGER, base_env={"POD_NAME": f"qwen32b-pd-{role}-7f9c-x2"})
        flag = json.loads(command.argv[command.argv.index("--kv-transfer-config") + 1])
        assert flag == {
            "kv_connector": "MooncakeConnectorV1", "kv_role": kv_role, "kv_buffer_device": "npu",
            "engine_id": f"qwen32b-pd-{role}-7f9c-x2", "kv_port": 28000,
            "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 4},
                                          "decode": {"dp_size": 1, "tp_size": 2}},
        }
        assert command.argv[command.argv.index("--tensor-parallel-size") + 1] == str(tp)
        assert {k: command.env[k] for k in ("HCCL_INTRA_ROCE_ENABLE", "ASCEND_CONNECT_TIMEOUT",
                                            "ASCEND_TRANSFER_TIMEOUT")} == {
            "HCCL_INTRA_ROCE_ENABLE": "1", "ASCEND_CONNECT_TIMEOUT": "10000", "ASCEND_TRANSFER_TIMEOUT": "10000"}


def test_the_runtime_owns_the_kv_flags_and_refuses_what_the_installed_version_lacks() -> None:
    config = EngineConfig.model_validate({
        "model": {"path": "/m"}, "engine": {"extra_args": ["--kv-transfer-config", "{}", "--seed", "1"]},
        "kv_transfer": {"role": "decode", "prefill": {"tensor": 2}, "decode": {"tensor": 2}, "transport": "bufferPool"}})
    old = render_engine_command(config, Versions(platform="ascend", vllm="0.11.0", vllm_ascend="0.11.0"),
                                GraphMode.EAGER, base_env={"POD_NAME": "p"})
    assert old.argv.count("--kv-transfer-config") == 1 and "{}" not in old.argv and "--seed" in old.argv
    assert old.env["ASCEND_BUFFER_POOL"] == "4:8"
    with pytest.raises(KvTransferError, match="ASCEND_BUFFER_POOL was removed in vllm-ascend 0.23.0"):
        render_engine_command(config, Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0"),
                              GraphMode.EAGER, base_env={"POD_NAME": "p"})
    # Without kv_transfer the flag in extraArgs is the user's (the engine tier's CPU test passes it so).
    plain = EngineConfig.model_validate({"model": {"path": "/m"}, "engine": {"extra_args": ["--kv-transfer-config", "{}"]}})
    argv = render_engine_command(plain, Versions(platform="cpu", vllm="0.32.0"), GraphMode.EAGER).argv
    assert argv[-2:] == ["--kv-transfer-config", "{}"]


def test_offload_reads_the_model_geometry_and_refuses_mla(tmp_path: Path) -> None:
    versions = Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0")
    (tmp_path / "config.json").write_text(json.dumps({
        "num_attention_heads": 40, "num_key_value_heads": 8, "hidden_size": 5120, "num_hidden_layers": 64,
        "torch_dtype": "bfloat16"}))
    config = EngineConfig.model_validate({"model": {"path": str(tmp_path)}, "engine": {"parallel": {"tensor": 4}},
                                          "kv_transfer": {"offload_gib": 16}})
    argv = render_engine_command(config, versions, GraphMode.EAGER).argv
    flag = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    # 128 tokens x 64 layers x K and V x 8 KV heads x 128 head dim x 2 bytes = 32 MiB a block: 512 in 16 GiB.
    assert flag == {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": {
        "num_cpu_blocks": 512, "block_size": 128, "spec_name": "NPUOffloadingSpec",
        "spec_module_path": "vllm_ascend.kv_offload.npu"}}
    (tmp_path / "config.json").write_text(json.dumps({
        "num_attention_heads": 128, "num_hidden_layers": 61, "hidden_size": 7168, "kv_lora_rank": 512}))
    with pytest.raises(KvTransferError, match="MLA models"):
        render_engine_command(config, versions, GraphMode.EAGER)


def test_a3_example_wires_both_lws_templates_and_combines_offload_through_multiconnector() -> None:
    children = render_example("qwen3-moe-pd-a3.yaml")
    lws = by_name(children, "LeaderWorkerSet", "qwen3-moe-pd-prefill-lws")
    assert children.deployment is not None and children.deployment["metadata"]["name"] == "qwen3-moe-pd-decode"
    templates = lws["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        template = templates[key]
        assert template["metadata"]["labels"]["llm-d.ai/role"] == "prefill"
        container = template["spec"]["containers"][0]
        assert KV_ENV[0] in container["env"] and KV_ENV[1] in container["env"]
        assert container["resources"]["limits"]["huawei.com/Ascend910"] == 16
        assert HCCN_VOLUMES[0] in template["spec"]["volumes"]
    prefill = EngineConfig.model_validate(engine_config_of(by_name(children, "ConfigMap", "qwen3-moe-pd-prefill-config")))
    assert prefill.distributed.nodes == 2 and prefill.kv_transfer is not None
    assert prefill.kv_transfer.npus_per_node == 16 and prefill.kv_transfer.offload_gib == 200
    # The leader renders the whole flag: MultiConnector of Mooncake (36000 on A3) and the offload.
    from ascend_runtime.flags import kv_transfer_plan
    from ascend_runtime.kvtransfer import KvGeometry
    plan = kv_transfer_plan(prefill, Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0"),
                            {"POD_NAME": "qwen3-moe-pd-prefill-lws-0"}, KvGeometry(94, 4, 128))
    assert plan.kv_transfer_config is not None
    assert plan.kv_transfer_config["kv_connector"] == "MultiConnector"
    mooncake, offload = plan.kv_transfer_config["kv_connector_extra_config"]["connectors"]
    assert (mooncake["kv_port"], mooncake["kv_role"], offload["kv_connector"]) == (36000, "kv_producer",
                                                                                  "OffloadingConnector")
    assert plan.env == {"ASCEND_ENABLE_USE_FABRIC_MEM": "1"}


def test_role_names_are_distinct_and_valid_for_long_names() -> None:
    name = "a-very-long-resource-name-that-goes-on-and-on-" + "x" * 40
    prefill, decode = ChildNames.for_role(name, "prefill"), ChildNames.for_role(name, "decode")
    assert prefill.deployment != decode.deployment and prefill.configmap != decode.configmap
    assert len(prefill.deployment) <= 63 and len(prefill.leaderworkerset) <= 40
    assert prefill.runtime_service == ChildNames.for_resource(name).runtime_service


def test_a_role_engine_replaces_only_the_fields_it_sets() -> None:
    spec = parse_spec({"model": HF, "platform": "CPU", "engine": {"maxModelLen": 1024, "extraArgs": ["--seed", "1"],
                                                                  "env": {"A": "1"}},
                       "disaggregation": {"prefill": {"engine": {"env": {"B": "2"}}}, "decode": {"replicas": 3}}})
    children = build_children(BuildMeta("pd", "llm"), spec, DEFAULTS)
    prefill = engine_config_of(by_name(children, "ConfigMap", "pd-prefill-config"))["engine"]
    decode = engine_config_of(children.configmap)["engine"]
    assert (prefill["maxModelLen"], prefill["extraArgs"], prefill["env"]["B"], "A" in prefill["env"]) == (
        1024, ["--seed", "1"], "2", False)
    assert (decode["env"]["A"], children.deployment["spec"]["replicas"]) == ("1", 3)
    # CPU: NIXL's side channel on the pod IP, no Ascend mounts.
    pod = children.deployment["spec"]["template"]["spec"]
    assert {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in (
        pod["containers"][0]["env"])
    assert not any("hostPath" in v for v in pod["volumes"])


@pytest.mark.parametrize("image, extra, field, words", [
    ("r:1-vllm-ascend-v0.23.0", {"transport": "bufferPool"}, "spec.disaggregation.transport", "removed in vllm-ascend 0.23.0"),
    ("r:1-vllm-ascend-v0.13.0", {"transport": "fabricMem"}, "spec.disaggregation.transport", "from vllm-ascend 0.16.0rc1"),
    ("r:1-vllm-ascend-v0.23.0", {"connector": "LLMDataDistCMgrConnector", "rankTablePath": "/etc/rt.json"},
     "spec.disaggregation.connector", "removed in 0.12.0rc1"),
    ("r:1-vllm-ascend-v0.9.0", {}, "spec.disaggregation.connector", "no prefill/decode connector"),
])
def test_version_checks_name_the_field(image: str, extra: dict[str, Any], field: str, words: str) -> None:
    spec = parse_spec({"model": HF, "image": image, "disaggregation": {"prefill": {}, "decode": {}, **extra}})
    problems = kv_problems(spec, DEFAULTS)
    assert [p for p, _ in problems] == [field] and words in problems[0][1]
    with pytest.raises(SpecError):
        enforce_kv_transfer(spec, DEFAULTS)


def test_offload_is_checked_against_the_image_version() -> None:
    old = parse_spec({"model": HF, "image": "r:1-vllm-ascend-v0.11.0", "kvOffload": {"sizeGiB": 8}})
    assert [p for p, _ in kv_problems(old, DEFAULTS)] == ["spec.kvOffload.sizeGiB"]
    new = parse_spec({"model": HF, "kvOffload": {"sizeGiB": 8}})
    assert kv_problems(new, DEFAULTS) == []
    config = build_children(BuildMeta("off", "llm"), new, DEFAULTS).engine_config
    assert config.kv_transfer is not None and config.kv_transfer.offload_gib == 8 and config.kv_transfer.role is None
    plain = copy.deepcopy(build_children(BuildMeta("off", "llm"), parse_spec({"model": HF}), DEFAULTS).engine_config)
    assert plain.kv_transfer is None


# --- status per role ----------------------------------------------------------------------

PD_SPEC = {"model": {"hostPath": {"path": "/models/qwen"}, "servedName": "qwen"}, "disaggregation": {
    "prefill": {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}}, "decode": {"replicas": 2}}}


def role_pod(name: str, role: str, config_hash: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-12-01T11:00:00Z",
                     "labels": {"llm.ascend.dev/pd-role": role, "llm-d.ai/role": role},
                     "annotations": {"llm.ascend.dev/config-hash": config_hash}},
        "spec": {"containers": [{"name": "engine", "image": "img:1"}]},
        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                       {"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pd_status(pods: list[dict[str, Any]], states: dict[str, Any]) -> Any:
    from datetime import datetime, timezone

    from ascend_operator.status import Observation, RoleObservation, resource_status
    observation = Observation(
        name="qwen", generation=1, selector="s", endpoint=None, resource_name="huawei.com/Ascend910",
        remembered_for="k", template_hash="hd", pods=pods, states=states,
        roles={"prefill": RoleObservation("qwen-prefill", "hp"), "decode": RoleObservation("qwen-decode", "hd")})
    return resource_status(parse_spec(PD_SPEC), observation, None, datetime(2026, 12, 1, tzinfo=timezone.utc))


def test_status_counts_each_role_against_its_own_replicas_and_config() -> None:
    from ascend_runtime.config import RuntimePhase, RuntimeState
    ready = RuntimeState(phase=RuntimePhase.READY, ready=True, mode=GraphMode.PIECEWISE)
    eager = RuntimeState(phase=RuntimePhase.READY, ready=True, mode=GraphMode.EAGER)
    pods = [role_pod("p0", "prefill", "hp"), role_pod("d0", "decode", "hd"), role_pod("d1", "decode", "hd")]
    status = pd_status(pods, {"p0": ready, "d0": ready, "d1": eager})
    assert (status.phase.value, status.ready, status.replicas, status.updated_replicas) == ("Ready", "3/3", 3, 3)
    assert status.roles.prefill.model_dump() == {"workload": "qwen-prefill", "desired_replicas": 1, "replicas": 1,
                                                 "ready_replicas": 1, "mode": "PIECEWISE"}
    assert status.roles.decode.model_dump() == {"workload": "qwen-decode", "desired_replicas": 2, "replicas": 2,
                                                "ready_replicas": 2, "mode": "Mixed"}
    # A surplus decode pod does not stand in for the missing prefill one.
    short = pd_status([role_pod("p0", "prefill", "hp", ready=False), *pods[1:], role_pod("d2", "decode", "hd")],
                      {"d0": ready, "d1": ready, "d2": ready})
    assert short.phase.value != "Ready" and short.roles.prefill.ready_replicas == 0
    # Each role's pods are checked against that role's config hash.
    stale = pd_status([role_pod("p0", "prefill", "hd"), *pods[1:]], {"p0": ready, "d0": ready, "d1": ready})
    assert stale.updated_replicas == 2


# --- routing (spec.routing with disaggregation) ---------------------------------------------

ROUTED = {"model": {"pvc": {"claimName": "models"}, "servedName": "qwen"}, "routing": {}, "disaggregation": {
    "prefill": {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}},
    "decode": {"replicas": 2, "npu": {"perReplica": 2}, "parallelism": {"tensor": 2}}}}


def test_routing_puts_the_sidecar_on_decode_pods_and_runs_the_pd_profile() -> None:
    children = build_children(BuildMeta("qwen", "llm"), parse_spec(ROUTED), DEFAULTS)
    for obj in children.objects():
        if obj["kind"] not in ("InferencePool", "HTTPRoute"):
            kubernetes_validate.validate(obj, "1.30", strict=True)
    decode = children.deployment["spec"]["template"]["spec"]["containers"]
    prefill = by_name(children, "Deployment", "qwen-prefill")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in decode] == ["engine", "routing-sidecar"] and [c["name"] for c in prefill] == ["engine"]
    assert decode[1]["args"] == ["--port=8000", "--vllm-port=8200", "--kv-connector=nixlv2", "--secure-proxy=false"]
    assert decode[1]["image"] == "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0"
    assert decode[1]["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert {p["name"]: p["containerPort"] for p in decode[0]["ports"]} == {"engine": 8200, "runtime": 8080}
    assert {p["name"]: p["containerPort"] for p in prefill[0]["ports"]} == {"http": 8000, "runtime": 8080}
    assert engine_config_of(children.configmap)["engine"]["port"] == 8200
    assert engine_config_of(by_name(children, "ConfigMap", "qwen-prefill-config"))["engine"]["port"] == 8000
    pool = next(o for o in children.routing if o["kind"] == "InferencePool")
    assert pool["spec"]["selector"]["matchLabels"] == selector("qwen")  # both roles' pods
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    epp = yaml.safe_load(next(o for o in children.routing if o["kind"] == "ConfigMap")["data"]["epp-config.yaml"])
    types = [p["type"] for p in epp["plugins"]]
    assert {"prefill-filter", "decode-filter", "disagg-profile-handler", "prefix-based-pd-decider",
            "max-score-picker"} <= set(types)
    handler = next(p for p in epp["plugins"] if p["type"] == "disagg-profile-handler")
    assert handler["parameters"] == {"deciders": {"prefill": "prefix-based-pd-decider"}}
    assert [(p["name"], p["plugins"][0]["pluginRef"]) for p in epp["schedulingProfiles"]] == [
        ("prefill", "prefill-filter"), ("decode", "decode-filter")]
    # Every plugin a profile names is declared.
    assert {r["pluginRef"] for p in epp["schedulingProfiles"] for r in p["plugins"]} <= set(types)


# --- autoscaling per role -------------------------------------------------------------------

SCALED = {"model": {"pvc": {"claimName": "models"}, "servedName": "qwen"}, "disaggregation": {
    "prefill": {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}, "autoscaling": {"maxReplicas": 3}},
    "decode": {"replicas": 2, "npu": {"perReplica": 2}, "parallelism": {"tensor": 2},
               "autoscaling": {"minReplicas": 2, "maxReplicas": 8}}}}


def test_each_role_scales_its_own_workload_on_its_own_signal() -> None:
    from ascend_operator.builders import choose_autoscaler

    spec = parse_spec(SCALED)
    assert choose_autoscaler(spec, DEFAULTS, {"custom.metrics.k8s.io/v1beta2"}).kind == "hpa"
    children = build_children(BuildMeta("qwen", "llm"), spec, DEFAULTS, autoscaler="hpa")
    hpas = {o["metadata"]["name"]: o["spec"] for o in children.objects() if o["kind"] == "HorizontalPodAutoscaler"}
    assert hpas["qwen-prefill"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                      "name": "qwen-prefill"}
    assert hpas["qwen-decode"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                     "name": "qwen-decode"}
    # Prefill on its queue, decode on KV cache use (the signals left out), each with its bounds.
    assert hpas["qwen-prefill"]["metrics"][0]["pods"]["metric"]["name"] == DEFAULTS.hpa_metric_waiting
    assert hpas["qwen-decode"]["metrics"][0]["pods"]["metric"]["name"] == DEFAULTS.hpa_metric_kv_cache
    assert (hpas["qwen-decode"]["minReplicas"], hpas["qwen-decode"]["maxReplicas"]) == (2, 8)
    # The autoscaler owns the workloads' replicas: the operator writes none.
    assert "replicas" not in children.deployment["spec"]
    assert "replicas" not in by_name(children, "Deployment", "qwen-prefill")["spec"]
    keda = build_children(BuildMeta("qwen", "llm"), spec, DEFAULTS, autoscaler="keda")
    scaled = {o["metadata"]["name"]: o["spec"] for o in keda.objects() if o["kind"] == "ScaledObject"}
    query = scaled["qwen-prefill"]["triggers"][0]["metadata"]["query"]
    assert query == ('sum(vllm:num_requests_waiting{namespace="llm",app_kubernetes_io_instance="qwen",'
                     'llm_ascend_dev_pd_role="prefill"})')
    assert 'llm_ascend_dev_pd_role="decode"' in scaled["qwen-decode"]["triggers"][0]["metadata"]["query"]
    # Without autoscaling the role's replicas are written.
    fixed = build_children(BuildMeta("qwen", "llm"), parse_spec(ROUTED), DEFAULTS, autoscaler="hpa")
    assert fixed.deployment["spec"]["replicas"] == 2
    assert not any(o["kind"] == "HorizontalPodAutoscaler" for o in fixed.objects())


def test_the_runtime_refuses_at_start_what_the_installed_version_cannot_wire(tmp_path: Path) -> None:
    from ascend_runtime.main import check_kv_transfer_config

    versions = Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0")
    (tmp_path / "config.json").write_text(json.dumps({
        "num_attention_heads": 128, "num_hidden_layers": 61, "hidden_size": 7168, "kv_lora_rank": 512}))
    mla = EngineConfig.model_validate({"model": {"path": str(tmp_path)}, "kv_transfer": {"offload_gib": 8}})
    problem = check_kv_transfer_config(mla, versions, {})
    assert problem is not None and problem.startswith("kv_transfer: offload.sizeGiB:") and "MLA" in problem
    old = EngineConfig.model_validate({"model": {"path": "/m"}, "kv_transfer": {
        "role": "prefill", "prefill": {"tensor": 2}, "decode": {"tensor": 2}}})
    assert "no prefill/decode connector" in (check_kv_transfer_config(
        old, Versions(platform="ascend", vllm="0.8.5", vllm_ascend="0.8.5rc1"), {}) or "")
    assert check_kv_transfer_config(old, versions, {"POD_NAME": "p"}) is None
    assert check_kv_transfer_config(EngineConfig.model_validate({"model": {"path": "/m"}}), versions, {}) is None


def test_a_cpu_pd_pair_gets_the_nixl_flags_the_engine_tier_runs() -> None:
    """The CPU resource's ConfigMaps make the runtime render NixlConnector, as tests/engine/test_pd_cpu.py
    passes it to two real engines (the same renderer), with the pod's name as engine_id."""
    spec = parse_spec({"model": HF, "platform": "CPU", "disaggregation": {"prefill": {}, "decode": {}}})
    children = build_children(BuildMeta("tiny", "llm"), spec, DEFAULTS)
    cpu = Versions(platform="cpu", vllm="0.32.0")
    for role, kv_role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
        config = EngineConfig.model_validate(engine_config_of(by_name(children, "ConfigMap", f"tiny-{role}-config")))
        command = render_engine_command(config, cpu, GraphMode.EAGER, base_env={"POD_NAME": f"tiny-{role}-0"})
        flag = json.loads(command.argv[command.argv.index("--kv-transfer-config") + 1])
        assert flag == {"kv_connector": "NixlConnector", "kv_role": kv_role, "kv_buffer_device": "cpu",
                        "engine_id": f"tiny-{role}-0"}
        assert command.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600"


def test_the_shared_kv_directory_is_a_namespaced_node_cache_directory_the_policy_allows() -> None:
    from ascend_operator.policy import enforce_policy

    spec = parse_spec({"model": HF, "platform": "CPU", "disaggregation": {
        "connector": "ExampleConnector", "sharedStoragePath": "/data/llm-cache/kv", "prefill": {}, "decode": {}}})
    with pytest.raises(SpecError) as refused:
        enforce_policy(spec, DEFAULTS)
    assert refused.value.problems[0][0] == "spec.disaggregation.sharedStoragePath"
    allowed = load_settings({"ASCEND_LLM_OPERATOR_CACHE_HOST_PATH_PREFIXES": "/data/llm-cache"})
    enforce_policy(spec, allowed)
    children = build_children(BuildMeta("tiny", "team-a"), spec, allowed)
    for workload in (children.deployment, by_name(children, "Deployment", "tiny-prefill")):
        pod = workload["spec"]["template"]["spec"]
        assert {"name": "kv-shared", "hostPath": {"path": "/data/llm-cache/team-a/kv", "type": "DirectoryOrCreate"}} in (
            pod["volumes"])
        assert {"name": "kv-shared", "mountPath": "/data/llm-cache/kv"} in pod["containers"][0]["volumeMounts"]


def test_nixl_on_cpu_is_refused_at_start_in_an_image_without_the_bindings() -> None:
    from ascend_runtime.main import check_kv_transfer_config

    cpu = Versions(platform="cpu", vllm="0.32.0")
    pair = {"role": "decode", "prefill": {"tensor": 1}, "decode": {"tensor": 1}}
    nixl = EngineConfig.model_validate({"model": {"path": "/m"}, "kv_transfer": pair})
    asked: list[str] = []

    def missing(name: str) -> bool:
        asked.append(name)
        return False

    problem = check_kv_transfer_config(nixl, cpu, {"POD_NAME": "p"}, importable=missing)
    assert asked == ["nixl"]
    assert problem is not None and problem.startswith("kv_transfer: connector NixlConnector needs the NIXL")
    assert "ExampleConnector with sharedStoragePath" in problem
    assert check_kv_transfer_config(nixl, cpu, {"POD_NAME": "p"}, importable=lambda name: True) is None
    # ExampleConnector needs no bindings: nothing is asked.
    example = EngineConfig.model_validate({"model": {"path": "/m"}, "kv_transfer": {
        **pair, "connector": "ExampleConnector", "shared_storage_path": "/kv"}})
    assert check_kv_transfer_config(example, cpu, {"POD_NAME": "p"}, importable=missing) is None
    assert asked == ["nixl"]


@pytest.mark.parametrize("path, mount", [
    (None, {"name": "rank-table", "mountPath": "/etc/ascend-llm/ranktable", "readOnly": True}),
    ("/opt/pd/rt.json", {"name": "rank-table", "mountPath": "/opt/pd/rt.json", "subPath": "rt.json", "readOnly": True}),
])
def test_llmdatadist_reads_its_rank_table_from_a_configmap_both_roles_mount(path: str | None,
                                                                           mount: dict[str, Any]) -> None:
    """rankTableConfigMap: the table's key mounted read-only in both roles' engine containers, and the
    runtime (vllm-ascend 0.11.0) pointing DISAGGREGATED_PREFILL_RANK_TABLE_PATH at it."""
    table = {"name": "pd-ranktable", "key": "table.json"}
    spec = parse_spec({"model": HF, "image": "r:1-vllm-ascend-v0.11.0", "disaggregation": {
        "connector": "LLMDataDistCMgrConnector", "rankTableConfigMap": table, "prefill": {}, "decode": {},
        **({"rankTablePath": path} if path else {})}})
    assert kv_problems(spec, DEFAULTS) == []
    children = build_children(BuildMeta("qwen", "llm"), spec, DEFAULTS)
    file = path or "/etc/ascend-llm/ranktable/table.json"
    for role, workload in (("prefill", by_name(children, "Deployment", "qwen-prefill")),
                           ("decode", children.deployment)):
        pod = workload["spec"]["template"]["spec"]
        kubernetes_validate.validate(workload, "1.30", strict=True)
        assert {"name": "rank-table", "configMap": {"name": "pd-ranktable", "items": [
            {"key": "table.json", "path": file.rsplit("/", 1)[1]}]}} in pod["volumes"]
        assert mount in pod["containers"][0]["volumeMounts"]
        config = EngineConfig.model_validate(engine_config_of(by_name(children, "ConfigMap", f"qwen-{role}-config")))
        command = render_engine_command(config, Versions(platform="ascend", vllm="0.11.0", vllm_ascend="0.11.0"),
                                        GraphMode.EAGER, base_env={"POD_NAME": f"qwen-{role}-0"})
        assert command.env["DISAGGREGATED_PREFILL_RANK_TABLE_PATH"] == file
        assert json.loads(command.argv[command.argv.index("--kv-transfer-config") + 1])["kv_connector"] == (
            "LLMDataDistCMgrConnector")


def test_a_rank_table_is_needed_for_llmdatadist_and_refused_on_cpu() -> None:
    with pytest.raises(SpecError) as missing:
        parse_spec({"model": HF, "disaggregation": {"connector": "LLMDataDistCMgrConnector", "prefill": {}, "decode": {}}})
    assert missing.value.problems[0][0] == "spec.disaggregation.rankTablePath"
    assert "rankTableConfigMap" in missing.value.problems[0][1]
    with pytest.raises(SpecError) as cpu:
        parse_spec({"model": HF, "platform": "CPU", "disaggregation": {
            "rankTableConfigMap": {"name": "t"}, "prefill": {}, "decode": {}}})
    assert cpu.value.problems[0][0] == "spec.disaggregation" and "rankTableConfigMap" in cpu.value.problems[0][1]
    with pytest.raises(SpecError) as bad:
        parse_spec({"model": HF, "disaggregation": {"connector": "LLMDataDistCMgrConnector", "rankTableConfigMap": {
            "name": "Rank_Table", "key": "a/b.json"}, "prefill": {}, "decode": {}}})
    assert [field for field, _ in bad.value.problems] == [
        "spec.disaggregation.rankTableConfigMap.name", "spec.disaggregation.rankTableConfigMap.key"]
