#!/usr/bin/env python3
"""The CPU engine's OpenMP threads against the time of a request after an idle pause, in one run.

Run:  python bench/cpu_threads.py [--json] [--work-dir DIR] [--reread REPORT.json]

Why: vLLM's scheduler process and its workers' message-queue readers spin (``sched_yield``) for a
second after each message before they sleep. With an OpenMP thread on every core, the model's
parallel regions wait on those spinners, and a request after a pause of under a second took
2-3x a warm one (bench/README.md). This bench starts the bare CPU engine (the argv and env that
``ascend-llm flags`` renders for the bench's config, as ``bench/runtime_overhead.py`` does) once
per thread setting in ``VARIANTS``, one after the other, and per prompt length x batch size sends,
after five unmeasured waves, ``REPEATS`` rounds of one wave after each gap of ``GAPS_S``. A wave
is ``batch`` concurrent requests of 16 tokens; its time is the slowest request's.

Figures per setting and cell: the median wave time (ms) per gap, and the worst gap's median over
the no-gap median (``worst/0``): a first request after a pause is as fast as a warm one when it
is near 1. Every started engine is stopped, also on errors and Ctrl-C. Exit status 0 when the run
completed, 1 when a start failed, 2 for a --reread file that is not a report. The pure parts (``cell_stats``, ``format_report``) are tested by
tests/unit/test_cpu_threads_bench.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import statistics
import sys
import time
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runtime_overhead as ro  # noqa: E402  (a script beside this one, not a package)

#: Seconds of idle before a wave: the spinners sleep after 1 s.
GAPS_S = (0.0, 0.3, 0.5, 0.8, 2.0)
REPEATS = 4
#: (prompt tokens, batch) per setting.
CELLS = ((24, 1), (136, 4))
CORES = os.cpu_count() or 1
#: name -> (what it is, the config's engine.env: set as a user sets it, then ``ascend-llm flags``
#: renders the engine's env from it with the runtime's rules).
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "default": ("nothing set: the runtime's default (here nobind, one OpenMP thread fewer than the cores)", {}),
    "nobind-all-cores": ("nobind, a thread per core: the runtime's default before",
                         {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": str(CORES)}),
    "bound-all-cores": ("bound to every core: the other benches' and the engine tests' setting",
                        {"VLLM_CPU_OMP_THREADS_BIND": f"0-{CORES - 1}"}),
    "bound-one-core": ("bound to core 0, the rest left: as vLLM's auto (it binds the same ids in every "
                       "container that shares a node's cores)", {"VLLM_CPU_OMP_THREADS_BIND": "0"}),
}


def cell_stats(waves: Mapping[float, Sequence[float]]) -> dict[str, Any]:
    """Median wave seconds per gap, and the worst gap's median over the no-gap median."""

    medians = {gap: statistics.median(seconds) for gap, seconds in waves.items() if seconds}
    base = medians.get(0.0)
    worst = max((m for gap, m in medians.items() if gap > 0), default=None)
    return {"medianS": {str(gap): m for gap, m in medians.items()},
            "worstOverNoGap": worst / base if base and worst is not None else None}


async def _probe(url: str, length: int, batch: int, seed: int) -> dict[float, list[float]]:
    import aiohttp

    rng = random.Random(seed)
    waves: dict[float, list[float]] = {gap: [] for gap in GAPS_S}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=ro.REQUEST_TIMEOUT_S)) as session:
        await asyncio.gather(*(ro._health(session, url) for _ in range(batch)))
        for _ in range(5):
            await ro._wave(session, url, rng, length, batch, 16)
        for _ in range(REPEATS):
            for gap in GAPS_S:
                await asyncio.sleep(gap)
                waves[gap].append(await ro._wave(session, url, rng, length, batch, 16))
    return waves


def run(work_dir: Path, model: Path | None) -> dict[str, Any]:
    options = ro.Options(work_dir=work_dir, model=model, rounds=1, requests=1, max_tokens=16, prompt_tokens=24,
                         concurrency=1, first_lengths=[24], repeats=1, start_timeout_s=420, skip_fallback=True,
                         engine_command=[sys.executable, "-m", "vllm.entrypoints.openai.api_server"],
                         fallback_env={}, failure_marker=ro.FAILURE_MARKER)
    bench = ro.Bench(options)
    if bench.model is None:
        bench.model = work_dir / "tiny-model"
        if not (bench.model / "config.json").exists():
            subprocess.run([sys.executable, "-m", "ascend_runtime.cli", "tiny-model", str(bench.model)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    report: dict[str, Any] = {"gapsS": list(GAPS_S), "repeats": REPEATS, "variants": []}
    started = time.monotonic()
    try:
        for index, (name, (what, env)) in enumerate(VARIANTS.items()):
            item, _ = bench.start_bare(name, engine_env=env)
            try:
                health = ro.wait_health(item, options.start_timeout_s)
                cells = []
                for length, batch in CELLS:
                    stats = cell_stats(asyncio.run(_probe(item.engine_url, length, batch, 10 * index + batch)))
                    cells.append({"promptTokens": length, "batch": batch, **stats})
                    bench._say(f"{name} {length}x{batch}: worst/0 {_ratio(stats['worstOverNoGap'])}")
            finally:
                bench.procs.stop(item)
            report["variants"].append({"name": name, "what": what, "env": env, "healthS": health, "cells": cells})
    finally:
        bench.procs.stop_all()
    report["wallSeconds"] = time.monotonic() - started
    return report


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_report(report: Mapping[str, Any]) -> str:
    gaps = [str(float(gap)) for gap in report["gapsS"]]
    lines = [f"Wave time (ms, median of {report['repeats']}) after an idle gap of (s):", "",
             "| setting | cell | " + " | ".join(gaps) + " | worst/0 |",
             "|---|---|" + "---|" * len(gaps) + "---|"]
    for variant in report["variants"]:
        for cell in variant["cells"]:
            medians = cell["medianS"]
            lines.append(f"| {variant['name']} | {cell['promptTokens']}x{cell['batch']} | "
                         + " | ".join(f"{medians[gap] * 1000:.0f}" if gap in medians else "-" for gap in gaps)
                         + f" | {_ratio(cell['worstOverNoGap'])} |")
    lines += ["", "Settings:"] + [f"- {v['name']}: {v['what']}" for v in report["variants"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="Print the report as JSON instead of tables.")
    parser.add_argument("--reread", metavar="FILE", default=None, help="Print the tables of a saved --json report.")
    parser.add_argument("--work-dir", default=".cache/cpu-threads", help="Configs, caches, logs (default: %(default)s).")
    parser.add_argument("--model", default=None, help="A local model directory (default: build the tiny model).")
    args = parser.parse_args(argv)
    if args.reread:
        try:
            print(format_report(json.loads(Path(args.reread).read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"cpu_threads: --reread {args.reread}: not a saved --json report ({error!r})", file=sys.stderr)
            return 2
        return 0
    try:
        report = run(Path(args.work_dir).resolve(), Path(args.model).resolve() if args.model else None)
    except (RuntimeError, TimeoutError, OSError) as error:
        print(f"cpu_threads: {error}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
