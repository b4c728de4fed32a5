#!/usr/bin/env python3
"""Drive a vLLM OpenAI endpoint with stepped load and watch the autoscaling signals move.

Run:  python bench/loadgen.py --start [--steps 1,4,16,64] [--step-seconds 15] [--json]
      python bench/loadgen.py --url http://127.0.0.1:8000 [--rate 2,4,8,16] ...

``--url`` drives an engine that is already serving (the model name comes from ``/v1/models``).
``--start`` builds the tiny local model (``python -m ascend_runtime.cli tiny-model``), starts the
real in-pod runtime (``ascend-llm run --config``) on the CPU engine, waits for Ready, runs the
schedule and stops the runtime with SIGTERM, the pod's drain path.

The schedule is a list of steps, each ``--step-seconds`` long: closed-loop clients
(``--steps``: that many clients, each sending its next request when the last one returns) or an
open-loop Poisson arrival rate (``--rate``, requests per second). Requests are
``/v1/completions`` with ``--prompt-tokens`` random token ids (distinct per request, so the
prefix cache cannot shortcut the prefill) and ``--max-tokens`` with ``ignore_eos``, so every
request has the same size. Between steps the in-flight requests finish, so each step starts
from an empty queue.

Every 0.5 s the engine's Prometheus text (``/metrics``; with ``--start`` the runtime's, which
the ServiceMonitor scrapes) is parsed for the three gauges the autoscaler reads:
``vllm:num_requests_waiting`` and ``vllm:num_requests_running`` (summed over the pod's series,
as the prometheus-adapter rules do) and ``vllm:kv_cache_usage_perc`` (averaged; a fraction).

Per step it reports throughput, latency percentiles, (with ``--stream``) time to first token,
and the mean and p95 of the gauges; then where p95 latency crosses ``--latency-slo`` (default:
twice the median latency of the lowest-load step) and the gauge values there, interpolated
between the two steps around the crossing: the queue length per replica at which the SLO is
reached, the data to choose ``spec.autoscaling.target`` from (docs/autoscaling.md).

Every loop is bounded (steps, clients, arrivals, request timeout, sampling ends with its step,
engine start deadline), and only loopback addresses are accepted. ``--from-json REPORT``
re-reads a saved ``--json`` report (the table, and the target for another ``--latency-slo``)
without sending load.

The pure parts (``parse_schedule``, ``percentile``, ``parse_engine_gauges``, ``summarize_step``,
``default_latency_slo``, ``suggest_target``, ``format_table``, ``steps_from_report``,
``start_config``) are importable
and tested by tests/unit/test_loadgen.py.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import math
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp

REPO = Path(__file__).resolve().parents[1]
try:
    from ascend_runtime.config import EngineConfig
    from ascend_runtime.promtext import sample_values
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(REPO / "runtime"))
    from ascend_runtime.config import EngineConfig
    from ascend_runtime.promtext import sample_values

#: Bounds on what one run may ask for.
MAX_STEPS = 32
MAX_CONCURRENCY = 1024
MAX_RATE = 1000.0
MAX_STEP_SECONDS = 3600.0
#: Open loop: arrivals per step are capped here, and at --max-in-flight concurrent requests.
MAX_REQUESTS_PER_STEP = 100_000
SAMPLE_INTERVAL_S = 0.5
#: Random prompt token ids come from this range: present in every real vocabulary.
PROMPT_TOKEN_IDS = (100, 1000)

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
#: The KV cache gauge; vLLM before the V1 engine called it gpu_cache_usage_perc.
KV_USAGE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")

Mode = Literal["concurrency", "rate"]


# --------------------------------------------------------------------------------------------
# Pure parts


@dataclass(frozen=True)
class EngineGauges:
    """One scrape: requests waiting and running (summed over series), KV cache use (mean, 0..1)."""

    waiting: float | None
    running: float | None
    kv_usage: float | None


@dataclass(frozen=True)
class RequestResult:
    """One request; times are monotonic seconds."""

    started: float
    finished: float
    ok: bool
    output_tokens: int | None = None
    ttft_s: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class StepStats:
    mode: Mode
    offered: float
    duration_s: float
    sent: int
    completed: int
    failed: int
    dropped: int
    req_per_s: float
    output_tokens_per_s: float
    latency_p50_s: float | None
    latency_p95_s: float | None
    ttft_p50_s: float | None
    waiting_mean: float | None
    waiting_p95: float | None
    running_mean: float | None
    running_p95: float | None
    kv_usage_mean: float | None
    samples: int


@dataclass(frozen=True)
class TargetSuggestion:
    slo_s: float
    crossed: bool
    #: Offered load of the last step within the SLO and of the first one beyond it.
    below_offered: float | None
    above_offered: float | None
    waiting_at_slo: float | None
    running_at_slo: float | None
    kv_usage_at_slo: float | None
    signal: str | None
    target: float | None
    note: str


def parse_schedule(text: str, mode: Mode) -> list[float]:
    """``"1,4,16"`` -> ``[1.0, 4.0, 16.0]``; concurrency levels must be whole numbers."""

    option = "--steps" if mode == "concurrency" else "--rate"
    example = "1,2,4,8" if mode == "concurrency" else "0.5,2,8"
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"{option} is empty; give comma-separated values, e.g. {example}")
    if len(items) > MAX_STEPS:
        raise ValueError(f"{option} has {len(items)} steps; at most {MAX_STEPS}")
    values: list[float] = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"{option}: {item!r} is not a number; give comma-separated values, "
                             f"e.g. {example}") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{option}: {item!r} must be a positive number")
        if mode == "concurrency":
            if value != int(value):
                raise ValueError(f"{option}: {item!r} is a number of clients; use a whole number")
            if value > MAX_CONCURRENCY:
                raise ValueError(f"{option}: {item!r} exceeds {MAX_CONCURRENCY} clients")
        elif value > MAX_RATE:
            raise ValueError(f"{option}: {item!r} exceeds {MAX_RATE:g} requests per second")
        values.append(value)
    return values


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), interpolating linearly between ranks; None when empty."""

    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def parse_engine_gauges(text: str) -> EngineGauges:
    """The autoscaling gauges from Prometheus text (vLLM's, or the runtime's that includes it).

    Waiting and running are summed over their series (one per engine when data parallel > 1),
    KV cache use is averaged, as the prometheus-adapter rules in docs/autoscaling.md do. A gauge
    that is absent is None. Malformed text raises ValueError (from ``ascend_runtime.promtext``, the
    runtime's one Prometheus text reader).
    """

    sums = sample_values(text, (WAITING, RUNNING, *KV_USAGE_NAMES))
    kv_values = next((sums[name] for name in KV_USAGE_NAMES if sums.get(name)), [])
    return EngineGauges(
        waiting=sum(sums[WAITING]) if sums.get(WAITING) else None,
        running=sum(sums[RUNNING]) if sums.get(RUNNING) else None,
        kv_usage=_mean(kv_values),
    )


