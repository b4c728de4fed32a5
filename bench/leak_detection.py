#!/usr/bin/env python3
"""Benchmark the memory-leak detector on synthetic traces: detection delay and false alarms.

Run:  python bench/leak_detection.py [--days 7] [--quick] [--json] [--seeds N]

Every trace is sampled every 15 s (the runtime's default ``sample_interval_s``) and fed to
:class:`ascend_runtime.health.leak.LeakDetector` with the default ``LeakLimits`` from
``ascend_runtime/config.py``, exactly as the runtime does: samples from engine start, the
baseline marked when warmup ends, ``reset()`` and a new baseline when the engine restarts.

Healthy battery (each runs ``--days`` simulated days; any unhealthy verdict is a false alarm):
host RSS with white noise, wandering (AR(1)) noise, traffic bursts, plateauing steps, a diurnal
load cycle, allocator/GC sawtooth, engine restarts (announced and unannounced), an allocator
ratchet during the first hours, and everything at once; device HBM flat at the KV-cache
ceiling with allocator steps, on a 64 GB chip and on a tightly configured 32 GB chip.

Leaking battery: 0.1, 0.5, 1 and 2 GB/h (1 GB = 1024 MB), linear and stepwise (a step every
5 min), on host RSS (with noise, bursts and sawtooth) and on device HBM, the leak starting 2 h
after warmup. Delay = first unhealthy verdict minus leak start. A leak that reaches the memory
limit first is a miss.

The module is importable (``run_battery``) so a unit test can run a fixed-seed slice.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from ascend_runtime.config import LeakLimits
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
    from ascend_runtime.config import LeakLimits
from ascend_runtime.health.leak import LeakDetector

GB = 1024.0
HOUR = 3600.0
DAY = 24 * HOUR
SAMPLE_S = 15.0
#: Warmup (weights, compile, KV cache, graph capture, warmup requests) lasts this long.
WARMUP_S = 8 * 60.0
#: Leaks start this long after warmup, with the window long full.
LEAK_START_S = 2 * HOUR
LEAK_RATES_GB_H = (0.1, 0.5, 1.0, 2.0)
HOST_CAPACITY_MB = 64 * GB  # the pod's memory limit
HOST_BASE_MB = 22 * GB  # a worker's RSS after warmup
#: Wandering noise: AR(1) per sample, correlation time SAMPLE_S / (1 - AR_PHI) = 5 min.
AR_PHI = 0.95


# --------------------------------------------------------------------------------------------
# Traces


@dataclass
class Trace:
    """Samples plus the runtime's lifecycle calls, in time order."""

    name: str
    kind: str  # "host" | "device"
    capacity_mb: float
    # (t, op, value): op is "sample" (value MB), "restart" (engine restarted) or "baseline".
    events: list[tuple[float, str, float]] = field(default_factory=list)
    leak_start_s: float | None = None
    leak_rate_mb_h: float = 0.0


def _warmup_host(t: float, base: float) -> float:
    """Host RSS of an engine ``t`` seconds after launch: imports, weights, compile, plateau."""

    if t < 30:
        return 1.2 * GB
    if t < 150:
        return 1.2 * GB + (base * 0.8 - 1.2 * GB) * (t - 30) / 120
    if t < 300:
        return base * 0.95
    return base


def _warmup_device(t: float, capacity: float, utilisation: float, weights: float) -> float:
    """Device memory: a context, then weights, then the KV cache preallocated to the ceiling."""

    if t < 40:
        return 600.0
    if t < 160:
        return 600.0 + weights * (t - 40) / 120
    if t < 200:
        return 600.0 + weights
    return capacity * utilisation


@dataclass
class _Shape:
    """Optional ingredients of a host trace."""

    white_mb: float = 15.0
    ar_mb: float = 0.0
    bursts_per_h: float = 0.0
    steps_per_day: float = 0.0
    diurnal_mb: float = 0.0
    sawtooth_mb: float = 0.0
    sawtooth_period_s: float = 240.0
    restart_every_s: float | None = None
    unannounced_restart_at_s: float | None = None
    ratchet_mb: float = 0.0
    ratchet_s: float = 3 * HOUR


