"""Helpers of the install tier: real Helm and kubectl binaries, ServiceAccount kubeconfigs, and
the operator as a child process.

The operator runs as ``ascend-llm operator run`` in its own process (as in the chart's pod), so a
test can give it any identity through ``KUBECONFIG`` and read everything it printed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "ascend-llm-operator"
TOOLS_BIN = ROOT / ".cache" / "tools" / "bin"
OPERATOR_CLI = ROOT / ".venv" / "bin" / "ascend-llm"
#: Seconds one helm or kubectl call may take before the test fails instead of hanging.
TOOL_TIMEOUT_S = 120
#: Seconds for things the server does by itself (establishing a CRD, a delete, garbage collection).
SERVER_S = 30
#: The label every object of a Helm release of the chart carries (the chart's selector labels).
INSTANCE_LABEL = "app.kubernetes.io/instance"

T = TypeVar("T")


def tool(name: str) -> Path:
    """A binary of ``.ci/tools`` (helm3, helm4, kubectl); skips the test when it is missing."""

    path = TOOLS_BIN / name
    if not path.is_file():
        pytest.skip(f"{name} not found in {TOOLS_BIN}: run `bash .ci/tools` (it fetches helm 3, 4 and kubectl)")
    return path


def unique(prefix: str) -> str:
    """A fresh DNS-label name, so tests on a shared cluster never collide."""

    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float = 60.0, interval_s: float = 0.25) -> T:
    """The first truthy result of ``check``; fails the test naming ``what`` (and the last result)
    after ``timeout_s``."""

    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {result!r})")
        time.sleep(interval_s)


@dataclass(frozen=True)
class Tool:
    """One command-line client (helm or kubectl) bound to a kubeconfig."""

    path: Path
    kubeconfig: str

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        result = subprocess.run([str(self.path), *args], input=stdin, capture_output=True, text=True,
                                env=env, timeout=TOOL_TIMEOUT_S, check=False)
        if check and result.returncode != 0:
            pytest.fail(f"{self.path.name} {' '.join(args)} failed (exit {result.returncode}):\n"
                        f"{result.stdout[-2000:]}{result.stderr[-4000:]}")
        return result


@dataclass(frozen=True)
class Release:
    """A Helm release of the chart: its name, namespace and the Helm binary that manages it."""

    helm: Tool
    name: str
    namespace: str

    def install(self, *sets: str, chart: Path = CHART_DIR) -> None:
        self.helm.run("install", self.name, str(chart), "--namespace", self.namespace, "--create-namespace",
                      *_sets(sets))

    def upgrade(self, *sets: str, chart: Path = CHART_DIR) -> None:
        self.helm.run("upgrade", self.name, str(chart), "--namespace", self.namespace, *_sets(sets))

    def uninstall(self) -> None:
        self.helm.run("uninstall", self.name, "--namespace", self.namespace, "--wait")

    def objects(self) -> list[dict[str, Any]]:
        """Every object the release rendered: its manifest and its hooks, as Helm recorded them."""

        docs: list[dict[str, Any]] = []
        for what in ("manifest", "hooks"):
            text = self.helm.run("get", what, self.name, "--namespace", self.namespace).stdout
            docs += [doc for doc in yaml.safe_load_all(text) if doc]
        return docs


def _sets(sets: Iterable[str]) -> list[str]:
    return [arg for item in sets for arg in ("--set", item)]


def kinds_of(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """``kind.group`` of each kind among ``objects`` (the form ``kubectl get`` takes), sorted."""

    found = set()
    for obj in objects:
        group = obj["apiVersion"].rpartition("/")[0]
        found.add(f"{obj['kind'].lower()}.{group}" if group else obj["kind"].lower())
    return sorted(found)


def labelled(kubectl: Tool, kinds: Iterable[str], release: str) -> list[str]:
    """``kind/name`` (with namespace) of every object of ``kinds`` labelled with ``release``."""

    out = kubectl.run("get", ",".join(kinds), "--all-namespaces", "-l", f"{INSTANCE_LABEL}={release}",
                      "-o", "jsonpath={range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name}{'\\n'}{end}")
    return [line for line in out.stdout.splitlines() if line]


def json_list(objects: Iterable[Mapping[str, Any]]) -> str:
    """``objects`` as a JSON ``v1 List`` for ``kubectl -f -``: exact, where PyYAML would leave a
    hash such as ``84e12345`` unquoted and kubectl read it as a number."""

    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def live(kubectl: Tool, objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The server's copies of those of ``objects`` (by kind, namespace, name) that exist."""

    out = kubectl.run("get", "-f", "-", "--ignore-not-found", "-o", "json", stdin=json_list(objects))
    if not out.stdout.strip():
        return []
    found = json.loads(out.stdout)
    return list(found["items"]) if found.get("kind") == "List" else [found]


