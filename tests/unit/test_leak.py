"""The leak detector: baseline, robust trend, step rejection, limits, grace, restarts; and a
fixed-seed slice of the benchmark battery (a 1 GB/h leak found within 20 simulated minutes, a
healthy week without an alarm).
"""

from __future__ import annotations

import math
import random

import pytest

from ascend_runtime.config import LeakLimits
from ascend_runtime.health.leak import LeakDetector
from ascend_runtime.health.trend import theil_sen, theil_sen_slope
from benchload import load_bench

LIMITS = LeakLimits()  # the shipped defaults
STEP = LIMITS.sample_interval_s


def feed(detector: LeakDetector, start: float, end: float, value, step: float = STEP):
    """Sample ``value(t)`` from start to end; return the first time it was unhealthy, if any."""

    first = None
    t = start
    while t < end:
        detector.add(t, value(t))
        if detector.assess(t).unhealthy and first is None:
            first = t
        t += step
    return first


# -- trend --------------------------------------------------------------------------------


def test_theil_sen_ignores_a_minority_of_outliers() -> None:
    times = list(range(20))
    values = [2.0 * t + 5 for t in times]
    values[3], values[11], values[17] = 500.0, -400.0, 900.0
    assert theil_sen_slope(times, values) == pytest.approx(2.0)


def test_theil_sen_bounds_bracket_the_slope_and_widen_with_noise() -> None:
    rng = random.Random(1)
    times = list(range(30))
    quiet = theil_sen(times, [t + rng.gauss(0, 0.1) for t in times])
    noisy = theil_sen(times, [t + rng.gauss(0, 5.0) for t in times])
    assert quiet is not None and noisy is not None
    assert quiet.low <= quiet.slope <= quiet.high
    assert (noisy.high - noisy.low) > 10 * (quiet.high - quiet.low)


def test_theil_sen_needs_two_distinct_times() -> None:
    assert theil_sen_slope([1.0, 1.0], [3.0, 4.0]) is None
    with pytest.raises(ValueError, match="differ in length"):
        theil_sen_slope([1.0], [1.0, 2.0])


# -- baseline and warmup -----------------------------------------------------------------


def test_nothing_counts_before_the_baseline() -> None:
    detector = LeakDetector(LIMITS, capacity_mb=65536, kind="device")
    # Weights and KV preallocation: a steep climb to the utilisation ceiling.
    assert feed(detector, 0, 1800, lambda t: min(58982, 600 + 40 * t)) is None
    assessment = detector.assess(1800)
    assert assessment.state == "warming-up"
    assert not assessment.suspect and assessment.baseline_mb is None


def test_baseline_is_the_level_after_warmup() -> None:
    detector = LeakDetector(LIMITS, capacity_mb=65536, kind="device")
    feed(detector, 0, 600, lambda t: 58982)
    detector.mark_baseline(600)
    feed(detector, 600, 3000, lambda t: 58982 + (t % 30 == 0) * 2)
    assessment = detector.assess(3000)
    assert assessment.baseline_mb == pytest.approx(58982, abs=2)
    assert assessment.state == "watching"
    assert assessment.slope_mb_per_h == pytest.approx(0, abs=20)
    assert assessment.projected_exhaustion_s is None and not assessment.suspect


# -- leaks and limits --------------------------------------------------------------------


def test_linear_leak_turns_unhealthy_after_grace_with_reason_and_numbers() -> None:
    detector = LeakDetector(LIMITS, capacity_mb=65536, kind="host")
    detector.mark_baseline(0)
    rate = 1024.0  # MB/h
    first = feed(detector, 0, 4 * 3600, lambda t: 20000 + rate * max(0.0, t - 3600) / 3600)
    assert first is not None and 3600 < first <= 3600 + 20 * 60
    assessment = detector.assess(first)
    assert assessment.unhealthy
    assert assessment.slope_mb_per_h == pytest.approx(rate, rel=0.15)
    assert assessment.reason is not None and "grows" in assessment.reason and "grace" in assessment.reason


def test_suspect_comes_before_unhealthy_by_the_grace_period() -> None:
    detector = LeakDetector(LIMITS, capacity_mb=65536, kind="host")
    detector.mark_baseline(0)
    suspect_at = unhealthy_at = None
    t = 0.0
    while unhealthy_at is None and t < 4 * 3600:
        detector.add(t, 20000 + 2048 * max(0.0, t - 3600) / 3600)
        a = detector.assess(t)
        suspect_at = suspect_at if suspect_at is not None or not a.suspect else t
        unhealthy_at = t if a.unhealthy else None
        t += STEP
    assert suspect_at is not None and unhealthy_at is not None
    assert unhealthy_at - suspect_at == pytest.approx(LIMITS.grace_s, abs=STEP)


def test_a_step_that_plateaus_is_not_a_leak() -> None:
    detector = LeakDetector(LIMITS, capacity_mb=65536, kind="host")
    detector.mark_baseline(0)
    assert feed(detector, 0, 6 * 3600, lambda t: 20000 + (800 if t > 3600 else 0)) is None


