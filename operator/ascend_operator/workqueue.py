"""A keyed work queue for level-based reconciles (pure asyncio; the controller-runtime pattern).

Watch events, our own status writes and timers all *request* a key (``namespace/name``); the
queue runs the worker for that key later, at most once at a time per key and at most
``concurrency`` keys at a time. Requests for a key that is queued are merged (the earliest due
time wins); a request for a key whose worker is running makes it run once more afterwards, so a
change seen mid-reconcile is never lost, and a burst of events costs one reconcile.

The worker returns when it wants to run again (``requeue_after`` seconds: short while replicas
start, the resync interval when steady). A worker that raises is retried with exponential
backoff (``backoff_base_s`` doubling up to ``backoff_max_s``); a success resets it.

Timers are coarse: a delay of at least ``timer_granularity_s`` is rounded up to the next multiple
of it, so the resyncs of many keys come due together and one wake-up of the loop starts them all,
and one timer handle wakes the loop for the earliest entry. Each resync on a timer of its own
cost a wake-up of the loop, 0.25-0.45 ms of CPU against 0.03 ms for the skipped pass itself:
most of the operator's CPU while idle (bench/queue_resync.py, bench/README.md).

A request is :attr:`Urgency.SPEC` (a resource created or changed: a spec to apply) or
:attr:`Urgency.REFRESH` (its children or pods changed, a resync, a retry). When every slot is
busy, due SPEC keys start before due REFRESH keys (like controller-runtime's priority queue),
and while any SPEC run is in progress at most ``refresh_while_spec`` REFRESH runs go at once:
1,000 resources applied at once get their children before the earlier ones' pods are followed.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

Worker = Callable[[str], Awaitable[float | None]]


class Urgency(enum.IntEnum):
    """What a request is for; lower runs first when slots are short."""

    SPEC = 0
    REFRESH = 1


@dataclass(frozen=True)
class QueueSettings:
    concurrency: int = 8
    #: REFRESH runs at once while a SPEC run is in progress: status refreshes yield the API
    #: server to the specs still to apply (their writes cost it more than ours do).
    refresh_while_spec: int = 4
    backoff_base_s: float = 1.0
    backoff_max_s: float = 300.0
    #: Delays at least this long are rounded up to a multiple of it (see the module docstring).
    timer_granularity_s: float = 1.0


class WorkQueue:
    """Run ``worker(key)`` for requested keys; see the module docstring."""

    def __init__(self, worker: Worker, settings: QueueSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._worker = worker
        self._settings = settings or QueueSettings()
        self._clock = clock
        #: key -> (when it should run, urgency) (queued keys only).
        self._due: dict[str, tuple[float, Urgency]] = {}
        #: Entries (when, urgency, order, key); superseded ones are skipped when popped.
        self._timers: list[tuple[float, Urgency, int, str]] = []  # not yet due
        self._ready: list[tuple[Urgency, float, int, str]] = []  # due: by urgency, then time
        self._order = itertools.count()
        self._running: set[str] = set()
        #: Urgency of each running key's run.
        self._running_as: dict[str, Urgency] = {}
        #: Requested while running: run once more right after, with this urgency.
        self._again: dict[str, Urgency] = {}
        self._failures: dict[str, int] = {}
        self._forgotten: set[str] = set()
        self._wakeup = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._paused = False
        #: The one timer handle that wakes the loop, and the time it is set for.
        self._alarm: asyncio.TimerHandle | None = None
        self._alarm_at = math.inf

    # ------------------------------------------------------------------ requests

    def request(self, key: str, delay_s: float = 0.0, urgency: Urgency = Urgency.REFRESH) -> None:
        """Run ``key`` within ``delay_s`` seconds (sooner if already due sooner); the most urgent
        of a key's merged requests counts."""

        self._forgotten.discard(key)
        if key in self._running:
            if delay_s <= 0:
                self._again[key] = min(urgency, self._again.get(key, urgency))
            else:
                self._schedule(key, delay_s, urgency)
            return
        self._schedule(key, delay_s, urgency)

    def forget(self, key: str) -> None:
        """Drop ``key`` (its object is gone): queued runs are cancelled, backoff reset."""

        self._due.pop(key, None)
        self._again.pop(key, None)
        self._failures.pop(key, None)
        self._forgotten.add(key)

    def _schedule(self, key: str, delay_s: float, urgency: Urgency = Urgency.REFRESH) -> None:
        when = self._clock() + max(0.0, delay_s)
        granularity = self._settings.timer_granularity_s
        if granularity > 0 and delay_s >= granularity:
            when = math.ceil(when / granularity) * granularity
        current = self._due.get(key)
        if current is not None:
            when, urgency = min(when, current[0]), min(urgency, current[1])
            if (when, urgency) == current:
                return
        self._due[key] = (when, urgency)
        heapq.heappush(self._timers, (when, urgency, next(self._order), key))
        self._wakeup.set()

    @property
    def pending(self) -> int:
        return len(self._due) + len(self._running)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    # ------------------------------------------------------------------ running

    def pause(self) -> None:
        """Keep taking requests but run nothing (a standby replica: see ``ascend_operator.leader``)."""

        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wakeup.set()

    def start(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._loop(), name="ascend-llm-workqueue")

    async def stop(self) -> None:
        self._disarm()
        tasks = [t for t in (self._loop_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop_task = None

    def _promote(self, now: float) -> None:
        """Move the entries that are due from the timers to the ready heap."""

        while self._timers and self._timers[0][0] <= now:
            when, urgency, order, key = heapq.heappop(self._timers)
            if self._due.get(key) == (when, urgency):
                heapq.heappush(self._ready, (urgency, when, order, key))

    def _refresh_held(self) -> bool:
        """Whether a REFRESH run must wait: SPEC runs are in progress and the REFRESH share is used."""
        values = self._running_as.values()
        return Urgency.SPEC in values and sum(u == Urgency.REFRESH for u in values) >= self._settings.refresh_while_spec

    def _next_ready(self) -> tuple[str, Urgency] | None:
        while self._ready:
            urgency, when, _, key = self._ready[0]
            if self._due.get(key) != (when, urgency):
                heapq.heappop(self._ready)
                continue  # superseded by a sooner or more urgent request, or forgotten
            if urgency == Urgency.REFRESH and self._refresh_held():
                return None  # a finished run wakes the loop
            heapq.heappop(self._ready)
            del self._due[key]
            if key in self._running:
                self._again[key] = min(urgency, self._again.get(key, urgency))
                continue
            return key, urgency
        return None

    async def _loop(self) -> None:
        while True:
            self._wakeup.clear()
            if self._paused:
                await self._wakeup.wait()
                continue
            self._promote(self._clock())
            while len(self._running) < self._settings.concurrency:
                found = self._next_ready()
                if found is None:
                    break
                key, urgency = found
                self._running.add(key)
                self._running_as[key] = urgency
                task = asyncio.get_running_loop().create_task(self._run(key), name=f"reconcile {key}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            # Full: a finished run wakes the loop. Otherwise the next timer does.
            if self._timers and len(self._running) < self._settings.concurrency:
                self._arm(self._timers[0][0])
            await self._wakeup.wait()

    def _arm(self, when: float) -> None:
        """Wake the loop at ``when``: the alarm moves only when an earlier entry comes (one that
        fires for a superseded entry wakes the loop for nothing, which then sets it again)."""

        if self._alarm is not None and self._alarm_at <= when:
            return
        self._disarm()
        self._alarm = asyncio.get_running_loop().call_later(max(0.0, when - self._clock()), self._ring)
        self._alarm_at = when

    def _ring(self) -> None:
        self._alarm, self._alarm_at = None, math.inf
        self._wakeup.set()

    def _disarm(self) -> None:
        if self._alarm is not None:
            self._alarm.cancel()
        self._alarm, self._alarm_at = None, math.inf

    async def _run(self, key: str) -> None:
        next_delay: float | None = None
        try:
            try:
                next_delay = await self._worker(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # one object's failure never stops the queue
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                next_delay = min(self._settings.backoff_max_s,
                                 self._settings.backoff_base_s * 2 ** (failures - 1))
                logger.warning("reconcile of %s failed (%s: %s); retrying in %.0fs",
                               key, type(error).__name__, error, next_delay)
        finally:
            self._running.discard(key)
            self._running_as.pop(key, None)
            again = self._again.pop(key, None)
            if key in self._forgotten:
                pass
            elif again is not None:
                self._schedule(key, 0.0, again)
            elif next_delay is not None:
                self._schedule(key, next_delay)
            self._wakeup.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """For tests: whether every due key ran within ``timeout_s`` (keys due later do not count)."""

        deadline = self._clock() + timeout_s
        while self._clock() < deadline:
            now = self._clock()
            if not self._running and not any(when <= now for when, _ in self._due.values()):
                return True
            await asyncio.sleep(0.05)
        return False
