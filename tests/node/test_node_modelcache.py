"""The model cache on a real kubelet: the fetch pods download from a local hub into real volumes.

- A claim (``cache.create``) bound to a static local PersistentVolume: the fetch Job's pod runs on
  the real node and fills it from the fake hub (``node_hub``, served from the host's side of the
  node's link; never the internet), the serving pod starts from the cache, deleting the resource
  keeps the claim and the weights, and a second resource on that claim finds the marker and
  downloads nothing.
- The fetch container writes only its target (the model repo's directory): a pod with the fetch
  Job's own pod spec and volume mounts, its command swapped for write attempts, is refused
  everywhere else on the volume.
- A ``hostPath`` cache below a root-owned 0755 prefix, as an administrator makes one: the kubelet
  creates the namespace's directory as root; the pod's init containers make the fetch's target and
  the compile cache the engine user's, and the fetch fills the node's directory.

One engine start only (the claim's first resource): the second resource has no replica, the
``hostPath`` one is deleted once its init containers are done.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from ascend_runtime.cachelayout import DEFAULT_ALLOW_PATTERNS, matches
from fake_hub import FakeHub, FakeRepo
from install_harness import wait_for
from node_harness import (
    EXAMPLE,
    NODE_SELECTOR,
    NODE_TOLERATION,
    READY_TIMEOUT_S,
    OperatorRelease,
    RealNode,
    get_json,
)

pytestmark = [pytest.mark.node, pytest.mark.timeout(2400)]

REPO = "tiny/llama"
CACHE_DIR = "/var/cache/ascend-llm-model"  # the operator's mount path of the cache volume
STORAGE_CLASS = "realnode-local"
#: The fetch's target below the cache root: the repo's directory (snapshots, markers, locks).
TARGET = f"models/huggingface/{REPO}"
ENGINE_USER = 1000


def hub_resource(namespace: str, name: str, cache: dict[str, Any], replicas: int = 1) -> dict[str, Any]:
    """examples/cpu-tiny.yaml serving ``REPO`` from the hub through the cache, on the real node."""

    resource = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    resource["metadata"] = {"name": name, "namespace": namespace}
    model = resource["spec"]["model"]
    del model["hostPath"]
    model.update({"huggingFace": {"id": REPO}, "revision": "main", "cache": cache})
    resource["spec"]["npu"] = {"nodeSelector": NODE_SELECTOR, "tolerations": [NODE_TOLERATION]}
    resource["spec"]["graph"] = {"policy": "eager"}  # what is shown here is the cache, not a compile
    resource["spec"]["warmup"] = {"enabled": False}  # nor the warmup (test_node_serving.py shows it)
    resource["spec"]["replicas"] = replicas
    return resource


def local_volume(name: str, path: Path, claim: str, namespace: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": STORAGE_CLASS,
            "claimRef": {"namespace": namespace, "name": claim},
            "local": {"path": str(path)},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
        },
    }


def cache_status(node: RealNode, namespace: str, name: str) -> dict[str, Any]:
    return get_json(node, "ald", name, "-n", namespace).get("status", {}).get("modelCache") or {}


def fetch_job(node: RealNode, namespace: str, name: str) -> dict[str, Any]:
    job_name = wait_for(f"{name}'s fetch Job", lambda: cache_status(node, namespace, name).get("job"), 120, 1.0)
    return get_json(node, "job", job_name, "-n", namespace)


def wait_job_complete(node: RealNode, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    name = job["metadata"]["name"]

    def done() -> dict[str, Any] | None:
        current = get_json(node, "job", name, "-n", namespace)
        conditions = {c["type"]: c for c in current.get("status", {}).get("conditions", [])}
        assert "Failed" not in conditions or conditions["Failed"]["status"] != "True", \
            f"{name} failed: {conditions['Failed']}\n{job_logs(node, namespace, name)}"
        return current if conditions.get("Complete", {}).get("status") == "True" else None

    return wait_for(f"fetch Job {name} complete", done, 300, 1.0)


def job_pods(node: RealNode, namespace: str, job: str) -> list[dict[str, Any]]:
    return get_json(node, "pods", "-n", namespace, "-l", f"job-name={job}")["items"]


def job_logs(node: RealNode, namespace: str, job: str) -> str:
    return node.kubectl.run("logs", f"job/{job}", "-n", namespace, "--all-containers", check=False).stdout \
        + node.kubectl.run("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False).stdout[-3000:]


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` and what it holds (a file's sha256), to see what a pod changed.
    Modes are left out: the kubelet's fsGroup pass adds group bits to a claim's files."""

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


