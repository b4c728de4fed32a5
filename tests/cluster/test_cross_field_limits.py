"""Cross-field limits of the spec on a real API server (docs/validation.md lists them).

Each refusal is by the CRD's CEL rules at admission (HTTP 422) and names the field; each admitted
neighbour (at the limit, a default that fits, a limit set through extraArgs, which admission cannot
read and the runtime checks) is created, dry-run. The operator's Python rules agree on both
(``parse_spec``). Before issue 23 the warmup, decode-graph and running-target cases below were all admitted.
"""

from __future__ import annotations

from typing import Any

import pytest
from install_harness import assert_admitted, assert_refused_naming

pytestmark = pytest.mark.cluster

HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B"}}

#: (input, spec, the field named, fragments of the message: both fields and the fix)
REFUSED: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
    ("warmup concurrency above maxNumSeqs", {"model": HF, "engine": {"maxNumSeqs": 8},
                                             "warmup": {"concurrency": [1, 16]}},
     "spec.warmup.concurrency", ("warmup.concurrency", "engine.maxNumSeqs", "raise engine.maxNumSeqs")),
    ("warmup concurrency above the NPU default", {"model": HF, "warmup": {"concurrency": [300]}},
     "spec.warmup.concurrency", ("256 on NPUs", "lower warmup.concurrency")),
    ("warmup concurrency above the CPU default", {"model": HF, "platform": "CPU", "warmup": {"concurrency": [200]}},
     "spec.warmup.concurrency", ("128 on CPU",)),
    ("warmup prompt longer than maxModelLen", {"model": HF, "engine": {"maxModelLen": 512},
                                               "warmup": {"promptLengths": [16, 1024]}},
     "spec.warmup.promptLengths", ("warmup.promptLengths", "engine.maxModelLen", "raise engine.maxModelLen")),
    ("warmup prompt plus maxTokens past maxModelLen", {"model": HF, "engine": {"maxModelLen": 512},
                                                       "warmup": {"promptLengths": [480], "maxTokens": 64}},
     "spec.warmup.promptLengths", ("warmup.maxTokens",)),
    ("warmup defaults on a model shorter than any", {"model": HF, "engine": {"maxModelLen": 16}},
     "spec.warmup.promptLengths", ("derived plan's shortest prompt",)),
    ("decode-only graphs above maxNumSeqs", {"model": HF, "engine": {"maxNumSeqs": 16},
                                             "graph": {"policy": "full_decode_only", "captureSizes": [8, 64]}},
     "spec.graph.captureSizes", ("graph.captureSizes", "engine.maxNumSeqs")),
    ("capture size above maxCaptureSize", {"model": HF, "graph": {"captureSizes": [1, 64], "maxCaptureSize": 32}},
     "spec.graph.captureSizes", ("maxCaptureSize",)),
    ("LoRA maxCpuLoras below maxLoras", {"model": HF, "lora": {"maxLoras": 4, "maxCpuLoras": 2}},
     "spec.lora.maxCpuLoras", ("maxLoras",)),
    ("LoRA rank vLLM refuses", {"model": HF, "lora": {"maxRank": 12}}, "spec.lora.maxRank", ("one of",)),
    ("autoscaling min above max", {"model": HF, "autoscaling": {"minReplicas": 5, "maxReplicas": 4}},
     "spec.autoscaling.minReplicas", ("maxReplicas",)),
    ("autoscaling min 0 without scale-to-zero", {"model": HF, "autoscaling": {"minReplicas": 0, "maxReplicas": 4}},
     "spec.autoscaling.minReplicas", ("scaleToZero.enabled",)),
    ("running-requests target above maxNumSeqs", {"model": HF, "engine": {"maxNumSeqs": 16}, "autoscaling": {
        "maxReplicas": 4, "signal": "runningRequestsPerReplica", "target": 20}},
     "spec.autoscaling.target", ("engine.maxNumSeqs", "never scale up")),
    ("parallelism beyond the NPUs", {"model": HF, "npu": {"perReplica": 4}, "parallelism": {"tensor": 8}},
     "spec.npu.perReplica", ("tensor x pipeline x data",)),
]

ADMITTED: list[tuple[str, dict[str, Any]]] = [
    ("warmup at the limits", {"model": HF, "engine": {"maxNumSeqs": 16, "maxModelLen": 512},
                              "warmup": {"concurrency": [16], "promptLengths": [496], "maxTokens": 8}}),
    ("warmup defaults on a small engine", {"model": HF, "engine": {"maxNumSeqs": 4, "maxModelLen": 512}}),
    ("warmup beyond limits while off", {"model": HF, "engine": {"maxNumSeqs": 4},
                                        "warmup": {"enabled": False, "concurrency": [64]}}),
    ("limits set through extraArgs", {"model": HF, "engine": {"maxNumSeqs": 4, "maxModelLen": 512, "extraArgs": [
        "--max-num-seqs=64", "--max-model-len", "8192"]}, "warmup": {"concurrency": [64], "promptLengths": [4096]}}),
    ("piecewise graphs above maxNumSeqs", {"model": HF, "engine": {"maxNumSeqs": 16},
                                           "graph": {"policy": "piecewise", "captureSizes": [512]}}),
]


@pytest.mark.parametrize(("what", "spec", "field", "fragments"), REFUSED, ids=[r[0] for r in REFUSED])
def test_admission_refuses_naming_the_field_and_the_fix(api_client: Any, crd_installed: None, make_namespace: Any,
                                                       what: str, spec: dict[str, Any], field: str,
                                                       fragments: tuple[str, ...]) -> None:
    assert_refused_naming(api_client, make_namespace(), spec, field, fragments)


@pytest.mark.parametrize(("what", "spec"), ADMITTED, ids=[a[0] for a in ADMITTED])
def test_admission_admits_what_fits(api_client: Any, crd_installed: None, make_namespace: Any, what: str,
                                   spec: dict[str, Any]) -> None:
    assert_admitted(api_client, make_namespace(), spec)
