"""The AscendLLMDeployment spec and status models: parsing, defaults, field-naming errors,
cross-field rules (Python side; the CEL side is in test_crd.py), settings and display helpers.
"""

from __future__ import annotations

from typing import Any

import pytest
from ascend_operator import api
from ascend_operator.api import Chip, GraphPolicy, Platform, SpecError, parse_spec
from ascend_operator.settings import HostMounts, OperatorSettings, SettingsError, load_settings

HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}}


def problems(spec: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    return caught.value.problems


def test_minimal_spec_gets_the_documented_defaults() -> None:
    spec = parse_spec({"model": HF})
    assert spec.replicas == 1
    assert spec.platform is Platform.ASCEND
    assert spec.npu.chip is Chip.A2_910B and spec.npu.per_replica == 1 and spec.npu.resource_name is None
    assert (spec.parallelism.tensor, spec.parallelism.pipeline, spec.parallelism.data) == (1, 1, 1)
    assert spec.graph.policy is GraphPolicy.AUTO and spec.graph.fallback is True
    assert spec.warmup.enabled is True and spec.warmup.prompt_lengths is None
    assert spec.service.port == 8000 and spec.service.type is api.ServiceType.CLUSTER_IP
    assert spec.rollout.strategy is api.RolloutStrategy.RECREATE
    assert spec.image is None and spec.ascend is None and spec.resources is None


def test_camel_case_on_the_wire_and_snake_case_refused() -> None:
    spec = parse_spec(
        {
            "model": {**HF, "servedName": "q", "sizeGiB": 1.5},
            "engine": {"kvCacheSpaceGiB": 2},
            "platform": "CPU",
        }
    )
    assert spec.model.served_name == "q" and spec.model.size_gi_b == 1.5
    assert spec.engine.kv_cache_space_gi_b == 2
    assert problems({"model": {"hugging_face": {"id": "a/b"}}}) == [
        (
            "spec.model.hugging_face",
            "unknown field; remove it (check the spelling against `kubectl explain`)",
        ),
    ]
    dumped = spec.model_dump(by_alias=True, exclude_none=True)
    assert dumped["model"]["sizeGiB"] == 1.5 and dumped["engine"]["kvCacheSpaceGiB"] == 2


@pytest.mark.parametrize(
    "spec, path, fragment",
    [
        (
            {"model": HF, "engine": {"gpuMemoryUtilization": 0}},
            "spec.engine.gpuMemoryUtilization",
            "greater than 0",
        ),
        (
            {"model": HF, "engine": {"gpuMemoryUtilization": 1.01}},
            "spec.engine.gpuMemoryUtilization",
            "less than or equal to 1",
        ),
        ({"model": HF, "npu": {"chip": "910C"}}, "spec.npu.chip", "'910B', 'A3' or '310P'"),
        ({"model": HF, "graph": {"policy": "full"}}, "spec.graph.policy", "'auto'"),
        ({"model": HF, "replicas": -1}, "spec.replicas", "greater than or equal to 0"),
        (
            {"model": HF, "warmup": {"promptLengths": [8, 0]}},
            "spec.warmup.promptLengths[1]",
            "greater than or equal to 1",
        ),
        ({"model": HF, "engine": {"env": {"1BAD": "x"}}}, "spec.engine.env.1BAD", ""),
        ({"model": {"pvc": {"claimName": "Bad_Name"}}}, "spec.model.pvc.claimName", "pattern"),
        ({"model": {"hostPath": {"path": "relative/dir"}}}, "spec.model.hostPath.path", "pattern"),
        (
            {"model": HF, "resources": {"limits": {"memory": "lots"}}},
            "spec.resources.limits.memory",
            "pattern",
        ),
        ({}, "spec.model", "required field is missing"),
    ],
)
def test_field_errors_name_the_camel_case_path(spec: dict[str, Any], path: str, fragment: str) -> None:
    found = problems(spec)
    assert any(p == path or p.startswith(path + ".") for p, _ in found), found
    assert any(fragment in message for p, message in found if p.startswith(path)), found


@pytest.mark.parametrize(
    "spec, path, fix",
    [
        (
            {"model": HF, "npu": {"perReplica": 4}, "parallelism": {"tensor": 8}},
            "spec.npu.perReplica",
            "change parallelism, npu.perReplica or nodesPerReplica",
        ),
        ({"model": HF, "npu": {"chip": "A3"}}, "spec.npu.perReplica", "set npu.perReplica >= 2"),
        (
            {"model": HF, "npu": {"chip": "310P"}, "engine": {"dtype": "bfloat16"}},
            "spec.engine.dtype",
            "float16",
        ),
        ({"model": {**HF, "pvc": {"claimName": "m"}}}, "spec.model", "exactly one model source"),
        ({"model": {"servedName": "x"}}, "spec.model", "exactly one model source"),
        (
            {"model": {"pvc": {"claimName": "m"}, "tokenSecretRef": {"name": "s", "key": "t"}}},
            "spec.model.tokenSecretRef",
            "remove it",
        ),
        ({"model": HF, "platform": "CPU", "npu": {"perReplica": 2}}, "spec.npu", "platform CPU uses no NPUs"),
        ({"model": HF, "platform": "CPU", "ascend": {}}, "spec.ascend", "remove spec.ascend"),
        (
            {"model": HF, "platform": "CPU", "parallelism": {"pipeline": 2}},
            "spec.parallelism",
            "set tensor, pipeline and data parallel to 1",
        ),
        (
            {"model": HF, "engine": {"kvCacheSpaceGiB": 4}},
            "spec.engine.kvCacheSpaceGiB",
            "gpuMemoryUtilization",
        ),
        ({"model": HF, "parallelism": {"expert": True}}, "spec.parallelism.expert", "above 1"),
        (
            {"model": HF, "graph": {"captureSizes": [8, 128], "maxCaptureSize": 64}},
            "spec.graph.captureSizes",
            "raise maxCaptureSize",
        ),
        (
            {"model": HF, "graph": {"policy": "eager", "maxCaptureSize": 8}},
            "spec.graph.policy",
            "choose another policy",
        ),
    ],
)
def test_cross_field_rules_name_the_field_and_the_fix(spec: dict[str, Any], path: str, fix: str) -> None:
    found = problems(spec)
    assert [message for p, message in found if p == path and fix in message], found


def test_all_broken_cross_field_rules_are_reported_at_once() -> None:
    found = problems(
        {"model": HF, "npu": {"chip": "A3"}, "parallelism": {"tensor": 4}, "engine": {"kvCacheSpaceGiB": 1}}
    )
    assert [p for p, _ in found] == [
        "spec.npu.perReplica",
        "spec.npu.perReplica",
        "spec.engine.kvCacheSpaceGiB",
    ]
    assert str(SpecError(found)).startswith("invalid spec: spec.npu.perReplica: ")


@pytest.mark.parametrize(
    "spec",
    [
        {"model": HF, "npu": {"perReplica": 8}, "parallelism": {"tensor": 4, "pipeline": 2}},
        {"model": HF, "npu": {"perReplica": 8}, "parallelism": {"tensor": 4, "data": 2, "expert": True}},
        {"model": HF, "npu": {"chip": "A3", "perReplica": 2}, "parallelism": {"tensor": 2}},
        {"model": HF, "npu": {"chip": "310P"}, "engine": {"dtype": "float16"}},
        {"model": HF, "platform": "CPU", "npu": {"nodeSelector": {"kubernetes.io/arch": "amd64"}}},
        {
            "model": {
                "modelScope": {"id": "qwen/Qwen2.5-7B"},
                "tokenSecretRef": {"name": "ms", "key": "token"},
            }
        },
    ],
)
def test_valid_specs_parse(spec: dict[str, Any]) -> None:
    assert isinstance(parse_spec(spec), api.AscendLLMDeploymentSpec)


def test_parse_spec_refuses_a_non_mapping() -> None:
    assert problems(["model"]) == [("spec", "expected a mapping, got list")]  # type: ignore[arg-type]


def test_display_helpers_fill_the_printer_columns() -> None:
    assert api.display_model(parse_spec({"model": HF}), "res") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert api.display_model(parse_spec({"model": {**HF, "servedName": "chat"}}), "res") == "chat"
    assert api.display_model(parse_spec({"model": {"hostPath": {"path": "/m"}}}), "res") == "res"
    assert (
        api.display_chip(
            parse_spec({"model": HF, "npu": {"chip": "A3", "perReplica": 2}, "parallelism": {"tensor": 2}})
        )
        == "A3"
    )
    assert api.display_chip(parse_spec({"model": HF, "platform": "CPU"})) == "CPU"


def test_status_model_round_trips_camel_case() -> None:
    wire = {
        "observedGeneration": 3,
        "phase": "CapturingGraphs",
        "replicas": 2,
        "readyReplicas": 1,
        "updatedReplicas": 2,
        "ready": "1/2",
        "selector": "a=b",
        "endpoint": "http://x:8000/v1",
        "graph": {
            "mode": "PIECEWISE",
            "rememberedMode": "PIECEWISE",
            "rememberedFor": "abc",
            "fallbacks": 1,
            "replicas": [
                {"pod": "p-1", "phase": "Ready", "mode": "PIECEWISE", "ready": True, "fallbacks": 1}
            ],
        },
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Loading",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 3,
            }
        ],
    }
    status = api.AscendLLMDeploymentStatus.model_validate(wire)
    assert (
        status.phase is api.Phase.CAPTURING_GRAPHS
        and status.graph.replicas[0].mode is api.GraphMode.PIECEWISE
    )
    assert status.model_dump(mode="json", by_alias=True, exclude_none=True) == {
        **wire,
        "graph": {**wire["graph"], "replicas": [{**wire["graph"]["replicas"][0]}]},
    }


