"""The generated CRD: structural (what a real API server demands), valid, described, fresh, and
its CEL rules agree with the model's validators (evaluated with celpy).

Covers ascend_operator.crdgen: the pydantic -> structural conversion on small schemas, the full
CRD (kubernetes_validate, structural rules over every node, descriptions, subresources, printer
columns), the committed files under crds/ and charts/, and each CEL rule against the Python rule
it mirrors.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from ascend_operator import api, crdgen

ROOT = Path(__file__).resolve().parents[2]
CRD = crdgen.generate_crd()
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
VALUE_VALIDATIONS = ("anyOf", "allOf", "oneOf", "not")


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def structural_problems(schema: dict[str, Any]) -> list[str]:
    """Violations of the Kubernetes structural-schema rules (apiextensions docs, facts file)."""
    problems = []
    for path, node in walk(schema):
        where = path or "<root>"
        if "$ref" in node or "$defs" in node or "definitions" in node:
            problems.append(f"{where}: $ref/$defs")
        if node.get("type") == "null" or (isinstance(node.get("type"), list)):
            problems.append(f"{where}: null or list type")
        if (
            "type" not in node
            and not node.get("x-kubernetes-int-or-string")
            and not (node.get("x-kubernetes-preserve-unknown-fields") and path == "")
        ):
            problems.append(f"{where}: no type")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: additionalProperties beside properties")
        if node.get("additionalProperties") is True or node.get("additionalProperties") is False:
            problems.append(f"{where}: boolean additionalProperties")
        for keyword in ("patternProperties", "propertyNames", "const", "prefixItems", "title"):
            if keyword in node:
                problems.append(f"{where}: {keyword}")
        # Server-side defaults are allowed on plain properties; this CRD has exactly one.
        if "default" in node and where != ".spec.replicas":
            problems.append(f"{where}: default")
        for keyword in ("exclusiveMinimum", "exclusiveMaximum"):
            if keyword in node and not isinstance(node[keyword], bool):
                problems.append(f"{where}: numeric {keyword} (OpenAPI v3.0 wants a boolean)")
        for keyword in VALUE_VALIDATIONS:
            for branch in node.get(keyword, []) if keyword != "not" else [node.get("not", {})]:
                forbidden = {"description", "default", "additionalProperties", "nullable"} & set(branch)
                if forbidden:
                    problems.append(f"{where}: {sorted(forbidden)} inside {keyword}")
                if "type" in branch and not node.get("x-kubernetes-int-or-string"):
                    problems.append(f"{where}: type inside {keyword}")
        if node.get("x-kubernetes-int-or-string") and node.get("anyOf") != [
            {"type": "integer"},
            {"type": "string"},
        ]:
            problems.append(f"{where}: int-or-string without anyOf integer/string")
        if (
            node.get("type") == "object"
            and node.get("x-kubernetes-preserve-unknown-fields")
            and "properties" in node
        ):
            problems.append(f"{where}: preserve-unknown-fields beside properties")
    return problems


def test_structural_checker_catches_pydantic_output() -> None:
    # The checker must fail on what pydantic emits, or it proves nothing about the converted CRD.
    raw = api.AscendLLMDeploymentSpec.model_json_schema(by_alias=True)
    raw.pop("$defs")
    assert structural_problems({"type": "object", "properties": {"spec": raw}})
    raw_status = api.AscendLLMDeploymentStatus.model_json_schema(by_alias=True)
    assert any("null" in p or "$ref" in p for p in structural_problems(raw_status))


def test_schema_is_structural_on_every_node() -> None:
    assert structural_problems(SCHEMA) == []


def test_crd_validates_against_kubernetes_openapi() -> None:
    for version in ("1.30", "1.33", "1.36"):
        kubernetes_validate.validate(CRD, version, strict=True)


def test_every_property_has_a_description() -> None:
    # The root metadata may carry nothing but its type: the API server refuses a description there.
    missing = [
        path
        for path, node in walk(SCHEMA)
        if path and path != ".metadata" and not path.endswith(("[]", "{}")) and not node.get("description")
    ]
    assert missing == []


def test_root_metadata_is_only_typed() -> None:
    assert SCHEMA["properties"]["metadata"] == {"type": "object"}


def test_identity_subresources_and_columns() -> None:
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == "ascendllmdeployments.llm.ascend.dev"
    assert spec["group"] == "llm.ascend.dev" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "AscendLLMDeployment"
    assert spec["names"]["shortNames"] == ["ald", "ascendllm"]
    assert VERSION["name"] == "v1alpha1" and VERSION["served"] and VERSION["storage"]
    assert VERSION["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    # The scale paths must point at declared fields of the right type.
    assert SCHEMA["properties"]["spec"]["properties"]["replicas"]["type"] == "integer"
    assert SCHEMA["properties"]["status"]["properties"]["replicas"]["type"] == "integer"
    assert SCHEMA["properties"]["status"]["properties"]["selector"]["type"] == "string"
    columns = {c["name"]: c["jsonPath"] for c in VERSION["additionalPrinterColumns"]}
    assert set(columns) >= {"Model", "Chip", "Ready", "Mode", "Phase", "Age"}
    for name, json_path in columns.items():
        node: dict[str, Any] = SCHEMA
        for part in json_path.strip(".").split("."):
            node = node["properties"][part] if part in node.get("properties", {}) else {"metadata": True}
        assert node, f"printer column {name} points at an undeclared field {json_path}"


def test_status_declares_every_field_the_model_has() -> None:
    # A status field missing from the schema is pruned by the server (kubernetes-facts.md).
    status = SCHEMA["properties"]["status"]["properties"]
    for field in api.AscendLLMDeploymentStatus.model_fields.values():
        assert field.alias in status
    assert status["kopf"]["x-kubernetes-preserve-unknown-fields"] is True
    assert status["conditions"]["x-kubernetes-list-type"] == "map"
    assert set(status["conditions"]["items"]["required"]) >= {"type", "status", "lastTransitionTime"}


def test_enums_and_bounds_are_in_the_schema() -> None:
    spec = SCHEMA["properties"]["spec"]["properties"]
    assert spec["npu"]["properties"]["chip"]["enum"] == ["910B", "A3", "310P"]
    assert spec["platform"]["enum"] == ["Ascend", "CPU"]
    assert spec["graph"]["properties"]["policy"]["enum"] == [
        "auto",
        "full_and_piecewise",
        "piecewise",
        "full_decode_only",
        "eager",
    ]
    gmu = spec["engine"]["properties"]["gpuMemoryUtilization"]
    assert (gmu["minimum"], gmu["exclusiveMinimum"], gmu["maximum"]) == (0.0, True, 1.0)
    assert spec["service"]["properties"]["type"]["enum"] == ["ClusterIP", "NodePort", "LoadBalancer"]
    assert spec["rollout"]["properties"]["strategy"]["enum"] == ["Recreate", "RollingUpdate"]
    cpu = spec["resources"]["properties"]["requests"]["properties"]["cpu"]
    assert cpu["x-kubernetes-int-or-string"] is True and cpu["pattern"] == api.QUANTITY_PATTERN
    assert spec["ascend"]["properties"]["additionalConfig"]["x-kubernetes-preserve-unknown-fields"] is True


def test_lists_and_maps_that_rules_iterate_are_bounded() -> None:
    for path, node in walk(SCHEMA):
        rules = " ".join(v["rule"] for v in node.get("x-kubernetes-validations", []))
        if ".all(" in rules and "self.all(" in rules:
            assert "maxProperties" in node or "maxItems" in node, path
        if node.get("type") == "array" and path.startswith(".spec"):
            assert "maxItems" in node, f"{path}: unbounded list"


def test_committed_crd_files_are_fresh() -> None:
    assert crdgen.check_crds(ROOT) == [], "run `ascend-llm crd` to regenerate crds/"
    committed = yaml.safe_load((ROOT / crdgen.CRD_PATHS[0]).read_text())
    assert committed == CRD


def test_api_reference_lists_every_spec_field_with_its_description() -> None:
    text = crdgen.render_api_reference()
    for path, node in walk(SCHEMA["properties"]["spec"]):
        if node.get("description") and path and not path.endswith("[]") and "{" not in path:
            assert f"| `spec{path}` |" in text, path
    assert "### Cross-field rules on `spec`" in text


def test_check_crds_reports_missing_and_edited_files(tmp_path: Path) -> None:
    assert crdgen.check_crds(tmp_path) == [str(p) for p in crdgen.CRD_PATHS] + [str(crdgen.API_DOC_PATH)]
    written = crdgen.write_crds(tmp_path)
    assert crdgen.check_crds(tmp_path) == []
    written[1].write_text(written[1].read_text() + "# edited\n")
    assert crdgen.check_crds(tmp_path) == [str(crdgen.CRD_PATHS[1])]


# --- conversion on small schemas ----------------------------------------------------------


def test_conversion_inlines_refs_and_drops_null_branches() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}], "description": "field"}},
        "$defs": {
            "A": {
                "type": "object",
                "description": "class",
                "title": "A",
                "properties": {"x": {"type": "integer", "exclusiveMinimum": 0, "description": "x"}},
                "additionalProperties": False,
            }
        },
    }
    assert crdgen.structural(schema, schema["$defs"]) == {
        "type": "object",
        "properties": {
            "a": {
                "type": "object",
                "description": "field",
                "properties": {
                    "x": {"type": "integer", "description": "x", "minimum": 0, "exclusiveMinimum": True}
                },
            }
        },
    }


def test_conversion_turns_typed_map_keys_into_a_cel_rule() -> None:
    node = {
        "type": "object",
        "description": "m",
        "patternProperties": {"^[a-z]+$": {"type": "string"}},
        "propertyNames": {"maxLength": 8},
    }
    assert crdgen.structural(node, {}) == {
        "type": "object",
        "description": "m",
        "additionalProperties": {"type": "string"},
        "x-kubernetes-validations": [
            {
                "rule": "self.all(k, k.matches('^[a-z]+$') && size(k) <= 8)",
                "message": "keys must match ^[a-z]+$ and be at most 8 characters",
            }
        ],
    }


@pytest.mark.parametrize(
    "node, message",
    [
        ({"type": "object", "additionalProperties": True}, "preserve-unknown-fields"),
        ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, "x-kubernetes-int-or-string"),
        ({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, "unsupported union"),
        ({"type": "string", "contentEncoding": "base64"}, "contentEncoding"),
        ({"description": "typeless"}, "without a type"),
    ],
)
def test_conversion_refuses_what_it_cannot_express(node: dict[str, Any], message: str) -> None:
    with pytest.raises(crdgen.SchemaConversionError, match=message):
        crdgen.structural(node, {})


# --- CEL rules: compile, and agree with the Python rules -------------------------------------


def _rules_at(path: str) -> list[dict[str, str]]:
    """The CEL rules at ``path`` (``[]`` steps into a list's items, ``{}`` into a map's values)."""
    node: dict[str, Any] = SCHEMA["properties"]["spec"]
    for part in filter(None, path.split(".")):
        name, step = part[:-2] if part.endswith(("[]", "{}")) else part, part[-2:]
        node = node["properties"][name]
        if step == "[]":
            node = node["items"]
        elif step == "{}":
            node = node["additionalProperties"]
    return node.get("x-kubernetes-validations", [])


#: Every schema node that carries CEL rules, by the model class the rules are declared on.
RULE_PATHS = {
    api.AscendLLMDeploymentSpec: "",
    api.ModelSpec: ".model",
    api.ModelCacheSpec: ".model.cache",
    api.PvcSource: ".model.pvc",
    api.GraphSpec: ".graph",
    api.AutoscalingSpec: (".autoscaling", ".disaggregation.prefill.autoscaling", ".disaggregation.decode.autoscaling"),
    api.ScaleToZeroSpec: (".autoscaling.scaleToZero", ".disaggregation.prefill.autoscaling.scaleToZero",
                          ".disaggregation.decode.autoscaling.scaleToZero"),
    api.Toleration: ".npu.tolerations[]",
    api.HostPathSource: ".model.hostPath",
    api.EngineSpec: (".engine", ".disaggregation.prefill.engine", ".disaggregation.decode.engine"),
    api.EnvValueSource: (".engine.envValueFrom{}", ".disaggregation.prefill.engine.envValueFrom{}",
                         ".disaggregation.decode.engine.envValueFrom{}"),
    api.LoraSpec: ".lora",
    api.AdapterSource: ".lora.adapters[].source",
    api.AdapterPvcSource: ".lora.adapters[].source.pvc",
    api.AdapterHostPathSource: ".lora.adapters[].source.hostPath",
    api.AdapterHubSource: (".lora.adapters[].source.huggingFace", ".lora.adapters[].source.modelScope"),
}


def _values_at(spec: dict[str, Any], path: str) -> list[Any]:
    """The nodes at ``path``; ``name[]`` fans out over a list's items, ``name{}`` over a map's values."""
    values: list[Any] = [spec]
    for part in filter(None, path.split(".")):
        key, step = part[:-2] if part.endswith(("[]", "{}")) else part, part[-2:]
        values = [v.get(key) for v in values if isinstance(v, dict) and v.get(key) is not None]
        if step == "[]":
            values = [item for v in values if isinstance(v, list) for item in v]
        elif step == "{}":
            values = [item for v in values if isinstance(v, dict) for item in v.values()]
    return values


def failing_cel_messages(spec: dict[str, Any]) -> set[str]:
    """Messages of the CEL rules (on every node in RULE_PATHS) that reject ``spec``."""
    env = celpy.Environment()
    failed = set()
    for paths in RULE_PATHS.values():
        for path, value in [(path, value) for path in ((paths,) if isinstance(paths, str) else paths)
                            for value in _values_at(spec, path)]:
            for rule in _rules_at(path):
                if "oldSelf" in rule["rule"]:
                    continue  # transition rules: tests of their own below
                program = env.program(env.compile(rule["rule"]))
                if not program.evaluate({"self": celpy.json_to_cel(value)}):
                    failed.add(rule["message"])
    return failed


def python_rule_messages(spec: dict[str, Any]) -> set[str]:
    try:
        api.parse_spec(spec)
    except api.SpecError as error:
        return {message for _, message in error.problems}
    return set()


HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B"}}
P4_ROLE = {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}}
RULE_CASES = {
    "minimal": {"model": HF},
    "tp8 on 8": {"model": HF, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8}},
    "tp4 pp2 on 8": {"model": HF, "npu": {"perReplica": 8}, "parallelism": {"tensor": 4, "pipeline": 2}},
    "tp8 on 4": {"model": HF, "npu": {"perReplica": 4}, "parallelism": {"tensor": 8}},
    "tp2 default npus": {"model": HF, "parallelism": {"tensor": 2}},
    "dp2 on 1": {"model": HF, "parallelism": {"data": 2}},
    "a3 default": {"model": HF, "npu": {"chip": "A3"}},
    "a3 two": {"model": HF, "npu": {"chip": "A3", "perReplica": 2}, "parallelism": {"tensor": 2}},
    "310p bf16": {"model": HF, "npu": {"chip": "310P"}, "engine": {"dtype": "bfloat16"}},
    "310p fp16": {"model": HF, "npu": {"chip": "310P"}, "engine": {"dtype": "float16"}},
    "910b bf16": {"model": HF, "engine": {"dtype": "bfloat16"}},
    "no source": {"model": {"servedName": "x"}},
    "two sources": {"model": {**HF, "hostPath": {"path": "/m"}}},
    "token without hub": {"model": {"hostPath": {"path": "/m"}, "tokenSecretRef": {"name": "s", "key": "k"}}},
    "token with hub": {"model": {**HF, "tokenSecretRef": {"name": "s", "key": "k"}}},
    "cache claim": {"model": {**HF, "cache": {"claimName": "c"}}},
    "revision with dots": {"model": {**HF, "revision": "v1..2"}},
    "cache two places": {"model": {**HF, "cache": {"claimName": "c", "hostPath": "/data/cache"}}},
    "cache nowhere": {"model": {**HF, "cache": {"compileCache": True}}},
    "cpu plain": {"model": HF, "platform": "CPU", "engine": {"kvCacheSpaceGiB": 2}},
    "cpu with chip": {"model": HF, "platform": "CPU", "npu": {"chip": "910B"}},
    "cpu with selector": {"model": HF, "platform": "CPU", "npu": {"nodeSelector": {"a": "b"}}},
    # Tolerations as the API server checks them.
    "toleration ok": {"model": HF, "npu": {"tolerations": [
        {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "a", "value": "b", "effect": "NoExecute", "tolerationSeconds": 30}]}},
    "toleration exists with value": {"model": HF, "npu": {"tolerations": [{"key": "a", "operator": "Exists",
                                                                           "value": "b"}]}},
    "toleration without key": {"model": HF, "npu": {"tolerations": [{"value": "b"}]}},
    "toleration seconds without noexecute": {"model": HF, "npu": {"tolerations": [
        {"key": "a", "tolerationSeconds": 5}]}},
    "cpu with ascend": {"model": HF, "platform": "CPU", "ascend": {"enableStaticKernel": True}},
    "cpu with tp": {"model": HF, "platform": "CPU", "parallelism": {"tensor": 2}},
    "kv cache on npu": {"model": HF, "engine": {"kvCacheSpaceGiB": 2}},
    "fastsafetensors loader": {"model": HF, "engine": {"weightsLoader": "fastsafetensors"}},
    "prefetch loader": {"model": {"pvc": {"claimName": "weights"}}, "engine": {"weightsLoader": "prefetch"}},
    "expert on one": {"model": HF, "parallelism": {"expert": True}},
    "expert on dp2": {"model": HF, "npu": {"perReplica": 2}, "parallelism": {"data": 2, "expert": True}},
    "capture above max": {"model": HF, "graph": {"captureSizes": [1, 64], "maxCaptureSize": 32}},
    "capture within max": {"model": HF, "graph": {"captureSizes": [1, 32], "maxCaptureSize": 32}},
    "eager with sizes": {"model": HF, "graph": {"policy": "eager", "captureSizes": [1]}},
    # Multi-node replicas (spec.nodesPerReplica, spec.distributed).
    "2 nodes dp4 tp4": {
        "model": HF,
        "nodesPerReplica": 2,
        "npu": {"perReplica": 8},
        "parallelism": {"tensor": 4, "data": 4, "expert": True},
    },
    "2 nodes counted as one": {"model": HF, "nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8}},
    "2 nodes mp dp1": {"model": HF, "nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 16}},
    "2 nodes mp dp3 of 3 nodes ok": {
        "model": HF,
        "nodesPerReplica": 3,
        "npu": {"perReplica": 2},
        "parallelism": {"tensor": 2, "data": 3},
    },
    "2 nodes ray tp16": {
        "model": HF,
        "nodesPerReplica": 2,
        "distributed": {"backend": "ray"},
        "npu": {"perReplica": 8},
        "parallelism": {"tensor": 8, "pipeline": 2},
    },
    "2 nodes ray with dp": {
        "model": HF,
        "nodesPerReplica": 2,
        "distributed": {"backend": "ray"},
        "npu": {"perReplica": 8},
        "parallelism": {"tensor": 8, "data": 2},
    },
    "cpu on 2 nodes": {"model": HF, "platform": "CPU", "nodesPerReplica": 2},
    # Autoscaling.
    "autoscaling plain": {"model": HF, "autoscaling": {"maxReplicas": 4}},
    "autoscaling min above max": {"model": HF, "autoscaling": {"minReplicas": 5, "maxReplicas": 4}},
    "autoscaling min 0 without zero": {"model": HF, "autoscaling": {"minReplicas": 0, "maxReplicas": 4}},
    "autoscaling to zero": {
        "model": HF,
        "autoscaling": {
            "minReplicas": 0,
            "maxReplicas": 4,
            "scaleToZero": {"enabled": True, "activationQuery": "sum(rate(x[1m]))"},
        },
    },
    "autoscaling to zero on hpa": {
        "model": HF,
        "autoscaling": {
            "maxReplicas": 4,
            "provider": "hpa",
            "scaleToZero": {"enabled": True, "activationQuery": "sum(rate(x[1m]))"},
        },
    },
    "autoscaling to zero without activation": {
        "model": HF,
        "autoscaling": {"maxReplicas": 4, "scaleToZero": {"enabled": True}},
    },
    "autoscaling custom": {
        "model": HF,
        "autoscaling": {"maxReplicas": 4, "signal": "custom", "query": "sum(x)", "target": 10, "provider": "keda"},
    },
    "autoscaling custom bare": {"model": HF, "autoscaling": {"maxReplicas": 4, "signal": "custom"}},
    "autoscaling custom on hpa": {
        "model": HF,
        "autoscaling": {"maxReplicas": 4, "signal": "custom", "query": "sum(x)", "target": 10, "provider": "hpa"},
    },
    "autoscaling query without custom": {"model": HF, "autoscaling": {"maxReplicas": 4, "query": "sum(x)"}},
    "autoscaling kv fraction": {"model": HF, "autoscaling": {"maxReplicas": 4, "signal": "kvCacheUsage", "target": 0.75}},
    "autoscaling kv above one": {"model": HF, "autoscaling": {"maxReplicas": 4, "signal": "kvCacheUsage", "target": 1.5}},
    "autoscaling waiting above one": {"model": HF, "autoscaling": {"maxReplicas": 4, "target": 1.5}},
    # Multi-tenant safety: hostPath shape, reserved flags and env, env from Secrets.
    "hostPath plain": {"model": {"hostPath": {"path": "/data/models/qwen"}}},
    "hostPath dotdot": {"model": {"hostPath": {"path": "/data/models/../../etc"}}},
    "hostPath dot": {"model": {"hostPath": {"path": "/data/./models"}}},
    "hostPath dotdot at end": {"model": {"hostPath": {"path": "/data/.."}}},
    "hostPath dotted name": {"model": {"hostPath": {"path": "/data/..models/.cache"}}},
    "env from secret": {"model": HF, "engine": {"envValueFrom": {"A": {"secretKeyRef": {"name": "s", "key": "k"}}}}},
    "env from both": {"model": HF, "engine": {"envValueFrom": {"A": {
        "secretKeyRef": {"name": "s", "key": "k"}, "configMapKeyRef": {"name": "c", "key": "k"}}}}},
    "env from nothing": {"model": HF, "engine": {"envValueFrom": {"A": {}}}},
    "env twice": {"model": HF, "engine": {"env": {"A": "1"}, "envValueFrom": {
        "A": {"configMapKeyRef": {"name": "c", "key": "k"}}}}},
    "harmless flags": {"model": HF, "engine": {"extraArgs": ["--seed", "1", "--portal", "--hostname=x",
                                                            "--model-impl", "vllm", "--config-format", "x"]}},
    **{
        f"flag {token}": {"model": HF, "engine": {"extraArgs": ["--seed", "1", token, "2"]}}
        for token in ("--port", "--port=9", "--host", "--model", "--served-model-name", "-tp", "--tensor_parallel_size=2",
                      "--pipeline-parallel-size", "-pp", "-dp", "--data-parallel-size", "-dpl", "-dpr", "-dpn", "-dpa",
                      "-dpp", "--headless", "--distributed-executor-backend", "-asc", "--enforce-eager",
                      "--no-enforce-eager", "-cc", "--compilation-config.cudagraph_mode", "-O3", "--additional-config",
                      "--shutdown-timeout", "--config", "--allowed-local-media-path=/", "--api-key")
    },
    **{
        f"env {name}": {"model": HF, "engine": {"env": {name: "x"}}}
        for name in ("ASCEND_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_LLM_CONFIG", "HF_TOKEN",
                     "MODELSCOPE_API_TOKEN", "HF_HOME", "MODELSCOPE_CACHE", "VLLM_USE_MODELSCOPE", "VLLM_API_KEY",
                     "VLLM_CPU_KVCACHE_SPACE", "VLLM_HOST_IP", "VLLM_PORT", "POD_IP", "LWS_LEADER_ADDRESS",
                     "HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
    },
    "env from secret reserved": {"model": HF, "engine": {"envValueFrom": {
        "VLLM_API_KEY": {"secretKeyRef": {"name": "s", "key": "k"}}}}},
    "harmless env": {"model": HF, "engine": {"env": {"HCCL_BUFFSIZE": "512", "ASCEND_LLMX": "1", "MY_POD_IP": "x"}}},
    # LoRA: each case breaks one rule (a broken adapter stops pydantic before the spec's rules).
    "lora minimal": {"model": HF, "lora": {}},
    "lora adapters": {"model": HF, "lora": {"maxRank": 64, "maxLoras": 2, "maxCpuLoras": 4, "adapters": [
        {"name": "sql", "source": {"pvc": {"claimName": "ad", "subPath": "sql/v1"}}},
        {"name": "chat", "source": {"hostPath": {"path": "/data/adapters", "subPath": "chat"}}}]}},
    "lora rank 12": {"model": HF, "lora": {"maxRank": 12}},
    "lora cpu below device": {"model": HF, "lora": {"maxLoras": 4, "maxCpuLoras": 2}},
    "lora cpu default device": {"model": HF, "lora": {"maxCpuLoras": 1}},
    "lora adapters disabled": {"model": HF, "lora": {"enabled": False, "adapters": [
        {"name": "a", "source": {"pvc": {"claimName": "ad"}}}]}},
    "lora disabled no adapters": {"model": HF, "lora": {"enabled": False, "adapters": []}},
    "lora duplicate names": {"model": HF, "lora": {"adapters": [
        {"name": "a", "source": {"pvc": {"claimName": "ad"}}},
        {"name": "a", "source": {"pvc": {"claimName": "ad", "subPath": "b"}}}]}},
    "lora named like hub id": {"model": HF, "lora": {"adapters": [
        {"name": "Qwen/Qwen2.5-0.5B", "source": {"pvc": {"claimName": "ad"}}}]}},
    "lora named like served name": {"model": {**HF, "servedName": "qwen"}, "lora": {"adapters": [
        {"name": "qwen", "source": {"pvc": {"claimName": "ad"}}}]}},
    "lora named like hub id with served name": {"model": {**HF, "servedName": "qwen"}, "lora": {"adapters": [
        {"name": "Qwen/Qwen2.5-0.5B", "source": {"pvc": {"claimName": "ad"}}}]}},
    "lora two sources": {"model": HF, "lora": {"adapters": [{"name": "a", "source": {
        "pvc": {"claimName": "ad"}, "hostPath": {"path": "/data/adapters"}}}]}},
    "lora no source": {"model": HF, "lora": {"adapters": [{"name": "a", "source": {}}]}},
    "lora pvc subPath dotdot": {"model": HF, "lora": {"adapters": [
        {"name": "a", "source": {"pvc": {"claimName": "ad", "subPath": "x/../../y"}}}]}},
    "lora hostPath subPath dot": {"model": HF, "lora": {"adapters": [
        {"name": "a", "source": {"hostPath": {"path": "/data/adapters", "subPath": "./a"}}}]}},
    "lora hostPath dotdot": {"model": HF, "lora": {"adapters": [
        {"name": "a", "source": {"hostPath": {"path": "/data/../etc"}}}]}},
    "lora dotted names": {"model": HF, "lora": {"adapters": [
        {"name": "a", "source": {"hostPath": {"path": "/data/..a", "subPath": "..b/.c"}}}]}},
    "lora hub adapters on a claim cache": {"model": {**HF, "cache": {"claimName": "c"}}, "lora": {"adapters": [
        {"name": "a", "source": {"huggingFace": {"id": "org/a", "revision": "refs/pr/1",
                                                 "tokenSecretRef": {"name": "s", "key": "k"}}}},
        {"name": "b", "source": {"modelScope": {"id": "org/b"}}}]}},
    "lora hub adapter without a cache": {"model": HF, "lora": {"adapters": [
        {"name": "a", "source": {"huggingFace": {"id": "org/a"}}}]}},
    "lora hub adapter on a hostPath cache": {"model": {**HF, "cache": {"hostPath": "/data/cache"}}, "lora": {
        "adapters": [{"name": "a", "source": {"modelScope": {"id": "org/a"}}}]}},
    "lora hub adapter revision dotdot": {"model": {**HF, "cache": {"claimName": "c"}}, "lora": {"adapters": [
        {"name": "a", "source": {"modelScope": {"id": "org/a", "revision": "v1..2"}}}]}},
    "lora hub and pvc": {"model": {**HF, "cache": {"claimName": "c"}}, "lora": {"adapters": [
        {"name": "a", "source": {"pvc": {"claimName": "ad"}, "huggingFace": {"id": "org/a"}}}]}},
    "pvc subPath with ..": {"model": {"pvc": {"claimName": "w", "subPath": "models/../../other"}}},
    "cache hostPath with ..": {"model": {**HF, "cache": {"hostPath": "/data/llm-cache/../../etc"}}},
    "cache hostPath with .": {"model": {**HF, "cache": {"hostPath": "/data/llm-cache/./x"}}},
    # Warmup and graph capture against the engine's limits, set or defaulted (docs/validation.md).
    "warmup concurrency at max": {"model": HF, "engine": {"maxNumSeqs": 16}, "warmup": {"concurrency": [1, 16]}},
    "warmup concurrency above max": {"model": HF, "engine": {"maxNumSeqs": 8}, "warmup": {"concurrency": [1, 16]}},
    "warmup concurrency above npu default": {"model": HF, "warmup": {"concurrency": [257]}},
    "warmup concurrency at npu default": {"model": HF, "warmup": {"concurrency": [256]}},
    "warmup concurrency above cpu default": {"model": HF, "platform": "CPU", "warmup": {"concurrency": [129]}},
    "warmup concurrency above max, off": {"model": HF, "engine": {"maxNumSeqs": 8},
                                          "warmup": {"enabled": False, "concurrency": [16]}},
    "warmup concurrency above max set in args": {"model": HF, "engine": {
        "maxNumSeqs": 8, "extraArgs": ["--max_num_seqs=32"]}, "warmup": {"concurrency": [16]}},
    "warmup default concurrency above max": {"model": HF, "engine": {"maxNumSeqs": 4}},
    "warmup lengths fit": {"model": HF, "engine": {"maxModelLen": 512}, "warmup": {
        "promptLengths": [16, 480], "maxTokens": 24}},
    "warmup length too long": {"model": HF, "engine": {"maxModelLen": 512}, "warmup": {"promptLengths": [16, 512]}},
    "warmup max tokens push past": {"model": HF, "engine": {"maxModelLen": 512}, "warmup": {
        "promptLengths": [480], "maxTokens": 25}},
    "warmup defaults on a short model": {"model": HF, "engine": {"maxModelLen": 16}},
    "warmup defaults on a long enough model": {"model": HF, "engine": {"maxModelLen": 17}},
    "warmup max tokens on a short model": {"model": HF, "engine": {"maxModelLen": 256}, "warmup": {"maxTokens": 248}},
    "warmup length with model length in args": {"model": HF, "engine": {
        "maxModelLen": 512, "extraArgs": ["--max-model-len", "8192"]}, "warmup": {"promptLengths": [4096]}},
    "decode graphs within max": {"model": HF, "engine": {"maxNumSeqs": 16}, "graph": {
        "policy": "full_decode_only", "captureSizes": [1, 8, 16]}},
    "decode graphs above max": {"model": HF, "engine": {"maxNumSeqs": 16}, "graph": {
        "policy": "full_decode_only", "captureSizes": [1, 32]}},
    "decode graph max above default": {"model": HF, "graph": {"policy": "full_decode_only", "maxCaptureSize": 512}},
    "piecewise graphs above max": {"model": HF, "engine": {"maxNumSeqs": 16}, "graph": {
        "policy": "piecewise", "captureSizes": [1, 512]}},
    "decode graphs with speculative decoding": {"model": HF, "engine": {
        "maxNumSeqs": 16, "extraArgs": ["--speculative-config", "{}"]}, "graph": {
        "policy": "full_decode_only", "captureSizes": [64]}},
    "running target above max": {"model": HF, "engine": {"maxNumSeqs": 16}, "autoscaling": {
        "maxReplicas": 4, "signal": "runningRequestsPerReplica", "target": 20}},
    "running target within data parallel engines": {"model": HF, "engine": {"maxNumSeqs": 16}, "npu": {
        "perReplica": 2}, "parallelism": {"data": 2}, "autoscaling": {
        "maxReplicas": 4, "signal": "runningRequestsPerReplica", "target": 24}},
    "running target above cpu default": {"model": HF, "platform": "CPU", "autoscaling": {
        "maxReplicas": 4, "signal": "runningRequestsPerReplica", "target": 200}},
    "waiting target above max": {"model": HF, "engine": {"maxNumSeqs": 16}, "autoscaling": {
        "maxReplicas": 4, "target": 20}},
    # Prefill/decode disaggregation and KV offload (docs/kv-transfer.md).
    "pd tp4 to tp2": {"model": HF, "disaggregation": {
        "prefill": {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}},
        "decode": {"replicas": 2, "npu": {"perReplica": 2}, "parallelism": {"tensor": 2}}}},
    "pd decode tp above prefill": {"model": HF, "disaggregation": {
        "prefill": {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}},
        "decode": {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}}}},
    "pd decode tp above prefill on llmdatadist": {"model": HF, "disaggregation": {
        "connector": "LLMDataDistCMgrConnector", "rankTablePath": "/etc/ranktable/ranktable.json",
        "prefill": {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}},
        "decode": {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}}}},
    "pd llmdatadist table dotdot": {"model": HF, "disaggregation": {
        "connector": "LLMDataDistCMgrConnector", "rankTablePath": "/etc/ranktable/../../proc/1/environ",
        "prefill": {}, "decode": {}}},
    "pd llmdatadist without table": {"model": HF, "disaggregation": {
        "connector": "LLMDataDistCMgrConnector", "prefill": {}, "decode": {}}},
    "pd llmdatadist table in a configmap": {"model": HF, "disaggregation": {
        "connector": "LLMDataDistCMgrConnector", "rankTableConfigMap": {"name": "ranktable"},
        "prefill": {}, "decode": {}}},
    "pd cpu with a rank table configmap": {"model": HF, "platform": "CPU", "disaggregation": {
        "rankTableConfigMap": {"name": "ranktable"}, "prefill": {}, "decode": {}}},
    "pd decode pipeline": {"model": HF, "disaggregation": {
        "prefill": {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}},
        "decode": {"npu": {"perReplica": 2}, "parallelism": {"pipeline": 2}}}},
    "pd role npus mismatch": {"model": HF, "disaggregation": {
        "prefill": {"npu": {"perReplica": 8}, "parallelism": {"tensor": 4}}, "decode": {"parallelism": {"data": 2}}}},
    "pd role 2 nodes mp ok": {"model": HF, "disaggregation": {
        "prefill": {"nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8, "data": 2}},
        "decode": {"nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8, "data": 2}}}},
    "pd role 2 nodes mp": {"model": HF, "disaggregation": {
        "prefill": {"nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 16}},
        "decode": {"nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8, "data": 1}}}},
    "pd role 2 nodes ray": {"model": HF, "distributed": {"backend": "ray"}, "disaggregation": {
        "prefill": {"nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8, "data": 2}},
        "decode": {"nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8, "pipeline": 2}}}},
    "pd role 2 nodes ray decode": {"model": HF, "distributed": {"backend": "ray"}, "disaggregation": {
        "prefill": {"nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8, "pipeline": 2}},
        "decode": {"nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8, "data": 2}}}},
    "pd a3 defaults": {"model": HF, "npu": {"chip": "A3"}, "disaggregation": {"prefill": {}, "decode": {}}},
    "pd a3 one die": {"model": HF, "npu": {"chip": "A3"}, "disaggregation": {
        "prefill": {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}}, "decode": {}}},
    "pd a3 port in the random range": {"model": HF, "npu": {"chip": "A3"}, "disaggregation": {
        "kvPort": 30000, "prefill": {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}},
        "decode": {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}}}},
    "pd a3 port above the range": {"model": HF, "npu": {"chip": "A3"}, "disaggregation": {
        "kvPort": 36000, "prefill": {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}},
        "decode": {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}}}},
    "pd port below the range": {"model": HF, "disaggregation": {
        "kvPort": 19996, "prefill": {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}}, "decode": {}}},
    "pd port into the range": {"model": HF, "disaggregation": {
        "kvPort": 19998, "prefill": {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}}, "decode": {}}},
    "pd nixl on ascend": {"model": HF, "disaggregation": {"connector": "NixlConnector", "prefill": {}, "decode": {}}},
    "pd cpu nixl": {"model": HF, "platform": "CPU", "disaggregation": {"prefill": {}, "decode": {"replicas": 2}}},
    "pd cpu mooncake": {"model": HF, "platform": "CPU", "disaggregation": {
        "connector": "MooncakeConnectorV1", "prefill": {}, "decode": {}}},
    "pd cpu example without path": {"model": HF, "platform": "CPU", "disaggregation": {
        "connector": "ExampleConnector", "prefill": {}, "decode": {}}},
    "pd cpu example": {"model": HF, "platform": "CPU", "disaggregation": {
        "connector": "ExampleConnector", "sharedStoragePath": "/var/lib/kv", "prefill": {}, "decode": {}}},
    "pd cpu example dotdot": {"model": HF, "platform": "CPU", "disaggregation": {
        "connector": "ExampleConnector", "sharedStoragePath": "/var/lib/kv/../../etc", "prefill": {}, "decode": {}}},
    "pd cpu example dotted name": {"model": HF, "platform": "CPU", "disaggregation": {
        "connector": "ExampleConnector", "sharedStoragePath": "/var/lib/..kv", "prefill": {}, "decode": {}}},
    "pd cpu with tp": {"model": HF, "platform": "CPU", "disaggregation": {
        "prefill": {"parallelism": {"tensor": 2}}, "decode": {}}},
    "pd cpu with npu": {"model": HF, "platform": "CPU", "disaggregation": {
        "prefill": {}, "decode": {"npu": {"perReplica": 1}}}},
    "pd cpu with port": {"model": HF, "platform": "CPU", "disaggregation": {
        "kvPort": 40000, "prefill": {}, "decode": {}}},
    "pd cpu with transport": {"model": HF, "platform": "CPU", "disaggregation": {
        "transport": "roce", "prefill": {}, "decode": {}}},
    "cpu offload": {"model": HF, "platform": "CPU", "kvOffload": {"sizeGiB": 4}},
    "npu offload": {"model": HF, "kvOffload": {"sizeGiB": 64}},
    "offload with kv flag": {"model": HF, "kvOffload": {"sizeGiB": 64}, "engine": {
        "extraArgs": ["--kv-transfer-config", "{}"]}},
    "kv flag without pd": {"model": HF, "engine": {"extraArgs": ["--kv-transfer-config", "{}"]}},
    "pd with kv flag in a role": {"model": HF, "disaggregation": {"prefill": {}, "decode": {
        "engine": {"extraArgs": ["--kv_offloading_size=4"]}}}},
    "pd role engine env reserved": {"model": HF, "disaggregation": {"prefill": {
        "engine": {"env": {"HCCL_IF_IP": "1.2.3.4"}}}, "decode": {}}},
    "pd with top-level parallelism": {"model": HF, "parallelism": {"tensor": 1}, "disaggregation": {
        "prefill": {}, "decode": {}}},
    "pd with top-level npus": {"model": HF, "npu": {"perReplica": 1}, "disaggregation": {"prefill": {}, "decode": {}}},
    "pd routed": {"model": HF, "routing": {}, "disaggregation": {"prefill": P4_ROLE, "decode": {}}},
    "pd routed with a 2-node role": {"model": HF, "routing": {}, "disaggregation": {
        "prefill": {"nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 8, "data": 2}},
        "decode": {}}},
    "pd roles autoscaled": {"model": HF, "disaggregation": {
        "prefill": {"autoscaling": {"maxReplicas": 4}},
        "decode": {"autoscaling": {"maxReplicas": 8, "signal": "runningRequestsPerReplica", "target": 48}}}},
    "pd role scales to zero": {"model": HF, "disaggregation": {"prefill": {}, "decode": {"autoscaling": {
        "minReplicas": 0, "maxReplicas": 4, "scaleToZero": {"enabled": True, "activationQuery": "sum(x)"}}}}},
    "pd role autoscaling min above max": {"model": HF, "disaggregation": {"prefill": {
        "autoscaling": {"minReplicas": 5, "maxReplicas": 4}}, "decode": {}}},
    "pd with autoscaling": {"model": HF, "autoscaling": {"maxReplicas": 2}, "disaggregation": {
        "prefill": {}, "decode": {}}},
    "many broken": {
        "model": HF,
        "npu": {"chip": "A3"},
        "parallelism": {"tensor": 4},
        "engine": {"kvCacheSpaceGiB": 1},
    },
}


@pytest.mark.parametrize("case", sorted(RULE_CASES))
def test_cel_rules_and_model_rules_agree(case: str) -> None:
    spec = RULE_CASES[case]
    assert failing_cel_messages(spec) == python_rule_messages(spec)


def test_rule_cases_exercise_every_rule() -> None:
    # Each rule must both pass and fail somewhere above, or the agreement test proves little.
    all_messages = {rule.message for rules in api.SPEC_RULES.values() for rule in rules}
    failed = set().union(*(failing_cel_messages(spec) for spec in RULE_CASES.values()))
    assert failed == all_messages
    assert failing_cel_messages(RULE_CASES["minimal"]) == set()


def test_cel_rules_are_in_the_crd_where_the_model_declares_them() -> None:
    assert set(RULE_PATHS) == set(api.SPEC_RULES)
    for model, paths in RULE_PATHS.items():
        for path in (paths,) if isinstance(paths, str) else paths:
            assert [r["rule"] for r in _rules_at(path)] == [rule.cel for rule in api.SPEC_RULES[model]]


#: (old create, new create, the message of the rule that refuses the change or None)
CLAIM_CHANGES = [
    ({"size": "100Gi"}, {"size": "200Gi"}, None),
    ({"size": "100Gi", "storageClassName": "nfs"}, {"size": "100Gi", "storageClassName": "ceph"}, "storageClassName"),
    ({"size": "100Gi"}, {"size": "100Gi", "storageClassName": "ceph"}, "storageClassName"),
    ({"size": "100Gi", "storageClassName": "nfs"}, {"size": "100Gi"}, "storageClassName"),
    ({"size": "100Gi"}, {"size": "100Gi", "accessMode": "ReadWriteOnce"}, "accessMode"),
    ({"size": "100Gi", "accessMode": "ReadWriteMany"}, {"size": "100Gi"}, None),
    ({"size": "100Gi"}, {"size": "50Gi"}, "size"),
    ({"size": "1Ti"}, {"size": "1000Gi"}, "size"),
    ({"size": "100G"}, {"size": "100Gi"}, None),
    ({"size": "107374182400"}, {"size": "100Gi"}, None),
]


class _Quantity:
    """Kubernetes' CEL quantity type, as far as the claim rules use it (celpy has no such library)."""

    def __init__(self, text: Any) -> None:
        from kubernetes.utils.quantity import parse_quantity

        self.value = parse_quantity(str(text))


