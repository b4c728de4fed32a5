"""Tuned defaults per model class and vllm-ascend version (ascend_runtime.tuning).

The model configs here are minimal: only the keys the classifier reads, with the shapes of the
named public models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_runtime.config import EngineConfig, GraphMode, GraphPolicy
from ascend_runtime.flags import graph_ladder, render_engine_command
from ascend_runtime.tuning import ModelClass, Scenario, classify_model, describe_report, render_table, tune
from ascend_runtime.versions import Versions

ROOT = Path(__file__).resolve().parents[2]

QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064}
QWEN3_30B_A3B = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
                 "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
                 "moe_intermediate_size": 768, "num_experts": 128, "vocab_size": 151936}
QWEN3_235B = {"model_type": "qwen3_moe", "hidden_size": 4096, "num_hidden_layers": 94, "num_attention_heads": 64,
              "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 12288,
              "moe_intermediate_size": 1536, "num_experts": 128, "vocab_size": 151936}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "num_local_experts": 8, "vocab_size": 32000}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
               "n_routed_experts": 256, "n_shared_experts": 1, "first_k_dense_replace": 3, "kv_lora_rank": 512,
               "vocab_size": 129280,
               "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic"}}


def _model(tmp_path: Path, cfg: dict, description: str | None = None, name: str = "m") -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    if description is not None:
        (directory / description).write_text(json.dumps({"model_quant_type": "W8A8"}), encoding="utf-8")
    return directory


def _config(path: Path, tp: int = 1, **engine) -> EngineConfig:
    data = {"model": {"path": str(path)}, "engine": {"parallel": {"tensor": tp}, **engine}}
    return EngineConfig.model_validate(data)


def _ascend(version: str, chip: str | None = None) -> Versions:
    return Versions.assumed(vllm_ascend=version, chip_name=chip)


def _applied(result) -> set[str]:
    return {item.setting for item in result.report.applied}


# --- classification ------------------------------------------------------------------------

def test_dense_moe_mla_and_quantisation_classes(tmp_path):
    assert classify_model(_model(tmp_path, QWEN25_7B, name="d")).model_class is ModelClass.DENSE
    small = classify_model(_model(tmp_path, QWEN3_30B_A3B, name="s"))
    large = classify_model(_model(tmp_path, QWEN3_235B, name="l"))
    assert (small.model_class, small.experts) == (ModelClass.MOE, 128)
    assert 25 < small.params_b < 40 and 200 < large.params_b < 260
    assert classify_model(_model(tmp_path, MIXTRAL, name="x")).experts == 8
    ds = classify_model(_model(tmp_path, DEEPSEEK_V3, name="ds"))
    assert ds.model_class is ModelClass.MLA and ds.experts == 256
    assert ds.quantization == "quantization_config fp8" and not ds.ascend_description


def test_msmodelslim_description_only_under_the_name_vllm_ascend_reads(tmp_path):
    exact = classify_model(_model(tmp_path, QWEN25_7B, "quant_model_description.json", name="a"))
    assert exact.ascend_description and exact.ascend_quant_type == "W8A8"
    variant = classify_model(_model(tmp_path, QWEN25_7B, "quant_model_description_w8a8.json", name="b"))
    assert not variant.ascend_description and variant.quantization == "msModelSlim W8A8"
    assert "rename it" in variant.notes[0]
    result = tune(_config(tmp_path / "b"), _ascend("0.13.0"))
    assert result.config.engine.quantization is None


def test_missing_config_json_means_no_defaults(tmp_path):
    result = tune(_config(tmp_path / "absent"), _ascend("0.13.0"))
    assert result.report.applied == [] and "cannot read the model's config.json" in result.report.reason


# --- per class and version -----------------------------------------------------------------

@pytest.mark.parametrize("version, expected", [
    ("0.9.1", {"PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256"}),
    ("0.11.0", {"PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256"}),
    ("0.13.0", {"TASK_QUEUE_ENABLE=1", "HCCL_OP_EXPANSION_MODE=AIV", "VLLM_ASCEND_ENABLE_PREFETCH_MLP=1",
                "VLLM_ASCEND_ENABLE_FLASHCOMM1=1", "--async-scheduling", "cudagraph_mode=FULL_DECODE_ONLY"}),
    ("0.18.0", {"TASK_QUEUE_ENABLE=1", "HCCL_OP_EXPANSION_MODE=AIV", "VLLM_ASCEND_ENABLE_FLASHCOMM1=1",
                'additional_config.weight_prefetch_config={"enabled":true}', "--async-scheduling",
                "cudagraph_mode=FULL_DECODE_ONLY"}),
    ("0.23.0", {"PYTORCH_NPU_ALLOC_CONF=expandable_segments:True", "TASK_QUEUE_ENABLE=1",
                "HCCL_OP_EXPANSION_MODE=AIV", "additional_config.enable_flashcomm1=true", "--async-scheduling",
                "cudagraph_mode=FULL_DECODE_ONLY"}),
])
def test_dense_tp4_per_version(tmp_path, version, expected):
    result = tune(_config(_model(tmp_path, QWEN25_7B), tp=4), _ascend(version))
    assert result.report.scenario == Scenario.DENSE_TP.value
    assert _applied(result) == expected


@pytest.mark.parametrize("version, buffsize, alloc", [
    ("0.9.1", None, "max_split_size_mb:256"),
    ("0.11.0", None, "max_split_size_mb:256"),
    ("0.13.0", "512", "expandable_segments:True"),
    ("0.18.0", "512", "expandable_segments:True"),
    ("0.23.0", "512", "expandable_segments:True"),
])
def test_large_moe_per_version(tmp_path, version, buffsize, alloc):
    result = tune(_config(_model(tmp_path, QWEN3_235B), tp=8), _ascend(version))
    env = result.config.engine.env
    assert env.get("HCCL_BUFFSIZE") == buffsize and env["PYTORCH_NPU_ALLOC_CONF"] == alloc
    assert result.report.summary.startswith("MoE, 128 experts, ~2")


def test_small_moe_changes_at_0_23(tmp_path):
    path = _model(tmp_path, QWEN3_30B_A3B)
    old = tune(_config(path, tp=4), _ascend("0.18.0"))
    new = tune(_config(path, tp=4), _ascend("0.23.0"))
    assert _applied(old) == {"PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256"}
    assert new.config.engine.env["HCCL_BUFFSIZE"] == "1024"
    assert "HCCL_OP_EXPANSION_MODE" not in new.config.engine.env  # the tutorial: "not needed on A2"
    a3 = tune(_config(path, tp=4), _ascend("0.23.0", chip="A3"))
    assert a3.config.engine.env["HCCL_OP_EXPANSION_MODE"] == "AIV"


def test_mla_torchair_keys_only_up_to_0_11(tmp_path):
    path = _model(tmp_path, DEEPSEEK_V3)
    for version in ("0.9.1", "0.11.0"):
        extra = tune(_config(path, tp=8), _ascend(version)).config.ascend.additional_config
        assert extra == {"ascend_scheduler_config": {"enabled": True}, "torchair_graph_config": {"enabled": True}}
    for version in ("0.13.0", "0.18.0", "0.23.0"):
        result = tune(_config(path, tp=8), _ascend(version))
        assert "torchair_graph_config" not in result.config.ascend.additional_config
        assert result.config.engine.env["VLLM_ASCEND_BALANCE_SCHEDULING"] == "1"
        assert result.config.graph.policy is GraphPolicy.FULL_DECODE_ONLY


def test_mlapo_for_msmodelslim_mla_at_0_13(tmp_path):
    path = _model(tmp_path, {k: v for k, v in DEEPSEEK_V3.items() if k != "quantization_config"},
                  "quant_model_description.json")
    result = tune(_config(path, tp=16), _ascend("0.13.0"))
    assert result.config.engine.env["VLLM_ASCEND_ENABLE_MLAPO"] == "1"
    assert result.config.engine.quantization == "ascend"
    later = tune(_config(path, tp=16), _ascend("0.18.0"))
    assert "VLLM_ASCEND_ENABLE_MLAPO" not in later.config.engine.env  # default on there


def test_fused_mc2_on_a3_w8a8_ep_only(tmp_path):
    path = _model(tmp_path, QWEN3_235B, "quant_model_description.json")
    on = tune(_config(path, tp=4, parallel={"tensor": 4, "data": 1, "expert": True}), _ascend("0.13.0", "A3"))
    assert on.config.engine.env["VLLM_ASCEND_ENABLE_FUSED_MC2"] == "1"
    a2 = tune(_config(path, tp=4, parallel={"tensor": 4, "expert": True}), _ascend("0.13.0", "910B3"))
    assert "VLLM_ASCEND_ENABLE_FUSED_MC2" not in a2.config.engine.env
    skipped = {item.setting: item.skipped for item in a2.report.skipped}
    assert "A3 only" in skipped["VLLM_ASCEND_ENABLE_FUSED_MC2=1"]


def test_variable_the_installed_version_lacks_is_never_passed(tmp_path):
    # 0.18.0rc1 still follows the v0.13.0 tutorial, but its envs.py dropped PREFETCH_MLP.
    result = tune(_config(_model(tmp_path, QWEN25_7B), tp=4), _ascend("0.18.0rc1"))
    assert "VLLM_ASCEND_ENABLE_PREFETCH_MLP" not in result.config.engine.env
    assert any("envs.py has no VLLM_ASCEND_ENABLE_PREFETCH_MLP" in (i.skipped or "") for i in result.report.skipped)


def test_async_scheduling_needs_vllm_0_12(tmp_path):
    versions = Versions.assumed(vllm="0.11.0", vllm_ascend="0.13.0")
    result = tune(_config(_model(tmp_path, QWEN25_7B), tp=4), versions)
    assert "--async-scheduling" not in result.config.engine.extra_args


# --- the user wins; the switch; other platforms --------------------------------------------

def test_user_settings_win(tmp_path):
    path = _model(tmp_path, QWEN3_235B)
    config = _config(path, tp=8, env={"HCCL_BUFFSIZE": "2048"}, extraArgs=["--no-async-scheduling"])
    config.graph.policy = GraphPolicy.EAGER
    result = tune(config, _ascend("0.13.0"), {"OMP_NUM_THREADS": "4"})
    env = result.config.engine.env
    assert env["HCCL_BUFFSIZE"] == "2048" and "OMP_NUM_THREADS" not in env
    assert "--async-scheduling" not in result.config.engine.extra_args
    assert result.config.graph.policy is GraphPolicy.EAGER
    reasons = {item.setting: item.skipped for item in result.report.skipped}
    assert reasons["HCCL_BUFFSIZE=512"] == "engine.env sets HCCL_BUFFSIZE=2048"
    assert "container's environment" in reasons["OMP_NUM_THREADS=1"]
    assert config.engine.env == {"HCCL_BUFFSIZE": "2048"}  # the input is not changed


def test_switch_off_and_cpu(tmp_path):
    path = _model(tmp_path, QWEN3_235B)
    off = tune(_config(path, tp=8, tunedDefaults=False), _ascend("0.13.0"))
    assert off.report.applied == [] and off.report.reason == "engine.tunedDefaults is false"
    cpu = tune(_config(path, tp=8), Versions(platform="cpu", vllm="0.32.0"))
    assert cpu.report.applied == [] and "none applies here" in cpu.report.reason


def test_rendered_command_carries_the_defaults(tmp_path):
    result = tune(_config(_model(tmp_path, QWEN3_235B), tp=8), _ascend("0.13.0"))
    versions = _ascend("0.13.0")
    ladder = graph_ladder(result.config, versions)
    assert ladder == [GraphMode.FULL_DECODE_ONLY, GraphMode.PIECEWISE, GraphMode.EAGER]
    command = render_engine_command(result.config, versions, ladder[0])
    assert "--async-scheduling" in command.argv
    assert '{"cudagraph_mode":"FULL_DECODE_ONLY"}' in command.argv
    assert command.env["HCCL_BUFFSIZE"] == "512"


def test_report_line_names_class_version_and_source(tmp_path):
    result = tune(_config(_model(tmp_path, QWEN3_235B), tp=8), _ascend("0.13.0"))
    line = next(x for x in describe_report(result.report) if "HCCL_BUFFSIZE" in x)
    assert line == ("MoE, 128 experts, ~235B parameters, vllm-ascend 0.13.0: HCCL_BUFFSIZE=512 from "
                    "docs/source/tutorials/Qwen3-235B-A22B.md@v0.13.0")


def test_docs_table_is_the_rules_table():
    assert render_table() in (ROOT / "docs" / "tuned-defaults.md").read_text(encoding="utf-8")
