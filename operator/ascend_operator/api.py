"""The ``AscendLLMDeployment`` API: the one source of truth for the spec and the status.

Group ``llm.ascend.dev``, version ``v1alpha1``. The pydantic models below are camelCase on the
wire (like every Kubernetes API) and snake_case in Python. :mod:`ascend_operator.crdgen` turns
them into the CRD's structural ``openAPIV3Schema``; nothing else describes the schema.

Defaults live here, not in the CRD: the schema carries no ``default`` keywords, so a stored object
holds what the user wrote, CEL rules see what the user wrote, and a newer operator can change a
default without rewriting stored objects. Fields left out mean "the operator's (or the runtime's)
default", and each description says what that default is.

Cross-field rules are declared once, in :data:`SPEC_RULES`: each :class:`SpecRule` carries the
CEL expression the API server evaluates (``x-kubernetes-validations``) and the Python predicate
the operator evaluates in the model validators, with one message for both. Tests evaluate the
CEL with ``celpy`` on the same cases to prove that both sides agree.

``spec.nodesPerReplica`` / ``spec.distributed`` (replicas spanning several nodes, built as a
LeaderWorkerSet) and ``spec.autoscaling`` (HPA or KEDA on engine load, scale-to-zero) are
optional and defaulted, so a spec written before them means what it meant; so is ``spec.lora``
(LoRA adapters served with the base model).
"""

from __future__ import annotations

import enum
import re
from decimal import Decimal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from ascend_operator.reserved import RESERVED_ENV, RESERVED_FLAGS, ReservedEnv, ReservedFlag
from ascend_runtime.config import (
    ADAPTER_NAME_PATTERN,
    LORA_RANKS,
    Chip,
    EngineOptions,
    GraphMode,
    GraphPolicy,
    HealthConfig,
    LeakLimits,
    WarmupConfig,
)
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

GROUP = "llm.ascend.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "AscendLLMDeployment"
PLURAL = "ascendllmdeployments"
SINGULAR = "ascendllmdeployment"
SHORT_NAMES = ("ald", "ascendllm")

#: Operator-side defaults that CEL rules must mirror (the schema has no defaults).
DEFAULT_CHIP = Chip.A2_910B
DEFAULT_NPUS_PER_REPLICA = 1
DEFAULT_REPLICAS = 1
DEFAULT_SERVICE_PORT = 8000
DEFAULT_NODES_PER_REPLICA = 1
DEFAULT_MIN_REPLICAS = 1
#: Scale-up: a 30 s window ignores a one-poll spike; then at most one replica per 60 s, because
#: a replica takes minutes to start and the metric stays high until it serves (adding more per
#: period would overshoot by the whole start-up time's worth of replicas).
DEFAULT_SCALE_UP = {"stabilization_window_seconds": 30, "pods": 1, "period_seconds": 60}
#: Scale-down: a 600 s window (load must stay low for 10 minutes: a removed replica costs a
#: multi-minute cold start to get back), then at most one replica per 120 s.
DEFAULT_SCALE_DOWN = {"stabilization_window_seconds": 600, "pods": 1, "period_seconds": 120}
#: Scale-to-zero idles 30 minutes first: waking the model again costs its whole start-up.
DEFAULT_IDLE_SECONDS = 1800
#: Default targets per signal (per replica, or the fraction for kvCacheUsage). Waiting requests
#: mean the batch is full; 3 per replica keeps queueing short. Running requests: 80 % of vLLM's
#: default --max-num-seqs 256 (or of engine.maxNumSeqs when set).
DEFAULT_TARGET_WAITING = 3.0
DEFAULT_TARGET_KV_CACHE = 0.8
DEFAULT_RUNNING_FRACTION = 0.8
VLLM_DEFAULT_MAX_NUM_SEQS = 256

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "SPEC_RULES",
    "VERSION",
    "AscendLLMDeploymentSpec",
    "AscendLLMDeploymentStatus",
    "AscendOptionsSpec",
    "AutoscalerProvider",
    "AutoscalingSignal",
    "AutoscalingSpec",
    "Chip",
    "Condition",
    "ConditionStatus",
    "DistributedBackend",
    "DistributedSpec",
    "Dtype",
    "EngineSpec",
    "GraphMode",
    "GraphPolicy",
    "GraphSpec",
    "GraphStatus",
    "HcclSpec",
    "HealthSpec",
    "HostPathSource",
    "HubSource",
    "LeakLimitsSpec",
    "LoraAdapterSpec",
    "LoraAdapterStatus",
    "LoraSpec",
    "LoraStatus",
    "AdapterSource",
    "AdapterHubSource",
    "AdapterPvcSource",
    "AdapterHostPathSource",
    "ModelSpec",
    "NpuSpec",
    "ParallelismSpec",
    "Phase",
    "Platform",
    "PvcSource",
    "ReplicaGraphStatus",
    "ResourceList",
    "ResourcesSpec",
    "RolloutSpec",
    "RolloutStrategy",
    "GatewayRef",
    "RoutingFailureMode",
    "RoutingProfile",
    "RoutingSpec",
    "ScaleToZeroSpec",
    "ScalingRulesSpec",
    "ConfigMapKeyRef",
    "EnvValueSource",
    "SecretKeyRef",
    "ServiceSpec",
    "ServiceType",
    "SpecError",
    "SpecRule",
    "Toleration",
    "WarmupSpec",
    "WarmupStatus",
    "display_chip",
    "display_model",
    "parse_spec",
]


# --------------------------------------------------------------------------------------------
# Cross-field rules: one table for CEL (server) and Python (operator).


