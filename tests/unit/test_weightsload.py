"""The weights loader: which vLLM has which loader, auto per storage kind, what the runtime passes,
and what the operator refuses (ascend_runtime.weightsload, ascend_operator.weightsloader)."""

from __future__ import annotations

from typing import Any

import pytest
from ascend_operator.api import SpecError, parse_spec
from ascend_operator.builders import build_engine_config, resolve_image
from ascend_operator.builders.engine_config import weights_storage
from ascend_operator.builders.modelcache import plan_cache
from ascend_operator.settings import load_settings
from ascend_operator.weightsloader import image_vllm, weights_loader_problems
from ascend_runtime.config import EngineConfig, GraphMode
from ascend_runtime.flags import render_engine_command
from ascend_runtime.cli import main as runtime_main
from ascend_runtime.versions import Versions
from ascend_runtime.weightsload import (
    LOADER_SINCE,
    WeightsLoader,
    WeightsStorage,
    loader_known,
    resolve,
)
from packaging.version import Version

L, S = WeightsLoader, WeightsStorage
STRATEGY = "--safetensors-load-strategy"
DEFAULTS = load_settings({})

#: The last vLLM release without each loader, and the first with it (from each release's source).
BOUNDARIES = [
    (L.RUNAI_STREAMER, "0.6.5", "0.6.6"),
    (L.FASTSAFETENSORS, "0.8.1", "0.8.2"),
    (L.EAGER, "0.10.1.1", "0.10.2"),
    (L.MMAP, "0.10.1.1", "0.10.2"),
    (L.PREFETCH, "0.17.0", "0.18.0"),
]


@pytest.mark.parametrize(("loader", "without", "with_"), BOUNDARIES)
def test_each_loader_is_known_from_the_release_that_added_it(loader: WeightsLoader, without: str, with_: str) -> None:
    assert not loader_known(loader, Version(without))
    assert loader_known(loader, Version(with_))
    assert LOADER_SINCE[loader] == Version(with_)
    assert not loader_known(loader, None)  # an unknown vLLM is assumed to have none


@pytest.mark.parametrize(("vllm", "args", "picked"), [
    ("0.32.0", [STRATEGY, "prefetch"], L.PREFETCH),
    ("0.18.0", [STRATEGY, "prefetch"], L.PREFETCH),
    ("0.17.0", [STRATEGY, "eager"], L.EAGER),  # no prefetch yet: the whole-file read
    ("0.10.2", [STRATEGY, "eager"], L.EAGER),
    ("0.10.1.1", [], None),  # neither: vLLM's mmap, no flag
])
def test_auto_on_network_storage_reads_ahead_with_what_the_version_has(vllm: str, args: list[str],
                                                                       picked: WeightsLoader | None) -> None:
    choice = resolve(L.AUTO, S.NETWORK, Version(vllm), "ascend")
    assert (choice.args, choice.loader, choice.error) == (args, picked, None)
    if picked is None:
        assert "not prefetch" in choice.reason and "not eager" in choice.reason


def test_auto_on_local_storage_keeps_vllms_default() -> None:
    choice = resolve(L.AUTO, S.LOCAL, Version("0.32.0"), "cpu")
    assert (choice.args, choice.loader, choice.error) == ([], None, None)


def test_auto_on_object_storage_streams_and_refuses_without_the_streamer() -> None:
    assert resolve(L.AUTO, S.OBJECT_STORAGE, Version("0.23.0"), "ascend").args == ["--load-format", "runai_streamer"]
    missing = resolve(L.AUTO, S.OBJECT_STORAGE, Version("0.23.0"), "ascend", streamer_installed=False)
    assert missing.args == [] and "runai-model-streamer" in (missing.error or "")
    old = resolve(L.AUTO, S.OBJECT_STORAGE, Version("0.6.5"), "ascend")
    assert "engine.weightsStorage objectStorage" in (old.error or "")


