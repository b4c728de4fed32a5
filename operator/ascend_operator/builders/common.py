"""Labels, selectors and content hashes shared by every child builder (pure functions)."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from ascend_operator.names import label_value

APP_NAME = "ascend-llm"
MANAGED_BY = "ascend-llm-operator"
COMPONENT_ENGINE = "engine"
COMPONENT_CONFIG = "engine-config"
#: The component label of the runtime Service (what the chart's ServiceMonitor selects).
COMPONENT_RUNTIME = "runtime"
SPEC_HASH_ANNOTATION = "llm.ascend.dev/spec-hash"
CONFIG_HASH_ANNOTATION = "llm.ascend.dev/config-hash"
#: Label carrying the resource's own name, so children can be found even for hashed names.
RESOURCE_LABEL = "llm.ascend.dev/deployment"
HASH_LENGTH = 16
#: Label LeaderWorkerSet puts on every pod it creates: "0" on a group's leader, 1.. on workers.
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LEADER_WORKER_INDEX = "0"
#: The label the llm-d router's endpoint picker filters prefill and decode pods by (spec.disaggregation).
LLMD_ROLE_LABEL = "llm-d.ai/role"
#: The operator's own copy of a pod's disaggregation role (in the role Deployment's selector).
PD_ROLE_LABEL = "llm.ascend.dev/pd-role"
#: Label LeaderWorkerSet puts on every pod: the index of its group (one group = one replica).
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"


def selector_labels(name: str) -> dict[str, str]:
    """Labels that select the engine pods of resource ``name`` (immutable on a Deployment)."""
    return {
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/instance": label_value(name),
        "app.kubernetes.io/component": COMPONENT_ENGINE,
    }


def selector_string(name: str) -> str:
    """The pod selector as a label-selector string (``status.selector`` for the scale subresource)."""
    return ",".join(f"{key}={value}" for key, value in sorted(selector_labels(name).items()))


def serving_selector_labels(name: str, nodes_per_replica: int) -> dict[str, str]:
    """The pods that serve the API and count as one replica each: all engine pods, or only the
    group leaders of a multi-node replica (its workers are headless).

    The Service selects these, and so does the scale subresource (``status.selector``): an HPA
    divides a Pods metric by the pods it selects and compares the result with replicas, so the
    selector must match one pod per replica (what LWS's own ``hpaPodSelector`` does too).
    """
    labels = selector_labels(name)
    if nodes_per_replica > 1:
        labels[LWS_WORKER_INDEX_LABEL] = LEADER_WORKER_INDEX
    return labels


def scale_selector_string(name: str, nodes_per_replica: int) -> str:
    """:func:`serving_selector_labels` as a label-selector string, for ``status.selector``."""
    labels = serving_selector_labels(name, nodes_per_replica)
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def common_labels(name: str, component: str = COMPONENT_ENGINE) -> dict[str, str]:
    """The recommended ``app.kubernetes.io/*`` labels of every child."""
    return {
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/instance": label_value(name),
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": APP_NAME,
        RESOURCE_LABEL: label_value(name),
    }


def content_hash(value: Any) -> str:
    """A stable short hash of JSON-like ``value`` (key order does not matter)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_LENGTH]


def with_spec_hash(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` whose ``llm.ascend.dev/spec-hash`` annotation hashes the rest of it."""
    body = copy.deepcopy(obj)
    annotations = body.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.pop(SPEC_HASH_ANNOTATION, None)
    digest = content_hash(body)
    annotations[SPEC_HASH_ANNOTATION] = digest
    return body
