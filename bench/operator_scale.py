"""Operator scale benchmark: the project's operator against a minimal kopf operator
(``bench/minimal_operator.py``), side by side, on a real API server (``../shared/k8s``).

Why: issue #10 asks that the operator converges about as fast as the least a kopf operator can
do, stays small at 1,000 resources, and sends no write to the API server when nothing changed
(an idle resync, a restart). Only the operator's command line and environment and the Kubernetes
API are used, so the benchmark outlives rewrites of the operator.

For each operator in turn, in a fresh namespace: start it as a subprocess (``--standalone -n NS``,
``KUBECONFIG``), server-side apply N resources at once from a thread pool (the CPU spec of
``examples/cpu-tiny.yaml``, distinct names), and measure (``--per-namespace M``: in fresh
namespaces of M resources each, the operator watching every namespace; :class:`Layout`)

- converge time: first apply to the last child present (ConfigMap, Deployment, Service and
  PodDisruptionBudget, each owned by its resource), and to the last status written
  (``status.observedGeneration`` present); apply-to-status lag per resource (median, p99);
- the operator's RSS (its process tree, psutil): peak and at the end;
- the CPU of the operator and, on the pack's control plane, of each of its processes from the
  first apply to the last status: on a machine shared with the control plane, where the converge
  time goes;
- writes per idle resync: after a settle of one resync interval, the writes over two resync
  intervals (or ``--idle-window``), divided by the number of intervals;
- writes on a restart: SIGTERM, start again with all N present, writes until it is idle again.

``--readable-runtimes``: every pod's runtime port answers (bench/readable_runtimes.py, one
stand-in serving the runtime's own app for all pod IPs) and the project's operator reads pod IPs
directly, as in a cluster; the idle window then also counts the stand-in's ``/state`` answers
(200 and 304) and its CPU. Without it kwok's pods serve nothing and the reads back off.

``--converge-only`` stops after the converge (no idle window, no restart: their targets are then
not measured), for diagnoses at large counts. The API server's whole /metrics text is saved into
the log folder at the first apply and at the last status (``<operator>-metrics-converge-{start,end}.txt``):
every client's requests and their latencies over the converge, for where the control plane's
time went (bench/README.md, "Where the converge growth goes").

Writes are the API server's own ``apiserver_request_total`` (GET /metrics): verbs POST, PUT,
PATCH, DELETE, DELETECOLLECTION and APPLY, not dry-run. The metric has no user or user-agent
label; its ``system_client`` label names the control plane's own clients (derived from their user
agent) and is empty for every other one. Counted are the writes of non-system clients minus what
kwok (the fake kubelet, also a non-system client) writes: nodes, leases and pods. In the windows
only the operator and kwok run, so the count is the operator's. The same clients' reads (GET,
LIST) in the idle window are reported too: they show that the resyncs ran.

Exit status 0 when every target holds, 1 with the reasons when one fails, 3 when none fails but
a ratio target is inconclusive (its rounds' range straddles the target, or one round has no
spread: bench/verdict.py), 2 when the run could not be made. The pure parts (``parse_requests``, ``request_delta``, ``idle_since``, ``lag_stats``,
``evaluate``, ``format_table``, ``format_report``) are tested in tests/unit/test_operator_scale_bench.py.
``--reread FILE`` prints a saved ``--out`` report's tables again (bench/results/).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import platform
import signal
import statistics
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from resource import RUSAGE_SELF, getrusage
from typing import Any, NamedTuple

import yaml
from prometheus_client.parser import text_string_to_metric_families

# The same percentile as the other benchmarks', beside this file (run as a script or loaded by path).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import percentile  # noqa: E402
from readable_runtimes import StandIn, local_route  # noqa: E402
from verdict import Direction, Outcome, judge, judge_range  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CRD_FILE = ROOT / "crds" / "llm.ascend.dev_ascendllmdeployments.yaml"
EXAMPLE = ROOT / "examples" / "cpu-tiny.yaml"
MINIMAL_OPERATOR = Path(__file__).resolve().parent / "minimal_operator.py"
FIELD_MANAGER = "operator-scale-bench"

OURS = "ours"
MINIMAL = "minimal"
#: The minimal operator applying exactly the project's children (its builders' output): what the
#: project's operator costs beyond the objects the product makes.
MINIMAL_SAME = "minimal-same"
#: The project's operator from another checkout (``--baseline``: its CLI), measured beside ``ours``
#: for a before/after comparison in one run; reported, not judged.
BASELINE = "baseline"
OPERATORS = (OURS, BASELINE, MINIMAL, MINIMAL_SAME)
#: The project's operator, from this checkout or the baseline's: they read pods and report a phase.
PROJECT = frozenset({OURS, BASELINE})

# ------------------------------------------------------------------------------------- targets

#: Converge time (children and status) at most this multiple of the minimal operator's.
CONVERGE_RATIO_MAX = 1.2
#: Peak RSS of the operator's process tree, in MB (10**6 bytes), stated for N = 1000.
RSS_MAX_MB = 150.0
#: The operator's CPU from its start to the last status, at most this multiple of the yardstick's.
CONVERGE_CPU_RATIO_MAX = 2.0
#: CPU while idle (cores), stated for N = 1000.
IDLE_CPU_MAX = 0.02
#: Above 1,000 resources (issue 24: 10,000 on one operator): peak RSS and idle CPU.
RSS_MAX_MB_LARGE = 600.0
IDLE_CPU_MAX_LARGE = 0.1


def limits(count: int) -> tuple[float, float]:
    """Peak RSS (MB) and idle CPU (cores) allowed at ``count`` resources."""
    return (RSS_MAX_MB, IDLE_CPU_MAX) if count <= 1000 else (RSS_MAX_MB_LARGE, IDLE_CPU_MAX_LARGE)

# ------------------------------------------------------------------------------------- writes

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
#: Reads that show an idle resync did run (a watch is one long request: not counted).
READ_VERBS = frozenset({"GET", "LIST"})
#: A request through a pod's proxy (the project's operator reading a runtime's ``/state`` from
#: outside the cluster): the API server counts it as CONNECT on ``pods/proxy``.
PROXY_VERBS = frozenset({"CONNECT"})
#: (group, resource) that kwok writes as a non-system client: node status, node leases, pod status
#: and pod removal. The operators write none of them (peering is off: ``--standalone``).
KWOK_RESOURCES = frozenset({("", "nodes"), ("coordination.k8s.io", "leases"), ("", "pods")})
#: What kwok reads while idle (node heartbeats); reads of pods stay in: the operators read them.
KWOK_READ_RESOURCES = frozenset({("", "nodes"), ("coordination.k8s.io", "leases")})
METRIC = "apiserver_request_total"


class WriteKey(NamedTuple):
    group: str
    resource: str
    subresource: str
    verb: str

    def label(self) -> str:
        kind = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{self.verb} {kind}{'/' + self.subresource if self.subresource else ''}"


def parse_requests(text: str) -> Counter[WriteKey]:
    """The cumulative writes, reads (GET, LIST; not WATCH) and pod proxy requests (CONNECT) of
    non-system clients on API resources, less kwok's kinds, in the API server's metrics text."""

    # /metrics is megabytes of histograms: parse only the one family's lines.
    wanted = "\n".join(line for line in text.splitlines()
                       if line.startswith(METRIC) or line.startswith(f"# TYPE {METRIC} ")
                       or line.startswith(f"# HELP {METRIC} ")) + "\n"
    requests: Counter[WriteKey] = Counter()
    for family in text_string_to_metric_families(wanted):
        for sample in family.samples:
            labels = sample.labels
            verb, group, resource = labels.get("verb"), labels.get("group", ""), labels.get("resource", "")
            if sample.name != METRIC or verb not in WRITE_VERBS | READ_VERBS | PROXY_VERBS or labels.get("dry_run"):
                continue
            if labels.get("system_client"):
                continue  # the control plane's own components
            kwok = KWOK_RESOURCES if verb in WRITE_VERBS else KWOK_READ_RESOURCES
            if not resource or (group, resource) in kwok:
                continue  # /metrics, /healthz, discovery; kwok's kinds
            requests[WriteKey(group, resource, labels.get("subresource", ""), verb)] += int(sample.value)
    return requests


def only(requests: Mapping[WriteKey, int], verbs: frozenset[str]) -> Counter[WriteKey]:
    return Counter({key: value for key, value in requests.items() if key.verb in verbs})


def parse_writes(text: str) -> Counter[WriteKey]:
    """The cumulative writes of non-system clients, not kwok's, in the API server's metrics text."""

    return only(parse_requests(text), WRITE_VERBS)


def request_delta(before: Mapping[WriteKey, int], after: Mapping[WriteKey, int]) -> Counter[WriteKey]:
    """The requests between two readings of the counters (which only grow while the server runs)."""

    delta = Counter({key: after[key] - before.get(key, 0) for key in after})
    if any(value < 0 for value in delta.values()):
        raise ValueError("apiserver_request_total went down: the API server restarted during the window")
    return +delta


# ------------------------------------------------------------------------------------- statistics


def lag_stats(values: Sequence[float]) -> dict[str, float | None]:
    """Median, p99 and max of per-resource lags, seconds."""

    return {"median_s": percentile(values, 50), "p99_s": percentile(values, 99),
            "max_s": max(values) if values else None}


@dataclass
class OperatorResult:
    """What one operator's run measured; None where the run did not get that far."""

    name: str
    count: int
    applied: int = 0
    apply_s: float | None = None
    converge_children_s: float | None = None
    converge_status_s: float | None = None
    children_missing: int | None = None
    status_missing: int | None = None
    status_lag: dict[str, float | None] = field(default_factory=dict)
    children_lag: dict[str, float | None] = field(default_factory=dict)
    rss_peak_mb: float | None = None
    rss_end_mb: float | None = None
    rss_restart_peak_mb: float | None = None
    idle_window_s: float | None = None
    idle_writes: int | None = None
    idle_writes_per_resync: float | None = None
    idle_writes_by_kind: dict[str, int] = field(default_factory=dict)
    idle_cpu_cores: float = 0.0
    idle_reads: int | None = None
    #: ``--readable-runtimes``: the stand-in's answers to ``/state`` in the idle window by HTTP
    #: status, and its CPU there (cores).
    idle_state_answers: dict[str, int] = field(default_factory=dict)
    idle_standin_cpu_cores: float | None = None
    #: Runtime ``/state`` reads through the pod proxy in the idle window and after the restart.
    idle_proxy_reads: int | None = None
    restart_proxy_reads: int | None = None
    restart_window_s: float | None = None
    restart_idle: bool | None = None
    restart_writes: int | None = None
    restart_writes_by_kind: dict[str, int] = field(default_factory=dict)
    restart_reads: int | None = None
    converge_writes: int | None = None
    cpu_s: float | None = None
    #: The operator's CPU from its start (once live) to the last status.
    converge_cpu_s: float | None = None
    #: The same span's CPU seconds of each process of the local control plane (the pack's
    #: ``run/*.pid``: kube-apiserver, kube-controller-manager, ...); empty for ``--kubeconfig``.
    converge_control_plane_cpu_s: dict[str, float] = field(default_factory=dict)
    #: Resources whose status said Ready before the idle window (the project's operator).
    ready: int | None = None
    #: Namespaces the resources were spread over (``--per-namespace``; 1: all in one).
    namespaces: int = 1
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Target:
    name: str
    value: float | None
    limit: str
    passed: bool | None  # None: not measured in this run
    detail: str = ""


