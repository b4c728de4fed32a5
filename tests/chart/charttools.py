"""Helpers shared by the chart and image tests: paths, a real Helm binary, rendered objects."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "charts" / "ascend-llm-operator"
CI_VALUES = sorted((CHART_DIR / "ci").glob("*-values.yaml"))
TOOLS_BIN = REPO_ROOT / ".cache" / "tools" / "bin"
CRD_DATA = REPO_ROOT / "tests" / "data" / "crds"
HELM_VERSIONS = ("helm3", "helm4")
#: Seconds one helm or hadolint call may take before the test fails instead of hanging.
TOOL_TIMEOUT_S = 120


@dataclass(frozen=True)
class Helm:
    """One real Helm binary (Helm 3 or Helm 4) run against the chart."""

    name: str
    path: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.path), *args], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
        )

    def template_args(
        self, values: tuple[Path, ...] = (), sets: tuple[str, ...] = (), include_crds: bool = False
    ) -> list[str]:
        args = ["template", "test-release", str(CHART_DIR), "--namespace", "llm-system"]
        for path in values:
            args += ["--values", str(path)]
        for item in sets:
            args += ["--set", item]
        if include_crds:
            args.append("--include-crds")
        return args

    def template(
        self, values: tuple[Path, ...] = (), sets: tuple[str, ...] = (), include_crds: bool = False
    ) -> subprocess.CompletedProcess[str]:
        return self.run(*self.template_args(values, sets, include_crds))

    def render(
        self, values: tuple[Path, ...] = (), sets: tuple[str, ...] = (), include_crds: bool = False
    ) -> list[dict[str, Any]]:
        """The rendered objects; fails the test with Helm's stderr when rendering fails."""
        return [dict(doc) for doc in _render_cached(self, values, sets, include_crds)]


@cache
def _render_cached(
    helm: Helm, values: tuple[Path, ...], sets: tuple[str, ...], include_crds: bool
) -> tuple[dict[str, Any], ...]:
    result = helm.template(values, sets, include_crds)
    if result.returncode != 0:
        pytest.fail(f"{helm.name} template failed ({values}, {sets}):\n{result.stderr}")
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def load_crd_schema(path: Path, version: str) -> dict[str, Any]:
    """The openAPIV3Schema of `version` in the CRD file `path`."""
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return entry["schema"]["openAPIV3Schema"]
    raise LookupError(f"{path.name} has no version {version}")


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj.get("kind") == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]
