"""Prefill/decode disaggregation and KV offload on a real API server (docs/kv-transfer.md).

- Admission: the CRD's CEL rules refuse what the engines would refuse (HTTP 422 naming the field
  and the fix: Mooncake's prefill TP >= decode TP and decode PP 1, a role's NPUs, the LWS rules per
  role, kvPort in the transfer engine's random range, a connector of the other platform, CPU with
  offload) and admit the rest (dry-run); the operator's Python rules agree.
- Children: the A2 and A3 examples created, the operator makes every child ``ascend-llm render``
  predicts, field by field (one workload per role, the A3 prefill as a LeaderWorkerSet), each child
  is also accepted by a dry-run create of its own, and the status carries each role.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from install_harness import ROOT, assert_admitted, assert_refused_naming, wait_for
from test_operator import get, rendered, wait_children_match

pytestmark = pytest.mark.cluster

HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B"}}
P2 = {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}}
P4 = {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}}

REFUSED: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
    ("decode TP above prefill TP", {"model": HF, "disaggregation": {"prefill": P2, "decode": P4}},
     "spec.disaggregation.prefill.parallelism.tensor", ("prefill tensor parallel >= decode", "raise")),
    ("decode pipeline", {"model": HF, "disaggregation": {"prefill": P2, "decode": {
        "npu": {"perReplica": 2}, "parallelism": {"pipeline": 2}}}},
     "spec.disaggregation.decode.parallelism.pipeline", ("decode pipeline parallel 1",)),
    ("role NPUs", {"model": HF, "disaggregation": {"prefill": {"npu": {"perReplica": 8}, "parallelism": {"tensor": 4}},
                                                   "decode": {}}},
     "spec.disaggregation.prefill.npu.perReplica", ("nodesPerReplica x npu.perReplica",)),
    ("role on 2 nodes, mp without data parallel", {"model": HF, "disaggregation": {
        "prefill": {"nodesPerReplica": 2, "npu": {"perReplica": 8}, "parallelism": {"tensor": 16}}, "decode": {}}},
     "spec.disaggregation.prefill.parallelism.data", ("multiple of disaggregation.prefill.nodesPerReplica",)),
    ("kvPort in the random range on A3", {"model": HF, "npu": {"chip": "A3"}, "disaggregation": {
        "kvPort": 30000, "prefill": P2, "decode": P2}},
     "spec.disaggregation.kvPort", ("36000 on A3",)),
    ("NIXL on Ascend", {"model": HF, "disaggregation": {"connector": "NixlConnector", "prefill": {}, "decode": {}}},
     "spec.disaggregation.connector", ("Ascend takes MooncakeConnectorV1",)),
    ("LLMDataDist without a rank table", {"model": HF, "disaggregation": {
        "connector": "LLMDataDistCMgrConnector", "prefill": P2, "decode": P2}},
     "spec.disaggregation.rankTablePath", ("rankTableConfigMap",)),
    ("CPU with offload", {"model": HF, "platform": "CPU", "kvOffload": {"sizeGiB": 1}},
     "spec.kvOffload", ("CUDA-alike and XPU GPUs", "remove spec.kvOffload")),
    ("the flag by hand", {"model": HF, "disaggregation": {"prefill": {}, "decode": {"engine": {
        "extraArgs": ["--kv-transfer-config", "{}"]}}}},
     "spec.engine.extraArgs", ("--kv-transfer-config",)),
]

ADMITTED: list[tuple[str, dict[str, Any]]] = [
    ("prefill TP 4, decode TP 2", {"model": HF, "disaggregation": {"prefill": P4, "decode": P2}}),
    ("LLMDataDist with decode TP above prefill", {"model": HF, "disaggregation": {
        "connector": "LLMDataDistCMgrConnector", "rankTablePath": "/etc/rt/ranktable.json",
        "prefill": P2, "decode": P4}}),
    ("LLMDataDist with its rank table in a ConfigMap", {"model": HF, "disaggregation": {
        "connector": "LLMDataDistCMgrConnector", "rankTableConfigMap": {"name": "pd-ranktable"},
        "prefill": P2, "decode": P2}}),
    ("CPU with NIXL", {"model": HF, "platform": "CPU", "disaggregation": {"prefill": {}, "decode": {"replicas": 2}}}),
    ("offload on NPUs", {"model": HF, "kvOffload": {"sizeGiB": 32}}),
]


@pytest.mark.parametrize(("what", "spec", "field", "fragments"), REFUSED, ids=[r[0] for r in REFUSED])
def test_admission_refuses_what_the_engines_refuse(api_client: Any, crd_installed: None, make_namespace: Any,
                                                   what: str, spec: dict[str, Any], field: str,
                                                   fragments: tuple[str, ...]) -> None:
    assert_refused_naming(api_client, make_namespace(), spec, field, fragments)


@pytest.mark.parametrize(("what", "spec"), ADMITTED, ids=[a[0] for a in ADMITTED])
def test_admission_admits_what_the_engines_accept(api_client: Any, crd_installed: None, make_namespace: Any,
                                                  what: str, spec: dict[str, Any]) -> None:
    assert_admitted(api_client, make_namespace(), spec)


def _dry_run_create(api_client: Any, namespace: str, child: dict[str, Any]) -> None:
    """Create ``child`` in ``namespace`` with dryRun=All (the server's full validation, no object)."""
    import kubernetes

    body = json.loads(json.dumps(child))
    body["metadata"]["namespace"] = namespace
    dynamic = kubernetes.dynamic.DynamicClient(api_client)
    resource = dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    resource.create(body=body, namespace=namespace, query_params=[("dryRun", "All")])


@pytest.mark.parametrize("example", ["qwen32b-pd-910b.yaml", "qwen3-moe-pd-a3.yaml"])
def test_a_pd_example_gets_every_child_render_predicts(api: Any, api_client: Any, namespace: str,
                                                       make_namespace: Any, operator: Any, example: str) -> None:
    from ascend_operator.api import GROUP, PLURAL, VERSION
    import kubernetes

    resource = yaml.safe_load((ROOT / "examples" / example).read_text(encoding="utf-8"))
    name = resource["metadata"]["name"]
    children = rendered(api, example, namespace)
    roles = {c["metadata"]["labels"].get("llm-d.ai/role") for c in children
             if c["kind"] in ("Deployment", "LeaderWorkerSet")}
    assert roles == {"prefill", "decode"}
    spare = make_namespace()
    for child in children:  # every child on its own passes the server's validation
        _dry_run_create(api_client, spare, child)
    resource["metadata"]["namespace"] = namespace
    kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                            resource)
    wait_children_match(api, children)

    def roles_reported() -> bool:
        status = get(api, namespace, name).get("status") or {}
        return set((status.get("roles") or {})) == {"prefill", "decode"}

    wait_for(f"{name}'s status per role", roles_reported)
    status = get(api, namespace, name)["status"]
    spec = resource["spec"]["disaggregation"]
    for role in ("prefill", "decode"):
        assert status["roles"][role]["desiredReplicas"] == spec[role]["replicas"]
        workload = next(c for c in children if c["kind"] in ("Deployment", "LeaderWorkerSet")
                        and c["metadata"]["labels"]["llm-d.ai/role"] == role)
        assert status["roles"][role]["workload"] == workload["metadata"]["name"]
    assert status["ready"].endswith(f"/{spec['prefill']['replicas'] + spec['decode']['replicas']}")