#: Run in the fetch Job's own pod spec: write where the fetch may (its target) and where it may
#: not, and say what each write got.
PROBE = f"""
import errno, json, os
result = {{}}
for path in ["{CACHE_DIR}/{TARGET}/probe", "{CACHE_DIR}/models/huggingface/other/planted",
             "{CACHE_DIR}/models/planted", "{CACHE_DIR}/compile/planted", "{CACHE_DIR}/planted",
             "{CACHE_DIR}/{TARGET}/../planted"]:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as stream:
            stream.write("x")
        result[path] = "written"
    except OSError as error:
        result[path] = errno.errorcode[error.errno]
print(json.dumps(result))
"""


def probe_pod(namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    """The fetch Job's pod spec, volume mounts and security context as the server holds them, with
    the write attempts of :data:`PROBE` as the fetch container's command."""

    spec = json.loads(json.dumps(job["spec"]["template"]["spec"]))
    (container,) = spec["containers"]
    container["command"] = ["python3", "-c", PROBE]
    container["resources"] = {"requests": {"cpu": "10m", "memory": "64Mi"}}
    container.pop("ports", None)
    spec.update(restartPolicy="Never", terminationGracePeriodSeconds=1)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "write-probe", "namespace": namespace},
            "spec": spec}


def finished_pod(node: RealNode, namespace: str, name: str, timeout_s: float = 180) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        pod = get_json(node, "pod", name, "-n", namespace)
        return pod if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") else None
    return wait_for(f"pod {name} finished", done, timeout_s, 1.0)


@pytest.fixture
def volume_dir(realnode: RealNode, namespace: str) -> Any:
    """The local volume's directory on the node: root's, 0755, as a disk an administrator formats."""

    path = realnode.workdir.parent / "node-volumes" / namespace
    path.mkdir(parents=True)
    path.chmod(0o755)
    yield path
    realnode.kubectl.run("delete", "pv", f"{namespace}-cache", "--wait=false", check=False)
    shutil.rmtree(path, ignore_errors=True)


