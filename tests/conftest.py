"""Suite-wide pytest options: ``--kubeconfig`` for the real-cluster tier.

Tests marked ``cluster`` run only when a kubeconfig is given (``--kubeconfig PATH`` or the
``KUBECONFIG`` environment variable); otherwise they are skipped with the reason.
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kubeconfig", default=None, metavar="PATH",
                     help="Run the tests marked `cluster` against the cluster of this kubeconfig.")


def kubeconfig(config: pytest.Config) -> str | None:
    """The kubeconfig the cluster tier uses, if any."""

    return config.getoption("--kubeconfig") or os.environ.get("KUBECONFIG") or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if kubeconfig(config):
        return
    skip = pytest.mark.skip(reason="needs a real cluster: pass --kubeconfig PATH or set KUBECONFIG")
    for item in items:
        if "cluster" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kubeconfig_path(request: pytest.FixtureRequest) -> str:
    """The kubeconfig of the real-cluster tier (the tests using it are skipped without one)."""

    path = kubeconfig(request.config)
    if not path:
        pytest.skip("needs a real cluster: pass --kubeconfig PATH or set KUBECONFIG")
    return path
