"""The optional features of the spec: ``spec.autoscaling``, ``spec.routing`` and ``spec.lora``."""

from __future__ import annotations

import enum
from typing import Annotated

from ascend_operator.api.base import (
    DEFAULT_IDLE_SECONDS,
    DEFAULT_MIN_REPLICAS,
    DEFAULT_RUNNING_FRACTION,
    DEFAULT_TARGET_KV_CACHE,
    DEFAULT_TARGET_WAITING,
    VLLM_DEFAULT_MAX_NUM_SEQS,
    AutoscalerProvider,
    AutoscalingSignal,
    DnsLabel,
    DnsSubdomain,
    SpecModel,
)
from ascend_operator.api.model import HOST_PATH_PATTERN, HubRepoId, RelativeDir, Revision, SecretKeyRef
from ascend_runtime.config import ADAPTER_NAME_PATTERN, LORA_RANKS
from ascend_runtime.enginelimits import CPU_DEFAULT_MAX_NUM_SEQS
from pydantic import Field, StringConstraints


# --------------------------------------------------------------------------------------------
# spec.autoscaling


class ScalingRulesSpec(SpecModel):
    """One direction of the autoscaler's behaviour (the HPA's scaleUp or scaleDown rules)."""

    stabilization_window_seconds: int | None = Field(
        None,
        ge=0,
        le=3600,
        description=(
            "The autoscaler acts on the most conservative recommendation of this window. "
            "Default: 30 s up, 600 s down."
        ),
    )
    pods: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="At most this many replicas added (or removed) per periodSeconds. Default: 1.",
    )
    percent: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="At most this percentage of the current replicas per periodSeconds. Default: unset.",
    )
    period_seconds: int | None = Field(
        None,
        ge=1,
        le=1800,
        description="The period of pods / percent. Default: 60 s up, 120 s down.",
    )


class ScaleToZeroSpec(SpecModel):
    """Scale to no replica after a long idle time (KEDA only)."""

    enabled: bool = Field(False, description="Scale to zero replicas when idle (needs KEDA). Default: false.")
    idle_seconds: int | None = Field(
        None,
        ge=60,
        le=604800,
        description=(
            f"Idle time before scaling to zero (KEDA cooldownPeriod). Default: {DEFAULT_IDLE_SECONDS} "
            "(waking the model again costs its whole start-up)."
        ),
    )
    activation_query: Annotated[str, StringConstraints(min_length=1, max_length=4096)] | None = Field(
        None,
        description=(
            "PromQL that rises above activationThreshold while clients want this model and no "
            "replica runs (for example the request rate your gateway or ingress reports for this "
            "Service). Required with enabled: a model at zero replicas has no engine metrics to wake it."
        ),
    )
    activation_threshold: float | None = Field(
        None, ge=0, le=1e9, description="activationQuery above this wakes the model. Default: 0."
    )


class AutoscalingSpec(SpecModel):
    """Replicas that follow engine load; the autoscaler writes spec.replicas (scale subresource)."""

    enabled: bool = Field(
        True, description="Autoscale (false keeps these settings but lets spec.replicas rule). Default: true."
    )
    min_replicas: int = Field(
        DEFAULT_MIN_REPLICAS,
        ge=0,
        le=1024,
        description="Fewest replicas; 0 only with scaleToZero.enabled. Default: 1.",
    )
    max_replicas: int = Field(ge=1, le=1024, description="Most replicas (bounded by the NPUs you have).")
    signal: AutoscalingSignal = Field(
        AutoscalingSignal.WAITING,
        description=(
            "waitingRequestsPerReplica (vllm:num_requests_waiting), runningRequestsPerReplica "
            "(vllm:num_requests_running), kvCacheUsage (vllm:kv_cache_usage_perc, averaged) or custom "
            "(query). Default: waitingRequestsPerReplica."
        ),
    )
    target: float | None = Field(
        None,
        gt=0,
        le=1e6,
        description=(
            f"Target value per replica; for kvCacheUsage a fraction in (0, 1]. Default: "
            f"{DEFAULT_TARGET_WAITING:g} waiting, {DEFAULT_RUNNING_FRACTION:g} x engine.maxNumSeqs "
            f"(or x vLLM's default: {VLLM_DEFAULT_MAX_NUM_SEQS}, "
            f"{CPU_DEFAULT_MAX_NUM_SEQS} on CPU) running, {DEFAULT_TARGET_KV_CACHE:g} KV cache; "
            "required for custom."
        ),
    )
    query: Annotated[str, StringConstraints(min_length=1, max_length=4096)] | None = Field(
        None,
        description=(
            "signal custom only: PromQL whose value, divided by the replicas, is held at target "
            "(KEDA AverageValue)."
        ),
    )
    scale_up: ScalingRulesSpec = Field(
        default_factory=ScalingRulesSpec, description="Scale-up behaviour. Default: 30 s window, 1 pod / 60 s."
    )
    scale_down: ScalingRulesSpec = Field(
        default_factory=ScalingRulesSpec,
        description="Scale-down behaviour. Default: 600 s window, 1 pod / 120 s.",
    )
    scale_to_zero: ScaleToZeroSpec = Field(
        default_factory=ScaleToZeroSpec, description="Scale to zero when idle (KEDA)."
    )
    provider: AutoscalerProvider = Field(
        AutoscalerProvider.AUTO,
        description=(
            "auto (the operator setting, else KEDA when installed, else an HPA), hpa "
            "(autoscaling/v2 on prometheus-adapter metrics) or keda. Default: auto."
        ),
    )

    def resolved_target(self, max_num_seqs: int | None) -> float:
        # max_num_seqs: the replica's effective limit (api.rules.effective_max_num_seqs: CPU's default is
        # 128, not 256); None falls back to the NPU default.
        """``target``, or the signal's documented default (custom has none: the rules require it)."""
        if self.target is not None:
            return self.target
        if self.signal == AutoscalingSignal.KV_CACHE:
            return DEFAULT_TARGET_KV_CACHE
        if self.signal == AutoscalingSignal.RUNNING:
            return DEFAULT_RUNNING_FRACTION * (max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS)
        if self.signal == AutoscalingSignal.WAITING:
            return DEFAULT_TARGET_WAITING
        raise ValueError("signal custom has no default target; set spec.autoscaling.target")


