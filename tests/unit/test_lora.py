"""LoRA: the contract (lora, AdapterSet), the vllm-ascend guard, the engine flags, and the adapter
reconciler's pure parts (diff, backoff, file reading) and its rounds against a scripted engine."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_runtime.adapters import (
    Action,
    ActionKind,
    AdapterFile,
    AdapterReconciler,
    AdapterRequestError,
    Backoff,
    plan_actions,
)
from ascend_runtime.config import (
    Adapter,
    AdapterPhase,
    AdapterSet,
    AdapterStatus,
    ConfigError,
    EngineConfig,
    GraphMode,
    LoraConfig,
    RuntimeState,
    load_adapter_set,
    parse_adapter_set,
    parse_config,
)
from ascend_runtime.flags import graph_ladder, render_engine_command
from ascend_runtime.lora_support import check_lora_support
from ascend_runtime.state import StateStore
from ascend_runtime.versions import Versions

CPU = Versions(platform="cpu", vllm="0.32.0")
A23 = Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0")


def config(lora: dict | None = None, **engine: Any) -> EngineConfig:
    data: dict[str, Any] = {"model": {"path": "/models/base", "servedName": "base"}, "engine": engine}
    if lora is not None:
        data["lora"] = lora
    return EngineConfig.model_validate(data)


# -- the contract --------------------------------------------------------------------------


def test_lora_is_absent_from_a_rendered_config_unless_set():
    assert "lora" not in config().to_yaml()
    rendered = config({"maxRank": 64, "maxLoras": 2, "maxCpuLoras": 4}).to_yaml()
    again = parse_config(yaml.safe_load(rendered))
    assert again.lora == LoraConfig(max_rank=64, max_loras=2, max_cpu_loras=4)


@pytest.mark.parametrize("lora, field, words", [
    ({"maxRank": 12}, "lora.maxRank", "maxRank 12 is not a rank vLLM accepts"),
    ({"maxLoras": 4, "maxCpuLoras": 2}, "lora", "maxCpuLoras (2) is below maxLoras (4)"),
    ({"maxLoras": 0}, "lora.maxLoras", "greater than or equal to 1"),
    ({"retryInitialS": 10, "retryMaxS": 1}, "lora", "retryMaxS (1.0) is below retryInitialS (10.0)"),
])
def test_bad_lora_settings_are_refused_naming_the_field(lora, field, words):
    with pytest.raises(ConfigError) as error:
        parse_config({"model": {"path": "/m"}, "lora": lora}, "engine-config.yaml")
    assert f"  {field}: " in str(error.value)
    assert words in str(error.value)


def test_adapter_set_reads_names_and_paths():
    adapters = parse_adapter_set({"adapters": [{"name": "sql", "path": "/adapters/sql"},
                                               {"name": "org/chat.v2", "path": "/adapters/chat"}]})
    assert adapters.paths() == {"sql": "/adapters/sql", "org/chat.v2": "/adapters/chat"}
    assert parse_adapter_set(adapters.model_dump(by_alias=True)) == adapters
    assert parse_adapter_set(None) == AdapterSet()


@pytest.mark.parametrize("adapters, where, words", [
    ([{"name": "a", "path": "/x"}, {"name": "a", "path": "/y"}], "(top level)",
     "adapters[1].name 'a' is also adapters[0].name; adapter names must be unique"),
    ([{"name": "a=b", "path": "/x"}], "adapters.0.name", "name 'a=b' is not a usable model name"),
    ([{"name": "-a", "path": "/x"}], "adapters.0.name", "starting and ending with a letter or digit"),
    ([{"name": "a", "path": "relative/dir"}], "adapters.0.path", "must be absolute"),
    ([{"name": "a", "path": "/x", "source": "hf://x"}], "adapters.0.source", "Extra inputs are not permitted"),
])
def test_bad_adapter_sets_are_refused_naming_the_field(adapters, where, words):
    with pytest.raises(ConfigError) as error:
        parse_adapter_set({"adapters": adapters}, "adapters.yaml")
    text = str(error.value)
    assert text.startswith("adapters.yaml: invalid adapter set:")
    assert f"  {where}: " in text and words in text


def test_adapter_named_like_the_base_model_is_a_conflict():
    adapters = parse_adapter_set({"adapters": [{"name": "base", "path": "/x"}, {"name": "ok", "path": "/y"}]})
    assert adapters.name_conflicts(["base"]) == [
        "adapters[0].name 'base' is the base model's served name; rename the adapter"
    ]


def test_adapter_file_missing_is_empty_and_garbage_names_the_file(tmp_path):
    assert load_adapter_set(tmp_path / "none.yaml") == AdapterSet()
    bad = tmp_path / "adapters.yaml"
    bad.write_text("adapters: [unclosed")
    with pytest.raises(ConfigError, match=f"{bad}: not valid YAML"):
        load_adapter_set(bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping with an `adapters` list, got list"):
        load_adapter_set(bad)


def test_runtime_state_carries_adapters_in_camel_case():
    store = StateStore()
    store.set_adapters([AdapterStatus(name="a", path="/a", state=AdapterPhase.LOADED, loaded_at=5.0)])
    snapshot = store.snapshot()
    assert snapshot["adapters"][0] == {"name": "a", "path": "/a", "state": "Loaded", "lastError": None,
                                       "loadedAt": 5.0, "failures": 0, "nextRetryAt": None}
    assert RuntimeState.model_validate(snapshot).adapters[0].state is AdapterPhase.LOADED


# -- the guard -----------------------------------------------------------------------------


@pytest.mark.parametrize("version, tensor, refused", [
    ("0.23.0", 2, True), ("v0.23.0", 4, True), ("0.20.2rc1", 2, True), ("0.23.1rc1", 2, True),
    ("0.23.0", 1, False), ("0.18.0", 2, False), ("0.24.0", 2, False), (None, 2, False),
])
def test_tensor_parallel_lora_is_refused_on_the_reported_vllm_ascend_versions(version, tensor, refused):
    support = check_lora_support(config({}, parallel={"tensor": tensor}), "ascend", version)
    assert bool(support.errors) is refused
    if refused:
        assert support.errors[0].startswith(f"lora.enabled with engine.parallel.tensor {tensor}: vllm-ascend")
        assert "vllm-ascend#16586" in support.errors[0] and "set engine.parallel.tensor to 1" in support.errors[0]


def test_guard_checks_nothing_without_lora_or_off_ascend():
    assert check_lora_support(config(parallel={"tensor": 2}), "ascend", "0.23.0").errors == []
    assert check_lora_support(config({"enabled": False}, parallel={"tensor": 2}), "ascend", "0.23.0").errors == []
    assert check_lora_support(config({}, parallel={"tensor": 2}), "cuda", None).errors == []


def test_expert_parallel_lora_is_refused_and_quantization_warned():
    support = check_lora_support(config({}, parallel={"expert": True}, quantization="ascend"), "ascend", "0.23.0")
    assert support.errors == [
        "lora.enabled with engine.parallel.expert: vllm-ascend 0.23.0 does not support expert parallel with "
        "LoRA (vllm-ascend v0.23.0 docs, user_guide/feature_guide/lora.md); set engine.parallel.expert to false"
    ]
    assert support.warnings[0].startswith("lora.enabled with engine.quantization ascend: vllm-ascend 0.23.0 does "
                                          "not support LoRA on quantized MoE models")


def test_flags_refuse_what_the_guard_refuses():
    with pytest.raises(ValueError, match="lora.enabled with engine.parallel.tensor 2"):
        render_engine_command(config({}, parallel={"tensor": 2}), A23, graph_ladder(config(), A23)[0])


# -- the flags -----------------------------------------------------------------------------


def test_lora_flags_and_runtime_updating_env():
    command = render_engine_command(config({"maxRank": 32, "maxLoras": 2, "maxCpuLoras": 8}), CPU,
                                    graph_ladder(config({}), CPU)[0])
    argv = command.argv
    at = argv.index("--enable-lora")
    assert argv[at:at + 7] == ["--enable-lora", "--max-loras", "2", "--max-lora-rank", "32",
                               "--max-cpu-loras", "8"]
    assert "--lora-modules" not in argv
    assert command.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_no_lora_flags_without_lora():
    command = render_engine_command(config(), CPU, graph_ladder(config(), CPU)[0])
    assert not any("lora" in token for token in command.argv)
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in command.env


def test_lora_on_cpu_runs_eager_only():
    assert graph_ladder(config(), CPU) == [GraphMode.PIECEWISE, GraphMode.EAGER]
    ladder = graph_ladder(config({}), CPU)
    assert ladder == [GraphMode.EAGER]
    assert "--enforce-eager" in render_engine_command(config({}), CPU, ladder[0]).argv


def test_lora_flags_in_extra_args_are_removed_naming_the_field():
    cfg = config({"maxRank": 8}, extraArgs=["--max-lora-rank", "64", "--lora-modules", "a=/x", "b=/y",
                                           "--enable-lora", "--max-num-batched-tokens", "512"])
    command = render_engine_command(cfg, CPU, graph_ladder(cfg, CPU)[0])
    assert command.argv[-2:] == ["--max-num-batched-tokens", "512"]
    assert command.argv.count("--max-lora-rank") == 1 and "--lora-modules" not in command.argv
    assert "engine.extraArgs: --max-lora-rank 64 removed; the runtime sets --max-lora-rank itself (use lora.maxRank)" \
        in command.warnings
    assert any(w.startswith("engine.extraArgs: --lora-modules a=/x b=/y removed") and "lora.adaptersFile" in w
               for w in command.warnings)


def test_lora_flags_in_extra_args_stay_when_lora_is_not_set():
    cfg = config(extraArgs=["--enable-lora", "--lora-modules", "a=/x"])
    assert render_engine_command(cfg, CPU, graph_ladder(cfg, CPU)[0]).argv[-3:] == ["--enable-lora",
                                                                                    "--lora-modules", "a=/x"]


def test_a_user_value_for_the_updating_variable_is_overridden_with_a_warning():
    cfg = config({}, env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "0"})
    command = render_engine_command(cfg, CPU, graph_ladder(cfg, CPU)[0])
    assert command.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert any(w.startswith("engine.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING=0 set to True") for w in command.warnings)


# -- diff and backoff ----------------------------------------------------------------------


def test_plan_unloads_first_then_reloads_changed_paths_then_loads_in_file_order():
    desired = {"new2": "/n2", "keep": "/k", "moved": "/m2", "new1": "/n1"}
    loaded = {"keep": "/k", "moved": "/m1", "gone": "/g", "also-gone": "/a"}
    assert plan_actions(desired, loaded) == [
        Action(ActionKind.UNLOAD, "also-gone"), Action(ActionKind.UNLOAD, "gone"),
        Action(ActionKind.RELOAD, "moved", "/m2"),
        Action(ActionKind.LOAD, "new2", "/n2"), Action(ActionKind.LOAD, "new1", "/n1"),
    ]
    assert plan_actions(desired, desired) == []


def test_backoff_doubles_from_initial_and_is_capped():
    backoff = Backoff(2.0, 30.0)
    assert [backoff.delay(n) for n in range(7)] == [0.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff.delay(10_000) == 30.0


def test_adapter_file_rereads_only_changed_content_and_keeps_the_last_good_set(tmp_path):
    path = tmp_path / "adapters.yaml"
    source = AdapterFile(path)
    assert source.read() == AdapterSet() and source.error is None
    path.write_text("adapters: [{name: a, path: /a}]\n")
    first = source.read()
    assert first.paths() == {"a": "/a"}
    assert source.read() is first  # same bytes: not parsed again
    path.write_text("adapters: [{name: a, path: /a}, {name: a, path: /b}]\n")
    assert source.read() == first
    assert "adapter names must be unique; keeping the previous set" in source.error
    path.write_text("adapters: []\n")
    assert source.read() == AdapterSet() and source.error is None


# -- the reconciler's rounds ---------------------------------------------------------------


class ScriptedEngine:
    """vLLM's adapter endpoints in memory: a load fails while its path is in ``broken``."""

    def __init__(self) -> None:
        self.adapters: dict[str, str] = {}
        self.broken: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self.down = False

    async def loaded(self) -> dict[str, str]:
        if self.down:
            raise AdapterRequestError("/v1/models failed: ClientConnectorError")
        return dict(self.adapters)

    async def load(self, name: str, path: str) -> None:
        self.calls.append(("load", name))
        if name in self.adapters:
            raise AdapterRequestError(f"HTTP 400: The lora adapter '{name}' has already been loaded.", 400)
        if path in self.broken:
            raise AdapterRequestError(f"HTTP 404: Loading lora {name} failed: No adapter found for {path}", 404)
        self.adapters[name] = path

    async def unload(self, name: str) -> None:
        self.calls.append(("unload", name))
        if name not in self.adapters:
            raise AdapterRequestError(f"HTTP 404: The lora adapter '{name}' cannot be found.", 404)
        del self.adapters[name]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reconciler(tmp_path: Path, engine: ScriptedEngine, clock: Clock) -> tuple[AdapterReconciler, Path, StateStore]:
    path = tmp_path / "adapters.yaml"
    store = StateStore()
    lora = LoraConfig(adapters_file=str(path), retry_initial_s=2, retry_max_s=8)
    return AdapterReconciler(lora, engine, store, ["base"], clock=clock, monotonic=clock), path, store


