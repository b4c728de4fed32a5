"""Failures and replacements on a real kubelet, with one running resource shared by the tests (each
engine start costs a minute or more on CPU), in this order:

1. the engine's API server killed (SIGKILL) inside its container: the runtime's restart loop
   relaunches it in the same container at the same rung, the pod leaves the Service while it is
   down, and ``status.graph`` counts the relaunch (``engineRestarts``);
2. the engine wedged (SIGSTOP: alive, answering nothing): the runtime fails ``/live`` after
   ``hangTimeoutSeconds``, the kubelet's liveness probe restarts the container within that plus its
   probe periods, the new container resumes the graph-mode ladder from the pod's state directory
   (an emptyDir) without trying the failed mode again, and ``status.graph`` shows the container
   restart and the resumed rung;
3. a RollingUpdate (LoRA turned on, and two replicas, in one patch) under a bounded client loop
   through the Service's ClusterIP: the old pod is replaced, no request fails, and the
   EndpointSlice's changes are recorded.

The resource is ``examples/cpu-tiny.yaml`` with ``CXX=/bin/false`` in the engine's environment, so
that the CPU graph mode (torch.compile, which builds C++) fails on the node as it would on a node
without a compiler: the runtime falls back to EAGER and keeps that rung in its state directory,
which gives the ladder a position worth keeping across a container restart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from node_harness import (
    READY_TIMEOUT_S,
    ROOT,
    OperatorRelease,
    RealNode,
    get_json,
    namespace_report,
    user_resource,
)
from install_harness import unique, wait_for  # noqa: I001

pytestmark = [pytest.mark.node, pytest.mark.timeout(2400)]

HANG_TIMEOUT_S = 10
STATE_DIR = "/var/lib/ascend-llm/state"
#: The runtime's own lag before /live fails: its /health polls (1 s apart, 2 s timeout).
RUNTIME_LAG_S = 3
#: Seconds the kubelet's probe timestamps (whole seconds) and a loaded machine may add.
SLACK_S = 5


@dataclass(frozen=True)
class Served:
    namespace: str
    name: str
    model: str


def node_claim(node: RealNode, namespace: str, claim: str, directory: Path) -> str:
    """A claim bound to a static PersistentVolume of a node directory (no provisioner exists): the
    pod then has no hostPath volume, which PodSecurity ``restricted`` forbids."""

    volume = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-{claim}"},
              "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                       "persistentVolumeReclaimPolicy": "Retain",
                       "hostPath": {"path": str(directory), "type": "Directory"},
                       "claimRef": {"namespace": namespace, "name": claim}}}
    bound = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": namespace},
             "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": f"{namespace}-{claim}",
                      "resources": {"requests": {"storage": "1Gi"}}}}
    node.kubectl.run("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": [volume, bound]}))
    wait_for(f"claim {claim} Bound", lambda: get_json(node, "pvc", claim, "-n", namespace)
             .get("status", {}).get("phase") == "Bound", 60, 1.0)
    return claim


@pytest.fixture(scope="module")
def served(realnode: RealNode, operator_release: OperatorRelease, tiny_model: Path) -> Iterator[Served]:
    namespace = unique("restarts")
    realnode.kubectl.run("create", "namespace", namespace)
    # The docs' claim (docs/multi-tenant-safety.md): engine pods without host mounts meet `restricted`.
    realnode.kubectl.run("label", "namespace", namespace, *(f"pod-security.kubernetes.io/{mode}=restricted"
                                                            for mode in ("enforce", "warn", "audit")))
    wait_for(f"ServiceAccount default in {namespace}", lambda: realnode.kubectl.run(
        "get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0, 30)
    resource = user_resource(namespace, tiny_model)
    spec = resource["spec"]
    spec["model"] = {"pvc": {"claimName": node_claim(realnode, namespace, "tiny-model", tiny_model)},
                     **{key: spec["model"][key] for key in ("servedName", "sizeGiB")}}
    spec["engine"]["env"] = {"CXX": "/bin/false"}  # the graph mode's C++ build fails: a fallback to keep
    spec["health"] = {"hangTimeoutSeconds": HANG_TIMEOUT_S}
    # Each engine start here is a relaunch, not a first start (test_node_serving.py covers the
    # warmup): no warmup, and a short drain (the loop's requests take well under a second).
    spec["warmup"] = {"enabled": False}
    spec["engine"]["shutdownTimeoutSeconds"] = 5
    spec["resources"]["requests"]["cpu"] = "500m"  # two replicas fit the 2-core node for the rollout
    spec["rollout"] = {"strategy": "RollingUpdate"}
    name = resource["metadata"]["name"]
    started = time.monotonic()
    realnode.kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(resource))
    wait_for(f"{name} Ready", lambda: resource_status(realnode, namespace, name).get("phase") == "Ready",
             READY_TIMEOUT_S, 2.0)
    print(f"apply -> Ready (with the graph mode's failure and the fallback): {time.monotonic() - started:.1f}s",
          file=sys.stderr)
    try:
        yield Served(namespace, name, spec["model"]["servedName"])
    finally:
        realnode.kubectl.run("delete", "ald", name, "-n", namespace, "--wait", "--timeout=120s", check=False)
        realnode.kubectl.run("delete", "namespace", namespace, "--wait=false", check=False)
        for claim in ("tiny-model", "adapters"):
            realnode.kubectl.run("delete", "pv", f"{namespace}-{claim}", "--wait=false", check=False)


def resource_status(node: RealNode, namespace: str, name: str) -> dict[str, Any]:
    return get_json(node, "ald", name, "-n", namespace).get("status", {})


def live_pods(node: RealNode, served: Served) -> list[dict[str, Any]]:
    pods = get_json(node, "pods", "-n", served.namespace, "-l",
                    f"app.kubernetes.io/component=engine,app.kubernetes.io/instance={served.name}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def the_pod(node: RealNode, served: Served) -> dict[str, Any]:
    (pod,) = live_pods(node, served)
    return pod


def engine_status(pod: dict[str, Any]) -> dict[str, Any]:
    (status,) = [c for c in pod["status"].get("containerStatuses", []) if c["name"] == "engine"]
    return status


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def runtime_state(node: RealNode, pod: dict[str, Any]) -> dict[str, Any] | None:
    code, body = node.http(f"http://{pod['status']['podIP']}:8080/state", timeout_s=5)
    return json.loads(body) if code == 200 else None


def in_container(node: RealNode, pod: dict[str, Any], script: str) -> str:
    return node.kubectl.run("exec", pod["metadata"]["name"], "-n", pod["metadata"]["namespace"], "-c", "engine",
                            "--", "sh", "-c", script).stdout


def ready_again(node: RealNode, served: Served, check: Any, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
    """The resource's status once it is Ready and ``check(status)`` holds."""

    def done() -> dict[str, Any] | None:
        status = resource_status(node, served.namespace, served.name)
        return status if status.get("phase") == "Ready" and check(status) else None

    try:
        return wait_for(f"{served.name} Ready again", done, timeout_s, 2.0)
    except pytest.fail.Exception:
        print(namespace_report(node, served.namespace), file=sys.stderr)
        raise