def summarize_step(mode: Mode, offered: float, window_start: float, window_end: float,
                   results: Sequence[RequestResult], samples: Sequence[tuple[float, EngineGauges]],
                   settle_s: float = 0.0, dropped: int = 0) -> StepStats:
    """Statistics of one step from the requests it sent and the gauges sampled meanwhile.

    Throughput counts the requests that finished inside the window. Latency covers every
    successful request the step sent, including those that finished after the window (the
    slowest ones). Gauges use the samples inside the window after the first ``settle_s``
    seconds, when the queue has formed.
    """

    duration = window_end - window_start
    if duration <= 0:
        raise ValueError(f"step window must have a positive length, got {duration}")
    ok = [result for result in results if result.ok]
    inside = [result for result in ok if result.finished <= window_end]
    latencies = [result.finished - result.started for result in ok]
    ttfts = [result.ttft_s for result in ok if result.ttft_s is not None]
    steady = [gauges for at, gauges in samples if window_start + settle_s <= at <= window_end]
    waiting = [gauges.waiting for gauges in steady if gauges.waiting is not None]
    running = [gauges.running for gauges in steady if gauges.running is not None]
    kv = [gauges.kv_usage for gauges in steady if gauges.kv_usage is not None]
    return StepStats(
        mode=mode,
        offered=offered,
        duration_s=duration,
        sent=len(results),
        completed=len(ok),
        failed=len(results) - len(ok),
        dropped=dropped,
        req_per_s=len(inside) / duration,
        output_tokens_per_s=sum(result.output_tokens or 0 for result in inside) / duration,
        latency_p50_s=percentile(latencies, 50),
        latency_p95_s=percentile(latencies, 95),
        ttft_p50_s=percentile(ttfts, 50),
        waiting_mean=_mean(waiting),
        waiting_p95=percentile(waiting, 95),
        running_mean=_mean(running),
        running_p95=percentile(running, 95),
        kv_usage_mean=_mean(kv),
        samples=len(steady),
    )


