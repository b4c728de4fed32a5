"""Liveness beyond /health: memory-leak detection and hung-engine detection.

:mod:`.trend` (Theil-Sen), :mod:`.leak` (one memory series against ``LeakLimits``),
:mod:`.hang` (tokens stalled while requests run, per engine, or no answer at all) and :mod:`.monitor` (all
of it for the runtime: verdict for the liveness probe, gauges for /metrics).
"""

from ascend_runtime.health.hang import AnswerWatch, EngineKey, HangAssessment, HangDetector, parse_engine_metrics
from ascend_runtime.health.leak import LeakAssessment, LeakDetector
from ascend_runtime.health.monitor import HealthMonitor, HealthVerdict

__all__ = [
    "AnswerWatch",
    "EngineKey",
    "HangAssessment",
    "HangDetector",
    "HealthMonitor",
    "HealthVerdict",
    "LeakAssessment",
    "LeakDetector",
    "parse_engine_metrics",
]