def _is_quantity(text: Any) -> Any:
    try:
        _Quantity(text)
    except ValueError:
        return celpy.celtypes.BoolType(False)
    return celpy.celtypes.BoolType(True)


#: Kubernetes' CEL quantity library (isQuantity, quantity, compareTo) for celpy.
K8S_QUANTITY = {"isQuantity": _is_quantity, "quantity": _Quantity,
                "compareTo": lambda a, b: celpy.celtypes.IntType((a.value > b.value) - (a.value < b.value))}


@pytest.mark.parametrize(("old", "new", "refused"), CLAIM_CHANGES)
def test_cache_claim_transition_rules_agree_in_cel_and_python_and_sit_on_the_claim(
        old: dict[str, Any], new: dict[str, Any], refused: str | None) -> None:
    rules = api.TRANSITION_RULES[api.CacheClaimSpec]
    crd_rules = [r for r in _rules_at(".model.cache.create") if "oldSelf" in r["rule"]]
    assert [r["rule"] for r in crd_rules] == [rule.cel for rule in rules]
    env = celpy.Environment()
    cel_failed = {rule.message for rule in rules
                  if not env.program(env.compile(rule.cel), functions=K8S_QUANTITY).evaluate(
                      {"self": celpy.json_to_cel(new), "oldSelf": celpy.json_to_cel(old)})}
    python_failed = {rule.message for rule in rules
                     if not rule.holds(api.CacheClaimSpec.model_validate(old), api.CacheClaimSpec.model_validate(new))}
    assert cel_failed == python_failed
    assert [m for m in cel_failed if refused is None or not m.startswith(refused)] == []
    assert bool(cel_failed) == (refused is not None)