def write(path: Path, **adapters: str) -> None:
    path.write_text(AdapterSet.model_validate(
        {"adapters": [{"name": n, "path": p} for n, p in adapters.items()]}).to_yaml())


def states(store: StateStore) -> dict[str, str]:
    return {a["name"]: a["state"] for a in store.snapshot()["adapters"]}


def run(coro):
    return asyncio.run(coro)


def test_rounds_load_added_unload_removed_and_reload_moved(tmp_path):
    engine, clock = ScriptedEngine(), Clock()
    rec, path, store = reconciler(tmp_path, engine, clock)
    write(path, a="/a", b="/b")
    run(rec.reconcile_once())
    assert engine.adapters == {"a": "/a", "b": "/b"}
    assert states(store) == {"a": "Loaded", "b": "Loaded"}
    assert store.snapshot()["adapters"][0]["loadedAt"] == 1000.0
    write(path, b="/b2", c="/c")
    engine.calls.clear()
    run(rec.reconcile_once())
    assert engine.calls == [("unload", "a"), ("unload", "b"), ("load", "b"), ("load", "c")]
    assert engine.adapters == {"b": "/b2", "c": "/c"}
    assert states(store) == {"b": "Loaded", "c": "Loaded"}
    engine.calls.clear()
    run(rec.reconcile_once())
    assert engine.calls == []  # converged: nothing sent