def default_latency_slo(steps: Sequence[StepStats]) -> float | None:
    """Twice the median latency of the lowest-load step that completed requests."""

    measured = [step for step in steps if step.latency_p50_s is not None]
    if not measured:
        return None
    return 2 * min(measured, key=lambda step: step.offered).latency_p50_s  # type: ignore[operator]


def _interpolate(low: float | None, high: float | None, fraction: float) -> float | None:
    if low is None or high is None:
        return None
    return low + (high - low) * fraction


def suggest_target(steps: Sequence[StepStats], slo_s: float, min_waiting_target: float = 0.5) -> TargetSuggestion:
    """Where p95 latency crosses ``slo_s``, and the gauges there: the data for the target.

    Steps are taken in order of offered load. The gauges at the SLO are interpolated linearly
    (on p95 latency) between the last step within it and the first beyond it. The suggested
    signal is waiting requests per replica when a queue of at least ``min_waiting_target`` has
    formed by then; otherwise latency grew inside the running batch and running requests per
    replica is the signal that sees it.
    """

    if slo_s <= 0:
        raise ValueError(f"--latency-slo must be positive, got {slo_s}")
    measured = sorted((step for step in steps if step.latency_p95_s is not None), key=lambda step: step.offered)
    unit = "clients" if measured and measured[0].mode == "concurrency" else "req/s"
    if not measured:
        return TargetSuggestion(slo_s, False, None, None, None, None, None, None, None,
                                "no step completed a request: nothing to suggest (see the failures)")
    above_index = next((index for index, step in enumerate(measured) if step.latency_p95_s > slo_s), None)  # type: ignore[operator]
    if above_index is None:
        top = measured[-1]
        return TargetSuggestion(
            slo_s, False, top.offered, None, None, None, None, None, None,
            f"p95 latency stayed within {slo_s:.2f} s up to {top.offered:g} {unit} (waiting "
            f"{_fmt(top.waiting_mean)}, running {_fmt(top.running_mean)}): add higher steps to find the limit")
    if above_index == 0:
        first = measured[0]
        return TargetSuggestion(
            slo_s, True, None, first.offered, None, None, None, None, None,
            f"p95 latency is already {first.latency_p95_s:.2f} s > {slo_s:.2f} s at the lowest load "
            f"({first.offered:g} {unit}): raise --latency-slo or start the schedule lower")
    below, above = measured[above_index - 1], measured[above_index]
    fraction = (slo_s - below.latency_p95_s) / (above.latency_p95_s - below.latency_p95_s)  # type: ignore[operator]
    waiting = _interpolate(below.waiting_mean, above.waiting_mean, fraction)
    running = _interpolate(below.running_mean, above.running_mean, fraction)
    kv = _interpolate(below.kv_usage_mean, above.kv_usage_mean, fraction)
    where = (f"p95 latency crosses {slo_s:.2f} s between {below.offered:g} and {above.offered:g} {unit} "
             f"(p95 {below.latency_p95_s:.2f} -> {above.latency_p95_s:.2f} s)")
    if waiting is not None and waiting >= min_waiting_target:
        target = math.floor(waiting * 10) / 10
        return TargetSuggestion(
            slo_s, True, below.offered, above.offered, waiting, running, kv, "waitingRequestsPerReplica", target,
            f"{where}; there a replica has {waiting:.2f} requests waiting and {_fmt(running, 2)} running. "
            f"signal waitingRequestsPerReplica, target {target:g} (or lower, for headroom while a new "
            "replica starts)")
    if running is not None and running > 0:
        target = math.floor(running * 10) / 10
        return TargetSuggestion(
            slo_s, True, below.offered, above.offered, waiting, running, kv, "runningRequestsPerReplica", target,
            f"{where}; the queue is still (nearly) empty there ({_fmt(waiting)} waiting): latency grows inside "
            f"the running batch, so waiting requests see it too late. signal runningRequestsPerReplica, "
            f"target {target:g}")
    return TargetSuggestion(slo_s, True, below.offered, above.offered, waiting, running, kv, None, None,
                            f"{where}; the engine's gauges were not sampled, so no target can be derived")


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(steps: Sequence[StepStats]) -> str:
    """A Markdown table of the steps."""

    load = "clients" if steps and steps[0].mode == "concurrency" else "req/s offered"
    header = (f"| {load} | sent | ok | failed | req/s | output tok/s | p50 s | p95 s | TTFT p50 s | "
              "waiting mean / p95 | running mean / p95 | KV cache % |")
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for step in steps:
        failed = str(step.failed) + (f" (+{step.dropped} dropped)" if step.dropped else "")
        kv = "-" if step.kv_usage_mean is None else f"{100 * step.kv_usage_mean:.1f}"
        lines.append(
            f"| {step.offered:g} | {step.sent} | {step.completed} | {failed} | {step.req_per_s:.2f} | "
            f"{step.output_tokens_per_s:.0f} | {_fmt(step.latency_p50_s, 2)} | {_fmt(step.latency_p95_s, 2)} | "
            f"{_fmt(step.ttft_p50_s, 3)} | {_fmt(step.waiting_mean)} / {_fmt(step.waiting_p95)} | "
            f"{_fmt(step.running_mean)} / {_fmt(step.running_p95)} | {kv} |")
    return "\n".join(lines)


