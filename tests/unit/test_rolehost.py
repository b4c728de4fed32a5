"""The roles' view of the supervisor (``RoleHost``): the supervisor satisfies it, and what a launch
decided reaches the supervisor as an argument, not as a write into it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from ascend_runtime.config import EngineConfig
from ascend_runtime.rolehost import RoleHost
from ascend_runtime.state import StateStore
from ascend_runtime.supervisor import Supervisor
from ascend_runtime.versions import Versions


def supervisor() -> Supervisor:
    config = EngineConfig.model_validate({"model": {"path": "/m"}, "engine": {"shutdownTimeoutS": 1}})
    return Supervisor(config, Versions(platform="cpu"), StateStore(), env={}, echo_engine=False)


def test_the_supervisor_is_a_role_host() -> None:
    assert isinstance(supervisor(), RoleHost)


def test_a_role_host_lacking_a_member_is_not_one() -> None:
    # The check above would pass for anything if the protocol listed nothing.
    assert not isinstance(SimpleNamespace(config=None, store=None), RoleHost)


async def test_the_supervisor_drain_waits_for_requests_only_when_the_engine_does_not_drain_itself() -> None:
    sup = supervisor()
    polls: list[int] = []

    async def in_flight() -> float:
        polls.append(1)
        return 0.0

    async def stop(_grace: float) -> None:
        return None

    sup._requests_in_flight = in_flight  # type: ignore[method-assign]
    engine = SimpleNamespace(process=None, running=lambda: False, stop=stop)
    exited = asyncio.create_task(asyncio.sleep(0))
    await sup.drain(engine, exited, engine_drains=True)  # type: ignore[arg-type]
    assert polls == []  # --shutdown-timeout: the engine drains, the runtime only waits for its exit
    await sup.drain(engine, exited, engine_drains=False)  # type: ignore[arg-type]
    assert polls == [1]  # an older vLLM: the runtime counts the requests in flight itself


def _host_uses(module) -> tuple[set[str], list[str]]:
    """The ``host.X`` / ``self.host.X`` members a role module reads, and the lines that assign one."""

    import ast
    import inspect

    def on_host(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "host") or (
            isinstance(node, ast.Attribute) and node.attr == "host"
            and isinstance(node.value, ast.Name) and node.value.id == "self")

    tree = ast.parse(inspect.getsource(module))
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and on_host(node.value)}
    writes = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and on_host(part.value):
                    writes.append(f"line {part.lineno}: host.{part.attr}")
    return used, writes


def test_the_leader_and_worker_use_only_the_role_host_and_write_nothing_into_it() -> None:
    from ascend_runtime import leader, worker

    members = {name for name in vars(RoleHost) if not name.startswith("_")}
    for module in (leader, worker):
        used, writes = _host_uses(module)
        assert used, f"{module.__name__} no longer names its host `host`: this check would see nothing"
        assert used <= members, f"{module.__name__} uses {sorted(used - members)}, not in RoleHost"
        assert writes == [], f"{module.__name__} writes into its host: {writes}"