def test_the_engine_pod_runs_under_pod_security_restricted(realnode: RealNode, served: Served) -> None:
    labels = get_json(realnode, "namespace", served.namespace)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = the_pod(realnode, served)
    assert pod["status"]["phase"] == "Running" and pod_ready(pod)
    assert not [v for v in pod["spec"]["volumes"] if "hostPath" in v], pod["spec"]["volumes"]
    # The label is enforced here: the same pod with a hostPath volume is refused.
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "restricted-probe", "namespace": served.namespace},
             "spec": {**pod["spec"], "nodeName": None,
                      "volumes": [*pod["spec"]["volumes"], {"name": "host", "hostPath": {"path": "/tmp"}}]}}
    refused = realnode.kubectl.run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe), check=False)
    assert refused.returncode != 0 and "violates PodSecurity \"restricted" in refused.stderr, refused.stderr


def test_an_engine_killed_in_its_container_is_relaunched_there_and_counted_in_status(
        realnode: RealNode, served: Served) -> None:
    pod = the_pod(realnode, served)
    before = runtime_state(realnode, pod)
    assert before is not None and before["ready"]
    # The fixture's broken compiler: the graph mode failed on the node and the runtime fell back.
    assert before["mode"] == "EAGER" and before["rung"] > 0 and before["fallbacks"] >= 1, before
    assert before["engineRestarts"] == 0 and engine_status(pod)["restartCount"] == 0
    kept = json.loads(in_container(realnode, pod, f"cat {STATE_DIR}/ladder.json"))
    assert kept["rung"] == before["rung"] and kept["fallbacks"] == before["fallbacks"], kept

    killed_at = time.monotonic()
    in_container(realnode, pod, f"kill -9 {before['enginePid']}")
    unready_seen: list[float] = []

    def relaunched() -> dict[str, Any] | None:
        current = get_json(realnode, "pod", pod["metadata"]["name"], "-n", served.namespace)
        if not pod_ready(current) and not unready_seen:
            unready_seen.append(time.monotonic() - killed_at)
        state = runtime_state(realnode, current)
        return state if state and state["engineRestarts"] == 1 and state["ready"] and pod_ready(current) else None

    after = wait_for("the engine relaunched and ready", relaunched, READY_TIMEOUT_S, 1.0)
    back_s = time.monotonic() - killed_at
    assert after["enginePid"] != before["enginePid"]
    # The same container, the same rung: the restart loop does not climb the ladder again.
    assert (after["mode"], after["rung"], after["fallbacks"]) == (before["mode"], before["rung"], before["fallbacks"])
    assert unready_seen, "the pod stayed Ready while its engine was dead: the Service kept routing to it"
    status = ready_again(realnode, served, lambda s: s["graph"]["replicas"][0].get("engineRestarts") == 1)
    (replica,) = status["graph"]["replicas"]
    assert replica["pod"] == pod["metadata"]["name"] and status["graph"]["engineRestarts"] == 1
    assert "containerRestarts" not in replica  # the kubelet restarted nothing
    assert engine_status(the_pod(realnode, served))["restartCount"] == 0
    code, metrics = realnode.http(f"http://{pod['status']['podIP']}:8080/metrics")
    assert code == 200 and any(line.startswith("ascend_llm_engine_restarts_total{") and line.endswith(" 1.0")
                               for line in metrics.splitlines()), metrics[-2000:]
    print(f"engine SIGKILL -> pod unready {unready_seen[0]:.1f}s, engine relaunched and the pod Ready "
          f"{back_s:.1f}s", file=sys.stderr)


