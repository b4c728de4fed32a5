"""The supervisor: preflight, one restart loop around the engine, monitoring, drain.

One engine child at a time. What a launch does, and what its outcome means, belongs to the
pod's role: :class:`~ascend_runtime.leader.LeaderRole` (single node, or a group's leader: the
graph-mode ladder) or :class:`~ascend_runtime.worker.WorkerRole` (a multi-node worker: follow the
leader). The supervisor owns what both share: the preflight, the restart loop below, starting
and stopping the engine child, the leak/hang monitor that feeds liveness, the drain on SIGTERM,
and the commands run around the engine (Ray's pre-commands, the workers-ready check). A role
sees the supervisor only as a :class:`~ascend_runtime.rolehost.RoleHost` and writes nothing into it.

Before every relaunch the pod's chips must pass the preflight again (the stopped engine's memory
freed), for at most ``runtime.deviceFreeWaitS``. The restart loop (:meth:`Supervisor.run`), per
:class:`~ascend_runtime.launch.LaunchKind`:
``stopped`` -> exit 0; ``fallback`` / ``follow`` -> the role relaunches at once, uncounted;
``crash`` -> relaunch after a backoff, counted (:class:`~ascend_runtime.launch.RestartBudget`),
``runtime.restart.maxRestarts`` used up -> exit 3 (never served) or 4; ``leader_failed`` and
``engine_lost`` (a worker's own engine died) -> exit 3 or 4 so that the group restarts.
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

from ascend_runtime.cacheuse import model_cache_problem, prepare_launch
from ascend_runtime.config import EngineConfig, GraphMode, RuntimePhase
from ascend_runtime.distributed import resolve_distributed
from ascend_runtime.engine import EngineExit, EngineProcess
from ascend_runtime.launch import LaunchKind, LaunchResult, RestartBudget
from ascend_runtime.leader import LeaderRole
from ascend_runtime.logclass import Event
from ascend_runtime.modelconfig import fetch_config_dir, is_hub_id
from ascend_runtime.promtext import MetricsTextError, sample_values, total
from ascend_runtime.reaper import Reaper, become_subreaper
from ascend_runtime.state import StateStore
from ascend_runtime.tuning import describe_report, tune, tuning_off
from ascend_runtime.versions import Versions
from ascend_runtime.worker import WorkerRole

log = logging.getLogger(__name__)

#: Exit codes of `ascend-llm run` (the table in docs/runtime.md).
EXIT_STOPPED = 0  # stopped by SIGTERM/SIGINT after draining
EXIT_CONFIG = 2  # the engine config is invalid
EXIT_START_FAILED = 3  # the engine never became ready: every rung and restart used up
EXIT_CRASHED = 4  # the engine crashed too often while serving
EXIT_PREFLIGHT = 5  # devices or memory never became available
EXIT_MODEL_CACHE = 6  # model.cacheMarker: the model cache never became complete

#: Seconds between polls of the engine's /health while it starts (a poll is one local GET).
HEALTH_POLL_S = 0.25
#: Seconds between polls of the serving engine's /health (readiness and the hang detector).
SERVING_HEALTH_POLL_S = 1.0
#: Seconds one such poll may take before it counts as no answer.
HEALTH_ANSWER_TIMEOUT_S = 2.0
#: Seconds a failure line of the serving engine keeps readiness off even while /health answers.
FAILURE_HOLD_S = 10.0
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
#: Seconds between checks of the model cache's marker while it is missing or incomplete.
MODEL_CACHE_POLL_S = 2.0
#: Seconds between rounds of the orphan reaper.
REAP_INTERVAL_S = 5.0
#: Seconds between checks of the pod's chips before a relaunch.
DEVICE_FREE_POLL_S = 1.0
#: Workers: seconds between polls of the leader's /state.
LEADER_POLL_S = 2.0
#: Seconds a pre-command (``ray start --head``) may run before it counts as failed.
PRE_COMMAND_TIMEOUT_S = 300.0
#: Seconds one run of the workers-ready command may take.
READY_CHECK_TIMEOUT_S = 60.0
#: Seconds between runs of the workers-ready command.
WORKERS_POLL_S = 3.0
#: Output lines of a failed command quoted in the launch's reason.
COMMAND_TAIL_LINES = 15
#: The series whose sum is the requests still in flight while draining.
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")

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


class HealthHooks:
    """What the supervisor needs from the leak/hang monitor; the default does nothing."""

    def start(self, engine_pid: int) -> None: ...
    def mark_baseline(self) -> None: ...
    def sample_memory(self) -> None: ...
    def observe_engine_metrics(self, text: str) -> None: ...
    def observe_engine_answer(self, problem: str | None) -> None: ...
    def verdict(self) -> tuple[bool, list[str], dict]:
        return True, [], {}


PreflightCheck = Callable[[], Awaitable[tuple[bool, str | None]]]


PreflightCheck = Callable[[], Awaitable[tuple[bool, str | None]]]


class Supervisor:
    #: Seconds a failed engine, or one that failed its start, gets before it is killed.
    failed_engine_stop_s = FAILED_ENGINE_STOP_S
    failed_start_stop_s = FAILED_START_STOP_S

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
        reap_orphans: bool = False,
    ) -> None:
        """``env`` is the pod's environment (LeaderWorkerSet's variables, ``POD_IP``); default
        ``os.environ``. ``reap_orphans``: become the subreaper of the engine's process tree and
        wait for its orphans (:mod:`ascend_runtime.reaper`; `ascend-llm run` turns it on). Raises
        :class:`~ascend_runtime.config.ConfigError` when this pod cannot join its group
        (:func:`~ascend_runtime.distributed.resolve_distributed`)."""

        self.config = config
        self.versions = versions
        self.store = store
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.distributed = resolve_distributed(config.distributed, self.env)
        self.multi_node = self.distributed.nodes > 1
        self.is_worker = self.multi_node and self.distributed.role == "worker"
        self.leader_poll_s = leader_poll_s
        if self.multi_node:
            store.state.role = self.distributed.role
        self.health = health or HealthHooks()
        self.preflight = preflight
        self.echo_engine = echo_engine
        self.engine: EngineProcess | None = None
        self.stop_requested = asyncio.Event()
        self._failure_at: float | None = None  # report_engine_failure
        #: Orphans of the engine re-parent to the runtime, which waits for them (PID 1 or not).
        self.subreaper = become_subreaper() if reap_orphans else False
        self.reaper = Reaper()

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
        code = await self._wait_model_cache()
        if code is not None:
            return code
        self._apply_tuned_defaults(*await self._model_config_dir())
        if self.config.runtime.preflight and self.preflight is not None:
            code = await self._run_preflight()
            if code is not None:
                return code
        role: LeaderRole | WorkerRole = WorkerRole(self) if self.is_worker else LeaderRole(self)
        reaping = asyncio.create_task(self._reap_orphans(), name="orphan-reaper") if self.subreaper else None
        try:
            async with role:
                return await self._restart_loop(role)
        finally:
            if reaping is not None:
                reaping.cancel()
                await self.finish_task(reaping)
            self.reaper.reap()

    async def _reap_orphans(self) -> None:
        while True:
            self.reaper.reap()
            await asyncio.sleep(REAP_INTERVAL_S)

    async def _restart_loop(self, role: LeaderRole | WorkerRole) -> int:
        """The one restart loop: launch, then stop, step, relaunch or give up (module docstring)."""

        budget = RestartBudget(self.config.runtime.restart)
        served_before = False
        launched_before = False
        while True:
            if launched_before:
                await self._wait_devices_free()
            if self.stop_requested.is_set():
                return EXIT_STOPPED
            launched_before = True
            result = await role.launch()
            served_before = served_before or result.served
            if result.kind is LaunchKind.STOPPED:
                return EXIT_STOPPED
            if result.kind is LaunchKind.LEADER_FAILED:
                return self._give_up(result.reason, served_before, "exiting so that the group restarts")
            if result.kind is LaunchKind.ENGINE_LOST:
                return self._give_up(result.reason, served_before,
                                     "exiting so that the LeaderWorkerSet recreates the group")
            if role.advance(result):
                continue
            delay = budget.spend(result)
            if delay is None:
                return self._give_up(f"{role.noun} failed {budget.count} times; last: {result.reason}", served_before)
            self.store.record_restart(result.restart_label)
            self.store.set_phase(RuntimePhase.LOADING, f"restarting {role.noun} in {delay:.0f} s after: {result.reason}")
            log.warning("%s ended (%s); restart %d in %.1f s", role.noun, result.reason, budget.count, delay)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop_requested.wait(), timeout=delay)

    def _give_up(self, reason: str, served_before: bool, then: str | None = None) -> int:
        """Phase Failed, liveness off, and the exit code: 4 once it served, 3 when it never did."""

        self.store.set_phase(RuntimePhase.FAILED, reason)
        self.store.set_live(False, [reason])
        log.error("%s%s", reason, f"; {then}" if then else "")
        return EXIT_CRASHED if served_before else EXIT_START_FAILED

    # -- model cache and preflight ----------------------------------------------------------
    async def _wait_model_cache(self) -> int | None:
        """model.cacheMarker: no engine before the snapshot is complete (bounded by readyTimeoutS)."""

        deadline = time.monotonic() + self.config.runtime.ready_timeout_s
        while (problem := model_cache_problem(self.config)) is not None:
            if time.monotonic() > deadline:
                budget = self.config.runtime.ready_timeout_s
                reason = f"{problem}; gave up after runtime.readyTimeoutS ({budget} s)"
                self.store.set_phase(RuntimePhase.FAILED, reason)
                log.error("%s", reason)
                return EXIT_MODEL_CACHE
            self.store.set_phase(RuntimePhase.PREFLIGHT, f"waiting for the model cache: {problem}")
            stopped, _ = await self.until_stopped(asyncio.sleep(MODEL_CACHE_POLL_S))
            if stopped:
                return EXIT_STOPPED
        return None

    async def _model_config_dir(self) -> tuple[str | None, str | None]:
        """Where the model's config.json is for the tuned defaults: ``(None, None)`` for the model's
        own path; for a hub id the engine downloads itself, the folder of config.json fetched alone
        (ascend_runtime.modelconfig), or ``(None, why not)``."""

        if tuning_off(self.config, self.versions) is not None or not is_hub_id(self.config.model.path):
            return None, None
        try:
            return await asyncio.to_thread(fetch_config_dir, self.config.model, self.env), None
        except ValueError as error:
            return None, str(error)

    def _apply_tuned_defaults(self, model_dir: str | None = None, unreadable: str | None = None) -> None:
        """The tutorials' settings for this model class and version (ascend_runtime.tuning), from
        the model's config.json (in ``model_dir`` when given); the report goes to /state."""

        tuned = tune(self.config, self.versions, self.env, model_dir=model_dir)
        if unreadable is not None and tuned.profile is None:
            tuned.report.reason = f"{unreadable}; no tuned defaults"
        self.config = tuned.config
        self.store.state.tuned_defaults = tuned.report
        for line in describe_report(tuned.report):
            log.info("tuned defaults: %s", line)

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

    async def _wait_devices_free(self) -> None:
        """Before a relaunch: the stopped engine's memory must leave the pod's chips (bounded).

        A relaunch into chips still held by the previous engine fails with an OOM that says
        nothing about the mode; past ``runtime.deviceFreeWaitS`` the launch goes ahead anyway.
        """

        if not (self.config.runtime.preflight and self.preflight is not None):
            return
        budget = self.config.runtime.device_free_wait_s
        deadline = time.monotonic() + budget
        while True:
            ok, reason = await self.preflight()
            if ok:
                return
            if time.monotonic() >= deadline:
                log.warning("relaunching although the chips are not free after %d s: %s", budget, reason)
                return
            self.store.set_phase(RuntimePhase.LOADING, f"waiting up to {budget} s for this pod's chips to "
                                 f"free the stopped engine's memory: {reason}")
            stopped, _ = await self.until_stopped(asyncio.sleep(DEVICE_FREE_POLL_S))
            if stopped:
                return

    # -- commands around the engine (multi-node) --------------------------------------------
    async def until_stopped(self, awaitable: Awaitable[T]) -> tuple[bool, T | None]:
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

    async def run_command(self, argv: list[str], env: Mapping[str, str], timeout: float) -> CommandRun:
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
            self.reaper.own(process.pid)  # asyncio waits for it, not the reaper
            stopped, _ = await self.until_stopped(self._wait_process(process, timeout))
            if process.returncode is None:  # timed out or stopped
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
                returncode = None
            else:
                returncode = process.returncode
            self.reaper.disown(process.pid)
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

    async def run_pre_commands(self, commands: list[list[str]], env: Mapping[str, str]) -> LaunchResult | None:
        """Each command in order; the first failure is a failed launch naming it, with its output."""

        for argv in commands:
            shown = " ".join(argv)
            self.store.set_phase(RuntimePhase.LOADING, f"running {shown}")
            log.info("running pre-command: %s", shown)
            run = await self.run_command(argv, env, PRE_COMMAND_TIMEOUT_S)
            if run.stopped:
                return LaunchResult(LaunchKind.STOPPED, f"stop requested while running {shown}")
            if run.returncode != 0:
                ended = (f"exited with code {run.returncode}" if run.returncode is not None
                         else f"did not finish within {PRE_COMMAND_TIMEOUT_S:.0f} s")
                return LaunchResult(LaunchKind.CRASH, f"pre-command `{shown}` {ended}: {run.tail()}",
                                    restart_reason="pre_command_failed")
        return None

    async def wait_for_workers(self, check: list[str], env: Mapping[str, str]) -> LaunchResult | None:
        """Run ``check`` until it exits 0, for at most ``runtime.readyTimeoutS``."""

        workers = self.distributed.nodes - 1
        budget = self.config.runtime.ready_timeout_s
        deadline = time.monotonic() + budget
        self.store.set_phase(RuntimePhase.LOADING, f"waiting for {_workers(workers)}")
        last = "not checked yet"
        while True:
            run = await self.run_command(check, env, READY_CHECK_TIMEOUT_S)
            if run.stopped:
                return LaunchResult(LaunchKind.STOPPED, "stop requested while waiting for the workers")
            if run.returncode == 0:
                log.info("%s joined: %s", _workers(workers), run.tail())
                return None
            last = run.tail()
            self.store.set_phase(RuntimePhase.LOADING, f"waiting for {_workers(workers)}: {last}")
            if time.monotonic() >= deadline:
                return LaunchResult(LaunchKind.CRASH, f"{_workers(workers)} did not join within runtime.readyTimeoutS "
                                             f"({budget} s); last check: {last}", restart_reason="workers_timeout")
            stopped, _ = await self.until_stopped(asyncio.sleep(WORKERS_POLL_S))
            if stopped:
                return LaunchResult(LaunchKind.STOPPED, "stop requested while waiting for the workers")

    # -- the engine child ------------------------------------------------------------------
    async def start_engine(self, argv: list[str], env: dict[str, str], on_event: Callable[[Event], None],
                           name: str, mode: GraphMode | None = None
                           ) -> tuple[EngineProcess, asyncio.Task[EngineExit]]:
        """Start the child, point the health monitor at it, and watch for its exit.

        ``mode`` is the launch's graph mode: it keys the compile cache (:mod:`ascend_runtime.cacheuse`).
        """

        caches = prepare_launch(self.config, self.versions, mode, argv)
        self.store.state.compile_cache = caches.report
        engine = EngineProcess(argv, {**env, **caches.env}, on_event, echo=self.echo_engine)
        self.engine = engine
        await engine.start()
        assert engine.pid is not None
        self.reaper.own(engine.pid)
        self.store.state.engine_pid = engine.pid
        self.health.start(engine.pid)
        self.store.set_live(True, [])  # verdicts about the previous engine do not carry over
        return engine, asyncio.create_task(engine.wait(), name=name)

    async def end_engine(self, engine: EngineProcess, exit_task: asyncio.Task[EngineExit]) -> None:
        """Stop the child and its group, always: the API server may be gone, its engine core not."""

        await engine.stop(FAILED_ENGINE_STOP_S)
        if not exit_task.done():
            exit_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await exit_task
        if self.store.state.engine_pid == engine.pid:
            self.store.state.engine_pid = None
        if engine.pid is not None:
            self.reaper.disown(engine.pid)
        self.reaper.reap()  # the engine's killed orphans, now rather than at the next round

    @staticmethod
    async def finish_task(task: asyncio.Task) -> None:
        """Wait for a cancelled helper task; its failure is logged, never raised into a shutdown."""

        await asyncio.wait({task})  # never raises the task's own exception
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed: %r", task.get_name(), task.exception())

    async def wait_healthy(self, deadline: float) -> bool:
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

    async def monitor(self, *, poll_health: bool = True) -> None:
        """Feed the leak and hang detectors; turn their verdict into liveness.

        With ``poll_health`` (an engine with an API server) the engine's ``/health`` is polled
        too: a failed poll takes readiness away at once, and no good answer for
        ``health.hangTimeoutS`` fails liveness.
        """

        loops = [self._watch_metrics_and_memory()]
        if poll_health:
            loops.append(self._watch_answers())
        await asyncio.gather(*loops)

    async def _watch_metrics_and_memory(self) -> None:
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
            self._publish_verdict()
            await asyncio.sleep(interval)

    async def _watch_answers(self) -> None:
        timeout = aiohttp.ClientTimeout(total=HEALTH_ANSWER_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self.stop_requested.is_set():  # a draining engine may refuse /health
                problem = await self._health_problem(session)
                self.health.observe_engine_answer(problem)
                held = self._failure_at is not None and time.monotonic() - self._failure_at < FAILURE_HOLD_S
                if problem is not None or not held:
                    self._failure_at = None
                    self.store.set_unanswered(problem)
                self._publish_verdict()
                await asyncio.sleep(SERVING_HEALTH_POLL_S)

    async def _health_problem(self, session: aiohttp.ClientSession) -> str | None:
        """One GET of the engine's /health: None for a 200, else what went wrong."""

        try:
            async with session.get(f"{self.engine_base_url}/health") as response:
                if response.status == 200:
                    return None
                return f"/health answered HTTP {response.status}"
        except asyncio.TimeoutError:
            return f"/health did not answer within {HEALTH_ANSWER_TIMEOUT_S:g} s"
        except aiohttp.ClientError as error:
            return f"/health failed: {error.__class__.__name__}: {error}"

    def report_engine_failure(self, text: str) -> None:
        """The serving engine logged a failure: readiness off now, before the engine is stopped.

        It comes back only when ``/health`` answers 200 after :data:`FAILURE_HOLD_S` (vLLM's API
        server takes a few seconds to notice a dead engine core and fail ``/health``).
        """

        self._failure_at = time.monotonic()
        self.store.set_unanswered(f"engine reported a failure: {text.strip()[:200]}")

    def _publish_verdict(self) -> None:
        healthy, reasons, details = self.health.verdict()
        self.store.state.health = details
        memory = details.get("memory") or {}
        self.store.state.leak_suspected = any(
            isinstance(entry, dict) and entry.get("suspect") for entry in memory.values()
        )
        self.store.state.hung = bool((details.get("engine") or {}).get("hung"))
        self.store.set_live(healthy, reasons)

    async def drain(self, engine: EngineProcess, exit_task: asyncio.Task, *, engine_drains: bool) -> None:
        """Readiness already fails; let in-flight requests finish, then stop the engine.

        ``engine_drains``: the launch passed ``--shutdown-timeout``, so the engine drains itself.
        """

        budget = float(self.config.engine.shutdown_timeout_s)
        started = time.monotonic()
        if not engine_drains:
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
        try:
            values = sample_values(text, IN_FLIGHT)
        except MetricsTextError as error:
            log.warning("engine /metrics not understood while draining: %s", error)
            return 0.0
        return sum(total(values, name) or 0.0 for name in IN_FLIGHT)