@dataclass(frozen=True)
class SpecRule:
    """A cross-field rule, checked by the API server (CEL) and by the operator (Python).

    ``field_path`` is relative to the node the rule sits on, in CEL ``fieldPath`` syntax
    (``.npu.perReplica``), or empty for the node itself; errors name ``spec`` + the node's
    path + ``field_path``.
    ``holds`` receives the validated Python model of that node.
    """

    cel: str
    message: str
    field_path: str
    holds: Callable[[Any], bool]

    def as_validation(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry for this rule."""
        entry = {"rule": self.cel, "message": self.message}
        if self.field_path:
            entry["fieldPath"] = self.field_path
        return entry


#: Filled in below, after the classes; keyed by the model class the rules sit on.
SPEC_RULES: dict[type[BaseModel], tuple[SpecRule, ...]] = {}


def _schema_extra(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """Attach the class's CEL rules to its JSON Schema (read by crdgen)."""
    rules = SPEC_RULES.get(cls, ())
    if rules:
        schema["x-kubernetes-validations"] = [rule.as_validation() for rule in rules]


def _check_rules(model: BaseModel) -> None:
    """Raise one error listing every rule of ``model``'s class that does not hold."""
    broken = [
        {"field": rule.field_path, "message": rule.message}
        for rule in SPEC_RULES.get(type(model), ())
        if not rule.holds(model)
    ]
    if broken:
        raise PydanticCustomError(
            "spec_rule",
            "{summary}",
            {"summary": "; ".join(f"{b['field']}: {b['message']}" for b in broken), "rules": broken},
        )


class _Spec(BaseModel):
    """Strict, camelCase on the wire, snake_case in Python; rules from :data:`SPEC_RULES`."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        json_schema_extra=_schema_extra,
        use_enum_values=False,
    )

    @model_validator(mode="after")
    def _rules(self) -> _Spec:
        _check_rules(self)
        return self


# --------------------------------------------------------------------------------------------
# Shared small types.

DnsSubdomain = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    ),
]
DnsLabel = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]
#: A Kubernetes quantity written as a string ("500m", "16Gi") or a plain integer.
QUANTITY_PATTERN = r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
Quantity = Annotated[
    Annotated[int, Field(ge=0)] | Annotated[str, StringConstraints(max_length=64, pattern=QUANTITY_PATTERN)],
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]
EnvName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
#: A label key as the API server checks it: an optional DNS-subdomain prefix and ``/``, then a
#: name of at most 63 characters (alphanumerics, ``-``, ``_``, ``.``; alphanumeric at both ends).
LABEL_KEY_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                     r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=317, pattern=LABEL_KEY_PATTERN)]
#: A label value: empty, or up to 63 alphanumerics, ``-``, ``_``, ``.``, alphanumeric at both ends.
LabelValue = Annotated[
    str, StringConstraints(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
]


class Platform(str, enum.Enum):
    """Where the engine runs: Ascend NPUs (production) or CPU (local demo and tests)."""

    ASCEND = "Ascend"
    CPU = "CPU"


class Dtype(str, enum.Enum):
    """The engine's --dtype."""

    AUTO = "auto"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"


class ServiceType(str, enum.Enum):
    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"


class RolloutStrategy(str, enum.Enum):
    RECREATE = "Recreate"
    ROLLING_UPDATE = "RollingUpdate"


class DistributedBackend(str, enum.Enum):
    """How the nodes of one replica cooperate: vLLM's native data parallel, or Ray."""

    MP = "mp"
    RAY = "ray"


class AutoscalingSignal(str, enum.Enum):
    """The load signal the autoscaler follows."""

    WAITING = "waitingRequestsPerReplica"
    RUNNING = "runningRequestsPerReplica"
    KV_CACHE = "kvCacheUsage"
    CUSTOM = "custom"


class AutoscalerProvider(str, enum.Enum):
    """Which autoscaler the operator creates: ``auto`` picks by what the cluster serves."""

    AUTO = "auto"
    HPA = "hpa"
    KEDA = "keda"


# --------------------------------------------------------------------------------------------
# spec.model


#: An absolute path of non-empty segments: no ``//``, no trailing ``/`` (``.`` / ``..`` segments:
#: a CEL rule, RE2 has no look-ahead). No control characters either.
HOST_PATH_PATTERN = r"^(/[^/\x00-\x1f]+)+$"


class SecretKeyRef(_Spec):
    """A key of a Secret in the resource's namespace."""

    name: DnsSubdomain = Field(description="Name of the Secret in the resource's namespace.")
    key: Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")] = (
        Field(description="Key in the Secret whose value is the token.")
    )


class ConfigMapKeyRef(_Spec):
    """A key of a ConfigMap in the resource's namespace."""

    name: DnsSubdomain = Field(description="Name of the ConfigMap in the resource's namespace.")
    key: Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")] = (
        Field(description="Key in the ConfigMap whose value the variable gets.")
    )


class EnvValueSource(_Spec):
    """Where one engine environment variable's value comes from: a Secret key or a ConfigMap key."""

    secret_key_ref: SecretKeyRef | None = Field(
        None, description="A key of a Secret; the value is never written to the engine config or logged."
    )
    config_map_key_ref: ConfigMapKeyRef | None = Field(None, description="A key of a ConfigMap.")


class PvcSource(_Spec):
    """Weights on a PersistentVolumeClaim, mounted into the pod."""

    claim_name: DnsSubdomain = Field(
        description="Name of the PersistentVolumeClaim in the resource's namespace."
    )
    sub_path: Annotated[str, StringConstraints(max_length=1024, pattern=r"^[^/].*$")] | None = Field(
        None,
        description="Directory inside the claim holding the weights (relative). Default: the claim's root.",
    )
    read_only: bool = Field(True, description="Mount the claim read-only. Default: true.")


class HostPathSource(_Spec):
    """Weights in a directory on the node (pre-staged by the cluster admin)."""

    path: Annotated[str, StringConstraints(min_length=2, max_length=1024, pattern=HOST_PATH_PATTERN)] = Field(
        description=(
            "Absolute, normalised directory on the node holding the weights (no '.' or '..' segment, "
            "no '//', no trailing '/'); mounted read-only. Allowed only under a prefix the "
            "administrator lists (operator setting HOST_PATH_PREFIXES; default: none)."
        )
    )


#: A repository id on Hugging Face or ModelScope: ``org/name`` (or a legacy org-less ``name``).
HubRepoId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9][-._A-Za-z0-9]*(/[-._A-Za-z0-9]+)?$"),
]


class HubSource(_Spec):
    """A model downloaded from a hub at start-up into the pod's model cache."""

    id: HubRepoId = Field(description="Repository id on the hub, for example Qwen/Qwen2.5-72B-Instruct.")


class CacheAccessMode(str, enum.Enum):
    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_WRITE_ONCE_POD = "ReadWriteOncePod"


class CacheClaimSpec(_Spec):
    """A PersistentVolumeClaim the operator creates for the model cache, named ``<name>-model-cache``."""

    size: Annotated[str, StringConstraints(max_length=64, pattern=QUANTITY_PATTERN)] = Field(
        description="Storage to request, for example 200Gi: the weights plus the compile caches."
    )
    storage_class_name: DnsSubdomain | None = Field(
        None, description="StorageClass of the claim. Default: the cluster's default class."
    )
    access_mode: CacheAccessMode = Field(
        CacheAccessMode.READ_WRITE_MANY,
        description=(
            "ReadWriteMany (default) lets every replica on every node mount the cache; with "
            "ReadWriteOnce all pods that mount it must run on one node."
        ),
    )
    delete_with_resource: bool = Field(
        False,
        description=(
            "Delete the claim (and the cached weights) with the resource. Default: false, the claim "
            "is kept for the next resource or rollout and must be deleted by hand."
        ),
    )


class ModelCacheSpec(_Spec):
    """Where hub weights and compile caches live between pods: exactly one of create, claimName
    and hostPath. Hub weights are downloaded once per model and revision by a Job; serving pods
    start only after the download is complete and mount the weights read-only."""

    create: CacheClaimSpec | None = Field(None, description="A claim the operator creates and keeps.")
    claim_name: DnsSubdomain | None = Field(
        None, description="An existing PersistentVolumeClaim in the namespace (another resource's cache, say)."
    )
    host_path: Annotated[str, StringConstraints(min_length=2, max_length=1024, pattern=HOST_PATH_PATTERN)] | None = (
        Field(
            None,
            description=(
                "A directory on each node, for clusters without ReadWriteMany storage: every node "
                "downloads once (an init container of the serving pods). Allowed only under a prefix the "
                "administrator lists (operator setting HOST_PATH_PREFIXES)."
            ),
        )
    )
    compile_cache: bool = Field(
        True,
        description=(
            "Keep vLLM's and TorchAir's compile caches on the cache volume, keyed by image, model, "
            "revision, versions, graph mode and graph flags, so restarts and new pods skip compilation."
        ),
    )

    def kind(self) -> str:
        """``create``, ``claimName`` or ``hostPath``: the one that is set."""
        return "create" if self.create is not None else "claimName" if self.claim_name is not None else "hostPath"