def event_time(event: dict[str, Any]) -> float:
    stamp = event.get("lastTimestamp") or event.get("eventTime") or event["firstTimestamp"]
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_wedged_engine_fails_liveness_and_the_kubelet_restarts_it_in_time_resuming_the_ladder(
        realnode: RealNode, served: Served) -> None:
    pod = the_pod(realnode, served)
    name = pod["metadata"]["name"]
    before = runtime_state(realnode, pod)
    assert before is not None and before["ready"]
    restarts = engine_status(pod)["restartCount"]
    (spec,) = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
    liveness = spec["livenessProbe"]
    bound_s = HANG_TIMEOUT_S + RUNTIME_LAG_S + liveness["periodSeconds"] * liveness["failureThreshold"] + SLACK_S

    wedged_at = time.time()
    in_container(realnode, pod, f"kill -STOP {before['enginePid']}")  # alive, answering nothing

    def restarted() -> dict[str, Any] | None:
        current = get_json(realnode, "pod", name, "-n", served.namespace)
        return current if engine_status(current)["restartCount"] > restarts else None

    restarted_pod = wait_for("the kubelet to restart the wedged container", restarted, bound_s + 180, 1.0)
    restarted_s = time.time() - wedged_at
    events = get_json(realnode, "events", "-n", served.namespace, "--field-selector",
                      f"involvedObject.name={name}")["items"]
    killing = [e for e in events if e["reason"] == "Killing" and "liveness" in e.get("message", "")
               and event_time(e) >= wedged_at - 1]
    assert killing, [(e["reason"], e.get("message")) for e in events]
    decided_s = event_time(killing[-1]) - wedged_at
    assert decided_s <= bound_s, (
        f"the kubelet decided to restart {decided_s:.0f}s after the wedge; hangTimeoutSeconds {HANG_TIMEOUT_S} "
        f"+ liveness {liveness['periodSeconds']}s x {liveness['failureThreshold']} allow {bound_s}s")
    assert engine_status(restarted_pod)["lastState"]["terminated"], engine_status(restarted_pod)

    def serving() -> dict[str, Any] | None:
        state = runtime_state(realnode, restarted_pod)
        return state if state and state["ready"] else None

    after = wait_for("the restarted container's runtime ready", serving, READY_TIMEOUT_S, 1.0)
    # A new runtime: it read the ladder's position from the pod's state directory and started in
    # that mode, without trying (and failing) the graph mode again. Its ladder may be shorter than
    # the first container's: the operator remembered EAGER (graph.startMode) in the ConfigMap.
    assert after["resumed"] and "(EAGER), kept from this pod's previous container" in after["resumed"], after
    assert (after["mode"], after["fallbacks"], after["requestedMode"], after["fallbackReason"]) == (
        before["mode"], before["fallbacks"], before["requestedMode"], before["fallbackReason"])
    assert after["engineRestarts"] == 0  # counted per container: the kubelet's count says the rest
    status = ready_again(realnode, served,
                         lambda s: s["graph"]["replicas"][0].get("containerRestarts") == restarts + 1)
    (replica,) = status["graph"]["replicas"]
    assert replica["resumed"] == after["resumed"] and status["graph"]["containerRestarts"] == restarts + 1
    print(f"engine SIGSTOP -> kubelet's liveness kill {decided_s:.0f}s (bound {bound_s}s), container restarted "
          f"{restarted_s:.0f}s, Ready again {time.time() - wedged_at:.0f}s", file=sys.stderr)


