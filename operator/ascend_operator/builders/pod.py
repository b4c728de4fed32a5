"""The engine pod template shared by the Deployment and the LeaderWorkerSet (pure).

One container, ``engine``, runs ``ascend-llm run --config /etc/ascend-llm/engine-config.yaml``.

- NPUs: ``<resourceName>: perReplica`` in requests and limits, and host CPU and memory requests
  from the chip (:data:`HOST_REQUESTS_PER_NPU`) unless the spec sets its own; ``ASCEND_VISIBLE_DEVICES`` from the
  device plugin's pod annotation of the same name as the resource (``metadata.annotations[...]``);
  with ``hostMounts: driver`` the driver, DCMI, npu-smi and install info are mounted from the node
  (clusters without the Ascend Docker Runtime). Devices come from the device plugin, so the pod
  is not privileged. None of this on platform CPU.
- Probes on the runtime's port: startup ``/startup`` with ``failureThreshold * periodSeconds >=``
  the start-up budget (:func:`ascend_operator.builders.engine_config.startup_budget`), readiness
  ``/ready``, liveness ``/live``.
- Readiness-first drain: on deletion the pod leaves the Service's endpoints (it is terminating),
  the preStop hook sleeps ``prestop_sleep_s`` so kube-proxy and gateways stop sending to it,
  then SIGTERM makes the runtime drain the engine for ``engine.shutdownTimeoutSeconds`` (vLLM's
  ``--shutdown-timeout`` where the version has it, the runtime's own wait otherwise);
  ``terminationGracePeriodSeconds`` = preStop + drain + ``termination_margin_s`` so the kubelet's
  SIGKILL never cuts a drain short.
- The template carries ``llm.ascend.dev/config-hash`` (the ConfigMap's data), so a config
  change rolls the pods.
- With ``spec.lora``: the adapters ConfigMap's file below the config directory and one read-only
  mount per adapter volume (:mod:`ascend_operator.builders.adapters`); the adapter set is in
  neither the template nor its hash.

:func:`build_pod_template` takes the multi-node extras (env, labels, annotations, a larger
``/dev/shm``, a scheduler name) as arguments, so the LeaderWorkerSet builder adds to the same
template instead of repeating it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ascend_runtime.config import (
    ADAPTERS_FILE_KEY,
    ALWAYS_SECRET_ENV,
    CONFIG_FILE_KEY,
    Chip,
    DEFAULT_ADAPTERS_PATH,
    DEFAULT_CONFIG_PATH,
    DEFAULT_ENGINE_PORT,
    DEFAULT_RUNTIME_PORT,
    REDACT_ENV,
    EngineConfig,
)

from ascend_operator.api import AscendLLMDeploymentSpec, Platform
from ascend_operator.builders.adapters import ADAPTERS_SUBDIR, lora_enabled
from ascend_operator.builders.adapters import adapter_volumes as adapter_volumes_of
from ascend_operator.builders.common import CONFIG_HASH_ANNOTATION, common_labels
from ascend_operator.builders.engine_config import MODEL_CACHE_DIR, MODEL_DIR, STATE_DIR
from ascend_operator.builders.inputs import BuildInputs
from ascend_operator.builders.modelcache import (
    CachePlan,
    cache_init_containers,
    pod_security_context,
    serving_wiring,
)
from ascend_operator.names import ChildNames
from ascend_operator.settings import HostMounts, OperatorSettings

CONFIG_DIR = DEFAULT_CONFIG_PATH.rsplit("/", 1)[0]
# The adapters file must sit one directory below the config (the projected volume's layout).
assert DEFAULT_ADAPTERS_PATH == f"{CONFIG_DIR}/{ADAPTERS_SUBDIR}/{ADAPTERS_FILE_KEY}"
#: vLLM's API key variable (it guards /v1 with it; the runtime's warmup sends it too).
API_KEY_ENV = "VLLM_API_KEY"
ENGINE_COMMAND = ["ascend-llm", "run", "--config", DEFAULT_CONFIG_PATH]
#: Host paths a pod needs when no Ascend Docker Runtime mounts them: (volume, path, type).
DRIVER_HOST_PATHS: tuple[tuple[str, str, str], ...] = (
    ("ascend-driver", "/usr/local/Ascend/driver", "Directory"),
    ("ascend-dcmi", "/usr/local/dcmi", "Directory"),
    ("npu-smi", "/usr/local/bin/npu-smi", "File"),
    ("ascend-install-info", "/etc/ascend_install.info", "File"),
)


def npu_resource_name(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> str | None:
    """The extended resource the pods request, or None on platform CPU."""
    if spec.platform == Platform.CPU:
        return None
    return spec.npu.resource_name or settings.resource_name(spec.npu.chip)


def _quantities(resource_list: Any) -> dict[str, int | str]:
    if resource_list is None:
        return {}
    out: dict[str, int | str] = {}
    for field, key in (("cpu", "cpu"), ("memory", "memory"), ("ephemeral_storage", "ephemeral-storage")):
        value = getattr(resource_list, field)
        if value is not None:
            out[key] = value
    return out


#: Host CPU cores and memory (GiB) requested per NPU when the spec requests none, by chip. An
#: Atlas 800I A2 / A3 node has 192 cores and 1-1.5 TiB for 8 (16 dies on A3) NPUs: 8 cores and
#: 64 GiB per NPU leave room for the node's daemons while covering the host side of a replica
#: (tokenizer and API server processes, weights staged in host memory while loading); 310P cards
#: sit in smaller inference servers. Requests only: a memory limit would OOM-kill a replica that
#: stages a large checkpoint, a CPU limit would throttle its tokenizers. With requests the pod
#: is Burstable (evicted after BestEffort pods, not first), and the memory-backed /dev/shm
#: (counted against the pod's memory) is always covered.
HOST_REQUESTS_PER_NPU: Mapping[Chip, tuple[int, int]] = {
    Chip.A2_910B: (8, 64),
    Chip.A3: (8, 64),
    Chip.P310: (4, 24),
}
#: Memory requested beyond /dev/shm at the least (the runtime, API server and engine processes).
MIN_MEMORY_BEYOND_SHM_GIB = 8


_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL_SUFFIXES = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def _gib(quantity: str) -> float:
    """A memory quantity (``16Gi``, ``500M``, ``1073741824``) in GiB; the builders may not import
    the client's parser (import contract), and these are the forms the settings allow."""

    for suffixes in (_BINARY_SUFFIXES, _DECIMAL_SUFFIXES):
        for suffix, factor in suffixes.items():
            if quantity.endswith(suffix):
                return float(quantity[: -len(suffix)]) * factor / 2**30
    return float(quantity) / 2**30