def host_trace(
    name: str, seed: int, days: float, shape: _Shape, leak_rate_mb_h: float = 0.0, stepwise: bool = False
) -> Trace:
    rng = random.Random(seed)
    trace = Trace(name=name, kind="host", capacity_mb=HOST_CAPACITY_MB)
    end = days * DAY
    base = HOST_BASE_MB + rng.uniform(-2 * GB, 2 * GB)
    launch = 0.0
    restarts = []
    if shape.restart_every_s:
        t = shape.restart_every_s * rng.uniform(0.6, 1.0)
        while t < end:
            restarts.append(t)
            t += shape.restart_every_s * rng.uniform(0.6, 1.4)
    ar = 0.0
    burst_until, burst_mb = -1.0, 0.0
    step_total = 0.0
    baseline_sent = False
    unannounced = shape.unannounced_restart_at_s
    worker_launch: float | None = None
    if leak_rate_mb_h:
        trace.leak_start_s = WARMUP_S + LEAK_START_S
        trace.leak_rate_mb_h = leak_rate_mb_h
    t = 0.0
    while t < end:
        if restarts and t >= restarts[0]:
            restarts.pop(0)
            launch, baseline_sent, step_total = t, False, 0.0
            trace.events.append((t, "restart", 0.0))
        if unannounced is not None and t >= unannounced:
            worker_launch, unannounced = t, None
        age = t - launch
        if not baseline_sent and age >= WARMUP_S:
            trace.events.append((t, "baseline", 0.0))
            baseline_sent = True
        value = _warmup_host(age, base)
        if worker_launch is not None:
            # A worker died and came back inside the engine: its share of RSS warms up again.
            value = value * 0.3 + _warmup_host(t - worker_launch, base) * 0.7
        if age >= WARMUP_S:
            since = age - WARMUP_S
            if shape.ratchet_mb:
                value += shape.ratchet_mb * min(1.0, since / shape.ratchet_s) // 40 * 40
            if shape.steps_per_day and rng.random() < shape.steps_per_day * SAMPLE_S / DAY:
                step_total += rng.choice((1, 1, 1, -1)) * rng.uniform(50, 400)
            value += step_total
            if shape.diurnal_mb:
                value += shape.diurnal_mb * math.sin(2 * math.pi * t / DAY)
            if shape.sawtooth_mb:
                value += shape.sawtooth_mb * ((t % shape.sawtooth_period_s) / shape.sawtooth_period_s)
            if (
                shape.bursts_per_h
                and t >= burst_until
                and rng.random() < shape.bursts_per_h * SAMPLE_S / HOUR
            ):
                burst_until, burst_mb = t + rng.uniform(30, 150), rng.uniform(300, 1500)
            if t < burst_until:
                value += burst_mb
        if shape.ar_mb:
            ar = AR_PHI * ar + rng.gauss(0, shape.ar_mb * math.sqrt(1 - AR_PHI**2))
            value += ar
        value += rng.gauss(0, shape.white_mb)
        if trace.leak_start_s is not None and t >= trace.leak_start_s:
            value += _leaked(t - trace.leak_start_s, leak_rate_mb_h, stepwise, rng)
        trace.events.append((t, "sample", max(0.0, value)))
        t += SAMPLE_S
    return trace


def _leaked(elapsed: float, rate_mb_h: float, stepwise: bool, rng: random.Random) -> float:
    if not stepwise:
        return rate_mb_h * elapsed / HOUR
    period = 300.0  # a chunk leaks every 5 min (per batch of requests, per cache rebuild)
    return rate_mb_h * period / HOUR * math.ceil(elapsed / period)  # the first chunk at the start


