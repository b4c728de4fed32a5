"""examples/cpu-tiny.yaml on a real kubelet: the operator (installed by the chart, in a pod) makes
the pod, the kubelet runs the CPU runtime image, its probes decide readiness, and the resource's
Service answers a chat completion.

The example is applied as a user with the real node would: its model directory made on the node
by the image itself (``ascend-llm tiny-model``), the node's nodeSelector and toleration in
``spec.npu`` (the CRD's placement fields, which apply to CPU too).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from node_harness import READY_TIMEOUT_S, Images, OperatorRelease, RealNode, get_json, user_resource
from install_harness import wait_for

#: The session's set-up (images, node, chart) counts towards the first test's timeout.
pytestmark = [pytest.mark.node, pytest.mark.timeout(2400)]



def test_cpu_tiny_reaches_ready_through_the_kubelets_probes_and_serves(
        realnode: RealNode, operator_release: OperatorRelease, tiny_model: Path, images: Images,
        namespace: str) -> None:
    resource = user_resource(namespace, tiny_model)
    name = resource["metadata"]["name"]
    started = time.monotonic()
    realnode.kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(resource))

    def ready() -> dict[str, Any] | None:
        status = get_json(realnode, "ald", name, "-n", namespace).get("status", {})
        return status if status.get("phase") == "Ready" else None

    status = wait_for(f"{name} Ready", ready, READY_TIMEOUT_S, 2.0)
    print(f"apply -> Ready on the real node: {time.monotonic() - started:.1f}s", file=sys.stderr)

    # The pod the kubelet runs: the operator's default CPU image, on the real node, Ready by its probes.
    deployment = get_json(realnode, "deployment", name, "-n", namespace)
    selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
    (pod,) = get_json(realnode, "pods", "-n", namespace, "-l", selector)["items"]
    assert pod["spec"]["nodeName"] == realnode.env["REALNODE_NAME"]
    (engine,) = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
    assert engine["image"] == images.cpu_ref
    assert {kind: engine[kind]["httpGet"]["path"] for kind in ("startupProbe", "readinessProbe", "livenessProbe")} \
        == {"startupProbe": "/startup", "readinessProbe": "/ready", "livenessProbe": "/live"}
    (engine_status,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "engine"]
    events = realnode.kubectl.run("get", "events", "-n", namespace, "--sort-by=.lastTimestamp").stdout
    assert engine_status["ready"] and engine_status["started"] and engine_status["restartCount"] == 0, \
        f"{json.dumps(engine_status, indent=1)}\n{events[-3000:]}"
    assert "running" in engine_status["state"] and engine_status["imageID"], engine_status
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions["Ready"] == conditions["ContainersReady"] == "True"
    # What the kubelet probes answers the same from the pod's IP.
    for path in ("/startup", "/ready", "/live"):
        code, body = realnode.http(f"http://{pod['status']['podIP']}:8080{path}")
        assert code == 200, f"{path}: {code} {body[:300]}"

    # kubectl logs: the kubelet's log of the container holds the runtime's own lines.
    logs = realnode.kubectl.run("logs", pod["metadata"]["name"], "-n", namespace, "-c", "engine").stdout
    assert " ascend-llm INFO ascend_runtime" in logs, logs[-3000:]

    # A chat completion through the resource's Service (its ClusterIP, as kube-proxy routes it).
    service = get_json(realnode, "service", name, "-n", namespace)
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "http"]
    served = resource["spec"]["model"]["servedName"]
    code, body = realnode.http(f"http://{service['spec']['clusterIP']}:{port}/v1/chat/completions", {
        "model": served, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8})
    assert code == 200, body[:2000]
    answer = json.loads(body)
    assert answer["model"] == served and answer["usage"]["completion_tokens"] > 0
    assert answer["choices"][0]["message"]["role"] == "assistant"

    # `kubectl get ald -o wide` (the endpoint is a wide column): Ready, the graph mode and the endpoint, as a user sees them.
    table = realnode.kubectl.run("get", "ald", name, "-n", namespace, "-o", "wide").stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    shown = dict(zip(header, row))
    assert shown["PHASE"] == "Ready"
    assert shown["MODE"] == status["graph"]["mode"] != ""
    assert shown["ENDPOINT"] == status["endpoint"]
    assert f"{name}.{namespace}.svc" in status["endpoint"] and str(port) in status["endpoint"]

    # Deleting the resource stops everything of it on the node: no pod, no running container or
    # sandbox (their removal, at the kubelet's garbage collection, is checked at the session's end).
    assert realnode.running(namespace), "containerd runs no container of the namespace: the check sees nothing"
    realnode.kubectl.run("delete", "ald", name, "-n", namespace, "--wait", "--timeout=120s")
    wait_for(f"the pods of {name} gone", lambda: not get_json(realnode, "pods", "-n", namespace)["items"], 120, 1.0)
    wait_for(f"the containers of {name} stopped on the node", lambda: not realnode.running(namespace), 60, 1.0)
