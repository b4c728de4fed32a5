"""The model cache (``spec.model.cache``): its claim, the fetch Job and the serving pods' wiring (pure).

One volume holds ``models/`` (hub snapshots, one directory per model and revision) and
``compile/`` (vLLM's and TorchAir's compile caches, one directory per key); the layout is the
runtime's contract, :mod:`ascend_runtime.cachelayout`. With a claim (``create`` or
``claimName``) one Job per model and revision fills it (``ascend-llm fetch``); serving pods are
made only once that Job has completed, and mount ``models/`` read-only and ``compile/``
writable. With ``hostPath`` every node fills its own directory: an init container of each
serving pod runs the same fetch (done at once where the node already has the snapshot).

Hub LoRA adapters (``spec.lora.adapters[].source.huggingFace`` / ``modelScope``, claims only) are
downloaded the same way into the same layout, one Job per repo, revision and token
(``<name>-adapter-<hash>``), apart from the model's: an adapter's download holds back no pod, and
with LoRA on the serving pods mount ``models/`` whatever the model's source, so adding one rolls
no pod either.

A fetch's pod mounts only the repo's directory of the volume (its snapshots, markers and locks)
writable, and a root filesystem it cannot write: what it downloads cannot land anywhere else.
A ``hostPath`` directory is made by the kubelet as root (fsGroup does not apply there), so such
pods first run :func:`cache_dirs_container`, which hands those directories to the engine's user.

A claim the operator creates carries no owner reference, so deleting the resource keeps the
cached weights, unless ``create.deleteWithResource`` asks otherwise.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from pathlib import PurePosixPath
from typing import Any

from ascend_runtime.cachelayout import PERMANENT_EXIT_CODES, FetchRequest, Hub
from pydantic import ValidationError

from ascend_operator.api import AscendLLMDeploymentSpec, ModelCacheSpec, SecretKeyRef, SpecError
from ascend_operator.builders.common import common_labels, content_hash, with_spec_hash
from ascend_operator.names import safe_name
from ascend_operator.policy import cache_prefix
from ascend_operator.settings import ENV_PREFIX, OperatorSettings

#: Where the cache volume is mounted: whole in the fetch Job, in two parts in serving pods.
CACHE_DIR = "/var/cache/ascend-llm-model"
CACHE_VOLUME = "model-cache"
FETCH_CONTAINER = "fetch"
CACHE_DIRS_CONTAINER = "cache-dirs"
#: Where the cache-dirs init container sees the directories it hands over (fixed, not the tenant's).
CACHE_DIRS_MOUNT = "/cache-dirs"
#: The fetch's scratch (HOME, TMPDIR): its root filesystem is read-only.
FETCH_SCRATCH_VOLUME = "fetch-scratch"
FETCH_SCRATCH_DIR = "/tmp"
COMPONENT_FETCH = "fetch"
COMPONENT_ADAPTER_FETCH = "adapter-fetch"
#: The fetch command's progress port (its ``GET /progress``).
PROGRESS_PORT = 8080


@dataclass(frozen=True)
class CachePlan:
    """What the cache of one resource needs: the claim to use, and the fetch (hub sources only)."""

    spec: ModelCacheSpec
    claim_name: str | None
    request: FetchRequest | None
    _: KW_ONLY
    #: The model's hub token (spec.model.tokenSecretRef): the fetch reads it.
    token: SecretKeyRef | None = None
    #: LoRA is on: serving pods mount ``models/`` (where hub adapters are downloaded) even for a
    #: model that is not from a hub, so adding a hub adapter changes no pod template.
    lora: bool = False
    #: The serving pods' tolerations (``spec.npu.tolerations``, within the policy): the fetch Jobs
    #: carry them, so a claim only reachable from tainted serving nodes (a local volume) can be filled.
    tolerations: tuple[dict[str, Any], ...] = ()

    @property
    def model_path(self) -> str | None:
        """The engine's ``--model`` (the snapshot on the cache), for a hub source."""
        return str(self.request.model_dir) if self.request is not None else None

    @property
    def marker(self) -> str | None:
        return str(self.request.marker_path) if self.request is not None else None

    @property
    def by_job(self) -> bool:
        """Whether a Job fills the cache (a claim and a hub source) before serving pods start."""
        return self.request is not None and self.claim_name is not None

    @property
    def by_init_container(self) -> bool:
        """Whether each serving pod fills its node's directory first (``hostPath`` and a hub source)."""
        return self.request is not None and self.claim_name is None


