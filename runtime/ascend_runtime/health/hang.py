"""Hung-engine detection: an engine that stalls its tokens, or one that stops answering.

Two signals, each with the same limit (``health.hangTimeoutS``):

* :class:`HangDetector`, from the engine's own Prometheus metrics. vLLM's ``/health`` answers 200
  without asking the engine core, so an engine that stopped producing tokens still looks alive:
  requests are running (``vllm:num_requests_running > 0``) while
  ``vllm:generation_tokens_total`` has not advanced for ``timeout_s``. An idle engine is healthy
  however long it idles; a counter that goes backwards means the engine restarted.
* :class:`AnswerWatch`, from the runtime's own polls of the engine's ``/health``. An API server
  whose process is alive but answers nothing (a wedged event loop, a stopped process) or only
  errors feeds the metrics signal nothing at all, so it is judged by itself: no good answer for
  ``timeout_s`` is hung.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ascend_runtime.promtext import MetricsTextError, sample_values, total

__all__ = ["AnswerWatch", "EngineCounters", "HangAssessment", "HangDetector", "MetricsParseError", "parse_engine_metrics"]

RUNNING = "vllm:num_requests_running"
GENERATED = "vllm:generation_tokens_total"


class MetricsParseError(ValueError):
    """The engine's /metrics text is not Prometheus text, or lacks the metrics we need."""


@dataclass(frozen=True)
class EngineCounters:
    num_requests_running: float
    generation_tokens_total: float


def parse_engine_metrics(text: str) -> EngineCounters:
    """Sum ``vllm:num_requests_running`` and ``vllm:generation_tokens_total`` over label sets.

    Label sets differ per model name and engine index (data parallel), so every sample counts.
    """

    try:
        values = sample_values(text, (RUNNING, GENERATED))
    except MetricsTextError as error:
        raise MetricsParseError(f"expected Prometheus text from the engine's /metrics: {error}") from None
    running, generated = total(values, RUNNING), total(values, GENERATED)
    missing = [name for name, value in ((RUNNING, running), (GENERATED, generated)) if value is None]
    if missing:
        raise MetricsParseError(
            f"the engine's /metrics lacks {', '.join(missing)} (is this a vLLM OpenAI server?)"
        )
    assert running is not None and generated is not None
    return EngineCounters(num_requests_running=running, generation_tokens_total=generated)


@dataclass(frozen=True)
class HangAssessment:
    hung: bool
    reason: str | None
    stalled_for_s: float | None = None


class _Watch:
    """A verdict that turns after ``timeout_s`` of something lasting, read from several threads."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        raise NotImplementedError


class HangDetector(_Watch):
    def reset(self) -> None:
        """Forget the engine's counters (it was restarted)."""

        self._last_tokens: float | None = None
        self._progress_at: float | None = None  # last time tokens advanced or work began
        self._last: HangAssessment = HangAssessment(False, None)

    def observe(
        self, now: float | None, num_requests_running: float, generation_tokens_total: float
    ) -> HangAssessment:
        now = self._clock() if now is None else now
        with self._lock:
            advanced = self._last_tokens is None or generation_tokens_total > self._last_tokens
            restarted = self._last_tokens is not None and generation_tokens_total < self._last_tokens
            self._last_tokens = generation_tokens_total
            if num_requests_running <= 0:
                self._progress_at = None  # idle: nothing is owed
                self._last = HangAssessment(False, None)
                return self._last
            if advanced or restarted or self._progress_at is None:
                self._progress_at = now
            stalled = now - self._progress_at
            if stalled >= self.timeout_s:
                self._last = HangAssessment(
                    True,
                    f"engine hung: {num_requests_running:g} requests running and no token generated for "
                    f"{stalled:.0f}s (vllm:generation_tokens_total stuck at {generation_tokens_total:g}; "
                    f"limit {self.timeout_s:g}s)",
                    stalled,
                )
            else:
                self._last = HangAssessment(False, None, stalled)
            return self._last

    def assess(self) -> HangAssessment:
        with self._lock:
            return self._last


class AnswerWatch(_Watch):
    """How long the engine's API server has given no good answer (200) to the runtime's polls."""

    def reset(self) -> None:
        """A new engine: nothing owed yet."""

        with self._lock:
            self._bad_since: float | None = None
            self._last_problem: str | None = None

    def observe(self, now: float | None, problem: str | None) -> HangAssessment:
        """One poll: ``problem`` None for a 200, else what went wrong (timeout, HTTP 500, refused)."""

        now = self._clock() if now is None else now
        with self._lock:
            if problem is None:
                self._bad_since = None
                self._last_problem = None
            else:
                if self._bad_since is None:
                    self._bad_since = now
                self._last_problem = problem
            return self._assess(now)

    def assess(self, now: float | None = None) -> HangAssessment:
        with self._lock:
            return self._assess(self._clock() if now is None else now)

    @property
    def problem(self) -> str | None:
        """The last poll's problem while polls fail; None after a good answer."""

        return self._last_problem

    def _assess(self, now: float) -> HangAssessment:
        if self._bad_since is None:
            return HangAssessment(False, None)
        silent = now - self._bad_since
        if silent >= self.timeout_s:
            return HangAssessment(
                True,
                f"engine hung: its API server gave no good answer to /health for {silent:.0f}s "
                f"(last: {self._last_problem}; limit {self.timeout_s:g}s)",
                silent,
            )
        return HangAssessment(False, None, silent)