def device_trace(
    name: str,
    seed: int,
    days: float,
    capacity: float = 65536.0,
    utilisation: float = 0.9,
    leak_rate_mb_h: float = 0.0,
    stepwise: bool = False,
    restart_every_s: float | None = None,
) -> Trace:
    rng = random.Random(seed)
    trace = Trace(name=name, kind="device", capacity_mb=capacity)
    end = days * DAY
    weights = capacity * 0.45
    launch, baseline_sent, steps = 0.0, False, 0.0
    if leak_rate_mb_h:
        trace.leak_start_s = WARMUP_S + LEAK_START_S
        trace.leak_rate_mb_h = leak_rate_mb_h
    next_restart = restart_every_s * rng.uniform(0.6, 1.0) if restart_every_s else math.inf
    t = 0.0
    while t < end:
        if t >= next_restart:
            launch, baseline_sent, steps = t, False, 0.0
            next_restart = t + (restart_every_s or math.inf) * rng.uniform(0.6, 1.4)
            trace.events.append((t, "restart", 0.0))
        age = t - launch
        if not baseline_sent and age >= WARMUP_S:
            trace.events.append((t, "baseline", 0.0))
            baseline_sent = True
        value = _warmup_device(age, capacity, utilisation, weights)
        if age >= WARMUP_S:
            # The allocator maps another segment now and then (workspace, a new shape); it stays.
            if steps < 600 and rng.random() < 3 * SAMPLE_S / DAY:
                steps += rng.uniform(20, 200)  # the caching allocator settles after a few
            value += steps + rng.choice((0.0, 0.0, 0.0, 2.0, -2.0))
        if trace.leak_start_s is not None and t >= trace.leak_start_s:
            value += _leaked(t - trace.leak_start_s, leak_rate_mb_h, stepwise, rng)
        trace.events.append((t, "sample", float(round(min(value, capacity)))))
        t += SAMPLE_S
    return trace


def healthy_battery(seed: int, days: float) -> list[Trace]:
    restart = 1.5 * DAY
    shapes = {
        "host-white-noise": _Shape(white_mb=25),
        "host-wandering-noise": _Shape(white_mb=10, ar_mb=25),
        "host-traffic-bursts": _Shape(bursts_per_h=4),
        "host-plateauing-steps": _Shape(steps_per_day=6),
        "host-diurnal-load": _Shape(diurnal_mb=800),
        "host-gc-sawtooth": _Shape(sawtooth_mb=200),
        "host-restarts": _Shape(restart_every_s=restart, unannounced_restart_at_s=days * DAY * 0.7),
        "host-allocator-ratchet": _Shape(ratchet_mb=700),
        "host-everything": _Shape(
            white_mb=20,
            ar_mb=15,
            bursts_per_h=3,
            steps_per_day=4,
            diurnal_mb=300,
            sawtooth_mb=150,
            sawtooth_period_s=120,
            restart_every_s=restart,
            ratchet_mb=300,
        ),
    }
    traces = [
        host_trace(name, seed * 1000 + i, days, shape) for i, (name, shape) in enumerate(shapes.items())
    ]
    traces.append(device_trace("device-hbm-64g-steps", seed * 1000 + 50, days, restart_every_s=restart))
    traces.append(
        device_trace("device-hbm-32g-tight", seed * 1000 + 51, days, capacity=32768.0, utilisation=0.92)
    )
    return traces


def stress_battery(seed: int, days: float) -> list[Trace]:
    """Healthy traces beyond the envelope the defaults are tuned for (reported, not counted):
    wandering RSS whose 10-min slope is often near the limit, and a slow sawtooth (longer than
    the trailing-minimum filter) on top of plateauing steps."""

    shapes = {
        "stress-wandering-60MB": _Shape(white_mb=10, ar_mb=60),
        "stress-slow-sawtooth-steps": _Shape(sawtooth_mb=200, sawtooth_period_s=240, steps_per_day=12),
    }
    return [
        host_trace(name, seed * 1000 + 90 + i, days, shape) for i, (name, shape) in enumerate(shapes.items())
    ]


def leaking_trace(kind: str, rate_gb_h: float, stepwise: bool, seed: int, days: float) -> Trace:
    rate = rate_gb_h * GB
    shape = "stepwise" if stepwise else "linear"
    name = f"{kind}-leak-{rate_gb_h:g}GBh-{shape}"
    if kind == "host":
        return host_trace(
            name,
            seed,
            days,
            _Shape(white_mb=20, bursts_per_h=3, sawtooth_mb=150),
            leak_rate_mb_h=rate,
            stepwise=stepwise,
        )
    return device_trace(name, seed, days, leak_rate_mb_h=rate, stepwise=stepwise)


# --------------------------------------------------------------------------------------------
# Replay


@dataclass
class Replay:
    name: str
    alarms: int  # transitions to unhealthy
    first_unhealthy_s: float | None
    first_reason: str | None
    samples: int
    seconds: float


