"""The model cache as the status shows it (pure): the fetch Job's state, progress and failure.

A fetch Job is ``Complete`` (condition Complete True), ``Failed`` (condition Failed True: the
reason and message come from the failed pod's termination message, a
:class:`ascend_runtime.cachelayout.FetchFailure`, else from the Job's condition), ``Downloading``
(a pod of it runs; bytes from its ``GET /progress``) or ``Pending``. While the download of the
current model and revision is not complete the workload is held back: new serving pods are made
only from a complete cache.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ascend_runtime.cachelayout import FetchFailure, FetchPhase, FetchProgress
from pydantic import ValidationError

from ascend_operator.api import ModelCacheStatus
from ascend_operator.builders.modelcache import FETCH_CONTAINER
from ascend_operator.conditions import MODEL_CACHED, ConditionValue

__all__ = ["MODEL_CACHED", "AdapterDownload", "CacheObservation", "JobState", "cache_condition",
           "cache_status", "describe", "init_state", "job_state", "running_pod"]
#: The label the Job controller puts on its pods (Kubernetes 1.27 and later).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


@dataclass(frozen=True)
class JobState:
    """What one fetch Job says."""

    phase: FetchPhase
    reason: str | None = None
    message: str | None = None
    #: When the Job failed (its Failed condition's lastTransitionTime), for the retry.
    failed_at: datetime | None = None


@dataclass(frozen=True)
class CacheObservation:
    """The model cache of one resource, for the status."""

    claim_name: str | None
    host_path: str | None
    retained: bool
    #: ``huggingface:Qwen/Qwen2.5-7B-Instruct@<revision>``; None without a hub source.
    source: str | None = None
    job: str | None = None
    state: JobState | None = None
    progress: FetchProgress | None = None
    #: The workload is held back until the download completes (it does not exist yet, or runs
    #: an older model or revision).
    held_back: bool = False
    #: Seconds until a failed Job is replaced by a new one.
    retry_in_s: float | None = None
    #: The request (:func:`~ascend_operator.builders.modelcache.request_digest`) a fetch completed.
    completed_request: str | None = None


@dataclass(frozen=True)
class AdapterDownload:
    """One hub adapter download: the fetch Job of an
    :class:`~ascend_operator.builders.modelcache.AdapterFetch`."""

    job: str
    #: ``huggingface:org/name@revision``.
    source: str
    #: The adapters served from it.
    adapters: tuple[str, ...]
    state: JobState
    progress: FetchProgress | None = None
    retry_in_s: float | None = None

    def as_cache(self) -> CacheObservation:
        """The download in the model cache's terms, for :func:`describe`."""
        return CacheObservation(claim_name=None, host_path=None, retained=True, source=self.source,
                                job=self.job, state=self.state, progress=self.progress,
                                retry_in_s=self.retry_in_s)


