"""The Helm chart charts/ascend-llm-operator, linted and rendered by real Helm 3 and Helm 4.

Covers:
- `helm lint --strict` and `helm template` for every ci/*-values.yaml, with both Helm versions;
- every rendered object valid against the Kubernetes OpenAPI schemas (kubernetes-validate,
  strict, for 1.30, 1.36 and the newest it knows); the ServiceMonitor against the Prometheus
  Operator CRD, unknown fields included;
- `--include-crds` renders the AscendLLMDeployment CRD, valid and identical to crds/;
- bad values (unknown key, wrong type, bad enum, wildcard RBAC) refused by values.schema.json
  with the field named in Helm's message;
- the RBAC equal to ascend_operator.rbac.OPERATOR_RULES, framework and application commented
  apart, ClusterRole vs per-namespace Roles; with HA only, the Lease and a Role in the release
  namespace for exactly that Lease, equal to ascend_operator.rbac.leader_election_rules;
- the operator Deployment: standalone vs HA leader election, watched namespaces, liveness, hardening;
- the settings env read back by the operator's own load_settings, and in step with OperatorSettings;
- values.yaml documented field by field and listed in the README's table;
- the Grafana dashboard's queries use metrics the runtime exports and labels the ServiceMonitor keeps.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from ascend_operator import rbac
from charttools import (
    CHART_DIR,
    CI_VALUES,
    CRD_DATA,
    REPO_ROOT,
    Helm,
    by_kind,
    load_crd_schema,
    one,
)

pytestmark = pytest.mark.tools

#: Kubernetes versions every rendered object must be valid for: the oldest the chart supports
#: (Chart.yaml kubeVersion is >=1.28; kubernetes-validate's 1.30 is the floor tested), the
#: acceptance cluster's, and the newest schema kubernetes-validate carries.
K8S_VERSIONS = ("1.30", "1.36", kubernetes_validate.latest_version())
CI = {path.name.removesuffix("-values.yaml"): path for path in CI_VALUES}
FULLNAME = "test-release-ascend-llm-operator"
RELEASE_NAMESPACE = "llm-system"
SERVICEMONITOR_CRD = CRD_DATA / "monitoring.coreos.com_servicemonitors.yaml"
ALD_CRD = "llm.ascend.dev_ascendllmdeployments.yaml"


def values(*names: str) -> tuple[Path, ...]:
    return tuple(CI[name] for name in names)


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = one(objects, "Deployment")
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def env_of(objects: list[dict[str, Any]]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container(objects)["env"] if "value" in item}


def unknown_fields(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields of `obj` that a structural CRD schema does not declare (the API server would prune
    them silently, so a typo in a template would go unnoticed)."""
    found: list[str] = []
    if isinstance(obj, dict) and schema.get("type") == "object":
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if schema.get("x-kubernetes-preserve-unknown-fields") or (properties is None and extra is None):
            return found  # kept as is (or metadata, which the server checks itself)
        for key, value in obj.items():
            if not path and key in ("apiVersion", "kind", "metadata"):
                continue  # every object has them; CRD schemas need not declare them
            if properties is not None and key in properties:
                found += unknown_fields(value, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += unknown_fields(value, extra, f"{path}.{key}")
            elif extra is not True:
                found.append(f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(obj):
            found += unknown_fields(item, schema["items"], f"{path}[{index}]")
    return found


def validate_custom(obj: dict[str, Any], schema: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(schema).validate(obj)
    assert unknown_fields(obj, schema) == [], f"{obj['kind']} {obj['metadata']['name']}: fields the CRD lacks"


def validate_object(obj: dict[str, Any], crd_schemas: dict[str, dict[str, Any]]) -> None:
    kind = obj["kind"]
    if kind in crd_schemas:
        validate_custom(obj, crd_schemas[kind])
        return
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(
                f"{kind} {obj['metadata'].get('name')} invalid for Kubernetes {version} at "
                f"{'.'.join(map(str, error.path))}: {error.message}"
            )


# --- Lint and render over the values matrix ---------------------------------------------------


@pytest.mark.parametrize("values_file", CI_VALUES, ids=lambda p: p.name)
def test_lint_strict_passes_for_every_ci_values_file(helm: Helm, values_file: Path) -> None:
    result = helm.run("lint", "--strict", str(CHART_DIR), "--values", str(values_file))
    assert result.returncode == 0, (
        f"{helm.name} lint --strict -f {values_file.name}:\n{result.stdout}{result.stderr}"
    )
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("values_file", CI_VALUES, ids=lambda p: p.name)
def test_every_rendered_object_is_valid_kubernetes(helm: Helm, values_file: Path) -> None:
    objects = helm.render((values_file,))
    assert objects, "the chart rendered nothing"
    schemas = {"ServiceMonitor": load_crd_schema(SERVICEMONITOR_CRD, "v1")}
    for obj in objects:
        validate_object(obj, schemas)


def test_validation_catches_an_unknown_field_in_a_rendered_object(helm4: Helm) -> None:
    # The validator itself must fail on a typo, or the test above proves nothing.
    deployment = one(helm4.render(), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.30", strict=True)
    monitor = one(helm4.render(values("monitoring")), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "1m"
    assert unknown_fields(monitor, load_crd_schema(SERVICEMONITOR_CRD, "v1")) == [
        ".spec.endpoints[0].intervall"
    ]


def test_every_object_carries_the_recommended_labels(helm: Helm) -> None:
    for name in CI:
        for obj in helm.render(values(name)):
            labels = obj["metadata"].get("labels", {})
            assert labels.get("app.kubernetes.io/name") == "ascend-llm-operator", obj["kind"]
            assert labels.get("app.kubernetes.io/instance") == "test-release", obj["kind"]
            assert labels.get("app.kubernetes.io/managed-by") == "Helm", obj["kind"]
            assert labels.get("helm.sh/chart") == "ascend-llm-operator-0.3.0", obj["kind"]
            assert labels.get("app.kubernetes.io/version") == "0.1.0", obj["kind"]


def test_selector_never_holds_labels_that_change_on_upgrade(helm: Helm) -> None:
    # A Deployment's selector is immutable: a chart or app version in it breaks `helm upgrade`.
    selector = one(helm.render(), "Deployment")["spec"]["selector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/name": "ascend-llm-operator",
        "app.kubernetes.io/instance": "test-release",
        "app.kubernetes.io/component": "operator",
    }


# --- CRDs --------------------------------------------------------------------------------------


def test_include_crds_renders_the_ascendllmdeployment_crd_valid_and_unchanged(helm: Helm) -> None:
    objects = helm.render(include_crds=True)
    crds = [o for o in by_kind(objects, "CustomResourceDefinition") if o["spec"]["group"] == "llm.ascend.dev"]
    assert len(crds) == 1
    chart_copy = yaml.safe_load((CHART_DIR / "crds" / ALD_CRD).read_text(encoding="utf-8"))
    assert crds[0] == chart_copy
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(crds[0], version, strict=True)
    assert crds[0]["spec"]["names"]["shortNames"] == ["ald", "ascendllm"]
    # Without --include-crds, Helm 3 and 4 leave crds/ out of `helm template`.
    assert not [o for o in by_kind(helm.render(), "CustomResourceDefinition")]


def test_chart_crd_is_the_generated_one() -> None:
    chart_copy = (CHART_DIR / "crds" / ALD_CRD).read_text(encoding="utf-8")
    assert chart_copy == (REPO_ROOT / "crds" / ALD_CRD).read_text(encoding="utf-8"), (
        "charts/ascend-llm-operator/crds is stale: run `ascend-llm crd`"
    )


# --- values.schema.json refuses bad values ----------------------------------------------------

BAD_SETS = [
    pytest.param(("replicaCount=2",), ["replicaCount"], id="unknown-top-level-key"),
    pytest.param(("settings.imagTag=0.2.0",), ["imagTag"], id="unknown-nested-key"),
    pytest.param(("ha.replicas=two",), ["replicas"], id="string-for-integer"),
    pytest.param(("ha.enabled=yes",), ["enabled"], id="string-for-boolean"),
    pytest.param(("settings.engineRunAsUser=-1",), ["engineRunAsUser"], id="negative-uid"),
    pytest.param(("settings.hostMounts=all",), ["hostMounts"], id="bad-enum-host-mounts"),
    pytest.param(("image.pullPolicy=Sometimes",), ["pullPolicy"], id="bad-enum-pull-policy"),
    pytest.param(("settings.imagePullPolicy=always",), ["imagePullPolicy"], id="bad-enum-engine-pull-policy"),
    pytest.param(("watchNamespaces[0]=Bad_Namespace",), ["watchNamespaces"], id="bad-namespace-name"),
    pytest.param(("ha.enabled=true", "ha.replicas=1"), ["replicas"], id="ha-with-one-replica"),
    pytest.param(("securityContext.runAsRoot=true",), ["runAsRoot"], id="unknown-security-field"),
    pytest.param(("metrics.serviceMonitor.interval=30 seconds",), ["interval"], id="bad-duration"),
    # The chart README's upgrade note: a 0.2.x values file naming the old key fails, naming it.
    pytest.param(("ha.peeringName=ops",), ["peeringName"], id="chart-0.2-key"),
    pytest.param(("settings.leaseDurationS=1",), ["leaseDurationS"], id="lease-too-short"),
    pytest.param(("settings.leaseDurationS=15.5",), ["leaseDurationS"], id="lease-not-whole-seconds"),
    pytest.param(("settings.leaseRetryPeriodS=1",), ["leaseRetryPeriodS"], id="lease-retry-not-above-1"),
    pytest.param(("settings.maxConcurrentClusterIpCreates=0",), ["maxConcurrentClusterIpCreates"],
                 id="no-clusterip-create-in-flight"),
]


@pytest.mark.parametrize(("sets", "fields"), BAD_SETS)
def test_bad_values_fail_naming_the_field(helm: Helm, sets: tuple[str, ...], fields: list[str]) -> None:
    result = helm.template(sets=sets)
    assert result.returncode != 0, f"{helm.name} accepted {sets}"
    assert "values don't meet the specifications of the schema" in result.stderr or "schema" in result.stderr
    for field in fields:
        assert field in result.stderr, f"{helm.name} did not name {field!r}:\n{result.stderr}"


def test_wildcard_rbac_rule_is_refused(helm: Helm, tmp_path: Path) -> None:
    bad = tmp_path / "wildcard.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "rbac": {
                    "namespacedRules": [
                        {
                            "kind": "application",
                            "comment": "everything",
                            "apiGroups": [""],
                            "resources": ["pods"],
                            "verbs": ["*"],
                        },
                    ]
                }
            }
        )
    )
    result = helm.template(values=(bad,))
    assert result.returncode != 0
    assert "verbs" in result.stderr


# --- RBAC --------------------------------------------------------------------------------------


def rule_set(rules: list[dict[str, Any]]) -> set[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    return {
        (tuple(sorted(r["apiGroups"])), tuple(sorted(r["resources"])), tuple(sorted(r["verbs"])))
        for r in rules
    }


def test_cluster_wide_rbac_equals_the_operator_rules(helm: Helm) -> None:
    objects = helm.render()
    role = one(objects, "ClusterRole")
    assert rule_set(role["rules"]) == rule_set(rbac.cluster_role_rules())
    assert len(role["rules"]) == len(rbac.cluster_role_rules()), "a rule rendered twice"
    assert not by_kind(objects, "Role")
    # Cluster-scoped names carry the release namespace: same-named releases in two namespaces coexist.
    assert role["metadata"]["name"] == f"{FULLNAME}-{RELEASE_NAMESPACE}"
    binding = one(objects, "ClusterRoleBinding")
    assert binding["metadata"]["name"] == f"{FULLNAME}-{RELEASE_NAMESPACE}"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": f"{FULLNAME}-{RELEASE_NAMESPACE}",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": RELEASE_NAMESPACE}
    ]


