"""spec.model.cache: the claim, the fetch Job, the serving pods' wiring and the status (pure)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from ascend_operator.api import Phase, SpecError, parse_spec
from ascend_operator.builders import BuildMeta, build_children
from ascend_operator.builders.modelcache import CACHE_DIR, fetch_job_name, plan_cache
from ascend_operator.cachestatus import (
    CacheObservation,
    cache_condition,
    cache_status,
    init_state,
    job_state,
)
from ascend_operator.policy import enforce_policy
from ascend_operator.settings import load_settings
from ascend_operator.status import Observation, compute_status
from ascend_runtime.cachelayout import PERMANENT_EXIT_CODES, FetchPhase, FetchProgress, FetchRequest
from ascend_runtime.config import EngineConfig

NS = "llm"
HF = {"huggingFace": {"id": "Qwen/Qwen2.5-7B-Instruct"}, "revision": "v1.0"}
SETTINGS = load_settings({"ASCEND_LLM_OPERATOR_HF_ENDPOINT": "https://hf-mirror.com",
                          "ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES": "/data/models",
                          "ASCEND_LLM_OPERATOR_CACHE_HOST_PATH_PREFIXES": "/data/llm-cache"})
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def children(model: dict[str, Any], name: str = "qwen", **spec: Any):
    parsed = parse_spec({"model": model, **spec})
    return build_children(BuildMeta(name, NS), parsed, SETTINGS)


def engine_container(kids) -> dict[str, Any]:
    return kids.workload["spec"]["template"]["spec"]["containers"][0]


def test_a_created_claim_is_kept_by_default_and_owned_only_with_delete_with_resource() -> None:
    kids = children({**HF, "cache": {"create": {"size": "200Gi", "storageClassName": "nfs"}}})
    claim = kids.cache_claim
    assert claim["kind"] == "PersistentVolumeClaim" and claim["metadata"]["name"] == "qwen-model-cache"
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "200Gi"}},
                             "storageClassName": "nfs"}
    assert not kids.cache_claim_owned
    # What the chart's NOTES tell users to delete the kept caches by.
    assert claim["metadata"]["labels"]["app.kubernetes.io/component"] == "model-cache"
    assert claim not in kids.objects()  # not an owned child: never pruned, never owner-referenced
    owned = children({**HF, "cache": {"create": {"size": "1Ti", "deleteWithResource": True}}})
    assert owned.cache_claim_owned


def test_the_fetch_job_downloads_the_pinned_revision_through_the_mirror_with_the_token() -> None:
    kids = children({**HF, "tokenSecretRef": {"name": "hf", "key": "token"}, "cache": {"claimName": "shared"}})
    job = kids.fetch_job
    assert kids.objects().index(job) < kids.objects().index(kids.workload)  # the Job first
    assert job["metadata"]["name"].startswith("qwen-fetch-")
    spec = job["spec"]
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][:3] == ["ascend-llm", "fetch", "--request-json"]
    request = FetchRequest.model_validate_json(container["command"][3])
    assert (request.repo_id, request.revision, request.endpoint, request.cache_root) == (
        "Qwen/Qwen2.5-7B-Instruct", "v1.0", "https://hf-mirror.com", CACHE_DIR)
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in container["env"]
    assert "token" not in container["command"][3].lower()
    assert pod["volumes"][0] == {"name": "model-cache", "persistentVolumeClaim": {"claimName": "shared"}}
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"] is True
    # Permanent failures end the Job at once; the rest retry with the Job's backoff.
    rule = spec["podFailurePolicy"]["rules"][0]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == sorted(PERMANENT_EXIT_CODES)
    assert spec["backoffLimit"] == SETTINGS.fetch_backoff_limit


def test_another_revision_is_another_job_and_the_same_request_the_same_name() -> None:
    first = children({**HF, "cache": {"claimName": "c"}}).fetch_job["metadata"]["name"]
    again = children({**HF, "cache": {"claimName": "c"}}).fetch_job["metadata"]["name"]
    other = children({**HF, "revision": "v2.0", "cache": {"claimName": "c"}}).fetch_job["metadata"]["name"]
    assert first == again != other


def test_serving_pods_mount_the_snapshots_read_only_and_the_compile_caches_writable() -> None:
    kids = children({**HF, "cache": {"claimName": "shared"}})
    container = engine_container(kids)
    mounts = {m["mountPath"]: m for m in container["volumeMounts"] if m["name"] == "model-cache"}
    assert mounts[f"{CACHE_DIR}/models"] == {"name": "model-cache", "mountPath": f"{CACHE_DIR}/models",
                                             "subPath": "models", "readOnly": True}
    assert "readOnly" not in mounts[f"{CACHE_DIR}/compile"]
    assert not any(e["name"] in ("HF_HOME", "HF_TOKEN") for e in container.get("env", []))  # no download
    config = kids.engine_config
    assert config.model.path == f"{CACHE_DIR}/models/huggingface/Qwen/Qwen2.5-7B-Instruct/v1.0"
    assert config.model.cache_marker == f"{CACHE_DIR}/models/huggingface/Qwen/Qwen2.5-7B-Instruct/v1.0.complete.json"
    assert config.model.revision is None  # the snapshot is that revision
    assert config.compile_cache is not None and config.compile_cache.root == CACHE_DIR
    EngineConfig.model_validate(config.model_dump())


def test_a_host_path_cache_downloads_per_node_in_an_init_container() -> None:
    kids = children({**HF, "cache": {"hostPath": "/data/llm-cache"}})
    assert kids.fetch_job is None and kids.cache_claim is None
    pod = kids.workload["spec"]["template"]["spec"]
    (init,) = [c for c in pod["initContainers"] if c["name"] == "fetch"]
    assert "ports" not in init
    # The namespace's own directory below the administrator's cache prefix.
    assert {"name": "model-cache", "hostPath": {"path": f"/data/llm-cache/{NS}", "type": "DirectoryOrCreate"}} \
        in pod["volumes"]


def test_a_local_model_with_a_cache_keeps_only_compile_caches_there() -> None:
    kids = children({"pvc": {"claimName": "weights"}, "cache": {"claimName": "compile"}})
    assert kids.fetch_job is None
    mounts = [m for m in engine_container(kids)["volumeMounts"] if m["name"] == "model-cache"]
    assert mounts == [{"name": "model-cache", "mountPath": f"{CACHE_DIR}/compile", "subPath": "compile"}]
    assert kids.engine_config.model.cache_marker is None


def test_the_cache_shortens_the_start_up_budget_by_the_download() -> None:
    plain = children(HF).workload["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    cached = engine_container(children({**HF, "cache": {"claimName": "c"}}))["startupProbe"]
    assert cached["failureThreshold"] < plain["failureThreshold"]


@pytest.mark.parametrize("cache, field", [
    ({}, "spec.model.cache"),
    ({"claimName": "a", "hostPath": "/data/x"}, "spec.model.cache"),
    ({"create": {"size": "lots"}}, "spec.model.cache.create.size"),
])
def test_bad_caches_are_refused_naming_the_field(cache: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_spec({"model": {**HF, "cache": cache}})
    assert field in str(error.value)


def test_a_host_path_cache_outside_the_allowed_prefixes_is_refused() -> None:
    spec = parse_spec({"model": {**HF, "cache": {"hostPath": "/etc/cache"}}})
    with pytest.raises(SpecError, match="spec.model.cache.hostPath"):
        enforce_policy(spec, SETTINGS)


# ---------------------------------------------------------------------------- the Job's state

def job(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "qwen-fetch-1"}, "status": {"conditions": list(conditions)}}


def fetch_pod(phase: str, *, exit_code: int | None = None, message: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"name": "fetch", "state": {}}
    if exit_code is not None:
        status["state"] = {"terminated": {"exitCode": exit_code, "message": message or "",
                                          "finishedAt": "2026-12-01T11:00:00Z"}}
    return {"metadata": {"name": "qwen-fetch-1-abcde"}, "status": {"phase": phase, "containerStatuses": [status]}}


def test_job_states_from_conditions_and_pods() -> None:
    assert job_state(None, []).phase == FetchPhase.PENDING
    assert job_state(job({"type": "Complete", "status": "True"}), []).phase == FetchPhase.COMPLETE
    assert job_state(job(), [fetch_pod("Running")]).phase == FetchPhase.DOWNLOADING
    failure = json.dumps({"reason": "Unauthorized", "message": "401 from https://hf-mirror.com"})
    failed = job_state(job({"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
                            "lastTransitionTime": "2026-12-01T11:00:05Z"}),
                       [fetch_pod("Failed", exit_code=3, message=failure)])
    assert (failed.phase, failed.reason, failed.message) == (FetchPhase.FAILED, "Unauthorized",
                                                             "401 from https://hf-mirror.com")
    assert failed.failed_at == datetime(2026, 12, 1, 11, 0, 5, tzinfo=timezone.utc)
    deadline = job_state(job({"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                              "message": "Job was active longer than specified deadline"}), [])
    assert (deadline.reason, deadline.message) == ("DeadlineExceeded", "Job was active longer than specified deadline")
    between = job_state(job(), [fetch_pod("Failed", exit_code=6, message=json.dumps(
        {"reason": "Network", "message": "timed out"}))])
    assert (between.phase, between.reason) == (FetchPhase.PENDING, "Network")


def test_init_container_states_of_a_host_path_cache() -> None:
    def pod(state: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": "p"}, "status": {"initContainerStatuses": [{"name": "fetch", "state": state}]}}
    assert init_state([]).phase == FetchPhase.PENDING
    assert init_state([pod({"running": {}})]).phase == FetchPhase.DOWNLOADING
    assert init_state([pod({"terminated": {"exitCode": 0}})]).phase == FetchPhase.COMPLETE
    failed = init_state([pod({"terminated": {"exitCode": 5, "message": json.dumps(
        {"reason": "DiskFull", "message": "no space left on device"})}})])
    assert (failed.phase, failed.reason) == (FetchPhase.FAILED, "DiskFull")


# ---------------------------------------------------------------------------- the status

def observation(state_phase: FetchPhase, *, progress: FetchProgress | None = None, reason: str | None = None,
                message: str | None = None, held_back: bool = True) -> CacheObservation:
    from ascend_operator.cachestatus import JobState
    return CacheObservation(claim_name="qwen-model-cache", host_path=None, retained=True,
                            source="huggingface:Qwen/Qwen2.5-7B-Instruct@v1.0", job="qwen-fetch-1",
                            state=JobState(state_phase, reason, message), progress=progress, held_back=held_back)


def status_of(cache: CacheObservation, pods: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec = parse_spec({"model": {**HF, "cache": {"create": {"size": "200Gi"}}}})
    obs = Observation(name="qwen", generation=1, selector="s", endpoint=None, resource_name=None,
                      remembered_for="k", pods=pods or [], cache=cache)
    return compute_status(spec, obs, None, NOW)


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_a_download_in_progress_shows_bytes_and_the_phase_downloading() -> None:
    progress = FetchProgress(phase="Downloading", bytes_done=3 * 2**30, bytes_total=12 * 2**30)
    status = status_of(observation(FetchPhase.DOWNLOADING, progress=progress))
    assert status["phase"] == Phase.DOWNLOADING.value
    assert status["modelCache"] == {
        "retainedOnDelete": True, "claimName": "qwen-model-cache", "job": "qwen-fetch-1",
        "source": "huggingface:Qwen/Qwen2.5-7B-Instruct@v1.0", "phase": "Downloading",
        "bytesDone": 3 * 2**30, "bytesTotal": 12 * 2**30,
        "message": "downloading huggingface:Qwen/Qwen2.5-7B-Instruct@v1.0: 3.0 GiB of 12.0 GiB (25%)",
    }
    cached = condition(status, "ModelCached")
    assert (cached["status"], cached["reason"]) == ("False", "Downloading")
    assert condition(status, "Progressing")["reason"] == "Downloading"


def test_a_failed_download_fails_the_resource_and_says_why() -> None:
    status = status_of(observation(FetchPhase.FAILED, reason="NotFound", message="no such revision v1.0"))
    assert status["phase"] == Phase.FAILED.value
    assert status["modelCache"]["reason"] == "NotFound"
    progressing = condition(status, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "DownloadFailed")
    assert "no such revision v1.0" in progressing["message"]


def test_a_complete_cache_is_cached_and_holds_nothing_back() -> None:
    status = status_of(observation(FetchPhase.COMPLETE, held_back=False))
    assert status["phase"] == Phase.PENDING.value  # no pods yet: the workload was just made
    assert status["modelCache"]["phase"] == "Complete" and "message" not in status["modelCache"]
    assert cache_condition(observation(FetchPhase.COMPLETE))[0] is True


def test_the_plan_knows_which_way_the_cache_is_filled() -> None:
    def plan(cache: dict[str, Any], model: dict[str, Any] = HF):
        return plan_cache("qwen", parse_spec({"model": {**model, "cache": cache}}), SETTINGS)
    assert plan({"claimName": "c"}).by_job and not plan({"claimName": "c"}).by_init_container
    assert plan({"hostPath": "/data/llm-cache/c"}).by_init_container
    assert not plan({"claimName": "c"}, {"pvc": {"claimName": "w"}}).by_job
    assert fetch_job_name("qwen", plan({"claimName": "c"}), SETTINGS).startswith("qwen-fetch-")
    assert cache_status(observation(FetchPhase.PENDING)).phase == "Pending"


def test_render_prints_the_claim_and_the_fetch_job() -> None:
    from ascend_operator.cli import render_children

    resource = {"apiVersion": "llm.ascend.dev/v1alpha1", "kind": "AscendLLMDeployment",
                "metadata": {"name": "qwen"},
                "spec": {"model": {**HF, "cache": {"create": {"size": "100Gi"}}}}}
    kinds = [o["kind"] for o in render_children(resource, "llm")]
    assert kinds[:3] == ["PersistentVolumeClaim", "ConfigMap", "Job"]
    assert "Deployment" in kinds


def test_a_repo_id_the_cache_cannot_lay_out_is_a_spec_error_naming_the_fields() -> None:
    spec = parse_spec({"model": {"huggingFace": {"id": "org/-bad"}, "cache": {"claimName": "c"}}})
    with pytest.raises(SpecError, match="spec.model.huggingFace.id"):
        plan_cache("qwen", spec, SETTINGS)


# ---------------------------------------------------------------------- tenant isolation

def _volume_path(kids) -> str:
    (volume,) = [v for v in kids.workload["spec"]["template"]["spec"]["volumes"] if v["name"] == "model-cache"]
    return volume["hostPath"]["path"]


def test_a_host_path_cache_is_the_namespace_s_own_directory_whatever_path_the_spec_names() -> None:
    def path(namespace: str, host_path: str) -> str:
        spec = parse_spec({"model": {**HF, "cache": {"hostPath": host_path}}})
        return _volume_path(build_children(BuildMeta("qwen", namespace), spec, SETTINGS))

    assert path("team-a", "/data/llm-cache") == "/data/llm-cache/team-a"
    assert path("team-b", "/data/llm-cache") == "/data/llm-cache/team-b"
    assert path("team-a", "/data/llm-cache/shared") == "/data/llm-cache/team-a/shared"
    # Naming another namespace's directory lands below one's own.
    assert path("team-a", "/data/llm-cache/team-b") == "/data/llm-cache/team-a/team-b"
    with pytest.raises(SpecError, match="CACHE_HOST_PATH_PREFIXES"):
        path("team-a", "/data/models/cache")


def test_fetches_run_the_operator_s_fetch_image_and_a_new_template_is_a_new_job() -> None:
    from ascend_operator.builders.modelcache import request_digest

    base = {**HF, "tokenSecretRef": {"name": "hf", "key": "token"}, "cache": {"claimName": "c"}}
    one = children(base, image="registry.example.com/llm/vllm:1.0")
    assert one.fetch_job["spec"]["template"]["spec"]["containers"][0]["image"] == SETTINGS.fetch_image
    # spec.image is not in the fetch Job: a new image leaves the Job as it is.
    assert children(base, image="registry.example.com/llm/vllm:1.1").fetch_job == one.fetch_job
    # A new token reference changes the (immutable) template, so the Job is another one, for
    # the same request.
    other = children({**base, "tokenSecretRef": {"name": "hf2", "key": "token"}})
    name_one, name_other = one.fetch_job["metadata"]["name"], other.fetch_job["metadata"]["name"]
    assert name_one != name_other
    digest = request_digest(plan_cache("qwen", parse_spec({"model": base}), SETTINGS).request)
    assert name_one.startswith(f"qwen-fetch-{digest}-") and name_other.startswith(f"qwen-fetch-{digest}-")
    moved = SETTINGS.model_copy(update={"fetch_image": "registry.example.com/ops/operator:0.2.0"})
    upgraded = build_children(BuildMeta("qwen", NS), parse_spec({"model": base}), moved)
    assert upgraded.fetch_job["metadata"]["name"] not in (name_one, name_other)


def test_the_compile_cache_key_carries_the_namespace() -> None:
    spec = parse_spec({"model": {**HF, "cache": {"claimName": "c"}}})
    assert build_children(BuildMeta("qwen", "team-a"), spec, SETTINGS).engine_config.compile_cache.namespace \
        == "team-a"


# ---------------------------------------------------------------------------- what a fetch may write

REPO_DIR = "models/huggingface/Qwen/Qwen2.5-7B-Instruct"


def _writable(container: dict[str, Any], pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The container's mounts it can write: read-only ones and the volumes of no disk left out."""
    kinds = {v["name"]: v for v in pod["volumes"]}
    return [m for m in container["volumeMounts"] if not m.get("readOnly") and "emptyDir" not in kinds[m["name"]]]


