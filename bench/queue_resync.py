"""The operator's CPU per resync of a settled resource: the real work queue and skip path, per-key
timers against coarse timers, and runtimes that answer, side by side in one run.

Run:  python bench/queue_resync.py [--counts 1000,10000] [--resync 30] [--seconds 10] [--reads] [--out FILE]
      python bench/queue_resync.py --reread FILE

Each cell starts ``count`` resources whose last pass wrote nothing (``ascend_operator.lastpass``),
their pods Ready and unreadable and not yet due for a retry (kwok's pods, as in
bench/operator_scale.py's idle window), their first resyncs spread over one resync interval like
a running operator's. The queue runs ``handle_reconcile.reconcile_key`` itself; only the API
client is a stand-in (discovery answers from memory; no read is due). The process's CPU over
``--seconds`` divided by the resyncs run is the cost of one; times ``count / resync`` it is the
cores the resyncs take while idle. Settings: ``timer_granularity_s`` 0 (a timer per resource,
each resync its own wake-up of the loop) and 1 (the default: resyncs due within a second start on
one wake-up). ``--reads`` adds, with coarse timers, cells whose runtimes answer: one stand-in
process (bench/readable_runtimes.py, the runtime's own app on port 8080) serves every pod IP, the
pods at loopback addresses (127.0.0.0/8 is this machine's; no root needed), each read a
conditional ``GET /state?omit=health`` answered 304 as a settled runtime's is. ``every resync``:
each resync asks its runtime (the code before ``podreads.Settled``); ``settled``: the operator's
backoff (the progress poll interval doubling to five resync intervals), the last reads spread
over the longest wait and one resync, as after it has run that long (the connections, though,
all made during the set-up). The stand-in's CPU is its own process's, not counted. Exit 0 when
it ran, 2 for a --reread file that is not a saved report. The pure part (``format_report``) is
tested by tests/unit/test_queue_resync_bench.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ascend_runtime.config import DEFAULT_RUNTIME_PORT as RUNTIME_PORT

ROOT = Path(__file__).resolve().parents[1]
GRANULARITIES = (0.0, 1.0)
#: What the pods' runtimes do: none answers (the reads are not due), or each answers 304, asked at
#: every resync or as the settled backoff asks.
READ_MODES = ("none", "every", "settled")
#: Where the stand-in counts its answers (it serves the runtime port, RUNTIME_PORT).
COUNTS_PORT = 18981


class _Discovery:
    """The one API call of a skipped pass (discovery, cached by the real client); no read is due."""

    async def served(self, max_age_s: float) -> frozenset[str]:
        return frozenset({"v1", "apps/v1"})

    async def proxy_get(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no runtime read is due in this bench")


def pod_ip(index: int) -> str:
    """A loopback address of its own for each pod (the stand-in answers on all of them)."""
    return f"127.{1 + index // 62500}.{index // 250 % 250}.{index % 250 + 1}"


async def measure(count: int, resync_s: float, seconds: float, granularity: float,
                  reads: str = "none", answered: Callable[[], int] | None = None) -> dict[str, Any]:
    """One cell: the resyncs run, the runtime reads made and the CPU they took. ``answered``: the
    stand-in's count of its 304 answers so far (``reads`` other than none)."""

    from ascend_operator.handlers import OperatorContext
    from ascend_operator.handlers.handle_reconcile import reconcile_key
    from ascend_operator.lastpass import Inputs, LastPass
    from ascend_operator.names import label_value
    from ascend_operator.podreads import PodReader, StateTarget
    from ascend_operator.settings import OperatorSettings
    from ascend_operator.workqueue import QueueSettings, WorkQueue

    if reads not in READ_MODES:
        raise ValueError(f"reads={reads!r}: one of {', '.join(READ_MODES)}")
    settings, kube = OperatorSettings(), _Discovery()
    # The readers' clock: while the settled backoff's waits are set up it stands at ``virtual``
    # (moved by hand), then runs on from where the set-up left it, every key's set-up at one time.
    virtual, offset = [time.monotonic()], [None]

    def clock() -> float:
        return virtual[0] if offset[0] is None else time.monotonic() - offset[0]

    # As handle_startup builds it; "every" asks at each resync (a base wait of 0 never grows).
    base_s = 0.0 if reads == "every" else settings.progress_poll_interval_s
    ctx = OperatorContext(settings=settings, kube=kube, pods=PodReader(  # type: ignore[arg-type]
        kube, timeout_s=5.0, via_proxy=reads == "none", retry_base_s=base_s, settled_max_s=5 * resync_s,
        clock=clock))
    served = await kube.served(0)
    runs, rng = 0, random.Random(count)
    for index in range(count):
        namespace, name = f"ns-{index // 100:03d}", f"llm-{index:05d}"
        ctx.store.put({"metadata": {"namespace": namespace, "name": name, "resourceVersion": str(index + 1)},
                       "spec": {}})
        pod = StateTarget(f"{name}-0", pod_ip(index) if reads != "none" else "10.0.0.1", "1", ready=True)
        if reads == "none":
            for _ in range(2):  # Ready and unreadable twice: not asked again within this run
                ctx.pods.unreadable.failed(namespace, pod)
            states = {pod.name: None}
        else:  # the full pass's read (its answer 200, the ETag kept), then as a settled resource's
            # answered unchanged long enough for the longest wait, the last read spread over the
            # longest wait and one resync before the end of the set-up (a read comes at the first
            # resync after it is due)
            end, longest = virtual[0], 5 * resync_s
            virtual[0] = end - rng.random() * (longest + resync_s) - 8 * longest
            states = await ctx.pods.read_targets(namespace, (pod,))
            if states[pod.name] is None:
                raise RuntimeError(f"the stand-in runtime did not answer at {pod.ip}:{RUNTIME_PORT}")
            for _ in range(8 if reads == "settled" else 0):  # the base wait doubled 7 times passes the longest
                virtual[0] += longest  # the next read is due: move the clock on to it
                await ctx.pods.read_targets(namespace, (pod,), settled=True)
            virtual[0] = end
        inputs = Inputs(str(index + 1), served, settings, ctx.watch_cache.changed(namespace, label_value(name)))
        ctx.last_passes.record(f"{namespace}/{name}", LastPass(inputs, (pod,), states, resync_s))

    async def worker(key: str) -> float | None:
        nonlocal runs
        runs += 1
        return await reconcile_key(ctx, key)

    offset[0] = time.monotonic() - virtual[0]
    queue = WorkQueue(worker, QueueSettings(concurrency=settings.max_concurrent_reconciles,
                                            timer_granularity_s=granularity))
    ctx.queue = queue
    queue.start()
    for key in ctx.store.keys():
        queue.request(key, rng.random() * resync_s)
    await asyncio.sleep(min(resync_s, 2.0))
    before = await asyncio.to_thread(answered) if answered is not None else 0
    runs, cpu0, wall0 = 0, time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    cpu, wall, done = time.process_time() - cpu0, time.monotonic() - wall0, runs
    made = (await asyncio.to_thread(answered)) - before if answered is not None else 0
    await queue.stop()
    await ctx.pods.close()
    per_run_us = cpu / done * 1e6 if done else None
    return {"count": count, "granularityS": granularity, "reads": reads, "runtimeReads": made, "resyncs": done,
            "wallS": round(wall, 2),
            "cpuS": round(cpu, 4), "perResyncUs": round(per_run_us, 1) if per_run_us is not None else None,
            "idleCores": round(cpu / wall, 4)}


