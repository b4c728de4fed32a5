"""ascend_operator.workqueue: the keyed queue the reconciles run from.

Covered: a burst of requests for one key runs it once; a request during a run runs it once more
afterwards (no change lost); one key never runs twice at once while different keys run in
parallel up to the concurrency; the worker's requeue delay is honoured; failures back off
exponentially and a success resets it; a forgotten key does not run; a paused queue runs
nothing until resumed; when the slots are full, due SPEC requests start before due REFRESH
requests, however late they came, and a key's more urgent request upgrades its queued one;
while SPEC runs are in progress only ``refresh_while_spec`` REFRESH runs go at once; delays of at
least the timer granularity are rounded up to it, so keys due within one tick start together.
"""

from __future__ import annotations

import asyncio
import math

import pytest
from ascend_operator.workqueue import QueueSettings, Urgency, WorkQueue


class Recorder:
    def __init__(self, delay_s: float = 0.0, requeue: float | None = None, fail: int = 0) -> None:
        self.runs: list[tuple[str, float]] = []
        self.active: dict[str, int] = {}
        self.max_parallel = 0
        self.overlap = False
        self.delay_s, self.requeue, self.fail = delay_s, requeue, fail

    async def __call__(self, key: str) -> float | None:
        loop = asyncio.get_running_loop()
        self.runs.append((key, loop.time()))
        self.active[key] = self.active.get(key, 0) + 1
        self.overlap |= self.active[key] > 1
        self.max_parallel = max(self.max_parallel, sum(self.active.values()))
        try:
            await asyncio.sleep(self.delay_s)
            if self.fail > 0:
                self.fail -= 1
                raise RuntimeError("boom")
            return self.requeue
        finally:
            self.active[key] -= 1


async def run_queue(worker: Recorder, settings: QueueSettings | None = None) -> WorkQueue:
    queue = WorkQueue(worker, settings)
    queue.start()
    return queue


async def test_a_burst_runs_once_and_a_request_during_a_run_runs_once_more() -> None:
    worker = Recorder(delay_s=0.1)
    queue = await run_queue(worker)
    for _ in range(10):
        queue.request("a")
    await asyncio.sleep(0.05)
    for _ in range(5):
        queue.request("a")  # while running
    await asyncio.sleep(0.4)
    await queue.stop()
    assert [key for key, _ in worker.runs] == ["a", "a"]
    assert not worker.overlap


async def test_keys_run_in_parallel_up_to_the_concurrency() -> None:
    worker = Recorder(delay_s=0.1)
    queue = await run_queue(worker, QueueSettings(concurrency=3))
    for key in "abcdefg":
        queue.request(key)
    await asyncio.sleep(0.5)
    await queue.stop()
    assert sorted(key for key, _ in worker.runs) == list("abcdefg")
    assert worker.max_parallel == 3


async def test_the_requeue_delay_is_honoured() -> None:
    worker = Recorder(requeue=0.2)
    queue = await run_queue(worker)
    queue.request("a")
    await asyncio.sleep(0.5)
    await queue.stop()
    times = [t for _, t in worker.runs]
    assert len(times) == 3  # at 0, 0.2, 0.4
    assert all(0.18 <= b - a <= 0.3 for a, b in zip(times, times[1:]))


async def test_failures_back_off_exponentially_and_a_success_resets() -> None:
    worker = Recorder(fail=3)
    queue = await run_queue(worker, QueueSettings(backoff_base_s=0.05, backoff_max_s=1.0))
    queue.request("a")
    await asyncio.sleep(0.6)
    gaps = [b - a for (_, a), (_, b) in zip(worker.runs, worker.runs[1:])]
    assert len(worker.runs) == 4  # three failures, then a success that asks for no requeue
    assert gaps[0] == pytest.approx(0.05, abs=0.03) and gaps[1] == pytest.approx(0.1, abs=0.03)
    assert gaps[2] == pytest.approx(0.2, abs=0.04)
    assert queue.failures("a") == 0
    await queue.stop()


