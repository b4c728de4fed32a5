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

from ascend_operator.api import AdapterDownloadStatus, AscendLLMDeploymentSpec, LoraAdapterStatus, LoraStatus
from ascend_operator.cachestatus import AdapterDownload, describe

#: The longest error kept per adapter (the status must stay small; the pod's /state has all of it).
MAX_ERROR = 1024
ADAPTER_FAILED = "AdapterFailed"
ADAPTERS_FILE_INVALID = "AdaptersFileInvalid"
ADAPTER_DOWNLOAD_FAILED = "AdapterDownloadFailed"


def _download(download: AdapterDownload) -> AdapterDownloadStatus:
    state = download.state
    progress = download.progress if state.phase == FetchPhase.DOWNLOADING else None
    return AdapterDownloadStatus(
        source=download.source, job=download.job, phase=state.phase.value, reason=state.reason or None,
        # Without the retry countdown, so the status (and the Event) changes only when the download does.
        message=describe(download.as_cache(), retry=False)[:MAX_ERROR] if state.phase != FetchPhase.COMPLETE
        else None,
        bytes_done=progress.bytes_done if progress is not None else None,
        bytes_total=progress.bytes_total if progress is not None else None,
    )


def lora_status(spec: AscendLLMDeploymentSpec,
                replicas: Sequence[tuple[str, RuntimeState | None]],
                downloads: Sequence[AdapterDownload] = ()) -> LoraStatus | None:
    """``status.lora`` from ``(pod, runtime state)`` per replica and the hub adapters'
    ``downloads``; None while LoRA is off."""
    if spec.lora is None or not spec.lora.enabled:
        return None
    download_of = {adapter: download for download in downloads for adapter in download.adapters}
    reporting = [(pod, state) for pod, state in replicas if state is not None]
    adapters: list[LoraAdapterStatus] = []
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
        download = download_of.get(adapter.name)
        adapters.append(LoraAdapterStatus(name=adapter.name, loaded=loaded, failed=failed, last_error=last_error,
                                          download=_download(download) if download is not None else None))
    file_errors = [f"{pod}: {state.adapters_error}" for pod, state in reporting if state.adapters_error]
    return LoraStatus(replicas=len(reporting), adapters=adapters,
                      file_error=file_errors[0][:MAX_ERROR] if file_errors else None)


def adapters_settling(lora: Mapping[str, Any] | None) -> bool:
    """Whether a reporting replica has neither loaded nor failed an adapter of the spec yet (its
    adapters file or the load is on the way), downloads aside (polled on their own). A load
    changes no API object, so the operator polls the runtimes meanwhile; without it the status
    caught up only at the next resync (on the real node, 60 s after the engines had loaded)."""

    if not lora:
        return False
    replicas = lora.get("replicas", 0)
    return any(adapter.get("loaded", 0) + adapter.get("failed", 0) < replicas
               for adapter in lora.get("adapters", [])
               if (adapter.get("download") or {}).get("phase", FetchPhase.COMPLETE.value) == FetchPhase.COMPLETE.value)


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
