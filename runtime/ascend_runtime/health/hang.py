"""Hung-engine detection: an engine that stalls its tokens, or one that stops answering.

Two signals, each with the same limit (``health.hangTimeoutS``):

* :class:`HangDetector`, from the engine's own Prometheus metrics. vLLM's ``/health`` answers 200
  without asking the engine core, so an engine that stopped producing tokens still looks alive:
  requests are running (``vllm:num_requests_running > 0``) while
  ``vllm:generation_tokens_total`` has not advanced for ``timeout_s``. An idle engine is healthy
  however long it idles; a counter that goes backwards means the engine restarted. Each engine
  (each ``model_name`` / ``engine`` label set: one per data-parallel rank) is judged by itself,
  because a sum over engines keeps advancing while one engine's requests hang; the pod is hung
  when any engine is, and the reason names it by its labels.
* :class:`AnswerWatch`, from the runtime's own polls of the engine's ``/health``. An API server
  whose process is alive but answers nothing (a wedged event loop, a stopped process) or only
  errors feeds the metrics signal nothing at all, so it is judged by itself: no good answer for
  ``timeout_s`` is hung.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ascend_runtime.promtext import MetricsTextError, values_by_labels

__all__ = [
    "AnswerWatch",
    "EngineCounters",
    "EngineKey",
    "HangAssessment",
    "HangDetector",
    "MetricsParseError",
    "parse_engine_metrics",
]

RUNNING = "vllm:num_requests_running"
GENERATED = "vllm:generation_tokens_total"
#: The labels vLLM v1 puts on every per-engine metric (``vllm/v1/metrics/loggers.py``).
ENGINE_LABELS = ("model_name", "engine")


class MetricsParseError(ValueError):
    """The engine's /metrics text is not Prometheus text, or lacks the metrics we need."""


@dataclass(frozen=True)
class EngineKey:
    """One engine of the API server, as vLLM labels its metrics ("" for an absent label)."""

    model_name: str = ""
    engine: str = ""

    def sort_key(self) -> tuple[str, int, str]:
        return (self.model_name, int(self.engine) if self.engine.isdigit() else -1, self.engine)

    def __str__(self) -> str:
        """The Prometheus label selector, ``{engine="1",model_name="qwen"}``; "" without labels."""

        values = (("engine", self.engine), ("model_name", self.model_name))
        pairs = [f'{label}="{_escape(value)}"' for label, value in values if value]
        return "{" + ",".join(pairs) + "}" if pairs else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass(frozen=True)
class EngineCounters:
    num_requests_running: float
    generation_tokens_total: float


def parse_engine_metrics(text: str) -> dict[EngineKey, EngineCounters]:
    """Each engine's ``vllm:num_requests_running`` and ``vllm:generation_tokens_total``.

    Engines are told apart by their ``model_name`` and ``engine`` labels; samples of one engine
    that differ in other labels are summed. An engine that shows only one of the two series
    counts 0 for the other. Either series missing for every engine is an error.
    """

    try:
        values = values_by_labels(text, (RUNNING, GENERATED), ENGINE_LABELS)
    except MetricsTextError as error:
        raise MetricsParseError(f"expected Prometheus text from the engine's /metrics: {error}") from None
    missing = [name for name in (RUNNING, GENERATED) if name not in values]
    if missing:
        raise MetricsParseError(
            f"the engine's /metrics lacks {', '.join(missing)} (is this a vLLM OpenAI server?)"
        )
    running, generated = values[RUNNING], values[GENERATED]
    keys = sorted({EngineKey(*key) for key in (*running, *generated)}, key=EngineKey.sort_key)
    return {
        key: EngineCounters(
            num_requests_running=running.get((key.model_name, key.engine), 0.0),
            generation_tokens_total=generated.get((key.model_name, key.engine), 0.0),
        )
        for key in keys
    }


@dataclass(frozen=True)
class HangAssessment:
    """``stalled_for_s`` is the longest stall among engines with running requests (None: idle)."""

    hung: bool
    reason: str | None
    stalled_for_s: float | None = None
    hung_engines: tuple[EngineKey, ...] = ()


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


