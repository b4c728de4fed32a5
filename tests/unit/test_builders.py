"""The pure builders: spec + operator settings -> ConfigMap (engine config), Deployment, Service
and PodDisruptionBudget.

Complete expected manifests (golden dicts, kubespawner style, at the end of this module; the
engine configs and pod specs from the factories in :mod:`golden`, which hold what every example
shares) for each example, which between them cover every chip preset (910B, A3, 310P) and the CPU
platform; then focused tests for what the examples do not vary: per-chip defaults, driver host
mounts, hub tokens, the remembered graph mode, the start-up budget formula, grace periods, name
limits and the spec-hash annotation. Every manifest is also checked with kubernetes_validate.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ascend_operator.api import AscendLLMDeploymentSpec, parse_spec
from ascend_operator.builders import (
    CONFIG_HASH_ANNOTATION,
    RETRY_GRAPH_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    BuildMeta,
    Children,
    Remembered,
    build_children,
    remembered_mode_key,
    selector_string,
    startup_budget,
)
from ascend_operator.names import is_dns1035_label
from ascend_operator.settings import OperatorSettings, load_settings
from ascend_runtime.config import CONFIG_FILE_KEY, EngineConfig, GraphMode
from golden import (
    ABSENT,
    BASE_MOUNTS,
    base_volumes,
    engine_config_dict,
    engine_container,
    engine_pod_spec,
    labels,
    selector,
)

ROOT = Path(__file__).resolve().parents[2]
HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}}
DEFAULTS = load_settings({})


def render(
    spec: dict[str, Any],
    name: str = "demo",
    settings: OperatorSettings = DEFAULTS,
    remembered: Remembered | None = None,
) -> Children:
    children = build_children(BuildMeta(name, "llm"), parse_spec(spec), settings, remembered)
    for obj in children.objects():
        kubernetes_validate.validate(obj, "1.30", strict=True)
    return children


def container(children: Children) -> dict[str, Any]:
    return children.deployment["spec"]["template"]["spec"]["containers"][0]


def pod(children: Children) -> dict[str, Any]:
    return children.deployment["spec"]["template"]["spec"]


# --- golden manifests per example ---------------------------------------------------------


GOLDEN = {
    "a3-deployment.yaml": lambda: EXPECTED_A3_DEPLOYMENT,
    "cpu-tiny.yaml": lambda: EXPECTED_CPU_TINY,
    "deepseek-moe-ep.yaml": lambda: EXPECTED_DEEPSEEK_MOE_EP,
    "qwen72b-910b-tp8.yaml": lambda: EXPECTED_QWEN72B_910B_TP8,
    "small-310p.yaml": lambda: EXPECTED_SMALL_310P,
}


@pytest.mark.parametrize("example", sorted(GOLDEN))
def test_example_renders_the_expected_manifests(example: str) -> None:
    resource = yaml.safe_load((ROOT / "examples" / example).read_text())
    children = render(resource["spec"], resource["metadata"]["name"])
    expected = GOLDEN[example]()
    assert children.deployment == expected["deployment"]
    assert children.service == expected["service"]
    assert children.pdb == expected["pdb"]
    configmap = copy.deepcopy(children.configmap)
    text = configmap["data"].pop(CONFIG_FILE_KEY)
    assert configmap == {**expected["configmap"], "data": {}}
    assert yaml.safe_load(text) == expected["engine_config"]
    # The ConfigMap holds exactly what the runtime will parse back.
    assert EngineConfig.model_validate(yaml.safe_load(text)) == children.engine_config
    assert text == children.engine_config.to_yaml()


def test_examples_cover_every_chip_preset_and_cpu() -> None:
    chips = set()
    for example in GOLDEN:
        spec = parse_spec(yaml.safe_load((ROOT / "examples" / example).read_text())["spec"])
        chips.add("CPU" if spec.platform.value == "CPU" else spec.npu.chip.value)
    assert chips == {"910B", "A3", "310P", "CPU"}


# --- per-chip defaults --------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, resource, image_suffix, dtype",
    [
        ({"model": HF}, "huawei.com/Ascend910", "-vllm-ascend-v0.23.0", None),
        (
            {"model": HF, "npu": {"chip": "A3", "perReplica": 2}, "parallelism": {"tensor": 2}},
            "huawei.com/Ascend910",
            "-vllm-ascend-v0.23.0-a3",
            None,
        ),
        (
            {"model": HF, "npu": {"chip": "310P"}},
            "huawei.com/Ascend310P",
            "-vllm-ascend-v0.23.0-310p",
            "float16",
        ),
        (
            {"model": HF, "npu": {"resourceName": "huawei.com/Ascend910-6c.1cpu.16g"}},
            "huawei.com/Ascend910-6c.1cpu.16g",
            "-vllm-ascend-v0.23.0",
            None,
        ),
    ],
)
def test_chip_presets_choose_resource_image_and_dtype(
    spec: dict[str, Any], resource: str, image_suffix: str, dtype: str | None
) -> None:
    children = render(spec)
    engine = container(children)
    per_replica = parse_spec(spec).npu.per_replica
    assert engine["resources"]["limits"] == {resource: per_replica}
    assert engine["resources"]["requests"][resource] == per_replica
    assert engine["env"][0] == {
        "name": "ASCEND_VISIBLE_DEVICES",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{resource}']"}},
    }
    assert engine["image"] == f"ghcr.io/ascend-llm/runtime:0.1.0{image_suffix}"
    assert children.engine_config.engine.dtype == dtype
    assert children.engine_config.ascend.chip is not None


def test_cpu_platform_has_no_npu_wiring_even_with_driver_mounts() -> None:
    settings = load_settings({"ASCEND_LLM_OPERATOR_HOST_MOUNTS": "driver"})
    children = render({"model": HF, "platform": "CPU"}, settings=settings)
    engine = container(children)
    assert "resources" not in engine
    assert [e["name"] for e in engine["env"]] == ["HF_HOME"]
    assert [v["name"] for v in pod(children)["volumes"]] == ["engine-config", "dshm", "runtime-state", "model-cache"]
    config = children.engine_config
    assert config.ascend.chip is None and config.engine.dtype == "float32"
    assert config.engine.env == {"VLLM_CPU_KVCACHE_SPACE": "1"} and config.runtime.preflight is False


def test_explicit_image_wins_over_the_chip_default() -> None:
    children = render({"model": HF, "image": "registry.local/rt:dev"})
    assert container(children)["image"] == "registry.local/rt:dev" == children.engine_config.image


def test_device_env_can_be_turned_off() -> None:
    settings = load_settings({"ASCEND_LLM_OPERATOR_DEVICE_ENV_FROM_ANNOTATION": "false"})
    engine = container(render({"model": {"pvc": {"claimName": "m"}}}, settings=settings))
    assert "env" not in engine


# --- volumes, sources, tokens -------------------------------------------------------------


def test_driver_host_mounts_when_the_cluster_has_no_ascend_docker_runtime() -> None:
    settings = load_settings({"ASCEND_LLM_OPERATOR_HOST_MOUNTS": "driver"})
    children = render(
        {"model": {"pvc": {"claimName": "models", "subPath": "qwen", "readOnly": False}}}, settings=settings
    )
    assert pod(children)["volumes"][3:] == [
        {"name": "model", "persistentVolumeClaim": {"claimName": "models", "readOnly": False}},
        {"name": "ascend-driver", "hostPath": {"path": "/usr/local/Ascend/driver", "type": "Directory"}},
        {"name": "ascend-dcmi", "hostPath": {"path": "/usr/local/dcmi", "type": "Directory"}},
        {"name": "npu-smi", "hostPath": {"path": "/usr/local/bin/npu-smi", "type": "File"}},
        {"name": "ascend-install-info", "hostPath": {"path": "/etc/ascend_install.info", "type": "File"}},
    ]
    assert container(children)["volumeMounts"][3:] == [
        {"name": "model", "mountPath": "/mnt/model", "readOnly": False, "subPath": "qwen"},
        {"name": "ascend-driver", "mountPath": "/usr/local/Ascend/driver", "readOnly": True},
        {"name": "ascend-dcmi", "mountPath": "/usr/local/dcmi", "readOnly": True},
        {"name": "npu-smi", "mountPath": "/usr/local/bin/npu-smi", "readOnly": True},
        {"name": "ascend-install-info", "mountPath": "/etc/ascend_install.info", "readOnly": True},
    ]
    assert children.engine_config.model.path == "/mnt/model"


def test_modelscope_token_comes_from_the_secret_reference() -> None:
    settings = load_settings({"ASCEND_LLM_OPERATOR_MODEL_CACHE_SIZE": "200Gi"})
    children = render(
        {
            "model": {
                "modelScope": {"id": "qwen/Qwen2.5-7B-Instruct"},
                "revision": "v1.0",
                "tokenSecretRef": {"name": "ms-token", "key": "token"},
            }
        },
        settings=settings,
    )
    assert container(children)["env"][1:] == [
        {"name": "VLLM_USE_MODELSCOPE", "value": "true"},
        {"name": "MODELSCOPE_CACHE", "value": "/var/cache/ascend-llm/modelscope"},
        {"name": "MODELSCOPE_API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "ms-token", "key": "token"}}},
    ]
    assert pod(children)["volumes"][-1] == {"name": "model-cache", "emptyDir": {"sizeLimit": "200Gi"}}
    model = children.engine_config.model
    assert (model.path, model.revision, model.served_name) == (
        "qwen/Qwen2.5-7B-Instruct",
        "v1.0",
        "qwen/Qwen2.5-7B-Instruct",
    )
    # The token itself never reaches the engine config.
    assert "token" not in children.configmap["data"][CONFIG_FILE_KEY].lower().replace("maxtokens", "")


def test_passthrough_engine_and_health_options_reach_the_engine_config() -> None:
    children = render(
        {
            "model": HF,
            "engine": {
                "quantization": "ascend",
                "extraArgs": ["--seed", "1"],
                "env": {"TASK_QUEUE_ENABLE": "2"},
                "shutdownTimeoutSeconds": 120,
            },
            "health": {"hangTimeoutSeconds": 60, "leak": {"enabled": False, "graceSeconds": 0}},
            "warmup": {"enabled": False},
            "graph": {"policy": "eager", "fallback": False},
        }
    )
    config = children.engine_config
    assert (config.engine.quantization, config.engine.extra_args) == ("ascend", ["--seed", "1"])
    assert config.engine.env == {"TASK_QUEUE_ENABLE": "2"} and config.engine.shutdown_timeout_s == 120
    assert (
        config.health.hang_timeout_s == 60
        and config.health.leak.enabled is False
        and config.health.leak.grace_s == 0
    )
    assert config.warmup.enabled is False
    # preStop 5 + drain 120 + margin 15.
    assert pod(children)["terminationGracePeriodSeconds"] == 140


def test_tuned_defaults_switch_reaches_the_engine_config_only_when_set() -> None:
    # Unset, the ConfigMap and the pod template stay what they were before the field existed (the
    # golden examples above pin them byte for byte); set, the runtime gets it and the pods roll.
    plain = render({"model": HF})
    assert plain.engine_config.engine.tuned_defaults is None
    assert "tunedDefaults" not in plain.configmap["data"][CONFIG_FILE_KEY]
    config_hash = lambda c: c.deployment["spec"]["template"]["metadata"]["annotations"][  # noqa: E731
        CONFIG_HASH_ANNOTATION
    ]
    for value in (False, True):
        switched = render({"model": HF, "engine": {"tunedDefaults": value}})
        assert switched.engine_config.engine.tuned_defaults is value
        text = switched.configmap["data"][CONFIG_FILE_KEY]
        assert yaml.safe_load(text)["engine"]["tunedDefaults"] is value
        assert config_hash(switched) != config_hash(plain)


# --- remembered graph mode ------------------------------------------------------------------


def test_remembered_mode_is_used_only_while_its_key_matches() -> None:
    spec = {"model": HF, "npu": {"perReplica": 2}, "parallelism": {"tensor": 2}}
    image = DEFAULTS.runtime_image(parse_spec(spec).npu.chip)
    key = remembered_mode_key(parse_spec(spec), image)
    remembered = Remembered(remembered_mode=GraphMode.PIECEWISE, remembered_for=key)
    children = render(spec, remembered=remembered)
    assert children.remembered_key == key
    assert children.engine_config.graph.start_mode is GraphMode.PIECEWISE
    # A new image, revision or parallelism invalidates it.
    for changed in (
        {**spec, "image": "other:1"},
        {**spec, "model": {**HF, "revision": "main"}},
        {**spec, "parallelism": {"pipeline": 2}},
    ):
        assert render(changed, remembered=remembered).engine_config.graph.start_mode is None
    assert render(spec).engine_config.graph.start_mode is None


def test_the_retry_annotation_lets_new_pods_try_the_top_of_the_ladder_again() -> None:
    spec = {"model": HF}
    image = DEFAULTS.runtime_image(parse_spec(spec).npu.chip)
    remembered = Remembered(remembered_mode=GraphMode.EAGER, remembered_for=remembered_mode_key(parse_spec(spec), image))

    def start_mode(annotations: dict[str, str]) -> GraphMode | None:
        meta = BuildMeta("demo", "llm", annotations=annotations)
        return build_children(meta, parse_spec(spec), DEFAULTS, remembered).engine_config.graph.start_mode

    assert start_mode({}) is GraphMode.EAGER
    assert start_mode({"unrelated.io/x": "1"}) is GraphMode.EAGER
    assert start_mode({RETRY_GRAPH_ANNOTATION: "2026-12-01"}) is None  # a new key: the remembered mode is dropped
    retried_key = remembered_mode_key(parse_spec(spec), image, "2026-12-01")
    again = Remembered(remembered_mode=GraphMode.EAGER, remembered_for=retried_key)  # remembered anew under it
    meta = BuildMeta("demo", "llm", annotations={RETRY_GRAPH_ANNOTATION: "2026-12-01"})
    assert build_children(meta, parse_spec(spec), DEFAULTS, again).engine_config.graph.start_mode is GraphMode.EAGER


# --- start-up budget, probes, rollout ---------------------------------------------------------


def test_startup_budget_follows_the_documented_formula() -> None:
    spec = parse_spec(
        {"model": {"pvc": {"claimName": "m"}, "sizeGiB": 100}, "warmup": {"timeoutSeconds": 600}}
    )
    # load 180 + 100 GiB x 2 s; capture 300 (auto). The preflight may take one attempt, the
    # ladder has three rungs, each relaunch waits up to 120 s for the chips; + warmup 600.
    assert startup_budget(spec, DEFAULTS).attempt_s == 180 + 200 + 300
    assert startup_budget(spec, DEFAULTS).total_s == 680 + 3 * 680 + 2 * 120 + 600
    piecewise = parse_spec({"model": {"pvc": {"claimName": "m"}, "sizeGiB": 100},
                            "graph": {"policy": "piecewise"}, "warmup": {"enabled": False}})
    assert startup_budget(piecewise, DEFAULTS).total_s == 620 + 2 * 620 + 120  # capture 240; PIECEWISE -> EAGER
    eager = parse_spec(
        {"model": {**HF, "sizeGiB": 10}, "graph": {"policy": "eager"}, "warmup": {"enabled": False}}
    )
    assert startup_budget(eager, DEFAULTS).total_s == 2 * (180 + 10 * 12)  # preflight + one rung
    static = parse_spec(
        {
            "model": {**HF, "sizeGiB": 10},
            "graph": {"policy": "piecewise", "fallback": False},
            "ascend": {"enableStaticKernel": True},
            "warmup": {"enabled": False},
        }
    )
    assert startup_budget(static, DEFAULTS).total_s == 2 * (180 + 120 + 240 + 1800)
    unknown = parse_spec(
        {"model": {"hostPath": {"path": "/m"}}, "graph": {"fallback": False}, "warmup": {"enabled": False}}
    )
    assert startup_budget(unknown, DEFAULTS).total_s == 2 * (180 + 64 * 2 + 300)
    cpu = parse_spec(yaml.safe_load((ROOT / "examples" / "cpu-tiny.yaml").read_text())["spec"])
    budget = startup_budget(cpu, DEFAULTS)
    warmup = cpu.warmup.timeout_seconds or 900 if cpu.warmup.enabled else 0
    assert budget.total_s == 2 * budget.attempt_s + warmup  # PIECEWISE -> EAGER, no preflight, no chips


def test_startup_probe_covers_the_budget_and_runtime_timeout_one_attempt() -> None:
    spec = {"model": {"pvc": {"claimName": "m"}, "sizeGiB": 100}}
    children = render(spec)
    probe = container(children)["startupProbe"]
    budget = startup_budget(parse_spec(spec), DEFAULTS)
    assert probe["failureThreshold"] * probe["periodSeconds"] >= budget.total_s
    assert (probe["failureThreshold"] - 1) * probe["periodSeconds"] < budget.total_s
    assert children.engine_config.runtime.ready_timeout_s == budget.attempt_s
    assert children.deployment["spec"]["progressDeadlineSeconds"] > budget.total_s


def test_rollout_never_needs_a_spare_npu() -> None:
    recreate = render({"model": HF}).deployment["spec"]["strategy"]
    rolling = render({"model": HF, "rollout": {"strategy": "RollingUpdate"}}).deployment["spec"]["strategy"]
    assert recreate == {"type": "Recreate"}
    assert rolling == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def test_pod_security_matches_the_image_user() -> None:
    settings = load_settings(
        {"ASCEND_LLM_OPERATOR_ENGINE_RUN_AS_USER": "1001", "ASCEND_LLM_OPERATOR_ENGINE_RUN_AS_GROUP": "1002"}
    )
    security = pod(render({"model": HF}, settings=settings))["securityContext"]
    assert security == {
        "runAsNonRoot": True,
        "runAsUser": 1001,
        "runAsGroup": 1002,
        "seccompProfile": {"type": "RuntimeDefault"},
        "fsGroup": 1000,
    }


# --- names, labels, hashes ----------------------------------------------------------------


def test_long_resource_names_give_valid_children() -> None:
    name = "a-very-long-resource-name." + "x" * 200
    children = render({"model": HF}, name=name)
    for obj in children.objects():
        assert is_dns1035_label(obj["metadata"]["name"])
        assert all(len(value) <= 63 for value in obj["metadata"]["labels"].values())
    assert (
        children.deployment["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
        == children.names.configmap
    )


def test_selector_string_matches_the_pod_labels() -> None:
    children = render({"model": HF}, name="demo")
    labels = children.deployment["spec"]["template"]["metadata"]["labels"]
    pairs = dict(item.split("=") for item in selector_string("demo").split(","))
    assert pairs == children.deployment["spec"]["selector"]["matchLabels"]
    assert pairs.items() <= labels.items()
    assert children.service["spec"]["selector"] == pairs


def test_children_carry_no_owner_references_and_the_common_labels() -> None:
    for obj in render({"model": HF}).objects():
        assert "ownerReferences" not in obj["metadata"]
        assert {
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/component",
            "app.kubernetes.io/managed-by",
            "app.kubernetes.io/part-of",
        } <= set(obj["metadata"]["labels"])
        assert SPEC_HASH_ANNOTATION in obj["metadata"]["annotations"]


def test_spec_hash_is_stable_and_follows_each_childs_own_content() -> None:
    spec = {"model": HF, "engine": {"env": {"B": "2", "A": "1"}}}
    first, again = render(spec), render(copy.deepcopy(spec))
    assert [o["metadata"]["annotations"] for o in first.objects()] == [
        o["metadata"]["annotations"] for o in again.objects()
    ]
    reordered = render({"engine": {"env": {"A": "1", "B": "2"}}, "model": HF})
    assert reordered.deployment == first.deployment

    def hashes(children: Children) -> dict[str, str]:
        return {o["metadata"]["name"] if o["kind"] == "Service" else o["kind"]:
                o["metadata"]["annotations"][SPEC_HASH_ANNOTATION] for o in children.objects()}

    scaled = render({**spec, "replicas": 3})
    assert hashes(scaled)["Deployment"] != hashes(first)["Deployment"]
    assert {k: v for k, v in hashes(scaled).items() if k != "Deployment"} == {
        k: v for k, v in hashes(first).items() if k != "Deployment"
    }
    # A config-only change rolls the pods through the template's config hash.
    tuned = render({**spec, "engine": {"maxNumSeqs": 8}})
    assert hashes(tuned)["ConfigMap"] != hashes(first)["ConfigMap"]
    template_hash = lambda c: c.deployment["spec"]["template"]["metadata"]["annotations"][
        CONFIG_HASH_ANNOTATION
    ]  # noqa: E731
    assert template_hash(tuned) != template_hash(first)
    ported = render({**spec, "service": {"port": 80}})
    assert (
        hashes(ported)["demo"] != hashes(first)["demo"]
        and hashes(ported)["demo-runtime"] == hashes(first)["demo-runtime"]
        and hashes(ported)["Deployment"] == hashes(first)["Deployment"]
    )


def test_builders_do_not_mutate_their_inputs() -> None:
    spec = parse_spec({"model": HF, "npu": {"nodeSelector": {"a": "b"}, "affinity": {"nodeAffinity": {}}}})
    before = spec.model_dump()
    children = build_children(BuildMeta("demo", "llm"), spec, DEFAULTS)
    pod(children)["nodeSelector"]["a"] = "changed"
    pod(children)["affinity"]["podAffinity"] = {}
    assert spec.model_dump() == before
    assert isinstance(spec, AscendLLMDeploymentSpec)


# --- golden manifests ---------------------------------------------------------------------
# Reviewed by hand against the examples; the ConfigMap's data is compared as parsed YAML
# (engine_config) so a diff shows the field that changed.

EXPECTED_A3_DEPLOYMENT = {
    "deployment": {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "qwen3-30b-a3",
            "namespace": "llm",
            "labels": labels("qwen3-30b-a3"),
            "annotations": {"llm.ascend.dev/spec-hash": "395b433a5f47dc21"},
        },
        "spec": {
            "replicas": 1,
            "selector": {
                "matchLabels": selector("qwen3-30b-a3")
            },
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 4148,
            "template": {
                "metadata": {
                    "labels": labels("qwen3-30b-a3"),
                    "annotations": {"llm.ascend.dev/config-hash": "92b7d4ccb5b71087"},
                },
                "spec": engine_pod_spec(
                    container=engine_container(
                        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0-a3",
                        startup_failures=1774,
                        env=[
                            {
                                "name": "ASCEND_VISIBLE_DEVICES",
                                "valueFrom": {
                                    "fieldRef": {
                                        "fieldPath": "metadata.annotations['huawei.com/Ascend910']",
                                    },
                                },
                            },
                        ],
                        resources={
                            "requests": {"huawei.com/Ascend910": 4, "cpu": "32", "memory": "256Gi"},
                            "limits": {"huawei.com/Ascend910": 4},
                        },
                        volumeMounts=[
                            *BASE_MOUNTS,
                            {"name": "model", "mountPath": "/mnt/model", "readOnly": True},
                        ],
                    ),
                    volumes=[
                        *base_volumes("qwen3-30b-a3-config"),
                        {
                            "name": "model",
                            "hostPath": {"path": "/data/models/Qwen3-30B-A3B", "type": "Directory"},
                        },
                    ],
                    affinity={
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "accelerator-type",
                                                "operator": "In",
                                                "values": ["module-a3-16"],
                                            },
                                        ],
                                    },
                                ],
                            },
                        },
                    },
                    priorityClassName="llm-serving",
                    schedulerName="volcano",
                ),
            },
        },
    },
    "service": {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "qwen3-30b-a3",
            "namespace": "llm",
            "labels": labels("qwen3-30b-a3"),
            "annotations": {"llm.ascend.dev/spec-hash": "71250c41a78a5c75"},
        },
        "spec": {
            "type": "LoadBalancer",
            "selector": selector("qwen3-30b-a3"),
            "ports": [
                {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    },
    "pdb": {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": "qwen3-30b-a3",
            "namespace": "llm",
            "labels": labels("qwen3-30b-a3"),
            "annotations": {"llm.ascend.dev/spec-hash": "4e64408d0962351d"},
        },
        "spec": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": selector("qwen3-30b-a3")
            },
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    },
    "configmap": {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "qwen3-30b-a3-config",
            "namespace": "llm",
            "labels": labels("qwen3-30b-a3", "engine-config"),
            "annotations": {"llm.ascend.dev/spec-hash": "912e4a059fea90f0"},
        },
        "data": {"engine-config.yaml": "<engine config below>"},
    },
    "engine_config": engine_config_dict(
        name="qwen3-30b-a3",
        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0-a3",
        served_name="qwen3-30b-a3b",
        ready_timeout_s=602,
        engine={
            "maxModelLen": 32768,
            "enablePrefixCaching": True,
            "parallel": {"tensor": 4, "expert": True},
        },
        graph={"captureSizes": [1, 2, 4, 8, 16, 32, 64], "maxCaptureSize": 64},
        ascend={
            "chip": "A3",
            "multistreamOverlapSharedExpert": True,
            "additionalConfig": {"enable_shared_expert_dp": False},
        },
        health={"leak": {"deviceGrowthMbPerHour": 256.0}, "hangTimeoutS": 600},
    ),
}

EXPECTED_CPU_TINY = {
    "deployment": {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "cpu-tiny",
            "namespace": "llm",
            "labels": labels("cpu-tiny"),
            "annotations": {"llm.ascend.dev/spec-hash": "debbfb1b47a70dbf"},
        },
        "spec": {
            "replicas": 1,
            "selector": {
                "matchLabels": selector("cpu-tiny")
            },
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 2462,
            "template": {
                "metadata": {
                    "labels": labels("cpu-tiny"),
                    "annotations": {"llm.ascend.dev/config-hash": "34dc24039e667f3d"},
                },
                "spec": engine_pod_spec(
                    container=engine_container(
                        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-cpu",
                        startup_failures=931,
                        resources={
                            "requests": {"cpu": "2", "memory": "4Gi"},
                            "limits": {"memory": "8Gi"},
                        },
                        volumeMounts=[
                            *BASE_MOUNTS,
                            {"name": "model", "mountPath": "/mnt/model", "readOnly": True},
                        ],
                    ),
                    volumes=[
                        *base_volumes("cpu-tiny-config"),
                        {
                            "name": "model",
                            "hostPath": {"path": "/models/tiny", "type": "Directory"},
                        },
                    ],
                ),
            },
        },
    },
    "service": {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "cpu-tiny",
            "namespace": "llm",
            "labels": labels("cpu-tiny"),
            "annotations": {"llm.ascend.dev/spec-hash": "2f5c36509a44f7ae"},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector("cpu-tiny"),
            "ports": [
                {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    },
    "pdb": {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": "cpu-tiny",
            "namespace": "llm",
            "labels": labels("cpu-tiny"),
            "annotations": {"llm.ascend.dev/spec-hash": "8efa039e2e9a29a4"},
        },
        "spec": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": selector("cpu-tiny")
            },
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    },
    "configmap": {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "cpu-tiny-config",
            "namespace": "llm",
            "labels": labels("cpu-tiny", "engine-config"),
            "annotations": {"llm.ascend.dev/spec-hash": "68b323dc8c2b2e22"},
        },
        "data": {"engine-config.yaml": "<engine config below>"},
    },
    "engine_config": engine_config_dict(
        name="cpu-tiny",
        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-cpu",
        served_name="tiny",
        ready_timeout_s=481,
        engine={
            "maxModelLen": 512,
            "maxNumSeqs": 4,
            "dtype": "float32",
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
        },
        ascend={"chip": ABSENT},
        warmup={"promptLengths": [8, 64], "concurrency": [1, 4], "maxTokens": 4},
        runtime={"preflight": False},
    ),
}

EXPECTED_DEEPSEEK_MOE_EP = {
    "deployment": {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "deepseek-v2-lite",
            "namespace": "llm",
            "labels": labels("deepseek-v2-lite"),
            "annotations": {"llm.ascend.dev/spec-hash": "b93bb603366e7574"},
        },
        "spec": {
            "replicas": 1,
            "selector": {
                "matchLabels": selector("deepseek-v2-lite")
            },
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 5196,
            "template": {
                "metadata": {
                    "labels": labels("deepseek-v2-lite"),
                    "annotations": {"llm.ascend.dev/config-hash": "0d8a7f544c82ad23"},
                },
                "spec": engine_pod_spec(
                    container=engine_container(
                        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0",
                        startup_failures=2298,
                        env=[
                            {
                                "name": "ASCEND_VISIBLE_DEVICES",
                                "valueFrom": {
                                    "fieldRef": {
                                        "fieldPath": "metadata.annotations['huawei.com/Ascend910']",
                                    },
                                },
                            },
                            {"name": "HF_HOME", "value": "/var/cache/ascend-llm/huggingface"},
                            {
                                "name": "HF_TOKEN",
                                "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
                            },
                        ],
                        resources={
                            "requests": {"huawei.com/Ascend910": 8, "cpu": "64", "memory": "512Gi"},
                            "limits": {"huawei.com/Ascend910": 8},
                        },
                        volumeMounts=[
                            *BASE_MOUNTS,
                            {"name": "model-cache", "mountPath": "/var/cache/ascend-llm"},
                        ],
                    ),
                    volumes=[
                        *base_volumes("deepseek-v2-lite-config"),
                        {"name": "model-cache", "emptyDir": {}},
                    ],
                ),
            },
        },
    },
    "service": {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "deepseek-v2-lite",
            "namespace": "llm",
            "labels": labels("deepseek-v2-lite"),
            "annotations": {"llm.ascend.dev/spec-hash": "4afb851fc8fdc3d6"},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector("deepseek-v2-lite"),
            "ports": [
                {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    },
    "pdb": {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": "deepseek-v2-lite",
            "namespace": "llm",
            "labels": labels("deepseek-v2-lite"),
            "annotations": {"llm.ascend.dev/spec-hash": "d8678c4b37fa9141"},
        },
        "spec": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": selector("deepseek-v2-lite")
            },
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    },
    "configmap": {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "deepseek-v2-lite-config",
            "namespace": "llm",
            "labels": labels("deepseek-v2-lite", "engine-config"),
            "annotations": {"llm.ascend.dev/spec-hash": "35c0d0996f9b2082"},
        },
        "data": {"engine-config.yaml": "<engine config below>"},
    },
    "engine_config": engine_config_dict(
        name="deepseek-v2-lite",
        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0",
        served_name="deepseek-ai/DeepSeek-V2-Lite-Chat",
        ready_timeout_s=864,
        model={"path": "deepseek-ai/DeepSeek-V2-Lite-Chat", "trustRemoteCode": True},
        engine={
            "maxModelLen": 16384,
            "maxNumSeqs": 128,
            "gpuMemoryUtilization": 0.9,
            "enablePrefixCaching": True,
            "parallel": {"tensor": 4, "data": 2, "expert": True},
        },
        ascend={"multistreamOverlapSharedExpert": True},
        warmup={"promptLengths": [64, 1024, 8192], "concurrency": [1, 32, 128]},
    ),
}

EXPECTED_QWEN72B_910B_TP8 = {
    "deployment": {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "qwen72b",
            "namespace": "llm",
            "labels": labels("qwen72b"),
            "annotations": {"llm.ascend.dev/spec-hash": "fde816639cbd43fa"},
        },
        "spec": {
            "replicas": 1,
            "selector": {
                "matchLabels": selector("qwen72b")
            },
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 5048,
            "template": {
                "metadata": {
                    "labels": labels("qwen72b"),
                    "annotations": {"llm.ascend.dev/config-hash": "6c9108a2e622ae2d"},
                },
                "spec": engine_pod_spec(
                    container=engine_container(
                        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0",
                        startup_failures=2224,
                        env=[
                            {
                                "name": "ASCEND_VISIBLE_DEVICES",
                                "valueFrom": {
                                    "fieldRef": {
                                        "fieldPath": "metadata.annotations['huawei.com/Ascend910']",
                                    },
                                },
                            },
                        ],
                        resources={
                            "requests": {"cpu": "32", "memory": "256Gi", "huawei.com/Ascend910": 8},
                            "limits": {"memory": "512Gi", "huawei.com/Ascend910": 8},
                        },
                        volumeMounts=[
                            *BASE_MOUNTS,
                            {
                                "name": "model",
                                "mountPath": "/mnt/model",
                                "readOnly": True,
                                "subPath": "Qwen2.5-72B-Instruct",
                            },
                        ],
                    ),
                    volumes=[
                        *base_volumes("qwen72b-config"),
                        {
                            "name": "model",
                            "persistentVolumeClaim": {"claimName": "models", "readOnly": True},
                        },
                    ],
                    nodeSelector={"accelerator": "huawei-Ascend910"},
                ),
            },
        },
    },
    "service": {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "qwen72b",
            "namespace": "llm",
            "labels": labels("qwen72b"),
            "annotations": {"llm.ascend.dev/spec-hash": "6c04c3e18bd97bd4"},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector("qwen72b"),
            "ports": [
                {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    },
    "pdb": {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": "qwen72b",
            "namespace": "llm",
            "labels": labels("qwen72b"),
            "annotations": {"llm.ascend.dev/spec-hash": "2d377bb2decf8601"},
        },
        "spec": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": selector("qwen72b")
            },
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    },
    "configmap": {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "qwen72b-config",
            "namespace": "llm",
            "labels": labels("qwen72b", "engine-config"),
            "annotations": {"llm.ascend.dev/spec-hash": "815431c388a82ae0"},
        },
        "data": {"engine-config.yaml": "<engine config below>"},
    },
    "engine_config": engine_config_dict(
        name="qwen72b",
        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0",
        served_name="qwen2.5-72b-instruct",
        ready_timeout_s=752,
        engine={
            "maxModelLen": 32768,
            "maxNumSeqs": 64,
            "gpuMemoryUtilization": 0.9,
            "enablePrefixCaching": True,
            "dtype": "bfloat16",
            "parallel": {"tensor": 8},
            "weightsStorage": "network",  # weights on a PersistentVolumeClaim
        },
        graph={"policy": "auto"},
        warmup={"promptLengths": [128, 2048, 16384], "concurrency": [1, 16, 64], "timeoutS": 1200},
    ),
}

EXPECTED_SMALL_310P = {
    "deployment": {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "qwen-small-310p",
            "namespace": "llm",
            "labels": labels("qwen-small-310p"),
            "annotations": {"llm.ascend.dev/spec-hash": "040e52e4abef2b1c"},
        },
        "spec": {
            "replicas": 2,
            "selector": {
                "matchLabels": selector("qwen-small-310p")
            },
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 2484,
            "template": {
                "metadata": {
                    "labels": labels("qwen-small-310p"),
                    "annotations": {"llm.ascend.dev/config-hash": "ec988129ffbb7d7e"},
                },
                "spec": engine_pod_spec(
                    container=engine_container(
                        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0-310p",
                        startup_failures=942,
                        env=[
                            {
                                "name": "ASCEND_VISIBLE_DEVICES",
                                "valueFrom": {
                                    "fieldRef": {
                                        "fieldPath": "metadata.annotations['huawei.com/Ascend310P']",
                                    },
                                },
                            },
                            {"name": "VLLM_USE_MODELSCOPE", "value": "true"},
                            {
                                "name": "MODELSCOPE_CACHE",
                                "value": "/var/cache/ascend-llm/modelscope",
                            },
                        ],
                        resources={
                            "requests": {"huawei.com/Ascend310P": 1, "cpu": "4", "memory": "24Gi"},
                            "limits": {"huawei.com/Ascend310P": 1},
                        },
                        volumeMounts=[
                            *BASE_MOUNTS,
                            {"name": "model-cache", "mountPath": "/var/cache/ascend-llm"},
                        ],
                    ),
                    volumes=[
                        *base_volumes("qwen-small-310p-config"),
                        {"name": "model-cache", "emptyDir": {}},
                    ],
                    tolerations=[
                        {
                            "key": "huawei.com/Ascend310P",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        },
                    ],
                ),
            },
        },
    },
    "service": {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "qwen-small-310p",
            "namespace": "llm",
            "labels": labels("qwen-small-310p"),
            "annotations": {"llm.ascend.dev/spec-hash": "1dec105d68d27637"},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector("qwen-small-310p"),
            "ports": [
                {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    },
    "pdb": {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": "qwen-small-310p",
            "namespace": "llm",
            "labels": labels("qwen-small-310p"),
            "annotations": {"llm.ascend.dev/spec-hash": "14715e1698ad4961"},
        },
        "spec": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": selector("qwen-small-310p")
            },
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    },
    "configmap": {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "qwen-small-310p-config",
            "namespace": "llm",
            "labels": labels("qwen-small-310p", "engine-config"),
            "annotations": {"llm.ascend.dev/spec-hash": "6c8dfa2a93b46b5c"},
        },
        "data": {"engine-config.yaml": "<engine config below>"},
    },
    "engine_config": engine_config_dict(
        name="qwen-small-310p",
        image="ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0-310p",
        served_name="qwen2.5-3b-instruct",
        ready_timeout_s=492,
        model={"path": "Qwen/Qwen2.5-3B-Instruct"},
        engine={"maxModelLen": 8192, "maxNumSeqs": 16, "dtype": "float16"},
        graph={"policy": "piecewise"},
        ascend={"chip": "310P"},
    ),
}


def test_warmup_chat_reaches_the_engine_config() -> None:
    assert render({"model": HF}).engine_config.warmup.chat is True
    assert render({"model": HF, "warmup": {"chat": False}}).engine_config.warmup.chat is False
