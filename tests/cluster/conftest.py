"""Fixtures of the cluster tier: one real API server, the CRDs, one operator process, namespaces.

- ``api``: a kubernetes ``ApiClient`` for the session's cluster (``kubeconfig_path``: the given
  kubeconfig, else the local control plane of ``../shared/k8s``).
- ``crds``: this project's CRD (server-side applied from ``crds/``, as ``kubectl apply
  --server-side -f crds/`` does) and the add-on CRDs the examples use (LeaderWorkerSet, KEDA),
  once per session, waited for until Established.
- ``operator``: ``ascend-llm operator run --standalone`` as a subprocess (the pod's entrypoint),
  watching the namespaces ``op-*`` only, with a long resync interval so a test that sees a change
  within seconds shows a watch did it. Its output goes to a file the tests read.
- ``namespace``: a fresh ``op-*`` namespace per test, deleted afterwards.
- :func:`writes`: the API server's own count of write requests (``apiserver_request_total``) on
  the resources the operator writes.
"""

from __future__ import annotations

import os
import signal
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from install_harness import ROOT, OperatorProcess, free_port, wait_for

ADDON_CRDS = ("leaderworkerset.x-k8s.io_leaderworkersets.yaml", "keda.sh_scaledobjects.yaml")
#: How long a test waits for something the operator does within seconds.
WAIT_S = 60.0
#: The operator's steady-state resync in this tier: far longer than any wait on a watch.
RESYNC_S = 120.0
#: How long the operator may go on using its last list of the served APIs.
DISCOVERY_TTL_S = 5.0
NAMESPACE_PREFIX = "op-"
#: The operator settings of this tier (``ascend-llm render`` predicts children with the same).
OPERATOR_SETTINGS = {
    "ASCEND_LLM_OPERATOR_RESYNC_INTERVAL_S": str(RESYNC_S),
    "ASCEND_LLM_OPERATOR_PROGRESS_POLL_INTERVAL_S": "2",
    "ASCEND_LLM_OPERATOR_STATUS_READ_TIMEOUT_S": "1",
    "ASCEND_LLM_OPERATOR_RETRY_BACKOFF_BASE_S": "1",
    "ASCEND_LLM_OPERATOR_DISCOVERY_TTL_S": str(DISCOVERY_TTL_S),
    # test_model_cache.py: a fetch Job that cannot start fails soon, and is retried soon.
    "ASCEND_LLM_OPERATOR_FETCH_DEADLINE_S": "20",
    "ASCEND_LLM_OPERATOR_FETCH_RETRY_INTERVAL_S": "3",
    # The examples' hostPath models, as an administrator would allow them.
    "ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES": "/models,/data/models",
}
#: Write verbs as apiserver_request_total names them (dry runs excluded by the caller). Deletes
#: are not counted: the namespace controller and the garbage collector delete the same kinds
#: when an earlier test's namespace goes.
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY"})
#: (resource, subresource) the operator writes; controllers write other subresources (status of
#: Deployments and PDBs, ReplicaSets, pods, EndpointSlices), so these counts are the operator's.
OPERATOR_WRITES = frozenset({
    ("configmaps", ""), ("services", ""), ("deployments", ""), ("poddisruptionbudgets", ""),
    ("horizontalpodautoscalers", ""), ("leaderworkersets", ""), ("scaledobjects", ""),
    ("ascendllmdeployments", ""), ("ascendllmdeployments", "status"),
})


@pytest.fixture(scope="session")
def api(kubeconfig_path: str) -> Any:
    import kubernetes

    return kubernetes.config.new_client_from_config(config_file=kubeconfig_path)


def _apply_crd(api: Any, path: Path) -> str:
    import kubernetes

    body = yaml.safe_load(path.read_text(encoding="utf-8"))
    ext = kubernetes.client.ApiextensionsV1Api(api)
    ext.patch_custom_resource_definition(body["metadata"]["name"], body, field_manager="ascend-llm-tests",
                                         force=True, _content_type="application/apply-patch+yaml")
    return body["metadata"]["name"]


@pytest.fixture(scope="session")
def crds(api: Any) -> list[str]:
    import kubernetes

    names = [_apply_crd(api, ROOT / "crds" / "llm.ascend.dev_ascendllmdeployments.yaml")]
    names += [_apply_crd(api, ROOT / "tests" / "data" / "crds" / name) for name in ADDON_CRDS]
    ext = kubernetes.client.ApiextensionsV1Api(api)

    def established() -> bool:
        for name in names:
            conditions = ext.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    wait_for("the CRDs to be established", established)
    return names


