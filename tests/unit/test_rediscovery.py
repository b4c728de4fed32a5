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