#: A branch, tag or commit as the hubs name them (and the model cache can lay out on disk).
REVISION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"
Revision = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=REVISION_PATTERN)]
#: The revision rule CEL adds to the pattern (RE2 has no look-ahead for "no '..'").
REVISION_RULE = SpecRule(
    cel="!has(self.revision) || !self.revision.contains('..')",
    message="revision must not contain '..'; name a branch, tag or commit",
    field_path=".revision",
    holds=lambda source: source.revision is None or ".." not in source.revision,
)


class ModelSpec(_Spec):
    """The model to serve: exactly one source, plus how it is served."""

    pvc: PvcSource | None = Field(None, description="Weights on a PersistentVolumeClaim.")
    host_path: HostPathSource | None = Field(None, description="Weights in a directory on the node.")
    hugging_face: HubSource | None = Field(None, description="Download from Hugging Face by repository id.")
    model_scope: HubSource | None = Field(
        None, description="Download from ModelScope by repository id (sets VLLM_USE_MODELSCOPE=true)."
    )
    revision: Revision | None = Field(
        None,
        description=(
            "Model revision (branch, tag or commit) for hub sources: letters, digits, '.', '_', '-' and '/', "
            "starting with a letter or digit, no '..'. Default: the hub's default branch."
        ),
    )
    served_name: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = Field(
        None, description="Name clients use in the OpenAI API. Default: the hub id or the resource name."
    )
    token_secret_ref: SecretKeyRef | None = Field(
        None,
        description=(
            "Secret key holding the hub token (HF_TOKEN or MODELSCOPE_API_TOKEN). A reference only: "
            "the token never appears in the resource or the engine config."
        ),
    )
    trust_remote_code: bool = Field(
        False, description="Pass --trust-remote-code to the engine. Default: false."
    )
    cache: ModelCacheSpec | None = Field(
        None,
        description=(
            "Keep the weights (hub sources) and the compile caches on a volume that outlives pods. "
            "Default: hub weights go to an emptyDir per pod and are downloaded by every pod."
        ),
    )
    size_gi_b: Annotated[float, Field(gt=0, le=4096)] | None = Field(
        None,
        alias="sizeGiB",
        description=(
            "Approximate size of the weights in GiB; sizes the start-up probe budget. "
            "Default: the operator's assumption (64 GiB)."
        ),
    )

    def sources(self) -> list[str]:
        """The camelCase names of the sources that are set."""
        return [
            alias
            for alias, value in (
                ("pvc", self.pvc),
                ("hostPath", self.host_path),
                ("huggingFace", self.hugging_face),
                ("modelScope", self.model_scope),
            )
            if value is not None
        ]


# --------------------------------------------------------------------------------------------
# spec.npu


class Toleration(_Spec):
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


class NpuSpec(_Spec):
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


class ParallelismSpec(_Spec):
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


class EngineSpec(_Spec):
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


class AscendOptionsSpec(_Spec):
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


class GraphSpec(_Spec):
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


class WarmupSpec(_Spec):
    """Requests the runtime sends before the pod turns Ready, so first users do not pay compile time."""

    enabled: bool = Field(True, description="Warm up before Ready. Default: true.")
    prompt_lengths: list[Annotated[int, Field(ge=1, le=4194304)]] | None = Field(
        None,
        min_length=1,
        max_length=32,
        description=f"Prompt lengths in tokens, clipped to the model length. Default: {_WARMUP_DEFAULTS.prompt_lengths}.",
    )
    concurrency: list[Annotated[int, Field(ge=1, le=65536)]] | None = Field(
        None,
        min_length=1,
        max_length=16,
        description=f"Concurrency levels, clipped to maxNumSeqs. Default: {_WARMUP_DEFAULTS.concurrency}.",
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


class LeakLimitsSpec(_Spec):
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


class HealthSpec(_Spec):
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


class ResourceList(_Spec):
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


class ResourcesSpec(_Spec):
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


class ServiceSpec(_Spec):
    """The Service in front of the replicas."""

    port: int = Field(
        DEFAULT_SERVICE_PORT, ge=1, le=65535, description="Service port of the OpenAI API. Default: 8000."
    )
    type: ServiceType = Field(
        ServiceType.CLUSTER_IP, description="ClusterIP, NodePort or LoadBalancer. Default: ClusterIP."
    )


class RolloutSpec(_Spec):
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


class HcclSpec(_Spec):
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


class DistributedSpec(_Spec):
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


# --------------------------------------------------------------------------------------------
# spec.autoscaling


class ScalingRulesSpec(_Spec):
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


class ScaleToZeroSpec(_Spec):
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


class AutoscalingSpec(_Spec):
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
            f"(or x {VLLM_DEFAULT_MAX_NUM_SEQS}) running, {DEFAULT_TARGET_KV_CACHE:g} KV cache; "
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


class GatewayRef(_Spec):
    """The Gateway (gateway.networking.k8s.io/v1) the HTTPRoute attaches to."""

    name: DnsSubdomain = Field(description="Name of the Gateway.")
    namespace: DnsLabel | None = Field(
        None, description="Namespace of the Gateway. Default: the resource's namespace."
    )
    section_name: DnsSubdomain | None = Field(
        None, description="A listener of the Gateway (its sectionName). Default: every listener that allows the route."
    )


class RoutingSpec(_Spec):
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

#: A relative directory inside a volume: no leading '/', no empty segment, no control characters
#: ('.' and '..' segments: a CEL rule, RE2 has no look-ahead).
RELATIVE_DIR_PATTERN = r"^[^/\x00-\x1f]+(/[^/\x00-\x1f]+)*$"
RelativeDir = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=RELATIVE_DIR_PATTERN)]
#: The most adapters one resource lists (each a load on every replica; CEL cost stays bounded).
MAX_ADAPTERS = 128


class AdapterPvcSource(_Spec):
    """A LoRA adapter on a PersistentVolumeClaim: the claim is mounted read-only once, however
    many adapters it holds."""

    claim_name: DnsSubdomain = Field(description="Name of the PersistentVolumeClaim in the resource's namespace.")
    sub_path: RelativeDir | None = Field(
        None, description="The adapter's directory inside the claim (relative). Default: the claim's root."
    )


class AdapterHostPathSource(_Spec):
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


class AdapterHubSource(_Spec):
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


class AdapterSource(_Spec):
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


