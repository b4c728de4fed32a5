"""Memory-leak detection for one memory source (host RSS or device memory).

A baseline after warmup, a trend fitted to the floor of memory use (not its level), steps told
apart from leaks, and limits judged with a grace period, so that the preallocated KV cache,
traffic bursts and one-off steps raise no alarm. The model, and why: ``docs/leak-and-hang.md``
("The leak detector's model"). The class is synchronous and guards its state with a lock, so a
sampling thread and the probe handler may call it concurrently.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any, Literal

from ascend_runtime.config import LeakLimits
from ascend_runtime.health.trend import theil_sen

__all__ = ["LeakAssessment", "LeakDetector", "SourceKind", "format_duration"]

SourceKind = Literal["host", "device"]

#: Buckets per window: the trend is fitted to this many bucket minima.
BUCKETS_PER_WINDOW = 20
#: Step test: no stretch of this share of the window may hold more than STEP_SHARE_MAX of the
#: window's growth. A ramp puts ~25 % in each quarter, a staircase of two steps ~50 %, a single
#: step that plateaus ~100 %.
STEP_SPAN_FRACTION = 0.25
STEP_SHARE_MAX = 0.7
#: Limits are judged on the lower confidence bound of the slope, this many deviates below it.
CONFIDENCE_Z = 1.0
#: The trailing-minimum filter spans this share of the window.
FILTER_FRACTION = 0.25
#: Samples whose median is the baseline.
BASELINE_SAMPLES = 5
#: Recent samples whose median is the current level (for headroom and projection).
LEVEL_SAMPLES = 4
#: A drop below this fraction of the baseline is taken for a restart of the measured process.
RESTART_DROP_FRACTION = 0.5
#: The share of a window that must be covered by data before the trend is judged.
MIN_WINDOW_COVERAGE = 0.9


def format_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"


@dataclass(frozen=True)
class LeakAssessment:
    """The detector's view at one instant; :meth:`to_json` is what /state shows."""

    suspect: bool
    unhealthy: bool
    slope_mb_per_h: float | None
    baseline_mb: float | None
    projected_exhaustion_s: float | None
    reason: str | None
    state: Literal["disabled", "warming-up", "baselining", "filling-window", "watching"] = "watching"
    used_mb: float | None = None
    capacity_mb: float | None = None
    sustained_slope_mb_per_h: float | None = None
    suspect_for_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in (
            "slope_mb_per_h",
            "baseline_mb",
            "projected_exhaustion_s",
            "used_mb",
            "capacity_mb",
            "sustained_slope_mb_per_h",
            "suspect_for_s",
        ):
            if data[key] is not None:
                data[key] = round(data[key], 3)
        return data


@dataclass
class _Bucket:
    start: float
    low: float


