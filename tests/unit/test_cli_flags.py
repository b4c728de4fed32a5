"""`ascend-llm flags`: the engine command the runtime would launch, for the installed or a named
version, as JSON; a bad config or mode is refused with the field."""

from __future__ import annotations

import json

from ascend_runtime.cli import main


def write_config(tmp_path, extra: str = "") -> str:
    path = tmp_path / "engine-config.yaml"
    path.write_text("schemaVersion: 1\nmodel: {path: /models/qwen}\n"
                    "ascend: {chip: '910B', multistreamOverlapSharedExpert: true}\n" + extra)
    return str(path)


def test_flags_for_vllm_ascend_0_23_use_the_acl_graph_era(tmp_path, capsys):
    assert main(["flags", "--config", write_config(tmp_path), "--vllm-ascend-version", "0.23.0",
                 "--vllm-version", "0.23.0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ladder"] == ["FULL_AND_PIECEWISE", "PIECEWISE", "EAGER"]
    argv = out["argv"]
    compilation = json.loads(argv[argv.index("--compilation-config") + 1])
    assert compilation["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    additional = json.loads(argv[argv.index("--additional-config") + 1])
    assert additional["multistream_overlap_shared_expert"] is True
    assert "--shutdown-timeout" in argv


def test_flags_for_the_eager_rung_and_an_old_version(tmp_path, capsys):
    assert main(["flags", "--config", write_config(tmp_path), "--vllm-ascend-version", "0.11.0",
                 "--vllm-version", "0.11.0", "--mode", "eager"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "--enforce-eager" in out["argv"]
    assert "--compilation-config" not in out["argv"]
    assert "--shutdown-timeout" not in out["argv"]  # vLLM 0.11 has no drain flag
    assert any("shutdown" in warning for warning in out["warnings"])


def test_an_unknown_mode_is_refused(tmp_path, capsys):
    assert main(["flags", "--config", write_config(tmp_path), "--mode", "turbo"]) == 2
    assert "--mode 'turbo'" in capsys.readouterr().err


def test_a_bad_config_names_the_field(tmp_path, capsys):
    assert main(["flags", "--config", write_config(tmp_path, "graph: {policy: fast}\n")]) == 2
    assert "graph.policy" in capsys.readouterr().err