class LoraAdapterSpec(_Spec):
    """One LoRA adapter, served next to the base model under its own model name."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=ADAPTER_NAME_PATTERN)] = Field(
        description=(
            "The model name clients send for this adapter: 1-128 letters, digits and . _ - /, starting and "
            "ending with a letter or digit; unique, and not the base model's served name."
        )
    )
    source: AdapterSource = Field(description="Where the adapter's files are.")


class LoraSpec(_Spec):
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


# --------------------------------------------------------------------------------------------
# spec


class AscendLLMDeploymentSpec(_Spec):
    """Desired state: one model served by ``replicas`` single-node engine replicas."""

    model: ModelSpec = Field(description="The model to serve and where its weights come from.")
    image: Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^\S+$")] | None = Field(
        None,
        description=(
            "Runtime image (ascend-llm runtime on vllm-ascend). Default by chip from the operator "
            "settings: the A2 image, its -a3 or -310p variant, or the CPU image."
        ),
    )
    replicas: int = Field(
        DEFAULT_REPLICAS,
        ge=0,
        le=1024,
        description=(
            "Number of engine replicas (groups of nodesPerReplica pods). With autoscaling enabled "
            "the autoscaler writes it through the scale subresource. Default: 1 (set by the API "
            "server, so the scale subresource, HPAs and KEDA always read a number)."
        ),
        # The scale subresource reads the stored object: without a stored value an HPA sees no
        # replicas (scaling disabled) and KEDA sees 0 while the operator runs one.
        json_schema_extra={"x-ascend-server-default": DEFAULT_REPLICAS},
    )
    nodes_per_replica: int = Field(
        DEFAULT_NODES_PER_REPLICA,
        ge=1,
        le=16,
        description=(
            "Nodes (pods) per replica; above 1 the replicas are a LeaderWorkerSet (install LWS). "
            "Default: 1."
        ),
    )
    distributed: DistributedSpec = Field(
        default_factory=DistributedSpec,
        description="Multi-node backend and HCCL settings (used when nodesPerReplica > 1).",
    )
    autoscaling: AutoscalingSpec | None = Field(
        None, description="Autoscaling on engine load. Default: off (spec.replicas is fixed)."
    )
    platform: Platform = Field(
        Platform.ASCEND, description="Ascend (default) or CPU (local demo and tests; no NPU wiring)."
    )
    npu: NpuSpec = Field(default_factory=NpuSpec, description="NPU placement and scheduling.")
    parallelism: ParallelismSpec = Field(
        default_factory=ParallelismSpec, description="Parallelism inside a replica."
    )
    engine: EngineSpec = Field(default_factory=EngineSpec, description="Engine options.")
    ascend: AscendOptionsSpec | None = Field(
        None, description="vllm-ascend specific options (Ascend platform only)."
    )
    graph: GraphSpec = Field(default_factory=GraphSpec, description="Graph capture policy and fallback.")
    warmup: WarmupSpec = Field(default_factory=WarmupSpec, description="Warmup before the pod turns Ready.")
    health: HealthSpec = Field(default_factory=HealthSpec, description="Leak and hang detection.")
    resources: ResourcesSpec | None = Field(
        None, description="CPU, memory and storage of the engine container."
    )
    service: ServiceSpec = Field(
        default_factory=ServiceSpec, description="The Service in front of the replicas."
    )
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="How pods are replaced on change.")
    lora: LoraSpec | None = Field(
        None, description="LoRA adapters served with the base model. Default: none (LoRA off)."
    )
    routing: RoutingSpec | None = Field(
        None,
        description=(
            "Prefix-aware routing across the replicas (Gateway API Inference Extension). Default: off."
        ),
    )


# --------------------------------------------------------------------------------------------
# The rules. CEL sees the raw object (no defaults), so it spells out each default.


def _cel_or(path: str, default: str) -> str:
    """CEL for ``self.<path>`` or ``default`` when any step is absent."""
    parts = path.split(".")
    checks = " && ".join(f"has(self.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))
    return f"({checks} ? self.{path} : {default})"


_CHIP = _cel_or("npu.chip", f"'{DEFAULT_CHIP.value}'")
_PER_REPLICA = _cel_or("npu.perReplica", str(DEFAULT_NPUS_PER_REPLICA))
_TP = _cel_or("parallelism.tensor", "1")
_PP = _cel_or("parallelism.pipeline", "1")
_DP = _cel_or("parallelism.data", "1")
_IS_CPU = "(has(self.platform) && self.platform == 'CPU')"
_NODES = _cel_or("nodesPerReplica", str(DEFAULT_NODES_PER_REPLICA))
_BACKEND = _cel_or("distributed.backend", f"'{DistributedBackend.MP.value}'")
# On spec.autoscaling (self is the autoscaling object).
_MIN = f"(has(self.minReplicas) ? self.minReplicas : {DEFAULT_MIN_REPLICAS})"
_STZ = "(has(self.scaleToZero) && has(self.scaleToZero.enabled) && self.scaleToZero.enabled)"
_CUSTOM = "(has(self.signal) && self.signal == 'custom')"
_HPA = "(has(self.provider) && self.provider == 'hpa')"


#: The base model's served name as far as the spec says it (the resource name, the last default,
#: is not visible to CEL: the operator checks that case when it reconciles).
_SERVED = (
    "(has(self.model.servedName) ? self.model.servedName : has(self.model.huggingFace) ? "
    "self.model.huggingFace.id : has(self.model.modelScope) ? self.model.modelScope.id : '')"
)


def _served_name(spec: AscendLLMDeploymentSpec) -> str:
    """:data:`_SERVED` in Python: ``display_model`` without the resource name."""
    return display_model(spec, "")


def _relative_dir_rule() -> SpecRule:
    return SpecRule(
        cel="!has(self.subPath) || !self.subPath.matches('(^|/)\\\\.\\\\.?(/|$)')",
        message="subPath must stay inside the volume: no '.' or '..' segment; write the directory, for example adapters/sql",
        field_path=".subPath",
        holds=lambda source: source.sub_path is None or re.search(r"(^|/)\.\.?(/|$)", source.sub_path) is None,
    )


def _npus(spec: AscendLLMDeploymentSpec) -> int:
    p = spec.parallelism
    return p.tensor * p.pipeline * p.data


def _flag_rule(flag: ReservedFlag) -> SpecRule:
    shown = " / ".join(flag.names)
    return SpecRule(
        cel=f"!has(self.extraArgs) || self.extraArgs.all(a, !a.matches('{_cel_quote(flag.regex)}'))",
        message=f"engine.extraArgs must not set {shown}: {flag.hint}",
        field_path=".extraArgs",
        holds=lambda e: not any(flag.matches(token) for token in e.extra_args),
    )


def _env_rule(var: ReservedEnv) -> SpecRule:
    if var.prefix:
        def test(field: str) -> str:
            return f"!has(self.{field}) || self.{field}.all(k, !k.startsWith('{var.name}'))"
    else:
        def test(field: str) -> str:
            return f"!has(self.{field}) || !('{var.name}' in self.{field})"
    return SpecRule(
        cel=f"({test('env')}) && ({test('envValueFrom')})",
        message=f"engine.env and engine.envValueFrom must not set {var.shown}: {var.hint}",
        field_path=".env",
        holds=lambda e: not any(var.matches(key) for key in (*e.env, *e.env_value_from)),
    )


def _cel_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


SPEC_RULES.update(
    {
        Toleration: (
            SpecRule(
                cel="!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
                message="a toleration with operator Exists matches any value; remove value",
                field_path=".value",
                holds=lambda t: t.operator != "Exists" or not t.value,
            ),
            SpecRule(
                cel="(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
                message="a toleration without key must use operator Exists (it then tolerates every taint)",
                field_path=".key",
                holds=lambda t: bool(t.key) or t.operator == "Exists",
            ),
            SpecRule(
                cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                message="tolerationSeconds only applies to effect NoExecute; set effect NoExecute or remove it",
                field_path=".tolerationSeconds",
                holds=lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
            ),
        ),
        HostPathSource: (
            SpecRule(
                cel="!self.path.matches('/\\\\.\\\\.?(/|$)')",
                message=(
                    "hostPath.path must be normalised: no '.' or '..' segment; write the directory "
                    "itself, for example /data/models/qwen"
                ),
                field_path=".path",
                holds=lambda h: re.search(r"/\.\.?(/|$)", h.path) is None,
            ),
        ),
        EnvValueSource: (
            SpecRule(
                cel="(has(self.secretKeyRef) ? 1 : 0) + (has(self.configMapKeyRef) ? 1 : 0) == 1",
                message="set exactly one of secretKeyRef and configMapKeyRef",
                field_path="",
                holds=lambda v: (v.secret_key_ref is None) != (v.config_map_key_ref is None),
            ),
        ),
        EngineSpec: (
            SpecRule(
                cel="!has(self.env) || !has(self.envValueFrom) || self.envValueFrom.all(k, !(k in self.env))",
                message="a variable is set in both engine.env and engine.envValueFrom; keep one",
                field_path=".envValueFrom",
                holds=lambda e: not set(e.env) & set(e.env_value_from),
            ),
            *(_flag_rule(flag) for flag in RESERVED_FLAGS),
            *(_env_rule(var) for var in RESERVED_ENV),
        ),
        ModelCacheSpec: (
            SpecRule(
                cel="(has(self.create) ? 1 : 0) + (has(self.claimName) ? 1 : 0) + (has(self.hostPath) ? 1 : 0) == 1",
                message="set exactly one of create, claimName and hostPath",
                field_path="",
                holds=lambda c: sum(v is not None for v in (c.create, c.claim_name, c.host_path)) == 1,
            ),
        ),
        ModelSpec: (
            SpecRule(
                cel="(has(self.pvc) ? 1 : 0) + (has(self.hostPath) ? 1 : 0) + (has(self.huggingFace) ? 1 : 0)"
                " + (has(self.modelScope) ? 1 : 0) == 1",
                message="set exactly one model source: pvc, hostPath, huggingFace or modelScope",
                field_path="",
                holds=lambda m: len(m.sources()) == 1,
            ),
            REVISION_RULE,
            SpecRule(
                cel="!has(self.tokenSecretRef) || has(self.huggingFace) || has(self.modelScope)",
                message="tokenSecretRef is only used with huggingFace or modelScope sources; remove it",
                field_path=".tokenSecretRef",
                holds=lambda m: (
                    m.token_secret_ref is None or m.hugging_face is not None or m.model_scope is not None
                ),
            ),
        ),
        GraphSpec: (
            SpecRule(
                cel="!has(self.captureSizes) || !has(self.maxCaptureSize) || self.captureSizes.all(s, s <= self.maxCaptureSize)",
                message="every captureSizes entry must be at most maxCaptureSize; raise maxCaptureSize or drop the larger sizes",
                field_path=".captureSizes",
                holds=lambda g: (
                    g.capture_sizes is None
                    or g.max_capture_size is None
                    or all(size <= g.max_capture_size for size in g.capture_sizes)
                ),
            ),
            SpecRule(
                cel="!has(self.policy) || self.policy != 'eager' || (!has(self.captureSizes) && !has(self.maxCaptureSize))",
                message="policy eager captures no graphs; remove captureSizes and maxCaptureSize or choose another policy",
                field_path=".policy",
                holds=lambda g: (
                    g.policy != GraphPolicy.EAGER or (g.capture_sizes is None and g.max_capture_size is None)
                ),
            ),
        ),
        AutoscalingSpec: (
            SpecRule(
                cel=f"{_MIN} <= self.maxReplicas",
                message="minReplicas must be at most maxReplicas; lower minReplicas or raise maxReplicas",
                field_path=".minReplicas",
                holds=lambda a: a.min_replicas <= a.max_replicas,
            ),
            SpecRule(
                cel=f"{_MIN} > 0 || {_STZ}",
                message=(
                    "minReplicas 0 is scale-to-zero; set scaleToZero.enabled true (needs KEDA) "
                    "or set minReplicas to 1 or more"
                ),
                field_path=".minReplicas",
                holds=lambda a: a.min_replicas > 0 or a.scale_to_zero.enabled,
            ),
            SpecRule(
                cel=f"!{_STZ} || !{_HPA}",
                message=(
                    "scaleToZero needs KEDA (an HPA never scales to 0 replicas); set provider keda "
                    "or auto, or turn scaleToZero off"
                ),
                field_path=".provider",
                holds=lambda a: not a.scale_to_zero.enabled or a.provider != AutoscalerProvider.HPA,
            ),
            SpecRule(
                cel=f"!{_CUSTOM} || has(self.query)",
                message="signal custom needs query (the PromQL whose value per replica is held at target); set query",
                field_path=".query",
                holds=lambda a: a.signal != AutoscalingSignal.CUSTOM or a.query is not None,
            ),
            SpecRule(
                cel=f"!has(self.query) || {_CUSTOM}",
                message="query is used only with signal custom; remove query or set signal custom",
                field_path=".query",
                holds=lambda a: a.query is None or a.signal == AutoscalingSignal.CUSTOM,
            ),
            SpecRule(
                cel=f"!{_CUSTOM} || has(self.target)",
                message="signal custom has no default target; set target (the query's value per replica)",
                field_path=".target",
                holds=lambda a: a.signal != AutoscalingSignal.CUSTOM or a.target is not None,
            ),
            SpecRule(
                cel=f"!{_CUSTOM} || !{_HPA}",
                message=(
                    "signal custom is a PromQL query, which only KEDA evaluates; set provider keda "
                    "or auto, or choose a built-in signal"
                ),
                field_path=".provider",
                holds=lambda a: a.signal != AutoscalingSignal.CUSTOM or a.provider != AutoscalerProvider.HPA,
            ),
            SpecRule(
                cel="!has(self.target) || !has(self.signal) || self.signal != 'kvCacheUsage' "
                "|| self.target <= 1.0",
                message="signal kvCacheUsage is a fraction of the KV cache; set target in (0, 1], for example 0.8",
                field_path=".target",
                holds=lambda a: a.target is None or a.signal != AutoscalingSignal.KV_CACHE or a.target <= 1.0,
            ),
        ),
        ScaleToZeroSpec: (
            SpecRule(
                cel="!has(self.enabled) || !self.enabled || has(self.activationQuery)",
                message=(
                    "scale-to-zero needs activationQuery: PromQL that rises while clients want the "
                    "model and no replica runs (for example your gateway's request rate to this "
                    "Service); without it nothing would wake the model; set activationQuery"
                ),
                field_path=".activationQuery",
                holds=lambda z: not z.enabled or z.activation_query is not None,
            ),
        ),
        AdapterPvcSource: (_relative_dir_rule(),),
        AdapterHostPathSource: (
            SpecRule(
                cel="!self.path.matches('/\\\\.\\\\.?(/|$)')",
                message=(
                    "hostPath.path must be normalised: no '.' or '..' segment; write the directory "
                    "itself, for example /data/adapters"
                ),
                field_path=".path",
                holds=lambda h: re.search(r"/\.\.?(/|$)", h.path) is None,
            ),
            _relative_dir_rule(),
        ),
        AdapterHubSource: (REVISION_RULE,),
        AdapterSource: (
            SpecRule(
                cel="(has(self.pvc) ? 1 : 0) + (has(self.hostPath) ? 1 : 0) + (has(self.huggingFace) ? 1 : 0)"
                " + (has(self.modelScope) ? 1 : 0) == 1",
                message="set exactly one adapter source: pvc, hostPath, huggingFace or modelScope",
                field_path="",
                holds=lambda a: sum(
                    v is not None for v in (a.pvc, a.host_path, a.hugging_face, a.model_scope)) == 1,
            ),
        ),
        LoraSpec: (
            SpecRule(
                cel=f"!has(self.maxRank) || self.maxRank in [{', '.join(map(str, LORA_RANKS))}]",
                message=f"maxRank must be a rank vLLM accepts: one of {', '.join(map(str, LORA_RANKS))}",
                field_path=".maxRank",
                holds=lambda lora: lora.max_rank in LORA_RANKS,
            ),
            SpecRule(
                cel="!has(self.maxCpuLoras) || self.maxCpuLoras >= (has(self.maxLoras) ? self.maxLoras : 1)",
                message="maxCpuLoras must be at least maxLoras (vLLM refuses a smaller value); raise maxCpuLoras "
                "or lower maxLoras",
                field_path=".maxCpuLoras",
                holds=lambda lora: lora.max_cpu_loras is None or lora.max_cpu_loras >= lora.max_loras,
            ),
            SpecRule(
                cel="!has(self.enabled) || self.enabled || !has(self.adapters) || size(self.adapters) == 0",
                message="adapters are served only with LoRA enabled; set enabled true or remove the adapters",
                field_path=".adapters",
                holds=lambda lora: lora.enabled or not lora.adapters,
            ),
            SpecRule(
                cel="!has(self.adapters) || self.adapters.all(a, self.adapters.exists_one(b, b.name == a.name))",
                message="adapter names must be unique (clients select an adapter by its name); rename one of them",
                field_path=".adapters",
                holds=lambda lora: len({a.name for a in lora.adapters}) == len(lora.adapters),
            ),
        ),
        AscendLLMDeploymentSpec: (
            SpecRule(
                cel=f"{_IS_CPU} || {_TP} * {_PP} * {_DP} == {_NODES} * {_PER_REPLICA}",
                message=(
                    "parallelism tensor x pipeline x data must equal nodesPerReplica x npu.perReplica "
                    "(each replica uses exactly its NPUs; perReplica counts the NPUs of one node); "
                    "change parallelism, npu.perReplica or nodesPerReplica"
                ),
                field_path=".npu.perReplica",
                holds=lambda s: s.platform == Platform.CPU
                or _npus(s) == s.nodes_per_replica * s.npu.per_replica,
            ),
            SpecRule(
                cel=f"!{_IS_CPU} || {_NODES} == 1",
                message="platform CPU runs single-node replicas; set nodesPerReplica to 1 (or leave it out)",
                field_path=".nodesPerReplica",
                holds=lambda s: s.platform != Platform.CPU or s.nodes_per_replica == 1,
            ),
            SpecRule(
                cel=f"{_NODES} == 1 || {_BACKEND} != 'mp' || {_DP} % {_NODES} == 0",
                message=(
                    "distributed.backend mp places whole data-parallel ranks on each node, so "
                    "parallelism.data must be a multiple of nodesPerReplica; raise parallelism.data "
                    "(and lower tensor) or set distributed.backend ray"
                ),
                field_path=".parallelism.data",
                holds=lambda s: s.nodes_per_replica == 1
                or s.distributed.backend != DistributedBackend.MP
                or s.parallelism.data % s.nodes_per_replica == 0,
            ),
            SpecRule(
                cel=f"{_NODES} == 1 || {_BACKEND} != 'ray' || {_DP} == 1",
                message=(
                    "distributed.backend ray spreads tensor and pipeline parallel across the nodes; "
                    "set parallelism.data to 1, or use distributed.backend mp for data parallel"
                ),
                field_path=".parallelism.data",
                holds=lambda s: s.nodes_per_replica == 1
                or s.distributed.backend != DistributedBackend.RAY
                or s.parallelism.data == 1,
            ),
            SpecRule(
                cel=f"{_IS_CPU} || {_CHIP} != 'A3' || {_PER_REPLICA} >= 2",
                message="chip A3 needs at least 2 NPUs per replica (one card has two dies); set npu.perReplica >= 2",
                field_path=".npu.perReplica",
                holds=lambda s: s.platform == Platform.CPU or s.npu.chip != Chip.A3 or s.npu.per_replica >= 2,
            ),
            SpecRule(
                cel=f"{_IS_CPU} || {_CHIP} != '310P' || !has(self.engine) || !has(self.engine.dtype) "
                "|| self.engine.dtype != 'bfloat16'",
                message="chip 310P has no bfloat16; set engine.dtype to float16 (or leave it out)",
                field_path=".engine.dtype",
                holds=lambda s: (
                    s.platform == Platform.CPU or s.npu.chip != Chip.P310 or s.engine.dtype != Dtype.BFLOAT16
                ),
            ),
            SpecRule(
                cel=f"!{_IS_CPU} || !has(self.npu) || (!has(self.npu.chip) && !has(self.npu.resourceName) "
                "&& !has(self.npu.perReplica))",
                message=(
                    "platform CPU uses no NPUs; remove npu.chip, npu.resourceName and npu.perReplica "
                    "(placement fields such as npu.nodeSelector still apply)"
                ),
                field_path=".npu",
                holds=lambda s: (
                    s.platform != Platform.CPU
                    or not ({"chip", "resource_name", "per_replica"} & s.npu.model_fields_set)
                ),
            ),
            SpecRule(
                cel=f"!{_IS_CPU} || !has(self.ascend)",
                message="ascend options apply to the Ascend platform only; remove spec.ascend or use platform Ascend",
                field_path=".ascend",
                holds=lambda s: s.platform != Platform.CPU or s.ascend is None,
            ),
            SpecRule(
                cel=f"!{_IS_CPU} || {_TP} * {_PP} * {_DP} == 1",
                message="platform CPU runs one engine process per replica; set tensor, pipeline and data parallel to 1",
                field_path=".parallelism",
                holds=lambda s: s.platform != Platform.CPU or _npus(s) == 1,
            ),
            SpecRule(
                cel=f"{_IS_CPU} || !has(self.engine) || !has(self.engine.kvCacheSpaceGiB)",
                message="engine.kvCacheSpaceGiB applies to platform CPU only; on NPUs size the cache with engine.gpuMemoryUtilization",
                field_path=".engine.kvCacheSpaceGiB",
                holds=lambda s: s.platform == Platform.CPU or s.engine.kv_cache_space_gi_b is None,
            ),
            SpecRule(
                cel=f"!has(self.parallelism) || !has(self.parallelism.expert) || !self.parallelism.expert "
                f"|| {_TP} * {_DP} > 1",
                message="expert parallel spreads experts over tensor x data NPUs; set parallelism.tensor or data above 1",
                field_path=".parallelism.expert",
                holds=lambda s: not s.parallelism.expert or s.parallelism.tensor * s.parallelism.data > 1,
            ),
            SpecRule(
                cel=f"!has(self.lora) || !has(self.lora.adapters) || self.lora.adapters.all(a, a.name != {_SERVED})",
                message=(
                    "an adapter is named like the base model (model.servedName, else the hub id); clients could "
                    "not select the base model; rename the adapter"
                ),
                field_path=".lora.adapters",
                holds=lambda s: s.lora is None or _served_name(s) not in {a.name for a in s.lora.adapters},
            ),
            SpecRule(
                cel="!has(self.lora) || !has(self.lora.adapters) || !self.lora.adapters.exists(a, "
                "has(a.source.huggingFace) || has(a.source.modelScope)) || (has(self.model.cache) "
                "&& !has(self.model.cache.hostPath))",
                message=(
                    "an adapter with source.huggingFace or source.modelScope is downloaded into the model cache "
                    "by a Job; set spec.model.cache.create or spec.model.cache.claimName (a hostPath cache has no "
                    "Job to fill it), or put the adapter on a pvc"
                ),
                field_path=".lora.adapters",
                holds=lambda s: s.lora is None or not any(a.source.hub() for a in s.lora.adapters) or (
                    s.model.cache is not None and s.model.cache.host_path is None),
            ),
        ),
    }
)


# --------------------------------------------------------------------------------------------
# Parsing with field-naming errors.


class SpecError(ValueError):
    """An invalid spec; ``problems`` holds ``(path, message)`` pairs, paths like ``spec.npu.chip``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("invalid spec: " + "; ".join(f"{path}: {msg}" for path, msg in problems))


