"""Install, upgrade, uninstall and RBAC of the operator on a real API server.

- ``kubectl apply --server-side -f crds/`` establishes the CRD;
- the chart installs, upgrades and uninstalls with Helm 3 and Helm 4, and an uninstall leaves no
  object of the release behind (looked up by name and by the release's label), the Lease of HA
  included, and an upgrade keeps the leader's record on the Lease; two HA releases (each with its
  own Lease), and two releases of one name in two namespaces, install side by side;
- an AscendLLMDeployment and a namespace delete with no operator running, also after an operator
  has seen it (no finalizer);
- the chart's own ServiceAccount is enough for the operator (run as a subprocess with that
  account's token and the Deployment's args and env, watching one namespace or all, standalone
  or HA; with HA it leads through the release's Lease first): its children and status appear and
  nothing is refused (any 403 fails); uninstalling it then leaves the resource, its children and
  its running pods;
- every object the chart renders for each ``ci/`` values file passes the server's validation
  (``kubectl apply --dry-run=server``);
- ``ascend-llm render`` output for a resource named ``1e5`` or ``y`` (label values go-yaml would
  read as a number or a boolean) is applied by kubectl with those labels as strings;
- last, deleting the CRD deletes the resources and, by garbage collection, their children (the
  CRD is applied again at once; skipped where other resources exist), and the tier's operator,
  running all along, serves the CRD again once it is back.

Each test uses its own namespaces and release names. The CRDs are cluster-scoped and shared:
only the last test deletes one, and restores it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import urlopen

import pytest
import yaml
from cluster_harness import WAIT_S, OperatorUnderTest
from install_harness import (
    CHART_DIR,
    ROOT,
    SERVER_S,
    OPERATOR_CLI,
    Namespaces,
    OperatorProcess,
    Release,
    Tool,
    allowed,
    free_port,
    json_list,
    kinds_of,
    labelled,
    live,
    names,
    remove_resources,
    running_pods,
    service_account_kubeconfig,
    tool,
    unique,
    wait_established,
    wait_for,
)

pytestmark = pytest.mark.cluster

ALD_CRD = "ascendllmdeployments.llm.ascend.dev"
LEASES = "leases.coordination.k8s.io"
#: Every kind the chart renders with some values (the ServiceMonitor's CRD aside, which may be absent).
CHART_KINDS = ("deployments.apps", "serviceaccounts", "configmaps", "clusterroles.rbac.authorization.k8s.io",
               "clusterrolebindings.rbac.authorization.k8s.io", "roles.rbac.authorization.k8s.io",
               "rolebindings.rbac.authorization.k8s.io", LEASES)
EXAMPLE = ROOT / "examples" / "cpu-tiny.yaml"
#: The host directory the example's model lies under, which the operator's policy must allow.
MODELS_DIR = "/models"
#: Seconds for the operator to start and reconcile one resource (kopf's imports take a few).
OPERATOR_S = 60
#: Resync interval of the operator in the RBAC tests, seconds.
RESYNC_S = 1
#: Output of the operator that means a request was refused by RBAC (after the log line's time).
REFUSED = re.compile(r"\b403\b|forbidden", re.IGNORECASE)
#: The operator's log line once it holds the Lease (ascend_operator.leader).
LEADS = "leads; reconciling"
#: The operator's debug line for a pod whose /state it could not read.
STATE_UNREADABLE = re.compile(r"state of pod \S+ not readable")
LOG_TIME = re.compile(r"^\[[-\d]+ [:\d]+,\d+\]")


@pytest.fixture(scope="module")
def kubectl(kubeconfig_path: str) -> Tool:
    return Tool(tool("kubectl"), kubeconfig_path)


@pytest.fixture(scope="module")
def crd(kubectl: Tool) -> None:
    """The chart's crds/ (the AscendLLMDeployment CRD) applied as its README says, established."""

    applied = kubectl.run("apply", "--server-side", "-f", str(CHART_DIR / "crds"))
    assert applied.stdout.count("serverside-applied") == 1, applied.stdout
    wait_established(kubectl, ALD_CRD)


@pytest.fixture
def namespaces(kubectl: Tool) -> Iterator[Namespaces]:
    made = Namespaces(kubectl)
    yield made
    made.delete_all()


