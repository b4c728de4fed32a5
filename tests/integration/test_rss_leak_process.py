"""A real child process whose RSS grows at a set rate turns the leak verdict unhealthy within the
delay the detector's own model predicts for that rate; a steady child never does.

The prediction replays a clean linear ramp at the same rate, limits and sampling interval
through the same detector (the benchmark's method, bench/leak_detection.py); the real process
gets that delay plus a margin for sampling and allocation jitter. Limits are scaled down to
seconds so the test runs in about 20 s; the config model forbids windows under 60 s in
production, hence ``model_construct``.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ascend_runtime.config import LeakLimits
from ascend_runtime.health.leak import LeakDetector
from ascend_runtime.memory.sources import HostRssSource

RATE_MB_S = 30.0
SAMPLE_S = 0.25
LIMITS = LeakLimits.model_construct(
    enabled=True,
    host_growth_mb_per_hour=RATE_MB_S * 3600 / 2,  # the leak runs at twice the limit, as 1 GB/h does
    device_growth_mb_per_hour=RATE_MB_S * 3600 / 2,
    min_time_to_exhaustion_s=60,
    min_headroom_mb=0,
    window_s=10,
    grace_s=2,
    sample_interval_s=SAMPLE_S,
)
CAPACITY_MB = 1_000_000.0  # keep the exhaustion and headroom limits out of this test

GROWING = f"""
import time
chunks = []
while True:
    chunks.append(b"\\x01" * int({RATE_MB_S} * 0.1 * 1024 * 1024))  # written, so resident
    time.sleep(0.1)
"""
STEADY = """
import time
block = b"\\x01" * (200 * 1024 * 1024)
while True:
    time.sleep(0.1)
"""


def predicted_delay_s() -> float:
    detector = LeakDetector(LIMITS, capacity_mb=CAPACITY_MB, kind="host")
    detector.mark_baseline(0.0)
    t = 0.0
    while t < 120:
        detector.add(t, 100.0 + RATE_MB_S * t)
        if detector.assess(t).unhealthy:
            return t
        t += SAMPLE_S
    raise AssertionError("the model never detects this leak")


@pytest.fixture
def children():
    procs = [subprocess.Popen([sys.executable, "-c", code]) for code in (GROWING, STEADY)]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_growing_child_turns_unhealthy_within_the_predicted_delay_and_steady_one_never(children) -> None:
    predicted = predicted_delay_s()
    budget = predicted + LIMITS.window_s / 2
    growing, steady = children
    time.sleep(1.0)  # interpreter start-up and the steady child's 200 MB: the "warmup"
    watched = {}
    for proc in children:
        source = HostRssSource(proc.pid, capacity_mb=CAPACITY_MB)
        detector = LeakDetector(LIMITS, capacity_mb=CAPACITY_MB, kind="host")
        detector.mark_baseline()
        watched[proc.pid] = (source, detector)

    start = time.monotonic()
    first_unhealthy: dict[int, float] = {}
    reasons: dict[int, str | None] = {}
    while time.monotonic() - start < budget + 2.0:
        for pid, (source, detector) in watched.items():
            sample = source.sample()
            detector.add(None, sample.used_mb, sample.total_mb)
            verdict = detector.assess()
            if verdict.unhealthy and pid not in first_unhealthy:
                first_unhealthy[pid] = time.monotonic() - start
                reasons[pid] = verdict.reason
        time.sleep(SAMPLE_S)

    assert growing.pid in first_unhealthy, f"growing child never unhealthy (model: {predicted:.1f}s)"
    assert first_unhealthy[growing.pid] <= budget, (
        f"detected after {first_unhealthy[growing.pid]:.1f}s; the model predicts {predicted:.1f}s"
    )
    assert "host memory grows" in (reasons[growing.pid] or "")
    assert steady.pid not in first_unhealthy, f"steady child alarmed: {reasons.get(steady.pid)}"
    slope = watched[growing.pid][1].assess().slope_mb_per_h
    assert slope is not None and slope == pytest.approx(RATE_MB_S * 3600, rel=0.35)