def test_failed_load_is_retried_with_capped_backoff_and_the_error_shown(tmp_path):
    engine, clock = ScriptedEngine(), Clock()
    engine.broken.add("/bad")
    rec, path, store = reconciler(tmp_path, engine, clock)
    write(path, bad="/bad")
    attempts = []
    for _ in range(30):  # 30 rounds 1 s apart: attempts at 0, 2, 6, 14, 22, 30 ...
        before = len(engine.calls)
        run(rec.reconcile_once())
        if len(engine.calls) > before:
            attempts.append(clock.now - 1000.0)
        clock.now += 1.0
    assert attempts == [0.0, 2.0, 6.0, 14.0, 22.0]
    status = store.snapshot()["adapters"][0]
    assert status["state"] == "Failed" and status["failures"] == 5
    assert status["lastError"] == "load failed: HTTP 404: Loading lora bad failed: No adapter found for /bad"
    assert status["nextRetryAt"] == 1000.0 + 22.0 + 8.0
    engine.broken.clear()
    clock.now = 1000.0 + 30.0
    run(rec.reconcile_once())
    status = store.snapshot()["adapters"][0]
    assert status["state"] == "Loaded" and status["failures"] == 0 and status["lastError"] is None
    assert store.metrics.lora_operations.labels("load", "failure")._value.get() == 5


