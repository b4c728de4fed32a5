"""Hub LoRA adapters (``source.huggingFace`` / ``source.modelScope``) on the operator side: their
fetch Jobs, the adapters ConfigMap entry once the download is complete, what rolls pods and what
does not, the refusals naming the field, and status.lora's download (pure)."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ascend_operator.api import AscendLLMDeploymentStatus, SpecError, parse_spec
from ascend_operator.builders import BuildMeta, Children, Remembered, build_children
from ascend_operator.builders.adapters import served_adapters
from ascend_operator.builders.modelcache import CACHE_DIR, plan_adapter_fetches
from ascend_operator.cachestatus import AdapterDownload, JobState
from ascend_operator.lorastatus import lora_events, lora_status
from ascend_operator.settings import load_settings
from ascend_runtime.cachelayout import FetchPhase, FetchProgress, FetchRequest, Hub, marker_path, model_dir
from ascend_runtime.config import ADAPTERS_FILE_KEY, parse_adapter_set

SETTINGS = load_settings({"ASCEND_LLM_OPERATOR_HF_ENDPOINT": "https://hf-mirror.com"})
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
CACHE = {"create": {"size": "10Gi"}}
SQL = {"name": "sql", "source": {"huggingFace": {"id": "org/sql-lora", "revision": "refs/pr/1",
                                                 "tokenSecretRef": {"name": "hf", "key": "token"}}}}
SQL_TOO = {"name": "sql-too", "source": copy.deepcopy(SQL["source"])}  # the same repo and revision
CHAT = {"name": "chat", "source": {"modelScope": {"id": "org/chat-lora"}}}
ON_CLAIM = {"name": "claim", "source": {"pvc": {"claimName": "adapters", "subPath": "claim"}}}


def lora_wire(*args: Any) -> dict[str, Any] | None:
    """``status.lora`` as written (camelCase JSON), or None while LoRA is off."""
    status = lora_status(*args)
    return status.wire() if status is not None else None


def spec(*adapters: dict[str, Any], model: dict[str, Any] | None = None) -> dict[str, Any]:
    base = model or {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}, "revision": "main", "cache": CACHE}
    return {"model": base, "platform": "CPU", "lora": {"adapters": list(adapters)}}


def render(raw: dict[str, Any], remembered: Remembered | None = None, name: str = "demo") -> Children:
    children = build_children(BuildMeta(name, "llm"), parse_spec(raw), SETTINGS, remembered)
    for obj in children.objects():
        # kubernetes-validate's Job schema still requires onPodConditions[].status, which the API
        # server defaults (the cluster tier applies these Jobs).
        if obj["kind"] != "Job":
            kubernetes_validate.validate(obj, "1.30", strict=True)
    return children


def entries(children: Children) -> list[dict[str, Any]]:
    data = yaml.safe_load(children.adapters_configmap["data"][ADAPTERS_FILE_KEY])
    parse_adapter_set(data)  # what the runtime reads
    return data["adapters"]


def job_names(children: Children) -> list[str]:
    return [job["metadata"]["name"] for job in children.adapter_fetch_jobs]


# --- the Jobs ---------------------------------------------------------------------------------


def test_each_hub_adapter_repo_and_revision_gets_a_fetch_job_like_the_models() -> None:
    children = render(spec(SQL, SQL_TOO, CHAT, ON_CLAIM))
    sql_job, chat_job = children.adapter_fetch_jobs  # sql and sql-too share one download
    # The same Job as a model from that repo would get, but named and labelled as an adapter's.
    as_model = render({"model": {"huggingFace": {"id": "org/sql-lora"}, "revision": "refs/pr/1", "cache": CACHE,
                                 "tokenSecretRef": {"name": "hf", "key": "token"}}, "platform": "CPU"}).fetch_job
    expected = copy.deepcopy(as_model)
    expected["metadata"]["name"] = sql_job["metadata"]["name"]
    for labels in (expected["metadata"]["labels"], expected["spec"]["template"]["metadata"]["labels"]):
        labels["app.kubernetes.io/component"] = "adapter-fetch"
    expected["metadata"]["annotations"] = sql_job["metadata"]["annotations"]  # the spec-hash of this Job
    assert sql_job == expected
    assert sql_job["metadata"]["name"].startswith("demo-adapter-")
    container = sql_job["spec"]["template"]["spec"]["containers"][0]
    assert [e for e in container["env"] if "valueFrom" in e] == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]
    assert FetchRequest.model_validate_json(container["command"][3]) == FetchRequest(
        hub=Hub.HUGGINGFACE, repo_id="org/sql-lora", revision="refs/pr/1", cache_root=CACHE_DIR,
        endpoint="https://hf-mirror.com")
    assert sql_job["spec"]["template"]["spec"]["volumes"][0] == {
        "name": "model-cache", "persistentVolumeClaim": {"claimName": "demo-model-cache"}}
    chat = chat_job["spec"]["template"]["spec"]["containers"][0]
    assert not [e for e in chat["env"] if "valueFrom" in e]  # no token: a public repo
    assert FetchRequest.model_validate_json(chat["command"][3]).hub is Hub.MODELSCOPE
    # Apply order: after the model's Job, before the workload; the model's Job is still its own.
    objects = children.objects()
    assert objects.index(children.fetch_job) < objects.index(sql_job) < objects.index(children.workload)
    assert children.fetch_job["metadata"]["name"] not in job_names(children)


def test_another_revision_or_token_is_another_job_and_the_models_job_does_not_change() -> None:
    base = render(spec(SQL))
    other_revision = copy.deepcopy(SQL)
    other_revision["source"]["huggingFace"]["revision"] = "main"
    other_token = copy.deepcopy(SQL)
    other_token["source"]["huggingFace"]["tokenSecretRef"]["key"] = "other"
    names = {job_names(render(spec(adapter)))[0] for adapter in (SQL, other_revision, other_token)}
    assert len(names) == 3
    assert render(spec(other_revision)).fetch_job == base.fetch_job == render(spec()).fetch_job


# --- the ConfigMap and the pods -----------------------------------------------------------------


def test_a_hub_adapter_enters_the_configmap_only_once_its_job_completed() -> None:
    pending = render(spec(ON_CLAIM, SQL, SQL_TOO, CHAT))
    assert [entry["name"] for entry in entries(pending)] == ["claim"]
    sql_job, chat_job = job_names(pending)
    done = render(spec(ON_CLAIM, SQL, SQL_TOO, CHAT), Remembered(adapter_jobs_complete=frozenset({sql_job})))
    snapshot = model_dir(CACHE_DIR, Hub.HUGGINGFACE, "org/sql-lora", "refs/pr/1")
    marker = marker_path(CACHE_DIR, Hub.HUGGINGFACE, "org/sql-lora", "refs/pr/1")
    assert entries(done)[1:] == [
        {"name": "sql", "path": str(snapshot), "cacheMarker": str(marker)},
        {"name": "sql-too", "path": str(snapshot), "cacheMarker": str(marker)},
    ]
    assert str(snapshot) == "/var/cache/ascend-llm-model/models/huggingface/org/sql-lora/refs--pr--1"
    # The serving pods see that directory: the cache's models/ is mounted read-only.
    mounts = done.workload["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    models = next(m for m in mounts if m.get("subPath") == "models")
    assert models == {"name": "model-cache", "mountPath": f"{CACHE_DIR}/models", "subPath": "models",
                      "readOnly": True}
    assert PurePosixPath(models["mountPath"]) in snapshot.parents
    both = render(spec(ON_CLAIM, SQL, SQL_TOO, CHAT),
                  Remembered(adapter_jobs_complete=frozenset({sql_job, chat_job})))
    assert [entry["name"] for entry in entries(both)] == ["claim", "sql", "sql-too", "chat"]


def test_an_adapter_the_live_configmap_serves_stays_while_its_job_is_made_again() -> None:
    served = str(model_dir(CACHE_DIR, Hub.HUGGINGFACE, "org/sql-lora", "refs/pr/1"))
    kept = render(spec(SQL), Remembered(adapters_served={"sql": served}))
    assert [entry["name"] for entry in entries(kept)] == ["sql"]
    # Another revision is another directory: it waits for its own download.
    moved = copy.deepcopy(SQL)
    moved["source"]["huggingFace"]["revision"] = "v2"
    assert entries(render(spec(moved), Remembered(adapters_served={"sql": served}))) == []


def test_the_served_adapters_are_read_back_from_the_configmap_the_builder_writes() -> None:
    # One format, one module: served_adapters reads what build_adapters_configmap writes, so the
    # next pass keeps serving what this one listed.
    children = render(spec(ON_CLAIM, SQL, CHAT), Remembered(adapter_jobs_complete=frozenset(
        job_names(render(spec(ON_CLAIM, SQL, CHAT))))))
    assert served_adapters(children.adapters_configmap) == {
        entry["name"]: entry["path"] for entry in entries(children)}
    assert set(served_adapters(children.adapters_configmap)) == {"claim", "sql", "chat"}
    kept = render(spec(ON_CLAIM, SQL, CHAT), Remembered(adapters_served=served_adapters(children.adapters_configmap)))
    assert kept.adapters_configmap == children.adapters_configmap
    # None, no file, a file that is not YAML or not an adapter set: nothing served.
    for broken in (None, {}, {"data": {ADAPTERS_FILE_KEY: "adapters: [\n"}},
                   {"data": {ADAPTERS_FILE_KEY: "adapters: [{name: 1}]"}}):
        assert served_adapters(broken) == {}


def test_adding_or_completing_a_hub_adapter_changes_no_pod_template() -> None:
    for model in (None, {"pvc": {"claimName": "weights"}, "cache": {"claimName": "shared"}}):
        without = render(spec(ON_CLAIM, model=model))
        pending = render(spec(ON_CLAIM, SQL, CHAT, model=model))
        complete = render(spec(ON_CLAIM, SQL, CHAT, model=model),
                          Remembered(adapter_jobs_complete=frozenset(job_names(pending))))
        assert without.workload == pending.workload == complete.workload
        assert without.configmap == complete.configmap
        assert entries(without) != entries(complete)
    # LoRA on mounts models/ for a model that is not from a hub too (so the first hub adapter rolls
    # nothing); LoRA off does not.
    no_lora = render({"model": {"pvc": {"claimName": "weights"}, "cache": {"claimName": "shared"}}, "platform": "CPU"})
    mounts = no_lora.workload["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert not [m for m in mounts if m.get("subPath") == "models"]


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [
    {"pvc": {"claimName": "weights"}},
    {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}, "cache": {"hostPath": "/data/cache"}},
])
def test_a_hub_adapter_without_a_claim_cache_is_refused_naming_the_fix(model: dict[str, Any]) -> None:
    with pytest.raises(SpecError) as error:
        parse_spec(spec(SQL, model=model))
    [(field, message)] = error.value.problems
    assert field == "spec.lora.adapters"
    assert "source.huggingFace or source.modelScope" in message
    assert "set spec.model.cache.create or spec.model.cache.claimName" in message


def test_a_repo_id_the_cache_cannot_lay_out_is_refused_naming_the_adapter() -> None:
    bad = {"name": "bad", "source": {"modelScope": {"id": "org/.hidden"}}}
    parsed = parse_spec(spec(ON_CLAIM, bad))  # the CRD's pattern lets it through
    with pytest.raises(SpecError) as error:
        plan_adapter_fetches(parsed, SETTINGS)
    [(field, message)] = error.value.problems
    assert field == "spec.lora.adapters[1].source.modelScope" and "not a hub repo id" in message


# --- status -----------------------------------------------------------------------------------


def download(phase: FetchPhase, **fields: Any) -> AdapterDownload:
    state = JobState(phase, fields.pop("reason", None), fields.pop("message", None))
    return AdapterDownload(job="demo-adapter-1234abcd", source="huggingface:org/sql-lora@refs/pr/1",
                           adapters=("sql", "sql-too"), state=state, **fields)


SPEC = parse_spec(spec(ON_CLAIM, SQL, SQL_TOO))


def test_status_shows_each_hub_adapters_download_until_complete() -> None:
    progress = FetchProgress(phase=FetchPhase.DOWNLOADING, bytes_done=3 * 2**29, bytes_total=2**31)
    status = lora_wire(SPEC, [], [download(FetchPhase.DOWNLOADING, message="pod x is downloading",
                                             progress=progress)])
    assert status["adapters"][0] == {"name": "claim", "loaded": 0, "failed": 0}
    assert status["adapters"][1] == {"name": "sql", "loaded": 0, "failed": 0, "download": {
        "source": "huggingface:org/sql-lora@refs/pr/1", "job": "demo-adapter-1234abcd", "phase": "Downloading",
        "message": "downloading huggingface:org/sql-lora@refs/pr/1: 1.5 GiB of 2.0 GiB (75%)",
        "bytesDone": 3 * 2**29, "bytesTotal": 2**31}}
    assert status["adapters"][2]["download"] == status["adapters"][1]["download"]
    AscendLLMDeploymentStatus.model_validate({"lora": status})  # declared, so the server keeps it
    complete = lora_wire(SPEC, [], [download(FetchPhase.COMPLETE)])
    assert complete["adapters"][1]["download"] == {
        "source": "huggingface:org/sql-lora@refs/pr/1", "job": "demo-adapter-1234abcd", "phase": "Complete"}


def test_a_failed_download_shows_its_reason_and_warns_once_per_failure() -> None:
    failed = {"lora": lora_wire(SPEC, [], [download(FetchPhase.FAILED, reason="NotFound",
                                                      message="RepositoryNotFoundError: 404", retry_in_s=30.0)])}
    assert failed["lora"]["adapters"][1]["download"] == {
        "source": "huggingface:org/sql-lora@refs/pr/1", "job": "demo-adapter-1234abcd", "phase": "Failed",
        "reason": "NotFound",
        # No retry countdown: the status (and its Event) change only when the download does.
        "message": "downloading huggingface:org/sql-lora@refs/pr/1 failed (NotFound): RepositoryNotFoundError: 404"}
    pending = {"lora": lora_wire(SPEC, [], [download(FetchPhase.PENDING)])}
    events = lora_events(pending, failed)
    assert [(kind, reason) for kind, reason, _ in events] == [("Warning", "AdapterDownloadFailed")] * 2
    assert events[0][2].startswith("adapter sql is not served: downloading huggingface:org/sql-lora@refs/pr/1 "
                                   "failed (NotFound)")
    assert lora_events(failed, copy.deepcopy(failed)) == []  # the same failure: no new Event
    other = {"lora": lora_wire(SPEC, [], [download(FetchPhase.FAILED, reason="Network", message="503")])}
    assert len(lora_events(failed, other)) == 2