@pytest.fixture
def helm4(kubeconfig_path: str) -> Tool:
    return Tool(tool("helm4"), kubeconfig_path)


def example(namespace: str, name: str | None = None) -> dict[str, Any]:
    body = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    body["metadata"]["namespace"] = namespace
    if name:
        body["metadata"]["name"] = name
    return body


def assert_gone(kubectl: Tool, release: Release, objects: list[dict[str, Any]]) -> None:
    """Nothing of ``release`` is left: none of its objects by name, none by its instance label."""

    assert names(live(kubectl, objects)) == [], "helm uninstall left objects of the release"
    kinds = sorted({*kinds_of(objects), *CHART_KINDS})
    assert labelled(kubectl, kinds, release.name) == [], "objects labelled with the release remain"


# ------------------------------------------------------------------------------ CRD and chart


def test_kubectl_apply_server_side_establishes_the_crd(kubectl: Tool) -> None:
    applied = kubectl.run("apply", "--server-side", "-f", str(ROOT / "crds"))
    assert f"customresourcedefinition.apiextensions.k8s.io/{ALD_CRD} serverside-applied" in applied.stdout
    wait_established(kubectl, ALD_CRD)
    served = kubectl.run("api-resources", "--api-group=llm.ascend.dev", "-o", "name").stdout.split()
    assert served == [ALD_CRD]


@pytest.mark.parametrize(("installer", "upgrader"), [("helm3", "helm3"), ("helm4", "helm4"), ("helm3", "helm4")],
                         ids=["helm3", "helm4", "helm3-then-helm4"])
def test_helm_installs_upgrades_and_uninstalls_leaving_nothing(
        installer: str, upgrader: str, kubeconfig_path: str, kubectl: Tool, crd: None,
        namespaces: Namespaces) -> None:
    release = namespaces.release(Tool(tool(installer), kubeconfig_path), f"ald-{installer}")
    release.install()
    objects = release.objects()
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= {o["kind"] for o in objects}
    assert names(live(kubectl, objects)) == names(objects)

    # The upgrade (by the same Helm, or by Helm 4 after Helm 3) and the uninstall are the upgrader's.
    release = Release(Tool(tool(upgrader), kubeconfig_path), release.name, release.namespace)
    release.upgrade("verbose=true")
    deployment = next(o for o in live(kubectl, objects) if o["kind"] == "Deployment")
    assert "--verbose" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    history = release.helm.run("history", release.name, "-n", release.namespace, "-o", "json").stdout
    assert [entry["status"] for entry in yaml.safe_load(history)] == ["superseded", "deployed"]

    release.uninstall()
    assert_gone(kubectl, release, objects)
    # crds/ is not the release's: the CRD (and so every resource) stays.
    kubectl.run("get", f"crd/{ALD_CRD}")


def test_the_operator_pods_pass_the_restricted_pod_security_standard(
        helm4: Tool, kubectl: Tool, crd: None, namespaces: Namespaces) -> None:
    release = namespaces.release(helm4, "psa")
    kubectl.run("create", "namespace", release.namespace)
    kubectl.run("label", "namespace", release.namespace, "pod-security.kubernetes.io/enforce=restricted")
    release.install("ha.enabled=true")  # two pods, so a refusal cannot hide behind a slow first one
    selector = "app.kubernetes.io/component=operator,app.kubernetes.io/instance=" + release.name
    wait_for("the operator's pods", lambda: len(kubectl.run(
        "get", "pods", "-n", release.namespace, "-l", selector, "-o", "name").stdout.split()) == 2, SERVER_S)
    refused = kubectl.run("get", "events", "-n", release.namespace, "--field-selector=reason=FailedCreate",
                          "-o", "name").stdout
    assert refused == ""


