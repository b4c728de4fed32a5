"""The supervisor: preflight, launch, classify, fall back, warm up, serve, drain.

One engine child at a time. Each launch runs one rung of the graph-mode ladder
(:func:`ascend_runtime.flags.graph_ladder`); its outcome decides the next step:

==================================  ===============================================
outcome of a launch                 next step
==================================  ===============================================
graph capture failure (start-up)    one rung down at once (no backoff), if allowed
replay failures while serving       counted; ``graph.replayFailureThreshold`` of
                                    them within the window -> one rung down
crash, OOM, warmup failure, timeout relaunch the same rung after a backoff, counted;
                                    ``runtime.restart.maxRestarts`` -> exit 3 or 4
SIGTERM                             readiness fails, in-flight requests drain, exit 0
==================================  ===============================================

The capture-failure path does not wait for the engine to exit (vLLM can take a while to
tear down its workers): the log classifier's event triggers the relaunch as soon as the
failure line is printed.

Multi-node replicas (``distributed.nodes`` > 1, one LeaderWorkerSet group; the commands come
from :func:`ascend_runtime.distributed.plan_distributed`):

* The leader runs the loop above. Before its first engine it runs the plan's pre-commands
  (Ray: ``ray start --head``; once, the Ray head outlives engine relaunches), and before every
  engine, when the plan says so, polls ``workers_ready_command`` until every node has joined
  (phase Loading, "waiting for N workers", bounded by ``runtime.readyTimeoutS``). Its graph mode
  is published on ``/state`` from the start of each launch, its ``enginePid`` while that engine
  runs (None in between).
* A worker (:meth:`Supervisor._run_worker`) runs no ladder of its own. It waits for the
  leader's mode, launches its process for that mode (mp: the headless engine; Ray: ``ray start
  --block``), and polls the leader's ``/state`` every :data:`LEADER_POLL_S` seconds. It relaunches,
  uncounted, when the leader fell back or relaunched its engine (a new DP handshake,
  :func:`~ascend_runtime.distributed.worker_should_relaunch`); a crash of its own process is
  relaunched with backoff and counted as on the leader; a failed leader ends the worker too (the
  group restarts). It is ready while :func:`~ascend_runtime.distributed.group_member_ready`
  holds. Workers run no warmup: the warmup requests reach the leader's API server, which
  spreads them over every DP rank or Ray worker of the group, so the leader's warmup drives the
  whole group. On SIGTERM a worker keeps its process up while the leader drains (its ranks
  serve the leader's in-flight requests), for at most ``engine.shutdownTimeoutS``, then stops it
  and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import aiohttp

from ascend_runtime.config import EngineConfig, GraphMode, RuntimePhase, RuntimeState, WarmupReport
from ascend_runtime.distributed import (
    LeaderFailedError,
    LeaderWaitError,
    LeaderWaitTimeout,
    fetch_leader_state,
    group_member_ready,
    leader_mode_for_worker,
    leader_state_url,
    plan_distributed,
    resolve_distributed,
    wait_for_leader_mode,
    worker_should_relaunch,
)
from ascend_runtime.engine import EngineExit, EngineProcess
from ascend_runtime.flags import graph_ladder
from ascend_runtime.logclass import Event, EventKind, Outcome
from ascend_runtime.state import StateStore
from ascend_runtime.versions import Versions
from ascend_runtime.warmup import run_warmup

log = logging.getLogger(__name__)

#: Exit codes of `ascend-llm run` (the README's table).
EXIT_STOPPED = 0  # stopped by SIGTERM/SIGINT after draining
EXIT_CONFIG = 2  # the engine config is invalid
EXIT_START_FAILED = 3  # the engine never became ready: every rung and restart used up
EXIT_CRASHED = 4  # the engine crashed too often while serving
EXIT_PREFLIGHT = 5  # devices or memory never became available

#: Seconds between polls of the engine's /health while it starts (a poll is one local GET).
HEALTH_POLL_S = 0.25
#: Seconds between scrapes of the engine's /metrics for the hang detector.
METRICS_POLL_S = 5.0
#: Seconds a failed engine gets to exit on its own before it is killed.
FAILED_ENGINE_STOP_S = 10.0
#: The same for an engine that failed its start (capture failure, warmup failure, start budget):
#: it serves nothing, so there is nothing to drain, and every second delays the next rung.
FAILED_START_STOP_S = 2.0
#: Seconds the engine gets, beyond its drain budget, to exit after SIGTERM; the operator's
#: terminationGracePeriodSeconds leaves 15 s beyond preStop + drain for this and the stop.
DRAIN_EXIT_MARGIN_S = 5.0
#: Seconds between preflight retries while devices are busy or missing.
PREFLIGHT_RETRY_S = 10.0
#: Workers: seconds between polls of the leader's /state.
LEADER_POLL_S = 2.0
#: Workers draining: seconds between checks whether the leader still drains.
DRAIN_POLL_S = 0.5
#: Seconds a pre-command (``ray start --head``) may run before it counts as failed.
PRE_COMMAND_TIMEOUT_S = 300.0
#: Seconds one run of the workers-ready command may take.
READY_CHECK_TIMEOUT_S = 60.0
#: Seconds between runs of the workers-ready command.
WORKERS_POLL_S = 3.0
#: Output lines of a failed command quoted in the launch's reason.
COMMAND_TAIL_LINES = 15

T = TypeVar("T")


def _workers(count: int) -> str:
    return "1 worker" if count == 1 else f"{count} workers"


@dataclass
class CommandRun:
    """How a pre-command or readiness check ended: ``returncode`` None = timed out or not started."""

    returncode: int | None
    output: str
    stopped: bool = False

    def tail(self) -> str:
        lines = self.output.strip().splitlines()[-COMMAND_TAIL_LINES:]
        return " | ".join(line.strip() for line in lines if line.strip()) or "no output"


@dataclass
class LaunchResult:
    # "stopped" | "fallback" | "crash"; workers also "follow" (the leader changed, relaunch
    # uncounted) and "leader_failed"
    kind: str
    reason: str
    outcome: Outcome | None = None
    served: bool = False  # reached Ready before it ended
    restart_reason: str = "crash"  # the metric label when the log shows no failure signature
    leader: RuntimeState | None = None  # "follow": the leader state to launch for next


async def _reap(task: asyncio.Task) -> None:
    """Wait for a cancelled helper task; its failure is logged, never raised into a shutdown."""

    await asyncio.wait({task})  # never raises the task's own exception
    if not task.cancelled() and task.exception() is not None:
        log.error("health monitor failed: %r", task.exception())


class HealthHooks:
    """What the supervisor needs from the leak/hang monitor; the default does nothing."""

    def start(self, engine_pid: int) -> None: ...
    def mark_baseline(self) -> None: ...
    def sample_memory(self) -> None: ...
    def observe_engine_metrics(self, text: str) -> None: ...
    def verdict(self) -> tuple[bool, list[str], dict]:
        return True, [], {}


PreflightCheck = Callable[[], Awaitable[tuple[bool, str | None]]]


class Supervisor:
    def __init__(
        self,
        config: EngineConfig,
        versions: Versions,
        store: StateStore,
        *,
        health: HealthHooks | None = None,
        preflight: PreflightCheck | None = None,
        echo_engine: bool = True,
        env: Mapping[str, str] | None = None,
        leader_poll_s: float = LEADER_POLL_S,
    ) -> None:
        """``env`` is the pod's environment (LeaderWorkerSet's variables, ``POD_IP``); default
        ``os.environ``. Raises :class:`~ascend_runtime.config.ConfigError` when this pod cannot
        join its group (:func:`~ascend_runtime.distributed.resolve_distributed`)."""

        self.config = config
        self.versions = versions
        self.store = store
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.distributed = resolve_distributed(config.distributed, self.env)
        self.multi_node = self.distributed.nodes > 1
        self.leader_poll_s = leader_poll_s
        self._pre_commands_done = False
        if self.multi_node:
            store.state.role = self.distributed.role
        self.health = health or HealthHooks()
        self.preflight = preflight
        self.echo_engine = echo_engine
        self.engine: EngineProcess | None = None
        self.stop_requested = asyncio.Event()
        self._fallback = asyncio.Event()
        self._fallback_reason: str | None = None
        self._replay_failures: list[float] = []
        self._serving = False
        self._draining_task: asyncio.Task[None] | None = None
        self._shutdown_flag_supported = False

    # -- the public surface -------------------------------------------------------------
    @property
    def engine_base_url(self) -> str:
        host = self.config.engine.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://{host}:{self.config.engine.port}"

    def request_stop(self) -> None:
        if not self.stop_requested.is_set():
            log.info("stop requested")
            self.stop_requested.set()
            self.store.begin_drain()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop)

    async def engine_metrics_text(self) -> str | None:
        if self.engine is None or not self.engine.running():
            return None
        try:
            timeout = aiohttp.ClientTimeout(total=2)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                async with session.get(f"{self.engine_base_url}/metrics") as response:
                    if response.status == 200:
                        return await response.text()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None
        return None

    async def run(self) -> int:
        if self.config.runtime.preflight and self.preflight is not None:
            code = await self._run_preflight()
            if code is not None:
                return code
        if self.multi_node and self.distributed.role == "worker":
            return await self._run_worker()
        ladder = graph_ladder(self.config, self.versions)
        rung = 0
        restarts = 0
        served_before = False
        while True:
            if self.stop_requested.is_set():
                return EXIT_STOPPED
            mode = ladder[rung]
            result = await self._launch(mode, rung, ladder)
            served_before = served_before or result.served
            if result.kind == "stopped":
                return EXIT_STOPPED
            if result.kind == "fallback" and rung + 1 < len(ladder):
                next_mode = ladder[rung + 1]
                log.warning("graph mode %s failed (%s); falling back to %s", mode.value, result.reason,
                            next_mode.value)
                kind = result.outcome.value if result.outcome else "graph_failure"
                self.store.record_fallback(mode, next_mode, result.reason, kind)
                self._replay_failures.clear()  # they counted against the rung just left
                rung += 1
                continue
            restarts += 1
            if restarts > self.config.runtime.restart.max_restarts:
                self.store.set_phase(RuntimePhase.FAILED, f"engine failed {restarts} times; last: {result.reason}")
                self.store.set_live(False, [f"engine failed {restarts} times: {result.reason}"])
                return EXIT_CRASHED if served_before else EXIT_START_FAILED
            failed = result.outcome is not None and result.outcome.is_failure
            self.store.record_restart(result.outcome.value if failed else result.restart_reason)
            delay = min(
                self.config.runtime.restart.backoff_initial_s * (2 ** (restarts - 1)),
                self.config.runtime.restart.backoff_max_s,
            )
            self.store.set_phase(RuntimePhase.LOADING, f"restarting engine in {delay:.0f} s after: {result.reason}")
            log.warning("engine ended (%s); restart %d in %.1f s", result.reason, restarts, delay)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop_requested.wait(), timeout=delay)

    # -- preflight -------------------------------------------------------------------
    async def _run_preflight(self) -> int | None:
        assert self.preflight is not None
        self.store.set_phase(RuntimePhase.PREFLIGHT, "checking devices and memory")
        deadline = time.monotonic() + self.config.runtime.ready_timeout_s
        while True:
            ok, reason = await self.preflight()
            if ok:
                return None
            if time.monotonic() > deadline:
                self.store.set_phase(RuntimePhase.FAILED, f"preflight never passed: {reason}")
                return EXIT_PREFLIGHT
            self.store.set_phase(RuntimePhase.WAITING_FOR_NPU, reason)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop_requested.wait(), timeout=PREFLIGHT_RETRY_S)
            if self.stop_requested.is_set():
                return EXIT_STOPPED

    # -- one launch ----------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        kind = event.kind
        if kind == EventKind.CAPTURING_GRAPHS and not self._serving:
            self.store.set_phase(RuntimePhase.CAPTURING_GRAPHS, event.text[:200])
        elif kind == EventKind.LOADING and not self._serving:
            self.store.set_phase(RuntimePhase.LOADING, event.text[:200])
        elif kind == EventKind.CAPTURE_FAILURE and not self._serving:
            self._trigger_fallback(f"graph capture failed: {event.text.strip()[:300]}")
        elif kind == EventKind.REPLAY_FAILURE:
            now = time.monotonic()
            window = self.config.graph.replay_failure_window_s
            self._replay_failures = [t for t in self._replay_failures if now - t <= window] + [now]
            log.warning("graph replay failure %d/%d in %d s: %s", len(self._replay_failures),
                        self.config.graph.replay_failure_threshold, window, event.text.strip()[:200])
            if len(self._replay_failures) >= self.config.graph.replay_failure_threshold:
                self._trigger_fallback(
                    f"{len(self._replay_failures)} graph replay failures within {window} s: "
                    f"{event.text.strip()[:200]}"
                )

    def _trigger_fallback(self, reason: str) -> None:
        if not self.config.graph.fallback or self._fallback.is_set():
            return
        self._fallback_reason = reason
        self._fallback.set()

    async def _launch(self, mode: GraphMode, rung: int, ladder: list[GraphMode]) -> LaunchResult:
        plan = plan_distributed(self.config, self.versions, mode, self.env)
        for warning in plan.warnings:
            log.warning("engine flags: %s", warning)
        assert plan.engine_argv is not None  # only Ray workers run no engine
        self._shutdown_flag_supported = "--shutdown-timeout" in plan.engine_argv
        if plan.pre_commands and not self._pre_commands_done:
            # Before the mode is published: workers start only once the leader's side is up.
            failed = await self._run_pre_commands(plan.pre_commands, plan.env)
            if failed is not None:
                return failed
            self._pre_commands_done = True
        self.store.state.engine_pid = None  # workers: a launch in progress has no engine yet
        self.store.set_mode(mode, rung, ladder)
        if plan.wait_for_workers and plan.workers_ready_command is not None:
            waited = await self._wait_for_workers(plan.workers_ready_command, plan.env)
            if waited is not None:
                return waited
        message = f"launching the engine in {mode.value} mode"
        if self.multi_node:
            message += f"; it serves once {_workers(self.distributed.nodes - 1)} joined"
        self.store.set_phase(RuntimePhase.LOADING, message)
        self._fallback = asyncio.Event()
        self._fallback_reason = None
        self._serving = False
        launched = time.monotonic()
        engine, exit_task = await self._start_engine(plan.engine_argv, plan.env, self._on_event, "engine-exit")
        try:
            result = await self._start_phase(engine, exit_task, launched)
            if result is not None:
                return result
            return await self._serve_phase(engine, exit_task)
        finally:
            # Always: also when the API server has exited, its engine core may live on.
            await engine.stop(FAILED_ENGINE_STOP_S)
            if not exit_task.done():
                exit_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await exit_task
            if self.store.state.engine_pid == engine.pid:
                self.store.state.engine_pid = None

    # -- commands around the engine (multi-node) --------------------------------------------
    async def _until_stopped(self, awaitable: Awaitable[T]) -> tuple[bool, T | None]:
        """Run ``awaitable`` unless a stop comes first: ``(stopped, result)``."""

        task = asyncio.ensure_future(awaitable)
        stop_wait = asyncio.create_task(self.stop_requested.wait())
        try:
            await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task.cancelled():
            return True, None
        return False, task.result()

    async def _run_command(self, argv: list[str], env: Mapping[str, str], timeout: float) -> CommandRun:
        """Run ``argv`` to completion in its own process group; killed on timeout or stop.

        The output goes to a file, not a pipe: ``ray start --head`` leaves daemons behind that
        would hold a pipe open long after the command itself exited.
        """

        full_env = dict(os.environ)
        full_env.update(env)
        with tempfile.TemporaryFile() as output:
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv, env=full_env, stdin=asyncio.subprocess.DEVNULL, stdout=output,
                    stderr=asyncio.subprocess.STDOUT, start_new_session=True,
                )
            except OSError as error:
                return CommandRun(None, f"cannot start {argv[0]}: {error.strerror or error}")
            stopped, _ = await self._until_stopped(self._wait_process(process, timeout))
            if process.returncode is None:  # timed out or stopped
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
                returncode = None
            else:
                returncode = process.returncode
            output.seek(0)
            text = output.read().decode("utf-8", errors="replace")
        if self.echo_engine and text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()
        return CommandRun(returncode, text, stopped)

    @staticmethod
    async def _wait_process(process: asyncio.subprocess.Process, timeout: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(process.wait(), timeout)

    async def _run_pre_commands(self, commands: list[list[str]], env: Mapping[str, str]) -> LaunchResult | None:
        """Each command in order; the first failure is a failed launch naming it, with its output."""

        for argv in commands:
            shown = " ".join(argv)
            self.store.set_phase(RuntimePhase.LOADING, f"running {shown}")
            log.info("running pre-command: %s", shown)
            run = await self._run_command(argv, env, PRE_COMMAND_TIMEOUT_S)
            if run.stopped:
                return LaunchResult("stopped", f"stop requested while running {shown}")
            if run.returncode != 0:
                ended = (f"exited with code {run.returncode}" if run.returncode is not None
                         else f"did not finish within {PRE_COMMAND_TIMEOUT_S:.0f} s")
                return LaunchResult("crash", f"pre-command `{shown}` {ended}: {run.tail()}",
                                    restart_reason="pre_command_failed")
        return None

    async def _wait_for_workers(self, check: list[str], env: Mapping[str, str]) -> LaunchResult | None:
        """Run ``check`` until it exits 0, for at most ``runtime.readyTimeoutS``."""

        workers = self.distributed.nodes - 1
        budget = self.config.runtime.ready_timeout_s
        deadline = time.monotonic() + budget
        self.store.set_phase(RuntimePhase.LOADING, f"waiting for {_workers(workers)}")
        last = "not checked yet"
        while True:
            run = await self._run_command(check, env, READY_CHECK_TIMEOUT_S)
            if run.stopped:
                return LaunchResult("stopped", "stop requested while waiting for the workers")
            if run.returncode == 0:
                log.info("%s joined: %s", _workers(workers), run.tail())
                return None
            last = run.tail()
            self.store.set_phase(RuntimePhase.LOADING, f"waiting for {_workers(workers)}: {last}")
            if time.monotonic() >= deadline:
                return LaunchResult("crash", f"{_workers(workers)} did not join within runtime.readyTimeoutS "
                                             f"({budget} s); last check: {last}", restart_reason="workers_timeout")
            stopped, _ = await self._until_stopped(asyncio.sleep(WORKERS_POLL_S))
            if stopped:
                return LaunchResult("stopped", "stop requested while waiting for the workers")

    async def _start_engine(self, argv: list[str], env: dict[str, str], on_event: Callable[[Event], None],
                            name: str) -> tuple[EngineProcess, asyncio.Task[EngineExit]]:
        """Start the child, point the health monitor at it, and watch for its exit."""

        engine = EngineProcess(argv, env, on_event, echo=self.echo_engine)
        self.engine = engine
        await engine.start()
        assert engine.pid is not None
        self.store.state.engine_pid = engine.pid
        self.health.start(engine.pid)
        self.store.set_live(True, [])  # verdicts about the previous engine do not carry over
        return engine, asyncio.create_task(engine.wait(), name=name)

    def _exit_result(self, exited: EngineExit, served: bool) -> LaunchResult:
        outcome = exited.outcome.outcome
        reason = f"engine exited with code {exited.returncode} ({outcome.value})"
        if outcome == Outcome.GRAPH_CAPTURE_FAILURE and not served and self.config.graph.fallback:
            return LaunchResult("fallback", reason, outcome, served)
        if self._fallback.is_set():
            return LaunchResult("fallback", self._fallback_reason or reason, outcome, served)
        return LaunchResult("crash", reason, outcome, served)

    async def _start_phase(self, engine: EngineProcess, exit_task: asyncio.Task, launched: float
                           ) -> LaunchResult | None:
        deadline = launched + self.config.runtime.ready_timeout_s
        stop_wait = asyncio.create_task(self.stop_requested.wait())
        fallback_wait = asyncio.create_task(self._fallback.wait())
        healthy = asyncio.create_task(self._wait_healthy(deadline))
        try:
            done, _ = await asyncio.wait({exit_task, stop_wait, fallback_wait, healthy},
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stop_wait, fallback_wait, healthy):
                if not task.done():
                    task.cancel()
        if stop_wait in done:
            await engine.stop(FAILED_ENGINE_STOP_S)
            return LaunchResult("stopped", "stop requested during start-up")
        if fallback_wait in done:
            reason = self._fallback_reason or "graph capture failed"
            await engine.stop(FAILED_START_STOP_S)
            return LaunchResult("fallback", reason, Outcome.GRAPH_CAPTURE_FAILURE)
        if exit_task in done:
            return self._exit_result(exit_task.result(), served=False)
        if not healthy.result():
            await engine.stop(FAILED_START_STOP_S)
            return LaunchResult("crash", f"engine not healthy within runtime.readyTimeoutS "
                                         f"({self.config.runtime.ready_timeout_s} s)", restart_reason="start_timeout")
        # Warmup, raced against the engine dying or a stop.
        self.store.set_phase(RuntimePhase.WARMING_UP, "engine up; warming up")
        self.store.set_warmup(WarmupReport(outcome="running"))
        if self.config.warmup.enabled:
            model = self.config.model.served_name or self.config.model.path
            warm = asyncio.create_task(run_warmup(
                self.engine_base_url, model, self.config.warmup,
                self.config.engine.max_model_len, self.config.engine.max_num_seqs,
            ))
            stop_wait = asyncio.create_task(self.stop_requested.wait())
            try:
                done, _ = await asyncio.wait({warm, exit_task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop_wait.cancel()
                if not warm.done():
                    warm.cancel()
            if stop_wait in done and warm not in done:
                await engine.stop(FAILED_ENGINE_STOP_S)
                return LaunchResult("stopped", "stop requested during warmup")
            if exit_task in done and warm not in done:
                return self._exit_result(exit_task.result(), served=False)
            result = warm.result()
            report = WarmupReport(outcome="succeeded" if result.ok else "failed", seconds=round(result.seconds, 3),
                                  requests=result.requests, reason=result.reason)
            self.store.set_warmup(report)
            if not result.ok:
                await engine.stop(FAILED_START_STOP_S)
                return LaunchResult("crash", f"warmup failed: {result.reason}", restart_reason="warmup_failed")
            log.info("warmup done: %d requests in %.1f s", result.requests, result.seconds)
        else:
            self.store.set_warmup(WarmupReport(outcome="skipped"))
        self.store.metrics.startup_seconds.set(time.monotonic() - launched)
        return None

    async def _wait_healthy(self, deadline: float) -> bool:
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while time.monotonic() < deadline:
                try:
                    async with session.get(f"{self.engine_base_url}/health") as response:
                        if response.status == 200:
                            return True
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    pass
                await asyncio.sleep(HEALTH_POLL_S)
        return False

    async def _serve_phase(self, engine: EngineProcess, exit_task: asyncio.Task) -> LaunchResult:
        self._serving = True
        self.health.mark_baseline()
        self.store.set_phase(RuntimePhase.READY, f"serving in {self.store.state.mode.value} mode"
                             if self.store.state.mode else "serving")
        monitor = asyncio.create_task(self._monitor(), name="health-monitor")
        stop_wait = asyncio.create_task(self.stop_requested.wait())
        fallback_wait = asyncio.create_task(self._fallback.wait())
        try:
            done, _ = await asyncio.wait({exit_task, stop_wait, fallback_wait}, return_when=asyncio.FIRST_COMPLETED)
            if stop_wait in done:
                await self._drain(engine, exit_task)
                return LaunchResult("stopped", "stopped after draining", served=True)
            if fallback_wait in done:
                await engine.stop(FAILED_ENGINE_STOP_S)
                return LaunchResult("fallback", self._fallback_reason or "graph replay failures",
                                    Outcome.GRAPH_REPLAY_FAILURE, served=True)
            return self._exit_result(exit_task.result(), served=True)
        finally:
            for task in (monitor, stop_wait, fallback_wait):
                task.cancel()
            await _reap(monitor)
            self._serving = False

    async def _monitor(self) -> None:
        """Feed the leak and hang detectors; turn their verdict into liveness."""

        loop = asyncio.get_running_loop()
        interval = min(self.config.health.leak.sample_interval_s, METRICS_POLL_S)
        last_memory = 0.0
        while True:
            now = time.monotonic()
            if now - last_memory >= self.config.health.leak.sample_interval_s:
                last_memory = now
                await loop.run_in_executor(None, self.health.sample_memory)
            text = await self.engine_metrics_text()
            if text:
                try:
                    self.health.observe_engine_metrics(text)
                except ValueError as error:  # an exposition the parser rejects: skip this round
                    log.warning("engine /metrics not understood: %s", error)
            healthy, reasons, details = self.health.verdict()
            self.store.state.health = details
            memory = details.get("memory") or {}
            self.store.state.leak_suspected = any(
                isinstance(entry, dict) and entry.get("suspect") for entry in memory.values()
            )
            self.store.state.hung = bool((details.get("engine") or {}).get("hung"))
            self.store.set_live(healthy, reasons)
            await asyncio.sleep(interval)

    async def _drain(self, engine: EngineProcess, exit_task: asyncio.Task) -> None:
        """Readiness already fails; let in-flight requests finish, then stop the engine."""

        budget = float(self.config.engine.shutdown_timeout_s)
        started = time.monotonic()
        if not self._shutdown_flag_supported:
            # This engine version aborts in-flight requests on SIGTERM: wait for them here.
            while time.monotonic() - started < budget and await self._requests_in_flight() > 0:
                await asyncio.sleep(0.5)
        # The API server alone gets SIGTERM: it drains (--shutdown-timeout) and stops its workers.
        if engine.process is not None and engine.running():
            with contextlib.suppress(ProcessLookupError):
                engine.process.send_signal(signal.SIGTERM)
        remaining = max(budget - (time.monotonic() - started), 0) + DRAIN_EXIT_MARGIN_S
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(exit_task), timeout=remaining)
        await engine.stop(FAILED_START_STOP_S)
        log.info("drained and stopped in %.1f s", time.monotonic() - started)

    async def _requests_in_flight(self) -> float:
        text = await self.engine_metrics_text()
        if not text:
            return 0.0
        total = 0.0
        for line in text.splitlines():
            if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting{", "vllm:num_requests_waiting ")):
                with contextlib.suppress(ValueError):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    # -- a worker of a multi-node group -------------------------------------------------------
    async def _run_worker(self) -> int:
        """A worker's life: follow the leader's mode, relaunch with it, exit with the group."""

        url = leader_state_url(self.config, self.distributed)
        assert url is not None  # resolve_distributed requires the leader's address on a worker
        self.store.state.leader = url
        ladder = graph_ladder(self.config, self.versions)
        restart = self.config.runtime.restart
        restarts = 0
        served_before = False
        async with aiohttp.ClientSession() as session:
            while True:
                if self.stop_requested.is_set():
                    return EXIT_STOPPED
                self.store.set_phase(RuntimePhase.LOADING, f"waiting for the leader's graph mode at {url}")
                try:
                    stopped, leader = await self._until_stopped(wait_for_leader_mode(
                        url, self.config.runtime.ready_timeout_s, session, interval_s=self.leader_poll_s))
                except (LeaderFailedError, LeaderWaitTimeout) as error:
                    return self._worker_failed(str(error), served_before)
                if stopped or leader is None:
                    return EXIT_STOPPED
                # A relaunch for the leader's sake is not a failure of this pod: follow at once.
                result = await self._worker_launch(session, url, leader, ladder)
                while result.kind == "follow" and result.leader is not None:
                    served_before = served_before or result.served
                    log.info("relaunching for the leader: %s", result.reason)
                    result = await self._worker_launch(session, url, result.leader, ladder)
                served_before = served_before or result.served
                if result.kind == "stopped":
                    return EXIT_STOPPED
                if result.kind == "leader_failed":
                    return self._worker_failed(result.reason, served_before)
                if result.kind == "follow":
                    continue  # the leader changed but has no mode now: wait for it again
                restarts += 1
                if restarts > restart.max_restarts:
                    return self._worker_failed(f"worker process failed {restarts} times; last: {result.reason}",
                                               served_before, leader_failed=False)
                failed = result.outcome is not None and result.outcome.is_failure
                self.store.record_restart(result.outcome.value if failed else result.restart_reason)
                delay = min(restart.backoff_initial_s * (2 ** (restarts - 1)), restart.backoff_max_s)
                self.store.set_phase(RuntimePhase.LOADING, f"restarting in {delay:.0f} s after: {result.reason}")
                log.warning("worker process ended (%s); restart %d in %.1f s", result.reason, restarts, delay)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.stop_requested.wait(), timeout=delay)

    def _worker_failed(self, reason: str, served_before: bool, *, leader_failed: bool = True) -> int:
        """Phase Failed and the exit code: the group restarts (LeaderWorkerSet recreates it)."""

        self.store.set_phase(RuntimePhase.FAILED, reason)
        self.store.set_live(False, [reason])
        log.error("%s%s", reason, "; exiting so that the group restarts" if leader_failed else "")
        return EXIT_CRASHED if served_before else EXIT_START_FAILED

    def _on_worker_event(self, event: Event) -> None:
        # The leader owns the ladder: a failure on a worker shows in the leader's engine too
        # (the ranks share collectives), and the leader's fallback reaches this worker.
        if event.kind in (EventKind.CAPTURE_FAILURE, EventKind.REPLAY_FAILURE, EventKind.DEVICE_OOM):
            log.warning("worker engine reported %s (the leader decides the fallback): %s",
                        event.kind.value, event.text.strip()[:200])

    async def _worker_launch(self, session: aiohttp.ClientSession, url: str, leader: RuntimeState,
                             ladder: list[GraphMode]) -> LaunchResult:
        """One launch of this worker's process for ``leader`` (a state with a mode to follow)."""

        target = leader_mode_for_worker(leader)
        assert target is not None  # wait_for_leader_mode and worker_should_relaunch ensure it
        plan = plan_distributed(self.config, self.versions, target, self.env)
        for warning in plan.warnings:
            log.warning("engine flags: %s", warning)
        if plan.engine_argv is not None:
            leading, argv, what = plan.pre_commands, plan.engine_argv, "headless engine"
        else:  # Ray: the last pre-command (ray start --block) is the long-running process
            leading, argv, what = plan.pre_commands[:-1], plan.pre_commands[-1], "Ray worker"
        if leading:
            failed = await self._run_pre_commands(leading, plan.env)
            if failed is not None:
                return failed
        following = plan.follow_leader_mode
        if following:
            assert plan.mode is not None
            if plan.mode is not target:
                log.warning("the leader runs %s, which this worker renders as %s", target.value, plan.mode.value)
            self.store.set_mode(plan.mode, ladder.index(plan.mode) if plan.mode in ladder else 0, ladder)
            self.store.state.leader_mode = target
        launched_for = leader.engine_pid
        self.store.state.engine_pid = None
        mode_text = f" in {target.value} mode" if following else ""
        self.store.set_phase(RuntimePhase.LOADING, f"launching the {what}{mode_text} for the leader at {url}")
        engine, exit_task = await self._start_engine(argv, plan.env, self._on_worker_event, "worker-exit")
        stop_wait = asyncio.create_task(self.stop_requested.wait())
        monitor: asyncio.Task[None] | None = None
        served = False
        try:
            while True:
                done, _ = await asyncio.wait({exit_task, stop_wait}, timeout=self.leader_poll_s,
                                             return_when=asyncio.FIRST_COMPLETED)
                if stop_wait in done:
                    await self._worker_drain(session, url, launched_for)
                    return LaunchResult("stopped", "stopped", served=served)
                if exit_task in done:
                    return await self._worker_exit_result(
                        exit_task.result(), session, url, target if following else None, launched_for, served)
                try:
                    state = await fetch_leader_state(url, session)
                except LeaderWaitError as error:
                    self._worker_phase(RuntimePhase.LOADING, f"leader unreachable: {error}")
                    continue
                if state.phase is RuntimePhase.FAILED:
                    return LaunchResult("leader_failed", f"leader at {url} failed: {state.message or 'no message'}",
                                        served=served)
                if launched_for is None and state.engine_pid is not None and (
                        not following or leader_mode_for_worker(state) is target):
                    launched_for = state.engine_pid  # launched while the leader's engine was starting
                if following and worker_should_relaunch(target, state, launched_for_pid=launched_for):
                    now = leader_mode_for_worker(state)
                    assert now is not None
                    why = (f"the leader moved from {target.value} to {now.value}" if now is not target
                           else f"the leader relaunched its engine (pid {launched_for} -> {state.engine_pid})")
                    return LaunchResult("follow", why, served=served, leader=state)
                ready = (group_member_ready(state, target, engine.running()) if following
                         else engine.running() and state.ready)
                if ready:
                    if not served:
                        served = True
                        self.health.mark_baseline()
                        monitor = asyncio.create_task(self._monitor(), name="health-monitor")
                    mode_part = f"{target.value} mode, " if following else ""
                    self._worker_phase(RuntimePhase.READY, f"serving ({mode_part}leader at {url} ready)")
                else:
                    detail = f"leader phase {state.phase.value}" + (f": {state.message}" if state.message else "")
                    self._worker_phase(RuntimePhase.LOADING, f"{what} up; waiting for the group ({detail})")
        finally:
            stop_wait.cancel()
            if monitor is not None:
                monitor.cancel()
                await _reap(monitor)
            await engine.stop(FAILED_ENGINE_STOP_S)
            if not exit_task.done():
                exit_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await exit_task
            self.store.state.engine_pid = None

    def _worker_phase(self, phase: RuntimePhase, message: str) -> None:
        if not self.stop_requested.is_set():  # draining stays draining
            self.store.set_phase(phase, message)

    async def _worker_exit_result(self, exited: EngineExit, session: aiohttp.ClientSession, url: str,
                                  target: GraphMode | None, launched_for: int | None, served: bool) -> LaunchResult:
        """A crash of this worker, or an exit caused by the leader's engine going away."""

        outcome = exited.outcome.outcome
        reason = f"worker process exited with code {exited.returncode} ({outcome.value})"
        if target is None:  # Ray workers: their process belongs to no particular leader engine
            return LaunchResult("crash", reason, outcome, served)
        try:
            state = await fetch_leader_state(url, session)
        except LeaderWaitError:
            return LaunchResult("crash", reason, outcome, served)
        if state.phase is RuntimePhase.FAILED:
            return LaunchResult("leader_failed", f"leader at {url} failed: {state.message or 'no message'}",
                                served=served)
        moved_on = leader_mode_for_worker(state) is not target or state.engine_pid != launched_for
        if launched_for is not None and moved_on:
            # The DP ranks die with the leader's engine; relaunch for its next one, uncounted.
            follow_state = state if leader_mode_for_worker(state) is not None else None
            return LaunchResult("follow", f"{reason} after the leader's engine ended", served=served,
                                leader=follow_state)
        return LaunchResult("crash", reason, outcome, served)

    async def _worker_drain(self, session: aiohttp.ClientSession, url: str, launched_for: int | None) -> None:
        """Keep this worker's ranks up while the leader drains requests they serve, then stop."""

        budget = float(self.config.engine.shutdown_timeout_s)
        started = time.monotonic()
        while time.monotonic() - started < budget:
            try:
                state = await fetch_leader_state(url, session, timeout_s=2.0)
            except LeaderWaitError:
                break  # the leader is gone
            if state.phase is not RuntimePhase.DRAINING or state.engine_pid is None:
                break  # not stopping (only this pod is), or its engine has already stopped
            if launched_for is not None and state.engine_pid != launched_for:
                break
            await asyncio.sleep(DRAIN_POLL_S)
        if self.engine is not None:
            await self.engine.stop(FAILED_ENGINE_STOP_S)
        log.info("worker stopped after %.1f s", time.monotonic() - started)
