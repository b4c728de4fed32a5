"""How each replica runs: ``spec.npu``, ``parallelism``, ``engine``, ``ascend``, ``graph``,
``warmup``, ``health``, ``resources``, ``service``, ``rollout`` and ``distributed`` (multi-node)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from ascend_operator.api.base import (
    DEFAULT_CHIP,
    DEFAULT_NPUS_PER_REPLICA,
    DEFAULT_SERVICE_PORT,
    DistributedBackend,
    DnsSubdomain,
    Dtype,
    EnvName,
    LabelKey,
    LabelValue,
    Quantity,
    RolloutStrategy,
    ServiceType,
    SpecModel,
)
from ascend_operator.api.model import EnvValueSource, SecretKeyRef
from ascend_runtime.config import Chip, EngineOptions, GraphPolicy, HealthConfig, LeakLimits, WarmupConfig
from ascend_runtime.weightsload import WeightsLoader
from pydantic import Field, StringConstraints, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError


# --------------------------------------------------------------------------------------------
# spec.npu


class Toleration(SpecModel):
    """A pod toleration, passed through to the pod spec."""

    key: LabelKey | None = Field(
        None, description="Taint key the toleration applies to; empty with operator Exists matches all."
    )
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Exists or Equal. Default: Equal.")
    value: LabelValue | None = Field(
        None, description="Taint value for operator Equal (a label value)."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: int | None = Field(
        None, description="For NoExecute: how long the pod stays bound after the taint appears."
    )


#: The keys of a core/v1 Affinity.
AFFINITY_KINDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")


class NpuSpec(SpecModel):
    """NPU placement: which device, how many per replica, and where pods may run."""

    resource_name: (
        Annotated[
            str,
            StringConstraints(
                min_length=3,
                max_length=253,
                pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "Extended resource the device plugin advertises. Default by chip (operator settings): "
            "huawei.com/Ascend910 for 910B and A3, huawei.com/Ascend310P for 310P."
        ),
    )
    per_replica: int = Field(
        DEFAULT_NPUS_PER_REPLICA,
        ge=1,
        le=16,
        description=(
            "NPUs per pod, that is per node of a replica (the whole replica when nodesPerReplica "
            "is 1). nodesPerReplica x perReplica must equal tensor x pipeline x data parallel. Default: 1."
        ),
    )
    chip: Chip = Field(DEFAULT_CHIP, description="Chip preset: 910B (Atlas A2), A3 or 310P. Default: 910B.")
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=32,
        description="Node labels the pods require (label keys and values as the API server checks them).",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=32, description="Pod tolerations, passed through."
    )
    affinity: dict[str, Any] | None = Field(
        None,
        description=(
            "Pod affinity (a core/v1 Affinity object), passed through verbatim; the operator refuses keys "
            "other than nodeAffinity, podAffinity and podAntiAffinity (each an object), and the API server "
            "validates the rest when the operator writes the Deployment."
        ),
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    @field_validator("affinity")
    @classmethod
    def _affinity_kinds(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # Server-side apply answers an unknown field of the pod template with HTTP 500 (no field
        # named): say which key is wrong on the resource instead.
        if value is None:
            return value
        for key, item in value.items():
            if key not in AFFINITY_KINDS:
                raise ValueError(
                    f"unknown affinity {key!r}; a core/v1 Affinity has {', '.join(AFFINITY_KINDS)}")
            if not isinstance(item, dict):
                raise ValueError(f"affinity {key} must be an object, got {type(item).__name__}")
        return value
    priority_class_name: DnsSubdomain | None = Field(
        None, description="Pod priorityClassName, passed through."
    )
    scheduler_name: DnsSubdomain | None = Field(
        None, description="Pod schedulerName (for example volcano), passed through. Default: the cluster's."
    )


# --------------------------------------------------------------------------------------------
# spec.parallelism / engine / ascend / graph / warmup / health


class ParallelismSpec(SpecModel):
    """How one replica splits the model over its NPUs (tensor x pipeline x data = nodes x npu.perReplica)."""

    tensor: int = Field(1, ge=1, le=16, description="--tensor-parallel-size. Default: 1.")
    pipeline: int = Field(1, ge=1, le=16, description="--pipeline-parallel-size. Default: 1.")
    data: int = Field(
        1,
        ge=1,
        le=16,
        description="--data-parallel-size inside one replica (over all its nodes). Default: 1.",
    )
    expert: bool = Field(
        False,
        description="--enable-expert-parallel (MoE: experts spread over tensor x data NPUs). Default: false.",
    )


class EngineSpec(SpecModel):
    """Engine options; left out means the engine's own default."""

    max_model_len: int | None = Field(None, ge=16, le=4194304, description="--max-model-len (tokens).")
    max_num_seqs: int | None = Field(
        None, ge=1, le=65536, description="--max-num-seqs (concurrent sequences)."
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="--gpu-memory-utilization: fraction of NPU memory, in (0, 1]. Engine default 0.9.",
    )
    prefix_caching: bool | None = Field(
        None, description="--[no-]enable-prefix-caching. Default: the engine's."
    )
    dtype: Dtype | None = Field(
        None, description="--dtype. Default: auto (310P: float16; CPU: float32). 310P has no bfloat16."
    )
    quantization: (
        Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")] | None
    ) = Field(None, description="--quantization (for example ascend for msModelSlim weights).")
    extra_args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list, max_length=64, description="Further engine arguments, appended verbatim."
    )
    env: dict[EnvName, Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=dict,
        max_length=64,
        description=(
            "Extra environment of the engine process, written in plain text to the engine config "
            "ConfigMap: no secrets here, use envValueFrom."
        ),
    )
    env_value_from: dict[EnvName, EnvValueSource] = Field(
        default_factory=dict,
        max_length=64,
        description=(
            "Engine environment from Secret or ConfigMap keys (the pod's env valueFrom; never in the "
            "ConfigMap). Values from Secrets are redacted in the runtime's logs."
        ),
    )
    api_key_secret_ref: SecretKeyRef | None = Field(
        None,
        description=(
            "Secret key holding the API key clients must send (Authorization: Bearer); passed to "
            "the engine as VLLM_API_KEY, never on its command line. Default: no key."
        ),
    )
    kv_cache_space_gi_b: int | None = Field(
        None,
        alias="kvCacheSpaceGiB",
        ge=1,
        le=4096,
        description="CPU platform only: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE). Default: 1.",
    )
    shutdown_timeout_seconds: int | None = Field(
        None,
        ge=0,
        le=3600,
        description=(
            "Seconds in-flight requests get to finish on shutdown; the pod's grace period is "
            f"longer. Default: {EngineOptions.model_fields['shutdown_timeout_s'].default}."
        ),
    )
    tuned_defaults: bool | None = Field(
        None,
        description=(
            "Apply vllm-ascend's tutorial settings for the model's class (dense, MoE, MLA, quantised) "
            "and the installed version (docs/tuned-defaults.md); what you set in env, extraArgs and "
            "the other fields always wins. Default: true."
        ),
    )
    weights_loader: WeightsLoader | None = Field(
        None,
        description=(
            "How the engine reads the weights (docs/weights-loading.md): mmap (vLLM's default), eager "
            "(whole files; vLLM 0.10.2+), prefetch (parallel read-ahead into the page cache; vLLM 0.18+), "
            "runaiStreamer (the Run:ai Model Streamer; needs runai-model-streamer in the image), "
            "fastsafetensors (CUDA only: refused here). Default auto: prefetch (else eager) when the "
            "weights are on a PersistentVolumeClaim (spec.model.pvc, or hub weights in a claim cache), "
            "vLLM's default on a host path or an emptyDir. A loader the image's vLLM lacks is refused."
        ),
    )