@pytest.mark.parametrize(("loader", "vllm"), [(L.PREFETCH, "0.17.0"), (L.EAGER, "0.10.1"),
                                              (L.RUNAI_STREAMER, "0.6.5")])
def test_a_named_loader_the_version_lacks_is_refused_naming_the_field(loader: WeightsLoader, vllm: str) -> None:
    choice = resolve(loader, S.LOCAL, Version(vllm), "ascend")
    assert choice.args == []
    assert choice.error is not None and choice.error.startswith(f"engine.weightsLoader {loader.value}:")
    assert f"from vLLM {LOADER_SINCE[loader]}" in choice.error


def test_mmap_is_passed_as_lazy_only_where_the_flag_exists() -> None:
    assert resolve(L.MMAP, S.NETWORK, Version("0.23.0"), "ascend").args == [STRATEGY, "lazy"]
    assert resolve(L.MMAP, S.NETWORK, Version("0.9.2"), "ascend").args == []


def test_fastsafetensors_only_on_cuda_and_the_streamer_only_where_installed() -> None:
    assert "CUDA" in (resolve(L.FASTSAFETENSORS, S.LOCAL, Version("0.23.0"), "ascend").error or "")
    assert resolve(L.FASTSAFETENSORS, S.LOCAL, Version("0.8.2"), "cuda").args == ["--load-format", "fastsafetensors"]
    refused = resolve(L.RUNAI_STREAMER, S.LOCAL, Version("0.32.0"), "cpu", streamer_installed=False)
    assert "runai-model-streamer" in (refused.error or "")


def test_only_the_streamer_reads_object_storage() -> None:
    assert "object storage" in (resolve(L.EAGER, S.OBJECT_STORAGE, Version("0.23.0"), "ascend").error or "")


@pytest.mark.parametrize("extra", [["--load-format", "pt"], ["--safetensors_load_strategy=eager"]])
def test_a_loader_flag_in_extra_args_wins(extra: list[str]) -> None:
    choice = resolve(L.PREFETCH, S.NETWORK, Version("0.32.0"), "cpu", extra)
    assert (choice.args, choice.error) == ([], None)
    assert "engine.extraArgs sets" in choice.reason


# --------------------------------------------------------------------------------------------
# The runtime renders and refuses


def config(**engine: Any) -> EngineConfig:
    return EngineConfig.model_validate({"model": {"path": "/models/m"}, "engine": {"dtype": "float32", **engine}})


CPU_0_32 = Versions(platform="cpu", vllm="0.32.0", runai_streamer="0.15.7")


def test_the_engine_argv_carries_the_auto_choice_and_the_override() -> None:
    auto = render_engine_command(config(weightsStorage="network"), CPU_0_32, GraphMode.EAGER)
    assert auto.argv[auto.argv.index(STRATEGY) + 1] == "prefetch"
    assert "prefetch (auto for network storage)" in auto.loader
    chosen = render_engine_command(config(weightsStorage="network", weightsLoader="eager"), CPU_0_32, GraphMode.EAGER)
    assert chosen.argv[chosen.argv.index(STRATEGY) + 1] == "eager"
    local = render_engine_command(config(), CPU_0_32, GraphMode.EAGER)
    assert STRATEGY not in local.argv and "--load-format" not in local.argv


def test_the_renderer_refuses_a_named_loader_the_installed_vllm_lacks() -> None:
    old = Versions(platform="ascend", vllm="0.13.0", vllm_ascend="0.13.0")
    with pytest.raises(ValueError, match="engine.weightsLoader prefetch: vLLM 0.13.0 has no prefetch loader"):
        render_engine_command(config(weightsLoader="prefetch"), old, GraphMode.EAGER)
    streamerless = Versions(platform="cpu", vllm="0.32.0")
    with pytest.raises(ValueError, match="no runai-model-streamer package"):
        render_engine_command(config(weightsLoader="runaiStreamer"), streamerless, GraphMode.EAGER)


