"""Pure builders: a resource's spec + operator settings -> the manifests of its children.

:func:`build_children` is the entry point the handlers and ``ascend-llm render`` call. Nothing
here talks to the API or imports kopf; owner references are added by the handler (kopf.adopt).

The workload is a Deployment (``nodesPerReplica`` 1) or a LeaderWorkerSet (more): exactly one of
``Children.deployment`` / ``Children.leaderworkerset`` is set. The autoscaler (``Children.hpa``
or ``Children.scaled_object``) is built only for the kind the caller passes, which the reconcile
layer gets from :func:`choose_autoscaler` (it alone knows what the cluster serves).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascend_runtime.config import EngineConfig, GraphMode

from ascend_operator.api import AscendLLMDeploymentSpec, Platform
from ascend_operator.builders.adapters import build_adapters_configmap, lora_enabled
from ascend_operator.builders.autoscaling import (
    AutoscalerChoice,
    AutoscalerKind,
    build_hpa,
    build_scaled_object,
    choose_autoscaler,
)
from ascend_operator.builders.common import (
    CONFIG_HASH_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    common_labels,
    content_hash,
    scale_selector_string,
    selector_labels,
    selector_string,
    serving_selector_labels,
)
from ascend_operator.builders.configmap import build_configmap
from ascend_operator.builders.deployment import build_deployment
from ascend_operator.builders.engine_config import (
    RETRY_GRAPH_ANNOTATION,
    build_engine_config,
    remembered_mode_key,
    startup_budget,
)
from ascend_operator.builders.leaderworkerset import build_leaderworkerset, lws_missing
from ascend_operator.builders.modelcache import (
    build_adapter_fetch_job,
    build_cache_claim,
    build_fetch_job,
    plan_adapter_fetches,
    plan_cache,
)
from ascend_operator.builders.pdb import build_pdb
from ascend_operator.builders.routing import build_routing, routing_missing
from ascend_operator.builders.service import build_runtime_service, build_service, endpoint_url
from ascend_operator.names import ChildNames
from ascend_operator.settings import OperatorSettings

__all__ = [
    "CONFIG_HASH_ANNOTATION",
    "RETRY_GRAPH_ANNOTATION",
    "SPEC_HASH_ANNOTATION",
    "AutoscalerChoice",
    "AutoscalerKind",
    "BuildMeta",
    "Children",
    "ChildrenSummary",
    "Observed",
    "build_children",
    "build_engine_config",
    "build_hpa",
    "build_leaderworkerset",
    "build_scaled_object",
    "choose_autoscaler",
    "common_labels",
    "content_hash",
    "endpoint_url",
    "lws_missing",
    "remembered_mode_key",
    "resolve_image",
    "routing_missing",
    "scale_selector_string",
    "selector_labels",
    "selector_string",
    "serving_selector_labels",
    "startup_budget",
]


@dataclass(frozen=True)
class BuildMeta:
    """The resource's identity."""

    name: str
    namespace: str
    generation: int | None = None
    #: The resource's annotations (``RETRY_GRAPH_ANNOTATION`` is read from them).
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Observed:
    """What the operator has observed and the builders may use (from the resource's status)."""

    remembered_mode: GraphMode | None = None
    #: The key the mode was remembered under (:func:`remembered_mode_key`); a mismatch drops it.
    remembered_for: str | None = None
    #: Names of the hub adapters' fetch Jobs that have completed: only their adapters enter the
    #: adapters ConfigMap ...
    adapter_jobs_complete: frozenset[str] = frozenset()
    #: ... or those the live adapters ConfigMap already lists at the same path (name -> path): a
    #: completed Job deleted and made again does not unload an adapter the pods serve.
    adapters_served: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChildrenSummary:
    """What the status needs of the children as built (a few names and hashes, not the objects; the
    children's names are ``ChildNames.for_resource``)."""

    workload_kind: str
    workload_name: str
    #: The config hash the workload's pods must carry (``CONFIG_HASH_ANNOTATION``).
    template_hash: str | None
    scale_selector: str
    remembered_key: str
    #: The autoscaler built: ``"hpa"``, ``"keda"`` or None.
    autoscaler: AutoscalerKind | None