def cache_claim_name(name: str) -> str:
    return safe_name(name, "model-cache")


def plan_cache(name: str, spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> CachePlan | None:
    """The cache plan of resource ``name``, or None without ``spec.model.cache``; raises
    :class:`SpecError` for a repo id or revision the cache cannot lay out on disk."""

    model = spec.model
    cache = model.cache
    if cache is None:
        return None
    claim = cache.claim_name or (cache_claim_name(name) if cache.create is not None else None)
    hub = Hub.HUGGINGFACE if model.hugging_face is not None else Hub.MODELSCOPE if model.model_scope else None
    request = None
    if hub is not None:
        source = model.hugging_face or model.model_scope
        assert source is not None
        field = "huggingFace" if hub is Hub.HUGGINGFACE else "modelScope"
        try:
            request = FetchRequest(
                hub=hub, repo_id=source.id, revision=model.revision, cache_root=CACHE_DIR,
                trust_remote_code=model.trust_remote_code,
                endpoint=settings.hf_endpoint if hub is Hub.HUGGINGFACE else settings.modelscope_domain,
            )
        except ValidationError as error:  # what the cache cannot lay out on disk
            raise SpecError([(f"spec.model.{field}.id / spec.model.revision",
                              "; ".join(e["msg"] for e in error.errors()))]) from error
    return CachePlan(spec=cache, claim_name=claim, request=request, token=model.token_secret_ref,
                     lora=spec.lora is not None and spec.lora.enabled,
                     tolerations=tuple(t.model_dump(by_alias=True, exclude_none=True)
                                       for t in spec.npu.tolerations))


@dataclass(frozen=True)
class AdapterFetch:
    """One download of hub adapters into the cache: one repo and revision (with its token), and
    the adapters served from it (several names may share one repo and revision)."""

    request: FetchRequest
    token: SecretKeyRef | None
    adapters: tuple[str, ...]

    @property
    def source(self) -> str:
        """``huggingface:org/name@revision``, as status.modelCache.source spells the model's."""
        return f"{self.request.hub.value}:{self.request.repo_id}@{self.request.revision or 'default'}"

    def job_name(self, name: str, settings: OperatorSettings, claim_name: str | None,
                 tolerations: tuple[dict[str, Any], ...] = ()) -> str:
        """``<name>-adapter-<hash of the request, token reference and pod template>``: another repo,
        revision or token is another Job, never the model's, and so is any change the Job's
        immutable template would refuse (the fetch image, resources, the claim)."""
        token = self.token.model_dump(mode="json") if self.token is not None else None
        template = _template_digest(_fetch_container(self.request, self.token, settings), claim_name, settings,
                                    tolerations)
        return safe_name(name, "adapter-" + content_hash([self.request.model_dump(mode="json"), token, template])[:10])


def plan_adapter_fetches(spec: AscendLLMDeploymentSpec,
                         settings: OperatorSettings) -> tuple[AdapterFetch, ...]:
    """The downloads of the hub adapters of ``spec.lora`` (spec order, one per distinct request);
    raises :class:`SpecError` for a repo id or revision the cache cannot lay out on disk."""

    lora = spec.lora
    if lora is None or not lora.enabled:
        return ()
    fetches: dict[tuple[str, str | None], AdapterFetch] = {}
    for index, adapter in enumerate(lora.adapters):
        source = adapter.source.hub()
        if source is None:
            continue
        hub = Hub.HUGGINGFACE if adapter.source.hugging_face is not None else Hub.MODELSCOPE
        try:
            request = FetchRequest(
                hub=hub, repo_id=source.id, revision=source.revision, cache_root=CACHE_DIR,
                endpoint=settings.hf_endpoint if hub is Hub.HUGGINGFACE else settings.modelscope_domain,
            )
        except ValidationError as error:
            field = "huggingFace" if hub is Hub.HUGGINGFACE else "modelScope"
            raise SpecError([(f"spec.lora.adapters[{index}].source.{field}",
                              "; ".join(e["msg"] for e in error.errors()))]) from error
        token = source.token_secret_ref
        key = (request.model_dump_json(), token.model_dump_json() if token is not None else None)
        known = fetches.get(key)
        fetches[key] = AdapterFetch(request, token, (*(known.adapters if known else ()), adapter.name))
    return tuple(fetches.values())


def request_digest(request: FetchRequest) -> str:
    """What a completed fetch is remembered by (``status.modelCache.completedRequest``)."""
    return content_hash(request.model_dump(mode="json"))[:8]


def _template_digest(container: dict[str, Any], claim_name: str | None, settings: OperatorSettings,
                     tolerations: tuple[dict[str, Any], ...] = ()) -> str:
    # Everything a Job's pod template holds: a Job's template is immutable, so a change of any
    # (the fetch image, the token reference, resources, the claim, the tolerations) must be another Job.
    return content_hash([container, claim_name, pod_security_context(settings), list(tolerations)])[:5]


def fetch_job_name(name: str, cache_plan: CachePlan, settings: OperatorSettings) -> str:
    """``<name>-fetch-<hash of the request>-<hash of the pod template>``: another model or
    revision is another Job, and so is any change the Job's immutable template would refuse."""
    assert cache_plan.request is not None
    template = _template_digest(fetch_container(cache_plan, settings), cache_plan.claim_name, settings,
                                cache_plan.tolerations)
    return safe_name(name, f"fetch-{request_digest(cache_plan.request)}-{template}")


def cache_host_dir(host_path: str, namespace: str, settings: OperatorSettings) -> str:
    """The node directory of a ``hostPath`` cache: ``<prefix>/<namespace>/<rest of the path>``, where
    ``<prefix>`` is the administrator's cache prefix the path lies under. The namespace is a
    directory of its own right below the prefix, so one namespace's tree never holds another's:
    a tenant cannot name another namespace's directory, whatever path it writes."""

    prefix = cache_prefix(host_path, settings)
    if prefix is None:
        raise SpecError([("spec.model.cache.hostPath",
                          f"host path {host_path} is not under an allowed cache prefix (operator setting "
                          f"{ENV_PREFIX}CACHE_HOST_PATH_PREFIXES)")])
    return str(PurePosixPath(prefix, namespace, host_path[len(prefix):].lstrip("/")))


def _volume(cache_plan: CachePlan, namespace: str, settings: OperatorSettings) -> dict[str, Any]:
    if cache_plan.claim_name is not None:
        return {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": cache_plan.claim_name}}
    assert cache_plan.spec.host_path is not None
    path = cache_host_dir(cache_plan.spec.host_path, namespace, settings)
    return {"name": CACHE_VOLUME, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}


def build_cache_claim(name: str, namespace: str, cache_plan: CachePlan) -> dict[str, Any] | None:
    """The PersistentVolumeClaim of ``cache.create`` (owner references are the caller's choice:
    only with ``deleteWithResource``)."""

    create = cache_plan.spec.create
    if create is None or cache_plan.claim_name is None:
        return None
    spec: dict[str, Any] = {
        "accessModes": [create.access_mode.value],
        "resources": {"requests": {"storage": create.size}},
    }
    if create.storage_class_name:
        spec["storageClassName"] = create.storage_class_name
    return with_spec_hash({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": cache_plan.claim_name, "namespace": namespace,
                     "labels": common_labels(name, "model-cache")},
        "spec": spec,
    })


def fetch_container(cache_plan: CachePlan, settings: OperatorSettings, *, ports: bool = True) -> dict[str, Any]:
    """The container that runs ``ascend-llm fetch`` for the plan's request (``ports``: declare the
    progress port; an init container does not, its pod's main container declares that port)."""

    assert cache_plan.request is not None
    return _fetch_container(cache_plan.request, cache_plan.token, settings, ports=ports)


def _fetch_container(request: FetchRequest, token: SecretKeyRef | None, settings: OperatorSettings,
                     *, ports: bool = True) -> dict[str, Any]:
    # The operator's own fetch image, never spec.image: only code the administrator installed
    # writes to the cache (a tenant's image could plant weights or a marker there). Of the volume
    # it mounts only the repo's directory, all a fetch writes (snapshots, markers, locks).
    target = str(request.repo_dir.relative_to(request.cache_root))
    container: dict[str, Any] = {
        "name": FETCH_CONTAINER,
        "image": settings.fetch_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["ascend-llm", "fetch", "--request-json",
                    request.model_dump_json(by_alias=True, exclude_none=True)],
        "ports": [{"name": "progress", "containerPort": PROGRESS_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": settings.fetch_cpu, "memory": settings.fetch_memory},
                      "limits": {"memory": settings.fetch_memory}},
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": str(request.repo_dir), "subPath": target},
                         {"name": FETCH_SCRATCH_VOLUME, "mountPath": FETCH_SCRATCH_DIR}],
        # The hub clients' own files (ModelScope's session, temporary files) go to the scratch.
        "env": [{"name": "HOME", "value": FETCH_SCRATCH_DIR}, {"name": "TMPDIR", "value": FETCH_SCRATCH_DIR}],
        "terminationMessagePolicy": "File",
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
    }
    if token is not None:
        container["env"].append({"name": request.default_token_env(),
                                 "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}})
    if not ports:
        del container["ports"]
    return container


def fetch_scratch_volume() -> dict[str, Any]:
    """The fetch container's scratch (``HOME``, ``TMPDIR``): its root filesystem is read-only."""
    return {"name": FETCH_SCRATCH_VOLUME, "emptyDir": {"sizeLimit": "1Gi"}}


def cache_dirs_container(cache_plan: CachePlan, settings: OperatorSettings) -> dict[str, Any] | None:
    """The init container that hands a ``hostPath`` cache's writable directories (the fetch's repo
    directory, the compile caches) to the engine's user; None where none is needed.

    The kubelet makes a hostPath directory and every subPath in it as root, mode 0755, and fsGroup
    does not apply to hostPath: a fetch or engine running as the engine's user could write none of
    them. A claim needs no such step (fsGroup makes its subPaths group-writable). The container runs
    the operator's fetch image as root with CAP_CHOWN only and a fixed command: each directory is
    mounted at a fixed path of its own, and ``chown`` (not recursive) changes only those.
    """

    if cache_plan.claim_name is not None or settings.engine_run_as_user == 0:
        return None
    targets: list[tuple[str, str]] = []
    if cache_plan.request is not None:
        request = cache_plan.request
        targets.append(("fetch", str(request.repo_dir.relative_to(request.cache_root))))
    if cache_plan.spec.compile_cache:
        targets.append(("compile", "compile"))
    if not targets:
        return None
    mounts = [{"name": CACHE_VOLUME, "mountPath": f"{CACHE_DIRS_MOUNT}/{what}", "subPath": sub_path}
              for what, sub_path in targets]
    return {
        "name": CACHE_DIRS_CONTAINER,
        "image": settings.fetch_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["chown", f"{settings.engine_run_as_user}:{settings.engine_run_as_group}",
                    *(m["mountPath"] for m in mounts)],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": mounts,
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
                            "allowPrivilegeEscalation": False, "privileged": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}},
    }


def pod_security_context(settings: OperatorSettings) -> dict[str, Any]:
    """The pod securityContext of the engine pods and the fetch Jobs (the runtime image's user)."""
    security: dict[str, Any] = {
        "runAsNonRoot": settings.engine_run_as_user != 0,
        "runAsUser": settings.engine_run_as_user,
        "runAsGroup": settings.engine_run_as_group,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if settings.engine_fs_group is not None:
        security["fsGroup"] = settings.engine_fs_group
    return security


def build_fetch_job(name: str, namespace: str, spec: AscendLLMDeploymentSpec, settings: OperatorSettings,
                    cache_plan: CachePlan) -> dict[str, Any] | None:
    """The Job that fills the claim with the plan's snapshot; None when no Job is needed."""

    if not cache_plan.by_job:
        return None
    return _job(name, namespace, settings, cache_plan, fetch_job_name(name, cache_plan, settings),
                component=COMPONENT_FETCH, container=fetch_container(cache_plan, settings))


def build_adapter_fetch_job(name: str, namespace: str, settings: OperatorSettings, cache_plan: CachePlan,
                            fetch: AdapterFetch) -> dict[str, Any]:
    """The Job that downloads one hub adapter repo and revision into the claim (next to the
    models, in the same layout); it is made whatever the model's download is doing."""

    assert cache_plan.claim_name is not None  # the CRD's rule: hub adapters need a claim cache
    return _job(name, namespace, settings, cache_plan,
                fetch.job_name(name, settings, cache_plan.claim_name, cache_plan.tolerations),
                component=COMPONENT_ADAPTER_FETCH,
                container=_fetch_container(fetch.request, fetch.token, settings))


def _job(name: str, namespace: str, settings: OperatorSettings, cache_plan: CachePlan, job_name: str, *,
         component: str, container: dict[str, Any]) -> dict[str, Any]:
    labels = common_labels(name, component)
    return with_spec_hash({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": settings.fetch_backoff_limit,
            "activeDeadlineSeconds": settings.fetch_deadline_s,
            # No access, no such repo or revision, a request the command cannot use: retrying
            # cannot help, so the Job fails at once and the status says why.
            "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"containerName": FETCH_CONTAINER, "operator": "In",
                                                      "values": sorted(PERMANENT_EXIT_CODES)}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [_volume(cache_plan, namespace, settings), fetch_scratch_volume()],
                    "securityContext": pod_security_context(settings),
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    **({"tolerations": [dict(t) for t in cache_plan.tolerations]} if cache_plan.tolerations else {}),
                },
            },
        },
    })


