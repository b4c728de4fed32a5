"""Every file in examples/: valid against the generated CRD schema (jsonschema) and the model,
and rendered by build_children into manifests that the Kubernetes OpenAPI schemas accept (and,
for LeaderWorkerSets, KEDA ScaledObjects, InferencePools and HTTPRoutes, their CRD schemas in
tests/data/crds), with each autoscaler an example's spec allows; every feature has an example.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from ascend_operator import api, crdgen
from ascend_operator.builders import BuildMeta, build_children, choose_autoscaler
from ascend_operator.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
SCHEMA = crdgen.generate_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
SEED_SCENARIOS = {
    "qwen72b-910b-tp8.yaml",
    "deepseek-moe-ep.yaml",
    "small-310p.yaml",
    "a3-deployment.yaml",
    "cpu-tiny.yaml",
}


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_seed_scenarios_ship() -> None:
    assert SEED_SCENARIOS <= {path.name for path in EXAMPLES}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_matches_the_crd_schema(path: Path) -> None:
    resource = load(path)
    assert resource["apiVersion"] == api.API_VERSION and resource["kind"] == api.KIND
    jsonschema.Draft4Validator(SCHEMA).validate(resource)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_parses_and_renders_valid_manifests(
    path: Path, validate_manifest: Callable[..., None]
) -> None:
    resource = load(path)
    spec = api.parse_spec(resource["spec"])
    # Every autoscaler the cluster could give this spec (with KEDA, with only an adapter).
    kinds = {
        choose_autoscaler(spec, load_settings({}), installed).kind
        for installed in ({"keda.sh/v1alpha1"}, {"custom.metrics.k8s.io/v1beta2"})
    }
    for host_mounts in ("none", "driver"):
        settings = load_settings({"ASCEND_LLM_OPERATOR_HOST_MOUNTS": host_mounts})
        for kind in kinds:
            children = build_children(
                BuildMeta(resource["metadata"]["name"], "llm"), spec, settings, autoscaler=kind
            )
            for obj in children.objects():
                for version in ("1.30", "1.36"):
                    # kubernetes-validate's 1.30 Job schema requires onPodConditions[].status,
                    # which the API server defaults (the cluster tier applies these Jobs).
                    if obj["kind"] != "Job" or version != "1.30":
                        validate_manifest(obj, version)


def test_examples_include_multinode_and_autoscaling() -> None:
    specs = [api.parse_spec(load(path)["spec"]) for path in EXAMPLES]
    assert any(spec.nodes_per_replica > 1 and spec.npu.chip is api.Chip.A2_910B for spec in specs)
    assert any(spec.nodes_per_replica > 1 and spec.npu.chip is api.Chip.A3 for spec in specs)
    assert any(spec.autoscaling is not None and spec.autoscaling.scale_to_zero.enabled for spec in specs)


def test_every_feature_has_an_example() -> None:
    """A hub model with a created cache and the compile cache, LoRA adapters, routing."""
    specs = [api.parse_spec(load(path)["spec"]) for path in EXAMPLES]
    assert any(spec.model.hugging_face is not None and spec.model.cache is not None
               and spec.model.cache.create is not None and spec.model.cache.compile_cache for spec in specs)
    assert any(spec.lora is not None and spec.lora.adapters for spec in specs)
    assert any(spec.routing is not None and spec.routing.enabled and spec.routing.gateway is not None
               for spec in specs)


def test_schema_validation_catches_a_broken_example() -> None:
    # The jsonschema check above must be able to fail: an unknown enum value and a bad bound.
    resource = load(ROOT / "examples" / "qwen72b-910b-tp8.yaml")
    resource["spec"]["npu"]["chip"] = "910C"
    with pytest.raises(jsonschema.ValidationError, match="910C"):
        jsonschema.Draft4Validator(SCHEMA).validate(resource)
    resource = load(ROOT / "examples" / "qwen72b-910b-tp8.yaml")
    resource["spec"]["engine"]["gpuMemoryUtilization"] = 0
    with pytest.raises(jsonschema.ValidationError, match="minimum"):
        jsonschema.Draft4Validator(SCHEMA).validate(resource)


def test_cpu_tiny_example_is_what_the_demo_expects() -> None:
    spec = api.parse_spec(load(ROOT / "examples" / "cpu-tiny.yaml")["spec"])
    assert spec.platform is api.Platform.CPU and spec.model.host_path.path == "/models/tiny"
    assert (spec.engine.max_model_len, spec.engine.kv_cache_space_gi_b, spec.engine.dtype) == (
        512,
        1,
        api.Dtype.FLOAT32,
    )
    assert spec.graph.policy is api.GraphPolicy.AUTO
    assert (spec.warmup.prompt_lengths, spec.warmup.concurrency, spec.warmup.max_tokens) == (
        [8, 64],
        [1, 4],
        4,
    )
