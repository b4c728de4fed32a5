"""The operator's CPU per resync of a settled resource: the real work queue and skip path, per-key
timers against coarse timers, side by side in one run.

Run:  python bench/queue_resync.py [--counts 1000,10000] [--resync 30] [--seconds 10] [--out FILE]
      python bench/queue_resync.py --reread FILE

Each cell starts ``count`` resources whose last pass wrote nothing (``ascend_operator.lastpass``),
their pods Ready and unreadable and not yet due for a retry (kwok's pods, as in
bench/operator_scale.py's idle window), their first resyncs spread over one resync interval like
a running operator's. The queue runs ``handle_reconcile.reconcile_key`` itself; only the API
client is a stand-in (discovery answers from memory; no read is due). The process's CPU over
``--seconds`` divided by the resyncs run is the cost of one; times ``count / resync`` it is the
cores the resyncs take while idle. Settings: ``timer_granularity_s`` 0 (a timer per resource,
each resync its own wake-up of the loop) and 1 (the default: resyncs due within a second start on
one wake-up). Exit 0 when it ran, 2 for a --reread file that is not a saved report. The pure
part (``format_report``) is tested by tests/unit/test_queue_resync_bench.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GRANULARITIES = (0.0, 1.0)


class _Discovery:
    """The one API call of a skipped pass (discovery, cached by the real client); no read is due."""

    async def served(self, max_age_s: float) -> frozenset[str]:
        return frozenset({"v1", "apps/v1"})

    async def proxy_get(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no runtime read is due in this bench")


async def measure(count: int, resync_s: float, seconds: float, granularity: float) -> dict[str, Any]:
    """One cell: the resyncs run and the CPU they took."""

    from ascend_operator.handlers import OperatorContext
    from ascend_operator.handlers.handle_reconcile import reconcile_key
    from ascend_operator.lastpass import Inputs, LastPass
    from ascend_operator.names import label_value
    from ascend_operator.podreads import PodReader, StateTarget
    from ascend_operator.settings import OperatorSettings
    from ascend_operator.workqueue import QueueSettings, WorkQueue

    settings, kube = OperatorSettings(), _Discovery()
    ctx = OperatorContext(settings=settings, kube=kube, pods=PodReader(kube, timeout_s=1.0))  # type: ignore[arg-type]
    served = await kube.served(0)
    runs = 0
    for index in range(count):
        namespace, name = f"ns-{index // 100:03d}", f"llm-{index:05d}"
        ctx.store.put({"metadata": {"namespace": namespace, "name": name, "resourceVersion": str(index + 1)},
                       "spec": {}})
        pod = StateTarget(f"{name}-0", "10.0.0.1", "1", ready=True)
        for _ in range(2):  # Ready and unreadable twice: not asked again within this run
            ctx.pods.unreadable.failed(namespace, pod)
        inputs = Inputs(str(index + 1), served, settings, ctx.watch_cache.changed(namespace, label_value(name)))
        ctx.last_passes.record(f"{namespace}/{name}", LastPass(inputs, (pod,), {pod.name: None}, resync_s))

    async def worker(key: str) -> float | None:
        nonlocal runs
        runs += 1
        return await reconcile_key(ctx, key)

    queue = WorkQueue(worker, QueueSettings(timer_granularity_s=granularity))
    ctx.queue = queue
    queue.start()
    rng = random.Random(count)
    for key in ctx.store.keys():
        queue.request(key, rng.random() * resync_s)
    await asyncio.sleep(min(resync_s, 2.0))
    runs, cpu0, wall0 = 0, time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    cpu, wall, done = time.process_time() - cpu0, time.monotonic() - wall0, runs
    await queue.stop()
    per_run_us = cpu / done * 1e6 if done else None
    return {"count": count, "granularityS": granularity, "resyncs": done, "wallS": round(wall, 2),
            "cpuS": round(cpu, 4), "perResyncUs": round(per_run_us, 1) if per_run_us is not None else None,
            "idleCores": round(cpu / wall, 4)}


def format_report(report: Mapping[str, Any]) -> str:
    lines = [f"Resyncs of settled resources every {report['resyncS']:g} s, {report['seconds']:g} s measured per cell "
             f"(commit {report.get('commit') or '-'}):", "",
             "| resources | timers | resyncs run | CPU per resync (us) | cores while idle |",
             "|---|---|---|---|---|"]
    for cell in report["cells"]:
        timers = "one per resource" if not cell["granularityS"] else f"coarse ({cell['granularityS']:g} s)"
        per = "-" if cell["perResyncUs"] is None else f"{cell['perResyncUs']:.0f}"
        lines.append(f"| {cell['count']} | {timers} | {cell['resyncs']} | {per} | {cell['idleCores']:.4f} |")
    return "\n".join(lines)


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="1000,10000", help="Resources per cell (default %(default)s).")
    parser.add_argument("--resync", type=float, default=30.0, help="Resync interval, s (default %(default)s, "
                        "as bench/operator_scale.py's).")
    parser.add_argument("--seconds", type=float, default=10.0, help="Seconds measured per cell (default %(default)s).")
    parser.add_argument("--out", type=Path, default=None, help="Write the report as JSON here.")
    parser.add_argument("--reread", type=Path, default=None, metavar="FILE", help="Print the table of a saved report.")
    args = parser.parse_args(argv)
    if args.reread is not None:
        try:
            print(format_report(json.loads(args.reread.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"queue_resync: --reread {args.reread}: not a saved --out report ({error!r})", file=sys.stderr)
            return 2
        return 0
    counts = [int(count) for count in args.counts.split(",") if count.strip()]
    cells = [asyncio.run(measure(count, args.resync, args.seconds, granularity))
             for count in counts for granularity in GRANULARITIES]
    report = {"commit": git_commit(), "resyncS": args.resync, "seconds": args.seconds, "cells": cells,
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(format_report(report))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