def _condition(job: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_ and condition.get("status") == "True":
            return condition
    return None


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _termination_failure(pods: Sequence[Mapping[str, Any]]) -> FetchFailure | None:
    """The latest failed fetch pod's termination message, when it is a FetchFailure."""

    latest: tuple[str, FetchFailure] | None = None
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != FETCH_CONTAINER:
                continue
            terminated = (status.get("state") or {}).get("terminated") or {}
            if not terminated.get("message") or terminated.get("exitCode") in (None, 0):
                continue
            try:
                failure = FetchFailure.model_validate(json.loads(terminated["message"]))
            except (ValueError, ValidationError):
                continue
            when = terminated.get("finishedAt") or ""
            if latest is None or when >= latest[0]:
                latest = (when, failure)
    return latest[1] if latest else None


def job_state(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> JobState:
    """The state of fetch Job ``job`` (None: not made yet) from its conditions and ``pods``."""

    if job is None:
        return JobState(FetchPhase.PENDING, message="the fetch Job is being created")
    if _condition(job, "Complete"):
        return JobState(FetchPhase.COMPLETE)
    failed = _condition(job, "Failed")
    if failed:
        failure = _termination_failure(pods)
        if failure is not None:
            return JobState(FetchPhase.FAILED, failure.reason.value, failure.message,
                            _time(failed.get("lastTransitionTime")))
        return JobState(FetchPhase.FAILED, failed.get("reason") or "JobFailed",
                        failed.get("message") or "the fetch Job failed", _time(failed.get("lastTransitionTime")))
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if running:
        return JobState(FetchPhase.DOWNLOADING, message=f"pod {running[0]['metadata']['name']} is downloading")
    failure = _termination_failure(pods)
    if failure is not None:  # between attempts: the Job retries with backoff
        return JobState(FetchPhase.PENDING, failure.reason.value, f"retrying after: {failure.message}")
    return JobState(FetchPhase.PENDING, message="waiting for the fetch pod to start")


def _init_fetch(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") == FETCH_CONTAINER:
            return status
    return None


def init_state(pods: Sequence[Mapping[str, Any]]) -> JobState:
    """The download of a ``hostPath`` cache, from the serving pods' fetch init containers: each
    node downloads once, and a pod whose init container finished found (or made) the snapshot."""

    statuses = [(pod, status) for pod in pods if (status := _init_fetch(pod)) is not None]
    for pod, status in statuses:
        if "running" in (status.get("state") or {}):
            return JobState(FetchPhase.DOWNLOADING, message=f"pod {pod['metadata']['name']} is downloading")
    for pod, status in statuses:
        for key in ("state", "lastState"):
            terminated = (status.get(key) or {}).get("terminated") or {}
            if terminated.get("exitCode") not in (None, 0):
                failure = _termination_failure([{"status": {"containerStatuses": [
                    {"name": FETCH_CONTAINER, "state": {"terminated": terminated}}]}}])
                if failure is not None:
                    return JobState(FetchPhase.FAILED, failure.reason.value,
                                    f"pod {pod['metadata']['name']}: {failure.message}")
                return JobState(FetchPhase.FAILED, "InitContainerFailed",
                                f"pod {pod['metadata']['name']}: the fetch init container exited with "
                                f"{terminated.get('exitCode')}")
    done = [pod for pod, status in statuses
            if ((status.get("state") or {}).get("terminated") or {}).get("exitCode") == 0]
    if statuses and len(done) == len(statuses):
        return JobState(FetchPhase.COMPLETE)
    return JobState(FetchPhase.PENDING, message="waiting for the serving pods' fetch init containers")


def running_pod(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for pod in pods:
        if (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"):
            return pod
    return None


def _gib(value: int) -> str:
    return f"{value / 2**30:.1f} GiB"


def describe(observation: CacheObservation, *, retry: bool = True) -> str:
    """One line on the download: state, bytes, why (``retry``: and when a failed one is retried;
    conditions leave that out, so their message changes only when the failure does)."""

    state = observation.state
    if state is None:
        return "no download: the model is not from a hub"
    progress = observation.progress
    if state.phase == FetchPhase.COMPLETE:
        return f"{observation.source} is cached"
    if state.phase == FetchPhase.FAILED:
        when = (f"; a new fetch Job in {observation.retry_in_s:.0f} s"
                if retry and observation.retry_in_s is not None else "")
        return f"downloading {observation.source} failed ({state.reason}): {state.message}{when}"
    if progress is not None and progress.bytes_total:
        percent = 100 * progress.bytes_done / progress.bytes_total
        return (f"downloading {observation.source}: {_gib(progress.bytes_done)} of "
                f"{_gib(progress.bytes_total)} ({percent:.0f}%)")
    return f"downloading {observation.source}: {state.message or state.phase.value}"


def cache_condition(observation: CacheObservation) -> ConditionValue:
    """``ModelCached`` (status, reason, message)."""

    state = observation.state
    if state is None:
        return True, "CompileCacheOnly", "the cache volume keeps the compile caches"
    if state.phase == FetchPhase.COMPLETE:
        return True, "Cached", describe(observation)
    if state.phase == FetchPhase.FAILED:
        return False, "DownloadFailed", describe(observation, retry=False)
    return False, "Downloading", describe(observation)


def cache_status(observation: CacheObservation) -> ModelCacheStatus:
    """``status.modelCache``."""

    state = observation.state
    progress = observation.progress
    downloading = progress is not None and state is not None and state.phase == FetchPhase.DOWNLOADING
    return ModelCacheStatus(
        retained_on_delete=observation.retained,
        claim_name=observation.claim_name or None,
        host_path=observation.host_path or None,
        source=observation.source or None,
        job=observation.job or None,
        phase=state.phase.value if state is not None else None,
        reason=(state.reason or None) if state is not None else None,
        message=describe(observation) if state is not None and state.phase != FetchPhase.COMPLETE else None,
        bytes_done=progress.bytes_done if downloading and progress is not None else None,
        bytes_total=progress.bytes_total if downloading and progress is not None else None,
        completed_request=observation.completed_request,
    )
