"""Fixtures of the real-node tier: a real kubelet (``../shared/node``) runs the images.

- ``images``: ``images/build.sh operator cpu`` (``make images``; cached, so an unchanged tree costs
  a hash), the OCI archives and image references it printed.
- ``realnode``: the control plane of ``kubeconfig_path`` (only the local ``../shared/k8s`` one: the
  node joins it by its work directory) plus the real node (``../shared/node/up.sh``), started once
  per session into ``.cache/node`` and stopped at the end (``down.sh``; its images stay for the next
  run), with both images imported into its containerd (skipped when the same digest is there).
- ``operator_release``: the chart installed with Helm as a user installs it, the operator's own
  image in a pod on the real node (``image.pullPolicy=Never``, the node's nodeSelector and
  toleration), watching the whole cluster, allowed to mount the tiny model's host directory, with
  ``cache_prefix`` as its node cache prefix and ``node_hub`` as its Hugging Face endpoint.
- ``node_hub``: the local fake hub (``tests/fakes/fake_hub.py``) on the host's side of the node's
  link (``REALNODE_HOST_IP``), which pods reach and nothing outside does; tests add repos to it.

Skipped, with the reason, when not root, without ``../shared/node`` or without buildah/debootstrap
(``.ci/tools`` installs them as root).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from node_harness import (  # first: it puts tests/cluster (install_harness) on sys.path
    ROOT,
    Images,
    NodeSetupError,
    OperatorRelease,
    RealNode,
    build_images,
    install_operator,
    start_node,
    stop_node,
    uninstall_operator,
    why_no_node,
    write_tiny_model,
)
from install_harness import tool, unique, wait_for  # noqa: I001

sys.path.insert(0, str(ROOT / "tests" / "fakes"))
from fake_hub import FakeHub  # noqa: E402


#: When the tier's first set-up began and its node stopped (monotonic), for the closing summary.
_TIER: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if "stopped" in _TIER:
        terminalreporter.write_line(f"real-node tier: {_TIER['stopped'] - _TIER['started']:.0f}s from its first "
                                    f"set-up (images) to its node stopped")


@pytest.fixture(scope="session")
def images() -> Images:
    reason = why_no_node()
    if reason:
        pytest.skip(reason)
    started = _TIER["started"] = time.monotonic()
    try:
        built = build_images()
    except NodeSetupError as error:
        pytest.fail(str(error))
    print(f"images: {time.monotonic() - started:.1f}s", file=sys.stderr)
    return built


@pytest.fixture(scope="session")
def realnode(kubeconfig_path: str, images: Images) -> Iterator[RealNode]:
    control_plane = Path(kubeconfig_path).parent
    if not (control_plane / "pki" / "ca.key").is_file():
        pytest.skip("the real node joins the local ../shared/k8s control plane only (not a given kubeconfig)")
    workdir = Path(os.environ.get("ASCEND_LLM_NODE_WORKDIR") or ROOT / ".cache" / "node")
    try:
        try:
            node = start_node(control_plane, workdir, images, tool("kubectl"), tool("helm4"), kubeconfig_path)
        except NodeSetupError as error:
            pytest.fail(str(error))
        yield node
    finally:
        if os.environ.get("ASCEND_LLM_NODE_KEEP") != "1":
            stop_node(workdir)
        _TIER["stopped"] = time.monotonic()


@pytest.fixture(scope="session")
def model_root(realnode: RealNode) -> Path:
    """A host directory the engine pods mount the tiny model from (the chart allows this prefix)."""

    root = realnode.workdir.parent / "node-models"
    root.mkdir(parents=True, exist_ok=True)
    os.chown(root, 1000, 1000)  # the image's user writes the model here (tests/node: tiny_model)
    return root


@pytest.fixture(scope="session")
def cache_prefix(realnode: RealNode) -> Path:
    """The node cache prefix (``settings.cacheHostPathPrefixes``): made by root, 0755, as an
    administrator makes one; the operator's pods must cope with that."""

    root = realnode.workdir.parent / "node-cache"
    root.mkdir(parents=True, exist_ok=True)
    os.chown(root, 0, 0)
    root.chmod(0o755)
    return root


@pytest.fixture(scope="session")
def node_hub(realnode: RealNode) -> Iterator[FakeHub]:
    with FakeHub({}, host=realnode.env["REALNODE_HOST_IP"]) as hub:
        yield hub


@pytest.fixture(scope="session")
def operator_release(realnode: RealNode, images: Images, model_root: Path, cache_prefix: Path,
                     node_hub: FakeHub) -> Iterator[OperatorRelease]:
    release = install_operator(realnode, images, "ascend-llm", unique("llm-system"), model_root,
                               cache_prefix=cache_prefix, hub_url=node_hub.url)
    try:
        yield release
    finally:
        started = time.monotonic()
        uninstall_operator(realnode, release)
        uninstalled_s = time.monotonic() - started
    # The tests deleted their resources; with the chart uninstalled too, nothing of the project
    # may stay on the node: no container or sandbox, no volume mount, no pod directory.
    left: dict[str, float] = {}  # what was still there, and when last seen (said below)

    def no_container() -> bool:
        owners = realnode.container_owners()
        left.update({owner: time.monotonic() - started for owner in owners})
        return not owners

    wait_for("no container left on the node after helm uninstall", no_container, 180, 2.0)
    print("left after helm uninstall (last seen): " + ", ".join(f"{owner} {at:.0f}s" for owner, at in left.items()),
          file=sys.stderr)
    wait_for("no mount left under the kubelet's pods directory", lambda: not realnode.pod_mounts(), 60, 1.0)
    wait_for("no pod directory left in the kubelet's root", lambda: not realnode.pod_dirs(), 60, 1.0)
    print(f"helm uninstall: {uninstalled_s:.1f}s; nothing left on the node after {time.monotonic() - started:.1f}s",
          file=sys.stderr)


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

    try:
        return write_tiny_model(realnode, operator_release.namespace, images.cpu_ref, operator_release.model_root)
    except NodeSetupError as error:
        pytest.fail(str(error))
