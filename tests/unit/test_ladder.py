"""The graph ladder has one rule (``ascend_runtime.ladder``): the operator's start-up budget
counts exactly as many rungs as the runtime's longest ladder for any supported engine version,
for every policy, fallback, chip, platform and LoRA setting."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from ascend_operator.api import parse_spec
from ascend_operator.builders.engine_config import build_engine_config, ladder_length
from ascend_operator.settings import load_settings
from ascend_runtime.config import GraphPolicy
from ascend_runtime.flags import graph_ladder
from ascend_runtime.ladder import longest_ladder
from ascend_runtime.versions import Versions

SETTINGS = load_settings({})
HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}}
#: One vllm-ascend version per era and step of the flag tables (before graph mode, TorchAir,
#: ACL graph, 310P's FULL_DECODE_ONLY from 0.18, FULL_AND_PIECEWISE from 0.23, a future one).
ASCEND_VERSIONS = ("0.8.5", "0.9.0", "0.11.0", "0.12.0rc1", "0.13.0", "0.18.0", "0.22.0", "0.23.0", "0.30.0")
CPU_VLLM_VERSIONS = ("0.10.0", "0.12.0", "0.32.0")
#: platform/chip -> the spec fields that select it.
TARGETS: dict[str, dict[str, Any]] = {
    "CPU": {"platform": "CPU"},
    "910B": {"npu": {"chip": "910B"}},
    "A3": {"npu": {"chip": "A3", "perReplica": 2}, "parallelism": {"tensor": 2}},
    "310P": {"npu": {"chip": "310P"}},
}


def runtime_longest(raw: dict[str, Any], target: str) -> int:
    """The runtime's longest ladder for the operator's engine config, over every engine version."""
    spec = parse_spec(raw)
    config = build_engine_config("demo", spec, SETTINGS, image="img", cache_plan=None)
    if target == "CPU":
        versions = [Versions(platform="cpu", vllm=version) for version in CPU_VLLM_VERSIONS]
    else:
        chip_name = "310P3" if target == "310P" else None
        versions = [Versions(platform="ascend", vllm="0.12.0", vllm_ascend=version, chip_name=chip_name)
                    for version in ASCEND_VERSIONS]
    return max(len(graph_ladder(config, found)) for found in versions)


CASES = list(itertools.product(GraphPolicy, (True, False), TARGETS, (False, True)))


@pytest.mark.parametrize("policy, fallback, target, lora", CASES,
                         ids=[f"{p.value}-{'fallback' if f else 'nofallback'}-{t}-{'lora' if lo else 'base'}"
                              for p, f, t, lo in CASES])
def test_the_operator_budgets_the_runtimes_longest_ladder(policy: GraphPolicy, fallback: bool, target: str,
                                                          lora: bool) -> None:
    raw = {"model": HF, "graph": {"policy": policy.value, "fallback": fallback}, **TARGETS[target],
           **({"lora": {"enabled": True}} if lora else {})}
    assert ladder_length(parse_spec(raw)) == runtime_longest(raw, target)


def test_the_rule_gives_each_length() -> None:
    # The cases above are not all one length: the agreement is not a constant on both sides.
    lengths = {longest_ladder(policy, fallback, None, lora)
               for policy, fallback, lora in itertools.product(GraphPolicy, (True, False), (True, False))}
    assert lengths == {1, 2}
    assert longest_ladder(GraphPolicy.AUTO, True, parse_spec({"model": HF}).npu.chip, False) == 3
    # 310P captures FULL_DECODE_ONLY only: a piecewise policy has nothing to fall back from.
    assert longest_ladder(GraphPolicy.PIECEWISE, True, parse_spec(
        {"model": HF, **TARGETS["310P"]}).npu.chip, False) == 1
