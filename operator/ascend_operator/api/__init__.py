"""The ``AscendLLMDeployment`` API: the one source of truth for the spec and the status.

A package split by concern: :mod:`.base` (identity, defaults, the rule machinery, shared types),
:mod:`.model`, :mod:`.replica` and :mod:`.features` (the parts of the spec), :mod:`.spec` (the whole
spec and its parsing), :mod:`.rules` (the cross-field rule table) and :mod:`.status` (the status
models). Import from the package: its names are the API.

Group ``llm.ascend.dev``, version ``v1alpha1``. The pydantic models are camelCase on the
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

from ascend_operator.api.base import (  # noqa: F401
    API_VERSION,
    DEFAULT_CHIP,
    DEFAULT_IDLE_SECONDS,
    DEFAULT_MIN_REPLICAS,
    DEFAULT_NODES_PER_REPLICA,
    DEFAULT_NPUS_PER_REPLICA,
    DEFAULT_REPLICAS,
    DEFAULT_RUNNING_FRACTION,
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    DEFAULT_SERVICE_PORT,
    DEFAULT_TARGET_KV_CACHE,
    DEFAULT_TARGET_WAITING,
    GROUP,
    KIND,
    LABEL_KEY_PATTERN,
    PLURAL,
    QUANTITY_PATTERN,
    SHORT_NAMES,
    SINGULAR,
    SPEC_RULES,
    TRANSITION_RULES,
    VERSION,
    VLLM_DEFAULT_MAX_NUM_SEQS,
    AutoscalerProvider,
    AutoscalingSignal,
    DistributedBackend,
    DnsLabel,
    DnsSubdomain,
    Dtype,
    EnvName,
    LabelKey,
    LabelValue,
    Platform,
    Quantity,
    RolloutStrategy,
    ServiceType,
    SpecModel,
    SpecRule,
)
from ascend_operator.api.disaggregation import (  # noqa: F401
    DisaggregationSpec,
    KvOffloadSpec,
    PdRoleName,
    RoleNpuSpec,
    RoleSpec,
)
from ascend_operator.api.features import (  # noqa: F401
    MAX_ADAPTERS,
    AdapterHostPathSource,
    AdapterHubSource,
    AdapterPvcSource,
    AdapterSource,
    AutoscalingSpec,
    GatewayRef,
    LoraAdapterSpec,
    LoraSpec,
    RoutingFailureMode,
    RoutingProfile,
    RoutingSpec,
    ScaleToZeroSpec,
    ScalingRulesSpec,
)
from ascend_operator.api.model import (  # noqa: F401
    HOST_PATH_PATTERN,
    RELATIVE_DIR_PATTERN,
    REVISION_PATTERN,
    REVISION_RULE,
    CacheAccessMode,
    CacheClaimSpec,
    ConfigMapKeyRef,
    EnvValueSource,
    HostPathSource,
    HubRepoId,
    HubSource,
    ModelCacheSpec,
    ModelSpec,
    PvcSource,
    RelativeDir,
    Revision,
    SecretKeyRef,
)
from ascend_operator.api.replica import (  # noqa: F401
    AFFINITY_KINDS,
    AscendOptionsSpec,
    DistributedSpec,
    EngineSpec,
    GraphSpec,
    HcclSpec,
    HealthSpec,
    LeakLimitsSpec,
    NpuSpec,
    ParallelismSpec,
    ResourceList,
    ResourcesSpec,
    RolloutSpec,
    ServiceSpec,
    Toleration,
    WarmupSpec,
    quantity_value,
)
from ascend_operator.api.spec import (  # noqa: F401
    AscendLLMDeploymentSpec,
    SpecError,
    display_chip,
    display_model,
    parse_spec,
    spec_problems,
)
from ascend_operator.api.status import (  # noqa: F401
    AdapterDownloadStatus,
    AscendLLMDeploymentStatus,
    AutoscalingStatus,
    Condition,
    ConditionStatus,
    GraphStatus,
    GroupBehind,
    LoraAdapterStatus,
    LoraStatus,
    ModelCacheStatus,
    NodeBehind,
    Phase,
    ReplicaGraphStatus,
    RoutingParentStatus,
    RoleStatus,
    RolesStatus,
    RoutingStatus,
    TunedDefaultsStatus,
    WarmupStatus,
)
# Imported for its effect: it fills SPEC_RULES, which the spec models' validators and schemas read.
from ascend_operator.api import rules  # noqa: F401
from ascend_runtime.config import Chip, GraphMode, GraphPolicy

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "SPEC_RULES",
    "TRANSITION_RULES",
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
    "DisaggregationSpec",
    "DistributedSpec",
    "KvOffloadSpec",
    "PdRoleName",
    "RoleNpuSpec",
    "RoleSpec",
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
    "TunedDefaultsStatus",
    "WarmupStatus",
    "display_chip",
    "display_model",
    "parse_spec",
]