# --- settings ------------------------------------------------------------------------------


def test_settings_defaults_give_images_and_resource_names_per_chip() -> None:
    settings = load_settings({})
    assert settings.runtime_image(Chip.A2_910B) == "ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0"
    assert settings.runtime_image(Chip.A3) == "ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0-a3"
    assert settings.runtime_image(Chip.P310) == "ghcr.io/ascend-llm/runtime:0.1.0-vllm-ascend-v0.23.0-310p"
    assert settings.runtime_image(None) == "ghcr.io/ascend-llm/runtime:0.1.0-vllm-cpu"
    assert settings.resource_name(Chip.A3) == "huawei.com/Ascend910"
    assert settings.resource_name(Chip.P310) == "huawei.com/Ascend310P"
    assert settings.namespaces == [] and settings.host_mounts is HostMounts.NONE
    assert (settings.engine_run_as_user, settings.engine_run_as_group) == (1000, 1000)


def test_settings_read_the_prefixed_environment() -> None:
    settings = load_settings(
        {
            "ASCEND_LLM_OPERATOR_NAMESPACES": "llm, team-a",
            "ASCEND_LLM_OPERATOR_IMAGE_TAG": "0.2.0",
            "ASCEND_LLM_OPERATOR_HOST_MOUNTS": "driver",
            "ASCEND_LLM_OPERATOR_STANDALONE": "true",
            "ASCEND_LLM_OPERATOR_RESYNC_INTERVAL_S": "30",
            "PATH": "/usr/bin",
        }
    )
    assert settings.namespaces == ["llm", "team-a"]
    assert settings.runtime_image(Chip.A2_910B).endswith(":0.2.0-vllm-ascend-v0.23.0")
    assert settings.host_mounts is HostMounts.DRIVER and settings.standalone is True
    assert settings.resync_interval_s == 30.0
    assert load_settings({"ASCEND_LLM_OPERATOR_NAMESPACES": '["a","b"]'}).namespaces == ["a", "b"]