def test_the_engine_is_the_truth_for_what_is_loaded(tmp_path):
    engine, clock = ScriptedEngine(), Clock()
    rec, path, store = reconciler(tmp_path, engine, clock)
    engine.adapters = {"a": "/a", "stray": "/s"}  # e.g. loaded by someone else
    write(path, a="/a")
    run(rec.reconcile_once())
    assert engine.calls == [("unload", "stray")]
    assert states(store) == {"a": "Loaded"}
    del engine.adapters["a"]  # the engine lost it
    run(rec.reconcile_once())
    assert engine.adapters == {"a": "/a"}


def test_an_unreachable_engine_or_a_bad_file_changes_nothing(tmp_path):
    engine, clock = ScriptedEngine(), Clock()
    rec, path, store = reconciler(tmp_path, engine, clock)
    write(path, a="/a")
    run(rec.reconcile_once())
    path.write_text("adapters: [{name: 'a b', path: /a}]\n")
    engine.calls.clear()
    run(rec.reconcile_once())
    assert engine.calls == [] and engine.adapters == {"a": "/a"}
    assert "adapters.0.name" in store.snapshot()["adaptersError"]
    engine.down = True
    write(path)
    run(rec.reconcile_once())
    assert engine.adapters == {"a": "/a"} and store.snapshot()["adaptersError"] is None


def test_an_adapter_named_like_the_base_model_fails_without_a_request(tmp_path):
    engine, clock = ScriptedEngine(), Clock()
    rec, path, store = reconciler(tmp_path, engine, clock)
    write(path, base="/x", ok="/ok")
    run(rec.reconcile_once())
    assert engine.calls == [("load", "ok")]
    status = store.snapshot()["adapters"][0]
    assert status["name"] == "base" and status["state"] == "Failed"
    assert "is the base model's served name" in status["lastError"]
    write(path, ok="/ok")
    run(rec.reconcile_once())
    assert states(store) == {"ok": "Loaded"}


