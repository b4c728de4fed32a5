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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

import aiohttp

from ascend_runtime.config import EngineConfig, GraphMode, RuntimePhase, WarmupReport
from ascend_runtime.engine import EngineExit, EngineProcess
from ascend_runtime.flags import graph_ladder, render_engine_command
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

#: Seconds between polls of the engine's /health while it starts.
HEALTH_POLL_S = 1.0
#: Seconds between scrapes of the engine's /metrics for the hang detector.
METRICS_POLL_S = 5.0
#: Seconds a failed engine gets to exit on its own before it is killed.
FAILED_ENGINE_STOP_S = 10.0
#: Seconds between preflight retries while devices are busy or missing.
PREFLIGHT_RETRY_S = 10.0


@dataclass
class LaunchResult:
    kind: str  # "stopped" | "fallback" | "crash"
    reason: str
    outcome: Outcome | None = None
    served: bool = False  # reached Ready before it ended
    restart_reason: str = "crash"  # the metric label when the log shows no failure signature


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
    ) -> None:
        self.config = config
        self.versions = versions
        self.store = store
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
        command = render_engine_command(self.config, self.versions, mode)
        for warning in command.warnings:
            log.warning("engine flags: %s", warning)
        self._shutdown_flag_supported = "--shutdown-timeout" in command.argv
        self.store.set_mode(mode, rung, ladder)
        self.store.set_phase(RuntimePhase.LOADING, f"launching the engine in {mode.value} mode")
        self._fallback = asyncio.Event()
        self._fallback_reason = None
        self._serving = False
        engine = EngineProcess(command.argv, command.env, self._on_event, echo=self.echo_engine)
        self.engine = engine
        launched = time.monotonic()
        await engine.start()
        assert engine.pid is not None
        self.store.state.engine_pid = engine.pid
        self.health.start(engine.pid)
        exit_task = asyncio.create_task(engine.wait(), name="engine-exit")
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
            await engine.stop(FAILED_ENGINE_STOP_S)
            return LaunchResult("fallback", reason, Outcome.GRAPH_CAPTURE_FAILURE)
        if exit_task in done:
            return self._exit_result(exit_task.result(), served=False)
        if not healthy.result():
            await engine.stop(FAILED_ENGINE_STOP_S)
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
                await engine.stop(FAILED_ENGINE_STOP_S)
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
            with contextlib.suppress(asyncio.CancelledError):
                await monitor
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
                self.health.observe_engine_metrics(text)
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
        remaining = max(budget - (time.monotonic() - started), 0) + FAILED_ENGINE_STOP_S
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(exit_task), timeout=remaining)
        await engine.stop(FAILED_ENGINE_STOP_S)
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
