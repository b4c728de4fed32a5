"""Multi-node replicas (spec.nodesPerReplica > 1): the LeaderWorkerSet, the leader-only Service,
the engine config both roles share, the group's start-up budget and the switch between a
Deployment and a LeaderWorkerSet.

Complete expected manifests (golden dicts at the end of this module) for the two multi-node
examples: DeepSeek-V3 on 2 x A2 (backend mp, default settings) and DeepSeek-R1 on 2 x A3 (backend
ray, Volcano settings); each rendered object is validated against the real LWS CRD schema
(tests/data/crds, strict: unknown fields fail) or kubernetes_validate.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ascend_operator.api import parse_spec
from ascend_operator.builders import (
    BuildMeta,
    Children,
    build_children,
    lws_missing,
    scale_selector_string,
    startup_budget,
)
from ascend_operator.settings import OperatorSettings, load_settings
from ascend_runtime.config import CONFIG_FILE_KEY, EngineConfig
from golden import (
    BASE_MOUNTS,
    base_volumes,
    engine_config_dict,
    engine_container,
    engine_pod_spec,
    labels,
    selector,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = load_settings({})
VOLCANO = load_settings(
    {
        "ASCEND_LLM_OPERATOR_MULTINODE_SCHEDULER_NAME": "volcano",
        "ASCEND_LLM_OPERATOR_VOLCANO_RING_CONTROLLER": "ascend-910b",
        # An example value; the device plugin's docs list the policies a cluster supports.
        "ASCEND_LLM_OPERATOR_VOLCANO_SCHEDULE_POLICY": "chip8-node16",
    }
)
HF = {"huggingFace": {"id": "deepseek-ai/DeepSeek-V3"}}
TWO_NODES = {
    "model": HF,
    "nodesPerReplica": 2,
    "npu": {"perReplica": 8},
    "parallelism": {"tensor": 4, "data": 4, "expert": True},
}


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / name).read_text(encoding="utf-8"))


def render(
    spec: dict[str, Any],
    validate: Callable[..., None],
    name: str = "ds",
    settings: OperatorSettings = DEFAULTS,
) -> Children:
    children = build_children(BuildMeta(name, "llm"), parse_spec(spec), settings)
    for obj in children.objects():
        validate(obj)
    return children


def templates(children: Children) -> tuple[dict[str, Any], dict[str, Any]]:
    assert children.leaderworkerset is not None
    lwt = children.leaderworkerset["spec"]["leaderWorkerTemplate"]
    return lwt["leaderTemplate"], lwt["workerTemplate"]


GOLDEN = {
    "deepseek-v3-2node-lws.yaml": (DEFAULTS, lambda: EXPECTED_DEEPSEEK_V3_2NODE),
    "deepseek-r1-a3-2node-ray.yaml": (VOLCANO, lambda: EXPECTED_DEEPSEEK_R1_A3_RAY),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_multinode_example_renders_the_expected_manifests(
    name: str, validate_manifest: Callable[..., None]
) -> None:
    settings, expected_of = GOLDEN[name]
    resource = example(name)
    children = render(resource["spec"], validate_manifest, resource["metadata"]["name"], settings)
    expected = expected_of()
    assert children.deployment is None
    assert children.leaderworkerset == expected["leaderworkerset"]
    assert children.service == expected["service"]
    assert children.pdb == expected["pdb"]
    configmap = copy.deepcopy(children.configmap)
    text = configmap["data"].pop(CONFIG_FILE_KEY)
    assert configmap == {**expected["configmap"], "data": {}}
    assert yaml.safe_load(text) == expected["engine_config"]
    assert EngineConfig.model_validate(yaml.safe_load(text)) == children.engine_config
    # The runtime's own layout check agrees with the spec rules the example passed.
    parallel = children.engine_config.engine.parallel
    assert (
        children.engine_config.distributed.layout_errors(parallel.tensor, parallel.pipeline, parallel.data)
        == []
    )
    assert [o["kind"] for o in children.objects()] == [
        "ConfigMap",
        "LeaderWorkerSet",
        "Service",
        "Service",
        "PodDisruptionBudget",
    ]


def test_multinode_examples_cover_both_chips_and_backends() -> None:
    seen = set()
    for name in GOLDEN:
        spec = parse_spec(example(name)["spec"])
        assert spec.nodes_per_replica > 1
        seen.add((spec.npu.chip.value, spec.distributed.backend.value))
    assert seen == {("910B", "mp"), ("A3", "ray")}


def test_one_node_is_a_deployment_and_two_nodes_a_leaderworkerset(
    validate_manifest: Callable[..., None],
) -> None:
    single = render({**TWO_NODES, "nodesPerReplica": 1, "parallelism": {"tensor": 8}}, validate_manifest)
    double = render(TWO_NODES, validate_manifest)
    assert single.leaderworkerset is None and single.workload is single.deployment
    assert double.deployment is None and double.workload is double.leaderworkerset
    # Same Service name either way, so the endpoint survives the switch; the LWS has its own.
    assert single.service["metadata"]["name"] == double.service["metadata"]["name"] == "ds"
    assert double.leaderworkerset["metadata"]["name"] == "ds-lws"
    assert single.engine_config.distributed.nodes == 1 and double.engine_config.distributed.nodes == 2


def test_group_semantics_restart_together_and_start_without_deadlock(
    validate_manifest: Callable[..., None],
) -> None:
    lws = render(TWO_NODES, validate_manifest).leaderworkerset
    assert lws is not None
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    # LeaderReady would wait for a leader that only turns ready once its workers joined.
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"
    rolling = render(
        {**TWO_NODES, "rollout": {"strategy": "RollingUpdate"}, "replicas": 3}, validate_manifest
    )
    assert rolling.leaderworkerset["spec"]["rolloutStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
    }
    assert rolling.leaderworkerset["spec"]["replicas"] == 3
    assert lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"] == {
        "maxSurge": 0,
        "maxUnavailable": "100%",
    }


def test_service_and_scale_selector_pick_one_leader_per_replica(
    validate_manifest: Callable[..., None],
) -> None:
    children = render(TWO_NODES, validate_manifest)
    leader, worker = templates(children)
    selector = children.service["spec"]["selector"]
    assert selector["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    # Our labels are on both roles; the worker-index label LWS adds tells them apart.
    rest = {k: v for k, v in selector.items() if not k.startswith("leaderworkerset.")}
    assert rest.items() <= leader["metadata"]["labels"].items()
    assert rest.items() <= worker["metadata"]["labels"].items()
    assert children.scale_selector == scale_selector_string("ds", 2)
    assert dict(pair.split("=") for pair in children.scale_selector.split(",")) == selector
    # The PDB covers every pod of every group.
    assert "leaderworkerset.sigs.k8s.io/worker-index" not in children.pdb["spec"]["selector"]["matchLabels"]
    assert (
        scale_selector_string("ds", 1)
        == "app.kubernetes.io/component=engine,app.kubernetes.io/instance=ds,app.kubernetes.io/name=ascend-llm"
    )


def test_leader_and_worker_share_the_pod_and_differ_in_role_and_port(
    validate_manifest: Callable[..., None],
) -> None:
    leader, worker = templates(render(TWO_NODES, validate_manifest))
    assert leader["metadata"]["labels"]["llm.ascend.dev/role"] == "leader"
    assert worker["metadata"]["labels"]["llm.ascend.dev/role"] == "worker"
    leader_engine, worker_engine = leader["spec"]["containers"][0], worker["spec"]["containers"][0]
    assert [p["name"] for p in leader_engine["ports"]] == ["http", "runtime"]
    assert [p["name"] for p in worker_engine["ports"]] == ["runtime"]
    strip = lambda c: {k: v for k, v in c.items() if k != "ports"}
    assert strip(leader_engine) == strip(worker_engine)
    assert leader["spec"] == {**worker["spec"], "containers": leader["spec"]["containers"]}
    assert leader["metadata"]["annotations"] == worker["metadata"]["annotations"]
    # The pod IP comes from the downward API; the runtime derives HCCL_IF_IP from it.
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in leader_engine[
        "env"
    ]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in leader["spec"][
        "volumes"
    ]


def test_one_configmap_serves_both_roles_with_hccl_from_spec_or_settings(
    validate_manifest: Callable[..., None],
) -> None:
    settings = load_settings(
        {
            "ASCEND_LLM_OPERATOR_HCCL_SOCKET_IFNAME": "bond0",
            "ASCEND_LLM_OPERATOR_HCCL_BUFFER_SIZE_MB": "512",
            "ASCEND_LLM_OPERATOR_HCCL_CONNECT_TIMEOUT_S": "600",
        }
    )
    from_settings = render(TWO_NODES, validate_manifest, settings=settings).engine_config.distributed
    assert (
        from_settings.socket_ifname,
        from_settings.hccl_buffsize_mb,
        from_settings.hccl_connect_timeout_s,
    ) == (
        "bond0",
        512,
        600,
    )
    spec = {
        **TWO_NODES,
        "distributed": {
            "leaderPort": 14000,
            "hccl": {
                "socketIfname": "eth1",
                "bufferSizeMB": 2048,
                "connectTimeoutSeconds": 3600,
                "execTimeoutSeconds": 0,
                "opExpansionMode": "AIV",
            },
        },
    }
    distributed = render(spec, validate_manifest, settings=settings).engine_config.distributed
    assert distributed.model_dump(exclude_defaults=True) == {
        "nodes": 2,
        "rpc_port": 14000,
        "npus_per_node": 8,
        "socket_ifname": "eth1",
        "hccl_buffsize_mb": 2048,
        "hccl_connect_timeout_s": 3600,
        "hccl_exec_timeout_s": 0,
        "hccl_op_expansion_mode": "AIV",
    }
    # Role, worker index and leader address stay at their defaults: the runtime takes them from
    # the env LWS sets, so leader and workers can share the ConfigMap.
    assert (distributed.role, distributed.worker_index, distributed.leader_address) == ("leader", 0, None)
    # With Ray the leader port is the Ray head's.
    ray = {
        **spec,
        "distributed": {"backend": "ray", "leaderPort": 6380},
        "parallelism": {"tensor": 8, "pipeline": 2},
    }
    ray_config = render(ray, validate_manifest).engine_config.distributed
    assert (ray_config.backend, ray_config.ray_port, ray_config.rpc_port) == ("ray", 6380, 13345)
    assert ray_config.layout_errors(8, 2, 1) == []


def test_gang_scheduling_settings_reach_both_roles_and_the_spec_wins(
    validate_manifest: Callable[..., None],
) -> None:
    for template in templates(render(TWO_NODES, validate_manifest, settings=VOLCANO)):
        assert template["spec"]["schedulerName"] == "volcano"
        assert template["metadata"]["labels"]["ring-controller.atlas"] == "ascend-910b"
        assert template["metadata"]["annotations"]["huawei.com/schedule_policy"] == "chip8-node16"
    own = {**TWO_NODES, "npu": {"perReplica": 8, "schedulerName": "kai-scheduler"}}
    leader, _ = templates(render(own, validate_manifest, settings=VOLCANO))
    assert leader["spec"]["schedulerName"] == "kai-scheduler"
    # Without the settings, no scheduler name, label or annotation.
    leader, _ = templates(render(TWO_NODES, validate_manifest))
    assert (
        "schedulerName" not in leader["spec"] and "ring-controller.atlas" not in leader["metadata"]["labels"]
    )
    assert set(leader["metadata"]["annotations"]) == {"llm.ascend.dev/config-hash"}
    # Single-node Deployments are left alone by the multi-node settings.
    single = render({"model": HF}, validate_manifest, settings=VOLCANO).deployment
    assert "schedulerName" not in single["spec"]["template"]["spec"]


def test_group_start_up_budget_grows_per_extra_node() -> None:
    one = parse_spec({**TWO_NODES, "nodesPerReplica": 1, "parallelism": {"tensor": 8}})
    three = parse_spec({**TWO_NODES, "nodesPerReplica": 3, "parallelism": {"tensor": 8, "data": 3}})
    assert startup_budget(three, DEFAULTS).attempt_s - startup_budget(one, DEFAULTS).attempt_s == 2 * 120


def test_remembered_mode_key_changes_with_the_topology_only_for_multinode() -> None:
    from ascend_operator.builders import remembered_mode_key

    single = parse_spec({"model": HF, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8}})
    mp = parse_spec(TWO_NODES)
    ray = parse_spec({**TWO_NODES, "distributed": {"backend": "ray"}, "parallelism": {"tensor": 16}})
    keys = {remembered_mode_key(spec, "img") for spec in (single, mp, ray)}
    assert len(keys) == 3


def test_lws_missing_names_the_api_and_the_fix() -> None:
    spec = parse_spec(TWO_NODES)
    message = lws_missing(spec, {"apps/v1", "keda.sh/v1alpha1"})
    assert message is not None
    assert "leaderworkerset.x-k8s.io/v1" in message and "install LeaderWorkerSet" in message
    assert "nodesPerReplica to 1" in message
    assert lws_missing(spec, {"leaderworkerset.x-k8s.io/v1"}) is None
    assert lws_missing(spec, {"leaderworkerset.x-k8s.io"}) is None
    assert lws_missing(parse_spec({"model": HF}), set()) is None


def test_long_names_give_valid_lws_pods(validate_manifest: Callable[..., None]) -> None:
    children = render(TWO_NODES, validate_manifest, name="deepseek-v3." + "x" * 200)
    lws = children.leaderworkerset["metadata"]["name"]
    assert len(lws) <= 40 and lws != children.service["metadata"]["name"]


# --- golden manifests ---------------------------------------------------------------------
# Generated once from the builders, then reviewed by hand against the examples, the LWS docs
# and the runtime's ascend_runtime.distributed contract.

EXPECTED_DEEPSEEK_V3_2NODE = {
    "leaderworkerset": {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "deepseek-v3-lws",
            "namespace": "llm",
            "labels": labels("deepseek-v3"),
            "annotations": {"llm.ascend.dev/spec-hash": "46ae7e44e3f5ffc0"},
        },
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": "100%"},
            },
            "leaderWorkerTemplate": {
                "size": 2,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {
                        "labels": {
                            **labels("deepseek-v3"),
                            "llm.ascend.dev/role": "leader",
                        },
                        "annotations": {"llm.ascend.dev/config-hash": "f8064b564a3328f4"},
                    },
                    "spec": engine_pod_spec(
                        container=engine_container(
                            image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0",
                            startup_failures=4570,
                            env=[
                                {
                                    "name": "ASCEND_VISIBLE_DEVICES",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "fieldPath": "metadata.annotations['huawei.com/Ascend910']",
                                        },
                                    },
                                },
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                },
                            ],
                            resources={
                                "requests": {"cpu": 64, "memory": "512Gi", "huawei.com/Ascend910": 8},
                                "limits": {"memory": "900Gi", "huawei.com/Ascend910": 8},
                            },
                            volumeMounts=[
                                *BASE_MOUNTS,
                                {
                                    "name": "model",
                                    "mountPath": "/mnt/model",
                                    "readOnly": True,
                                    "subPath": "DeepSeek-V3-w8a8",
                                },
                            ],
                        ),
                        volumes=[
                            *base_volumes("deepseek-v3-config", "64Gi"),
                            {
                                "name": "model",
                                "persistentVolumeClaim": {"claimName": "models", "readOnly": True},
                            },
                        ],
                        terminationGracePeriodSeconds=80,
                    ),
                },
                "workerTemplate": {
                    "metadata": {
                        "labels": {
                            **labels("deepseek-v3"),
                            "llm.ascend.dev/role": "worker",
                        },
                        "annotations": {"llm.ascend.dev/config-hash": "f8064b564a3328f4"},
                    },
                    "spec": engine_pod_spec(
                        container=engine_container(
                            image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0",
                            startup_failures=4570,
                            ports=[{"name": "runtime", "containerPort": 8080, "protocol": "TCP"}],
                            env=[
                                {
                                    "name": "ASCEND_VISIBLE_DEVICES",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "fieldPath": "metadata.annotations['huawei.com/Ascend910']",
                                        },
                                    },
                                },
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                },
                            ],
                            resources={
                                "requests": {"cpu": 64, "memory": "512Gi", "huawei.com/Ascend910": 8},
                                "limits": {"memory": "900Gi", "huawei.com/Ascend910": 8},
                            },
                            volumeMounts=[
                                *BASE_MOUNTS,
                                {
                                    "name": "model",
                                    "mountPath": "/mnt/model",
                                    "readOnly": True,
                                    "subPath": "DeepSeek-V3-w8a8",
                                },
                            ],
                        ),
                        volumes=[
                            *base_volumes("deepseek-v3-config", "64Gi"),
                            {
                                "name": "model",
                                "persistentVolumeClaim": {"claimName": "models", "readOnly": True},
                            },
                        ],
                        terminationGracePeriodSeconds=80,
                    ),
                },
            },
        },
    },
    "service": {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "deepseek-v3",
            "namespace": "llm",
            "labels": labels("deepseek-v3"),
            "annotations": {"llm.ascend.dev/spec-hash": "c65ddabe0b1aa85f"},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {
                **selector("deepseek-v3"),
                "leaderworkerset.sigs.k8s.io/worker-index": "0",
            },
            "ports": [
                {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    },
    "pdb": {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": "deepseek-v3",
            "namespace": "llm",
            "labels": labels("deepseek-v3"),
            "annotations": {"llm.ascend.dev/spec-hash": "c770fb436ad0fba9"},
        },
        "spec": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": selector("deepseek-v3")
            },
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    },
    "configmap": {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "deepseek-v3-config",
            "namespace": "llm",
            "labels": labels("deepseek-v3", "engine-config"),
            "annotations": {"llm.ascend.dev/spec-hash": "e679edb0a5edd744"},
        },
        "data": {},
    },
    "engine_config": engine_config_dict(
        name="deepseek-v3",
        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0",
        served_name="deepseek-v3",
        ready_timeout_s=2000,
        model={"trustRemoteCode": True},
        engine={
            "maxModelLen": 8192,
            "maxNumSeqs": 16,
            "gpuMemoryUtilization": 0.92,
            "quantization": "ascend",
            "parallel": {"tensor": 4, "data": 4, "expert": True},
            "shutdownTimeoutS": 60,
            "weightsStorage": "network",  # weights on a PersistentVolumeClaim
        },
        ascend={"multistreamOverlapSharedExpert": True},
        warmup={"promptLengths": [64, 2048], "concurrency": [1, 16]},
        distributed={
            "nodes": 2,
            "rpcPort": 13389,
            "npusPerNode": 8,
            "socketIfname": "eth0",
            "hcclBuffsizeMb": 1024,
            "hcclConnectTimeoutS": 1800,
        },
    ),
}

EXPECTED_DEEPSEEK_R1_A3_RAY = {
    "leaderworkerset": {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "deepseek-r1-a3-lws",
            "namespace": "llm",
            "labels": labels("deepseek-r1-a3"),
            "annotations": {"llm.ascend.dev/spec-hash": "fd8b2440b73c29d2"},
        },
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "leaderWorkerTemplate": {
                "size": 2,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {
                        "labels": {
                            **labels("deepseek-r1-a3"),
                            "llm.ascend.dev/role": "leader",
                            "ring-controller.atlas": "ascend-910b",
                        },
                        "annotations": {
                            "llm.ascend.dev/config-hash": "6add86f46a64a7bc",
                            "huawei.com/schedule_policy": "chip8-node16",
                        },
                    },
                    "spec": engine_pod_spec(
                        container=engine_container(
                            image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0-a3",
                            startup_failures=5220,
                            env=[
                                {
                                    "name": "ASCEND_VISIBLE_DEVICES",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "fieldPath": "metadata.annotations['huawei.com/Ascend910']",
                                        },
                                    },
                                },
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                },
                            ],
                            resources={
                                "requests": {"huawei.com/Ascend910": 16, "cpu": "128", "memory": "1024Gi"},
                                "limits": {"huawei.com/Ascend910": 16},
                            },
                            volumeMounts=[
                                *BASE_MOUNTS,
                                {"name": "model", "mountPath": "/mnt/model", "readOnly": True},
                            ],
                        ),
                        volumes=[
                            *base_volumes("deepseek-r1-a3-config", "64Gi"),
                            {
                                "name": "model",
                                "hostPath": {"path": "/data/models/DeepSeek-R1", "type": "Directory"},
                            },
                        ],
                        nodeSelector={"accelerator-type": "module-a3-16"},
                        schedulerName="volcano",
                    ),
                },
                "workerTemplate": {
                    "metadata": {
                        "labels": {
                            **labels("deepseek-r1-a3"),
                            "llm.ascend.dev/role": "worker",
                            "ring-controller.atlas": "ascend-910b",
                        },
                        "annotations": {
                            "llm.ascend.dev/config-hash": "6add86f46a64a7bc",
                            "huawei.com/schedule_policy": "chip8-node16",
                        },
                    },
                    "spec": engine_pod_spec(
                        container=engine_container(
                            image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0-a3",
                            startup_failures=5220,
                            ports=[{"name": "runtime", "containerPort": 8080, "protocol": "TCP"}],
                            env=[
                                {
                                    "name": "ASCEND_VISIBLE_DEVICES",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "fieldPath": "metadata.annotations['huawei.com/Ascend910']",
                                        },
                                    },
                                },
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                },
                            ],
                            resources={
                                "requests": {"huawei.com/Ascend910": 16, "cpu": "128", "memory": "1024Gi"},
                                "limits": {"huawei.com/Ascend910": 16},
                            },
                            volumeMounts=[
                                *BASE_MOUNTS,
                                {"name": "model", "mountPath": "/mnt/model", "readOnly": True},
                            ],
                        ),
                        volumes=[
                            *base_volumes("deepseek-r1-a3-config", "64Gi"),
                            {
                                "name": "model",
                                "hostPath": {"path": "/data/models/DeepSeek-R1", "type": "Directory"},
                            },
                        ],
                        nodeSelector={"accelerator-type": "module-a3-16"},
                        schedulerName="volcano",
                    ),
                },
            },
        },
    },
    "service": {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "deepseek-r1-a3",
            "namespace": "llm",
            "labels": labels("deepseek-r1-a3"),
            "annotations": {"llm.ascend.dev/spec-hash": "4cd4f60731a11fd9"},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {
                **selector("deepseek-r1-a3"),
                "leaderworkerset.sigs.k8s.io/worker-index": "0",
            },
            "ports": [
                {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    },
    "pdb": {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": "deepseek-r1-a3",
            "namespace": "llm",
            "labels": labels("deepseek-r1-a3"),
            "annotations": {"llm.ascend.dev/spec-hash": "a044ddb184a91d8b"},
        },
        "spec": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": selector("deepseek-r1-a3")
            },
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    },
    "configmap": {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "deepseek-r1-a3-config",
            "namespace": "llm",
            "labels": labels("deepseek-r1-a3", "engine-config"),
            "annotations": {"llm.ascend.dev/spec-hash": "93d13b45e0d36ba7"},
        },
        "data": {},
    },
    "engine_config": engine_config_dict(
        name="deepseek-r1-a3",
        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0-a3",
        served_name="deepseek-r1",
        ready_timeout_s=3140,
        model={"trustRemoteCode": True},
        engine={
            "maxModelLen": 16384,
            "maxNumSeqs": 32,
            "gpuMemoryUtilization": 0.9,
            "parallel": {"tensor": 16, "pipeline": 2, "expert": True},
        },
        graph={"policy": "piecewise"},
        ascend={"chip": "A3"},
        distributed={
            "nodes": 2,
            "backend": "ray",
            "npusPerNode": 16,
            "socketIfname": "eth0",
            "hcclBuffsizeMb": 1024,
            "hcclConnectTimeoutS": 1200,
        },
    ),
}
