"""The status models: computed by :mod:`ascend_operator.status`, declared in the CRD so the server
keeps them, and serialized by alias to the camelCase JSON the operator writes."""

from __future__ import annotations

import enum
from typing import Annotated, Any

from ascend_operator.api.features import MAX_ADAPTERS
from ascend_runtime.config import GraphMode
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel


class _Status(BaseModel):
    """Status models: camelCase, strict, no cross-field rules."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    def wire(self) -> dict[str, Any]:
        """The camelCase JSON the operator writes: the fields it set, without the ``None`` ones (a
        field left at its default, such as an empty ``warnings`` list, is not written)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)


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
    engine_restarts: int | None = Field(
        None, ge=0,
        description=(
            "Engine relaunches by this container's runtime after a crash (its restart loop; the "
            "container itself kept running); absent while none."
        ),
    )
    container_restarts: int | None = Field(
        None, ge=0,
        description=(
            "Restarts of the pod's containers by the kubelet (failed liveness, a runtime that exited); "
            "absent while none. The runtime's engineRestarts count from the latest container's start."
        ),
    )
    resumed: str | None = Field(
        None, description="Where the graph-mode ladder resumed after a container restart, from the pod's state directory."
    )


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
    engine_restarts: int | None = Field(
        None, ge=0, description="Engine relaunches after a crash, summed over the current pods; absent while none."
    )
    container_restarts: int | None = Field(
        None, ge=0, description="Container restarts by the kubelet, summed over the current pods; absent while none."
    )


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


#: The most applied tuned defaults the status lists (the tutorials set about a dozen per class).
MAX_TUNED_APPLIED = 32


class TunedDefaultsStatus(_Status):
    """The tuned defaults an updated, ready pod's runtime applied (spec.engine.tunedDefaults)."""

    pod: str = Field(description="The pod whose runtime reported them.")
    summary: str | None = Field(
        None, description="The model's class and the engine version, e.g. 'MoE, 128 experts, vllm-ascend 0.13.0'."
    )
    applied: list[str] = Field(
        default_factory=list, max_length=MAX_TUNED_APPLIED,
        description="Each applied setting and the vllm-ascend file@tag it comes from.",
    )
    skipped: int = Field(
        0, ge=0, description="Defaults not applied (set by you, unknown to the version); the pod's /state says why."
    )
    reason: str | None = Field(None, description="Why none applies (turned off, not Ascend, no config.json, ...).")


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
    completed_request: str | None = Field(
        None, description="Digest of the download request a fetch completed: a new fetch Job for the same "
        "request (another fetch image or token reference) holds no pod back.")


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


class RoleStatus(_Status):
    """One disaggregation role's replicas (spec.disaggregation.prefill or .decode)."""

    workload: str | None = Field(None, description="The role's Deployment or LeaderWorkerSet.")
    desired_replicas: int = Field(0, ge=0, description="The role's replicas in the spec.")
    replicas: int = Field(0, ge=0, description="The role's replicas that have pods (groups when multi-node).")
    ready_replicas: int = Field(0, ge=0, description="The role's replicas ready to serve.")
    mode: str | None = Field(
        None, description="Graph mode the role's replicas run (Mixed when they differ; none before they report)."
    )


class RolesStatus(_Status):
    """Per role, with spec.disaggregation."""

    prefill: RoleStatus | None = Field(None, description="The prefill role.")
    decode: RoleStatus | None = Field(None, description="The decode role.")


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
    tuned_defaults: TunedDefaultsStatus | None = Field(
        None, description="The tuned defaults the engine runs with, and why (docs/tuned-defaults.md)."
    )
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
    roles: RolesStatus | None = Field(
        None, description="Prefill and decode replicas (with spec.disaggregation); the counts above sum them."
    )
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