class SliceWatch(threading.Thread):
    """The Service's EndpointSlice endpoints (pod, ready, serving, terminating), each change timed."""

    def __init__(self, node: RealNode, served: Served) -> None:
        super().__init__(daemon=True)
        self.node, self.served = node, served
        self.started = time.monotonic()
        self.changes: list[tuple[float, dict[str, tuple[bool, bool, bool]]]] = []
        self.stop = threading.Event()

    def snapshot(self) -> dict[str, tuple[bool, bool, bool]]:
        slices = get_json(self.node, "endpointslices", "-n", self.served.namespace, "-l",
                          f"kubernetes.io/service-name={self.served.name}")["items"]
        endpoints = {}
        for item in slices:
            for endpoint in item.get("endpoints") or []:
                conditions = endpoint.get("conditions") or {}
                endpoints[(endpoint.get("targetRef") or {}).get("name", "?")] = (
                    bool(conditions.get("ready")), bool(conditions.get("serving")),
                    bool(conditions.get("terminating")))
        return endpoints

    def run(self) -> None:
        while not self.stop.is_set():
            current = self.snapshot()
            if not self.changes or self.changes[-1][1] != current:
                self.changes.append((time.monotonic() - self.started, current))
            time.sleep(0.5)

    def timeline(self) -> str:
        def show(state: tuple[bool, bool, bool]) -> str:
            return "/".join(word for word, on in zip(("ready", "serving", "terminating"), state) if on) or "none"

        return "\n".join(f"  {at:6.1f}s " + (", ".join(f"{pod[-5:]}={show(s)}" for pod, s in sorted(eps.items()))
                                             or "(no endpoints)") for at, eps in self.changes)


def adapter(name: str) -> dict[str, Any]:
    return {"name": name, "source": {"pvc": {"claimName": "adapters", "subPath": name}}}


@pytest.fixture(scope="module")
def adapters(realnode: RealNode, operator_release: OperatorRelease, served: Served) -> Path:
    """Two tiny LoRA adapters (PEFT files, random weights) in a node directory, claimed in the namespace."""

    from ascend_runtime.tinymodel import build_tiny_lora

    root = operator_release.model_root / "adapters"
    for seed, name in enumerate(("sql", "chat"), start=1):
        build_tiny_lora(root / name, seed=seed)
    node_claim(realnode, served.namespace, "adapters", root)
    return root