class AscendOptionsSpec(SpecModel):
    """vllm-ascend options (--additional-config)."""

    multistream_overlap_shared_expert: bool | None = Field(
        None, description="Overlap shared-expert computation on a second stream (MoE models). Default: false."
    )
    enable_static_kernel: bool | None = Field(
        None, description="Compile static kernels (faster serving, minutes more start-up). Default: false."
    )
    additional_config: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Further --additional-config keys, free-form; keys the typed fields above set are "
            "overridden by them. Keys unknown to the installed vllm-ascend are dropped with a warning."
        ),
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class GraphSpec(SpecModel):
    """Graph capture policy and the fallback ladder."""

    policy: GraphPolicy = Field(
        GraphPolicy.AUTO,
        description="auto (the runtime chooses per version and chip), full_and_piecewise, piecewise, full_decode_only or eager.",
    )
    fallback: bool = Field(
        True, description="Fall back one rung (towards eager) when capture or replay fails. Default: true."
    )
    capture_sizes: list[Annotated[int, Field(ge=1, le=65536)]] | None = Field(
        None,
        max_length=256,
        description="Batch sizes to capture (cudagraph_capture_sizes). Default: the engine's.",
    )
    max_capture_size: int | None = Field(
        None, ge=1, le=65536, description="Largest batch size captured (max_cudagraph_capture_size)."
    )


_WARMUP_DEFAULTS = WarmupConfig()