def test_the_runtime_exits_with_the_config_code_before_launching(tmp_path, capsys, monkeypatch) -> None:
    path = tmp_path / "engine-config.yaml"
    path.write_text(config(weightsLoader="prefetch").to_yaml())
    monkeypatch.setenv("ASCEND_LLM_ASSUME_VERSIONS", "platform=cpu,vllm=0.17.0")
    assert runtime_main(["run", "--config", str(path)]) == 2
    assert "engine.weightsLoader prefetch: vLLM 0.17.0 has no prefetch loader" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# The operator: storage kind per source and cache, and the image-version check


HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}}


@pytest.mark.parametrize(("model", "storage"), [
    ({"pvc": {"claimName": "weights"}}, S.NETWORK),
    ({"hostPath": {"path": "/data/models/qwen"}}, S.LOCAL),
    (HF, S.LOCAL),  # an emptyDir per pod
    ({**HF, "cache": {"create": {"size": "100Gi"}}}, S.NETWORK),
    ({**HF, "cache": {"claimName": "shared-cache"}}, S.NETWORK),
    ({**HF, "cache": {"hostPath": "/data/llm-cache"}}, S.LOCAL),
])
def test_storage_kind_follows_the_source_and_the_cache(model: dict[str, Any], storage: WeightsStorage) -> None:
    assert weights_storage(parse_spec({"model": model})) is storage


def engine_config(spec_dict: dict[str, Any]) -> EngineConfig:
    settings = load_settings({"ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES": "/data/models",
                              "ASCEND_LLM_OPERATOR_CACHE_HOST_PATH_PREFIXES": "/data/llm-cache"})
    spec = parse_spec(spec_dict)
    return build_engine_config("m", spec, settings, image=resolve_image(spec, settings),
                               cache_plan=plan_cache("m", spec, settings))


def test_the_engine_config_carries_storage_and_loader_only_when_not_the_default() -> None:
    local = engine_config({"model": HF}).to_yaml()
    assert "weightsStorage" not in local and "weightsLoader" not in local  # unchanged ConfigMaps
    network = engine_config({"model": {"pvc": {"claimName": "weights"}}, "engine": {"weightsLoader": "eager"}})
    assert (network.engine.weights_storage, network.engine.weights_loader) == (S.NETWORK, L.EAGER)


@pytest.mark.parametrize(("tag", "loader", "refused"), [
    ("v0.13.0", "prefetch", True),
    ("v0.17.0rc1", "prefetch", True),
    ("v0.18.0", "prefetch", False),
    ("v0.23.0", "runaiStreamer", False),
    ("v0.9.1", "eager", True),
    ("v0.9.1", "mmap", False),
    ("v0.9.1", "auto", False),
])
def test_the_operator_refuses_a_loader_the_images_vllm_lacks(tag: str, loader: str, refused: bool) -> None:
    spec = parse_spec({"model": HF, "image": f"registry/runtime:0.1.0-vllm-ascend-{tag}",
                       "engine": {"weightsLoader": loader}})
    problems = weights_loader_problems(spec, DEFAULTS)
    assert bool(problems) is refused
    if refused:
        assert problems[0][0] == "spec.engine.weightsLoader"
        assert f"has no {loader} loader" in problems[0][1]


def test_an_image_without_a_version_is_left_to_the_runtime() -> None:
    assert image_vllm("registry/runtime@sha256:" + "a" * 64) is None
    assert image_vllm("registry/runtime:0.1.0-vllm-ascend-v0.13.0rc2-a3") == Version("0.13.0")
    spec = parse_spec({"model": HF, "image": "registry/runtime:custom", "engine": {"weightsLoader": "prefetch"}})
    assert weights_loader_problems(spec, DEFAULTS) == []


def test_fastsafetensors_is_refused_at_admission_naming_the_field() -> None:
    with pytest.raises(SpecError) as error:
        parse_spec({"model": HF, "engine": {"weightsLoader": "fastsafetensors"}})
    assert any(path == "spec.engine.weightsLoader" and "CUDA" in message for path, message in error.value.problems)