def test_short_bursts_are_not_a_leak() -> None:
    detector = LeakDetector(LIMITS, capacity_mb=65536, kind="host")
    detector.mark_baseline(0)
    # +1.5 GB for two minutes every 20 minutes (a large request batch).
    assert feed(detector, 0, 12 * 3600, lambda t: 20000 + (1500 if t % 1200 < 120 else 0)) is None


def test_projected_exhaustion_limit_catches_a_slow_leak_near_the_ceiling() -> None:
    limits = LeakLimits(device_growth_mb_per_hour=4096)  # rate limit out of the way
    detector = LeakDetector(limits, capacity_mb=32768, kind="device")
    detector.mark_baseline(0)
    first = feed(detector, 0, 12 * 3600, lambda t: 29000 + 900 * t / 3600)  # 3.7 GB free, 900 MB/h
    assert first is not None
    assessment = detector.assess(first)
    assert "runs out in" in (assessment.reason or "")
    assert assessment.projected_exhaustion_s is not None
    assert assessment.projected_exhaustion_s < limits.min_time_to_exhaustion_s


def test_headroom_limit_needs_growth_above_the_baseline() -> None:
    limits = LeakLimits(min_headroom_mb=512)
    tight = LeakDetector(limits, capacity_mb=32768, kind="device")
    tight.mark_baseline(0)
    # Configured tight from the start (200 MB free) but flat: not a leak.
    assert feed(tight, 0, 3 * 3600, lambda t: 32568) is None


def test_disabled_limits_never_alarm() -> None:
    detector = LeakDetector(LeakLimits(enabled=False), capacity_mb=65536)
    detector.mark_baseline(0)
    assert feed(detector, 0, 3 * 3600, lambda t: 20000 + 5000 * t / 3600) is None
    assert detector.assess(3 * 3600).state == "disabled"


def test_reset_forgets_everything_until_a_new_baseline() -> None:
    detector = LeakDetector(LIMITS, capacity_mb=65536)
    detector.mark_baseline(0)
    first = feed(detector, 0, 3 * 3600, lambda t: 20000 + 3000 * t / 3600)
    assert first is not None
    detector.reset(3 * 3600)
    assessment = detector.assess(3 * 3600)
    assert not assessment.unhealthy and assessment.state == "warming-up" and assessment.baseline_mb is None


def test_unannounced_restart_drop_resets_and_rebaselines_by_itself() -> None:
    detector = LeakDetector(LIMITS, capacity_mb=65536)
    detector.mark_baseline(0)
    feed(detector, 0, 3600, lambda t: 20000)

    def restarted(t: float) -> float:  # drops to 2 GB, warms back up over 5 minutes
        return 2000 + min(1.0, (t - 3600) / 300) * 18000

    assert feed(detector, 3600, 3 * 3600, restarted) is None
    assert detector.resets == 1
    assessment = detector.assess(3 * 3600)
    assert assessment.baseline_mb == pytest.approx(20000)
    assert assessment.state == "watching"


def test_kind_is_validated() -> None:
    with pytest.raises(ValueError, match="'host' or 'device'"):
        LeakDetector(LIMITS, kind="gpu")  # type: ignore[arg-type]


# -- the benchmark battery, one fixed seed ----------------------------------------------


@pytest.fixture(scope="module")
def bench():
    return load_bench("leak_detection")


@pytest.mark.parametrize("kind", ["host", "device"])
@pytest.mark.parametrize("stepwise", [False, True], ids=["linear", "stepwise"])
def test_bench_leak_of_1_gb_per_hour_is_found_within_20_minutes(bench, kind: str, stepwise: bool) -> None:
    trace = bench.leaking_trace(kind, 1.0, stepwise, seed=7000, days=0.25)
    result = bench.replay(trace, LIMITS, stop_at_first_alarm=True)
    assert result.first_unhealthy_s is not None, f"{trace.name} never alarmed"
    delay = result.first_unhealthy_s - trace.leak_start_s
    assert 0 < delay <= 20 * 60, f"{trace.name}: detected after {delay / 60:.1f} min"


@pytest.mark.parametrize(
    "name", ["host-everything", "host-traffic-bursts", "host-restarts", "device-hbm-64g-steps"]
)
def test_bench_healthy_trace_never_alarms(bench, name: str) -> None:
    trace = next(t for t in bench.healthy_battery(seed=0, days=2.0) if t.name == name)
    result = bench.replay(trace, LIMITS)
    assert result.alarms == 0, f"{name}: {result.first_reason} at {result.first_unhealthy_s}"
    assert result.samples > 2 * 24 * 3600 / bench.SAMPLE_S * 0.99


def test_bench_battery_slice_reports_every_rate(bench) -> None:
    results = bench.run_battery(days=0.5, seeds=1, rates=(1.0,), kinds=("device",), healthy=False)
    rows = {(row["rate_gb_h"], row["shape"]): row for row in results["leaks"]}
    assert set(rows) == {(1.0, "linear"), (1.0, "stepwise")}
    assert all(row["missed"] == 0 and row["delay_min_max"] <= 20 for row in rows.values())
    assert math.isfinite(results["us_per_sample"])
