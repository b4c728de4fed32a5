"""The operator's ``ascend-llm`` sub-commands (registered through the ``ascend_llm.commands``
entry point, so the runtime's CLI never imports the operator):

- ``ascend-llm operator run [-n NS ...] [--standalone] [--liveness URL] [-v]``: run the operator
  (kopf with ``ascend_operator.main``); namespaces default to the settings' list, else all.
- ``ascend-llm crd [--check] [--root DIR]``: write the generated CRD to ``crds/`` and the chart,
  or with ``--check`` exit 1 naming each stale copy.
- ``ascend-llm render FILE [-o yaml|json] [--api-versions G/V ...]``: print, offline, the
  children the operator would create for the resources in FILE on a cluster serving those APIs
  (the autoscaler depends on them; owner references omitted: they need the live uid). An invalid
  resource exits 2 with the message naming the field.

kopf and the kubernetes client are imported only by ``operator run``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from ascend_operator.api import API_VERSION, KIND, SpecError, parse_spec
from ascend_operator.builders import BuildMeta, build_children, choose_autoscaler, routing_missing
from ascend_operator.kvcheck import enforce_kv_transfer
from ascend_operator.settings import SettingsError, load_settings

EXIT_OK = 0
EXIT_STALE = 1
EXIT_INVALID = 2


class ResourceFileError(ValueError):
    """A resource file that cannot be rendered; the message names the file and the problem."""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    operator = subparsers.add_parser("operator", help="The Kubernetes operator.")
    osub = operator.add_subparsers(dest="operator_command", required=True, metavar="WHAT")
    run = osub.add_parser("run", help="Run the operator against the current cluster (kopf).")
    run.add_argument("-n", "--namespace", action="append", default=None, dest="namespaces", metavar="NS",
                     help="Watch this namespace (repeatable; globs allowed). Default: the settings' "
                          "ASCEND_LLM_OPERATOR_NAMESPACES, else every namespace.")
    run.add_argument("--standalone", action="store_true",
                     help="Run without leader election (the Lease); for a single replica or a local run.")
    run.add_argument("--liveness", default=None, metavar="URL",
                     help="Serve kopf's liveness probe here, for example http://0.0.0.0:8081/healthz.")
    run.add_argument("-v", "--verbose", action="store_true", help="Log more (kopf's verbose mode).")
    run.set_defaults(func=_cmd_operator_run)

    crd = subparsers.add_parser("crd", help="Write (or --check) the generated CRD in crds/ and the chart.")
    crd.add_argument("--check", action="store_true", help="Do not write; exit 1 if a copy is stale or missing.")
    crd.add_argument("--root", type=Path, default=Path("."), help="Repository root (default: %(default)s).")
    crd.set_defaults(func=_cmd_crd)

    render = subparsers.add_parser("render", help="Print the children the operator would create for FILE.")
    render.add_argument("file", type=Path, help="A YAML file with one or more AscendLLMDeployments (- for stdin).")
    render.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="Output format.")
    render.add_argument("--namespace", default=None,
                        help="Namespace for resources that name none (default: their own, else default).")
    render.add_argument("-a", "--api-versions", action="append", default=[], metavar="GROUP/VERSION",
                        help="A group/version the cluster serves, as the operator learns from discovery "
                             "(repeatable, or comma-separated): keda.sh/v1alpha1 makes an autoscaled "
                             "resource get a ScaledObject, custom.metrics.k8s.io/v1beta2 an HPA on engine "
                             "metrics, inference.networking.k8s.io/v1 (and gateway.networking.k8s.io/v1 "
                             "for the route) the objects of spec.routing; `kubectl api-versions` lists a "
                             "cluster's. Default: core APIs only.")
    render.set_defaults(func=_cmd_render)


# ------------------------------------------------------------------------------ operator run


def _cmd_operator_run(args: argparse.Namespace) -> int:
    from ascend_operator import allocator

    allocator.cap_arenas()  # before the API threads exist (see ascend_operator.allocator)
    try:
        settings = load_settings()
    except SettingsError as error:
        print(f"ascend-llm operator run: {error}", file=sys.stderr)
        return EXIT_INVALID
    import kopf

    import ascend_operator.main  # noqa: F401  (registers the handlers)

    from ascend_operator.handlers.handle_startup import INSIGHTS_KEY, SETTINGS_KEY
    from ascend_operator.rediscovery import new_insights

    namespaces = args.namespaces or settings.namespaces
    kopf.configure(verbose=args.verbose)
    # The start-up handler lists what kopf will watch: the same namespaces. kopf's insights are
    # made here so that the start-up handler can watch the CRD being re-created (rediscovery).
    insights = new_insights()
    memo = kopf.Memo({SETTINGS_KEY: settings.model_copy(update={"namespaces": list(namespaces)}),
                      INSIGHTS_KEY: insights})
    kopf.run(
        standalone=args.standalone or settings.standalone,
        namespaces=namespaces,
        clusterwide=not namespaces,
        liveness_endpoint=args.liveness,
        memo=memo,
        insights=insights,
    )
    return EXIT_OK


# ------------------------------------------------------------------------------ crd


def _cmd_crd(args: argparse.Namespace) -> int:
    from ascend_operator.crdgen import check_crds, write_crds

    if args.check:
        stale = check_crds(args.root)
        for path in stale:
            print(f"stale or missing: {path} (run `ascend-llm crd` to regenerate)", file=sys.stderr)
        return EXIT_STALE if stale else EXIT_OK
    for path in write_crds(args.root):
        print(path)
    return EXIT_OK


# ------------------------------------------------------------------------------ render


def load_resources(text: str, source: str) -> list[dict[str, Any]]:
    """The AscendLLMDeployments in a YAML text; other documents are an error naming them."""

    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        raise ResourceFileError(f"{source}: not valid YAML: {error}") from None
    if not documents:
        raise ResourceFileError(f"{source}: no resource in the file")
    for index, doc in enumerate(documents):
        where = f"{source} (document {index + 1})"
        if not isinstance(doc, dict) or doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
            got = f"{doc.get('apiVersion')}/{doc.get('kind')}" if isinstance(doc, dict) else type(doc).__name__
            raise ResourceFileError(f"{where}: expected apiVersion {API_VERSION}, kind {KIND}; got {got}")
        if not (doc.get("metadata") or {}).get("name"):
            raise ResourceFileError(f"{where}: metadata.name is required")
    return documents


def served_api_versions(values: list[str]) -> frozenset[str]:
    """``--api-versions`` values (repeated or comma-separated) plus the core group."""

    return frozenset({"v1", *(item.strip() for value in values for item in value.split(",") if item.strip())})


def render_children(resource: dict[str, Any], namespace: str | None = None,
                    served: frozenset[str] = frozenset({"v1"})) -> list[dict[str, Any]]:
    """The children of one resource as the operator would apply them, minus owner references,
    on a cluster that serves the group/versions ``served`` (which autoscaler, if any); the model
    cache's claim first (the workload is applied only once its fetch Job completed)."""

    meta = resource["metadata"]
    spec = parse_spec(resource.get("spec") or {})
    target = meta.get("namespace") or namespace or "default"
    settings = load_settings()
    enforce_kv_transfer(spec, settings)
    choice = choose_autoscaler(spec, settings, served)
    build_meta = BuildMeta(meta["name"], target, meta.get("generation"), annotations=dict(meta.get("annotations") or {}))
    children = build_children(build_meta, spec, settings, autoscaler=choice.kind,
                              routing=routing_missing(spec, settings, served) is None)
    claim = [children.cache_claim] if children.cache_claim is not None else []  # applied first
    return [*claim, *children.objects()]


