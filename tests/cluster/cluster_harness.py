"""What the cluster tier's tests share besides fixtures: the operator process under test, its
settings, a watched namespace, and the API server's own count of the operator's writes.

A module of its own (not ``conftest``): test modules import it by name, and two tiers' ``conftest``
modules collected in one run (tests/cluster and tests/node) would shadow each other.
"""

from __future__ import annotations

import os
import signal
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from install_harness import OperatorProcess, free_port, wait_for

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