def replay(
    trace: Trace,
    limits: LeakLimits,
    stop_at_first_alarm: bool = False,
    until: Callable[[float, float], bool] | None = None,
) -> Replay:
    """Feed a trace to a detector as the runtime would; count alarms."""

    detector = LeakDetector(limits, capacity_mb=trace.capacity_mb, kind=trace.kind)  # type: ignore[arg-type]
    alarms, first, first_reason, was_unhealthy, samples = 0, None, None, False, 0
    started = time.perf_counter()
    for t, op, value in trace.events:
        if op == "restart":
            detector.reset(t)
            was_unhealthy = False
            continue
        if op == "baseline":
            detector.mark_baseline(t)
            continue
        detector.add(t, value, trace.capacity_mb)
        verdict = detector.assess(t)
        samples += 1
        if verdict.unhealthy and not was_unhealthy:
            alarms += 1
            if first is None:
                first, first_reason = t, verdict.reason
            if stop_at_first_alarm:
                break
        was_unhealthy = verdict.unhealthy
        if until is not None and until(t, value):
            break
    return Replay(trace.name, alarms, first, first_reason, samples, time.perf_counter() - started)


def run_battery(
    days: float = 7.0,
    seeds: int = 3,
    limits: LeakLimits | None = None,
    rates: tuple[float, ...] = LEAK_RATES_GB_H,
    kinds: tuple[str, ...] = ("host", "device"),
    healthy: bool = True,
    stress: bool = True,
) -> dict[str, Any]:
    limits = limits or LeakLimits()
    results: dict[str, Any] = {"limits": limits.model_dump(), "sample_interval_s": SAMPLE_S, "days": days}
    total_samples, total_seconds = 0, 0.0

    healthy_rows = []
    if healthy:
        for seed in range(seeds):
            for trace in healthy_battery(seed, days):
                r = replay(trace, limits)
                total_samples += r.samples
                total_seconds += r.seconds
                healthy_rows.append(
                    {
                        "trace": trace.name,
                        "seed": seed,
                        "days": days,
                        "false_alarms": r.alarms,
                        "first_alarm_h": None
                        if r.first_unhealthy_s is None
                        else round(r.first_unhealthy_s / HOUR, 2),
                        "reason": r.first_reason,
                    }
                )
    stress_rows = []
    if healthy and stress:
        for seed in range(seeds):
            for trace in stress_battery(seed, days):
                r = replay(trace, limits)
                stress_rows.append(
                    {"trace": trace.name, "seed": seed, "days": days, "false_alarms": r.alarms}
                )
    results["stress"] = stress_rows
    results["healthy"] = healthy_rows
    results["false_alarms"] = sum(row["false_alarms"] for row in healthy_rows)
    results["healthy_trace_days"] = len(healthy_rows) * days

    leak_rows: list[dict[str, Any]] = []
    early: list[dict[str, Any]] = []  # alarms on leaking traces before their leak began
    for kind in kinds:
        for rate in rates:
            for stepwise in (False, True):
                delays, oom_first, beyond, left = [], 0, 0, []
                headroom_guess = (HOST_CAPACITY_MB - HOST_BASE_MB + 2 * GB) if kind == "host" else 0.1 * 65536
                run_s = WARMUP_S + LEAK_START_S + 1.05 * headroom_guess / (rate * GB) * HOUR
                leak_days = min(run_s / DAY, max(days, 1.0))
                for seed in range(seeds):
                    trace = leaking_trace(kind, rate, stepwise, 7000 + seed, days=leak_days)
                    assert trace.leak_start_s is not None
                    r = replay(
                        trace,
                        limits,
                        stop_at_first_alarm=True,
                        until=lambda t, v, cap=trace.capacity_mb: v >= cap,
                    )
                    total_samples += r.samples
                    total_seconds += r.seconds
                    if r.first_unhealthy_s is None:
                        ran_out = trace.events[-1][2] >= trace.capacity_mb or run_s <= leak_days * DAY
                        oom_first += ran_out
                        beyond += not ran_out
                        continue
                    if r.first_unhealthy_s < trace.leak_start_s:
                        early.append(
                            {
                                "trace": trace.name,
                                "seed": seed,
                                "days": 0,
                                "false_alarms": 1,
                                "first_alarm_h": round(r.first_unhealthy_s / HOUR, 2),
                                "reason": r.first_reason,
                            }
                        )
                        continue
                    delay = r.first_unhealthy_s - trace.leak_start_s
                    delays.append(delay)
                    leaked = trace.leak_rate_mb_h * delay / HOUR
                    headroom = trace.capacity_mb - _level_at(trace, trace.leak_start_s)
                    left.append(max(0.0, headroom - leaked) / trace.leak_rate_mb_h * HOUR)
                misses = oom_first
                leak_rows.append(
                    {
                        "kind": kind,
                        "rate_gb_h": rate,
                        "shape": "stepwise" if stepwise else "linear",
                        "runs": seeds,
                        "missed": misses,
                        "beyond_horizon": beyond,
                        "horizon_days": round(leak_days, 2),
                        "delay_min_median": round(statistics.median(delays) / 60, 1) if delays else None,
                        "delay_min_max": round(max(delays) / 60, 1) if delays else None,
                        "time_to_oom_at_detection_h_min": round(min(left) / HOUR, 1) if left else None,
                    }
                )
    results["leaks"] = leak_rows
    results["healthy"] += early
    results["false_alarms"] += len(early)
    results["samples"] = total_samples
    results["us_per_sample"] = round(total_seconds / max(1, total_samples) * 1e6, 1)
    return results