def names(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """``Kind/namespace/name`` of each object, sorted, for readable assertions."""

    return sorted(f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in objects)


def wait_established(kubectl: Tool, *crds: str) -> None:
    """Wait until each CRD is Established (``kubectl wait`` errs on a CRD with no conditions yet)."""

    for name in crds:
        wait_for(f"CRD {name} Established", lambda name=name: kubectl.run(
            "get", "crd", name, "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}",
            check=False).stdout == "True", SERVER_S)


class Namespaces:
    """Fresh namespaces and Helm releases for one test; when it ends, the releases still there are
    uninstalled (their cluster-scoped objects would outlive the namespaces) and the namespaces
    deleted (without waiting)."""

    def __init__(self, kubectl: Tool) -> None:
        self.kubectl = kubectl
        self.created: list[str] = []
        self.releases: list[Release] = []

    def release(self, helm: Tool, prefix: str, name: str | None = None) -> Release:
        """A release named ``name`` (else a fresh one) in a fresh namespace that Helm creates."""

        release = Release(helm, name or unique(prefix), self.name("rel"))
        self.releases.append(release)
        return release

    def new(self, prefix: str) -> str:
        name = unique(prefix)
        self.kubectl.run("create", "namespace", name)
        self.created.append(name)
        return name

    def name(self, prefix: str) -> str:
        """A fresh name for a namespace that something else (helm --create-namespace) creates."""

        name = unique(prefix)
        self.created.append(name)
        return name

    def delete_all(self) -> None:
        for release in self.releases:
            release.helm.run("uninstall", release.name, "--namespace", release.namespace, "--ignore-not-found",
                             check=False)
        if self.created:
            self.kubectl.run("delete", "namespace", "--ignore-not-found", "--wait=false", *self.created,
                             check=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def allowed(api: Any, account: tuple[str, str], namespace: str, verb: str, resource: str, subresource: str) -> bool:
    """Whether ServiceAccount ``account`` (namespace, name) may ``verb`` ``resource/subresource``."""

    import kubernetes

    user = f"system:serviceaccount:{account[0]}:{account[1]}"
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{account[0]}",
                                 "system:authenticated"],
        "resourceAttributes": {"namespace": namespace, "verb": verb, "resource": resource,
                               "subresource": subresource}}}
    return bool(kubernetes.client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed)


def running_pods(kubectl: Tool, namespace: str, children: list[dict[str, Any]]) -> list[str]:
    """Names of the Running pods of the Deployment among ``children``."""

    deployment = next(child for child in children if child["kind"] == "Deployment")
    selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
    out = kubectl.run("get", "pods", "-n", namespace, "-l", selector, "--field-selector=status.phase=Running",
                      "-o", "name")
    return out.stdout.split()


def remove_resources(kubectl: Tool, namespace: str) -> None:
    """Delete the resources in ``namespace`` (their finalizers cleared first) and wait till they are
    gone, so that its namespace can go and no later operator of the session resumes them."""

    for name in kubectl.run("get", "ald", "-n", namespace, "-o", "name", check=False).stdout.split():
        kubectl.run("patch", name, "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                    check=False)
    kubectl.run("delete", "ald", "--all", "-n", namespace, "--wait", f"--timeout={SERVER_S}s", check=False)


# ------------------------------------------------------------------------------ identities


def service_account_kubeconfig(api_client: Any, namespace: str, name: str, path: Path,
                               expiration_s: int = 3600) -> Path:
    """Write a kubeconfig at ``path`` that acts as ServiceAccount ``namespace/name``: a token
    minted through the TokenRequest API and the server and CA of ``api_client``'s cluster."""

    import kubernetes

    core = kubernetes.client.CoreV1Api(api_client)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": expiration_s}}
    token = core.create_namespaced_service_account_token(name, namespace, request).status.token
    config = api_client.configuration
    cluster: dict[str, Any] = {"server": config.host}
    if config.ssl_ca_cert:
        cluster["certificate-authority-data"] = base64.b64encode(Path(config.ssl_ca_cert).read_bytes()).decode()
    if not config.verify_ssl:
        cluster["insecure-skip-tls-verify"] = True
    user = f"system:serviceaccount:{namespace}:{name}"
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "cluster", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(kubeconfig), encoding="utf-8")
    path.chmod(0o600)
    return path


