"""The RBAC rules the operator needs, as data (pure; the chart's ClusterRole is rendered from it).

Each rule says whether the framework (kopf) or the application (``ascend_operator.k8s``) needs it,
and why. The application rules are exactly :data:`ascend_operator.k8s.API_VERBS` (a unit test
compares), so a verb the code stops using is not granted, and a verb it starts using fails the
test until granted. No wildcard anywhere.

Scopes: an operator that watches every namespace needs all rules in a ClusterRole
(:func:`cluster_role_rules`). One that watches a list of namespaces needs the cluster-scoped
rules in a ClusterRole and :func:`namespaced_rules` in a Role per watched namespace. Replicas
that elect a leader (not standalone: the chart's ``ha.enabled``) also need
:func:`leader_election_rules`, in a Role of the operator's own namespace: get and update of the
one Lease they share (``ascend_operator.leader``), which the chart creates, so no create verb.

Discovery (``GET /apis``, which ``ascend_operator.k8s.Kube.served`` reads to learn whether KEDA,
a custom metrics API and LeaderWorkerSet are installed) needs no rule here: ``/api`` and ``/apis``
are non-resource URLs granted to every authenticated client by the built-in ``system:discovery``
ClusterRole (bound to ``system:authenticated``). The rules for LeaderWorkerSets and ScaledObjects
are harmless where those CRDs are not installed (RBAC names resources, it does not need them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ascend_operator.api import GROUP, PLURAL

@dataclass(frozen=True)
class Rule:
    """One RBAC policy rule with the reason it exists."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    comment: str
    #: The resources are cluster-scoped (or the rule is about the whole cluster).
    cluster_scoped: bool = False
    #: Needed only with leader election, on the one Lease, in the operator's own namespace.
    leader_election: bool = False
    #: Needed only when the operator reads pod /state through the pod proxy (setting STATE_READ proxy).
    pod_proxy: bool = False
    #: Never called: held so the operator may create the Endpoint Picker's Role, which grants it
    #: (the API server refuses a Role granting more than its creator holds: RBAC escalation
    #: prevention). With these the operator needs neither ``escalate`` nor ``bind``.
    delegated: bool = False

    def as_policy_rule(self) -> dict[str, Any]:
        """The rule as a Kubernetes ``PolicyRule`` dict."""

        return {"apiGroups": list(self.api_groups), "resources": list(self.resources), "verbs": list(self.verbs)}