@pytest.mark.parametrize("scope", ["cluster-wide", "namespaced"])
def test_ha_releases_side_by_side_each_get_a_lease_that_goes_with_the_release(
        scope: str, helm4: Tool, kubectl: Tool, crd: None, namespaces: Namespaces) -> None:
    # Two HA releases side by side, each with its own Lease in its own namespace, one after another
    # uninstalled; the first one's Lease must survive the second's uninstall and vice versa.
    releases = []
    for _ in range(2):
        release = namespaces.release(helm4, "ha")
        sets = ["ha.enabled=true"]
        if scope == "namespaced":
            sets.append(f"watchNamespaces={{{namespaces.new('watched')}}}")
        release.install(*sets)
        releases.append(release)
    leases = []
    for release in releases:
        objects = release.objects()
        (lease,) = [o for o in objects if o["kind"] == "Lease"]
        assert lease["metadata"]["namespace"] == release.namespace
        assert names(live(kubectl, [lease])) == names([lease])
        leases.append(lease)
    assert len(set(names(leases))) == 2

    for index, release in enumerate(releases):
        objects = release.objects()
        release.uninstall()
        assert_gone(kubectl, release, objects)
        assert labelled(kubectl, [LEASES], release.name) == []
        assert names(live(kubectl, leases[index + 1:])) == names(leases[index + 1:]), "another release's Lease went"


@pytest.mark.parametrize("helm_name", ["helm3", "helm4"])
def test_helm_upgrade_keeps_the_leaders_election_record_on_the_lease(
        helm_name: str, kubeconfig_path: str, kubectl: Tool, crd: None, namespaces: Namespaces) -> None:
    # The manifest's Lease has an empty spec: an upgrade must not take the Lease from its leader.
    release = namespaces.release(Tool(tool(helm_name), kubeconfig_path), "lease")
    release.install("ha.enabled=true")
    (lease,) = [o for o in release.objects() if o["kind"] == "Lease"]
    where = (f"lease/{lease['metadata']['name']}", "-n", release.namespace)
    record = {"holderIdentity": "leader-pod_0123abcd", "leaseDurationSeconds": 15}
    kubectl.run("patch", *where, "--type=merge", "-p", yaml.safe_dump({"spec": record}))
    release.upgrade("ha.enabled=true", "verbose=true")
    spec = yaml.safe_load(kubectl.run("get", *where, "-o", "yaml").stdout)["spec"]
    assert {key: spec.get(key) for key in record} == record


def test_releases_of_one_name_in_two_namespaces_each_watching_its_own(
        helm4: Tool, kubectl: Tool, crd: None, namespaces: Namespaces) -> None:
    name = unique("team")
    releases = [namespaces.release(helm4, "team", name) for _ in range(2)]
    for release in releases:
        release.install(f"watchNamespaces={{{namespaces.new('watched')}}}")
    assert len(labelled(kubectl, ["clusterroles"], name)) == 2, "each release has its own ClusterRole"
    # Both carry the same instance label: uninstall both, then look for what is left.
    objects = [release.objects() for release in releases]
    for release in releases:
        release.uninstall()
    for release, rendered in zip(releases, objects, strict=True):
        assert_gone(kubectl, release, rendered)


# ------------------------------------------------------------------------------ deletes without an operator


def test_resources_and_namespaces_delete_with_no_operator_running(
        kubectl: Tool, crd: None, namespaces: Namespaces) -> None:
    namespace = namespaces.new("nop")
    kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(example(namespace)))
    kubectl.run("delete", "ald", "cpu-tiny", "-n", namespace, f"--timeout={SERVER_S}s")
    assert kubectl.run("get", "ald", "-n", namespace, "-o", "name").stdout == ""

    kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(example(namespace, "second")))
    kubectl.run("delete", "namespace", namespace, f"--timeout={SERVER_S}s")
    assert kubectl.run("get", "namespace", namespace, "--ignore-not-found", "-o", "name").stdout == ""


# ------------------------------------------------------------------------------ RBAC: the chart's ServiceAccount


def given_cluster(request: pytest.FixtureRequest) -> bool:
    """Whether the tests run on a cluster the user gave (which may hold real resources), not on
    the local control plane that tests/conftest.py starts."""

    return bool(request.config.getoption("--kubeconfig") or os.environ.get("KUBECONFIG"))


