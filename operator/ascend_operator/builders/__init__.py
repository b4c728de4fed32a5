"""Pure builders: a resource's spec + operator settings -> the manifests of its children.

:func:`build_children` is the entry point the handlers and ``ascend-llm render`` call: it makes
one :class:`BuildInputs` (:mod:`.inputs`) and hands it to the builders. Nothing here talks to the
API or imports kopf; owner references are added by the handler (kopf.adopt).

The workload is a Deployment (``nodesPerReplica`` 1) or a LeaderWorkerSet (more): exactly one of
``Children.deployment`` / ``Children.leaderworkerset`` is set. The autoscaler (``Children.hpa``
or ``Children.scaled_object``) is built only for the kind the caller passes, which the reconcile
layer gets from :func:`choose_autoscaler` (it alone knows what the cluster serves).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ascend_runtime.config import EngineConfig
from ascend_runtime.kvtransfer import Connector

from ascend_operator.api import AscendLLMDeploymentSpec, PdRoleName
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
from ascend_operator.builders.disaggregation import (
    RankTableMount,
    RoleWiring,
    workload_ref,
    routing_sidecar,
    role_plan,
    role_spec,
    select_role,
    wire_role,
)
from ascend_operator.builders.inputs import (
    BuildInputs,
    BuildMeta,
    Plans,
    Remembered,
    make_plans,
    resolve_image,
)
from ascend_operator.builders.leaderworkerset import build_leaderworkerset, lws_missing
from ascend_operator.builders.modelcache import (
    build_adapter_fetch_job,
    build_cache_claim,
    build_fetch_job,
    cache_host_dir,
)
from ascend_operator.policy import cache_prefix
from ascend_operator.builders.pdb import build_pdb
from ascend_operator.builders.routing import build_routing, routing_enabled, routing_missing
from ascend_operator.builders.service import build_runtime_service, build_service, endpoint_url
from ascend_operator.names import ChildNames
from ascend_operator.settings import OperatorSettings

__all__ = [
    "CONFIG_HASH_ANNOTATION",
    "RETRY_GRAPH_ANNOTATION",
    "SPEC_HASH_ANNOTATION",
    "AutoscalerChoice",
    "AutoscalerKind",
    "BuildInputs",
    "BuildMeta",
    "Children",
    "ChildrenSummary",
    "Plans",
    "Remembered",
    "build_children",
    "build_engine_config",
    "build_hpa",
    "build_leaderworkerset",
    "build_scaled_object",
    "children_of",
    "disaggregated_children",
    "choose_autoscaler",
    "common_labels",
    "content_hash",
    "endpoint_url",
    "lws_missing",
    "make_plans",
    "remembered_mode_key",
    "resolve_image",
    "routing_missing",
    "scale_selector_string",
    "selector_labels",
    "selector_string",
    "serving_selector_labels",
    "startup_budget",
]


def _template_annotations(workload: dict[str, Any]) -> dict[str, str]:
    spec = workload["spec"]
    template = spec["template"] if "template" in spec else spec["leaderWorkerTemplate"]["leaderTemplate"]
    return dict(template["metadata"].get("annotations") or {})


def _template_hash(workload: dict[str, Any]) -> str | None:
    return _template_annotations(workload).get(CONFIG_HASH_ANNOTATION)


def _nodes(workload: dict[str, Any]) -> int:
    spec = workload["spec"]
    return int(spec["leaderWorkerTemplate"]["size"]) if "leaderWorkerTemplate" in spec else 1


@dataclass(frozen=True, kw_only=True)
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
    #: spec.disaggregation: role -> (workload name, config hash, pods per replica).
    roles: tuple[tuple[str, str, str | None, int], ...] = ()


@dataclass(frozen=True, kw_only=True)
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
    #: spec.disaggregation: role name -> that role's workload (the decode one is also ``workload``).
    roles: tuple[tuple[str, dict[str, Any]], ...] = ()

    @property
    def workload(self) -> dict[str, Any]:
        """The Deployment or the LeaderWorkerSet, whichever runs the pods."""
        workload = self.deployment if self.deployment is not None else self.leaderworkerset
        assert workload is not None  # build_children always sets one
        return workload

    def pod_template_annotations(self) -> dict[str, str]:
        """Annotations of the (leader's) pod template, e.g. the config hash pods must carry."""
        return _template_annotations(self.workload)

    def summary(self) -> ChildrenSummary:
        autoscaler: AutoscalerKind | None = "hpa" if self.hpa is not None else (
            "keda" if self.scaled_object is not None else None)
        return ChildrenSummary(
            workload_kind=self.workload["kind"], workload_name=self.workload["metadata"]["name"],
            template_hash=self.pod_template_annotations().get(CONFIG_HASH_ANNOTATION),
            scale_selector=self.scale_selector, remembered_key=self.remembered_key, autoscaler=autoscaler,
            roles=tuple((role, w["metadata"]["name"], _template_hash(w), _nodes(w)) for role, w in self.roles))

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


def build_children(
    meta: BuildMeta,
    spec: AscendLLMDeploymentSpec,
    settings: OperatorSettings,
    remembered: Remembered | None = None,
    *,
    autoscaler: AutoscalerKind | None = None,
    routing: bool = True,
    plans: Plans | None = None,
) -> Children:
    """Every child of the resource, from :meth:`BuildInputs.make` (the remembered mode is used
    only while its key matches; ``plans`` as the caller made them, else made here).

    ``autoscaler`` is :attr:`AutoscalerChoice.kind` from :func:`choose_autoscaler`; None builds
    no autoscaler (autoscaling off, or not possible on this cluster). It is ignored while
    ``spec.autoscaling`` is off. ``routing`` False builds no routing children (the cluster
    lacks their APIs: :func:`routing_missing`).
    """
    return children_of(BuildInputs.make(meta, spec, settings, remembered, plans), autoscaler=autoscaler,
                       routing=routing)


def children_of(inputs: BuildInputs, *, autoscaler: AutoscalerKind | None, routing: bool) -> Children:
    """Every child built from ``inputs`` (:func:`build_children`)."""
    if inputs.spec.disaggregation is not None:
        return disaggregated_children(inputs, routing=routing, autoscaler=autoscaler)
    name, namespace, names = inputs.name, inputs.namespace, inputs.names
    spec, settings, cache_plan = inputs.spec, inputs.settings, inputs.cache_plan
    multinode = spec.nodes_per_replica > 1
    scaling = spec.autoscaling is not None and spec.autoscaling.enabled
    create = cache_plan.spec.create if cache_plan is not None else None
    claim_owned = bool(create and create.delete_with_resource)
    return Children(
        cache_claim=build_cache_claim(name, namespace, cache_plan) if cache_plan is not None else None,
        cache_claim_owned=claim_owned,
        fetch_job=(build_fetch_job(name, namespace, spec, settings, cache_plan)
                   if cache_plan else None),
        adapter_fetch_jobs=tuple(
            build_adapter_fetch_job(name, namespace, settings, cache_plan, fetch)
            for fetch in inputs.fetches_on_claim if cache_plan is not None
        ),
        names=names,
        image=inputs.image,
        engine_config=inputs.engine_config,
        remembered_key=inputs.remembered_key,
        configmap=build_configmap(name, namespace, names.configmap, inputs.engine_config),
        adapters_configmap=(
            build_adapters_configmap(name, namespace, names.adapters, spec, inputs.downloaded)
            if lora_enabled(spec) else None
        ),
        deployment=None if multinode else build_deployment(inputs),
        leaderworkerset=build_leaderworkerset(inputs) if multinode else None,
        service=build_service(name, namespace, names.service, spec),
        runtime_service=build_runtime_service(name, namespace, names.runtime_service, spec),
        pdb=build_pdb(name, namespace, names.pdb),
        hpa=(
            build_hpa(name, namespace, names.hpa, spec, settings)
            if scaling and autoscaler == "hpa"
            else None
        ),
        scaled_object=(
            build_scaled_object(name, namespace, names.scaled_object, spec, settings)
            if scaling and autoscaler == "keda"
            else None
        ),
        scale_selector=scale_selector_string(name, spec.nodes_per_replica),
        routing=build_routing(name, namespace, spec, settings) if routing else (),
    )


def _role_children(inputs: BuildInputs, role: PdRoleName) -> tuple[BuildInputs, dict[str, Any], dict[str, Any],
                                                                    dict[str, Any]]:
    """One role's inputs, ConfigMap, wired workload (without replicas when the role autoscales) and Service."""
    spec = inputs.spec
    plans = Plans(cache_plan=inputs.cache_plan, adapter_fetches=inputs.adapter_fetches)
    role_inputs = BuildInputs.make(inputs.meta, role_spec(spec, role), inputs.settings, inputs.remembered, plans,
                                   role=role)
    names, name, namespace = role_inputs.names, inputs.name, inputs.namespace
    assert spec.disaggregation is not None
    plan = role_plan(spec, role, role_inputs.image)
    routed = role is PdRoleName.DECODE and routing_enabled(spec)
    connector = plan.kv_transfer_config["kv_connector"] if plan.kv_transfer_config else None
    shared = spec.disaggregation.shared_storage_path
    wiring = RoleWiring(
        role, plan, shared_storage_path=shared,
        # The policy (enforce_policy) refuses a path under no cache prefix before any build.
        shared_storage_host=(cache_host_dir(shared, namespace, inputs.settings)
                             if shared and cache_prefix(shared, inputs.settings) else None),
        sidecar=routing_sidecar(inputs.settings.routing_sidecar_image, Connector(connector),
                                role_inputs.engine_config.engine.port) if routed and connector else None,
        engine_port=role_inputs.engine_config.engine.port, rank_table=RankTableMount.of(spec))
    multinode = role_inputs.spec.nodes_per_replica > 1
    workload = build_leaderworkerset(role_inputs) if multinode else build_deployment(role_inputs)
    configmap = build_configmap(name, namespace, names.configmap, role_inputs.engine_config)
    service = select_role(build_service(name, namespace, names.service, role_inputs.spec), role)
    autoscaled = role_inputs.spec.autoscaling is not None
    return role_inputs, configmap, wire_role(workload, wiring, autoscaled=autoscaled), service


def _role_autoscaler(role_inputs: BuildInputs, role: PdRoleName, workload: dict[str, Any],
                     autoscaler: AutoscalerKind | None) -> dict[str, Any] | None:
    """The role's HPA or ScaledObject on its own workload (``autoscaler``: the kind the cluster allows)."""
    spec, names = role_inputs.spec, role_inputs.names
    if spec.autoscaling is None or autoscaler is None:
        return None
    target = workload_ref(workload)
    if autoscaler == "hpa":
        return build_hpa(role_inputs.name, role_inputs.namespace, names.hpa, spec, role_inputs.settings, target=target)
    return build_scaled_object(role_inputs.name, role_inputs.namespace, names.scaled_object, spec,
                               role_inputs.settings, target=target, role=role.value)


def disaggregated_children(inputs: BuildInputs, *, routing: bool = True,
                           autoscaler: AutoscalerKind | None = None) -> Children:
    """The children of a disaggregated resource (:mod:`.disaggregation`): the decode role is the
    main workload (its ConfigMap, its pods behind the Service ``<name>``); the prefill role's
    ConfigMap, workload and Service ``<name>-prefill`` are in ``extra``. Raises
    ``ascend_runtime.kvtransfer.KvTransferError`` for what the connector refuses."""
    name, namespace, names, spec = inputs.name, inputs.namespace, inputs.names, inputs.spec
    prefill_inputs, prefill_config, prefill_workload, prefill_service = _role_children(inputs, PdRoleName.PREFILL)
    decode_inputs, decode_config, decode_workload, _ = _role_children(inputs, PdRoleName.DECODE)
    cache_plan = inputs.cache_plan
    create = cache_plan.spec.create if cache_plan is not None else None
    decode_multinode = decode_workload["kind"] != "Deployment"
    decode_service = select_role(build_service(name, namespace, names.service, decode_inputs.spec),
                                 PdRoleName.DECODE)
    return Children(
        cache_claim=build_cache_claim(name, namespace, cache_plan) if cache_plan is not None else None,
        cache_claim_owned=bool(create and create.delete_with_resource),
        fetch_job=build_fetch_job(name, namespace, spec, inputs.settings, cache_plan) if cache_plan else None,
        names=decode_inputs.names,
        image=decode_inputs.image,
        engine_config=decode_inputs.engine_config,
        remembered_key=decode_inputs.remembered_key,
        configmap=decode_config,
        deployment=None if decode_multinode else decode_workload,
        leaderworkerset=decode_workload if decode_multinode else None,
        service=decode_service,
        runtime_service=build_runtime_service(name, namespace, names.runtime_service, spec),
        pdb=build_pdb(name, namespace, names.pdb),
        extra=(prefill_config, prefill_workload, prefill_service, *(
            obj for obj in (_role_autoscaler(prefill_inputs, PdRoleName.PREFILL, prefill_workload, autoscaler),
                            _role_autoscaler(decode_inputs, PdRoleName.DECODE, decode_workload, autoscaler))
            if obj is not None)),
        roles=((PdRoleName.PREFILL.value, prefill_workload), (PdRoleName.DECODE.value, decode_workload)),
        routing=build_routing(name, namespace, spec, inputs.settings) if routing else (),
        scale_selector=scale_selector_string(name, decode_inputs.spec.nodes_per_replica),
    )
