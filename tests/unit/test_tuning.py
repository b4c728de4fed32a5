"""Tuned defaults per model class and vllm-ascend version (ascend_runtime.tuning), on the real
config.json files of public models (tests/data/model-configs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ascend_runtime.config import EngineConfig, GraphMode, GraphPolicy
from ascend_runtime.flags import graph_ladder, render_engine_command
from ascend_runtime.tuning import Kind, ModelClass, Scenario, classify_model, describe_report, render_table, tune
from ascend_runtime.versions import Versions

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "model-configs"
#: Real config.json files (tests/data/model-configs/README.md names each source).
QWEN25_7B, QWEN3_32B, QWEN3_30B_A3B, GPT_OSS_120B, DEEPSEEK_V3 = (
    "qwen2.5-7b-instruct", "qwen3-32b", "qwen3-30b-a3b", "gpt-oss-120b", "deepseek-v3")


def _model(tmp_path: Path, name: str, description: str | None = None, as_name: str | None = None) -> Path:
    """A model directory holding the real config.json of ``name`` (and a one-key msModelSlim file)."""
    directory = tmp_path / (as_name or name)
    directory.mkdir()
    shutil.copy(DATA / name / "config.json", directory / "config.json")
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
    for name in (QWEN25_7B, QWEN3_32B):
        profile = classify_model(_model(tmp_path, name))
        assert (profile.model_class, profile.experts, profile.quantization) == (ModelClass.DENSE, None, None)
    small = classify_model(_model(tmp_path, QWEN3_30B_A3B))
    large = classify_model(_model(tmp_path, GPT_OSS_120B))  # num_local_experts
    assert (small.model_class, small.experts) == (ModelClass.MOE, 128)
    assert (large.model_class, large.experts) == (ModelClass.MOE, 128)
    # The model cards say 30.5B and 117B parameters.
    assert 29 < small.params_b < 32 and 110 < large.params_b < 125
    assert large.quantization == "quantization_config mxfp4"
    ds = classify_model(_model(tmp_path, DEEPSEEK_V3))
    assert ds.model_class is ModelClass.MLA and ds.experts == 256  # n_routed_experts
    assert ds.quantization == "quantization_config fp8" and not ds.ascend_description


def test_scenarios_follow_the_tutorials_split(tmp_path):
    cases = [(QWEN25_7B, 1, Scenario.DENSE_SINGLE), (QWEN3_32B, 4, Scenario.DENSE_TP),
             (QWEN3_30B_A3B, 4, Scenario.MOE_SMALL), (GPT_OSS_120B, 8, Scenario.MOE_LARGE),
             (DEEPSEEK_V3, 16, Scenario.MLA)]
    for name, tp, scenario in cases:
        assert tune(_config(_model(tmp_path, name), tp=tp), _ascend("0.13.0")).report.scenario == scenario.value


def test_msmodelslim_description_only_under_the_name_vllm_ascend_reads(tmp_path):
    exact = classify_model(_model(tmp_path, QWEN25_7B, "quant_model_description.json", as_name="a"))
    assert exact.ascend_description and exact.ascend_quant_type == "W8A8"
    variant = classify_model(_model(tmp_path, QWEN25_7B, "quant_model_description_w8a8.json", as_name="b"))
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
    result = tune(_config(_model(tmp_path, QWEN3_32B), tp=4), _ascend(version))
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
    result = tune(_config(_model(tmp_path, GPT_OSS_120B), tp=8), _ascend(version))
    env = result.config.engine.env
    assert env.get("HCCL_BUFFSIZE") == buffsize and env["PYTORCH_NPU_ALLOC_CONF"] == alloc
    assert result.report.summary.startswith("MoE, 128 experts, ~117B parameters")


SMALL_MOE_0_23 = {"--async-scheduling", "HCCL_BUFFSIZE=1024", "OMP_NUM_THREADS=1", "OMP_PROC_BIND=false",
                  "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True", "additional_config.enable_flashcomm1=true",
                  "cudagraph_mode=FULL_DECODE_ONLY"}


@pytest.mark.parametrize("version, small_moe, dense_one", [
    ("0.9.1", {"PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256"}, {"PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256"}),
    ("0.11.0", {"PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256"}, {"PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256"}),
    ("0.13.0", {"PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256"}, set()),
    ("0.18.0", {"PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256"}, set()),
    ("0.23.0", SMALL_MOE_0_23, set()),
])
def test_small_moe_and_single_npu_dense_per_version(tmp_path, version, small_moe, dense_one):
    """Qwen3-30B-A3B at TP 4 and Qwen2.5-7B on one NPU: the single-NPU tutorial's allocator setting
    exists up to 0.11 only; from 0.13 no tutorial tunes a single-NPU dense model."""
    moe = tune(_config(_model(tmp_path, QWEN3_30B_A3B), tp=4), _ascend(version))
    dense = tune(_config(_model(tmp_path, QWEN25_7B), tp=1), _ascend(version))
    assert (moe.report.scenario, dense.report.scenario) == (Scenario.MOE_SMALL.value, Scenario.DENSE_SINGLE.value)
    assert _applied(moe) == small_moe and _applied(dense) == dense_one


@pytest.mark.parametrize("version, source", [
    ("0.9.1", "docs/source/tutorials/multi_npu_quantization.md@v0.9.1"),
    ("0.11.0", "docs/source/tutorials/multi_npu_quantization.md@v0.9.1"),  # no newer tag cited before 0.13
    ("0.13.0", "docs/source/tutorials/Qwen3-8B-W4A8.md@v0.13.0"),
    ("0.18.0", "docs/source/tutorials/models/Qwen3-8B-W4A8.md@v0.18.0"),
    ("0.23.0", "docs/source/tutorials/models/Qwen3-Dense.md@v0.23.0"),
])
def test_msmodelslim_weights_get_the_ascend_quantization_at_every_version(tmp_path, version, source):
    result = tune(_config(_model(tmp_path, QWEN25_7B, "quant_model_description.json")), _ascend(version))
    assert result.config.engine.quantization == "ascend"
    (entry,) = [item for item in result.report.applied if item.setting == "--quantization ascend"]
    assert entry.source == source
    plain = tune(_config(_model(tmp_path, QWEN3_32B)), _ascend(version))
    assert plain.config.engine.quantization is None  # without msModelSlim's description: none


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
        # v0.23.0's A3 tab drops --async-scheduling for DeepSeek-V3.1.
        assert ("--async-scheduling" in result.config.engine.extra_args) is (version != "0.23.0")


def test_mlapo_for_msmodelslim_mla_at_0_13(tmp_path):
    path = _model(tmp_path, DEEPSEEK_V3, "quant_model_description.json")
    result = tune(_config(path, tp=16), _ascend("0.13.0"))
    assert result.config.engine.env["VLLM_ASCEND_ENABLE_MLAPO"] == "1"
    assert result.config.engine.quantization == "ascend"
    later = tune(_config(path, tp=16), _ascend("0.18.0"))
    assert "VLLM_ASCEND_ENABLE_MLAPO" not in later.config.engine.env  # default on there


def test_fused_mc2_on_a3_w8a8_ep_only(tmp_path):
    path = _model(tmp_path, GPT_OSS_120B, "quant_model_description.json")
    on = tune(_config(path, tp=4, parallel={"tensor": 4, "data": 1, "expert": True}), _ascend("0.13.0", "A3"))
    assert on.config.engine.env["VLLM_ASCEND_ENABLE_FUSED_MC2"] == "1"
    a2 = tune(_config(path, tp=4, parallel={"tensor": 4, "expert": True}), _ascend("0.13.0", "910B3"))
    assert "VLLM_ASCEND_ENABLE_FUSED_MC2" not in a2.config.engine.env
    skipped = {item.setting: item.skipped for item in a2.report.skipped}
    assert "A3 only" in skipped["VLLM_ASCEND_ENABLE_FUSED_MC2=1"]


def test_variable_the_installed_version_lacks_is_never_passed(tmp_path):
    # 0.18.0rc1 still follows the v0.13.0 tutorial, but its envs.py dropped PREFETCH_MLP.
    result = tune(_config(_model(tmp_path, QWEN3_32B), tp=4), _ascend("0.18.0rc1"))
    assert "VLLM_ASCEND_ENABLE_PREFETCH_MLP" not in result.config.engine.env
    assert any("envs.py has no VLLM_ASCEND_ENABLE_PREFETCH_MLP" in (i.skipped or "") for i in result.report.skipped)


def test_async_scheduling_needs_vllm_0_12(tmp_path):
    versions = Versions.assumed(vllm="0.11.0", vllm_ascend="0.13.0")
    result = tune(_config(_model(tmp_path, QWEN3_32B), tp=4), versions)
    assert "--async-scheduling" not in result.config.engine.extra_args


# --- the user wins; the switch; other platforms --------------------------------------------

def test_user_settings_win(tmp_path):
    path = _model(tmp_path, GPT_OSS_120B)
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
    path = _model(tmp_path, GPT_OSS_120B)
    off = tune(_config(path, tp=8, tunedDefaults=False), _ascend("0.13.0"))
    assert off.report.applied == [] and off.report.reason == "engine.tunedDefaults is false"
    cpu = tune(_config(path, tp=8), Versions(platform="cpu", vllm="0.32.0"))
    assert cpu.report.applied == [] and "none applies here" in cpu.report.reason


def test_rendered_command_carries_the_defaults(tmp_path):
    result = tune(_config(_model(tmp_path, GPT_OSS_120B), tp=8), _ascend("0.13.0"))
    versions = _ascend("0.13.0")
    ladder = graph_ladder(result.config, versions)
    assert ladder == [GraphMode.FULL_DECODE_ONLY, GraphMode.PIECEWISE, GraphMode.EAGER]
    command = render_engine_command(result.config, versions, ladder[0])
    assert "--async-scheduling" in command.argv
    assert '{"cudagraph_mode":"FULL_DECODE_ONLY"}' in command.argv
    assert command.env["HCCL_BUFFSIZE"] == "512"


def test_report_line_names_class_version_and_source(tmp_path):
    result = tune(_config(_model(tmp_path, GPT_OSS_120B), tp=8), _ascend("0.13.0"))
    line = next(x for x in describe_report(result.report) if "HCCL_BUFFSIZE" in x)
    assert line == ("MoE, 128 experts, ~117B parameters, quantised (quantization_config mxfp4), "
                    "vllm-ascend 0.13.0: HCCL_BUFFSIZE=512 from docs/source/tutorials/Qwen3-235B-A22B.md@v0.13.0")


def test_docs_table_is_the_rules_table():
    assert render_table() in (ROOT / "docs" / "tuned-defaults.md").read_text(encoding="utf-8")


# --- where it shows: /state and `ascend-llm doctor tuning` ---------------------------------

def test_supervisor_publishes_the_report_in_state(tmp_path):
    from ascend_runtime.state import StateStore
    from ascend_runtime.supervisor import Supervisor

    store = StateStore()
    config = _config(_model(tmp_path, GPT_OSS_120B), tp=8)
    supervisor = Supervisor(config, _ascend("0.13.0"), store, env={})
    supervisor._apply_tuned_defaults()
    assert supervisor.config.engine.env["HCCL_BUFFSIZE"] == "512"
    state = store.snapshot()["tunedDefaults"]
    assert state["scenario"] == "large MoE"
    applied = {item["setting"]: item["source"] for item in state["applied"]}
    assert applied["HCCL_BUFFSIZE=512"] == "docs/source/tutorials/Qwen3-235B-A22B.md@v0.13.0"


def test_doctor_tuning_prints_what_and_why(tmp_path, capsys):
    from ascend_runtime.cli import main

    path = _model(tmp_path, DEEPSEEK_V3)
    code = main(["doctor", "tuning", str(path), "--vllm-ascend-version", "0.11.0", "--tensor-parallel", "8",
                 "--ignore-env"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["tunedDefaults"]["modelClass"] == "MLA"
    assert ('MLA, 256 experts, quantised (quantization_config fp8), vllm-ascend 0.11.0: '
            'additional_config.torchair_graph_config={"enabled":true} from '
            'docs/source/tutorials/multi_node.md@v0.11.0') in out["lines"]


def test_flags_command_renders_with_the_tuned_defaults(tmp_path, capsys, monkeypatch):
    from ascend_runtime.cli import main

    for name in ("HCCL_BUFFSIZE", "PYTORCH_NPU_ALLOC_CONF", "OMP_NUM_THREADS", "OMP_PROC_BIND", "TASK_QUEUE_ENABLE",
                 "VLLM_ASCEND_ENABLE_FLASHCOMM1", "HCCL_OP_EXPANSION_MODE"):
        monkeypatch.delenv(name, raising=False)
    path = _model(tmp_path, GPT_OSS_120B)
    config = tmp_path / "engine-config.yaml"
    config.write_text(f"model: {{path: {path}}}\nengine: {{parallel: {{tensor: 8}}}}\n", encoding="utf-8")
    assert main(["flags", "--config", str(config), "--vllm-ascend-version", "0.13.0", "--vllm-version",
                 "0.13.0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ladder"] == ["FULL_DECODE_ONLY", "PIECEWISE", "EAGER"]
    assert "--async-scheduling" in out["argv"] and out["env"]["HCCL_BUFFSIZE"] == "512"
    assert any(line.endswith("HCCL_BUFFSIZE=512 from docs/source/tutorials/Qwen3-235B-A22B.md@v0.13.0")
               for line in out["tunedDefaults"])
    config.write_text(f"model: {{path: {path}}}\nengine: {{parallel: {{tensor: 8}}, tunedDefaults: false}}\n",
                      encoding="utf-8")
    assert main(["flags", "--config", str(config), "--vllm-ascend-version", "0.13.0", "--vllm-version",
                 "0.13.0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "--async-scheduling" not in out["argv"] and "HCCL_BUFFSIZE" not in out["env"]
    assert out["tunedDefaults"] == ["tuned defaults: none (engine.tunedDefaults is false)"]


def test_explicit_config_fields_win(tmp_path):
    path = _model(tmp_path, DEEPSEEK_V3, "quant_model_description.json")
    config = EngineConfig.model_validate({
        "model": {"path": str(path)},
        "engine": {"parallel": {"tensor": 8}, "quantization": "fp8"},
        "ascend": {"additionalConfig": {"torchair_graph_config": {"enabled": False}}},
    })
    result = tune(config, _ascend("0.11.0"))
    assert result.config.engine.quantization == "fp8"
    assert result.config.ascend.additional_config["torchair_graph_config"] == {"enabled": False}
    assert result.config.ascend.additional_config["ascend_scheduler_config"] == {"enabled": True}
    dense = EngineConfig.model_validate({
        "model": {"path": str(_model(tmp_path, QWEN3_32B))}, "engine": {"parallel": {"tensor": 4}},
        "distributed": {"hcclOpExpansionMode": "HOST"},
    })
    skipped = {i.setting: i.skipped for i in tune(dense, _ascend("0.13.0")).report.skipped}
    assert skipped["HCCL_OP_EXPANSION_MODE=AIV"] == "distributed.hcclOpExpansionMode is set (HOST)"


def test_no_defaults_on_310p_or_before_the_oldest_cited_tag(tmp_path):
    config = _config(_model(tmp_path, QWEN3_32B), tp=4)
    p310 = tune(config, _ascend("0.13.0", chip="310P3"))
    assert p310.report.applied == [] and p310.report.reason.startswith("310P")
    old = tune(config, _ascend("0.9.0"))
    assert old.report.applied == [] and "predates the oldest cited tutorials" in old.report.reason


def test_a_version_between_cited_tags_follows_the_lower_one(tmp_path):
    config = _config(_model(tmp_path, QWEN3_32B), tp=4)
    assert _applied(tune(config, _ascend("0.15.0rc1"))) == _applied(tune(config, _ascend("0.13.0")))


def test_async_scheduling_left_out_with_pipeline_parallel(tmp_path):
    config = _config(_model(tmp_path, QWEN3_32B), tp=4, parallel={"tensor": 4, "pipeline": 2})
    result = tune(config, _ascend("0.13.0"))
    assert "--async-scheduling" not in result.config.engine.extra_args
    skipped = {i.setting: i.skipped for i in result.report.skipped}
    assert skipped["--async-scheduling"] == "the tutorials use it without pipeline parallel"


def test_switch_left_out_is_on_and_not_rendered(tmp_path):
    config = _config(_model(tmp_path, GPT_OSS_120B), tp=8)
    assert config.engine.tuned_defaults is None and "tunedDefaults" not in config.to_yaml()
    assert tune(config, _ascend("0.13.0")).report.applied


def test_state_report_tolerates_fields_of_other_runtime_versions():
    from ascend_runtime.config import RuntimeState

    state = RuntimeState.model_validate({"tunedDefaults": {
        "summary": "MoE", "later": 1, "applied": [{"kind": "env", "setting": "A=1", "source": "s", "new": 2}]}})
    assert state.tuned_defaults.applied[0].setting == "A=1"


#: The seeds' examples and, for each, a real config.json of the same class standing in for its own
#: model's (Qwen2.5-72B and DeepSeek-V2-Lite have no verbatim public copy in tests/data): the class
#: and the scenario depend on the architecture (dense, MLA) and the engine config, not the size.
SEED_EXAMPLES = {"qwen72b-910b-tp8.yaml": (QWEN25_7B, "dense, TP>1"), "deepseek-moe-ep.yaml": (DEEPSEEK_V3, "MLA")}


@pytest.mark.parametrize("example", sorted(SEED_EXAMPLES))
@pytest.mark.parametrize("version", ["0.9.1", "0.11.0", "0.13.0", "0.18.0", "0.23.0"])
def test_the_seed_examples_get_their_class_defaults_from_the_engine_config_the_operator_renders(
        tmp_path: Path, example: str, version: str) -> None:
    """The example's engine config as the operator writes it into the ConfigMap, tuned as the
    pod's runtime tunes it: the class's defaults apply, the graph mode starts from the tutorial's
    (graph.policy auto in both examples), and what the example sets itself is kept."""
    import yaml
    from ascend_operator.api import parse_spec
    from ascend_operator.builders import BuildMeta, build_children
    from ascend_operator.settings import load_settings
    from ascend_runtime.config import CONFIG_FILE_KEY

    stand_in, scenario = SEED_EXAMPLES[example]
    resource = yaml.safe_load((ROOT / "examples" / example).read_text(encoding="utf-8"))
    children = build_children(BuildMeta(resource["metadata"]["name"], "llm"), parse_spec(resource["spec"]),
                              load_settings({}))
    data = yaml.safe_load(next(o for o in children.objects() if o["kind"] == "ConfigMap"
                               and CONFIG_FILE_KEY in o.get("data", {}))["data"][CONFIG_FILE_KEY])
    data["model"]["path"] = str(_model(tmp_path, stand_in))
    rendered = EngineConfig.model_validate(data)
    assert rendered.graph.policy == GraphPolicy.AUTO
    result = tune(rendered, _ascend(version))
    assert result.report.scenario == scenario and result.report.applied, result.report
    graph = [item.setting for item in result.report.applied if item.kind == Kind.GRAPH.value]
    assert (result.config.graph.policy == GraphPolicy.AUTO) == (not graph)
    if tuple(map(int, version.split("."))) >= (0, 13, 0):  # both classes' tutorials capture decode only
        assert result.config.graph.policy is GraphPolicy.FULL_DECODE_ONLY
    for key, value in rendered.ascend.additional_config.items():  # the example's own keys stay
        assert result.config.ascend.additional_config[key] == value
    assert result.config.engine.extra_args[:len(rendered.engine.extra_args)] == rendered.engine.extra_args