def operator_as_the_chart_runs_it(kubectl: Tool, release: Release,
                                  kubeconfig: Path) -> tuple[OperatorProcess, str]:
    """The operator with the args and env of the release's Deployment (POD_ID/POD_NAMESPACE as the
    downward API would set them, liveness moved to a free local port), as the chart's
    ServiceAccount; and the URL the Deployment's liveness probe would ask."""

    deployment = next(o for o in live(kubectl, release.objects()) if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    port = free_port()
    args = []
    for arg in container["args"]:
        if arg.startswith("--liveness="):
            arg = "--liveness=" + urlsplit(arg.split("=", 1)[1])._replace(netloc=f"127.0.0.1:{port}").geturl()
        args.append(arg)
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG", "TMPDIR") if key in os.environ}
    env["PYTHONPATH"] = f"{ROOT / 'runtime'}:{ROOT / 'operator'}"
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
    env.update({"POD_ID": f"{release.name}-test", "POD_NAMESPACE": release.namespace,
                "KUBECONFIG": str(kubeconfig)})
    probe = container["livenessProbe"]["httpGet"]
    return OperatorProcess(args, env), f"http://127.0.0.1:{port}{probe['path']}"


def proxy_refused_to_everyone(kubectl: Tool, namespace: str, port: int = 8080) -> bool:
    """Whether the server refuses to proxy to the pods of ``namespace`` even for the admin (so a
    403 there says nothing about RBAC): ../shared/k8s's API server may not dial its fake pod IPs."""

    pods = kubectl.run("get", "pods", "-n", namespace, "-o", "name").stdout.split()
    if not pods:
        return False
    path = f"/api/v1/namespaces/{namespace}/pods/{pods[0].split('/')[1]}:{port}/proxy/state"
    result = kubectl.run("get", "--raw", path, check=False)
    return result.returncode != 0 and "Forbidden" in result.stderr


def refusals(output: str, pod_proxy: bool) -> list[str]:
    """The operator's output lines that report a refused request (403 / Forbidden); with
    ``pod_proxy`` False, leaving out its reads of pod state through the pod proxy."""

    lines = [LOG_TIME.sub("", line) for line in output.splitlines()]
    if not pod_proxy:
        lines = [line for line in lines if "/proxy/" not in line and not STATE_UNREADABLE.search(line)]
    return [line for line in lines if REFUSED.search(line)]


@pytest.mark.parametrize("scope", ["namespaced", "cluster-wide", "namespaced-ha", "cluster-wide-ha"])
def test_the_charts_service_account_is_enough_for_the_operator(
        scope: str, api: Any, helm4: Tool, kubectl: Tool, crd: None, namespaces: Namespaces,
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    import kubernetes
    from ascend_operator.api import GROUP, PLURAL, VERSION
    from ascend_operator.cli import render_children

    if scope.startswith("cluster-wide") and given_cluster(request):
        others = kubectl.run("get", "ald", "--all-namespaces", "-o", "name").stdout.split()
        if others:
            pytest.skip(f"a cluster-wide test operator would reconcile this cluster's resources: {others[:5]}")
    watched = namespaces.new("watched")
    release = namespaces.release(helm4, "rbac")
    # Verbose: the operator logs refused reads of a pod's state at debug level. A short resync
    # makes the periodic pass (pods, their state through the pod proxy) run within the test.
    # Outside a pod the operator reads /state through the pod proxy: stateRead proxy, as the
    # chart README says for such an operator (the chart then grants pods/proxy get).
    sets = ["verbose=true", f"settings.resyncIntervalS={RESYNC_S}", f"settings.hostPathPrefixes={{{MODELS_DIR}}}",
            "settings.stateRead=proxy"]
    if scope.startswith("namespaced"):
        sets.append(f"watchNamespaces={{{watched}}}")
    if scope.endswith("-ha"):
        sets.append("ha.enabled=true")  # leader election through the release's Lease, no --standalone
    release.install(*sets)
    rendered = release.objects()
    account = next(o for o in rendered if o["kind"] == "ServiceAccount")["metadata"]["name"]
    lease = next((o for o in rendered if o["kind"] == "Lease"), None)
    assert (lease is not None) == scope.endswith("-ha")
    kubeconfig = service_account_kubeconfig(api, release.namespace, account, tmp_path / "operator.kubeconfig")

    custom = kubernetes.client.CustomObjectsApi(api)
    body = example(watched)
    expected = render_children(body)
    def unrefused(value: Any) -> Any:
        # Fail at the first refusal rather than at the timeout (pod proxy lines are judged below).
        refused = refusals(operator.output, pod_proxy=False)
        assert refused == [], "the operator was refused with the chart's RBAC:\n" + "\n".join(refused)
        return value

    try:
        operator, liveness = operator_as_the_chart_runs_it(kubectl, release, kubeconfig)
        if lease is not None:  # the Deployment's env names the release's Lease, as the chart sets it
            assert (operator.env["ASCEND_LLM_OPERATOR_STANDALONE"], operator.env["ASCEND_LLM_OPERATOR_LEASE_NAME"],
                    operator.env["ASCEND_LLM_OPERATOR_LEASE_NAMESPACE"]) == (
                "false", lease["metadata"]["name"], release.namespace)
            assert "--standalone" not in operator.args
        with operator:
            if lease is not None:  # it leads (get and update of the Lease granted) before it reconciles
                operator.wait_for_line(LEADS, OPERATOR_S)
                holder = kubectl.run("get", "lease", lease["metadata"]["name"], "-n", release.namespace,
                                     "-o", "jsonpath={.spec.holderIdentity}").stdout
                assert holder.startswith(f"{operator.env['POD_ID']}_"), holder
            created = custom.create_namespaced_custom_object(GROUP, VERSION, watched, PLURAL, body)
            children = wait_for("the children", lambda: unrefused((found := live(kubectl, expected))
                                and len(found) == len(expected) and found), OPERATOR_S)
            generation = wait_for("status.observedGeneration", lambda: unrefused(custom.get_namespaced_custom_object(
                GROUP, VERSION, watched, PLURAL, "cpu-tiny").get("status", {}).get("observedGeneration")),
                OPERATOR_S)
            # A resync pass got as far as reading the running pod's state.
            operator.wait_for_line(rf'"GET /api/v1/namespaces/{watched}/pods/[^"]*/proxy/', OPERATOR_S)
            assert operator.running, operator.output
            if lease is None:
                assert LEADS not in operator.output, "a standalone operator elected a leader"
            # The chart's liveness probe asks what kopf serves.
            with urlopen(liveness, timeout=5) as answer:
                assert answer.status == 200
        assert names(children) == names(expected)
        assert {child["metadata"]["ownerReferences"][0]["uid"] for child in children} == {created["metadata"]["uid"]}
        assert generation == 1
        pod_proxy = not proxy_refused_to_everyone(kubectl, watched)
        if not pod_proxy:
            # The server's own refusal, not RBAC's: judge the pod proxy by the authorizer instead.
            assert allowed(api, (release.namespace, account), watched, "get", "pods", "proxy")
        refused = refusals(operator.output, pod_proxy=pod_proxy)
        assert refused == [], "the operator was refused with the chart's RBAC:\n" + "\n".join(refused)

        # Uninstalling the operator leaves the resource and its running children alone.
        release.uninstall()
        assert names(live(kubectl, expected)) == names(expected)
        assert custom.get_namespaced_custom_object(GROUP, VERSION, watched, PLURAL, "cpu-tiny")
        assert running_pods(kubectl, watched, children), "the engine pods went with the operator"
    finally:
        remove_resources(kubectl, watched)


def test_a_resource_the_operator_saw_deletes_with_no_operator_running(
        kubeconfig_path: str, kubectl: Tool, crd: None, namespaces: Namespaces) -> None:
    from ascend_operator.cli import render_children

    namespace = namespaces.new("seen")
    body = example(namespace)
    expected = render_children(body)
    env = {**os.environ, "KUBECONFIG": kubeconfig_path, "PYTHONPATH": f"{ROOT / 'runtime'}:{ROOT / 'operator'}",
           "ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES": MODELS_DIR}
    try:
        with OperatorProcess(["--standalone", "--namespace", namespace], env):
            kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(body))
            wait_for("the children", lambda: len(live(kubectl, expected)) == len(expected), OPERATOR_S)
        deleted = kubectl.run("delete", "ald", "cpu-tiny", "-n", namespace, "--timeout=10s", check=False)
        assert deleted.returncode == 0, deleted.stderr
        wait_for("garbage collection of the children", lambda: not live(kubectl, expected), SERVER_S)
    finally:
        remove_resources(kubectl, namespace)


@pytest.mark.parametrize("name", ["1e5", "y"])
def test_kubectl_applies_what_render_prints_for_a_name_go_yaml_reads_as_a_number_or_a_boolean(
        name: str, kubectl: Tool, namespaces: Namespaces) -> None:
    """``ascend-llm render`` output piped to kubectl: a resource named ``1e5`` or ``y`` puts that
    name in label values, which go-yaml reads as a number or a boolean unless it is quoted."""

    namespace = namespaces.new("render")
    rendered = subprocess.run([str(OPERATOR_CLI), "render", "-"], check=True,
                              input=yaml.safe_dump(example(namespace, name)), capture_output=True, text=True).stdout
    applied = kubectl.run("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=rendered)
    found = json.loads(applied.stdout)
    items = found["items"] if found.get("kind") == "List" else [found]
    assert len(items) == len([doc for doc in yaml.safe_load_all(rendered) if doc]) >= 3
    assert {item["metadata"]["labels"]["app.kubernetes.io/instance"] for item in items} == {name}


# ------------------------------------------------------------------------------ every object the chart renders


@pytest.mark.parametrize("values_file", sorted((CHART_DIR / "ci").glob("*-values.yaml")), ids=lambda p: p.name)
def test_the_server_accepts_every_object_the_chart_renders(
        values_file: Path, helm4: Tool, kubectl: Tool, crd: None, namespaces: Namespaces) -> None:
    rendered = helm4.run("template", "dry-run", str(CHART_DIR), "--namespace", "llm-system",
                         "--values", str(values_file)).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    # The namespaces the values name, made fresh here (dry-run needs them to exist).
    fresh: dict[str, str] = {}
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if namespace:
            obj["metadata"]["namespace"] = fresh.setdefault(namespace, namespaces.new("dry"))
        for subject in obj.get("subjects", []):
            subject["namespace"] = fresh.setdefault(subject["namespace"], namespaces.new("dry"))
    if any(obj["kind"] == "ServiceMonitor" for obj in objects):
        kubectl.run("apply", "--server-side", "-f",
                    str(ROOT / "tests" / "data" / "crds" / "monitoring.coreos.com_servicemonitors.yaml"))
        wait_established(kubectl, "servicemonitors.monitoring.coreos.com")
    result = kubectl.run("apply", "--dry-run=server", "--server-side", "-f", "-", stdin=json_list(objects))
    assert len([line for line in result.stdout.splitlines() if "serverside-applied (server dry run)" in line]) \
        == len(objects), result.stdout


# ------------------------------------------------------------------------------ last: the CRD goes and comes back


def test_deleting_the_crd_deletes_every_resource_and_so_its_children(
        kubectl: Tool, crd: None, namespaces: Namespaces, operator: OperatorUnderTest, namespace: str) -> None:
    """Last in the file: the CRD is shared, so it is applied again before the test ends; skipped
    where any other resource exists (on a cluster given by kubeconfig, they may be someone's).
    The tier's operator, running all along, serves the CRD again once it is back: a resource
    made then gets its children (kopf alone gives up on it: ascend_operator.rediscovery)."""

    others = kubectl.run("get", "ald", "--all-namespaces", "-o", "name").stdout.split()
    if others:
        pytest.skip(f"deleting the CRD would delete the cluster's other resources: {' '.join(others[:5])}")
    gone = namespaces.new("crd")
    kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(example(gone)))
    uid = kubectl.run("get", "ald", "cpu-tiny", "-n", gone, "-o", "jsonpath={.metadata.uid}").stdout
    # A child as the operator makes them: owned by the resource through an owner reference.
    child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "cpu-tiny-config", "namespace": gone, "ownerReferences": [{
            "apiVersion": "llm.ascend.dev/v1alpha1", "kind": "AscendLLMDeployment", "name": "cpu-tiny",
            "uid": uid, "controller": True, "blockOwnerDeletion": True}]}}
    kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(child))
    try:
        kubectl.run("delete", "crd", ALD_CRD, f"--timeout={SERVER_S}s")
        wait_for("garbage collection of the child", lambda: not live(kubectl, [child]), SERVER_S)
    finally:
        kubectl.run("apply", "--server-side", "-f", str(ROOT / "crds"))
        wait_established(kubectl, ALD_CRD)
    assert kubectl.run("get", "ald", "-n", gone, "-o", "name").stdout == ""
    assert operator.process is not None and operator.process.running
    kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(example(namespace)))
    wait_for("the running operator's children of a resource made after the CRD came back",
             lambda: kubectl.run("get", "configmap", "cpu-tiny-config", "-n", namespace, "--ignore-not-found",
                                 "-o", "name").stdout.strip(), WAIT_S)