# ------------------------------------------------------------------------------ the operator process


@dataclass
class OperatorProcess:
    """``ascend-llm operator run`` as a child process with its own environment.

    Output (stdout and stderr, merged) is read line by line in a thread, so :meth:`wait_for_line`
    can wait for a log line and :attr:`output` holds everything printed so far. Use as a context
    manager: leaving it stops the process (SIGTERM, then SIGKILL after ``stop_grace_s``).
    """

    args: list[str]
    env: Mapping[str, str]
    stop_grace_s: float = 15.0
    lines: list[str] = field(default_factory=list)
    _process: subprocess.Popen[str] | None = None
    _reader: threading.Thread | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> OperatorProcess:
        if not OPERATOR_CLI.is_file():
            pytest.skip(f"{OPERATOR_CLI} not found: run `bash .ci/bootstrap`")
        self._process = subprocess.Popen(
            [str(OPERATOR_CLI), "operator", "run", *self.args], env=dict(self.env), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, bufsize=1,
            start_new_session=True)
        self._reader = threading.Thread(target=self._read, name="operator-output", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def wait_for_line(self, pattern: str, timeout_s: float) -> str:
        """The first output line matching the regular expression ``pattern``; fails the test
        (with the output) when the process exits or ``timeout_s`` passes first."""

        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if regex.search(line):
                        return line
                seen = len(self.lines)
                if not self.running and (self._reader is None or not self._reader.is_alive()):
                    pytest.fail(f"the operator exited ({self.returncode}) before printing /{pattern}/:\n"
                                f"{self._tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"the operator printed no /{pattern}/ within {timeout_s:.0f}s:\n{self._tail()}")
                self._changed.wait(min(left, 0.5))

    def _tail(self, count: int = 60) -> str:
        return "\n".join(self.lines[-count:])

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """``sig`` (SIGTERM), then SIGKILL after ``stop_grace_s``; the exit status (None if never
        started)."""

        if self._process is None:
            return None
        if self._process.poll() is None:
            os.killpg(self._process.pid, sig)
            try:
                self._process.wait(self.stop_grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait(self.stop_grace_s)
        if self._reader is not None:
            self._reader.join(self.stop_grace_s)
        return self._process.returncode

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def dry_run_resource(api_client: Any, namespace: str, spec: dict[str, Any]) -> tuple[int, Any]:
    """Create a resource of ``spec`` with dryRun=All: (201, the object) or (the refusal's status, its body)."""
    import kubernetes
    from ascend_operator.api import API_VERSION, GROUP, KIND, PLURAL, VERSION

    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "limits"}, "spec": spec}
    custom = kubernetes.client.CustomObjectsApi(api_client)
    try:
        return 201, custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, dry_run="All")
    except kubernetes.client.ApiException as error:
        return error.status, json.loads(error.body) if error.body else {}


def assert_refused_naming(api_client: Any, namespace: str, spec: dict[str, Any], field: str,
                          fragments: Iterable[str]) -> None:
    """The API server refuses ``spec`` (422) naming ``field`` with every fragment, and so does the
    operator's own parse (the same rule in Python)."""
    from ascend_operator.api import SpecError, parse_spec

    parts = tuple(fragments)
    status, body = dry_run_resource(api_client, namespace, spec)
    assert status == 422, body
    causes = [(c.get("field", ""), c.get("message", "")) for c in (body.get("details") or {}).get("causes") or []]
    assert any(f == field and all(part in m for part in parts) for f, m in causes), causes
    with pytest.raises(SpecError) as error:
        parse_spec(spec)
    assert any(f == field and all(part in m for part in parts) for f, m in error.value.problems)


def assert_admitted(api_client: Any, namespace: str, spec: dict[str, Any]) -> None:
    """The API server admits ``spec`` and the operator's parse accepts it."""
    from ascend_operator.api import parse_spec

    status, body = dry_run_resource(api_client, namespace, spec)
    assert status == 201, body
    parse_spec(spec)
