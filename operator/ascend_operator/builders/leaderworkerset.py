"""The LeaderWorkerSet of multi-node engine replicas (pure), used when ``spec.nodesPerReplica > 1``.

One replica is one LWS group of ``nodesPerReplica`` pods: the leader (worker index 0) runs the
engine's API server, the workers join it. Both roles get the single-node pod template
(:func:`ascend_operator.builders.pod.build_pod_template`) plus what a group needs; what that is,
and the group's restart, start-up and naming rules: ``docs/multi-node-replicas.md`` ("The
operator side").
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from ascend_operator.api import AscendLLMDeploymentSpec, RolloutStrategy
from ascend_operator.builders.common import (  # noqa: F401  (LWS label names, re-exported)
    LEADER_WORKER_INDEX,
    LWS_WORKER_INDEX_LABEL,
    common_labels,
    with_spec_hash,
)
from ascend_operator.builders.inputs import BuildInputs
from ascend_operator.builders.pod import build_pod_template

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
#: The env var the runtime reads the pod's IP from (ascend_runtime.distributed.POD_IP_ENV).
POD_IP_ENV = "POD_IP"
LWS_KIND = "LeaderWorkerSet"
#: Label LWS puts on every pod: the LeaderWorkerSet's name.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
ROLE_LABEL = "llm.ascend.dev/role"
ROLE_LEADER = "leader"
ROLE_WORKER = "worker"
VOLCANO_RING_CONTROLLER_LABEL = "ring-controller.atlas"
VOLCANO_SCHEDULE_POLICY_ANNOTATION = "huawei.com/schedule_policy"
RESTART_POLICY = "RecreateGroupOnPodRestart"
STARTUP_POLICY = "LeaderCreated"


#: What to install when the cluster lacks the LWS API (kubernetes-sigs/lws releases).
LWS_INSTALL_HINT = (
    "install LeaderWorkerSet (kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/lws/releases/download/<version>/manifests.yaml)"
)


def lws_missing(spec: AscendLLMDeploymentSpec, installed: AbstractSet[str]) -> str | None:
    """A message for a condition when ``spec`` needs LWS and the cluster does not serve it.

    ``installed`` holds the group/versions the cluster serves (a bare group counts too).
    """
    d = spec.disaggregation
    wanting = [("nodesPerReplica", spec.nodes_per_replica)] if d is None else [
        (f"disaggregation.{role}.nodesPerReplica", r.nodes_per_replica)
        for role, r in (("prefill", d.prefill), ("decode", d.decode))]
    wanting = [(field, nodes) for field, nodes in wanting if nodes > 1]
    if not wanting:
        return None
    if LWS_API_VERSION in installed or LWS_API_VERSION.split("/", 1)[0] in installed:
        return None
    field, nodes = wanting[0]
    return (
        f"{field} {nodes} runs each replica as a LeaderWorkerSet, but the "
        f"cluster does not serve {LWS_API_VERSION}; {LWS_INSTALL_HINT}, or set {field} to 1"
    )


def group_env() -> list[dict[str, Any]]:
    """The pod env of every group member: its own IP, from which the runtime sets HCCL_IF_IP."""
    return [{"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]


def _template(inputs: BuildInputs, role: str) -> dict[str, Any]:
    settings = inputs.settings
    labels = {ROLE_LABEL: role}
    if settings.volcano_ring_controller:
        labels[VOLCANO_RING_CONTROLLER_LABEL] = settings.volcano_ring_controller
    annotations = {}
    if settings.volcano_schedule_policy:
        annotations[VOLCANO_SCHEDULE_POLICY_ANNOTATION] = settings.volcano_schedule_policy
    template = build_pod_template(
        inputs,
        extra_env=group_env(),
        extra_labels=labels,
        extra_annotations=annotations,
        shm_size=settings.multinode_shm_size,
        default_scheduler_name=settings.multinode_scheduler_name,
    )
    if role == ROLE_WORKER:
        container = template["spec"]["containers"][0]
        container["ports"] = [port for port in container["ports"] if port["name"] != "http"]
    return template


def build_leaderworkerset(inputs: BuildInputs) -> dict[str, Any]:
    """The LeaderWorkerSet of the resource (docs/multi-node-replicas.md, "The operator side")."""
    spec = inputs.spec
    max_unavailable: int | str = "100%" if spec.rollout.strategy == RolloutStrategy.RECREATE else 1
    return with_spec_hash(
        {
            "apiVersion": LWS_API_VERSION,
            "kind": LWS_KIND,
            "metadata": {
                "name": inputs.names.leaderworkerset,
                "namespace": inputs.namespace,
                "labels": common_labels(inputs.name),
            },
            "spec": {
                "replicas": spec.replicas,
                "startupPolicy": STARTUP_POLICY,
                "rolloutStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": max_unavailable},
                },
                "leaderWorkerTemplate": {
                    "size": spec.nodes_per_replica,
                    "restartPolicy": RESTART_POLICY,
                    "leaderTemplate": _template(inputs, ROLE_LEADER),
                    "workerTemplate": _template(inputs, ROLE_WORKER),
                },
            },
        }
    )