def steps_from_report(report: Any, source: str = "report") -> list[StepStats]:
    """The steps of a saved ``--json`` report, to re-read it with another ``--latency-slo``."""

    rows = report.get("steps") if isinstance(report, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{source}: no 'steps' list; pass a report written by bench/loadgen.py --json")
    names = [name for name in StepStats.__dataclass_fields__]
    steps = []
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or set(row) != set(names):
            missing = sorted(set(names) - set(row)) if isinstance(row, dict) else names
            raise ValueError(f"{source}: steps[{index}] is not a loadgen step (missing {', '.join(missing) or '-'}; "
                             "unexpected fields are refused too); rerun bench/loadgen.py --json")
        steps.append(StepStats(**row))
    return steps


def validate_loopback_url(url: str, option: str = "--url") -> str:
    """``url`` without a trailing slash, if it is http(s) to a loopback address."""

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{option} {url!r} is not an http URL; e.g. http://127.0.0.1:8000")
    host = parts.hostname
    loopback = host == "localhost"
    if not loopback:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
    if not loopback:
        raise ValueError(f"{option} {url!r}: the load generator drives loopback endpoints only "
                         "(127.0.0.1, ::1, localhost); port-forward a remote engine first")
    return url.rstrip("/")


def start_config(model_dir: Path, work_dir: Path, engine_port: int, runtime_port: int, max_num_seqs: int,
                 kv_cache_gib: int, engine_command: Sequence[str], cpus: int) -> dict[str, Any]:
    """The engine config for ``--start``: the demo's CPU settings, eager, a minimal warmup."""

    config = EngineConfig.model_validate({
        "name": "loadgen",
        "model": {"path": str(model_dir), "servedName": "tiny"},
        "engine": {
            "command": list(engine_command), "host": "127.0.0.1", "port": engine_port,
            "dtype": "float32", "maxModelLen": 512, "maxNumSeqs": max_num_seqs, "shutdownTimeoutS": 30,
            "env": {
                "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
                "VLLM_CPU_OMP_THREADS_BIND": f"0-{cpus - 1}" if cpus > 1 else "0",
                "VLLM_CACHE_ROOT": str(work_dir / "vllm-cache"),
                "TMPDIR": str(work_dir / "tmp"),
            },
        },
        # Eager starts in ~40 s on CPU; torch.compile would add 30-40 s and change nothing here.
        "graph": {"policy": "eager"},
        "warmup": {"promptLengths": [8], "concurrency": [1], "maxTokens": 2, "chat": False, "timeoutS": 120},
        "runtime": {"host": "127.0.0.1", "port": runtime_port, "readyTimeoutS": 300,
                    "restart": {"maxRestarts": 0}},
    })
    return config.model_dump(mode="json", by_alias=True, exclude_none=True)


# --------------------------------------------------------------------------------------------
# Load


@dataclass
class LoadOptions:
    base_url: str
    metrics_url: str
    model: str
    prompt_tokens: int
    max_tokens: int
    stream: bool
    request_timeout_s: float
    step_seconds: float
    settle_s: float
    max_in_flight: int


async def _one_request(session: aiohttp.ClientSession, options: LoadOptions, rng: random.Random) -> RequestResult:
    prompt = [rng.randrange(*PROMPT_TOKEN_IDS) for _ in range(options.prompt_tokens)]
    body: dict[str, Any] = {"model": options.model, "prompt": prompt, "max_tokens": options.max_tokens,
                            "ignore_eos": True, "temperature": 0.0}
    if options.stream:
        body.update(stream=True, stream_options={"include_usage": True})
    started = time.monotonic()
    try:
        async with session.post(f"{options.base_url}/v1/completions", json=body) as response:
            if response.status != 200:
                text = (await response.text())[:200]
                return RequestResult(started, time.monotonic(), False, error=f"HTTP {response.status}: {text}")
            if not options.stream:
                payload = await response.json()
                tokens = (payload.get("usage") or {}).get("completion_tokens")
                return RequestResult(started, time.monotonic(), True, output_tokens=tokens)
            ttft: float | None = None
            tokens = None
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if ttft is None and any(choice.get("text") for choice in chunk.get("choices") or []):
                    ttft = time.monotonic() - started
                if chunk.get("usage"):
                    tokens = chunk["usage"].get("completion_tokens")
            return RequestResult(started, time.monotonic(), True, output_tokens=tokens, ttft_s=ttft)
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError) as error:
        return RequestResult(started, time.monotonic(), False, error=f"{type(error).__name__}: {error}")