@dataclass
class OperatorUnderTest:
    """The operator of this tier: ``ascend-llm operator run`` watching ``op-*`` namespaces, as a
    subprocess (``install_harness.OperatorProcess``) that tests stop, kill and start again; its
    output is kept across restarts."""

    kubeconfig: str
    env_overrides: dict[str, str]
    standalone: bool = True
    #: 0: a free port, chosen at each start (another run on the machine may hold any fixed one).
    liveness_port: int = 0
    process: OperatorProcess | None = None
    earlier: list[str] = field(default_factory=list)

    def start(self) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("ASCEND_LLM_OPERATOR_")}
        env.update({"KUBECONFIG": self.kubeconfig, "PYTHONUNBUFFERED": "1", **OPERATOR_SETTINGS})
        env.update(self.env_overrides)
        url = f"http://127.0.0.1:{self.liveness_port or free_port()}/healthz"
        args = [*(["--standalone"] if self.standalone else []), "-n", f"{NAMESPACE_PREFIX}*", "--liveness", url]
        process = self.process = OperatorProcess(args, env).start()

        def live() -> bool:
            if not process.running:
                pytest.fail(f"the operator exited with {process.returncode}:\n{self.output()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    return response.status == 200
            except OSError:
                return False

        wait_for("the operator's liveness endpoint", live, timeout_s=90)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process is None:
            return 0
        code = self.process.stop(sig)
        self.earlier += self.process.lines
        self.process = None
        return code or 0

    def output(self) -> str:
        return "\n".join([*self.earlier, *(self.process.lines if self.process else [])])


@pytest.fixture(scope="session")
def operator(kubeconfig_path: str, crds: list[str]) -> Iterator[OperatorUnderTest]:
    run = OperatorUnderTest(kubeconfig_path, {})
    run.start()
    try:
        yield run
    finally:
        run.stop()
        output = run.output()
        if "Traceback" in output:
            sys.stderr.write(output[-6000:])


def watched_namespace(api: Any) -> Iterator[str]:
    """A fresh ``op-*`` namespace (one the tier's operator watches) whose default ServiceAccount
    exists; deleted after. The body of :func:`namespace`, for tests that need a second one."""
    import kubernetes

    core = kubernetes.client.CoreV1Api(api)
    name = f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for("the default ServiceAccount", lambda: core.list_namespaced_service_account(
        name, field_selector="metadata.name=default").items)
    yield name
    core.delete_namespace(name)


@pytest.fixture
def namespace(api: Any) -> Iterator[str]:
    yield from watched_namespace(api)


def raw_get(api: Any, path: str) -> bytes:
    """GET any API path (``/metrics``, ``/apis``, a subresource) with the client's credentials."""

    method, url, headers, body, post_params = api.param_serialize(
        method="GET", resource_path=path, header_params={"Accept": "application/json, */*"},
        auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers, body=body, post_params=post_params)
    response.read()
    if response.status >= 400:
        from kubernetes.client.exceptions import ApiException

        raise ApiException(status=response.status, reason=response.reason)
    return response.data


def writes(api: Any) -> dict[tuple[str, str, str], float]:
    """Write requests the API server counted and accepted: (verb, resource, subresource) -> count."""

    from prometheus_client.parser import text_string_to_metric_families

    text = raw_get(api, "/metrics").decode("utf-8")
    counts: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if not sample.name.endswith("_total") or labels.get("verb") not in WRITE_VERBS or labels.get("dry_run"):
                continue
            if not labels.get("code", "").startswith("2"):
                continue  # refused requests changed nothing (e.g. creates in a namespace being deleted)
            key = (labels["verb"], labels.get("resource", ""), labels.get("subresource", ""))
            counts[key] = counts.get(key, 0) + sample.value
    return counts


def operator_writes(before: dict[tuple[str, str, str], float], after: dict[tuple[str, str, str], float]
                    ) -> dict[tuple[str, str, str], float]:
    """The writes between two :func:`writes` readings on the resources only the operator writes."""

    return {key: after[key] - before.get(key, 0) for key in after
            if (key[1], key[2]) in OPERATOR_WRITES and after[key] - before.get(key, 0) > 0}


# ----------------------------------------------------------------------------- tenancy tests


@pytest.fixture(scope="session")
def api_client(api: Any) -> Any:
    return api


@pytest.fixture(scope="session")
def crd_installed(crds: list[str]) -> None:
    """The CRD of crds/ server-side applied and Established (with the add-on CRDs)."""


@pytest.fixture
def make_namespace(api: Any) -> Iterator[Callable[..., str]]:
    """``make_namespace(labels)``: a fresh namespace (not one the session's operator watches)
    whose default ServiceAccount exists; deleted after."""
    import kubernetes

    core = kubernetes.client.CoreV1Api(api)
    made: list[str] = []

    def make(labels: dict[str, str] | None = None) -> str:
        name = f"tenancy-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        made.append(name)
        wait_for(f"namespace {name}'s default ServiceAccount", lambda: core.list_namespaced_service_account(
            name, field_selector="metadata.name=default").items)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)
