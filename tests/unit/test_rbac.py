"""ascend_operator.rbac: least privilege, and exactly the verbs the code uses.

Covered: no wildcard in any rule; every rule says whether kopf or the application needs it; the
application rules grant exactly ``k8s.API_VERBS`` (what ``Kube._call`` allows), and every verb
literal passed to ``_call`` in k8s.py is declared there; the scope helpers (all namespaces,
some namespaces) select the right rules; leader election gets get and update of the one Lease
only, in none of the other roles.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from ascend_operator import k8s
from ascend_operator.rbac import (
    OPERATOR_RULES,
    cluster_role_rules,
    cluster_scoped_rules,
    leader_election_rules,
    namespaced_rules,
)


def test_no_rule_uses_a_wildcard() -> None:
    for rule in OPERATOR_RULES:
        for value in (*rule.api_groups, *rule.resources, *rule.verbs):
            assert "*" not in value, rule


def test_every_rule_says_who_needs_it() -> None:
    for rule in OPERATOR_RULES:
        assert re.match(r"^(Framework|Application): \S", rule.comment), rule.comment


def test_application_rules_grant_exactly_the_verbs_k8s_py_uses() -> None:
    granted: dict[tuple[str, str], set[str]] = defaultdict(set)
    for rule in OPERATOR_RULES:
        if rule.comment.startswith("Application:") and not rule.delegated:
            for group in rule.api_groups:
                for resource in rule.resources:
                    granted[(group, resource)].update(rule.verbs)
    assert dict(granted) == {key: set(verbs) for key, verbs in k8s.API_VERBS.items()}


def _holds(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def test_the_operator_holds_every_right_the_endpoint_pickers_role_grants_and_no_delegated_one_more() -> None:
    # The API server refuses a Role granting more than its creator holds (RBAC escalation
    # prevention): the operator must hold all of the EPP's Role, in every scope it runs in.
    from ascend_operator.builders.routing import EPP_ROLE_RULES

    wanted = {(g, res, v) for r in EPP_ROLE_RULES for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
    for rules in (cluster_role_rules(), namespaced_rules()):
        missing = [w for w in wanted if not _holds(rules, *w)]
        assert not missing, missing
    # Each delegated verb is needed: the operator holds it for the Role and for nothing else.
    for rule in OPERATOR_RULES:
        if rule.delegated:
            for group in rule.api_groups:
                for resource in rule.resources:
                    for verb in rule.verbs:
                        assert (group, resource, verb) in wanted, (group, resource, verb)
                        assert verb not in k8s.API_VERBS.get((group, resource), frozenset())
    # No escalate or bind anywhere.
    assert not any(v in ("escalate", "bind") for rule in OPERATOR_RULES for v in rule.verbs)


def test_every_verb_k8s_py_calls_is_declared_and_every_declared_verb_is_called() -> None:
    source = Path(k8s.__file__).read_text(encoding="utf-8")
    calls = re.findall(r"_call\(\s*(\w+),\s*\"(\w+)\"", source)
    assert calls, "no _call sites found: the pattern no longer matches the code"
    pod_verbs = k8s.API_VERBS[("", "pods")] | k8s.API_VERBS[("", "pods/proxy")]
    for kind_name, verb in calls:
        if kind_name == "POD":
            assert verb in pod_verbs, f"_call(POD, {verb!r}) is not declared"
        else:  # a child kind, any of them
            for kind in k8s.CHILD_KINDS:
                assert verb in k8s.API_VERBS[(kind.group, kind.plural)], f"{verb} on {kind.plural} is not declared"
    called = {verb for name, verb in calls if name != "POD"}
    # Server-side apply sends its PATCH itself (Kube.apply: unescaped text), after the same check.
    assert 'self._request, "PATCH", path, query, content_type=APPLY_CONTENT_TYPE' in source and '"patch" not in API_VERBS.get((kind.group, kind.plural)' in source
    called.add("patch")
    # The reflectors' watches go through the same check (Kube.watch_request), for children and pods.
    assert '_collection(kind, "watch", namespace)' in source
    assert "watch" in k8s.API_VERBS[("", "pods")]
    called.add("watch")
    # create is reached through server-side apply (a PATCH that creates the object), not a _call site.
    for kind in k8s.CHILD_KINDS:
        assert k8s.API_VERBS[(kind.group, kind.plural)] == called | {"create"}
    assert "def patch_status" in source and '{PLURAL}/{name}/status"' in source


def test_scopes() -> None:
    everything = cluster_role_rules()
    cluster_only = cluster_scoped_rules()
    assert {r["resources"][0] for r in cluster_only} == {"customresourcedefinitions", "namespaces"}
    assert all(r in everything for r in cluster_only)
    per_namespace = namespaced_rules()
    assert not any(r in per_namespace for r in cluster_only)
    assert len(everything) == len(per_namespace) + len(cluster_only)
    assert len(everything) == len(OPERATOR_RULES) - 2  # all but the Lease and the pod proxy


def test_leader_election_may_read_and_renew_one_lease_and_nothing_else() -> None:
    assert leader_election_rules("ops-lease") == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
         "resourceNames": ["ops-lease"]},
    ]
    # Never in the roles of the watched namespaces or the cluster: a Lease elsewhere is not ours.
    for rules in (cluster_role_rules(), cluster_role_rules(pod_proxy=True), namespaced_rules(pod_proxy=True),
                  cluster_scoped_rules()):
        assert not any("leases" in r["resources"] for r in rules)


def test_leader_election_calls_only_the_granted_verbs_on_an_existing_lease() -> None:
    # The client's LeaseLock against a recording API: with the Lease there (the chart creates
    # it), acquiring and renewing it reads (get) and replaces (update) it, never creates it.
    import kubernetes
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    calls: list[str] = []
    lease = kubernetes.client.V1Lease(metadata=kubernetes.client.V1ObjectMeta(name="l", namespace="ns"),
                                      spec=kubernetes.client.V1LeaseSpec())

    class Recording:
        def read_namespaced_lease(self, name: str, namespace: str) -> kubernetes.client.V1Lease:
            calls.append("get")
            return lease

        def replace_namespaced_lease(self, name: str, namespace: str, body: kubernetes.client.V1Lease) -> None:
            calls.append("update")

        def create_namespaced_lease(self, namespace: str, body: kubernetes.client.V1Lease) -> None:
            calls.append("create")

    lock = LeaseLock("l", "ns", "me")
    lock.api_instance = Recording()
    election = leaderelection.LeaderElection(electionconfig.Config(
        lock, 15, 10, 2, onstarted_leading=lambda: None, onstopped_leading=lambda: None))
    assert election.try_acquire_or_renew() and election.try_acquire_or_renew()
    granted = {verb for rule in leader_election_rules("l") for verb in rule["verbs"]}
    assert calls == ["get", "update", "get", "update"] and set(calls) <= granted, calls


def test_pod_proxy_is_granted_only_when_state_is_read_through_it() -> None:
    proxy = {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]}
    assert proxy not in cluster_role_rules() and proxy not in namespaced_rules()
    assert proxy in cluster_role_rules(pod_proxy=True) and proxy in namespaced_rules(pod_proxy=True)
    # Namespaced when the operator watches a list of namespaces: in each Role, not the ClusterRole.
    assert proxy not in cluster_scoped_rules()
