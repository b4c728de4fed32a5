"""A keyed work queue for level-based reconciles (pure asyncio; the controller-runtime pattern).

Watch events, our own status writes and timers all *request* a key (``namespace/name``); the
queue runs the worker for that key later, at most once at a time per key and at most
``concurrency`` keys at a time. Requests for a key that is queued are merged (the earliest due
time wins); a request for a key whose worker is running makes it run once more afterwards, so a
change seen mid-reconcile is never lost, and a burst of events costs one reconcile.

The worker returns when it wants to run again (``requeue_after`` seconds: short while replicas
start, the resync interval when steady). A worker that raises is retried with exponential
backoff (``backoff_base_s`` doubling up to ``backoff_max_s``); a success resets it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

Worker = Callable[[str], Awaitable[float | None]]


@dataclass(frozen=True)
class QueueSettings:
    concurrency: int = 8
    backoff_base_s: float = 1.0
    backoff_max_s: float = 300.0


class WorkQueue:
    """Run ``worker(key)`` for requested keys; see the module docstring."""

    def __init__(self, worker: Worker, settings: QueueSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._worker = worker
        self._settings = settings or QueueSettings()
        self._clock = clock
        self._due: dict[str, float] = {}  # key -> when it should run (queued keys only)
        self._heap: list[tuple[float, int, str]] = []
        self._order = itertools.count()
        self._running: set[str] = set()
        self._again: set[str] = set()  # requested while running: run once more right after
        self._failures: dict[str, int] = {}
        self._forgotten: set[str] = set()
        self._wakeup = asyncio.Event()
        self._slots = asyncio.Semaphore(self._settings.concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._paused = False

    # ------------------------------------------------------------------ requests

    def request(self, key: str, delay_s: float = 0.0) -> None:
        """Run ``key`` within ``delay_s`` seconds (sooner if already due sooner)."""

        self._forgotten.discard(key)
        if key in self._running:
            if delay_s <= 0:
                self._again.add(key)
            else:
                self._schedule(key, delay_s)
            return
        self._schedule(key, delay_s)

    def forget(self, key: str) -> None:
        """Drop ``key`` (its object is gone): queued runs are cancelled, backoff reset."""

        self._due.pop(key, None)
        self._again.discard(key)
        self._failures.pop(key, None)
        self._forgotten.add(key)

    def _schedule(self, key: str, delay_s: float) -> None:
        when = self._clock() + max(0.0, delay_s)
        current = self._due.get(key)
        if current is not None and current <= when:
            return
        self._due[key] = when
        heapq.heappush(self._heap, (when, next(self._order), key))
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
        tasks = [t for t in (self._loop_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop_task = None

    async def _loop(self) -> None:
        while True:
            self._wakeup.clear()
            if self._paused:
                await self._wakeup.wait()
                continue
            now = self._clock()
            while self._heap and self._heap[0][0] <= now:
                when, _, key = heapq.heappop(self._heap)
                if self._due.get(key) != when:
                    continue  # superseded by an earlier request, or forgotten
                if key in self._running:
                    self._again.add(key)
                    del self._due[key]
                    continue
                del self._due[key]
                self._running.add(key)
                task = asyncio.get_running_loop().create_task(self._run(key), name=f"reconcile {key}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            timeout = max(0.0, self._heap[0][0] - self._clock()) if self._heap else None
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except TimeoutError:
                pass

    async def _run(self, key: str) -> None:
        next_delay: float | None = None
        try:
            async with self._slots:
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
            if key in self._forgotten:
                self._again.discard(key)
            elif key in self._again:
                self._again.discard(key)
                self._schedule(key, 0.0)
            elif next_delay is not None:
                self._schedule(key, next_delay)
            self._wakeup.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """For tests: whether every due key ran within ``timeout_s`` (keys due later do not count)."""

        deadline = self._clock() + timeout_s
        while self._clock() < deadline:
            now = self._clock()
            if not self._running and not any(when <= now for when in self._due.values()):
                return True
            await asyncio.sleep(0.05)
        return False
