"""The level-based reconcile of one ``AscendLLMDeployment``, run by the work queue.

Every trigger (the resource's watch event, a child's or pod's event, the requeue timer) runs
:func:`reconcile_key`: it checks the spec, builds the desired children from one set of inputs
(:class:`ascend_operator.builders.BuildInputs`), writes only the children that differ from the
live ones the watches show, and patches the status when it differs from the server's. The steps
of a pass and when the next one is due: ``docs/operator.md`` ("The reconcile pass").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import kopf
from ascend_runtime.cachelayout import FetchPhase
from ascend_runtime.config import GraphMode, RuntimeState

from ascend_operator.api import AscendLLMDeploymentSpec, Phase, Platform, SpecError
from ascend_operator.builders import (
    CONFIG_HASH_ANNOTATION,
    AutoscalerChoice,
    BuildMeta,
    Children,
    ChildrenSummary,
    Remembered,
    build_children,
    choose_autoscaler,
    endpoint_url,
    lws_missing,
    routing_missing,
    selector_labels,
    selector_string,
)
from ascend_operator.builders.adapters import served_adapters
from ascend_operator.builders.modelcache import CachePlan, fetch_job_name
from ascend_operator.builders.routing import RoutingNames, build_route, resolve_gateway, routing_enabled
from ascend_operator.cachestatus import AdapterDownload, CacheObservation
from ascend_operator.handlers import OperatorContext, handle_modelcache
from ascend_operator.k8s import (
    CHILD_KINDS,
    CONFIGMAP,
    HPA,
    HTTP_ROUTE,
    INFERENCE_POOL,
    JOB,
    ChildRefused,
    NamespaceTerminating,
    Outcome,
    spec_hash,
)
from ascend_operator.drift import find_drift
from ascend_operator.lastpass import Inputs, LastPass, same_states, skippable
from ascend_operator.lorastatus import adapters_settling
from ascend_operator.podreads import state_targets
from ascend_operator.names import ChildNames, label_value
from ascend_operator.passmemo import children_marks, inputs_digest
from ascend_operator.routeshadow import Shadow, shadowing_routes
from ascend_operator.store import key_of
from ascend_operator.status import (
    AutoscalingObservation,
    Observation,
    RoleObservation,
    RoutingObservation,
    compute_status,
    invalid_spec_status,
    status_patch,
    transition_events,
)

logger = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(tz=timezone.utc)


def _remembered(status: Mapping[str, Any]) -> Remembered:
    graph = status.get("graph") or {}
    mode = graph.get("rememberedMode")
    try:
        remembered = GraphMode(mode) if mode else None
    except ValueError:
        remembered = None  # a mode this operator does not know; start from the top instead
    return Remembered(remembered_mode=remembered, remembered_for=graph.get("rememberedFor"))


#: KEDA names the HPA it makes for a ScaledObject ``keda-hpa-<ScaledObject name>`` (unless the
#: ScaledObject sets advanced.horizontalPodAutoscalerConfig.name, which the builders never do).
KEDA_HPA_PREFIX = "keda-hpa-"

#: Phases after which nothing changes by itself: the resource is polled at the resync interval.
_SETTLED = frozenset({Phase.READY, Phase.STOPPED, Phase.FAILED, Phase.DEGRADED})


async def _publish(ctx: OperatorContext, body: Mapping[str, Any], status: dict[str, Any]) -> bool:
    """Events for the transitions, then the status patch when it differs from the server's status
    (the store keeps the server's body, updated from the patch response itself); whether it
    posted or patched anything."""

    meta = body["metadata"]
    previous = body.get("status") or {}
    events = transition_events(previous, status)
    for type_, reason, message in events:
        kopf.event(body, type=type_, reason=reason, message=message[:1024])
    patch = status_patch(previous, status)
    if patch is not None:
        updated = await ctx.kube.patch_status(meta["namespace"], meta["name"], patch)
        if updated is not None:
            ctx.store.put(updated)
    return bool(events) or patch is not None


async def _autoscaling(ctx: OperatorContext, namespace: str, label: str, spec: AscendLLMDeploymentSpec,
                      choice: AutoscalerChoice, children: ChildrenSummary,
                      names: ChildNames) -> AutoscalingObservation | None:
    """The autoscaler as built, with the live HPA that does the scaling (for its status)."""

    auto = spec.autoscaling
    if auto is None or not auto.enabled:
        return None
    provider = name = hpa_name = None
    if children.autoscaler == "hpa":
        provider, name = "HorizontalPodAutoscaler", names.hpa
        hpa_name = name
    elif children.autoscaler == "keda":
        provider, name = "ScaledObject", names.scaled_object
        hpa_name = KEDA_HPA_PREFIX + name
    hpa = None
    if children.autoscaler == "hpa":  # our own child: the watches show it
        hpa = ctx.watch_cache.get(HPA.kind, namespace, names.hpa, label)
    if hpa is None and hpa_name:  # KEDA's HPA carries no label of ours
        hpa = await ctx.kube.read(HPA, namespace, hpa_name)
    return AutoscalingObservation(
        reason=choice.reason, message=choice.message, problem=choice.problem, provider=provider, name=name,
        min_replicas=auto.min_replicas, max_replicas=auto.max_replicas, hpa=hpa,
    )


def _route_shadows(ctx: OperatorContext, name: str, namespace: str, label: str, spec: AscendLLMDeploymentSpec,
                   missing: str | None) -> tuple[Shadow, ...]:
    """The routes on the resource's Gateway that would win over its own (routeshadow.py): the
    operator's routes of every namespace it watches, as the watches show them."""

    if missing is not None or not routing_enabled(spec):
        return ()
    route = build_route(name, namespace, spec, ctx.settings)
    if route is None:
        return ()
    own = ctx.watch_cache.get(HTTP_ROUTE.kind, namespace, route["metadata"]["name"], label)
    if own is not None and own["metadata"].get("creationTimestamp"):
        route["metadata"]["creationTimestamp"] = own["metadata"]["creationTimestamp"]
    live = (ctx.watch_cache.get(HTTP_ROUTE.kind, ns, route_name, route_label)
            for ns, route_name, route_label in ctx.watch_cache.entries(HTTP_ROUTE.kind))
    return tuple(shadowing_routes(route, (body for body in live if body is not None)))


async def _routing(ctx: OperatorContext, name: str, namespace: str, label: str, spec: AscendLLMDeploymentSpec,
                   missing: str | None, states: Mapping[str, Any],
                   shadows: tuple[Shadow, ...] = ()) -> RoutingObservation | None:
    """spec.routing as made, with the live pool and the pods' vLLM versions. The pool is read from
    the API server: gateways write its status, and kopf's watch of a kind whose CRD was
    installed after the operator started may begin late."""

    if not routing_enabled(spec):
        return None
    names = RoutingNames.for_resource(name)
    gateway = resolve_gateway(spec, ctx.settings)
    shown = f"{gateway.namespace or namespace}/{gateway.name}" if gateway is not None else None
    pool = None if missing else await ctx.kube.read(INFERENCE_POOL, namespace, names.pool)
    if pool is not None:
        ctx.watch_cache.put(pool)
    versions = sorted({state.versions.get("vllm") for state in states.values()
                       if state is not None and state.versions.get("vllm")})
    return RoutingObservation(pool_name=names.pool, epp_name=names.epp,
                              route_name=names.route if gateway and not shadows else None,
                              gateway=shown, missing=missing, pool=pool, vllm_versions=versions,
                              shadowed_by=tuple(shadow.describe() for shadow in shadows))


async def reconcile_key(ctx: OperatorContext, key: str) -> float | None:
    """Reconcile the resource ``namespace/name`` as the store has it; the seconds until the next
    run (``None``: not again until an event). Raises on failure (the queue backs off)."""

    states = None
    last = ctx.last_passes.get(key)
    if last is not None:
        # Skipped when nothing it would read changed since a pass that wrote nothing
        # (ascend_operator.lastpass): only the runtime states are read again, a settled one
        # less and less often (podreads.Settled).
        namespace, _, name = key.partition("/")
        inputs = Inputs(ctx.store.version(key), await ctx.kube.served(ctx.settings.discovery_ttl_s), ctx.settings,
                        ctx.watch_cache.changed(namespace, label_value(name)))
        if inputs.same(last.inputs):
            states = await ctx.pods.read_targets(namespace, last.targets, settled=True)
            if same_states(last.states, states):
                return last.due_s
        ctx.last_passes.forget(key)
    body = ctx.store.get(key)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None  # gone or going: the garbage collector removes the children
    log = logging.LoggerAdapter(logger, {"resource": key})
    done = await reconcile(ctx, body, log, states=states)
    if done is None:
        return None
    due = ctx.settings.resync_interval_s if done.phase in _SETTLED else ctx.settings.progress_poll_interval_s
    due = min(due, done.due_s) if done.due_s is not None else due
    if done.read is not None:
        ctx.last_passes.record(key, replace(done.read, due_s=due))
    return due


@dataclass
class ChildrenPass:
    """What ensuring the children found: the live workload, the model cache's state, children in
    conflict, the refusal that stopped the pass, and whether every child was as built."""

    workload: Mapping[str, Any] | None = None
    model_cache: CacheObservation | None = None
    conflicts: list[str] = field(default_factory=list)
    refused: ChildRefused | None = None
    verified: bool = False
    #: Whether the pass wrote (applied or deleted) a child.
    wrote: bool = False


@dataclass(frozen=True)
class PassResult:
    """What a pass wrote, and when something it waits for is due (a failed fetch Job's retry)."""

    phase: Phase
    due_s: float | None = None
    #: What the pass read, when it wrote nothing and read only what the watches show: the next
    #: pass with the same inputs is skipped (``ascend_operator.lastpass``).
    read: LastPass | None = None


async def reconcile(ctx: OperatorContext, body: Mapping[str, Any],
                    log: logging.Logger | logging.LoggerAdapter[Any],
                    states: Mapping[str, RuntimeState | None] | None = None) -> PassResult | None:
    """Reconcile one resource (docs/operator.md, "The reconcile pass"); safe to run any number of times.
    Returns the phase written (``None`` for a refused spec). ``states``: the running pods' runtime
    states, when the caller has just read them."""

    meta = body["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    # The versions of what the pass reads from the watches, before it reads any of them.
    objects = ctx.watch_cache.changed(namespace, label_value(name))
    meta_version = meta.get("resourceVersion")
    generation = int(meta.get("generation") or 0)
    previous = body.get("status") or {}
    now = _now()

    try:
        # Parsed, within the policies, planned and through the LoRA guard: once per generation.
        checked = ctx.specs.check(key_of(namespace, name), body, ctx.settings)
        spec, plans, warnings = checked.spec, checked.plans, checked.warnings
    except SpecError as error:
        log.info("%s: refusing the spec: %s", f"{namespace}/{name}", error)
        await _publish(ctx, body, invalid_spec_status(previous, str(error), generation, now))
        return None

    served = await ctx.kube.served(ctx.settings.discovery_ttl_s)
    choice = choose_autoscaler(spec, ctx.settings, served)
    missing_lws = lws_missing(spec, served)
    missing_routing = routing_missing(spec, ctx.settings, served)
    annotations = dict((body.get("metadata") or {}).get("annotations") or {})
    meta = BuildMeta(name, namespace, generation, annotations=annotations)
    label = label_value(name)
    cache_plan = plans.cache_plan
    # The hub adapters' downloads before the build: a completed one puts its adapters in the ConfigMap.
    downloads = await handle_modelcache.observe_adapters(
        ctx, name, namespace, label, plans.adapter_fetches, now,
        claim_name=cache_plan.claim_name if cache_plan is not None else None)
    completed_before = (previous.get("modelCache") or {}).get("completedRequest")
    names = ChildNames.for_resource(name)
    remembered = replace(
        _remembered(previous),
        adapter_jobs_complete=frozenset(d.job for d in downloads if d.state.phase == FetchPhase.COMPLETE),
        adapters_served=served_adapters(ctx.watch_cache.get(CONFIGMAP.kind, namespace, names.adapters, label)),
    )
    # All engine pods of the resource (multi-node: leaders and workers; the status groups them).
    # status.selector (the scale subresource's) is narrower: one pod per replica.
    pods = ctx.watch_cache.pods(namespace, label, selector_labels(name))
    key = key_of(namespace, name)
    # Nothing to apply or delete when neither the build's inputs nor a child changed since a full
    # pass found every child as built (ascend_operator.passmemo); a model cache's or hub adapters'
    # passes observe Jobs and claims, so they are always full.
    # A younger route with the same model names on the same Gateway is not made (routeshadow.py).
    shadows = _route_shadows(ctx, name, namespace, label, spec, missing_routing)
    if shadows:
        ctx.shadowed.add(key)
    else:
        ctx.shadowed.discard(key)
    digest = (inputs_digest(body, remembered, (choice.kind, missing_lws, missing_routing,
                                               [shadow.route for shadow in shadows]), ctx.settings)
              if cache_plan is None and not plans.adapter_fetches else None)
    marks = children_marks(ctx.watch_cache, CHILD_KINDS, namespace, label) if digest is not None else 0
    summary = ctx.passes.unchanged(key, digest, marks) if digest is not None else None
    if summary is not None:
        found = ChildrenPass(workload=ctx.watch_cache.get(summary.workload_kind, namespace, summary.workload_name, label),
                             verified=True)
    else:
        children = build_children(meta, spec, ctx.settings, remembered, autoscaler=choice.kind,
                                  routing=missing_routing is None, plans=plans)
        if shadows:
            children = replace(children, routing=tuple(obj for obj in children.routing if obj["kind"] != HTTP_ROUTE.kind))
        summary = children.summary()
        ensured = await _ensure_children(ctx, body, children, cache_plan, pods, missing_lws, log, now)
        if ensured is None:
            return None
        found = ensured
        if digest is not None and found.verified:
            # The marks as the pass left them: its own writes' answers are in the watch cache.
            marks = children_marks(ctx.watch_cache, CHILD_KINDS, namespace, label)
            ctx.passes.record(key, digest, marks, summary, ctx.settings)
        else:
            ctx.passes.forget(key)
    model_cache, refused = found.model_cache, found.refused
    if cache_plan is not None and model_cache is None:  # no Job, or the pass stopped before it
        job = (ctx.watch_cache.get(JOB.kind, namespace, fetch_job_name(name, cache_plan, ctx.settings), label)
               if cache_plan.by_job else None)
        model_cache = await handle_modelcache.observe(ctx, name, namespace, label, cache_plan, job, pods, now,
                                                      completed_before)
    targets = state_targets(pods)
    if states is None or set(states) != {target.name for target in targets}:
        states = await ctx.pods.read_states(namespace, pods, settled=reads_settled(found, previous.get("lora")))
    else:
        states = {**dict.fromkeys(pod["metadata"]["name"] for pod in pods), **states}
    observation = Observation(
        name=name,
        generation=generation,
        selector=summary.scale_selector or selector_string(name),
        endpoint=endpoint_url(names.service, namespace, spec, ctx.settings.cluster_domain),
        resource_name=None if spec.platform == Platform.CPU else (
            spec.npu.resource_name or ctx.settings.resource_name(spec.npu.chip)),
        remembered_for=summary.remembered_key,
        template_hash=summary.template_hash,
        template_hash_key=CONFIG_HASH_ANNOTATION,
        pods=pods,
        states=states,
        conflicts=tuple(found.conflicts),
        nodes_per_replica=spec.nodes_per_replica,
        autoscaling=await _autoscaling(ctx, namespace, label, spec, choice, summary, names),
        routing=await _routing(ctx, name, namespace, label, spec, missing_routing, states, shadows),
        lws_missing=missing_lws,
        refused=str(refused) if refused is not None else None,
        workload=found.workload,
        cache=model_cache,
        adapter_downloads=downloads,
        lora_warnings=tuple(warnings),
        roles={role: RoleObservation(workload, template_hash, nodes)
               for role, workload, template_hash, nodes in summary.roles},
    )
    status = compute_status(spec, observation, previous, now)
    published = await _publish(ctx, body, status)
    if refused is not None:
        raise refused  # retried with backoff; the status already says why
    quiet = (found.verified and not found.wrote and not found.conflicts and not published
             and skippable(cache=cache_plan is not None, adapters=bool(plans.adapter_fetches),
                           routing=routing_enabled(spec), keda=summary.autoscaler == "keda"))
    read = LastPass(Inputs(meta_version, served, ctx.settings, objects), targets,
                    {target.name: states[target.name] for target in targets}, None) if quiet else None
    return PassResult(Phase(status["phase"]), _due(ctx, model_cache, downloads, status.get("lora")), read)


async def _ensure_children(ctx: OperatorContext, body: Mapping[str, Any], children: Children,
                           cache_plan: CachePlan | None,
                           pods: Sequence[Mapping[str, Any]], missing_lws: str | None,
                           log: logging.Logger | logging.LoggerAdapter[Any], now: datetime) -> ChildrenPass | None:
    """Ensure each child in order, then delete those no longer desired (step 4 of
    docs/operator.md, "The reconcile pass"); ``None`` when the namespace is being deleted."""

    meta = body["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    label = label_value(name)
    desired = children.objects()
    kopf.append_owner_reference(desired, owner=body)
    found = ChildrenPass()
    if missing_lws is not None:
        return found
    workload_kind = children.workload["kind"]
    changed = False
    for child in [children.cache_claim, *desired]:  # in order: what pods mount exists first
        if child is None:
            continue
        if child is children.workload and found.model_cache is not None and found.model_cache.held_back:
            # New pods start only from a complete cache; pods already running stay as they are.
            found.workload = ctx.watch_cache.get(workload_kind, namespace, child["metadata"]["name"], label)
            changed = True
            continue
        try:
            if child is children.cache_claim:  # not watched: ensure_claim reads it
                result = await handle_modelcache.ensure_claim(ctx, body, children, label)
                assert result is not None
            else:
                known = ctx.watch_cache.get(child["kind"], namespace, child["metadata"]["name"], label)
                result = await ctx.kube.ensure(child, uid, known)
        except NamespaceTerminating:
            # The namespace (and so this resource) is going: a child deleted by it is not
            # drift, and nothing can be written there any more.
            log.debug("%s/%s: the namespace is being deleted", namespace, name)
            return None
        except ChildRefused as error:
            found.refused = error
            log.warning("%s/%s: %s", namespace, name, error)
            if child is children.cache_claim and error.live_serves:
                continue  # the claim as it is still serves: the rest is made (a refused child blocks no other)
            break
        if result.outcome == Outcome.CONFLICT:
            found.conflicts.append(result.detail)
            if child is children.cache_claim:
                break  # pods could not mount the cache: nothing after it is made
            continue
        if result.outcome != Outcome.UNCHANGED:
            # A write verifies its child when the server's answer is as built (what the next
            # pass would check): the pass memo then needs no second full pass after a create.
            found.wrote = True
            changed = changed or not _as_built(child, result.live) or child is children.cache_claim
            if result.live is not None and child is not children.cache_claim:  # claims are not watched
                ctx.watch_cache.put(result.live)
            log.info("%s/%s: %s %s %s %s", namespace, name, result.outcome.value, result.kind, result.name,
                     result.detail)
        if result.kind == workload_kind:
            found.workload = result.live
        if child is children.fetch_job and cache_plan is not None:
            found.model_cache = await handle_modelcache.observe(
                ctx, name, namespace, label, cache_plan, result.live, pods, now,
                ((body.get("status") or {}).get("modelCache") or {}).get("completedRequest"))

    if found.refused is None:
        for kind in CHILD_KINDS:
            keep = {child["metadata"]["name"] for child in desired if child["kind"] == kind.kind}
            present = ctx.watch_cache.objects(kind.kind, namespace, label)
            for gone in await ctx.kube.prune(kind, namespace, present, uid, keep):
                changed = found.wrote = True
                ctx.watch_cache.remove(kind.kind, namespace, gone)
                log.info("%s/%s: deleted %s %s (no longer desired)", namespace, name, kind.kind, gone)
    found.verified = not (changed or found.conflicts or found.refused)
    return found


def reads_settled(found: ChildrenPass, lora: Mapping[str, Any] | None) -> bool:
    """Whether a full pass reads the runtimes as a skipped pass does (a settled one only when its
    wait ran out): it wrote nothing (a child's status changed). One that wrote may have written
    what they act on (the engine config, an adapter), and one while adapters load may be the pass
    that sees them loaded: those ask every runtime, which starts the waits again."""
    return (found.verified and not found.wrote and not found.conflicts and found.refused is None
            and not adapters_settling(lora))


def _as_built(child: Mapping[str, Any], live: Mapping[str, Any] | None) -> bool:
    """Whether the server's answer to a write of ``child`` is the child as built (same spec-hash,
    no drift): what a later pass would find, so that pass can be skipped."""
    return live is not None and spec_hash(live) == spec_hash(child) and not find_drift(child, live)


def _due(ctx: OperatorContext, model_cache: CacheObservation | None,
         downloads: Sequence[AdapterDownload], lora: Mapping[str, Any] | None = None) -> float | None:
    """Seconds until a failed fetch Job's retry, or the progress poll while an adapter downloads
    or is being loaded (neither shows in an API object); None when nothing is due."""

    due = [d.retry_in_s for d in (model_cache, *downloads) if d is not None and d.retry_in_s is not None]
    if any(d.state.phase in (FetchPhase.PENDING, FetchPhase.DOWNLOADING) for d in downloads) \
            or adapters_settling(lora):
        due.append(ctx.settings.progress_poll_interval_s)
    return min(due) if due else None