#: How the table names each way the runtimes answer.
READ_LABELS = {"none": "not read (not due)", "every": "304, asked every resync", "settled": "304, settled backoff"}


def format_report(report: Mapping[str, Any]) -> str:
    lines = [f"Resyncs of settled resources every {report['resyncS']:g} s, {report['seconds']:g} s measured per cell "
             f"(commit {report.get('commit') or '-'}):", "",
             "| resources | timers | runtimes | resyncs run | runtime reads | CPU per resync (us) | cores while idle |",
             "|---|---|---|---|---|---|---|"]
    for cell in report["cells"]:
        timers = "one per resource" if not cell["granularityS"] else f"coarse ({cell['granularityS']:g} s)"
        per = "-" if cell["perResyncUs"] is None else f"{cell['perResyncUs']:.0f}"
        runtimes = READ_LABELS[cell.get("reads", "none")]  # reports before --reads: none read
        lines.append(f"| {cell['count']} | {timers} | {runtimes} | {cell['resyncs']} | {cell.get('runtimeReads', 0)} "
                     f"| {per} | {cell['idleCores']:.4f} |")
    return "\n".join(lines)


@contextlib.contextmanager
def answering_runtimes() -> Iterator[Callable[[], int]]:
    """The stand-in runtime (bench/readable_runtimes.py) on every loopback address while the block
    runs; gives its count of 304 answers so far."""

    sys.path.insert(0, str(ROOT / "bench"))
    from readable_runtimes import StandIn

    with tempfile.TemporaryDirectory() as folder:
        stand_in = StandIn(RUNTIME_PORT, COUNTS_PORT, Path(folder) / "standin.log")
        stand_in.start()
        try:
            yield lambda: stand_in.answers()["304"]
        finally:
            stand_in.stop()


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
    parser.add_argument("--reads", action="store_true", help="Also cells whose runtimes answer (a stand-in on port "
                        f"{RUNTIME_PORT}, which must be free), asked every resync and as settled, coarse timers.")
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
    cells = []
    for count in counts:
        cells += [asyncio.run(measure(count, args.resync, args.seconds, granularity)) for granularity in GRANULARITIES]
        if args.reads:
            with answering_runtimes() as answered:
                cells += [asyncio.run(measure(count, args.resync, args.seconds, GRANULARITIES[-1], reads, answered))
                          for reads in READ_MODES[1:]]
    report = {"commit": git_commit(), "resyncS": args.resync, "seconds": args.seconds, "cells": cells,
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(format_report(report))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
