"""Suite-wide pytest options and the real API server of the cluster tier.

Tests marked ``cluster`` run against a real Kubernetes API server:

- the cluster of ``--kubeconfig PATH`` or ``KUBECONFIG`` when one is given (any cluster);
- otherwise the local control plane of ``../shared/k8s`` (kube-apiserver, controller-manager,
  scheduler, etcd and kwok nodes with Ascend NPUs), started once per test session into
  ``.cache/k8s`` and stopped at the end (``ASCEND_LLM_K8S_PACK`` names another copy of the pack,
  ``ASCEND_LLM_K8S_PORT_BASE`` another port base, ``ASCEND_LLM_K8S_KEEP=1`` leaves it running);
- neither: they are skipped with the reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PORT_BASE = "20000"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kubeconfig", default=None, metavar="PATH",
                     help="Run the tests marked `cluster` against the cluster of this kubeconfig.")


def given_kubeconfig(config: pytest.Config) -> str | None:
    """The kubeconfig the user gave, if any."""

    return config.getoption("--kubeconfig") or os.environ.get("KUBECONFIG") or None


def local_pack() -> Path | None:
    """The local control-plane pack (``../shared/k8s``), if this checkout has one beside it."""

    pack = Path(os.environ.get("ASCEND_LLM_K8S_PACK") or ROOT.parent / "shared" / "k8s")
    return pack if (pack / "up.sh").is_file() else None


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM (a CI timeout, `.ci/test` stopping a group) ends the run as Ctrl-C does: session
    # fixtures still stop the control plane, the real node and the engines they started.
    signal.signal(signal.SIGTERM, _interrupted)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if given_kubeconfig(config) or local_pack():
        return
    skip = pytest.mark.skip(reason="needs a real cluster: pass --kubeconfig PATH, set KUBECONFIG, "
                                   "or check out ../shared/k8s beside the repository")
    for item in items:
        if "cluster" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kubeconfig_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """The kubeconfig of the cluster tier: the given one, else a local control plane started now."""

    given = given_kubeconfig(request.config)
    if given:
        yield given
        return
    pack = local_pack()
    if pack is None:
        pytest.skip("needs a real cluster: pass --kubeconfig PATH, set KUBECONFIG, or provide ../shared/k8s")
    workdir = Path(os.environ.get("ASCEND_LLM_K8S_WORKDIR") or ROOT / ".cache" / "k8s")
    workdir.mkdir(parents=True, exist_ok=True)
    port_base = os.environ.get("ASCEND_LLM_K8S_PORT_BASE", DEFAULT_PORT_BASE)
    up = subprocess.run(["bash", str(pack / "up.sh"), str(workdir), "--port-base", port_base],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if up.returncode != 0:
        pytest.fail(f"../shared/k8s up.sh failed (exit {up.returncode}):\n{up.stderr[-4000:]}")
    path = up.stdout.strip().splitlines()[-1].split("=", 1)[1]
    try:
        yield path
    finally:
        if os.environ.get("ASCEND_LLM_K8S_KEEP") != "1":
            subprocess.run(["bash", str(pack / "down.sh"), str(workdir), "--wipe"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
