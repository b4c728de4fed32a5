"""Factories for the golden manifests of the builder tests: what every example shares, written once.

:func:`engine_config_dict` is the whole ``engine-config.yaml`` an example's ConfigMap must hold,
as the runtime reads it; :func:`engine_pod_spec` / :func:`engine_container` an engine pod's spec;
:func:`labels` / :func:`selector` a child's labels. An example gives only what differs (merged
key by key into the shared values; :data:`ABSENT` removes a key). The tests still compare whole
objects, and the values here are literals, not the builders' own constants.
"""

from __future__ import annotations

import copy
from typing import Any

#: An override value that removes the key (e.g. ``ascend={"chip": ABSENT}`` on CPU).
ABSENT: Any = object()

#: The leak limits the runtime defaults to.
LEAK = {
    "enabled": True,
    "hostGrowthMbPerHour": 512.0,
    "deviceGrowthMbPerHour": 512.0,
    "minTimeToExhaustionS": 21600,
    "minHeadroomMb": 256,
    "windowS": 600,
    "graceS": 300,
    "sampleIntervalS": 15.0,
}

_SHARED: dict[str, Any] = {
    "schemaVersion": 1,
    "model": {"path": "/mnt/model", "trustRemoteCode": False},
    "engine": {
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "host": "0.0.0.0",
        "port": 8000,
        "parallel": {"tensor": 1, "pipeline": 1, "data": 1, "expert": False},
        "extraArgs": [],
        "env": {},
        "shutdownTimeoutS": 30,
    },
    "graph": {"policy": "auto", "fallback": True, "replayFailureThreshold": 2, "replayFailureWindowS": 600},
    "ascend": {"chip": "910B", "additionalConfig": {}},
    "warmup": {
        "enabled": True,
        "promptLengths": [16, 256, 1024],
        "concurrency": [1, 4, 16],
        "maxTokens": 8,
        "chat": True,
        "timeoutS": 900,
    },
    "health": {"leak": LEAK, "hangTimeoutS": 300},
    "runtime": {
        "port": 8080,
        "host": "0.0.0.0",
        "restart": {"maxRestarts": 5, "backoffInitialS": 2.0, "backoffMaxS": 120.0, "resetAfterS": 3600},
        "preflight": True,
        "minFreeDeviceMb": 1024,
        "deviceFreeWaitS": 120,
        "stateDir": "/var/lib/ascend-llm/state",
    },
    "distributed": {"nodes": 1, "backend": "mp", "role": "leader", "workerIndex": 0, "rpcPort": 13345},
}


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is ABSENT:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def engine_config_dict(*, name: str, image: str, served_name: str, ready_timeout_s: int,
                       **sections: dict[str, Any]) -> dict[str, Any]:
    """The engine config of resource ``name``: the shared values, ``sections`` (``model``,
    ``engine``, ``graph``, ``ascend``, ``warmup``, ``health``, ``runtime``, ``distributed``)
    merged into them key by key."""
    unknown = set(sections) - set(_SHARED)
    if unknown:
        raise TypeError(f"no engine config section {sorted(unknown)}")
    config = _merge(_SHARED, {"name": name, "image": image, "model": {"servedName": served_name},
                              "runtime": {"readyTimeoutS": ready_timeout_s}})
    config = _merge(config, sections)
    # In the ConfigMap's order, so that a failing diff reads like the file.
    first = ["schemaVersion", "name", "image"]
    return {key: config[key] for key in [*first, *(key for key in config if key not in first)]}


#: The pod securityContext of every engine pod (the runtime image's user).
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
    "fsGroup": 1000,
}
_PORTS = [
    {"name": "http", "containerPort": 8000, "protocol": "TCP"},
    {"name": "runtime", "containerPort": 8080, "protocol": "TCP"},
]


def _probe(path: str, period_s: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "runtime"}, "periodSeconds": period_s, "timeoutSeconds": 5,
            "failureThreshold": failures}


#: The mounts every engine container starts with: the config, /dev/shm, the runtime's state.
BASE_MOUNTS = [
    {"name": "engine-config", "mountPath": "/etc/ascend-llm", "readOnly": True},
    {"name": "dshm", "mountPath": "/dev/shm"},
    {"name": "runtime-state", "mountPath": "/var/lib/ascend-llm/state"},
]


def base_volumes(configmap: str, shm_size: str = "16Gi") -> list[dict[str, Any]]:
    """The volumes every engine pod starts with (those of :data:`BASE_MOUNTS`)."""
    items = [{"key": "engine-config.yaml", "path": "engine-config.yaml"}]
    return [
        {"name": "engine-config", "configMap": {"name": configmap, "items": items}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}},
        {"name": "runtime-state", "emptyDir": {"sizeLimit": "16Mi"}},
    ]


def engine_container(*, image: str, startup_failures: int, **fields: Any) -> dict[str, Any]:
    """The ``engine`` container: the fields every engine pod shares (command, ports, probes,
    securityContext, preStop), the startup probe's ``failureThreshold``, and ``fields`` (``env``,
    ``resources``, ``volumeMounts`` ...) set or, with :data:`ABSENT`, removed."""
    container = {
        "name": "engine",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["ascend-llm", "run", "--config", "/etc/ascend-llm/engine-config.yaml"],
        "ports": _PORTS,
        "startupProbe": _probe("/startup", 2, startup_failures),
        "readinessProbe": _probe("/ready", 5, 3),
        "livenessProbe": _probe("/live", 10, 3),
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                            "capabilities": {"drop": ["ALL"]}},
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}},
    }
    return _merge(container, fields)


def engine_pod_spec(*, container: dict[str, Any], volumes: list[dict[str, Any]],
                    **fields: Any) -> dict[str, Any]:
    """An engine pod's spec: ``container``, ``volumes``, what every engine pod shares, and
    ``fields`` set or, with :data:`ABSENT`, removed."""
    spec = {
        "containers": [container],
        "volumes": volumes,
        "securityContext": POD_SECURITY,
        "terminationGracePeriodSeconds": 50,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    return _merge(spec, fields)


def labels(name: str, component: str = "engine") -> dict[str, str]:
    """The labels every child of resource ``name`` carries (``component``: which part it is)."""
    return {
        **selector(name, component),
        "app.kubernetes.io/managed-by": "ascend-llm-operator",
        "app.kubernetes.io/part-of": "ascend-llm",
        "llm.ascend.dev/deployment": name,
    }


def selector(name: str, component: str = "engine") -> dict[str, str]:
    """The labels a Service, PDB or workload of resource ``name`` selects its pods by."""
    return {
        "app.kubernetes.io/name": "ascend-llm",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
    }