def leader_election_roles(objects: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Roles and RoleBindings of templates/lease.yaml (named <fullname>-leader-election)."""
    name = f"{FULLNAME}-leader-election"
    return ([o for o in by_kind(objects, "Role") if o["metadata"]["name"] == name],
            [o for o in by_kind(objects, "RoleBinding") if o["metadata"]["name"] == name])


@pytest.mark.parametrize(("name", "lease"), [("ha", FULLNAME), ("namespaced-ha", "llm-operators")])
def test_ha_rbac_adds_exactly_the_operators_leader_election_rule(helm: Helm, name: str, lease: str) -> None:
    objects = helm.render(values(name))
    # The ClusterRole and the watched namespaces' Roles are those without HA: no Lease rule there.
    expected = rbac.cluster_role_rules() if name == "ha" else rbac.cluster_scoped_rules()
    assert rule_set(one(objects, "ClusterRole")["rules"]) == rule_set(expected)
    (role,), (binding,) = leader_election_roles(objects)
    assert role["metadata"]["namespace"] == RELEASE_NAMESPACE
    assert role["rules"] == rbac.leader_election_rules(lease)
    assert binding["metadata"]["namespace"] == RELEASE_NAMESPACE
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": RELEASE_NAMESPACE}]
    # The template's comment is the operator's (the Framework:/Application: convention).
    template = helm.template(values(name)).stdout
    (comment,) = [rule.comment for rule in rbac.OPERATOR_RULES if rule.leader_election]
    assert f"  # {comment}\n" in template


def test_the_lease_and_its_rule_come_only_with_ha(helm: Helm) -> None:
    def lease_rules(objects: list[dict[str, Any]]) -> list[tuple[str, str, tuple[str, ...]]]:
        return [
            (obj["kind"], obj["metadata"].get("namespace", ""), tuple(rule.get("resourceNames", ())))
            for obj in objects
            if obj["kind"] in ("ClusterRole", "Role")
            for rule in obj["rules"]
            if "leases" in rule["resources"]
        ]

    for name in ("default", "namespaced"):
        objects = helm.render(values(name))
        assert lease_rules(objects) == [] and not by_kind(objects, "Lease")
        assert "ASCEND_LLM_OPERATOR_LEASE_NAME" in env_of(objects)  # passed, but unused when standalone
    assert lease_rules(helm.render(values("ha"))) == [("Role", RELEASE_NAMESPACE, (FULLNAME,))]
    assert lease_rules(helm.render(values("namespaced-ha"))) == [("Role", RELEASE_NAMESPACE, ("llm-operators",))]
    # rbac.create false: the Lease still, its Role not (bind the rules yourself).
    unbound = helm.render(values("ha"), ("rbac.create=false",))
    assert by_kind(unbound, "Lease") and lease_rules(unbound) == [] and not by_kind(unbound, "RoleBinding")


@pytest.mark.parametrize("name", ["namespaced", "namespaced-ha"])
def test_namespaced_rbac_splits_cluster_and_namespace_rules(helm: Helm, name: str) -> None:
    objects = helm.render(values(name))
    watched = yaml.safe_load(CI[name].read_text(encoding="utf-8"))["watchNamespaces"]
    lease_roles, lease_bindings = leader_election_roles(objects)
    roles = [r for r in by_kind(objects, "Role") if r not in lease_roles]
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(watched)
    for role in roles:
        assert rule_set(role["rules"]) == rule_set(rbac.namespaced_rules())
    assert rule_set(one(objects, "ClusterRole")["rules"]) == rule_set(rbac.cluster_scoped_rules())
    bindings = [b for b in by_kind(objects, "RoleBinding") if b not in lease_bindings]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(watched)
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": FULLNAME,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": FULLNAME, "namespace": RELEASE_NAMESPACE}
        ]


def test_values_rules_carry_the_operators_framework_and_application_comments() -> None:
    rules = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))["rbac"]
    rendered = {
        f"{rule['kind'].capitalize()}: {rule['comment']}"
        for rule in rules["clusterRules"] + rules["namespacedRules"]
    }
    # The template adds the pod-proxy rule (only with settings.stateRead proxy), and lease.yaml
    # the leader-election rule (only with ha.enabled).
    expected = {rule.comment for rule in rbac.OPERATOR_RULES if not rule.leader_election and not rule.pod_proxy}
    assert rendered == expected


def test_multi_tenant_policies_reach_the_operator(helm: Helm) -> None:
    from ascend_operator.settings import StateRead, load_settings

    loaded = load_settings(settings_env(helm.render(values("multi-tenant"))))
    assert loaded.host_path_prefixes == ["/data/models"]
    assert loaded.allowed_image_prefixes == ["registry.example.com/llm/"]
    assert loaded.allowed_priority_classes == ["llm-normal", "llm-low"]
    assert (loaded.allowed_scheduler_names, loaded.allowed_toleration_keys) == (["volcano"], ["huawei.com/Ascend910"])
    assert loaded.state_read == StateRead.PROXY
    roles = by_kind(helm.render(values("multi-tenant")), "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert all((("",), ("pods/proxy",), ("get",)) in rule_set(role["rules"]) for role in roles)


@pytest.mark.parametrize(("name", "clusterwide"), [("default", True), ("namespaced", False)])
def test_pod_proxy_is_granted_only_with_state_read_proxy(helm: Helm, name: str, clusterwide: bool) -> None:
    proxy = (("",), ("pods/proxy",), ("get",))
    plain = helm.render(values(name))
    proxied = helm.render(values(name), ("settings.stateRead=proxy",))
    kind = "ClusterRole" if clusterwide else "Role"
    assert all(proxy not in rule_set(role["rules"]) for role in by_kind(plain, kind) + by_kind(plain, "ClusterRole"))
    roles = by_kind(proxied, kind)
    assert roles and all(proxy in rule_set(role["rules"]) for role in roles)
    expected = rbac.cluster_role_rules(pod_proxy=True) if clusterwide else rbac.namespaced_rules(pod_proxy=True)
    assert all(rule_set(role["rules"]) == rule_set(expected) for role in roles)
    if not clusterwide:  # scoped to the watched namespaces: never cluster-wide
        assert proxy not in rule_set(one(proxied, "ClusterRole")["rules"])


def test_rbac_has_no_wildcards_and_comments_every_rule(helm: Helm) -> None:
    for name in CI:
        result = helm.template(values(name))
        for doc in result.stdout.split("\n---\n"):
            if not re.search(r"^kind: (Cluster)?Role$", doc, re.MULTILINE):
                continue
            rules_text = doc.split("\nrules:\n", 1)[1]
            items = re.findall(r"^  - apiGroups:", rules_text, re.MULTILINE)
            comments = re.findall(r"^  # (Framework|Application): \S", rules_text, re.MULTILINE)
            assert len(comments) == len(items) > 0, (
                f"{name}: a rule without its Framework:/Application: comment"
            )
            # Framework rules first, then application rules: never interleaved.
            assert comments == sorted(comments, key=lambda c: c != "Framework")
            obj = yaml.safe_load(doc)
            for rule in obj["rules"]:
                for key in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule[key], f"{name}: wildcard in {obj['kind']} {key}"


# --- The operator Deployment -------------------------------------------------------------------


def test_default_is_one_standalone_replica_with_recreate(helm: Helm) -> None:
    objects = helm.render()
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    main = container(objects)
    assert main["args"] == ["--standalone", "--liveness=http://0.0.0.0:8080/healthz"]
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert main["ports"] == [{"name": "health", "containerPort": 8080, "protocol": "TCP"}]
    env = env_of(objects)
    assert env["ASCEND_LLM_OPERATOR_STANDALONE"] == "true"
    assert env["ASCEND_LLM_OPERATOR_NAMESPACES"] == "[]"
    assert not by_kind(objects, "Lease") and not by_kind(objects, "CustomResourceDefinition")


def test_ha_runs_replicas_that_elect_a_leader_with_a_lease(helm: Helm) -> None:
    objects = helm.render(values("ha"))
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert container(objects)["args"] == ["--liveness=http://0.0.0.0:8080/healthz"]
    lease = one(objects, "Lease")
    assert lease["apiVersion"] == "coordination.k8s.io/v1"
    assert (lease["metadata"]["namespace"], lease["metadata"]["name"]) == (RELEASE_NAMESPACE, FULLNAME)
    # An ordinary object of the release (not a hook), so `helm uninstall` deletes it; no holder
    # in the manifest, so an upgrade leaves the operator's election record alone.
    assert "annotations" not in lease["metadata"] and lease["spec"] == {}
    # No CRD but the AscendLLMDeployment's (kopf.dev's are gone with kopf's HA).
    assert not by_kind(objects, "CustomResourceDefinition")
    crds = {crd["metadata"]["name"] for crd in by_kind(helm.render(include_crds=True), "CustomResourceDefinition")}
    assert crds == {"ascendllmdeployments.llm.ascend.dev"}
    env = env_of(objects)
    assert env["ASCEND_LLM_OPERATOR_STANDALONE"] == "false"
    assert env["ASCEND_LLM_OPERATOR_LEASE_NAME"] == FULLNAME
    assert env["ASCEND_LLM_OPERATOR_LEASE_NAMESPACE"] == RELEASE_NAMESPACE


def test_namespaced_ha_keeps_its_lease_in_the_release_namespace(helm: Helm) -> None:
    objects = helm.render(values("namespaced-ha"))
    lease = one(objects, "Lease")
    assert (lease["metadata"]["namespace"], lease["metadata"]["name"]) == (RELEASE_NAMESPACE, "llm-operators")
    env = env_of(objects)
    assert (env["ASCEND_LLM_OPERATOR_LEASE_NAME"], env["ASCEND_LLM_OPERATOR_LEASE_NAMESPACE"]) == (
        "llm-operators", RELEASE_NAMESPACE)
    assert container(objects)["args"] == ["--namespace=llm-prod", "--liveness=http://0.0.0.0:8080/healthz"]


def test_watch_namespaces_reach_kopf_and_the_operator(helm: Helm) -> None:
    objects = helm.render(values("namespaced"))
    args = container(objects)["args"]
    assert "--namespace=llm-prod" in args and "--namespace=llm-staging" in args
    assert "--standalone" in args
    assert json.loads(env_of(objects)["ASCEND_LLM_OPERATOR_NAMESPACES"]) == ["llm-prod", "llm-staging"]


@pytest.mark.parametrize("values_file", CI_VALUES, ids=lambda p: p.name)
def test_operator_pod_is_hardened(helm: Helm, values_file: Path) -> None:
    objects = helm.render((values_file,))
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    security = container(objects)["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["runAsNonRoot"] is True
    # A read-only root needs somewhere to write temporary files.
    assert {"name": "tmp", "mountPath": "/tmp"} in container(objects)["volumeMounts"]


def test_resources_are_unset_by_default_and_passed_when_given(helm: Helm) -> None:
    assert "resources" not in container(helm.render())
    assert container(helm.render(values("custom-images")))["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "256Mi"},
    }


def test_custom_images_values_reach_the_pod(helm: Helm) -> None:
    objects = helm.render(values("custom-images"))
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert container(objects)["image"] == (
        "registry.example.com/ai/ascend-llm-operator@sha256:"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    )
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "llm-operator"
    assert not by_kind(objects, "ServiceAccount")
    assert one(objects, "ClusterRoleBinding")["subjects"][0]["name"] == "llm-operator"
    assert container(objects)["args"][-1] == "--verbose"


# --- Settings env --------------------------------------------------------------------------------


def settings_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    return {k: v for k, v in env_of(objects).items() if k.startswith("ASCEND_LLM_OPERATOR_")}


def test_default_settings_env_loads_to_the_operators_own_defaults(helm: Helm) -> None:
    from ascend_operator.settings import OperatorSettings, load_settings

    loaded = load_settings(settings_env(helm.render()))
    expected = OperatorSettings(standalone=True, lease_name=FULLNAME, lease_namespace=RELEASE_NAMESPACE)
    # values.yaml repeats the operator's defaults; a changed default in settings.py must be
    # mirrored there (or set to null), which this comparison enforces.
    assert loaded.model_dump() == expected.model_dump()


@pytest.mark.parametrize("values_file", CI_VALUES, ids=lambda p: p.name)
def test_settings_env_of_every_ci_file_is_accepted_by_the_operator(helm: Helm, values_file: Path) -> None:
    from ascend_operator.settings import load_settings

    load_settings(settings_env(helm.render((values_file,))))


def test_settings_values_reach_the_operator(helm: Helm) -> None:
    from ascend_operator.settings import HostMounts, load_settings

    mounts = load_settings(settings_env(helm.render(values("host-mounts"))))
    assert mounts.host_mounts == HostMounts.DRIVER
    assert (mounts.shm_size, mounts.model_cache_size) == ("32Gi", "500Gi")
    images = load_settings(settings_env(helm.render(values("custom-images"))))
    assert images.image_repository == "registry.example.com/ai/ascend-llm-runtime"
    assert images.cpu_image == "registry.example.com/ai/ascend-llm-runtime:0.1.0-vllm-cpu"
    assert images.resource_name_910b == "huawei.com/Ascend910B"
    lease = load_settings(settings_env(helm.render(values("ha"))))
    assert (lease.lease_duration_s, lease.lease_renew_deadline_s, lease.lease_retry_period_s) == (20, 12.5, 3.0)
    # null is "not passed": the operator's default applies.
    assert "ASCEND_LLM_OPERATOR_ENGINE_FS_GROUP" not in settings_env(helm.render(values("custom-images")))


def test_chart_exposes_every_operator_setting(helm4: Helm) -> None:
    from ascend_operator.settings import OperatorSettings

    chart_settings = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))["settings"]
    # Four settings follow from the chart's structure (watchNamespaces, ha, the release) instead.
    derived = {"namespaces", "standalone", "lease_name", "lease_namespace"}
    # An explicit API URL is for tests and local development: in its pod the operator uses the
    # in-cluster service account, and the CA file and skipping TLS checks apply only with that URL.
    local_only = {"api_server", "api_ca_file", "api_insecure_skip_tls_verify"}
    snake = {snake_case(key) for key in chart_settings}
    rendered = {name.removeprefix("ASCEND_LLM_OPERATOR_").lower() for name in settings_env(helm4.render())}
    assert {key for key in snake if key in rendered} | derived == rendered, (
        "the rule above differs from Helm's"
    )
    assert snake | derived | local_only == set(OperatorSettings.model_fields)
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    assert set(schema["properties"]["settings"]["properties"]) == set(chart_settings)


def snake_case(key: str) -> str:
    """Helm's snakecase (the env names in _settings.tpl): a break before an upper-case letter or a
    digit that follows a lower-case letter, and before an upper-case letter that starts a word."""
    return re.sub(r"(?<=[a-z])(?=[A-Z0-9])|(?<=[A-Z])(?=[A-Z][a-z])", "_", key).lower()


def test_settings_schema_has_the_operators_types_and_bounds() -> None:
    # A value the schema lets through but the operator refuses would fail only at the operator's
    # start, in its pod; the schema refuses it at `helm install` instead.
    from ascend_operator.settings import OperatorSettings

    bound_keys = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    checked = 0
    for key, spec in schema["properties"]["settings"]["properties"].items():
        field = OperatorSettings.model_fields[snake_case(key)]
        if field.annotation not in (int, float):
            continue
        assert spec["type"] == ("integer" if field.annotation is int else "number"), key
        bounds = {bound_keys[name]: getattr(meta, name) for meta in field.metadata for name in bound_keys
                  if getattr(meta, name, None) is not None}
        assert {k: spec[k] for k in bound_keys.values() if k in spec} == bounds, key
        checked += 1
    assert checked >= 30


# --- values.yaml documentation and README ------------------------------------------------------


def documented_paths(text: str) -> tuple[list[str], list[str]]:
    """Walk values.yaml: (paths of values with a `# --` comment, leaf values without one).

    A `# --` comment (helm-docs style, possibly continued on the following `#` lines) documents
    the key under it and everything nested in it (e.g. the fields of an example securityContext).
    A section key (a mapping of documented keys) needs no `# --` of its own.
    """
    documented: list[str] = []
    undocumented: list[str] = []
    stack: list[tuple[int, str, bool]] = []  # (indent, key, documented as a whole)
    comments: list[str] = []  # the comment lines directly above the current line
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped)
            continue
        match = re.match(r"^(\s*)([A-Za-z0-9_.\-/]+):", line)
        if match:
            indent, key = len(match.group(1)), match.group(2)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            has_doc = any(c.startswith("# --") for c in comments)
            covered = any(doc for _, _, doc in stack)
            path = ".".join([k for _, k, _ in stack] + [key])
            is_section = stripped.endswith(":")
            if has_doc and not covered:
                documented.append(path)
            elif not has_doc and not covered and not is_section:
                undocumented.append(path)
            stack.append((indent, key, has_doc))
        comments = []
    return documented, undocumented


def test_every_value_is_documented() -> None:
    documented, undocumented = documented_paths((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    assert undocumented == []
    assert {
        "image.repository",
        "watchNamespaces",
        "ha.enabled",
        "settings.hostMounts",
        "metrics.serviceMonitor.enabled",
        "grafanaDashboard.enabled",
    } <= set(documented)


def test_readme_lists_every_documented_value() -> None:
    documented, _ = documented_paths((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    readme = (CHART_DIR / "README.md").read_text(encoding="utf-8")
    missing = [path for path in documented if f"| `{path}` |" not in readme]
    assert missing == [], "charts/ascend-llm-operator/README.md lacks these values in its table"
    assert "kubectl apply --server-side -f" in readme, "the CRD-upgrade caveat"


# --- Monitoring --------------------------------------------------------------------------------


def test_servicemonitor_scrapes_the_runtime_metrics_port_of_engine_services(helm: Helm) -> None:
    objects = helm.render(values("monitoring"))
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == ("metrics", "/metrics", "15s")
    namespaced = one(
        helm.render(values("namespaced"), sets=("metrics.serviceMonitor.enabled=true",)), "ServiceMonitor"
    )
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["llm-prod", "llm-staging"]}
    assert not by_kind(helm.render(), "ServiceMonitor")


def test_servicemonitor_selects_the_services_the_operator_builds(helm4: Helm) -> None:
    from ascend_operator.api import AscendLLMDeploymentSpec
    from ascend_operator.builders import BuildMeta, build_children
    from ascend_operator.settings import OperatorSettings

    monitor = one(helm4.render(values("monitoring")), "ServiceMonitor")
    resource = yaml.safe_load((REPO_ROOT / "examples" / "qwen72b-910b-tp8.yaml").read_text(encoding="utf-8"))
    spec = AscendLLMDeploymentSpec.model_validate(resource["spec"])
    children = build_children(BuildMeta(resource["metadata"]["name"], "llm-prod"), spec, OperatorSettings())
    service = children.runtime_service
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["type"] == "ClusterIP"
    # The clients' Service (possibly a LoadBalancer) is not scraped and carries only the API port.
    assert not monitor["spec"]["selector"]["matchLabels"].items() <= children.service["metadata"]["labels"].items()
    assert [p["name"] for p in children.service["spec"]["ports"]] == ["http"]
    (endpoint,) = monitor["spec"]["endpoints"]
    port = next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
    assert port["targetPort"] == "runtime"
    # The dashboard (and KEDA's queries) select by the label the ServiceMonitor copies onto series.
    assert set(monitor["spec"]["targetLabels"]) <= labels.keys()
    series_label = re.sub(r"[^a-zA-Z0-9_]", "_", monitor["spec"]["targetLabels"][0])
    assert series_label == OperatorSettings().prometheus_instance_label


def dashboard(helm: Helm) -> dict[str, Any]:
    configmap = one(helm.render(values("monitoring")), "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "LLM"}
    return json.loads(configmap["data"]["ascend-llm-deployments.json"])


def test_dashboard_shows_throughput_queue_kv_cache_graph_mode_leak_slope_and_warmup(helm: Helm) -> None:
    board = dashboard(helm)
    exprs = " ".join(t["expr"] for panel in board["panels"] for t in panel["targets"])
    for needed in (
        "rate(vllm:generation_tokens_total",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "ascend_llm_graph_mode",
        "ascend_llm_memory_slope_mb_per_hour",
        "ascend_llm_warmup_seconds",
    ):
        assert needed in exprs, needed
    assert len({panel["id"] for panel in board["panels"]}) == len(board["panels"])
    assert not by_kind(helm.render(), "ConfigMap")


def test_dashboard_uses_only_metrics_the_runtime_exports() -> None:
    board = json.loads((CHART_DIR / "files" / "ascend-llm-deployments.json").read_text(encoding="utf-8"))
    exprs = " ".join(t["expr"] for panel in board["panels"] for t in panel["targets"])
    used = set(re.findall(r"\b(ascend_llm_[a-z0-9_]+)", exprs))
    runtime_source = "\n".join(
        path.read_text(encoding="utf-8") for path in (REPO_ROOT / "runtime" / "ascend_runtime").rglob("*.py")
    )
    # prometheus_client adds _total to counters; the source names them without it.
    missing = sorted(name for name in used if f'"{name.removesuffix("_total")}"' not in runtime_source)
    assert missing == [], "the dashboard queries metrics the runtime does not define"
    labels = {var["name"]: var["definition"] for var in board["templating"]["list"] if var["type"] == "query"}
    assert "app_kubernetes_io_instance" in labels["deployment"]


def test_servicemonitor_keeps_the_labels_the_autoscalers_query(helm4: Helm) -> None:
    """KEDA's queries select a resource's series by its instance label and, per disaggregation role,
    by its pd-role label: the ServiceMonitor copies both pod labels onto the series (Prometheus turns
    the dots and slashes into underscores)."""
    import re

    from ascend_operator.builders.common import PD_ROLE_LABEL
    from ascend_operator.settings import OperatorSettings

    monitor = one(helm4.render(values("monitoring")), "ServiceMonitor")
    kept = monitor["spec"]["podTargetLabels"]
    settings = OperatorSettings()
    assert PD_ROLE_LABEL in kept
    assert {re.sub(r"[^A-Za-z0-9_]", "_", label) for label in kept} >= {
        settings.prometheus_instance_label, settings.prometheus_role_label}