def _resources(spec: AscendLLMDeploymentSpec, resource_name: str | None, shm_size: str) -> dict[str, Any]:
    requests = _quantities(spec.resources.requests if spec.resources else None)
    limits = _quantities(spec.resources.limits if spec.resources else None)
    if resource_name is not None:
        # Extended resources must be equal in requests and limits.
        requests[resource_name] = spec.npu.per_replica
        limits[resource_name] = spec.npu.per_replica
        cores, gib_per_npu = HOST_REQUESTS_PER_NPU[spec.npu.chip]
        if "cpu" not in requests and "cpu" not in limits:
            requests["cpu"] = str(cores * spec.npu.per_replica)
        if "memory" not in requests and "memory" not in limits:
            shm_gib = math.ceil(_gib(shm_size))
            requests["memory"] = f"{max(gib_per_npu * spec.npu.per_replica, shm_gib + MIN_MEMORY_BEYOND_SHM_GIB)}Gi"
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _model_wiring(
    spec: AscendLLMDeploymentSpec, settings: OperatorSettings, cache_plan: CachePlan | None = None,
    namespace: str = "",
) -> tuple[list[dict], list[dict], list[dict]]:
    """Volumes, mounts and env for the model source and its cache (``namespace``: the resource's,
    for a hostPath cache's directory)."""
    if cache_plan is None:
        return _source_wiring(spec, settings)
    cache_volumes, cache_mounts = serving_wiring(cache_plan, namespace, settings)
    if cache_plan.request is not None:  # a hub model on the cache: the engine downloads nothing
        return cache_volumes, cache_mounts, []
    volumes, mounts, env = _source_wiring(spec, settings)
    return [*volumes, *cache_volumes], [*mounts, *cache_mounts], env