def test_settings_class_reads_process_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_LLM_OPERATOR_NAMESPACES", "x,y")
    assert OperatorSettings().namespaces == ["x", "y"]


@pytest.mark.parametrize(
    "env, names",
    [
        ({"ASCEND_LLM_OPERATOR_HOST_MOUNTS": "yes"}, "ASCEND_LLM_OPERATOR_HOST_MOUNTS='yes'"),
        ({"ASCEND_LLM_OPERATOR_STARTUP_PERIOD_S": "0"}, "ASCEND_LLM_OPERATOR_STARTUP_PERIOD_S='0'"),
        ({"ASCEND_LLM_OPERATOR_NAMESPACES": "[oops"}, "ASCEND_LLM_OPERATOR_NAMESPACES"),
        (
            {"ASCEND_LLM_OPERATOR_IMAGE_TAGG": "1"},
            "unknown operator setting(s) ASCEND_LLM_OPERATOR_IMAGE_TAGG",
        ),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(SettingsError, match=__import__("re").escape(names)):
        load_settings(env)


# --- multi-node replicas and autoscaling ------------------------------------------------------


def test_multinode_and_autoscaling_defaults() -> None:
    spec = parse_spec({"model": HF})
    assert spec.nodes_per_replica == 1 and spec.autoscaling is None
    assert spec.distributed.backend is api.DistributedBackend.MP and spec.distributed.leader_port is None
    auto = parse_spec({"model": HF, "autoscaling": {"maxReplicas": 3}}).autoscaling
    assert auto is not None and auto.enabled and auto.min_replicas == 1
    assert auto.signal is api.AutoscalingSignal.WAITING and auto.provider is api.AutoscalerProvider.AUTO
    assert auto.scale_to_zero.enabled is False
    assert auto.resolved_target(None) == 3.0
    assert auto.model_copy(update={"signal": api.AutoscalingSignal.RUNNING}).resolved_target(100) == 80.0
    assert (
        auto.model_copy(update={"signal": api.AutoscalingSignal.RUNNING}).resolved_target(None) == 0.8 * 256
    )
    assert auto.model_copy(update={"signal": api.AutoscalingSignal.KV_CACHE}).resolved_target(None) == 0.8
    with pytest.raises(ValueError, match="set spec.autoscaling.target"):
        auto.model_copy(update={"signal": api.AutoscalingSignal.CUSTOM}).resolved_target(None)


@pytest.mark.parametrize(
    "spec, path, fix",
    [
        (
            {"model": HF, "nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8}},
            "spec.npu.perReplica",
            "nodesPerReplica x npu.perReplica",
        ),
        (
            {"model": HF, "platform": "CPU", "nodesPerReplica": 2},
            "spec.nodesPerReplica",
            "set nodesPerReplica to 1",
        ),
        (
            {"model": HF, "nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 16}},
            "spec.parallelism.data",
            "multiple of nodesPerReplica",
        ),
        (
            {
                "model": HF,
                "nodesPerReplica": 2,
                "distributed": {"backend": "ray"},
                "npu": {"perReplica": 4},
                "parallelism": {"tensor": 4, "data": 2},
            },
            "spec.parallelism.data",
            "set parallelism.data to 1",
        ),
        (
            {"model": HF, "autoscaling": {"maxReplicas": 2, "minReplicas": 3}},
            "spec.autoscaling.minReplicas",
            "lower minReplicas",
        ),
        (
            {"model": HF, "autoscaling": {"maxReplicas": 2, "minReplicas": 0}},
            "spec.autoscaling.minReplicas",
            "scaleToZero.enabled",
        ),
        (
            {
                "model": HF,
                "autoscaling": {
                    "maxReplicas": 2,
                    "provider": "hpa",
                    "scaleToZero": {"enabled": True, "activationQuery": "sum(x)"},
                },
            },
            "spec.autoscaling.provider",
            "set provider keda",
        ),
        (
            {"model": HF, "autoscaling": {"maxReplicas": 2, "scaleToZero": {"enabled": True}}},
            "spec.autoscaling.scaleToZero.activationQuery",
            "set activationQuery",
        ),
        (
            {"model": HF, "autoscaling": {"maxReplicas": 2, "signal": "custom", "target": 1}},
            "spec.autoscaling.query",
            "set query",
        ),
        (
            {"model": HF, "autoscaling": {"maxReplicas": 2, "query": "sum(x)"}},
            "spec.autoscaling.query",
            "remove query",
        ),
        (
            {"model": HF, "autoscaling": {"maxReplicas": 2, "signal": "kvCacheUsage", "target": 80}},
            "spec.autoscaling.target",
            "(0, 1]",
        ),
    ],
)
def test_multinode_and_autoscaling_rules_name_the_field_and_the_fix(
    spec: dict[str, Any], path: str, fix: str
) -> None:
    found = problems(spec)
    assert [message for p, message in found if p == path and fix in message], found


def test_autoscaling_field_bounds() -> None:
    assert problems({"model": HF, "autoscaling": {}}) == [
        ("spec.autoscaling.maxReplicas", "required field is missing; set it")
    ]
    assert any(p == "spec.nodesPerReplica" for p, _ in problems({"model": HF, "nodesPerReplica": 17}))
    assert any(
        p == "spec.distributed.hccl.connectTimeoutSeconds"
        for p, _ in problems({"model": HF, "distributed": {"hccl": {"connectTimeoutSeconds": 30}}})
    )
    assert any(
        p == "spec.autoscaling.signal"
        for p, _ in problems({"model": HF, "autoscaling": {"maxReplicas": 1, "signal": "qps"}})
    )


def test_autoscaler_provider_setting_is_validated() -> None:
    assert (
        load_settings({"ASCEND_LLM_OPERATOR_AUTOSCALER_PROVIDER": "keda"}).autoscaler_provider
        is api.AutoscalerProvider.KEDA
    )
    with pytest.raises(SettingsError, match="ASCEND_LLM_OPERATOR_AUTOSCALER_PROVIDER"):
        load_settings({"ASCEND_LLM_OPERATOR_AUTOSCALER_PROVIDER": "vpa"})


@pytest.mark.parametrize(("affinity", "words"), [
    ({"": []}, "unknown affinity ''; a core/v1 Affinity has nodeAffinity, podAffinity, podAntiAffinity"),
    ({"nodeAfinity": {}}, "unknown affinity 'nodeAfinity'"),
    ({"podAffinity": []}, "affinity podAffinity must be an object, got list"),
])
def test_an_affinity_with_a_key_no_affinity_has_is_refused_naming_the_field(affinity: Any, words: str) -> None:
    # Server-side apply would answer such a pod template with HTTP 500, naming no field of the spec.
    [(field, message)] = problems({"model": HF, "npu": {"affinity": affinity}})
    assert field == "spec.npu.affinity" and words in message
    parse_spec({"model": HF, "npu": {"affinity": {"nodeAffinity": {}, "podAntiAffinity": {"x": 1}}}})


def test_the_running_target_defaults_to_a_fraction_of_the_platforms_own_max_num_seqs() -> None:
    """A CPU replica's vLLM runs 128 sequences by default, not the NPU's 256: the HPA's target follows."""

    from ascend_operator.builders.autoscaling import hpa_metric, quantity
    from ascend_operator.settings import OperatorSettings

    def target(extra: dict) -> str:
        spec = parse_spec({"model": HF, "autoscaling": {"signal": "runningRequestsPerReplica", "maxReplicas": 3}, **extra})
        return hpa_metric(spec, OperatorSettings())["pods"]["target"]["averageValue"]

    assert target({}) == quantity(0.8 * 256)
    assert target({"platform": "CPU"}) == quantity(0.8 * 128)
    assert target({"platform": "CPU", "engine": {"maxNumSeqs": 50}}) == quantity(40)
