"""Fixtures of the real-node tier: a real kubelet (``../shared/node``) runs the images.

- ``images``: ``images/build.sh operator cpu`` (``make images``; cached, so an unchanged tree costs
  a hash), the OCI archives and image references it printed.
- ``realnode``: the control plane of ``kubeconfig_path`` (only the local ``../shared/k8s`` one: the
  node joins it by its work directory) plus the real node (``../shared/node/up.sh``), started once
  per session into ``.cache/node`` and stopped at the end (``down.sh``; its images stay for the next
  run), with both images imported into its containerd (skipped when the same digest is there).
- ``operator_release``: the chart installed with Helm as a user installs it, the operator's own
  image in a pod on the real node (``image.pullPolicy=Never``, the node's nodeSelector and
  toleration), watching the whole cluster, allowed to mount the tiny model's host directory.

Skipped, with the reason, when not root, without ``../shared/node`` or without buildah/debootstrap
(``.ci/tools`` installs them as root).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from node_harness import (  # first: it puts tests/cluster (install_harness) on sys.path
    IMAGES_TIMEOUT_S,
    NODE_LABEL,
    NODE_SELECTOR,
    NODE_TOLERATION,
    ROOT,
    Images,
    OperatorRelease,
    RealNode,
    import_image,
    node_env,
    node_pack,
    why_no_node,
)
from install_harness import CHART_DIR, Tool, tool, unique, wait_for  # noqa: I001


@pytest.fixture(scope="session")
def images() -> Images:
    reason = why_no_node()
    if reason:
        pytest.skip(reason)
    started = time.monotonic()
    result = subprocess.run(["bash", str(ROOT / "images" / "build.sh"), "operator", "cpu"], capture_output=True,
                            text=True, timeout=IMAGES_TIMEOUT_S, check=False)
    if result.returncode != 0:
        pytest.fail(f"images/build.sh failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    built = {}
    for line in result.stdout.splitlines():
        name, _, rest = line.partition("=")
        archive, _, ref = rest.partition(" ")
        built[name] = (Path(archive), ref)
    print(f"images: {time.monotonic() - started:.1f}s", file=sys.stderr)
    return Images(*built["operator"], *built["cpu"])


@pytest.fixture(scope="session")
def realnode(kubeconfig_path: str, images: Images) -> Iterator[RealNode]:
    control_plane = Path(kubeconfig_path).parent
    if not (control_plane / "pki" / "ca.key").is_file():
        pytest.skip("the real node joins the local ../shared/k8s control plane only (not a given kubeconfig)")
    workdir = Path(os.environ.get("ASCEND_LLM_NODE_WORKDIR") or ROOT / ".cache" / "node")
    workdir.mkdir(parents=True, exist_ok=True)
    up = subprocess.run(["bash", str(node_pack() / "up.sh"), str(workdir), "--control-plane", str(control_plane)],
                        capture_output=True, text=True, timeout=300, check=False)
    if up.returncode != 0:
        pytest.fail(f"../shared/node up.sh failed (exit {up.returncode}):\n{up.stderr[-4000:]}")
    env = node_env(str(workdir / "node.env"))
    try:
        import_image(env, images.operator_archive, images.operator_ref)
        import_image(env, images.cpu_archive, images.cpu_ref)
        yield RealNode(env, Tool(tool("kubectl"), kubeconfig_path), Tool(tool("helm4"), kubeconfig_path), workdir)
    finally:
        if os.environ.get("ASCEND_LLM_NODE_KEEP") != "1":
            subprocess.run(["bash", str(node_pack() / "down.sh"), str(workdir)], capture_output=True,
                           timeout=180, check=False)


@pytest.fixture(scope="session")
def model_root(realnode: RealNode) -> Path:
    """A host directory the engine pods mount the tiny model from (the chart allows this prefix)."""

    root = realnode.workdir.parent / "node-models"
    root.mkdir(parents=True, exist_ok=True)
    os.chown(root, 1000, 1000)  # the image's user writes the model here (tests/node: tiny_model)
    return root


@pytest.fixture(scope="session")
def operator_release(realnode: RealNode, images: Images, model_root: Path) -> Iterator[OperatorRelease]:
    repository, _, tag = images.operator_ref.rpartition(":")
    name, namespace = "ascend-llm", unique("llm-system")
    realnode.helm.run(
        "install", name, str(CHART_DIR), "--namespace", namespace, "--create-namespace", "--wait",
        "--timeout", "180s",
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never",
        "--set-string", f"nodeSelector.{NODE_LABEL}=true",
        "--set-json", f"tolerations=[{json.dumps(NODE_TOLERATION)}]",
        "--set-json", f"settings.hostPathPrefixes=[{json.dumps(str(model_root))}]",
        "--set", "settings.imagePullPolicy=Never",
    )
    try:
        yield OperatorRelease(name, namespace, model_root)
    finally:
        realnode.helm.run("uninstall", name, "--namespace", namespace, "--wait", check=False)
        realnode.kubectl.run("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture
def namespace(realnode: RealNode) -> Iterator[str]:
    name = unique("node")
    realnode.kubectl.run("create", "namespace", name)
    wait_for(f"ServiceAccount default in {name}", lambda: realnode.kubectl.run(
        "get", "serviceaccount", "default", "-n", name, check=False).returncode == 0, 30)
    try:
        yield name
    finally:
        realnode.kubectl.run("delete", "ald", "--all", "-n", name, "--wait", "--timeout=120s", check=False)
        realnode.kubectl.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def tiny_model(realnode: RealNode, operator_release: OperatorRelease, images: Images) -> Path:
    """The tiny model in the host directory the engine mounts, written by a pod of the CPU image."""

    namespace = operator_release.namespace
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tiny-model", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never", "nodeSelector": NODE_SELECTOR, "tolerations": [NODE_TOLERATION],
            "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
            "containers": [{"name": "make", "image": images.cpu_ref, "imagePullPolicy": "Never",
                            "command": ["ascend-llm", "tiny-model", "/models/tiny"],
                            "volumeMounts": [{"name": "models", "mountPath": "/models"}]}],
            "volumes": [{"name": "models", "hostPath": {"path": str(operator_release.model_root),
                                                        "type": "Directory"}}],
        },
    }
    realnode.kubectl.run("apply", "-f", "-", stdin=json.dumps(pod))
    def finished() -> str | None:
        phase = realnode.kubectl.run("get", "pod", "tiny-model", "-n", namespace, "-o",
                                     "jsonpath={.status.phase}", check=False).stdout
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for("the tiny-model pod to finish", finished, 300, 1.0)
    logs = realnode.kubectl.run("logs", "tiny-model", "-n", namespace, check=False).stdout
    realnode.kubectl.run("delete", "pod", "tiny-model", "-n", namespace, "--wait=false", check=False)
    assert phase == "Succeeded", f"ascend-llm tiny-model failed in the image:\n{logs[-3000:]}"
    model = operator_release.model_root / "tiny"
    assert (model / "config.json").is_file() and (model / "tokenizer.json").is_file()
    return model
