"""The inputs of one build, made once per pass and handed to every builder by keyword (pure).

:class:`BuildInputs` holds what the builders share: the resource's names, its spec, the operator
settings, the resolved image, the engine config and the hash its pods carry, the model cache's
plan, the hub adapters' downloads and what earlier passes remembered. Deriving each of these
once means the builders cannot disagree about them (and the plans, which validate, run once).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ascend_runtime.config import EngineConfig, GraphMode

from ascend_operator.api import AscendLLMDeploymentSpec, PdRoleName, Platform
from ascend_operator.builders.common import content_hash
from ascend_operator.builders.configmap import build_configmap
from ascend_operator.builders.engine_config import (
    RETRY_GRAPH_ANNOTATION,
    StartupBudget,
    build_engine_config,
    remembered_mode_key,
    startup_budget,
)
from ascend_operator.builders.modelcache import AdapterFetch, CachePlan, plan_adapter_fetches, plan_cache
from ascend_operator.names import ChildNames
from ascend_operator.settings import OperatorSettings


@dataclass(frozen=True)
class BuildMeta:
    """The resource's identity."""

    name: str
    namespace: str
    generation: int | None = None
    #: The resource's annotations (``RETRY_GRAPH_ANNOTATION`` is read from them).
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Remembered:
    """What earlier passes learned and the builders may use (the resource's status, the watches)."""

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
class Plans:
    """The model cache's plan and the hub adapters' downloads of one spec (:func:`make_plans`)."""

    cache_plan: CachePlan | None
    #: Every hub adapter's download, whatever the cache (the reconcile observes their Jobs).
    adapter_fetches: tuple[AdapterFetch, ...]


def make_plans(name: str, spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> Plans:
    """The plans of resource ``name``; raises :class:`ascend_operator.api.SpecError` for a repo id
    or revision the cache cannot store (the model's or a hub adapter's)."""
    return Plans(cache_plan=plan_cache(name, spec, settings),
                 adapter_fetches=plan_adapter_fetches(spec, settings))


def resolve_image(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> str:
    """``spec.image``, or the settings' default for the chip (or the CPU image)."""
    if spec.image:
        return spec.image
    return settings.runtime_image(None if spec.platform == Platform.CPU else spec.npu.chip)


@dataclass(frozen=True, kw_only=True)
class BuildInputs:
    """Everything the builders of one resource share (:meth:`make`)."""

    meta: BuildMeta
    names: ChildNames
    spec: AscendLLMDeploymentSpec
    settings: OperatorSettings
    image: str
    remembered: Remembered
    #: Key for ``status.graph.rememberedFor`` when a pod reports a working mode.
    remembered_key: str
    engine_config: EngineConfig
    #: The hash the pod template carries (``CONFIG_HASH_ANNOTATION``): of the ConfigMap's data
    #: without the remembered start mode.
    config_hash: str
    cache_plan: CachePlan | None
    adapter_fetches: tuple[AdapterFetch, ...]
    budget: StartupBudget

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def namespace(self) -> str:
        return self.meta.namespace

    @property
    def fetches_on_claim(self) -> tuple[AdapterFetch, ...]:
        """The hub adapters' downloads that get a Job: only onto a claim cache."""
        plan = self.cache_plan
        return self.adapter_fetches if plan is not None and plan.claim_name is not None else ()

    @property
    def downloaded(self) -> dict[str, AdapterFetch]:
        """Adapter name -> its download, for the hub adapters whose Job has completed or which the
        live adapters ConfigMap already serves from the same path."""
        remembered = self.remembered
        return {
            adapter: fetch for fetch in self.fetches_on_claim for adapter in fetch.adapters
            if fetch.job_name(self.name, self.settings, self.cache_plan.claim_name if self.cache_plan else None)
            in remembered.adapter_jobs_complete
            or remembered.adapters_served.get(adapter) == str(fetch.request.model_dir)
        }

    @classmethod
    def make(
        cls,
        meta: BuildMeta,
        spec: AscendLLMDeploymentSpec,
        settings: OperatorSettings,
        remembered: Remembered | None = None,
        plans: Plans | None = None,
        *,
        role: PdRoleName | None = None,
    ) -> BuildInputs:
        """The inputs of resource ``meta``; ``plans`` as the caller made them (None: made here).
        The remembered mode is used only while its key matches. ``role``: a disaggregation role's
        inputs (``spec`` is :func:`ascend_operator.builders.disaggregation.role_spec`'s; names are
        the role's)."""
        remembered = remembered or Remembered()
        if plans is None:
            plans = make_plans(meta.name, spec, settings)
        names = ChildNames.for_resource(meta.name) if role is None else ChildNames.for_role(meta.name, role.value)
        image = resolve_image(spec, settings)
        key = remembered_mode_key(spec, image, meta.annotations.get(RETRY_GRAPH_ANNOTATION))
        start_mode = remembered.remembered_mode if remembered.remembered_for == key else None
        config = build_engine_config(meta.name, spec, settings, image=image, cache_plan=plans.cache_plan,
                                     start_mode=start_mode, namespace=meta.namespace, role=role)
        # The pod template carries a hash of the config *without* the remembered start mode:
        # remembering the mode that already runs must not roll healthy pods; new pods read it.
        rolled = config.model_copy(update={"graph": config.graph.model_copy(update={"start_mode": None})})
        rolled_data = build_configmap(meta.name, meta.namespace, names.configmap, rolled)["data"]
        return cls(meta=meta, names=names, spec=spec, settings=settings, image=image, remembered=remembered,
                   remembered_key=key, engine_config=config, config_hash=content_hash(rolled_data),
                   cache_plan=plans.cache_plan, adapter_fetches=plans.adapter_fetches,
                   budget=startup_budget(spec, settings))
