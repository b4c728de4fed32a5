"""``status.lora``: where each LoRA adapter of the spec stands on the replicas (pure).

Read from each replica's runtime state (``RuntimeState.adapters``; a multi-node replica's
leader, which alone loads adapters): per adapter, on how many replicas it is Loaded, on how
many it Failed and the last error; ``replicas`` counts the replicas whose runtime reported. A hub
adapter also carries its ``download`` (the fetch Job's phase, reason and progress), from the
operator's own observation of that Job. :func:`lora_events` posts a Warning when an adapter
fails on every reporting replica, when a replica cannot use the adapters file, or when an
adapter's download fails, on the transition (or a new failure message) only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ascend_runtime.cachelayout import FetchPhase
from ascend_runtime.config import AdapterPhase, RuntimeState

from ascend_operator.api import AscendLLMDeploymentSpec
from ascend_operator.cachestatus import AdapterDownload, describe

#: The longest error kept per adapter (the status must stay small; the pod's /state has all of it).
MAX_ERROR = 1024
ADAPTER_FAILED = "AdapterFailed"
ADAPTERS_FILE_INVALID = "AdaptersFileInvalid"
ADAPTER_DOWNLOAD_FAILED = "AdapterDownloadFailed"


def _download(download: AdapterDownload) -> dict[str, Any]:
    state = download.state
    out: dict[str, Any] = {"source": download.source, "job": download.job, "phase": state.phase.value}
    if state.reason:
        out["reason"] = state.reason
    if state.phase != FetchPhase.COMPLETE:
        # Without the retry countdown, so the status (and the Event) changes only when the download does.
        out["message"] = describe(download.as_cache(), retry=False)[:MAX_ERROR]
    progress = download.progress
    if progress is not None and state.phase == FetchPhase.DOWNLOADING:
        out["bytesDone"] = progress.bytes_done
        if progress.bytes_total is not None:
            out["bytesTotal"] = progress.bytes_total
    return out


def lora_status(spec: AscendLLMDeploymentSpec,
                replicas: Sequence[tuple[str, RuntimeState | None]],
                downloads: Sequence[AdapterDownload] = ()) -> dict[str, Any] | None:
    """``status.lora`` from ``(pod, runtime state)`` per replica and the hub adapters'
    ``downloads``; None while LoRA is off."""
    if spec.lora is None or not spec.lora.enabled:
        return None
    download_of = {adapter: download for download in downloads for adapter in download.adapters}
    reporting = [(pod, state) for pod, state in replicas if state is not None]
    adapters = []
    for adapter in spec.lora.adapters:
        loaded = failed = 0
        last_error: str | None = None
        for pod, state in reporting:
            entry = next((a for a in state.adapters if a.name == adapter.name), None)
            if entry is None:
                continue
            if entry.state == AdapterPhase.LOADED:
                loaded += 1
            elif entry.state == AdapterPhase.FAILED:
                failed += 1
                if last_error is None:
                    last_error = f"{pod}: {entry.last_error or 'failed'}"[:MAX_ERROR]
        item: dict[str, Any] = {"name": adapter.name, "loaded": loaded, "failed": failed}
        if last_error is not None:
            item["lastError"] = last_error
        if adapter.name in download_of:
            item["download"] = _download(download_of[adapter.name])
        adapters.append(item)
    status: dict[str, Any] = {"replicas": len(reporting), "adapters": adapters}
    file_errors = [f"{pod}: {state.adapters_error}" for pod, state in reporting if state.adapters_error]
    if file_errors:
        status["fileError"] = file_errors[0][:MAX_ERROR]
    return status


def _failed_everywhere(lora: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    replicas = lora.get("replicas") or 0
    return {a["name"]: a for a in lora.get("adapters") or [] if replicas > 0 and a.get("failed") == replicas}


def lora_events(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Warnings for an adapter that newly fails on every reporting replica, and for a new
    ``fileError``."""
    before = (previous or {}).get("lora") or {}
    after = new.get("lora") or {}
    events: list[tuple[str, str, str]] = []
    was = _failed_everywhere(before)
    for name, adapter in _failed_everywhere(after).items():
        if name not in was:
            events.append(("Warning", ADAPTER_FAILED, (
                f"adapter {name} failed to load on all {after['replicas']} replica(s) reporting; the base model "
                f"and the other adapters keep serving and the load is retried; "
                f"{adapter.get('lastError') or ''}")))
    if after.get("fileError") and after.get("fileError") != before.get("fileError"):
        events.append(("Warning", ADAPTERS_FILE_INVALID, (
            f"the adapters file cannot be used, the last good set stays in force: {after['fileError']}")))
    failed_before = _failed_downloads(before)
    for name, download in _failed_downloads(after).items():
        if failed_before.get(name) != download:
            events.append(("Warning", ADAPTER_DOWNLOAD_FAILED, (
                f"adapter {name} is not served: {download.get('message') or download['source']}; "
                "the fetch Job is made again after the operator's fetch retry interval")))
    return events


def _failed_downloads(lora: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {a["name"]: a["download"] for a in lora.get("adapters") or []
            if (a.get("download") or {}).get("phase") == FetchPhase.FAILED.value}
