"""The model cache's part of a reconcile pass: the claim, the fetch Job's state, its retry.

Called by :mod:`.handle_reconcile`: :func:`ensure_claim` before the children (the claim is not
owned by the resource unless ``deleteWithResource``, so it is no ordinary child);
:func:`observe` once the fetch Job was ensured, to decide whether the workload is held back and
what the status says. A Job that failed for good is deleted ``fetch_retry_interval_s`` after its
failure, and the next pass makes a new one (a fixed token Secret is no spec change).
:func:`observe_adapters` does the same for the hub adapters' fetch Jobs, before the children
are built (their state decides the adapters ConfigMap's entries).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import kopf
from ascend_runtime.cachelayout import FetchPhase, FetchProgress

from ascend_operator.builders import Children
from ascend_operator.builders.common import RESOURCE_LABEL
from ascend_operator.builders.modelcache import (
    AdapterFetch,
    CachePlan,
    cache_host_dir,
    fetch_job_name,
    request_digest,
)
from ascend_operator.cachestatus import (
    JOB_NAME_LABEL,
    AdapterDownload,
    CacheObservation,
    JobState,
    init_state,
    job_state,
    running_pod,
)
from ascend_operator.handlers import OperatorContext
from ascend_operator.k8s import JOB, EnsureResult

logger = logging.getLogger(__name__)


async def ensure_claim(ctx: OperatorContext, body: Mapping[str, Any], children: Children,
                       label: str) -> EnsureResult | None:
    """Apply ``cache.create``'s claim (missing, changed or drifted); raises ChildRefused."""

    claim = children.cache_claim
    if claim is None:
        return None
    if children.cache_claim_owned:
        kopf.append_owner_reference(claim, owner=body)

    def ours(live: Mapping[str, Any]) -> bool:  # a kept claim carries only the resource's label
        return ((live.get("metadata") or {}).get("labels") or {}).get(RESOURCE_LABEL) == label

    return await ctx.kube.ensure(claim, body["metadata"]["uid"], ours=ours)


def _source(plan: CachePlan) -> str | None:
    request = plan.request
    if request is None:
        return None
    return f"{request.hub.value}:{request.repo_id}@{request.revision or 'default'}"


async def observe(ctx: OperatorContext, name: str, namespace: str, label: str, plan: CachePlan,
                  job: Mapping[str, Any] | None, engine_pods: list[dict[str, Any]],
                  now: datetime, completed_before: str | None = None) -> CacheObservation:
    """The cache as the status shows it; deletes a failed Job whose retry time has come.

    ``completed_before``: the request a fetch completed for earlier (``status.modelCache.
    completedRequest``). A new Job for the same request (its template changed: another fetch
    image or token reference) holds nothing back: the weights are there, and the Job only
    checks them against the marker."""

    create = plan.spec.create
    retained = plan.spec.host_path is not None or plan.spec.claim_name is not None or not (
        create is not None and create.delete_with_resource)
    host_dir = cache_host_dir(plan.spec.host_path, namespace, ctx.settings) if plan.spec.host_path else None
    base = dict(claim_name=plan.claim_name, host_path=host_dir, retained=retained, source=_source(plan))
    if plan.request is None:
        return CacheObservation(**base)
    if plan.by_init_container:
        return CacheObservation(**base, state=init_state(engine_pods))

    job_name = fetch_job_name(name, plan, ctx.settings)
    state, progress, retry_in = await _observe_job(ctx, name, namespace, label, job_name, job, now)
    requested = request_digest(plan.request)
    complete = state.phase == FetchPhase.COMPLETE or completed_before == requested
    return CacheObservation(**base, job=job_name, state=state, progress=progress, held_back=not complete,
                            retry_in_s=retry_in, completed_request=requested if complete else None)


async def observe_adapters(ctx: OperatorContext, name: str, namespace: str, label: str,
                           fetches: Sequence[AdapterFetch], now: datetime,
                           claim_name: str | None) -> tuple[AdapterDownload, ...]:
    """The hub adapters' fetch Jobs as the watches show them (before the children are built: a
    completed one lets its adapters into the adapters ConfigMap); deletes a failed Job whose retry
    time has come (the same pass makes a new one)."""

    downloads = []
    for fetch in fetches:
        job_name = fetch.job_name(name, ctx.settings, claim_name)
        job = ctx.watch_cache.get(JOB.kind, namespace, job_name, label)
        state, progress, retry_in = await _observe_job(ctx, name, namespace, label, job_name, job, now)
        downloads.append(AdapterDownload(job=job_name, source=fetch.source, adapters=fetch.adapters,
                                         state=state, progress=progress, retry_in_s=retry_in))
    return tuple(downloads)


async def _observe_job(ctx: OperatorContext, name: str, namespace: str, label: str, job_name: str,
                       job: Mapping[str, Any] | None, now: datetime
                       ) -> tuple[JobState, FetchProgress | None, float | None]:
    """A fetch Job's state, its progress while it downloads, and the seconds until a failed one is
    replaced (deleted here once that time has come)."""

    pods = ctx.watch_cache.pods(namespace, label, {JOB_NAME_LABEL: job_name})
    state = job_state(job, pods)
    progress = None
    retry_in = None
    if state.phase == FetchPhase.DOWNLOADING and (pod := running_pod(pods)) is not None:
        progress = await ctx.pods.read_progress(namespace, pod)
    elif state.phase == FetchPhase.FAILED and state.failed_at is not None:
        waited = (now - state.failed_at).total_seconds()
        retry_in = max(0.0, ctx.settings.fetch_retry_interval_s - waited)
        if retry_in == 0.0 and await ctx.kube.delete(JOB, namespace, job_name):
            ctx.watch_cache.remove(JOB.kind, namespace, job_name)
            logger.info("%s/%s: deleted the failed fetch Job %s; a new one is made",
                        namespace, name, job_name)
            state = JobState(FetchPhase.PENDING, state.reason, f"retrying after: {state.message}")
            retry_in = None
    return state, progress, retry_in