def evaluate(ours: OperatorResult, minimal: OperatorResult | None,
             rounds: Sequence[Mapping[str, OperatorResult]] = (), yardstick: str = MINIMAL) -> list[Target]:
    """The targets of issue #10 for the project's operator; ``minimal`` (the run named
    ``yardstick``) is the yardstick.

    ``rounds`` are the further converge-only rounds (``--rounds``): the converge targets are then
    the median of every round's ratio, each round's two runs having been made back to back."""

    targets: list[Target] = []
    pairs = [(ours, minimal), *((r.get(OURS), r.get(yardstick)) for r in rounds)]
    for label, attr in (("converge to last child", "converge_children_s"),
                        ("converge to last status", "converge_status_s")):
        values = [getattr(o, attr) if o else None for o, _ in pairs]
        bases = [getattr(m, attr) if m else None for _, m in pairs]
        if any(value is None for value in values):
            targets.append(Target(f"{label} / {yardstick}", None, f"<= {CONVERGE_RATIO_MAX}x", False,
                                  "the project's operator did not converge"))
        elif minimal is None:
            targets.append(Target(f"{label} / {yardstick}", None, f"<= {CONVERGE_RATIO_MAX}x", None,
                                  "the minimal operator was not run"))
        elif any(base is None for base in bases):
            targets.append(Target(f"{label} / {yardstick}", None, f"<= {CONVERGE_RATIO_MAX}x", None,
                                  "the minimal operator did not converge: no yardstick"))
        else:
            ratios = [value / base for value, base in zip(values, bases, strict=True)]
            ratio = statistics.median(ratios)
            detail = "; ".join(f"{value:.1f} s vs {base:.1f} s" for value, base in zip(values, bases, strict=True))
            if len(ratios) > 1:
                detail = f"median of {len(ratios)} rounds ({', '.join(f'{r:.2f}' for r in ratios)}): {detail}"
            # Judged on the rounds' range, not the median (bench/verdict.py): inconclusive is None.
            verdict = judge(ratios, CONVERGE_RATIO_MAX, Direction.AT_MOST)
            passed = {Outcome.MET: True, Outcome.MISSED: False}.get(verdict.outcome)
            detail = f"{verdict.outcome.value}: {verdict.reason}; {detail}"
            targets.append(Target(f"{label} / {yardstick}", round(ratio, 3), f"<= {CONVERGE_RATIO_MAX}x",
                                  passed, detail))
    values = [o.converge_cpu_s if o else None for o, _ in pairs]
    bases = [m.converge_cpu_s if m else None for _, m in pairs]
    label, limit = f"operator CPU to converge / {yardstick}", f"<= {CONVERGE_CPU_RATIO_MAX}x"
    if minimal is None or any(v is None for v in values) or any(b is None or b <= 0 for b in bases):
        targets.append(Target(label, None, limit, None, "not measured in every round"))
    else:
        ratios = [value / base for value, base in zip(values, bases, strict=True)]
        verdict = judge(ratios, CONVERGE_CPU_RATIO_MAX, Direction.AT_MOST)
        detail = "; ".join(f"{value:.1f} s vs {base:.1f} s" for value, base in zip(values, bases, strict=True))
        targets.append(Target(label, round(statistics.median(ratios), 3), limit,
                              {Outcome.MET: True, Outcome.MISSED: False}.get(verdict.outcome),
                              f"{verdict.outcome.value}: {verdict.reason}; ratios "
                              f"{', '.join(f'{r:.2f}' for r in ratios)}: {detail}"))
    rss_max, idle_max = limits(ours.count)
    peak = max((v for v in (ours.rss_peak_mb, ours.rss_restart_peak_mb) if v is not None), default=None)
    targets.append(Target("peak RSS (MB)", peak, f"<= {rss_max:g} at N={ours.count}",
                          None if peak is None else peak <= rss_max))
    targets.append(Target("CPU while idle (cores)", ours.idle_cpu_cores if ours.idle_window_s else None,
                          f"<= {idle_max:g} at N={ours.count}",
                          None if not ours.idle_window_s else ours.idle_cpu_cores <= idle_max))
    targets.append(Target("resources Ready before the idle window", ours.ready, f"= {ours.count}",
                          None if ours.ready is None else ours.ready == ours.count))
    targets.append(Target("writes per idle resync", ours.idle_writes_per_resync, "0",
                          None if ours.idle_writes_per_resync is None else ours.idle_writes == 0,
                          _kinds(ours.idle_writes_by_kind)))
    restart_ok = None if ours.restart_writes is None else ours.restart_writes == 0
    detail = _kinds(ours.restart_writes_by_kind)
    if ours.restart_idle is False:
        restart_ok, detail = False, f"not idle within the window; {detail}"
    targets.append(Target("writes on restart", ours.restart_writes, "0", restart_ok, detail))
    for error in ours.errors:
        targets.append(Target("run", None, "no error", False, error))
    return targets


def growth(values: Sequence[float | None], count: int, earlier: Mapping[str, Any],
           operator: str = OURS) -> list[Target]:
    """Converge time at ``count`` resources against an earlier run's (``--linear-from``: its
    ``--out`` JSON, at fewer resources): at most linear growth, a ratio of at most ``count`` over
    its count. ``values`` are ``operator``'s converge seconds to the last status, one per round
    here; the earlier ones come from every round of that file. Judged on the range of the ratios
    of every pair (bench/verdict.py), with as many samples as the side with fewer rounds. For the
    minimal operator it is the control plane's growth on the same machine (not a target)."""

    small_count = int(earlier["count"])
    name, limit = f"converge growth {small_count} -> {count} (to last status)", f"<= {count / small_count:g}x"
    if operator != OURS:
        name += f", {operator}"
    if small_count >= count:
        raise ValueError(f"--linear-from: that run had {small_count} resources, not fewer than {count}")
    small = [r[operator]["converge_status_s"] for r in earlier.get("rounds", []) if r.get(operator)]
    if not values or not small or any(v is None for v in [*values, *small]):
        return [Target(name, None, limit, None, "a run without every round converged")]
    big = [float(v) for v in values if v is not None]
    low, high = min(big) / max(small), max(big) / min(small)
    verdict = judge_range(low, high, min(len(big), len(small)), count / small_count, Direction.AT_MOST)
    detail = (f"{verdict.outcome.value}: {verdict.reason}; {', '.join(f'{v:.1f}' for v in big)} s at {count} "
              f"vs {', '.join(f'{v:.1f}' for v in small)} s at {small_count}")
    ratio = statistics.median(big) / statistics.median(small)
    return [Target(name, round(ratio, 3), limit, {Outcome.MET: True, Outcome.MISSED: False}.get(verdict.outcome),
                   detail)]


def _kinds(by_kind: Mapping[str, int]) -> str:
    return ", ".join(f"{key} x{value}" for key, value in sorted(by_kind.items()))