class LeakDetector:
    """Trend, baseline and limits for one memory series (MB over seconds)."""

    def __init__(
        self,
        limits: LeakLimits,
        capacity_mb: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        kind: SourceKind = "host",
    ) -> None:
        if kind not in ("host", "device"):
            raise ValueError(f"kind must be 'host' or 'device', got {kind!r}")
        self.limits = limits
        self.kind: SourceKind = kind
        self.capacity_mb = capacity_mb
        self._clock = clock
        self.growth_limit_mb_per_h = (
            limits.host_growth_mb_per_hour if kind == "host" else limits.device_growth_mb_per_hour
        )
        self.bucket_s = max(2.0 * limits.sample_interval_s, limits.window_s / BUCKETS_PER_WINDOW)
        #: A crossed limit must stay clear this long before its grace timer starts over, so a
        #: staircase leak (crossings that come and go with each step) still adds up.
        self._clear_s = limits.window_s / 2
        self.filter_s = max(2.0 * limits.sample_interval_s, limits.window_s * FILTER_FRACTION)
        self._lock = threading.Lock()
        self._reset_state()

    # -- state ---------------------------------------------------------------------------

    def _reset_state(self) -> None:
        self._baseline_at: float | None = None
        self._auto_baseline_at: float | None = None
        self._baseline_samples: list[float] = []
        self._baseline: float | None = None
        self._buckets: deque[_Bucket] = deque()
        self._current: _Bucket | None = None
        self._recent: deque[float] = deque(maxlen=LEVEL_SAMPLES)
        self._floor: deque[tuple[float, float]] = deque()  # monotonic deque of the trailing minimum
        self._last_used: float | None = None
        self._trend: tuple[float | None, float | None] = (None, None)  # (whole, sustained) MB/s
        self._suspect_since: float | None = None
        self._last_crossed_at: float | None = None
        self._last_reasons: list[str] = []
        self._last_assessment: LeakAssessment | None = None
        self.resets = 0

    def _now(self, now: float | None) -> float:
        return self._clock() if now is None else now

    def reset(self, now: float | None = None, *, auto_baseline_after_s: float | None = None) -> None:
        """Forget samples and baseline (the engine restarted).

        With ``auto_baseline_after_s`` the detector takes a new baseline by itself that long
        after ``now``; otherwise it waits for :meth:`mark_baseline`.
        """

        now = self._now(now)
        with self._lock:
            resets = self.resets
            self._reset_state()
            self.resets = resets + 1
            if auto_baseline_after_s is not None:
                self._auto_baseline_at = now + auto_baseline_after_s

    def mark_baseline(self, now: float | None = None) -> None:
        """Warmup is over: samples from now on form the baseline and the trend."""

        now = self._now(now)
        with self._lock:
            self._start_baseline(now)

    def _start_baseline(self, now: float) -> None:
        self._baseline_at = now
        self._auto_baseline_at = None
        self._baseline_samples = []
        self._baseline = None
        self._buckets.clear()
        self._floor.clear()
        self._current = None
        self._trend = (None, None)
        self._suspect_since = None
        self._last_crossed_at = None
        self._last_reasons = []
        self._last_assessment = None

    @property
    def baseline_mb(self) -> float | None:
        return self._baseline

    # -- input ---------------------------------------------------------------------------

    def add(self, now: float | None, used_mb: float, total_mb: float | None = None) -> None:
        """Record one sample; ``total_mb`` updates the capacity when the source knows it."""

        now = self._now(now)
        with self._lock:
            if total_mb is not None and total_mb > 0:
                self.capacity_mb = total_mb
            self._last_used = used_mb
            self._recent.append(used_mb)
            if self._auto_baseline_at is not None and now >= self._auto_baseline_at:
                self._start_baseline(now)
            if self._baseline_at is None or now < self._baseline_at:
                return
            if self._baseline is None:
                self._baseline_samples.append(used_mb)
                if len(self._baseline_samples) >= BASELINE_SAMPLES:
                    self._baseline = median(self._baseline_samples)
                return
            if used_mb < RESTART_DROP_FRACTION * self._baseline:
                # The measured process restarted under us; the new one warms up for a while.
                resets = self.resets
                self._reset_state()
                self.resets = resets + 1
                self._auto_baseline_at = now + self.limits.window_s
                self._recent.append(used_mb)
                self._last_used = used_mb
                return
            self._add_to_bucket(now, self._filter(now, used_mb))

    def _filter(self, now: float, used_mb: float) -> float:
        """Trailing minimum over ``filter_s``: bursts shorter than that vanish, a ramp only shifts."""

        floor = self._floor
        while floor and floor[-1][1] >= used_mb:
            floor.pop()
        floor.append((now, used_mb))
        while floor[0][0] < now - self.filter_s:
            floor.popleft()
        return floor[0][1]

    def _add_to_bucket(self, now: float, used_mb: float) -> None:
        current = self._current
        if current is not None and now < current.start + self.bucket_s:
            current.low = min(current.low, used_mb)
            return
        if current is not None:
            self._buckets.append(current)
            horizon = now - self.limits.window_s
            while self._buckets and self._buckets[0].start + self.bucket_s <= horizon:
                self._buckets.popleft()
            self._trend = self._fit()
        start = (
            now
            if current is None
            else current.start + self.bucket_s * int((now - current.start) // self.bucket_s)
        )
        self._current = _Bucket(start=start, low=used_mb)

    def _fit(self) -> tuple[float | None, float | None]:
        buckets = list(self._buckets)
        per_window = min(BUCKETS_PER_WINDOW, int(self.limits.window_s / self.bucket_s))
        needed = max(4, int(per_window * MIN_WINDOW_COVERAGE))
        if len(buckets) < needed or buckets[-1].start - buckets[0].start + self.bucket_s < (
            MIN_WINDOW_COVERAGE * self.limits.window_s
        ):
            return (None, None)
        times = [b.start for b in buckets]
        lows = [b.low for b in buckets]
        fit = theil_sen(times, lows, z=CONFIDENCE_Z)
        if fit is None:
            return (None, None)
        if fit.slope <= 0:
            return (fit.slope, fit.slope)
        span = max(1, round(len(lows) * STEP_SPAN_FRACTION))
        rise = median(lows[-span:]) - median(lows[:span])
        jump = max(lows[i + span] - lows[i] for i in range(len(lows) - span))
        # Growth that sits in one short stretch of the window is a step, not a leak (yet).
        spread = rise > 0 and jump <= STEP_SHARE_MAX * rise
        return (fit.slope, max(0.0, fit.low) if spread else 0.0)

    # -- verdict -------------------------------------------------------------------------

    def assess(self, now: float | None = None) -> LeakAssessment:
        now = self._now(now)
        with self._lock:
            self._last_assessment = self._assess(now)
            return self._last_assessment

    def last(self) -> LeakAssessment:
        """The assessment made with the latest sample (what probes should answer from)."""

        with self._lock:
            if self._last_assessment is None:
                self._last_assessment = self._assess(self._clock())
            return self._last_assessment

    def _assess(self, now: float) -> LeakAssessment:
        limits = self.limits
        level = median(self._recent) if self._recent else None
        common: dict[str, Any] = {"used_mb": self._last_used, "capacity_mb": self.capacity_mb}
        if not limits.enabled:
            return LeakAssessment(False, False, None, None, None, None, state="disabled", **common)
        if self._baseline_at is None:
            return LeakAssessment(False, False, None, None, None, None, state="warming-up", **common)
        if self._baseline is None:
            return LeakAssessment(False, False, None, None, None, None, state="baselining", **common)

        whole, sustained = self._trend
        slope_h = None if whole is None else whole * 3600.0
        sustained_h = None if sustained is None else sustained * 3600.0
        headroom = None if self.capacity_mb is None or level is None else self.capacity_mb - level
        projected = None
        if headroom is not None and sustained_h is not None and sustained_h > 0:
            projected = max(0.0, headroom) / sustained_h * 3600.0

        reasons: list[str] = []
        window = format_duration(limits.window_s)
        if sustained_h is not None and sustained_h > self.growth_limit_mb_per_h:
            reasons.append(
                f"{self.kind} memory grows {sustained_h:.0f} MB/h over the last {window} "
                f"(limit {self.growth_limit_mb_per_h:.0f} MB/h)"
            )
        if projected is not None and projected < limits.min_time_to_exhaustion_s:
            reasons.append(
                f"{self.kind} memory runs out in {format_duration(projected)} at {sustained_h:.0f} MB/h "
                f"({headroom:.0f} MB free; limit {format_duration(limits.min_time_to_exhaustion_s)})"
            )
        if (
            headroom is not None
            and level is not None
            and headroom < limits.min_headroom_mb
            and (level > self._baseline)
        ):
            reasons.append(
                f"{self.kind} memory has {max(headroom, 0):.0f} MB free, "
                f"{level - self._baseline:.0f} MB above "
                f"the baseline (limit {limits.min_headroom_mb} MB free)"
            )

        if reasons:
            if self._suspect_since is None or now - (self._last_crossed_at or now) > self._clear_s:
                self._suspect_since = now
            self._last_crossed_at = now
            self._last_reasons = reasons
        elif self._suspect_since is not None and now - (self._last_crossed_at or now) > self._clear_s:
            self._suspect_since = self._last_crossed_at = None
            self._last_reasons = []
        held = None if self._suspect_since is None else (self._last_crossed_at or now) - self._suspect_since
        unhealthy = held is not None and held >= limits.grace_s
        reason = "; ".join(reasons or (self._last_reasons if unhealthy else [])) or None
        if unhealthy and reason:
            reason += f" for {format_duration(held or 0)} (grace {format_duration(limits.grace_s)})"
        state = "filling-window" if whole is None else "watching"
        return LeakAssessment(
            suspect=bool(reasons) or unhealthy,
            unhealthy=unhealthy,
            slope_mb_per_h=slope_h,
            baseline_mb=self._baseline,
            projected_exhaustion_s=projected,
            reason=reason,
            state=state,
            sustained_slope_mb_per_h=sustained_h,
            suspect_for_s=held,
            **common,
        )
