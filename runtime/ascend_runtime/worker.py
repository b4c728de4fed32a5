"""A worker of a multi-node group: follow the leader's graph mode; exit with the group.

A worker (:class:`WorkerRole`) runs no ladder of its own. It waits for the leader's mode,
launches its process for that mode (mp: the headless engine; Ray: ``ray start --block``), and
polls the leader's ``/state`` every ``leader_poll_s`` seconds. It relaunches, uncounted, when the
leader fell back or relaunched its engine (a new DP handshake,
:func:`~ascend_runtime.distributed.worker_should_relaunch`). A crash of its own process ends the
worker (phase Failed, exit 3 or 4): a rank relaunched into a running group cannot rejoin its
collectives (the leader's engine would wait for HCCL's connect timeout), so the pod exits and
the LeaderWorkerSet recreates the whole group (``RecreateGroupOnPodRestart``). A failed leader
ends the worker too. A failed pre-command is relaunched with backoff and counted. It is ready while :func:`~ascend_runtime.distributed.group_member_ready` holds.
Workers run no warmup: the warmup requests reach the leader's API server, which spreads them
over every DP rank or Ray worker of the group, so the leader's warmup drives the whole group. On
SIGTERM a worker keeps its process up while the leader drains (its ranks serve the leader's
in-flight requests), for at most ``engine.shutdownTimeoutS``, then stops it and exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from ascend_runtime.config import GraphMode, RuntimePhase, RuntimeState
from ascend_runtime.distributed import (
    LeaderFailedError,
    LeaderWaitError,
    LeaderWaitTimeout,
    fetch_leader_state,
    group_member_ready,
    leader_mode_for_worker,
    leader_state_url,
    plan_distributed,
    wait_for_leader_mode,
    worker_should_relaunch,
)
from ascend_runtime.engine import EngineExit, EngineProcess
from ascend_runtime.flags import graph_ladder
from ascend_runtime.launch import LaunchKind, LaunchResult
from ascend_runtime.logclass import Event, EventKind
from ascend_runtime.rolehost import RoleHost

log = logging.getLogger(__name__)

#: Workers draining: seconds between checks whether the leader still drains.
DRAIN_POLL_S = 0.5


class WorkerRole:
    """One worker launch per leader engine; the leader's state decides when to relaunch."""

    noun = "worker process"

    def __init__(self, host: RoleHost) -> None:
        self.host = host
        self.config = host.config
        self.store = host.store
        url = leader_state_url(self.config, host.distributed)
        assert url is not None  # resolve_distributed requires the leader's address on a worker
        self.url = url
        self.store.state.leader = url
        self.ladder: list[GraphMode] = graph_ladder(self.config, host.versions)
        #: The leader state the next launch is for; None: wait for the leader's mode first.
        self._next: RuntimeState | None = None
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> WorkerRole:
        self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use the role as `async with`"
        return self._session

    def advance(self, result: LaunchResult) -> bool:
        """A relaunch for the leader's sake is not a failure of this pod: follow at once."""

        if result.kind is not LaunchKind.FOLLOW:
            return False
        log.info("relaunching for the leader: %s", result.reason)
        self._next = result.leader
        return True

    async def launch(self) -> LaunchResult:
        leader, self._next = self._next, None
        if leader is None:
            self.store.set_phase(RuntimePhase.LOADING, f"waiting for the leader's graph mode at {self.url}")
            try:
                stopped, leader = await self.host.until_stopped(wait_for_leader_mode(
                    self.url, self.config.runtime.ready_timeout_s, self.session,
                    interval_s=self.host.leader_poll_s))
            except (LeaderFailedError, LeaderWaitTimeout) as error:
                return LaunchResult(LaunchKind.LEADER_FAILED, str(error))
            if stopped or leader is None:
                return LaunchResult(LaunchKind.STOPPED, "stopped while waiting for the leader")
        return await self._launch_for(leader)

    def _on_event(self, event: Event) -> None:
        # The leader owns the ladder: a failure on a worker shows in the leader's engine too
        # (the ranks share collectives), and the leader's fallback reaches this worker.
        if event.kind in (EventKind.CAPTURE_FAILURE, EventKind.REPLAY_FAILURE, EventKind.DEVICE_OOM):
            log.warning("worker engine reported %s (the leader decides the fallback): %s",
                        event.kind.value, event.text.strip()[:200])

    def _phase(self, phase: RuntimePhase, message: str) -> None:
        if not self.host.stop_requested.is_set():  # draining stays draining
            self.store.set_phase(phase, message)

    async def _launch_for(self, leader: RuntimeState) -> LaunchResult:
        """One launch of this worker's process for ``leader`` (a state with a mode to follow)."""

        host, url = self.host, self.url
        target = leader_mode_for_worker(leader)
        assert target is not None  # wait_for_leader_mode and worker_should_relaunch ensure it
        plan = plan_distributed(self.config, host.versions, target, host.env)
        for warning in plan.warnings:
            log.warning("engine flags: %s", warning)
        if plan.engine_argv is not None:
            leading, argv, what = plan.pre_commands, plan.engine_argv, "headless engine"
        else:  # Ray: the last pre-command (ray start --block) is the long-running process
            leading, argv, what = plan.pre_commands[:-1], plan.pre_commands[-1], "Ray worker"
        if leading:
            failed = await host.run_pre_commands(leading, plan.env)
            if failed is not None:
                return failed
        following = plan.follow_leader_mode
        if following:
            assert plan.mode is not None
            if plan.mode is not target:
                log.warning("the leader runs %s, which this worker renders as %s", target.value, plan.mode.value)
            self.store.set_mode(plan.mode, self.ladder.index(plan.mode) if plan.mode in self.ladder else 0,
                                self.ladder)
            self.store.state.leader_mode = target
        launched_for = leader.engine_pid
        self.store.state.engine_pid = None
        mode_text = f" in {target.value} mode" if following else ""
        self.store.set_phase(RuntimePhase.LOADING, f"launching the {what}{mode_text} for the leader at {url}")
        engine, exit_task = await host.start_engine(argv, plan.env, self._on_event, "worker-exit",
                                                   mode=plan.mode or target)
        stop_wait = asyncio.create_task(host.stop_requested.wait())
        monitor: asyncio.Task[None] | None = None
        served_since: float | None = None

        def result(kind: LaunchKind, reason: str, **extra) -> LaunchResult:
            served_s = 0.0 if served_since is None else time.monotonic() - served_since
            return LaunchResult(kind, reason, served=served_since is not None, served_s=served_s, **extra)

        try:
            while True:
                done, _ = await asyncio.wait({exit_task, stop_wait}, timeout=host.leader_poll_s,
                                             return_when=asyncio.FIRST_COMPLETED)
                if stop_wait in done:
                    await self._drain(engine, launched_for)
                    return result(LaunchKind.STOPPED, "stopped")
                if exit_task in done:
                    kind, reason, extra = await self._exit_result(
                        exit_task.result(), target if following else None, launched_for)
                    return result(kind, reason, **extra)
                try:
                    state = await fetch_leader_state(url, self.session)
                except LeaderWaitError as error:
                    self._phase(RuntimePhase.LOADING, f"leader unreachable: {error}")
                    continue
                if state.phase is RuntimePhase.FAILED:
                    return result(LaunchKind.LEADER_FAILED, f"leader at {url} failed: {state.message or 'no message'}")
                if launched_for is None and state.engine_pid is not None and (
                        not following or leader_mode_for_worker(state) is target):
                    launched_for = state.engine_pid  # launched while the leader's engine was starting
                if following and worker_should_relaunch(target, state, launched_for_pid=launched_for):
                    now = leader_mode_for_worker(state)
                    assert now is not None
                    why = (f"the leader moved from {target.value} to {now.value}" if now is not target
                           else f"the leader relaunched its engine (pid {launched_for} -> {state.engine_pid})")
                    return result(LaunchKind.FOLLOW, why, leader=state)
                ready = (group_member_ready(state, target, engine.running()) if following
                         else engine.running() and state.ready)
                if ready:
                    if served_since is None:
                        served_since = time.monotonic()
                        host.health.mark_baseline()
                        # Headless ranks and Ray workers serve no HTTP: nothing to poll but memory and metrics.
                        monitor = asyncio.create_task(host.monitor(poll_health=False), name="health-monitor")
                    mode_part = f"{target.value} mode, " if following else ""
                    self._phase(RuntimePhase.READY, f"serving ({mode_part}leader at {url} ready)")
                else:
                    detail = f"leader phase {state.phase.value}" + (f": {state.message}" if state.message else "")
                    self._phase(RuntimePhase.LOADING, f"{what} up; waiting for the group ({detail})")
        finally:
            stop_wait.cancel()
            if monitor is not None:
                monitor.cancel()
                await host.finish_task(monitor)
            await host.end_engine(engine, exit_task)

    async def _exit_result(self, exited: EngineExit, target: GraphMode | None, launched_for: int | None
                           ) -> tuple[LaunchKind, str, dict]:
        """A crash of this worker, or an exit caused by the leader's engine going away."""

        outcome = exited.outcome.outcome
        reason = f"worker process exited with code {exited.returncode} ({outcome.value})"
        crash = (LaunchKind.ENGINE_LOST, reason, {"outcome": outcome})
        if target is None:  # Ray workers: their process belongs to no particular leader engine
            return crash
        try:
            state = await fetch_leader_state(self.url, self.session)
        except LeaderWaitError:
            return crash
        if state.phase is RuntimePhase.FAILED:
            return LaunchKind.LEADER_FAILED, f"leader at {self.url} failed: {state.message or 'no message'}", {}
        moved_on = leader_mode_for_worker(state) is not target or state.engine_pid != launched_for
        if launched_for is not None and moved_on:
            # The DP ranks die with the leader's engine; relaunch for its next one, uncounted.
            follow_state = state if leader_mode_for_worker(state) is not None else None
            return LaunchKind.FOLLOW, f"{reason} after the leader's engine ended", {"leader": follow_state}
        return crash

    async def _drain(self, engine: EngineProcess, launched_for: int | None) -> None:
        """Keep this worker's ranks up while the leader drains requests they serve, then stop."""

        budget = float(self.config.engine.shutdown_timeout_s)
        started = time.monotonic()
        while time.monotonic() - started < budget:
            try:
                state = await fetch_leader_state(self.url, self.session, timeout_s=2.0)
            except LeaderWaitError:
                break  # the leader is gone
            if state.phase is not RuntimePhase.DRAINING or state.engine_pid is None:
                break  # not stopping (only this pod is), or its engine has already stopped
            if launched_for is not None and state.engine_pid != launched_for:
                break
            await asyncio.sleep(DRAIN_POLL_S)
        await engine.stop(self.host.failed_engine_stop_s)
        log.info("worker stopped after %.1f s", time.monotonic() - started)