def failures(targets: Sequence[Target]) -> list[str]:
    return [f"{t.name}: {t.value} (target {t.limit}){': ' + t.detail if t.detail else ''}"
            for t in targets if t.passed is False]


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _plane_cell(cpu: Mapping[str, float]) -> str:
    """``kube-apiserver 1204.0, ...`` (most first) and the total; ``-`` when not measured."""

    if not cpu:
        return "-"
    ranked = sorted(cpu.items(), key=lambda item: -item[1])
    return ", ".join(f"{name} {seconds:.1f}" for name, seconds in ranked) + f" (all {sum(cpu.values()):.1f})"


def format_table(results: Sequence[OperatorResult]) -> str:
    """The side-by-side table (Markdown) of the measured figures."""

    rows = [
        ("resources applied", lambda r: _fmt(r.applied)),
        ("apply of all resources (s)", lambda r: _fmt(r.apply_s)),
        ("converge: first apply to last child (s)", lambda r: _fmt(r.converge_children_s)),
        ("converge: first apply to last status (s)", lambda r: _fmt(r.converge_status_s)),
        ("apply-to-status lag median / p99 (s)",
         lambda r: f"{_fmt(r.status_lag.get('median_s'), 2)} / {_fmt(r.status_lag.get('p99_s'), 2)}"),
        ("apply-to-children lag median / p99 (s)",
         lambda r: f"{_fmt(r.children_lag.get('median_s'), 2)} / {_fmt(r.children_lag.get('p99_s'), 2)}"),
        ("writes until converged", lambda r: _fmt(r.converge_writes)),
        ("CPU while idle (cores)", lambda r: _fmt(r.idle_cpu_cores if r.idle_window_s else None, 3)),
        ("reads (GET, LIST) in the idle window", lambda r: _fmt(r.idle_reads)),
        ("reads (GET, LIST) after the restart", lambda r: _fmt(r.restart_reads)),
        ("pod proxy reads (runtime /state) in the idle window / after the restart",
         lambda r: f"{_fmt(r.idle_proxy_reads)} / {_fmt(r.restart_proxy_reads)}"),
        ("RSS peak / end (MB)", lambda r: f"{_fmt(r.rss_peak_mb)} / {_fmt(r.rss_end_mb)}"),
        ("RSS peak after restart (MB)", lambda r: _fmt(r.rss_restart_peak_mb)),
        ("CPU s (operator tree, first start)", lambda r: _fmt(r.cpu_s)),
        ("CPU s to converge (start to last status)", lambda r: _fmt(r.converge_cpu_s)),
        ("control plane's CPU s in the same span", lambda r: _plane_cell(r.converge_control_plane_cpu_s)),
        ("resources Ready before the idle window", lambda r: _fmt(r.ready)),
        ("writes per idle resync", lambda r: _fmt(r.idle_writes_per_resync, 2)
         + (f" ({r.idle_writes} in {r.idle_window_s:.0f} s)" if r.idle_window_s is not None else "")),
        ("writes on restart", lambda r: _fmt(r.restart_writes)
         + (f" (in {r.restart_window_s:.0f} s{'' if r.restart_idle else ', not idle'})"
            if r.restart_window_s is not None else "")),
    ]
    if any(r.namespaces > 1 for r in results):  # a row only where the layout is not the default
        rows.insert(1, ("namespaces (resources in each)",
                        lambda r: f"{r.namespaces} ({-(-r.count // r.namespaces)})"))
    if any(r.idle_state_answers for r in results):  # --readable-runtimes: what the runtimes answered
        at = next(index for index, (label, _) in enumerate(rows) if label.startswith("pod proxy reads")) + 1
        rows.insert(at, ("runtime /state answers 200 / 304 in the idle window (readable runtimes)",
                         lambda r: f"{r.idle_state_answers.get('200', 0)} / {r.idle_state_answers.get('304', 0)}"
                         if r.idle_state_answers else "-"))
        rows.insert(at + 1, ("the stand-in runtimes' CPU in the idle window (cores)",
                             lambda r: _fmt(r.idle_standin_cpu_cores, 3)))
    lines = ["| | " + " | ".join(r.name for r in results) + " |", "|---" * (len(results) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(cell(r) for r in results) + " |" for label, cell in rows]
    return "\n".join(lines)


def format_rounds(rounds: Sequence[Mapping[str, OperatorResult]]) -> str:
    """Converge time of every round (Markdown), in the order each round ran."""

    lines = ["| round | order | converge to last child (s) | to last status (s) | operator CPU to converge (s) |",
             "|---|---|---|---|---|"]
    for index, one in enumerate(rounds, 1):
        lines.append(f"| {index} | {', '.join(one)} | "
                     + " / ".join(f"{name} {_fmt(r.converge_children_s)}" for name, r in one.items()) + " | "
                     + " / ".join(f"{name} {_fmt(r.converge_status_s)}" for name, r in one.items()) + " | "
                     + " / ".join(f"{name} {_fmt(r.converge_cpu_s)}" for name, r in one.items()) + " |")
    return "\n".join(lines)


def format_targets(targets: Sequence[Target]) -> str:
    def mark(target: Target) -> str:
        if target.passed is None:  # a measured value left undecided by its spread
            return "not measured" if target.value is None else "inconclusive"
        return "pass" if target.passed else "FAIL"

    return "\n".join(f"- {mark(t)}: {t.name} = {_fmt(t.value, 3)} (target {t.limit})"
                     + (f"; {t.detail}" if t.detail else "") for t in targets)


def format_report(report: Mapping[str, Any]) -> str:
    """What a run prints, from its ``--out`` JSON (``--reread`` prints it again)."""

    known = {f.name for f in fields(OperatorResult)}
    results = [OperatorResult(**{key: value for key, value in data.items() if key in known})
               for data in report["operators"].values()]
    parts = [format_table(results)]
    if len(report.get("rounds") or ()) > 1:  # the first round's figures are the table's
        parts.append("\n" + format_rounds([
            {name: OperatorResult(name=name, count=report["count"], **values) for name, values in one.items()}
            for one in report["rounds"]]))
    if report.get("against_minimal"):
        parts.append(f"\nAgainst {MINIMAL} (four small children; not a target):\n"
                     + format_targets([Target(**t) for t in report["against_minimal"]]))
    if report.get("targets"):
        parts.append("\nTargets (the project's operator):\n" + format_targets([Target(**t) for t in report["targets"]]))
    if report.get("yardstick_growth"):
        parts.append("\nThe same growth of the minimal operator (the control plane's, on this machine; not a target):\n"
                     + format_targets([Target(**t) for t in report["yardstick_growth"]]))
    if report.get("failures"):
        parts.append("\nFAILED:\n" + "\n".join(f"- {reason}" for reason in report["failures"]))
    if report.get("inconclusive"):
        parts.append("\nINCONCLUSIVE (the rounds' spread straddles the target; run more --rounds):\n"
                     + "\n".join(f"- {reason}" for reason in report["inconclusive"]))
    return "\n".join(parts)


# ------------------------------------------------------------------------------------- API access


class Api:
    """A thin JSON client over the kubeconfig's connection (no model classes: cheap on the CPU)."""

    def __init__(self, kubeconfig: str, pool_size: int) -> None:
        import kubernetes
        import urllib3

        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self.host = cfg.host.rstrip("/")
        self.headers: dict[str, str] = {}
        token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
        if token:
            prefix = cfg.api_key_prefix.get("authorization") or cfg.api_key_prefix.get("BearerToken")
            self.headers["Authorization"] = f"{prefix} {token}" if prefix else token
        self.pool = urllib3.PoolManager(
            num_pools=4, maxsize=pool_size, cert_reqs="CERT_REQUIRED" if cfg.verify_ssl else "CERT_NONE",
            ca_certs=cfg.ssl_ca_cert, cert_file=cfg.cert_file, key_file=cfg.key_file)

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                accept: str = "application/json", timeout: float = 60, ok: Sequence[int] = (200, 201, 202)
                ) -> Any:
        headers = {**self.headers, "Accept": accept}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        response = self.pool.request(method, self.host + path, body=data, headers=headers, timeout=timeout)
        if response.status not in ok:
            raise ApiError(method, path, response.status, response.data.decode(errors="replace")[:500])
        text = response.data.decode()
        return json.loads(text) if accept.startswith("application/json") and text else text

    def apply(self, path: str, obj: Mapping[str, Any]) -> Any:
        return self.request("PATCH", f"{path}?fieldManager={FIELD_MANAGER}&force=true", obj,
                            content_type="application/apply-patch+yaml")

    def watch(self, path: str, resource_version: str, accept: str,
              timeout_s: int) -> Iterator[dict[str, Any]]:
        import urllib3

        url = (f"{self.host}{path}?watch=true&allowWatchBookmarks=true&resourceVersion={resource_version}"
               f"&timeoutSeconds={timeout_s}")
        response = self.pool.request("GET", url, headers={**self.headers, "Accept": accept},
                                     preload_content=False,
                                     timeout=urllib3.Timeout(connect=10, read=timeout_s + 30))
        try:
            if response.status != 200:
                raise ApiError("WATCH", path, response.status, response.data.decode(errors="replace")[:500])
            buffer = b""
            for chunk in response.stream(65536):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

    def metrics_requests(self) -> Counter[WriteKey]:
        return parse_requests(self.request("GET", "/metrics", accept="text/plain"))

    def metrics_writes(self) -> Counter[WriteKey]:
        return only(self.metrics_requests(), WRITE_VERBS)


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body}")
        self.status = status


