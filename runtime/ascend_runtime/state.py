"""The runtime's published state and its own Prometheus metrics.

One :class:`StateStore` per runtime. The supervisor changes it; the HTTP server reads it for
the probes, ``GET /state`` (the :class:`~ascend_runtime.config.RuntimeState` the operator
reads) and ``/metrics``. Metric names are part of the product (the chart's dashboard and
alerts use them): ``ascend_llm_*``.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Counter, Gauge

from ascend_runtime.config import AdapterPhase, AdapterStatus, GraphMode, RuntimePhase, RuntimeState, WarmupReport

log = logging.getLogger(__name__)


class RuntimeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.phase = Gauge("ascend_llm_phase", "1 for the runtime's current phase.", ["phase"], registry=registry)
        self.graph_mode = Gauge(
            "ascend_llm_graph_mode", "1 for the graph mode the engine runs now.", ["mode"], registry=registry
        )
        self.rung = Gauge("ascend_llm_graph_rung", "Position on the fallback ladder (0 = first choice).",
                          registry=registry)
        self.fallbacks = Counter(
            "ascend_llm_fallbacks", "Graph-mode fallbacks, by the mode left and the reason.",
            ["from_mode", "to_mode", "reason"], registry=registry,
        )
        self.restarts = Counter("ascend_llm_engine_restarts", "Engine relaunches after a crash.",
                                ["reason"], registry=registry)
        self.warmup_seconds = Gauge("ascend_llm_warmup_seconds", "Duration of the last warmup.", registry=registry)
        self.warmup_requests = Gauge("ascend_llm_warmup_requests", "Requests sent by the last warmup.",
                                     registry=registry)
        self.ready = Gauge("ascend_llm_ready", "1 while the readiness probe passes.", registry=registry)
        self.live = Gauge("ascend_llm_live", "1 while the liveness probe passes.", registry=registry)
        self.startup_seconds = Gauge("ascend_llm_startup_seconds",
                                     "Seconds from launch to ready of the current engine.", registry=registry)
        self.lora_adapters = Gauge(
            "ascend_llm_lora_adapters", "LoRA adapters of the desired set (and being unloaded), by state.",
            ["state"], registry=registry,
        )
        self.lora_operations = Counter(
            "ascend_llm_lora_adapter_operations", "LoRA adapter loads and unloads sent to the engine, by result.",
            ["operation", "result"], registry=registry,
        )
        for phase in RuntimePhase:
            self.phase.labels(phase.value).set(0)
        for mode in GraphMode:
            self.graph_mode.labels(mode.value).set(0)


class StateStore:
    def __init__(self, registry: CollectorRegistry | None = None, clock=time.time) -> None:
        self.registry = registry or CollectorRegistry()
        self.metrics = RuntimeMetrics(self.registry)
        self.clock = clock
        self.state = RuntimeState(since=clock())
        self.draining = False
        self.started_once = False
        self.metrics.phase.labels(self.state.phase.value).set(1)
        self.metrics.live.set(1)

    def set_phase(self, phase: RuntimePhase, message: str | None = None) -> None:
        if phase != self.state.phase:
            self.metrics.phase.labels(self.state.phase.value).set(0)
            self.metrics.phase.labels(phase.value).set(1)
            self.state.since = self.clock()
            log.info("phase %s -> %s%s", self.state.phase.value, phase.value, f": {message}" if message else "")
        self.state.phase = phase
        self.state.message = message
        if phase not in (RuntimePhase.READY, RuntimePhase.DEGRADED):
            self.state.unanswered = None  # it was about the engine that served
        self._update_ready()

    def _update_ready(self) -> None:
        serving = self.state.phase in (RuntimePhase.READY, RuntimePhase.DEGRADED)
        self.state.ready = serving and not self.draining and self.state.unanswered is None
        if self.state.ready:
            self.started_once = True
        self.metrics.ready.set(1 if self.state.ready else 0)

    def set_unanswered(self, problem: str | None) -> None:
        """The serving engine's /health failed (``problem``) or answered again (None): readiness."""

        if problem is not None and self.state.unanswered is None:
            log.warning("engine /health failed (%s): readiness off until it answers", problem)
        elif problem is None and self.state.unanswered is not None:
            log.info("engine /health answers again: readiness back")
        self.state.unanswered = problem
        self._update_ready()

    def set_mode(self, mode: GraphMode, rung: int, ladder: list[GraphMode]) -> None:
        if self.state.mode is not None:
            self.metrics.graph_mode.labels(self.state.mode.value).set(0)
        self.metrics.graph_mode.labels(mode.value).set(1)
        self.metrics.rung.set(rung)
        self.state.mode = mode
        self.state.rung = rung
        self.state.ladder = list(ladder)
        if self.state.requested_mode is None and ladder:
            self.state.requested_mode = ladder[0]

    def record_fallback(self, from_mode: GraphMode, to_mode: GraphMode, reason: str, kind: str,
                        deterministic: bool) -> None:
        self.state.fallbacks += 1
        self.state.fallback_reason = f"{from_mode.value} -> {to_mode.value}: {reason}"
        self.state.fallback_kind = kind
        self.state.fallback_deterministic = deterministic
        self.metrics.fallbacks.labels(from_mode.value, to_mode.value, kind).inc()

    def record_restart(self, reason: str) -> None:
        self.state.engine_restarts += 1
        self.metrics.restarts.labels(reason).inc()

    def set_warmup(self, report: WarmupReport) -> None:
        self.state.warmup = report
        if report.seconds is not None:
            self.metrics.warmup_seconds.set(report.seconds)
        self.metrics.warmup_requests.set(report.requests)

    def set_adapters(self, adapters: list[AdapterStatus], error: str | None = None) -> None:
        """Each adapter's state (``/state``'s ``adapters``) and the count per state (the gauge)."""

        self.state.adapters = adapters
        self.state.adapters_error = error
        for phase in AdapterPhase:
            self.metrics.lora_adapters.labels(phase.value).set(sum(a.state is phase for a in adapters))

    def set_live(self, live: bool, reasons: list[str]) -> None:
        self.state.live = live
        self.state.live_reasons = list(reasons)
        self.metrics.live.set(1 if live else 0)

    def begin_drain(self) -> None:
        self.draining = True
        self.state.ready = False
        self.metrics.ready.set(0)
        self.set_phase(RuntimePhase.DRAINING, "SIGTERM received: draining in-flight requests")

    def snapshot(self) -> dict:
        return self.state.model_dump(mode="json", by_alias=True)
