"""The RBAC rules the operator needs, as data (pure; the chart's ClusterRole is rendered from it).

Each rule says whether the framework (kopf) or the application (``ascend_operator.k8s``) needs it,
and why. The application rules are exactly :data:`ascend_operator.k8s.API_VERBS` (a unit test
compares), so a verb the code stops using is not granted, and a verb it starts using fails the
test until granted. No wildcard anywhere.

Scopes: an operator that watches every namespace needs all rules in a ClusterRole
(:func:`cluster_role_rules`). One that watches a list of namespaces needs the cluster-scoped
rules in a ClusterRole and :func:`namespaced_rules` in a Role per watched namespace.
Peering rules apply only when the operator is not standalone.

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

#: kopf's peering resources (kopf.dev/v1): ClusterKopfPeering when cluster-wide, else KopfPeering.
KOPF_GROUP = "kopf.dev"


@dataclass(frozen=True)
class Rule:
    """One RBAC policy rule with the reason it exists."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    comment: str
    #: The resources are cluster-scoped (or the rule is about the whole cluster).
    cluster_scoped: bool = False
    #: Needed only when peering is on: "cluster" (watching all namespaces) or "namespaced".
    peering: str | None = None
    #: Needed only when the operator reads pod /state through the pod proxy (setting STATE_READ proxy).
    pod_proxy: bool = False

    def as_policy_rule(self) -> dict[str, Any]:
        """The rule as a Kubernetes ``PolicyRule`` dict."""

        return {"apiGroups": list(self.api_groups), "resources": list(self.resources), "verbs": list(self.verbs)}


OPERATOR_RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- framework (kopf)
    Rule((KOPF_GROUP,), ("clusterkopfpeerings",), ("get", "list", "watch", "patch"),
         "Framework: peering (leader election) of an operator that watches all namespaces",
         cluster_scoped=True, peering="cluster"),
    Rule((KOPF_GROUP,), ("kopfpeerings",), ("get", "list", "watch", "patch"),
         "Framework: peering (leader election) of an operator that watches some namespaces",
         peering="namespaced"),
    Rule(("apiextensions.k8s.io",), ("customresourcedefinitions",), ("list", "watch"),
         "Framework: noticing CRDs appear and go (kopf re-scans the served resources)", cluster_scoped=True),
    Rule(("",), ("namespaces",), ("list", "watch"),
         "Framework: noticing namespaces appear and go (for namespace patterns)", cluster_scoped=True),
    Rule(("",), ("events",), ("create",),
         "Framework: posting Events about the resources (kopf.event and warnings from handlers)"),
    Rule((GROUP,), (PLURAL,), ("list", "watch", "patch"),
         "Framework: watching the AscendLLMDeployments; patch for kopf's annotations and finalizer"),
    # ---------------------------------------------------------------- application (k8s.py)
    Rule((GROUP,), (f"{PLURAL}/status",), ("patch",),
         "Application: writing the computed status (Kube.patch_status)"),
    Rule((GROUP,), (f"{PLURAL}/finalizers",), ("update",),
         "Application: owner references with blockOwnerDeletion on the children (required where "
         "the OwnerReferencesPermissionEnforcement admission plugin runs)"),
    Rule(("",), ("configmaps", "services"), ("get", "list", "create", "patch", "delete"),
         "Application: the engine-config ConfigMap and the Service: read, server-side apply "
         "(create is checked when apply creates), prune"),
    Rule(("apps",), ("deployments",), ("get", "list", "create", "patch", "delete"),
         "Application: the engine Deployment: read, server-side apply, prune"),
    Rule(("policy",), ("poddisruptionbudgets",), ("get", "list", "create", "patch", "delete"),
         "Application: the PodDisruptionBudget: read, server-side apply, prune"),
    Rule(("leaderworkerset.x-k8s.io",), ("leaderworkersets",), ("get", "list", "create", "patch", "delete"),
         "Application: the LeaderWorkerSet of multi-node replicas: read, server-side apply, prune"),
    Rule(("autoscaling",), ("horizontalpodautoscalers",), ("get", "list", "create", "patch", "delete"),
         "Application: the HorizontalPodAutoscaler: read (also KEDA's, for the autoscaler status), "
         "server-side apply, prune"),
    Rule(("keda.sh",), ("scaledobjects",), ("get", "list", "create", "patch", "delete"),
         "Application: the KEDA ScaledObject: read, server-side apply, prune"),
    Rule(("",), ("pods",), ("list",), "Application: the engine pods, for the status (Kube.list_pods)"),
    Rule(("",), ("pods/proxy",), ("get",),
         "Application: each runtime's GET /state through the pod proxy (Kube.read_state), only when "
         "the operator runs outside the cluster (STATE_READ proxy); in a pod it reads the pod IP",
         pod_proxy=True),
)


def _selected(*, peering: bool, clusterwide: bool, pod_proxy: bool = False) -> list[Rule]:
    wanted = "cluster" if clusterwide else "namespaced"
    return [rule for rule in OPERATOR_RULES
            if (rule.peering is None or (peering and rule.peering == wanted))
            and (pod_proxy or not rule.pod_proxy)]


def cluster_role_rules(*, peering: bool = True, pod_proxy: bool = False) -> list[dict[str, Any]]:
    """Every rule, for the ClusterRole of an operator that watches all namespaces."""

    selected = _selected(peering=peering, clusterwide=True, pod_proxy=pod_proxy)
    return [rule.as_policy_rule() for rule in selected]


def cluster_scoped_rules() -> list[dict[str, Any]]:
    """The rules a namespace-restricted operator still needs cluster-wide."""

    return [rule.as_policy_rule() for rule in OPERATOR_RULES if rule.cluster_scoped and rule.peering is None]


def namespaced_rules(*, peering: bool = True, pod_proxy: bool = False) -> list[dict[str, Any]]:
    """The rules for a Role in each watched namespace of a namespace-restricted operator."""

    return [rule.as_policy_rule() for rule in _selected(peering=peering, clusterwide=False, pod_proxy=pod_proxy)
            if not rule.cluster_scoped]