async def _sample_gauges(session: aiohttp.ClientSession, url: str, until: float,
                         samples: list[tuple[float, EngineGauges]], errors: list[str]) -> None:
    timeout = aiohttp.ClientTimeout(total=2)
    while (now := time.monotonic()) < until:
        try:
            async with session.get(url, timeout=timeout) as response:
                text = await response.text()
            if response.status == 200:
                samples.append((now, parse_engine_gauges(text)))
            else:
                errors.append(f"HTTP {response.status}")
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as error:
            errors.append(f"{type(error).__name__}: {error}")
        await asyncio.sleep(max(0.0, now + SAMPLE_INTERVAL_S - time.monotonic()))


async def run_step(session: aiohttp.ClientSession, options: LoadOptions, mode: Mode, offered: float,
                   rng: random.Random) -> tuple[StepStats, list[str]]:
    """One step; returns its statistics and the distinct errors seen."""

    start = time.monotonic()
    end = start + options.step_seconds
    results: list[RequestResult] = []
    samples: list[tuple[float, EngineGauges]] = []
    metric_errors: list[str] = []
    sampler = asyncio.create_task(_sample_gauges(session, options.metrics_url, end, samples, metric_errors))
    dropped = 0

    if mode == "concurrency":
        async def client() -> None:
            # Each request ends within the request timeout, so a client ends by end + timeout.
            while time.monotonic() < end and len(results) < MAX_REQUESTS_PER_STEP:
                results.append(await _one_request(session, options, rng))

        await asyncio.gather(*(client() for _ in range(int(offered))))
    else:
        tasks: set[asyncio.Task[None]] = set()

        async def send() -> None:
            results.append(await _one_request(session, options, rng))

        arrival = start
        for _ in range(MAX_REQUESTS_PER_STEP):
            arrival += rng.expovariate(offered)
            if arrival >= end:
                break
            await asyncio.sleep(max(0.0, arrival - time.monotonic()))
            if len(tasks) >= options.max_in_flight:
                dropped += 1
                continue
            task = asyncio.create_task(send())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    await sampler
    errors = sorted({result.error for result in results if result.error} | set(metric_errors))
    stats = summarize_step(mode, offered, start, end, results, samples, options.settle_s, dropped)
    return stats, errors