def test_a_claim_is_filled_once_from_the_hub_served_from_kept_on_delete_and_reused(
        realnode: RealNode, operator_release: OperatorRelease, tiny_model: Path, node_hub: FakeHub,
        namespace: str, volume_dir: Path) -> None:
    node_hub.repos[REPO] = FakeRepo.from_dir(tiny_model)
    hub_files = {path for path in node_hub.repos[REPO].commits[node_hub.repos[REPO].refs["main"]]
                 if matches(path, DEFAULT_ALLOW_PATTERNS)}
    name, claim = "cached", "cached-model-cache"
    # Another model already on the volume: nothing of this resource may touch it.
    other = volume_dir / "models" / "huggingface" / "other" / "model" / "main"
    other.mkdir(parents=True)
    (other / "model.safetensors").write_bytes(b"weights of another model")
    before_other = tree(volume_dir / "models" / "huggingface" / "other")
    realnode.kubectl.run("apply", "-f", "-", stdin=json.dumps(local_volume(
        f"{namespace}-cache", volume_dir, claim, namespace, realnode.env["REALNODE_NAME"])))
    resource = hub_resource(namespace, name, {"create": {"size": "1Gi", "storageClassName": STORAGE_CLASS,
                                                         "accessMode": "ReadWriteOnce"}})
    started = time.monotonic()
    realnode.kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(resource))

    # The fetch Job's pod runs on the real node and downloads every file of the repo from the hub.
    job = wait_job_complete(realnode, namespace, fetch_job(realnode, namespace, name))
    job_name = job["metadata"]["name"]
    fetched_in = time.monotonic() - started
    (pod,) = job_pods(realnode, namespace, job_name)
    assert pod["spec"]["nodeName"] == realnode.env["REALNODE_NAME"]
    # Each file once, at the one commit the fetch resolved "main" to (hub paths /<repo>/resolve/<rev>/<file>).
    downloaded = [r.path.removeprefix(f"/{REPO}/resolve/").split("/", 1) for r in node_hub.file_downloads()]
    assert len({revision for revision, _ in downloaded}) == 1, downloaded
    assert sorted(name for _, name in downloaded) == sorted(hub_files)
    # Its one writable mount is the repo's directory on the claim: nothing else of the volume.
    (container,) = pod["spec"]["containers"]
    assert [m for m in container["volumeMounts"] if m["name"] == "model-cache"] == [
        {"name": "model-cache", "mountPath": f"{CACHE_DIR}/{TARGET}", "subPath": TARGET}], container["volumeMounts"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    snapshot = volume_dir / TARGET / "main"
    marker = json.loads((volume_dir / TARGET / "main.complete.json").read_text(encoding="utf-8"))
    assert set(marker["digests"]) == hub_files and (snapshot / "config.json").is_file()
    assert (snapshot / "config.json").stat().st_uid == ENGINE_USER

    # The serving pod starts from the cache, offline.
    def ready() -> dict[str, Any] | None:
        status = get_json(realnode, "ald", name, "-n", namespace).get("status", {})
        return status if status.get("phase") == "Ready" else None

    status = wait_for(f"{name} Ready", ready, READY_TIMEOUT_S, 2.0)
    print(f"\napply -> fetched {fetched_in:.1f}s, -> Ready {time.monotonic() - started:.1f}s")
    assert status["modelCache"]["phase"] == "Complete" and status["modelCache"]["claimName"] == claim
    (serving,) = [p for p in get_json(realnode, "pods", "-n", namespace)["items"]
                  if not p["metadata"]["name"].startswith(job_name)]
    (engine,) = [c for c in serving["spec"]["containers"] if c["name"] == "engine"]
    mounts = {m["mountPath"]: m for m in engine["volumeMounts"] if m["name"] == "model-cache"}
    assert mounts[f"{CACHE_DIR}/models"].get("readOnly") is True
    # The engine's user writes its compile cache on the claim (the kubelet's fsGroup makes it so).
    code, body = realnode.http(f"http://{serving['status']['podIP']}:8080/state")
    assert code == 200, body[:500]
    compile_cache = json.loads(body)["compileCache"]
    assert compile_cache["dir"].startswith(f"{CACHE_DIR}/compile/") and not compile_cache.get("error"), compile_cache
    downloads = len(node_hub.file_downloads())
    assert downloads == len(hub_files)  # the engine downloaded nothing

    # Deleting the resource keeps the claim and the weights.
    realnode.kubectl.run("delete", "ald", name, "-n", namespace, "--wait", "--timeout=120s")
    wait_for("the serving pod gone", lambda: not [p for p in get_json(realnode, "pods", "-n", namespace)["items"]
                                                  if p["metadata"]["name"].startswith(name + "-")
                                                  and not p["metadata"]["name"].startswith(job_name)], 120, 1.0)
    kept = get_json(realnode, "pvc", claim, "-n", namespace)
    assert kept["status"]["phase"] == "Bound" and not kept["metadata"].get("ownerReferences")
    assert json.loads((volume_dir / TARGET / "main.complete.json").read_text(encoding="utf-8")) == marker

    # The fetch container writes only its target: the Job's own pod spec, other writes refused.
    before = tree(volume_dir)
    realnode.kubectl.run("apply", "-f", "-", stdin=json.dumps(probe_pod(namespace, job)))
    probe = finished_pod(realnode, namespace, "write-probe")
    out = realnode.kubectl.run("logs", "write-probe", "-n", namespace, check=False).stdout
    assert probe["status"]["phase"] == "Succeeded", out
    results = json.loads(out.strip().splitlines()[-1])
    print(f"write probe in the fetch Job's pod spec: {results}")
    assert results.pop(f"{CACHE_DIR}/{TARGET}/probe") == "written"  # the probe sees a write that works
    assert set(results.values()) <= {"EACCES", "EROFS", "ENOENT"}, results
    after = tree(volume_dir)
    assert set(after) - set(before) == {f"{TARGET}/probe"}, set(after) - set(before)
    assert tree(volume_dir / "models" / "huggingface" / "other") == before_other
    (volume_dir / TARGET / "probe").unlink()

    # A second resource on the kept claim finds the marker: its fetch downloads nothing.
    requests_before = node_hub.count()
    second = hub_resource(namespace, "reuse", {"claimName": claim}, replicas=0)
    realnode.kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(second))
    reuse_job = wait_job_complete(realnode, namespace, fetch_job(realnode, namespace, "reuse"))
    logs = realnode.kubectl.run("logs", f"job/{reuse_job['metadata']['name']}", "-n", namespace).stdout
    assert "already cached" in logs, logs
    assert node_hub.count() == requests_before, node_hub.requests[requests_before:]
    wait_for("reuse's cache Complete", lambda: cache_status(realnode, namespace, "reuse").get("phase") == "Complete",
             60, 1.0)