class _ManifestDumper(yaml.SafeDumper):
    """Multi-line strings (the engine config) as literal blocks, readable as in a file; strings
    that Kubernetes' YAML reader would take for numbers or booleans quoted."""


#: Plain scalars that go-yaml (kubectl's and the API server's YAML reader) resolves to a number or
#: a boolean while PyYAML's YAML 1.1 resolver reads them as strings, so it would leave them
#: unquoted: 1e5, -1e-5, 1.5e5 (no dot or unsigned exponent), 0o17, y, n. kubectl then refuses an
#: annotation or env value such as a spec hash ``84e12345`` ("cannot unmarshal number").
_GO_YAML_NON_STRING = re.compile(
    r"[-+]?(\.[0-9_]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9_]+)?|[-+]?0[bBoOxX][0-9a-fA-F_]+|[yYnN]")


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()):
        style: str | None = "|"
    else:
        style = "'" if _GO_YAML_NON_STRING.fullmatch(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _represent_str)


def write_manifests(objects: list[dict[str, Any]], output: str, out: TextIO) -> None:
    """``objects`` as a YAML stream (``---`` between documents) or a JSON ``v1 List``."""

    if output == "json":
        json.dump({"apiVersion": "v1", "kind": "List", "items": objects}, out, indent=2)
        out.write("\n")
    else:
        out.write(yaml.dump_all(objects, Dumper=_ManifestDumper, sort_keys=False, width=100))


def _cmd_render(args: argparse.Namespace) -> int:
    source = "<stdin>" if str(args.file) == "-" else str(args.file)
    try:
        text = sys.stdin.read() if source == "<stdin>" else args.file.read_text(encoding="utf-8")
    except OSError as error:
        print(f"ascend-llm render: {source}: cannot read: {error.strerror}", file=sys.stderr)
        return EXIT_INVALID
    try:
        objects = []
        for resource in load_resources(text, source):
            try:
                objects.extend(render_children(resource, args.namespace, served_api_versions(args.api_versions)))
            except SpecError as error:
                print(f"ascend-llm render: {source}: {resource['metadata']['name']}: {error}", file=sys.stderr)
                return EXIT_INVALID
    except (ResourceFileError, SettingsError) as error:
        print(f"ascend-llm render: {error}", file=sys.stderr)
        return EXIT_INVALID
    write_manifests(objects, args.output, sys.stdout)
    return EXIT_OK