def chat(node: RealNode, served: Served, model: str) -> tuple[int, dict[str, Any] | str]:
    service = get_json(node, "service", served.name, "-n", served.namespace)
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "http"]
    code, body = node.http(f"http://{service['spec']['clusterIP']}:{port}/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}, timeout_s=30)
    return code, (json.loads(body) if code == 200 else body)


def test_a_rolling_update_under_a_client_loop_loses_no_request(
        realnode: RealNode, served: Served, adapters: Path, tmp_path: Path) -> None:
    old = {p["metadata"]["name"] for p in live_pods(realnode, served)}
    assert len(old) == 1, old
    service = get_json(realnode, "service", served.name, "-n", served.namespace)
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "http"]
    url = f"http://{service['spec']['clusterIP']}:{port}/v1/chat/completions"
    out, stop = tmp_path / "requests.jsonl", tmp_path / "stop"
    watch = SliceWatch(realnode, served)
    watch.start()
    loop = subprocess.Popen(["nsenter", "-t", realnode.env["REALNODE_HOLDER_PID"], "-n", sys.executable,
                             str(ROOT / "tests" / "node" / "client_loop.py"), url, served.model, str(out), str(stop),
                             "1200"])
    try:
        wait_for("the client loop's first answers", lambda: out.exists() and len(out.read_text().splitlines()) >= 3,
                 60, 0.5)
        rolled_at = time.monotonic() - watch.started
        # Turning LoRA on changes the engine's flags (docs/lora.md: a rollout); the first adapter
        # is on a claim of its own, which the pod template mounts. Two replicas in the same patch
        # (maxSurge 0, maxUnavailable 1): a new pod starts beside the old one, the old one drains
        # only once it serves, then the second new pod starts: one engine start fewer than
        # scaling first, and the old pod is still the Service's only one until it is replaced.
        realnode.kubectl.run("patch", "ald", served.name, "-n", served.namespace, "--type=merge", "-p", json.dumps(
            {"spec": {"replicas": 2, "lora": {"maxRank": 8, "adapters": [adapter("sql")]}}}))

        def rolled() -> bool:
            pods = live_pods(realnode, served)
            return (len(pods) == 2 and not old & {p["metadata"]["name"] for p in pods}
                    and all(pod_ready(p) for p in pods)
                    and len(get_json(realnode, "pods", "-n", served.namespace)["items"]) == 2)

        try:
            wait_for("the rollout to replace the pod with two", rolled, 2 * READY_TIMEOUT_S, 1.0)
        except pytest.fail.Exception:
            print(namespace_report(realnode, served.namespace), file=sys.stderr)
            raise
        done_at = time.monotonic() - watch.started
        time.sleep(3)  # requests after the rollout, through the new pods only
    finally:
        stop.touch()
        loop.wait(timeout=90)
        watch.stop.set()
        watch.join(timeout=30)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    failed = [r for r in records if r["status"] != 200]
    print(f"rollout (patch at {rolled_at:.1f}s, the pod replaced by two at {done_at:.1f}s): {len(records)} requests, "
          f"{len(failed)} failed, slowest {max(r['s'] for r in records):.2f}s; EndpointSlice:\n{watch.timeline()}",
          file=sys.stderr)
    assert len(records) >= 20, records
    assert not failed, failed[:10]
    status = ready_again(realnode, served, lambda s: s.get("updatedReplicas") == 2 and s.get("readyReplicas") == 2)
    assert status["phase"] == "Ready"
    code, answer = chat(realnode, served, "sql")  # the new pods serve the adapter by its name
    if not (code == 200 and isinstance(answer, dict) and answer.get("model") == "sql"):
        print(json.dumps(status.get("lora")), namespace_report(realnode, served.namespace, r"(?i)adapter|lora|phase"),
              file=sys.stderr)
    assert code == 200 and isinstance(answer, dict) and answer["model"] == "sql", answer


