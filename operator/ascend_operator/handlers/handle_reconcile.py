"""The level-based reconcile of one ``AscendLLMDeployment``.

Create, update, resume and the periodic resync all run :func:`reconcile`, which compares the
desired children with the live ones and writes only differences:

1. parse the spec; an invalid one sets the ``InvalidSpec`` condition (and posts one Event per
   new message), touches no child, and does not raise (kopf would retry a spec that cannot
   succeed; the user's next edit triggers the update handler anyway);
2. ask what the cluster serves (discovery, cached for ``discovery_ttl_s``): it picks the
   autoscaler (``choose_autoscaler``: a KEDA ScaledObject, an HPA, or none and why) and says
   whether a multi-node spec can have its LeaderWorkerSet (``lws_missing``);
3. build the children (pure builders), add the owner reference (this resource, controller);
4. ensure each child (server-side apply only when its spec-hash differs; see ``k8s.Kube.ensure``),
   then delete the children this resource owns that are no longer desired (the Deployment after
   a switch to a LeaderWorkerSet and back, the HPA after a switch to KEDA, an autoscaler after
   autoscaling is turned off). When the LeaderWorkerSet API is missing, steps 3-4 write nothing:
   the children stay as they were (a serving Deployment keeps serving) and the Progressing
   condition says what to install;
5. read the pods (all of the resource's engine pods: LWS group members too), their runtime
   states and the autoscaler's HPA, compute the status, post Events for transitions, patch the
   status only when it changed.

Nothing is returned to kopf: kopf would store a result under ``status.<handler id>``, which the
API server prunes (the status schema does not declare it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import kopf
from ascend_runtime.config import GraphMode

from ascend_operator.api import AscendLLMDeploymentSpec, Platform, SpecError, parse_spec
from ascend_operator.builders import (
    CONFIG_HASH_ANNOTATION,
    AutoscalerChoice,
    BuildMeta,
    Children,
    Observed,
    build_children,
    choose_autoscaler,
    endpoint_url,
    lws_missing,
    selector_string,
)
from ascend_operator.builders.common import RESOURCE_LABEL
from ascend_operator.handlers import OperatorContext, object_lock
from ascend_operator.k8s import CHILD_KINDS, HPA, Outcome
from ascend_operator.names import label_value
from ascend_operator.status import (
    AutoscalingObservation,
    Observation,
    compute_status,
    invalid_spec_status,
    status_patch,
    transition_events,
)

logger = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(tz=timezone.utc)


def _remembered(status: Mapping[str, Any]) -> Observed:
    graph = status.get("graph") or {}
    mode = graph.get("rememberedMode")
    try:
        remembered = GraphMode(mode) if mode else None
    except ValueError:
        remembered = None  # a mode this operator does not know; start from the top instead
    return Observed(remembered_mode=remembered, remembered_for=graph.get("rememberedFor"))


#: KEDA names the HPA it makes for a ScaledObject ``keda-hpa-<ScaledObject name>`` (unless the
#: ScaledObject sets advanced.horizontalPodAutoscalerConfig.name, which the builders never do).
KEDA_HPA_PREFIX = "keda-hpa-"

#: Per-object memo key of the status this operator process last wrote for the object.
WRITTEN_STATUS_KEY = "ascend_written_status"


def _previous_status(body: Mapping[str, Any], memo: Any) -> dict[str, Any]:
    """The status to compare with: the one last written, else the one on the body.

    The body can lag behind our own write (kopf refreshes it with the next watch event, and a
    resync may start in between); comparing with it then would re-send the same status.
    """

    written = memo.get(WRITTEN_STATUS_KEY)
    return dict(written) if written is not None else dict(body.get("status") or {})


async def _publish(ctx: OperatorContext, body: Mapping[str, Any], memo: Any, previous: Mapping[str, Any],
                   status: dict[str, Any]) -> None:
    meta = body["metadata"]
    for type_, reason, message in transition_events(previous, status):
        kopf.event(body, type=type_, reason=reason, message=message[:1024])
    patch = status_patch(previous, status)
    if patch is not None and await ctx.kube.patch_status(meta["namespace"], meta["name"], patch):
        memo[WRITTEN_STATUS_KEY] = status


async def _autoscaling(ctx: OperatorContext, namespace: str, spec: AscendLLMDeploymentSpec,
                      choice: AutoscalerChoice, children: Children) -> AutoscalingObservation | None:
    """The autoscaler as built, with the live HPA that does the scaling (for its status)."""

    auto = spec.autoscaling
    if auto is None or not auto.enabled:
        return None
    provider = name = hpa_name = None
    if children.hpa is not None:
        provider, name = "HorizontalPodAutoscaler", children.names.hpa
        hpa_name = name
    elif children.scaled_object is not None:
        provider, name = "ScaledObject", children.names.scaled_object
        hpa_name = KEDA_HPA_PREFIX + name
    hpa = await ctx.kube.read(HPA, namespace, hpa_name) if hpa_name else None
    return AutoscalingObservation(
        reason=choice.reason, message=choice.message, problem=choice.problem, provider=provider, name=name,
        min_replicas=auto.min_replicas, max_replicas=auto.max_replicas, hpa=hpa,
    )


async def reconcile(ctx: OperatorContext, body: Mapping[str, Any], memo: Any,
                    log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
    """Reconcile one resource (see the module docstring); safe to run any number of times."""

    async with object_lock(memo):
        await _reconcile(ctx, body, memo, log)


async def _reconcile(ctx: OperatorContext, body: Mapping[str, Any], memo: Any,
                     log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
    meta = body["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    generation = int(meta.get("generation") or 0)
    previous = _previous_status(body, memo)
    now = _now()

    try:
        spec = parse_spec(body.get("spec") or {})
    except SpecError as error:
        log.info("refusing the spec: %s", error)
        await _publish(ctx, body, memo, previous, invalid_spec_status(previous, str(error), generation, now))
        return

    served = await ctx.kube.served(ctx.settings.discovery_ttl_s)
    choice = choose_autoscaler(spec, ctx.settings, served)
    missing_lws = lws_missing(spec, served)
    annotations = dict((body.get("metadata") or {}).get("annotations") or {})
    meta = BuildMeta(name, namespace, generation, annotations=annotations)
    children = build_children(meta, spec, ctx.settings, _remembered(previous), autoscaler=choice.kind)
    desired = children.objects()
    kopf.append_owner_reference(desired, owner=body)

    conflicts = []
    if missing_lws is None:
        for child in desired:  # in order: the ConfigMap exists before the pods that mount it
            result = await ctx.kube.ensure(child, uid)
            if result.outcome == Outcome.CONFLICT:
                conflicts.append(result.detail)
            elif result.outcome != Outcome.UNCHANGED:
                log.info("%s %s %s", result.outcome.value, result.kind, result.name)

        owned_selector = f"{RESOURCE_LABEL}={label_value(name)}"
        for kind in CHILD_KINDS:
            keep = {child["metadata"]["name"] for child in desired if child["kind"] == kind.kind}
            for gone in await ctx.kube.prune(kind, namespace, owned_selector, uid, keep):
                log.info("deleted %s %s (no longer desired)", kind.kind, gone)

    # All engine pods of the resource (multi-node: leaders and workers; the status groups them).
    # status.selector (the scale subresource's) is narrower: one pod per replica.
    pods = await ctx.kube.list_pods(namespace, selector_string(name))
    states = await ctx.kube.read_states(namespace, pods)
    template = children.pod_template_annotations()
    observation = Observation(
        name=name,
        generation=generation,
        selector=children.scale_selector or selector_string(name),
        endpoint=endpoint_url(children.names.service, namespace, spec, ctx.settings.cluster_domain),
        resource_name=None if spec.platform == Platform.CPU else (
            spec.npu.resource_name or ctx.settings.resource_name(spec.npu.chip)),
        remembered_for=children.remembered_key,
        template_hash=template.get(CONFIG_HASH_ANNOTATION),
        template_hash_key=CONFIG_HASH_ANNOTATION,
        pods=pods,
        states=states,
        conflicts=tuple(conflicts),
        nodes_per_replica=spec.nodes_per_replica,
        autoscaling=await _autoscaling(ctx, namespace, spec, choice, children),
        lws_missing=missing_lws,
    )
    await _publish(ctx, body, memo, previous, compute_status(spec, observation, previous, now))