def _level_at(trace: Trace, t0: float) -> float:
    values = [v for t, op, v in trace.events if op == "sample" and t0 - 600 <= t < t0]
    return statistics.median(values) if values else 0.0


def _print_table(results: dict[str, Any]) -> None:
    limits = results["limits"]
    print(
        f"limits: window {limits['window_s']}s, grace {limits['grace_s']}s, "
        f"host {limits['host_growth_mb_per_hour']}"
        f" MB/h, device {limits['device_growth_mb_per_hour']} MB/h, exhaustion < "
        f"{limits['min_time_to_exhaustion_s']}s, headroom < {limits['min_headroom_mb']} MB; sample every "
        f"{results['sample_interval_s']:.0f}s"
    )
    print()
    print(
        f"{'leak':<8}{'GB/h':>6}  {'shape':<9}{'runs':>5}{'OOM first':>10}{'undetected':>11}"
        f"{'delay median':>14}{'delay max':>11}{'OOM in (min)':>14}"
    )
    for row in results["leaks"]:
        fmt = lambda v, unit: "-" if v is None else f"{v}{unit}"  # noqa: E731
        print(
            f"{row['kind']:<8}{row['rate_gb_h']:>6g}  {row['shape']:<9}{row['runs']:>5}{row['missed']:>10}"
            f"{row['beyond_horizon']:>11}"
            f"{fmt(row['delay_min_median'], ' min'):>14}{fmt(row['delay_min_max'], ' min'):>11}"
            f"{fmt(row['time_to_oom_at_detection_h_min'], ' h'):>14}"
        )
    print()
    by_trace: dict[str, int] = {}
    for row in results["healthy"]:
        by_trace[row["trace"]] = by_trace.get(row["trace"], 0) + row["false_alarms"]
    print(
        f"healthy traces: {len(results['healthy'])} runs x {results['days']:g} days "
        f"= {results['healthy_trace_days']:g} trace-days; false alarms: {results['false_alarms']}"
    )
    for name, count in by_trace.items():
        print(f"  {name:<28}{count:>3}")
    for row in results["healthy"]:
        if row["false_alarms"]:
            print(f"  ! {row['trace']} seed {row['seed']} at {row['first_alarm_h']} h: {row['reason']}")
    stress: dict[str, int] = {}
    for row in results["stress"]:
        stress[row["trace"]] = stress.get(row["trace"], 0) + row["false_alarms"]
    if stress:
        print("stress traces (outside the tuned envelope; not counted):")
        for name, count in stress.items():
            print(f"  {name:<28}{count:>3}")
    print(
        f"\ndetector cost: {results['us_per_sample']} us per sample (add + assess), "
        f"{results['samples']} samples"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--days", type=float, default=7.0, help="Simulated days per healthy trace (default 7)."
    )
    parser.add_argument("--seeds", type=int, default=3, help="Runs per trace kind (default 3).")
    parser.add_argument("--quick", action="store_true", help="1 day, 1 seed (a smoke run, < 10 s).")
    parser.add_argument("--json", action="store_true", help="Print the results as JSON.")
    args = parser.parse_args(argv)
    days, seeds = (1.0, 1) if args.quick else (args.days, args.seeds)
    results = run_battery(days=days, seeds=seeds)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print_table(results)
    ok = results["false_alarms"] == 0 and all(
        row["missed"] == 0 and row["delay_min_max"] is not None and row["delay_min_max"] <= 20
        for row in results["leaks"]
        if row["rate_gb_h"] >= 1
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