class _EngineStall:
    """One engine's progress: when its tokens last advanced while requests ran."""

    def __init__(self) -> None:
        self.last_tokens: float | None = None
        self.progress_at: float | None = None  # last time tokens advanced or work began

    def observe(self, now: float, counters: EngineCounters) -> float | None:
        """Seconds this engine has had running requests and no new token; None when idle."""

        tokens = counters.generation_tokens_total
        # A first sight, an advance or a counter that went back (a restarted engine) is progress.
        progressed = self.last_tokens is None or tokens != self.last_tokens
        self.last_tokens = tokens
        if counters.num_requests_running <= 0:
            self.progress_at = None  # idle: nothing is owed
            return None
        if progressed or self.progress_at is None:
            self.progress_at = now
        return now - self.progress_at


@dataclass(frozen=True)
class EngineProgress:
    """One engine's figures at the last observation (what /state shows per engine)."""

    running: float
    generation_tokens_total: float
    stalled_for_s: float | None
    hung: bool

    def to_json(self, key: EngineKey) -> dict[str, str | float | bool | None]:
        stalled = None if self.stalled_for_s is None else round(self.stalled_for_s, 1)
        return {
            "engine": key.engine,
            "model_name": key.model_name,
            "running": self.running,
            "generation_tokens_total": self.generation_tokens_total,
            "stalled_for_s": stalled,
            "hung": self.hung,
        }


class HangDetector(_Watch):
    """Stalled tokens per engine; the pod is hung when any engine is."""

    def reset(self) -> None:
        """Forget every engine's counters (the engine was restarted)."""

        self._engines: dict[EngineKey, _EngineStall] = {}
        self._progress: dict[EngineKey, EngineProgress] = {}
        self._last: HangAssessment = HangAssessment(False, None)

    def observe(self, now: float | None, engines: Mapping[EngineKey, EngineCounters]) -> HangAssessment:
        """One scrape of the engine's /metrics, as :func:`parse_engine_metrics` reads it.

        An engine that no longer appears is forgotten; one that appears starts with no debt.
        """

        now = self._clock() if now is None else now
        with self._lock:
            self._engines = {key: self._engines.get(key) or _EngineStall() for key in engines}
            progress: dict[EngineKey, EngineProgress] = {}
            for key in sorted(engines, key=EngineKey.sort_key):
                counters = engines[key]
                stalled = self._engines[key].observe(now, counters)
                progress[key] = EngineProgress(
                    counters.num_requests_running,
                    counters.generation_tokens_total,
                    stalled,
                    stalled is not None and stalled >= self.timeout_s,
                )
            self._progress = progress
            self._last = self._judge(progress)
            return self._last

    def _judge(self, progress: Mapping[EngineKey, EngineProgress]) -> HangAssessment:
        stalls = [p.stalled_for_s for p in progress.values() if p.stalled_for_s is not None]
        longest = max(stalls) if stalls else None
        hung = tuple(key for key, p in progress.items() if p.hung)
        if not hung:
            return HangAssessment(False, None, longest)
        several = f"{len(hung)} of {len(progress)} engines" if len(hung) > 1 else None
        reasons = [self._reason(key, progress[key]) for key in hung]
        prefix = f"engine hung ({several}): " if several else "engine hung: "
        return HangAssessment(True, prefix + "; ".join(reasons), longest, hung)

    def _reason(self, key: EngineKey, progress: EngineProgress) -> str:
        name = f"engine {key}: " if str(key) else ""
        return (
            f"{name}{progress.running:g} requests running and no token generated for "
            f"{progress.stalled_for_s or 0:.0f}s ({GENERATED} stuck at {progress.generation_tokens_total:g}; "
            f"limit {self.timeout_s:g}s)"
        )

    def assess(self) -> HangAssessment:
        with self._lock:
            return self._last

    def engines(self) -> dict[EngineKey, EngineProgress]:
        """Each engine's figures at the last observation."""

        with self._lock:
            return dict(self._progress)


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