async def test_a_forgotten_key_does_not_run_and_a_paused_queue_waits() -> None:
    worker = Recorder()
    queue = await run_queue(worker)
    queue.request("gone", 0.1)
    queue.forget("gone")
    queue.pause()
    queue.request("later")
    await asyncio.sleep(0.3)
    assert worker.runs == []
    queue.resume()
    await asyncio.sleep(0.1)
    await queue.stop()
    assert [key for key, _ in worker.runs] == ["later"]


async def test_when_slots_are_full_spec_requests_go_before_refreshes() -> None:
    worker = Recorder(delay_s=0.05)
    queue = await run_queue(worker, QueueSettings(concurrency=1))
    queue.request("busy")
    await asyncio.sleep(0.01)  # "busy" holds the only slot
    for key in ("r1", "r2", "r3"):
        queue.request(key)  # refreshes, due first
    queue.request("s1", urgency=Urgency.SPEC)
    queue.request("s2", urgency=Urgency.SPEC)
    queue.request("r3", urgency=Urgency.SPEC)  # upgraded: now a spec request
    await asyncio.sleep(0.5)
    await queue.stop()
    # r3 keeps its earlier due time, now among the spec requests.
    assert [key for key, _ in worker.runs] == ["busy", "r3", "s1", "s2", "r1", "r2"]


async def test_a_request_during_a_run_keeps_its_urgency() -> None:
    worker = Recorder(delay_s=0.05)
    queue = await run_queue(worker, QueueSettings(concurrency=1))
    queue.request("a")
    await asyncio.sleep(0.01)
    queue.request("b")
    queue.request("a", urgency=Urgency.SPEC)  # while "a" runs: again, urgently
    await asyncio.sleep(0.3)
    await queue.stop()
    assert [key for key, _ in worker.runs] == ["a", "a", "b"]


async def test_while_specs_run_refreshes_get_only_their_share_of_the_slots() -> None:
    worker = Recorder(delay_s=0.2)
    queue = await run_queue(worker, QueueSettings(concurrency=8, refresh_while_spec=2))
    queue.request("spec", urgency=Urgency.SPEC)
    for key in "abcdef":
        queue.request(key)
    await asyncio.sleep(0.1)
    assert worker.max_parallel == 3  # the spec run and two refreshes
    await asyncio.sleep(0.2)  # the spec run ended: the refreshes take every slot
    queue.request("later")
    await asyncio.sleep(0.1)
    assert worker.max_parallel == 5  # the four refreshes left and "later" at once
    await asyncio.sleep(0.3)
    await queue.stop()
    assert sorted(key for key, _ in worker.runs) == sorted(["spec", *"abcdef", "later"])


async def test_long_delays_are_rounded_up_to_the_granularity_so_due_keys_start_together() -> None:
    worker = Recorder()
    loop = asyncio.get_running_loop()
    queue = WorkQueue(worker, QueueSettings(timer_granularity_s=0.2), clock=loop.time)
    queue.start()
    await asyncio.sleep(math.ceil(loop.time() / 0.2) * 0.2 + 0.01 - loop.time())  # just past a tick
    for key, delay in (("a", 0.2), ("b", 0.24), ("c", 0.28)):  # due within the same 0.2 s
        queue.request(key, delay)
    queue.request("short", 0.05)  # shorter than the granularity: exact
    await asyncio.sleep(0.8)
    await queue.stop()
    starts = dict(worker.runs)
    assert set(starts) == {"a", "b", "c", "short"}
    # a, b and c came due at the same multiple of 0.2 s, and started together, on one wake-up.
    tick = round(starts["a"] / 0.2) * 0.2
    assert all(starts[key] == pytest.approx(tick, abs=0.02) for key in "abc")
    assert starts["short"] < starts["a"] - 0.1


async def test_an_earlier_request_moves_the_loops_alarm_forward() -> None:
    worker = Recorder()
    loop = asyncio.get_running_loop()
    queue = WorkQueue(worker, QueueSettings(timer_granularity_s=0), clock=loop.time)
    queue.start()
    queue.request("late", 5.0)
    await asyncio.sleep(0.05)  # the loop sleeps until "late"
    start = loop.time()
    queue.request("soon", 0.1)
    await asyncio.sleep(0.3)
    await queue.stop()
    assert [key for key, _ in worker.runs] == ["soon"]
    assert worker.runs[0][1] - start == pytest.approx(0.1, abs=0.05)