def serving_wiring(cache_plan: CachePlan, namespace: str,
                   settings: OperatorSettings) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Volumes and engine mounts of a serving pod: the snapshots read-only, compile caches writable."""

    mounts: list[dict[str, Any]] = []
    if cache_plan.request is not None or cache_plan.lora:
        mounts.append({"name": CACHE_VOLUME, "mountPath": f"{CACHE_DIR}/models", "subPath": "models",
                       "readOnly": True})
    if cache_plan.spec.compile_cache:
        mounts.append({"name": CACHE_VOLUME, "mountPath": f"{CACHE_DIR}/compile", "subPath": "compile"})
    volumes = [_volume(cache_plan, namespace, settings)]
    if cache_plan.by_init_container:
        volumes.append(fetch_scratch_volume())
    return volumes, mounts


def cache_init_containers(cache_plan: CachePlan | None, settings: OperatorSettings) -> list[dict[str, Any]]:
    """A serving pod's init containers for its cache: the hostPath directories handed to the
    engine's user, then (hub models on hostPath) the node's own fetch."""

    if cache_plan is None:
        return []
    dirs = cache_dirs_container(cache_plan, settings)
    fetch = fetch_container(cache_plan, settings, ports=False) if cache_plan.by_init_container else None
    return [c for c in (dirs, fetch) if c is not None]
