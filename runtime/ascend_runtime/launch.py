"""How one launch of the engine ended, and the restart budget the supervisor spends on crashes.

:class:`LaunchResult` is what a role (:mod:`ascend_runtime.leader`, :mod:`ascend_runtime.worker`)
hands back to the supervisor's one restart loop; :class:`LaunchKind` says what the loop does
next. :class:`RestartBudget` counts crashes with exponential backoff and forgets them after a
healthy run of ``runtime.restart.resetAfterS``, so sparse crashes over weeks do not add up to
``maxRestarts``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ascend_runtime.config import RestartPolicy, RuntimeState
from ascend_runtime.logclass import Outcome


class LaunchKind(str, enum.Enum):
    """What ended a launch, and so what the restart loop does next."""

    #: A stop was requested (SIGTERM): exit 0.
    STOPPED = "stopped"
    #: The leader's graph mode failed: one rung down at once, uncounted.
    FALLBACK = "fallback"
    #: The engine (or a command before it) failed: relaunch after a backoff, counted.
    CRASH = "crash"
    #: A worker: the leader fell back or relaunched its engine; relaunch for it, uncounted.
    FOLLOW = "follow"
    #: A worker: the leader failed, so the whole group restarts; exit.
    LEADER_FAILED = "leader_failed"
    #: A worker: its own engine process died. The group's collectives cannot take a relaunched
    #: rank back (recovery would wait for HCCL's connect timeout): exit, so that the
    #: LeaderWorkerSet recreates the whole group.
    ENGINE_LOST = "engine_lost"


@dataclass
class LaunchResult:
    kind: LaunchKind
    reason: str
    outcome: Outcome | None = None
    #: Reached Ready before it ended.
    served: bool = False
    #: The restart metric's label when the log shows no failure signature.
    restart_reason: str = "crash"
    #: FOLLOW: the leader state to launch for next (None: wait for the leader's mode again).
    leader: RuntimeState | None = None
    #: Seconds it served (Ready) before it ended.
    served_s: float = 0.0

    @property
    def restart_label(self) -> str:
        failed = self.outcome is not None and self.outcome.is_failure
        return self.outcome.value if failed and self.outcome is not None else self.restart_reason


class RestartBudget:
    """Counted relaunches with exponential backoff; a long healthy run starts the count over."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self.count = 0

    def spend(self, result: LaunchResult) -> float | None:
        """Count one failed launch; the backoff before the next, or None when the budget is spent."""

        if result.served_s >= self.policy.reset_after_s:
            self.count = 0  # this engine served long enough: earlier crashes no longer count
        self.count += 1
        if self.count > self.policy.max_restarts:
            return None
        return min(self.policy.backoff_initial_s * (2 ** (self.count - 1)), self.policy.backoff_max_s)
