"""Where an operator's CPU goes over a window: the cycle collector, threads, passes and events.

Run bench/operator_scale.py with the probe of bench/probe_site (imported at the operator's start
from ``PYTHONPATH``; it appends a JSON line of totals every 10 s to ``PROBE_OUT``)::

    PYTHONPATH=bench/probe_site PROBE_OUT=/tmp/probe.jsonl python bench/operator_scale.py ...
    python bench/heap_probe.py --from /tmp/probe.jsonl --start 14:30:26 --end 14:35:36 \\
        --label "10,000 idle window" --out bench/results/heap_probe-<date>.json
    python bench/heap_probe.py --reread bench/results/heap_probe-<date>.json

``--start``/``--end`` (today's UTC time or epoch seconds; the idle window's are in the bench's
log) pick the probe's lines nearest to them; the report holds the differences between the two:
collections per generation and the seconds inside the collector (wall clock: on a busy machine
more than the CPU they took), each thread's CPU, the full passes and watch events. The probe's
own thread is among the threads: its CPU is in the operator's as the bench measured it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Threads listed by name; the rest are summed.
TOP_THREADS = 6


def nearest(lines: Sequence[Mapping[str, Any]], at: float) -> Mapping[str, Any]:
    if not lines:
        raise ValueError("the probe file has no lines")
    return min(lines, key=lambda line: abs(line["t"] - at))


def window(lines: Sequence[Mapping[str, Any]], start: float, end: float, label: str) -> dict[str, Any]:
    """The report of the probe's totals between its lines nearest ``start`` and ``end``."""
    first, last = nearest(lines, start), nearest(lines, end)
    seconds = last["t"] - first["t"]
    if seconds <= 0:
        raise ValueError(f"no probe lines between {start} and {end}: pick a later --end")
    gc = {}
    for generation, (count, spent) in last["gc"].items():
        before = first["gc"].get(generation, [0, 0.0])
        gc[generation] = {"collections": count - before[0], "seconds": round(spent - before[1], 3),
                          "cores": round((spent - before[1]) / seconds, 4)}
    hz = last.get("ticks_per_s", 100)
    threads = []
    for tid, (name, ticks) in last["threads"].items():
        cpu = (ticks - first["threads"].get(tid, [name, 0])[1]) / hz
        threads.append({"name": name, "cores": round(cpu / seconds, 4)})
    threads.sort(key=lambda thread: -thread["cores"])
    counts = {key: value - first["counts"].get(key, 0) for key, value in last["counts"].items()}
    return {"label": label, "window_s": round(seconds, 1), "gc": gc,
            "frozen": [first.get("frozen", 0), last.get("frozen", 0)],
            "threads": threads[:TOP_THREADS],
            "other_threads": {"count": max(len(threads) - TOP_THREADS, 0),
                              "cores": round(sum(t["cores"] for t in threads[TOP_THREADS:]), 4)},
            "all_threads_cores": round(sum(t["cores"] for t in threads), 4),
            "counts": {key: value for key, value in sorted(counts.items()) if value}}


def format_report(report: Mapping[str, Any]) -> str:
    lines = [f"{report['label']} ({report['window_s']:g} s, commit {report.get('commit', '-')})", "",
             "| collector | collections | seconds inside | cores |", "|---|---|---|---|"]
    for generation, row in sorted(report["gc"].items()):
        lines.append(f"| generation {generation} | {row['collections']} | {row['seconds']:.2f} | {row['cores']:.4f} |")
    frozen = report["frozen"]
    lines += [f"objects frozen at the start / end: {frozen[0]} / {frozen[1]}", "",
              "| thread | cores |", "|---|---|"]
    lines += [f"| {thread['name']} | {thread['cores']:.4f} |" for thread in report["threads"]]
    other = report["other_threads"]
    lines += [f"| {other['count']} others | {other['cores']:.4f} |",
              f"| all | {report['all_threads_cores']:.4f} |", ""]
    lines += [f"- {key}: {value}" for key, value in report["counts"].items()] or ["- no passes or events counted"]
    return "\n".join(lines)


def _when(flag: str, text: str) -> float:
    """``HH:MM:SS`` (UTC, today) or epoch seconds; a ValueError naming ``flag`` otherwise."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        clock = dt.time.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{flag} {text!r}: give HH:MM:SS (UTC, today) or epoch seconds") from None
    today = dt.datetime.now(dt.timezone.utc).date()
    return dt.datetime.combine(today, clock, tzinfo=dt.timezone.utc).timestamp()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, help="The probe's file (PROBE_OUT).")
    parser.add_argument("--start", help="The window's start: HH:MM:SS (UTC, today) or epoch seconds.")
    parser.add_argument("--end", help="The window's end, as --start.")
    parser.add_argument("--label", default="window", help="What the window was.")
    parser.add_argument("--commit", default=None, help="The operator's commit (default: this checkout's HEAD).")
    parser.add_argument("--out", type=Path, default=None, help="Save the report (JSON) here.")
    parser.add_argument("--reread", type=Path, default=None, metavar="FILE", help="Print a saved report again.")
    args = parser.parse_args(argv)
    if args.reread is not None:
        print(format_report(json.loads(args.reread.read_text(encoding="utf-8"))))
        return 0
    if not (args.source and args.start and args.end):
        parser.error("--from, --start and --end are needed (or --reread FILE)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from operator_scale import git_commit

    try:
        text = args.source.read_text(encoding="utf-8")
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        found = window(lines, _when("--start", args.start), _when("--end", args.end), args.label)
    except OSError as error:
        parser.error(f"--from {args.source}: {error.strerror}")
    except json.JSONDecodeError as error:
        parser.error(f"--from {args.source}: not the probe's file (line {error.lineno}: {error.msg})")
    except ValueError as error:
        parser.error(str(error))
    report = {**found, "commit": args.commit or git_commit()}
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
