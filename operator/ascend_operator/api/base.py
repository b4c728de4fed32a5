"""The API's identity, its defaults, the rule machinery every spec model shares, and the small
shared types (DNS names, quantities, labels) and enums of the spec."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from ascend_runtime.config import Chip
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
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


@dataclass(frozen=True)
class TransitionRule:
    """A rule on a change: the API server checks it on updates (CEL with ``oldSelf``, evaluated
    only where the node existed before); ``holds(old, new)`` is the same predicate in Python.
    For what the server would refuse later on a child (an immutable field of a claim)."""

    cel: str
    message: str
    field_path: str
    holds: Callable[[Any, Any], bool]

    def as_validation(self) -> dict[str, str]:
        entry = {"rule": self.cel, "message": self.message}
        if self.field_path:
            entry["fieldPath"] = self.field_path
        return entry


#: Filled in below, after the classes; keyed by the model class the rules sit on.
SPEC_RULES: dict[type[BaseModel], tuple[SpecRule, ...]] = {}
#: The same for rules on a change (``oldSelf``).
TRANSITION_RULES: dict[type[BaseModel], tuple[TransitionRule, ...]] = {}


def _schema_extra(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """Attach the class's CEL rules to its JSON Schema (read by crdgen)."""
    rules = [*SPEC_RULES.get(cls, ()), *TRANSITION_RULES.get(cls, ())]
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


class SpecModel(BaseModel):
    """Strict, camelCase on the wire, snake_case in Python; rules from :data:`SPEC_RULES`."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        json_schema_extra=_schema_extra,
        use_enum_values=False,
    )

    @model_validator(mode="after")
    def _rules(self) -> SpecModel:
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
