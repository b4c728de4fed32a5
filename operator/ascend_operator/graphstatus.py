"""``status.graph``, ``status.warmup`` and the ``GraphModeFallback`` and ``LeakSuspected`` conditions (pure).

From each replica's runtime state: the graph mode it runs and its fallbacks, its engine's
relaunches (and the kubelet's restarts of its container, from the pod), the mode new pods
start in (remembered after a deterministic capture or replay failure), the warmups' outcomes, and
the leaks and hangs the runtimes suspect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ascend_runtime.config import GraphMode, RuntimePhase, RuntimeState

from ascend_operator.api import GraphStatus, ReplicaGraphStatus, WarmupStatus
from ascend_operator.conditions import ConditionValue
from ascend_operator.replicastatus import Replica

_LADDER = tuple(GraphMode)
_MODES = frozenset(mode.value for mode in GraphMode)
#: The most warmup warnings the status keeps (one entry per distinct warning).
MAX_WARNINGS = 16


def graph_status(replicas: list[Replica], previous: Mapping[str, Any], remembered_for: str) -> GraphStatus:
    """``status.graph``: each replica's runtime report, the mode they run, the remembered mode."""

    reports = []
    for replica in replicas:
        state = replica.state
        reports.append(ReplicaGraphStatus(
            pod=replica.name, ready=bool(state.ready) if state else replica.ready,
            fallbacks=state.fallbacks if state else 0,
            phase=state.phase.value if state is not None else None,
            mode=state.mode if state is not None else None,
            fallback_reason=(state.fallback_reason or None) if state is not None else None,
            image=replica.image or None,
            # Set only when there are some: a quiet pod's report stays as it was.
            engine_restarts=(state.engine_restarts or None) if state is not None else None,
            container_restarts=replica.restarts or None,
            resumed=state.resumed if state is not None else None,
        ))
    modes = {r.mode.value for r in reports if r.mode is not None}
    mode = modes.pop() if len(modes) == 1 else "Mixed" if modes else None
    return GraphStatus(replicas=reports, fallbacks=sum(r.fallbacks for r in reports), mode=mode,
                       engine_restarts=sum(r.engine_restarts or 0 for r in reports) or None,
                       container_restarts=sum(r.container_restarts or 0 for r in reports) or None,
                       **_remembered_mode(replicas, previous.get("graph") or {}, remembered_for))


def _engine_versions(state: RuntimeState) -> str | None:
    versions = state.versions or {}
    parts = [f"{name} {versions[key]}" for key, name in (("vllm", "vllm"), ("vllmAscend", "vllm-ascend"))
             if versions.get(key)]
    return ", ".join(parts) or None


def _remembered_mode(replicas: list[Replica], previous_graph: Mapping[str, Any], remembered_for: str
                     ) -> dict[str, Any]:
    """The mode new pods start in, and why, as :class:`GraphStatus` fields; {} to start at the top
    of the ladder.

    Only a deterministic failure is remembered: a pod of the current spec that serves after
    falling back from a classified capture or replay failure (not an OOM, a crash or a hung
    capture, which may not recur). When several did, the mode furthest down the ladder works on
    all of them. A remembered mode is kept while the key matches (image, model, parallelism, the
    retry annotation) and no current pod runs other engine versions than it was seen with.
    """

    evidence = [r for r in replicas
                if r.updated and r.state is not None and r.state.mode is not None
                and r.state.phase == RuntimePhase.READY and r.state.fallbacks > 0
                and r.state.fallback_deterministic]
    if evidence:
        chosen = max(evidence, key=lambda r: _LADDER.index(r.state.mode))  # type: ignore[union-attr,arg-type]
        state = chosen.state
        assert state is not None and state.mode is not None
        return {"remembered_mode": state.mode, "remembered_for": remembered_for,
                "remembered_reason": f"pod {chosen.name}: {state.fallback_reason or 'graph failure'}",
                "remembered_versions": _engine_versions(state)}
    if not previous_graph.get("rememberedMode") or previous_graph.get("rememberedFor") != remembered_for:
        return {}
    if previous_graph["rememberedMode"] not in _MODES:
        return {}  # a mode this operator does not know: start from the top instead (as the reconcile does)
    seen_with = previous_graph.get("rememberedVersions")
    running = {_engine_versions(r.state) for r in replicas if r.updated and r.state is not None}
    if seen_with and any(v is not None and v != seen_with for v in running):
        return {}  # a new engine version: let new pods try the higher rungs again
    return {"remembered_mode": GraphMode(previous_graph["rememberedMode"]), "remembered_for": remembered_for,
            "remembered_reason": previous_graph.get("rememberedReason") or None,
            "remembered_versions": seen_with or None}


def warmup_status(replicas: list[Replica]) -> WarmupStatus:
    """``status.warmup``: the warmups' outcomes over the replicas, the newest one's duration, and
    what they skipped (each distinct warning once)."""

    counts = {"succeeded": 0, "failed": 0, "pending": 0}
    finished: list[tuple[str, float]] = []
    for replica in replicas:
        report = replica.state.warmup if replica.state is not None else None
        if report is None or report.outcome in ("pending", "running"):
            counts["pending"] += 1
            continue
        counts["failed" if report.outcome == "failed" else "succeeded"] += 1
        if report.seconds is not None and report.outcome != "skipped":
            finished.append((replica.created, report.seconds))
    warnings: list[str] = []
    for replica in replicas:
        for warning in replica.state.warmup.warnings if replica.state is not None else ():
            if warning not in warnings:
                warnings.append(warning)
    status = WarmupStatus(**counts, last_seconds=max(finished)[1] if finished else None)  # the newest pod's
    if warnings:  # set only when there are some: an unset list is not written
        status.warnings = warnings[:MAX_WARNINGS]
    return status


def fallback_condition(replicas: list[Replica]) -> ConditionValue:
    """GraphModeFallback: which replicas run a lower graph mode than they asked for, and why."""
    fell_back = [r for r in replicas if r.state is not None and (r.state.rung > 0 or r.state.fallbacks > 0)]
    if fell_back:
        parts = []
        for replica in fell_back:
            state = replica.state
            assert state is not None
            wanted = state.requested_mode.value if state.requested_mode else "the first choice"
            runs = state.mode.value if state.mode else "no mode yet"
            parts.append(f"{replica.name} runs {runs} instead of {wanted}"
                         + (f": {state.fallback_reason}" if state.fallback_reason else ""))
        return True, "FellBack", "; ".join(parts)
    if not any(r.state is not None for r in replicas):
        return "Unknown", "NoReports", "no runtime has reported its graph mode yet"
    return False, "AsRequested", "every reporting replica runs its requested graph mode"


def leak_condition(replicas: list[Replica]) -> ConditionValue:
    """LeakSuspected: which replicas report a memory leak or hung requests."""
    leaking = [r for r in replicas if r.state is not None and r.state.leak_suspected]
    hung = [r for r in replicas if r.state is not None and r.state.hung]
    if leaking or hung:
        reason = "MemoryLeakSuspected" if leaking else "RequestsHung"
        parts = []
        for replica in leaking:
            assert replica.state is not None
            reasons = ", ".join(replica.state.live_reasons) or "memory trend above the limits"
            parts.append(f"{replica.name}: memory leak suspected ({reasons})")
        for replica in hung:
            parts.append(f"{replica.name}: requests hung")
        return True, reason, "; ".join(parts)
    if not any(r.state is not None for r in replicas):
        return "Unknown", "NoReports", "no runtime has reported its health yet"
    return False, "Healthy", "no replica reports a leak or a hang"
