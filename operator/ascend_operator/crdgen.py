"""Generate the ``AscendLLMDeployment`` CRD from the pydantic models in :mod:`ascend_operator.api`.

pydantic writes JSON Schema (draft 2020-12); a CRD needs a *structural* OpenAPI v3 schema. The
conversion (:func:`structural`):

- inlines ``$ref`` / ``$defs`` (the API server refuses ``$ref``), the referring node's own
  keywords (description) winning over the definition's;
- drops ``null`` branches of ``anyOf``: optional fields are simply not required, and the API
  server prunes explicit nulls of non-nullable fields, so ``has()`` in CEL means "set";
- turns ``int | str`` into ``x-kubernetes-int-or-string`` with ``anyOf`` of the two bare types
  and the branch constraints hoisted (each only applies to its own type);
- removes ``additionalProperties: false`` beside ``properties``; ``dict[str, Any]`` fields become
  ``x-kubernetes-preserve-unknown-fields`` (only where the model marks them so);
- turns ``patternProperties`` / ``propertyNames`` (keys of typed dicts) into ``additionalProperties``
  plus a CEL rule on the keys, which structural schemas cannot express otherwise;
- rewrites draft-2020 numeric ``exclusiveMinimum: x`` into OpenAPI's ``minimum: x,
  exclusiveMinimum: true``; drops ``title`` and ``default`` (defaults live in the model), except
  where a field asks the API server to default it (``SERVER_DEFAULT`` in its schema extra: a
  field other controllers read from the stored object, such as ``spec.replicas`` for the scale
  subresource);
- keeps ``x-kubernetes-validations`` (CEL) that :data:`ascend_operator.api.SPEC_RULES` attached.

Anything else it does not understand is an error, not silently passed through.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from ascend_operator import api

CRD_NAME = f"{api.PLURAL}.{api.GROUP}"
CRD_FILENAME = f"{api.GROUP}_{api.PLURAL}.yaml"
#: Where the CRD is written, relative to the repository root.
CRD_PATHS = (Path("crds") / CRD_FILENAME, Path("charts/ascend-llm-operator/crds") / CRD_FILENAME)

_DROP = {"title", "default", "examples"}
#: Schema-extra key of a field whose default the API server must apply (see the module docstring).
SERVER_DEFAULT = "x-ascend-server-default"
_PASS = {
    "type",
    "description",
    "properties",
    "required",
    "items",
    "enum",
    "format",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "maxProperties",
    "minProperties",
    "uniqueItems",
    "additionalProperties",
    "multipleOf",
    "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "anyOf",
    "exclusiveMinimum",
    "exclusiveMaximum",
}


class SchemaConversionError(ValueError):
    """pydantic produced a construct the structural conversion does not handle."""


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``node`` with a top-level ``$ref`` (or single-entry ``allOf``) replaced by its definition."""
    node = dict(node)
    if "allOf" in node and len(node["allOf"]) == 1 and "$ref" in node["allOf"][0]:
        node.update(node.pop("allOf")[0])
    ref = node.pop("$ref", None)
    if ref is None:
        return node
    target = ref.rsplit("/", 1)[-1]
    if target not in defs:
        raise SchemaConversionError(f"unknown $ref {ref}")
    merged = copy.deepcopy(defs[target])
    merged.update(node)  # the referring field's description wins over the class docstring
    return merged


def _key_rule(
    path: str, pattern: str | None, min_length: int | None, max_length: int | None
) -> dict[str, str]:
    checks = []
    if pattern is not None:
        quoted = pattern.replace("\\", "\\\\").replace("'", "\\'")
        checks.append(f"k.matches('{quoted}')")
    if min_length is not None:
        checks.append(f"size(k) >= {min_length}")
    if max_length is not None:
        checks.append(f"size(k) <= {max_length}")
    what = []
    if pattern is not None:
        what.append(f"match {pattern}")
    if max_length is not None:
        what.append(f"be at most {max_length} characters")
    if min_length is not None:
        what.append(f"be at least {min_length} character(s)")
    return {"rule": f"self.all(k, {' && '.join(checks)})", "message": f"keys must {' and '.join(what)}"}