@dataclass(frozen=True)
class Children:
    """The desired children, as plain dicts without owner references.

    Exactly one of ``deployment`` (single-node replicas) and ``leaderworkerset`` (multi-node)
    is set; ``hpa`` / ``scaled_object`` only when ``build_children`` was given that kind.
    ``scale_selector`` is what ``status.selector`` must hold (one pod per replica).
    """

    names: ChildNames
    image: str
    engine_config: EngineConfig
    #: Key for ``status.graph.rememberedFor`` when a pod reports a working mode.
    remembered_key: str
    configmap: dict[str, Any]
    deployment: dict[str, Any] | None
    service: dict[str, Any]
    #: The headless Service of the runtime port (metrics, /state), apart from the clients' one.
    runtime_service: dict[str, Any]
    pdb: dict[str, Any]
    extra: tuple[dict[str, Any], ...] = field(default=())
    #: spec.model.cache.create: the claim (owned by the resource only with deleteWithResource).
    cache_claim: dict[str, Any] | None = None
    cache_claim_owned: bool = False
    #: spec.lora enabled: the ConfigMap of the adapter set (changes load adapters, roll no pods).
    adapters_configmap: dict[str, Any] | None = None
    #: The Job that fills a claim with a hub model; the workload waits for it to complete.
    fetch_job: dict[str, Any] | None = None
    #: One Job per hub adapter repo, revision and token (spec.lora); nothing waits for them but the
    #: adapters' entries in the adapters ConfigMap.
    adapter_fetch_jobs: tuple[dict[str, Any], ...] = ()
    leaderworkerset: dict[str, Any] | None = None
    hpa: dict[str, Any] | None = None
    scaled_object: dict[str, Any] | None = None
    scale_selector: str = ""
    #: spec.routing: the EPP's ServiceAccount, Role, RoleBinding, ConfigMap, Deployment and
    #: Service, the InferencePool and the HTTPRoute (builders/routing.py), in apply order.
    routing: tuple[dict[str, Any], ...] = ()

    @property
    def workload(self) -> dict[str, Any]:
        """The Deployment or the LeaderWorkerSet, whichever runs the pods."""
        workload = self.deployment if self.deployment is not None else self.leaderworkerset
        assert workload is not None  # build_children always sets one
        return workload

    def pod_template_annotations(self) -> dict[str, str]:
        """Annotations of the (leader's) pod template, e.g. the config hash pods must carry."""
        spec = self.workload["spec"]
        template = spec["template"] if "template" in spec else spec["leaderWorkerTemplate"]["leaderTemplate"]
        return dict(template["metadata"].get("annotations") or {})

    def summary(self) -> ChildrenSummary:
        autoscaler: AutoscalerKind | None = "hpa" if self.hpa is not None else (
            "keda" if self.scaled_object is not None else None)
        return ChildrenSummary(
            workload_kind=self.workload["kind"], workload_name=self.workload["metadata"]["name"],
            template_hash=self.pod_template_annotations().get(CONFIG_HASH_ANNOTATION),
            scale_selector=self.scale_selector, remembered_key=self.remembered_key, autoscaler=autoscaler)

    def objects(self) -> list[dict[str, Any]]:
        """All owned children in apply order (the ConfigMaps before the pods that mount them; the
        fetch Job before the workload that waits for it; the autoscaler last, once the workload
        it acts through exists). The cache claim is apart (:attr:`cache_claim`)."""
        optional = (self.hpa, self.scaled_object)
        return [
            self.configmap,
            *((self.adapters_configmap,) if self.adapters_configmap is not None else ()),
            *((self.fetch_job,) if self.fetch_job is not None else ()),
            *self.adapter_fetch_jobs,
            self.workload,
            self.service,
            self.runtime_service,
            self.pdb,
            *self.extra,
            *self.routing,
            *(obj for obj in optional if obj is not None),
        ]