#: Cases of the engine-limit rules and the field each refusal names (the Python side; the CEL side
#: agrees by test_cel_rules_and_model_rules_agree).
LIMIT_REFUSALS = {
    "warmup concurrency above max": "spec.warmup.concurrency",
    "warmup concurrency above npu default": "spec.warmup.concurrency",
    "warmup concurrency above cpu default": "spec.warmup.concurrency",
    "warmup length too long": "spec.warmup.promptLengths",
    "warmup max tokens push past": "spec.warmup.promptLengths",
    "warmup defaults on a short model": "spec.warmup.promptLengths",
    "warmup max tokens on a short model": "spec.warmup.promptLengths",
    "decode graphs above max": "spec.graph.captureSizes",
    "decode graph max above default": "spec.graph.captureSizes",
    "running target above max": "spec.autoscaling.target",
    "running target above cpu default": "spec.autoscaling.target",
}
LIMIT_ADMITTED = (
    "warmup concurrency at max", "warmup concurrency at npu default", "warmup concurrency above max, off",
    "warmup concurrency above max set in args", "warmup default concurrency above max", "warmup lengths fit",
    "warmup defaults on a long enough model", "warmup length with model length in args",
    "decode graphs within max", "piecewise graphs above max", "decode graphs with speculative decoding",
    "running target within data parallel engines", "waiting target above max",
)


@pytest.mark.parametrize("case", sorted(LIMIT_REFUSALS))
def test_engine_limit_rules_refuse_naming_both_fields(case: str) -> None:
    with pytest.raises(api.SpecError) as caught:
        api.parse_spec(RULE_CASES[case])
    [(path, message)] = caught.value.problems
    assert path == LIMIT_REFUSALS[case]
    assert "engine.maxNumSeqs" in message or "engine.maxModelLen" in message
    assert path.removeprefix("spec.") in message
    assert failing_cel_messages(RULE_CASES[case]) == {message}


@pytest.mark.parametrize("case", LIMIT_ADMITTED)
def test_engine_limit_rules_admit_what_fits(case: str) -> None:
    api.parse_spec(RULE_CASES[case])
    assert failing_cel_messages(RULE_CASES[case]) == set()