def test_a_fetch_can_write_only_its_repo_s_directory_of_the_cache() -> None:
    kids = children({**HF, "cache": {"claimName": "shared"}},
                    lora={"enabled": True, "adapters": [{"name": "sql", "source": {"huggingFace": {
                        "id": "org/sql-lora", "revision": "v1"}}}]})
    jobs = [kids.fetch_job, *kids.adapter_fetch_jobs]
    assert len(jobs) == 2
    for job, sub_path in zip(jobs, (REPO_DIR, "models/huggingface/org/sql-lora")):
        pod = job["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        # Of the cache only the repo's directory (its snapshots, markers, locks), where the fetch writes.
        assert _writable(container, pod) == [{"name": "model-cache", "mountPath": f"{CACHE_DIR}/{sub_path}",
                                              "subPath": sub_path}]
        request = FetchRequest.model_validate_json(container["command"][3])
        assert str(request.model_dir).startswith(f"{CACHE_DIR}/{sub_path}/")
        assert str(request.marker_path).startswith(f"{CACHE_DIR}/{sub_path}/")
        # Nothing else: a read-only root filesystem, HOME and TMPDIR on the pod's own scratch.
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        scratch = {v["name"]: v for v in pod["volumes"]}["fetch-scratch"]
        assert "emptyDir" in scratch
        assert {e["name"]: e.get("value") for e in container["env"]}.items() >= {"HOME": "/tmp", "TMPDIR": "/tmp"}.items()
        assert [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "fetch-scratch"] == ["/tmp"]
        assert "initContainers" not in pod  # a claim: fsGroup makes its subPaths the engine group's


def test_fetch_jobs_tolerate_what_the_serving_pods_tolerate_and_a_new_toleration_is_a_new_job() -> None:
    toleration = {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}
    plain = children({**HF, "cache": {"claimName": "c"}})
    tolerant = children({**HF, "cache": {"claimName": "c"}}, npu={"tolerations": [toleration]})
    assert "tolerations" not in plain.fetch_job["spec"]["template"]["spec"]
    assert tolerant.fetch_job["spec"]["template"]["spec"]["tolerations"] == [toleration]
    assert "nodeSelector" not in tolerant.fetch_job["spec"]["template"]["spec"]  # allowed there, not sent there
    assert tolerant.fetch_job["metadata"]["name"] != plain.fetch_job["metadata"]["name"]


def test_a_host_path_cache_s_directories_are_handed_to_the_engine_user_first() -> None:
    kids = children({**HF, "cache": {"hostPath": "/data/llm-cache/team"}})
    pod = kids.workload["spec"]["template"]["spec"]
    dirs, fetch = pod["initContainers"]
    assert (dirs["name"], fetch["name"]) == ("cache-dirs", "fetch")
    # A fixed command on fixed paths in the operator's fetch image: nothing of the tenant's in it.
    assert dirs["image"] == SETTINGS.fetch_image
    assert dirs["command"] == ["chown", "1000:1000", "/cache-dirs/fetch", "/cache-dirs/compile"]
    assert dirs["volumeMounts"] == [
        {"name": "model-cache", "mountPath": "/cache-dirs/fetch", "subPath": REPO_DIR},
        {"name": "model-cache", "mountPath": "/cache-dirs/compile", "subPath": "compile"}]
    security = dirs["securityContext"]
    assert security["runAsUser"] == 0 and security["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    # The node's fetch then writes only its repo's directory, as the Job does.
    assert _writable(fetch, pod) == [{"name": "model-cache", "mountPath": f"{CACHE_DIR}/{REPO_DIR}",
                                      "subPath": REPO_DIR}]
    # A local model keeps only compile caches there; without them nothing is handed over.
    local = children({"pvc": {"claimName": "weights"}, "cache": {"hostPath": "/data/llm-cache"}})
    (only,) = local.workload["spec"]["template"]["spec"]["initContainers"]
    assert only["command"] == ["chown", "1000:1000", "/cache-dirs/compile"]
    none = children({"pvc": {"claimName": "weights"}, "cache": {"hostPath": "/data/llm-cache", "compileCache": False}})
    assert "initContainers" not in none.workload["spec"]["template"]["spec"]


@pytest.mark.parametrize(("wanted", "held", "refused"), [
    ("10Gi", "10Gi", False), ("20Gi", "10Gi", False), ("5Gi", "10Gi", True),
    ("1000Gi", "1Ti", True), ("10737418240", "10Gi", False), ("10G", "10Gi", True),
])
def test_a_claim_only_grows_compared_as_quantities(wanted: str, held: str, refused: bool) -> None:
    from ascend_operator.handlers.handle_modelcache import claim_shrink

    claim = {"metadata": {"name": "qwen-model-cache"}, "spec": {"resources": {"requests": {"storage": wanted}}}}
    live = {"spec": {"resources": {"requests": {"storage": held}}}}
    why = claim_shrink(claim, live)
    assert (why is not None) == refused
    if refused:
        assert why is not None and why.startswith(f"spec.model.cache.create.size {wanted} is below the claim's {held}")
        assert "qwen-model-cache" in why
    assert claim_shrink(claim, {"spec": {}}) is None  # a claim the server has not sized yet
