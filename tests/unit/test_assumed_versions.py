"""ASCEND_LLM_ASSUME_VERSIONS: replacing detected versions (images with broken metadata, tests of
other versions' ladders without an NPU), and refusing what it does not understand."""

from __future__ import annotations

import pytest

from ascend_runtime.versions import Versions, apply_assumed_versions, detect_versions

CPU = Versions(platform="cpu", vllm="0.32.0", vllm_ascend=None, torch="2.13.0+cpu", torch_npu=None, cann=None)


def test_pairs_replace_the_detected_values_and_keep_the_others():
    assumed = apply_assumed_versions(CPU, "platform=ascend, vllm=0.23.0, vllm-ascend=0.23.0, chip_name=910B3")
    assert assumed == Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0", torch="2.13.0+cpu",
                               torch_npu=None, cann=None, chip_name="910B3")


def test_an_empty_value_leaves_the_detected_version_unknown():
    assert apply_assumed_versions(CPU, "vllm=").vllm is None


def test_nothing_set_changes_nothing():
    assert apply_assumed_versions(CPU, "  ") is CPU


@pytest.mark.parametrize("spec, message", [
    ("vlm=1", "'vlm=1' is not KEY=VALUE"),
    ("vllm", "'vllm' is not KEY=VALUE"),
    ("platform=npu", "platform must be ascend, cuda or cpu"),
    ("vllm_ascend=latest", "vllm_ascend='latest' is not a version"),
])
def test_what_is_not_understood_is_refused_with_the_item(spec, message):
    with pytest.raises(ValueError, match=message):
        apply_assumed_versions(CPU, spec)


def test_detect_versions_applies_the_environment_variable():
    versions = detect_versions(env={"ASCEND_LLM_ASSUME_VERSIONS": "platform=ascend,vllm_ascend=0.13.0"},
                               which=lambda _: None, distribution_version=lambda _: None)
    assert (versions.platform, versions.vllm_ascend) == ("ascend", "0.13.0")