class WarmupSpec(SpecModel):
    """Requests the runtime sends before the pod turns Ready, so first users do not pay compile time."""

    enabled: bool = Field(True, description="Warm up before Ready. Default: true.")
    prompt_lengths: list[Annotated[int, Field(ge=1, le=4194304)]] | None = Field(
        None,
        min_length=1,
        max_length=32,
        description=(
            "Prompt lengths in tokens, sent on top of the plan the runtime derives from the engine's "
            "flags (a ladder 16, 32, 64, ... up to the longest prompt maxModelLen allows, the chunked-"
            "prefill size, a decode wave through the captured batch sizes); each plus maxTokens and 8 "
            "tokens of margin must fit in engine.maxModelLen (refused otherwise, never clipped). "
            "Default: none, the derived plan alone."
        ),
    )
    concurrency: list[Annotated[int, Field(ge=1, le=65536)]] | None = Field(
        None,
        min_length=1,
        max_length=16,
        description=(
            "Concurrency levels at which promptLengths (unset: the derived lengths whose batched "
            "prefill fits one chunk) are sent on top of the derived plan; each at most "
            "engine.maxNumSeqs (refused otherwise, never lowered). Default: none, the derived plan "
            "alone (its decode wave already steps through the captured batch sizes)."
        ),
    )
    max_tokens: int | None = Field(
        None,
        ge=1,
        le=1024,
        description=f"Tokens generated per request. Default: {_WARMUP_DEFAULTS.max_tokens}.",
    )
    timeout_seconds: int | None = Field(
        None,
        ge=1,
        le=86400,
        description=f"Warmup longer than this is a failed start. Default: {_WARMUP_DEFAULTS.timeout_s}.",
    )
    chat: bool | None = Field(
        None,
        description=(
            "Also warm the chat template path (once per concurrency level). A model without a chat "
            "template gets its chat waves skipped with a warning in status.warmup.warnings; false skips "
            f"them from the start. Default: {str(_WARMUP_DEFAULTS.chat).lower()}."
        ),
    )


_LEAK_DEFAULTS = LeakLimits()


class LeakLimitsSpec(SpecModel):
    """Memory-leak detector limits (host RSS and NPU memory); mirrors the runtime's LeakLimits."""

    enabled: bool = Field(True, description="Run the leak detector. Default: true.")
    host_growth_mb_per_hour: float | None = Field(
        None,
        gt=0,
        le=1048576,
        description=f"Host RSS growth limit (MB/h). Default: {_LEAK_DEFAULTS.host_growth_mb_per_hour}.",
    )
    device_growth_mb_per_hour: float | None = Field(
        None,
        gt=0,
        le=1048576,
        description=f"NPU memory growth limit (MB/h). Default: {_LEAK_DEFAULTS.device_growth_mb_per_hour}.",
    )
    min_time_to_exhaustion_seconds: int | None = Field(
        None,
        ge=60,
        le=31536000,
        description=(
            "Unhealthy when the trend exhausts memory sooner than this. "
            f"Default: {_LEAK_DEFAULTS.min_time_to_exhaustion_s}."
        ),
    )
    min_headroom_mb: int | None = Field(
        None,
        ge=0,
        le=1048576,
        description=f"Unhealthy below this free memory (MB). Default: {_LEAK_DEFAULTS.min_headroom_mb}.",
    )
    window_seconds: int | None = Field(
        None,
        ge=60,
        le=604800,
        description=f"Sliding window of the trend. Default: {_LEAK_DEFAULTS.window_s}.",
    )
    grace_seconds: int | None = Field(
        None,
        ge=0,
        le=86400,
        description=f"A limit must hold this long before liveness fails. Default: {_LEAK_DEFAULTS.grace_s}.",
    )
    sample_interval_seconds: float | None = Field(
        None,
        gt=0,
        le=600,
        description=f"Seconds between samples. Default: {_LEAK_DEFAULTS.sample_interval_s}.",
    )


class HealthSpec(SpecModel):
    """Health checks of the runtime beyond the engine's own /health."""

    leak: LeakLimitsSpec | None = Field(None, description="Memory-leak detector limits.")
    hang_timeout_seconds: int | None = Field(
        None,
        ge=10,
        le=86400,
        description=(
            "A request running this long with no new token counts as hung (liveness fails). "
            f"Default: {HealthConfig().hang_timeout_s}."
        ),
    )


# --------------------------------------------------------------------------------------------
# spec.resources / service / rollout


class ResourceList(SpecModel):
    """CPU and memory quantities (NPUs come from npu.perReplica)."""

    cpu: Quantity | None = Field(None, description="CPU quantity, for example 16 or 500m.")
    memory: Quantity | None = Field(None, description="Memory quantity, for example 256Gi.")
    ephemeral_storage: Quantity | None = Field(
        None, description="Ephemeral storage quantity (the hub model cache counts against it)."
    )


_QUANTITY_SUFFIXES = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Decimal(10) ** e for s, e in (("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6),
                                         ("G", 9), ("T", 12), ("P", 15), ("E", 18))},
}