def structural(node: dict[str, Any], defs: dict[str, Any], path: str = "") -> dict[str, Any]:
    """Convert one pydantic JSON Schema node (and its children) into a structural schema node."""
    node = _resolve(node, defs)
    if "anyOf" in node:
        branches = [_resolve(branch, defs) for branch in node.pop("anyOf")]
        branches = [b for b in branches if b.get("type") != "null"]
        if len(branches) == 1:
            inner = branches[0]
            outer = {k: v for k, v in node.items()}
            node = {**inner, **outer}
            if "anyOf" in inner:  # e.g. Optional[int | str]
                node["anyOf"] = inner["anyOf"]
                return structural(node, defs, path)
        elif sorted(b.get("type", "") for b in branches) == ["integer", "string"]:
            if not node.get("x-kubernetes-int-or-string"):
                raise SchemaConversionError(f"{path}: int | str without x-kubernetes-int-or-string")
            for branch in branches:
                for key, value in branch.items():
                    if key == "type":
                        continue
                    if key in node and node[key] != value:
                        raise SchemaConversionError(f"{path}: conflicting {key} in int-or-string branches")
                    node[key] = value
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        else:
            raise SchemaConversionError(f"{path}: unsupported union {branches}")

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key not in _PASS and key not in {"patternProperties", "propertyNames", "const", "$defs", SERVER_DEFAULT}:
            raise SchemaConversionError(f"{path or '<root>'}: unsupported JSON Schema keyword {key!r}")
        if key == "$defs":
            continue
        if key == SERVER_DEFAULT:
            out["default"] = value
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out["properties"] = {
                name: structural(child, defs, f"{path}.{name}") for name, child in value.items()
            }
        elif key == "items":
            out["items"] = structural(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out["additionalProperties"] = structural(value, defs, f"{path}{{}}")
            elif value is True and not node.get("x-kubernetes-preserve-unknown-fields"):
                raise SchemaConversionError(
                    f"{path}: free-form object without x-kubernetes-preserve-unknown-fields"
                )
            # False beside properties is implied by structural pruning.
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key in ("patternProperties", "propertyNames"):
            continue  # handled below
        else:
            out[key] = copy.deepcopy(value)

    pattern_props = node.get("patternProperties")
    names = node.get("propertyNames", {})
    if pattern_props or names:
        if "properties" in node or len(pattern_props or {}) > 1:
            raise SchemaConversionError(f"{path}: patternProperties beside properties are not supported")
        pattern = None
        if pattern_props:
            pattern, value_schema = next(iter(pattern_props.items()))
            out["additionalProperties"] = structural(value_schema, defs, f"{path}{{}}")
        rule = _key_rule(path, pattern, names.get("minLength"), names.get("maxLength"))
        out.setdefault("x-kubernetes-validations", []).insert(0, rule)

    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        raise SchemaConversionError(f"{path or '<root>'}: node without a type")
    if out.get("type") == "object" and "properties" in out and "additionalProperties" in out:
        raise SchemaConversionError(f"{path}: additionalProperties beside properties")
    # type and description first, for people reading the YAML.
    ordered = {key: out[key] for key in ("type", "description") if key in out}
    ordered.update((key, value) for key, value in out.items() if key not in ordered)
    return ordered


def model_schema(model: type[Any]) -> dict[str, Any]:
    """The structural schema of a pydantic model class."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})
    return structural(schema, defs)


def openapi_schema() -> dict[str, Any]:
    """The CRD version's ``openAPIV3Schema``."""
    return {
        "type": "object",
        "description": (
            "AscendLLMDeployment serves one LLM with vLLM + vllm-ascend on Huawei Ascend NPUs: "
            "the operator turns it into a Deployment (a LeaderWorkerSet for multi-node replicas), "
            "a Service, a ConfigMap with the engine config, a PodDisruptionBudget and, with "
            "autoscaling, an HPA or a KEDA ScaledObject, and reports the replicas' state in status."
        ),
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "APIVersion defines the versioned schema of this representation of an object.",
            },
            "kind": {"type": "string", "description": "Kind is the REST resource this object represents."},
            # The API server refuses anything but ``type`` here (metadata is implicitly specified).
            "metadata": {"type": "object"},
            "spec": model_schema(api.AscendLLMDeploymentSpec),
            "status": model_schema(api.AscendLLMDeploymentStatus),
        },
    }