def _path(loc: tuple[int | str, ...]) -> str:
    out = "spec"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def spec_problems(error: ValidationError) -> list[tuple[str, str]]:
    """Turn a pydantic error into ``(spec.dotted.camelCase.path, message)`` pairs."""
    problems: list[tuple[str, str]] = []
    for item in error.errors():
        loc = tuple(item["loc"])
        ctx = item.get("ctx") or {}
        if item["type"] == "spec_rule":
            for rule in ctx["rules"]:
                problems.append((_path(loc) + rule["field"], rule["message"]))
        elif item["type"] == "extra_forbidden":
            problems.append(
                (_path(loc), "unknown field; remove it (check the spelling against `kubectl explain`)")
            )
        elif item["type"] == "missing":
            problems.append((_path(loc), "required field is missing; set it"))
        else:
            problems.append((_path(loc), item["msg"]))
    return problems


def parse_spec(spec: Mapping[str, Any]) -> AscendLLMDeploymentSpec:
    """Validate a resource's ``spec`` (camelCase mapping); raise :class:`SpecError` naming each field."""
    if not isinstance(spec, Mapping):
        raise SpecError([("spec", f"expected a mapping, got {type(spec).__name__}")])
    try:
        return AscendLLMDeploymentSpec.model_validate(dict(spec), by_alias=True, by_name=False)
    except ValidationError as error:
        raise SpecError(spec_problems(error)) from None