ROUTED_PD: dict[str, Any] = {
    "model": {"pvc": {"claimName": "models"}, "servedName": "qwen"}, "routing": {},
    "disaggregation": {"prefill": {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}},
                       "decode": {"replicas": 2, "npu": {"perReplica": 2}, "parallelism": {"tensor": 2}}}}


def test_routing_of_a_pd_resource_on_the_server(api: Any, api_client: Any, namespace: str, operator: Any) -> None:
    """With the routing APIs served: the EPP with the P/D profile, the pool over both roles and the
    decode pods' routing sidecar are made as render predicts."""
    import os
    import time
    from unittest import mock

    import kubernetes
    from ascend_operator.api import API_VERSION, GROUP, KIND, PLURAL, VERSION
    from ascend_operator.cli import render_children
    # Through test_operator: inside a test, 'conftest' is whichever tier's conftest was loaded last.
    from test_operator import DISCOVERY_TTL_S, OPERATOR_SETTINGS, served
    from test_routing_on_server import install_routing_crds

    install_routing_crds(api)
    time.sleep(DISCOVERY_TTL_S + 1)  # the operator's discovery sees the routing APIs
    resource = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "qwen-pd", "namespace": namespace},
                "spec": ROUTED_PD}
    with mock.patch.dict(os.environ, OPERATOR_SETTINGS):
        children = render_children(resource, namespace, served=served(api))
    kinds = {c["kind"] for c in children}
    assert {"InferencePool", "Deployment", "ConfigMap"} <= kinds
    decode = next(c for c in children if c["kind"] == "Deployment" and c["metadata"]["name"] == "qwen-pd-decode")
    assert [c["name"] for c in decode["spec"]["template"]["spec"]["containers"]] == ["engine", "routing-sidecar"]
    kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                            resource)
    wait_children_match(api, children)


def test_each_role_gets_its_own_autoscaler_on_the_server(api: Any, namespace: str, operator: Any) -> None:
    """Role autoscaling: an autoscaler per role (KEDA here: the session serves its API) on the role's
    workload, made as render predicts, and workloads whose replicas the operator leaves alone."""
    import os
    from unittest import mock

    import kubernetes
    from ascend_operator.api import API_VERSION, GROUP, KIND, PLURAL, VERSION
    from ascend_operator.cli import render_children
    from test_operator import OPERATOR_SETTINGS, served

    spec = {"model": {"pvc": {"claimName": "models"}, "servedName": "qwen"}, "disaggregation": {
        "prefill": {"npu": {"perReplica": 4}, "parallelism": {"tensor": 4}, "autoscaling": {"maxReplicas": 3}},
        "decode": {"npu": {"perReplica": 2}, "parallelism": {"tensor": 2}, "autoscaling": {"maxReplicas": 8}}}}
    resource = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "scaled-pd", "namespace": namespace},
                "spec": spec}
    with mock.patch.dict(os.environ, OPERATOR_SETTINGS):
        children = render_children(resource, namespace, served=served(api))
    scalers = [c for c in children if c["kind"] in ("ScaledObject", "HorizontalPodAutoscaler")]
    assert sorted(c["spec"]["scaleTargetRef"]["name"] for c in scalers) == ["scaled-pd-decode", "scaled-pd-prefill"]
    assert all("replicas" not in c["spec"] for c in children if c["kind"] == "Deployment")
    kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                            resource)
    wait_children_match(api, children)
