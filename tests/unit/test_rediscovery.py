"""The operator watches its resource again when discovery serves it after kopf gave up
(ascend_operator.rediscovery), through kopf's own registry and rescan; the API server's discovery
is replaced by a function returning what it would serve. tests/cluster/test_install.py shows the
same on a real API server (the CRD deleted and applied again)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import errors, scanning, watching
from kopf._cogs.structs.references import Resource

import ascend_operator.main  # noqa: F401  (registers the operator's handlers in kopf's registry)
from ascend_operator import rediscovery as module
from ascend_operator.api import GROUP, PLURAL, VERSION
from ascend_operator.rediscovery import Rediscovery, guard_watches, new_insights

SERVED = Resource(group=GROUP, version=VERSION, plural=PLURAL, kind="AscendLLMDeployment",
                  namespaced=True, preferred=True, verbs=["list", "watch", "get", "patch"])


def rediscovery(monkeypatch: pytest.MonkeyPatch, served: list[set[Resource]], interval_s: float = 0.01) -> Rediscovery:
    """A Rediscovery whose discovery reads return ``served[-1]``, counting reads in ``served``."""

    reads: list[int] = []

    async def scan(*, groups: Any, settings: Any, logger: Any) -> set[Resource]:
        assert groups == {GROUP}  # only the operator's own group is rescanned
        reads.append(1)
        return served[-1]

    monkeypatch.setattr(scanning, "scan_resources", scan)
    found = Rediscovery(new_insights(), kopf.get_default_registry(), kopf.OperatorSettings(),
                        logging.getLogger("test"), interval_s=interval_s)
    found.reads = reads  # type: ignore[attr-defined]
    return found


async def test_a_rescan_watches_the_resource_once_discovery_serves_it(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[set[Resource]] = [set()]
    found = rediscovery(monkeypatch, served)
    assert not found.watching()
    assert await found.rescan() is False  # the CRD not served yet: nothing to watch
    served.append({SERVED})
    assert await found.rescan() is True
    assert SERVED in found.insights.watched_resources


async def test_the_loop_rescans_only_while_the_resource_is_not_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[set[Resource]] = [set()]
    found = rediscovery(monkeypatch, served)
    found.start()
    try:
        while len(found.reads) < 3:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
        served.append({SERVED})
        while not found.watching():
            await asyncio.sleep(0.01)
        reads = len(found.reads)  # type: ignore[attr-defined]
        await asyncio.sleep(0.1)  # ten intervals: watched, so no discovery read
        assert len(found.reads) == reads  # type: ignore[attr-defined]
    finally:
        found.stop()


async def test_a_failed_discovery_read_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    async def scan(*, groups: Any, settings: Any, logger: Any) -> set[Resource]:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("API server unreachable")
        return {SERVED}

    monkeypatch.setattr(scanning, "scan_resources", scan)
    found = Rediscovery(new_insights(), kopf.get_default_registry(), kopf.OperatorSettings(),
                        logging.getLogger("test"), interval_s=0.01)
    found.start()
    try:
        async with asyncio.timeout(5):
            while not found.watching():
                await asyncio.sleep(0.01)
    finally:
        found.stop()
    assert len(calls) >= 2


# ------------------------------------------------------------------------- a watch on a resource gone


def _guarded(monkeypatch: pytest.MonkeyPatch, outcomes: list[Any]) -> list[int]:
    """kopf's watch with the guard over a stream that raises or yields ``outcomes`` in turn."""

    calls: list[int] = []

    async def stream(**kwargs: Any) -> Any:
        calls.append(1)
        outcome = outcomes[min(len(calls), len(outcomes)) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        yield outcome

    monkeypatch.setattr(watching, "continuous_watch", stream)
    guard_watches(pause_s=0.0)
    guard_watches(pause_s=0.0)  # idempotent: one wrapper, not two
    assert getattr(watching.continuous_watch, "ascend_guarded", False)
    return calls


async def _watch(iterations: int) -> list[Any]:
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0.0
    return [event async for event in watching.infinite_watch(
        settings=settings, resource=SERVED, namespace=None, _iterations=iterations)]


async def test_a_404_ends_the_watch_stream_and_kopf_opens_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unguarded, kopf 1.45 lets the 404 out of its watch task and the operator stops (seen on a
    real API server when the CRD is deleted under an open watch)."""

    not_served = errors.APINotFoundError("404 page not found", status=404, headers={})
    event = {"type": "ADDED", "object": {"metadata": {"name": "a"}}}
    calls = _guarded(monkeypatch, [not_served, not_served, event])
    assert await _watch(3) == [event]
    assert len(calls) == 3


async def test_other_watch_errors_still_stop_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    _guarded(monkeypatch, [errors.APIForbiddenError("forbidden", status=403, headers={})])
    with pytest.raises(errors.APIForbiddenError):
        await _watch(2)


async def test_without_the_guard_kopfs_watch_lets_a_404_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the guard is for, and that it wraps what kopf calls (a kopf release that renames its
    watch function fails this)."""

    async def stream(**kwargs: Any) -> Any:
        raise errors.APINotFoundError("404 page not found", status=404, headers={})
        yield  # an async generator, as kopf's

    monkeypatch.setattr(watching, "continuous_watch", stream)
    with pytest.raises(errors.APINotFoundError):
        await _watch(1)


async def test_404s_in_a_row_double_the_pause_warn_once_and_ask_for_a_rescan(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    not_served = errors.APINotFoundError("404 page not found", status=404, headers={})
    event = {"type": "ADDED", "object": {"metadata": {"name": "a"}}}
    outcomes: list[Any] = [not_served, not_served, not_served, event, not_served]
    calls: list[int] = []

    async def stream(**kwargs: Any) -> Any:
        calls.append(1)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        yield outcome

    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    asked: list[int] = []
    monkeypatch.setattr(watching, "continuous_watch", stream)
    monkeypatch.setattr(module, "_not_served_runs", {})
    monkeypatch.setattr(module, "_not_served_listeners", [lambda: asked.append(1)])
    monkeypatch.setattr(module.asyncio, "sleep", sleep)
    module.guard_watches(pause_s=2.0, max_pause_s=5.0)
    caplog.set_level(logging.DEBUG, logger=module.__name__)
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0.0
    events = [e async for e in watching.infinite_watch(settings=settings, resource=SERVED, namespace=None,
                                                       _iterations=5)]
    assert events == [event]
    assert [p for p in pauses if p] == [2.0, 4.0, 5.0, 2.0]  # doubling to the cap; an event starts it again
    assert len(asked) == 4  # a discovery read asked for at each 404
    warnings = [r for r in caplog.records if r.name == module.__name__ and r.levelno == logging.WARNING]
    assert len(warnings) == 2  # the first of each run of 404s


async def test_after_a_404_the_rescan_runs_while_watched_and_drops_a_resource_no_longer_served(
        monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[set[Resource]] = [{SERVED}]
    found = rediscovery(monkeypatch, served)
    assert await found.rescan() is True
    found.start()
    try:
        await asyncio.sleep(0.05)  # five checks
        assert len(found.reads) == 1  # type: ignore[attr-defined]  # watched: no discovery read since
        served.append(set())  # the CRD deleted; kopf still watches the resource
        for listener in list(module._not_served_listeners):
            listener()  # what a watch's 404 does
        async with asyncio.timeout(5):
            while found.watching():
                await asyncio.sleep(0.01)
    finally:
        found.stop()
    assert found.not_served not in module._not_served_listeners  # stop unregisters it


async def test_the_operators_start_up_guards_kopfs_watches(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_operator.handlers import handle_startup
    from ascend_operator.settings import load_settings

    async def unguarded(**kwargs: Any) -> Any:
        yield {}

    monkeypatch.setattr(watching, "continuous_watch", unguarded)
    memo = kopf.Memo()
    memo[handle_startup.SETTINGS_KEY] = load_settings({
        "ASCEND_LLM_OPERATOR_API_SERVER": "http://127.0.0.1:1", "ASCEND_LLM_OPERATOR_STANDALONE": "true"})
    await handle_startup.configure(kopf.OperatorSettings(), memo, logging.getLogger("t"))
    try:
        assert getattr(watching.continuous_watch, "ascend_guarded", False)
    finally:
        await handle_startup.cleanup(memo)