OPERATOR_RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- framework (kopf)
    # LeaseLock reads the Lease (get) and writes its holder and renew time (update, a PUT); it
    # creates one only where none exists, and the chart creates it.
    Rule(("coordination.k8s.io",), ("leases",), ("get", "update"),
         "Framework: leader election of the HA replicas (ascend_operator.leader, LeaseLock)",
         leader_election=True),
    Rule(("apiextensions.k8s.io",), ("customresourcedefinitions",), ("list", "watch"),
         "Framework: noticing CRDs appear and go (kopf re-scans the served resources)", cluster_scoped=True),
    Rule(("",), ("namespaces",), ("list", "watch"),
         "Framework: noticing namespaces appear and go (for namespace patterns)", cluster_scoped=True),
    Rule(("",), ("events",), ("create",),
         "Framework: posting Events about the resources (kopf.event and warnings from handlers)"),
    Rule((GROUP,), (PLURAL,), ("list", "watch", "patch"),
         "Framework: watching the AscendLLMDeployments; patch for removing the finalizer of operator 0.1"),
    # ---------------------------------------------------------------- application (k8s.py)
    Rule((GROUP,), (f"{PLURAL}/status",), ("patch",),
         "Application: writing the computed status (Kube.patch_status)"),
    Rule((GROUP,), (f"{PLURAL}/finalizers",), ("update",),
         "Application: owner references with blockOwnerDeletion on the children (required where "
         "the OwnerReferencesPermissionEnforcement admission plugin runs)"),
    Rule(("",), ("configmaps", "services"), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the engine-config ConfigMap and the Service: read, server-side apply "
         "(create is checked when apply creates), prune"),
    Rule(("apps",), ("deployments",), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the engine Deployment: read, server-side apply, prune"),
    Rule(("policy",), ("poddisruptionbudgets",), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the PodDisruptionBudget: read, server-side apply, prune"),
    Rule(("leaderworkerset.x-k8s.io",), ("leaderworkersets",), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the LeaderWorkerSet of multi-node replicas: read, server-side apply, prune"),
    Rule(("autoscaling",), ("horizontalpodautoscalers",), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the HorizontalPodAutoscaler: read (also KEDA's, for the autoscaler status), "
         "server-side apply, prune"),
    Rule(("keda.sh",), ("scaledobjects",), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the KEDA ScaledObject: read, server-side apply, prune"),
    Rule(("batch",), ("jobs",), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the model cache's fetch Job: read, server-side apply, prune, retry after a failure"),
    Rule(("",), ("persistentvolumeclaims",), ("get", "create", "patch"),
         "Application: the model cache's claim (spec.model.cache.create): read, server-side apply; "
         "never deleted by the operator"),
    Rule(("",), ("serviceaccounts",), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the Endpoint Picker's ServiceAccount (spec.routing): read, server-side apply, prune"),
    Rule(("rbac.authorization.k8s.io",), ("roles", "rolebindings"), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the Endpoint Picker's Role and RoleBinding in the resource's namespace (spec.routing): "
         "read, server-side apply, prune"),
    Rule(("inference.networking.k8s.io",), ("inferencepools",), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the InferencePool (spec.routing): read, server-side apply, prune; get, list and watch "
         "are also what the Endpoint Picker's Role grants"),
    Rule(("gateway.networking.k8s.io",), ("httproutes",), ("get", "list", "watch", "create", "patch", "delete"),
         "Application: the HTTPRoute (spec.routing): read, server-side apply, prune"),
    Rule(("",), ("pods",), ("list", "watch"),
         "Application: the engine pods, listed and watched (label-filtered) for the status (ascend_operator.reflector)"),
    Rule(("",), ("pods",), ("get",),
         "Application: never called; held because the Endpoint Picker's Role grants pods get, list and watch "
         "(a Role may grant only what its creator holds: RBAC escalation prevention)", delegated=True),
    Rule(("inference.networking.x-k8s.io", "llm-d.ai"), ("inferenceobjectives", "inferencemodelrewrites"),
         ("get", "list", "watch"),
         "Application: never called; held because the Endpoint Picker's Role grants them (it watches these "
         "kinds; RBAC escalation prevention), so the operator needs no escalate or bind", delegated=True),
    Rule(("",), ("pods/proxy",), ("get",),
         "Application: each runtime's GET /state through the pod proxy (PodReader.read_state), only when "
         "the operator runs outside the cluster (STATE_READ proxy); in a pod it reads the pod IP",
         pod_proxy=True),
)


def _selected(*, clusterwide: bool, pod_proxy: bool) -> list[Rule]:
    return [rule for rule in OPERATOR_RULES
            if not rule.leader_election and (clusterwide or not rule.cluster_scoped)
            and (pod_proxy or not rule.pod_proxy)]


def cluster_role_rules(*, pod_proxy: bool = False) -> list[dict[str, Any]]:
    """Every rule on the watched resources, for the ClusterRole of an operator that watches all
    namespaces (leader election's are in :func:`leader_election_rules`)."""

    return [rule.as_policy_rule() for rule in _selected(clusterwide=True, pod_proxy=pod_proxy)]


def cluster_scoped_rules() -> list[dict[str, Any]]:
    """The rules a namespace-restricted operator still needs cluster-wide."""

    return [rule.as_policy_rule() for rule in OPERATOR_RULES if rule.cluster_scoped]


def namespaced_rules(*, pod_proxy: bool = False) -> list[dict[str, Any]]:
    """The rules for a Role in each watched namespace of a namespace-restricted operator."""

    return [rule.as_policy_rule() for rule in _selected(clusterwide=False, pod_proxy=pod_proxy)]


def leader_election_rules(lease_name: str) -> list[dict[str, Any]]:
    """The rules for a Role in the operator's own namespace when its replicas elect a leader:
    limited to the Lease ``lease_name`` (``resourceNames``)."""

    return [{**rule.as_policy_rule(), "resourceNames": [lease_name]}
            for rule in OPERATOR_RULES if rule.leader_election]