def _source_wiring(
    spec: AscendLLMDeploymentSpec, settings: OperatorSettings
) -> tuple[list[dict], list[dict], list[dict]]:
    model = spec.model
    if model.pvc is not None:
        mount: dict[str, Any] = {"name": "model", "mountPath": MODEL_DIR, "readOnly": model.pvc.read_only}
        if model.pvc.sub_path:
            mount["subPath"] = model.pvc.sub_path
        volume = {
            "name": "model",
            "persistentVolumeClaim": {"claimName": model.pvc.claim_name, "readOnly": model.pvc.read_only},
        }
        return [volume], [mount], []
    if model.host_path is not None:
        volume = {"name": "model", "hostPath": {"path": model.host_path.path, "type": "Directory"}}
        return [volume], [{"name": "model", "mountPath": MODEL_DIR, "readOnly": True}], []
    empty_dir: dict[str, Any] = {}
    if settings.model_cache_size:
        empty_dir["sizeLimit"] = settings.model_cache_size
    volumes = [{"name": "model-cache", "emptyDir": empty_dir}]
    mounts = [{"name": "model-cache", "mountPath": MODEL_CACHE_DIR}]
    if model.model_scope is not None:
        env: list[dict[str, Any]] = [
            {"name": "VLLM_USE_MODELSCOPE", "value": "true"},
            {"name": "MODELSCOPE_CACHE", "value": f"{MODEL_CACHE_DIR}/modelscope"},
        ]
        token_var = "MODELSCOPE_API_TOKEN"
    else:
        env = [{"name": "HF_HOME", "value": f"{MODEL_CACHE_DIR}/huggingface"}]
        token_var = "HF_TOKEN"
    if model.token_secret_ref is not None:
        env.append(
            {
                "name": token_var,
                "valueFrom": {
                    "secretKeyRef": {"name": model.token_secret_ref.name, "key": model.token_secret_ref.key}
                },
            }
        )
    return volumes, mounts, env


def _engine_env_from(spec: AscendLLMDeploymentSpec) -> list[dict[str, Any]]:
    """engine.envValueFrom and engine.apiKeySecretRef as pod env (valueFrom: never in the ConfigMap).

    The engine inherits the runtime's environment, so these reach it without the engine config."""
    engine = spec.engine
    env: list[dict[str, Any]] = []
    for name, source in sorted(engine.env_value_from.items()):
        if source.secret_key_ref is not None:
            ref = {"secretKeyRef": {"name": source.secret_key_ref.name, "key": source.secret_key_ref.key}}
        else:
            assert source.config_map_key_ref is not None  # the model's rule: exactly one
            config_map = source.config_map_key_ref
            ref = {"configMapKeyRef": {"name": config_map.name, "key": config_map.key}}
        env.append({"name": name, "valueFrom": ref})
    if engine.api_key_secret_ref is not None:
        key = engine.api_key_secret_ref
        env.append({"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": key.name, "key": key.key}}})
    return env


def _config_volume(spec: AscendLLMDeploymentSpec, names: ChildNames) -> dict[str, Any]:
    """The engine-config volume; with LoRA a projected volume that adds the adapters ConfigMap's
    file below it (``adapters/adapters.yaml``), so both sit under one mount: no mount nested in
    a read-only ConfigMap volume, and no ``subPath`` (the kubelet updates the file in place).
    ``optional``: a pod starts (with no adapters) before that ConfigMap exists."""
    config_item = {"key": CONFIG_FILE_KEY, "path": CONFIG_FILE_KEY}
    if not lora_enabled(spec):
        return {"name": "engine-config", "configMap": {"name": names.configmap, "items": [config_item]}}
    adapters_item = {"key": ADAPTERS_FILE_KEY, "path": f"{ADAPTERS_SUBDIR}/{ADAPTERS_FILE_KEY}"}
    return {
        "name": "engine-config",
        "projected": {
            "sources": [
                {"configMap": {"name": names.configmap, "items": [config_item]}},
                {"configMap": {"name": names.adapters, "items": [adapters_item], "optional": True}},
            ]
        },
    }


def termination_grace_seconds(
    spec: AscendLLMDeploymentSpec, settings: OperatorSettings, config: EngineConfig
) -> int:
    """preStop sleep + the runtime's drain timeout + a margin for the exit itself."""
    return settings.prestop_sleep_s + config.engine.shutdown_timeout_s + settings.termination_margin_s