# Metadata only: a watch of children needs names and owners, not the objects (far less to parse).
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_ONLY_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
CHILD_COLLECTIONS = {
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Service": "/api/v1/namespaces/{ns}/services",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
}


@dataclass(frozen=True)
class Crd:
    group: str
    version: str
    plural: str
    kind: str
    body: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> Crd:
        body = yaml.safe_load(path.read_text())
        spec = body["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("storage"))
        return cls(spec["group"], version, spec["names"]["plural"], spec["names"]["kind"], body)

    def collection(self, namespace: str) -> str:
        return self.collection_template().format(ns=namespace)

    def collection_template(self) -> str:
        """The namespaced collection's path with ``{ns}`` (as in :data:`CHILD_COLLECTIONS`)."""

        return f"/apis/{self.group}/{self.version}/namespaces/{{ns}}/{self.plural}"


@dataclass(frozen=True)
class Layout:
    """Where one run's resources go. By default every one in one namespace, which the operator
    alone watches (``-n NS``). With ``--per-namespace N``: ``N`` to a namespace, in as many as it
    takes, and the operator watches every namespace (the chart's default, ``watchNamespaces: []``).
    The layout decides the control plane's work, not only the operator's: the endpoint and
    disruption controllers match each pod against every Service and PodDisruptionBudget of its
    namespace, so with all in one namespace their work grows with the square of the count."""

    namespaces: tuple[str, ...]
    #: Resources to a namespace; 0: all in the one namespace.
    per_namespace: int = 0

    @property
    def every_namespace(self) -> bool:
        """Whether the operator watches every namespace (and the bench's watches are cluster-wide)."""

        return self.per_namespace > 0

    def namespace_of(self, index: int) -> str:
        """The namespace of the resource with this index (0-based, in the order of the names)."""

        return self.namespaces[index // self.per_namespace if self.per_namespace else 0]

    def path(self, template: str) -> str:
        """A collection to list and watch: the one namespace's, or the whole cluster's."""

        if self.every_namespace:
            return template.replace("/namespaces/{ns}", "")
        return template.format(ns=self.namespaces[0])

    def holds(self, metadata: Mapping[str, Any]) -> bool:
        """Whether an object seen by a cluster-wide watch is in one of this run's namespaces."""

        return not self.every_namespace or metadata.get("namespace") in self.namespaces

    def describe(self, count: int) -> str:
        if not self.every_namespace:
            return f"namespace {self.namespaces[0]}"
        return (f"{len(self.namespaces)} namespaces of {self.per_namespace} ({self.namespaces[0]}, ...), "
                "the operator watching every namespace")


def namespace_count(count: int, per_namespace: int) -> int:
    """How many namespaces ``count`` resources take at ``per_namespace`` each (0: all in one)."""

    return -(-count // per_namespace) if per_namespace else 1


def install_crd(api: Api, crd: Crd, timeout_s: float = 60) -> None:
    name = crd.body["metadata"]["name"]
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    api.apply(path, crd.body)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        conditions = (api.request("GET", path).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        time.sleep(0.5)
    raise RuntimeError(f"CRD {name} not Established within {timeout_s:.0f} s")


# ------------------------------------------------------------------------------------- tracking


class Tracker:
    """First-seen times (monotonic) of each resource's children and status, from watches."""

    def __init__(self, names: Sequence[str], kind: str) -> None:
        self.names = set(names)
        self.kind = kind
        self.applied: dict[str, float] = {}
        self.children: dict[tuple[str, str], float] = {}  # (child kind, owner name) -> first seen
        self.status: dict[str, float] = {}
        self._lock = threading.Lock()
        self.done = threading.Event()

    def expected_children(self) -> int:
        return len(self.names) * len(CHILD_COLLECTIONS)

    def child(self, child_kind: str, metadata: Mapping[str, Any]) -> None:
        now = time.monotonic()
        for ref in metadata.get("ownerReferences") or []:
            if ref.get("kind") == self.kind and ref.get("name") in self.names:
                with self._lock:
                    self.children.setdefault((child_kind, ref["name"]), now)
                self._check()

    def resource(self, obj: Mapping[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name in self.names and (obj.get("status") or {}).get("observedGeneration") is not None:
            with self._lock:
                self.status.setdefault(name, time.monotonic())
            self._check()

    def _check(self) -> None:
        if len(self.status) == len(self.names) and len(self.children) == self.expected_children():
            self.done.set()


class Watcher(threading.Thread):
    """List, then watch, one collection until stopped; relists only when the watch expires."""

    WATCH_TIMEOUT_S = 20  # a stopped watcher ends within this

    def __init__(self, api: Api, path: str, accept_list: str, accept_watch: str, handle: Any) -> None:
        super().__init__(daemon=True, name=f"watch {path}")
        self.api, self.path, self.accept_list, self.accept_watch, self.handle = (
            api, path, accept_list, accept_watch, handle)
        self.stopped = threading.Event()
        self.ready = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        version: str | None = None  # None: (re)list first
        while not self.stopped.is_set():
            try:
                if version is None:
                    listing = self.api.request("GET", self.path, accept=self.accept_list)
                    for item in listing.get("items") or []:
                        self.handle(item)
                    self.ready.set()
                    version = listing["metadata"]["resourceVersion"]
                # A watch that ends goes on from the last version seen; only an expired one relists.
                for event in self.api.watch(self.path, version, self.accept_watch, self.WATCH_TIMEOUT_S):
                    if event["type"] == "ERROR":
                        version = None  # 410 Gone
                        break
                    version = event["object"]["metadata"].get("resourceVersion") or version
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.handle(event["object"])
                    if self.stopped.is_set():
                        return
            except Exception as error:  # noqa: BLE001 - keep watching; the run's timeout decides
                self.error = f"{self.path}: {error}"
                version = None
                time.sleep(1)


# ------------------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OperatorProcess:
    """One operator subprocess (own session), its liveness endpoint and its process tree's usage."""

    STOP_GRACE_S = 30

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.name, self.argv, self.env, self.log_path = name, list(argv), dict(env), log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.peak_rss = 0
        self._sampler: threading.Thread | None = None
        self._sampling = threading.Event()

    def start(self, timeout_s: float) -> None:
        import urllib3

        self.port = free_port()
        argv = [*self.argv, "--liveness", f"http://127.0.0.1:{self.port}/healthz"]
        with self.log_path.open("ab") as log:
            log.write(f"\n==== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.peak_rss = 0
        self._sampling.set()
        self._sampler = threading.Thread(target=self._sample, daemon=True, name=f"rss {self.name}")
        self._sampler.start()
        http = urllib3.PoolManager()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} operator exited with {self.proc.returncode} at start; "
                                   f"log {self.log_path}:\n{self.log_tail()}")
            try:
                url = f"http://127.0.0.1:{self.port}/healthz"
                if http.request("GET", url, timeout=2, retries=False).status == 200:
                    return
            except urllib3.exceptions.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} operator not live within {timeout_s:.0f} s; log {self.log_path}")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _tree(self) -> list[Any]:
        import psutil

        try:
            root = psutil.Process(self.proc.pid)  # type: ignore[union-attr]
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def rss(self) -> int:
        import psutil

        total = 0
        for proc in self._tree():
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total

    def cpu_s(self) -> float:
        import psutil

        total = 0.0
        for proc in self._tree():
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
        return total

    def _sample(self) -> None:
        while self._sampling.is_set() and self.proc is not None and self.proc.poll() is None:
            self.peak_rss = max(self.peak_rss, self.rss())
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is None:
            return
        self._sampling.clear()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its session: anything it left behind
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None


def mb(value: int) -> float:
    return round(value / 1e6, 1)


# ------------------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class RunContext:
    """What every operator's run shares."""

    api: Api
    crd: Crd
    example: dict[str, Any]
    count: int
    workers: int
    resync_s: float
    #: The idle window (s): two resync intervals + 5 s unless ``--idle-window`` says otherwise.
    idle_window_s: float
    converge_timeout_s: float
    restart_quiet_s: float
    restart_timeout_s: float
    kubeconfig: str
    log_dir: Path
    #: The started pack's ``run`` directory (its processes' pid files); None for ``--kubeconfig``.
    plane_run_dir: Path | None = None
    #: Resources to a namespace (``--per-namespace``); 0: all in one namespace (:class:`Layout`).
    per_namespace: int = 0
    #: ``--readable-runtimes``: the stand-in answering every pod IP's runtime port.
    standin: StandIn | None = None


#: The spec's pod resources here: small enough that one pod per resource fits the nodes'
#: 110-pod limit (kwok pods use nothing), so every pod runs and an idle window is idle.
BENCH_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
#: Seconds without one more resource Ready after which the bench stops waiting for all of them.
READY_STALL_S = 300.0
#: Pods per fake node (kwok's nodes allow 110; some room for the pods of other workloads).
PODS_PER_NODE = 100


def plane_cpu_s(run_dir: Path | None) -> dict[str, float]:
    """CPU seconds so far of each process with a pid file in ``run_dir`` (the pack's control
    plane), by the file's name; {} without one. Where the operator's converge time goes on a
    machine it shares with the control plane is read from these."""

    import psutil

    cpu: dict[str, float] = {}
    for pid_file in sorted(run_dir.glob("*.pid")) if run_dir is not None else ():
        try:
            times = psutil.Process(int(pid_file.read_text().split()[0])).cpu_times()
        except (OSError, ValueError, IndexError, psutil.Error):
            continue  # a process that ended or a pid file being written: not counted
        cpu[pid_file.stem] = times.user + times.system
    return cpu


def resource_body(ctx: RunContext, name: str, namespace: str) -> dict[str, Any]:
    spec = {**ctx.example["spec"], "resources": BENCH_RESOURCES}
    return {"apiVersion": f"{ctx.crd.group}/{ctx.crd.version}", "kind": ctx.crd.kind,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def fit_the_cluster(api: Api, count: int) -> int:
    """Add fake nodes (copies of kwok's npu-node-0) until ``count`` pods fit; the node count."""

    nodes = api.request("GET", "/api/v1/nodes")["items"]
    template = next((n for n in nodes if n["metadata"]["name"] == "npu-node-0"), None)
    needed = -(-count // PODS_PER_NODE)
    if template is None or len(nodes) >= needed:
        return len(nodes)
    for index in range(len(nodes), needed):
        node = json.loads(json.dumps(template))
        name = f"bench-node-{index}"
        node["metadata"] = {key: value for key, value in node["metadata"].items()
                            if key in ("labels", "annotations")}
        node["metadata"]["name"] = name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        api.request("POST", "/api/v1/nodes", node, ok=(201, 409))
    log(f"cluster: {needed} nodes, so that {count} pods fit")
    return needed


def operator_command(name: str, namespace: str | None, ascend_llm: str, baseline: str | None = None) -> list[str]:
    """The operator's command line: watching ``namespace``, or every namespace when None."""

    if name in PROJECT:
        cli = baseline if name == BASELINE else ascend_llm
        if not cli:
            raise ValueError(f"the {BASELINE} operator needs --baseline (its CLI)")
        # Without -n (and without ASCEND_LLM_OPERATOR_NAMESPACES, which operator_env drops) the
        # project's operator watches every namespace.
        return [cli, "operator", "run", "--standalone", *(["-n", namespace] if namespace else [])]
    scope = ["-n", namespace] if namespace else ["--all-namespaces"]
    return [sys.executable, "-m", "kopf", "run", "--standalone", *scope, str(MINIMAL_OPERATOR)]


def operator_env(ctx: RunContext, name: str = OURS) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_LLM_OPERATOR_")}
    env.pop("MINIMAL_OPERATOR_SAME_CHILDREN", None)
    if name == MINIMAL_SAME:
        env["MINIMAL_OPERATOR_SAME_CHILDREN"] = "1"
    env["KUBECONFIG"] = ctx.kubeconfig
    env["ASCEND_LLM_OPERATOR_RESYNC_INTERVAL_S"] = f"{ctx.resync_s:g}"
    # The spec's hostPath model (examples/cpu-tiny.yaml), allowed as an administrator would.
    env["ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES"] = "/models"
    if ctx.standin is not None and name in PROJECT:  # read pod IPs as in a cluster (the stand-in answers)
        env["ASCEND_LLM_OPERATOR_STATE_READ"] = "podIP"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def create_namespace(api: Api, prefix: str, name: str | None = None) -> str:
    """Create ``name`` (default: the prefix and a random suffix) and wait for its ServiceAccount."""

    name = name or f"{prefix}-{uuid.uuid4().hex[:6]}"
    api.request("POST", "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # pods are refused until the default ServiceAccount exists
        found = api.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts"
                                   "?fieldSelector=metadata.name%3Ddefault")
        if found.get("items"):
            break
        time.sleep(0.2)
    return name


def delete_namespace(ctx: RunContext, namespace: str, timeout_s: float = 900) -> str | None:
    """Delete the namespace (finalizers left by a stopped operator removed first); wait until gone."""

    api = ctx.api
    listing = api.request("GET", ctx.crd.collection(namespace), accept=METADATA_ONLY)
    stuck = [item["metadata"]["name"] for item in listing.get("items") or []
             if item["metadata"].get("finalizers")]

    def unblock(name: str) -> None:
        api.request("PATCH", f"{ctx.crd.collection(namespace)}/{name}", {"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json", ok=(200, 404))

    with concurrent.futures.ThreadPoolExecutor(ctx.workers) as pool:
        list(pool.map(unblock, stuck))
    api.request("DELETE", f"/api/v1/namespaces/{namespace}", ok=(200, 202, 404))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            api.request("GET", f"/api/v1/namespaces/{namespace}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        time.sleep(2)
    return f"namespace {namespace} still there {timeout_s:.0f} s after its delete"


class IdleCheck(NamedTuple):
    """When a restarted operator counts as idle again: no write and at most ``cpu_limit`` cores,
    both over the last ``quiet_s`` (which spans at least one resync interval, so periodic work is
    averaged, not mistaken for start-up work), and not before ``min_s``. An operator that writes
    nothing on a resume may still be resuming at a CPU rate near its resyncs'; the floor (the
    first start's converge time) keeps such a window from ending before the resumes do."""

    quiet_s: float
    cpu_limit: float
    min_s: float = 0.0


def idle_since(samples: Sequence[tuple[float, int, float]], check: IdleCheck) -> bool:
    """Whether the trailing ``check.quiet_s`` of (time, writes so far, CPU seconds) samples is idle."""

    if not samples or samples[-1][0] - samples[0][0] < max(check.quiet_s, check.min_s):
        return False
    now, writes, cpu = samples[-1]
    start = next(sample for sample in reversed(samples) if now - sample[0] >= check.quiet_s)
    return writes == start[1] and (cpu - start[2]) / (now - start[0]) <= check.cpu_limit


def wait_idle(api: Api, op: OperatorProcess, before: Counter[WriteKey], check: IdleCheck, timeout_s: float,
              poll_s: float = 3.0) -> tuple[bool, float, Counter[WriteKey]]:
    """Poll writes and the operator's CPU until :func:`idle_since` holds, or ``timeout_s`` past the
    floor; returns whether it went idle, the window and the requests in it."""

    start = time.monotonic()
    requests = request_delta(before, api.metrics_requests())
    samples = [(start, sum(only(requests, WRITE_VERBS).values()), op.cpu_s())]
    while time.monotonic() - start < check.min_s + timeout_s:
        time.sleep(poll_s)
        requests = request_delta(before, api.metrics_requests())
        samples.append((time.monotonic(), sum(only(requests, WRITE_VERBS).values()), op.cpu_s()))
        if idle_since(samples, check):
            return True, samples[-1][0] - start, requests
    return False, time.monotonic() - start, requests


def create_layout(ctx: RunContext, prefix: str) -> Layout:
    """The run's namespaces, made (and their ServiceAccounts there) before the operator starts."""

    if not ctx.per_namespace:
        return Layout((create_namespace(ctx.api, prefix),))
    tag = f"{prefix}-{uuid.uuid4().hex[:6]}"
    names = [f"{tag}-{index:03d}" for index in range(namespace_count(ctx.count, ctx.per_namespace))]
    with concurrent.futures.ThreadPoolExecutor(ctx.workers) as pool:
        list(pool.map(lambda name: create_namespace(ctx.api, prefix, name), names))
    return Layout(tuple(names), ctx.per_namespace)


class OperatorRun:
    """One operator's run in its own namespaces (:class:`Layout`): converge, idle, restart, cleanup."""

    def __init__(self, ctx: RunContext, name: str, ascend_llm: str, log_suffix: str = "",
                 delete_namespace: bool = True, baseline: str | None = None) -> None:
        self.ctx, self.api = ctx, ctx.api
        self.delete_namespace = delete_namespace
        self.layout = create_layout(ctx, f"bench-{name}")
        self.result = OperatorResult(name=name, count=ctx.count, namespaces=len(self.layout.namespaces))
        self.names = [f"llm-{index:04d}" for index in range(ctx.count)]
        self.namespace_of = {name: self.layout.namespace_of(index) for index, name in enumerate(self.names)}
        self.tracker = Tracker(self.names, ctx.crd.kind)
        self.cpu_start = 0.0
        self.plane_cpu_start: dict[str, float] = {}
        scope = None if self.layout.every_namespace else self.layout.namespaces[0]
        self.op = OperatorProcess(name, operator_command(name, scope, ascend_llm, baseline), operator_env(ctx, name),
                                  ctx.log_dir / f"{name}-operator{log_suffix}.log")
        self.watchers = [
            Watcher(self.api, self.layout.path(path), METADATA_ONLY, METADATA_ONLY_WATCH,
                    lambda obj, kind=kind: self.seen_child(kind, obj))
            for kind, path in CHILD_COLLECTIONS.items()
        ]
        self.watchers.append(Watcher(self.api, self.layout.path(ctx.crd.collection_template()), "application/json",
                                     "application/json", self.seen_resource))

    def seen_child(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A child from a watch; one outside the run's namespaces (a cluster-wide watch) is not counted."""

        if self.layout.holds(obj["metadata"]):
            self.tracker.child(kind, obj["metadata"])

    def seen_resource(self, obj: Mapping[str, Any]) -> None:
        if self.layout.holds(obj["metadata"]):
            self.tracker.resource(obj)

    def run(self, full: bool = True) -> OperatorResult:
        """Converge, then (``full``) the idle window and the restart; then clean up."""

        result = self.result
        log(f"{result.name}: {self.layout.describe(self.ctx.count)}, {self.ctx.count} resources, "
            f"log {self.op.log_path}")
        try:
            self.converge()
            if full:
                self.idle()
                self.restart()
        except Exception as error:  # noqa: BLE001 - the run is reported with what it measured
            result.errors.append(f"{type(error).__name__}: {error}")
            log(f"{result.name}: ERROR {error}")
        finally:
            self.cleanup()
        return result

    def converge(self) -> None:
        ctx, result, tracker = self.ctx, self.result, self.tracker
        for watcher in self.watchers:
            watcher.start()
        for watcher in self.watchers:
            if not watcher.ready.wait(30):
                raise RuntimeError(f"watch of {watcher.path} not started within 30 s: {watcher.error}")
        self.op.start(timeout_s=120)
        self.cpu_start = self.op.cpu_s()
        self.plane_cpu_start = plane_cpu_s(ctx.plane_run_dir)
        writes_start = self.api.metrics_writes()
        self._save_metrics("converge-start")
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(ctx.workers) as pool:
            for future in [pool.submit(self._apply, name) for name in self.names]:
                try:
                    future.result()
                except Exception as error:  # noqa: BLE001 - counted and reported
                    result.errors.append(f"apply: {error}")
        result.apply_s = round(time.monotonic() - t0, 2)
        result.applied = len(tracker.applied)
        log(f"{result.name}: {result.applied} applied in {result.apply_s} s; waiting for children and status")
        try:
            converged = tracker.done.wait(ctx.converge_timeout_s)
        except KeyboardInterrupt as stop:  # stopped while converging: how far it got is reported
            self._converge_result(t0, writes_start, converged=False, stopped=True)
            result.errors.append(f"stopped ({stop}) {time.monotonic() - t0:.0f} s after the first apply: "
                                 f"{result.children_missing} children and {result.status_missing} statuses missing")
            raise
        self._converge_result(t0, writes_start, converged)

    def _converge_result(self, t0: float, writes_start: Counter[WriteKey], converged: bool,
                         stopped: bool = False) -> None:
        ctx, result, tracker = self.ctx, self.result, self.tracker
        if converged:
            result.converge_cpu_s = round(self.op.cpu_s() - self.cpu_start, 1)
            result.converge_control_plane_cpu_s = {
                name: round(seconds - self.plane_cpu_start[name], 1)
                for name, seconds in plane_cpu_s(ctx.plane_run_dir).items() if name in self.plane_cpu_start}
            self._save_metrics("converge-end")
        result.rss_peak_mb = mb(self.op.peak_rss)
        for watcher in self.watchers:
            watcher.stopped.set()
        result.children_missing = tracker.expected_children() - len(tracker.children)
        result.status_missing = len(self.names) - len(tracker.status)
        if tracker.children and not result.children_missing:
            result.converge_children_s = round(max(tracker.children.values()) - t0, 2)
        if tracker.status and not result.status_missing:
            result.converge_status_s = round(max(tracker.status.values()) - t0, 2)
        applied = tracker.applied
        result.status_lag = lag_stats([seen - applied[n] for n, seen in tracker.status.items()
                                       if n in applied])
        last_child: dict[str, float] = {}
        for (_, owner), seen in tracker.children.items():
            last_child[owner] = max(last_child.get(owner, 0.0), seen)
        result.children_lag = lag_stats([seen - applied[n] for n, seen in last_child.items() if n in applied])
        # The operator's: less the benchmark's own applies (one request each).
        writes = request_delta(writes_start, self.api.metrics_writes())
        result.converge_writes = sum(writes.values()) - len(self.names)
        if not converged and not stopped:
            errors = [w.error for w in self.watchers if w.error]
            result.errors.append(
                f"not converged within {ctx.converge_timeout_s:.0f} s: {result.children_missing} children "
                f"and {result.status_missing} statuses missing"
                + (f"; watch errors: {errors}" if errors else ""))
        log(f"{result.name}: children {result.converge_children_s} s, status {result.converge_status_s} s, "
            f"operator CPU {result.converge_cpu_s} s, RSS peak {mb(self.op.peak_rss)} MB")

    def _save_metrics(self, tag: str) -> None:
        """The API server's whole /metrics text into the log folder: every client's requests and
        their latency, to see where the control plane's share of the converge time went."""

        text = self.api.request("GET", "/metrics", accept="text/plain")
        (self.ctx.log_dir / f"{self.result.name}-metrics-{tag}.txt").write_text(text)

    def _apply(self, name: str) -> None:
        namespace = self.namespace_of[name]
        self.api.apply(f"{self.ctx.crd.collection(namespace)}/{name}", resource_body(self.ctx, name, namespace))
        self.tracker.applied[name] = time.monotonic()

    def idle(self) -> None:
        """Let the first resync after the last change pass, then count over two intervals."""

        ctx, result, op = self.ctx, self.result, self.op
        # The cluster settles first: kwok readies 1,000 pods over minutes, and a status that
        # follows its pods changes until then (a write that is not idle). Only the project's
        # operator reports a phase; the minimal one is settled once its status exists.
        if result.name in PROJECT:
            result.ready = self._wait_all_ready()
        log(f"{result.name}: settling for {ctx.resync_s + 10:g} s")
        time.sleep(ctx.resync_s + 10)
        window = ctx.idle_window_s
        before, cpu_before = self.api.metrics_requests(), op.cpu_s()
        standin = ctx.standin
        answers_before, standin_before = (standin.answers(), standin.cpu_s()) if standin else (None, 0.0)
        time.sleep(window)
        requests = request_delta(before, self.api.metrics_requests())
        if standin is not None and answers_before is not None:
            result.idle_state_answers = dict(standin.answers() - answers_before)
            result.idle_standin_cpu_cores = round((standin.cpu_s() - standin_before) / window, 3)
        idle = only(requests, WRITE_VERBS)
        result.idle_reads = sum(only(requests, READ_VERBS).values())
        result.idle_proxy_reads = sum(only(requests, PROXY_VERBS).values())
        result.idle_cpu_cores = round((op.cpu_s() - cpu_before) / window, 3)
        result.idle_window_s = window
        result.idle_writes = sum(idle.values())
        result.idle_writes_per_resync = round(result.idle_writes / (window / ctx.resync_s), 2)
        result.idle_writes_by_kind = {key.label(): value for key, value in idle.items()}
        result.rss_peak_mb = mb(op.peak_rss)
        result.rss_end_mb = mb(op.rss())
        result.cpu_s = round(op.cpu_s() - self.cpu_start, 1)
        log(f"{result.name}: {result.idle_writes} writes in {window:g} s idle, {result.idle_cpu_cores} cores; "
            f"RSS peak {result.rss_peak_mb} MB; CPU since start {result.cpu_s} s")

    def _wait_all_ready(self, stall_s: float = READY_STALL_S, poll_s: float | None = None) -> int:
        """Wait until every resource's status says Ready, for as long as the count keeps rising:
        give up after ``stall_s`` without a new one (or the converge timeout in all); the count Ready.

        How long it takes is the control plane's pace, not the operator's: at 10,000 resources
        here the controller manager made the last ReplicaSets about half an hour after the
        operator's last status (bench/README.md), past any fixed budget sized from 1,000."""

        poll_s = poll_s if poll_s is not None else (2 if self.ctx.count <= 1000 else 10)
        collection = self.layout.path(self.ctx.crd.collection_template())
        started = last_rise = time.monotonic()
        ready = best = 0
        while True:
            items = self.api.request("GET", collection)["items"]
            ready = sum(1 for item in items if self.layout.holds(item["metadata"])
                        and (item.get("status") or {}).get("phase") == "Ready")
            now = time.monotonic()
            if ready >= self.ctx.count:
                log(f"{self.result.name}: all {ready} resources Ready ({now - started:.0f} s after the last status)")
                return ready
            if ready > best:
                best, last_rise = ready, now
            if now - last_rise >= stall_s or now - started >= self.ctx.converge_timeout_s:
                log(f"{self.result.name}: only {ready} of {self.ctx.count} Ready after {now - started:.0f} s "
                    f"({now - last_rise:.0f} s without a new one)")
                return ready
            time.sleep(poll_s)

    def restart(self) -> None:
        ctx, result, op = self.ctx, self.result, self.op
        op.stop()
        before = self.api.metrics_requests()
        op.start(timeout_s=120)
        # Idle again: CPU back near what the idle window used (its resyncs), plus 5 % of a core.
        check = IdleCheck(max(ctx.restart_quiet_s, ctx.resync_s + 5), 0.05 + 1.5 * result.idle_cpu_cores,
                          min_s=result.converge_status_s or 0.0)
        started = time.monotonic()
        try:
            idle_again, waited, requests = wait_idle(self.api, op, before, check, ctx.restart_timeout_s)
        except KeyboardInterrupt as stop:  # stopped in the window: what it saw so far is reported, not idle
            waited = time.monotonic() - started
            self._restart_result(False, waited, request_delta(before, self.api.metrics_requests()))
            result.errors.append(f"stopped ({stop}) {waited:.0f} s into the restart window")
            raise
        self._restart_result(idle_again, waited, requests)

    def _restart_result(self, idle_again: bool, waited: float, requests: Counter[WriteKey]) -> None:
        result, op = self.result, self.op
        restart = only(requests, WRITE_VERBS)
        result.restart_reads = sum(only(requests, READ_VERBS).values())
        result.restart_proxy_reads = sum(only(requests, PROXY_VERBS).values())
        result.restart_idle = idle_again
        result.restart_window_s = round(waited, 1)
        result.restart_writes = sum(restart.values())
        result.restart_writes_by_kind = {key.label(): value for key, value in restart.items()}
        result.rss_restart_peak_mb = mb(op.peak_rss)
        log(f"{result.name}: {result.restart_writes} writes after the restart "
            f"({waited:.0f} s, idle={idle_again})")

    def cleanup(self) -> None:
        for watcher in self.watchers:
            watcher.stopped.set()
        self.op.stop()
        if not self.delete_namespace:  # the control plane is wiped before the next run
            return
        for namespace in self.layout.namespaces:
            log(f"{self.result.name}: deleting namespace {namespace}")
            try:
                problem = delete_namespace(self.ctx, namespace)
            except Exception as error:  # noqa: BLE001
                problem = f"cleanup of {namespace}: {error}"
            if problem:
                self.result.errors.append(problem)


# ------------------------------------------------------------------------------------- main


class ControlPlane:
    """The pack's control plane as this run starts it: every start is recorded, so that
    :meth:`stop` (run from ``main``'s ``finally``, whatever ended the run) stops what was started,
    also after an ``up.sh`` that failed half-way."""

    def __init__(self, pack: Path, workdir: Path, port_base: str) -> None:
        self.pack, self.workdir, self.port_base = pack, workdir, port_base
        self.started = False

    def start(self, wipe: bool = False) -> str:
        """Start the pack (``wipe``: stop it and delete its state first, so the run starts on an
        empty cluster); returns the kubeconfig path."""

        pack, workdir = self.pack, self.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        if wipe:
            down = subprocess.run(["bash", str(pack / "down.sh"), str(workdir), "--wipe"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
            if down.returncode != 0:
                raise RuntimeError(f"{pack}/down.sh --wipe failed (exit {down.returncode}):\n{down.stderr[-4000:]}")
        self.started = True
        up = subprocess.run(["bash", str(pack / "up.sh"), str(workdir), "--port-base", self.port_base],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        if up.returncode != 0:
            raise RuntimeError(f"{pack}/up.sh failed (exit {up.returncode}):\n{up.stderr[-4000:]}")
        line = up.stdout.strip().splitlines()[-1]
        if not line.startswith("export KUBECONFIG="):
            raise RuntimeError(f"{pack}/up.sh printed no KUBECONFIG line: {line!r}")
        return line.split("=", 1)[1]

    def stop(self) -> str | None:
        """Stop the control plane if this run started one (its state stays: ``down.sh`` without
        ``--wipe``); a message when ``down.sh`` failed."""

        if not self.started:
            return None
        self.started = False
        log(f"cluster: stopping the control plane of {self.workdir}")
        # Signals are held off meanwhile: a second Ctrl-C must not leave the pack half-stopped.
        held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
        try:
            down = subprocess.run(["bash", str(self.pack / "down.sh"), str(self.workdir)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=180)
        except (OSError, subprocess.SubprocessError) as error:
            return f"{self.pack}/down.sh: {error}"
        finally:
            for sig, handler in held.items():
                signal.signal(sig, handler)
        if down.returncode != 0:
            return f"{self.pack}/down.sh failed (exit {down.returncode}): {down.stderr[-2000:]}"
        return None


#: Signals that end a run like Ctrl-C: the operators and the control plane are stopped first.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000,
                        help="Resources per operator (default %(default)s).")
    parser.add_argument("--operators", default=f"{OURS},{MINIMAL_SAME},{MINIMAL}",
                        help="Which to run, in this order (default %(default)s).")
    parser.add_argument("--resync-interval", type=float, default=30.0,
                        help="ASCEND_LLM_OPERATOR_RESYNC_INTERVAL_S for the project's operator, and the unit "
                             "of the idle window (default %(default)s s).")
    parser.add_argument("--idle-window", type=float, default=None,
                        help="Seconds of the idle window (default: two resync intervals + 5 s). Longer than "
                             "the operator's longest retry of an unreadable runtime (300 s), it holds a "
                             "whole cycle of those reads instead of the quiet start of one.")
    parser.add_argument("--workers", type=int, default=16, help="Threads that apply the resources.")
    parser.add_argument("--per-namespace", type=int, default=0, metavar="N",
                        help="Spread the resources over namespaces of N each, the operator watching every "
                             "namespace (the chart's default). Default: all in one namespace, which the "
                             "operator alone watches.")
    parser.add_argument("--keep-cluster", action="store_true",
                        help="Run every operator on the same control plane (default: the pack is wiped and "
                             "started again before each run, so no run inherits another's deleted objects; "
                             "a --kubeconfig cluster is always kept).")
    parser.add_argument("--rounds", type=int, default=1,
                        help="Converge rounds (default %(default)s). The first runs every phase; each further "
                             "one only converges, in fresh namespaces, in the reverse order of the round before "
                             "(ours, minimal; minimal, ours; ...) so that a drift of the machine's speed "
                             "cancels. The converge targets are the median of the rounds' ratios.")
    parser.add_argument("--readable-runtimes", action="store_true",
                        help="Every pod's runtime port answers (bench/readable_runtimes.py; needs root for "
                             "its route) and the project's operator reads pod IPs directly, as in a cluster.")
    parser.add_argument("--converge-only", action="store_true",
                        help="Measure the converge only: no idle window, no restart (a diagnosis at large counts; "
                             "their targets are then not judged).")
    parser.add_argument("--converge-timeout", type=float, default=900.0,
                        help="Seconds (default %(default)s).")
    parser.add_argument("--restart-quiet", type=float, default=15.0,
                        help="Idle after a restart: this long (at least a resync interval + 5 s) without a "
                             "write, with CPU near the idle window's (s; default %(default)s).")
    parser.add_argument("--restart-timeout", type=float, default=600.0,
                        help="Seconds beyond the first start's converge time (default %(default)s).")
    parser.add_argument("--pack", type=Path,
                        default=Path(os.environ.get("ASCEND_LLM_K8S_PACK") or ROOT.parent / "shared" / "k8s"),
                        help="The control-plane pack (default ../shared/k8s or ASCEND_LLM_K8S_PACK).")
    parser.add_argument("--workdir", type=Path,
                        default=Path(os.environ.get("ASCEND_LLM_K8S_WORKDIR") or ROOT / ".cache" / "k8s"),
                        help="Its WORKDIR (default .cache/k8s or ASCEND_LLM_K8S_WORKDIR).")
    parser.add_argument("--port-base", default=os.environ.get("ASCEND_LLM_K8S_PORT_BASE", "20000"),
                        help="Its --port-base (default 20000 or ASCEND_LLM_K8S_PORT_BASE).")
    parser.add_argument("--kubeconfig", default=None,
                        help="Use this cluster (admin rights: /metrics, CRDs) instead of starting the pack.")
    parser.add_argument("--ascend-llm", default=str(Path(sys.executable).parent / "ascend-llm"),
                        help="The project's CLI (default: beside this Python).")
    parser.add_argument("--baseline", default=None,
                        help=f"The project's CLI from another checkout, run as the operator '{BASELINE}' "
                             "(a before/after comparison in one run; not judged).")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="Operator logs (default: a temporary folder).")
    parser.add_argument("--out", type=Path, default=None, help="Write the results as JSON here.")
    parser.add_argument("--reread", type=Path, default=None, metavar="FILE",
                        help="Print the tables of a saved --out JSON again, and run nothing.")
    parser.add_argument("--linear-from", type=Path, default=None,
                        help="The --out JSON of a run at fewer resources: judge that the project's operator's "
                             "converge time grew at most linearly from it (issue 24: 1,000 to 10,000).")
    args = parser.parse_args(argv)
    args.operators = [name.strip() for name in args.operators.split(",") if name.strip()]
    unknown = [name for name in args.operators if name not in OPERATORS]
    if unknown or not args.operators:
        parser.error(f"--operators: {unknown or 'empty'}; choose from {', '.join(OPERATORS)}")
    if BASELINE in args.operators and not args.baseline:
        parser.error(f"--operators {BASELINE} needs --baseline CLI")
    if args.count < 1:
        parser.error("--count must be at least 1")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.per_namespace < 0:
        parser.error("--per-namespace must be at least 1 (or 0: all in one namespace)")
    if args.linear_from is not None:
        try:
            args.linear_from_report = json.loads(args.linear_from.read_text())
        except (OSError, ValueError) as error:
            parser.error(f"--linear-from: {error}")
        if int(args.linear_from_report.get("count", 0)) >= args.count:
            parser.error(f"--linear-from: its run had {args.linear_from_report.get('count')} resources, "
                         f"not fewer than --count {args.count}")
        earlier = int(args.linear_from_report.get("per_namespace") or 0)
        if earlier != args.per_namespace:  # the control plane's work differs with the layout
            parser.error(f"--linear-from: its run had --per-namespace {earlier} (0: all in one namespace), "
                         f"this one {args.per_namespace}; compare runs of one layout")
    if args.resync_interval <= 0:
        parser.error("--resync-interval must be positive")
    if args.idle_window is not None and args.idle_window <= 0:
        parser.error("--idle-window must be positive")
    return args


def git_commit() -> str | None:
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    return found.stdout.strip() or None


def _interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # the runs' cleanup (operator stop, namespace delete) runs


def reread(bench: str, path: Path, format_report: Callable[[Mapping[str, Any]], str]) -> int:
    """``--reread``: print a saved ``--out`` report's tables again; 0, or 2 for a file that is not one."""

    try:
        print(format_report(json.loads(path.read_text(encoding="utf-8"))))
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"{bench}: --reread {path}: not a saved --out report ({error!r})", file=sys.stderr)
        return 2
    return 0


@contextlib.contextmanager
def plane_stopped_at_exit(plane: ControlPlane, bench: str) -> Iterator[ControlPlane]:
    """Meanwhile the signals that end a run (:data:`STOP_SIGNALS`) raise KeyboardInterrupt; at the
    end the plane is stopped however the run ended: a result, an error, Ctrl-C, SIGTERM."""

    handlers = {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS}
    try:
        yield plane
    finally:
        problem = plane.stop()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if problem:
            print(f"{bench}: {problem}", file=sys.stderr)


def prepare(args: argparse.Namespace, plane: ControlPlane, wipe: bool, log_dir: Path | None = None,
            standin: StandIn | None = None) -> RunContext:
    """The cluster (the pack started, ``wipe``: on empty state; or ``--kubeconfig``) with the CRD
    and enough nodes, and what every run shares."""

    kubeconfig = args.kubeconfig or plane.start(wipe=wipe)
    log_dir = log_dir or args.log_dir or Path(tempfile.mkdtemp(prefix="operator-scale-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    api = Api(kubeconfig, pool_size=args.workers + 8)
    crd = Crd.load(CRD_FILE)
    install_crd(api, crd)
    if not args.kubeconfig:
        fit_the_cluster(api, args.count)
    return RunContext(api=api, crd=crd, example=yaml.safe_load(EXAMPLE.read_text()), count=args.count,
                      workers=args.workers, resync_s=args.resync_interval,
                      idle_window_s=args.idle_window or 2 * args.resync_interval + 5,
                      converge_timeout_s=args.converge_timeout, restart_quiet_s=args.restart_quiet,
                      restart_timeout_s=args.restart_timeout, kubeconfig=kubeconfig, log_dir=log_dir,
                      plane_run_dir=None if args.kubeconfig else args.workdir / "run",
                      per_namespace=args.per_namespace, standin=standin)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.reread is not None:
        return reread("operator_scale", args.reread, format_report)
    with plane_stopped_at_exit(ControlPlane(args.pack, args.workdir, args.port_base), "operator_scale") as plane, \
            readable_runtimes(args) as standin:
        return _run(args, plane, standin)


@contextlib.contextmanager
def readable_runtimes(args: argparse.Namespace) -> Iterator[StandIn | None]:
    """``--readable-runtimes``: kwok's pod range routed here and the stand-in answering on the
    runtime port, both removed however the run ends; else nothing."""

    if not args.readable_runtimes:
        yield None
        return
    from ascend_runtime.config import DEFAULT_RUNTIME_PORT

    log_dir = args.log_dir or Path(tempfile.gettempdir())
    log_dir.mkdir(parents=True, exist_ok=True)
    standin = StandIn(DEFAULT_RUNTIME_PORT, free_port(), log_dir / "readable-runtimes.log")
    with local_route():
        try:
            standin.start()
            yield standin
        finally:
            standin.stop()


def _run(args: argparse.Namespace, plane: ControlPlane, standin: StandIn | None = None) -> int:
    fresh = not args.kubeconfig and not args.keep_cluster
    try:
        ctx = prepare(args, plane, wipe=fresh, standin=standin)
    except Exception as error:  # noqa: BLE001
        print(f"operator_scale: cannot start: {error}", file=sys.stderr)
        return 2
    started, load_start, commit = time.monotonic(), os.getloadavg(), git_commit()
    runs = [(name, 1) for name in args.operators]
    for index in range(1, args.rounds):
        runs += [(name, index + 1) for name in (reversed(args.operators) if index % 2 else args.operators)]
    results: dict[str, OperatorResult] = {}
    rounds: list[dict[str, OperatorResult]] = []
    stopped: KeyboardInterrupt | None = None
    for number, (name, round_no) in enumerate(runs):
        run: OperatorRun | None = None
        try:
            if fresh and number:
                log("cluster: wiped and started again for the next run")
                ctx = prepare(args, plane, wipe=True, log_dir=ctx.log_dir, standin=standin)
            suffix = f"-round{round_no}" if round_no > 1 else ""
            run = OperatorRun(ctx, name, args.ascend_llm, suffix, delete_namespace=not fresh,
                              baseline=args.baseline)
            result = run.run(full=round_no == 1 and not args.converge_only)
        except KeyboardInterrupt as stop:
            # Stopped (Ctrl-C, SIGTERM, SIGHUP): report what was measured up to here; no further run.
            stopped = stop
            if run is None:
                break
            result = run.result
            if not any(error.startswith("stopped") for error in result.errors):
                result.errors.append(f"stopped ({stop})")
            log(f"{name}: stopped ({stop}); reporting what was measured")
        if round_no == 1:
            results[name] = result
        else:
            if len(rounds) < round_no - 1:
                rounds.append({})
            rounds[round_no - 2][name] = result
        if stopped:
            break
    # The yardstick: the minimal operator making the same children when it ran, else the small ones.
    yardstick = MINIMAL_SAME if MINIMAL_SAME in results else MINIMAL
    targets = evaluate(results[OURS], results.get(yardstick), rounds, yardstick) if OURS in results else []
    small: list[Target] = []
    if OURS in results and yardstick != MINIMAL and MINIMAL in results:  # reported, not a target
        small = [t for t in evaluate(results[OURS], results[MINIMAL], rounds, MINIMAL) if t.name.startswith("converge")]
    grown: list[Target] = []  # the minimal operator's growth: the control plane's, not a target

    def status_s(name: str) -> list[float | None]:
        return [results[name].converge_status_s, *(r[name].converge_status_s for r in rounds if name in r)]

    if OURS in results and args.linear_from is not None:
        targets += growth(status_s(OURS), args.count, args.linear_from_report)
        if yardstick in results and any(r.get(yardstick) for r in args.linear_from_report.get("rounds", [])):
            grown = growth(status_s(yardstick), args.count, args.linear_from_report, yardstick)
    failed = failures(targets)
    if stopped and not any("stopped" in reason for reason in failed):
        failed.append(f"stopped ({stopped})")
    for name in (BASELINE, MINIMAL, MINIMAL_SAME):
        if name in results:
            failed += [f"{name} operator: {error}" for error in results[name].errors]
    undecided = [f"{t.name}: {t.detail}" for t in targets if t.passed is None and t.value is not None]
    report = {
        "count": args.count, "per_namespace": args.per_namespace,
        "resync_interval_s": args.resync_interval, "workers": args.workers,
        "commit": commit, "cpus": os.cpu_count(),
        "load_average_start": load_start, "load_average_end": os.getloadavg(),
        "python": platform.python_version(), "wall_s": round(time.monotonic() - started, 1),
        # This script's own CPU (the operators are its children: not counted here).
        "bench_cpu_s": round(sum(getrusage(RUSAGE_SELF)[:2]), 1),
        "log_dir": str(ctx.log_dir), "operators": {name: asdict(results[name]) for name in OPERATORS if name in results},
        "rounds": [{name: {"converge_children_s": r.converge_children_s, "converge_status_s": r.converge_status_s,
                           "converge_cpu_s": r.converge_cpu_s,
                           "converge_writes": r.converge_writes, "errors": r.errors}
                    for name, r in one.items()} for one in [results, *rounds]],
        "targets": [asdict(target) for target in targets], "against_minimal": [asdict(t) for t in small],
        "yardstick_growth": [asdict(t) for t in grown],
        "failures": failed, "inconclusive": undecided, "passed": not failed and not undecided,
    }
    print(format_report(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failed else 3 if undecided else 0


if __name__ == "__main__":
    sys.exit(main())