# --------------------------------------------------------------------------------------------
# spec.routing (prefix-aware routing through the Gateway API Inference Extension)


class RoutingProfile(str, enum.Enum):
    """The Endpoint Picker's scoring profile: which scorers rank the replicas, and their weights."""

    #: Prefix-cache affinity first, then load: queue 2, KV-cache utilisation 2, prefix cache 3
    #: (the llm-d router chart's default profile).
    PREFIX_CACHE = "prefixCache"
    #: Load only: queue 1, KV-cache utilisation 1 (no prefix affinity; for prompts that share nothing).
    LOAD = "load"


class RoutingFailureMode(str, enum.Enum):
    """What the gateway does when the Endpoint Picker does not answer."""

    FAIL_OPEN = "FailOpen"
    FAIL_CLOSE = "FailClose"


class GatewayRef(SpecModel):
    """The Gateway (gateway.networking.k8s.io/v1) the HTTPRoute attaches to."""

    name: DnsSubdomain = Field(description="Name of the Gateway.")
    namespace: DnsLabel | None = Field(
        None, description="Namespace of the Gateway. Default: the resource's namespace."
    )
    section_name: DnsSubdomain | None = Field(
        None, description="A listener of the Gateway (its sectionName). Default: every listener that allows the route."
    )


#: A Gateway API hostname (its HTTPRoute pattern): precise, or a wildcard label first (``*.example.com``).
RouteHostname = Annotated[
    str, StringConstraints(min_length=1, max_length=253,
                           pattern=r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
]
#: The most hostnames one route lists (the HTTPRoute's own limit).
MAX_ROUTE_HOSTNAMES = 16


class RoutingSpec(SpecModel):
    """Prefix-aware routing: an InferencePool over the engine pods, an Endpoint Picker and an HTTPRoute."""

    enabled: bool = Field(
        True, description="Create the pool, the Endpoint Picker and the route. Default: true."
    )
    gateway: GatewayRef | None = Field(
        None,
        description=(
            "The Gateway the HTTPRoute attaches to. Default: the operator settings ROUTING_GATEWAY_NAME "
            "(and ROUTING_GATEWAY_NAMESPACE); without either no HTTPRoute is made."
        ),
    )
    hostnames: list[RouteHostname] = Field(
        default_factory=list, max_length=MAX_ROUTE_HOSTNAMES,
        description=(
            "Hostnames of the HTTPRoute (precise, or *.example.com). The route matches, on these hosts "
            "(on every host when empty), only requests whose X-Gateway-Model-Name header (set by the "
            "gateway's body-based router from the request's model field) is the served model name or an "
            "adapter's name. Default: none."
        ),
    )
    profile: RoutingProfile = Field(
        RoutingProfile.PREFIX_CACHE,
        description=(
            "prefixCache (prefix-cache 3, queue 2, KV-cache utilisation 2) or load (queue 1, KV-cache "
            "utilisation 1). Default: prefixCache."
        ),
    )
    failure_mode: RoutingFailureMode = Field(
        RoutingFailureMode.FAIL_OPEN,
        description=(
            "FailOpen (the gateway picks a replica itself when the Endpoint Picker does not answer) or "
            "FailClose (it refuses the request). Default: FailOpen."
        ),
    )

# --------------------------------------------------------------------------------------------
# spec.lora

#: The most adapters one resource lists (each a load on every replica; CEL cost stays bounded):
#: 127, since the HTTPRoute of spec.routing matches the served name and each adapter's name, and
#: Gateway API allows 128 matches in one route.
MAX_ADAPTERS = 127


class AdapterPvcSource(SpecModel):
    """A LoRA adapter on a PersistentVolumeClaim: the claim is mounted read-only once, however
    many adapters it holds."""

    claim_name: DnsSubdomain = Field(description="Name of the PersistentVolumeClaim in the resource's namespace.")
    sub_path: RelativeDir | None = Field(
        None, description="The adapter's directory inside the claim (relative). Default: the claim's root."
    )


class AdapterHostPathSource(SpecModel):
    """A LoRA adapter in a directory on the node: ``path`` is mounted read-only once, however many
    adapters it holds."""

    path: Annotated[str, StringConstraints(min_length=2, max_length=1024, pattern=HOST_PATH_PATTERN)] = Field(
        description=(
            "Absolute, normalised directory on the node (no '.' or '..' segment, no '//', no trailing '/'). "
            "Allowed only under a prefix the administrator lists (operator setting HOST_PATH_PREFIXES)."
        )
    )
    sub_path: RelativeDir | None = Field(
        None, description="The adapter's directory inside path (relative). Default: path itself."
    )


class AdapterHubSource(SpecModel):
    """A LoRA adapter downloaded from a hub into the model cache (``spec.model.cache`` with
    ``create`` or ``claimName``) by a fetch Job of its own; served once the download is complete."""

    id: HubRepoId = Field(
        description="Repository id of the adapter on the hub, for example org/qwen2.5-7b-sql-lora."
    )
    revision: Revision | None = Field(
        None,
        description=(
            "Adapter revision (branch, tag or commit): letters, digits, '.', '_', '-' and '/', starting with a "
            "letter or digit, no '..'. Default: the hub's default branch."
        ),
    )
    token_secret_ref: SecretKeyRef | None = Field(
        None,
        description=(
            "Secret key holding the hub token for this adapter (HF_TOKEN or MODELSCOPE_API_TOKEN of its fetch "
            "Job). Default: none (a public repository)."
        ),
    )


class AdapterSource(SpecModel):
    """Where one adapter's files (adapter_config.json and weights) are: exactly one of pvc, hostPath,
    huggingFace and modelScope."""

    pvc: AdapterPvcSource | None = Field(None, description="A directory on a PersistentVolumeClaim.")
    host_path: AdapterHostPathSource | None = Field(None, description="A directory on the node.")
    hugging_face: AdapterHubSource | None = Field(
        None, description="Download from Hugging Face into the model cache (needs spec.model.cache)."
    )
    model_scope: AdapterHubSource | None = Field(
        None, description="Download from ModelScope into the model cache (needs spec.model.cache)."
    )

    def hub(self) -> AdapterHubSource | None:
        """The hub source, when the adapter comes from a hub."""
        return self.hugging_face or self.model_scope


class LoraAdapterSpec(SpecModel):
    """One LoRA adapter, served next to the base model under its own model name."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=ADAPTER_NAME_PATTERN)] = Field(
        description=(
            "The model name clients send for this adapter: 1-128 letters, digits and . _ - /, starting and "
            "ending with a letter or digit; unique, and not the base model's served name."
        )
    )
    source: AdapterSource = Field(description="Where the adapter's files are.")


class LoraSpec(SpecModel):
    """LoRA adapters served with the base model. ``enabled``, ``maxRank``, ``maxLoras`` and
    ``maxCpuLoras`` are engine flags (a change restarts the pods); ``adapters`` is read by the
    running pods (a change loads and unloads adapters without a restart, unless it adds or
    removes a volume)."""

    enabled: bool = Field(True, description="Serve LoRA adapters (--enable-lora). Default: true.")
    max_rank: int = Field(
        16,
        description=(
            f"The largest adapter rank served (--max-lora-rank): one of {', '.join(map(str, LORA_RANKS))}. "
            "An adapter of a higher rank fails to load. Default: 16."
        ),
    )
    max_loras: int = Field(1, ge=1, le=256, description="Adapters in one batch (--max-loras). Default: 1.")
    max_cpu_loras: int | None = Field(
        None, ge=1, le=1024,
        description="Adapters kept in host memory (--max-cpu-loras), at least maxLoras. Default: maxLoras.",
    )
    adapters: list[LoraAdapterSpec] = Field(
        default_factory=list, max_length=MAX_ADAPTERS,
        description="The adapters to serve; clients select one with its name as the model.",
    )