PRINTER_COLUMNS = [
    {"name": "Model", "type": "string", "jsonPath": ".status.model", "description": "Served model name."},
    {"name": "Chip", "type": "string", "jsonPath": ".status.chip", "description": "Chip preset or CPU."},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": ".status.ready",
        "description": "Ready over desired replicas.",
    },
    {
        "name": "Mode",
        "type": "string",
        "jsonPath": ".status.graph.mode",
        "description": "Graph mode running.",
    },
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Aggregated phase."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Endpoint",
        "type": "string",
        "jsonPath": ".status.endpoint",
        "priority": 1,
        "description": "In-cluster URL of the OpenAI API.",
    },
]


def generate_crd() -> dict[str, Any]:
    """The CustomResourceDefinition object (apiextensions.k8s.io/v1)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {
                "app.kubernetes.io/name": "ascend-llm-operator",
                "app.kubernetes.io/part-of": "ascend-llm",
            },
        },
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": list(api.SHORT_NAMES),
                "categories": ["ascend-llm"],
            },
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


_HEADER = "# Generated by `ascend-llm crd` from ascend_operator/api.py; do not edit by hand.\n"


def render_crd_yaml() -> str:
    """The CRD as YAML, exactly as committed."""
    return _HEADER + yaml.safe_dump(generate_crd(), sort_keys=False, width=100, allow_unicode=False)


#: The API reference generated from the same schema (``kubectl explain`` in a file).
API_DOC_PATH = Path("docs") / "api.md"


def _type_of(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    kind = node.get("type", "object")
    if kind == "array":
        return f"[]{_type_of(node.get('items') or {})}"
    return str(kind)


def _constraints(node: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    low = ">" if node.get("exclusiveMinimum") is True else ">="
    high = "<" if node.get("exclusiveMaximum") is True else "<="
    for key, label in (("minimum", low), ("maximum", high), ("minItems", "items >="),
                       ("maxItems", "items <="), ("maxLength", "length <="), ("pattern", "pattern")):
        if key in node:
            parts.append(f"{label} `{node[key]}`")
    return "; ".join(parts)


def _rows(node: dict[str, Any], path: str, required: bool) -> list[str]:
    description = " ".join(str(node.get("description", "")).split()).replace("|", "\\|")
    rows = [f"| `{path}` | {_type_of(node)}{' (required)' if required else ''} | {description} | {_constraints(node)} |"]
    children = node.get("properties") or (node.get("items") or {}).get("properties")
    needed = set(node.get("required") or (node.get("items") or {}).get("required") or [])
    if children:
        suffix = "[]" if node.get("type") == "array" else ""
        for name, child in children.items():
            rows.extend(_rows(child, f"{path}{suffix}.{name}", name in needed))
    return rows


def render_api_reference() -> str:
    """Markdown tables of every spec and status field: type, description, bounds, CEL rules."""
    crd = generate_crd()
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    out = [
        f"# API reference: {crd['spec']['names']['kind']} ({crd['spec']['group']}/{version['name']})",
        "",
        "Generated from the pydantic model by `ascend-llm crd` (the same source as the CRD in `crds/`);",
        "`make test` fails when this file is stale. `kubectl explain ald.spec` shows the same descriptions.",
        "",
    ]
    for section in ("spec", "status"):
        node = schema["properties"][section]
        out += [f"## `{section}`", "", "| field | type | description | bounds |", "|---|---|---|---|"]
        out += _rows(node, section, False)[1:]
        out.append("")
        rules = node.get("x-kubernetes-validations") or []
        if rules:
            out += [f"### Cross-field rules on `{section}` (CEL, checked by the API server and the operator)", ""]
            out += [f"- `{rule['rule']}`: {rule.get('message', '')}" for rule in rules]
            out.append("")
    return "\n".join(out)


def _outputs() -> list[tuple[Path, str]]:
    text = render_crd_yaml()
    return [(relative, text) for relative in CRD_PATHS] + [(API_DOC_PATH, render_api_reference())]


def write_crds(root: Path) -> list[Path]:
    """Write the CRD to every path in :data:`CRD_PATHS`, and the API reference; return the paths."""
    written = []
    for relative, text in _outputs():
        target = Path(root) / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def check_crds(root: Path) -> list[str]:
    """Paths under ``root`` whose generated content is missing or differs (stale)."""
    stale = []
    for relative, text in _outputs():
        target = Path(root) / relative
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            stale.append(str(relative))
    return stale