async def run_schedule(options: LoadOptions, mode: Mode, schedule: Sequence[float], seed: int,
                       progress: bool) -> tuple[list[StepStats], list[str]]:
    rng = random.Random(seed)
    connector = aiohttp.TCPConnector(limit=0)  # the schedule, not the pool, sets the concurrency
    timeout = aiohttp.ClientTimeout(total=options.request_timeout_s)
    steps: list[StepStats] = []
    errors: list[str] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for offered in schedule:
            if progress:
                print(f"loadgen: step {offered:g} {'clients' if mode == 'concurrency' else 'req/s'} "
                      f"for {options.step_seconds:g} s ...", file=sys.stderr, flush=True)
            stats, step_errors = await run_step(session, options, mode, offered, rng)
            steps.append(stats)
            errors.extend(f"step {offered:g}: {error}" for error in step_errors)
    return steps, errors


async def fetch_model(base_url: str) -> str:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, \
            session.get(f"{base_url}/v1/models") as response:
        if response.status != 200:
            raise SystemExit(f"loadgen: GET {base_url}/v1/models answered HTTP {response.status}; "
                             "is the engine serving? (or pass --model)")
        payload = await response.json()
    models = [entry.get("id") for entry in payload.get("data") or [] if entry.get("id")]
    if not models:
        raise SystemExit(f"loadgen: {base_url}/v1/models lists no model; pass --model")
    return models[0]


# --------------------------------------------------------------------------------------------
# --start: the real runtime on the CPU engine


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get_json(url: str, timeout: float = 5) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read().decode())
    except urllib.error.HTTPError as error:
        return error.code, None
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return 0, None


