"""Validation of rendered third-party objects (LeaderWorkerSet, KEDA ScaledObject) against the
openAPIV3Schema of their real CRDs in tests/data/crds, and of built-in kinds with
kubernetes_validate: the fixture ``validate_manifest`` picks the right one by apiVersion/kind.

The CRD schemas are made strict first (``additionalProperties: false`` on every object node
that lists its properties and does not preserve unknown fields), because the API server prunes
unknown fields silently: a misspelt field would pass plain jsonschema and vanish in a cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

CRD_DIR = Path(__file__).resolve().parents[1] / "data" / "crds"
#: (apiVersion, kind) -> CRD file in tests/data/crds.
CRD_FILES = {
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_scaledobjects.yaml",
    ("inference.networking.k8s.io/v1", "InferencePool"): "inference.networking.k8s.io_inferencepools.yaml",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "gateway.networking.k8s.io_httproutes.yaml",
}


def strict(node: Any) -> Any:
    """A copy of a CRD schema node that refuses fields the server would prune."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict(value) for key, value in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    """The strict openAPIV3Schema of ``kind`` at ``api_version`` from its CRD file."""
    crd = yaml.safe_load((CRD_DIR / CRD_FILES[(api_version, kind)]).read_text(encoding="utf-8"))
    version = api_version.split("/", 1)[1]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return strict(served["schema"]["openAPIV3Schema"])


def validate(obj: dict[str, Any], k8s_version: str = "1.30") -> None:
    """Raise when ``obj`` does not match its kind's schema (CRD or built-in)."""
    key = (obj["apiVersion"], obj["kind"])
    if key in CRD_FILES:
        jsonschema.Draft4Validator(crd_schema(*key)).validate(obj)
    else:
        kubernetes_validate.validate(obj, k8s_version, strict=True)


@pytest.fixture
def validate_manifest() -> Callable[..., None]:
    return validate
