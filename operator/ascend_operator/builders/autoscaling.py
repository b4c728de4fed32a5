"""Autoscalers of an ``AscendLLMDeployment`` (pure): the choice, the HPA and the KEDA ScaledObject.

Both target the resource itself through its scale subresource, never its Deployment or
LeaderWorkerSet: the autoscaler writes ``spec.replicas`` and the operator copies it into the
workload, so each field has one writer. :func:`choose_autoscaler` decides which one to create
from the spec, the operator setting and the API groups the cluster serves; its reason and message
are for the reconcile layer's condition and Event. Signals, adapter rules, KEDA triggers,
scale-to-zero and the behaviour defaults: ``docs/autoscaling.md``.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Literal

from ascend_operator.api.rules import effective_max_num_seqs
from ascend_operator.api import (
    API_VERSION,
    DEFAULT_IDLE_SECONDS,
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    KIND,
    AscendLLMDeploymentSpec,
    AutoscalerProvider,
    AutoscalingSignal,
    AutoscalingSpec,
    ScalingRulesSpec,
)
from ascend_operator.builders.common import common_labels, with_spec_hash
from ascend_operator.names import label_value
from ascend_operator.settings import OperatorSettings

HPA_API_VERSION = "autoscaling/v2"
KEDA_API_VERSION = "keda.sh/v1alpha1"
#: Group/versions of the custom metrics API that prometheus-adapter serves (either will do).
CUSTOM_METRICS_APIS = ("custom.metrics.k8s.io/v1beta2", "custom.metrics.k8s.io/v1beta1")
KEDA_INSTALL_HINT = "install KEDA (helm install keda kedacore/keda --namespace keda --create-namespace)"
ADAPTER_INSTALL_HINT = (
    "install prometheus-adapter with the vllm_* rules in docs/autoscaling.md, or install KEDA"
)

AutoscalerKind = Literal["hpa", "keda"]


@dataclass(frozen=True)
class AutoscalerChoice:
    """Which autoscaler to create (``kind``), and why, for a condition and an Event.

    ``problem`` is true when the user's autoscaling will not work as asked: either nothing is
    created (``kind`` None; e.g. KEDA needed but not installed) or the HPA is created but has no
    metrics API to read yet. ``reason`` is CamelCase; ``message`` names the fix.
    """

    kind: AutoscalerKind | None
    reason: str
    message: str
    problem: bool = False


def _serves(installed: AbstractSet[str], group_version: str) -> bool:
    """Whether the cluster serves ``group/version`` (a bare group in ``installed`` also counts)."""
    return group_version in installed or group_version.split("/", 1)[0] in installed


def _keda_needs(auto: AutoscalingSpec) -> list[str]:
    needs = []
    if auto.scale_to_zero.enabled:
        needs.append("scaleToZero")
    if auto.signal == AutoscalingSignal.CUSTOM:
        needs.append("signal custom (PromQL)")
    return needs


def role_autoscaling(spec: AscendLLMDeploymentSpec) -> AutoscalingSpec | None:
    """With disaggregation, the role autoscaling that decides the autoscaler kind of both roles:
    one that needs KEDA (custom PromQL), else one that names a provider, else the first enabled."""
    d = spec.disaggregation
    if d is None:
        return None
    enabled = [r.autoscaling for r in (d.prefill, d.decode) if r.autoscaling is not None and r.autoscaling.enabled]
    return next((a for a in enabled if _keda_needs(a)), None) or next(
        (a for a in enabled if a.provider != AutoscalerProvider.AUTO), None) or next(iter(enabled), None)


def choose_autoscaler(
    spec: AscendLLMDeploymentSpec, settings: OperatorSettings, installed: AbstractSet[str]
) -> AutoscalerChoice:
    """The autoscaler for ``spec``, given the group/versions the cluster serves (``installed``,
    for example ``{"keda.sh/v1alpha1", "custom.metrics.k8s.io/v1beta2"}``).

    ``spec.autoscaling.provider`` wins over the operator setting ``autoscaler_provider``; ``auto``
    takes KEDA when it is installed or needed (scale-to-zero, custom PromQL), else an HPA.
    """
    auto = spec.autoscaling or role_autoscaling(spec)
    if auto is None or not auto.enabled:
        return AutoscalerChoice(
            None, "AutoscalingDisabled", "autoscaling is off; spec.replicas (kubectl scale) sets the replicas"
        )
    keda = _serves(installed, KEDA_API_VERSION)
    metrics_api = any(_serves(installed, gv) for gv in CUSTOM_METRICS_APIS)
    needs = _keda_needs(auto)
    if auto.provider != AutoscalerProvider.AUTO:
        provider, source = auto.provider, "spec.autoscaling.provider"
    else:
        provider, source = settings.autoscaler_provider, "the operator setting ASCEND_LLM_OPERATOR_AUTOSCALER_PROVIDER"
    if provider == AutoscalerProvider.AUTO:
        provider = AutoscalerProvider.KEDA if keda or needs else AutoscalerProvider.HPA
    if provider == AutoscalerProvider.KEDA:
        if keda:
            return AutoscalerChoice("keda", "KedaScaledObject", "a KEDA ScaledObject scales spec.replicas")
        why = f"{' and '.join(needs)} need(s) KEDA" if needs else f"{source} asks for KEDA"
        fix = KEDA_INSTALL_HINT + ("" if needs else ", or set spec.autoscaling.provider hpa")
        return AutoscalerChoice(
            None,
            "KedaNotInstalled",
            f"{why}, but the cluster does not serve {KEDA_API_VERSION} (ScaledObject); {fix}",
            problem=True,
        )
    if needs:
        return AutoscalerChoice(
            None,
            "AutoscalerCannotDoThis",
            f"{' and '.join(needs)} need(s) KEDA, but {source} is hpa; set spec.autoscaling.provider "
            f"keda (with KEDA installed) or turn {' and '.join(needs)} off",
            problem=True,
        )
    if not metrics_api:
        return AutoscalerChoice(
            "hpa",
            "CustomMetricsAPIMissing",
            "the HorizontalPodAutoscaler is created, but the cluster serves no custom.metrics.k8s.io "
            f"API, so it cannot read the engine metrics yet; {ADAPTER_INSTALL_HINT}",
            problem=True,
        )
    return AutoscalerChoice(
        "hpa", "HorizontalPodAutoscaler", "a HorizontalPodAutoscaler scales spec.replicas"
    )


# --------------------------------------------------------------------------------------------
# Shared pieces.


def scale_target_ref(name: str) -> dict[str, str]:
    """The resource itself, through its scale subresource."""
    return {"apiVersion": API_VERSION, "kind": KIND, "name": name}


def _rules(rules: ScalingRulesSpec, defaults: dict[str, int], select: str) -> dict[str, Any]:
    period = rules.period_seconds or defaults["period_seconds"]
    policies = []
    if rules.pods is not None or rules.percent is None:
        policies.append({"type": "Pods", "value": rules.pods or defaults["pods"], "periodSeconds": period})
    if rules.percent is not None:
        policies.append({"type": "Percent", "value": rules.percent, "periodSeconds": period})
    window = rules.stabilization_window_seconds
    return {
        "stabilizationWindowSeconds": defaults["stabilization_window_seconds"] if window is None else window,
        "selectPolicy": select,
        "policies": policies,
    }


def behavior(auto: AutoscalingSpec) -> dict[str, Any]:
    """The HPA ``behavior`` (also KEDA's ``advanced.horizontalPodAutoscalerConfig.behavior``)."""
    return {
        "scaleUp": _rules(auto.scale_up, DEFAULT_SCALE_UP, "Max"),
        "scaleDown": _rules(auto.scale_down, DEFAULT_SCALE_DOWN, "Min"),
    }


def _number(value: float) -> str:
    """``value`` as KEDA writes thresholds: ``3``, ``0.8``, ``204.8``."""
    return f"{value:g}"


def quantity(value: float) -> str:
    """``value`` as a Kubernetes quantity: whole numbers plain, fractions in milli-units."""
    if float(value).is_integer():
        return str(int(value))
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _enabled(spec: AscendLLMDeploymentSpec) -> AutoscalingSpec:
    if spec.autoscaling is None or not spec.autoscaling.enabled:
        raise ValueError("spec.autoscaling is off; there is no autoscaler to build")
    return spec.autoscaling


# --------------------------------------------------------------------------------------------
# HPA


def hpa_metric(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> dict[str, Any]:
    """The HPA's ``Pods`` metric for the spec's signal (custom signals need KEDA)."""
    auto = _enabled(spec)
    names = {
        AutoscalingSignal.WAITING: settings.hpa_metric_waiting,
        AutoscalingSignal.RUNNING: settings.hpa_metric_running,
        AutoscalingSignal.KV_CACHE: settings.hpa_metric_kv_cache,
    }
    if auto.signal not in names:
        raise ValueError("signal custom is PromQL, which an HPA cannot read; use KEDA (provider keda)")
    target = auto.resolved_target(effective_max_num_seqs(spec))
    return {
        "type": "Pods",
        "pods": {
            "metric": {"name": names[auto.signal]},
            "target": {"type": "AverageValue", "averageValue": quantity(target)},
        },
    }


def build_hpa(
    name: str, namespace: str, hpa_name: str, spec: AscendLLMDeploymentSpec, settings: OperatorSettings,
    *, target: dict[str, str] | None = None,
) -> dict[str, Any]:
    """HorizontalPodAutoscaler ``hpa_name`` scaling resource ``name`` (docs/autoscaling.md), or
    ``target`` (a disaggregation role's workload: its Pods metrics are then that role's pods)."""
    auto = _enabled(spec)
    if auto.min_replicas < 1:
        raise ValueError("an HPA needs minReplicas >= 1; scale-to-zero needs KEDA")
    return with_spec_hash(
        {
            "apiVersion": HPA_API_VERSION,
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": hpa_name, "namespace": namespace, "labels": common_labels(name)},
            "spec": {
                "scaleTargetRef": target or scale_target_ref(name),
                "minReplicas": auto.min_replicas,
                "maxReplicas": auto.max_replicas,
                "metrics": [hpa_metric(spec, settings)],
                "behavior": behavior(auto),
            },
        }
    )


# --------------------------------------------------------------------------------------------
# KEDA


def prometheus_query(
    name: str, namespace: str, spec: AscendLLMDeploymentSpec, settings: OperatorSettings, role: str | None = None
) -> tuple[str, str]:
    """``(query, metricType)`` of the load trigger for the spec's signal (``role``: that
    disaggregation role's series only)."""
    auto = _enabled(spec)
    if auto.signal == AutoscalingSignal.CUSTOM:
        assert auto.query is not None  # the spec rules require it
        return auto.query, "AverageValue"
    of_role = f',{settings.prometheus_role_label}="{role}"' if role else ""
    selector = f'{{namespace="{namespace}",{settings.prometheus_instance_label}="{label_value(name)}"{of_role}}}'
    if auto.signal == AutoscalingSignal.KV_CACHE:
        return f"avg({settings.prom_metric_kv_cache}{selector})", "Value"
    metric = settings.prom_metric_waiting if auto.signal == AutoscalingSignal.WAITING else settings.prom_metric_running
    return f"sum({metric}{selector})", "AverageValue"


def build_scaled_object(
    name: str,
    namespace: str,
    scaled_object_name: str,
    spec: AscendLLMDeploymentSpec,
    settings: OperatorSettings,
    *,
    target: dict[str, str] | None = None,
    role: str | None = None,
) -> dict[str, Any]:
    """KEDA ScaledObject ``scaled_object_name`` scaling resource ``name`` (docs/autoscaling.md), or
    ``target``, a disaggregation ``role``'s workload (its query reads that role's series)."""
    auto = _enabled(spec)
    query, metric_type = prometheus_query(name, namespace, spec, settings, role)
    triggers: list[dict[str, Any]] = [
        {
            "type": "prometheus",
            "name": "load",
            "metricType": metric_type,
            "metadata": {
                "serverAddress": settings.keda_prometheus_address,
                "query": query,
                "threshold": _number(auto.resolved_target(effective_max_num_seqs(spec))),
            },
        }
    ]
    body: dict[str, Any] = {
        "scaleTargetRef": target or scale_target_ref(name),
        "pollingInterval": settings.keda_polling_interval_s,
        "minReplicaCount": auto.min_replicas,
        "maxReplicaCount": auto.max_replicas,
    }
    zero = auto.scale_to_zero
    if zero.enabled:
        assert zero.activation_query is not None  # the spec rules require it
        body["cooldownPeriod"] = zero.idle_seconds or DEFAULT_IDLE_SECONDS
        if auto.min_replicas > 0:
            body["idleReplicaCount"] = 0
        threshold = _number(zero.activation_threshold or 0)
        triggers.append(
            {
                "type": "prometheus",
                "name": "activation",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": settings.keda_prometheus_address,
                    # 1 while clients want the model, else 0: wakes it, and asks for one replica.
                    "query": f"(sum({zero.activation_query}) > bool {threshold})",
                    "threshold": "1",
                    "activationThreshold": "0",
                },
            }
        )
    body["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": behavior(auto)}}
    body["triggers"] = triggers
    return with_spec_hash(
        {
            "apiVersion": KEDA_API_VERSION,
            "kind": "ScaledObject",
            "metadata": {
                "name": scaled_object_name,
                "namespace": namespace,
                "labels": common_labels(name),
            },
            "spec": body,
        }
    )