def quantity_value(quantity: int | str) -> Decimal:
    """The number a Kubernetes quantity (already matching QUANTITY_PATTERN) stands for."""
    text = str(quantity).lstrip("+")
    match = re.fullmatch(r"([0-9.]+)([eE][-+]?[0-9.]+|[KMGTPE]i|[numkMGTPE])?", text)
    assert match is not None, text
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if len(suffix) > 1 and suffix[0] in "eE":  # an exponent; a bare E is exa
        return number * Decimal(10) ** Decimal(suffix[1:])
    return number * _QUANTITY_SUFFIXES[suffix]


class ResourcesSpec(SpecModel):
    """Engine container requests and limits besides the NPUs."""

    requests: ResourceList | None = Field(None, description="Requested CPU, memory and ephemeral storage.")
    limits: ResourceList | None = Field(
        None, description="Limits of CPU, memory and ephemeral storage; each at least its request."
    )

    @model_validator(mode="after")
    def _requests_within_limits(self) -> ResourcesSpec:
        # The API server refuses a pod whose request exceeds its limit; say so on the resource.
        # (Operator side only: CEL's quantity library has no counterpart the tests can evaluate.)
        if self.requests is None or self.limits is None:
            return self
        for field in ("cpu", "memory", "ephemeral_storage"):
            asked, bound = getattr(self.requests, field), getattr(self.limits, field)
            if asked is not None and bound is not None and quantity_value(asked) > quantity_value(bound):
                name = to_camel(field)
                raise PydanticCustomError(
                    "request_above_limit",
                    "requests.{name} ({asked}) is above limits.{name} ({bound}); "
                    "raise the limit or lower the request",
                    {"name": name, "asked": str(asked), "bound": str(bound)},
                )
        return self


class ServiceSpec(SpecModel):
    """The Service in front of the replicas."""

    port: int = Field(
        DEFAULT_SERVICE_PORT, ge=1, le=65535, description="Service port of the OpenAI API. Default: 8000."
    )
    type: ServiceType = Field(
        ServiceType.CLUSTER_IP, description="ClusterIP, NodePort or LoadBalancer. Default: ClusterIP."
    )


class RolloutSpec(SpecModel):
    """How pods are replaced when the spec changes."""

    strategy: RolloutStrategy = Field(
        RolloutStrategy.RECREATE,
        description=(
            "Recreate (default) or RollingUpdate. RollingUpdate always uses maxSurge 0 and "
            "maxUnavailable 1, so an update never waits for NPUs that do not exist."
        ),
    )


# --------------------------------------------------------------------------------------------
# spec.distributed (multi-node replicas)


class HcclSpec(SpecModel):
    """HCCL communication settings of a multi-node replica; left out: the operator settings."""

    socket_ifname: (
        Annotated[
            str,
            StringConstraints(
                min_length=1, max_length=128, pattern=r"^[=^]?[A-Za-z0-9_.:-]+(,[A-Za-z0-9_.:-]+)*$"
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "Network interface(s) for HCCL, Gloo and TP sockets (HCCL_SOCKET_IFNAME, "
            "GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME). Default: the operator's (eth0, the pod interface)."
        ),
    )
    buffer_size_mb: int | None = Field(
        None,
        alias="bufferSizeMB",
        ge=1,
        le=65536,
        description="HCCL_BUFFSIZE in MB per communicator. Default: the operator's (1024).",
    )
    connect_timeout_seconds: int | None = Field(
        None,
        ge=120,
        le=7200,
        description=(
            "HCCL_CONNECT_TIMEOUT: how long ranks wait for each other at start-up. "
            "Default: the operator's (1200)."
        ),
    )
    exec_timeout_seconds: int | None = Field(
        None,
        ge=0,
        le=2147483647,
        description="HCCL_EXEC_TIMEOUT: how long one collective may take (0 = never). Default: HCCL's.",
    )
    op_expansion_mode: Literal["AIV", "AI_CPU", "HOST", "HOST_TS"] | None = Field(
        None,
        description="HCCL_OP_EXPANSION_MODE (vllm-ascend's A2/A3 guides use AIV). Default: HCCL's.",
    )


class DistributedSpec(SpecModel):
    """How the nodes of a multi-node replica run together (used when nodesPerReplica > 1)."""

    backend: DistributedBackend = Field(
        DistributedBackend.MP,
        description=(
            "mp: vLLM's native data parallel (the leader runs the API server with "
            "--data-parallel-address, workers run --headless --data-parallel-start-rank); "
            "ray: a Ray cluster (--distributed-executor-backend ray), tensor/pipeline parallel "
            "across nodes, data parallel 1. Default: mp."
        ),
    )
    leader_port: int | None = Field(
        None,
        ge=1024,
        le=65535,
        description=(
            "Port on the leader that workers connect to (mp: --data-parallel-rpc-port, default "
            "13345; ray: the Ray head's port, default 6379)."
        ),
    )
    hccl: HcclSpec = Field(default_factory=HcclSpec, description="HCCL communication settings.")