def build_pod_template(
    inputs: BuildInputs,
    *,
    extra_env: Sequence[Mapping[str, Any]] = (),
    extra_labels: Mapping[str, str] | None = None,
    extra_annotations: Mapping[str, str] | None = None,
    shm_size: str | None = None,
    default_scheduler_name: str | None = None,
) -> dict[str, Any]:
    """The engine pod template (``metadata`` + ``spec``) of the resource.

    ``extra_env`` is appended to the container's env, ``extra_labels`` / ``extra_annotations``
    to the template's; ``shm_size`` overrides ``settings.shm_size``; ``default_scheduler_name``
    applies when ``spec.npu.schedulerName`` is unset.
    """
    name, names, spec, settings = inputs.name, inputs.names, inputs.spec, inputs.settings
    cache_plan = inputs.cache_plan
    cpu = spec.platform == Platform.CPU
    resource_name = npu_resource_name(spec, settings)

    env: list[dict[str, Any]] = []
    if resource_name is not None and settings.device_env_from_annotation:
        env.append(
            {
                "name": "ASCEND_VISIBLE_DEVICES",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{resource_name}']"}},
            }
        )
    model_volumes, model_mounts, model_env = _model_wiring(spec, settings, cache_plan, inputs.meta.namespace)
    env.extend(model_env)
    env.extend(_engine_env_from(spec))
    env.extend(copy.deepcopy(dict(item)) for item in extra_env)
    secret_names = sorted(item["name"] for item in env if "secretKeyRef" in item.get("valueFrom", {})
                          and item["name"] not in ALWAYS_SECRET_ENV)
    if secret_names:
        # The runtime masks these variables' values in every log line (ascend_runtime.redact), as
        # it always does for ALWAYS_SECRET_ENV (the hub tokens and VLLM_API_KEY).
        env.append({"name": REDACT_ENV, "value": ",".join(secret_names)})

    adapter_volumes = adapter_volumes_of(spec)
    volumes: list[dict[str, Any]] = [
        _config_volume(spec, names),
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size or settings.shm_size}},
        # Outlives the container, not the pod: the runtime keeps its ladder position here.
        {"name": "runtime-state", "emptyDir": {"sizeLimit": "16Mi"}},
        *model_volumes,
        *(volume.volume() for volume in adapter_volumes),
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "engine-config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "runtime-state", "mountPath": STATE_DIR},
        *model_mounts,
        *(volume.mount() for volume in adapter_volumes),
    ]
    if not cpu and settings.host_mounts == HostMounts.DRIVER:
        for volume_name, path, kind in DRIVER_HOST_PATHS:
            volumes.append({"name": volume_name, "hostPath": {"path": path, "type": kind}})
            mounts.append({"name": volume_name, "mountPath": path, "readOnly": True})

    budget = inputs.budget
    container: dict[str, Any] = {
        "name": names.container,
        "image": inputs.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": list(ENGINE_COMMAND),
        "ports": [
            {"name": "http", "containerPort": DEFAULT_ENGINE_PORT, "protocol": "TCP"},
            {"name": "runtime", "containerPort": DEFAULT_RUNTIME_PORT, "protocol": "TCP"},
        ],
        "env": env,
        "resources": _resources(spec, resource_name, shm_size or settings.shm_size),
        "volumeMounts": mounts,
        "startupProbe": {
            "httpGet": {"path": "/startup", "port": "runtime"},
            "periodSeconds": settings.startup_period_s,
            "timeoutSeconds": settings.probe_timeout_s,
            "failureThreshold": math.ceil(budget.total_s / settings.startup_period_s),
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": "runtime"},
            "periodSeconds": settings.readiness_period_s,
            "timeoutSeconds": settings.probe_timeout_s,
            "failureThreshold": settings.readiness_failure_threshold,
        },
        "livenessProbe": {
            "httpGet": {"path": "/live", "port": "runtime"},
            "periodSeconds": settings.liveness_period_s,
            "timeoutSeconds": settings.probe_timeout_s,
            "failureThreshold": settings.liveness_failure_threshold,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if settings.prestop_sleep_s:
        container["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(settings.prestop_sleep_s)]}}}
    if not env:
        del container["env"]
    if not container["resources"]:
        del container["resources"]

    pod_security = pod_security_context(settings)
    # hostPath caches: the directories made the engine user's, then each node downloads once,
    # before the engine starts (done at once later).
    init_containers = cache_init_containers(cache_plan, settings)
    pod_spec: dict[str, Any] = {
        **({"initContainers": init_containers} if init_containers else {}),
        "containers": [container],
        "volumes": volumes,
        "securityContext": pod_security,
        "terminationGracePeriodSeconds": termination_grace_seconds(spec, settings, inputs.engine_config),
        # The runtime never talks to the API server; the operator reads its /state over HTTP.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    placement = spec.npu
    if placement.node_selector:
        pod_spec["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:
        pod_spec["tolerations"] = [
            t.model_dump(by_alias=True, exclude_none=True) for t in placement.tolerations
        ]
    if placement.affinity is not None:
        pod_spec["affinity"] = copy.deepcopy(placement.affinity)
    if placement.priority_class_name:
        pod_spec["priorityClassName"] = placement.priority_class_name
    scheduler_name = placement.scheduler_name or default_scheduler_name
    if scheduler_name:
        pod_spec["schedulerName"] = scheduler_name

    labels = {**common_labels(name), **(extra_labels or {})}
    annotations = {CONFIG_HASH_ANNOTATION: inputs.config_hash, **(extra_annotations or {})}
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec}