class VersionWatch(threading.Thread):
    """``kubectl get -w`` of one object: each resourceVersion with the wall-clock time its line arrived
    (a watch, not a poll, so a write is timed to the watch's delivery, milliseconds here)."""

    def __init__(self, node: RealNode, kind: str, name: str, namespace: str) -> None:
        super().__init__(daemon=True)
        self.process = subprocess.Popen(
            [str(node.kubectl.path), "get", kind, name, "-n", namespace, "-w", "-o",
             "jsonpath={.metadata.resourceVersion}{\"\\n\"}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "KUBECONFIG": node.kubectl.kubeconfig})
        self.seen: list[tuple[float, str]] = []

    def run(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip():
                self.seen.append((time.time(), line.strip()))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.join(timeout=30)


#: The projected volume's current content is the directory the kubelet's atomic writer links as
#: ``..data``; the link is made anew (then renamed into place) at each update, so its own mtime is
#: when the kubelet swapped the files in.
SWAP_TIME = "import os; print(repr(os.lstat('/etc/ascend-llm/..data').st_mtime))"


def test_an_adapter_added_to_the_running_resource_answers_by_its_name_without_a_restart(
        realnode: RealNode, served: Served, adapters: Path, record_property: Any) -> None:
    pods = {p["metadata"]["name"]: engine_status(p)["restartCount"] for p in live_pods(realnode, served)}
    assert len(pods) == 2
    config_map = f"{served.name}-adapters"
    versions = VersionWatch(realnode, "configmap", config_map, served.namespace)
    versions.start()
    try:
        wait_for("the ConfigMap watch's first line", lambda: versions.seen, 30, 0.2)
        added = time.time()
        realnode.kubectl.run("patch", "ald", served.name, "-n", served.namespace, "--type=merge", "-p", json.dumps(
            {"spec": {"lora": {"adapters": [adapter("sql"), adapter("chat")]}}}))
        seen: dict[str, float] = {}

        def served_by_all() -> bool:
            status = resource_status(realnode, served.namespace, served.name)
            loaded = {a["name"]: a.get("loaded", 0) for a in (status.get("lora") or {}).get("adapters", [])}
            if "status" not in seen and loaded.get("chat") == 2:
                seen["status"] = time.time()
            if "status" in seen:  # both engines have it: every answer through the Service must be its
                answers = [chat(realnode, served, "chat") for _ in range(4)]
                if all(code == 200 and isinstance(a, dict) and a["model"] == "chat" for code, a in answers):
                    seen["served"] = time.time()
                    return True
            return False

        try:
            wait_for("the added adapter served by both replicas", served_by_all, 300, 0.5)
        except pytest.fail.Exception:
            print(namespace_report(realnode, served.namespace), file=sys.stderr)
            raise
    finally:
        versions.stop()
    # No rollout, no restart: the same pods and containers serve it.
    live = live_pods(realnode, served)
    assert {p["metadata"]["name"]: engine_status(p)["restartCount"] for p in live} == pods
    assert "chat" in realnode.kubectl.run("get", "configmap", config_map, "-n", served.namespace, "-o",
                                          "jsonpath={.data}").stdout
    writes = [at for at, _ in versions.seen[1:] if at >= added]
    assert writes, f"no write of {config_map} seen after the patch: {versions.seen}"
    written = writes[0]
    swapped, loaded_at = {}, {}
    for pod in live:
        name = pod["metadata"]["name"]
        swapped[name] = float(in_container(realnode, pod, f'python3 -c "{SWAP_TIME}"'))
        state = runtime_state(realnode, pod)
        assert state is not None, name
        (entry,) = [a for a in state["adapters"] if a["name"] == "chat"]
        assert entry["state"] == "Loaded", entry
        loaded_at[name] = entry["loadedAt"]
    sync_s = realnode.kubelet_sync_frequency_s
    # How long each part took; the kubelet's part is its pod resync: every syncFrequency plus up to
    # half of it again (the pod worker requeues with wait.Jitter(syncFrequency, 0.5)), on a 1 s tick.
    kubelet_bound_s = 1.5 * sync_s + 1 + SLACK_S
    poll_s = 5  # the runtime's default lora.pollIntervalS
    parts = {"operator": written - added,
             "kubelet": [swapped[n] - written for n in swapped],
             "runtime": [loaded_at[n] - swapped[n] for n in swapped],
             "status and Service": seen["served"] - max(loaded_at.values()),
             "total": seen["served"] - added}
    for key, value in parts.items():
        record_property(f"adapter_add_{key.replace(' ', '_')}_s", value)
    print(f"adapter added -> ConfigMap written {parts['operator']:.2f}s; kubelet swapped the file in the pods "
          f"{min(parts['kubelet']):.2f}-{max(parts['kubelet']):.2f}s later (syncFrequency {sync_s:.0f}s); "
          f"engines loaded it {min(parts['runtime']):.2f}-{max(parts['runtime']):.2f}s after that (poll {poll_s}s); "
          f"Loaded on both in status {seen['status'] - added:.1f}s, answering through the Service "
          f"{parts['total']:.1f}s after the patch", file=sys.stderr)
    assert 0 <= parts["operator"] <= 30, parts
    for name in swapped:
        # The watch line arrives a little after the write the kubelet also watches: 1 s of slack.
        assert written - 1 <= swapped[name] <= written + kubelet_bound_s, (name, parts, kubelet_bound_s)
        assert swapped[name] <= loaded_at[name] <= swapped[name] + poll_s + SLACK_S, (name, parts)