class StartedRuntime:
    """``ascend-llm run`` on a rendered config, in its own session; stopped with SIGTERM."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.work_dir = Path(args.work_dir).resolve()
        (self.work_dir / "tmp").mkdir(parents=True, exist_ok=True)
        (self.work_dir / "vllm-cache").mkdir(parents=True, exist_ok=True)
        self.engine_port = _free_port()
        self.runtime_port = _free_port()
        self.args = args
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.work_dir / "runtime.log"

    @property
    def engine_url(self) -> str:
        return f"http://127.0.0.1:{self.engine_port}"

    @property
    def runtime_url(self) -> str:
        return f"http://127.0.0.1:{self.runtime_port}"

    def start(self) -> float:
        """Build the model, start the runtime, wait for Ready; returns the seconds to Ready."""

        model_dir = self.work_dir / "tiny-model"
        built = subprocess.run([sys.executable, "-m", "ascend_runtime.cli", "tiny-model", str(model_dir)],
                               capture_output=True, text=True, timeout=300, check=False)
        if built.returncode != 0:
            raise SystemExit(f"loadgen: building the tiny model failed (exit {built.returncode}):\n"
                             f"{built.stderr[-2000:]}")
        command = shlex.split(self.args.engine_command) if self.args.engine_command else [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        config = start_config(model_dir, self.work_dir, self.engine_port, self.runtime_port, self.args.max_num_seqs,
                              self.args.kv_cache_gib, command, os.cpu_count() or 1)
        config_path = self.work_dir / "engine-config.json"
        config_path.write_text(json.dumps(config, indent=2))
        env = dict(os.environ, TMPDIR=str(self.work_dir / "tmp"))
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ascend_runtime.cli", "run", "--config", str(config_path)],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = started + self.args.ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"loadgen: the runtime exited with code {self.process.returncode}; "
                                 f"see {self.log_path}")
            status, state = _get_json(f"{self.runtime_url}/state")
            if status == 200 and isinstance(state, dict):
                if state.get("phase") == "Ready":
                    return time.monotonic() - started
                if state.get("phase") == "Failed":
                    raise SystemExit(f"loadgen: the runtime failed: {state.get('message')}; see {self.log_path}")
            time.sleep(1)
        raise SystemExit(f"loadgen: not Ready within --ready-timeout {self.args.ready_timeout:g} s; "
                         f"see {self.log_path}")

    def stop(self) -> tuple[int | None, float]:
        """SIGTERM (the pod's drain path); SIGKILL of the group after 60 s. (exit code, seconds)."""

        if self.process is None:
            return None, 0.0
        sent = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        return self.process.returncode, time.monotonic() - sent


# --------------------------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="An engine already serving, e.g. http://127.0.0.1:8000 (loopback only).")
    target.add_argument("--start", action="store_true",
                        help="Build the tiny model and start the real runtime on the CPU engine.")
    target.add_argument("--from-json", metavar="REPORT", default=None,
                        help="Re-read a saved --json report (e.g. with another --latency-slo); sends no load.")
    parser.add_argument("--metrics-url", default=None,
                        help="Prometheus text to sample (default: URL/metrics; with --start the runtime's).")
    parser.add_argument("--model", default=None, help="Model name (default: the first of /v1/models).")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--steps", default=None, help="Closed-loop clients per step [default 1,2,4,8,16,32].")
    load.add_argument("--rate", default=None, help="Open loop instead: Poisson requests per second per step.")
    parser.add_argument("--step-seconds", type=float, default=30.0)
    parser.add_argument("--settle-seconds", type=float, default=2.0,
                        help="Gauge samples from the start of each step left out (the queue forming).")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64, help="Output tokens per request (ignore_eos).")
    parser.add_argument("--stream", action="store_true", help="Stream responses to measure time to first token.")
    parser.add_argument("--latency-slo", type=float, default=None,
                        help="p95 latency limit in seconds [default: 2x the median at the lowest load].")
    parser.add_argument("--request-timeout", type=float, default=120.0)
    parser.add_argument("--max-in-flight", type=int, default=512, help="Open loop: arrivals beyond it are dropped.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="Print JSON instead of the table.")
    start = parser.add_argument_group("--start")
    start.add_argument("--work-dir", default=".cache/loadgen", help="Model, config, caches and the runtime log.")
    start.add_argument("--max-num-seqs", type=int, default=8, help="The engine's running batch; more requests wait.")
    start.add_argument("--kv-cache-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE.")
    start.add_argument("--ready-timeout", type=float, default=300.0)
    start.add_argument("--engine-command", default=None,
                       help="Engine command instead of vLLM's api_server (e.g. a stand-in for a dry run).")
    return parser


def _check_args(args: argparse.Namespace) -> tuple[Mode, list[float]]:
    checks = [
        (0 < args.step_seconds <= MAX_STEP_SECONDS, f"--step-seconds must be in (0, {MAX_STEP_SECONDS:g}]"),
        (0 <= args.settle_seconds < args.step_seconds, "--settle-seconds must be in [0, --step-seconds)"),
        (1 <= args.prompt_tokens <= 8192, "--prompt-tokens must be in 1..8192"),
        (1 <= args.max_tokens <= 8192, "--max-tokens must be in 1..8192"),
        (0 < args.request_timeout <= 3600, "--request-timeout must be in (0, 3600] seconds"),
        (1 <= args.max_in_flight <= 10_000, "--max-in-flight must be in 1..10000"),
        (args.latency_slo is None or args.latency_slo > 0, "--latency-slo must be positive"),
        (1 <= args.max_num_seqs <= 1024, "--max-num-seqs must be in 1..1024"),
        (1 <= args.kv_cache_gib <= 64, "--kv-cache-gib must be in 1..64"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)
    if args.start and args.prompt_tokens + args.max_tokens > 512:
        raise ValueError("--prompt-tokens + --max-tokens must fit the tiny model's 512-token context with --start")
    if args.rate is not None:
        return "rate", parse_schedule(args.rate, "rate")
    return "concurrency", parse_schedule(args.steps or "1,2,4,8,16,32", "concurrency")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        mode, schedule = _check_args(args)
        base_url = validate_loopback_url(args.url) if args.url else None
        metrics_url = validate_loopback_url(args.metrics_url, "--metrics-url") if args.metrics_url else None
    except ValueError as error:
        parser.error(str(error))
    if args.from_json:
        return _reread(parser, args)
    progress = not args.json
    runtime: StartedRuntime | None = None
    report: dict[str, Any] = {"command": " ".join(sys.argv if argv is None else ["bench/loadgen.py", *argv])}
    try:
        if args.start:
            runtime = StartedRuntime(args)
            print(f"loadgen: starting the runtime (log {runtime.log_path}) ...", file=sys.stderr, flush=True)
            report["ready_after_s"] = round(runtime.start(), 1)
            print(f"loadgen: Ready after {report['ready_after_s']} s", file=sys.stderr, flush=True)
            base_url = runtime.engine_url
            metrics_url = metrics_url or f"{runtime.runtime_url}/metrics"
            report["max_num_seqs"] = args.max_num_seqs
        assert base_url is not None
        model = args.model or asyncio.run(fetch_model(base_url))
        options = LoadOptions(base_url=base_url, metrics_url=metrics_url or f"{base_url}/metrics", model=model,
                              prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens, stream=args.stream,
                              request_timeout_s=args.request_timeout, step_seconds=args.step_seconds,
                              settle_s=args.settle_seconds, max_in_flight=args.max_in_flight)
        steps, errors = asyncio.run(run_schedule(options, mode, schedule, args.seed, progress))
    finally:
        if runtime is not None:
            code, seconds = runtime.stop()
            report["runtime_exit"] = {"code": code, "seconds": round(seconds, 1)}
            print(f"loadgen: SIGTERM -> runtime exited with code {code} in {seconds:.1f} s",
                  file=sys.stderr, flush=True)
    report.update(model=model, mode=mode, prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
                  step_seconds=args.step_seconds, steps=[asdict(step) for step in steps], errors=errors[:50])
    return _print_report(report, steps, args)


def _print_report(report: dict[str, Any], steps: list[StepStats], args: argparse.Namespace) -> int:
    slo = args.latency_slo or default_latency_slo(steps)
    suggestion = suggest_target(steps, slo) if slo else None
    report["suggestion"] = asdict(suggestion) if suggestion else None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(steps))
        print()
        print(f"how to choose the target: {suggestion.note if suggestion else 'no request completed'}")
        for error in report.get("errors", [])[:10]:
            print(f"error: {error}")
    failed = sum(step.failed for step in steps)
    return 0 if suggestion is not None and failed == 0 else 1


def _reread(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        report = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        steps = steps_from_report(report, args.from_json)
    except OSError as error:
        parser.error(f"--from-json {args.from_json}: cannot read it: {error.strerror}")
    except json.JSONDecodeError as error:
        parser.error(f"--from-json {args.from_json}: not JSON ({error}); pass a report written by "
                     "bench/loadgen.py --json")
    except ValueError as error:
        parser.error(f"--from-json {error}")
    return _print_report(report, steps, args)


if __name__ == "__main__":
    sys.exit(main())