def resolve_image(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> str:
    """``spec.image``, or the settings' default for the chip (or the CPU image)."""
    if spec.image:
        return spec.image
    return settings.runtime_image(None if spec.platform == Platform.CPU else spec.npu.chip)


def build_children(
    meta: BuildMeta,
    spec: AscendLLMDeploymentSpec,
    settings: OperatorSettings,
    observed: Observed | None = None,
    autoscaler: AutoscalerKind | None = None,
    routing: bool = True,
) -> Children:
    """Every child of the resource; the remembered mode is used only while its key matches.

    ``autoscaler`` is :attr:`AutoscalerChoice.kind` from :func:`choose_autoscaler`; None builds
    no autoscaler (autoscaling off, or not possible on this cluster). It is ignored while
    ``spec.autoscaling`` is off. ``routing`` False builds no routing children (the cluster
    lacks their APIs: :func:`routing_missing`).
    """
    observed = observed or Observed()
    names = ChildNames.for_resource(meta.name)
    image = resolve_image(spec, settings)
    key = remembered_mode_key(spec, image, meta.annotations.get(RETRY_GRAPH_ANNOTATION))
    start_mode = observed.remembered_mode if observed.remembered_for == key else None
    config = build_engine_config(meta.name, spec, settings, start_mode, image)
    configmap = build_configmap(meta.name, meta.namespace, names.configmap, config)
    # The pod template carries a hash of the config *without* the remembered start mode:
    # remembering the mode that already runs must not roll healthy pods; new pods read it.
    rolled = config.model_copy(update={"graph": config.graph.model_copy(update={"start_mode": None})})
    config_hash = content_hash(build_configmap(meta.name, meta.namespace, names.configmap, rolled)["data"])
    workload_args = (meta.name, meta.namespace, names, spec, settings, config, config_hash, image)
    multinode = spec.nodes_per_replica > 1
    scaling = spec.autoscaling is not None and spec.autoscaling.enabled
    plan = plan_cache(meta.name, spec, settings)
    fetches = plan_adapter_fetches(spec, settings) if plan is not None and plan.claim_name is not None else ()
    downloaded = {
        adapter: fetch for fetch in fetches for adapter in fetch.adapters
        if fetch.job_name(meta.name) in observed.adapter_jobs_complete
        or observed.adapters_served.get(adapter) == str(fetch.request.model_dir)
    }
    return Children(
        cache_claim=build_cache_claim(meta.name, meta.namespace, plan) if plan is not None else None,
        cache_claim_owned=bool(plan and plan.cache.create and plan.cache.create.delete_with_resource),
        fetch_job=build_fetch_job(meta.name, meta.namespace, spec, settings, plan, image) if plan else None,
        adapter_fetch_jobs=tuple(
            build_adapter_fetch_job(meta.name, meta.namespace, settings, plan, fetch, image)
            for fetch in fetches if plan is not None
        ),
        names=names,
        image=image,
        engine_config=config,
        remembered_key=key,
        configmap=configmap,
        adapters_configmap=(
            build_adapters_configmap(meta.name, meta.namespace, names.adapters, spec, downloaded)
            if lora_enabled(spec) else None
        ),
        deployment=None if multinode else build_deployment(*workload_args),
        leaderworkerset=build_leaderworkerset(*workload_args) if multinode else None,
        service=build_service(meta.name, meta.namespace, names.service, spec),
        runtime_service=build_runtime_service(meta.name, meta.namespace, names.runtime_service, spec),
        pdb=build_pdb(meta.name, meta.namespace, names.pdb),
        hpa=(
            build_hpa(meta.name, meta.namespace, names.hpa, spec, settings)
            if scaling and autoscaler == "hpa"
            else None
        ),
        scaled_object=(
            build_scaled_object(meta.name, meta.namespace, names.scaled_object, spec, settings)
            if scaling and autoscaler == "keda"
            else None
        ),
        scale_selector=scale_selector_string(meta.name, spec.nodes_per_replica),
        routing=build_routing(meta.name, meta.namespace, spec, settings) if routing else (),
    )
