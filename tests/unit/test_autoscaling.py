"""Autoscaling (spec.autoscaling): the choice between an HPA and a KEDA ScaledObject by spec,
operator setting and installed APIs; the rendered HPA (kubernetes_validate, strict) and
ScaledObject (the real KEDA CRD schema, strict); queries and metrics per signal; behaviour
defaults sized to start-up time; scale-to-zero; and the workload's replicas following
spec.replicas (which the autoscaler writes through the scale subresource).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ascend_operator.api import parse_spec
from ascend_operator.builders import (
    AutoscalerChoice,
    BuildMeta,
    Children,
    build_children,
    build_hpa,
    build_scaled_object,
    choose_autoscaler,
)
from ascend_operator.builders.autoscaling import quantity
from ascend_operator.settings import OperatorSettings, load_settings

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = load_settings({})
HF = {"huggingFace": {"id": "Qwen/Qwen2.5-7B-Instruct"}}
KEDA = "keda.sh/v1alpha1"
ADAPTER = "custom.metrics.k8s.io/v1beta2"
WAKE = {"enabled": True, "activationQuery": 'sum(rate(gateway_requests_total{backend="q"}[2m]))'}


def render(
    spec: dict[str, Any],
    validate: Callable[..., None],
    autoscaler: str | None,
    name: str = "q",
    settings: OperatorSettings = DEFAULTS,
) -> Children:
    children = build_children(BuildMeta(name, "llm"), parse_spec(spec), settings, autoscaler=autoscaler)
    for obj in children.objects():
        validate(obj)
    return children


def scaled(autoscaling: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": HF, "autoscaling": {"maxReplicas": 4, **autoscaling}, **extra}


# --- golden manifests -----------------------------------------------------------------------


def test_autoscaled_example_renders_the_expected_scaled_object(
    validate_manifest: Callable[..., None],
) -> None:
    resource = yaml.safe_load((ROOT / "examples" / "qwen7b-autoscaled.yaml").read_text(encoding="utf-8"))
    spec = parse_spec(resource["spec"])
    assert choose_autoscaler(spec, DEFAULTS, {KEDA, ADAPTER}).kind == "keda"
    children = render(resource["spec"], validate_manifest, "keda", name="qwen7b")
    assert children.scaled_object == EXPECTED_QWEN7B_SCALED_OBJECT
    assert children.hpa is None
    assert [o["kind"] for o in children.objects()][-1] == "ScaledObject"


def test_kv_cache_hpa_with_both_scale_down_policies(validate_manifest: Callable[..., None]) -> None:
    spec = scaled(
        {"maxReplicas": 6, "signal": "kvCacheUsage", "target": 0.85, "scaleDown": {"percent": 50, "pods": 2}},
        npu={"chip": "910B", "perReplica": 1},
    )
    children = render(spec, validate_manifest, "hpa", name="qwen7b")
    assert children.hpa == EXPECTED_QWEN7B_KV_HPA
    assert children.scaled_object is None


# --- choose_autoscaler ----------------------------------------------------------------------

CHOICES = [
    # (case, autoscaling, setting, installed, kind, reason, problem)
    ("off", None, "auto", {KEDA, ADAPTER}, None, "AutoscalingDisabled", False),
    ("disabled", {"enabled": False}, "auto", {KEDA, ADAPTER}, None, "AutoscalingDisabled", False),
    ("auto prefers keda", {}, "auto", {KEDA, ADAPTER}, "keda", "KedaScaledObject", False),
    ("auto falls back to hpa", {}, "auto", {ADAPTER}, "hpa", "HorizontalPodAutoscaler", False),
    ("auto hpa without adapter", {}, "auto", set(), "hpa", "CustomMetricsAPIMissing", True),
    (
        "auto v1beta1 adapter",
        {},
        "auto",
        {"custom.metrics.k8s.io/v1beta1"},
        "hpa",
        "HorizontalPodAutoscaler",
        False,
    ),
    ("zero needs keda", {"scaleToZero": WAKE}, "auto", {ADAPTER}, None, "KedaNotInstalled", True),
    ("zero with keda", {"scaleToZero": WAKE}, "auto", {"keda.sh"}, "keda", "KedaScaledObject", False),
    (
        "custom needs keda",
        {"signal": "custom", "query": "sum(x)", "target": 2},
        "auto",
        set(),
        None,
        "KedaNotInstalled",
        True,
    ),
    ("setting hpa", {}, "hpa", {KEDA, ADAPTER}, "hpa", "HorizontalPodAutoscaler", False),
    (
        "setting hpa vs zero",
        {"scaleToZero": WAKE},
        "hpa",
        {KEDA, ADAPTER},
        None,
        "AutoscalerCannotDoThis",
        True,
    ),
    ("setting keda missing", {}, "keda", {ADAPTER}, None, "KedaNotInstalled", True),
    (
        "spec hpa beats setting keda",
        {"provider": "hpa"},
        "keda",
        {KEDA, ADAPTER},
        "hpa",
        "HorizontalPodAutoscaler",
        False,
    ),
    ("spec keda beats setting hpa", {"provider": "keda"}, "hpa", {KEDA}, "keda", "KedaScaledObject", False),
    ("spec keda missing", {"provider": "keda"}, "auto", {ADAPTER}, None, "KedaNotInstalled", True),
]


@pytest.mark.parametrize(
    "autoscaling, setting, installed, kind, reason, problem",
    [case[1:] for case in CHOICES],
    ids=[case[0] for case in CHOICES],
)
def test_choose_autoscaler(
    autoscaling: dict[str, Any] | None,
    setting: str,
    installed: set[str],
    kind: str | None,
    reason: str,
    problem: bool,
) -> None:
    spec = parse_spec({"model": HF} if autoscaling is None else scaled(autoscaling))
    settings = load_settings({"ASCEND_LLM_OPERATOR_AUTOSCALER_PROVIDER": setting})
    choice = choose_autoscaler(spec, settings, installed)
    assert (choice.kind, choice.reason, choice.problem) == (kind, reason, problem)
    assert choice.message


def test_choice_messages_name_what_to_install_or_change() -> None:
    zero = parse_spec(scaled({"scaleToZero": WAKE}))
    missing = choose_autoscaler(zero, DEFAULTS, {ADAPTER})
    assert "scaleToZero" in missing.message and "keda.sh/v1alpha1" in missing.message
    assert "install KEDA" in missing.message
    # With nothing KEDA-only asked for, the fix also offers the HPA.
    plain = choose_autoscaler(parse_spec(scaled({"provider": "keda"})), DEFAULTS, set())
    assert "provider hpa" in plain.message
    conflict = choose_autoscaler(
        zero, load_settings({"ASCEND_LLM_OPERATOR_AUTOSCALER_PROVIDER": "hpa"}), {KEDA}
    )
    assert (
        "ASCEND_LLM_OPERATOR_AUTOSCALER_PROVIDER" in conflict.message and "provider keda" in conflict.message
    )
    adapter = choose_autoscaler(parse_spec(scaled({})), DEFAULTS, set())
    assert "prometheus-adapter" in adapter.message and "docs/autoscaling.md" in adapter.message
    assert isinstance(adapter, AutoscalerChoice)


# --- what the autoscalers read --------------------------------------------------------------


@pytest.mark.parametrize(
    "autoscaling, engine, query, metric_type, threshold, hpa_metric, average",
    [
        (
            {},
            {},
            'sum(vllm:num_requests_waiting{namespace="llm",app_kubernetes_io_instance="q"})',
            "AverageValue",
            "3",
            "vllm_num_requests_waiting",
            "3",
        ),
        (
            {"signal": "runningRequestsPerReplica"},
            {"maxNumSeqs": 64},
            'sum(vllm:num_requests_running{namespace="llm",app_kubernetes_io_instance="q"})',
            "AverageValue",
            "51.2",
            "vllm_num_requests_running",
            "51200m",
        ),
        (
            {"signal": "runningRequestsPerReplica"},
            {},
            'sum(vllm:num_requests_running{namespace="llm",app_kubernetes_io_instance="q"})',
            "AverageValue",
            "204.8",
            "vllm_num_requests_running",
            "204800m",
        ),
        (
            {"signal": "kvCacheUsage"},
            {},
            'avg(vllm:kv_cache_usage_perc{namespace="llm",app_kubernetes_io_instance="q"})',
            "Value",
            "0.8",
            "vllm_kv_cache_usage_perc",
            "800m",
        ),
    ],
)
def test_signals_map_to_queries_and_pod_metrics(
    autoscaling: dict[str, Any],
    engine: dict[str, Any],
    query: str,
    metric_type: str,
    threshold: str,
    hpa_metric: str,
    average: str,
    validate_manifest: Callable[..., None],
) -> None:
    spec = scaled(autoscaling, engine=engine)
    (trigger,) = render(spec, validate_manifest, "keda").scaled_object["spec"]["triggers"]
    assert (trigger["metadata"]["query"], trigger["metricType"], trigger["metadata"]["threshold"]) == (
        query,
        metric_type,
        threshold,
    )
    (metric,) = render(spec, validate_manifest, "hpa").hpa["spec"]["metrics"]
    assert metric == {
        "type": "Pods",
        "pods": {"metric": {"name": hpa_metric}, "target": {"type": "AverageValue", "averageValue": average}},
    }


def test_custom_signal_passes_the_query_through(validate_manifest: Callable[..., None]) -> None:
    spec = scaled({"signal": "custom", "query": 'sum(my_queue{svc="q"})', "target": 7.5})
    (trigger,) = render(spec, validate_manifest, "keda").scaled_object["spec"]["triggers"]
    assert trigger["metadata"] == {
        "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
        "query": 'sum(my_queue{svc="q"})',
        "threshold": "7.5",
    }
    with pytest.raises(ValueError, match="KEDA"):
        build_hpa("q", "llm", "q", parse_spec(spec), DEFAULTS)


def test_settings_rename_metrics_labels_and_the_prometheus_address(
    validate_manifest: Callable[..., None],
) -> None:
    settings = load_settings(
        {
            "ASCEND_LLM_OPERATOR_KEDA_PROMETHEUS_ADDRESS": "http://prom.obs:9090",
            "ASCEND_LLM_OPERATOR_PROMETHEUS_INSTANCE_LABEL": "instance_name",
            "ASCEND_LLM_OPERATOR_PROM_METRIC_WAITING": "vllm_waiting",
            "ASCEND_LLM_OPERATOR_HPA_METRIC_WAITING": "waiting_per_pod",
            "ASCEND_LLM_OPERATOR_KEDA_POLLING_INTERVAL_S": "30",
        }
    )
    keda = render(scaled({}), validate_manifest, "keda", settings=settings).scaled_object["spec"]
    assert keda["pollingInterval"] == 30
    assert keda["triggers"][0]["metadata"]["serverAddress"] == "http://prom.obs:9090"
    assert keda["triggers"][0]["metadata"]["query"] == 'sum(vllm_waiting{namespace="llm",instance_name="q"})'
    hpa = render(scaled({}), validate_manifest, "hpa", settings=settings).hpa["spec"]
    assert hpa["metrics"][0]["pods"]["metric"]["name"] == "waiting_per_pod"


# --- behaviour, targets, scale-to-zero --------------------------------------------------------


def test_default_behaviour_is_sized_to_slow_starts(validate_manifest: Callable[..., None]) -> None:
    hpa = render(scaled({}), validate_manifest, "hpa").hpa["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "llm.ascend.dev/v1alpha1",
        "kind": "AscendLLMDeployment",
        "name": "q",
    }
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 4)
    assert hpa["behavior"] == {
        "scaleUp": {
            "stabilizationWindowSeconds": 30,
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 600,
            "selectPolicy": "Min",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
        },
    }
    keda = render(scaled({}), validate_manifest, "keda").scaled_object["spec"]
    assert keda["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["behavior"]
    # Without scale-to-zero KEDA keeps minReplicas and needs no cooldown.
    assert keda["minReplicaCount"] == 1 and "cooldownPeriod" not in keda and "idleReplicaCount" not in keda


def test_percent_only_and_zero_window_are_kept(validate_manifest: Callable[..., None]) -> None:
    spec = scaled({"scaleUp": {"percent": 100, "stabilizationWindowSeconds": 0, "periodSeconds": 300}})
    up = render(spec, validate_manifest, "hpa").hpa["spec"]["behavior"]["scaleUp"]
    assert up == {
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 300}],
    }


def test_scale_to_zero_from_min_zero_and_from_an_idle_floor(validate_manifest: Callable[..., None]) -> None:
    zero = render(scaled({"minReplicas": 0, "scaleToZero": WAKE}), validate_manifest, "keda").scaled_object[
        "spec"
    ]
    assert (zero["minReplicaCount"], zero["cooldownPeriod"]) == (0, 1800)
    assert "idleReplicaCount" not in zero
    activation = zero["triggers"][1]
    assert activation == {
        "type": "prometheus",
        "name": "activation",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
            "query": '(sum(sum(rate(gateway_requests_total{backend="q"}[2m]))) > bool 0)',
            "threshold": "1",
            "activationThreshold": "0",
        },
    }
    floor = render(
        scaled({"minReplicas": 2, "scaleToZero": {**WAKE, "idleSeconds": 7200, "activationThreshold": 0.5}}),
        validate_manifest,
        "keda",
    ).scaled_object["spec"]
    assert (floor["minReplicaCount"], floor["idleReplicaCount"], floor["cooldownPeriod"]) == (2, 0, 7200)
    assert floor["triggers"][1]["metadata"]["query"].endswith("> bool 0.5)")


def test_hpa_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="minReplicas"):
        build_hpa("q", "llm", "q", parse_spec(scaled({"minReplicas": 0, "scaleToZero": WAKE})), DEFAULTS)
    with pytest.raises(ValueError, match="autoscaling is off"):
        build_scaled_object("q", "llm", "q", parse_spec({"model": HF}), DEFAULTS)


def test_quantities_are_exact_milli_units() -> None:
    assert [quantity(v) for v in (3, 3.0, 0.8, 0.85, 204.8, 1.0006, 2.9999)] == [
        "3",
        "3",
        "800m",
        "850m",
        "204800m",
        "1001m",
        "3",
    ]


def test_no_autoscaler_object_unless_enabled_and_chosen(validate_manifest: Callable[..., None]) -> None:
    assert render(scaled({}), validate_manifest, None).hpa is None
    off = render(scaled({"enabled": False}), validate_manifest, "hpa")
    assert off.hpa is None and off.scaled_object is None
    plain = render({"model": HF}, validate_manifest, "keda")
    assert plain.scaled_object is None


def test_workload_replicas_follow_spec_replicas_the_autoscaler_writes(
    validate_manifest: Callable[..., None],
) -> None:
    # HPA/KEDA write AscendLLMDeployment.spec.replicas via the scale subresource; the operator
    # copies it, so an autoscaled spec of 5 replicas gives a 5-replica Deployment or LWS.
    assert render(scaled({}, replicas=5), validate_manifest, "hpa").deployment["spec"]["replicas"] == 5
    multinode = scaled(
        {},
        replicas=0,
        nodesPerReplica=2,
        npu={"perReplica": 8},
        parallelism={"tensor": 8, "data": 2},
    )
    children = render(multinode, validate_manifest, "keda")
    assert children.leaderworkerset["spec"]["replicas"] == 0
    assert children.scale_selector.endswith("leaderworkerset.sigs.k8s.io/worker-index=0")


# --- golden manifests ---------------------------------------------------------------------
# Generated once from the builders, then reviewed by hand against KEDA's and the HPA's docs.

EXPECTED_QWEN7B_SCALED_OBJECT = {
    "apiVersion": "keda.sh/v1alpha1",
    "kind": "ScaledObject",
    "metadata": {
        "name": "qwen7b",
        "namespace": "llm",
        "labels": {
            "app.kubernetes.io/name": "ascend-llm",
            "app.kubernetes.io/instance": "qwen7b",
            "app.kubernetes.io/component": "engine",
            "app.kubernetes.io/managed-by": "ascend-llm-operator",
            "app.kubernetes.io/part-of": "ascend-llm",
            "llm.ascend.dev/deployment": "qwen7b",
        },
        "annotations": {"llm.ascend.dev/spec-hash": "35cb401100231b8d"},
    },
    "spec": {
        "scaleTargetRef": {
            "apiVersion": "llm.ascend.dev/v1alpha1",
            "kind": "AscendLLMDeployment",
            "name": "qwen7b",
        },
        "pollingInterval": 15,
        "minReplicaCount": 1,
        "maxReplicaCount": 8,
        "cooldownPeriod": 3600,
        "idleReplicaCount": 0,
        "advanced": {
            "horizontalPodAutoscalerConfig": {
                "behavior": {
                    "scaleUp": {
                        "stabilizationWindowSeconds": 30,
                        "selectPolicy": "Max",
                        "policies": [{"type": "Pods", "value": 2, "periodSeconds": 120}],
                    },
                    "scaleDown": {
                        "stabilizationWindowSeconds": 900,
                        "selectPolicy": "Min",
                        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
                    },
                }
            }
        },
        "triggers": [
            {
                "type": "prometheus",
                "name": "load",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                    "query": 'sum(vllm:num_requests_waiting{namespace="llm",app_kubernetes_io_instance="qwen7b"})',
                    "threshold": "4",
                },
            },
            {
                "type": "prometheus",
                "name": "activation",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                    "query": '(sum(sum(rate(gateway_requests_total{backend="qwen7b"}[2m]))) > bool 0)',
                    "threshold": "1",
                    "activationThreshold": "0",
                },
            },
        ],
    },
}
EXPECTED_QWEN7B_KV_HPA = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {
        "name": "qwen7b",
        "namespace": "llm",
        "labels": {
            "app.kubernetes.io/name": "ascend-llm",
            "app.kubernetes.io/instance": "qwen7b",
            "app.kubernetes.io/component": "engine",
            "app.kubernetes.io/managed-by": "ascend-llm-operator",
            "app.kubernetes.io/part-of": "ascend-llm",
            "llm.ascend.dev/deployment": "qwen7b",
        },
        "annotations": {"llm.ascend.dev/spec-hash": "4f24fdfc2aa1af87"},
    },
    "spec": {
        "scaleTargetRef": {
            "apiVersion": "llm.ascend.dev/v1alpha1",
            "kind": "AscendLLMDeployment",
            "name": "qwen7b",
        },
        "minReplicas": 1,
        "maxReplicas": 6,
        "metrics": [
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "vllm_kv_cache_usage_perc"},
                    "target": {"type": "AverageValue", "averageValue": "850m"},
                },
            }
        ],
        "behavior": {
            "scaleUp": {
                "stabilizationWindowSeconds": 30,
                "selectPolicy": "Max",
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
            },
            "scaleDown": {
                "stabilizationWindowSeconds": 600,
                "selectPolicy": "Min",
                "policies": [
                    {"type": "Pods", "value": 2, "periodSeconds": 120},
                    {"type": "Percent", "value": 50, "periodSeconds": 120},
                ],
            },
        },
    },
}
