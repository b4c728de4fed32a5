"""What the operator's direct ``/state`` reads cost with kept-alive connections and without.

The operator reads every settled runtime at each resync over one aiohttp session
(``podreads.PodReader``) whose connector keeps each runtime's connection open between resyncs.
This measures the trade, side by side in one run: the operator-side CPU of one resync's read
per pod (the second pass over N pods) and the RSS and file descriptors the open connections
hold, with the connector keeping connections (as the operator does) and closing each.

The runtimes are bench/readable_runtimes.py's stand-in (the runtime's own app) on N distinct
pod IPs of kwok's range, routed to this machine (root). Run::

    python bench/read_connections.py --pods 5000 --out bench/results/read_connections-<date>.json

``--reread FILE`` prints a saved report's table again.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import ipaddress
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from readable_runtimes import POD_CIDR, StandIn, local_route  # noqa: E402

#: Reads in flight at once (the operator's concurrent reconciles).
CONCURRENCY = 64


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(pods: int, port: int, keep: bool) -> dict[str, float | int | str]:
    """Two passes over ``pods`` pod IPs (connect, then a resync's reads): CPU per read of the
    second pass, and the RSS and open descriptors the session holds after it."""

    import aiohttp
    import psutil

    process = psutil.Process()
    hosts = [str(ip) for _, ip in zip(range(pods), ipaddress.ip_network(POD_CIDR).hosts(), strict=False)]
    connector = (aiohttp.TCPConnector(limit=0, keepalive_timeout=120.0) if keep
                 else aiohttp.TCPConnector(limit=0, force_close=True))
    gate = asyncio.Semaphore(CONCURRENCY)
    gc.collect()
    rss_before, fds_before = process.memory_info().rss, process.num_fds()
    async with aiohttp.ClientSession(connector=connector) as session:
        async def read(host: str) -> None:
            async with gate, session.get(f"http://{host}:{port}/state", params=[("omit", "health")]) as answer:
                await answer.read()

        await asyncio.gather(*(read(host) for host in hosts))
        cpu, wall = _cpu_s(), time.monotonic()
        await asyncio.gather(*(read(host) for host in hosts))
        cpu, wall = _cpu_s() - cpu, time.monotonic() - wall
        gc.collect()
        rss, fds = process.memory_info().rss - rss_before, process.num_fds() - fds_before
    return {"connections": "kept alive" if keep else "closed after each read", "pods": pods,
            "cpu_us_per_read": round(1e6 * cpu / pods, 1), "resync_wall_s": round(wall, 2),
            "rss_held_mb": round(rss / 1e6, 1), "descriptors_held": fds}


def format_report(report: dict) -> str:
    """What a run prints, from its ``--out`` JSON."""
    return format_table(report["rows"])


def format_table(rows: list[dict[str, float | int | str]]) -> str:
    lines = ["| connections | pods | operator CPU per read (us) | resync's reads, wall (s) | RSS held (MB) | "
             "descriptors held |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['connections']} | {r['pods']} | {r['cpu_us_per_read']} | {r['resync_wall_s']} | "
              f"{r['rss_held_mb']} | {r['descriptors_held']} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5000, help="Distinct pod IPs read (default 5000).")
    parser.add_argument("--port", type=int, default=18080, help="The stand-in's runtime port here.")
    parser.add_argument("--out", type=Path, default=None, help="Write the report as JSON here.")
    parser.add_argument("--reread", type=Path, default=None, metavar="FILE", help="Print a saved report again.")
    args = parser.parse_args(argv)
    if args.reread is not None:
        from operator_scale import reread

        return reread("read_connections", args.reread, format_report)
    from operator_scale import git_commit
    from psutil import Process

    standin = StandIn(args.port, args.port + 1, Path(tempfile.gettempdir()) / "read-connections-standin.log")
    with local_route():
        standin.start()
        try:
            # Each in a fresh process would be fairer to the allocator; one after the other in this
            # one, closed first, so that the kept-alive run cannot hand its heap to the other.
            rows = [asyncio.run(measure(args.pods, args.port, keep)) for keep in (False, True)]
        finally:
            standin.stop()
    report = {"pods": args.pods, "commit": git_commit(), "rows": rows,
              "process_rss_end_mb": round(Process().memory_info().rss / 1e6, 1)}
    print(format_report(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