def display_model(spec: AscendLLMDeploymentSpec, name: str) -> str:
    """What the ``Model`` printer column shows: the served name, else the hub id, else ``name``."""
    model = spec.model
    if model.served_name:
        return model.served_name
    hub = model.hugging_face or model.model_scope
    return hub.id if hub is not None else name


def display_chip(spec: AscendLLMDeploymentSpec) -> str:
    """What the ``Chip`` printer column shows: the chip preset, or ``CPU``."""
    return "CPU" if spec.platform == Platform.CPU else spec.npu.chip.value


# --------------------------------------------------------------------------------------------
# Status (computed by ascend_operator.status; declared in the CRD so the server keeps it).


class _Status(BaseModel):
    """Status models: camelCase, strict, no cross-field rules."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class Phase(str, enum.Enum):
    """The resource's phase, aggregated from its pods' runtime phases."""

    PENDING = "Pending"
    DOWNLOADING = "Downloading"
    WAITING_FOR_NPU = "WaitingForNPU"
    LOADING = "Loading"
    CAPTURING_GRAPHS = "CapturingGraphs"
    WARMING_UP = "WarmingUp"
    READY = "Ready"
    SCALING = "Scaling"
    DEGRADED = "Degraded"
    FAILED = "Failed"
    STOPPED = "Stopped"


class ConditionStatus(str, enum.Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Status):
    """A condition (Ready, Progressing, Degraded, WaitingForNPU, Autoscaling, GraphModeFallback, ...)."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=316)] = Field(
        description="Condition type."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: Annotated[str, StringConstraints(max_length=1024)] = Field(
        "", description="CamelCase reason for the last transition."
    )
    message: Annotated[str, StringConstraints(max_length=32768)] = Field(
        "", description="Human-readable details."
    )
    last_transition_time: str = Field(
        description="When the status last changed (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The generation this condition was computed for."
    )


