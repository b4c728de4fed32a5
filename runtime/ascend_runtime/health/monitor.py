"""The runtime's health monitor: memory-leak and hung-engine verdicts for liveness and /metrics.

Wiring (done by the runtime): build a :class:`HealthMonitor` with the config's ``health``
section, the sources from :func:`ascend_runtime.memory.sources.select_sources` and the
runtime's Prometheus registry; call :meth:`HealthMonitor.sample_memory` every
``health.leak.sample_interval_s`` (in an executor: sources may run ``npu-smi``), feed the engine's
``/metrics`` text to :meth:`HealthMonitor.observe_engine_metrics` (each engine of a
data-parallel API server is judged by itself), call
:meth:`HealthMonitor.mark_baseline` when warmup is done and :meth:`HealthMonitor.reset` when the
engine restarts. The liveness probe answers from :meth:`HealthMonitor.verdict`.

Everything is synchronous; one lock per detector keeps a sampling thread and the probe handler
from tripping over each other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from ascend_runtime.config import HealthConfig
from ascend_runtime.health.hang import (
    AnswerWatch,
    HangAssessment,
    HangDetector,
    MetricsParseError,
    parse_engine_metrics,
)
from ascend_runtime.health.leak import LeakAssessment, LeakDetector
from ascend_runtime.memory.sources import MemorySource, MemorySourceError

__all__ = ["HealthMonitor", "HealthVerdict"]

log = logging.getLogger(__name__)
NAN = float("nan")


@dataclass(frozen=True)
class HealthVerdict:
    """``healthy`` is what liveness answers; ``reasons`` say why not; ``details`` go to /state."""

    healthy: bool
    reasons: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "reasons": list(self.reasons), "details": self.details}


class HealthMonitor:
    def __init__(
        self,
        config: HealthConfig,
        sources: Sequence[MemorySource],
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._sources: list[MemorySource] = []
        self._detectors: dict[str, LeakDetector] = {}
        self._errors: dict[str, str] = {}
        self._hang = HangDetector(config.hang_timeout_s, clock=clock)
        self._answers = AnswerWatch(config.hang_timeout_s, clock=clock)
        self._engine_metrics_error: str | None = None
        labels = ["source"]
        self._g_used = Gauge(
            "ascend_llm_memory_used_mb", "Memory in use (MB) per source.", labels, registry=registry
        )
        self._g_baseline = Gauge(
            "ascend_llm_memory_baseline_mb", "Memory after warmup (MB).", labels, registry=registry
        )
        self._g_slope = Gauge(
            "ascend_llm_memory_slope_mb_per_hour",
            "Robust (Theil-Sen) memory trend over the window (MB/h).",
            labels,
            registry=registry,
        )
        self._g_exhaust = Gauge(
            "ascend_llm_memory_projected_exhaustion_seconds",
            "Seconds until memory runs out at the sustained trend (+Inf when not growing).",
            labels,
            registry=registry,
        )
        self._g_suspect = Gauge(
            "ascend_llm_leak_suspected", "1 while a leak limit is crossed.", labels, registry=registry
        )
        self._g_hung = Gauge(
            "ascend_llm_engine_hung", "1 when requests run but no token is generated.", registry=registry
        )
        self._g_hung.set(0)
        self.set_sources(sources)

    # -- lifecycle -----------------------------------------------------------------------

    def set_sources(self, sources: Sequence[MemorySource]) -> None:
        """Replace the sources (the engine restarted under a new PID); detectors start over."""

        with self._lock:
            for old in self._sources:
                self._remove_labels(old.name)
            self._sources = list(sources)
            names = [source.name for source in self._sources]
            if len(set(names)) != len(names):
                raise ValueError(f"memory source names must be unique, got {names}")
            self._detectors = {
                source.name: LeakDetector(self.config.leak, clock=self._clock, kind=source.kind)
                for source in self._sources
            }
            self._errors = {}

    def _remove_labels(self, name: str) -> None:
        for gauge in (self._g_used, self._g_baseline, self._g_slope, self._g_exhaust, self._g_suspect):
            try:
                gauge.remove(name)
            except KeyError:
                pass

    def mark_baseline(self) -> None:
        """Warmup is over: memory from now on is judged against what it is now."""

        now = self._clock()
        for detector in self._detectors_snapshot():
            detector.mark_baseline(now)

    def reset(self) -> None:
        """The engine restarted: forget baselines, trends and token counters."""

        now = self._clock()
        for detector in self._detectors_snapshot():
            detector.reset(now)
        self._hang.reset()
        self._answers.reset()
        self._g_hung.set(0)

    def _detectors_snapshot(self) -> list[LeakDetector]:
        with self._lock:
            return list(self._detectors.values())

    # -- input ---------------------------------------------------------------------------

    def sample_memory(self) -> dict[str, LeakAssessment]:
        """Sample every source once and update detectors and gauges; a failing source is skipped."""

        with self._lock:
            pairs = [(source, self._detectors[source.name]) for source in self._sources]
        results: dict[str, LeakAssessment] = {}
        for source, detector in pairs:
            try:
                sample = source.sample()
            except MemorySourceError as error:
                if self._errors.get(source.name) != str(error):
                    log.warning("memory source %s: %s (skipped this round)", source.name, error)
                self._errors[source.name] = str(error)
                continue
            self._errors.pop(source.name, None)
            now = self._clock()
            detector.add(now, sample.used_mb, sample.total_mb)
            assessment = detector.assess(now)
            results[source.name] = assessment
            self._publish(source.name, assessment)
        return results

    def _publish(self, name: str, a: LeakAssessment) -> None:
        self._g_used.labels(name).set(NAN if a.used_mb is None else a.used_mb)
        self._g_baseline.labels(name).set(NAN if a.baseline_mb is None else a.baseline_mb)
        self._g_slope.labels(name).set(NAN if a.slope_mb_per_h is None else a.slope_mb_per_h)
        self._g_exhaust.labels(name).set(
            float("inf") if a.projected_exhaustion_s is None else a.projected_exhaustion_s
        )
        self._g_suspect.labels(name).set(1 if a.suspect else 0)

    def observe_engine_metrics(self, text: str) -> HangAssessment | None:
        """Feed the engine's /metrics text; returns None (and keeps the last verdict) if unusable."""

        try:
            engines = parse_engine_metrics(text)
        except MetricsParseError as error:
            if self._engine_metrics_error != str(error):
                log.warning("%s", error)
            self._engine_metrics_error = str(error)
            return None
        self._engine_metrics_error = None
        result = self._hang.observe(self._clock(), engines)
        self._g_hung.set(1 if result.hung or self._answers.assess(self._clock()).hung else 0)
        return result

    def observe_engine_answer(self, problem: str | None) -> HangAssessment:
        """One poll of the engine's /health: ``problem`` None for a 200, else what went wrong."""

        result = self._answers.observe(self._clock(), problem)
        self._g_hung.set(1 if result.hung or self._hang.assess().hung else 0)
        return result

    # -- output --------------------------------------------------------------------------

    def verdict(self) -> HealthVerdict:
        with self._lock:
            pairs = list(self._detectors.items())
            errors = dict(self._errors)
        reasons: list[str] = []
        memory: dict[str, Any] = {}
        for name, detector in pairs:
            assessment = detector.last()
            entry = assessment.to_json()
            if name in errors:
                entry["last_error"] = errors[name]
            memory[name] = entry
            if assessment.unhealthy and assessment.reason:
                reasons.append(f"{name}: {assessment.reason}")
        hang = self._hang.assess()
        if hang.hung and hang.reason:
            reasons.append(hang.reason)
        silent = self._answers.assess(self._clock())
        if silent.hung and silent.reason:
            reasons.append(silent.reason)
        details = {
            "memory": memory,
            "engine": {
                "hung": hang.hung or silent.hung,
                "stalled_for_s": None if hang.stalled_for_s is None else round(hang.stalled_for_s, 1),
                "unanswered_for_s": None if silent.stalled_for_s is None else round(silent.stalled_for_s, 1),
                "last_problem": self._answers.problem,
                "metrics_error": self._engine_metrics_error,
                "engines": [progress.to_json(key) for key, progress in self._hang.engines().items()],
            },
        }
        return HealthVerdict(healthy=not reasons, reasons=reasons, details=details)