def test_a_host_path_cache_under_a_root_owned_prefix_is_filled_as_the_engine_user(
        realnode: RealNode, operator_release: OperatorRelease, tiny_model: Path, node_hub: FakeHub,
        namespace: str, cache_prefix: Path) -> None:
    node_hub.repos[REPO] = FakeRepo.from_dir(tiny_model)
    # Another namespace's directory below the same prefix: never mounted, never touched.
    neighbour = cache_prefix / f"{namespace}-other" / "models" / "huggingface" / "tiny" / "llama"
    neighbour.mkdir(parents=True)
    (neighbour / "main.complete.json").write_text("{}")
    before_neighbour = tree(cache_prefix / f"{namespace}-other")
    downloads = len(node_hub.file_downloads())
    resource = hub_resource(namespace, "node-cached", {"hostPath": str(cache_prefix)})
    realnode.kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(resource))
    try:
        def inits_done() -> dict[str, Any] | None:
            for pod in get_json(realnode, "pods", "-n", namespace)["items"]:
                statuses = pod.get("status", {}).get("initContainerStatuses") or []
                failed = [s for s in statuses if (s["state"].get("terminated") or {}).get("exitCode", 0) != 0
                          or s.get("restartCount", 0) > 0]
                assert not failed, (f"{json.dumps(failed, indent=1)}\n" + realnode.kubectl.run(
                    "logs", pod["metadata"]["name"], "-n", namespace, "--all-containers", check=False).stdout[-3000:])
                if statuses and all("terminated" in s["state"] for s in statuses):
                    return pod
            return None

        pod = wait_for("the serving pod's init containers done", inits_done, 300, 1.0)
        inits = pod["spec"]["initContainers"]
        assert [c["name"] for c in inits] == ["cache-dirs", "fetch"]
        (fetch,) = [c for c in inits if c["name"] == "fetch"]
        # Of the node's directory only the repo's is writable; the rest is the pod's scratch emptyDir.
        writable = [m for m in fetch["volumeMounts"] if m.get("readOnly") is not True]
        assert [m for m in writable if m["name"] == "model-cache"] == [
            {"name": "model-cache", "mountPath": f"{CACHE_DIR}/{TARGET}", "subPath": TARGET}]
        scratch = {v["name"] for v in pod["spec"]["volumes"] if "emptyDir" in v}
        assert {m["name"] for m in writable} - {"model-cache"} <= scratch, writable
        directory = cache_prefix / namespace
        assert (directory.stat().st_uid, directory.stat().st_mode & 0o777) == (0, 0o755)  # the kubelet's
        for owned in (directory / TARGET, directory / "compile"):
            assert owned.stat().st_uid == ENGINE_USER, owned
        marker = json.loads((directory / TARGET / "main.complete.json").read_text(encoding="utf-8"))
        assert (directory / TARGET / "main" / "config.json").stat().st_uid == ENGINE_USER
        assert len(node_hub.file_downloads()) - downloads == len(marker["digests"])
        assert tree(cache_prefix / f"{namespace}-other") == before_neighbour
        assert sorted(os.listdir(directory)) == ["compile", "models"]
    finally:
        realnode.kubectl.run("delete", "ald", "node-cached", "-n", namespace, "--wait", "--timeout=120s",
                             check=False)
        shutil.rmtree(cache_prefix / f"{namespace}-other", ignore_errors=True)
        shutil.rmtree(cache_prefix / namespace, ignore_errors=True)
