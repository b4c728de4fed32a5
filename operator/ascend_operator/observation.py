"""What the reconcile saw of one resource, besides its spec: the input of :mod:`ascend_operator.status`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ascend_runtime.config import RuntimeState

from ascend_operator.autoscalingstatus import AutoscalingObservation
from ascend_operator.cachestatus import AdapterDownload, CacheObservation
from ascend_operator.routingstatus import RoutingObservation


@dataclass(frozen=True)
class RoleObservation:
    """One disaggregation role's workload as built: its name, the config hash its pods must carry
    and its pods per replica (the role's pods are those labelled ``llm.ascend.dev/pd-role``)."""

    workload: str
    template_hash: str | None
    nodes_per_replica: int = 1


@dataclass(frozen=True)
class Observation:
    """What the reconcile saw of one resource, besides its spec.

    ``pods`` are raw pod dicts selected by the resource's pod selector; ``states`` maps pod names
    to the runtime state read from them (``None``: not readable). ``template_hash`` is the hash
    annotation of the desired pod template (``template_hash_key`` on pods): pods carrying another
    value run an older spec. ``remembered_for`` is the remembered-mode key of the current spec.
    """

    name: str
    generation: int
    selector: str
    endpoint: str | None
    resource_name: str | None
    remembered_for: str
    template_hash: str | None = None
    template_hash_key: str = "llm.ascend.dev/config-hash"
    pods: Sequence[Mapping[str, Any]] = ()
    states: Mapping[str, RuntimeState | None] = field(default_factory=dict)
    #: Children the operator could not write (a same-named object it does not own), as messages.
    conflicts: Sequence[str] = ()
    #: Pods per replica: above 1 the pods are LeaderWorkerSet groups (``pods`` holds them all).
    nodes_per_replica: int = 1
    #: None while ``spec.autoscaling`` is off.
    autoscaling: AutoscalingObservation | None = None
    #: Why the LeaderWorkerSet cannot be made (the cluster does not serve its API), if so.
    lws_missing: str | None = None
    #: The API server's refusal of a child (kind, name and the server's message), if any.
    refused: str | None = None
    #: The live workload (Deployment or LeaderWorkerSet), for its conditions.
    workload: Mapping[str, Any] | None = None
    #: spec.model.cache: the claim and the download (ascend_operator.cachestatus).
    cache: CacheObservation | None = None
    #: The hub LoRA adapters' downloads (their fetch Jobs), for status.lora.
    adapter_downloads: Sequence[AdapterDownload] = ()
    #: The LoRA guard's warnings (ascend_operator.lora.lora_warnings), for the LoraWarning condition.
    lora_warnings: Sequence[str] = ()
    #: None while spec.routing is off.
    routing: RoutingObservation | None = None
    #: spec.disaggregation: role name (``prefill`` / ``decode``) -> its workload; empty otherwise.
    roles: Mapping[str, RoleObservation] = field(default_factory=dict)
