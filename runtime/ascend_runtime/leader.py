"""The leader's graph-mode ladder: one launch per rung, and what its outcome means for the next.

A single-node replica, and the leader of a multi-node group, run this role
(:class:`LeaderRole`). Each launch runs one rung of :func:`ascend_runtime.flags.graph_ladder`;
what each outcome leads to, the ladder file that lets a restarted container resume, and what a
multi-node leader does before its engines: ``docs/runtime.md`` ("The leader's ladder"). The
adapter reconciler it runs with ``lora``: ``docs/lora.md`` ("The runtime side").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ascend_runtime import adaptergate
from ascend_runtime.adapters import AdapterReconciler, EngineAdapters
from ascend_runtime.config import GraphMode, RuntimePhase, WarmupReport
from ascend_runtime.distributed import plan_distributed
from ascend_runtime.engine import EngineExit, EngineProcess
from ascend_runtime.flags import graph_ladder
from ascend_runtime.launch import LaunchKind, LaunchResult
from ascend_runtime.logclass import Event, EventKind, Outcome
from ascend_runtime.rolehost import RoleHost
from ascend_runtime.enginelimits import engine_limits
from ascend_runtime.warmup import run_warmup

log = logging.getLogger(__name__)


#: The ladder's position in ``runtime.stateDir``.
LADDER_FILE = "ladder.json"
#: Fallback causes the same image, model and engine meet again: the operator may remember them.
DETERMINISTIC = (Outcome.GRAPH_CAPTURE_FAILURE, Outcome.GRAPH_REPLAY_FAILURE)


def _workers(count: int) -> str:
    return "1 worker" if count == 1 else f"{count} workers"


class LadderFile:
    """The rung and its reason, kept where a restarted container of the same pod finds them."""

    def __init__(self, state_dir: str, identity: dict[str, Any]) -> None:
        self.path = Path(state_dir) / LADDER_FILE
        self.identity = identity  # image and model: a file for anything else is not ours

    def load(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            log.warning("ignoring %s (%s); starting at the top of the ladder", self.path, error)
            return None
        if not isinstance(data, dict) or data.get("identity") != self.identity:
            log.info("%s was written for another image or model; starting at the top", self.path)
            return None
        return data

    def save(self, record: dict[str, Any]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_suffix(".tmp")
            partial.write_text(json.dumps({"identity": self.identity, **record}), encoding="utf-8")
            os.replace(partial, self.path)  # a container killed mid-write leaves the old file whole
        except OSError as error:
            log.warning("cannot keep the ladder's position in %s: %s", self.path, error)


class LeaderRole:
    """The ladder: which rung runs next, one launch of it, and the fallback decision."""

    noun = "engine"

    def __init__(self, host: RoleHost) -> None:
        self.host = host
        self.config = host.config
        self.store = host.store
        self.ladder: list[GraphMode] = graph_ladder(self.config, host.versions)
        self.rung = 0
        self._file: LadderFile | None = None
        if self.config.runtime.state_dir:
            # Not the ladder itself: the operator's remembered mode (graph.startMode) reaches a
            # running pod's ConfigMap after its first fallback and shortens the ladder, and the
            # next container must still resume (seen on a real kubelet, tests/node).
            self._file = LadderFile(self.config.runtime.state_dir, {
                "image": self.config.image, "model": self.config.model.path,
            })
            self._resume(self._file.load())
        self._capture_started = asyncio.Event()
        self._fallback = asyncio.Event()
        self._fallback_reason: str | None = None
        self._replay_failures: list[float] = []
        self._serving = False
        self._pre_commands_done = False
        #: This launch passes ``--shutdown-timeout``: the engine drains itself on SIGTERM.
        self._engine_drains = False
        self._engine_argv: list[str] = []
        self._reconciler: AdapterReconciler | None = None
        self._adapter_token: str | None = None  # this launch's, for the engine's adapter gate

    async def __aenter__(self) -> LeaderRole:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    # -- the ladder ------------------------------------------------------------------------
    def _resume(self, record: dict[str, Any] | None) -> None:
        """Continue where this pod's previous container left the ladder."""

        if record is None:
            return
        modes = [mode.value for mode in self.ladder]
        if record.get("mode") not in modes:
            log.info("the kept mode %s is not on this ladder (%s); starting at the top", record.get("mode"),
                     " -> ".join(modes))
            return
        rung = modes.index(record["mode"])
        state = self.store.state
        self.rung = rung
        if record.get("requested") in {mode.value for mode in GraphMode}:
            state.requested_mode = GraphMode(record["requested"])  # what the pod first asked for
        state.fallbacks = int(record.get("fallbacks") or 0)
        state.fallback_reason = record.get("reason")
        state.fallback_kind = record.get("kind")
        state.fallback_deterministic = bool(record.get("deterministic"))
        state.resumed = (f"rung {rung} ({self.ladder[rung].value}), kept from this pod's previous container: "
                         f"{state.fallback_reason or 'no reason recorded'}")
        log.warning("resuming the ladder at %s", state.resumed)

    def advance(self, result: LaunchResult) -> bool:
        """Step one rung down after a graph failure; False when the restart loop decides."""

        if result.kind is not LaunchKind.FALLBACK or self.rung + 1 >= len(self.ladder):
            return False
        mode, next_mode = self.ladder[self.rung], self.ladder[self.rung + 1]
        log.warning("graph mode %s failed (%s); falling back to %s", mode.value, result.reason, next_mode.value)
        kind = result.outcome.value if result.outcome else result.restart_reason
        self.store.record_fallback(mode, next_mode, result.reason, kind, result.outcome in DETERMINISTIC)
        self._replay_failures.clear()  # they counted against the rung just left
        self.rung += 1
        if self._file is not None:
            state = self.store.state
            self._file.save({"rung": self.rung, "mode": next_mode.value,
                             "requested": state.requested_mode.value if state.requested_mode else None,
                             "fallbacks": state.fallbacks, "reason": state.fallback_reason,
                             "kind": state.fallback_kind, "deterministic": state.fallback_deterministic})
        return True

    async def launch(self) -> LaunchResult:
        mode = self.ladder[self.rung]
        host = self.host
        plan = plan_distributed(self.config, host.versions, mode, host.env)
        for warning in plan.warnings:
            log.warning("engine flags: %s", warning)
        assert plan.engine_argv is not None  # only Ray workers run no engine
        self._engine_drains = "--shutdown-timeout" in plan.engine_argv
        self._engine_argv = list(plan.engine_argv)  # the warmup's limits and derived plan come from it
        if plan.pre_commands and not self._pre_commands_done:
            # Before the mode is published: workers start only once the leader's side is up.
            failed = await host.run_pre_commands(plan.pre_commands, plan.env)
            if failed is not None:
                return failed
            self._pre_commands_done = True
        self.store.state.engine_pid = None  # workers: a launch in progress has no engine yet
        self.store.set_mode(mode, self.rung, self.ladder)
        if plan.wait_for_workers and plan.workers_ready_command is not None:
            waited = await host.wait_for_workers(plan.workers_ready_command, plan.env)
            if waited is not None:
                return waited
        message = f"launching the engine in {mode.value} mode"
        if host.distributed.nodes > 1:
            message += f"; it serves once {_workers(host.distributed.nodes - 1)} joined"
        self.store.set_phase(RuntimePhase.LOADING, message)
        self._fallback = asyncio.Event()
        self._fallback_reason = None
        self._capture_started = asyncio.Event()
        self._serving = False
        launched = time.monotonic()
        env = plan.env
        if self.config.lora is not None and self.config.lora.enabled:
            self._adapter_token = adaptergate.new_token()
            env = {**env, adaptergate.TOKEN_ENV: self._adapter_token}
        engine, exit_task = await host.start_engine(plan.engine_argv, env, self._on_event, "engine-exit",
                                                   mode=mode)
        try:
            result = await self._start_phase(engine, exit_task, launched)
            if result is not None:
                return result
            return await self._serve_phase(engine, exit_task)
        finally:
            await host.end_engine(engine, exit_task)

    # -- engine events ---------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        kind = event.kind
        if kind in (EventKind.CAPTURING_GRAPHS, EventKind.COMPILING) and not self._serving:
            self._capture_started.set()
        if kind == EventKind.CAPTURING_GRAPHS and not self._serving:
            self.store.set_phase(RuntimePhase.CAPTURING_GRAPHS, event.text[:200])
        elif kind == EventKind.LOADING and not self._serving:
            self.store.set_phase(RuntimePhase.LOADING, event.text[:200])
        elif kind == EventKind.CAPTURE_FAILURE and not self._serving:
            self._trigger_fallback(f"graph capture failed: {event.text.strip()[:300]}")
        if self._serving and kind in (EventKind.REPLAY_FAILURE, EventKind.DEVICE_OOM, EventKind.FATAL):
            if kind == EventKind.FATAL and self._reconciler is not None and self._reconciler.engine_call_recent():
                # A refused adapter load logs a worker exception; the engine serves on.
                log.info("engine error line during a LoRA adapter load or unload, not taken for an engine "
                         "failure (its /health still decides): %s", event.text.strip()[:200])
            else:
                # vLLM's engine core dies of these; its API server answers /health for a while longer.
                self.host.report_engine_failure(f"{kind.value}: {event.text}")
        if kind == EventKind.REPLAY_FAILURE:
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

    def _exit_result(self, exited: EngineExit, served: bool) -> LaunchResult:
        outcome = exited.outcome.outcome
        reason = f"engine exited with code {exited.returncode} ({outcome.value})"
        if outcome == Outcome.GRAPH_CAPTURE_FAILURE and not served and self.config.graph.fallback:
            return LaunchResult(LaunchKind.FALLBACK, reason, outcome, served)
        if self._fallback.is_set():
            return LaunchResult(LaunchKind.FALLBACK, self._fallback_reason or reason, outcome, served)
        return LaunchResult(LaunchKind.CRASH, reason, outcome, served)

    # -- start-up: /health, then warmup ----------------------------------------------------
    async def _start_phase(self, engine: EngineProcess, exit_task: asyncio.Task, launched: float
                           ) -> LaunchResult | None:
        host = self.host
        deadline = launched + self.config.runtime.ready_timeout_s
        stop_wait = asyncio.create_task(host.stop_requested.wait())
        fallback_wait = asyncio.create_task(self._fallback.wait())
        healthy = asyncio.create_task(host.wait_healthy(deadline))
        capture = asyncio.create_task(self._capture_budget())
        try:
            done, _ = await asyncio.wait({exit_task, stop_wait, fallback_wait, healthy, capture},
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stop_wait, fallback_wait, healthy, capture):
                if not task.done():
                    task.cancel()
        if stop_wait in done:
            await engine.stop(host.failed_engine_stop_s)
            return LaunchResult(LaunchKind.STOPPED, "stop requested during start-up")
        if fallback_wait in done:
            reason = self._fallback_reason or "graph capture failed"
            await engine.stop(host.failed_start_stop_s)
            return LaunchResult(LaunchKind.FALLBACK, reason, Outcome.GRAPH_CAPTURE_FAILURE)
        if exit_task in done:
            return self._exit_result(exit_task.result(), served=False)
        if capture in done:
            await engine.stop(host.failed_start_stop_s)
            return self._capture_timeout(f"graph capture did not finish within graph.captureTimeoutS "
                                         f"({self.config.graph.capture_timeout_s} s)")
        if not healthy.result():
            await engine.stop(host.failed_start_stop_s)
            why = f"engine not healthy within runtime.readyTimeoutS ({self.config.runtime.ready_timeout_s} s)"
            if self._capture_started.is_set():
                return self._capture_timeout(f"{why}, after graph capture began")
            return LaunchResult(LaunchKind.CRASH, why, restart_reason="start_timeout")
        return await self._warm_up(engine, exit_task, launched)

    async def _capture_budget(self) -> None:
        """Returns once a graph rung's capture has run past ``graph.captureTimeoutS``; else never."""

        budget = self.config.graph.capture_timeout_s
        if budget is None or self.ladder[self.rung] is GraphMode.EAGER:
            await asyncio.Event().wait()
        await self._capture_started.wait()
        await asyncio.sleep(float(budget or 0))

    def _capture_timeout(self, reason: str) -> LaunchResult:
        """A graph rung that neither failed nor became healthy: the next rung may (not counted)."""

        graph = self.ladder[self.rung] is not GraphMode.EAGER
        kind = LaunchKind.FALLBACK if graph and self.config.graph.fallback else LaunchKind.CRASH
        return LaunchResult(kind, reason, restart_reason="capture_timeout")

    async def _warm_up(self, engine: EngineProcess, exit_task: asyncio.Task, launched: float
                       ) -> LaunchResult | None:
        """Warmup, raced against the engine dying or a stop."""

        host = self.host
        self.store.set_phase(RuntimePhase.WARMING_UP, "engine up; warming up")
        self.store.set_warmup(WarmupReport(outcome="running"))
        if self.config.warmup.enabled:
            model = self.config.model.served_name or self.config.model.path
            limits = engine_limits(self._engine_argv, self.config.engine, cpu=host.versions.platform == "cpu")
            warm = asyncio.create_task(run_warmup(
                host.engine_base_url, model, self.config.warmup, limits.max_model_len, limits.max_num_seqs,
                limits.seqs_from, engine_argv=self._engine_argv,
            ))
            stop_wait = asyncio.create_task(host.stop_requested.wait())
            try:
                done, _ = await asyncio.wait({warm, exit_task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop_wait.cancel()
                if not warm.done():
                    warm.cancel()
            if stop_wait in done and warm not in done:
                await engine.stop(host.failed_engine_stop_s)
                return LaunchResult(LaunchKind.STOPPED, "stop requested during warmup")
            if exit_task in done and warm not in done:
                return self._exit_result(exit_task.result(), served=False)
            result = warm.result()
            report = WarmupReport(outcome="succeeded" if result.ok else "failed", seconds=round(result.seconds, 3),
                                  requests=result.requests, reason=result.reason, warnings=result.warnings)
            for warning in result.warnings:
                log.warning("warmup: %s", warning)
            self.store.set_warmup(report)
            if not result.ok:
                await engine.stop(host.failed_start_stop_s)
                return LaunchResult(LaunchKind.CRASH, f"warmup failed: {result.reason}",
                                    restart_reason="warmup_failed")
            log.info("warmup done: %d requests in %.1f s", result.requests, result.seconds)
        else:
            self.store.set_warmup(WarmupReport(outcome="skipped"))
        self.store.metrics.startup_seconds.set(time.monotonic() - launched)
        return None

    # -- serving -------------------------------------------------------------------------
    def _adapter_reconciler(self) -> AdapterReconciler | None:
        lora = self.config.lora
        if lora is None or not lora.enabled:
            return None
        base = self.config.model.served_name or self.config.model.path
        engine = EngineAdapters(self.host.engine_base_url, token=self._adapter_token)
        return AdapterReconciler(lora, engine, self.store, [base])

    async def _serve_phase(self, engine: EngineProcess, exit_task: asyncio.Task) -> LaunchResult:
        host = self.host
        self._serving = True
        reconciler = self._reconciler = self._adapter_reconciler()
        if reconciler is not None:
            self.store.set_phase(RuntimePhase.WARMING_UP, "loading the LoRA adapters of lora.adaptersFile")
            await host.until_stopped(reconciler.round())
        host.health.mark_baseline()
        self.store.set_phase(RuntimePhase.READY, f"serving in {self.store.state.mode.value} mode"
                             if self.store.state.mode else "serving")
        serving_since = time.monotonic()
        monitor = asyncio.create_task(host.monitor(), name="health-monitor")
        adapters = asyncio.create_task(reconciler.run(), name="lora-adapters") if reconciler else None
        stop_wait = asyncio.create_task(host.stop_requested.wait())
        fallback_wait = asyncio.create_task(self._fallback.wait())
        try:
            done, _ = await asyncio.wait({exit_task, stop_wait, fallback_wait}, return_when=asyncio.FIRST_COMPLETED)
            served_s = time.monotonic() - serving_since
            if stop_wait in done:
                await host.drain(engine, exit_task, engine_drains=self._engine_drains)
                return LaunchResult(LaunchKind.STOPPED, "stopped after draining", served=True, served_s=served_s)
            if fallback_wait in done:
                # Readiness first: no request may reach the engine while it is being stopped.
                self.store.set_phase(RuntimePhase.LOADING, f"stopping the engine to fall back: {self._fallback_reason}")
                await engine.stop(host.failed_engine_stop_s)
                return LaunchResult(LaunchKind.FALLBACK, self._fallback_reason or "graph replay failures",
                                    Outcome.GRAPH_REPLAY_FAILURE, served=True, served_s=served_s)
            result = self._exit_result(exit_task.result(), served=True)
            result.served_s = served_s
            # Before its process group is stopped (up to FAILED_ENGINE_STOP_S): not ready.
            self.store.set_phase(RuntimePhase.LOADING, f"{result.reason}; stopping what is left of it")
            return result
        finally:
            for task in (monitor, stop_wait, fallback_wait):
                task.cancel()
            await host.finish_task(monitor)
            if adapters is not None:
                adapters.cancel()
                await host.finish_task(adapters)
                self.store.set_adapters([])  # the next engine starts without them
            self._reconciler = None
            self._serving = False