def test_metrics_count_adapters_by_state(tmp_path):
    engine, clock = ScriptedEngine(), Clock()
    engine.broken.add("/bad")
    rec, path, store = reconciler(tmp_path, engine, clock)
    write(path, a="/a", bad="/bad")
    run(rec.reconcile_once())
    gauge = store.metrics.lora_adapters
    assert gauge.labels("Loaded")._value.get() == 1 and gauge.labels("Failed")._value.get() == 1


def test_engine_calls_are_flagged_while_under_way_and_briefly_after(tmp_path):
    engine, clock = ScriptedEngine(), Clock()
    rec, path, _ = reconciler(tmp_path, engine, clock)
    seen = []

    async def load(name: str, path: str) -> None:
        seen.append(rec.engine_call_recent())
        await ScriptedEngine.load(engine, name, path)

    engine.load = load
    write(path, a="/a")
    assert rec.engine_call_recent() is False
    run(rec.reconcile_once())
    assert seen == [True]
    assert rec.engine_call_recent() is True  # its log lines may still be on their way
    clock.now += 2.0
    assert rec.engine_call_recent() is False


def test_a_round_that_breaks_unexpectedly_is_logged_not_raised(tmp_path, caplog):
    engine, clock = ScriptedEngine(), Clock()
    rec, path, _ = reconciler(tmp_path, engine, clock)

    async def broken() -> dict[str, str]:
        raise KeyError("data")

    engine.loaded = broken
    write(path, a="/a")
    run(rec.round())
    assert "adapter reconcile round failed: KeyError('data')" in caplog.text


def test_a_downloaded_adapter_is_loaded_only_once_its_cache_marker_says_the_files_are_there(tmp_path):
    from ascend_runtime.cachelayout import CacheMarker, FetchRequest, snapshot_files
    from ascend_runtime.fetch import write_marker

    request = FetchRequest(repo_id="org/sql-lora", cache_root=str(tmp_path / "cache"))
    snapshot = Path(request.model_dir)
    engine, clock = ScriptedEngine(), Clock()
    rec, path, store = reconciler(tmp_path, engine, clock)
    path.write_text(AdapterSet.model_validate({"adapters": [
        {"name": "sql", "path": str(snapshot), "cacheMarker": str(request.marker_path)}]}).to_yaml())
    run(rec.reconcile_once())
    assert engine.calls == []  # no marker: the engine is not asked
    status = store.snapshot()["adapters"][0]
    assert status["state"] == "Failed"
    assert status["lastError"] == f"the adapter's download is not complete: no marker at {request.marker_path}"

    snapshot.mkdir(parents=True)
    (snapshot / "adapter_config.json").write_text('{"r": 8}')
    (snapshot / "adapter_model.safetensors").write_bytes(b"x" * 64)
    present = snapshot_files(snapshot, request.patterns())
    write_marker(request, CacheMarker.now(request, "c0ffee", len(present), sum(present.values())))
    (snapshot / "adapter_model.safetensors").write_bytes(b"x" * 10)  # not what the marker lists
    clock.now += 2.0  # the first retry
    run(rec.reconcile_once())
    assert engine.calls == []
    assert store.snapshot()["adapters"][0]["lastError"].startswith("the adapter's download is incomplete: ")

    (snapshot / "adapter_model.safetensors").write_bytes(b"x" * 64)
    clock.now += 4.0  # the second retry
    run(rec.reconcile_once())
    assert engine.calls == [("load", "sql")] and engine.adapters == {"sql": str(snapshot)}
    assert states(store) == {"sql": "Loaded"}


def test_an_adapter_file_the_engine_user_cannot_read_is_named_with_its_mode(tmp_path: Path) -> None:
    from ascend_runtime.adapters import access_problem

    directory = tmp_path / "sql"
    directory.mkdir()
    (directory / "adapter_config.json").write_text("{}")
    weights = directory / "adapter_model.safetensors"
    weights.write_bytes(b"x")
    weights.chmod(0o600)
    adapter = Adapter(name="sql", path=str(directory))
    if os.getuid() == 0:  # root reads every file: the real check says nothing
        assert access_problem(adapter) is None
    problem = access_problem(adapter, readable=lambda path: not path.endswith(".safetensors"))
    assert problem is not None
    assert "adapter_model.safetensors in " + str(directory) in problem
    assert "mode 0600" in problem and "adapter_config.json" not in problem.split(" in ")[0]
    assert access_problem(adapter, readable=lambda path: True) is None
    # No directory: vLLM's own "No adapter found" names the path.
    assert access_problem(Adapter(name="x", path=str(tmp_path / "missing")), readable=lambda path: False) is None