class ReplicaGraphStatus(_Status):
    """What one pod's runtime reports."""

    pod: str = Field(description="Pod name.")
    phase: str | None = Field(
        None, description="The runtime's phase (Loading, Ready, ...); absent when unreadable."
    )
    mode: GraphMode | None = Field(None, description="Graph mode the engine actually runs.")
    ready: bool = Field(False, description="Whether the runtime reports ready.")
    fallbacks: int = Field(0, ge=0, description="Fallbacks this pod's runtime took.")
    fallback_reason: str | None = Field(None, description="Why the last fallback happened.")
    image: str | None = Field(None, description="Image the pod runs.")


class GraphStatus(_Status):
    """Graph modes actually running, and the mode remembered for the next start."""

    mode: str | None = Field(
        None, description="The mode all replicas run, or Mixed; absent before any reports."
    )
    replicas: list[ReplicaGraphStatus] = Field(
        default_factory=list, max_length=1024, description="Per-pod runtime reports."
    )
    remembered_mode: GraphMode | None = Field(
        None,
        description=(
            "A mode a pod fell back to after a deterministic graph capture or replay failure; new pods "
            "start there while rememberedFor and the engine versions match."
        ),
    )
    remembered_for: str | None = Field(
        None,
        description=(
            "Short hash of image, model source, revision, parallelism and the "
            "llm.ascend.dev/retry-graph-mode annotation the mode was seen with."
        ),
    )
    remembered_reason: str | None = Field(
        None, description="Why the mode is remembered: the pod and the failure that made it fall back."
    )
    remembered_versions: str | None = Field(
        None, description="The engine versions the failure was seen with; other versions try the top again."
    )
    fallbacks: int = Field(0, ge=0, description="Fallbacks summed over the current pods.")


class WarmupStatus(_Status):
    """Warmup outcomes over the current pods."""

    succeeded: int = Field(0, ge=0, description="Pods whose warmup succeeded (or was skipped).")
    failed: int = Field(0, ge=0, description="Pods whose warmup failed.")
    pending: int = Field(0, ge=0, description="Pods still warming up or not yet started.")
    last_seconds: float | None = Field(None, ge=0, description="Duration of the latest finished warmup.")
    warnings: list[str] = Field(
        default_factory=list, max_length=16,
        description="What the pods' warmups skipped and why, one entry per distinct warning (e.g. no chat template).",
    )


class NodeBehind(_Status):
    """One node (pod) of a multi-node replica that is not ready, or not there yet."""

    pod: str | None = Field(None, description="Pod name; absent when the pod does not exist yet.")
    worker_index: int = Field(ge=0, description="LeaderWorkerSet worker index (0 is the leader).")
    phase: str = Field(description="The pod's phase (Loading, WaitingForNPU, ...) or Missing.")
    reason: str = Field("", description="Why, from the pod's status or its runtime.")


class GroupBehind(_Status):
    """A multi-node replica (LeaderWorkerSet group) that is not ready, and which nodes hold it up."""

    group: int = Field(ge=0, description="LeaderWorkerSet group index.")
    ready_nodes: int = Field(0, ge=0, description="Pods of the group that are ready.")
    nodes: int = Field(ge=1, description="Pods the group needs (nodesPerReplica).")
    behind: list[NodeBehind] = Field(
        default_factory=list, max_length=64, description="The group's pods that are not ready."
    )


