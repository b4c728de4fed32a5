"""The whole spec (:class:`AscendLLMDeploymentSpec`), parsing it with errors that name each field,
and what the printer columns show."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from ascend_operator.api.base import DEFAULT_NODES_PER_REPLICA, DEFAULT_REPLICAS, Platform, SpecModel
from ascend_operator.api.disaggregation import DisaggregationSpec, KvOffloadSpec
from ascend_operator.api.features import AutoscalingSpec, LoraSpec, RoutingSpec
from ascend_operator.api.model import ModelSpec
from ascend_operator.api.replica import (
    AscendOptionsSpec,
    DistributedSpec,
    EngineSpec,
    GraphSpec,
    HealthSpec,
    NpuSpec,
    ParallelismSpec,
    ResourcesSpec,
    RolloutSpec,
    ServiceSpec,
    WarmupSpec,
)
from pydantic import Field, StringConstraints, ValidationError


# --------------------------------------------------------------------------------------------
# spec


class AscendLLMDeploymentSpec(SpecModel):
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
    disaggregation: DisaggregationSpec | None = Field(
        None,
        description=(
            "Prefill/decode disaggregation: a workload per role, the KV cache moved from prefill to decode "
            "(docs/kv-transfer.md). spec.replicas, nodesPerReplica, parallelism and npu.perReplica are then "
            "per role. Default: off (every replica prefills and decodes)."
        ),
    )
    kv_offload: KvOffloadSpec | None = Field(
        None, description="Host-memory KV offload (every engine of the resource). Default: off."
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
