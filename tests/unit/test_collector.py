"""ascend_operator.collector: full collections skip the heap that survived the last one."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref
from collections.abc import Iterator

import kopf
import pytest
from ascend_operator import collector
from ascend_operator.handlers import handle_startup
from ascend_operator.settings import load_settings


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, weakref.ref[Node]]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


@pytest.fixture
def quiet_gc() -> Iterator[None]:
    """No automatic collection during a test (each is counted), and nothing left frozen after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_what_survived_a_full_collection_is_frozen_and_skipped_by_the_next(quiet_gc: None) -> None:
    freezer = collector.Freezer(clock=Clock())
    assert freezer.step() is collector.Step.NOTHING and gc.get_freeze_count() == 0
    survivor, alive = cycle()
    gc.collect()
    assert freezer.step() is collector.Step.FROZE
    assert gc.get_freeze_count() > 0
    del survivor  # a garbage cycle now, but frozen: a full collection does not look at it
    gc.collect()
    assert alive() is not None
    assert freezer.step() is collector.Step.FROZE  # that collection's survivors (none new) frozen
    assert freezer.step() is collector.Step.NOTHING


def test_the_whole_heap_is_collected_every_unfreeze_interval(quiet_gc: None) -> None:
    clock = Clock()
    freezer = collector.Freezer(unfreeze_s=3600, clock=clock)
    survivor, alive = cycle()
    gc.collect()
    freezer.step()
    del survivor
    clock.now += 3599
    assert freezer.step() is collector.Step.NOTHING and alive() is not None
    clock.now += 1
    assert freezer.step() is collector.Step.COLLECTED
    assert alive() is None
    assert gc.get_freeze_count() > 0  # what is still alive is frozen again
    clock.now += 3599
    assert freezer.step() is collector.Step.NOTHING


def test_objects_made_after_the_freeze_are_collected_as_usual(quiet_gc: None) -> None:
    freezer = collector.Freezer(clock=Clock())
    gc.collect()
    freezer.step()
    young, alive = cycle()
    del young
    gc.collect()
    assert alive() is None


async def test_the_operator_freezes_after_a_full_collection_and_unfreezes_when_it_stops(
        quiet_gc: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector, "CHECK_INTERVAL_S", 0.01)
    memo = kopf.Memo()
    memo[handle_startup.SETTINGS_KEY] = load_settings({
        "ASCEND_LLM_OPERATOR_API_SERVER": "http://127.0.0.1:1", "ASCEND_LLM_OPERATOR_STANDALONE": "true"})
    await handle_startup.configure(kopf.OperatorSettings(), memo, logging.getLogger("t"))
    try:
        await asyncio.sleep(0.05)
        assert gc.get_freeze_count() == 0  # no full collection yet
        gc.collect()
        await asyncio.sleep(0.05)
        assert gc.get_freeze_count() > 0
    finally:
        await handle_startup.cleanup(memo)
    assert gc.get_freeze_count() == 0