class AutoscalingStatus(_Status):
    """The autoscaler of the resource (present while spec.autoscaling is enabled)."""

    provider: str | None = Field(
        None, description="HorizontalPodAutoscaler or ScaledObject; absent when none could be made."
    )
    name: str | None = Field(None, description="Name of the HorizontalPodAutoscaler or ScaledObject.")
    min_replicas: int = Field(ge=0, description="Lower bound of the replicas.")
    max_replicas: int = Field(ge=1, description="Upper bound of the replicas.")
    spec_replicas: int = Field(ge=0, description="spec.replicas as last seen (the autoscaler writes it).")
    desired_replicas: int | None = Field(
        None, ge=0, description="Replicas the autoscaler last asked for (its HPA's status)."
    )
    current_replicas: int | None = Field(None, ge=0, description="Replicas the autoscaler last saw.")
    last_scale_time: str | None = Field(
        None, description="When the autoscaler last changed the replicas (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )


class ModelCacheStatus(_Status):
    """The model cache (present with spec.model.cache)."""

    claim_name: str | None = Field(None, description="The PersistentVolumeClaim holding the cache.")
    host_path: str | None = Field(None, description="The node directory holding the cache (hostPath caches).")
    retained_on_delete: bool = Field(
        description="Whether the cache outlives the resource (a claim the operator created is kept unless "
        "create.deleteWithResource)."
    )
    source: str | None = Field(None, description="hub:repo@revision of the cached model (hub sources).")
    job: str | None = Field(None, description="The fetch Job of the current model and revision.")
    phase: str | None = Field(None, description="Pending, Downloading, Complete or Failed.")
    reason: str | None = Field(
        None, description="Why the download failed or is retried (Unauthorized, NotFound, DiskFull, Network, ...)."
    )
    message: str | None = Field(None, description="The download's progress or failure, in words.")
    bytes_done: int | None = Field(None, ge=0, description="Bytes on the cache so far (while downloading).")
    bytes_total: int | None = Field(None, ge=0, description="Bytes to download, from the hub's file listing.")


class AdapterDownloadStatus(_Status):
    """The download of a hub adapter into the model cache (its fetch Job)."""

    source: str = Field(description="hub:repo@revision of the adapter.")
    job: str = Field(description="The fetch Job of that repo and revision.")
    phase: str = Field(
        description="Pending, Downloading, Complete or Failed; the adapter is served once Complete."
    )
    reason: str | None = Field(
        None, description="Why the download failed or is retried (Unauthorized, NotFound, DiskFull, Network, ...)."
    )
    message: str | None = Field(None, description="The download's progress or failure, in words.")
    bytes_done: int | None = Field(None, ge=0, description="Bytes on the cache so far (while downloading).")
    bytes_total: int | None = Field(None, ge=0, description="Bytes to download, from the hub's file listing.")


class LoraAdapterStatus(_Status):
    """One adapter of spec.lora.adapters on the replicas."""

    name: str = Field(description="The adapter's name.")
    loaded: int = Field(0, ge=0, description="Replicas whose engine serves the adapter.")
    failed: int = Field(0, ge=0, description="Replicas where its load failed (retried with backoff).")
    last_error: str | None = Field(None, description="The first failing replica and the engine's message.")
    download: AdapterDownloadStatus | None = Field(
        None, description="Hub adapters: the download into the model cache (the adapter is loaded once complete)."
    )


class LoraStatus(_Status):
    """LoRA adapters on the replicas (present while spec.lora is enabled)."""

    replicas: int = Field(0, ge=0, description="Replicas whose runtime reported (the counts are out of these).")
    adapters: list[LoraAdapterStatus] = Field(
        default_factory=list, max_length=MAX_ADAPTERS, description="Per adapter, in spec order."
    )
    file_error: str | None = Field(
        None, description="Why a replica cannot use the adapters file (it keeps the last good set)."
    )


class RoutingParentStatus(_Status):
    """One Gateway's view of the InferencePool (the pool's status.parents entry)."""

    gateway: str = Field(description="The parent Gateway, namespace/name (or name).")
    accepted: str = Field(description="Its Accepted condition: True, False or Unknown.")
    resolved_refs: str = Field(description="Its ResolvedRefs condition: True, False or Unknown.")
    message: str | None = Field(None, description="The messages of its conditions that are not True.")


class RoutingStatus(_Status):
    """spec.routing: what was made and what the gateways say of the pool."""

    pool: str | None = Field(None, description="The InferencePool.")
    endpoint_picker: str | None = Field(None, description="The Endpoint Picker's Deployment and Service.")
    route: str | None = Field(None, description="The HTTPRoute (none without a Gateway).")
    gateway: str | None = Field(None, description="The Gateway the route attaches to, namespace/name.")
    accepted: str = Field("Unknown", description="True when every parent accepted the pool, False when one refused it.")
    resolved_refs: str = Field("Unknown", description="True when every parent resolved the pool's references.")
    parents: list[RoutingParentStatus] = Field(default_factory=list, description="The pool's status.parents.")
    missing_metrics: list[str] = Field(
        default_factory=list,
        description="Metrics the Endpoint Picker reads that the pods' vLLM version does not publish.",
    )


class AscendLLMDeploymentStatus(_Status):
    """Observed state, written by the operator through the status subresource."""

    observed_generation: int | None = Field(None, ge=0, description="The generation last reconciled.")
    phase: Phase | None = Field(None, description="Aggregated phase of the replicas.")
    replicas: int = Field(
        0, ge=0, description="Pods of the current Deployment (the scale subresource reads this)."
    )
    ready_replicas: int = Field(0, ge=0, description="Pods ready to serve.")
    updated_replicas: int = Field(0, ge=0, description="Pods running the current spec.")
    ready: str | None = Field(
        None, description="Ready replicas over desired replicas, for example 1/2 (printer column)."
    )
    selector: str | None = Field(
        None, description="Label selector of the pods, for the scale subresource and HPAs."
    )
    endpoint: str | None = Field(None, description="In-cluster URL of the OpenAI API.")
    model: str | None = Field(None, description="The served model name (printer column).")
    chip: str | None = Field(None, description="Chip preset or CPU (printer column).")
    graph: GraphStatus | None = Field(None, description="Graph modes of the replicas.")
    warmup: WarmupStatus | None = Field(None, description="Warmup outcomes.")
    groups: int | None = Field(
        None, ge=0, description="Multi-node replicas (LeaderWorkerSet groups) that have pods."
    )
    ready_groups: int | None = Field(None, ge=0, description="Groups whose pods are all ready.")
    groups_behind: list[GroupBehind] | None = Field(
        None, max_length=1024, description="Groups that are not ready, and which of their nodes lag."
    )
    autoscaling: AutoscalingStatus | None = Field(
        None, description="The autoscaler, its bounds and what it last did (while autoscaling is on)."
    )
    model_cache: ModelCacheStatus | None = Field(
        None, description="Where the weights and compile caches are kept, and the download (with spec.model.cache)."
    )
    lora: LoraStatus | None = Field(None, description="LoRA adapters loaded and failed per replica (with spec.lora).")
    routing: RoutingStatus | None = Field(None, description="Prefix-aware routing (spec.routing).")
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description=(
            "Ready, Progressing, Degraded, WaitingForNPU, ModelCached, Autoscaling, Routing, GraphModeFallback, "
            "LeakSuspected, LoraWarning and InvalidSpec conditions."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    kopf: dict[str, Any] | None = Field(
        None,
        description="The kopf framework's own bookkeeping (handler progress); not for users.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
